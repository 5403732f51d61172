"""What the pages say exists does exist (hostile review: docs): every command has its section in docs/cli.md (README:
"each has `monai-unc <command> --help` and a section in `docs/cli.md`"; 7 of 13 had none), every test file a page
names is there (docs/distributed.md named tests/distributed/test_collectives.py, moved to tests/engine/), and every
``from monai_unc... import name`` and fully qualified ``monai_unc.`` name in the pages imports (docs/api/index.md's
``from monai_unc.metrics import expected_calibration_error`` raised ImportError)."""

from __future__ import annotations

import importlib
import importlib.util
import re

from tests._paths import ROOT
from tests.docs.test_commands_documented import _commands
from tests.docs.test_docstring_references import OPTIONAL, _resolves

PAGES = sorted([*(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "api").glob("*.md"), ROOT / "README.md"])
#: placeholders of the prose, not names (docs/design.md: how a deprecated module path is kept)
PLACEHOLDERS = {"monai_unc.old.part"}


def _names(text: str) -> set[str]:
    names = set(re.findall(r"`(monai_unc(?:\.\w+)+)", text))
    for module, grouped, plain in re.findall(r"from (monai_unc[\w.]*) import (?:\(([\w, \n]+)\)|([\w, ]+))", text):
        names.update(f"{module}.{n}" for n in re.split(r"[,\s]+", (grouped or plain).strip()) if n)
    return names - PLACEHOLDERS


def test_every_command_has_a_section_in_cli_md():
    headings = re.findall(r"^## (.+)$", (ROOT / "docs" / "cli.md").read_text(encoding="utf-8"), re.M)
    sections = {name for h in headings for name in re.findall(r"`([a-z-]+)`", h)}
    assert "section in `docs/cli.md`" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert not [c for c in _commands() if c not in sections]


def test_every_test_file_a_page_names_exists():
    missing = [(page.name, path) for page in PAGES
               for path in re.findall(r"`(tests/[\w/]+\.py)", page.read_text(encoding="utf-8"))
               if not (ROOT / path).is_file()]
    assert not missing


def test_every_name_a_page_imports_exists():
    missing = []
    for page in PAGES:
        for name in sorted(_names(page.read_text(encoding="utf-8"))):
            extra = next((mod for prefix, mod in OPTIONAL.items() if name.startswith(prefix)), None)
            if extra is not None and importlib.util.find_spec(extra) is None:
                continue
            if not _resolves(name):
                missing.append(f"{page.relative_to(ROOT)}: {name}")
    assert not missing, "the pages name what does not exist:\n" + "\n".join(missing)


def test_the_check_finds_a_missing_name():
    assert _names("`from monai_unc.metrics import ece, nope`") == {"monai_unc.metrics.ece", "monai_unc.metrics.nope"}
    assert _resolves("monai_unc.metrics.ece") and not _resolves("monai_unc.metrics.expected_calibration_error")


def test_sample_counts_in_example_comments_match_their_asserts():
    """docs/inferers.md said "3 members x 4 dropout masks x 2 flips = 24 samples" above a product of two sources
    whose next line asserts 8 samples (hostile review: docs): a comment's count is the one its assert checks."""
    wrong = []
    for page in PAGES:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S):
            lines = block.splitlines()
            for i, line in enumerate(lines):
                said = re.search(r"#.*= (\d+) samples", line)
                checked = next((m for later in lines[i + 1:i + 8]
                                if (m := re.search(r"shape\[0\] == (\d+)", later))), None)
                if said and checked and said.group(1) != checked.group(1):
                    wrong.append(f"{page.name}: {line.strip()} / asserts {checked.group(1)}")
    assert not wrong
