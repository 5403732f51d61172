"""The confidence histogram of Kock et al.: binning core and :class:`ConfidenceHistogram` (additive, exact).

For every case ``k`` the histogram holds, over a fine grid of ``F`` equal-width bins on [0, 1], the label
confidence histogram (one row per label ``l``: voxels whose ``p_l`` falls in each fine bin, split by
``r = [y == l]``), the prediction confidence histogram (the top label, ``r`` = top label correct) and the
uncertainty histogram (normalised entropy, ``r`` = top label correct); next to the int64 counts, float64 sums
of the binned values, of voxel weights, of ``-log p_y`` and of the Brier term. See
:mod:`monai_unc.metrics.calibration` for the definitions and :mod:`.functional` for the metrics that read it.

Binning: value ``v`` (clipped to [0, 1]) falls in fine bin ``floor(v * F)`` computed in float64; ``v = 1`` goes
to the last bin (Kock, Thielke et al., "Confidence histograms for model reliability analysis and temperature
calibration", Sec. 2.2).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch

from ..._deprecation import deprecated_arg_names
from ..._jit import KernelUnavailable, run_triton, triton_failure
from ..._utils import ArrayLike, check_integer, check_labels, check_probabilities, probability_tolerance, to_tensor
from ...measures import entropy
from ...state import ArrayBlocks, read_npz, register_state_type
from ._cpu_kernel import available as cpu_kernel_available
from ._cpu_kernel import histogram_tables as cpu_histogram_tables
from ._cuda_kernel import available as cuda_kernel_available
from ._cuda_kernel import histogram_tables as cuda_histogram_tables

__all__ = ["DEFAULT_FINE_BINS", "NLL_EPS", "ConfidenceHistogram", "coarse_bin_index", "confidence_bins", "top_label"]

#: fine bins per unit interval: 15 * 2**10, so that 15 (the default), 10, 20, 30, 60 and powers of two up
#: to 1024 coarse bins are unions of fine bins
DEFAULT_FINE_BINS = 15 * 2**10
#: probabilities of the true label are clipped to at least this value inside ``-log p``
NLL_EPS = 1e-15
#: voxels per chunk on the CPU (temporaries stay in cache)
_CPU_CHUNK = 1 << 17
#: the most bytes of per-chunk temporaries on a GPU (about ``50 (C + 2)`` per voxel): a 256^3 case with 3 classes
#: is one or two chunks, a 105-class case many, so the workspace never grows with the case (a 105-class 8 M voxel
#: case in one chunk would need 43 GB)
_CUDA_WORKSPACE_BYTES = 1 << 31


def _default_chunk(device: torch.device, num_classes: int) -> int:
    """Voxels per chunk when ``chunk_size`` is None.

    :data:`_CPU_CHUNK` on the CPU, else as many as fit in :data:`_CUDA_WORKSPACE_BYTES` of temporaries (at least
    ``2**20``).
    """
    if device.type == "cpu":
        return _CPU_CHUNK
    return max(1 << 20, _CUDA_WORKSPACE_BYTES // (50 * (num_classes + 2)))


_SCALAR_WEIGHT, _SCALAR_NLL, _SCALAR_BRIER = 0, 1, 2


# ----------------------------------------------------------------------------------------------------------------
# binning core
# ----------------------------------------------------------------------------------------------------------------
def _fine_index(
    vals: torch.Tensor, n_fine: int, scaled: torch.Tensor | None = None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """The fine bin ``floor(v * F)`` (int64) of float64 values ``v`` in [0, 1]; ``v = 1`` gives ``F``.

    The one binning formula of the torch path (the fused kernels compute the same in their own code). ``scaled``
    (float64) and ``out`` (int64), of the shape of ``vals``, hold the temporaries if given.
    """
    scaled = torch.mul(vals, n_fine) if scaled is None else torch.mul(vals, n_fine, out=scaled)
    if out is None:
        return scaled.to(torch.int64)  # truncation = floor for v >= 0
    return out.copy_(scaled)


def coarse_bin_index(fine: torch.Tensor, n_bins: int, n_fine_bins: int = DEFAULT_FINE_BINS) -> torch.Tensor:
    """The coarse bin of each fine bin: ``floor(i * n_bins / F)``, the re-binning the metrics use.

    Coarse bin ``b`` is the union of the fine bins ``i`` with ``b <= i n_bins / F < b + 1``; for an ``n_bins``
    that divides ``F`` these are ``F / n_bins`` consecutive fine bins, otherwise the coarse edges are rounded to the
    fine grid.

    Args:
        fine: fine bin indices in ``[0, F)`` (any integer dtype).
        n_bins: coarse bins.
        n_fine_bins: fine bins ``F``.

    Returns:
        The coarse bin indices (int64), of the shape of ``fine``.

    Raises:
        ValueError: ``n_bins`` or ``n_fine_bins`` is not a positive integer (``n_bins=0`` gave bin 0 for every fine
            bin, ``-3`` negative bins, ``n_fine_bins=0`` a ``ZeroDivisionError``; found by hostile testing).

    Example:
        >>> import torch
        >>> coarse_bin_index(torch.tensor([0, 767, 768, 15359]), 20)
        tensor([ 0,  0,  1, 19])
    """
    n_bins = check_integer(n_bins, "n_bins", 1)
    n_fine_bins = check_integer(n_fine_bins, "n_fine_bins", 1)
    return torch.div(fine.to(torch.int64) * n_bins, n_fine_bins, rounding_mode="floor")


def confidence_bins(values: torch.Tensor, n_bins: int, n_fine_bins: int = DEFAULT_FINE_BINS) -> torch.Tensor:
    """The coarse bin in which the calibration metrics count each value (the ECE family's binning).

    Fine bin ``floor(v * F)`` computed in float64 (``v`` clipped to [0, 1]; ``v = 1`` in the last bin), then its
    coarse bin (:func:`coarse_bin_index`): exactly where :func:`~monai_unc.metrics.calibration.ece` and its
    relatives, reading a :class:`ConfidenceHistogram` of ``F`` fine bins, count the value. For an ``n_bins`` that
    divides ``F`` this is ``floor(v * n_bins)`` for every value that float64 holds exactly as ``v * F`` (all float32
    values, for instance).

    Args:
        values: values in [0, 1] (any floating dtype; binned as float64).
        n_bins: coarse bins.
        n_fine_bins: fine bins ``F``.

    Returns:
        int64 bin indices in ``[0, n_bins)``, of the shape of ``values``.

    Raises:
        ValueError: ``n_bins`` or ``n_fine_bins`` is not a positive integer, or ``values`` contains NaN (a NaN has
            no bin, as in :meth:`ConfidenceHistogram.update`; found by hostile testing: it came back as bin
            ``-600479950316067``, and ``n_bins=-3`` or ``2.5`` gave negative or fractional bins).

    Example:
        >>> import torch
        >>> confidence_bins(torch.tensor([0.0, 0.8499999642372131, 0.85, 1.0]), 20)
        tensor([ 0, 16, 17, 19])
    """
    n_bins = check_integer(n_bins, "n_bins", 1)
    n_fine_bins = check_integer(n_fine_bins, "n_fine_bins", 1)
    vals = values.detach().to(torch.float64)
    if bool(torch.isnan(vals).any()):
        raise ValueError("values contains NaN: a NaN has no bin")
    vals = vals.clamp(0.0, 1.0)
    fine = _fine_index(vals, n_fine_bins).clamp_(max=n_fine_bins - 1)
    return coarse_bin_index(fine, n_bins, n_fine_bins)


class _Staging:
    """Accumulator of one update of one case; the single binning routine of this module is :meth:`bin`.

    Rows have ``F + 1`` bins: a value of exactly 1 lands in the extra bin, which :meth:`to_state` folds into the
    last one, so the bin index ``floor(v * F)`` needs no clamp. Voxel totals and hits (``r = 1``) are counted
    separately: every voxel is a hit in exactly one label row (its reference label), so the hits of the label
    rows cost one scatter over ``n`` voxels instead of an offset per row.
    """

    __slots__ = ("n_fine", "total", "hits", "sums", "wtotal", "whits", "scalars", "_ones")

    def __init__(self, n_rows: int, n_fine: int, weighted: bool, device: torch.device | str) -> None:
        shape = (n_rows, n_fine + 1)
        self.n_fine = n_fine
        self.total = torch.zeros(shape, dtype=torch.int64, device=device)
        self.hits = torch.zeros(shape, dtype=torch.int64, device=device)
        self.sums = torch.zeros(shape, dtype=torch.float64, device=device)
        self.wtotal = torch.zeros(shape, dtype=torch.float64, device=device) if weighted else None
        self.whits = torch.zeros(shape, dtype=torch.float64, device=device) if weighted else None
        self.scalars = torch.zeros(3, dtype=torch.float64, device=device)
        self._ones = torch.ones(0, dtype=torch.int64, device=device)

    def _ones_of(self, m: int) -> torch.Tensor:
        if self._ones.numel() < m:  # a materialised source scatters faster than an expanded one
            self._ones = torch.ones(m, dtype=torch.int64, device=self._ones.device)
        return self._ones[:m]

    def bin(
        self, vals: torch.Tensor, w: torch.Tensor | None, first_row: int = 0, ws: _Workspace | None = None
    ) -> torch.Tensor:
        """Add values ``(R', n)`` float64 in [0, 1] to rows ``first_row ...``; return their bin indices ``(R', n)``.

        The indices are within each row.
        Fine bin ``floor(v * F)`` computed in float64 (1.0 in the last bin); ``w`` are ``(n,)`` voxel weights.
        With a workspace ``ws`` the temporaries live in its buffers. Each row is scattered on its own, so the
        indices need no row offset.
        """
        n_rows, n = vals.shape
        if ws is None:
            idx = _fine_index(vals, self.n_fine)
        else:
            idx = _fine_index(vals, self.n_fine, ws.take(ws.fidx, n_rows, n), ws.take(ws.idx, n_rows, n))
        if self.wtotal is not None and w is None:
            raise ValueError("a weighted histogram needs voxel weights")
        ones = self._ones_of(n)
        for r in range(n_rows):
            row = first_row + r
            self.sums[row].scatter_add_(0, idx[r], vals[r] if w is None else vals[r] * w)
            self.total[row].scatter_add_(0, idx[r], ones)
            if self.wtotal is not None:
                self.wtotal[row].scatter_add_(0, idx[r], w)
        return idx

    def hit(
        self,
        row: int | None,
        idx: torch.Tensor,
        correct: torch.Tensor | None,
        w: torch.Tensor | None,
        out: torch.Tensor | None = None,
    ) -> None:
        """Count ``r = 1`` at bin indices ``idx`` ``(n,)`` of ``row``, where ``correct`` (all if None).

        Flat indices over all rows if ``row`` is None; ``out``: an int64 buffer of ``n`` for the 0/1 counts.
        """
        if correct is None:
            src = self._ones_of(idx.numel())
        elif out is not None:
            src = out.copy_(correct)
        else:
            src = correct.to(torch.int64)
        (self.hits.view(-1) if row is None else self.hits[row]).scatter_add_(0, idx, src)
        if self.whits is not None and w is not None:
            target = self.whits.view(-1) if row is None else self.whits[row]
            target.scatter_add_(0, idx, w if correct is None else w * correct)

    def to_state(self) -> _State:
        """Fold the overflow bin and split the counts into ``r = 0`` and ``r = 1``."""

        def fold(t: torch.Tensor) -> torch.Tensor:
            out = t[:, : self.n_fine].clone()
            out[:, -1] += t[:, -1]
            return out

        total, hits = fold(self.total), fold(self.hits)
        wcounts = None
        if self.wtotal is not None and self.whits is not None:
            wcounts = _split_weights(total, hits, fold(self.wtotal), fold(self.whits))
        return _State(torch.stack([total - hits, hits]), fold(self.sums), wcounts, self.scalars)

    def to_packed(self) -> _PackedState:
        """:meth:`to_state` packed (:class:`_PackedState`), without its dense tables; the staging is spent.

        The overflow bin is folded in place and the counts and weights split at the non-empty bins only, by the
        same operations as :meth:`to_state`: the packed state of ``to_state()``, bit for bit.
        """
        f = self.n_fine
        for t in (self.total, self.hits, self.sums, self.wtotal, self.whits):
            if t is not None:
                t[:, f - 1] += t[:, f]
        total, hits, sums = self.total[:, :f], self.hits[:, :f], self.sums[:, :f]
        index = ((total != 0) | (sums != 0)).view(-1).nonzero().squeeze(1)  # a weighted voxel is a counted one
        row, col = index.div(f, rounding_mode="floor"), index.remainder(f)
        t_nz, h_nz = total[row, col], hits[row, col]
        counts = torch.stack([t_nz - h_nz, h_nz])
        wcounts = None
        if self.wtotal is not None and self.whits is not None:
            wcounts = _split_weights(t_nz, h_nz, self.wtotal[row, col], self.whits[row, col])
        return _PackedState.of_bins(total.shape[0], f, index, counts, sums[row, col], wcounts, self.scalars.clone())


def _split_weights(total: torch.Tensor, hits: torch.Tensor, wtotal: torch.Tensor, whits: torch.Tensor
                   ) -> torch.Tensor:
    """The weights of ``r = 0`` and ``r = 1`` stacked, from the bins' total and hit counts and weights.

    The ``r = 0`` weight is ``total - hits``: where every voxel of a bin is a hit it is exactly 0 (not the rounding
    residue of two float sums scattered in different orders, as on a GPU), and never negative.
    """
    return torch.stack([torch.where(total == hits, torch.zeros_like(wtotal), (wtotal - whits).clamp_min_(0.0)), whits])


class _Workspace:
    """Buffers of one :meth:`ConfidenceHistogram.update`, reused by every chunk of ``n`` voxels.

    Fresh multi-megabyte temporaries per chunk cost a page fault per 4 KiB page each time the allocator returns
    them to the system (about a third of the update time on the CPU); these buffers are allocated once. Flat
    storage, so that a shorter last chunk still gets contiguous ``(rows, m)`` views (:meth:`take`).
    """

    __slots__ = ("fidx", "idx", "vals", "f1", "f2", "i1", "i2", "b1", "bc", "uc", "small", "rank")

    def __init__(self, n_cls: int, n_vals: int, n: int, device: torch.device) -> None:
        f64 = {"dtype": torch.float64, "device": device}
        self.small = torch.uint8 if n_cls < 256 else torch.int32
        self.vals = torch.empty(n_vals * n, **f64)
        self.fidx = torch.empty(n_vals * n, **f64)
        self.idx = torch.empty(n_vals * n, dtype=torch.int64, device=device)
        self.f1, self.f2 = torch.empty(n, **f64), torch.empty(n, **f64)
        self.i1 = torch.empty(n, dtype=torch.int64, device=device)
        self.i2 = torch.empty(n, dtype=torch.int64, device=device)
        self.b1 = torch.empty(n, dtype=torch.bool, device=device)
        self.bc = torch.empty(n_cls * n, dtype=torch.bool, device=device)
        self.uc = torch.empty(n_cls * n, dtype=self.small, device=device)
        self.rank = torch.arange(n_cls, 0, -1, dtype=self.small, device=device).unsqueeze(1)

    @staticmethod
    def take(buf: torch.Tensor, rows: int, m: int) -> torch.Tensor:
        """A contiguous ``(rows, m)`` view of the first ``rows * m`` elements of ``buf``."""
        return buf[: rows * m].view(rows, m)


def top_label(
    p: torch.Tensor, ws: _Workspace | None = None, conf_out: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Maximum and argmax over dim 0 of ``(C, n)``; the first maximum wins (as ``torch.argmax``).

    The argmax is read as ``C - max_c ([p_c == max] * (C - c))`` (one fused pass instead of
    ``torch.argmax``, which is ~50x slower along a non-innermost axis on the CPU).

    Args:
        p: probabilities ``(C, n)``, classes first.
        ws: optional workspace whose buffers hold the temporaries.
        conf_out: optional ``(n,)`` buffer that receives the maximum.

    Returns:
        ``(confidence, label)``: the maximum ``(n,)`` in the dtype of ``p`` and the argmax ``(n,)`` (uint8 for
        fewer than 256 classes).

    Example:
        >>> import torch
        >>> from monai_unc.metrics.calibration import top_label
        >>> top_label(torch.tensor([[0.2, 0.5, 0.4], [0.8, 0.5, 0.6]]))
        (tensor([0.8000, 0.5000, 0.6000]), tensor([1, 0, 1], dtype=torch.uint8))
    """
    n_cls, n = p.shape
    conf = torch.amax(p, 0, out=conf_out) if conf_out is not None else p.amax(0)
    if ws is None:
        dtype = torch.uint8 if n_cls < 256 else torch.int32
        rank = torch.arange(n_cls, 0, -1, dtype=dtype, device=p.device).unsqueeze(1)
        pred = torch.mul(p == conf, rank)
    else:
        is_max = torch.eq(p, conf, out=ws.take(ws.bc, n_cls, n))
        pred = torch.mul(is_max, ws.rank, out=ws.take(ws.uc, n_cls, n))
    return conf, pred.amax(0).neg_().add_(n_cls)


class _State:
    """Histogram of one case.

    Counts ``(2, R, F)`` (``r`` first), sums ``(R, F)``, weighted counts ``(2, R, F)`` or None, scalars ``(3,)``.
    """

    __slots__ = ("counts", "sums", "wcounts", "scalars")

    def __init__(
        self,
        counts: torch.Tensor,
        sums: torch.Tensor,
        wcounts: torch.Tensor | None,
        scalars: torch.Tensor,
    ) -> None:
        self.counts, self.sums, self.wcounts, self.scalars = counts, sums, wcounts, scalars

    @classmethod
    def zeros(cls, n_rows: int, n_fine: int, weighted: bool, device: torch.device | str = "cpu") -> _State:
        return cls(
            torch.zeros(2, n_rows, n_fine, dtype=torch.int64, device=device),
            torch.zeros(n_rows, n_fine, dtype=torch.float64, device=device),
            torch.zeros(2, n_rows, n_fine, dtype=torch.float64, device=device) if weighted else None,
            torch.zeros(3, dtype=torch.float64, device=device),
        )

    def weighted_counts(self) -> torch.Tensor:
        return self.counts.to(torch.float64) if self.wcounts is None else self.wcounts

    def make_weighted(self) -> None:
        if self.wcounts is None:
            self.wcounts = self.counts.to(torch.float64)

    @property
    def weighted(self) -> bool:
        return self.wcounts is not None

    def add_(self, other: _State | _PackedState) -> None:
        if isinstance(other, _PackedState):
            other.add_to(self)
            return
        if other.wcounts is not None or self.wcounts is not None:
            self.make_weighted()  # before the counts change
            self.wcounts += other.weighted_counts().to(self.counts.device)  # type: ignore[operator]
        self.counts += other.counts.to(self.counts.device)
        self.sums += other.sums.to(self.sums.device)
        self.scalars += other.scalars.to(self.scalars.device)

    def write_into(
        self, counts: torch.Tensor | None, wcounts: torch.Tensor | None, sums: torch.Tensor | None
    ) -> None:
        """Copy the tables into ``(R, 2, F)`` counts / weights and ``(R, F)`` sums (the layout of the stacked views)."""
        if counts is not None:
            counts.copy_(self.counts.transpose(0, 1))
        if wcounts is not None:
            wcounts.copy_(self.weighted_counts().transpose(0, 1))
        if sums is not None:
            sums.copy_(self.sums)

    def copy(self) -> _State:
        return _State(
            self.counts.clone(),
            self.sums.clone(),
            None if self.wcounts is None else self.wcounts.clone(),
            self.scalars.clone(),
        )

    def nbytes(self) -> int:
        ts = [self.counts, self.sums, self.scalars] + ([] if self.wcounts is None else [self.wcounts])
        return sum(t.numel() * t.element_size() for t in ts)


#: smallest integer dtypes (and the largest count each holds) of the counts of a packed case
_COUNT_DTYPES = ((torch.uint8, 255), (torch.int16, 2**15 - 1), (torch.int32, 2**31 - 1))


class _PackedState:
    """The histogram of one case as its non-empty bins only; what a per-case histogram keeps of each case.

    The dense tables of a case hold ``24 R F`` bytes (39 MiB for 105 classes and ``F = 15360``), mostly empty bins
    (a voxel is in one bin per row); this keeps the flat index ``r F + i`` of every bin where a table is non-zero
    (int32 where it fits), the two counts there in the smallest integer dtype that holds them, the sums and (once
    weighted) the weights there, and the scalars: at most ``32`` bytes per non-empty bin (``48`` weighted).
    :meth:`unpack` gives the dense tables back exactly (a ``-0.0`` sum reads ``0.0``). Immutable: histograms and
    cohort states that hold the same case share one packed state.
    """

    __slots__ = ("n_rows", "n_fine", "index", "counts_nz", "sums_nz", "wcounts_nz", "scalars")

    def __init__(
        self,
        n_rows: int,
        n_fine: int,
        index: torch.Tensor,
        counts_nz: torch.Tensor,
        sums_nz: torch.Tensor,
        wcounts_nz: torch.Tensor | None,
        scalars: torch.Tensor,
    ) -> None:
        self.n_rows, self.n_fine = n_rows, n_fine
        self.index, self.counts_nz, self.sums_nz, self.wcounts_nz = index, counts_nz, sums_nz, wcounts_nz
        self.scalars = scalars

    @classmethod
    def empty(cls, n_rows: int, n_fine: int, device: torch.device | str = "cpu") -> _PackedState:
        """A case without voxels."""
        return cls(
            n_rows,
            n_fine,
            torch.zeros(0, dtype=torch.int32, device=device),
            torch.zeros(2, 0, dtype=torch.uint8, device=device),
            torch.zeros(0, dtype=torch.float64, device=device),
            None,
            torch.zeros(3, dtype=torch.float64, device=device),
        )

    @classmethod
    def pack(cls, st: _State) -> _PackedState:
        """The non-empty bins of a dense state (on its device; the state is not changed)."""
        return cls.pack_tables(
            st.counts.transpose(0, 1), None if st.wcounts is None else st.wcounts.transpose(0, 1), st.sums, st.scalars
        )

    @classmethod
    def pack_tables(
        cls, counts: torch.Tensor, wcounts: torch.Tensor | None, sums: torch.Tensor, scalars: torch.Tensor
    ) -> _PackedState:
        """The non-empty bins of one case's tables in the layout of the stacked views (read, not changed).

        ``counts`` and ``wcounts`` ``(R, 2, F)``, ``sums`` ``(R, F)`` (views of any strides), ``scalars`` ``(3,)``.
        """
        n_rows, n_fine = sums.shape
        keep = (counts != 0).any(1) | (sums != 0)
        if wcounts is not None:
            keep |= (wcounts != 0).any(1)
        index = keep.view(-1).nonzero().squeeze(1)
        row, col = index.div(n_fine, rounding_mode="floor"), index.remainder(n_fine)
        return cls.of_bins(
            n_rows,
            n_fine,
            index,
            counts[row, :, col].T,
            sums[row, col].to(torch.float64),
            None if wcounts is None else wcounts[row, :, col].T.to(torch.float64),
            scalars.to(torch.float64).clone(),
        )

    @classmethod
    def of_bins(
        cls,
        n_rows: int,
        n_fine: int,
        index: torch.Tensor,
        counts: torch.Tensor,
        sums: torch.Tensor,
        wcounts: torch.Tensor | None,
        scalars: torch.Tensor,
    ) -> _PackedState:
        """The state of the non-empty bins ``index`` (int64, flat ``r F + i``), in the smallest types.

        ``counts`` ``(2, nnz)`` (stored in the smallest integer type of their largest value), ``sums`` ``(nnz,)``,
        ``wcounts`` ``(2, nnz)`` or None; the index is stored as int32 where it fits.
        """
        top = int(counts.max()) if counts.numel() else 0
        dtype = next((d for d, most in _COUNT_DTYPES if top <= most), torch.int64)
        return cls(
            n_rows,
            n_fine,
            index.to(torch.int32) if n_rows * n_fine <= 2**31 - 1 else index,
            counts.to(dtype).contiguous(),
            sums,
            None if wcounts is None else wcounts.contiguous(),
            scalars,
        )

    @property
    def weighted(self) -> bool:
        return self.wcounts_nz is not None

    @property
    def device(self) -> torch.device:
        return self.scalars.device

    def to(self, device: torch.device | str) -> _PackedState:
        """This state on ``device`` (itself when it is there)."""
        if self.device == torch.device(device):
            return self
        return _PackedState(
            self.n_rows,
            self.n_fine,
            self.index.to(device),
            self.counts_nz.to(device),
            self.sums_nz.to(device),
            None if self.wcounts_nz is None else self.wcounts_nz.to(device),
            self.scalars.to(device),
        )

    def _scatter(self, values: torch.Tensor, dtype: torch.dtype, lead: tuple[int, ...]) -> torch.Tensor:
        out = torch.zeros(*lead, self.n_rows * self.n_fine, dtype=dtype, device=self.device)
        out[..., self.index.long()] = values.to(dtype)
        return out.reshape(*lead, self.n_rows, self.n_fine)

    @property
    def counts(self) -> torch.Tensor:
        """Dense ``(2, R, F)`` int64 counts (a new tensor)."""
        return self._scatter(self.counts_nz, torch.int64, (2,))

    @property
    def sums(self) -> torch.Tensor:
        """Dense ``(R, F)`` float64 sums (a new tensor)."""
        return self._scatter(self.sums_nz, torch.float64, ())

    def weighted_counts(self) -> torch.Tensor:
        """Dense ``(2, R, F)`` float64 weights (the counts when unweighted; a new tensor)."""
        return self._scatter(self.counts_nz if self.wcounts_nz is None else self.wcounts_nz, torch.float64, (2,))

    def write_into(
        self, counts: torch.Tensor | None, wcounts: torch.Tensor | None, sums: torch.Tensor | None
    ) -> None:
        """Write the dense tables into contiguous ``(R, 2, F)`` counts / weights and ``(R, F)`` sums (zeroed first).

        The layout of the stacked views (:meth:`ConfidenceHistogram.views`); no dense temporary of the case.
        """
        dev = next(t.device for t in (counts, wcounts, sums, self.scalars) if t is not None)
        idx = self.index.to(dev).long()
        base = idx + idx.div(self.n_fine, rounding_mode="floor") * self.n_fine  # (r, 0, i) in (R, 2, F)
        for out, values, dtype in (
            (counts, self.counts_nz, torch.int64),
            (wcounts, self.counts_nz if self.wcounts_nz is None else self.wcounts_nz, torch.float64),
        ):
            if out is not None:
                flat = out.zero_().view(-1)
                flat[base] = values[0].to(device=out.device, dtype=dtype)
                flat[base + self.n_fine] = values[1].to(device=out.device, dtype=dtype)
        if sums is not None:
            sums.zero_().view(-1)[idx] = self.sums_nz.to(sums.device)

    def unpack(self) -> _State:
        """The dense state (new tensors)."""
        return _State(
            self.counts,
            self.sums,
            None if self.wcounts_nz is None else self.weighted_counts(),
            self.scalars.clone(),
        )

    def copy(self) -> _State:
        """A dense copy (:meth:`unpack`), as :meth:`_State.copy` of a dense state."""
        return self.unpack()

    def add_to(self, target: _State) -> None:
        """Add this case into the dense ``target`` (in place): the sums of :meth:`_State.add_` of its dense tables.

        Only the kept bins are added; every other bin of this case is zero, and adding zero changes no bin.
        """
        dev = target.counts.device
        idx = self.index.to(dev).long()
        if self.wcounts_nz is not None or target.wcounts is not None:
            target.make_weighted()  # before the counts change
            add = self.counts_nz if self.wcounts_nz is None else self.wcounts_nz
            target.wcounts.view(2, -1)[:, idx] += add.to(device=dev, dtype=torch.float64)  # type: ignore[union-attr]
        target.counts.view(2, -1)[:, idx] += self.counts_nz.to(device=dev, dtype=torch.int64)
        target.sums.view(-1)[idx] += self.sums_nz.to(dev)
        target.scalars += self.scalars.to(target.scalars.device)

    def nbytes(self) -> int:
        ts = [self.index, self.counts_nz, self.sums_nz, self.scalars]
        ts += [] if self.wcounts_nz is None else [self.wcounts_nz]
        return sum(t.numel() * t.element_size() for t in ts)


def _refuse_nan() -> NoReturn:
    """The ``ValueError`` of a NaN probability read by ``update(..., validate=False)``: a NaN has no bin.

    ``int64(NaN * F)`` would be an index far outside the tables; both update paths raise this error instead.
    """
    raise ValueError(
        "probs contains NaN: a NaN probability has no bin (validate=False skips the range and sum checks only; "
        "leave such voxels out with mask)"
    )


def _accumulate_probs(
    stage: _Staging,
    p: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor | None,
    validate: bool = True,
    uncertainty: bool = True,
    ws: _Workspace | None = None,
) -> None:
    """Add one chunk of voxels: probabilities ``(C, n)``, labels ``(n,)`` int64, weights ``(n,)`` or None.

    With ``validate``, a two-pass check (range incl. NaN via ``aminmax``, sum over classes; tolerance
    :func:`monai_unc._utils.probability_tolerance` of ``p``'s dtype) runs first; on a failure
    :func:`monai_unc._utils.check_probabilities` produces the error message. Without it, NaN is still refused
    (:func:`_refuse_nan`: a NaN has no bin; other values are clipped to [0, 1]). ``uncertainty=False``
    leaves the entropy row empty. ``ws``: buffers for chunks of up to its size (one is made if None).
    """
    n_cls, n = p.shape
    n_vals = n_cls + (2 if uncertainty else 1)
    if ws is None or ws.f1.numel() < n:
        ws = _Workspace(n_cls, n_vals, n, p.device)
    take = _Workspace.take
    vals = take(ws.vals, n_vals, n)
    probs = vals[:n_cls]
    probs.copy_(p)
    if validate:
        tol = probability_tolerance(p.dtype)  # wider for float16 / bfloat16 input
        lo, hi = torch.aminmax(probs)
        total = ws.f1[:n].copy_(probs[0])
        for c in range(1, n_cls):
            total.add_(probs[c])
        sum_dev = total.sub_(1.0).abs_().max()
        if not bool((lo >= -tol) & (hi <= 1.0 + tol) & (sum_dev <= tol)):
            check_probabilities(p.unsqueeze(0), "probs")
            raise ValueError("probs must be finite probabilities in [0, 1] that sum to 1 over the class dimension")
    probs.clamp_(0.0, 1.0)
    conf, pred = top_label(probs, ws, conf_out=vals[n_cls])  # the confidence goes straight into its row
    if not validate and bool(torch.isnan(conf).any()):  # amax propagates NaN: one NaN of a voxel makes its max NaN
        _refuse_nan()
    if uncertainty:
        vals[n_cls + 1] = entropy(probs.unsqueeze(0), normalize=True, validate=False).view(n)
        vals[n_cls + 1].clamp_(0.0, 1.0)
    idx = stage.bin(vals, w, ws=ws)
    y2 = y.unsqueeze(0)
    label_idx = torch.gather(idx[:n_cls], 0, y2, out=ws.i1[:n].view(1, n)).view(n)
    label_idx.add_(y, alpha=stage.n_fine + 1)  # flat index into the label rows
    stage.hit(None, label_idx, None, w)  # label rows: r = [y == l]
    correct = torch.eq(pred, y, out=ws.b1[:n])
    stage.hit(n_cls, idx[n_cls], correct, w, out=ws.i2[:n])  # top label and entropy rows: r = top label correct
    if uncertainty:
        stage.hit(n_cls + 1, idx[n_cls + 1], correct, w, out=ws.i2[:n])

    p_true = torch.gather(probs, 0, y2, out=ws.f1[:n].view(1, n)).view(n)
    nll_terms = torch.clamp_min(p_true, NLL_EPS, out=ws.f2[:n]).log_().neg_()
    scalars = stage.scalars
    if w is None:
        scalars[_SCALAR_WEIGHT] += n
        scalars[_SCALAR_NLL] += nll_terms.sum()
        flat = probs.reshape(-1)
        scalars[_SCALAR_BRIER] += torch.dot(flat, flat) - 2.0 * p_true.sum() + n
    else:
        brier_terms = (probs * probs).sum(0).sub_(p_true, alpha=2.0).add_(1.0)
        scalars[_SCALAR_WEIGHT] += w.sum()
        scalars[_SCALAR_NLL] += torch.dot(nll_terms, w)
        scalars[_SCALAR_BRIER] += torch.dot(brier_terms, w)


#: use the fused kernels where they apply (:func:`_fused_for`); tests switch them off to compare with the reference
FUSED_KERNELS = True
#: a per-case histogram keeps each case packed (:class:`_PackedState`); tests switch it off to compare with the dense
#: tables every case kept before
PACKED_CASES = True


def _fused_backend(p: torch.Tensor) -> str | None:
    """The fused kernel for probabilities like ``p``, or None (the reference torch path).

    ``"numba"`` on the CPU for float32 / float64 with numba installed, ``"triton"`` on CUDA with Triton installed.
    """
    if not FUSED_KERNELS:
        return None
    if p.device.type == "cpu":
        return "numba" if p.dtype in (torch.float32, torch.float64) and cpu_kernel_available() else None
    if p.device.type == "cuda":
        return "triton" if cuda_kernel_available() and triton_failure() is None else None
    return None


def _fused_for(p: torch.Tensor) -> bool:
    """Whether :func:`_accumulate_fused` handles probabilities like ``p``."""
    return _fused_backend(p) is not None


def _accumulate_fused(
    stage: _Staging,
    p: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor | None,
    validate: bool,
    uncertainty: bool,
) -> bool:
    """Add one case's voxels ``(C, n)`` with a fused kernel; False (nothing added) where none applies.

    Equal to :func:`_accumulate_probs` over the same voxels (see :mod:`._cpu_kernel` and :mod:`._cuda_kernel` for
    the float sums' bound). A check that fails raises the reference's error; without ``validate``, values that fail
    the checks leave the case to the reference path (which clips them as it always has, and refuses NaN). On a GPU
    the checks cost one synchronisation per case.
    """
    backend = _fused_backend(p)
    if backend is None or y.numel() == 0:
        return False
    tol = probability_tolerance(p.dtype)
    if backend == "numba":
        pn = p.detach().contiguous().numpy()
        yn = y.to(torch.int64).contiguous().numpy()
        wn = None if w is None else w.to(torch.float64).contiguous().numpy()

        def entropy_of(start: int, stop: int) -> np.ndarray:
            # the reference's values: the float64 copy clipped to [0, 1], normalised entropy clipped to [0, 1]
            # a copy also for float64 input (``to`` would return the input itself, and clamp_ would change it)
            q = p[:, start:stop].detach().to(torch.float64, copy=True).clamp_(0.0, 1.0)
            return entropy(q.unsqueeze(0), normalize=True, validate=False).view(-1).clamp_(0.0, 1.0).numpy()

        out = {
            "total": stage.total.numpy(),
            "hits": stage.hits.numpy(),
            "sums": stage.sums.numpy(),
            "scalars": stage.scalars.numpy(),
        }
        if stage.wtotal is not None and stage.whits is not None:
            out["wtotal"], out["whits"] = stage.wtotal.numpy(), stage.whits.numpy()
        # the kernel adds into the staging tables (fresh for this case) directly
        invalid, nan, bad_labels = cpu_histogram_tables(
            pn,
            yn,
            wn,
            stage.n_fine,
            entropy_of if uncertainty else None,
            tol,
            NLL_EPS,
            torch.get_num_threads(),
            out,
            chunk=_CPU_CHUNK,
        )
        if bad_labels:  # labels the caller left to the kernel (ConfidenceHistogram.update): the reference's error
            check_labels(y, "target", p.shape[0])
            raise ValueError(f"target must hold class labels in [0, {p.shape[0]})")
        if nan and not validate:  # the reference's error (with validate, check_probabilities' below)
            _refuse_nan()
        if invalid:
            for t in (stage.total, stage.hits, stage.sums, stage.wtotal, stage.whits, stage.scalars):
                if t is not None:
                    t.zero_()  # the reference path (or the error below) starts from empty tables
        tables = None
    else:
        wt = None if w is None else w.to(torch.float64).contiguous()
        try:
            tables, flags = run_triton(
                cuda_histogram_tables,
                p.detach().contiguous(), y.to(torch.int64).contiguous(), wt, stage.n_fine, uncertainty, tol, NLL_EPS,
            )
        except KernelUnavailable:  # no Triton kernel on this machine (warned once): the reference path adds the case
            return False
        invalid = int(flags.item())
    if invalid:
        if validate:
            check_probabilities(p.unsqueeze(0), "probs")
            raise ValueError("probs must be finite probabilities in [0, 1] that sum to 1 over the class dimension")
        return False  # unchecked values out of range or NaN: the reference path clips them (and refuses NaN)
    if tables is None:
        return True
    stage.total += tables["total"]
    stage.hits += tables["hits"]
    stage.sums += tables["sums"]
    if stage.wtotal is not None and stage.whits is not None:
        stage.wtotal += tables["wtotal"]
        stage.whits += tables["whits"]
    stage.scalars += tables["scalars"]
    return True


# ----------------------------------------------------------------------------------------------------------------
# input handling
# ----------------------------------------------------------------------------------------------------------------
def _voxel_map(x: Any, name: str, batch: int, spatial: tuple[int, ...]) -> torch.Tensor:
    """A label-shaped map ``(B, *spatial)`` or ``(B, 1, *spatial)`` as ``(B, n)``."""
    t = to_tensor(x, name)
    if tuple(t.shape) == (batch, 1, *spatial):
        t = t[:, 0]
    if tuple(t.shape) != (batch, *spatial):
        raise ValueError(
            f"{name} must have shape (B, *spatial) = {(batch, *spatial)} or (B, 1, *spatial), got {tuple(t.shape)}"
        )
    return t.reshape(batch, -1)


def _read_labels(y: torch.Tensor, m: torch.Tensor | None, num_classes: int, bounds: bool) -> torch.Tensor:
    """The label map ``(B, n)`` as int64, checked where it is read: where ``m`` is True (everywhere if None).

    The labels of voxels outside the mask or with zero weight are never read, so an ignore label there (e.g. 255)
    is no error; the labels that are read get :func:`monai_unc._utils.check_labels`'s checks and messages.
    ``bounds=False`` (no mask only) leaves the range to the fused kernel, as :func:`check_labels` does.
    """
    if m is None:
        return check_labels(y, "target", num_classes, bounds=bounds)
    read = y[m.to(y.device)]
    if read.numel():
        check_labels(read, "target", num_classes)
    return y.to(torch.int64)  # unread voxels may hold anything (a float NaN too): they are selected away


def _check_weights(w: torch.Tensor, name: str = "weights") -> torch.Tensor:
    if w.dtype == torch.bool:
        w = w.to(torch.float64)
    if not (w.is_floating_point() or w.dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)):
        raise TypeError(f"{name} must be a real-valued array, got dtype {w.dtype}")
    w = w.to(torch.float64)
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    if w.numel() and float(w.min()) < 0:
        raise ValueError(f"{name} must be non-negative, got minimum {float(w.min()):.4g}")
    tiny = torch.finfo(torch.float64).tiny
    sub = int(((w > 0) & (w < tiny)).sum()) if w.numel() else 0
    if sub:  # found by hostile testing, review 59: weights of 5e-324 gave an ECE of 0.615 for 0.429
        raise ValueError(f"{name} holds {sub} positive value(s) below {tiny:.4g}, the smallest normal float64 "
                         "(subnormal: a probability times such a weight keeps few or no digits); set them to 0 to "
                         "leave those voxels out, or scale the weights up (only their ratios matter)")
    return w


