"""Hostile tests of enhanced multi-frame source images: each reproduces a finding, fixed, against a reference.

References: the volume the test file was built to hold (``enhanced_image``'s real-world values), highdicom's own
volume reader (``highdicom.imread(...).get_volume()``) and the single-frame series of the same slices.
"""

from __future__ import annotations

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
hd = pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import DicomSeriesError, read_series, write_series  # noqa: E402
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


def _item(**attributes):
    ds = pydicom.Dataset()
    for key, value in attributes.items():
        setattr(ds, key, value)
    return ds


def _refused(folder, *parts, pixels=True):
    with pytest.raises(DicomSeriesError) as e:
        read_series(folder, pixels=pixels)
    text = str(e.value)
    assert "\n" not in text and str(folder) in text, text
    for part in parts:
        assert part in text, text
    return text


def test_a_functional_group_both_shared_and_per_frame_with_other_values_is_refused(tmp_path):
    """Found by hostile testing: DICOM puts a functional group either in the shared or in every per-frame item. A
    file with both (other values in each) was read with the per-frame values (its volume, affine and values), while
    highdicom reads the shared ones: its SEG, FRACTIONAL SEG and Parametric Map of such a series were written in the
    shared orientation, not the volume's (the package's own label reader then refused its own SEG), and highdicom's
    volume held other values. Which one the scanner meant is unknown: refused, naming the frame."""
    def orientation(ds):
        ds.SharedFunctionalGroupsSequence[0].PlaneOrientationSequence[0].ImageOrientationPatient = [0, 1, 0, -1, 0, 0]
        for g in ds.PerFrameFunctionalGroupsSequence:
            g.PlaneOrientationSequence = [_item(ImageOrientationPatient=[-1, 0, 0, 0, -1, 0])]

    path, _ = _edited(tmp_path / "o", orientation)
    _refused(path.parent, "enhanced.dcm frame 1: its ImageOrientationPatient", "per-frame", "shared", pixels=False)

    def spacing(ds):
        for g in ds.PerFrameFunctionalGroupsSequence:
            g.PixelMeasuresSequence = [_item(PixelSpacing=[0.8, 0.95], SliceThickness=2.0)]

    path, _ = _edited(tmp_path / "s", spacing)
    _refused(path.parent, "frame 1: its PixelSpacing", pixels=False)

    def rescale(ds):
        ds.SharedFunctionalGroupsSequence[0].PixelValueTransformationSequence = [
            _item(RescaleSlope=7, RescaleIntercept=100, RescaleType="US")]

    path, _ = _edited(tmp_path / "r", rescale)
    read_series(path.parent, pixels=False)  # the geometry is fine
    _refused(path.parent, "frame 1: its RescaleSlope", "per-frame", "shared")


def test_a_functional_group_both_shared_and_per_frame_with_the_same_values_is_read(tmp_path):
    """The same values in both (redundant, harmless) are read; so is an attribute the per-frame item lacks and the
    shared item has (a per-frame PixelMeasuresSequence of the slice thickness only): before, its frames were refused
    as having "no valid PixelSpacing (in ... its per-frame or the shared functional groups)", which the shared item
    had. highdicom reads the same volume."""
    def same(ds):
        shared = ds.SharedFunctionalGroupsSequence[0]
        for g in ds.PerFrameFunctionalGroupsSequence:
            g.PlaneOrientationSequence = [_item(ImageOrientationPatient=list(
                shared.PlaneOrientationSequence[0].ImageOrientationPatient))]
            g.PixelMeasuresSequence = [_item(SliceThickness=2.0)]  # its spacing only shared

    path, real = _edited(tmp_path, same)
    s = read_series(path.parent)
    np.testing.assert_array_equal(s.volume, real.astype(np.float32))
    assert s.spacing == pytest.approx((0.9, 0.8, 2.0))
    v = hd.imread(str(path)).get_volume()
    assert sorted(v.spacing) == pytest.approx(sorted(s.spacing))


