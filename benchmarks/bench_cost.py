"""What N MC-dropout samples cost next to one stock MONAI pass: shared passes vs full passes vs their limit.

    python benchmarks/bench_cost.py [--size 64] [--roi 48] [--features 8 8 16 32 64 8] [--samples 30]
                                    [--sw-batch 2] [--device cpu] [--memory] [--placements auto decoder last]
                                    [--network basicunet|segresnet|dynunet] [--sample-batches K [K ...]]
    python benchmarks/bench_cost.py --nnunet [--nnunet-config width32] [--samples 30] [--memory]

One network (MONAI ``BasicUNet`` with ``--features``, 3 classes; ``--network segresnet``: ``SegResNet`` with
``init_filters`` the first feature, blocks down 1-2-2-4 and up 1-1-1; ``--network dynunet``: a residual ``DynUNet``
with the first five features as filters, five levels; ``--network example``: the package's example UNet 16-128 with
its own dropout (0.1) in every convolution block, whatever ``--placements`` says), one input ``1x1xSxSxS``, one
``SlidingWindowInferer(roi, sw_batch_size, overlap=0.25)``. For each dropout placement (``add_dropout(after=...)``:
``auto`` = after every encoder and decoder stage, ``decoder`` = the decoder stages only, ``last`` = the decoder
stage next to the output), in the same process and interleaved:

- ``stock``: one stock MONAI pass, ``softmax(SlidingWindowInferer(x, net))``, dropout off: the unit of every ratio;
- ``shared``: ``MCDropoutInferer(num_samples=N)`` with its defaults (shared passes, automatic sample batches);
- ``full``: the same with ``share_passes=False`` (one full pass per sample, what the inferer did before);
- ``split`` (``--split``): shared passes that always split the network (``MIN_SHARED_WORK = 0``), where the default
  replays a trace that keeps under a tenth of the work as plain batched passes (``SharedPasses.plain``);
- ``k=K`` (``--sample-batches K ...``): shared passes with ``sample_batch_size=K`` instead of the automatic batch;
- ``limit``: the stochastic part of one pass, measured window by window as a replay of one sample
  (``SharedPasses.replay(k=1)``) after a trace: ``limit = stock + (N - 1) x stochastic part`` (the shared part once
  plus N times the stochastic part), the least any implementation that runs each sample's stochastic part can do.

``--nnunet``: the same for the nnU-Net predictor against stock ``nnUNetPredictor`` (``--nnunet-config`` names a case
of ``benchmarks/bench_nnunet.py``: its PlainConvUNet with random weights, one fold, its preprocessed image; post-hoc
dropout ``add_posthoc_dropout(p=0.1, after=...)``; no mirroring, step 0.5, Gaussian blending):

- ``stock``: one pass of ``nnUNetPredictor.predict_logits_from_preprocessed_data``, dropout off: the unit;
- ``stock_n``: what stock nnU-Net offers for MC dropout: the same call N times with the dropout switched on
  (``enable_mc_dropout``), the logits of each pass kept as a sum;
- ``shared``: ``UncertaintyPredictor(("dropout",), num_samples=N)`` with its defaults (shared passes, automatic
  batches; the maps of every pass streamed into the statistics, and stock's fp16 logit buffer);
- ``full``: the same with ``share_passes=False``;
- ``split`` (``--split``): shared passes that always split the network (``MIN_SHARED_WORK = 0``);
- ``limit``: one stock pass plus ``N - 1`` times the stochastic part of a pass (each window traced, then a one-sample
  ``SharedPasses.replay`` timed), the least any implementation that runs each sample's stochastic part can do.

It also prints where the time of one ``shared`` prediction goes: its traces, its replays, ``SampleStats.update``
(the statistics of every sample) and the rest (stitching, the probabilities of the samples, export buffers).

Times are the best of ``--repeats`` (wall and, on the CPU, process CPU time: on a shared machine CPU time of one
thread is the robust measure). ``--memory`` also runs every mode with N and with 2 samples in its own subprocess
and prints the ratio of the peak working memories (RSS on the CPU, ``torch.cuda.max_memory_allocated`` on a GPU).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _floor import peak_mib, reset_peak

PLACEMENTS = ("auto", "decoder", "last")


def _setup(args: argparse.Namespace, placement: str):
    import torch
    from monai.inferers import SlidingWindowInferer
    from monai.networks.nets import BasicUNet, DynUNet, SegResNet

    from monai_unc.inferers import add_dropout

    torch.manual_seed(0)
    dev = torch.device(args.device)
    f = tuple(args.features)
    kind = getattr(args, "network", "basicunet")
    if kind == "example":  # the package's example UNet, its own dropout (0.1) in every convolution block
        from monai_unc.data.model import build_example_network

        return build_example_network().eval().to(dev), x_of(args, dev), SlidingWindowInferer(
            [args.roi] * 3, sw_batch_size=args.sw_batch, overlap=0.25)
    if kind == "segresnet":
        net = SegResNet(3, init_filters=f[0], in_channels=1, out_channels=3, blocks_down=(1, 2, 2, 4),
                        blocks_up=(1, 1, 1))
    elif kind == "dynunet":
        net = DynUNet(3, 1, 3, kernel_size=[3] * 5, strides=[1, 2, 2, 2, 2], upsample_kernel_size=[2] * 4,
                      filters=list(f[:5]), res_block=True)
    else:
        net = BasicUNet(3, 1, 3, features=f)
    net = net.eval().to(dev)
    add_dropout(net, p=0.1, after=placement)
    sw = SlidingWindowInferer([args.roi] * 3, sw_batch_size=args.sw_batch, overlap=0.25)
    return net, x_of(args, dev), sw


def x_of(args: argparse.Namespace, dev) -> Any:
    """The input ``1x1xSxSxS`` (seeded by the caller)."""
    import torch

    return torch.randn(1, 1, args.size, args.size, args.size, device=dev)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


@contextlib.contextmanager
def _always_split(on: bool = True):
    """Shared passes that split the network whatever share of the work the kept calls hold (``split``)."""
    from monai_unc.networks import shared

    saved = shared.MIN_SHARED_WORK
    if on:
        shared.MIN_SHARED_WORK = 0.0
    try:
        yield
    finally:
        shared.MIN_SHARED_WORK = saved


def run_mode(mode: str, net, x, sw, n: int, device: str) -> tuple[float, float]:
    """Run one contender once; returns the (wall, CPU) seconds of the stochastic part for ``limit``, else 0."""
    import torch

    from monai_unc.inferers import MCDropoutInferer, enable_mc_dropout
    from monai_unc.networks.shared import SharedPasses

    with torch.no_grad():
        if mode == "stock":
            torch.softmax(sw(x, net), 1)
            return 0.0, 0.0
        if mode in ("shared", "full", "split"):
            with _always_split(mode == "split"):
                MCDropoutInferer(num_samples=n, base_inferer=sw, seed=0, share_passes=mode != "full")(x, net)
            return 0.0, 0.0
        if mode.startswith("k="):  # shared passes with a fixed sample batch (--sample-batches)
            MCDropoutInferer(num_samples=n, base_inferer=sw, seed=0, sample_batch_size=int(mode[2:]))(x, net)
            return 0.0, 0.0
        spent = [0.0, 0.0]

        def window(t: torch.Tensor) -> torch.Tensor:
            passes = SharedPasses(net, min_shared_work=0)  # the limit of sharing: the shared part never recomputed
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
    for placement in args.placements:
        net, x, sw = _setup(args, placement)
        run_mode("stock", net, x, sw, args.samples, args.device)  # warm-up
        split = ("split",) if getattr(args, "split", False) else ()
        fixed = tuple(f"k={k}" for k in (getattr(args, "sample_batches", None) or ()))
        wall = {m: [] for m in ("stock", "shared", "full", "limit", *split, *fixed)}
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


def nnunet_case(args: argparse.Namespace, placement: str) -> dict:
    """The case of ``bench_nnunet.py`` (``--nnunet-config``) with post-hoc dropout after ``placement``."""
    from bench_nnunet import setup_case

    from monai_unc.nnunet import add_posthoc_dropout

    env = setup_case(args.nnunet_config, args.threads)
    add_posthoc_dropout(env["net"], p=0.1, after=placement)
    return env


def nnunet_predictor(mode: str, env: dict, n: int, device: str = "cpu"):
    """The predictor of one contender (see the module docstring), on ``env``'s network, on ``device`` (on a GPU
    everything stays on the device, as stock's default)."""
    import torch
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    from monai_unc.nnunet import UncertaintyPredictor

    dev = torch.device(device)
    kw = {"use_mirroring": False, "perform_everything_on_device": dev.type == "cuda", "device": dev,
          "allow_tqdm": False}
    if mode in ("stock", "stock_n"):
        pred = nnUNetPredictor(**kw)
    else:
        pred = UncertaintyPredictor(("dropout",), num_samples=n, seed=0, share_passes=mode != "full", **kw)
    pred.manual_initialization(env["net"], env["pm"], env["cm"], env["params"], env["dataset_json"], "nnUNetTrainer",
                               (0, 1, 2))
    return pred


