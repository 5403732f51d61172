"""Memory of the uncertainty inferers (#30): the options that cut it, and estimate_memory against measured peak RSS."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from monai.inferers import SlidingWindowInferer

from monai_unc.inferers import ARGMAX, FlipSource, MCDropoutInferer, UncertaintyInferer, estimate_memory
from monai_unc.stats import accumulation_error_bound
from tests._paths import ROOT


def _net(c: int, p: float = 0.2) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(p), torch.nn.Conv3d(4, c, 1)
    ).eval()


def _run(c: int, x: torch.Tensor, net=None, **kw):
    base = SlidingWindowInferer((8, 8, 8), overlap=0.5)
    net = net if net is not None else _net(c)
    return MCDropoutInferer(num_samples=4, base_inferer=base, seed=0, **kw)(x, net)


def test_defaults_equal_the_float64_per_class_path_for_few_classes():
    """Up to 16 classes the default sums are float64: only the variance moment changes (rounding)."""
    x = torch.randn(1, 1, 12, 12, 12)
    new = _run(3, x)
    old = _run(3, x, accum_dtype=torch.float64, class_variance=True)
    assert list(new) == list(old)
    for k in old:
        if k == "variance":
            torch.testing.assert_close(new[k], old[k], rtol=0, atol=1e-6)
        else:
            assert torch.equal(new[k], old[k]), k


def test_many_classes_within_the_float32_bound_of_float64():
    c = 40
    x = torch.randn(1, 1, 12, 12, 12)
    new = _run(c, x)
    ref = _run(c, x, accum_dtype=torch.float64, class_variance=True)
    bound = accumulation_error_bound(4)
    eps = torch.finfo(torch.float32).eps
    pe = ref["predictive_entropy"].double()
    tol = {"pred": bound * ref["pred"].double() + eps * ref["pred"].double(),
           "predictive_entropy": (bound + 4 * c * eps) * (pe + 1),
           "mutual_information": (bound + 4 * c * eps) * (2 * pe + 1),
           "window_disagreement": (bound + 4 * c * eps) * (2 * pe + 1),
           "expected_entropy": (bound + 4 * eps) * (ref["expected_entropy"].double() + 1),
           "one_minus_max_prob": torch.tensor(bound + 2 * eps),
           "variance": torch.tensor((3 * bound + 4 * c * eps) / c + 2 * eps)}
    assert set(tol) == set(ref)
    for k in ref:
        assert bool(((new[k].double() - ref[k].double()).abs() <= tol[k]).all()), k


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_pred_dtype(dtype):
    x = torch.randn(1, 1, 12, 12, 12)
    ref = _run(20, x)
    out = _run(20, x, pred_dtype=dtype)
    assert out["pred"].dtype == dtype and list(out) == list(ref)
    torch.testing.assert_close(out["pred"].float(), ref["pred"], rtol=0, atol=torch.finfo(dtype).eps)
    assert torch.equal(out["mutual_information"], ref["mutual_information"])


def test_pred_dtype_none_keeps_the_argmax_only():
    x = torch.randn(1, 1, 12, 12, 12)
    ref = _run(20, x)
    out = _run(20, x, pred_dtype=None)
    assert "pred" not in out and out[ARGMAX].dtype == torch.uint8 and out[ARGMAX].shape == (1, 1, 12, 12, 12)
    assert torch.equal(out[ARGMAX].long(), ref["pred"].argmax(1, keepdim=True))
    for k in ref:
        if k != "pred":
            assert torch.equal(out[k], ref[k]), k
    with pytest.raises(ValueError, match="pred_dtype"):
        UncertaintyInferer(keys=["pred"], pred_dtype=None)
    with pytest.raises(ValueError, match="pred_dtype"):
        UncertaintyInferer(pred_dtype=torch.int8)
    with pytest.raises(TypeError, match="accum_dtype"):
        UncertaintyInferer(accum_dtype="float32")


def test_estimate_memory_arguments_and_ordering():
    shape, roi = (128, 128, 128), (64, 64, 64)
    d = estimate_memory(shape, 105, roi_size=roi)
    stock = estimate_memory(shape, 105, roi_size=roi, stock=True)
    legacy = estimate_memory(shape, 105, roi_size=roi, accum_dtype=torch.float64, class_variance=True)
    assert d.total <= 1.5 * stock.total < legacy.total
    assert sum(d.parts.values()) == d.total
    assert estimate_memory(shape, 3, roi_size=roi).total < d.total
    with pytest.raises(ValueError, match="num_classes"):
        estimate_memory(shape, 0)
    with pytest.raises(ValueError, match="shape"):
        estimate_memory((0, 4, 4), 3)
    with pytest.raises(ValueError, match="roi_size"):
        estimate_memory(shape, 3, roi_size=(8, 8))
    with pytest.raises(ValueError, match="network_bytes_per_voxel"):
        estimate_memory(shape, 3, network_bytes_per_voxel=-1)


_MEASURE = r"""
import gc, json, resource, sys, torch
from monai.inferers import SlidingWindowInferer
from monai_unc.inferers import MCDropoutInferer, estimate_memory
torch.set_num_threads(1)
c, size, roi, modes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
def peak():  # VmHWM: ru_maxrss would inherit the parent's (pytest's) RSS across fork and exec
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
def reset_peak():  # VmHWM back to the current RSS (Linux >= 4.0): the warm-up's and earlier modes' peaks do not count
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # then the caller runs one mode per process
        pass
