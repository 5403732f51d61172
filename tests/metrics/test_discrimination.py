"""Voxel-wise discrimination metrics against scikit-learn, brute-force loops and hand-worked cases."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, roc_auc_score

from monai_unc.metrics.casewise import ood_auroc
from monai_unc.metrics.discrimination import (
    au_arc,
    auroc,
    avu,
    correct_certain_ratio,
    error_auprc,
    error_auroc,
    pavpu,
    uncertain_incorrect_ratio,
    voxel_accuracy,
)


def sample(n, seed, decimals=None, rate=0.3):
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    if decimals is not None:
        u = np.round(u, decimals)  # many ties
    e = rng.random(n) < rate * (0.5 + u)  # errors more likely where uncertain
    return u, e


def brute_counts(u, e, thr):
    n_ac = n_au = n_ic = n_iu = 0
    for ui, ei in zip(u.ravel(), e.ravel()):
        unc = ui > thr
        if not ei and not unc:
            n_ac += 1
        elif not ei and unc:
            n_au += 1
        elif ei and not unc:
            n_ic += 1
        else:
            n_iu += 1
    return n_ac, n_au, n_ic, n_iu


def brute_arc_area(u, e):
    """Accuracy-rejection curve by looping over thresholds: keep u <= t for each distinct t."""
    u, e = u.ravel(), e.ravel()
    n = u.size
    pts = []  # (rejected fraction, accuracy of the kept voxels)
    for t in np.unique(u):
        kept = u <= t
        pts.append((1.0 - kept.sum() / n, 1.0 - e[kept].mean()))
    pts.sort()
    pts.append((1.0, pts[-1][1]))  # full rejection repeats the most certain group's accuracy
    x = np.array([p[0] for p in pts])
    y = np.array([p[1] for p in pts])
    return float(np.sum(np.diff(x) * (y[1:] + y[:-1]) / 2))


# ------------------------------------------------------------------------------------------------ ranking


@pytest.mark.parametrize("decimals", [None, 1, 2])
def test_auroc_auprc_match_sklearn(decimals):
    for seed in range(4):
        u, e = sample(3000, seed, decimals)
        assert error_auroc(u, e) == pytest.approx(roc_auc_score(e, u), abs=1e-12)
        assert error_auprc(u, e) == pytest.approx(average_precision_score(e, u), abs=1e-12)


def test_auroc_hand_worked():
    u = np.array([0.1, 0.4, 0.4, 0.8])
    e = np.array([0, 0, 1, 1])
    # pairs (error, correct): (0.4 vs 0.1) 1, (0.4 vs 0.4) 1/2, (0.8 vs 0.1) 1, (0.8 vs 0.4) 1 -> 3.5 / 4
    assert error_auroc(u, e) == 0.875
    # AP: threshold 0.8 -> P = 1, R = 1/2; threshold 0.4 -> P = 2/3, R = 1 -> 1/2 * 1 + 1/2 * 2/3
    assert error_auprc(u, e) == pytest.approx(0.5 + 1 / 3, abs=1e-15)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 60), st.sampled_from([None, 1]))
def test_rank_metrics_properties(seed, n, decimals):
    u, e = sample(n, seed, decimals)
    if e.all() or not e.any():
        return
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    auroc = error_auroc(u, e)
    assert 0.0 <= auroc <= 1.0
    assert error_auroc(u[perm], e[perm]) == pytest.approx(auroc, abs=1e-15)  # voxel order does not matter
    assert error_auroc(np.exp(3 * u), e) == pytest.approx(auroc, abs=1e-15)  # only the ranking matters
    assert error_auroc(-u, e) == pytest.approx(1.0 - auroc, abs=1e-12)
    assert error_auprc(u, e) == pytest.approx(average_precision_score(e, u), abs=1e-12)


def test_large_input_float32_single_sort():
    rng = np.random.default_rng(1)
    u = rng.random(1_000_000, dtype=np.float32)
    e = rng.random(1_000_000) < 0.2 * (1 + u)
    assert error_auroc(u, e) == pytest.approx(roc_auc_score(e, u), abs=1e-10)


# ------------------------------------------------------------------------------------------------ thresholded


@pytest.mark.parametrize("thr", [0.0, 0.3, 0.5, 0.95])
def test_threshold_metrics_match_brute_force(thr):
    u, e = sample(500, 3, decimals=1)
    n_ac, n_au, n_ic, n_iu = brute_counts(u, e, thr)
    assert avu(u, e, threshold=thr) == pytest.approx((n_ac + n_iu) / 500, abs=1e-15)
    assert correct_certain_ratio(u, e, threshold=thr) == pytest.approx(n_ac / (n_ac + n_ic), abs=1e-15)
    assert uncertain_incorrect_ratio(u, e, threshold=thr) == pytest.approx(n_iu / (n_ic + n_iu), abs=1e-15)


def test_threshold_tie_is_certain():
    u = np.array([0.5, 0.5, 0.7, 0.2])
    e = np.array([0, 1, 1, 0])
    # u > 0.5 is uncertain: only 0.7 -> n_ac = 2 (0.5 ok, 0.2 ok), n_ic = 1, n_iu = 1, n_au = 0
    assert avu(u, e) == 0.75
    assert correct_certain_ratio(u, e) == pytest.approx(2 / 3)
    assert uncertain_incorrect_ratio(u, e) == 0.5


def brute_pavpu(u, e, w, thr, acc_thr=0.5):
    hits = total = 0
    for i in range(0, u.shape[0] - w + 1, w):
        for j in range(0, u.shape[1] - w + 1, w):
            acc = 1 - e[i : i + w, j : j + w].mean()
            unc = u[i : i + w, j : j + w].mean()
            hits += (acc >= acc_thr and unc <= thr) or (acc < acc_thr and unc > thr)
            total += 1
    return hits / total


def test_pavpu_matches_loop_and_3d():
    rng = np.random.default_rng(0)
    u = rng.random((23, 17))
    e = rng.random((23, 17)) < u * 0.9
    for w, thr in [(2, 0.5), (4, 0.4), (5, 0.6)]:
        assert pavpu(u, e, window=w, threshold=thr) == pytest.approx(brute_pavpu(u, e, w, thr), abs=1e-15)
    # 3D: each 2x2x2 cube; the last incomplete slab is dropped
    u3 = rng.random((5, 6, 4))
    e3 = rng.random((5, 6, 4)) < 0.4
    hits = total = 0
    for i in range(0, 4, 2):
        for j in range(0, 6, 2):
            for k in range(0, 4, 2):
                acc = 1 - e3[i : i + 2, j : j + 2, k : k + 2].mean()
                unc = u3[i : i + 2, j : j + 2, k : k + 2].mean()
                hits += (acc >= 0.5 and unc <= 0.5) or (acc < 0.5 and unc > 0.5)
                total += 1
    assert pavpu(u3, e3, window=2) == pytest.approx(hits / total)
    # per-axis window
    assert pavpu(u, e, window=(1, 1), threshold=0.5) == pytest.approx(avu(u, e, threshold=0.5), abs=1e-15)


def test_voxel_accuracy_and_au_arc():
    u, e = sample(400, 5, decimals=1)
    assert voxel_accuracy(u, e) == pytest.approx(1 - np.abs(u - e).mean(), abs=1e-15)
    assert au_arc(u, e) == pytest.approx(brute_arc_area(u, e), abs=1e-12)
    # oracle ranking: errors most uncertain -> near-perfect accuracy over almost the whole curve
    u_oracle = e.astype(float) + 0.01 * np.random.default_rng(0).random(e.size)
    assert au_arc(u_oracle, e) > au_arc(u, e) > au_arc(-u_oracle + 2, e)
    # constant uncertainty: everything rejected together -> the plain accuracy
    assert au_arc(np.full(e.size, 0.3), e) == pytest.approx(1 - e.mean(), abs=1e-15)


# ------------------------------------------------------------------------------------------------ shapes


def test_batch_torch_and_error_shapes():
    rng = np.random.default_rng(0)
    u = rng.random((3, 1, 6, 7, 5)).astype(np.float32)
    e = rng.random((3, 6, 7, 5)) < 0.3
    fns = [error_auroc, error_auprc, avu, correct_certain_ratio, uncertain_incorrect_ratio, voxel_accuracy, au_arc]
    for fn in fns:
        batch = fn(u, e, per_case=True)
        assert isinstance(batch, np.ndarray) and batch.shape == (3,)
        np.testing.assert_allclose(batch, [fn(u[i, 0], e[i]) for i in range(3)], atol=0)
        tb = fn(torch.from_numpy(u), torch.from_numpy(e[:, None]), per_case=True)
        assert isinstance(tb, torch.Tensor) and tb.dtype == torch.float64
        np.testing.assert_allclose(tb.numpy(), batch, atol=0)
    batch = pavpu(u, e, window=2, per_case=True)
    np.testing.assert_allclose(batch, [pavpu(u[i, 0], e[i], window=2) for i in range(3)])
    # integer / float 0-1 error maps are accepted; unbatched any shape is pooled
    assert error_auroc(u.ravel(), e.ravel().astype(np.int8)) == error_auroc(u.ravel(), e.ravel().astype(float))


# ------------------------------------------------------------------------------------------------ one AUROC


def old_ood_auroc(iid, ood):
    """metrics/casewise.py's rank formula before it called discrimination.auroc (Mann-Whitney U from ranks)."""
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([iid, ood]))
    u = ranks[iid.size:].sum() - ood.size * (ood.size + 1) / 2.0
    return float(u / (iid.size * ood.size))


