"""Workflows behind the command line: loading a model (:mod:`.models`), building the inferer of a method string
(:mod:`.factory`), batch prediction with resume and ``torchrun`` (:mod:`.infer`), the logits for temperature
calibration (:mod:`.calibrate`) and the demo (:mod:`.demo`)."""

from ..keys import DEFAULT_MEASURES
from .calibrate import collect_logits
from .factory import METHOD_TOKENS, build_inferer
from .infer import (
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
from .models import LoadedModel, checkpoint_temperature, load_checkpoint, load_network

__all__ = [
    "METHOD_TOKENS",
    "DEFAULT_MEASURES",
    "INTENSITY_MODES",
    "FAILURES_FILE",
    "InferSettings",
    "LoadedModel",
    "load_network",
    "load_checkpoint",
    "checkpoint_temperature",
    "build_inferer",
    "normalize_intensity",
    "load_image_case",
    "case_outputs",
    "is_finished",
    "predict_case",
    "predict_cases",
    "check_run_settings",
    "run_infer",
    "collect_logits",
]
