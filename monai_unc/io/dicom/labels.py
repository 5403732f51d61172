"""A binary DICOM SEG as a label map on the grid of its source series (the labels of ``monai-unc evaluate``).

:func:`read_segmentation_labels` reads a SEG written by any tool (highdicom, dcmqi, 3D Slicer, ``dicom-export``) and
puts its frames on the ``(columns, rows, slices)`` grid of the case's series (:func:`~.series.read_series`): a frame
goes to the slice it references (``DerivationImageSequence``; of a multi-frame source, the frame its
``ReferencedFrameNumber`` names), or, without a reference, to the slice at its
position; a voxel of segment ``s`` gets the label ``s`` (the SegmentNumber), every other voxel 0. Frames that a
writer left out (empty frames) are background. The SEG must belong to the series: the same frame of reference, the
series among its referenced series, the same pixel grid; a SEG that references an image the series lacks, a frame
off the series' slices, a FRACTIONAL SEG or segments that overlap (a voxel in two segments is no label map; so is a
SEG of nested region masks such as BraTS WT, TC, ET: a region evaluation reads the SEG of the disjoint labels and
makes its regions through the region spec, the labels being the segment numbers) are refused with one line naming
the file and the problem. :func:`read_segmentation_regions` reads a SEG whose segments are region masks, which may
overlap (``evaluate --regions --seg-regions``), each matched to its region by name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pydicom
from pydicom.multival import MultiValue

from .objects import segment_name_key, short_text
from .series import ORIENTATION_ATOL, SPACING_ATOL, DicomSeries

__all__ = ["SEGMENTATION_STORAGE", "DicomSegError", "check_segment_classes", "frame_slices",
           "read_segmentation_labels", "read_segmentation_regions"]

#: the SOP class of a DICOM SEG
SEGMENTATION_STORAGE = "1.2.840.10008.5.1.4.1.1.66.4"
#: the SOP class of a Label Map Segmentation (DICOM 2024: one label value per pixel)
_LABEL_MAP_SEGMENTATION_STORAGE = "1.2.840.10008.5.1.4.1.1.66.7"


class DicomSegError(ValueError):
    """A SEG that cannot be the label map of its series (a ``ValueError``; its text is one line)."""


def _number(ds: pydicom.Dataset, name: str, what: str, default: int | None = None) -> int:
    """The one integer value of ``name`` (``default`` when absent or empty).

    Raises:
        DicomSegError: ``what`` and ``name``: absent without a default, several values (invalid DICOM), no integer.
    """
    try:
        value = ds.get(name, None)
        if value is None or (isinstance(value, str) and not value.strip()):
            if default is None:
                raise DicomSegError(f"{what} has no {name}")
            return default
        if isinstance(value, (MultiValue, list, tuple)):
            raise DicomSegError(f"{what}: {name} has {len(value)} values, it must have one")
        return int(value)
    except (TypeError, ValueError, OverflowError) as e:
        if isinstance(e, DicomSegError):
            raise
        raise DicomSegError(f"{what}: {name} is not an integer") from None


def _numbers(ds: pydicom.Dataset | None, name: str, n: int, what: str) -> np.ndarray:
    """The ``n`` finite numbers of ``name`` (a position, orientation or pixel spacing).

    Raises:
        DicomSegError: ``what`` and ``name``: absent, another number of values, not numbers or not finite.
    """
    try:
        value = None if ds is None else ds.get(name, None)
        arr = np.asarray([float(v) for v in value], dtype=float) if isinstance(value, (MultiValue, list, tuple)) \
            else np.zeros(0)
    except (TypeError, ValueError, OverflowError):
        arr = np.zeros(0)
    if arr.shape != (n,) or not np.isfinite(arr).all():
        raise DicomSegError(f"{what} has no valid {name} ({n} numbers)")
    return arr


def _first(ds: pydicom.Dataset, sequence: str) -> pydicom.Dataset | None:
    seq = ds.get(sequence)
    return seq[0] if seq else None


def _frame_count(ds: pydicom.Dataset, what: str) -> int:
    """The object's NumberOfFrames (1 when absent), checked against its per-frame functional groups.

    Raises:
        DicomSegError: naming ``what``: per-frame functional groups that are not one item per frame. Frame ``i`` beyond
            the items was given the first frame's (:func:`_frame_item`): its position, source image and segment, so
            every frame of a SEG of 3 frames and 1 item was read onto one slice (found by hostile testing).
    """
    n = _number(ds, "NumberOfFrames", what, 1) or 1
    per = ds.get("PerFrameFunctionalGroupsSequence")
    if per is not None and len(per) != n:
        raise DicomSegError(f"{what} has {len(per)} per-frame functional group item(s) for its {n} frame(s); it "
                            "must have one per frame")
    return n


def _frame_item(ds: pydicom.Dataset, i: int, sequence: str) -> pydicom.Dataset | None:
    """``sequence`` of frame ``i``: per-frame first, then shared (PS3.3 C.7.6.16)."""
    for groups in ("PerFrameFunctionalGroupsSequence", "SharedFunctionalGroupsSequence"):
        seq = ds.get(groups)
        if not seq:
            continue
        item = seq[i] if groups.startswith("PerFrame") and i < len(seq) else seq[0]
        if sequence in item:
            return _first(item, sequence)
    return None


def _other_series_images(ds: pydicom.Dataset, series_uid: str) -> set[str]:
    """The SOPInstanceUIDs the object lists under series other than ``series_uid`` (its Common Instance Reference)."""
    items = [*ds.get("ReferencedSeriesSequence", []),
             *(r for study in ds.get("StudiesContainingOtherReferencedInstancesSequence", [])
               for r in study.get("ReferencedSeriesSequence", []))]
    return {str(i.get("ReferencedSOPInstanceUID", "")) for r in items
            if str(r.get("SeriesInstanceUID", "")) != series_uid for i in r.get("ReferencedInstanceSequence", [])}


def frame_slices(ds: pydicom.Dataset, series: DicomSeries, what: str) -> list[int]:
    """The slice of the series each frame of a multi-frame derived object (SEG, Parametric Map) lies on.

    A frame that references a source image (``DerivationImageSequence`` / ``SourceImageSequence``) lies on that
    image's slice, and its ``ImagePositionPatient`` must be the slice's; a frame without a reference lies on the slice
    at its position. References to images the object lists under another series (the other input channels of a
    case, :func:`~.objects.check_other_series`) are not the series' slices and are passed over. Of a multi-frame
    source (:attr:`~.series.DicomSeries.frames`) a reference names the image and its ``ReferencedFrameNumber``: the
    frame lies on that frame's slice (without a frame number: on the slice at its position, which must be in the
    image).

    Args:
        ds: the object (with its per-frame functional groups).
        series: the source series (:func:`~.series.read_series`, headers are enough).
        what: how errors name the object.

    Returns:
        One slice index (into ``series.datasets``) per frame.

    Raises:
        DicomSegError: a frame that references an image the series lacks (or a frame number the multi-frame source
            lacks), or whose position is on no slice; per-frame functional groups that are not one item per frame.
    """
    uids = {str(d.SOPInstanceUID): k for k, d in enumerate(series.datasets)}
    elsewhere = _other_series_images(ds, series.series_uid)
    # of a multi-frame source, a frame is named by (SOPInstanceUID, ReferencedFrameNumber)
    frames = {(str(series.datasets[0].SOPInstanceUID), f): k for k, f in enumerate(series.frames or [])}
    positions = (series.positions if series.positions is not None
                 else np.array([[float(v) for v in d.ImagePositionPatient] for d in series.datasets]))
    n = _frame_count(ds, what)
    out = []
    for i in range(n):
        plane = _frame_item(ds, i, "PlanePositionSequence")
        if plane is None or "ImagePositionPatient" not in plane:
            raise DicomSegError(f"{what}: frame {i + 1} has no ImagePositionPatient")
        pos = _numbers(plane, "ImagePositionPatient", 3, f"{what}: frame {i + 1}")
        derivation = _frame_item(ds, i, "DerivationImageSequence")
        sources = [s for s in (derivation.get("SourceImageSequence") or [])
                   if "ReferencedSOPInstanceUID" in s] if derivation is not None else []
        missing = [str(s.ReferencedSOPInstanceUID) for s in sources
                   if str(s.ReferencedSOPInstanceUID) not in uids and str(s.ReferencedSOPInstanceUID) not in elsewhere]
        if missing:
            raise DicomSegError(f"{what}: frame {i + 1} references the image {missing[0]}, which is not in the "
                                f"series {series.series_uid} (a missing slice?)")
        # the images of the series; those of the other series it lists (a case's other input channels) are not
        # this series' slices (found by review 61: a SEG of a two-channel case was refused)
        sources = [s for s in sources if str(s.ReferencedSOPInstanceUID) in uids]
        refs = [str(s.ReferencedSOPInstanceUID) for s in sources]
        if refs:
            k = uids[refs[0]]
            # read of a multi-frame source only: a single-frame source's SEG was read whatever it held there (review48)
            numbers = [_number(s, "ReferencedFrameNumber", f"{what}: frame {i + 1}", 0) for s in sources
                       if s.get("ReferencedFrameNumber") not in (None, "")] if series.multiframe else []
            if series.multiframe and numbers:  # the source frame it names; without a number: the frame at its position
                if (refs[0], numbers[0]) not in frames:
                    raise DicomSegError(f"{what}: frame {i + 1} references frame {numbers[0]} of the image "
                                        f"{refs[0]}, which has frames 1 to {len(frames)}")
                k = frames[(refs[0], numbers[0])]
            elif series.multiframe:
                k = int(np.abs(positions - pos).max(axis=1).argmin())
            if np.abs(positions[k] - pos).max() > SPACING_ATOL:
                raise DicomSegError(f"{what}: frame {i + 1} lies at {pos.round(3).tolist()}, not at the position of "
                                    f"the image it references ({positions[k].round(3).tolist()})")
        else:
            dist = np.abs(positions - pos).max(axis=1)
            k = int(dist.argmin())
            if dist[k] > SPACING_ATOL:
                raise DicomSegError(f"{what}: frame {i + 1} at {pos.round(3).tolist()} lies on no slice of the "
                                    f"series {series.series_uid}")
        out.append(k)
    return out


def _dcmread(path: Path, stop_before_pixels: bool = False) -> pydicom.Dataset:
    """The DICOM file at ``path``; ``DicomSegError`` naming it when it is not one."""
    try:
        return pydicom.dcmread(path, stop_before_pixels=stop_before_pixels)
    except Exception as e:  # InvalidDicomError and others on a file that is not DICOM
        raise DicomSegError(f"{path} is not a readable DICOM file ({type(e).__name__})") from None


def _segments(ds: pydicom.Dataset, what: str) -> dict[int, str]:
    """``{SegmentNumber: SegmentLabel}`` of the object, checked: numbers from 1, each once.

    Raises:
        DicomSegError: naming ``what``: a SegmentNumber that is no integer, below 1 or given twice.
    """
    items = list(ds.get("SegmentSequence", []))
    segments = {_number(s, "SegmentNumber", f"{what}: a segment"): str(s.get("SegmentLabel", "")).strip()
                for s in items}
    if len(segments) != len(items):
        # the last item's label was kept: a region SEG's frames of one region were read as another's (found by
        # hostile testing)
        raise DicomSegError(f"{what} has {len(items)} segments but {len(segments)} SegmentNumber(s): two segments "
                            "have the same number")
    if any(number < 1 for number in segments):
        # a label map's 0 is the background: segment 0's voxels were read as background without a word (found by
        # hostile testing); DICOM numbers segments from 1 (PS3.3 C.8.20.2)
        raise DicomSegError(f"{what} has the SegmentNumber {min(segments)}; segments are numbered from 1")
    return segments


def _read_seg(
    path: str | os.PathLike, series: DicomSeries
) -> tuple[pydicom.Dataset, str, np.ndarray, list[int], dict[int, str]]:
    """A binary SEG of ``series``, checked (the checks of :func:`read_segmentation_labels` but overlap).

    Returns:
        The dataset, how messages name it, its frames ``(frames, rows, columns)``, the slice of each frame and
        ``{SegmentNumber: SegmentLabel}``.
    """
    path = Path(path)
    what = f"DICOM SEG {path.name}"
    ds = _dcmread(path)
    sop = str(ds.get("SOPClassUID", ""))
    if sop == _LABEL_MAP_SEGMENTATION_STORAGE or str(ds.get("SegmentationType", "")) == "LABELMAP":
        # found by the review of DICOM for PACS: named "not a DICOM SEG" (its SOP class UID) or a FRACTIONAL SEG
        raise DicomSegError(f"{what} is a LABELMAP segmentation (DICOM 2024: one label value per pixel), which this "
                            "reader does not read; labels must be a BINARY SEG: export them as one")
    if sop != SEGMENTATION_STORAGE:
        name = getattr(pydicom.uid.UID(sop), "name", sop) if sop else "no SOP class"
        raise DicomSegError(f"{what} is not a DICOM SEG ({name})")
    if str(ds.get("SegmentationType", "")) != "BINARY":
        raise DicomSegError(f"{what} is a {ds.get('SegmentationType', 'untyped')} segmentation; labels must be a "
                            "BINARY SEG (a FRACTIONAL SEG holds probabilities, not a label map)")
    src = series.datasets[0]
    if str(ds.get("FrameOfReferenceUID", "")) != str(src.get("FrameOfReferenceUID", "")):
        raise DicomSegError(f"{what} has the frame of reference {ds.get('FrameOfReferenceUID', '(none)')}, the "
                            f"series {series.series_uid} {src.get('FrameOfReferenceUID', '(none)')}")
    # the series of the SEG's own study, and those of other studies (a SEG stored in a study of its own)
    items = [*ds.get("ReferencedSeriesSequence", []),
             *(r for study in ds.get("StudiesContainingOtherReferencedInstancesSequence", [])
               for r in study.get("ReferencedSeriesSequence", []))]
    referenced = [str(r.SeriesInstanceUID) for r in items if "SeriesInstanceUID" in r]
    if series.series_uid not in referenced:
        raise DicomSegError(f"{what} references the series {', '.join(referenced) or '(none)'}, not the case's "
                            f"series {series.series_uid}")
    in_series = {str(d.SOPInstanceUID) for d in series.datasets}
    for r in items:
        if str(r.SeriesInstanceUID) != series.series_uid:
            continue
        absent = [str(i.ReferencedSOPInstanceUID) for i in r.get("ReferencedInstanceSequence", [])
                  if str(i.get("ReferencedSOPInstanceUID", "")) not in in_series]
        if absent:
            raise DicomSegError(f"{what} references {len(absent)} image(s) that the series {series.series_uid} "
                                f"lacks (e.g. {absent[0]}): a missing slice?")
    cols, rows, n = series.shape
    if (_number(ds, "Rows", what, 0), _number(ds, "Columns", what, 0)) != (rows, cols):
        raise DicomSegError(f"{what} has frames of {ds.get('Rows')} x {ds.get('Columns')} pixels, the series "
                            f"{rows} x {cols}")
    want = (series.orientation if series.orientation is not None
            else np.array([float(v) for v in src.ImageOrientationPatient]))
    spacing = ([float(v) for v in series.pixel_spacing] if series.pixel_spacing is not None
               else [float(v) for v in src.PixelSpacing])
    for i in range(_frame_count(ds, what)):  # every frame: a writer may put them per frame
        orientation = _numbers(_frame_item(ds, i, "PlaneOrientationSequence"), "ImageOrientationPatient", 6,
                               f"{what}: frame {i + 1}")
        if np.abs(orientation - want).max() > ORIENTATION_ATOL:
            raise DicomSegError(f"{what}: its frames are not oriented as the series' slices (frame {i + 1})")
        measures = _numbers(_frame_item(ds, i, "PixelMeasuresSequence"), "PixelSpacing", 2, f"{what}: frame {i + 1}")
        if np.abs(measures - spacing).max() > 1e-3:
            raise DicomSegError(f"{what}: its pixel spacing is not the series' ({spacing} mm; frame {i + 1})")
    segments = _segments(ds, what)
    slices = frame_slices(ds, series, what)
    try:
        pixels = np.asarray(ds.pixel_array)
    except Exception as e:
        raise DicomSegError(f"{what}: pixel data unreadable ({type(e).__name__})") from None
    if pixels.ndim == 2:
        pixels = pixels[None]
    return ds, what, pixels, slices, segments


def _frame_segment(ds: pydicom.Dataset, i: int, segments: dict[int, str], what: str) -> int:
    """The segment number of frame ``i``, one of ``segments``."""
    ident = _frame_item(ds, i, "SegmentIdentificationSequence")
    number = _number(ident, "ReferencedSegmentNumber", f"{what}: frame {i + 1}") if ident is not None else -1
    if number not in segments:
        raise DicomSegError(f"{what}: frame {i + 1} names segment {number}, the SEG has {sorted(segments)}")
    return number


def read_segmentation_labels(path: str | os.PathLike, series: DicomSeries) -> np.ndarray:
    """Read a binary DICOM SEG as a label map on the grid of its source series.

    Args:
        path: the SEG file.
        series: the case's series (:func:`~.series.read_series`; ``pixels=False`` is enough).

    Returns:
        ``(columns, rows, slices)`` int64 labels: the SegmentNumber of the segment a voxel is in, 0 elsewhere.

    Raises:
        DicomSegError: one line naming the file: not a readable DICOM SEG, a FRACTIONAL SEG, another frame of
            reference, series or pixel grid, an image referenced that the series lacks (a missing frame), a frame
            on no slice, an unknown segment number, segments that overlap, a malformed header (a number with
            several values, a frame's position, orientation or pixel spacing absent or of the wrong length,
            per-frame functional groups that are not one item per frame, a SegmentNumber below 1 or given twice).

    Example:
        >>> import tempfile
        >>> from monai_unc.io.dicom import AlgorithmInfo, default_segment, read_series, write_segmentation
        >>> from monai_unc.io.dicom import write_series
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = write_series(np.zeros((4, 3, 2)), np.eye(4), f"{d}/s", modality="MR")
        ...     s = read_series(f"{d}/s", pixels=False)
        ...     labels = np.zeros((4, 3, 2), np.uint8)
        ...     labels[1:3, 1, 1] = 2
        ...     _ = write_segmentation(labels, s, f"{d}/seg.dcm", [default_segment(1), default_segment(2)])
        ...     bool((read_segmentation_labels(f"{d}/seg.dcm", s) == labels).all())
        True
    """
    ds, what, pixels, slices, segments = _read_seg(path, series)
    cols, rows, n = series.shape
    labels = np.zeros((cols, rows, n), dtype=np.int64)
    for i, k in enumerate(slices):
        number = _frame_segment(ds, i, segments, what)
        mask = pixels[i].T > 0
        plane = labels[:, :, k]
        clash = mask & (plane != 0) & (plane != number)
        if clash.any():
            other = int(plane[clash][0])
            raise DicomSegError(f"{what}: segments {min(other, number)} and {max(other, number)} overlap (e.g. "
                                f"{int(clash.sum())} voxel(s) of slice {k + 1}); a label map needs disjoint segments "
                                "(a SEG of nested region masks such as WT, TC, ET is no label map: give the SEG of "
                                "the disjoint labels, and --regions makes the regions from them, or read its segments "
                                "as the regions with --seg-regions)")
        plane[mask] = number
    return labels


def check_segment_classes(path: str | os.PathLike, class_names: Sequence[str],
                          label_values: Sequence[int] | None = None) -> None:
    """Refuse a SEG whose segment names say another class than the label its number is read as.

    :func:`read_segmentation_labels` reads segment ``s`` as the label ``s`` (``label_values[s - 1]`` with
    ``evaluate --seg-label-values``), whatever the segment is called; tools number segments in the order they were
    made, so a SEG whose segment 1 is named after the class of label 2 would have its classes swapped without a word.
    A segment whose ``SegmentLabel`` is the name of a class (compared as :func:`~.objects.segment_name_key` compares
    names, an underscore as a space, a name over 64 characters shortened as the writers shorten it) must therefore
    be read as that class's label; a segment named as no class (``"Segment_1"``) is read by its number, as before.

    Args:
        path: the SEG file (its headers are read, not its pixels).
        class_names: the name of each label value, background first (``evaluate --class-names``).
        label_values: the label value of each segment in segment order (``--seg-label-values``), or None: segment
            ``s`` is label ``s``.

    Raises:
        DicomSegError: one line naming the file, the segment, its name and the two labels, and the
            ``--seg-label-values`` that reads every named segment as its class where each segment names a class of
            its own; a file that is not a readable DICOM file; a SegmentNumber below 1 or given twice.

    Example:
        >>> import tempfile
        >>> from monai_unc.io.dicom import default_segment, read_series, write_segmentation, write_series
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = write_series(np.zeros((4, 3, 2)), np.eye(4), f"{d}/s", modality="MR")
        ...     s = read_series(f"{d}/s", pixels=False)
        ...     labels = np.zeros((4, 3, 2), np.uint8)
        ...     labels[1, 1, 1], labels[2, 1, 1] = 1, 2
        ...     _ = write_segmentation(labels, s, f"{d}/seg.dcm", [default_segment(1, "edema"),
        ...                                                        default_segment(2, "tumour")])
        ...     check_segment_classes(f"{d}/seg.dcm", ["background", "edema", "tumour"])  # agrees
        ...     try:
        ...         check_segment_classes(f"{d}/seg.dcm", ["background", "tumour", "edema"])
        ...     except DicomSegError as e:
        ...         print(str(e).split(": ", 1)[1][:60])
        segment 1 is named 'edema', the name of class 2, but it is r
    """
    path = Path(path)
    what = f"DICOM SEG {path.name}"
    segments = _segments(_dcmread(path, stop_before_pixels=True), what)

    def key(name: str) -> str:
        # an underscore as a space: a class "right_kidney" (a command line's name) is the segment "Right kidney" of
        # another tool; compared as names only, the swap of two such segments went unseen (hostile review 58)
        return segment_name_key(str(name).replace("_", " "))

    keys = {key(short_text(str(n), 64)): c for c, n in enumerate(class_names)}

    def value(number: int) -> int | None:
        if label_values is None:
            return number
        return int(label_values[number - 1]) if 1 <= number <= len(label_values) else None

    named = {n: keys.get(key(label)) for n, label in sorted(segments.items())}
    for number, cls in named.items():
        read_as = value(number)
        if cls is None or cls == read_as:
            continue
        shown = (f"label {read_as} ({class_names[read_as][:64]!r})" if read_as is not None and 0 <= read_as < len(
            class_names) else f"label {read_as}")
        read = f"it is read as {shown} by its number"
        if read_as is None:  # "read as label None" before (hostile review 58)
            read = f"--seg-label-values gives it no label ({len(label_values or [])} value(s))"
        hint = ""
        # the values must be distinct (--seg-label-values): two segments named after one class have no such mapping,
        # and "--seg-label-values 2,2" was suggested, which the option refuses (hostile review 58)
        if (all(c is not None for c in named.values()) and list(named) == list(range(1, len(named) + 1))
                and len(set(named.values())) == len(named)):
            hint = (" (--seg-label-values " + ",".join(str(c) for c in named.values()) + " reads each segment "
                    "as the class it is named after)")
        raise DicomSegError(f"{what}: segment {number} is named {segments[number][:64]!r}, the name of class {cls}, "
                            f"but {read}: the segments of a SEG are read by their "
                            f"numbers{hint}")


def read_segmentation_regions(path: str | os.PathLike, series: DicomSeries, names: Sequence[str]) -> np.ndarray:
    """Read a binary DICOM SEG whose segments are region masks (e.g. BraTS WT, TC, ET) on the grid of its series.

    Segments may overlap (nested regions). Each segment is matched to a region by its ``SegmentLabel``, which must
    be one of ``names`` (compared as ``write_segmentation`` compares names, :func:`~.objects.segment_name_key`; a
    name over the 64 characters of a SegmentLabel as the writers shorten it, :func:`~.objects.short_text`; each
    region at most once); a region that no segment names is empty (writers may leave out an empty segment). A
    segment named otherwise is refused, so that a misspelt or unrelated segment is never read as an empty region.
    The checks of :func:`read_segmentation_labels` apply, except that segments may overlap.

    Args:
        path: the SEG file.
        series: the case's series (:func:`~.series.read_series`; ``pixels=False`` is enough).
        names: the region names, in the order of the channels to return (the region spec's order).

    Returns:
        ``(R, columns, rows, slices)`` uint8 0/1 masks, one per name.

    Raises:
        DicomSegError: one line naming the file: the problems of :func:`read_segmentation_labels` but overlap, a
            segment whose label is no region name, two segments of one region.

    Example:
        >>> import tempfile
        >>> from monai_unc.io.dicom import default_segment, read_series, write_segmentation, write_series
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = write_series(np.zeros((4, 3, 2)), np.eye(4), f"{d}/s", modality="MR")
        ...     s = read_series(f"{d}/s", pixels=False)
        ...     masks = np.zeros((2, 4, 3, 2), np.uint8)
        ...     masks[0, 1:4, 1, 1] = 1  # WT holds TC
        ...     masks[1, 2:3, 1, 1] = 1
        ...     _ = write_segmentation(masks, s, f"{d}/seg.dcm", [default_segment(1, "WT"), default_segment(2, "TC")])
        ...     read_segmentation_regions(f"{d}/seg.dcm", s, ["TC", "WT"]).sum(axis=(1, 2, 3)).tolist()
        [1, 3]
    """
    ds, what, pixels, slices, segments = _read_seg(path, series)
    names = [str(n) for n in names]
    # a region's name as a SegmentLabel holds it (a name over 64 characters shortened as the writers shorten it), and
    # compared as the writers compare segment names: spaces and case aside
    keys = [segment_name_key(short_text(n, 64)) for n in names]
    if len(set(keys)) != len(keys):
        raise DicomSegError(f"{what}: the region names {names} are the same as segment labels (spaces, case, "
                            "shortening to 64 characters aside), so a segment's label cannot tell them apart")
    channel: dict[int, int] = {}
    named: dict[str, int] = {}
    for number, label in sorted(segments.items()):
        key = segment_name_key(label)
        if key not in keys:
            shown = ", ".join(repr(n) for n in names)
            raise DicomSegError(f"{what}: segment {number} is named {label[:64]!r}, which is no region ({shown}); "
                                "with --seg-regions each segment's label (SegmentLabel) must be a region's name")
        if key in named:
            raise DicomSegError(f"{what}: segments {named[key]} and {number} are both named {label[:64]!r}; each "
                                "region must be one segment")
        named[key] = number
        channel[number] = keys.index(key)
    cols, rows, n = series.shape
    masks = np.zeros((len(names), cols, rows, n), dtype=np.uint8)
    for i, k in enumerate(slices):
        masks[channel[_frame_segment(ds, i, segments, what)], :, :, k] |= (pixels[i].T > 0).astype(np.uint8)
    return masks
