"""nnU-Net v2 integration: uncertainty predictor, export, temperature scaling, dropout, trainers and the CLI.

The command line is ``monai-unc nnunet-predict`` (and ``nnunet-dropout-plans``, ``nnunet-calibrate``).

Modules: :mod:`~monai_unc.nnunet.predictor` (``UncertaintyPredictor``), :mod:`~monai_unc.nnunet.export`
(geometry, maps, case records and scores), :mod:`~monai_unc.nnunet.calibrate` (temperature per fold),
:mod:`~monai_unc.nnunet.dropout` (plans variant, post-hoc dropout), :mod:`~monai_unc.nnunet.trainers`,
:mod:`~monai_unc.nnunet.environment` (supported nnU-Net versions, trainer folder), :mod:`~monai_unc.nnunet.names`
(sources and map measures), :mod:`~monai_unc.nnunet.cli`. The names below are imported from their module on first
access, so that importing this package (``monai-unc nnunet-predict --help``) loads neither torch nor nnU-Net's
predictor; ``from monai_unc.nnunet import UncertaintyPredictor`` works as always.

Needs the optional extra: ``pip install 'monai-unc[nnunet]'`` (nnunetv2, see
:data:`~monai_unc.nnunet.environment.SUPPORTED_VERSIONS`); another nnunetv2 version fails here, at import.
"""

from typing import TYPE_CHECKING

try:
    import nnunetv2  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "monai_unc.nnunet needs nnU-Net v2, which is not installed: pip install 'monai-unc[nnunet]'"
    ) from err

from monai_unc.nnunet.environment import SUPPORTED_VERSIONS, check_nnunet_version, trainer_dir

check_nnunet_version()

from monai_unc._lazy import lazy_attributes  # noqa: E402
from monai_unc.keys import DEFAULT_MEASURES  # noqa: E402
from monai_unc.nnunet.names import MAP_MEASURES, SOURCES  # noqa: E402

if TYPE_CHECKING:  # what _LAZY loads on first access, for type checkers and the API reference (griffe)
    from monai_unc.nnunet.calibrate import calibrate_model_folder, region_targets
    from monai_unc.nnunet.dropout import (
        DEFAULT_TRAINING_DROPOUT,
        add_posthoc_dropout,
        check_dropout_rate,
        dropout_arch_kwargs,
        dropout_plans,
        write_dropout_plans,
    )
    from monai_unc.nnunet.export import (
        PATCH_SIZE,
        CaseUncertainty,
        case_exported,
        case_scores,
        convert_uncertainty_to_original_geometry,
        export_uncertainty,
        read_case_record,
        record_case_scores,
        recorded_case_settings,
        region_case_scores,
        region_definitions,
        remove_case_outputs,
        sidecar_record_clashes,
        write_float_map,
        write_region_maps,
        write_scores_table,
    )
    from monai_unc.nnunet.predictor import (
        UncertaintyPredictor,
        check_case_channels,
        check_checkpoint_name,
        check_finite_inputs,
        check_npy_case,
    )
    from monai_unc.nnunet.trainers import (
        CalibrationLoss,
        PerOutputDeepSupervision,
        SSNDeepSupervisionLoss,
        attach_ssn_head,
        nnUNetTrainer_10iters,
        nnUNetTrainerL1ACE,
        nnUNetTrainerMbLS,
        nnUNetTrainerMCDropout,
        nnUNetTrainerMCDropout_10iters,
        nnUNetTrainerMCDropoutL1ACE,
        nnUNetTrainerMCDropoutMbLS,
        nnUNetTrainerMCDropoutNACL,
        nnUNetTrainerMCDropoutSoftL1ACE,
        nnUNetTrainerMCDropoutSVLS,
        nnUNetTrainerNACL,
        nnUNetTrainerSoftL1ACE,
        nnUNetTrainerSSN,
        nnUNetTrainerSSN_10iters,
        nnUNetTrainerSVLS,
        write_toy_dataset,
    )

