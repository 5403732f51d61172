"""The GPU check: the CUDA tests and the GPU benchmarks in one command, one JSON and one Markdown table.

    make gpu-check                                   # python benchmarks/gpu_check.py --out gpu_check_output
    python benchmarks/gpu_check.py --out DIR [--device cuda] [--quick] [--skip-tests] [--tests PATH ...]
                                   [--only NAME ...]
    python benchmarks/gpu_check.py --out DIR --device cpu --quick --tests tests/metrics/test_overlap_cuda.py
                                   # the rehearsal CI runs (about a minute)

A GPU is lent to this project now and then, for minutes at a time, so everything a device run needs is in this
one script and it never stops at the first failure: each part is tried, timed and recorded (ok, or the error
and the end of its traceback), and the exit status says whether all passed. ``DIR`` gets ``gpu_check.json``,
``gpu_check.md`` (the table ``benchmarks/README.md`` records, with the card's name), ``cuda_tests.xml``
(JUnit) and ``cuda_tests.log``. Parts:

- ``cuda_tests``: ``pytest -m cuda`` on the whole suite (or on the ``--tests`` paths) with
  ``MONAI_UNC_TEST_DEVICE`` set to ``--device`` (the device tests beside the CPU tests they mirror;
  ``tests/conftest.py``). ``make test`` runs the same tests on the CPU on a machine without a GPU, so the CI
  rehearsal passes one small file: it checks this part's mechanics (the run, the counts read from the JUnit XML,
  the table row), not the device tests again.
- ``device``: the card, torch/CUDA versions and the device's copy bandwidth (bytes read + written per second
  of a device-to-device copy of 1 GiB: the limit for memory-bound metrics); whether the fused Triton kernels build
  and run (else the error that turned them off: every "fused" figure is then the torch path's).
- ``mc_brats`` and ``mc_unet``: MC dropout on a BraTS-sized case (SegResNet, 4 x 240 x 240 x 155, 3 sigmoid
  regions, ``SlidingWindowInferer`` ROI 128^3, overlap 0.5) and on a 3-class UNet at 96^3 (whole volume):
  time of ``MCDropoutInferer`` against the same number of bare forward passes with dropout on (the floor:
  target <= 5 % overhead; also with ``share_passes=False``, full passes) and against stack-then-reduce (N
  probability maps stacked, then the measures), and
  peak CUDA memory of N = 30 over N = 2 (target <= 1.1); with AMP (``torch.autocast`` fp16) on and off; the
  inferer's time is that of a later call of the process (a network that shares little is traced once per window
  shape: ``networks.shared.PLAIN_TRACES``), the first call's (traced) beside it. The UNet
  part also times the inferer with ``SampleStats``' reference torch update (the fused Triton update off): the
  overhead of each over the bare passes.
- ``sw_stitch``: the BraTS case with windows on the device and stitching on the CPU (``sw_device=cuda,
  device=cpu``) against stitching on the device: time and peak CUDA memory.
- ``calibration``: ``ConfidenceHistogram`` (+ ECE) on CUDA tensors: GB/s of probabilities and labels read,
  beside the copy bandwidth; against torchmetrics' ``MulticlassCalibrationError`` on the same tensors; the update
  alone with the fused kernel (Triton on CUDA: target >= 25 % of the copy bandwidth) against the reference torch
  path, and its counts against the CPU's.
- ``spatial``: BUC, BA-ECE and SPACE on CUDA tensors against their floor (the distance transforms and the
  Gaussian smoothing they need, timed alone on the same data: the distances to the predicted and the target
  boundary, with cuCIM HD95's two directed transforms for BUC's default width, SPACE's Gaussian); also against the
  two boundary transforms and the Gaussian alone (the floor of runs before 2026-12-04).
- ``nnunet``: ``UncertaintyPredictor`` with dropout (``dropout_p``, N samples, ``perform_everything_on_device``)
  against stock ``nnUNetPredictor`` on the same device and network: time per forward pass ratio; and with
  mirroring as the only source (the same passes as stock): time ratio.
- ``cost``: shared passes (``benchmarks/bench_cost.py`` on the device): N = 30 MC-dropout samples against one
  stock pass for dropout in every stage, in the decoder and in the last decoder stage, beside the limit (one stock
  pass plus 29 times the stochastic part) and, for every stage, 30 full passes; on MONAI's BasicUNet 32-256 (a
  160^3 volume, 96^3 windows, ``sw_batch_size`` 4: the configuration of the issue) and on nnU-Net's PlainConvUNet
  (the ``nnunet`` part's network and case, post-hoc dropout) against stock ``nnUNetPredictor``. Targets: decoder
  only <= 4x, last stage <= 2x (where the limit allows it).
- ``profile``: where one call's time goes, for the next change to aim at: ``MCDropoutInferer`` on the ``mc_unet``
  UNet against its bare passes, and the ``cost`` part's BasicUNet with dropout in the last decoder stage against one
  stock pass, each call once under ``torch.profiler`` and once under ``cProfile``: wall and process CPU time, kernel
  launches, synchronisations, copies and allocations, the device events' summed time; the tables in
  ``profile_mc_unet.txt`` and ``profile_cost_last.txt``.

Times are the best of a few runs after a warm-up, with the device synchronised; peak memory is
``torch.cuda.max_memory_allocated`` above what was allocated before the measured call (CPU runs report
``null``: the quick CPU mode checks that the code runs, not its speed).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: import this checkout's monai_unc
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from monai_unc.io import atomic_write_text  # noqa: E402

#: sizes of the full (GPU) and quick (rehearsal) modes
FULL = {
    "brats_shape": (4, 240, 240, 155), "brats_roi": 128, "brats_filters": 16, "brats_n_time": 6, "brats_repeats": 1,
    "unet_size": 96, "unet_n_time": 30, "n_mem": (2, 30), "repeats": 2,
    "cal_shape": (3, 256, 256, 256), "spatial_shape": (128, 256, 256),
    "nn_features": [32, 64, 128, 256, 320], "nn_patch": 128, "nn_image": (160, 160, 160), "nn_samples": 5,
    "cost_size": 160, "cost_roi": 96, "cost_sw_batch": 4, "cost_features": (32, 32, 64, 128, 256, 32),
    "cost_samples": 30, "cost_repeats": 2, "writes_shape": (160, 160, 100),
}
#: the rehearsal checks that every part runs (ok flags, outputs, ratios > 0), not its speed, so its sizes are the least
#: that keep each code path: the BraTS case 2 overlapping windows of 8^3 (SegResNet's 3 halvings end at one voxel;
#: fp16/bf16 autocast convolutions on a CPU cost ~10x fp32's, so the window size weighs most), the UNet at 16^3 (its
#: 4 halvings need 16), the cost part's BasicUNet at half the features of earlier versions (its 8 windows of 32^3
#: in 4 batches kept: 32^3 is the least its 4 halvings and instance norms take)
QUICK = {
    "brats_shape": (4, 12, 8, 8), "brats_roi": 8, "brats_filters": 8, "brats_n_time": 2, "brats_repeats": 1,
    "unet_size": 16, "unet_n_time": 3, "n_mem": (2, 4), "repeats": 1,
    "cal_shape": (3, 32, 32, 32), "spatial_shape": (16, 32, 32),
    "nn_features": [4, 8, 16], "nn_patch": 16, "nn_image": (20, 16, 16), "nn_samples": 2,
    "cost_size": 40, "cost_roi": 32, "cost_sw_batch": 2, "cost_features": (2, 2, 4, 8, 16, 2),
    "cost_samples": 3, "cost_repeats": 1, "writes_shape": (32, 32, 24),
}
PARTS = ("cuda_tests", "device", "mc_unet", "calibration", "spatial", "nnunet", "mc_brats", "sw_stitch",
         "cost", "writes", "profile")  # cheap first


# ----------------------------------------------------------------------------------------------------- helpers
def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def best_time(fn: Callable[[], Any], dev: torch.device, repeats: int, warmup: bool = True) -> float:
    """Best wall time of ``repeats`` calls of ``fn`` (after one warm-up call), the device synchronised."""
    if warmup:
        fn()
        _sync(dev)
    best = float("inf")
    for _ in range(repeats):
        _sync(dev)
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        best = min(best, time.perf_counter() - t0)
    return best


def peak_mib(fn: Callable[[], Any], dev: torch.device) -> float | None:
    """Peak CUDA memory of one call of ``fn`` above what was allocated before it (MiB); ``None`` on the CPU."""
    if dev.type != "cuda":
        fn()
        return None
    _sync(dev)
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    out = fn()
    _sync(dev)
    peak = torch.cuda.max_memory_allocated(dev) - base
    del out
    return peak / 2**20


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _r(x: Any, nd: int = 4) -> Any:
    return round(x, nd) if isinstance(x, float) else x


# ------------------------------------------------------------------------------------------------------- parts
def part_cuda_tests(dev: torch.device, cfg: dict, out: Path) -> dict:
    """``pytest -m cuda`` on ``cfg["tests"]`` (paths; default the ``tests`` folder) with ``MONAI_UNC_TEST_DEVICE``;
    counts, failures and the slowest tests."""
    xml = out / "cuda_tests.xml"
    paths = [str(p) for p in cfg.get("tests") or ["tests"]]
    env = {**os.environ, "MONAI_UNC_TEST_DEVICE": str(dev), "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "-rfE",
           f"--junitxml={xml}", "--durations=5", *paths]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False,
                          timeout=cfg.get("tests_timeout", 420))
    seconds = time.perf_counter() - t0
    atomic_write_text(out / "cuda_tests.log", proc.stdout + proc.stderr)
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed: list[dict] = []
    if xml.exists():
        root = ET.parse(xml).getroot()
        suites = [root] if root.tag == "testsuite" else list(root)
        for s in suites:
            for k in counts:
                counts[k] += int(s.get(k, 0))
            for case in s.iter("testcase"):
                for bad in list(case.findall("failure")) + list(case.findall("error")):
                    msg = (bad.get("message") or "").strip().splitlines()
                    failed.append({"test": f"{case.get('classname')}::{case.get('name')}",
                                   "message": msg[0][:300] if msg else ""})
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    ok = proc.returncode == 0 and passed > 0
    if not ok and not failed:
        failed.append({"test": "pytest", "message": (proc.stdout + proc.stderr)[-600:]})
    return {"ok": ok, "passed": passed, **counts, "seconds": seconds, "failed": failed,
            "returncode": proc.returncode, "paths": paths}


def part_device(dev: torch.device, cfg: dict, out: Path) -> dict:
    """The card and its copy bandwidth (the memory-bound limit)."""
    info: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(), "device": str(dev)}
    n = 2**28 if dev.type == "cuda" else 2**22  # float32 elements: 1 GiB on a GPU, 16 MiB on the CPU
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        info.update(name=p.name, memory_gib=round(p.total_memory / 2**30, 1), multiprocessors=p.multi_processor_count,
                    cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    else:
        info.update(name=f"CPU ({os.cpu_count()} logical cores, {torch.get_num_threads()} torch threads)")
    a = torch.empty(n, device=dev).uniform_()
    b = torch.empty_like(a)
    t = best_time(lambda: b.copy_(a), dev, 5)
    info["copy_gb_s"] = 2 * a.numel() * a.element_size() / t / 1e9
    info["triton"] = _triton_probe(dev)
    return {"ok": True, **info}


def _triton_probe(dev: torch.device) -> str:
    """Whether the fused Triton kernels build and run here: ``"ok"``, ``"not installed"``, ``"not used on <device>"``,
    or the error that turned them off (:func:`monai_unc._jit.triton_failure`: the torch path then runs, and every
    "fused" figure of this check is the torch path's)."""
    from monai_unc import _jit
    from monai_unc import _stats_kernels as stats_kernels
    from monai_unc.metrics.calibration import ConfidenceHistogram
    from monai_unc.stats import SampleStats

    if dev.type != "cuda":
        return f"not used on {dev.type}"
    if importlib.util.find_spec("triton") is None:
        return "not installed"
    g = torch.Generator(device=dev).manual_seed(0)
    probs = torch.softmax(torch.randn(2, 3, 8, 8, 8, device=dev, generator=g), 1)
    SampleStats().update_many(probs, 2)
    ConfidenceHistogram(3).update(probs, probs.argmax(1))
    _sync(dev)
    failure = _jit.triton_failure()
    if failure is not None:
        return f"failed, torch path used: {failure}"
    return "ok" if stats_kernels.available("cuda") else "not used"


def _segresnet(dev: torch.device, cfg: dict) -> torch.nn.Module:
    from monai.networks.nets import SegResNet

    torch.manual_seed(0)
    net = SegResNet(spatial_dims=3, init_filters=cfg["brats_filters"], in_channels=4, out_channels=3,
                    blocks_down=(1, 2, 2, 4), blocks_up=(1, 1, 1), dropout_prob=0.2)
    return net.to(dev).eval()


def _bare_passes(net: torch.nn.Module, x: torch.Tensor, base, n: int) -> None:
    """``n`` bare forward passes of ``base(x, net)`` with the network's dropout on: the MC parts' floor."""
    from monai_unc.inferers import enable_mc_dropout

    with torch.no_grad(), enable_mc_dropout(net):
        for _ in range(n):
            base(x, net)


def _mc_compare(net: torch.nn.Module, x: torch.Tensor, base, activation: str, n_time: int, n_mem: tuple[int, int],
                dev: torch.device, repeats: int, amp: bool, memory: bool = True, reference: bool = False) -> dict:
    """MC dropout (streaming) against bare forward passes and stack-then-reduce, time and peak memory.

    ``reference``: also time the streaming inferer with the reference torch update of ``SampleStats`` (the fused
    kernels off), ``stream_reference_s`` and ``overhead_vs_bare_reference``, and with the fused update of
    probabilities after a separate torch activation (``_stats_kernels.FUSED_OUTPUTS`` off), ``stream_separate_s``
    and ``overhead_vs_bare_separate``; ``fused_update`` says whether the fused kernel runs on this device
    (``stream_s`` is then the fused update's), ``fused_outputs`` whether it takes the network outputs themselves.
    """
    import monai_unc._stats_kernels as stats_kernels
    from monai_unc import measures
    from monai_unc.inferers import MCDropoutInferer, enable_mc_dropout

    multilabel = activation == "sigmoid"
    act = torch.sigmoid if multilabel else (lambda z: torch.softmax(z, 1))

    def ctx():
        return torch.autocast(dev.type, dtype=torch.float16 if dev.type == "cuda" else torch.bfloat16, enabled=amp)

    def stream(n: int, share: bool = True):
        with ctx():
            return MCDropoutInferer(num_samples=n, activation=activation, base_inferer=base, seed=0,
                                    share_passes=share)(x, net)

    def bare(n: int):
        with ctx():
            _bare_passes(net, x, base, n)

    def stack(n: int):
        with torch.no_grad(), enable_mc_dropout(net), ctx():
            s = torch.stack([act(base(x, net).float()) for _ in range(n)])
        return {
            "pred": s.mean(0),
            "predictive_entropy": measures.predictive_entropy(s, validate=False, multilabel=multilabel),
            "expected_entropy": measures.expected_entropy(s, validate=False, multilabel=multilabel),
            "mutual_information": measures.mutual_information(s, validate=False, multilabel=multilabel),
            "variance": measures.variance(s, validate=False, multilabel=multilabel),
        }

    res: dict[str, Any] = {"n_time": n_time}
    # one warm-up (the first contender's) for all three: the network and its kernels are the same
    res["bare_s"] = best_time(lambda: bare(n_time), dev, repeats)
    stream(2)  # loads (numba) or compiles (Triton) the fused update's kernels outside the timed calls
    res["stream_s"] = best_time(lambda: stream(n_time), dev, repeats, warmup=False)
    res["stack_s"] = best_time(lambda: stack(n_time), dev, repeats, warmup=False)
    res["overhead_vs_bare"] = res["stream_s"] / res["bare_s"] - 1
    # the first call of a process: a network that shares little is traced once per window shape and remembered
    # (networks.shared.PLAIN_TRACES), so stream_s is a later call's time; this one forgets the verdicts first
    from monai_unc.networks import shared as shared_passes

    def stream_traced():
        shared_passes.PLAIN_TRACES.clear()
        return stream(n_time)

    res["stream_traced_s"] = best_time(stream_traced, dev, repeats, warmup=False)
    res["overhead_vs_bare_traced"] = res["stream_traced_s"] / res["bare_s"] - 1
    # full passes (share_passes=False): what the shared-pass machinery (tracing, replays) costs or saves here
    res["stream_full_passes_s"] = best_time(lambda: stream(n_time, share=False), dev, repeats)
    res["overhead_vs_bare_full_passes"] = res["stream_full_passes_s"] / res["bare_s"] - 1
    res["stack_over_stream"] = res["stack_s"] / res["stream_s"]
    res["fused_update"] = stats_kernels.available(dev.type)
    # whether stream_s's samples went to the sums as network outputs, in one launch each (a GPU with Triton)
    res["fused_outputs"] = stats_kernels.takes_outputs(torch.zeros(1, 2, 1, device=dev), torch.float64)
    if reference:
        # the reference torch update (FUSED_KERNELS off), and the fused update of probabilities with the activation
        # and the outputs' check as separate torch steps (FUSED_OUTPUTS off: the code before the fused update of
        # network outputs, _stats_kernels.accumulate_outputs)
        for switch, name in (("FUSED_KERNELS", "reference"), ("FUSED_OUTPUTS", "separate")):
            setattr(stats_kernels, switch, False)
            try:
                res[f"stream_{name}_s"] = best_time(lambda: stream(n_time), dev, repeats)
            finally:
                setattr(stats_kernels, switch, True)
            res[f"overhead_vs_bare_{name}"] = res[f"stream_{name}_s"] / res["bare_s"] - 1
    lo, hi = n_mem
    if memory:
        res[f"peak_mib_n{lo}"] = peak_mib(lambda: stream(lo), dev)
        res[f"peak_mib_n{hi}"] = peak_mib(lambda: stream(hi), dev)
        res["memory_ratio"] = _ratio(res[f"peak_mib_n{hi}"], res[f"peak_mib_n{lo}"])
        res[f"stack_peak_mib_n{n_time}"] = peak_mib(lambda: stack(n_time), dev)
    o = stream(lo)
    res["output_dtypes"] = sorted({str(v.dtype) for v in o.values() if isinstance(v, torch.Tensor)})
    res["output_device"] = str(o["pred"].device)
    finite = all(bool(torch.isfinite(v).all()) for v in o.values() if isinstance(v, torch.Tensor))
    res["finite"] = finite
    return res


def part_mc_brats(dev: torch.device, cfg: dict, out: Path) -> dict:
    """MC dropout on a BraTS-sized case with a sliding window, AMP off and on."""
    from monai.inferers import SlidingWindowInferer

    net = _segresnet(dev, cfg)
    x = torch.randn(1, *cfg["brats_shape"], generator=torch.Generator().manual_seed(0)).to(dev)
    roi = (cfg["brats_roi"],) * 3
    base = SlidingWindowInferer(roi, sw_batch_size=1, overlap=0.5)
    res: dict[str, Any] = {"shape": list(cfg["brats_shape"]), "roi": list(roi), "regions": 3}
    for amp in (False, True):  # the memory ratio in fp32 only: N = 30 passes over 18 windows is the costly part
        res["amp" if amp else "fp32"] = _mc_compare(net, x, base, "sigmoid", cfg["brats_n_time"], cfg["n_mem"], dev,
                                                   cfg["brats_repeats"], amp, memory=not amp)
    fp32 = res["fp32"]
    ok = fp32["finite"] and res["amp"]["finite"] and all("float16" not in d for d in res["amp"]["output_dtypes"])
    return {"ok": ok, **res}


def _example_unet(dev: torch.device, cfg: dict) -> tuple[torch.nn.Module, torch.Tensor]:
    """The ``mc_unet`` case: the 3-class example UNet (seeded weights, eval mode) and its input ``1x1xS^3``."""
    from monai_unc.data.model import build_example_network

    torch.manual_seed(0)
    net = build_example_network().to(dev).eval()
    s = cfg["unet_size"]
    return net, torch.randn(1, 1, s, s, s, generator=torch.Generator().manual_seed(0)).to(dev)


def part_mc_unet(dev: torch.device, cfg: dict, out: Path) -> dict:
    """MC dropout on the 3-class example UNet at 96^3, whole volume, AMP off and on."""
    from monai.inferers import SimpleInferer

    net, x = _example_unet(dev, cfg)
    s = cfg["unet_size"]
    res: dict[str, Any] = {"shape": [1, s, s, s], "classes": 3}
    for amp in (False, True):
        res["amp" if amp else "fp32"] = _mc_compare(net, x, SimpleInferer(), "softmax", cfg["unet_n_time"],
                                                   cfg["n_mem"], dev, cfg["repeats"], amp, reference=True)
    ok = res["fp32"]["finite"] and res["amp"]["finite"]
    return {"ok": ok, **res}


def part_sw_stitch(dev: torch.device, cfg: dict, out: Path) -> dict:
    """Windows on the device, stitching on the CPU vs on the device (BraTS-sized case, 2 samples)."""
    from monai.inferers import SlidingWindowInferer

    from monai_unc.inferers import MCDropoutInferer

    net = _segresnet(dev, cfg)
    x = torch.randn(1, *cfg["brats_shape"], generator=torch.Generator().manual_seed(0))
    roi = (cfg["brats_roi"],) * 3
    res: dict[str, Any] = {}
    outs = {}
    for where in ("device", "cpu"):
        stitch = dev if where == "device" else torch.device("cpu")
        base = SlidingWindowInferer(roi, sw_batch_size=1, overlap=0.5, sw_device=dev, device=stitch)
        xin = x.to(dev) if where == "device" else x

        def run(base=base, xin=xin):
            return MCDropoutInferer(num_samples=2, activation="sigmoid", base_inferer=base, seed=0)(xin, net)

        res[f"stitch_{where}_s"] = best_time(run, dev, cfg["brats_repeats"])
        res[f"stitch_{where}_peak_mib"] = peak_mib(run, dev)
        o = run()
        outs[where] = o
        res[f"stitch_{where}_output_device"] = str(o["pred"].device)
    res["cpu_over_device_time"] = res["stitch_cpu_s"] / res["stitch_device_s"]
    # same seed, same windows: the two stitchings differ only by float summation on another device
    diff = (outs["device"]["pred"].cpu() - outs["cpu"]["pred"]).abs().max().item()
    res["max_abs_pred_diff"] = diff
    ok = res["stitch_cpu_output_device"] == "cpu" and (dev.type != "cuda" or res["stitch_device_output_device"]
                                                      .startswith("cuda"))
    return {"ok": ok, **res}


def calibration_volume(c: int, spatial: tuple[int, ...], g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The calibration part's CPU volume: probabilities ``softmax(2 N(0, 1))`` ``(1, c, *spatial)`` (confidences over
    all fine bins) and independent labels ``(1, *spatial)``, drawn from ``g`` in that order."""
    probs = torch.softmax(torch.randn(1, c, *spatial, generator=g) * 2, 1)
    return probs, torch.randint(0, c, (1, *spatial), generator=g)


def part_calibration(dev: torch.device, cfg: dict, out: Path) -> dict:
    """Confidence histogram + ECE on device tensors: GB/s, against torchmetrics on the same tensors."""
    from monai_unc.metrics.calibration import ConfidenceHistogram, ece

    c, *sp = cfg["cal_shape"]
    probs, labels = (t.to(dev) for t in calibration_volume(c, tuple(sp), torch.Generator().manual_seed(0)))

    def ours():
        h = ConfidenceHistogram(num_classes=c)
        h.update(probs, labels)
        return ece(h)

    res: dict[str, Any] = {"shape": [1, c, *sp]}
    nbytes = probs.numel() * probs.element_size() + labels.numel() * labels.element_size()
    t = best_time(ours, dev, cfg["repeats"])
    res["ours_s"] = t
    res["ours_gb_s"] = nbytes / t / 1e9
    res["read_s"] = best_time(lambda: (probs.sum(), labels.sum()), dev, cfg["repeats"])
    res["ours_over_one_read"] = t / res["read_s"]
    res["ours_peak_mib"] = peak_mib(ours, dev)
    res["ece"] = float(ours())
    h_cpu = ConfidenceHistogram(num_classes=c)
    h_cpu.update(probs.cpu(), labels.cpu())
    res["ece_cpu"] = float(ece(h_cpu))
    # the update alone: the fused kernel (Triton on CUDA, numba on the CPU) against the reference torch path
    from monai_unc.metrics.calibration import histogram as hist_module

    res["fused_kernel"] = hist_module._fused_backend(probs)

    def update():
        return ConfidenceHistogram(num_classes=c).update(probs, labels)

    res["update_s"] = best_time(update, dev, cfg["repeats"])
    res["update_gb_s"] = nbytes / res["update_s"] / 1e9
    res["update_over_one_read"] = res["update_s"] / res["read_s"]
    res["update_peak_mib"] = peak_mib(update, dev)
    h_dev = update()
    res["counts_equal_cpu"] = bool(torch.equal(h_dev.counts[:, : c + 1].cpu(), h_cpu.counts[:, : c + 1]))
    res["entropy_row_count_diff_cpu"] = int((h_dev.counts[:, c + 1].cpu() - h_cpu.counts[:, c + 1]).abs().sum())
    old_flag = hist_module.FUSED_KERNELS
    hist_module.FUSED_KERNELS = False
    try:
        res["reference_update_s"] = best_time(update, dev, cfg["repeats"])
        res["reference_update_peak_mib"] = peak_mib(update, dev)
        res["counts_equal_reference"] = bool(torch.equal(update().counts, h_dev.counts))
    finally:
        hist_module.FUSED_KERNELS = old_flag
    res["reference_over_fused"] = res["reference_update_s"] / res["update_s"]
    try:
        from torchmetrics.functional.classification import multiclass_calibration_error
    except ImportError:  # torchmetrics is a dev extra
        res["torchmetrics"] = "not installed"
    else:
        flat_p = probs.movedim(1, -1).reshape(-1, c)  # torchmetrics' layout, prepared outside the timing
        flat_y = labels.reshape(-1)

        def tm():
            return multiclass_calibration_error(flat_p, flat_y, num_classes=c, n_bins=15, norm="l1")

        res["torchmetrics_s"] = best_time(tm, dev, cfg["repeats"])
        res["torchmetrics_over_ours"] = res["torchmetrics_s"] / t
        res["torchmetrics_peak_mib"] = peak_mib(tm, dev)
    ok = abs(res["ece"] - res["ece_cpu"]) < 1e-6 and res["counts_equal_cpu"] and res["counts_equal_reference"]
    return {"ok": ok, **res}


def part_spatial(dev: torch.device, cfg: dict, out: Path) -> dict:
    """BUC, BA-ECE and SPACE on device tensors against their distance transforms and Gaussian alone."""
    from monai_unc.metrics import boundary, spatial

    shape = cfg["spatial_shape"]
    spacing = (2.0, 1.0, 1.0)
    zz, yy, xx = torch.meshgrid(*[torch.arange(s, dtype=torch.float32) for s in shape], indexing="ij")
    r = torch.sqrt(((zz - shape[0] / 2) * 2) ** 2 + (yy - shape[1] / 2) ** 2 + (xx - shape[2] / 2) ** 2)
    target = (r < 0.35 * shape[2]).long()
    pred = (r + 3 * torch.randn(shape, generator=torch.Generator().manual_seed(0)) < 0.35 * shape[2]).long()
    u = torch.exp(-((r - 0.35 * shape[2]) ** 2) / 20.0)
    u, pred, target = (t[None, None].to(dev) for t in (u, pred, target))
    del zz, yy, xx, r

    def metrics():
        return (spatial.boundary_uncertainty_concentration(u, pred, target, spacing=spacing),
                spatial.boundary_aware_ece(u, pred, target, spacing=spacing),
                spatial.spatial_calibration_error(u, pred, target, spacing=spacing))

    # cucim: the distance transforms run on the device (cuCIM installed: pip install 'monai-unc[cuda]'); else on
    # the CPU (the edt package or scipy), with a copy each way
    res: dict[str, Any] = {"shape": list(shape), "spacing_mm": list(spacing)}
    res["edt_backend"] = boundary._resolve_backend("auto", dev.type == "cuda", len(shape))

    def two_transforms():
        boundary.distance_to_boundary(pred[0, 0], spacing=spacing)
        boundary.distance_to_boundary(target[0, 0], spacing=spacing)
        spatial._gaussian(u[0, 0].double(), spatial._sigma_mm(2.0, 3), 4.0)

    def floor():
        # every transform the three metrics compute: BUC's distance to the predicted boundary and, with cuCIM, the two
        # directed transforms of HD95 (BUC's default width: dense transforms of the edges on the device; without
        # cuCIM a KD-tree on the host), BA-ECE's distance to the target boundary, SPACE's Gaussian. Before 2026-12-04
        # the floor left out HD95's two (``two_transforms``), which ran as a KD-tree on the host
        two_transforms()
        if res["edt_backend"] != "cucim":  # HD95 runs as a KD-tree on the host: no dense transform of its own
            return
        for m in (pred, target):
            boundary._cucim_distances(boundary.foreground_edges(m[0, 0] > 0), spacing)

    res["metrics_s"] = best_time(metrics, dev, cfg["repeats"])
    res["floor_s"] = best_time(floor, dev, cfg["repeats"])
    res["metrics_over_floor"] = res["metrics_s"] / res["floor_s"]
    res["two_transforms_s"] = best_time(two_transforms, dev, cfg["repeats"])
    res["metrics_over_two_transforms"] = res["metrics_s"] / res["two_transforms_s"]
    vals = metrics()
    cpu_vals = (spatial.boundary_uncertainty_concentration(u.cpu(), pred.cpu(), target.cpu(), spacing=spacing),
                spatial.boundary_aware_ece(u.cpu(), pred.cpu(), target.cpu(), spacing=spacing),
                spatial.spatial_calibration_error(u.cpu(), pred.cpu(), target.cpu(), spacing=spacing))
    res["values"] = [float(torch.as_tensor(v).reshape(-1)[0]) for v in vals]
    res["values_cpu"] = [float(torch.as_tensor(v).reshape(-1)[0]) for v in cpu_vals]
    res["output_devices"] = sorted({str(v.device) for v in vals if isinstance(v, torch.Tensor)})
    ok = all(abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in zip(res["values"], res["values_cpu"]))
    return {"ok": ok, **res}


def _nn_env(dev: torch.device, cfg: dict) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_nnunet import _plans  # the same plans as the CPU benchmark
    from nnunetv2.utilities.get_network_from_plans import get_network_from_plans
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

    pm = PlansManager(_plans(cfg["nn_features"], cfg["nn_patch"]))
    cm = pm.get_configuration("3d_fullres")
    torch.manual_seed(0)
    net = get_network_from_plans(cm.network_arch_class_name, cm.network_arch_init_kwargs,
                                 cm.network_arch_init_kwargs_req_import, 1, 3, deep_supervision=False)
    data = torch.randn(1, *cfg["nn_image"], generator=torch.Generator().manual_seed(1))
    dataset_json = {"channel_names": {"0": "MRI"}, "labels": {"background": 0, "a": 1, "b": 2}, "numTraining": 1,
                    "file_ending": ".nii.gz"}
    return {"pm": pm, "cm": cm, "net": net, "params": [{k: v.clone() for k, v in net.state_dict().items()}],
            "data": data, "dataset_json": dataset_json}


def part_nnunet(dev: torch.device, cfg: dict, out: Path) -> dict:
    """UncertaintyPredictor (dropout; mirroring) against stock nnUNetPredictor on the same device."""
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    from monai_unc.nnunet import UncertaintyPredictor

    env = _nn_env(dev, cfg)
    n = cfg["nn_samples"]
    threads = torch.get_num_threads()

    def init(pred):
        pred.manual_initialization(env["net"], env["pm"], env["cm"], env["params"], env["dataset_json"],
                                   "nnUNetTrainer", (0, 1, 2))
        return pred

    kw = {"device": dev, "perform_everything_on_device": dev.type == "cuda", "allow_tqdm": False}
    stock_nomirror = init(nnUNetPredictor(use_mirroring=False, **kw))
    stock_mirror = init(nnUNetPredictor(use_mirroring=True, **kw))
    ours_dropout = init(UncertaintyPredictor(("dropout",), num_samples=n, dropout_p=0.1, seed=0,
                                             use_mirroring=False, **kw))
    ours_mirror = init(UncertaintyPredictor(("mirroring",), **kw))
    torch.set_num_threads(threads)  # nnU-Net's predictor changes the thread count
    data = env["data"]
    res: dict[str, Any] = {"image": list(cfg["nn_image"]), "patch": cfg["nn_patch"],
                           "features": cfg["nn_features"], "dropout_samples": n}
    windows = len(stock_mirror._internal_get_sliding_window_slicers(data.shape[1:]))
    res["windows"] = windows
    res["stock_s"] = best_time(lambda: stock_nomirror.predict_logits_from_preprocessed_data(data), dev,
                               cfg["repeats"])
    res["ours_dropout_s"] = best_time(lambda: ours_dropout.predict_uncertainty_from_preprocessed_data(data), dev,
                                      cfg["repeats"])
    res["dropout_per_pass_over_stock"] = res["ours_dropout_s"] / (n * res["stock_s"])
    res["stock_mirror_s"] = best_time(lambda: stock_mirror.predict_logits_from_preprocessed_data(data), dev,
                                      cfg["repeats"])
    res["ours_mirror_s"] = best_time(lambda: ours_mirror.predict_uncertainty_from_preprocessed_data(data), dev,
                                     cfg["repeats"])
    res["mirror_over_stock"] = res["ours_mirror_s"] / res["stock_mirror_s"]
    # the mirroring-only mean segmentation from logits must equal stock's on the same device
    seg_stock = stock_mirror.predict_logits_from_preprocessed_data(data).float().argmax(0).cpu()
    r = ours_mirror.predict_uncertainty_from_preprocessed_data(data)
    seg_ours = torch.as_tensor(r.logits).float().argmax(0).cpu()
    res["segmentation_equal_stock"] = bool(torch.equal(seg_ours, seg_stock))
    torch.set_num_threads(threads)
    return {"ok": res["segmentation_equal_stock"], **res}


def part_cost(dev: torch.device, cfg: dict, out: Path) -> dict:
    """Shared passes: N samples against one stock pass (``bench_cost.py``), MONAI BasicUNet and nnU-Net."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_cost

    from monai_unc.nnunet import add_posthoc_dropout

    n = cfg["cost_samples"]
    on_cpu = dev.type == "cpu"
    threads = torch.get_num_threads()
    common = {"device": str(dev), "samples": n, "repeats": cfg["cost_repeats"], "threads": threads,
              "skip_full": True, "placements": list(bench_cost.PLACEMENTS)}
    # the automatic sample batch beside a fixed one of 2 (the automatic batch of the whole-batch rule on this case)
    args = argparse.Namespace(size=cfg["cost_size"], roi=cfg["cost_roi"], sw_batch=cfg["cost_sw_batch"],
                              features=list(cfg["cost_features"]), sample_batches=[2], **common)
    res: dict[str, Any] = {"samples": n, "monai": {"size": cfg["cost_size"], "roi": cfg["cost_roi"],
                                                   "sw_batch_size": cfg["cost_sw_batch"],
                                                   "features": list(cfg["cost_features"])},
                           "nnunet": {"image": list(cfg["nn_image"]), "patch": cfg["nn_patch"],
                                      "features": cfg["nn_features"]}}

    def ratios(times: dict, limit: float | None) -> dict:
        stock = times["stock"]
        r = {"stock_s": stock, "shared_over_stock": times["shared"] / stock}
        if limit is not None:
            r["limit_over_stock"] = limit / stock
        for k in ("full", "stock_n"):
            if k in times:
                r[f"{k}_over_stock"] = times[k] / stock
        for k in times:
            if k.startswith("k="):  # shared passes with a fixed sample batch
                r[f"shared_k{k[2:]}_over_stock"] = times[k] / stock
        return r

    for placement, r in bench_cost.timing(args)["placements"].items():
        t = r["cpu"] if on_cpu else r["wall"]
        limit = t["stock"] + (n - 1) * (r["stochastic_cpu"] if on_cpu else r["stochastic_wall"])
        res["monai"][placement] = ratios(t, limit)

    def case(placement: str) -> dict:
        env = _nn_env(dev, cfg)
        add_posthoc_dropout(env["net"], p=0.1, after=placement)
        return env

    nn_args = argparse.Namespace(**common)
    for placement, r in bench_cost.nnunet_timing(nn_args, case)["placements"].items():
        t = r["cpu"] if on_cpu else r["wall"]
        res["nnunet"][placement] = ratios(t, t.get("limit"))
    torch.set_num_threads(threads)
    values = [v for k in ("monai", "nnunet") for pl in bench_cost.PLACEMENTS for v in res[k][pl].values()]
    return {"ok": all(v == v and v > 0 for v in values), **res}


#: profiler event names of kernel launches, and of the runtime calls that may wait for the device: synchronisations,
#: copies (a device-to-host copy waits), allocations and frees (``cudaFree`` synchronises the device)
LAUNCH_EVENTS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")
SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync",
               "cudaMalloc", "cudaFree")


