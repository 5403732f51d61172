"""The fused CPU update of :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`: one pass over the voxels.

The reference update (``histogram.py``) makes about 25 torch passes over each chunk of voxels (copy, checks, top
label, bin indices, one ``scatter_add_`` per table and row, NLL, Brier). This module does the same work in one
compiled pass (numba, the optional ``fast`` extra) over blocks of 512 voxels that stay in the cache: per block and
class, vectorised loops read the probabilities once, check them, clip them and compute their bins, the running top
label, the probability of the reference label and the sum of squares; then one scalar loop per table row adds the
block's voxels to that row's counts and value sums (one row and one index array at a time: about twice as fast as
all rows voxel by voxel). A count and a hit share one int64 update (the count in the low 32 bits, the hit in the
high ones, unpacked before 2^32 voxels reach one table). Each thread fills private tables over its own contiguous
range of voxels (privatised histograms: no two threads write one counter), merged once at the end.

Results equal the reference's: the same float64 values, bin ``floor(v * F)`` computed the same way, first maximum
wins; counts are exact int64. Float sums differ only by the order of the additions (per thread, then merged), i.e.
within the recursive-summation bound ``n * 2^-53`` relative of the reference's sums; the unweighted NLL sum is the
log of four renormalised products (four logs per thread), and the unweighted Brier sum four partial sums, within
``n * 2^-52`` absolute. The normalised entropy (the UCE row) is computed by the caller with the reference's own torch
formula, chunk by chunk (a vectorised log is several times faster than a scalar one per class and voxel), and binned
here.

Without numba (or for other dtypes than float32 / float64) :func:`available` is False and the histogram keeps the
reference path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..._lazy import lazy_optional

__all__ = ["available", "histogram_tables"]


def available() -> bool:
    """Whether numba imports (the kernel is compiled on first use and cached on disk)."""
    return _kernel() is not None


def _build() -> Any:
    import numba

    jit = numba.njit(cache=True, nogil=True, boundscheck=False)
    # voxels per block: its buffers (values and the top value in the input's dtype, uint32 bins and top label, five
    # float64 arrays: (s + 4) (C + 1) + 44 bytes a voxel for an input of s bytes) stay in the L1 / L2 cache
    BLOCK = 512

    # Bins and top labels are uint32: an unsigned index needs no wraparound of negative indices (a sign test and an
    # add per table update in the scatters; 7 % of the kernel's time measured), and the bins of values in [0, 1]
    # times F < 2^31 fit.
    # The loops below are written so that LLVM vectorises them: each reads and writes a few one-dimensional
    # contiguous slices (a slice, not ``a[c, start + i]``, whose index could be negative as far as the compiler knows;
    # few arrays, so that the runtime alias checks stay within LLVM's budget). The scatters into the tables run one
    # row at a time (one table row and one index array per loop: measured 2x faster than all rows per voxel).

    @jit
    def class_values(pc, vc, bc, s, n_fine, tol):
        # one class of a block: the value clipped to [0, 1] (NaN to 0: binned, never used) and its bin, the value as
        # given added to the voxel's sum s; returns whether a value is outside [-tol, 1 + tol] (a NaN is not seen
        # here: it makes the voxel's sum NaN, which sum_off counts). One boolean or-reduction, not two int64 counts
        # (a widening per lane); the exact counts are taken by count_values, only for a block that fails
        out = False
        lo, hi = -tol, 1.0 + tol
        for i in range(vc.shape[0]):
            raw = np.float64(pc[i])
            out |= (raw < lo) | (raw > hi)  # | not or: no branch
            s[i] += raw
            v = raw if raw > 0.0 else 0.0
            v = v if v < 1.0 else 1.0
            vc[i] = v
            bc[i] = np.uint32(v * n_fine)
        return out

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
    def top_label(vc, c, conf, pred):
        # the first maximum wins: a later class replaces it only when strictly greater
        for i in range(vc.shape[0]):
            # both values loaded before the choice: a select, not a conditional store (which does not vectorise)
            v, cur, lab = vc[i], conf[i], pred[i]
            better = v > cur
            conf[i] = v if better else cur
            pred[i] = c if better else lab

    @jit
    def true_label(vc, c, y, p_true, sq):
        for i in range(vc.shape[0]):
            v = np.float64(vc[i])
            # an addition of v or 0.0 (exact: one class matches, the others add +0.0 to a value >= 0), stored
            # unconditionally: ``v if y[i] == c else p_true[i]`` becomes a masked store, slow on some CPUs
            p_true[i] += v if y[i] == c else 0.0
            sq[i] += v * v

    @jit
    def values_to_bins(v, b, n_fine):
        for i in range(b.shape[0]):
            b[i] = np.uint32(np.float64(v[i]) * n_fine)

    @jit
    def entropy_values(e, v):
        for i in range(v.shape[0]):
            x = e[i]
            v[i] = x if x == x else 0.0  # NaN (an invalid voxel): binned as 0, never used

    @jit
    def sum_off(s, tol):
        bad = 0
        for i in range(s.shape[0]):
            d = abs(s[i] - 1.0)
            bad += (d > tol) | (d != d)
        return bad

    @jit
    def nll_brier(pt, sq, nll_eps, prod, brier):
        # four independent chains (in registers) of the products of max(p_y, nll_eps), renormalised by frexp every
        # 16 factors each (>= nll_eps = 1e-15, so 16 of them stay normal), and of the Brier terms; returns the
        # exponents taken out. A remainder of fewer than 4 voxels goes to the first chain.
        q0, q1, q2, q3 = prod[0], prod[1], prod[2], prod[3]
        b0, b1, b2, b3 = brier[0], brier[1], brier[2], brier[3]
        n = pt.shape[0]
        n4 = n - n % 4
        ex = 0
        for k in range(0, n4, 64):
            for i in range(k, min(k + 64, n4), 4):
                q0 *= max(pt[i], nll_eps)
                q1 *= max(pt[i + 1], nll_eps)
                q2 *= max(pt[i + 2], nll_eps)
                q3 *= max(pt[i + 3], nll_eps)
                b0 += sq[i] - 2.0 * pt[i] + 1.0
                b1 += sq[i + 1] - 2.0 * pt[i + 1] + 1.0
                b2 += sq[i + 2] - 2.0 * pt[i + 2] + 1.0
                b3 += sq[i + 3] - 2.0 * pt[i + 3] + 1.0
            q0, e0 = math.frexp(q0)
            q1, e1 = math.frexp(q1)
            q2, e2 = math.frexp(q2)
            q3, e3 = math.frexp(q3)
            ex += e0 + e1 + e2 + e3
        for i in range(n4, n):
            q0, e0 = math.frexp(q0 * max(pt[i], nll_eps))
            ex += e0
            b0 += sq[i] - 2.0 * pt[i] + 1.0
        prod[0], prod[1], prod[2], prod[3] = q0, q1, q2, q3
        brier[0], brier[1], brier[2], brier[3] = b0, b1, b2, b3
        return ex

    @jit
    def scatter(b, v, y, c, pred, w, packed, sums, wtotal, whits):
        # one row of a block: the voxels' counts and hits (packed: a count in the low 32 bits, a hit in the high ones,
        # one table update instead of two; the caller unpacks before 2^32 voxels reach one table) and value sums;
        # a hit is y == c in a class row (pred None), y == pred in the top-label and entropy rows
        for i in range(b.shape[0]):
            j = b[i]
            hit = y[i] == c if pred is None else y[i] == pred[i]
            packed[j] += 1 + (np.int64(hit) << 32)
            if w is not None:
                wi = w[i]
                sums[j] += np.float64(v[i]) * wi
                wtotal[j] += wi
                whits[j] += wi if hit else 0.0
            else:
                sums[j] += np.float64(v[i])

    # one thread's share, [start, stop), into its own tables; not numba's parallel mode (its OpenMP threading layer
    # kills a process that forks after using it): the caller runs the blocks in Python threads (nogil)
    @jit
    def tables(p, y, w, ent, ent_off, n_fine, tol, nll_eps, start, stop, packed, sums, wtotal, whits, scal, flags):
        # w (weights) and ent (the normalised entropy of voxels ent_off, ent_off + 1, ...) are None or an array: numba
        # compiles one kernel per combination and prunes the branches of the other (``is None`` tests on arguments
        # are resolved at compile time); wtotal and whits have C + 2 rows (of one unused bin without weights)
        n_cls = p.shape[0]
        block = BLOCK
        vals = np.empty((n_cls, block), dtype=p.dtype)
        bins = np.empty((n_cls, block), dtype=np.uint32)
        conf = np.empty(block, dtype=p.dtype)
        pred = np.empty(block, dtype=np.uint32)
        p_true = np.empty(block)
        sq = np.empty(block)
        s = np.empty(block)
        ev = np.empty(block)
        eb = np.empty(block, dtype=np.uint32)
        top_bins = np.empty(block, dtype=np.uint32)
        invalid = 0
        nan = 0
        # unweighted NLL: the sum of -log p_y as the log of running products (nll_brier): four logs per call
        # instead of one per voxel
        prod = np.ones(4)
        brier = np.zeros(4)
        prod_exp = 0
        nll_sum = 0.0
        brier_sum = 0.0
        w_sum = 0.0
        for b0 in range(start, stop, block):
            m = min(block, stop - b0)
            yb = y[b0 : b0 + m]
            wb = w[b0 : b0 + m] if w is not None else None
            cf, pr, pt, sqb, sb = conf[:m], pred[:m], p_true[:m], sq[:m], s[:m]
            bad = False
            for c in range(n_cls):
                pc = p[c, b0 : b0 + m]
                vc, bc = vals[c, :m], bins[c, :m]
                if c == 0:
                    sb[:] = 0.0
                bad |= class_values(pc, vc, bc, sb, n_fine, tol)
                if c == 0:
                    cf[:] = vc
                    pr[:] = 0
                    pt[:] = 0.0
                    sqb[:] = 0.0
                else:
                    top_label(vc, c, cf, pr)
                true_label(vc, c, yb, pt, sqb)
                scatter(bc, vc, yb, c, None, wb, packed[c], sums[c], wtotal[c], whits[c])
            off = sum_off(sb, tol)
            if bad or off:  # the tables of this call are not used (the caller raises or falls back)
                invalid += off
                for c in range(n_cls):
                    out, nn = count_values(p[c, b0 : b0 + m], tol)
                    invalid += out
                    nan += nn
            tb = top_bins[:m]
            values_to_bins(cf, tb, n_fine)
            scatter(tb, cf, yb, 0, pr, wb, packed[n_cls], sums[n_cls], wtotal[n_cls], whits[n_cls])
            if ent is not None:
                e, eo = ev[:m], eb[:m]
                entropy_values(ent[b0 - ent_off : b0 - ent_off + m], e)
                values_to_bins(e, eo, n_fine)
                scatter(eo, e, yb, 0, pr, wb, packed[n_cls + 1], sums[n_cls + 1], wtotal[n_cls + 1], whits[n_cls + 1])
            if w is not None:
                for i in range(m):
                    wi = wb[i]
                    w_sum += wi
                    nll_sum += -math.log(max(pt[i], nll_eps)) * wi
                    brier_sum += (sqb[i] - 2.0 * pt[i] + 1.0) * wi
            else:
                prod_exp += nll_brier(pt, sqb, nll_eps, prod, brier)
        if w is None:
            w_sum = np.float64(stop - start)
            for lane in range(4):
                nll_sum -= math.log(prod[lane])
            nll_sum -= prod_exp * math.log(2.0)
            brier_sum = brier.sum()
        scal[0] += w_sum
        scal[1] += nll_sum
        scal[2] += brier_sum
        flags[0] += invalid
        flags[1] += nan

    return tables


#: voxels per thread below which the update runs on one thread (a thread and its tables cost more than they save)
MIN_VOXELS_PER_THREAD = 1 << 18


#: the most voxels added to one table of packed counts before it is unpacked (a count stays below 2^32, the low half)
PACKED_VOXELS = (1 << 31) - 1

_COUNT_MASK = np.int64((1 << 32) - 1)

#: the compiled kernel, or None without its optional dependency (built on first use)
_kernel = lazy_optional(_build)


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
) -> tuple[int, int]:
    """Add one case's voxels to histogram tables in one fused pass.

    Args:
        p: probabilities ``(C, n)``, float32 or float64, C-contiguous (values as given: checked, then clipped).
        y: reference labels ``(n,)`` int64 in ``[0, C)`` (checked by the caller).
        w: voxel weights ``(n,)`` float64 or None.
        n_fine: fine bins ``F`` (below ``2^31``); tables have ``F + 1`` bins (a value of 1 lands in the extra one).
        entropy: fills the normalised-entropy row ``C + 1``: ``entropy(start, stop)`` returns the normalised
            entropy (float64, clipped to [0, 1]) of voxels ``start:stop`` (the caller's formula, so that the row
            equals the reference's); None leaves the row empty.
        tol: tolerance of the range and sum checks.
        nll_eps: the probability of the true label is clipped to at least this inside ``-log p`` (at least
            ``1e-19``: the product of 16 such factors must stay a normal float64).
        n_threads: the most threads (each with its own packed counts, and its own sums, weights and scalars beyond the
            first; at least :data:`MIN_VOXELS_PER_THREAD` voxels each).
        chunk: voxels per call of ``entropy`` (its temporaries stay small).
        out: the tables added to, C-contiguous: ``total``, ``hits`` ``(C + 2, F + 1)`` int64, ``sums`` float64,
            ``wtotal`` / ``whits`` (float64, used with weights only) and ``scalars`` ``(3,)`` (weight, NLL sum, Brier
            sum).

    Returns:
        ``(invalid, nan)``: ``invalid`` is positive if and only if a voxel fails the checks (it counts the values
        out of range or NaN and the voxels whose sum is off 1 by more than ``tol``), ``nan`` the NaN values. After a
        call with ``invalid > 0`` the tables hold garbage.
    """
    kernel = _kernel()
    if kernel is None:
        raise RuntimeError("the fused CPU kernel needs numba (pip install 'monai-unc[fast]')")
    if n_fine >= 1 << 31:
        raise ValueError(f"n_fine must be below 2**31 (the kernel's bins are uint32), got {n_fine}")
    n = p.shape[1]
    n_blocks = max(1, min(int(n_threads), n // MIN_VOXELS_PER_THREAD))
    weighted = w is not None
    total, hits = out["total"], out["hits"]
    dummy = np.zeros((total.shape[0], 1), dtype=np.float64)
    # per thread: packed counts (count + hits << 32; unpacked into total and hits after at most PACKED_VOXELS
    # voxels), sums, weighted counts and scalars; the first thread adds into the caller's sums directly
    tables = [
        (
            np.zeros_like(total),
            out["sums"],
            out["wtotal"] if weighted else dummy,
            out["whits"] if weighted else dummy,
            out["scalars"],
        )
    ]
    for _ in range(1, n_blocks):  # private tables of the other threads, added at the end
        tables.append(
            (np.zeros_like(total), np.zeros_like(out["sums"]))
            + tuple(np.zeros_like(t) if weighted else dummy for t in tables[0][2:4])
            + (np.zeros(3),)
        )
    flags = np.zeros((n_blocks, 2), dtype=np.int64)

    def run(start: int, stop: int, ent: np.ndarray | None) -> None:
        def block(b: int) -> None:
            lo, hi = start + b * (stop - start) // n_blocks, start + (b + 1) * (stop - start) // n_blocks
            kernel(p, y, w, ent, start, n_fine, tol, nll_eps, lo, hi, *tables[b], flags[b])

        if pool is None:
            block(0)
        else:
            list(pool.map(block, range(n_blocks)))

    def unpack() -> None:
        for packed in (t[0] for t in tables):
            np.add(total, packed & _COUNT_MASK, out=total)
            np.add(hits, packed >> 32, out=hits)
            packed[...] = 0

    step = PACKED_VOXELS if entropy is None else max(1, min(chunk, PACKED_VOXELS))
    pool = ThreadPoolExecutor(n_blocks) if n_blocks > 1 else None
    try:
        done = 0  # voxels in the packed tables
        for start in range(0, n, step):
            stop = min(start + step, n)
            if done + stop - start > PACKED_VOXELS:
                unpack()
                done = 0
            ent = None if entropy is None else np.ascontiguousarray(entropy(start, stop), dtype=np.float64)
            run(start, stop, ent)
            done += stop - start
    finally:
        if pool is not None:
            pool.shutdown()
    unpack()
    for extra in tables[1:]:
        for k in range(1, 5):
            if weighted or k not in (2, 3):
                np.add(tables[0][k], extra[k], out=tables[0][k])
    return int(flags[:, 0].sum()), int(flags[:, 1].sum())
