"""Certifying a referral rule on an evaluation's calibration cases (step 1 of triage, inside ``evaluate``)."""

from __future__ import annotations

import datetime as _dt
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...io import CaseError, image_channel_files
from ...io.provenance import (
    calibration_geometry,
    check_finished_predictions,
    prediction_fingerprint,
    prediction_regions,
    region_differences,
)
from ...metrics.risk_control import P_VALUES
from ...regions import parse_regions
from ..cohort import RISK_CONTROL_CANDIDATES, CohortState, calibration_risks
from ..config import EvaluationConfig
from .images import image_statistics, read_image_channels
from .rule import IMAGE_Z_MAX, RULE_FILE, CalibrationRecord, ImageReference, ReferralRule, as_float


# ----------------------------------------------------------------------------------------------------------------
# certifying (step 1, inside evaluate)
# ----------------------------------------------------------------------------------------------------------------
def certify_referral_rule(
    state: CohortState,
    summary: Mapping[str, Any],
    config: EvaluationConfig,
    *,
    predictions: str | os.PathLike | None = None,
    layout: str = "monai-unc",
    uncertainty: str | os.PathLike | None = None,
    image_z_max: float = IMAGE_Z_MAX,
) -> ReferralRule:
    """The :class:`ReferralRule` of an evaluation with ``config.target_risk``.

    The rule holds the threshold and its certificate from ``summary["risk_control"]`` (fitted by
    :func:`monai_unc.evaluation.summarize` on the calibration cases), the calibration cases' scores from ``state``, the
    statistics of their images when the evaluation had images (``state.files``: the reference and each image's row,
    :attr:`ImageReference.statistics`, what ``monai-unc monitor`` ranks new images against), and the fingerprint of
    ``predictions``
    (:func:`prediction_fingerprint`, the calibration cases' records). A region evaluation (``config.regions``) gives a
    rule with the region spec, whose score is the combined case score of the regions. The rule records the calibration
    cases' scores, Dice and risks (:class:`CalibrationRecord`, ``format_version`` 5), from which its certificate is
    recomputed here and whenever it is read (:meth:`ReferralRule.verify_certificate`), the p-value of LTT's tests
    (:attr:`CalibrationRecord.p_value`, ``format_version`` 6 for the binomial one), and, when the evaluation had
    probabilities, their label-free ``expected_dice``, which calibrates the interval of a new case's
    expected Dice (:meth:`ReferralRule.expected_dice_interval`, 90 %), and what it estimates (``class_mean`` or
    ``region_mean``, :attr:`CalibrationRecord.expected_dice_estimate`), and the range of the calibration cases' voxel
    spacing and voxel counts (:attr:`ReferralRule.geometry`, from the rows' ``spacing`` and ``voxels``), against which
    triage checks each new case.

    Args:
        state: the evaluation's cohort state (rows, and files for the images).
        summary: its summary (:func:`monai_unc.evaluation.summarize`), with a ``risk_control`` block.
        config: the evaluation options (``risk``, ``failure_dice``, ``patch_size``, ``class_names``, ``regions``).
        predictions: the folder of the evaluated predictions, for the fingerprint (None: no fingerprint).
        layout: its file naming (``monai-unc`` or ``nnunet``).
        uncertainty: the folder of its uncertainty maps (default from the layout).
        image_z_max: the largest robust z-score of the image statistics of an accepted case
            (:class:`ImageReference`).

    Returns:
        The certified rule (not written; :func:`write_referral_rule` writes it).

    Raises:
        ValueError: the summary has no ``risk_control`` block, or its certificate is not the one the cohort's
            calibration cases give.
    """
    rc = summary.get("risk_control")
    if not rc:
        raise ValueError("the summary has no risk_control block: evaluate with a target_risk (--target-risk)")
    return certify_rule(state.sorted_rows(), state.files, state.num_classes, summary["score"]["column"], rc, config,
                        predictions=predictions, layout=layout, uncertainty=uncertainty, image_z_max=image_z_max)


