"""The cohort engine: one per-case function over a cohort, on one process or under ``torchrun``, with resume.

Every cohort command (``infer``, ``evaluate``, ``triage``) is a per-case function plus a summary step run through
:func:`run_cases`, which owns everything else:

1. listing the cases on every rank (they must agree: :func:`~monai_unc.engine.check_same_cases`) and the
   set-up on rank 0 (the resume folder created and cleaned of partial files, the command's own checks), errors
   raised on every rank (:func:`~monai_unc.engine.sync_errors`);
2. the shard of this rank (:func:`~monai_unc.engine.shard`: sorted ids, round-robin), processed by
   :func:`process_cases`: progress bar, a saved result reused when its fingerprint is unchanged (:class:`CaseCache`),
   a case that raises reported at once (one stderr line with the case id and the rank, or ``on_failure``) and
   collected while the loop goes on;
3. the results and failures gathered to rank 0 in case-id order (each record released there once unpacked, and
   each rank's own results once sent; each case exactly once:
   :func:`~monai_unc.engine.check_each_case_once`), ``failures.json`` written (or a stale one removed), the
   summary step run there (or, when cases failed, the clean-up of stale outputs), its value broadcast to every
   rank, and :class:`~monai_unc.engine.CasesFailed` raised on every rank when a case failed.

Every collective is reached by every rank whatever fails, so a failure never leaves a rank waiting; with one process
every collective is the identity and the same code runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import pickle
import sys
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from .._utils import canonical_text, check_callable, stderr_line
from ..io import check_case_ids_fit_folder, is_disk_full, output_lock
from ..io.cases import settings_changes
from .cache import CaseCache
from .collectives import (
    CaseFailure,
    CasesFailed,
    DistContext,
    all_gather_objects,
    broadcast_object,
    check_each_case_once,
    check_same_cases,
    check_unique_ids,
    error_line,
    failure_reporter,
    gather_objects,
    get_dist_context,
    print_failure,
    shard,
    sync_errors,
    write_failures,
)

__all__ = ["CohortRun", "process_cases", "run_cases", "settings_changes", "start_notice"]

#: the lines rank 0 says on stderr when the next run of cases starts (:func:`start_notice`); emptied once said
_START_NOTICES: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("start_notices", default=None)


@contextlib.contextmanager
def start_notice(*lines: str | None) -> Iterator[None]:
    """Say ``lines`` on stderr (rank 0) when the first run of cases inside starts: once its checks have passed.

    A command's notice about an option that takes effect (``--allow-unsigned``: a rule used without checking who
    certified it) belongs to a run that happens; a run that a check refuses (an option, the output folder, a rule not
    found) prints its refusal alone, in one line (found by a probe: the notice came first, two lines for one
    refusal). :func:`run_cases` says it after the listing and the set-up passed on every rank, before the first case;
    at most once (a triage that runs a product's command beside it says it once).

    Args:
        *lines: the notices (one line each, in order); None: nothing to say.

    Example:
        >>> with start_notice("toy: a notice", None):
        ...     run_cases(["a"], str.upper, command="toy", key=str).results
        ['A']
    """
    token = _START_NOTICES.set([line for line in lines if line])
    try:
        yield
    finally:
        _START_NOTICES.reset(token)


def _say_start_notices(ctx: DistContext) -> None:
    """Print the notices of :func:`start_notice` on rank 0 (above a progress bar), once."""
    pending = _START_NOTICES.get()
    if pending:
        lines, pending[:] = list(pending), []
        if ctx.is_main:
            for line in lines:
                stderr_line(line)


#: the error numbers of a write the file system refuses to this user (no permission, a read-only file system): an
#: error of the environment when it is the resume state's, which every case would meet alike
_REFUSED_ERRNOS = frozenset((errno.EACCES, errno.EPERM, errno.EROFS))


def _case_id(item: Any) -> str:
    return str(item.case_id)


def process_cases(
    items: Sequence[Any],
    process: Callable[[Any], Any],
    *,
    key: Callable[[Any], Hashable] = _case_id,
    cache: CaseCache | None = None,
    failures: list[tuple[str, BaseException]] | None = None,
    on_failure: Callable[[str, BaseException], None] | None = None,
    progress: bool = False,
    desc: str = "cases",
) -> list[tuple[str, Any]]:
    """Run ``process`` on each item in the order given (the per-case loop of one rank).

    With ``cache`` a saved result whose fingerprint is unchanged is loaded instead of computed, and every computed
    result is saved. With ``failures`` (a list) a case that raises an ``Exception`` is appended as ``(case_id,
    exception)``, ``on_failure(case_id, exception)`` is called and the loop goes on; without it the first error
    propagates. An interrupt (``KeyboardInterrupt``) always stops the loop, and so do the environment's errors, which
    are not a case's and would fail every case alike: an ``ImportError`` (a missing optional package, e.g. the
    ``dicom`` extra for DICOM series; the command line turns it into one line naming what to install, exit status 2)
    and a full disk or quota (:func:`~monai_unc.io.is_disk_full`; one line naming the file, exit status 2; the cases
    done are kept and a rerun after freeing space resumes), as a resume state that the file system refuses to save
    (no permission, a read-only file system: ``EACCES``, ``EPERM``, ``EROFS``).

    Args:
        items: the cases (e.g. :class:`~monai_unc.io.CaseFiles`).
        process: ``process(item) -> result`` (never None).
        key: the case id of an item (default its ``case_id``).
        cache: resume state (:class:`CaseCache`), or None to compute every case.
        failures: a list that collects ``(case_id, exception)`` of the cases that raised, or None to let the first
            error propagate.
        on_failure: ``on_failure(case_id, exception)`` for each collected failure (only with ``failures``).
        progress: a progress bar on stderr.
        desc: the label of the progress bar.

    Returns:
        ``[(case_id, result)]`` of the cases that did not fail, in the order of ``items``.

    Raises:
        TypeError: ``process`` or ``key`` is not callable, ``on_failure`` neither callable nor None, or ``cache``
            not a :class:`CaseCache` (before any case).

    Example:
        >>> failed = []
        >>> process_cases(["a", "bb", ""], lambda s: 1 / len(s), key=str, failures=failed)
        [('a', 1.0), ('bb', 0.5)]
        >>> [(cid, type(e).__name__) for cid, e in failed]
        [('', 'ZeroDivisionError')]
        >>> process_cases(["a", "bb"], len, key=str)
        [('a', 1), ('bb', 2)]
    """
    _check_loop_arguments(process, key, cache, on_failure)
    out = []
    bar = tqdm(items, desc=desc, unit="case", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    for item in bar:
        cid = str(key(item))
        bar.set_postfix_str(cid)
        saving = False
        try:
            fp = cache.fingerprint_of(item) if cache is not None else None
            result = cache.load(cid, fp, item) if cache is not None else None
            if result is None:
                result = process(item)
                if cache is not None:
                    saving = True
                    cache.save(cid, result, fp)
        except Exception as e:  # an interrupt (KeyboardInterrupt) is not an Exception and stops the run
            # found by hostile testing: DICOM series without the dicom extra failed case by case (exit 1, "fix these
            # cases") instead of one line, exit 2; a full disk computed and failed every remaining case; and by
            # review 63: a resume state the file system refuses (another user's folder) failed every case alike
            if (failures is None or isinstance(e, ImportError) or is_disk_full(e)
                    or (saving and isinstance(e, OSError) and e.errno in _REFUSED_ERRNOS)):
                raise
            failures.append((cid, e))
            if on_failure is not None:
                on_failure(cid, e)
            continue
        out.append((cid, result))
    return out


def _check_loop_arguments(process: Any, key: Any, cache: Any, on_failure: Any) -> None:
    """``TypeError`` naming the argument for a per-case function, key, cache or callback of the wrong kind.

    Found by hostile testing: ``process=5`` was accepted and every case then "failed" with ``'int' object is not
    callable`` (``failures.json`` listing the whole cohort, "fix these cases"), and ``cache="folder"`` ended in an
    ``AttributeError`` that named no argument.
    """
    check_callable(process, "process", optional=False)
    check_callable(key, "key", optional=False)
    check_callable(on_failure, "on_failure")
    if cache is not None and not isinstance(cache, CaseCache):
        raise TypeError(f"cache must be a CaseCache or None, got {type(cache).__name__}")


@dataclass
class CohortRun:
    """What :func:`run_cases` passes to the summary step (rank 0) and returns (every rank).

    Attributes:
        cases: the ids of the cases with a result, sorted (rank 0; empty on the other ranks).
        results: their results, in the same order (unpacked on rank 0; empty on the other ranks).
        ranks: the rank that processed each of them.
        failures: the cases that failed (rank 0, inside the summary step).
        summary: what the summary step returned on rank 0, on every rank.
        ctx: the rank context of the run.
    """

    ctx: DistContext
    cases: list[str] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    failures: list[CaseFailure] = field(default_factory=list)
    summary: Any = None


def run_cases(
    items: Sequence[Any] | Callable[[], Sequence[Any]],
    process: Callable[[Any], Any],
    *,
    command: str,
    ctx: DistContext | None = None,
    key: Callable[[Any], Hashable] = _case_id,
    cache: CaseCache | None = None,
    setup: Callable[[], None] | None = None,
    summarize: Callable[[CohortRun], Any] | None = None,
    on_failed: Callable[[CohortRun], Any] | None = None,
    failures_file: str | os.PathLike | None = None,
    pack: Callable[[Any], Any] | None = None,
    unpack: Callable[[Any], Any] | None = None,
    progress: bool = False,
    desc: str | None = None,
    on_failure: Callable[[CaseFailure], None] | None = None,
    stop_on_error: bool = False,
    lock: str | os.PathLike | None = None,
    agree: Callable[[list[Any]], Any] | None = None,
) -> CohortRun:
    """Run ``process`` on every case of a cohort, on one process or on every rank of a process group.

    The steps are those of the module docstring. Call it on every rank with the same arguments.

    Args:
        items: the cases, or a function listing them, run on every rank (its errors raise on every rank).
        process: ``process(item) -> result``, the per-case work (a result must not be None).
        command: the command's name for failure lines and ``failures.json`` (e.g. ``"monai-unc evaluate"``).
        ctx: the rank context (default :func:`~monai_unc.engine.get_dist_context`).
        key: the case id of an item (default its ``case_id``).
        cache: resume state (:class:`CaseCache`; rank 0 prepares its folder before the loop, once every rank has
            listed its cases).
        setup: run on rank 0 after the cases are listed and before the loop (output checks, run records).
        summarize: ``summarize(run)`` on rank 0 when no case failed (the cohort outputs); its value is broadcast
            as ``run.summary``. It may raise :class:`~monai_unc.engine.CasesFailed` for cases found bad only
            when the cohort is put together (e.g. another number of classes): they are reported like the others.
        on_failed: ``on_failed(run)`` on rank 0 when cases failed (e.g. remove stale cohort outputs); its value is
            broadcast and becomes the ``results`` of the :class:`~monai_unc.engine.CasesFailed` raised.
        failures_file: where rank 0 writes ``failures.json`` (:func:`~monai_unc.engine.write_failures`; a
            stale one is removed when nothing failed). None: not written.
        pack: a result as picklable data for the gather to rank 0 (only when distributed).
        unpack: the inverse of ``pack``.
        progress: a progress bar on rank 0.
        desc: the label of the progress bar (default the command's last word).
        on_failure: called with the :class:`~monai_unc.engine.CaseFailure` of a failed case on its rank
            (default: one stderr line ``<command>: [rank r of W: ]case 'id' failed: <error>``).
        stop_on_error: the first case that raises stops the run and its exception propagates (the other ranks
            raise :class:`~monai_unc.engine.RankFailed`); no failure is collected, reported or written. For the
            Python functions that evaluate or predict a list of cases in one process and raise the first error.
        lock: the output folder, held by rank 0 from after every rank's listing (their checks come first, so that
            a folder refused on any rank is not created) until the summary step is done
            (:func:`monai_unc.io.output_lock`): a second run into the same folder meanwhile is refused (``ValueError``
            on every rank) before it writes anything.
            None: not held.
        agree: ``agree(cases) -> value`` on every rank after the listing: what every rank must have in common
            besides the case ids (the options a case's result depends on, the names of its input files), compared
            across ranks (picklable, ``==``) before anything is written. A rank whose value differs from rank 0's
            stops the run on every rank (``ValueError`` naming the rank and, for dicts, the entries that differ):
            a rank started with another option would otherwise put results of other numbers into the cohort without
            a word. None: only the case lists are compared.

    Returns:
        The :class:`CohortRun`: ``summary`` on every rank; ``cases``, ``results``, ``ranks`` on rank 0.

    Raises:
        CasesFailed: on every rank when a case failed (every other case was processed and, with a cache, saved).
        RankFailed: on the other ranks when a rank failed outside the per-case work (or, with ``stop_on_error``,
            in a case).
        TypeError: ``process``, ``key`` or a hook is not callable, ``cache`` is not a :class:`CaseCache` or
            ``command`` not a string (before any work).
        ValueError: two items have one case id (on every rank, before rank 0 holds ``lock``, prepares the cache
            or runs ``setup``).

    Example:
        >>> run = run_cases(["b", "a"], str.upper, command="toy", key=str, summarize=lambda r: "".join(r.results))
        >>> run.cases, run.summary
        (['a', 'b'], 'AB')
    """
    _check_loop_arguments(process, key, cache, on_failure)
    if not isinstance(command, str):
        raise TypeError(f"command must be a string, got {type(command).__name__}")
    for name, hook in (("setup", setup), ("summarize", summarize), ("on_failed", on_failed), ("pack", pack),
                       ("unpack", unpack), ("agree", agree)):
        check_callable(hook, name)
    ctx = ctx if ctx is not None else get_dist_context()
    report = failure_reporter(ctx, command, on_failure)
    with contextlib.ExitStack() as held:  # the output folder's lock (rank 0), released at the end
        listed: list[Any] = []
        ids: list[str] = []
        agreed: Any = None
        err: BaseException | None = None
        try:
            listed = list(items() if callable(items) else items)
            ids = [str(key(c)) for c in listed]
            # found by hostile testing (review 60): a list with a repeated id was refused only by the sharding,
            # after rank 0 had taken the output folder, created the cache folder and run ``setup`` (which may
            # remove an earlier run's outputs)
            check_unique_ids(ids)
            if agree is not None:
                agreed = agree(listed)
                if ctx.distributed:
                    _check_sendable(agreed, "the value of agree", "every rank")
        except Exception as e:
            err = e
        # every rank's listing (and a refusal shared before it joined the group) first, so that rank 0 creates
        # nothing (the locked output folder, the cache's folder) when another rank refused the run
        sync_errors(err, ctx)
        if agree is not None:  # found by hostile testing: a rank started with another --patch-size (evaluate) or
            # --samples (infer) put its cases' other numbers into the cohort, exit 0, the summary naming rank 0's
            _check_agreement(agreed, ctx, command)
        # before rank 0's set-up (found by hostile testing, review 58: a rank that listed other cases was found out
        # only after rank 0 had created the cache folder and run ``setup``, which removes an earlier run's outputs)
        check_same_cases(ids, ctx)
        try:
            if ctx.is_main:
                if lock is not None:  # before the first write: a second run into the folder is refused here
                    held.enter_context(output_lock(lock, command))
                    # Case01 / case01 on a file system that takes them as one name: one case's files overwrite the
                    # other's (found by a review of case-insensitive shares)
                    check_case_ids_fit_folder([str(key(c)) for c in listed], lock)
                if cache is not None:
                    cache.prepare()
                if setup is not None:
                    setup()
        except Exception as e:
            err = e
        sync_errors(err, ctx)
        _say_start_notices(ctx)  # every check passed: the run starts
        mine = shard(listed, ctx.rank, ctx.world_size, key=key)

        local_failures: list[tuple[str, BaseException]] = []
        done: list[tuple[str, Any]] = []
        payload: list[tuple[str, Any]] = []
        err = None
        try:
            label = desc or command.split()[-1]
            done = process_cases(mine, process, key=key, cache=cache,
                                 failures=None if stop_on_error else local_failures, on_failure=report,
                                 progress=progress and ctx.is_main,
                                 desc=f"{label} ({ctx.describe()})" if ctx.distributed else label)
            if ctx.distributed:
                payload = [(c, pack(r) if pack is not None else r) for c, r in done]
                for c, d in payload:
                    _check_sendable(d, f"the result of case {c!r}", "rank 0",
                                    "give pack / unpack hooks that turn a result into plain data")
        except Exception as e:  # not a per-case error (those are collected)
            err = e
        sync_errors(err, ctx)
        mine_failed = [CaseFailure(c, ctx.rank, error_line(e)) for c, e in local_failures]
        gathered = gather_objects((payload, mine_failed), ctx)
        if ctx.distributed:  # sent: this rank's results and records are rank 0's gathered copies from here on
            payload, done = [], []

        run = CohortRun(ctx)
        outcome: Any = None
        err = None
        if ctx.is_main:
            try:
                assert gathered is not None
                failures = [f for _, fs in gathered for f in fs]
                if ctx.distributed:
                    got = []
                    for r in range(len(gathered)):  # each record released once unpacked: never all twice at once
                        part, gathered[r] = gathered[r][0][::-1], None
                        while part:
                            c, d = part.pop()
                            got.append((c, unpack(d) if unpack is not None else d, r))
                            d = None
                else:
                    got = [(c, res, ctx.rank) for c, res in done]
                check_each_case_once([c for c, _, _ in got] + [f.case for f in failures], ids)
                got.sort(key=lambda t: t[0])
                run = CohortRun(ctx, [c for c, _, _ in got], [r for _, r, _ in got], [k for _, _, k in got], failures)
                outcome = _finish(run, command, summarize, on_failed, failures_file, on_failure)
                if ctx.distributed:
                    _check_sendable(outcome[1:], "the value of summarize or on_failed", "every rank")
            except Exception as e:
                err = e
        sync_errors(err, ctx)
        outcome = broadcast_object(outcome, ctx)
        if outcome[0] == "failed":
            raise CasesFailed(outcome[1], results=outcome[2])
        run.summary = outcome[1]
        return run


class _Discard:
    """A file that forgets what is written to it (a pickling test that keeps no copy)."""

    def write(self, data: bytes) -> int:
        return len(data)


def _check_sendable(obj: Any, what: str, where: str, remedy: str = "return plain data") -> None:
    """``TypeError`` naming ``what`` unless ``obj`` pickles, as the collectives that send it to ``where`` pickle it.

    In earlier versions a result, ``agree`` value or summary that does not pickle (a lambda, an
    open file) raised on the rank that sent it, inside the collective and outside the steps whose errors are shared,
    and the other ranks waited in that collective for the whole collective timeout (6 hours by default) before
    ending with a gloo traceback. Checked in those steps, it raises on the sending rank and
    :class:`~monai_unc.engine.RankFailed` on the others at once.
    """
    try:
        pickle.Pickler(_Discard(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    except Exception as e:  # PicklingError, or AttributeError / TypeError of an object that refuses
        raise TypeError(f"{what} cannot be sent to {where} ({error_line(e)}): it must pickle ({remedy})") from e


def _check_agreement(value: Any, ctx: DistContext, command: str) -> None:
    """``ValueError`` on every rank when a rank's ``agree`` value differs from rank 0's (collective)."""
    values = all_gather_objects(value, ctx)
    # as text: a NaN setting equals itself; arrays element by element (found by hostile testing, review 60: as
    # their repr, two arrays of 2000 values that differed in the middle were taken for one), sets sorted
    texts = [canonical_text(v) for v in values]
    bad = [r for r, t in enumerate(texts) if t != texts[0]]
    if not bad:
        return
    r = bad[0]
    changes = settings_changes(values[0], values[r]) if isinstance(values[0], dict) and isinstance(values[r], dict) \
        else []
    what = "; ".join(changes[:4]) + ("; ..." if len(changes) > 4 else "") if changes else "they differ"
    raise ValueError(f"rank {r} runs {command} with other options or inputs than rank 0 (rank 0 -> rank {r}: {what}): "
                     "every rank must run the same command on the same inputs (docs/distributed.md)")


def _finish(
    run: CohortRun, command: str, summarize: Callable[[CohortRun], Any] | None,
    on_failed: Callable[[CohortRun], Any] | None, failures_file: str | os.PathLike | None,
    on_failure: Callable[[CaseFailure], None] | None,
) -> tuple[Any, ...]:
    """Rank 0 after the gather: ``failures.json``, then the summary step or the clean-up; the outcome to broadcast."""
    if failures_file is not None:
        write_failures(failures_file, run.failures, command)
    if not run.failures:
        try:
            return ("ok", summarize(run) if summarize is not None else None)
        except CasesFailed as late:  # cases found bad when the cohort is put together
            for f in late.failures:
                (on_failure or (lambda x: print_failure(x, run.ctx, command)))(f)
            run.failures.extend(late.failures)
            if failures_file is not None:
                write_failures(failures_file, run.failures, command)
    return ("failed", sorted(run.failures, key=lambda f: f.case), on_failed(run) if on_failed is not None else None)
