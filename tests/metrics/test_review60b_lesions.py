"""Hostile review 60 of the lesion-wise metrics (docs/lesions.md): claims of the documentation and behaviour checked
against independent references (brute force written from the definitions)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from monai_unc.metrics.boundary import hd95
from monai_unc.metrics.lesions import surface_hd95

DOCS = Path(__file__).resolve().parents[2] / "docs" / "lesions.md"


def _cube_and_strays() -> tuple[np.ndarray, np.ndarray]:
    """A 10-voxel cube, and the cube with 12 stray voxels (two short lines) about 19 mm away."""
    t = np.zeros((40, 14, 14), bool)
    t[2:12, 2:12, 2:12] = True
    p = t.copy()
    i = np.arange(12)
    p[30 + i % 8, 1 + (i // 8) * 2, 1] = True
    return t, p


def test_surface_hd95_and_edge_hd95_can_differ_by_many_voxels():
    """docs/lesions.md said the area-weighted surface HD95 and the edge-voxel ``hd95`` "differ by up to a voxel".
    They weigh the stray voxels differently (their surface area is more than 5 % of the total, their edge voxels
    less than 5 %): 19 mm against 0 mm."""
    t, p = _cube_and_strays()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        surface = surface_hd95(t, p)
        edge = float(np.asarray(hd95(p.astype(np.int64), t.astype(np.int64))).ravel()[0])
    assert surface == 19.0 and edge == 0.0
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    assert "differ by up to a voxel" not in text
    assert "not interchangeable" in text