def _check_mask(m: torch.Tensor, name: str = "mask") -> torch.Tensor:
    if m.dtype != torch.bool:
        if m.is_floating_point() and not bool(torch.isfinite(m).all()):
            raise ValueError(f"{name} contains non-finite values")
        if not bool(((m == 0) | (m == 1)).all()):
            raise ValueError(f"{name} must be boolean (or 0/1)")
        m = m.to(torch.bool)
    return m


# ----------------------------------------------------------------------------------------------------------------
# the histogram
# ----------------------------------------------------------------------------------------------------------------
def _state_table(x: Any, dtype: torch.dtype) -> torch.Tensor:
    """A table of a state dict as a tensor of ``dtype``.

    A tensor stays on its device (a CUDA tensor cannot go through numpy); an array becomes a CPU tensor.
    """
    if isinstance(x, torch.Tensor):
        return x.detach().to(dtype)
    return to_tensor(np.asarray(x), "state").to(dtype)  # a file written on a big-endian machine too


#: relative tolerance of the consistency checks of a loaded state (:func:`_check_state_tables`): the float sums'
#: rounding (``n 2^-53`` relative for ``n`` voxels in one bin) stays far below it up to billions of voxels
_STATE_RTOL = 1e-6
#: cases checked at once by :func:`_check_state_tables` (its temporaries stay a few times one block's tables)
_STATE_CHECK_BLOCK = 64
#: at most about this many bytes of dense tables are read at once by :meth:`ConfidenceHistogram.load_state_dict`
_LOAD_BLOCK_BYTES = 1 << 24


