"""The fused CPU update of :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`: one pass over the voxels.

The reference update (``histogram.py``) makes about 25 torch passes over each chunk of voxels (copy, checks, top
label, bin indices, one ``scatter_add_`` per table and row, NLL, Brier). This module does the same work in one
compiled pass (numba, the optional ``fast`` extra) over blocks of voxels that stay in the cache. Per block:

- one vectorised loop over the voxels reads every class's probability once (the loop over the classes unrolled: one
  kernel is compiled per number of classes up to :data:`MAX_UNROLLED_CLASSES`; more classes take one vectorised loop
  per class instead), checks it, clips it, computes its bin, and keeps the voxel's top label and value, the value of
  its reference label and its sum of squares;
- one scalar loop per class row adds the block's voxels to that row's counts and value sums, which sit side by side
  (one cache line per update); a count and a hit share one int64 update (the count in the low 32 bits, the hit in
  the high ones, unpacked before 2^32 voxels reach one table);
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

Without numba (or for other dtypes than float32 / float64) :func:`available` is False and the histogram keeps the
reference path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from ..._lazy import lazy_optional

__all__ = ["MAX_UNROLLED_CLASSES", "available", "entropy_margin", "histogram_tables", "top_label_limit"]

#: the most classes for which the kernel's loop over the classes is unrolled (one compiled kernel per count)
MAX_UNROLLED_CLASSES = 8


def available() -> bool:
    """Whether numba imports (the kernels are compiled on first use in each process, not cached on disk)."""
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


def _log_constants() -> tuple[float, float, tuple[float, ...]]:
    """The logarithm's constants, from exact arithmetic.

    ``log 2`` split in two (``hi`` with 20 significant bits: ``k * hi`` is exact for every binary exponent ``k`` of a
    float64) and the coefficients ``1 / (2 j + 1)``, ``j = 1 .. 10``, of ``atanh``'s odd series.
    """
    import decimal
    import struct

    with decimal.localcontext() as ctx:
        ctx.prec = 60
        ln2 = decimal.Decimal(2).ln()
        bits = struct.unpack("<q", struct.pack("<d", float(ln2)))[0] & ~((1 << 32) - 1)
        hi = struct.unpack("<d", struct.pack("<q", bits))[0]
        lo = float(ln2 - decimal.Decimal(hi))
    return hi, lo, tuple(1.0 / (2 * j + 1) for j in range(1, 11))


_LN2_HI, _LN2_LO, _ATANH_COEFFS = _log_constants()
#: the bits of sqrt(2) / 2: subtracted from a float64's bits, the exponent field of the difference is the power of two
#: that brings the float into [sqrt(2) / 2, sqrt(2))
_LOG_OFFSET = np.int64(0x3FE6A09E667F3BCD)
_EXPONENT_BITS = np.int64(-(1 << 52))  # 0xFFF0000000000000: sign and exponent fields


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


def _build(n_cls: int) -> _Kernels:
    """The kernels for ``n_cls`` classes (a compile-time constant of their loops): the tables and the entropy."""
    import numba

    # Not cached on disk (cache=False): numba keys a closure's cache entry by the pickled values it captures, and the
    # kernels below capture other compiled functions, whose pickles hold a per-process id, so every process compiled
    # them again and added entries (the cache folder grew with each run); the kernels of every class count also share
    # one cache index per function, and a CI run that filled that cache from parallel processes left entries a later
    # process ran with "double free or corruption". Compiling takes a few seconds per class count and process.
    jit = numba.njit(cache=False, nogil=True, boundscheck=False)
    # the NLL / Brier sums of a block: reassociated (vectorised products and sums), within their stated bound
    reassoc = numba.njit(cache=False, nogil=True, boundscheck=False, fastmath={"reassoc"})
    # the normalised entropy: no division-by-zero checks (numpy's error model), so that LLVM vectorises the divisions
    vec = numba.njit(cache=False, nogil=True, boundscheck=False, error_model="numpy")
    NC = n_cls
    UNROLLED = n_cls <= MAX_UNROLLED_CLASSES
    # voxels per block: its buffers (C float64 values and uint32 bins, and eight arrays of a voxel) stay in the L1 /
    # L2 cache; the per-class loops of many classes take smaller blocks
    BLOCK = 1024 if UNROLLED else 512
    # the NLL's mantissa products: at most 512 factors in [1, 2) (below 2^512: no overflow)
    PROD_CHUNK = 512
    MANTISSA = np.int64(0x000FFFFFFFFFFFFF)
    ONE_BITS = np.int64(0x3FF0000000000000)

    # Bins and top labels are uint32: an unsigned index needs no wraparound of negative indices (a sign test and an
    # add per table update in the scatters), and the bins of values in [0, 1] times F < 2^31 fit.
    # The loops below are written so that LLVM vectorises them: unsigned or ``range`` indices (a signed ``start + i``
    # could be negative as far as the compiler knows: numba's wraparound test would stop the vectoriser), few arrays
    # (the runtime alias checks stay within LLVM's budget). The scatters into the tables run one row at a time (one
    # table row and one index array per loop: measured 2x faster than all rows per voxel).

    @jit
    def voxels(p, b0, yb, vals, bins, conf, pred, top_bins, p_true, sq, n_fine, tol):
        # every class of the voxels b0, b0 + 1, ... of a block, for NC <= MAX_UNROLLED_CLASSES: the value clipped to
        # [0, 1] (NaN to 0: binned, never used) and its bin; the top value and label (the first maximum wins), the
        # value of the reference label, the top value's bin and the sum of squares; returns whether a voxel fails the
        # checks (a value outside [-tol, 1 + tol] or a sum off 1 by more than tol, NaN included) and whether a label
        # is outside [0, C); the exact counts are taken by count_values and count_labels, only for a block that fails
        lo, hi = -tol, 1.0 + tol
        bad = False
        bad_labels = False
        for i in range(yb.shape[0]):
            k = np.uint64(b0 + i)
            yi = yb[i]
            s = 0.0
            q = 0.0
            best = -1.0
            lab = np.uint32(0)
            pt = 0.0
            out = False
            for c in range(NC):
                raw = np.float64(p[c, k])
                out |= (raw < lo) | (raw > hi)  # | not or: no branch
                s += raw
                v = raw if raw > 0.0 else 0.0
                v = v if v < 1.0 else 1.0
                vals[c, i] = v
                bins[c, i] = np.uint32(v * n_fine)
                q += v * v
                better = v > best
                best = v if better else best
                lab = np.uint32(c) if better else lab
                pt += v if yi == c else 0.0
            d = abs(s - 1.0)
            bad |= out | (d > tol) | (d != d)
            bad_labels |= np.uint64(yi) >= np.uint64(NC)  # a negative label too: one compare
            conf[i] = best
            pred[i] = lab
            top_bins[i] = np.uint32(best * n_fine)
            p_true[i] = pt
            sq[i] = q
        return bad, bad_labels

    @jit
    def class_values(pc, vc, bc, s, sq, conf, pred, c, n_fine, tol):
        # one class of a block, for NC > MAX_UNROLLED_CLASSES: as voxels, class by class (class 0 starts the sums, the
        # squares and the running top label); returns whether a value is outside [-tol, 1 + tol] (a NaN makes the
        # voxel's sum NaN, which sum_off counts)
        out = False
        lo, hi = -tol, 1.0 + tol
        first = c == 0
        for i in range(vc.shape[0]):
            raw = np.float64(pc[i])
            out |= (raw < lo) | (raw > hi)
            v = raw if raw > 0.0 else 0.0
            v = v if v < 1.0 else 1.0
            vc[i] = v
            bc[i] = np.uint32(v * n_fine)
            s0, q0, cur, lab = s[i], sq[i], conf[i], pred[i]  # loaded before the choice: selects, not branches
            s[i] = raw if first else s0 + raw
            sq[i] = v * v if first else q0 + v * v
            better = first | (v > cur)
            conf[i] = v if better else cur
            pred[i] = np.uint32(c) if better else lab
        return out

    @jit
    def true_values(vals, y, p_true):
        # the clipped value of each voxel's reference label (in [0, C): count_labels is 0): one gather
        for i in range(p_true.shape[0]):
            p_true[i] = vals[y[i], i]

    @jit
    def count_labels(y):
        # the labels outside [0, C)
        bad = 0
        for i in range(y.shape[0]):
            yi = y[i]
            bad += (yi < 0) | (yi >= NC)
        return bad

    @jit
    def sum_off(s, tol):
        bad = 0
        for i in range(s.shape[0]):
            d = abs(s[i] - 1.0)
            bad += (d > tol) | (d != d)
        return bad

    @jit
    def count_values(pc, tol):
        # the values of one class of a block outside [-tol, 1 + tol] (NaN included) and the NaNs (a failing block)
        out = 0
        nan = 0
        for i in range(pc.shape[0]):
            raw = np.float64(pc[i])
            out += (raw < -tol) | (raw > 1.0 + tol) | (raw != raw)
            nan += raw != raw
        return out, nan

    @jit
    def count_sums(p, b0, m, tol):
        # the voxels of a failing block whose sum is off 1 by more than tol (NaN included)
        bad = 0
        for i in range(m):
            s = 0.0
            for c in range(NC):
                s += np.float64(p[c, b0 + i])
            d = abs(s - 1.0)
            bad += (d > tol) | (d != d)
        return bad

    @jit
    def values_to_bins(v, b, n_fine):
        for i in range(b.shape[0]):
            b[i] = np.uint32(v[i] * n_fine)

    @jit
    def entropy_values(e, v):
        for i in range(v.shape[0]):
            x = e[i]
            v[i] = x if x == x else 0.0  # NaN (an invalid voxel): binned as 0, never used

    @reassoc
    def product(f):
        # one vectorised product (at most PROD_CHUNK factors in [1, 2): no overflow)
        r = 1.0
        for i in range(f.shape[0]):
            r *= f[i]
        return r

    @reassoc
    def nll_brier(pt, sq, nll_eps, f):
        # the unweighted NLL and Brier terms of a block: returns (E, M, brier) with -sum log max(p_y, eps) =
        # -(E log 2 + log M): each factor max(p_y, eps) (a normal float64 in [eps, 1]) split into its binary exponent
        # (summed as an integer) and its mantissa in [1, 2) (multiplied, PROD_CHUNK at a time, renormalised by frexp)
        n = pt.shape[0]
        fi = f.view(np.int64)
        for i in range(n):
            f[i] = max(pt[i], nll_eps)
        e = 0
        for i in range(n):
            bits = fi[i]
            e += (bits >> 52) - 1023
            fi[i] = (bits & MANTISSA) | ONE_BITS
        m = 1.0
        for k in range(0, n, PROD_CHUNK):
            r, er = math.frexp(product(f[k : k + PROD_CHUNK]))
            m, em = math.frexp(m * r)
            e += er + em
        b = 0.0
        for i in range(n):
            b += sq[i] - 2.0 * pt[i] + 1.0
        return e, m, b

    @jit
    def add(it, ft, bin_, v, hit, w, i):
        # one voxel into a row's slots (S values a bin side by side: one cache line per update): its count and hit
        # packed in one int64 at it[S j], its value at ft[S j + 1] and with weights its weighted count and hit at
        # ft[S j + 2], ft[S j + 3] (it and ft: two views of one buffer)
        if w is not None:
            j = np.intp(bin_) * 4
            it[j] += 1 + (np.int64(hit) << 32)
            wi = w[i]
            ft[j + 1] += v * wi
            ft[j + 2] += wi
            ft[j + 3] += wi if hit else 0.0
        else:
            j = np.intp(bin_) * 2
            it[j] += 1 + (np.int64(hit) << 32)
            ft[j + 1] += v

    @jit
    def scatter(b, v, y, c, w, it, ft):
        # one class row of a block: a hit is y == c
        for i in range(b.shape[0]):
            add(it, ft, b[i], v[i], y[i] == c, w, i)

    @jit
    def scatter_below(b, v, y, pred, w, it, ft, limit):
        # the top-label (or entropy) row: a hit is y == pred; only the voxels whose bin is below limit
        for i in range(b.shape[0]):
            if b[i] < limit:
                add(it, ft, b[i], v[i], y[i] == pred[i], w, i)

    # one thread's share, [start, stop), into its own tables; not numba's parallel mode (its OpenMP threading layer
    # kills a process that forks after using it): the caller runs the blocks in Python threads (nogil)
    @jit
    def tables(p, y, w, ent, ent_off, n_fine, top_limit, tol, nll_eps, start, stop, it, ft, scal, flags):
        # w (weights) and ent (the normalised entropy of voxels ent_off, ent_off + 1, ...) are None or an array: numba
        # compiles one kernel per combination and prunes the branches of the other (``is None`` tests on arguments
        # are resolved at compile time); it / ft: the slots of C + 2 rows (int64 and float64 views of one buffer)
        block = BLOCK
        vals = np.empty((NC, block))
        bins = np.empty((NC, block), dtype=np.uint32)
        conf = np.empty(block)
        pred = np.empty(block, dtype=np.uint32)
        p_true = np.empty(block)
        sq = np.empty(block)
        s = np.empty(block)
        f = np.empty(block)
        ev = np.empty(block)
        eb = np.empty(block, dtype=np.uint32)
        top_bins = np.empty(block, dtype=np.uint32)
        invalid = 0
        nan = 0
        labels = 0
        # unweighted NLL: the log of a product of mantissas times 2 ** the summed exponents (nll_brier)
        mant = 1.0
        exps = 0
        nll_sum = 0.0
        brier_sum = 0.0
        w_sum = 0.0
        for b0 in range(start, stop, block):
            m = min(block, stop - b0)
            yb = y[b0 : b0 + m]
            wb = w[b0 : b0 + m] if w is not None else None
            cf, pr, pt, sqb = conf[:m], pred[:m], p_true[:m], sq[:m]
            tb = top_bins[:m]
            if UNROLLED:
                bad, bad_labels = voxels(p, b0, yb, vals, bins, conf, pred, top_bins, p_true, sq, n_fine, tol)
                off = 0
                if bad_labels:
                    labels += count_labels(yb)
            else:
                bad = False
                for c in range(NC):
                    pc = p[c, b0 : b0 + m]
                    bad |= class_values(pc, vals[c, :m], bins[c, :m], s[:m], sqb, cf, pr, c, n_fine, tol)
                off = sum_off(s[:m], tol)
                nl = count_labels(yb)
                labels += nl
                if nl == 0:  # the gather reads vals[y]: only with labels in range (else the tables are not used)
                    true_values(vals[:, :m], yb, pt)
                values_to_bins(cf, tb, n_fine)
            for c in range(NC):
                scatter(bins[c, :m], vals[c, :m], yb, c, wb, it[c], ft[c])
            if bad or off:  # the tables of this call are not used (the caller raises or falls back)
                invalid += count_sums(p, b0, m, tol)
                for c in range(NC):
                    out, nn = count_values(p[c, b0 : b0 + m], tol)
                    invalid += out
                    nan += nn
            scatter_below(tb, cf, yb, pr, wb, it[NC], ft[NC], top_limit)
            if ent is not None:
                e, eo = ev[:m], eb[:m]
                entropy_values(ent[b0 - ent_off : b0 - ent_off + m], e)
                values_to_bins(e, eo, n_fine)
                scatter_below(eo, e, yb, pr, wb, it[NC + 1], ft[NC + 1], n_fine + 1)
            if w is not None:
                for i in range(m):
                    wi = wb[i]
                    w_sum += wi
                    nll_sum += -math.log(max(pt[i], nll_eps)) * wi
                    brier_sum += (sqb[i] - 2.0 * pt[i] + 1.0) * wi
            else:
                be, bm, bb = nll_brier(pt, sqb, nll_eps, f[:m])
                mant, em = math.frexp(mant * bm)
                exps += be + em
                brier_sum += bb
        if w is None:
            w_sum = np.float64(stop - start)
            nll_sum = -(math.log(mant) + exps * math.log(2.0))
        scal[0] += w_sum
        scal[1] += nll_sum
        scal[2] += brier_sum
        flags[0] += invalid
        flags[1] += nan
        flags[2] += labels

    TINY = float(np.finfo(np.float64).tiny)
    C1, C2, C3, C4, C5, C6, C7, C8, C9, C10 = _ATANH_COEFFS

    @vec
    def log_unit(t):
        # the natural logarithm of a normal float64 t in (0, 1], within 3 ulps (see _log_constants): t = z 2^k with z in
        # [sqrt(2) / 2, sqrt(2)) taken from t's bits (branch-free), log z = 2 atanh(s), s = (z - 1) / (z + 1), |s| <=
        # 0.1716, as its odd series to s^21 (the next term is below 2^-60 of log z)
        ix = np.float64(t).view(np.int64)
        tmp = ix - _LOG_OFFSET
        k = np.float64(tmp >> 52)
        z = np.int64(ix - (tmp & _EXPONENT_BITS)).view(np.float64)
        f = z - 1.0
        s = f / (2.0 + f)
        q = s * s
        r = ((((((((C10 * q + C9) * q + C8) * q + C7) * q + C6) * q + C5) * q + C4) * q + C3) * q + C2) * q + C1
        two_s = 2.0 * s
        return k * _LN2_HI + ((two_s + two_s * (q * r)) + k * _LN2_LO)

    @vec
    def normalised_entropy(acc, log_c, n_fine, margin):
        # -acc / log C clipped to [0, 1] (the reference's operations), and whether its scaled value h F lies within
        # margin of a bin edge (edge 0 excluded: values below margin are in bin 0 whichever way they round)
        h = -acc / log_c
        h = h if h > 0.0 else 0.0
        h = h if h < 1.0 else 1.0
        x = h * n_fine
        fr = x - np.floor(x)
        return h, (x >= margin) & ((fr < margin) | (fr > 1.0 - margin))

    @vec
    def entropy_voxels(p, start, stop, out, log_c, n_fine, margin):
        # the normalised entropy of voxels start:stop into out[0:stop - start], NC <= MAX_UNROLLED_CLASSES (the class
        # loop unrolled); returns whether one lies within margin of a bin edge
        near = False
        for i in range(stop - start):
            k = np.uint64(start + i)
            acc = 0.0
            for c in range(NC):
                raw = np.float64(p[c, k])
                v = raw if raw > 0.0 else 0.0  # NaN to 0 (an invalid voxel: its tables are not used)
                v = v if v < 1.0 else 1.0
                t = v if v > TINY else TINY
                acc += v * log_unit(t)
            h, nr = normalised_entropy(acc, log_c, n_fine, margin)
            out[i] = h
            near |= nr
        return near

    @vec
    def entropy_classes(p, start, stop, out, log_c, n_fine, margin):
        # as entropy_voxels, for NC > MAX_UNROLLED_CLASSES: class by class over blocks of voxels (out accumulates)
        near = False
        for b0 in range(start, stop, BLOCK):
            m = min(BLOCK, stop - b0)
            o = out[b0 - start : b0 - start + m]
            for i in range(m):
                o[i] = 0.0
            for c in range(NC):
                pc = p[c, b0 : b0 + m]
                for i in range(m):
                    raw = np.float64(pc[i])
                    v = raw if raw > 0.0 else 0.0
                    v = v if v < 1.0 else 1.0
                    t = v if v > TINY else TINY
                    o[i] += v * log_unit(t)
            for i in range(m):
                h, nr = normalised_entropy(o[i], log_c, n_fine, margin)
                o[i] = h
                near |= nr
        return near

    @vec
    def logs(t, out):
        # log_unit over an array (for the tests)
        for i in range(t.shape[0]):
            out[i] = log_unit(t[i])

    return _Kernels(tables, entropy_voxels if UNROLLED else entropy_classes, logs)


def _factory() -> Callable[[int], Any]:
    import numba  # noqa: F401  (the getter is None without it)

    built: dict[int, Any] = {}

    def kernel(n_cls: int) -> Any:
        if n_cls not in built:
            built[n_cls] = _build(n_cls)
        return built[n_cls]

    return kernel


#: voxels per thread below which the update runs on one thread (a thread and its tables cost more than they save)
MIN_VOXELS_PER_THREAD = 1 << 18


#: the most voxels added to one table of packed counts before it is unpacked (a count stays below 2^32, the low half)
PACKED_VOXELS = (1 << 31) - 1

_COUNT_MASK = np.int64((1 << 32) - 1)

#: the kernel of a number of classes (built on first use), or None without the optional dependency
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
        nll_eps: the probability of the true label is clipped to at least this inside ``-log p`` (at least
            ``1e-19``: the product of 16 such factors must stay a normal float64).
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
    if n_fine >= 1 << 31:
        raise ValueError(f"n_fine must be below 2**31 (the kernel's bins are uint32), got {n_fine}")
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
    slots = [np.zeros((rows, bins * width), dtype=np.int64) for _ in range(n_blocks)]
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

        if pool is None:
            block(0)
        else:
            list(pool.map(block, range(n_blocks)))

    def unpack() -> None:
        for slot in slots:
            packed, values = slot[:, 0::width], slot.view(np.float64)
            # the top-label row from top_limit on: the class rows' entries there (see top_label_limit)
            packed[n_cls, top_limit:] += packed[:n_cls, top_limit:].sum(axis=0)
            np.add(total, packed & _COUNT_MASK, out=total)
            np.add(hits, packed >> 32, out=hits)
            for k, name in enumerate(("sums", "wtotal", "whits")[: width - 1], start=1):
                col = values[:, k::width]
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

        parts = n_blocks if pool is not None and stop - start >= 2 * n_blocks else 1

        def share(b: int) -> bool:
            lo, hi = start + b * (stop - start) // parts, start + (b + 1) * (stop - start) // parts
            return bool(entropy_kernel(p, lo, hi, out[lo - start : hi - start], log_c, float(n_fine), margin))

        near = share(0) if parts == 1 else any(list(pool.map(share, range(parts))))
        return None if near else out

    pool = ThreadPoolExecutor(n_blocks) if n_blocks > 1 else None
    try:
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
    finally:
        if pool is not None:
            pool.shutdown()
    unpack()
    for extra in scalars[1:]:
        np.add(scalars[0], extra, out=scalars[0])
    return int(flags[:, 0].sum()), int(flags[:, 1].sum()), int(flags[:, 2].sum())
