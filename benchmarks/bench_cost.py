"""What N MC-dropout samples cost next to one stock MONAI pass: shared passes vs full passes vs their limit.

    python benchmarks/bench_cost.py [--size 64] [--roi 48] [--features 8 8 16 32 64 8] [--samples 30]
                                    [--sw-batch 2] [--device cpu] [--memory]

One network (MONAI ``BasicUNet`` with ``--features``, 3 classes), one input ``1x1xSxSxS``, one
``SlidingWindowInferer(roi, sw_batch_size, overlap=0.25)``. For each dropout placement (``add_dropout(after=...)``:
``auto`` = after every encoder and decoder stage, ``decoder`` = the decoder stages only, ``last`` = the decoder
stage next to the output), in the same process and interleaved:

- ``stock``: one stock MONAI pass, ``softmax(SlidingWindowInferer(x, net))``, dropout off: the unit of every ratio;
- ``shared``: ``MCDropoutInferer(num_samples=N)`` with its defaults (shared passes, automatic sample batches);
- ``full``: the same with ``share_passes=False`` (one full pass per sample, what the inferer did before);
- ``limit``: the stochastic part of one pass, measured window by window as a replay of one sample
  (``SharedPasses.replay(k=1)``) after a trace: ``limit = stock + (N - 1) x stochastic part`` (the shared part once
  plus N times the stochastic part), the least any implementation that runs each sample's stochastic part can do.

Times are the best of ``--repeats`` (wall and, on the CPU, process CPU time: on a shared machine CPU time of one
thread is the robust measure). ``--memory`` also runs every mode with N and with 2 samples in its own subprocess
and prints the ratio of the peak working memories (RSS on the CPU, ``torch.cuda.max_memory_allocated`` on a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _floor import peak_mib, reset_peak

PLACEMENTS = ("auto", "decoder", "last")


def _setup(args: argparse.Namespace, placement: str):
    import torch
    from monai.inferers import SlidingWindowInferer
    from monai.networks.nets import BasicUNet

    from monai_unc.inferers import add_dropout

    torch.manual_seed(0)
    dev = torch.device(args.device)
    net = BasicUNet(3, 1, 3, features=tuple(args.features)).eval().to(dev)
    add_dropout(net, p=0.1, after=placement)
    x = torch.randn(1, 1, args.size, args.size, args.size, device=dev)
    sw = SlidingWindowInferer([args.roi] * 3, sw_batch_size=args.sw_batch, overlap=0.25)
    return net, x, sw


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_mode(mode: str, net, x, sw, n: int, device: str) -> tuple[float, float]:
    """Run one contender once; returns the (wall, CPU) seconds of the stochastic part for ``limit``, else 0."""
    import torch

    from monai_unc.inferers import MCDropoutInferer, enable_mc_dropout
    from monai_unc.networks.shared import SharedPasses

    with torch.no_grad():
        if mode == "stock":
            torch.softmax(sw(x, net), 1)
            return 0.0, 0.0
        if mode in ("shared", "full"):
            MCDropoutInferer(num_samples=n, base_inferer=sw, seed=0, share_passes=mode == "shared")(x, net)
            return 0.0, 0.0
        spent = [0.0, 0.0]

        def window(t: torch.Tensor) -> torch.Tensor:
            passes = SharedPasses(net)
            out = passes.trace(net, t)
            _sync(device)
            t0, c0 = time.perf_counter(), time.process_time()
            passes.replay(net, t, 1)
            _sync(device)
            spent[0] += time.perf_counter() - t0
            spent[1] += time.process_time() - c0
            return out

        with enable_mc_dropout(net):
            sw(x, window)
        return spent[0], spent[1]


def timing(args: argparse.Namespace) -> dict:
    import torch

    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    out: dict = {"threads": torch.get_num_threads(), "placements": {}}
    for placement in PLACEMENTS:
        net, x, sw = _setup(args, placement)
        run_mode("stock", net, x, sw, args.samples, args.device)  # warm-up
        wall = {m: [] for m in ("stock", "shared", "full", "limit")}
        cpu = {m: [] for m in wall}
        stoch = []
        for _ in range(args.repeats):
            for m in wall:
                if m == "full" and args.skip_full and placement != "auto":
                    continue
                _sync(args.device)
                t0, c0 = time.perf_counter(), time.process_time()
                s = run_mode(m, net, x, sw, args.samples, args.device)
                _sync(args.device)
                wall[m].append(time.perf_counter() - t0)
                cpu[m].append(time.process_time() - c0)
                if m == "limit":
                    stoch.append(s)
        best = {m: min(v) for m, v in wall.items() if v}
        best_cpu = {m: min(v) for m, v in cpu.items() if v}
        out["placements"][placement] = {"wall": best, "cpu": best_cpu, "stochastic_wall": min(s[0] for s in stoch),
                                        "stochastic_cpu": min(s[1] for s in stoch)}
    return out


def memory(args: argparse.Namespace, mode: str, placement: str, n: int) -> dict:
    import torch

    net, x, sw = _setup(args, placement)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    # load every code path first on a small input, so that the peak below is the case's own
    run_mode(mode, net, x[..., : args.roi, : args.roi, : args.roi], sw, 2, args.device)
    rss0 = reset_peak()
    run_mode(mode, net, x, sw, n, args.device)
    if cuda:
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = peak_mib() - rss0
    return {"peak_mib": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--roi", type=int, default=48)
    ap.add_argument("--features", type=int, nargs=6, default=(8, 8, 16, 32, 64, 8))
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--sw-batch", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--skip-full", action="store_true", help="time the 30 full passes for 'auto' only")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--memory-only", action="store_true", help="the memory part of --memory alone")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        mode, placement, n = args.worker
        print(json.dumps(memory(args, mode, placement, int(n))))
        return
    import torch

    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    if args.memory_only:
        args.memory = True
    res = timing(args) if not args.memory_only else {"threads": torch.get_num_threads(), "placements": {}}
    n = args.samples
    print(f"BasicUNet features {tuple(args.features)}, input 1x1x{args.size}^3, roi {args.roi}^3, sw_batch_size "
          f"{args.sw_batch}, overlap 0.25, N = {n}, device {name}, torch threads {res['threads']}")
    print("ratios to one stock MONAI pass (same network, same sliding window), "
          + ("process CPU time" if args.device == "cpu" else "wall time"))
    if res["placements"]:
        print(f"{'dropout':10s} {'shared (ours)':>14s} {'limit':>8s} {'full N passes':>14s} {'stock s':>9s}")
    for placement, r in res["placements"].items():
        t = r["cpu"] if args.device == "cpu" else r["wall"]
        stock = t["stock"]
        stoch = r["stochastic_wall"]  # seconds of one sample's stochastic part
        limit = stock + (n - 1) * (r["stochastic_cpu"] if args.device == "cpu" else stoch)
        full = f"{t['full'] / stock:13.2f}x" if "full" in t else f"{'-':>14s}"
        print(f"{placement:10s} {t['shared'] / stock:13.2f}x {limit / stock:7.2f}x {full} {stock:9.3f}")
        print(f"  (wall: shared {r['wall']['shared'] / r['wall']['stock']:.2f}x, limit "
              f"{(r['wall']['stock'] + (n - 1) * stoch) / r['wall']['stock']:.2f}x"
              + (f", full {r['wall']['full'] / r['wall']['stock']:.2f}x" if "full" in r["wall"] else "") + ")")
    if not args.memory:
        return
    print()

    def launch(mode: str, placement: str, k: int) -> float:
        cmd = [sys.executable, __file__, "--size", str(args.size), "--roi", str(args.roi), "--sw-batch",
               str(args.sw_batch), "--threads", str(args.threads), "--device", args.device, "--features",
               *map(str, args.features), "--worker", mode, placement, str(k)]
        # a fixed mmap threshold: RSS follows the live tensors (glibc otherwise keeps freed blocks in the heap)
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
        return json.loads(out.strip().splitlines()[-1])["peak_mib"]

    for placement in PLACEMENTS:
        for mode in ("shared", "full"):
            hi, lo = launch(mode, placement, n), launch(mode, placement, 2)
            print(f"peak working memory {placement:8s} {mode:6s}: N={n} {hi:8.1f} MiB, N=2 {lo:8.1f} MiB, "
                  f"ratio {hi / lo:.2f} (target <= 1.1)")


if __name__ == "__main__":
    main()
