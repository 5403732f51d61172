"""Deprecated location: batch prediction moved to :mod:`monai_unc.workflows` (``infer``, ``models``, ``factory``,
``calibrate``) and the temperature wrapper to :mod:`monai_unc.temperature`.

Kept for one release so that existing imports keep working; import from :mod:`monai_unc.workflows` instead.
"""

import warnings

from .keys import DEFAULT_MEASURES
from .temperature import TemperatureScaled, calibrate_network
from .workflows.calibrate import collect_logits
from .workflows.factory import METHOD_TOKENS, build_inferer
from .workflows.infer import (
    FAILURES_FILE,
    INTENSITY_MODES,
    InferSettings,
    case_outputs,
    check_run_settings,
    is_finished,
    load_image_case,
    normalize_intensity,
    predict_case,
    predict_cases,
    run_infer,
)
from .workflows.models import LoadedModel, load_checkpoint, load_network

__all__ = [
    "METHOD_TOKENS",
    "DEFAULT_MEASURES",
    "INTENSITY_MODES",
    "FAILURES_FILE",
    "InferSettings",
    "LoadedModel",
    "TemperatureScaled",
    "load_network",
    "load_checkpoint",
    "build_inferer",
    "normalize_intensity",
    "case_outputs",
    "is_finished",
    "load_image_case",
    "predict_case",
    "predict_cases",
    "check_run_settings",
    "run_infer",
    "collect_logits",
    "calibrate_network",
]

warnings.warn(
    "monai_unc.predict is deprecated and will be removed in the next release; import from monai_unc.workflows",
    DeprecationWarning,
    stacklevel=2,
)
