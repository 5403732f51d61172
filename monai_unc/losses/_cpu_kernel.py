"""SVLS soft targets on the CPU: one compiled pass per spatial axis (numba, the optional ``fast`` extra).

:func:`~monai_unc.losses.functional.svls_targets_separable` smooths a one-hot target with one 1-D stencil per axis.
Its torch form makes three passes over the volume per axis (the centre tap, then one in-place add per other tap)
and a last one for the raised centre. Here each axis is one loop that reads the ``k`` taps of a voxel and writes
the result once, and the last axis also adds the raised centre: ``spatial_dims`` passes in all, each one read and
one write. The values are the torch form's up to rounding (the same taps, summed in another order, in the
target's dtype). Blocks of rows run in Python threads (the kernel releases the GIL), as many as torch's intra-op
threads.

Without numba :func:`available` is False and the torch form runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._jit import cached_kernel, njit
from .._lazy import lazy_optional
from .._utils import thread_map

__all__ = ["available", "smooth_axes"]

#: rows of the reshaped volume per thread at least (a thread for fewer costs more than it saves)
MIN_ROWS_PER_THREAD = 64


def _build() -> Any:
    # monai_unc._jit.njit: a cache folder that cannot be written (read-only install, full disk) costs a compile, not
    # the loss (found by hostile testing of full disks)
    @njit(nogil=True, boundscheck=False)
    def inner_axis(src, dst, w, orig, c0, lo, hi):  # pragma: no cover - compiled
        # src, dst, orig: (P, n, M) with M > 1 contiguous; dst[i, j] = sum_t w[t] src[i, clamp(j + t - h)] (+ c0 orig)
        n = src.shape[1]
        k = w.shape[0]
        half = k // 2
        for i in range(lo, hi):
            for j in range(n):
                d = dst[i, j]
                if k == 3:  # the paper's kernel: three rows, one fused loop the compiler vectorises
                    a = src[i, max(j - 1, 0)]
                    b = src[i, j]
                    c = src[i, min(j + 1, n - 1)]
                    w0 = w[0]
                    w1 = w[1]
                    w2 = w[2]
                    if orig is None:
                        for m in range(d.shape[0]):
                            d[m] = w1 * b[m] + w0 * a[m] + w2 * c[m]
                    else:
                        o = orig[i, j]
                        for m in range(d.shape[0]):
                            d[m] = w1 * b[m] + w0 * a[m] + w2 * c[m] + c0 * o[m]
                else:
                    b = src[i, j]
                    for m in range(d.shape[0]):
                        d[m] = w[half] * b[m]
                    for t in range(k):
                        if t != half:
                            r = src[i, min(max(j + t - half, 0), n - 1)]
                            for m in range(d.shape[0]):
                                d[m] += w[t] * r[m]
                    if orig is not None:
                        o = orig[i, j]
                        for m in range(d.shape[0]):
                            d[m] += c0 * o[m]

    @njit(nogil=True, boundscheck=False)
    def last_axis(src, dst, w, orig, c0, lo, hi):  # pragma: no cover - compiled
        # src, dst, orig: (P, n), the axis contiguous
        n = src.shape[1]
        k = w.shape[0]
        half = k // 2
        for i in range(lo, hi):
            s = src[i]
            d = dst[i]
            for j in range(n):
                acc = w[half] * s[j]
                for t in range(k):
                    if t != half:
                        acc += w[t] * s[min(max(j + t - half, 0), n - 1)]
                if orig is not None:
                    acc += c0 * orig[i, j]
                d[j] = acc

    # processes that compile at once never save into one cache index together (monai_unc._jit)
    return cached_kernel(inner_axis), cached_kernel(last_axis)


_kernels = lazy_optional(_build)


def available() -> bool:
    """Whether numba imports (the kernels compile on first use and are cached on disk)."""
    return _kernels() is not None


def smooth_axes(x: np.ndarray, weights: list[np.ndarray], centre_coef: float, n_threads: int = 1) -> np.ndarray:
    """``S_last(... S_1(x)) + centre_coef * x``: one 1-D stencil per spatial axis, the border replicated.

    Args:
        x: ``(N, *spatial)`` C-contiguous float32 or float64, 1 to 3 spatial axes (``N`` = batch x channels).
        weights: one odd-length 1-D tap array per spatial axis (tap ``t`` reads offset ``t - k // 2``), in ``x``'s
            dtype.
        centre_coef: the weight of ``x`` itself added after the last axis.
        n_threads: the most Python threads (blocks of rows; at least :data:`MIN_ROWS_PER_THREAD` rows each).

    Returns:
        A new array of ``x``'s shape and dtype.
    """
    kernels = _kernels()
    if kernels is None:
        raise RuntimeError("the SVLS CPU kernel needs numba (pip install 'monai-unc[fast]')")
    inner_axis, last_axis = kernels
    dims = x.ndim - 1
    if len(weights) != dims:
        raise ValueError(f"weights must hold one tap array per spatial axis ({dims}), got {len(weights)}")
    coef = x.dtype.type(centre_coef)
    bufs = [np.empty_like(x), np.empty_like(x) if dims > 1 else None]
    src = x
    for axis in range(dims):
        dst = bufs[axis % 2]
        before = int(np.prod(x.shape[: 1 + axis]))
        n = x.shape[1 + axis]
        after = int(np.prod(x.shape[2 + axis:]))
        last = axis == dims - 1
        w = np.ascontiguousarray(weights[axis], dtype=x.dtype)
        if after == 1:
            fn, shape = last_axis, (before, n)
        else:
            fn, shape = inner_axis, (before, n, after)
        s, d = src.reshape(shape), dst.reshape(shape)
        o = x.reshape(shape) if last else None
        blocks = max(1, min(int(n_threads), before // MIN_ROWS_PER_THREAD))
        if blocks == 1:
            fn(s, d, w, o, coef, 0, before)
        else:  # one pool per thread count, shared by the calls
            bounds = [(b * before // blocks, (b + 1) * before // blocks) for b in range(blocks)]
            thread_map(lambda lh, fn=fn, s=s, d=d, w=w, o=o: fn(s, d, w, o, coef, *lh), bounds, blocks)
        src = dst
    return src
