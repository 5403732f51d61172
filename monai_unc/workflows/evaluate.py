"""``monai-unc evaluate`` as a workflow.

:func:`evaluate_command` is :func:`monai_unc.evaluation.run_evaluate` inside the command's session (process group
and failed-cases step, :func:`monai_unc.workflows.session.run_command`); :func:`evaluate_from_arguments` is the
command on its parsed arguments (:func:`~monai_unc.workflows.prepare.prepare_evaluate`, then
:func:`evaluate_command`) and :func:`evaluate_summary_lines` what it prints.
"""

from __future__ import annotations

import argparse
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..engine import DistContext
from ..evaluation import CohortState, EvaluationConfig, check_risk_options, run_evaluate
from ..evaluation.config import check_ignore_label
from ..evaluation.products import implicit_products
from ..io import nnunet_dataset_ignore_label, output_lock_holder, read_json_cached
from ..product import format_cell, format_fraction, products_from_arguments
from ..products.risk_control import risk_control_line as _risk_control_line
from .arguments import EXPLICIT_OPTIONS
from .prepare import prepare_evaluate
from .session import WARNING_PREFIX, CommandResult, quiet_lines, run_command

__all__ = [
    "evaluate_command", "evaluate_from_arguments", "evaluate_ignore_label", "evaluate_summary_lines",
    "risk_control_line", "warning_lines",
]


def evaluate_command(
    labels: str | os.PathLike,
    predictions: str | os.PathLike,
    output: str | os.PathLike,
    config: EvaluationConfig,
    *,
    dist: DistContext | None = None,
    **options: Any,
) -> CommandResult[tuple[CohortState | None, dict[str, Any], dict[str, Path]]]:
    """The whole of ``monai-unc evaluate`` on one process or on every rank of a ``torchrun`` job.

    Args:
        labels: folder of reference label maps.
        predictions: folder of predictions (``infer`` or nnU-Net outputs).
        output: output folder (``metrics.csv``, ``summary.json``, ``state/``); a report page in
            ``<output>/report`` made from an earlier evaluation of it is removed with a warning
            (:func:`monai_unc.report.html.remove_stale_report`).
        config: the evaluation's options (:func:`monai_unc.workflows.prepare_evaluate`).
        dist: a rank context the caller holds (its group is left alone), or None: join the process group or
            create one from torchrun's environment, and destroy one created here at the end.
        **options: the keyword arguments of :func:`monai_unc.evaluation.run_evaluate` (``layout``,
            ``uncertainty``, ``images``, ``measures``, ``allow_missing``, ``progress``, ...).

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of ``(state, summary, paths)`` (``state`` None on
        ranks other than 0). Raises :class:`~monai_unc.workflows.session.CohortFailed` on every rank when cases
        failed (rank 0 has printed which).
    """
    out = Path(output).resolve()

    def work(ctx: DistContext) -> tuple[CohortState | None, dict[str, Any], dict[str, Path]]:
        try:
            return run_evaluate(labels, predictions, output, config, dist=ctx, **options)
        finally:  # the outputs changed (or were removed by a failed run): a page of the earlier ones goes too
            # unless another run holds the folder (this run was refused: it removes nothing; found by the hostile
            # review of two runs at once, review 64): that run decides about the page when it ends
            # only a folder holding a report page has one to check: the report's modules (matplotlib, ~1 s to
            # import) load then, not on every evaluate (the check finds nothing without <output>/report)
            page = None
            if ctx.is_main and (out / "report").is_dir() and output_lock_holder(out) is None:
                from ..report.html import remove_stale_report

                page = remove_stale_report(out)
            if page is not None:
                warnings.warn(f"removed {page}: it showed an earlier evaluation of this folder; run monai-unc report "
                              "again", UserWarning, stacklevel=2)

    return run_command("evaluate", out, work, dist=dist)


