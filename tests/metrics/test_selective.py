"""Selective prediction: AURC / E-AURC / AUGRC against an independent loop of the fd-shifts sweep, referral curves."""

from __future__ import annotations

import itertools
import math
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from monai_unc.metrics.selective import (
    area_under_referral_curve,
    augrc,
    aurc,
    eaurc,
    referral_curve,
    risk_coverage_curve,
)
from tests._paths import ROOT

# ---------------------------------------------------------------- independent references (loops, O(N^2))


def loop_rc_points(uncertainty, risk):
    """fd-shifts' sweep written as a loop over thresholds: retain {g >= tau} for each distinct confidence."""
    conf = -np.asarray(uncertainty, dtype=float)
    risk = np.asarray(risk, dtype=float)
    n = len(conf)
    covs, sel, gen = [], [], []
    for tau in sorted(set(conf.tolist())):
        kept = [i for i in range(n) if conf[i] >= tau]
        covs.append(len(kept) / n)
        sel.append(sum(risk[i] for i in kept) / len(kept))
        gen.append(sum(risk[i] for i in kept) / n)
    covs.append(0.0)
    sel.append(sel[-1])
    gen.append(0.0)
    return covs, sel, gen


def loop_trapezoid(xs, ys):
    area = 0.0
    for k in range(1, len(xs)):
        area += abs(xs[k] - xs[k - 1]) * (ys[k] + ys[k - 1]) / 2
    return area


def loop_aurc(u, r):
    c, s, _ = loop_rc_points(u, r)
    return loop_trapezoid(c, s)


def loop_augrc(u, r):
    c, _, g = loop_rc_points(u, r)
    return loop_trapezoid(c, g)


def loop_oracle_aurc(r):
    """Oracle: cases sorted by ascending risk, every case its own point; it does not depend on the scores."""
    r = sorted(float(x) for x in r)
    n = len(r)
    covs = [k / n for k in range(n, 0, -1)]
    risks = [sum(r[:k]) / k for k in range(n, 0, -1)]
    return loop_trapezoid(covs + [0.0], risks + [risks[-1]])


def loop_expected_aurc(u, r):
    """AURC of the scores' ranking averaged over random orders of tied cases, every case its own point: keeping
    ``k`` cases keeps every case of a more confident score and ``k - a`` random ones of the tie group at the cut."""
    u = [float(x) for x in u]
    r = [float(x) for x in r]
    n = len(u)
    covs, risks = [], []
    for k in range(n, 0, -1):
        cut = sorted(u)[k - 1]  # the uncertainty of the k-th kept case
        better = [i for i in range(n) if u[i] < cut]
        group = [i for i in range(n) if u[i] == cut]
        expected = sum(r[i] for i in better) + (k - len(better)) * sum(r[i] for i in group) / len(group)
        covs.append(k / n)
        risks.append(expected / k)
    return loop_trapezoid(covs + [0.0], risks + [risks[-1]])


# ---------------------------------------------------------------- hand-worked and reference cases


def test_hand_worked_perfect_ranking():
    u = [0.1, 0.2, 0.3, 0.4]
    r = [0, 0, 1, 1]
    # points (1, .5), (.75, 1/3), (.5, 0), (.25, 0), (0, 0)
    expected = 0.25 * (0.5 + 1 / 3) / 2 + 0.25 * (1 / 3) / 2
    assert aurc(u, r) == pytest.approx(expected, abs=1e-15)
    assert eaurc(u, r) == pytest.approx(0.0, abs=1e-15)
    # generalized risks (1, .5), (.75, .25), (.5, 0), (.25, 0), (0, 0)
    assert augrc(u, r) == pytest.approx(0.25 * 0.75 / 2 + 0.25 * 0.25 / 2, abs=1e-15)


