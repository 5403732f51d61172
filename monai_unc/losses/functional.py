"""The formulas of the calibration losses, one function each, on torch tensors (any float dtype, CPU or CUDA).

Every function takes channel-first tensors ``(B, C, *spatial)`` with one to three spatial dimensions and keeps the
dtype of its input, so that ``torch.autograd.gradcheck`` runs in float64. The loss classes of
:mod:`monai_unc.losses.calibration` (MONAI conventions: activation, ``to_onehot_y``, ``include_background``,
``reduction``) call these functions and compute nothing themselves.

- :func:`svls_kernel`, :func:`svls_targets`: spatially varying label smoothing (Islam, Glocker, *Spatially Varying
  Label Smoothing: Capturing Uncertainty from Expert Annotations*, IPMI 2021).
- :func:`margin_penalty`: the logit-margin penalty of margin-based label smoothing (Liu et al., *The Devil is in
  the Margin: Margin-based Label Smoothing for Network Calibration*, CVPR 2022; Murugesan et al., *Calibrating
  Segmentation Networks with Margin-based Label Smoothing*, Medical Image Analysis 2023).
- :func:`binned_calibration`, :func:`l1_average_calibration_error`: the hard- and soft-binned marginal L1 average
  calibration error (Barfoot et al., *Average Calibration Error: A Differentiable Loss for Improved Reliability in
  Image Segmentation*, MICCAI 2024; *Average Calibration Losses for Reliable Uncertainty in Medical Image
  Segmentation*, 2025).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .._utils import check_bool, no_autocast, sum_f64
from . import _cpu_kernel as _svls_cpu
from ._common import (
    REDUCED_PRECISION,
    ace_of_bins,
    check_unit_target,
    int_option,
    nonnegative_option,
    outside_unit_interval,
    real_option,
    spacing_steps,
)

__all__ = [
    "binned_calibration",
    "l1_average_calibration_error",
    "margin_penalty",
    "mean_margin_penalty",
    "svls_kernel",
    "svls_targets",
    "svls_targets_separable",
]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype in which sums over voxels of ``dtype`` values are accumulated: float32 for float16 / bfloat16.

    Args:
        dtype: the dtype of the values.

    Returns:
        ``torch.float32`` for float16 and bfloat16, else ``dtype``.
    """
    return torch.float32 if dtype in REDUCED_PRECISION else dtype


