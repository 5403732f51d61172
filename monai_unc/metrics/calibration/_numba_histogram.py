"""The numba kernels of :mod:`._cpu_kernel` (imported by it only where numba is installed), cached on disk.

Every function is a module-level compiled function (``cache=True``): numba keeps its machine code in its disk cache
(``__pycache__`` beside this file, or ``$NUMBA_CACHE_DIR``), so a process loads what an earlier process compiled
instead of compiling again (a few seconds per kernel); where numba finds no writable cache folder they are compiled in
each process (:func:`monai_unc._jit.njit`). Up to :data:`._cpu_kernel.MAX_UNROLLED_CLASSES` classes, the number of
classes is the *length* of the first argument of the kernels that loop over the classes, ``cls = tuple(range(C))``
(numba type ``UniTuple(int64, C)``): each such class count is its own specialisation, in which ``len(cls)`` is a
constant, so LLVM unrolls the loops over the classes, as it did for the earlier kernels (closures over the count,
which numba could not cache: it keyed a closure's entry by the pickled values it captures, a per-process id for a
captured compiled function). More classes take the class-by-class path, which needs no count at compile time: ``cls``
is None there (``tables``; ``entropy_classes`` takes no ``cls``) and the count is the probabilities' first dimension,
so one kernel (per combination of the other arguments' types) serves every count above the unrolled ones. The
kernels call other functions of this module as globals (never captured). Every constant the compiled code uses is
defined in this file: numba invalidates a cache entry when the source file of its function changes, not when another
module does.

The entry points are wrapped by :func:`monai_unc._jit.cached_kernel`: the first call of each signature in a process,
the only one that may load, compile or save, holds a lock on a file in the cache folder, so that processes that
compile different signatures (class counts up to the unrolled ones, dtypes) at the same time never write one cache
index together.
"""

from __future__ import annotations

import decimal
import math
import struct
from typing import Any

import numpy as np

from ..._jit import cached_kernel, njit
from ._cpu_kernel import EDGE_BINS as _PUBLIC_EDGE_BINS
from ._cpu_kernel import EDGE_COPIES as _PUBLIC_EDGE_COPIES

__all__ = ["entry_points"]

#: the class rows' edge bins (the first and the last EDGE_BINS) each have EDGE_COPIES slots, taken by consecutive
#: voxels in turn (:data:`._cpu_kernel.EDGE_BINS`, :data:`._cpu_kernel.EDGE_COPIES`, repeated here as above)
EDGE_BINS = 4
EDGE_COPIES = 16
if (EDGE_BINS, EDGE_COPIES) != (_PUBLIC_EDGE_BINS, _PUBLIC_EDGE_COPIES):  # pragma: no cover - as above
    raise RuntimeError("_numba_histogram.EDGE_BINS / EDGE_COPIES must equal _cpu_kernel's")
# voxels per block: its buffers (C float64 values and uint32 bins, and eight arrays of a voxel) stay in the L1 / L2
# cache; the per-class loops of many classes take smaller blocks
UNROLLED_BLOCK = 1024
CLASS_BLOCK = 512
# the NLL's mantissa products: at most 512 factors in [1, 2) (below 2^512: no overflow)
PROD_CHUNK = 512
MANTISSA = np.int64(0x000FFFFFFFFFFFFF)
ONE_BITS = np.int64(0x3FF0000000000000)


def _log_constants() -> tuple[float, float, tuple[float, ...]]:
    """The logarithm's constants, from exact arithmetic.

    ``log 2`` split in two (``hi`` with 20 significant bits: ``k * hi`` is exact for every binary exponent ``k`` of a
    float64) and the coefficients ``1 / (2 j + 1)``, ``j = 1 .. 10``, of ``atanh``'s odd series.
    """
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
TINY = float(np.finfo(np.float64).tiny)
C1, C2, C3, C4, C5, C6, C7, C8, C9, C10 = _ATANH_COEFFS

# numba.njit(cache=True, ...) where numba finds a writable cache folder (monai_unc._jit.njit)
_jit = njit(nogil=True, boundscheck=False)
# the NLL / Brier sums of a block: reassociated (vectorised products and sums), within their stated bound
_reassoc = njit(nogil=True, boundscheck=False, fastmath={"reassoc"})
# the normalised entropy: no division-by-zero checks (numpy's error model), so that LLVM vectorises the divisions
_vec = njit(nogil=True, boundscheck=False, error_model="numpy")

