"""The Triton kernel of :mod:`._cuda_kernel` (imported only when it is used: this module imports Triton)."""

from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton (e.g. collected by the doctests on such a machine): nothing is defined
    triton = None

__all__ = ["histogram_kernel"]


if triton is not None:

    @triton.jit
    def _add(table_ptr, row_base, b, val, m, F: tl.constexpr):
        """Add ``val`` at bins ``b`` of the row at ``row_base`` where ``m``.

        Bins 0, F - 1 and F (probabilities near 0 and 1, where a segmentation's values concentrate) get one atomic per
        program with the block's sum; the other bins one atomic per voxel. With ``F == 1`` bin ``F - 1`` is bin 0,
        added once. Every atomic is relaxed (``sem="relaxed"``): the counts need no ordering among the programs (the
        launch's end makes them visible), and Triton's default acquire-release semantics fence each one.
        """
        zero = tl.zeros_like(val)
        tl.atomic_add(table_ptr + row_base, tl.sum(tl.where(m & (b == 0), val, zero), axis=0), sem="relaxed")
        if F > 1:
            last = tl.sum(tl.where(m & (b == F - 1), val, zero), axis=0)
            tl.atomic_add(table_ptr + row_base + (F - 1), last, sem="relaxed")
        tl.atomic_add(table_ptr + row_base + F, tl.sum(tl.where(m & (b == F), val, zero), axis=0), sem="relaxed")
        tl.atomic_add(table_ptr + row_base + b, val, mask=m & (b > 0) & (b < F - 1), sem="relaxed")


    @triton.jit
    def _add_row(
        total_ptr, hits_ptr, sums_ptr, wtotal_ptr, whits_ptr, row, b, val, wi, ones, m, hit, F: tl.constexpr,
        WEIGHTED: tl.constexpr,
    ):
        """Add one voxel block to the row at ``row`` of every table, at bins ``b`` where ``m``.

        The count, the hits (where ``hit``), the sum of ``val`` and, with ``WEIGHTED``, the sum of ``val * wi``, the
        weight and the weighted hits.
        """
        _add(total_ptr, row, b, ones, m, F)
        _add(hits_ptr, row, b, ones, hit, F)
        if WEIGHTED:
            _add(sums_ptr, row, b, val * wi, m, F)
            _add(wtotal_ptr, row, b, wi, m, F)
            _add(whits_ptr, row, b, wi, hit, F)
        else:
            _add(sums_ptr, row, b, val, m, F)


    @triton.jit
    def histogram_kernel(
        p_ptr, y_ptr, w_ptr, total_ptr, hits_ptr, sums_ptr, wtotal_ptr, whits_ptr, scal_ptr, flags_ptr, consts_ptr,
        n,
        C: tl.constexpr, F: tl.constexpr, REP: tl.constexpr, WEIGHTED: tl.constexpr, ENTROPY: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        """One block of voxels of a ``(C, n)`` probability map into replica ``program_id mod REP`` of the tables."""
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        n64 = tl.full([BLOCK], 0, tl.int64) + n  # C * n may pass 2**31
        # float64 constants read from memory: a float argument is passed as float32, and so is a literal within
        # float32's range given to tl.maximum (1e-15 would become 1.0000000036e-15)
        tol = tl.load(consts_ptr)
        log_c = tl.load(consts_ptr + 1)
        nll_eps = tl.load(consts_ptr + 2)
        tiny = tl.load(consts_ptr + 3)
        lab = tl.load(y_ptr + offs, mask=m, other=0).to(tl.int64)
        if WEIGHTED:
            wi = tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float64)
        else:
            wi = tl.full([BLOCK], 1.0, tl.float64)
        stride = F + 1
        base = (pid % REP).to(tl.int64) * ((C + 2) * stride)
        ones = tl.full([BLOCK], 1, tl.int64)
        conf = tl.full([BLOCK], -1.0, tl.float64)
        pred = tl.full([BLOCK], 0, tl.int64)
        sq = tl.zeros([BLOCK], tl.float64)
        h = tl.zeros([BLOCK], tl.float64)
        p_true = tl.zeros([BLOCK], tl.float64)
        s = tl.zeros([BLOCK], tl.float64)
        bad = tl.zeros([BLOCK], tl.int1)
        for c in tl.static_range(C):
            raw = tl.load(p_ptr + c * n64 + offs, mask=m, other=0.0).to(tl.float64)
            ok = (raw >= -tol) & (raw <= 1.0 + tol)  # False for NaN
            bad = bad | (ok == 0)
            s += raw
            v = tl.where(raw == raw, tl.minimum(tl.maximum(raw, 0.0), 1.0), 0.0)  # NaN binned as 0, never used
            better = v > conf  # the first maximum wins
            conf = tl.where(better, v, conf)
            pred = tl.where(better, c, pred)
            is_lab = lab == c
            p_true = tl.where(is_lab, v, p_true)
            sq += v * v
            if ENTROPY:
                h += v * tl.log(tl.maximum(v, tiny))
            b = (v * F).to(tl.int64)
            row = base + c * stride
            _add_row(  # r = [y == c]
                total_ptr, hits_ptr, sums_ptr, wtotal_ptr, whits_ptr, row, b, v, wi, ones, m, m & is_lab, F, WEIGHTED
            )
        invalid = (bad | ((tl.abs(s - 1.0) <= tol) == 0)) & m
        tl.atomic_add(flags_ptr, tl.sum(invalid.to(tl.int64), axis=0), sem="relaxed")
        correct = (pred == lab) & m
        b = (conf * F).to(tl.int64)
        row = base + C * stride
        _add_row(total_ptr, hits_ptr, sums_ptr, wtotal_ptr, whits_ptr, row, b, conf, wi, ones, m, correct, F, WEIGHTED)
        if ENTROPY:
            u = tl.minimum(tl.maximum(-h / log_c, 0.0), 1.0)
            b = (u * F).to(tl.int64)
            row = base + (C + 1) * stride
            _add_row(
                total_ptr, hits_ptr, sums_ptr, wtotal_ptr, whits_ptr, row, b, u, wi, ones, m, correct, F, WEIGHTED
            )
        nll = -tl.log(tl.maximum(p_true, nll_eps))
        brier = sq - 2.0 * p_true + 1.0
        zero = tl.zeros([BLOCK], tl.float64)
        sbase = (pid % REP).to(tl.int64) * 3
        tl.atomic_add(scal_ptr + sbase, tl.sum(tl.where(m, wi, zero), axis=0), sem="relaxed")
        tl.atomic_add(scal_ptr + sbase + 1, tl.sum(tl.where(m, nll * wi, zero), axis=0), sem="relaxed")
        tl.atomic_add(scal_ptr + sbase + 2, tl.sum(tl.where(m, brier * wi, zero), axis=0), sem="relaxed")
