"""Deprecated location: temperature scaling moved to :mod:`monai_unc.temperature`.

Kept for one release so that ``from monai_unc.calibration import TemperatureScaler`` keeps working.
"""

import warnings

from .temperature import TemperatureScaler

__all__ = ["TemperatureScaler"]

warnings.warn(
    "monai_unc.calibration is deprecated and will be removed in the next release; import TemperatureScaler from "
    "monai_unc.temperature",
    DeprecationWarning,
    stacklevel=2,
)
