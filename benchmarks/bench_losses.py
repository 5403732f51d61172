"""Forward + backward of each calibration loss against MONAI's ``DiceCELoss`` in the same run, with peak memory.

    python benchmarks/bench_losses.py [--size 128] [--classes 4] [--repeats 3] [--threads 1] [--logit-scale 1]
                                      [--inline]

Logits ``(1, C, S, S, S)`` (float32, ``requires_grad``; standard normal times ``--logit-scale``) and a label map
``(1, 1, S, S, S)``; each contender computes
its loss and the gradient of the logits. The peer is ``DiceCELoss(to_onehot_y=True, softmax=True)``: the loss a
MONAI training replaces by a calibrated one; every time is printed as a ratio to it (target: at most 1.5x for SVLS
and MbLS). Each contender runs in its own subprocess with ``--threads`` torch threads (best of ``--repeats`` after
one warm-up; CPU time of the process, and wall time); peak working memory is the peak RSS (``VmHWM``, reset through
``/proc/self/clear_refs`` after the warm-up step, so one-time imports such as numba's are not counted) minus the RSS
just before the measured step. ``--inline`` runs
everything in this process without the memory figures (a quick check).

The logit scale matters for MbLS: standard normal logits (scale 1, an untrained network) never exceed the margin
of 10, so its penalty costs only its forward pass; at ``--logit-scale 8`` about half of the non-maximal entries pay
(a confident network), the case the fused gradient is for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _floor import peak_mib, reset_peak  # noqa: E402

CONTENDERS = (
    "DiceCELoss",
    "DiceSVLSLoss",
    "DiceCEMarginLoss",
    "DiceCEL1ACELoss(hard)",
    "DiceCEL1ACELoss(soft)",
    "SVLSLoss",
    "MarginLoss",
    "L1ACELoss(hard)",
    "L1ACELoss(soft)",
    "Dice+NACLLoss",
)


def build(name: str, classes: int, dims: int) -> Callable:
    """The loss ``f(logits, labels)`` of a contender (labels ``(B, 1, *spatial)``)."""
    from monai.losses import DiceCELoss, DiceLoss, NACLLoss

    from monai_unc.losses import DiceCEL1ACELoss, DiceCEMarginLoss, DiceSVLSLoss, L1ACELoss, MarginLoss, SVLSLoss

    if name == "DiceCELoss":
        return DiceCELoss(to_onehot_y=True, softmax=True)
    if name == "DiceSVLSLoss":
        return DiceSVLSLoss(to_onehot_y=True, softmax=True)
    if name == "DiceCEMarginLoss":
        return DiceCEMarginLoss(to_onehot_y=True)
    if name.startswith("DiceCEL1ACELoss"):
        return DiceCEL1ACELoss(name[-5:-1], to_onehot_y=True)
    if name == "SVLSLoss":
        return SVLSLoss(to_onehot_y=True)
    if name == "MarginLoss":
        return MarginLoss(to_onehot_y=True)
    if name.startswith("L1ACELoss"):
        return L1ACELoss(name[-5:-1], to_onehot_y=True)
    if name == "Dice+NACLLoss":
        dice, nacl = DiceLoss(to_onehot_y=True, softmax=True), NACLLoss(classes=classes, dim=dims)
        return lambda z, y: dice(z, y) + nacl(z, y[:, 0])
    raise ValueError(f"unknown contender {name!r}")



def measure(name: str, size: int, classes: int, repeats: int, memory: bool = True, logit_scale: float = 1.0) -> dict:
    """Time (best CPU and wall of ``repeats``) and peak memory of one contender's forward + backward."""
    import torch

    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(1, classes, size, size, size, generator=gen) * logit_scale).requires_grad_(True)
    labels = torch.randint(0, classes, (1, 1, size, size, size), generator=gen)
    loss = build(name, classes, 3)

    def step() -> None:
        logits.grad = None
        loss(logits, labels).backward()

    step()  # warm-up: one-time imports and compiled kernels (numba) are not a step's working memory
    logits.grad = None
    base = reset_peak() if memory else float("nan")
    step()  # the memory peak of one step
    peak = peak_mib() - base if memory else float("nan")
    cpu, wall = float("inf"), float("inf")
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        step()
        cpu, wall = min(cpu, time.process_time() - c0), min(wall, time.perf_counter() - w0)
    return {"name": name, "cpu_s": cpu, "wall_s": wall, "peak_mib": peak}


def main(argv: list[str] | None = None) -> list[dict]:
    """Run every contender and print the table; returns the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=128, help="voxels per axis (default 128)")
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--logit-scale", type=float, default=1.0, help="logits = N(0, 1) x this (default 1)")
    parser.add_argument("--inline", action="store_true", help="one process, no memory figures")
    parser.add_argument("--only", default=None, help=argparse.SUPPRESS)  # the worker of one contender
    args = parser.parse_args(argv)
    if args.size < 4 or args.classes < 2 or args.repeats < 1 or args.threads < 1 or not 0 < args.logit_scale < 1e6:
        parser.error("--size >= 4, --classes >= 2, --repeats >= 1, --threads >= 1 and a positive --logit-scale "
                     "are required")
    import torch

    torch.set_num_threads(args.threads)
    if args.only:
        print(json.dumps(measure(args.only, args.size, args.classes, args.repeats, logit_scale=args.logit_scale)))
        return []
    rows = []
    for name in CONTENDERS:
        if args.inline:
            rows.append(measure(name, args.size, args.classes, args.repeats, False, args.logit_scale))
            continue
        cmd = [sys.executable, __file__, "--only", name, "--size", str(args.size), "--classes", str(args.classes),
               "--repeats", str(args.repeats), "--threads", str(args.threads), "--logit-scale", str(args.logit_scale)]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    peer = rows[0]
    print(f"forward + backward, logits (1, {args.classes}, {args.size}, {args.size}, {args.size}) x "
          f"{args.logit_scale:g}, {args.threads} thread(s), best of {args.repeats}")
    print(f"{'loss':24s} {'CPU s':>8s} {'ratio':>7s} {'wall s':>8s} {'ratio':>7s} {'peak MiB':>9s} {'ratio':>7s}")
    for r in rows:
        r["cpu_ratio"] = r["cpu_s"] / peer["cpu_s"]
        r["wall_ratio"] = r["wall_s"] / peer["wall_s"]
        r["peak_ratio"] = r["peak_mib"] / peer["peak_mib"] if peer["peak_mib"] > 0 else float("nan")
        print(f"{r['name']:24s} {r['cpu_s']:8.3f} {r['cpu_ratio']:6.2f}x {r['wall_s']:8.3f} {r['wall_ratio']:6.2f}x "
              f"{r['peak_mib']:9.1f} {r['peak_ratio']:6.2f}x")
    return rows


if __name__ == "__main__":
    main()
