"""Hostile review of the comparison statistics: brute-force references, Monte Carlo error rates, degenerate and bad
input."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from monai_unc.metrics.compare import (
    cochrans_q,
    cohens_d,
    compare_metric_values,
    holm_correction,
    mcnemar_test,
)

# ---------------------------------------------------------------- brute-force references


def _ref_mcnemar_exact(x, y):
    b = sum(1 for u, v in zip(x, y) if u and not v)
    c = sum(1 for u, v in zip(x, y) if v and not u)
    n = b + c
    if n == 0:
        return 1.0
    probs = [math.comb(n, i) / 2**n for i in range(n + 1)]  # the two-sided p: outcomes no likelier than b
    return min(1.0, sum(q for q in probs if q <= probs[b] * (1 + 1e-12)))


def _ref_cochran(x):
    x = np.asarray(x, dtype=float)
    n, k = x.shape
    col, row = x.sum(0), x.sum(1)
    total = x.sum()
    num = k * (k - 1) * ((col - total / k) ** 2).sum()
    den = (row * (k - row)).sum()
    return num / den


@pytest.mark.parametrize("seed", range(15))
def test_mcnemar_and_cochran_equal_brute_force_references(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    x = rng.random(n) < rng.random()
    y = rng.random(n) < rng.random()
    assert mcnemar_test(x, y) == pytest.approx(_ref_mcnemar_exact(x, y), rel=1e-12)
    k = int(rng.integers(2, 6))
    out = rng.random((n, k)) < rng.random(k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        q, p, df = cochrans_q(out)
    row = out.sum(1)
    if ((row == 0) | (row == k)).all():
        assert math.isnan(q)
    else:
        assert q == pytest.approx(_ref_cochran(out), rel=1e-12) and df == k - 1
        assert p == pytest.approx(stats.chi2.sf(_ref_cochran(out), k - 1), rel=1e-9)


def test_exact_mcnemar_keeps_its_level_by_simulation():
    """Under the null (b and c equally likely) the exact test rejects at most alpha of the time (it is
    conservative); 4000 draws of 25 pairs: the rejection rate + 3 standard errors stays below 0.05."""
    rng = np.random.default_rng(0)
    reps, n = 4000, 25
    rejected = 0
    for _ in range(reps):
        u = rng.random(n)
        x = u < 0.4  # x-only 0.2, y-only 0.2, both 0.2, neither 0.4
        y = (u >= 0.2) & (u < 0.6)
        rejected += mcnemar_test(x, y) <= 0.05
    rate = rejected / reps
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps), rate
    assert rate > 0.01  # not vacuous: the test does reject sometimes


def test_cohens_d_equals_numpy_and_is_antisymmetric():
    rng = np.random.default_rng(1)
    for _ in range(10):
        a, b = rng.normal(0, 1, rng.integers(2, 20)), rng.normal(0.5, 2, rng.integers(2, 20))
        ref = (a.mean() - b.mean()) / math.sqrt((np.var(a, ddof=1) + np.var(b, ddof=1)) / 2)
        assert cohens_d(a, b) == pytest.approx(ref, rel=1e-12)
        assert cohens_d(b, a) == pytest.approx(-ref, rel=1e-12)


def test_holm_with_ties_and_ones_equals_the_definition():
    p = np.array([0.01, 0.01, 0.5, 1.0, 0.02])
    m = 5  # sorted 0.01, 0.01, 0.02, 0.5, 1: 0.05, 0.04 -> 0.05, 0.06, 1, 1
    np.testing.assert_allclose(holm_correction(p), [0.05, 0.05, 1.0, 1.0, 0.06])
    assert holm_correction(np.full(m, 1.0)).tolist() == [1.0] * m


# ---------------------------------------------------------------- compare_metric_values


def test_identical_methods_prefer_neither_and_report_ties():
    v = {"m": [0.3, 0.5, 0.7], "n": [1.0, 2.0, 3.0]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = compare_metric_values(v, v, True)
    for m in res.metrics.values():
        assert m.accuracy == 0.0 and m.n_ties == 3 and m.cohens_d == 0.0 and m.mean_relative_difference == 0.0
    assert res.mcnemar_p[0, 1] == 1.0 and math.isnan(res.cochran_q)


@pytest.mark.parametrize("values_a,values_b", [([0.5], [0.4]), ([0.5, 0.5], [0.4, 0.4])])
def test_an_undefined_cohens_d_comes_with_a_warning(values_a, values_b):
    """One case, or constant values: Cohen's d is NaN, and the caller is told (as cohens_d itself does)."""
    with pytest.warns(UserWarning, match="Cohen's d"):
        res = compare_metric_values({"m": values_a}, {"m": values_b}, True)
    assert math.isnan(res.metrics["m"].cohens_d) and res.metrics["m"].accuracy == 1.0


