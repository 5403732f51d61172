"""The base of the metric handlers: MONAI's ``IgniteMetricHandler``, without per-case details where no case was
scored."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from monai.data import MetaTensor
from monai.handlers.ignite_metric import IgniteMetricHandler

from .._utils import check_bool, check_callable, stated_affine
from ..io import grid_mismatch

__all__ = ["MetricHandler", "check_output_grids", "output_keys"]


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

    def update(self, output: Sequence[Any]) -> None:
        """As ``IgniteMetricHandler.update`` (``output`` is ``(y_pred, y)``), after :func:`check_output_grids`."""
        if isinstance(output, Sequence) and len(output) == 2:
            check_output_grids(output, ("y_pred", "y"))
        super().update(output)

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


def _case_grids(x: Any) -> list[tuple[Any, tuple[int, ...]]] | None:
    """``(affine, spatial shape)`` of each case of a handler input (a list of decollated cases or a batch), the affine
    None where the case carries no ``(4, 4)`` geometry (a plain tensor, or MONAI's default identity affine of a
    MetaTensor built without one); None for an input that is neither."""
    if isinstance(x, (list, tuple)):
        return [(stated_affine(c.affine), tuple(c.shape[1:])) if isinstance(c, MetaTensor) else (None, ()) for c in x]
    if isinstance(x, MetaTensor) and x.ndim >= 2:
        affine, n, spatial = x.affine, int(x.shape[0]), tuple(x.shape[2:])
        if affine.ndim == 3 and affine.shape[0] == n:
            return [(stated_affine(a), spatial) for a in affine]
        if affine.ndim == 2:
            return [(stated_affine(affine), spatial)] * n
    return None


def check_output_grids(output: Sequence[Any], names: Sequence[str], reference: int = -1) -> None:
    """``ValueError`` when the MetaTensors of one case among a handler's inputs lie on different grids of one shape.

    ``Invertd(keys="pred")`` in the postprocessing brings the prediction back to the file's grid while the label
    stays on the ``Orientationd`` grid; a flip keeps the shape, and in earlier versions every handler scored
    the flipped volumes without a word (a perfect prediction with ``p = 0.95``: NLL 0.459 instead of 0.051), where
    :class:`~monai_unc.transforms.ErrorMapd` refuses the pair. The rule is :func:`~monai_unc.io.grid_mismatch`,
    case by case; inputs of another shape are left to the metric's own check.

    Args:
        output: the handler's inputs (batches or lists of decollated cases).
        names: their names, for the message.
        reference: the index of the input the others are compared with (default the last, the labels).

    Raises:
        ValueError: naming both inputs and the case.
    """
    grids = [_case_grids(x) for x in output]
    ref_name, ref = names[reference], grids[reference]
    if ref is None:
        return
    for name, cases in zip(names, grids):
        if cases is None or cases is ref or len(cases) != len(ref):
            continue
        for i, ((affine, shape), (ref_affine, ref_shape)) in enumerate(zip(cases, ref)):
            if affine is None or ref_affine is None or shape != ref_shape:
                continue
            problem = grid_mismatch(affine, ref_affine, shape)
            if problem is not None:
                raise ValueError(
                    f"{name} and {ref_name} of case {i} have the same shape {shape} but different affines ({problem}): "
                    "they are not on the same grid (e.g. the prediction inverted with Invertd, the label left on the "
                    "preprocessed grid); invert both, or score before inverting"
                )


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
