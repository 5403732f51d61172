"""Hostile tests of enhanced multi-frame source images: each reproduces a finding, fixed, against a reference.

References: the volume the test file was built to hold (``enhanced_image``'s real-world values), highdicom's own
volume reader (``highdicom.imread(...).get_volume()``) and the single-frame series of the same slices.
"""

from __future__ import annotations

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import read_series, write_series  # noqa: E402
from tests.io.dicom._multiframe import enhanced_image  # noqa: E402
from tests.io.dicom._series import mni_small, series_values  # noqa: E402


def _edited(tmp_path, edit, modality="MR", **kwargs):
    """An Enhanced MR / CT of the MNI box, its dataset changed by ``edit(ds)``; returns (file, real values)."""
    values = kwargs.pop("values", None)
    values = series_values(mni_small()[0], modality) if values is None else values
    path, real = enhanced_image(values, np.diag([0.9, 0.8, 2.0, 1.0]), tmp_path / "e", modality, **kwargs)
    ds = pydicom.dcmread(path)
    edit(ds)
    ds.save_as(path, enforce_file_format=False)
    return path, real


def test_a_deflated_multiframe_image_reads_as_its_single_frame_slices_do(tmp_path):
    """Found by hostile testing: ``pydicom.pixels.iter_pixels`` given the path of a Deflated Explicit VR Little
    Endian file finds no pixel data (it does not inflate), so a valid deflated multi-frame image was refused as
    "pixel data of frame 1 unreadable (AttributeError)", while deflated single-frame slices read."""
    def deflate(ds):
        ds.file_meta.TransferSyntaxUID = pydicom.uid.DeflatedExplicitVRLittleEndian

    path, real = _edited(tmp_path, deflate)
    assert pydicom.dcmread(path).file_meta.TransferSyntaxUID == pydicom.uid.DeflatedExplicitVRLittleEndian
    np.testing.assert_array_equal(read_series(path.parent).volume, real.astype(np.float32))
    files = write_series(np.arange(48.0).reshape(4, 4, 3), np.eye(4), tmp_path / "single", modality="MR")
    for f in files:  # the single-frame slices of the same transfer syntax read, as they did
        ds = pydicom.dcmread(f)
        ds.file_meta.TransferSyntaxUID = pydicom.uid.DeflatedExplicitVRLittleEndian
        ds.save_as(f)
    np.testing.assert_array_equal(read_series(tmp_path / "single").volume, np.arange(48.0).reshape(4, 4, 3))
