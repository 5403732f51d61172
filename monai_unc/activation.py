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
  ``dNLL / dt``             ``a_c ([y = c] - p_c) / t_c`` (one per class)    ``a (y - p) / t``
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

from ._utils import (
    affine_voxel_volume,
    check_finite,
    check_integer,
    check_labels,
    equals_label,
    foreground_masks,
    normalize_spacing,
    probability_tolerance,
)

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
    "foreground_masks",
]


def _tensor(x: Any, name: str, floating: bool = False) -> torch.Tensor:
    """``x`` if it is a torch tensor (floating point when ``floating``); ``TypeError`` naming ``name`` otherwise."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor, got {type(x).__name__}")
    if floating and not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    return x


def _array(x: Any, name: str) -> Any:
    """``x`` if it is a numpy array or a torch tensor; ``TypeError`` naming ``name`` otherwise."""
    if not isinstance(x, (np.ndarray, torch.Tensor)):
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")
    return x


def _axis(axis: Any, ndim: int, what: str, name: str = "axis") -> int:
    """``axis`` as an int if it is an axis of an array of ``ndim`` dimensions; ``ValueError`` naming ``name``."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"{name} must be an integer in [{-ndim}, {ndim - 1}] (an axis of {what}), got {axis!r}")
    return int(axis) % ndim


def _check_temperature(
    t: Any, name: str, sizes: tuple[int, ...], dtype: torch.dtype | None = None, what: str = ""
) -> torch.Tensor:
    """``t`` as a flat tensor after checking it holds ``sizes`` values (1 or one per channel), finite and > 0.

    With ``dtype``, the values are also checked to stay above 0 once converted to ``dtype`` (the precision the
    division runs in, named by ``what`` in the message), in the same device synchronisation, and returned converted.
    """
    try:
        flat = torch.as_tensor(t).detach().reshape(-1)
        if not isinstance(t, torch.Tensor) and flat.is_floating_point():  # Python floats: not rounded to float32
            flat = torch.as_tensor(t, dtype=torch.float64).reshape(-1)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a number or a tensor of numbers, got {type(t).__name__}") from None
    if flat.dtype == torch.bool or flat.is_complex():
        raise TypeError(f"{name} must hold real numbers, got dtype {flat.dtype}")
    if flat.numel() not in sizes:
        raise ValueError(f"{name} must hold {' or '.join(map(str, sorted(set(sizes))))} value(s), got {flat.numel()}")
    ok = torch.isfinite(flat).all() & (flat > 0).all()
    converted = flat if dtype is None else flat.to(dtype)
    if dtype is not None:
        ok = ok & (converted > 0).all()
    if not bool(ok):  # the only synchronisation of a device tensor
        if not bool(torch.isfinite(flat).all() & (flat > 0).all()):
            raise ValueError(f"{name} must be positive and finite, got {flat.tolist()}")
        raise ValueError(f"{name} {flat.tolist()} is too small for {what}: it rounds to 0 in {dtype}")
    return converted


def _check_unit_values(p: Any, name: str) -> None:
    """``ValueError`` naming ``name`` unless every value of ``p`` (numpy or torch) is finite and in ``[0, 1]``."""
    if isinstance(p, torch.Tensor):
        if p.dtype == torch.bool or p.is_complex():
            raise TypeError(f"{name} must hold real probabilities, got dtype {p.dtype}")
        if p.numel() == 0:
            return
        check_finite(p, name)
        tol = probability_tolerance(p.dtype)
        lo, hi = float(p.min()), float(p.max())
    else:
        if not np.issubdtype(p.dtype, np.number) or np.issubdtype(p.dtype, np.complexfloating):
            raise TypeError(f"{name} must hold real probabilities, got dtype {p.dtype}")
        if p.size == 0:
            return
        if np.issubdtype(p.dtype, np.floating) and not bool(np.isfinite(p).all()):
            n_bad = int((~np.isfinite(p)).sum())
            raise ValueError(f"{name} contains {n_bad} non-finite value(s) (NaN or inf)")
        low_precision = {np.dtype(np.float16): torch.float16, np.dtype(np.float32): torch.float32}
        tol = probability_tolerance(low_precision.get(p.dtype, torch.float64))
        lo, hi = float(p.min()), float(p.max())
    if lo < -tol or hi > 1 + tol:
        raise ValueError(f"{name} must be probabilities in [0, 1], got values in [{lo:.4g}, {hi:.4g}]")


