"""The GPU histogram kernel's launch settings, and the floor of its global atomics, on one CUDA card (issue #41).

    python benchmarks/bench_histogram_launch.py [--out FILE.json] [--size 256] [--repeats 4]

The update of ``ConfidenceHistogram(3)`` on a ``1 x 3 x S^3`` float32 volume (int64 labels) with the fused Triton
kernel, for every launch setting of ``monai_unc.metrics.calibration._cuda_kernel``: voxels per program (``BLOCK``
256 to 2048), table replicas (``MAX_REPLICAS`` 1 to 64, the L2 bound of ``L2_SHARE`` lifted so the cap is the one
applied) and warps per program (4, and 8 for the larger blocks). Two volumes: ``spread``, the GPU check's
(``softmax(2 N(0, 1))``: confidences over all fine bins), and ``confident`` (``softmax(10 onehot + N(0, 1))``:
most values in the first and last few bins, where atomics contend). Each setting's counts must equal those of
the default setting (exact int64 counts whatever the launch); a setting whose launch fails (Triton then turns its
kernels off for the process) is marked ``kernel_ran: false`` and the sweep stops there.

The floor: a kernel that does nothing but the kernel's kind of atomics (per voxel one relaxed int64 and one
float64 atomic add per row, 1 and 5 rows, at the spread volume's fine bins of one class, into 1, 8 or 32 table
replicas): atomics a second. The histogram kernel adds about two atomics per row and voxel (count and value sum,
the hits where the label agrees) to ``C + 2`` rows; at the floor's rate that alone bounds its throughput.

Needs a CUDA device and Triton (torch's CUDA wheels ship it); anything else exits with 2. Best of ``--repeats``
synchronised runs after a warm-up (``gpu_check.best_time``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from gpu_check import best_time, calibration_volume  # noqa: E402


def volumes(size: int, dev: torch.device) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The ``spread`` and ``confident`` probabilities ``(1, 3, S, S, S)`` and the labels ``(1, S, S, S)``."""
    c = 3
    g = torch.Generator().manual_seed(0)
    spread, labels = calibration_volume(c, (size, size, size), g)
    oh = torch.nn.functional.one_hot(labels[0], c).movedim(-1, 0).float()
    conf = torch.softmax(10.0 * oh + torch.randn(oh.shape, generator=g), 0)[None]
    return {"spread": spread.to(dev), "confident": conf.to(dev)}, labels.to(dev)


BLOCKS = (256, 512, 1024, 2048)
REPLICAS = (1, 4, 8, 16, 32, 64)


