"""Deprecated location: label-free quality estimates moved to :mod:`monai_unc.metrics.quality`.

Kept for one release so that existing imports keep working; import from :mod:`monai_unc.metrics.quality` (or
:mod:`monai_unc.metrics`) instead.
"""

import warnings

from .metrics.quality import *  # noqa: F403
from .metrics.quality import __all__  # noqa: F401

warnings.warn(
    "monai_unc.quality is deprecated and will be removed in the next release; import from monai_unc.metrics.quality",
    DeprecationWarning,
    stacklevel=2,
)
