"""The fused CPU update of :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`: one pass over the voxels.

The reference update (``histogram.py``) makes about 25 torch passes over each chunk of voxels (copy, checks, top
label, bin indices, one ``scatter_add_`` per table and row, NLL, Brier). This module does the same work in one
compiled loop (numba, the optional ``fast`` extra): per voxel it reads the ``C`` probabilities once, checks them,
finds the top label and the normalised entropy, and adds to the counts, value sums, weights and scalars of every
row. Each thread fills private tables over its own contiguous range of voxels (privatised histograms: no two threads
write one counter), merged once at the end.

Results equal the reference's: the same float64 values, bin ``floor(v * F)`` computed the same way, first maximum
wins; counts are exact int64. Float sums differ only by the order of the additions (per thread, then merged), i.e.
within the recursive-summation bound ``n * 2^-53`` relative of the reference's sums; the unweighted NLL sum is the
log of a renormalised product (one log per thread), within ``n * 2^-52`` absolute. The normalised entropy (the UCE
row) is computed by the caller with the reference's own torch formula, chunk by chunk (a vectorised log is several
times faster than a scalar one per class and voxel), and binned here.

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

    # one thread's share, [start, stop), into its own tables; not numba's parallel mode (its OpenMP threading layer
    # kills a process that forks after using it): the caller runs the blocks in Python threads (nogil)
    @numba.njit(cache=True, nogil=True)
    def tables(p, y, w, ent, ent_off, n_fine, tol, nll_eps, start, stop, total, hits, sums, wtotal, whits, scal, flags):
        # w (weights) and ent (the normalised entropy of voxels ent_off, ent_off + 1, ...) are None or an array: numba
        # compiles one kernel per combination and prunes the branches of the other (``is None`` tests on arguments
        # are resolved at compile time)
        n_cls = p.shape[0]
        invalid = 0
        nan = 0
        # unweighted NLL: the sum of -log p_y as the log of a running product, renormalised by frexp every 16
        # factors (each >= nll_eps = 1e-15, so 16 of them stay normal): one log per block instead of one per voxel
        prod = 1.0
        prod_exp = 0
        n_prod = 0
        nll_sum = 0.0
        brier_sum = 0.0
        w_sum = 0.0
        for i in range(start, stop):
            lab = y[i]
            wi = w[i] if w is not None else 1.0
            conf = -1.0
            pred = 0
            sq = 0.0
            p_true = 0.0
            s = 0.0
            bad = False
            for c in range(n_cls):
                raw = np.float64(p[c, i])
                # checks on the value as given, then clip to [0, 1] (NaN to 0: it is binned, never used)
                bad |= not (raw >= -tol and raw <= 1.0 + tol)
                nan += raw != raw
                s += raw
                v = min(max(raw, 0.0), 1.0) if raw == raw else 0.0
                better = v > conf  # the first maximum wins
                conf = v if better else conf
                pred = c if better else pred
                p_true = v if c == lab else p_true
                sq += v * v
                b = np.int64(v * n_fine)
                total[c, b] += 1
                if w is not None:
                    sums[c, b] += v * wi
                    wtotal[c, b] += wi
                else:
                    sums[c, b] += v
            if bad or not (abs(s - 1.0) <= tol):
                invalid += 1  # the tables of this call are not used (the caller raises or falls back)
            b = np.int64(p_true * n_fine)  # the label row's hit: r = [y == l] is 1 in row y only
            hits[lab, b] += 1
            if w is not None:
                whits[lab, b] += wi
            correct = pred == lab
            for r in range(2):
                if r == 0:
                    v = conf
                elif ent is not None:
                    v = ent[i - ent_off]
                    v = v if v == v else 0.0  # NaN (an invalid voxel): binned as 0, never used
                else:
                    break
                row = n_cls + r
                b = np.int64(v * n_fine)
                total[row, b] += 1
                hits[row, b] += correct
                if w is not None:
                    sums[row, b] += v * wi
                    wtotal[row, b] += wi
                    if correct:
                        whits[row, b] += wi
                else:
                    sums[row, b] += v
            brier = sq - 2.0 * p_true + 1.0
            if w is not None:
                w_sum += wi
                nll_sum += -math.log(max(p_true, nll_eps)) * wi
                brier_sum += brier * wi
            else:
                w_sum += 1.0
                brier_sum += brier
                prod *= max(p_true, nll_eps)
                n_prod += 1
                if n_prod == 16:
                    mant, ex = math.frexp(prod)
                    prod = mant
                    prod_exp += ex
                    n_prod = 0
        if w is None:
            nll_sum = -(math.log(prod) + prod_exp * math.log(2.0))
        scal[0] += w_sum
        scal[1] += nll_sum
        scal[2] += brier_sum
        flags[0] += invalid
        flags[1] += nan

    return tables


#: voxels per thread below which the update runs on one thread (a thread and its tables cost more than they save)
MIN_VOXELS_PER_THREAD = 1 << 18


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
        n_fine: fine bins ``F``; tables have ``F + 1`` bins (a value of 1 lands in the extra one).
        entropy: fills the normalised-entropy row ``C + 1``: ``entropy(start, stop)`` returns the normalised
            entropy (float64, clipped to [0, 1]) of voxels ``start:stop`` (the caller's formula, so that the row
            equals the reference's); None leaves the row empty.
        tol: tolerance of the range and sum checks.
        nll_eps: the probability of the true label is clipped to at least this inside ``-log p`` (at least
            ``1e-19``: the product of 16 such factors must stay a normal float64).
        n_threads: the most threads (one private set of tables each beyond the first; at least
            :data:`MIN_VOXELS_PER_THREAD` voxels each).
        chunk: voxels per call of ``entropy`` (its temporaries stay small).
        out: the tables added to, C-contiguous: ``total``, ``hits`` ``(C + 2, F + 1)`` int64, ``sums`` float64,
            ``wtotal`` / ``whits`` (float64, used with weights only) and ``scalars`` ``(3,)`` (weight, NLL sum, Brier
            sum).

    Returns:
        ``(invalid, nan)``: the voxels that fail the checks (out of range, NaN, or a sum off 1 by more than
        ``tol``) and the NaN values. After a call with ``invalid > 0`` the tables hold garbage.
    """
    kernel = _kernel()
    if kernel is None:
        raise RuntimeError("the fused CPU kernel needs numba (pip install 'monai-unc[fast]')")
    n = p.shape[1]
    n_blocks = max(1, min(int(n_threads), n // MIN_VOXELS_PER_THREAD))
    weighted = w is not None
    dummy = np.zeros((1, 1), dtype=np.float64)
    tables = [(out["total"], out["hits"], out["sums"], out["wtotal"] if weighted else dummy,
               out["whits"] if weighted else dummy, out["scalars"])]
    for _ in range(1, n_blocks):  # private tables of the other threads, added at the end
        tables.append(tuple(np.zeros_like(t) for t in tables[0][:3])
                      + tuple(np.zeros_like(t) if weighted else np.zeros((1, 1)) for t in tables[0][3:5])
                      + (np.zeros(3),))
    flags = np.zeros((n_blocks, 2), dtype=np.int64)

    def run(start: int, stop: int, ent: np.ndarray | None) -> None:
        def block(b: int) -> None:
            lo, hi = start + b * (stop - start) // n_blocks, start + (b + 1) * (stop - start) // n_blocks
            kernel(p, y, w, ent, start, n_fine, tol, nll_eps, lo, hi, *tables[b], flags[b])

        if pool is None:
            block(0)
        else:
            list(pool.map(block, range(n_blocks)))

    pool = ThreadPoolExecutor(n_blocks) if n_blocks > 1 else None
    try:
        if entropy is None:
            run(0, n, None)
        else:
            for start in range(0, n, chunk):
                stop = min(start + chunk, n)
                run(start, stop, np.ascontiguousarray(entropy(start, stop), dtype=np.float64))
    finally:
        if pool is not None:
            pool.shutdown()
    for extra in tables[1:]:
        for k, t in enumerate(extra):
            if weighted or k not in (3, 4):
                np.add(tables[0][k], t, out=tables[0][k])
    return int(flags[:, 0].sum()), int(flags[:, 1].sum())
