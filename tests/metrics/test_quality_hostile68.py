"""Hostile review 68 of the expected Dice of a class or region the segmentation does not hold.

The product ``prod_x (1 - p(x))`` must be computed from the small probabilities that decide it: a float16 ``1 - p``
near 1 rounds them away (a missed region read as a perfect 1.0), and a class whose only probability is a rounding
error below 0 (within the tolerance of the checks) must not read as a missed structure (0).
"""

import math

import numpy as np
import pytest
import torch

from monai_unc.metrics.quality import case_expected_dice, expected_dice, quality_estimates

P = 0.0002  # two voxels' worth of probability over 100 x 100 voxels, none of them segmented


def _exact(p: float, n: int) -> float:
    return math.exp(n * math.log1p(-float(np.float16(p))))


def test_float16_region_not_held_is_the_product_of_its_own_probabilities():
    r = np.zeros((2, 100, 100), np.float16)
    r[0, :10] = 0.9
    r[1] = P  # float16 1 - P is 1.0: the binary (1 - p, p) loses it
    exact = _exact(P, 10_000)  # about exp(-2) = 0.135
    q = case_expected_dice(r, True)
    assert q.per_class[0, 1] == pytest.approx(exact, rel=1e-9)
    api = quality_estimates({"pred": torch.from_numpy(r[None])}, multilabel=True)["expected_dice"]
    assert float(api.per_class[0, 1]) == pytest.approx(exact, rel=1e-9)
    assert case_expected_dice(r, True, "region_mean_soft").per_class[0, 1] == 1.0  # the former number, kept


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_float16_softmax_empty_segmentation_foreground_is_the_class_product(lib):
    p = np.zeros((1, 2, 100, 100), np.float16)
    p[0, 1] = P
    p[0, 0] = 1 - p[0, 1]  # rounds to 1.0 everywhere
    q = expected_dice(torch.from_numpy(p) if lib == "torch" else p)
    exact = _exact(P, 10_000)
    assert float(q.per_class[0, 0]) == pytest.approx(exact, rel=1e-9)
    assert float(q.foreground[0]) == pytest.approx(exact, rel=1e-9)  # was 1.0: a missed structure read as perfect


def test_class_with_only_a_negative_rounding_error_is_absent_not_missed():
    p = np.zeros((3, 4, 4), np.float64)
    p[1, :2] = 0.9
    p[0] = 1 - p[1]
    p[2, 0, 0] = -1e-7  # 1 - (p_0 + p_1) rounded below 0, within the tolerance of the checks
    p[0, 0, 0] += 1e-7
    assert float(expected_dice(p[None]).per_class[0, 1]) == pytest.approx(1.0, abs=1e-12)  # was -0.0
    q = case_expected_dice(p, False)
    assert q.per_class[0, 1] == pytest.approx(1.0, abs=1e-12)
    assert q.foreground[0] == pytest.approx((q.per_class[0, 0] + 1.0) / 2)
