"""Hostile review 61 of the nnU-Net integration (``monai_unc.nnunet``): the maps of 2D NIfTI datasets (classes and
regions) read back with the image's own shape and geometry, and Rate-In under ``torch.compile``."""

from __future__ import annotations

import copy

import numpy as np
import pytest

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
