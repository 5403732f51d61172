"""Failure detection and QU-BraTS against independent brute-force references written here (review 66).

Selective prediction: the risk-coverage curve by looping over the distinct confidences (fd-shifts' convention: tied
cases enter together, then a coverage-0 point), the empirical E-AURC by enumerating every order of the cases (every
case its own point; the mean over the orders that keep the score's ranking), the closed form ``e + (1 - e) ln(1 - e)``.
QU-BraTS: one mask per threshold as the challenge's evaluation script defines it (Mehta et al., MELBA 2022). The
frozen ``numpy1`` values were computed by the reference below with the script's grid expression
``numpy.arange(0.0, 100.0 + numpy.finfo(numpy.float32).eps, 100.0 / 40)`` evaluated under numpy 1.26.4 (the 2020
challenge's numpy generation), the ``numpy2`` values under numpy 2.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics import augrc, aurc, eaurc, failure_detection, qu_brats, risk_coverage_curve

EPS32 = float(np.finfo(np.float32).eps)


# ----------------------------------------------------------------------------------------- selective references
def _trapezoid(x: list[float], y: list[float]) -> float:
    return sum(abs(x[i] - x[i + 1]) * (y[i] + y[i + 1]) / 2 for i in range(len(x) - 1))


def _ref_curve(conf: list[float], risk: list[float]) -> tuple[list[float], list[float], list[float]]:
    """One point per distinct confidence ``c`` (keep ``conf >= c``), then coverage 0 (last risk repeated / 0)."""
    n = len(conf)
    cov, sel, gen = [], [], []
    for c in sorted(set(conf)):
        kept = [i for i in range(n) if conf[i] >= c]
        s = sum(risk[i] for i in kept)
        cov.append(len(kept) / n)
        sel.append(s / len(kept))
        gen.append(s / n)
    return cov + [0.0], sel + [sel[-1]], gen + [0.0]


def _per_case_aurc(order: list[int], risk: list[float]) -> float:
    """AURC with a point at every kept count, cases kept in ``order`` (most confident first)."""
    n = len(order)
    cov = [k / n for k in range(n, 0, -1)]
    sel = [sum(risk[i] for i in order[:k]) / k for k in range(n, 0, -1)]
    return _trapezoid(cov + [0.0], sel + [sel[-1]])


def _ref_eaurc(conf: list[float], risk: list[float]) -> float:
    """Mean per-case AURC over every order that keeps the scores' ranking, minus the risk-sorted oracle's."""
    n = len(conf)
    perms = itertools.permutations(range(n))
    orders = {tuple(sorted(range(n), key=lambda i: (-conf[i], perm.index(i)))) for perm in perms}
    # every tie-breaking order equally often: each distinct order arises from the same number of permutations
    scored = sum(_per_case_aurc(list(o), risk) for o in orders) / len(orders)
    return scored - _per_case_aurc(sorted(range(n), key=lambda i: risk[i]), risk)


def _ref_closed_form(conf: list[float], risk: list[float]) -> float:
    e = sum(risk) / len(risk)
    cov, sel, _ = _ref_curve(conf, risk)
    return _trapezoid(cov, sel) - (e + ((1 - e) * math.log(1 - e) if e < 1 else 0.0))


def _random_case(rng: np.random.Generator, kind: int) -> tuple[np.ndarray, np.ndarray]:
    n = int(rng.integers(1, 6))
    u = [rng.random(n), rng.integers(0, 3, n).astype(float), np.full(n, 0.3), np.round(rng.random(n), 1)][kind % 4]
    r = rng.integers(0, 2, n).astype(float) if kind % 2 else np.round(rng.random(n), 1)
    return u, r


@pytest.mark.parametrize("seed", [0, 1])
def test_areas_equal_the_brute_force_references(seed):
    """Ties, constant scores, n = 1 .. 5, binary and continuous risk: every area equals its reference."""
    rng = np.random.default_rng(seed)
    for kind in range(60):
        u, r = _random_case(rng, kind)
        conf, rl = [-float(x) for x in u], [float(x) for x in r]
        cov, sel, gen = _ref_curve(conf, rl)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # constant scores warn (tested elsewhere)
            curve = risk_coverage_curve(u, r)
            np.testing.assert_allclose(curve.coverage, cov, rtol=0, atol=1e-15)
            np.testing.assert_allclose(curve.selective_risk, sel, rtol=0, atol=1e-15)
            np.testing.assert_allclose(curve.generalized_risk, gen, rtol=0, atol=1e-15)
            assert aurc(u, r) == pytest.approx(_trapezoid(cov, sel), abs=1e-14)
            assert augrc(u, r) == pytest.approx(_trapezoid(cov, gen), abs=1e-14)
            assert eaurc(u, r) == pytest.approx(_ref_eaurc(conf, rl), abs=1e-14)
            if set(rl) <= {0.0, 1.0}:
                assert eaurc(u, r, optimum="closed_form") == pytest.approx(_ref_closed_form(conf, rl), abs=1e-14)


def test_frozen_values_worked_by_hand():
    """Four cases, scores tied in pairs, risks 1 0 | 0 1 (uncertainty 0.2 0.2 | 0.7 0.7)."""
    u, r = [0.2, 0.2, 0.7, 0.7], [1.0, 0.0, 0.0, 1.0]
    # one point per tie group: (1, 1/2), (1/2, 1/2), (0, 1/2): AURC 1/2, AUGRC (1/2 + 1/4)/2 * 1/2 + 1/4 * 1/2 / 2
    assert aurc(u, r) == pytest.approx(0.5, abs=1e-15)
    assert augrc(u, r) == pytest.approx(0.25, abs=1e-15)
    # each case its own point, averaged over the tie orders: expected selective risk 1/2 at k = 4, 3, 2, 1 (area 1/2);
    # the oracle keeps risks 0, 0, 1, 1 from the lowest: 1/2, 1/3, 0, 0 (area 5/48 + 1/24 = 7/48): 1/2 - 7/48
    assert eaurc(u, r) == pytest.approx(_ref_eaurc([-x for x in u], r), abs=1e-15)
    assert eaurc(u, r) == pytest.approx(17 / 48, abs=1e-15)
    # closed form: 1/2 - (1/2 + 1/2 ln 1/2)
    assert eaurc(u, r, optimum="closed_form") == pytest.approx(-0.5 * math.log(0.5), abs=1e-15)


def test_eaurc_of_a_ranking_as_good_as_the_oracle_is_exactly_zero_never_negative():
    """Found by review 66: the rounding of the two areas gave -1.1e-16, printed as a negative E-AURC."""
    assert eaurc([0.0, 0.0, 0.0, 1.0], [0.7] * 4) == 0.0
    assert failure_detection([0.0, 0.0, 0.0, 1.0], [0.3] * 4).eaurc == 0.0
    rng = np.random.default_rng(66)
    for _ in range(300):
        n = int(rng.integers(2, 40))
        risk = np.full(n, rng.choice([0.1, 0.2, 0.3, 0.7, 1 / 3])) if rng.random() < 0.5 else np.round(rng.random(n), 1)
        u = rng.integers(0, 3, n).astype(float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            assert eaurc(u, risk) >= 0.0
            # ranked by the risk itself (ties only among equal risks): exactly the oracle
            assert eaurc(risk, risk) == 0.0


def test_a_genuine_small_excess_is_kept():
    """The rounding bound is far below any excess the risks can make: one swapped pair of risks 0 and 1e-9."""
    e = eaurc([0.1, 0.2, 0.3], [1e-9, 0.0, 0.0])
    assert e > 0.0
    assert e == pytest.approx(_ref_eaurc([-0.1, -0.2, -0.3], [1e-9, 0.0, 0.0]), rel=1e-9)


def test_single_case_and_all_correct_or_all_wrong():
    """n = 1 and sets whose risks are all equal: defined values (as fd-shifts), nothing to rank, E-AURC 0."""
    assert (aurc([0.3], [1.0]), augrc([0.3], [1.0]), eaurc([0.3], [1.0])) == (1.0, 0.5, 0.0)
    assert (aurc([0.3], [0.0]), augrc([0.3], [0.0]), eaurc([0.3], [0.0])) == (0.0, 0.0, 0.0)
    u = [0.1, 0.5, 0.2]
    assert (aurc(u, [0, 0, 0]), augrc(u, [0, 0, 0]), eaurc(u, [0, 0, 0])) == (0.0, 0.0, 0.0)
    assert (aurc(u, [1, 1, 1]), augrc(u, [1, 1, 1]), eaurc(u, [1, 1, 1])) == (1.0, 0.5, 0.0)
    assert eaurc(u, [1, 1, 1], optimum="closed_form") == 0.0  # AURC* = 1 (fd-shifts: 1 + 0 * ln(eps))
    assert eaurc(u, [0, 0, 0], optimum="closed_form") == 0.0  # exact, where fd-shifts' ln(1 + eps) gives ~1e-16


@pytest.mark.parametrize("fn", [aurc, augrc, eaurc, risk_coverage_curve])
def test_inputs_are_attacked(fn):
    for bad, name in (([np.nan, 0.1], "uncertainty"), ([np.inf, 0.1], "uncertainty"), ([-np.inf, 0.1], "uncertainty")):
        with pytest.raises(ValueError, match=name):
            fn(bad, [0.0, 1.0])
    with pytest.raises(ValueError, match="risk"):
        fn([0.1, 0.2], [np.nan, 1.0])
    with pytest.raises(ValueError, match="uncertainty and risk must have the same length, got 2 and 3"):
        fn([0.1, 0.2], [0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="uncertainty is empty"):
        fn([], [])
    with pytest.raises(ValueError, match="uncertainty must be 1-D"):
        fn([[0.1, 0.2]], [[0.0, 1.0]])
    with pytest.raises(ValueError, match="risk must be a loss"):
        fn([0.1, 0.2], [-0.5, 1.0])
    with pytest.raises(TypeError, match="uncertainty"):
        fn(np.array(["a", "b"]), [0.0, 1.0])
    # bool errors and int scores are numbers: the same value as their float64 form, torch in and out
    ref = fn(np.array([1.0, 0.0, 2.0]), np.array([1.0, 0.0, 1.0]))
    same = fn(np.array([1, 0, 2]), np.array([True, False, True]))
    tin = fn(torch.tensor([1, 0, 2]), torch.tensor([True, False, True]))
    if fn is risk_coverage_curve:
        for a, b, c in zip(ref, same, tin):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, c.numpy())
    else:
        assert ref == same == tin


# ------------------------------------------------------------------------------------------- QU-BraTS reference
def _ref_qu_brats(u, p, g, b, thresholds: list[float], max_u: float) -> dict[str, float]:
    """The challenge's definition, one mask per threshold (descending), areas by the trapezoid over the thresholds."""
    u = np.asarray(u, dtype=np.float64)
    p, g = np.asarray(p, dtype=bool), np.asarray(g, dtype=bool)
    b = np.ones(u.shape, dtype=bool) if b is None else np.asarray(b) > 0
    tp, tn = np.sum(p & g & b), np.sum(~p & ~g & b)
    curves: tuple[list[float], list[float], list[float]] = ([], [], [])
    for t in thresholds:
        kept = u <= t
        den = np.sum(p & kept) + np.sum(g & kept)
        curves[0].append(1.0 if den == 0 else 2.0 * np.sum(p & g & kept) / den)
        curves[1].append((tp - np.sum(p & g & b & kept)) / (tp + EPS32))
        curves[2].append((tn - np.sum(~p & ~g & b & kept)) / (tn + EPS32))
    d, fp, fn = (_trapezoid(thresholds, c) / max_u for c in curves)
    return {"score": (d + 1 - fp + 1 - fn) / 3, "dice_auc": d, "ftp_auc": fp, "ftn_auc": fn}


