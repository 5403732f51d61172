"""The monitoring dashboard's SVG charts read back: the drawn points against the numbers they stand for.

Found by hostile testing (see each test).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np

from monai_unc.report.monitor import svg_chart


def _tag(e: ET.Element) -> str:
    return e.tag.rsplit("}", 1)[-1]


def _polylines(svg: str) -> list[np.ndarray]:
    root = ET.fromstring(str(svg))
    return [np.array([[float(v) for v in p.split(",")] for p in e.get("points").split()])
            for e in root.iter() if _tag(e) == "polyline"]


def _hline_pixels(svg: str) -> list[float]:
    root = ET.fromstring(str(svg))
    return [float(e.get("y1")) for e in root.iter() if _tag(e) == "line" and e.get("y1") == e.get("y2")]


def test_a_long_series_keeps_its_peak_above_the_alarm_line():
    """Found by hostile testing: a series longer than the chart's point budget kept every k-th point, so a martingale
    that crossed the alarm line at one case and fell back was drawn wholly below the line."""
    n = 5000
    for peak_at in (1234, 1, 4998, 2501):
        y = np.zeros(n)
        y[peak_at] = 3.0
        y[peak_at + 1] = -1.0  # and a trough right after it
        svg = svg_chart("t", [("s", np.arange(1, n + 1), y)], hlines=[("alarm", 2.0)])
        (pts,) = _polylines(svg)
        (alarm_px,) = _hline_pixels(svg)
        assert len(pts) <= 800
        assert pts[:, 1].min() < alarm_px  # SVG y grows downwards: the peak is drawn above the alarm line
        assert pts[:, 1].max() > pts[0, 1]  # the trough below zero is drawn too
        assert np.all(np.diff(pts[:, 0]) >= 0)  # in case order


def test_a_short_series_is_drawn_point_for_point():
    y = np.array([0.0, 2.0, 1.0, 3.0])
    (pts,) = _polylines(svg_chart("t", [("s", [1, 2, 3, 4], y)]))
    assert len(pts) == 4
    # the pixel heights are an affine image of the values
    a, b = np.polyfit(y, pts[:, 1], 1)
    np.testing.assert_allclose(a * y + b, pts[:, 1], atol=0.06)


def _x_of_pixels(svg: str):
    """The chart's x value of a pixel, from its first and last x tick labels."""
    root = ET.fromstring(str(svg))
    ticks = [(float(e.text), float(e.get("x"))) for e in root.iter()
             if _tag(e) == "text" and e.get("text-anchor") == "middle" and e.get("y") == str(220 - 30 + 14)]
    (v0, p0), (v1, p1) = ticks[0], ticks[-1]
    return lambda px: v0 + (px - p0) * (v1 - v0) / (p1 - p0)


def test_the_martingales_are_drawn_at_the_cases_place_in_the_stream():
    """Found by hostile testing: each martingale was drawn against its own count of defined values, so with image
    statistics missing for the first 50 cases the image alarm at the stream's 65th case (c64) was drawn at x = 15,
    before the score alarm at case 26: the page told the image shift came first."""
    import math

    from monai_unc.monitoring import monitor_status
    from monai_unc.report.monitor import _martingale_chart

    rows = [{"case_id": f"c{i}", "site": "A", "triaged_at": f"t{i:03d}",
             "score": 0.1 + 1e-3 * i if i < 60 else 0.9 + 1e-3 * i,
             "image_z_max": math.nan if i < 50 else 0.5 + 1e-3 * i, "decision": "accept", "rule_digest": "r1",
             "loss": None} for i in range(120)]
    (g,) = [g for g in monitor_status(rows, {"r1": {"calibration_scores": [0.1, 0.15, 0.2, 0.25, 0.3],
                                                      "target_risk": 0.1}}, alpha=0.05) if g.site == "A"]
    assert g.score.alarm is not None and g.image.alarm is not None
    alarms = g.alarms()
    svg = str(_martingale_chart(g))
    to_x = _x_of_pixels(svg)
    root = ET.fromstring(svg)
    marks = {e.text: round(to_x(float(e.get("x")) - 3)) for e in root.iter()
             if _tag(e) == "text" and e.text and (e.text.endswith(": alarm") or e.text.endswith(": change"))}
    # the alarm lines name the cases the alarm lines of the page name (1-based place in the stream)
    for name, kind, m in (("case score", "score", g.score), ("image statistics", "image", g.image)):
        defined = [i for i, r in enumerate(rows) if not math.isnan(r["score" if kind == "score" else "image_z_max"])]
        alarm_case = rows[defined[m.alarm]]["case_id"]
        assert any(f"at case {alarm_case!r}" in a for a in alarms)
        assert marks[f"{name}: alarm"] == defined[m.alarm] + 1
        assert marks[f"{name}: change"] == defined[m.change_point or 0] + 1
    assert marks["image statistics: alarm"] > marks["case score: alarm"]
    pls = _polylines(svg)
    assert round(to_x(pls[1][0, 0])) == 51  # the first case with image statistics


def test_more_lines_than_colours_are_refused_not_dropped():
    """Found by hostile testing: a fifth series (a fourth reference line) was left out of the chart without a word."""
    import pytest

    five = [(f"s{i}", [0, 1], [i, i]) for i in range(5)]
    with pytest.raises(ValueError, match="series"):
        svg_chart("t", five)
    with pytest.raises(ValueError, match="hlines"):
        svg_chart("t", five[:1], hlines=[(f"h{i}", i) for i in range(4)])
    assert len(_polylines(svg_chart("t", five[:4]))) == 4


def test_marker_labels_at_one_case_do_not_overlap_each_other_or_the_legend():
    """Found by hostile testing: an alarm and its estimated change point at the same case wrote their labels at the
    same spot (and on the legend's row), unreadable."""
    svg = svg_chart("t", [("case score", [1, 2, 3], [0, 1, 2]), ("image statistics", [1, 2, 3], [0, 2, 1])],
                    vlines=[("case score: alarm", 1), ("case score: change", 1), ("image statistics: alarm", 1),
                            ("image statistics: change", 1)])
    root = ET.fromstring(str(svg))
    texts = {e.text: (float(e.get("x")), float(e.get("y"))) for e in root.iter() if _tag(e) == "text"}
    legend_y = texts["case score"][1]
    rows = [texts[k][1] for k in texts if k and k.endswith((": alarm", ": change"))]
    assert len(rows) == 4 and len(set(rows)) == 4  # a row each
    assert min(abs(y - legend_y) for y in rows) >= 11  # the font is 11 px
    assert min(np.diff(sorted(rows))) >= 11
    assert max(rows) < 220 - 30  # inside the plot area
