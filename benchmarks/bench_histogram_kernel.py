"""The confidence-histogram update alone, fused CPU kernel against the reference torch path, as a ratio to one read.

    python benchmarks/bench_histogram_kernel.py                 # 3 x 128 x 256 x 256 float32, 2 and 1 threads
    python benchmarks/bench_histogram_kernel.py --quick         # 3 x 32 x 64 x 64

Two volumes (3 classes, float32 probabilities, int64 labels): ``phantom``, the calibration benchmark's volume (noisy,
overconfident softmax probabilities that spread over all bins), and ``confident``, the same labels with the
probabilities of a confident network (logits ``10 * onehot + N(0, 1)``: most class values in the first and last few
fine bins). ``ConfidenceHistogram(3, per_case=False).update(probs, labels)`` timed with:

- ``fused``: the one-pass numba kernel (the default path on the CPU when numba is installed), without and with the
  normalised-entropy (UCE) row;
- ``reference``: the torch path (``FUSED_KERNELS = False``), the one the fused kernel is tested against;

and the floor (``benchmarks/_floor.py``): one contiguous sum over the probabilities, in the same run. Each thread
count (``torch.set_num_threads``; the kernel runs as many threads, each with private tables) runs in its own
subprocess; the best of ``--repeat`` interleaved rounds (each contender and the floor once per round), wall and
process CPU time. The script checks that both paths give equal
counts. Peak memory: the peak RSS during the update minus the RSS before it (VmHWM, reset through
``/proc/self/clear_refs``), i.e. what the update needs on top of its inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _floor import floor_line, one_read, peak_mib, reset_peak, time_best  # noqa: E402
from bench_calibration import phantom as make_volume  # noqa: E402  (the calibration benchmark's volume)


def confident_volume(shape: tuple[int, int, int]):
    """The phantom's labels with a confident network's probabilities: ``softmax(10 * onehot(labels) + N(0, 1))``."""
    import torch

    _, labels = make_volume(shape)
    g = torch.Generator().manual_seed(1)
    onehot = torch.nn.functional.one_hot(labels[0], 3).movedim(-1, 0).float()
    return torch.softmax(10.0 * onehot + torch.randn(onehot.shape, generator=g), 0)[None], labels


def worker(shape: tuple[int, int, int], threads: int, repeat: int, volume: str) -> dict:
    import torch

    from monai_unc.metrics.calibration import ConfidenceHistogram
    from monai_unc.metrics.calibration import histogram as hist_module

    torch.set_num_threads(threads)
    probs, labels = make_volume(shape) if volume == "phantom" else confident_volume(shape)
    out: dict = {"threads": threads, "volume": volume}

    def update(unc: bool) -> ConfidenceHistogram:
        return ConfidenceHistogram(3, per_case=False, uncertainty=unc).update(probs, labels)

    contenders = (("fused", True, False), ("fused_uce", True, True), ("reference", False, False),
                  ("reference_uce", False, True))
    results = {}
    for name, fused, unc in contenders:  # warm-up (compiles or loads the kernel)
        hist_module.FUSED_KERNELS = fused
        results[name] = update(unc)
    read = one_read(probs)
    read()
    best: dict = {}
    for _ in range(repeat):  # interleaved rounds: a change of the machine's load hits every contender alike
        for name, fused, unc in contenders:
            hist_module.FUSED_KERNELS = fused
            rss0 = reset_peak()
            wall, cpu = time_best(lambda u=unc: update(u), 1)
            peak = peak_mib() - rss0
            old = best.get(name, {"wall": float("inf"), "cpu": float("inf"), "peak_mib": float("inf")})
            best[name] = {"wall": min(wall, old["wall"]), "cpu": min(cpu, old["cpu"]),
                          "peak_mib": min(peak, old["peak_mib"])}
        wall, cpu = time_best(read, 1)
        old = best.get("floor", {"wall": float("inf"), "cpu": float("inf")})
        best["floor"] = {"wall": min(wall, old["wall"]), "cpu": min(cpu, old["cpu"])}
    out.update(best)
    hist_module.FUSED_KERNELS = True
    out["fused_kernel_used"] = hist_module._fused_for(probs)
    out["counts_equal"] = bool(
        torch.equal(results["fused"].counts, results["reference"].counts)
        and torch.equal(results["fused_uce"].counts[:, :-1], results["reference_uce"].counts[:, :-1])
    )
    out["uce_row_count_diff"] = int((results["fused_uce"].counts - results["reference_uce"].counts).abs().sum())
    out["max_sum_rel_diff"] = float(
        ((results["fused"].sums - results["reference"].sums).abs() / results["reference"].sums.abs().clamp_min(1e-300))
        .max()
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 x 32 x 64 x 64")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--volumes", nargs="+", default=["phantom", "confident"], choices=["phantom", "confident"])
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    shape = (32, 64, 64) if args.quick else (128, 256, 256)
    if args.worker is not None:
        print(json.dumps(worker(shape, args.worker, args.repeat, args.volumes[0])))
        return
    print(f"# histogram update: 1 x 3 x {shape} float32, load average at start {os.getloadavg()[0]:.1f}")
    print("| volume | threads | contender | wall (s) | CPU (s) | peak (MiB) | ratio to one read (wall / CPU) |")
    print("|---|---|---|---|---|---|---|")
    lines = []
    for volume, threads in ((v, t) for v in args.volumes for t in args.threads):
        cmd = [sys.executable, __file__, "--worker", str(threads), "--repeat", str(args.repeat), "--volumes", volume]
        cmd += ["--quick"] if args.quick else []
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        fl = res["floor"]
        for name in ("fused", "fused_uce", "reference", "reference_uce"):
            r = res[name]
            print(f"| {volume} | {threads} | {name} | {r['wall']:.4f} | {r['cpu']:.4f} | {r['peak_mib']:.1f} | "
                  f"{r['wall'] / fl['wall']:.1f}x / {r['cpu'] / fl['cpu']:.1f}x |")
            lines.append(floor_line(f"{name}, {volume}, {threads} thread(s), wall", r["wall"], fl["wall"],
                                    "one contiguous sum of the probabilities"))
        print(f"| {volume} | {threads} | one read (floor) | {fl['wall']:.4f} | {fl['cpu']:.4f} | | 1x |")
        lines.append(f"{volume}, {threads} thread(s): fused kernel used: {res['fused_kernel_used']}; counts equal "
                     f"(label and top rows, and all rows "
                     f"without UCE): {res['counts_equal']}; UCE-row count differences: {res['uce_row_count_diff']}; "
                     f"largest relative difference of a bin's value sum: {res['max_sum_rel_diff']:.2e}")
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