def nnunet_run(mode: str, pred, env: dict, n: int) -> None:
    """One prediction of the case by one contender."""
    import torch

    from monai_unc.inferers import enable_mc_dropout

    if mode == "stock":
        pred.predict_logits_from_preprocessed_data(env["data"])
    elif mode == "stock_n":
        with enable_mc_dropout(env["net"]), torch.inference_mode():  # stock's logits are inference tensors
            total = None
            for _ in range(n):
                logits = pred.predict_logits_from_preprocessed_data(env["data"])
                total = logits if total is None else total.add_(logits)
            del total
    else:
        with torch.no_grad(), _always_split(mode == "split"):
            pred.predict_uncertainty_from_preprocessed_data(env["data"])


NNUNET_MODES = ("stock", "shared", "full", "stock_n", "limit")


def nnunet_stochastic(pred, env: dict, device: str = "cpu") -> float:
    """Seconds of the stochastic part of one pass: each window traced, then replayed for one sample (timed; process
    CPU time on the CPU, wall time with the device synchronised on a GPU)."""
    import torch
    from acvl_utils.cropping_and_padding.padding import pad_nd_image

    from monai_unc.inferers import enable_mc_dropout
    from monai_unc.networks.shared import SharedPasses

    net = env["net"]
    clock = time.process_time if device == "cpu" else time.perf_counter
    padded, _ = pad_nd_image(env["data"], env["cm"].patch_size, "constant", {"value": 0}, True, None)
    padded = padded.to(device)
    spent = 0.0
    # as the predictors run their windows: fp16 autocast on a GPU (nnU-Net's own), no autograd
    amp = torch.autocast("cuda") if device != "cpu" else contextlib.nullcontext()
    with enable_mc_dropout(net), torch.inference_mode(), amp:
        for sl in pred._internal_get_sliding_window_slicers(padded.shape[1:]):
            x = padded[sl][None]
            passes = SharedPasses(net, min_shared_work=0)  # the limit: the shared part never recomputed
            passes.trace(net, x)
            _sync(device)
            c0 = clock()
            passes.replay(net, x, 1)
            _sync(device)
            spent += clock() - c0
    return spent


