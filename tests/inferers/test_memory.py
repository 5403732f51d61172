"""Memory of the uncertainty inferers (#30): the options that cut it, and estimate_memory against measured peak RSS."""

from __future__ import annotations

import json
import math
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



def test_estimate_memory_counts_sw_batch_size_windows_per_call():
    """Found by hostile testing: ``sw_batch_size`` (MONAI runs that many windows per network call) was not an
    argument, and four windows per call measured 107 MiB against 59 MiB estimated. Every term of a window counts
    ``sw_batch_size`` windows: the window's work and the previous call's means, nothing of the case's buffers."""
    shape, roi = (128, 128, 128), (64, 64, 64)
    one = estimate_memory(shape, 32, roi_size=roi, network_bytes_per_voxel=100, fused_update=True)
    four = estimate_memory(shape, 32, roi_size=roi, network_bytes_per_voxel=100, fused_update=True, sw_batch_size=4)
    assert one.phase == four.phase == "stitching"
    assert four.parts["window"] == 4 * one.parts["window"]
    assert {k: v for k, v in four.parts.items() if k != "window"} == {k: v for k, v in one.parts.items()
                                                                    if k != "window"}
    # the shared passes' terms are per window too
    shared = {"sample_batch": 4, "shared_bytes_per_voxel": 64.0, "stochastic_bytes_per_voxel": 160.0}
    a = estimate_memory(shape, 32, roi_size=roi, fused_update=True, **shared)
    b = estimate_memory(shape, 32, roi_size=roi, fused_update=True, sw_batch_size=4, **shared)
    assert b.parts["window"] == 4 * a.parts["window"] > 4 * one.parts["window"]
    # no effect in one pass, and one window where the window covers the case
    assert estimate_memory(shape, 32, sw_batch_size=4) == estimate_memory(shape, 32)
    assert (estimate_memory(shape, 32, roi_size=(128, 128, 200), sw_batch_size=4)
            == estimate_memory(shape, 32, roi_size=(128, 128, 200)))


@pytest.mark.parametrize("shape, roi, overlap", [
    ((128, 128, 128), (64, 64, 64), 0.25), ((96, 70, 33), (32, 32, 16), 0.5),
    ((40, 40, 40), (32, 40, 8), (0.0, 0.5, 0.9)),
])
def test_estimate_memory_counts_at_most_the_cases_windows(shape, roi, overlap):
    """With ``overlap`` a call holds at most the case's windows, counted as MONAI's sliding window visits them."""
    from monai.data.utils import dense_patch_slices

    per_axis = (overlap,) * 3 if isinstance(overlap, float) else overlap
    interval = [r if r == s else max(int(r * (1 - o)), 1) for s, r, o in zip(shape, roi, per_axis)]
    n = len(dense_patch_slices(shape, roi, interval))
    est = {k: estimate_memory(shape, 8, roi_size=roi, sw_batch_size=k, overlap=overlap, fused_update=True).total
           for k in (n - 1, n, n + 1, 10 * n)}
    assert est[n - 1] < est[n] == est[n + 1] == est[10 * n]
    assert estimate_memory(shape, 8, roi_size=roi, sw_batch_size=n + 1, fused_update=True).total > est[n]


def test_estimate_memory_counts_the_earlier_members_of_an_ensemble():
    """Found by hostile testing: three members at 96^3 with 32 classes measured 272 MiB against 151 MiB estimated;
    from the second member on, the merged statistics of the earlier ones (as large as the stitching buffers) are
    kept while the member's windows are stitched into fresh buffers."""
    shape, roi = (96, 96, 96), (48, 48, 48)
    one = estimate_memory(shape, 32, roi_size=roi)
    three = estimate_memory(shape, 32, roi_size=roi, ensemble_members=3)
    assert three.phase == "stitching"
    assert three.parts["earlier members"] == one.parts["stitching buffers"]
    assert three.total == one.total + three.parts["earlier members"]
    assert estimate_memory(shape, 32, roi_size=roi, ensemble_members=2) == three  # one set, whatever M
    flat = estimate_memory(shape, 32, ensemble_members=3)  # one pass: the means in the accumulation dtype
    assert flat.parts["earlier members"] == 96**3 * 4 * (32 + 1 + 1 + 1)
    with pytest.raises(ValueError, match="ensemble_members"):
        estimate_memory(shape, 32, ensemble_members=0)


