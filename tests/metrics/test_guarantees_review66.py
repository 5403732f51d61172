"""Learn-then-Test with the exact binomial p-value for 0/1 losses (review 66).

``risk_controlled_threshold(..., method="ltt", p_value="binomial")`` tests each candidate with
``P(Bin(n, alpha) <= errors)`` instead of the Hoeffding-Bentkus p-value. The p-value is checked against a brute-force
binomial sum and ``scipy.stats.binom.cdf``; the guarantee by Monte Carlo on distributions whose truth is known
exactly, in the style of ``tests/metrics/test_guarantees_review65.py`` (the full table is
``benchmarks/results/guarantees_review66.md``). A rate's tolerance is the ``1 - 1e-4`` quantile of
``Bin(draws, delta)``: derived, not fitted, and the same simulation flags the binomial p-value without LTT's
multiplicity control.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

from monai_unc.metrics import binomial_pvalue, hoeffding_bentkus_pvalue, risk_controlled_threshold
from monai_unc.metrics.risk_control import _candidate_ranks, _risk_control_batch, clopper_pearson_upper

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _allowed(draws: int, nominal: float) -> float:
    return float(binom.ppf(1 - 1e-4, draws, nominal))


def test_binomial_pvalue_is_the_binomial_tail_by_brute_force():
    """``P(Bin(n, alpha) <= n r)`` summed term by term, and scipy's cdf, for every count of small ``n``."""
    for n in (1, 2, 7, 30):
        for alpha in (0.01, 0.1, 0.37, 0.9):
            e = np.arange(n + 1)
            brute = np.array([sum(math.comb(n, j) * alpha**j * (1 - alpha) ** (n - j) for j in range(k + 1))
                              for k in e])
            got = binomial_pvalue(e / n, np.full(n + 1, n), alpha)
            np.testing.assert_allclose(got, brute, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(got, binom.cdf(e, n, alpha), rtol=1e-12, atol=1e-15)
            # never above the Hoeffding-Bentkus p-value: the test rejects at least as often
            assert (got <= hoeffding_bentkus_pvalue(e / n, np.full(n + 1, n), alpha) + 1e-15).all()
    assert binomial_pvalue(0.0, 0, 0.1) == 1.0  # nothing observed
    assert binomial_pvalue(0.3, 10, 0.5) == pytest.approx(binom.cdf(3, 10, 0.5))  # 0.3 * 10 = 3.0000000000000004


def test_binomial_pvalue_rejects_exactly_when_clopper_pearson_certifies():
    """``p <= d`` iff the Clopper-Pearson bound at level ``d`` is ``<= alpha`` (the bound LTT-binomial reports)."""
    n, d = 120, 0.05
    e = np.arange(n + 1)
    for alpha in (0.05, 0.1, 0.3):
        p = binomial_pvalue(e / n, np.full(n + 1, n), alpha)
        cp = clopper_pearson_upper(e, np.full(n + 1, n), d)
        far = np.abs(p - d) > 1e-9  # away from the boundary, where both are root-finding to rounding
        assert np.array_equal((p <= d)[far], (cp <= alpha)[far])


def test_binomial_pvalue_refuses_what_is_no_failure_count():
    with pytest.raises(ValueError, match="risk_hat must be a number of failures over n"):
        binomial_pvalue(0.015, 100, 0.1)  # 1.5 failures: a mean of losses that are not 0/1
    with pytest.raises(ValueError, match="alpha"):
        binomial_pvalue(0.1, 10, 1.5)
    with pytest.raises(TypeError, match="n must be"):
        binomial_pvalue(0.1, True, 0.1)


def test_risk_controlled_threshold_refuses_binomial_where_it_does_not_hold():
    u, failed = np.linspace(0, 1, 50), (np.arange(50) % 10 == 0).astype(float)
    with pytest.raises(ValueError, match=r"p_value='binomial' needs a 0/1 risk_cal .* 0\.5"):
        risk_controlled_threshold(u, np.where(failed > 0, 0.5, 0.0), 0.2, method="ltt", p_value="binomial")
    with pytest.raises(ValueError, match="p_value='binomial' is a p-value of method='ltt'"):
        risk_controlled_threshold(u, failed, 0.2, method="sgr", p_value="binomial")
    with pytest.raises(ValueError, match="p_value must be one of"):
        risk_controlled_threshold(u, failed, 0.2, method="ltt", p_value="auto")  # no data-chosen p-value
    with pytest.warns(UserWarning, match="no threshold certifies"):  # 5 failures in 50 cases do not certify 0.2
        assert risk_controlled_threshold(u, failed, 0.2, method="ltt").p_value == "hoeffding_bentkus"  # the default


def test_the_binomial_bound_is_the_clopper_pearson_bound_at_the_tested_level():
    rng = np.random.default_rng(0)
    u = rng.random(400)
    failed = (rng.random(400) < 0.3 * u**2).astype(float)
    hb = risk_controlled_threshold(u, failed, 0.1, 0.1, method="ltt")
    ex = risk_controlled_threshold(u, failed, 0.1, 0.1, method="ltt", p_value="binomial")
    assert ex.feasible and ex.p_value == "binomial" and ex.n_accepted > hb.n_accepted  # 320 against 241 cases
    errors = round(ex.risk * ex.n_accepted)
    assert ex.risk <= ex.bound <= 0.1
    # the bound's level is between delta / K and delta: the binomial tail at the bound lies there
    assert 0.1 / ex.n_candidates - 1e-9 <= binom.cdf(errors, ex.n_accepted, ex.bound) <= 0.1 + 1e-9


def _tied(levels, probs, risks, n, alpha, delta, p_value, reps, seed):
    rng = np.random.default_rng(seed)
    levels, probs, risks = (np.asarray(v, float) for v in (levels, probs, risks))
    idx = rng.choice(len(levels), size=(reps, n), p=probs)
    loss = (rng.random((reps, n)) < risks[idx]).astype(float)
    res = _risk_control_batch(levels[idx], loss, alpha, delta, "ltt", 20, with_bound=False, p_value=p_value)
    acc = levels[None, :] < res["cut"][:, None]
    mass = (acc * probs).sum(1)
    true = np.where(mass > 0, (acc * probs * risks).sum(1) / np.maximum(mass, 1e-300), 0.0)
    feas = res["n_accepted"] > 0
    return int((feas & (true > alpha + 1e-12)).sum()), float(feas.mean())


def test_ltt_binomial_guarantee_on_tied_scores_and_small_sets():
    """The hard cases of review 65 with the binomial p-value: tied and constant scores, 20 to 50 calibration cases."""
    reps = 1500
    for levels, probs, risks in (([0, 1], [0.9, 0.1], [0.05, 0.6]), ([0, 1, 2], [0.5, 0.3, 0.2], [0.02, 0.12, 0.5])):
        k, feasible = _tied(levels, probs, risks, 400, 0.1, 0.1, "binomial", reps, 0)
        assert k <= _allowed(reps, 0.1) and feasible > 0.6, (levels, k, feasible)
    k, _ = _tied([0], [1.0], [0.11], 200, 0.1, 0.1, "binomial", reps, 1)
    assert k <= _allowed(reps, 0.1)
    rng = np.random.default_rng(2)
    for n, alpha, delta in ((20, 0.5, 0.1), (50, 0.3, 0.1), (20, 0.9, 0.05)):
        u = rng.random((reps, n))
        loss = (rng.random((reps, n)) < u**2).astype(float)  # true selective risk of u < t: t^2 / 3
        res = _risk_control_batch(u, loss, alpha, delta, "ltt", 20, with_bound=False, p_value="binomial")
        t = np.clip(res["cut"], 0, 1)
        k = int(((res["n_accepted"] > 0) & (t**2 / 3 > alpha)).sum())
        assert k <= _allowed(reps, delta), (n, alpha, delta, k)


def test_the_simulation_catches_the_binomial_pvalue_without_multiplicity_control():
    """Uninformative scores, risk just above the target everywhere: any certificate is a violation.

    LTT's fallback keeps the rate under ``delta``; "the largest candidate whose binomial p-value is ``<= delta``"
    (each of the 20 tests at the full level, no family-wise control) breaks it, so the simulation can fail.
    """
    rng = np.random.default_rng(3)
    reps, n, alpha, delta = 1500, 400, 0.1, 0.1
    u = rng.random((reps, n))
    loss = (rng.random((reps, n)) < 0.102).astype(float)
    res = _risk_control_batch(u, loss, alpha, delta, "ltt", 20, with_bound=False, p_value="binomial")
    assert int((res["n_accepted"] > 0).sum()) <= _allowed(reps, delta)
    order = np.argsort(u, axis=1)
    prefix = np.concatenate([np.zeros((reps, 1)), np.cumsum(np.take_along_axis(loss, order, 1), 1)], 1)
    ranks = _candidate_ranks(n, alpha, delta, 20)
    naive = (binom.cdf(prefix[:, ranks], ranks, alpha) <= delta).any(axis=1)
    assert int(naive.sum()) > _allowed(reps, delta)


def test_binomial_never_certifies_less_than_hoeffding_bentkus_or_sgr():
    """Smaller p-values reject a superset in Wiens' fallback: on every draw the coverage is at least HB's.

    And at least SGR's: the fallback tests each candidate at ``delta / K`` or more, SGR at ``delta / K``, and the
    binomial p-value is at most ``d`` exactly when the Clopper-Pearson bound at level ``d`` is at most the target.
    """
    rng = np.random.default_rng(4)
    reps, n = 800, 200
    u = rng.random((reps, n))
    loss = (rng.random((reps, n)) < 0.6 * u**2).astype(float)
    for sequence in ("fallback", "fixed"):
        hb = _risk_control_batch(u, loss, 0.1, 0.1, "ltt", 20, with_bound=False, sequence=sequence)
        ex = _risk_control_batch(u, loss, 0.1, 0.1, "ltt", 20, with_bound=False, sequence=sequence,
                                 p_value="binomial")
        assert (ex["n_accepted"] >= hb["n_accepted"]).all()
        assert ex["n_accepted"].mean() > hb["n_accepted"].mean()
    fallback = _risk_control_batch(u, loss, 0.1, 0.1, "ltt", 20, with_bound=False, p_value="binomial")
    sgr = _risk_control_batch(u, loss, 0.1, 0.1, "sgr", 20, with_bound=False)
    assert (fallback["n_accepted"] >= sgr["n_accepted"]).all()
    assert fallback["n_accepted"].mean() > sgr["n_accepted"].mean()


def test_docs_state_when_to_use_the_binomial_pvalue_and_its_gain():
    page = re.sub(r"\s+", " ", (DOCS / "referral_threshold.md").read_text(encoding="utf-8"))
    assert 'p_value="binomial"' in page and "--risk-p-value binomial" in page
    assert "guarantees_review66.md" in page
