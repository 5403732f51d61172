"""Many-class volumes: peak working memory of the uncertainty inferers against stock MONAI sliding-window inference.

    python benchmarks/bench_memory.py [--size 128] [--classes 3 105] [--samples 4] [--roi 64] [--json out.json]

Every contender runs in its own subprocess on a ``1 x 1 x S^3`` input (default ``S = 128``) under
``SlidingWindowInferer((roi,) * 3, overlap=0.25)`` with the example network architecture (MONAI UNet 16-32-64-128,
dropout 0.1) given ``C`` output channels. Peak working memory is the process's peak RSS (``VmHWM``, reset through
``/proc/self/clear_refs`` just before the call; ``ru_maxrss`` would inherit the parent's RSS) minus its RSS just
before the measured call: the activations of the
network, the stitching buffers, the statistics and the outputs of one inference. RSS is the process's own memory, so
other processes on a shared machine do not change it (times would vary; memory does not). The workers run with
``MALLOC_MMAP_THRESHOLD_=131072`` so that RSS follows the live tensors (glibc's dynamic threshold otherwise keeps
freed blocks of up to 32 MiB in the heap; ``--default-malloc`` measures with it).

``--network tiny`` (default; conv 1-8, dropout, conv 8-C: the statistics dominate, and a 128^3 case runs in seconds
on a CPU) or ``--network unet`` (the example UNet 16-32-64-128 with C outputs: about 160 more bytes per window
voxel of activations, minutes per contender on a CPU).

Contenders (``C`` classes each):

- ``stock``: ``softmax(SlidingWindowInferer(x, net))``: the one-pass MONAI baseline.
- ``mc``: ``MCDropoutInferer(num_samples=N, base_inferer=...)`` with its defaults.
- ``mc_f16``: the same with ``pred_dtype=torch.float16``; ``mc_nopred``: ``pred_dtype=None`` (no mean probabilities).
- ``mc_f64``: ``accum_dtype=torch.float64`` (float64 sums whatever ``C``).
- ``mc_legacy``: the statistics of version 0.1 (``accum_dtype=float64``, ``class_variance=True``, float32 ``pred``).

Every row also shows :func:`monai_unc.inferers.estimate_memory` for that contender and its split into stitching
buffers, window statistics, network activations and outputs, so that the bytes per voxel can be traced. The maps of
``mc`` are compared with those of ``mc_f64`` (the float64 path) in one extra subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

CONTENDERS = ("stock", "mc", "mc_f16", "mc_nopred", "mc_f64", "mc_legacy")


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() // 1024


def _reset_peak() -> None:
    """Reset the process's peak RSS (``VmHWM``) to its current RSS (Linux >= 4.0): the peak is then the call's own,
    not that of the warm-up, nor the parent's RSS that ``ru_maxrss`` inherits across fork and exec."""
    try:
        with open("/proc/self/clear_refs", "w") as f:  # the process's own state, not a file
            f.write("5")
    except OSError:
        pass


def _peak_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _options(mode: str) -> dict:
    import torch

    return {
        "mc": {},
        "mc_f16": {"pred_dtype": torch.float16},
        "mc_nopred": {"pred_dtype": None},
        "mc_f64": {"accum_dtype": torch.float64},
        "mc_legacy": {"accum_dtype": torch.float64, "class_variance": True},
    }[mode]


#: the networks of ``--network``
NETWORKS = ("tiny", "unet")


def _network(classes: int, kind: str = "tiny"):
    import torch
    from monai.networks.nets import UNet

    from monai_unc.data.model import EXAMPLE_NETWORK

    if kind == "tiny":
        return torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Dropout3d(0.1),
                                   torch.nn.Conv3d(8, classes, 1)).eval()
    kwargs = dict(EXAMPLE_NETWORK)
    kwargs["out_channels"] = classes
    return UNet(**kwargs).eval()


def worker(mode: str, classes: int, size: int, samples: int, roi: int, kind: str) -> dict:
    import torch
    from monai.inferers import SlidingWindowInferer

    from monai_unc.inferers import MCDropoutInferer

    torch.manual_seed(0)
    net = _network(classes, kind)

    def run(x: torch.Tensor, r: int):
        base = SlidingWindowInferer((r,) * 3, sw_batch_size=1, overlap=0.25)
        if mode == "stock":
            return torch.softmax(base(x, net), 1)
        return MCDropoutInferer(num_samples=samples, base_inferer=base, seed=0, **_options(mode))(x, net)

    if mode == "network":  # the network's own working memory per window voxel besides its output, measured as
        # estimate_memory's network_bytes_per_voxel says (one window, stock inference); the estimates use it
        with torch.no_grad():
            net(torch.randn(1, 1, 16, 16, 16))
            window = torch.randn(1, 1, roi, roi, roi)
            _reset_peak()
            rss0 = _rss_kib()
            out = net(window)
            peak = _peak_kib()
        return {"mode": mode, "classes": classes,
                "bytes_per_voxel": max((peak - rss0) * 1024 - out.numel() * out.element_size(), 0) / window.numel()}
    with torch.no_grad():
        run(torch.randn(1, 1, 16, 16, 16), 8)  # load every code path: the peak below is the case's own
        x = torch.randn(1, 1, size, size, size)
        _reset_peak()
        rss0 = _rss_kib()
        out = run(x, roi)
        peak = _peak_kib()
    del out
    return {"mode": mode, "classes": classes, "peak_mib": (peak - rss0) / 1024}


