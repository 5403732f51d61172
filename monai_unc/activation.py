"""The activation of a segmentation network's output, written once for classes and for regions.

A network ends either in a **softmax** over ``C`` classes (:data:`CATEGORICAL`: one categorical task, the
channels are the classes and exactly one is true per voxel) or in a **sigmoid** per channel (:data:`BERNOULLI`:
region-based models such as the BraTS regions WT / TC / ET, one independent Bernoulli per channel, so ``R``
binary tasks). Everything that differs between the two lives here, and temperature scaling
(:mod:`monai_unc.temperature`), the per-case evaluation rows (:mod:`monai_unc.evaluation.case`) and the case scores
of ``nnunet-predict`` are written once against it:

- probabilities from logits (:meth:`Activation.probabilities`, with an optional temperature);
- the split into tasks (:meth:`Activation.num_tasks`, :meth:`Activation.task_probabilities`,
  :meth:`Activation.split`): one categorical task of ``C`` classes, or one binary task per region whose class
  probabilities are ``(1 - p_r, p_r)`` (:func:`binary_probabilities`);
- confidence and correctness of a task's voxels (:meth:`Activation.confidence`, :meth:`Activation.correctness`):
  the top label ``max_c p_c`` and its argmax, or ``max(p, 1 - p)`` and ``p > 0.5``;
- the pieces temperature scaling needs: how a batch of logits and targets is checked and cut into the voxels of
  each task (:meth:`Activation.check_logits`, :meth:`Activation.batch_target`, :meth:`Activation.task_voxels`),
  which component of the temperature scales a task (:meth:`Activation.task_temperature`), and per chunk of voxels
  the NLL with its gradient (:meth:`Activation.nll_terms`) and the confidence with its gradient for the
  differentiable ECE (:meth:`Activation.ece_terms`). The formulas are those of the :mod:`monai_unc.temperature`
  module docstring; with ``a = z / t``:

  ========================  ===============================================  ==============================
  piece                     categorical (per voxel, classes ``c``)           Bernoulli (per region voxel)
  ========================  ===============================================  ==============================
  NLL                       ``logsumexp(a) - a_y``                           ``log(1 + exp(a)) - y a``
  ``dNLL / dt``             ``a_c (p_c - [y = c]) / t_c`` (one per class)    ``a (p - y) / t``
  confidence, prediction    ``p_k = max_c p_c``, ``k = argmax``              ``max(p, 1 - p)``, ``p > 0.5``
  ``dconf / dt``            ``p_k (p_c a_c - [c = k] a_k) / t_c``            ``-+ p (1 - p) a / t``
  ========================  ===============================================  ==============================

The module needs only ``_utils`` and sits in layer 1, so the metrics and every layer above can use it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ._utils import check_finite, check_labels, probability_tolerance

__all__ = [
    "Activation",
    "Categorical",
    "Bernoulli",
    "CATEGORICAL",
    "BERNOULLI",
    "ACTIVATIONS",
    "TaskView",
    "binary_probabilities",
    "get_activation",
]


def binary_probabilities(p: Any, axis: int = 0) -> Any:
    """The two-class probabilities ``(1 - p, p)`` of Bernoulli probabilities, stacked along a new ``axis``.

    Args:
        p: probabilities of the positive class, numpy array or torch tensor of any shape.
        axis: where the new class axis of length 2 goes.

    Returns:
        An array (numpy in, numpy out) with a class axis of length 2 at ``axis``: ``[1 - p, p]``.

    Example:
        >>> import numpy as np
        >>> binary_probabilities(np.array([0.25, 1.0])).tolist()
        [[0.75, 0.0], [0.25, 1.0]]
    """
    if isinstance(p, torch.Tensor):
        return torch.stack([1 - p, p], dim=axis)
    return np.stack([1.0 - p, p], axis=axis)


@dataclass
class TaskView:
    """The prediction and reference of one task of a case: the class task or one region.

    A user-defined per-case metric (``EvaluationConfig(case_metrics=...)``) receives one of these and returns a
    float. Label maps are integer arrays of the task's own classes: ``0 .. C-1`` for the class task, ``0`` / ``1``
    for a region.

    Args:
        name: ``None`` for the class task of a categorical prediction, the region's name for a region.
        pred: the predicted label map ``(*spatial)``.
        target: the reference label map ``(*spatial)``.
        num_classes: classes of the task (``C``, or 2 for a region).
        probs: the task's class probabilities ``(num_classes, *spatial)``, or None without probabilities.
        maps: the task's uncertainty maps ``{measure: (*spatial)}``.
        spacing: voxel spacing in mm, one value per spatial axis (default 1 mm).

    Example:
        >>> import numpy as np
        >>> view = TaskView("WT", np.array([[0, 1], [1, 1]]), np.array([[0, 1], [0, 1]]), 2)
        >>> int(view.pred.sum() - view.target.sum()), view.voxel_volume
        (1, 1.0)
    """

    name: str | None
    pred: np.ndarray
    target: np.ndarray
    num_classes: int
    probs: np.ndarray | None = None
    maps: dict[str, np.ndarray] = field(default_factory=dict)
    spacing: tuple[float, ...] | None = None

    @property
    def voxel_volume(self) -> float:
        """The volume of one voxel in mm^3 (the product of the spacing; 1 without spacing).

        Returns:
            The product of :attr:`spacing` as a float.
        """
        return float(np.prod(self.spacing)) if self.spacing else 1.0


class Activation:
    """How a network's output channels become probabilities and tasks; see the module docstring.

    Use the two instances :data:`CATEGORICAL` (softmax) and :data:`BERNOULLI` (sigmoid per channel), or
    :func:`get_activation` by name.

    Attributes:
        name: ``"softmax"`` or ``"sigmoid"``.
        multilabel: whether every channel is its own binary task.
        min_channels: the fewest channels a network's logits may have.
        channel_word: what a channel is called in messages (``"classes"`` or ``"regions"``).

    Example:
        >>> import torch
        >>> act = get_activation("sigmoid")
        >>> act.multilabel, act.num_tasks(3)
        (True, 3)
        >>> act.probabilities(torch.zeros(1, 3, 2)).unique().tolist()
        [0.5]
    """

    def __init__(self, name: str, multilabel: bool, min_channels: int, channel_word: str, no_voxels: str) -> None:
        """Set the attributes; use :data:`CATEGORICAL` and :data:`BERNOULLI` rather than new instances.

        Args:
            name: ``"softmax"`` or ``"sigmoid"``.
            multilabel: whether every channel is its own binary task.
            min_channels: the fewest channels the logits may have.
            channel_word: what a channel is called in messages.
            no_voxels: the end of the message when no voxel is left to fit on.
        """
        self.name, self.multilabel, self.min_channels = name, multilabel, min_channels
        self.channel_word, self.no_voxels = channel_word, no_voxels

    def __repr__(self) -> str:
        """The class name, e.g. ``Categorical()``."""
        return f"{type(self).__name__}()"

    # -- probabilities and tasks ----------------------------------------------------------------------------------
    def probabilities(self, logits: torch.Tensor, temperature: torch.Tensor | float | None = None) -> torch.Tensor:
        """Probabilities of logits ``(B, C, *spatial)``, each channel divided by ``temperature`` first.

        Args:
            logits: a floating-point tensor ``(B, C, *spatial)``.
            temperature: None, a scalar, or one value per channel ``(C,)``.

        Returns:
            A tensor of the shape and dtype of ``logits``: class probabilities (softmax over dim 1) or one
            probability per channel (sigmoid).
        """
        z = logits
        if temperature is not None:
            t = torch.as_tensor(temperature, dtype=z.dtype, device=z.device).reshape(-1)
            z = z / (t.view(1, -1, *([1] * (z.ndim - 2))) if t.numel() > 1 else t)
        return self._activate(z)

    def _activate(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def num_tasks(self, channels: int) -> int:
        """How many tasks logits with ``channels`` channels hold: 1 (categorical) or one per channel.

        Args:
            channels: the number of channels ``C`` (classes or regions).

        Returns:
            The number of tasks.
        """
        raise NotImplementedError

    def task_probabilities(self, probs: Any, axis: int = 1) -> list[Any]:
        """The class probabilities of every task, from probabilities with the channels along ``axis``.

        Args:
            probs: probabilities (numpy or torch), channels along ``axis``.
            axis: the channel axis (1 for ``(B, C, *spatial)``, 0 for one case ``(C, *spatial)``).

        Returns:
            One array per task with the task's classes along ``axis``: ``[probs]`` for the categorical task,
            ``(1 - p_r, p_r)`` (:func:`binary_probabilities`) per region.
        """
        raise NotImplementedError

    def task_targets(self, target: Any, axis: int = 1) -> list[Any]:
        """The reference labels of every task.

        Args:
            target: a label map (categorical, without a channel axis) or binary region masks with the regions
                along ``axis``.
            axis: the region axis of the masks.

        Returns:
            One label map per task: ``[target]``, or each region's mask as int64.
        """
        raise NotImplementedError

    def split(
        self,
        pred: np.ndarray,
        target: np.ndarray,
        probs: np.ndarray | None = None,
        maps: Mapping[str, np.ndarray] | None = None,
        names: Sequence[str] | None = None,
        spacing: Sequence[float] | None = None,
        num_classes: int | None = None,
    ) -> list[TaskView]:
        """One case split into its tasks (:class:`TaskView`), channels first.

        Args:
            pred: the predicted label map ``(*spatial)`` (categorical) or region masks ``(R, *spatial)``.
            target: the reference, of the same layout as ``pred``.
            probs: probabilities ``(C, *spatial)`` or ``(R, *spatial)``, or None.
            maps: uncertainty maps ``(*spatial)`` (categorical) or ``(R, *spatial)`` (one channel per region).
            names: the region names (Bernoulli only; default ``"0", "1", ...``).
            spacing: voxel spacing in mm.
            num_classes: the classes of a categorical prediction without probabilities (default: from the
                probabilities, else the largest label + 1).

        Returns:
            The tasks: one for a categorical prediction, one per region (masks as uint8 label maps) for a
            Bernoulli one.
        """
        raise NotImplementedError

    # -- confidence and correctness -------------------------------------------------------------------------------
    def confidence(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The confidence and the prediction of a task's voxels.

        Args:
            p: categorical class probabilities ``(C, n)``, or Bernoulli probabilities ``(n,)``.

        Returns:
            ``(confidence (n,), prediction (n,))``: ``max_c p_c`` and its first argmax, or ``max(p, 1 - p)`` and
            ``p > 0.5``.
        """
        raise NotImplementedError

    def correctness(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Whether each voxel's prediction is right, as float64 0/1.

        Args:
            pred: the prediction ``(n,)`` of :meth:`confidence`.
            target: the labels ``(n,)`` (categorical) or the binary masks ``(n,)`` (Bernoulli).

        Returns:
            ``(n,)`` float64.
        """
        raise NotImplementedError

    # -- temperature scaling ----------------------------------------------------------------------------------------
    def check_logits(self, z: torch.Tensor) -> None:
        """Raise ``ValueError`` when logits ``(B, C, *spatial)`` look like the output of the activation.

        Args:
            z: a batch of logits.
        """
        raise NotImplementedError

    def batch_target(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The target of a batch of logits in the layout :meth:`task_voxels` reads.

        ``ValueError`` naming ``target`` for a shape that does not fit the logits.

        Args:
            z: logits ``(B, C, *spatial)``.
            y: labels ``(B, [1,] *spatial)`` (categorical) or region masks ``(B, R, *spatial)`` (Bernoulli).

        Returns:
            ``y`` reshaped: ``(B, *spatial)`` or ``(B, R, *spatial)``.
        """
        raise NotImplementedError

    def check_target(self, y: torch.Tensor, ignore_index: int | None) -> None:
        """Check the values of a batch's target once, before fitting (``ValueError`` naming ``target``).

        Args:
            y: the target of :meth:`batch_target`.
            ignore_index: the label value left out, or None.
        """

    def task_voxels(self, z: torch.Tensor, y: torch.Tensor) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        """The voxels of every task of every case of a batch.

        Args:
            z: logits ``(B, C, *spatial)``.
            y: the target of :meth:`batch_target`.

        Yields:
            ``(task, logits, target)``: the task index, its logits ``(C, n)`` (categorical) or ``(n,)`` (one
            region), and the matching target ``(n,)``.
        """
        raise NotImplementedError

    def task_target(self, y: torch.Tensor, channels: int, first: bool) -> torch.Tensor:
        """A task's target ready for the loss, after ``ignore_index`` voxels were dropped.

        Args:
            y: the task's target ``(n,)``.
            channels: the channels of the logits.
            first: whether this is the first pass (labels are checked then).

        Returns:
            int64 labels (categorical; ``ValueError`` for labels out of range) or ``y`` unchanged.
        """
        return y

    def chunk_target(self, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """A chunk of a task's target in the form :meth:`nll_terms` and :meth:`ece_terms` take.

        Args:
            y: the chunk's target ``(n,)``.
            dtype: the dtype of the chunk's logits.

        Returns:
            int64 labels (categorical) or the masks in ``dtype`` (Bernoulli).
        """
        return y

    def grad_size(self, channels: int) -> int:
        """How many temperature components one task's gradient has: ``C`` (categorical) or 1 (one region).

        Args:
            channels: the channels of the logits.

        Returns:
            The length of the gradient of :meth:`nll_terms` and the width of that of :meth:`ece_terms`.
        """
        raise NotImplementedError

    def task_temperature(self, t: torch.Tensor, task: int, channels: int, like: torch.Tensor) -> torch.Tensor:
        """The temperature that divides a task's logits, in the dtype and on the device of ``like``.

        Args:
            t: the scalar ``(1,)`` or vector ``(C,)`` temperature.
            task: the task index.
            channels: the channels of the logits.
            like: the task's logits.

        Returns:
            ``(C, 1)`` (categorical, broadcasting over voxels) or a 0-d tensor (one region).
        """
        raise NotImplementedError

    def nll_terms(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The summed NLL of a chunk of a task's voxels at temperature ``t`` and its gradient w.r.t. ``t``.

        Args:
            z: the chunk's logits ``(C, n)`` or ``(n,)``.
            y: its target (:meth:`chunk_target`).
            t: the task's temperature (:meth:`task_temperature`).

        Returns:
            ``(loss, grad)``: the float64 sum of the voxels' NLL (0-d, on the CPU) and its gradient
            ``(grad_size,)`` float64.
        """
        raise NotImplementedError

    def ece_terms(
        self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per voxel of a chunk: the confidence, the correctness and the gradient of the confidence w.r.t. ``t``.

        Args:
            z: the chunk's logits ``(C, n)`` or ``(n,)``.
            y: its target (:meth:`chunk_target`).
            t: the task's temperature (:meth:`task_temperature`).

        Returns:
            ``(confidence (n,), correct (n,) float64, dconf/dt (n, grad_size))``.
        """
        raise NotImplementedError


class Categorical(Activation):
    """Softmax over the channels: one categorical task of ``C >= 2`` classes (integer labels).

    Example:
        >>> import torch
        >>> CATEGORICAL.confidence(torch.tensor([[0.2, 0.6], [0.8, 0.4]]))
        (tensor([0.8000, 0.6000]), tensor([1, 0]))
    """

    def __init__(self) -> None:
        """The softmax activation (use :data:`CATEGORICAL`)."""
        super().__init__("softmax", False, 2, "classes", "all labels ignored or empty batches")

    def _activate(self, z: torch.Tensor) -> torch.Tensor:
        return torch.softmax(z, 1)

    def num_tasks(self, channels: int) -> int:  # noqa: D102 (documented in Activation)
        return 1

    def task_probabilities(self, probs: Any, axis: int = 1) -> list[Any]:  # noqa: D102
        return [probs]

    def task_targets(self, target: Any, axis: int = 1) -> list[Any]:  # noqa: D102
        return [target]

    def split(self, pred: np.ndarray, target: np.ndarray, probs: np.ndarray | None = None,  # noqa: D102
              maps: Mapping[str, np.ndarray] | None = None, names: Sequence[str] | None = None,
              spacing: Sequence[float] | None = None, num_classes: int | None = None) -> list[TaskView]:
        if probs is not None:
            n_cls = int(probs.shape[0])
        else:
            n_cls = int(num_classes) if num_classes is not None else int(max(pred.max(), target.max())) + 1
        return [TaskView(None, pred, target, n_cls, probs, dict(maps or {}),
                         None if spacing is None else tuple(spacing))]

    def confidence(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        conf, pred = torch.max(p, 0)  # the first maximum wins, as torch.argmax
        return conf, pred

    def correctness(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return (pred == target).to(torch.float64)

    def check_logits(self, z: torch.Tensor) -> None:  # noqa: D102
        tol = probability_tolerance(z.dtype)
        if float(z.min()) < -tol or float(z.max()) > 1 + tol:
            return
        if float((z.sum(dim=1, dtype=torch.float64) - 1).abs().max()) <= tol:
            raise ValueError(
                "logits look like probabilities (every class vector lies in [0, 1] and sums to 1): "
                "temperature scaling divides the logits before the softmax; pass the network's raw output"
            )

    def batch_target(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if z.shape[1] < 2:
            raise ValueError(f"logits must have at least 2 classes along dim 1, got {tuple(z.shape)}")
        spatial = tuple(z.shape[2:])
        if tuple(y.shape) == (z.shape[0], 1, *spatial):
            y = y[:, 0]
        if tuple(y.shape) != (z.shape[0], *spatial):
            raise ValueError(
                f"target must have shape {(z.shape[0], *spatial)} (or with a channel of 1), got {tuple(y.shape)}"
            )
        return y

    def task_voxels(self, z: torch.Tensor, y: torch.Tensor) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:  # noqa: D102
        zf = z.reshape(z.shape[0], z.shape[1], -1)
        yf = y.reshape(y.shape[0], -1)
        for b in range(zf.shape[0]):
            yield 0, zf[b], yf[b]

    def task_target(self, y: torch.Tensor, channels: int, first: bool) -> torch.Tensor:  # noqa: D102
        if first:
            return check_labels(y, "target", channels)
        return y if y.dtype == torch.int64 else y.to(torch.int64)

    def grad_size(self, channels: int) -> int:  # noqa: D102
        return channels

    def task_temperature(self, t: torch.Tensor, task: int, channels: int, like: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return (t.expand(channels) if t.numel() == 1 else t).to(device=like.device, dtype=like.dtype).unsqueeze(1)

    def nll_terms(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        a = z / t
        lse = torch.logsumexp(a, dim=0)
        p = torch.exp(a - lse)
        a_y = a.gather(0, y.unsqueeze(0)).squeeze(0)
        loss = (lse - a_y).sum(dtype=torch.float64).cpu()
        pa = (p * a).sum(1, dtype=torch.float64)
        ya = torch.zeros(z.shape[0], dtype=torch.float64, device=z.device).index_add_(0, y, a_y.double())
        return loss, ((ya - pa) / t.squeeze(1).double()).cpu()

    def ece_terms(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # noqa: D102,E501
        a = z / t
        p = torch.exp(a - torch.logsumexp(a, dim=0))
        conf, pred = self.confidence(p)
        # dconf/dt_c = p_k (p_c a_c - [c = k] a_k) / t_c
        d = (p * a).mul_(conf)
        a_k = a.gather(0, pred.unsqueeze(0))
        d.scatter_add_(0, pred.unsqueeze(0), -(conf.unsqueeze(0) * a_k))
        return conf, self.correctness(pred, y), (d / t).T


class Bernoulli(Activation):
    """A sigmoid per channel: one binary task per region (binary region masks as the target).

    Example:
        >>> import torch
        >>> BERNOULLI.confidence(torch.tensor([0.2, 0.9]))
        (tensor([0.8000, 0.9000]), tensor([False,  True]))
    """

    def __init__(self) -> None:
        """The sigmoid activation (use :data:`BERNOULLI`)."""
        super().__init__("sigmoid", True, 1, "regions", "all region masks ignored or empty batches")

    def _activate(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(z)

    def num_tasks(self, channels: int) -> int:  # noqa: D102
        return channels

    def task_probabilities(self, probs: Any, axis: int = 1) -> list[Any]:  # noqa: D102
        n = probs.shape[axis]
        if isinstance(probs, torch.Tensor):
            return [binary_probabilities(probs.select(axis, r), axis) for r in range(n)]
        return [binary_probabilities(np.take(probs, r, axis=axis), axis) for r in range(n)]

    def task_targets(self, target: Any, axis: int = 1) -> list[Any]:  # noqa: D102
        n = target.shape[axis]
        if isinstance(target, torch.Tensor):
            return [target.select(axis, r).to(torch.int64) for r in range(n)]
        return [np.take(target, r, axis=axis).astype(np.int64) for r in range(n)]

    def split(self, pred: np.ndarray, target: np.ndarray, probs: np.ndarray | None = None,  # noqa: D102
              maps: Mapping[str, np.ndarray] | None = None, names: Sequence[str] | None = None,
              spacing: Sequence[float] | None = None, num_classes: int | None = None) -> list[TaskView]:
        n = int(pred.shape[0])
        names = [str(r) for r in range(n)] if names is None else list(names)
        if len(names) != n or target.shape[0] != n:
            raise ValueError(f"pred has {n} region(s), target {target.shape[0]}, names {len(names)}")
        task_probs = [None] * n if probs is None else self.task_probabilities(probs, axis=0)
        sp = None if spacing is None else tuple(spacing)
        return [TaskView(names[r], pred[r].astype(np.uint8), target[r].astype(np.uint8), 2, task_probs[r],
                         {m: u[r] for m, u in (maps or {}).items()}, sp) for r in range(n)]

    def confidence(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        pred = p > 0.5
        return torch.where(pred, p, 1 - p), pred

    def correctness(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return (pred == (target > 0.5)).to(torch.float64)

    def check_logits(self, z: torch.Tensor) -> None:  # noqa: D102
        tol = probability_tolerance(z.dtype)
        if float(z.min()) >= -tol and float(z.max()) <= 1 + tol:
            raise ValueError(
                "logits look like probabilities (every value lies in [0, 1]): temperature scaling divides "
                "the logits before the sigmoid; pass the network's raw output"
            )

    def batch_target(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # noqa: D102
        if z.shape[1] == 1 and tuple(y.shape) == (z.shape[0], *z.shape[2:]):
            y = y.unsqueeze(1)
        if tuple(y.shape) != tuple(z.shape):
            raise ValueError(
                f"target must hold one binary mask per region, shape {tuple(z.shape)} like the logits, got "
                f"{tuple(y.shape)} (build region masks from a label map with monai_unc.regions.label_to_regions)"
            )
        return y

    def check_target(self, y: torch.Tensor, ignore_index: int | None) -> None:  # noqa: D102
        if y.is_floating_point():
            check_finite(y, "target")
        vals = y if ignore_index is None else y[y != ignore_index]
        if vals.numel() and not bool(((vals == 0) | (vals == 1)).all()):
            raise ValueError(
                "target must hold binary region masks (0 or 1"
                + ("" if ignore_index is None else f", or ignore_index={ignore_index}")
                + f"), got values such as {sorted({float(v) for v in vals.unique()[:5].tolist()})}"
            )

    def task_voxels(self, z: torch.Tensor, y: torch.Tensor) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:  # noqa: D102
        zf = z.reshape(z.shape[0], z.shape[1], -1)
        yf = y.reshape(y.shape[0], y.shape[1], -1)
        for b in range(zf.shape[0]):
            for r in range(zf.shape[1]):
                yield r, zf[b, r], yf[b, r]

    def chunk_target(self, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:  # noqa: D102
        return y.to(dtype)

    def grad_size(self, channels: int) -> int:  # noqa: D102
        return 1

    def task_temperature(self, t: torch.Tensor, task: int, channels: int, like: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return (t[0] if t.numel() == 1 else t[task]).to(device=like.device, dtype=like.dtype)

    def nll_terms(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        a = z / t
        p = torch.sigmoid(a)
        # log(1 + exp(a)) - y a, exactly for any a
        bce = torch.logaddexp(a, torch.zeros((), dtype=a.dtype, device=a.device)) - y * a
        grad = ((y - p) * a).sum(dtype=torch.float64) / t.double()
        return bce.sum(dtype=torch.float64).cpu(), grad.reshape(1).cpu()

    def ece_terms(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # noqa: D102,E501
        a = z / t
        p = torch.sigmoid(a)
        conf, pred = self.confidence(p)
        # dconf/dt = -p (1 - p) a / t for the prediction 1, + p (1 - p) a / t for the prediction 0
        d = (p * (1 - p) * a / t) * torch.where(pred, -1.0, 1.0).to(a.dtype)
        return conf, self.correctness(pred, y), d.unsqueeze(1)


#: softmax over the classes: one categorical task
CATEGORICAL = Categorical()
#: a sigmoid per channel: one binary task per region
BERNOULLI = Bernoulli()
#: the activations by name
ACTIVATIONS: dict[str, Activation] = {CATEGORICAL.name: CATEGORICAL, BERNOULLI.name: BERNOULLI}


def get_activation(activation: str | Activation) -> Activation:
    """The activation of a name (``"softmax"`` or ``"sigmoid"``), or ``activation`` itself.

    Args:
        activation: a name of :data:`ACTIVATIONS` or an :class:`Activation`.

    Returns:
        The :class:`Activation`; ``ValueError`` naming ``activation`` for another name.

    Example:
        >>> get_activation("softmax") is CATEGORICAL
        True
    """
    if isinstance(activation, Activation):
        return activation
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
    return ACTIVATIONS[activation]
