"""Coverage of the conformal interval of the expected Dice on the toy cohort (issue #40, item 6).

The cohort is :func:`monai_unc.data.cohorts.write_toy_cohort` (120 cases of 16^3 voxels, shifts cycled
``none, none, intensity, shape``), evaluated once by :func:`monai_unc.evaluation.run_evaluate`; the test reads
``expected_dice`` and ``dice`` from ``metrics.csv`` and splits the 60 in-distribution (``none``) cases 500 times at
random into 30 calibration and 30 held-out cases. The shifted cases get other stand-in predictions (a wider
smoothing and a larger scale), so their residuals ``dice - expected_dice`` are not exchangeable with the others':
they stay out of the guarantee and their coverage is only reported.

Why the bounds hold. For a fixed pool of cases, a uniformly random split makes calibration and held-out cases
exchangeable, so the expected held-out coverage over the splits is at least ``1 - alpha`` and, with distinct
residuals (checked), at most ``1 - alpha + 1 / (n_cal + 1)`` (Lei et al. 2018): exactly, for this pool. The only
error left is the Monte Carlo error of 500 splits, independent given the pool: ``se = sd(coverage per split) /
sqrt(500)``. The test asserts the mean coverage within 3 se of ``[1 - alpha, 1 - alpha + 1 / (n_cal + 1)]``; it also
prints the looser binomial se of one split, ``sqrt(alpha (1 - alpha) / n_held)``, which is the spread expected across
cohorts of this size.

Run ``pytest tests/validation/test_expected_dice_interval.py -s`` for the numbers (docs/validation.md).
"""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.metrics.quality import conformal_interval

ALPHA = 0.1
N_SPLITS = 500
N_CASES = 120
SHAPE = (16, 16, 16)


def _cohort(tmp_path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Write and evaluate the toy cohort.

    Args:
        tmp_path: a scratch folder.

    Returns:
        ``(expected_dice, dice, shift)`` per case, in ``metrics.csv`` order.
    """
    paths = write_toy_cohort(tmp_path / "cohort", n_cases=N_CASES, shape=SHAPE, seed=0)
    _, _, out = run_evaluate(paths["labels"], paths["predictions"], tmp_path / "eval",
                             EvaluationConfig(spatial=False), resume=False)
    with open(paths["shifts"], newline="") as f:
        shift = {r["case"]: r["shift"] for r in csv.DictReader(f)}
    with open(out["metrics"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == N_CASES
    est = np.array([float(r["expected_dice"]) for r in rows])
    dice = np.array([float(r["dice"]) for r in rows])
    return est, dice, np.array([shift[r["case"]] for r in rows])


@pytest.mark.slow
def test_expected_dice_interval_coverage_on_toy_cohort(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    est, dice, shift = _cohort(tmp_path)
    assert np.isfinite(est).all() and np.isfinite(dice).all()
    iid = shift == "none"
    e, d = est[iid], dice[iid]
    n = int(iid.sum())
    n_cal = n // 2
    n_held = n - n_cal
    assert n == 60
    assert np.unique(np.abs(d - e)).size == n  # distinct residuals: the upper bound applies

    rng = np.random.default_rng(0)
    cover = np.empty(N_SPLITS)
    width = np.empty(N_SPLITS)
    quantile = np.empty(N_SPLITS)
    shifted = shift[~iid]
    kinds = sorted(set(shifted))
    cover_shifted = np.empty((N_SPLITS, len(kinds)))
    for s in range(N_SPLITS):
        perm = rng.permutation(n)
        cal, held = perm[:n_cal], perm[n_cal:]
        iv = conformal_interval(e[held], e[cal], d[cal], alpha=ALPHA)
        assert iv.n == n_cal
        cover[s] = np.mean((iv.low <= d[held]) & (d[held] <= iv.high))
        width[s] = np.mean(iv.high - iv.low)
        quantile[s] = iv.quantile
        ivs = conformal_interval(est[~iid], e[cal], d[cal], alpha=ALPHA)
        hit = (ivs.low <= dice[~iid]) & (dice[~iid] <= ivs.high)
        cover_shifted[s] = [hit[shifted == k].mean() for k in kinds]

    mean = float(cover.mean())
    se = float(cover.std(ddof=1) / math.sqrt(N_SPLITS))
    se_binomial = math.sqrt(ALPHA * (1 - ALPHA) / n_held)
    upper = 1 - ALPHA + 1 / (n_cal + 1)
    print(f"\nexpected-Dice interval, alpha={ALPHA}: {n} in-distribution toy cases, {N_SPLITS} splits "
          f"{n_cal}/{n_held}")
    print(f"coverage {mean:.4f} (target [{1 - ALPHA:.3f}, {upper:.3f}], Monte Carlo se {se:.4f}; "
          f"binomial se of one split {se_binomial:.4f}); per split min {cover.min():.3f} max {cover.max():.3f}")
    print(f"mean width {width.mean():.4f} (after clipping to [0, 1]), mean quantile {quantile.mean():.4f}; "
          f"|dice - expected_dice| mean {np.abs(d - e).mean():.4f}, expected_dice mean {e.mean():.4f}, "
          f"dice mean {d.mean():.4f}")
    print(f"shifted cases (not exchangeable, not asserted): {int((~iid).sum())} cases, coverage "
          + ", ".join(f"{k} {v:.3f}" for k, v in zip(kinds, cover_shifted.mean(axis=0))))

    assert 1 - ALPHA - 3 * se <= mean <= upper + 3 * se
    assert 1 - ALPHA - 3 * se_binomial <= mean <= upper + 3 * se_binomial  # the looser check the issue asked for
    assert 0 < width.mean() < 1