GRID = {"numpy2": [2.5 * i for i in range(39, -1, -1)], "numpy1": [2.5 * i for i in range(40, -1, -1)]}


@pytest.mark.parametrize("seed", [0, 1])
def test_qu_brats_equals_the_per_threshold_reference(seed):
    """2D / 3D / 1-voxel, empty regions, constant and error-only maps, on and off the grid, with and without brain."""
    rng = np.random.default_rng(seed)
    for it in range(40):
        shape = [(5, 6), (3, 4, 5), (1, 1, 1), (7,)][it % 4]
        p, g = rng.random(shape) < rng.random(), rng.random(shape) < rng.random()
        if it % 7 == 0:
            p[:], g[:] = False, False  # empty tumour region
        u = [rng.random(shape) * 100, np.round(rng.random(shape) * 8) * 12.5, np.full(shape, 50.0),
             np.where(p ^ g, 100.0, 0.0), rng.integers(0, 101, shape)][it % 5]
        b = rng.random(shape) < 0.8 if it % 3 == 0 else None
        if b is not None and not b.any():
            b = None
        for grid, thresholds in GRID.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # a map nowhere above 2.5 warns (tested elsewhere)
                got = qu_brats(u, p, g, brain_mask=b, grid=grid).as_dict()
            want = _ref_qu_brats(u, p, g, b, thresholds, 100.0)
            for k in want:
                assert got[k] == pytest.approx(want[k], abs=1e-12), (it, grid, k)


