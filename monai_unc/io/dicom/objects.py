"""The derived DICOM objects of a case, written with highdicom on the grid of the source series.

- :func:`write_segmentation`: the label map as a binary DICOM SEG, one segment per class (background excluded), with
  coded segment descriptions (:class:`SegmentSpec`; SNOMED-CT defaults for common labels, :data:`DEFAULT_SEGMENTS`)
  and the algorithm identification (name, version, weight digest: :class:`AlgorithmInfo`).
- :func:`write_fractional_segmentation`: the mean probabilities as a FRACTIONAL SEG of type PROBABILITY. DICOM
  stores a fraction as an 8-bit integer over ``MaximumFractionalValue`` (255 here), so the values read back are
  ``round(255 p) / 255``: within ``1 / 510`` of the float probabilities.
- :func:`write_parametric_map`: one uncertainty map as a Parametric Map with 32-bit float pixel data and a
  real-world value mapping (identity, with the map's unit and its float range): the float32 values read back
  exactly (no 8-bit clipping, no rescaling).

Every object is written on the grid of the source series (one frame per source slice, the slice's position and
orientation; of a multi-frame source, one per source frame, referencing that frame by its ``ReferencedFrameNumber``),
gets a new SeriesInstanceUID and SOPInstanceUID under the UID root given (:func:`new_uid`), and copies the patient
and study (name, ID, birth date, sex, StudyInstanceUID, accession number, ...) of the source, with its marks of a
de-identification and its TimezoneOffsetFromUTC (:func:`copy_source_markers`): nothing is invented (a type 2
attribute the source lacks is written
empty, as unknown). An object keeps the source's character set unless
one of its texts is not in it (a segment name ``李`` beside a Latin-1 source): it then declares UTF-8. Names and codes
that a DICOM string cannot hold as one value (a backslash, the value separator, or a control character) are refused.
The series of a case's other input channels (a model of several) are referenced beside the series the object lies
on (``other_series``, :func:`check_other_series`). Files are written atomically (:func:`monai_unc.io.atomic_path`).
"""

from __future__ import annotations

import codecs
import copy
import hashlib
import math
import os
import re
import unicodedata
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import highdicom as hd
import numpy as np
from pydicom.charset import python_encoding
from pydicom.dataset import Dataset
from pydicom.multival import MultiValue
from pydicom.sr.codedict import codes
from pydicom.sr.coding import Code
from pydicom.uid import generate_uid
from pydicom.valuerep import DSfloat

from ..files import atomic_path
from ..provenance import decode_untrusted_json
from .series import SAME_IN_CHANNELS, DicomSeries, DicomSeriesError

__all__ = [
    "AlgorithmInfo",
    "SegmentSpec",
    "DEFAULT_SEGMENTS",
    "MAP_UNITS",
    "FRACTIONAL_MAX",
    "MAX_WINDOW_WIDTH",
    "check_uid_root",
    "new_uid",
    "default_segment",
    "short_text",
    "check_text",
    "check_series_number",
    "check_series",
    "MAX_SERIES_NUMBER",
    "MAX_SEGMENT_NUMBER",
    "NOT_IN_STRING",
    "check_series_description",
    "read_segment_specs",
    "volume_frames",
    "write_segmentation",
    "write_fractional_segmentation",
    "write_parametric_map",
    "save_dataset",
    "source_images",
    "declare_character_set",
    "copy_source_markers",
    "source_zone",
    "modified_content_time",
    "dates_removed",
    "DUMMY_DATE",
    "DUMMY_TIME",
    "input_slices",
    "check_other_series",
    "STUDY_UID_MODES",
    "new_study",
    "apply_study",
]


def _package_version() -> str:
    try:
        return metadata.version("monai-unc")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source tree that is not installed
        return "unknown"


#: the monai-unc version recorded as SoftwareVersions and the default algorithm version
__version__ = _package_version()

#: MaximumFractionalValue of the FRACTIONAL SEG: probabilities are stored as round(255 p)
FRACTIONAL_MAX = 255
#: the widest display window (WindowWidth) of a Parametric Map: validators (dciodvfy) check that a WindowWidth is
#: not negative by reading it as a signed 64-bit integer, so a width of 2**63 (9.2e18) or more wraps and is rejected;
#: a map whose range is wider (values near float32's limits, 3e38) gets a window of this width about its middle
MAX_WINDOW_WIDTH = 1e18
#: the largest SeriesNumber: a DICOM IS holds -(2**31 - 1) .. 2**31 - 1, and highdicom takes positive numbers only
MAX_SERIES_NUMBER = 2**31 - 1
_UID_ROOT = re.compile(r"^(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))*\.$")
#: what a DICOM string value (SH, LO, CS) may not hold: the value separator ``\`` and control characters
NOT_IN_STRING = re.compile(r"[\\\x00-\x1f\x7f]")
_SCT_TISSUE = codes.SCT.Tissue
_SCT_ANATOMY = codes.SCT.AnatomicalStructure
_SCT_ABNORMAL = codes.SCT.MorphologicallyAbnormalStructure

#: lower-case label name -> (SNOMED-CT category, SNOMED-CT type) of the segment description
DEFAULT_SEGMENTS: dict[str, tuple[Code, Code]] = {
    "grey matter": (_SCT_TISSUE, codes.SCT.GrayMatter),
    "gray matter": (_SCT_TISSUE, codes.SCT.GrayMatter),
    "white matter": (_SCT_TISSUE, codes.SCT.WhiteMatter),
    "csf": (_SCT_TISSUE, codes.SCT.CerebrospinalFluid),
    "cerebrospinal fluid": (_SCT_TISSUE, codes.SCT.CerebrospinalFluid),
    "tissue": (_SCT_TISSUE, _SCT_TISSUE),
    "tumour": (_SCT_ABNORMAL, codes.SCT.Neoplasm),
    "tumor": (_SCT_ABNORMAL, codes.SCT.Neoplasm),
    "neoplasm": (_SCT_ABNORMAL, codes.SCT.Neoplasm),
    "oedema": (_SCT_ABNORMAL, codes.SCT.Edema),
    "edema": (_SCT_ABNORMAL, codes.SCT.Edema),
    "necrosis": (_SCT_ABNORMAL, codes.SCT.Necrosis),
    "brain": (_SCT_ANATOMY, codes.SCT.Brain),
    "liver": (_SCT_ANATOMY, codes.SCT.Liver),
    "kidney": (_SCT_ANATOMY, codes.SCT.Kidney),
    "spleen": (_SCT_ANATOMY, codes.SCT.Spleen),
    "pancreas": (_SCT_ANATOMY, codes.SCT.Pancreas),
    "lung": (_SCT_ANATOMY, codes.SCT.Lung),
    "heart": (_SCT_ANATOMY, codes.SCT.Heart),
}

_NAT = Code("{nat}", "UCUM", "nat")
_UNITY = Code("1", "UCUM", "no units")
#: measure -> (UCUM unit, explanation) of its real-world value mapping
MAP_UNITS: dict[str, tuple[Code, str]] = {
    "predictive_entropy": (_NAT, "predictive entropy H(mean p), nats"),
    "expected_entropy": (_NAT, "expected entropy mean H(p_s), nats"),
    "mutual_information": (_NAT, "mutual information PE - EE - WD, nats"),
    "window_disagreement": (_NAT, "sliding-window disagreement, nats"),
    "one_minus_max_prob": (_UNITY, "1 - max class probability"),
    "variance": (_UNITY, "mean class variance of probabilities over samples"),
}


def check_text(value: Any, what: str, limit: int = 64, *, characters: bool = False) -> str:
    r"""Refuse a text a DICOM string element (SH 16, LO 64) cannot hold as one value; returns it.

    A backslash is the value separator (``a\b`` is read as the two values ``a`` and ``b``) and control characters
    (tab, newline, ...) are not allowed in these VRs (PS3.5 6.2). DICOM counts an SH's 16 and an LO's 64 in
    characters, but validators (dciodvfy) and PACS databases count the bytes of the encoded value, so ``limit`` is
    counted in bytes of UTF-8, the widest encoding the objects write (:func:`declare_character_set`), as the texts
    the writers shorten themselves are (:func:`short_text`): a name ``Ödem über ...`` of 64 characters and 74 bytes
    is refused. The rule of segment names, region names, a Parametric Map's measure, a ``series_description`` and
    ``--algorithm-name``.

    Args:
        value: the text.
        what: what it is, for the message (``"measure"``, ``"algorithm_name"``).
        limit: the most bytes of UTF-8 (16 for SH, 64 for LO; an ASCII text's characters are its bytes).
        characters: count ``limit`` in characters instead: for a text that is never written whole, only shortened
            to its bytes by the writer (a Parametric Map's region, :func:`short_text`).

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: naming ``what`` (and the text's bytes in UTF-8): not a string, empty or blank, longer than
            ``limit`` bytes of UTF-8, a backslash or a control character.

    Example:
        >>> check_text("predictive_entropy", "measure")
        'predictive_entropy'
        >>> try:
        ...     check_text("Ödem " * 13, "segment name")
        ... except ValueError as e:
        ...     str(e).endswith("(78 bytes)")
        True
    """
    size_of = len if characters else _utf8_length
    if not isinstance(value, str) or not value.strip() or size_of(value) > limit or NOT_IN_STRING.search(value):
        if characters:
            raise ValueError(f"{what} must be 1 to {limit} characters without a backslash (the DICOM value separator) "
                             f"or control characters, got {value!r}")
        size = f" ({_utf8_length(value)} bytes)" if isinstance(value, str) else ""
        shown = value[:80] + "..." if isinstance(value, str) and len(value) > 80 else value
        raise ValueError(f"{what} must be 1 to {limit} characters (bytes of UTF-8, as validators and PACS count "
                         f"them) without a backslash (the DICOM value separator) or control characters, got "
                         f"{shown!r}{size}")
    return value


@dataclass(frozen=True)
class SegmentSpec:
    """The description of one segment of a SEG.

    Args:
        label: the class value of the label map (>= 1).
        name: the SegmentLabel (1 to 64 bytes of UTF-8, no backslash or control characters).
        category: the segmented property category (a coded concept, e.g. SNOMED-CT ``85756007`` Tissue).
        type: the segmented property type (e.g. SNOMED-CT ``389081007`` Gray Matter).

    Raises:
        TypeError: a ``label`` that is not an integer (a Python or numpy integer; not a bool or float): a label 2.5
            matched no voxel of a label map, and its SEG segment was written empty without a word.
        ValueError: a name that a DICOM SegmentLabel (LO) cannot hold as one value.
    """

    label: int
    name: str
    category: Code
    type: Code

    def __post_init__(self) -> None:
        if isinstance(self.label, (bool, np.bool_)) or not isinstance(self.label, (int, np.integer)):
            raise TypeError(f"segment label must be an integer class value, got {type(self.label).__name__} "
                            f"{self.label!r}")
        object.__setattr__(self, "label", int(self.label))
        check_text(self.name, f"segment name of class {self.label} (SegmentLabel)", 64)


