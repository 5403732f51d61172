"""Triage of new unlabelled cases (step 2).

The module lists the cases of a prediction folder, computes one case's label-free row (:func:`triage_case`, which
writes the maps it derives from the probabilities of a case without map files to ``<output>/maps``) and runs the whole
of ``monai-unc triage`` (:func:`run_triage`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ... import __version__
from ..._utils import keep_user_warnings, listed, refusing
from ...engine import CaseCache, CohortRun, get_dist_context, run_cases
from ...io import (
    CaseError,
    CaseFiles,
    case_files_digest,
    case_image_files,
    check_inputs_not_written,
    check_output_folder,
    check_output_kind,
    clean_partial_files,
    image_channel_files,
    load_case,
    owned_folder,
    read_json_or_none,
    write_csv,
)
from ...io.provenance import (
    RuleRead,
    check_prediction_fingerprint,
    has_weight_digests,
    list_prediction_cases,
    load_rule,
    rule_digest,
    rule_file_path,
)
from ...io.signing import Trust, sign_digest
from ...scores import case_score_columns
from ..cohort import triage_order
from ..config import DERIVED_MAPS_DIR, STATE_DIR, region_suffix, slug
from ..products import command_output_markers
from ..region_case import predicted_regions, region_score_columns
from ..resume import (
    CASES_DIR,
    check_inputs_unchanged,
    file_signature,
    input_signatures,
    map_digest_hooks,
    map_signature,
)
from ..rows import case_expected_dice, derived_maps, first_class_count, remove_stale_maps, write_derived_maps
from .images import IMAGE_FEATURES, image_statistics, read_image_channels
from .rule import ReferralRule, as_float, triage_signing_key, write_triage_summary

#: files :func:`run_triage` writes (besides ``state/`` and ``failures.json``), and the page of the report
TRIAGE_FILES = ("triage.csv", "triage.json", "triage.html")
#: what ``monai-unc triage`` writes (or removes) in its output folder, with the page (patterns of
#: :func:`monai_unc.io.check_inputs_not_written`)
TRIAGE_WRITES = (*TRIAGE_FILES, "failures.json", STATE_DIR, f"{STATE_DIR}/*", DERIVED_MAPS_DIR, f"{DERIVED_MAPS_DIR}/*",
                 "figures", "figures/*", ".*.partial*")
#: 2: a row records the maps written for the case (``derived``); a row of format 1 is computed again
_STATE_FORMAT = 2


# ----------------------------------------------------------------------------------------------------------------
# triage of new cases (step 2)
# ----------------------------------------------------------------------------------------------------------------


def find_prediction_cases(
    predictions: str | os.PathLike,
    rule: ReferralRule,
    layout: str = "monai-unc",
    *,
    uncertainty: str | os.PathLike | None = None,
    images: str | os.PathLike | None = None,
    cases: Sequence[str] | None = None,
) -> list[CaseFiles]:
    """The cases of a prediction folder to triage with ``rule`` (:func:`list_prediction_cases`).

    The map of the rule's measure is listed when the rule's scores come from a map file (none when they were derived
    from the probabilities).

    Args:
        predictions: the prediction folder.
        rule: the referral rule.
        layout: ``"monai-unc"`` or ``"nnunet"``.
        uncertainty: the folder of the maps when not where the layout puts them.
        images: the folder of the input images, or None.
        cases: keep only these case ids (None: every case).

    Returns:
        The cases' files (:func:`list_prediction_cases`).

    Raises:
        CaseError: as :func:`list_prediction_cases`.
        TypeError: ``cases`` is one id (a string or path), not a list of ids.
    """
    # found by hostile testing: one id was read one character at a time ("9 case(s) have no prediction, e.g. ['0',
    # '_', 'b', ...]"), a path failed with "'PosixPath' object is not iterable"
    if cases is not None and (isinstance(cases, (str, bytes, os.PathLike)) or not isinstance(cases, Iterable)):
        raise TypeError(f"cases must be a list of case ids, got {cases!r:.80}")
    return list_prediction_cases(predictions, layout, measure=rule.measure if rule.map_source == "file" else None,
                                 uncertainty=uncertainty, images=images, cases=cases,
                                 regions=None if rule.regions is None else [str(r) for r in rule.regions])


def untriaged_cases(
    predictions: str | os.PathLike,
    found: Sequence[str],
    *,
    images: str | os.PathLike | None = None,
    layout: str = "monai-unc",
) -> list[str]:
    """The cases that a triage of ``found`` leaves out although they are inputs: no prediction to triage.

    A case whose inference failed has no prediction, so :func:`find_prediction_cases` does not list it; without a
    word it would be neither accepted nor referred (found by an end-to-end run: an image with NaN voxels failed in
    ``infer``, exit 1, and ``triage`` then reported the other cases, exit 0, as if the cohort were complete). These
    are the cases of ``images`` (:func:`monai_unc.io.case_image_files`; a series folder of one input channel,
    ``<case>_0001/``, of a case listed counts as that case) and the cases that the predictions' ``failures.json``
    (written by ``monai-unc infer`` for the cases it could not predict; untrusted, read leniently) names, that
    ``found`` does not hold.

    Args:
        predictions: the prediction folder.
        found: the case ids that will be triaged.
        images: the folder of the input images, or None.
        layout: ``"monai-unc"`` or ``"nnunet"``.

    Returns:
        The case ids left out, sorted.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "failures.json").write_text('{"failures": [{"case": "c2"}, {"case": "c1"}]}')
        ...     untriaged_cases(d, ["c1"])
        ['c2']
    """
    have = {str(c) for c in found}
    left: set[str] = set()
    doc = read_json_or_none(Path(predictions) / "failures.json")
    entries = doc.get("failures") if isinstance(doc, Mapping) else None
    for entry in entries if isinstance(entries, list) else ():
        case = entry.get("case") if isinstance(entry, Mapping) else None
        if isinstance(case, str) and case and case not in have:
            left.add(case)
    if images is not None:
        image_files = case_image_files(images, predictions, sorted(have), layout)
        used = {image_files[c] for c in have if c in image_files}
        for cid, path in image_files.items():
            channel_of = cid[-5:-4] == "_" and cid[-4:].isdigit() and cid[:-5] in have  # <case>_0001/ of a case
            if cid not in have and path not in used and not channel_of:
                left.add(cid)
    return sorted(left)


def _untriaged_warning(cases: Sequence[str], predictions: str | os.PathLike,
                      images: str | os.PathLike | None = None) -> str:
    """The one line that names the cases :func:`untriaged_cases` found (shown at most 10 ids)."""
    shown = listed(cases, 10)
    where = f"an image in {images} but " if images is not None else ""
    return (f"{len(cases)} case(s) have {where}no prediction in {predictions} and are NOT triaged (neither accepted "
            f"nor referred): {shown}; 'monai-unc infer' failed on them or was not run on them (see its "
            "failures.json): fix and predict them, or review them by hand")


def _triage_fingerprint(files: CaseFiles, rule: ReferralRule) -> dict[str, Any]:
    """What a case's triage row depends on (reused by a rerun only while unchanged).

    That is the format, version, the rule's measure, aggregation inputs (patch size, map source, classes) and the
    case's files (path, size, times, inode).
    """
    fp = {
        "format": _STATE_FORMAT,
        "version": __version__,
        "options": {"measure": rule.measure, "patch_size": rule.patch_size, "map_source": rule.map_source,
                    "num_classes": rule.num_classes, "class_names": rule.class_names, "regions": rule.regions,
                    "channel_files": _channel_files(rule), "expected_dice_estimate": rule.expected_dice_estimate},
        "inputs": {"seg": file_signature(files.seg), "probs": file_signature(files.probs),
                   "maps": {m: map_signature(p) for m, p in sorted(files.maps.items())},
                   "image": None if files.image is None else [file_signature(p) for p in (
                       image_channel_files(files.image, files.case_id) if _channel_files(rule) == "all"
                       else (files.image,))]},
    }
    return json.loads(json.dumps(fp))


def triage_case(files: CaseFiles, rule: ReferralRule, *, maps: str | os.PathLike | None = None) -> dict[str, Any]:
    """The label-free row of one case; it does not apply the rule.

    The row holds the rule measure's three case scores, ``expected_dice`` of the case and of each class when
    probabilities exist (:func:`~monai_unc.evaluation.rows.case_expected_dice` of the rule's
    :attr:`~monai_unc.evaluation.triage.ReferralRule.expected_dice_estimate`: as its calibration cases' were), the
    image statistics when the case has an image (``image_stats``), the warnings raised and the case's files.

    Class-based rule: the scores of :func:`case_score_columns`. Region-based rule (``rule.regions``): the case is
    read with ``load_case(..., multilabel=True)`` (region masks or a label map converted with the spec, one map
    channel per region) and scored by :func:`~monai_unc.evaluation.region_case.region_score_columns`, the function
    ``evaluate --regions`` uses: the combined ``<measure>_<score>`` (mean over the regions) and the per-region
    ``<measure>_<score>_<R>``; ``expected_dice`` is the mean over the regions of each region's binary expected Dice
    (:func:`monai_unc.metrics.quality.quality_estimates` with ``multilabel=True``), ``expected_dice_<R>`` per region.

    With ``maps`` (a folder: ``<output>/maps`` of ``triage``) the maps derived from the probabilities of a case
    without map files are written there (:func:`~monai_unc.evaluation.rows.write_derived_maps`, the writer of
    ``evaluate``: ``<case>_<measure>.nii.gz`` in the case's geometry), the arrays the row was scored on, and the row
    records their file names (``derived``); the triage page draws them from there.

    Args:
        files: the case's files (:func:`find_prediction_cases`).
        rule: the referral rule (its measure, patch size, classes or regions, channel files).
        maps: the folder of the derived maps, or None: nothing written.

    Returns:
        The row: ``case``, the score columns, ``expected_dice*`` (with probabilities), ``image_stats`` (a list, or
        None), ``foreground_voxels``, ``voxels``, ``spacing``, ``warnings``, ``files`` and, with ``maps``,
        ``derived`` (``{measure: file name}``, empty for a case with map files of its own).

    Raises:
        CaseError: the case has no map of the rule's measure, channel counts that do not fit the rule's regions, or
            an image with another number of channels than the rule's calibration images.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        regions = rule.regions
        case = load_case(files, len(regions) if regions is not None else rule.num_classes, load_image=False,
                         multilabel=regions is not None)
        derived = derived_maps(case)
        if rule.measure not in derived:
            raise CaseError(f"case {case.case_id!r}: no {rule.measure} map to score (the rule scores "
                            f"{rule.score}; available: {sorted(derived) or 'none'})")
        row: dict[str, Any] = {"case": case.case_id}
        if regions is not None:
            names = list(regions)
            u = derived[rule.measure]
            if u.shape[0] != len(names):
                raise CaseError(f"case {case.case_id!r}: the {rule.measure} map has {u.shape[0]} region channel(s) "
                                f"but the rule's regions are {len(names)} ({', '.join(names)})")
            pred = predicted_regions(case, regions)
            row.update(region_score_columns({rule.measure: u}, pred, names, rule.patch_size))
            if case.probs is not None:
                q = case_expected_dice(case.probs, True, rule.expected_dice_estimate)  # as the calibration's
                row["expected_dice"] = float(q.foreground[0])
                row.update({f"expected_dice_{region_suffix(n)}": float(q.per_class[0, r]) for r, n in enumerate(names)})
            fg_voxels, voxels = int(pred.any(axis=0).sum()), int(np.prod(pred.shape[1:]))
        else:
            row.update(case_score_columns({rule.measure: derived[rule.measure]}, case.seg, rule.patch_size))
            if case.probs is not None:
                q = case_expected_dice(case.probs, False, rule.expected_dice_estimate)  # as the calibration's
                row["expected_dice"] = float(q.foreground[0])
                n_cls = case.probs.shape[0]
                cls_names = rule.class_names or tuple(str(c) for c in range(n_cls))
                for c in range(1, n_cls):
                    key = slug(cls_names[c]) if c < len(cls_names) else c
                    row[f"expected_dice_{key}"] = float(q.per_class[0, c - 1])
            fg_voxels, voxels = int((case.seg > 0).sum()), int(case.seg.size)
        image = None
        if files.image is not None:  # every channel (file), in the space of the prediction
            image = read_image_channels(files.image, _channel_files(rule), (case.seg.shape[-len(case.spacing):],
                                                                              case.affine), case.case_id)
            want = None if rule.image_reference is None else len(rule.image_reference.features) // len(IMAGE_FEATURES)
            if want is not None and image.shape[0] != want:  # compared with the calibration images, channel by channel
                used = (image_channel_files(files.image, files.case_id) if _channel_files(rule) == "all"
                        else (files.image,))
                raise CaseError(f"case {case.case_id!r}: its image ({', '.join(p.name for p in used)}) has "
                                f"{image.shape[0]} channel(s), the calibration images of the rule {want}")
        row["image_stats"] = None if image is None else image_statistics(image).tolist()
        row["foreground_voxels"] = fg_voxels
        row["voxels"] = voxels
        row["spacing"] = "x".join(f"{s:.4g}" for s in case.spacing)
    # the UserWarnings are the case's (listed); the others are issued again as raised (found by review 70: dropped)
    row["warnings"] = sorted({f"{case.case_id}: {w.message}" for w in keep_user_warnings(caught)})
    row["files"] = files.to_json()
    if maps is not None:  # the arrays scored above, written once (nothing for a case with map files of its own)
        row["derived"] = {m: p.name for m, p in write_derived_maps(case, maps, derived).items()}
    return row


def _channel_files(rule: ReferralRule) -> str:
    """How :func:`triage_case` reads channel files: like the rule's calibration images (every file without them)."""
    return rule.image_reference.channel_files if rule.image_reference is not None else "all"


def _dump_row(folder: Path, case_id: str, row: dict[str, Any]) -> dict[str, Any]:
    """The saved state of a case: its row (``map_digest_hooks`` adds the sha256 of each derived map)."""
    return {"row": row}


def _restore_row(folder: Path, doc: dict[str, Any], files: Any) -> dict[str, Any]:
    """A saved row (its derived maps checked first by :func:`~monai_unc.evaluation.resume.map_digest_hooks`).

    Found by review: the state's digest covered its JSON only, so a derived map edited or swapped for another case's
    was drawn on the triage page beside the row's scores; a map gone or changed, a row without ``derived`` or a state
    without the maps' digests (written by an earlier version) makes the case triaged again.
    """
    row = doc["row"]
    if not isinstance(row, dict):
        raise TypeError(f"the saved row of case {doc.get('case')!r} is not an object")
    return row


def _row_derived(doc: dict[str, Any]) -> Any:
    """The derived maps a saved row names (``{measure: file name in <output>/maps}``); ``KeyError`` without them."""
    row = doc["row"]
    if not isinstance(row, dict) or not isinstance(row.get("derived"), dict):
        raise KeyError(f"the saved row of case {doc.get('case')!r} records no derived maps")
    return row["derived"]


@dataclass
class TriageResult:
    """What :func:`run_triage` returns (on every rank): the summary written to ``triage.json`` and the paths.

    Args:
        summary: the content of ``triage.json``.
        paths: ``{"csv": path, "json": path}`` of the files written.

    Example:
        >>> TriageResult({"cases": [{"case": "a", "decision": "accept"}]}, {}).decisions
        {'a': 'accept'}
    """

    summary: dict[str, Any]
    paths: dict[str, Path]

    @property
    def decisions(self) -> dict[str, str]:
        """``{case: "accept" | "review"}``."""
        return {c["case"]: c["decision"] for c in self.summary["cases"]}


def remove_triage_files(folder: str | os.PathLike) -> None:
    """Remove the outputs of an earlier triage in ``folder``, keeping the per-case state.

    The outputs are ``triage.csv``, ``triage.json``, ``triage.html`` and the figures: once a run's checks pass (before
    its cases are read), and after a run with failed cases, no earlier decisions remain.

    Args:
        folder: the triage output folder (missing files are skipped).
    """
    folder = Path(folder)
    for name in TRIAGE_FILES:
        (folder / name).unlink(missing_ok=True)
    fig = owned_folder(folder, "figures")  # not a link: its figures are removed
    if fig.is_dir():
        for p in fig.glob("*.png"):
            p.unlink()


def mismatch_fields(check: Mapping[str, Any]) -> list[str] | None:
    """The fingerprint fields in which a triage's predictions differ from its rule's, or None when they match.

    What :meth:`~monai_unc.evaluation.triage.ReferralRule.guarantee` and
    :meth:`~monai_unc.evaluation.triage.ReferralRule.interval_statement` take: a mismatch allowed with
    ``--allow-mismatch`` (``check["status"] == "mismatch"``) leaves the predictions outside the rule's guarantees.

    Args:
        check: the fingerprint check (:func:`~monai_unc.io.provenance.check_prediction_fingerprint`, ``triage.json``'s
            ``fingerprint``).

    Returns:
        The fields (possibly none named), or None.

    Example:
        >>> mismatch_fields({"status": "mismatch", "differences": [{"field": "num_samples"}]})
        ['num_samples']
        >>> mismatch_fields({"status": "match", "differences": []}) is None
        True
    """
    if not isinstance(check, Mapping) or check.get("status") != "mismatch":
        return None
    return [str(d.get("field")) for d in check.get("differences") or () if isinstance(d, Mapping)]


def _assemble(
    rows: Sequence[Mapping[str, Any]], rule: ReferralRule, check: Mapping[str, Any], images_given: bool,
    rule_path: str | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Apply the rule to the rows (in case-id order): the summary (``triage.json``) and the rows of ``triage.csv``."""
    rows = sorted(rows, key=lambda r: str(r["case"]))
    ids = [str(r["case"]) for r in rows]
    scores = np.array([as_float(r.get(rule.score)) for r in rows])
    notes = []
    stats = None
    if rule.image_reference is not None and images_given:
        stats = [r.get("image_stats") for r in rows]
        image_check = "applied"
    elif rule.image_reference is not None:
        image_check = "skipped: the rule holds statistics of its calibration images, but no images were given"
    elif images_given:
        image_check = "skipped: the rule holds no image statistics (its evaluation had no --images)"
    else:
        image_check = "skipped: neither the rule nor this triage has images"
    if image_check != "applied":
        notes.append(f"image check {image_check}")
    if rule.integrity.startswith("not recomputed"):
        notes.append(f"certificate {rule.integrity}")
    if rule.signature.startswith("UNSIGNED"):
        notes.append(f"rule signature {rule.signature}: who certified this rule, and that it is unchanged since, "
                     "were not checked")
    if check.get("weight_digests") == "unavailable" and check.get("status") != "unverified":
        side = "the rule's" if not has_weight_digests(rule.fingerprint) else "the predictions'"
        notes.append(f"model weight digests unavailable ({side} record was written before monai-unc recorded them): "
                     "the model was compared by its checkpoint paths only, so a model retrained and saved at the "
                     "same path would pass")
    decisions = rule.apply(scores, stats)
    # a case resampled or cropped otherwise than the calibration cases: one warning naming it, recorded with the
    # cases' warnings (review 62: a rule certified on 1 mm cases was applied to 3 mm cases without a word)
    resampled = [f"{ids[i]}: {text}" for i, r in enumerate(rows)
                 if (text := rule.check_case_geometry(ids[i], r.get("spacing"), r.get("voxels"))) is not None]
    estimates = [as_float(r.get("expected_dice")) for r in rows]
    interval = rule.expected_dice_interval(estimates)
    undefined_estimate = []
    if interval is not None:
        # the interval leaves their warning out (review 68: it was silenced and said nowhere): one line per run
        undefined = [ids[i] for i, v in enumerate(estimates) if not np.isfinite(v)]
        if undefined:
            undefined_estimate = [
                f"{len(undefined)} case(s) have an undefined (NaN or missing) expected Dice and so no expected-Dice "
                f"interval: {listed(undefined, 10)}"]
            warnings.warn(undefined_estimate[0], UserWarning, stacklevel=3)
    z = None
    if stats is not None and rule.image_reference is not None:
        n_feat = len(rule.image_reference.features)
        z = rule.image_reference.z_scores(np.array([s if s is not None else [np.nan] * n_feat for s in stats]))
    order = triage_order(ids, scores)
    rank = {ids[i]: k + 1 for k, i in enumerate(order)}
    cases, csv_rows = [], []
    for i, (r, d) in enumerate(zip(rows, decisions)):
        zmax = float(np.nanmax(z[i])) if z is not None and np.isfinite(z[i]).any() else None
        entry = {"case": ids[i], "score": as_float(r.get(rule.score)), "decision": d.decision, "reason": d.reason,
                 "code": d.code, "rank": rank[ids[i]]}
        if "expected_dice" in r:
            entry["expected_dice"] = r["expected_dice"]
        bounds = {}
        if interval is not None and np.isfinite(interval.low[i]):  # the interval of the expected Dice
            bounds = {"expected_dice_low": float(interval.low[i]), "expected_dice_high": float(interval.high[i])}
            entry.update(bounds)
        if rule.regions is not None:  # the rule's score per region (its mean over the regions is "score")
            entry["region_scores"] = {n: as_float(r.get(f"{rule.score}_{region_suffix(n)}")) for n in rule.regions}
        if zmax is not None:
            entry["image_z_max"] = zmax
        cases.append(entry)
        extra = {k: v for k, v in r.items() if k not in ("case", "image_stats", "warnings", "files", "derived")}
        csv_rows.append({**{k: entry[k] for k in ("case", "score", "decision", "reason")}, "rank": entry["rank"],
                         "code": d.code, **({"image_z_max": zmax} if zmax is not None else {}), **extra,
                         **bounds})  # last: the earlier columns keep their order
    accepted = [c["case"] for c in cases if c["decision"] == "accept"]
    review = [c["case"] for c in cases if c["decision"] == "review"]
    reasons: dict[str, int] = {}
    for c in cases:
        reasons[c["code"]] = reasons.get(c["code"], 0) + 1
    warns = sorted({w for r in rows for w in r.get("warnings", [])} | set(resampled) | set(undefined_estimate))
    summary = {
        "n_cases": len(cases),
        "n_accepted": len(accepted),
        "n_review": len(review),
        "accepted": accepted,
        "review": review,
        "reasons": reasons,
        "order": [ids[i] for i in order],
        "score": rule.score,
        "accepted_risk": {
            "definition": rule.risk_definition,
            "target": rule.target_risk,
            "delta": rule.delta,
            "certified": rule.feasible,
            "calibration_bound": rule.bound,
            "calibration_observed": rule.observed_risk,
            "statement": rule.guarantee(mismatch_fields(check)),
        },
        "expected_dice_interval": {
            "calibrated": interval is not None,
            "level": None if interval is None else 1 - interval.alpha,
            "quantile": None if interval is None or not np.isfinite(interval.quantile) else interval.quantile,
            "n_calibration": None if interval is None else interval.n,
            "statement": rule.interval_statement(mismatch_fields(check)),
            "estimate": rule.expected_dice_estimate,
        },
        "fingerprint": dict(check),
        "image_check": image_check,
        "notes": notes,
        "rule_file": rule_path,
        "rule_signature": rule.signature or None,
        "rule": rule.to_json(),
        "cases": cases,
        "files": {str(r["case"]): r.get("files") for r in rows},
        "warnings": warns,
    }
    return summary, csv_rows


def run_triage(
    predictions: str | os.PathLike,
    rule: ReferralRule | RuleRead | str | os.PathLike,
    output: str | os.PathLike,
    images: str | os.PathLike | None = None,
    allow_mismatch: bool = False,
    layout: str = "monai-unc",
    *,
    uncertainty: str | os.PathLike | None = None,
    cases: Sequence[str] | None = None,
    resume: bool = True,
    progress: bool = False,
    dist: Any = None,
    on_failure: Any = None,
    trust: Trust | None = None,
) -> TriageResult:
    """Triage the new (unlabelled) cases of ``predictions`` with ``rule``: ``monai-unc triage`` without its page.

    The HTML page is :func:`monai_unc.report.triage.build_triage_page`. The triage runs on one process or on every
    rank of a process group (``torchrun``).

    Every rank lists the cases (:func:`find_prediction_cases`; they must agree), reads the predictions' fingerprint
    and compares it with the rule's, and the rule's regions with the regions recorded with the predictions
    (:func:`region_differences`): a difference raises :class:`FingerprintMismatch` (a ``ValueError``) before any
    work unless ``allow_mismatch`` (then ``triage.json`` and the page record it). Each rank triages its shard
    (:func:`monai_unc.engine.shard`) with :func:`triage_case`, saving each case's row under
    ``<output>/state/cases/`` with ``resume`` (a rerun, or an interrupted run run again, reuses rows whose files and
    options are unchanged, whatever the rule's threshold; the earlier run's triage files are removed before the
    cases are read, so an interrupted run leaves none) and writing the maps it derives from the probabilities of a
    case without map files to ``<output>/maps/<case>_<measure>.nii.gz`` (the writer of ``evaluate``; a saved row
    whose maps are gone is computed again). Rank 0 gathers the rows, applies the rule in case-id order
    and writes, atomically, ``triage.csv`` (one row per case: ``case, score, decision, reason`` then ``rank``,
    ``code``, the robust image z-score, the scores and quality estimates, last ``expected_dice_low`` /
    ``expected_dice_high``: the interval of :meth:`ReferralRule.expected_dice_interval`, when the rule
    records its calibration cases' estimates) and ``triage.json`` (decisions, reasons, the guarantee for the accepted
    cases, ``expected_dice_interval``: its level, quantile and statement, fingerprint check, the rule), after
    removing the maps of cases not in this
    run (:func:`remove_stale_maps`). A case that raises is reported (one stderr line, ``on_failure(CaseFailure)``),
    the others go on, rank 0 writes ``failures.json`` instead of the triage files (the maps and per-case state stay,
    for the next run) and :class:`~monai_unc.engine.CasesFailed` is raised on every rank at the end.

    Args:
        predictions: output folder of ``monai-unc infer`` (``layout="monai-unc"``) or ``nnunet-predict``
            (``layout="nnunet"``).
        rule: a :class:`ReferralRule`, the path of a ``referral_rule.json``, or that file read and verified once by
            the caller (a :class:`~monai_unc.io.provenance.RuleRead` of :meth:`ReferralRule.load` with ``trust``:
            the run acts on the version read, and raises its refusal where it would refuse the file).
        output: output folder (must not lie inside an input folder).
        images: folder of the input images (image-statistics check and overlays).
        allow_mismatch: record a fingerprint or region mismatch in ``triage.json`` instead of raising.
        layout: ``"monai-unc"`` or ``"nnunet"``.
        uncertainty: folder of the maps when not where the layout puts them.
        cases: triage only these case ids (default: every case in ``predictions``).
        resume: keep and reuse per-case rows under ``<output>/state/cases/``.
        progress: show a progress bar.
        dist: a :class:`~monai_unc.engine.DistContext` (default :func:`~monai_unc.engine.get_dist_context`).
        on_failure: called with a :class:`~monai_unc.engine.CaseFailure` for each failing case (default: one
            stderr line).
        trust: the trusted keys a rule file's signature must verify against (:meth:`ReferralRule.load`;
            ``triage.json`` records how it was checked, and an unsigned rule allowed by ``trust.allow_unsigned`` is
            a note of the page), or None (not checked).

    Returns:
        The :class:`TriageResult` (summary and paths), on every rank.

    Raises:
        FingerprintMismatch: the predictions were not made like the rule's calibration predictions (without
            ``allow_mismatch``).
        CasesFailed: one or more cases failed (``failures.json`` is written instead of the triage files).
        ValueError: an output folder inside an input folder, or a rule file that does not verify.
        TypeError: ``cases`` is one id, not a list of ids (:func:`find_prediction_cases`), or ``allow_mismatch`` is
            not a bool.
    """
    if not isinstance(allow_mismatch, bool):  # found by hostile testing: "no" allowed a mismatch
        raise TypeError(f"allow_mismatch must be True or False, got {allow_mismatch!r:.80}")
    ctx = dist if dist is not None else get_dist_context()
    output = Path(output)
    rule_path = rule_file_path(rule, ReferralRule)
    got: dict[str, Any] = {}  # the rule and the fingerprint check, found while listing the cases

    def listing() -> list[CaseFiles]:
        # each refusal names its parameter, which the command line writes as its option (found by a probe of every
        # command: "output folder ... is a file" and "referral rule not found" named no option)
        with refusing("output"):
            check_output_folder(output, predictions, images, uncertainty)
            check_output_kind(output, "triage", command_output_markers())  # not an evaluation's folder (maps/)
            check_inputs_not_written(output, TRIAGE_WRITES, rule_path, predictions, images, uncertainty,
                                     what="--output")  # e.g. --rule OUT/triage.json: never replaced by the output
        with refusing("rule"):  # every refusal of the file: missing, a folder, malformed, not signed as trusted
            the_rule = load_rule(rule, ReferralRule, trust)
        found = find_prediction_cases(predictions, the_rule, layout, uncertainty=uncertainty, images=images,
                                      cases=cases)
        got["check"] = check_prediction_fingerprint(the_rule.fingerprint, the_rule.regions, predictions, layout,
                                                    [f.case_id for f in found], uncertainty, allow_mismatch)
        # found by hostile testing: predictions of another number of classes (with --allow-mismatch) failed every
        # case, each listed in failures.json; no option makes them fit the rule, so one refusal before any case
        # a rule without a class count (num_classes null, the constructor's default) takes any, as each case does
        counted = first_class_count(found) if the_rule.regions is None and the_rule.num_classes is not None else None
        if counted is not None and counted[1] != the_rule.num_classes:
            raise ValueError(f"the rule is for {the_rule.num_classes} classes, but case {counted[0].case_id!r} has "
                             f"{counted[1]} ({counted[0].probs.name}): triage the predictions of the model the rule "
                             "was fitted on")
        got["rule"] = the_rule
        # triage.json is signed with a configured key; one that cannot sign (unprotected, another key's public
        # file) is refused before any case, not after the last
        got["key"] = triage_signing_key()
        if got["key"] is not None:
            sign_digest(rule_digest({}), got["key"])
        # compared at the end: another run that writes the predictions after these checks (found by hostile testing)
        got["cases"], got["inputs"] = found, input_signatures(found, predictions)
        # inputs without a prediction (a case infer failed on) are named, never left out without a word; with
        # cases= the caller chose the cases
        got["untriaged"] = [] if cases is not None else untriaged_cases(
            predictions, [f.case_id for f in found], images=images, layout=layout)
        if got["untriaged"] and ctx.rank == 0:
            warnings.warn(_untriaged_warning(got["untriaged"], predictions, images), UserWarning, stacklevel=2)
        return found

    maps = output / DERIVED_MAPS_DIR

    def setup() -> None:
        output.mkdir(parents=True, exist_ok=True)
        # an earlier run's decisions go before this run's cases are read: a run interrupted (or killed) before its
        # own files are written leaves none of another rule's or cohort's passing for this run's (found by hostile
        # testing: Ctrl-C during a rerun with another rule kept the old triage.csv / triage.json / page)
        remove_triage_files(output)
        clean_partial_files(output)
        clean_partial_files(maps)

    def finish(run: CohortRun) -> tuple[dict[str, Any], dict[str, Path]]:
        remove_triage_files(output)  # first: a run stopped while writing leaves none of an earlier run's files
        # the cases read are those listed: no other run wrote the predictions meanwhile (one version of each)
        check_inputs_unchanged(got["inputs"], got["cases"], predictions, "monai-unc triage")
        remove_stale_maps(maps, run.results)  # maps/ holds the maps of this run's cases only
        summary, csv_rows = _assemble(run.results, got["rule"], got["check"], images is not None, rule_path)
        summary["not_triaged"] = got["untriaged"]
        if got["untriaged"]:
            summary["warnings"] = [*summary["warnings"], _untriaged_warning(got["untriaged"], predictions, images)]
        # with its digest and, where a signing key is configured, signed: an edited triage.json is detected
        # (check_triage_summary; found by review 61: a case flipped from review to accept with its score lowered)
        csv_path = write_csv(output / "triage.csv", csv_rows)  # first, as before: triage.json says the run is done
        json_path, written = write_triage_summary(output / "triage.json", summary, got["key"])
        paths = {"csv": csv_path, "json": json_path}
        (output / "triage.html").unlink(missing_ok=True)  # the page of an earlier run is stale now
        return written, paths

    cache = None
    if resume:  # a case's row is reused while its files and the rule's per-case options are unchanged
        dump, restore = map_digest_hooks(_dump_row, _restore_row, _row_derived, maps)  # evaluate's check
        cache = CaseCache(output / STATE_DIR / CASES_DIR, lambda f: _triage_fingerprint(f, got["rule"]),
                          dump=dump, restore=restore)
    run = run_cases(listing, lambda f: triage_case(f, got["rule"], maps=maps), command="monai-unc triage", ctx=ctx,
                    cache=cache, setup=setup, summarize=finish, on_failed=lambda run: remove_triage_files(output),
                    failures_file=output / "failures.json", progress=progress, desc="triage", on_failure=on_failure,
                    lock=output, agree=lambda found: {"rule": got["rule"].to_json()["digest"],
                                                      "input files": case_files_digest(found)})
    return TriageResult(*run.summary)