def test_estimate_memory_one_pass_counts_the_network_or_the_probabilities():
    """Found by hostile testing: in one pass (``SimpleInferer``) the estimate was 24-35 % above the measured peak: the
    network's activations were added to the probabilities (they are freed before the probabilities are made) and
    counted again in the final phase."""
    shape, c = (64, 64, 64), 32
    v = 64**3
    base = estimate_memory(shape, c, fused_update=True)
    assert base.phase == "stitching"
    assert estimate_memory(shape, c, network_bytes_per_voxel=4 * c, fused_update=True) == base  # below the probs
    more = estimate_memory(shape, c, network_bytes_per_voxel=4 * c + 10, fused_update=True)
    assert more.total == base.total + 10 * v
    # sums (C + 2 channels), logits and probabilities, 4 bytes each
    assert base.total == v * 4 * (c + 2) + 2 * v * 4 * c


@pytest.mark.parametrize("name, value, error", [
    ("sw_batch_size", 0, ValueError), ("sw_batch_size", 2.0, ValueError), ("sw_batch_size", True, ValueError),
    ("ensemble_members", 0, ValueError), ("ensemble_members", "3", ValueError), ("overlap", 1.0, ValueError),
    ("overlap", -0.1, ValueError), ("overlap", (0.25, 0.25), ValueError), ("overlap", "0.25", TypeError),
    ("overlap", True, TypeError), ("overlap", [0.25, None, 0.25], TypeError),
])
def test_estimate_memory_refuses_bad_window_and_member_counts(name, value, error):
    with pytest.raises(error, match=name):
        estimate_memory((64, 64, 64), 3, roi_size=(32, 32, 32), **{name: value})

@pytest.mark.parametrize("kw, error", [
    ({"shape": (64.7, 64, 64)}, TypeError), ({"shape": (True, 64, 64)}, TypeError), ({"shape": "64"}, TypeError),
    ({"roi_size": (32.5, 32, 32)}, TypeError), ({"pred_dtype": torch.int8}, TypeError),
    ({"pred_dtype": "float16"}, TypeError), ({"input_dtype": torch.int8}, TypeError),
    ({"input_dtype": "float32"}, TypeError), ({"network_bytes_per_voxel": "100"}, TypeError),
])
def test_estimate_memory_refuses_sizes_and_dtypes_it_would_misread(kw, error):
    """Found by hostile testing: a size of 64.7 was truncated to 64, True counted as 1 voxel, the string "64" was
    read as the shape (6, 4), and integer dtypes (which the inferers refuse) were estimated; a string dtype or
    network_bytes_per_voxel failed inside torch or a comparison without naming the argument."""
    args = {"shape": (64, 64, 64), "roi_size": (32, 32, 32), **kw}
    name = next(iter(kw))
    with pytest.raises(error, match=name):
        estimate_memory(args.pop("shape"), 3, **args)
    import numpy as np

    assert estimate_memory((np.int64(64),) * 3, 3, roi_size=(32, 32, 32)) == estimate_memory((64,) * 3, 3,
                                                                                           roi_size=(32, 32, 32))



@pytest.mark.parametrize("name", ["network_bytes_per_voxel", "shared_bytes_per_voxel", "stochastic_bytes_per_voxel",
                                  "copied_bytes_per_voxel"])
@pytest.mark.parametrize("value, error", [("1", TypeError), (True, TypeError), (math.inf, ValueError),
                                          (math.nan, ValueError), (-1.0, ValueError)])
