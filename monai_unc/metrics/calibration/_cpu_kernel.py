"""The fused CPU update of :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`: one pass over the voxels.

The reference update (``histogram.py``) makes about 25 torch passes over each chunk of voxels (copy, checks, top
label, bin indices, one ``scatter_add_`` per table and row, NLL, Brier). This module does the same work in one
compiled pass (numba, the optional ``fast`` extra) over blocks of voxels that stay in the cache. Per block:

- one vectorised loop over the voxels reads every class's probability once (the loop over the classes unrolled: one
  kernel is compiled per number of classes up to :data:`MAX_UNROLLED_CLASSES`; more classes take one vectorised loop
  per class instead, in one kernel compiled for every such count), checks it, clips it, computes its bin, and keeps
  the voxel's top label and value, the value of its reference label and its sum of squares;
- one scalar loop per class row adds the block's voxels to that row's counts and value sums, which sit side by side
  (one cache line per update); a count and a hit share one int64 update (the count in the low 32 bits, the hit in
  the high ones, unpacked before 2^32 voxels reach one table); the first and last :data:`EDGE_BINS` bins of a class
  row, where a confident network puts most class values, have :data:`EDGE_COPIES` slots each, taken by consecutive
  voxels in turn (one slot updated by consecutive voxels makes each update wait for the previous one: 1.66x slower
  on such a volume), added into their bins when the tables are unpacked;
- the top-label row is left to the class rows wherever they hold it: a voxel whose top value ``v`` exceeds
  ``(1 + (C - 1) tol) / 2`` (every voxel passed the checks: values in ``[-tol, 1 + tol]`` summing to 1 within
  ``tol``) has no other class value as large, so its top-label entry (bin, value, hit) is its top class's entry.
  The kernel adds to the top-label row only the voxels whose top value's bin is below the first bin that holds only
  such values; unpacking the tables adds the class rows' bins from there on to the top-label row. Confident
  segmentations have few voxels below it (two of a class row's three scatters a voxel remain);
- the NLL and Brier sums: the NLL as the logarithm of a product (each probability of the reference label split into
  its binary exponent, summed as an integer, and its mantissa in [1, 2), multiplied: no logarithm per voxel), the
  Brier sum as one sum a block.

Each thread fills private tables over its own contiguous range of voxels (privatised histograms: no two threads write
one counter), merged once at the end.

Results equal the reference's: the same float64 values (the entropy row's within a few ulps: below), bins
``floor(v * F)`` computed the same way, first maximum wins; counts are exact int64. Float sums differ only by the
order of the additions (per thread, per row, then merged; the top-label row's sums above the threshold as the sum of
the class rows' sums), i.e. within the recursive-summation bound ``n * 2^-53`` relative of the reference's sums; the
unweighted NLL and Brier sums are reassociated within a block (a product and a sum the compiler vectorises) and
summed over blocks, within ``n * 2^-52 * (1 + |S|)`` of the reference's sum ``S``: ``n * 2^-52`` *absolute* (nats
for the NLL) plus ``n * 2^-52`` relative. The relative part is the reference's own rounding (each ``-log p`` and
each addition round by up to ``2^-53`` relative: ``n`` voxels whose reference label has probability 0 add
``-log 1e-15 = 34.5`` nats each, and the reference's sum is then off the exact one by more than ``n * 2^-52``); for
confident, correct voxels, whose terms are near 0, the absolute part dominates and can be a large relative
difference (the product of mantissas rounds away what ``-log p`` of a ``p`` near 1 keeps).

The normalised entropy (the UCE row) is computed here, chunk by chunk, with a vectorised logarithm of the kernel's
own (``log_unit``: the bits of ``p`` give its binary exponent, the rest is ``atanh``'s series; within 3 ulps, where
torch's float64 ``log`` costs several times more). Its value can differ from the reference's (torch's ``log``) by a
few ulps, which moves a voxel to another bin only if its entropy lies that close to a bin edge: a chunk in which a
voxel lies within :func:`entropy_margin` of an edge (128 times the two values' largest difference) takes the caller's
values instead, computed with the reference's own formula over the same chunk. The UCE row's counts are therefore
exactly the reference's; its value sums differ by the per-voxel differences, at most ``(2 C + 8) 2^-53`` relative
each, on top of the order of the additions.

The compiled code is in :mod:`._numba_histogram`, imported on the first update (numba is optional and slow to
import). It is compiled once per machine and number of classes up to :data:`MAX_UNROLLED_CLASSES` (about 10 s for
each count), and once for all larger counts together (the class-by-class path needs no count at compile time: 9,
14, 20 and 105 classes share one kernel), and kept in numba's disk cache; later processes load it (about a second).
Up to :data:`MAX_UNROLLED_CLASSES` classes, the number of classes is the length of a tuple the kernels take first (one
specialisation per count, in which it is a constant: the loops over the classes are unrolled); above, that argument
is None and the count is the probabilities' first dimension. The first call of each specialisation in a process
holds a lock in the cache folder (:func:`monai_unc._jit.cached_kernel`), so that processes compiling different
specialisations at once never write one cache index together.

Without numba (or for other dtypes than float32 / float64) :func:`available` is False and the histogram keeps the
reference path.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..._lazy import lazy_optional
from ..._utils import thread_map

__all__ = [
    "EDGE_BINS",
    "EDGE_COPIES",
    "MAX_UNROLLED_CLASSES",
    "available",
    "entropy_margin",
    "histogram_tables",
    "top_label_limit",
]

#: the most classes for which the kernel's loop over the classes is unrolled (one compiled kernel per count; more
#: classes share one kernel, compiled once for every count)
MAX_UNROLLED_CLASSES = 8

#: the first and the last ``EDGE_BINS`` fine bins of a class row have :data:`EDGE_COPIES` slots each in the kernel's
#: private tables, taken by consecutive voxels in turn and folded into their bins when the tables are unpacked: a
#: confident network puts most class values in these bins (below ``4 / F`` or above ``1 - 4 / F``), and
#: read-modify-writes of one slot by consecutive voxels wait for each other (1.66x slower on such a volume)
EDGE_BINS = 4
#: the slots of each edge bin (a power of two)
EDGE_COPIES = 16
#: the slots past a class row's ``F + 1`` bins
EDGE_SLOTS = 2 * EDGE_BINS * EDGE_COPIES


def available() -> bool:
    """Whether numba imports, so that the fused CPU update can run.

    The kernels are compiled on first use, once per class count up to :data:`MAX_UNROLLED_CLASSES` and once for all
    larger counts together, and kept in numba's disk cache.

    Returns:
        True where numba is installed.

    Example:
        >>> isinstance(available(), bool)
        True
    """
    return _kernels() is not None


def top_label_limit(n_classes: int, n_fine: int, tol: float) -> int:
    """The first fine bin whose values only a voxel's top class can have: its top-label entry is a class row's there.

    A voxel that passed the checks has values in ``[-tol, 1 + tol]`` summing to 1 within ``tol``; a class value above
    ``(1 + (C - 1) tol) / 2`` leaves less than that to every other class. Bins from the returned one on hold only
    values above it (two bins of margin over the threshold's own bin: the bin of ``v`` is ``floor(v * F)`` in float64).

    Args:
        n_classes: ``C``.
        n_fine: fine bins ``F``.
        tol: the tolerance of the range and sum checks.

    Returns:
        The bin (at most ``F + 1``, i.e. no bin, when the threshold is too close to 1).

    Example:
        >>> top_label_limit(3, 15360, 1e-3), top_label_limit(2, 1, 1e-3)
        (7697, 2)
    """
    return min(n_fine + 1, int(math.floor((1.0 + (n_classes - 1) * tol) / 2.0 * n_fine)) + 2)


def entropy_margin(n_classes: int) -> float:
    """The distance to a bin edge (in units of the normalised entropy) within which the kernel's entropy is not used.

    The kernel's logarithm is within 3 ulps of the exact one and torch's (the reference's) within 1 ulp; the ``C``
    terms ``p log p`` have one sign, so both normalised entropies are within ``(2 C + 8) 2^-53`` relative (``h <=
    1``) of the exact value and of each other. The margin, ``(C + 8) 2^-45``, is 128 times that: a voxel farther than
    it from every edge lands in the same bin either way.

    Args:
        n_classes: ``C``.

    Returns:
        The margin.

    Example:
        >>> entropy_margin(3) == 11 * 2.0**-45
        True
    """
    return (n_classes + 8) * 2.0**-45


class _Kernels(NamedTuple):
    """The compiled kernels of one number of classes."""

    tables: Any  #: the fused update of a share of voxels (histogram_tables' work)
    entropy: Any  #: the normalised entropy of a range of voxels, and whether one lies near a bin edge
    logs: Any  #: the kernels' logarithm of float64 values in (0, 1], elementwise (``logs(t, out)``)


def _factory() -> Callable[[int], _Kernels]:
    # numba's kernels (cached on disk), imported here only: importing this module needs no numba
    from . import _numba_histogram  # an ImportError without numba: the getter is None

    tables, entropy_voxels, entropy_classes, logs = _numba_histogram.entry_points()
    built: dict[int, _Kernels] = {}

    def kernel(n_cls: int) -> _Kernels:
        if n_cls not in built:
            if n_cls <= MAX_UNROLLED_CLASSES:
                # the number of classes as the length of the kernels' first argument: one specialisation per count
                cls = tuple(range(n_cls))
                built[n_cls] = _Kernels(functools.partial(tables, cls), functools.partial(entropy_voxels, cls), logs)
            else:
                # the class-by-class path: None in place of the tuple, the count from the probabilities' shape (one
                # kernel for every count above MAX_UNROLLED_CLASSES)
                built[n_cls] = _Kernels(functools.partial(tables, None), entropy_classes, logs)
        return built[n_cls]

    return kernel


def _fold_edges(col: np.ndarray, bins: int) -> np.ndarray:
    """Add the edge bins' copies (``col[:, bins:]``, see :data:`EDGE_BINS`) into their bins; returns ``col[:, :bins]``.

    The kernel puts bin ``b < EDGE_BINS`` of voxel ``i`` into slot ``bins + b * EDGE_COPIES + i % EDGE_COPIES`` and bin
    ``b > F - EDGE_BINS`` into slot ``bins + (EDGE_BINS + F - b) * EDGE_COPIES + i % EDGE_COPIES`` (``F = bins - 1``;
    the second rule wins where both apply). Integer counts stay exact; a float sum adds its copies' partial sums (a
    reassociation: within the same recursive-summation bound).
    """
    extra = col[:, bins:].reshape(col.shape[0], 2, EDGE_BINS, EDGE_COPIES).sum(axis=-1)
    head = col[:, :bins]
    k = min(EDGE_BINS, bins)
    head[:, :k] += extra[:, 0, :k]
    head[:, bins - k :] += extra[:, 1, :k][:, ::-1]  # copy d of the second group is bin F - d
    return head


#: voxels per thread below which the update runs on one thread (a thread and its tables cost more than they save)
MIN_VOXELS_PER_THREAD = 1 << 18


#: the most voxels added to one table of packed counts before it is unpacked (a count stays below 2^32, the low half)
PACKED_VOXELS = (1 << 31) - 1

_COUNT_MASK = np.int64((1 << 32) - 1)

#: the kernels of a number of classes (loaded from numba's disk cache or compiled on first use), or None without the
#: optional dependency
_kernels = lazy_optional(_factory)


def histogram_tables(
    p: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None,
    n_fine: int,
    entropy: Callable[[int, int], np.ndarray] | None,
    tol: float,
    nll_eps: float,
    n_threads: int,
    out: dict[str, np.ndarray],
    chunk: int = 1 << 17,
) -> tuple[int, int, int]:
    """Add one case's voxels to histogram tables in one fused pass.

    Args:
        p: probabilities ``(C, n)``, float32 or float64, C-contiguous (values as given: checked, then clipped).
        y: reference labels ``(n,)`` int64, checked here: labels outside ``[0, C)`` are counted, never used as an index.
        w: voxel weights ``(n,)`` float64 or None.
        n_fine: fine bins ``F`` (below ``2^31``); tables have ``F + 1`` bins (a value of 1 lands in the extra one).
        entropy: fills the normalised-entropy row ``C + 1``: ``entropy(start, stop)`` returns the normalised
            entropy (float64, clipped to [0, 1]) of voxels ``start:stop`` with the reference's formula; the kernel
            computes the row's values itself and calls it only for a chunk with a voxel near a bin edge (see the
            module docstring), so that the row's counts equal the reference's; None leaves the row empty.
        tol: tolerance of the range and sum checks.
        nll_eps: the probability of the true label is clipped to at least this inside ``-log p`` (a normal float64,
            at least ``2.2e-308``: the kernel reads each clipped factor's binary exponent from its bits).
        n_threads: the most threads (each with its own packed counts, and its own sums, weights and scalars beyond the
            first; at least :data:`MIN_VOXELS_PER_THREAD` voxels each).
        chunk: voxels per chunk of the entropy row (``entropy``'s temporaries stay small); the same chunks as the
            reference's, whose torch reduction is then the same computation.
        out: the tables added to, C-contiguous: ``total``, ``hits`` ``(C + 2, F + 1)`` int64, ``sums`` float64,
            ``wtotal`` / ``whits`` (float64, used with weights only) and ``scalars`` ``(3,)`` (weight, NLL sum, Brier
            sum).

    Returns:
        ``(invalid, nan, labels)``: ``invalid`` is positive if and only if a voxel fails the checks (it counts the
        values out of range or NaN and the voxels whose sum is off 1 by more than ``tol``), ``nan`` the NaN values,
        ``labels`` the labels outside ``[0, C)``. After a call with ``invalid > 0`` or ``labels > 0`` the tables hold
        garbage.
    """
    kernels = _kernels()
    if kernels is None:
        raise RuntimeError("the fused CPU kernel needs numba (pip install 'monai-unc[fast]')")
    if n_fine >= (1 << 31) - EDGE_SLOTS:
        raise ValueError(f"n_fine must be below 2**31 - {EDGE_SLOTS} (the kernel's bins are uint32), got {n_fine}")
    n_cls, n = p.shape
    kernel, entropy_kernel, _ = kernels(int(n_cls))
    n_blocks = max(1, min(int(n_threads), n // MIN_VOXELS_PER_THREAD))
    weighted = w is not None
    total, hits = out["total"], out["hits"]
    rows, bins = total.shape
    width = 4 if weighted else 2  # values a bin: packed count and hit, value sum (, weighted count and hit)
    # per thread: private slots (counts packed with hits, and the float sums) unpacked into the caller's tables after
    # at most PACKED_VOXELS voxels, and scalars (the first thread's are the caller's); an int64 buffer and its
    # float64 view
    # (the class rows' edge bins' copies past the F + 1 bins of every row: see EDGE_BINS)
    slots = [np.zeros((rows, (bins + EDGE_SLOTS) * width), dtype=np.int64) for _ in range(n_blocks)]
    scalars = [out["scalars"]] + [np.zeros(3) for _ in range(1, n_blocks)]
    flags = np.zeros((n_blocks, 3), dtype=np.int64)
    top_limit = top_label_limit(n_cls, n_fine, tol)

    def run(start: int, stop: int, ent: np.ndarray | None) -> None:
        def block(b: int) -> None:
            lo, hi = start + b * (stop - start) // n_blocks, start + (b + 1) * (stop - start) // n_blocks
            kernel(
                p,
                y,
                w,
                ent,
                start,
                n_fine,
                top_limit,
                tol,
                nll_eps,
                lo,
                hi,
                slots[b],
                slots[b].view(np.float64),
                scalars[b],
                flags[b],
            )

        thread_map(block, range(n_blocks), n_blocks)  # one pool per thread count, shared by the calls

    def unpack() -> None:
        for slot in slots:
            packed = _fold_edges(slot[:, 0::width], bins)
            # the top-label row from top_limit on: the class rows' entries there (see top_label_limit)
            packed[n_cls, top_limit:] += packed[:n_cls, top_limit:].sum(axis=0)
            np.add(total, packed & _COUNT_MASK, out=total)
            np.add(hits, packed >> 32, out=hits)
            for k, name in enumerate(("sums", "wtotal", "whits")[: width - 1], start=1):
                col = _fold_edges(slot.view(np.float64)[:, k::width], bins)
                col[n_cls, top_limit:] += col[:n_cls, top_limit:].sum(axis=0)
                np.add(out[name], col, out=out[name])
            slot[...] = 0

    step = PACKED_VOXELS if entropy is None else max(1, min(chunk, PACKED_VOXELS))
    margin = entropy_margin(n_cls) * n_fine  # in units of a bin
    # the kernel's entropy only where few chunks are expected to fall back (about 2 margin step voxels of a chunk lie
    # within the margin of an edge when the entropies spread over many bins; a very large n_fine takes the caller's)
    ent_buf = np.empty(min(step, n)) if entropy is not None and 2.0 * margin * min(step, n) < 0.5 else None
    log_c = math.log(n_cls)

    def fast_entropy(start: int, stop: int) -> np.ndarray | None:
        # the kernel's normalised entropy of voxels start:stop (each thread a share), None if one is near a bin edge
        assert ent_buf is not None
        out = ent_buf[: stop - start]

        parts = n_blocks if stop - start >= 2 * n_blocks else 1

        def share(b: int) -> bool:
            lo, hi = start + b * (stop - start) // parts, start + (b + 1) * (stop - start) // parts
            return bool(entropy_kernel(p, lo, hi, out[lo - start : hi - start], log_c, float(n_fine), margin))

        near = any(thread_map(share, range(parts), parts))
        return None if near else out

    done = 0  # voxels in the packed tables
    for start in range(0, n, step):
        stop = min(start + step, n)
        if done + stop - start > PACKED_VOXELS:
            unpack()
            done = 0
        ent = None
        if entropy is not None:
            # the kernel's entropy where every voxel lies farther than the margin from a bin edge: the same bins as
            # the caller's formula (the reference's); else the caller's values for the whole chunk
            ent = None if ent_buf is None else fast_entropy(start, stop)
            if ent is None:
                ent = np.ascontiguousarray(entropy(start, stop), dtype=np.float64)
        run(start, stop, ent)
        done += stop - start
    unpack()
    for extra in scalars[1:]:
        np.add(scalars[0], extra, out=scalars[0])
    return int(flags[:, 0].sum()), int(flags[:, 1].sum()), int(flags[:, 2].sum())
