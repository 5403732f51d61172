"""The certified referral rule's risk bound (``risk_lower_bound``) at clinical scale: the full grid vs review 64.

For each stream, in the same run:

- **full grid**: the formula before review 64, every audited case against every point of the 2001-point grid
  (``N x 2001`` logarithms, in the same column blocks of bounded memory);
- **risk_lower_bound**: cases bet 0 skipped (their sums are the previous case's), a coarse pass over every 44th grid
  point, then the points around each case's bound;
- **floor**: the bets (:func:`~monai_unc.metrics.monitoring.risk_bets`, one sequential pass that both need).

Then the bets themselves (review 65): the per-case Python loop before review 65 against ``risk_bets`` (a first-order
recurrence run by ``scipy.signal.lfilter``), their before/after ratio, the share of ``risk_lower_bound`` that each
would take, and the peak of the Python heap (``tracemalloc``, numpy's arrays included) of each.

The two bounds, and the two sets of bets, must be equal element for element (the script stops otherwise). Times are
CPU seconds of this process (robust to other jobs on the machine); the ratio of the full grid to the new one is printed
per stream.

    python benchmarks/bench_risk_bound.py                  # 2e5 audited cases
    python benchmarks/bench_risk_bound.py --cases 50000    # quicker
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monai_unc.metrics.monitoring import RISK_BET_CAP, _alarm_level, risk_bets, risk_lower_bound  # noqa: E402


def loop_bets(x: np.ndarray, target: float, cap: float = RISK_BET_CAP) -> np.ndarray:
    """``risk_bets`` before review 65: one Python iteration per case (the reference)."""
    decay = 0.5 ** (1 / 25)
    w, s1 = 1.0, float(target)
    out = np.zeros(len(x))
    for n, xn in enumerate(x.tolist()):
        if math.isnan(xn):
            continue
        out[n] = min(max((s1 / w - target) / (target * (1 - target)), 0.0), cap)
        w, s1 = decay * w + 1, decay * s1 + xn
    return out


def peak_mib(fn, *args) -> float:  # noqa: ANN001
    """The peak of the traced Python heap (numpy's buffers included) while ``fn(*args)`` runs, in MiB."""
    tracemalloc.start()
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def full_grid(x: np.ndarray, target: float, alpha: float, resolution: int = 2000) -> np.ndarray:
    """``risk_lower_bound`` before review 64 (the reference)."""
    keep = ~np.isnan(x)
    xs, lam = x[keep], risk_bets(x, target)[keep]
    grid = np.unique(np.concatenate([np.linspace(0.0, 1.0, resolution + 1), [target]]))
    level = _alarm_level(alpha)
    count = np.zeros(len(xs), dtype=np.int64)
    block = max(1, 4_000_000 // max(len(xs), 1))
    for start in range(0, len(grid), block):
        m = grid[start:start + block]
        count += (np.cumsum(np.log1p(lam[:, None] * (xs[:, None] - m[None, :])), axis=0) >= level).sum(axis=1)
    out = np.zeros(len(x))
    out[keep] = np.where(count > 0, grid[np.maximum(count - 1, 0)], 0.0)
    for n in range(1, len(out)):
        if not keep[n]:
            out[n] = out[n - 1]
    return out


def cpu(fn, *args):  # noqa: ANN001, ANN202
    t0 = time.process_time()
    out = fn(*args)
    return time.process_time() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    n = args.cases
    streams = {
        # in control (failure rate 5% < target 10%), then a harmful shift to 20% for the last fifth
        "shift at 80%": np.concatenate([rng.uniform(size=n - n // 5) < 0.05, rng.uniform(size=n // 5) < 0.2]),
        # the worst case for the new code: a failure rate of 50% from the start (every case bets)
        "50% throughout": rng.uniform(size=n) < 0.5,
        # 1 - Dice, continuous, around the target
        "1 - Dice": rng.beta(1.0, 9.0, size=n),
    }
    print(f"{n} audited cases, target 0.1, alpha 0.05, resolution 2000")
    for name, x in streams.items():
        x = x.astype(float)
        t_floor, _ = cpu(risk_bets, x, 0.1)
        t_old, old = cpu(full_grid, x, 0.1, 0.05)
        t_new, new = cpu(risk_lower_bound, x, 0.1, 0.05)
        if not np.array_equal(old, new):
            raise SystemExit(f"{name}: the bounds differ at {np.flatnonzero(old != new)[:5]}")
        print(f"{name:>15}: full grid {t_old:7.2f} s, risk_lower_bound {t_new:6.2f} s ({t_old / t_new:5.1f}x faster), "
              f"floor {t_floor:5.2f} s (ratio to the floor: full grid {t_old / t_floor:6.1f}, new "
              f"{t_new / t_floor:5.1f}); final bound {new[-1]:.4f}, identical")
    print("risk_bets: the per-case loop (before review 65) vs the lfilter recurrence, best of 3 CPU times")
    for name, x in streams.items():
        x = x.astype(float)
        x[rng.uniform(size=n) < 0.1] = np.nan  # some cases not audited
        t_loop, ref = min((cpu(loop_bets, x, 0.1) for _ in range(3)), key=lambda r: r[0])
        t_rec, got = min((cpu(risk_bets, x, 0.1) for _ in range(3)), key=lambda r: r[0])
        if not np.array_equal(ref.view(np.int64), got.view(np.int64)):
            raise SystemExit(f"{name}: the bets differ at {np.flatnonzero(ref != got)[:5]}")
        t_bound, _ = cpu(risk_lower_bound, x, 0.1, 0.05)
        print(f"{name:>15} (10% NaN): loop {t_loop * 1e3:7.1f} ms, risk_bets {t_rec * 1e3:6.1f} ms "
              f"({t_loop / t_rec:5.1f}x faster); risk_lower_bound {t_bound * 1e3:6.1f} ms, of which the bets now "
              f"{100 * t_rec / t_bound:4.1f} % (the loop would be {100 * t_loop / (t_bound - t_rec + t_loop):4.1f} %); "
              f"peak heap loop {peak_mib(loop_bets, x, 0.1):5.1f} MiB, risk_bets {peak_mib(risk_bets, x, 0.1):5.1f} "
              "MiB; identical bits")


if __name__ == "__main__":
    main()