def test_an_enhanced_ct_with_its_rescale_at_the_top_level_gets_it(tmp_path):
    """Found by hostile testing: an Enhanced CT whose RescaleSlope / RescaleIntercept are top-level attributes (as
    single-frame CT slices have them; some converters write them so) and in no PixelValueTransformationSequence was
    read as stored values (1024 HU off, silently); highdicom applies them. The top-level ones apply where the
    functional groups state none."""
    def top(ds):
        ds.RescaleSlope, ds.RescaleIntercept, ds.RescaleType = 1, -1024, "HU"

    values = series_values(mni_small()[0], "CT") + 1024
    path, real = _edited(tmp_path, top, modality="CT", rescale=False, values=values)
    s = read_series(path.parent)
    np.testing.assert_array_equal(s.volume, (real - 1024).astype(np.float32))
    v = hd.imread(str(path)).get_volume()
    assert float(v.array.min()) == float(s.volume.min()) and float(v.array.max()) == float(s.volume.max())

    def both(ds):  # the functional groups' values win over top-level ones, which are then not read
        ds.RescaleSlope, ds.RescaleIntercept = ["3", "4"], 17

    path, real = _edited(tmp_path / "both", both, modality="CT")
    np.testing.assert_array_equal(read_series(path.parent).volume, real.astype(np.float32))


@pytest.mark.parametrize("character_set", ["ISO_IR 100", None])
def test_objects_of_a_multiframe_source_in_another_character_set_than_utf8(tmp_path, character_set):
    """Found by hostile testing: the derived objects compare their top-level elements with the source's to find the
    texts they add (``declare_character_set``); a multi-frame source's SharedFunctionalGroupsSequence of the same
    attributes as the SEG's (PlaneOrientationSequence, PixelMeasuresSequence: a SEG of several segments) was compared
    item by item with the SEG's highdicom objects, which raise TypeError compared with a plain item:
    write_segmentation and write_fractional_segmentation of two or more segments failed with that TypeError on every
    such source not in UTF-8 (ISO_IR 100, or no SpecificCharacterSet: the default repertoire)."""
    from monai_unc.io.dicom import (
        default_segment,
        read_segmentation_labels,
        write_fractional_segmentation,
        write_parametric_map,
        write_segmentation,
    )
    from tests.io.dicom._series import dciodvfy_errors

    def charset(ds):
        if character_set is None:
            del ds.SpecificCharacterSet
        else:
            ds.SpecificCharacterSet = character_set
            ds.PatientName = "Müller^Jörg"

    path, _ = _edited(tmp_path, charset)
    assert sorted(e.keyword for e in pydicom.dcmread(path).SharedFunctionalGroupsSequence[0]) == [
        "PixelMeasuresSequence", "PlaneOrientationSequence"]
    series = read_series(path.parent, pixels=False)
    label = np.zeros(series.shape, int)
    label[3:9, 4:12, 2:7] = 1
    label[10:15, 2:6, ::2] = 2
    segments = [default_segment(1, "lesion"), default_segment(2, "oedema")]
    seg = write_segmentation(label, series, tmp_path / "seg.dcm", segments)
    frac = write_fractional_segmentation(np.stack([label == 0, label == 1, label == 2]).astype(np.float32), series,
                                         tmp_path / "frac.dcm", segments)
    pm = write_parametric_map(np.ones(series.shape), series, tmp_path / "pm.dcm", "variance")
    for written in (seg, frac, pm):
        ds = pydicom.dcmread(written)
        assert ds.get("SpecificCharacterSet") == character_set, written.name
        assert str(ds.PatientName) == str(series.datasets[0].PatientName)
        assert dciodvfy_errors(written) == [], written.name
    np.testing.assert_array_equal(read_segmentation_labels(seg, series), label)


@pytest.mark.parametrize("frames", [1, 11])
def test_pixel_data_of_more_frames_than_its_number_of_frames_is_refused(tmp_path, frames):
    """Found by hostile testing: an image whose NumberOfFrames (and per-frame functional groups) say fewer frames
    than its pixel data holds was read from its first frames without a word (``iter_pixels`` yields NumberOfFrames
    frames), while a single-frame slice whose pixel data holds several frames is refused ("pixel data of shape (12,
    4, 4), expected (4, 4)"). Which frames the header describes is unknown: refused, as short pixel data is."""
    def fewer(ds):
        ds.NumberOfFrames = frames
        ds.PerFrameFunctionalGroupsSequence = ds.PerFrameFunctionalGroupsSequence[:frames]

    path, _ = _edited(tmp_path, fewer, seed=None)
    read_series(path.parent, pixels=False)  # the header alone is one stack
    _refused(path.parent, "enhanced.dcm: its pixel data holds 12 frames of 20 x 20 pixels, its NumberOfFrames "
             f"{frames}")

    def padded(ds):  # 8-bit frames of an odd total length: one padding byte, no extra frame
        stored = ds.pixel_array
        ds.BitsAllocated, ds.BitsStored, ds.HighBit = 8, 8, 7
        ds.PixelData = np.clip(stored, 0, 255).astype(np.uint8).tobytes() + b"\0"

    values = np.round(np.random.default_rng(0).uniform(0, 255, (3, 5, 3)))
    path, real = _edited(tmp_path / "odd", padded, values=values, rescale=False)
    np.testing.assert_array_equal(read_series(path.parent).volume, real.astype(np.float32))