def shared_terms(classes: int, size: int, samples: int, roi: int, kind: str) -> dict:
    """The shared-pass terms of :func:`~monai_unc.inferers.estimate_memory` for the ``mc`` contenders.

    The inferers share what the samples share by default (``share_passes=True``; the tiny network's first
    convolution runs once per window), and replay the rest for several samples at once: one window traced as the
    inferer traces it, and the replay batch it chooses (``sample_batch_size="auto"``) for the samples after the
    first.
    """
    import torch

    from monai_unc.inferers import SharedPasses, enable_mc_dropout
    from monai_unc.networks.shared import sample_batch

    torch.manual_seed(0)
    net = _network(classes, kind)
    window = torch.randn(1, 1, roi, roi, roi)
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, window)
    return {"sample_batch": sample_batch(passes, "auto", size**3, classes, samples - 1),
            "shared_bytes_per_voxel": passes.shared_bytes / window.numel(),
            "stochastic_bytes_per_voxel": passes.stochastic_bytes / window.numel(),
            "copied_bytes_per_voxel": passes.copied_bytes / window.numel()}


def compare(classes: int, size: int, samples: int, roi: int, kind: str) -> dict:
    """Largest absolute difference of every map between the defaults and the float64 path."""
    import torch
    from monai.inferers import SlidingWindowInferer

    from monai_unc.inferers import MCDropoutInferer

    torch.manual_seed(0)
    net = _network(classes, kind)
    x = torch.randn(1, 1, size, size, size)
    base = SlidingWindowInferer((roi,) * 3, sw_batch_size=1, overlap=0.25)
    with torch.no_grad():
        ref = MCDropoutInferer(num_samples=samples, base_inferer=base, seed=0, accum_dtype=torch.float64)(x, net)
        new = MCDropoutInferer(num_samples=samples, base_inferer=base, seed=0)(x, net)
    return {k: float((new[k].double() - ref[k].double()).abs().max()) for k in ref}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--classes", type=int, nargs="+", default=[3, 105])
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--roi", type=int, default=64)
    ap.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    ap.add_argument("--network", choices=NETWORKS, default="tiny")
    ap.add_argument("--default-malloc", action="store_true", help="keep glibc's dynamic mmap threshold")
    ap.add_argument("--no-compare", action="store_true", help="skip the float32-vs-float64 map comparison")
    ap.add_argument("--json", default=None, help="also print the results as JSON to this path ('-' for stdout)")
    ap.add_argument("--_worker", nargs=6, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_compare", nargs=5, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._worker:
        mode, c, s, n, r, kind = args._worker
        print(json.dumps(worker(mode, int(c), int(s), int(n), int(r), kind)))
        return
    if args._compare:
        c, s, n, r, kind = args._compare
        print(json.dumps(compare(int(c), int(s), int(n), int(r), kind)))
        return
    env = dict(os.environ)
    if not args.default_malloc:
        env["MALLOC_MMAP_THRESHOLD_"] = "131072"

    import torch

    from monai_unc.inferers import estimate_memory

    voxels = args.size**3
    rows = []
    for c in args.classes:
        stock = None
        terms = shared_terms(c, args.size, args.samples, args.roi, args.network)
        cmd = [sys.executable, __file__, "--_worker", "network", str(c), str(args.size), str(args.samples),
               str(args.roi), args.network]
        net_bytes = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                              env=env).stdout)["bytes_per_voxel"]
        print(f"C={c:4d} {args.network} network: {net_bytes:.0f} bytes per window voxel besides its output "
              "(measured; the estimates use it)", flush=True)
        for mode in args.contenders:
            cmd = [sys.executable, __file__, "--_worker", mode, str(c), str(args.size), str(args.samples),
                   str(args.roi), args.network]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
            if mode == "stock":
                est = estimate_memory((args.size,) * 3, c, roi_size=(args.roi,) * 3, stock=True,
                                      network_bytes_per_voxel=net_bytes)
                stock = res["peak_mib"]
            else:
                opts = _options(mode)
                est = estimate_memory((args.size,) * 3, c, roi_size=(args.roi,) * 3,
                                      accum_dtype=opts.get("accum_dtype"),
                                      pred_dtype=opts.get("pred_dtype", torch.float32),
                                      class_variance=opts.get("class_variance", False),
                                      network_bytes_per_voxel=net_bytes, **terms)
            res["bytes_per_voxel"] = res["peak_mib"] * 2**20 / voxels
            res["ratio_to_stock"] = res["peak_mib"] / stock if stock else None
            res["estimate_mib"] = est.total / 2**20
            res["estimate_parts_bytes_per_voxel"] = {k: v / voxels for k, v in est.parts.items()}
            rows.append(res)
            ratio = f"{res['ratio_to_stock']:5.2f}x" if res["ratio_to_stock"] else "   - "
            parts = ", ".join(f"{k} {v:.0f}" for k, v in res["estimate_parts_bytes_per_voxel"].items())
            print(f"C={c:4d} {mode:10s} peak {res['peak_mib']:8.1f} MiB ({res['bytes_per_voxel']:6.0f} B/voxel) "
                  f"{ratio} stock | estimate {res['estimate_mib']:8.1f} MiB [{parts}]", flush=True)
    result = {"size": args.size, "samples": args.samples, "roi": args.roi, "network": args.network, "rows": rows}
    if not args.no_compare:
        c = max(args.classes)
        cmd = [sys.executable, __file__, "--_compare", str(c), str(args.size), str(args.samples), str(args.roi),
               args.network]
        diff = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
        result["max_abs_diff_vs_float64"] = {"classes": c, **diff}
        print(f"C={c}: largest |defaults - float64 path| per map: "
              + ", ".join(f"{k} {v:.2e}" for k, v in diff.items()))
    if args.json == "-":
        print(json.dumps(result, indent=2))
    elif args.json:
        from monai_unc.io import atomic_write_text

        atomic_write_text(args.json, json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