def test_curve_matches_loop_with_ties_and_continuous_risk():
    rng = np.random.default_rng(0)
    u = rng.integers(0, 7, size=60).astype(float)  # many ties
    r = rng.uniform(0, 1, size=60)  # continuous risk, e.g. 1 - Dice
    curve = risk_coverage_curve(u, r)
    c, s, g = loop_rc_points(u, r)
    np.testing.assert_allclose(curve.coverage, c, atol=1e-15)
    np.testing.assert_allclose(curve.selective_risk, s, atol=1e-12)
    np.testing.assert_allclose(curve.generalized_risk, g, atol=1e-12)
    assert len(curve.coverage) == len(np.unique(u)) + 1  # one point per distinct score (ties together)
    assert aurc(u, r) == pytest.approx(loop_aurc(u, r), abs=1e-12)
    assert augrc(u, r) == pytest.approx(loop_augrc(u, r), abs=1e-12)
    assert eaurc(u, r) == pytest.approx(loop_expected_aurc(u, r) - loop_oracle_aurc(r), abs=1e-12)
    assert eaurc(u, r) >= 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 1))),
        min_size=1,
        max_size=25,
    )
)
def test_property_vectorised_equals_loop(pairs):
    u = np.array([p[0] for p in pairs], dtype=float)
    r = np.array([p[1] for p in pairs], dtype=float)
    assert aurc(u, r) == pytest.approx(loop_aurc(u, r), abs=1e-12)
    assert augrc(u, r) == pytest.approx(loop_augrc(u, r), abs=1e-12)
    assert eaurc(u, r) == pytest.approx(loop_expected_aurc(u, r) - loop_oracle_aurc(r), abs=1e-12)
    # AURC lies between the smallest and the largest risk
    assert r.min() - 1e-12 <= aurc(u, r) <= r.max() + 1e-12


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=2, max_size=30), st.randoms(use_true_random=False))
def test_property_invariances(risk, rnd):
    r = np.array(risk)
    u = np.array([rnd.randint(0, 4) for _ in r], dtype=float)
    perm = np.array(rnd.sample(range(len(r)), len(r)))
    # permutation of the cases
    assert aurc(u[perm], r[perm]) == pytest.approx(aurc(u, r), abs=1e-12)
    # strictly increasing transform of the uncertainty
    assert aurc(np.exp(3 * u) - 7, r) == pytest.approx(aurc(u, r), abs=1e-12)
    # confidence = -uncertainty gives the same curve
    assert aurc(-u, r, score_type="confidence") == pytest.approx(aurc(u, r), abs=1e-12)


def test_monotone_and_random_rankings():
    rng = np.random.default_rng(1)
    r = rng.uniform(0, 1, size=20_000)
    # uncertainty ordered exactly like the risk: the oracle
    assert eaurc(r, r) == pytest.approx(0.0, abs=1e-12)
    assert eaurc(2 * r + 1, r) == pytest.approx(0.0, abs=1e-12)
    # random ranking: AURC close to the mean risk (every coverage has the mean risk in expectation)
    u_random = rng.uniform(size=r.size)
    assert aurc(u_random, r) == pytest.approx(r.mean(), abs=0.01)
    # reversed ranking is the worst: above the mean risk
    assert aurc(-r, r) > r.mean() + 0.1
    # all scores tied: two points at the mean risk
    assert aurc(np.zeros_like(r), r) == pytest.approx(r.mean(), abs=1e-12)
    assert augrc(np.zeros_like(r), r) == pytest.approx(r.mean() / 2, abs=1e-12)


def test_closed_form_optimum():
    rng = np.random.default_rng(2)
    r = (rng.uniform(size=100_000) < 0.3).astype(float)
    u = rng.uniform(size=r.size)
    err = r.mean()
    closed = err + (1 - err) * math.log(1 - err)
    assert aurc(u, r) - eaurc(u, r, optimum="closed_form") == pytest.approx(closed, abs=1e-12)
    # the empirical oracle trapezoid converges to the closed form
    assert eaurc(u, r, optimum="closed_form") == pytest.approx(eaurc(u, r), abs=1e-3)
    # all-correct and all-wrong
    assert eaurc(u[:10], np.zeros(10), optimum="closed_form") == pytest.approx(0.0)
    assert aurc(u[:10], np.ones(10)) == pytest.approx(1.0)
    assert eaurc(u[:10], np.ones(10), optimum="closed_form") == pytest.approx(0.0)
    with pytest.raises(ValueError, match="binary"):
        eaurc(u[:10], np.full(10, 0.5), optimum="closed_form")


