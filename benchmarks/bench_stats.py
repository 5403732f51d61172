"""The fused ``SampleStats.update`` against the reference torch path and one read of the sample; the MC overhead.

    python benchmarks/bench_stats.py [--sizes 128 64] [--classes 2 3 4] [--repeats 3] [--batch 4]
                                     [--mc-size 48] [--mc-samples 30] [--skip-mc]

One thread (``torch.set_num_threads(1)``), process CPU time, best of ``--repeats``, contenders interleaved in one
process so that load from other processes hits them alike; every time is printed as a ratio to the floor measured in
the same run (``benchmarks/_floor.py``).

- **update**, per case ``(1, C, S, S, S)`` float32 softmax samples, float64 sums (the default), one-channel second
  moment (the inferers' default ``class_variance=False``): ``fused`` (the numba kernel, ``validate=False`` as the
  inferers call it), ``fused+checks`` (``validate=True``, the default of ``SampleStats``), ``fused batch k``
  (:meth:`SampleStats.update_many` of ``--batch`` samples, time per sample), and the same with the reference torch
  path (``monai_unc._stats_kernels.FUSED_KERNELS = False``). Floor: one contiguous read of the sample
  (:func:`_floor.one_read`); also printed: one read of the sample and of the float64 sums, which an update must
  read and write (``C + 2`` float64 channels against ``C`` float32 ones: most of its memory traffic). Peak memory:
  the peak RSS of one update above the RSS before it (the sums already allocated), measured in a child process
  started with glibc's mmap threshold fixed so that RSS follows the live tensors; the times are taken in this
  process with glibc's defaults (under a fixed threshold every temporary above it is mapped and faulted in again on
  each call, which tripled the fused update's time at 128^3 and is not what a user's process pays).
- **MC overhead**: ``MCDropoutInferer`` with ``--mc-samples`` samples on the example UNet (16-32-64-128, 3 classes)
  at ``--mc-size``^3 against the same number of bare forward passes with dropout on (the floor), with the fused
  update and with the reference one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from _floor import floor_line, one_read, peak_mib, reset_peak, time_best

MMAP_THRESHOLD = "131072"


def _cases(args: argparse.Namespace):
    for size in args.sizes:
        for c in args.classes:
            yield size, c


def bench_update(args: argparse.Namespace) -> None:
    import torch

    import monai_unc._stats_kernels as kernels

    print(f"numba kernel available: {kernels.available('cpu')}; torch threads {torch.get_num_threads()}")
    peaks = _peaks_in_subprocess(args)
    for size, c in _cases(args):
        _update_case(size, c, args, peaks[f"{size},{c}"])


def _contenders(size: int, c: int, args: argparse.Namespace) -> tuple[dict, Any, Any, Any]:
    """The timed calls of one case, and the floors: ``(contenders, floor, floor_sums, one sample)``."""
    import torch

    import monai_unc._stats_kernels as kernels
    from monai_unc.stats import SampleStats

    k = args.batch
    g = torch.Generator().manual_seed(size * 10 + c)
    ps = torch.softmax(torch.randn(k, c, size, size, size, generator=g), 1)
    one = ps[:1]
    contenders = {}

    def stats(validate: bool) -> SampleStats:
        s = SampleStats(validate=validate, class_variance=False)
        s.update(one)  # the sums exist: the timed calls add to them
        return s

    for label, fused in (("fused", True), ("reference", False)):
        kernels.FUSED_KERNELS = fused
        s_plain, s_checked, s_batch = stats(False), stats(True), stats(False)

        def plain(s=s_plain, fused=fused):
            kernels.FUSED_KERNELS = fused
            s.update(one)

        def checked(s=s_checked, fused=fused):
            kernels.FUSED_KERNELS = fused
            s.update(one)

        def batch(s=s_batch, fused=fused):
            kernels.FUSED_KERNELS = fused
            s.update_many(ps, num_samples=k)

        contenders[label] = plain
        contenders[f"{label}+checks"] = checked
        contenders[f"{label} batch {k}"] = batch
    kernels.FUSED_KERNELS = True
    floor = one_read(one)
    ref_sums = stats(False)  # the unavoidable traffic of an update: the sample and the sums read once
    floor_sums = one_read(one, ref_sums.sum_p, ref_sums.sum_h, ref_sums.sum_p2)
    for fn in (*contenders.values(), floor, floor_sums):
        fn()  # warm-up (the kernel's first call loads or compiles it)
    return contenders, floor, floor_sums, one


def _peaks(args: argparse.Namespace) -> dict:
    """Peak working memory of every contender of every case (run under the fixed mmap threshold)."""
    import monai_unc._stats_kernels as kernels

    out = {}
    for size, c in _cases(args):
        contenders, *_ = _contenders(size, c, args)
        mem = {}
        for name, fn in contenders.items():
            r0 = reset_peak()
            fn()
            mem[name] = peak_mib() - r0
        kernels.FUSED_KERNELS = True
        out[f"{size},{c}"] = mem
    return out


def _peaks_in_subprocess(args: argparse.Namespace) -> dict:
    """:func:`_peaks` in a child process started with glibc's mmap threshold fixed (``MALLOC_MMAP_THRESHOLD_``): RSS
    then follows the live tensors. Timing runs in this process, with glibc's defaults (a fixed threshold maps and
    faults in every temporary above it on each call: 3x the fused update's time at 128^3, not what a user's process
    pays)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, __file__, "--peak-worker", "--batch", str(args.batch), "--sizes",
            *map(str, args.sizes), "--classes", *map(str, args.classes)]
    res = subprocess.run(argv, env=env, check=False, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"the peak-memory child failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.splitlines()[-1])


def _update_case(size: int, c: int, args: argparse.Namespace, mem: dict) -> None:
    k = args.batch
    contenders, floor, floor_sums, one = _contenders(size, c, args)
    cpu = {name: float("inf") for name in (*contenders, "floor", "floor_sums")}
    for _ in range(args.repeats):
        for name, fn in (*contenders.items(), ("floor", floor), ("floor_sums", floor_sums)):
            _, t = time_best(fn, 1)
            cpu[name] = min(cpu[name], t / (k if "batch" in name else 1))
    sample_mib = one.numel() * 4 / 2**20
    print(
        f"\nupdate of one sample (1, {c}, {size}^3) float32 ({sample_mib:.1f} MiB), float64 sums, "
        f"one read {cpu['floor'] * 1e3:.2f} ms, one read of the sample and the sums "
        f"{cpu['floor_sums'] * 1e3:.2f} ms"
    )
    for name in contenders:
        print(
            f"  {name:22s} {cpu[name] * 1e3:8.2f} ms per sample  peak +{mem[name]:7.1f} MiB  "
            f"vs reference {cpu[name] / cpu[name.replace('fused', 'reference')]:.2f}x"
            if name.startswith("fused")
            else f"  {name:22s} {cpu[name] * 1e3:8.2f} ms per sample  peak +{mem[name]:7.1f} MiB"
        )
    for name in contenders:
        print("  " + floor_line(f"{name} (c={c}, {size}^3)", cpu[name], cpu["floor"], "one read of the sample"))
    print(
        "  "
        + floor_line(
            f"fused (c={c}, {size}^3)", cpu["fused"], cpu["floor_sums"], "one read of the sample and the float64 sums"
        )
    )


def bench_mc(args: argparse.Namespace) -> None:
    import torch

    import monai_unc._stats_kernels as kernels
    from monai_unc.data.model import build_example_network
    from monai_unc.inferers import MCDropoutInferer, enable_mc_dropout

    torch.manual_seed(0)
    net = build_example_network().eval()
    s, n = args.mc_size, args.mc_samples
    x = torch.randn(1, 1, s, s, s, generator=torch.Generator().manual_seed(0))

    def stream(fused: bool):
        def run():
            kernels.FUSED_KERNELS = fused
            with torch.no_grad():
                return MCDropoutInferer(num_samples=n, seed=0)(x, net)

        return run

    def bare():
        with torch.no_grad(), enable_mc_dropout(net):
            for _ in range(n):
                net(x)

    contenders = {"bare": bare, "stream fused": stream(True), "stream reference": stream(False)}
    for fn in contenders.values():
        fn()
    cpu = {m: float("inf") for m in contenders}
    wall = dict(cpu)
    for _ in range(args.repeats):
        for m, fn in contenders.items():
            w, c = time_best(fn, 1)
            cpu[m], wall[m] = min(cpu[m], c), min(wall[m], w)
    kernels.FUSED_KERNELS = True
    print(f"\nMC dropout, example UNet, 1x1x{s}^3, {n} samples (best of {args.repeats}, interleaved, 1 thread)")
    for m in contenders:
        print(f"  {m:17s} CPU {cpu[m]:7.2f} s  wall {wall[m]:7.2f} s")
    for m in ("stream fused", "stream reference"):
        print(
            f"  overhead of {m} over {n} bare passes: CPU {100 * (cpu[m] / cpu['bare'] - 1):.1f} %, "
            f"wall {100 * (wall[m] / wall['bare'] - 1):.1f} %"
        )
        print("  " + floor_line(f"{m}, CPU", cpu[m], cpu["bare"], f"{n} bare forward passes"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 64])
    ap.add_argument("--classes", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4, help="samples of one update_many call")
    ap.add_argument("--mc-size", type=int, default=48)
    ap.add_argument("--mc-samples", type=int, default=30)
    ap.add_argument("--skip-mc", action="store_true")
    ap.add_argument("--skip-update", action="store_true")
    ap.add_argument("--peak-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.peak_worker:
        print(json.dumps(_peaks(args)))
        return
    t0 = time.perf_counter()
    if not args.skip_update:
        bench_update(args)
    if not args.skip_mc:
        bench_mc(args)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
