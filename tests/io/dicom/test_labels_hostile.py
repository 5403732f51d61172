"""Hostile headers of a DICOM SEG read as labels (:func:`monai_unc.io.dicom.read_segmentation_labels`).

A SEG from another tool is untrusted input: numeric attributes with several values (invalid DICOM, seen in the
wild), positions / orientations / pixel spacings with the wrong number of values or none. Each is refused in one line
naming the file and the attribute (a ``DicomSegError``, a ``ValueError`` that ``evaluate`` reports as a bad case),
never raised as a ``TypeError`` or ``AttributeError`` of the reader.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.io.dicom import (  # noqa: E402
    DicomSegError,
    default_segment,
    read_segmentation_labels,
    read_series,
    write_segmentation,
    write_series,
)


def _frame(ds, i: int = 0):
    return ds.PerFrameFunctionalGroupsSequence[i]


def _shared(ds, key: str):
    return ds.SharedFunctionalGroupsSequence[0][key].value[0]


@pytest.mark.parametrize("edit, message", [
    # int() of a MultiValue / list: TypeError
    (lambda ds: setattr(ds, "NumberOfFrames", [2, 2]), "NumberOfFrames has 2 values"),
    (lambda ds: setattr(ds, "Rows", [3, 3]), "Rows has 2 values"),
    (lambda ds: setattr(ds.SegmentSequence[0], "SegmentNumber", [1, 1]), "SegmentNumber has 2 values"),
    (lambda ds: setattr(_frame(ds).SegmentIdentificationSequence[0], "ReferencedSegmentNumber", [1, 2]),
     "frame 1: ReferencedSegmentNumber has 2 values"),
    # iterating one DSfloat: TypeError
    (lambda ds: setattr(_frame(ds).PlanePositionSequence[0], "ImagePositionPatient", 1.0),
     r"frame 1 has no valid ImagePositionPatient \(3 numbers\)"),
    # AttributeError
    (lambda ds: delattr(_shared(ds, "PlaneOrientationSequence"), "ImageOrientationPatient"),
     "frame 1 has no valid ImageOrientationPatient"),
    (lambda ds: delattr(_shared(ds, "PixelMeasuresSequence"), "PixelSpacing"), "frame 1 has no valid PixelSpacing"),
    # numpy's "operands could not be broadcast together": a ValueError naming neither file nor attribute
    (lambda ds: setattr(_shared(ds, "PixelMeasuresSequence"), "PixelSpacing", [1, 1, 1]),
     "frame 1 has no valid PixelSpacing"),
], ids=["frames_2", "rows_2", "segment_number_2", "referenced_segment_2", "position_1", "no_orientation",
        "no_spacing", "spacing_3"])
def test_malformed_seg_headers_are_one_line_naming_file_and_attribute(tmp_path, edit, message):
    write_series(np.zeros((4, 3, 2)), np.eye(4), tmp_path / "s", modality="MR")
    series = read_series(tmp_path / "s", pixels=False)
    labels = np.zeros((4, 3, 2), np.uint8)
    labels[1:3, 1, 1], labels[0, 0, 0] = 2, 1
    ds = pydicom.dcmread(write_segmentation(labels, series, tmp_path / "seg.dcm", [default_segment(1),
                                                                                    default_segment(2)]))
    edit(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.save_as(tmp_path / "bad.dcm")
    with pytest.raises(DicomSegError, match=message) as refused:
        read_segmentation_labels(tmp_path / "bad.dcm", series)
    assert "\n" not in str(refused.value) and "bad.dcm" in str(refused.value)
