"""Ignite handler for :class:`monai_unc.metrics.calibration.CalibrationMetric` (MONAI ``IgniteMetricHandler`` style)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._utils import require_ignite
from ..metrics.calibration import CALIBRATION_METRICS, DEFAULT_FINE_BINS, CalibrationMetric
from ._base import MetricHandler

__all__ = ["CalibrationHandler"]


class _MetricValues(dict):
    """The dict of a handler's metrics stored under its name in ``engine.state.metrics``, whose ``str`` is one field.

    MONAI's ``MetricsSaver`` writes each entry of ``engine.state.metrics`` as ``f"{name},{value}"`` (its default
    ``metrics="*"`` writes every entry), and the dict's own ``str``, ``{'calib_ece': 0.24, 'calib_nll': 1.28}``, holds
    the delimiter: in earlier versions the row had three fields where every other row of ``metrics.csv`` has two,
    and ``pandas.read_csv`` stopped at it. ``str`` gives ``calib_ece=0.24 calib_nll=1.28`` (full precision, no comma);
    equality, ``repr`` and every other use are those of the plain dict.
    """

    def __str__(self) -> str:
        return " ".join(f"{k}={v!r}" for k, v in self.items())


class CalibrationHandler(MetricHandler):
    """ECE family, NLL and Brier of an evaluator's probabilities, recorded in ``engine.state.metrics``.

    Attach with a name, e.g. ``CalibrationHandler(output_transform=from_engine(["pred", "label"])).attach(
    evaluator, "calib")``. At the end of the run ``engine.state.metrics`` holds one float per metric under
    ``"<name>_<metric>"`` (e.g. ``"calib_ece"``) and the dict of all of them under ``name`` (whose ``str``,
    ``calib_ece=0.1 calib_nll=0.2``, is what ``MetricsSaver`` writes for it: one field, no comma); with
    ``save_details`` the per-case values of each metric ``(n_cases, 1)`` are in
    ``engine.state.metric_details["<name>_<metric>"]``, under the key of its value in ``engine.state.metrics``, as
    MONAI's ``MetricsSaver`` expects them: one file per metric (``calib_ece_raw.csv``), whose columns are classes.
    (Found by review: the per-case values were one ``(n_cases, len(metrics))`` table under ``name``, which
    ``MetricsSaver`` wrote as ``calib_raw.csv`` with the metrics labelled ``class0``, ``class1``, ... and a ``mean``
    column averaging an ECE with an NLL.) States are reduced across ranks by the metric.

    ``y_pred`` must be probabilities ``(B, C, *spatial)`` (add ``Activations(softmax=True)`` to the
    post-transforms) and ``y`` labels ``(B, 1, *spatial)`` or one-hot. Arguments as in
    :class:`~monai_unc.metrics.calibration.CalibrationMetric`.

    As a MONAI workflow's ``key_val_metric`` (which selects the best epoch and the checkpoint
    ``CheckpointSaver(save_key_metric=True)`` keeps), give ``key_metric``: ``engine.state.metrics[name]`` is then that
    metric's float instead of the dict (MONAI skips a key metric that is not a scalar, with the warning "Key metric is
    not a scalar value", and would never save a best checkpoint). Every metric of this family is lower-is-better,
    and MONAI keeps the highest value in two places: pass the workflow
    ``metric_cmp_fn=lambda current, prev: prev < 0 or current < prev`` (MONAI starts ``prev`` at -1; this sets
    ``best_metric`` and ``best_metric_epoch``), and the saver ``CheckpointSaver(save_key_metric=True,
    key_metric_negative_sign=True)``: the saver ranks checkpoints by its own score, not by ``metric_cmp_fn``, and
    without the negative sign keeps the epochs of the highest, i.e. worst, value (its file is then named
    ``net_key_metric=-<value>.pt``).

    Args:
        num_classes: as in :class:`~monai_unc.metrics.calibration.CalibrationMetric`.
        metrics: as in :class:`~monai_unc.metrics.calibration.CalibrationMetric`.
        n_bins: as in :class:`~monai_unc.metrics.calibration.CalibrationMetric`.
        min_bin_count: as in :class:`~monai_unc.metrics.calibration.CalibrationMetric`.
        n_fine_bins: as in :class:`~monai_unc.metrics.calibration.CalibrationMetric`.
        reduction: as in :class:`~monai_unc.metrics.calibration.CalibrationMetric`.
        output_transform: returns ``(y_pred, y)`` from ``engine.state.output``.
        save_details: keep the per-case values in ``engine.state.metric_details["<name>_<metric>"]``.
        key_metric: one of ``metrics`` whose float is stored under the handler's own name (for a workflow's
            ``key_val_metric``); None (default) stores the dict of all of them there.
        include_background: ``False`` leaves channel 0 (the background) out of ``classwise_ece`` (the mean of the
            per-class ECEs of classes ``1 ... C - 1``), as MONAI's ``MeanDice`` handler reads it; as in
            :class:`~monai_unc.metrics.calibration.CalibrationMetric`.

    Example:
        >>> handler = CalibrationHandler(num_classes=2, metrics=("ece", "nll"), key_metric="ece")
        >>> handler.key_metric
        'ece'
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
        key_metric: str | None = None,
        include_background: bool = True,
    ) -> None:
        require_ignite(f"monai_unc.handlers.{type(self).__name__}")
        metric_fn = CalibrationMetric(
            num_classes=num_classes,
            metrics=metrics,
            n_bins=n_bins,
            min_bin_count=min_bin_count,
            n_fine_bins=n_fine_bins,
            reduction=reduction,
            include_background=include_background,
        )
        if key_metric is not None and (not isinstance(key_metric, str) or key_metric not in metric_fn.metrics):
            raise ValueError(f"key_metric must be one of the handler's metrics {list(metric_fn.metrics)} or None, "
                             f"got {key_metric!r}")
        self.key_metric = key_metric
        super().__init__(metric_fn=metric_fn, output_transform=output_transform, save_details=save_details)

    def completed(self, engine: Any, name: str) -> None:
        """Store the metrics as ignite does (``"<name>_<metric>"`` and the dict under ``name``), then ``key_metric``'s
        float under ``name`` when it is set.

        The keys and ``engine.state.metric_details`` follow the ``name`` (and ``engine``) of this event: a handler
        attached under two names fills both, where :meth:`compute` alone prefixes with the name attached last.
        """
        super().completed(engine, name)  # the keys and details follow this event's name and engine
        if self.key_metric is not None:
            engine.state.metrics[name] = engine.state.metrics[f"{name}_{self.key_metric}"]

    def compute(self) -> dict[str, Any]:
        """``{"<name>_<metric>": float}`` from :meth:`CalibrationMetric.aggregate`; with ``save_details``, each
        metric's per-case values ``(n_cases, 1)`` in ``engine.state.metric_details["<name>_<metric>"]`` (none after
        an epoch without a case: a previous run's are removed)."""
        result = super().compute()
        details = getattr(getattr(self._engine, "state", None), "metric_details", None)
        if self.save_details and isinstance(details, dict):
            table = details.pop(self._name, None)  # (n_cases, len(metrics)): the metrics are no classes
            for k, metric in enumerate(self.metric_fn.metrics):
                details.pop(f"{self._name}_{metric}", None)
                if table is not None:
                    details[f"{self._name}_{metric}"] = table[:, k:k + 1]
        prefix = f"{self._name}_" if self._name else ""
        # a dict whose str holds no comma: MetricsSaver writes it as one field of metrics.csv (see _MetricValues)
        return _MetricValues((f"{prefix}{k}", float(v)) for k, v in result.items())