def evaluate_from_arguments(
    args: argparse.Namespace,
) -> CommandResult[tuple[CohortState | None, dict[str, Any], dict[str, Path]]]:
    """``monai-unc evaluate`` on its parsed arguments (:func:`monai_unc.workflows.arguments.add_command_parsers`).

    The configuration is that of :func:`~monai_unc.workflows.prepare.prepare_evaluate` (checked before any work),
    the products' options included (:func:`monai_unc.product.products_from_arguments`); then
    :func:`evaluate_command`.

    Args:
        args: the parsed arguments of ``monai-unc evaluate``.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of :func:`evaluate_command`, with the lines of
        :func:`evaluate_summary_lines` on rank 0 (with ``--quiet`` its warning lines alone,
        :func:`~monai_unc.workflows.session.quiet_lines`). Raises as :func:`evaluate_command`.
    """
    # found by hostile testing: --delta 0.05 without --target-risk was ignored without a word (its default is 0.1, so
    # only the options given on the command line can tell)
    check_risk_options(args.target_risk, getattr(args, EXPLICIT_OPTIONS, ()))
    ignore, found = evaluate_ignore_label(args.ignore_label, args.predictions, args.layout)
    config = prepare_evaluate(
        args.labels, args.predictions, args.output, uncertainty=args.uncertainty, images=args.images,
        shifts=args.shifts, calibration_cases=args.calibration_cases, regions=args.regions, measure=args.measure,
        score=args.score, n_bins=args.n_bins, min_bin_count=args.min_bin_count, failure_dice=args.failure_dice,
        budget=args.budget, patch_size=args.patch_size, spatial=not args.no_spatial, num_classes=args.num_classes,
        class_names=args.class_names, target_risk=args.target_risk, delta=args.delta, risk=args.risk,
        risk_method=args.risk_method, risk_p_value=args.risk_p_value,
        ignore_unclaimed_labels=args.ignore_unclaimed_labels, ignore_label=ignore,
        seg_label_values=args.seg_label_values, seg_regions=args.seg_regions, qu_brats_grid=args.qu_brats_grid,
        products=products_from_arguments(args),
    )  # fmt: skip
    res = evaluate_command(
        args.labels, args.predictions, args.output, config, layout=args.layout, uncertainty=args.uncertainty,
        images=args.images, measures=args.measures, seg_suffix=args.seg_suffix, probs_suffix=args.probs_suffix,
        allow_missing=args.allow_missing, allow_missing_labels=args.allow_missing_labels, progress=not args.quiet,
    )  # fmt: skip
    if not res.is_main:
        return res
    _, summary, paths = res.value
    if args.quiet:  # the warnings alone (on stderr), the summary not even formatted
        return CommandResult(res.value, res.is_main, res.output,
                             quiet_lines(warning_lines(summary.get("warnings") or [])))
    info = [f"ignore label {ignore} from {found}: its voxels are left out of every voxel-wise metric"] if found else []
    return CommandResult(res.value, res.is_main, res.output,
                         tuple(info + evaluate_summary_lines(summary, paths, config)))


def evaluate_ignore_label(given: int | None, predictions: str | os.PathLike, layout: str
                          ) -> tuple[int | None, Path | None]:
    """The ignore label of ``monai-unc evaluate``: ``--ignore-label``, or that of nnU-Net's ``dataset.json``.

    With ``--layout nnunet`` the ``dataset.json`` nnU-Net writes beside its predictions is read
    (:func:`monai_unc.io.nnunet_dataset_ignore_label`); its ``"ignore"`` label is taken when ``--ignore-label`` is not
    given, and must equal it when it is.

    Args:
        given: the value of ``--ignore-label``, or None.
        predictions: the predictions folder.
        layout: its file naming (``"monai-unc"`` or ``"nnunet"``).

    Returns:
        ``(ignore label or None, the dataset.json it was taken from or None)``.

    Raises:
        ValueError: the ``dataset.json`` holds a bad ignore label, or another one than ``--ignore-label``.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = (Path(d) / "dataset.json").write_text('{"labels": {"background": 0, "a": 1, "ignore": 2}}')
        ...     evaluate_ignore_label(None, d, "nnunet")[0], evaluate_ignore_label(None, d, "monai-unc")
        (2, (None, None))
    """
    if given is not None:
        given = check_ignore_label(given)
    if layout != "nnunet":
        return given, None
    path = Path(predictions) / "dataset.json"
    dataset = read_json_cached(path)
    found = None if dataset is None else nnunet_dataset_ignore_label(dataset, str(path))
    if found is None:
        return given, None
    if given is not None and given != found:
        raise ValueError(f"--ignore-label {given}: the predictions' {path} gives the ignore label {found}")
    return found, (None if given is not None else path)


