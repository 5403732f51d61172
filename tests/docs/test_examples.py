"""The runnable examples in docs/inferers.md, docs/data.md, docs/conformal.md, docs/products.md, docs/dicom.md,
docs/monitoring.md, docs/lesions.md, docs/signing.md and docs/training.md run as written (docs/dicom.md with the
``dicom`` extra)."""

import re

import pytest

from monai_unc.product import registered_products, unregister_product
from tests._paths import ROOT

DOCS = ROOT / "docs"


def python_blocks(name):
    text = (DOCS / name).read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("page", ["inferers.md", "data.md", "conformal.md", "products.md", "dicom.md", "monitoring.md",
                                  "lesions.md", "signing.md", "training.md"])
def test_doc_examples_run(page, tmp_path, monkeypatch):
    if page == "dicom.md":
        pytest.importorskip("highdicom", reason="docs/dicom.md needs the dicom extra")
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(page)
    assert blocks, f"{page} has no python example"
    before = {cls.name for cls in registered_products()}
    try:
        for code in blocks:
            exec(compile(code, f"docs/{page}", "exec"), {"__name__": "__docs__"})
    finally:  # a product an example registers stays out of the other tests
        for cls in registered_products():
            if cls.name not in before:
                unregister_product(cls.name)