def nnunet_profile(pred, env: dict) -> dict:
    """CPU seconds of one prediction by ``pred`` spent in traces, replays, ``SampleStats.update`` /
    ``update_many`` and in all."""
    import torch

    from monai_unc.networks.shared import SharedPasses
    from monai_unc.stats import SampleStats

    spent = {"trace": 0.0, "replay": 0.0, "SampleStats.update": 0.0}
    saved = {}

    def timed(cls, name, key):
        fn = getattr(cls, name)
        saved[(cls, name)] = fn

        def wrapper(*a, **kw):
            c0 = time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                spent[key] += time.process_time() - c0

        setattr(cls, name, wrapper)

    timed(SharedPasses, "trace", "trace")
    timed(SharedPasses, "replay", "replay")
    timed(SampleStats, "update", "SampleStats.update")  # the key counts update_many too (neither calls the other)
    timed(SampleStats, "update_many", "SampleStats.update")
    try:
        c0 = time.process_time()
        with torch.no_grad():
            pred.predict_uncertainty_from_preprocessed_data(env["data"])
        spent["total"] = time.process_time() - c0
    finally:
        for (cls, name), fn in saved.items():
            setattr(cls, name, fn)
    return spent


def nnunet_timing(args: argparse.Namespace, case: Callable[[str], dict] | None = None) -> dict:
    """Every contender and placement in this process, interleaved; best CPU and wall time of ``--repeats``.

    ``case(placement)`` gives the case (default :func:`nnunet_case`: ``--nnunet-config`` with post-hoc dropout); on
    a GPU (``args.device``) the network and the data go to the device, times are wall times with the device
    synchronised (the limit from them) and no CPU profile is taken.
    """
    import torch

    device = getattr(args, "device", "cpu")
    out: dict = {"placements": {}}
    for placement in getattr(args, "placements", PLACEMENTS):
        env = (case or (lambda pl: nnunet_case(args, pl)))(placement)
        env["net"].to(device)
        modes = (*NNUNET_MODES, *(("split",) if getattr(args, "split", False) else ()))
        preds = {m: nnunet_predictor(m, env, args.samples, device) for m in modes if m != "limit"}
        torch.set_num_threads(args.threads)  # nnU-Net's predictor changes the thread count
        nnunet_run("stock", preds["stock"], env, 1)  # warm-up
        wall = {m: [] for m in modes}
        cpu = {m: [] for m in modes}
        for _ in range(args.repeats):
            for m in modes:
                if m in ("full", "stock_n") and args.skip_full and placement != "auto":
                    continue
                if m == "limit":  # one stock pass plus N - 1 times the stochastic part
                    stoch = nnunet_stochastic(preds["stock"], env, device)
                    (cpu if device == "cpu" else wall)[m].append(
                        min((cpu if device == "cpu" else wall)["stock"]) + (args.samples - 1) * stoch)
                    continue
                _sync(device)
                t0, c0 = time.perf_counter(), time.process_time()
                nnunet_run(m, preds[m], env, args.samples)
                _sync(device)
                wall[m].append(time.perf_counter() - t0)
                cpu[m].append(time.process_time() - c0)
        out["placements"][placement] = {"wall": {m: min(v) for m, v in wall.items() if v},
                                        "cpu": {m: min(v) for m, v in cpu.items() if v}}
        if device == "cpu":
            out["placements"][placement]["profile"] = nnunet_profile(preds["shared"], env)
    return out


