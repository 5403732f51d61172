"""The Comprehensive 3D SR of a case: a TID 1500 measurement report of what monai-unc measured and decided.

Modelled on the IHE AI Results profile (who made it, with which model, on which images), the report holds:

- one volumetric measurement group (TID 1411) per segment of the DICOM SEG, referencing that segment and its source
  series (of a case of several input series, every slice of each as its source images), with the segment's volume
  in ml (and other volumes of the segment when given);
- one measurement group (TID 1501) of the case's numbers (the case scores of the uncertainty maps, Dice and the
  QU-BraTS score when labels were given: the cells of the case's row of ``metrics.csv``), with the algorithm
  identification (name, version, weight digests, method) and the Parametric Maps and SEG as source images;
- one measurement group per table of a cohort product's command (the case's row of its table, e.g. the inner,
  predicted and outer volumes of the masks with a guarantee in ml and their band widths in mm), when given;
- one measurement group of the triage decision (``accept`` / ``review``) with its score and the rule's algorithm
  identification, whose parameters carry the rule's digest and its guarantee statement.

The numbers have no standard code: they are coded in the private scheme :data:`SCHEME` (``99MONAIUNC``) under their
column name, so a reader gets exactly the column and value of ``metrics.csv`` / ``triage.csv`` (as float64).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from decimal import ROUND_DOWN, Decimal
from pathlib import Path
from typing import Any

import highdicom as hd
import numpy as np
from pydicom.dataset import Dataset
from pydicom.sr.codedict import codes
from pydicom.sr.coding import Code
from pydicom.uid import generate_uid
from pydicom.valuerep import DS, format_number_as_ds

from ..._utils import affine_voxel_volume
from ..tables import cell_float, parse_float
from .objects import (
    MAP_UNITS,
    NOT_IN_STRING,
    AlgorithmInfo,
    apply_study,
    check_other_series,
    check_series,
    check_series_description,
    check_series_number,
    check_uid_root,
    copy_source_markers,
    declare_character_set,
    input_slices,
    new_uid,
    save_dataset,
    short_text,
    source_images,
)
from .series import DicomSeries

__all__ = ["SCHEME", "device_uid", "write_measurement_report", "report_numbers", "segment_volume_ml",
           "measurement_unit", "check_measurement_name", "decimal_string"]

#: the private coding scheme of monai-unc's measurement names and decisions
SCHEME = "99MONAIUNC"
_UNITY = Code("1", "UCUM", "no units")
_ML = Code("ml", "UCUM", "milliliter")
_MM = Code("mm", "UCUM", "millimeter")
_MM3 = Code("mm3", "UCUM", "cubic millimeter")
#: a ``_``-separated part of a column name that states its unit (``hd95``: a 95th percentile Hausdorff distance)
_UNIT_TOKENS = {"ml": _ML, "mm3": _MM3, "mm": _MM, "hd95": _MM}
#: the case scores of a map (:data:`monai_unc.scores.CASE_SCORES`): on the map's scale, in its unit
_CASE_SCORES = ("mean", "fg_mean", "patch_mean")
_IMAGING = Code("363679005", "SCT", "Imaging procedure")
_SEG_CLASS = "1.2.840.10008.5.1.4.1.1.66.4"


def check_measurement_name(name: Any, where: str) -> str:
    r"""Refuse a measurement name (a table's column) that the SR's code value and meaning cannot hold as one value.

    The name is the code value (SH, or UC as a LongCodeValue) and the meaning (LO) of the measurement's concept: a
    backslash is DICOM's value separator (``dice\left`` would be the two values ``dice`` and ``left``) and control
    characters (tab, newline) are not allowed in these VRs, as in segment and region names
    (:func:`~monai_unc.io.dicom.objects.check_text`). A name over 64 characters is shown shortened (its meaning), its
    code value stays whole.

    Args:
        name: the name.
        where: where it comes from, for the message (``"numbers"``, ``"metrics.csv of EVAL"``).

    Returns:
        ``name`` unchanged.

    Raises:
        ValueError: naming ``where`` and the name: not a string, blank, a backslash or a control character.

    Example:
        >>> check_measurement_name("dice_WT", "numbers")
        'dice_WT'
    """
    if not isinstance(name, str) or not name.strip() or NOT_IN_STRING.search(name):
        raise ValueError(f"{where}: the measurement name {name!r} must be a non-blank text without a backslash (the "
                         "DICOM value separator) or control characters (tab, newline), as it becomes the SR's code "
                         "value and meaning; rename the column")
    return name


#: characters a TEXT content item's value (UT) cannot hold: the control characters but CR, LF, FF and ESC (PS3.5 6.2)
_NOT_IN_UT = re.compile(r"[\x00-\x09\x0b\x0e-\x1a\x1c-\x1f\x7f]")


def check_report_text(value: Any, what: str) -> str:
    r"""Refuse a text that the SR's TEXT items (UT: the triage's reason and guarantee) cannot hold; returns it.

    A TEXT value may hold line ends (CR, LF), form feeds and ESC among the control characters, no other (a tab, NUL,
    DEL: PS3.5 6.2). ``triage.json`` is a file a person may edit: a reason with a tab made an SR that ``dciodvfy``
    reports invalid (found by the lesionsr review).

    Args:
        value: the text.
        what: what it is, for the message (``"triage.json: case 'a': reason"``).

    Returns:
        ``value`` unchanged.

    Raises:
        ValueError: naming ``what``: not a string, or a control character other than CR, LF, FF and ESC.

    Example:
        >>> check_report_text("score 0.2 > threshold 0.1", "reason")
        'score 0.2 > threshold 0.1'
    """
    if not isinstance(value, str):
        raise ValueError(f"{what} must be text, got {type(value).__name__}")
    bad = _NOT_IN_UT.search(value)
    if bad is not None:
        raise ValueError(f"{what} holds the control character {bad.group()!r}, which a DICOM text (UT) cannot hold "
                         f"(only line ends, form feeds and ESC): {value[:80]!r}")
    return value


def _name(text: str) -> Any:
    """The coded name of a measurement: its column name in :data:`SCHEME`.

    The code value is the whole name: a CodeValue (SH) when it fits 16 bytes of UTF-8, else a LongCodeValue (in earlier
    versions a name of 16 characters or fewer but more bytes, ``dice_Ödem_äußer``, was a CodeValue of 18 bytes, which
    dciodvfy rejects); the meaning is the name, shortened to its start and end past 64 bytes
    (:func:`~monai_unc.io.dicom.objects.short_text`).
    """
    concept = hd.sr.CodedConcept(text, SCHEME, short_text(text, 64))
    if "CodeValue" in concept and len(text.encode("utf-8")) > 16:
        del concept.CodeValue
        concept.LongCodeValue = text
    return concept


def measurement_unit(name: str) -> Code:
    """The UCUM unit of a measurement named by its column (``metrics.csv``, a product's table).

    A case score of a map (``<measure>_mean``, ``<measure>_fg_mean_<region>``, ...) has the map's unit
    (:data:`~monai_unc.io.dicom.objects.MAP_UNITS`: ``{nat}`` for the entropies, the mutual information and the
    window disagreement); another column the unit named by the first of its ``_``-separated parts that names one
    (``ml``, ``mm3``, ``mm``; ``hd95``, a Hausdorff distance, mm): the tables name their volumes and lengths so
    (``predicted_ml_<class>``, ``band_p95_mm_<class>``, ``lesion_hd95_<class>``); every other column ``1`` (Dice,
    calibration errors, scores, counts).

    Example:
        >>> [measurement_unit(n).value for n in ("predicted_ml_2", "band_p95_mm_1", "lesion_hd95_WT", "volume_mm3",
        ...                                      "dice", "mutual_information_fg_mean_TC")]
        ['ml', 'mm', 'mm', 'mm3', '1', '{nat}']
    """
    for measure, (unit, _) in MAP_UNITS.items():
        if any(name == f"{measure}_{score}" or name.startswith(f"{measure}_{score}_") for score in _CASE_SCORES):
            return unit
    for part in name.lower().split("_"):
        if part in _UNIT_TOKENS:
            return _UNIT_TOKENS[part]
    return _UNITY


def decimal_string(value: float) -> str:
    """The NumericValue (DICOM DS, at most 16 characters) of a finite number, which reads back as a finite number.

    pydicom rounds to 16 characters, which takes a number within rounding of the largest float64
    (``1.7976931348623157e308``, a sentinel some tools write) to ``1.797693135e+308``, past it: a reader of the
    decimal string, the value DICOM requires (the FloatingPointValue beside it is optional), got infinity (in earlier
    versions). Such a number's digits are cut toward zero instead.

    Args:
        value: a finite number.

    Returns:
        The decimal string.

    Example:
        >>> decimal_string(1 / 3), decimal_string(1.7976931348623157e308), decimal_string(-1.7976931348623157e308)
        ('0.33333333333333', '1.797693134e+308', '-1.79769313e+308')
    """
    text = format_number_as_ds(float(value))
    if math.isfinite(float(text)):
        return text
    exponent = f"e{math.floor(math.log10(abs(value))):+d}"
    digits = 16 - len(exponent) - 2 - (value < 0)  # sign, the first digit and the point
    mantissa = Decimal(repr(float(value))).scaleb(-int(exponent[1:]))
    return f"{mantissa.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_DOWN)}{exponent}"


def _measurement(value: float, **kwargs: Any) -> Any:
    """The Measurement (highdicom) of ``value`` with its NumericValue of :func:`decimal_string`."""
    measurement = hd.sr.Measurement(value=value, **kwargs)
    for item in measurement:  # the template's one NUM content item
        if item.ValueType == "NUM":
            item.MeasuredValueSequence[0].NumericValue = DS(decimal_string(value))
    return measurement


def _measurements(values: Mapping[str, Any], algo_id: Any, where: str, unit: Any = None) -> list[Any]:
    """The measurements of one group, ``{name: value}`` (non-finite values left out), in ``unit`` (None: by name).

    Raises:
        ValueError: naming ``where`` when two names have the same meaning (their first and last characters agree
            past 64 characters): a viewer shows the meaning and could not tell them apart; a name with a backslash
            or a control character (:func:`check_measurement_name`).
    """
    out, seen = [], {}
    for key, v in values.items():
        if _number(v) is None:
            continue
        check_measurement_name(key, where)
        name = codes.SCT.Volume if key == "volume" and unit is _ML else _name(key)
        if name.meaning in seen:
            raise ValueError(f"{where}: the measurements {seen[name.meaning]!r} and {key!r} would both be shown as "
                             f"{name.meaning!r} (a DICOM code meaning holds 64 characters); shorten the names")
        seen[name.meaning] = key
        out.append(_measurement(float(v), name=name, unit=unit or measurement_unit(key), algorithm_id=algo_id))
    return out


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None: a bool is no number (``True`` would read as 1.0).

    Read by :func:`~monai_unc.io.cell_float` refusing empty and non-finite cells (a text in the number syntax of CSV:
    ``float`` also reads ``1_000``); what it refuses is no number of the SR.
    """
    try:
        return cell_float(value, missing="refuse", non_finite="refuse")
    except (TypeError, ValueError):
        return None


def _reads(parse: Any, text: str) -> bool:
    """Whether ``parse`` reads ``text`` as a number (or nan / inf).

    ``parse`` is :func:`~monai_unc.io.parse_float` (the number syntax of CSV) or Python's ``float``, which also reads
    ``1_000`` and ``١٢``: numbers CSV does not write.
    """
    try:
        parse(text)
    except ValueError:
        return False
    return True


def report_numbers(row: Mapping[str, Any], skip: Sequence[str] = ("case",)) -> dict[str, float]:
    """The finite numeric cells of a table row (``metrics.csv``), in column order.

    Args:
        row: ``{column: cell}`` (strings or numbers).
        skip: columns left out.

    Returns:
        ``{column: value}`` of the cells that are finite numbers in the number syntax of CSV
        (:func:`~monai_unc.io.parse_float`; an empty cell, ``nan`` or text is left out).

    Raises:
        ValueError: naming the column, a cell that Python's ``float`` reads but CSV does not write as a number
            (``1_000``, ``0.9_5``, digits of other scripts): a number edited by hand, which was written into the SR
            as ``float`` read it (1000, 0.95; found by the lesionsr review) and left out would vanish without a word.

    Example:
        >>> report_numbers({"case": "a", "dice": "0.5", "note": "x", "ece": "nan"})
        {'dice': 0.5}
    """
    out = {}
    for key, cell in row.items():
        if key in skip or not isinstance(key, str) or not key.strip():
            continue
        v = _number(cell)
        if v is None and isinstance(cell, str) and _reads(float, cell) and not _reads(parse_float, cell):
            raise ValueError(f"column {key.strip()!r}: the cell {cell[:80]!r} is not a number as CSV writes it (ASCII "
                             "digits, a sign, '.', an exponent; no '_' or digit grouping): write the number plainly")
        if v is not None:
            out[key.strip()] = v
    return out


def device_uid(algorithm: AlgorithmInfo, uid_root: str | None = None) -> str:
    """The Device Observer UID of the SR: one UID per algorithm (name, version, weights) under ``uid_root``.

    The observer of the report is the device that made the results (TID 1004). A new UID per report (in earlier
    versions) made every report of one model the report of another device; this UID is derived from the
    algorithm's identification (pydicom's ``generate_uid`` with it as entropy), so the reports of one model name one
    device, and another model (other weights or version) another.

    Example:
        >>> a = AlgorithmInfo(name="net", version="1.0", weights="ab" * 32)
        >>> device_uid(a, "1.2.3.") == device_uid(a, "1.2.3."), device_uid(a, "1.2.3.").startswith("1.2.3.")
        (True, True)
    """
    identity = ["monai-unc device", algorithm.name or "monai-unc", algorithm.version or "", algorithm.weights]
    return str(generate_uid(prefix=check_uid_root(uid_root), entropy_srcs=identity))


def write_measurement_report(path: str | os.PathLike, series: DicomSeries, seg: Dataset | None,
                             maps: Sequence[Dataset], *, segment_volumes: Mapping[int, Mapping[str, float]],
                             numbers: Mapping[str, float], triage: Mapping[str, Any] | None = None,
                             extra_groups: Mapping[str, Mapping[str, float]] | None = None,
                             algorithm: AlgorithmInfo | None = None, uid_root: str | None = None,
                             series_number: int = 999, study: Mapping[str, str] | None = None,
                             series_description: str | None = None,
                             other_series: Sequence[DicomSeries] = ()) -> Path:
    """Write the Comprehensive 3D SR (TID 1500) of one case.

    Args:
        path: the ``.dcm`` file to write.
        series: the source series (its slices are the evidence and the image library).
        seg: the case's DICOM SEG (headers suffice), or None.
        maps: the case's Parametric Maps (and FRACTIONAL SEG), referenced as source images of the case scores.
        segment_volumes: ``{segment number: {"volume": ml, "<other>_volume": ml, ...}}`` per SEG segment.
        numbers: ``{name: value}`` of the case (:func:`report_numbers` of its ``metrics.csv`` row, or the case
            scores).
        extra_groups: ``{tracking identifier: {name: value}}``: more measurement groups, e.g. the case's row of a
            product command's table, or None. Every measurement's unit follows its name (:func:`measurement_unit`:
            ml, mm, mm3, ``{nat}`` for a case score of an entropy map, else ``1``).
        triage: the case's triage, or None: ``decision`` (``accept`` / ``review``), ``score``, ``score_name``,
            ``reason``, ``rule_digest``, ``statement`` (the guarantee).
        algorithm: who made the predictions.
        uid_root: root of the new UIDs.
        study: the study of the case's derived objects (:func:`~monai_unc.io.dicom.objects.new_study`; None: the
            source's), so the report goes with the objects it references.
        series_number: the SeriesNumber of the SR.
        series_description: the SeriesDescription a PACS lists the series by (1 to 64 bytes of UTF-8); None:
            ``measurement report by monai-unc``.
        other_series: the series of the case's other input channels (a model of several), listed as evidence
            beside ``series`` (:func:`~monai_unc.io.dicom.objects.check_other_series`), every slice once. A
            segment's group (TID 1411) names ``series``, the series the SEG lies on, as its "Source series for
            segmentation" (that item holds one series, and TID 1411 takes it or the source images, not both): the
            slices of every series are in the evidence and in the SEG it references, not repeated per segment.

    Returns:
        ``path``.

    Raises:
        TypeError: a ``series`` that is not a :class:`~monai_unc.io.dicom.series.DicomSeries`, a ``series_number``
            that is not an integer.
        ValueError: a segment volume for a segment the SEG does not have, a triage without a decision, two
            measurement names of one group that agree in their first and last characters past 64 (a viewer would
            show the same name), a measurement name (a key of ``numbers`` or ``extra_groups``, or the triage's
            ``score_name``) with a backslash or a control character (:func:`check_measurement_name`), a triage
            ``statement`` or ``reason`` with a control character a DICOM text cannot hold (:func:`check_report_text`),
            a ``series_description`` a DICOM LO cannot hold, a ``series_number`` outside ``1 .. 2**31 - 1``.
    """
    check_series(series)
    others = check_other_series(other_series, series)
    series_number = check_series_number(series_number)
    description = check_series_description(series_description, "measurement report by monai-unc")
    algorithm = algorithm or AlgorithmInfo()
    params = [p for p in (f"weights_sha256={algorithm.weights}" if algorithm.weights else "",
                          f"method={algorithm.method}" if algorithm.method else "") if p]
    algo_id = hd.sr.AlgorithmIdentification(name=algorithm.name or "monai-unc",
                                            version=algorithm.version or "unknown", parameters=params or None)
    observer = hd.sr.ObserverContext(
        observer_type=codes.cid270.Device,
        observer_identifying_attributes=hd.sr.DeviceObserverIdentifyingAttributes(
            uid=device_uid(algorithm, uid_root), name="monai-unc", manufacturer_name="monai-unc",
            model_name=algorithm.name or "monai-unc"),
    )
    context = hd.sr.ObservationContext(observer_device_context=observer)
    groups: list[Any] = []
    inputs = input_slices(series, others)

    # found by review 64: a case of several series listed every slice of every series in every segment's group
    # (2 series x 150 slices x 10 segments: 3000 items, 10 s); TID 1411 takes one "Source series for segmentation"
    # (VM 1) or the source images, not both: the group names the series the SEG lies on, and every slice of every
    # input series is in the evidence once (CurrentRequestedProcedureEvidenceSequence), as in the SEG it references
    if seg is not None:
        numbers_of_seg = {int(s.SegmentNumber): str(s.SegmentLabel) for s in seg.SegmentSequence}
        for number, volumes in segment_volumes.items():
            if int(number) not in numbers_of_seg:
                raise ValueError(f"segment_volumes names segment {number}, the SEG has {sorted(numbers_of_seg)}")
            measurements = _measurements(volumes, algo_id, f"segment_volumes of segment {number}", _ML)
            groups.append(hd.sr.VolumetricROIMeasurementsAndQualitativeEvaluations(
                tracking_identifier=hd.sr.TrackingIdentifier(uid=new_uid(uid_root),
                                                             identifier=f"segment {number}"[:64]),
                referenced_segment=hd.sr.ReferencedSegment(sop_class_uid=str(seg.SOPClassUID),
                                                           sop_instance_uid=str(seg.SOPInstanceUID),
                                                           segment_number=int(number),
                                                           source_series=hd.sr.SourceSeriesForSegmentation(
                                                               series.series_uid)),
                measurements=measurements or None, algorithm_id=algo_id,
            ))
    sources = [hd.sr.SourceImageForMeasurementGroup(str(m.SOPClassUID), str(m.SOPInstanceUID)) for m in maps]
    case_measurements = _measurements(numbers, algo_id, "numbers")
    if case_measurements:
        groups.append(hd.sr.MeasurementsAndQualitativeEvaluations(
            tracking_identifier=hd.sr.TrackingIdentifier(uid=new_uid(uid_root), identifier="case scores"),
            measurements=case_measurements, algorithm_id=algo_id, source_images=sources or None,
        ))
    for identifier, values in (extra_groups or {}).items():
        measurements = _measurements(values, algo_id, f"extra_groups[{identifier!r}]")
        if measurements:
            groups.append(hd.sr.MeasurementsAndQualitativeEvaluations(
                tracking_identifier=hd.sr.TrackingIdentifier(uid=new_uid(uid_root), identifier=str(identifier)[:64]),
                measurements=measurements, algorithm_id=algo_id,
            ))
    if triage is not None:
        decision = triage.get("decision")
        if decision not in ("accept", "review"):
            raise ValueError(f"triage decision must be 'accept' or 'review', got {decision!r}")
        rule_params = [f"{k}={check_report_text(triage[k], f'triage {k}')}" for k in ("rule_digest", "statement",
                                                                                       "reason")
                       if isinstance(triage.get(k), str) and triage[k]]
        rule_id = hd.sr.AlgorithmIdentification(name="monai-unc referral rule", version=algorithm.version or "0",
                                                parameters=rule_params or None)
        score = _number(triage.get("score"))
        score_name = check_measurement_name(triage.get("score_name") or "triage score", "triage score_name")
        groups.append(hd.sr.MeasurementsAndQualitativeEvaluations(
            tracking_identifier=hd.sr.TrackingIdentifier(uid=new_uid(uid_root), identifier="triage"),
            qualitative_evaluations=[hd.sr.QualitativeEvaluation(
                name=Code("triage-decision", SCHEME, "Triage decision"),
                value=Code(decision, SCHEME, "accept" if decision == "accept" else "refer for review"))],
            measurements=[_measurement(score, name=_name(score_name), unit=measurement_unit(score_name),
                                       algorithm_id=rule_id)]
            if score is not None else None,
            algorithm_id=rule_id,
        ))
    report = hd.sr.MeasurementReport(observation_context=context, procedure_reported=_IMAGING,
                                     imaging_measurements=groups or None,
                                     referenced_images=None)
    evidence = [*source_images(series), *(ds for other in others for ds in other.datasets),
                *([seg] if seg is not None else []), *maps]
    src = series.datasets[0]
    sr = hd.sr.Comprehensive3DSR(
        evidence=evidence, content=report, series_instance_uid=new_uid(uid_root), series_number=series_number,
        sop_instance_uid=new_uid(uid_root), instance_number=1, manufacturer="monai-unc", is_complete=True,
        is_final=False, is_verified=False,
        specific_character_set=None,  # the source's, set by declare_character_set (highdicom refuses some)
    )
    sr.SeriesDescription = description
    return save_dataset(apply_study(declare_character_set(copy_source_markers(sr, src, inputs), src), study), path)


def segment_volume_ml(mask: np.ndarray, spacing: Sequence[float]) -> float:
    """The volume of a mask in ml: voxels times the voxel volume (mm^3) / 1000.

    Example:
        >>> segment_volume_ml(np.ones((10, 10, 10), bool), (1.0, 1.0, 2.0))
        2.0
    """
    return float(np.count_nonzero(mask)) * affine_voxel_volume(np.diag([*spacing, 1.0]), len(spacing)) / 1000.0
