"""``estimate_memory`` of a network whose dtype is not its input's (review 62).

A float64 network fed a float32 input (it casts the input to its own dtype) returns float64 logits; its probabilities
and, whatever the number of classes, its running sums (:func:`~monai_unc.stats.auto_accum_dtype`) are float64 too.
The model knew only the input's dtype and counted 4 bytes for each of them: about half of the measured peak of one
pass. It takes the network's dtype now (``network_dtype``), and ``monai-unc infer`` reads it from the network.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from monai_unc.inferers import estimate_memory

ROOT = Path(__file__).resolve().parents[2]

_MEASURE = r"""
import gc, json, sys, torch
from monai.inferers import SlidingWindowInferer
from monai_unc.inferers import MCDropoutInferer, estimate_memory
torch.set_num_threads(1)
c, size, roi, modes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
class Cast(torch.nn.Module):  # a float64 network that casts its input to its own dtype
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Dropout3d(0.1),
                                       torch.nn.Conv3d(8, c, 1)).double().eval()
    def forward(self, x):
        return self.net(x.to(torch.float64))
torch.manual_seed(0)
net = Cast()
def run(x, mode):
    base = SlidingWindowInferer((roi,) * 3, overlap=0.25) if mode == "windows" else None
    return MCDropoutInferer(num_samples=3, base_inferer=base, seed=0, share_passes=False)(x, net)
out = {}
for mode in modes:
    with torch.no_grad():
        run(torch.randn(1, 1, 12, 12, 12), mode)  # every code path loaded first
        x = torch.randn(1, 1, size, size, size)
        gc.collect()
        reset_peak()
        r0 = rss()
        res = run(x, mode)
        top = peak()
    del res, x
    gc.collect()
    out[mode] = top - r0
print(json.dumps(out))
"""


def _measured(modes: tuple[str, ...], c: int, size: int, roi: int) -> dict[str, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="131072")
    groups = [modes] if os.access("/proc/self/clear_refs", os.W_OK) else [(m,) for m in modes]
    got: dict[str, int] = {}
    for group in groups:
        res = subprocess.run([sys.executable, "-c", _MEASURE, str(c), str(size), str(roi), *group],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]
        got.update(json.loads(res.stdout.strip().splitlines()[-1]))
    return got


@pytest.mark.slow
def test_a_float64_network_on_a_float32_input_is_estimated_within_15_percent():
    """Measured peak RSS (as tests/inferers/test_memory.py measures it) of MC dropout with a float64 network on a
    float32 input, 32 classes (float32 sums for float32 samples, float64 ones here), one pass and 36^3 windows of a
    54^3 case (2 x 2 x 2 windows, as 48^3 windows of 64^3 were, at half the work: the peaks, about 120 and 70 MiB,
    stay above the floor below). The estimate counted 4-byte logits, probabilities and sums: -46 % of the one pass's
    peak (here the float32 model is 41 % and 29 % below the float64 one: still far outside 15 %)."""
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("needs /proc (Linux) to read RSS")
    c, size, roi = 32, 54, 36
    peaks = _measured(("one_pass", "windows"), c, size, roi)
    off = {}
    for mode, measured in peaks.items():
        assert measured > 50 * 2**20, (mode, measured)  # large enough that allocator noise does not dominate
        est = estimate_memory((size,) * 3, c, roi_size=None if mode == "one_pass" else (roi,) * 3, overlap=0.25,
                              network_dtype=torch.float64, network_bytes_per_voxel=200).total
        if abs(est - measured) > 0.15 * measured:
            off[mode] = {"measured": measured, "estimate": est}
    assert not off, off


def test_the_network_dtype_sets_the_logits_probabilities_and_sums():
    shape, c = (64, 64, 64), 32
    same = estimate_memory(shape, c, fused_update=True)
    assert estimate_memory(shape, c, fused_update=True, network_dtype=torch.float32) == same
    f64 = estimate_memory(shape, c, fused_update=True, network_dtype=torch.float64)
    # one pass: float64 sums (34 channels), logits and probabilities (32 each) against float32 ones
    v = 64**3
    assert f64.parts["window"] - same.parts["window"] == v * 4 * (34 + 32 + 32)
    # a float64 input to a float32 network: float32 logits, probabilities and sums
    down = estimate_memory(shape, c, fused_update=True, input_dtype=torch.float64, network_dtype=torch.float32)
    assert down.total < estimate_memory(shape, c, fused_update=True, input_dtype=torch.float64).total
    # under windows the stitching buffers stay in the input's dtype (MONAI stitches in it)
    win = estimate_memory(shape, c, roi_size=(32,) * 3, network_dtype=torch.float64)
    assert win.parts["stitching buffers"] == estimate_memory(shape, c, roi_size=(32,) * 3).parts["stitching buffers"]
    # a half-precision network's probabilities are float32 (the inferer's softmax of float16 logits)
    half = estimate_memory(shape, c, fused_update=True, input_dtype=torch.float16)
    assert half.parts["window"] == v * (4 * 34 + 2 * 32 + 4 * 32)


@pytest.mark.parametrize("bad, error", [("float64", TypeError), (torch.int32, TypeError), (64, TypeError)])
def test_network_dtype_must_be_a_floating_point_dtype(bad, error):
    with pytest.raises(error, match="network_dtype"):
        estimate_memory((8, 8, 8), 3, network_dtype=bad)


class _Cast(torch.nn.Module):
    """A float64 network that casts its input to its own dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv3d(1, 3, 3, padding=1).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.to(torch.float64))