def nnunet_memory(args: argparse.Namespace, mode: str, placement: str, n: int) -> dict:
    """Peak working memory of one contender's prediction (its own process), after a warm-up on a small input; on the
    CPU (peak RSS) whatever ``--device`` says."""
    env = nnunet_case(args, placement)
    pred = nnunet_predictor(mode, env, n)
    small = dict(env, data=env["data"][:, : env["cm"].patch_size[0]])
    nnunet_run(mode, pred, small, 2)  # every code path loaded first
    rss0 = reset_peak()
    nnunet_run(mode, pred, env, n)
    return {"peak_mib": peak_mib() - rss0}


def nnunet_main(args: argparse.Namespace) -> None:
    """``--nnunet``: print the ratios to one stock ``nnUNetPredictor`` pass and, with ``--memory``, the peaks."""
    import torch

    torch.set_num_threads(args.threads)
    n = args.samples
    from bench_nnunet import CONFIGS

    cfg = CONFIGS[args.nnunet_config]
    on_cpu = args.device == "cpu"
    name = "CPU" if on_cpu else torch.cuda.get_device_name(args.device)
    print(f"nnU-Net PlainConvUNet features {cfg['features']}, patch {cfg['patch']}^3, image {cfg['image']}, no "
          f"mirroring, step 0.5, N = {n}, {name}, torch threads {torch.get_num_threads()}")
    if not args.memory_only:
        res = nnunet_timing(args)
        print("ratios to one stock nnUNetPredictor pass (same network, same case), "
              + ("process CPU time (wall)" if on_cpu else "wall time"))
        print(f"{'dropout':10s} {'shared (ours)':>16s} {'limit':>16s} {'full (ours)':>16s} {'stock, N passes':>16s} "
              f"{'stock s':>8s}")
        for placement, r in res["placements"].items():
            t, w = (r["cpu"], r["wall"]) if on_cpu else (r["wall"], {})

            def cell(m: str, t: dict = t, w: dict = w) -> str:
                if m not in t:
                    return f"{'-':>16s}"
                if m not in w:
                    return f"{t[m] / t['stock']:7.2f}x{'':8s}"
                return f"{t[m] / t['stock']:7.2f}x ({w[m] / w['stock']:5.2f}x)"

            print(f"{placement:10s} {cell('shared')} {cell('limit')} {cell('full')} {cell('stock_n')} "
                  f"{t['stock']:8.3f}" + (f"   split (always): {cell('split').strip()}" if "split" in t else ""))
        if on_cpu:
            print("where the time of one shared-pass prediction goes (CPU seconds, in units of one stock pass)")
        for placement, r in res["placements"].items() if on_cpu else ():
            prof, unit = r["profile"], r["cpu"]["stock"]
            rest = prof["total"] - prof["trace"] - prof["replay"] - prof["SampleStats.update"]
            print(f"{placement:10s} " + ", ".join(f"{k} {v:.2f} s ({v / unit:.2f}x)" for k, v in prof.items())
                  + f", rest {rest:.2f} s ({rest / unit:.2f}x)")
    if not args.memory:
        return
    print()
    for placement in args.placements:
        for mode in ("shared", "stock_n"):
            if mode == "stock_n" and placement != "auto":
                continue
            hi, lo = _launch(args, mode, placement, n), _launch(args, mode, placement, 2)
            print(f"peak working memory {placement:8s} {mode:8s}: N={n} {hi:8.1f} MiB, N=2 {lo:8.1f} MiB, "
                  f"ratio {hi / lo:.2f} (target <= 1.1)")
    print(f"peak working memory of one stock pass: {_launch(args, 'stock', 'auto', 1):.1f} MiB")


