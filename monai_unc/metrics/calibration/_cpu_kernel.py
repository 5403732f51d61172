"""The fused CPU update of :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`: one pass over the voxels.

The reference update (``histogram.py``) makes about 25 torch passes over each chunk of voxels (copy, checks, top
label, bin indices, one ``scatter_add_`` per table and row, NLL, Brier). This module does the same work in one
compiled loop (numba, the optional ``fast`` extra): per voxel it reads the ``C`` probabilities once, checks them,
finds the top label and the normalised entropy, and adds to the counts, value sums, weights and scalars of every
row. Each thread fills private tables over its own contiguous range of voxels (privatised histograms: no two threads
write one counter), merged once at the end.

Results equal the reference's: the same float64 values, bin ``floor(v * F)`` computed the same way, first maximum
wins; counts are exact int64. Float sums differ only by the order of the additions (per thread, then merged), i.e.
within the recursive-summation bound ``n * 2^-53`` relative of the reference's sums. The entropy is the same formula
in float64; its logarithm may differ from torch's by an ulp, which moves a voxel to the neighbouring uncertainty
bin only when its entropy lies within ~1e-16 of a bin edge.

Without numba (or for other dtypes than float32 / float64) :func:`available` is False and the histogram keeps the
reference path.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

__all__ = ["available", "histogram_tables"]

_KERNEL: Any = None
_IMPORT_FAILED = False


def available() -> bool:
    """Whether numba imports (the kernel is compiled on first use and cached on disk)."""
    return _kernel() is not None


def _kernel() -> Any:
    global _KERNEL, _IMPORT_FAILED
    if _KERNEL is None and not _IMPORT_FAILED:
        try:
            _KERNEL = _build()
        except ImportError:
            _IMPORT_FAILED = True
    return _KERNEL


def _build() -> Any:
    import numba

    # one thread's share, [start, stop), into its own tables; not numba's parallel mode (its OpenMP threading layer
    # kills a process that forks after using it): the caller runs the blocks in Python threads (nogil)
    @numba.njit(cache=True, nogil=True)
    def tables(p, y, w, ent, n_fine, tol, start, stop, total, hits, sums, wtotal, whits, scal, flags):
        # w (weights) and ent (the entropy row wanted) are None or an array: numba compiles one kernel per
        # combination and prunes the branches of the other (``is None`` tests on arguments are resolved at compile time)
        n_cls = p.shape[0]
        log_c = math.log(n_cls)
        tiny = 2.2250738585072014e-308  # the smallest normal float64 (torch.finfo(float64).tiny)
        invalid = 0
        nan = 0
        # unweighted NLL: the sum of -log p_y as the log of a running product, renormalised by frexp every 16
        # factors (each >= 1e-15, so 16 of them stay normal): one log per block instead of one per voxel
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
            h = 0.0
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
                if ent is not None:
                    h += v * math.log(max(v, tiny))
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
            for r in range(2 if ent is not None else 1):
                v = conf if r == 0 else min(max(-h / log_c, 0.0), 1.0)
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
                nll_sum += -math.log(max(p_true, 1e-15)) * wi
                brier_sum += brier * wi
            else:
                w_sum += 1.0
                brier_sum += brier
                prod *= max(p_true, 1e-15)
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
        flags[0] = invalid
        flags[1] = nan

    return tables


def histogram_tables(
    p: np.ndarray,
    y: np.ndarray,
    w: np.ndarray | None,
    n_fine: int,
    uncertainty: bool,
    tol: float,
    n_threads: int,
) -> tuple[dict[str, np.ndarray], int, int]:
    """The histogram tables of one case's voxels in one fused pass.

    Args:
        p: probabilities ``(C, n)``, float32 or float64, C-contiguous (values as given: checked, then clipped).
        y: reference labels ``(n,)`` int64 in ``[0, C)`` (checked by the caller).
        w: voxel weights ``(n,)`` float64 or None.
        n_fine: fine bins ``F``; tables have ``F + 1`` bins (a value of 1 lands in the extra one).
        uncertainty: fill the normalised-entropy row ``C + 1``.
        tol: tolerance of the range and sum checks.
        n_threads: threads (one private set of tables each).

    Returns:
        ``(tables, invalid, nan)``: ``tables`` holds ``total``, ``hits`` ``(C + 2, F + 1)`` int64, ``sums``
        ``(C + 2, F + 1)`` float64, ``wtotal`` / ``whits`` (float64, None without weights) and ``scalars`` ``(3,)``
        (weight, NLL sum, Brier sum); ``invalid`` counts voxels that fail the checks (out of range, NaN, or a sum
        off 1 by more than ``tol``), ``nan`` the NaN values. The tables of a call with ``invalid > 0`` are not to be
        used.
    """
    kernel = _kernel()
    if kernel is None:
        raise RuntimeError("the fused CPU kernel needs numba (pip install 'monai-unc[fast]')")
    n_cls = p.shape[0]
    n_rows = n_cls + 2
    n_blocks = max(1, min(int(n_threads), p.shape[1] // 4096 or 1))
    shape = (n_blocks, n_rows, n_fine + 1)
    weighted = w is not None
    total = np.zeros(shape, dtype=np.int64)
    hits = np.zeros(shape, dtype=np.int64)
    sums = np.zeros(shape, dtype=np.float64)
    wshape = shape if weighted else (n_blocks, 1, 1)
    wtotal = np.zeros(wshape, dtype=np.float64)
    whits = np.zeros(wshape, dtype=np.float64)
    scal = np.zeros((n_blocks, 3), dtype=np.float64)
    flags = np.zeros((n_blocks, 2), dtype=np.int64)
    ent = np.zeros(1, dtype=np.float64) if uncertainty else None
    n = p.shape[1]

    def block(b: int) -> None:
        start, stop = b * n // n_blocks, (b + 1) * n // n_blocks
        kernel(p, y, w, ent, n_fine, tol, start, stop, total[b], hits[b], sums[b], wtotal[b], whits[b], scal[b],
               flags[b])

    if n_blocks == 1:
        block(0)
    else:
        with ThreadPoolExecutor(n_blocks) as pool:
            list(pool.map(block, range(n_blocks)))
    invalid, nan = int(flags[:, 0].sum()), int(flags[:, 1].sum())

    def merged(t: np.ndarray) -> np.ndarray:
        return t[0] if n_blocks == 1 else t.sum(axis=0)

    out = {
        "total": merged(total),
        "hits": merged(hits),
        "sums": merged(sums),
        "wtotal": merged(wtotal) if weighted else None,
        "whits": merged(whits) if weighted else None,
        "scalars": merged(scal),
    }
    return out, invalid, nan
