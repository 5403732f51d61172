"""Deprecated location: the cohort engine and its collectives moved to :mod:`monai_unc.engine`.

Kept for one release so that existing imports keep working (the very same objects); import from
:mod:`monai_unc.engine` instead.
"""

import warnings

from ..engine import (
    DEFAULT_TIMEOUT_S,
    CaseCache,
    CaseFailure,
    CasesFailed,
    CohortRun,
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
    process_cases,
    read_dist_env,
    reduce_histogram,
    run_cases,
    settings_changes,
    shard,
    sync_errors,
    write_failures,
)

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
    "sync_errors",
    "check_same",
    "write_failures",
    "print_failure",
    "CaseCache",
    "CohortRun",
    "process_cases",
    "run_cases",
    "settings_changes",
]

warnings.warn(
    "monai_unc.distributed is deprecated and will be removed in the next release; import from monai_unc.engine",
    DeprecationWarning,
    stacklevel=2,
)
