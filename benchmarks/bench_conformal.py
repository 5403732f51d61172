"""Conformal masks: fitting in one pass (per-case histograms, then fit) against a brute-force grid search, in one run.

    python benchmarks/bench_conformal.py            # 100 cases of 128^3 x 3 classes
    python benchmarks/bench_conformal.py --small    # 20 cases of 48^3 (a quick run)

Workload: synthetic cases (two spheres, classes 1 and 2, on background 0; the network's spheres are shifted by a
few voxels and its logits are a sharpness varying by case times a signed distance plus Gaussian noise; float32
softmax probabilities, uint8 label maps), outer masks of the threshold family ``C = {p >= 1 - lambda}``,
conformal risk control of the FNR at ``alpha`` per class (one-vs-rest, the three classes).

Contenders, on the same cohort held in memory (generating it is not timed):

- **one pass**: ``conformal_case_state`` per case (histograms of the grid index of every voxel), then
  ``fit_conformal_rule``;
- **grid search** (brute force): for ``lambda_j``, ``j = 0, 1, ...``, the FNR of every case and class computed on
  the full volumes, ``(n * mean + 1) / (n + 1) <= alpha`` checked, stopping per class at the first ``j`` that
  passes (one pass over the cohort per grid point visited);
- **bisection** (a brute force that uses the monotonicity of the FNR): the same check at ``log2(grid)`` points.

The brute force runs on a grid of ``--bins``: 2^8 by default, so that the scan over 100 cases of 128^3 ends in
minutes (the one-pass path costs the same at the default 2^12 bins, timed too; the scan would visit 16x more grid
points); 2^12, the default grid, with ``--small``.

The floor (``benchmarks/_floor.py``): one read of the cohort held in memory (every probability and label summed
once in its own dtype), timed in the same run; the one pass is printed as a ratio to it.

Peak memory of the one-pass path (``tracemalloc``: every numpy buffer) with the cases generated one at a time, for
25, 50 and 100 cases (``--small``: 10, 15, 20): it grows only by the states (``(classes, bins + 2)`` int64 twice a
case), not by the volumes; the brute force needs the whole cohort in memory (or a read of it per grid point).
"""

from __future__ import annotations

import argparse
import platform
import time
import tracemalloc

import numpy as np
from _floor import floor_line, one_read, time_best

from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule


def make_case(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """One synthetic case: float32 softmax probabilities ``(3, n, n, n)`` and a uint8 label map ``(n, n, n)``."""
    rng = np.random.default_rng(seed)
    ax = np.arange(n, dtype=np.float32)
    label = np.zeros((n, n, n), dtype=np.uint8)
    logits = np.zeros((3, n, n, n), dtype=np.float32)
    sharp = np.float32(rng.uniform(0.4, 1.5))
    for k, radius in ((1, 0.18 * n), (2, 0.1 * n)):
        centre = rng.uniform(0.3 * n, 0.7 * n, size=3).astype(np.float32)
        shift = rng.normal(0, 0.015 * n, size=3).astype(np.float32)
        for c, target in ((centre, True), (centre + shift, False)):
            d2 = (ax - c[0])[:, None, None] ** 2 + (ax - c[1])[None, :, None] ** 2 + (ax - c[2])[None, None, :] ** 2
            signed = np.float32(radius) - np.sqrt(d2)
            if target:
                label[signed >= 0] = k
            else:
                logits[k] = sharp * signed
    logits += rng.standard_normal(logits.shape, dtype=np.float32) * np.float32(1.0)
    logits -= logits.max(axis=0)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=0)
    return logits, label


def one_pass(cohort, alpha: float, bins: int):
    states = [conformal_case_state(p, y, grid=bins) for p, y in cohort]
    return fit_conformal_rule(states, alpha)


def _passes(cohort, classes, bins, alpha, j) -> np.ndarray:
    """Whether ``(sum_i FNR_i(lambda_j) + 1) / (n + 1) <= alpha`` for each class, computed on the full volumes."""
    n = len(cohort)
    t = np.float32(1.0 - j / bins)
    total = np.zeros(len(classes))
    for p, y in cohort:
        for ci, k in enumerate(classes):
            truth = y == k
            size = np.count_nonzero(truth)
            if size:
                total[ci] += np.count_nonzero(truth & (p[k] < t)) / size
    return total + 1.0 <= alpha * (n + 1)


def grid_search(cohort, alpha: float, bins: int) -> tuple[list[float], int]:
    classes = list(range(cohort[0][0].shape[0]))
    found: dict[int, float] = {}
    passes = 0
    for j in range(bins + 1):
        todo = [k for k in classes if k not in found]
        if not todo:
            break
        ok = _passes(cohort, todo, bins, alpha, j)
        passes += 1
        for k, good in zip(todo, ok):
            if good:
                found[k] = j / bins
    return [found[k] for k in classes], passes


