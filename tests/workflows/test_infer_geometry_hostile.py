"""Hostile geometry checks of ``monai-unc infer`` with a bundle's preprocessing (reorientation, resampling, crop, pad).

Independent reference: the stock MONAI pipeline on the same preprocessed image (a plain softmax of the network,
``Invertd`` with the bundle's preprocessing, ``AsDiscreted(argmax)``, ``SaveImaged``), read back with nibabel. The
network is a per-voxel function of the intensity, so every misplaced voxel shows.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.transforms import (
    AsDiscreted,
    Compose,
    CropForegroundd,
    DivisiblePadd,
    EnsureChannelFirstd,
    Invertd,
    LoadImaged,
    Orientationd,
    SaveImaged,
    Spacingd,
)

from monai_unc._utils import check_probabilities
from monai_unc.io import ImageCase
from monai_unc.workflows.factory import build_inferer
from monai_unc.workflows.infer import InferSettings, predict_case
from monai_unc.workflows.models import LoadedModel

MEASURES = ["predictive_entropy", "one_minus_max_prob"]


class _IntensityNet(torch.nn.Module):
    """Two-class logits ``(0, 4 x - 2)``: the class-1 probability is ``sigmoid(4 x - 2)`` of the voxel's intensity."""

    out_channels = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = 4 * x[:, :1] - 2
        return torch.cat([torch.zeros_like(z), z], 1)


