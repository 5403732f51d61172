"""Spatially-aware uncertainty metrics: BUC, BA-ECE and SPACE (Zeevi et al., Sec. 3).

Voxel-wise metrics (AUROC, ECE, ...) give the same score to an uncertainty map that scatters its mass at
random and to one that concentrates it along the anatomical boundaries where errors live (Zeevi et al., Fig. 1).
The three metrics here see the difference. With uncertainty ``u(x)`` (larger = less confident), predicted
and reference label maps ``P``, ``T``, error ``e(x) = [P(x) != T(x)]`` and distances in mm
(see :mod:`monai_unc.metrics.boundary` for the boundary and distance definitions):

**BUC** (Sec. 3.1), boundary uncertainty concentration, higher is better::

    R      = {x : d_P(x) <= w}                  w in mm; default HD95(P > 0, T > 0), at least max(spacing)*
    BUC    = mu_R / (mu_R + mu_notR)            mu_R, mu_notR: mean u inside / outside R

**BA-ECE** (Sec. 3.2), boundary-aware expected calibration error, lower is better::

    bands  b_i = {x : d_T(x) in [t_i, t_{i+1})},  t = numpy.linspace(0, d_max, K + 1), the last band closed,
             d_max = max_x d_T(x) unless ``max_distance`` is given (voxels beyond it are left out)
    w_i   ~ 1 / (mean_{b_i} d_T + mean(spacing)* / 2), normalised to sum 1 over the non-empty bands
    BA-ECE = sum_i w_i | mean_{b_i} u - mean_{b_i} e |

**SPACE** (Sec. 3.3), spatially-aware calibration error, lower is better::

    SPACE  = mean_x | (G_sigma * (U - E))(x) |    (= mean |G*U - G*E|, G is linear: one filter pass)

``*``: over the axes with more than one voxel. An axis of one voxel (a 2D slice stored as ``(1, H, W)``) carries no
distance, so its spacing (a slice thickness) enters none of the three metrics.

Distance ties: a distance within a relative ``TIE_RTOL = 1e-6`` of ``w`` or of a band edge ``t_i`` counts as
equal to it (``d <= w (1 + 1e-6)``; band ``i`` holds ``t_i (1 - 1e-6) <= d < t_{i+1} (1 - 1e-6)``), so that voxels
exactly one coarse voxel away from the boundary fall inside the default width ``max(spacing)`` whatever the
rounding of the distance transform.

SPACE uses a Gaussian of standard deviation ``sigma`` mm per axis (``sigma / spacing`` voxels), truncated at
``truncate = 4`` standard deviations, and scipy's ``mode='reflect'`` boundary handling. A kernel longer than the
axis (and than 4096 voxels on the CPU) is folded onto it, the reflected extension being periodic: one matrix product,
equal to scipy's passes up to the order of the float64 additions, instead of a kernel of ``2 * radius + 1`` taps
(a sigma of 1e7 voxels needed gigabytes). Radii beyond ``2**26`` voxels are refused (``ValueError``).

Shapes: ``uncertainty`` is ``(B, 1, *spatial)`` or ``(*spatial)`` (one case, ``B = 1``), 2D or 3D; every
function returns one value per case, ``(B,)``, whatever the input shape (``(1,)`` for one unbatched map).
``pred`` and ``target`` are label maps ``(B, *spatial)``, ``(B, 1, *spatial)`` or ``(*spatial)``; a channel
dimension with ``C >= 2`` (probabilities or one-hot) is reduced by argmax; channels in [0, 1] that do not sum to 1
(overlapping region masks, sigmoid probabilities: multi-label) are refused, score each region as a binary map.
So are integer channels other than a 0 / 1 one-hot map (label maps stacked along the channel axis, which argmax would
turn into a channel index) and a one-hot map whose channels are all 0 outside a box (the zero padding of an inverted
crop cannot be told from a one-hot map without its background channel; pass a label map). Zero padding around class
probabilities that sum to 1 inside their box is read as background.
Multi-class maps use the all-label boundary. Inputs may be numpy arrays or torch tensors (CPU or CUDA); per-case results
are numpy float64 for numpy input and float64 tensors on the input's device for torch input.

Degenerate cases return NaN with a ``UserWarning``: no boundary in the map a metric needs (empty or full
masks: ``pred`` for BUC, ``target`` for BA-ECE), a boundary region covering the whole volume, zero
uncertainty everywhere (BUC), a constant map with ``normalize=True`` (BA-ECE). A constant positive
uncertainty gives BUC = 0.5 exactly (no concentration), which is a valid value, not a degenerate one.

The ``CumulativeIterationMetric`` classes that wrap these functions for MONAI workflows live in :mod:`.spatial_metric`
(this module imports no MONAI; ``monai_unc.metrics.spatial.BoundaryAwareECEMetric`` and the others still resolve).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from scipy import ndimage

from .._lazy import lazy_attributes
from .._utils import (
    ArrayLike,
    argmax,
    case_spacings,
    check_bool,
    check_class_space,
    check_exclusive_channels,
    check_finite,
    check_labels,
    holds_bool,
    holds_non_real,
    like_input,
    num_threads,
    once_per_call,
    per_axis_mm,
    real_number,
    say_warning,
    thread_map,
    to_numpy,
    to_tensor,
    warn_nan,
)
from .boundary import (
    available_backends,
    distance_to_boundary,
    distance_to_mask,
    foreground_edges,
    hausdorff_distance,
    hd95,
    label_boundary,
    scale_spacing,
    spacing_exponent,
    times_power_of_two,
)

if TYPE_CHECKING:  # loaded on first access (module ``__getattr__`` below; it imports MONAI)
    from .spatial_metric import (
        BoundaryAwareECEMetric,
        BoundaryUncertaintyConcentrationMetric,
        SpatialCalibrationErrorMetric,
    )

__all__ = [
    "boundary_uncertainty_concentration",
    "boundary_aware_ece",
    "spatial_calibration_error",
    "TIE_RTOL",
    # the MONAI metric class(es), loaded on first access (``from ... import *`` gets them as before the move)
    "BoundaryUncertaintyConcentrationMetric",
    "BoundaryAwareECEMetric",
    "SpatialCalibrationErrorMetric",
    # re-exported boundary helpers
    "label_boundary",
    "foreground_edges",
    "distance_to_boundary",
    "distance_to_mask",
    "hd95",
    "available_backends",
]

SpacingLike = float | Sequence[float] | np.ndarray
#: the array types of the kernels: numpy for CPU input, a tensor for CUDA input
Array = np.ndarray | torch.Tensor

#: relative tolerance for distance ties: a distance within ``TIE_RTOL`` (relative) of the BUC width or of a
#: BA-ECE band edge counts as equal to it. Grid distances often coincide exactly with these thresholds (the
#: default width ``max(spacing)`` is the distance to the next voxel along the coarsest axis), and float
#: distance transforms disagree in the last bits (float32 ones, such as the ``edt`` package's, by ~1e-7), so
#: an exact comparison would make the result depend on the backend.
TIE_RTOL = 1e-6

# --------------------------------------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------------------------------------


def _split_uncertainty(uncertainty: Any) -> tuple[Array, bool]:
    """``(cases, *spatial)`` float64 copy of the uncertainty (numpy, or a CUDA tensor) and whether batched.

    Any real dtype: bfloat16 (autocast inference) and numpy's longdouble are read as float64, the precision the metrics
    compute in; a complex map is refused (its imaginary part would be dropped).
    """
    if isinstance(uncertainty, np.ndarray) and uncertainty.dtype.kind == "f" and uncertainty.dtype.itemsize > 8:
        uncertainty = uncertainty.astype(np.float64)  # longdouble: torch has no such dtype
    u = to_tensor(uncertainty, "uncertainty").detach()  # a map computed in a training step may require grad
    if u.is_complex():
        raise TypeError(f"uncertainty must be a real-valued map, got dtype {u.dtype}")
    if u.ndim in (4, 5) and u.shape[1] == 1:
        cases, batched = u[:, 0], True
    elif u.ndim in (2, 3):
        cases, batched = u[None], False
    else:
        raise ValueError(
            "uncertainty must have shape (B, 1, *spatial) or (*spatial) with 2 or 3 spatial dimensions, "
            f"got {tuple(u.shape)}"
        )
    if cases.numel() == 0:
        raise ValueError(f"uncertainty is empty (shape {tuple(u.shape)})")
    if cases.device.type == "cuda":
        out: Array = cases.to(torch.float64)
    else:  # a float64 copy: the kernels write into it
        out = to_numpy(cases, "uncertainty").astype(np.float64)
    # a sum of huge finite values overflows (to inf, or NaN from inf - inf): the full check tells them apart
    with np.errstate(over="ignore", invalid="ignore"):
        finite = math.isfinite(float(out.sum()))  # one cheap pass; the full check only names the problem
    if not finite:
        check_finite(torch.as_tensor(out), "uncertainty")
    return out, batched


#: how far outside [0, 1] an uncertainty map compared with error rates may reach before BA-ECE and SPACE warn: a map on
#: [0, 1] rounded to bfloat16 reaches 1 + 2**-7 (and a mutual information rounded below 0, -1e-8 or so); an entropy in
#: nats of 3 or more classes reaches log 3 = 1.0986
_UNIT_SCALE_SLACK = 0.01


def _warn_off_scale(u: Array, metric: str) -> None:
    """Warn when the uncertainty leaves [0, 1], the scale of the error rates BA-ECE and SPACE compare it with.

    An entropy in nats (the ``predictive_entropy`` of an inferer built without ``normalize=True``, which the ignite
    handlers read by default) reaches ``log C``: 1.386 for 4 classes, and BA-ECE came out above 1 without a word. A map
    with negative values (a log-scale score, a centred map) was scored without a word too (in earlier versions
    the doubled gap ``|u - e|`` of a map shifted by -0.5 read as a poorly calibrated one).
    """
    top, low = float(u.max()), float(u.min())
    if top > 1.0 + _UNIT_SCALE_SLACK or low < -_UNIT_SCALE_SLACK:
        above = top > 1.0 + _UNIT_SCALE_SLACK
        where = f"{top:.4g}, above 1" if above else f"{low:.4g}, below 0"
        say_warning(  # a metric class's call says it once, naming its most extreme case (key and rank)
            f"{metric}: the uncertainty reaches {where}; {metric} compares it with error rates in [0, 1], "
            "so pass a map on that scale (entropy or mutual information divided by log C, 1 - max p)"
            + (" or normalize=True" if metric == "BA-ECE" else ""),
            UserWarning,
            stacklevel=3,
            key=(metric, "off scale", above),
            rank=top if above else -low,
        )


def _split_labels(x: Any, name: str, n_cases: int, spatial: tuple, batched: bool, cuda: Any) -> Array:
    """Label maps as ``(cases, *spatial)`` integers; a channel axis with C >= 2 is reduced by argmax."""
    t = to_tensor(x, name).detach()
    if t.is_complex():
        raise TypeError(f"{name} must be a real-valued label map (or probabilities), got dtype {t.dtype}")
    nsp = len(spatial)
    lead = (n_cases,) if batched else ()
    shape = tuple(t.shape)
    if shape == (*lead, *spatial):
        out = t
    elif t.ndim == len(lead) + 1 + nsp and shape[: len(lead)] == lead and shape[len(lead) + 1 :] == spatial:
        ch = len(lead)
        if shape[ch] == 1:
            out = t.squeeze(ch)
        else:
            if t.is_floating_point():
                check_finite(t, name)
            check_exclusive_channels(t, name, ch)
            out = argmax(t, dim=ch)
    else:
        want = f"({n_cases}, *{spatial}) or ({n_cases}, C, *{spatial})" if batched else f"{spatial} or (C, *{spatial})"
        raise ValueError(f"{name} must be a label map of shape {want} matching uncertainty, got {shape}")
    if cuda is None and out.device.type == "cpu" and not out.is_floating_point() and out.dtype != torch.bool:
        # integer labels on the CPU: validate in numpy and keep the dtype (no int64 copy, no torch threads)
        arr = out.numpy()
        if arr.size == 0:
            raise ValueError(f"{name} is empty (shape {arr.shape})")
        if np.issubdtype(arr.dtype, np.signedinteger) and int(arr.min()) < 0:
            raise ValueError(f"{name} must be non-negative class indices, got minimum {int(arr.min())}")
        return arr if batched else arr[None]
    out = check_labels(out, name)  # floats (integral values required), bools, CUDA tensors
    if not batched:
        out = out[None]
    return out.to(cuda) if cuda is not None else out.cpu().numpy()


def _class_channels(x: Any, n_cases: int, spatial: tuple, batched: bool) -> int | None:
    """The number of class channels ``C >= 2`` of a map with a channel axis (probabilities, one-hot), else None."""
    shape = tuple(getattr(x, "shape", np.shape(x)))
    lead = (n_cases,) if batched else ()
    if len(shape) == len(lead) + 1 + len(spatial) and shape[len(lead) + 1:] == spatial and shape[len(lead)] >= 2:
        return int(shape[len(lead)])
    return None


def _prepare(uncertainty: Any, pred: Any, target: Any) -> tuple[Array, Array, Array, bool]:
    """Validated ``(cases, *spatial)`` arrays: numpy for CPU input, CUDA tensors for CUDA input.

    Labels must lie in the classes ``0 .. C-1`` of a map given with ``C`` class channels
    (:func:`~monai_unc._utils.check_class_space`: an ignore label was scored as error voxels and boundaries).
    """
    u, batched = _split_uncertainty(uncertainty)
    spatial = tuple(u.shape[1:])
    cuda = u.device if isinstance(u, torch.Tensor) else None
    p = _split_labels(pred, "pred", u.shape[0], spatial, batched, cuda)
    t = _split_labels(target, "target", u.shape[0], spatial, batched, cuda)
    channels = tuple(_class_channels(x, u.shape[0], spatial, batched) for x in (pred, target))
    check_class_space(channels, (p, t),
                      hint="an ignore label? mark such voxels another way: these metrics score every voxel")
    return u, p, t, batched


def _finish(values: list[float], reference: Any) -> ArrayLike:
    """One value per case ``(B,)`` float64 (``B = 1`` for an unbatched map) in the library of ``reference``."""
    return like_input(np.asarray(values, dtype=np.float64), reference)


def _stack_like(items: list[Array], reference: Any) -> ArrayLike:
    """Per-case arrays stacked along a new case axis, in the library (and device) of ``reference``."""
    out: Array = torch.stack(items) if isinstance(items[0], torch.Tensor) else np.stack(items)
    return like_input(out, reference)


def _like(x: Array, like: Array) -> Array:
    """``x`` in the array type of ``like`` (numpy, or a tensor on ``like``'s device)."""
    if isinstance(like, torch.Tensor):
        return torch.as_tensor(x, device=like.device)
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


def _f64(x: Array) -> Array:
    return x.to(torch.float64) if isinstance(x, torch.Tensor) else x.astype(np.float64)


def check_width(width: Any) -> None:
    if width is not None and not (math.isfinite(real_number(width, "width", ValueError)) and float(width) >= 0):
        raise ValueError(f"width must be a non-negative number of mm, got {width}")


def check_bands(n_bands: Any, max_distance: Any) -> None:
    if not math.isfinite(real_number(n_bands, "n_bands", ValueError)) or int(n_bands) != n_bands or n_bands < 1:
        raise ValueError(f"n_bands must be a positive integer, got {n_bands}")
    if max_distance is not None and not (
        math.isfinite(real_number(max_distance, "max_distance", ValueError)) and float(max_distance) >= 0
    ):
        raise ValueError(f"max_distance must be a non-negative number of mm, got {max_distance}")


def check_truncate(truncate: Any) -> None:
    if not (math.isfinite(real_number(truncate, "truncate", ValueError)) and float(truncate) > 0):
        raise ValueError(f"truncate must be a positive number of standard deviations, got {truncate}")


def check_sigma_values(sigma: Any) -> None:
    """Each value of ``sigma`` must be a finite non-negative number of mm.

    One number, or one per axis (their count is checked against the image's axes where it is used).
    """
    if isinstance(sigma, (torch.Tensor, np.ndarray)):
        sigma = sigma.tolist()
    values = list(sigma) if isinstance(sigma, (list, tuple)) else [sigma]
    if not values or not all(math.isfinite(real_number(v, "sigma", ValueError)) and float(v) >= 0 for v in values):
        raise ValueError(f"sigma must be non-negative and finite (mm), got {sigma!r}")


def check_spacing_option(spacing: Any) -> None:
    """The ``spacing`` of a metric's constructor: ``None``, one number, one per spatial axis, or one row per case.

    What :func:`~monai_unc._utils.case_spacings` takes at every case, checked before the first one (only the
    count of axes, 2 or 3, and of rows wait for the image and the batch).

    Raises:
        ValueError: not numbers, numbers that are not positive and finite, or not 2 or 3 per row.
    """
    if spacing is None:
        return
    shape_error = (
        f"spacing must be a number, one number per spatial axis (2 or 3) or one row of those per case (mm), "
        f"got {spacing!r}"
    )
    if holds_bool(spacing) or holds_non_real(spacing):  # True is not 1 mm, nor "2" 2 mm
        raise ValueError(shape_error)
    try:
        arr = np.asarray(spacing.detach().cpu() if isinstance(spacing, torch.Tensor) else spacing, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(shape_error) from None
    if arr.size == 0 or arr.ndim > 2 or (arr.ndim >= 1 and arr.shape[-1] not in (2, 3)):
        raise ValueError(shape_error)
    if not bool(np.all(np.isfinite(arr) & (arr > 0))):
        raise ValueError(f"spacing must be positive and finite (mm per axis), got {spacing!r}")


def _sigma_mm(sigma: float | Sequence[float], ndim: int) -> tuple[float, ...]:
    sig = per_axis_mm(sigma, ndim, "sigma", count_note=", mm")
    check_sigma_values(sig)
    return sig


# --------------------------------------------------------------------------------------------------------
# Gaussian smoothing (scipy semantics: radius int(truncate * sigma + 0.5), mode 'reflect')
# --------------------------------------------------------------------------------------------------------

#: kernel radius (voxels) beyond which the numpy path folds the kernel onto the axis (:func:`_folded_kernel`) where it
#: is longer than the axis too; up to it, the passes are scipy's own (bit-identical). 8193 taps cost every voxel that
#: many multiply-adds, and scipy allocates the whole kernel (sigma = 1e7 voxels: 640 MB, then a MemoryError)
_FOLD_MIN_RADIUS = 2**12
#: the largest kernel radius computed (voxels): its weights cost a second or so; a Gaussian that wide averages any
#: volume (the result tends to the mean as ``1 / sigma``), and beyond it ``k**2`` leaves float64's exact integers
_MAX_RADIUS = 2**26


def _kernel_radius(sigma: float, truncate: float, ax: int) -> int:
    """The kernel radius ``int(truncate * sigma + 0.5)`` (scipy's) of a Gaussian of ``sigma`` voxels along ``ax``.

    Raises:
        ValueError: a radius beyond :data:`_MAX_RADIUS`.
    """
    r = int(truncate * sigma + 0.5)
    if r > _MAX_RADIUS:
        raise ValueError(
            f"sigma is {sigma:.4g} voxels along axis {ax} (sigma / spacing): with truncate={truncate:g} its kernel "
            f"radius of {r} voxels is beyond the {_MAX_RADIUS} computed; a Gaussian that wide averages the whole volume"
        )
    return r


def _folded_kernel(n: int, sigma: float, radius: int) -> np.ndarray:
    """The Gaussian of scipy's ``gaussian_filter1d(mode='reflect')`` on an axis of ``n`` voxels as an ``(n, n)`` matrix.

    The reflected extension (``d c b a | a b c d | d c b a``) is periodic with period ``2n``: output ``i`` is ``sum_c
    S[c] x[refl(i + c)]`` with ``S[c]`` the sum of the kernel's weights at the offsets ``k = c (mod 2n)``, ``|k| <=
    radius``. The weights are scipy's (``exp(-0.5 / sigma**2 * k**2)``, divided by their sum), added up in slabs of
    ``2n`` offsets, so the memory is ``O(n**2)`` and the time ``O(radius)`` whatever ``radius``; the result equals
    scipy's up to the order of the float64 additions.
    """
    period = 2 * n
    coef = -0.5 / (sigma * sigma)
    half = np.zeros(period)  # S over the offsets k > 0, at k mod 2n
    rows = max(1, (1 << 18) // period)  # slabs of about 2**18 offsets (2 MB each array)
    for first in range(1, radius + 1, rows * period):
        k = np.arange(first - 1, min(first - 1 + rows * period, radius + 1), dtype=np.float64)  # a multiple of 2n first
        w = np.exp(coef * (k * k))  # k * k is exact: k <= _MAX_RADIUS = 2**26
        if first == 1:
            w[0] = 0.0  # k = 0 is added once below
        w = np.concatenate([w, np.zeros(-len(w) % period)])
        half += w.reshape(-1, period).sum(axis=0)
    folded = half + np.roll(half[::-1], 1)  # the offsets -k, at (2n - k mod 2n) mod 2n
    folded[0] += 1.0  # k = 0: exp(0)
    folded /= folded.sum()
    i = np.arange(n)[:, None]
    j = _reflect(i + np.arange(period)[None, :], n)
    flat = np.bincount((i * n + j).ravel(), weights=np.broadcast_to(folded, j.shape).ravel(), minlength=n * n)
    return flat.reshape(n, n)


def _filter_axis(src: np.ndarray, dst: np.ndarray, ax: int, sigma: float, truncate: float, threads: int) -> None:
    """One 1-D Gaussian pass along ``ax`` from ``src`` into ``dst``, in slabs along another axis, threaded.

    A kernel longer than the axis and than :data:`_FOLD_MIN_RADIUS` is folded onto the axis (:func:`_folded_kernel`):
    one matrix product.
    """
    n = src.shape[ax]
    radius = _kernel_radius(sigma, truncate, ax)
    if radius > max(n, _FOLD_MIN_RADIUS):
        lead = math.prod(src.shape[:ax])
        dst[...] = np.matmul(_folded_kernel(n, sigma, radius), src.reshape(lead, n, -1)).reshape(dst.shape)
        return
    other = [a for a in range(src.ndim) if a != ax]
    if threads <= 1 or not other or src.size < (1 << 20):  # threads only pay off on large volumes
        ndimage.gaussian_filter1d(src, sigma, axis=ax, truncate=truncate, mode="reflect", output=dst)
        return
    split = max(other, key=lambda a: src.shape[a])
    bounds = np.linspace(0, src.shape[split], min(threads, src.shape[split]) + 1).astype(int)
    slabs = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        sl = [slice(None)] * src.ndim
        sl[split] = slice(int(lo), int(hi))
        slabs.append(tuple(sl))

    def slab(sl: tuple) -> None:
        ndimage.gaussian_filter1d(src[sl], sigma, axis=ax, truncate=truncate, mode="reflect", output=dst[sl])

    thread_map(slab, slabs, len(slabs))  # one pool per thread count, shared by the calls


def _gaussian_scipy(x: np.ndarray, sigmas: tuple, truncate: float, threads: int) -> np.ndarray:
    """``scipy.ndimage.gaussian_filter(x, sigmas, truncate=truncate, mode='reflect')``, multi-threaded.

    The same sequence of 1-D passes as scipy (axis 0 first), each split into slabs along another axis that
    run in threads (scipy releases the GIL), so the result is bit-identical to scipy's. ``x`` is consumed
    (used as a work buffer).
    """
    work = [x, np.empty_like(x)]
    cur = 0
    for ax, s in enumerate(sigmas):
        if s <= 1e-15:  # scipy skips these axes too
            continue
        _filter_axis(work[cur], work[1 - cur], ax, float(s), truncate, threads)
        cur = 1 - cur
    return work[cur]


def _reflect(j: Any, n: int) -> Any:
    """The voxel at positions ``j`` (integers, numpy or torch, any sign) of scipy's 'reflect' extension of ``n`` voxels.

    The extension ``d c b a | a b c d | d c b a`` is periodic with period ``2n``.
    """
    j = j % (2 * n)  # floor modulo, numpy and torch alike: in [0, 2n)
    return j + (j >= n) * (2 * n - 1 - 2 * j)


def _reflect_index(n: int, radius: int, device: torch.device) -> torch.Tensor:
    """Indices of scipy's 'reflect' extension of an axis of ``n`` voxels by ``radius`` on both sides."""
    return _reflect(torch.arange(-radius, n + radius, device=device), n)


def _gaussian_torch(x: torch.Tensor, sigmas: tuple, truncate: float) -> torch.Tensor:
    """The same filter as :func:`_gaussian_scipy` with torch ops (used for CUDA tensors)."""
    out = x
    for ax, s in enumerate(sigmas):
        if s <= 1e-15:
            continue
        r = _kernel_radius(float(s), truncate, ax)
        n = out.shape[ax]
        if r > n:  # folded onto the axis: no padded copy of (n + 2r) per line
            kernel = torch.from_numpy(_folded_kernel(n, float(s), r)).to(device=out.device, dtype=out.dtype)
            out = torch.matmul(out.movedim(ax, -1), kernel.T).movedim(-1, ax)
            continue
        grid = torch.arange(-r, r + 1, dtype=torch.float64, device=x.device)
        k = torch.exp(-0.5 * (grid / s) ** 2)
        k = (k / k.sum()).to(out.dtype)
        padded = out.index_select(ax, _reflect_index(n, r, x.device)).movedim(ax, -1)
        lead = padded.shape[:-1]
        res = torch.nn.functional.conv1d(padded.reshape(-1, 1, n + 2 * r), k.view(1, 1, -1))
        out = res.reshape(*lead, n).movedim(-1, ax)
    return out.contiguous()


def _gaussian(x: Array, sigmas: tuple, truncate: float) -> Array:
    """Gaussian filter with scipy's semantics; numpy input is consumed as a work buffer."""
    if isinstance(x, np.ndarray):
        return _gaussian_scipy(np.ascontiguousarray(x), sigmas, truncate, num_threads())
    return _gaussian_torch(x, sigmas, truncate)


# --------------------------------------------------------------------------------------------------------
# per-case kernels (one formula each)
# --------------------------------------------------------------------------------------------------------


def _grid_steps(spacing: tuple, shape: tuple) -> tuple[float, ...]:
    """The spacings of the axes with more than one voxel: the steps a distance in the grid can take.

    An axis of one voxel (a 2D slice stored as a volume ``(1, H, W)`` or ``(H, W, 1)``, e.g. one thick NIfTI slice)
    carries no distance: its spacing must not enter BUC's width floor nor the BA-ECE weights (in earlier versions a
    5 mm slice thickness widened BUC's default region around a 0.5 mm grid to 5 mm). All the spacings when every axis
    has one voxel (a single voxel: no boundary, the metrics are NaN before they get here).
    """
    steps = tuple(float(s) for s, n in zip(spacing, shape) if n > 1)
    return steps or tuple(float(s) for s in spacing)


def _buc_case(u: Array, p: Array, t: Array, spacing: tuple, width: float | None, backend: str) -> float:
    """BUC of one case; a numpy ``u`` is consumed (the caller's own float64 copy, see :func:`_split_uncertainty`)."""
    boundary = label_boundary(p)
    if not bool(boundary.any()):
        return warn_nan("BUC: the predicted label map has no boundary (empty or full mask); BUC is undefined", 4)
    if width is None:
        hd = hausdorff_distance(p > 0, t > 0, spacing, 95.0, warn=False, backend=backend)
        if not math.isfinite(hd):
            return warn_nan(
                "BUC: the default width HD95(pred, target) is not finite (an empty foreground in the prediction or "
                "the reference); BUC is undefined (in Python an explicit width= defines it)", 4
            )
        w = max(hd, max(_grid_steps(spacing, tuple(p.shape))))  # at least one step of the grid
    else:
        w = float(width)
    inside = distance_to_mask(boundary, spacing, backend) <= w * (1.0 + TIE_RTOL)
    n_in, n = int(inside.sum()), math.prod(inside.shape)
    if n_in == n:
        return warn_nan(f"BUC: the boundary region (width {w:.4g} mm) covers the whole volume; BUC is undefined", 4)
    top = float(u.max())
    if top * n >= 2.0**1000 or 0 < top < 2.0**-900:
        # BUC is scale invariant: a power of two (exact) brings the map to [0.5, 1) where its sums neither overflow
        # (a map of 1e307 gave NaN) nor lose the bits of subnormal values; other maps are not touched
        power = -math.frexp(top)[1]  # up to 1074 in magnitude: two factors, each a finite float
        u = u * 2.0 ** (power // 2) * 2.0 ** (power - power // 2)
    # the means as the minimum plus the mean deviation from it: the deviations of a constant map are exactly 0, so
    # both means are exactly that constant and BUC exactly 0.5 (sums of n copies of 0.1 divided by n are not 0.1:
    # 0.49999999999999967, and two constant maps were told apart by compare_uncertainty_maps)
    lo = float(u.min())
    dev = np.subtract(u, lo, out=u) if isinstance(u, np.ndarray) else u - lo  # numpy: the function's own copy
    total = float(dev.sum())
    sum_in = float(dev[inside].sum())
    mu_in = lo + sum_in / n_in
    mu_out = lo + (total - sum_in) / (n - n_in)
    if mu_in + mu_out == 0:
        return warn_nan("BUC: the uncertainty is zero everywhere; BUC is undefined", 4)
    return mu_in / (mu_in + mu_out)


def _band_index(d: Array, edges: np.ndarray) -> Array:
    """Band of each distance: the number of interior edges ``t_i (1 - TIE_RTOL)`` at or below it, in [0, K-1]."""
    interior = edges[1:-1] * (1.0 - TIE_RTOL)
    if isinstance(d, torch.Tensor):
        return torch.searchsorted(torch.from_numpy(interior).to(d.device), d, right=True)
    return np.searchsorted(interior, d, side="right")


def _band_sums(idx: Array, w: Array, k: int) -> Array:
    """The sum of ``w`` in each of the ``k`` bands ``idx`` (float64).

    Tensors (CUDA) with ``index_add_``, which PyTorch computes deterministically under
    ``torch.use_deterministic_algorithms(True)``: ``torch.bincount`` with weights has no deterministic CUDA
    implementation and raised ``RuntimeError`` there (MONAI's ``set_determinism(use_deterministic_algorithms=True)``).
    """
    if isinstance(idx, torch.Tensor):
        return torch.zeros(k, dtype=torch.float64, device=idx.device).index_add_(0, idx, _f64(w))
    return np.bincount(idx, weights=w, minlength=k)


def _empty_bands(k: int) -> dict[str, np.ndarray]:
    nan = np.full(k, np.nan)
    return {"edges": np.full(k + 1, np.nan), "distance": nan, "uncertainty": nan.copy(), "error": nan.copy(),
            "weight": np.zeros(k), "count": np.zeros(k, dtype=np.int64)}  # fmt: skip


def _baece_case(
    u: Array,
    p: Array,
    t: Array,
    spacing: tuple,
    n_bands: int,
    max_distance: float | None,
    normalize: bool,
    backend: str,
) -> tuple[float, dict[str, Array]]:
    k = n_bands
    boundary = label_boundary(t)
    if not bool(boundary.any()):
        return warn_nan(
            "BA-ECE: the target label map has no boundary (empty or full mask); undefined", 4
        ), _empty_bands(k)
    if normalize:
        lo, hi = float(u.min()), float(u.max())
        if hi == lo:
            return warn_nan("BA-ECE: normalize=True on a constant uncertainty map; undefined", 4), _empty_bands(k)
        if not math.isfinite(hi - lo):
            # a finite map whose range overflows float64 (-1.7e308 to 1.7e308) gave NaN: halved (exact) first
            u, lo, hi = u * 0.5, lo * 0.5, hi * 0.5
        u = (u - lo) / (hi - lo)
    # distances in units of 2**ex mm (exact): BA-ECE does not depend on the unit, and for a spacing near the float64
    # limits the band sums and the weights 1 / (mean d + mean(spacing) / 2) overflowed (a spacing of 1e-308 mm scored 0)
    ex = spacing_exponent(spacing)
    spacing = scale_spacing(spacing, ex)
    d = distance_to_mask(boundary, spacing, backend).reshape(-1)
    d_max = float(d.max()) if max_distance is None else times_power_of_two(float(max_distance), -ex)
    edges = np.linspace(0.0, d_max, k + 1)
    e = (p != t).reshape(-1)
    uu = u.reshape(-1)
    if max_distance is not None:
        keep = d <= d_max * (1.0 + TIE_RTOL)
        d, e, uu = d[keep], e[keep], uu[keep]
    if d_max == 0:
        idx = d.new_zeros(d.shape, dtype=torch.int64) if isinstance(d, torch.Tensor) else np.zeros(d.shape, np.int64)
    else:
        idx = _band_index(d, edges)
    lib = torch if isinstance(d, torch.Tensor) else np
    # per band: voxel count, error count (exact integers), sums of distance and uncertainty (float64)
    count = lib.bincount(idx, minlength=k)
    n_err = lib.bincount(idx[e], minlength=k)
    sum_d = _band_sums(idx, d, k)
    sum_u = _band_sums(idx, uu, k)
    full = count > 0
    cnt = lib.where(full, _f64(count), 1.0)
    mean_d, mean_u, mean_e = (lib.where(full, s_ / cnt, float("nan")) for s_ in (sum_d, sum_u, _f64(n_err)))
    half_step = 0.5 * float(np.mean(_grid_steps(spacing, tuple(t.shape))))  # half a voxel: a band of d = 0 is finite
    raw = lib.where(full, 1.0 / (lib.where(full, mean_d, 0.0) + half_step), 0.0)
    weight = raw / raw.sum()
    gap = abs(mean_u[full] - mean_e[full])
    value = float((weight[full] * gap).sum())
    edges = times_power_of_two(edges, ex)  # back to mm
    edges_out = torch.from_numpy(edges).to(d.device) if lib is torch else edges
    bands = {"edges": edges_out, "distance": times_power_of_two(mean_d, ex), "uncertainty": mean_u, "error": mean_e,
             "weight": weight, "count": count}  # fmt: skip
    return value, bands


def _mean_abs(x: Array) -> float:
    """``mean |x|`` without allocating a second full-size array (slabs through a small buffer).

    A map whose sum of absolute values overflows float64 (values near 1e307) is summed scaled by a power of two
    (exact): its SPACE came out inf.
    """
    if isinstance(x, torch.Tensor):
        top = float(x.abs().max())
        scale = 2.0 ** -math.frexp(top)[1] if top * x.numel() >= 2.0**1000 else 1.0
        return float((x.abs() * scale).mean()) / scale
    flat = x.reshape(-1)
    top = max(abs(float(flat.max())), abs(float(flat.min())))
    scale = 2.0 ** -math.frexp(top)[1] if top * flat.size >= 2.0**1000 else 1.0
    step = 1 << 18
    buf = np.empty(min(step, flat.size))
    total = 0.0
    for start in range(0, flat.size, step):
        chunk = flat[start : start + step]
        np.abs(chunk, out=buf[: chunk.size])
        if scale != 1.0:
            buf[: chunk.size] *= scale
        total += float(buf[: chunk.size].sum())
    return total / flat.size / scale


def _space_case(u: Array, p: Array, t: Array, spacing: tuple, sigma: tuple, truncate: float) -> tuple[float, Array]:
    if isinstance(u, np.ndarray):  # u is this function's own float64 copy (see _split_uncertainty)
        diff = np.subtract(u, p != t, out=u)
    else:
        diff = u - (p != t).to(torch.float64)
    smoothed = _gaussian(diff, tuple(s / sp for s, sp in zip(sigma, spacing)), truncate)
    return _mean_abs(smoothed), smoothed


# --------------------------------------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------------------------------------


@once_per_call
def boundary_uncertainty_concentration(
    uncertainty: ArrayLike,
    pred: ArrayLike,
    target: ArrayLike,
    spacing: SpacingLike = 1.0,
    width: float | None = None,
    backend: str = "auto",
) -> ArrayLike:
    """Boundary uncertainty concentration, BUC (Zeevi et al. Sec. 3.1); in [0, 1], higher is better.

    ``R = {x : d_pred(x) <= w}`` is the band of width ``w`` mm around the predicted (all-label) boundary and
    ``BUC = mu_R / (mu_R + mu_notR)`` with ``mu`` the mean uncertainty inside / outside ``R``. 0.5
    means no concentration (e.g. a constant map), values near 1 mean the uncertainty sits at the predicted boundary.
    Distances within a relative ``TIE_RTOL`` (1e-6) of ``w`` count as inside.

    Reference: Zeevi, Lieffrig, Staib, Onofrey: *Spatially-Aware Evaluation of Segmentation Uncertainty*.

    Args:
        uncertainty: non-negative uncertainty ``(B, 1, *spatial)`` or ``(*spatial)``, 2D or 3D.
        pred: predicted label map (or probabilities / one-hot, reduced by argmax), see the module docstring.
        target: reference label map, same conventions; used only for the default width.
        spacing: voxel size in mm per axis (scalar for isotropic), or one row per case.
        width: band width ``w`` in mm; default ``max(HD95(pred > 0, target > 0), max(spacing))`` with HD95
            as MONAI computes it (:func:`~monai_unc.metrics.boundary.hd95`) and the largest spacing of an axis with
            more than one voxel.
        backend: distance-transform backend, see :func:`~monai_unc.metrics.boundary.distance_to_boundary`.

    Returns:
        one value per case ``(B,)`` float64, ``(1,)`` for an unbatched map (numpy, or torch on the input's
        device). NaN with a ``UserWarning`` when ``pred`` has no boundary, the default width is infinite (empty
        target), ``R`` covers the whole volume, or the uncertainty is zero everywhere (each warning once for the
        call, naming how many cases, at the caller's line).

    Raises:
        ValueError: negative or non-finite uncertainty, shapes that do not match, bad spacing or width.

    Example:
        >>> from monai_unc.metrics import boundary_uncertainty_concentration
        >>> import torch
        >>> from monai_unc.metrics import label_boundary
        >>> target = torch.zeros(2, 1, 8, 8, dtype=torch.long)
        >>> target[:, :, 2:6, 2:6] = 1
        >>> pred = target.clone()
        >>> pred[1, :, 2:6, 6] = 1  # case 1: a wrong column
        >>> _ = torch.manual_seed(0)
        >>> uncertainty = 0.5 * label_boundary(pred, spatial_dims=2).float() + 0.1 * torch.rand(2, 1, 8, 8)
        >>> boundary_uncertainty_concentration(uncertainty, pred, target, width=1.0).round(decimals=4)
        tensor([0.8700, 0.8728], dtype=torch.float64)
    """
    u, p, t, _ = _prepare(uncertainty, pred, target)
    if bool((u < 0).any()):
        raise ValueError("uncertainty must be non-negative for BUC (a ratio of mean uncertainties)")
    check_width(width)
    sps = case_spacings(spacing, u.shape[0], u.ndim - 1)
    vals = [_buc_case(u[i], p[i], t[i], sps[i], width, backend) for i in range(u.shape[0])]
    return _finish(vals, uncertainty)


@once_per_call
def boundary_aware_ece(
    uncertainty: ArrayLike,
    pred: ArrayLike,
    target: ArrayLike,
    spacing: SpacingLike = 1.0,
    n_bands: int = 10,
    max_distance: float | None = None,
    normalize: bool = False,
    return_bands: bool = False,
    backend: str = "auto",
) -> ArrayLike | tuple[ArrayLike, dict[str, ArrayLike]]:
    """Boundary-aware expected calibration error, BA-ECE (Zeevi et al. Sec. 3.2); lower is better.

    Voxels are grouped into ``n_bands`` equal-width bands of distance (mm) to the reference (all-label) boundary,
    ``[t_i, t_{i+1})`` with ``t = numpy.linspace(0, d_max, n_bands + 1)`` (the last band closed; distances within
    a relative ``TIE_RTOL`` of an edge count as on it); per band the mean uncertainty is compared with the error
    rate ``mean [pred != target]``: ``BA-ECE = sum_i w_i |mean_i u - mean_i e|`` with ``w_i`` proportional to
    ``1 / (mean_i d + mean(spacing) / 2)`` (the mean over the axes with more than one voxel), normalised over the
    non-empty bands.

    The uncertainty is compared with error rates as is: it should live on a [0, 1] scale (normalised entropy,
    ``1 - max p``, ...); a map that reaches above 1.01 (an entropy in nats) or below -0.01 (a log-scale score) is
    scored with a ``UserWarning``.
    ``normalize=True`` rescales each case's map to [0, 1] by its min and max first.

    Reference: Zeevi, Lieffrig, Staib, Onofrey: *Spatially-Aware Evaluation of Segmentation Uncertainty*.

    Args:
        uncertainty: ``(B, 1, *spatial)`` or ``(*spatial)``, 2D or 3D.
        pred: predicted label map (or probabilities / one-hot, reduced by argmax), ``(B, 1, *spatial)`` or
            ``(*spatial)``; see the module docstring.
        target: reference label map, same conventions.
        spacing: voxel size in mm per axis, or one row per case.
        n_bands: number of distance bands ``K`` (default 10).
        max_distance: upper end of the bands in mm; default the largest distance in the case. Voxels
            farther away are left out.
        normalize: min-max rescale the uncertainty of each case to [0, 1] first.
        return_bands: also return the per-band statistics.
        backend: distance-transform backend.

    Returns:
        the values ``(B,)`` (``(1,)`` for an unbatched map); with ``return_bands=True`` a tuple ``(value, bands)``
        where ``bands`` maps ``"edges"`` (K + 1 band edges, mm), ``"distance"`` (mean distance, mm),
        ``"uncertainty"`` (mean uncertainty), ``"error"`` (error rate), ``"weight"`` (0 for empty bands) and
        ``"count"`` to arrays of shape ``(B, K)``; empty bands hold NaN means. NaN with a ``UserWarning`` when
        ``target`` has no boundary, or for a constant map with ``normalize`` (each warning once for the call, naming
        how many cases, at the caller's line).

    Example:
        >>> from monai_unc.metrics import boundary_aware_ece
        >>> import torch
        >>> from monai_unc.metrics import label_boundary
        >>> target = torch.zeros(2, 1, 8, 8, dtype=torch.long)
        >>> target[:, :, 2:6, 2:6] = 1
        >>> pred = target.clone()
        >>> pred[1, :, 2:6, 6] = 1  # case 1: a wrong column
        >>> _ = torch.manual_seed(0)
        >>> uncertainty = 0.5 * label_boundary(pred, spatial_dims=2).float() + 0.1 * torch.rand(2, 1, 8, 8)
        >>> value, bands = boundary_aware_ece(uncertainty, pred, target, n_bands=3, return_bands=True)
        >>> value.round(decimals=4)
        tensor([0.3841, 0.2827], dtype=torch.float64)
        >>> bands["error"].round(decimals=4)
        tensor([[0.0000, 0.0000, 0.0000],
                [0.1429, 0.0000, 0.0000]], dtype=torch.float64)
    """
    check_bands(n_bands, max_distance)
    normalize = check_bool(normalize, "normalize")  # a string "false" (bundle override) is truthy
    return_bands = check_bool(return_bands, "return_bands")
    u, p, t, _ = _prepare(uncertainty, pred, target)
    if not normalize:
        _warn_off_scale(u, "BA-ECE")
    sps = case_spacings(spacing, u.shape[0], u.ndim - 1)
    results = [
        _baece_case(u[i], p[i], t[i], sps[i], int(n_bands), max_distance, normalize, backend) for i in range(u.shape[0])
    ]
    value = _finish([r[0] for r in results], uncertainty)
    if not return_bands:
        return value
    bands = {key: _stack_like([_like(r[1][key], u) for r in results], uncertainty) for key in results[0][1]}
    return value, bands


@once_per_call
def spatial_calibration_error(
    uncertainty: ArrayLike,
    pred: ArrayLike,
    target: ArrayLike,
    spacing: SpacingLike = 1.0,
    sigma: float | Sequence[float] = 2.0,
    truncate: float = 4.0,
    return_map: bool = False,
) -> ArrayLike | tuple[ArrayLike, ArrayLike]:
    """Spatially-aware calibration error, SPACE (Zeevi et al. Sec. 3.3); lower is better.

    ``SPACE = mean_x |(G_sigma * (U - E))(x)|`` with ``E = [pred != target]``: the local (Gaussian-weighted)
    mismatch between uncertainty and error. ``G_sigma`` has standard deviation ``sigma`` mm on
    every axis (``sigma / spacing`` voxels), is truncated at ``truncate`` standard deviations (radius
    ``int(truncate * sigma_vox + 0.5)`` voxels) and extends the volume with scipy's ``mode='reflect'``. The
    filter is linear, so one pass over ``U - E`` replaces the two passes of the definition. Bounded above by
    ``mean |U - E|`` (``sigma = 0``).

    Reference: Zeevi, Lieffrig, Staib, Onofrey: *Spatially-Aware Evaluation of Segmentation Uncertainty*.

    Args:
        uncertainty: ``(B, 1, *spatial)`` or ``(*spatial)``, 2D or 3D, on the scale of an error rate (a map that
            reaches above 1.01, such as an entropy in nats, or below -0.01 is scored with a ``UserWarning``).
        pred: predicted label map (or probabilities / one-hot, reduced by argmax), ``(B, 1, *spatial)`` or
            ``(*spatial)``; see the module docstring.
        target: reference label map, same conventions.
        spacing: voxel size in mm per axis, or one row per case.
        sigma: standard deviation of the Gaussian in mm, scalar or per axis (default 2 mm).
        truncate: kernel radius in standard deviations (default 4, scipy's default).
        return_map: also return the smoothed difference ``G_sigma * (U - E)`` (float64, ``(B, 1, *spatial)``)
            for display.

    Returns:
        the values ``(B,)`` (``(1,)`` for an unbatched map), or ``(value, smoothed_map)`` with
        ``return_map=True``.

    Raises:
        ValueError: bad shapes, spacing, sigma or truncate, or a kernel radius ``truncate * sigma / spacing`` beyond
            ``2**26`` voxels (a Gaussian that wide averages the whole volume; its weights would take seconds).
        TypeError: a non-bool ``return_map``, a complex uncertainty map.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import spatial_calibration_error
        >>> target = torch.zeros(1, 1, 16, 16, dtype=torch.long)
        >>> target[:, :, 4:12, 4:12] = 1
        >>> pred = target.clone()
        >>> pred[:, :, 4:12, 12] = 1  # a wrong column
        >>> uncertainty = torch.zeros(1, 1, 16, 16)
        >>> uncertainty[:, :, 4:12, 13] = 0.8  # uncertain one voxel beside it
        >>> [round(float(spatial_calibration_error(uncertainty, pred, target, sigma=s)), 4) for s in (1e-4, 1.0, 2.0)]
        [0.0563, 0.0224, 0.0118]
        >>> round(float(spatial_calibration_error(uncertainty, pred, target, spacing=0.5, sigma=1.0)), 4)
        0.0118
    """
    check_truncate(truncate)
    return_map = check_bool(return_map, "return_map")  # a string "false" (bundle override) is truthy
    u, p, t, _ = _prepare(uncertainty, pred, target)
    _warn_off_scale(u, "SPACE")
    sig = _sigma_mm(sigma, u.ndim - 1)
    sps = case_spacings(spacing, u.shape[0], u.ndim - 1)
    results = [_space_case(u[i], p[i], t[i], sps[i], sig, float(truncate)) for i in range(u.shape[0])]
    value = _finish([r[0] for r in results], uncertainty)
    if not return_map:
        return value
    return value, _stack_like([r[1] for r in results], uncertainty)[:, None]


#: the MONAI metric classes of this module's functions live in :mod:`.spatial_metric` (it imports MONAI): imported on
#: first access, so that ``monai_unc.metrics.spatial.BoundaryAwareECEMetric`` still works
__getattr__, __dir__ = lazy_attributes(
    __package__,
    dict.fromkeys(("BoundaryUncertaintyConcentrationMetric", "BoundaryAwareECEMetric", "SpatialCalibrationErrorMetric"),
                  "spatial_metric"),
    (), globals(), owner=__name__,
)
