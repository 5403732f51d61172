"""The ids given to the product sections are a collection: one string or a number is refused (review 70).

Found by review 70: ``product_section(element_ids="pq")`` took the characters as the ids of two tables (``p``, ``q``),
and ``element_ids=5`` / ``section_ids(..., page_ids=5)`` failed with Python's "'int' object is not iterable",
naming no argument.
"""

from __future__ import annotations

import re

import pytest

from monai_unc.product import ReportSection, ReportTable
from monai_unc.report.html import product_section, section_element_ids, section_ids


def _section() -> ReportSection:
    return ReportSection("A", anchor="x", tables=[ReportTable(["c"], [], key="y"), ReportTable(["d"], [], key="z")])


@pytest.mark.parametrize("ids", ["pq", b"pq", 5, 2.5, object()])
def test_element_ids_must_be_a_collection(ids):
    with pytest.raises(TypeError, match="^element_ids must be a collection of ids"):
        product_section(_section(), "a", element_ids=ids)


@pytest.mark.parametrize("ids", ["summary", b"summary", 5, object()])
@pytest.mark.parametrize("call", [section_ids, section_element_ids])
def test_page_ids_must_be_a_collection(call, ids):
    with pytest.raises(TypeError, match="^page_ids must be a collection of ids"):
        call([(_section(), "a")], page_ids=ids)


def test_collections_of_ids_are_read_as_before():
    html = str(product_section(_section(), "a", element_ids=("p", "q")))
    assert re.findall(r'id="([^"]*)"', html) == ["x", "p", "q"]
    html = str(product_section(_section(), "a", element_ids=iter(["p", "q"])))
    assert re.findall(r'id="([^"]*)"', html) == ["x", "p", "q"]
    assert section_ids([(_section(), "a")], page_ids={"x"}) == section_ids([(_section(), "a")], page_ids=["x"])
    assert section_ids([(_section(), "a")], page_ids={"x"}) != ["x"]
    with pytest.raises(ValueError, match="one id per keyed table"):
        product_section(_section(), "a", element_ids=["p"])
