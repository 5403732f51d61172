"""Streaming MC dropout vs stack-then-reduce: peak memory and the time overhead of the statistics.

    python benchmarks/bench_inferers.py [--size 96] [--samples 2 30] [--repeats 2]

Every contender runs in its own subprocess on a 1x1xSxSxS input with the example network architecture
(MONAI UNet 16-32-64-128, dropout 0.1, 3 classes). Peak memory is the process's peak RSS
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) minus its RSS just before the measured call, i.e. the working
memory of one inference (activations + statistics or stacked samples). Times are the best of ``--repeats``.

- ``stream``: ``MCDropoutInferer`` (SampleStats, float64 sums, all six measures).
- ``stack``: the naive approach: stack N softmax volumes, then compute PE / EE / MI / variance from the stack.
- ``bare``: N forward passes with dropout on and nothing else (the floor for any MC method: every sample needs
  its forward pass); the script prints the other two as a ratio to it (``benchmarks/_floor.py``).

Timing runs the three contenders interleaved in one single-threaded process (best of ``--repeats`` each) and
reports process CPU time next to wall time: on a shared machine CPU time of one thread is the robust measure of
the work done, wall time the one users feel on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from _floor import floor_line


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() // 1024


def worker(mode: str, n: int, size: int, repeats: int) -> dict:
    import torch

    from monai_unc import measures
    from monai_unc.data.model import build_example_network
    from monai_unc.inferers import MCDropoutInferer, enable_mc_dropout

    torch.manual_seed(0)
    net = build_example_network().eval()
    x = torch.randn(1, 1, size, size, size)

    def run():
        with torch.no_grad():
            if mode == "stream":
                return MCDropoutInferer(num_samples=n, seed=0)(x, net)
            with enable_mc_dropout(net):
                if mode == "bare":
                    for _ in range(n):
                        net(x)
                    return None
                s = torch.stack([torch.softmax(net(x), 1) for _ in range(n)])
                return {
                    "pred": s.mean(0),
                    "predictive_entropy": measures.predictive_entropy(s, validate=False),
                    "expected_entropy": measures.expected_entropy(s, validate=False),
                    "mutual_information": measures.mutual_information(s, validate=False),
                    "variance": measures.variance(s, validate=False),
                }

    if mode == "timing":
        # contenders alternate in one process, so that load from other processes hits them alike
        torch.set_num_threads(1)
        times = {m: [] for m in ("bare", "stream", "stack")}
        cpu = {m: [] for m in times}
        for _ in range(repeats):
            for m in times:
                mode = m
                t0, c0 = time.perf_counter(), time.process_time()
                run()
                times[m].append(time.perf_counter() - t0)
                cpu[m].append(time.process_time() - c0)
        return {"mode": "timing", "n": n, "seconds": {m: min(v) for m, v in times.items()},
                "cpu_seconds": {m: min(v) for m, v in cpu.items()}, "threads": torch.get_num_threads()}
    rss0 = _rss_kib()
    out = run()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    del out
    return {"mode": mode, "n": n, "peak_mib": (peak - rss0) / 1024, "threads": torch.get_num_threads()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--samples", type=int, nargs=2, default=(2, 30))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]), args.size, args.repeats)))
        return
    results = {}
    lo, hi = args.samples

    def launch(mode: str, n: int) -> dict:
        cmd = [sys.executable, __file__, "--size", str(args.size), "--repeats", str(args.repeats),
               "--worker", mode, str(n)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    for mode, n in [("stream", lo), ("stream", hi), ("stack", lo), ("stack", hi), ("bare", hi)]:
        results[(mode, n)] = res = launch(mode, n)
        print(f"{mode:6s} N={n:3d}  peak working memory {res['peak_mib']:8.1f} MiB", flush=True)
    res = launch("timing", hi)
    timing, cpu = res["seconds"], res["cpu_seconds"]
    for m, t in timing.items():
        print(f"{m:6s} N={hi:3d}  wall {t:7.2f} s  CPU {cpu[m]:7.2f} s (1 thread, best of {args.repeats}, interleaved)")
    s_lo, s_hi = results[("stream", lo)], results[("stream", hi)]
    k_lo, k_hi = results[("stack", lo)], results[("stack", hi)]
    print()
    print(f"input 1x1x{args.size}^3, example UNet, torch threads {s_hi['threads']}")
    print(f"streaming memory ratio N={hi}/N={lo}: {s_hi['peak_mib'] / s_lo['peak_mib']:.2f}x (target <= 1.25x)")
    print(f"stack-then-reduce memory ratio N={hi}/N={lo}: {k_hi['peak_mib'] / k_lo['peak_mib']:.2f}x")
    print(f"stack / stream memory at N={hi}: {k_hi['peak_mib'] / s_hi['peak_mib']:.2f}x")
    for label, t in (("CPU time", cpu), ("wall time", timing)):
        print(f"statistics overhead over {hi} bare forward passes ({label}): "
              f"{100 * (t['stream'] / t['bare'] - 1):.1f} % (target <= 10 %); "
              f"stack-then-reduce: {100 * (t['stack'] / t['bare'] - 1):.1f} %")
    floor = f"{hi} bare forward passes"
    for m in ("stream", "stack"):
        print(floor_line(f"{m}, CPU", cpu[m], cpu["bare"], floor))


if __name__ == "__main__":
    main()
