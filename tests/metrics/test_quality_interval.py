"""Split-conformal intervals of a label-free estimate (:func:`monai_unc.metrics.quality.conformal_interval`)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from monai_unc.metrics.quality import CONFORMAL_ALPHA, conformal_interval, conformal_quantile


def _brute_quantile(est, truth, alpha):
    """The smallest residual r with #{i: r_i <= r} >= (1 - alpha)(n + 1): inf when none (Lei et al. 2018)."""
    r = [abs(t - e) for e, t in zip(est, truth) if math.isfinite(e) and math.isfinite(t)]
    need = (1 - alpha) * (len(r) + 1)
    ok = [c for c in r if sum(x <= c for x in r) >= need - 1e-9]
    return (min(ok) if ok else math.inf), len(r)


@pytest.mark.parametrize("seed", range(20))
def test_quantile_equals_a_brute_force_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    alpha = float(rng.choice([0.05, 0.1, 0.2, 0.5, 0.33]))
    est = rng.uniform(0.5, 1.0, n)
    truth = np.clip(est - rng.normal(0.02, 0.08, n), 0, 1)
    if seed % 3 == 0:  # ties
        truth = np.round(truth, 1)
        est = np.round(est, 1)
    if seed % 4 == 0 and n > 2:  # undefined pairs are left out
        est[0], truth[1] = np.nan, np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        q, m = conformal_quantile(est, truth, alpha)
    bq, bm = _brute_quantile(est.tolist(), truth.tolist(), alpha)
    assert m == bm and q == bq


def test_coverage_over_random_splits_is_within_monte_carlo_error_of_the_target():
    """2000 random splits of exchangeable data: mean coverage in [1 - a - 3 se, 1 - a + 1/(n+1) + 3 se].

    Measured (seed 0): mean coverage 0.9019 for the target 0.9 (upper bound 0.9244), se 0.0018.
    """
    rng = np.random.default_rng(0)
    n, m, splits, alpha = 40, 20, 2000, CONFORMAL_ALPHA
    covered = np.empty(splits)
    for k in range(splits):
        est = rng.uniform(0.6, 1.0, n + m)
        truth = np.clip(est - np.abs(rng.normal(0.0, 0.1, n + m)) * rng.choice([1, 3], n + m), 0, 1)  # skewed
        iv = conformal_interval(est[n:], est[:n], truth[:n], alpha)
        covered[k] = np.mean((iv.low <= truth[n:]) & (truth[n:] <= iv.high))
    mean, se = covered.mean(), covered.std(ddof=1) / np.sqrt(splits)
    assert 1 - alpha - 3 * se <= mean <= 1 - alpha + 1 / (n + 1) + 3 * se, (mean, se)


def test_every_truth_whose_residual_ties_with_q_is_inside_on_a_two_decimal_grid():
    """Exhaustive over estimates and truths in steps of 0.01 (as float64 and as a float32 Dice read back): whenever
    the computed residual |d - e| is at most q, low <= d <= high (hostile review: 0.9 - (0.9 - 0.2) =
    0.20000000000000007 > 0.2 left such ties out, coverage 0.849 against the promised 0.90).

    It suffices to check q equal to each pair's own residual (the ends move outward with q); each q is made the
    calibrated quantile of nine identical calibration pairs (ceil(10 * 0.9) = 9).
    """
    grid = np.arange(101) / 100
    values = np.unique(np.r_[grid, grid.astype(np.float32).astype(np.float64)])
    e, d = (a.ravel() for a in np.meshgrid(values, values, indexing="ij"))
    resid = np.abs(d - e)
    order = np.argsort(resid, kind="stable")
    e, d, resid = e[order], d[order], resid[order]
    starts = np.flatnonzero(np.r_[True, resid[1:] != resid[:-1]])
    missed = 0
    for a, b in zip(starts, np.r_[starts[1:], resid.size]):
        q = resid[a]  # the pairs a..b-1 all have residual q; nine calibration pairs give exactly this quantile
        iv = conformal_interval(e[a:b], np.full(9, e[a]), np.full(9, d[a]), alpha=0.1)
        assert iv.quantile == q
        missed += int(np.sum((iv.low > d[a:b]) | (d[a:b] > iv.high)))
    assert missed == 0  # 1496 of these pairs fell outside before
    # the widening is a rounding bound, not a wider interval: at most 4 eps for values in [0, 1]
    iv, eps = conformal_interval(0.5, [0.9] * 9, [0.7] * 9), np.finfo(float).eps
    q = iv.quantile
    assert 0.5 - q - 4 * eps <= iv.low <= 0.5 - q and 0.5 + q <= iv.high <= 0.5 + q + 4 * eps


