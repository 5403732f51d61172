"""Deprecated location: the cohort engine moved to :mod:`monai_unc.engine` (:mod:`monai_unc.engine.run`,
:mod:`monai_unc.engine.cache`).

Kept for one release so that existing imports keep working (the very same objects); import from
:mod:`monai_unc.engine` instead.
"""

import warnings

from ..engine import (
    CaseCache,
    CohortRun,
    process_cases,
    run_cases,
    settings_changes,
)

__all__ = [
    "CaseCache",
    "CohortRun",
    "process_cases",
    "run_cases",
    "settings_changes",
]

warnings.warn(
    "monai_unc.distributed.cases is deprecated and will be removed in the next release; import from monai_unc.engine",
    DeprecationWarning,
    stacklevel=2,
)
