"""Hostile review 68 of the DICOM series reader's new paths (review 67): files without the preamble.

Tiny series (8 x 8 pixels, 4 slices) written with :func:`write_series` and changed with pydicom.
"""

from __future__ import annotations

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")

from pydicom.filebase import DicomBytesIO  # noqa: E402
from pydicom.filewriter import write_dataset  # noqa: E402

from monai_unc.io.dicom import DicomSeriesError, read_series, write_series  # noqa: E402

AFFINE = np.diag([0.8, 0.9, 2.0, 1.0])


def _rle_ct(folder):
    values = np.random.default_rng(0).integers(-1000, 1000, (8, 8, 4)).astype(float)
    files = write_series(values, AFFINE, folder, modality="CT", shuffle_seed=5)
    for path in files:
        ds = pydicom.dcmread(path)
        ds.compress(pydicom.uid.RLELossless)  # pydicom's own RLE encoder: no plugin needed
        ds.save_as(path)
    return values, files


def test_file_meta_without_preamble_keeps_its_transfer_syntax(tmp_path):
    # found by hostile review 68: a file that starts with its file meta information (no 128-byte preamble, no "DICM")
    # was read as a bare data set and its RLE Lossless transfer syntax replaced by explicit VR little endian: the
    # compressed bytes were taken as pixels, Hounsfield units off by up to 5974, without a word
    values, files = _rle_ct(tmp_path / "s")
    for path in files[::2]:
        data = path.read_bytes()
        assert data[128:132] == b"DICM"
        path.write_bytes(data[132:])
    np.testing.assert_array_equal(read_series(tmp_path / "s").volume, values)


def test_bare_data_set_with_compressed_pixels_is_refused(tmp_path):
    # found by hostile review 68: a bare data set (no file meta: no transfer syntax) with encapsulated (compressed)
    # pixel data was decoded as uncompressed pixels: wrong values, without a word
    _, files = _rle_ct(tmp_path / "s")
    ds = pydicom.dcmread(files[0])
    fp = DicomBytesIO()
    fp.is_little_endian, fp.is_implicit_VR = True, False
    write_dataset(fp, pydicom.Dataset(ds))
    files[0].write_bytes(fp.getvalue())
    with pytest.raises(DicomSeriesError, match=rf"{files[0].name}: pixel data unreadable \(.*compressed.*no file "
                                               r"meta"):
        read_series(tmp_path / "s")