def _profile_call(fn: Callable[[], Any], dev: torch.device) -> tuple[dict, str]:
    """One call of ``fn`` (after a warm-up): wall and process CPU time, and under ``torch.profiler`` and ``cProfile``.

    Returns:
        ``(summary, report)``: the summary holds ``wall_s``, ``process_cpu_s`` (every thread of the process: the
        host's work, beside the wall time a host-bound call is near), ``launches`` (kernel launches), ``syncs`` (the
        counts of the :data:`SYNC_EVENTS` calls seen: synchronisations, copies, allocations), ``device_busy_s``
        (the summed time of the device's events: kernels, copies and sets, overlapping ones counted twice; None on
        the CPU) and
        ``ops`` (``aten`` operators called); the report the profiler's tables (by self CPU and self device time) and
        ``cProfile``'s 30 costliest Python functions (by own time).
    """
    import cProfile
    import io
    import pstats
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    fn()
    _sync(dev)
    t0 = time.perf_counter()
    fn()
    _sync(dev)
    wall = time.perf_counter() - t0
    c0 = time.process_time()
    fn()
    _sync(dev)
    host = time.process_time() - c0
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities) as prof:
        fn()
        _sync(dev)
    events = list(prof.events())
    names = Counter(e.name for e in events)
    kernels = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")]
    busy = sum(float(getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0) or 0)
               for e in kernels) / 1e6 if dev.type == "cuda" else None
    summary = {"wall_s": wall, "process_cpu_s": host, "launches": sum(names[k] for k in LAUNCH_EVENTS),
               "syncs": {k: names[k] for k in SYNC_EVENTS if names[k]}, "device_busy_s": busy,
               "ops": sum(n for k, n in names.items() if k.startswith("aten::"))}
    averages = prof.key_averages()
    report = [averages.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=70)]
    if dev.type == "cuda":
        for key in ("self_device_time_total", "self_cuda_time_total"):
            try:
                report.append(averages.table(sort_by=key, row_limit=20, max_name_column_width=70))
                break
            except (AttributeError, KeyError, ValueError):
                continue
    py = cProfile.Profile()
    py.enable()
    fn()
    _sync(dev)
    py.disable()
    text = io.StringIO()
    pstats.Stats(py, stream=text).sort_stats("tottime").print_stats(30)
    report.append(text.getvalue())
    return summary, "\n\n".join([json.dumps(summary, indent=1), *report])


