"""Hostile input for the monitoring statistics (metrics/monitoring.py): every formula against a plain re-derivation
(brute-force conformal p-values, the Simple Jumper written with three capitals, the lower bound by scanning the
grid), ties, constant streams, NaN, tiny and empty streams, and bad arguments."""

from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np
import pytest

from monai_unc.metrics.monitoring import (
    change_point,
    conformal_pvalues,
    first_alarm,
    risk_bets,
    risk_eprocess,
    risk_lower_bound,
    risk_test,
    score_martingale,
    simple_jumper,
)


def brute_pvalues(scores, reference, seed):
    """``(#{bag > s} + tau (#{bag == s} + 1)) / (|bag| + 1)`` with the bag as a plain list."""
    tau = np.random.default_rng(seed).uniform(size=len(scores))
    bag, out = list(reference), []
    for n, s in enumerate(scores):
        if math.isnan(s):
            out.append(math.nan)
            continue
        gt = sum(b > s for b in bag)
        eq = sum(b == s for b in bag)
        out.append((gt + tau[n] * (eq + 1)) / (len(bag) + 1))
        bag.append(s)
    return np.array(out)


def brute_jumper(p, jump):
    """Vovk et al. 2021, Algorithm 1, with the three capitals kept unnormalised."""
    cap = np.full(3, 1 / 3)
    out = []
    for x in p:
        if not math.isnan(x):
            cap = (1 - jump) * cap + jump * cap.sum() / 3
            cap = cap * np.array([1 - (x - 0.5), 1.0, 1 + (x - 0.5)])
        out.append(math.log(cap.sum()))
    return np.array(out)


def test_pvalues_match_brute_force_with_ties_nan_and_empty_reference():
    rng = np.random.default_rng(0)
    for seed in range(30):
        s = rng.integers(0, 3, 15).astype(float)  # many ties
        s[rng.uniform(size=15) < 0.15] = np.nan
        ref = rng.integers(0, 3, rng.integers(0, 5)).astype(float)
        with pytest.warns(UserWarning, match="undefined score") if np.isnan(s).any() else nullcontext():
            got = conformal_pvalues(s, ref, seed=seed)
        np.testing.assert_allclose(got, brute_pvalues(s, ref, seed), rtol=0, atol=1e-15)


def test_constant_stream_gives_uniform_pvalues_and_no_alarm():
    """All scores equal: every rank is a tie, p = tau (uniform), the martingale must not drift up."""
    p = conformal_pvalues(np.ones(400), np.ones(50), seed=1)
    np.testing.assert_allclose(p, np.random.default_rng(1).uniform(size=400), atol=1e-15)
    assert score_martingale(np.ones(400), np.ones(50), seed=1).alarm is None


def test_pvalues_are_in_zero_one_and_reproducible():
    rng = np.random.default_rng(2)
    s = rng.normal(size=50)
    a, b = conformal_pvalues(s, seed=7), conformal_pvalues(s, seed=7)
    np.testing.assert_array_equal(a, b)
    assert ((a > 0) & (a <= 1)).all()


def test_simple_jumper_matches_three_capitals():
    rng = np.random.default_rng(3)
    for _ in range(10):
        p = rng.uniform(size=40)
        p[[5, 17]] = np.nan
        for jump in (0.0, 0.01, rng.uniform(), 1.0):
            np.testing.assert_allclose(simple_jumper(p, jump), brute_jumper(p, jump), rtol=1e-12, atol=1e-12)


def test_simple_jumper_at_the_ends_of_zero_one():
    # p = 0 and p = 1 zero one capital; the total stays positive, so the log is finite
    out = simple_jumper([0.0, 1.0, 0.0, 1.0] * 10, jump=0.0)
    assert np.isfinite(out).all()
    with pytest.raises(ValueError, match=r"pvalues must lie in \[0, 1\]"):
        simple_jumper([0.5, 1.0 + 1e-12])
    with pytest.raises(ValueError, match="jump must be a number"):
        simple_jumper([0.5], jump=float("nan"))


def test_first_alarm_threshold_is_inclusive_and_ignores_nan():
    level = math.log(20)
    assert first_alarm([0.0, np.nan, level], alpha=0.05) == 2
    assert first_alarm([0.0, level - 1e-6], alpha=0.05) is None
    assert first_alarm([], alpha=0.05) is None
    for bad in (0, 1, -0.1, float("nan"), True, "0.05"):
        with pytest.raises(ValueError, match="alpha must be a number in"):
            first_alarm([0.0], alpha=bad)


def test_change_point_brute_force():
    """The start k maximising sum(g[k..alarm]) over both directions, the last k on ties."""
    rng = np.random.default_rng(4)
    for _ in range(20):
        p = rng.uniform(size=25)
        p[rng.uniform(size=25) < 0.1] = np.nan
        alarm = int(rng.integers(0, 25))
        best, start = -math.inf, 0
        for q in (p[: alarm + 1], 1 - p[: alarm + 1]):
            g = [0.0 if math.isnan(v) else math.log(0.2) - 0.8 * math.log(max(v, 1e-12)) for v in q]
            sums = [sum(g[k:]) for k in range(alarm + 1)]
            k = max(i for i, v in enumerate(sums) if v == max(sums))
            if sums[k] > best:
                best, start = sums[k], k
        assert change_point(p, alarm) == start
    with pytest.raises(ValueError, match="alarm must be an index"):
        change_point([0.5], 1)
    with pytest.raises(ValueError, match="alarm must be an index"):
        change_point([], 0)


def brute_bets(x, target, cap=0.9):
    decay = 0.5 ** (1 / 25.0)
    w, s1, out = 1.0, target, []
    for v in x:
        if math.isnan(v):
            out.append(0.0)
            continue
        out.append(min(max((s1 / w - target) / (target * (1 - target)), 0.0), cap))
        w, s1 = decay * w + 1, decay * s1 + v
    return np.array(out)


