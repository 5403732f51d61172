"""``monai-unc evaluate`` as a workflow.

:func:`evaluate_command` is :func:`monai_unc.evaluation.run_evaluate` inside the command's session (process group
and failed-cases step, :func:`monai_unc.workflows.session.run_command`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..engine import DistContext
from ..evaluation import CohortState, EvaluationConfig, run_evaluate
from .session import CommandResult, run_command

__all__ = ["evaluate_command"]


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
        output: output folder (``metrics.csv``, ``summary.json``, ``state/``).
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
    return run_command("evaluate", out, lambda ctx: run_evaluate(labels, predictions, output, config, dist=ctx,
                                                                  **options), dist=dist)
