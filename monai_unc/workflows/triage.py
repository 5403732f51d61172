"""Both triage steps on one evaluated cohort.

Certify a referral rule on some labelled cases and triage the others as if they were new and unlabelled
(:func:`certify_and_triage`; used by ``monai-unc demo`` and docs/triage.md).

The rule is certified from the saved evaluation (:func:`monai_unc.evaluation.summarize` with a target risk and the
calibration cases, then :func:`monai_unc.evaluation.triage.certify_referral_rule`), so nothing is evaluated twice;
the other cases are triaged from their prediction files only (:func:`monai_unc.evaluation.triage.run_triage`), as
``monai-unc triage`` would, and the page is written by :func:`monai_unc.report.triage.build_triage_page`.
:func:`triage_command` is ``monai-unc triage`` itself: :func:`monai_unc.workflows.report.triage_with_page` inside the
command's session (process group and failed-cases step).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..engine import DistContext, start_notice
from ..evaluation import CohortState, EvaluationConfig, summarize
from ..evaluation.cohort import failure_dice_text, risk_of_dice
from ..evaluation.triage import (
    RULE_FILE,
    ReferralRule,
    TriageResult,
    certify_referral_rule,
    mismatch_fields,
    run_triage,
)
from ..io.provenance import RuleRead
from ..product import (
    ThresholdText,
    format_cell,
    format_estimate,
    format_level,
    format_score,
    format_share,
    format_target,
)
from ..report.triage import build_triage_page
from ..report.viewer import check_convention
from .apply import (
    beside_triage_folder,
    layout_from_rule,
    product_of_command,
    product_rule_options,
    rules_from_options,
    trust_from_arguments,
    unsigned_notice,
)
from .monitor import check_store, check_store_outside_inputs, record_triage
from .report import triage_with_page
from .session import CommandResult, quiet_lines, run_command

__all__ = ["certify_and_triage", "format_triage", "triage_outcome", "format_outcome", "triage_command",
           "triage_from_arguments", "triage_summary"]


def triage_command(
    predictions: str | os.PathLike,
    rule: Any,
    output: str | os.PathLike,
    *,
    dist: DistContext | None = None,
    **options: Any,
) -> CommandResult[tuple[TriageResult, Path | None]]:
    """The whole of ``monai-unc triage`` on one process or on every rank of a ``torchrun`` job.

    Args:
        predictions: folder of the new cases' predictions.
        rule: a :class:`~monai_unc.evaluation.triage.ReferralRule`, the path of its ``referral_rule.json`` or that
            file read and verified once (a :class:`~monai_unc.io.provenance.RuleRead` with ``trust``).
        output: output folder (``triage.csv``, ``triage.json``, ``triage.html``, ``state/``).
        dist: a rank context the caller holds (its group is left alone), or None: join the process group or
            create one from torchrun's environment, and destroy one created here at the end.
        **options: the keyword arguments of :func:`monai_unc.workflows.report.triage_with_page` (``images``,
            ``allow_mismatch``, ``layout``, ``uncertainty``, ``cases``, ``progress``, ``trust``, ``convention`` and the
            products' ``<command>_rule``).

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of ``(result, page)`` (``page`` None on ranks other
        than 0). Raises :class:`~monai_unc.workflows.session.CohortFailed` on every rank when cases failed (rank 0
        has printed which).
    """
    out = Path(output).resolve()
    applied = {command: beside_triage_folder(out, command) for command in rules_from_options(options)}
    return run_command("triage", out, lambda ctx: triage_with_page(predictions, rule, out, dist=ctx, **options),
                       dist=dist, summary=lambda value: triage_summary(value[0], value[1], out, applied))


def triage_summary(result: TriageResult, page: Path | None, output: Path,
                   applied: Mapping[str, Path] | None = None) -> list[str]:
    """What ``monai-unc triage`` prints after a run.

    Args:
        result: the run's :class:`~monai_unc.evaluation.triage.TriageResult`.
        page: the ``triage.html`` written.
        output: the output folder.
        applied: ``{command: folder}`` of the products' commands run beside the triage (``--<command>-rule``).

    Returns:
        The lines: decisions and reasons, the guarantee of the accepted cases, the fingerprint check and notes, the
        files written.
    """
    s = result.summary
    reasons = ", ".join(f"{k} {v}" for k, v in s["reasons"].items() if k != "accepted") or "none"
    lines = [f"{s['n_cases']} case(s): accept {s['n_accepted']}, review {s['n_review']} ({reasons})",
             f"accepted cases: {s['accepted_risk']['statement']}"]
    if s["fingerprint"]["status"] == "mismatch":
        lines.append("WARNING: fingerprint mismatch allowed (--allow-mismatch): the guarantee does not cover these "
                     "cases")
    elif s["fingerprint"]["status"] == "unverified":
        lines.append("note: no record of how the predictions were made: the rule could not check their fingerprint")
    if s.get("rule_signature") and not s["rule_signature"].startswith("UNSIGNED"):
        lines.append(f"rule {s['rule_signature']}")
    lines += [f"note: {note}" for note in s["notes"]]
    if s.get("not_triaged"):  # inputs without a prediction: also a warning line, and in triage.json
        left = s["not_triaged"]
        lines.append(f"WARNING: {len(left)} case(s) NOT triaged (no prediction): "
                     + ", ".join(repr(c) for c in left[:10]) + (" ..." if len(left) > 10 else ""))
    for command, folder in (applied or {}).items():
        lines += product_of_command(command).applied_lines(folder)
    return [*lines, f"wrote {output / 'triage.csv'} and {page}"]


def certify_and_triage(
    state: CohortState,
    config: EvaluationConfig,
    predictions: str | os.PathLike,
    output: str | os.PathLike,
    calibration_cases: Sequence[str],
    new_cases: Sequence[str],
    *,
    target_risk: float,
    delta: float = 0.1,
    risk: str = "failure",
    images: str | os.PathLike | None = None,
    layout: str = "monai-unc",
    n_overlays: int = 4,
    progress: bool = False,
    convention: str = "neurological",
) -> tuple[ReferralRule, TriageResult, Path]:
    """Certify on ``calibration_cases`` of an evaluated cohort, triage ``new_cases`` without their labels.

    Writes ``<output>/referral_rule.json`` and the triage files (``triage.csv``, ``triage.json``, ``triage.html``)
    under ``<output>``. The two case lists must be disjoint. The threshold is risk-controlled
    (:func:`monai_unc.metrics.risk_control.risk_controlled_threshold`: Geifman and El-Yaniv, "Selective
    Classification for Deep Neural Networks"; Angelopoulos, Bates, Candes, Jordan, Lei, "Learn then Test:
    Calibrating Predictive Algorithms to Achieve Risk Control").

    Args:
        state: the evaluated cohort's saved state.
        config: the evaluation's configuration.
        predictions: the folder of the cohort's predictions (the new cases are triaged from these files).
        output: the output folder.
        calibration_cases: the labelled cases the rule is certified on.
        new_cases: the cases triaged as if new and unlabelled.
        target_risk: the mean risk of the accepted cases to guarantee, in (0, 1).
        delta: the guarantee holds with probability at least ``1 - delta``.
        risk: the per-case risk, ``"failure"`` or ``"1-dice"``.
        images: the images folder, for the page's overlays and the image reference (None: without).
        layout: the predictions' file layout (``"monai-unc"`` or ``"nnunet"``).
        n_overlays: overlays on the page.
        progress: progress bars on stderr.
        convention: how the page's case figures and viewers draw the patient's sides: ``"neurological"`` (default)
            or ``"radiological"`` (:data:`monai_unc.report.viewer.CONVENTIONS`).

    Returns:
        ``(rule, result, page)``: the :class:`~monai_unc.evaluation.triage.ReferralRule`, the
        :class:`~monai_unc.evaluation.triage.TriageResult` and the path of ``triage.html``.

    Raises:
        ValueError: overlapping or empty case lists, an invalid target risk or delta, or a ``convention`` that is
            neither convention (before anything is written).
    """
    convention = check_convention(convention)
    cal, new = [str(c) for c in calibration_cases], [str(c) for c in new_cases]
    if set(cal) & set(new):
        raise ValueError(f"calibration_cases and new_cases overlap: {sorted(set(cal) & set(new))[:5]}")
    if not cal or not new:
        raise ValueError("calibration_cases and new_cases must both name at least one case")
    cfg = dataclasses.replace(config, target_risk=target_risk, delta=delta, risk=risk, risk_method=None,
                              risk_p_value="hoeffding_bentkus", calibration_cases=cal)
    # "no threshold certifies ...": summarize lists it in the summary (the rule records it) and does not raise it, so
    # nothing is filtered here (a process-wide filter hid every UserWarning of summarize, found by review 70)
    summary = summarize(state, cfg)
    rule = certify_referral_rule(state, summary, cfg, predictions=predictions, layout=layout)
    output = Path(output)
    rule.save(output / RULE_FILE)
    result = run_triage(predictions, rule, output, images=images, layout=layout, cases=new, progress=progress)
    page = build_triage_page(output, n_cases=n_overlays, convention=convention)
    return rule, result, page


def format_triage(rule: ReferralRule, result: TriageResult, extra: Mapping[str, Mapping[str, Any]] | None = None
                  ) -> list[str]:
    """Printable lines of a triage.

    The rule, one line per case (most uncertain first: rank, case, score, the ``extra`` columns given per case, e.g. a
    Dice known only to the demo, the expected Dice with its interval when the cases have one, decision,
    reason), the counts and, with expected Dice, what its interval guarantees
    (:meth:`~monai_unc.evaluation.triage.ReferralRule.interval_statement`).

    Args:
        rule: the rule that triaged the cases.
        result: the triage.
        extra: per case, more columns ``{column: value}`` (None: none).

    Returns:
        The lines (no trailing newlines).
    """
    s = result.summary
    cal = rule.score_range
    head = (f"referral rule certified on {rule.n_calibration} case(s): {rule.method.upper()}, "
            f"{rule.risk_definition} <= {format_target(rule.target_risk)} w.p. {format_level(rule.delta)}; ")
    # the scores and the threshold in digits that never print a score on the other side equal to the threshold
    thr = (ThresholdText.choose(rule.threshold, [c["score"] for c in s["cases"] if c["score"] is not None])
           if rule.feasible and rule.threshold != float("inf") else None)
    bound = format_cell(rule.bound, 3, rule.target_risk)  # judged against the target: never written equal to it
    if rule.feasible:
        head += ("accept every score" if thr is None else f"accept {rule.score} {thr.relation(True)} "
                 f"{thr.bound_text()}") + f" (calibration coverage {format_cell(rule.coverage, 2, 1.0)}, bound {bound})"
    else:
        # the count is not always why (found by hostile review 60: 500 cases, 60 % failing, read "so few cases")
        head += (f"not certified on these {rule.n_calibration} calibration cases (best bound {bound}): every new case "
                 "goes to review")
    lines = [head]
    if cal is not None:
        lines.append(f"calibration score range [{format_score(cal[0])}, {format_score(cal[1])}]; image check: "
                     f"{s['image_check']}")
    extra = extra or {}
    keys = sorted({k for v in extra.values() for k in v})
    has_q = any("expected_dice" in c for c in s["cases"])
    rec = rule.record
    q_head = ("exp. Dice (uncalibrated)" if rec is None or rec.expected_dice is None else
              f"exp. Dice [{format_level(rec.interval_alpha, percent=True)} conf.]")
    lines.append(f"{'rank':>4}  {'case':<16} {'score':>8}  " + "".join(f"{k:>8}  " for k in keys)
                 + (f"{q_head:<24}  " if has_q else "") + "rule decision  reason")
    by_id = {c["case"]: c for c in s["cases"]}
    for i, cid in enumerate(s["order"], 1):
        c = by_id[cid]
        score = "undefined" if c["score"] is None else (format_score if thr is None else thr.score)(c["score"])
        cols = "".join(f"{_cell(extra.get(cid, {}).get(k)):>8}  " for k in keys)
        if has_q:
            cols += f"{_expected_dice_cell(c, rule):<24}  "
        lines.append(f"{i:>4}  {cid:<16} {score:>8}  {cols}{'rule: ' + c['decision']:<13}  {c['reason']}")
    lines.append(f"triage of {s['n_cases']} new case(s) without labels: accept {s['n_accepted']}, review "
                 f"{s['n_review']}")
    if has_q:  # under --allow-mismatch: that its coverage does not hold for these cases
        lines.append(rule.interval_statement(mismatch_fields(s["fingerprint"])))
    return lines


def _expected_dice_cell(c: Mapping[str, Any], rule: ReferralRule | None = None) -> str:
    """``0.93 [0.78, 1.00]``: a triaged case's expected Dice and its interval (the estimate alone without).

    The interval's ends are rounded outward (:func:`~monai_unc.product.format_interval`), so the printed interval
    contains the computed one; with a ``rule`` the estimate never reads equal to its ``judged_dice`` (the failure Dice
    of a failure risk) or on its other side (earlier versions read 0.795 as ``0.80`` under "dice < 0.8").
    """
    v = c.get("expected_dice")
    if v is None:
        return ""
    return format_estimate(v, c.get("expected_dice_low"), c.get("expected_dice_high"),
                           threshold=None if rule is None else rule.judged_dice)


def triage_outcome(rule: ReferralRule, result: TriageResult, dice: Mapping[str, float]) -> dict[str, Any]:
    """What happened to triaged cases whose Dice is known (the demo's new cases).

    The realised risk of the accepted ones, beside the rule's target.

    Args:
        rule: the rule that triaged them.
        result: the triage (:func:`~monai_unc.evaluation.triage.run_triage`).
        dice: ``{case: Dice}`` for every triaged case (a missing case is a ``ValueError``).

    Returns:
        ``{"n_cases", "n_accepted", "n_referred", "reasons"`` (referred cases per reason code)``, "risk"`` (the
        rule's risk in words)``, "target_risk", "delta", "feasible", "accepted", "referred"`` (case ids)``,
        "n_failed_accepted", "risk_accepted"`` (mean risk of the accepted cases; None when none was accepted)``,
        "n_failed_referred"``, ``"n_interval"``, ``"n_interval_covered"`` (cases with an expected-Dice
        interval, and those whose Dice lies inside it)``, "interval_missed"`` (ids of the others)``}``; a failure is a
        risk of 1 (``risk="failure"``) or, for ``"1-dice"``, a Dice below the rule's failure Dice.
    """
    cases = result.summary["cases"]
    missing = [c["case"] for c in cases if c["case"] not in dice]
    if missing:
        raise ValueError(f"dice has no value for the triaged case(s) {missing[:5]}")
    accepted = [c["case"] for c in cases if c["decision"] == "accept"]
    referred = [c["case"] for c in cases if c["decision"] != "accept"]
    reasons: dict[str, int] = {}
    for c in cases:
        if c["decision"] != "accept":
            reasons[c["code"]] = reasons.get(c["code"], 0) + 1

    with_iv = [c for c in cases if c.get("expected_dice_low") is not None and c.get("expected_dice_high") is not None]
    missed = [c["case"] for c in with_iv if not c["expected_dice_low"] <= dice[c["case"]] <= c["expected_dice_high"]]

    def risks(ids: Sequence[str]) -> np.ndarray:
        return risk_of_dice([dice[c] for c in ids], rule.risk, rule.failure_dice)

    def failed(ids: Sequence[str]) -> int:
        return int((risk_of_dice([dice[c] for c in ids], "failure", rule.failure_dice) > 0).sum())

    return {
        "n_cases": len(cases), "n_accepted": len(accepted), "n_referred": len(referred), "reasons": reasons,
        "risk": rule.risk_definition, "target_risk": rule.target_risk, "delta": rule.delta,
        "feasible": rule.feasible, "accepted": accepted, "referred": referred,
        "n_failed_accepted": failed(accepted),
        "risk_accepted": float(risks(accepted).mean()) if accepted else None,
        "n_failed_referred": failed(referred),
        "n_interval": len(with_iv),
        "n_interval_covered": len(with_iv) - len(missed),
        "interval_missed": missed,
    }


def format_outcome(rule: ReferralRule, outcome: Mapping[str, Any]) -> list[str]:
    """Printable lines of :func:`triage_outcome`: what was guaranteed, and what happened.

    Args:
        rule: the rule that triaged the cases.
        outcome: what :func:`triage_outcome` returned.

    Returns:
        The lines (no trailing newlines).
    """
    # a 1 - Dice rule bounds the mean 1 - Dice, not a share of failures (found by hostile review 59: "at most 0.2 of
    # the new cases ... fail (1 - dice)"); its failures are counted at the rule's failure Dice
    failure = rule.risk == "failure"
    failed_by = rule.risk_definition if failure else f"dice < {failure_dice_text(rule.failure_dice)}"
    if rule.feasible:
        promise = (f"at most {format_target(rule.target_risk)} of the new cases the threshold accepts fail "
                   f"({rule.risk_definition}) on average" if failure else
                   f"the mean risk ({rule.risk_definition}) of the new cases the threshold accepts is at most "
                   f"{format_target(rule.target_risk)}")
        lines = [f"guaranteed: {promise}, with probability >= {format_level(rule.delta)} over the "
                 f"{rule.n_calibration} calibration cases ({rule.method.upper()}; calibration: "
                 f"{format_share(round(rule.coverage * rule.n_calibration), rule.n_calibration)} "
                 f"accepted, observed risk {format_cell(rule.observed_risk, 3, rule.target_risk)}, bound "
                 f"{format_cell(rule.bound, 3, rule.target_risk)}); the range and image "
                 "checks refer some of them too (docs/triage.md: what the certificate covers)"]
    else:
        lines = [f"guaranteed: nothing; no threshold certifies mean risk ({rule.risk_definition}) <= "
                 f"{format_target(rule.target_risk)} with "
                 f"probability {format_level(rule.delta)} on {rule.n_calibration} calibration cases (best bound "
                 f"{format_cell(rule.bound, 3, rule.target_risk)}), so every new case goes to review"]
    why = ", ".join(f"{n} {_REASONS.get(k, k)}" for k, n in sorted(outcome["reasons"].items(), key=lambda kv: -kv[1]))
    lines.append(f"happened: {outcome['n_cases']} new case(s) triaged without labels: {outcome['n_accepted']} "
                 f"accepted, {outcome['n_referred']} referred" + (f" ({why})" if why else ""))
    if outcome["n_accepted"]:
        lines.append(f"realised (labels known to the demo only): {outcome['n_failed_accepted']} of "
                     f"{outcome['n_accepted']} accepted new case(s) failed ({failed_by}): "
                     f"{'risk' if failure else f'mean risk ({rule.risk_definition})'} "
                     f"{format_cell(outcome['risk_accepted'], 3, rule.target_risk)} vs the target "
                     f"{format_target(rule.target_risk)}; "
                     f"{outcome['n_failed_referred']} of {outcome['n_referred']} referred case(s) failed")
    else:
        lines.append(f"realised (labels known to the demo only): no new case accepted; {outcome['n_failed_referred']}"
                     f" of {outcome['n_referred']} referred case(s) failed ({failed_by})")
    if outcome.get("n_interval"):
        missed = outcome["interval_missed"]
        level = "" if rule.record is None else (f" ({format_level(rule.record.interval_alpha, percent=True)} target "
                                                "for exchangeable cases)")
        lines.append(f"expected Dice intervals: the real Dice lies inside for {outcome['n_interval_covered']} of "
                     f"{outcome['n_interval']} new case(s){level}" + (f"; outside: {', '.join(missed)}" if missed
                                                                         else ""))
    return lines


#: the reason codes of :meth:`~monai_unc.evaluation.triage.ReferralRule.apply` in words (format_outcome)
_REASONS = {"not_certified": "rule not certified", "undefined_score": "score undefined",
            "outside_range": "score outside the calibration range", "image_statistics": "image far from the "
            "calibration images", "above_threshold": "score above the threshold"}


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return "" if v is None else str(v)


def triage_from_arguments(args: argparse.Namespace) -> CommandResult[tuple[TriageResult, Path | None]]:
    """``monai-unc triage`` on its parsed arguments (:func:`monai_unc.workflows.arguments.add_command_parsers`).

    Args:
        args: the parsed arguments of ``monai-unc triage``.

    With ``--monitor DB`` rank 0 then records the run into the monitoring store
    (:func:`monai_unc.workflows.monitor.record_triage`). The store is opened before any work
    (:func:`~monai_unc.workflows.monitor.check_store`: one line, exit status 2); the triage outputs are written
    before the recording, so a store lost in between leaves them in place (a ``ValueError`` that says so).

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of :func:`triage_command`; its ``lines`` are its
        warning lines alone with ``--quiet`` (:func:`~monai_unc.workflows.session.quiet_lines`). Raises as
        :func:`triage_command`.
    """
    monitor_db = getattr(args, "monitor", None)
    if monitor_db is not None:  # the store opens before any work (found by hostile testing: a bad store was found
        # only once the whole cohort was triaged)
        try:
            check_store_outside_inputs(monitor_db, args.predictions, args.images, args.uncertainty, args.rule,
                                       *product_rule_options(args).values())
            check_store(monitor_db, output=args.output)  # a store in -o, which the triage creates
        except (ValueError, OSError) as e:
            raise ValueError(f"--monitor: {e}") from None
    trust = trust_from_arguments(args)
    # the rule read and verified once (found by review 73: the layout came from a first, unverified read of the file
    # and the triage from a second, verified one; a file rewritten in between gave two rules): the layout, the checks
    # and the triage act on this one version, and a refusal of the file is raised where the triage refuses it
    rule = RuleRead(args.rule, ReferralRule.load, trust)
    # the layout the rule records unless --layout is given (found by review 64: nnU-Net predictions needed the option)
    layout, layout_notice = layout_from_rule(args.layout, rule, args.predictions)
    with start_notice(layout_notice, unsigned_notice(args)):  # said once the checks passed and the cases are triaged
        res = triage_command(
            args.predictions, rule, args.output, images=args.images, allow_mismatch=args.allow_mismatch,
            layout=layout, uncertainty=args.uncertainty, cases=args.cases, progress=not args.quiet,
            trust=trust, convention=getattr(args, "convention", "neurological"),
            **product_rule_options(args),
        )  # fmt: skip
    if monitor_db is not None and res.is_main:
        try:
            recorded = record_triage(monitor_db, res.output, site=getattr(args, "site", None),
                                     command=["monai-unc", *sys.argv[1:]])
        except (ValueError, OSError, ImportError) as e:
            raise ValueError(f"the triage outputs are written to {res.output}, but recording them into the "
                             f"monitoring store failed: {e}") from None
        res = dataclasses.replace(res, lines=(*res.lines, *recorded.lines))
    return dataclasses.replace(res, lines=quiet_lines(res.lines)) if args.quiet else res
