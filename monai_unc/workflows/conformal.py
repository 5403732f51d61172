"""``monai-unc conformal`` as a workflow.

:func:`conformal_command` is :func:`monai_unc.evaluation.run_conformal` inside the command's session (process group
and failed-cases step, :func:`monai_unc.workflows.session.run_command`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any

from ..engine import DistContext
from ..evaluation import ConformalRuleFile, run_conformal
from ..evaluation.conformal import ConformalResult
from .report import trust_from_arguments
from .session import CommandResult, run_command

__all__ = ["conformal_command", "conformal_from_arguments", "conformal_summary"]


def conformal_command(
    predictions: str | os.PathLike,
    rule: ConformalRuleFile | str | os.PathLike,
    output: str | os.PathLike,
    *,
    dist: DistContext | None = None,
    **options: Any,
) -> CommandResult[ConformalResult]:
    """The whole of ``monai-unc conformal`` on one process or on every rank of a ``torchrun`` job.

    Args:
        predictions: folder of the new cases' predictions (with probabilities).
        rule: a :class:`~monai_unc.evaluation.ConformalRuleFile` or the path of its ``conformal_rule.json``.
        output: output folder (masks, ``conformal.csv``, ``conformal.json``).
        dist: a rank context the caller holds (its group is left alone), or None: join the process group or
            create one from torchrun's environment, and destroy one created here at the end.
        **options: the keyword arguments of :func:`monai_unc.evaluation.run_conformal` (``images``, ``layout``,
            ``uncertainty``, ``allow_mismatch``, ``progress``, ...).

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of the
        :class:`~monai_unc.evaluation.conformal.ConformalResult`. Raises
        :class:`~monai_unc.workflows.session.CohortFailed` on every rank when cases failed (rank 0 has printed which).
    """
    out = Path(output).resolve()
    return run_command("conformal", out, lambda ctx: run_conformal(predictions, rule, out, dist=ctx, **options),
                       dist=dist, summary=conformal_summary)


def conformal_summary(result: ConformalResult) -> list[str]:
    """What ``monai-unc conformal`` prints after a run.

    Args:
        result: the run's :class:`~monai_unc.evaluation.conformal.ConformalResult`.

    Returns:
        The lines: the number of cases and the guarantee of each side, a warning when a fingerprint mismatch was
        allowed, the files written.
    """
    s = result.summary
    lines = [f"{s['n_cases']} case(s); " + "; ".join(f"{k}: {v}" for k, v in s["guarantee"].items())]
    sig = s.get("signature")
    if sig:
        lines.append(f"WARNING: rule {sig}: who certified it, and that it is unchanged since, were not checked"
                     if sig.startswith("UNSIGNED") else f"rule {sig}")
    if s["fingerprint"]["status"] == "mismatch":
        lines.append("WARNING: fingerprint mismatch allowed (--allow-mismatch): the guarantee does not cover these "
                     "cases")
    return [*lines, f"wrote {result.paths['csv']} and {result.paths['json']}"]


def conformal_from_arguments(args: argparse.Namespace) -> CommandResult[ConformalResult]:
    """``monai-unc conformal`` on its parsed arguments (:func:`monai_unc.workflows.arguments.add_command_parsers`).

    Args:
        args: the parsed arguments of ``monai-unc conformal``.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of :func:`conformal_command`; its ``lines`` are empty
        with ``--quiet``. Raises as :func:`conformal_command`.
    """
    res = conformal_command(args.predictions, args.rule, args.output, images=args.images, layout=args.layout,
                            uncertainty=args.uncertainty, allow_mismatch=args.allow_mismatch,
                            progress=not args.quiet, trust=trust_from_arguments(args))
    return dataclasses.replace(res, lines=()) if args.quiet else res
