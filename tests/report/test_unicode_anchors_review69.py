"""The report's element ids (anchors) for names in any script (review 69).

Found by review 69: the ids were made by an ASCII slug (``[^0-9a-zA-Z]+`` -> ``_``, ``region`` when nothing is
left), so two Japanese or Hebrew names got one id (``...-region``), and links jumped to the first section; a region's
reliability diagram was written to one file for both (``reliability-region.png``).
"""

from __future__ import annotations

import re

from monai_unc.product import ReportSection, ReportTable
from monai_unc.report.html import product_section

NAMES = ["浮腫", "壊死", "בצקת", "נמק", "水 肿", "水_肿", "水-肿", "、", "。", "Ödem", "O\u0308dem",
         "x" * 40 + "水" * 60]


def _ids(html: str) -> list[str]:
    return re.findall(r'\bid="([^"]*)"', html)


def test_ids_of_names_in_any_script_are_unique_and_not_empty():
    tables = [ReportTable(["case", "value"], [["c1", 1.0]], title=f"table {n}", key=n) for n in NAMES]
    banners = [(n, "note", "text") for n in NAMES]
    html = str(product_section(ReportSection("Lesions", tables=tables, banners=banners), "lesions"))
    ids = _ids(html)
    assert len(ids) == 1 + 2 * len(NAMES)  # the section, each table, each banner
    inner = [i[len("product-lesions-"):] for i in ids[1:]]
    assert all(inner) and len(set(inner[:len(NAMES)])) == len(NAMES), inner
    assert not any(re.search(r"\s", i) for i in ids)  # an id holds no whitespace
    assert max(len(i.encode()) for i in ids) <= 160  # a figure file name too: cut, told apart by a digest
    # two non-ASCII anchors of one product's key: distinct sections
    one = _ids(str(product_section(ReportSection("A"), "浮腫 a")))[0]
    two = _ids(str(product_section(ReportSection("B"), "浮腫 b")))[0]
    assert one != two and one.startswith("product-")


def test_ascii_ids_are_those_of_earlier_versions():
    tables = [ReportTable(["case"], [["c1"]], key=k) for k in ("inner mask", "list", "a--b", "--")]
    html = str(product_section(ReportSection("Conformal", tables=tables, anchor="conformal masks"), "conformal"))
    assert _ids(html) == ["conformal_masks", "conformal_masks-inner_mask", "conformal_masks-list",
                          "conformal_masks-a_b", "conformal_masks-region"]
    assert _ids(str(product_section(ReportSection("P", anchor="my-section"), "p")))[0] == "my-section"
    assert _ids(str(product_section(ReportSection("P"), "my product")))[0] == "product-my_product"
