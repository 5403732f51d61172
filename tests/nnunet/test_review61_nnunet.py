"""Hostile review 61 of the nnU-Net integration (``monai_unc.nnunet``): the maps of 2D NIfTI datasets (classes and
regions) read back with the image's own shape and geometry, and Rate-In under ``torch.compile``."""

from __future__ import annotations

import copy
import shutil

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

import nibabel as nib  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from tests.nnunet.test_nnunet import make_plans, make_predictor  # noqa: E402
from tests.nnunet.test_nnunet_regions import REGIONS_JSON, region_predictor  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

AFFINE = np.array([[0.7, 0.0, 0.0, 3.0], [0.0, 0.8, 0.0, -2.0], [0.0, 0.0, 2.5, 5.0], [0.0, 0.0, 0.0, 1.0]])


def _predictor(ndim: int, regions: bool):
    plans = make_plans(ndim=ndim, patch=(16,) * ndim, spacing=(1.0,) * ndim)
    mirrors = tuple(range(ndim))
    if regions:
        return region_predictor(plans=plans, mirror_axes=mirrors, uncertainty_sources=("folds",))
    return make_predictor(plans=plans, mirror_axes=mirrors, uncertainty_sources=("folds",))


# ------------------------------------------------------------------------------------------ 2D maps
@pytest.mark.parametrize("shape,ndim", [((17, 19), 2), ((17, 19, 1), 2), ((17, 18, 13), 3)])
@pytest.mark.parametrize("regions", [False, True], ids=["softmax", "regions"])
def test_written_maps_have_the_shape_and_affine_of_the_input_image(shape, ndim, regions, tmp_path):
    """A 2D NIfTI image ``(X, Y)`` of a region model: its per-region maps were stacked along the last axis of one
    file, a 3D ``(X, Y, R)`` volume with the regions along z (spacing 1). Every file written now reads back with the
    image's spatial shape and affine, one channel (4D NIfTI, the regions last, where the image is 3D) or one file per
    region (a 2D image), the values those of the maps in memory."""
    pred = _predictor(ndim, regions)
    vol = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    image_file = tmp_path / "img_0000.nii.gz"
    nib.save(nib.Nifti1Image(vol, AFFINE), str(image_file))
    image, props = pred.plans_manager.image_reader_writer_class().read_images([str(image_file)])
    arrays = pred.predict_uncertainty_npy(image, copy.deepcopy(props))
    rec = pred.predict_uncertainty_npy(image, copy.deepcopy(props), output_file_truncated=str(tmp_path / "c0"))
    seg_img = nib.load(str(tmp_path / "c0.nii.gz"))
    assert seg_img.shape == shape
    names = list(REGIONS_JSON["labels"])[1:]
    for key in mun.DEFAULT_MEASURES:
        expected = arrays["maps"][key]  # nnU-Net's array order (z, y, x): the file's axes reversed
        entry = rec["maps"][key]
        files = [entry] if isinstance(entry, str) else entry
        channels = []
        for name in files:
            img = nib.load(str(tmp_path / "uncertainty" / name))
            spatial = img.shape[: len(shape)]
            assert spatial == shape, (key, name, img.shape)
            np.testing.assert_allclose(img.affine, seg_img.affine, atol=1e-5)
            data = np.asarray(img.dataobj)
            channels.extend([data[..., r] for r in range(data.shape[-1])] if img.ndim > len(shape) else [data])
        assert len(channels) == (2 if regions else 1)
        if regions and len(shape) == 2:
            assert files == [f"c0_{key}_{r}.nii.gz" for r in names]
        else:
            assert files == [f"c0_{key}.nii.gz"]
        for r, got in enumerate(channels):
            want = (expected[r] if regions else expected).reshape(shape[::-1]).T
            np.testing.assert_allclose(got, want, atol=1e-6)
    assert mun.case_exported(tmp_path / "c0", ".nii.gz", mun.DEFAULT_MEASURES)


# ------------------------------------------------------------------------------------------ Rate-In compiled
def _rate_in_predictor(share_passes=True, **rate_in):
    return make_predictor(n_folds=1, uncertainty_sources=("rate_in",), num_samples=2, seed=7, mirror_axes=(),
                          rate_in={"target_loss": 0.2, "loss": "mse", **rate_in}, plans=make_plans(patch=(16, 16, 16)),
                          share_passes=share_passes)


