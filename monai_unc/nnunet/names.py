"""The choices of the nnU-Net predictor and its sub-commands: uncertainty sources and map measures.

Kept apart from :mod:`~monai_unc.nnunet.predictor` and :mod:`~monai_unc.nnunet.export` (which import torch and
nnU-Net) so that ``monai-unc nnunet-predict --help`` and its argument errors answer without importing either. Both
modules re-export these names. This module uses absolute imports only (see :mod:`monai_unc.nnunet.environment`).
"""

from __future__ import annotations

from monai_unc.keys import MEASURES, UncertaintyKeys

__all__ = ["SOURCES", "STOCHASTIC_SOURCES", "MAP_MEASURES"]

#: uncertainty sources the predictor can sample from
SOURCES: tuple[str, ...] = ("folds", "mirroring", "dropout", "rate_in", "ssn")
#: the sources that draw ``num_samples`` stochastic passes per window
STOCHASTIC_SOURCES: tuple[str, ...] = ("dropout", "rate_in", "ssn")

#: voxel maps the predictor can write (the package's list of measures; ``window_disagreement`` with
#: ``window_disagreement="separate"``, the predictor's default)
MAP_MEASURES: tuple[str, ...] = (*MEASURES, *(() if UncertaintyKeys.WINDOW_DISAGREEMENT.value in MEASURES
                                             else (UncertaintyKeys.WINDOW_DISAGREEMENT.value,)))
