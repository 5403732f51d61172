"""The reliability diagram's bars and count panel against an independent numpy binning of the same probabilities.

Found by hostile testing: the count panel of the all-label diagram (the report's) was labelled "voxels" while it counts
one probability per voxel and label (1000 voxels of three classes summed to 3000 "voxels").
"""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.report.reliability import plot_reliability_diagram

C, N, BINS = 3, 1000, 10


def _cohort():
    rng = np.random.default_rng(1)
    probs = rng.dirichlet(np.ones(C), size=N).T[None]  # (1, C, N)
    target = rng.integers(0, C, size=(1, N))
    return probs, target


def _reference(probs: np.ndarray, target: np.ndarray, kind: str):
    p, y = probs[0], target[0]
    if kind == "top":
        conf, hit = p.max(0), (p.argmax(0) == y).astype(float)
    else:  # all_label: every label's probability against [y == c]
        conf = p.ravel()
        hit = np.stack([y == c for c in range(C)]).ravel().astype(float)
    idx = np.clip(np.floor(conf * BINS).astype(int), 0, BINS - 1)
    counts = np.bincount(idx, minlength=BINS)
    freq = np.bincount(idx, hit, BINS) / np.maximum(counts, 1)
    return counts, freq


@pytest.mark.parametrize("kind, unit, total", [("top", "voxels", N), ("all_label", "voxels \u00d7 labels", C * N)])
def test_the_count_panel_counts_what_its_label_says(kind, unit, total):
    probs, target = _cohort()
    fig = plot_reliability_diagram(probs, target, kind=kind, n_bins=BINS, min_bin_count=5)
    rel, cnt = fig.axes
    counts, freq = _reference(probs, target, kind)
    drawn_counts = np.array([r.get_height() for r in cnt.patches])
    np.testing.assert_array_equal(drawn_counts, counts)
    assert drawn_counts.sum() == total
    assert cnt.get_ylabel() == unit
    assert rel.get_title().endswith(f"bins with >= 5 {unit})")
    bars = np.array([r.get_height() for r in rel.patches[:BINS]])
    np.testing.assert_allclose(bars, np.where(counts >= 5, freq, 0.0), atol=1e-12)


def test_classwise_counts_a_class_voxels_in_its_minimum():
    probs, target = _cohort()
    fig = plot_reliability_diagram(probs, target, kind="classwise", n_bins=BINS, min_bin_count=5)
    assert fig.axes[1].get_ylabel() == "voxels \u00d7 labels"
    assert sum(r.get_height() for r in fig.axes[1].patches) == C * N
    assert fig.axes[0].get_title().endswith("bins with >= 5 voxels)")  # each class's histogram counts voxels
