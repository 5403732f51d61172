"""One DICOM series of CT or MR slices as a volume with its geometry, and the reverse.

A series is a folder of single-frame slices, or a folder holding one enhanced multi-frame image (Enhanced CT / MR,
Legacy Converted Enhanced CT / MR) whose frames form one stack: each frame is then read as one slice, its geometry
from the functional groups (``PlaneOrientationSequence``, ``PlanePositionSequence``, ``PixelMeasuresSequence``, a
frame's own value, else the shared one; the two differing is refused) and its values through its
``PixelValueTransformationSequence`` (else the top-level ``RescaleSlope`` / ``RescaleIntercept``).

Geometry (DICOM PS3.3 C.7.6.2.1.1): the pixel in column ``c`` and row ``r`` of a slice lies at
``ImagePositionPatient + c * dc * X + r * dr * Y`` in patient coordinates (LPS, mm), with ``X, Y`` the two
direction cosines of ``ImageOrientationPatient`` and ``PixelSpacing = (dr, dc)``. The volume is indexed
``(c, r, k)`` (column, row, slice), slices sorted by their position along the normal ``X x Y`` (never by file name or
instance number), and its affine maps ``(c, r, k)`` to RAS millimetres as NIfTI (nibabel) does: the LPS matrix with
the first two rows negated. Stored values pass through the Modality LUT (``RescaleSlope`` / ``RescaleIntercept``,
e.g. CT Hounsfield units) slice by slice (frame by frame), and through nothing else, as SimpleITK (GDCM) and MONAI's
``LoadImage`` read them: a ``ModalityLUTSequence`` table (warned about), pixel padding values, a Philips private
scale slope (warned about: dcm2niix applies it by default) and a ``RealWorldValueMappingSequence`` are not applied.
"""

from __future__ import annotations

import io as _stdio
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pydicom
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.errors import InvalidDicomError
from pydicom.multival import MultiValue
from pydicom.uid import (
    CTImageStorage,
    DeflatedExplicitVRLittleEndian,
    ExplicitVRBigEndian,
    ExplicitVRLittleEndian,
    ImplicitVRLittleEndian,
    MRImageStorage,
    generate_uid,
)
from pydicom.valuerep import DSfloat

from ..._utils import affine_voxel_volume
from ..cases import GEOMETRY_VOXEL_FRACTION, grid_mismatch, without_time_axis
from ..files import atomic_write_bytes, check_output_folder

__all__ = [
    "DicomSeries",
    "DicomSeriesError",
    "read_series",
    "series_affine",
    "write_series",
    "to_series_grid",
    "channel_on_series_grid",
    "SAME_IN_CHANNELS",
    "SUPPORTED_SOP_CLASSES",
    "MULTIFRAME_SOP_CLASSES",
    "DICOM_GEOMETRY_ATOL",
    "DICOM_GRID_VOXEL_RTOL",
]

#: the single-frame image storage classes the reader takes (CT, MR)
SUPPORTED_SOP_CLASSES = {str(CTImageStorage): "CT", str(MRImageStorage): "MR"}
#: the multi-frame image storage classes the reader takes, one instance alone in its folder, its frames one stack
MULTIFRAME_SOP_CLASSES = {"1.2.840.10008.5.1.4.1.1.2.1": "Enhanced CT", "1.2.840.10008.5.1.4.1.1.4.1": "Enhanced MR",
                          "1.2.840.10008.5.1.4.1.1.2.2": "Legacy Converted Enhanced CT",
                          "1.2.840.10008.5.1.4.1.1.4.4": "Legacy Converted Enhanced MR"}
#: per-frame attributes (functional group, attribute, what several values are) whose values must be one in a
#: multi-frame image read as one volume: several are several stacks, echoes, b-values, time points or images
_ONE_DIMENSION = (("FrameContentSequence", "StackID", "stacks"),
                  ("FrameContentSequence", "TemporalPositionIndex", "temporal positions"),
                  ("MREchoSequence", "EffectiveEchoTime", "echoes"),
                  ("MRDiffusionSequence", "DiffusionBValue", "b-values"),
                  ("MRImageFrameTypeSequence", "ComplexImageComponent", "complex components (magnitude, phase)"))
#: largest difference of direction cosines between slices of one series
ORIENTATION_ATOL = 1e-4
#: largest deviation of a slice step from the median step (mm, and relative to the step)
SPACING_ATOL = 1e-2
SPACING_RTOL = 1e-2
#: largest distance of a voxel centre from where it should lie, as a fraction of the smallest voxel spacing (or
#: :data:`DICOM_GEOMETRY_ATOL` / :data:`SPACING_ATOL` mm, when larger): a NIfTI output against its series
#: (:func:`~monai_unc.io.grid_mismatch`), a slice's pixel spacing against the first slice's (small differences of
#: spacing add up over hundreds of voxels); the package's one fraction, :data:`monai_unc.io.GEOMETRY_VOXEL_FRACTION`
DICOM_GRID_VOXEL_RTOL = GEOMETRY_VOXEL_FRACTION
#: what every slice of a series must agree on: the patient (ID and its issuer, a PatientID being unique only within
#: its IssuerOfPatientID; name, birth date, sex), the study, the frame of reference and the modality (a slice of
#: another patient in the folder is a mixed-up series)
_SAME_IN_SERIES = ("PatientID", "IssuerOfPatientID", "PatientName", "PatientBirthDate", "PatientSex",
                   "StudyInstanceUID", "FrameOfReferenceUID", "Modality")
#: the Hounsfield units :func:`write_series` stores (int16 with RescaleSlope 0.5 and RescaleIntercept -1024)
_CT_RANGE = (-32768 * 0.5 - 1024, 32767 * 0.5 - 1024)
#: the LPS -> RAS flip of the first two axes
_LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])


class DicomSeriesError(ValueError):
    """A folder that is not exactly one readable image series (a ``ValueError``; its text is one line)."""


@dataclass
class DicomSeries:
    """One series read by :func:`read_series`.

    Args:
        folder: the folder it was read from.
        datasets: the header (no pixel data) of the instance each slice comes from, sorted along the slice normal; of
            a multi-frame source, the one instance's header for every slice (the same object).
        files: the file of each slice, in the same order (of a multi-frame source, its one file for every slice).
        affine: ``(4, 4)`` voxel ``(c, r, k)`` -> RAS millimetres.
        shape: ``(columns, rows, slices)``.
        volume: ``(columns, rows, slices)`` float32 real-world values, or None when read with ``pixels=False``.
        frames: of a multi-frame source, the 1-based frame number (in the file's order) of each slice ``k``; None for
            a series of single-frame slices.
        positions: ``(slices, 3)`` ``ImagePositionPatient`` of each slice (LPS mm) as read; None when not given.
        orientation: the 6 direction cosines (``ImageOrientationPatient``) of slice 0; None when not given.
        pixel_spacing: ``PixelSpacing`` ``(row spacing, column spacing)`` of slice 0; None when not given.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = write_series(np.zeros((2, 3, 4)), np.eye(4), d, modality="MR")
        ...     s = read_series(d, pixels=False)
        ...     s.multiframe, s.frames, s.positions[:, 2].tolist()
        (False, None, [0.0, 1.0, 2.0, 3.0])
    """

    folder: Path
    datasets: list[Dataset]
    files: list[Path]
    affine: np.ndarray
    shape: tuple[int, int, int]
    volume: np.ndarray | None = field(default=None, repr=False)
    frames: list[int] | None = field(default=None, repr=False)
    positions: np.ndarray | None = field(default=None, repr=False)
    orientation: np.ndarray | None = field(default=None, repr=False)
    pixel_spacing: np.ndarray | None = field(default=None, repr=False)

    @property
    def multiframe(self) -> bool:
        """Whether the slices are the frames of one multi-frame image (:attr:`frames` says which)."""
        return self.frames is not None

    @property
    def states_modality_lut(self) -> bool:
        """Whether any slice states a ``ModalityLUTSequence``: a table the reader does not apply (stored values)."""
        return any(_states_modality_lut(ds) for ds in self.datasets)

    @property
    def series_uid(self) -> str:
        """The SeriesInstanceUID."""
        return str(self.datasets[0].SeriesInstanceUID)

    @property
    def modality(self) -> str:
        """The Modality of the slices (``CT`` or ``MR``)."""
        return str(self.datasets[0].Modality)

    @property
    def spacing(self) -> tuple[float, float, float]:
        """Distance in mm between neighbouring voxel centres along ``(c, r, k)``.

        Along ``k`` this is the length of the step from one slice's position to the next, which is longer than the
        distance between the slice planes when the slices are offset in-plane (a gantry-tilted CT): volumes use
        :attr:`voxel_volume`.
        """
        return tuple(float(s) for s in np.sqrt((self.affine[:3, :3] ** 2).sum(axis=0)))

    @property
    def slice_spacing(self) -> float:
        """Distance in mm between the planes of neighbouring slices, along the slice normal.

        Equal to ``spacing[2]`` when the slices are stacked along their normal; smaller for a gantry-tilted series
        (slice positions offset in-plane from one slice to the next).
        """
        return _plane_distance(self.affine)

    @property
    def voxel_volume(self) -> float:
        """The volume of one voxel in mm^3: ``|det|`` of the affine's ``3 x 3`` part (a sheared voxel included)."""
        return affine_voxel_volume(self.affine)


