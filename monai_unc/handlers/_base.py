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

    The value and the details follow the ``name`` and ``engine`` of each completion: MONAI records only the last
    ``attach`` and wrote every completion there.
    """

    def completed(self, engine: Any, name: str) -> None:
        """Store the metric under ``name`` in ``engine.state.metrics`` (and its details in ``engine``'s
        ``metric_details[name]``), as ignite does, whichever engine and name this handler was attached to last.

        Args:
            engine: the engine whose epoch completed.
            name: the name this completion was attached under.
        """
        # found by hostile testing: attached under "a" and "b", only metric_details["b"] was filled; one handler
        # attached to a trainer and to an evaluator wrote the trainer's per-case details into the evaluator's
        # metric_details (and a calibration handler's "<name>_<metric>" keys took the last name)
        attached = self._name, self._engine
        self._name, self._engine = name, engine
        try:
            super().completed(engine, name)
        finally:
            self._name, self._engine = attached

    def compute(self) -> Any:
        """The metric's value, as ``IgniteMetricHandler.compute``; no ``metric_details`` entry without a case."""
        result = super().compute()
        details = getattr(getattr(self._engine, "state", None), "metric_details", None)
        if self.save_details and isinstance(details, dict) and details.get(self._name, 0) is None:
            del details[self._name]
        return result
