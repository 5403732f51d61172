"""Label-free per-case quality estimates from stochastic segmentations (no ground truth needed).

Every estimate here looks only at the model's own predictions: how much its samples agree with each other and
with their consensus, or how confident the mean prediction is in its own argmax. Case-level QC ranks cases by
them (higher agreement = likely better segmentation) and :func:`monai_unc.metrics.selective.risk_controlled_threshold`
turns ``1 - estimate`` (or the CV, which is already an uncertainty) into a referral threshold with a guarantee.

Notation: samples ``p_s`` ``(S, B, C, *spatial)`` (probabilities, e.g. ``keep_samples=True`` of an inferer),
their segmentations ``A_s = argmax_c p_s`` and per-class masks ``A_s^c = [A_s = c]``; the mean prediction
``pbar = mean_s p_s`` (the inferer's ``pred``) and its segmentation ``R = argmax_c pbar``. For two masks,
``Dice(X, Y) = 2 |X & Y| / (|X| + |Y|)``. Every estimate is reported per class (``c = 1 .. C-1``, or ``0 .. C-1``
with ``include_background=True``) and for the foreground (``label > 0``: the union of the non-background classes).

=====================  ================================================================  ========================
estimate               formula (per case, per class or foreground)                        needs
=====================  ================================================================  ========================
``pairwise_dice``      mean over pairs ``s < t`` of ``Dice(A_s, A_t)``                     ``keep_samples``
``dice_to_mean``       mean over ``s`` of ``Dice(A_s, R)`` (Roy et al. 2018)               ``keep_samples`` (or
                                                                                          two passes, below)
``sample_iou``         ``|A_1 & ... & A_S| / |A_1 | ... | A_S|`` (Roy et al. 2018)         streaming
``volume_cv``          ``std_s V_s / mean_s V_s``, ``V_s = |A_s|`` (or ``sum p_s``)          streaming
``expected_dice``      ``2 sum pbar [R = c] / (sum pbar + |R = c|)``; without ``R = c``:    ``SampleStats`` (pred)
                       ``prod_x (1 - pbar_c(x))``
=====================  ================================================================  ========================

The first four are agreement measures from Roy, Conjeti, Navab and Wachinger, "Inherent brain segmentation
quality control from fully convnet Monte Carlo sampling" (MICCAI 2018; cited by RETINA, Band et al.): Dice agreement
of the MC samples with the final segmentation, IoU of the MC samples, and the coefficient of variation (CV) of
the structure volume. ``volume_cv`` is the CV of the per-sample *volumes*; MONAI's ``TestTimeAugmentation``
returns a "volume variation coefficient" ``vvc`` computed as ``std / mean`` over every voxel of every sample
pooled, which is a different number (it mixes spatial and sample variation). ``volume_cv`` is an uncertainty
(larger = worse); the Dice / IoU estimates are qualities in [0, 1] (larger = better).

``expected_dice`` needs only the mean probabilities, so it works from :class:`~monai_unc.stats.SampleStats`
(``expected_dice(stats.mean)``) or from a single deterministic softmax. If the true label of each voxel were
drawn independently from ``pbar``, the expected overlap with ``R`` would be ``sum_x pbar_c(x) [R(x) = c]`` and
the expected true volume ``sum_x pbar_c(x)``; the estimate is the ratio of these expectations (the soft Dice of
``pbar`` against its own argmax), which approximates the expected Dice for structures of many voxels. A class (or
the foreground) that ``R`` does not hold has a Dice of 1 when the reference holds none of it either (two empty
masks, ``empty_score``) and 0 otherwise, so its expected Dice under the same model is exactly
``prod_x (1 - pbar_c(x))`` (``prod_x pbar_0(x)`` for the foreground), the chance that the reference holds none of
it: 1 for a class without any probability, near 0 for a structure the segmentation missed while the model gives it
a few voxels' worth of probability. This is the number ``monai-unc evaluate`` and ``triage`` compute
(:func:`case_expected_dice`, one formula for the API and the command line). On a case small enough to enumerate
every reference (``tests/metrics/test_quality_review68.py``: 8 voxels, 3 classes; 12 voxels, 2 regions) the product
equals the exact expectation to rounding, while the soft Dice of a held class differs from it by about 0.01 (0.777
against 0.769; 0.765 against 0.758): it approximates ``E[Dice]`` by ``E[2 |R & Y|] / E[|R| + |Y|]``. In earlier versions
the API gave such a class 0, the soft Dice of an empty mask; that number is the estimate of referral rules certified
before (``case_expected_dice``'s ``estimate``) and nothing else.

Streaming (memory independent of ``S``): :class:`StreamingQuality` takes one sample at a time and keeps

- per-sample volumes ``|A_s^c|`` (and soft volumes ``sum_x p_s[c]``): ``S x B x (C + 1)`` numbers, exact CV with
  any ``ddof`` (running sums of ``V`` and ``V^2`` would do as well);
- a running bitwise AND and OR of ``1 << A_s`` per voxel (bit ``c`` set = every / some sample chose ``c``), plus a
  running AND of the foreground: exact ``sample_iou`` for every class with two integers and a bool per voxel;
- per-sample intersections ``|A_s^c & R^c|`` with a reference ``R`` fixed *before* the samples are seen: exact
  ``dice_to_mean`` when ``R`` is the argmax of the mean from a first pass (replay the same samples, e.g. the
  inferer's ``seed=``), or, in one pass, the Dice of each sample against the deterministic prediction.

``pairwise_dice`` cannot be streamed exactly (each pair has its own denominator). The per-voxel vote counts
``n_c(x) = #{s : A_s(x) = c}`` give the pooled version ``sum_x n_c (n_c - 1) / ((S - 1) sum_s |A_s^c|)`` (ratio of
the pair sums instead of the mean of the pair ratios) in one pass with one integer per voxel and class.

An estimate is the model's own opinion, and under a distribution shift it can stay high while the real Dice drops.
:func:`conformal_quantile` and :func:`conformal_interval` turn it into an interval with a guarantee
(split-conformal regression: Vovk, Gammerman and Shafer, "Algorithmic Learning in a Random World", 2005; Lei,
G'Sell, Rinaldo, Tibshirani and Wasserman, "Distribution-free predictive inference for regression", JASA 2018):
from ``n`` labelled calibration cases with estimates ``e_i`` and real Dice ``d_i``, the residuals
``r_i = |d_i - e_i|`` and ``q = `` the ``ceil((n + 1)(1 - alpha))``-th smallest residual, the interval of a new case
``[e - q, e + q]`` (clipped to [0, 1]) holds its real Dice with probability at least ``1 - alpha`` (and at most
``1 - alpha + 1 / (n + 1)`` without ties), *marginally* (on average over the calibration draw and the new case),
*provided the new case is exchangeable with the calibration cases*: a case from a shifted distribution may fall
outside. With ``n < 1 / alpha - 1`` no finite quantile has that guarantee: ``q = inf`` and the interval is [0, 1].

Empty masks: the Dice or IoU of two empty masks is 0/0; both agree that the structure is absent, so the result is
``empty_score`` (default 1.0, the convention of the GED distance; the rule lives in :mod:`monai_unc.metrics.overlap`,
which computes every Dice, IoU and Gram matrix here). A CV with mean volume 0 is undefined:
NaN with a ``UserWarning``. Shapes: results are ``(B,)`` (foreground) and ``(B, K)`` (per class) float64, numpy
or torch following the input. Counts accumulate in int64 / float64.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from .._utils import (
    ArrayLike,
    argmax,
    check_bool,
    check_case_labels,
    check_labels,
    check_probabilities,
    like_input,
    quantile_min_cases,
    quantile_rank,
    real_array,
    sum_f64,
    to_numpy,
    to_tensor,
    user_stacklevel,
)
from ..keys import LEGACY_REGION_ESTIMATE, UncertaintyKeys
from ..product import format_level
from .overlap import check_empty_score, class_counts, dice_from_counts, label_gram, overlap_counts, overlap_ratio

__all__ = [
    "QualityScores",
    "StreamingQuality",
    "pairwise_dice",
    "dice_to_mean",
    "sample_iou",
    "volume_cv",
    "expected_dice",
    "quality_estimates",
    "case_expected_dice",
    "QUALITY_ESTIMATES",
    "ConformalInterval",
    "conformal_quantile",
    "conformal_interval",
    "CONFORMAL_ALPHA",
]

K = UncertaintyKeys

#: default miscoverage of :func:`conformal_interval` (a 90 % interval)
CONFORMAL_ALPHA = 0.1

#: names of the estimates :func:`quality_estimates` returns (``volume_cv`` is an uncertainty, the rest qualities)
QUALITY_ESTIMATES = ("expected_dice", "pairwise_dice", "dice_to_mean", "sample_iou", "volume_cv")

class QualityScores(NamedTuple):
    """Per-case quality estimate: ``foreground`` ``(B,)`` and ``per_class`` ``(B, K)``.

    Column ``j`` of ``per_class`` is class ``j + 1`` (``include_background=False``, the default) or class ``j``
    (``include_background=True``). Float64, in the library (and device) of the input.

    Attributes:
        foreground: ``(B,)`` the estimate for the foreground (every class ``>= 1`` together).
        per_class: ``(B, K)`` the estimate per class.

    Example:
        >>> from monai_unc.metrics import pairwise_dice
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> logits = 3 * torch.randn(1, 2, 3, 4, 4, 4)  # one logit map: 2 cases, 3 classes
        >>> samples = torch.softmax(logits + torch.randn(4, 2, 3, 4, 4, 4), dim=2)  # 4 noisy samples
        >>> q = pairwise_dice(samples)
        >>> q.foreground.shape, q.per_class.shape
        (torch.Size([2]), torch.Size([2, 2]))
    """

    foreground: ArrayLike
    per_class: ArrayLike


# ---------------------------------------------------------------------------------------------- input handling


def _probs_samples(samples: Any, validate: bool) -> torch.Tensor:
    validate = check_bool(validate, "validate")
    s = to_tensor(samples, "samples")
    if s.ndim < 4:
        raise ValueError(
            f"samples must have shape (S, B, C, *spatial) with at least one spatial axis, got {tuple(s.shape)}"
        )
    if validate:
        check_probabilities(s, "samples", channel_dim=2, min_ndim=4)
    elif s.shape[2] < 2:
        raise ValueError(f"samples must have at least 2 classes along dim 2, got shape {tuple(s.shape)}")
    return s


def _probs(probs: Any, validate: bool) -> torch.Tensor:
    validate = check_bool(validate, "validate")
    p = to_tensor(probs, "probs")
    if p.ndim < 3:
        raise ValueError(f"probs must have shape (B, C, *spatial), got {tuple(p.shape)}")
    if validate:
        check_probabilities(p, "probs")
    elif p.shape[1] < 2:
        raise ValueError(f"probs must have at least 2 classes along dim 1, got shape {tuple(p.shape)}")
    return p


def _reference(reference: Any, batch_spatial: tuple[int, ...], num_classes: int, device: torch.device) -> torch.Tensor:
    r = to_tensor(reference, "reference").to(device)
    if r.ndim == len(batch_spatial) + 1 and r.shape[1] == 1:
        r = r[:, 0]
    if tuple(r.shape) != batch_spatial:
        raise ValueError(
            f"reference must be a label map of shape (B, *spatial) or (B, 1, *spatial) with (B, *spatial) = "
            f"{batch_spatial}, got {tuple(r.shape)}"
        )
    return check_labels(r, "reference", num_classes=num_classes)


def _argmax(p: torch.Tensor, dim: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Index of the largest class along ``dim`` (ties go to the lower index, as ``torch.argmax``), as ``dtype``."""
    return argmax(p, dim).to(dtype)


