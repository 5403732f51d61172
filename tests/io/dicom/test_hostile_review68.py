"""Hostile review 68 of the DICOM series reader's new paths (review 67): files without the preamble.

Tiny series (8 x 8 pixels, 4 slices) written with :func:`write_series` and changed with pydicom.
"""

from __future__ import annotations

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")

from pydicom.filebase import DicomBytesIO  # noqa: E402
from pydicom.filewriter import write_dataset  # noqa: E402

from monai_unc.io.dicom import (  # noqa: E402
    DicomSegError,
    DicomSeriesError,
    check_distinct_segment_names,
    check_segment_classes,
    default_segment,
    read_series,
    segment_name_key,
    write_segmentation,
    write_series,
)

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


NFD_OEDEM = "O\u0308dem"  # "Ödem" decomposed (O + combining diaeresis), as macOS and some tools store text


def test_segment_names_differing_only_in_unicode_form_are_one_name():
    # found by hostile review 68: "Ödem" composed (U+00D6) and decomposed (O + U+0308) are the same text to Unicode
    # and look the same in a viewer, but passed as two distinct segment names
    assert segment_name_key("\u00d6dem") == segment_name_key(NFD_OEDEM)
    for a, b in (("\u00d6dem", NFD_OEDEM), ("\u00d6DEM", "o\u0308dem ")):
        with pytest.raises(ValueError, match="have the same segment name"):
            check_distinct_segment_names([(1, a), (2, b)], "segments")
    check_distinct_segment_names([(1, "T2"), (2, "T\u00b2")], "segments")  # compatibility forms look different


def test_a_swapped_segment_named_in_another_unicode_form_is_refused(tmp_path):
    # found by hostile review 68: a SEG whose segment 1 is named "Ödem" in the decomposed form (another tool's text),
    # the name of class 2 in the composed form, was taken as named after no class and read by its number, as label 1
    # ("tumour"), without a word
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    write_series(np.zeros((4, 3, 2)), np.eye(4), tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    labels = np.zeros((4, 3, 2), np.uint8)
    labels[1, 1, 1], labels[2, 1, 1] = 1, 2
    write_segmentation(labels, series, tmp_path / "seg.dcm",
                       [default_segment(1, NFD_OEDEM), default_segment(2, "Segment 2")])  # named as no class
    with pytest.raises(DicomSegError, match="segment 1 is named .*, the name of class 2"):
        check_segment_classes(tmp_path / "seg.dcm", ["background", "tumour", "\u00d6dem"])


def test_a_bare_multiframe_image_of_more_frames_than_its_number_of_frames_is_refused(tmp_path):
    # found by hostile review 68: the check that refuses pixel data of more frames than NumberOfFrames (which frames
    # the header describes is unknown) read the file with pydicom's plain read, which refuses a bare data set, and then
    # said nothing: a bare image was read from its first frames without a word
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    from ._multiframe import legacy_multiframe

    values = np.random.default_rng(0).integers(-1000, 1000, (8, 8, 4)).astype(float)
    files = write_series(values, AFFINE, tmp_path / "s", modality="CT", shuffle_seed=5)
    image = legacy_multiframe(files, tmp_path / "mf")
    ds = pydicom.dcmread(image)
    ds.NumberOfFrames = 3
    ds.PerFrameFunctionalGroupsSequence = ds.PerFrameFunctionalGroupsSequence[:3]
    fp = DicomBytesIO()
    fp.is_little_endian, fp.is_implicit_VR = True, False
    write_dataset(fp, pydicom.Dataset(ds))
    image.write_bytes(fp.getvalue())
    with pytest.raises(DicomSeriesError, match="its pixel data holds 4 frames of 8 x 8 pixels, its NumberOfFrames 3"):
        read_series(tmp_path / "mf")
