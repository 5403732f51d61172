"""The memory warning of ``monai-unc infer`` before a case that will not fit (#30)."""

from __future__ import annotations

import warnings

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.networks.nets import UNet

from monai_unc.inferers import estimate_memory
from monai_unc.io import ImageCase
from monai_unc.workflows import infer
from monai_unc.workflows.factory import build_inferer
from monai_unc.workflows.infer import InferSettings, memory_warning, network_out_channels
from monai_unc.workflows.models import LoadedModel


def _settings(roi=None) -> InferSettings:
    return InferSettings(model="m", method="mcdropout", samples=4, roi=roi, overlap=0.25, intensity="none",
                         measures=["predictive_entropy", "mutual_information", "variance"], seed=0,
                         activation="softmax", checkpoints=[])


def test_memory_warning_names_the_case_and_the_need():
    need = estimate_memory((128, 128, 128), 105, roi_size=(64, 64, 64), track_variance=True).total
    msg = memory_warning("ct_001", (128, 128, 128), 105, _settings([64]), "cpu", available=need - 1)
    assert msg is not None and "ct_001" in msg and "105 classes" in msg and f"{need / 2**30:.1f} GiB" in msg
    assert memory_warning("ct_001", (128, 128, 128), 105, _settings([64]), "cpu", available=need) is None
    assert memory_warning("ct_001", (128, 128, 128), None, _settings([64]), "cpu", available=1) is None
    # without a window the whole volume is one pass: more memory
    assert memory_warning("ct_001", (128, 128, 128), 105, _settings(None), "cpu", available=need) is not None


def test_network_out_channels():
    unet = UNet(3, 1, 7, channels=(4, 8), strides=(2,))
    assert network_out_channels(unet) == 7
    seq = torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3), torch.nn.Conv3d(4, 5, 1))
    assert network_out_channels(seq) == 5
    assert network_out_channels(lambda x: x) is None


def test_memory_warning_counts_the_windows_per_call_and_the_members():
    """Found by hostile testing: the warning's estimate left out ``--sw-batch-size`` (several windows per network
    call) and the earlier members of ``--method ensemble``, so a case that would not fit passed silently."""
    need = estimate_memory((128, 128, 128), 105, roi_size=(64, 64, 64), track_variance=True).total
    settings = _settings([64])
    assert memory_warning("ct_001", (128, 128, 128), 105, settings, "cpu", available=need) is None
    for extra in ({"sw_batch_size": 4}, {"ensemble_members": 3}):
        msg = memory_warning("ct_001", (128, 128, 128), 105, settings, "cpu", available=need, **extra)
        assert msg is not None and "ct_001" in msg, extra
    # the windows per call are at most the case's windows at the run's overlap (27 here), and none without a window
    many = estimate_memory((128, 128, 128), 105, roi_size=(64, 64, 64), track_variance=True, sw_batch_size=27)
    assert memory_warning("ct_001", (128, 128, 128), 105, settings, "cpu", available=many.total,
                          sw_batch_size=64) is None
    one_pass = estimate_memory((128, 128, 128), 105, track_variance=True).total
    assert memory_warning("ct_001", (128, 128, 128), 105, _settings(None), "cpu", available=one_pass,
                          sw_batch_size=8) is None


def test_predict_case_passes_the_inferers_windows_per_call_and_members(tmp_path, monkeypatch):
    """``predict_case`` hands ``memory_warning`` the sliding window's ``sw_batch_size`` and the ensemble's members."""
    nib.save(nib.Nifti1Image(np.random.default_rng(0).random((10, 10, 10)).astype(np.float32), np.eye(4)),
             tmp_path / "c.nii.gz")
    torch.manual_seed(0)
    net = torch.nn.Conv3d(1, 3, 3, padding=1).eval()
    members = []
    for i in range(3):
        torch.save(torch.nn.Conv3d(1, 3, 3, padding=1).state_dict(), tmp_path / f"m{i}.pt")
        members.append(str(tmp_path / f"m{i}.pt"))
    seen: list[dict] = []
    real = infer.memory_warning

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(infer, "memory_warning", spy)
    model = LoadedModel(net, "conv", spatial_dims=3)
    for method, extra, expected in (("ensemble", {"checkpoints": members}, (3, 3)), ("tta", {}, (3, 1))):
        settings = InferSettings(model="conv", method=method, samples=1, roi=[8], overlap=0.25, intensity="none",
                                 measures=["predictive_entropy"], seed=0, activation="softmax", checkpoints=[])
        inferer = build_inferer(method, roi=8, sw_batch_size=3, measures=["predictive_entropy"], **extra)
        out = tmp_path / method
        out.mkdir()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            infer.predict_case(ImageCase("c", (tmp_path / "c.nii.gz",)), model, inferer, settings, out,
                               torch.device("cpu"))
        assert (seen[-1]["sw_batch_size"], seen[-1]["ensemble_members"]) == expected, method


