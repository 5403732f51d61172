"""Risk-controlled referral thresholds (SGR, Learn-then-Test): bounds against independent references, a brute-force
re-implementation of the selection, and a simulation of the guarantee over many calibration draws."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize
from scipy.stats import binom

from monai_unc.metrics.risk_control import (
    RiskControlledThreshold,
    _risk_control_batch,
    clopper_pearson_upper,
    hoeffding_bentkus_pvalue,
    hoeffding_bentkus_upper,
    risk_controlled_threshold,
)

# ---------------------------------------------------------------- independent references


def ref_cp_upper(e: int, n: int, delta: float) -> float:
    """Binomial tail inversion by root-finding: the b with P(Bin(n, b) <= e) = delta."""
    if n == 0 or e >= n:
        return 1.0
    return optimize.brentq(lambda b: binom.cdf(e, n, b) - delta, 1e-14, 1 - 1e-14, xtol=1e-14)


def ref_hb_pvalue(rhat: float, n: int, alpha: float) -> float:
    """HB p-value with math only: Bernoulli KL written out, binomial CDF as an exact sum of terms."""
    a = min(rhat, alpha)
    kl = (a * math.log(a / alpha) if a > 0 else 0.0) + ((1 - a) * math.log((1 - a) / (1 - alpha)) if a < 1 else 0.0)
    hoeffding = math.exp(-n * kl)
    k = math.ceil(round(n * rhat, 9))
    cdf = sum(math.comb(n, j) * alpha**j * (1 - alpha) ** (n - j) for j in range(0, min(k, n) + 1))
    return min(hoeffding, math.e * cdf, 1.0)


def ref_selection(u, loss, alpha, delta, method, sequence="fallback"):
    """Every rank k >= n_min as a Python loop: SGR = largest accepted set with a root-found CP bound <= alpha at
    delta / K; LTT = HB tests in increasing k, fixed sequence (stop at the first non-rejection) or fallback (test j
    at delta / K plus the level of test j - 1 if it was rejected). Returns the accepted set (a boolean mask)."""
    m = len(u)
    n_min = 1
    while (1 - alpha) ** n_min > delta:
        n_min += 1
    ranks = list(range(n_min, m + 1))
    srt = sorted(u)
    sets = []
    for k in ranks:
        v = srt[k - 1]
        acc = np.array([x <= v for x in u])
        sets.append(acc)
    if method == "sgr":
        best = None
        for acc in sets:
            e, n = int(round(loss[acc].sum())), int(acc.sum())
            if ref_cp_upper(e, n, delta / len(ranks)) <= alpha and (best is None or n > best.sum()):
                best = acc
        return best if best is not None else np.zeros(m, bool)
    best = np.zeros(m, bool)
    if sequence == "fixed":
        for acc in sets:
            n = int(acc.sum())
            if ref_hb_pvalue(loss[acc].sum() / n, n, alpha) > delta:
                break
            best = acc
        return best
    level, rejected = 0.0, False
    for acc in sets:
        n = int(acc.sum())
        level = delta / len(sets) + (level if rejected else 0.0)
        rejected = ref_hb_pvalue(loss[acc].sum() / n, n, alpha) <= level
        if rejected:
            best = acc
    return best


# ---------------------------------------------------------------- bounds


def test_clopper_pearson_matches_root_finding():
    for n in (1, 5, 30, 200):
        for e in sorted({0, 1, n // 3, n - 1, n}):
            for delta in (0.01, 0.1, 0.3):
                assert clopper_pearson_upper(e, n, delta) == pytest.approx(ref_cp_upper(e, n, delta), abs=1e-9)
    # vectorised, and the conventions: nothing observed or all errors give 1
    ub = clopper_pearson_upper(np.array([0, 3, 10]), np.array([0, 10, 10]), 0.05)
    assert ub.shape == (3,) and ub[0] == 1.0 and ub[2] == 1.0
    # hand-worked: zero errors in n cases -> 1 - delta^(1/n)
    assert clopper_pearson_upper(0, 20, 0.1) == pytest.approx(1 - 0.1 ** (1 / 20), abs=1e-12)


def test_clopper_pearson_rejects_bad_input():
    with pytest.raises(ValueError, match="errors"):
        clopper_pearson_upper(3, 2, 0.1)
    with pytest.raises(ValueError, match="delta"):
        clopper_pearson_upper(0, 2, 1.5)


def test_hb_pvalue_matches_written_out_formula():
    for n in (1, 10, 73, 400):
        for rhat in (0.0, 0.03, 0.1, 0.25, 1.0):
            for alpha in (0.05, 0.1, 0.3):
                assert hoeffding_bentkus_pvalue(rhat, n, alpha) == pytest.approx(
                    ref_hb_pvalue(rhat, n, alpha), rel=1e-9, abs=1e-15
                )
    # hand-worked: no loss in 10 cases at alpha 0.2: Hoeffding (0.8)^10, Bentkus e * 0.8^10 -> Hoeffding wins
    assert hoeffding_bentkus_pvalue(0.0, 10, 0.2) == pytest.approx(0.8**10)
    # an empirical risk above alpha gives no evidence: p = 1 (Hoeffding term exp(0))
    assert hoeffding_bentkus_pvalue(0.3, 50, 0.2) == 1.0
    assert hoeffding_bentkus_pvalue(0.1, 0, 0.2) == 1.0


def test_hb_upper_inverts_the_pvalue():
    for rhat, n, delta in ((0.0, 30, 0.1), (0.05, 200, 0.05), (0.3, 17, 0.2), (0.9, 1000, 0.1)):
        ub = hoeffding_bentkus_upper(rhat, n, delta)
        assert rhat < ub < 1
        assert hoeffding_bentkus_pvalue(rhat, n, ub) == pytest.approx(delta, rel=1e-6)
        assert hoeffding_bentkus_pvalue(rhat, n, ub - 1e-4) > delta
    assert hoeffding_bentkus_upper(1.0, 10, 0.1) == 1.0
    assert hoeffding_bentkus_upper(0.2, 0, 0.1) == 1.0


# ---------------------------------------------------------------- selection against the brute-force loop


@pytest.mark.parametrize(("method", "sequence"), [("sgr", "fallback"), ("ltt", "fallback"), ("ltt", "fixed")])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_selection_matches_bruteforce(method, sequence, seed):
    rng = np.random.default_rng(seed)
    m = 120
    u = np.round(rng.uniform(size=m), 2)  # ties on purpose: tie groups must enter together
    err = (rng.uniform(size=m) < 0.5 * u**2).astype(float)
    loss = err if method == "sgr" else np.clip(err * rng.uniform(0.3, 1.0, size=m), 0, 1)
    alpha = 0.15
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # some draws are infeasible: compared all the same
        res = risk_controlled_threshold(u, loss, alpha, 0.2, method=method, n_candidates=None, sequence=sequence)
    expected = ref_selection(u, loss, alpha, 0.2, method, sequence)
    assert res.n_accepted == expected.sum()
    np.testing.assert_array_equal(res.accept(u), expected)
    if res.feasible:
        assert res.risk == pytest.approx(loss[expected].mean())
        assert res.bound <= alpha + 1e-12
        assert res.coverage == pytest.approx(expected.mean())


def test_grid_of_candidates_is_data_independent_and_from_the_top():
    rng = np.random.default_rng(0)
    u, err = rng.uniform(size=200), np.zeros(200)
    one = risk_controlled_threshold(u, err, 0.1, 0.1, n_candidates=1)
    assert one.n_candidates == 1 and one.coverage == 1.0 and one.threshold == math.inf
    twenty = risk_controlled_threshold(u, err, 0.1, 0.1)
    assert twenty.n_candidates == 20 and twenty.coverage == 1.0


def test_result_semantics_and_library():
    rng = np.random.default_rng(5)
    u = rng.uniform(size=400)
    err = (rng.uniform(size=400) < 0.6 * u**2).astype(np.float64)
    res = risk_controlled_threshold(u, err, 0.1, delta=0.1, method="ltt")
    assert isinstance(res, RiskControlledThreshold) and res.feasible
    assert 0 < res.coverage < 1 and res.n_calibration == 400
    # the threshold is the largest float below the first refused uncertainty: accept() reproduces the count
    assert int(res.accept(u).sum()) == res.n_accepted
    refused = np.sort(u)[res.n_accepted]
    assert res.threshold < refused and np.nextafter(res.threshold, np.inf) == refused
    # torch in: same decision; accept() answers in torch
    res_t = risk_controlled_threshold(torch.from_numpy(u), torch.from_numpy(err), 0.1, delta=0.1, method="ltt")
    assert res_t.threshold == res.threshold
    assert isinstance(res_t.accept(torch.from_numpy(u)), torch.Tensor)
    # the order of the cases does not matter
    perm = rng.permutation(400)
    assert risk_controlled_threshold(u[perm], err[perm], 0.1, delta=0.1, method="ltt").threshold == res.threshold


def test_accept_everything_when_base_risk_is_low():
    rng = np.random.default_rng(1)
    u = rng.uniform(size=2000)
    err = (rng.uniform(size=2000) < 0.02).astype(float)
    for method in ("sgr", "ltt"):
        res = risk_controlled_threshold(u, err, 0.1, 0.1, method=method)
        assert res.feasible and res.coverage == 1.0 and res.threshold == math.inf
        assert res.accept(np.array([1e9])).all()


def test_fallback_survives_an_early_error_that_stops_the_fixed_sequence():
    # 300 cases, the single error is the most confident case: the first candidate (k = 22 for 10 % / 0.1) has
    # empirical risk 1/22 and cannot be rejected; with every other case correct the whole cohort is safe
    u = np.arange(300.0)
    err = np.zeros(300)
    err[0] = 1
    with pytest.warns(UserWarning, match="refer every case"):
        fixed = risk_controlled_threshold(u, err, 0.1, 0.1, method="ltt", sequence="fixed")
    assert not fixed.feasible
    fallback = risk_controlled_threshold(u, err, 0.1, 0.1, method="ltt")
    assert fallback.feasible and fallback.coverage == 1.0 and fallback.bound <= 0.1


def test_infeasible_is_explicit():
    rng = np.random.default_rng(2)
    u = rng.uniform(size=300)
    err = (rng.uniform(size=300) < 0.5).astype(float)  # uninformative, base risk 0.5 >> target
    for method in ("sgr", "ltt"):
        with pytest.warns(UserWarning, match="refer every case"):
            res = risk_controlled_threshold(u, err, 0.05, 0.1, method=method)
        assert not res.feasible and res.threshold == -math.inf and res.coverage == 0.0 and res.n_accepted == 0
        assert math.isnan(res.risk) and res.bound > 0.05
        assert not res.accept(u).any()


def test_too_few_calibration_cases():
    # (1 - 0.05)^n <= 0.1 needs n >= 45: with 20 cases, even zero errors cannot certify 5 % risk
    with pytest.warns(UserWarning, match="refer every case"):
        res = risk_controlled_threshold(np.arange(20.0), np.zeros(20), 0.05, 0.1)
    assert not res.feasible and res.n_candidates == 0
    assert res.bound == pytest.approx(1 - 0.1 ** (1 / 20))


def test_bad_input_names_the_argument():
    u, r = np.linspace(0, 1, 50), np.zeros(50)
    with pytest.raises(ValueError, match="uncertainty_cal"):
        risk_controlled_threshold(np.r_[u[:-1], np.nan], r, 0.1)
    with pytest.raises(ValueError, match="risk_cal"):
        risk_controlled_threshold(u, r[:-1], 0.1)
    with pytest.raises(ValueError, match="risk_cal must lie"):
        risk_controlled_threshold(u, r + 2, 0.1)
    with pytest.raises(ValueError, match="0/1"):
        risk_controlled_threshold(u, r + 0.5, 0.1, method="sgr")
    with pytest.raises(ValueError, match="target_risk"):
        risk_controlled_threshold(u, r, 1.0)
    with pytest.raises(ValueError, match="delta"):
        risk_controlled_threshold(u, r, 0.1, delta=0)
    with pytest.raises(ValueError, match="method"):
        risk_controlled_threshold(u, r, 0.1, method="crc")
    with pytest.raises(ValueError, match="sequence"):
        risk_controlled_threshold(u, r, 0.1, method="ltt", sequence="graph")
    with pytest.raises(ValueError, match="n_candidates"):
        risk_controlled_threshold(u, r, 0.1, n_candidates=0)
    with pytest.raises(ValueError, match="1-D"):
        risk_controlled_threshold(u.reshape(5, 10), r.reshape(5, 10), 0.1)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    m=st.integers(1, 150),
    alpha=st.floats(0.02, 0.6),
    delta=st.floats(0.01, 0.5),
    method=st.sampled_from(["sgr", "ltt"]),
)
def test_invariants(seed, m, alpha, delta, method):
    rng = np.random.default_rng(seed)
    u = np.round(rng.uniform(size=m), 1)
    loss = (rng.uniform(size=m) < rng.uniform()).astype(float)
    if method == "ltt":
        loss = loss * rng.uniform(size=m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = risk_controlled_threshold(u, loss, alpha, delta, method=method)
    acc = res.accept(u)
    assert acc.sum() == res.n_accepted and res.coverage == res.n_accepted / m
    if res.feasible:
        assert res.bound <= alpha + 1e-9 and res.risk == pytest.approx(loss[acc].mean())
        assert res.risk <= res.bound + 1e-12
        # a tie group is never split
        assert not np.isin(u[~acc], u[acc]).any()
    else:
        assert res.threshold == -math.inf and res.bound > alpha - 1e-12


def test_batch_core_equals_public_function():
    rng = np.random.default_rng(7)
    u = rng.uniform(size=(6, 150))
    err = (rng.uniform(size=(6, 150)) < 0.4 * u).astype(float)
    for method in ("sgr", "ltt"):
        batch = _risk_control_batch(u, err, 0.12, 0.1, method, 20)
        for i in range(6):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                one = risk_controlled_threshold(u[i], err[i], 0.12, 0.1, method=method)
            assert one.n_accepted == batch["n_accepted"][i]
            assert one.bound == pytest.approx(batch["bound"][i])


# ---------------------------------------------------------------- simulation of the guarantee
#
# A cohort with known conditional risk: u ~ U(0, 1) and E[risk | u] = mu(u) = 0.6 u^2, so the selective risk of
# "accept u < t" for new cases is R(t) = (1/t) int_0^t mu = 0.2 t^2 (0.2 for t >= 1): the test risk is exact,
# with no test-set noise. Target 0.1 (R <= 0.1 for t <= 0.707); delta 0.1. Each split draws a fresh calibration
# set of M cases. A violation is a split whose chosen threshold has R > target. The guarantee says
# P(violation) <= delta, so the violation count over N_SPLITS independent splits is stochastically below
# Bin(N_SPLITS, delta); the tolerance is that binomial's 1 - 1e-4 quantile (a false alarm once in 10^4 runs
# when the method sits exactly at delta), not a number fitted to the outcome.

N_SPLITS, M, ALPHA, DELTA = 1000, 400, 0.1, 0.1
TOLERANCE = int(binom.ppf(1 - 1e-4, N_SPLITS, DELTA))


def _true_risk(cut: np.ndarray, base: float | None) -> np.ndarray:
    if base is not None:  # uninformative: the risk does not depend on the threshold
        return np.full(cut.shape, base)
    t = np.minimum(cut, 1.0)
    return 0.2 * t**2


def _cohort(rng, informative: bool, continuous: bool):
    u = rng.uniform(size=(N_SPLITS, M))
    mu = 0.6 * u**2 if informative else np.full(u.shape, 0.2)
    if continuous:  # losses in [0, 1] with mean mu: Beta(4 mu, 4 (1 - mu))
        loss = rng.beta(4 * mu + 1e-9, 4 * (1 - mu))
    else:
        loss = (rng.uniform(size=u.shape) < mu).astype(np.float64)
    return u, loss


CASES = [("sgr", False, "fallback"), ("ltt", False, "fallback"), ("ltt", True, "fallback"), ("ltt", True, "fixed")]


@pytest.mark.parametrize(("method", "continuous", "sequence"), CASES)
def test_guarantee_holds_with_informative_uncertainty(method, continuous, sequence):
    rng = np.random.default_rng(2024)
    u, loss = _cohort(rng, informative=True, continuous=continuous)
    res = _risk_control_batch(u, loss, ALPHA, DELTA, method, 20, with_bound=False, sequence=sequence)
    feasible = res["n_accepted"] > 0
    violations = int((feasible & (_true_risk(res["cut"], None) > ALPHA)).sum())
    assert violations <= TOLERANCE, f"{violations} of {N_SPLITS} splits broke the guarantee (tolerance {TOLERANCE})"
    # and the threshold is useful: the best possible coverage is 0.707; ask for a non-trivial fraction of it
    coverage = res["n_accepted"] / M
    assert coverage.mean() > 0.15 and np.median(coverage) > 0.1


@pytest.mark.parametrize(("method", "continuous", "sequence"), CASES)
def test_uninformative_uncertainty_refers_everything(method, continuous, sequence):
    rng = np.random.default_rng(7)
    u, loss = _cohort(rng, informative=False, continuous=continuous)
    res = _risk_control_batch(u, loss, ALPHA, DELTA, method, 20, with_bound=False, sequence=sequence)
    feasible = res["n_accepted"] > 0
    # every feasible split is a violation here (risk 0.2 at every threshold)
    assert int(feasible.sum()) <= TOLERANCE
    assert (res["n_accepted"] / M).mean() < 0.05


def test_simulation_detects_a_method_without_guarantee():
    """The same simulation flags the naive rule "largest coverage with empirical risk <= target": the test can fail."""
    rng = np.random.default_rng(11)
    u, loss = _cohort(rng, informative=True, continuous=False)
    order = np.argsort(u, axis=1)
    us = np.take_along_axis(u, order, 1)
    emp = np.cumsum(np.take_along_axis(loss, order, 1), 1) / np.arange(1, M + 1)
    k = M - np.argmax((emp <= ALPHA)[:, ::-1], axis=1)  # largest k with empirical selective risk <= target
    cut = np.where(k < M, us[np.arange(N_SPLITS), np.minimum(k, M - 1)], np.inf)
    violations = int((_true_risk(cut, None) > ALPHA).sum())
    assert violations > TOLERANCE


def test_the_infeasible_warning_never_prints_the_bound_below_the_target():
    """Found by hostile testing: the warning wrote the best bound with 4 significant digits, so a bound just above the
    target read below it ("selective risk <= 0.36904 ... best bound 0.369")."""
    with pytest.warns(UserWarning, match="no threshold certifies") as caught:
        res = risk_controlled_threshold(np.linspace(0.1, 0.5, 5), np.zeros(5), 0.36904, 0.1)
    assert not res.feasible and res.bound > 0.36904
    text = str(caught[0].message)
    assert float(re.search(r"best bound ([0-9.]+[0-9])", text).group(1)) > 0.36904, text


@pytest.mark.parametrize("delta", [1e-3, 1e-16, 5e-17, 1e-30])
def test_clopper_pearson_at_tiny_levels_equals_the_closed_form_without_errors(delta):
    """With no error the bound solves (1 - b)^n = delta: b = 1 - delta^(1/n), computed here as -expm1(log(delta) / n).
    ``beta.ppf(1 - delta)`` lost levels below ~1e-16 in ``1 - delta`` (a hostile review: 0.0036669 instead of
    0.0036774 at 1e-16, anti-conservative, and 1 below 1.1e-16); the union bound's delta / K reaches such levels."""
    n = 10000
    assert clopper_pearson_upper(0, n, delta) == pytest.approx(-math.expm1(math.log(delta) / n), rel=1e-9)