def sweep(size: int, repeats: int, dev: torch.device, blocks: tuple[int, ...] = BLOCKS,
          replicas: tuple[int, ...] = REPLICAS) -> dict:
    """Update time and GB/s of every launch setting (``blocks`` x ``replicas`` x warps) on both volumes."""
    from monai_unc._jit import triton_failure
    from monai_unc.metrics.calibration import ConfidenceHistogram
    from monai_unc.metrics.calibration import _cuda_kernel as K

    vols, labels = volumes(size, dev)
    nbytes = vols["spread"].numel() * vols["spread"].element_size() + labels.numel() * labels.element_size()
    res: dict = {"read_s": best_time(lambda: (vols["spread"].sum(), labels.sum()), dev, repeats),
                 "default": {"block": K.BLOCK, "max_replicas": K.MAX_REPLICAS, "warps": K.NUM_WARPS,
                             "l2_share": K.L2_SHARE, "l2_bytes": K._l2_bytes(dev)}}
    ref = {k: ConfidenceHistogram(num_classes=3).update(v, labels).counts.cpu() for k, v in vols.items()}
    saved = (K.BLOCK, K.MAX_REPLICAS, K.NUM_WARPS, K.L2_SHARE)
    rows = []
    try:
        K.L2_SHARE = 1e9  # the replica cap of the sweep is MAX_REPLICAS alone
        for block in blocks:
            for rep in replicas:
                for warps in (4, 8) if block >= 1024 else (4,):
                    K.BLOCK, K.MAX_REPLICAS, K.NUM_WARPS = block, rep, warps
                    row: dict = {"block": block, "replicas": rep, "warps": warps}
                    if triton_failure() is not None:  # a launch failed: the histogram now takes the torch path
                        raise RuntimeError(f"the Triton kernel failed before block {block}, {rep} replicas, {warps} "
                                           f"warps (every later figure would be the torch path's): {triton_failure()}")
                    for name, v in vols.items():
                        last: list[ConfidenceHistogram] = []

                        def update(v: torch.Tensor = v, last: list = last) -> None:
                            last[:] = [ConfidenceHistogram(num_classes=3).update(v, labels)]

                        row[f"{name}_s"] = best_time(update, dev, repeats)
                        row[f"{name}_gb_s"] = nbytes / row[f"{name}_s"] / 1e9
                        # the counts of the last timed update (no update more: under Triton's interpreter each costs
                        # ~0.3 s of the test's CPU time)
                        row[f"{name}_counts_equal"] = bool(torch.equal(last[0].counts.cpu(), ref[name]))
                    row["kernel_ran"] = triton_failure() is None  # else this setting's figures are the torch path's
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        K.BLOCK, K.MAX_REPLICAS, K.NUM_WARPS, K.L2_SHARE = saved
    res["settings"] = rows
    return res


def atomics_floor(size: int, repeats: int, dev: torch.device) -> dict:
    """Atomics a second of a kernel that only adds (one int64 and one float64 atomic per row and voxel)."""
    import triton
    import triton.language as tl

    @triton.jit
    def atomics(p_ptr, t_ptr, s_ptr, n, REP: tl.constexpr, K: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        v = tl.load(p_ptr + offs, mask=m, other=0.0).to(tl.float64)
        b = (v * 15360).to(tl.int64)
        base = (pid % REP).to(tl.int64) * (K * 15361)
        for k in tl.static_range(K):
            tl.atomic_add(t_ptr + base + k * 15361 + b, tl.full([BLOCK], 1, tl.int64), mask=m, sem="relaxed")
            tl.atomic_add(s_ptr + base + k * 15361 + b, v, mask=m, sem="relaxed")

    vols, _ = volumes(size, dev)
    v = vols["spread"][0, 0].reshape(-1).contiguous()
    n = v.numel()
    out: dict = {"voxels": n}
    for rep in (1, 8, 32):
        for k in (1, 5):
            t = torch.zeros(rep * k * 15361, dtype=torch.int64, device=dev)
            s = torch.zeros(rep * k * 15361, dtype=torch.float64, device=dev)

            def run(t: torch.Tensor = t, s: torch.Tensor = s, rep: int = rep, k: int = k) -> None:
                atomics[(triton.cdiv(n, 512),)](v, t, s, n, REP=rep, K=k, BLOCK=512)

            sec = best_time(run, dev, repeats)
            out[f"replicas{rep}_rows{k}"] = {"s": sec, "atomics_per_s": 2 * k * n / sec}
    print(json.dumps(out), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="write the figures to this JSON file")
    ap.add_argument("--size", type=int, default=256, help="edge of the cubic volume (default 256)")
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_histogram_launch: needs a CUDA device (the kernel's launch settings are a GPU's)", file=sys.stderr)
        return 2
    from monai_unc.metrics.calibration import _cuda_kernel

    if not _cuda_kernel.available():
        print("bench_histogram_launch: needs Triton (torch's CUDA wheels ship it)", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    res = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__, "size": args.size,
           "sweep": sweep(args.size, args.repeats, dev), "atomics_floor": atomics_floor(args.size, args.repeats, dev)}
    if args.out is not None:
        from monai_unc.io import atomic_write_text

        atomic_write_text(args.out, json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
