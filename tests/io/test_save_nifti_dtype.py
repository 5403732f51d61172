"""``save_nifti(dtype=...)``: the stored data type of a 3D map."""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest

from monai_unc.io import save_nifti


def test_save_nifti_writes_a_uint8_mask_and_refuses_what_is_no_mask(tmp_path):
    """``dtype="uint8"``: a 0/1 mask stored as uint8 (the conformal masks); other values or dtypes refused."""
    mask = np.zeros((3, 4, 5), bool)
    mask[1, 2, 3] = True
    img = nib.load(save_nifti(mask, np.eye(4), tmp_path / "m.nii.gz", dtype="uint8"))
    assert img.get_data_dtype() == np.uint8 and np.array_equal(np.asarray(img.dataobj), mask)
    assert nib.load(save_nifti(mask, np.eye(4), tmp_path / "d.nii.gz")).get_data_dtype() == np.int16
    with pytest.raises(ValueError, match="0/1 mask"):
        save_nifti(np.full((2, 2, 2), 2), np.eye(4), tmp_path / "x.nii.gz", dtype="uint8")
    with pytest.raises(ValueError, match="dtype must be"):
        save_nifti(mask, np.eye(4), tmp_path / "y.nii.gz", dtype="int8")
