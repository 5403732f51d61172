"""Hostile headers of the DICOM input series (:func:`monai_unc.io.dicom.read_series`): what arrives from the wild.

Numeric attributes the reader converts with ``float()`` / ``int()`` holding several values (``RescaleSlope``
``0.5\\1``: invalid DICOM, but written by some exporters), or a text that is no number, or absent. Each must be
refused in one line naming the file and the attribute (a ``DicomSeriesError``, a ``ValueError``), never raised as a
``TypeError`` of ``float()`` with a traceback.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")

from pydicom.dataelem import RawDataElement  # noqa: E402
from pydicom.tag import Tag  # noqa: E402

from monai_unc.io.dicom import DicomSeriesError, read_series, write_series  # noqa: E402


def _raw(keyword: str, vr: str, text: bytes):
    """Set ``keyword`` to the raw bytes ``text`` as stored in a file (no conversion or check by pydicom)."""
    def edit(ds):
        value = text + b" " * (len(text) % 2)
        tag = Tag(pydicom.datadict.tag_for_keyword(keyword))
        ds[tag] = RawDataElement(tag, vr, len(value), value, 0, False, True)
    return edit


def _series(folder, slices: int, edit) -> None:
    """A 4 x 3 CT series of ``slices`` slices whose last slice is changed by ``edit(dataset)``."""
    files = write_series(np.zeros((4, 3, slices)), np.eye(4), folder, modality="CT")
    ds = pydicom.dcmread(files[-1])
    edit(ds)
    with warnings.catch_warnings():  # pydicom warns of the invalid values written on purpose
        warnings.simplefilter("ignore")
        ds.save_as(files[-1])


@pytest.mark.parametrize("slices, edit, pixels, message", [
    # float() of a MultiValue: a TypeError traceback, naming neither the file nor the attribute
    (3, lambda ds: setattr(ds, "RescaleSlope", [0.5, 1]), True, r"00002.dcm: RescaleSlope has 2 values \(0.5\\1.0\)"),
    (3, lambda ds: setattr(ds, "RescaleIntercept", [-1024, 0]), True, "00002.dcm: RescaleIntercept has 2 values"),
    (3, _raw("RescaleSlope", "DS", b"0.5\\1"), True, "00002.dcm: RescaleSlope has 2 values"),
    # a ValueError of float() without the file or the attribute
    (3, _raw("RescaleSlope", "DS", b"abc"), True, "00002.dcm: RescaleSlope 'abc' is not a number"),
    # headers only (dicom-export): int() of a MultiValue, a missing Columns (AttributeError)
    (3, lambda ds: setattr(ds, "NumberOfFrames", [1, 1]), False, "00002.dcm: NumberOfFrames has 2 values"),
    (3, _raw("NumberOfFrames", "IS", b"x"), False, "00002.dcm: NumberOfFrames 'x' is not a number"),
    (3, lambda ds: setattr(ds, "Rows", [3, 3]), False, "00002.dcm: Rows has 2 values"),
    (3, lambda ds: delattr(ds, "Columns"), False, "00002.dcm has no Rows or Columns"),
    # the slice spacing of a one-slice series
    (1, lambda ds: setattr(ds, "SpacingBetweenSlices", [1, 2]), False, "00000.dcm: SpacingBetweenSlices has 2 values"),
    (1, _raw("SliceThickness", "DS", b"abc"), False, "00000.dcm: SliceThickness 'abc' is not a number"),
    (1, _raw("SliceThickness", "DS", b"nan"), False, "00000.dcm: SliceThickness nan is not finite"),
], ids=["slope_2", "intercept_2", "slope_raw_2", "slope_text", "frames_2", "frames_text", "rows_2", "no_columns",
        "spacing_2", "thickness_text", "thickness_nan"])
def test_malformed_numeric_attributes_are_one_line_naming_file_and_attribute(tmp_path, slices, edit, pixels,
                                                                            message):
    _series(tmp_path / "s", slices, edit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DicomSeriesError, match=message) as refused:
            read_series(tmp_path / "s", pixels=pixels)
    assert "\n" not in str(refused.value) and str(tmp_path / "s") in str(refused.value)


def test_empty_rescale_attributes_are_still_no_modality_lut(tmp_path):
    """An empty (type 2 style) RescaleSlope / RescaleIntercept means none, as before."""
    def empty(ds):
        ds.RescaleSlope, ds.RescaleIntercept = "", ""
    _series(tmp_path / "s", 2, empty)
    volume = read_series(tmp_path / "s").volume
    # slice 0 keeps slope 0.5 and intercept -1024 (0 HU); the last slice's stored values read as they are
    assert volume[0, 0, 0] == 0.0 and volume[0, 0, 1] == 2048.0


@pytest.mark.parametrize("modality", ["CT", "MR"])
def test_write_series_writes_valid_slices_of_an_oblique_tilted_volume(tmp_path, modality):
    """Issue: ``write_series`` (the docs' and tests' synthetic series) wrote invalid DICOM: decimal strings of up to 19
    characters where a DS holds 16 (the positions and orientation of an oblique series, a SliceThickness of
    2.4999999999999996) and CT slices without the type 2 AcquisitionNumber or the type 2C Laterality; ``dciodvfy``
    reported errors on every slice. The geometry still reads back as the affine written."""
    from tests.io.dicom._series import dciodvfy_errors, rotation

    affine = np.eye(4)
    affine[:3, :3] = rotation(0, 17) @ rotation(2, 31) @ np.diag([0.9, 0.7, 2.5])
    affine[:3, 2] += 0.3 * affine[:3, 1] / np.linalg.norm(affine[:3, 1])  # a gantry tilt: slices offset in-plane
    affine[:3, 3] = [3.1, -4.7, 5.3]
    files = write_series(np.zeros((6, 5, 4)), affine, tmp_path / "s", modality=modality)
    for path in files:
        assert dciodvfy_errors(path) == [], path.name
    series = read_series(tmp_path / "s", pixels=False)
    np.testing.assert_allclose(series.affine, affine, atol=1e-9)


def test_a_compressed_series_without_its_decoder_names_the_transfer_syntax_and_the_remedy(tmp_path):
    """Issue: a series in JPEG Lossless (what many PACS exports send) read without a decoder for it (pylibjpeg, gdcm)
    was refused as ``pixel data unreadable (RuntimeError)``: nothing said that a codec was missing or which."""
    from pydicom.encaps import encapsulate
    from pydicom.pixels import get_decoder

    jpeg_lossless = "1.2.840.10008.1.2.4.70"
    if get_decoder(jpeg_lossless).is_available:
        pytest.skip("a JPEG Lossless decoder is installed")
    files = write_series(np.zeros((4, 3, 2)), np.eye(4), tmp_path / "s", modality="CT")
    for path in files:  # the headers a PACS sends; the codestream is never decoded
        ds = pydicom.dcmread(path)
        ds.file_meta.TransferSyntaxUID = jpeg_lossless
        ds.PixelData = encapsulate([b"\xff\xd8\xff\xc3" + b"\x00" * 60 + b"\xff\xd9"])
        ds["PixelData"].VR = "OB"
        ds.save_as(path, enforce_file_format=True)
    assert read_series(tmp_path / "s", pixels=False).shape == (4, 3, 2)  # the headers are enough for an export
    with pytest.raises(DicomSeriesError, match=r"pixel data unreadable .*JPEG Lossless.* needs a decoder .*"
                                               r"pylibjpeg") as e:
        read_series(tmp_path / "s")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("image_type", [["ORIGINAL", "PRIMARY", "M", "ND", "MOSAIC"], ["DERIVED", "PRIMARY", "mosaic"]])
def test_a_siemens_mosaic_is_refused_not_read_as_one_large_slice(tmp_path, image_type):
    """Found by the review of DICOM for PACS (left then): a Siemens MOSAIC (a volume's slices tiled in one MR image)
    was read as one 2D slice, a volume of the wrong shape and geometry; it is refused naming the file and the remedy."""
    files = write_series(np.zeros((8, 8, 1)), np.eye(4), tmp_path / "s", modality="MR")
    ds = pydicom.dcmread(files[0])
    ds.ImageType = image_type
    ds.save_as(files[0])
    with pytest.raises(DicomSeriesError, match=r"00000.dcm is a Siemens MOSAIC image .*dcm2niix") as refused:
        read_series(tmp_path / "s", pixels=False)
    assert "\n" not in str(refused.value)
    ds.ImageType = ["ORIGINAL", "PRIMARY", "M", "ND"]  # an ordinary slice reads as before
    ds.save_as(files[0])
    assert read_series(tmp_path / "s").shape == (8, 8, 1)
