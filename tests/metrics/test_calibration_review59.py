"""Hostile review 59: a confidence histogram refuses voxel weights whose total its float64 sums cannot hold.

Each weight was checked on its own (non-negative and finite), never their total: 1000 voxels of weight 1e305 made
the NLL sum ``1e308 * 2.72`` infinite and ``nll`` came back ``inf`` (2.72 for the same voxels unweighted) without a
word; weights of 1e306 made every table infinite, and ECE, UCE, NLL and Brier came back NaN with the warning that no
bin (no voxel) held anything.
"""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.metrics.calibration import ConfidenceHistogram, ece, nll

C, N = 3, 1000
_RNG = np.random.default_rng(0)
PROBS = _RNG.dirichlet(np.ones(C) * 0.3, size=(1, N)).transpose(0, 2, 1)
TARGET = _RNG.integers(0, C, (1, N))


def weights(value: float) -> np.ndarray:
    return np.full((1, N), value)


@pytest.mark.parametrize("value", [1e305, 1e306])
def test_update_refuses_weights_whose_total_overflows(value: float) -> None:
    hist = ConfidenceHistogram(C)
    with pytest.raises(ValueError, match="total voxel weight"):
        hist.update(PROBS, TARGET, weights=weights(value))
    assert len(hist) == 0  # the update is atomic


def test_large_weights_below_the_limit_keep_the_unweighted_values() -> None:
    unit = ConfidenceHistogram(C).update(PROBS, TARGET)
    big = ConfidenceHistogram(C).update(PROBS, TARGET, weights=weights(1e300))
    assert nll(big) == pytest.approx(nll(unit), rel=1e-12)
    assert ece(big) == pytest.approx(ece(unit), rel=1e-12)


def test_same_case_over_two_updates_and_pooled_histograms() -> None:
    w = weights(4e303)  # 4e306 a case: below the limit once, above it twice
    for per_case, ids in ((True, ["a"]), (False, None)):
        hist = ConfidenceHistogram(C, per_case=per_case).update(PROBS, TARGET, weights=w, case_ids=ids)
        before = hist.scalars.clone()
        with pytest.raises(ValueError, match="total voxel weight"):
            hist.update(PROBS, TARGET, weights=w, case_ids=ids)
        assert np.array_equal(hist.scalars.numpy(), before.numpy())
    # new cases each hold their own total
    hist = ConfidenceHistogram(C).update(PROBS, TARGET, weights=w).update(PROBS, TARGET, weights=w)
    assert len(hist) == 2


def test_merge_refuses_a_total_it_cannot_hold() -> None:
    w = weights(4e303)
    a = ConfidenceHistogram(C, per_case=False).update(PROBS, TARGET, weights=w)
    b = ConfidenceHistogram(C).update(PROBS, TARGET, weights=w)
    before = a.scalars.clone()
    with pytest.raises(ValueError, match="total voxel weight"):
        a.merge(b)
    assert np.array_equal(a.scalars.numpy(), before.numpy())


@pytest.mark.parametrize(("value", "every"), [(5e-324, True), (1e-310, False)])
def test_subnormal_weights_are_refused(value: float, every: bool) -> None:
    # every product of a value and a weight of 5e-324 rounds to 0 or 5e-324: with every weight 5e-324 the ECE came
    # back 0.615 (0.429 with any normal weight), the UCE 0.453 (0.246), the Brier score 1.014 (0.996)
    w = weights(value) if every else weights(1.0)
    if not every:
        w[0, ::2] = value
    with pytest.raises(ValueError, match="subnormal"):
        ConfidenceHistogram(C).update(PROBS, TARGET, weights=w)


def test_smallest_normal_weights_keep_the_unweighted_values() -> None:
    unit = ConfidenceHistogram(C).update(PROBS, TARGET)
    tiny = ConfidenceHistogram(C).update(PROBS, TARGET, weights=weights(float(np.finfo(np.float64).tiny)))
    assert ece(tiny) == pytest.approx(ece(unit), rel=1e-12)
    assert nll(tiny) == pytest.approx(nll(unit), rel=1e-12)