# Bins and top labels are uint32: an unsigned index needs no wraparound of negative indices (a sign test and an
# add per table update in the scatters), and the bins of values in [0, 1] times F < 2^31 fit.
# The loops below are written so that LLVM vectorises them: unsigned or ``range`` indices (a signed ``start + i``
# could be negative as far as the compiler knows: numba's wraparound test would stop the vectoriser), few arrays
# (the runtime alias checks stay within LLVM's budget). The scatters into the tables run one row at a time (one
# table row and one index array per loop: measured 2x faster than all rows per voxel).

@_jit
def class_slot(b, i, n_fine):
    # the slot of a class row that takes bin b of voxel i of a block: b itself, except in the EDGE_BINS first and
    # last bins, which have EDGE_COPIES slots each past the table's F + 1 bins (lane i mod EDGE_COPIES); branch-free
    # selects (the vectorised loops stay vectorised); the caller folds the copies into their bins (_cpu_kernel)
    lane = np.uint32(i & (EDGE_COPIES - 1))
    low = np.uint32(n_fine + 1) + b * np.uint32(EDGE_COPIES) + lane
    high = np.uint32(n_fine + 1 + EDGE_BINS * EDGE_COPIES) + (np.uint32(n_fine) - b) * np.uint32(EDGE_COPIES) + lane
    r = low if b < np.uint32(EDGE_BINS) else b
    return high if np.int64(b) > np.int64(n_fine) - EDGE_BINS else r

@_jit
def voxels(cls, p, b0, yb, vals, bins, conf, pred, top_bins, p_true, sq, n_fine, tol):
    # every class of the voxels b0, b0 + 1, ... of a block, for NC <= MAX_UNROLLED_CLASSES: the value clipped to
    # [0, 1] (NaN to 0: binned, never used) and its bin; the top value and label (the first maximum wins), the
    # value of the reference label, the top value's bin and the sum of squares; returns whether a voxel fails the
    # checks (a value outside [-tol, 1 + tol] or a sum off 1 by more than tol, NaN included) and whether a label
    # is outside [0, C); the exact counts are taken by count_values and count_labels, only for a block that fails
    NC = len(cls)
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
            bins[c, i] = class_slot(np.uint32(v * n_fine), i, n_fine)
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

@_jit
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
        bc[i] = class_slot(np.uint32(v * n_fine), i, n_fine)
        s0, q0, cur, lab = s[i], sq[i], conf[i], pred[i]  # loaded before the choice: selects, not branches
        s[i] = raw if first else s0 + raw
        sq[i] = v * v if first else q0 + v * v
        better = first | (v > cur)
        conf[i] = v if better else cur
        pred[i] = np.uint32(c) if better else lab
    return out

@_jit
def true_values(vals, y, p_true):
    # the clipped value of each voxel's reference label (in [0, C): count_labels is 0): one gather
    for i in range(p_true.shape[0]):
        p_true[i] = vals[y[i], i]

@_jit
def count_labels(NC, y):
    # the labels outside [0, NC)
    bad = 0
    for i in range(y.shape[0]):
        yi = y[i]
        bad += (yi < 0) | (yi >= NC)
    return bad

@_jit
def sum_off(s, tol):
    bad = 0
    for i in range(s.shape[0]):
        d = abs(s[i] - 1.0)
        bad += (d > tol) | (d != d)
    return bad

@_jit
def count_values(pc, tol):
    # the values of one class of a block outside [-tol, 1 + tol] (NaN included) and the NaNs (a failing block)
    out = 0
    nan = 0
    for i in range(pc.shape[0]):
        raw = np.float64(pc[i])
        out += (raw < -tol) | (raw > 1.0 + tol) | (raw != raw)
        nan += raw != raw
    return out, nan

@_jit
def count_sums(NC, p, b0, m, tol):
    # the voxels of a failing block whose sum over the NC classes is off 1 by more than tol (NaN included)
    bad = 0
    for i in range(m):
        s = 0.0
        for c in range(NC):
            s += np.float64(p[c, b0 + i])
        d = abs(s - 1.0)
        bad += (d > tol) | (d != d)
    return bad

@_jit
def values_to_bins(v, b, n_fine):
    for i in range(b.shape[0]):
        b[i] = np.uint32(v[i] * n_fine)

@_jit
def entropy_values(e, v):
    for i in range(v.shape[0]):
        x = e[i]
        v[i] = x if x == x else 0.0  # NaN (an invalid voxel): binned as 0, never used

@_reassoc
def product(f):
    # one vectorised product (at most PROD_CHUNK factors in [1, 2): no overflow)
    r = 1.0
    for i in range(f.shape[0]):
        r *= f[i]
    return r

@_reassoc
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

@_jit
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

@_jit
def scatter(b, v, y, c, w, it, ft):
    # one class row of a block: a hit is y == c
    for i in range(b.shape[0]):
        add(it, ft, b[i], v[i], y[i] == c, w, i)

