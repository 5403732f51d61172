"""The fused GPU update of :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`: one Triton kernel per case.

Each program reads a block of voxels once (the ``C`` probabilities, the label, the weight), checks them, finds the
top label and the normalised entropy, and adds to every row's counts, value sums and weights with atomics, and its
block sums of the weight, NLL and Brier terms to the scalars. Contention: the confidences of a segmentation
concentrate in a few fine bins (probabilities near 0 and 1: the first and the last two bins), so many threads add
to the same counters. Two remedies: each program sums its voxels of those three bins per row in registers and adds
them with one atomic each (the others one atomic per voxel), and the tables are privatised into ``REP`` replicas in
global memory (program ``i`` adds to replica ``i mod REP``), summed once at the end. Per-block copies in shared
memory, the textbook remedy, do not fit: one row of ``F + 1 = 15361`` int64 counters is 120 KiB. Global atomics are
carried out in the L2 cache, so the replicas are also bounded by it: on an H200 (50 MiB of L2), 32 replicas of the
three-class tables (59 MB) took 1.5 times as long as 16 (29 MB) on probabilities spread over all bins, while
probabilities concentrated near 0 and 1 gain from more replicas (4.2 ms with 16, 3.7 ms with 32): 16 is the best
worst case (``benchmarks/README.md``). The kernel is
bound by its atomics: per voxel about two per row (count and value sum; the hits where the label agrees), and an
H200 carries out about 9e10 such atomics a second, about 2 ms for a three-class ``256^3`` volume.

Results equal the reference's (the torch path, ``histogram.py``): the same float64 values and bins, first maximum
wins, int64 counts exact (integer atomics); float sums differ by the order of the additions only (atomics), within
the recursive-summation bound ``n * 2^-53`` relative. The normalised entropy is computed here with Triton's log,
which may round differently from torch's: a voxel whose entropy lies within an ulp of a bin edge may land in the
neighbouring bin of the uncertainty row.

Triton ships with torch's CUDA wheels; :func:`available` is False without it, and the histogram keeps the torch
path. The kernel also runs on CPU tensors under Triton's interpreter (``TRITON_INTERPRET=1``, set before Triton is
imported), which is how the tests check it without a GPU.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..._lazy import lazy_optional

__all__ = ["available", "histogram_tables", "replicas"]

#: voxels per program
BLOCK = 512
#: the most bytes of replicated tables (``REP`` is lowered for many classes)
REPLICA_BYTES = 1 << 28
#: the most replicas
MAX_REPLICAS = 16
#: the largest share of the device's L2 cache the replicated tables may fill
L2_SHARE = 0.6
#: warps per program
NUM_WARPS = 4


def available() -> bool:
    """Whether Triton imports (the kernel is compiled on first use)."""
    return _kernel() is not None


def _build() -> Any:
    from ._triton_histogram import histogram_kernel  # imports Triton

    return histogram_kernel


#: the compiled kernel, or None without its optional dependency (built on first use)
_kernel = lazy_optional(_build)


def replicas(n_rows: int, n_fine: int, weighted: bool, n_programs: int, cache_bytes: int = 0) -> int:
    """Replicas of the tables: at most :data:`MAX_REPLICAS`, the programs and :data:`REPLICA_BYTES` of tables.

    Args:
        n_rows: rows of each table (``C + 2``).
        n_fine: fine bins ``F`` (a row has ``F + 1``).
        weighted: whether the two weight tables are filled too (40 bytes a bin instead of 24).
        n_programs: programs of the launch.
        cache_bytes: the device's L2 cache in bytes (0: unknown); the replicas then fill at most :data:`L2_SHARE` of
            it (at least one replica).

    Returns:
        The number of replicas, at least 1.
    """
    per = n_rows * (n_fine + 1) * (40 if weighted else 24)
    rep = min(MAX_REPLICAS, n_programs, REPLICA_BYTES // per)
    if cache_bytes > 0:
        rep = min(rep, int(cache_bytes * L2_SHARE) // per)
    return max(1, rep)


def _l2_bytes(dev: torch.device) -> int:
    """The L2 cache of a CUDA device in bytes, 0 where torch does not say (or for another device)."""
    if dev.type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)


def histogram_tables(
    p: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor | None,
    n_fine: int,
    uncertainty: bool,
    tol: float,
    nll_eps: float,
) -> tuple[dict[str, torch.Tensor | None], torch.Tensor]:
    """The histogram tables of one case's voxels from one kernel launch.

    Args:
        p: probabilities ``(C, n)``, any float dtype (read as float64), contiguous, on the kernel's device.
        y: reference labels ``(n,)`` in ``[0, C)`` (checked by the caller), same device.
        w: voxel weights ``(n,)`` float64 or None.
        n_fine: fine bins ``F``; tables have ``F + 1`` bins (a value of 1 lands in the extra one).
        uncertainty: fill the normalised-entropy row ``C + 1``.
        tol: tolerance of the range and sum checks.
        nll_eps: the probability of the true label is clipped to at least this inside ``-log p``.

    Returns:
        ``(tables, invalid)``: ``tables`` holds ``total``, ``hits`` ``(C + 2, F + 1)`` int64, ``sums`` float64,
        ``wtotal`` / ``whits`` (float64, None without weights) and ``scalars`` ``(3,)``; ``invalid`` a one-element
        int64 tensor on the device: the voxels that fail the checks (the tables are not to be used when it is not
        0). Nothing is synchronised here.
    """
    kernel = _kernel()
    if kernel is None:
        raise RuntimeError("the fused GPU kernel needs Triton")
    n_cls, n = p.shape
    n_rows = n_cls + 2
    grid = -(-n // BLOCK)  # ceil(n / BLOCK) (triton.cdiv is a JIT function: its dispatch on the host)
    dev = p.device
    rep = replicas(n_rows, n_fine, w is not None, grid, _l2_bytes(dev))
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
    tiny = torch.finfo(torch.float64).tiny
    consts = torch.tensor([float(tol), math.log(n_cls), float(nll_eps), tiny], dtype=torch.float64, device=dev)
    kernel[(grid,)](
        p, y, w_arg, total, hits, sums, wtotal, whits, scal, flags, consts, n,
        C=n_cls, F=n_fine, REP=rep, WEIGHTED=weighted, ENTROPY=bool(uncertainty), BLOCK=BLOCK, num_warps=NUM_WARPS,
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
