"""Cost of Rate-In's rate search, in forward passes of the network it tunes.

    python benchmarks/bench_rate_in.py [--repeats 3] [--threads 1] [--samples 10] [--losses mi mi_generic ...]

Input: the MNI152 example volume (2 mm, padded to 1 x 1 x 104 x 120 x 96) and the shipped UNet (16-32-64-128,
its own dropout off), with dropout after the six encoder/decoder stages (Zeevi et al. placement).

Contenders:

- ``forward``: one deterministic pass (the unit: "forward passes' worth").
- ``mc_pass``: one MC dropout pass, fixed p = 0.5 (channel-wise hooks).
- ``search[<loss>]``: one Rate-In search pass at default settings (every layer in ``adapt`` mode, target 0.1,
  draws 4, max_iter 15). For ``mi`` (channel-wise: Gaussian) this is the covariance-only path, one pass over the
  voxels per layer.
- ``search[mi, per-draw covariance]`` (``mi_generic``): the same Gaussian mutual information through the generic
  path, i.e. the naive implementation that recomputes the ``2C x 2C`` joint covariance of ``(x, mask * x)`` over
  the voxels for every draw. Same seed, so the same masks: the rates must agree (``max |rate diff|``).
- ``mc_inferer`` / ``ratein_inferer``: the whole inferers at ``--samples`` samples (Rate-In = search + samples).

Timing: all contenders run in one process and alternate, ``--repeats`` rounds, so that load from other processes
on the shared machine hits them alike; best wall time and best CPU time (``time.process_time``) per contender.
``ssim`` is timed once after the rounds (one search pass takes minutes). Memory: each contender in its own
subprocess, one call; peak = ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` minus the RSS just before the call
(network, data and imports loaded), i.e. the working memory of the call.

"pass cost" = time / forward time. The output of the search pass is discarded (it is not one of the samples), so
the per-input cost of Rate-In over MC dropout at equal sample count is the full search pass. The floor of the whole
inferers (``benchmarks/_floor.py``): ``--samples`` bare MC dropout passes (``mc_pass`` times the sample count); the
script prints them as a ratio to it.
"""

from __future__ import annotations

import argparse
import functools
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


def _setup(threads: int):
    import numpy as np
    import torch
    from monai.transforms import DivisiblePad

    from monai_unc.data import load_example_model, load_mni152_tissue

    torch.set_num_threads(threads)
    data = load_mni152_tissue(resolution=2)
    x = torch.as_tensor(np.asarray(DivisiblePad(k=8, method="end")(data["image"])))[None]
    net, _ = load_example_model(dropout=0.0)
    return x, net


def _contender(name: str, x, net, samples: int):
    """A zero-argument callable running one contender on its own copy of the network; returns rates if any."""
    import copy

    import torch

    from monai_unc.inferers import MCDropoutInferer, add_dropout, enable_mc_dropout
    from monai_unc.inferers import rate_in as ri

    net = copy.deepcopy(net)
    if name in ("mc_pass", "mc_inferer"):
        add_dropout(net, p=0.5)
    layers = []
    if name.startswith("search:"):
        loss = name.split(":", 1)[1]
        if loss == "mi_generic":  # naive: joint covariance over the voxels for every draw
            loss = functools.partial(ri._gaussian_mi, eps=ri._GAUSSIAN_EPS)
        ri.add_rate_in(net, loss=loss)
        layers = ri.find_rate_in_layers(net)

    def run() -> dict:
        with torch.no_grad():
            if name == "forward":
                net(x)
            elif name == "mc_pass":
                with enable_mc_dropout(net):
                    net(x)
            elif name.startswith("search:"):
                torch.manual_seed(0)
                with enable_mc_dropout(net):
                    for _, layer in layers:
                        layer.mode = "adapt"
                    net(x)
                return {n: float(layer.rates[0]) for n, layer in layers}
            elif name == "mc_inferer":
                MCDropoutInferer(num_samples=samples, seed=0)(x, net)
            elif name == "ratein_inferer":
                out = ri.RateInInferer(num_samples=samples, placement="insert", seed=0)(x, net)
                return {k: float(v[0]) for k, v in out.extras["rate_in_rates"].items()}
        return {}

    return run


