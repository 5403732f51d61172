"""Deprecated location: the example data writers moved to :mod:`monai_unc.data.cohorts`.

Kept for one release so that existing imports keep working; import from :mod:`monai_unc.data.cohorts` instead.
"""

import warnings

from .cohorts import MANIFEST, export_mni152_cases, export_toy_cases, left_hemisphere_sample, load_datalist

__all__ = ["MANIFEST", "export_mni152_cases", "export_toy_cases", "load_datalist", "left_hemisphere_sample"]

warnings.warn(
    "monai_unc.data.export is deprecated and will be removed in the next release; import from monai_unc.data.cohorts",
    DeprecationWarning,
    stacklevel=2,
)