def _plane_distance(affine: np.ndarray) -> float:
    """The distance in mm between neighbouring slice planes of an affine whose first two axes are in-plane."""
    m = np.asarray(affine, dtype=float)[:3, :3]
    in_plane = float(np.linalg.norm(np.cross(m[:, 0], m[:, 1])))
    return float(abs(np.linalg.det(m)) / in_plane) if in_plane > 0 else 0.0


def _fail(folder: Path, series: str | None, problem: str) -> DicomSeriesError:
    where = f"DICOM series {series} in {folder}" if series else f"DICOM folder {folder}"
    return DicomSeriesError(f"{where}: {problem}")


def _number(ds: Dataset, name: str, folder: Path, path: Path, kind: type = float, default: Any = None,
            finite: bool = True, series_uid: str | None = None) -> Any:
    r"""The one value of the numeric attribute ``name`` of a header, as ``kind``; ``default`` when absent or empty.

    Headers are untrusted: an attribute with several values (``RescaleSlope`` ``1\2``: invalid DICOM, seen in the
    wild) or a text that is no number is refused in one line naming the file and the attribute, never passed on as
    a ``TypeError`` of ``float()``.

    Raises:
        DicomSeriesError: naming ``path`` and ``name``: several values, not a number, not finite (with ``finite``).
    """
    uid = series_uid or str(ds.get("SeriesInstanceUID", "") or "") or None
    try:  # pydicom converts a raw value when it is first accessed: an invalid decimal string raises here
        value = ds.get(name, None)
    except (TypeError, ValueError, OverflowError):
        raise _fail(folder, uid, f"{path.name}: {name} is not a number") from None
    if isinstance(value, (MultiValue, list, tuple)):
        if len(value) == 0:
            return default
        shown = "\\".join(str(v) for v in list(value)[:4]) + ("\\..." if len(value) > 4 else "")
        raise _fail(folder, uid, f"{path.name}: {name} has {len(value)} values ({shown[:64]}), it must have one")
    if value is None or (isinstance(value, (str, bytes)) and not value.strip()):
        return default
    try:
        number = kind(value)
    except (TypeError, ValueError, OverflowError):
        raise _fail(folder, uid, f"{path.name}: {name} {str(value)[:32]!r} is not a number") from None
    if finite and not np.isfinite(number):
        raise _fail(folder, uid, f"{path.name}: {name} {number} is not finite")
    return number


def _floats(ds: Dataset, name: str, n: int, folder: Path, path: Path) -> np.ndarray:
    value = getattr(ds, name, None)
    try:
        arr = np.asarray([float(v) for v in value], dtype=float)
    except (TypeError, ValueError):
        arr = np.zeros(0)
    if arr.shape != (n,) or not np.isfinite(arr).all():
        raise _fail(folder, str(ds.get("SeriesInstanceUID", "")) or None, f"{path.name} has no valid {name}")
    return arr


def series_affine(orientation: Sequence[float], pixel_spacing: Sequence[float], first: Sequence[float],
                  step: Sequence[float]) -> np.ndarray:
    """The RAS affine of a stack of slices (voxel ``(column, row, slice)`` -> mm).

    Args:
        orientation: ``ImageOrientationPatient`` (6 direction cosines: row direction ``X``, then column ``Y``).
        pixel_spacing: ``PixelSpacing`` ``(row spacing, column spacing)`` in mm.
        first: ``ImagePositionPatient`` of the first slice (LPS mm).
        step: LPS vector from one slice's position to the next (mm).

    Returns:
        ``(4, 4)`` float64 affine in RAS, as nibabel uses.

    Example:
        >>> a = series_affine([1, 0, 0, 0, 1, 0], [0.5, 0.8], [10, 20, 30], [0, 0, 2])
        >>> a.round(2).tolist()
        [[-0.8, -0.0, -0.0, -10.0], [-0.0, -0.5, -0.0, -20.0], [0.0, 0.0, 2.0, 30.0], [0.0, 0.0, 0.0, 1.0]]
    """
    o = np.asarray(orientation, dtype=float)
    dr, dc = (float(v) for v in pixel_spacing)
    lps = np.eye(4)
    lps[:3, 0] = o[:3] * dc
    lps[:3, 1] = o[3:] * dr
    lps[:3, 2] = np.asarray(step, dtype=float)
    lps[:3, 3] = np.asarray(first, dtype=float)
    return _LPS_TO_RAS @ lps


#: the transfer syntax of a bare data set (no file meta information) by pydicom's ``original_encoding``
#: ``(implicit VR, little endian)``
_BARE_SYNTAX = {(True, True): ImplicitVRLittleEndian, (False, True): ExplicitVRLittleEndian,
                (False, False): ExplicitVRBigEndian}


class _BareCompressedError(ValueError):
    """A bare data set (no file meta information) whose pixel data is compressed: its transfer syntax is unknown."""


def _unreadable(error: BaseException) -> str:
    """Why pixel data could not be read, in a refusal: the error's type, or the whole reason of a bare data set's."""
    return str(error) if isinstance(error, _BareCompressedError) else type(error).__name__


def _dcmread(path: Path, stop_before_pixels: bool = False) -> Dataset:
    """Read a DICOM file, or a bare data set: a file without the preamble, ``DICM`` and file meta information.

    Old scanners and archives (ACR-NEMA style exports) store a slice as its bare data set, which PS3.10 does not allow
    but GDCM (SimpleITK, dcm2niix) reads; earlier versions refused such slices as not DICOM. A file
    that pydicom refuses as no DICOM file is read again as a bare data set (``force=True``) and taken only when it
    holds a ``SOPClassUID`` and a ``SOPInstanceUID`` (a text or other file read so holds neither); its transfer
    syntax is then the encoding pydicom found (implicit or explicit VR little endian, explicit VR big endian), set
    in a new file meta so that its pixels can be decoded. A file that starts with its file meta information (no
    preamble, no ``DICM``) keeps the transfer syntax stated there (a compressed one included).

    Raises:
        _BareCompressedError: a bare data set whose pixel data is encapsulated (compressed with a transfer syntax it
            does not state), read with its pixels.
        Exception: pydicom's error of the first read (``InvalidDicomError``) when the file is no bare data set either,
            any other error of reading it.
    """
    try:
        return pydicom.dcmread(path, stop_before_pixels=stop_before_pixels)
    except InvalidDicomError as first:
        try:
            ds = pydicom.dcmread(path, stop_before_pixels=stop_before_pixels, force=True)
            found = "SOPClassUID" in ds and "SOPInstanceUID" in ds and str(ds.SOPClassUID).strip()
        except Exception:
            raise first from None
        if not found:
            raise first from None
        meta = getattr(ds, "file_meta", None)
        if meta is not None and str(meta.get("TransferSyntaxUID", "") or "").strip():
            # file meta information without the preamble and "DICM": its transfer syntax says how the pixels are
            # encoded (found by hostile review 68: it was replaced by the data set's encoding, and RLE-compressed
            # bytes were read as pixels)
            return ds
        syntax = _BARE_SYNTAX.get(tuple(getattr(ds, "original_encoding", None) or ()))
        if syntax is None:
            raise first from None
        if "PixelData" in ds and ds["PixelData"].is_undefined_length:
            # encapsulated (compressed) pixels and no transfer syntax to say how: decoded as plain pixels they gave
            # wrong values without a word (found by hostile review 68)
            raise _BareCompressedError(
                "compressed (encapsulated) pixel data in a bare data set, which has no file meta information to state "
                "its transfer syntax (the compression); write the slice as a DICOM file with its file meta "
                "information, or uncompressed") from None
        meta = FileMetaDataset()
        meta.TransferSyntaxUID = syntax
        meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID = ds.SOPClassUID, ds.SOPInstanceUID
        ds.file_meta = meta
        return ds


def _sop_class(ds: Dataset) -> str:
    """The SOP class of a header: its ``SOPClassUID``, else its file meta's ``MediaStorageSOPClassUID`` (a DICOMDIR)."""
    meta = getattr(ds, "file_meta", None)
    return str(ds.get("SOPClassUID", "") or (meta.get("MediaStorageSOPClassUID", "") if meta is not None else "")
               or "").strip()


def _read_header(path: Path, folder: Path) -> Dataset:
    try:
        return _dcmread(path, stop_before_pixels=True)
    except Exception as e:  # pydicom raises InvalidDicomError and others on a file that is not DICOM
        raise _fail(folder, None, f"{path.name} is not a readable DICOM file ({type(e).__name__})") from None


