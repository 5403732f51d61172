"""The base of the metric handlers: MONAI's ``IgniteMetricHandler``, without per-case details where no case was
scored."""

from __future__ import annotations

from typing import Any

from monai.handlers.ignite_metric import IgniteMetricHandler

__all__ = ["MetricHandler"]


class MetricHandler(IgniteMetricHandler):
    """``IgniteMetricHandler`` that leaves ``engine.state.metric_details[name]`` out when no case was scored.

    MONAI stores the metric's ``get_buffer()`` there, None after an epoch without any case (the metric itself is NaN
    with a warning), and MONAI's ``MetricsSaver(metric_details=...)`` then fails with ``AttributeError: 'NoneType'
    object has no attribute 'ndim'`` (found by hostile testing); the entry, and so a previous run's details, is
    removed instead.
    """

    def compute(self) -> Any:
        """The metric's value, as ``IgniteMetricHandler.compute``; no ``metric_details`` entry without a case."""
        result = super().compute()
        details = getattr(getattr(self._engine, "state", None), "metric_details", None)
        if self.save_details and isinstance(details, dict) and details.get(self._name, 0) is None:
            del details[self._name]
        return result
