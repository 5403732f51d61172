"""Voxel-wise discrimination metrics of an uncertainty map against the error map (Zeevi et al., Sec. 2).

Uncertainty is read as a detector of segmentation errors: ``u(x)`` (larger = less confident) should be
high where ``e(x) = [pred(x) != target(x)] = 1``. These are the voxel-wise baselines that Zeevi et al. (Zeevi
et al., Table 1) compares its spatial metrics with; they ignore where the voxels are.

- ``error_auroc``: area under the ROC curve of ``u`` as a score for ``e`` (Hendrycks & Gimpel 2017), the
  Mann-Whitney probability ``P(u_err > u_ok) + P(u_err = u_ok) / 2``. Ties count one half. :func:`auroc` is the
  same computation for any two groups of scores, the package's one AUROC (also behind
  :func:`monai_unc.metrics.casewise.ood_auroc`).
- ``error_auprc``: average precision of ``u`` for ``e`` (the step-wise area of scikit-learn's
  ``average_precision_score``): ``AP = sum_t (R_t - R_{t+}) P_t`` over the distinct uncertainty values ``t``.
- Thresholded counts with ``uncertain = u > threshold`` and ``certain = u <= threshold``, compared on the stored
  value in every dtype (a float32 map's 0.30000001, float32 0.3, is above ``threshold=0.3``, as in float64):
  ``n_ac`` (accurate & certain), ``n_au``, ``n_ic``, ``n_iu`` (inaccurate & uncertain);
  ``avu = (n_ac + n_iu) / n`` (Krishnan & Tickoo 2020), ``correct_certain_ratio = n_ac / (n_ac + n_ic)``
  = p(accurate | certain) and ``uncertain_incorrect_ratio = n_iu / (n_ic + n_iu)`` = p(uncertain | inaccurate)
  (Mukhoti & Gal 2018, used by Mobiny et al. 2021 under these names).
- ``pavpu``: the same on non-overlapping ``window``-sized patches (Mukhoti & Gal 2018): a patch is accurate
  when its accuracy (the fraction of correct voxels) is ``>= accuracy_threshold`` (0.5) and uncertain when its mean
  uncertainty is ``> threshold`` (the exact mean of the stored values: a constant patch at the threshold is
  certain); incomplete patches at the far end of an axis are dropped (as in the reference code).
- ``voxel_accuracy``: ``1 - mean |u - e|``, the expected accuracy of a detector that flags each voxel as an
  error with probability ``u(x)`` (Zeevi et al. lists "VOXEL_ACC" without a formula; this is our reading, and it
  needs ``u`` in [0, 1]). ``avu`` is its thresholded counterpart.
- ``au_arc``: area under the accuracy-rejection curve (Nadeem et al. 2009): the most uncertain voxels are
  rejected first, tied voxels together, and the accuracy of the kept voxels is integrated over the rejected
  fraction in [0, 1]. With 0/1 risk this is exactly ``1 - aurc`` of :mod:`monai_unc.metrics.selective`, which
  computes it (one implementation of the curve).

Shapes and ``per_case`` (as in :mod:`monai_unc.metrics.calibration`): with ``per_case=True`` ``uncertainty`` is
``(B, 1, *spatial)`` and the result is always a ``(B,)`` float64 array, one value per case (numpy for numpy
input, a torch tensor on the input's device for torch input); with ``per_case=False`` every voxel of the input
(any shape; ``pavpu``: a 2D or 3D map, or the patches of every case of a batch) is pooled into one float.
``per_case=None`` (the default for one release) chooses by shape: per case for ``(B, 1, *spatial)``, which is
deprecated (``DeprecationWarning``; the default becomes ``per_case=False``), pooled otherwise. ``error`` has the
shape of ``uncertainty`` (or ``(B, *spatial)``) and holds 0/1 (bool, integer or float). UCE lives in
:mod:`monai_unc.metrics.calibration`.

Degenerate inputs (no error, or no correct voxel, for AUROC / AUPRC / the ratios; no complete patch) give
NaN with a ``UserWarning``. AUROC and AUPRC sort each case once: the uncertainties of the erroneous and of the
correct voxels are copied into two arrays and sorted in place (one sorted copy of the data in total, in the
input's float precision), and everything else is integer counting with ``searchsorted`` (exact int64 sums).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from .._utils import (
    ArrayLike,
    exceeds,
    is_int,
    probability_tolerance,
    said_once_per_call,
    to_numpy,
    warn_nan,
    warn_tied,
)
from .selective import aurc_of, ranked_risk

__all__ = [
    "auroc",
    "error_auroc",
    "error_auprc",
    "avu",
    "pavpu",
    "correct_certain_ratio",
    "uncertain_incorrect_ratio",
    "voxel_accuracy",
    "au_arc",
]


# --------------------------------------------------------------------------------------------------------
# input handling
# --------------------------------------------------------------------------------------------------------


def _float_array(x: Any, name: str, allow_empty: bool = False) -> np.ndarray:
    a = to_numpy(x, name)
    if a.dtype == bool or np.issubdtype(a.dtype, np.integer):
        a = a.astype(np.float64)
    elif not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"{name} must hold numbers, got dtype {a.dtype}")
    if a.size == 0:
        if allow_empty:
            return a
        raise ValueError(f"{name} is empty (shape {a.shape})")
    # the sum is a quick test that overflows for huge finite values (1e308 + 1e308): its overflow is no finding (it
    # warned "overflow encountered in reduce" on valid input; found by hostile testing), the element test decides
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.sum(a, dtype=np.float64))
    if not math.isfinite(total) and not np.isfinite(a).all():
        raise ValueError(f"{name} contains {int((~np.isfinite(a)).sum())} non-finite value(s) (NaN or inf)")
    return a


def _binary_array(x: Any, name: str) -> np.ndarray:
    a = to_numpy(x, name)
    if a.dtype == bool:
        return a
    if not np.issubdtype(a.dtype, np.number):
        raise TypeError(f"{name} must be a 0/1 error map, got dtype {a.dtype}")
    b = a != 0
    if not np.array_equal(a, b):  # only 0 and 1 (NaN compares unequal, so it lands here too)
        raise ValueError(f"{name} must be a binary error map holding only 0 and 1")
    return b


def _cases(
    uncertainty: Any, error: Any, per_case: bool | None, caller: str, keep_spatial: bool = False, stacklevel: int = 4
) -> tuple[list[tuple[np.ndarray, np.ndarray]], bool]:
    """Per-case ``(u, e)`` pairs (flattened unless ``keep_spatial``) and whether the result is per case.

    ``per_case=True``: one pair per batch item of ``(B, 1, *spatial)``. ``per_case=False``: one pooled pair (one
    pair per case with ``keep_spatial``, for patch counts pooled by the caller). ``None``: per case for the
    ``(B, 1, *spatial)`` layout (deprecated: the result type then follows the input shape), pooled otherwise.
    """
    u = _float_array(uncertainty, "uncertainty")
    e = _binary_array(error, "error")
    batched = u.ndim in (4, 5) and u.shape[1] == 1
    if per_case is None:
        per_case = batched
        if batched:
            warnings.warn(
                f"{caller}: uncertainty of shape (B, 1, *spatial) without per_case gives one value per case; pass "
                "per_case=True for that ((B,) values for any input) or per_case=False for one value of the pooled "
                "voxels. The shape-dependent default is deprecated; it becomes per_case=False (pooled, as in the "
                "calibration metrics) in the next release",
                DeprecationWarning,
                stacklevel=stacklevel,
            )
    elif not isinstance(per_case, (bool, np.bool_)):
        raise TypeError(f"per_case must be True, False or None, got {per_case!r}")
    if batched:
        if e.shape == u.shape[:1] + u.shape[2:]:
            e = e[:, None]
        if e.shape != u.shape:
            raise ValueError(
                f"error must have the shape of uncertainty {u.shape} (or without the channel), got {e.shape}"
            )
    elif e.shape != u.shape:
        raise ValueError(f"error must have the shape of uncertainty {u.shape}, got {e.shape}")
    if per_case and not batched:
        raise ValueError(
            f"per_case=True needs uncertainty of shape (B, 1, *spatial) with 2 or 3 spatial axes, got {u.shape}"
        )
    if keep_spatial:
        if batched:
            return [(u[i, 0], e[i, 0]) for i in range(u.shape[0])], bool(per_case)
        if u.ndim not in (2, 3):
            raise ValueError(f"uncertainty must be (B, 1, *spatial) or a 2D/3D map for patches, got shape {u.shape}")
        return [(u, e)], False
    if per_case:
        return [(u[i].reshape(-1), e[i].reshape(-1)) for i in range(u.shape[0])], True
    return [(u.reshape(-1), e.reshape(-1))], False


def _output(values: list[float], uncertainty: Any) -> ArrayLike:
    """Per-case values as a ``(B,)`` float64 array in the library (and device) of ``uncertainty``."""
    out = np.asarray(values, dtype=np.float64)
    if isinstance(uncertainty, torch.Tensor):
        return torch.from_numpy(out).to(uncertainty.device)
    return out


def _per_case(
    fn: Callable[[np.ndarray, np.ndarray], float], uncertainty: Any, error: Any, per_case: bool | None, caller: str,
    stacklevel: int = 4,
) -> float | ArrayLike:
    """``fn`` of each case's ``(u, e)`` pair (:func:`_cases`).

    ``stacklevel`` points the warning of the deprecated default at the public function's caller (4: the caller of a
    public function that calls this one directly).
    """
    pairs, by_case = _cases(uncertainty, error, per_case, caller, stacklevel=stacklevel)
    # the warnings of the cases (an undefined case, a constant map) held and said once for the call, naming how many
    # cases, at the user's line (found by review 70: once per case; at a line of this module where a list
    # comprehension was a frame of its own)
    values = said_once_per_call(lambda: [fn(u, e) for u, e in pairs])
    return _output(values, uncertainty) if by_case else values[0]


def _check_threshold(threshold: float, name: str = "threshold") -> float:
    """``threshold`` as a finite float; ``TypeError`` naming ``name`` for a non-number (a string, bool, None)."""
    if isinstance(threshold, (str, bytes, bool, np.bool_)) or threshold is None:
        raise TypeError(f"{name} must be a number, got {type(threshold).__name__} {threshold!r}")
    try:
        t = float(threshold)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(threshold).__name__}") from None
    if not math.isfinite(t):
        raise ValueError(f"{name} must be a finite number, got {threshold}")
    return t


# --------------------------------------------------------------------------------------------------------
# rank metrics: one sort per case
# --------------------------------------------------------------------------------------------------------


def _sorted_split(u: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted uncertainties of the erroneous (``pos``) and correct (``neg``) voxels (copies sorted in place)."""
    pos = u[e]
    pos.sort()
    neg = u[~e]
    neg.sort()
    return pos, neg