def _write_image(folder: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """An LPS-like (flipped, anisotropic) image with a zero border that CropForeground removes."""
    shape = (20, 17, 9)
    i, j, k = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    img = (0.2 + 0.04 * i + 0.02 * j + 0.05 * k).astype(np.float32)
    img[:3] = 0
    img[-2:] = 0
    img[:, :2] = 0
    affine = np.array([[-1.2, 0, 0, 30], [0, -0.9, 0, 20], [0, 0, 3.0, -10], [0, 0, 0, 1]])
    path = folder / "c.nii.gz"
    nib.save(nib.Nifti1Image(img, affine), path)
    return path, img, affine


def _preprocessing() -> Compose:
    return Compose([
        LoadImaged("image"),
        EnsureChannelFirstd("image"),
        Orientationd("image", axcodes="RAS"),
        Spacingd("image", pixdim=(1.5, 1.5, 1.5), mode="bilinear"),
        CropForegroundd("image", source_key="image"),
        DivisiblePadd("image", k=8),
    ])


@pytest.fixture()
def predicted(tmp_path: Path) -> dict:
    path, img, affine = _write_image(tmp_path)
    model = LoadedModel(_IntensityNet(), "intensity net", preprocessing=_preprocessing(), spatial_dims=3)
    settings = InferSettings(model="intensity net", method="softmax", samples=1, roi=None, overlap=0.25,
                             intensity="none", measures=MEASURES, seed=0, activation="softmax", checkpoints=[])
    out = tmp_path / "out"
    out.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predict_case(ImageCase("c", (path,)), model, build_inferer("softmax", measures=MEASURES), settings, out,
                     torch.device("cpu"))
    # the stock MONAI pipeline on the same preprocessed image
    pre = _preprocessing()
    data = pre({"image": str(path)})
    with torch.no_grad():  # MetaTensors carrying the preprocessed image's meta, as a MONAI inferer returns
        probs = torch.softmax(_IntensityNet()(data["image"][None]), 1)[0]
    data["pred"] = probs.clone()
    data["predictive_entropy"] = -(probs * torch.log(probs.clamp_min(1e-30))).sum(0, keepdim=True)
    post = Compose([
        Invertd(["pred", "predictive_entropy"], transform=pre, orig_keys="image", nearest_interp=False),
        AsDiscreted("pred", argmax=True),
        SaveImaged("pred", output_dir=tmp_path / "stock", output_postfix="seg", separate_folder=False,
                   print_log=False),
    ])
    stock_probs = Invertd("pred", transform=pre, orig_keys="image", nearest_interp=False)(
        {"image": data["image"], "pred": probs.clone()})["pred"]
    assert tuple(stock_probs.shape[1:]) == img.shape
    ref = post(data)
    return {"out": out, "stock": tmp_path / "stock", "img": img, "affine": affine,
            "stock_probs": np.asarray(stock_probs), "stock_pe": np.asarray(ref["predictive_entropy"])[0]}


def test_every_file_has_the_input_geometry_and_the_stock_segmentation(predicted):
    out, affine, img = predicted["out"], predicted["affine"], predicted["img"]
    for name in ("c_seg", "c_probs", *(f"c_{m}" for m in MEASURES)):
        saved = nib.load(out / f"{name}.nii.gz")
        assert saved.shape[:3] == img.shape, name
        np.testing.assert_allclose(saved.affine, affine, atol=1e-5, err_msg=name)
    stock = nib.load(predicted["stock"] / "c_seg.nii.gz")
    np.testing.assert_allclose(stock.affine, affine, atol=1e-5)
    np.testing.assert_array_equal(nib.load(out / "c_seg.nii.gz").get_fdata(), np.asarray(stock.dataobj).squeeze())
    # inside the foreground, away from its edge, the probability is the network's function of the input voxel
    p1 = nib.load(out / "c_probs.nii.gz").get_fdata()[..., 1]
    inner = np.zeros(img.shape, bool)
    inner[4:-3, 3:-1, 1:-1] = True
    np.testing.assert_allclose(p1[inner], (1 / (1 + np.exp(-(4 * img - 2))))[inner], atol=2e-3)


def test_probabilities_sum_to_one_outside_the_crop(predicted):
    """The crop's inverse pads with zeros: the voxels outside the crop box got probabilities summing to 0 (and the
    edge voxels, blended with that padding, less than 1), so ``monai-unc evaluate`` refused the file. Outside the
    crop the network saw nothing: background with probability 1 (as nnU-Net exports), and where a voxel is partly
    covered its probabilities are those of the covered part; the argmax, and so the segmentation, is the stock one.
    """
    out = predicted["out"]
    probs = np.moveaxis(nib.load(out / "c_probs.nii.gz").get_fdata(), -1, 0)
    assert (predicted["stock_probs"].sum(0) < 0.5).any()  # the stock inversion leaves uncovered voxels
    np.testing.assert_allclose(probs.sum(0), 1.0, atol=1e-5)
    check_probabilities(torch.from_numpy(probs.astype(np.float32))[None], "probabilities")  # what evaluate checks
    stock = predicted["stock_probs"]
    covered = np.abs(stock.sum(0) - 1) < 1e-6
    np.testing.assert_allclose(probs[:, covered], stock[:, covered], atol=1e-5)
    outside = stock.sum(0) == 0
    assert outside.any()
    np.testing.assert_allclose(probs[0, outside], 1.0, atol=1e-6)
    partial = ~covered & ~outside
    ratio = stock[:, partial] / stock[:, partial].sum(0)
    np.testing.assert_allclose(probs[:, partial], ratio, atol=1e-4)


def test_uncertainty_maps_follow_the_probabilities(predicted):
    """The maps are inverted like the probabilities: equal to the stock inversion where the crop covers a voxel, 0
    (certain background) outside it, and at its edge the covered part's value (not blended with the zero padding)."""
    out = predicted["out"]
    pe = nib.load(out / "c_predictive_entropy.nii.gz").get_fdata()
    stock = predicted["stock_probs"]
    covered = np.abs(stock.sum(0) - 1) < 1e-6
    np.testing.assert_allclose(pe[covered], predicted["stock_pe"][covered], atol=1e-5)
    outside = stock.sum(0) == 0
    np.testing.assert_allclose(pe[outside], 0.0, atol=1e-6)
    # at the crop's edge: what the covered part of the voxel says (the stock blend with the padding, over its weight)
    weight = stock.sum(0)
    partial = (weight > 1e-3) & ~covered
    assert partial.any()
    np.testing.assert_allclose(pe[partial], predicted["stock_pe"][partial] / weight[partial], atol=1e-4)
    omp = nib.load(out / "c_one_minus_max_prob.nii.gz").get_fdata()
    np.testing.assert_allclose(omp[outside], 0.0, atol=1e-6)


def test_saved_samples_are_inverted_onto_the_input_grid(tmp_path):
    """``save_samples`` with a bundle's preprocessing wrote the samples' label maps on the preprocessed grid (another
    shape) under the input's affine. The intensity network commutes with TTA's flips, so every sample is the
    segmentation: each saved label map must equal the stock MONAI segmentation voxel for voxel."""
    path, img, affine = _write_image(tmp_path)
    model = LoadedModel(_IntensityNet(), "intensity net", preprocessing=_preprocessing(), spatial_dims=3)
    settings = InferSettings(model="intensity net", method="tta", samples=1, roi=None, overlap=0.25,
                             intensity="none", measures=MEASURES, seed=0, activation="softmax", checkpoints=[],
                             save_samples=True)
    out = tmp_path / "out"
    out.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        record = predict_case(ImageCase("c", (path,)), model,
                              build_inferer("tta", measures=MEASURES, keep_samples=True), settings, out,
                              torch.device("cpu"))
    assert record["num_samples"] == 8
    saved = nib.load(out / "c_samples.nii.gz")
    assert saved.shape == (*img.shape, 8)
    np.testing.assert_allclose(saved.affine, affine, atol=1e-5)
    seg = nib.load(out / "c_seg.nii.gz").get_fdata()
    labels = np.asarray(saved.dataobj)
    for s in range(8):
        np.testing.assert_array_equal(labels[..., s], seg, err_msg=f"sample {s}")


class _RegionNet(torch.nn.Module):
    """Two sigmoid regions: logits ``4 x - 2`` and ``4 x - 3`` of the voxel's intensity."""

    out_channels = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([4 * x[:, :1] - 2, 4 * x[:, :1] - 3], 1)


def test_region_maps_with_a_cropping_preprocessing_match_the_stock_inversion(tmp_path):
    """Region-based (sigmoid) outputs: where the crop covers a voxel the per-region probabilities are the stock
    inversion of the network's sigmoids, outside it no region (0); the masks are ``p >= 0.5`` of them."""
    path, img, affine = _write_image(tmp_path)
    model = LoadedModel(_RegionNet(), "region net", preprocessing=_preprocessing(), spatial_dims=3)
    settings = InferSettings(model="region net", method="softmax", samples=1, roi=None, overlap=0.25,
                             intensity="none", measures=MEASURES, seed=0, activation="sigmoid", checkpoints=[])
    out = tmp_path / "out"
    out.mkdir()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        record = predict_case(ImageCase("c", (path,)), model,
                              build_inferer("softmax", measures=MEASURES, activation="sigmoid"), settings, out,
                              torch.device("cpu"))
    assert record["multilabel"] is True
    pre = _preprocessing()
    data = pre({"image": str(path)})
    with torch.no_grad():
        probs = torch.sigmoid(_RegionNet()(data["image"][None]))[0]
    stock = np.asarray(Invertd("pred", transform=pre, orig_keys="image", nearest_interp=False)(
        {"image": data["image"], "pred": probs})["pred"])
    ones = torch.ones_like(probs[:1])
    weight = np.asarray(Invertd("pred", transform=pre, orig_keys="image", nearest_interp=False)(
        {"image": data["image"], "pred": ones})["pred"])[0]
    saved = nib.load(out / "c_probs.nii.gz")
    np.testing.assert_allclose(saved.affine, affine, atol=1e-5)
    p = np.moveaxis(saved.get_fdata(), -1, 0)
    assert p.shape == (2, *img.shape)
    covered = np.abs(weight - 1) < 1e-6
    np.testing.assert_allclose(p[:, covered], stock[:, covered], atol=1e-5)
    np.testing.assert_allclose(p[:, weight == 0], 0.0)
    seg = np.moveaxis(nib.load(out / "c_seg.nii.gz").get_fdata(), -1, 0)
    np.testing.assert_array_equal(seg[:, covered], stock[:, covered] >= 0.5)