def _launch(args: argparse.Namespace, mode: str, placement: str, k: int) -> float:
    """Peak working memory (MiB) of one contender and N = ``k`` in its own process (``--worker``)."""
    cmd = [sys.executable, __file__, "--size", str(args.size), "--roi", str(args.roi), "--sw-batch",
           str(args.sw_batch), "--threads", str(args.threads), "--device", args.device, "--features",
           *map(str, args.features), "--nnunet-config", args.nnunet_config, "--network", args.network,
           *(["--nnunet"] if args.nnunet else []), "--worker", mode, placement, str(k)]
    # a fixed mmap threshold: RSS follows the live tensors (glibc otherwise keeps freed blocks in the heap)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_mib"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--roi", type=int, default=48)
    ap.add_argument("--features", type=int, nargs=6, default=(8, 8, 16, 32, 64, 8))
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--sw-batch", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=None,
                    help="best of this many runs (default 1 on the CPU, 2 on a GPU: the first run there compiles the "
                         "statistics kernels and tunes cuDNN for the replays' batch shapes)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--network", choices=("basicunet", "segresnet", "dynunet", "example"), default="basicunet",
                    help="the MONAI network (default BasicUNet, the issue's)")
    ap.add_argument("--placements", nargs="+", choices=PLACEMENTS, default=list(PLACEMENTS),
                    help="the dropout placements to time (default: all three)")
    ap.add_argument("--skip-full", action="store_true", help="time the 30 full passes for 'auto' only")
    ap.add_argument("--split", action="store_true",
                    help="also time shared passes that always split the network (MIN_SHARED_WORK = 0)")
    ap.add_argument("--sample-batches", type=int, nargs="+", default=None, metavar="K",
                    help="also time shared passes with these fixed sample batch sizes beside the automatic one")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--memory-only", action="store_true", help="the memory part of --memory alone")
    ap.add_argument("--nnunet", action="store_true", help="the nnU-Net predictor against stock nnUNetPredictor")
    ap.add_argument("--nnunet-config", default="width32", help="a case of bench_nnunet.py (default width32)")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.repeats is None:
        args.repeats = 1 if args.device == "cpu" else 2
    if args.memory_only:
        args.memory = True
    if args.worker:
        mode, placement, n = args.worker
        measure = nnunet_memory if args.nnunet else memory
        print(json.dumps(measure(args, mode, placement, int(n))))
        return
    if args.nnunet:
        nnunet_main(args)
        return
    import torch

    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "CPU"
    res = timing(args) if not args.memory_only else {"threads": torch.get_num_threads(), "placements": {}}
    n = args.samples
    label = {"basicunet": "BasicUNet features", "segresnet": "SegResNet init_filters",
             "dynunet": "DynUNet filters", "example": "example UNet (its own dropout in every block)"}[args.network]
    shown = {"basicunet": tuple(args.features), "segresnet": args.features[0],
             "dynunet": tuple(args.features[:5]), "example": "16-128"}[args.network]
    print(f"{label} {shown}, input 1x1x{args.size}^3, roi {args.roi}^3, sw_batch_size "
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
        split = f"   split (always): {t['split'] / stock:.2f}x" if "split" in t else ""
        print(f"{placement:10s} {t['shared'] / stock:13.2f}x {limit / stock:7.2f}x {full} {stock:9.3f}{split}")
        fixed = [m for m in t if m.startswith("k=")]
        if fixed:
            print("  fixed sample batches: " + ", ".join(f"{m} {t[m] / stock:.2f}x" for m in fixed))
        print(f"  (wall: shared {r['wall']['shared'] / r['wall']['stock']:.2f}x, limit "
              f"{(r['wall']['stock'] + (n - 1) * stoch) / r['wall']['stock']:.2f}x"
              + (f", full {r['wall']['full'] / r['wall']['stock']:.2f}x" if "full" in r["wall"] else "") + ")")
    if not args.memory:
        return
    print()
    for placement in args.placements:
        for mode in ("shared", "full"):
            hi, lo = _launch(args, mode, placement, n), _launch(args, mode, placement, 2)
            print(f"peak working memory {placement:8s} {mode:6s}: N={n} {hi:8.1f} MiB, N=2 {lo:8.1f} MiB, "
                  f"ratio {hi / lo:.2f} (target <= 1.1)")


if __name__ == "__main__":
    main()