#: what an AUROC is for scores all tied (:func:`~monai_unc._utils.warn_tied`)
_TIED_AUROC = "AUROC is the chance value 0.5"


def _warn_tied(pos: np.ndarray, neg: np.ndarray, caller: str, value: str, stacklevel: int) -> None:
    """:func:`~monai_unc._utils.warn_tied` of two sorted non-empty groups (their extremes, their total count)."""
    warn_tied(np.r_[pos[[0, -1]], neg[[0, -1]]], caller, value, stacklevel + 1, count=pos.size + neg.size)


def _mann_whitney(pos: np.ndarray, neg: np.ndarray) -> float:
    """``(sum_i #{neg < pos_i} + #{neg = pos_i} / 2) / (n_pos n_neg)`` for sorted non-empty ``pos`` and ``neg``.

    The one AUROC of the package (:func:`auroc`, :func:`error_auroc`, :func:`monai_unc.metrics.casewise.ood_auroc`):
    two ``searchsorted`` passes count, for every positive, the negatives strictly below and at-or-below it; their
    sum is twice the Mann-Whitney ``U`` (ties count one half), exact in int64, divided once in float64.
    """
    below = np.searchsorted(neg, pos, side="left").sum(dtype=np.int64)
    at_or_below = np.searchsorted(neg, pos, side="right").sum(dtype=np.int64)
    return float(below + at_or_below) / (2.0 * float(pos.size) * float(neg.size))


