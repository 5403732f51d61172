"""nnU-Net v2 integration: uncertainty predictor, dropout training routes, trainers, ``monai-unc nnunet-predict``.

Needs the optional extra: ``pip install 'monai-unc[nnunet]'`` (nnunetv2).
"""

try:
    import nnunetv2  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "monai_unc.nnunet needs nnU-Net v2, which is not installed: pip install 'monai-unc[nnunet]'"
    ) from err

from monai_unc.nnunet.dropout import (
    DEFAULT_TRAINING_DROPOUT,
    add_posthoc_dropout,
    dropout_arch_kwargs,
    dropout_plans,
    write_dropout_plans,
)
from monai_unc.nnunet.predictor import (
    DEFAULT_MEASURES,
    MAP_MEASURES,
    SOURCES,
    CaseUncertainty,
    UncertaintyPredictor,
    calibrate_model_folder,
    case_scores,
    convert_uncertainty_to_original_geometry,
    export_uncertainty,
    trainer_dir,
    write_float_map,
    write_scores_table,
)
from monai_unc.nnunet.trainers import (
    SSNDeepSupervisionLoss,
    attach_ssn_head,
    nnUNetTrainer_10iters,
    nnUNetTrainerMCDropout,
    nnUNetTrainerMCDropout_10iters,
    nnUNetTrainerSSN,
    nnUNetTrainerSSN_10iters,
    write_toy_dataset,
)

__all__ = [
    "DEFAULT_MEASURES",
    "DEFAULT_TRAINING_DROPOUT",
    "MAP_MEASURES",
    "SOURCES",
    "CaseUncertainty",
    "UncertaintyPredictor",
    "add_posthoc_dropout",
    "calibrate_model_folder",
    "case_scores",
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
    "trainer_dir",
    "write_dropout_plans",
    "write_float_map",
    "write_scores_table",
    "write_toy_dataset",
]
