"""DICOM in and out: a series of single-frame slices as a volume with its geometry, and the derived objects.

:mod:`.series` reads one series (one folder of CT or MR slices) into a float32 volume with its NIfTI-style affine
(slices ordered by their position along the slice normal, not by file name) and refuses, in one line naming the
series and the problem, a folder with several series, missing slices, uneven spacing, mixed orientations, non-image
objects or slices of different patients; it also writes a volume as such a series (the synthetic example series).
:mod:`.objects` writes the derived objects with highdicom: the segmentation as a binary DICOM SEG, the
probabilities as a FRACTIONAL SEG, each uncertainty map as a float Parametric Map, under new Series and SOP Instance
UIDs (a configurable UID root) with the patient and study of the source (or a new study, :func:`.objects.new_study`).
:mod:`.labels` reads a binary DICOM SEG as the label map of its series (the labels of ``evaluate``), or as the
region masks its segments are (``evaluate --regions --seg-regions``). :mod:`.sr` writes
the Comprehensive 3D SR (TID 1500 measurement report) of a case.

This package needs the ``dicom`` extra (``pip install 'monai-unc[dicom]'``: pydicom and highdicom); importing it
without them raises an ``ImportError`` whose one line says so. The rest of :mod:`monai_unc.io` never imports it.
"""

from __future__ import annotations

#: the one line of the ImportError without the ``dicom`` extra
MISSING_EXTRA = "DICOM input and output need pydicom and highdicom: pip install 'monai-unc[dicom]'"

try:
    import highdicom  # noqa: F401
    import pydicom  # noqa: F401
except ImportError as _error:  # pragma: no cover - exercised by a subprocess test without the packages
    raise ImportError(MISSING_EXTRA) from _error

from .labels import (  # noqa: E402
    DicomSegError,
    check_segment_classes,
    frame_slices,
    read_segmentation_labels,
    read_segmentation_regions,
)
from .objects import (  # noqa: E402 (after the check of the extra)
    DEFAULT_SEGMENTS,
    FRACTIONAL_MAX,
    MAP_UNITS,
    MAX_SEGMENT_NUMBER,
    MAX_SERIES_NUMBER,
    MAX_WINDOW_WIDTH,
    STUDY_UID_MODES,
    AlgorithmInfo,
    SegmentSpec,
    apply_study,
    check_distinct_segment_names,
    check_other_series,
    check_series,
    check_series_description,
    check_series_number,
    check_text,
    check_uid_root,
    dates_removed,
    declare_character_set,
    default_segment,
    new_study,
    new_uid,
    read_segment_specs,
    save_dataset,
    segment_name_key,
    short_text,
    source_images,
    source_zone,
    volume_frames,
    write_fractional_segmentation,
    write_parametric_map,
    write_segmentation,
)
from .series import (  # noqa: E402
    DICOM_GEOMETRY_ATOL,
    SAME_IN_CHANNELS,
    DicomSeries,
    DicomSeriesError,
    channel_on_series_grid,
    read_series,
    series_affine,
    to_series_grid,
    write_series,
)
from .sr import (  # noqa: E402
    SCHEME,
    check_measurement_name,
    check_report_text,
    measurement_unit,
    report_numbers,
    segment_volume_ml,
    write_measurement_report,
)

__all__ = [
    "MISSING_EXTRA",
    "DicomSeries",
    "DicomSeriesError",
    "read_series",
    "series_affine",
    "write_series",
    "to_series_grid",
    "channel_on_series_grid",
    "SAME_IN_CHANNELS",
    "DICOM_GEOMETRY_ATOL",
    "AlgorithmInfo",
    "SegmentSpec",
    "DEFAULT_SEGMENTS",
    "FRACTIONAL_MAX",
    "MAX_WINDOW_WIDTH",
    "save_dataset",
    "source_images",
    "declare_character_set",
    "MAP_UNITS",
    "check_uid_root",
    "default_segment",
    "segment_name_key",
    "check_distinct_segment_names",
    "short_text",
    "check_series_description",
    "check_series_number",
    "check_series",
    "check_other_series",
    "source_zone",
    "dates_removed",
    "MAX_SERIES_NUMBER",
    "MAX_SEGMENT_NUMBER",
    "check_text",
    "volume_frames",
    "new_uid",
    "new_study",
    "apply_study",
    "STUDY_UID_MODES",
    "read_segment_specs",
    "write_segmentation",
    "write_fractional_segmentation",
    "write_parametric_map",
    "DicomSegError",
    "check_segment_classes",
    "frame_slices",
    "read_segmentation_labels",
    "read_segmentation_regions",
    "SCHEME",
    "report_numbers",
    "segment_volume_ml",
    "measurement_unit",
    "check_measurement_name",
    "check_report_text",
    "write_measurement_report",
]