def test_all_correct_single_case_and_library():
    assert aurc([0.3, 0.1], [0.0, 0.0]) == 0.0
    assert aurc([0.5], [0.7]) == pytest.approx(0.7)
    curve = risk_coverage_curve(torch.tensor([0.2, 0.1, 0.2]), torch.tensor([1.0, 0.0, 0.0]))
    assert isinstance(curve.coverage, torch.Tensor) and curve.coverage.dtype == torch.float64
    np.testing.assert_allclose(curve.coverage.numpy(), [1.0, 1 / 3, 0.0])
    # thresholds in uncertainty units: the retained cases are u <= threshold
    u = np.array([0.2, 0.1, 0.2])
    curve = risk_coverage_curve(u, [1.0, 0.0, 0.0])
    for cov, thr in zip(curve.coverage, curve.threshold):
        assert np.mean(u <= thr) == pytest.approx(cov)
    assert isinstance(aurc(torch.tensor([0.1, 0.2]), torch.tensor([0.0, 1.0])), float)


@pytest.mark.parametrize(
    "scores, risk, match",
    [
        ([0.1, 0.2], [0.0], "same length"),
        ([0.1, np.nan], [0.0, 1.0], "uncertainty contains 1 non-finite"),
        ([0.1, 0.2], [0.0, np.inf], "risk contains 1 non-finite"),
        ([], [], "empty"),
        (np.zeros((2, 2)), np.zeros((2, 2)), "1-D"),
    ],
)
def test_bad_inputs_raise(scores, risk, match):
    for fn in (aurc, eaurc, augrc, risk_coverage_curve):
        with pytest.raises(ValueError, match=match):
            fn(np.asarray(scores, dtype=float), np.asarray(risk, dtype=float))


def test_bad_options_raise():
    with pytest.raises(ValueError, match="score_type"):
        aurc([0.1], [0.0], score_type="probability")
    with pytest.raises(ValueError, match="optimum"):
        eaurc([0.1], [0.0], optimum="best")
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        aurc("abc", [0.0])


# ---------------------------------------------------------------- referral curves


def test_referral_endpoints_and_hand_case():
    u = np.array([0.9, 0.1, 0.5, 0.3])
    dice = np.array([0.2, 0.9, 0.6, 0.8])
    curve = referral_curve(u, dice, taus=[0.0, 0.25, 0.5, 0.75])
    # tau = 0: everything kept; then the most uncertain cases leave one by one
    np.testing.assert_allclose(curve.value, [dice.mean(), (0.9 + 0.6 + 0.8) / 3, (0.9 + 0.8) / 2, 0.9])
    np.testing.assert_array_equal(curve.n_retained, [4, 3, 2, 1])
    # default grid: every partition k / N; the last point is the least uncertain case alone
    full = referral_curve(u, dice)
    np.testing.assert_allclose(full.tau, [0, 0.25, 0.5, 0.75])
    assert full.value[0] == pytest.approx(dice.mean()) and full.value[-1] == pytest.approx(0.9)
    # tau = 1 refers everything: NaN with a warning
    with pytest.warns(UserWarning, match="refer all"):
        c = referral_curve(u, dice, taus=[0.0, 1.0])
    assert np.isnan(c.value[1])
    # ceil(tau * N) refers, robust to 0.3 * 10 = 3.0000000000000004
    c = referral_curve(np.arange(10.0), np.arange(10.0), taus=[0.3])
    assert int(c.n_retained[0]) == 7


def brute_force_tie_average(u, v, m):
    """Mean over every ordering of tied cases of the mean value of the m least uncertain cases."""
    n = len(u)
    total, count = 0.0, 0
    for perm in itertools.permutations(range(n)):
        rank = np.empty(n)
        rank[list(perm)] = np.arange(n)
        order = sorted(range(n), key=lambda i: (u[i], rank[i]))
        total += np.mean([v[i] for i in order[:m]])
        count += 1
    return total / count