@pytest.mark.parametrize("decimals", [None, 1, 0])
def test_auroc_equals_sklearn_with_ties(decimals):
    rng = np.random.default_rng(11)
    for n_pos, n_neg in [(1, 1), (3, 7), (40, 25), (200, 300)]:
        pos = rng.random(n_pos) + 0.2
        neg = rng.random(n_neg)
        if decimals is not None:
            pos, neg = np.round(pos, decimals), np.round(neg, decimals)  # many (or all) ties
        y = np.r_[np.ones(n_pos), np.zeros(n_neg)]
        expected = roc_auc_score(y, np.r_[pos, neg])
        assert auroc(pos, neg) == pytest.approx(expected, abs=1e-12)
        # the three callers give the same number: the voxel-wise error AUROC, the OoD AUROC and the old rank formula
        assert error_auroc(np.r_[pos, neg], y.astype(bool)) == auroc(pos, neg)
        assert ood_auroc(neg, pos) == auroc(pos, neg) == old_ood_auroc(neg, pos)  # bit for bit
    assert auroc([0.5, 0.5], [0.5]) == 0.5 and auroc([2.0], [1.0, 0.0]) == 1.0 and auroc([0.0], [1.0]) == 0.0


def test_auroc_degenerate_and_bad_inputs():
    with pytest.warns(UserWarning, match="positive group is empty"):
        assert math.isnan(auroc([], [0.1]))
    with pytest.warns(UserWarning, match="negative group is empty"):
        assert math.isnan(auroc(np.zeros((2, 2)), np.zeros(0)))
    with pytest.raises(ValueError, match="negative contains 1 non-finite"):
        auroc([0.1], [np.nan])
    with pytest.raises(TypeError, match="positive must hold real numbers"):
        auroc(np.array(["a"]), [0.1])
    assert auroc(torch.tensor([[0.9, 0.8]]), np.array([0.1])) == 1.0  # any shape, torch or numpy


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=30),
    st.lists(st.integers(0, 4), min_size=1, max_size=30),
)
def test_property_auroc_mirror_and_sklearn(pos, neg):
    pos, neg = np.array(pos, dtype=float), np.array(neg, dtype=float)
    a = auroc(pos, neg)
    assert a == pytest.approx(1.0 - auroc(neg, pos), abs=1e-12)  # swapping the groups mirrors it
    y = np.r_[np.ones(pos.size), np.zeros(neg.size)]
    assert a == pytest.approx(roc_auc_score(y, np.r_[pos, neg]), abs=1e-12)
    assert ood_auroc(neg, pos) == a == old_ood_auroc(neg, pos)