def test_a_tiny_delta_certifies_what_the_exact_bound_allows():
    """delta = 1e-15 over 20 candidates (5e-17 each), 10000 cases without a failure: the exact bound at coverage 1 is
    1 - (5e-17)^(1/10000) = 0.00375 <= 0.01, so the whole cohort is accepted (was infeasible, bound 1)."""
    u, failed = np.linspace(0, 1, 10000), np.zeros(10000)
    r = risk_controlled_threshold(u, failed, target_risk=0.01, delta=1e-15, n_candidates=20)
    assert r.feasible and r.coverage == 1.0
    assert r.bound == pytest.approx(-math.expm1(math.log(1e-15 / 20) / 10000), rel=1e-9)


@pytest.mark.parametrize("name", ["target_risk", "delta"])
@pytest.mark.parametrize("bad", [True, np.bool_(False), "0.1", None, [0.1]])
def test_a_level_that_is_no_number_is_a_type_error_naming_it(name, bad):
    """A bool, a string, None or a list as ``target_risk`` / ``delta`` is a TypeError naming the argument (it was a
    ValueError, as for a number outside (0, 1)); a number outside stays a ValueError."""
    rng = np.random.default_rng(0)
    u, r = rng.random(40), (rng.random(40) < 0.3).astype(float)
    kwargs = {"target_risk": 0.3, "delta": 0.1}
    with pytest.raises(TypeError, match=f"{name} must be a number in"):
        risk_controlled_threshold(u, r, **{**kwargs, name: bad})
    with pytest.raises(ValueError, match=f"{name} must be a number in"):
        risk_controlled_threshold(u, r, **{**kwargs, name: 1.5})
    assert risk_controlled_threshold(u, r, **{**kwargs, name: np.float32(0.2)}).threshold is not None