#: public name -> the submodule defining it, imported on first access (PEP 562): importing this package (e.g. for
#: ``monai-unc nnunet-predict --help``) loads neither torch nor nnU-Net's predictor
_LAZY: dict[str, str] = {
    **dict.fromkeys(("calibrate_model_folder", "region_targets"), "calibrate"),
    **dict.fromkeys(("DEFAULT_TRAINING_DROPOUT", "add_posthoc_dropout", "check_dropout_rate", "dropout_arch_kwargs",
                     "dropout_plans", "write_dropout_plans"), "dropout"),
    **dict.fromkeys(("PATCH_SIZE", "CaseUncertainty", "case_exported", "case_scores",
                     "convert_uncertainty_to_original_geometry", "export_uncertainty", "record_case_scores",
                     "recorded_case_settings", "read_case_record", "region_case_scores", "region_definitions",
                     "remove_case_outputs", "sidecar_record_clashes",
                     "write_float_map", "write_region_maps", "write_scores_table"), "export"),
    **dict.fromkeys(("UncertaintyPredictor", "check_case_channels", "check_checkpoint_name", "check_finite_inputs",
                    "check_npy_case"),
                    "predictor"),
    **dict.fromkeys(("CalibrationLoss", "PerOutputDeepSupervision", "nnUNetTrainerSVLS", "nnUNetTrainerMbLS",
                     "nnUNetTrainerL1ACE", "nnUNetTrainerSoftL1ACE", "nnUNetTrainerNACL", "nnUNetTrainerMCDropoutSVLS",
                     "nnUNetTrainerMCDropoutMbLS", "nnUNetTrainerMCDropoutL1ACE", "nnUNetTrainerMCDropoutSoftL1ACE",
                     "nnUNetTrainerMCDropoutNACL"), "trainers"),
    **dict.fromkeys(("SSNDeepSupervisionLoss", "attach_ssn_head", "nnUNetTrainer_10iters", "nnUNetTrainerMCDropout",
                     "nnUNetTrainerMCDropout_10iters", "nnUNetTrainerSSN", "nnUNetTrainerSSN_10iters",
                     "write_toy_dataset"), "trainers"),
}
#: submodules reachable as attributes (``monai_unc.nnunet.export``) without an import statement, as before
_SUBMODULES = ("calibrate", "cli", "dropout", "environment", "export", "names", "predictor", "trainers")


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, _SUBMODULES, globals())


__all__ = [
    "CalibrationLoss",
    "PerOutputDeepSupervision",
    "nnUNetTrainerSVLS",
    "nnUNetTrainerMbLS",
    "nnUNetTrainerL1ACE",
    "nnUNetTrainerSoftL1ACE",
    "nnUNetTrainerNACL",
    "nnUNetTrainerMCDropoutSVLS",
    "nnUNetTrainerMCDropoutMbLS",
    "nnUNetTrainerMCDropoutL1ACE",
    "nnUNetTrainerMCDropoutSoftL1ACE",
    "nnUNetTrainerMCDropoutNACL",
    "DEFAULT_MEASURES",
    "DEFAULT_TRAINING_DROPOUT",
    "MAP_MEASURES",
    "PATCH_SIZE",
    "SOURCES",
    "SUPPORTED_VERSIONS",
    "CaseUncertainty",
    "UncertaintyPredictor",
    "add_posthoc_dropout",
    "calibrate_model_folder",
    "case_exported",
    "case_scores",
    "check_case_channels",
    "check_finite_inputs",
    "check_dropout_rate",
    "check_checkpoint_name",
    "check_npy_case",
    "check_nnunet_version",
    "convert_uncertainty_to_original_geometry",
    "dropout_arch_kwargs",
    "dropout_plans",
    "export_uncertainty",
    "nnUNetTrainerMCDropout",
    "nnUNetTrainerMCDropout_10iters",
    "nnUNetTrainerSSN",
    "nnUNetTrainerSSN_10iters",
    "SSNDeepSupervisionLoss",
    "attach_ssn_head",
    "nnUNetTrainer_10iters",
    "record_case_scores",
    "recorded_case_settings",
    "read_case_record",
    "region_case_scores",
    "remove_case_outputs",
    "sidecar_record_clashes",
    "region_definitions",
    "region_targets",
    "trainer_dir",
    "write_dropout_plans",
    "write_float_map",
    "write_region_maps",
    "write_scores_table",
    "write_toy_dataset",
]
