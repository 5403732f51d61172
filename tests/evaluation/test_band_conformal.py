"""The band width of ``conformal.csv`` (``band_p95_mm_<name>``) against a brute-force reference.

Reference: the outer mask's boundary voxels found by looking at each voxel's 6 neighbours inside the volume, and the
Euclidean distance in mm to every inner voxel computed pairwise.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import ndimage

from monai_unc.evaluation.conformal import _band_p95


def _reference(outer: np.ndarray, inner: np.ndarray, spacing: tuple) -> float:
    if not outer.any() or not inner.any():
        return math.nan
    boundary = []
    for idx in zip(*np.nonzero(outer)):
        for axis, step in itertools.product(range(outer.ndim), (-1, 1)):
            nb = list(idx)
            nb[axis] += step
            if 0 <= nb[axis] < outer.shape[axis] and not outer[tuple(nb)]:  # outside the volume is no boundary
                boundary.append(idx)
                break
    if not boundary:
        return math.nan
    sp = np.asarray(spacing)
    pts = np.argwhere(inner) * sp
    d = [np.sqrt(((np.asarray(b) * sp - pts) ** 2).sum(axis=1)).min() for b in boundary]
    return float(np.percentile(d, 95))


def test_band_width_counts_the_contour_inside_the_volume_only():
    rng = np.random.default_rng(4)
    for trial in range(12):
        shape = (9, 8, 7)
        spacing = [(1.0, 1.0, 1.0), (0.7, 0.7, 3.0), (0.8, 1.3, 2.1)][trial % 3]
        field = ndimage.gaussian_filter(rng.random(shape), 1.2)
        inner = field > np.quantile(field, 0.85)
        outer = field > np.quantile(field, 0.3 if trial % 2 else 0.05)  # touching the volume's border
        assert outer[0].any() or outer[-1].any() or outer[:, 0].any()
        assert math.isclose(_band_p95(outer, inner, spacing), _reference(outer, inner, spacing), rel_tol=1e-6)


def test_band_width_of_an_outer_mask_filling_the_volume_is_undefined():
    # the margin family's trivial outer mask (every voxel): the band read as the distance from the volume's faces to
    # the inner mask (10.2 mm on a 12^3 toy case) although the mask has no contour at all
    inner = np.zeros((12, 12, 12), bool)
    inner[5:7, 5:7, 5:7] = True
    assert math.isnan(_band_p95(np.ones((12, 12, 12), bool), inner, (1.0, 1.0, 1.0)))
    assert math.isnan(_band_p95(np.zeros((12, 12, 12), bool), inner, (1.0, 1.0, 1.0)))
    outer = np.zeros((12, 12, 12), bool)
    outer[3:9, 3:9, 3:9] = True  # inside the volume: the contour is 2 voxels from the inner cube at most ~3.5 mm
    assert math.isclose(_band_p95(outer, inner, (1.0, 1.0, 1.0)), _reference(outer, inner, (1.0, 1.0, 1.0)))
