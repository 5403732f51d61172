"""Review 67 follow-up: the docstring examples of ``monai_unc`` leave no folder behind.

23 examples made their folder with ``tempfile.mkdtemp()`` and never removed it, so every doctest run (``make test``)
left 22 folders in the temporary directory. An example now uses ``tempfile.TemporaryDirectory()`` (a ``with`` block,
or ``cleanup()`` at its end). Checked on the source text (parsing every module costs seconds): no example line calls
``mkdtemp``, and a docstring whose examples make a ``TemporaryDirectory()`` outside a ``with`` cleans it up.
"""

from __future__ import annotations

import re
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[2] / "monai_unc"
_EXAMPLE_LINE = re.compile(r"^\s*(>>>|\.\.\.) ")


def _examples() -> list[tuple[str, str]]:
    """``(file:line, example lines)`` of every docstring of the package holding examples.

    A docstring is taken as the text between two lines holding triple quotes (what the package's docstrings are).
    """
    out = []
    for path in sorted(_PACKAGE.rglob("*.py")):
        lines, start = [], 0
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if '"""' in line:
                if lines:
                    out.append((f"{path.relative_to(_PACKAGE.parent)}:{start}", "\n".join(lines)))
                lines, start = [], number
            elif _EXAMPLE_LINE.match(line):
                lines.append(line)
    return out


def test_no_example_leaves_a_temporary_folder():
    examples = _examples()
    assert len(examples) > 500  # the scan found the package's examples
    made = [where for where, source in examples if "mkdtemp(" in source]
    assert made == [], f"examples that leave a folder behind (use tempfile.TemporaryDirectory()): {made}"
    kept = [where for where, source in examples
            if "TemporaryDirectory()" in source and "with tempfile.TemporaryDirectory()" not in source
            and ".cleanup()" not in source]
    assert kept == [], f"examples that make a TemporaryDirectory without removing it: {kept}"


def test_no_docs_example_leaves_a_temporary_folder():
    """Found by review 75: the examples of docs/signing.md (a private signing key) and docs/monai_integration.md (the
    saved maps) made their folder with ``tempfile.mkdtemp()``, so every ``make test`` left two folders in the
    temporary directory. The same rules as for the docstrings, for the Python blocks of every docs page."""
    docs = _PACKAGE.parent / "docs"
    blocks = [(str(page.relative_to(docs.parent)), block) for page in sorted(docs.rglob("*.md"))
              for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)]
    assert len(blocks) > 30  # the scan found the pages' examples
    made = sorted({where for where, source in blocks if "mkdtemp(" in source})
    assert made == [], f"docs examples that leave a folder behind (use tempfile.TemporaryDirectory()): {made}"
    kept = sorted({where for where, source in blocks
                   if "TemporaryDirectory()" in source and "with tempfile.TemporaryDirectory()" not in source
                   and ".cleanup()" not in source})
    assert kept == [], f"docs examples that make a TemporaryDirectory without removing it: {kept}"