def test_referral_ties_average_equals_permutation_brute_force():
    u = np.array([0.5, 0.2, 0.5, 0.5, 0.1, 0.2])
    v = np.array([1.0, 0.3, 0.0, 0.4, 0.9, 0.7])
    curve = referral_curve(u, v)
    for k in range(len(u)):
        m = len(u) - k
        assert curve.value[k] == pytest.approx(brute_force_tie_average(u, v, m), abs=1e-12)


def test_referral_callable_recomputes_cohort_metric():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, size=200)
    p = np.clip(y * 0.6 + rng.normal(0.2, 0.25, size=200), 0, 1)
    u = 0.5 - np.abs(p - 0.5)  # uncertainty of a binary classifier
    taus = np.linspace(0, 0.6, 7)
    curve = referral_curve(u, lambda idx: roc_auc_score(y[idx], p[idx]), taus=taus, ties="order")
    order = np.argsort(u, kind="stable")
    for t, val in zip(taus, curve.value):
        kept = order[: 200 - math.ceil(round(t * 200, 9))]
        assert val == pytest.approx(roc_auc_score(y[kept], p[kept]))
    # AUROC rises as uncertain cases are referred
    assert curve.value[-1] > curve.value[0]
    # a callable of the mean equals the vectorised path with the same tie rule
    v = rng.uniform(size=200)
    u_ties = rng.integers(0, 5, size=200).astype(float)
    a = referral_curve(u_ties, lambda idx: v[idx].mean(), ties="order").value
    b = referral_curve(u_ties, v, ties="order").value
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_area_under_referral_curve():
    u = np.array([0.9, 0.1, 0.5, 0.3])
    dice = np.array([0.2, 0.9, 0.6, 0.8])
    vals = [dice.mean(), (0.9 + 0.6 + 0.8) / 3, (0.9 + 0.8) / 2, 0.9]
    expected = loop_trapezoid([0, 0.25, 0.5, 0.75], vals)
    assert area_under_referral_curve(u, dice) == pytest.approx(expected)
    assert area_under_referral_curve(u, dice, normalize=True) == pytest.approx(expected / 0.75)
    # an uncertainty ordered like the error beats a random one
    rng = np.random.default_rng(4)
    d = rng.uniform(size=5000)
    assert area_under_referral_curve(1 - d, d, normalize=True) > area_under_referral_curve(
        rng.uniform(size=5000), d, normalize=True
    )
    with pytest.warns(UserWarning):
        assert np.isnan(area_under_referral_curve([0.1], [1.0]))
    # torch in, torch curve out
    curve = referral_curve(torch.tensor(u), torch.tensor(dice))
    assert isinstance(curve.value, torch.Tensor)


def test_referral_bad_inputs():
    with pytest.raises(ValueError, match="same length"):
        referral_curve([0.1, 0.2], [1.0])
    with pytest.raises(ValueError, match="non-finite"):
        referral_curve([0.1, np.nan], [1.0, 1.0])
    with pytest.raises(ValueError, match="empty"):
        referral_curve([], [])
    with pytest.raises(ValueError, match="taus"):
        referral_curve([0.1, 0.2], [1.0, 1.0], taus=[1.5])
    with pytest.raises(ValueError, match="ties"):
        referral_curve([0.1, 0.2], lambda idx: 0.0)
    with pytest.raises(ValueError, match="ties"):
        referral_curve([0.1, 0.2], [1.0, 1.0], ties="random")


# ---------------------------------------------------------------- the documentation example runs as-is


def test_docs_example_runs():
    doc = ROOT / "docs" / "case_level.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S)
    assert blocks, "docs/case_level.md has no python example"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for block in blocks:
            exec(compile(block, str(doc), "exec"), {"__name__": "__docs__"})


def test_taus_of_two_dimensions_are_refused():
    # found by hostile review 60: a (2, 2) array was flattened into four rates; one rate (0-d) is still one rate
    with pytest.raises(ValueError, match=r"1-D sequence of them, got shape \(2, 2\)"):
        referral_curve([0.1, 0.4, 0.2, 0.8], [0.9, 0.6, 0.8, 0.3], taus=[[0.0, 0.25], [0.5, 0.75]])
    assert referral_curve([0.1, 0.4, 0.2, 0.8], [0.9, 0.6, 0.8, 0.3], taus=0.5).n_retained.tolist() == [2]