@dataclass(frozen=True)
class AlgorithmInfo:
    """Who made the objects: the algorithm identification of the SEG and the SR.

    Args:
        name: the algorithm's name (e.g. the model or bundle).
        version: its version (default: the monai-unc version).
        weights: the sha256 digest(s) of the model's weight files, joined by ``,`` (``""`` when unknown).
        method: the uncertainty method (``mcdropout+tta``), recorded as a parameter.

    Raises:
        ValueError: a name or version over 64 bytes of UTF-8 or with a backslash (the DICOM value separator) or a
            control character (they are written as AlgorithmName / AlgorithmVersion and ManufacturerModelName, DICOM
            LO, whole); an empty one is written as ``monai-unc`` / the monai-unc version.
    """

    name: str = "monai-unc"
    version: str = __version__
    weights: str = ""
    method: str = ""

    def __post_init__(self) -> None:
        for field_name in ("name", "version"):
            value = getattr(self, field_name)
            # found by review 64: 64 characters of 74 bytes passed, and dciodvfy rejected the objects
            if not isinstance(value, str) or _utf8_length(value) > 64 or NOT_IN_STRING.search(value):
                size = f" ({_utf8_length(value)} bytes)" if isinstance(value, str) else ""
                raise ValueError(f"algorithm {field_name} must be a string of at most 64 characters (bytes of "
                                 "UTF-8, as validators and PACS count them) without a backslash (the DICOM value "
                                 f"separator) or control characters, got {value!r}{size}")

    def identification(self) -> hd.AlgorithmIdentificationSequence:
        """The AlgorithmIdentificationSequence (family: DCM 123110 Artificial Intelligence)."""
        parameters = {k: v for k, v in (("weights_sha256", self.weights), ("method", self.method)) if v}
        return hd.AlgorithmIdentificationSequence(
            name=self.name or "monai-unc", family=codes.cid7162.ArtificialIntelligence,
            version=self.version or __version__, source="monai-unc", parameters=parameters or None,
        )


def check_series_number(number: Any) -> int:
    """Check the SeriesNumber of a derived object: an integer from 1 to :data:`MAX_SERIES_NUMBER`.

    Args:
        number: the number (a Python or numpy integer; not a bool, float or text).

    Returns:
        ``number`` as an ``int``.

    Raises:
        TypeError: naming ``series_number`` when it is not an integer.
        ValueError: naming ``series_number`` when it is outside ``1 .. 2**31 - 1``.

    Example:
        >>> check_series_number(901)
        901
    """
    if isinstance(number, (bool, np.bool_)) or not isinstance(number, (int, np.integer)):
        raise TypeError(f"series_number must be an integer, got {type(number).__name__} {number!r}")
    if not 1 <= int(number) <= MAX_SERIES_NUMBER:
        raise ValueError(f"series_number must be 1 to {MAX_SERIES_NUMBER} (a DICOM IS, positive), got {int(number)}")
    return int(number)


def check_series(series: Any) -> DicomSeries:
    """Refuse a ``series`` that is not a :class:`~.series.DicomSeries` (a folder name: read it first); returns it.

    Raises:
        TypeError: naming ``series`` and what it got.
    """
    if not isinstance(series, DicomSeries):
        raise TypeError(f"series must be a DicomSeries (monai_unc.io.dicom.read_series(folder, pixels=False)), got "
                        f"{type(series).__name__} {str(series)[:80]!r}")
    return series


def _check_segments(segments: Any) -> list[SegmentSpec]:
    """Refuse ``segments`` that are not a sequence of :class:`SegmentSpec` (class values, one spec alone)."""
    if isinstance(segments, (str, bytes, SegmentSpec)) or not isinstance(segments, Sequence):
        raise TypeError(f"segments must be a sequence of SegmentSpec (default_segment, read_segment_specs), got "
                        f"{type(segments).__name__}")
    bad = [s for s in segments if not isinstance(s, SegmentSpec)]
    if bad:
        raise TypeError(f"segments must hold SegmentSpec items (default_segment(label, name), read_segment_specs), "
                        f"got {type(bad[0]).__name__} {bad[0]!r}")
    return list(segments)


def check_uid_root(root: str | None) -> str | None:
    """Check a UID root (``"1.2.826.0.1.3680043.10.543."``): digits and dots, ending with a dot, <= 40 characters.

    Args:
        root: the root, or None (pydicom's own root).

    Returns:
        ``root`` unchanged.

    Raises:
        ValueError: naming ``uid_root`` when it is not such a root.

    Example:
        >>> check_uid_root("1.2.3.")
        '1.2.3.'
    """
    if root is None:
        return None
    if not isinstance(root, str) or len(root) > 40 or not _UID_ROOT.match(root):
        raise ValueError(f"uid_root must be digits and dots ending with a dot, no leading zeros, at most 40 "
                         f"characters (e.g. '1.2.826.0.1.3680043.10.543.'), got {root!r}")
    return root


def new_uid(root: str | None = None) -> str:
    """A new UID under ``root`` (:func:`check_uid_root`; pydicom's root when None).

    Example:
        >>> new_uid("1.2.3.").startswith("1.2.3.")
        True
    """
    return str(generate_uid(prefix=check_uid_root(root)))


#: where the derived objects go: ``source`` (the source series' study, the IHE AI Results model) or ``new``
STUDY_UID_MODES = ("source", "new")
#: the study attributes :func:`new_study` sets (the rest of the patient and study module is the source's)
_STUDY_KEYS = ("StudyInstanceUID", "StudyID", "AccessionNumber", "StudyDate", "StudyTime")
#: the General Study attributes of the source study's order and reading, which a new study leaves out: the issuer of
#: the AccessionNumber it empties, the physicians who read the source study (a study nobody read was listed as read
#: by them) and the order's ReferencedStudySequence
_SOURCE_STUDY_ONLY = ("IssuerOfAccessionNumberSequence", "NameOfPhysiciansReadingStudy",
                      "PhysiciansReadingStudyIdentificationSequence", "ReferencedStudySequence")


def new_study(mode: str, uid_root: str | None = None, when: datetime | None = None, *,
              source: Any = None) -> dict[str, str] | None:
    """The study of a case's derived objects: None (the source's) or a new one, shared by all of them.

    ``"source"`` keeps the objects in the study of their source series, as the IHE AI Results profile does (a PACS
    then shows them with their images). ``"new"`` gives them a new StudyInstanceUID under ``uid_root`` and an empty
    StudyID and AccessionNumber (those identify the source's order); patient identification stays the source's.

    The new study is dated as its ``source`` study (its StudyDate and StudyTime, empty where the source's are): the
    objects copy the source's patient and study dates, which a de-identification may have shifted (PS3.15 E,
    LongitudinalTemporalInformationModified ``MODIFIED``), and a study dated today beside them mixed real and shifted
    dates (a reader took today's date for a shifted one, or learnt the shift). The derived objects are results of
    that study's images, which a worklist then lists beside it. Without a ``source`` the study is dated ``when``.

    Args:
        mode: one of :data:`STUDY_UID_MODES`.
        uid_root: root of the new UID.
        when: the study date and time, given instead of the source's (default without a ``source``: now). In the
            source's TimezoneOffsetFromUTC where it states a valid one (the objects copy it), else in local time,
            as highdicom writes the objects' ContentDate and ContentTime: a time with a zone is converted to that
            zone, a naive one is taken as local.
        source: the first slice of the source series (``series.datasets[0]``), whose study date and time the new
            study takes.

    Returns:
        None for ``"source"``; for ``"new"`` the attributes for :func:`apply_study`.

    Raises:
        ValueError: naming ``study_uid`` for another mode.

    Example:
        >>> new_study("source") is None
        True
        >>> new_study("new", "1.2.3.", datetime(2024, 5, 1, 8, 30))["StudyDate"]
        '20240501'
        >>> src = Dataset()
        >>> src.StudyDate, src.StudyTime = "19990203", "101500"
        >>> moved = new_study("new", "1.2.3.", source=src)
        >>> moved["StudyDate"], moved["StudyTime"]
        ('19990203', '101500')
    """
    if mode not in STUDY_UID_MODES:
        raise ValueError(f"study_uid must be one of {STUDY_UID_MODES}, got {mode!r}")
    if mode == "source":
        return None
    uid = new_uid(uid_root)
    if when is None and source is not None:  # found by review 61: today's date beside the source's shifted ones
        return {"StudyInstanceUID": uid, "StudyID": "", "AccessionNumber": "",
                "StudyDate": str(source.get("StudyDate", "") or ""),
                "StudyTime": str(source.get("StudyTime", "") or "")}
    # local time, as the objects' ContentDate / ContentTime (highdicom): in UTC a study made on a server at UTC+13:45
    # was dated 13:45 hours (and often a day) before its own content (found by hostile testing with TZ set); in the
    # source's zone where the objects state it (copy_source_markers)
    zone = source_zone(source) if source is not None else None
    if when is None:
        when = datetime.now()
    if zone is not None:
        when = when.astimezone(zone)
    elif when.tzinfo is not None:
        when = when.astimezone()
    return {"StudyInstanceUID": uid, "StudyID": "", "AccessionNumber": "",
            "StudyDate": when.strftime("%Y%m%d"), "StudyTime": when.strftime("%H%M%S")}


def apply_study(dataset: Any, study: Mapping[str, str] | None) -> Any:
    """Put a derived object into the study of :func:`new_study` (None: leave it in the source's); returns it.

    A new study has none of the source study's order and reading (:data:`_SOURCE_STUDY_ONLY`: the accession
    number's issuer, the physicians who read it, its ReferencedStudySequence); the patient, the referring physician
    and the study description stay the source's.

    In a new study the object references instances of another study, the source's, so the source series are also
    listed under their study in ``StudiesContainingOtherReferencedInstancesSequence`` (Common Instance Reference,
    PS3.3 C.12.2: type 1C, required then), where a reader resolving the references finds them.
    ``ReferencedSeriesSequence`` is kept as highdicom writes it: viewers look for the source series there (OHIF
    drops a SEG without it).

    Raises:
        ValueError: ``study`` without a StudyInstanceUID or with other keys.

    Example:
        >>> from pydicom import Dataset
        >>> ds = Dataset()
        >>> ds.StudyInstanceUID, ds.AccessionNumber = "1.2.3.4", "A0001"
        >>> moved = apply_study(ds, new_study("new", "1.2.5."))
        >>> moved.StudyInstanceUID.startswith("1.2.5."), moved.AccessionNumber
        (True, '')
    """
    if study is None:
        return dataset
    if set(study) - set(_STUDY_KEYS) or not study.get("StudyInstanceUID"):
        raise ValueError(f"study must hold a StudyInstanceUID and only {_STUDY_KEYS}, got {sorted(study)}")
    source_study = str(dataset.get("StudyInstanceUID", "") or "")
    for key, value in study.items():
        if key in dataset:  # a new element: highdicom may share the source's elements, which must stay as they are
            delattr(dataset, key)
        setattr(dataset, key, value)
    for key in _SOURCE_STUDY_ONLY:  # found by hostile review 60
        if key in dataset:
            delattr(dataset, key)
    referenced = dataset.get("ReferencedSeriesSequence")
    if referenced and source_study and source_study != str(study["StudyInstanceUID"]):
        # the source series stayed in the source study, which the object named nowhere (found by hostile testing,
        # --study-uid new); copies of the items: the object's own sequence stays as it is
        other = Dataset()
        other.StudyInstanceUID = source_study
        other.ReferencedSeriesSequence = [copy.deepcopy(item) for item in referenced]
        studies = list(dataset.get("StudiesContainingOtherReferencedInstancesSequence") or [])
        dataset.StudiesContainingOtherReferencedInstancesSequence = [*studies, other]
    return dataset


def _utf8_length(text: str) -> int:
    """The bytes of ``text`` in UTF-8."""
    return len(text.encode("utf-8"))


def _fitting_start(text: str, room: int) -> str:
    """The longest start of ``text`` of at most ``room`` bytes in UTF-8."""
    out = text[:room]
    while _utf8_length(out) > room:
        out = out[:-1]
    return out