def test_network_dtype_reads_the_dtype_of_most_parameters():
    from monai_unc.workflows.infer import network_dtype

    assert network_dtype(_Cast()) == torch.float64
    assert network_dtype(torch.nn.Conv3d(1, 3, 3)) == torch.float32
    assert network_dtype(torch.nn.ReLU()) is None and network_dtype(lambda x: x) is None
    wrapper = torch.nn.Module()  # a temperature-scaled wrapper: one float32 temperature beside a float64 network
    wrapper.temperature = torch.nn.Parameter(torch.ones(1))
    wrapper.network = _Cast()
    assert network_dtype(wrapper) == torch.float64


def test_the_memory_warning_of_infer_counts_a_float64_network(tmp_path, monkeypatch):
    """``monai-unc infer`` hands the memory warning the network's dtype: a float64 network's case that the float32
    estimate lets pass is warned of."""
    import warnings

    import nibabel as nib
    import numpy as np

    from monai_unc.io import ImageCase
    from monai_unc.workflows import infer
    from monai_unc.workflows.factory import build_inferer
    from monai_unc.workflows.infer import InferSettings, memory_warning
    from monai_unc.workflows.models import LoadedModel

    settings = InferSettings(model="cast", method="mcdropout", samples=2, roi=None, overlap=0.25, intensity="none",
                             measures=["predictive_entropy"], seed=0, activation="softmax", checkpoints=[])
    shape, c = (10, 10, 10), 40
    f32 = estimate_memory(shape, c, track_variance=False, window_disagreement=True).total
    assert memory_warning("c", shape, c, settings, "cpu", available=f32) is None
    msg = memory_warning("c", shape, c, settings, "cpu", available=f32, network_dtype=torch.float64)
    assert msg is not None and "'c'" in msg
    nib.save(nib.Nifti1Image(np.random.default_rng(0).random(shape).astype(np.float32), np.eye(4)),
             tmp_path / "c.nii.gz")
    seen: list[dict] = []
    real = infer.memory_warning

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(infer, "memory_warning", spy)
    inferer = build_inferer("tta", measures=["predictive_entropy"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        infer.predict_case(ImageCase("c", (tmp_path / "c.nii.gz",)), LoadedModel(_Cast().eval(), "cast",
                                                                                 spatial_dims=3),
                           inferer, settings, tmp_path, torch.device("cpu"))
    assert seen and seen[-1]["network_dtype"] == torch.float64 and seen[-1]["input_dtype"] == torch.float32
