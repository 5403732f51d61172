"""E-AURC with tied scores: the expected AURC over random orders of the tied cases minus the score-free oracle.

A tie group enters the scored term as the average over every order of its cases (each case its own point), and
the oracle has a point at every coverage ``k / N`` whatever the scores, so E-AURC is never negative and a score
gets no credit for its ties: a constant score is not a perfect ranking. (An earlier version evaluated the oracle
at the scored curve's tie-group coverages, so a constant score got E-AURC 0.)
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from monai_unc.metrics import aurc, eaurc


def trapezoid_every_case(ranked_risk: list[float]) -> float:
    """fd-shifts' trapezoid AURC of one fixed ranking (most confident first), every case its own point."""
    n = len(ranked_risk)
    points = [(k / n, sum(ranked_risk[:k]) / k) for k in range(n, 0, -1)]
    points.append((0.0, points[-1][1]))
    return sum((c0 - c1) * (s0 + s1) / 2 for (c0, s0), (c1, s1) in zip(points[:-1], points[1:]))


def brute_force_oracle(risk: list[float]) -> float:
    """AURC* with a point at every k: the best subset of k cases, found by enumerating every subset."""
    n = len(risk)
    points = [(k / n, min(sum(c) for c in itertools.combinations(risk, k)) / k) for k in range(n, 0, -1)]
    points.append((0.0, points[-1][1]))
    return sum((c0 - c1) * (s0 + s1) / 2 for (c0, s0), (c1, s1) in zip(points[:-1], points[1:]))


def brute_force_expected_aurc(uncertainty: np.ndarray, risk: np.ndarray) -> float:
    """The mean of the fixed-ranking trapezoid AURC over every order of the cases inside each tie group."""
    groups = [[float(risk[i]) for i in range(len(risk)) if uncertainty[i] == level]
              for level in sorted(set(uncertainty.tolist()))]  # ascending uncertainty = descending confidence
    areas = [trapezoid_every_case([x for perm in perms for x in perm])
             for perms in itertools.product(*(itertools.permutations(g) for g in groups))]
    return sum(areas) / len(areas)


def brute_force_eaurc(uncertainty: np.ndarray, risk: np.ndarray) -> float:
    return brute_force_expected_aurc(uncertainty, risk) - brute_force_oracle([float(x) for x in risk])


def test_perfect_ranking_up_to_ties_has_no_excess():
    # one error-free case is the most confident, three failures tie: every order of the tie is a perfect ranking
    u, r = np.array([0.0, 1.0, 1.0, 1.0]), np.array([0.0, 1.0, 1.0, 1.0])
    assert eaurc(u, r) == pytest.approx(0.0, abs=1e-12)
    assert aurc(u, r) == pytest.approx(0.75 * 0.75 / 2)


def test_matches_brute_force_over_tie_orders_and_is_nonnegative():
    rng = np.random.default_rng(7)
    tied = 0
    for _ in range(250):
        n = int(rng.integers(1, 8))
        u = rng.integers(0, 3, n).astype(float)  # many ties
        r = rng.integers(0, 2, n).astype(float) if rng.random() < 0.5 else rng.random(n)  # 0/1 or continuous
        value = eaurc(u, r)
        assert value >= -1e-12
        assert value == pytest.approx(brute_force_eaurc(u, r), abs=1e-12)
        tied += np.unique(u).size < n and np.unique(r).size > 1
    assert tied > 150  # the ties that matter were exercised


def test_constant_score_is_charged_its_mean_risk_curve():
    # a constant score keeps random cases: every expected selective risk is the mean risk (0.5), area 0.5; the
    # oracle's points are (1, 1/2), (3/4, 1/3), (1/2, 0), (1/4, 0), (0, 0), area 7/48; it was 0 (a perfect ranking)
    u, r = np.full(4, 0.3), np.array([0.0, 1.0, 0.0, 1.0])
    assert eaurc(u, r) == pytest.approx(0.5 - 7 / 48, abs=1e-15)
    assert eaurc(u, r) == pytest.approx(brute_force_eaurc(u, r), abs=1e-15)
    # continuous risk: mean 0.3; oracle points .3, .2, .15, .1, .1 at coverages 1 .. 0, area 0.1625
    r = np.array([0.6, 0.1, 0.3, 0.2])
    assert eaurc(u, r) == pytest.approx(0.3 - 0.1625, abs=1e-15)
    assert eaurc(u, r) == pytest.approx(brute_force_eaurc(u, r), abs=1e-15)
    assert eaurc(u, r) > eaurc(r, r) == pytest.approx(0.0, abs=1e-15)


def _noisy_dice_example():
    rng = np.random.default_rng(1)
    risk = 1.0 - rng.beta(5.0, 1.5, 400)  # 1 - Dice
    score = risk + rng.normal(0.0, 0.15, 400)  # an informative but noisy uncertainty
    return rng, risk, score


def _monte_carlo_aurc(rng, score, risk, draws=400):
    """Mean AURC over random tie-breaks: rank by (score, random key), so no two cases tie."""
    values = []
    for _ in range(draws):
        ranks = np.empty(score.size)
        ranks[np.lexsort((rng.random(score.size), score))] = np.arange(score.size)
        values.append(aurc(ranks, risk))
    return float(np.mean(values))


def test_coarsening_the_score_does_not_lower_eaurc():
    # rounding merges neighbours into ties, which now cost their random order: coarser scores rank worse. The old
    # oracle (at the tie-group coverages) gave 0.0338, 0.0332, 0.0083: the 2-valued score read as the best one
    rng, risk, score = _noisy_dice_example()
    coarse = np.round(score, 1)  # 14 distinct values
    binary = np.round(score)  # 2 distinct values
    assert (np.unique(coarse).size, np.unique(binary).size) == (14, 2)
    oracle = aurc(risk, risk) - eaurc(risk, risk)
    values = [eaurc(s, risk) for s in (score, coarse, binary)]
    assert values == pytest.approx([0.033831735430904, 0.034937776292178, 0.089223497127472], abs=1e-14)
    assert values[0] < values[1] < values[2]
    assert aurc(binary, risk) == pytest.approx(0.200125503945099, abs=1e-14)  # AURC agrees: worse
    # each against an independent estimate of the expected AURC over random tie orders
    for s, value in zip((coarse, binary), values[1:]):
        assert value + oracle == pytest.approx(_monte_carlo_aurc(rng, s, risk), abs=1.5e-3)


def test_without_ties_it_is_aurc_minus_the_brute_force_oracle():
    rng = np.random.default_rng(3)
    for n in range(1, 10):
        u, r = rng.permutation(n).astype(float), rng.random(n)
        if n % 2:
            r = (r < 0.4).astype(float)
        assert eaurc(u, r) == pytest.approx(aurc(u, r) - brute_force_oracle(r.tolist()), abs=1e-15)
        assert eaurc(r, r) == pytest.approx(0.0, abs=1e-15)
    assert math.isclose(eaurc(u, r), brute_force_eaurc(u, r), abs_tol=1e-15)
