"""The monitoring statistics against brute-force references, and their validity by simulation (fast, pinned)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

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


def _pvalues_loop(scores, reference, tau):
    """p_n by explicit counting over the bag (reference and the earlier defined scores)."""
    out = []
    bag = list(reference)
    for x, t in zip(scores, tau):
        if math.isnan(x):
            out.append(math.nan)
            continue
        greater = sum(1 for b in bag if b > x)
        equal = sum(1 for b in bag if b == x) + 1
        out.append((greater + t * equal) / (len(bag) + 1))
        bag.append(x)
    return np.array(out)


def test_pvalues_match_counting_with_ties():
    rng = np.random.default_rng(3)
    ref = rng.integers(0, 5, 30).astype(float)  # many ties
    s = rng.integers(0, 7, 40).astype(float)
    tau = np.random.default_rng(11).uniform(size=len(s))
    np.testing.assert_allclose(conformal_pvalues(s, ref, seed=11), _pvalues_loop(s, ref, tau), atol=1e-12)


def test_pvalues_nan_is_skipped_with_warning():
    with pytest.warns(UserWarning, match="undefined"):
        p = conformal_pvalues([1.0, np.nan, 2.0], [0.0, 3.0], seed=5)
    tau = np.random.default_rng(5).uniform(size=3)
    np.testing.assert_allclose(p, _pvalues_loop([1.0, np.nan, 2.0], [0.0, 3.0], tau), atol=1e-12)
    assert np.isnan(p[1])


def test_pvalues_are_uniform_and_independent_under_exchangeability():
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(400, 21)).round(1)  # ties included
    p = np.array([conformal_pvalues(d[1:], d[:1], seed=i) for i, d in enumerate(draws)])  # (400, 20)
    assert stats.kstest(p.ravel(), "uniform").pvalue > 1e-3
    # independence: consecutive p-values are uncorrelated
    r = np.corrcoef(p[:, :-1].ravel(), p[:, 1:].ravel())[0, 1]
    assert abs(r) < 4 / math.sqrt(p[:, 1:].size)


def test_pvalues_follow_direction_of_shift():
    ref = np.arange(100.0)
    assert conformal_pvalues([1000.0], ref)[0] < 0.02
    assert conformal_pvalues([-1000.0], ref)[0] > 0.98


def _jumper_paths(p, jump):
    """S_n as a mixture over every path of the betting parameter (a Markov chain: keep with 1 - J + J/3)."""
    eps = (-1.0, 0.0, 1.0)
    n = len(p)
    total = 0.0
    for path in itertools.product(range(3), repeat=n):
        prob = 1 / 3
        value = 1.0
        for k, e in enumerate(path):
            if k > 0:
                prob *= (1 - jump) * (path[k - 1] == e) + jump / 3
            value *= 1 + eps[e] * (p[k] - 0.5)
        total += prob * value
    return total


@pytest.mark.parametrize("jump", [0.0, 0.01, 0.3, 1.0])
def test_simple_jumper_equals_mixture_over_paths(jump):
    p = np.random.default_rng(int(jump * 100)).uniform(size=6)
    log_s = simple_jumper(p, jump)
    for n in range(1, 7):
        assert math.exp(log_s[n - 1]) == pytest.approx(_jumper_paths(p[:n], jump), rel=1e-10)


def test_simple_jumper_skips_nan_and_checks_input():
    a = simple_jumper([0.1, np.nan, 0.2])
    b = simple_jumper([0.1, 0.2])
    assert a[1] == a[0] and a[2] == pytest.approx(b[1])
    with pytest.raises(ValueError, match="pvalues"):
        simple_jumper([1.5])
    with pytest.raises(ValueError, match="jump"):
        simple_jumper([0.5], jump=2)


def test_first_alarm_and_change_point():
    assert first_alarm(np.log([1, 2, 19.9]), 0.05) is None
    assert first_alarm(np.log([1, 2, 20.0, 40]), 0.05) == 2
    with pytest.raises(ValueError, match="alpha"):
        first_alarm([0.0], 0)
    rng = np.random.default_rng(12)
    for shift in (-1, 1):
        after = np.clip(rng.uniform(size=10) * 0.2 + (shift > 0) * 0.79, 1e-3, 0.999)
        p = np.concatenate([rng.uniform(size=30), after])
        # brute force: the segment k..alarm with the largest sum of log(1 + e (p - 1/2)) over both directions
        gain = [lambda v: math.log(0.2 * v**-0.8), lambda v: math.log(0.2 * (1 - v) ** -0.8)]
        best = max((sum(g(v) for v in p[k:]), k) for g in gain for k in range(40))
        assert change_point(p, 39) == best[1]
    assert change_point([0.01], 0) == 0
    with pytest.raises(ValueError, match="alarm"):
        change_point([0.5], 1)


def _simulate(n_streams, n_cases, shift, seed):
    rng = np.random.default_rng(seed)
    alarms, delays = 0, []
    for _ in range(n_streams):
        ref = rng.normal(size=200)
        s = rng.normal(size=n_cases)
        if shift:
            s[200:] += shift
        r = score_martingale(s, ref, alpha=0.05, seed=int(rng.integers(1 << 31)))
        if r.alarm is not None:
            alarms += 1
            delays.append(r.alarm - 200)
    return alarms / n_streams, delays


def test_martingale_false_alarms_at_most_alpha():
    share, _ = _simulate(150, 500, 0.0, seed=1)
    assert share <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 150)


def test_martingale_detects_a_shift():
    share, delays = _simulate(40, 500, 1.5, seed=2)
    assert share >= 0.9 and np.median(delays) < 60


def test_score_martingale_change_point_near_the_change():
    rng = np.random.default_rng(4)
    s = np.concatenate([rng.normal(size=300), rng.normal(3, 1, 100)])
    r = score_martingale(s, rng.normal(size=300))
    assert r.alarm is not None and 300 <= r.alarm < 330
    assert abs(r.change_point - 300) <= 10


# ---------------------------------------------------------------------------------------------------------------
# the risk e-process
# ---------------------------------------------------------------------------------------------------------------
def _bets_loop(x, target, cap=0.9, half_life=25.0):
    d = 0.5 ** (1 / half_life)
    hist = [target]  # the pseudo-case, with weight decaying like the losses
    weights = [1.0]
    out = []
    for xn in x:
        if math.isnan(xn):
            out.append(0.0)
            continue
        w = np.array(weights)
        h = np.array(hist)
        mu = (w * h).sum() / w.sum()
        out.append(min(max((mu - target) / (target * (1 - target)), 0), cap))
        weights = [v * d for v in weights] + [1.0]
        hist.append(xn)
    return np.array(out)


def test_bets_and_eprocess_match_loops():
    rng = np.random.default_rng(5)
    x = (rng.uniform(size=120) < 0.3).astype(float)
    x[[3, 50]] = np.nan
    x[7] = 0.35  # a continuous loss (1 - Dice)
    lam = _bets_loop(x, 0.1)
    np.testing.assert_allclose(risk_bets(x, 0.1), lam, atol=1e-12)
    prod = np.cumprod([1 + lv * (xv - 0.2) if not math.isnan(xv) else 1.0 for lv, xv in zip(lam, x)])
    np.testing.assert_allclose(np.exp(risk_eprocess(x, 0.1, m=0.2)), prod, rtol=1e-10)
    assert (lam >= 0).all() and (lam <= 0.9).all()


def test_lower_bound_is_the_grid_root():
    """Brute force: per n, the largest m of the grid (and the target) with prod (1 + lam (x - m)) >= 1 / alpha."""
    rng = np.random.default_rng(6)
    x = (rng.uniform(size=60) < 0.4).astype(float)
    x[[5, 40]] = np.nan
    x[9] = 0.3
    lb = risk_lower_bound(x, 0.1, 0.05, resolution=200)
    lam = risk_bets(x, 0.1)
    grid = sorted(set(np.linspace(0, 1, 201).tolist()) | {0.1})
    for n in (10, 30, 39, 40, 59):
        keep = [i for i in range(n + 1) if not math.isnan(x[i])]
        rejected = [m for m in grid if math.prod(1 + lam[i] * (x[i] - m) for i in keep) >= 20 * (1 - 1e-12)]
        assert lb[n] == pytest.approx(max(rejected) if rejected else 0.0, abs=1e-12)
    assert lb[40] == lb[39]  # a NaN carries the bound over


def test_lower_bound_alarm_is_the_eprocess_alarm():
    rng = np.random.default_rng(7)
    alarms = 0
    for _ in range(5):
        x = np.concatenate([rng.uniform(size=50) < 0.05, rng.uniform(size=100) < 0.3]).astype(float)
        r = risk_test(x, 0.1, 0.05)
        above = np.flatnonzero(r.lower_bound >= 0.1)
        assert (above[0] if above.size else None) == r.alarm
        alarms += r.alarm is not None
    assert alarms >= 3
    with pytest.raises(ValueError, match="resolution"):
        risk_lower_bound([0.0], 0.1, 0.05, resolution=0)


def _risk_alarm_share(n_streams, risks, seed):
    rng = np.random.default_rng(seed)
    alarms = 0
    for _ in range(n_streams):
        x = (rng.uniform(size=len(risks)) < risks).astype(float)
        alarms += first_alarm(risk_eprocess(x, 0.1), 0.05) is not None
    return alarms / n_streams


def test_risk_false_alarms_at_most_alpha_at_the_target_and_on_benign_shifts():
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300)
    assert _risk_alarm_share(300, np.full(500, 0.1), seed=8) <= bound  # risk exactly at the target
    benign = np.concatenate([np.full(200, 0.03), np.full(300, 0.09)])  # the risk moves, stays under the target
    assert _risk_alarm_share(300, benign, seed=9) <= bound


def test_risk_detects_harmful_shift():
    rng = np.random.default_rng(10)
    delays = []
    for _ in range(40):
        x = np.concatenate([rng.uniform(size=200) < 0.05, rng.uniform(size=300) < 0.2]).astype(float)
        a = first_alarm(risk_eprocess(x, 0.1), 0.05)
        delays.append(math.inf if a is None else a - 200)
    assert np.median(delays) < 140


def test_risk_bad_input():
    with pytest.raises(ValueError, match="losses"):
        risk_eprocess([1.5], 0.1)
    with pytest.raises(ValueError, match="target"):
        risk_eprocess([0.5], 1.0)
    with pytest.raises(TypeError, match="losses"):
        risk_eprocess("abc", 0.1)
    with pytest.raises(ValueError, match="alpha"):
        risk_test([0.0], 0.1, alpha=1.0)