def short_text(text: str, limit: int = 64) -> str:
    """``text`` when it fits in ``limit`` bytes of UTF-8, else its start and its end around ``...`` (within ``limit``).

    DICOM LO values (a SegmentLabel, a CodeMeaning, a SeriesDescription) hold 64 characters, which validators
    (dciodvfy) and PACS databases count as bytes: a text is measured in bytes of UTF-8, the widest encoding the
    objects write, so that ``Ödem über ...`` of 64 characters (74 bytes) is shortened too (earlier versions let it
    pass); an ASCII text's characters are its bytes. Long names of one set (regions, classes, table columns) often
    share their start and differ at the end (``... (v1)`` / ``... (v2)``, a class suffix), which a plain cut drops:
    the end is kept.

    Args:
        text: the text.
        limit: the most bytes (>= 8).

    Returns:
        ``text``, or its start, ``...`` and its end: of an ASCII text its first ``limit - 3 - (limit - 3) // 3``
        characters and its last ``(limit - 3) // 3`` (the end takes at most a third of the room, in bytes).

    Example:
        >>> short_text("whole tumour of the left hemisphere (v2)", 20)
        'whole tumour... (v2)'
        >>> short_text("Ödem über äußerem Übergang", 20)
        'Ödem über ...ang'
    """
    if _utf8_length(text) <= limit:
        return text
    tail_room = (limit - 3) // 3
    tail = _fitting_start(text[::-1], tail_room)[::-1]
    head = _fitting_start(text, limit - 3 - _utf8_length(tail))
    return f"{head}...{tail}"


def _lut_label(text: str) -> str:
    """A LUTLabel (DICOM SH, 16 characters): ``text``, or its first 10 bytes, ``~`` and 5 hex digits of a digest.

    The digest is the start of the SHA-256 of ``text`` (UTF-8), used when ``text`` is longer than 16 bytes of UTF-8
    (the count of validators and PACS; a label ``PE Ödem üb~bfbbc`` of 16 characters was 18 bytes).
    A plain cut gave the maps of two regions whose names share their start one label (``PE necrotic tumo`` for
    ``necrotic tumour core`` and ``necrotic tumour rim``); the digest keeps them apart, and the same text always
    gets the same label.

    Example:
        >>> _lut_label("PE WT"), len(_lut_label("PE necrotic tumour core"))
        ('PE WT', 16)
    """
    if _utf8_length(text) <= 16:
        return text
    return f"{_fitting_start(text, 10)}~{hashlib.sha256(text.encode('utf-8')).hexdigest()[:5]}"


def default_segment(label: int, name: str | None = None) -> SegmentSpec:
    """The segment of class ``label``: a known ``name`` gets its SNOMED-CT codes, any other Tissue / Tissue.

    A name longer than the 64 characters of a SegmentLabel (64 bytes of UTF-8, :func:`short_text`) is shortened to its
    start and end with a ``UserWarning``; the SEG writers refuse two segments whose names are then the same.

    Raises:
        TypeError: a ``label`` that is not an integer (a bool or float; :class:`SegmentSpec`).

    Example:
        >>> default_segment(1, "Grey matter").type.value
        '389081007'
    """
    name = name or f"class {label}"
    category, type_ = DEFAULT_SEGMENTS.get(name.strip().lower(), (_SCT_TISSUE, _SCT_TISSUE))
    short = short_text(name, 64)
    if short != name:
        warnings.warn(f"the name of segment {label} has {len(name)} characters ({_utf8_length(name)} bytes in "
                      f"UTF-8), a DICOM SegmentLabel holds 64: written as {short!r}", UserWarning, stacklevel=2)
    return SegmentSpec(label, short, category, type_)  # an integer, checked there: int(2.5) named class 2 "class 2.5"


def segment_name_key(name: str) -> str:
    """A segment name as two names are compared: one Unicode form, runs of spaces as one, casefolded.

    The name is put in Unicode's composed form (NFC), its runs of spaces made one space, its surrounding spaces
    dropped, and casefolded. The composed form: ``Ödem`` as one character and as ``O`` and a combining diaeresis (as
    macOS and some tools store text) are the same text to Unicode and look the same in a viewer; they were two names
    (in earlier versions such segment names passed as distinct, and a SEG segment named after a class in the
    other form was read by its number, as another class). Compatibility forms that look different (``T²``, full-width
    letters) stay distinct.

    Args:
        name: a segment or class name (``str()`` is applied).

    Returns:
        The key two names are compared by.

    Example:
        >>> segment_name_key("  Whole  Tumour ") == segment_name_key("whole tumour")
        True
        >>> segment_name_key("\u00d6dem") == segment_name_key("O\u0308dem")  # composed and decomposed
        True
    """
    return " ".join(unicodedata.normalize("NFC", str(name)).split()).casefold()


#: how to fix two segments of one name, said by the SEG writers
_DISTINCT_NAMES_HINT = ("; give them distinct names (a segments file; names over 64 characters are shortened to their "
                        "start and end)")


def check_distinct_segment_names(classes: Iterable[tuple[int, str]], where: str, hint: str = "") -> None:
    """Refuse two classes whose segments would carry one name: a viewer lists the segments by their SegmentLabel.

    Names are compared as :func:`segment_name_key` compares them (spaces and case aside); the first clash is refused.
    The one check of the SEG writers (their segment specs) and of ``dicom_export``'s class names (an option or a
    file, before any case is written).

    Args:
        classes: ``(class value, segment name)`` pairs, in the order of the segments.
        where: what holds the names, the start of the message (``segments``, an option, a file and its key).
        hint: how to fix it, said after the reason (``"; give them distinct names"``); empty by default.

    Raises:
        ValueError: ``"<where>: class A ('x') and class B ('X') have the same segment name (SegmentLabel), so a viewer
            could not tell their segments apart<hint>"``.

    Example:
        >>> check_distinct_segment_names([(1, "Tumour"), (2, "Oedema")], "segments")
        >>> check_distinct_segment_names([(1, "Tumour"), (2, " tumour")], "--class-names")
        Traceback (most recent call last):
        ...
        ValueError: --class-names: class 1 ('Tumour') and class 2 (' tumour') have the same segment name ...
    """
    seen: dict[str, tuple[int, str]] = {}
    for label, name in classes:
        key = segment_name_key(name)
        if key in seen:
            first, first_name = seen[key]
            raise ValueError(f"{where}: class {first} ({first_name!r}) and class {label} ({name!r}) have the same "
                             f"segment name (SegmentLabel), so a viewer could not tell their segments apart{hint}")
        seen[key] = (label, name)


def check_series_description(description: str | None, default: str) -> str:
    """The SeriesDescription of a derived object: ``description`` checked, else ``default`` cut to 64 bytes.

    A PACS lists a study's series by their description, so every object gets one (a DICOM LO: 1 to 64 bytes of UTF-8,
    no backslash or control characters).

    The default is cut to 64 bytes of UTF-8, the widest encoding the objects write (:func:`declare_character_set`):
    DICOM counts an LO's 64 in characters, but validators (dciodvfy) and PACS databases count bytes, and a default
    listing non-ASCII segment names (``Rückenmark``) cut to 64 characters was 66 bytes in earlier versions.

    Args:
        description: the description a user set, or None.
        default: the writer's description (cut, with ``...``, to 64 bytes of UTF-8 when longer).

    Returns:
        The description.

    Raises:
        ValueError: naming ``series_description`` when ``description`` is not such a text.

    Example:
        >>> check_series_description(None, "segmentation by monai-unc: grey matter, white matter, csf")
        'segmentation by monai-unc: grey matter, white matter, csf'
        >>> len(check_series_description(None, "segmentation by monai-unc: " + "Rückenmark, " * 6).encode())
        64
    """
    if description is None:
        if len(default.encode("utf-8")) <= 64:
            return default
        cut = default[:61]
        while len(cut.encode("utf-8")) > 61:
            cut = cut[:-1]
        return cut + "..."
    return check_text(description, "series_description", 64)


def _code(value: Any, where: str) -> Code:
    """A coded concept from ``[scheme, code value, meaning]``, checked.

    The scheme holds at most 16 characters (CodingSchemeDesignator, SH), the value and meaning at most 64 (a value
    over 16 bytes of UTF-8 is written as LongCodeValue: :func:`_fit_code_value`); none may hold a backslash or a
    control character.
    """
    if (not isinstance(value, list) or len(value) != 3 or not all(isinstance(v, str) and v.strip() for v in value)
            or any(_utf8_length(v) > n for v, n in zip(value, (16, 64, 64)))
            or any(NOT_IN_STRING.search(v) for v in value)):
        raise ValueError(f"{where} must be [scheme, code value, meaning] (three non-empty strings of at most 16, 64 "
                         f"and 64 characters: bytes of UTF-8, as validators and PACS count them; without a backslash "
                         f"or control characters), got {value!r}")
    scheme, code_value, meaning = value
    return Code(code_value, scheme, meaning)


#: the largest class value a segment describes (SegmentNumber is a 16-bit unsigned integer)
MAX_SEGMENT_NUMBER = 2**16 - 1


def read_segment_specs(path: str | os.PathLike, labels: Sequence[int], *, named_classes: bool = False,
                       names: Mapping[int, str] | None = None) -> list[SegmentSpec]:
    """Read the segment descriptions a user set, one per label of ``labels``.

    The file is JSON: ``{"<label>": {"name": "Grey matter", "category": ["SCT", "85756007", "Tissue"], "type":
    ["SCT", "389081007", "Gray Matter"]}}``; ``category`` and ``type`` are optional (a known name gets its
    SNOMED-CT codes, :data:`DEFAULT_SEGMENTS`); labels not in the file get :func:`default_segment`. Every field is
    checked (the file is untrusted input). The classes the file does not name (an entry without ``name`` included)
    get the name ``names`` gives them (the class names the run records), else ``class <c>``.

    Args:
        path: the JSON file.
        labels: the class values that get a segment (>= 1).
        named_classes: the file names the model's classes, ``labels`` only those a label map shows: the classes
            above the largest of ``labels`` up to the largest key of the file (a decimal integer, at most
            65535) get a segment too, so that a case whose label map lacks the model's highest
            class (no enhancing tumour) keeps every class of the file (an empty segment), where it was refused.
        names: ``{class value: name}`` of the classes the file does not name (checked by the caller, e.g.
            ``dicom-export --class-names``); default none.

    Returns:
        One :class:`SegmentSpec` per label, in the order of ``labels`` (then the classes the file adds).

    Raises:
        ValueError: naming the file and the field: not JSON (UTF-8, a byte-order mark skipped), a key given twice in
            one object, not an object, a key that is not one of ``labels`` (with ``named_classes``: not a class
            value from 1 to 65535 either), a
            name that is empty, longer than 64 bytes of UTF-8 or holds a backslash or a control character, a malformed
            code.

    Example:
        >>> import json, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = Path(d, "s.json").write_text(json.dumps({"1": {"name": "oedema"}, "3": {"name": "tumour"}}))
        ...     [s.name for s in read_segment_specs(Path(d, "s.json"), [1, 2], named_classes=True)]
        ...     [s.name for s in read_segment_specs(Path(d, "s.json"), [1, 2, 3], names={1: "edema", 2: "necrosis"})]
        ['oedema', 'class 2', 'tumour']
        ['oedema', 'necrosis', 'tumour']
    """
    path = Path(path)
    # strict JSON within limits (deep nesting, huge numbers and a key given twice are one line: json keeps the last
    # key, another name than the one read); a byte-order mark (Notepad) skipped
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"segments file {path} is not readable: {type(e).__name__}: {e.strerror or e}") from None
    doc = decode_untrusted_json(raw.removeprefix(codecs.BOM_UTF8), f"segments file {path}")
    if not isinstance(doc, dict):
        raise ValueError(f"segments file {path}: must be a JSON object keyed by class value")
    wanted = {str(int(v)): int(v) for v in labels}
    if named_classes:  # "3" (not "03", "+3", "³"): the key a class value has
        named = [int(k) for k in doc if k.isascii() and k.isdecimal() and k == str(int(k))
                 and 1 <= int(k) <= MAX_SEGMENT_NUMBER]
        top = max([*wanted.values(), *named], default=0)
        wanted.update({str(v): v for v in range(max(wanted.values(), default=0) + 1, top + 1)})
    names = dict(names or {})
    specs = {v: default_segment(v, names.get(v)) for v in wanted.values()}
    for key, entry in doc.items():
        if key not in wanted:
            raise ValueError(f"segments file {path}: key {key!r} is not a class of the segmentation "
                             f"({sorted(wanted.values())})")
        if not isinstance(entry, dict) or set(entry) - {"name", "category", "type"}:
            raise ValueError(f"segments file {path}: entry {key} must be an object with name, category, type")
        name = check_text(entry.get("name", names.get(wanted[key], f"class {key}")),
                          f"segments file {path}: entry {key}: name", 64)
        base = default_segment(wanted[key], name)
        category = _code(entry["category"], f"segments file {path}: entry {key}: category") \
            if "category" in entry else base.category
        type_ = _code(entry["type"], f"segments file {path}: entry {key}: type") if "type" in entry else base.type
        specs[wanted[key]] = SegmentSpec(wanted[key], name, category, type_)
    return [specs[v] for v in wanted.values()]