@_jit
def scatter_below(b, v, y, pred, w, it, ft, limit):
    # the top-label (or entropy) row: a hit is y == pred; only the voxels whose bin is below limit
    for i in range(b.shape[0]):
        if b[i] < limit:
            add(it, ft, b[i], v[i], y[i] == pred[i], w, i)

# one thread's share, [start, stop), into its own tables; not numba's parallel mode (its OpenMP threading layer
# kills a process that forks after using it): the caller runs the blocks in Python threads (nogil)
@_jit
def tables(cls, p, y, w, ent, ent_off, n_fine, top_limit, tol, nll_eps, start, stop, it, ft, scal, flags):
    # cls: tuple(range(C)) for C <= MAX_UNROLLED_CLASSES (one specialisation per count: the loops over the classes
    # unrolled) or None for more classes (one kernel for every count, C = p.shape[0]: the class-by-class path, which
    # needs no count at compile time). cls, w (weights) and ent (the normalised entropy of voxels ent_off, ent_off +
    # 1, ...) are None or not: numba compiles one kernel per combination and prunes the branches of the other (``is
    # None`` tests on arguments are resolved at compile time); it / ft: the slots of C + 2 rows (int64 and float64
    # views of one buffer)
    NC = len(cls) if cls is not None else p.shape[0]
    block = UNROLLED_BLOCK if cls is not None else CLASS_BLOCK  # a constant of each specialisation
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
        if cls is not None:  # resolved at compile time: each kernel has one of the two branches
            bad, bad_labels = voxels(cls, p, b0, yb, vals, bins, conf, pred, top_bins, p_true, sq, n_fine, tol)
            off = 0
            if bad_labels:
                labels += count_labels(NC, yb)
        else:
            bad = False
            for c in range(NC):
                pc = p[c, b0 : b0 + m]
                bad |= class_values(pc, vals[c, :m], bins[c, :m], s[:m], sqb, cf, pr, c, n_fine, tol)
            off = sum_off(s[:m], tol)
            nl = count_labels(NC, yb)
            labels += nl
            if nl == 0:  # the gather reads vals[y]: only with labels in range (else the tables are not used)
                true_values(vals[:, :m], yb, pt)
            values_to_bins(cf, tb, n_fine)
        for c in range(NC):
            scatter(bins[c, :m], vals[c, :m], yb, c, wb, it[c], ft[c])
        if bad or off:  # the tables of this call are not used (the caller raises or falls back)
            invalid += count_sums(NC, p, b0, m, tol)
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

@_vec
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

@_vec
def normalised_entropy(acc, log_c, n_fine, margin):
    # -acc / log C clipped to [0, 1] (the reference's operations), and whether its scaled value h F lies within
    # margin of a bin edge (edge 0 excluded: values below margin are in bin 0 whichever way they round)
    h = -acc / log_c
    h = h if h > 0.0 else 0.0
    h = h if h < 1.0 else 1.0
    x = h * n_fine
    fr = x - np.floor(x)
    return h, (x >= margin) & ((fr < margin) | (fr > 1.0 - margin))

@_vec
def entropy_voxels(cls, p, start, stop, out, log_c, n_fine, margin):
    # the normalised entropy of voxels start:stop into out[0:stop - start], NC <= MAX_UNROLLED_CLASSES (the class
    # loop unrolled); returns whether one lies within margin of a bin edge
    NC = len(cls)
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

@_vec
def entropy_classes(p, start, stop, out, log_c, n_fine, margin):
    # as entropy_voxels, for NC > MAX_UNROLLED_CLASSES: class by class over blocks of voxels (out accumulates); the
    # count is p's first dimension, not a type: one kernel for every count
    NC = p.shape[0]
    near = False
    for b0 in range(start, stop, CLASS_BLOCK):
        m = min(CLASS_BLOCK, stop - b0)
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

@_vec
def logs(t, out):
    # log_unit over an array (for the tests)
    for i in range(t.shape[0]):
        out[i] = log_unit(t[i])


def entry_points() -> tuple[Any, Any, Any, Any]:
    """The kernels' entry points, each wrapped by :func:`~monai_unc._jit.cached_kernel` (the module docstring).

    Returns:
        ``(tables, entropy_voxels, entropy_classes, logs)``; ``tables`` takes ``cls = tuple(range(C))`` first (None
        above :data:`._cpu_kernel.MAX_UNROLLED_CLASSES` classes: one kernel for every such count), ``entropy_voxels``
        the tuple too (up to that many classes), ``entropy_classes`` no ``cls`` (more classes).
    """
    return tuple(cached_kernel(k) for k in (tables, entropy_voxels, entropy_classes, logs))  # type: ignore[return-value]
