"""Review 67: the conformal masks' statistics against the papers' definitions, and the defects that review found.

- The formulas: conformal risk control's ``lambda_hat`` (Angelopoulos, Bates, Fisch, Lei, Schuster, "Conformal Risk
  Control", ICLR 2024: the first grid point with ``(n / (n + 1)) mean_i L_i + B / (n + 1) <= alpha``), the
  high-probability rule's ``ceil((n + 1)(1 - alpha))``-th smallest ``s_i``, and the Hoeffding-Bentkus and binomial
  p-values of Learn-then-Test, each written out here from its definition and compared on random tables with heavy ties.
- The guarantees themselves, exactly: both proofs hold conditionally on the multiset of the ``n + 1`` cases, so on
  *every* pool the leave-one-out mean loss (CRC) and share above ``tol`` (high probability) of the masks that
  :meth:`~monai_unc.metrics.conformal.ConformalRule.apply` draws are at most ``alpha`` (no Monte Carlo noise).
- :func:`quantile_edges` put an edge *on* a score when the two scores it splits are adjacent floats (their midpoint
  rounds to the lower one, which :func:`stratum_of` then sends to the upper stratum) and overflowed to an infinite
  edge for scores near the float64 maximum.
- :func:`fit_conformal_rules` counted a calibration case listed twice (``EvaluationConfig(calibration_cases=[...])``
  in Python; the command line refuses such a file) twice: ``n`` one too large, and the rule file it wrote was then
  refused as "edited or corrupted" at the end of the run.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from monai_unc.evaluation.conformal import fit_conformal_rules
from monai_unc.metrics.conformal import (
    conformal_case_state,
    crc_lambda,
    fit_conformal_rule,
    high_probability_lambda,
    quantile_edges,
    stratum_of,
)
from monai_unc.metrics.risk_control import binomial_pvalue, hoeffding_bentkus_pvalue
from monai_unc.products import ConformalMasks


def _monotone_tables(rng: np.random.Generator, count: int):
    """Random non-increasing loss tables ``(n, G)`` with ties (steps in tenths half the time), last column 0."""
    for _ in range(count):
        n, g = int(rng.integers(1, 30)), int(rng.integers(2, 16))
        inc = rng.random((n, g)) * (rng.random((n, g)) < 0.5)
        if rng.random() < 0.5:
            inc = np.round(inc, 1)
        losses = np.flip(np.cumsum(np.flip(inc, 1), 1), 1)
        losses = losses / max(float(losses.max()), 1e-12) * rng.random()
        losses[:, -1] = 0.0
        yield losses, float(rng.choice([0.05, 0.1, 0.2, 0.3, 0.5])), float(rng.choice([0.05, 0.1, 0.3]))


def test_crc_and_high_probability_rules_follow_the_papers_definitions():
    rng = np.random.default_rng(67)
    checked = 0
    for losses, alpha, tol in _monotone_tables(rng, 400):
        n, g = losses.shape
        # CRC: the first lambda with (n / (n + 1)) Rhat + B / (n + 1) <= alpha (B = 1), in exact rational arithmetic
        # for the tenths (the library's rounding allowance only matters at equality)
        passes = (n / (n + 1)) * losses.mean(axis=0) + 1 / (n + 1) <= alpha + 1e-12
        expected = int(np.argmax(passes)) if passes.any() else None
        try:
            got = crc_lambda(losses, alpha)
        except ValueError:
            got = None
        assert got == expected, (n, g, alpha)
        # high probability: s_i = the first index from which every loss is <= tol; the k-th smallest, k =
        # ceil((n + 1)(1 - alpha)), refused when k > n (the consema code indexes the 0-based list at k, one more)
        k = math.ceil(round((n + 1) * (1 - alpha), 9))
        s = sorted(next((j for j in range(g) if (losses[i, j:] <= tol).all()), g) for i in range(n))
        expected = None if k > n or s[k - 1] >= g else s[k - 1]
        try:
            got = high_probability_lambda(losses, tol, alpha)
        except ValueError:
            got = None
        assert got == expected, (n, alpha, tol)
        checked += expected is not None
    assert checked > 100  # most tables give a rule


def test_ltt_p_values_follow_their_definitions():
    rng = np.random.default_rng(670)
    for _ in range(200):
        n = int(rng.integers(1, 300))
        failures = int(rng.integers(0, n + 1))
        r, a = failures / n, float(rng.uniform(0.01, 0.99))
        # Bates et al. 2021: min(exp(-n h1(min(r, a), a)), e P(Bin(n, a) <= ceil(n r))), h1 the Bernoulli KL
        m = min(r, a)
        h1 = (m * math.log(m / a) if m > 0 else 0.0) + (1 - m) * math.log((1 - m) / (1 - a))
        hb = min(math.exp(-n * h1), math.e * stats.binom.cdf(failures, n, a), 1.0)
        assert hoeffding_bentkus_pvalue(r, n, a) == pytest.approx(hb, rel=1e-9, abs=1e-300)
        assert binomial_pvalue(r, n, a) == pytest.approx(stats.binom.cdf(failures, n, a), rel=1e-9, abs=1e-300)


def test_quantile_edges_never_lie_on_a_score():
    lo, hi = 1.0, float(np.nextafter(1.0, 2.0))  # adjacent floats: (lo + hi) / 2 rounds to lo
    edges = quantile_edges([lo, hi], 2)
    assert stratum_of([lo, hi], edges).tolist() == [0, 1]
    scores = [0.1, 0.2, lo, hi, 3.0, 4.0]
    assert np.bincount(stratum_of(scores, quantile_edges(scores, 2))).tolist() == [3, 3]
    # near the float64 maximum the sum overflowed: an infinite edge, refused by stratum_of
    big = [1.0e308, 1.5e308, 1.7e308, 1.79e308]
    edges = quantile_edges(big, 2)
    assert math.isfinite(edges[0]) and 1.5e308 < edges[0] < 1.7e308
    assert stratum_of(big, edges).tolist() == [0, 0, 1, 1]


def test_a_calibration_case_listed_twice_counts_once():
    rng = np.random.default_rng(6)
    states = {}
    for i in range(8):
        truth = rng.random((1, 40)) < 0.4
        p = np.clip(truth * 0.6 + rng.random((1, 40)) * 0.4, 0, 1)
        states[f"c{i}"] = {"outer": conformal_case_state(p, truth, activation="sigmoid", grid=16)}
    product = ConformalMasks({"outer": 0.2})
    cal = ["c0", "c1", "c2", "c3", "c4", "c0"]  # five cases, one listed twice
    rules, block = fit_conformal_rules(states, product, cal)
    once, _ = fit_conformal_rules(states, product, cal[:5])
    assert rules["outer"].task_rule("0").n == 5 and block["n_calibration"] == 5
    assert block["calibration"] == ["c0", "c1", "c2", "c3", "c4"]
    assert rules == once


def _pool(rng: np.random.Generator, count: int, shape: tuple[int, ...], classes: int):
    """``count`` small cases (softmax ``classes`` or one sigmoid region): blobs, blurred probabilities, and the edge
    cases of a cohort (a case without the structure, one filled with it, one whose prediction misses it)."""
    grids = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
    out = []
    for i in range(count):
        centre = [rng.uniform(1, s - 1) for s in shape]
        r = np.sqrt(sum((g - c) ** 2 for g, c in zip(grids, centre)))
        radius = rng.uniform(1.0, 3.0)
        truth = (r < radius).astype(np.int64)
        if classes == 3:
            truth[(r < radius) & (grids[0] < centre[0])] = 2
        logit = (radius + rng.normal(0, 0.7) - r) * rng.uniform(0.7, 2.5) + rng.normal(0, 0.8, shape)
        if i == 0:
            truth[:] = 0  # no true voxel
        elif i == 1:
            truth[:] = 1  # every voxel
            logit = logit + 3
        elif i == 2:
            logit = logit - 20  # the prediction misses the structure
        fg = 1 / (1 + np.exp(-logit))
        if classes == 3:
            split = np.where(grids[0] < centre[0], 0.7, 0.3)
            probs = np.stack([1 - fg, fg * split, fg * (1 - split)])
        else:
            probs, truth = fg[None], truth[None].astype(bool)
        out.append((probs, truth))
    return out


def _loss(mask: np.ndarray, truth: np.ndarray, side: str) -> float:
    """FNR (outer) or false-positive share (inner) of a mask; 0 when the truth (outer) or the mask (inner) is empty."""
    if side == "outer":
        return float((truth & ~mask).sum() / truth.sum()) if truth.any() else 0.0
    return float((mask & ~truth).sum() / mask.sum()) if mask.any() else 0.0


@pytest.mark.parametrize("family", ["threshold", "margin"])
@pytest.mark.parametrize("side", ["outer", "inner"])
def test_leave_one_out_guarantee_holds_exactly_on_every_pool(family, side):
    """The finite-sample guarantees, checked without Monte Carlo noise.

    Both proofs hold conditionally on the multiset of the ``n + 1`` cases (the new case is any one of them with equal
    probability): for *every* pool, fitting on the other ``n`` and applying the rule to the one left out gives a mean
    loss ``<= alpha`` (conformal risk control) and a share of cases above ``tol`` of at most ``alpha`` (high
    probability). The losses here are those of the masks :meth:`ConformalRule.apply` draws on the left-out case's
    volume (2D softmax with three classes, 3D sigmoid with anisotropic voxels), so the fit, the grid rounding, the
    trivial set past the margin grid and the apply are checked together.
    """
    rng = np.random.default_rng(67)
    alpha, tol = 0.2, 0.1
    grid = 32 if family == "threshold" else (2.0, 0.5)
    for shape, classes, spacing in (((9, 8), 3, (1.0, 1.0)), ((6, 7, 5), 1, (1.0, 0.7, 2.0))):
        act = "softmax" if classes == 3 else "sigmoid"
        pool = _pool(rng, 11, shape, classes)
        states = [conformal_case_state(p, y, family=family, side=side, activation=act, spacing=spacing, grid=grid)
                  for p, y in pool]
        per_task: dict[str, list[list[float]]] = {"expectation": [], "high_probability": []}
        for i, (probs, truth) in enumerate(pool):
            others = states[:i] + states[i + 1:]
            true_masks = np.stack([truth == c for c in range(classes)]) if classes == 3 else truth
            for method, t in (("expectation", None), ("high_probability", tol)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # the trivial mask, classes without true voxels
                    rule = fit_conformal_rule(others, alpha, tol=t)
                masks = rule.apply(probs, spacing=spacing)
                per_task[method].append([_loss(m, y, side) for m, y in zip(masks, true_masks)])
        crc = np.asarray(per_task["expectation"])  # (n + 1, tasks)
        hp = np.asarray(per_task["high_probability"])
        assert (crc.mean(axis=0) <= alpha + 1e-12).all(), (shape, crc.mean(axis=0))
        assert ((hp > tol).mean(axis=0) <= alpha).all(), (shape, (hp > tol).mean(axis=0))
        assert crc.max() > 0  # the check is not vacuous: some left-out case loses something