# (seed, shape, {grid: (score, dice_auc, ftp_auc, ftn_auc)}) for the inputs of _frozen_inputs; numpy1 computed with
# the script's grid expression under numpy 1.26.4 (41 thresholds), numpy2 under numpy 2 (40)
FROZEN = [
    (0, (6, 7), {"numpy1": (0.31434126578808746, 0.17711468381525908, 0.7124999830126768, 0.5215909034383199),
                 "numpy2": (0.3116530937450767, 0.1690501676862268, 0.7124999830126768, 0.5215909034383199)}),
    (1, (4, 5, 3), {"numpy1": (0.4203340667895244, 0.25433551969812684, 0.5124999898175403, 0.48083332951201335),
                    "numpy2": (0.4177120129174705, 0.24646935808196527, 0.5124999898175403, 0.48083332951201335)}),
    (2, (3, 3, 3), {"numpy1": (0.40358226178444984, 0.2955952380952381, 0.7041666386855983, 0.3806818140562902),
                    "numpy2": (0.3998785580807462, 0.284484126984127, 0.7041666386855983, 0.3806818140562902)}),
    (3, (9,), {"numpy1": (0.630605169833593, 0.8386904761904759, 0.5124999796350803, 0.43437498705461636),
               "numpy2": (0.6234623126907359, 0.8172619047619045, 0.5124999796350803, 0.43437498705461636)}),
]


