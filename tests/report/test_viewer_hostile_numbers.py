"""The viewer's uncertainty overlay for a constant map.

Found by hostile testing: a map with one value everywhere (0.5 nats) got the threshold 0.6 and the colour bar 0 .. 1.5,
so no voxel was drawn and the legend named a range the map does not have.
"""

from __future__ import annotations

import re

import numpy as np

from monai_unc.report.viewer import case_viewer, viewer_block


def _uncertainty(data: dict) -> dict:
    return next(v for v in data["volumes"] if v["role"] == "uncertainty")


def test_a_constant_map_is_drawn_with_a_one_value_legend():
    """Found by hostile testing: a constant map of 0.5 nats was drawn fully transparent (threshold 0.6 above every
    voxel) with a colour bar 0 .. 1.5. Every voxel is now at or above the threshold, the colour range ends at the
    value and the legend says the map is constant."""
    seg = np.zeros((12, 12, 12), np.int64)
    seg[3:9, 3:9, 3:9] = 1
    u = np.full(seg.shape, 0.5)
    data = case_viewer("const", seg, u, measure="predictive_entropy")
    v = _uncertainty(data)
    assert v["threshold"] <= 0.5 and v["cal_min"] <= 0.5 and v["cal_max"] == 0.5
    assert int((u >= v["threshold"]).sum()) == u.size
    html = str(viewer_block(0, data))
    assert re.findall(r'<span class="mu-cbar-ticks"><span>([^<]*)</span><span>([^<]*)</span>', html)[-1] == ("0", "0.5")
    assert "constant map: every voxel is 0.5 nats" in html
    slider = re.search(r'<input type="range" min="([^"]*)" max="([^"]*)"[^>]*value="([^"]*)" data-control="threshold"',
                       html)
    assert float(slider.group(1)) <= float(slider.group(3)) <= 0.5 == float(slider.group(2))


def test_a_map_of_zeros_stays_transparent_and_says_so():
    """The other constant map: zero uncertainty everywhere has nothing to draw (the threshold stays above it)."""
    seg = np.zeros((8, 8, 8), np.int64)
    seg[2:6, 2:6, 2:6] = 1
    data = case_viewer("zero", seg, np.zeros(seg.shape), measure="mutual_information")
    v = _uncertainty(data)
    assert v["threshold"] > 0.0 and v["constant"] == 0.0
    assert "constant map: every voxel is 0 nats, nothing to draw" in str(viewer_block(0, data))


def test_a_map_with_a_range_keeps_its_threshold():
    """A map that is not constant is drawn as before (no constant-map note)."""
    seg = np.zeros((8, 8, 8), np.int64)
    seg[2:6, 2:6, 2:6] = 1
    data = case_viewer("ramp", seg, np.linspace(0, 1, 512).reshape(8, 8, 8))
    v = _uncertainty(data)
    assert "constant" not in v and 0.1 <= v["threshold"] <= 1.0 and v["cal_max"] == 1.0
    assert "constant map" not in str(viewer_block(0, data))
