"""The writers and the mapped store of ``monai_unc.io`` fed arrays as real tools produce them (hostile review)."""

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc.io import MappedArrays, save_label_maps, save_nifti, save_probabilities, save_region_maps


@pytest.mark.parametrize("name", ["save_nifti", "save_probabilities", "save_region_maps", "save_label_maps"])
def test_nifti_writers_take_bfloat16_tensors(tmp_path, name):
    """Every NIfTI writer raised torch's "Got unsupported ScalarType BFloat16" for a bfloat16 (autocast) tensor."""
    torch.manual_seed(0)
    u = torch.rand(4, 5, 6).bfloat16()
    p = torch.stack([u, 1 - u])
    fn, x = {"save_nifti": (save_nifti, u), "save_probabilities": (save_probabilities, p),
             "save_region_maps": (save_region_maps, p),
             "save_label_maps": (save_label_maps, (p > 0.5).bfloat16() * 3)}[name]
    back = np.asarray(nib.load(fn(x, np.eye(4), tmp_path / "x.nii.gz")).dataobj)
    back = np.moveaxis(back, -1, 0) if back.ndim == 4 else back
    np.testing.assert_array_equal(back.astype(np.float64), x.float().numpy().astype(np.float64))


def test_mapped_arrays_read_back_big_endian_and_bfloat16(tmp_path):
    """A '>f4' array (nibabel's array of a big-endian NIfTI file) was stored as it was and ``store[i]`` raised
    torch's byte-order ValueError; a bfloat16 tensor raised at ``append``."""
    store = MappedArrays(tmp_path)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    store.append(a.astype(">f4"))
    store.append(a.astype(">i2"))
    store.append(torch.from_numpy(a).bfloat16())
    store.append(np.flip(a, 1))
    np.testing.assert_array_equal(store[0].numpy(), a)
    assert store[1].dtype == torch.int16
    np.testing.assert_array_equal(store[1].numpy(), a.astype(np.int16))
    np.testing.assert_array_equal(store[2].numpy(), a)
    np.testing.assert_array_equal(store[3].numpy(), np.flip(a, 1))


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, ">i4"])
def test_label_maps_keep_labels_above_float32_integers(tmp_path, dtype):
    """Labels and segmentations were read as float32, which holds integers only up to 2**24: the label 16777217 (an
    atlas id) came back as 16777216, another structure's label, without a word, and a region spec naming it selected
    nothing."""
    from monai_unc.io import CaseFiles, load_case, read_label
    from monai_unc.io.files import save_region_maps

    labels = np.zeros((6, 5, 4), np.int64)
    labels[1:3, 1:3, 1:3] = 2**24 + 1
    labels[4, 4, 3] = 2**24
    image = nib.Nifti1Image(labels.astype(dtype), np.eye(4))
    if np.dtype(dtype).byteorder == ">":
        image = nib.Nifti1Image(labels.astype(dtype), np.eye(4), image.header.as_byteswapped(">"))
    nib.save(image, tmp_path / "a.nii.gz")
    nib.save(nib.Nifti1Image(labels.astype(np.int32), np.eye(4)), tmp_path / "a_seg.nii.gz")
    data, _ = read_label(CaseFiles("a", tmp_path / "a.nii.gz"))
    np.testing.assert_array_equal(np.asarray(data[0], np.int64), labels)
    probs = save_region_maps(np.full((1, 6, 5, 4), 0.25), np.eye(4), tmp_path / "a_probs.nii.gz")
    case = load_case(CaseFiles("a", tmp_path / "a.nii.gz", seg=tmp_path / "a_seg.nii.gz", probs=probs),
                     multilabel=True)
    np.testing.assert_array_equal(case.label, labels)
    np.testing.assert_array_equal(case.seg, labels)
