"""docs/validation.md is assembled from the committed study results (docs/validation/run_all.py)."""

from __future__ import annotations

import importlib.util
import os
import re

from tests._paths import ROOT

VALIDATION = ROOT / "docs" / "validation"


def _run_all():
    spec = importlib.util.spec_from_file_location("_run_all", VALIDATION / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_page_is_the_template_filled_with_the_results(tmp_path):
    run_all = _run_all()
    page = run_all.build_page(VALIDATION / "results", tmp_path / "docs" / "validation.md")
    text = page.read_text()
    assert "<!-- study:" not in text and "{{results}}" not in text
    for n in range(1, 11):  # every fragment is in, one heading level down
        first = (VALIDATION / "results" / f"study{n}.md").read_text().strip().splitlines()[0]
        assert first.startswith("## ") and "#" + first in text
    # the committed page is up to date with the committed results and template (figure links relative to docs/)
    rel = os.path.relpath(VALIDATION / "results", page.parent)
    committed = (ROOT / "docs" / "validation.md").read_text()
    stale = "docs/validation.md is stale: run python docs/validation/run_all.py --render-only"
    assert text.replace(rel, "validation/results") == committed, stale


def test_every_linked_figure_exists():
    text = (ROOT / "docs" / "validation.md").read_text()
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)
    assert len(figures) >= 8
    for f in figures:
        assert (ROOT / "docs" / f).is_file(), f


def test_readme_links_the_page():
    assert "docs/validation.md" in (ROOT / "README.md").read_text()