ALL_FNS = [error_auroc, error_auprc, avu, correct_certain_ratio, uncertain_incorrect_ratio, voxel_accuracy, au_arc]


def test_per_case_fixes_the_return_type():
    """per_case=True: always a (B,) array (B = 1 too); per_case=False: always one float of the pooled voxels."""
    rng = np.random.default_rng(4)
    u = rng.random((3, 1, 6, 7)).astype(np.float64)
    e = rng.random((3, 6, 7)) < 0.3
    for fn in ALL_FNS:
        one = fn(u[:1], e[:1], per_case=True)
        assert isinstance(one, np.ndarray) and one.shape == (1,)
        assert one[0] == fn(u[0, 0], e[0])
        pooled = fn(u, e, per_case=False)
        assert isinstance(pooled, float)
        assert pooled == fn(u.reshape(-1), e.reshape(-1))  # every voxel of every case in one pool
        assert isinstance(fn(u[0, 0], e[0], per_case=False), float)
        with pytest.raises(ValueError, match=r"per_case=True needs uncertainty of shape \(B, 1"):
            fn(u[0, 0], e[0], per_case=True)
        with pytest.raises(TypeError, match="per_case"):
            fn(u, e, per_case="yes")
        # the shape-dependent default still gives per-case values, with a DeprecationWarning naming per_case
        with pytest.warns(DeprecationWarning, match="per_case"):
            legacy = fn(u, e)
        np.testing.assert_array_equal(legacy, fn(u, e, per_case=True))
    # PAvPU pooled over a batch counts the patches of every case together (brute force over the cases)
    w, thr = 3, 0.5
    hits = total = 0
    for i in range(3):
        acc = brute_patch_mean(e[i].astype(float), w) <= 0.5
        unc = brute_patch_mean(u[i, 0], w) > thr
        hits += int(np.sum(acc & ~unc) + np.sum(~acc & unc))
        total += acc.size
    assert pavpu(u, e, window=w, threshold=thr, per_case=False) == pytest.approx(hits / total, abs=1e-15)
    assert pavpu(u[:1], e[:1], window=w, per_case=True).shape == (1,)