def volume_frames(volume: np.ndarray, series: DicomSeries, what: str) -> np.ndarray:
    """The frames of a volume on the series' grid: ``(slices, rows, columns)`` from ``(columns, rows, slices)``.

    Raises:
        ValueError: naming ``what`` when the volume's shape is not the series' ``(columns, rows, slices)``.
    """
    volume = np.asarray(volume)
    if volume.shape[:3] != tuple(series.shape):
        raise ValueError(f"{what} has shape {volume.shape[:3]}, the series {series.series_uid} {series.shape}")
    return np.ascontiguousarray(np.swapaxes(np.moveaxis(volume, 2, 0), 1, 2))


#: the Patient and General Study attributes of type 2 that the derived objects copy from the source (highdicom)
_TYPE2_COPIED = ("PatientName", "PatientID", "PatientBirthDate", "PatientSex", "StudyDate", "StudyTime",
                 "AccessionNumber", "StudyID", "ReferringPhysicianName")
#: the VRs of text in a character set (SpecificCharacterSet applies to them)
_TEXT_VRS = frozenset({"SH", "LO", "ST", "LT", "UT", "UC", "PN"})
#: the Defined Terms of the default repertoire (ASCII)
_DEFAULT_REPERTOIRE = ("", "ISO_IR 6", "ISO 2022 IR 6")


def _equal(a: Any, b: Any) -> bool:
    """``a == b``, False where the comparison raises.

    highdicom's content classes (``PlaneOrientationSequence``, ...) raise TypeError compared with anything but their
    own kind: a multi-frame source's SharedFunctionalGroupsSequence of the same attributes as a SEG's was compared
    item by item with the SEG's, and writing the SEG failed (found by hostile testing).
    """
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _texts(dataset: Any, source: Any) -> list[str]:
    """The texts of ``dataset`` (recursively) but its top-level elements equal to the ``source``'s (copied)."""
    out = []
    for elem in dataset:
        if elem.tag in source and _equal(source[elem.tag].value, elem.value):
            continue
        if elem.VR == "SQ":
            out.extend(text for item in elem.value for text in _texts(item, Dataset()))
        elif elem.VR in _TEXT_VRS and elem.value is not None:
            values = elem.value if isinstance(elem.value, (list, tuple, MultiValue)) else [elem.value]
            out.extend(str(v) for v in values)
    return out


def _source_character_set(source: Any) -> str | list[str] | None:
    r"""The source's SpecificCharacterSet as a derived object declares it (None: the default repertoire, absent).

    An empty first value of a multi-valued set (Japanese ``\ISO 2022 IR 87``, Korean ``\ISO 2022 IR 149``) is
    ISO 2022 IR 6 (PS3.3 C.12.1.1.2) and written so; an empty value or ``ISO_IR 6`` alone is the default repertoire,
    which a missing SpecificCharacterSet declares. Other values are kept as they are.
    """
    declared = source.get("SpecificCharacterSet")
    terms = [declared] if isinstance(declared, str) else [str(t) for t in (declared or [])]
    terms = [str(t).strip() for t in terms]
    if len(terms) > 1:
        return ["ISO 2022 IR 6" if not terms[0] else terms[0], *terms[1:]]
    if not terms or terms[0] in _DEFAULT_REPERTOIRE[:2]:
        return None
    return terms[0]


def declare_character_set(dataset: Any, source: Any) -> Any:
    r"""Give the object the source's character set, and UTF-8 (``ISO_IR 192``) when one of its texts is not in it.

    The derived objects take the source's SpecificCharacterSet (the ISO 2022 IR 6 that an empty first value of
    ``\ISO 2022 IR 87`` stands for written out; an empty one or ``ISO_IR 6`` left out, as the default repertoire),
    but their own texts (segment names, algorithm names, regions) need not be in it: without a declaration only
    ASCII is allowed (pydicom would write Latin-1 bytes no reader may assume) and a Latin-1 source cannot hold ``李``
    (pydicom would write ``?``). UTF-8 holds every text; the source's texts (the patient's name) are then the same
    characters re-encoded. The elements copied from ``source`` (the first slice) do not decide: a source with
    non-ASCII text and no declaration keeps its bytes, as they are, when the object's own texts fit.

    Args:
        dataset: the derived object (a SpecificCharacterSet it has is replaced by the source's).
        source: the source slice its patient and study were copied from.

    Returns:
        ``dataset``, with ``SpecificCharacterSet`` ``ISO_IR 192`` when one of its own texts needs it.

    Example:
        >>> from pydicom import Dataset
        >>> src, ds = Dataset(), Dataset()
        >>> src.PatientName = ds.PatientName = "Doe^Jane"
        >>> ds.ContentLabel, ds.SeriesDescription = "SEG", "Ödem"
        >>> declare_character_set(ds, src).SpecificCharacterSet
        'ISO_IR 192'
    """
    # the source's, set here: highdicom takes a set only from its own list (it refuses the empty first value of a
    # Japanese or Korean source, '\ISO 2022 IR 87', and knows no 'ISO 2022 IR 149'), so the writers give it none
    own = _source_character_set(source)
    if "SpecificCharacterSet" in dataset:
        del dataset.SpecificCharacterSet
    if own is not None:
        dataset.SpecificCharacterSet = own
    declared = dataset.get("SpecificCharacterSet")
    terms = [declared] if isinstance(declared, str) else [str(t) for t in (declared or [])]
    terms = terms or [""]
    if "ISO_IR 192" in terms:
        return dataset
    codecs = ["ascii" if t.strip() in _DEFAULT_REPERTOIRE else python_encoding.get(t.strip()) for t in terms]
    if None in codecs:  # a term pydicom does not know: left as the source has it
        return dataset

    def encodable(text: str) -> bool:
        for codec in codecs:
            try:
                text.encode(codec)
                return True
            except UnicodeEncodeError:
                continue
        return False

    if any(not text.isascii() and not encodable(text) for text in _texts(dataset, source)):
        dataset.SpecificCharacterSet = "ISO_IR 192"
    return dataset


#: the SOP Common attributes a derived object keeps from its source: highdicom copies the Patient and Study modules
#: (PatientIdentityRemoved, DeidentificationMethod, ...), not this marker of a de-identification (PS3.15 E.1.1)
_SOURCE_MARKERS = ("LongitudinalTemporalInformationModified",)
#: a TimezoneOffsetFromUTC (SH, PS3.3 C.12.1.1.8): ``+`` or ``-`` and the hours and minutes, ``-1200`` .. ``+1400``
_ZONE = re.compile(r"^([+-])([01][0-9])([0-5][0-9])$")
#: the date and time pairs of a derived object's own making, which highdicom writes in local time
_OWN_TIMES = (("InstanceCreationDate", "InstanceCreationTime"), ("ContentDate", "ContentTime"))


def source_zone(source: Any) -> timezone | None:
    """The zone of the source's dates and times: its TimezoneOffsetFromUTC, or None (absent or not a valid offset).

    Args:
        source: a slice of the source series.

    Returns:
        The fixed offset, or None when the source states none or one outside ``-1200`` .. ``+1400`` (its dates are
        then local time, PS3.5 6.2).

    Example:
        >>> src = Dataset()
        >>> src.TimezoneOffsetFromUTC = "-0330"
        >>> str(source_zone(src))
        'UTC-03:30'
    """
    match = _ZONE.match(str(source.get("TimezoneOffsetFromUTC", "") or "").strip())
    if match is None:
        return None
    minutes = (-1 if match[1] == "-" else 1) * (int(match[2]) * 60 + int(match[3]))
    return timezone(timedelta(minutes=minutes)) if -12 * 60 <= minutes <= 14 * 60 else None


def _local_in_zone(date: str, time: str, zone: timezone) -> datetime | None:
    """A local date (``YYYYMMDD``) and time (``HHMMSS[.ffffff]``) as that instant in ``zone``; None if malformed."""
    fraction = time[6:].lstrip(".")
    if len(date) != 8 or len(time) < 6 or not (date + time[:6] + fraction).isdigit():
        return None
    local = datetime.strptime(date + time[:6], "%Y%m%d%H%M%S").replace(microsecond=int((fraction + "000000")[:6]))
    return local.astimezone(zone)  # a naive time is local


def _in_zone(dataset: Any, zone: timezone) -> None:
    """Restate the object's own dates and times, which highdicom writes in local time, in ``zone``.

    :data:`_OWN_TIMES`, and the ContributionDateTime of highdicom's own ContributingEquipmentSequence item.
    """
    for date_key, time_key in _OWN_TIMES:
        time = str(dataset.get(time_key, "") or "")
        moved = _local_in_zone(str(dataset.get(date_key, "") or ""), time, zone)
        if moved is not None:
            setattr(dataset, date_key, moved.strftime("%Y%m%d"))
            setattr(dataset, time_key, moved.strftime("%H%M%S.%f" if len(time) > 6 else "%H%M%S"))
    for item in dataset.get("ContributingEquipmentSequence") or []:
        # found by review 61: the time the object was made, local time, in an object stating another zone
        when = str(item.get("ContributionDateTime", "") or "")
        if str(item.get("ManufacturerModelName", "")) != "highdicom" or "+" in when or "-" in when:
            continue  # another equipment's (the source's acquisition) or a time with its own offset
        moved = _local_in_zone(when[:8], when[8:], zone)
        if moved is not None:
            item.ContributionDateTime = moved.strftime("%Y%m%d%H%M%S.%f" if len(when) > 14 else "%Y%m%d%H%M%S")


#: the date and time pairs of a source, in the order a ``MODIFIED`` object's ContentDate / ContentTime is taken
_SOURCE_TIMES = (("ContentDate", "ContentTime"), ("AcquisitionDate", "AcquisitionTime"),
                 ("SeriesDate", "SeriesTime"), ("StudyDate", "StudyTime"))
_DA = re.compile(r"^[0-9]{8}$")
_TM = re.compile(r"^([0-9]{2})([0-9]{2})?([0-9]{2})?(\.[0-9]{1,6})?$")