def _classes(num_classes: int, include_background: bool) -> list[int]:
    return list(range(0 if include_background else 1, num_classes))


def _split(values: torch.Tensor, classes: list[int], reference: Any) -> QualityScores:
    """``values`` ``(B, C + 1)`` (last column = foreground) -> QualityScores in the reference's library."""
    return QualityScores(like_input(values[:, -1].contiguous(), reference),
                         like_input(values[:, classes].contiguous(), reference))


def _masks(seg: torch.Tensor, num_classes: int) -> list[torch.Tensor]:
    """Boolean masks of classes ``0 .. C-1`` and of the foreground (last) for label maps of any shape."""
    return [seg == c for c in range(num_classes)] + [seg > 0]


def _warn_single_sample(n_s: int, what: str) -> None:
    """Warn that one sample's agreement with itself (Dice / IoU 1, CV 0) carries no information."""
    if n_s == 1:
        warnings.warn(f"{what}: a single sample agrees with itself; the estimate carries no information about the "
                      "segmentation's quality", UserWarning, stacklevel=user_stacklevel())


# ---------------------------------------------------------------------------------------------- batch estimates


def pairwise_dice(
    samples: ArrayLike, include_background: bool = False, empty_score: float = 1.0, validate: bool = True
) -> QualityScores:
    """Mean pairwise Dice of the sample segmentations (Roy et al. 2018's agreement between MC samples).

    ``q = 2 / (S (S - 1)) sum_{s < t} Dice(A_s, A_t)`` with ``A_s = argmax_c p_s``; per class and for the
    foreground (``A_s > 0``). Needs the samples (``keep_samples=True``); see the module docstring for the pooled
    streaming variant. The pair intersections ``|A_s & A_t|`` are one Gram matrix per case and class (a float32
    matrix product of 0/1 masks in blocks of 2^23 voxels, which is exact, summed in float64).

    Roy, Conjeti, Navab, Wachinger: *Bayesian QuickNAT: Model Uncertainty in Deep Whole-Brain Segmentation for
    Structure-wise Quality Control*.

    Args:
        samples: ``(S, B, C, *spatial)`` probabilities, ``S >= 2``.
        include_background: also report class 0 in ``per_class``.
        empty_score: value of a pair of empty masks (default 1.0: both agree the structure is absent).
        validate: check that the input holds probabilities (one extra pass).

    Returns:
        :class:`QualityScores` in [0, 1]; with ``S = 1`` there is no pair: NaN with a ``UserWarning``.

    Example:
        >>> from monai_unc.metrics import pairwise_dice
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> logits = 3 * torch.randn(1, 2, 3, 4, 4, 4)  # one logit map: 2 cases, 3 classes
        >>> samples = torch.softmax(logits + torch.randn(4, 2, 3, 4, 4, 4), dim=2)  # 4 noisy samples
        >>> q = pairwise_dice(samples)
        >>> q.foreground.round(decimals=4)
        tensor([0.8557, 0.8831], dtype=torch.float64)
        >>> q.per_class.round(decimals=4)
        tensor([[0.7476, 0.6003],
                [0.6534, 0.8765]], dtype=torch.float64)
    """
    check_empty_score(empty_score)
    include_background = check_bool(include_background, "include_background")
    s = _probs_samples(samples, validate)
    n_s, b, c = s.shape[:3]
    classes = _classes(c, include_background)
    if n_s < 2:
        warnings.warn("pairwise_dice: a single sample has no pair; the agreement is undefined (NaN)", UserWarning,
                      stacklevel=user_stacklevel())
        nan = torch.full((b, c + 1), float("nan"), dtype=torch.float64, device=s.device)
        return _split(nan, classes, samples)
    # (B, S, N), one byte per voxel and sample
    seg = _argmax(s, 2, torch.uint8 if c <= 255 else torch.int64).reshape(n_s, b, -1).transpose(0, 1).contiguous()
    iu = torch.triu_indices(n_s, n_s, offset=1, device=s.device)
    out = torch.empty((b, c + 1), dtype=torch.float64, device=s.device)
    for j in range(c + 1):  # classes 0 .. C-1, then the foreground
        gram = label_gram(seg, j if j < c else "foreground")  # (B, S, S), exact counts
        size = torch.diagonal(gram, dim1=1, dim2=2)  # (B, S) = |A_s|
        inter = gram[:, iu[0], iu[1]]
        pair = dice_from_counts(inter, size[:, iu[0]], size[:, iu[1]], empty_score, caller="pairwise_dice")
        out[:, j] = pair.mean(dim=1)
    return _split(out, classes, samples)


def _dice_to(seg: torch.Tensor, ref: torch.Tensor, num_classes: int, empty_score: float, what: str) -> torch.Tensor:
    """Dice of each sample ``seg`` ``(S, B, N)`` against ``ref`` ``(B, N)`` -> ``(S, B, C + 1)`` (last: foreground)."""
    counts = overlap_counts(seg, ref, num_classes, foreground=True, validate=False)
    return dice_from_counts(*counts, empty_score, caller=what)


def dice_to_mean(
    samples: ArrayLike,
    reference: ArrayLike | None = None,
    include_background: bool = False,
    empty_score: float = 1.0,
    validate: bool = True,
) -> QualityScores:
    """Mean Dice of each sample's segmentation against the mean prediction's (Roy et al. 2018, "Dice agreement").

    ``q = mean_s Dice(A_s, R)`` with ``R = argmax_c mean_s p_s`` (ties go to the lower class index, as
    ``argmax`` does), per class and for the foreground.

    Args:
        samples: ``(S, B, C, *spatial)`` probabilities.
        reference: optional label map ``(B, *spatial)`` or ``(B, 1, *spatial)`` to compare against instead of the
            argmax of the mean (e.g. the deterministic prediction).
        include_background: also report class 0 in ``per_class``.
        empty_score: value of a pair of empty masks (default 1.0: both agree the structure is absent).
        validate: check that the input holds probabilities (one extra pass).

    Returns:
        :class:`QualityScores` ``(foreground (B,), per_class (B, K))``, float64 in the library of the input.

    Example:
        >>> from monai_unc.metrics import dice_to_mean
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> logits = 3 * torch.randn(1, 2, 3, 4, 4, 4)  # one logit map: 2 cases, 3 classes
        >>> samples = torch.softmax(logits + torch.randn(4, 2, 3, 4, 4, 4), dim=2)  # 4 noisy samples
        >>> q = dice_to_mean(samples)
        >>> q.foreground.round(decimals=4)
        tensor([0.9187, 0.9276], dtype=torch.float64)
        >>> q.per_class.round(decimals=4)
        tensor([[0.8648, 0.7565],
                [0.7762, 0.9259]], dtype=torch.float64)
    """
    include_background = check_bool(include_background, "include_background")
    s = _probs_samples(samples, validate)
    n_s, b, c = s.shape[:3]
    if reference is None:
        _warn_single_sample(n_s, "dice_to_mean")
        ref = _argmax(sum_f64(s, 0), 1)  # argmax of the mean
    else:
        ref = _reference(reference, (b, *s.shape[3:]), c, s.device)
    seg = _argmax(s, 2).reshape(n_s, b, -1)
    d = _dice_to(seg, ref.reshape(b, -1), c, empty_score, "dice_to_mean")
    return _split(d.mean(dim=0), _classes(c, include_background), samples)


