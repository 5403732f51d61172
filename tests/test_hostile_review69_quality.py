"""Hostile review 69: the expected Dice of float16 / float32 region probabilities."""

import numpy as np
import pytest
import torch

from monai_unc.metrics.quality import case_expected_dice, expected_dice, quality_estimates


def _exact_region_dice(p: np.ndarray) -> float:
    p = p.astype(np.float64)
    seg = p > 0.5
    return 2 * p[seg].sum() / (p.sum() + seg.sum())


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_held_region_keeps_small_probabilities_of_half_precision_maps(dtype):
    # 100 voxels segmented at 0.9, 2e5 voxels of 1e-4 (20 voxels' worth): float16's 1 - 1e-4 is 1, and the region's
    # expected Dice read 0.947 (the 20 voxels lost from the denominator) instead of 0.857
    r = np.full((1, 200_000), 1e-4, np.float32)
    r[0, :100] = 0.9
    r = r.astype(dtype)
    exact = _exact_region_dice(r[0])
    q = case_expected_dice(r, True)
    assert float(q.per_class[0, 0]) == pytest.approx(exact, rel=1e-12)
    assert float(q.foreground[0]) == pytest.approx(exact, rel=1e-12)
    t = quality_estimates({"pred": torch.from_numpy(r[None])}, multilabel=True)["expected_dice"]
    assert float(t.per_class[0, 0]) == pytest.approx(exact, rel=1e-12)


def test_region_legacy_soft_estimate_unchanged():
    # the former estimate keeps the values referral rules recorded (the binary's foreground)
    r = np.full((1, 1000), 1e-2, np.float32)
    r[0, :10] = 0.9
    legacy = case_expected_dice(r, True, "region_mean_soft")
    assert float(legacy.per_class[0, 0]) == pytest.approx(_exact_region_dice(r[0]), rel=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_held_foreground_keeps_small_probabilities_of_half_precision_classes(dtype):
    # 100 voxels segmented (class 1 at 0.9), 2e5 voxels of 1e-4 in classes 1 and 2 (40 voxels' worth): p_0 = 1 - 2e-4
    # is 1 in float16, and the merged foreground's expected Dice read 0.974 instead of 0.809
    n = 200_000
    p = np.zeros((1, 3, n))
    p[0, 1:] = 1e-4
    p[0, 1, :100], p[0, 2, :100] = 0.9, 0.05
    p[0, 0] = 1 - p[0, 1] - p[0, 2]
    want = float(expected_dice(torch.from_numpy(p)).foreground[0])  # float64: 0.8086
    got = float(expected_dice(torch.from_numpy(p).to(dtype)).foreground[0])
    assert got == pytest.approx(want, abs=2e-3)
