"""Hostile review 59 of the pages: numbers a page shows that read otherwise than the data they come from."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from monai_unc.report.monitor import svg_chart
from monai_unc.report.triage import build_triage_page
from tests.report.test_triage_hostile_numbers import triage_json


# ---------------------------------------------------------------- 1. an expected Dice across the rule's failure Dice
def test_triage_page_never_rounds_an_expected_dice_below_the_failure_dice_up_to_it(tmp_path):
    """Found by hostile review 59: the triage page wrote a case's expected Dice of 0.795 as ``0.80`` in its table (and
    its figure's title) under a rule whose risk is "dice < 0.8": a predicted failure read as a predicted pass. The
    estimate judged against the failure Dice keeps the digits that hold it on its side (``0.795``)."""
    doc = triage_json()
    for c, (est, lo, hi) in zip(doc["cases"], [(0.795, 0.70, 0.85), (0.8049, 0.70, 0.90), (0.93, 0.85, 0.99)]):
        c.update(expected_dice=est, expected_dice_low=lo, expected_dice_high=hi)
    (tmp_path / "triage.json").write_text(json.dumps(doc))
    text = build_triage_page(tmp_path, n_cases=0, viewer=False).read_text()
    cells = dict(re.findall(r'data-case="(\w)".*?<td>([0-9.]+ \[[0-9., ]+\])</td>', text))
    assert "dice &lt; 0.8" in text
    assert cells == {"a": "0.795 [0.70, 0.85]", "b": "0.805 [0.70, 0.90]", "c": "0.93 [0.85, 0.99]"}


def test_triage_lines_never_round_an_expected_dice_below_the_failure_dice_up_to_it():
    """The same estimate in ``monai-unc triage``'s table of lines."""
    from monai_unc.evaluation.triage import ReferralRule
    from monai_unc.workflows.triage import _expected_dice_cell

    rule = ReferralRule.from_json(triage_json()["rule"])
    c = {"expected_dice": 0.795, "expected_dice_low": 0.70, "expected_dice_high": 0.85}
    assert _expected_dice_cell(c, rule) == "0.795 [0.70, 0.85]"
    assert _expected_dice_cell({"expected_dice": 0.93}, rule) == "0.93"


# -------------------------------------------------------- 2. the monitor's score histogram on an axis without a zero
def test_monitor_histogram_chart_starts_its_axis_at_zero():
    """Found by hostile review 59: the dashboard's case score distribution (a step histogram, ``share of cases``) took
    its y axis from the smallest share, so with every bin holding a case (40 cases, a bin of one at 0.025) the bins
    of one case were drawn on the chart's floor, read as empty bins. A histogram's axis now starts at 0."""
    edges = np.linspace(0.0, 1.0, 5)
    share = np.array([0.25, 0.125, 0.5, 0.125, 0.125])  # every bin holds cases
    svg = svg_chart("h", [("new cases", edges, share)], steps=True)
    ticks = [float(t) for t in re.findall(r'<text x="48" y="[0-9.]+" text-anchor="end">([^<]+)</text>', svg)]
    assert ticks and min(ticks) == 0.0
    # the bins of one case (0.125) are drawn above the floor of the plot (its y is less than the floor's)
    floor = 220 - 30
    ys = [float(p.split(",")[1]) for p in re.search(r'<polyline points="([^"]+)"', svg).group(1).split()]
    assert max(ys) < floor - 10
    # a line chart keeps its axis on its data
    line = svg_chart("l", [("rate", [1, 2, 3], [0.5, 0.6, 0.7])])
    assert min(float(t) for t in re.findall(r'<text x="48" y="[0-9.]+" text-anchor="end">([^<]+)</text>', line)) \
        == 0.5


# ------------------------------------------------------------- 3. the viewer's loading text of a case id in any script
@pytest.mark.slow
def test_viewer_loading_text_of_a_non_ascii_case_id_draws_no_missing_glyph(tmp_path):
    """Found by hostile review 59: the viewer drew "loading <case id>" with NiiVue's bitmap font, which has ASCII
    glyphs only: a case ``ünï©ødé_é`` was drawn "loading nd_" (another case's name, on the canvas) and the page
    logged eleven console warnings "Missing font metric for code point 252". The loading text names the case only
    when the font can draw it."""
    from monai_unc.report.html import PAGE_CSS
    from monai_unc.report.markup import document
    from monai_unc.report.viewer import VIEWER_CSS, case_viewer, viewer_scripts, viewer_section
    from tests.report.test_viewer import _chromium, _open_offline

    exe = _chromium()
    seg = np.zeros((8, 8, 8), np.int64)
    seg[2:6, 2:6, 2:6] = 1
    data = case_viewer("ünï©ødé_é", seg, np.linspace(0, 1, 512).reshape(8, 8, 8))
    page = tmp_path / "page.html"
    page.write_text(document("viewer", PAGE_CSS + VIEWER_CSS, viewer_section([data], "Viewer"),
                             viewer_scripts(tmp_path)))
    dom, _, console = _open_offline(exe, page, tmp_path, "loading")
    assert 'data-viewer-ready="1"' in dom
    assert not [ln for ln in console if "Missing font metric" in ln], console[:3]