def sample_iou(
    samples: ArrayLike, include_background: bool = False, empty_score: float = 1.0, validate: bool = True
) -> QualityScores:
    """IoU of the sample segmentations (Roy et al. 2018): ``|A_1 & ... & A_S| / |A_1 | ... | A_S|``.

    Per class and for the foreground; 1 when every sample draws the same mask. :class:`StreamingQuality` computes
    the same value one sample at a time.

    Args:
        samples: ``(S, B, C, *spatial)`` probabilities.
        include_background: also report class 0 in ``per_class``.
        empty_score: value of a pair of empty masks (default 1.0: both agree the structure is absent).
        validate: check that the input holds probabilities (one extra pass).

    Returns:
        :class:`QualityScores` ``(foreground (B,), per_class (B, K))``, float64 in the library of the input.

    Example:
        >>> from monai_unc.metrics import sample_iou
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> logits = 3 * torch.randn(1, 2, 3, 4, 4, 4)  # one logit map: 2 cases, 3 classes
        >>> samples = torch.softmax(logits + torch.randn(4, 2, 3, 4, 4, 4), dim=2)  # 4 noisy samples
        >>> q = sample_iou(samples)
        >>> q.foreground.round(decimals=4)
        tensor([0.5745, 0.6471], dtype=torch.float64)
        >>> q.per_class.round(decimals=4)
        tensor([[0.3636, 0.2143],
                [0.2500, 0.6471]], dtype=torch.float64)
    """
    include_background = check_bool(include_background, "include_background")
    s = _probs_samples(samples, validate)
    n_s, b, c = s.shape[:3]
    _warn_single_sample(n_s, "sample_iou")
    seg = _argmax(s, 2).reshape(n_s, b, -1)
    masks = _masks(seg, c)
    inter = torch.stack([m.all(dim=0).sum(dim=-1) for m in masks], dim=-1)
    union = torch.stack([m.any(dim=0).sum(dim=-1) for m in masks], dim=-1)
    return _split(overlap_ratio(inter, union, empty_score, caller="sample_iou"), _classes(c, include_background),
                  samples)


def _cv(volumes: torch.Tensor, ddof: int, what: str) -> torch.Tensor:
    """CV over dim 0 of ``volumes`` ``(S, ...)``: ``std / mean``; NaN with a warning where undefined."""
    if isinstance(ddof, (bool, np.bool_)) or not isinstance(ddof, (int, np.integer)) or ddof < 0:
        raise ValueError(f"ddof must be an integer >= 0, got {ddof!r}")
    n_s = volumes.shape[0]
    v = volumes.to(torch.float64)
    mean = v.mean(dim=0)
    bad = mean == 0
    if n_s - ddof <= 0:
        warnings.warn(f"{what}: {n_s} sample(s) with ddof={ddof} leave no degrees of freedom (NaN)", UserWarning,
                      stacklevel=user_stacklevel())
        return torch.full_like(mean, float("nan"))
    std = (v - mean).pow(2).sum(dim=0).div(n_s - ddof).sqrt()
    if bool(bad.any()):
        warnings.warn(f"{what}: {int(bad.sum())} class volume(s) are 0 in every sample; the CV is undefined (NaN)",
                      UserWarning, stacklevel=user_stacklevel())
    return torch.where(bad, torch.full_like(mean, float("nan")), std / torch.where(bad, torch.ones_like(mean), mean))


def volume_cv(
    samples: ArrayLike, include_background: bool = False, soft: bool = False, ddof: int = 0, validate: bool = True
) -> QualityScores:
    """Coefficient of variation of the structure volume across samples (Roy et al. 2018) -- an *uncertainty*.

    ``CV = std_s V_s / mean_s V_s`` with ``V_s = |A_s^c|`` (voxels with ``argmax p_s = c``; foreground:
    ``argmax > 0``) or, with ``soft=True``, ``V_s = sum_x p_s[c](x)`` (foreground ``sum_x 1 - p_s[0]``). The CV
    is scale-free, so voxel spacing cancels. Not MONAI's TTA ``vvc`` (module docstring).

    Args:
        samples: ``(S, B, C, *spatial)`` probabilities.
        include_background: also report class 0 in ``per_class``.
        soft: use the summed probabilities as volumes instead of the argmax masks.
        ddof: ``0`` (default) the population standard deviation, as for the ``variance`` key; ``1`` the sample
            standard deviation; an integer ``>= 0``.
        validate: check that ``samples`` are probabilities.

    Returns:
        :class:`QualityScores` (lower is better); 0 when every sample has the same volume; a class absent from
        every sample gives NaN with a ``UserWarning``.

    Raises:
        ValueError: ``samples`` are not probabilities (with ``validate``), or ``ddof`` is not an integer ``>= 0``.

    Example:
        >>> from monai_unc.metrics import volume_cv
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> logits = 3 * torch.randn(1, 2, 3, 4, 4, 4)  # one logit map: 2 cases, 3 classes
        >>> samples = torch.softmax(logits + torch.randn(4, 2, 3, 4, 4, 4), dim=2)  # 4 noisy samples
        >>> q = volume_cv(samples)
        >>> q.foreground.round(decimals=4)
        tensor([0.0427, 0.0203], dtype=torch.float64)
        >>> q.per_class.round(decimals=4)
        tensor([[0.0973, 0.1468],
                [0.0315, 0.0262]], dtype=torch.float64)
    """
    include_background = check_bool(include_background, "include_background")
    soft = check_bool(soft, "soft")  # a string "no" is truthy: never taken as True
    s = _probs_samples(samples, validate)
    n_s, b, c = s.shape[:3]
    if ddof == 0:  # with ddof >= 1 one sample already gives NaN, with its own warning
        _warn_single_sample(n_s, "volume_cv")
    vol = _volumes(s.reshape(n_s * b, c, -1), soft).reshape(n_s, b, c + 1)
    return _split(_cv(vol, ddof, "volume_cv"), _classes(c, include_background), samples)


def _volumes(p: torch.Tensor, soft: bool) -> torch.Tensor:
    """Per-class and foreground volumes of probabilities ``(N, C, V)`` -> ``(N, C + 1)`` (int64 or float64)."""
    c = p.shape[1]
    if soft:
        v = sum_f64(p, -1)
        return torch.cat([v, (p.shape[-1] - v[:, :1])], dim=1)
    seg = _argmax(p, 1)
    counts = class_counts(seg, c, validate=False)
    return torch.cat([counts, (seg > 0).sum(dim=-1, keepdim=True)], dim=1)


def expected_dice(
    probs: ArrayLike, include_background: bool = False, empty_score: float = 1.0, validate: bool = True
) -> QualityScores:
    """Expected Dice of the mean prediction against its own argmax, from the mean probabilities only.

    ``q_c = 2 sum_x pbar_c(x) [R(x) = c] / (sum_x pbar_c(x) + |R = c|)`` with ``R = argmax_c pbar``; foreground:
    ``pbar_fg = 1 - pbar_0`` and ``R > 0``. This is the soft Dice of ``pbar`` against ``R`` (module docstring):
    the ratio of the expected overlap and volumes if each voxel's label were drawn from ``pbar``. A class that ``R``
    does not hold has ``q_c = empty_score * prod_x (1 - pbar_c(x))`` (the foreground ``prod_x pbar_0(x)``): the
    chance that the reference holds none of it either, the exact expected Dice under that model (module docstring);
    the per-class values are those ``monai-unc evaluate`` and ``triage`` compute (:func:`case_expected_dice`).
    Of float16 / bfloat16 probabilities, ``pbar_fg`` is the sum of the foreground classes where ``pbar_0 >= 0.5``
    (there a stored ``pbar_0`` near 1 has lost the small foreground probabilities: ``1 - 1e-4`` is 1 in float16).
    Works from :class:`~monai_unc.stats.SampleStats` (``expected_dice(stats.mean)``), the inferer's ``pred`` or one
    softmax.

    Args:
        probs: ``(B, C, *spatial)`` probabilities.
        include_background: also report class 0 in ``per_class``.
        empty_score: value of a pair of empty masks (default 1.0: both agree the structure is absent).
        validate: check that the input holds probabilities (one extra pass; NaN or inf is refused). Without the
            check, a case whose probabilities hold NaN is NaN in every column, with a ``UserWarning``.

    Returns:
        :class:`QualityScores` ``(foreground (B,), per_class (B, K))``, float64 in the library of the input.

    Example:
        >>> from monai_unc.metrics import expected_dice
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> logits = 3 * torch.randn(1, 2, 3, 4, 4, 4)  # one logit map: 2 cases, 3 classes
        >>> samples = torch.softmax(logits + torch.randn(4, 2, 3, 4, 4, 4), dim=2)  # 4 noisy samples
        >>> q = expected_dice(samples.mean(0))
        >>> q.foreground.round(decimals=4)
        tensor([0.8761, 0.8723], dtype=torch.float64)
        >>> import numpy as np
        >>> p = np.zeros((1, 3, 2, 2)); p[0, 0] = 0.85; p[0, 1] = 0.05; p[0, 2] = 0.1  # background ...
        >>> p[0, :, 0, 0] = (0.1, 0.8, 0.1)  # ... but one voxel of class 1; class 2 is never the argmax
        >>> q = expected_dice(p)  # class 2: prod (1 - 0.1) = 0.9 ** 4, the chance that the reference has none of it
        >>> q.per_class.round(4).tolist()
        [[0.8205, 0.6561]]
    """
    return _expected_dice(probs, include_background, empty_score, validate, soft_only=False)


