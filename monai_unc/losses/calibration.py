"""Calibration losses with MONAI's conventions, alone and composed with Dice as the papers train them.

Every class takes ``(B, C, *spatial)`` logits (1 to 3 spatial dimensions) and a target that is either one-hot
``(B, C, *spatial)`` or, with ``to_onehot_y=True``, a label map ``(B, 1, *spatial)``, like
:class:`monai.losses.DiceCELoss`; ``include_background=False`` leaves channel 0 out of the loss (after the softmax
over all channels); ``reduction`` is ``"mean"``, ``"sum"`` or ``"none"``. The formulas are the functions of
:mod:`monai_unc.losses.functional`. Float16 and bfloat16 logits (a network run without autocast) are computed in
float32 and give a float32 loss: a sum over a volume in float16 overflows at 65504, and in either dtype a count stops
growing at 2048 or 256; the gradient reaches the logits in their own dtype.

- :class:`SVLSLoss` / :class:`DiceSVLSLoss`: cross-entropy against spatially varying smoothed labels (Islam,
  Glocker, IPMI 2021), alone or with Dice.
- :class:`MarginLoss` / :class:`DiceCEMarginLoss`: cross-entropy (+ Dice) plus the logit-margin penalty of
  margin-based label smoothing (Liu et al., CVPR 2022; Murugesan et al., Medical Image Analysis 2023).
- :class:`L1ACELoss` / :class:`DiceCEL1ACELoss`: the hard- or soft-binned marginal L1 average calibration error
  (Barfoot et al., MICCAI 2024 and 2025), alone or with Dice + cross-entropy.

MONAI's own calibration-aware losses are used as they are: :class:`monai.losses.NACLLoss` (neighbour-aware
calibration, Murugesan et al., MICCAI 2023; label maps ``(B, *spatial)`` as target) and
:class:`monai.losses.FocalLoss` (docs/training.md shows both).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from monai.losses import DiceCELoss, DiceLoss
from monai.utils import LossReduction
from torch.nn.modules.loss import _Loss

from .._utils import check_bool
from ._common import (
    REDUCED_PRECISION,
    ace_of_bins,
    check_unit_target,
    int_option,
    nonnegative_option,
    outside_unit_interval,
    spacing_dims,
)
from .functional import (
    binned_calibration,
    margin_penalty,
    mean_margin_penalty,
    svls_kernel,
    svls_targets_separable,
)

__all__ = [
    "DiceCEL1ACELoss",
    "DiceCEMarginLoss",
    "DiceSVLSLoss",
    "L1ACELoss",
    "MarginLoss",
    "SVLSLoss",
    "check_finite_loss",
    "check_target",
    "prepare_target",
]

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction: Any) -> str:
    value = getattr(reduction, "value", reduction)
    if value not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    return str(value)


def _check_weight(value: Any, name: str) -> float:
    return nonnegative_option(value, name)


def _plain(x: Any, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x.as_tensor() if hasattr(x, "as_tensor") else x


def check_target(
    logits: Any, target: Any, to_onehot_y: bool, binary: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check logits and target without converting them (the cheap checks of every loss of this module).

    Args:
        logits: ``(B, C, *spatial)`` logits, 1 to 3 spatial dimensions (finiteness is checked on the loss value:
            see :func:`check_finite_loss`).
        target: ``(B, C, *spatial)`` one-hot or soft targets, or with ``to_onehot_y`` a label map ``(B, 1, *spatial)``
            of integers in ``[0, C)``.
        to_onehot_y: the target is a label map.
        binary: the logits are sigmoid outputs; with one channel and ``to_onehot_y`` the label map is the binary mask
            itself, labels 0 and 1 (as MONAI's ``DiceCELoss(to_onehot_y=True, sigmoid=True)`` takes it).

    Returns:
        ``(logits, target)`` as plain tensors.

    Raises:
        TypeError: not tensors, integer logits, or ``to_onehot_y`` / ``binary`` not a bool.
        ValueError: wrong shapes, empty logits, labels out of range or not integers.

    Example:
        >>> z = torch.zeros(1, 3, 2, 2)
        >>> check_target(z, torch.full((1, 1, 2, 2), 3), to_onehot_y=True)
        Traceback (most recent call last):
        ...
        ValueError: target labels must be in [0, 3), got [3, 3]
    """
    # the flags as the loss classes check them: a truthy string ("no") or 1 was taken as True (hostile testing)
    to_onehot_y = check_bool(to_onehot_y, "to_onehot_y")
    binary = check_bool(binary, "binary")
    z = _plain(logits, "logits")
    t = _plain(target, "target")
    if not z.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got {z.dtype}")
    if not 3 <= z.ndim <= 5:
        raise ValueError(f"logits must be (B, C, *spatial) with 1 to 3 spatial dimensions, got {tuple(z.shape)}")
    if z.numel() == 0:  # a mean over no voxel is NaN (0 for the ACE), which would reach the optimiser unnoticed
        raise ValueError(f"logits must not be empty, got shape {tuple(z.shape)}")
    if to_onehot_y:
        expected = (z.shape[0], 1, *z.shape[2:])
        if tuple(t.shape) != expected:
            raise ValueError(f"target must be a label map {expected} with to_onehot_y=True, got {tuple(t.shape)}")
        if t.numel():
            lo, hi = (float(v) for v in torch.aminmax(t))
            # a one-channel sigmoid model's label map is its 0/1 mask (found by hostile review 60: labels 1 were
            # refused, "must be in [0, 1), got [0, 1]", for the binary model the one-channel warning sends to sigmoid)
            labels = 2 if binary and z.shape[1] == 1 else z.shape[1]
            if not (0 <= lo and hi < labels):
                hint = " (one output channel: a binary model needs two channels, or sigmoid=True)" * (labels == 1)
                raise ValueError(f"target labels must be in [0, {labels}), got [{lo:g}, {hi:g}]{hint}")
            if t.is_floating_point() and not bool((t == t.trunc()).all()):
                raise ValueError("target must hold integer labels with to_onehot_y=True")
        return z, t
    if tuple(t.shape) != tuple(z.shape):
        raise ValueError(
            f"target must have the logits' shape {tuple(z.shape)} (one-hot), got {tuple(t.shape)}; "
            "pass to_onehot_y=True for a label map"
        )
    return z, t


