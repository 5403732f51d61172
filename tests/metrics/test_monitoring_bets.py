"""Review 65: ``risk_bets`` as a numpy recurrence, equal bit for bit to the per-case loop it replaces."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monai_unc.metrics.monitoring import RISK_BET_CAP, risk_bets

_HALF_LIFE = 25  # the bets' half-life in labelled cases (the docstring of risk_bets)


def _loop_bets(x: np.ndarray, target: float, cap: float = RISK_BET_CAP) -> np.ndarray:
    """The per-case Python loop of ``risk_bets`` before review 65 (the reference), in float64 throughout."""
    decay = 0.5 ** (1 / _HALF_LIFE)
    w, s1 = 1.0, float(target)
    out = np.zeros(len(x))
    for n, xn in enumerate(np.asarray(x, dtype=np.float64).tolist()):
        if math.isnan(xn):
            continue
        out[n] = min(max((s1 / w - target) / (target * (1 - target)), 0.0), cap)
        w, s1 = decay * w + 1, decay * s1 + xn
    return out


@pytest.mark.parametrize("seed", range(6))
def test_bets_equal_the_loop_bit_for_bit_on_random_streams(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    x = (rng.uniform(size=n) < rng.uniform(0, 0.6)).astype(float) if seed % 2 else rng.beta(1.0, 5.0, size=n)
    x[rng.uniform(size=n) < 0.15] = np.nan  # unlabelled cases
    target, cap = float(rng.uniform(0.02, 0.5)), float(rng.uniform(0.1, 0.95))
    got, ref = risk_bets(x, target, cap), _loop_bets(x, target, cap)
    assert got.dtype == np.float64 and got.shape == ref.shape
    np.testing.assert_array_equal(got.view(np.int64), ref.view(np.int64))  # same bits, signs of zeros included


@pytest.mark.parametrize("x", [[], [np.nan], [np.nan, np.nan, 1.0], [1.0], [0.0, np.nan]])
def test_bets_of_short_and_unlabelled_streams_equal_the_loop(x):
    np.testing.assert_array_equal(risk_bets(np.array(x, dtype=float), 0.1), _loop_bets(np.array(x, dtype=float), 0.1))


def test_float32_target_gives_the_float64_bets():
    """Before review 65 a ``np.float32`` target made the running sums float32 (numpy 2 keeps the scalar's type), so
    the bets differed from those of ``float(target)`` by ~1e-7 relative."""
    rng = np.random.default_rng(3)
    x = rng.beta(1.0, 4.0, size=400)
    t32 = np.float32(0.15)
    np.testing.assert_array_equal(risk_bets(x, t32), risk_bets(x, float(t32)))
    np.testing.assert_array_equal(risk_bets(x, t32), _loop_bets(x, float(t32)))
