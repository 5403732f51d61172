"""``monai-unc report`` and the page of ``monai-unc triage`` as workflows.

The checks before any work, then the report layer (:func:`monai_unc.report.html.write_report`: the page of
:func:`monai_unc.report.html.build_report` on the evaluation as the checks read it;
:func:`monai_unc.report.triage.build_triage_page`), so a Python caller gets the command's refusals (a ``ValueError``
or ``FileNotFoundError`` naming the option).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._utils import each_warning_once, refusing
from ..engine import get_dist_context, sync_errors
from ..evaluation import resummarize, run_triage
from ..evaluation.config import STATE_DIR
from ..evaluation.triage import TriageResult
from ..io import (
    CaseFiles,
    check_inputs_not_written,
    check_not_being_written,
    check_output_file,
    check_output_folder,
    input_folder,
    output_lock,
)
from ..io.signing import Trust
from ..report.html import REPORT_SOURCE_RECORD, ReadEvaluation, read_evaluation, write_report
from ..report.triage import build_triage_page
from ..report.viewer import ASSET_DIR, check_convention
from .apply import (
    apply_beside_triage,
    check_beside_triage,
    product_of_command,
    remove_stale_beside_triage,
    rules_from_options,
)
from .prepare import error_text, read_case_list
from .session import CommandResult

__all__ = ["REPORT_WRITES", "check_overlay_count", "check_evaluation_folder", "run_report",
           "report_from_arguments", "triage_with_page"]

#: what a page writes beside itself: the viewer's scripts (:func:`monai_unc.report.viewer.viewer_scripts`)
_PAGE_ASSET_WRITES = (ASSET_DIR, f"{ASSET_DIR}/*")
#: what ``monai-unc report`` writes in its output folder (patterns of :func:`monai_unc.io.check_inputs_not_written`)
REPORT_WRITES = ("report.html", REPORT_SOURCE_RECORD, "figures", "figures/*", *_PAGE_ASSET_WRITES,
                 ".*.partial*")


def check_overlay_count(cases: Any) -> int:
    """``--cases``, the number of per-case overlays of a page: a non-negative integer.

    Args:
        cases: the value given.

    Returns:
        ``cases`` as an int; ``ValueError`` naming ``--cases`` otherwise.
    """
    if isinstance(cases, bool) or not isinstance(cases, int) or cases < 0:
        raise ValueError(f"--cases must be >= 0, got {cases}")
    return int(cases)


def check_evaluation_folder(folder: str | os.PathLike) -> Path:
    """Read the evaluation state of ``folder`` once, before a report is built.

    A missing or damaged evaluation (no folder, a truncated ``summary.json``, ``rows.json`` or ``histogram.npz``) is
    one error naming the folder, not an error deep in the report.

    Args:
        folder: the ``--output`` folder of ``monai-unc evaluate``.

    Returns:
        The folder, as a :class:`~pathlib.Path`.

    Raises:
        FileNotFoundError: the folder or its summary is missing.
        ValueError: a corrupt file, one this user may not read, an evaluation whose last run had failed cases, or
            one another run is still writing (an ``evaluate`` holding the folder:
            :func:`monai_unc.io.output_lock_holder`).

    Example:
        >>> from monai_unc.workflows.report import check_evaluation_folder
        >>> check_evaluation_folder("nowhere")
        Traceback (most recent call last):
        ...
        FileNotFoundError: ...
    """
    return _checked_evaluation(folder).folder


def _checked_evaluation(folder: str | os.PathLike) -> ReadEvaluation:
    """:func:`check_evaluation_folder`, returning what it read: ``monai-unc report`` reads the evaluation once.

    Args:
        folder: the ``--output`` folder of ``monai-unc evaluate``.

    Returns:
        The evaluation as read (:func:`monai_unc.report.html.read_evaluation`), its folder a
        :class:`~pathlib.Path`.
    """
    folder = input_folder(folder, "evaluation", "--evaluation folder")
    # an evaluate still writing it: said first, not as a missing summary.json
    check_not_being_written(folder, what=f"the evaluation in {folder}", then=", then make the report")
    try:
        read = read_evaluation(folder)
    except FileNotFoundError:  # the loader's own message: no summary.json / rows.json, run evaluate first
        raise
    except Exception as e:
        if (folder / "failures.json").is_file():  # the loader's own message: the last evaluation had failed cases
            raise
        if isinstance(e, ValueError) and str(e).startswith((f"{folder / 'summary.json'}: ",
                                                             f"{folder / STATE_DIR / 'rows.json'}: ")):
            raise  # a field of an edited summary.json or rows.json: the loader's own line names the file and the field
        if isinstance(e, PermissionError):  # a whole file this user may not read (found by review 63 running the
            # commands as a non-root user: "a truncated or corrupt file?; run monai-unc evaluate again", it said)
            raise ValueError(f"cannot read the evaluation in {folder}: {error_text(e)}: this user may not read it; "
                             "ask its owner for read access (or run the report as the user who evaluated)") from None
        raise ValueError(f"cannot read the evaluation in {folder}: {error_text(e)} (a truncated or corrupt "
                         "file?); run monai-unc evaluate again") from None
    return read


def _evaluation_case_folders(evaluation: ReadEvaluation) -> list[Path]:
    """The folders of the case files an evaluation read (labels, predictions, maps, images), as its state records them.

    The report's overlays read these files again, so its output may not lie inside one of them.

    Args:
        evaluation: the evaluation as read (:func:`_checked_evaluation`).

    Returns:
        The distinct folders, sorted.
    """
    folders: set[Path] = set()
    for record in evaluation.state.files.values():
        files = CaseFiles.from_json(record)
        for path in (files.label, files.seg, files.probs, files.image,
                     *(x for f in files.maps.values() for x in (f if isinstance(f, tuple) else (f,)))):
            if path is not None:
                folders.add(Path(path).parent)
    return sorted(folders)


def run_report(
    evaluation: str | os.PathLike,
    output: str | os.PathLike | None = None,
    *,
    budget: float | None = None,
    images: str | os.PathLike | None = None,
    cases: int = 4,
    title: str = "Uncertainty QC report",
    target_risk: float | None = None,
    delta: float | None = None,
    risk: str | None = None,
    risk_method: str | None = None,
    calibration_cases: str | os.PathLike | Sequence[str] | None = None,
    risk_p_value: str | None = None,
    convention: str = "neurological",
) -> Path:
    """``monai-unc report``: check, then write ``report.html`` and ``figures/*.png`` for an evaluation folder.

    Args:
        evaluation: the ``--output`` folder of ``monai-unc evaluate``.
        output: report folder (default ``<evaluation>/report``): writable, outside ``images``, the folders of the
            evaluation's case files (labels, predictions, maps: the overlays read them) and its ``state`` folder.
        budget: referral fraction of the triage (default: the evaluation's).
        images: folder of the input images for the overlays.
        cases: overlays of this many of the most uncertain cases (``--cases``, >= 0).
        title: page title.
        target_risk: guaranteed mean risk of the accepted cases, in (0, 1); with ``delta``, ``risk`` and
            ``risk_method`` it overrides the evaluation's risk-controlled threshold (None keeps the evaluation's).
        delta: allowed probability that the guarantee fails (None keeps the evaluation's).
        risk: per-case risk, ``"failure"`` or ``"1-dice"`` (None keeps the evaluation's).
        risk_method: the bound, ``"sgr"`` or ``"ltt"`` (None keeps the evaluation's).
        risk_p_value: the p-value of LTT's tests, ``"hoeffding_bentkus"`` or ``"binomial"`` (None keeps the
            evaluation's).
        calibration_cases: a file of case ids (:func:`~monai_unc.workflows.prepare.read_case_list`) or the ids.
        convention: how the case figures and viewers draw the patient's sides (``--convention``):
            ``"neurological"`` (default) or ``"radiological"`` (:data:`monai_unc.report.viewer.CONVENTIONS`).

    Returns:
        The path of ``report.html``.
    """
    # a warning of the evaluation's summary once: the folder is read once, but its recorded options are made into a
    # configuration three times (the reading's check, the summary computed again, the page's), each saying an empty
    # class name (a block, not a decorator: its frame would move the warnings that name run_report's caller)
    with each_warning_once():
        cases = check_overlay_count(cases)
        convention = check_convention(convention)
        input_folder(evaluation, "evaluation", "--evaluation folder")
        cases_file = calibration_cases if isinstance(calibration_cases, (str, os.PathLike)) else None
        out = Path(output) if output is not None else Path(evaluation) / "report"
        with refusing("output"):  # the command line names the option (found by a probe: "output folder ... is a file")
            check_output_folder(out, images)  # not inside the images, writable: before any work
            check_output_file(out / "report.html", cases_file, what="output")
            check_inputs_not_written(out, REPORT_WRITES, cases_file, images, what="--output")
        read = _checked_evaluation(evaluation)  # the one reading: the checks, the summary again and the page use it
        with refusing("output"):
            check_output_folder(out, *_evaluation_case_folders(read), writable=False)  # the overlays read them
        state_dir = (Path(evaluation) / STATE_DIR).resolve()
        if out.resolve() == state_dir or state_dir in out.resolve().parents:
            # the evaluation's own records: a resumed evaluate replaces them (found by review: -o EVAL/state was taken)
            raise ValueError(f"--output {out} lies inside the evaluation's state folder "
                             f"{Path(evaluation) / STATE_DIR}; choose another folder (default: <evaluation>/report)")
        ids = read_case_list(cases_file) if cases_file is not None else (
            None if calibration_cases is None else [str(c) for c in calibration_cases])
        overrides = {"target_risk": target_risk, "delta": delta, "risk": risk, "risk_method": risk_method,
                     "risk_p_value": risk_p_value, "calibration_cases": ids}
        summary = None
        if budget is not None or any(v is not None for v in overrides.values()):  # the cohort summary again
            summary = resummarize(read.state, read.summary, budget, **overrides)
        return write_report(read, out, images=images, n_cases=cases, title=title, summary=summary,
                            convention=convention)


def triage_with_page(
    predictions: str | os.PathLike,
    rule: Any,
    output: str | os.PathLike,
    *,
    images: str | os.PathLike | None = None,
    allow_mismatch: bool = False,
    layout: str = "monai-unc",
    uncertainty: str | os.PathLike | None = None,
    cases: int = 4,
    progress: bool = True,
    dist: Any = None,
    trust: Trust | None = None,
    convention: str = "neurological",
    **product_rules: Any,
) -> tuple[TriageResult, Path | None]:
    """``monai-unc triage``.

    Check, triage the new cases (:func:`monai_unc.evaluation.run_triage`, on one process or every rank of ``dist``) and
    write ``triage.html`` on rank 0.

    With ``<command>_rule=FILE`` (``--<command>-rule``) the command of a cohort product is run on the same predictions
    as ``monai-unc <command>`` runs it, into ``<output>/<command>/`` (:mod:`monai_unc.workflows.apply`; e.g. the masks
    with a guarantee of ``evaluate``'s masks product), and the page shows its outputs (its columns in the table, its
    contours in the case figures, its section). Its artifact is checked before the triage (a file whose fingerprint
    differs from the predictions' is refused unless ``allow_mismatch``), so a refused file leaves nothing written.

    Args:
        predictions: folder of the new cases' predictions.
        rule: a :class:`~monai_unc.evaluation.triage.ReferralRule`, the path of its ``referral_rule.json`` or that
            file read and verified once (a :class:`~monai_unc.io.provenance.RuleRead` with ``trust``:
            :func:`~monai_unc.evaluation.triage.run_triage`).
        output: output folder (writable, outside ``predictions``, ``images`` and ``uncertainty``).
        images: folder of the input images (image-statistics check, overlays).
        allow_mismatch: triage predictions whose fingerprint differs from the rule's.
        layout: file naming of ``predictions`` (``monai-unc`` or ``nnunet``).
        uncertainty: folder of ``<case>_<measure>`` maps (default: from the layout).
        cases: overlays of this many of the most uncertain cases (``--cases``, >= 0).
        progress: show a progress bar.
        dist: a :class:`~monai_unc.engine.DistContext` (default: a single process or torchrun's group).
        trust: the trusted keys the rule files' signatures must verify against (``--trusted-keys``,
            ``--allow-unsigned``; :mod:`monai_unc.io.signing`), or None (not checked).
        convention: how the page's case figures and viewers draw the patient's sides (``--convention``):
            ``"neurological"`` (default) or ``"radiological"`` (:data:`monai_unc.report.viewer.CONVENTIONS`).
        **product_rules: ``<command>_rule``: the artifact a product's command applies (its path, read once by
            the product's :meth:`~monai_unc.product.CohortProduct.read_command_artifact`, or the loaded file), or
            None (:func:`monai_unc.workflows.apply.rules_from_options`).

    Returns:
        ``(result, page)``; ``page`` is None on ranks other than 0.

    Raises:
        TypeError: a keyword that is not a product command's ``<command>_rule``, or a ``convention`` that is not a
            str.
        ValueError: a ``convention`` that is neither convention (before anything is triaged), and the refusals of the
            checks.
    """
    cases = check_overlay_count(cases)
    convention = check_convention(convention)  # before the triage writes
    rules = rules_from_options(product_rules)
    unknown = sorted(set(k for k, v in product_rules.items() if v is not None)
                     - {f"{c.replace('-', '_')}_rule" for c in rules})
    if unknown:
        raise TypeError(f"triage_with_page() got unexpected keyword argument(s) {unknown}")
    with refusing("output"):  # the command line names the option (found by a probe: "output folder ... is a file")
        output = check_output_folder(output, predictions, images, uncertainty)
        # the page's viewer scripts: found by hostile testing, --images OUT/assets received niivue.umd.js and viewer.js
        check_inputs_not_written(output, _PAGE_ASSET_WRITES, predictions, images, uncertainty, what="--output")
    common = {"images": images, "layout": layout, "uncertainty": uncertainty, "allow_mismatch": allow_mismatch,
              "trust": trust}
    # each product's rule file read and verified once: its check before the triage and its run after it act on the
    # one version read (in earlier versions each read the file: rewritten in between, two rules)
    rules = {command: product_of_command(command).read_command_artifact(artifact, trust)
             for command, artifact in rules.items()}
    folders = check_beside_triage(rules, predictions, output, **common)  # refused here, before the triage writes
    ctx = dist if dist is not None else get_dist_context()
    with contextlib.ExitStack() as held:  # the folder is this run's until its page is written (rank 0)
        err = None
        if ctx.is_main:
            try:
                held.enter_context(output_lock(output, "monai-unc triage"))
            except Exception as e:
                err = e
        sync_errors(err, ctx)
        result = run_triage(predictions, rule, output, images=images, allow_mismatch=allow_mismatch, layout=layout,
                            uncertainty=uncertainty, progress=progress, dist=ctx, trust=trust)
        err = None
        if ctx.is_main:  # an earlier run's outputs of a product's command this run does not ask for
            try:
                remove_stale_beside_triage(output, list(rules), predictions, images, uncertainty)
            except Exception as e:  # found by hostile testing (review 58): refused on rank 0 alone (a stale folder
                # that is a symbolic link), rank 0 exited 2 and the others 0, or waited in the products' run
                err = e
        sync_errors(err, ctx)
        apply_beside_triage(rules, folders, predictions, dist=ctx, progress=progress, **common)
        page = build_triage_page(output, n_cases=cases, convention=convention, **folders) if ctx.is_main else None
    return result, page


def report_from_arguments(args: argparse.Namespace) -> CommandResult[Path]:
    """``monai-unc report`` on its parsed arguments (:func:`monai_unc.workflows.arguments.add_command_parsers`).

    Args:
        args: the parsed arguments of ``monai-unc report``.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of :func:`run_report`'s ``report.html``; its one line
        is the page's path (printed with ``--quiet`` too).
    """
    path = run_report(args.evaluation, args.output, budget=args.budget, images=args.images, cases=args.cases,
                      title=args.title, target_risk=args.target_risk, delta=args.delta, risk=args.risk,
                      risk_method=args.risk_method, calibration_cases=args.calibration_cases,
                      risk_p_value=args.risk_p_value, convention=getattr(args, "convention", "neurological"))
    return CommandResult(path, True, path.resolve().parent, (f"report: {path.resolve()}",))
