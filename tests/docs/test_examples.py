"""The runnable examples in docs/inferers.md, docs/data.md and docs/conformal.md run as written."""

import re

import pytest

from tests._paths import ROOT

DOCS = ROOT / "docs"


def python_blocks(name):
    text = (DOCS / name).read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("page", ["inferers.md", "data.md", "conformal.md"])
def test_doc_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(page)
    assert blocks, f"{page} has no python example"
    for code in blocks:
        exec(compile(code, f"docs/{page}", "exec"), {"__name__": "__docs__"})