def test_a_bundles_preprocessed_case_gets_the_memory_warning_and_the_one_line_error(tmp_path, monkeypatch):
    """Found by the review of the last session: with a bundle's preprocessing the case was inferred without the memory
    warning (on the preprocessed grid, here resampled to 2x the voxels per axis) and a failed inference was a
    traceback; both are what an input without preprocessing gets."""
    from monai.transforms import Compose, EnsureChannelFirstd, LoadImaged, Spacingd

    from monai_unc.io import CaseError

    nib.save(nib.Nifti1Image(np.random.default_rng(0).random((10, 12, 14)).astype(np.float32), np.diag([2, 2, 2, 1])),
             tmp_path / "c.nii.gz")
    pre = Compose([LoadImaged("image"), EnsureChannelFirstd("image"), Spacingd("image", pixdim=(1, 1, 1))])
    settings = InferSettings(model="conv", method="tta", samples=1, roi=None, overlap=0.25, intensity="none",
                             measures=["predictive_entropy"], seed=0, activation="softmax", checkpoints=[])
    shapes: list[tuple] = []
    real = infer.memory_warning

    def tight(case_id, spatial_shape, *args, **kwargs):  # no memory at all: every case warns
        shapes.append(tuple(spatial_shape))
        return real(case_id, spatial_shape, *args, **{**kwargs, "available": 0})

    monkeypatch.setattr(infer, "memory_warning", tight)
    torch.manual_seed(0)
    model = LoadedModel(torch.nn.Conv3d(1, 3, 3, padding=1).eval(), "conv", preprocessing=pre, spatial_dims=3)
    inferer = build_inferer("tta", measures=["predictive_entropy"])
    case = ImageCase("c", (tmp_path / "c.nii.gz",))
    (tmp_path / "out").mkdir()
    with pytest.warns(UserWarning, match=r"case 'c' \(19x23x27, 3 classes\) needs about"):
        infer.predict_case(case, model, inferer, settings, tmp_path / "out", torch.device("cpu"))
    assert shapes == [(19, 23, 27)]  # the preprocessed grid, not the file's

    broken = LoadedModel(torch.nn.Conv3d(2, 3, 3, padding=1).eval(), "conv", preprocessing=pre, spatial_dims=3)
    (tmp_path / "out2").mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CaseError, match=r"^case 'c': inference failed on the input of shape \(1, 1, 19, 23, 27\)"):
            infer.predict_case(case, broken, inferer, settings, tmp_path / "out2", torch.device("cpu"))


def test_memory_warning_counts_the_window_entropy_whatever_the_measures():
    """Found by hostile testing: the run's inferers stitch each window's entropy (``window_disagreement="separate"``,
    for MI without the windows' disagreement) whether or not ``--measures`` asks for the ``window_disagreement``
    map, but the warning counted that buffer only when it did: a 2-class 512x512x400 case with the default measures
    needs 3.5 GiB, and the warning's estimate was 2.75 GiB (on 96^3, 48^3 windows: 46 MiB measured, 36 MiB in the old
    estimate, 42 MiB in the new one)."""
    settings = InferSettings(model="m", method="mcdropout", samples=4, roi=[96], overlap=0.25, intensity="none",
                             measures=["predictive_entropy", "expected_entropy", "mutual_information",
                                       "one_minus_max_prob"], seed=0, activation="softmax", checkpoints=[])
    shape = (512, 512, 400)
    need = estimate_memory(shape, 2, roi_size=(96,) * 3, overlap=0.25, track_variance=False)
    without = estimate_memory(shape, 2, roi_size=(96,) * 3, overlap=0.25, track_variance=False,
                              window_disagreement=False)
    assert need.total > 1.2 * without.total
    msg = memory_warning("ct", shape, 2, settings, "cpu", available=without.total)
    assert msg is not None and f"{need.total / 2**30:.1f} GiB" in msg
    assert memory_warning("ct", shape, 2, settings, "cpu", available=need.total) is None
    # the inferer the run builds stitches the window entropy with these measures
    inferer = build_inferer("mcdropout", 4, [96], 0.25, measures=settings.measures)
    assert inferer.window_disagreement == "separate" and "window_disagreement" not in inferer.keys


def test_memory_warning_advises_what_lowers_the_largest_part():
    """Found by hostile testing: the warning always advised "a smaller --roi", which changes one window's work only;
    for a 105-class 512x512x400 case (45 GiB, 42 of them the stitched maps of the whole case) it changes under 2 %."""
    shape = (512, 512, 400)
    settings = _settings([96])
    msg = memory_warning("ct", shape, 105, settings, "cuda", available=2**30)
    assert "--roi" not in msg and "no window size changes" in msg and "--device cpu" in msg
    assert "--device cpu" not in memory_warning("ct", shape, 105, settings, "cpu", available=2**30)
    smaller = estimate_memory(shape, 105, roi_size=(32,) * 3, overlap=0.25, track_variance=True)
    larger = estimate_memory(shape, 105, roi_size=(96,) * 3, overlap=0.25, track_variance=True)
    assert smaller.total > 0.95 * larger.total  # indeed: a third of the window saves under 5 %
    # one pass over a whole image: the window is the volume, --roi helps
    assert "--roi runs the network on windows" in memory_warning("ct", (128,) * 3, 4, _settings(None), "cpu",
                                                                  available=1)
    # a large window with many windows per call
    msg = memory_warning("ct", (256,) * 3, 4, _settings([192]), "cpu", available=1, sw_batch_size=8)
    assert "a smaller --roi or --sw-batch-size helps" in msg
    # many kept samples
    msg = memory_warning("ct", (128,) * 3, 4, settings, "cpu", available=1, kept_samples=64)
    assert "--save-samples" in msg
