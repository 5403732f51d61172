"""The cost of ending a per-class (vector) NLL temperature fit at the minimum (review 65): 3 classes x 128^3 voxels.

A vector fit (``TemperatureScaler(mode="vector")``) runs RMSprop (one streamed pass over the voxels a step), then
Newton's method in ``1 / t`` (one pass a step computing the loss, gradient and ``C x C`` Hessian) from RMSprop's
result to the minimum. This script times both parts of one fit in the same run, counts their passes, and prints the
share of the Newton part, for best temperatures near 1 (RMSprop gets close: few Newton passes) and far from the
starting t = 2 (RMSprop stops short: Newton does the work). CPU seconds of this process.

    python benchmarks/bench_temperature_vector.py                 # 3 x 128^3, at most 200 RMSprop steps
    python benchmarks/bench_temperature_vector.py --side 64       # quicker
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monai_unc.temperature import TemperatureScaler  # noqa: E402


def case(side: int, scales: list[float], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 logits ``(1, C, side^3)`` whose labels follow softmax(base); class c's logits times ``scales[c]``."""
    g = torch.Generator().manual_seed(seed)
    base = 2.0 * torch.randn(1, len(scales), side, side, side, generator=g)
    u = torch.rand(1, 1, side, side, side, generator=g)
    y = (u > torch.softmax(base, 1).cumsum(1)).sum(1).clamp(max=len(scales) - 1)
    return base * torch.tensor(scales).view(1, -1, 1, 1, 1), y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=128)
    ap.add_argument("--max-steps", type=int, default=200)
    args = ap.parse_args()
    counts = {"grad": 0, "newton": 0, "newton_s": 0.0}
    grad_pass, newton = TemperatureScaler._pass, TemperatureScaler._newton_vector_nll

    def counted_pass(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        counts["grad"] += 1
        return grad_pass(self, *a, **k)

    def timed_newton(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        t0 = time.process_time()
        out = newton(self, *a, **k)
        counts["newton_s"] += time.process_time() - t0
        counts["newton"] += 0 if out is None else out[2]
        return out

    TemperatureScaler._pass, TemperatureScaler._newton_vector_nll = counted_pass, timed_newton
    print(f"3 classes x {args.side}^3 voxels, float32 logits, chunk 2^22, at most {args.max_steps} RMSprop steps")
    for name, scales in (("best t near 1", [1.0, 1.5, 0.8]), ("best t 0.05 / 1 / 300", [0.05, 1.0, 300.0])):
        z, y = case(args.side, scales)
        counts.update(grad=0, newton=0, newton_s=0.0)
        t0 = time.process_time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scaler = TemperatureScaler(mode="vector", max_steps=args.max_steps).fit(z, y)
        total = time.process_time() - t0
        rest = total - counts["newton_s"]
        print(f"{name:>22}: fit {total:6.1f} s = RMSprop {counts['grad']} passes {rest:6.1f} s + Newton "
              f"{counts['newton']} passes {counts['newton_s']:5.1f} s ({100 * counts['newton_s'] / rest:5.1f} % of "
              f"RMSprop; a Newton pass {counts['newton_s'] / max(counts['newton'], 1) / (rest / counts['grad']):.2f}x "
              f"a gradient pass); t = {[round(v, 4) for v in scaler.temperature.tolist()]}, converged "
              f"{scaler.converged}, {len(caught)} warnings")


if __name__ == "__main__":
    main()
