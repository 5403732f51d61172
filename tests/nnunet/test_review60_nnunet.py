"""Hostile review 60 of the nnU-Net integration (``monai_unc.nnunet``): each test compares against nnU-Net's own code
(its predictor, its trainers' transforms) or a brute-force numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor  # noqa: E402

from monai_unc.nnunet.calibrate import calibrate_model_folder  # noqa: E402
from tests.nnunet.test_calibrate_hostile import write_preprocessed  # noqa: E402
from tests.nnunet.test_predictor_hostile import write_model_folder  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------------ nnunet-calibrate
def test_temperature_fit_reads_label_minus_one_as_background_as_nnunet_does(tmp_path):
    """nnU-Net's preprocessing writes -1 into the reference where it is 0 outside the non-zero mask, *inside* the
    cropped box: those voxels are predicted and written with the network's probabilities, and nnU-Net's training and
    validation transforms read them as background (``RemoveLabelTansform(-1, 0)``). The fit left them out, as if they
    were outside the crop: the validation NLL at t = 1 was that of the other voxels only. Reference: stock
    ``nnUNetPredictor``'s logits of the validation cases and the NLL over every voxel, -1 read as 0 (numpy)."""
    cases = ("a", "b")
    pre = write_preprocessed(tmp_path / "pre", cases=cases)
    folder = pre / "Dataset999_Unit" / "unit"
    for c in cases:  # the first four slices: zero intensity, outside the non-zero mask (nnU-Net's -1)
        arrays = dict(np.load(folder / f"{c}.npz"))
        arrays["seg"][0, :4] = -1
        arrays["data"][0, :4] = 0.0
        np.savez(folder / f"{c}.npz", **arrays)
    model = write_model_folder(tmp_path / "model", folds=(0,))
    report = calibrate_model_folder(model, tmp_path / "calibrated", use_folds=(0,), preprocessed_dir=pre,
                                    use_mirroring=False, max_steps=5)
    stock = nnUNetPredictor(use_mirroring=False, device=torch.device("cpu"), allow_tqdm=False)
    stock.initialize_from_trained_model_folder(str(model), (0,))
    nll = []
    for c in cases:
        arrays = np.load(folder / f"{c}.npz")
        z = stock.predict_logits_from_preprocessed_data(torch.from_numpy(arrays["data"])).to(torch.float16)
        z = z.double().numpy()
        y = arrays["seg"][0].astype(np.int64)
        y[y < 0] = 0  # nnU-Net's RemoveLabelTansform(-1, 0)
        log_p = z - z.max(0) - np.log(np.exp(z - z.max(0)).sum(0))
        nll.append(-np.take_along_axis(log_p, y[None], 0)[0].ravel())
    expected = float(np.concatenate(nll).mean())
    assert report["0"]["nll_t1"] == pytest.approx(expected, rel=1e-5)


def test_calibrate_under_nnunet_compile_writes_the_plain_checkpoint(tmp_path, monkeypatch):
    """With ``nnUNet_compile=1`` (nnU-Net's switch for ``torch.compile``) nnU-Net's predictor holds the network as a
    ``torch.compile`` wrapper: the calibrated copy's weights were loaded into a copy of the wrapper, whose keys carry
    ``_orig_mod.``, a RuntimeError traceback after every validation case was predicted. The copy must hold the
    checkpoint's own keys, the segmentation layer divided by t (the same as without compiling)."""
    import functools

    pre = write_preprocessed(tmp_path / "pre", cases=("a",))
    model = write_model_folder(tmp_path / "model", folds=(0,))
    kw = {"use_folds": (0,), "preprocessed_dir": pre, "use_mirroring": False, "max_steps": 3}
    plain = calibrate_model_folder(model, tmp_path / "plain", **kw)
    # a real torch.compile wrapper, without inductor's compilation of C++ code (minutes on a CPU)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    monkeypatch.setenv("nnUNet_compile", "1")
    compiled = calibrate_model_folder(model, tmp_path / "compiled", **kw)
    assert compiled == plain
    a = torch.load(tmp_path / "plain" / "fold_0" / "checkpoint_final.pth", weights_only=False)["network_weights"]
    b = torch.load(tmp_path / "compiled" / "fold_0" / "checkpoint_final.pth", weights_only=False)["network_weights"]
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