def _instant_key(date: Any, time: Any) -> tuple[str, str] | None:
    """A DA and TM value as a sortable key (the time padded to ``HHMMSS.ffffff``); None where either is no such."""
    date, time = str(date or "").strip(), str(time or "").strip()
    match = _TM.match(time)
    if not _DA.match(date) or match is None or (match[3] is None and match[4] is not None):
        return None
    return date, f"{match[1]}{match[2] or '00'}{match[3] or '00'}{(match[4] or '.').ljust(7, '0')}"


def modified_content_time(sources: Sequence[Any]) -> tuple[str, str] | None:
    """The ContentDate and ContentTime of an object derived from sources whose dates were shifted (``MODIFIED``).

    The latest (date, time) of the sources' ContentDate / ContentTime, else of their AcquisitionDate / Time,
    SeriesDate / Time, StudyDate / Time (the first pair that some source states validly, date and time): the time of
    the images the object derives from, on their shifted timeline, so that the object is not dated before them.

    Args:
        sources: the source slices (pydicom datasets).

    Returns:
        ``(date, time)`` as the source states them, or None when no source states any pair.

    Example:
        >>> a, b = Dataset(), Dataset()
        >>> a.ContentDate, a.ContentTime, b.ContentDate, b.ContentTime = "19990203", "101712", "19990203", "1018"
        >>> modified_content_time([a, b])
        ('19990203', '1018')
    """
    for date_key, time_key in _SOURCE_TIMES:
        stated = []
        for ds in sources:
            date, time = ds.get(date_key), ds.get(time_key)
            key = _instant_key(date, time)
            if key is not None:
                stated.append((key, str(date).strip(), str(time).strip()))
        if stated:
            _, date, time = max(stated)
            return date, time
    return None


def _marker(dataset: Any) -> str:
    """A slice's LongitudinalTemporalInformationModified (``MODIFIED``, ``UNMODIFIED``, ``REMOVED``; ``""`` if none)."""
    return str(dataset.get("LongitudinalTemporalInformationModified", "") or "").strip()


#: the codes of DeidentificationMethodCodeSequence (PS3.16 CID 7050) of the options that keep the dates: Retain
#: Longitudinal Temporal Information With Full Dates, With Modified Dates
_DATES_KEPT = ("113106", "113107")
#: the dummy ContentDate / ContentTime (type 1) of an object whose sources' dates were removed and state none
#: (PS3.15 E.1.1, action D: a non-zero length dummy value consistent with the VR)
DUMMY_DATE, DUMMY_TIME = "19000101", "000000"


def dates_removed(source: Any) -> bool:
    """Whether a de-identification removed the dates of ``source`` (PS3.15 E.1.1 without the longitudinal options).

    ``LongitudinalTemporalInformationModified`` ``REMOVED`` says so. Without that marker (it is type 3), a source
    whose ``PatientIdentityRemoved`` is ``YES`` and whose ``DeidentificationMethodCodeSequence`` names a profile or
    option of PS3.16 CID 7050 (DCM ``1131xx``: the Basic Application Level Confidentiality Profile removes or replaces
    every date) but neither Retain Longitudinal Temporal Information option (``113106`` full dates, ``113107``
    modified dates) had its dates removed too. A ``MODIFIED`` or ``UNMODIFIED`` marker, or a de-identification
    described only in text (``DeidentificationMethod``), is not read as removed.

    Args:
        source: a slice of the source series.

    Returns:
        True when the source's dates were removed.

    Example:
        >>> src = Dataset()
        >>> src.PatientIdentityRemoved = "YES"
        >>> item = Dataset()
        >>> item.CodeValue, item.CodingSchemeDesignator, item.CodeMeaning = "113100", "DCM", "Basic Application ..."
        >>> src.DeidentificationMethodCodeSequence = [item]
        >>> dates_removed(src)
        True
        >>> item.CodeValue = "113107"
        >>> dates_removed(src)
        False
    """
    marker = _marker(source)
    if marker:
        return marker == "REMOVED"
    if str(source.get("PatientIdentityRemoved", "") or "").strip() != "YES":
        return False
    codes_ = [(str(item.get("CodingSchemeDesignator", "") or "").strip(), str(item.get("CodeValue", "") or "").strip())
              for item in source.get("DeidentificationMethodCodeSequence") or []]
    profiles = [value for scheme, value in codes_ if scheme == "DCM" and re.fullmatch(r"1131[0-9]{2}", value)]
    return bool(profiles) and not any(value in _DATES_KEPT for value in profiles)


def _drop_making_times(dataset: Any) -> None:
    """Leave out the dates of an object's making (type 3): InstanceCreationDate / Time, highdicom's contribution."""
    for key in ("InstanceCreationDate", "InstanceCreationTime"):
        if key in dataset:
            delattr(dataset, key)
    for item in dataset.get("ContributingEquipmentSequence") or []:
        if str(item.get("ManufacturerModelName", "")) == "highdicom" and "ContributionDateTime" in item:
            del item.ContributionDateTime


def _set_content_time(dataset: Any, when: tuple[str, str]) -> None:
    """Set the object's ContentDate / ContentTime (new elements: highdicom may share elements with the source)."""
    for key, value in zip(("ContentDate", "ContentTime"), when):
        if key in dataset:
            delattr(dataset, key)
        setattr(dataset, key, value)


def _shifted_times(dataset: Any, sources: Sequence[Any]) -> bool:
    """Put a derived object's own dates on the shifted timeline of its ``MODIFIED`` sources (copy_source_markers).

    Only the sources that say ``MODIFIED`` date it: another (a channel series that was not de-identified) holds true
    dates, which the object would mix with the shifted ones. Returns False, with a warning, when they state no date
    (the object keeps the time of writing).
    """
    when = modified_content_time([ds for ds in sources if _marker(ds) == "MODIFIED"])
    if when is None:
        warnings.warn("the source is marked LongitudinalTemporalInformationModified MODIFIED but states no date and "
                      "time (ContentDate / Time, AcquisitionDate / Time, SeriesDate / Time, StudyDate / Time): the "
                      "derived object keeps the time of writing as its ContentDate / ContentTime", UserWarning,
                      stacklevel=3)
        return False
    _set_content_time(dataset, when)
    _drop_making_times(dataset)
    return True


def _removed_times(dataset: Any, sources: Sequence[Any]) -> None:
    """Give a derived object of sources whose dates were removed no date of its making (copy_source_markers).

    Its ContentDate / ContentTime (type 1) are the latest that those sources still state (the values their
    de-identification left, dummies), else :data:`DUMMY_DATE` / :data:`DUMMY_TIME` with a warning; the dates of its
    making (type 3) are left out.
    """
    when = modified_content_time([ds for ds in sources if dates_removed(ds)])
    if when is None:
        warnings.warn(f"the source's dates were removed by its de-identification (PS3.15 E.1.1) and it states none: "
                      f"the derived object's ContentDate / ContentTime are the dummy {DUMMY_DATE} {DUMMY_TIME}, not "
                      "the time of writing", UserWarning, stacklevel=3)
        when = (DUMMY_DATE, DUMMY_TIME)
    _set_content_time(dataset, when)
    _drop_making_times(dataset)


def input_slices(series: DicomSeries, others: Sequence[DicomSeries] = ()) -> list[Any]:
    """Every slice (header) of the series an object derives from: ``series`` and the other channels' ``others``.

    Args:
        series: the series the object lies on.
        others: the series of the case's other input channels (:func:`check_other_series`).

    Returns:
        The headers of ``series``' slices, then of each of ``others``' (one per image).

    Example:
        >>> import tempfile
        >>> from monai_unc.io.dicom import read_series, write_series
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = write_series(np.zeros((4, 3, 2)), np.eye(4), f"{d}/a", modality="MR")
        ...     _ = write_series(np.zeros((4, 3, 5)), np.eye(4), f"{d}/b", modality="MR")
        ...     len(input_slices(read_series(f"{d}/a", pixels=False), [read_series(f"{d}/b", pixels=False)]))
        7
    """
    return [*series.datasets, *(ds for other in others for ds in other.datasets)]


def copy_source_markers(dataset: Any, source: Any, sources: Sequence[Any] | None = None) -> Any:
    """Give a derived object the source's de-identification marker, time zone and RecognizableVisualFeatures YES.

    A source de-identified with its dates shifted (PS3.15 E, Retain Longitudinal Temporal Information with Modified
    Dates Option) says so in this SOP Common attribute (``MODIFIED``; ``REMOVED``, ``UNMODIFIED``). The derived
    objects copy its StudyDate and PatientBirthDate, so they carry the marker too: without it a reader took the
    shifted dates for true ones. A source without it gives objects without it (nothing is invented).

    The copied dates are in the source's TimezoneOffsetFromUTC (SOP Common, PS3.3 C.12.1.1.8: every date and time of
    an instance is in that zone), which the object then states too (without it a reader took them for the reader's
    local time); the object's own InstanceCreationDate / Time and ContentDate / Time, which highdicom writes in the
    local time of the machine, are restated in that zone (:func:`source_zone`). A source without one, or with an
    invalid one, gives objects without one (their dates local, as the source's).

    A source image from which the patient can be recognised (RecognizableVisualFeatures ``YES``: a face rendered
    from a head MR) gives an image object (one with pixel data: SEG, Parametric Map; not an SR) ``YES`` too: it lies
    voxel for voxel on the source's grid, and a whole-head segmentation or its uncertainty outlines the face. A
    Parametric Map of another source keeps highdicom's ``NO``.

    A source marked ``MODIFIED`` has every date and time shifted by one offset that the object cannot know (PS3.15
    E.3.6, Retain Longitudinal Temporal Information With Modified Dates Option: the dates of such an instance keep
    their intervals, on a shifted timeline). The object carries the marker, so its own dates must be on that timeline
    too: the time of writing beside the shifted StudyDate told a reader the shift (or was taken for a shifted date).
    Its ContentDate / ContentTime (type 1) are then the latest content date and time of its sources
    (:func:`modified_content_time`), the time of the images it derives from, and the dates of its making, which no
    shifted timeline holds (InstanceCreationDate / Time and highdicom's ContributionDateTime, type 3), are left out.
    A ``MODIFIED`` source without any date keeps the time of writing, with a warning.

    A source whose de-identification removed its dates (:func:`dates_removed`: ``REMOVED``, or a PS3.15 profile
    without the Retain Longitudinal Temporal Information options; PS3.15 E.1.1 removes or replaces with dummies
    every date, ContentDate and InstanceCreationDate among them) gives an object no date of its making either: the
    time of writing in an object copying the source's ``PatientIdentityRemoved`` told when the patient's images were
    processed, which the de-identification had removed. Its ContentDate / ContentTime (type 1) are the latest its
    sources still state (the de-identification's dummies), else the dummy :data:`DUMMY_DATE` :data:`DUMMY_TIME`
    with a warning; InstanceCreationDate / Time and highdicom's ContributionDateTime (type 3) are left out.

    Args:
        dataset: the derived object.
        source: the source slice its patient and study were copied from.
        sources: the slices the object derives from, whose latest date dates a ``MODIFIED`` object (every slice of
            every input series; those marked ``MODIFIED`` count; of a source whose dates were removed, those whose
            dates were removed); None: ``[source]``.

    Returns:
        ``dataset``.

    Example:
        >>> from pydicom import Dataset
        >>> src, ds = Dataset(), Dataset()
        >>> src.LongitudinalTemporalInformationModified = "MODIFIED"
        >>> src.SeriesDate, src.SeriesTime = "19990203", "101700"
        >>> ds.ContentDate, ds.ContentTime, ds.InstanceCreationDate = "20261206", "093000", "20261206"
        >>> ds = copy_source_markers(ds, src)
        >>> ds.LongitudinalTemporalInformationModified, ds.ContentDate, ds.ContentTime, "InstanceCreationDate" in ds
        ('MODIFIED', '19990203', '101700', False)
    """
    for key in _SOURCE_MARKERS:
        if key in source and not source[key].is_empty and key not in dataset:
            dataset.add(copy.deepcopy(source[key]))
    # found by review 63: the time of writing beside the source's shifted dates
    sources = [source] if sources is None else sources
    shifted = _marker(source) == "MODIFIED" and _shifted_times(dataset, sources)
    if dates_removed(source):  # found by review 64: the time of writing in an object of a source without dates
        _removed_times(dataset, sources)
        shifted = True  # no date of the object is the machine's local time: none is restated in the source's zone
    zone = source_zone(source)
    if zone is not None and "TimezoneOffsetFromUTC" not in dataset:  # found by review 61: the dates read as local
        dataset.TimezoneOffsetFromUTC = str(source.TimezoneOffsetFromUTC).strip()
        if not shifted:  # the source's dates are in its zone already
            _in_zone(dataset, zone)
    image = any(key in dataset for key in ("PixelData", "FloatPixelData", "DoubleFloatPixelData"))
    if image and str(source.get("RecognizableVisualFeatures", "") or "").strip() == "YES":
        dataset.RecognizableVisualFeatures = "YES"  # found by hostile review 60: the map said NO
    return dataset