def _expected_dice(
    probs: ArrayLike, include_background: bool, empty_score: float, validate: bool, soft_only: bool
) -> QualityScores:
    """:func:`expected_dice`; ``soft_only``: the soft Dice alone (the former estimate, :func:`case_expected_dice`)."""
    include_background = check_bool(include_background, "include_background")
    p = _probs(probs, validate)
    b, c = p.shape[:2]
    q = _expected_dice_values(p.reshape(b, c, -1), empty_score, soft_only)
    return _split(q, _classes(c, include_background), probs)


def _expected_dice_values(p: torch.Tensor, empty_score: float, soft_only: bool) -> torch.Tensor:
    """The one formula of the expected Dice: ``(B, C + 1)`` float64 (foreground last) of ``(B, C, N)`` probabilities.

    Where the segmentation holds the class (or foreground), the soft Dice ``2 sum p [R = c] / (sum p + |R = c|)``;
    where it holds none of it, ``empty_score * prod_x (1 - p_c(x))`` (``prod_x p_0(x)`` for the foreground): the
    Dice is ``empty_score`` when the reference holds none of it either and 0 otherwise, so this is its exact
    expectation with each voxel's label drawn from ``p`` on its own (``empty_score`` alone without any probability, as
    the soft Dice's 0 / 0). ``soft_only`` keeps the soft Dice there too (0 as soon as there is any probability): the
    estimate of referral rules certified before, reached only through :func:`case_expected_dice`. A case whose
    probabilities hold NaN (``validate=False``) is NaN in every column, with a ``UserWarning``.
    """
    c = p.shape[1]
    if p.device.type == "cpu" and p.dtype in (torch.float32, torch.float64) and not p.requires_grad:
        num, den, held = _expected_dice_sums_cpu(p)
    else:
        num, den, held = _expected_dice_sums(p, small_foreground=not soft_only)
    q = overlap_ratio(2 * num, den, empty_score, caller="expected_dice")
    # probabilities may exceed 1 by the tolerance of the checks (1.0005 passes), and the ratio with them (found by
    # hostile testing: 1.00025); the estimate of a Dice is kept in [0, 1] (clamp keeps NaN)
    q = q.clamp(0.0, 1.0)
    if not soft_only:
        # not held but some probability (den = sum p > 0): the soft Dice is 0 there, the expected Dice is not
        # every class not held, whatever its sum (hostile review 68): a rounding error below 0 within the tolerance of
        # the checks makes a negative sum, and a float16 p_0 rounded to 1 a foreground sum of 0 with probability left
        absent = held == 0
        for i, j in absent.nonzero().tolist():
            q[i, j] = empty_score * _probability_none(p[i] if j == c else p[i, j], foreground=j == c)
        if math.isnan(empty_score) and bool(absent.any()):
            warnings.warn(f"expected_dice: {int(absent.sum())} class(es) the segmentation does not hold gave NaN "
                          "(empty_score=nan scores a reference that holds none of them either)", UserWarning,
                          stacklevel=user_stacklevel())
    undefined = ~torch.isfinite(den[:, :c]).all(dim=1)  # every class's sum holds every voxel of the case
    if bool(undefined.any()):
        q[undefined] = float("nan")
        warnings.warn(f"expected_dice: the probabilities of {int(undefined.sum())} case(s) hold NaN or inf: their "
                      "expected Dice is undefined (NaN)", UserWarning, stacklevel=user_stacklevel())
    return q


def _probability_none(p: torch.Tensor, foreground: bool, chunk: int = 1 << 22) -> float:
    """``prod_x (1 - p(x))`` of one class's map ``(N,)``; for the ``foreground``, of a case's ``(C, N)`` maps.

    The chance that no voxel is drawn into the class (the foreground), each on its own. Summed as ``log1p(-p)`` in
    float64 over chunks of the flat map (a float32 product of a large volume underflows; a float64 copy of the whole
    map would double its memory). The foreground's ``1 - p_fg(x)`` is ``p_0(x)``, taken where ``p_0 < 0.5`` and as
    ``1 - sum_{c >= 1} p_c(x)`` (the float64 sum of the foreground's maps) elsewhere: a ``p_0`` near 1 stored in
    float16 or float32 has lost the small foreground probability that decides the product (a float16 ``1 - 0.0002``
    is 1), while the small ``p_c`` keep it (a region's ``(1 - p_r, p_r)`` gives ``prod_x (1 - p_r(x))`` exactly).
    Values beyond [0, 1] by the tolerance of the probability checks are clipped, so that the logarithm stays defined
    (a voxel of probability 1 makes the product 0). A number: no gradient flows through it (the soft Dice 0 it
    replaces had none either).
    """
    flat = p.detach().reshape(p.shape[0], -1) if foreground else p.detach().reshape(1, -1)
    total = 0.0
    for start in range(0, flat.shape[1], chunk):
        part = flat[:, start:start + chunk]
        if foreground:
            p0 = part[0].to(torch.float64).clamp(0.0, 1.0)
            fg = part[1:].sum(dim=0, dtype=torch.float64).clamp(0.0, 1.0)
            logs = torch.where(p0 < 0.5, torch.log(p0), torch.log1p(-fg))
        else:
            logs = torch.log1p(-part[0].to(torch.float64).clamp(0.0, 1.0))
        total += float(logs.sum())
    return math.exp(total)


