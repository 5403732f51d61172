"""The viewer's image colorbar names the unit of the values it shows (found by the clinical QC review 65).

A CT series read through its Modality LUT (``RescaleSlope`` / ``RescaleIntercept``) gives Hounsfield units, but the
viewer's colorbar said ``image intensity (stored units)``: in DICOM, "stored values" are the pixel values *before*
that rescale, so a physicist reading ``-1000 .. 1400 (stored units)`` took the HU for raw pixel values.
"""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest

from monai_unc.io import image_unit
from monai_unc.report.viewer import case_viewer, viewer_block


def _case():
    seg = np.zeros((6, 5, 4), np.uint8)
    seg[1:4, 1:4, 1:3] = 1
    u = np.linspace(0, 1, seg.size, dtype=np.float32).reshape(seg.shape)
    return seg, u


@pytest.mark.parametrize("modality, unit", [("CT", "HU"), ("MR", "real-world values")])
def test_image_unit_of_a_dicom_series(tmp_path, modality, unit):
    pytest.importorskip("highdicom", reason="DICOM series need the dicom extra")
    from monai_unc.io.dicom import write_series

    write_series(np.full((6, 5, 4), 40.0), np.diag([0.9, 0.9, 3.0, 1.0]), tmp_path / "s", modality=modality)
    assert image_unit(tmp_path / "s") == unit


def test_image_unit_of_files_and_nothing(tmp_path):
    path = tmp_path / "a.nii.gz"
    nib.save(nib.Nifti1Image(np.zeros((3, 3, 3), np.float32), np.eye(4)), path)
    assert image_unit(path) is None  # a volume file: its values as stored
    assert image_unit(None) is None
    with pytest.raises(TypeError, match="path"):
        image_unit(3)


def test_viewer_colorbar_names_the_image_unit():
    seg, u = _case()
    image = np.full(seg.shape, -1000.0)
    image[seg > 0] = 40.0
    for unit, title in ((None, "image intensity (stored units)"), ("HU", "image intensity (HU)")):
        data = case_viewer("c", seg, u, image, image_unit=unit)
        vol = {v["role"]: v for v in data["volumes"]}
        assert vol["image"]["title"] == title
        assert f'<span class="mu-cbar-title">{title}</span>' in str(viewer_block(0, data))
    with pytest.raises(TypeError, match="image_unit"):
        case_viewer("c", seg, u, image, image_unit=1)
