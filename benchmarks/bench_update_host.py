"""Host time of one MC sample's statistics on the GPU path, measured without a GPU.

    python benchmarks/bench_update_host.py [--classes 3] [--calls 3000] [--repeats 7]

On a GPU with a small network (a pass of a few milliseconds) the host's work per sample shows: the inferers' step
after each forward pass is Python and kernel launches. This script times that step as the inferers run it on CUDA
tensors, with the Triton launch replaced by a no-op so that it runs on the CPU (Triton must be installed: its
launch code is what runs up to the launch):

- ``fused outputs``: the network output handed to the kernel (``SampleStats._update_outputs``: the activation, the
  outputs' finiteness flag and every sum in one launch);
- ``separate steps``: the outputs' ``aminmax`` and ``stack``, the torch activation, the fused update of the
  probabilities (``_stats_kernels.FUSED_OUTPUTS`` off: the code before).

Each is microseconds per sample (best of ``--repeats`` rounds of ``--calls`` calls, one thread, a ``1 x C x 4^3``
output so that the CPU's torch operations cost little); the ratio is the fused path's time over the separate
steps'. On a GPU the separate steps' three extra torch operations are CUDA launches, which cost the host more than
these CPU ones: the figure is a lower bound of the saving (``make gpu-check``'s ``mc_unet`` part measures the card).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import timeit
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import monai_unc._stats_kernels as kernels  # noqa: E402
from monai_unc.inferers.sampling import (  # noqa: E402
    _output_layout,
    _to_probs,
    check_output_ndim,
    network_output_tensor,
)
from monai_unc.stats import SampleStats  # noqa: E402


@contextlib.contextmanager
def triton_path_without_launch() -> Iterator[None]:
    """The Triton path of the fused update on CPU tensors, its kernel's launch a no-op (restored afterwards)."""
    from monai_unc import _stats_triton

    class NoLaunch:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    saved = (_stats_triton._stats_kernel, kernels._kind, kernels._cuda_kernels)
    _stats_triton._stats_kernel = NoLaunch()
    kernels._kind = lambda p: "triton"
    kernels._cuda_kernels = lambda: _stats_triton
    try:
        yield
    finally:
        _stats_triton._stats_kernel, kernels._kind, kernels._cuda_kernels = saved


def measure(classes: int, calls: int, repeats: int) -> dict:
    """Microseconds per sample of the two paths and their ratio."""
    raw = torch.randn(1, classes, 4, 4, 4, generator=torch.Generator().manual_seed(0))
    x = torch.zeros(1, 1, 4, 4, 4)
    extremes: list[torch.Tensor] = []
    flag = torch.zeros(1, dtype=torch.int32)
    with triton_path_without_launch():
        separate_stats = SampleStats(validate=False)
        fused_stats = SampleStats(validate=False)

        def separate() -> None:
            check_output_ndim(raw, x)
            extremes.append(torch.stack(torch.aminmax(network_output_tensor(raw).detach())).float())
            probs, _ = _to_probs(raw, "softmax", check=False)
            separate_stats.update(probs)
            if len(extremes) > 1000:
                extremes.clear()

        def fused() -> None:
            check_output_ndim(raw, x)
            z = network_output_tensor(raw).detach()
            _, kind = _output_layout(z, "softmax")
            if not fused_stats._update_outputs(z, kind, 1, flag):
                raise RuntimeError("the fused update of network outputs declined")

        times = {}
        for name, fn, outputs in (("separate steps", separate, False), ("fused outputs", fused, True)):
            kernels.FUSED_OUTPUTS = outputs
            try:
                fn()
                times[name] = min(timeit.repeat(fn, number=calls, repeat=repeats)) / calls * 1e6
            finally:
                kernels.FUSED_OUTPUTS = True
    return {"classes": classes, "us_per_sample": times, "fused_over_separate": times["fused outputs"]
            / times["separate steps"]}


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    if args.classes < 2 or args.calls < 1 or args.repeats < 1:
        ap.error("--classes must be >= 2, --calls and --repeats >= 1")
    if importlib.util.find_spec("triton") is None:
        print("Triton is not installed: the GPU path's launch code cannot run")
        return None
    torch.set_num_threads(1)
    res = measure(args.classes, args.calls, args.repeats)
    t = res["us_per_sample"]
    print(f"host time per sample, GPU path without its launch, 1 x {args.classes} x 4^3 output, 1 thread: "
          f"separate steps {t['separate steps']:.1f} us, fused outputs {t['fused outputs']:.1f} us "
          f"(ratio {res['fused_over_separate']:.2f})")
    return res


if __name__ == "__main__":
    main()