def source_images(series: DicomSeries) -> list[Any]:
    """The source slices a derived object is made from, its patient and study taken from the first.

    Of a multi-frame source (:attr:`~.series.DicomSeries.multiframe`) the one image, whose frames the derived
    objects' frames reference (highdicom reads their positions from its functional groups): when its shared
    functional groups lack the orientation or pixel measures (a scanner may give them per frame), or a frame's own
    group lacks its position (a one-frame image may state it shared), or one of them is a decimal string of over 16
    characters (which highdicom would copy into the objects as it is), a copy of its header is given them from the
    series (:attr:`~.series.DicomSeries.orientation`, :attr:`~.series.DicomSeries.pixel_spacing`,
    :attr:`~.series.DicomSeries.positions`), where highdicom reads them; the series' headers stay as read.

    A Patient or General Study attribute of type 2 that the source lacks (an anonymiser that deleted the birth date
    instead of emptying it) is written empty, as DICOM says an unknown type 2 value is (nothing is invented); the
    first slice is copied for that, the series' headers stay as read. So is a SliceThickness that is absent, 0 or
    has several values: it is written empty there, and the objects state the distance between the slice planes.

    Args:
        series: the source series (headers are enough).

    Returns:
        The slices' headers for highdicom's ``source_images`` / ``evidence`` (of a multi-frame source: one).

    Raises:
        DicomSeriesError: the source lacks its StudyInstanceUID or FrameOfReferenceUID (type 1: a derived object
            cannot say whose study or which space it belongs to).
    """
    first = series.datasets[0]
    for key in ("StudyInstanceUID", "FrameOfReferenceUID"):
        if not str(first.get(key, "") or "").strip():
            raise DicomSeriesError(f"DICOM series {series.series_uid} in {series.folder}: its slices have no {key}; "
                                   "the derived objects need the study and the frame of reference of their source")
    missing = [key for key in _TYPE2_COPIED if key not in first]
    if series.multiframe:
        return [_multiframe_source(series, missing)]
    # absent, 0 or several values (type 2 in the CT / MR image: highdicom copies it, or fails on an absent one): empty
    # here, the object's own thickness is then the planes' distance (_pixel_measures)
    unstated = _stated_thickness(first) is None and ("SliceThickness" not in first
                                                     or first.SliceThickness not in (None, ""))
    if not missing and not unstated:
        return list(series.datasets)
    first = copy.deepcopy(first)
    for key in missing:
        setattr(first, key, "")
    if unstated:
        first.SliceThickness = None
    return [first, *series.datasets[1:]]


def _multiframe_source(series: DicomSeries, missing: Sequence[str]) -> Any:
    """The multi-frame source image of :func:`source_images`: its type 2 gaps filled, its shared geometry given."""
    ds = series.datasets[0]
    groups = ds.get("SharedFunctionalGroupsSequence") or []
    shared = groups[0] if groups else Dataset()
    # highdicom copies these items as they are: decimal strings of over 16 characters (invalid, seen in the wild)
    # made objects that dciodvfy rejects (found by hostile testing); they are then given from the series' numbers
    needs = [key for key, names in (("PlaneOrientationSequence", ("ImageOrientationPatient",)),
                                    ("PixelMeasuresSequence", ("PixelSpacing", "SliceThickness")))
             if not shared.get(key) or any(_long_decimals(shared.get(key)[0], name) for name in names)]
    # highdicom reads each frame's position from its own group: a one-frame image may state it in the shared one
    unplaced = any(not g.get("PlanePositionSequence")
                   or _long_decimals(g.PlanePositionSequence[0], "ImagePositionPatient")
                   for g in ds.get("PerFrameFunctionalGroupsSequence") or [])
    if not missing and not needs and not unplaced:
        return ds
    ds = copy.deepcopy(ds)
    for key in missing:
        setattr(ds, key, "")
    if unplaced:
        assert series.frames is not None and series.positions is not None
        for frame, position in zip(series.frames, series.positions):
            ds.PerFrameFunctionalGroupsSequence[frame - 1].PlanePositionSequence = hd.PlanePositionSequence(
                hd.CoordinateSystemNames.PATIENT, [float(v) for v in position])
    if needs:
        if not ds.get("SharedFunctionalGroupsSequence"):
            ds.SharedFunctionalGroupsSequence = [Dataset()]
        shared = ds.SharedFunctionalGroupsSequence[0]
        assert series.orientation is not None and series.pixel_spacing is not None
        if "PlaneOrientationSequence" in needs:
            shared.PlaneOrientationSequence = hd.PlaneOrientationSequence(
                hd.CoordinateSystemNames.PATIENT, [float(v) for v in series.orientation])
        if "PixelMeasuresSequence" in needs:
            first = _frame_measures(series)
            thickness = _stated_thickness(first) if first is not None else None
            shared.PixelMeasuresSequence = hd.PixelMeasuresSequence(
                [float(v) for v in series.pixel_spacing], thickness or series.slice_spacing)
    return ds


def _long_decimals(item: Any, name: str) -> bool:
    """Whether ``name`` of ``item`` holds a decimal string of over 16 characters (or one that is no number)."""
    try:
        value = item.get(name)
    except (TypeError, ValueError, OverflowError):  # not a number: given from the series' numbers
        return True
    values = value if isinstance(value, (list, tuple, MultiValue)) else [] if value is None else [value]
    return any(len(str(v)) > 16 for v in values)


def _frame_measures(series: DicomSeries) -> Any:
    """The PixelMeasuresSequence item of a multi-frame source's first frame (its own, else the shared), or None."""
    ds = series.datasets[0]
    for groups, index in (("PerFrameFunctionalGroupsSequence", (series.frames or [1])[0] - 1),
                          ("SharedFunctionalGroupsSequence", 0)):
        seq = ds.get(groups) or []
        if index < len(seq) and seq[index].get("PixelMeasuresSequence"):
            return seq[index].PixelMeasuresSequence[0]
    return None


def _source_thickness(series: DicomSeries) -> float | None:
    """The slice thickness the source states (its first slice's, of a multi-frame source its first frame's)."""
    if series.multiframe:
        measures = _frame_measures(series)
        return _stated_thickness(measures) if measures is not None else None
    return _stated_thickness(series.datasets[0])


def _source_frames(frames: np.ndarray, series: DicomSeries) -> np.ndarray:
    """Frames ``(slices, ...)`` in the order highdicom pairs them with the source.

    Of a multi-frame source, frame ``j`` of the result is the source's frame ``j + 1`` (the slices'
    :attr:`~.series.DicomSeries.frames`); else the frames are as they are (slice ``k``, source image ``k``).
    """
    if not series.multiframe:
        return frames
    return np.ascontiguousarray(frames[np.argsort(np.asarray(series.frames))])


def save_dataset(dataset: Any, path: str | os.PathLike) -> Path:
    """Write a DICOM dataset as a Part 10 file, atomically (temporary name, rename)."""
    with atomic_path(path, ending=".dcm") as tmp:
        dataset.save_as(tmp, enforce_file_format=True)
    return Path(path)


def check_other_series(other_series: Any, series: DicomSeries) -> list[DicomSeries]:
    """The series of a case's other input channels that a derived object references beside ``series``, checked.

    A model of several input channels (T1, T1ce, T2, FLAIR) derives its outputs from every channel's series; the
    objects lie on the grid of channel 0's ``series`` and reference the others as further source images. A series
    given twice, or ``series`` itself, is referenced once.

    Args:
        other_series: a sequence of :class:`~.series.DicomSeries` (headers are enough).
        series: the series the object lies on (channel 0's).

    Returns:
        The other series, in their order, without repeats.

    Raises:
        TypeError: naming ``other_series`` when it is not a sequence of :class:`~.series.DicomSeries`.
        ValueError: naming ``other_series`` when one is of another patient or frame of reference (no channel of
            this case, :data:`~.series.SAME_IN_CHANNELS`).

    Example:
        >>> check_other_series((), None)
        []
    """
    if isinstance(other_series, (str, bytes, DicomSeries)) or not isinstance(other_series, Sequence):
        raise TypeError(f"other_series must be a sequence of DicomSeries (the case's other input channels), got "
                        f"{type(other_series).__name__}")
    seen = {series.series_uid} if series is not None else set()
    out = []
    for other in other_series:
        if not isinstance(other, DicomSeries):
            raise TypeError(f"other_series must hold DicomSeries items, got {type(other).__name__}")
        differ = [name for name in SAME_IN_CHANNELS if str(other.datasets[0].get(name, "") or "").strip()
                  != str(series.datasets[0].get(name, "") or "").strip()]
        if differ:
            raise ValueError(f"other_series: series {other.series_uid} differs from {series.series_uid} in "
                             f"{', '.join(differ)}: the channels of a case are series of one patient in one frame of "
                             "reference")
        if other.series_uid not in seen:
            seen.add(other.series_uid)
            out.append(other)
    return out


def _reference_other_studies(dataset: Any, others: Sequence[DicomSeries]) -> Any:
    """Reference the channel series of another study than the object's source (highdicom takes one study's).

    Their images are listed as source images and under their study in
    ``StudiesContainingOtherReferencedInstancesSequence`` (Common Instance Reference, PS3.3 C.12.2); returns
    ``dataset``.
    """
    study = str(dataset.StudyInstanceUID)
    by_study: dict[str, list[Dataset]] = {}
    for other in others:
        other_study = str(other.datasets[0].get("StudyInstanceUID", "") or "")
        if other_study == study:
            continue
        refs = []
        for ds in other.datasets:
            ref = Dataset()
            ref.ReferencedSOPClassUID, ref.ReferencedSOPInstanceUID = ds.SOPClassUID, ds.SOPInstanceUID
            refs.append(ref)
        dataset.SourceImageSequence = [*(dataset.get("SourceImageSequence") or []), *copy.deepcopy(refs)]
        item = Dataset()
        item.SeriesInstanceUID = other.series_uid
        item.ReferencedInstanceSequence = refs
        by_study.setdefault(other_study, []).append(item)
    for other_study, items in by_study.items():
        entry = Dataset()
        entry.StudyInstanceUID = other_study
        entry.ReferencedSeriesSequence = items
        dataset.StudiesContainingOtherReferencedInstancesSequence = [
            *(dataset.get("StudiesContainingOtherReferencedInstancesSequence") or []), entry]
    return dataset