@pytest.mark.slow
def test_rate_in_under_torch_compile_compiles_once_with_the_numbers_of_the_plain_network(monkeypatch):
    """Under ``nnUNet_compile=1`` every case attached the Rate-In hooks and removed them again, and each change of the
    hooks drops the compiled code (dynamo does not guard on hooks): every case compiled the network again (12 graphs
    per case of this toy model, 10 recompilations). The layers now stay attached to a compiled network between
    cases: the graphs of the first case serve every later one, and the maps are those of the plain network. Dynamo's
    guards are the same for every backend; ``eager`` keeps the test short (inductor compiles C++ code on a CPU).
    Full passes (``share_passes=False``): the search pass runs the network's Python module (review 68) and shared
    passes run their own pieces, so only the full sampling passes run the compiled graph."""
    from torch._dynamo.utils import counters

    from monai_unc.inferers.rate_in import RateInInferer, find_rate_in_layers

    cases = [torch.randn(1, 16, 16, 16, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    plain = _rate_in_predictor(share_passes=False)
    expected = [plain.predict_uncertainty_from_preprocessed_data(x.clone()) for x in cases]
    assert not find_rate_in_layers(plain.network)  # an uncompiled network is restored after every case

    torch.compiler.reset()
    monkeypatch.setenv("nnUNet_compile", "1")
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: compile_(model, **{"backend": "eager", **kw}))
    try:
        pred = _rate_in_predictor(share_passes=False)
        assert type(pred.network).__name__ == "OptimizedModule"  # nnU-Net compiled it
        counters.clear()
        graphs = []
        for x, want in zip(cases, expected):
            got = pred.predict_uncertainty_from_preprocessed_data(x.clone())
            assert pred.rate_in_settings() == plain.rate_in_settings()  # recorded per case; placement as uncompiled
            graphs.append(counters["stats"]["unique_graphs"])
            for key in ("pred", "expected_entropy"):
                np.testing.assert_allclose(got.moments[key].numpy(), want.moments[key].numpy(), atol=1e-6,
                                           err_msg=key)
            rates, want_rates = got.extras["rate_in_mean_rate"], want.extras["rate_in_mean_rate"]
            assert rates.keys() == want_rates.keys()
            for name in rates:
                assert rates[name] == pytest.approx(want_rates[name], abs=1e-6), name
        assert graphs[0] > 0
        assert graphs[2] == graphs[1] == graphs[0], graphs  # compiled for the first case only
        assert find_rate_in_layers(pred.network)  # kept between cases (switched off)
        # another source on the same compiled network: its own layers and settings, not those kept by the predictor
        x = cases[0][None, :, :8, :8, :8]
        other = {"num_samples": 3, "placement": "insert", "after": ["encoder.stages.0"], "target_loss": 0.3,
                 "loss": "mse", "seed": 0, "share_passes": False}
        want = RateInInferer(**other)(x, plain.network)
        got = RateInInferer(**other)(x, pred.network)
        assert list(got.extras["rate_in_rates"]) == ["encoder.stages.0"]
        for key in want:
            torch.testing.assert_close(got[key], want[key], rtol=0, atol=1e-6)
        assert not find_rate_in_layers(pred.network)  # the predictor's layers were removed for it
        pred.predict_uncertainty_from_preprocessed_data(cases[0].clone())  # attached again
        assert pred._rate_in.release() > 0 and not find_rate_in_layers(pred.network)
    finally:
        torch.compiler.reset()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="inductor needs a C++ compiler")
def test_rate_in_under_inductor_draws_the_numbers_of_the_plain_network(monkeypatch):
    """Inductor (``nnUNet_compile=1``'s default backend) drew the random numbers of a compiled graph with its own
    generator: the seeded dropout masks of Rate-In's search and passes were not those of the uncompiled network (mean
    probabilities off by up to 0.996, the expected entropy by up to log 3, mean searched rates by 0.045). The
    predictor's sampling now
    draws from torch's generator under inductor too (``fallback_random``): the same maps, within float tolerance.

    One Rate-In layer (after the first encoder stage) instead of the three of the default placement: 8 graphs for
    inductor to compile instead of 12, and without ``fallback_random`` its maps still differ (``pred`` by 0.6, the
    expected entropy by 0.67, the searched rate by 0.045)."""
    x = torch.randn(1, 16, 16, 16, generator=torch.Generator().manual_seed(0))
    one_layer = {"after": ["encoder.stages.0"]}
    want = _rate_in_predictor(False, **one_layer).predict_uncertainty_from_preprocessed_data(x.clone())
    torch.compiler.reset()
    monkeypatch.setenv("nnUNet_compile", "1")
    try:
        pred = _rate_in_predictor(False, **one_layer)
        assert type(pred.network).__name__ == "OptimizedModule"  # nnU-Net compiled it (inductor)
        got = pred.predict_uncertainty_from_preprocessed_data(x.clone())
    finally:
        torch.compiler.reset()
    for key in ("pred", "expected_entropy"):
        np.testing.assert_allclose(got.moments[key].numpy(), want.moments[key].numpy(), atol=1e-5, err_msg=key)
    rates, want_rates = got.extras["rate_in_mean_rate"], want.extras["rate_in_mean_rate"]
    assert list(rates) == list(want_rates) == one_layer["after"]
    for name in rates:
        assert rates[name] == pytest.approx(want_rates[name], abs=1e-6), name
    import torch._inductor.config as inductor_config

    assert not inductor_config.fallback_random  # the setting is the predictor's sampling only