def _expected_dice_sums_cpu(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The sums of :func:`_expected_dice_sums` on the CPU, in NumPy, the overlap of every class in one pass.

    Torch's float64 and boolean sums of float32 maps are about ten times slower on the CPU. At a voxel whose
    segmentation is ``c``, ``pbar_c`` is the voxel's largest probability, so the overlaps are one weighted count of
    the segmentation (``bincount`` of the labels weighted by the maxima, summed in float64).
    """
    b, c, n = p.shape
    top, seg = p.max(dim=1)  # the values and indices of _argmax (ties: the lower class)
    a, top_np, seg_np = p.numpy(), top.numpy(), seg.numpy()
    num = np.empty((b, c + 1))
    den = np.empty((b, c + 1))
    held = np.empty((b, c + 1), np.int64)
    for i in range(b):
        counts = np.bincount(seg_np[i], minlength=c)
        num[i, :c] = np.bincount(seg_np[i], weights=top_np[i], minlength=c)
        den[i, :c] = np.add.reduce(a[i], axis=-1, dtype=np.float64) + counts
        size = n - counts[0]
        p0 = a[i, 0]
        num[i, c] = size - np.add.reduce(np.where(seg_np[i] > 0, p0, 0), dtype=np.float64)
        den[i, c] = (n - np.add.reduce(p0, dtype=np.float64)) + size
        held[i, :c], held[i, c] = counts, size
    return torch.from_numpy(num), torch.from_numpy(den), torch.from_numpy(held)  # float64, float64, int64


def _expected_dice_sums(
    p: torch.Tensor, small_foreground: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(num, den, held)`` ``(B, C + 1)`` of :func:`expected_dice` of ``(B, C, N)`` probabilities.

    Per class ``sum pbar_c [R = c]`` and ``sum pbar_c + |R = c|`` (float64 sums) and ``|R = c|`` (int64), the
    foreground last. ``small_foreground``: the foreground of half-precision maps from the classes' own maps where
    ``p_0 >= 0.5`` (False: ``1 - p_0`` everywhere, the former estimate's values).
    """
    b, c = p.shape[:2]
    seg = _argmax(p, 1)  # (B, N)
    f64 = torch.float64
    num = torch.empty((b, c + 1), dtype=f64, device=p.device)
    den = torch.empty((b, c + 1), dtype=f64, device=p.device)
    held = torch.empty((b, c + 1), dtype=torch.int64, device=p.device)
    for j in range(c):  # one class at a time (memory of one map), sums in float64
        pj = p[:, j]
        mask = seg == j
        held[:, j] = mask.sum(dim=-1)
        num[:, j] = torch.where(mask, pj, torch.zeros_like(pj)).sum(dim=-1, dtype=f64)
        den[:, j] = pj.sum(dim=-1, dtype=f64) + held[:, j]
    # foreground, pbar_fg = 1 - pbar_0: sums of 1 - p_0 as counts minus float64 sums of p_0 (a voxel-wise 1 - p_0
    # in float16 / bfloat16 would round every voxel)
    p0, mask = p[:, 0], seg > 0
    size = mask.sum(dim=-1)
    if small_foreground and p.element_size() < 4 and c > 1:
        # float16 / bfloat16: a p_0 near 1 has lost the small foreground probability that the classes' own maps keep
        # (1 - 1e-4 is 1 in float16): 1 - p_0 where p_0 < 0.5, the sum of the foreground maps elsewhere, as for the
        # product of a foreground not held (hostile review 69: a float16 foreground of 135 voxels' worth read 0.974
        # instead of 0.809, the 40 voxels' worth of 1e-4 lost from the denominator). Exact in float32 (11-bit values)
        w0 = p0.to(torch.float32)
        fg = torch.where(w0 < 0.5, 1 - w0, p[:, 1:].sum(dim=1, dtype=torch.float32))
        num[:, c] = torch.where(mask, fg, torch.zeros_like(fg)).sum(dim=-1, dtype=f64)
        den[:, c] = fg.sum(dim=-1, dtype=f64) + size
    else:
        num[:, c] = size - torch.where(mask, p0, torch.zeros_like(p0)).sum(dim=-1, dtype=f64)
        den[:, c] = (p.shape[-1] - p0.sum(dim=-1, dtype=f64)) + size
    held[:, c] = size
    return num, den, held


def quality_estimates(
    output: Mapping[str, Any],
    include_background: bool = False,
    empty_score: float = 1.0,
    multilabel: bool | None = None,
) -> dict[str, QualityScores]:
    """Every available estimate from an inferer's output dict (keyed by :class:`~monai_unc.keys.UncertaintyKeys`).

    ``expected_dice`` comes from ``pred``; ``pairwise_dice``, ``dice_to_mean``, ``sample_iou`` and ``volume_cv``
    need at least two ``samples`` (``keep_samples=True``) and are left out without them (with a ``UserWarning`` for
    a single sample, whose agreement with itself would read as a perfect case).
    The values follow the library of ``pred``. For referral use an uncertainty: ``1 - q`` for the Dice / IoU
    estimates, ``volume_cv`` as is.

    Region-based (multi-label sigmoid) outputs, ``multilabel=True`` (default ``None``: the output's own
    ``multilabel`` attribute, set by the inferers): ``pred`` ``(B, R, *spatial)`` and ``samples``
    ``(S, B, R, *spatial)`` hold one foreground probability per region; each region is scored as a binary task
    (segmentation ``p_r > 0.5``, i.e. the estimates on the two-class probabilities ``(1 - p_r, p_r)``), and
    ``per_class`` is ``(B, R)``, one column per region, while ``foreground`` is the mean over the regions (the
    combined case estimate; NaN regions are left out of it). ``expected_dice`` of a region the segmentation does not
    hold is ``prod_x (1 - p_r(x))`` (:func:`expected_dice`): ``per_class`` and ``foreground`` are the
    ``expected_dice_<R>`` and ``expected_dice`` that ``monai-unc evaluate --regions`` and ``triage`` compute. For
    classes, ``per_class`` is ``expected_dice_<class>``, and the ``expected_dice`` column of the command lines is its
    mean over the classes, while ``foreground`` here is the merged foreground (another quantity with three or more
    classes; :func:`case_expected_dice`).

    Args:
        output: an inferer's output: ``pred`` ``(B, C, *spatial)`` and optionally ``samples``
            ``(S, B, C, *spatial)``.
        include_background: also report class 0 in ``per_class``.
        empty_score: value of a pair of empty masks.
        multilabel: score sigmoid regions (see above); default from the output.

    Returns:
        ``{name: QualityScores}`` for the estimates the output allows, in the order of :data:`QUALITY_ESTIMATES`.

    Raises:
        ValueError: ``output`` has no ``pred``; ``samples`` are not probabilities or not of shape
            ``(S, *pred.shape)``.
        TypeError: ``include_background`` or ``multilabel`` is not a bool (``multilabel`` may be None).

    Example:
        >>> from monai_unc.metrics import quality_estimates
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> logits = 3 * torch.randn(1, 2, 3, 4, 4, 4)  # one logit map: 2 cases, 3 classes
        >>> samples = torch.softmax(logits + torch.randn(4, 2, 3, 4, 4, 4), dim=2)  # 4 noisy samples
        >>> q = quality_estimates({"pred": samples.mean(0), "samples": samples})
        >>> for name, scores in q.items():
        ...     print(name, [round(v, 3) for v in scores.foreground.tolist()])
        expected_dice [0.876, 0.872]
        pairwise_dice [0.856, 0.883]
        dice_to_mean [0.919, 0.928]
        sample_iou [0.574, 0.647]
        volume_cv [0.043, 0.02]
    """
    if not isinstance(output, Mapping) or K.PRED.value not in output:
        raise ValueError("output must be an inferer's dict with a 'pred' entry (mean probabilities)")
    include_background = check_bool(include_background, "include_background")
    if multilabel is None:
        multilabel = bool(getattr(output, "multilabel", False))
    else:
        multilabel = check_bool(multilabel, "multilabel")
    if multilabel:
        return _region_quality(output, empty_score, soft_only=False)
    return _class_quality(output, include_background, empty_score, soft_only=False)


def _class_quality(
    output: Mapping[str, Any], include_background: bool, empty_score: float, soft_only: bool
) -> dict[str, QualityScores]:
    """:func:`quality_estimates` of a softmax output; ``soft_only`` as :func:`_expected_dice_values`."""
    kw = {"include_background": include_background}
    pred = output[K.PRED.value]
    res = {"expected_dice": _expected_dice(pred, include_background, empty_score, True, soft_only)}
    samples = output.get(K.SAMPLES.value)
    if samples is None:
        return res
    s = to_tensor(samples, "samples")
    check_probabilities(s, "samples", channel_dim=2, min_ndim=4)
    shape = tuple(to_tensor(pred, "pred").shape)
    if tuple(s.shape[1:]) != shape:  # found by hostile testing: another case's samples were scored silently
        raise ValueError(f"samples must have shape (S, *pred.shape) = (S, {shape}), got {tuple(s.shape)}")
    if s.shape[0] < 2:
        warnings.warn("quality_estimates: a single sample agrees with itself; the sample-agreement estimates "
                      "(pairwise_dice, dice_to_mean, sample_iou, volume_cv) carry no information and are left out",
                      UserWarning, stacklevel=user_stacklevel())
        return res
    for name, q in (("pairwise_dice", pairwise_dice(s, empty_score=empty_score, validate=False, **kw)),
                    ("dice_to_mean", dice_to_mean(s, empty_score=empty_score, validate=False, **kw)),
                    ("sample_iou", sample_iou(s, empty_score=empty_score, validate=False, **kw)),
                    ("volume_cv", volume_cv(s, validate=False, **kw))):
        res[name] = QualityScores(like_input(q.foreground, pred), like_input(q.per_class, pred))  # pred's library
    return res


def _region_quality(output: Mapping[str, Any], empty_score: float, soft_only: bool) -> dict[str, QualityScores]:
    """:func:`quality_estimates` of a multi-label output: every region a two-class problem, then stacked."""
    pred = to_tensor(output[K.PRED.value], "pred")
    if pred.ndim < 3 or not pred.is_floating_point():
        raise ValueError(f"pred must be region probabilities (B, R, *spatial), got shape {tuple(pred.shape)}")
    if pred.numel() == 0 or not bool(((pred >= 0) & (pred <= 1)).all()):
        raise ValueError("pred must hold region probabilities in [0, 1] (sigmoid outputs) and not be empty")
    samples = output.get(K.SAMPLES.value)
    s = None if samples is None else to_tensor(samples, "samples")
    if s is not None and (s.ndim != pred.ndim + 1 or tuple(s.shape[1:]) != tuple(pred.shape)):
        raise ValueError(f"samples must have shape (S, *pred.shape) = (S, {tuple(pred.shape)}), got {tuple(s.shape)}")
    per_region: list[dict[str, QualityScores]] = []
    for r in range(pred.shape[1]):
        p = pred[:, r : r + 1]
        binary: dict[str, Any] = {K.PRED.value: torch.cat([1 - p, p], dim=1)}
        if s is not None:
            q = s[:, :, r : r + 1]
            binary[K.SAMPLES.value] = torch.cat([1 - q, q], dim=2)
        per_region.append(_class_quality(binary, False, empty_score, soft_only))
    out: dict[str, QualityScores] = {}
    for name in per_region[0]:
        # the expected Dice of a region is its class 1's (sums of p_r itself): the binary's foreground sums 1 - p_r
        # as built above, which a float16 map rounds to 1 where p_r < 2^-12 (its probability lost from the soft
        # Dice's denominator: 0.947 for 0.857); the former estimate (soft_only) keeps the values rules recorded
        which = "per_class" if name == "expected_dice" and not soft_only else "foreground"
        cols = torch.stack([to_tensor(getattr(res[name], which), name).reshape(-1).to(torch.float64)
                            for res in per_region], dim=1)
        # a row NaN in every region gives NaN without a warning (torch's nanmean warns nothing: in earlier versions a
        # process-wide filter ignored a RuntimeWarning here that never came)
        combined = torch.nanmean(cols, dim=1)
        out[name] = QualityScores(like_input(combined, output[K.PRED.value]), like_input(cols, output[K.PRED.value]))
    return out


def case_expected_dice(probs: np.ndarray, multilabel: bool, estimate: str | None = None) -> QualityScores:
    """The label-free expected Dice of one case, as ``evaluate`` and ``triage`` both compute it.

    One function for both, so that the calibration cases' estimates (recorded in the referral rule for the
    expected-Dice interval) are computed exactly as the new cases', and the per-class / per-region values are those of
    :func:`expected_dice` and :func:`quality_estimates` (one formula, :func:`expected_dice`'s). ``foreground`` is the
    case's estimate (the ``expected_dice`` column), ``per_class`` the estimate of each foreground class or region
    (``expected_dice_<class>`` of ``triage.csv``). ``estimate`` says which (:data:`~monai_unc.keys.
    EXPECTED_DICE_ESTIMATES`; the default is what ``evaluate`` computes):

    - ``"class_mean"`` (classes): the quantity of the case's ``dice``
      (:func:`~monai_unc.evaluation.rows.case_dice`), the mean over the foreground classes ``c = 1 .. C-1`` of
      :func:`expected_dice`'s ``q_c``. A class the segmentation ``R = argmax_c p`` holds has ``q_c = 2 sum_x p_c
      [R = c] / (sum_x p_c + |R = c|)``. A class it does not hold has ``q_c = prod_x (1 - p_c(x))``:
      :func:`~monai_unc.evaluation.rows.class_dice` scores such a class 1 when the reference holds none of it
      either and 0 otherwise, so its expected Dice is the probability that the reference holds no voxel of it, which
      is that product under the model of the soft Dice above (each voxel's label drawn from ``p`` on its own). It
      is 1 for a class the model gives no probability anywhere, close to 1 when the class's expected volume
      ``sum_x p_c`` is far below one voxel, and about ``exp(-sum_x p_c)``, near 0, for a structure the segmentation
      missed but the model gives a few voxels' worth of probability: a missed structure is never reported as a good
      case.
    - ``"merged_foreground"`` (classes): the soft Dice of every foreground class as one mask (``1 - p_0`` against
      ``R > 0``), and of each class, 0 for a mask the segmentation does not hold as soon as it has any probability:
      what ``evaluate`` wrote before, and what referral rules certified before the rule recorded its estimate hold
      (triage computes it for their new cases). With two classes it is ``class_mean`` unless the segmentation is
      empty (then 0 as soon as the model gives the foreground any probability).
    - ``"region_mean"`` (regions, ``multilabel``): the quantity of the case's ``dice``, the mean over the regions
      ``r`` of :func:`quality_estimates`' ``q_r`` (``multilabel=True``): a region the segmentation ``p_r > 0.5``
      holds has the binary expected Dice ``q_r = 2 sum_x p_r [p_r > 0.5] / (sum_x p_r + |p_r > 0.5|)``, a region it
      does not hold ``q_r = prod_x (1 - p_r(x))``, as a class above.
    - ``"region_mean_soft"`` (regions, :data:`~monai_unc.keys.LEGACY_REGION_ESTIMATE`): the mean of each region's
      soft Dice, 0 for a region the segmentation does not hold as soon as it has any probability: what ``evaluate``
      wrote before, and what region-based referral rules certified before ``format_version`` 5 hold (triage
      computes it for their new cases).

    The two former estimates are reached only here, by the estimate kind such a rule derives; they are not the
    expected Dice of anything (a missed structure reads as 0, a structure absent from case and segmentation alike
    as 0 when the model gives it the least probability).

    Args:
        probs: the case's probabilities ``(C, *spatial)`` (softmax) or ``(R, *spatial)`` (sigmoid regions), not
            checked here (:func:`~monai_unc.io.load_case` checks them); NaN gives NaN with a ``UserWarning`` for
            classes, and is refused (``ValueError``) for regions, whose maps are checked as probabilities.
        multilabel: whether they are region probabilities.
        estimate: ``"class_mean"`` or ``"merged_foreground"`` for classes, ``"region_mean"`` or
            ``"region_mean_soft"`` for regions; None: the first of these for the kind of ``probs``.

    Returns:
        :class:`QualityScores` of the case (batch of one): ``foreground`` ``(1,)``, ``per_class`` ``(1, K)``,
        float64 NumPy arrays.

    Raises:
        ValueError: ``estimate`` is not one for the kind of ``probs``.

    Example:
        >>> p = np.zeros((3, 4, 4), np.float32); p[1, :2] = 0.9; p[2, :2] = 0.05; p[0] = 1 - p[1] - p[2]
        >>> q = case_expected_dice(p, False)  # class 2 is not segmented: prod (1 - p_2) = 0.95 ** 8
        >>> [round(float(v), 4) for v in q.per_class[0]], round(float(q.foreground[0]), 4)
        ([0.9474, 0.6634], 0.8054)
        >>> round(float(case_expected_dice(p, False, "merged_foreground").foreground[0]), 4)
        0.9744
        >>> r = np.zeros((2, 4, 4), np.float32); r[0, :2] = 0.9; r[1, :2] = 0.3  # region 1 is not segmented
        >>> [round(float(v), 4) for v in case_expected_dice(r, True).per_class[0]]  # prod (1 - p_1) = 0.7 ** 8
        [0.9474, 0.0576]
        >>> [round(float(v), 4) for v in case_expected_dice(r, True, "region_mean_soft").per_class[0]]
        [0.9474, 0.0]
    """
    multilabel = check_bool(multilabel, "multilabel")
    allowed = ("region_mean", LEGACY_REGION_ESTIMATE) if multilabel else ("class_mean", "merged_foreground")
    estimate = allowed[0] if estimate is None else estimate
    if estimate not in allowed:
        raise ValueError(f"estimate must be one of {allowed} for {'region' if multilabel else 'class'} "
                         f"probabilities, got {estimate!r}"[:300])
    arr = np.asarray(probs)
    soft_only = estimate in ("merged_foreground", LEGACY_REGION_ESTIMATE)
    if multilabel:
        q = _region_quality({K.PRED.value: arr[None]}, 1.0, soft_only)["expected_dice"]
        return QualityScores(np.asarray(q.foreground, np.float64), np.asarray(q.per_class, np.float64))
    q = _expected_dice(arr[None], False, 1.0, False, soft_only)
    per = np.asarray(q.per_class, np.float64)
    if soft_only:
        return QualityScores(np.asarray(q.foreground, np.float64), per)
    return QualityScores(per.mean(axis=1), per)


# ---------------------------------------------------------------------------------------------- streaming


class StreamingQuality:
    """One-sample-at-a-time quality estimates (memory independent of the number of samples).

    Keeps per-sample volumes, a running AND / OR of the per-voxel class bit ``1 << A_s`` and a running AND of
    the foreground, and, if ``reference`` is given, per-sample intersections with it (module docstring).
    ``volume_cv``, ``sample_iou`` and ``dice_to_reference`` equal the batch functions on the kept samples
    (``dice_to_reference`` equals :func:`dice_to_mean` when ``reference`` is the argmax of the samples' mean).
    Typical use: ``acc.update(torch.softmax(net(x), 1))`` once per MC-dropout pass.

    Args:
        reference: optional label map ``(B, *spatial)`` or ``(B, 1, *spatial)``, fixed before the samples.
        include_background: report class 0 in ``per_class``.
        empty_score: value of a comparison of two empty masks.
        validate: check every update is a probability map.

    Example:
        >>> from monai_unc.metrics import StreamingQuality, sample_iou
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> logits = 3 * torch.randn(1, 2, 3, 4, 4, 4)  # one logit map: 2 cases, 3 classes
        >>> samples = torch.softmax(logits + torch.randn(4, 2, 3, 4, 4, 4), dim=2)  # 4 noisy samples
        >>> acc = StreamingQuality(reference=samples.mean(0).argmax(1))
        >>> for p in samples:
        ...     _ = acc.update(p)
        >>> acc.num_samples, acc.volumes().shape
        (4, torch.Size([4, 2, 4]))
        >>> acc.sample_iou().foreground.round(decimals=4), sample_iou(samples).foreground.round(decimals=4)
        (tensor([0.5745, 0.6471], dtype=torch.float64), tensor([0.5745, 0.6471], dtype=torch.float64))
        >>> acc.volume_cv().foreground.round(decimals=4), acc.dice_to_reference().foreground.round(decimals=4)
        (tensor([0.0427, 0.0203], dtype=torch.float64), tensor([0.9187, 0.9276], dtype=torch.float64))
    """

    def __init__(
        self,
        reference: ArrayLike | None = None,
        include_background: bool = False,
        empty_score: float = 1.0,
        validate: bool = True,
    ) -> None:
        self._reference_in = reference
        self.include_background = check_bool(include_background, "include_background")
        self.empty_score = check_empty_score(empty_score)
        self.validate = check_bool(validate, "validate")
        self.num_classes: int | None = None
        self._like: Any = None
        self._shape: tuple[int, ...] | None = None
        self._ref: torch.Tensor | None = None
        self._volumes: list[torch.Tensor] = []
        self._soft: list[torch.Tensor] = []
        self._inter: list[torch.Tensor] = []
        self._and: torch.Tensor | None = None
        self._or: torch.Tensor | None = None
        self._fg_and: torch.Tensor | None = None
        self._fg_or: torch.Tensor | None = None

    @property
    def num_samples(self) -> int:
        """Number of samples added so far."""
        return len(self._volumes)

    def update(self, probs: ArrayLike) -> StreamingQuality:
        """Add one sample ``(B, C, *spatial)`` of probabilities.

        Args:
            probs: ``(B, C, *spatial)`` probabilities of one sample.

        Returns:
            ``self``, for chaining.
        """
        p = _probs(probs, self.validate)
        b, c = p.shape[:2]
        if self._shape is None:
            if c > 63:
                raise ValueError(f"probs has {c} classes; StreamingQuality supports at most 63 (one bit each)")
            # the reference is checked before any state is set: a refused first sample leaves the accumulator empty
            # (found by hostile testing: after a reference of the wrong shape was refused, the next samples were
            # taken without it and dice_to_reference said no reference had been passed)
            if self._reference_in is not None:
                self._ref = _reference(self._reference_in, (b, *p.shape[2:]), c, p.device).reshape(b, -1)
            self._shape, self.num_classes = tuple(p.shape), c
            # remember only the library of the input (not the array): results follow it
            self._like = np.empty(0) if isinstance(probs, np.ndarray) else torch.empty(0)
        elif tuple(p.shape) != self._shape:
            raise ValueError(f"probs shape {tuple(p.shape)} does not match earlier samples {self._shape}")
        flat = p.reshape(b, c, -1)
        seg = _argmax(flat, 1)  # (B, N)
        self._volumes.append(_volumes(flat, soft=False))
        self._soft.append(_volumes(flat, soft=True))
        # bit c of a per-voxel integer: the narrowest integer type with C bits
        bit_dtype = next(d for n, d in ((8, torch.uint8), (15, torch.int16), (31, torch.int32), (63, torch.int64))
                         if c <= n)
        bits = torch.ones(seg.shape, dtype=bit_dtype, device=seg.device) << seg.to(bit_dtype)
        fg = seg > 0
        if self._and is None:
            self._and, self._or, self._fg_and, self._fg_or = bits, bits.clone(), fg, fg.clone()
        else:
            self._and &= bits
            self._or |= bits
            self._fg_and &= fg
            self._fg_or |= fg
        if self._ref is not None:
            d = _dice_to(seg.unsqueeze(0), self._ref, c, self.empty_score, "StreamingQuality")[0]
            self._inter.append(d)
        return self

    def _require(self) -> None:
        if not self._volumes:
            raise ValueError("StreamingQuality is empty: call update() with at least one sample first")

    def _out(self, values: torch.Tensor) -> QualityScores:
        return _split(values, _classes(self.num_classes, self.include_background), self._like)

    def volume_cv(self, soft: bool = False, ddof: int = 0) -> QualityScores:
        """CV of the per-sample volumes; equals :func:`volume_cv` on the kept samples.

        Args:
            soft: use the summed probabilities as volumes.
            ddof: delta degrees of freedom of the standard deviation, an integer ``>= 0``.

        Returns:
            :class:`QualityScores`.

        Raises:
            ValueError: ``ddof`` is not an integer ``>= 0``.
        """
        self._require()
        if ddof == 0:
            _warn_single_sample(self.num_samples, "StreamingQuality.volume_cv")
        vol = torch.stack(self._soft if check_bool(soft, "soft") else self._volumes)
        return self._out(_cv(vol, ddof, "StreamingQuality.volume_cv"))

    def sample_iou(self) -> QualityScores:
        """IoU of the sample segmentations; equals :func:`sample_iou` on the kept samples.

        Returns:
            :class:`QualityScores`.
        """
        self._require()
        _warn_single_sample(self.num_samples, "StreamingQuality.sample_iou")
        c = self.num_classes
        inter = torch.stack([((self._and >> k) & 1).sum(dim=-1) for k in range(c)] + [self._fg_and.sum(-1)], -1)
        union = torch.stack([((self._or >> k) & 1).sum(dim=-1) for k in range(c)] + [self._fg_or.sum(-1)], -1)
        return self._out(overlap_ratio(inter, union, self.empty_score, caller="StreamingQuality.sample_iou"))

    def dice_to_reference(self) -> QualityScores:
        """Mean over samples of the Dice against ``reference`` (needs ``reference`` at construction).

        Returns:
            :class:`QualityScores`.
        """
        self._require()
        if self._ref is None:
            raise ValueError("dice_to_reference needs a reference label map passed to StreamingQuality(reference=)")
        return self._out(torch.stack(self._inter).mean(dim=0))

    def volumes(self, soft: bool = False) -> ArrayLike:
        """Per-sample volumes in voxels ``(S, B, C + 1)`` (last column: foreground).

        Args:
            soft: summed probabilities instead of argmax voxel counts.

        Returns:
            int64 counts (float64 if ``soft``), ``(S, B, C + 1)``.
        """
        self._require()
        return like_input(torch.stack(self._soft if check_bool(soft, "soft") else self._volumes), self._like)


# ----------------------------------------------------------------------------------------------------------------
# split-conformal interval of an estimate (module docstring)
# ----------------------------------------------------------------------------------------------------------------
class ConformalInterval(NamedTuple):
    """Split-conformal intervals ``[low, high]`` of estimates (:func:`conformal_interval`).

    Attributes:
        low: lower ends, ``max(estimate - quantile, lower)`` (NaN for an undefined estimate, or one beyond the bounds
            by more than ``quantile``), widened outward by a bound on the float rounding (:func:`conformal_interval`).
        high: upper ends, ``min(estimate + quantile, upper)`` (NaN where ``low`` is), widened likewise.
        quantile: the calibrated residual quantile ``q`` (``inf`` with too few calibration cases).
        n: the number of calibration pairs it came from (both values defined).
        alpha: the miscoverage: the intervals hold the truth with probability at least ``1 - alpha``.

    Example:
        >>> iv = conformal_interval([0.9], [0.9, 0.8, 0.7], [0.85, 0.8, 0.5], alpha=0.5)
        >>> iv.quantile, iv.n, iv.low.round(2).tolist(), iv.high.round(2).tolist()
        (0.05, 3, [0.85], [0.95])
    """

    low: np.ndarray
    high: np.ndarray
    quantile: float
    n: int
    alpha: float


def _check_alpha(alpha: Any) -> float:
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, (int, float, np.integer, np.floating)) or not (
        0 < alpha < 1
    ):  # numpy scalars (np.float32(0.1) from an array) are numbers too
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    return float(alpha)


