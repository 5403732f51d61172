"""The calibration metrics: ECE (top-label, classwise, all-label), ACE, MCE, UCE, NLL, Brier and reliability curves.

Every function reads a :class:`~monai_unc.metrics.calibration.histogram.ConfidenceHistogram` (built on the fly
from arrays), re-bins its fine grid into ``n_bins`` coarse bins and reduces the per-bin gaps; the single
implementation is :func:`_calibration_error`. Definitions and references: :mod:`monai_unc.metrics.calibration`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..._deprecation import deprecated_arg_names
from ..._utils import (
    ArrayLike,
    check_bool,
    check_integer,
    probability_tolerance,
    say_warning,
    sum_f64,
    to_tensor,
    user_stacklevel,
    warn_nan,
)
from .histogram import DEFAULT_FINE_BINS, ConfidenceHistogram, coarse_bin_index

__all__ = [
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
    "CALIBRATION_METRICS",
    "check_metric_names",
]

_KINDS = ("top", "all_label", "classwise", "uncertainty")
_REDUCTIONS = ("expected", "average", "maximum")


def _check_bins(n_bins: int, min_bin_count: int) -> None:
    check_integer(n_bins, "n_bins", 1)
    check_integer(min_bin_count, "min_bin_count", 0)


# ----------------------------------------------------------------------------------------------------------------
# re-binning and reductions
# ----------------------------------------------------------------------------------------------------------------
def _coarsen(x: torch.Tensor, n_bins: int) -> torch.Tensor:
    """Sum the last axis (``F`` fine bins) into ``n_bins`` equal-width coarse bins (:func:`coarse_bin_index`)."""
    n_fine = x.shape[-1]
    if n_fine % n_bins == 0:
        return x.reshape(*x.shape[:-1], n_bins, n_fine // n_bins).sum(-1)
    coarse_of = coarse_bin_index(torch.arange(n_fine, device=x.device), n_bins, n_fine)
    out = torch.zeros(*x.shape[:-1], n_bins, dtype=x.dtype, device=x.device)
    return out.index_add_(-1, coarse_of, x)


def _bin_stats(
    counts: torch.Tensor,
    wcounts: torch.Tensor,
    sums: torch.Tensor,
    n_bins: int,
    min_bin_count: int,
    error: bool,
    warn: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Coarse bins of ``(..., 2, F)`` histograms: counts, weights, mean value, frequency, kept mask.

    ``frequency`` is the weighted fraction with ``r = 1`` (or ``r = 0`` with ``error=True``); mean value and
    frequency are NaN in dropped bins (count below ``max(1, min_bin_count)`` or zero weight). ``warn``: warn when
    ``n_bins`` does not divide ``F`` (once per call of a metric, not per block of cases), at the user's call.
    """
    n_fine = counts.shape[-1]
    if warn and n_fine % n_bins:
        say_warning(  # held by CalibrationMetric's call, said once at its end
            f"n_bins={n_bins} does not divide n_fine_bins={n_fine}: coarse bin edges are rounded to the fine "
            f"grid (shift < 1/{n_fine}); choose a divisor for exact binning",
            UserWarning,
            stacklevel=user_stacklevel(),  # the user's call, whichever public function (and wrapper) led here
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
    target: Any,
    weights: Any,
    mask: Any,
    per_case: bool,
    n_fine_bins: int,
    caller: str,
    uncertainty: bool = True,
) -> ConfidenceHistogram:
    """``x`` itself if it is a histogram, else a histogram of the arrays (entropy row only if ``uncertainty``)."""
    if isinstance(x, ConfidenceHistogram):
        if target is not None or weights is not None or mask is not None:
            raise ValueError(f"{caller}: target, weights and mask must be None when reading a ConfidenceHistogram")
        if per_case and not x.per_case and len(x) > 0:  # found by hostile testing: one pooled value came back
            raise ValueError(f"{caller}: per_case=True needs a ConfidenceHistogram built with per_case=True (this "
                             "one pools its cases)")
        return x
    if target is None:
        raise ValueError(f"{caller}: target (the reference labels) is required with probabilities (or pass a "
                         "ConfidenceHistogram as probs)")
    p = to_tensor(x, "probs")
    if p.ndim < 3 or p.shape[1] < 2:
        raise ValueError(f"probs must have shape (B, C, *spatial) with C >= 2 classes, got {tuple(p.shape)}")
    hist = ConfidenceHistogram(int(p.shape[1]), n_fine_bins=n_fine_bins, per_case=per_case, uncertainty=uncertainty)
    return hist.update(p, target, weights=weights, mask=mask)


def _finish(values: torch.Tensor, per_case: bool, ref: Any, caller: str, reason: str, nan_warning: bool = True) -> Any:
    """Pooled: float (or a ``(C,)`` array); per case: array following ``ref``'s library; NaN warns (``nan_warning``).

    The NaN warning names the user's call.
    """
    n_nan = int(torch.isnan(values).sum())
    if n_nan and nan_warning:
        what = f"{n_nan} of {values.numel()} values" if values.numel() > 1 else "the value"
        warn_nan(f"{caller}: {what} is NaN: {reason}", stacklevel=user_stacklevel() + 1)  # + warn_nan's frame
    if not per_case:
        values = values[0]
        if values.ndim == 0:
            return float(values)
    if isinstance(ref, torch.Tensor):
        return values.to(ref.device)
    return values.cpu().numpy()


