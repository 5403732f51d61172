"""The call of this package's MONAI metric classes: a batch enters the buffer only once its warnings are said.

MONAI's ``CumulativeIterationMetric.__call__`` evaluates the batch (``IterationMetric.__call__``) and extends the
buffer with the result. The adapters hold the warnings of degenerate input and say them once per call, at the
user's line (:func:`~monai_unc._utils.said_once_per_call`), when the evaluation returns; run around MONAI's whole
call, a warning that a filter turns into an error (``warnings.simplefilter("error")``, ``-W error::UserWarning``)
was raised after the batch was buffered, so that the call failed and its batch was counted all the same (twice
after a retry). :func:`counted_call` says the warnings first and extends the buffer after, as MONAI does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from monai.metrics import CumulativeIterationMetric
from monai.metrics.metric import IterationMetric

from .._utils import said_once_per_call

__all__ = ["counted_call"]


def counted_call(
    metric: CumulativeIterationMetric,
    y_pred: Any,
    y: Any = None,
    /,
    *,
    on_count: Callable[[], None] | None = None,
    **kwargs: Any,
) -> Any:
    """MONAI's ``CumulativeIterationMetric.__call__`` of ``metric``, its warnings said before the batch is counted.

    Evaluates the batch with MONAI's ``IterationMetric.__call__`` (a decollated list item by item, a batch-first
    tensor detached) inside :func:`~monai_unc._utils.said_once_per_call`: each distinct warning once, at the user's
    line. Only when that returns (a warning made an error raises here, the buffer untouched) does ``on_count`` run
    and the buffer grow, exactly as MONAI extends it: ``metric.extend(*ret)`` for a tuple or list, else
    ``metric.extend(ret)``. In earlier versions the warnings came after the buffer was extended, so that a call
    whose warning was made an error still counted its batch.

    Args:
        metric: the metric (a ``CumulativeIterationMetric``).
        y_pred: the prediction, as MONAI's call takes it (a batch-first tensor or a decollated list).
        y: the reference, likewise (or None).
        on_count: run after the warnings are said and before the buffer is extended: the metric's other state of
            the batch (e.g. a pooled histogram) enters there, so that it counts exactly when the buffer does.
        **kwargs: passed to the evaluation (``_compute_tensor`` / ``_compute_list``).

    Returns:
        What MONAI's call returns: the values of the batch.

    Raises:
        TypeError: ``metric`` is not a ``CumulativeIterationMetric``, or ``on_count`` is not callable.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import NCCMetric
        >>> metric = NCCMetric()
        >>> torch.manual_seed(0) and None
        >>> rows = counted_call(metric, torch.rand(2, 1, 4, 4), torch.rand(2, 1, 4, 4))
        >>> tuple(rows.shape), tuple(metric.get_buffer().shape)
        ((2, 1), (2, 1))
    """
    if not isinstance(metric, CumulativeIterationMetric):
        raise TypeError(f"metric must be a MONAI CumulativeIterationMetric, got {type(metric).__name__}")
    if on_count is not None and not callable(on_count):
        raise TypeError(f"on_count must be callable or None, got {type(on_count).__name__}")
    ret = said_once_per_call(IterationMetric.__call__, metric, y_pred=y_pred, y=y, **kwargs)
    if on_count is not None:
        on_count()
    if isinstance(ret, (tuple, list)):
        metric.extend(*ret)
    else:
        metric.extend(ret)
    return ret
