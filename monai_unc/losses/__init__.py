"""Calibration losses for training, with MONAI's loss conventions.

Spatially varying label smoothing (SVLS), margin-based label smoothing (MbLS) and the hard- and soft-binned L1
average calibration error (L1-ACE).

The formulas are in :mod:`monai_unc.losses.functional`; the loss classes (alone, and composed with Dice as the
papers train them) in :mod:`monai_unc.losses.calibration`. MONAI's :class:`monai.losses.NACLLoss` and
:class:`monai.losses.FocalLoss` are used as they are. The nnU-Net trainers are in :mod:`monai_unc.nnunet.trainers`.
See docs/training.md.
"""

from .calibration import (
    DiceCEL1ACELoss,
    DiceCEMarginLoss,
    DiceSVLSLoss,
    L1ACELoss,
    MarginLoss,
    SVLSLoss,
    check_finite_loss,
    check_target,
    prepare_target,
)
from .functional import (
    binned_calibration,
    l1_average_calibration_error,
    margin_penalty,
    mean_margin_penalty,
    svls_kernel,
    svls_targets,
    svls_targets_separable,
)

__all__ = [
    "DiceCEL1ACELoss",
    "DiceCEMarginLoss",
    "DiceSVLSLoss",
    "L1ACELoss",
    "MarginLoss",
    "SVLSLoss",
    "binned_calibration",
    "check_finite_loss",
    "check_target",
    "l1_average_calibration_error",
    "margin_penalty",
    "mean_margin_penalty",
    "prepare_target",
    "svls_kernel",
    "svls_targets",
    "svls_targets_separable",
]