def auroc(positive: ArrayLike, negative: ArrayLike) -> float:
    """AUROC of scores ``positive`` against ``negative``: ``P(s_pos > s_neg) + P(s_pos = s_neg) / 2``.

    The Mann-Whitney probability that a positive scores higher than a negative, ties counting one half, equal to
    ``sklearn.metrics.roc_auc_score`` on the pooled scores with labels 1 / 0. 1 = every positive above every
    negative, 0.5 = chance.

    Args:
        positive: scores of the positive group (e.g. uncertainty of erroneous voxels, or of OoD cases), any shape.
        negative: scores of the negative group, any shape. Both finite.

    Returns:
        The AUROC as a float; NaN with a ``UserWarning`` when a group is empty; 0.5 with a ``UserWarning`` when every
        score is tied (they cannot rank the groups).

    Example:
        >>> from monai_unc.metrics.discrimination import auroc
        >>> auroc([0.9, 0.5, 0.4], [0.1, 0.4, 0.2])
        0.9444444444444444
    """
    pos = np.sort(_float_array(positive, "positive", allow_empty=True).reshape(-1))
    neg = np.sort(_float_array(negative, "negative", allow_empty=True).reshape(-1))
    if pos.size == 0 or neg.size == 0:
        return warn_nan(f"auroc: the {'positive' if pos.size == 0 else 'negative'} group is empty; AUROC is undefined")
    _warn_tied(pos, neg, "auroc", _TIED_AUROC, 3)  # found by review 61: 0.5 without a word
    return _mann_whitney(pos, neg)


def _auroc_case(u: np.ndarray, e: np.ndarray) -> float:
    pos, neg = _sorted_split(u, e)
    if pos.size == 0 or neg.size == 0:
        what = "no erroneous" if pos.size == 0 else "no correct"
        return warn_nan(f"error_auroc: the case has {what} voxel; AUROC is undefined", 5)
    _warn_tied(pos, neg, "error_auroc", _TIED_AUROC, 5)  # a constant map: 0.5 (found by review 61: without a word)
    return _mann_whitney(pos, neg)


def _auprc_case(u: np.ndarray, e: np.ndarray) -> float:
    pos, neg = _sorted_split(u, e)
    n_pos, n_neg = pos.size, neg.size
    if n_pos == 0 or n_neg == 0:
        # found by hostile testing: with no correct voxel the precision is 1 at every threshold, so any map, a
        # constant one too, scored a perfect AUPRC of 1 (scikit-learn's value), where the module notes promised NaN;
        # there is nothing to tell the errors from, as for the AUROC
        what = "no erroneous" if n_pos == 0 else "no correct"
        return warn_nan(f"error_auprc: the case has {what} voxel; AUPRC is undefined", 5)
    # a constant map: the error rate, the chance value (found by review 61: without a word)
    _warn_tied(pos, neg, "error_auprc", "the average precision is the error rate, the chance value", 5)
    starts = np.flatnonzero(np.r_[True, pos[1:] != pos[:-1]])  # first index of each distinct error value
    values = pos[starts]
    tp = n_pos - starts  # errors with u >= value
    fp = n_neg - np.searchsorted(neg, values, side="left")  # correct voxels with u >= value
    recall_step = np.diff(np.r_[tp, 0]) * -1  # errors entering exactly at this threshold
    precision = tp / (tp + fp)
    return float(np.sum(recall_step * precision) / n_pos)


