"""Ignite metric handlers (MONAI ``IgniteMetricHandler`` style) for every monai-unc metric family with a MONAI
metric class: calibration (ECE family, NLL, Brier), spatial (BUC, BA-ECE, SPACE), ambiguity (GED, NCC) and the
QU-BraTS score of region-based models.

Each handler is a thin wrapper of the matching ``CumulativeIterationMetric``; per-case values land in
``engine.state.metric_details[name]`` with ``save_details=True``, and the metrics reduce their state across ranks
with MONAI's distributed helpers, so the handlers work under ``ignite.distributed``.
"""

from .ambiguity import GeneralizedEnergyDistance, NormalizedCrossCorrelation
from .calibration import CalibrationHandler
from .qu_brats import QUBraTS
from .spatial import BoundaryAwareECE, BoundaryUncertaintyConcentration, SpatialCalibrationError

__all__ = [
    "BoundaryAwareECE",
    "BoundaryUncertaintyConcentration",
    "CalibrationHandler",
    "GeneralizedEnergyDistance",
    "NormalizedCrossCorrelation",
    "QUBraTS",
    "SpatialCalibrationError",
]
