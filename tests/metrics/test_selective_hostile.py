"""Hostile review of the selective-prediction metrics against brute-force enumeration.

AURC / AUGRC by looping over the distinct thresholds, E-AURC's oracle by sorting, the referral curve with
``ties="average"`` by enumerating every order of the tied cases.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from monai_unc.metrics.selective import (
    area_under_referral_curve,
    augrc,
    aurc,
    eaurc,
    referral_curve,
    risk_coverage_curve,
)


def rc_loop(u, r):
    """Risk-coverage points by looping over the distinct uncertainties: keep ``u <= t``; then the coverage-0 point."""
    u, r = np.asarray(u, np.float64), np.asarray(r, np.float64)
    cov, sel, gen = [], [], []
    for t in np.unique(u)[::-1]:
        kept = u <= t
        cov.append(kept.mean())
        sel.append(r[kept].mean())
        gen.append(r[kept].sum() / u.size)
    cov.append(0.0)
    sel.append(sel[-1])
    gen.append(0.0)
    return np.array(cov), np.array(sel), np.array(gen)


def trapz_desc(x, y):
    return float(sum((x[i] - x[i + 1]) * (y[i] + y[i + 1]) / 2 for i in range(len(x) - 1)))


def random_case(rng, n):
    u = rng.integers(0, max(2, n // 2), n) / 7.0 if rng.random() < 0.5 else rng.random(n)
    r = (rng.random(n) < rng.random()).astype(float) if rng.random() < 0.5 else rng.random(n)
    return u, r


def test_areas_match_loop():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 25))
        u, r = random_case(rng, n)
        cov, sel, gen = rc_loop(u, r)
        assert aurc(u, r) == pytest.approx(trapz_desc(cov, sel), abs=1e-12)
        assert augrc(u, r) == pytest.approx(trapz_desc(cov, gen), abs=1e-12)
        # E-AURC: the mean AURC over every order of the tied cases (each case its own point; the mean of the
        # curves, since the area is linear in them) minus the oracle (k lowest risks) at every k
        groups = [list(np.flatnonzero(u == t)) for t in np.unique(u)]
        if math.prod(math.factorial(len(g)) for g in groups) <= 720:
            areas = []
            for perms in itertools.product(*(itertools.permutations(g) for g in groups)):
                ranked = r[np.concatenate(perms)]
                k_sel = np.cumsum(ranked)[::-1] / np.arange(n, 0, -1)
                areas.append(trapz_desc(np.r_[np.arange(n, 0, -1) / n, 0.0], np.r_[k_sel, k_sel[-1]]))
            oracle = np.sort(r)
            k = np.arange(n, 0, -1)
            o_sel = np.r_[np.cumsum(oracle)[k - 1] / k, oracle[0]]
            o_cov = np.r_[k / n, 0.0]
            assert eaurc(u, r) == pytest.approx(np.mean(areas) - trapz_desc(o_cov, o_sel), abs=1e-12)
        curve = risk_coverage_curve(u, r)
        np.testing.assert_allclose(curve.coverage, cov, atol=1e-15)
        np.testing.assert_allclose(curve.selective_risk, sel, atol=1e-12)


def test_properties():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(2, 30))
        u, r = random_case(rng, n)
        perm = rng.permutation(n)
        a = aurc(u, r)
        assert aurc(u[perm], r[perm]) == pytest.approx(a, abs=1e-12)  # case order does not matter
        assert aurc(np.exp(2 * u), r) == pytest.approx(a, abs=1e-12)  # only the ranking matters
        assert aurc(-u, r, score_type="confidence") == pytest.approx(a, abs=1e-12)
        assert 0.0 <= augrc(u, r) <= a + 1e-12 <= 1.0 + 1e-12  # generalized risk <= selective risk
        assert eaurc(u, r) >= -1e-12  # the oracle is a lower bound, ties included


@pytest.mark.parametrize("fn", [aurc, augrc, eaurc])
def test_zero_area_is_positive_zero(fn):
    """A perfect ranking gives 0.0, not -0.0 (which reads as ``-0.0`` in reports and CSV tables)."""
    value = fn([0.1, 0.4, 0.2, 0.8], [0.0, 0.0, 0.0, 0.0])
    assert value == 0.0 and math.copysign(1.0, value) == 1.0
    value = fn([0.5], [0.0])
    assert value == 0.0 and math.copysign(1.0, value) == 1.0


def test_closed_form_optimum_zero_error_is_positive_zero():
    value = eaurc([0.3, 0.2], [0.0, 0.0], optimum="closed_form")
    assert value == 0.0 and math.copysign(1.0, value) == 1.0


def referral_enumerated(u, v, taus):
    """Mean over every order of the tied cases of the mean value of the kept cases (ceil(tau N) referred)."""
    n = len(u)
    groups = {}
    for i, x in enumerate(u):
        groups.setdefault(x, []).append(i)
    keys = sorted(groups)
    orders = [list(itertools.permutations(groups[k])) for k in keys]
    out = []
    for t in taus:
        m = n - math.ceil(round(t * n, 9))
        if m == 0:
            out.append(np.nan)
            continue
        vals = []
        for combo in itertools.product(*orders):
            order = [i for grp in combo for i in grp]
            vals.append(np.mean([v[i] for i in order[:m]]))
        out.append(np.mean(vals))
    return np.array(out)


@pytest.mark.filterwarnings("ignore:referral_curve")
def test_referral_average_ties_match_enumeration():
    rng = np.random.default_rng(2)
    for _ in range(60):
        n = int(rng.integers(1, 7))
        u = rng.integers(0, 3, n).astype(float)
        v = rng.random(n)
        taus = np.r_[np.arange(n) / n, 0.3, 0.55]
        curve = referral_curve(u, v, taus=taus)
        np.testing.assert_allclose(curve.value, referral_enumerated(u, v, taus), atol=1e-12)


def test_referral_torch_in_torch_out():
    u = torch.tensor([0.3, 0.1, 0.2])
    curve = referral_curve(u, torch.tensor([0.0, 1.0, 1.0]))
    assert isinstance(curve.value, torch.Tensor) and curve.value.dtype == torch.float64
    assert area_under_referral_curve(u, torch.tensor([0.0, 1.0, 1.0])) == pytest.approx(
        area_under_referral_curve(u.numpy(), [0.0, 1.0, 1.0])
    )


def test_referral_callable_that_sorts_its_indices_in_place():
    # found by hostile testing: the callable got a view of the ranking itself, so one that sorts its indices in place
    # (h5py reads need increasing indices) reordered the ranking and every later rate kept the wrong cases (the last
    # point gave the Dice 0.2 of the most uncertain case instead of 0.9 of the most certain)
    u = np.array([0.9, 0.1, 0.5, 0.3])
    dice = np.array([0.2, 0.9, 0.6, 0.8])

    def mean_dice(idx):
        idx.sort()
        return float(dice[idx].mean())

    curve = referral_curve(u, mean_dice, ties="order")
    np.testing.assert_allclose(curve.value, referral_curve(u, dice, ties="order").value)
    np.testing.assert_allclose(curve.value, [0.625, 0.7666666666666667, 0.85, 0.9])


@pytest.mark.parametrize("taus", [["0.5"], np.array([0.5 + 1j]), np.array([b"0.5"]), [True, False], np.array([True])])
def test_referral_rates_must_be_numbers(taus):
    # found by hostile testing: text rates were parsed ("0.5" referred half the cases) and a complex rate lost its
    # imaginary part with only numpy's ComplexWarning, where the scores and values of the same call are refused
    with pytest.raises(TypeError, match="taus"):
        referral_curve([0.1, 0.2], [1.0, 0.0], taus=taus)
    with pytest.raises(TypeError, match="taus"):
        area_under_referral_curve([0.1, 0.2], [1.0, 0.0], taus=taus)
    assert referral_curve([0.1, 0.2], [1.0, 0.0], taus=np.array([0, 0], dtype=np.int8)).n_retained.tolist() == [2, 2]


@pytest.mark.parametrize(
    "u, r, exc",
    [
        ([], [], ValueError),
        ([0.1, np.nan], [0, 1], ValueError),
        ([0.1, np.inf], [0, 1], ValueError),
        ([0.1, 0.2], [0, 1, 1], ValueError),
        (np.ones((2, 2)), np.ones((2, 2)), ValueError),
        (np.array(["a", "b"]), [0, 1], TypeError),
    ],
)
def test_bad_input_raises(u, r, exc):
    with pytest.raises(exc):
        aurc(u, r)


def test_normalize_must_be_a_bool():
    """``normalize="no"`` (truthy) divided the area by the tau range."""
    with pytest.raises(TypeError, match="normalize"):
        area_under_referral_curve([0.3, 0.1], [1.0, 0.5], normalize="no")
    assert area_under_referral_curve([0.3, 0.1], [1.0, 0.5], normalize=np.bool_(True)) == 0.625