def brute_patch_mean(x, w):
    """Means over complete non-overlapping w x w patches, by loops."""
    n0, n1 = x.shape[0] // w, x.shape[1] // w
    return np.array([[x[i * w:(i + 1) * w, j * w:(j + 1) * w].mean() for j in range(n1)] for i in range(n0)])


def test_degenerate_and_bad_inputs():
    u = np.linspace(0, 1, 10)
    none = np.zeros(10, bool)
    allw = np.ones(10, bool)
    for fn, err in [(error_auroc, none), (error_auroc, allw), (error_auprc, none),
                    (uncertain_incorrect_ratio, none)]:  # fmt: skip
        with pytest.warns(UserWarning):
            assert math.isnan(fn(u, err))
    with pytest.warns(UserWarning, match="certain"):
        assert math.isnan(correct_certain_ratio(np.ones(10), none, threshold=0.5))
    with pytest.warns(UserWarning, match="window"):
        assert math.isnan(pavpu(np.zeros((3, 3)), np.zeros((3, 3)), window=4))
    # all-correct is fine for the thresholded accuracies
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert avu(u, none) == pytest.approx(np.mean(u <= 0.5))
        assert voxel_accuracy(u, none) == pytest.approx(1 - u.mean())
    with pytest.raises(ValueError, match="binary"):
        error_auroc(u, np.full(10, 0.5))
    with pytest.raises(ValueError, match="uncertainty"):
        error_auroc(np.where(u > 0.5, np.nan, u), none)
    with pytest.raises(ValueError, match="shape"):
        avu(u, none[:5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        voxel_accuracy(u * 2, none)
    with pytest.raises(ValueError, match="threshold"):
        avu(u, none, threshold=float("nan"))
    with pytest.raises(ValueError, match="window"):
        pavpu(np.zeros((4, 4)), np.zeros((4, 4)), window=0)
    with pytest.raises(ValueError, match="2D/3D"):
        pavpu(u, none)
    with pytest.raises(ValueError, match="empty"):
        error_auroc(np.zeros(0), np.zeros(0, bool))
    with pytest.raises(TypeError, match="uncertainty"):
        error_auroc("abc", none)
