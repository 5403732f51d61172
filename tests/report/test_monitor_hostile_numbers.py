"""The acceptance rates of the monitoring dashboard and of ``monai-unc monitor status``.

Found by hostile testing: the rates were rounded to a whole percent, so a stream with one referral in 300 cases read
"accepted 100%" on the page and in the command's table. They are now written with significant digits and their
counts, never 100 % unless every case was accepted.
"""

from __future__ import annotations

import dataclasses
import math
import re

from monai_unc.monitoring import VerifyResult, monitor_status, status_table
from monai_unc.report.monitor import build_monitor_page


def _rows(n: int, review: set[int]) -> list[dict]:
    return [{"case_id": f"c{i}", "site": "A", "triaged_at": f"t{i}", "score": 0.1 + 1e-3 * i, "image_z_max": 0.5,
             "decision": "review" if i in review else "accept", "rule_digest": "r1", "loss": None} for i in range(n)]


def _groups(rows: list[dict]) -> list:
    return [g for g in monitor_status(rows, {"r1": {"calibration_scores": [0.1, 0.2, 0.3], "target_risk": 0.1}},
                                      alpha=0.05) if g.site == "A"]


def test_one_referral_in_300_cases_is_not_written_as_100_percent(tmp_path):
    """Found by hostile testing: 299 of 300 accepted read "100%" on the dashboard and in `monitor status`."""
    groups = _groups(_rows(300, {150}))
    lines = status_table(groups)
    assert "99.7% (299 of 300)" in lines[1] and "100% (50 of 50)" in lines[1], lines
    page = build_monitor_page(groups, [], VerifyResult(True, 0, ""), tmp_path / "m.html").read_text()
    cells = re.findall(r"<td>([^<]*)</td>", page)
    assert "99.7% (299 of 300)" in cells and "100% (50 of 50)" in cells
    assert "<td>100%</td>" not in page


def test_a_recent_referral_is_not_written_as_100_percent(tmp_path):
    """Found by hostile testing (as above): the recent rate, over the last 50 cases, was rounded too (49 of 50 is
    98 %, but 1999 of 2000 read 100%)."""
    groups = _groups(_rows(2000, {1999}))
    line = status_table(groups)[1]
    assert "99.95% (1999 of 2000)" in line and "98% (49 of 50)" in line, line


def test_a_martingale_beyond_the_float_range_is_written_not_raised(tmp_path):
    """Found while fixing the rates above: a stream whose scores drift far from the calibration scores drives the
    score martingale past exp(709); the dashboard raised OverflowError (math.exp) and `monitor status` printed
    "max inf". Its peak is now written from its logarithm."""
    groups = _groups(_rows(2000, {1999}))
    peak = float(groups[0].score.log_martingale.max())
    assert peak > 709  # the case of the defect
    e10 = peak / math.log(10)
    line = status_table(groups)[1]
    assert re.search(rf"max \d\.\d+e\+{math.floor(e10)}\b", line) and "inf" not in line, line
    page = build_monitor_page(groups, [], VerifyResult(True, 0, ""), tmp_path / "m.html").read_text()
    assert re.search(rf"<td>\d\.\d+e\+{math.floor(e10)}</td>", page)


def test_an_observed_risk_just_below_the_target_is_not_written_as_the_target(tmp_path):
    """Found by hostile testing: the risks were written with 3 fixed decimals next to the target they are judged
    against, so an observed risk of 0.09996 read "0.100" beside the target 0.1 (the page's table and `monitor
    status` alike). It is now written with the digits that keep it below the target."""
    rows = [{**r, "loss": 0.09996} for r in _rows(30, set())]
    groups = _groups(rows)
    line = status_table(groups)[1]
    assert "0.09996 / 0.000 / 0.1" in line, line
    page = build_monitor_page(groups, [], VerifyResult(True, 0, ""), tmp_path / "m.html").read_text()
    cells = re.findall(r"<td>([^<]*)</td>", page)
    assert "0.09996" in cells and "0.100" not in cells


def test_a_martingale_peak_below_the_alarm_line_is_not_written_as_the_line(tmp_path):
    """Found by hostile testing: a score martingale peaking at 19.97 without an alarm (``alpha = 0.05``) read "20",
    the alarm threshold, in the dashboard's overview beside the status "ok", and "max 20" in `monitor status`."""
    g = _groups(_rows(5, set()))[0]
    assert g.score is not None and g.score.alarm is None and g.alpha == 0.05
    log_m = g.score.log_martingale.copy()
    log_m[-1] = math.log(19.97)
    groups = [dataclasses.replace(g, score=dataclasses.replace(g.score, log_martingale=log_m))]
    assert "max 19.97" in status_table(groups)[1]
    page = build_monitor_page(groups, [], VerifyResult(True, 0, ""), tmp_path / "m.html").read_text()
    cells = re.findall(r"<td>([^<]*)</td>", page)
    assert "19.97" in cells and "20" not in cells, cells


def test_an_alarm_level_beyond_the_float_range_is_written_and_drawn(tmp_path):
    """Found by hostile review: a tiny ``alpha`` (``1e-310``, taken by the command line; the alarm itself compares
    logarithms) made ``1 / alpha`` overflow: the alarm line read "martingale >= inf", the page "1/alpha = inf", and the
    threshold line was drawn at ``y1="-inf"``, an invalid SVG attribute. The level is written from ``log(alpha)``
    (``1e+310``) and drawn at ``-log10(alpha)``."""
    rows = _rows(2500, set())
    for i, r in enumerate(rows):
        r["score"] = 10.0 + i  # far above every calibration score: the martingale passes 1e+310
    groups = [g for g in monitor_status(rows, {"r1": {"calibration_scores": [0.1, 0.2, 0.3], "target_risk": 0.1}},
                                        alpha=1e-310) if g.site == "A"]
    assert groups[0].score.alarm is not None
    alarm = groups[0].alarms()[0]
    assert "martingale >= 1e+310 at case" in alarm and "inf" not in alarm, alarm
    page = build_monitor_page(groups, [], VerifyResult(True, 0, ""), tmp_path / "m.html").read_text()
    assert "alarm: 1/alpha = 1e+310" in page
    assert not re.findall(r'="[^"]*(?:inf|nan)[^"]*"', page, flags=re.IGNORECASE)
    lines = re.findall(r'<line[^>]*stroke-dasharray="5 3"[^>]*>', page)
    ys = {float(y) for ln in lines for y in re.findall(r'y[12]="([^"]*)"', ln)}
    assert len(ys) == 1 and 0 < ys.pop() < 300  # on the chart, not at its edge or off it
    assert any("martingale >= 1e+310" in ln for ln in status_table(groups))  # the command's alarm lines


def test_a_chart_never_writes_a_non_finite_coordinate():
    """A reference line or marker at a non-finite value is left out, as a series' non-finite points are."""
    from monai_unc.report.monitor import svg_chart

    svg = svg_chart("t", [("a", [0, 1, 2], [0, float("inf"), 1])],
                    hlines=[("up", float("inf")), ("ok", 0.5), ("nan", float("nan"))],
                    vlines=[("left", float("-inf")), ("mid", 1.0)])
    assert not re.findall(r'="[^"]*(?:inf|nan)[^"]*"', svg, flags=re.IGNORECASE), svg
    assert ">ok<" in svg and ">mid<" in svg and ">up<" not in svg and ">left<" not in svg