def error_auroc(uncertainty: ArrayLike, error: ArrayLike, per_case: bool | None = None) -> float | ArrayLike:
    """AUROC of the uncertainty as a detector of segmentation errors (ties count 1/2); higher is better.

    ``AUROC = (sum_{e=1} #{e=0 : u < u_i} + #{e=0 : u = u_i} / 2) / (n_err * n_ok)``, equal to scikit-learn's
    ``roc_auc_score(e, u)`` (Hendrycks & Gimpel 2017: *A Baseline for Detecting Misclassified and
    Out-of-Distribution Examples in Neural Networks*). NaN with a warning when a case has no error or no correct
    voxel.

    Args:
        uncertainty: uncertainty map, larger = less confident: ``(B, 1, *spatial)`` with ``per_case=True``, any shape
            otherwise.
        error: 0/1 error map ``[pred != target]`` of the same shape (or ``(B, *spatial)``).
        per_case: ``True``: one value per case of ``(B, 1, *spatial)``; ``False``: every voxel pooled; ``None``
            (deprecated default): per case for ``(B, 1, *spatial)``, pooled otherwise.

    Returns:
        A float pooled; ``(B,)`` float64 per case (numpy for numpy input, torch on the input's device for torch
        input). NaN with a ``UserWarning`` where the metric is undefined.

    Example:
        >>> from monai_unc.metrics import error_auroc
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> error = (torch.rand(2, 1, 8, 8) < 0.2).float()
        >>> uncertainty = 0.3 * error + 0.7 * torch.rand(2, 1, 8, 8)
        >>> round(error_auroc(uncertainty, error, per_case=False), 4)
        0.8911
        >>> error_auroc(uncertainty, error, per_case=True).round(decimals=4)
        tensor([0.8529, 0.9329], dtype=torch.float64)
    """
    return _per_case(_auroc_case, uncertainty, error, per_case, "error_auroc")


def error_auprc(uncertainty: ArrayLike, error: ArrayLike, per_case: bool | None = None) -> float | ArrayLike:
    """Average precision of the uncertainty for the error map (scikit-learn's ``average_precision_score``).

    ``AP = sum_t (R_t - R_{t+}) P_t`` over the distinct uncertainty values ``t``. Higher is better; the chance level
    is the error rate. NaN with a warning when a case has no error or no correct voxel (scikit-learn gives 0 and 1
    there: the precision of an all-error case is 1 for any map, so 1 would call any map a perfect detector).

    Args:
        uncertainty: uncertainty map, larger = less confident: ``(B, 1, *spatial)`` with ``per_case=True``, any shape
            otherwise.
        error: 0/1 error map ``[pred != target]`` of the same shape (or ``(B, *spatial)``).
        per_case: ``True``: one value per case of ``(B, 1, *spatial)``; ``False``: every voxel pooled; ``None``
            (deprecated default): per case for ``(B, 1, *spatial)``, pooled otherwise.

    Returns:
        A float pooled; ``(B,)`` float64 per case (numpy for numpy input, torch on the input's device for torch
        input). NaN with a ``UserWarning`` where the metric is undefined.

    Example:
        >>> from monai_unc.metrics import error_auprc
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> error = (torch.rand(2, 1, 8, 8) < 0.2).float()
        >>> uncertainty = 0.3 * error + 0.7 * torch.rand(2, 1, 8, 8)
        >>> round(error_auprc(uncertainty, error, per_case=False), 4)
        0.7831
    """
    return _per_case(_auprc_case, uncertainty, error, per_case, "error_auprc")


# --------------------------------------------------------------------------------------------------------
# thresholded metrics
# --------------------------------------------------------------------------------------------------------


def _counts(u: np.ndarray, e: np.ndarray, threshold: float) -> tuple[int, int, int, int]:
    """(n_ac, n_au, n_ic, n_iu) with uncertain = u > threshold, compared exactly (``_utils.exceeds``)."""
    unc = exceeds(u, threshold, inclusive=False)
    n_iu = int(np.count_nonzero(unc & e))
    n_unc = int(np.count_nonzero(unc))
    n_err = int(np.count_nonzero(e))
    n_au = n_unc - n_iu
    n_ic = n_err - n_iu
    n_ac = u.size - n_iu - n_au - n_ic
    return n_ac, n_au, n_ic, n_iu


#: positions in the tuple of :func:`_counts`
_AC, _AU, _IC, _IU = range(4)


def _count_ratio(
    uncertainty: Any, error: Any, threshold: float, per_case: bool | None, caller: str, part: int, rest: int,
    undefined: str,
) -> float | ArrayLike:
    """``n_part / (n_part + n_rest)`` of the :func:`_counts` of each case (positions ``_AC`` .. ``_IU``).

    NaN with the warning ``f"{caller}: {undefined}"`` for a case where both counts are 0.
    """
    thr = _check_threshold(threshold)

    def case(u: np.ndarray, e: np.ndarray) -> float:
        counts = _counts(u, e, thr)
        n_part, n_rest = counts[part], counts[rest]
        if n_part + n_rest == 0:
            return warn_nan(f"{caller}: {undefined}", 6)
        return n_part / (n_part + n_rest)

    # one frame more than a public function calling _per_case (found by the upgrade review: the deprecation of the
    # shape-dependent per_case pointed into this module, where Python's default filters hide a DeprecationWarning)
    return _per_case(case, uncertainty, error, per_case, caller, stacklevel=5)


