"""E-AURC with tied scores: both terms handle ties alike, so the default E-AURC is never negative."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from monai_unc.metrics import aurc, eaurc


def brute_force_eaurc(uncertainty: np.ndarray, risk: np.ndarray) -> float:
    """Loops over tie groups of the scores; the oracle at each kept count is the best subset of that size."""
    n = len(risk)
    levels = sorted(set(uncertainty.tolist()))  # ascending uncertainty = descending confidence
    points = []  # (coverage, selective risk, oracle selective risk)
    for level in levels:
        kept = [i for i in range(n) if uncertainty[i] <= level]
        k = len(kept)
        best = min(sum(risk[list(c)]) for c in itertools.combinations(range(n), k)) / k
        points.append((k / n, sum(risk[kept]) / k, best))
    points = points[::-1] + [(0.0, points[0][1], points[0][2])]
    area = oracle = 0.0
    for (c0, s0, o0), (c1, s1, o1) in zip(points[:-1], points[1:]):
        area += (c0 - c1) * (s0 + s1) / 2
        oracle += (c0 - c1) * (o0 + o1) / 2
    return area - oracle


def test_perfect_ranking_up_to_ties_has_no_excess():
    # one error-free case is the most confident, three failures tie: a perfect ranking; it was -0.104
    u, r = np.array([0.0, 1.0, 1.0, 1.0]), np.array([0.0, 1.0, 1.0, 1.0])
    assert eaurc(u, r) == pytest.approx(0.0, abs=1e-12)
    assert aurc(u, r) == pytest.approx(0.75 * 0.75 / 2)


def test_matches_brute_force_and_is_nonnegative_with_ties():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 8))
        u = rng.integers(0, 3, n).astype(float)  # many ties
        r = rng.integers(0, 3, n) / 2.0 if rng.random() < 0.5 else rng.random(n).round(1)
        value = eaurc(u, r)
        assert value >= -1e-12
        assert value == pytest.approx(brute_force_eaurc(u, r), abs=1e-12)


def test_without_ties_every_case_is_its_own_point():
    rng = np.random.default_rng(3)
    u, r = rng.permutation(9).astype(float), rng.random(9)
    assert eaurc(u, r) == pytest.approx(brute_force_eaurc(u, r), abs=1e-12)
    assert eaurc(r, r) == pytest.approx(0.0, abs=1e-12)