def bisection(cohort, alpha: float, bins: int) -> tuple[list[float], int]:
    out, passes = [], 0
    for k in range(cohort[0][0].shape[0]):
        lo, hi = 0, bins  # the condition holds at hi (FNR 0 at lambda = 1)
        if _passes(cohort, [k], bins, alpha, 0)[0]:
            hi = 0
        passes += 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            passes += 1
            if _passes(cohort, [k], bins, alpha, mid)[0]:
                hi = mid
            else:
                lo = mid
        out.append(hi / bins)
    return out, passes


def peak_one_pass(n_cases: int, size: int, alpha: float, bins: int) -> tuple[float, float]:
    """Peak traced memory (MiB) of generating the cases one at a time, computing their states, then fitting."""
    tracemalloc.start()
    t0 = time.perf_counter()
    states = []
    for i in range(n_cases):
        p, y = make_case(1000 + i, size)
        states.append(conformal_case_state(p, y, grid=bins))
        del p, y
    fit_conformal_rule(states, alpha)
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return peak, elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="20 cases of 48^3 (memory runs: 10, 15, 20)")
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--bins", type=int, default=None,
                    help="grid of the comparison, a power of two (default 2^8; 2^12, the default grid, with --small)")
    ap.add_argument("--skip-memory", action="store_true", help="leave out the peak-memory runs")
    args = ap.parse_args()
    if args.bins is None:
        args.bins = 4096 if args.small else 256
    n_cases, size = (20, 48) if args.small else (100, 128)
    memory_runs = (10, 15, 20) if args.small else (25, 50, 100)
    print(f"{platform.machine()}, numpy {np.__version__}; {n_cases} cases of {size}^3 x 3 classes, alpha={args.alpha}")

    t0 = time.perf_counter()
    cohort = [make_case(i, size) for i in range(n_cases)]
    print(f"generated the cohort in {time.perf_counter() - t0:.1f} s "
          f"({sum(p.nbytes + y.nbytes for p, y in cohort) / 2**20:.0f} MiB in memory)")

    t0 = time.perf_counter()
    rule = one_pass(cohort, args.alpha, args.bins)
    t_one = time.perf_counter() - t0
    ours = [rule.lambda_hat(str(k)) for k in range(3)]
    print(f"one pass, {args.bins:4d} bins: {t_one:8.2f} s  lambda_hat {ours}")
    if args.bins != 4096:
        t0 = time.perf_counter()
        rule_fine = one_pass(cohort, args.alpha, 4096)
        t_fine = time.perf_counter() - t0
        print(f"one pass, 4096 bins: {t_fine:8.2f} s  lambda_hat {[rule_fine.lambda_hat(str(k)) for k in range(3)]}")

    # the floor: one read of the cohort (every probability and label once); a fit must look at every voxel
    t_read = time_best(one_read(*(a for case in cohort for a in case)), 3)[0]
    print(floor_line(f"one pass, {args.bins} bins", t_one, t_read, "one read of the cohort"))
    if args.bins != 4096:
        print(floor_line("one pass, 4096 bins", t_fine, t_read, "one read of the cohort"))

    t0 = time.perf_counter()
    bis, bis_passes = bisection(cohort, args.alpha, args.bins)
    t_bis = time.perf_counter() - t0
    print(f"bisection:           {t_bis:8.2f} s  lambda_hat {bis}  ({bis_passes} passes over the cohort); "
          f"one pass is {t_bis / t_one:.1f}x faster; equal: {bis == ours}")
    t0 = time.perf_counter()
    scan, scan_passes = grid_search(cohort, args.alpha, args.bins)
    t_scan = time.perf_counter() - t0
    print(f"grid search:         {t_scan:8.2f} s  lambda_hat {scan}  ({scan_passes} passes over the cohort); "
          f"one pass is {t_scan / t_one:.1f}x faster (target >= 20x); equal: {scan == ours}")
    del cohort

    for n in () if args.skip_memory else memory_runs:
        peak, elapsed = peak_one_pass(n, size, args.alpha, args.bins)
        print(f"one pass, cases generated one at a time: {n:4d} cases  peak {peak:7.1f} MiB  ({elapsed:.1f} s)")
    print(f"one state (3 classes): {2 * 3 * (args.bins + 2) * 8 / 1024:.1f} KiB at {args.bins} bins; one case's "
          f"probabilities: {3 * size**3 * 4 / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
