"""Aggregation of voxel-wise uncertainty maps to one score per case (ValUES, Sec. 4.3 and Appendix F).

Strategies (``aggregate(..., method=...)``):

- ``"mean"``: mean over the voxels (over the ``mask`` voxels when given, e.g. the predicted foreground: a
  size-normalised score; ValUES Appendix F.1 divides the sum over the *whole* image by the foreground size instead).
- ``"sum"``: sum over the voxels (ValUES' "image level"). It grows with the size of the uncertain region
  and therefore tracks object size (Appendix F.1), so it warns.
- ``"patch_sum"``: the largest sum of uncertainty over every stride-1 box of ``patch_size`` voxels per axis
  (ValUES: ``10^D`` boxes), with the box's location. Box sums are differences of cumulative sums
  (``S[i] = C[i + k] - C[i]``, kept as running sums over whole planes), O(voxels) for any box size and a
  few planes of memory, instead of a convolution with a ``k^D`` kernel (see :func:`max_patch`).
- ``"patch_mean"``: the largest box *mean* (the box sum divided by the box volume; with a mask the mean over the
  mask voxels inside the box). This is the ``patch_mean`` case score of :mod:`monai_unc.scores`.
- ``"threshold"``: the mean of the voxels with ``u >= t``; ``t`` comes from :func:`fit_threshold` on a
  validation set (Appendix F.2).

``"patch"`` (with ``patch_reduction="sum"`` or ``"mean"``) is the deprecated spelling of ``"patch_sum"`` /
``"patch_mean"`` (:func:`canonical_method`): the bare word named a box sum here and a box mean in the score
columns, so every name now says which.

Shapes: maps ``(B, 1, *spatial)`` with 2 or 3 spatial axes; masks ``(B, 1, *spatial)`` or ``(B, *spatial)``
(non-zero = inside). Scores are ``(B,)`` float64 in the input's library (numpy in, numpy out; torch in,
torch out on the same device). Sums accumulate in float64.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from ._deprecation import REMOVAL, deprecated_arg_names
from ._utils import ArrayLike, check_bool, check_finite, is_int, like_input, parameter_error, to_numpy, to_tensor

__all__ = ["PatchMax", "aggregate", "canonical_method", "check_method_options", "check_threshold", "max_patch",
           "fit_threshold", "METHODS"]

#: the aggregation strategies of :func:`aggregate` (also the ``{method}`` part of the transforms' output keys)
METHODS = ("mean", "sum", "patch_sum", "patch_mean", "threshold")
#: the former method name, whose box reduction came from ``patch_reduction`` (default ``"sum"``)
_OLD_PATCH = "patch"
_PATCH_REDUCTIONS = ("sum", "mean")
_SUM_WARNING = (
    "aggregate(method='sum') grows with the size of the uncertain region and so tracks object size "
    "(ValUES Appendix F.1); prefer 'mean' over a foreground mask, 'patch_sum', 'patch_mean' or 'threshold' to "
    "rank cases"
)


class PatchMax(NamedTuple):
    """Result of :func:`max_patch`: per-case best box score ``(B,)`` and its start corner ``(B, D)``.

    The box covers ``[start, start + size)`` along each axis; ``size`` is the (clipped) box size used.
    A case without any valid box (empty ``mask``) has score NaN and start ``-1``.

    Attributes:
        score: ``(B,)`` float64, the best box sum (or mean) of each case, in the input's library.
        start: ``(B, D)`` int64, the first voxel of that box along each of the ``D`` spatial axes.
        size: the box size used, one int per spatial axis (``patch_size`` clipped to the image).

    Example:
        >>> import numpy as np
        >>> u = np.zeros((1, 1, 4, 4))
        >>> u[0, 0, 1:3, 2:4] = 1.0
        >>> res = max_patch(u, patch_size=2)
        >>> float(res.score[0]), res.start[0].tolist(), res.size
        (4.0, [1, 2], (2, 2))
    """

    score: ArrayLike
    start: ArrayLike
    size: tuple[int, ...]


def _maps(uncertainty: Any) -> torch.Tensor:
    u = to_tensor(uncertainty, "uncertainty")
    if u.ndim not in (4, 5) or u.shape[1] != 1:
        raise ValueError(
            "uncertainty must have shape (B, 1, *spatial) with 2 or 3 spatial axes, "
            f"got {tuple(u.shape)}"
        )
    if u.numel() == 0:
        raise ValueError(f"uncertainty is empty (shape {tuple(u.shape)})")
    if u.dtype == torch.bool or u.is_complex():
        raise TypeError(f"uncertainty must be a numeric array, got dtype {u.dtype}")
    u = u.to(torch.float64)
    check_finite(u, "uncertainty")
    return u[:, 0]


def _mask(mask: Any, shape: torch.Size, device: torch.device) -> torch.Tensor | None:
    if mask is None:
        return None
    m = to_tensor(mask, "mask").to(device)
    if m.ndim == len(shape) + 1 and m.shape[1] == 1:
        m = m[:, 0]
    if m.shape != shape:
        raise ValueError(
            f"mask must have shape (B, 1, *spatial) or (B, *spatial) with (B, *spatial) = {tuple(shape)}, "
            f"got {tuple(m.shape)}"
        )
    if m.is_floating_point():
        check_finite(m, "mask")
        # found by review 67: probabilities are non-zero almost everywhere, so a sigmoid output selected the whole
        # image (the transforms already refused them)
        if not bool((m == m.round()).all()):
            raise ValueError(
                "mask must be binary or a label map (non-zero = inside), got non-integral values (e.g. probabilities, "
                "which are non-zero almost everywhere): threshold it first, e.g. mask=prob > 0.5"
            )
    return m != 0


def _box_size(patch_size: Any, ndim: int | None = None) -> tuple[int, ...]:
    """``patch_size`` as positive ints, one per axis: ``ndim`` axes, or (``None``: map not known yet) 2 or 3."""
    if is_int(patch_size):
        size = (int(patch_size),) * (ndim or 1)
    else:
        # a 0-d array is no sequence (found by review 67: np.array(3) raised numpy's "iteration over a 0-d array")
        is_sequence = (isinstance(patch_size, Sequence) and not isinstance(patch_size, str)) or (
            isinstance(patch_size, np.ndarray) and patch_size.ndim == 1
        )
        items = list(patch_size) if is_sequence else None
        if items is None or not all(is_int(s) for s in items):
            raise ValueError(
                f"patch_size must be an integer number of voxels or one integer per spatial axis, got {patch_size!r}"
            )
        size = tuple(int(s) for s in items)
        if ndim is not None and len(size) != ndim:
            raise ValueError(f"patch_size must have {ndim} values (one per spatial axis), got {len(size)}")
        if ndim is None and len(size) not in (2, 3):
            raise ValueError(f"patch_size must have one value per spatial axis (2 or 3), got {len(size)}")
    if any(s < 1 for s in size):
        raise ValueError(f"patch_size must be positive, got {size}")
    return size


def _patch_size(patch_size: int | Sequence[int], spatial: Sequence[int]) -> tuple[int, ...]:
    size = _box_size(patch_size, len(spatial))
    # a box larger than the image along an axis covers the whole axis
    return tuple(min(s, n) for s, n in zip(size, spatial))


def _doubling_ops(k: int) -> int:
    """Additions needed to form windows of ``k`` from power-of-two windows (binary decomposition of k)."""
    return k.bit_length() - 1 + bin(k).count("1") - 1


def _strided_window_sums(
    src: np.ndarray, k: int, step: int, period: int, out: np.ndarray, work: tuple[np.ndarray, np.ndarray]
) -> None:
    """``out[x] = sum_{j < k} src[x + j * step]`` for the windows inside their segment, on flat float64 buffers.

    ``src`` is a flattened array whose segments of ``period`` values are independent (rows: ``step = 1``,
    ``period = n_last``; planes of one case: ``step = n_last``, ``period = n_mid * n_last``); windows that would run
    past the end of their segment leave values the caller must ignore. Window sizes that are a sum of few powers of
    two (at most four additions, e.g. 10 = 8 + 2) combine power-of-two window sums built by doubling; any other size
    uses a cumulative sum restarted at every segment and one difference, ``S[j] = C[j + k - 1] - C[j - 1]`` (so a
    case's sums never carry the magnitude of the cases before it). Either way the work per value does not grow with
    the box volume, and everything is a vector operation into the preallocated ``out`` and ``work`` buffers (no
    allocation per plane).
    """
    size = src.size
    m = size - (k - 1) * step
    if k == 1:
        out[:m] = src
        return
    if _doubling_ops(k) > 4:
        n_seg = period // step
        shape = (size // period, n_seg, step)
        c = work[0][:size].reshape(shape)
        np.cumsum(src.reshape(shape), axis=1, out=c)
        o = out[:size].reshape(shape)
        valid = n_seg - k + 1
        o[:, :valid] = c[:, k - 1 :]
        np.subtract(o[:, 1:valid], c[:, : valid - 1], out=o[:, 1:valid])
        return
    power, length, width, offset, started = src, size, 1, 0, False
    while True:
        if k & width:  # add the window of this width that starts after those already added
            piece = power[offset * step : offset * step + m]
            if started:
                np.add(out[:m], piece, out=out[:m])
            else:
                out[:m] = piece
                started = True
            offset += width
        if 2 * width > k:
            return
        length -= width * step
        dst = work[0] if power is not work[0] else work[1]
        np.add(power[:length], power[width * step : width * step + length], out=dst[:length])
        power, width = dst, width * 2


def _box_argmax(
    planes: Callable[[int | None], list[np.ndarray]],
    n_first: int,
    size: Sequence[int],
    score: Callable[[list[np.ndarray]], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Best box score per case over every stride-1 box of ``size`` and its start, in O(voxels).

    ``planes(i)`` returns the fields (e.g. masked uncertainty and mask) of plane ``i`` along the first
    spatial axis, ``(B, n1, n2)`` each (3D), or the whole ``(B, n0, n1)`` maps when called with ``None``
    (2D); ``score`` combines the fields' box sums (``(B, n1, n2)`` float64, valid where a whole box fits) into
    box scores (``-inf`` excludes a box).

    3D: running sums over the first axis, ``R_i = R_{i-1} + plane(i + k - 1) - plane(i - 1)`` (a difference of
    cumulative sums kept incrementally, float64), then window sums of each ``R_i`` along the last and the middle
    axis (:func:`_strided_window_sums` on the flattened plane), and only the best box of each plane is kept:
    memory is a few planes, never the map of box scores, and no buffer is allocated per plane.
    Returns ``best (B,)`` and ``start (B, D)``; equal computed scores go to the first box in C order.
    """
    if len(size) == 2:
        first = [f[:, None] for f in planes(None)]
        best, start = _box_argmax(lambda i: [f[:, i] for f in first], 1, (1, *size), score)
        return best, start[:, 1:]
    k0, k1, k2 = size
    m0 = n_first - k0 + 1
    fields0 = planes(0)
    b, n1, n2 = fields0[0].shape
    m1, m2 = n1 - k1 + 1, n2 - k2 + 1
    n = b * n1 * n2
    work = (np.empty(n), np.empty(n))
    rows = [np.zeros((b, n1, n2)) for _ in fields0]
    # zeros, not stale memory: the window sums leave the tail past the last whole window unwritten, and the next
    # pass (and the score) reads it (stale values made "invalid value in subtract" and overflowed the masked mean)
    sums = [np.zeros((b, n1, n2)) for _ in fields0]
    tmp = np.zeros(n)
    for i in range(k0):
        for r, f in zip(rows, fields0 if i == 0 else planes(i)):
            r += f
    best_of_plane, start_of_plane = [], []
    for i in range(m0):
        if i:
            for r, add, sub in zip(rows, planes(i + k0 - 1), planes(i - 1)):
                r += add
                r -= sub
        for r, sm in zip(rows, sums):
            _strided_window_sums(r.reshape(-1), k2, 1, n2, tmp, work)
            _strided_window_sums(tmp, k1, n2, n1 * n2, sm.reshape(-1), work)
            sm[:, m1:, :] = 0.0  # boxes running past the last row or column: never written, stale memory that
            sm[:, :, m2:] = 0.0  # the score must not read (a stale mask count of 1e-300 overflowed the mean)
        sc = score(sums)
        sc[:, m1:, :] = -np.inf
        sc[:, :, m2:] = -np.inf
        flat = sc.reshape(b, -1)
        pos = flat.argmax(axis=1)
        best_of_plane.append(flat[np.arange(b), pos])
        start_of_plane.append(np.stack(np.unravel_index(pos, (n1, n2)), axis=1))
    values = np.stack(best_of_plane, axis=1)  # (B, m0)
    i_best = values.argmax(axis=1)  # first plane holding the maximum
    cases = np.arange(b)
    in_plane = np.stack(start_of_plane, axis=1)[cases, i_best]  # (B, 2)
    return values[cases, i_best], np.concatenate([i_best[:, None], in_plane], axis=1).astype(np.int64)


def _maps_np(uncertainty: Any) -> np.ndarray:
    """``(B, 1, *spatial)`` maps as a numpy ``(B, *spatial)`` float array (validated, not copied if possible)."""
    u = to_numpy(uncertainty, "uncertainty")
    if u.ndim not in (4, 5) or u.shape[1] != 1:
        raise ValueError(f"uncertainty must have shape (B, 1, *spatial) with 2 or 3 spatial axes, got {u.shape}")
    if u.size == 0:
        raise ValueError(f"uncertainty is empty (shape {u.shape})")
    if u.dtype == bool or not np.issubdtype(u.dtype, np.number) or np.iscomplexobj(u):
        raise TypeError(f"uncertainty must be a real numeric array, got dtype {u.dtype}")
    if not np.issubdtype(u.dtype, np.floating):
        u = u.astype(np.float64)
    if not np.isfinite(u).all():
        raise ValueError(f"uncertainty contains {int((~np.isfinite(u)).sum())} non-finite value(s) (NaN or inf)")
    return u[:, 0]


def max_patch(
    uncertainty: ArrayLike,
    patch_size: int | Sequence[int] = 10,
    reduction: str = "sum",
    mask: ArrayLike | None = None,
) -> PatchMax:
    """Largest box sum (or mean) of uncertainty over all stride-1 boxes, and where it is (ValUES Sec. 4.3).

    For a box ``Q`` of ``k_1 x ... x k_D`` voxels starting at ``s``, ``S(s) = sum_{x in Q(s)} u(x)``; the score is
    ``max_s S(s)`` (``reduction="sum"``, the ``"patch_sum"`` method of :func:`aggregate`) or ``max_s S(s) / |Q|``
    (``"mean"``, the ``"patch_mean"`` method). With a mask, ``u`` is zero outside it, boxes without a mask voxel
    are skipped, and the mean divides by the number of mask voxels in the box.

    Box sums are differences of cumulative sums (formed as running sums), axis by axis, so the cost is
    O(voxels) whatever the box size, against O(voxels * box volume) for a direct convolution with a
    ``k^D`` kernel (ValUES uses ``scipy.signal.convolve``). Sums accumulate in float64. The winning box's score is
    then summed again directly from the map, so the reported score is that box's sum (mean) to float64 rounding of
    its own values. Residual: the running sums carry the magnitude of the values already passed, so in a map whose
    values span more than ~1e12 (e.g. one plane of -1e16 beside values ~0.3) the small values are rounded away in
    the *search*: boxes whose exact sums differ by less than that rounding (``~2^-52`` times the largest magnitude
    the running sums passed) may be ranked in the wrong order and another box chosen. Uncertainty maps (values in
    [0, log C]) are far from this. CUDA tensors are processed on the CPU (one copy of the map) and the result is
    returned on their device.

    Args:
        uncertainty: ``(B, 1, *spatial)`` maps, 2D or 3D.
        patch_size: box size in voxels, one int for every axis or one per axis (ValUES: 10); clipped to the
            image size along each axis.
        reduction: ``"sum"`` (ValUES) or ``"mean"``: without a mask the sum divided by the box volume;
            with a mask the mean over the mask voxels inside the box (boxes without one are skipped).
        mask: optional ``(B, 1, *spatial)`` / ``(B, *spatial)``, binary or a label map (non-zero = inside;
            probabilities raise ``ValueError``); voxels outside count as zero uncertainty, and boxes without any mask
            voxel are skipped.

    Returns:
        :class:`PatchMax` with ``score`` ``(B,)`` float64 and ``start`` ``(B, D)`` int64, in the input's
        library. Boxes with equal computed scores go to the first in C order; sums that are equal in exact
        arithmetic (e.g. a constant map) can differ in the last bits when a box size takes the cumulative-sum
        path, so which of them wins is then unspecified. A case's result never depends on the other cases of
        the batch.

    Raises:
        ValueError: a bad shape, non-finite values, a bad ``patch_size`` or ``reduction``, or a mask of another
            shape or with non-integral values.

    Example:
        >>> import numpy as np
        >>> u = np.zeros((1, 1, 6, 6))
        >>> u[0, 0, 2:5, 1:4] = 0.5
        >>> res = max_patch(u, patch_size=3)
        >>> float(res.score[0]), res.start[0].tolist()
        (4.5, [2, 1])
        >>> round(float(max_patch(u, patch_size=(2, 4), reduction="mean").score[0]), 4)
        0.375
    """
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
    u = _maps_np(uncertainty)
    size = _patch_size(patch_size, u.shape[1:])

    def take(a: np.ndarray, i: int | None) -> np.ndarray:
        return a if i is None else a[:, i]

    m = None
    if mask is None:
        best, start = _box_argmax(lambda i: [take(u, i)], u.shape[1], size, lambda s: s[0])
    else:
        m = _mask(mask, torch.Size(u.shape), torch.device("cpu")).numpy()

        def planes(i: int | None) -> list[np.ndarray]:
            mi = take(m, i)
            return [np.where(mi, take(u, i), 0.0), mi.astype(np.float64)]

        def score(s: list[np.ndarray]) -> np.ndarray:
            inside = s[1] > 0
            if reduction == "mean":
                return np.where(inside, s[0] / np.where(inside, s[1], 1.0), -np.inf)
            return np.where(inside, s[0], -np.inf)

        best, start = _box_argmax(planes, u.shape[1], size, score)
        empty = np.isinf(best)
        if empty.any():
            warnings.warn(
                f"max_patch: {int(empty.sum())} case(s) have an empty mask; their score is NaN",
                UserWarning,
                stacklevel=2,
            )
            start[empty] = -1
    best = _box_score(u, m, start, size, reduction)
    return PatchMax(like_input(best, uncertainty), like_input(start, uncertainty), size)


def _box_score(
    u: np.ndarray, mask: np.ndarray | None, start: np.ndarray, size: Sequence[int], reduction: str
) -> np.ndarray:
    """The score of each case's chosen box, summed directly from the map (float64): NaN where ``start`` is -1.

    The search (:func:`_box_argmax`) forms box sums as differences of running and cumulative sums, which lose the
    small values of a map next to huge ones (a range above ~1e12: a box of sum 8.1 beside a plane of -1e16 was
    reported as 0.0; found by hostile testing). The winning box is summed again on its own, so the reported score is
    its sum (or mean) to float64 rounding of the box's own values.
    """
    out = np.full(start.shape[0], np.nan)
    for b in range(start.shape[0]):
        if start[b, 0] < 0:
            continue
        box = (b, *(slice(int(i), int(i) + k) for i, k in zip(start[b], size)))
        vals = np.asarray(u[box], dtype=np.float64)
        if mask is None:
            total, n = float(vals.sum()), vals.size
        else:
            inside = mask[box]
            total, n = float(np.where(inside, vals, 0.0).sum()), int(np.count_nonzero(inside))
        out[b] = total / n if reduction == "mean" else total
    return out


def canonical_method(method: str, patch_reduction: str | None = None, note: str = "", stacklevel: int = 2) -> str:
    """The current name of an aggregation method: ``method`` itself, or the name that replaces a deprecated spelling.

    ``"patch"`` meant a box *sum* in :func:`aggregate` (``patch_reduction="sum"``, the default) but a box *mean* in
    the score columns (``<measure>_patch``, now ``<measure>_patch_mean``); the methods now say which:
    ``"patch"`` becomes ``"patch_sum"``, or ``"patch_mean"`` with ``patch_reduction="mean"``, with a
    ``DeprecationWarning`` (the same numbers as before). ``patch_reduction`` itself is deprecated: with
    ``"patch_sum"`` / ``"patch_mean"`` it must agree with the method, with the other methods it is ignored.

    Args:
        method: one of :data:`METHODS`, or the deprecated ``"patch"``.
        patch_reduction: deprecated; ``None`` (the default), ``"sum"`` or ``"mean"``.
        note: appended to the deprecation message (e.g. where a transform now stores the score); ``{method}`` in
            it is replaced by the new method name.
        stacklevel: ``stacklevel`` of the warning (2: the caller of this function).

    Returns:
        The current method name, one of :data:`METHODS`.

    Raises:
        ValueError: ``method`` is not a known method, or ``patch_reduction`` is neither ``"sum"`` nor ``"mean"``
            or contradicts the method.

    Example:
        >>> import warnings
        >>> canonical_method("patch_mean")
        'patch_mean'
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     canonical_method("patch")
        'patch_sum'
        >>> caught[0].category.__name__
        'DeprecationWarning'
    """
    if not isinstance(method, str) or (method not in METHODS and method != _OLD_PATCH):
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    patchwise = method == _OLD_PATCH or method.startswith("patch_")
    if patch_reduction is not None and patchwise and patch_reduction not in _PATCH_REDUCTIONS:
        raise ValueError(f"patch_reduction must be 'sum' or 'mean', got {patch_reduction!r}")
    if method == _OLD_PATCH:
        new = f"patch_{patch_reduction or 'sum'}"
        given = "" if patch_reduction is None else f" with patch_reduction={patch_reduction!r}"
        message = (f"method='patch'{given} is deprecated and will be removed in {REMOVAL}; use method={new!r} (the "
                   "same score: 'patch' alone named a box sum here but a box mean in the score columns)")
    elif patch_reduction is None:
        return method
    elif patchwise and f"patch_{patch_reduction}" != method:
        raise ValueError(f"patch_reduction={patch_reduction!r} contradicts method={method!r}; drop patch_reduction "
                         "(the method names the box reduction)")
    else:
        new = method
        message = (f"patch_reduction is deprecated and will be removed in {REMOVAL}; the method names the box "
                   "reduction ('patch_sum' or 'patch_mean')")
    if note:
        message += "; " + note.replace("{method}", new)
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)
    return new