# ------------------------------------------------------------------------------------------ nnUNet_compile
def _compiled_eager(monkeypatch) -> None:
    """nnU-Net's ``nnUNet_compile=1`` with a real ``torch.compile`` wrapper, without inductor's C++ compilation."""
    import functools

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    monkeypatch.setenv("nnUNet_compile", "1")


def test_posthoc_dropout_reaches_a_compiled_network_that_ran_before(tmp_path, monkeypatch):
    """Under ``nnUNet_compile=1`` nnU-Net's predictor holds a ``torch.compile`` wrapper. Dynamo does not guard on module
    hooks, so code compiled by an earlier predictor of the process (same network class, no dropout) ran the next
    predictor's network without the post-hoc dropout it was given: ``--sources dropout --dropout_p 0.2`` gave mutual
    information 5e-9 (every sample the deterministic pass) instead of 0.023. The reference is the same predictor
    without compiling."""
    import monai_unc.nnunet as mun

    model = write_model_folder(tmp_path / "model", folds=(0, 1))
    data = torch.randn(1, 20, 18, 17, generator=torch.Generator().manual_seed(0))
    kw = {"uncertainty_sources": ("dropout",), "dropout_p": 0.2, "num_samples": 3, "seed": 0, "share_passes": False}

    def run(**kw):
        p = mun.UncertaintyPredictor(device=torch.device("cpu"), allow_tqdm=False, use_mirroring=False, **kw)
        p.initialize_from_trained_model_folder(str(model), (1,))
        r = p.predict_uncertainty_from_preprocessed_data(data)
        return r.measures(["mutual_information"])["mutual_information"], r.moments["pred"]

    reference = run(**kw)
    _compiled_eager(monkeypatch)
    with pytest.warns(UserWarning, match="single fold"):
        deterministic = run(uncertainty_sources=("folds",))  # compiles the network class's forward without dropout
    mi, pred = run(**kw)
    assert float(reference[0].mean()) > 0.01
    torch.testing.assert_close(mi, reference[0])
    torch.testing.assert_close(pred, reference[1])
    # and the code compiled with the dropout does not reach a later network of the class without it
    with pytest.warns(UserWarning, match="single fold"):
        again = run(uncertainty_sources=("folds",))
    torch.testing.assert_close(again[1], deterministic[1], rtol=0, atol=0)
    assert float(again[0].abs().max()) == 0.0


def test_rate_in_reaches_a_compiled_network_that_ran_before(tmp_path, monkeypatch):
    """``--sources rate_in`` under ``nnUNet_compile=1`` after another predictor of the process had run the network
    class compiled: the Rate-In layers went on the module under the wrapper, the stale compiled code ran without them
    and the case failed with "none of the 3 Rate-In layer(s) ran in the forward pass". Reference: the same prediction
    without compiling (maps and the mean searched rates)."""
    import monai_unc.nnunet as mun

    model = write_model_folder(tmp_path / "model", folds=(0, 1))
    data = torch.randn(1, 20, 18, 17, generator=torch.Generator().manual_seed(0))
    kw = {"uncertainty_sources": ("rate_in",), "num_samples": 3, "seed": 0, "share_passes": False}

    def run(**kw):
        p = mun.UncertaintyPredictor(device=torch.device("cpu"), allow_tqdm=False, use_mirroring=False, **kw)
        p.initialize_from_trained_model_folder(str(model), (1,))
        return p.predict_uncertainty_from_preprocessed_data(data)

    reference = run(**kw)
    _compiled_eager(monkeypatch)
    with pytest.warns(UserWarning, match="single fold"):
        run(uncertainty_sources=("folds",))  # compiles the network class's forward without Rate-In
    result = run(**kw)
    assert result.extras == reference.extras
    for k, v in reference.moments.items():
        torch.testing.assert_close(result.moments[k], v)
