"""Ignite handlers for the spatial uncertainty metrics BUC, BA-ECE and SPACE (Zeevi et al., Sec. 3).

Each handler wraps the matching ``CumulativeIterationMetric`` of :mod:`monai_unc.metrics.spatial` in MONAI's
``IgniteMetricHandler``; with ``save_details=True`` the per-case values land in
``engine.state.metric_details[name]``.

These metrics need three things per case: the uncertainty map, the prediction and the reference labels. By
default the handler reads them from ``engine.state.output`` (a decollated list of dicts, or one dict of
batch tensors) under ``uncertainty_key`` (default ``"predictive_entropy"``, see
:class:`~monai_unc.keys.UncertaintyKeys`), ``pred_key`` (``"pred"``: probabilities or a label map; C >= 2
channels are reduced by argmax) and ``label_key`` (``"label"``). A custom ``output_transform`` may return
``(uncertainty, pred, label)`` or an already packed ``(y_pred, y)`` with the uncertainty in channel 0 of
``y_pred``. Class probabilities in place of that packed ``y_pred`` (``from_engine(["pred", "label"])``, the habit of
``MeanDice``) raise a ``ValueError`` instead of being scored with ``p_0`` as the uncertainty map.

The map is scored as it is. ``monai-unc evaluate`` divides entropies and mutual information by ``log C`` before
BA-ECE and SPACE (:func:`monai_unc.evaluation.unit_scale`); an inferer's ``predictive_entropy`` in nats (built without
``normalize=True``) gives these handlers another number than its ``ba_ece`` / ``space`` columns, without a warning
for two classes (the map stays below ``log 2 < 1``). To get the command's numbers, store the map divided by
``log C`` (or build the inferer with ``normalize=True``) and point ``uncertainty_key`` at it. BUC does not depend on
the scale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from monai.handlers.utils import from_engine
from monai.utils import MetricReduction

from .._utils import require_ignite
from ..keys import UncertaintyKeys
from ..metrics.spatial import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    SpatialCalibrationErrorMetric,
)
from ._base import MetricHandler, check_output_grids, output_keys

__all__ = ["BoundaryUncertaintyConcentration", "BoundaryAwareECE", "SpatialCalibrationError"]

_DEFAULT_UNCERTAINTY = UncertaintyKeys.PREDICTIVE_ENTROPY.value


class _SpatialHandler(MetricHandler):
    """``MetricHandler`` (an ``IgniteMetricHandler``) whose ``update`` also accepts ``(uncertainty, pred, label)``."""

    def __init__(
        self,
        metric_fn: Any,
        uncertainty_key: str,
        pred_key: str,
        label_key: str,
        output_transform: Callable | None,
        save_details: bool,
    ) -> None:
        require_ignite(f"monai_unc.handlers.{type(self).__name__}")
        if output_transform is None:
            output_transform = from_engine(
                output_keys(uncertainty_key=uncertainty_key, pred_key=pred_key, label_key=label_key)
            )
        super().__init__(metric_fn=metric_fn, output_transform=output_transform, save_details=save_details)
        # ignite would split a decollated (y_pred, y) pair per sample and rejects a triple; the metric takes
        # whole batches and lists itself
        self._skip_unrolling = True

    def update(self, output: Sequence[Any]) -> None:
        """``output`` is ``(uncertainty, pred, label)`` or a packed ``(y_pred, y)``."""
        if len(output) == 3:
            check_output_grids(output, ("uncertainty", "pred", "label"))
            uncertainty, y_pred, y = output
            self.metric_fn(y_pred, y, uncertainty=uncertainty)
            return
        if len(output) == 2:  # the metric refuses class probabilities in place of a packed y_pred
            check_output_grids(output, ("y_pred", "y"))
            self.metric_fn(output[0], output[1])
            return
        raise ValueError(f"output must be (uncertainty, pred, label) or (y_pred, y), got {len(output)} items")


class BoundaryUncertaintyConcentration(_SpatialHandler):
    """Mean per-case BUC (higher is better); see :class:`BoundaryUncertaintyConcentrationMetric`.

    Args:
        spacing: voxel size in mm; default from the MetaTensor affine of the labels, else (a plain tensor, or MONAI's
            default identity affine of a label MetaTensor built without geometry) of the maps, else 1 mm.
        width: boundary band width in mm; default HD95 (at least the largest spacing of an axis with more than one
            voxel).
        backend: distance-transform backend (``"auto"``, ``"edt"``, ``"scipy"`` or ``"cucim"``).
        reduction: as in MONAI's metrics; NaN cases are ignored.
        uncertainty_key: key of the uncertainty map in ``engine.state.output`` (read by the default transform).
        pred_key: key of the prediction in ``engine.state.output``.
        label_key: key of the label in ``engine.state.output``.
        output_transform: returns ``(uncertainty, pred, label)`` or ``(y_pred, y)``.
        save_details: keep per-case values in ``engine.state.metric_details``.
    """

    def __init__(
        self,
        spacing: Any = None,
        width: float | None = None,
        backend: str = "auto",
        reduction: MetricReduction | str = MetricReduction.MEAN,
        uncertainty_key: str = _DEFAULT_UNCERTAINTY,
        pred_key: str = "pred",
        label_key: str = "label",
        output_transform: Callable | None = None,
        save_details: bool = True,
    ) -> None:
        metric_fn = BoundaryUncertaintyConcentrationMetric(
            spacing=spacing, width=width, backend=backend, reduction=reduction
        )
        super().__init__(metric_fn, uncertainty_key, pred_key, label_key, output_transform, save_details)


class BoundaryAwareECE(_SpatialHandler):
    """Mean per-case BA-ECE (lower is better); see :class:`BoundaryAwareECEMetric` and
    :class:`BoundaryUncertaintyConcentration` for the common arguments."""

    def __init__(
        self,
        spacing: Any = None,
        n_bands: int = 10,
        max_distance: float | None = None,
        normalize: bool = False,
        backend: str = "auto",
        reduction: MetricReduction | str = MetricReduction.MEAN,
        uncertainty_key: str = _DEFAULT_UNCERTAINTY,
        pred_key: str = "pred",
        label_key: str = "label",
        output_transform: Callable | None = None,
        save_details: bool = True,
    ) -> None:
        metric_fn = BoundaryAwareECEMetric(
            spacing=spacing,
            n_bands=n_bands,
            max_distance=max_distance,
            normalize=normalize,
            backend=backend,
            reduction=reduction,
        )
        super().__init__(metric_fn, uncertainty_key, pred_key, label_key, output_transform, save_details)


class SpatialCalibrationError(_SpatialHandler):
    """Mean per-case SPACE (lower is better); see :class:`SpatialCalibrationErrorMetric` and
    :class:`BoundaryUncertaintyConcentration` for the common arguments."""

    def __init__(
        self,
        spacing: Any = None,
        sigma: float | Sequence[float] = 2.0,
        truncate: float = 4.0,
        reduction: MetricReduction | str = MetricReduction.MEAN,
        uncertainty_key: str = _DEFAULT_UNCERTAINTY,
        pred_key: str = "pred",
        label_key: str = "label",
        output_transform: Callable | None = None,
        save_details: bool = True,
    ) -> None:
        metric_fn = SpatialCalibrationErrorMetric(spacing=spacing, sigma=sigma, truncate=truncate, reduction=reduction)
        super().__init__(metric_fn, uncertainty_key, pred_key, label_key, output_transform, save_details)
