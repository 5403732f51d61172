"""Ignite handler for :class:`monai_unc.metrics.calibration.CalibrationMetric` (MONAI ``IgniteMetricHandler`` style)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from monai.handlers.ignite_metric import IgniteMetricHandler

from ..metrics.calibration import CALIBRATION_METRICS, DEFAULT_FINE_BINS, CalibrationMetric

__all__ = ["CalibrationHandler"]


class CalibrationHandler(IgniteMetricHandler):
    """ECE family, NLL and Brier of an evaluator's probabilities, recorded in ``engine.state.metrics``.

    Attach with a name, e.g. ``CalibrationHandler(output_transform=from_engine(["pred", "label"])).attach(
    evaluator, "calib")``. At the end of the run ``engine.state.metrics`` holds one float per metric under
    ``"<name>_<metric>"`` (e.g. ``"calib_ece"``) and the dict of all of them under ``name``; with
    ``save_details`` the per-case values ``(n_cases, len(metrics))`` (columns in the order of ``metrics``)
    are in ``engine.state.metric_details[name]``. States are reduced across ranks by the metric.

    ``y_pred`` must be probabilities ``(B, C, *spatial)`` (add ``Activations(softmax=True)`` to the
    post-transforms) and ``y`` labels ``(B, 1, *spatial)`` or one-hot. Arguments as in
    :class:`~monai_unc.metrics.calibration.CalibrationMetric`.
    """

    def __init__(
        self,
        num_classes: int | None = None,
        metrics: Sequence[str] | str = CALIBRATION_METRICS,
        n_bins: int = 15,
        min_bin_count: int = 0,
        n_fine_bins: int = DEFAULT_FINE_BINS,
        reduction: str = "pooled",
        output_transform: Callable = lambda x: x,
        save_details: bool = True,
    ) -> None:
        metric_fn = CalibrationMetric(
            num_classes=num_classes,
            metrics=metrics,
            n_bins=n_bins,
            min_bin_count=min_bin_count,
            n_fine_bins=n_fine_bins,
            reduction=reduction,
        )
        super().__init__(metric_fn=metric_fn, output_transform=output_transform, save_details=save_details)

    def compute(self) -> dict[str, Any]:
        """``{"<name>_<metric>": float}`` from :meth:`CalibrationMetric.aggregate`."""
        result = super().compute()
        prefix = f"{self._name}_" if self._name else ""
        return {f"{prefix}{k}": float(v) for k, v in result.items()}
