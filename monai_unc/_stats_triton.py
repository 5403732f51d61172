"""The Triton kernels of :mod:`._stats_kernels` (imported only when they are used: this module imports Triton).

``accumulate``: one launch adds ``k`` samples to the running sums of :class:`~monai_unc.stats.SampleStats`; each
program holds a block of voxels of the sums (all classes) in registers, adds the samples in order and writes the
block back. The per-sample entropy is the reference's formula (``-sum_c p_c log max(p_c, tiny)`` with ``p`` clamped
into [0, 1], or the binary entropy per channel) evaluated in float32 (float64 for float64 samples). ``value_flags``:
one launch of the read-only checks (per program: non-finite values, min, max, largest deviation of the class sums
from 1), reduced on the device and read with one synchronisation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton (e.g. collected by the doctests on such a machine): nothing is defined
    triton = None

__all__ = ["accumulate", "accumulate_outputs", "value_flags"]

#: voxels per program
BLOCK = 512


if triton is not None:

    @triton.jit
    def _stats_kernel(
        p_ptr,
        w_ptr,
        sp_ptr,
        sh_ptr,
        sp2_ptr,
        consts_ptr,
        nf_ptr,
        K,
        B,
        V,
        C: tl.constexpr,
        BLOCK_C: tl.constexpr,
        MULTILABEL: tl.constexpr,
        SQ: tl.constexpr,
        ACT: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        """Voxels ``[pid * BLOCK, ...)`` of batch item ``program_id(1)``: the ``K`` samples into the sums.

        ``ACT``: the samples are probabilities (0), or network outputs whose probabilities the kernel evaluates: a
        softmax over the ``C`` channels (1), a sigmoid per channel (2), or one channel ``z`` read as the two classes
        ``(sigmoid(-z), sigmoid(z))`` (3, ``C = 2``); then a program that reads a non-finite output stores 1 at
        ``nf_ptr``.
        """
        pid = tl.program_id(0)
        b = tl.program_id(1)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mv = offs < V
        cs = tl.arange(0, BLOCK_C)
        mc = cs < C
        m2 = mc[:, None] & mv[None, :]
        # the entropy's precision (float32, float64 for float64 samples) comes from consts' dtype
        tiny = tl.load(consts_ptr)
        one = tl.load(consts_ptr + 1)
        sum_idx = (b * C + cs[:, None]).to(tl.int64) * V + offs[None, :]
        one_idx = b.to(tl.int64) * V + offs
        acc_p = tl.load(sp_ptr + sum_idx, mask=m2, other=0.0)
        if MULTILABEL:
            acc_h = tl.load(sh_ptr + sum_idx, mask=m2, other=0.0)
        else:
            acc_h = tl.load(sh_ptr + one_idx, mask=mv, other=0.0)
        if SQ == 1:
            acc_2 = tl.load(sp2_ptr + sum_idx, mask=m2, other=0.0)
        if SQ == 2:
            acc_2 = tl.load(sp2_ptr + one_idx, mask=mv, other=0.0)
        for k in range(K):
            wk = tl.load(w_ptr + k)  # float64
            if ACT == 0:
                row = (k * B + b) * C
                x = tl.load(p_ptr + (row + cs[:, None]).to(tl.int64) * V + offs[None, :], mask=m2, other=0.0)
            else:
                x = _probabilities(p_ptr, nf_ptr, k * B + b, V, offs, mv, cs, mc, m2, one, C, ACT)
            xe = x.to(tiny.dtype)
            # the reference's clamp(p, 0, 1) log clamp(p, tiny, 1) (measures._entropy_t): values a little outside
            # [0, 1] count as 0 or 1; comparisons with NaN are false, so NaN stays NaN; masked lanes hold 0
            xe = tl.where(xe < 0.0, one - one, tl.where(xe > one, one, xe))
            lx = tl.log(tl.where(xe < tiny, tiny, xe))
            if MULTILABEL:
                q = one - xe
                lq = tl.log(tl.where(q < tiny, tiny, q))
                h = -(xe * lx + q * lq)
                acc_h = (acc_h + wk * h.to(tl.float64)).to(acc_h.dtype)
            else:
                h = -tl.sum(xe * lx, axis=0)
                acc_h = (acc_h + wk * h.to(tl.float64)).to(acc_h.dtype)
            xd = x.to(tl.float64)
            acc_p = (acc_p + wk * xd).to(acc_p.dtype)
            if SQ == 1:
                acc_2 = (acc_2 + wk * (xd * xd)).to(acc_2.dtype)
            if SQ == 2:
                acc_2 = (acc_2 + wk * tl.sum(xd * xd, axis=0)).to(acc_2.dtype)
        tl.store(sp_ptr + sum_idx, acc_p, mask=m2)
        if MULTILABEL:
            tl.store(sh_ptr + sum_idx, acc_h, mask=m2)
        else:
            tl.store(sh_ptr + one_idx, acc_h, mask=mv)
        if SQ == 1:
            tl.store(sp2_ptr + sum_idx, acc_2, mask=m2)
        if SQ == 2:
            tl.store(sp2_ptr + one_idx, acc_2, mask=mv)

    @triton.jit
    def _probabilities(z_ptr, nf_ptr, n, V, offs, mv, cs, mc, m2, one, C: tl.constexpr, ACT: tl.constexpr):
        """Row ``n``'s probabilities ``(BLOCK_C, BLOCK)`` from its network outputs, in ``one``'s precision (float32,
        float64 for float64 outputs); 1 stored at ``nf_ptr`` where an output in the block is not finite."""
        if ACT == 3:
            z1 = tl.load(z_ptr + n.to(tl.int64) * V + offs, mask=mv, other=0.0).to(one.dtype)
            bad = tl.sum(tl.where(mv & ((z1 - z1) != 0.0), 1, 0), axis=0)  # inf - inf and NaN - NaN are NaN
            z = tl.where(cs[:, None] == 0, -z1[None, :], z1[None, :])  # the background as sigmoid(-z)
            x = one / (one + tl.exp(-z))
        else:
            z = tl.load(z_ptr + (n * C + cs[:, None]).to(tl.int64) * V + offs[None, :], mask=m2, other=0.0)
            z = z.to(one.dtype)
            bad = tl.sum(tl.sum(tl.where(m2 & ((z - z) != 0.0), 1, 0), axis=1), axis=0)
            if ACT == 1:  # exp(z - max) / sum: the padding channels (BLOCK_C > C) hold -inf, so 0
                z = tl.where(mc[:, None], z, -float("inf"))
                e = tl.exp(z - tl.max(z, axis=0)[None, :])
                x = e / tl.sum(e, axis=0)[None, :]
            else:
                x = one / (one + tl.exp(-z))
        tl.store(nf_ptr, bad * 0 + 1, mask=bad > 0)  # only ever 1: programs that store it race harmlessly
        return x

    @triton.jit
    def _flags_kernel(p_ptr, out_ptr, V, C: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK: tl.constexpr):
        """Row ``program_id(1)``, voxels of block ``program_id(0)``: 4 float64 values at ``out[program]``."""
        pid = tl.program_id(0)
        n = tl.program_id(1)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mv = offs < V
        cs = tl.arange(0, BLOCK_C)
        m2 = (cs < C)[:, None] & mv[None, :]
        x = tl.load(p_ptr + (n * C + cs[:, None]).to(tl.int64) * V + offs[None, :], mask=m2, other=0.0)
        x = x.to(tl.float64)
        finite = (x - x) == 0.0  # NaN - NaN and inf - inf are NaN
        zero = tl.zeros_like(x)
        bad = tl.sum(tl.sum(tl.where(m2 & ~finite, 1.0 + zero, zero), axis=1), axis=0)
        lo = tl.min(tl.min(tl.where(m2 & finite, x, zero), axis=1), axis=0)
        hi = tl.max(tl.max(tl.where(m2 & finite, x, zero), axis=1), axis=0)
        s = tl.sum(tl.where(m2 & finite, x, zero), axis=0)
        dev = tl.max(tl.where(mv, tl.abs(s - 1.0), tl.zeros_like(s)), axis=0)
        slot = (n * tl.num_programs(0) + pid).to(tl.int64) * 4
        tl.store(out_ptr + slot, bad)
        tl.store(out_ptr + slot + 1, lo)
        tl.store(out_ptr + slot + 2, hi)
        tl.store(out_ptr + slot + 3, dev)


def _cdiv(n: int, d: int) -> int:
    """``ceil(n / d)`` (``triton.cdiv`` is a JIT function: called on the host, 4 us of its dispatch a launch)."""
    return -(-n // d)


def _pow2(n: int) -> int:
    """The smallest power of 2 ``>= n`` (``n >= 1``), as ``triton.next_power_of_2`` without its JIT dispatch."""
    return 1 << (int(n) - 1).bit_length()


#: ``[tiny, 1]`` per (device, dtype), and a float64 vector of ones per device (unit weights): made once, so that an
#: update copies nothing from the host (a blocking host-to-device copy would synchronise the device)
_CONSTS: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
_ONES: dict[torch.device, torch.Tensor] = {}


def _eval_consts(p: torch.Tensor) -> torch.Tensor:
    """``[tiny, 1]`` in the entropy's precision (read from memory: a float argument would be passed as float32)."""
    dtype = torch.float64 if p.dtype == torch.float64 else torch.float32  # measures.entropy_dtype's rule
    key = (p.device, dtype)
    if key not in _CONSTS:
        _CONSTS[key] = torch.tensor([torch.finfo(dtype).tiny, 1.0], dtype=dtype, device=p.device)
    return _CONSTS[key]