def _check_chunk_target(y: Any, n: int, lo: float, hi: float, integral: bool) -> None:
    """Check a chunk's target ``y``: a tensor ``(n,)`` of values in ``[lo, hi]`` (int64 labels when ``integral``)."""
    _tensor(y, "y")
    if tuple(y.shape) != (n,):
        raise ValueError(f"y must have shape ({n},), one value per voxel of z, got {tuple(y.shape)}")
    if integral and y.dtype != torch.int64:
        raise TypeError(f"y must hold int64 class labels (chunk_target), got dtype {y.dtype}")
    if n:
        y_lo, y_hi = (float(v) for v in torch.aminmax(y))
        if not (y_lo >= lo and y_hi <= hi):  # also False for NaN
            what = f"class labels in [0, {int(hi)}]" if integral else "binary masks in [0, 1]"
            raise ValueError(f"y must hold {what}, got values in [{y_lo:.4g}, {y_hi:.4g}]")


def _check_case(pred: Any, target: Any, probs: Any) -> None:
    """The types of :meth:`Activation.split`'s arrays and that ``target`` has the shape of ``pred``."""
    for name, x in (("pred", pred), ("target", target), ("probs", probs)):
        if not isinstance(x, np.ndarray) and not (name == "probs" and x is None):
            raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if tuple(target.shape) != tuple(pred.shape):
        raise ValueError(f"target must have the shape of pred {tuple(pred.shape)}, got {tuple(target.shape)}")


def _check_probs(p: Any, layout: str, min_ndim: int) -> None:
    """``p`` for :meth:`Activation.confidence`: a floating tensor of at least ``min_ndim`` axes, finite."""
    _tensor(p, "p", floating=True)
    if p.ndim < min_ndim or (min_ndim and p.shape[0] < 1):
        raise ValueError(f"p must be probabilities {layout}, got shape {tuple(p.shape)}")
    check_finite(p, "p")


def _check_pair(pred: Any, target: Any) -> None:
    """``pred`` and ``target`` of :meth:`Activation.correctness`: tensors of one shape (no broadcasting)."""
    _tensor(pred, "pred")
    _tensor(target, "target")
    if tuple(target.shape) != tuple(pred.shape):
        raise ValueError(f"target must have the shape of pred {tuple(pred.shape)}, got {tuple(target.shape)}")


def _check_batch_logits(z: Any) -> None:
    """A batch of logits ``(B, C, *spatial)``: a floating tensor, not empty, finite (errors name ``logits``)."""
    _tensor(z, "logits", floating=True)
    if z.ndim < 2 or z.numel() == 0:
        raise ValueError(f"logits must be a non-empty batch (B, C, *spatial), got shape {tuple(z.shape)}")
    check_finite(z, "logits")


def _check_result(x: torch.Tensor, z: torch.Tensor) -> None:
    """``ValueError`` when a chunk's NLL or confidence ``x`` is not finite: NaN / inf in ``z``, or an overflow."""
    if not bool(torch.isfinite(x).all()):
        check_finite(z, "z")
        raise ValueError(
            f"z / t overflows {z.dtype} (largest |z| {float(z.abs().max()):.4g}): the temperature t is too small"
        )


def _binary(p: Any, axis: int) -> Any:
    """:func:`binary_probabilities` of values already checked."""
    if isinstance(p, torch.Tensor):
        return torch.stack([1 - p, p], dim=axis)
    return np.stack([1.0 - p, p], axis=axis)