def _table_source(x: Any) -> Any:
    """A table of a state dict as it can be read in blocks of cases: a tensor, ArrayBlocks, or a numpy array."""
    return x if isinstance(x, (torch.Tensor, ArrayBlocks)) else np.asarray(x)


def _table_blocks(x: Any, step: int) -> Any:
    """Consecutive blocks of ``step`` cases of a table of :func:`_table_source` (views, or read from a file)."""
    if isinstance(x, ArrayBlocks):
        return x.blocks(step)
    return (x[start : start + step] for start in range(0, x.shape[0], step))


def _check_state_tables(
    counts: torch.Tensor,
    sums: torch.Tensor,
    wcounts: torch.Tensor | None,
    scalars: torch.Tensor,
    num_classes: int,
) -> None:
    """``ValueError`` naming the table when a state's tables are not those of any histogram (a damaged or edited file).

    The tables as stored, ``counts`` ``(N, R, 2, F)`` int64, ``sums`` ``(N, R, F)``, ``wcounts`` ``(N, R, 2, F)``
    or None, ``scalars`` ``(N, 3)`` float64. Every update, merge and gather keeps these invariants: counts and
    weights non-negative, weights only in bins with voxels; every label row holds each voxel once, as the top-label
    row does, and each voxel is a hit in exactly one label row (its reference label); the values of fine bin ``i``
    lie in ``[i / F, (i + 1) / F]``, so its sum lies between its weight times those edges; the total weight is the
    weight of the top-label row (of the uncertainty row where that holds more: :meth:`from_uncertainty`); each voxel
    adds at most ``-log NLL_EPS`` to the NLL sum and at most ``C`` to the Brier sum (``sum_l (p_l - [y = l])^2``
    of values clipped to [0, 1]; at most 2 for probabilities that sum to 1). Float comparisons allow
    :data:`_STATE_RTOL` of rounding.
    """
    c, n_fine = num_classes, counts.shape[-1]
    edges = torch.arange(n_fine + 1, dtype=torch.float64, device=sums.device) / n_fine
    nll_max = -math.log(NLL_EPS)
    lo_f, hi_f = 1.0 - _STATE_RTOL, 1.0 + _STATE_RTOL
    for start in range(0, counts.shape[0], _STATE_CHECK_BLOCK):
        part = slice(start, start + _STATE_CHECK_BLOCK)
        cnt, sm, sc = counts[part], sums[part], scalars[part]
        wc = None if wcounts is None else wcounts[part]
        if bool((cnt < 0).any()):
            raise ValueError("state counts must be non-negative (voxels per bin)")
        for name, t in (("sums", sm), ("scalars", sc), ("weighted_counts", wc)):
            if t is not None and not bool(torch.isfinite(t).all()):
                raise ValueError(f"state {name} holds non-finite values")
        if wc is not None and bool(((wc < 0) | ((cnt == 0) & (wc != 0))).any()):
            raise ValueError("state weighted_counts must be non-negative, and 0 in bins without voxels")
        voxels = cnt.sum(2)  # (N, R, F)
        rows = voxels.sum(-1)  # (N, R)
        if not torch.equal(rows[:, :c], rows[:, c : c + 1].expand(-1, c)):
            raise ValueError("state counts: every label row must hold as many voxels as the top-label row")
        if not torch.equal(cnt[:, :c, 1].sum((1, 2)), rows[:, c]):
            raise ValueError("state counts: the label rows' hits (r = 1) must add up to the top-label row's voxels")
        weight = voxels.to(torch.float64) if wc is None else wc.sum(2)  # (N, R, F)
        if bool(((sm < weight * edges[:-1] * lo_f) | (sm > weight * edges[1:] * hi_f)).any()):
            raise ValueError(
                "state sums: the sum of a fine bin i must lie between its weight times i / F and (i + 1) / F"
            )
        row_weight = weight.sum(-1)  # (N, R)
        total = torch.maximum(row_weight[:, c], row_weight[:, c + 1])
        w, nll, brier = sc[:, _SCALAR_WEIGHT], sc[:, _SCALAR_NLL], sc[:, _SCALAR_BRIER]
        if bool(((w - total).abs() > _STATE_RTOL * total).any()):
            raise ValueError("state scalars: the total weight must be the weight of the voxels in the tables")
        if bool((w > _weight_limit(c)).any()):  # what update and merge refuse (review 59) is no loadable state either
            raise ValueError(f"state scalars: a case's total weight is above {_weight_limit(c):.4g}, the most whose "
                             "NLL and Brier sums float64 holds")
        if bool(((nll < -_STATE_RTOL * w) | (nll > nll_max * w * hi_f)).any()):
            raise ValueError(f"state scalars: the NLL sum must lie in [0, {nll_max:.4g} x total weight]")
        if bool(((brier < -_STATE_RTOL * w) | (brier > c * w * hi_f)).any()):
            raise ValueError("state scalars: the Brier sum must lie in [0, C x total weight]")


