"""Deprecated location: the demo moved to :mod:`monai_unc.workflows.demo`.

Its cohort writers moved to :mod:`monai_unc.data.cohorts`. Kept for one release so that existing imports keep working.
"""

import warnings

from ..data.cohorts import DEMO_SHIFTS, make_demo_cohort, write_toy_cohort
from ..workflows.demo import run_demo

__all__ = ["DEMO_SHIFTS", "make_demo_cohort", "run_demo", "write_toy_cohort"]

warnings.warn(
    "monai_unc.report.demo is deprecated and will be removed in the next release; import run_demo from "
    "monai_unc.workflows.demo and the cohort writers from monai_unc.data.cohorts",
    DeprecationWarning,
    stacklevel=2,
)