def binary_probabilities(p: Any, axis: int = 0) -> Any:
    """The two-class probabilities ``(1 - p, p)`` of Bernoulli probabilities, stacked along a new ``axis``.

    Differs from :func:`monai_unc.regions.binary_probabilities` (on purpose) in its shape rule: this one *adds* a
    class axis to a map of any shape (one region's ``(*spatial)`` map becomes ``(2, *spatial)`` with the default
    ``axis=0``, the class-first layout of a case), while the regions one *replaces* an existing one-channel axis
    (``(B, 1, *spatial)`` becomes ``(B, 2, *spatial)``, ``channel_dim=1``, the batch layout of the metrics). The
    values are the same: ``regions.binary_probabilities(p, channel_dim=k)`` equals
    ``binary_probabilities(p.squeeze(k), axis=k)`` for floating-point ``p`` (the regions one refuses integer input;
    this one accepts 0 / 1 integers).

    Args:
        p: probabilities of the positive class, numpy array or torch tensor of any shape.
        axis: where the new class axis of length 2 goes.

    Returns:
        An array (numpy in, numpy out) with a class axis of length 2 at ``axis``: ``[1 - p, p]``.

    Raises:
        TypeError: naming ``p`` when it is not a numpy array or torch tensor of real numbers.
        ValueError: naming ``p`` for NaN / infinite values or values outside ``[0, 1]``, naming ``axis`` when it
            is no axis of the result.

    Example:
        >>> import numpy as np
        >>> binary_probabilities(np.array([0.25, 1.0])).tolist()
        [[0.75, 0.0], [0.25, 1.0]]
    """
    _array(p, "p")
    _axis(axis, p.ndim + 1, f"the result, p's shape {tuple(p.shape)} with a class axis of 2 added")
    _check_unit_values(p, "p")
    return _binary(p, axis)


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
        spacing: voxel spacing in mm, one value per spatial axis (default 1 mm); a scalar means isotropic (the
            lengths of the affine's columns for a case the evaluation read).
        affine: the case's voxel -> world affine (mm), or None; when given, :attr:`voxel_volume` is ``|det A|``
            (right also on a grid whose axes are not orthogonal, where the product of the spacing is not).

    Raises:
        TypeError: naming ``pred`` or ``target`` when they are not numpy arrays.
        ValueError: naming the field whose shape does not fit ``pred`` (``target``, ``probs``, ``maps``),
            ``num_classes`` below 1, ``spacing`` that is not one positive value per axis of ``pred``, or an
            ``affine`` that is no square matrix of at least ``ndim + 1`` rows.

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
    affine: np.ndarray | None = None

    def __post_init__(self) -> None:
        """Check that the fields fit one another (shapes only: the values are not read)."""
        for name in ("pred", "target"):
            if not isinstance(getattr(self, name), np.ndarray):
                raise TypeError(f"{name} must be a numpy label map, got {type(getattr(self, name)).__name__}")
        shape = tuple(self.pred.shape)
        if tuple(self.target.shape) != shape:
            raise ValueError(f"target must have the shape of pred {shape}, got {tuple(self.target.shape)}")
        self.num_classes = check_integer(self.num_classes, "num_classes", 1)
        if self.probs is not None and tuple(np.shape(self.probs)) != (self.num_classes, *shape):
            raise ValueError(
                f"probs must have shape (num_classes, *pred.shape) = {(self.num_classes, *shape)}, "
                f"got {tuple(np.shape(self.probs))}"
            )
        for m, u in self.maps.items():
            if tuple(np.shape(u)) != shape:
                raise ValueError(f"maps[{m!r}] must have the shape of pred {shape}, got {tuple(np.shape(u))}")
        if self.spacing is not None:
            self.spacing = normalize_spacing(self.spacing, len(shape), "spacing")
        if self.affine is not None:
            a = np.asarray(self.affine, dtype=np.float64)
            if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] < min(len(shape), 3) + 1:
                raise ValueError(f"affine must be a square voxel -> world matrix of at least {min(len(shape), 3) + 1} "
                                 f"rows for {len(shape)} spatial axes, got shape {a.shape}")
            self.affine = a

    @property
    def voxel_volume(self) -> float:
        """The volume of one voxel in mm^3: ``|det A|`` of :attr:`affine`, else the product of the spacing (1 without).

        Returns:
            The volume as a float (:func:`~monai_unc._utils.affine_voxel_volume`).
        """
        ndim = self.pred.ndim
        if self.affine is not None:
            return affine_voxel_volume(self.affine, ndim)
        return affine_voxel_volume(np.diag([*self.spacing, 1.0]), ndim) if self.spacing else 1.0


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
            probability per channel (sigmoid). Half-precision logits are divided by the temperature in float32;
            a temperature so small that ``logits / temperature`` leaves the floating-point range gives the limit
            (0 or 1 for a sigmoid; for a softmax, the classes of the largest scaled logit share the probability).

        Raises:
            TypeError: naming ``logits`` when it is not a floating-point tensor, ``temperature`` when it is not
                a number or tensor of numbers.
            ValueError: naming ``logits`` for fewer than 2 dimensions, fewer channels than :attr:`min_channels`
                (a softmax over one channel) or NaN / infinite values, ``temperature``
                for another count than 1 or ``C``, a value that is not positive and finite, one that rounds to 0
                in the logits' precision (float32 for half precision), or (a vector temperature of a softmax) one
                so small that ``logits / temperature`` overflows float64.
        """
        z = _tensor(logits, "logits", floating=True)
        if z.ndim < 2:
            raise ValueError(f"logits must have shape (B, C, *spatial), got {tuple(z.shape)}")
        if z.shape[1] < self.min_channels:  # a softmax over one channel is 1 everywhere, whatever the network says
            raise ValueError(f"logits of a {self.name} need at least {self.min_channels} {self.channel_word} along "
                             f"dim 1, got shape {tuple(z.shape)}; for a single-channel binary network use 'sigmoid'")
        check_finite(z, "logits")
        if temperature is None:
            return self._activate(z)
        # half-precision logits are divided in float32 (z / t leaves the float16 range already for z = 100 and
        # t = 1e-3) and the probabilities rounded back to the logits' dtype. The values are checked once, as
        # converted (a Python float on the CPU: no device synchronisation), then moved to the logits' device
        dtype = torch.float32 if z.dtype in (torch.float16, torch.bfloat16) else z.dtype
        t = _check_temperature(temperature, "temperature", (1, int(z.shape[1])), dtype, f"{z.dtype} logits")
        if isinstance(temperature, torch.Tensor):  # the tensor itself (not the checked copy): t keeps its gradient
            t = temperature.reshape(-1).to(dtype)
        t = t.to(z.device)
        return self._scaled(z.to(dtype), t).to(z.dtype)

    def _activate(self, z: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _scaled(self, z: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The activation of ``z / t`` for finite ``z`` and ``t > 0`` (one value or one per channel) of one dtype."""
        return self._activate(z / (t.view(1, -1, *([1] * (z.ndim - 2))) if t.numel() > 1 else t))

    def num_tasks(self, channels: int) -> int:
        """How many tasks logits with ``channels`` channels hold: 1 (categorical) or one per channel.

        Args:
            channels: the number of channels ``C`` (classes or regions).

        Returns:
            The number of tasks.

        Raises:
            ValueError: naming ``channels`` when it is not an integer of at least :attr:`min_channels`.
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

        Raises:
            TypeError: naming ``probs`` when it is not a numpy array or torch tensor.
            ValueError: naming ``axis`` when it is no axis of ``probs``; naming ``probs`` for Bernoulli
                probabilities that are not finite or leave ``[0, 1]``.
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

        Raises:
            TypeError: naming ``target`` when it is not a numpy array or torch tensor.
            ValueError: naming ``axis`` when it is no axis of the region masks.
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

        Raises:
            TypeError: naming ``pred``, ``target`` or ``probs`` when they are not numpy arrays.
            ValueError: naming the argument whose shape does not fit ``pred`` (``target``, ``probs``, ``maps``),
                ``names`` of another count than the regions, ``num_classes`` that disagrees with ``probs``,
                ``spacing`` that is not one positive value per spatial axis, ``pred`` empty without
                ``num_classes``, or Bernoulli ``probs`` outside ``[0, 1]`` or ``pred`` / ``target`` that are not
                binary masks (values other than 0 and 1).
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

        Raises:
            TypeError: naming ``p`` when it is not a floating-point tensor.
            ValueError: naming ``p`` for NaN / infinite values or (categorical) no class axis.
        """
        raise NotImplementedError

    def correctness(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Whether each voxel's prediction is right, as float64 0/1.

        Args:
            pred: the prediction ``(n,)`` of :meth:`confidence`.
            target: the labels ``(n,)`` (categorical) or the binary masks ``(n,)`` (Bernoulli).

        Returns:
            ``(n,)`` float64.

        Raises:
            TypeError: naming ``pred`` or ``target`` when it is not a tensor.
            ValueError: naming ``target`` when its shape is not that of ``pred`` (no broadcasting).
        """
        raise NotImplementedError

    # -- temperature scaling ----------------------------------------------------------------------------------------
    def check_logits(self, z: torch.Tensor) -> None:
        """Raise ``ValueError`` when logits ``(B, C, *spatial)`` look like the output of the activation.

        Args:
            z: a batch of logits.

        Raises:
            ValueError: when ``z`` looks like probabilities, and naming ``logits`` for an empty batch, fewer than
                2 dimensions or NaN / infinite values.
            TypeError: naming ``logits`` when ``z`` is not a floating-point tensor.
        """
        raise NotImplementedError

    def batch_target(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The target of a batch of logits in the layout :meth:`task_voxels` reads.

        ``ValueError`` naming ``target`` for a shape that does not fit the logits (``logits`` for fewer than 2
        dimensions or, categorical, fewer than 2 classes); ``TypeError`` naming either when it is not a tensor.

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
            like: a tensor of the dtype and device wanted (the task's logits, or a float64 tensor on their device
                for terms computed in float64, as :class:`~monai_unc.temperature.TemperatureScaler` does).

        Returns:
            ``(C, 1)`` (categorical, broadcasting over voxels) or a 0-d tensor (one region).

        Raises:
            ValueError: naming ``t`` for another count than 1 or ``channels`` or values that are not positive and
                finite, ``task`` out of range, ``channels`` below :attr:`min_channels`.
        """
        raise NotImplementedError

    def nll_terms(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The summed NLL of a chunk of a task's voxels at temperature ``t`` and its gradient w.r.t. ``t``.

        The voxels' terms are computed in the promoted dtype of ``z`` and ``t`` (float64 for float32 logits and a
        float64 ``t``, as :class:`~monai_unc.temperature.TemperatureScaler` passes them), their sums in float64.

        Args:
            z: the chunk's logits ``(C, n)`` or ``(n,)``.
            y: its target (:meth:`chunk_target`).
            t: the task's temperature (:meth:`task_temperature`).

        Returns:
            ``(loss, grad)``: the float64 sum of the voxels' NLL (0-d, on the CPU) and its gradient
            ``(grad_size,)`` float64.

        Raises:
            TypeError: naming ``z`` (not a floating-point tensor) or ``y`` (not a tensor; categorical: not int64).
            ValueError: naming ``z`` for another shape or NaN / infinite values, ``y`` for another length or
                values outside the classes (categorical) or ``[0, 1]`` (Bernoulli), ``t`` for another shape or
                values that are not positive and finite; and when ``z / t`` overflows.
        """
        raise NotImplementedError

    def ece_terms(
        self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per voxel of a chunk: the confidence, the correctness and the gradient of the confidence w.r.t. ``t``.

        Computed in the promoted dtype of ``z`` and ``t`` (as :meth:`nll_terms`).

        Args:
            z: the chunk's logits ``(C, n)`` or ``(n,)``.
            y: its target (:meth:`chunk_target`).
            t: the task's temperature (:meth:`task_temperature`).

        Returns:
            ``(confidence (n,), correct (n,) float64, dconf/dt (n, grad_size))``.

        Raises:
            TypeError: as :meth:`nll_terms`.
            ValueError: as :meth:`nll_terms`.
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

    def _scaled(self, z: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        # z / t may overflow to +inf for a small t, and a softmax over +inf is NaN. A scalar t: shift first, so that
        # every scaled logit is <= 0 (the softmax is shift-invariant; -inf gives an exact 0). A vector t: float64.
        if t.numel() == 1:
            return torch.softmax((z - z.amax(dim=1, keepdim=True)) / t, 1)
        # an overflow to -inf in every class of a voxel is one too (found by hostile review 60: logits (-1e30, -2e30)
        # and t = (1e-10, 2e-10), both -1e40 in float64, gave NaN probabilities instead of (0.5, 0.5))
        a = z / t.view(1, -1, *([1] * (z.ndim - 2)))
        if not bool(torch.isposinf(a).any() | torch.isneginf(a.amax(dim=1)).any()):
            return torch.softmax(a, 1)
        a = z.double() / t.double().view(1, -1, *([1] * (z.ndim - 2)))
        if bool(torch.isposinf(a).any() | torch.isneginf(a.amax(dim=1)).any()):
            raise ValueError(f"logits / temperature overflows float64 (largest |logit| {float(z.abs().max()):.4g}, "
                             f"smallest temperature {float(t.min()):.4g}): the temperature is too small")
        return torch.softmax(a, 1).to(z.dtype)

    def num_tasks(self, channels: int) -> int:  # noqa: D102 (documented in Activation)
        check_integer(channels, "channels", self.min_channels)
        return 1

    def task_probabilities(self, probs: Any, axis: int = 1) -> list[Any]:  # noqa: D102
        _axis(axis, _array(probs, "probs").ndim, f"probs of shape {tuple(probs.shape)}")
        return [probs]

    def task_targets(self, target: Any, axis: int = 1) -> list[Any]:  # noqa: D102
        _array(target, "target")
        return [target]

    def split(self, pred: np.ndarray, target: np.ndarray, probs: np.ndarray | None = None,  # noqa: D102
              maps: Mapping[str, np.ndarray] | None = None, names: Sequence[str] | None = None,
              spacing: Sequence[float] | None = None, num_classes: int | None = None) -> list[TaskView]:
        _check_case(pred, target, probs)
        if num_classes is not None:
            check_integer(num_classes, "num_classes", 1)
        if probs is not None:
            n_cls = int(probs.shape[0])
            if num_classes is not None and int(num_classes) != n_cls:
                raise ValueError(f"num_classes is {num_classes} but probs has {n_cls} classes along axis 0")
        elif num_classes is not None:
            n_cls = int(num_classes)
        else:
            if pred.size == 0:
                raise ValueError(f"pred is empty (shape {tuple(pred.shape)}): pass num_classes or probs")
            n_cls = int(max(pred.max(), target.max())) + 1
        return [TaskView(None, pred, target, n_cls, probs, dict(maps or {}),
                         None if spacing is None else spacing)]

    def confidence(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        _check_probs(p, "(C, n)", 1)
        return self._confidence(p)

    def _confidence(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        conf, pred = torch.max(p, 0)  # the first maximum wins, as torch.argmax
        return conf, pred

    def correctness(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: D102
        _check_pair(pred, target)
        return (pred == target).to(torch.float64)

    def check_logits(self, z: torch.Tensor) -> None:  # noqa: D102
        _check_batch_logits(z)
        tol = probability_tolerance(z.dtype)
        if float(z.min()) < -tol or float(z.max()) > 1 + tol:
            return
        if float((z.sum(dim=1, dtype=torch.float64) - 1).abs().max()) <= tol:
            raise ValueError(
                "logits look like probabilities (every class vector lies in [0, 1] and sums to 1): "
                "temperature scaling divides the logits before the softmax; pass the network's raw output"
            )

    def batch_target(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # noqa: D102
        _tensor(z, "logits")
        _tensor(y, "target")
        if z.ndim < 2 or z.shape[1] < 2:
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
        if tuple(_tensor(y, "target").shape) != (z.shape[0], *z.shape[2:]):
            raise ValueError(
                f"target must have shape {(z.shape[0], *z.shape[2:])} (batch_target), got {tuple(y.shape)}"
            )
        zf = z.reshape(z.shape[0], z.shape[1], -1)
        yf = y.reshape(y.shape[0], -1)
        for b in range(zf.shape[0]):
            yield 0, zf[b], yf[b]

    def task_target(self, y: torch.Tensor, channels: int, first: bool) -> torch.Tensor:  # noqa: D102
        if first:
            return check_labels(y, "target", channels)
        return y if y.dtype == torch.int64 else y.to(torch.int64)

    def grad_size(self, channels: int) -> int:  # noqa: D102
        return check_integer(channels, "channels", self.min_channels)

    def task_temperature(self, t: torch.Tensor, task: int, channels: int, like: torch.Tensor) -> torch.Tensor:  # noqa: D102
        channels = check_integer(channels, "channels", self.min_channels)
        _check_temperature(_tensor(t, "t"), "t", (1, channels))
        if task != 0:
            raise ValueError(f"task must be 0 (the one categorical task), got {task!r}")
        return (t.expand(channels) if t.numel() == 1 else t).to(device=like.device, dtype=like.dtype).unsqueeze(1)

    def _chunk(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Check a chunk ``z (C, n)``, ``y (n,)``; return ``t`` as ``(C, 1)``."""
        _tensor(z, "z", floating=True)
        if z.ndim != 2 or z.shape[0] < 2:
            raise ValueError(f"z must be the logits (C, n) of a chunk, C >= 2, got {tuple(z.shape)}")
        _check_chunk_target(y, int(z.shape[1]), 0, int(z.shape[0]) - 1, integral=True)
        _check_temperature(_tensor(t, "t"), "t", (1, int(z.shape[0])))
        if t.numel() == 1:
            return t.reshape(1, 1)
        if tuple(t.shape) not in ((z.shape[0], 1), (z.shape[0],)):
            raise ValueError(f"t must have shape ({z.shape[0]}, 1) (task_temperature), got {tuple(t.shape)}")
        return t.reshape(-1, 1)

    def nll_terms(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        t = self._chunk(z, y, t)
        # two (C, n) temporaries: a (in the promoted dtype: t is (C, 1)) and e = exp(a - max a), reused for p a
        a = z / t
        top = a.amax(0)
        e = torch.sub(a, top).exp_()
        s = e.sum(0)  # logsumexp(a) = top + log s
        a_y = a.gather(0, y.unsqueeze(0)).squeeze(0)
        pa = e.mul_(a).div_(s).sum(1, dtype=torch.float64)  # sum_i p_ic a_ic
        ya = torch.zeros(z.shape[0], dtype=torch.float64, device=z.device).index_add_(0, y, a_y.double())
        loss = s.log_().add_(top).sub_(a_y).sum(dtype=torch.float64).cpu()  # sum_i logsumexp(a_i) - a_{i,y_i}
        _check_result(loss, z)
        return loss, ((ya - pa) / t.squeeze(1).double()).cpu()

    def ece_terms(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # noqa: D102,E501
        t = self._chunk(z, y, t)
        a = z / t  # the promoted dtype (t is (C, 1))
        p = torch.sub(a, a.amax(0)).exp_()
        p.div_(p.sum(0))  # the softmax, in place: two (C, n) temporaries in all
        conf, pred = self._confidence(p)
        _check_result(conf, z)
        # dconf/dt_c = p_k (p_c a_c - [c = k] a_k) / t_c, written over p (conf is its own tensor)
        a_k = a.gather(0, pred.unsqueeze(0))
        d = p.mul_(a).mul_(conf)
        d.scatter_add_(0, pred.unsqueeze(0), a_k.mul_(conf).neg_())
        return conf, self.correctness(pred, y), d.div_(t).T


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
        return check_integer(channels, "channels", self.min_channels)

    def task_probabilities(self, probs: Any, axis: int = 1) -> list[Any]:  # noqa: D102
        axis = _axis(axis, _array(probs, "probs").ndim, f"probs of shape {tuple(probs.shape)}")
        _check_unit_values(probs, "probs")
        n = probs.shape[axis]
        if isinstance(probs, torch.Tensor):
            return [_binary(probs.select(axis, r), axis) for r in range(n)]
        return [_binary(np.take(probs, r, axis=axis), axis) for r in range(n)]

    def task_targets(self, target: Any, axis: int = 1) -> list[Any]:  # noqa: D102
        axis = _axis(axis, _array(target, "target").ndim, f"target of shape {tuple(target.shape)}")
        n = target.shape[axis]
        if isinstance(target, torch.Tensor):
            return [target.select(axis, r).to(torch.int64) for r in range(n)]
        return [np.take(target, r, axis=axis).astype(np.int64) for r in range(n)]

    def split(self, pred: np.ndarray, target: np.ndarray, probs: np.ndarray | None = None,  # noqa: D102
              maps: Mapping[str, np.ndarray] | None = None, names: Sequence[str] | None = None,
              spacing: Sequence[float] | None = None, num_classes: int | None = None) -> list[TaskView]:
        _check_case(pred, target, probs)
        if pred.ndim < 1:
            raise ValueError(f"pred must hold region masks (R, *spatial), got shape {tuple(pred.shape)}")
        n = int(pred.shape[0])
        names = [str(r) for r in range(n)] if names is None else list(names)
        if len(names) != n:
            raise ValueError(f"names has {len(names)} name(s) but pred has {n} region(s)")
        for m, u in (maps or {}).items():
            if tuple(np.shape(u)) != tuple(pred.shape):
                raise ValueError(f"maps[{m!r}] must have the shape of pred {tuple(pred.shape)} (one channel per "
                                 f"region), got {tuple(np.shape(u))}")
        if probs is not None and tuple(probs.shape) != tuple(pred.shape):
            raise ValueError(f"probs must have the shape of pred {tuple(pred.shape)} (one probability per region "
                             f"and voxel), got {tuple(probs.shape)}")
        for name, x in (("pred", pred), ("target", target)):
            if x.dtype != np.bool_ and x.size and not bool(((x == 0) | (x == 1)).all()):  # astype(uint8) would wrap
                raise ValueError(f"{name} must hold binary region masks (0 or 1), got values such as "
                                 f"{np.unique(x[(x != 0) & (x != 1)])[:5].tolist()}")
        task_probs = [None] * n if probs is None else self.task_probabilities(probs, axis=0)
        sp = spacing
        return [TaskView(names[r], pred[r].astype(np.uint8), target[r].astype(np.uint8), 2, task_probs[r],
                         {m: u[r] for m, u in (maps or {}).items()}, sp) for r in range(n)]

    def confidence(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        _check_probs(p, "(n,)", 0)
        return self._confidence(p)

    def _confidence(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pred = foreground_masks(p)
        return torch.where(pred, p, 1 - p), pred

    def correctness(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: D102
        _check_pair(pred, target)
        return (pred == (target > 0.5)).to(torch.float64)

    def check_logits(self, z: torch.Tensor) -> None:  # noqa: D102
        _check_batch_logits(z)
        tol = probability_tolerance(z.dtype)
        if float(z.min()) >= -tol and float(z.max()) <= 1 + tol:
            raise ValueError(
                "logits look like probabilities (every value lies in [0, 1]): temperature scaling divides "
                "the logits before the sigmoid; pass the network's raw output"
            )

    def batch_target(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # noqa: D102
        _tensor(z, "logits")
        _tensor(y, "target")
        if z.ndim < 2:
            raise ValueError(f"logits must have shape (B, R, *spatial), got {tuple(z.shape)}")
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
        vals = y if ignore_index is None else y[~equals_label(y, ignore_index)]
        if vals.numel() and not bool(((vals == 0) | (vals == 1)).all()):
            raise ValueError(
                "target must hold binary region masks (0 or 1"
                + ("" if ignore_index is None else f", or ignore_index={ignore_index}")
                + f"), got values such as {sorted({float(v) for v in vals.unique()[:5].tolist()})}"
            )

    def task_voxels(self, z: torch.Tensor, y: torch.Tensor) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:  # noqa: D102
        if tuple(_tensor(y, "target").shape) != tuple(z.shape):
            raise ValueError(f"target must have the shape of the logits {tuple(z.shape)} (batch_target), "
                             f"got {tuple(y.shape)}")
        zf = z.reshape(z.shape[0], z.shape[1], -1)
        yf = y.reshape(y.shape[0], y.shape[1], -1)
        for b in range(zf.shape[0]):
            for r in range(zf.shape[1]):
                yield r, zf[b, r], yf[b, r]

    def chunk_target(self, y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:  # noqa: D102
        return y.to(dtype)

    def grad_size(self, channels: int) -> int:  # noqa: D102
        check_integer(channels, "channels", self.min_channels)
        return 1

    def task_temperature(self, t: torch.Tensor, task: int, channels: int, like: torch.Tensor) -> torch.Tensor:  # noqa: D102
        channels = check_integer(channels, "channels", self.min_channels)
        _check_temperature(_tensor(t, "t"), "t", (1, channels))
        if isinstance(task, bool) or not isinstance(task, (int, np.integer)) or not 0 <= task < channels:
            raise ValueError(f"task must be a region index in [0, {channels - 1}], got {task!r}")
        t = t.reshape(-1)
        return (t[0] if t.numel() == 1 else t[task]).to(device=like.device, dtype=like.dtype)

    def _chunk(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Check a chunk ``z (n,)``, ``y (n,)``; return ``t`` as a 0-d tensor."""
        _tensor(z, "z", floating=True)
        if z.ndim != 1:
            raise ValueError(f"z must be the logits (n,) of one region's chunk, got {tuple(z.shape)}")
        _check_chunk_target(y, int(z.shape[0]), 0.0, 1.0, integral=False)
        _check_temperature(_tensor(t, "t"), "t", (1,))
        return t.reshape(())

    def nll_terms(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: D102
        t = self._chunk(z, y, t)
        a = z.to(torch.promote_types(z.dtype, t.dtype)) / t  # t is 0-d: z / t alone would keep z's dtype
        p = torch.sigmoid(a)
        # log(1 + exp(a)) - y a, exactly for any a
        bce = torch.logaddexp(a, torch.zeros((), dtype=a.dtype, device=a.device)) - y * a
        grad = ((y - p) * a).sum(dtype=torch.float64) / t.double()
        loss = bce.sum(dtype=torch.float64).cpu()
        _check_result(loss, z)
        return loss, grad.reshape(1).cpu()

    def ece_terms(self, z: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # noqa: D102,E501
        t = self._chunk(z, y, t)
        a = z.to(torch.promote_types(z.dtype, t.dtype)) / t  # as in nll_terms
        p = torch.sigmoid(a)
        conf, pred = self._confidence(p)
        # dconf/dt = -p (1 - p) a / t for the prediction 1, + p (1 - p) a / t for the prediction 0
        d = (p * (1 - p) * a / t) * torch.where(pred, -1.0, 1.0).to(a.dtype)
        _check_result(d, z)  # NaN for NaN logits and for an overflow of a (p (1 - p) a = 0 * inf)
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
        The :class:`Activation`.

    Raises:
        ValueError: naming ``activation`` for another name.
        TypeError: naming ``activation`` when it is neither a string nor an :class:`Activation`.

    Example:
        >>> get_activation("softmax") is CATEGORICAL
        True
    """
    if isinstance(activation, Activation):
        return activation
    if not isinstance(activation, str):
        raise TypeError(
            f"activation must be one of {tuple(ACTIVATIONS)} or an Activation, got {type(activation).__name__}"
        )
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
    return ACTIVATIONS[activation]
