"""The cohort engine: one per-case function over a cohort, on one process or under ``torch.distributed``.

It runs with resume (:mod:`.run`, :mod:`.cache`), the process-group lifecycle of a run (:mod:`.session`) and the
rank context, deterministic sharding, exact reductions and failures it is built on (:mod:`.collectives`).

``monai-unc infer``, ``evaluate``, ``triage`` and the products' commands (and
:func:`monai_unc.workflows.run_infer`, :func:`monai_unc.evaluation.run_evaluate`,
:func:`monai_unc.evaluation.run_triage`, :meth:`monai_unc.product.CohortProduct.apply_cases`) run through it, so that
the same command runs on one process or under ``torchrun`` (or inside a process group that MONAI / ignite's ``idist``
already initialised) and gives the same numbers. See ``docs/distributed.md``. This package was called
``monai_unc.distributed`` (a deprecated alias).

- :func:`cohort_session` is the lifecycle of a run's process group as a context manager: it joins the group that
  exists or creates one from torchrun's environment (:func:`get_dist_context`), and on exit destroys only a group it
  created (:func:`destroy_dist_context`).

- :func:`get_dist_context` reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (set by ``torchrun``), and when the world
  has more than one process and no process group exists yet, initialises one (``env://`` rendezvous: ``MASTER_ADDR``,
  ``MASTER_PORT``). Backend: ``gloo`` on the CPU; ``cpu:gloo,cuda:nccl`` when the device is CUDA (CUDA tensors go
  through NCCL, CPU tensors and Python objects through gloo). When the existing default group has no CPU backend
  (NCCL only), a gloo group over the same ranks carries the CPU collectives of this module.
- :func:`shard` splits a list of cases by rank: ids sorted, then round-robin (rank ``r`` of ``W`` takes sorted
  positions ``r, r + W, r + 2W, ...``). Shard sizes differ by at most one and neighbouring ids (often similar scans
  from one site) are spread over the ranks; the split depends only on the ids and ``W``, never on listing order.
- :func:`all_reduce_sum` sums numpy arrays over the ranks: every rank's array is all-gathered and the parts are added
  in rank order ``0, 1, ..., W - 1``, so int64 counts are exact and float64 sums are the same bits on every rank and
  for every backend (no dependence on the backend's reduction tree). :func:`reduce_state` merges any mergeable
  state of the ranks in the same order (:mod:`monai_unc.state`); :func:`reduce_histogram` applies it to a
  :class:`~monai_unc.metrics.calibration.ConfidenceHistogram` (pooled).
- :func:`all_gather_objects`, :func:`gather_objects` (to rank 0), :func:`broadcast_object`, :func:`barrier`.
- Faults: :func:`sync_errors` is a collective in which every rank reports the exception it caught (or None); if any
  rank failed, every rank raises (the failing rank its own exception, the others :class:`RankFailed` naming it), so
  no rank waits forever in a later collective. Per-case failures are not exceptions of the run: they are collected
  as :class:`CaseFailure` (case id, rank, message), exchanged in collectives that every rank reaches, written by rank
  0 to ``failures.json`` (:func:`write_failures`) and raised at the end as :class:`CasesFailed`.

- The cohort engine: :func:`run_cases` (list, shard, per-case loop with :class:`CaseCache` resume and collected
  failures, gather, summary on rank 0, broadcast) and :func:`process_cases` (the per-case loop of one rank);
  :func:`start_notice`, a command's notice said on rank 0 once its run starts (after the checks of the listing and
  the set-up), so that a refused run prints its refusal alone.

The rank context, collectives and faults live in :mod:`monai_unc.engine.collectives`, the resume state in
:mod:`monai_unc.engine.cache`, the engine in :mod:`monai_unc.engine.run` and the session in
:mod:`monai_unc.engine.session`.

With ``WORLD_SIZE`` unset or 1 every collective is the identity, so single-process code paths are the same code.
"""

from __future__ import annotations

from .cache import CaseCache
from .collectives import (
    DEFAULT_TIMEOUT_S,
    CaseFailure,
    CasesFailed,
    DistContext,
    RankFailed,
    all_gather_objects,
    all_reduce_sum,
    barrier,
    broadcast_object,
    check_each_case_once,
    check_same,
    check_same_cases,
    destroy_dist_context,
    error_line,
    failure_reporter,
    gather_objects,
    get_dist_context,
    print_failure,
    read_dist_env,
    reduce_histogram,
    reduce_state,
    shard,
    share_early_error,
    sync_errors,
    write_failures,
)
from .run import CohortRun, process_cases, run_cases, settings_changes, start_notice
from .session import cohort_session

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "error_line",
    "check_same_cases",
    "check_each_case_once",
    "failure_reporter",
    "DistContext",
    "RankFailed",
    "CaseFailure",
    "CasesFailed",
    "read_dist_env",
    "get_dist_context",
    "destroy_dist_context",
    "shard",
    "all_gather_objects",
    "gather_objects",
    "broadcast_object",
    "barrier",
    "all_reduce_sum",
    "reduce_histogram",
    "reduce_state",
    "sync_errors",
    "share_early_error",
    "check_same",
    "write_failures",
    "print_failure",
    "CaseCache",
    "CohortRun",
    "process_cases",
    "run_cases",
    "start_notice",
    "settings_changes",
    "cohort_session",
]
