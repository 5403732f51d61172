"""The API reference (mkdocstrings renders the package's docstrings) and the user pages cite no internal review round.

Users do not know the project's review rounds: "found by review 61: ..." or "(review 66)" in a docstring reads as
noise on docs/api/*.md. Docstrings say "earlier versions" or give the fact alone; CHANGELOG.md keeps its tags.
"""

import ast
import re

from tests._paths import ROOT

#: a review round: "review 61", "Reviews 60", also wrapped over two lines ("review\n    64")
ROUND = re.compile(r"\breviews?\s+\d+", re.IGNORECASE)
#: triage's summary line quoted on the pages ("accept 6, review 14") counts cases, not rounds
TRIAGE_COUNTS = re.compile(r"accept\s+\d+,\s*$", re.IGNORECASE)
#: a triple-quoted string (every docstring of the package is one): the quick look before the exact one (``ast``,
#: whose parse of the whole package takes seconds) at the files it finds a mention in
TRIPLE_QUOTED = re.compile(r'"""(.*?)"""|\'\'\'(.*?)\'\'\'', re.DOTALL)
#: a line that is a comment only (plain ``#`` comments are contributor notes, and may hold quotes)
COMMENT_LINE = re.compile(r"^[ \t]*#.*$", re.MULTILINE)


def _rounds(text: str) -> list[str]:
    """The review-round mentions in ``text``, each with a little context."""
    return [" ".join(text[max(0, m.start() - 40):m.end() + 20].split()) for m in ROUND.finditer(text)
            if not TRIAGE_COUNTS.search(text[max(0, m.start() - 20):m.start()])]


def _docstrings(tree: ast.AST):
    """``(line, text)`` of every docstring mkdocstrings renders: module, class and function docstrings, and the
    attribute docstrings (a string right after an assignment)."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for i, stmt in enumerate(body):
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)):
                continue
            first = i == 0 and isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            if first or (i > 0 and isinstance(body[i - 1], (ast.Assign, ast.AnnAssign))):
                yield stmt.lineno, stmt.value.value


def _attribute_comments(source: str):
    """``(line, text)`` of every block of ``#:`` comments (attribute docs), its lines joined."""
    block, start = [], 0
    for number, line in enumerate(source.splitlines() + [""], 1):
        if line.lstrip().startswith("#:"):
            start = start or number
            block.append(line.lstrip()[2:])
        elif block:
            yield start, "\n".join(block)
            block, start = [], 0


def _may_cite(source: str) -> bool:
    """Whether a triple-quoted string of ``source`` (comment lines left out) mentions a round."""
    return any(_rounds(m.group(1) or m.group(2) or "") for m in TRIPLE_QUOTED.finditer(COMMENT_LINE.sub("", source)))


def test_round_pattern_finds_wrapped_mentions_and_skips_triage_counts():
    assert _rounds("found by review 61: x") and _rounds("Found by hostile\n    review\n    64)")
    assert _rounds("(Reviews 60 and 61)")
    assert not _rounds("triage of 12 new case(s): accept 6, review 14: {...}")
    assert not _rounds("``tests/metrics/test_quality_review68.py`` and earlier versions")


def test_quick_look_finds_what_the_parse_finds():
    source = 'X = 1\n"""Found by\n    review 61."""\n# a note """ (review 62)\ndef f():\n    """(Review 63)."""\n'
    assert _may_cite(source) and len([t for _, t in _docstrings(ast.parse(source)) if _rounds(t)]) == 2
    assert not _may_cite('def f():\n    """Earlier versions."""\n    return 1  # review 64\n')


def test_package_docstrings_cite_no_review_round():
    found = []
    for path in sorted((ROOT / "monai_unc").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        texts = list(_attribute_comments(source))
        if _may_cite(source):
            texts += list(_docstrings(ast.parse(source, filename=str(path))))
        found += [f"{where}:{line}: {hit}" for line, text in texts for hit in _rounds(text)]
    assert not found, "docstrings citing internal review rounds (say 'earlier versions'):\n" + "\n".join(found)


def test_user_pages_cite_no_review_round():
    pages = sorted((ROOT / "docs").rglob("*.md"))
    assert pages
    found = [f"{page.relative_to(ROOT)}: {hit}" for page in pages for hit in _rounds(page.read_text(encoding="utf-8"))]
    assert not found, "user pages citing internal review rounds:\n" + "\n".join(found)