def certify_rule(
    rows: Sequence[Mapping[str, Any]],
    files: Mapping[str, Any],
    num_classes: int,
    column: str,
    rc: Mapping[str, Any],
    config: EvaluationConfig,
    *,
    predictions: str | os.PathLike | None = None,
    layout: str = "monai-unc",
    uncertainty: str | os.PathLike | None = None,
    image_z_max: float = IMAGE_Z_MAX,
) -> ReferralRule:
    """The :class:`ReferralRule` of a fitted ``risk_control`` block (what :func:`certify_referral_rule` returns).

    Args:
        rows: every case's row, in case-id order.
        files: per case id, its input files (``image``, ``maps``), as a cohort state records them.
        num_classes: the cohort's number of classes (regions).
        column: the score column the threshold was fitted on.
        rc: the ``risk_control`` block (:class:`monai_unc.products.risk_control.RiskControl`).
        config: the evaluation options.
        predictions: the folder of the evaluated predictions, for the fingerprint (None: no fingerprint).
        layout: its file naming.
        uncertainty: the folder of its uncertainty maps (default from the layout).
        image_z_max: the largest robust z-score of the image statistics of an accepted case.

    Returns:
        The certified rule (not written).

    Raises:
        ValueError: a calibration case's Dice is undefined (:func:`~monai_unc.evaluation.calibration_risks`), the
            block is not the certificate of the rows' calibration cases, or ``predictions`` is an ``infer``
            folder still being written, unfinished or made with two settings (:func:`check_finished_predictions`).
        CaseError: the calibration cases' images have different numbers of channels (naming a case and its files
            for each number).
    """
    rows = list(rows)
    ids = [str(r["case"]) for r in rows]
    cal_ids = ids if rc["calibration"]["cases"] == "all" else [str(c) for c in rc["calibration"]["cases"]]
    if predictions is not None:  # the fingerprint of one finished run, not a list of two runs' settings
        check_finished_predictions(predictions, layout, cal_ids, uncertainty)
    by_id = {str(r["case"]): r for r in rows}
    raw = np.array([as_float(by_id[c].get(column)) for c in cal_ids])
    defined = np.sort(raw[np.isfinite(raw)])
    # an undefined score is referred, in the certification as by the rule: no score stands in for it
    risks = calibration_risks([by_id[c].get("dice") for c in cal_ids], cal_ids, config.risk, config.failure_dice)
    dice = np.array([as_float(by_id[c].get("dice")) for c in cal_ids])
    est = np.array([as_float(by_id[c].get("expected_dice")) for c in cal_ids])  # NaN: no probabilities
    record = CalibrationRecord(
        scores=tuple(float(v) if np.isfinite(v) else None for v in raw),
        dice=tuple(float(v) for v in dice),
        risks=tuple(float(v) for v in risks),
        undefined_score=None,
        n_candidates=RISK_CONTROL_CANDIDATES,
        expected_dice=tuple(float(v) if np.isfinite(v) else None for v in est) if np.isfinite(est).any() else None,
        # what evaluate's expected_dice column estimates (rows.case_expected_dice's default): triage computes the same
        expected_dice_estimate="class_mean" if config.regions is None else "region_mean",
        # the p-value of LTT's tests the block was fitted with (absent: Hoeffding-Bentkus, the default; review 66)
        p_value=str(rc.get("p_value", P_VALUES[0])),
    )
    thr = rc["threshold"]
    threshold = (math.inf if rc["feasible"] else -math.inf) if thr is None else float(thr)
    case_files = [files.get(c) for c in cal_ids]
    map_source = "file" if case_files and all(f and f.get("maps") for f in case_files) else "probabilities"
    reference = None
    if case_files and all(f and f.get("image") for f in case_files):
        rows, seen = [], {}  # seen: {number of channels: (case, image)}, the first case of each
        for f, c in zip(case_files, cal_ids):
            image = read_image_channels(f["image"], "all", case_id=c)  # type: ignore[index]
            rows.append(image_statistics(image))
            seen.setdefault(image.shape[0], (c, f["image"]))  # type: ignore[index]
        if len(seen) > 1:  # one reference needs one number of channels (a stray file grouped in, a 4D NIfTI, ...)
            shown = "; ".join(f"case {c!r} {n} ({', '.join(p.name for p in image_channel_files(img, c))})"
                              for n, (c, img) in sorted(seen.items()))
            raise CaseError(f"the images of the calibration cases have different numbers of channels, e.g. {shown}: "
                            "give every case the same channel files")
        reference = ImageReference.fit(np.stack(rows), image_z_max)
    fp = prediction_fingerprint(predictions, layout, cal_ids, uncertainty) if predictions is not None else {}
    names = tuple(config.class_names) if config.class_names else None
    regions = None if config.regions is None else {k: list(v) for k, v in parse_regions(config.regions).items()}
    if predictions is not None:
        diffs = region_differences(regions, prediction_regions(predictions, layout))
        if diffs:
            warnings.warn(f"the evaluation's regions {diffs[0][1]} are not the regions recorded with the predictions "
                          f"{diffs[0][2]}: monai-unc triage will refuse predictions made like these with this rule",
                          UserWarning, stacklevel=2)
    rule = ReferralRule(
        score=column, threshold=threshold, feasible=bool(rc["feasible"]), target_risk=float(rc["target_risk"]),
        delta=float(rc["delta"]), method=str(rc["method"]), risk=config.risk, failure_dice=config.failure_dice,
        calibration_scores=tuple(float(v) for v in defined), calibration_cases=tuple(cal_ids),
        bound=as_float(rc.get("bound")), coverage=as_float(rc["calibration"].get("coverage")),
        observed_risk=as_float(rc["calibration"].get("risk_accepted")), n_candidates=int(rc.get("n_candidates", 0)),
        n_undefined=int((~np.isfinite(raw)).sum()), patch_size=config.patch_size, map_source=map_source,
        num_classes=int(num_classes), class_names=names, image_reference=reference, fingerprint=fp,
        created=_dt.datetime.now().astimezone().isoformat(timespec="seconds"), regions=regions, record=record,
        # the range of the calibration cases' spacing and voxel counts: triage names a new case outside it (review 62)
        geometry=calibration_geometry([by_id[c] for c in cal_ids]),
    )
    try:
        rule.verify_certificate()
    except ValueError as e:
        raise ValueError(f"the summary's risk_control block is not the certificate of the cohort's calibration "
                         f"cases ({str(e).split(': the file was')[0]})") from None
    return rule


