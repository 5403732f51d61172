"""Hostile review 69: pavpu's patch uncertainty decided on exact sums where numpy's mean sums a patch row by row."""

import numpy as np

from monai_unc.metrics import pavpu
from monai_unc.metrics.discrimination import _patch_means, _patch_uncertain

W = (65536, 2, 2)


def _map() -> np.ndarray:
    # four (65536, 2, 2) windows of 0.7, one voxel of the first 1e-9 above: that patch's exact mean is above 0.7
    # (every other value equals the threshold), the others' equal to it (not uncertain)
    u = np.full((65536, 4, 4), 0.7)
    u[0, 0, 0] = 0.7 + 1e-9
    return u


def test_rounding_of_the_long_mean_is_beyond_the_fixed_tolerance():
    # the premise: numpy sums the window's contiguous axis (2 values) pairwise and its 65536 * 2 rows one by one; the
    # float64 mean of the first patch lies 1.7e-12 below the threshold, beyond the former fixed 1e-12 of the scale
    assert _patch_means(_map(), W)[0, 0, 0] < 0.7 - 1e-12 * 0.7


def test_long_window_summed_row_by_row_is_decided_exactly():
    u = _map()
    got = _patch_uncertain(u, W, 0.7)
    assert got.tolist() == [[[True, False], [False, False]]]  # read as certain before
    # the whole metric: four accurate patches (no error), one uncertain: PAvPU 3/4 (was 1)
    assert pavpu(u, np.zeros(u.shape, bool), window=W, threshold=0.7, per_case=False) == 0.75


def test_a_patch_whose_float_sum_overflows_is_decided_exactly():
    # finite values whose float64 sum overflows (1e308 + 1e308): the mean was inf, far from the threshold, so the
    # patch was read as uncertain while its exact mean is 0.7 / 12 (PAvPU 0 instead of 1), with numpy's overflow
    # warning
    u = np.array([[0.0, -1e308, 0.0, 0.0], [1e308, 0.0, 0.7, 1e308], [0.0, -1e308, 0.0, 0.0]])
    assert _patch_uncertain(u, (3, 4), 0.7).tolist() == [[False]]
    assert pavpu(u, np.zeros(u.shape, bool), window=(3, 4), threshold=0.7, per_case=False) == 1.0
    # the exact mean above the threshold: uncertain
    v = u.copy()
    v[1, 2] = 9.0
    assert _patch_uncertain(v, (3, 4), 0.7).tolist() == [[True]]
