"""Hostile review 56 of the DICOM readers and writers: defects found, each checked against a reference."""

from __future__ import annotations

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import (  # noqa: E402
    DicomSegError,
    default_segment,
    frame_slices,
    read_segmentation_labels,
    read_segmentation_regions,
    read_series,
    write_segmentation,
    write_series,
)


@pytest.mark.parametrize("keep", [1, 2, 4])
def test_seg_per_frame_groups_not_one_per_frame_is_refused(tmp_path, keep):
    """A SEG of 3 frames with fewer (or more) per-frame items was read with the first item for the missing frames:
    every frame put on one slice (labels [0, 0, 3] per slice instead of [1, 1, 1]), without a word."""
    write_series(np.zeros((4, 3, 3)), np.eye(4), tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    labels = np.zeros((4, 3, 3), np.uint8)
    labels[0, 0, 0] = labels[1, 1, 1] = labels[2, 2, 2] = 1
    path = write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(1, "WT")])
    ds = pydicom.dcmread(path)
    assert int(ds.NumberOfFrames) == 3 and (read_segmentation_labels(path, series) == labels).all()
    items = list(ds.PerFrameFunctionalGroupsSequence)
    ds.PerFrameFunctionalGroupsSequence = (items + items)[:keep]
    ds.save_as(tmp_path / "bad.dcm")
    message = f"has {keep} per-frame functional group item\\(s\\) for its 3 frame\\(s\\)"
    with pytest.raises(DicomSegError, match=message):
        read_segmentation_labels(tmp_path / "bad.dcm", series)
    with pytest.raises(DicomSegError, match=message):
        read_segmentation_regions(tmp_path / "bad.dcm", series, ["WT"])
    with pytest.raises(DicomSegError, match=message):
        frame_slices(ds, series, "SEG")


def test_seg_segment_number_0_is_refused_not_read_as_background(tmp_path):
    """DICOM numbers segments from 1; a SEG's segment 0 was read as the label 0, its voxels background."""
    write_series(np.zeros((4, 3, 3)), np.eye(4), tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    labels = np.zeros((4, 3, 3), np.uint8)
    labels[0, 0, 0], labels[1, 1, 1] = 1, 2
    path = write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(1), default_segment(2)])
    ds = pydicom.dcmread(path)
    ds.SegmentSequence[0].SegmentNumber = 0
    for item in ds.PerFrameFunctionalGroupsSequence:
        ident = item.SegmentIdentificationSequence[0]
        if ident.ReferencedSegmentNumber == 1:
            ident.ReferencedSegmentNumber = 0
    ds.save_as(tmp_path / "bad.dcm")
    with pytest.raises(DicomSegError, match="has the SegmentNumber 0; segments are numbered from 1"):
        read_segmentation_labels(tmp_path / "bad.dcm", series)


@pytest.mark.parametrize("label", [2.5, 2.0, True, "2"])
def test_segment_label_must_be_an_integer(label):
    """default_segment(2.5) was class 2 named 'class 2.5'; SegmentSpec(2.5, ...) matched no voxel and its SEG segment
    was written empty, without a word."""
    from monai_unc.io.dicom import SegmentSpec

    with pytest.raises(TypeError, match="segment label must be an integer class value"):
        default_segment(label)
    base = default_segment(2)
    with pytest.raises(TypeError, match="segment label must be an integer class value"):
        SegmentSpec(label, "x", base.category, base.type)


def test_segment_label_numpy_integer_is_accepted(tmp_path):
    """numpy integer labels (np.unique of a label map) are class values, stored as int."""
    spec = default_segment(np.int64(2))
    assert spec.label == 2 and type(spec.label) is int and spec.name == "class 2"
    write_series(np.zeros((4, 3, 2)), np.eye(4), tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    labels = np.zeros((4, 3, 2), np.uint8)
    labels[1, 1, 1] = 2
    path = write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(np.uint8(2))])
    assert read_segmentation_labels(path, series).sum() == 1


def test_seg_two_segments_with_one_number_are_refused(tmp_path):
    """Two segments numbered 1 (WT, TC): the last label was kept, and the WT frames were read as TC (WT empty)."""
    write_series(np.zeros((4, 3, 2)), np.eye(4), tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    masks = np.zeros((2, 4, 3, 2), np.uint8)
    masks[0, 1:4, 1, 1] = 1
    masks[1, 2, 1, 1] = 1
    path = write_segmentation(masks, series, tmp_path / "seg.dcm", [default_segment(1, "WT"), default_segment(2, "TC")])
    ds = pydicom.dcmread(path)
    ds.SegmentSequence[1].SegmentNumber = 1
    for item in ds.PerFrameFunctionalGroupsSequence:
        item.SegmentIdentificationSequence[0].ReferencedSegmentNumber = 1
    ds.save_as(tmp_path / "bad.dcm")
    with pytest.raises(DicomSegError, match="two segments have the same number"):
        read_segmentation_regions(tmp_path / "bad.dcm", series, ["WT", "TC"])
    with pytest.raises(DicomSegError, match="two segments have the same number"):
        read_segmentation_labels(tmp_path / "bad.dcm", series)