def test_risk_eprocess_matches_its_formula_and_skips_nan():
    rng = np.random.default_rng(5)
    x = (rng.uniform(size=80) < 0.3).astype(float)
    x[[3, 40]] = np.nan
    lam = brute_bets(x, 0.1)
    np.testing.assert_allclose(risk_bets(x, 0.1), lam, atol=1e-15)
    for m in (None, 0.0, 0.1, 0.5, 1.0):
        mm = 0.1 if m is None else m
        ref = np.cumsum([0.0 if math.isnan(v) else math.log(1 + b * (v - mm)) for v, b in zip(x, lam)])
        np.testing.assert_allclose(risk_eprocess(x, 0.1, m=m), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [1.5, -0.5, float("nan"), float("inf"), True, "0.2"])
def test_risk_eprocess_refuses_a_risk_outside_zero_one(m):
    """Regression: m = 2 gave NaN (log of a negative factor), m = -1 a growing 'e-process', both silently."""
    with pytest.raises(ValueError, match=r"m must be a risk in \[0, 1\]"):
        risk_eprocess([0.0, 1.0, 1.0, 1.0], target=0.1, m=m)


def test_lower_bound_equals_a_scan_of_the_grid():
    rng = np.random.default_rng(6)
    x = (rng.uniform(size=40) < 0.35).astype(float)
    x[7] = np.nan
    lam = brute_bets(x, 0.1)
    grid = np.unique(np.r_[np.linspace(0, 1, 201), 0.1])
    got = risk_lower_bound(x, 0.1, 0.05, resolution=200)
    prev = 0.0
    for n in range(len(x)):
        if math.isnan(x[n]):
            assert got[n] == prev
            continue
        keep = ~np.isnan(x[: n + 1])
        xs, ls = x[: n + 1][keep], lam[: n + 1][keep]
        ok = [m for m in grid if np.log1p(ls * (xs - m)).sum() >= math.log(20) - 1e-12]
        prev = max(ok) if ok else 0.0
        assert got[n] == prev


def test_risk_test_alarm_is_the_lower_bound_reaching_the_target():
    rng = np.random.default_rng(7)
    x = (rng.uniform(size=300) < 0.3).astype(float)
    r = risk_test(x, target=0.1)
    assert r.alarm is not None
    assert (r.lower_bound[r.alarm:] >= 0.1).all() and (r.lower_bound[: r.alarm] < 0.1).all()
    assert (np.diff(r.lower_bound) >= 0).all()


def test_risk_functions_on_empty_all_nan_and_bad_losses():
    r = risk_test([], target=0.1)
    assert r.alarm is None and r.log_eprocess.shape == (0,) and r.lower_bound.shape == (0,)
    r = risk_test([np.nan] * 5, target=0.1)
    assert r.alarm is None and (r.log_eprocess == 0).all() and (r.lower_bound == 0).all()
    with pytest.raises(ValueError, match=r"losses must lie in \[0, 1\]"):
        risk_test([0.5, 1.5], target=0.1)
    with pytest.raises(ValueError, match="losses must be finite"):
        risk_test([0.5, np.inf], target=0.1)
    for bad in (0, 1, float("nan"), True):
        with pytest.raises(ValueError, match="target must be a number in"):
            risk_test([0.5], target=bad)
    with pytest.raises(ValueError, match="cap must be in"):
        risk_bets([0.5], 0.1, cap=1.0)
    with pytest.raises(ValueError, match="resolution must be a positive integer"):
        risk_lower_bound([0.5], 0.1, 0.05, resolution=0)


def test_bad_score_streams():
    with pytest.raises(ValueError, match="scores must be finite or NaN"):
        conformal_pvalues([0.0, np.inf])
    with pytest.raises(ValueError, match="reference must be finite"):
        conformal_pvalues([0.0], reference=[np.nan])
    with pytest.raises(ValueError, match="scores must be one-dimensional"):
        conformal_pvalues([[0.0]])
    with pytest.raises(TypeError, match="scores must be a sequence of numbers"):
        conformal_pvalues("0.5")
    assert conformal_pvalues([]).shape == (0,)


def test_numpy_scalar_settings_are_accepted_like_python_numbers():
    """Regression: ``jump=np.float32(0.1)``, ``alpha=np.float32(0.05)``, ``resolution=np.int64(100)`` were refused
    with "must be a number in [0, 1]" (or "a positive integer") although they are."""
    p = np.random.default_rng(8).uniform(size=20)
    np.testing.assert_allclose(simple_jumper(p, jump=np.float32(0.25)), simple_jumper(p, jump=float(np.float32(0.25))))
    assert first_alarm([0.0, 4.0], alpha=np.float32(0.05)) == 1
    x = [1.0] * 10
    np.testing.assert_array_equal(risk_lower_bound(x, np.float64(0.1), np.float32(0.05), resolution=np.int64(100)),
                                  risk_lower_bound(x, 0.1, float(np.float32(0.05)), resolution=100))
    np.testing.assert_array_equal(risk_bets(x, np.float32(0.5), cap=np.float32(0.5)),
                                  risk_bets(x, float(np.float32(0.5)), cap=0.5))


@pytest.mark.parametrize("seed", [-1, 1.5, "1", True])
def test_bad_seed_is_refused_by_name(seed):
    """Regression: a negative seed raised numpy's "expected non-negative integer", 1.5 a SeedSequence TypeError."""
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        conformal_pvalues([0.1, 0.2], seed=seed)


def test_cap_of_another_type_is_refused_by_name():
    with pytest.raises(ValueError, match="cap must be in"):
        risk_bets([0.5], 0.1, cap="0.5")