def test_direction_flips_every_signed_statistic():
    a, b = np.array([0.2, 0.4, 0.3, 0.5]), np.array([0.3, 0.1, 0.2, 0.6])
    up = compare_metric_values({"m": a}, {"m": b}, True).metrics["m"]
    down = compare_metric_values({"m": a}, {"m": b}, False).metrics["m"]
    assert up.accuracy == 0.5 and down.accuracy == 0.5
    assert down.cohens_d == pytest.approx(-up.cohens_d) and up.cohens_d == pytest.approx(cohens_d(a, b))
    ref = np.mean(100 * (a - b) / np.abs(b))
    assert up.mean_relative_difference == pytest.approx(ref) and down.mean_relative_difference == pytest.approx(-ref)


@pytest.mark.parametrize("alpha", [0, 1, -0.1, 5, float("nan"), True, "0.05"])
def test_alpha_is_checked(alpha):
    with pytest.raises(ValueError, match="alpha"):
        compare_metric_values({"m": [1.0, 2.0]}, {"m": [0.0, 1.0]}, True, alpha=alpha)


def test_numpy_bool_direction_is_a_direction():
    for flag in (np.True_, np.False_):
        res = compare_metric_values({"m": [1.0, 2.0]}, {"m": [0.0, 1.0]}, flag)
        assert res.metrics["m"].higher_is_better is bool(flag)


def test_a_direction_that_is_not_a_bool_is_refused():
    with pytest.raises(TypeError, match="higher_is_better"):
        compare_metric_values({"m": [1.0, 2.0]}, {"m": [0.0, 1.0]}, {"m": "False"})
    with pytest.raises(TypeError, match="higher_is_better"):
        compare_metric_values({"m": [1.0, 2.0]}, {"m": [0.0, 1.0]}, "yes")


def test_holm_of_a_2d_array_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match="p_values"):
        holm_correction([[0.1, 0.2], [0.3, 0.4]])


def test_significance_across_metrics_by_simulation_keeps_the_familywise_level():
    """Three metrics with the same preference rate (null): the Holm-corrected McNemar tests declare a metric
    significantly better than another in at most alpha of 1000 simulated studies (+ 3 standard errors)."""
    rng = np.random.default_rng(3)
    reps, n, hits = 1000, 30, 0
    for _ in range(reps):
        base = rng.normal(size=n)
        vals_a = {f"m{j}": base + rng.normal(size=n) for j in range(3)}
        vals_b = {f"m{j}": base + rng.normal(size=n) for j in range(3)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            res = compare_metric_values(vals_a, vals_b, True)
        hits += any(res.significantly_better(name) for name in res.names)
    rate = hits / reps
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps), rate


def test_same_cases_for_every_metric_and_2d_values_are_refused():
    with pytest.raises(ValueError, match="same cases"):
        compare_metric_values({"m": [1.0, 2.0], "n": [1.0]}, {"m": [0.0, 1.0], "n": [1.0]}, True)
    with pytest.raises(ValueError, match="1-D"):
        compare_metric_values({"m": [[1.0, 2.0]]}, {"m": [[0.0, 1.0]]}, True)


def test_all_pairs_of_a_tiny_study_are_tested():
    vals = {name: np.array(v) for name, v in zip("abc", ([1, 0, 1], [0, 1, 1], [1, 1, 0]))}
    zeros = {name: np.zeros(3) + 0.5 for name in "abc"}
    res = compare_metric_values(vals, zeros, True)
    for i, j in itertools.combinations(range(3), 2):
        x, y = res.metrics["abc"[i]].prefers_a, res.metrics["abc"[j]].prefers_a
        assert res.mcnemar_p[i, j] == pytest.approx(_ref_mcnemar_exact(x, y))


def test_compare_uncertainty_maps_checks_alpha_before_computing_metrics():
    from monai_unc.metrics.compare import compare_uncertainty_maps

    calls = []

    def metric(u, p, t, spacing=1.0):
        calls.append(1)
        return float(u.mean())

    maps = np.random.default_rng(0).random((3, 4, 4))
    labels = np.zeros((3, 4, 4), np.int64)
    with pytest.raises(ValueError, match="alpha"):
        compare_uncertainty_maps({"m": metric}, maps, maps, True, pred=labels, target=labels, alpha=1.5)
    assert not calls


def test_metrics_without_a_common_valid_case_get_an_undefined_p_value_not_1():
    nan = float("nan")
    a = {"m": [0.9, 0.8, nan, nan], "n": [nan, nan, 0.9, 0.7]}
    b = {"m": [0.1, 0.2, 0.3, 0.4], "n": [0.1, 0.2, 0.3, 0.4]}
    with pytest.warns(UserWarning, match="share no valid case"):
        res = compare_metric_values(a, b, True)
    assert np.isnan(res.mcnemar_p[0, 1]) and np.isnan(res.mcnemar_p_holm[0, 1])
    assert math.isnan(res.cochran_q)
    assert res.significantly_better("m") == [] and res.metrics["m"].accuracy == 1.0