def evaluate_summary_lines(summary: Mapping[str, Any], paths: Mapping[str, Path], config: EvaluationConfig
                           ) -> list[str]:
    """What ``monai-unc evaluate`` prints after a run.

    Args:
        summary: the cohort summary (``summary.json``).
        paths: the files written (``run_evaluate``'s ``paths``: ``metrics``, ``summary``, ``rule``, ...).
        config: the evaluation's options (its products print their own lines).

    Returns:
        The lines: cases, Dice, AURC and pooled calibration; the regions and QU-BraTS; the triage at the budget; the
        risk control (:func:`risk_control_line`); warnings; the files written; each product's lines and file
        (e.g. the masks with a guarantee).
    """
    t, fd = summary["triage"], summary["failure_detection"]
    # a value the summary holds as null (NaN: e.g. no case retained at the budget) prints as n/a
    line = (f"{summary['n_cases']} case(s); mean Dice {_fmt(summary['dice']['mean'])}; "
            f"AURC {_fmt(fd['aurc'])}, E-AURC {_fmt(fd['eaurc'])}")
    cal = summary.get("calibration")
    if cal:
        line += f"; pooled ECE {_fmt(cal['ece'])}, all-label ECE {_fmt(cal['all_label_ece'])}"
    lines = [line]
    if summary.get("regions"):
        per = summary["regions"]["per_region"]
        lines.append("regions: " + "; ".join(
            f"{n} Dice {_fmt(b['dice']['mean'])}" + (f", ECE {_fmt(b['calibration']['ece'])}" if "calibration" in b
                                                      else "")
            + (f", QU-BraTS {_fmt(b['qu_brats']['score'])}" if "qu_brats" in b else "") for n, b in per.items()))
    if summary.get("qu_brats"):
        lines.append(f"QU-BraTS score (mean over regions and cases) {_fmt(summary['qu_brats']['score'])}")
    # the mean Dice of the cases the budget keeps; at a tie of scores across its cut, also the referral curve's
    # expectation over a random order of the tied cases (docs/report.md)
    kept = t["dice_kept"] if "dice_kept" in t else t["dice_retained"]
    tie = (f" (expected over a random order of the cases tied at the cut, {', '.join(t['tied'])}: "
           f"{_fmt(t['dice_retained'])})" if t.get("tied") else "")
    lines.append(f"triage at {format_fraction(t['budget'])}: review {', '.join(t['referred']) or 'none'}; "
                 f"mean Dice of the retained cases {_fmt(kept)}{tie}")
    implicit = implicit_products(config)  # each product prints its own lines; these are turned on by --target-risk
    for product in implicit:
        if product.name in summary:
            lines.extend(product.summary_lines(summary[product.name]))
    lines.extend(warning_lines(summary.get("warnings") or []))
    lines.append(f"wrote {paths['metrics']} and {paths['summary']}")
    for product in implicit:
        if f"product:{product.name}" in paths:
            lines.extend(product.artifact_lines(paths[f"product:{product.name}"]))
    for product in config.products:
        if product.name in summary:
            lines.extend(product.summary_lines(summary[product.name]))
        if f"product:{product.name}" in paths:
            lines.extend(product.artifact_lines(paths[f"product:{product.name}"]))
    return lines


#: how many of a run's warnings ``evaluate`` prints (the rest are counted; all are in ``summary.json``)
SHOWN_WARNINGS = 3


def warning_lines(messages: Sequence[str], shown: int = SHOWN_WARNINGS) -> list[str]:
    """The first ``shown`` warnings of a run, one line each, then how many more ``summary.json`` lists.

    Every line starts with ``warning: ``, the count too, so that ``--quiet`` (which keeps a command's warning lines,
    :func:`~monai_unc.workflows.session.quiet_lines`) still says that there are more (found by hostile review: a
    quiet run printed 3 of 4 warnings without a word about the fourth).

    Args:
        messages: the ``warnings`` of ``summary.json``.
        shown: how many to print.

    Returns:
        Lines of text (none without warnings).

    Example:
        >>> warning_lines(["a: empty label", "b: empty label", "c: no probs", "d: no probs"], shown=2)
        ['warning: a: empty label', 'warning: b: empty label', 'warning: 2 more warning(s), see summary.json']
        >>> warning_lines(["a: empty label"])
        ['warning: a: empty label']
    """
    first = [f"warning: {str(w).strip().splitlines()[0] if str(w).strip() else w}" for w in messages[:shown]]
    more = len(messages) - len(first)
    return first + ([f"{WARNING_PREFIX}{more} more warning(s), see summary.json"] if more > 0 else [])


def risk_control_line(summary: Mapping[str, Any]) -> str | None:
    """The line of ``monai-unc evaluate`` on the risk-controlled referral threshold.

    Args:
        summary: the cohort summary (its ``risk_control`` block, written with ``--target-risk``).

    Returns:
        The line of :func:`monai_unc.products.risk_control.risk_control_line`; None without risk control.
    """
    rc = summary.get("risk_control")
    return _risk_control_line(rc) if rc else None


def _fmt(v: Any) -> str:
    return format_cell(None if v is None else float(v), 4, missing="n/a")  # a non-zero value never reads 0.0000