def read_series(folder: str | os.PathLike, pixels: bool = True, max_bytes: int | None = None) -> DicomSeries:
    """Read one series of CT or MR slices from a folder: single-frame slices, or one enhanced multi-frame image.

    Every regular, non-hidden file of ``folder`` (not its sub-folders; any name, a bare data set without preamble and
    file meta information included) must be a slice of one image series, or the
    folder holds exactly one multi-frame image of :data:`MULTIFRAME_SOP_CLASSES` (Enhanced CT / MR, Legacy Converted
    Enhanced CT / MR) whose frames form one stack: each frame is one slice, its orientation, position and pixel
    spacing taken from its per-frame functional groups or else the shared ones, its values through its
    ``PixelValueTransformationSequence`` (absent: the top-level ``RescaleSlope`` / ``RescaleIntercept``, else
    identity); the frames are checked and sorted as single-frame slices
    are, and :attr:`DicomSeries.frames` says which frame each slice is. Headers are read first (no pixel data) and
    checked; the pixels are then read one slice (one frame) at a time into the float32 volume, so a read holds the
    headers, the volume and one slice (the memory model: ``4 * columns * rows * slices`` bytes; a multi-frame header
    holds its per-frame functional groups, and its frames are read from the file and decoded one at a time by
    ``pydicom.pixels.iter_pixels``, never the file's whole pixel data at once; a Deflated Explicit VR Little Endian
    file, which is inflated whole, excepted).

    Args:
        folder: the folder of the series.
        pixels: read the pixel data (False: headers and geometry only). The values are the stored ones through
            ``RescaleSlope`` / ``RescaleIntercept`` only, as SimpleITK and MONAI's ``LoadImage`` read them: a
            ``ModalityLUTSequence`` (not applied, as SimpleITK, dcm2niix and MONAI leave it) and a Philips private
            scale slope whose dcm2niix "precise" values differ (not applied, as SimpleITK, pydicom and MONAI leave
            it) give a ``UserWarning``; pixel padding values and a ``RealWorldValueMappingSequence`` are kept as
            stored / not applied, as every one of those readers does.
        max_bytes: refuse, before reading any pixel, a series whose float32 volume would take more bytes.

    Returns:
        The :class:`DicomSeries`: sorted headers, files, affine, shape and (with ``pixels``) the volume.

    Raises:
        DicomSeriesError: one line naming the series and the problem: no file, a file that is not DICOM, a non-image
            object, a Siemens MOSAIC image, several series, slices of different patients (their PatientID,
            IssuerOfPatientID, PatientName, PatientBirthDate or PatientSex differ: the message names two such files, not
            the values), a slice without a SOPInstanceUID or two with the same, mixed orientations or sizes, duplicate
            or missing slices, several images at one position that are no duplicates (echoes, time points,
            acquisitions, image types: the message names the attribute that differs), uneven spacing, positions off
            one line, a volume over ``max_bytes``, a RescaleSlope of 0
            or a non-finite slope or intercept (with ``pixels``), a numeric attribute read as one number (RescaleSlope,
            RescaleIntercept, NumberOfFrames, Rows, Columns, a one-slice series' slice spacing) with several values or a
            value that is no number (the message names the file and attribute); of a multi-frame image, further: other
            files beside it, several stacks, echoes, b-values, temporal positions or complex components, two frames at
            one position, a frame without its orientation, position or pixel spacing, a frame whose orientation,
            position, pixel spacing or rescale its per-frame and shared functional groups state with other values,
            per-frame functional groups that are not one item per frame, uncompressed pixel data of more frames than its
            NumberOfFrames (the message names the frame).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = write_series(np.arange(24.0).reshape(2, 3, 4), np.diag([0.5, 0.5, 2.0, 1]), d, modality="MR")
        ...     s = read_series(d)
        ...     s.shape, s.spacing, float(s.volume[1, 2, 3])
        ((2, 3, 4), (0.5, 0.5, 2.0), 23.0)
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise _fail(folder, None, "is not a folder")
    paths = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if not paths:
        raise _fail(folder, None, "holds no file")
    headers = [_read_header(p, folder) for p in paths]
    # a non-image object first: a SEG or SR beside the slices has its own SeriesInstanceUID (a DICOMDIR none), and was
    # refused as a second series, naming no file (found by hostile review 67)
    classes = [_sop_class(ds) for ds in headers]
    image_uids = {str(ds.get("SeriesInstanceUID", "")) for ds, sop in zip(headers, classes)
                  if sop in SUPPORTED_SOP_CLASSES or sop in MULTIFRAME_SOP_CLASSES}
    for p, sop in zip(paths, classes):
        if sop not in SUPPORTED_SOP_CLASSES and sop not in MULTIFRAME_SOP_CLASSES:
            name = getattr(pydicom.uid.UID(sop), "name", sop) if sop else "no SOP class"
            raise _fail(folder, image_uids.pop() if len(image_uids) == 1 else None,
                        f"{p.name} is not a CT or MR image ({name}); the folder may hold image slices only")
    series_uids = sorted({str(ds.get("SeriesInstanceUID", "")) for ds in headers})
    if len(series_uids) > 1:
        # a file of each: which files to move apart, a UID being in no file name (hostile review 67)
        files = {u: [p.name for p, ds in zip(paths, headers) if str(ds.get("SeriesInstanceUID", "")) == u]
                 for u in series_uids}
        shown = ", ".join(f"{u or '(none)'} ({len(files[u])} file{'s' if len(files[u]) > 1 else ''}, e.g. "
                          f"{files[u][0]})" for u in series_uids[:3]) + (" ..." if len(series_uids) > 3 else "")
        raise _fail(folder, None, f"holds {len(series_uids)} series ({shown}); give one series per case")
    uid = series_uids[0] or None
    multiframe = False
    for p, ds in zip(paths, headers):
        sop = str(ds.get("SOPClassUID", ""))
        if sop in MULTIFRAME_SOP_CLASSES:
            if len(paths) > 1:
                kind = MULTIFRAME_SOP_CLASSES[sop]
                article = "an" if kind[0] in "AEIOU" else "a"
                raise _fail(folder, uid, f"{p.name} is {article} {kind} multi-frame image beside "
                                         f"{len(paths) - 1} other file(s); a multi-frame image must be alone in its "
                                         "folder")
            multiframe = True
            continue
        if sop not in SUPPORTED_SOP_CLASSES or "Rows" not in ds:
            name = getattr(pydicom.uid.UID(sop), "name", sop) if sop else "no SOP class"
            raise _fail(folder, uid, f"{p.name} is not a CT or MR image ({name}); the folder may hold image "
                                     "slices only")
        if (_number(ds, "NumberOfFrames", folder, p, int, 1) or 1) != 1:
            raise _fail(folder, uid, f"{p.name} has {ds.NumberOfFrames} frames; single-frame slices only")
        image_type = ds.get("ImageType", [])
        image_type = [image_type] if isinstance(image_type, str) else list(image_type or [])
        if any(str(v).strip().upper() == "MOSAIC" for v in image_type):
            # a Siemens mosaic tiles a volume's slices in one image: read as one large slice, its geometry is wrong
            raise _fail(folder, uid, f"{p.name} is a Siemens MOSAIC image (the slices of a volume tiled in one "
                                     "image); convert the series to NIfTI first (e.g. with dcm2niix)")
    if uid is None:
        raise _fail(folder, None, "its slices have no SeriesInstanceUID")
    seen: dict[str, Path] = {}
    for p, ds in zip(paths, headers):  # a derived object's frame names its slice by this UID
        sop_uid = str(ds.get("SOPInstanceUID", "") or "").strip()
        if not sop_uid:
            raise _fail(folder, uid, f"{p.name} has no SOPInstanceUID")
        if sop_uid in seen:
            raise _fail(folder, uid, f"{seen[sop_uid].name} and {p.name} have the same SOPInstanceUID {sop_uid}; "
                                     "every slice must be its own image")
        seen[sop_uid] = p
    for name in _SAME_IN_SERIES:  # the values are not shown: a log would carry the patient's name or birth date
        values = [str(ds.get(name, "") or "").strip() for ds in headers]
        other = next((i for i, v in enumerate(values) if v != values[0]), None)
        if other is not None:
            raise _fail(folder, uid, f"its slices differ in {name} ({len(set(values))} values, e.g. "
                                     f"{paths[0].name} and {paths[other].name})")
    sizes = set()
    for p, ds in zip(paths, headers):
        size = (_number(ds, "Rows", folder, p, int), _number(ds, "Columns", folder, p, int))
        if None in size or min(size) < 1:
            raise _fail(folder, uid, f"{p.name} has no Rows or Columns")
        sizes.add(size)
    if len(sizes) > 1:
        raise _fail(folder, uid, f"its slices differ in size (rows x columns: {sorted(sizes)})")
    rows, cols = sizes.pop()
    frames: np.ndarray | None = None
    if multiframe:
        orients, spacings, positions, thickness_source = _frame_geometry(paths[0], headers[0], folder, uid)
        frames = np.arange(1, len(positions) + 1)
        headers, paths = [headers[0]] * len(frames), [paths[0]] * len(frames)
        unit = "frames"
    else:
        orients = np.stack([_floats(ds, "ImageOrientationPatient", 6, folder, p) for p, ds in zip(paths, headers)])
        spacings = np.stack([_floats(ds, "PixelSpacing", 2, folder, p) for p, ds in zip(paths, headers)])
        positions = np.stack([_floats(ds, "ImagePositionPatient", 3, folder, p) for p, ds in zip(paths, headers)])
        thickness_source, unit = headers[0], "slices"
    if np.abs(orients - orients[0]).max() > ORIENTATION_ATOL:
        raise _fail(folder, uid, f"mixed orientations (ImageOrientationPatient differs between {unit})")
    if np.abs(spacings - spacings[0]).max() > SPACING_ATOL or (spacings[0] <= 0).any():
        raise _fail(folder, uid, f"PixelSpacing differs between {unit} or is not positive")
    drift = float((np.abs(spacings - spacings[0]) * [rows - 1, cols - 1]).max())  # at a slice's far pixel
    if drift > max(SPACING_ATOL, DICOM_GRID_VOXEL_RTOL * float(spacings[0].min())):
        raise _fail(folder, uid, f"PixelSpacing differs between {unit} (by {np.abs(spacings - spacings[0]).max():.3g} "
                                 f"mm: the far pixel of a slice lies {drift:.3g} mm off the first slice's grid)")
    x, y = orients[0, :3], orients[0, 3:]
    if abs(np.linalg.norm(x) - 1) > 1e-3 or abs(np.linalg.norm(y) - 1) > 1e-3 or abs(x @ y) > 1e-3:
        raise _fail(folder, uid, "ImageOrientationPatient is not two orthogonal unit vectors")
    normal = np.cross(x, y)
    along = positions @ normal
    order = np.argsort(along, kind="stable")
    along, positions = along[order], positions[order]
    headers = [headers[i] for i in order]
    paths = [paths[i] for i in order]
    n = len(paths)
    if n > 1:
        steps = np.diff(along)
        if steps.min() <= SPACING_ATOL:
            if frames is not None:
                at = int(np.argmin(steps))
                raise _fail(folder, uid, f"{paths[0].name}: frames {frames[order][at]} and {frames[order][at + 1]} "
                                         "lie at the same position (two frames at one position: several stacks or "
                                         "images per position); one frame per position is read")
            at = int(np.argmin(steps))
            several = _several_per_position(headers, paths, headers[at], headers[at + 1])
            if several is not None:
                raise _fail(folder, uid, several)
            raise _fail(folder, uid, "two slices at the same position (duplicate slices)")
        unit_step = float(np.median(steps))
        tol = max(SPACING_ATOL, SPACING_RTOL * unit_step)
        if np.abs(steps - unit_step).max() > tol:
            ratios = steps / steps.min()
            if np.abs(ratios - np.round(ratios)).max() * steps.min() <= tol:
                missing = int(np.round(ratios).sum() - len(steps))
                raise _fail(folder, uid, f"{missing} missing {unit[:-1]}(s) (gaps of {steps.max():.3g} mm between "
                                         f"{unit} {steps.min():.3g} mm apart)")
            raise _fail(folder, uid, f"uneven {unit[:-1]} spacing ({steps.min():.4g} to {steps.max():.4g} mm)")
        step = (positions[-1] - positions[0]) / (n - 1)
        off_line = np.abs(positions - (positions[0] + np.arange(n)[:, None] * step)).max()
        if off_line > tol:
            raise _fail(folder, uid, f"{unit[:-1]} positions are not on one line ({off_line:.3g} mm off)")
    else:
        thickness = (_number(thickness_source, "SpacingBetweenSlices", folder, paths[0])
                     or _number(thickness_source, "SliceThickness", folder, paths[0]))
        if not thickness:  # found in review 56: the 1 mm was taken without a word, and volumes in ml scale with it
            warnings.warn(f"{folder}: a single slice without SpacingBetweenSlices or SliceThickness: its thickness is "
                          "taken as 1 mm (voxel volumes and volumes in ml assume it)", UserWarning, stacklevel=2)
            thickness = 1.0
        # a negative spacing (some vendors write SpacingBetweenSlices < 0) flipped the slice axis of the affine, against
        # the normal of the orientation that every other reader of the slice takes (hostile review 58)
        step = normal * abs(thickness)
    affine = series_affine(orients[0], spacings[0], positions[0], step)
    shape = (cols, rows, n)
    need = 4 * cols * rows * n
    if max_bytes is not None and need > max_bytes:
        raise _fail(folder, uid, f"its volume ({cols} x {rows} x {n}) takes {need / 2**20:.1f} MiB, over the "
                                 f"limit of {max_bytes / 2**20:.1f} MiB")
    series = DicomSeries(folder, headers, paths, affine, shape,
                         frames=None if frames is None else [int(f) for f in frames[order]], positions=positions,
                         orientation=orients[order[0]].copy(), pixel_spacing=spacings[order[0]].copy())
    if pixels:
        _check_grey(series)
        series.volume = _read_frames(series) if series.multiframe else _read_pixels(series)
        _warn_values_left_as_stored(series)
    return series


def _check_grey(series: DicomSeries) -> None:
    """Refuse, before any pixel is read, a slice whose pixels are no grey values (``MONOCHROME1`` / ``MONOCHROME2``).

    In earlier versions a ``PALETTE COLOR`` slice was read as its palette indices, without a word, and an
    ``RGB`` one (a screen capture stored as a CT image) refused as ``pixel data of shape (rows, columns, 3)``.
    """
    for path, ds in zip(series.files, series.datasets):
        samples = _number(ds, "SamplesPerPixel", series.folder, path, int, 1, series_uid=series.series_uid)
        photometric = str(ds.get("PhotometricInterpretation", "") or "").strip().upper()
        if samples != 1 or photometric not in ("MONOCHROME1", "MONOCHROME2", ""):
            raise _fail(series.folder, series.series_uid, f"{path.name} is a colour image (SamplesPerPixel {samples}, "
                                                          f"PhotometricInterpretation {photometric or '(none)'}); "
                                                          "grey-scale (MONOCHROME1 / MONOCHROME2) slices only")



#: the private creator of the Philips MR scale slope ``(2005,xx0E)``, and its element
_PHILIPS_SCALE = ("Philips MR Imaging DD 001", 0x0E)


def _philips_scale_slope(ds: Dataset) -> float | None:
    """The Philips private scale slope ``(2005,xx0E)`` of a Philips header; None when absent or unreadable.

    Read from an untrusted header: a value of VR ``UN`` (an implicit VR file whose reader knew no private dictionary)
    is taken as the 4-byte little-endian float the tag holds; anything that is no single finite non-zero number is
    None (the value is only reported, never applied).
    """
    if "PHILIPS" not in str(ds.get("Manufacturer", "") or "").upper():
        return None
    try:
        value = ds.private_block(0x2005, _PHILIPS_SCALE[0])[_PHILIPS_SCALE[1]].value
        if isinstance(value, (bytes, bytearray)):
            value = float(np.frombuffer(bytes(value), dtype="<f4")[0]) if len(value) == 4 else None
        elif isinstance(value, (MultiValue, list, tuple)):
            value = float(value[0]) if len(value) == 1 else None
        number = None if value is None else float(value)
    except (KeyError, IndexError, TypeError, ValueError, OverflowError):
        return None
    return number if number is not None and np.isfinite(number) and number != 0 else None


def _states_modality_lut(ds: Dataset) -> bool:
    """Whether a header states a ``ModalityLUTSequence`` (one that does not parse, in an untrusted header, is none).

    The one check behind the reader's warning and :attr:`DicomSeries.states_modality_lut`.
    """
    try:
        return bool(ds.get("ModalityLUTSequence"))
    except Exception:
        return False


def _warn_values_left_as_stored(series: DicomSeries) -> None:
    """Warn, once per series, of value mappings that the reader leaves out as SimpleITK and MONAI's readers do.

    - a ``ModalityLUTSequence`` (a non-linear Modality LUT): not applied, as SimpleITK (GDCM), dcm2niix and MONAI's
      ``LoadImage`` (ITK and pydicom readers) leave it, so that the values match what a model's training images were
      converted to; pydicom's ``apply_modality_lut`` would map them through the table;
    - a Philips private scale slope ``(2005,xx0E)`` with ``RescaleSlope x scale slope`` other than 1: the values are
      the displayed values ``stored x RescaleSlope + RescaleIntercept`` (SimpleITK, pydicom, MONAI), while dcm2niix by
      default (``-p y``) writes the Philips "precise" values, those divided by ``RescaleSlope x scale slope``.

    Only the headers' top-level attributes are looked at (of a multi-frame image: not its functional groups).
    """
    where = f"DICOM series {series.series_uid} in {series.folder}"
    seen: set[int] = set()
    lut_files, factors = [], {}
    for path, ds in zip(series.files, series.datasets):
        if id(ds) in seen:  # a multi-frame image's one header, once
            continue
        seen.add(id(ds))
        if _states_modality_lut(ds):
            lut_files.append(path.name)
        scale = _philips_scale_slope(ds)
        if scale is not None:
            slope = _number(ds, "RescaleSlope", series.folder, path, float, 1.0, finite=False)
            factor = 1.0 / (slope * scale) if slope and np.isfinite(slope) else 1.0  # a frame's own slope read
            if np.isfinite(factor) and abs(factor - 1.0) > 1e-6:
                factors.setdefault(f"{factor:.6g}", path.name)
    if lut_files:
        others = f" and {len(lut_files) - 1} other file(s) state" if len(lut_files) > 1 else " states"
        warnings.warn(f"{where}: {lut_files[0]}{others} a ModalityLUTSequence, which is not applied: the values "
                      "are the stored pixel values (through RescaleSlope / RescaleIntercept where stated), as "
                      "SimpleITK, dcm2niix and MONAI's LoadImage read them, not the table's output units (pydicom's "
                      "apply_modality_lut maps them); a model trained on images in the modality's units (Hounsfield "
                      "units) sees other values", UserWarning, stacklevel=3)
    if factors:
        factor, name = next(iter(factors.items()))
        several = (f" ({len(factors)} factors across slices)" if len(factors) > 1 else
                   " (a per-image z-score normalisation, nnU-Net's for MR, is not affected by one factor)")
        warnings.warn(f"{where}: {name} states a Philips private scale slope (2005,xx0E): the values are the "
                      "displayed values (stored x RescaleSlope + RescaleIntercept), as SimpleITK, pydicom and MONAI's "
                      f"LoadImage read them; dcm2niix's default (-p y) writes them x {factor} (divided by "
                      "RescaleSlope x scale slope): a model trained on such files with a fixed intensity scale sees "
                      f"other values{several}", UserWarning, stacklevel=3)


#: attributes of single-frame slices whose values tell several images at one position apart (what several values are)
_SEVERAL_PER_POSITION = (("EchoNumbers", "echoes"), ("EchoTime", "echoes"),
                         ("TemporalPositionIdentifier", "temporal positions"), ("TriggerTime", "trigger times"),
                         ("DiffusionBValue", "b-values"), ("AcquisitionNumber", "acquisitions"),
                         ("ImageType", "image types (e.g. magnitude and phase, water and fat)"))


def _stated(ds: Dataset, name: str) -> str:
    """The value of ``name`` in ``ds`` as a text (several values joined by a backslash); empty when absent."""
    try:
        value = ds.get(name)
    except (TypeError, ValueError, OverflowError):
        return ""
    if isinstance(value, (MultiValue, list, tuple)):
        return "\\".join(str(v).strip() for v in value)
    return "" if value is None else str(value).strip()


def _several_per_position(headers: list[Dataset], paths: list[Path], a: Dataset, b: Dataset) -> str | None:
    """The problem of two single-frame slices at one position that are no duplicates; None when nothing differs.

    A multi-echo MR, a time series (perfusion, dynamic contrast) or a series of magnitude and phase images stores
    several images at each position: earlier versions refused such a folder as "duplicate slices",
    which tells a user to delete copies that are none. The first attribute of :data:`_SEVERAL_PER_POSITION` whose
    values differ between ``a`` and ``b`` names what they are, with its number of values in the series.
    """
    for name, what in _SEVERAL_PER_POSITION:
        if _stated(a, name) != _stated(b, name):
            values = sorted({_stated(ds, name) for ds in headers}, key=lambda v: (len(v), v))
            shown = ", ".join(v or "(none)" for v in values[:4]) + (", ..." if len(values) > 4 else "")
            names = [p.name for p, ds in zip(paths, headers) if ds is a or ds is b]
            return (f"{' and '.join(names[:2])} lie at the same position and differ in {name}: the folder holds "
                    f"several {what} ({len(values)} values of {name}: {shown[:80]}); one image per position is read: "
                    "give each as a series of its own")
    return None


def _frame_groups(ds: Dataset, folder: Path, path: Path, uid: str | None) -> tuple[list[Dataset], Dataset]:
    """The per-frame functional group items (one per frame) and the shared item (empty when absent) of ``ds``."""
    n = _number(ds, "NumberOfFrames", folder, path, int)
    if n is None or n < 1:
        raise _fail(folder, uid, f"{path.name} has no NumberOfFrames")
    per = list(ds.get("PerFrameFunctionalGroupsSequence") or [])
    if len(per) != n:
        raise _fail(folder, uid, f"{path.name} has {len(per)} PerFrameFunctionalGroupsSequence item(s) for its {n} "
                                 "frames; one per frame is needed")
    shared = ds.get("SharedFunctionalGroupsSequence") or []
    return per, (shared[0] if shared else Dataset())


def _group_item(per: list[Dataset], shared: Dataset, i: int, sequence: str) -> Dataset | None:
    """The item of functional group ``sequence`` for frame ``i`` (0-based): its own, else the shared one."""
    for item in (per[i], shared):
        seq = item.get(sequence)
        if seq:
            return seq[0]
    return None


def _group_items(per: list[Dataset], shared: Dataset, i: int, sequence: str, name: str) -> list[Dataset]:
    """The items of functional group ``sequence`` for frame ``i`` that hold ``name``: its own first, then the shared.

    DICOM puts a functional group in the shared item or in every per-frame item, not both; a file with both is read
    attribute by attribute (the frame's own value, else the shared one), and its callers refuse two values that
    differ (found by hostile testing: the per-frame value was read, highdicom reads the shared one).
    """
    out = []
    for item in (per[i], shared):
        seq = item.get(sequence)
        if seq and name in seq[0]:
            try:  # an invalid decimal string raises when converted: held, and refused by the caller's reading
                empty = seq[0][name].is_empty
            except (TypeError, ValueError, OverflowError):
                empty = False
            if not empty:
                out.append(seq[0])
    return out


def _both(path: Path, i: int, name: str, own: Any, common: Any) -> str:
    """The problem of frame ``i``'s ``name`` stated in both its per-frame and the shared functional groups."""
    return (f"{path.name} frame {i + 1}: its {name} differs between its per-frame ({own}) and the shared ({common}) "
            "functional groups; a functional group is per frame or shared, not both")


def _frame_geometry(path: Path, ds: Dataset, folder: Path,
                    uid: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, Dataset]:
    """Orientations, pixel spacings and positions of the frames of a multi-frame image, in frame order.

    Returns:
        ``(frames, 6)``, ``(frames, 2)``, ``(frames, 3)`` and the first frame's pixel measures (its
        ``SpacingBetweenSlices`` and ``SliceThickness``: its own, else the shared, else top-level ones) for a
        one-frame image's slice thickness.

    Raises:
        DicomSeriesError: several stacks, echoes, b-values, time points or complex components; a frame without its
            geometry, or whose per-frame and shared functional groups state it differently.
    """
    per, shared = _frame_groups(ds, folder, path, uid)
    for group, name, what in _ONE_DIMENSION:
        values = set()
        for i in range(len(per)):
            item = _group_item(per, shared, i, group)
            value = item.get(name) if item is not None else None
            if value is not None and str(value).strip():
                values.add(str(value).strip())
        if len(values) > 1:
            shown = ", ".join(sorted(values, key=lambda v: (len(v), v))[:4]) + (", ..." if len(values) > 4 else "")
            raise _fail(folder, uid, f"{path.name} holds several {what} ({len(values)} values of {name}: {shown}); "
                                     "one stack of one image per position is read: give each as a series of its own")
    geometry = []
    for sequence, name, count, atol in (("PlaneOrientationSequence", "ImageOrientationPatient", 6, ORIENTATION_ATOL),
                                        ("PixelMeasuresSequence", "PixelSpacing", 2, SPACING_ATOL),
                                        ("PlanePositionSequence", "ImagePositionPatient", 3, SPACING_ATOL)):
        values = np.zeros((len(per), count))
        for i in range(len(per)):
            found = []
            for item in _group_items(per, shared, i, sequence, name):
                try:
                    found.append(np.asarray([float(v) for v in item.get(name)], dtype=float))
                except (TypeError, ValueError):
                    found.append(np.full(0, np.nan))
            if not found or found[0].shape != (count,) or not np.isfinite(found[0]).all():
                raise _fail(folder, uid, f"{path.name} frame {i + 1} has no valid {name} (in the {sequence} of its "
                                         "per-frame or the shared functional groups)")
            if len(found) == 2 and (found[1].shape != (count,) or not np.abs(found[0] - found[1]).max() <= atol):
                raise _fail(folder, uid, _both(path, i, name, _shown(found[0]), _shown(found[1])))
            values[i] = found[0]
        geometry.append(values)
    measures = Dataset()  # a one-frame image's thickness: its own, else the shared, else a top-level one
    for name in ("SpacingBetweenSlices", "SliceThickness"):
        items = _group_items(per, shared, 0, "PixelMeasuresSequence", name) or ([ds] if name in ds else [])
        if items:
            measures[name] = items[0][name]
    return geometry[0], geometry[1], geometry[2], measures


def _shown(values: np.ndarray) -> str:
    return "\\".join(f"{float(v):.6g}" for v in values)


def _frame_rescale(series: DicomSeries) -> list[tuple[float, float]]:
    """``(RescaleSlope, RescaleIntercept)`` of each frame of a multi-frame source, in frame order (checked).

    A frame's own ``PixelValueTransformationSequence``, else the shared one, else the top-level attributes (an
    Enhanced CT of a converter may state them there, as single-frame slices do; highdicom reads them so), else the
    identity (an Enhanced MR may have none).
    """
    ds, path = series.datasets[0], series.files[0]
    uid = series.series_uid
    per, shared = _frame_groups(ds, series.folder, path, uid)
    top: dict[str, Any] = {}  # the top-level values, read only where a frame needs them

    def top_level(name: str) -> Any:
        if name not in top:
            top[name] = _number(ds, name, series.folder, path, float, None, finite=False)
        return top[name]

    out = []
    for i in range(len(per)):
        where = Path(f"{path.name} frame {i + 1}")  # how the messages name the frame
        value = {}
        for name, default in (("RescaleSlope", 1.0), ("RescaleIntercept", 0.0)):
            # a non-finite value is refused below, with both values
            found = [_number(item, name, series.folder, where, float, None, finite=False, series_uid=uid)
                     for item in _group_items(per, shared, i, "PixelValueTransformationSequence", name)]
            found = [v for v in found if v is not None]
            if len(found) == 2 and found[0] != found[1] and np.isfinite(found).all():
                raise _fail(series.folder, uid, _both(path, i, name, f"{found[0]:g}", f"{found[1]:g}"))
            stated = found[0] if found else top_level(name)
            value[name] = default if stated is None else stated
        slope, intercept = value["RescaleSlope"], value["RescaleIntercept"]
        if slope == 0 or not np.isfinite(slope) or not np.isfinite(intercept):
            raise _fail(series.folder, uid, f"{where.name}: RescaleSlope {slope:g} / RescaleIntercept "
                                            f"{intercept:g}: the slope must be finite and not 0 (0 "
                                            "maps every pixel to the intercept), the intercept finite")
        out.append((slope, intercept))
    return out


def _decoder_missing(path: Path, error: BaseException | None = None) -> str:
    """``"; <why>"`` when ``path`` is compressed and no installed decoder decoded it, else ``""``.

    A PACS often sends compressed files (JPEG Lossless, JPEG 2000, JPEG-LS); pydicom decodes most of them only with
    a plugin (pylibjpeg and its codecs, or python-gdcm). Where a plugin is installed but could not decode the slice
    (``error``: pydicom's ``RuntimeError`` naming each plugin's reason, e.g. Pillow and a 12-bit JPEG Extended image)
    and others are not installed, the reasons and what to install are given too.
    """
    from pydicom.pixels import get_decoder

    install = ("pip install pylibjpeg pylibjpeg-libjpeg pylibjpeg-openjpeg (or python-gdcm), or decompress the series "
               "(dcmdjpeg, gdcmconv)")
    try:
        syntax = _dcmread(path, stop_before_pixels=True).file_meta.TransferSyntaxUID
        if not syntax.is_compressed:
            return ""
        decoder = get_decoder(syntax)
        if not decoder.is_available:
            return f"; its transfer syntax {syntax.name} needs a decoder that is not installed: {install}"
        missing = list(decoder.missing_dependencies)
    except Exception:  # no file meta, an unknown transfer syntax, no decoder at all for it: nothing more to say
        return ""
    reasons = [line.strip() for line in str(error or "").splitlines()[1:] if line.strip()]
    if not isinstance(error, RuntimeError) or not reasons or not missing:
        return ""
    why = "; ".join(reasons)
    return (f"; its transfer syntax {syntax.name} was not decoded ({why[:200]}): {install}")


def _read_pixels(series: DicomSeries) -> np.ndarray:
    cols, rows, n = series.shape
    volume = np.empty((cols, rows, n), dtype=np.float32)
    for k, path in enumerate(series.files):
        try:
            ds = _dcmread(path)
            stored = ds.pixel_array
        except Exception as e:
            raise _fail(series.folder, series.series_uid, f"{path.name}: pixel data unreadable "
                                                          f"({_unreadable(e)}){_decoder_missing(path, e)}") from None
        if stored.shape != (rows, cols):
            raise _fail(series.folder, series.series_uid, f"{path.name}: pixel data of shape {stored.shape}, "
                                                          f"expected {(rows, cols)}")
        # absent: no Modality LUT; a non-finite value is refused below, with both values
        slope = _number(ds, "RescaleSlope", series.folder, path, float, 1.0, finite=False)
        intercept = _number(ds, "RescaleIntercept", series.folder, path, float, 0.0, finite=False)
        if slope == 0 or not np.isfinite(slope) or not np.isfinite(intercept):
            raise _fail(series.folder, series.series_uid, f"{path.name}: RescaleSlope {slope:g} / RescaleIntercept "
                                                          f"{intercept:g}: the slope must be finite and not 0 (0 "
                                                          "maps every pixel to the intercept), the intercept finite")
        volume[:, :, k] = (stored.astype(np.float64) * slope + intercept).T
    return volume


def _check_frame_count(series: DicomSeries, path: Path, syntax: Any) -> None:
    """Refuse native pixel data of more whole frames than the image's NumberOfFrames (its length, not its bytes).

    ``iter_pixels`` yields NumberOfFrames frames and leaves the rest unread; a single-frame slice whose pixel data
    holds several frames is refused (found by hostile testing: such an image was read from its first frames). Short
    pixel data fails at its first missing frame; compressed pixel data is not counted here.
    """
    ds = series.datasets[0]
    bits = _number(ds, "BitsAllocated", series.folder, path, int, None, series_uid=series.series_uid)
    samples = _number(ds, "SamplesPerPixel", series.folder, path, int, 1, series_uid=series.series_uid) or 1
    native = syntax is not None and not syntax.is_compressed and syntax != DeflatedExplicitVRLittleEndian
    if not native or bits not in (8, 16, 32, 64):
        return
    try:  # the element's length, its value left in the file (deferred); force: a bare data set, which read_series
        # reads (found by hostile review 68: pydicom refused it here, and the check was skipped without a word)
        element = pydicom.dcmread(path, defer_size=256, force=True).get_item(0x7FE00010, keep_deferred=True)
        length = int(element.length) if element is not None else None
    except Exception:  # unreadable here: the frames' reading says what is wrong
        return
    cols, rows, n = series.shape
    frame = rows * cols * samples * bits // 8
    if length is not None and length != 0xFFFFFFFF and frame > 0 and length // frame > n:
        raise _fail(series.folder, series.series_uid, f"{path.name}: its pixel data holds {length // frame} frames of "
                                                      f"{cols} x {rows} pixels, its NumberOfFrames {n} (and its "
                                                      "per-frame functional groups): which frames they describe is "
                                                      "unknown")


def _read_whole(series: DicomSeries, path: Path) -> Dataset:
    """The whole dataset of ``path`` (a deflated file, which :func:`pydicom.pixels.iter_pixels` cannot read)."""
    try:
        return _dcmread(path)
    except Exception as e:
        raise _fail(series.folder, series.series_uid, f"{path.name}: pixel data unreadable "
                                                      f"({_unreadable(e)})") from None


def _read_frames(series: DicomSeries) -> np.ndarray:
    """The volume of a multi-frame source, decoded one frame at a time (``pydicom.pixels.iter_pixels``)."""
    from pydicom.pixels import iter_pixels

    cols, rows, n = series.shape
    assert series.frames is not None
    path = series.files[0]
    rescale = _frame_rescale(series)  # every frame's checked before any pixel is read
    slice_of = {frame: k for k, frame in enumerate(series.frames)}
    volume = np.empty((cols, rows, n), dtype=np.float32)
    syntax = getattr(getattr(series.datasets[0], "file_meta", None), "TransferSyntaxUID", None)
    _check_frame_count(series, path, syntax)
    # iter_pixels reads a file's frames one at a time, but does not inflate a deflated file (it then finds no pixel
    # data; found by hostile testing): such a file is read whole, its frames then decoded one at a time
    # a bare data set (no file meta: :func:`_dcmread`) is read whole too, iter_pixels reading its transfer syntax from
    # the file
    bare = getattr(series.datasets[0], "preamble", None) is None
    frames = iter_pixels(path if syntax != DeflatedExplicitVRLittleEndian and not bare else _read_whole(series, path))
    for i in range(n):
        try:
            stored = next(frames)
        except Exception as e:  # StopIteration: fewer frames than NumberOfFrames
            raise _fail(series.folder, series.series_uid, f"{path.name}: pixel data of frame {i + 1} unreadable "
                                                          f"({type(e).__name__}){_decoder_missing(path, e)}") from None
        if stored.shape != (rows, cols):
            raise _fail(series.folder, series.series_uid, f"{path.name}: frame {i + 1} of shape {stored.shape}, "
                                                          f"expected {(rows, cols)}")
        slope, intercept = rescale[i]
        volume[:, :, slice_of[i + 1]] = (stored.astype(np.float64) * slope + intercept).T
    return volume


def _check_series_geometry(affine: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    lps = np.linalg.inv(_LPS_TO_RAS) @ np.asarray(affine, dtype=float)
    col, row, step = lps[:3, 0], lps[:3, 1], lps[:3, 2]
    dc, dr = np.linalg.norm(col), np.linalg.norm(row)
    if dc <= 0 or dr <= 0 or np.linalg.norm(step) <= 0:
        raise ValueError("affine has a zero column")
    if abs(col @ row) > 1e-6 * dc * dr:
        raise ValueError("affine: the first two axes must be orthogonal (in-plane pixels are rectangular)")
    return lps, np.concatenate([col / dc, row / dr]), np.array([dr, dc]), step


def _ds(value: float) -> DSfloat:
    """A number as a DICOM decimal string of at most 16 characters.

    12 significant digits (``2.5``, not the ``2.50000000000000`` of float noise such as ``2.4999999999999996``),
    fewer when 16 characters need it.
    """
    return DSfloat(float(f"{float(value):.12g}"), auto_format=True)


def write_series(volume: np.ndarray, affine: np.ndarray, folder: str | os.PathLike, modality: str = "CT",
                 patient_name: str = "Synthetic^Example", patient_id: str = "MONAIUNC001",
                 shuffle_seed: int | None = None, study_uid: str | None = None, series_uid: str | None = None,
                 uid_root: str | None = None, extra: dict[str, Any] | None = None) -> list[Path]:
    """Write a volume as a series of single-frame CT or MR slices (the synthetic example series of the tests/docs).

    Slice ``k`` is ``volume[:, :, k]`` (its rows along the affine's second axis). CT values are stored as int16
    with ``RescaleSlope`` 0.5 and ``RescaleIntercept`` -1024 (so reading gives them back to 0.5 HU); MR values as
    uint16 rounded to integers (negative values clip at 0), no rescale. Positions, orientation, pixel spacing and
    slice thickness are decimal strings of at most 16 characters (DICOM's DS: about 12 significant digits), so the
    slices pass ``dciodvfy``.

    Args:
        volume: ``(columns, rows, slices)`` real-world values (HU for CT).
        affine: ``(4, 4)`` RAS affine (its first two axes orthogonal).
        folder: where to write ``<SOPInstanceUID>.dcm``; created, must not hold files.
        modality: ``"CT"`` or ``"MR"``.
        patient_name: PatientName (any Unicode: written with SpecificCharacterSet ``ISO_IR 192``, UTF-8).
        patient_id: PatientID.
        shuffle_seed: write the slices in a shuffled order of instance numbers and file names (None: in order).
        study_uid: StudyInstanceUID (new when None).
        series_uid: SeriesInstanceUID (new when None).
        uid_root: root of the new UIDs (pydicom's when None).
        extra: further attributes set on every slice (keyword -> value).

    Returns:
        The written files, in slice order.

    Raises:
        ValueError: a volume that is not 3D or not finite, CT values outside -17408 .. 15359.5 HU (what int16 with
            slope 0.5 holds), an unknown modality, a non-orthogonal affine, a folder that holds files.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     len(write_series(np.zeros((4, 4, 3)), np.eye(4), d, modality="MR"))
        3
    """
    volume = np.asarray(volume, dtype=float)
    if volume.ndim != 3 or not np.isfinite(volume).all():
        raise ValueError(f"volume must be a finite 3D array, got shape {volume.shape}")
    if modality not in ("CT", "MR"):
        raise ValueError(f"modality must be 'CT' or 'MR', got {modality!r}")
    if modality == "CT" and (volume.min() < _CT_RANGE[0] or volume.max() > _CT_RANGE[1]):
        raise ValueError(f"volume: CT values must lie in {_CT_RANGE} HU (int16 with slope 0.5, intercept -1024), got "
                         f"{volume.min():.6g} .. {volume.max():.6g}")
    folder = Path(folder)
    if folder.is_dir() and any(folder.iterdir()):
        raise ValueError(f"folder {folder} already holds files")
    check_output_folder(folder)
    lps, orientation, pixel_spacing, step = _check_series_geometry(affine)
    cols, rows, n = volume.shape
    study_uid = study_uid or generate_uid(prefix=uid_root)
    series_uid = series_uid or generate_uid(prefix=uid_root)
    frame_uid = generate_uid(prefix=uid_root)
    sop_class = CTImageStorage if modality == "CT" else MRImageStorage
    rng = np.random.default_rng(shuffle_seed)
    numbers = rng.permutation(n) + 1 if shuffle_seed is not None else np.arange(n) + 1
    written = []
    for k in range(n):
        sop_uid = generate_uid(prefix=uid_root)
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = sop_class
        meta.MediaStorageSOPInstanceUID = sop_uid
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = Dataset()
        ds.file_meta = meta
        ds.SpecificCharacterSet = "ISO_IR 192"
        ds.ImageType = ["ORIGINAL", "PRIMARY", "AXIAL"]
        ds.SOPClassUID, ds.SOPInstanceUID = sop_class, sop_uid
        ds.StudyDate, ds.StudyTime, ds.SeriesDate, ds.SeriesTime = "20240101", "120000", "20240101", "120000"
        ds.ContentDate, ds.ContentTime = "20240101", "120000"
        ds.AccessionNumber, ds.Modality, ds.Manufacturer = "A0001", modality, "monai-unc synthetic"
        ds.ReferringPhysicianName = ""
        ds.PatientName, ds.PatientID, ds.PatientBirthDate, ds.PatientSex = patient_name, patient_id, "19700101", "O"
        ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.FrameOfReferenceUID = study_uid, series_uid, frame_uid
        ds.StudyID, ds.SeriesNumber, ds.InstanceNumber = "1", 1, int(numbers[k])
        ds.PositionReferenceIndicator = ""
        ds.PatientPosition = "HFS"
        # decimal strings of at most 16 characters (DS): str() of a float gave up to 19 (-0.8571673007021123, a
        # SliceThickness of 2.4999999999999996), which dciodvfy rejects (found by hostile testing)
        ds.ImagePositionPatient = [_ds(v) for v in lps[:3, 3] + k * step]
        ds.ImageOrientationPatient = [_ds(v) for v in orientation]
        ds.PixelSpacing = [_ds(v) for v in pixel_spacing]
        ds.SliceThickness = _ds(_plane_distance(lps))  # along the normal (a tilted stack's step is longer)
        ds.AcquisitionNumber = 1  # type 2 in the CT image module
        ds.Laterality = ""  # type 2C in the general series module: unknown for a synthetic volume
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.Rows, ds.Columns = rows, cols
        ds.BitsAllocated, ds.BitsStored, ds.HighBit = 16, 16, 15
        plane = volume[:, :, k].T
        if modality == "CT":
            ds.PixelRepresentation = 1
            ds.RescaleIntercept, ds.RescaleSlope, ds.RescaleType = -1024, 0.5, "HU"
            ds.KVP = 120
            stored = np.clip(np.round((plane + 1024) / 0.5), -32768, 32767).astype(np.int16)
        else:
            ds.PixelRepresentation = 0
            ds.ScanningSequence, ds.SequenceVariant, ds.ScanOptions, ds.MRAcquisitionType = "GR", "SP", "", "3D"
            ds.EchoTime, ds.RepetitionTime, ds.EchoTrainLength = 3.0, 8.0, 1
            stored = np.clip(np.round(plane), 0, 65535).astype(np.uint16)
        ds.PixelData = stored.tobytes()
        for key, value in (extra or {}).items():
            setattr(ds, key, value)
        buffer = _stdio.BytesIO()
        pydicom.dcmwrite(buffer, ds, enforce_file_format=True)
        name = f"{numbers[k]:05d}_{sop_uid[-8:]}.dcm" if shuffle_seed is not None else f"{k:05d}.dcm"
        written.append(atomic_write_bytes(folder / name, buffer.getvalue()))
    return written


#: the absolute floor (mm) of the largest displacement of a voxel centre tolerated between a NIfTI output and its
#: source series (:func:`to_series_grid`, :func:`~monai_unc.io.grid_mismatch` with ``atol``; above it, a tenth of
#: the smallest voxel spacing). The series' own grid is only known to this much: DICOM stores positions and spacings
#: as decimal strings (at most 16 characters, which scanners often round to a few decimals), :func:`read_series`
#: accepts slices whose PixelSpacing, steps and positions off the line differ by :data:`SPACING_ATOL` (0.01 mm),
#: and a converter (dcm2niix, ...) may build the NIfTI affine from other slices' values than the first slice's and
#: the mean step. It binds only for voxels under 0.1 mm; the volumes of one case use 1e-3 mm
#: (:data:`monai_unc.io.GEOMETRY_ATOL`)
DICOM_GEOMETRY_ATOL = 1e-2


def _axis_transform(affine: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The nibabel orientation transform (``(3, 2)``: output axis, flip) taking the axes of ``affine`` to ``target``'s.

    Each axis of ``target`` is matched to the axis of ``affine`` whose direction is closest to it, with the flip its
    sign gives: the two grids' axes are compared with each other, not each with the RAS axes. Found by hostile
    testing: a series rotated by 45 degrees in its plane has axes exactly between two RAS axes, and
    ``nib.orientations.io_orientation`` of the series and of a NIfTI file of the same grid (whose float32 sform
    rounds the cosines) broke that tie differently, so the series' own grid was refused. Where the matching is not a
    permutation (the grids do not share their axes) the per-affine RAS orientation is kept, and the grid check that
    follows names the difference. Both affines are finite and non-degenerate (the volume's checked by
    :func:`to_series_grid`, the series' by :func:`read_series`).
    """
    have = np.asarray(affine, float)[:3, :3]
    want = np.asarray(target, float)[:3, :3]
    # cos[i, j]: axis i of the volume against axis j of the target
    cos = (have / np.linalg.norm(have, axis=0)).T @ (want / np.linalg.norm(want, axis=0))
    out = np.argmax(np.abs(cos), axis=1)
    if sorted(out.tolist()) == [0, 1, 2]:
        flips = np.sign(cos[np.arange(3), out])
        return np.stack([out.astype(float), np.where(flips < 0, -1.0, 1.0)], axis=1)
    return nib.orientations.ornt_transform(nib.orientations.io_orientation(affine),
                                           nib.orientations.io_orientation(target))


def to_series_grid(data: np.ndarray, affine: np.ndarray, series: DicomSeries, what: str,
                   remedy: str = "it must come from that series") -> np.ndarray:
    """Put a volume read from a NIfTI file on the voxel grid of its source series.

    The NIfTI file may store the same grid with its axes permuted or flipped (a converter's choice, e.g. dcm2niix);
    the array is reoriented (no interpolation) to the series' ``(columns, rows, slices)`` order and its affine must
    then put the series' grid in the same space: no voxel centre may lie further from the series' than
    :data:`DICOM_GRID_VOXEL_RTOL` of the smallest voxel spacing or :data:`DICOM_GEOMETRY_ATOL` mm, whichever is
    larger (:func:`~monai_unc.io.grid_mismatch`, checked at the corners of the grid, where differences of position,
    spacing or direction add up; the affines' entries are not compared, so a one-slice series' slice thickness,
    which moves no voxel centre, may differ).

    Args:
        data: ``(C, X, Y, Z)`` channel-first volume (a 5-D NIfTI's ``(C, X, Y, Z, 1)`` without its time axis:
            :func:`~monai_unc.io.without_time_axis`).
        affine: its ``(4, 4)`` RAS affine.
        series: the source series.
        what: how errors name the volume.
        remedy: what the error of another grid says to do.

    Returns:
        ``(C, columns, rows, slices)``.

    Raises:
        ValueError: naming ``what`` and the series when the grids differ (shape, spacing, position or direction) or
            ``affine`` is not a finite, non-degenerate ``(4, 4)`` matrix.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = write_series(np.zeros((2, 3, 4)), np.eye(4), d, modality="MR")
        ...     s = read_series(d, pixels=False)
        ...     flip = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, -1, 3], [0, 0, 0, 1.0]])  # slices reversed
        ...     data = np.arange(24.0).reshape(1, 2, 3, 4)
        ...     to_series_grid(data[..., ::-1], s.affine @ flip, s, "map")[0, 1, 2]
        array([20., 21., 22., 23.])
    """
    data, affine = without_time_axis((np.asarray(data), np.asarray(affine, dtype=float)))  # (X, Y, Z, 1, C) files
    if data.ndim != 4:
        raise ValueError(f"{what} must be (C, X, Y, Z), got shape {data.shape}")
    # a NaN or degenerate affine (a zero column, two parallel axes) puts no grid anywhere: refused by name, not with
    # nibabel's message of the orientation it cannot find (found by hostile testing)
    axes = affine[:3, :3] if affine.shape == (4, 4) else None
    if (axes is None or not np.isfinite(affine).all()
            or abs(np.linalg.det(axes)) <= 1e-6 * float(np.prod(np.linalg.norm(axes, axis=0)))):
        raise ValueError(f"{what} has no valid affine (not finite, or axes of no volume): not on the grid of the "
                         f"series {series.series_uid}")
    transform = _axis_transform(affine, series.affine)
    moved = np.stack([nib.orientations.apply_orientation(c, transform) for c in data])
    new_affine = affine @ nib.orientations.inv_ornt_aff(transform, data.shape[1:])
    if moved.shape[1:] != tuple(series.shape):
        raise ValueError(f"{what} has the grid {moved.shape[1:]} (reoriented), the series {series.series_uid} "
                         f"{series.shape}: not on the source series' grid")
    problem = grid_mismatch(new_affine, series.affine, series.shape, atol=DICOM_GEOMETRY_ATOL)
    if problem is not None:
        raise ValueError(f"{what} is not on the grid of the series {series.series_uid} ({problem}); {remedy}")
    return moved


#: what the series of one case's input channels share: the patient, and the frame of reference their positions are
#: in (positions in two frames are not comparable; :func:`channel_on_series_grid`)
SAME_IN_CHANNELS = ("PatientID", "IssuerOfPatientID", "PatientName", "PatientBirthDate", "PatientSex",
                    "FrameOfReferenceUID")


def channel_on_series_grid(channel: DicomSeries, reference: DicomSeries, what: str,
                           remedy: str = "resample it onto that grid first") -> np.ndarray:
    """The volume of one input channel's series on the grid of the case's first channel, in its voxel order.

    A network of several input channels (T1, T1ce, T2, FLAIR) takes one series per channel, all on one grid. A
    series of the same grid stored with its slices or rows the other way round (or its axes permuted) is put in
    ``reference``'s voxel order without interpolation (:func:`to_series_grid`); a series on another grid is refused,
    and so is one of another patient (``PatientID``, ``IssuerOfPatientID``, ``PatientName``, ``PatientBirthDate``,
    ``PatientSex``) or another frame of reference (``FrameOfReferenceUID``), even on the same grid: it is no channel
    of this case. The message names the attributes that differ, not their values (a log would carry the patient's
    identity).

    Args:
        channel: the channel's series, read with its pixels (:func:`read_series`).
        reference: the series of the case's channel 0 (headers are enough).
        what: how the message names the channel's series (e.g. ``"series brain_0001"``).
        remedy: what the message of another grid says to do.

    Returns:
        ``(columns, rows, slices)`` float32: the channel's values on ``reference``'s grid.

    Raises:
        ValueError: naming ``what``: another patient or frame of reference, another grid, no pixels read.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     session = {"study_uid": "1.2.3.4", "extra": {"FrameOfReferenceUID": "1.2.3.5"}}
        ...     _ = write_series(np.zeros((2, 3, 4)), np.eye(4), Path(d) / "t1", modality="MR", **session)
        ...     flip = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, -1, 3], [0, 0, 0, 1.0]])  # slices reversed
        ...     t2 = np.arange(24.0).reshape(2, 3, 4)
        ...     _ = write_series(t2[..., ::-1], flip, Path(d) / "t2", modality="MR", **session)
        ...     on_grid = channel_on_series_grid(read_series(Path(d) / "t2"), read_series(Path(d) / "t1"), "t2")
        ...     bool((on_grid == t2).all())
        True
    """
    if channel.volume is None:
        raise ValueError(f"{what}: read the series with its pixels (read_series(folder))")
    differ = [name for name in SAME_IN_CHANNELS if str(channel.datasets[0].get(name, "") or "").strip()
              != str(reference.datasets[0].get(name, "") or "").strip()]
    if differ:
        raise ValueError(f"{what} differs from {reference.folder.name} in {', '.join(differ)}: the channels of a "
                         "case are series of one patient in one frame of reference")
    return to_series_grid(channel.volume[None], channel.affine, reference, what, remedy=remedy)[0]
