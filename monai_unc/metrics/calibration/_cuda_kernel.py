"""The fused GPU update of :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`: one Triton kernel per case.

Each program reads a block of voxels once (the ``C`` probabilities, the label, the weight), checks them, finds the
top label and the normalised entropy, and adds to every row's counts, value sums and weights with atomics, and its
block sums of the weight, NLL and Brier terms to the scalars. Contention: the confidences of a segmentation
concentrate in a few fine bins, so many threads add to the same counters; the tables are privatised into
``REP`` replicas in global memory (program ``i`` adds to replica ``i mod REP``), summed once at the end. Per-block
copies in shared memory, the textbook remedy, do not fit: one row of ``F + 1 = 15361`` int64 counters is 120 KiB.

Results equal the reference's (the torch path, ``histogram.py``): the same float64 values and bins, first maximum
wins, int64 counts exact (integer atomics); float sums differ by the order of the additions only (atomics), within
the recursive-summation bound ``n * 2^-53`` relative.

Triton ships with torch's CUDA wheels; :func:`available` is False without it, and the histogram keeps the torch
path. The kernel also runs on CPU tensors under Triton's interpreter (``TRITON_INTERPRET=1``, set before Triton is
imported), which is how the tests check it without a GPU.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["available", "histogram_tables", "replicas"]

_KERNEL: Any = None
_IMPORT_FAILED = False
#: voxels per program
BLOCK = 512
#: the most bytes of replicated tables (``REP`` is lowered for many classes)
REPLICA_BYTES = 1 << 28
#: the most replicas
MAX_REPLICAS = 32


def available() -> bool:
    """Whether Triton imports (the kernel is compiled on first use)."""
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
    import triton
    import triton.language as tl

    @triton.jit
    def tables(
        p_ptr, y_ptr, w_ptr, total_ptr, hits_ptr, sums_ptr, wtotal_ptr, whits_ptr, scal_ptr, flags_ptr, consts_ptr,
        n,
        C: tl.constexpr, F: tl.constexpr, REP: tl.constexpr, WEIGHTED: tl.constexpr, ENTROPY: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        n64 = tl.full([BLOCK], 0, tl.int64) + n  # C * n may pass 2**31
        # float64 constants read from memory: a float argument would be passed as float32
        tol = tl.load(consts_ptr)
        log_c = tl.load(consts_ptr + 1)
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
            p_true = tl.where(lab == c, v, p_true)
            sq += v * v
            if ENTROPY:
                h += v * tl.log(tl.maximum(v, 2.2250738585072014e-308))
            idx = base + c * stride + (v * F).to(tl.int64)
            tl.atomic_add(total_ptr + idx, ones, mask=m)
            if WEIGHTED:
                tl.atomic_add(sums_ptr + idx, v * wi, mask=m)
                tl.atomic_add(wtotal_ptr + idx, wi, mask=m)
            else:
                tl.atomic_add(sums_ptr + idx, v, mask=m)
        invalid = (bad | ((tl.abs(s - 1.0) <= tol) == 0)) & m
        tl.atomic_add(flags_ptr, tl.sum(invalid.to(tl.int64), axis=0))
        idx = base + lab * stride + (p_true * F).to(tl.int64)  # the label row's hit: row y only
        tl.atomic_add(hits_ptr + idx, ones, mask=m)
        if WEIGHTED:
            tl.atomic_add(whits_ptr + idx, wi, mask=m)
        correct = (pred == lab) & m
        idx = base + C * stride + (conf * F).to(tl.int64)
        tl.atomic_add(total_ptr + idx, ones, mask=m)
        tl.atomic_add(hits_ptr + idx, ones, mask=correct)
        if WEIGHTED:
            tl.atomic_add(sums_ptr + idx, conf * wi, mask=m)
            tl.atomic_add(wtotal_ptr + idx, wi, mask=m)
            tl.atomic_add(whits_ptr + idx, wi, mask=correct)
        else:
            tl.atomic_add(sums_ptr + idx, conf, mask=m)
        if ENTROPY:
            u = tl.minimum(tl.maximum(-h / log_c, 0.0), 1.0)
            idx = base + (C + 1) * stride + (u * F).to(tl.int64)
            tl.atomic_add(total_ptr + idx, ones, mask=m)
            tl.atomic_add(hits_ptr + idx, ones, mask=correct)
            if WEIGHTED:
                tl.atomic_add(sums_ptr + idx, u * wi, mask=m)
                tl.atomic_add(wtotal_ptr + idx, wi, mask=m)
                tl.atomic_add(whits_ptr + idx, wi, mask=correct)
            else:
                tl.atomic_add(sums_ptr + idx, u, mask=m)
        nll = -tl.log(tl.maximum(p_true, 1e-15))
        brier = sq - 2.0 * p_true + 1.0
        zero = tl.zeros([BLOCK], tl.float64)
        sbase = (pid % REP).to(tl.int64) * 3
        tl.atomic_add(scal_ptr + sbase, tl.sum(tl.where(m, wi, zero), axis=0))
        tl.atomic_add(scal_ptr + sbase + 1, tl.sum(tl.where(m, nll * wi, zero), axis=0))
        tl.atomic_add(scal_ptr + sbase + 2, tl.sum(tl.where(m, brier * wi, zero), axis=0))

    return tables


def replicas(n_rows: int, n_fine: int, weighted: bool, n_programs: int) -> int:
    """Replicas of the tables: at most :data:`MAX_REPLICAS`, the programs and :data:`REPLICA_BYTES` of tables."""
    per = n_rows * (n_fine + 1) * (40 if weighted else 24)
    return max(1, min(MAX_REPLICAS, n_programs, REPLICA_BYTES // per))


def histogram_tables(
    p: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor | None,
    n_fine: int,
    uncertainty: bool,
    tol: float,
) -> tuple[dict[str, torch.Tensor | None], torch.Tensor]:
    """The histogram tables of one case's voxels from one kernel launch.

    Args:
        p: probabilities ``(C, n)``, any float dtype (read as float64), contiguous, on the kernel's device.
        y: reference labels ``(n,)`` in ``[0, C)`` (checked by the caller), same device.
        w: voxel weights ``(n,)`` float64 or None.
        n_fine: fine bins ``F``; tables have ``F + 1`` bins (a value of 1 lands in the extra one).
        uncertainty: fill the normalised-entropy row ``C + 1``.
        tol: tolerance of the range and sum checks.

    Returns:
        ``(tables, invalid)``: ``tables`` holds ``total``, ``hits`` ``(C + 2, F + 1)`` int64, ``sums`` float64,
        ``wtotal`` / ``whits`` (float64, None without weights) and ``scalars`` ``(3,)``; ``invalid`` a one-element
        int64 tensor on the device: the voxels that fail the checks (the tables are not to be used when it is not
        0). Nothing is synchronised here.
    """
    import triton

    kernel = _kernel()
    if kernel is None:
        raise RuntimeError("the fused GPU kernel needs Triton")
    n_cls, n = p.shape
    n_rows = n_cls + 2
    grid = triton.cdiv(n, BLOCK)
    rep = replicas(n_rows, n_fine, w is not None, grid)
    dev = p.device
    shape = (rep, n_rows, n_fine + 1)
    total = torch.zeros(shape, dtype=torch.int64, device=dev)
    hits = torch.zeros(shape, dtype=torch.int64, device=dev)
    sums = torch.zeros(shape, dtype=torch.float64, device=dev)
    weighted = w is not None
    wtotal = torch.zeros(shape if weighted else (1,), dtype=torch.float64, device=dev)
    whits = torch.zeros(shape if weighted else (1,), dtype=torch.float64, device=dev)
    scal = torch.zeros((rep, 3), dtype=torch.float64, device=dev)
    flags = torch.zeros(1, dtype=torch.int64, device=dev)
    w_arg = w if weighted else wtotal
    consts = torch.tensor([float(tol), math.log(n_cls)], dtype=torch.float64, device=dev)
    kernel[(grid,)](
        p, y, w_arg, total, hits, sums, wtotal, whits, scal, flags, consts, n,
        C=n_cls, F=n_fine, REP=rep, WEIGHTED=weighted, ENTROPY=bool(uncertainty), BLOCK=BLOCK,
    )
    out: dict[str, torch.Tensor | None] = {
        "total": total.sum(0),
        "hits": hits.sum(0),
        "sums": sums.sum(0),
        "wtotal": wtotal.sum(0) if weighted else None,
        "whits": whits.sum(0) if weighted else None,
        "scalars": scal.sum(0),
    }
    return out, flags