def _check_bounds(bounds: Any) -> tuple[float, float]:
    """``bounds`` as two finite floats ``lower < upper`` (ValueError naming it otherwise)."""
    try:
        if isinstance(bounds, (str, bytes)) or any(isinstance(v, (bool, np.bool_)) for v in bounds):
            raise TypeError  # (False, True) was the bounds (0, 1) (found by hostile review 59)
        lo, hi = (float(v) for v in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"bounds must be two numbers (lower, upper), got {bounds!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"bounds must be finite with lower < upper, got {bounds!r}")
    return lo, hi


def _host(x: Any, name: str) -> Any:
    """A torch tensor (any device, requiring grad or bfloat16) as a numpy array; else ``x`` as is.

    The estimates of this module are tensors on the input's device (:func:`expected_dice` of CUDA probabilities);
    ``numpy.asarray`` refuses a CUDA tensor ("can't convert cuda:0 device type tensor to numpy"; found by the review
    of the GPU paths).
    """
    return to_numpy(x, name) if isinstance(x, torch.Tensor) else x


def _real_values(x: Any, name: str) -> np.ndarray:
    """``x`` (:func:`_host`) as a float64 array; ``TypeError`` naming ``name`` for complex values or text.

    The cast dropped the imaginary part of a complex value with only numpy's ``ComplexWarning`` and parsed strings
    (found by hostile testing); ``None`` in a list still reads as NaN (undefined), as before.
    """
    return real_array(np.asarray(_host(x, name)), name, " (NaN for an undefined one)")


def conformal_quantile(estimates: ArrayLike, truths: ArrayLike, alpha: float = CONFORMAL_ALPHA) -> tuple[float, int]:
    """The split-conformal quantile of the absolute residuals ``|truth - estimate|`` of calibration cases.

    ``q`` is the ``k``-th smallest of the ``n`` residuals, ``k = ceil((n + 1)(1 - alpha))``; with ``k > n`` (fewer
    than ``1 / alpha - 1`` cases) no finite value has the guarantee and ``q = inf`` (a ``UserWarning`` says so).
    Pairs with an undefined (NaN) estimate or truth are left out (``n`` counts the rest). Ties need no care: the
    guarantee ``P(|truth - estimate| <= q) >= 1 - alpha`` holds with ties too (only the upper bound
    ``1 - alpha + 1 / (n + 1)`` needs distinct residuals).

    Args:
        estimates: ``(n,)`` label-free estimates of the calibration cases (e.g. :func:`expected_dice`).
        truths: ``(n,)`` their real values (e.g. the Dice against the labels), of the same cases in the same order
            (paired by position: when both are pandas ``Series`` their indexes must agree, which is checked, not used
            to align).
        alpha: the miscoverage, in (0, 1).

    Returns:
        ``(q, n)``: the quantile (``inf`` with too few pairs) and the number of pairs used.

    Raises:
        ValueError: ``alpha`` outside (0, 1), the arrays differ in length, or hold an infinite value, or both are
            pandas ``Series`` with different indexes (other cases, or another order: align them first).
        TypeError: the arrays hold complex values or text.

    Example:
        >>> conformal_quantile([0.9, 0.8, 0.7, 0.9], [0.8, 0.8, 0.5, 0.95], alpha=0.4)
        (0.1, 4)
    """
    return conformal_quantile_core(estimates, truths, alpha, few_warning=True)


def conformal_quantile_core(estimates: ArrayLike, truths: ArrayLike, alpha: float = CONFORMAL_ALPHA, *,
                            few_warning: bool = True) -> tuple[float, int]:
    """:func:`conformal_quantile`, whose warning of too few calibration cases the caller may leave out.

    For the referral rule's recorded quantile and interval, whose statement says that the cases are too few (in earlier
    versions they silenced every ``UserWarning`` inside ``warnings.catch_warnings()``, a process-wide filter).

    Args:
        estimates: as :func:`conformal_quantile`.
        truths: as :func:`conformal_quantile`.
        alpha: as :func:`conformal_quantile`.
        few_warning: warn when the cases are too few for a finite quantile (``True``, at the user's call) or not.

    Returns:
        ``(q, n)``, as :func:`conformal_quantile`.

    Example:
        >>> from monai_unc.metrics.quality import conformal_quantile_core
        >>> conformal_quantile_core([0.9, 0.8], [0.8, 0.8], 0.1, few_warning=False)  # too few: inf, no warning
        (inf, 2)
    """
    few_warning = check_bool(few_warning, "few_warning")
    a = _check_alpha(alpha)
    # a Series' case ids would be ignored: a truths Series sorted otherwise paired the residuals of other cases
    check_case_labels([("estimates", estimates), ("truths", truths)])
    e = _real_values(estimates, "estimates").reshape(-1)
    t = _real_values(truths, "truths").reshape(-1)
    if e.shape != t.shape:
        raise ValueError(f"estimates and truths must have one entry per case, got {e.size} and {t.size}")
    for name, v in (("estimates", e), ("truths", t)):
        if np.isinf(v).any():  # not undefined (NaN) but broken: leaving the pair out would hide it
            raise ValueError(f"{name} hold {int(np.isinf(v).sum())} infinite value(s); use NaN for an undefined one")
    r = np.sort(np.abs(t - e)[np.isfinite(e) & np.isfinite(t)])
    n = int(r.size)
    k = quantile_rank(n, a)  # (n + 1)(1 - alpha) = 9.000000000000002 stays 9, 9.0000000007 is 10
    if k > n:
        if few_warning:
            warnings.warn(f"{n} calibration case(s) are too few for a {format_level(a, percent=True)} conformal "
                          f"interval (at least {quantile_min_cases(a)} needed): the interval is the whole range",
                          UserWarning, stacklevel=user_stacklevel())
        return float("inf"), n
    return float(r[max(k, 1) - 1]), n


def conformal_interval(
    estimate: ArrayLike,
    calibration_estimates: ArrayLike,
    calibration_truths: ArrayLike,
    alpha: float = CONFORMAL_ALPHA,
    bounds: tuple[float, float] = (0.0, 1.0),
) -> ConformalInterval:
    """Split-conformal intervals ``[estimate - q, estimate + q]`` (clipped to ``bounds``) of new cases' estimates.

    ``q`` is :func:`conformal_quantile` of the calibration pairs. For a new case exchangeable with the calibration
    cases, ``P(low <= truth <= high) >= 1 - alpha``, marginally over the calibration draw and the new case (module
    docstring; Lei et al. 2018). The ends are widened outward by ``2 eps (|estimate| + q)`` (at most about
    ``1e-15`` for values in [0, 1]), a bound on the float rounding: every truth whose computed residual
    ``|truth - estimate|`` is at most ``q`` lies inside, also when it ties with ``q`` exactly (with Dice and
    estimates recorded in two decimals ``0.9 - (0.9 - 0.2)`` is ``0.20000000000000007``, and the unwidened interval
    missed such a tie). It is no statement about one given case and none about a case from a shifted
    distribution, which may fall outside. Clipping to ``bounds`` (the range of the truth) keeps the guarantee. An
    undefined (NaN) estimate gets a NaN interval, with a ``UserWarning``, and so does an estimate beyond ``bounds`` by
    more than ``q`` (no truth in the bounds lies within ``q`` of it: the conformal set is empty, and clipping would
    make it a point on the bound).

    Args:
        estimate: the new cases' estimates (a number or an array).
        calibration_estimates: ``(n,)`` the calibration cases' estimates, computed as for the new cases.
        calibration_truths: ``(n,)`` their real values, of the same cases in the same order (paired by position: when
            both are pandas ``Series`` their indexes must agree, which is checked, not used to align).
        alpha: the miscoverage, in (0, 1) (default 0.1: a 90 % interval).
        bounds: the range of the truth ``(lower, upper)``.

    Returns:
        :class:`ConformalInterval` (``low`` / ``high`` float64 arrays of the shape of ``estimate``).

    Raises:
        ValueError: as :func:`conformal_quantile` (the calibration arrays as pandas ``Series`` with different
            indexes included); ``bounds`` not two finite numbers ``lower < upper``; an infinite ``estimate``; a
            calibration truth outside ``bounds`` (e.g. a Dice in percent with the default bounds,
            which collapsed the interval onto the bound 1).
        TypeError: complex values or text in ``estimate`` or the calibration arrays.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> est = rng.uniform(0.7, 1.0, 50)
        >>> dice = np.clip(est - rng.normal(0.0, 0.05, 50), 0, 1)
        >>> iv = conformal_interval([0.93, 0.6], est, dice)
        >>> round(iv.quantile, 3), iv.low.round(3).tolist(), iv.high.round(3).tolist()
        (0.084, [0.846, 0.516], [1.0, 0.684])
    """
    return conformal_interval_core(estimate, calibration_estimates, calibration_truths, alpha, bounds)


def conformal_interval_core(
    estimate: ArrayLike,
    calibration_estimates: ArrayLike,
    calibration_truths: ArrayLike,
    alpha: float = CONFORMAL_ALPHA,
    bounds: tuple[float, float] = (0.0, 1.0),
    *,
    few_warning: bool = True,
    nan_warning: bool = True,
) -> ConformalInterval:
    """:func:`conformal_interval`, whose warnings of too few calibration cases or undefined estimates may be left out.

    For :meth:`monai_unc.evaluation.triage.ReferralRule.expected_dice_interval`, whose statement says that the
    calibration cases are too few and whose run names the cases of an undefined estimate once (earlier versions
    silenced every ``UserWarning`` of :func:`conformal_interval` inside ``warnings.catch_warnings()``, a process-wide
    filter). The warning of an estimate beyond ``bounds`` is given as ever.

    Args:
        estimate: as :func:`conformal_interval`.
        calibration_estimates: as :func:`conformal_interval`.
        calibration_truths: as :func:`conformal_interval`.
        alpha: as :func:`conformal_interval`.
        bounds: as :func:`conformal_interval`.
        few_warning: warn when the calibration cases are too few for a finite interval (``True``) or not.
        nan_warning: warn of undefined (NaN) estimates (``True``) or not.

    Returns:
        :class:`ConformalInterval`, as :func:`conformal_interval`.

    Raises:
        ValueError: as :func:`conformal_interval`.
        TypeError: as :func:`conformal_interval`; ``few_warning`` or ``nan_warning`` not a bool.

    Example:
        >>> from monai_unc.metrics.quality import conformal_interval_core
        >>> iv = conformal_interval_core([0.9, float("nan")], [0.9, 0.8], [0.85, 0.8], few_warning=False,
        ...                              nan_warning=False)  # two cases: the whole range, no warning
        >>> iv.low.tolist(), iv.high.tolist()
        ([0.0, nan], [1.0, nan])
    """
    few_warning = check_bool(few_warning, "few_warning")
    nan_warning = check_bool(nan_warning, "nan_warning")
    lo, hi = _check_bounds(bounds)
    check_case_labels([("calibration_estimates", calibration_estimates), ("calibration_truths", calibration_truths)])
    t = _real_values(calibration_truths, "calibration_truths")
    _real_values(calibration_estimates, "calibration_estimates")  # named here, not as conformal_quantile's "estimates"
    outside = np.isfinite(t) & ((t < lo) | (t > hi))  # NaN (undefined) is neither; inf: conformal_quantile
    if outside.any():  # e.g. Dice in percent with the default bounds: the interval would collapse onto a bound
        raise ValueError(f"calibration_truths hold {int(outside.sum())} value(s) outside bounds ({lo:g}, {hi:g}), the "
                         f"range of the truth (e.g. {float(t[outside].reshape(-1)[0])!r}); give the truths in the "
                         "bounds' units or pass bounds=")
    # the warnings name the user's call, of conformal_interval or of this function (a direct call's pointed one frame
    # above it before)
    q, n = conformal_quantile_core(calibration_estimates, calibration_truths, alpha, few_warning=few_warning)
    e = _real_values(estimate, "estimate")
    if np.isinf(e).any():
        raise ValueError(f"estimate holds {int(np.isinf(e).sum())} infinite value(s); an estimate is a number or NaN "
                         "(undefined)")
    if nan_warning and np.isnan(e).any():
        warnings.warn(f"{int(np.isnan(e).sum())} undefined estimate(s): their conformal interval is undefined (NaN)",
                      UserWarning, stacklevel=user_stacklevel())
    with np.errstate(invalid="ignore"):
        # widened outward by a bound on the rounding of the residuals and of e -/+ q: the guarantee is about the
        # residual |truth - e| <= q as computed, and fl(e - q) can lie above a truth whose residual ties with q
        # (0.9 - (0.9 - 0.2) = 0.20000000000000007 > 0.2: such ties are common with Dice and estimates recorded
        # in a few decimals). fl(|t - e|) <= q gives |t - e| <= q (1 + u) and fl(e -/+ q') is within
        # u (|e| + q') of e -/+ q' (u = 2^-53), so a margin of 2 eps (|e| + q) = 4 u (|e| + q) covers both.
        q_out = q + 2.0 * np.finfo(np.float64).eps * (np.abs(e) + q)
        # beyond the bounds by more than q no truth is within q of the estimate: the conformal set is empty, and
        # clipping made it a point on the bound (an estimate in percent, 85 with bounds (0, 1), read as "the Dice is
        # certainly 1"; found by hostile review 60)
        empty = (e - q_out > hi) | (e + q_out < lo)
        undefined = np.isnan(e) | empty
        low = np.where(undefined, np.nan, np.clip(e - q_out, lo, hi))
        high = np.where(undefined, np.nan, np.clip(e + q_out, lo, hi))
    if empty.any():
        warnings.warn(f"{int(empty.sum())} estimate(s) lie outside bounds ({lo:g}, {hi:g}) by more than the quantile "
                      f"{q:.4g}: no truth in the bounds is within it (an estimate in other units than the truths?); "
                      "their conformal interval is undefined (NaN)", UserWarning, stacklevel=user_stacklevel())
    return ConformalInterval(low, high, q, n, float(alpha))
