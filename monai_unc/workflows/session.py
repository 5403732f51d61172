"""The life of a cohort command on one process or on every rank of a ``torchrun`` job.

:func:`run_command` runs one command (``infer``, ``evaluate``, ``triage``, a product's command) inside
:func:`command_session`: the engine's :func:`~monai_unc.engine.cohort_session` (join the process group, or create
one from torchrun's environment and destroy it at the end) plus the failed-cases step. When cases failed
(:class:`~monai_unc.engine.CasesFailed`), rank 0 prints one line naming them and ``failures.json``, every rank
waits for it (torchrun stops the other workers once one exits non-zero) and :class:`CohortFailed` is raised on
every rank, so that the command line exits with :attr:`CohortFailed.exit_status` without knowing the engine.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch

from ..engine import CaseFailure, CasesFailed, DistContext, barrier, cohort_session, share_early_error

__all__ = ["CohortFailed", "CommandResult", "WARNING_PREFIX", "quiet_lines", "failed_cases_message", "command_session",
           "run_command", "share_refusal"]

T = TypeVar("T")


class CohortFailed(CasesFailed):
    """Some cases of a cohort command failed; the others are done (a rerun resumes) and rank 0 has said so.

    A :class:`~monai_unc.engine.CasesFailed`, so code that catches that still catches it.

    Args:
        failures: the cases that failed.
        command: the command's name (``"evaluate"``).
        output: the command's output folder (where ``failures.json`` lists the cases).
        results: what the run returned otherwise (:attr:`CasesFailed.results`).
    """

    #: exit status of a command whose cases failed
    exit_status = 1

    def __init__(self, failures: Sequence[CaseFailure], command: str, output: str | os.PathLike,
                 results: Any = None) -> None:
        super().__init__(failures, results=results)
        self.command = command
        self.output = Path(output)


@dataclass(frozen=True)
class CommandResult(Generic[T]):
    """What a cohort command returns on every rank.

    Args:
        value: what the command's workflow returned (e.g. ``run_evaluate``'s ``(state, summary, paths)``).
        is_main: this process is rank 0 (it wrote the cohort outputs and prints the summary); True for one process.
        output: the output folder (resolved).
        lines: the summary the command prints on rank 0 (empty on the other ranks, or when it supplies none).
        exit_status: the command's exit status when it succeeded (``monai-unc monitor status`` gives 1 when an
            alarm is raised; 0 otherwise).
    """

    value: T
    is_main: bool
    output: Path
    lines: tuple[str, ...] = ()
    exit_status: int = 0


#: the start of a command's warning line: ``--quiet`` keeps these lines and the command line prints them on stderr
WARNING_PREFIX = "warning: "


def quiet_lines(lines: Sequence[str]) -> tuple[str, ...]:
    """The lines a command prints with ``--quiet``: its warnings (``warning: ...``) alone, the summary dropped.

    The one rule of ``--quiet`` for every command (found by hostile review: ``monitor status --quiet`` dropped its
    warning that cases have no defined score, which the score alarm cannot see, while ``--quiet`` promises to move
    such lines to stderr, not to drop them).

    Args:
        lines: the lines the command prints without ``--quiet``.

    Returns:
        The warning lines, in order.

    Example:
        >>> quiet_lines(["3 case(s)", "warning: a: empty label", "wrote x"])
        ('warning: a: empty label',)
    """
    return tuple(line for line in lines if line.startswith(WARNING_PREFIX))


def failed_cases_message(command: str, failures: Sequence[CaseFailure], output: str | os.PathLike) -> str:
    """The line a command prints after some cases failed.

    Args:
        command: the command's name (``"evaluate"``).
        failures: the cases that failed (the first five are named).
        output: the output folder holding ``failures.json``.

    Returns:
        ``monai-unc <command>: N case(s) failed ('a', 'b'), listed in <output>/failures.json; ...``.

    Example:
        >>> from monai_unc.engine import CaseFailure
        >>> failed_cases_message("evaluate", [CaseFailure("c1", 0, "OSError: x")], "/out")[:54]
        "monai-unc evaluate: 1 case(s) failed ('c1'), listed in"
    """
    ids = ", ".join(repr(f.case) for f in failures[:5]) + (" ..." if len(failures) > 5 else "")
    return (f"monai-unc {command}: {len(failures)} case(s) failed ({ids}), listed in "
            f"{Path(output) / 'failures.json'}; the other cases are done: fix these and run the same command again "
            "to resume")


@contextmanager
def command_session(
    command: str, output: str | os.PathLike, *, dist: DistContext | None = None,
    device: str | torch.device | None = None,
) -> Iterator[DistContext]:
    """The process group of a cohort command (:func:`~monai_unc.engine.cohort_session`) and its failed-cases step.

    When the block raises :class:`~monai_unc.engine.CasesFailed`, rank 0 prints :func:`failed_cases_message` on
    stderr, every rank waits at a barrier (so that all ranks exit together after rank 0 printed) and
    :class:`CohortFailed` is raised on every rank; then the group is ended if this session created it.

    Args:
        command: the command's name (``"evaluate"``).
        output: the output folder (named in the message).
        dist: a rank context the caller holds (its group is left alone), or None.
        device: the compute device of a group created here.

    Returns:
        A context manager yielding the :class:`~monai_unc.engine.DistContext`.

    Example:
        >>> with command_session("evaluate", "/out") as ctx:
        ...     ctx.is_main
        True
    """
    with cohort_session(dist, device=device) as ctx:
        try:
            yield ctx
        except CasesFailed as e:
            if isinstance(e, CohortFailed):
                raise
            if ctx.is_main:
                print(failed_cases_message(command, e.failures, output), file=sys.stderr, flush=True)
            barrier(ctx)  # torchrun stops the other workers once one exits non-zero: exit together
            raise CohortFailed(e.failures, command, output, e.results) from e


def share_refusal(error: BaseException, device: str | None = None) -> None:
    """Tell the other ranks of a torchrun job that this rank refused the command before joining the process group.

    :func:`~monai_unc.engine.share_early_error` with the group's backends chosen as the command would
    (``--device cuda`` or ``auto`` with CUDA available: the CUDA backends); nothing for a single process.

    Args:
        error: the refusal (the caller re-raises it).
        device: the command's ``--device`` option, or None.

    Example:
        >>> share_refusal(ValueError("x"))  # one process: nothing to do
    """
    cuda = isinstance(device, str) and (device.startswith("cuda") or device == "auto")
    share_early_error(error, "cuda" if cuda and torch.cuda.is_available() else None)


def run_command(
    command: str, output: str | os.PathLike, run: Callable[[DistContext], T], *, dist: DistContext | None = None,
    device: str | torch.device | None = None, summary: Callable[[T], Sequence[str]] | None = None,
) -> CommandResult[T]:
    """Run ``run(ctx)`` inside :func:`command_session` and return its value with the rank's role.

    Args:
        command: the command's name (``"evaluate"``).
        output: the output folder.
        run: the command's work on the rank context (e.g. ``lambda ctx: run_evaluate(..., dist=ctx)``).
        dist: a rank context the caller holds, or None (join or create the group, destroy one created here).
        device: the compute device of a group created here.
        summary: ``summary(value)``: the lines the command prints, made on rank 0 (``CommandResult.lines``).

    Returns:
        The :class:`CommandResult`. Raises :class:`CohortFailed` on every rank when cases failed.

    Example:
        >>> run_command("toy", "/out", lambda ctx: ctx.world_size).value
        1
    """
    output = Path(output)
    with command_session(command, output, dist=dist, device=device) as ctx:
        value = run(ctx)
    lines = tuple(summary(value)) if summary is not None and ctx.is_main else ()
    return CommandResult(value, ctx.is_main, output, lines)
