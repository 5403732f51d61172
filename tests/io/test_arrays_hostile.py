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
