"""Memory and time of the SSN head at 96^3 voxels x 3 classes x rank 10, against torch's stock distribution.

    python benchmarks/bench_ssn.py [--size 96] [--classes 3] [--rank 10] [--features 16] [--mc 20] [--repeats 2]

The head reads a random feature map ``(1, F, S, S, S)``; the backbone is not part of the measurement (it is the same
for every contender). Each contender runs in its own single-threaded subprocess; peak working memory is the peak RSS
(``VmHWM``, reset through ``/proc/self/clear_refs`` after the inputs exist) minus the RSS just before the call.

- ``train ours``: raw outputs -> ``SSNDistribution`` -> ``SSNLoss(M)`` -> backward (one training step of the head).
- ``train stock``: the same with ``torch.distributions.LowRankMultivariateNormal`` built from the same parameters
  (it factorises the R x R capacitance on construction; its ``rsample`` broadcasts the factor over the sample
  dimension, which copies it once per sample).
- ``draws ours`` / ``draws stock``: ``rsample((M,))`` under ``no_grad``.
- ``infer ours``: what ``SSNSource(M)`` does per window: the distribution once, then M draws one at a time, each
  softmaxed into running sums (constant memory in M).
- ``mean only``: the eval-mode forward (the mean convolution alone), i.e. the head inside a deterministic inferer.

- ``floor``: the bare forward passes of M samples (the distribution once, then M draws of the logits, discarded):
  what any sampling inferer on this head must compute; the script prints the inference contenders as a ratio to
  it (``benchmarks/_floor.py``).

A full covariance over all logits is (C N)^2 entries: printed as a figure, it cannot be allocated.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _floor import floor_line, peak_mib, reset_peak

MODES = ("mean_only", "infer_ours", "draws_ours", "draws_stock", "train_ours", "train_stock", "floor")



def worker(mode: str, size: int, classes: int, rank: int, features: int, mc: int, repeats: int) -> dict:
    import torch
    from torch.distributions import LowRankMultivariateNormal

    from monai_unc.networks import SSNHead, SSNLoss, lowrank_distribution

    torch.set_num_threads(1)
    torch.manual_seed(0)
    head = SSNHead(features, classes, rank=rank, spatial_dims=3)
    feats = torch.randn(1, features, size, size, size)
    target = torch.randint(0, classes, (1, size, size, size))
    loss_fn = SSNLoss(mc)

    def run() -> float:
        if mode == "mean_only":
            with torch.no_grad():
                return float(head.eval()(feats).sum())
        if mode == "infer_ours":
            with torch.no_grad():
                d = head.distribution(feats)
                total = None
                for _ in range(mc):
                    p = torch.softmax(d.logits(), 1)
                    total = p if total is None else total + p
                return float(total.sum())
        if mode == "floor":  # the bare forward passes of M samples: the head once, then M draws, nothing else
            with torch.no_grad():
                d = head.distribution(feats)
                for _ in range(mc):
                    d.logits()
                return 0.0
        if mode in ("draws_ours", "draws_stock"):
            with torch.no_grad():
                d = head.distribution(feats)
                if mode == "draws_stock":
                    d = LowRankMultivariateNormal(d.loc, d.cov_factor, d.cov_diag)
                return float(d.rsample((mc,)).sum())
        head.zero_grad(set_to_none=True)
        if mode == "train_ours":
            d = head.distribution(feats)
        else:
            params = head.params(feats)
            ours = lowrank_distribution(*params)
            d = LowRankMultivariateNormal(ours.loc, ours.cov_factor, ours.cov_diag)
        loss = loss_fn(d, target)
        loss.backward()
        return float(loss.detach())

    run()  # warm-up (allocator, kernels)
    rss0 = reset_peak()
    value = run()
    peak = peak_mib(maxrss_fallback=True) - rss0
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return {"mode": mode, "peak_mib": peak, "wall_s": best_wall, "cpu_s": best_cpu, "value": value}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--rank", type=int, default=10)
    ap.add_argument("--features", type=int, default=16)
    ap.add_argument("--mc", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    common = [str(v) for v in (args.size, args.classes, args.rank, args.features, args.mc, args.repeats)]
    if args.worker:
        print(json.dumps(worker(args.worker, *map(int, common))))
        return
    n = args.size**3
    e = args.classes * n
    print(f"S = {args.size}^3 = {n} voxels, C = {args.classes}, R = {args.rank}, F = {args.features}, "
          f"M = {args.mc}, 1 thread")
    print(f"factor P: {args.rank * e / 1e6:.1f} M floats = {args.rank * e * 4 / 2**20:.0f} MiB (float32); "
          f"mean + diagonal {2 * e * 4 / 2**20:.0f} MiB")
    print(f"a full covariance (C N)^2 = {e**2:.2e} entries = {e**2 * 4 / 2**40:.1f} TiB in float32 "
          f"({e**2 * 4 / (args.rank * e * 4):.0f}x the factor): cannot be allocated")
    results = {}
    for mode in MODES:
        cmd = [sys.executable, __file__, "--size", common[0], "--classes", common[1], "--rank", common[2],
               "--features", common[3], "--mc", common[4], "--repeats", common[5], "--worker", mode]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
        results[mode] = r = json.loads(out.strip().splitlines()[-1])
        print(f"{mode:12s} peak working memory {r['peak_mib']:8.0f} MiB   wall {r['wall_s']:6.2f} s   "
              f"CPU {r['cpu_s']:6.2f} s", flush=True)
    print()
    for a, b in (("train_stock", "train_ours"), ("draws_stock", "draws_ours")):
        ra, rb = results[a], results[b]
        print(f"{a} / {b}: memory {ra['peak_mib'] / rb['peak_mib']:.2f}x, CPU time {ra['cpu_s'] / rb['cpu_s']:.2f}x")
    floor = f"the head once + {args.mc} bare draws"
    for m in ("infer_ours", "draws_ours", "draws_stock"):
        print(floor_line(f"{m}, CPU", results[m]["cpu_s"], results["floor"]["cpu_s"], floor))
    t, s = results["train_ours"], results["train_stock"]
    if abs(t["value"] - s["value"]) > 1e-3 * abs(t["value"]):
        print(f"WARNING: losses differ: {t['value']} vs {s['value']}")


if __name__ == "__main__":
    main()
