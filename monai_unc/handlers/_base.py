"""The base of the metric handlers: MONAI's ``IgniteMetricHandler``, without per-case details where no case was
scored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from monai.handlers.ignite_metric import IgniteMetricHandler

from .._utils import check_bool, check_callable

__all__ = ["MetricHandler", "output_keys"]


class MetricHandler(IgniteMetricHandler):
    """``IgniteMetricHandler`` that leaves ``engine.state.metric_details[name]`` out when no case was scored.

    MONAI stores the metric's ``get_buffer()`` there, None after an epoch without any case (the metric itself is NaN
    with a warning), and MONAI's ``MetricsSaver(metric_details=...)`` then fails with ``AttributeError: 'NoneType'
    object has no attribute 'ndim'`` (found by hostile testing); the entry, and so a previous run's details, is
    removed instead.

    The value and the details follow the ``name`` and ``engine`` of each completion: MONAI records only the last
    ``attach`` and wrote every completion there.
    """

    def __init__(self, metric_fn: Any, output_transform: Callable = lambda x: x, save_details: bool = True) -> None:
        """As ``IgniteMetricHandler``, with ``save_details`` and ``output_transform`` checked.

        Args:
            metric_fn: the ``CumulativeIterationMetric``.
            output_transform: returns the metric's inputs from ``engine.state.output``.
            save_details: keep the per-case values in ``engine.state.metric_details[name]``.

        Raises:
            TypeError: ``save_details`` is not a bool (a truthy string such as ``"no"`` kept the details) or
                ``output_transform`` is not callable.
        """
        super().__init__(
            metric_fn=metric_fn,
            output_transform=check_callable(output_transform, "output_transform", optional=False),
            save_details=check_bool(save_details, "save_details"),
        )

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


def output_keys(**keys: Any) -> list[str]:
    """The keys of ``engine.state.output`` a default ``output_transform`` reads, in the order given.

    Args:
        keys: argument name -> key (a string; a ``StrEnum`` such as ``UncertaintyKeys`` gives its value).

    Returns:
        The keys as plain strings.

    Raises:
        TypeError: a key is not a string (``uncertainty_key=3`` or ``pred_key=None`` read the key ``"3"`` or
            ``"None"`` and failed at the first iteration, after its inference).

    Example:
        >>> output_keys(uncertainty_key="predictive_entropy", pred_key="pred")
        ['predictive_entropy', 'pred']
    """
    for name, key in keys.items():
        if not isinstance(key, str):
            raise TypeError(f"{name} must be a string (a key of engine.state.output), got {key!r}")
    return [str(key) for key in keys.values()]