def avu(
    uncertainty: ArrayLike, error: ArrayLike, threshold: float = 0.5, per_case: bool | None = None
) -> float | ArrayLike:
    """Accuracy versus uncertainty (Krishnan & Tickoo 2020): ``(n_ac + n_iu) / n``; higher is better.

    ``n_ac`` counts accurate and certain voxels, ``n_iu`` inaccurate and uncertain ones (Krishnan, Tickoo:
    *Improving model calibration with accuracy versus uncertainty optimization*).

    Args:
        uncertainty: uncertainty map, larger = less confident: ``(B, 1, *spatial)`` with ``per_case=True``, any shape
            otherwise.
        error: 0/1 error map ``[pred != target]`` of the same shape (or ``(B, *spatial)``).
        threshold: a voxel is uncertain when ``u > threshold`` (use a normalised uncertainty for the default 0.5).
        per_case: ``True``: one value per case of ``(B, 1, *spatial)``; ``False``: every voxel pooled; ``None``
            (deprecated default): per case for ``(B, 1, *spatial)``, pooled otherwise.

    Returns:
        A float pooled; ``(B,)`` float64 per case (numpy for numpy input, torch on the input's device for torch
        input). NaN with a ``UserWarning`` where the metric is undefined.

    Example:
        >>> from monai_unc.metrics import avu
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> error = (torch.rand(2, 1, 8, 8) < 0.2).float()
        >>> uncertainty = 0.3 * error + 0.7 * torch.rand(2, 1, 8, 8)
        >>> round(avu(uncertainty, error, per_case=False), 4)
        0.7734
    """
    thr = _check_threshold(threshold)

    def case(u: np.ndarray, e: np.ndarray) -> float:
        n_ac, _, _, n_iu = _counts(u, e, thr)
        return (n_ac + n_iu) / u.size

    return _per_case(case, uncertainty, error, per_case, "avu")


def correct_certain_ratio(
    uncertainty: ArrayLike, error: ArrayLike, threshold: float = 0.5, per_case: bool | None = None
) -> float | ArrayLike:
    """p(accurate | certain) = ``n_ac / (n_ac + n_ic)`` (Mukhoti & Gal 2018; Mobiny et al. 2021).

    Higher is better; NaN with a warning when no voxel is certain (``u <= threshold``). Mukhoti, Gal: *Evaluating
    Bayesian Deep Learning Methods for Semantic Segmentation*.

    Args:
        uncertainty: uncertainty map, larger = less confident: ``(B, 1, *spatial)`` with ``per_case=True``, any shape
            otherwise.
        error: 0/1 error map ``[pred != target]`` of the same shape (or ``(B, *spatial)``).
        threshold: a voxel is uncertain when ``u > threshold`` (use a normalised uncertainty for the default 0.5).
        per_case: ``True``: one value per case of ``(B, 1, *spatial)``; ``False``: every voxel pooled; ``None``
            (deprecated default): per case for ``(B, 1, *spatial)``, pooled otherwise.

    Returns:
        A float pooled; ``(B,)`` float64 per case (numpy for numpy input, torch on the input's device for torch
        input). NaN with a ``UserWarning`` where the metric is undefined.

    Example:
        >>> from monai_unc.metrics import correct_certain_ratio
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> error = (torch.rand(2, 1, 8, 8) < 0.2).float()
        >>> uncertainty = 0.3 * error + 0.7 * torch.rand(2, 1, 8, 8)
        >>> round(correct_certain_ratio(uncertainty, error, per_case=False), 4)
        0.9277
    """
    return _count_ratio(
        uncertainty, error, threshold, per_case, "correct_certain_ratio", _AC, _IC,
        "no voxel is certain (u <= threshold); undefined",
    )  # fmt: skip


def uncertain_incorrect_ratio(
    uncertainty: ArrayLike, error: ArrayLike, threshold: float = 0.5, per_case: bool | None = None
) -> float | ArrayLike:
    """p(uncertain | inaccurate) = ``n_iu / (n_ic + n_iu)`` (Mukhoti & Gal 2018; Mobiny et al. 2021).

    Higher is better; NaN with a warning when the case has no error.

    Args:
        uncertainty: uncertainty map, larger = less confident: ``(B, 1, *spatial)`` with ``per_case=True``, any shape
            otherwise.
        error: 0/1 error map ``[pred != target]`` of the same shape (or ``(B, *spatial)``).
        threshold: a voxel is uncertain when ``u > threshold`` (use a normalised uncertainty for the default 0.5).
        per_case: ``True``: one value per case of ``(B, 1, *spatial)``; ``False``: every voxel pooled; ``None``
            (deprecated default): per case for ``(B, 1, *spatial)``, pooled otherwise.

    Returns:
        A float pooled; ``(B,)`` float64 per case (numpy for numpy input, torch on the input's device for torch
        input). NaN with a ``UserWarning`` where the metric is undefined.

    Example:
        >>> from monai_unc.metrics import uncertain_incorrect_ratio
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> error = (torch.rand(2, 1, 8, 8) < 0.2).float()
        >>> uncertainty = 0.3 * error + 0.7 * torch.rand(2, 1, 8, 8)
        >>> round(uncertain_incorrect_ratio(uncertainty, error, per_case=False), 4)
        0.7857
    """
    return _count_ratio(
        uncertainty, error, threshold, per_case, "uncertain_incorrect_ratio", _IU, _IC,
        "the case has no erroneous voxel; undefined",
    )  # fmt: skip


def _window(window: int | Sequence[int], ndim: int) -> tuple[int, ...]:
    """The patch size per axis; ``TypeError`` for anything but integers (a float, a bool, a string)."""
    if is_int(window):
        w = (int(window),) * ndim
    else:
        if not isinstance(window, (Sequence, np.ndarray)) or isinstance(window, (str, bytes)) \
                or not all(map(is_int, window)):
            raise TypeError(f"window must be an integer or a sequence of integers (voxels per axis), got {window!r}")
        w = tuple(int(v) for v in window)
        if len(w) != ndim:
            raise ValueError(f"window must have {ndim} values (one per spatial axis), got {len(w)}")
    if any(v < 1 for v in w):
        raise ValueError(f"window sizes must be positive integers, got {w}")
    return w