def _long_decimals(item, name):
    """``name`` of ``item`` rewritten as decimal strings of 20 characters (invalid DS, as some writers give them)."""
    from pydicom.dataelem import RawDataElement
    from pydicom.tag import Tag

    tag = Tag(pydicom.datadict.tag_for_keyword(name))
    raw = "\\".join(f"{float(v) + 1e-9:.17f}"[:20] for v in item.get(name)).encode()
    raw += b" " * (len(raw) % 2)
    del item[tag]
    item._dict[tag] = RawDataElement(tag, "DS", len(raw), raw, 0, False, True)


def test_objects_of_a_multiframe_source_with_over_long_decimal_strings_pass_dciodvfy(tmp_path):
    """Found by hostile testing: highdicom copies a multi-frame source's per-frame PlanePositionSequence (and its
    shared PlaneOrientationSequence and PixelMeasuresSequence) into the SEG and Parametric Map as they are, so a
    source's decimal strings of more than 16 characters (invalid, seen in the wild; read as numbers) made SEG and
    Parametric Maps that dciodvfy rejects ("Length invalid for this VR"); of single-frame slices highdicom writes the
    positions from their numbers, and the objects pass. They are given from the series' numbers, as for a one-frame
    image whose position is shared."""
    from monai_unc.io.dicom import default_segment, read_segmentation_labels, write_parametric_map, write_segmentation
    from tests.io.dicom._series import dciodvfy_errors

    def long(ds):
        for group in ds.PerFrameFunctionalGroupsSequence:
            _long_decimals(group.PlanePositionSequence[0], "ImagePositionPatient")
        shared = ds.SharedFunctionalGroupsSequence[0]
        _long_decimals(shared.PlaneOrientationSequence[0], "ImageOrientationPatient")
        _long_decimals(shared.PixelMeasuresSequence[0], "PixelSpacing")

    path, _ = _edited(tmp_path, long)
    position = pydicom.dcmread(path).PerFrameFunctionalGroupsSequence[0].PlanePositionSequence[0]
    assert max(len(str(v)) for v in position.ImagePositionPatient) > 16  # the source as built
    series = read_series(path.parent, pixels=False)
    label = np.zeros(series.shape, int)
    label[3:9, 4:12, 2:7] = 1
    seg = write_segmentation(label, series, tmp_path / "seg.dcm", [default_segment(1, "lesion")])
    pm = write_parametric_map(np.ones(series.shape), series, tmp_path / "pm.dcm", "variance")
    for written in (seg, pm):
        assert dciodvfy_errors(written) == [], written.name
    np.testing.assert_array_equal(read_segmentation_labels(seg, series), label)


def test_a_seg_of_single_frame_slices_is_read_whatever_its_referenced_frame_number(tmp_path):
    """review48: frame numbers are read for a multi-frame source only; a SEG on single-frame slices whose source
    references hold a ReferencedFrameNumber of two values was read before multi-frame reading and then refused."""
    from monai_unc.io.dicom.labels import read_segmentation_labels
    from monai_unc.io.dicom.objects import default_segment, write_segmentation

    write_series(np.zeros((4, 5, 3)), np.eye(4), tmp_path / "s", modality="CT")
    series = read_series(tmp_path / "s")
    labels = np.zeros((4, 5, 3), np.uint8)
    labels[1:3, 1:3, 1] = 1
    ds = pydicom.dcmread(write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(1)]))
    for group in ds.PerFrameFunctionalGroupsSequence:
        for source in group.DerivationImageSequence[0].SourceImageSequence:
            source.ReferencedFrameNumber = ["1", "2"]
    ds.save_as(tmp_path / "seg2.dcm")
    assert np.array_equal(read_segmentation_labels(tmp_path / "seg2.dcm", series), labels)