def part_profile(dev: torch.device, cfg: dict, out: Path) -> dict:
    """Where one call's time goes: MC dropout on the ``mc_unet`` UNet against its bare passes, and the ``cost``
    part's BasicUNet with dropout in its last decoder stage against one stock pass (``profile_*.txt`` in ``out``)."""
    from monai.inferers import SimpleInferer

    from monai_unc.inferers import MCDropoutInferer

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_cost

    res: dict[str, Any] = {}
    reports: dict[str, list[str]] = {"mc_unet": [], "cost_last": []}
    net, x = _example_unet(dev, cfg)
    s, n = cfg["unet_size"], cfg["unet_n_time"]
    base = SimpleInferer()

    def bare() -> None:
        _bare_passes(net, x, base, n)

    def ours() -> None:
        MCDropoutInferer(num_samples=n, base_inferer=base, seed=0)(x, net)

    for name, fn in (("bare", bare), ("ours", ours)):
        res.setdefault("mc_unet", {})[name], text = _profile_call(fn, dev)
        reports["mc_unet"].append(f"=== {name}: {n} samples, {s}^3 ===\n{text}")
    args = argparse.Namespace(device=str(dev), size=cfg["cost_size"], roi=cfg["cost_roi"],
                              sw_batch=cfg["cost_sw_batch"], features=list(cfg["cost_features"]), network="basicunet")
    net_c, x_c, sw = bench_cost._setup(args, "last")
    for name, mode in (("stock", "stock"), ("ours", "shared")):
        res.setdefault("cost_last", {})[name], text = _profile_call(
            lambda mode=mode: bench_cost.run_mode(mode, net_c, x_c, sw, cfg["cost_samples"], str(dev)), dev)
        reports["cost_last"].append(f"=== {name} ===\n{text}")
    for key, texts in reports.items():
        atomic_write_text(out / f"profile_{key}.txt", "\n\n".join(texts))
    for key in res:
        a, b = res[key]["ours"], res[key]["bare" if key == "mc_unet" else "stock"]
        res[key]["extra_launches"] = a["launches"] - b["launches"]
        res[key]["wall_ratio"] = _ratio(a["wall_s"], b["wall_s"])
    runs = [r for k in res for r in res[k].values() if isinstance(r, dict)]
    ok = all(r["ops"] > 0 for r in runs)
    if dev.type == "cuda":  # the profiler saw the device (CUPTI): kernels launched and timed in every call
        ok = ok and all(r["launches"] > 0 and (r["device_busy_s"] or 0) > 0 for r in runs)
    return {"ok": ok, **res}