def test_estimate_memory_refuses_bad_bytes_per_voxel_naming_them(name, value, error):
    """Found by hostile testing: a string shared-pass size failed with Python's unnamed ``'>=' not supported``, an
    infinite one (of any of the four) with ``OverflowError: cannot convert float infinity to integer``, and ``True``
    was counted as one byte per voxel."""
    with pytest.raises(error, match=name):
        estimate_memory((64, 64, 64), 3, roi_size=(32, 32, 32), **{"shared_bytes_per_voxel": 1.0, name: value})
    fine = estimate_memory((64, 64, 64), 3, roi_size=(32, 32, 32), sample_batch=2, **{name: 8})
    assert fine == estimate_memory((64, 64, 64), 3, roi_size=(32, 32, 32), sample_batch=2, **{name: 8.0})


_MEASURE = r"""
import gc, json, resource, sys, torch
from monai.inferers import SlidingWindowInferer
from monai_unc.inferers import EnsembleInferer, MCDropoutInferer, TTAInferer, estimate_memory
torch.set_num_threads(1)
c, roi, sizes = int(sys.argv[1]), int(sys.argv[2]), dict(a.split("=") for a in sys.argv[3:])  # mode=case size
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
def network(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Dropout3d(0.1),
                               torch.nn.Conv3d(8, c, 1)).eval()
def measure(mode, size):
    net = network(0)
    members = [net, network(1), network(2)] if mode == "ensemble" else []
    opts = {"legacy": {"accum_dtype": torch.float64, "class_variance": True}, "shared": {"sample_batch_size": 4},
            "shared_transforms": {"sample_batch_size": 4}, "shared_one_window": {"sample_batch_size": 4},
            "shared_rows": {"sample_batch_size": 8},
            "kept": {"keep_samples": True}, "sw_batch": {"share_passes": False},
            "one_pass": {"share_passes": False}}.get(mode, {})
    windows = 4 if mode in ("sw_batch", "shared_rows") else 1  # sw_batch_size: windows per network call
    def run(x, r):
        r = x.shape[-1] if mode == "shared_one_window" else r  # one window that covers the case
        base = SlidingWindowInferer((r,) * 3, overlap=0.25, sw_batch_size=windows) if mode != "one_pass" else None
        if mode == "stock":
            return torch.softmax(base(x, net), 1)
        if mode == "ensemble":
            return EnsembleInferer(members, base_inferer=base)(x)
        if mode in ("transforms", "shared_transforms"):  # MONAI invertible transforms: RandAffine's inverse is float64
            from monai.transforms import RandAffine, Rotate90, Zoom
            ts = [Rotate90(1, (0, 1)), RandAffine(prob=1.0, rotate_range=(0.2,) * 3, padding_mode="zeros"), Zoom(1.2)]
            if mode == "transforms":
                return TTAInferer(flip_axes=(), transforms=ts, base_inferer=base, seed=0)(x, net)
            # MC dropout beside deterministic ones under shared passes (a random transform draws anew on every call:
            # its samples run as full passes): each transformed window's 5 samples, traced one and replayed 4
            from monai_unc.inferers import InvertibleTransformSource, MCDropoutSource, UncertaintyInferer
            sources = [MCDropoutSource(5), InvertibleTransformSource([Rotate90(1, (0, 1)), Zoom(1.2)])]
            return UncertaintyInferer(sources, base_inferer=base, seed=0, **opts)(x, net)
        return MCDropoutInferer(num_samples=9 if mode.startswith("shared") else 3, base_inferer=base, seed=0,
                                **opts)(x, net)
    terms = {"kept_samples": 3} if mode == "kept" else {}
    if mode == "sw_batch":
        terms = {"sw_batch_size": windows, "overlap": 0.25}
    if mode == "ensemble":
        terms = {"ensemble_members": len(members)}
    if mode == "transforms":
        terms = {"inverse_dtype": torch.float64}
    if mode.startswith("shared"):  # the shared-pass terms, measured on one window (on a batch of four: shared_rows)
        from monai_unc.inferers import SharedPasses, enable_mc_dropout
        with torch.no_grad(), enable_mc_dropout(net):
            passes = SharedPasses(net)
            w = torch.randn(windows, 1, 12, 12, 12)
            passes.trace(net, w)
        terms = {"sample_batch": opts["sample_batch_size"], "shared_bytes_per_voxel": passes.shared_bytes / w.numel(),
                 "stochastic_bytes_per_voxel": passes.stochastic_bytes / w.numel(),
                 "copied_bytes_per_voxel": passes.copied_bytes / w.numel()}
        if windows > 1:
            terms.update(sw_batch_size=windows, overlap=0.25)
        if mode == "shared_transforms":
            terms["inverse_dtype"] = torch.float32  # Zoom's inverse returns float32
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
    inferer_opts = {k: v for k, v in opts.items() if k not in ("sample_batch_size", "keep_samples", "share_passes")}
    window = size if mode == "shared_one_window" else roi
    est = estimate_memory((size,) * 3, c, roi_size=None if mode == "one_pass" else (window,) * 3,
                          network_bytes_per_voxel=100, stock=mode == "stock", **inferer_opts, **terms)
    return {"measured": top - r0, "estimate": est.total}
print(json.dumps({mode: measure(mode, int(size)) for mode, size in sizes.items()}))
"""
MODES = ("defaults", "legacy", "stock", "shared", "shared_rows", "kept", "sw_batch", "ensemble", "one_pass",
         "transforms", "shared_transforms", "shared_one_window")
