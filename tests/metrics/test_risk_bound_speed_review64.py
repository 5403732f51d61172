"""Review 64 (speed lead): ``risk_lower_bound`` without ``N x (resolution + 1)`` logarithms, with the same values."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.metrics import monitoring
from monai_unc.metrics.monitoring import _alarm_level, risk_bets, risk_lower_bound


def _full_grid(x: object, target: float, alpha: float, resolution: int = 2000) -> np.ndarray:
    """The formula before review 64: every case against every grid point, the largest rejected point."""
    x = np.asarray(x, dtype=float)
    keep = ~np.isnan(x)
    xs, lam = x[keep], risk_bets(x, target)[keep]
    grid = np.unique(np.concatenate([np.linspace(0.0, 1.0, resolution + 1), [target]]))
    log_k = np.cumsum(np.log1p(lam[:, None] * (xs[:, None] - grid[None, :])), axis=0)
    count = (log_k >= _alarm_level(alpha)).sum(axis=1)
    out = np.zeros(len(x))
    out[keep] = np.where(count > 0, grid[np.maximum(count - 1, 0)], 0.0)
    for n in range(1, len(out)):
        if not keep[n]:
            out[n] = out[n - 1]
    return out


def _stream(rng: np.random.Generator, kind: int, n: int) -> np.ndarray:
    if kind == 0:  # failures 0/1: ties everywhere
        return (rng.uniform(size=n) < rng.uniform(0.0, 0.7)).astype(float)
    if kind == 1:  # 1 - Dice
        return rng.uniform(size=n) ** rng.uniform(0.2, 3.0)
    if kind == 2:  # on the grid (ties with its points), 0 and 1 included
        return np.round(rng.uniform(size=n), 1)
    x = (rng.uniform(size=n) < 0.4).astype(float)  # unaudited cases (NaN), the first one too
    x[rng.uniform(size=n) < 0.25] = np.nan
    return x


@pytest.mark.parametrize("seed", range(4))
def test_same_bounds_as_the_full_grid(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for trial in range(40):
        x = _stream(rng, trial % 4, int(rng.integers(0, 90)))
        target = float(rng.choice([0.05, 0.1, 0.3, 0.5, 0.95]))
        alpha = float(rng.choice([1e-6, 0.05, 0.5, 0.999]))
        resolution = int(rng.choice([1, 2, 7, 50, 2000]))
        np.testing.assert_array_equal(risk_lower_bound(x, target, alpha, resolution=resolution),
                                      _full_grid(x, target, alpha, resolution), err_msg=f"{x!r} {target} {alpha}")


def test_edge_streams_same_as_the_full_grid() -> None:
    for x in ([], [np.nan], [np.nan, 1.0, 1.0], [1.0] * 40, [0.0] * 40, [1.0] * 20 + [0.0] * 40 + [1.0] * 10):
        for target in (0.1, 0.5):
            np.testing.assert_array_equal(risk_lower_bound(x, target, 0.05), _full_grid(x, target, 0.05))


def test_far_fewer_logarithms_than_cases_times_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    # a harmful shift: every case bets from the 60th on, and the bound climbs over a third of the grid
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(size=60) < 0.05, rng.uniform(size=540) < 0.5]).astype(float)
    expected = _full_grid(x, 0.1, 0.05)
    assert expected[-1] > 0.3
    evaluated = []
    log1p = np.log1p

    def counting(v: np.ndarray, *args: object, **kwargs: object) -> np.ndarray:
        evaluated.append(np.size(v))
        return log1p(v, *args, **kwargs)

    monkeypatch.setattr(monitoring.np, "log1p", counting)
    got = risk_lower_bound(x, 0.1, 0.05)
    monkeypatch.undo()
    np.testing.assert_array_equal(got, expected)
    assert sum(evaluated) < len(x) * 2001 / 10  # before review 64: len(x) x 2001
