"""Deprecated location: NIfTI writing and JSON helpers moved to :mod:`monai_unc.io` (``monai_unc.io.files``).

Kept for one release so that existing imports keep working; import from :mod:`monai_unc.io` instead.
"""

import warnings

from ..io.files import atomic_write_text, json_safe, save_nifti

__all__ = ["save_nifti", "atomic_write_text", "json_safe"]

warnings.warn(
    "monai_unc.report.nifti is deprecated and will be removed in the next release; import save_nifti, "
    "atomic_write_text and json_safe from monai_unc.io",
    DeprecationWarning,
    stacklevel=2,
)