#: the case's size per mode, windows of 36^3 (36^3 float32 voxels: above the fixed mmap threshold below). 54^3 is
#: 2 x 2 x 2 windows (sw_batch_size 4: two calls, the second beside the first's means) at a third of the work of
#: 72^3 (3 x 3 x 3 windows) and every peak of those modes still above 65 MiB; the three modes whose peak would then
#: fall near 50 MiB (no window term beside the case's buffers, or one pass) keep 72^3. The claim (within 15 %) does
#: not depend on the size; the bugs the modes guard stay 30-60 % off at 54^3 (the sw_batch_size term left out: -61 %,
#: the earlier ensemble members: -31 %, the inversion of the transforms: -39 %).
SIZES = {mode: 72 if mode in ("defaults", "stock", "one_pass") else 54 for mode in MODES}


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
        # 32 classes (above FLOAT64_MAX_CLASSES: float32 sums, as 64 did), the case sizes of SIZES
        res = subprocess.run([sys.executable, "-c", _MEASURE, "32", "36", *(f"{m}={SIZES[m]}" for m in modes)],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        got.update(json.loads(res.stdout.strip().splitlines()[-1]))
    return got


@pytest.mark.slow
def test_estimate_memory_within_15_percent_of_measured_peak():
    """Every mode of :data:`MODES` measured in one fresh process (one import instead of eight), one after another:
    the peak is reset to the current RSS before each call (``/proc/self/clear_refs``), and every mode's tensors are
    freed (and, above the fixed mmap threshold, unmapped) before the next one starts, so each peak is the call's own.
    Peak RSS is the process's own (other processes on the machine do not change it, unlike free memory; tracemalloc
    would not see torch's allocations); the network's activations are given as 100 bytes per window voxel.

    Found by hostile testing, and guarded by the modes ``sw_batch`` (four windows per network call: the estimate ignored
    ``sw_batch_size``, -61 % at four windows on the 54^3 case of :data:`SIZES`), ``ensemble`` (three members: the
    earlier members' statistics, held while the next member is stitched, were not counted, -31 % at 54^3) and
    ``one_pass`` (``SimpleInferer``: the network's activations were counted beside the probabilities, which exist only
    after they are freed, and in the final phase as well, +24 %) and ``transforms`` (review 68: three MONAI invertible
    transforms; the copies of each output row that its inversion makes were left out, -39 % at 54^3) and
    ``shared_transforms`` (review 69: MC dropout beside two invertible transforms under shared passes, replays of four
    samples; the replay and the inversion after it were added, +13 %) and ``shared_one_window`` (review 69: shared
    passes in one window that covers the case; MONAI's buffers, allocated once the window has returned, were added to
    the window's work, +33 % at 72^3, the same share of the voxels at 54^3: the window is the case).

    One test for the modes, not one per mode: the measurement is one process, and pytest-xdist would otherwise
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


def test_the_final_chunk_of_a_gpu_case_is_the_larger_cuda_chunk():
    """Found by the review of the GPU paths: derive_measures derives the maps of a CUDA case in chunks of
    CUDA_CHUNK_ELEMENTS (16 M class-voxels: one chunk for most cases, temporaries of the whole map), and the model
    counted the CPU's 1 M-element chunks. The device is a name here: no GPU is needed."""
    from monai_unc.stats import CUDA_CHUNK_ELEMENTS, DEFAULT_CHUNK_ELEMENTS

    shape, c = (96, 96, 96), 4  # 3.5 M class-voxels: several CPU chunks, one CUDA chunk
    kw = {"roi_size": (48, 48, 48), "fused_update": True}
    cpu, gpu = estimate_memory(shape, c, **kw), estimate_memory(shape, c, device="cuda", **kw)
    assert cpu == estimate_memory(shape, c, device="cpu", **kw)
    v = 96**3
    assert DEFAULT_CHUNK_ELEMENTS < c * v <= CUDA_CHUNK_ELEMENTS
    if gpu.phase == "final" and cpu.phase == "final":
        assert gpu.parts["chunk temporaries"] == 3 * c * v * 4
        assert cpu.parts["chunk temporaries"] == 3 * DEFAULT_CHUNK_ELEMENTS * 4
    assert gpu.total > cpu.total


def test_estimate_memory_counts_the_inversion_of_invertible_transforms():
    """Found by review 68: ``InvertibleTransformSource`` (``TTAInferer(transforms=...)``) inverts each output row beside
    the logits: the row with a channel of ones, its inverse, the filled-in row (and its copy in the output dtype where
    the inverse returns another), the rows done and their stack. Left out, the estimate was 19-27 % below the
    measured peak under a sliding window and 50-64 % below in one pass (2-4 transforms)."""
    shape, c = (48, 48, 48), 32
    v = 48**3
    plain = estimate_memory(shape, c, fused_update=True)
    same = estimate_memory(shape, c, fused_update=True, inverse_dtype=torch.float32)
    wider = estimate_memory(shape, c, fused_update=True, inverse_dtype=torch.float64)
    sums, logits = v * 4 * (c + 2), v * 4 * c
    assert plain.parts["window"] == sums + logits + v * 4 * c  # the probabilities
    # one pass, one window: a row of C + 1 channels and its inverse, then the row and the stack (2 C)
    assert same.parts["window"] == sums + logits + v * (4 * (c + 1) * 2 + 2 * 4 * c)
    # a float64 inverse: the inverse and the filled-in row in float64, with its float32 copy
    assert wider.parts["window"] == sums + logits + v * ((c + 1) * (4 + 8) + 8 * c + 4 * c)
    # under a sliding window of four windows per call, one row (window) at a time beside the whole batch
    kw = {"roi_size": (24, 24, 24), "fused_update": True, "sw_batch_size": 4, "overlap": 0.0}
    one = estimate_memory(shape, c, inverse_dtype=torch.float32, **{**kw, "sw_batch_size": 1})
    four = estimate_memory(shape, c, inverse_dtype=torch.float32, **kw)
    row = 24**3
    assert four.parts["window"] - estimate_memory(shape, c, **kw).parts["window"] == (
        row * 4 * (c + 1) * 2 + 2 * 4 * row * 4 * c - 4 * row * 4 * c)
    assert one.total < four.total
    with pytest.raises(TypeError, match="inverse_dtype"):
        estimate_memory(shape, c, inverse_dtype="float32")
    with pytest.raises(TypeError, match="inverse_dtype"):
        estimate_memory(shape, c, inverse_dtype=torch.int64)
    with pytest.raises(ValueError, match="inverse_dtype"):
        estimate_memory(shape, c, roi_size=(24, 24, 24), stock=True, inverse_dtype=torch.float32)


def test_estimate_memory_counts_the_inversion_after_a_replay_not_beside_it():
    """Found by review 69: with MC dropout beside MONAI invertible transforms under shared passes, a replay's
    stochastic tensors are freed before its ``k`` outputs are inverted, but the estimate added the replay to the
    inversion (13 % above the measured peak: 9 samples replayed 4 at a time, two transforms; the measured mode
    ``shared_transforms`` above). The inversion phase holds the kept shared activations, the ``k`` samples' logits and
    one row's inversion beside the rows done; the window counts the larger phase."""
    shape, roi, c = (48, 48, 48), (40, 40, 40), 32
    vw = 40**3
    kw = {"roi_size": roi, "fused_update": True, "sample_batch": 4, "shared_bytes_per_voxel": 64.0,
          "stochastic_bytes_per_voxel": 160.0, "copied_bytes_per_voxel": 0.0}
    plain = estimate_memory(shape, c, roi_size=roi, fused_update=True)
    shared = estimate_memory(shape, c, **kw)
    both = estimate_memory(shape, c, inverse_dtype=torch.float32, **kw)
    assert plain.phase == shared.phase == both.phase == "stitching"
    logits = probs = 4 * c  # per window voxel
    replay = 4 * (160 + 4 * c)  # four samples' stochastic tensors and probabilities
    assert shared.parts["window"] - plain.parts["window"] == vw * (64 + replay - logits - probs)
    # the k = 4 samples' logits, one row of C + 1 channels and its inverse, then the rows done and their stack
    inverting = 4 * logits + (c + 1) * 8 + 2 * 4 * 4 * c
    assert both.parts["window"] - plain.parts["window"] == vw * (max(64 + replay, 64 + inverting) - logits - probs)
    # one sample per replay: the replay of one sample and the inversion of one output, as without shared passes
    one = estimate_memory(shape, c, inverse_dtype=torch.float32, **{**kw, "sample_batch": 1})
    assert one.parts["window"] - plain.parts["window"] == vw * (64 + max(160 + 4 * c, logits + (c + 1) * 8 + 2 * 4 * c)
                                                                 - logits - probs)


def test_estimate_memory_one_window_counts_the_buffers_after_the_window_not_beside_it():
    """Found by review 69: MONAI allocates its stitching buffers and count maps at the first window's output, once the
    window's work is freed, and with one window (it covers the case) no next window runs beside its outputs; the
    estimate added the buffers and the window's outputs to the window's work (33 % above the measured peak of shared
    passes, the measured mode ``shared_one_window`` above). The stitching phase is the larger of the two."""
    shape, c = (48, 48, 48), 32
    v = 48**3
    kw = {"roi_size": shape, "fused_update": True, "sample_batch": 4, "shared_bytes_per_voxel": 64.0,
          "stochastic_bytes_per_voxel": 160.0, "copied_bytes_per_voxel": 0.0}
    sums = 4 * (c + 2)  # per voxel: float32 sums of the probabilities, entropy and second moment
    replay = 4 * (160 + 4 * c)  # four samples' stochastic tensors (their logits among them) and probabilities
    est = estimate_memory(shape, c, **kw)
    assert est.phase == "stitching"
    assert est.parts == {"window": v * (sums + 64 + replay)}  # no buffers beside the window's work
    assert est.total == v * (sums + 64 + replay)
    # kept samples: the buffers (the kept samples' among them, a count map each) beside the window's outputs
    kept = estimate_memory(shape, c, roi_size=shape, fused_update=True, kept_samples=10)
    buffers, outputs, kept_bytes = 4 * (c + 3), 4 * (c + 3) + 10 * c * 4, 10 * c * 4
    assert kept.parts == {"stitching buffers": v * buffers, "count maps": v * 4 * 5, "kept samples": v * kept_bytes,
                          "window outputs": v * outputs}
    assert kept.total > v * (sums + 2 * kept_bytes)  # the window's work: the sums and the samples twice at its end
    # several windows: the buffers exist while the later windows run, beside the previous window's outputs
    many = estimate_memory(shape, c, **{**kw, "roi_size": (24, 24, 24), "overlap": 0.0})
    assert set(many.parts) == {"stitching buffers", "count maps", "window"}
    assert many.parts["window"] == 24**3 * (sums + 64 + replay + 4 * (c + 3))