def test_too_few_calibration_cases_give_the_whole_range_with_a_warning():
    with pytest.warns(UserWarning, match="too few for a 90% conformal interval"):
        iv = conformal_interval([0.9, 0.5], [0.9] * 8, [0.8] * 8)  # ceil(9 * 0.9) = 9 > 8
    assert iv.quantile == math.inf and iv.n == 8
    assert iv.low.tolist() == [0.0, 0.0] and iv.high.tolist() == [1.0, 1.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert conformal_quantile([0.9] * 9, [0.8] * 9)[0] == pytest.approx(0.1)  # 9 cases suffice at 90 %
    with pytest.warns(UserWarning, match="0 calibration case"):
        assert conformal_quantile([], [], 0.1) == (math.inf, 0)


def test_undefined_estimates_get_an_undefined_interval_and_bounds_clip():
    with pytest.warns(UserWarning, match="1 undefined estimate"):
        iv = conformal_interval(np.array([np.nan, 0.99, 0.02]), np.linspace(0.5, 1, 30), np.linspace(0.4, 0.9, 30))
    assert np.isnan(iv.low[0]) and np.isnan(iv.high[0])
    assert iv.quantile == pytest.approx(0.1)
    assert iv.high[1] == 1.0 and iv.low[2] == 0.0 and iv.low[1] == pytest.approx(0.89)
    assert conformal_interval(0.9, [0.9] * 20, [0.8] * 20).low.shape == ()


@pytest.mark.parametrize("alpha", [0, 1, -0.1, 1.5, True, "0.1"])
def test_alpha_is_checked(alpha):
    with pytest.raises(ValueError, match="alpha must be a number in"):
        conformal_quantile([0.9], [0.8], alpha)


def test_arrays_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="one entry per case"):
        conformal_quantile([0.9, 0.8], [0.8])


def test_calibration_truths_outside_the_bounds_are_refused():
    # Dice in percent with the default bounds (0, 1): q ~ 5 and the interval of 83 was clipped to [1.0, 1.0], a
    # claim that the case's Dice is exactly 1 (found by hostile testing)
    rng = np.random.default_rng(0)
    est = rng.uniform(70, 95, 40)
    dice = est - rng.normal(0, 3, 40)
    with pytest.raises(ValueError, match="calibration_truths hold 40 value"):
        conformal_interval([83.0], est, dice)
    iv = conformal_interval([83.0], est, dice, bounds=(0, 100))  # the truths' own range
    assert iv.low[0] < 83.0 < iv.high[0] and iv.high[0] - iv.low[0] == pytest.approx(2 * iv.quantile)
    with pytest.raises(ValueError, match="calibration_truths hold 1 value"):
        conformal_interval(0.5, [0.5] * 20, [0.4] * 19 + [-0.1])
    with warnings.catch_warnings():  # undefined truths are left out, not refused
        warnings.simplefilter("error")
        assert conformal_interval(0.5, [0.5] * 21, [0.4] * 20 + [np.nan]).n == 20


_EST = np.linspace(0.5, 0.9, 20)


@pytest.mark.parametrize(("call", "name"), [
    (lambda: conformal_quantile(_EST + 0.5j, _EST + 0.01), "estimates"),  # the real part, with a ComplexWarning only
    (lambda: conformal_quantile(_EST, (_EST + 0.01).astype(str)), "truths"),  # the strings were parsed
    (lambda: conformal_interval(0.8 + 0.1j, _EST, _EST + 0.01), "estimate"),  # float()'s message named nothing
    (lambda: conformal_interval(np.array(["0.8"]), _EST, _EST + 0.01), "estimate"),
    (lambda: conformal_interval(0.8, _EST + 0.5j, _EST + 0.01), "calibration_estimates"),
    (lambda: conformal_interval(0.8, _EST, (_EST + 0.01).astype(str)), "calibration_truths"),
])
def test_complex_values_or_text_are_refused_naming_the_argument(call, name):
    """Hostile testing: complex estimates lost their imaginary part (numpy's ComplexWarning only) and strings were
    parsed as numbers; both are a TypeError naming the argument. ``None`` in a list still reads as undefined."""
    with pytest.raises(TypeError, match=rf"^{name} must hold real numbers"):
        call()
    assert conformal_quantile([0.9, None, 0.8], [0.85, 0.7, None], alpha=0.5) == (pytest.approx(0.05), 1)


def test_calibration_series_that_label_other_cases_or_another_order_are_refused():
    """Calibration estimates and truths as pandas ``Series`` indexed by case id, the truths read from a table sorted
    otherwise, were paired by position: the residuals of other cases (q 0.32 instead of 0.03). Refused, as
    :func:`monai_unc.metrics.compare_metric_values` refuses such ``Series``; one index pairs them as the numbers."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    ids = [f"case{i:03d}" for i in range(200)]
    est = pd.Series(rng.uniform(0.5, 0.95, 200), index=ids)
    dice = pd.Series(np.clip(est.to_numpy() + rng.normal(0, 0.02, 200), 0, 1), index=ids)
    q = conformal_quantile(est.to_numpy(), dice.to_numpy())
    assert conformal_quantile(est, dice) == q
    assert conformal_quantile(est, dice.to_numpy()) == q  # only one labelled: nothing to check it against
    assert conformal_interval([0.8], est, dice).quantile == q[0]
    other = dice.sort_values()
    with pytest.raises(ValueError, match=r"^truths and estimates label different cases or list them in another order"):
        conformal_quantile(est, other)
    with pytest.raises(ValueError, match=r"^calibration_truths and calibration_estimates label different cases"):
        conformal_interval([0.8], est, other)
    with pytest.raises(ValueError, match="label different cases"):  # a case left out of one table
        conformal_quantile(est.iloc[1:], dice.iloc[:-1])
