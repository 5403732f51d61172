"""Workflows behind the command line.

Loading a model (:mod:`.models`), building the inferer of a method string (:mod:`.factory`; the values of its options
checked without MONAI in :mod:`.options`), the checks and plan of a run before its first case (:mod:`.prepare`:
:func:`prepare_evaluate`, without MONAI; :mod:`.infer_plan`: :func:`prepare_infer`; :mod:`.report`:
:func:`run_report`, :func:`triage_with_page`), batch prediction with resume and ``torchrun`` (:mod:`.infer`), the logits
for temperature calibration (:mod:`.calibrate`) and the demo (:mod:`.demo`).

Each cohort command is one call here, inside its session (:mod:`.session`: the process group of a ``torchrun`` job
and the failed-cases step): :func:`infer_command` (:mod:`.infer_plan`), :func:`evaluate_command` (:mod:`.evaluate`),
:func:`triage_command` (:mod:`.triage`) and, for the command of a cohort product, :func:`apply_command`
(:mod:`.apply`); they return a
:class:`CommandResult` or raise :class:`CohortFailed`. The command line parses with :mod:`.arguments` (light: no
torch) and runs a command with its ``<command>_from_arguments`` (e.g.
:func:`monai_unc.workflows.evaluate.evaluate_from_arguments`).

The names below are imported from their submodule on first access (PEP 562), so that importing
:mod:`monai_unc.workflows.arguments` (``monai-unc --help``) loads neither torch nor MONAI;
``from monai_unc.workflows import run_infer`` works as always.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes
from ..keys import DEFAULT_MEASURES

if TYPE_CHECKING:  # what _LAZY loads on first access, for type checkers and the API reference (griffe)
    from .apply import apply_command
    from .calibrate import check_fit_is_defined, collect_logits
    from .evaluate import evaluate_command
    from .factory import build_inferer
    from .infer import (
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
    from .infer_plan import InferPlan, check_window_options, infer_command, prepare_infer
    from .models import LoadedModel, check_model_activation, checkpoint_temperature, load_checkpoint, load_network
    from .options import FAILURES_FILE, INTENSITY_MODES, METHOD_TOKENS, normalize_roi
    from .prepare import (
        check_infer_output,
        infer_measures,
        prepare_evaluate,
        read_case_list,
        read_region_spec,
        resolve_device,
    )
    from .report import run_report, triage_with_page
    from .session import (
        WARNING_PREFIX,
        CohortFailed,
        CommandResult,
        command_session,
        quiet_lines,
        run_command,
        share_refusal,
    )
    from .triage import triage_command

#: public name -> the submodule defining it, imported on first access (PEP 562): importing this package (e.g. for
#: ``monai-unc --help``, which parses with :mod:`.arguments`) loads neither torch nor MONAI
_LAZY: dict[str, str] = {
    **dict.fromkeys(("collect_logits", "check_fit_is_defined"), "calibrate"),
    "apply_command": "apply",
    "evaluate_command": "evaluate",
    "build_inferer": "factory",
    **dict.fromkeys(("InferSettings", "case_outputs", "check_run_settings", "is_finished", "load_image_case",
                     "normalize_intensity", "predict_case", "predict_cases", "run_infer"), "infer"),
    **dict.fromkeys(("InferPlan", "check_window_options", "infer_command", "prepare_infer"), "infer_plan"),
    **dict.fromkeys(("LoadedModel", "check_model_activation", "checkpoint_temperature", "load_checkpoint",
                     "load_network"), "models"),
    **dict.fromkeys(("FAILURES_FILE", "INTENSITY_MODES", "METHOD_TOKENS", "normalize_roi"), "options"),
    **dict.fromkeys(("check_infer_output", "infer_measures", "prepare_evaluate", "read_case_list", "read_region_spec",
                     "resolve_device"), "prepare"),
    **dict.fromkeys(("run_report", "triage_with_page"), "report"),
    **dict.fromkeys(("CohortFailed", "CommandResult", "WARNING_PREFIX", "command_session", "quiet_lines",
                    "run_command", "share_refusal"),
                   "session"),
    "triage_command": "triage",
}
#: submodules reachable as attributes (``monai_unc.workflows.infer``) without an import statement, as before
_SUBMODULES = ("apply", "arguments", "calibrate", "demo", "evaluate", "factory", "infer", "infer_plan", "models",
               "options", "prepare", "report", "session", "triage")


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES, globals())


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
    "check_model_activation",
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
    "check_fit_is_defined",
    "normalize_roi",
    "InferPlan",
    "prepare_infer",
    "prepare_evaluate",
    "check_infer_output",
    "infer_measures",
    "read_case_list",
    "read_region_spec",
    "resolve_device",
    "run_report",
    "triage_with_page",
    "CohortFailed",
    "CommandResult",
    "command_session",
    "quiet_lines",
    "WARNING_PREFIX",
    "run_command",
    "share_refusal",
    "infer_command",
    "check_window_options",
    "evaluate_command",
    "triage_command",
    "apply_command",
]
