"""Deprecated location: the cohort evaluation moved to :mod:`monai_unc.evaluation`.

Kept for one release so that existing imports keep working; import from :mod:`monai_unc.evaluation` instead.
"""

import warnings

from ..evaluation import *  # noqa: F403
from ..evaluation import __all__  # noqa: F401

warnings.warn(
    "monai_unc.report.cohort is deprecated and will be removed in the next release; import from "
    "monai_unc.evaluation",
    DeprecationWarning,
    stacklevel=2,
)