def _is_zero(value: Any) -> bool:
    """Whether ``value`` is the number 0 (``empty_value``'s default); NaN and anything else are not."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, np.integer, np.floating)) and (
        value == 0
    )


def check_threshold(threshold: Any, name: str = "threshold", error: type[Exception] = ValueError) -> float:
    """A fixed threshold ``t`` as a finite float: the one check of :func:`aggregate` and of the transforms.

    A real number (Python or numpy scalar), or a 0-d real tensor / numpy array (``torch.quantile(u, 0.95)``, a cohort
    threshold kept as an array), converted with ``float()``; a bool, a string, a complex number, ``None`` or an array
    of one or more axes is refused. :func:`aggregate` (and :class:`~monai_unc.transforms.AggregateUncertainty`) and
    :class:`~monai_unc.transforms.UncertaintyToDiscrete` read thresholds through it, so they accept and refuse the
    same values.

    Args:
        threshold: the value given.
        name: the argument's name in error messages.
        error: the exception raised for a value that is no real number: ``ValueError`` (:func:`aggregate`'s checks
            raise that for every bad option) or ``TypeError`` (the transforms').

    Returns:
        ``float(threshold)``.

    Raises:
        ValueError: (or ``error``) naming ``name``: not a real number; ``ValueError``: not finite.

    Example:
        >>> import numpy as np, torch
        >>> check_threshold(torch.tensor(0.25)), check_threshold(np.array(1)), check_threshold(np.float32(0.5))
        (0.25, 1.0, 0.5)
        >>> check_threshold(True)
        Traceback (most recent call last):
        ...
        ValueError: threshold must be a real number (e.g. from fit_threshold), got True
    """
    value = threshold
    if isinstance(value, torch.Tensor) and value.ndim == 0 and value.dtype != torch.bool and not value.is_complex():
        value = value.item()
    elif isinstance(value, np.ndarray) and value.ndim == 0 and (np.issubdtype(value.dtype, np.floating)
                                                                or np.issubdtype(value.dtype, np.integer)):
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise parameter_error(error(f"{name} must be a real number (e.g. from fit_threshold), got {threshold!r}"),
                              name)
    try:
        out = float(value)
    except OverflowError:  # an int beyond float64: Python's "int too large to convert to float" (hostile review 68)
        out = float("inf")
    if not np.isfinite(out):
        raise parameter_error(ValueError(f"{name} must be finite, got {out}"), name)
    return out


def check_method_options(
    method: str,
    threshold: float | None = None,
    empty_value: float = 0.0,
    patch_size: int | Sequence[int] | None = None,
) -> None:
    """Refuse options a method ignores, and options no map could make valid.

    ``threshold`` or a non-zero ``empty_value`` with a method other than ``"threshold"`` (it ignores them) are
    refused, and so are a bad ``threshold``, ``empty_value`` or ``patch_size`` (below).

    The one check of :func:`aggregate` and of the transforms that call it
    (:class:`~monai_unc.transforms.AggregateUncertainty`, :class:`~monai_unc.transforms.AggregateUncertaintyd`,
    which run it when built, not at the first case).

    Args:
        method: a current method name (:func:`canonical_method`).
        threshold: ``aggregate``'s ``threshold``: with ``"threshold"``, a finite real number or 0-d real tensor /
            array when given (:func:`check_threshold`).
        empty_value: ``aggregate``'s ``empty_value``: with ``"threshold"``, a real number (0.0 or NaN).
        patch_size: ``aggregate``'s ``patch_size``, checked with ``"patch_sum"`` / ``"patch_mean"`` only: a positive
            int, or 2 or 3 positive ints (one per spatial axis; their number is checked against the map later).
            ``None``: not checked.

    Raises:
        ValueError: naming the option given to a method that does not read it, or a ``threshold``, ``empty_value``
            or ``patch_size`` that is not one of the values above.

    Example:
        >>> check_method_options("threshold", threshold=0.5, empty_value=float("nan"))
        >>> check_method_options("patch_sum", patch_size=(10, 10, 2))
        >>> check_method_options("mean", threshold=0.5)
        Traceback (most recent call last):
        ...
        ValueError: threshold applies to method='threshold' only, got method='mean'
    """
    if method != "threshold" and (threshold is not None or not _is_zero(empty_value)):
        # found by hostile testing: aggregate(u, "mean", threshold=0.5) returned the plain mean without a word
        given = "threshold" if threshold is not None else "empty_value"
        raise ValueError(f"{given} applies to method='threshold' only, got method={method!r}")
    # found by review 67: the transforms accepted threshold="0.5" or NaN and patch_size=0 when built and refused them
    # at the first case, after the model had run on it
    if method == "threshold":
        if threshold is not None:
            check_threshold(threshold)
        if isinstance(empty_value, (bool, np.bool_)) or not isinstance(
            empty_value, (int, float, np.integer, np.floating)
        ):
            raise ValueError(f"empty_value must be a number (0.0 or NaN), got {empty_value!r}")
    if patch_size is not None and method in ("patch_sum", "patch_mean"):
        _box_size(patch_size)


def aggregate(
    uncertainty: ArrayLike,
    method: str = "mean",
    mask: ArrayLike | None = None,
    patch_size: int | Sequence[int] = 10,
    threshold: float | None = None,
    patch_reduction: str | None = None,
    return_location: bool = False,
    empty_value: float = 0.0,
) -> ArrayLike | tuple[ArrayLike, ArrayLike]:
    """Aggregate voxel uncertainty ``(B, 1, *spatial)`` to one score per case ``(B,)`` (ValUES Sec. 4.3).

    For case ``b`` with voxels ``V`` (the ``mask`` voxels when given): ``mean = sum_V u / |V|``,
    ``sum = sum_V u``, ``patch_sum = max_box sum_box u`` and ``patch_mean = max_box mean_box u`` over every
    stride-1 box of ``patch_size`` voxels (:func:`max_patch`), ``threshold = mean {u(x) : x in V, u(x) >= t}``.

    Args:
        uncertainty: maps ``(B, 1, *spatial)``, larger = less confident, 2D or 3D, numpy or torch.
        method: ``"mean"``, ``"sum"``, ``"patch_sum"``, ``"patch_mean"`` or ``"threshold"`` (see the module
            docstring); ``"patch"`` is a deprecated spelling (:func:`canonical_method`).
        mask: restrict every method to these voxels (e.g. the predicted foreground or a dilation of it);
            ``(B, 1, *spatial)`` or ``(B, *spatial)``, binary or a label map, non-zero = inside (non-integral values
            such as probabilities raise ``ValueError``: threshold them first). Every method scores a case with an empty
            mask NaN, with a warning (no voxel to aggregate: not the 0 of an empty sum, which would rank the case
            as the most certain).
        patch_size: box size in voxels for ``"patch_sum"`` / ``"patch_mean"`` (int or one per axis).
        threshold: ``t`` for ``"threshold"``, e.g. from :func:`fit_threshold`: a finite real number or a 0-d real
            tensor / array (:func:`check_threshold`); required there, refused by the other methods (``ValueError``:
            they would ignore it).
        patch_reduction: deprecated (the method names the reduction); with ``method="patch"`` the box reduction,
            ``"sum"`` (default) or ``"mean"``.
        return_location: with ``"patch_sum"`` / ``"patch_mean"``, also return the best box's start corner
            ``(B, D)``; ``True`` or ``False``.
        empty_value: ``"threshold"`` score of a case whose (masked) voxels are all below ``t``: 0.0 as in ValUES'
            code (such a case is the most certain one); pass ``float("nan")`` to mark it instead. A case with an
            empty mask is NaN whatever ``empty_value``. Another value than 0 is refused by the other methods.

    Returns:
        ``(B,)`` float64 scores in the input's library, or ``(scores, start)`` with ``start`` ``(B, D)`` int64 for
        the patch methods with ``return_location=True``.

    Raises:
        ValueError: an unknown method, a bad shape, non-finite values, a mask of another shape or with
            non-integral values, a missing or
            non-finite ``threshold``, ``threshold`` or a non-zero ``empty_value`` with a method other than
            ``"threshold"``, or ``return_location`` with a method other than the patch methods.
        TypeError: ``return_location`` that is not ``True`` or ``False`` (a string such as ``"False"``).

    Example:
        >>> import numpy as np
        >>> u = np.zeros((2, 1, 4, 4))
        >>> u[0, 0, :2, :2] = 0.8
        >>> u[1, 0] = 0.25
        >>> aggregate(u, "mean").round(3).tolist()
        [0.2, 0.25]
        >>> aggregate(u, "patch_sum", patch_size=2).round(3).tolist()
        [3.2, 1.0]
        >>> aggregate(u, "patch_mean", patch_size=2).round(3).tolist()
        [0.8, 0.25]
        >>> aggregate(u, "threshold", threshold=0.5).round(3).tolist()
        [0.8, 0.0]
    """
    method = canonical_method(method, patch_reduction, stacklevel=3)
    check_method_options(method, threshold, empty_value, patch_size)
    # found by hostile testing: return_location="False" (truthy) returned a (scores, start) tuple
    return_location = check_bool(return_location, "return_location")
    if method in ("patch_sum", "patch_mean"):
        res = max_patch(uncertainty, patch_size=patch_size, reduction=method[len("patch_"):], mask=mask)
        return (res.score, res.start) if return_location else res.score
    if return_location:
        raise ValueError(
            f"return_location=True is only available for method='patch_sum' or 'patch_mean', got {method!r}"
        )
    u = _maps(uncertainty)
    m = _mask(mask, u.shape, u.device)
    flat = u.reshape(u.shape[0], -1)
    keep = None if m is None else m.reshape(m.shape[0], -1)
    if method == "sum":
        warnings.warn(_SUM_WARNING, UserWarning, stacklevel=2)
        out = flat.sum(dim=1) if keep is None else (flat * keep).sum(dim=1)
    elif method == "mean":
        if keep is None:
            out = flat.mean(dim=1)
        else:
            out = (flat * keep).sum(dim=1) / keep.sum(dim=1).clamp_min(1)
    else:
        if threshold is None:
            raise ValueError("method='threshold' needs threshold=t (fit it with fit_threshold on validation maps)")
        above = flat >= check_threshold(threshold)  # a 0-d tensor / array: its number (review 67)
        if keep is not None:
            above = above & keep
        n = above.sum(dim=1)
        out = (flat * above).sum(dim=1) / n.clamp_min(1)
        out = torch.where(n == 0, torch.full_like(out, float(empty_value)), out)
    if keep is not None:
        # every method over an empty mask: NaN with a warning, as the patch methods (found by hostile testing:
        # "threshold" gave empty_value, 0.0, and "sum" 0.0 silently, ranking such a case as the most certain)
        empty = ~keep.any(dim=1)
        if bool(empty.any()):
            warnings.warn(
                f"aggregate(method={method!r}): {int(empty.sum())} case(s) have an empty mask; their score is NaN",
                UserWarning,
                stacklevel=2,
            )
            out = torch.where(empty, torch.full_like(out, torch.nan), out)
    return like_input(out, uncertainty)


def _cases(x: Any, name: str) -> list[np.ndarray]:
    if isinstance(x, (list, tuple)):
        items = [to_numpy(v, f"{name}[{i}]") for i, v in enumerate(x)]
    else:
        arr = to_numpy(x, name)
        if arr.ndim < 2:
            raise ValueError(f"{name} must be a sequence of per-case maps or an array (B, ...), got shape {arr.shape}")
        items = list(arr)
    if not items:
        raise ValueError(f"{name} is empty: at least one validation case is needed")
    return items


@deprecated_arg_names({"val_uncertainty_maps": "uncertainty", "val_predictions": "pred"})
def fit_threshold(uncertainty: Any, pred: Any) -> float:
    """Threshold ``t`` for ``aggregate(method="threshold")`` as ValUES fits it (Appendix F.2, eqs. 21-22).

    ``alpha_i`` = predicted foreground fraction of validation case ``i`` (label > 0), ``q = 1 - mean_i alpha_i``,
    and ``t`` = the ``q``-quantile of the uncertainty of all validation voxels pooled (numpy's default
    linear interpolation, as ValUES' code uses). Voxels ranked above ``t`` are then about as many as the
    predicted foreground voxels.

    Args:
        uncertainty: validation uncertainty maps, a list of per-case maps (shapes may differ between cases) or an
            array with cases on axis 0 (e.g. ``(B, 1, *spatial)``).
        pred: predicted label maps of the same cases, each with as many voxels as its map.

    The keywords ``val_uncertainty_maps`` and ``val_predictions`` are deprecated aliases of ``uncertainty`` and
    ``pred``.

    Returns:
        The threshold ``t`` (float). With no predicted foreground in any validation case (``q = 1``), ``t`` is the
        largest validation value, with a ``UserWarning``.

    Raises:
        ValueError: no cases, different numbers of maps and predictions, a case whose map and prediction differ
            in size, non-finite uncertainty, or predictions that are not non-negative integer labels.
        TypeError: maps that are not real numeric arrays (boolean maps included, as :func:`aggregate` refuses
            them) or predictions that are not real numeric or boolean arrays.

    Example:
        >>> import numpy as np
        >>> u = np.array([[0.1, 0.2, 0.6, 0.9], [0.0, 0.3, 0.4, 0.8]])
        >>> pred = np.array([[0, 0, 1, 1], [0, 0, 0, 1]])
        >>> round(fit_threshold(u, pred), 4)
        0.475
    """
    maps = _cases(uncertainty, "uncertainty")
    preds = _cases(pred, "pred")
    if len(maps) != len(preds):
        raise ValueError(f"uncertainty and pred must hold the same number of cases, got {len(maps)} and {len(preds)}")
    fractions = []
    for i, (u, p) in enumerate(zip(maps, preds)):
        if u.size != p.size:
            raise ValueError(f"case {i}: the map uncertainty[{i}] has {u.size} voxels but pred[{i}] has {p.size}")
        if u.size == 0:
            raise ValueError(f"case {i}: uncertainty[{i}] is an empty map")
        if u.dtype.kind not in "iuf" or p.dtype.kind not in "biuf":
            # a boolean map (a mask in the map's place) is refused, as aggregate refuses it (review 67)
            raise TypeError(f"case {i}: uncertainty[{i}] must be a real numeric map (not boolean) and pred[{i}] a "
                            f"label map, got dtypes {u.dtype} and {p.dtype}")
        if not np.isfinite(u).all():
            raise ValueError(f"uncertainty[{i}] contains non-finite values (NaN or inf)")
        if np.issubdtype(p.dtype, np.floating) and not (np.isfinite(p).all() and (p == np.round(p)).all()):
            raise ValueError(f"pred[{i}] must be a label map (integers), not probabilities")
        if p.dtype != bool and p.min() < 0:
            raise ValueError(f"pred[{i}] must hold non-negative class labels")
        fractions.append(np.count_nonzero(p) / p.size)
    q = 1.0 - float(np.mean(fractions))
    if q == 1.0:
        # found by review 67: t is then the largest validation value and "threshold" scores almost every case
        # empty_value (the most certain), without a word
        warnings.warn(
            f"fit_threshold: no predicted foreground in any of the {len(preds)} validation case(s), so q = 1 and t is "
            "the largest validation uncertainty; aggregate(method='threshold') will score almost every case "
            "empty_value",
            UserWarning,
            stacklevel=2,
        )
    pooled = np.concatenate([u.reshape(-1).astype(np.float64, copy=False) for u in maps])
    return float(np.quantile(pooled, q))