def measure(mode):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Dropout3d(0.1),
                              torch.nn.Conv3d(8, c, 1)).eval()
    opts = {"defaults": {}, "legacy": {"accum_dtype": torch.float64, "class_variance": True}, "stock": {},
            "shared": {"sample_batch_size": 4}, "kept": {"keep_samples": True}}[mode]
    def run(x, r):
        base = SlidingWindowInferer((r,) * 3, overlap=0.25)
        if mode == "stock":
            return torch.softmax(base(x, net), 1)
        return MCDropoutInferer(num_samples=9 if mode == "shared" else 3, base_inferer=base, seed=0, **opts)(x, net)
    terms = {"kept_samples": 3} if mode == "kept" else {}
    if mode == "shared":  # the shared-pass terms, measured on one window
        from monai_unc.inferers import SharedPasses, enable_mc_dropout
        with torch.no_grad(), enable_mc_dropout(net):
            passes = SharedPasses(net)
            w = torch.randn(1, 1, 12, 12, 12)
            passes.trace(net, w)
        terms = {"sample_batch": 4, "shared_bytes_per_voxel": passes.shared_bytes / w.numel(),
                 "stochastic_bytes_per_voxel": passes.stochastic_bytes / w.numel(),
                 "copied_bytes_per_voxel": passes.copied_bytes / w.numel()}
    with torch.no_grad():
        run(torch.randn(1, 1, 12, 12, 12), 6)  # load every code path first: the peak below is the case's own
        x = torch.randn(1, 1, size, size, size)
        gc.collect()
        reset_peak()
        r0 = rss()
        out = run(x, roi)
        top = peak()
    del out, x
    gc.collect()
    inferer_opts = {k: v for k, v in opts.items() if k not in ("sample_batch_size", "keep_samples")}
    est = estimate_memory((size,) * 3, c, roi_size=(roi,) * 3, network_bytes_per_voxel=100, stock=mode == "stock",
                          **inferer_opts, **terms)
    return {"measured": top - r0, "estimate": est.total}
print(json.dumps({mode: measure(mode) for mode in modes}))
"""
MODES = ("defaults", "legacy", "stock", "shared", "kept")


def _measure_peaks() -> dict:
    """The peaks of :data:`MODES` (``{mode: {"measured", "estimate"}}``), measured as the test below says."""
    # a fixed mmap threshold: every tensor above 128 KiB is mapped and unmapped, so RSS follows the live tensors
    # (glibc's dynamic threshold otherwise keeps freed blocks of up to 32 MiB in the heap, slack that depends on the
    # order of allocations)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="131072")
    # without a peak reset (no writable clear_refs), one fresh process per mode
    groups = [MODES] if os.access("/proc/self/clear_refs", os.W_OK) else [(m,) for m in MODES]
    got: dict = {}
    for modes in groups:
        # 32 classes (above FLOAT64_MAX_CLASSES: float32 sums, as 64 did): every peak above 80 MiB at half the time
        res = subprocess.run([sys.executable, "-c", _MEASURE, "32", "72", "36", *modes], capture_output=True,
                             text=True, env=env, cwd=ROOT, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        got.update(json.loads(res.stdout.strip().splitlines()[-1]))
    return got


@pytest.mark.slow
def test_estimate_memory_within_15_percent_of_measured_peak():
    """Every mode of :data:`MODES` measured in one fresh process (one import instead of five), one after another:
    the peak is reset to the current RSS before each call (``/proc/self/clear_refs``), and every mode's tensors are
    freed (and, above the fixed mmap threshold, unmapped) before the next one starts, so each peak is the call's own.
    Peak RSS is the process's own (other processes on the machine do not change it, unlike free memory; tracemalloc
    would not see torch's allocations); the network's activations are given as 100 bytes per window voxel.

    One test for the five modes, not one per mode: the measurement is one process, and pytest-xdist would otherwise
    hand the modes to both workers, one of which then waits (about 35 s) for the other's measurement."""
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("needs /proc (Linux) to read RSS")
    peaks = _measure_peaks()
    assert set(peaks) == set(MODES)
    small = {m: got for m, got in peaks.items() if got["measured"] <= 50 * 2**20}
    assert not small, small  # large enough that allocator noise does not dominate
    off = {m: got for m, got in peaks.items() if abs(got["estimate"] - got["measured"]) > 0.15 * got["measured"]}
    assert not off, off


@pytest.mark.cuda
def test_memory_options_on_device(cuda_device):
    """float32 sums (many classes), the one-channel variance, pred_dtype and argmax on the device vs the CPU.

    Flip test-time augmentation is deterministic, so the device run must match the CPU run up to the order of float
    reductions."""
    c = 24
    net = _net(c)
    x = torch.randn(1, 1, 12, 12, 12)

    def run(xx, nn_, **kw):
        base = SlidingWindowInferer((8, 8, 8), overlap=0.5)
        return UncertaintyInferer([FlipSource("all")], base_inferer=base, **kw)(xx, nn_)

    ref = run(x, net, pred_dtype=torch.float16)
    dnet = _net(c).to(cuda_device)
    out = run(x.to(cuda_device), dnet, pred_dtype=torch.float16)
    assert out["pred"].dtype == torch.float16 and list(out) == list(ref)
    for k, v in out.items():
        assert v.device.type == cuda_device.type, k
        torch.testing.assert_close(v.cpu().float(), ref[k].float(), rtol=1e-3, atol=1e-4)
    lab = run(x.to(cuda_device), dnet, pred_dtype=None)[ARGMAX]
    assert lab.device.type == cuda_device.type and lab.dtype == torch.uint8
    ref_lab = run(x, net, pred_dtype=torch.float32)["pred"].argmax(1, keepdim=True)
    assert float((lab.cpu().long() == ref_lab).float().mean()) >= 0.999  # ties may break differently