def _frozen_inputs(seed: int, shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    p, g = rng.random(shape) < 0.4, rng.random(shape) < 0.4
    u = np.round(rng.random(shape) * 40) * 2.5  # on the grid: a tie at every threshold
    b = rng.random(shape) < 0.8
    return u, p, g, b


@pytest.mark.parametrize("seed, shape, expected", FROZEN)
def test_qu_brats_frozen_values_of_both_numpy_generations(seed, shape, expected):
    u, p, g, b = _frozen_inputs(seed, shape)
    for grid, values in expected.items():
        got = qu_brats(u, p, g, brain_mask=b, grid=grid).as_dict()
        assert [got[k] for k in ("score", "dice_auc", "ftp_auc", "ftn_auc")] == pytest.approx(values, abs=1e-12)


def test_qu_brats_inputs_are_attacked():
    z, one = np.zeros((2, 3)), np.ones((2, 3), dtype=bool)
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="uncertainty contains 6 non-finite"):
            qu_brats(np.full((2, 3), bad), one, one)
    with pytest.raises(ValueError, match="pred must be a binary mask"):
        qu_brats(z, 2 * one.astype(int), one)
    with pytest.raises(ValueError, match="target must be a binary mask"):
        qu_brats(z, one, np.full((2, 3), 0.5))
    with pytest.raises(ValueError, match="pred must have the shape of uncertainty"):
        qu_brats(z[:1], one, one)
    with pytest.raises(ValueError, match="uncertainty is empty"):
        qu_brats(np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0, dtype=bool))
    with pytest.raises(ValueError, match="brain_mask has no voxel"):
        qu_brats(z, one, one, brain_mask=np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"uncertainty must lie in \[0, max_uncertainty=100\]"):
        qu_brats(np.full((2, 3), 100.5), one, one)
    # int 0/1 masks equal bool masks; an empty region (both empty) is scored, never NaN
    assert qu_brats(z, one.astype(int), one.astype(np.uint8)).as_dict() == qu_brats(z, one, one).as_dict()
    empty = qu_brats(z, ~one, ~one)
    assert empty.score == pytest.approx((0.975 + 1 + 1) / 3) and not math.isnan(empty.score)