def _weights(weights: Sequence[float], device: torch.device) -> torch.Tensor:
    """The samples' weights as float64 on ``device``, without a synchronisation (cached ones, or an async copy)."""
    ws = [float(v) for v in weights]
    if all(v == 1.0 for v in ws):
        ones = _ONES.get(device)
        if ones is None or ones.numel() < len(ws):
            ones = _ONES[device] = torch.ones(max(len(ws), 64), dtype=torch.float64, device=device)
        return ones
    host = torch.tensor(ws, dtype=torch.float64)
    if device.type == "cuda":  # pinned: the copy is queued on the stream (the caching host allocator keeps it alive)
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def accumulate(
    p3: torch.Tensor,
    weights: Sequence[float],
    sum_p: torch.Tensor,
    sum_h: torch.Tensor,
    sum_p2: torch.Tensor | None,
    sq_mode: int,
    multilabel: bool,
) -> None:
    """Add ``k = p3.shape[0] // B`` samples ``(k * B, C, V)`` to the sums in place (one launch, no synchronisation).

    ``sq_mode``: 0 no second moment, 1 per class, 2 one channel ``sum_c p_c^2``.
    """
    _launch(p3, weights, sum_p, sum_h, sum_p2, sq_mode, multilabel, 0, None)


def accumulate_outputs(
    z3: torch.Tensor,
    weights: Sequence[float],
    sum_p: torch.Tensor,
    sum_h: torch.Tensor,
    sum_p2: torch.Tensor | None,
    sq_mode: int,
    multilabel: bool,
    activation: int,
    nonfinite: torch.Tensor,
) -> None:
    """:func:`accumulate` of ``k`` samples given as network outputs ``(k * B, C_in, V)``, whose probabilities the
    kernel evaluates (``activation``: 1 softmax, 2 sigmoid per channel, 3 one channel as two classes); a non-finite
    output stores 1 in ``nonfinite`` (one int32 on the device). One launch, no synchronisation."""
    _launch(z3, weights, sum_p, sum_h, sum_p2, sq_mode, multilabel, activation, nonfinite)