def test_rounding_noise_is_a_tie_not_a_preference():
    """BUC is scale invariant: a map and the same map in other units (nats, and divided by log 3) agree to about
    1e-14. Such differences were counted as preferences (6 of 7 cases for one map, no tie) and fed McNemar / Cochran."""
    from scipy import ndimage

    from monai_unc.metrics.compare import compare_uncertainty_maps

    rng = np.random.default_rng(0)
    maps, preds, targets = [], [], []
    for _ in range(8):
        targets.append((ndimage.gaussian_filter(rng.standard_normal((24, 24)), 3) > 0).astype(int))
        preds.append((ndimage.gaussian_filter(rng.standard_normal((24, 24)), 3) > 0).astype(int))
        maps.append(rng.random((24, 24)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = compare_uncertainty_maps(["BUC"], maps, [m / math.log(3) for m in maps], pred=preds, target=targets)
    m = res.metrics["BUC"]
    assert int(m.valid.sum()) >= 6 and m.n_ties == int(m.valid.sum()) and m.accuracy == 0.0
    # two constant maps: no concentration either way, a tie in every case
    t = np.zeros((4, 8, 8), int)
    t[:, 2:6, 2:6] = 1
    res = compare_uncertainty_maps(["BUC"], np.full((4, 1, 8, 8), 0.1), np.full((4, 1, 8, 8), 0.3), pred=t, target=t)
    assert res.metrics["BUC"].n_ties == 4 and res.metrics["BUC"].accuracy == 0.0
    # a real difference, however small against the values, is still a preference
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = compare_metric_values({"m": [0.5 + 1e-9, 0.5]}, {"m": [0.5, 0.5 * (1 + 1e-14)]}, True)
    assert res.metrics["m"].prefers_a.tolist() == [True, False] and res.metrics["m"].n_ties == 1


def _ref_mcnemar_chi2_r(b, c):
    """R's ``mcnemar.test`` (correct = TRUE): the continuity correction applies only where b != c."""
    stat = 0.0 if b == c else (abs(b - c) - 1) ** 2 / (b + c)
    return stats.chi2.sf(stat, 1)


@pytest.mark.parametrize("b, c", [(1, 1), (5, 5), (6, 5), (5, 6), (0, 3), (30, 10), (2, 0)])
def test_mcnemar_chi2_is_one_for_balanced_discordant_pairs(b, c):
    # found by hostile testing: b = c = 5 gave p = 0.75 (the "correction" (|b - c| - 1)^2 = 1), while the weaker
    # evidence b = 6, c = 5 gave p = 1: a p-value not monotone in |b - c|
    x = np.r_[np.ones(b), np.zeros(c), np.ones(3), np.zeros(2)].astype(bool)
    y = np.r_[np.zeros(b), np.ones(c), np.ones(3), np.zeros(2)].astype(bool)
    assert mcnemar_test(x, y, exact=False) == pytest.approx(_ref_mcnemar_chi2_r(b, c), rel=1e-12)
    ps = [mcnemar_test(np.r_[np.ones(i), np.zeros(10 - i)], np.r_[np.zeros(i), np.ones(10 - i)], exact=False)
          for i in range(5, 11)]
    assert all(p1 >= p2 for p1, p2 in zip(ps, ps[1:]))  # more imbalance, never a larger p


def test_pandas_series_with_other_case_order_are_refused():
    # found by hostile testing: Series indexed by case id from two tables sorted differently were paired by position
    # (c1 of map a against c3 of map b): accuracy 1.0, where the cases matched by id give 2/3
    pd = pytest.importorskip("pandas")
    a = pd.Series([1.0, 2.0, 3.0], index=["c1", "c2", "c3"])
    b = pd.Series([0.5, 1.5, 2.5], index=["c3", "c2", "c1"])
    with pytest.raises(ValueError, match="paired by position"):
        compare_metric_values({"m": a}, {"m": b}, True)
    with pytest.raises(ValueError, match=r"values_a\['n'\]"):  # across metrics too: McNemar pairs cases of metrics
        compare_metric_values({"m": a, "n": b}, {"m": a, "n": b}, True)
    res = compare_metric_values({"m": a}, {"m": b.reindex(a.index)}, True)
    assert res.metrics["m"].accuracy == pytest.approx(2 / 3)
    # one index, or unlabelled values next to labelled ones: paired by position as before
    res = compare_metric_values({"m": a, "n": [1.0, 2.0, 3.0]}, {"m": np.array([0.5, 1.5, 2.5]), "n": a}, True)
    assert res.metrics["m"].accuracy == 1.0


@pytest.mark.parametrize("kind", ["grad", "bfloat16"])
def test_statistics_take_tensors_as_the_per_case_metrics_return_them(kind):
    # found by hostile testing: numpy.asarray refused a tensor requiring grad or in bfloat16 (and any CUDA tensor, e.g.
    # error_auroc(..., per_case=True) of maps on the GPU): compare_metric_values, cohens_d and holm_correction crashed
    import torch

    def t(values, dtype=torch.float32):
        x = torch.tensor(values, dtype=torch.bfloat16 if kind == "bfloat16" else dtype)
        return x.requires_grad_() if kind == "grad" else x

    a, b = [1.0, 2.0, 3.0, 4.0], [0.5, 2.5, 2.0, 3.0]
    res = compare_metric_values({"m": t(a)}, {"m": t(b)}, True)
    ref = compare_metric_values({"m": np.array(a)}, {"m": np.array(b)}, True)
    assert res.metrics["m"].accuracy == ref.metrics["m"].accuracy == 0.75
    assert res.metrics["m"].cohens_d == pytest.approx(ref.metrics["m"].cohens_d, rel=1e-6)
    assert cohens_d(t(a), t(b)) == pytest.approx(cohens_d(a, b), rel=1e-6)
    np.testing.assert_allclose(holm_correction(t([0.01, 0.04, 0.5])), holm_correction([0.01, 0.04, 0.5]), rtol=1e-2)
    x, y = [1, 1, 0, 1], [0, 1, 0, 0]
    assert mcnemar_test(torch.tensor(x), torch.tensor(y)) == mcnemar_test(x, y)
    assert cochrans_q(torch.tensor([x, y]).T)[0] == cochrans_q(np.array([x, y]).T)[0]


def test_comparison_warnings_point_at_the_callers_line():
    # found by hostile testing: the warnings of compare_metric_values (a NaN case, b = 0, Cochran's Q undefined) and of
    # compare_uncertainty_maps pointed into monai_unc/metrics/compare.py, not at the study's call
    import torch

    from monai_unc.metrics import compare_uncertainty_maps

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compare_metric_values({"x": [np.nan, 1.0, 2.0], "y": [1.0, 1.0, 1.0]}, {"x": [1.0, 0.0, 3.0], "y": [0.0] * 3},
                              True)
    assert {w.filename for w in caught} == {__file__} and len(caught) >= 3
    target = torch.zeros(3, 8, 8, dtype=torch.long)
    target[:, 2:6, 2:6] = 1
    u = torch.rand(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compare_uncertainty_maps(["AUC-ROC", "AvU"], u, u, pred=target, target=target)  # no error: AUROC NaN
    ours = [w for w in caught if str(w.message).startswith(("compare:", "cochrans_q"))]
    assert ours and {w.filename for w in ours} == {__file__}


def test_cohens_d_of_values_equal_up_to_rounding_is_undefined():
    # found by hostile testing: [0.3, 0.1 + 0.2, 0.3] against [0.3, 0.3, 0.3] (three ties: no preference) had Cohen's d
    # 1.41, a "large effect" made of one rounding error
    a, b = [0.3, 0.1 + 0.2, 0.3], [0.3, 0.3, 0.3]
    with pytest.warns(UserWarning, match="zero variance"):
        assert math.isnan(cohens_d(a, b))
    with pytest.warns(UserWarning, match="undefined"):
        res = compare_metric_values({"m": a}, {"m": b}, True)
    assert res.metrics["m"].n_ties == 3 and math.isnan(res.metrics["m"].cohens_d)
    # a real spread, however small against the values, is still one
    assert cohens_d([1.0, 1.0 + 1e-9, 1.0], [1.0, 1.0, 1.0]) == pytest.approx(
        (1e-9 / 3) / math.sqrt(np.var([1.0, 1.0 + 1e-9, 1.0], ddof=1) / 2), rel=1e-6
    )


def test_every_built_in_name_gives_its_direction_to_a_custom_function():
    # found by hostile testing: {"SPACE": fn} took the registry's direction, {"UCE": fn} raised "higher_is_better is
    # needed for the custom metric 'UCE'" (the registry was built without UCE unless UCE was selected by name)
    import torch

    from monai_unc.metrics import compare_uncertainty_maps, uncertainty_map_metrics

    registry = uncertainty_map_metrics()
    target = torch.zeros(3, 8, 8, dtype=torch.long)
    target[:, 2:6, 2:6] = 1
    pred = target.clone()
    pred[:, 2:6, 6] = 1
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(3, 1, 8, 8, generator=g), torch.rand(3, 1, 8, 8, generator=g)
    for name in ("UCE", "SPACE", "AUC-ROC"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            res = compare_uncertainty_maps({name: registry[name].fn}, a, b, pred=pred, target=target)
        assert res.metrics[name].higher_is_better is registry[name].higher_is_better