def _weight_limit(num_classes: int) -> float:
    """The largest total voxel weight of a case whose NLL and Brier sums float64 holds.

    A case's NLL sum grows to ``-log NLL_EPS = 34.5`` times its total weight and its Brier sum to ``C`` times it.
    """
    return float(np.finfo(np.float64).max) / max(-math.log(NLL_EPS), num_classes)


#: the arrays of the packed layout of a state (:meth:`ConfidenceHistogram.packed_state_dict`); ``bin_weighted_counts``
#: only once weighted
_PACKED_KEYS = ("bin_offsets", "bin_index", "bin_counts", "bin_sums", "bin_weighted_counts")
#: the arrays of the dense layout (:meth:`ConfidenceHistogram.state_dict`)
_DENSE_KEYS = ("counts", "sums", "weighted_counts")


def _check_integral_counts(raw: Any, counts: torch.Tensor) -> None:
    """``ValueError`` when a dense ``counts`` table given as floats holds a value that is no integer (NaN, 2.5, ...).

    In earlier versions the int64 conversion truncated them without a word (an edited state's
    counts 2.9 read as 2), where the packed layout refuses a float table outright; integral floats (counts summed as
    floats across ranks) are still read.
    """
    if isinstance(raw, torch.Tensor):
        floating = raw.is_floating_point() or raw.is_complex()
    else:
        floating = np.asarray(raw).dtype.kind in "fc"
    if not floating:
        return
    src = raw.detach() if isinstance(raw, torch.Tensor) else to_tensor(np.asarray(raw), "state")
    if src.is_complex() or not bool(torch.equal(src.to(counts.device, torch.float64), counts.to(torch.float64))):
        raise ValueError("state counts must hold whole numbers of voxels, got fractional, complex or non-finite values")


def _packed_integers(x: Any, key: str, shape: tuple[int, ...]) -> torch.Tensor:
    """An integer array of a packed state as int64, ``ValueError`` naming ``key`` for another dtype or shape.

    Offsets, indices and counts are integers: a float, bool or complex array (whose conversion would truncate) is a
    damaged state, and so is an unsigned 64-bit value beyond int64.
    """
    if isinstance(x, torch.Tensor):
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise ValueError(f"state {key} must hold integers, got {x.dtype}")
        t = x.detach()
    else:
        arr = np.asarray(x)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"state {key} must hold integers, got {arr.dtype}")
        if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and int(arr.max()) > 2**63 - 1:
            raise ValueError(f"state {key} holds a value beyond int64")
        t = to_tensor(arr.astype(np.int64, copy=False), "state")
    if tuple(t.shape) != shape:
        raise ValueError(f"state {key} must have shape {shape}, got {tuple(t.shape)}")
    return t.to(torch.int64)


