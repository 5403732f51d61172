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


def _write_oblique_itk(path: Path) -> tuple[np.ndarray, object]:
    """A MetaImage / NRRD volume with rotated, z-flipped direction cosines and anisotropic spacing (SimpleITK)."""
    sitk = pytest.importorskip("SimpleITK")
    arr = np.random.default_rng(0).random((5, 6, 7)).astype(np.float32)  # SimpleITK's (z, y, x)
    image = sitk.GetImageFromArray(arr)
    image.SetSpacing((0.7, 1.1, 2.5))
    image.SetOrigin((10.0, -5.0, 3.0))
    c, s = np.cos(0.3), np.sin(0.3)
    image.SetDirection((c, -s, 0.0, s, c, 0.0, 0.0, 0.0, -1.0))
    sitk.WriteImage(image, str(path))
    return arr, image


@pytest.mark.parametrize("ext", [".mha", ".nrrd"])
def test_metaimage_and_nrrd_inputs_are_read_with_their_geometry(tmp_path, ext):
    """``.mha`` / ``.nrrd`` are documented inputs, but MONAI reads them only with itk / pynrrd (not dependencies):
    every case failed as "a truncated or corrupt file". Read back, each voxel sits where SimpleITK puts it (LPS
    physical point, negated x and y for RAS) and holds SimpleITK's value."""
    from monai_unc.io.cases import read_volume

    arr, image = _write_oblique_itk(tmp_path / f"a{ext}")
    data, affine = read_volume(tmp_path / f"a{ext}")
    assert data.shape == (1, 7, 6, 5)
    for idx in [(0, 0, 0), (6, 0, 0), (0, 5, 0), (0, 0, 4), (3, 2, 1), (6, 5, 4)]:
        ras = np.array(image.TransformIndexToPhysicalPoint(idx)) * [-1, -1, 1]
        np.testing.assert_allclose((affine @ [*idx, 1])[:3], ras, atol=1e-6)
        assert data[(0, *idx)] == arr[idx[::-1]]


def test_maps_of_a_metaimage_case_overlay_the_input_in_simpleitk(tmp_path):
    """The saved probabilities and maps of an oblique ``.mha`` case, read back with SimpleITK: the same physical
    point for every index as the input, and the network's function of the input voxel at that index."""
    sitk = pytest.importorskip("SimpleITK")
    images = tmp_path / "images"
    images.mkdir()
    arr, image = _write_oblique_itk(images / "c.mha")
    model = LoadedModel(_IntensityNet(), "intensity net", spatial_dims=3)
    settings = InferSettings(model="intensity net", method="softmax", samples=1, roi=None, overlap=0.25,
                             intensity="none", measures=MEASURES, seed=0, activation="softmax", checkpoints=[])
    out = tmp_path / "out"
    out.mkdir()
    predict_case(ImageCase("c", (images / "c.mha",)), model, build_inferer("softmax", measures=MEASURES), settings,
                 out, torch.device("cpu"))
    expected = 1 / (1 + np.exp(-(4 * arr.astype(np.float64) - 2)))  # (z, y, x) like arr
    for name in ("c_seg", "c_predictive_entropy", "c_probs"):
        saved = sitk.ReadImage(str(out / f"{name}.nii.gz"))
        for idx in [(0, 0, 0), (6, 5, 4), (3, 1, 2)]:
            at = (*idx, 0)[: saved.GetDimension()]  # the probabilities are 4D, one volume per class
            np.testing.assert_allclose(saved.TransformIndexToPhysicalPoint(at)[:3],
                                       image.TransformIndexToPhysicalPoint(idx), atol=1e-4, err_msg=name)
    probs = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "c_probs.nii.gz")))  # (C, z, y, x)
    np.testing.assert_allclose(probs[1], expected, atol=1e-5)
    seg = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "c_seg.nii.gz")))
    np.testing.assert_array_equal(seg, (expected > 0.5).astype(seg.dtype))


def test_2d_metaimage_gets_a_4x4_affine(tmp_path):
    """A 2D ``.mha`` is read as MONAI reads 2D images: ``(C, x, y)`` and a ``(4, 4)`` RAS affine."""
    sitk = pytest.importorskip("SimpleITK")
    from monai_unc.io.cases import read_volume

    arr = np.random.default_rng(1).random((5, 6)).astype(np.float32)
    image = sitk.GetImageFromArray(arr)
    image.SetSpacing((0.5, 2.0))
    image.SetOrigin((3.0, 4.0))
    sitk.WriteImage(image, str(tmp_path / "a.mha"))
    data, affine = read_volume(tmp_path / "a.mha")
    assert data.shape == (1, 6, 5) and affine.shape == (4, 4)
    assert data[0, 4, 2] == arr[2, 4]
    np.testing.assert_allclose((affine @ [4, 2, 0, 1])[:2], np.array(image.TransformIndexToPhysicalPoint((4, 2))) * -1)
