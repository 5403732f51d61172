"""DICOM input series from the wild (hostile review 67): what :func:`read_series` reads, refuses and names.

Tiny series (8 x 8 pixels, a few slices) written with :func:`write_series` and changed with pydicom: files without
the DICOM file preamble and meta header (old scanners and archives write the bare data set; GDCM, hence SimpleITK,
reads them), several images per position that are no duplicates (echoes, time points, acquisitions), MONOCHROME1,
signed and unsigned pixels of fewer stored bits than allocated, and the input folder left as it was.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")

from pydicom.filebase import DicomBytesIO  # noqa: E402
from pydicom.filewriter import write_dataset  # noqa: E402

from monai_unc.io.dicom import DicomSeriesError, read_series, write_series  # noqa: E402

AFFINE = np.diag([0.8, 0.9, 2.0, 1.0])


def _ct(folder, slices=4, seed=0):
    values = np.random.default_rng(seed).integers(-1000, 1000, (8, 8, slices)).astype(float)
    return values, write_series(values, AFFINE, folder, modality="CT", shuffle_seed=5)


def _bare(path, implicit: bool = True, big: bool = False) -> None:
    """Rewrite ``path`` as its bare data set: no 128-byte preamble, no ``DICM``, no file meta information."""
    ds = pydicom.dcmread(path)
    fp = DicomBytesIO()
    fp.is_little_endian, fp.is_implicit_VR = not big, implicit
    write_dataset(fp, pydicom.Dataset(ds))
    path.write_bytes(fp.getvalue())


def _contents(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("implicit", [True, False], ids=["implicit_le", "explicit_le"])
def test_reads_files_without_preamble_or_meta(tmp_path, implicit):
    # found by hostile review 67: a slice stored as its bare data set (no preamble, no DICM, no file meta: the ACR-NEMA
    # style of old CT archives, which GDCM / SimpleITK read) was refused as "not a readable DICOM file"
    values, files = _ct(tmp_path / "s")
    for path in files[::2]:
        _bare(path, implicit=implicit)
    before = _contents(tmp_path / "s")
    series = read_series(tmp_path / "s")
    np.testing.assert_array_equal(series.volume, values)
    np.testing.assert_allclose(series.affine, AFFINE, atol=1e-9)
    assert _contents(tmp_path / "s") == before  # nothing written into (or changed in) the input folder


def test_bare_files_that_are_no_dicom_are_still_refused(tmp_path):
    _ct(tmp_path / "s")
    (tmp_path / "s" / "notes").write_bytes(b"hello, these are my notes\n" * 8)
    with pytest.raises(DicomSeriesError, match=r"notes is not a readable DICOM file \(InvalidDicomError\)"):
        read_series(tmp_path / "s", pixels=False)


def _same_position(files, k: int, **attributes):
    """A copy of slice ``k`` (a new SOPInstanceUID) at its own position, with ``attributes`` changed."""
    ds = pydicom.dcmread(files[k])
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = pydicom.uid.generate_uid()
    for name, value in attributes.items():
        setattr(ds, name, value)
    ds.save_as(files[k].with_name(f"copy_{files[k].name}"))


@pytest.mark.parametrize("attributes, what", [
    ({"EchoTime": 9.0, "EchoNumbers": 2}, r"differ in EchoNumbers: the folder holds several echoes \(2 values"),
    ({"TemporalPositionIdentifier": 2}, r"several temporal positions \(.*TemporalPositionIdentifier"),
    ({"AcquisitionNumber": 2}, r"several acquisitions \(.*AcquisitionNumber"),
    ({"ImageType": ["ORIGINAL", "PRIMARY", "P"]}, r"several image types \(.*ImageType"),
], ids=["echo", "time", "acquisition", "image_type"])
def test_names_several_images_per_position(tmp_path, attributes, what):
    # found by hostile review 67: a multi-echo MR or a time series of single-frame slices was refused as "duplicate
    # slices", a user told to delete copies that are none; the multi-frame reader named echoes and time points
    _, files = _ct(tmp_path / "s")
    _same_position(files, 1, **attributes)
    with pytest.raises(DicomSeriesError, match=what + r".* one image per position is read"):
        read_series(tmp_path / "s", pixels=False)


def test_true_duplicates_are_still_named_duplicates(tmp_path):
    _, files = _ct(tmp_path / "s")
    _same_position(files, 2)
    with pytest.raises(DicomSeriesError, match=r"two slices at the same position \(duplicate slices"):
        read_series(tmp_path / "s", pixels=False)


def test_monochrome1_values_are_not_inverted(tmp_path):
    # MONOCHROME1 says how to display the values (low is white), not what they are: the Modality LUT gives the same
    # Hounsfield units (GDCM / SimpleITK invert such pixels; a model trained on HU must not get them inverted)
    values, files = _ct(tmp_path / "s")
    for path in files:
        ds = pydicom.dcmread(path)
        ds.PhotometricInterpretation = "MONOCHROME1"
        ds.save_as(path)
    np.testing.assert_array_equal(read_series(tmp_path / "s").volume, values)


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_bits_stored_below_bits_allocated(tmp_path, signed):
    # 12 of 16 bits: a signed value's sign is bit 11 (the high bits left 0, not sign-extended); an unsigned slice's
    # bits above the 12 stored (old overlay planes) are no part of the value
    values, files = _ct(tmp_path / "s")
    for path in files:
        ds = pydicom.dcmread(path)
        hu = np.round(ds.pixel_array * 0.5 - 1024).astype(np.int32)
        ds.BitsStored, ds.HighBit, ds.RescaleSlope = 12, 11, 1
        if signed:
            ds.RescaleIntercept, raw = 0, (hu & 0x0FFF).astype(np.uint16)
        else:
            ds.PixelRepresentation, ds.RescaleIntercept = 0, -1024
            raw = ((hu + 1024) | 0xA000).astype(np.uint16)
        ds.PixelData = raw.tobytes()
        ds.save_as(path)
    np.testing.assert_array_equal(read_series(tmp_path / "s").volume, values)


def test_reads_a_bare_multiframe_image(tmp_path):
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    from ._multiframe import legacy_multiframe

    values, files = _ct(tmp_path / "s")
    image = legacy_multiframe(files, tmp_path / "mf")
    _bare(image, implicit=False)
    series = read_series(tmp_path / "mf")
    assert series.multiframe
    np.testing.assert_array_equal(series.volume, values)
    np.testing.assert_allclose(series.affine, AFFINE, atol=1e-9)


def test_a_seg_beside_its_slices_is_named_not_counted_as_a_series(tmp_path):
    # found by hostile review 67: a SEG (or SR) beside the slices has its own SeriesInstanceUID, and the folder was
    # refused as "holds 2 series (uid, uid)", naming no file, where the docs promise "... is not a CT or MR image"
    from monai_unc.io.dicom import default_segment, write_segmentation

    _, files = _ct(tmp_path / "s")
    labels = np.zeros((8, 8, 4), dtype=int)
    labels[2:5, 2:5, 1:3] = 1
    write_segmentation(labels, read_series(tmp_path / "s", pixels=False), tmp_path / "seg.dcm", [default_segment(1)])
    (tmp_path / "s" / "seg.dcm").write_bytes((tmp_path / "seg.dcm").read_bytes())
    with pytest.raises(DicomSeriesError, match=r"seg.dcm is not a CT or MR image \(Segmentation Storage\)"):
        read_series(tmp_path / "s", pixels=False)


def test_a_dicomdir_among_the_slices_is_named(tmp_path):
    # a DICOMDIR has no SeriesInstanceUID (and its SOP class in its file meta only): "holds 2 series (..., (none))"
    _ct(tmp_path / "s")
    meta = pydicom.dataset.FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.1.3.10"
    meta.MediaStorageSOPInstanceUID = pydicom.uid.generate_uid()
    meta.TransferSyntaxUID = pydicom.uid.ExplicitVRLittleEndian
    ds = pydicom.Dataset()
    ds.file_meta, ds.FileSetID = meta, "SITE"
    ds.save_as(tmp_path / "s" / "DICOMDIR", enforce_file_format=True)
    with pytest.raises(DicomSeriesError, match=r"DICOMDIR is not a CT or MR image \(Media Storage Directory Storage\)"):
        read_series(tmp_path / "s", pixels=False)


def test_a_case_folder_of_series_folders_is_not_left_out_silently(tmp_path):
    # found by hostile review 67: a PACS export's <case>/<series>/<slices> layout left the case out of infer /
    # evaluate without a word (a case folder holding no file is no series folder)
    from monai_unc.io import dicom_series_folders

    _ct(tmp_path / "images" / "case1")
    _ct(tmp_path / "images" / "case2" / "CT_1.2.3")
    with pytest.warns(UserWarning, match=r"left out: case2/ \(holding CT_1.2.3/\); a case's series folder holds its"):
        assert [p.name for p in dicom_series_folders(tmp_path / "images")] == ["case1"]


@pytest.mark.parametrize("photometric, samples", [("RGB", 3), ("PALETTE COLOR", 1)])
def test_a_colour_slice_is_refused_by_name(tmp_path, photometric, samples):
    # a screen capture stored as a CT image (RGB), or a palette colour slice: values that are no real-world values,
    # refused as "pixel data of shape (8, 8, 3), expected (8, 8)" or read as palette indices
    _, files = _ct(tmp_path / "s")
    ds = pydicom.dcmread(files[2])
    ds.SamplesPerPixel, ds.PhotometricInterpretation = samples, photometric
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    if samples == 3:
        ds.PlanarConfiguration = 0
    ds.PixelData = np.zeros((8, 8, samples), np.uint8).tobytes()
    ds.save_as(files[2])
    read_series(tmp_path / "s", pixels=False)  # the geometry is the slices' (dicom-export reads no pixel)
    with pytest.raises(DicomSeriesError, match=rf"{files[2].name} is a colour image \(SamplesPerPixel {samples}, "
                                               rf"PhotometricInterpretation {photometric}\); grey-scale"):
        read_series(tmp_path / "s")


def test_two_series_in_one_folder_name_a_file_of_each(tmp_path):
    # which files to move: the message named the two SeriesInstanceUIDs only, and a UID is in no file name
    _ct(tmp_path / "s")
    _ct(tmp_path / "other", slices=2)
    for path in (tmp_path / "other").iterdir():
        path.rename(tmp_path / "s" / f"z_{path.name}")
    with pytest.raises(DicomSeriesError, match=r"holds 2 series \(.*\); give one series per case") as refused:
        read_series(tmp_path / "s", pixels=False)
    message = str(refused.value)  # the series in the order of their UIDs, which are random
    assert re.search(r"\(4 files, e\.g\. 0\d+_\w+\.dcm\)", message), message
    assert re.search(r"\(2 files, e\.g\. z_0\d+_\w+\.dcm\)", message), message


def test_a_decoder_that_cannot_decode_the_slice_says_why_and_what_to_install(tmp_path):
    # found by hostile review 67: a 12-bit JPEG Extended CT (older archives) has a decoder "available" (Pillow), which
    # cannot decode 12 bits: the refusal said "pixel data unreadable (RuntimeError)", neither why nor what to install
    from pydicom.pixels import get_decoder

    decoder = get_decoder(pydicom.uid.JPEGExtended12Bit)
    if decoder.available_plugins != ("pillow",):
        pytest.skip("needs pydicom's Pillow plugin as the only JPEG Extended decoder")
    _, files = _ct(tmp_path / "s", slices=2)
    for path in files:
        ds = pydicom.dcmread(path)
        ds.file_meta.TransferSyntaxUID = pydicom.uid.JPEGExtended12Bit
        ds.BitsStored, ds.HighBit = 12, 11
        ds.PixelData = pydicom.encaps.encapsulate([b"\xff\xd8\xff\xc1" + b"\x00" * 40])
        ds["PixelData"].VR = "OB"
        ds.save_as(path)
    with pytest.raises(DicomSeriesError, match=r"pixel data unreadable \(RuntimeError\); its transfer syntax JPEG "
                                               r"Extended .* was not decoded \(pillow: Pillow does not support .*12-bit"
                                               r".*\): pip install pylibjpeg"):
        read_series(tmp_path / "s")
