"""The risk-controlled referral rule as a cohort product: ``monai-unc evaluate --target-risk`` (docs/triage.md).

The acceptance threshold on the case score such that, with probability at least ``1 - delta`` over the calibration
cases, the mean risk of the accepted new cases is at most the target (SGR: Geifman and El-Yaniv, "Selective
Classification for Deep Neural Networks", NeurIPS 2017; Learn then Test: Angelopoulos, Bates, Candes, Jordan, Lei,
"Learn then Test: Calibrating Predictive Algorithms to Achieve Risk Control", 2021). The bound is
:func:`monai_unc.metrics.risk_control.risk_controlled_threshold`; the rule file and its checks are
:mod:`monai_unc.evaluation.triage`. This module is the product itself (:mod:`monai_unc.product`):

==========================  ==========================================================================================
per case                    nothing of its own: the rule reads the case score and Dice of the ``metrics.csv`` rows
fit                         the threshold and its certificate on the calibration cases (a case with an undefined
                            score is referred, in the certification as by the rule: :func:`accepted_by_threshold
                            <monai_unc.metrics.risk_control.accepted_by_threshold>`)
artifact                    ``referral_rule.json``: the threshold, the certificate, the calibration record, the
                            statistics of the calibration images and the fingerprint of the predictions, for
                            ``monai-unc triage``
summary                     the ``risk_control`` block of ``summary.json``: the threshold, the bound, the calibration
                            coverage and risk, the accepted and referred cases (and the held-out cases' figures)
apply                       the rule's decision on a new case (``monai-unc triage`` for a cohort of them)
command line                ``--target-risk``, ``--delta``, ``--risk``, ``--risk-method``, ``--risk-p-value`` and
                            ``--calibration-cases``: evaluation options (``EvaluationConfig``), since ``monai-unc
                            report`` refits the rule with other values of them; the product is on when
                            ``--target-risk`` is given (:meth:`RiskControl.from_config`)
==========================  ==========================================================================================

Because its state is the rows alone, ``monai-unc report --target-risk`` refits it on the saved rows
(:func:`monai_unc.evaluation.resummarize`); the products with per-case states keep the blocks ``evaluate`` wrote.
The module is light (standard library and :mod:`monai_unc.product`); the computations are imported when they run.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..product import CohortProduct, format_cell, format_level, format_target, register_product

__all__ = ["RiskControl", "RULE_FILE", "risk_control_line"]

#: the rule file that ``evaluate --target-risk`` writes in its output folder (``monai-unc triage --rule``)
RULE_FILE = "referral_rule.json"


def risk_control_line(block: Mapping[str, Any]) -> str:
    """The line ``monai-unc evaluate`` prints on the risk-controlled referral threshold.

    Args:
        block: the ``risk_control`` block of ``summary.json`` (its accepted and referred cases are the cohort).

    Returns:
        The rule (``accept score < cut``, the cut being the lowest calibration score it refers, written exactly so
        that the printed rule is the certified one), the calibration coverage, the observed risk and the bound (or
        that no threshold satisfies the target).

    Example:
        >>> risk_control_line({"method": "sgr", "risk": "dice < 0.8", "target_risk": 0.2, "delta": 0.1,
        ...                    "feasible": False, "bound": 0.31}).split(": ")[1]
        'no threshold satisfies the target (best bound 0.3100); refer every case'
    """
    rc = block
    n_cases = len(rc.get("accepted") or ()) + len(rc.get("referred") or ())
    pv = ", binomial p-value" if rc.get("p_value") == "binomial" else ""
    head = (f"risk control ({rc['method']}{pv}, {rc['risk']} <= {format_target(rc['target_risk'])} w.p. "
            f"{format_level(rc['delta'])}): ")
    target = rc["target_risk"]  # the risk and the bound are judged against it: never written equal to it
    if not rc["feasible"]:
        return head + f"no threshold satisfies the target (best bound {format_cell(rc['bound'], 4, target)}); refer " \
            "every case"
    cal = rc["calibration"]
    thr = rc["threshold"]
    if thr is not None and math.isinf(float(thr)):  # the block as fit returns it, before summary.json (null there)
        thr = None  # found by hostile review 55: "accept score < inf (the lowest calibration score it refers)"
    undefined = " (an undefined score is referred)" if cal.get("n_undefined") else ""
    # the certified rule in full: "score < cut" with the cut (the lowest refused calibration score) written exactly;
    # a rounded threshold (0.623106 for 0.62310585677623...) accepted that refused score and the new ones beside it
    accept = (f"accept score < {math.nextafter(float(thr), math.inf)!r} (the lowest calibration score it refers"
              f"{'; an undefined score is referred' if undefined else ''}); ") if thr is not None else (
        "accept every case with a defined score; " if rc["referred"] else "accept every case; ")
    return head + accept + (
        # the coverage never reads 1.000 while a calibration case is referred (found by hostile review 60: 0.9996)
        f"calibration coverage {format_cell(cal['coverage'], 3, 1.0)}, observed risk "
        f"{format_cell(cal['risk_accepted'], 4, target)}, "
        f"bound {format_cell(rc['bound'], 4, target)}; review {len(rc['referred'])} of {n_cases}"
    )


@register_product
class RiskControl(CohortProduct):
    """The risk-controlled referral threshold and its rule file (module docstring).

    Its options are the evaluation's (``target_risk``, ``delta``, ``risk``, ``risk_method``, ``risk_p_value``,
    ``failure_dice``, ``calibration_cases`` of :class:`~monai_unc.evaluation.EvaluationConfig`): the product is on
    when ``target_risk`` is set.

    Example:
        >>> from monai_unc.evaluation import EvaluationConfig
        >>> RiskControl.from_config(EvaluationConfig(target_risk=0.2)).name
        'risk_control'
        >>> RiskControl.from_config(EvaluationConfig()) is None
        True
    """

    name = "risk_control"
    title = "Risk-controlled referral"
    description = ("The acceptance threshold on the case score with a finite-sample guarantee on the mean risk of the "
                   "accepted cases, and the referral rule that monai-unc triage applies to new cases.")
    artifact_file = RULE_FILE
    artifact_format = "monai-unc referral rule"
    fit_sees_cohort = True

    @classmethod
    def from_config(cls, config: Any) -> RiskControl | None:
        """The product when the evaluation options ask for it (``config.target_risk``), else None.

        Args:
            config: the evaluation options.

        Returns:
            An instance or None.
        """
        return cls() if getattr(config, "target_risk", None) is not None else None

    def fit(self, states: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], config: Any) -> Any:
        """The ``risk_control`` block: the threshold fitted on the calibration cases, applied to every case.

        Args:
            states: unused (the product has no per-case state).
            rows: every case's row, in case-id order (:attr:`fit_sees_cohort`).
            config: the evaluation options.

        Returns:
            The block (JSON data), as ``summary.json`` holds it.
        """
        from ..evaluation.cohort import (
            RISK_CONTROL_CANDIDATES,
            calibration_mask,
            calibration_risks,
            column_values,
            failure_dice_text,
            score_column,
        )
        from ..metrics.risk_control import accepted_by_threshold, no_certificate_message, risk_controlled_threshold_core

        ids = [str(r["case"]) for r in rows]
        column = score_column(rows, config.score)
        scores = column_values(rows, column)  # NaN: undefined, referred here as by the rule (accepted_by_threshold)
        is_cal = calibration_mask(ids, config)
        risk = calibration_risks([r.get("dice") for r in rows], ids, config.risk, config.failure_dice)
        method = config.resolved_risk_method
        p_value = getattr(config, "risk_p_value", "hoeffding_bentkus")
        res = risk_controlled_threshold_core(scores[is_cal], risk[is_cal], config.target_risk, config.delta,
                                             method=method, n_candidates=RISK_CONTROL_CANDIDATES, undefined="refer",
                                             p_value=p_value)
        if not res.feasible:  # "no threshold certifies ...": at the caller's line, not at this one
            warnings.warn(no_certificate_message(res), UserWarning, stacklevel=2)
        accept = accepted_by_threshold(scores, res.threshold)
        held = ~is_cal
        out: dict[str, Any] = {
            "target_risk": config.target_risk,
            "delta": config.delta,
            "risk": f"dice < {failure_dice_text(config.failure_dice)}" if config.risk == "failure" else "1 - dice",
            "method": method,
            **({"p_value": p_value} if p_value != "hoeffding_bentkus" else {}),  # absent: the default, as before
            "feasible": res.feasible,
            "threshold": res.threshold,
            "bound": res.bound,
            "n_candidates": res.n_candidates,
            "calibration": {
                "n_cases": int(is_cal.sum()),
                "cases": "all" if config.calibration_cases is None else [c for c, k in zip(ids, is_cal) if k],
                "coverage": res.coverage,
                "risk_accepted": res.risk,
                "n_undefined": res.n_undefined,
            },
            "accepted": [c for c, a in zip(ids, accept) if a],
            "referred": [c for c, a in zip(ids, accept) if not a],
            "referral_fraction": float(1.0 - accept.mean()),
        }
        if held.any():
            acc = accept & held
            out["held_out"] = {
                "n_cases": int(held.sum()),
                "coverage": float(acc.sum() / held.sum()),
                "risk_accepted": float(risk[acc].mean()) if acc.any() else None,
            }
        return out

    def summarize(self, states: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], artifact: Any,
                  config: Any) -> Any:
        """The ``risk_control`` block of ``summary.json``: what :meth:`fit` returned.

        Args:
            states: unused.
            rows: unused.
            artifact: the block of :meth:`fit`.
            config: unused.

        Returns:
            The block.
        """
        return artifact

    def write_artifact(self, path: str | os.PathLike, artifact: Any, calibration_cases: Sequence[str],
                       inputs: Mapping[str, Any], config: Any) -> Path | None:
        """Write ``referral_rule.json``: the certified rule (:func:`monai_unc.evaluation.triage.certify.certify_rule`).

        Args:
            path: the rule file.
            artifact: the ``risk_control`` block of :meth:`fit`.
            calibration_cases: unused (the block names them).
            inputs: the evaluation's inputs: ``predictions``, ``layout``, ``uncertainty``, and the cohort's ``rows``,
                ``files`` (per case: image and map files) and ``num_classes``.
            config: the evaluation options.

        Returns:
            The path written.
        """
        from ..evaluation.cohort import score_column
        from ..evaluation.triage.certify import certify_rule

        rows = inputs["rows"]
        rule = certify_rule(rows, inputs.get("files") or {}, int(inputs["num_classes"]),
                            score_column(rows, config.score), artifact, config,
                            predictions=inputs.get("predictions"), layout=inputs.get("layout") or "monai-unc",
                            uncertainty=inputs.get("uncertainty"))
        return rule.save(Path(path))

    def apply(self, case: Any, artifact: Any, *, layout: str = "monai-unc",
              uncertainty: str | os.PathLike | None = None, allow_mismatch: bool = False, trust: Any = None) -> Any:
        """The rule's decision on one new, unlabelled case, as ``monai-unc triage`` makes it.

        As triage does, the predictions the case belongs to (the folder of its segmentation) are first compared with
        the rule's fingerprint and regions (:func:`~monai_unc.io.provenance.check_prediction_fingerprint`): a case of
        predictions made otherwise than the rule's calibration predictions is refused, since the rule's guarantee
        does not hold for it (in earlier versions this decision skipped the check that triage makes). A case
        without an image under a rule that holds its calibration images' statistics is decided without the image
        check, with a ``UserWarning`` (triage's note), and a case resampled or cropped otherwise than the rule's
        calibration cases with triage's ``UserWarning`` naming it
        (:meth:`~monai_unc.evaluation.triage.ReferralRule.check_case_geometry`).

        Args:
            case: the case's files (:class:`~monai_unc.io.CaseFiles` of
                :func:`~monai_unc.evaluation.triage.find_prediction_cases`: segmentation, probabilities or maps, image).
            artifact: a :class:`~monai_unc.evaluation.triage.ReferralRule` or the path of a ``referral_rule.json``
                (read with its checks).
            layout: the layout of the case's prediction folder (``"monai-unc"`` or ``"nnunet"``).
            uncertainty: the folder of the maps when not where the layout puts them (default: the folder of the
                case's map of the rule's measure when it lies elsewhere).
            allow_mismatch: decide a case of predictions whose fingerprint differs, with a ``UserWarning`` saying
                that the guarantee does not cover it (``triage --allow-mismatch``), instead of raising.
            trust: the signature a rule file must carry (:meth:`~monai_unc.evaluation.triage.ReferralRule.load`), or
                None (not checked).

        Returns:
            The :class:`~monai_unc.evaluation.triage.Decision` (accept or refer, with the reasons) of
            :meth:`~monai_unc.evaluation.triage.ReferralRule.apply` on the case's label-free row
            (:func:`~monai_unc.evaluation.triage.triage_case`).

        Raises:
            FingerprintMismatch: the predictions were not made like the rule's calibration predictions (without
                ``allow_mismatch``).
            TypeError: ``allow_mismatch`` is not a bool.
        """
        import warnings

        from ..evaluation.triage import ReferralRule, triage_case
        from ..evaluation.triage.runner import mismatch_fields
        from ..io.provenance import check_prediction_fingerprint, load_rule

        if not isinstance(allow_mismatch, bool):  # "no" allowed a mismatch in triage (hostile testing)
            raise TypeError(f"allow_mismatch must be True or False, got {allow_mismatch!r:.80}")
        rule = load_rule(artifact, ReferralRule, trust)
        seg = Path(case.seg if case.seg is not None else case.label)  # a prediction case's segmentation: its label
        predictions = seg.parent
        if uncertainty is None and rule.measure in case.maps:
            found = case.maps[rule.measure]  # a map written one file per region: its files' folder
            folder = Path(found[0] if isinstance(found, tuple) else found).parent
            default = predictions if layout == "monai-unc" else predictions / "uncertainty"
            uncertainty = None if folder.resolve() == default.resolve() else folder
        check = check_prediction_fingerprint(rule.fingerprint, rule.regions, predictions, layout, [case.case_id],
                                             uncertainty, allow_mismatch)
        mismatch = mismatch_fields(check)
        if mismatch is not None:
            warnings.warn(f"case {case.case_id!r}: {rule.guarantee(mismatch)}", UserWarning, stacklevel=2)
        row = triage_case(case, rule)
        rule.check_case_geometry(case.case_id, row.get("spacing"), row.get("voxels"))  # triage's warning (review 62)
        stats = None if row.get("image_stats") is None else [row["image_stats"]]
        if stats is None and rule.image_reference is not None:  # triage notes it (found by hostile review 60)
            warnings.warn(f"case {case.case_id!r}: image check skipped: the rule holds statistics of its calibration "
                          "images, but the case has no image", UserWarning, stacklevel=2)
        return rule.apply([row.get(rule.score, float("nan"))], stats)[0]

    @classmethod
    def artifact_fingerprint(cls, path: Path, trust: Any = None) -> tuple[str, dict[str, Any]]:
        """The fingerprint ``referral_rule.json`` recorded (:meth:`~monai_unc.evaluation.triage.ReferralRule.load`).

        Args:
            path: the rule file.
            trust: the signature checked as ``triage`` checks it (a :class:`~monai_unc.io.signing.Trust`), or None.

        Returns:
            ``("referral rule <path>", fingerprint)``.
        """
        from ..evaluation.triage import ReferralRule

        return f"referral rule {path}", dict(ReferralRule.load(path, trust).fingerprint)

    @classmethod
    def summary_lines(cls, block: Mapping[str, Any]) -> list[str]:
        """The line on the threshold (:func:`risk_control_line`).

        Args:
            block: the ``risk_control`` block of ``summary.json``.

        Returns:
            One line.
        """
        return [risk_control_line(block)]

    @classmethod
    def artifact_lines(cls, path: Path) -> list[str]:
        """The line on the rule file.

        Args:
            path: the rule file.

        Returns:
            One line: the path and how to apply it to new cases.
        """
        return [f"wrote {path} (apply it to new cases: monai-unc triage --rule {path} ...)"]
