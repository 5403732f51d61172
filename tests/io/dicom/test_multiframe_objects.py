"""The derived objects (SEG, FRACTIONAL SEG, Parametric Map, SR) on a multi-frame source, and SEG labels read on it.

Every frame of an object must reference the source frame it derives from (``ReferencedFrameNumber``), lie at that
frame's position (from the source file's own functional groups) and hold that frame's values; ``dciodvfy`` finds no
error, as on the single-frame series.
"""

from __future__ import annotations

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import (  # noqa: E402
    DicomSegError,
    default_segment,
    read_segmentation_labels,
    read_series,
    write_fractional_segmentation,
    write_measurement_report,
    write_parametric_map,
    write_segmentation,
)
from tests.io.dicom._multiframe import enhanced_image, legacy_multiframe  # noqa: E402
from tests.io.dicom._series import GEOMETRIES, dciodvfy_errors, make_series, mni_small, series_values  # noqa: E402

SEGMENTS = [default_segment(c, name) for c, name in ((1, "csf"), (2, "grey matter"), (3, "white matter"))]


def _source(tmp_path, kind):
    """(multi-frame series, its file, the single-frame series of the same slices or None)."""
    if kind.startswith("legacy"):
        name = kind.split(":")[1]
        _, _, files = make_series(tmp_path / "single", name)
        path = legacy_multiframe(files, tmp_path / "multi")
        return read_series(path.parent, pixels=False), path, read_series(tmp_path / "single", pixels=False)
    name = kind.split(":")[1]
    modality, affine, _ = GEOMETRIES[name]
    path, _ = enhanced_image(series_values(mni_small()[0], modality), affine, tmp_path / "multi", modality, seed=4,
                             per_frame_geometry=True)  # highdicom needs them shared: given on a copy
    return read_series(path.parent, pixels=False), path, None


def _volumes(series):
    """Labels, probabilities and a map on the series' grid (the MNI box, slices in the series' order)."""
    _, label, probs = mni_small()
    assert label.shape == series.shape
    values = np.linspace(0, 1, label.size, dtype=np.float32).reshape(label.shape)
    return label.astype(int), probs.astype(np.float32), values


def _frames(path, series, source):
    """Per object frame: (its pixels, the slice k of the series it derives from), checking reference and position."""
    ds = pydicom.dcmread(path)
    src_uid = str(source.SOPInstanceUID)
    pixels = ds.pixel_array if int(ds.NumberOfFrames) > 1 else ds.pixel_array[None]
    out = []
    for i, group in enumerate(ds.PerFrameFunctionalGroupsSequence):
        refs = group.DerivationImageSequence[0].SourceImageSequence
        assert len(refs) == 1 and str(refs[0].ReferencedSOPInstanceUID) == src_uid, (path.name, i)
        frame = int(refs[0].ReferencedFrameNumber)
        k = series.frames.index(frame)
        own = source.PerFrameFunctionalGroupsSequence[frame - 1].PlanePositionSequence[0].ImagePositionPatient
        np.testing.assert_allclose(np.asarray(group.PlanePositionSequence[0].ImagePositionPatient, float),
                                   np.asarray(own, float), atol=1e-6)
        out.append((group, pixels[i], k))
    assert {k for _, _, k in out} == set(range(series.shape[2]))  # every source frame is referenced
    return ds, out


@pytest.mark.parametrize("kind", ["legacy:oblique_mr", "legacy:anisotropic_ct", "hand:reversed_mr",
                                  "hand:anisotropic_ct", "hand:oblique_mr"])
def test_objects_reference_and_lie_on_their_source_frames(tmp_path, kind):
    series, path, single = _source(tmp_path, kind)
    source = pydicom.dcmread(path, stop_before_pixels=True)
    label, probs, values = _volumes(series)
    seg = write_segmentation(label, series, tmp_path / "seg.dcm", SEGMENTS)
    frac = write_fractional_segmentation(probs, series, tmp_path / "frac.dcm", SEGMENTS[:2])
    pm = write_parametric_map(values, series, tmp_path / "pm.dcm", "predictive_entropy")
    sr = write_measurement_report(tmp_path / "sr.dcm", series, pydicom.dcmread(seg, stop_before_pixels=True),
                                  [pydicom.dcmread(pm, stop_before_pixels=True)],
                                  segment_volumes={1: {"volume": 1.0}}, numbers={"score": 0.5})
    for written in (seg, frac, pm, sr):
        assert dciodvfy_errors(written) == [], written.name
    _, frames = _frames(seg, series, source)
    for group, pixels, k in frames:
        number = int(group.SegmentIdentificationSequence[0].ReferencedSegmentNumber)
        np.testing.assert_array_equal(pixels, label[:, :, k].T == SEGMENTS[number - 1].label)
    _, frames = _frames(frac, series, source)
    for group, pixels, k in frames:
        number = int(group.SegmentIdentificationSequence[0].ReferencedSegmentNumber)
        np.testing.assert_array_equal(pixels, np.round(probs[SEGMENTS[number - 1].label, :, :, k].T * 255))
    _, frames = _frames(pm, series, source)
    for _, pixels, k in frames:
        np.testing.assert_array_equal(pixels, values[:, :, k].T)
    np.testing.assert_array_equal(read_segmentation_labels(seg, series), label)
    report = pydicom.dcmread(sr)
    evidence = [(str(s.SeriesInstanceUID), str(i.ReferencedSOPInstanceUID))
                for study in report.CurrentRequestedProcedureEvidenceSequence
                for s in study.ReferencedSeriesSequence for i in s.ReferencedSOPSequence]
    source_entries = [e for e in evidence if e[0] == series.series_uid]
    assert source_entries == [(series.series_uid, str(source.SOPInstanceUID))]  # the one image, once
    if kind.startswith("hand"):  # its geometry is per frame: highdicom got a copy, the series' header is as read
        assert "PlaneOrientationSequence" not in series.datasets[0].SharedFunctionalGroupsSequence[0]
    if single is not None:  # the same objects on the single-frame series: no error either
        for name, writer in (("seg", lambda p: write_segmentation(label, single, p, SEGMENTS)),
                             ("pm", lambda p: write_parametric_map(values, single, p, "predictive_entropy"))):
            assert dciodvfy_errors(writer(tmp_path / f"single_{name}.dcm")) == [], name


