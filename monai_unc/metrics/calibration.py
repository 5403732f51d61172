"""Calibration of voxel-wise probabilities from confidence histograms (Kock et al.), exact and constant-memory.

Every metric here reads one additive intermediate, the :class:`ConfidenceHistogram` (Kock, Thielke et al.,
"Confidence histograms for model reliability analysis and temperature calibration", MIDL, Kock et al., Sec.
2.2). For every case ``k`` it holds, over a fine grid of ``F`` equal-width bins on [0, 1]:

- the *label confidence histogram* ``ch[k, l, r, i]``: voxels whose probability ``p_l`` of label ``l`` falls
  in fine bin ``i``, split by ``r = [y == l]`` (one row per label, ``C`` rows);
- the *prediction confidence histogram* (row ``C``): the same for the predicted (top) label only,
  ``p_top = max_l p_l``, ``r = [argmax_l p_l == y]`` (the first maximum wins on ties);
- the *uncertainty histogram* (row ``C + 1``): normalised entropy ``H(p) / log C``
  (:func:`monai_unc.measures.entropy` with ``normalize=True``) split by ``r`` = the top label is correct;
  UCE reads it (Laves et al. 2019; Kock et al. Appendix D; Zeevi et al.).

Counts are int64. Next to them the histogram keeps, per fine bin, the float64 sum of the binned values
(``sum p``), and per case float64 sums of voxel weights, of ``-log p_y`` and of the Brier term. Because the
value sums are exact, means per bin do not suffer the quantisation of Kock et al.'s bin centres: every metric
equals the float64 computation on the raw voxels up to rounding (|error| < 1e-9 on 8.4 M voxels, tested).
Histograms add across cases, batches and ranks, so memory does not grow with the number of voxels.

Binning. Value ``v`` (clipped to [0, 1]) falls in fine bin ``floor(v * F)`` computed in float64;
``v = 1`` goes to the last bin. The metrics re-bin to ``n_bins`` equal-width bins ``[b / n, (b + 1) / n)``
(the last one closed). The default ``F = 15 * 2**10 = 15360`` (Kock et al. uses ``2**14 = 16384``; the
resolution is the same) makes the coarse bins unions of fine bins for every ``n_bins`` that divides ``F``
(2, 3, 4, 5, 6, 8, 10, 12, 15 (default), 16, 20 (Kock et al.'s loss), 24, 30, 32, 40, 48, 60, 64, ...), so
coarse binning is exact and identical to ``floor(v * n_bins)``; with ``F = 2**14`` only powers of two
are. For other ``n_bins`` the coarse edges are rounded to the fine grid (shift < 1 / F) with a warning.

Metrics (per case or pooled over all cases; ``M_b`` = voxel weight in coarse bin ``b``, ``a_b`` = weighted
frequency of ``r = 1``, ``c_b`` = weighted mean binned value; bins with fewer than ``min_bin_count`` voxels
are dropped, Kock et al. uses 50; empty bins are always dropped):

- ``ece``      top label, ``sum_b M_b |a_b - c_b| / sum_b M_b`` (Kock et al. eq. 2; Guo et al. 2017);
- ``classwise_ece``: the mean over labels of the ECE of ``p_l`` against ``[y == l]`` (Kull et al. 2019);
- ``all_label_ece``: every label's ``p_l`` against ``[y == l]`` pooled into one histogram, Kock et al.'s
  "multiclass ECE" (the reliability diagram covers [0, 1] instead of [1/C, 1]);
- ``ace``      every kept bin weighted equally, ``mean_b |a_b - c_b|`` (ValUES, Appendix A.5, eq. 11);
- ``mce``      ``max_b |a_b - c_b|`` (Naeini et al. 2015);
- ``uce``      ``sum_b M_b |err_b - u_b| / sum_b M_b`` over normalised entropy ``u`` and error rate ``err``;
- ``nll``      ``sum w (-log max(p_y, 1e-15)) / sum w`` (exact, not from bin centres);
- ``brier``    ``sum w sum_l (p_l - [y == l])^2 / sum w`` (sum over labels, range [0, 2]; scikit-learn's
  multiclass ``brier_score_loss``; twice its binary value).

Shapes (docs/design.md): probabilities ``(B, C, *spatial)`` with ``C >= 2``, labels ``(B, *spatial)`` or
``(B, 1, *spatial)``, optional voxel ``weights`` and boolean ``mask`` of the label shape. Each function takes
either a :class:`ConfidenceHistogram` or the arrays (a histogram is built on the fly). Pooled results are
floats; with ``per_case=True`` one value per case (per batch item for arrays), numpy for numpy input or a
histogram, torch for torch input. Degenerate input (no voxel, no bin left) gives NaN with a ``UserWarning``.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from monai.metrics import CumulativeIterationMetric
from monai.utils import evenly_divisible_all_gather

from .._utils import PROB_TOL, ArrayLike, check_labels, check_probabilities, to_tensor, warn_nan
from ..measures import entropy

__all__ = [
    "DEFAULT_FINE_BINS",
    "NLL_EPS",
    "ConfidenceHistogram",
    "ReliabilityCurve",
    "ece",
    "classwise_ece",
    "all_label_ece",
    "ace",
    "mce",
    "uce",
    "nll",
    "brier",
    "reliability_curve",
    "calibration_metrics",
    "CalibrationMetric",
    "CALIBRATION_METRICS",
    "top_label",
]

#: fine bins per unit interval: 15 * 2**10, so that 15 (the default), 10, 20, 30, 60 and powers of two up
#: to 1024 coarse bins are unions of fine bins
DEFAULT_FINE_BINS = 15 * 2**10
#: probabilities of the true label are clipped to at least this value inside ``-log p``
NLL_EPS = 1e-15
#: voxels per chunk on the CPU (temporaries stay in cache); CUDA tensors are processed in one chunk per case
_CPU_CHUNK = 1 << 17

_KINDS = ("top", "all_label", "classwise", "uncertainty")
_REDUCTIONS = ("expected", "average", "maximum")
_SCALAR_WEIGHT, _SCALAR_NLL, _SCALAR_BRIER = 0, 1, 2


# ----------------------------------------------------------------------------------------------------------------
# binning core
# ----------------------------------------------------------------------------------------------------------------
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
        """Add values ``(R', n)`` float64 in [0, 1] to rows ``first_row ...``; return their bin indices ``(R', n)``
        within each row.

        Fine bin ``floor(v * F)`` computed in float64 (1.0 in the last bin); ``w`` are ``(n,)`` voxel weights.
        With a workspace ``ws`` the temporaries live in its buffers. Each row is scattered on its own, so the
        indices need no row offset.
        """
        n_rows, n = vals.shape
        if ws is None:
            idx = torch.mul(vals, self.n_fine).to(torch.int64)
        else:
            scaled = torch.mul(vals, self.n_fine, out=ws.take(ws.fidx, n_rows, n))
            idx = ws.take(ws.idx, n_rows, n)
            idx.copy_(scaled)  # truncation = floor for v >= 0, as .to(torch.int64)
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
        """Count ``r = 1`` at bin indices ``idx`` ``(n,)`` of ``row`` (flat indices over all rows if ``row`` is
        None), where ``correct`` (all if None); ``out``: an int64 buffer of ``n`` for the 0/1 counts."""
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
            wt, wh = fold(self.wtotal), fold(self.whits)
            wcounts = torch.stack([wt - wh, wh])
        return _State(torch.stack([total - hits, hits]), fold(self.sums), wcounts, self.scalars)


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
    ``torch.argmax``, which is ~50x slower along a non-innermost axis on the CPU). With a workspace ``ws`` the
    temporaries live in its buffers; ``conf_out`` receives the maximum.
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
    """Histogram of one case: counts ``(2, R, F)`` (``r`` first), sums ``(R, F)``, weighted counts ``(2, R, F)``
    or None, scalars ``(3,)``."""

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

    def add_(self, other: _State) -> None:
        if other.wcounts is not None or self.wcounts is not None:
            self.make_weighted()  # before the counts change
            self.wcounts += other.weighted_counts().to(self.counts.device)  # type: ignore[operator]
        self.counts += other.counts.to(self.counts.device)
        self.sums += other.sums.to(self.sums.device)
        self.scalars += other.scalars.to(self.scalars.device)

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

    With ``validate``, a two-pass check (range incl. NaN via ``aminmax``, sum over classes) runs first; on a
    failure :func:`monai_unc._utils.check_probabilities` produces the error message. ``uncertainty=False``
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
        lo, hi = torch.aminmax(probs)
        total = ws.f1[:n].copy_(probs[0])
        for c in range(1, n_cls):
            total.add_(probs[c])
        sum_dev = total.sub_(1.0).abs_().max()
        if not bool((lo >= -PROB_TOL) & (hi <= 1.0 + PROB_TOL) & (sum_dev <= PROB_TOL)):
            check_probabilities(p.unsqueeze(0), "probs")
            raise ValueError("probs must be finite probabilities in [0, 1] that sum to 1 over the class dimension")
    probs.clamp_(0.0, 1.0)
    _, pred = top_label(probs, ws, conf_out=vals[n_cls])  # the confidence goes straight into its row
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
    return w


def _check_mask(m: torch.Tensor, name: str = "mask") -> torch.Tensor:
    if m.dtype != torch.bool:
        if m.is_floating_point() and not bool(torch.isfinite(m).all()):
            raise ValueError(f"{name} contains non-finite values")
        if not bool(((m == 0) | (m == 1)).all()):
            raise ValueError(f"{name} must be boolean (or 0/1)")
        m = m.to(torch.bool)
    return m


def _check_bins(n_bins: int, min_bin_count: int) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    if isinstance(min_bin_count, bool) or not isinstance(min_bin_count, (int, np.integer)) or min_bin_count < 0:
        raise ValueError(f"min_bin_count must be a non-negative integer, got {min_bin_count!r}")


# ----------------------------------------------------------------------------------------------------------------
# the histogram
# ----------------------------------------------------------------------------------------------------------------
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
      ``sum_l (p_l - [y == l])^2``.

    Memory per case: ``24 R F`` bytes (``+16 R F`` once weighted), 1.8 MiB for ``C = 3`` and the default
    ``F``; pooled (``per_case=False``) the same once. Histograms add exactly: :meth:`merge` of per-case
    histograms equals the histogram of the pooled voxels.

    Args:
        num_classes: ``C >= 2``.
        n_fine_bins: ``F``, fine bins on [0, 1]. Default ``15 * 2**10`` (see the module docstring); Kock et al.
            uses ``2**14``.
        per_case: keep one histogram per case (for per-case values and box plots); otherwise one pooled.
        chunk_size: voxels processed at once (temporaries ``~ 50 (C + 2)`` bytes per voxel); default
            ``2**17`` on the CPU and a whole case on CUDA.
        uncertainty: fill the normalised-entropy row (needed by :func:`uce` only; computing the entropy is
            about a fifth of the update time).

    Example::

        hist = ConfidenceHistogram(num_classes=3)
        for batch in loader:
            hist.update(batch["pred"], batch["label"], case_ids=batch["name"])
        ece(hist), ece(hist, per_case=True), all_label_ece(hist, min_bin_count=50), nll(hist)
    """

    def __init__(
        self,
        num_classes: int,
        n_fine_bins: int = DEFAULT_FINE_BINS,
        per_case: bool = True,
        chunk_size: int | None = None,
        uncertainty: bool = True,
    ) -> None:
        if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
            raise ValueError(
                f"num_classes must be an integer >= 2 (binary tasks carry both channels), got {num_classes!r}"
            )
        if isinstance(n_fine_bins, bool) or not isinstance(n_fine_bins, (int, np.integer)) or n_fine_bins < 1:
            raise ValueError(f"n_fine_bins must be a positive integer, got {n_fine_bins!r}")
        if chunk_size is not None and (not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
        self.num_classes = int(num_classes)
        self.n_fine_bins = int(n_fine_bins)
        self.per_case = bool(per_case)
        self.chunk_size = None if chunk_size is None else int(chunk_size)
        self.uncertainty = bool(uncertainty)
        self.case_ids: list[Hashable] = []
        self._states: list[_State] = []
        self._index: dict[Hashable, int] = {}
        self._pooled_cache: _State | None = None

    # -- layout -------------------------------------------------------------------------------------------------
    @property
    def num_rows(self) -> int:
        """``C + 2``: one row per label, the top label, normalised entropy."""
        return self.num_classes + 2

    @property
    def top_row(self) -> int:
        return self.num_classes

    @property
    def uncertainty_row(self) -> int:
        return self.num_classes + 1

    @property
    def weighted(self) -> bool:
        """Whether voxel weights were ever given (then ``weighted_counts`` differ from ``counts``)."""
        return any(s.wcounts is not None for s in self._states)

    @property
    def nbytes(self) -> int:
        """Bytes held by the histogram tensors (all cases)."""
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
        if attr == "wcounts":
            return torch.stack([s.weighted_counts().transpose(0, 1) for s in self._states])
        if attr == "counts":
            return torch.stack([s.counts.transpose(0, 1) for s in self._states])
        return torch.stack([getattr(s, attr) for s in self._states])

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
            total = self._states[0].copy()
            for s in self._states[1:]:
                total.add_(s)
            self._pooled_cache = total
        return self._pooled_cache

    def _views(self, per_case: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``counts (N, R, 2, F)``, weighted counts, sums, scalars; ``N = 1`` pooled."""
        if per_case:
            return self.counts, self.weighted_counts, self.sums, self.scalars
        s = self._pooled()
        return s.counts.transpose(0, 1)[None], s.weighted_counts().transpose(0, 1)[None], s.sums[None], s.scalars[None]

    # -- accumulation -------------------------------------------------------------------------------------------
    def _slot(self, case_id: Hashable | None) -> int:
        if not self.per_case:
            case_id = "pooled"
        elif case_id is None:
            case_id = len(self.case_ids)
            while case_id in self._index:
                case_id += 1
        if case_id not in self._index:
            weighted = self.weighted
            self._index[case_id] = len(self._states)
            self.case_ids.append(case_id)
            self._states.append(_State.zeros(self.num_rows, self.n_fine_bins, weighted))
        return self._index[case_id]

    def update(
        self,
        probs: ArrayLike,
        labels: ArrayLike,
        weights: ArrayLike | None = None,
        case_ids: Sequence[str] | None = None,
        mask: ArrayLike | None = None,
        validate: bool = True,
    ) -> ConfidenceHistogram:
        """Add a batch of cases (or parts of cases).

        Args:
            probs: ``(B, C, *spatial)`` class probabilities (numpy or torch, CPU or CUDA, any float dtype).
            labels: ``(B, *spatial)`` or ``(B, 1, *spatial)`` integer labels in ``[0, C)``.
            weights: optional non-negative voxel weights of the label shape (Kock et al., vessel weights).
                Zero-weight voxels are left out like masked ones.
            case_ids: one ``str`` per batch item; items with an existing id are added to that case (patches
                of one volume). Default: every item is a new case numbered ``0, 1, ...``. Ignored when pooled.
            mask: optional boolean map of the label shape; only voxels where it is True are counted.
            validate: check the probabilities (finite, in [0, 1], summing to 1 over C, tolerance 1e-3).
                Values are clipped to [0, 1] before binning.

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
        y = check_labels(_voxel_map(labels, "labels", batch, spatial), "labels", self.num_classes)
        w = None if weights is None else _check_weights(_voxel_map(weights, "weights", batch, spatial))
        m = None if mask is None else _check_mask(_voxel_map(mask, "mask", batch, spatial))
        if w is not None:
            m = (w > 0) if m is None else (m & (w > 0))
        if case_ids is not None and self.per_case:
            if isinstance(case_ids, str) or len(case_ids) != batch:
                raise ValueError(f"case_ids must be a sequence of {batch} strings (one per batch item)")
            if not all(isinstance(c, str) for c in case_ids):
                raise TypeError("case_ids must be strings (integers are reserved for automatic numbering)")
        device = p.device
        y, w, m = y.to(device), None if w is None else w.to(device), None if m is None else m.to(device)
        chunk = self.chunk_size or (_CPU_CHUNK if device.type == "cpu" else 1 << 62)
        pf = p.reshape(batch, self.num_classes, -1)

        staged = []
        n_vals = self.num_classes + (2 if self.uncertainty else 1)
        ws = _Workspace(self.num_classes, n_vals, min(chunk, pf.shape[-1]), device)
        for b in range(batch):
            st = _Staging(self.num_rows, self.n_fine_bins, w is not None, device)
            pb, yb, wb = pf[b], y[b], None if w is None else w[b]
            if m is not None:
                pb, yb, wb = pb[:, m[b]], yb[m[b]], None if wb is None else wb[m[b]]
            for s in range(0, yb.shape[0], chunk):
                wc = None if wb is None else wb[s : s + chunk]
                _accumulate_probs(st, pb[:, s : s + chunk], yb[s : s + chunk], wc, validate, self.uncertainty, ws)
            staged.append(st.to_state())

        if w is not None:
            for s in self._states:
                s.make_weighted()
        for b, st in enumerate(staged):
            slot = self._slot(None if case_ids is None else case_ids[b])
            self._states[slot].add_(st)
        self._pooled_cache = None
        return self

    def merge(self, other: ConfidenceHistogram) -> ConfidenceHistogram:
        """Add ``other`` into this histogram (in place) and return ``self``.

        Cases with the same string id are summed; automatically numbered cases of ``other`` are appended
        with new numbers. A pooled histogram absorbs every case of ``other``.
        """
        if not isinstance(other, ConfidenceHistogram):
            raise TypeError(f"other must be a ConfidenceHistogram, got {type(other).__name__}")
        if (other.num_classes, other.n_fine_bins) != (self.num_classes, self.n_fine_bins):
            raise ValueError(
                "cannot merge histograms with different layouts: "
                f"(num_classes, n_fine_bins) {(self.num_classes, self.n_fine_bins)} vs "
                f"{(other.num_classes, other.n_fine_bins)}"
            )
        if other.uncertainty != self.uncertainty and len(other) and len(self):
            raise ValueError("cannot merge histograms with and without the uncertainty (entropy) row")
        if len(other) and not len(self):
            self.uncertainty = other.uncertainty
        if other.weighted:
            for s in self._states:
                s.make_weighted()
        for cid, st in zip(other.case_ids, other._states):
            slot = self._slot(cid if isinstance(cid, str) and cid != "pooled" else None)
            self._states[slot].add_(st)
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
    def state_dict(self) -> dict[str, Any]:
        """The state as numpy arrays (``counts``, ``sums``, ``scalars``, ``weighted_counts`` if weighted)."""
        ids = [str(c) for c in self.case_ids]
        state: dict[str, Any] = {
            "num_classes": np.int64(self.num_classes),
            "n_fine_bins": np.int64(self.n_fine_bins),
            "per_case": np.bool_(self.per_case),
            "uncertainty": np.bool_(self.uncertainty),
            "case_ids": np.array(ids, dtype=np.str_),
            "case_id_is_int": np.array([isinstance(c, int) for c in self.case_ids], dtype=bool),
        }
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

    def load_state_dict(self, state: dict[str, Any]) -> ConfidenceHistogram:
        """Replace the state by one from :meth:`state_dict` (layouts must match)."""
        nc, nf = int(state["num_classes"]), int(state["n_fine_bins"])
        if (nc, nf) != (self.num_classes, self.n_fine_bins):
            raise ValueError(
                f"state has (num_classes, n_fine_bins) = {(nc, nf)}, "
                f"the histogram {(self.num_classes, self.n_fine_bins)}"
            )
        counts = torch.as_tensor(np.asarray(state["counts"], dtype=np.int64))
        sums = torch.as_tensor(np.asarray(state["sums"], dtype=np.float64))
        scalars = torch.as_tensor(np.asarray(state["scalars"], dtype=np.float64))
        wc = state.get("weighted_counts")
        wct = None if wc is None else torch.as_tensor(np.asarray(wc, dtype=np.float64))
        n = counts.shape[0]
        if counts.shape != (n, self.num_rows, 2, nf) or sums.shape != (n, self.num_rows, nf) or scalars.shape != (n, 3):
            raise ValueError("state arrays have inconsistent shapes")
        ids_raw = [str(c) for c in np.asarray(state["case_ids"]).tolist()]
        is_int = np.asarray(state.get("case_id_is_int", np.zeros(n, dtype=bool))).tolist()
        if len(ids_raw) != n:
            raise ValueError(f"state has {len(ids_raw)} case ids for {n} cases")
        self.per_case = bool(state.get("per_case", self.per_case))
        self.uncertainty = bool(state.get("uncertainty", self.uncertainty))
        self.case_ids = [int(c) if flag else c for c, flag in zip(ids_raw, is_int)]
        self._index = {c: i for i, c in enumerate(self.case_ids)}
        self._states = [
            _State(
                counts[i].transpose(0, 1).contiguous(),
                sums[i].clone(),
                None if wct is None else wct[i].transpose(0, 1).contiguous(),
                scalars[i].clone(),
            )
            for i in range(n)
        ]
        self._pooled_cache = None
        return self

    def save(self, path: str | Path) -> None:
        """Write the state to a compressed ``.npz`` file."""
        np.savez_compressed(path, **self.state_dict())

    @classmethod
    def load(cls, path: str | Path) -> ConfidenceHistogram:
        """Read a histogram written by :meth:`save`."""
        with np.load(path, allow_pickle=False) as data:
            state = {k: data[k] for k in data.files}
        hist = cls(int(state["num_classes"]), int(state["n_fine_bins"]), per_case=bool(state["per_case"]))
        return hist.load_state_dict(state)


# ----------------------------------------------------------------------------------------------------------------
# re-binning and reductions
# ----------------------------------------------------------------------------------------------------------------
def _coarsen(x: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Sum the last axis (``F`` fine bins) into ``n_bins`` equal-width coarse bins."""
    n_fine = x.shape[-1]
    if n_fine % n_bins == 0:
        return x.reshape(*x.shape[:-1], n_bins, n_fine // n_bins).sum(-1)
    coarse_of = torch.div(torch.arange(n_fine, device=x.device) * n_bins, n_fine, rounding_mode="floor")
    out = torch.zeros(*x.shape[:-1], n_bins, dtype=x.dtype, device=x.device)
    return out.index_add_(-1, coarse_of, x)


def _bin_stats(
    counts: torch.Tensor, wcounts: torch.Tensor, sums: torch.Tensor, n_bins: int, min_bin_count: int, error: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Coarse bins of ``(..., 2, F)`` histograms: counts, weights, mean value, frequency, kept mask.

    ``frequency`` is the weighted fraction with ``r = 1`` (or ``r = 0`` with ``error=True``); mean value and
    frequency are NaN in dropped bins (count below ``max(1, min_bin_count)`` or zero weight).
    """
    n_fine = counts.shape[-1]
    if n_fine % n_bins:
        warnings.warn(
            f"n_bins={n_bins} does not divide n_fine_bins={n_fine}: coarse bin edges are rounded to the fine "
            f"grid (shift < 1/{n_fine}); choose a divisor for exact binning",
            UserWarning,
            stacklevel=4,
        )
    n2 = _coarsen(counts, n_bins)
    w2 = _coarsen(wcounts, n_bins)
    n = n2.sum(-2)
    m = w2.sum(-2)
    hit = w2[..., 0, :] if error else w2[..., 1, :]
    s = _coarsen(sums, n_bins)
    kept = (n >= max(1, min_bin_count)) & (m > 0)
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=m.device)
    safe_m = torch.where(kept, m, torch.ones_like(m))
    mean_value = torch.where(kept, s / safe_m, nan)
    freq = torch.where(kept, hit / safe_m, nan)
    return n, m, mean_value, freq, kept


def _reduce_gaps(m: torch.Tensor, gap: torch.Tensor, kept: torch.Tensor, reduction: str) -> torch.Tensor:
    """ECE-style reductions over the last axis (see ``_REDUCTIONS``); NaN where no bin is kept."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    zero = torch.zeros((), dtype=torch.float64, device=m.device)
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=m.device)
    any_kept = kept.any(-1)
    g = torch.where(kept, gap, zero)
    if reduction == "expected":
        mk = torch.where(kept, m, zero)
        den = mk.sum(-1)
        out = (mk * g).sum(-1) / torch.where(any_kept, den, torch.ones_like(den))
    elif reduction == "average":
        out = g.sum(-1) / kept.sum(-1).clamp_min(1)
    else:
        out = g.amax(-1)
    return torch.where(any_kept, out, nan)


def _histogram_from(
    x: Any,
    labels: Any,
    weights: Any,
    mask: Any,
    per_case: bool,
    n_fine_bins: int,
    caller: str,
    uncertainty: bool = True,
) -> ConfidenceHistogram:
    """``x`` itself if it is a histogram, else a histogram of the arrays (entropy row only if ``uncertainty``)."""
    if isinstance(x, ConfidenceHistogram):
        if labels is not None or weights is not None or mask is not None:
            raise ValueError(f"{caller}: labels, weights and mask must be None when reading a ConfidenceHistogram")
        return x
    if labels is None:
        raise ValueError(f"{caller}: labels are required with probabilities (or pass a ConfidenceHistogram)")
    p = to_tensor(x, "probs")
    if p.ndim < 3:
        raise ValueError(f"probs must have shape (B, C, *spatial), got {tuple(p.shape)}")
    hist = ConfidenceHistogram(int(p.shape[1]), n_fine_bins=n_fine_bins, per_case=per_case, uncertainty=uncertainty)
    return hist.update(p, labels, weights=weights, mask=mask)


def _finish(values: torch.Tensor, per_case: bool, ref: Any, caller: str, reason: str) -> Any:
    """Pooled: float (or a ``(C,)`` array); per case: array following ``ref``'s library."""
    n_nan = int(torch.isnan(values).sum())
    if n_nan:
        what = f"{n_nan} of {values.numel()} values" if values.numel() > 1 else "the value"
        warn_nan(f"{caller}: {what} is NaN: {reason}", stacklevel=4)
    if not per_case:
        values = values[0]
        if values.ndim == 0:
            return float(values)
    if isinstance(ref, torch.Tensor):
        return values.to(ref.device)
    return values.cpu().numpy()


def _rows(hist: ConfidenceHistogram, kind: str, per_case: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Select ``(N, [C,] 2, F)`` counts / weights and ``(N, [C,] F)`` sums for a kind of reliability."""
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    counts, wcounts, sums, _ = hist._views(per_case)
    c = hist.num_classes
    if kind == "top":
        return counts[:, c], wcounts[:, c], sums[:, c]
    if kind == "uncertainty":
        if not hist.uncertainty:
            raise ValueError("the histogram was built with uncertainty=False: it has no entropy row for UCE")
        return counts[:, c + 1], wcounts[:, c + 1], sums[:, c + 1]
    if kind == "all_label":
        return counts[:, :c].sum(1), wcounts[:, :c].sum(1), sums[:, :c].sum(1)
    return counts[:, :c], wcounts[:, :c], sums[:, :c]


def _calibration_error(
    x: Any,
    labels: Any,
    *,
    kind: str,
    reduction: str,
    n_bins: int,
    min_bin_count: int,
    per_case: bool,
    weights: Any,
    mask: Any,
    n_fine_bins: int,
    include_background: bool = True,
    per_class: bool = False,
    caller: str,
    ref: Any = None,
) -> Any:
    """The single implementation behind ECE, classwise/all-label ECE, ACE, MCE and UCE."""
    _check_bins(n_bins, min_bin_count)
    hist = _histogram_from(x, labels, weights, mask, per_case, n_fine_bins, caller, kind == "uncertainty")
    counts, wcounts, sums = _rows(hist, kind, per_case)
    _, m, mean_value, freq, kept = _bin_stats(counts, wcounts, sums, n_bins, min_bin_count, kind == "uncertainty")
    values = _reduce_gaps(m, (freq - mean_value).abs(), kept, reduction)
    if kind == "classwise":
        if not include_background:
            values = values[:, 1:]
        if not per_class:
            values = values.mean(-1)
    return _finish(
        values, per_case, x if ref is None else ref, caller,
        f"no bin holds at least max(1, min_bin_count={min_bin_count}) voxels",
    )  # fmt: skip


_COMMON_DOC = """
    Args:
        x: a :class:`ConfidenceHistogram`, or probabilities ``(B, C, *spatial)`` (numpy or torch).
        labels: ``(B, *spatial)`` or ``(B, 1, *spatial)`` integer labels (only with probabilities).
        n_bins: equal-width coarse bins on [0, 1] (default 15).
        min_bin_count: bins with fewer voxels are ignored (default 0; Kock et al. uses 50).
        per_case: one value per case (per batch item for arrays) instead of the pooled value.
        weights, mask: optional voxel weights / boolean mask of the label shape (arrays only).
        n_fine_bins: fine bins of the histogram built from arrays.
"""


def ece(
    x: ConfidenceHistogram | ArrayLike,
    labels: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
    kind: str = "top",
) -> float | ArrayLike:
    """Expected calibration error ``sum_b M_b |a_b - c_b| / sum_b M_b`` (Kock et al. eq. 2; Guo et al. 2017).

    ``kind="top"`` (default) bins the predicted label's probability against accuracy; ``"all_label"`` and
    ``"classwise"`` are :func:`all_label_ece` and :func:`classwise_ece`; ``"uncertainty"`` is :func:`uce`.
    """
    return _calibration_error(
        x, labels, kind=kind, reduction="expected", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, weights=weights, mask=mask, n_fine_bins=n_fine_bins, caller="ece",
    )  # fmt: skip


def classwise_ece(
    x: ConfidenceHistogram | ArrayLike,
    labels: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
    include_background: bool = True,
    per_class: bool = False,
) -> float | ArrayLike:
    """Classwise ECE (Kull et al. 2019; Kock et al. Sec. 2.2): the mean over labels ``l`` of the ECE of ``p_l``
    against ``[y == l]``.

    ``per_class=True`` returns the per-label ECEs (shape ``(C,)``, or ``(n_cases, C)`` per case) instead of
    their mean; ``include_background=False`` leaves label 0 out.
    """
    return _calibration_error(
        x, labels, kind="classwise", reduction="expected", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, weights=weights, mask=mask, n_fine_bins=n_fine_bins,
        include_background=include_background, per_class=per_class, caller="classwise_ece",
    )  # fmt: skip


def all_label_ece(
    x: ConfidenceHistogram | ArrayLike,
    labels: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
) -> float | ArrayLike:
    """All-label ("multiclass") ECE of Kock et al.: every label's ``p_l`` against ``[y == l]`` in one histogram
    (``C`` entries per voxel), so that the reliability diagram covers [0, 1] and no label is left out."""
    return _calibration_error(
        x, labels, kind="all_label", reduction="expected", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, weights=weights, mask=mask, n_fine_bins=n_fine_bins, caller="all_label_ece",
    )  # fmt: skip


def ace(
    x: ConfidenceHistogram | ArrayLike,
    labels: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
    kind: str = "top",
) -> float | ArrayLike:
    """Average calibration error ``1/M sum_m |c_m - Acc_m|`` over the ``M`` non-empty (kept) bins, every bin
    weighted equally (ValUES, Appendix A.5, eq. 11; Neumann et al. 2018). ``kind`` as in :func:`ece`;
    classwise averages over labels."""
    return _calibration_error(
        x, labels, kind=kind, reduction="average", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, weights=weights, mask=mask, n_fine_bins=n_fine_bins, caller="ace",
    )  # fmt: skip


def mce(
    x: ConfidenceHistogram | ArrayLike,
    labels: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
    kind: str = "top",
) -> float | ArrayLike:
    """Maximum calibration error ``max_b |a_b - c_b|`` over kept bins (Naeini et al. 2015; Zeevi et al.'s
    baseline). Use ``min_bin_count`` to keep sparsely filled bins from dominating. ``kind`` as in :func:`ece`."""
    return _calibration_error(
        x, labels, kind=kind, reduction="maximum", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, weights=weights, mask=mask, n_fine_bins=n_fine_bins, caller="mce",
    )  # fmt: skip


for _f in (ece, classwise_ece, all_label_ece, ace, mce):
    _f.__doc__ = (_f.__doc__ or "") + _COMMON_DOC


def _uncertainty_rows(u: torch.Tensor, err: torch.Tensor, batch_cases: bool, n_fine_bins: int) -> ConfidenceHistogram:
    """A histogram whose uncertainty row holds ``u`` against ``err`` (other rows empty); one case per item."""
    if batch_cases:
        u2, e2 = u.reshape(u.shape[0], -1), err.reshape(err.shape[0], -1)
    else:
        u2, e2 = u.reshape(1, -1), err.reshape(1, -1)
    hist = ConfidenceHistogram(2, n_fine_bins=n_fine_bins, per_case=True)
    for b in range(u2.shape[0]):
        stage = _Staging(hist.num_rows, n_fine_bins, False, u.device)
        vals = u2[b].to(torch.float64).clamp(0, 1).unsqueeze(0)
        idx = stage.bin(vals, None, first_row=hist.uncertainty_row)
        stage.hit(hist.uncertainty_row, idx[0], e2[b].logical_not(), None)
        stage.scalars[_SCALAR_WEIGHT] = u2.shape[1]
        hist._states[hist._slot(None)].add_(stage.to_state())
    return hist


def uce(
    x: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
) -> float | ArrayLike:
    """Uncertainty calibration error ``sum_b M_b |err_b - u_b| / sum_b M_b`` (Laves et al. 2019; Kock et al.
    Appendix D; Zeevi et al. baseline) over bins of an uncertainty ``u`` in [0, 1] against the error rate.

    Three ways to call it:

    - ``uce(hist)``: normalised entropy of a :class:`ConfidenceHistogram` against top-label error;
    - ``uce(probs, labels)``: probabilities ``(B, C, *spatial)``, ``C >= 2``, with labels ``(B, *spatial)`` or
      ``(B, 1, *spatial)``: ``u = H(p) / log C`` (:func:`monai_unc.measures.entropy`), error ``argmax p != y``;
    - ``uce(uncertainty, errors)``: an uncertainty map already in [0, 1] (e.g. normalised entropy, or
      ``one_minus_max_prob`` rescaled) and a 0/1 (or bool) error map of the same shape, or ``(B, 1, *spatial)``
      with errors ``(B, *spatial)``. With ``per_case=True`` the map must be ``(B, 1, *spatial)`` and each
      batch item is a case; otherwise every voxel is pooled.

    The two arrays are told apart by shape: equal shapes (or a channel of 1 in the first) mean
    uncertainty and errors, a first array with ``C >= 2`` channels and one more dimension (or a channel of
    1 in the second) means probabilities and labels. Weights and mask apply to the probability form.
    """
    _check_bins(n_bins, min_bin_count)
    common = dict(
        kind="uncertainty", reduction="expected", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, n_fine_bins=n_fine_bins, caller="uce",
    )  # fmt: skip
    if isinstance(x, ConfidenceHistogram):
        return _calibration_error(x, target, weights=weights, mask=mask, **common)  # type: ignore[arg-type]
    if target is None:
        raise ValueError("uce: target (labels or error map) is required with an array")
    u = to_tensor(x, "uncertainty")
    t = to_tensor(target, "target")
    shape_u, shape_t = tuple(u.shape), tuple(t.shape)
    as_map = shape_u == shape_t or (
        u.ndim == t.ndim + 1 and u.ndim >= 3 and u.shape[1] == 1 and shape_u[:1] + shape_u[2:] == shape_t
    )
    if not as_map:
        if u.ndim < 3 or u.shape[1] < 2:
            raise ValueError(
                f"uce: cannot pair x {shape_u} with target {shape_t}: pass probabilities (B, C, *spatial) with "
                "labels (B, *spatial), or an uncertainty map with an error map of the same shape"
            )
        return _calibration_error(x, target, weights=weights, mask=mask, **common)  # type: ignore[arg-type]
    if weights is not None or mask is not None:
        raise ValueError("uce: weights and mask are supported with probabilities and labels only")
    if not u.is_floating_point():
        u = u.to(torch.float64)
    if u.numel() == 0:
        raise ValueError(f"uncertainty is empty (shape {shape_u})")
    if not bool(torch.isfinite(u).all()):
        raise ValueError("uncertainty contains non-finite values (NaN or inf)")
    lo, hi = float(u.min()), float(u.max())
    if lo < 0 or hi > 1:
        raise ValueError(
            f"uncertainty must lie in [0, 1] for UCE, got values in [{lo:.4g}, {hi:.4g}]; "
            "normalise it first (e.g. entropy(probs, normalize=True))"
        )
    err = _check_mask(t, "errors").to(u.device)
    batch_cases = u.ndim >= 3 and u.shape[1] == 1
    if per_case and not batch_cases:
        raise ValueError(f"uce: per_case=True needs an uncertainty map of shape (B, 1, *spatial), got {shape_u}")
    hist = _uncertainty_rows(u, err.reshape(u.shape[0], -1) if batch_cases else err, batch_cases, n_fine_bins)
    return _calibration_error(hist, None, weights=None, mask=None, ref=x, **common)  # type: ignore[arg-type]


def _scalar_metric(
    x: Any, labels: Any, per_case: bool, weights: Any, mask: Any, n_fine_bins: int, which: int, caller: str
) -> Any:
    hist = _histogram_from(x, labels, weights, mask, per_case, n_fine_bins, caller, uncertainty=False)
    _, _, _, scalars = hist._views(per_case)
    total = scalars[:, _SCALAR_WEIGHT]
    values = torch.where(total > 0, scalars[:, which] / torch.where(total > 0, total, 1.0), float("nan"))
    return _finish(values, per_case, x, caller, "no voxel (or zero total weight) in the case")


def nll(
    x: ConfidenceHistogram | ArrayLike,
    labels: ArrayLike | None = None,
    *,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
) -> float | ArrayLike:
    """Negative log-likelihood ``sum w (-log max(p_y, 1e-15)) / sum w`` in nats (Kock et al. eq. 1, computed
    exactly from float64 sums instead of bin centres). Arguments as in :func:`ece`."""
    return _scalar_metric(x, labels, per_case, weights, mask, n_fine_bins, _SCALAR_NLL, "nll")


def brier(
    x: ConfidenceHistogram | ArrayLike,
    labels: ArrayLike | None = None,
    *,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
) -> float | ArrayLike:
    """Brier score ``sum w sum_l (p_l - [y == l])^2 / sum w`` (Brier 1950; sum over labels, range [0, 2],
    as scikit-learn's multiclass ``brier_score_loss``). Arguments as in :func:`ece`."""
    return _scalar_metric(x, labels, per_case, weights, mask, n_fine_bins, _SCALAR_BRIER, "brier")


# ----------------------------------------------------------------------------------------------------------------
# reliability curves
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReliabilityCurve:
    """Per-bin statistics of a reliability diagram (numpy arrays; leading axes ``[n_cases,] [C,]``).

    - ``edges`` ``(n_bins + 1,)`` bin edges on [0, 1];
    - ``confidence`` mean binned value per bin (mean confidence; mean normalised entropy for ``"uncertainty"``),
      NaN in dropped bins;
    - ``frequency`` observed frequency of ``r = 1`` (accuracy for ``"top"``, frequency of the label for
      ``"all_label"``/``"classwise"``, error rate for ``"uncertainty"``), NaN in dropped bins;
    - ``counts`` voxels per bin (int64), ``weights`` voxel weight per bin;
    - ``kept`` bins used by the metrics (at least ``max(1, min_bin_count)`` voxels and positive weight).
    """

    edges: np.ndarray
    confidence: np.ndarray
    frequency: np.ndarray
    counts: np.ndarray
    weights: np.ndarray
    kept: np.ndarray
    kind: str

    @property
    def centers(self) -> np.ndarray:
        return 0.5 * (self.edges[:-1] + self.edges[1:])


def reliability_curve(
    x: ConfidenceHistogram | ArrayLike,
    labels: ArrayLike | None = None,
    *,
    kind: str = "top",
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
) -> ReliabilityCurve:
    """Per-bin mean confidence, observed frequency and counts (Kock et al. Sec. 2.2 and Appendix A).

    ``kind``: ``"top"`` (Guo et al.'s diagram, predicted label), ``"all_label"`` (Kock et al.'s all-label
    diagram over [0, 1]), ``"classwise"`` (one curve per label, leading axis ``C``), ``"uncertainty"``
    (normalised entropy against error rate, Kock et al. Appendix D). ``ECE = sum(weights * |frequency -
    confidence|) / sum(weights)`` over kept bins. Arguments as in :func:`ece`.
    """
    _check_bins(n_bins, min_bin_count)
    hist = _histogram_from(x, labels, weights, mask, per_case, n_fine_bins, "reliability_curve", kind == "uncertainty")
    counts, wcounts, sums = _rows(hist, kind, per_case)
    n, m, mean_value, freq, kept = _bin_stats(counts, wcounts, sums, n_bins, min_bin_count, kind == "uncertainty")
    if not per_case:
        n, m, mean_value, freq, kept = n[0], m[0], mean_value[0], freq[0], kept[0]
    return ReliabilityCurve(
        edges=np.linspace(0.0, 1.0, n_bins + 1),
        confidence=mean_value.cpu().numpy(),
        frequency=freq.cpu().numpy(),
        counts=n.cpu().numpy(),
        weights=m.cpu().numpy(),
        kept=kept.cpu().numpy(),
        kind=kind,
    )


# ----------------------------------------------------------------------------------------------------------------
# all metrics at once, and the MONAI metric
# ----------------------------------------------------------------------------------------------------------------
#: names accepted by :func:`calibration_metrics` and :class:`CalibrationMetric`
CALIBRATION_METRICS = ("ece", "classwise_ece", "all_label_ece", "ace", "mce", "uce", "nll", "brier")
_METRIC_FNS = {
    "ece": ece,
    "classwise_ece": classwise_ece,
    "all_label_ece": all_label_ece,
    "ace": ace,
    "mce": mce,
    "uce": uce,
    "nll": nll,
    "brier": brier,
}


def _check_metric_names(metrics: Sequence[str] | str) -> tuple[str, ...]:
    names = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    bad = [m for m in names if m not in _METRIC_FNS]
    if not names or bad:
        raise ValueError(f"metrics must be a non-empty subset of {CALIBRATION_METRICS}, got {list(names)}")
    return names


def calibration_metrics(
    hist: ConfidenceHistogram,
    metrics: Sequence[str] | str = CALIBRATION_METRICS,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
) -> dict[str, Any]:
    """Several metrics from one histogram: ``{name: value}`` (floats pooled, numpy arrays per case)."""
    if not isinstance(hist, ConfidenceHistogram):
        raise TypeError(f"hist must be a ConfidenceHistogram, got {type(hist).__name__}")
    out: dict[str, Any] = {}
    for name in _check_metric_names(metrics):
        fn = _METRIC_FNS[name]
        if name in ("nll", "brier"):
            out[name] = fn(hist, per_case=per_case)
        else:
            out[name] = fn(hist, n_bins=n_bins, min_bin_count=min_bin_count, per_case=per_case)
    return out


class CalibrationMetric(CumulativeIterationMetric):
    """MONAI metric for the ECE family, NLL and Brier, a thin wrapper of :class:`ConfidenceHistogram`.

    Call it with ``y_pred`` probabilities ``(B, C, *spatial)`` (apply softmax first, e.g. with
    ``monai.transforms.Activations(softmax=True)``) and ``y`` labels ``(B, 1, *spatial)`` / ``(B, *spatial)``
    or one-hot ``(B, C, *spatial)``. Each call adds the batch to a pooled histogram (constant memory:
    ``24 (C + 2) F`` bytes, 1.8 MiB for 3 classes) and buffers one row of per-case values ``(B, K)`` (``K =
    len(metrics)``, in the order of ``metrics``) that :meth:`get_buffer` gathers across ranks.

    :meth:`aggregate` returns ``{name: 0-dim float64 tensor}``. ``reduction="pooled"`` (default) computes each
    metric on the histogram pooled over all cases and ranks (the pooled histograms are all-gathered with
    MONAI's ``evenly_divisible_all_gather`` and summed); ``"mean"`` averages the per-case values (NaN cases
    skipped). :attr:`histogram` gives the pooled :class:`ConfidenceHistogram` after :meth:`aggregate`.

    Args:
        num_classes: ``C``; inferred from the first ``y_pred`` when None.
        metrics: names from :data:`CALIBRATION_METRICS`.
        n_bins, min_bin_count: binning of the ECE family (see :func:`ece`).
        n_fine_bins: fine bins of the histogram.
        reduction: ``"pooled"`` or ``"mean"``.
    """

    def __init__(
        self,
        num_classes: int | None = None,
        metrics: Sequence[str] | str = CALIBRATION_METRICS,
        n_bins: int = 15,
        min_bin_count: int = 0,
        n_fine_bins: int = DEFAULT_FINE_BINS,
        reduction: str = "pooled",
    ) -> None:
        super().__init__()
        _check_bins(n_bins, min_bin_count)
        if reduction not in ("pooled", "mean"):
            raise ValueError(f"reduction must be 'pooled' or 'mean', got {reduction!r}")
        self.metrics = _check_metric_names(metrics)
        self.num_classes = num_classes
        self.n_bins, self.min_bin_count, self.n_fine_bins = n_bins, min_bin_count, n_fine_bins
        self.reduction = reduction
        self._hist: ConfidenceHistogram | None = None
        self.histogram: ConfidenceHistogram | None = None

    def reset(self) -> None:
        super().reset()
        self._hist = None
        self.histogram = None

    def _labels(self, y: torch.Tensor, n_cls: int) -> torch.Tensor:
        if y.ndim >= 3 and y.shape[1] == n_cls and n_cls > 1:
            return y.argmax(dim=1)  # one-hot
        return y

    def _compute_tensor(self, y_pred: torch.Tensor, y: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        if y is None:
            raise ValueError("CalibrationMetric needs y (labels or one-hot labels)")
        if y_pred.ndim < 3:
            raise ValueError(f"y_pred must have shape (B, C, *spatial), got {tuple(y_pred.shape)}")
        n_cls = self.num_classes or int(y_pred.shape[1])
        batch = ConfidenceHistogram(
            n_cls, n_fine_bins=self.n_fine_bins, per_case=True, uncertainty="uce" in self.metrics
        )
        batch.update(y_pred, self._labels(y, n_cls))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # NaN cases are reported at aggregation
            vals = calibration_metrics(
                batch, self.metrics, n_bins=self.n_bins, min_bin_count=self.min_bin_count, per_case=True
            )
        if self._hist is None:
            self._hist = ConfidenceHistogram(
                n_cls, n_fine_bins=self.n_fine_bins, per_case=False, uncertainty="uce" in self.metrics
            )
        self._hist.merge(batch)
        return torch.stack([torch.as_tensor(vals[k], dtype=torch.float64) for k in self.metrics], dim=1)

    def _synced_histogram(self) -> ConfidenceHistogram:
        if self._hist is None or not len(self._hist):
            if self.num_classes is None:
                raise ValueError("CalibrationMetric.aggregate() called before any update (and num_classes unknown)")
            st = _State.zeros(self.num_classes + 2, self.n_fine_bins, False)  # a rank without data adds zeros
        else:
            st = self._hist._pooled()
        counts = evenly_divisible_all_gather(st.counts.unsqueeze(0), concat=True).sum(0)
        sums = evenly_divisible_all_gather(st.sums.unsqueeze(0), concat=True).sum(0)
        scalars = evenly_divisible_all_gather(st.scalars.unsqueeze(0), concat=True).sum(0)
        wc = st.weighted_counts()
        wcounts = evenly_divisible_all_gather(wc.unsqueeze(0), concat=True).sum(0)
        hist = ConfidenceHistogram(
            st.counts.shape[1] - 2, self.n_fine_bins, per_case=False, uncertainty="uce" in self.metrics
        )
        weighted = not torch.equal(wcounts, counts.to(torch.float64))
        hist.case_ids, hist._index = ["pooled"], {"pooled": 0}
        hist._states = [_State(counts, sums, wcounts if weighted else None, scalars)]
        return hist

    def aggregate(self, reduction: str | None = None) -> dict[str, torch.Tensor]:
        """``{name: value}`` pooled over all cases and ranks, or the mean of per-case values."""
        reduction = reduction or self.reduction
        if reduction not in ("pooled", "mean"):
            raise ValueError(f"reduction must be 'pooled' or 'mean', got {reduction!r}")
        if reduction == "mean":
            data = self.get_buffer()
            if not isinstance(data, torch.Tensor):
                raise ValueError("CalibrationMetric.aggregate() called before any update")
            out = {}
            for j, k in enumerate(self.metrics):
                col = data[:, j]
                ok = ~torch.isnan(col)
                out[k] = col[ok].mean() if bool(ok.any()) else torch.tensor(warn_nan(f"{k}: every case is NaN"))
            return out
        self.histogram = self._synced_histogram()
        vals = calibration_metrics(
            self.histogram, self.metrics, n_bins=self.n_bins, min_bin_count=self.min_bin_count, per_case=False
        )
        return {k: torch.tensor(v, dtype=torch.float64) for k, v in vals.items()}
