"""Hostile images for the triage image check (QC audit of one day of triage)."""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest

from monai_unc.evaluation.triage.images import read_image_channels
from monai_unc.io import CaseError


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_an_image_with_nan_or_inf_voxels_names_its_file_and_case(tmp_path, bad):
    """Found by hostile testing: a new case whose scan had one NaN voxel failed with "ValueError: image contains NaN or
    inf", naming neither the file (one of four channel files) nor the case in the error itself."""
    good = np.ones((4, 4, 4), dtype=np.float32)
    nib.save(nib.Nifti1Image(good, np.eye(4)), tmp_path / "p1_0000.nii.gz")
    corrupt = good.copy()
    corrupt[1, 2, 3] = bad
    nib.save(nib.Nifti1Image(corrupt, np.eye(4)), tmp_path / "p1_0001.nii.gz")
    assert read_image_channels(tmp_path / "p1_0000.nii.gz", "first", case_id="p1").shape == (1, 4, 4, 4)
    with pytest.raises(CaseError, match=r"case 'p1': image p1_0001\.nii\.gz has NaN or inf voxels"):
        read_image_channels(tmp_path / "p1_0000.nii.gz", "all", case_id="p1")
