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
