"""``monai-unc dicom-export``: the outputs of ``infer`` or ``nnunet-predict`` as DICOM objects on their source series.

For every case of a prediction folder (``--layout monai-unc`` or ``nnunet``) and its source series
(``<series>/<case>/``, one folder of single-frame CT or MR slices, or of one enhanced multi-frame image, per case,
read by :func:`monai_unc.io.dicom.read_series`), it writes under ``<output>/<case>/``:

- ``seg.dcm``: the segmentation as a binary DICOM SEG (one segment per class, background excluded, or per region of
  a region-based model), with the segment descriptions of ``--segments`` (SNOMED-CT defaults) and the algorithm
  identification (model, method, weight digests from the prediction folder's records);
- ``probabilities.dcm``: the mean probabilities as a FRACTIONAL SEG (PROBABILITY; 8-bit: within 1/510), unless
  ``--no-probabilities``;
- ``<measure>.dcm``: each uncertainty map as a Parametric Map (32-bit float: the values exactly); a region-based
  model's map (one channel per region, or one file per region, ``<case>_<measure>_<region>``, named by the regions
  the prediction folder records) as one Parametric Map per region, ``<measure>_<region>.dcm``, the region
  named (from the prediction folder's record, else the segment names) in its descriptions and value mapping;
- ``sr.dcm``: the Comprehensive 3D SR (TID 1500) of the case: each segment's volume (referencing the SEG), the case's
  row of ``metrics.csv`` (``--evaluation``: case scores, Dice, QU-BraTS), the triage decision with the rule's digest
  and guarantee (``--triage``), the row of a cohort product command's table (``--<command>``, e.g. the volumes of
  the masks with a guarantee), referencing the source series, the SEG and the maps.

The NIfTI outputs must be on the series' grid (axes may be permuted or flipped: they are reoriented, never
resampled). ``<output>/dicom_export.json`` (written last) lists the objects with their UIDs and every input
channel's series they reference (``series``: channel 0's, whose grid they lie on; ``other_series``); a rerun
removes the earlier run's before its first object, so a run that fails leaves none (never one listing replaced
objects). A rerun
replaces a case's objects, and removes those of a case the earlier manifest lists that is no case of the run (unless
its folder holds a DICOM file no export wrote: a warning); nothing is written into the prediction or series folders.
The parts of one ``nnunet-predict -num_parts`` run export into one folder together (:class:`ExportPart`): the
manifest lists the cases of every part exported so far. Needs the ``dicom`` extra.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import stat
import sys
import unicodedata
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .._utils import PROB_TOL, parameter_error, reemit_warning, refusing
from ..evaluation.config import STATE_DIR
from ..evaluation.resume import CASES_DIR, file_signature
from ..evaluation.triage.rule import ReferralRule, check_recorded_decisions, check_triage_summary
from ..io import (
    INFER_RECORD,
    LAYOUTS,
    MEASURES,
    VOLUME_EXTENSIONS,
    CaseError,
    CaseFiles,
    atomic_write_json,
    case_series_folder,
    cell_float,
    changed_inputs,
    check_case_ids_fit_folder,
    check_entry_kind,
    check_not_being_written,
    check_output_folder,
    clean_partial_files,
    colliding_case_ids,
    dicom_channel_series,
    dicom_series_folders,
    file_sha256,
    input_folder,
    list_files,
    match_cases,
    nnunet_dataset_regions,
    nnunet_input_channels,
    output_lock,
    owned_folder,
    part_lock,
    read_json_or_none,
    read_label,
    read_probabilities,
    read_table,
    read_volume,
    recorded_channels,
    recorded_series,
    remove_dead_scratch,
    scratch_folder,
)
from ..io.dicom import (
    MAX_SEGMENT_NUMBER,
    AlgorithmInfo,
    DicomSeries,
    SegmentSpec,
    check_distinct_segment_names,
    check_measurement_name,
    check_report_text,
    check_series_description,
    check_text,
    check_uid_root,
    default_segment,
    new_study,
    read_segment_specs,
    read_series,
    report_numbers,
    segment_name_key,
    segment_volume_ml,
    short_text,
    to_series_grid,
    write_fractional_segmentation,
    write_measurement_report,
    write_parametric_map,
    write_segmentation,
)
from ..io.dicom.objects import NOT_IN_STRING
from ..io.provenance import check_prediction_digests, prediction_regions, read_untrusted_json
from ..io.signing import Trust
from ..keys import DEPRECATED_MEASURES
from ..monitoring.store import check_rule
from ..product import command_product, command_products
from ..regions import check_regions, label_to_regions, unclaimed_labels
from .apply import triage_trust_from_arguments
from .prepare import DICOM_FOLDER, check_dicom_input
from .session import CommandResult

__all__ = ["EXPORT_RECORD", "DicomExport", "ExportPart", "algorithm_from_records", "check_made_from", "dicom_export",
           "dicom_export_from_arguments", "nnunet_predict_dicom"]

#: the manifest of an export folder (written last)
EXPORT_RECORD = "dicom_export.json"
#: the format name and version of :data:`EXPORT_RECORD`
EXPORT_FORMAT = "monai-unc-dicom-export"
EXPORT_VERSION = 1
#: the SeriesNumbers of the derived objects: SEG, FRACTIONAL SEG, the maps from 903 on, the SR 999 (or the number
#: after the last map's, when the maps reach it)
_SEG_NUMBER, _PROBS_NUMBER, _MAP_NUMBER, _SR_NUMBER = 901, 902, 903, 999
#: the top-level fields of :data:`EXPORT_RECORD` that the parts of one run share (:class:`ExportPart`): an entry of a
#: manifest with other values is of another run, never mixed with this run's
_RUN_SETTINGS = ("format", "format_version", "layout", "uid_root", "study_uid", "run")
#: what :func:`~monai_unc.io.match_cases` says of a file that looks like one region's map and is not read
_UNREAD_REGION_MAP = "it looks like one region's uncertainty map"
#: seconds a part of a run waits for another process's short hold of the export folder (:func:`part_lock`, the
#: manifest's update) before it is refused
_PART_WAIT = 10.0


@dataclass
class DicomExport:
    """What :func:`dicom_export` wrote.

    Args:
        output: the export folder.
        cases: ``{case: {"series": {...}, "other_series": [{"channel", ...}], "objects": [{"kind", "file",
            "sop_class_uid", "sop_instance_uid", "series_instance_uid"}]}}`` as in :data:`EXPORT_RECORD`: ``series``
            the series whose grid the objects lie on (channel 0's), ``other_series`` those of the case's other input
            channels, which the objects reference too (UIDs, folder, slices and channel number; empty for one).
            The segmentation's object also lists its ``segments``: ``{"number", "class", "name", "name_from"}``,
            where ``name_from`` says where the name comes from (``segments``, ``class_names``, ``evaluation``,
            ``dataset.json``, ``regions`` or ``default``).
    """

    output: Path
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def n_objects(self) -> int:
        """The number of objects written."""
        return sum(len(c["objects"]) for c in self.cases.values())


@dataclass(frozen=True)
class ExportPart:
    """One part of a run whose parts export into one folder at the same time (``nnunet-predict -num_parts N``).

    Each part exports its own cases (disjoint), holding the folder with the other parts of its run
    (:func:`monai_unc.io.part_lock`); :data:`EXPORT_RECORD` lists the cases of every part exported so far.

    Args:
        run: what identifies the run (one line, no comma): the parts of one run give the same, and it differs
            whenever the objects would (the predictions, the input, the settings); e.g. a digest of the command's
            arguments but the part.
        part: this part's number (``-part_id``).
        cases: the cases of every part (the input's): an earlier object of a case outside them is removed as stale.
    """

    run: str
    part: int
    cases: tuple[str, ...]


def _text(value: Any) -> str:
    """A recorded text (untrusted) as a DICOM LO: stripped, shortened to its start and end past 64 characters."""
    return short_text(value.strip(), 64) if isinstance(value, str) else ""


def algorithm_from_records(predictions: str | os.PathLike, case: str, layout: str,
                           name: str | None = None) -> AlgorithmInfo:
    """Who made a case's predictions, from the records of the prediction folder (untrusted: every field checked).

    ``infer.json`` (``monai-unc infer``) or the case record (``<case>.json``, or ``uncertainty/<case>.json`` for
    nnU-Net) gives the model, the method and the sha256 digests of the weights; a field of the wrong type is ignored,
    a recorded model over 64 characters (a DICOM LO) is shortened to its start and end
    (:func:`~monai_unc.io.dicom.short_text`).

    Args:
        predictions: the prediction folder.
        case: the case id.
        layout: ``"monai-unc"`` or ``"nnunet"``.
        name: the algorithm name to use instead of the recorded model: 1 to 64 bytes of UTF-8 without a backslash or
            control characters (:func:`~monai_unc.io.dicom.check_text`), written whole.

    Returns:
        The :class:`~monai_unc.io.dicom.AlgorithmInfo` (name ``monai-unc`` when nothing is recorded).

    Raises:
        ValueError: naming ``algorithm_name`` when ``name`` is not such a text; naming the record and the field when
            a recorded weight digest or method (or model, without ``name``) holds a control character or (but the
            model, whose backslashes become ``/``) a backslash, which the objects' DICOM texts cannot hold.
    """
    if name is not None:
        name = check_text(name, "algorithm_name", 64).strip()
    pred = Path(predictions)
    sub = LAYOUTS[layout]["uncertainty_subdir"]
    settings: dict[str, Any] = {}
    for source in (pred / INFER_RECORD, pred / sub / f"{case}.json"):
        doc = read_json_or_none(source)
        if isinstance(doc, dict) and isinstance(doc.get("settings"), dict):
            settings = doc["settings"]
            break

    def checked(text: str, field: str, backslash: bool = False) -> str:
        # found by hostile review 59: a tab in a recorded digest or method was written into the SEG, the Parametric
        # Maps and the SR (dciodvfy: invalid), a backslash (the value separator) failed in highdicom naming no file
        if NOT_IN_STRING.search(text.replace("\\", "") if backslash else text):
            raise ValueError(f"{source}: field '{field}' {text[:80]!r} holds a backslash or a control character, "
                             "which the DICOM objects' texts cannot hold: predict the cases again")
        return text

    weights = settings.get("weights")
    digests = [checked(w["sha256"], f"settings.weights[{i}].sha256") for i, w in enumerate(weights)
               if isinstance(w, dict) and isinstance(w.get("sha256"), str)] if isinstance(weights, list) else []
    # a recorded model is a description that may hold a Windows path ("bundle: C:\\..."): DICOM text (LO) holds no
    # backslash, the value separator
    key = "model" if _text(settings.get("model")) else "trainer"
    model = name or (checked(_text(settings.get(key)), f"settings.{key}", True) or "monai-unc").replace("\\", "/")
    return AlgorithmInfo(name=model, weights=",".join(d[:64] for d in digests)[:1024],
                         method=checked(_text(settings.get("method")), "settings.method"))


def _segments(count: int, regions: bool, specs_file: str | os.PathLike | None,
              named_classes: bool = False, names: dict[int, str] | None = None) -> list[SegmentSpec]:
    """The segments of classes (regions) ``1..count``, and with ``named_classes`` the higher classes the file names.

    ``named_classes``: ``count`` is the largest class of a case's label map, not the model's number of classes (no
    probabilities say it): a case without the highest class (no enhancing tumour) keeps its segment, empty, where
    the file's key was refused as no class of the segmentation (found by hostile testing). ``names``: the recorded
    class names (:class:`_ClassNames`) of the classes the file does not name.
    """
    labels = list(range(1, count + 1))
    if specs_file is not None:
        return read_segment_specs(specs_file, labels, named_classes=named_classes, names=names)
    return [default_segment(v, f"region {v}" if regions else (names or {}).get(v)) for v in labels]


@dataclass(frozen=True)
class _ClassNames:
    """The class names a run knows, ``{class value: name}`` (background left out), and where they come from.

    ``source`` is how the manifest says where a segment's name comes from (``class_names``, ``evaluation``,
    ``dataset.json``); ``where`` names the option or file in messages.
    """

    names: dict[int, str]
    source: str
    where: str


def _check_class_name(name: Any, where: str) -> str:
    """A class name, checked as a segments file's name is.

    1 to 64 bytes of UTF-8, no backslash or control character (:func:`~monai_unc.io.dicom.check_text`); a
    non-string is refused too.
    """
    if not isinstance(name, str):
        raise ValueError(f"{where} must be a text, got {type(name).__name__} {name!r:.40}")
    return check_text(name, where, 64)


def _distinct_class_names(names: dict[int, str], where: str) -> dict[int, str]:
    """``names``, refused where a viewer could not tell two classes' segments apart.

    The one check of the SEG writers (:func:`~monai_unc.io.dicom.check_distinct_segment_names`), its message starting
    with ``where`` (the option or the file and its key).
    """
    check_distinct_segment_names(names.items(), where)
    return names


def _given_class_names(class_names: Sequence[str] | None) -> _ClassNames | None:
    """``dicom_export``'s ``class_names`` (background first, as ``evaluate --class-names``), checked.

    Raises:
        ValueError: naming ``class_names`` (``--class-names``): not a list of at least two texts, a name a segments
            file could not hold, two classes of one name.
    """
    if class_names is None:
        return None
    if isinstance(class_names, (str, bytes)) or not isinstance(class_names, Sequence) or len(class_names) < 2:
        raise parameter_error(ValueError(f"class_names must be one name per class, the background first (at least "
                                         f"two), got {class_names!r:.80}"), "class_names")
    with refusing("class_names"):
        names = {c: _check_class_name(n, f"class_names[{c}]") for c, n in enumerate(class_names)}
        names.pop(0)
        return _ClassNames(_distinct_class_names(names, "class_names"), "class_names", "class_names")


def _evaluation_class_names(evaluation: str | os.PathLike | None) -> _ClassNames | None:
    """The class names ``evaluate --class-names`` recorded in ``<evaluation>/summary.json`` (untrusted), or None.

    None without ``evaluation``, without a ``summary.json`` (numbers from another tool) or with ``class_names``
    null (no names given, or a region evaluation).

    A name a segments file could not hold, or two classes of one name, is warned and the names are not used
    (:func:`_unfit_recorded_names`).

    Raises:
        ValueError: one line naming the file: not strict JSON, ``class_names`` not a list of at least two names.
    """
    if evaluation is None or not (Path(evaluation) / "summary.json").is_file():
        return None
    path = Path(evaluation) / "summary.json"
    _, doc = read_untrusted_json(path, str(path))
    names = doc.get("class_names") if isinstance(doc, dict) else None
    if names is None:
        return None
    where = f"{path}: class_names"
    if not isinstance(names, list) or len(names) < 2:
        raise ValueError(f"{where} must be a list of one name per class, the background first, got {names!r:.80}")
    try:
        checked = {c: _check_class_name(n, f"{where}[{c}]") for c, n in enumerate(names) if c}  # 0: background
        return _ClassNames(_distinct_class_names(checked, where), "evaluation", str(path))
    except ValueError as error:
        return _unfit_recorded_names(error)


def _dataset_class_names(pred: Path, layout: str) -> _ClassNames | None:
    """The class names of the ``dataset.json`` nnU-Net writes beside its predictions (``labels``), or None.

    ``{"background": 0, "edema": 1, ...}``: each class value's name, the background (label 0) and nnU-Net's
    ``ignore`` label left out. None for the ``monai-unc`` layout, without the file, and for a region-based dataset
    (a label of several values: its segments are named after its regions).

    A name a segments file could not hold, or two classes of one name, is warned and the names are not used
    (:func:`_unfit_recorded_names`).

    Raises:
        ValueError: one line naming the file: not strict JSON, labels that are no integers
            (:func:`~monai_unc.io.nnunet_dataset_regions`), two names of one value.
    """
    path = pred / "dataset.json"
    if layout != "nnunet" or not path.is_file():
        return None
    _, doc = read_untrusted_json(path, str(path))
    if nnunet_dataset_regions(doc, str(path)):  # checks the labels are integers or lists of them
        return None
    names: dict[int, str] = {}
    for name, value in doc.get("labels", {}).items():
        value = int(value[0] if isinstance(value, list) else value)
        if name == "ignore" or value == 0:
            continue
        if value < 0 or value > MAX_SEGMENT_NUMBER:
            raise ValueError(f"{path}: label {name!r} is {value}, no class value (0 is the background, the classes "
                             f"1 to {MAX_SEGMENT_NUMBER})")
        if value in names:
            raise ValueError(f"{path}: labels {names[value]!r} and {name!r} are both class {value}")
        names[value] = name
    if not names:
        return None
    try:
        checked = {c: _check_class_name(n, f"{path}: label {c}: name") for c, n in sorted(names.items())}
        return _ClassNames(_distinct_class_names(checked, f"{path}: labels"), "dataset.json", str(path))
    except ValueError as error:
        return _unfit_recorded_names(error)


def _unfit_recorded_names(error: ValueError) -> None:
    """Names a run recorded (not given to this export) that no segment can carry: said, and not used (None).

    The export worked before it read recorded names, so a name it cannot write (over 64 bytes, a backslash, two
    classes of one name) names the segments ``class N`` with a warning instead of refusing the export; names given
    to the export itself (``--class-names``, ``--segments``) are refused.
    """
    warnings.warn(f"segment names: {error}; the segments are named 'class N' (name them with --class-names or "
                  "--segments)", UserWarning, stacklevel=4)
    return None


def _known_class_names(class_names: Sequence[str] | None, evaluation: str | os.PathLike | None, pred: Path,
                       layout: str) -> _ClassNames | None:
    """The class names the export names segments after: ``class_names``, else the evaluation's, else nnU-Net's.

    A source after the one taken that names a class otherwise is said (a ``UserWarning``): the two runs may not
    have been of the same model.
    """
    found = [n for n in (_given_class_names(class_names), _evaluation_class_names(evaluation),
                         _dataset_class_names(pred, layout)) if n is not None]
    if not found:
        return None
    taken = found[0]
    for other in found[1:]:
        differ = [c for c in sorted(set(taken.names) | set(other.names))
                  if segment_name_key(taken.names.get(c, "")) != segment_name_key(other.names.get(c, ""))]
        if differ:
            c = differ[0]
            shown = taken.where if taken.source != "class_names" else "class_names (--class-names)"
            warnings.warn(f"segment names: {other.where} names class {c} {other.names.get(c)!r}, {shown} "
                          f"{taken.names.get(c)!r}: the segments are named after {shown}", UserWarning, stacklevel=3)
    return taken


def _region_names(predictions: Path) -> list[str] | None:
    doc = read_json_or_none(predictions / INFER_RECORD)
    regions = doc.get("regions") if isinstance(doc, dict) else None
    if regions is None and isinstance(doc, dict) and isinstance(doc.get("settings"), dict):
        regions = doc["settings"].get("regions")
    if isinstance(regions, dict) and all(isinstance(k, str) and k.strip() for k in regions):
        return [k.strip() for k in regions]  # whole: a long name is shortened to its start and end (short_text)
    return None


def _label_map_regions(predictions: Path, layout: str) -> dict[str, list[int]] | None:
    """The region spec of a region-based nnU-Net model's predictions, whose segmentation is a label map.

    nnU-Net turns the regions of a region-based model into one label map (``regions_class_order``) beside one
    probability (and map) channel per region; its regions are recorded in ``uncertainty_config.json``
    (``nnunet-predict``) or the ``dataset.json`` nnU-Net writes beside the predictions
    (:func:`~monai_unc.io.provenance.prediction_regions`). None for class-based predictions and for the
    ``monai-unc`` layout (a region model's segmentation is its region masks there).
    """
    if layout != "nnunet":
        return None
    found = prediction_regions(predictions, layout)
    if not isinstance(found, dict) or not found:
        return None
    try:  # an untrusted record: a region of no labels, a label that is no integer
        return {k: list(v) for k, v in check_regions(found, "regions").items()}
    except (TypeError, ValueError) as e:
        raise ValueError(f"{predictions}: the recorded regions of the predictions (uncertainty_config.json or "
                         f"dataset.json): {e}") from None


def _regions_of_label_map(seg: np.ndarray, regions: dict[str, list[int]], what: str) -> np.ndarray:
    """The ``(R, *spatial)`` uint8 region masks of a region model's ``(1, *spatial)`` label map (nnU-Net's).

    Raises:
        CaseError: one line naming ``what``: values that are no labels, or a label that no region holds (it would be
            in no segment).
    """
    _check_segmentation_values(seg, False, what)
    labels = np.asarray(seg[0]).astype(np.int64)
    stray = unclaimed_labels(labels, regions) if labels.size and labels.min() >= 0 else sorted(
        {int(v) for v in np.unique(labels) if v < 0})
    if stray:
        shown = ", ".join(str(v) for v in stray[:5]) + (" ..." if len(stray) > 5 else "")
        raise CaseError(f"{what} holds the label(s) {shown}, which no region of the model holds "
                        f"({', '.join(f'{k} {v}' for k, v in regions.items())}): it would be in no segment")
    return np.asarray(label_to_regions(labels, regions)).astype(np.uint8)


def _map_regions(region_names: list[str] | None, specs: list[SegmentSpec]) -> list[str]:
    """The region names of a region map's channels: the prediction folder's record, else the segments' names.

    Distinct after :func:`_file_part` (a repeated name gets its channel number), so no map file replaces another.
    """
    names = [short_text(n) for n in region_names] if region_names and len(region_names) == len(specs) \
        else [s.name for s in specs]
    out: list[str] = []
    for r, n in enumerate(names):
        taken = {_file_part(o) for o in out}
        out.append(n if _file_part(n) not in taken else short_text(f"{n} {r + 1}"))
    return out


def _recorded_maps(pred: Path, case: str, layout: str) -> list[str] | None:
    """The measures whose maps a case's record lists (untrusted: a field of the wrong type is ignored).

    ``monai-unc infer``: ``<case>.json`` lists the files it wrote (``files``); ``nnunet-predict``:
    ``uncertainty/<case>.json`` the maps (``maps``). None when the case has no such record (stock nnU-Net, older
    folders) or it names no map.
    """
    if layout == "nnunet":
        record = read_json_or_none(pred / LAYOUTS[layout]["uncertainty_subdir"] / f"{case}.json")
        maps = record.get("maps") if isinstance(record, dict) else None
        names = set(maps) if isinstance(maps, dict) else set()
    else:
        record = read_json_or_none(pred / f"{case}.json")
        files = record.get("files") if isinstance(record, dict) else None
        written = {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()
        names = {m for m in (*MEASURES, *DEPRECATED_MEASURES) if f"{case}_{m}.nii.gz" in written}
    names = {DEPRECATED_MEASURES.get(n, n) for n in names}  # maps of older versions, read under their new names
    found = [m for m in MEASURES if m in names]
    return found or None


def _run_measures(pred: Path, layout: str) -> list[str] | None:
    """The measures of the run that made a prediction folder, from its run record.

    ``infer.json``'s ``settings.measures`` (``monai-unc``) or ``uncertainty_config.json``'s ``measures``
    (``nnunet``); None without such a record (untrusted: a field of the wrong type or an unknown name is ignored).
    """
    if layout == "nnunet":
        doc = read_json_or_none(pred / "uncertainty_config.json")
        listed = doc.get("measures") if isinstance(doc, dict) else None
    else:
        doc = read_json_or_none(pred / INFER_RECORD)
        settings = doc.get("settings") if isinstance(doc, dict) else None
        listed = settings.get("measures") if isinstance(settings, dict) else None
    if not isinstance(listed, list) or not listed or not all(isinstance(m, str) for m in listed):
        return None
    names = {DEPRECATED_MEASURES.get(m, m) for m in listed}
    return [m for m in MEASURES if m in names] if names <= set(MEASURES) else None


def _export_measures(pred: Path, layout: str, cases: Sequence[str]) -> list[str] | None:
    """The measures to export by default: those of the folder's run, which every exported case's record lists.

    A folder may hold maps that no exported case's prediction made: an earlier run's maps of other measures that
    ``nnunet-predict`` leaves beside a case it predicted again, or the outputs of a case since removed from the input.
    The run record (``infer.json``, ``uncertainty_config.json``) says which maps the run wrote, each case's record
    which maps its prediction wrote. Without a run record the cases' records must list the same measures; None when
    there is no record at all (every map found is exported).

    Raises:
        ValueError: a case whose record lacks a measure of the run, or (without a run record) cases whose records
            list different measures; naming the cases and their measures.
    """
    recorded = {c: m for c in cases if (m := _recorded_maps(pred, c, layout)) is not None}
    run = _run_measures(pred, layout)
    if run is not None:
        short = {c: m for c, m in recorded.items() if not set(run) <= set(m)}
        if short:
            case, has = next(iter(short.items()))
            record = "uncertainty_config.json" if layout == "nnunet" else INFER_RECORD
            raise ValueError(f"{len(short)} case(s) of {pred} ({', '.join(list(short)[:5])}) were predicted with "
                             f"other measures than its run ({record}: {', '.join(run)}; case {case!r}: "
                             f"{', '.join(has)}): outputs of an earlier run? give --measures to export maps that "
                             "every case has, or predict the cases again")
        return run
    if not recorded:
        return None
    kinds: dict[tuple[str, ...], list[str]] = {}
    for case, measures in recorded.items():
        kinds.setdefault(tuple(measures), []).append(case)
    if len(kinds) > 1:
        (m1, c1), (m2, c2) = sorted(kinds.items(), key=lambda kv: -len(kv[1]))[:2]
        raise ValueError(f"the cases of {pred} were predicted with different measures (e.g. case {c1[0]!r}: "
                         f"{', '.join(m1)}; case {c2[0]!r}: {', '.join(m2)}): outputs of earlier runs? give --measures "
                         "to export the same maps for every case, or predict the cases again with the same settings")
    return list(next(iter(kinds)))


def _file_part(name: str) -> str:
    """A region name as a part of a file name: letters, digits, ``-`` and ``_`` (others become ``_``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name.strip())[:64] or "region"


def _check_values(values: np.ndarray, what: str, unit_interval: bool) -> None:
    """Refuse NaN or infinite values, and with ``unit_interval`` values outside [0, 1] beyond float rounding.

    The FRACTIONAL SEG clips probabilities into [0, 1] (float noise such as ``1 + 1e-7``, within ``PROB_TOL``): a
    file of other values (a map stored as 0..255, logits) would otherwise become a SEG of ones and zeros without a
    word; a Parametric Map holds finite values only.

    Raises:
        CaseError: one line naming ``what`` (the case and its file), how many values and one of them.
    """
    values = np.asarray(values)
    bad = ~np.isfinite(values)
    if unit_interval:
        with np.errstate(invalid="ignore"):
            bad |= (values < -PROB_TOL) | (values > 1 + PROB_TOL)
    count = int(np.count_nonzero(bad))
    if count:
        kind = "NaN, infinite or outside [0, 1]" if unit_interval else "NaN or infinite"
        raise CaseError(f"{what} has {count} value(s) that are {kind} (e.g. {float(values[bad].flat[0]):.6g}); "
                        f"{'probabilities' if unit_interval else 'a Parametric Map'} cannot hold them")


def _check_segmentation_values(seg: np.ndarray, regions: bool, what: str) -> None:
    """Refuse a segmentation whose values are no class values (integers from 0 to ``MAX_SEGMENT_NUMBER``, 65535).

    NaN, infinite, fractional or above 65535 (a DICOM SegmentNumber); for region masks (one channel per region) any
    value but 0 and 1.

    A probability map or an image given as the segmentation failed with ``cannot convert float NaN to integer``, an
    ``OverflowError`` traceback (an infinite value) or ``labels must hold integer class values``, naming neither the
    case nor the file (found by hostile testing).

    Raises:
        CaseError: one line naming ``what`` (the case and its file), how many values and one of them.
    """
    seg = np.asarray(seg)
    if seg.dtype.kind == "b":
        return
    with np.errstate(invalid="ignore"):
        if regions:
            bad, kind = (seg != 0) & (seg != 1), "other than 0 and 1 (region masks)"
        elif seg.dtype.kind == "f":
            bad = ~np.isfinite(seg) | (seg != np.round(seg)) | (seg > MAX_SEGMENT_NUMBER)
            kind = f"NaN, infinite, fractional or above {MAX_SEGMENT_NUMBER}"
        else:
            bad, kind = seg > MAX_SEGMENT_NUMBER, f"above {MAX_SEGMENT_NUMBER}"
    count = int(np.count_nonzero(bad))
    if count:
        raise CaseError(f"{what} has {count} value(s) {kind} (e.g. {float(seg[bad].flat[0]):.6g}); a segmentation "
                        "holds class values (integers, 0: background)")


def _check_labels(labels: np.ndarray, count: int, what: str, probs_name: str | None) -> None:
    """Refuse a label map with a value that no segment takes (negative, or a class the probabilities lack).

    Segment ``i`` of the SEG is class ``i`` for ``i`` in ``1..count``: a voxel of another value would silently be in
    no segment (and out of the SR's volumes).
    """
    values = np.unique(labels)
    stray = values[(values < 0) | (values > count)]
    if stray.size == 0:
        return
    shown = ", ".join(str(int(v)) for v in stray[:5]) + (" ..." if stray.size > 5 else "")
    if probs_name is None:
        raise CaseError(f"{what} holds the label(s) {shown}: class values must be 0 (background) or positive")
    raise CaseError(f"{what} holds the label(s) {shown}, but the probabilities {probs_name} have {count + 1} "
                    f"channels (background and classes 1..{count}); a region-based model's probabilities (one "
                    "channel per region, e.g. nnU-Net's) do not describe a label map: for a region-based nnU-Net "
                    "model keep the dataset.json nnU-Net writes beside its predictions (its regions), or export "
                    "without the probabilities (dicom-export --no-probabilities, nnunet-predict without "
                    "--save_probabilities)")


#: the SOP classes dicom-export writes: SEG, Parametric Map, Comprehensive 3D SR
_OBJECT_CLASSES = ("1.2.840.10008.5.1.4.1.1.66.4", "1.2.840.10008.5.1.4.1.1.30", "1.2.840.10008.5.1.4.1.1.88.34")


def _foreign_object(folder: Path) -> str | None:
    """The first ``.dcm`` file of a case's folder of objects that no export wrote, described; None when there is none.

    An export's object is a SEG, Parametric Map or Comprehensive 3D SR whose Manufacturer is ``monai-unc``.
    """
    import pydicom  # the dicom extra, imported by monai_unc.io.dicom above

    for path in sorted(folder.glob("*.dcm")) if folder.is_dir() else []:
        try:  # an export writes regular files only: a FIFO (planted) is never opened, whose read blocked the export
            # forever (found by hostile testing)
            kind = path.stat().st_mode
        except OSError as e:  # a dangling link
            return f"{path} is not an object of an earlier dicom-export (not readable: {type(e).__name__})"
        if not stat.S_ISREG(kind):
            return f"{path} is not an object of an earlier dicom-export " \
                   f"({'a folder' if stat.S_ISDIR(kind) else 'not a regular file'})"
        try:
            ds = pydicom.dcmread(path, stop_before_pixels=True, specific_tags=["SOPClassUID", "Manufacturer"])
            sop, maker = str(ds.get("SOPClassUID", "") or ""), str(ds.get("Manufacturer", "") or "")
        except Exception as e:  # InvalidDicomError and others on a file that is not DICOM
            sop, maker = "", f"not readable as DICOM: {type(e).__name__}"
        if sop not in _OBJECT_CLASSES or maker != "monai-unc":
            kind = getattr(pydicom.uid.UID(sop), "name", sop) if sop else maker or "no SOP class"
            return f"{path} is not an object of an earlier dicom-export ({kind}, made by " \
                   f"{maker or 'an unnamed manufacturer'})"
    return None


def _check_earlier_objects(folder: Path, case_id: str) -> None:
    """Refuse a case's folder of objects that holds a ``.dcm`` file an earlier export did not write.

    A rerun removes the case's earlier objects (every ``*.dcm`` of ``<output>/<case>/``): a DICOM file of another
    origin there (the site's original slices, a radiologist's own SEG, in a folder given as ``--output``) was removed
    with them, without a word (found by hostile testing). An earlier object is a SEG, Parametric Map or
    Comprehensive 3D SR whose Manufacturer is ``monai-unc`` (:func:`_foreign_object`).

    Raises:
        CaseError: naming the case, the file and what it is.
    """
    foreign = _foreign_object(folder)
    if foreign is not None:
        raise CaseError(f"case {case_id}: {foreign}; a rerun removes the case's earlier objects, so --output must be "
                        "a folder of its own: move the file or give another --output")


def _read_manifest(out: Path) -> dict[str, Any]:
    """The :data:`EXPORT_RECORD` of an export folder (untrusted): its top-level fields and its case entries.

    Returns:
        The record with ``cases`` a dict of the entries that are dicts under a case id (``{}`` without a readable
        record).
    """
    doc = read_json_or_none(out / EXPORT_RECORD)
    if not isinstance(doc, dict):
        return {"cases": {}}
    cases = doc.get("cases")
    entries = {c: e for c, e in cases.items() if isinstance(e, dict)} if isinstance(cases, dict) else {}
    return {**doc, "cases": entries}


def _case_folder_name(case: Any) -> bool:
    """Whether a case id of a manifest (untrusted) names a folder right inside the export folder."""
    return (isinstance(case, str) and case not in ("", ".", "..") and not any(c in case for c in "/\\\0")
            and case.casefold() != EXPORT_RECORD.casefold())


def _stale_cases(out: Path, listed: Sequence[str], run_cases: set[str]) -> list[str]:
    """The cases an earlier manifest lists that are no case of this run (:func:`_remove_stale_cases`), sorted.

    A name of a run case's folder is kept (``Case01`` for ``case01`` on a case-folding file system, another Unicode
    normalisation on a normalising one); where it is another folder, it is stale.

    Args:
        out: the export folder.
        listed: the case ids of the earlier manifest (untrusted: a name that is no folder of ``out`` is skipped).
        run_cases: the cases of this run (of every part of it).
    """
    def fold(name: str) -> str:
        return unicodedata.normalize("NFC", name).casefold()

    alike: dict[str, list[str]] = {}
    for c in run_cases:
        alike.setdefault(fold(c), []).append(c)

    def kept(case: str) -> bool:  # a case of the run, or another name of a run case's folder (Case01 / case01 on a
        # case-folding file system, NFD / NFC on a normalising one); on a file system that tells them apart, the
        # earlier run's folder of a case renamed since is stale (found by hostile testing: it was kept, unlisted)
        if case in run_cases:
            return True
        for other in alike.get(fold(case), []):
            with contextlib.suppress(OSError):
                if os.path.samefile(out / case, out / other):
                    return True
        return False

    return sorted(c for c in listed if _case_folder_name(c) and not kept(c))


def _remove_stale_cases(out: Path, stale: Sequence[str]) -> list[str]:
    """Remove the objects of the cases an earlier manifest lists that are no case of this run, and their folders.

    A case removed from the input (or its predictions from the prediction folder) kept its folder of the earlier
    run's objects, unlisted by the new manifest: a site that sends every ``*.dcm`` of the export folder to a PACS sent
    objects of an earlier run. Only a folder that holds nothing but objects of an export loses them
    (:func:`_foreign_object`, as a rerun checks a case's folder); a folder holding another DICOM file (the site's
    own) is left as it is, with a warning. The folder is removed once empty.

    Args:
        out: the export folder.
        stale: the stale cases (:func:`_stale_cases`).

    Returns:
        The cases whose objects were removed.
    """
    removed = []
    for case in stale:
        try:
            folder = owned_folder(out, case, "--output")
        except ValueError as e:  # a link planted in the folder: nothing removed through it
            warnings.warn(f"case {case} of the earlier {EXPORT_RECORD} is no case of this run, but {e}; its objects "
                          "are left", UserWarning, stacklevel=3)
            continue
        if not folder.is_dir():
            continue
        foreign = _foreign_object(folder)
        if foreign is not None:
            warnings.warn(f"case {case} of the earlier {EXPORT_RECORD} is no case of this run, but {foreign}: its "
                          f"folder {folder} is left as it is (with the earlier objects); remove them by hand",
                          UserWarning, stacklevel=3)
            continue
        for path in folder.glob("*.dcm"):
            path.unlink(missing_ok=True)
        clean_partial_files(folder)
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty: another file of the site's stays, with its folder
        removed.append(case)
    return removed


def _run_entries(manifest: dict[str, Any], settings: dict[str, Any], drop: set[str],
                 run_cases: set[str]) -> dict[str, Any]:
    """The entries of a manifest that a part of a run keeps: those of the run's other parts, of the same settings.

    An entry of another run (another value of a field of :data:`_RUN_SETTINGS`) is dropped, as is an entry of a case
    of ``drop`` (this part's, which it writes again), of a case outside ``run_cases`` or of a stale case whose objects
    a killed run was removing (``"stale": true``: :func:`dicom_export`).
    """
    if any(manifest.get(k) != settings.get(k) for k in _RUN_SETTINGS):
        return {}
    return {c: e for c, e in manifest["cases"].items() if c not in drop and c in run_cases and not e.get("stale")}


def _write_manifest(out: Path, settings: dict[str, Any], cases: dict[str, Any]) -> None:
    """Write :data:`EXPORT_RECORD` before a run's first object: its cases in id order, atomically; none: remove it.

    A run of its own keeps no entry; a part keeps those of its run's other parts (:func:`_run_entries`).
    """
    if not cases:
        (out / EXPORT_RECORD).unlink(missing_ok=True)
        return
    atomic_write_json(out / EXPORT_RECORD, {**settings, "cases": dict(sorted(cases.items()))})


def _manifest_step(out: Path, part: ExportPart | None) -> contextlib.AbstractContextManager[Any]:
    """The hold of an export folder for a change of its manifest (read, changed, written): a part's short hold.

    A run of its own holds the folder already (:func:`monai_unc.io.output_lock`); the parts of a run, which hold it
    together (:func:`monai_unc.io.part_lock`), change the manifest one at a time, each under a short
    :func:`~monai_unc.io.output_lock` of the folder (waiting :data:`_PART_WAIT` seconds for another's).
    """
    if part is None:
        return contextlib.nullcontext()
    return output_lock(out, "monai-unc dicom-export (dicom_export.json)", wait=_PART_WAIT)


def _part_run(args: argparse.Namespace) -> str:
    """What identifies the run of an ``nnunet-predict -num_parts`` part: a digest of its arguments but the part.

    The options of one process (``-part_id``, ``-device``, ``-npp``, ``-nps``, the progress bar, ...) are left out,
    the folders resolved: the parts of one run, started alike but for ``-part_id``, give the same digest; a run with
    another model, input, output, number of parts or DICOM option another one, as is a run whose ``--segments`` file
    content, input series folders (the cases split among the parts) or model files (size and time of ``-m``'s plans,
    dataset and each fold's checkpoint) changed.
    """
    own = {"part_id", "device", "npp", "nps", "disable_progress_bar", "verbose", "not_on_device",
           "continue_prediction", "sample_batch_size", "no_share_passes"}
    doc: dict[str, Any] = {}
    for key, value in sorted(vars(args).items()):
        if key in own or key.startswith("_") or callable(value):
            continue
        if key in ("i", "o", "m", "segments", "prev_stage_predictions") and isinstance(value, str):
            value = str(Path(value).resolve())
        doc[key] = value
    # found by hostile testing: what the arguments name may change between the parts' starts, the arguments not:
    # the segments file's content, the input's series (another split of the cases: two parts exported one case into
    # one folder at once, or none did) and the model's files were taken as one run, their entries mixed in one
    # manifest
    segments = getattr(args, "segments", None)
    doc["_segments_sha256"] = file_sha256(segments) if isinstance(segments, str) and Path(segments).is_file() else None
    doc["_series"] = [p.name for p in dicom_series_folders(args.i)] if isinstance(getattr(args, "i", None), str) \
        else None
    doc["_model_files"] = _model_files(args)
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _model_files(args: argparse.Namespace) -> list[Any] | None:
    """The size and time of each file of ``-m`` that makes the predictions (plans, dataset, each fold's ``-chk``).

    Cheap (no digest of gigabytes of weights at each part's start); a model folder not given (``-d``/``-c``, found in
    ``nnUNet_results``): that folder's name.
    """
    model = getattr(args, "m", None)
    if not isinstance(model, str):
        return [os.environ.get("nnUNet_results")]
    folds = getattr(args, "f", None) or []
    names = ["plans.json", "dataset.json", *(f"fold_{f}/{getattr(args, 'chk', '')}" for f in folds)]
    files: list[Any] = []
    for name in names:
        try:
            info = os.stat(Path(model) / name)
        except OSError:
            files.append([name, None])
            continue
        files.append([name, info.st_size, info.st_mtime_ns])
    return files


def _check_predicted_from(pred: Path, src: Path, case_id: str, record: Any) -> None:
    """Refuse a case whose series folder is not the one its record (``<case>.json``) says it was predicted from.

    ``infer`` records the digest of its input (``input_digests``; of a DICOM series folder: its files' names, sizes,
    times and contents). Another series of the exam on the same grid (the T1 beside the FLAIR that was segmented, a
    series sent again with new UIDs and other pixels) passed the grid check, and the objects named it as the images
    they derive from (found by hostile testing). A case of several input channels is checked on each channel's
    series folder (``<case>_0000/``, ``<case>_0001/``, ...). A record of another kind of input (a NIfTI file: the
    series cannot be compared with it) or without digests is not checked; a copy of the series with the same content
    passes. ``record``: the case's record as read (None: none).

    Raises:
        CaseError: naming the case, the series folder and the record.
    """
    names = recorded_series(pred, case_id, record)
    if not names:
        return  # not predicted from its series folder (a NIfTI file or pair, nnU-Net's records, an older record)
    absent = [name for name in names if not (src / name).is_dir()]
    if absent:  # found by hostile testing: a missing channel series was called "not the one the case was predicted
        # from"
        raise CaseError(f"case {case_id}: no series folder {src / absent[0]}: the case was predicted from the series "
                        f"{', '.join(names)} ({pred / (case_id + '.json')}); give every one of them")
    changed = changed_inputs([src / name for name in names], record if isinstance(record, dict) else {})
    if changed:
        raise CaseError(f"case {case_id}: the series folder {src / changed[0]} is not the one the case was predicted "
                        f"from: its files differ from those {pred / (case_id + '.json')} records (another series, or "
                        "slices changed since); give the series the case was predicted from, or predict it again")


def _other_channel_folders(src: Path, case_id: str, channels: int, source: Path | None,
                           recorded: Sequence[str]) -> list[tuple[int, str]]:
    """The series folders of a case's input channels but channel 0's (``source``), which its objects reference too.

    Those its record names (``recorded``), else ``<case>_0001/`` ... of a model of ``channels``: those that are
    folders (a warning names one that is not), each with its channel number (its place in the record, or nnU-Net's
    ``_<channel>``).
    """
    names = list(recorded) or ([f"{case_id}_{c:04d}" for c in range(channels)] if channels > 1 else [])
    others = [name for name in names if source is None or name != source.name]
    absent = [name for name in others if not (src / name).is_dir()]
    if absent:
        warnings.warn(f"case {case_id}: no series folder {src / absent[0]} of input channel "
                      f"{names.index(absent[0])}: its DICOM objects reference only the channel series found",
                      UserWarning, stacklevel=2)
    return [(names.index(name), name) for name in others if name not in absent]


def _map_on_series(case_id: str, map_path: Path | tuple[Path, ...], series: DicomSeries) -> tuple[np.ndarray, str]:
    """A case's map on its series' grid, ``(C, columns, rows, slices)``, and its name in messages.

    A map written one file per region (:attr:`~monai_unc.io.CaseFiles.maps`' tuple of files, the regions' order) is
    the stack of its files, each one region's map: each is put on the series' grid and checked alone, as a map of one
    file is, so that a refusal names the file.

    Raises:
        CaseError: one line naming the case and the file: a file off the series' grid (reoriented, never resampled),
            holding a NaN or infinite value, or (one region's file) of several channels.
    """
    paths = map_path if isinstance(map_path, tuple) else (map_path,)
    channels = []
    for path in paths:
        u, u_affine = read_volume(path)
        u = to_series_grid(u, u_affine, series, f"case {case_id}: map {path.name}")
        _check_values(u, f"case {case_id!r}: map {path.name}", unit_interval=False)
        if isinstance(map_path, tuple) and u.shape[0] != 1:
            raise CaseError(f"case {case_id}: map {path.name}, one region's map (written one file per region), has "
                            f"{u.shape[0]} channels; it must have one")
        channels.append(u)
    return (channels[0] if len(channels) == 1 else np.concatenate(channels)), "+".join(p.name for p in paths)


def _series_entry(series: DicomSeries, folder: Path) -> dict[str, Any]:
    """A source series as :data:`EXPORT_RECORD` lists it: its UIDs, its folder (resolved) and its number of slices."""
    return {"series_instance_uid": series.series_uid, "study_instance_uid": str(series.datasets[0].StudyInstanceUID),
            "folder": str(folder.resolve()), "slices": series.shape[2]}


def _export_case(files: Any, series: DicomSeries, folder: Path, *, probabilities: bool, segments_file: Any,
                 uid_root: str | None, algorithm: AlgorithmInfo, region_names: list[str] | None,
                 numbers: dict[str, float] | None, triage: dict[str, Any] | None, study: dict[str, str] | None = None,
                 extra_groups: dict[str, dict[str, float]] | None = None,
                 label_regions: dict[str, list[int]] | None = None,
                 other_series: Sequence[DicomSeries] = (), series_description: str | None = None,
                 class_names: _ClassNames | None = None) -> list[dict]:
    # as evaluate reads it (review 63, hostile review): NIfTI scl_slope / scl_inter scaling read as the integers it
    # encodes; read_volume's float32 copy refused a background of -4.5e-08 as a fractional class value
    seg, seg_affine = read_label(CaseFiles(files.case_id, files.seg))
    seg = to_series_grid(np.asarray(seg, dtype=np.float32), seg_affine, series,
                         f"case {files.case_id}: segmentation {files.seg.name}")
    if label_regions is not None and seg.shape[0] == 1:  # a region-based nnU-Net model: its regions as segments
        seg = _regions_of_label_map(seg, label_regions, f"case {files.case_id}: segmentation {files.seg.name}")
    # region masks: several channels, or the one channel of a one-region model (its recorded regions)
    known = label_regions if label_regions is not None else region_names
    regions = seg.shape[0] > 1 or (known is not None and len(known) == seg.shape[0] == 1)
    _check_segmentation_values(seg, regions, f"case {files.case_id}: segmentation {files.seg.name}")
    probs = None
    if files.probs is not None and probabilities:
        p, p_affine = read_probabilities(files.probs)
        probs = to_series_grid(p, seg_affine if p_affine is None else p_affine, series,
                               f"case {files.case_id}: probabilities {files.probs.name}")
        _check_values(probs, f"case {files.case_id!r}: probabilities {files.probs.name}", unit_interval=True)
    if regions:
        count = seg.shape[0]
    elif probs is not None:
        count = probs.shape[0] - 1
    else:
        count = max(int(seg.max()), 1)
    if not regions:
        _check_labels(seg[0], count, f"case {files.case_id}: segmentation {files.seg.name}",
                      None if probs is None else files.probs.name)
    names = None
    if class_names is not None and regions and class_names.source == "class_names":
        raise parameter_error(ValueError(f"class_names does not apply to case {files.case_id}'s region masks: its "
                                         "segments are named after the regions"), "class_names")
    if class_names is not None and not regions:
        names = class_names.names
        count = _named_count(count, probs is not None, names, class_names.where, files.case_id)
    specs = _segments(count, regions, segments_file, named_classes=not regions and probs is None, names=names)
    if regions and segments_file is None and region_names and len(region_names) == count:
        specs = [default_segment(s.label, n) for s, n in zip(specs, region_names)]
    for old in folder.glob("*.dcm"):  # a rerun never mixes objects of two runs
        old.unlink()
    objects = []

    def record(kind: str, path: Path, ds: Any) -> None:
        objects.append({"kind": kind, "file": f"{files.case_id}/{path.name}", "sop_class_uid": str(ds.SOPClassUID),
                        "sop_instance_uid": str(ds.SOPInstanceUID),
                        "series_instance_uid": str(ds.SeriesInstanceUID),
                        "study_instance_uid": str(ds.StudyInstanceUID)})

    import pydicom  # the dicom extra, imported by monai_unc.io.dicom above

    try:  # a case is exported whole or not at all: a failure (a map that cannot be written) removes its objects
        path = write_segmentation(seg if regions else seg[0], series, folder / "seg.dcm", specs, algorithm,
                                  uid_root, _SEG_NUMBER, study, other_series=other_series,
                                  series_description=series_description)
        record("segmentation", path, pydicom.dcmread(path, stop_before_pixels=True))
        objects[-1]["segments"] = [{"number": i + 1, "class": s.label, "name": s.name,
                                    "name_from": _name_source(s, names, class_names, segments_file)}
                                   for i, s in enumerate(specs)]
        if probs is not None:
            # the FRACTIONAL SEG's segments name channels: class c is channel c, region r (segment r) channel r - 1
            fspecs = [SegmentSpec(s.label - 1 if regions else s.label, s.name, s.category, s.type) for s in specs]
            path = write_fractional_segmentation(np.clip(probs, 0, 1), series, folder / "probabilities.dcm",
                                                 fspecs, algorithm, uid_root, _PROBS_NUMBER, study,
                                                 other_series=other_series)
            record("probabilities", path, pydicom.dcmread(path, stop_before_pixels=True))
        number = _MAP_NUMBER
        for measure, map_path in sorted(files.maps.items()):
            u, map_name = _map_on_series(files.case_id, map_path, series)
            if u.shape[0] != 1 and not (regions and u.shape[0] == count):
                raise CaseError(f"case {files.case_id}: map {map_name} has {u.shape[0]} channels; the "
                                "Parametric Map export takes one map per case, or one per region of a region-based "
                                f"segmentation ({count if regions else 'this one is class-based'})")
            # one Parametric Map per region (the one region of a one-region model too), else one for the case
            names = _map_regions(region_names, specs) if u.shape[0] > 1 or (regions and count == 1) else [None]
            for r, region in enumerate(names):  # a region map: one Parametric Map per region channel
                name = measure if region is None else f"{measure}_{_file_part(region)}"
                path = write_parametric_map(u[r], series, folder / f"{name}.dcm", measure, algorithm, uid_root,
                                            number, study, region=region, other_series=other_series)
                record(f"map:{measure}" if region is None else f"map:{measure}:{region}", path,
                       pydicom.dcmread(path, stop_before_pixels=True))
                number += 1
        # the measurement report: segment volumes, the case's numbers, the triage decision; it references the
        # objects
        headers = {o["kind"]: pydicom.dcmread(folder / Path(o["file"]).name, stop_before_pixels=True)
                   for o in objects}
        spacing = (*series.spacing[:2], series.slice_spacing)  # a tilted series' voxels: the planes' distance
        # one mask at a time: a list of every class's mask took a byte per voxel and class at once (found by hostile
        # review 60: 27 GB for 104 classes of a 1000-slice CT)
        volumes = {i + 1: {"volume": segment_volume_ml(seg[i] > 0 if regions else seg[0] == s.label, spacing)}
                   for i, s in enumerate(specs)}
        path = write_measurement_report(
            folder / "sr.dcm", series, headers["segmentation"],
            [d for k, d in headers.items() if k != "segmentation"], segment_volumes=volumes, numbers=numbers or {},
            triage=triage, extra_groups=extra_groups, algorithm=algorithm, uid_root=uid_root,
            series_number=max(_SR_NUMBER, number), study=study,  # after the last map's (found by hostile review
            other_series=other_series)  # 59: with 97 or more maps, a map's SeriesNumber was the report's)
        record("report", path, pydicom.dcmread(path, stop_before_pixels=True))
    except BaseException:
        for o in objects:
            (folder / Path(o["file"]).name).unlink(missing_ok=True)
        raise
    return objects


def _named_count(count: int, probabilities: bool, names: dict[int, str], where: str, case: str) -> int:
    """The number of classes a case's segments describe, with its recorded class names ``names``.

    With probabilities, their classes must be those named; a label map must hold no class above the highest named,
    and gets a segment (empty) for each named class it lacks (a case without enhancing tumour).

    Raises:
        ValueError: one line naming ``where`` (``class_names``: ``--class-names``) and the case.
    """
    top = max(names)
    if probabilities and top != count:
        error = ValueError(f"{where} names {top + 1} classes (the background first), the probabilities of case "
                           f"{case} have {count + 1}: they do not name this model's classes")
        raise parameter_error(error, "class_names") if where == "class_names" else error
    if count > top:
        error = ValueError(f"{where} names classes up to {top}, the segmentation of case {case} holds class {count}: "
                           "they do not name this model's classes")
        raise parameter_error(error, "class_names") if where == "class_names" else error
    return top


def _name_source(spec: SegmentSpec, names: dict[int, str] | None, class_names: _ClassNames | None,
                 segments_file: Any) -> str:
    """Where a segment's name comes from, as the manifest says it.

    The segments file (``segments``), a source of class names (``class_names``, ``evaluation``, ``dataset.json``:
    :class:`_ClassNames`; a name the file repeats is said to be theirs), the recorded regions (``regions``) or
    ``default`` (``class <c>``, ``region <r>``).
    """
    if names is not None and class_names is not None and names.get(spec.label) == spec.name:
        return class_names.source
    if spec.name in (f"class {spec.label}", f"region {spec.label}"):
        return "default"
    return "segments" if segments_file is not None else "regions"


def _product_tables(outputs: dict[str, Any]) -> dict[str, tuple[Path, str, str]]:
    """``{command: (folder, table file, group name)}`` of the product outputs given to :func:`dicom_export`."""
    out = {}
    for command, folder in outputs.items():
        if folder is None:
            continue
        cls = command_product(command)
        if cls is None or not cls.applied_table:
            tables = [str(c.command) for c in command_products() if c.applied_table]
            raise TypeError(f"dicom_export() got an unexpected keyword argument {command!r} (the products' commands "
                            f"with a table: {tables})")
        out[command] = (Path(folder), str(cls.applied_table), cls.title.lower())
    return out


def _table_rows(folder: str | os.PathLike | None, name: str, command: str) -> dict[str, dict[str, float]]:
    """``{case: finite numeric cells}`` of ``<folder>/<name>`` (``metrics.csv``, a product command's table).

    Raises:
        FileNotFoundError: the folder has no such table.
        ValueError: a table without a ``case`` column (one saved by a spreadsheet with ``;`` as the separator),
            one :func:`~monai_unc.io.read_table` refuses, a case listed twice, or a column of numbers whose name the
            SR cannot hold (a backslash or a control character: :func:`~monai_unc.io.dicom.check_measurement_name`),
            or a cell that is no number in CSV syntax but one for Python's ``float`` (``1_000``:
            :func:`~monai_unc.io.dicom.report_numbers`), naming the table and the column (or the case).
    """
    if folder is None:
        return {}
    path = Path(folder) / name
    if not path.is_file():
        raise FileNotFoundError(f"no {name} in {folder}: is it the output folder of 'monai-unc {command}'?")
    columns, table, lines = read_table(path, return_lines=True)  # saved back from a spreadsheet: its BOM skipped
    if "case" not in columns:  # e.g. saved with ";" by a spreadsheet: no row would match a case (SRs without numbers)
        raise ValueError(f"{path}: no 'case' column in its header {columns[:5]}: is it the comma-separated {name} of "
                         f"'monai-unc {command}'?"[:400])
    rows: dict[str, dict[str, float]] = {}
    for line, r in zip(lines, table):
        cid = str(r.get("case") or "")
        if cid in rows:  # a row appended or pasted again: which one the SR should hold would be a guess (the last
            # was taken without a word; found by a review: the shift, sites and labels tables refuse it)
            raise ValueError(f"{path}: case {cid!r} is listed twice (line {line}): keep one row per case")
        try:
            rows[cid] = report_numbers(r)
        except ValueError as e:  # a number edited by hand (1_000): named with the file, line and case
            raise ValueError(f"{path}: line {line}: case {cid!r}: {e}") from None
    for column in dict.fromkeys(k for numbers in rows.values() for k in numbers):  # before any object is written
        check_measurement_name(column, str(path))
    return rows


def _triage_score_name(doc: dict[str, Any], source: str) -> str:
    """The name of the triage score the SR states: the score column of ``triage.json``'s (checked) rule.

    The SR shows each case's score under this name beside the rule's digest. The top-level ``score`` of
    ``triage.json`` repeats the rule's score column; edited alone (the rule and its digest left as they were), it
    named the score of one rule with the column of another without a word (found by the lesionsr review). It must
    be the rule's column when given.

    Args:
        doc: the parsed ``triage.json`` whose ``rule`` :func:`~monai_unc.monitoring.store.check_rule` accepted.
        source: the file, for messages.

    Returns:
        The rule's score column.

    Raises:
        ValueError: a top-level ``score`` that is not the rule's ``score`` column.
    """
    score = doc["rule"]["score"]
    column = score.get("column") if isinstance(score, dict) else score
    if "score" in doc and doc["score"] != column:
        raise ValueError(f"{source}: field 'score' is {doc['score']!r:.80} but the rule's field 'rule.score' is "
                         f"{column!r:.80}: the SR would name the score of one rule after another; triage the cases "
                         "again with the rule file")
    return str(column)


def _triage_entries(triage: str | os.PathLike | None, trust: Trust | None = None) -> dict[str, dict[str, Any]]:
    """The per-case triage of ``triage.json`` (untrusted: every field checked) with the rule's digest and guarantee.

    The SR states each decision beside the rule's digest as the rule's: a decision edited by hand (``review`` ->
    ``accept`` above the threshold) or a score changed was written as if the rule had made it (found by the triagesr
    review). The rule of ``triage.json`` (checked against its digest, then read as a referral rule, its certificate
    recomputed) derives each case's decision again from the recorded score and image z-score
    (:func:`~monai_unc.evaluation.triage.rule.check_recorded_decisions`); the score, decision and code that
    ``triage`` writes twice, in ``triage.json`` and ``triage.csv``, must agree. Each difference is refused in one line
    naming the case. With ``trust`` the file must be signed by one of its trusted keys
    (:func:`~monai_unc.evaluation.triage.rule.check_triage_summary`), checked before any other field.
    """
    if triage is None:
        return {}
    path = Path(triage) / "triage.json"
    if not path.is_file():
        raise ValueError(f"{path}: not the triage.json of 'monai-unc triage' (no such file)")
    # strict JSON as the monitoring store reads it: Python's json took NaN, Infinity and 1e400 as scores (a case
    # whose SR then held no score) and a key given twice as its last value ("review", then "accept"; found by the
    # lesionsr review)
    _, doc = read_untrusted_json(path, str(path))
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise ValueError(f"{path}: not the triage.json of 'monai-unc triage' (no list of cases)")
    if trust is not None:  # a signature required: before anything else of the file is taken
        check_triage_summary(doc, str(path), trust, warn=True)
    # the SR states the rule's digest as the rule the decisions were made with: a rule edited in triage.json with its
    # old digest kept (or no rule) would be reported as the genuine one (found by the sr review), as the store refuses
    digest = check_rule(doc.get("rule"), str(path))
    # the rule the decisions are derived again from: every field checked, its certificate recomputed
    rule = ReferralRule.from_json(doc["rule"], f"{path}: rule")
    risk = doc.get("accepted_risk") if isinstance(doc.get("accepted_risk"), dict) else {}
    statement = risk.get("statement") if isinstance(risk.get("statement"), str) else ""
    shared = {"rule_digest": digest,
              "statement": check_report_text(statement, f"{path}: field 'accepted_risk.statement'"),
              "score_name": _triage_score_name(doc, str(path))}
    check_measurement_name(shared["score_name"], f"{path}: score")  # the SR's name of the score
    out: dict[str, dict[str, Any]] = {}
    for entry in doc["cases"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("case"), str):
            raise ValueError(f"{path}: a case entry without a case id")
        if entry["case"] in out:  # an entry pasted again: which decision the SR should state would be a guess (the
            # last was taken without a word, an 'accept' could hide a 'review'; found by the sr review)
            raise ValueError(f"{path}: case {entry['case']!r} is listed twice: keep one entry per case")
        if entry.get("decision") not in ("accept", "review"):
            raise ValueError(f"{path}: case {entry['case']!r} has the decision {entry.get('decision')!r}, not "
                             "'accept' or 'review'")
        score = entry.get("score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            # true would be the score 1.0, "0.25" a number triage never writes (it writes null for no score)
            raise ValueError(f"{path}: case {entry['case']!r} has the score {score!r:.80}, not a number or null")
        if entry["decision"] == "accept" and score is None:
            # a rule refers every case without a score (ReferralRule.apply): an accept without one is an edit the SR
            # would state as the rule's decision beside its digest (found by the lesionsr review)
            raise ValueError(f"{path}: case {entry['case']!r} is accepted without a score: a referral rule refers "
                             "every case whose score is undefined; triage the cases again")
        reason = entry.get("reason") if isinstance(entry.get("reason"), str) else ""
        # the SR's TEXT item: a tab (an edit) made an SR that dciodvfy reports invalid
        check_report_text(reason, f"{path}: case {entry['case']!r}: field 'reason'")
        out[entry["case"]] = {**shared, "decision": entry["decision"], "score": entry.get("score"), "reason": reason}
    # a decision the rule could not have made for the recorded score (and image z-score) is refused
    check_recorded_decisions(doc["cases"], rule, str(path))
    # its digest and signature: any other edit; warned about when who wrote it is not checked (no digest, an untrusted
    # key: review 61, the line was discarded). dicom_export.json has no field for it
    if trust is None:
        check_triage_summary(doc, str(path), warn=True)
    # triage writes each case's score, decision and code twice: triage.csv must say what triage.json says
    table = Path(triage) / "triage.csv"
    if not table.is_file():
        raise ValueError(f"{table}: no such file: the triage folder of 'monai-unc triage' holds triage.csv beside "
                         "triage.json (the scores and decisions are compared); triage the cases again")
    columns, rows, lines = read_table(table, return_lines=True)
    if not {"case", "score", "decision"} <= set(columns):
        raise ValueError(f"{table}: not the triage.csv of 'monai-unc triage' (its header {columns[:5]} lacks 'case', "
                         "'score' or 'decision')"[:400])
    entries = {e["case"]: e for e in doc["cases"]}
    seen: set[str] = set()
    for line, r in zip(lines, rows):
        cid = str(r.get("case") or "")
        if cid in seen or cid not in entries:
            why = "is listed twice" if cid in seen else "is not in triage.json"
            raise ValueError(f"{table}: line {line}: case {cid!r:.80} {why}: triage.csv and triage.json are not one "
                             "triage's; triage the cases again"[:400])
        seen.add(cid)
        entry = entries[cid]
        recorded = math.nan if entry.get("score") is None else float(entry["score"])
        score = cell_float(r.get("score"), f"{table}: line {line}: case {cid!r:.80}: field 'score'")
        differ = []
        if score != recorded and not (math.isnan(score) and math.isnan(recorded)):  # full precision in both files
            differ.append(f"the score {score!r} (triage.json: {recorded!r})")
        if r.get("decision") != entry["decision"]:
            differ.append(f"the decision {r.get('decision')!r:.20} (triage.json: {entry['decision']!r})")
        if "code" in columns and entry.get("code") is not None and r.get("code") != entry["code"]:
            differ.append(f"the code {r.get('code')!r:.40} (triage.json: {entry['code']!r:.40})")
        if differ:
            raise ValueError(f"{table}: line {line}: case {cid!r:.80} has {' and '.join(differ)}: one of the two "
                             "files was edited after triage wrote them; triage the cases again"[:400])
    missing = sorted(set(entries) - seen)
    if missing:
        raise ValueError(f"{table}: case(s) {missing[:5]} of triage.json are not in triage.csv: they are not one "
                         "triage's; triage the cases again"[:400])
    return out


def check_made_from(folder: str | os.PathLike, option: str, segs: dict[str, Path]) -> None:
    """Refuse an output folder of ``evaluate`` / ``triage`` / a product's command made from other predictions.

    Each case's resume record (``state/cases/<case>.json``) holds the signature of the segmentation it was computed
    from (resolved path, size, modification and change times, inode): it must be that of the segmentation exported,
    else the folder's numbers describe other predictions (another folder with the same case ids, or predictions
    made again since). A folder without such records (written with ``resume=False``, or by another tool) cannot be
    checked: a ``UserWarning`` says so.

    Args:
        folder: the folder given to the option.
        option: the option, for messages (e.g. ``"--triage"``).
        segs: ``{case: segmentation file}`` of the cases exported.

    Raises:
        ValueError: a case's record names another segmentation (one line naming ``option``, the folder and the case).
    """
    # where evaluate, triage and a product's command keep each case's resume record, whose fingerprint.inputs.seg
    # is the signature (file_signature) of the segmentation the case was computed from
    records = Path(folder) / STATE_DIR / CASES_DIR
    unchecked = []
    for case, seg in sorted(segs.items()):
        doc = read_json_or_none(records / f"{case}.json")
        fp = doc.get("fingerprint") if isinstance(doc, dict) else None
        inputs = fp.get("inputs") if isinstance(fp, dict) else None
        recorded = inputs.get("seg") if isinstance(inputs, dict) else None
        if not isinstance(recorded, list) or not recorded:
            unchecked.append(case)
            continue
        if recorded != file_signature(seg):
            made = recorded[0] if isinstance(recorded[0], str) else "unknown"
            how = "another segmentation" if made != str(seg.resolve()) else "this segmentation before it was rewritten"
            raise ValueError(f"{option} {folder} was made from other predictions: case {case!r} was computed from "
                             f"{how} ({made}); give the folder made from {seg.parent}")
    if unchecked:
        warnings.warn(f"{option} {folder} records no inputs for {len(unchecked)} case(s) (e.g. "
                      f"{', '.join(unchecked[:3])}; no state/cases/<case>.json): not checked that its numbers were "
                      "made from these predictions", UserWarning, stacklevel=3)


def _check_not_being_written(*folders: str | os.PathLike | None) -> None:
    """Refuse an input folder that another run holds (:func:`monai_unc.io.output_lock_holder`): still being written.

    The export reads a case's segmentation, probabilities, maps and table rows one after the other: from a folder
    that ``infer`` (or ``evaluate``, ``triage``) is writing, they could be of two runs.
    """
    for folder in folders:
        if folder is not None:
            check_not_being_written(folder, then=", then export")


def dicom_export(predictions: str | os.PathLike, series: str | os.PathLike, output: str | os.PathLike, *,
                 layout: str = "monai-unc", measures: Sequence[str] | None = None, probabilities: bool = True,
                 segments: str | os.PathLike | None = None, uid_root: str | None = None,
                 algorithm_name: str | None = None, evaluation: str | os.PathLike | None = None,
                 triage: str | os.PathLike | None = None, progress: bool = True,
                 inside_predictions: bool = False, study_uid: str = "source",
                 cases: Sequence[str] | None = None, part: ExportPart | None = None, trust: Trust | None = None,
                 series_description: str | None = None, class_names: Sequence[str] | None = None,
                 **product_outputs: str | os.PathLike | None) -> DicomExport:
    """Write the DICOM objects of every case of a prediction folder on its source series.

    Args:
        predictions: the output folder of ``monai-unc infer`` or ``nnunet-predict``.
        series: a folder holding one series folder per case, named by case id (for a model of several input
            channels, one per channel, and the case's series is channel 0's ``<case>_0000``: the ``nnunet``
            predictions of such a model, whose ``dataset.json`` beside them says so, and the cases ``infer``
            predicted from one series per channel, whose records say so).
        output: the export folder (``<case>/*.dcm`` and :data:`EXPORT_RECORD`); not inside an input folder.
        layout: ``"monai-unc"`` or ``"nnunet"``.
        measures: the maps to export (default: those of the folder's run, ``infer.json`` or nnU-Net's
            ``uncertainty_config.json``, refusing an exported case whose record (``<case>.json``,
            ``uncertainty/<case>.json``) lacks one; without a run record those the cases' records list, the same for
            every case; maps that no record lists, e.g. an earlier run's, are not exported; without any record every
            measure found); an empty list: no map. A region-based model's map may be one file per region
            (``<case>_<measure>_<region>``, the regions the folder records: ``infer.json``, or the ``dataset.json`` /
            ``uncertainty_config.json`` beside nnU-Net's predictions), each file checked as a map of its own.
        probabilities: write the FRACTIONAL SEG of the probabilities when the folder has them.
        segments: a JSON file of segment descriptions (:func:`monai_unc.io.dicom.read_segment_specs`); its names
            come before the class names below.
        uid_root: the root of the new UIDs (:func:`monai_unc.io.dicom.check_uid_root`).
        algorithm_name: the algorithm name (default: the model recorded in the prediction folder): 1 to 64
            bytes of UTF-8 without a backslash or control characters, written whole (AlgorithmName,
            ManufacturerModelName: DICOM LO).
        evaluation: the output folder of ``monai-unc evaluate``: the case's row of ``metrics.csv`` goes into the SR.
        triage: the output folder of ``monai-unc triage``: the case's decision, score, the rule's digest and
            guarantee (``triage.json``) go into the SR.
        progress: show a progress bar.
        inside_predictions: allow ``output`` to be a sub-folder of ``predictions`` (``infer --output-format
            both`` writes ``<output>/dicom``; the prediction files are read from the folder itself, never from
            its sub-folders).
        study_uid: ``"source"``: the objects join the study of their source series (the IHE AI Results model: a
            PACS shows them with their images); ``"new"``: each case's objects form a new study
            (:func:`monai_unc.io.dicom.new_study`).
        cases: export only these case ids of the prediction folder (``infer --output-format both``: the cases of the
            run, so that the outputs of a case since removed from the input are neither exported nor listed in
            :data:`EXPORT_RECORD`); default every case of the folder. The folders of objects of the cases that the
            earlier :data:`EXPORT_RECORD` lists and that are no case of this run (nor of any part of ``part``'s run)
            are removed before the first object, when they hold nothing but an export's objects (else left, with a
            warning); meanwhile :data:`EXPORT_RECORD` lists them with ``"stale": true`` and no objects, so that a run
            killed then leaves no entry of a removed object and its next run removes what is left.
        part: this export is one part of a run whose parts export into ``output`` at the same time (``cases``: this
            part's): the folder is held with the run's other parts (:func:`monai_unc.io.part_lock`) instead of alone,
            :data:`EXPORT_RECORD` loses this part's cases before the first object and gets them after the last one
            (each a short hold of the folder), keeping the entries of the run's other parts; the entries of another
            run (another value of its top-level ``format_version``, ``layout``, ``uid_root``, ``study_uid`` or
            ``run``) are dropped, their objects left to the part of their case (or removed when their case is no
            case of the run). Default: the export is a run of its own, holding the folder alone
            (:func:`monai_unc.io.output_lock`).
        trust: require ``triage``'s ``triage.json`` to be signed by one of these trusted keys (``--trusted-keys``;
            :func:`~monai_unc.evaluation.triage.rule.check_triage_summary`), checked before any object is written;
            None: accepted unsigned, or signed by a key not trusted here with the warning below.
        series_description: the SeriesDescription of every case's segmentation (``seg.dcm``), the series a PACS lists
            it by: 1 to 64 bytes of UTF-8 without a backslash or control characters, checked before any object is
            written; None: ``segmentation by monai-unc: <segment names>`` (cut to 64 bytes). The probabilities, maps
            and report keep their own descriptions.
        class_names: one name per class, the background first (as ``evaluate --class-names``): the names of the
            segments that ``segments`` does not name, each 1 to 64 bytes of UTF-8 without a backslash or control
            characters (a segments file's rule), distinct. Default: the names ``evaluate --class-names`` recorded
            in ``evaluation``'s ``summary.json``, else (``layout="nnunet"``) the ``labels`` of the ``dataset.json``
            nnU-Net writes beside its predictions (a label-based dataset; the background and ``ignore`` left out),
            else ``class <c>``. With probabilities their classes must be those named; a label map gets a segment
            (empty) for each named class it lacks. The manifest says where each segment's name comes from
            (``segments`` of the segmentation object: ``name_from``). Not for region-based predictions, whose
            segments are named after the regions.
        **product_outputs: ``<command>=FOLDER``: the output folder of a cohort product's command
            (:attr:`monai_unc.product.CohortProduct.command`, e.g. the masks with a guarantee): the case's row of
            its table (:attr:`~monai_unc.product.CohortProduct.applied_table`) goes into the SR as a measurement group
            named after the product.

    Returns:
        The :class:`DicomExport`.

    Raises:
        ValueError: a bad ``uid_root`` or ``algorithm_name``, a column of ``metrics.csv`` (or of a product's
            table) or a triage score name with a backslash or a control character (the SR's code value and
            meaning), a ``triage`` whose ``triage.json`` lacks a case exported, an output inside an input folder, a
            segments file with bad fields, cases
            predicted with other measures than the folder's run or than each other (without ``measures``), a case
            without its series folder, a case of ``cases`` without outputs, a series refused by the reader, outputs
            off the series' grid, or case ids that the output folder's file system takes as one name (``Case01`` /
            ``case01`` on macOS, Windows or an SMB share: :func:`~monai_unc.io.check_case_ids_fit_folder`), another
            run's hold of the output folder (one export at a time: :func:`monai_unc.io.output_lock`) or of a folder
            it reads (the predictions, ``evaluation``, ``triage``: still being written), a ``part`` without
            ``cases`` or whose ``cases`` lack one of ``cases`` (naming ``part``), or another run's hold of the output
            folder while the parts of ``part``'s run hold it (:func:`monai_unc.io.part_lock`); with ``trust``, a
            ``triage``'s ``triage.json`` that is not signed by a trusted key (one line naming the file); bad
            ``class_names`` (or recorded names: one line naming the file), names of another number of classes than
            a case's probabilities or fewer than its label map's, ``class_names`` for region-based predictions.
        FileNotFoundError: a missing folder.

    Warns:
        UserWarning: naming ``triage``'s ``triage.json``, when who wrote it is not checked: it has no digest, or is
            signed by a key that is not trusted here (:func:`~monai_unc.evaluation.triage.rule.check_triage_summary`);
            naming a file that looks like one region's map (``<case>_<measure>_<region>``) of a region that the
            prediction folder does not record: not exported.
    """
    pred, src = Path(predictions), Path(series)
    if trust is not None and not isinstance(trust, Trust):
        raise TypeError(f"trust must be a Trust (monai_unc.io.signing.Trust) or None, got {trust!r:.80}")
    if trust is not None and triage is None:
        raise ValueError("trust checks the signature of triage's triage.json: give triage, or leave trust out")
    if part is not None:  # a part exports its own cases, some of those of every part
        outside = ["(every case: no cases given)"] if cases is None \
            else sorted({str(c) for c in cases} - set(part.cases))
        if outside:
            raise parameter_error(ValueError(f"part must list the cases exported among the cases of every part "
                                             f"(part.cases), which lack {', '.join(outside[:5])}"), "part")
    # each refusal names its parameter, which the command line writes as the option (monai_unc._utils.parameter_error)
    with refusing("uid_root"):
        check_uid_root(uid_root)
    with refusing("study_uid"):
        new_study(study_uid)  # checks the mode before any work
    if series_description is not None:  # before any work, not at the first case's segmentation
        with refusing("series_description"):
            check_series_description(series_description, "")
    if algorithm_name is not None:
        with refusing("algorithm_name"):
            check_text(algorithm_name, "algorithm_name", 64)
    if layout not in LAYOUTS:
        raise parameter_error(ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {layout!r}"), "layout")
    for parameter, folder in (("predictions", pred), ("series", src)):
        input_folder(folder, parameter)  # found by hostile testing: a missing one was "labels folder not found"
    if inside_predictions and Path(output).resolve().parent != pred.resolve():
        raise ValueError(f"output {output} must be a sub-folder of the predictions {pred}")
    tables = _product_tables(product_outputs)
    # the folders whose tables go into the SR, checked as every input folder (review 63: a missing --evaluation,
    # --triage or product command folder said "no metrics.csv in x: is it the output folder of 'monai-unc
    # evaluate'?", naming no option, where docs/cli.md promises the option and `input_folder`'s "folder not found")
    for parameter, folder in (("evaluation", evaluation), ("triage", triage),
                              *((command.replace("-", "_"), f) for command, (f, _, _) in tables.items())):
        if folder is not None:
            input_folder(folder, parameter)
    with refusing("output"):
        out = check_output_folder(output, None if inside_predictions else pred, src, evaluation, triage,
                                  *(folder for folder, _, _ in tables.values()))
    rows, decisions = _table_rows(evaluation, "metrics.csv", "evaluate"), _triage_entries(triage, trust)
    extra = {title: _table_rows(folder, table, command) for command, (folder, table, title) in tables.items()}
    seg_suffix = LAYOUTS[layout]["seg_suffix"]
    no_case = cases is not None and not list(cases)  # a part of a run with more parts than cases
    if measures is None and pred.is_dir() and not no_case:  # the maps the cases' predictions wrote, not whatever the
        # folder holds
        listed = list_files(pred, seg_suffix, VOLUME_EXTENSIONS)
        measures = _export_measures(pred, layout, sorted(listed) if cases is None else [str(c) for c in cases])
    # the regions of a region-based model (nnU-Net's recorded spec, or infer.json's names): the names of its maps
    # written one file per region (<case>_<measure>_<region>), which are read as the map's channels
    label_regions = _label_map_regions(pred, layout)
    region_names = list(label_regions) if label_regions else _region_names(pred)
    # the segments' names: --class-names, else those the evaluation or nnU-Net's dataset.json records (untrusted:
    # checked as a segments file's names), before any object
    known = _known_class_names(class_names, evaluation, pred, layout)
    if known is not None and known.source == "class_names" and region_names:
        raise parameter_error(ValueError(f"class_names does not apply to the region-based predictions in {pred}: "
                                         "their segments are named after the regions "
                                         f"({', '.join(region_names)[:200]})"), "class_names")
    try:
        with warnings.catch_warnings(record=True) as caught:  # recorded: the unread region maps said in its words
            warnings.simplefilter("always", UserWarning)
            # found by hostile testing: the error of a case without a map suggested --allow-missing, which
            # dicom-export does not have
            # found by hostile testing: a part of no case (-num_parts above the number of cases), whose nnU-Net
            # prediction writes nothing, failed with "no segmentation found"; it only updates the manifest
            found = [] if no_case else match_cases(
                pred, pred, layout=layout, label_suffix=seg_suffix, measures=measures, allow_missing=cases is not None,
                # the cases left out are those of other runs (``cases``), checked below: not said (in earlier versions
                # every UserWarning of the matching was dropped for it, whatever it said)
                say_missing=False,
                missing_hint="every case exported needs each map: name with --measures maps that every case has, or "
                             "export such cases apart", regions=region_names)
    except CaseError as e:
        if "no label volume" in str(e):
            raise CaseError(f"no segmentation found in {pred}: is it the output folder of 'monai-unc infer' "
                            "(--layout monai-unc) or 'nnunet-predict' (--layout nnunet)?") from None
        raise
    for w in caught:  # found by review 62: per-region map files of regions no record names were left out silently
        if issubclass(w.category, UserWarning) and _UNREAD_REGION_MAP in str(w.message):
            where = str(w.message).split(" is not read:")[0]
            warnings.warn(f"{where} is not exported: it looks like one region's uncertainty map, written one file per "
                          "region (<case>_<measure>_<region>), but the prediction folder records no region of that "
                          "name (infer.json's regions; the dataset.json or uncertainty_config.json beside nnU-Net's "
                          "predictions): the cases are exported without these maps", UserWarning, stacklevel=2)
        else:
            reemit_warning(w)
    if cases is not None:  # the run's cases only: a removed input's outputs are left alone, not exported
        wanted = {str(c) for c in cases}
        absent = sorted(wanted - {c.case_id for c in found})
        if absent:
            maps = f" and the maps of {', '.join(measures)}" if measures else ""
            raise CaseError(f"no outputs (segmentation{maps}) in {pred} for {len(absent)} case(s) "
                            f"({', '.join(absent[:5])})")
        found = [c for c in found if c.case_id in wanted]
    clash = [c.case_id for c in found if c.case_id.casefold() == EXPORT_RECORD.casefold()]
    if clash:  # <output>/<case>/ would be the export's own record (found by hostile testing: reserved names)
        raise CaseError(f"case {clash[0]!r}: its folder of objects would be the export's own {EXPORT_RECORD} in "
                        f"{out}; rename the case")
    # found by review 63: evaluate and triage refused a map or segmentation replaced since infer /
    # nnunet-predict wrote it (the digests its record keeps), the export wrote it into the PACS as the model's output
    check_prediction_digests(pred, layout, [c.case_id for c in found])
    # one export at a time per output folder (found by hostile testing: two exports at once into one folder left a
    # manifest listing objects the other run had replaced, objects of two settings, and a failed run); the predictions
    # and tables it reads must not be another run's still being written
    _check_not_being_written(pred, evaluation, triage, *(folder for folder, _, _ in tables.values()))
    # a run of its own holds the folder alone; a part of a run holds it with the run's other parts, which export
    # other cases (what the folder holds is checked under it)
    held = output_lock(out, "monai-unc dicom-export") if part is None else \
        part_lock(out, part.run, part.part, "monai-unc dicom-export", wait=_PART_WAIT)
    with held:
        for c in found:  # before any object: a case's folder is cleaned of its *.dcm, so it must be the output's own
            _check_earlier_objects(owned_folder(out, c.case_id, "--output"), c.case_id)
        ids = [c.case_id for c in found]
        # a part's cases with those of the other parts, which write their folders at the same time
        named = ids if part is None else sorted(set(ids) | set(part.cases))
        if colliding_case_ids(named):  # Case01 / case01: one <output>/<case>/ on a case-folding share, whose second
            # case removed the first one's objects (found by a review: the commands of run_cases refused them, this one
            # not)
            made = not out.exists()
            out.mkdir(parents=True, exist_ok=True)  # the probe's folder, which the export makes anyway
            try:
                check_case_ids_fit_folder(named, out)
            except ValueError:
                if made:  # a refused run leaves no folder behind
                    with contextlib.suppress(OSError):
                        out.rmdir()
                raise
        # a case's series: <case>/, or channel 0's <case>_0000/ for a model of several input channels: an nnU-Net
        # model (its dataset.json beside the predictions says how many), or a network infer predicted from one series
        # or channel file per channel (the case's record says so)
        model_channels = nnunet_input_channels(read_json_or_none(pred / "dataset.json")) if layout == "nnunet" else 1
        # each case's record (infer's <case>.json), read once: its inputs, its series and their digests
        records = {c.case_id: read_json_or_none(pred / f"{c.case_id}.json") for c in found} \
            if layout == "monai-unc" else {}
        channels = {c.case_id: model_channels if layout == "nnunet"
                    else max(1, recorded_channels(pred, c.case_id, records[c.case_id])) for c in found}
        sources = {c.case_id: case_series_folder(src, c.case_id, channels[c.case_id]) for c in found}
        for cid, folder in sources.items():
            # a case infer predicted from NIfTI channel files (not from series): <case>/ as before when there is no
            # <case>_0000/ (found by review: a layout earlier versions exported was refused)
            if (folder is None and layout == "monai-unc" and channels[cid] > 1
                    and not recorded_series(pred, cid, records[cid]) and (src / cid).is_dir()):
                sources[cid] = src / cid
        missing = [c for c, folder in sources.items() if folder is None]
        if missing:
            count = channels[missing[0]]
            where = "<case>" if count == 1 else f"<case>_0000 (channel 0 of the model's {count})"
            raise CaseError(f"no source series for {len(missing)} case(s) ({', '.join(missing[:5])}): expected the "
                            f"folder {src}/{where} for each case")
        if layout == "monai-unc":  # before any object: the objects must name the images the case was predicted from
            for c in found:
                _check_predicted_from(pred, src, c.case_id, records[c.case_id])
        # infer's record names the channel series (none: predicted from NIfTI files); nnU-Net's: <case>_0001/ ...
        channel_folders = {c.case_id: _other_channel_folders(
            src, c.case_id, channels[c.case_id] if layout == "nnunet" else 1, sources[c.case_id],
            recorded_series(pred, c.case_id, records[c.case_id]) if layout == "monai-unc" else []) for c in found}
        segs = {c.case_id: Path(c.seg if c.seg is not None else c.label) for c in found}
        untriaged = sorted(set(segs) - set(decisions)) if triage is not None else []
        if untriaged:  # found by hostile review 59: their SRs were written without a decision, exit 0, no word
            raise ValueError(f"--triage {triage}: triage.json has no decision for {len(untriaged)} case(s) exported "
                             f"({', '.join(untriaged[:5])}{' ...' if len(untriaged) > 5 else ''}): triage the "
                             "predictions exported again, or export those cases without --triage")
        given = [("--evaluation", evaluation, rows), ("--triage", triage, decisions),
                 *((f"--{command}", folder, extra[title]) for command, (folder, _, title) in tables.items())]
        for option, folder, numbers in given:  # before any object: the numbers must be those of these predictions
            if folder is not None:
                check_made_from(folder, option, {c: p for c, p in segs.items() if c in numbers})
                lacking = sorted(set(segs) - set(numbers))
                if lacking:  # a case without a label has no row: said, not refused (found by hostile review 59: its
                    # SR was written without these numbers without a word)
                    warnings.warn(f"{option} {folder}: no row for {len(lacking)} case(s) exported "
                                  f"({', '.join(lacking[:5])}{' ...' if len(lacking) > 5 else ''}): their SRs hold "
                                  "none of its numbers", UserWarning, stacklevel=2)
        algorithms = {c.case_id: algorithm_from_records(pred, c.case_id, layout, algorithm_name) for c in found}
        result = DicomExport(out)
        settings: dict[str, Any] = {"format": EXPORT_FORMAT, "format_version": EXPORT_VERSION,
                                    "predictions": str(pred.resolve()), "layout": layout, "uid_root": uid_root,
                                    "study_uid": study_uid, **({} if part is None else {"run": part.run})}
        run_cases = set(ids) if part is None else set(part.cases)
        with _manifest_step(out, part):
            earlier = _read_manifest(out)
            # the manifest of an earlier run (or this part's entries) goes before this run's first object: a rerun
            # that fails leaves no manifest listing objects it replaced or removed (the new one is written,
            # atomically, after the last case); a part keeps the entries of its run's other parts
            kept = {} if part is None else _run_entries(earlier, settings, set(ids), run_cases)
            # the objects of a case no longer in the run (removed from the input or the predictions), which the new
            # manifest does not list: after every check (a refused run removes nothing). Found by hostile testing: a
            # run killed (or failing on a file) while it removed them left the earlier manifest listing objects that
            # no longer existed; the manifest lists them meanwhile without objects (``"stale": true``), so that a
            # killed run's next one still removes what is left of them
            stale = _stale_cases(out, list(earlier["cases"]), run_cases)
            if stale:
                _write_manifest(out, settings, {**kept, **{c: {"stale": True, "objects": []} for c in stale}})
            _remove_stale_cases(out, stale)
            _write_manifest(out, settings, kept)
        for files in tqdm(found, desc="dicom-export", unit="case", disable=not progress):
            source = sources[files.case_id]
            assert source is not None
            case_series = read_series(source, pixels=False)  # the geometry, not the pixels
            folder = owned_folder(out, files.case_id, "--output")
            folder.mkdir(parents=True, exist_ok=True)
            clean_partial_files(folder)
            algorithm = algorithms[files.case_id]
            # one study per case for all its objects (None: the source's), dated as the source study (review 61)
            study = new_study(study_uid, uid_root, source=case_series.datasets[0])
            # the series of the case's other input channels, which the objects reference too (found by review 61:
            # only channel 0's was named)
            others = [read_series(src / name, pixels=False) for _, name in channel_folders[files.case_id]]
            objects = _export_case(files, case_series, folder, probabilities=probabilities, segments_file=segments,
                                   other_series=others,
                                   uid_root=uid_root, algorithm=algorithm, region_names=region_names, study=study,
                                   numbers=rows.get(files.case_id), triage=decisions.get(files.case_id),
                                   extra_groups={t: r[files.case_id] for t, r in extra.items() if files.case_id in r},
                                   label_regions=label_regions, series_description=series_description,
                                   class_names=known)
            result.cases[files.case_id] = {
                "series": _series_entry(case_series, source),
                # the series of the other input channels, which the objects reference too (found by review 62: the
                # manifest named channel 0's only)
                "other_series": [{"channel": channel, **_series_entry(other, src / name)}
                                 for (channel, name), other in zip(channel_folders[files.case_id], others)],
                "algorithm": {"name": algorithm.name, "version": algorithm.version, "weights_sha256": algorithm.weights,
                              "method": algorithm.method},
                "study_instance_uid": objects[0]["study_instance_uid"],
                "objects": objects,
            }
        with _manifest_step(out, part):  # a part: the entries the run's other parts added meanwhile, and its own
            cases_done = result.cases if part is None else dict(sorted({
                **_run_entries(_read_manifest(out), settings, set(ids), run_cases), **result.cases}.items()))
            atomic_write_json(out / EXPORT_RECORD, {**settings, "cases": cases_done})
    return result


def dicom_export_from_arguments(args: argparse.Namespace) -> CommandResult[DicomExport]:
    """``monai-unc dicom-export`` on its parsed arguments (:func:`monai_unc.workflows.arguments.add_command_parsers`).

    Args:
        args: the parsed arguments of ``monai-unc dicom-export``.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of :func:`dicom_export`; its line says how many
        objects were written where.
    """
    for flag, given in (("--trusted-keys", args.trusted_keys),
                        ("--require-signature", getattr(args, "require_signature", False))):
        if given and args.triage is None:  # nothing to check: said rather than ignored
            raise ValueError(f"{flag} checks the signature of the triage.json of --triage: give --triage FOLDER, or "
                             f"leave {flag} out")
    result = dicom_export(args.predictions, args.series, args.output, layout=args.layout, measures=args.measures,
                          probabilities=not args.no_probabilities, segments=args.segments, uid_root=args.uid_root,
                          algorithm_name=args.algorithm_name, evaluation=args.evaluation, triage=args.triage,
                          progress=not args.quiet, study_uid=args.study_uid, trust=triage_trust_from_arguments(args),
                          series_description=args.series_description, class_names=args.class_names,
                          **{str(cls.command): getattr(args, str(cls.command).replace("-", "_"), None)
                             for cls in command_products() if cls.applied_table})
    line = f"dicom-export: {result.n_objects} DICOM object(s) for {len(result.cases)} case(s) in {result.output}"
    return CommandResult(result, True, result.output, () if args.quiet else (line,))


def nnunet_predict_dicom(args: argparse.Namespace, predict: Callable[[argparse.Namespace], int]) -> int:
    """``monai-unc nnunet-predict --output-format dicom|both``: nnU-Net's prediction, then its DICOM objects.

    The input must hold one DICOM series folder per case (checked before any work, as the UID root, the study mode
    and the output folder are); ``predict`` (:func:`monai_unc.nnunet.cli.run`) predicts from the series (staged as
    NIfTI with their geometry, so every output lies on the source series' grid) and :func:`dicom_export`
    (``layout="nnunet"``) writes the objects: with ``both`` to ``<output>/dicom/<case>/`` beside nnU-Net's files,
    with ``dicom`` to ``<output>/<case>/`` from nnU-Net's files made in a scratch folder inside the output folder
    (``.predictions.partial-nnunet-<random>.dir``, :func:`monai_unc.io.scratch_folder`: removed afterwards, and by
    the next run into the folder when a killed run left it).
    Only the cases of this run are exported (those of its ``-part_id``; not the outputs of a case since removed from
    the input, whose earlier objects are removed), and the output folder is held from the prediction to the end of
    the export: a second run into it is refused meanwhile. A run of one part holds it alone
    (:func:`monai_unc.io.output_lock`); the parts of a run (``-num_parts`` above 1, started alike but for
    ``-part_id``: :func:`_part_run`) hold it together (:func:`monai_unc.io.part_lock`), so that they may run at the
    same time, each on its own GPU, into one folder: each exports its own cases (:class:`ExportPart`) and the
    manifest lists the cases of every part exported so far.

    Args:
        args: the parsed ``nnunet-predict`` arguments (``i``, ``o``, ``output_format``, ``uid_root``, ``segments``,
            ``study_uid``, ``disable_progress_bar``).
        predict: runs ``nnunet-predict`` on arguments and returns its exit status.

    Returns:
        The exit status: ``predict``'s when it fails, 2 with one line on stderr for a bad DICOM input or option,
        else 0.
    """
    command, both = "monai-unc nnunet-predict", args.output_format == "both"
    try:
        check_dicom_input(args.i, args.uid_root, "-i", args.output_format)
        new_study(args.study_uid)
        if args.segments is not None:  # its fields now; its keys against the classes at the export
            if not Path(args.segments).is_file():
                check_entry_kind(args.segments, "--segments file", folder=False)
                raise FileNotFoundError(f"--segments file not found: {args.segments}")
            read_segment_specs(args.segments, range(1, MAX_SEGMENT_NUMBER + 1))
        check_output_folder(args.o, args.i)
    except (ValueError, OSError) as e:
        print(f"{command}: error: {e}", file=sys.stderr)
        return 2
    try:
        run = _part_run(args) if args.num_parts > 1 else None
        with contextlib.ExitStack() as held:
            # the output folder is held for the prediction and the export, so that a second run into it cannot
            # interleave with the writes; nnU-Net's worker processes write under it. The parts of one run hold it
            # together (each predicts and exports its own cases), any other run is refused meanwhile
            held.enter_context(output_lock(args.o, command) if run is None else
                               part_lock(args.o, run, args.part_id, command, wait=_PART_WAIT))
            # with dicom, nnU-Net's files (segmentations, maps; the staged series too) go to a scratch folder inside
            # the output folder, .predictions.partial-nnunet-<random>.dir (which output_lock made): not the system's
            # temporary folder, where a killed run left them for good (found by review 75: a patient's predictions in
            # /tmp/monai-unc-nnunet-*); the next run into the folder removes what a killed one left there. Inside -o,
            # not beside it: -o's parent may be no folder the user can write (a container's /output)
            # (and a killed run's staging of DICOM series of another output format: any run into -o removes it)
            remove_dead_scratch(Path(args.o) / "images", "dicom-input")
            nifti = Path(args.o) if both else \
                held.enter_context(scratch_folder(Path(args.o) / "predictions", "nnunet")) / "predictions"
            status = predict(argparse.Namespace(**{**vars(args), "o": str(nifti)}))
            if status != 0:
                return status
            # the cases of this run (of its part, split as nnU-Net splits the sorted case ids): not those of a series
            # since removed from the input, whose outputs an earlier run left in the folder
            # (one series folder per case, or per channel for a model of several: nnU-Net's dataset.json, which it
            # writes beside its outputs, says how many)
            channels = nnunet_input_channels(read_json_or_none(nifti / "dataset.json"))
            every = list(dicom_channel_series(args.i, channels))
            part = None if run is None else ExportPart(run, args.part_id, tuple(every))
            result = dicom_export(nifti, args.i, nifti / DICOM_FOLDER if both else args.o, layout="nnunet",
                                  segments=args.segments, uid_root=args.uid_root, inside_predictions=both,
                                  progress=not args.disable_progress_bar, study_uid=args.study_uid,
                                  cases=every[args.part_id::args.num_parts], part=part)
    except (ValueError, OSError) as e:
        print(f"{command}: error: {e}", file=sys.stderr)
        return 2
    print(f"dicom: {result.n_objects} DICOM object(s) for {len(result.cases)} case(s) in {result.output}")
    return 0
