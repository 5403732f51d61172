"""Ignite handlers for the per-case ambiguity metrics (GED, NCC), in the style of MONAI's ``MeanDice``.

Each handler wraps the matching ``CumulativeIterationMetric`` of :mod:`monai_unc.metrics.ambiguity`; the
per-case values land in ``engine.state.metric_details[name]`` when ``save_details=True``. Cases whose value is
undefined (NaN) are left out of the mean; when every case is NaN the metric is NaN (with a ``UserWarning``), not
MONAI's 0.
"""

from __future__ import annotations

from collections.abc import Callable

from monai.utils import MetricReduction

from .._utils import require_ignite
from ..metrics.ambiguity import GEDMetric, NCCMetric
from ._base import MetricHandler

__all__ = ["GeneralizedEnergyDistance", "NormalizedCrossCorrelation"]


class GeneralizedEnergyDistance(MetricHandler):
    """Mean per-case GED of model samples against rater labels (Zepf et al. eq. 3); see :class:`GEDMetric`.

    ``output_transform`` must return ``(y_pred, y)``: sampled label maps ``(B, S, *spatial)`` and rater label
    maps ``(B, R, *spatial)`` (or lists of per-case tensors).
    """

    def __init__(
        self,
        variant: str = "ged",
        distance: str = "iou",
        num_classes: int | None = None,
        reduction: MetricReduction | str = MetricReduction.MEAN,
        output_transform: Callable = lambda x: x,
        save_details: bool = True,
    ) -> None:
        require_ignite(f"monai_unc.handlers.{type(self).__name__}")
        metric_fn = GEDMetric(variant=variant, distance=distance, num_classes=num_classes, reduction=reduction)
        super().__init__(metric_fn=metric_fn, output_transform=output_transform, save_details=save_details)


class NormalizedCrossCorrelation(MetricHandler):
    """Mean per-case NCC of predicted uncertainty against a reference map (ValUES eq. 12); see :class:`NCCMetric`.

    ``output_transform`` must return ``(y_pred, y)``: uncertainty maps ``(B, 1, *spatial)`` and reference maps
    ``(B, 1, *spatial)``, or rater label maps ``(B, R, *spatial)`` with ``y_is_raters=True``.
    """

    def __init__(
        self,
        y_is_raters: bool = False,
        reduction: MetricReduction | str = MetricReduction.MEAN,
        output_transform: Callable = lambda x: x,
        save_details: bool = True,
    ) -> None:
        require_ignite(f"monai_unc.handlers.{type(self).__name__}")
        metric_fn = NCCMetric(y_is_raters=y_is_raters, reduction=reduction)
        super().__init__(metric_fn=metric_fn, output_transform=output_transform, save_details=save_details)