def _patch_means(x: np.ndarray, w: tuple[int, ...]) -> np.ndarray:
    """Means over the complete non-overlapping ``w``-sized patches of ``x`` (float64)."""
    n = tuple(s // k for s, k in zip(x.shape, w))
    crop = x[tuple(slice(0, m * k) for m, k in zip(n, w))]
    shape = [v for m, k in zip(n, w) for v in (m, k)]
    return crop.reshape(shape).mean(axis=tuple(range(1, 2 * len(w), 2)), dtype=np.float64)


#: relative distance (to the map's largest magnitude) within which a float64 patch mean may lie on the wrong side of the
#: threshold: a pairwise sum of n values is off by about log2(n) * 1.1e-16 of their magnitude, far below this
_PATCH_MEAN_RTOL = 1e-12


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's TwoSum, elementwise: ``s = fl(a + b)`` and ``err`` with ``a + b == s + err`` exactly (no overflow)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


#: sweeps of :func:`_sums_exceed` after which a patch is decided on rational arithmetic (none seen in practice: a few
#: sweeps reach the fixed point)
_MAX_SWEEPS = 64

#: at most this many rows, :func:`_sums_exceed` sums each row's exact terms with ``math.fsum`` instead of the
#: vectorised sweeps, whose Python loop runs over the terms (a 64^3 window, one row of 2^19 terms, took 5 s there;
#: ``fsum``, about 25 ns a term and row, is faster up to a few hundred rows whatever their length)
_FSUM_ROWS = 256


def _sums_exceed(values: np.ndarray, threshold: float) -> np.ndarray:
    """Whether the exact sum of each row of ``values`` exceeds ``threshold * (values per row)``, vectorised.

    Each row's terms ``v - threshold`` are split exactly into float64 pairs (:func:`_two_sum`; a longdouble value into
    its float64 part and remainder first) and swept with TwoSum (Rump, Ogita, Oishi: *Accurate floating-point
    summation*, VecSum) until a sweep changes no term. The sum is exact throughout, and at that fixed point every term
    is below half a unit in the last place of the next one, so the sign of the last term is the sign of the exact sum
    (0 when every term is 0). Up to :data:`_FSUM_ROWS` rows, each row's exact terms are summed with ``math.fsum``
    instead (Shewchuk's exact partials, correctly rounded: the sign of the exact sum, a nonzero exact sum of floats
    being at least the least subnormal). Rows whose terms overflow float64 (values near 1e308, a longdouble outside
    float64's range), or that do not settle within :data:`_MAX_SWEEPS` sweeps, are summed as fractions.

    Args:
        values: ``(rows, k)`` real numbers of any float dtype (the stored values, compared exactly).
        threshold: the float the row means are compared with.

    Returns:
        ``(rows,)`` bool: exact sum ``> threshold * k``.
    """
    rows, k = values.shape
    out = np.zeros(rows, dtype=bool)
    wide = values.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        parts = [wide]
        if values.dtype.itemsize > 8:  # longdouble: the remainder of its rounding to float64 (11 bits or fewer)
            parts.append((values - wide.astype(values.dtype)).astype(np.float64))
        exact = np.isfinite(parts[0]).all(axis=1)
        if len(parts) == 2:
            exact &= (parts[0].astype(values.dtype) + parts[1].astype(values.dtype) == values).all(axis=1)
        # v - threshold as hi + err (exact), term j's err then its hi, then the remainders: (m, rows), one contiguous
        # row per term
        hi, err = _two_sum(parts[0].T, np.full((1, rows), -threshold))
        t = np.empty((2 * k + (k if len(parts) == 2 else 0), rows))
        t[0:2 * k:2], t[1:2 * k:2] = err, hi
        if len(parts) == 2:
            t[2 * k:] = parts[1].T
        exact &= np.isfinite(t).all(axis=0)
        todo = np.flatnonzero(exact)
        t = np.ascontiguousarray(t[:, todo])
        if todo.size <= _FSUM_ROWS:
            for col, i in enumerate(todo):
                try:
                    out[i] = math.fsum(t[:, col].tolist()) > 0
                except OverflowError:  # an intermediate partial beyond float64
                    exact[i] = False
            todo = todo[:0]
        for _ in range(_MAX_SWEEPS):
            if not todo.size:
                break
            new = np.empty_like(t)
            p = t[0]
            for j in range(1, t.shape[0]):
                p, new[j - 1] = _two_sum(p, t[j])
            new[-1] = p
            ok = np.isfinite(new).all(axis=0)
            settled = ok & (new == t).all(axis=0)
            out[todo[settled]] = new[-1, settled] > 0
            exact[todo[~ok]] = False
            keep = ok & ~settled
            todo, t = todo[keep], new[:, keep]
        exact[todo] = False  # not settled
    if not exact.all():
        bound = Fraction(threshold) * k
        for i in np.flatnonzero(~exact):
            # as_integer_ratio: the exact value of every float dtype (Fraction refuses numpy's longdouble scalars,
            # which tolist() keeps; found by hostile testing)
            out[i] = sum(Fraction(*v.as_integer_ratio()) for v in values[i]) > bound
    return out


def _patch_uncertain(u: np.ndarray, w: tuple[int, ...], threshold: float) -> np.ndarray:
    """Whether the mean uncertainty of each complete ``w``-sized patch of ``u`` is ``> threshold``, on exact values.

    The float64 mean is rounded: ten voxels of 0.1 average to 0.10000000000000002, so a constant patch at the
    threshold read as uncertain while its voxels are certain. Patches whose mean lies within rounding of the threshold
    are decided on the exact sum of the stored values (:func:`_sums_exceed`, vectorised: a Python loop of rational
    sums over such patches took seconds for a 64^3 checkerboard at the threshold in earlier versions), as
    :func:`_counts` compares voxels.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # overflowing sums are decided exactly below
        means = _patch_means(u, w)
    out = means > threshold
    scale = max(abs(threshold), float(np.max(u)), -float(np.min(u)))
    # a float64 sum of n terms in any order is off by at most (n - 1) eps / 2 of the sum of their magnitudes, and
    # numpy sums a patch pairwise only along its contiguous axis: the rows of a (65536, 2, 2) window of 0.7 were added
    # one by one, their mean 1.7e-12 below the exact one (hostile review 69), beyond a fixed 1e-12 of the scale
    rtol = max(_PATCH_MEAN_RTOL, (math.prod(w) + 2) * float(np.finfo(np.float64).eps))
    # a float64 sum of finite values beyond float64 (1e308 + 1e308 - 1e308 ...) is inf or NaN whatever the exact mean
    # (hostile review 69: a patch whose exact mean is 0.7 / 12 read as uncertain): decided exactly too
    near = ~np.isfinite(means) | (np.abs(means - threshold) <= rtol * scale)
    if not near.any():
        return out
    n = tuple(s // k for s, k in zip(u.shape, w))
    patches = u[tuple(slice(0, m * k) for m, k in zip(n, w))].reshape([v for m, k in zip(n, w) for v in (m, k)])
    axes = tuple(range(1, 2 * len(w), 2))
    lo, hi = patches.min(axis=axes), patches.max(axis=axes)
    constant = near & (lo == hi)  # the mean is the stored value itself: compared as a voxel is
    out[constant] = exceeds(lo[constant], threshold, inclusive=False)
    mixed = near & ~constant
    if mixed.any():
        # the patch axes last: one row of values per patch
        rows = patches.transpose(tuple(range(0, 2 * len(w), 2)) + axes)[mixed]
        out[mixed] = _sums_exceed(rows.reshape(rows.shape[0], -1), threshold)
    return out


def pavpu(
    uncertainty: ArrayLike,
    error: ArrayLike,
    window: int | Sequence[int] = 4,
    threshold: float = 0.5,
    accuracy_threshold: float = 0.5,
    per_case: bool | None = None,
) -> float | ArrayLike:
    """Patch accuracy versus patch uncertainty, PAvPU (Mukhoti & Gal 2018); higher is better.

    The map is tiled into non-overlapping patches of ``window`` voxels per axis (complete patches only). A
    patch is accurate when ``1 - mean e >= accuracy_threshold`` and uncertain when ``mean u > threshold``;
    ``PAvPU = (n_ac + n_iu) / n_patches``. Zeevi et al. reports windows 5 and 11.

    Args:
        uncertainty: ``(B, 1, *spatial)`` or a 2D / 3D map.
        error: 0/1 error map of the same shape.
        window: patch size in voxels, scalar or per axis.
        threshold: patch uncertainty threshold.
        accuracy_threshold: patch accuracy threshold in [0, 1] (0.5 in the paper).
        per_case: as in the module docstring; pooled over a batch, the patches of every case are counted together.

    Returns:
        A float pooled; ``(B,)`` float64 per case (numpy for numpy input, torch on the input's device for torch
        input). NaN with a ``UserWarning`` where the metric is undefined.

    Example:
        >>> from monai_unc.metrics import pavpu
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> error = (torch.rand(2, 1, 8, 8) < 0.2).float()
        >>> uncertainty = 0.3 * error + 0.7 * torch.rand(2, 1, 8, 8)
        >>> pavpu(uncertainty, error, window=2, threshold=0.45, per_case=True)
        tensor([0.6250, 0.7500], dtype=torch.float64)
    """
    thr = _check_threshold(threshold)
    acc_thr = _check_threshold(accuracy_threshold, "accuracy_threshold")
    if not 0.0 <= acc_thr <= 1.0:
        # found by hostile testing: accuracy_threshold=50 (percent) made every patch inaccurate, silently, and PAvPU
        # became the fraction of uncertain patches
        raise ValueError(f"accuracy_threshold must be a patch accuracy in [0, 1], got {accuracy_threshold}")
    pairs, by_case = _cases(uncertainty, error, per_case, "pavpu", keep_spatial=True, stacklevel=3)
    hits, totals = [], []
    for u, e in pairs:
        w = _window(window, u.ndim)
        if any(s < k for s, k in zip(u.shape, w)):
            hits.append(0)
            totals.append(0)
            continue
        # the fraction of correct voxels, one rounding of an exact count: 1 - mean(e) rounds twice (1 - 9/10 < 0.1)
        accurate = _patch_means(~e, w) >= acc_thr
        # found by hostile testing: a constant map at the threshold (0.1, window 3) had every patch uncertain from the
        # rounding of the mean, and PAvPU of a correct, certain map was 0 instead of 1
        uncertain = _patch_uncertain(u, w, thr)
        hits.append(np.count_nonzero(accurate & ~uncertain) + np.count_nonzero(~accurate & uncertain))
        totals.append(accurate.size)
    if not by_case:
        hits, totals = [sum(hits)], [sum(totals)]

    def value(h: int, n: int) -> float:
        if n == 0:
            shape = pairs[0][0].shape
            w = _window(window, len(shape))
            return warn_nan(f"pavpu: the map {shape} is smaller than one window {w}; no complete patch")
        return float(h) / n

    # once for the call, naming how many cases, at the user's line (found by review 70: once per case)
    values = said_once_per_call(lambda: [value(h, n) for h, n in zip(hits, totals)])
    return _output(values, uncertainty) if by_case else values[0]


def voxel_accuracy(uncertainty: ArrayLike, error: ArrayLike, per_case: bool | None = None) -> float | ArrayLike:
    """``1 - mean |u - e|``: expected accuracy of flagging each voxel as an error with probability ``u``.

    Higher is better; needs ``u`` in [0, 1] (normalised entropy, ``1 - max p``, ...); values outside by at most the
    rounding tolerance of the map's dtype (:func:`monai_unc._utils.probability_tolerance`: 1e-3 for float32 / float64;
    the normalised entropy of a uniform float32 prediction is 1.0000002) are clipped to [0, 1]. See the module notes.

    Args:
        uncertainty: uncertainty map, larger = less confident: ``(B, 1, *spatial)`` with ``per_case=True``, any shape
            otherwise.
        error: 0/1 error map ``[pred != target]`` of the same shape (or ``(B, *spatial)``).
        per_case: ``True``: one value per case of ``(B, 1, *spatial)``; ``False``: every voxel pooled; ``None``
            (deprecated default): per case for ``(B, 1, *spatial)``, pooled otherwise.

    Returns:
        A float pooled; ``(B,)`` float64 per case (numpy for numpy input, torch on the input's device for torch
        input). NaN with a ``UserWarning`` where the metric is undefined.

    Example:
        >>> from monai_unc.metrics import voxel_accuracy
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> error = (torch.rand(2, 1, 8, 8) < 0.2).float()
        >>> uncertainty = 0.3 * error + 0.7 * torch.rand(2, 1, 8, 8)
        >>> round(voxel_accuracy(uncertainty, error, per_case=False), 4)
        0.6819
    """

    def case(u: np.ndarray, e: np.ndarray) -> float:
        u = np.clip(u, 0.0, 1.0)  # rounding within the tolerance checked below
        # |u - e| = u where correct, 1 - u where wrong
        s_ok = float(np.sum(u[~e], dtype=np.float64))
        s_err = float(np.count_nonzero(e)) - float(np.sum(u[e], dtype=np.float64))
        return 1.0 - (s_ok + s_err) / u.size

    pairs_u = _float_array(uncertainty, "uncertainty")
    lo, hi = float(pairs_u.min()), float(pairs_u.max())
    # rounding: entropy(probs, normalize=True) of a uniform float32 prediction came out 1.0000002 and was refused
    # (found by invariant testing); values within the map's dtype tolerance are clipped, as UCE's histogram does
    # the tolerance of the given dtype (a torch map's own: bfloat16 reaches numpy as float32; numpy's longdouble,
    # which torch cannot hold, was refused here where the other metrics of this module accept it)
    tol = probability_tolerance(uncertainty.dtype if isinstance(uncertainty, torch.Tensor) else pairs_u.dtype)
    if lo < -tol or hi > 1 + tol:
        raise ValueError(
            f"uncertainty must lie in [0, 1] for voxel_accuracy (tolerance {tol:g}), got values in [{lo:.4g}, {hi:.4g}]"
        )
    return _per_case(case, uncertainty, error, per_case, "voxel_accuracy")


def au_arc(uncertainty: ArrayLike, error: ArrayLike, per_case: bool | None = None) -> float | ArrayLike:
    """Area under the accuracy-rejection curve (Nadeem et al. 2009); higher is better, in [0, 1].

    Voxels are rejected from the most uncertain down (ties together); the accuracy of the kept voxels is
    integrated by the trapezoid rule over the rejected fraction, the curve ending at full rejection with the
    accuracy of the most certain group. Equal to ``1 - aurc(u, e)`` of :mod:`monai_unc.metrics.selective`
    (0/1 risk, the same curve), which is what is computed (Nadeem, Zucker, Hanczar: *Accuracy-Rejection Curves
    (ARCs) for Comparing Classification Methods with a Reject Option*).

    Args:
        uncertainty: uncertainty map, larger = less confident: ``(B, 1, *spatial)`` with ``per_case=True``, any shape
            otherwise.
        error: 0/1 error map ``[pred != target]`` of the same shape (or ``(B, *spatial)``).
        per_case: ``True``: one value per case of ``(B, 1, *spatial)``; ``False``: every voxel pooled; ``None``
            (deprecated default): per case for ``(B, 1, *spatial)``, pooled otherwise.

    Returns:
        A float pooled; ``(B,)`` float64 per case (numpy for numpy input, torch on the input's device for torch
        input). NaN with a ``UserWarning`` where the metric is undefined.

    Example:
        >>> from monai_unc.metrics import au_arc
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> error = (torch.rand(2, 1, 8, 8) < 0.2).float()
        >>> uncertainty = 0.3 * error + 0.7 * torch.rand(2, 1, 8, 8)
        >>> round(au_arc(uncertainty, error, per_case=False), 4)
        0.9463
    """
    return _per_case(_au_arc_case, uncertainty, error, per_case, "au_arc")


def _au_arc_case(u: np.ndarray, e: np.ndarray) -> float:
    """``1 - aurc(u, e)`` of one case; a constant map warns as ``au_arc`` (not as ``aurc``: its core does not warn)."""
    value = 1.0 - aurc_of(*ranked_risk(u, e.astype(np.float64)))
    warn_tied(u, "au_arc", "the curve is one point at the accuracy, the value of no ranking", 5)
    return value