def _check_channel_first(x: torch.Tensor, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if not 3 <= x.ndim <= 5:
        raise ValueError(f"{name} must be (B, C, *spatial) with 1 to 3 spatial dimensions, got {tuple(x.shape)}")
    if x.numel() == 0:
        # found by review 66: no image, no voxel or no channel gave an IndexError or a torch RuntimeError, a mean
        # over no voxel a silent NaN, and no channel "the logits have one channel"; the loss classes refuse them too
        raise ValueError(f"{name} must not be empty, got shape {tuple(x.shape)}")


def svls_kernel(
    spatial_dims: int,
    kernel_size: int = 3,
    sigma: float = 1.0,
    spacing: float | Sequence[float] | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The smoothing kernel of spatially varying label smoothing (SVLS).

    A Gaussian ``g(d) = exp(-|d|^2 / (2 sigma^2))`` over the ``kernel_size^spatial_dims`` offsets ``d`` (in voxels,
    or in the units of ``spacing``: the offset along axis ``a`` is ``i_a * spacing[a]``), normalised to sum 1; its
    centre weight is then replaced by the sum of the neighbours' weights and the kernel normalised again. The centre
    voxel's own label therefore keeps half of the mass and the neighbours share the other half by distance (Islam,
    Glocker, *Spatially Varying Label Smoothing*, IPMI 2021, Eq. 2-3; the authors' code uses voxel offsets, which is
    ``spacing=None``).

    Args:
        spatial_dims: 1, 2 or 3.
        kernel_size: odd, at least 3 (the paper uses 3).
        sigma: the Gaussian's standard deviation, in voxels (or in the units of ``spacing``); the paper uses 1.
        spacing: the voxel size per axis (one number for all axes), e.g. mm; ``None`` for isotropic voxels.
        dtype: the kernel's dtype.
        device: the kernel's device.

    Returns:
        The kernel, shape ``(kernel_size,) * spatial_dims``, non-negative, summing to 1, its centre ``0.5``.

    Raises:
        TypeError: ``spatial_dims`` or ``kernel_size`` not an integer (a bool or a float), ``sigma`` or ``spacing``
            not a number.
        ValueError: ``spatial_dims``, ``kernel_size``, ``sigma`` or ``spacing`` out of range, or a ``sigma`` so small
            against the spacing that the neighbours' Gaussian weights underflow (float64) to 0.

    Example:
        >>> k = svls_kernel(2, sigma=1.0)
        >>> round(float(k.sum()), 6), round(float(k[1, 1]), 6), k.shape
        (1.0, 0.5, torch.Size([3, 3]))
    """
    # an integer, not a bool or a float: spatial_dims=2.0 raised an unnamed TypeError ("can't multiply sequence by
    # non-int") and spatial_dims=True gave a 1-D kernel (True == 1), as kernel_size refuses them (hostile testing)
    spatial_dims = int_option(spatial_dims, "spatial_dims", "1, 2 or 3")
    if spatial_dims not in (1, 2, 3):
        raise ValueError(f"spatial_dims must be 1, 2 or 3, got {spatial_dims}")
    kernel_size = int_option(kernel_size, "kernel_size", "an odd integer >= 3")
    if kernel_size < 3 or kernel_size % 2 == 0:
        raise ValueError(f"kernel_size must be an odd integer >= 3, got {kernel_size!r}")
    sigma = real_option(sigma, "sigma", "a positive finite number")
    if not 0 < sigma < math.inf:
        raise ValueError(f"sigma must be a positive finite number, got {sigma!r}")
    steps = spacing_steps(spacing, spatial_dims)
    half = kernel_size // 2
    offsets = torch.arange(-half, half + 1, dtype=torch.float64)
    grids = torch.meshgrid(*[offsets * s for s in steps], indexing="ij")
    sq = sum(g**2 for g in grids)
    g = torch.exp(-sq / (2.0 * float(sigma) ** 2))  # the centre's weight 1
    centre = (half,) * spatial_dims
    g[centre] = 0.0
    # normalised, raised and normalised again, the centre is 1/2 and a neighbour g / (2 sum of the neighbours' g): the
    # neighbours' mass summed directly, not as 1 - g_centre, which lost it to rounding when sigma is small against the
    # spacing (weights 5e-7 off at sigma 0.3 with 2 mm voxels, and sigma 0.25 refused there; hostile review 58)
    neighbours = float(g.sum())
    if not neighbours >= torch.finfo(torch.float64).tiny:
        raise ValueError(f"sigma={sigma} is too small for the spacing {steps}: the neighbours' Gaussian weights "
                         "underflow to 0")
    g = g / (2.0 * neighbours)
    g[centre] = 0.5
    return g.to(dtype=dtype, device=device)


def _gaussian_1d(kernel_size: int, sigma: float, step: float) -> torch.Tensor:
    half = kernel_size // 2
    g = torch.exp(-((torch.arange(-half, half + 1, dtype=torch.float64) * step) ** 2) / (2.0 * sigma**2))
    return g / g.sum()


def svls_targets(onehot: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Soft targets of SVLS: each channel of a one-hot (or soft) target convolved with the kernel.

    The target is padded by replicating its border (as the authors do), so a constant map stays constant and the
    classes still sum to 1 at every voxel.

    Args:
        onehot: ``(B, C, *spatial)`` one-hot (or soft) targets, 1 to 3 spatial dimensions.
        kernel: ``(k,) * spatial_dims`` from :func:`svls_kernel`.

    Returns:
        ``(B, C, *spatial)`` soft targets, the dtype and device of ``onehot``.

    Raises:
        TypeError: ``onehot`` is not a floating-point tensor, or ``kernel`` not a tensor.
        ValueError: shapes do not fit, or ``onehot`` is empty (no image, voxel or channel).

    Example:
        >>> y = torch.zeros(1, 2, 5, 5); y[:, 0] = 1; y[:, 0, 2, 2] = 0; y[:, 1, 2, 2] = 1
        >>> q = svls_targets(y, svls_kernel(2))
        >>> round(float(q[0, 1, 2, 2]), 3), bool(torch.allclose(q.sum(1), torch.ones(1, 5, 5)))
        (0.5, True)
    """
    _check_channel_first(onehot, "onehot")
    acc = _accumulation_dtype(onehot.dtype)
    if acc != onehot.dtype:
        # float16 / bfloat16 targets computed in float32 and rounded once: accumulated in bfloat16, the separable form's
        # targets were off by up to 1.2e-2 (three of bfloat16's steps near 1; float16 1.0e-3), the direct
        # convolution's by 2.6e-3; rounded once, at most half a step (2.0e-3 / 2.4e-4)
        return svls_targets(onehot.to(acc), kernel).to(onehot.dtype)
    dims = onehot.ndim - 2
    if not isinstance(kernel, torch.Tensor):  # an AttributeError on kernel.ndim before (hostile review 56)
        raise TypeError(f"kernel must be a torch.Tensor (from svls_kernel), got {type(kernel).__name__}")
    if kernel.ndim != dims or len(set(kernel.shape)) != 1 or kernel.shape[0] % 2 == 0:
        raise ValueError(f"kernel must be (k,) * {dims} with odd k, got {tuple(kernel.shape)}")
    half = kernel.shape[0] // 2
    channels = onehot.shape[1]
    padded = F.pad(onehot, (half, half) * dims, mode="replicate")
    weight = kernel.to(dtype=onehot.dtype, device=onehot.device).expand(channels, 1, *kernel.shape)
    # in the target's dtype whatever the caller's autocast (a training step): bfloat16 targets were off by up to
    # 4e-3 (found by hostile testing)
    with no_autocast(onehot.device):
        return _CONV[dims](padded, weight, groups=channels)


#: the largest centre weight ``g_c`` of the Gaussian (before its centre is raised) for which
#: :func:`svls_targets_separable` smooths axis by axis; above it (a ``sigma`` small against the voxel size) it takes
#: the direct convolution of :func:`svls_targets`, since the separable form's rounding error grows as
#: ``eps / (2 (1 - g_c))``: at most twice the target dtype's rounding here
SEPARABLE_MAX_CENTRE = 0.75


def svls_targets_separable(
    onehot: torch.Tensor, kernel_size: int = 3, sigma: float = 1.0, spacing: float | Sequence[float] | None = None
) -> torch.Tensor:
    """:func:`svls_targets` with the kernel of :func:`svls_kernel`, computed with one 1-D pass per axis.

    The SVLS kernel is a separable Gaussian ``G`` (centre weight ``g_c``) with its centre raised to ``1 - g_c`` and
    renormalised, so ``q = (G * y + (1 - 2 g_c) y) / (2 (1 - g_c))``: ``spatial_dims`` 1-D convolutions of ``k``
    taps (shifted views of the replicate-padded target) instead of one of ``k^spatial_dims``. Equal to
    :func:`svls_targets` to rounding; a ``sigma`` so small against the voxel size that ``g_c`` exceeds
    :data:`SEPARABLE_MAX_CENTRE` takes :func:`svls_targets` itself (the separable form would divide its rounding
    by ``1 - g_c``). On the CPU, for float32 / float64 targets of at least
    :data:`CPU_KERNEL_MIN_ELEMENTS` elements that need no gradient, a compiled form makes one pass per axis
    (numba, the optional ``fast`` extra; the same values up to rounding); elsewhere torch operations.

    Args:
        onehot: ``(B, C, *spatial)`` one-hot (or soft) targets, 1 to 3 spatial dimensions.
        kernel_size: odd, >= 3.
        sigma: the Gaussian's standard deviation (voxels, or the units of ``spacing``).
        spacing: voxel size per axis, ``None`` for isotropic voxels.

    Returns:
        ``(B, C, *spatial)`` soft targets, the dtype and device of ``onehot``.

    Raises:
        ValueError: ``kernel_size``, ``sigma`` or ``spacing`` out of range, or ``onehot`` empty (no image, voxel or
            channel).

    Example:
        >>> y = (torch.rand(1, 1, 6, 5, 4) > 0.5).float(); y = torch.cat([1 - y, y], 1)
        >>> a = svls_targets_separable(y, 3, 1.0, (1.0, 1.0, 2.0))
        >>> bool(torch.allclose(a, svls_targets(y, svls_kernel(3, 3, 1.0, (1.0, 1.0, 2.0))), atol=1e-6))
        True
    """
    _check_channel_first(onehot, "onehot")
    acc = _accumulation_dtype(onehot.dtype)
    if acc != onehot.dtype:  # in float32, rounded once, as svls_targets
        return svls_targets_separable(onehot.to(acc), kernel_size, sigma, spacing).to(onehot.dtype)
    dims = onehot.ndim - 2
    kernel = svls_kernel(dims, kernel_size, sigma, spacing, dtype=torch.float64)  # checks the arguments
    steps = spacing_steps(spacing, dims)
    kernel_size, sigma = int(kernel_size), float(sigma)
    half = kernel_size // 2
    weights = [[float(v) for v in _gaussian_1d(kernel_size, sigma, step)] for step in steps]
    centre = math.prod(w[half] for w in weights)
    if centre > SEPARABLE_MAX_CENTRE:
        # found by hostile testing: the separable form scales G * y by 1 / (2 (1 - g_c)) and takes back the raised
        # centre, so its rounding grows as g_c nears 1; for float32 targets with sigma = 0.15 voxel (g_c = 1 - 1e-9)
        # soft targets of up to 32 came out and SVLSLoss gave 45.3 instead of 1.395 (sigma = 0.2: 2e-3 off)
        return svls_targets(onehot, kernel)
    scale = 1.0 / (2.0 * (1.0 - centre))  # folded into the last axis' taps
    weights[-1] = [v * scale for v in weights[-1]]
    coef = (1.0 - 2.0 * centre) * scale  # the raised centre, added after the last axis
    if _use_cpu_kernel(onehot):
        x = onehot.detach().contiguous()
        flat = x.reshape(-1, *x.shape[2:]).numpy()
        out = _svls_cpu.smooth_axes(flat, [np.asarray(w) for w in weights], coef, torch.get_num_threads())
        return torch.from_numpy(out).reshape(onehot.shape)
    return _separable_torch(onehot, weights, coef)


#: the voxels of an image and channel whose bin sums :func:`binned_calibration` accumulates in the input's precision
#: (float32 for float16 / bfloat16); these partial sums are added in float64. A float32 sum of up to 256 terms in
#: ``[0, 1]`` is within ``256 * 2**-24`` of exact relative to its size, whatever the size of the image.
BIN_SUM_CHUNK = 256

#: the compiled CPU form of :func:`svls_targets_separable` runs from this many target elements on (below it a
#: first call's compilation would cost more than it saves)
CPU_KERNEL_MIN_ELEMENTS = 1 << 16


def _use_cpu_kernel(onehot: torch.Tensor) -> bool:
    """Whether :func:`svls_targets_separable` takes the compiled CPU form (:mod:`._cpu_kernel`)."""
    return (onehot.device.type == "cpu" and onehot.dtype in (torch.float32, torch.float64)
            and onehot.numel() >= CPU_KERNEL_MIN_ELEMENTS
            and not (onehot.requires_grad and torch.is_grad_enabled()) and _svls_cpu.available())


def _separable_torch(onehot: torch.Tensor, weights: list[list[float]], coef: float) -> torch.Tensor:
    """The torch form of :func:`svls_targets_separable`: any device and dtype, differentiable.

    Per axis the centre tap, then one in-place add per other tap on shifted views; the reference of the compiled
    CPU form in the tests.
    """
    out = onehot
    for axis, w in enumerate(weights):
        half = len(w) // 2
        dim = 2 + axis
        n = out.shape[dim]
        acc = out * w[half]
        for j in range(len(w)):  # tap j reads the voxel at offset j - half, the border replicated
            off = j - half
            if off == 0:
                continue
            m = min(abs(off), n)
            if off < 0:  # acc[i] += w * x[i + off]
                if n > m:
                    acc.narrow(dim, m, n - m).add_(out.narrow(dim, 0, n - m), alpha=w[j])
                acc.narrow(dim, 0, m).add_(out.narrow(dim, 0, 1).expand_as(acc.narrow(dim, 0, m)), alpha=w[j])
            else:
                if n > m:
                    acc.narrow(dim, 0, n - m).add_(out.narrow(dim, m, n - m), alpha=w[j])
                acc.narrow(dim, n - m, m).add_(out.narrow(dim, n - 1, 1).expand_as(acc.narrow(dim, 0, m)),
                                               alpha=w[j])
        out = acc
    return out.add_(onehot, alpha=coef)


def margin_penalty(logits: torch.Tensor, margin: float = 10.0) -> torch.Tensor:
    """The logit-margin penalty of MbLS: ``max(0, max_j z_j - z_c - margin)`` per voxel and class.

    Liu et al., *The Devil is in the Margin: Margin-based Label Smoothing for Network Calibration*, CVPR 2022
    (Eq. 7, the linear penalty): the logit distances ``d_c = max_j z_j - z_c`` are pushed below ``margin``; the
    class with the largest logit has ``d = 0`` and never pays.

    Args:
        logits: ``(B, C, *spatial)`` raw network outputs.
        margin: the tolerated logit distance (the papers use 10), ``>= 0``.

    Returns:
        ``(B, C, *spatial)`` penalties, ``>= 0``: float32 for float16 / bfloat16 logits (computed in float32: the
        distance of two float16 logits can exceed float16's largest value, 65504, and rounding it to the logits' 8-
        or 11-bit mantissa loses up to 0.4 % of it), else the logits' dtype.

    Raises:
        ValueError: ``margin`` negative or not finite, or ``logits`` empty (no image, voxel or channel).

    Example:
        >>> z = torch.tensor([[[12.0], [0.0], [1.0]]])  # (B=1, C=3, N=1)
        >>> margin_penalty(z, margin=10.0).flatten().tolist()
        [0.0, 2.0, 1.0]
        >>> margin_penalty(torch.tensor([[[4e4], [-4e4]]], dtype=torch.float16), 10.0).flatten().tolist()
        [0.0, 79990.0]
    """
    _check_channel_first(logits, "logits")
    margin = nonnegative_option(margin, "margin")
    z = logits.to(_accumulation_dtype(logits.dtype))  # (differentiable; no copy for float32 / float64)
    distances = z.amax(dim=1, keepdim=True) - z
    return F.relu(distances - margin)


def _margin_threshold(top: torch.Tensor, margin: float) -> torch.Tensor:
    """``top - margin`` in float32 for float16 / bfloat16 ``top`` (else in its dtype): an entry pays iff it is below.

    Args:
        top: the per-voxel largest logit, ``(B, *spatial)``.
        margin: the checked margin.

    Returns:
        The threshold, ``top``'s shape, in :func:`_accumulation_dtype` of its dtype.
    """
    return top.to(_accumulation_dtype(top.dtype)) - margin


class _MeanMarginPenalty(torch.autograd.Function):
    """``mean(margin_penalty(z, margin))`` over the channels from ``first`` on, with a hand-written gradient.

    No ``(B, C, *spatial)`` tensor is made in the forward pass: the per-voxel maximum ``top`` is kept (``(B, 1,
    *spatial)``) and the penalty is summed one channel at a time into one reused voxel buffer. Entry ``(c, v)`` pays
    iff ``z_c < top - margin`` (then it is not the maximum). Backward: ``-1/n`` at every paying entry and the count
    of paying entries of the voxel ``/ n`` at its maximum (the gradient autograd gives for a unique maximum; ties
    send it to the first maximum, a subgradient), written channel by channel into the gradient; when no entry pays
    the gradient is autograd's zero (``None``) and nothing is allocated.
    """

    @staticmethod
    def forward(ctx: object, logits: torch.Tensor, margin: float, first: int) -> torch.Tensor:
        # float16 / bfloat16 logits (a network under autocast) in float32: the distance of two float16 logits
        # overflowed to inf from 65504 on, and each entry rounded to the logits' mantissa made the mean of a
        # typical patch 2e-4 (float16) to 2e-3 (bfloat16) off, before the result itself was rounded to that dtype
        # (found by hostile testing of the nnU-Net MbLS trainer); the sums over voxels are float64
        top = logits.amax(dim=1)  # (B, *spatial), exact in any dtype
        threshold = _margin_threshold(top, margin)
        buf = torch.empty_like(threshold)
        total = torch.zeros((), dtype=torch.float64, device=logits.device)
        for c in range(first, logits.shape[1]):
            total += sum_f64(torch.sub(threshold, logits[:, c], out=buf).clamp_min_(0))
        n = logits.shape[0] * (logits.shape[1] - first) * top[0].numel()
        ctx.active = bool(total > 0)  # a sum of non-negative terms: > 0 iff some entry pays
        if ctx.active:
            ctx.save_for_backward(logits, top)
        ctx.n, ctx.first, ctx.margin = n, first, margin
        return (total / n).to(threshold.dtype)

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        if not ctx.active:
            return None, None, None
        logits, top = ctx.saved_tensors
        threshold = _margin_threshold(top, ctx.margin)  # the forward's, so that the same entries pay
        scale = grad.to(threshold.dtype) / ctx.n
        g = torch.empty_like(logits, memory_format=torch.contiguous_format)
        count = torch.zeros_like(threshold)  # float32 at least: a bfloat16 count is exact up to 256 only
        for c in range(logits.shape[1]):
            if c < ctx.first:
                g[:, c].zero_()
                continue
            paying = logits[:, c] < threshold
            torch.mul(paying, -scale, out=g[:, c])
            count += paying
        count.mul_(scale)
        taken = None  # the voxels whose (first) maximum was already found
        for c in range(logits.shape[1]):
            at_max = logits[:, c] == top
            if taken is not None:
                at_max &= ~taken
            g[:, c].addcmul_(at_max, count)
            taken = at_max if taken is None else taken.logical_or_(at_max)
        return g, None, None


def mean_margin_penalty(logits: torch.Tensor, margin: float = 10.0, include_background: bool = True) -> torch.Tensor:
    """The mean of :func:`margin_penalty` over voxels and classes, with a fused gradient (less memory and time).

    Args:
        logits: ``(B, C, *spatial)`` raw network outputs.
        margin: the tolerated logit distance, ``>= 0``.
        include_background: ``False`` leaves channel 0 out of the mean (its logit still counts for the maximum).

    Returns:
        A scalar: ``margin_penalty(logits, margin)[:, first:].mean()``, each entry computed in float32 for float16 /
        bfloat16 logits (a network under autocast; see :func:`margin_penalty`) and summed in float64; float32 for
        float16 / bfloat16 logits, else the logits' dtype. The gradient reaches the logits in their dtype. When no
        entry pays (every logit distance within the margin) its gradient is zero and handed to autograd as
        ``None``: nothing is allocated, and ``logits.grad`` stays ``None`` if nothing else uses the logits.

    Raises:
        ValueError: ``margin`` negative or not finite, ``logits`` empty (no image, voxel or channel), or
            ``include_background=False`` with one channel.

    Example:
        >>> z = torch.tensor([[[12.0], [0.0], [1.0]]], requires_grad=True)
        >>> v = mean_margin_penalty(z, 10.0); v.backward()
        >>> round(v.item(), 4), [round(g, 4) for g in z.grad.flatten().tolist()]
        (1.0, [0.6667, -0.3333, -0.3333])
    """
    _check_channel_first(logits, "logits")
    margin = nonnegative_option(margin, "margin")
    first = 0 if check_bool(include_background, "include_background") else 1
    if logits.shape[1] <= first:
        raise ValueError("include_background=False leaves no channel: the logits have one channel")
    return _MeanMarginPenalty.apply(logits, margin, first)


def binned_calibration(
    probs: torch.Tensor, target: torch.Tensor, num_bins: int = 20, soft: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per image and channel, the weighted sums of probabilities, of targets and of weights in each bin.

    Hard binning: value ``p`` falls in bin ``floor(p * num_bins)`` (``p = 1`` in the last bin; the product taken in
    float64, exact for float32 values), the convention of :mod:`monai_unc.metrics.calibration`. Soft binning (Barfoot et
    al. 2025): bin ``k`` has its centre at ``(k + 1/2) / num_bins`` and ``p`` is shared between the two nearest centres
    by linear interpolation (a triangular kernel of width ``2 / num_bins``); below the first or above the last centre
    all of it goes to the end bin. The soft weights depend on ``p``, so the gradient flows through the bin memberships
    too. The sums are accumulated in float32 for float16 / bfloat16 input (in the input's 11- or 8-bit mantissa a bin's
    count stops growing at 2048 or 256 voxels), else in the input's dtype, over runs of :data:`BIN_SUM_CHUNK` voxels
    (``4 * num_bins`` for more than 64 bins) whose partial sums are added in float64 (one float32 sum over a whole
    image drifts from about 2**18 voxels in a bin on, and stops growing at 2**24). A NaN probability makes the sums of
    its image and channel NaN.

    Args:
        probs: ``(B, C, *spatial)`` probabilities in ``[0, 1]``.
        target: ``(B, C, *spatial)`` targets (one-hot, or soft in ``[0, 1]``), same shape.
        num_bins: number of equal-width bins on ``[0, 1]``, ``>= 1``.
        soft: soft instead of hard binning.

    Returns:
        ``(sum_p, sum_y, weight)``, each ``(B, C, num_bins)``, float32 for float16 / bfloat16 ``probs``, else
        their dtype: ``sum_p / weight`` is the mean probability and ``sum_y / weight`` the mean target (the
        accuracy) of a bin.

    Raises:
        TypeError: ``probs`` or ``target`` is not a tensor (``probs`` not floating-point).
        ValueError: shapes differ, ``probs`` is empty (no image, voxel or channel) or ``num_bins < 1``.

    Example:
        >>> p = torch.tensor([[[0.1, 0.15, 0.9]]]); y = torch.tensor([[[0.0, 1.0, 1.0]]])
        >>> sp, sy, w = binned_calibration(p, y, num_bins=2)
        >>> sp.tolist(), sy.tolist(), w.tolist()
        ([[[0.25, 0.8999999761581421]]], [[[1.0, 1.0]]], [[[2.0, 1.0]]])
    """
    _check_channel_first(probs, "probs")
    if not isinstance(target, torch.Tensor):  # a numpy target raised an AttributeError (hostile review 56)
        raise TypeError(f"target must be a torch.Tensor, got {type(target).__name__}")
    if target.shape != probs.shape:
        raise ValueError(f"target {tuple(target.shape)} and probs {tuple(probs.shape)} must have the same shape")
    num_bins = int_option(num_bins, "num_bins", "an integer >= 1")
    if num_bins < 1:
        raise ValueError(f"num_bins must be an integer >= 1, got {num_bins!r}")
    soft = check_bool(soft, "soft")
    b, c = probs.shape[:2]
    p = probs.reshape(b * c, -1).to(_accumulation_dtype(probs.dtype))
    y = target.reshape(b * c, -1).to(p.dtype)
    # each run of BIN_SUM_CHUNK voxels of an image and channel adds into bins of its own, which are then summed in
    # float64: one float32 accumulator per bin over a whole image drifted (found by hostile testing: from 2**20 voxels
    # on, float32 adds 0.97 as 1.0, and at 2**24 a bin's count stops growing), so that the L1-ACE of a 128^3 patch of
    # p = 0.97 against an accuracy of 0.9 came out 0.092 instead of 0.070
    # (runs of at least 4 * num_bins voxels: the partial sums never take more than a quarter of the input's memory)
    n = p.shape[1]
    run = max(BIN_SUM_CHUNK, 4 * num_bins)
    chunks = max(1, -(-n // run))
    row = (torch.arange(b * c, device=p.device) * (chunks * num_bins))[:, None] + (
        torch.arange(n, device=p.device) // run * num_bins
    )[None, :]
    if not soft:  # a NaN goes to bin 0 (an index must be valid), where it makes the sums NaN
        # floor(p * num_bins) in float64, exact for float32 p (in float32 the product of a value just below an edge
        # k / num_bins, e.g. float32(0.35) = 0.34999999, rounds up to k: bin 7 of 20 instead of 6, where
        # metrics.calibration.confidence_bins counts it)
        scaled = torch.mul(p.detach().to(torch.float64), num_bins).floor_().nan_to_num_(0.0)  # a new tensor
        idx = scaled.clamp_(0, num_bins - 1).to(torch.int64) + row
        parts = [(idx, torch.ones_like(p))]
    else:
        t = p * num_bins - 0.5  # position in units of bins, 0 at the first centre
        lower = torch.floor(t.detach()).nan_to_num_(0.0)
        frac = t - lower  # in [0, 1): the weight of the upper centre
        lo = torch.clamp(lower, 0, num_bins - 1).to(torch.int64) + row
        hi = torch.clamp(lower + 1, 0, num_bins - 1).to(torch.int64) + row
        parts = [(lo, 1.0 - frac), (hi, frac)]
    out = []
    for values in (p, y, None):
        acc = p.new_zeros(b * c * chunks * num_bins)
        for idx, w in parts:
            acc = acc.index_add(0, idx.reshape(-1), (w if values is None else w * values).reshape(-1))
        sums = acc.reshape(b * c, chunks, num_bins)
        sums = sums[:, 0] if chunks == 1 else sums.sum(1, dtype=torch.float64).to(p.dtype)
        out.append(sums.reshape(b, c, num_bins))
    return out[0], out[1], out[2]


def l1_average_calibration_error(
    probs: torch.Tensor,
    target: torch.Tensor,
    num_bins: int = 20,
    soft: bool = False,
    empty_weight: float = 0.01,
    ignore_empty_classes: bool = True,
) -> torch.Tensor:
    """The marginal L1 average calibration error (L1-ACE) of every image and channel, differentiable in ``probs``.

    ``ACE = mean over non-empty bins k of |mean_p_k - mean_y_k|`` with the bins of :func:`binned_calibration`;
    a bin is empty when its weight is 0, or (soft) below ``empty_weight``. Each channel is a binary task:
    its probability against its target (Barfoot et al., *Average Calibration Error: A Differentiable Loss for
    Improved Reliability in Image Segmentation*, MICCAI 2024: hard bins; *Average Calibration Losses for Reliable
    Uncertainty in Medical Image Segmentation*, 2025: soft bins).

    Args:
        probs: ``(B, C, *spatial)`` probabilities, values in ``[0, 1]`` (NaN allowed, see Returns).
        target: ``(B, C, *spatial)`` one-hot (or soft) targets, values in ``[0, 1]`` (both ranges checked in one
            device synchronisation).
        num_bins: bins (the papers use 20).
        soft: soft instead of hard binning.
        empty_weight: the weight below which a soft bin counts as empty (the authors' default 0.01; unused for hard).
        ignore_empty_classes: the ACE of a channel whose target is all 0 in that image is set to 0 (as the authors:
            it still counts in a mean over channels).

    Returns:
        ``(B, C)`` errors in ``[0, 1]``, the dtype of ``probs`` (computed in float32 for float16 / bfloat16, see
        :func:`binned_calibration`); NaN for an image and channel with a NaN probability.

    Raises:
        ValueError: ``probs`` or ``target`` has a value outside ``[0, 1]``, shapes differ, ``probs`` is empty,
            ``num_bins < 1`` or ``empty_weight`` is not a finite number ``>= 0``.

    Example:
        >>> p = torch.tensor([[[0.1, 0.15, 0.9]]]); y = torch.tensor([[[0.0, 1.0, 1.0]]])
        >>> # bin 0: mean p 0.125 vs accuracy 0.5; bin 1: 0.9 vs 1 -> (0.375 + 0.1) / 2
        >>> [round(v, 4) for v in l1_average_calibration_error(p, y, num_bins=2).flatten().tolist()]
        [0.2375]
    """
    empty_weight = nonnegative_option(empty_weight, "empty_weight")
    ignore_empty_classes = check_bool(ignore_empty_classes, "ignore_empty_classes")
    sum_p, sum_y, weight = binned_calibration(probs, target, num_bins=num_bins, soft=soft)  # checks the shapes
    # probabilities outside [0, 1] (logits passed by mistake) were binned into the end bins and gave an "error" above
    # 1 without a word (found by hostile testing); checked with the target in one device synchronisation
    bad_probs = outside_unit_interval(probs)
    if bool(bad_probs | outside_unit_interval(target)):
        if bool(bad_probs):
            p = probs.detach().double()
            lo, hi = (float(v) for v in torch.aminmax(p[~torch.isnan(p)]))
            raise ValueError(
                f"probs must be probabilities in [0, 1], got values in [{lo:g}, {hi:g}] (logits: apply a softmax "
                "or a sigmoid first, or use L1ACELoss)"
            )
        check_unit_target(target)
    return ace_of_bins(sum_p, sum_y, weight, target, soft, empty_weight, ignore_empty_classes).to(probs.dtype)