def _packed_floats(x: Any, key: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A float array of a packed state as float64, ``ValueError`` naming ``key`` for another shape or NaN / inf."""
    t = _state_table(x if isinstance(x, torch.Tensor) else np.asarray(x), torch.float64)
    if tuple(t.shape) != shape:
        raise ValueError(f"state {key} must have shape {shape}, got {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"state {key} holds non-finite values")
    return t


def _unpack_cases(state: Mapping[str, Any], n_rows: int, n_fine: int) -> list[_PackedState]:
    """The cases of a state of the packed layout (:meth:`ConfidenceHistogram.packed_state_dict`), checked.

    ``ValueError`` naming the array for offsets that do not start at 0, decrease or do not end at the number of bins,
    indices outside ``[0, R F)`` or not strictly increasing within a case (unsorted or repeated), counts or weights
    below 0, non-finite sums, weights or scalars, or arrays of other shapes or dtypes. The tables these pass are
    checked further by the dense path's :func:`_check_state_tables` (by the caller).
    """
    missing = [k for k in _PACKED_KEYS[:4] + ("scalars",) if k not in state]
    if missing:
        raise ValueError(f"state of the packed layout lacks {missing}")
    raw_offsets = state["bin_offsets"]
    n_off = tuple(np.shape(raw_offsets))
    if len(n_off) != 1 or n_off[0] < 1:
        raise ValueError(f"state bin_offsets must have shape (N + 1,), got {n_off}")
    offsets = _packed_integers(raw_offsets, "bin_offsets", n_off).cpu()
    n = n_off[0] - 1
    k = tuple(np.shape(state["bin_index"]))
    nnz = k[0] if len(k) == 1 else -1
    if nnz < 0:
        raise ValueError(f"state bin_index must have shape (K,), got {k}")
    if int(offsets[0]) != 0 or bool((offsets[1:] < offsets[:-1]).any()) or int(offsets[-1]) != nnz:
        raise ValueError(f"state bin_offsets must rise from 0 to the {nnz} bins of bin_index (case by case)")
    index = _packed_integers(state["bin_index"], "bin_index", (nnz,))
    if nnz and (int(index.min()) < 0 or int(index.max()) >= n_rows * n_fine):
        raise ValueError(f"state bin_index must lie in [0, {n_rows * n_fine}) (rows x fine bins)")
    step = index[1:] - index[:-1]
    first = torch.zeros(nnz, dtype=torch.bool, device=index.device)  # the first bin of each non-empty case
    starts = offsets[:-1][offsets[:-1] < offsets[1:]]
    first[starts.to(index.device)] = True
    if bool((step <= 0)[~first[1:]].any()):
        raise ValueError("state bin_index must be strictly increasing within each case (sorted, no bin twice)")
    counts = _packed_integers(state["bin_counts"], "bin_counts", (2, nnz))
    if bool((counts < 0).any()):
        raise ValueError("state bin_counts must be non-negative (voxels per bin)")
    sums = _packed_floats(state["bin_sums"], "bin_sums", (nnz,))
    wc = None
    if "bin_weighted_counts" in state:
        wc = _packed_floats(state["bin_weighted_counts"], "bin_weighted_counts", (2, nnz))
        if bool((wc < 0).any()):
            raise ValueError("state bin_weighted_counts must be non-negative")
    scalars = _packed_floats(state["scalars"], "scalars", (n, 3))
    cases = []
    for i in range(n):
        a, b = int(offsets[i]), int(offsets[i + 1])
        # of_bins stores each case in its own smallest types; clones, so that no case keeps the others' arrays
        cases.append(_PackedState.of_bins(
            n_rows, n_fine, index[a:b].clone(), counts[:, a:b].clone(), sums[a:b].clone(),
            None if wc is None else wc[:, a:b].clone(), scalars[i].clone(),
        ))
    return cases


def _check_packed_cases(cases: Sequence[_PackedState], weighted: bool, num_classes: int, step: int) -> None:
    """:func:`_check_state_tables` of packed cases, written into dense buffers of ``step`` cases at a time."""
    if not cases:
        return
    n_rows, n_fine, device = cases[0].n_rows, cases[0].n_fine, cases[0].device
    m = min(step, len(cases))
    cnt = torch.empty(m, n_rows, 2, n_fine, dtype=torch.int64, device=device)
    sm = torch.empty(m, n_rows, n_fine, dtype=torch.float64, device=device)
    wct = torch.empty(m, n_rows, 2, n_fine, dtype=torch.float64, device=device) if weighted else None
    for start in range(0, len(cases), m):
        block = cases[start : start + m]
        for i, st in enumerate(block):
            st.write_into(cnt[i], None if wct is None else wct[i], sm[i])
        j = len(block)
        _check_state_tables(cnt[:j], sm[:j], None if wct is None else wct[:j],
                            torch.stack([st.scalars for st in block]), num_classes)


def _state_case_ids(state: Mapping[str, Any], n: int) -> list[Hashable]:
    """The case ids of a state dict of ``n`` cases (``case_id_is_int`` marks the automatic numbers), checked."""
    ids_raw = [str(c) for c in np.asarray(state["case_ids"]).tolist()]
    is_int = np.asarray(state.get("case_id_is_int", np.zeros(n, dtype=bool))).tolist()
    if len(ids_raw) != n:
        raise ValueError(f"state has {len(ids_raw)} case ids for {n} cases")
    return [int(c) if flag else c for c, flag in zip(ids_raw, is_int)]


def _unreadable(path: Path, err: BaseException) -> ValueError:
    """The error of a histogram file that cannot be read (:meth:`ConfidenceHistogram.load`)."""
    return ValueError(
        f"path: {path} is not a readable ConfidenceHistogram file (corrupt or truncated?): {type(err).__name__}: {err}"
    )


def _case_key(case_id: Hashable) -> tuple[int, int, str]:
    """Sort key of a case id: automatic numbers (ints) first in their order, then names."""
    return (0, case_id, "") if isinstance(case_id, int) else (1, 0, str(case_id))


@register_state_type("confidence_histogram")
class ConfidenceHistogram:
    """Per-case label / prediction / uncertainty confidence histograms (Kock et al. Sec. 2.2), additive and exact.

    State per case (``R = C + 2`` rows: labels ``0..C-1``, then the top label ``C``, then normalised entropy
    ``C + 1``; ``F = n_fine_bins``):

    - ``counts``   ``(R, 2, F)`` int64 voxels per fine bin, ``[:, 1]`` where ``r = 1`` (label is the
      reference label; top label correct; for the entropy row, top label correct);
    - ``sums``     ``(R, F)`` float64 weighted sum of the binned value (probability or normalised entropy);
    - ``weighted_counts`` ``(R, 2, F)`` float64 voxel weights per bin (stored only once weights were given;
      equal to ``counts`` otherwise);
    - ``scalars``  ``(3,)`` float64: total weight, weighted sum of ``-log max(p_y, 1e-15)``, weighted sum of
      ``sum_l (p_l - [y == l])^2`` (indices :attr:`SCALAR_WEIGHT`, :attr:`SCALAR_NLL`, :attr:`SCALAR_BRIER`).

    Memory: pooled (``per_case=False``), the dense tables once, ``24 R F`` bytes (``+16 R F`` once weighted), 1.8
    MiB for ``C = 3`` and the default ``F``. Per case, each case's non-empty bins only (at most 32 bytes each, 48
    weighted; a case fills few of its ``R F`` bins), shared by the histograms it is merged into; per-case metrics read
    a block of cases at a time (:meth:`case_views`), :meth:`state_dict_blocks` gives the tables one block at a
    time (found by hostile testing: a 105-class cohort held 39 MiB of dense tables per case), and
    :meth:`packed_state_dict` the non-empty bins only (what the evaluation's per-case records and the ``torchrun``
    gather hold). Histograms add exactly: :meth:`merge` of per-case histograms equals the histogram of the pooled
    voxels.

    Args:
        num_classes: ``C >= 2``.
        n_fine_bins: ``F``, fine bins on [0, 1]. Default ``15 * 2**10`` (see the module docstring); Kock et al.
            uses ``2**14``.
        per_case: keep one histogram per case (for per-case values and box plots); otherwise one pooled.
        chunk_size: voxels processed at once by the torch path (temporaries ``~ 50 (C + 2)`` bytes per voxel);
            default ``2**17`` on the CPU and, on a GPU, as many as fit in 2 GiB of temporaries (at least
            ``2**20``). The fused kernels (below) read a case in one pass and do not use it.
        uncertainty: fill the normalised-entropy row (needed by :func:`uce` only; computing the entropy is
            about a fifth of the update time).

    Typical use: ``for batch in loader: hist.update(batch["pred"], batch["label"], case_ids=batch["name"])``, then
    any metric of :mod:`monai_unc.metrics.calibration` reads ``hist``.

    The update reads each case once with a fused kernel where one applies: on the CPU a compiled loop (numba, the
    ``fast`` extra; float32 / float64 probabilities), on CUDA tensors a Triton kernel (Triton ships with torch's
    CUDA wheels). Both give the counts of the torch path exactly and its float sums up to the order of the
    additions; elsewhere (no numba, other dtypes or devices) the torch path runs.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import ConfidenceHistogram, all_label_ece, ece, nll
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> hist = ConfidenceHistogram(num_classes=3)
        >>> _ = hist.update(probs, target, case_ids=["a", "b"])
        >>> len(hist), hist.counts.shape
        (2, torch.Size([2, 5, 2, 15360]))
        >>> round(ece(hist, n_bins=5), 4), round(all_label_ece(hist, n_bins=5), 4), round(nll(hist), 4)
        (0.2643, 0.1824, 1.3831)
        >>> ece(hist, n_bins=5, per_case=True).round(4)
        array([0.2111, 0.3175])
        >>> other = ConfidenceHistogram(num_classes=3).update(probs[:1], target[:1], case_ids=["a"])
        >>> len(hist.merge(other))
        2
    """

    #: index of the total voxel weight in :attr:`scalars`
    SCALAR_WEIGHT = _SCALAR_WEIGHT
    #: index of the weighted sum of ``-log max(p_y, 1e-15)`` in :attr:`scalars`
    SCALAR_NLL = _SCALAR_NLL
    #: index of the weighted sum of the Brier term ``sum_l (p_l - [y == l])^2`` in :attr:`scalars`
    SCALAR_BRIER = _SCALAR_BRIER

    def __init__(
        self,
        num_classes: int,
        n_fine_bins: int = DEFAULT_FINE_BINS,
        per_case: bool = True,
        chunk_size: int | None = None,
        uncertainty: bool = True,
    ) -> None:
        num_classes, n_fine_bins = self.check_layout(num_classes, n_fine_bins)
        if chunk_size is not None and (not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
        self.num_classes = int(num_classes)
        self.n_fine_bins = int(n_fine_bins)
        self.per_case = bool(per_case)
        self.chunk_size = None if chunk_size is None else int(chunk_size)
        self.uncertainty = bool(uncertainty)
        self.case_ids: list[Hashable] = []
        self._states: list[_State | _PackedState] = []  # packed per case (PACKED_CASES), dense when pooled
        self._index: dict[Hashable, int] = {}
        self._pooled_cache: _State | _PackedState | None = None

    @staticmethod
    def check_layout(num_classes: Any, n_fine_bins: Any) -> tuple[Any, int]:
        """``(num_classes, n_fine_bins)`` as integers, checked as the constructor checks them.

        Args:
            num_classes: an integer >= 2, or None (not known yet: left as it is).
            n_fine_bins: a positive integer.

        Returns:
            ``(num_classes, n_fine_bins)``, ``num_classes`` None when it was.

        Raises:
            ValueError: either is not such an integer (a bool, a float, a string, 0).

        Example:
            >>> ConfidenceHistogram.check_layout(3, 15360)
            (3, 15360)
        """
        if num_classes is not None and (isinstance(num_classes, bool)
                                        or not isinstance(num_classes, (int, np.integer)) or num_classes < 2):
            raise ValueError(
                f"num_classes must be an integer >= 2 (binary tasks carry both channels), got {num_classes!r}"
            )
        if isinstance(n_fine_bins, bool) or not isinstance(n_fine_bins, (int, np.integer)) or n_fine_bins < 1:
            raise ValueError(f"n_fine_bins must be a positive integer, got {n_fine_bins!r}")
        return (None if num_classes is None else int(num_classes)), int(n_fine_bins)

    # -- layout -------------------------------------------------------------------------------------------------
    @property
    def num_rows(self) -> int:
        """``C + 2``: one row per label, the top label, normalised entropy."""
        return self.num_classes + 2

    @property
    def top_row(self) -> int:
        """Index ``C`` of the top-label (prediction confidence) row."""
        return self.num_classes

    @property
    def uncertainty_row(self) -> int:
        """Index ``C + 1`` of the normalised-entropy row."""
        return self.num_classes + 1

    @property
    def weighted(self) -> bool:
        """Whether voxel weights were ever given (then ``weighted_counts`` differ from ``counts``)."""
        return any(s.weighted for s in self._states)

    @property
    def nbytes(self) -> int:
        """Bytes held by the histogram tensors (all cases; a per-case histogram holds each case's non-empty bins)."""
        return sum(s.nbytes() for s in self._states)

    def __len__(self) -> int:
        """Number of cases (1 when pooled and updated, 0 when empty)."""
        return len(self._states)

    def __repr__(self) -> str:
        return (
            f"ConfidenceHistogram(num_classes={self.num_classes}, n_fine_bins={self.n_fine_bins}, "
            f"per_case={self.per_case}, uncertainty={self.uncertainty}, cases={len(self)})"
        )

    def _stack(self, attr: str) -> torch.Tensor:
        if not self._states:
            raise ValueError("the histogram is empty: call update() first")
        if attr == "scalars":
            return torch.stack([s.scalars for s in self._states])
        n, r, f = len(self._states), self.num_rows, self.n_fine_bins
        device = self._states[0].scalars.device
        if attr == "sums":
            out = torch.empty(n, r, f, dtype=torch.float64, device=device)
            for i, s in enumerate(self._states):
                s.write_into(None, None, out[i])
            return out
        out = torch.empty(n, r, 2, f, dtype=torch.int64 if attr == "counts" else torch.float64, device=device)
        for i, s in enumerate(self._states):
            if attr == "counts":
                s.write_into(out[i], None, None)
            else:
                s.write_into(None, out[i], None)
        return out

    @property
    def counts(self) -> torch.Tensor:
        """``(n_cases, R, 2, F)`` int64."""
        return self._stack("counts")

    @property
    def sums(self) -> torch.Tensor:
        """``(n_cases, R, F)`` float64."""
        return self._stack("sums")

    @property
    def weighted_counts(self) -> torch.Tensor:
        """``(n_cases, R, 2, F)`` float64 (the counts when no weights were given)."""
        return self._stack("wcounts")

    @property
    def scalars(self) -> torch.Tensor:
        """``(n_cases, 3)`` float64: total weight, weighted NLL sum, weighted Brier sum."""
        return self._stack("scalars")

    def _pooled(self) -> _State:
        if not self._states:
            raise ValueError("the histogram is empty: call update() first")
        if self._pooled_cache is None:
            # in case-id order, whatever order the cases were added or merged in: the float sums of a cohort are the
            # same bits for one pass and for shards merged in any order
            order = sorted(range(len(self._states)), key=lambda i: _case_key(self.case_ids[i]))
            first = self._states[order[0]]
            if isinstance(first, _PackedState) and len(order) == 1:
                self._pooled_cache = first  # the sum of one case is the case
            else:
                total = first.copy()
                for i in order[1:]:
                    total.add_(self._states[i])
                # a per-case histogram keeps its sum packed too: the dense sum of a case kept with each per-case
                # histogram (the cohort engine holds every case's) would be 24 R F bytes per case again
                self._pooled_cache = _PackedState.pack(total) if isinstance(first, _PackedState) else total
        cache = self._pooled_cache
        return cache.unpack() if isinstance(cache, _PackedState) else cache

    def views(self, per_case: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The tables the metrics read.

        ``counts`` ``(N, R, 2, F)`` int64, weighted counts ``(N, R, 2, F)`` float64, ``sums`` ``(N, R, F)`` and
        ``scalars`` ``(N, 3)`` float64.

        ``N`` is the number of cases with ``per_case=True`` (the dense tables of every case at once, ``40 R F`` bytes
        per case: :meth:`case_views` gives them a block of cases at a time); otherwise ``N = 1``, the sum over all
        cases (cached until the next update or merge, packed for a per-case histogram; do not modify the returned
        tensors).
        """
        if per_case:
            return self.counts, self.weighted_counts, self.sums, self.scalars
        s = self._pooled()
        return s.counts.transpose(0, 1)[None], s.weighted_counts().transpose(0, 1)[None], s.sums[None], s.scalars[None]

    def case_views(
        self, max_bytes: int = 1 << 26
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The per-case tables of :meth:`views` (``per_case=True``), a block of consecutive cases at a time.

        Each block holds the same values as the rows of ``views(per_case=True)`` for its cases; at most about
        ``max_bytes`` of dense tables (at least one case) are held, in buffers that every block overwrites: a
        per-case metric of a large cohort reads every case without holding the dense tables of all (``40 R F`` bytes
        per case). Use a block's tensors before asking for the next one.

        Args:
            max_bytes: about the most bytes of the block buffers (counts, weights and sums: ``40 R F`` per case).

        Returns:
            An iterator over ``(counts, weighted counts, sums, scalars)`` of ``N_b`` consecutive cases each, in the
            order of :attr:`case_ids`.

        Raises:
            ValueError: the histogram is empty.

        Example:
            >>> import torch
            >>> probs = torch.softmax(torch.randn(3, 2, 4, 4), 1)
            >>> hist = ConfidenceHistogram(2).update(probs, torch.randint(0, 2, (3, 4, 4)))
            >>> [tuple(c.shape) for c, _, _, _ in hist.case_views(max_bytes=2 * 40 * 4 * 15360)]
            [(2, 4, 2, 15360), (1, 4, 2, 15360)]
        """
        if not self._states:
            raise ValueError("the histogram is empty: call update() first")
        n, r, f = len(self._states), self.num_rows, self.n_fine_bins
        step = max(1, min(n, int(max_bytes) // (40 * r * f)))
        device = self._states[0].scalars.device
        counts = torch.empty(step, r, 2, f, dtype=torch.int64, device=device)
        wcounts = torch.empty(step, r, 2, f, dtype=torch.float64, device=device)
        sums = torch.empty(step, r, f, dtype=torch.float64, device=device)
        for start in range(0, n, step):
            block = self._states[start : start + step]
            for i, s in enumerate(block):
                s.write_into(counts[i], wcounts[i], sums[i])
            m = len(block)
            yield counts[:m], wcounts[:m], sums[:m], torch.stack([s.scalars for s in block])

    # -- accumulation -------------------------------------------------------------------------------------------
    def _slot(self, case_id: Hashable | None) -> int:
        if not self.per_case:
            case_id = "pooled"
        elif case_id is None:
            case_id = len(self.case_ids)
            while case_id in self._index:
                case_id += 1
        if case_id not in self._index:
            # a packed case needs no weights flag: ``weighted`` scans every case, which made adding N cases
            # quadratic (found by the benchmark review: 0.59 ms a case at 8 000 cases)
            state = (_PackedState.empty(self.num_rows, self.n_fine_bins) if self.per_case and PACKED_CASES
                     else _State.zeros(self.num_rows, self.n_fine_bins, self.weighted))
            self._index[case_id] = len(self._states)
            self.case_ids.append(case_id)
            self._states.append(state)
        return self._index[case_id]

    def _check_weight_totals(self, adds: Sequence[tuple[Hashable | None, _State | _PackedState]]) -> None:
        """``ValueError`` unless every case holds its total voxel weight after ``adds`` (checked before any is added).

        ``adds``: the ``(case id or None for a new case, state)`` pairs about to be added (:meth:`_slot`'s ids). A
        case's NLL sum grows to ``-log NLL_EPS = 34.5`` times its total weight and its Brier sum to ``C`` times it: a
        total beyond ``max(float64) / max(34.5, C)`` makes them infinite (in earlier versions 1000
        voxels of weight 1e305 gave ``nll`` inf, of weight 1e306 every metric NaN with the warning of an empty bin).
        """
        totals: dict[Hashable, float] = {}
        for i, (case_id, st) in enumerate(adds):
            key: Hashable = "pooled" if not self.per_case else (("new", i) if case_id is None else case_id)
            if key not in totals:
                slot = self._index.get(key) if isinstance(key, str) else None
                totals[key] = 0.0 if slot is None else float(self._states[slot].scalars[_SCALAR_WEIGHT])
            totals[key] += float(st.scalars[_SCALAR_WEIGHT])
        limit = _weight_limit(self.num_classes)
        worst = max(totals.values(), default=0.0)
        if not worst <= limit:
            raise ValueError(f"weights: the total voxel weight of a case would be {worst:.4g}, above {limit:.4g}, the "
                             "most whose NLL and Brier sums float64 holds: scale the weights down (only their ratios "
                             "matter)")

    def _add_to(self, slot: int, st: _State | _PackedState) -> None:
        """Add a case's state into ``slot``: a per-case slot keeps it packed (:class:`_PackedState`), on the CPU.

        A packed state added to an empty slot is shared, not copied (packed states are never changed).
        """
        cur = self._states[slot]
        if not isinstance(cur, _PackedState):
            cur.add_(st)
            return
        if cur.index.numel() == 0 and not bool(cur.scalars.any()):  # a new case (or one without voxels)
            self._states[slot] = (st if isinstance(st, _PackedState) else _PackedState.pack(st)).to(cur.device)
            return
        dense = cur.unpack()
        dense.add_(st)
        self._states[slot] = _PackedState.pack(dense)

    @deprecated_arg_names({"labels": "target"})
    def update(
        self,
        probs: ArrayLike,
        target: ArrayLike,
        weights: ArrayLike | None = None,
        case_ids: Sequence[str] | None = None,
        mask: ArrayLike | None = None,
        validate: bool = True,
    ) -> ConfidenceHistogram:
        """Add a batch of cases (or parts of cases).

        Args:
            probs: ``(B, C, *spatial)`` class probabilities (numpy or torch, CPU or CUDA, any float dtype).
            target: ``(B, *spatial)`` or ``(B, 1, *spatial)`` integer reference labels in ``[0, C)`` (the keyword
                ``labels`` is a deprecated alias).
            weights: optional non-negative voxel weights of the label shape (Kock et al., vessel weights).
                Zero-weight voxels are left out like masked ones; positive weights below ``2.2e-308`` (subnormal)
                are refused. A case's total weight must stay below
                ``max(float64) / max(-log 1e-15, C)`` (5.2e306 up to 34 classes; its NLL sum must stay finite).
            case_ids: one ``str`` per batch item; items with an existing id are added to that case (patches
                of one volume). Default: every item is a new case numbered ``0, 1, ...``. Ignored when pooled.
            mask: optional boolean map of the label shape; only voxels where it is True are counted. Voxels
                outside the mask (or with zero weight) are never read, so NaN there is allowed (e.g. probabilities
                set to NaN outside a region of interest), and so is any label (e.g. an ignore label 255 with
                ``mask=target != 255``).
            validate: check the probabilities (finite, in [0, 1], summing to 1 over C, tolerance 1e-3 for
                float32 / float64, :func:`monai_unc._utils.probability_tolerance` for lower precisions).
                Values are clipped to [0, 1] before binning; NaN, which has no bin, raises ``ValueError`` naming
                ``probs`` even with ``validate=False`` (leave such voxels out with ``mask``).

        The update is atomic: on a ``ValueError`` nothing is added.
        """
        p = to_tensor(probs, "probs")
        if not p.is_floating_point():
            raise TypeError(f"probs must be a floating point array of probabilities, got dtype {p.dtype}")
        if p.ndim < 3:
            raise ValueError(f"probs must have shape (B, C, *spatial), got {tuple(p.shape)}")
        if p.shape[1] != self.num_classes:
            raise ValueError(
                f"probs has {p.shape[1]} classes along dim 1 but the histogram was built for {self.num_classes}"
            )
        if p.numel() == 0:
            raise ValueError(f"probs is empty (shape {tuple(p.shape)})")
        batch, spatial = p.shape[0], tuple(p.shape[2:])
        yt = _voxel_map(target, "target", batch, spatial)
        # the fused CPU kernel checks the labels' range as it reads them (one read of the labels less) where it sees
        # all of them before any other check could fail: one case, int64 labels on the CPU, no mask, no weights
        # (with several cases the labels of all are checked first, as the reference does); check_labels elsewhere
        in_kernel = (
            batch == 1
            and mask is None
            and weights is None
            and _fused_backend(p) == "numba"
            and yt.dtype == torch.int64
            and yt.device.type == "cpu"
        )
        w = None if weights is None else _check_weights(_voxel_map(weights, "weights", batch, spatial))
        m = None if mask is None else _check_mask(_voxel_map(mask, "mask", batch, spatial))
        if w is not None:
            m = (w > 0) if m is None else (m & (w > 0))
        y = _read_labels(yt, m, self.num_classes, bounds=not in_kernel)
        if case_ids is not None and self.per_case:
            if isinstance(case_ids, str) or len(case_ids) != batch:
                raise ValueError(f"case_ids must be a sequence of {batch} strings (one per batch item)")
            if not all(isinstance(c, str) for c in case_ids):
                raise TypeError("case_ids must be strings (integers are reserved for automatic numbering)")
        device = p.device
        y, w, m = y.to(device), None if w is None else w.to(device), None if m is None else m.to(device)
        chunk = self.chunk_size or _default_chunk(device, self.num_classes)
        pf = p.reshape(batch, self.num_classes, -1)

        staged = []
        n_vals = self.num_classes + (2 if self.uncertainty else 1)
        ws = _Workspace(self.num_classes, n_vals, min(chunk, pf.shape[-1]), device) if not _fused_for(p) else None
        for b in range(batch):
            st = _Staging(self.num_rows, self.n_fine_bins, w is not None, device)
            pb, yb, wb = pf[b], y[b], None if w is None else w[b]
            if m is not None:
                pb, yb, wb = pb[:, m[b]], yb[m[b]], None if wb is None else wb[m[b]]
            if not _accumulate_fused(st, pb, yb, wb, validate, self.uncertainty):
                for s in range(0, yb.shape[0], chunk):
                    wc = None if wb is None else wb[s : s + chunk]
                    _accumulate_probs(st, pb[:, s : s + chunk], yb[s : s + chunk], wc, validate, self.uncertainty, ws)
            # a per-case histogram keeps the case packed: no dense state of it (to_state) is ever made
            staged.append(st.to_packed() if self.per_case and PACKED_CASES else st.to_state())

        if w is not None:
            self._check_weight_totals([(None if case_ids is None else case_ids[b], st) for b, st in enumerate(staged)])
            for s in self._states:
                if isinstance(s, _State):  # a packed case reads the same weights (its counts) either way
                    s.make_weighted()
        for b, st in enumerate(staged):
            slot = self._slot(None if case_ids is None else case_ids[b])
            self._add_to(slot, st)
        self._pooled_cache = None
        return self

    @classmethod
    def from_uncertainty(
        cls, uncertainty: ArrayLike, errors: ArrayLike, n_fine_bins: int = DEFAULT_FINE_BINS
    ) -> ConfidenceHistogram:
        """A histogram whose uncertainty row holds an uncertainty map against an error map (the other rows stay empty).

        The input of :func:`~monai_unc.metrics.calibration.uce` for a map that is not the normalised entropy of
        probabilities (Laves et al. 2019; Kock et al. Appendix D).

        Args:
            uncertainty: values in [0, 1]; ``(B, 1, *spatial)`` gives one case per batch item, any other shape
                one case of all voxels. Values within :func:`monai_unc._utils.probability_tolerance` of the map's
                dtype outside [0, 1] (rounding: the normalised entropy of near-uniform probabilities can come out
                a few ulps above 1) are clipped to [0, 1], as the histogram's update clips its entropy row.
            errors: 0/1 (or bool) error map of the same shape, or ``(B, *spatial)`` for a ``(B, 1, *spatial)``
                map; ``r = 1`` where there is no error, so that the frequency read by UCE is the error rate.
            n_fine_bins: fine bins ``F``.

        Raises:
            ValueError: naming ``uncertainty`` or ``errors`` for an empty, non-finite or out-of-range map, a
                non-binary error map or shapes that do not pair.
        """
        u = to_tensor(uncertainty, "uncertainty")
        t = to_tensor(errors, "errors")
        shape_u = tuple(u.shape)
        batch_cases = u.ndim >= 3 and u.shape[1] == 1
        if tuple(t.shape) != shape_u and not (batch_cases and tuple(t.shape) == shape_u[:1] + shape_u[2:]):
            raise ValueError(
                f"errors must have the shape of uncertainty {shape_u} (or {shape_u[:1] + shape_u[2:]} for a "
                f"(B, 1, *spatial) map), got {tuple(t.shape)}"
            )
        if u.is_complex():
            raise TypeError(f"uncertainty must be a real-valued map, got dtype {u.dtype}")
        if not u.is_floating_point():
            u = u.to(torch.float64)
        if u.numel() == 0:
            raise ValueError(f"uncertainty is empty (shape {shape_u})")
        if not bool(torch.isfinite(u).all()):
            raise ValueError("uncertainty contains non-finite values (NaN or inf)")
        lo_t, hi_t = torch.aminmax(u)
        lo, hi = float(lo_t), float(hi_t)
        tol = probability_tolerance(u.dtype)  # rounding: entropy(probs, normalize=True) can exceed 1 by a few ulps
        if lo < -tol or hi > 1 + tol:
            off = [f"largest {hi!r} ({hi - 1:.3g} above 1)"] if hi > 1 + tol else []
            off += [f"smallest {lo!r} ({-lo:.3g} below 0)"] if lo < -tol else []
            raise ValueError(
                f"uncertainty must lie in [0, 1] for UCE (tolerance {tol:g}), got {' and '.join(off)}; "
                "normalise it first (e.g. entropy(probs, normalize=True))"
            )
        err = _check_mask(t, "errors").to(u.device)
        if batch_cases:
            u2, e2 = u.reshape(u.shape[0], -1), err.reshape(err.shape[0], -1)
        else:
            u2, e2 = u.reshape(1, -1), err.reshape(1, -1)
        hist = cls(2, n_fine_bins=n_fine_bins, per_case=True)
        for b in range(u2.shape[0]):
            stage = _Staging(hist.num_rows, n_fine_bins, False, u.device)
            vals = u2[b].to(torch.float64).clamp(0, 1).unsqueeze(0)
            idx = stage.bin(vals, None, first_row=hist.uncertainty_row)
            stage.hit(hist.uncertainty_row, idx[0], e2[b].logical_not(), None)
            stage.scalars[_SCALAR_WEIGHT] = u2.shape[1]
            hist._add_to(hist._slot(None), stage.to_state())
        return hist

    def check_mergeable(self, other: ConfidenceHistogram) -> None:
        """Refuse ``other`` for :meth:`merge` when its layout differs: the check :meth:`merge` makes first.

        For a caller that must refuse a histogram before it changes anything else (a metric's call, before the
        batch's warnings are said and its rows counted).

        Args:
            other: the histogram to merge.

        Raises:
            TypeError: ``other`` is not a :class:`ConfidenceHistogram`.
            ValueError: ``other`` has another number of classes or of fine bins.

        Example:
            >>> ConfidenceHistogram(3, 10).check_mergeable(ConfidenceHistogram(2, 10))
            Traceback (most recent call last):
            ...
            ValueError: cannot merge histograms with different layouts: (num_classes, n_fine_bins) (3, 10) vs (2, 10)
        """
        if not isinstance(other, ConfidenceHistogram):
            raise TypeError(f"other must be a ConfidenceHistogram, got {type(other).__name__}")
        if (other.num_classes, other.n_fine_bins) != (self.num_classes, self.n_fine_bins):
            raise ValueError(
                "cannot merge histograms with different layouts: "
                f"(num_classes, n_fine_bins) {(self.num_classes, self.n_fine_bins)} vs "
                f"{(other.num_classes, other.n_fine_bins)}"
            )

    def merge(self, other: ConfidenceHistogram) -> ConfidenceHistogram:
        """Add ``other`` into this histogram (in place) and return ``self``.

        Cases with the same string id are summed; automatically numbered cases of ``other`` are appended
        with new numbers. A pooled histogram absorbs every case of ``other``.
        """
        self.check_mergeable(other)
        if other.uncertainty != self.uncertainty and len(other) and len(self):
            raise ValueError("cannot merge histograms with and without the uncertainty (entropy) row")
        if len(other) and not len(self):
            self.uncertainty = other.uncertainty
        if other.weighted:
            self._check_weight_totals(
                [(cid if isinstance(cid, str) and other.per_case else None, st)
                 for cid, st in zip(other.case_ids, other._states)]
            )
            for s in self._states:
                if isinstance(s, _State):  # a packed case reads the same weights (its counts) either way
                    s.make_weighted()
        # a snapshot of other's cases: ``h.merge(h)`` of auto-numbered cases appended to the list it walked and never
        # returned (found by hostile testing, review 58); it adds the cases h held, as merging a copy of h does
        for cid, st in list(zip(other.case_ids, other._states)):  # the one slot of a pooled histogram: a new number
            slot = self._slot(cid if isinstance(cid, str) and other.per_case else None)
            self._add_to(slot, st)
        self._pooled_cache = None
        return self

    def __iadd__(self, other: ConfidenceHistogram) -> ConfidenceHistogram:
        return self.merge(other)

    def pooled(self) -> ConfidenceHistogram:
        """A new pooled histogram (one case) holding the sum of all cases."""
        out = ConfidenceHistogram(
            self.num_classes, self.n_fine_bins, per_case=False, chunk_size=self.chunk_size, uncertainty=self.uncertainty
        )
        if self._states:
            out.case_ids, out._index, out._states = ["pooled"], {"pooled": 0}, [self._pooled().copy()]
        return out

    # -- persistence --------------------------------------------------------------------------------------------
    def _state_meta(self) -> dict[str, Any]:
        ids = [str(c) for c in self.case_ids]
        return {
            "num_classes": np.int64(self.num_classes),
            "n_fine_bins": np.int64(self.n_fine_bins),
            "per_case": np.bool_(self.per_case),
            "uncertainty": np.bool_(self.uncertainty),
            "case_ids": np.array(ids, dtype=np.str_),
            "case_id_is_int": np.array([isinstance(c, int) for c in self.case_ids], dtype=bool),
        }

    def state_dict_blocks(self) -> dict[str, Any]:
        """:meth:`state_dict` with the per-case tables as :class:`~monai_unc.state.ArrayBlocks` of one case each.

        The same keys and arrays; ``counts``, ``sums`` and ``weighted_counts`` are made one case at a time when they
        are read (by :func:`monai_unc.io.save_state`, which writes them so), so that saving a cohort holds one case's
        dense tables, not ``24 R F`` bytes per case at once. Read them before the histogram changes.

        Returns:
            The state, its per-case tables as :class:`~monai_unc.state.ArrayBlocks`.

        Example:
            >>> import numpy as np
            >>> h = ConfidenceHistogram(2, n_fine_bins=4).update(np.array([[[0.2], [0.8]]]), np.array([[1]]))
            >>> blocks = h.state_dict_blocks()
            >>> blocks["counts"], bool((np.asarray(blocks["counts"]) == h.state_dict()["counts"]).all())
            (ArrayBlocks(shape=(1, 4, 2, 4), dtype=int64), True)
        """
        if not self._states:
            return self.state_dict()
        states = list(self._states)
        n, r, f = len(states), self.num_rows, self.n_fine_bins

        def table(which: int, shape: tuple[int, ...], dtype: torch.dtype) -> ArrayBlocks:
            def make(rows: int) -> Iterator[np.ndarray]:  # blocks of `rows` cases written into one buffer
                buffer = torch.empty(min(rows, n), *shape, dtype=dtype)
                for start in range(0, n, rows):
                    block = states[start : start + rows]
                    for i, st in enumerate(block):
                        out: list[torch.Tensor | None] = [None, None, None]
                        out[which] = buffer[i]
                        st.write_into(*out)
                    yield buffer[: len(block)].numpy()

            return ArrayBlocks((n, *shape), torch.empty(0, dtype=dtype).numpy().dtype, make)

        state = self._state_meta()
        state["counts"] = table(0, (r, 2, f), torch.int64)
        state["sums"] = table(2, (r, f), torch.float64)
        state["scalars"] = self.scalars.cpu().numpy()
        if self.weighted:
            state["weighted_counts"] = table(1, (r, 2, f), torch.float64)
        return state

    def state_dict(self) -> dict[str, Any]:
        """The state as numpy arrays (``counts``, ``sums``, ``scalars``, ``weighted_counts`` if weighted).

        The dense tables of every case at once (``24 R F`` bytes per case); :meth:`state_dict_blocks` gives them one
        case at a time, and :meth:`packed_state_dict` the non-empty bins of every case only (the layout of records and
        gathers; :meth:`from_state_dict` reads both).
        """
        state = self._state_meta()
        shape_r = (0, self.num_rows)
        if self._states:
            state["counts"] = self.counts.cpu().numpy()
            state["sums"] = self.sums.cpu().numpy()
            state["scalars"] = self.scalars.cpu().numpy()
            if self.weighted:
                state["weighted_counts"] = self.weighted_counts.cpu().numpy()
        else:
            state["counts"] = np.zeros((*shape_r, 2, self.n_fine_bins), dtype=np.int64)
            state["sums"] = np.zeros((*shape_r, self.n_fine_bins))
            state["scalars"] = np.zeros((0, 3))
        return state

    def packed_state_dict(self) -> dict[str, Any]:
        """The state in the packed layout: every case's non-empty bins, concatenated (what records and gathers hold).

        The arrays of :meth:`state_dict` but the dense tables: case ``k`` holds the bins
        ``bin_offsets[k]:bin_offsets[k + 1]`` of

        - ``bin_offsets`` ``(N + 1,)`` int64, rising from 0 to ``K``, the number of bins kept;
        - ``bin_index`` ``(K,)`` the flat index ``r F + i`` of each bin (row ``r``, fine bin ``i``), strictly
          increasing within a case; int32 where ``R F`` fits, else int64;
        - ``bin_counts`` ``(2, K)`` the counts ``r = 0`` and ``r = 1`` there, in the smallest of uint8, int16, int32
          and int64 that holds the largest;
        - ``bin_sums`` ``(K,)`` float64 the sums there;
        - ``bin_weighted_counts`` ``(2, K)`` float64 the weights there (only once weighted, as ``weighted_counts``);

        next to ``scalars`` ``(N, 3)`` and the layout of :meth:`state_dict`. Every bin where a case's dense tables are
        not zero is kept (at most 32 bytes per bin, 48 weighted; a 105-class case of ``F = 15360`` holds well under a
        MiB instead of its 39 MiB of dense tables); :meth:`from_state_dict` and :meth:`load_state_dict` read it back
        exactly, and read both layouts. :func:`monai_unc.state.pack_states` (the evaluation's per-case records, its
        resume cache and the ``torchrun`` gather) and :func:`monai_unc.engine.reduce_state` send a histogram so.

        Returns:
            The state as numpy arrays.

        Example:
            >>> import numpy as np
            >>> h = ConfidenceHistogram(2, n_fine_bins=4).update(np.array([[[0.2], [0.8]]]), np.array([[1]]))
            >>> packed = h.packed_state_dict()
            >>> packed["bin_offsets"].tolist(), packed["bin_index"].tolist(), packed["bin_counts"].tolist()
            ([0, 4], [0, 7, 11, 14], [[1, 0, 0, 0], [0, 1, 1, 1]])
            >>> back = ConfidenceHistogram.from_state_dict(packed)
            >>> bool((back.counts == h.counts).all()), bool((back.sums == h.sums).all())
            (True, True)
        """
        state = self._state_meta()
        cases = [s if isinstance(s, _PackedState) else _PackedState.pack(s) for s in self._states]
        cpu = [c.to("cpu") for c in cases]
        sizes = [c.index.numel() for c in cpu]
        wide = self.num_rows * self.n_fine_bins > 2**31 - 1
        top = max((int(c.counts_nz.max()) for c in cpu if c.counts_nz.numel()), default=0)
        count_dtype = next((d for d, most in _COUNT_DTYPES if top <= most), torch.int64)

        def cat(parts: list[torch.Tensor], dtype: torch.dtype, lead: tuple[int, ...]) -> np.ndarray:
            if not parts:
                return torch.zeros(*lead, 0, dtype=dtype).numpy()
            return torch.cat([t.to(dtype) for t in parts], dim=-1).numpy()

        state["bin_offsets"] = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)
        state["bin_index"] = cat([c.index for c in cpu], torch.int64 if wide else torch.int32, ())
        state["bin_counts"] = cat([c.counts_nz for c in cpu], count_dtype, (2,))
        state["bin_sums"] = cat([c.sums_nz for c in cpu], torch.float64, ())
        if self.weighted:  # a case without weights reads its counts, as weighted_counts of state_dict
            state["bin_weighted_counts"] = cat([c.counts_nz if c.wcounts_nz is None else c.wcounts_nz for c in cpu],
                                               torch.float64, (2,))
        state["scalars"] = (torch.stack([c.scalars for c in cpu]).numpy() if cpu else np.zeros((0, 3)))
        return state

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> ConfidenceHistogram:
        """A new histogram holding a state from :meth:`state_dict` or :meth:`packed_state_dict`.

        Args:
            state: a state dict of either layout (the dense tables or the packed bins); its ``num_classes``,
                ``n_fine_bins`` and ``per_case`` give the histogram's layout.

        Returns:
            The new :class:`ConfidenceHistogram`.

        Raises:
            ValueError: as :meth:`load_state_dict` for inconsistent tables.
        """
        hist = cls(int(state["num_classes"]), int(state["n_fine_bins"]), per_case=bool(state["per_case"]))
        return hist.load_state_dict(dict(state))

    def load_state_dict(self, state: dict[str, Any]) -> ConfidenceHistogram:
        """Replace the state by one from :meth:`state_dict` or :meth:`packed_state_dict` (layouts must match).

        The arrays may also be torch tensors (e.g. tables all-gathered across ranks); they keep their device. The dense
        tables (``counts``, ``sums``, ``weighted_counts``) or the packed bins (``bin_offsets``, ``bin_index``, ...) are
        read, whichever the state holds (not both).

        Args:
            state: a state dict of this layout.

        Returns:
            ``self``.

        Raises:
            ValueError: for another layout, arrays of inconsistent shapes, or tables no histogram can hold (negative
                counts or weights, non-finite sums, a bin's value sum outside its weight times the bin's edges, label
                rows that disagree with the top-label row, a total weight, NLL or Brier sum that does not fit the
                counts); for packed bins also offsets that do not add up to the bins, indices out of range, unsorted
                or repeated within a case, or non-integer offsets, indices or counts; the histogram is left
                unchanged.
        """
        nc, nf = int(state["num_classes"]), int(state["n_fine_bins"])
        if (nc, nf) != (self.num_classes, self.n_fine_bins):
            raise ValueError(
                f"state has (num_classes, n_fine_bins) = {(nc, nf)}, "
                f"the histogram {(self.num_classes, self.n_fine_bins)}"
            )
        packed = [k for k in _PACKED_KEYS if k in state]
        if packed:
            dense = [k for k in _DENSE_KEYS if k in state]
            if dense:
                raise ValueError(f"state holds arrays of both layouts (dense {dense}, packed {packed})")
            return self._load_packed(state)
        tables = {k: _table_source(state[k]) for k in ("counts", "sums", "scalars", "weighted_counts") if k in state}
        counts, sums, scalars, wc = (tables.get(k) for k in ("counts", "sums", "scalars", "weighted_counts"))
        n = counts.shape[0] if len(counts.shape) else -1
        if counts.shape != (n, self.num_rows, 2, nf) or sums.shape != (n, self.num_rows, nf) or scalars.shape != (n, 3):
            raise ValueError("state arrays have inconsistent shapes")
        if wc is not None and wc.shape != counts.shape:
            raise ValueError("state weighted_counts must have the shape of counts")
        case_ids = _state_case_ids(state, n)
        per_case = bool(state.get("per_case", self.per_case))
        # a block of cases at a time: read (a file's tables as ArrayBlocks too), checked, each case packed; the
        # dense tables of all cases are never held at once
        step = max(1, min(_STATE_CHECK_BLOCK, _LOAD_BLOCK_BYTES // (40 * self.num_rows * nf)))
        parts = [_table_blocks(t, step) for t in (counts, sums, scalars, wc) if t is not None]
        states: list[_State | _PackedState] = []
        for blocks in zip(*parts):
            cnt, sm, sc = (_state_table(b, d) for b, d in zip(blocks, (torch.int64, torch.float64, torch.float64)))
            _check_integral_counts(blocks[0], cnt)
            wct = None if wc is None else _state_table(blocks[3], torch.float64)
            _check_state_tables(cnt, sm, wct, sc, nc)
            for i in range(cnt.shape[0]):
                w_i = None if wct is None else wct[i]
                if per_case and PACKED_CASES:  # packed from the block's tables (read into a reused buffer)
                    states.append(_PackedState.pack_tables(cnt[i], w_i, sm[i], sc[i]))
                    continue
                states.append(_State(
                    cnt[i].transpose(0, 1).contiguous(),
                    sm[i].clone(),
                    None if w_i is None else w_i.transpose(0, 1).contiguous(),
                    sc[i].clone(),
                ))
        return self._adopt(state, states, per_case, case_ids)

    def _adopt(self, state: Mapping[str, Any], states: list[_State | _PackedState], per_case: bool,
               case_ids: list[Hashable]) -> ConfidenceHistogram:
        """Take the checked cases of a loaded state (dense or packed layout) as this histogram's."""
        self.per_case = per_case
        self.uncertainty = bool(state.get("uncertainty", self.uncertainty))
        self.case_ids = case_ids
        self._index = {c: i for i, c in enumerate(self.case_ids)}
        self._states = states
        self._pooled_cache = None
        return self

    def _load_packed(self, state: Mapping[str, Any]) -> ConfidenceHistogram:
        """:meth:`load_state_dict` of the packed layout (:meth:`packed_state_dict`), checked as the dense one."""
        nc, nf = self.num_classes, self.n_fine_bins
        cases = _unpack_cases(state, self.num_rows, nf)
        n = len(cases)
        case_ids = _state_case_ids(state, n)
        weighted = "bin_weighted_counts" in state
        step = max(1, min(_STATE_CHECK_BLOCK, _LOAD_BLOCK_BYTES // (40 * self.num_rows * nf)))
        _check_packed_cases(cases, weighted, nc, step)  # the invariants of the dense path, a block at a time
        per_case = bool(state.get("per_case", self.per_case))
        states: list[_State | _PackedState] = list(cases) if per_case and PACKED_CASES else [c.unpack() for c in cases]
        return self._adopt(state, states, per_case, case_ids)

    def save(self, path: str | Path) -> Path:
        """Deprecated: write the state with :func:`monai_unc.io.save_state` (``save_state(path, hist)``).

        A formula does not write files; the caller saves its state through :mod:`monai_unc.io`. This method still
        writes the same compressed ``.npz`` file (atomically; ``.npz`` appended to other names) and will be removed
        in the next release.
        """
        import warnings

        from ...io import save_state  # deprecated path: the core imports no writer at module level

        warnings.warn(
            "ConfidenceHistogram.save is deprecated; use monai_unc.io.save_state(path, histogram)",
            DeprecationWarning,
            stacklevel=2,
        )
        return save_state(path, self)

    #: the keys :meth:`load` needs in a file (and those of the tables: the dense or the packed layout)
    _REQUIRED_KEYS = ("num_classes", "n_fine_bins", "per_case", "scalars", "case_ids")
    _TABLE_KEYS = (("counts", "sums"), _PACKED_KEYS[:4])

    @classmethod
    def load(cls, path: str | Path) -> ConfidenceHistogram:
        """Read a histogram written by :func:`monai_unc.io.save_state` (or the deprecated :meth:`save`).

        Raises:
            FileNotFoundError: no file at ``path``.
            ValueError: naming ``path`` when the file is not a histogram written by :meth:`save` (corrupt or
                truncated, another ``.npz``, inconsistent arrays).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"path: no ConfidenceHistogram file at {path}")
        try:
            state = read_npz(path)  # the per-case tables read a block of cases at a time, as they are loaded
        except Exception as err:  # BadZipFile, EOFError, OSError, ValueError, zlib.error from a damaged file
            raise _unreadable(path, err) from err
        missing = [k for k in cls._REQUIRED_KEYS if k not in state]
        if not any(all(k in state for k in keys) for keys in cls._TABLE_KEYS):
            missing += [k for k in cls._TABLE_KEYS[0] if k not in state]
        if missing:
            raise ValueError(f"path: {path} is not a ConfidenceHistogram file (missing arrays {missing})")
        try:
            return cls.from_state_dict(state)
        except OSError as err:  # a damaged member, found as it is read (read_npz)
            raise _unreadable(path, err) from err
        except (ValueError, TypeError) as err:
            raise ValueError(f"path: {path} holds an inconsistent ConfidenceHistogram: {err}") from err
