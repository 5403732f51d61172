"""Real-world input folders: names and files as they come from scanners, PACS exports and other operating systems."""

import nibabel as nib
import numpy as np
import pytest

from monai_unc.io import list_image_cases, read_volume


@pytest.mark.parametrize("klass", [nib.Nifti1Image, nib.Nifti2Image])
@pytest.mark.parametrize("name", ["a.Nii.Gz", "a.nIi.gz", "a.Nii", "a.NII.GZ", "a.nii.GZ"])
def test_an_extension_in_mixed_letter_case_is_read(tmp_path, klass, name):
    # nibabel rebuilt a.Nii.Gz as a.nii.Gz: "No such file or directory", the case failed as a corrupt file
    data = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    affine = np.diag([2.0, 3.0, 4.0, 1.0])
    plain = tmp_path / ("plain.nii.gz" if name.lower().endswith(".gz") else "plain.nii")
    nib.save(klass(data, affine), plain)
    plain.rename(tmp_path / name)
    assert [c.case_id for c in list_image_cases(tmp_path)] == ["a"]
    volume, read_affine = read_volume(tmp_path / name)
    np.testing.assert_array_equal(volume[0], data)
    np.testing.assert_array_equal(read_affine, affine)


def test_an_uncompressed_file_named_gz_is_named_as_such(tmp_path):
    # was "ImageFileError: ... is not a gzip file (a truncated or corrupt file?)"
    from monai_unc.io import CaseError

    nib.save(nib.Nifti1Image(np.zeros((3, 4, 5), np.float32), np.eye(4)), tmp_path / "plain.nii")
    (tmp_path / "plain.nii").rename(tmp_path / "a.nii.gz")
    with pytest.raises(CaseError, match="a.nii.gz: an uncompressed NIfTI file although its name ends with .gz"):
        read_volume(tmp_path / "a.nii.gz")