def write_referral_rule(
    output: str | os.PathLike,
    state: CohortState,
    summary: Mapping[str, Any],
    config: EvaluationConfig,
    *,
    predictions: str | os.PathLike | None = None,
    layout: str = "monai-unc",
    uncertainty: str | os.PathLike | None = None,
) -> Path | None:
    """Write ``<output>/referral_rule.json`` when ``config.target_risk`` is set, else remove a stale one.

    The rule is that of :func:`certify_referral_rule`, written atomically as strict JSON; without a target risk an
    earlier evaluation's rule is removed, so that it cannot pass for this one's. Called by
    :func:`monai_unc.evaluation.run_evaluate` on rank 0.

    Args:
        output: the evaluation folder.
        state: the evaluation's cohort state.
        summary: its summary.
        config: the evaluation options.
        predictions: the folder of the evaluated predictions, for the fingerprint.
        layout: its file naming (``monai-unc`` or ``nnunet``).
        uncertainty: the folder of its uncertainty maps (default from the layout).

    Returns:
        The path of the rule file, or None without ``config.target_risk``.

    Raises:
        ValueError: as :func:`certify_referral_rule`.
    """
    path = Path(output) / RULE_FILE
    if config.target_risk is None:
        path.unlink(missing_ok=True)
        return None
    rule = certify_referral_rule(state, summary, config, predictions=predictions, layout=layout,
                                 uncertainty=uncertainty)
    return rule.save(path)