def _common(series: DicomSeries, uid_root: str | None, series_number: int, algorithm: AlgorithmInfo,
            description: str, others: Sequence[DicomSeries] = ()) -> dict[str, Any]:
    images = source_images(series)  # first: it refuses a source without its study
    study = str(series.datasets[0].StudyInstanceUID)
    # the other channels' images: highdicom references them (and, frame by frame, the slices of each frame's plane)
    further = [ds for other in others if str(other.datasets[0].get("StudyInstanceUID", "") or "") == study
               for ds in other.datasets]
    return dict(
        further_source_images=further or None,
        source_images=images, series_instance_uid=new_uid(uid_root),
        series_number=check_series_number(series_number),
        sop_instance_uid=new_uid(uid_root), instance_number=1, manufacturer="monai-unc",
        manufacturer_model_name=algorithm.name or "monai-unc", software_versions=f"monai-unc {__version__}",
        device_serial_number=(algorithm.weights[:16] or "none"), content_description=description[:64],
        specific_character_set=None,  # the source's, set by declare_character_set (highdicom refuses some)
    )


def _stated_thickness(dataset: Any) -> float | None:
    """A slice's SliceThickness as one positive finite number, else None (empty, absent, 0, several values)."""
    value = dataset.get("SliceThickness")
    try:
        thickness = float(value)
    except (TypeError, ValueError):
        return None
    return thickness if math.isfinite(thickness) and thickness > 0 else None


def _pixel_measures(dataset: Any, series: DicomSeries) -> Any:
    """Give a derived object the slice thickness and spacing its frames cover (PixelMeasuresSequence); returns it.

    ``SliceThickness`` is type 1C in the derived objects' Pixel Measures and must not be 0, but type 2 in the CT and
    MR image modules: a source may leave it empty (or write 0), and highdicom copies what the source has. The
    source's thickness is kept when it states one (a positive number); otherwise it is the distance between the
    series' slice planes (:attr:`~.series.DicomSeries.slice_spacing`, what each frame of the object covers and what
    highdicom writes for a volume it is given), which for a one-slice series is its ``SpacingBetweenSlices``, else
    1 mm (:func:`~.series.read_series`).

    One frame position gives highdicom's default ``SpacingBetweenSlices`` of 1 mm, which a reader would take as the
    thickness of the slab: a one-slice series' object gets the series' own spacing (its ``SpacingBetweenSlices``,
    else ``SliceThickness``) instead.
    """
    shared = dataset.SharedFunctionalGroupsSequence[0].get("PixelMeasuresSequence")
    items = list(shared) if shared else [m for group in dataset.get("PerFrameFunctionalGroupsSequence", [])
                                         for m in group.get("PixelMeasuresSequence", [])]
    spacing = DSfloat(series.slice_spacing, auto_format=True)
    thickness = _source_thickness(series)
    for measures in items:
        if series.shape[2] == 1:
            measures.SpacingBetweenSlices = spacing
        if thickness is None:
            measures.SliceThickness = spacing
    return dataset


def _segment_descriptions(segments: Sequence[SegmentSpec], algorithm: AlgorithmInfo, uid_root: str | None,
                          tracking: str) -> list:
    """One automatic ``SegmentDescription`` per segment, numbered from 1, tracked as ``f"{tracking} {label}"``."""
    ident = algorithm.identification()
    descriptions = [
        hd.seg.SegmentDescription(
            segment_number=i + 1, segment_label=s.name[:64], segmented_property_category=s.category,
            segmented_property_type=s.type, algorithm_type=hd.seg.SegmentAlgorithmTypeValues.AUTOMATIC,
            algorithm_identification=ident, tracking_uid=new_uid(uid_root), tracking_id=f"{tracking} {s.label}",
        ) for i, s in enumerate(segments)
    ]
    for d in descriptions:
        for item in (*d.SegmentedPropertyCategoryCodeSequence, *d.SegmentedPropertyTypeCodeSequence):
            _fit_code_value(item)
    return descriptions


def _fit_code_value(item: Dataset) -> None:
    """Move a code value over 16 bytes of UTF-8 from CodeValue (SH) to LongCodeValue (UC), in place.

    highdicom chooses by characters: a segments file's code value of 16 characters or fewer but more bytes
    (``Ödemäußerstschön``: 16 characters, 20 bytes) was a CodeValue that dciodvfy rejects ("Length invalid for this VR
    = 20, expected <= 16"); PS3.3 8.8 gives a value that does not fit the CodeValue's SH to LongCodeValue, and the
    export counts the 16 in bytes, as it does every text's limit (:func:`check_text`).
    """
    if "CodeValue" in item and len(str(item.CodeValue).encode("utf-8")) > 16:
        value = str(item.CodeValue)
        del item.CodeValue
        item.LongCodeValue = value


def write_segmentation(labels: np.ndarray, series: DicomSeries, path: str | os.PathLike,
                       segments: Sequence[SegmentSpec], algorithm: AlgorithmInfo | None = None,
                       uid_root: str | None = None, series_number: int = 901,
                       study: Mapping[str, str] | None = None, *, series_description: str | None = None,
                       other_series: Sequence[DicomSeries] = ()) -> Path:
    """Write a label map as a binary DICOM SEG on the series' grid.

    Args:
        labels: ``(columns, rows, slices)`` integer class values (0: background, not a segment), or ``(R, columns,
            rows, slices)`` 0/1 region masks (a region-based model; segments may overlap, ``label`` r is channel
            ``r - 1``).
        series: the source series (:func:`~monai_unc.io.dicom.read_series`).
        path: the ``.dcm`` file to write.
        segments: one :class:`SegmentSpec` per class that becomes a segment (segment ``i + 1`` is
            ``segments[i]``); voxels of other classes are in no segment.
        algorithm: who made it (default :class:`AlgorithmInfo`).
        uid_root: root of the new UIDs.
        series_number: the SeriesNumber of the SEG.
        study: the study of a derived object outside the source study (:func:`new_study`); None: the source's.
        series_description: the SeriesDescription a PACS lists the series by (1 to 64 bytes of UTF-8); None:
            ``segmentation by monai-unc: <segment names>`` (cut to 64 bytes of UTF-8).
        other_series: the series of the case's other input channels (a model of several), referenced beside
            ``series`` as further source images (:func:`check_other_series`); the object lies on ``series``' grid.

    Returns:
        ``path``.

    Raises:
        TypeError: a ``series`` that is not a :class:`~.series.DicomSeries`, ``segments`` that are not
            :class:`SegmentSpec` items, a ``series_number`` that is not an integer.
        ValueError: a shape other than the series', non-integer labels, no segment, duplicate classes, two segments
            with the same name, a ``series_description`` a DICOM LO cannot hold, a ``series_number`` outside
            ``1 .. 2**31 - 1`` (:func:`check_series_number`).
    """
    check_series(series)
    others = check_other_series(other_series, series)
    series_number = check_series_number(series_number)
    segments = _check_segments(segments)
    labels = np.asarray(labels)
    if labels.ndim not in (3, 4):
        raise ValueError(f"labels must be (columns, rows, slices) class values or (R, columns, rows, slices) region "
                         f"masks, got shape {labels.shape}")
    if labels.dtype.kind not in "iub":
        if not np.array_equal(labels, np.round(labels)):
            raise ValueError("labels must hold integer class values")
        labels = labels.astype(np.int64)
    if not segments:
        raise ValueError("segments must name at least one class")
    classes = [s.label for s in segments]
    if len(set(classes)) != len(classes) or min(classes) < 1:
        raise ValueError(f"segments must be distinct classes >= 1, got {classes}")
    check_distinct_segment_names(((s.label, s.name) for s in segments), "segments", _DISTINCT_NAMES_HINT)
    description = check_series_description(
        series_description, "segmentation by monai-unc: " + ", ".join(s.name for s in segments))
    if labels.ndim == 4:  # region masks (R, X, Y, Z): segment i is channel segments[i].label - 1, may overlap
        if max(classes) > labels.shape[0]:
            raise ValueError(f"segments name channel {max(classes)} of {labels.shape[0]} region masks")
        if labels.dtype != bool and not np.isin(labels, (0, 1)).all():
            raise ValueError("region masks must hold 0 and 1 only")
        numbers = np.stack([volume_frames(labels[c - 1] > 0, series, "labels") for c in classes], axis=-1)
    else:
        frames = volume_frames(labels, series, "labels")
        numbers = np.zeros(frames.shape, dtype=np.uint16)
        for i, c in enumerate(classes):
            numbers[frames == c] = i + 1
    algorithm = algorithm or AlgorithmInfo()
    descriptions = _segment_descriptions(segments, algorithm, uid_root, "class")
    seg = hd.seg.Segmentation(
        pixel_array=_source_frames(numbers, series), segmentation_type=hd.seg.SegmentationTypeValues.BINARY,
        segment_descriptions=descriptions, content_label="SEGMENTATION",
        # an empty mask keeps every frame, as highdicom would after logging a warning that --quiet printed
        omit_empty_frames=bool(np.any(numbers)),
        **_common(series, uid_root, series_number, algorithm, "segmentation by monai-unc", others),
    )
    seg.SeriesDescription = description
    source = series.datasets[0]
    seg = copy_source_markers(_pixel_measures(_reference_other_studies(seg, others), series), source,
                              input_slices(series, others))
    return save_dataset(apply_study(declare_character_set(seg, source), study), path)