def _launch(p3: torch.Tensor, weights: Sequence[float], sum_p: torch.Tensor, sum_h: torch.Tensor,
            sum_p2: torch.Tensor | None, sq_mode: int, multilabel: bool, activation: int,
            nonfinite: torch.Tensor | None) -> None:
    n_rows, n_vox = p3.shape[0], p3.shape[2]
    n_batch, n_cls = sum_p.shape[0], sum_p.shape[1]
    w = _weights(weights, p3.device)
    sp2 = sum_p2 if sum_p2 is not None else sum_p
    grid = (_cdiv(n_vox, BLOCK), n_batch)
    _stats_kernel[grid](
        p3,
        w,
        sum_p,
        sum_h,
        sp2,
        _eval_consts(p3),
        nonfinite if nonfinite is not None else sum_p,
        n_rows // n_batch,
        n_batch,
        n_vox,
        C=n_cls,
        BLOCK_C=_pow2(n_cls),
        MULTILABEL=bool(multilabel),
        SQ=int(sq_mode),
        ACT=int(activation),
        BLOCK=BLOCK,
    )


def value_flags(p3: torch.Tensor, classes: bool) -> tuple[int, float, float, float]:
    """:func:`monai_unc._stats_kernels.value_flags` on a CUDA tensor: one launch, one synchronisation."""
    n_rows, n_cls, n_vox = p3.shape
    grid = (_cdiv(n_vox, BLOCK), n_rows)
    part = torch.empty((grid[0] * grid[1], 4), dtype=torch.float64, device=p3.device)
    _flags_kernel[grid](p3, part, n_vox, C=n_cls, BLOCK_C=_pow2(n_cls), BLOCK=BLOCK)
    bad, lo, hi, dev = torch.stack([part[:, 0].sum(), part[:, 1].min(), part[:, 2].max(), part[:, 3].max()]).tolist()
    return int(bad), lo, hi, (dev if classes else 0.0)