def test_seg_labels_on_a_multiframe_source(tmp_path):
    series, path, single = _source(tmp_path, "legacy:anisotropic_ct")
    label, _, _ = _volumes(series)
    seg = write_segmentation(label, series, tmp_path / "seg.dcm", SEGMENTS)
    # without frame numbers a frame lies on the frame at its position
    ds = pydicom.dcmread(seg)
    for group in ds.PerFrameFunctionalGroupsSequence:
        del group.DerivationImageSequence[0].SourceImageSequence[0].ReferencedFrameNumber
    ds.save_as(tmp_path / "no_numbers.dcm")
    np.testing.assert_array_equal(read_segmentation_labels(tmp_path / "no_numbers.dcm", series), label)
    # a frame number the source lacks
    ds = pydicom.dcmread(seg)
    ds.PerFrameFunctionalGroupsSequence[2].DerivationImageSequence[0].SourceImageSequence[0].ReferencedFrameNumber = 99
    ds.save_as(tmp_path / "bad.dcm")
    with pytest.raises(DicomSegError, match=r"frame 3 references frame 99 of the image .* which has frames 1 to 12"):
        read_segmentation_labels(tmp_path / "bad.dcm", series)
    # a frame number that is another frame's: its position is not the referenced frame's
    ds = pydicom.dcmread(seg)
    item = ds.PerFrameFunctionalGroupsSequence[2].DerivationImageSequence[0].SourceImageSequence[0]
    item.ReferencedFrameNumber = int(item.ReferencedFrameNumber) % 12 + 1
    ds.save_as(tmp_path / "moved.dcm")
    with pytest.raises(DicomSegError, match="not at the position of the image it references"):
        read_segmentation_labels(tmp_path / "moved.dcm", series)
    # the SEG of the single-frame series (the same series UID, other images) is not the multi-frame image's
    with pytest.raises(DicomSegError, match="image.* that the series .* lacks"):
        read_segmentation_labels(write_segmentation(label, single, tmp_path / "single.dcm", SEGMENTS), series)


def test_a_one_frame_image_with_its_position_shared(tmp_path):
    """A one-frame image may state its position in the shared functional groups (the per-frame group overrides it
    where present); highdicom reads positions per frame, so it is given them on a copy of the header."""
    def edit(i, group):
        del group.PlanePositionSequence

    path, _ = enhanced_image(np.arange(12.0).reshape(4, 3, 1), np.diag([0.5, 0.5, 4.0, 1]), tmp_path / "e", "MR",
                             seed=None, rescale=False, frame_edit=edit)
    ds = pydicom.dcmread(path)
    ds.SharedFunctionalGroupsSequence[0].PlanePositionSequence = [pydicom.Dataset()]
    ds.SharedFunctionalGroupsSequence[0].PlanePositionSequence[0].ImagePositionPatient = [1.0, 2.0, 3.0]
    ds.save_as(path)
    series = read_series(path.parent, pixels=False)
    np.testing.assert_allclose(series.positions, [[1.0, 2.0, 3.0]])
    pm = write_parametric_map(np.ones(series.shape), series, tmp_path / "pm.dcm", "variance")
    assert dciodvfy_errors(pm) == []
    group = pydicom.dcmread(pm).PerFrameFunctionalGroupsSequence[0]
    np.testing.assert_allclose(np.asarray(group.PlanePositionSequence[0].ImagePositionPatient, float), [1, 2, 3])
    assert int(group.DerivationImageSequence[0].SourceImageSequence[0].ReferencedFrameNumber) == 1
    assert "PlanePositionSequence" not in series.datasets[0].PerFrameFunctionalGroupsSequence[0]  # as read
