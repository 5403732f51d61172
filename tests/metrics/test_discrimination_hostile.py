"""Hostile review of the voxel-wise discrimination metrics: dtypes at thresholds, patch accuracy, argument checks.

References are independent: scikit-learn for the rank metrics, float64 loops over voxels and patches for the
thresholded ones.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from monai_unc.metrics.discrimination import (
    au_arc,
    avu,
    correct_certain_ratio,
    error_auprc,
    error_auroc,
    pavpu,
    uncertain_incorrect_ratio,
    voxel_accuracy,
)


def counts64(u, e, thr):
    """(n_ac, n_au, n_ic, n_iu) with ``uncertain = u > thr`` on the stored values, compared in float64."""
    unc = np.asarray(u).astype(np.float64).ravel() > float(thr)
    err = np.asarray(e).astype(bool).ravel()
    return (
        int(np.sum(~err & ~unc)), int(np.sum(~err & unc)), int(np.sum(err & ~unc)), int(np.sum(err & unc)),
    )  # fmt: skip


def pavpu_loop(u, e, w, thr, acc_thr):
    """PAvPU by a loop over complete 2D patches, patch accuracy as a fraction of correct voxels (exact rational)."""
    from fractions import Fraction

    hits = total = 0
    for i in range(0, u.shape[0] - w[0] + 1, w[0]):
        for j in range(0, u.shape[1] - w[1] + 1, w[1]):
            pe = e[i : i + w[0], j : j + w[1]]
            pu = u[i : i + w[0], j : j + w[1]].astype(np.float64)
            accurate = Fraction(int((pe == 0).sum()), pe.size) >= Fraction(str(acc_thr))
            uncertain = pu.mean() > thr
            hits += accurate != uncertain
            total += 1
    return hits / total


# ------------------------------------------------------------------------------------------------ thresholds, dtypes


@pytest.mark.parametrize("dtype", [np.float16, np.float32, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("thr", [0.3, 0.1, 0.7, 1 / 3])
def test_threshold_on_stored_value_any_dtype(dtype, thr):
    """A float32 map value float32(0.3) = 0.30000001 is above the threshold 0.3: every dtype compares exactly.

    NumPy (and torch) compare a float32 array with a Python float after rounding the threshold to float32, where
    both are equal; ``avu`` then disagreed with ``pavpu`` of 1-voxel patches (float64 means) on the same map.
    """
    rng = np.random.default_rng(0)
    base = np.r_[np.full(8, thr), rng.random(24)].reshape(4, 8)
    if isinstance(dtype, torch.dtype):
        u = torch.from_numpy(base).to(dtype)
        stored = u.to(torch.float64).numpy()
    else:
        u = base.astype(dtype)
        stored = u.astype(np.float64)
    e = rng.random((4, 8)) < 0.4
    e[0, :4] = True
    e[0, 4:] = False
    n_ac, n_au, n_ic, n_iu = counts64(stored, e, thr)
    assert avu(u, e, threshold=thr) == (n_ac + n_iu) / e.size
    assert correct_certain_ratio(u, e, threshold=thr) == n_ac / (n_ac + n_ic)
    assert uncertain_incorrect_ratio(u, e, threshold=thr) == n_iu / (n_ic + n_iu)
    # window 1 with accuracy threshold 0.5: PAvPU is AvU
    assert pavpu(u, e, window=1, threshold=thr) == avu(u, e, threshold=thr)


def test_threshold_extreme_values_float16():
    u = np.array([0.0, 1.0, 65504.0], dtype=np.float16)
    e = np.array([0, 1, 1])
    assert avu(u, e, threshold=1e6) == pytest.approx(1 / 3)  # nothing above: every voxel certain
    assert avu(u, e, threshold=-1e6) == pytest.approx(2 / 3)  # everything above: every voxel uncertain
    assert avu(u, e, threshold=65504.0) == pytest.approx(1 / 3)


# ------------------------------------------------------------------------------------------------ PAvPU accuracy


@pytest.mark.parametrize(
    "window, n_err, acc_thr",
    [((1, 10), 9, 0.1), ((5, 5), 15, 0.4), ((5, 5), 5, 0.8), ((11, 11), 0, 1.0), ((2, 5), 3, 0.7), ((1, 3), 1, 2 / 3)],
)
def test_pavpu_accuracy_threshold_met_exactly(window, n_err, acc_thr):
    """A patch whose accuracy equals the threshold is accurate (``>=``): 1 of 10 correct against 0.1.

    ``1 - 9/10`` is 0.09999999999999998 in float64, below 0.1: the patch was counted inaccurate.
    """
    u = np.zeros(window)  # certain everywhere
    e = np.zeros(window, dtype=bool)
    e.flat[:n_err] = True
    # accurate & certain -> 1
    assert pavpu(u, e, window=window, threshold=0.5, accuracy_threshold=acc_thr) == 1.0
    assert pavpu(u, e, window=window, threshold=0.5, accuracy_threshold=acc_thr) == pavpu_loop(
        u, e, window, 0.5, acc_thr
    )


def test_pavpu_matches_exact_loop_random():
    rng = np.random.default_rng(5)
    for _ in range(30):
        w = tuple(int(v) for v in rng.integers(1, 6, 2))
        u = np.round(rng.random((12, 13)), 1).astype(np.float32)
        e = rng.random((12, 13)) < rng.random()
        thr = float(rng.choice([0.3, 0.5, 0.7]))
        acc = float(rng.choice([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]))
        assert pavpu(u, e, window=w, threshold=thr, accuracy_threshold=acc) == pytest.approx(
            pavpu_loop(u, e, w, thr, acc), abs=1e-15
        )


def _pavpu_exact(u, e, w, thr, acc=0.5):
    """PAvPU by a loop over patches in rational arithmetic (no rounding of the patch mean)."""
    from fractions import Fraction

    hits = n = 0
    for i in range(0, u.shape[0] // w * w, w):
        for j in range(0, u.shape[1] // w * w, w):
            pu, pe = u[i : i + w, j : j + w], e[i : i + w, j : j + w]
            unc = sum(map(Fraction, pu.ravel().tolist())) > Fraction(thr) * pu.size
            accurate = Fraction(int((~pe).sum()), pe.size) >= Fraction(acc)
            hits += accurate != unc
            n += 1
    return hits / n


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_pavpu_patch_mean_at_threshold_is_exact(dtype):
    # found by hostile testing: a constant map of 0.1 at threshold 0.1 (window 3) is certain voxel by voxel, but the
    # float64 patch mean rounded to 0.10000000000000002 > 0.1: every patch uncertain and PAvPU 0 instead of 1
    u = np.full((22, 22), 0.1, dtype=dtype)
    e = np.zeros((22, 22), dtype=bool)
    for w in (3, 5, 7, 11):
        assert pavpu(u, e, window=w, threshold=float(u.flat[0]), per_case=False) == 1.0
    rng = np.random.default_rng(3)
    for _ in range(100):
        u = rng.choice([0.1, 0.2, 0.3, 0.7], size=(13, 13)).astype(dtype)
        e = rng.random((13, 13)) < 0.3
        w = int(rng.choice([2, 3, 5]))
        thr = float(rng.choice([0.1, 0.2, 0.3, 0.7]))
        assert pavpu(u, e, window=w, threshold=thr, per_case=False) == _pavpu_exact(u, e, w, thr)


def test_pavpu_longdouble_map_with_a_patch_mean_at_the_threshold():
    # found by hostile testing: a longdouble map (accepted by every other metric of the module) whose patch mean lay at
    # the threshold crashed with "TypeError: argument should be a string or a Rational instance" (Fraction of numpy's
    # longdouble scalars in the exact check)
    u = np.array([[0.0, 1.0, 0.2, 0.2], [1.0, 0.0, 0.2, 0.2]], dtype=np.longdouble)
    e = np.zeros((2, 4), dtype=bool)
    assert pavpu(u, e, window=2, threshold=0.5, per_case=False) == 1.0  # mean 0.5 exactly: certain
    assert pavpu(u, e, window=2, threshold=0.5, per_case=False) == pavpu(u.astype(np.float64), e, window=2,
                                                                         threshold=0.5, per_case=False)
    # a patch mean a longdouble ulp above the threshold is uncertain, as the exact values say (float64 rounds it away)
    eps = np.finfo(np.longdouble).eps
    if eps < np.finfo(np.float64).eps:  # longdouble is wider than float64 on this platform
        v = np.array([[0.5 + eps, 0.5], [0.5, 0.5]], dtype=np.longdouble)
        assert pavpu(v, np.zeros((2, 2), dtype=bool), window=2, threshold=0.5, per_case=False) == 0.0


# ------------------------------------------------------------------------------------------------ argument checks


@pytest.mark.parametrize("window", [2.5, 2.0, True, "4", (2, 2.5), (True, 2), None])
def test_pavpu_window_must_be_integers(window):
    u = np.zeros((8, 8))
    with pytest.raises(TypeError, match="window"):
        pavpu(u, np.zeros((8, 8)), window=window)


def test_pavpu_window_numpy_integers_accepted():
    u = np.random.default_rng(0).random((8, 8))
    e = u > 0.7
    assert pavpu(u, e, window=np.int64(2)) == pavpu(u, e, window=2) == pavpu(u, e, window=(np.int32(2), 2))
    assert pavpu(u, e, window=np.array([2, 2])) == pavpu(u, e, window=[2, 2]) == pavpu(u, e, window=2)


@pytest.mark.parametrize("fn", [avu, correct_certain_ratio, uncertain_incorrect_ratio])
@pytest.mark.parametrize("thr", ["0.5", None, True, b"0.5"])
def test_threshold_must_be_a_number(fn, thr):
    with pytest.raises(TypeError, match="threshold"):
        fn(np.r_[0.2, 0.8], np.r_[0, 1], threshold=thr)


def test_pavpu_accuracy_threshold_must_be_a_number():
    with pytest.raises(TypeError, match="accuracy_threshold"):
        pavpu(np.zeros((4, 4)), np.zeros((4, 4)), window=2, accuracy_threshold="0.5")
    with pytest.raises(TypeError, match="threshold"):
        pavpu(np.zeros((4, 4)), np.zeros((4, 4)), window=2, threshold=None)


def test_numpy_scalar_thresholds_accepted():
    u, e = np.r_[0.2, 0.8, 0.6], np.r_[0, 1, 0]
    assert avu(u, e, threshold=np.float32(0.5)) == avu(u, e, threshold=0.5) == avu(u, e, threshold=np.float64(0.5))
    assert avu(u, e, threshold=0) == avu(u, e, threshold=0.0)


# ------------------------------------------------------------------------------------------------ checked and correct


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_rank_metrics_ties_and_dtypes_against_sklearn(dtype):
    rng = np.random.default_rng(11)
    for _ in range(50):
        n = int(rng.integers(2, 40))
        u = (rng.integers(0, 4, n) / 3).astype(dtype)  # heavy ties
        e = rng.random(n) < rng.random()
        if not e.any() or e.all():
            continue
        u64 = u.astype(np.float64)
        assert error_auroc(u, e, per_case=False) == pytest.approx(roc_auc_score(e, u64), abs=1e-12)
        assert error_auprc(u, e, per_case=False) == pytest.approx(average_precision_score(e, u64), abs=1e-12)


def test_degenerate_cases_nan_with_warning():
    with pytest.warns(UserWarning):
        assert math.isnan(error_auroc(np.ones(1), np.ones(1)))
    with pytest.warns(UserWarning):
        assert math.isnan(error_auprc(np.ones(3), np.zeros(3)))
    # constant uncertainty: chance, with a warning that the scores cannot rank the voxels (review 61)
    with pytest.warns(UserWarning, match="all 4 scores are tied, so the scores cannot rank"):
        assert error_auroc(np.ones(4), np.r_[0, 1, 0, 1]) == 0.5
    with pytest.warns(UserWarning, match="all 4 scores are tied, so the scores cannot rank"):
        assert au_arc(np.ones(4), np.r_[0, 1, 0, 1]) == 0.5
    # every voxel an error: no correct voxel to tell the errors from, undefined as for the AUROC (was 1.0, a perfect
    # detector, for any map; tests/metrics/test_discrimination_selective.py)
    with pytest.warns(UserWarning, match="no correct voxel"):
        assert math.isnan(error_auprc(np.ones(4), np.r_[1, 1, 1, 1]))


def test_requires_grad_and_bfloat16_tensors():
    torch.manual_seed(0)
    u = torch.rand(2, 1, 6, 6, requires_grad=True)
    e = torch.rand(2, 1, 6, 6) < 0.3
    ref = [roc_auc_score(e[i].ravel().numpy(), u[i].detach().ravel().numpy()) for i in range(2)]
    np.testing.assert_allclose(error_auroc(u, e, per_case=True).numpy(), ref, atol=1e-12)
    out = avu(u.detach().bfloat16(), e, threshold=0.3, per_case=True)
    assert out.dtype == torch.float64 and out.shape == (2,)


def test_voxel_accuracy_takes_a_longdouble_map_as_the_other_metrics_do():
    # found by hostile testing: voxel_accuracy took its rounding tolerance from a torch copy of the map, and torch
    # holds no longdouble, so a longdouble map (accepted by every other metric of the module) raised a TypeError
    rng = np.random.default_rng(0)
    u = rng.random((2, 1, 4, 4))
    e = rng.random((2, 1, 4, 4)) < 0.3
    want = voxel_accuracy(u, e, per_case=False)
    assert voxel_accuracy(u.astype(np.longdouble), e, per_case=False) == pytest.approx(want, abs=1e-15)
    np.testing.assert_allclose(voxel_accuracy(u.astype(np.longdouble), e, per_case=True),
                               voxel_accuracy(u, e, per_case=True), atol=1e-15)
    # the tolerance stays that of the given dtype: 1e-3 above 1 is clipped, 1e-2 refused; bfloat16 keeps its own
    assert voxel_accuracy(np.minimum(u + 1e-3, 1 + 1e-3).astype(np.longdouble), e, per_case=False) > 0
    with pytest.raises(ValueError, match="uncertainty must lie in"):
        voxel_accuracy((u + 1e-2).astype(np.longdouble), e, per_case=False)
    t = torch.full((1, 1, 4, 4), 1.0 + 2 ** -6, dtype=torch.bfloat16)  # 1.016: within bfloat16's 0.031
    assert voxel_accuracy(t, torch.zeros(1, 1, 4, 4), per_case=False) == pytest.approx(0.0)