#: about the most bytes of dense per-case tables a per-case metric reads at once: a cohort's cases are read in blocks
#: (:meth:`ConfidenceHistogram.case_views`; the values of a case do not depend on the block it is read in)
_CASE_BLOCK_BYTES = 1 << 24


def _blocks(hist: ConfidenceHistogram, per_case: bool) -> Any:
    """The tables a metric reads: per case a block of cases at a time, else the pooled tables (one block)."""
    return hist.case_views(_CASE_BLOCK_BYTES) if per_case else [hist.views(False)]


def _rows(
    hist: ConfidenceHistogram, kind: str, views: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Select ``(N, [C,] 2, F)`` counts / weights and ``(N, [C,] F)`` sums for a kind of reliability.

    ``views``: the tables of :meth:`ConfidenceHistogram.views` (or a block of :meth:`~ConfidenceHistogram.case_views`).
    """
    counts, wcounts, sums, _ = views
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
    target: Any,
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
    nan_warning: bool = True,
    rounding_warning: bool = True,
) -> Any:
    """The single implementation behind ECE, classwise/all-label ECE, ACE, MCE and UCE.

    ``rounding_warning=False`` leaves out the warning that ``n_bins`` does not divide the fine bins (said already).
    """
    _check_bins(n_bins, min_bin_count)
    hist = _histogram_from(x, target, weights, mask, per_case, n_fine_bins, caller, kind == "uncertainty")
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    parts = []
    for block, views in enumerate(_blocks(hist, per_case)):
        counts, wcounts, sums = _rows(hist, kind, views)
        _, m, mean_value, freq, kept = _bin_stats(
            counts, wcounts, sums, n_bins, min_bin_count, kind == "uncertainty", warn=block == 0 and rounding_warning,
        )
        values = _reduce_gaps(m, (freq - mean_value).abs(), kept, reduction)
        if kind == "classwise":
            if not include_background:
                values = values[:, 1:]
            if not per_class:
                values = values.mean(-1)
        parts.append(values)
    values = torch.cat(parts) if len(parts) > 1 else parts[0]
    return _finish(
        values, per_case, x if ref is None else ref, caller,
        f"no bin holds at least max(1, min_bin_count={min_bin_count}) voxels", nan_warning,
    )  # fmt: skip


@deprecated_arg_names({"x": "probs", "labels": "target"})
def ece(
    probs: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
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

    ``M_b`` is the voxel weight in bin ``b``, ``a_b`` the frequency of a correct top label (accuracy) and ``c_b``
    the mean confidence in the bin (Kock, Thielke et al.: *Confidence Histograms for Model Reliability Analysis
    and Temperature Calibration*; Guo, Pleiss, Sun, Weinberger: *On Calibration of Modern Neural Networks*).
    ``kind="top"`` (default) bins the predicted label's probability against accuracy; ``"all_label"`` and
    ``"classwise"`` are :func:`all_label_ece` and :func:`classwise_ece`; ``"uncertainty"`` is :func:`uce`.

    Args:
        probs: class probabilities ``(B, C, *spatial)`` with ``C >= 2`` (apply softmax first), or a
            :class:`ConfidenceHistogram` that already holds them (then ``target``, ``weights`` and ``mask`` are None).
        target: reference labels ``(B, *spatial)`` or ``(B, 1, *spatial)`` in ``[0, C)`` (only with probabilities).
            The keywords ``x`` and ``labels`` are deprecated aliases of ``probs`` and ``target``.
        n_bins: equal-width bins on [0, 1].
        min_bin_count: bins with fewer voxels are dropped (Kock et al. use 50); empty bins are always dropped.
        per_case: one value per case (per batch item for arrays) instead of one pooled value.
        weights: optional non-negative voxel weights of the label shape.
        mask: optional boolean map of the label shape; only voxels where it is True count.
        n_fine_bins: fine bins of the histogram built from arrays (see :class:`ConfidenceHistogram`).
        kind: ``"top"`` (predicted label), ``"all_label"``, ``"classwise"`` or ``"uncertainty"``.

    Returns:
        A float pooled over all voxels; with ``per_case`` one value per case ``(n_cases,)`` (numpy for numpy
        input or a histogram, torch for torch input). NaN with a ``UserWarning`` when no voxel or bin is left.

    Example:
        >>> from monai_unc.metrics import ece
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> round(ece(probs, target, n_bins=5), 4)
        0.2643
        >>> ece(probs, target, n_bins=5, per_case=True).round(decimals=4)
        tensor([0.2111, 0.3175], dtype=torch.float64)
    """
    return _calibration_error(
        probs, target, kind=kind, reduction="expected", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, weights=weights, mask=mask, n_fine_bins=n_fine_bins, caller="ece",
    )  # fmt: skip


@deprecated_arg_names({"x": "probs", "labels": "target"})
def classwise_ece(
    probs: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
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
    """Classwise ECE: the mean over labels ``l`` of the ECE of ``p_l`` against ``[y == l]``.

    Kull et al. 2019 (*Beyond temperature scaling: Obtaining well-calibrated multiclass probabilities with
    Dirichlet calibration*); Kock et al. Sec. 2.2.

    Args:
        probs: class probabilities ``(B, C, *spatial)`` with ``C >= 2`` (apply softmax first), or a
            :class:`ConfidenceHistogram` that already holds them (then ``target``, ``weights`` and ``mask`` are None).
        target: reference labels ``(B, *spatial)`` or ``(B, 1, *spatial)`` in ``[0, C)`` (only with probabilities).
            The keywords ``x`` and ``labels`` are deprecated aliases of ``probs`` and ``target``.
        n_bins: equal-width bins on [0, 1].
        min_bin_count: bins with fewer voxels are dropped (Kock et al. use 50); empty bins are always dropped.
        per_case: one value per case (per batch item for arrays) instead of one pooled value.
        weights: optional non-negative voxel weights of the label shape.
        mask: optional boolean map of the label shape; only voxels where it is True count.
        n_fine_bins: fine bins of the histogram built from arrays (see :class:`ConfidenceHistogram`).
        include_background: ``False`` leaves label 0 out.
        per_class: return the per-label ECEs instead of their mean.

    Returns:
        A float (the mean over labels); ``(C,)`` with ``per_class`` (``(C - 1,)``, labels ``1 ... C - 1``, with
        ``include_background=False``); with ``per_case`` ``(n_cases,)`` or ``(n_cases, C)`` (``(n_cases, C - 1)``).
        Library as in :func:`ece`.

    Example:
        >>> from monai_unc.metrics import classwise_ece
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> round(classwise_ece(probs, target, n_bins=5), 4)
        0.1904
        >>> classwise_ece(probs, target, n_bins=5, per_class=True).round(decimals=4)
        tensor([0.1738, 0.2062, 0.1911], dtype=torch.float64)
    """
    return _calibration_error(
        probs, target, kind="classwise", reduction="expected", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, weights=weights, mask=mask, n_fine_bins=n_fine_bins,
        include_background=include_background, per_class=per_class, caller="classwise_ece",
    )  # fmt: skip


@deprecated_arg_names({"x": "probs", "labels": "target"})
def all_label_ece(
    probs: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
) -> float | ArrayLike:
    """All-label ("multiclass") ECE of Kock et al.: every label's ``p_l`` against ``[y == l]`` in one histogram.

    The histogram has ``C`` entries per voxel, so that the reliability diagram covers [0, 1] and no label is left
    out.

    Args:
        probs: class probabilities ``(B, C, *spatial)`` with ``C >= 2`` (apply softmax first), or a
            :class:`ConfidenceHistogram` that already holds them (then ``target``, ``weights`` and ``mask`` are None).
        target: reference labels ``(B, *spatial)`` or ``(B, 1, *spatial)`` in ``[0, C)`` (only with probabilities).
            The keywords ``x`` and ``labels`` are deprecated aliases of ``probs`` and ``target``.
        n_bins: equal-width bins on [0, 1].
        min_bin_count: bins with fewer voxels are dropped (Kock et al. use 50); empty bins are always dropped.
        per_case: one value per case (per batch item for arrays) instead of one pooled value.
        weights: optional non-negative voxel weights of the label shape.
        mask: optional boolean map of the label shape; only voxels where it is True count.
        n_fine_bins: fine bins of the histogram built from arrays (see :class:`ConfidenceHistogram`).

    Returns:
        A float pooled over all voxels; with ``per_case`` one value per case ``(n_cases,)`` (numpy for numpy
        input or a histogram, torch for torch input). NaN with a ``UserWarning`` when no voxel or bin is left.

    Example:
        >>> from monai_unc.metrics import all_label_ece
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> round(all_label_ece(probs, target, n_bins=5), 4)
        0.1824
    """
    return _calibration_error(
        probs, target, kind="all_label", reduction="expected", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, weights=weights, mask=mask, n_fine_bins=n_fine_bins, caller="all_label_ece",
    )  # fmt: skip


@deprecated_arg_names({"x": "probs", "labels": "target"})
def ace(
    probs: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
    kind: str = "top",
) -> float | ArrayLike:
    """Average calibration error ``1/M sum_m |c_m - Acc_m|`` over the ``M`` non-empty (kept) bins.

    Every bin is weighted equally (ValUES, Appendix A.5, eq. 11; Neumann, Zisserman, Vedaldi 2018: *Relaxed
    Softmax: Efficient Confidence Auto-Calibration for Safe Pedestrian Detection*). Classwise averages over labels.

    Args:
        probs: class probabilities ``(B, C, *spatial)`` with ``C >= 2`` (apply softmax first), or a
            :class:`ConfidenceHistogram` that already holds them (then ``target``, ``weights`` and ``mask`` are None).
        target: reference labels ``(B, *spatial)`` or ``(B, 1, *spatial)`` in ``[0, C)`` (only with probabilities).
            The keywords ``x`` and ``labels`` are deprecated aliases of ``probs`` and ``target``.
        n_bins: equal-width bins on [0, 1].
        min_bin_count: bins with fewer voxels are dropped (Kock et al. use 50); empty bins are always dropped.
        per_case: one value per case (per batch item for arrays) instead of one pooled value.
        weights: optional non-negative voxel weights of the label shape.
        mask: optional boolean map of the label shape; only voxels where it is True count.
        n_fine_bins: fine bins of the histogram built from arrays (see :class:`ConfidenceHistogram`).
        kind: as in :func:`ece`; ``"top"`` (predicted label), ``"all_label"``, ``"classwise"`` or ``"uncertainty"``.

    Returns:
        A float pooled over all voxels; with ``per_case`` one value per case ``(n_cases,)`` (numpy for numpy
        input or a histogram, torch for torch input). NaN with a ``UserWarning`` when no voxel or bin is left.

    Example:
        >>> from monai_unc.metrics import ace
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> round(ace(probs, target, n_bins=5), 4)
        0.3175
    """
    return _calibration_error(
        probs, target, kind=kind, reduction="average", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, weights=weights, mask=mask, n_fine_bins=n_fine_bins, caller="ace",
    )  # fmt: skip


@deprecated_arg_names({"x": "probs", "labels": "target"})
def mce(
    probs: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
    kind: str = "top",
) -> float | ArrayLike:
    """Maximum calibration error ``max_b |a_b - c_b|`` over kept bins (Naeini et al. 2015; Zeevi et al.'s baseline).

    Naeini, Cooper, Hauskrecht: *Obtaining Well Calibrated Probabilities Using Bayesian Binning*. Use
    ``min_bin_count`` to keep sparsely filled bins from dominating.

    Args:
        probs: class probabilities ``(B, C, *spatial)`` with ``C >= 2`` (apply softmax first), or a
            :class:`ConfidenceHistogram` that already holds them (then ``target``, ``weights`` and ``mask`` are None).
        target: reference labels ``(B, *spatial)`` or ``(B, 1, *spatial)`` in ``[0, C)`` (only with probabilities).
            The keywords ``x`` and ``labels`` are deprecated aliases of ``probs`` and ``target``.
        n_bins: equal-width bins on [0, 1].
        min_bin_count: bins with fewer voxels are dropped (Kock et al. use 50); empty bins are always dropped.
        per_case: one value per case (per batch item for arrays) instead of one pooled value.
        weights: optional non-negative voxel weights of the label shape.
        mask: optional boolean map of the label shape; only voxels where it is True count.
        n_fine_bins: fine bins of the histogram built from arrays (see :class:`ConfidenceHistogram`).
        kind: as in :func:`ece`; ``"top"`` (predicted label), ``"all_label"``, ``"classwise"`` or ``"uncertainty"``.

    Returns:
        A float pooled over all voxels; with ``per_case`` one value per case ``(n_cases,)`` (numpy for numpy
        input or a histogram, torch for torch input). NaN with a ``UserWarning`` when no voxel or bin is left.

    Example:
        >>> from monai_unc.metrics import mce
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> round(mce(probs, target, n_bins=5, min_bin_count=10), 4)
        0.634
    """
    return _calibration_error(
        probs, target, kind=kind, reduction="maximum", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, weights=weights, mask=mask, n_fine_bins=n_fine_bins, caller="mce",
    )  # fmt: skip


@deprecated_arg_names({"x": "probs"})
def uce(
    probs: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
) -> float | ArrayLike:
    """Uncertainty calibration error ``sum_b M_b |err_b - u_b| / sum_b M_b`` over bins of an uncertainty in [0, 1].

    Laves, Ihler, Kortmann, Ortmaier 2019 (*Well-calibrated Model Uncertainty with Temperature Scaling for Dropout
    Variational Inference*); Kock et al. Appendix D; Zeevi et al.'s baseline: the uncertainty ``u`` against the
    error rate ``err``. Three ways to call it:

    - ``uce(hist)``: normalised entropy of a :class:`ConfidenceHistogram` against top-label error;
    - ``uce(probs, target)``: probabilities ``(B, C, *spatial)``, ``C >= 2``, with labels ``(B, *spatial)`` or
      ``(B, 1, *spatial)``: ``u = H(p) / log C`` (:func:`monai_unc.measures.entropy`), error ``argmax p != y``;
    - ``uce(uncertainty, errors)``: an uncertainty map already in [0, 1] (e.g. normalised entropy, or
      ``one_minus_max_prob`` rescaled) and a 0/1 (or bool) error map of the same shape, or ``(B, 1, *spatial)``
      with errors ``(B, *spatial)`` (:meth:`ConfidenceHistogram.from_uncertainty`). With ``per_case=True``
      the map must be ``(B, 1, *spatial)`` and each batch item is a case; otherwise every voxel is pooled.

    The two arrays are told apart by shape: equal shapes (or a channel of 1 in the first) mean
    uncertainty and errors, a first array with ``C >= 2`` channels and one more dimension (or a channel of
    1 in the second) means probabilities and labels. Two arrays of one shape ``(B, C, *spatial)``, ``C >= 2``, that
    are probabilities (summing to 1 over dim 1) and one-hot labels (one 1 per voxel along dim 1) are refused with a
    ``ValueError``: read as a map pair they would give a meaningless number; pass the labels as ``(B, *spatial)``
    (``target.argmax(1)``). Weights and mask apply to the probability form. The keyword ``x`` is a deprecated alias
    of ``probs``.

    Args:
        probs: a histogram, probabilities ``(B, C, *spatial)`` or an uncertainty map in [0, 1] (see above).
        target: labels for probabilities, a 0/1 error map for an uncertainty map, None for a histogram.
        n_bins: equal-width bins on [0, 1].
        min_bin_count: bins with fewer voxels are dropped (Kock et al. use 50); empty bins are always dropped.
        per_case: one value per case (per batch item for arrays) instead of one pooled value.
        weights: optional non-negative voxel weights of the label shape.
        mask: optional boolean map of the label shape; only voxels where it is True count.
        n_fine_bins: fine bins of the histogram built from arrays (see :class:`ConfidenceHistogram`).

    Returns:
        A float pooled over all voxels; with ``per_case`` one value per case ``(n_cases,)`` (numpy for numpy
        input or a histogram, torch for torch input). NaN with a ``UserWarning`` when no voxel or bin is left.

    Example:
        >>> from monai_unc.metrics import uce
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> round(uce(probs, target, n_bins=5), 4)
        0.213
        >>> u = torch.rand(2, 1, 4, 4, 4)
        >>> errors = torch.rand(2, 4, 4, 4) < u[:, 0]
        >>> uce(u, errors, n_bins=5, per_case=True).round(decimals=4)
        tensor([0.0241, 0.0758], dtype=torch.float64)
    """
    _check_bins(n_bins, min_bin_count)
    common = dict(
        kind="uncertainty", reduction="expected", n_bins=n_bins, min_bin_count=min_bin_count,
        per_case=per_case, n_fine_bins=n_fine_bins, caller="uce",
    )  # fmt: skip
    if isinstance(probs, ConfidenceHistogram):
        return _calibration_error(probs, target, weights=weights, mask=mask, **common)  # type: ignore[arg-type]
    if target is None:
        raise ValueError("uce: target (labels or error map) is required with an array")
    u = to_tensor(probs, "probs")
    t = to_tensor(target, "target")
    shape_u, shape_t = tuple(u.shape), tuple(t.shape)
    as_map = shape_u == shape_t or (
        u.ndim == t.ndim + 1 and u.ndim >= 3 and u.shape[1] == 1 and shape_u[:1] + shape_u[2:] == shape_t
    )
    if not as_map:
        if u.ndim < 3 or u.shape[1] < 2:
            raise ValueError(
                f"uce: cannot pair probs {shape_u} with target {shape_t}: pass probabilities (B, C, *spatial) with "
                "labels (B, *spatial), or an uncertainty map with an error map of the same shape"
            )
        return _calibration_error(probs, target, weights=weights, mask=mask, **common)  # type: ignore[arg-type]
    if _probs_with_one_hot(u, t):
        raise ValueError(
            f"uce: probs and target of one shape {shape_u} read as an uncertainty map and an error map, but they "
            f"look like probabilities with one-hot labels ({shape_u[1]} channels summing to 1, exactly one 1 per "
            "voxel in target). Pass labels (B, *spatial) with probabilities (e.g. target.argmax(1)), or an "
            "uncertainty map as (B, 1, *spatial) with errors (B, *spatial)"
        )
    if weights is not None or mask is not None:
        raise ValueError("uce: weights and mask are supported with probabilities and labels only")
    if per_case and not (u.ndim >= 3 and u.shape[1] == 1):
        raise ValueError(f"uce: per_case=True needs an uncertainty map of shape (B, 1, *spatial), got {shape_u}")
    hist = ConfidenceHistogram.from_uncertainty(u, t, n_fine_bins=n_fine_bins)
    return _calibration_error(hist, None, weights=None, mask=None, ref=probs, **common)  # type: ignore[arg-type]


def _probs_with_one_hot(u: torch.Tensor, t: torch.Tensor) -> bool:
    """Whether ``u`` and ``t`` of one shape ``(B, C, *spatial)``, ``C >= 2``, are probabilities and one-hot labels.

    :func:`uce` reads two arrays of one shape as an uncertainty map and an error map; a pair whose first array sums
    to 1 over dim 1 (within :func:`monai_unc._utils.probability_tolerance`, values in [0, 1]) and whose second holds
    exactly one 1 (the rest 0) per voxel along dim 1 is the layout of probabilities with one-hot labels instead
    (``CalibrationMetric``'s ``y``), which that reading would turn into a meaningless number.
    """
    if u.shape != t.shape or u.ndim < 3 or u.shape[1] < 2 or u.numel() == 0 or not u.is_floating_point():
        return False
    if t.is_complex() or not bool(((t == 0) | (t == 1)).all()) or not bool((t.sum(1) == 1).all()):
        return False
    tol = probability_tolerance(u.dtype)
    lo, hi = torch.aminmax(u.detach())
    if not (float(lo) >= -tol and float(hi) <= 1 + tol):  # NaN too
        return False
    return float((sum_f64(u.detach(), 1) - 1).abs().max()) <= tol


def _scalar_metric(
    x: Any, target: Any, per_case: bool, weights: Any, mask: Any, n_fine_bins: int, which: int, caller: str,
    nan_warning: bool = True,
) -> Any:
    """NLL or Brier (scalar ``which``): its weighted sum over the weight of the voxels that hold probabilities.

    Those voxels are the top-label row's (in earlier versions the total weight also counted the voxels of an
    uncertainty map, :meth:`ConfidenceHistogram.from_uncertainty`, which hold no probabilities: a map's case scored
    0.0 and a map merged into a cohort diluted its pooled NLL and Brier). Per case a block of cases at a time.
    """
    hist = _histogram_from(x, target, weights, mask, per_case, n_fine_bins, caller, uncertainty=False)
    c = hist.num_classes
    parts = []
    for _, wcounts, _, scalars in _blocks(hist, per_case):
        total = wcounts[:, c].sum((-2, -1))
        parts.append(torch.where(total > 0, scalars[:, which] / torch.where(total > 0, total, 1.0), float("nan")))
    return _finish(torch.cat(parts), per_case, x, caller,
                   "no voxel with probabilities (or zero total weight) in the case", nan_warning)


@deprecated_arg_names({"x": "probs", "labels": "target"})
def nll(
    probs: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
    *,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
) -> float | ArrayLike:
    """Negative log-likelihood ``sum w (-log max(p_y, 1e-15)) / sum w`` in nats.

    Kock et al. eq. 1, computed exactly from float64 sums instead of bin centres.

    Args:
        probs: class probabilities ``(B, C, *spatial)`` with ``C >= 2`` (apply softmax first), or a
            :class:`ConfidenceHistogram` that already holds them (then ``target``, ``weights`` and ``mask`` are None).
        target: reference labels ``(B, *spatial)`` or ``(B, 1, *spatial)`` in ``[0, C)`` (only with probabilities).
            The keywords ``x`` and ``labels`` are deprecated aliases of ``probs`` and ``target``.
        per_case: one value per case (per batch item for arrays) instead of one pooled value.
        weights: optional non-negative voxel weights of the label shape.
        mask: optional boolean map of the label shape; only voxels where it is True count.
        n_fine_bins: fine bins of the histogram built from arrays (see :class:`ConfidenceHistogram`).

    Returns:
        A float pooled over all voxels; with ``per_case`` one value per case ``(n_cases,)`` (numpy for numpy
        input or a histogram, torch for torch input). NaN with a ``UserWarning`` when no voxel or bin is left.

    Example:
        >>> from monai_unc.metrics import nll
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> round(nll(probs, target), 4)
        1.3831
    """
    return _scalar_metric(probs, target, per_case, weights, mask, n_fine_bins, ConfidenceHistogram.SCALAR_NLL, "nll")


@deprecated_arg_names({"x": "probs", "labels": "target"})
def brier(
    probs: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
    *,
    per_case: bool = False,
    weights: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    n_fine_bins: int = DEFAULT_FINE_BINS,
) -> float | ArrayLike:
    """Brier score ``sum w sum_l (p_l - [y == l])^2 / sum w``.

    Brier 1950 (*Verification of forecasts expressed in terms of probability*); the sum over labels, range
    [0, 2], as scikit-learn's multiclass ``brier_score_loss``.

    Args:
        probs: class probabilities ``(B, C, *spatial)`` with ``C >= 2`` (apply softmax first), or a
            :class:`ConfidenceHistogram` that already holds them (then ``target``, ``weights`` and ``mask`` are None).
        target: reference labels ``(B, *spatial)`` or ``(B, 1, *spatial)`` in ``[0, C)`` (only with probabilities).
            The keywords ``x`` and ``labels`` are deprecated aliases of ``probs`` and ``target``.
        per_case: one value per case (per batch item for arrays) instead of one pooled value.
        weights: optional non-negative voxel weights of the label shape.
        mask: optional boolean map of the label shape; only voxels where it is True count.
        n_fine_bins: fine bins of the histogram built from arrays (see :class:`ConfidenceHistogram`).

    Returns:
        A float pooled over all voxels; with ``per_case`` one value per case ``(n_cases,)`` (numpy for numpy
        input or a histogram, torch for torch input). NaN with a ``UserWarning`` when no voxel or bin is left.

    Example:
        >>> from monai_unc.metrics import brier
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> round(brier(probs, target), 4)
        0.8238
    """
    return _scalar_metric(
        probs, target, per_case, weights, mask, n_fine_bins, ConfidenceHistogram.SCALAR_BRIER, "brier"
    )


# ----------------------------------------------------------------------------------------------------------------
# reliability curves
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReliabilityCurve:
    """Per-bin statistics of a reliability diagram (numpy arrays; leading axes ``[n_cases,] [C,]``).

    Returned by :func:`reliability_curve`.

    Attributes:
        edges: ``(n_bins + 1,)`` bin edges on [0, 1].
        confidence: mean binned value per bin (mean confidence; mean normalised entropy for ``"uncertainty"``),
            NaN in dropped bins.
        frequency: observed frequency of ``r = 1`` (accuracy for ``"top"``, frequency of the label for
            ``"all_label"``/``"classwise"``, error rate for ``"uncertainty"``), NaN in dropped bins.
        counts: voxels per bin (int64).
        weights: voxel weight per bin.
        kept: bins used by the metrics (at least ``max(1, min_bin_count)`` voxels and positive weight).

    Example:
        >>> from monai_unc.metrics import reliability_curve
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> curve = reliability_curve(probs, target, n_bins=5)
        >>> curve.centers
        array([0.1, 0.3, 0.5, 0.7, 0.9])
        >>> curve.counts, curve.kept
        (array([ 0,  8, 64, 43, 13]), array([False,  True,  True,  True,  True]))
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
        """The bin centres ``(n_bins,)``, midpoints of :attr:`edges`."""
        return 0.5 * (self.edges[:-1] + self.edges[1:])


@deprecated_arg_names({"x": "probs", "labels": "target"})
def reliability_curve(
    probs: ConfidenceHistogram | ArrayLike,
    target: ArrayLike | None = None,
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
    confidence|) / sum(weights)`` over kept bins.

    Args:
        probs: class probabilities ``(B, C, *spatial)`` with ``C >= 2`` (apply softmax first), or a
            :class:`ConfidenceHistogram` that already holds them (then ``target``, ``weights`` and ``mask`` are None).
        target: reference labels ``(B, *spatial)`` or ``(B, 1, *spatial)`` in ``[0, C)`` (only with probabilities).
            The keywords ``x`` and ``labels`` are deprecated aliases of ``probs`` and ``target``.
        kind: ``"top"`` (predicted label), ``"all_label"``, ``"classwise"`` or ``"uncertainty"``.
        n_bins: equal-width bins on [0, 1].
        min_bin_count: bins with fewer voxels are dropped (Kock et al. use 50); empty bins are always dropped.
        per_case: one value per case (per batch item for arrays) instead of one pooled value.
        weights: optional non-negative voxel weights of the label shape.
        mask: optional boolean map of the label shape; only voxels where it is True count.
        n_fine_bins: fine bins of the histogram built from arrays (see :class:`ConfidenceHistogram`).

    Returns:
        :class:`ReliabilityCurve` with per-bin arrays ``([n_cases,] [C,] n_bins)``.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import ece, reliability_curve
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> c = reliability_curve(probs, target, n_bins=5)
        >>> k = c.kept
        >>> ece_from_curve = np.sum(c.weights[k] * np.abs(c.frequency[k] - c.confidence[k])) / np.sum(c.weights[k])
        >>> bool(np.isclose(ece_from_curve, ece(probs, target, n_bins=5)))
        True
    """
    _check_bins(n_bins, min_bin_count)
    hist = _histogram_from(
        probs, target, weights, mask, per_case, n_fine_bins, "reliability_curve", kind == "uncertainty"
    )
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    parts = []
    for block, views in enumerate(_blocks(hist, per_case)):  # a cohort a block of cases at a time
        counts, wcounts, sums = _rows(hist, kind, views)
        parts.append(_bin_stats(counts, wcounts, sums, n_bins, min_bin_count, kind == "uncertainty", warn=block == 0))
    n, m, mean_value, freq, kept = (torch.cat(t) if len(t) > 1 else t[0] for t in zip(*parts))
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


def check_metric_names(metrics: Sequence[str] | str) -> tuple[str, ...]:
    """The names selected by ``metrics`` as a tuple.

    Args:
        metrics: one name or a sequence of names from :data:`CALIBRATION_METRICS`.

    Returns:
        The names, in the given order.

    Raises:
        ValueError: naming ``metrics`` for an empty selection or an unknown name.

    Example:
        >>> from monai_unc.metrics.calibration import check_metric_names
        >>> check_metric_names("ece")
        ('ece',)
        >>> check_metric_names(["nll", "brier"])
        ('nll', 'brier')
    """
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
    include_background: bool = True,
) -> dict[str, Any]:
    """Several metrics from one histogram: ``{name: value}`` (floats pooled, numpy arrays per case).

    Args:
        hist: a :class:`ConfidenceHistogram`.
        metrics: names from :data:`CALIBRATION_METRICS` (default all).
        n_bins: equal-width bins on [0, 1].
        min_bin_count: bins with fewer voxels are dropped (Kock et al. use 50); empty bins are always dropped.
        per_case: one value per case instead of one pooled value.
        include_background: ``False`` leaves label 0 out of ``classwise_ece`` (the mean over labels ``1 ... C - 1``,
            as MONAI's metrics read ``include_background``); the other metrics score every voxel as before.

    Returns:
        ``{name: float}`` pooled, or ``{name: (n_cases,) numpy array}`` per case.

    Example:
        >>> from monai_unc.metrics import ConfidenceHistogram, calibration_metrics
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), dim=1)
        >>> target = torch.randint(0, 3, (2, 4, 4, 4))
        >>> hist = ConfidenceHistogram(num_classes=3).update(probs, target)
        >>> res = calibration_metrics(hist, ["ece", "nll", "brier"], n_bins=5)
        >>> {k: round(float(v), 4) for k, v in res.items()}
        {'ece': 0.2643, 'nll': 1.3831, 'brier': 0.8238}
        >>> round(calibration_metrics(hist, "classwise_ece", n_bins=5, include_background=False)["classwise_ece"], 4)
        0.1986
    """
    return calibration_metrics_core(hist, metrics, n_bins=n_bins, min_bin_count=min_bin_count, per_case=per_case,
                                    include_background=include_background)


#: the ``(kind, reduction)`` of each binned metric of :data:`CALIBRATION_METRICS` read from a histogram (their
#: functions' defaults), and the scalar row of the others
_BINNED = {"ece": ("top", "expected"), "classwise_ece": ("classwise", "expected"),
           "all_label_ece": ("all_label", "expected"), "ace": ("top", "average"), "mce": ("top", "maximum"),
           "uce": ("uncertainty", "expected")}
_SCALARS = {"nll": ConfidenceHistogram.SCALAR_NLL, "brier": ConfidenceHistogram.SCALAR_BRIER}


def calibration_metrics_core(
    hist: ConfidenceHistogram,
    metrics: Sequence[str] | str = CALIBRATION_METRICS,
    *,
    n_bins: int = 15,
    min_bin_count: int = 0,
    per_case: bool = False,
    include_background: bool = True,
    nan_warning: bool = True,
    rounding_warning: bool = True,
) -> dict[str, Any]:
    """:func:`calibration_metrics`, whose warnings of NaN values or rounded bin edges the caller may leave out.

    For :class:`~monai_unc.metrics.CalibrationMetric`, which says the cases with a NaN value when it aggregates them;
    every other warning (``n_bins`` that does not divide the histogram's fine bins) is given as ever (in earlier
    versions the metric silenced every ``UserWarning`` of :func:`calibration_metrics` inside
    ``warnings.catch_warnings()``, a process-wide filter, so ``reduction="mean"`` never said that its coarse bin edges
    were rounded).

    Args:
        hist: as :func:`calibration_metrics`.
        metrics: as :func:`calibration_metrics`.
        n_bins: as :func:`calibration_metrics`.
        min_bin_count: as :func:`calibration_metrics`.
        per_case: as :func:`calibration_metrics`.
        include_background: as :func:`calibration_metrics`.
        nan_warning: warn of NaN values (``True``, as :func:`calibration_metrics`) or not.
        rounding_warning: warn, once per call (not once per binned metric), that ``n_bins`` does not divide the
            histogram's fine bins (``True``), or not (a caller that has said it already, such as
            :class:`~monai_unc.metrics.CalibrationMetric`, which says it once per metric object).

    Returns:
        ``{name: float}`` pooled, or ``{name: (n_cases,) numpy array}`` per case.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import ConfidenceHistogram
        >>> from monai_unc.metrics.calibration.functional import calibration_metrics_core
        >>> hist = ConfidenceHistogram(num_classes=2, per_case=True)
        >>> _ = hist.update(torch.tensor([[[0.9], [0.1]]]), torch.tensor([[0]]), mask=torch.tensor([[False]]))
        >>> calibration_metrics_core(hist, ["ece", "nll"], per_case=True, nan_warning=False)  # no voxel: no warning
        {'ece': array([nan]), 'nll': array([nan])}
    """
    if not isinstance(hist, ConfidenceHistogram):
        raise TypeError(f"hist must be a ConfidenceHistogram, got {type(hist).__name__}")
    check_bool(include_background, "include_background")
    nan_warning = check_bool(nan_warning, "nan_warning")
    say_rounding = check_bool(rounding_warning, "rounding_warning")
    out: dict[str, Any] = {}
    for name in check_metric_names(metrics):
        if name in _SCALARS:
            out[name] = _scalar_metric(hist, None, per_case, None, None, hist.n_fine_bins, _SCALARS[name], name,
                                       nan_warning)
        else:
            kind, reduction = _BINNED[name]
            out[name] = _calibration_error(
                hist, None, kind=kind, reduction=reduction, n_bins=n_bins, min_bin_count=min_bin_count,
                per_case=per_case, weights=None, mask=None, n_fine_bins=hist.n_fine_bins,
                include_background=include_background, caller=name, nan_warning=nan_warning,
                rounding_warning=say_rounding,
            )  # fmt: skip
            say_rounding = False  # the same sentence for every binned metric: said once per call
    return out