def part_writes(dev: torch.device, cfg: dict, out: Path) -> dict:
    """A case's ``.nii.gz`` outputs written on the host's cores against ``nib.save`` (``bench_writes.py``)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_writes

    threads = os.cpu_count() or 1
    quick = cfg["writes_shape"] == QUICK["writes_shape"]  # the rehearsal: in this process (no child, no peak)
    rows = bench_writes.measure(tuple(cfg["writes_shape"]), 4, threads, 1, isolate=not quick)
    ref = rows["nib_1"]["s"]
    return {"ok": all(r["s"] > 0 for r in rows.values()), "shape": list(cfg["writes_shape"]), "threads": threads,
            "raw_mib": rows["nib_1"]["raw_mib"], "nib_save_s": ref,
            "ours_1_over_nib": rows["ours_1"]["s"] / ref, "ours_all_over_nib": rows[f"ours_{threads}"]["s"] / ref,
            "peak_mib_ours_all": rows[f"ours_{threads}"].get("peak_mib"),
            # the same writers with zlib (python-isal absent), and the sizes written: ISA-L's level 1 against zlib's
            "zlib_all_over_nib": rows[f"zlib_{threads}"]["s"] / ref if f"zlib_{threads}" in rows else None,
            "written_mib_nib": rows["nib_1"]["mib"], "written_mib_ours": rows[f"ours_{threads}"]["mib"]}


FUNCS: dict[str, Callable[[torch.device, dict, Path], dict]] = {
    "cuda_tests": part_cuda_tests, "device": part_device, "mc_brats": part_mc_brats, "mc_unet": part_mc_unet,
    "sw_stitch": part_sw_stitch, "calibration": part_calibration, "spatial": part_spatial, "nnunet": part_nnunet,
    "cost": part_cost, "writes": part_writes, "profile": part_profile,
}


# ------------------------------------------------------------------------------------------------------ report
def _md_table(results: dict) -> str:
    dev = results.get("device", {})
    lines = [f"GPU check on **{dev.get('name', '?')}** (torch {dev.get('torch', '?')}, CUDA {dev.get('cuda', '-')}), "
             f"{results['_meta']['mode']} mode, {results['_meta']['seconds']:.0f} s in all.", "",
             "| part | result | figures |", "| --- | --- | --- |"]

    def fig(name: str, d: dict) -> str:
        if name == "cuda_tests":
            s = f"{d.get('passed')} passed, {d.get('failures', 0) + d.get('errors', 0)} failed, " \
                f"{d.get('skipped')} skipped in {d.get('seconds', 0):.0f} s"
            if d.get("paths") not in (None, ["tests"]):
                s += f" (only {', '.join(d['paths'])})"
            return s + "".join(f"; FAILED {f['test']}" for f in d.get("failed", [])[:5])
        if name == "device":
            return (f"copy bandwidth {d.get('copy_gb_s', 0):.0f} GB/s (read + write); Triton kernels: "
                    f"{d.get('triton', '?')}")
        if name in ("mc_brats", "mc_unet"):
            parts = []
            for k in ("fp32", "amp"):
                m = d.get(k, {})
                lo, hi = results["_meta"]["n_mem"]
                ref = m.get("overhead_vs_bare_reference")
                ref = "" if ref is None else f" (reference update {100 * ref:.1f} %)"
                sep = m.get("overhead_vs_bare_separate")
                ref += "" if sep is None else f" (activation as a separate step {100 * sep:.1f} %)"
                fused = {True: "fused update", False: "reference update"}.get(m.get("fused_update"), "")
                fused += " of the outputs" if m.get("fused_outputs") else ""
                full = m.get("overhead_vs_bare_full_passes")
                full = "" if full is None else f" (full passes {100 * full:.1f} %)"
                traced = m.get("overhead_vs_bare_traced")
                full += "" if traced is None else f" (first call, traced: {100 * traced:.1f} %)"
                over = 100 * m.get("overhead_vs_bare", float("nan"))
                parts.append(f"{k}: overhead {over:.1f} % ({fused}){ref}{full} "
                             f"over {m.get('n_time')} bare passes, stack-then-reduce "
                             f"{m.get('stack_over_stream', 0):.2f}x our time, peak N={hi}/N={lo} "
                             f"{_fmt(m.get('memory_ratio'))} "
                             f"({_fmt(m.get(f'peak_mib_n{hi}'), 0)} MiB; stack N={m.get('n_time')}: "
                             f"{_fmt(m.get('stack_peak_mib_n' + str(m.get('n_time'))), 0)} MiB)")
            return "; ".join(parts)
        if name == "sw_stitch":
            return (f"stitch on CPU {d.get('stitch_cpu_s', 0):.2f} s vs on device {d.get('stitch_device_s', 0):.2f} s; "
                    f"peak {_fmt(d.get('stitch_cpu_peak_mib'), 0)} vs {_fmt(d.get('stitch_device_peak_mib'), 0)} MiB")
        if name == "calibration":
            copy = results.get("device", {}).get("copy_gb_s")
            share = f"{100 * d.get('update_gb_s', 0) / copy:.0f} % of the copy bandwidth" if copy else "-"
            return (f"{d.get('ours_gb_s', 0):.0f} GB/s with ECE ({d.get('ours_over_one_read', 0):.1f}x one read); "
                    f"update alone ({d.get('fused_kernel') or 'reference path'}) {d.get('update_gb_s', 0):.0f} GB/s, "
                    f"{share}, {d.get('update_over_one_read', 0):.1f}x one read, reference path "
                    f"{_fmt(d.get('reference_over_fused'))}x its time; counts equal to the CPU's: "
                    f"{d.get('counts_equal_cpu')} (entropy row differs by {d.get('entropy_row_count_diff_cpu')}); "
                    f"torchmetrics {_fmt(d.get('torchmetrics_over_ours'))}x our time")
        if name == "spatial":
            count = 4 if d.get("edt_backend") == "cucim" else 2
            return (f"{d.get('metrics_s', 0):.3f} s, {d.get('metrics_over_floor', 0):.2f}x their transforms ({count} "
                    f"distance transforms + the Gaussian; {_fmt(d.get('metrics_over_two_transforms'))}x the 2 + "
                    f"Gaussian of earlier runs; distance transforms: {d.get('edt_backend', '?')})")
        if name == "cost":
            cells = []
            for net in ("monai", "nnunet"):
                rows = []
                for pl in ("auto", "decoder", "last"):
                    c = d.get(net, {}).get(pl, {})
                    full = c.get("full_over_stock")
                    two = c.get("shared_k2_over_stock")
                    rows.append(f"{pl} {_fmt(c.get('shared_over_stock'))}x (limit {_fmt(c.get('limit_over_stock'))}x"
                                + (f", full {_fmt(full)}x" if full is not None else "")
                                + (f", 2 samples a replay {_fmt(two)}x" if two is not None else "") + ")")
                cells.append(("BasicUNet" if net == "monai" else "nnU-Net") + ": " + ", ".join(rows))
            return f"{d.get('samples')} samples / one stock pass: " + "; ".join(cells)
        if name == "writes":
            return (f"a case's .nii.gz outputs ({d.get('raw_mib', 0):.0f} MiB raw): nib.save "
                    f"{d.get('nib_save_s', 0):.2f} s; ours {_fmt(d.get('ours_1_over_nib'))}x its time on 1 thread, "
                    f"{_fmt(d.get('ours_all_over_nib'))}x on {d.get('threads')}")
        if name == "profile":
            cells = []
            for key, label, unit in (("mc_unet", "UNet MC dropout", "bare passes"),
                                     ("cost_last", "BasicUNet last stage", "one stock pass")):
                a, b = d.get(key, {}).get("ours", {}), d.get(key, {}).get("bare" if key == "mc_unet" else "stock", {})
                busy = a.get("device_busy_s")
                host, host_unit = 1e3 * a.get("process_cpu_s", 0), 1e3 * b.get("process_cpu_s", 0)
                cells.append(f"{label}: {_fmt(d.get(key, {}).get('wall_ratio'))}x the wall time of the {unit}, "
                             f"{a.get('launches')} launches ({b.get('launches')}), host {_fmt(host, 1)} ms "
                             f"({_fmt(host_unit, 1)}), "
                             + ("" if busy is None else f"device {_fmt(1e3 * busy, 1)} ms, ")
                             + f"sync/copy/alloc calls {a.get('syncs')}")
            return "; ".join(cells) + " (profile_*.txt)"
        if name == "nnunet":
            return (f"dropout {_fmt(d.get('dropout_per_pass_over_stock'))}x stock per pass; mirroring "
                    f"{_fmt(d.get('mirror_over_stock'))}x stock; segmentation equal: "
                    f"{d.get('segmentation_equal_stock')}")
        return ""

    for name in PARTS:
        if name not in results:
            continue
        d = results[name]
        if d.get("not_run"):
            lines.append(f"| {name} | not run | {d['not_run']} |")
        elif "error" in d:
            lines.append(f"| {name} | ERROR | {d['error'][:200]} |")
        else:
            lines.append(f"| {name} | {'ok' if d.get('ok') else 'FAILED'} | {fig(name, d)} |")
    return "\n".join(lines) + "\n"


def _fmt(x: Any, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for gpu_check.json, gpu_check.md and the test log")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (the CPU rehearsal CI runs)")
    ap.add_argument("--skip-tests", action="store_true", help="benchmarks only (no pytest -m cuda)")
    ap.add_argument("--tests", nargs="+", metavar="PATH", default=["tests"],
                    help="test files or folders (relative to the checkout) of the cuda_tests part (default: tests,"
                         " i.e. every device test)")
    ap.add_argument("--only", nargs="+", choices=PARTS, help="run these parts only")
    ap.add_argument("--budget-s", type=float, default=480.0,
                    help="skip the parts not started once this many seconds have passed (default 480)")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("--device cuda: CUDA is not available on this machine (use --device cpu --quick to rehearse)",
              file=sys.stderr)
        return 2
    cfg = dict(QUICK if args.quick else FULL)
    missing = [p for p in args.tests if not (ROOT / p).exists()]
    if missing:
        print(f"--tests: no such path in {ROOT}: {', '.join(missing)}", file=sys.stderr)
        return 2
    cfg["tests"] = list(args.tests)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = list(args.only or PARTS)
    if args.skip_tests and "cuda_tests" in parts:
        parts.remove("cuda_tests")
    if "device" not in parts:
        parts.insert(0, "device")
    results: dict[str, Any] = {"_meta": {"mode": "quick" if args.quick else "full", "n_mem": cfg["n_mem"],
                                         "argv": sys.argv[1:] if argv is None else argv}}
    t_start = time.perf_counter()
    # the device facts first, the tests next (a failure there matters most), then the benchmarks
    order = ["device"] + [p for p in PARTS if p in parts and p != "device"]
    for name in order:
        if time.perf_counter() - t_start > args.budget_s:
            results[name] = {"ok": False, "not_run": f"time budget of {args.budget_s:.0f} s spent"}
            print(f"[gpu-check] {name}: skipped (budget)", flush=True)
            continue
        t0 = time.perf_counter()
        try:
            res = FUNCS[name](dev, cfg, out)
        except Exception as e:  # record and go on: one call must report everything
            res = {"ok": False, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        finally:
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        res["part_s"] = time.perf_counter() - t0
        results[name] = {k: _r(v) for k, v in res.items()}
        status = "ok" if res.get("ok") else ("ERROR " + res["error"] if "error" in res else "FAILED")
        print(f"[gpu-check] {name}: {status} ({res['part_s']:.1f} s)", flush=True)
        # write after every part: a run stopped by a time limit still leaves what it measured
        results["_meta"]["seconds"] = time.perf_counter() - t_start
        _write(out, results)
    results["_meta"]["seconds"] = time.perf_counter() - t_start
    _write(out, results)
    print((out / "gpu_check.md").read_text(encoding="utf-8"))
    bad = [k for k, v in results.items() if not k.startswith("_") and not v.get("ok")]
    print(f"[gpu-check] {len(order) - len(bad)} of {len(order)} parts ok" + (f"; not ok: {bad}" if bad else ""))
    return 1 if bad else 0


def _write(out: Path, results: dict) -> None:
    atomic_write_text(out / "gpu_check.json", json.dumps(results, indent=1, default=str) + "\n")
    atomic_write_text(out / "gpu_check.md", _md_table(results))


if __name__ == "__main__":
    sys.exit(main())