def memory_worker(name: str, threads: int, samples: int) -> dict:
    x, net = _setup(threads)
    run = _contender(name, x, net, samples)
    rss0 = _rss_kib()
    run()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_mib": max(peak - rss0, 0) / 1024}


def timing_worker(names: list[str], repeats: int, threads: int, samples: int) -> dict:
    x, net = _setup(threads)
    runs = {n: _contender(n, x, net, samples) for n in names}
    wall = {n: float("inf") for n in names}
    cpu = {n: float("inf") for n in names}
    rates: dict[str, dict] = {}
    slow = [n for n in names if n == "search:ssim"]
    for r in range(repeats):
        for n in names:
            if n in slow and r > 0:
                continue
            t0, c0 = time.perf_counter(), time.process_time()
            rates[n] = runs[n]()
            wall[n] = min(wall[n], time.perf_counter() - t0)
            cpu[n] = min(cpu[n], time.process_time() - c0)
    return {"wall": wall, "cpu": cpu, "rates": rates}


def _spawn(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--losses", nargs="*", default=["mi", "mi_generic", "mse", "mi_binned", "ssim"])
    ap.add_argument("--memory-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--timing-worker", nargs="*", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_worker:
        print(json.dumps(memory_worker(args.memory_worker, args.threads, args.samples)))
        return
    if args.timing_worker is not None:
        print(json.dumps(timing_worker(args.timing_worker, args.repeats, args.threads, args.samples)))
        return

    names = ["forward", "mc_pass"] + [f"search:{loss}" for loss in args.losses] + ["mc_inferer", "ratein_inferer"]
    common = ["--threads", str(args.threads), "--samples", str(args.samples)]
    timing = _spawn(["--timing-worker", *names, "--repeats", str(args.repeats), *common])
    memory = {n: _spawn(["--memory-worker", n, *common])["peak_mib"] for n in names}
    wall, cpu = timing["wall"], timing["cpu"]
    print(f"example UNet on 1x1x104x120x96, {args.threads} thread(s); time = best of {args.repeats} alternating rounds "
          "(ssim: one run); peak = ru_maxrss - RSS before the call, one subprocess per contender\n")
    print("| contender | wall s | CPU s | pass cost (forwards, wall) | pass cost (forwards, CPU) | peak MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    labels = {"search:mi_generic": "search[mi, per-draw covariance]"}
    for n in names:
        label = labels.get(n, n.replace("search:", "search[") + ("]" if n.startswith("search:") else ""))
        if n in ("mc_inferer", "ratein_inferer"):
            label += f" ({args.samples} samples)"
        print(f"| {label} | {wall[n]:.3f} | {cpu[n]:.3f} | {wall[n] / wall['forward']:.2f} | "
              f"{cpu[n] / cpu['forward']:.2f} | {memory[n]:.0f} |")
    if "search:mi" in wall and "search:mi_generic" in wall:
        a, b = timing["rates"]["search:mi"], timing["rates"]["search:mi_generic"]
        diff = max(abs(a[k] - b[k]) for k in a)
        print(f"\ncovariance-only vs per-draw covariance (same seed, same masks): max |rate diff| = {diff:.2e}; "
              f"naive / ours = {wall['search:mi_generic'] / wall['search:mi']:.2f}x wall, "
              f"{cpu['search:mi_generic'] / cpu['search:mi']:.2f}x CPU")
        print("rates (mi): " + ", ".join(f"{k}={v:.3f}" for k, v in a.items()))
    extra = (wall["ratein_inferer"] - wall["mc_inferer"]) / wall["forward"]
    extra_cpu = (cpu["ratein_inferer"] - cpu["mc_inferer"]) / cpu["forward"]
    print(f"whole inferers at {args.samples} samples: RateInInferer / MCDropoutInferer = "
          f"{wall['ratein_inferer'] / wall['mc_inferer']:.2f} (wall); Rate-In adds {extra:.2f} forward passes (wall), "
          f"{extra_cpu:.2f} (CPU)")
    # the floor of an inferer with N samples: N bare MC dropout passes (N x mc_pass, measured in the same rounds)
    floor = f"{args.samples} x mc_pass (bare dropout passes)"
    for n in ("mc_inferer", "ratein_inferer"):
        print(floor_line(f"{n}, CPU", cpu[n], args.samples * cpu["mc_pass"], floor))


if __name__ == "__main__":
    main()