def prepare_target(
    logits: Any, target: Any, to_onehot_y: bool, binary: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Check logits and target (:func:`check_target`) and return the target one-hot, in the logits' dtype.

    Args:
        logits: ``(B, C, *spatial)`` logits, 1 to 3 spatial dimensions.
        target: ``(B, C, *spatial)`` one-hot or soft targets, or with ``to_onehot_y`` a label map ``(B, 1, *spatial)``
            of integers in ``[0, C)``.
        to_onehot_y: convert a label map to one-hot.
        binary: the logits are sigmoid outputs: a label map of one-channel logits is taken as the 0/1 mask itself
            (labels 0 and 1; :func:`check_target`).

    Returns:
        ``(logits, onehot)``, plain tensors, ``onehot`` of the logits' shape and dtype; float32 for a floating target
        of another dtype than float16 / bfloat16 logits (a soft target is not rounded to the logits' 8- or 11-bit
        mantissa: the losses compute such logits in float32).

    Raises:
        TypeError: not tensors, integer logits, or ``to_onehot_y`` / ``binary`` not a bool.
        ValueError: wrong shapes, empty logits, labels out of range.

    Example:
        >>> z = torch.zeros(1, 3, 2, 2); y = torch.tensor([[[[0, 1], [2, 1]]]])
        >>> prepare_target(z, y, to_onehot_y=True)[1][0, :, 1, 0].tolist()
        [0.0, 0.0, 1.0]
    """
    z, t = check_target(logits, target, to_onehot_y, binary)
    if to_onehot_y and binary and z.shape[1] == 1:
        return z, t.to(z.dtype)  # the mask itself (0 and 1 are exact in any dtype)
    if to_onehot_y:
        onehot = torch.zeros_like(z, memory_format=torch.contiguous_format).scatter_(1, t.long(), 1.0)
        return z, onehot
    if z.dtype in REDUCED_PRECISION and t.is_floating_point() and t.dtype != z.dtype:
        # found by hostile testing: a float32 soft target of 0.3 became 0.30078 for bfloat16 logits, the SVLS and
        # L1-ACE losses 1e-3 off the loss of the same logits in float64 (float16: 2e-4)
        return z, t.to(torch.float32)
    return z, t.to(z.dtype)


def check_finite_loss(
    value: torch.Tensor, logits: torch.Tensor, target: torch.Tensor | None = None, unit_target: bool = False
) -> torch.Tensor:
    """Return the loss ``value``; raise if it is not finite because the logits (or the target) are not.

    One check of the value per step instead of a pass over the logits; the inputs are looked at only when the
    value is not finite. With ``unit_target`` the range of the target is checked in the same device
    synchronisation (one elementwise pass over the target, no second synchronisation).

    Args:
        value: the loss (any shape).
        logits: the logits it was computed from.
        target: the target it was computed from (a soft or one-hot target may hold NaN), or ``None``.
        unit_target: ``target`` is a one-hot or soft target whose values must lie in ``[0, 1]``.

    Returns:
        ``value``.

    Raises:
        TypeError: ``unit_target`` is not a bool.
        ValueError: ``value`` has a non-finite entry (naming the logits or the target when they have one too, else
            the largest logit), or (``unit_target``) the target has a value outside ``[0, 1]``.

    Example:
        >>> check_finite_loss(torch.tensor(float("nan")), torch.tensor([float("inf")]))
        Traceback (most recent call last):
        ...
        ValueError: logits must be finite
        >>> check_finite_loss(torch.tensor(float("nan")), torch.zeros(1), torch.tensor([float("nan")]))
        Traceback (most recent call last):
        ...
        ValueError: target must be finite
    """
    unit_target = check_bool(unit_target, "unit_target")
    ok = torch.isfinite(value).all()
    if unit_target and target is not None:
        ok = ok & ~outside_unit_interval(target)
    if not bool(ok):
        if not bool(torch.isfinite(logits).all()):
            raise ValueError("logits must be finite")
        if target is not None and target.is_floating_point() and not bool(torch.isfinite(target).all()):
            raise ValueError("target must be finite")
        if unit_target and target is not None:
            check_unit_target(target)
        if not bool(torch.isfinite(value).all()):
            # found by hostile testing: finite float32 logits of +-2e38 gave a NaN or inf loss (their difference, or
            # the Dice of a class of probability exactly 0 without smoothing, is not finite), returned without a word
            top = float(logits.detach().abs().amax()) if logits.numel() else 0.0
            if logits.is_floating_point() and top > torch.finfo(logits.dtype).max / 4:
                why = f"logits up to {top:g} in magnitude overflow {logits.dtype} (their differences)"
            else:
                why = ("a Dice term without smoothing (smooth_nr = smooth_dr = 0) divides 0 by 0 where a class is "
                       "absent and predicted with probability 0")
            raise ValueError(f"the loss is not finite although the logits and the target are: {why}")
    return value


def _upcast(z: torch.Tensor, target: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Float16 / bfloat16 logits (and a floating target) as float32; other dtypes unchanged (module docstring)."""
    if z.dtype not in REDUCED_PRECISION:
        return z, target
    if target is not None and target.is_floating_point():
        target = target.float()
    return z.float(), target


def _activation(softmax: bool, sigmoid: bool, name: str) -> bool:
    """``True`` for sigmoid; checks that exactly one activation is chosen."""
    if check_bool(softmax, "softmax") == check_bool(sigmoid, "sigmoid"):
        raise ValueError(f"{name}: set exactly one of softmax=True or sigmoid=True")
    return bool(sigmoid)


def _warn_one_channel_softmax(z: torch.Tensor, name: str) -> None:
    """Warn when a softmax runs over one channel: it is 1 at every voxel, so the loss is constant, its gradient 0.

    A binary model with one output channel trained with the default ``softmax=True`` would otherwise learn nothing
    from the calibration term, silently (MONAI's ``DiceLoss`` warns in the same case).
    """
    if z.shape[1] == 1:
        warnings.warn(
            f"{name}: softmax over one channel is 1 at every voxel, so the loss does not depend on the logits and "
            "its gradient is 0; a binary model with one output channel needs sigmoid=True (or two channels)",
            UserWarning,
            stacklevel=3,
        )


def _reduce(per_voxel: torch.Tensor, reduction: str) -> torch.Tensor:
    """``(B, 1, *spatial)`` per-voxel values reduced."""
    if reduction == "mean":
        return per_voxel.mean()
    if reduction == "sum":
        return per_voxel.sum()
    return per_voxel


def _soft_cross_entropy(z: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``-sum_c q_c log softmax(z)_c`` per voxel ``(B, *spatial)``, with ``0 log 0 = 0``.

    torch's fused cross-entropy with probability targets computes ``q_c * log p_c`` as ``0 * -inf = NaN`` where a
    ``-inf`` logit (a class probability of exactly 0) meets a zero target; such logits take this path, whose terms of
    zero target are 0 (value and gradient). The fused op runs first: only a non-finite result (checked on one value
    per voxel, C times fewer than the logits) from non-finite logits is computed again this way (a NaN target stays
    NaN, for :func:`check_finite_loss` to name).
    """
    ce = F.cross_entropy(z, q, reduction="none")
    if bool(torch.isfinite(ce).all()) or bool(torch.isfinite(z).all()):
        return ce
    logp = F.log_softmax(z, dim=1)
    return -torch.where(q > 0, q * logp, torch.zeros_like(logp)).sum(1)


def _soft_binary_cross_entropy(z: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Elementwise ``-(q log s(z) + (1 - q) log s(-z))`` with ``0 log 0 = 0`` (``s`` the sigmoid).

    Infinite logits as in :func:`_soft_cross_entropy`.
    """
    if bool(torch.isfinite(z).all()):
        return F.binary_cross_entropy_with_logits(z, q, reduction="none")
    zero = torch.zeros_like(z)
    return -(torch.where(q > 0, q * F.logsigmoid(z), zero) + torch.where(q < 1, (1 - q) * F.logsigmoid(-z), zero))


class SVLSLoss(_Loss):
    """Cross-entropy against spatially varying smoothed labels (SVLS).

    The one-hot target is convolved with :func:`~monai_unc.losses.functional.svls_kernel` (a Gaussian over the
    neighbours with the centre keeping half of the mass), and the loss is the cross-entropy of the network's
    probabilities against those soft labels: ``-sum_c q_c log softmax(z)_c`` per voxel (softmax), or the binary
    cross-entropy of every channel against its smoothed mask (sigmoid, region-based models; mean over channels).
    Islam, Glocker, *Spatially Varying Label Smoothing: Capturing Uncertainty from Expert Annotations*, IPMI 2021:
    ``kernel_size=3``, ``sigma=1``.

    Args:
        kernel_size: odd, >= 3.
        sigma: the Gaussian's standard deviation in voxels, or in the units of ``spacing``.
        spacing: voxel size per axis (e.g. mm) for anisotropic images, ``None`` for isotropic voxels.
        include_background: ``False`` drops channel 0 from the sum over classes.
        to_onehot_y: the target is a label map ``(B, 1, *spatial)``.
        softmax: one categorical task over the channels (the paper).
        sigmoid: one binary task per channel (regions).
        reduction: ``"mean"`` over batch and voxels, ``"sum"``, or ``"none"`` (``(B, 1, *spatial)``).

    Example:
        >>> z = torch.randn(2, 3, 8, 8, requires_grad=True); y = torch.randint(0, 3, (2, 1, 8, 8))
        >>> loss = SVLSLoss(to_onehot_y=True)(z, y)
        >>> loss.backward(); loss.ndim, z.grad.shape
        (0, torch.Size([2, 3, 8, 8]))
    """

    def __init__(
        self,
        kernel_size: int = 3,
        sigma: float = 1.0,
        spacing: float | Sequence[float] | None = None,
        include_background: bool = True,
        to_onehot_y: bool = False,
        softmax: bool = True,
        sigmoid: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.reduction = _check_reduction(reduction)
        self.use_sigmoid = _activation(softmax, sigmoid, "SVLSLoss")
        # check the arguments now, not at the first batch
        svls_kernel(spacing_dims(spacing), kernel_size, sigma, spacing)
        self.kernel_size = int(kernel_size)
        self.sigma = float(sigma)
        self.spacing = spacing
        self.include_background = check_bool(include_background, "include_background")
        self.to_onehot_y = check_bool(to_onehot_y, "to_onehot_y")

    def soft_targets(self, onehot: torch.Tensor) -> torch.Tensor:
        """The smoothed labels of a one-hot target ``(B, C, *spatial)`` (same shape)."""
        return svls_targets_separable(onehot, self.kernel_size, self.sigma, self.spacing)

    def loss_of_onehot(self, z: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        """The loss of checked logits and a one-hot target (what :meth:`forward` computes after its checks)."""
        if not self.include_background and z.shape[1] == 1:
            raise ValueError("include_background=False leaves no channel: the logits have one channel")
        if not self.use_sigmoid:  # (include_background=False with one channel raised above)
            _warn_one_channel_softmax(z, "SVLSLoss")
        z, onehot = _upcast(z, onehot)
        with torch.no_grad():
            q = self.soft_targets(onehot)
        if self.use_sigmoid:
            terms = _soft_binary_cross_entropy(z, q)
            if not self.include_background:
                terms = terms[:, 1:]
            return _reduce(terms.mean(1, keepdim=True), self.reduction)
        if not self.include_background:  # a zero target drops the background's term from -sum_c q_c log p_c
            q[:, 0] = 0
        # torch's cross-entropy with probability targets: -sum_c q_c log softmax(z)_c per voxel in one fused op
        ce = _soft_cross_entropy(z, q)
        return ce.unsqueeze(1) if self.reduction == "none" else _reduce(ce, self.reduction)

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss.

        Args:
            input: ``(B, C, *spatial)`` logits.
            target: one-hot ``(B, C, *spatial)``, or a label map ``(B, 1, *spatial)`` with ``to_onehot_y``.

        Returns:
            A scalar, or ``(B, 1, *spatial)`` with ``reduction="none"``.
        """
        z, onehot = prepare_target(input, target, self.to_onehot_y, self.use_sigmoid)
        return check_finite_loss(self.loss_of_onehot(z, onehot), z, onehot, unit_target=not self.to_onehot_y)


class MarginLoss(_Loss):
    """Margin-based label smoothing (MbLS): cross-entropy plus ``alpha`` times the logit-margin penalty.

    ``CE(z, y) + alpha * mean_c max(0, max_j z_j - z_c - margin)`` per voxel (Liu et al., *The Devil is in the
    Margin: Margin-based Label Smoothing for Network Calibration*, CVPR 2022; the segmentation version of Murugesan
    et al., Medical Image Analysis 2023, trains it with Dice: :class:`DiceCEMarginLoss`). Published defaults:
    ``margin=10``, ``alpha=0.1``. The margin is defined on softmax logits; region-based (sigmoid) models are not
    supported.

    Args:
        margin: the tolerated logit distance, >= 0.
        alpha: the weight of the penalty, >= 0.
        include_background: ``False`` drops channel 0 from the cross-entropy and the penalty.
        to_onehot_y: the target is a label map ``(B, 1, *spatial)``.
        reduction: ``"mean"`` over batch and voxels, ``"sum"``, or ``"none"`` (``(B, 1, *spatial)``).

    Example:
        >>> z = torch.randn(2, 3, 8, 8); y = torch.randint(0, 3, (2, 1, 8, 8))
        >>> loss = MarginLoss(margin=10.0, alpha=0.1, to_onehot_y=True)
        >>> bool(torch.isclose(loss(z, y), torch.nn.functional.cross_entropy(z, y[:, 0])))  # |z| small: no penalty
        True
    """

    def __init__(
        self,
        margin: float = 10.0,
        alpha: float = 0.1,
        include_background: bool = True,
        to_onehot_y: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.reduction = _check_reduction(reduction)
        self.margin = _check_weight(margin, "margin")
        self.alpha = _check_weight(alpha, "alpha")
        self.include_background = check_bool(include_background, "include_background")
        self.to_onehot_y = check_bool(to_onehot_y, "to_onehot_y")

    def penalty(self, logits: torch.Tensor) -> torch.Tensor:
        """The mean penalty over the kept channels, per voxel ``(B, 1, *spatial)``."""
        pen = margin_penalty(logits, self.margin)
        if not self.include_background:
            pen = pen[:, 1:]
        if pen.shape[1] == 0:
            raise ValueError("include_background=False leaves no channel: the logits have one channel")
        return pen.mean(1, keepdim=True)

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss.

        Args:
            input: ``(B, C, *spatial)`` logits.
            target: one-hot ``(B, C, *spatial)``, or a label map ``(B, 1, *spatial)`` with ``to_onehot_y``.

        Returns:
            A scalar, or ``(B, 1, *spatial)`` with ``reduction="none"``.
        """
        z, t = _upcast(*check_target(input, target, self.to_onehot_y))
        if self.include_background:  # without background one channel raises below
            _warn_one_channel_softmax(z, "MarginLoss")
        if self.reduction != "none" and self.to_onehot_y:  # the fast path: no one-hot, a fused penalty
            if z.shape[1] == 1 and not self.include_background:
                raise ValueError("include_background=False leaves no channel: the logits have one channel")
            labels = t[:, 0].long()
            ce = F.cross_entropy(z, labels, reduction="none" if not self.include_background else "sum")
            if not self.include_background:
                ce = (ce * (labels != 0)).sum()
            n = labels.numel()
            value = ce / n + self.alpha * mean_margin_penalty(z, self.margin, self.include_background)
            return check_finite_loss(value if self.reduction == "mean" else value * n, z, t)
        onehot = prepare_target(z, t, self.to_onehot_y)[1]
        ce = -onehot * F.log_softmax(z, dim=1)
        if not self.include_background:
            ce = ce[:, 1:]
        per_voxel = ce.sum(1, keepdim=True) + self.alpha * self.penalty(z)
        return check_finite_loss(_reduce(per_voxel, self.reduction), z, onehot, unit_target=not self.to_onehot_y)


class L1ACELoss(_Loss):
    """The marginal L1 average calibration error as a loss (hard or soft bins), per image and channel.

    See :func:`~monai_unc.losses.functional.l1_average_calibration_error`. Barfoot et al., *Average Calibration
    Error: A Differentiable Loss for Improved Reliability in Image Segmentation*, MICCAI 2024 (hard bins) and
    *Average Calibration Losses for Reliable Uncertainty in Medical Image Segmentation*, 2025 (soft bins); the
    published settings: 20 bins, ``include_background=True``, ``empty_weight=0.01``, empty classes ignored.

    Args:
        binning: ``"hard"`` or ``"soft"``.
        num_bins: bins on ``[0, 1]``.
        empty_weight: soft bins lighter than this are left out.
        ignore_empty_classes: a channel absent from an image's target contributes 0 (still counted in the mean).
        include_background: ``False`` drops channel 0.
        to_onehot_y: the target is a label map ``(B, 1, *spatial)``.
        softmax: probabilities by softmax over the channels.
        sigmoid: probabilities by a sigmoid per channel (regions).
        reduction: ``"mean"`` over images and channels, ``"sum"``, or ``"none"`` (``(B, C, 1, ...)``, broadcastable
            like MONAI's Dice).

    Example:
        >>> z = torch.randn(2, 3, 8, 8, requires_grad=True); y = torch.randint(0, 3, (2, 1, 8, 8))
        >>> loss = L1ACELoss("soft", to_onehot_y=True)(z, y)
        >>> loss.backward(); 0 <= loss.item() <= 1, bool(z.grad.abs().sum() > 0)
        (True, True)
    """

    def __init__(
        self,
        binning: str = "hard",
        num_bins: int = 20,
        empty_weight: float = 0.01,
        ignore_empty_classes: bool = True,
        include_background: bool = True,
        to_onehot_y: bool = False,
        softmax: bool = True,
        sigmoid: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if binning not in ("hard", "soft"):
            raise ValueError(f"binning must be 'hard' or 'soft', got {binning!r}")
        num_bins = int_option(num_bins, "num_bins", "an integer >= 1")
        if num_bins < 1:
            raise ValueError(f"num_bins must be an integer >= 1, got {num_bins!r}")
        self.reduction = _check_reduction(reduction)
        self.use_sigmoid = _activation(softmax, sigmoid, "L1ACELoss")
        self.binning = binning
        self.num_bins = num_bins
        self.empty_weight = _check_weight(empty_weight, "empty_weight")
        self.ignore_empty_classes = check_bool(ignore_empty_classes, "ignore_empty_classes")
        self.include_background = check_bool(include_background, "include_background")
        self.to_onehot_y = check_bool(to_onehot_y, "to_onehot_y")

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss.

        Args:
            input: ``(B, C, *spatial)`` logits.
            target: one-hot (or soft, values in ``[0, 1]``) ``(B, C, *spatial)``, or a label map ``(B, 1, *spatial)``
                with ``to_onehot_y``.

        Returns:
            A scalar, or ``(B, C', 1, ...)`` with ``reduction="none"`` (``C' = C - 1`` without background).

        Raises:
            ValueError: a one-hot target with a value outside ``[0, 1]``, non-finite logits or target, and the
                checks of :func:`check_target`.
        """
        z, onehot = prepare_target(input, target, self.to_onehot_y, self.use_sigmoid)
        return check_finite_loss(self.loss_of_onehot(z, onehot), z, onehot, unit_target=not self.to_onehot_y)

    def loss_of_onehot(self, z: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        """The loss of checked logits and a one-hot target (what :meth:`forward` computes after its checks).

        The range of ``onehot`` (``[0, 1]``) is not checked here: :meth:`forward` checks it with
        :func:`check_finite_loss` (``unit_target=True``), in the one synchronisation of a step.
        """
        if not self.use_sigmoid and self.include_background:  # without background one channel raises below
            _warn_one_channel_softmax(z, "L1ACELoss")
        z, onehot = _upcast(z, onehot)
        probs = torch.sigmoid(z) if self.use_sigmoid else torch.softmax(z, dim=1)
        if not self.include_background:
            probs, onehot = probs[:, 1:], onehot[:, 1:]
        if probs.shape[1] == 0:
            raise ValueError("include_background=False leaves no channel: the logits have one channel")
        # l1_average_calibration_error without its range check of the target: forward checks it in the
        # synchronisation of check_finite_loss
        soft = self.binning == "soft"
        sum_p, sum_y, weight = binned_calibration(probs, onehot, num_bins=self.num_bins, soft=soft)
        ace = ace_of_bins(sum_p, sum_y, weight, onehot, soft, self.empty_weight, self.ignore_empty_classes).to(
            probs.dtype
        )
        if self.reduction == "mean":
            return ace.mean()
        if self.reduction == "sum":
            return ace.sum()
        return ace.reshape(*ace.shape, *([1] * (z.ndim - 2)))


class DiceSVLSLoss(_Loss):
    """``lambda_dice * Dice + lambda_svls * SVLS cross-entropy``: :class:`monai.losses.DiceCELoss` with SVLS labels.

    The same arguments as ``DiceCELoss`` for the Dice part (``include_background``, ``to_onehot_y``, ``softmax``,
    ``sigmoid``, ``squared_pred``, ``smooth_nr``, ``smooth_dr``, ``batch``) and those of :class:`SVLSLoss`; so a
    MONAI bundle's ``DiceCELoss(to_onehot_y=True, softmax=True)`` becomes this class by its ``_target_`` alone.

    Args:
        kernel_size: SVLS kernel size.
        sigma: SVLS Gaussian standard deviation.
        spacing: voxel size per axis for the SVLS kernel.
        include_background: for both parts.
        to_onehot_y: the target is a label map ``(B, 1, *spatial)``.
        softmax: categorical (default).
        sigmoid: one binary task per channel.
        squared_pred: Dice option.
        smooth_nr: Dice option.
        smooth_dr: Dice option.
        batch: Dice option.
        lambda_dice: weight of the Dice part.
        lambda_svls: weight of the SVLS part.

    Example:
        >>> z = torch.randn(1, 3, 8, 8); y = torch.randint(0, 3, (1, 1, 8, 8))
        >>> float(DiceSVLSLoss(to_onehot_y=True, softmax=True)(z, y)) > 0
        True
    """

    def __init__(
        self,
        kernel_size: int = 3,
        sigma: float = 1.0,
        spacing: float | Sequence[float] | None = None,
        include_background: bool = True,
        to_onehot_y: bool = False,
        softmax: bool = True,
        sigmoid: bool = False,
        squared_pred: bool = False,
        smooth_nr: float = 1e-5,
        smooth_dr: float = 1e-5,
        batch: bool = False,
        lambda_dice: float = 1.0,
        lambda_svls: float = 1.0,
    ) -> None:
        super().__init__()
        use_sigmoid = _activation(softmax, sigmoid, "DiceSVLSLoss")
        self.dice = DiceLoss(
            include_background=check_bool(include_background, "include_background"),
            to_onehot_y=False,
            sigmoid=use_sigmoid,
            softmax=not use_sigmoid,
            squared_pred=check_bool(squared_pred, "squared_pred"),
            smooth_nr=_check_weight(smooth_nr, "smooth_nr"),
            smooth_dr=_check_weight(smooth_dr, "smooth_dr"),
            batch=check_bool(batch, "batch"),
        )
        self.svls = SVLSLoss(kernel_size, sigma, spacing, include_background, False, not use_sigmoid, use_sigmoid)
        self.to_onehot_y = check_bool(to_onehot_y, "to_onehot_y")
        self.lambda_dice = _check_weight(lambda_dice, "lambda_dice")
        self.lambda_svls = _check_weight(lambda_svls, "lambda_svls")

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The scalar loss.

        Args:
            input: ``(B, C, *spatial)`` logits.
            target: one-hot ``(B, C, *spatial)``, or a label map ``(B, 1, *spatial)`` with ``to_onehot_y``.

        Returns:
            A scalar tensor.
        """
        z, onehot = _upcast(*prepare_target(input, target, self.to_onehot_y, self.svls.use_sigmoid))
        value = self.lambda_dice * self.dice(z, onehot) + self.lambda_svls * self.svls.loss_of_onehot(z, onehot)
        return check_finite_loss(value, z, onehot, unit_target=not self.to_onehot_y)


class DiceCEMarginLoss(_Loss):
    """``DiceCELoss + alpha * margin penalty``: the segmentation MbLS of Murugesan et al. (Medical Image Analysis 2023).

    Murugesan et al., *Calibrating Segmentation Networks with Margin-based Label Smoothing*, train
    ``CE + Dice + alpha * sum max(0, d - margin)`` with ``margin=10``, ``alpha=0.1`` (their code: Dice without
    background). ``DiceCELoss`` is MONAI's, with its own arguments passed through (``dice_kwargs``); the penalty is
    :func:`~monai_unc.losses.functional.margin_penalty` averaged over voxels and classes. Softmax only.

    Args:
        margin: the tolerated logit distance.
        alpha: the weight of the penalty.
        include_background: for the Dice part (the penalty covers every class, as the authors').
        to_onehot_y: the target is a label map ``(B, 1, *spatial)``.
        softmax: must be ``True`` (MbLS is defined on softmax logits); present so that ``DiceCELoss`` arguments fit.
        **dice_kwargs: further arguments of :class:`monai.losses.DiceCELoss` (``lambda_dice``, ``lambda_ce``,
            ``squared_pred``, ``smooth_nr``, ...).

    Example:
        >>> z = torch.randn(1, 3, 8, 8); y = torch.randint(0, 3, (1, 1, 8, 8))
        >>> stock = DiceCELoss(to_onehot_y=True, softmax=True)
        >>> bool(torch.isclose(DiceCEMarginLoss(to_onehot_y=True)(z, y), stock(z, y)))  # small logits: no penalty
        True
    """

    def __init__(
        self,
        margin: float = 10.0,
        alpha: float = 0.1,
        include_background: bool = True,
        to_onehot_y: bool = False,
        softmax: bool = True,
        **dice_kwargs: Any,
    ) -> None:
        super().__init__()
        for flag in ("sigmoid", "squared_pred", "jaccard", "batch"):  # MONAI takes a truthy string as True
            if flag in dice_kwargs:
                check_bool(dice_kwargs[flag], flag)
        # MONAI checks only lambda_dice / lambda_ce < 0: a NaN or infinite weight, or a negative or NaN smoothing
        # term, gave a NaN / inf loss from finite logits, returned without an error (found by hostile testing)
        for name in ("lambda_dice", "lambda_ce", "smooth_nr", "smooth_dr"):
            if name in dice_kwargs:
                dice_kwargs[name] = _check_weight(dice_kwargs[name], name)
        if "reduction" in dice_kwargs:  # MONAI's DiceCELoss refused "none" without naming the argument
            reduction = getattr(dice_kwargs["reduction"], "value", dice_kwargs["reduction"])
            if reduction not in ("mean", "sum"):
                raise ValueError(f"reduction must be 'mean' or 'sum' (as MONAI's DiceCELoss), got {reduction!r}")
        if not check_bool(softmax, "softmax") or dice_kwargs.get("sigmoid"):
            raise ValueError("DiceCEMarginLoss: the margin penalty is defined for softmax logits only (softmax=True)")
        self.dicece = DiceCELoss(include_background=check_bool(include_background, "include_background"),
                                 to_onehot_y=check_bool(to_onehot_y, "to_onehot_y"), softmax=True,
                                 **dice_kwargs)
        self.margin = MarginLoss(margin, alpha)
        self.to_onehot_y = check_bool(to_onehot_y, "to_onehot_y")
        self.reduction = LossReduction(dice_kwargs.get("reduction", LossReduction.MEAN)).value

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The scalar loss.

        Args:
            input: ``(B, C, *spatial)`` logits.
            target: one-hot ``(B, C, *spatial)``, or a label map ``(B, 1, *spatial)`` with ``to_onehot_y``.

        Returns:
            A scalar tensor.
        """
        z, t = _upcast(*check_target(input, target, self.to_onehot_y))
        _warn_one_channel_softmax(z, "DiceCEMarginLoss")
        penalty = mean_margin_penalty(z, self.margin.margin)
        if self.reduction == "sum":  # MONAI's "sum" sums every term: the per-voxel penalty over the voxels, as
            penalty = penalty * (z.numel() // z.shape[1])  # MarginLoss(reduction="sum") does
        value = self.dicece(z, t) + self.margin.alpha * penalty
        return check_finite_loss(value, z, t, unit_target=not self.to_onehot_y)


class DiceCEL1ACELoss(_Loss):
    """``dice_weight * Dice + ce_weight * CE + ace_weight * L1-ACE``, as Barfoot et al. train it.

    The authors' published configuration: equal weights ``0.33``, 20 bins, background included, softmax, Dice with
    ``squared_pred=True``, ``smooth_nr=0``, ``smooth_dr=1e-5``; hard bins keep Dice, soft bins calibrate more and may
    cost Dice (their finding).

    Args:
        binning: ``"hard"`` or ``"soft"``.
        num_bins: bins of the ACE.
        empty_weight: soft bins lighter than this are left out.
        ace_weight: weight of the L1-ACE part.
        dice_weight: weight of the Dice part.
        ce_weight: weight of the cross-entropy part.
        include_background: for the Dice and L1-ACE parts; the cross-entropy covers every channel whatever its
            value, as in MONAI's ``DiceCELoss`` and the authors' code.
        to_onehot_y: the target is a label map ``(B, 1, *spatial)``.
        softmax: categorical (default).
        sigmoid: one binary task per channel (Dice and ACE by sigmoid, binary cross-entropy per channel).
        squared_pred: Dice option.
        smooth_nr: Dice option.
        smooth_dr: Dice option.

    Example:
        >>> z = torch.randn(1, 3, 8, 8); y = torch.randint(0, 3, (1, 1, 8, 8))
        >>> float(DiceCEL1ACELoss("hard", to_onehot_y=True)(z, y)) > 0
        True
    """

    def __init__(
        self,
        binning: str = "hard",
        num_bins: int = 20,
        empty_weight: float = 0.01,
        ace_weight: float = 0.33,
        dice_weight: float = 0.33,
        ce_weight: float = 0.33,
        include_background: bool = True,
        to_onehot_y: bool = False,
        softmax: bool = True,
        sigmoid: bool = False,
        squared_pred: bool = True,
        smooth_nr: float = 0.0,
        smooth_dr: float = 1e-5,
    ) -> None:
        super().__init__()
        use_sigmoid = _activation(softmax, sigmoid, "DiceCEL1ACELoss")
        self.dice = DiceLoss(
            include_background=check_bool(include_background, "include_background"),
            sigmoid=use_sigmoid,
            softmax=not use_sigmoid,
            squared_pred=check_bool(squared_pred, "squared_pred"),
            smooth_nr=_check_weight(smooth_nr, "smooth_nr"),
            smooth_dr=_check_weight(smooth_dr, "smooth_dr"),
        )
        self.ace = L1ACELoss(binning, num_bins, empty_weight, True, include_background, False, not use_sigmoid,
                             use_sigmoid)
        self.use_sigmoid = use_sigmoid
        self.ace_weight = _check_weight(ace_weight, "ace_weight")
        self.dice_weight = _check_weight(dice_weight, "dice_weight")
        self.ce_weight = _check_weight(ce_weight, "ce_weight")
        self.to_onehot_y = check_bool(to_onehot_y, "to_onehot_y")

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The scalar loss.

        Args:
            input: ``(B, C, *spatial)`` logits.
            target: one-hot ``(B, C, *spatial)``, or a label map ``(B, 1, *spatial)`` with ``to_onehot_y``.

        Returns:
            A scalar tensor.
        """
        z, onehot = _upcast(*prepare_target(input, target, self.to_onehot_y, self.use_sigmoid))
        if self.use_sigmoid:
            ce = _soft_binary_cross_entropy(z, onehot).mean()
        else:
            ce = _soft_cross_entropy(z, onehot).mean()  # over every channel, as MONAI's DiceCELoss and the authors
        value = self.dice_weight * self.dice(z, onehot) + self.ce_weight * ce
        return check_finite_loss(value + self.ace_weight * self.ace.loss_of_onehot(z, onehot), z, onehot,
                                 unit_target=not self.to_onehot_y)