def write_fractional_segmentation(probs: np.ndarray, series: DicomSeries, path: str | os.PathLike,
                                  segments: Sequence[SegmentSpec], algorithm: AlgorithmInfo | None = None,
                                  uid_root: str | None = None, series_number: int = 902,
                                  study: Mapping[str, str] | None = None, *,
                                  series_description: str | None = None,
                                  other_series: Sequence[DicomSeries] = ()) -> Path:
    """Write class probabilities as a FRACTIONAL SEG (type PROBABILITY) on the series' grid.

    Stored as ``round(255 p)`` (:data:`FRACTIONAL_MAX`): the values read back are within ``1 / 510`` of ``p``.

    Args:
        probs: ``(C, columns, rows, slices)`` probabilities in [0, 1].
        series: the source series.
        path: the ``.dcm`` file to write.
        segments: one :class:`SegmentSpec` per channel written (its ``label`` is the channel index).
        algorithm: who made it.
        uid_root: root of the new UIDs.
        series_number: the SeriesNumber.
        study: the study of a derived object outside the source study (:func:`new_study`); None: the source's.
        series_description: the SeriesDescription (1 to 64 bytes of UTF-8); None: ``probabilities by monai-unc:
            <segment names>`` (cut to 64 bytes of UTF-8).
        other_series: the series of the case's other input channels (a model of several), referenced beside
            ``series`` as further source images (:func:`check_other_series`); the object lies on ``series``' grid.

    Returns:
        ``path``.

    Raises:
        TypeError: a ``series`` that is not a :class:`~.series.DicomSeries`, ``segments`` that are not
            :class:`SegmentSpec` items, a ``series_number`` that is not an integer.
        ValueError: probabilities outside [0, 1] or not finite, a channel out of range, a shape other than the
            series', two segments with the same name, a ``series_description`` a DICOM LO cannot hold, a
            ``series_number`` outside ``1 .. 2**31 - 1``.
    """
    check_series(series)
    others = check_other_series(other_series, series)
    series_number = check_series_number(series_number)
    segments = _check_segments(segments)
    probs = np.asarray(probs, dtype=np.float32)
    if probs.ndim != 4:
        raise ValueError(f"probs must be (C, columns, rows, slices), got shape {probs.shape}")
    if not np.isfinite(probs).all() or probs.min() < 0 or probs.max() > 1:
        raise ValueError("probs must be finite and in [0, 1]")
    channels = [s.label for s in segments]
    if not channels or min(channels) < 0 or max(channels) >= probs.shape[0]:
        raise ValueError(f"segments must name channels 0..{probs.shape[0] - 1}, got {channels}")
    check_distinct_segment_names(((s.label, s.name) for s in segments), "segments", _DISTINCT_NAMES_HINT)
    description = check_series_description(
        series_description, "probabilities by monai-unc: " + ", ".join(s.name for s in segments))
    frames = np.stack([volume_frames(probs[c], series, "probs") for c in channels], axis=-1)
    algorithm = algorithm or AlgorithmInfo()
    descriptions = _segment_descriptions(segments, algorithm, uid_root, "probability")
    seg = hd.seg.Segmentation(
        pixel_array=_source_frames(frames, series), segmentation_type=hd.seg.SegmentationTypeValues.FRACTIONAL,
        fractional_type=hd.seg.SegmentationFractionalTypeValues.PROBABILITY, max_fractional_value=FRACTIONAL_MAX,
        segment_descriptions=descriptions, content_label="PROBABILITY",
        # empty as stored (round(255 p)): probabilities below 1/510 everywhere (a confident case without the
        # structure) are an empty image too, whose frames highdicom dropped, failing (found by hostile testing)
        omit_empty_frames=bool(np.any(np.round(frames * FRACTIONAL_MAX))),
        **_common(series, uid_root, series_number, algorithm, "class probabilities by monai-unc", others),
    )
    seg.SeriesDescription = description
    source = series.datasets[0]
    seg = copy_source_markers(_pixel_measures(_reference_other_studies(seg, others), series), source,
                              input_slices(series, others))
    return save_dataset(apply_study(declare_character_set(seg, source), study), path)


def _content_label(measure: str) -> str:
    """The ContentLabel of a measure's Parametric Map: a DICOM CS that highdicom takes.

    The measure in upper case with every character but ``A-Z``, ``0-9``, space and ``_`` replaced by ``_``, without
    leading digits, spaces and underscores, cut to 16 characters and without trailing spaces and underscores;
    ``MAP`` when nothing is left.

    Example:
        >>> _content_label("predictive_entropy"), _content_label("entropy (nats)"), _content_label("pe_")
        ('PREDICTIVE_ENTRO', 'ENTROPY _NATS', 'PE')
    """
    label = re.sub(r"[^A-Z0-9_ ]", "_", measure.upper()).lstrip("0123456789 _")
    return label[:16].rstrip(" _") or "MAP"


def _code_string(value: Any, max_len: int) -> str | None:
    """A source's code string (CS) value as a valid one: stripped and in capitals, or None (empty or no CS).

    Sources state ``head`` or `` HEAD ``; a CS holds capitals, digits, spaces and underscores, at most ``max_len``.
    """
    text = str(value if value is not None else "").strip().upper()
    return text if re.fullmatch(rf"[A-Z0-9_ ]{{1,{max_len}}}", text) else None


def write_parametric_map(values: np.ndarray, series: DicomSeries, path: str | os.PathLike, measure: str,
                         algorithm: AlgorithmInfo | None = None, uid_root: str | None = None,
                         series_number: int = 903, study: Mapping[str, str] | None = None, *,
                         region: str | None = None, series_description: str | None = None,
                         other_series: Sequence[DicomSeries] = ()) -> Path:
    """Write one uncertainty map as a Parametric Map with 32-bit float pixels on the series' grid.

    The real-world value mapping is the identity (slope 1, intercept 0) with the map's unit (:data:`MAP_UNITS`:
    UCUM ``{nat}`` for entropies and mutual information, ``1`` otherwise) and its float range; the float32 values
    are stored as they are (Float Pixel Data), so they read back exactly. The map of one region of a region-based
    model names its region in the series and content descriptions and in the mapping's label and explanation.

    Precision: the pixels are float32 (24-bit significand, about 7 significant digits); float64 values are rounded
    to it, and magnitudes below float32's smallest subnormal (about ``1.4e-45``) become 0. For uncertainty maps,
    which lie in ``[0, log C]``, that changes no value by more than float32 rounding of the map's range, so it is
    not warned about; values beyond the float32 range are refused.

    The display window (VOI LUT, LINEAR_EXACT) spans the map's range (width 1 for a constant map); a range wider
    than :data:`MAX_WINDOW_WIDTH` gets a window of that width about its middle (a WindowWidth of ``6e38`` is refused
    by ``dciodvfy``), so the object is valid for any finite map.

    Args:
        values: ``(columns, rows, slices)`` finite map values.
        series: the source series.
        path: the ``.dcm`` file to write.
        measure: the map's name (``predictive_entropy``, ...; others get unit ``1``): 1 to 64 bytes of UTF-8 without a
            backslash or control characters (:func:`check_text`), written whole as the LUTExplanation of another
            name; its ContentLabel (DICOM CS) is derived from it (:func:`_content_label`).
        algorithm: who made it.
        uid_root: root of the new UIDs.
        series_number: the SeriesNumber.
        study: the study of a derived object outside the source study (:func:`new_study`); None: the source's.
        region: the region the map belongs to (one channel of a region-based model's map, e.g. ``"WT"``); None: a
            map of the whole case.
        series_description: the SeriesDescription (1 to 64 bytes of UTF-8); None: ``<measure> by monai-unc`` or
            ``<measure> of <region> by monai-unc``.
        other_series: the series of the case's other input channels (a model of several), referenced beside
            ``series`` as further source images (:func:`check_other_series`); the object lies on ``series``' grid.

    Returns:
        ``path``.

    Raises:
        TypeError: values that are not real numbers, a ``series`` that is not a :class:`~.series.DicomSeries`, a
            ``series_number`` that is not an integer.
        ValueError: values that are not ``(columns, rows, slices)`` or not the series' shape, non-finite values,
            values beyond the float32 range, a ``measure``, region name or ``series_description`` a DICOM LO cannot
            hold (empty, over 64 bytes of UTF-8, a backslash or a control character), a ``series_number`` outside
            ``1 .. 2**31 - 1``.

    Example:
        >>> import tempfile
        >>> import pydicom
        >>> from monai_unc.io.dicom import read_series, write_series
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = write_series(np.zeros((4, 3, 2)), np.eye(4), f"{d}/s", modality="MR")
        ...     s = read_series(f"{d}/s", pixels=False)
        ...     u = np.linspace(0, 0.5, 24, dtype=np.float32).reshape(4, 3, 2)
        ...     ds = pydicom.dcmread(write_parametric_map(u, s, f"{d}/pe.dcm", "predictive_entropy", region="WT"))
        ...     rwv = ds.SharedFunctionalGroupsSequence[0].RealWorldValueMappingSequence[0]
        ...     ds.SeriesDescription, rwv.LUTLabel, rwv.LUTExplanation
        ('predictive_entropy of WT by monai-unc', 'PE WT', 'WT: predictive entropy H(mean p), nats')
    """
    check_series(series)
    others = check_other_series(other_series, series)
    series_number = check_series_number(series_number)
    check_text(measure, "measure", 64)
    values = np.asarray(values)
    if values.dtype.kind not in "biuf":
        raise TypeError(f"values (the {measure} map) must hold real numbers, got dtype {values.dtype}")
    if values.ndim != 3:
        raise ValueError(f"values must be (columns, rows, slices), the series' {tuple(series.shape)}, got shape "
                         f"{values.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"the {measure} map has NaN or infinite values")
    big = float(np.abs(values).max()) if values.size else 0.0
    if big > float(np.finfo(np.float32).max):
        raise ValueError(f"the {measure} map has values beyond the float32 range of the Parametric Map (|value| up "
                         f"to {big:.6g}, at most {float(np.finfo(np.float32).max):.6g})")
    values = values.astype(np.float32)
    if region is not None:
        check_text(region, "region", 64, characters=True)  # shortened to 64 bytes where it is written
    frames = volume_frames(values, series, measure)
    unit, explanation = MAP_UNITS.get(measure, (_UNITY, measure))
    label, description = measure[:16], f"{measure} by monai-unc"  # the measures' own labels differ in 16
    if measure not in MAP_UNITS:
        label = _lut_label(measure)
    if region is not None:  # LUTLabel holds 16 characters: the measure's initials and the region
        initials = "".join(w[0] for w in measure.split("_") if w).upper() or "MAP"
        label = _lut_label(f"{initials} {region}")
        # the region shortened to its start and end (short_text) so that the text fits 64 characters: names that
        # differ at their end (v1, v2) stay apart, where a plain cut made every text of two such maps the same
        # (at least 24 characters of it, which the start that short_text keeps of the whole text holds)
        explanation = short_text(f"{short_text(region, max(64 - len(explanation) - 2, 24))}: {explanation}", 64)
        room = max(64 - len(f"{measure} of  by monai-unc"), 24)
        description = short_text(f"{measure} of {short_text(region, room)} by monai-unc", 64)
    series_text = check_series_description(series_description, description)
    low, high = float(frames.min()), float(frames.max())
    mapping = hd.pm.RealWorldValueMapping(
        lut_label=label, lut_explanation=explanation, unit=unit, value_range=(low, high),
        slope=1.0, intercept=0.0,
    )
    width = min(high - low, MAX_WINDOW_WIDTH) if high > low else 1.0  # a display default, valid for any range
    # one window given as lists of one value: highdicom writes a text explanation as list(text), one value per
    # character ('f', 'u', 'l', ...: ten explanations of one window; found by hostile review 60)
    window = hd.VOILUTTransformation(window_center=[(low + high) / 2], window_width=[width],
                                     window_explanation=["full range"],
                                     voi_lut_function=hd.VOILUTFunctionValues.LINEAR_EXACT)
    pm = hd.pm.ParametricMap(
        pixel_array=_source_frames(frames, series), contains_recognizable_visual_features=False,
        real_world_value_mappings=[mapping],
        voi_lut_transformations=[window],
        content_label=_content_label(measure),
        **_common(series, uid_root, series_number, algorithm or AlgorithmInfo(), description, others),
    )
    pm.SeriesDescription = series_text
    source = series.datasets[0]
    # General Series: the source's body part (type 3, what a PACS's hanging protocols sort by) and its Laterality
    # (type 2C) as the source states them; empty (unknown) when the source states neither, for absent is an error
    # then (found by review 65: an empty one beside the body part of a head CT made dciodvfy warn on every map)
    # (the hostile review of review 65: a lowercase or padded body part was copied as it stood, invalid characters for
    # a code string in every map; one that is no code string even in capitals is left out, the laterality unknown)
    body = _code_string(source.get("BodyPartExamined"), 16)
    if body and "BodyPartExamined" not in pm:
        pm.BodyPartExamined = body
    if "Laterality" not in pm and ("Laterality" in source or not body):
        side = _code_string(source.get("Laterality"), 1)
        pm.Laterality = side if side in ("R", "L") else ""  # the enumerated values; anything else is unknown
    pm = copy_source_markers(_pixel_measures(_reference_other_studies(pm, others), series), source,
                             input_slices(series, others))
    return save_dataset(apply_study(declare_character_set(pm, source), study), path)

