"""QU-BraTS: the uncertainty score of the BraTS 2020 uncertainty challenge, per binary region.

Mehta et al., "QU-BraTS: MICCAI BraTS 2020 Challenge on Quantifying Uncertainty in Brain Tumor Segmentation",
MELBA 2022; the definition below reproduces the challenge's public evaluation script.

For one binary region (e.g. whole tumour) with prediction ``P``, reference ``G``, brain mask ``B`` and an
uncertainty map ``u`` in ``[0, max_u]`` (``max_u = 100`` in the challenge):

- thresholds ``numpy.arange(0, max_u + eps, max_u / K)`` in descending order, ``eps`` the float32 machine epsilon
  and ``K = num_points`` (40). ``max_u + eps`` is evaluated in float32 as in the script (numpy >= 2 keeps a Python
  float plus a float32 scalar in float32), where ``100 + eps`` rounds to 100: for ``max_u = 100`` the thresholds are
  the 40 values ``97.5, 95, ..., 2.5, 0`` and **100 itself is not a threshold**. For other scales the count follows
  float32 and ``numpy.arange`` rounding, not a simple rule: ``K = 40`` gives ``K + 1`` thresholds (``max_u``
  included) for ``max_u`` = 1 or 3.9 but ``K`` for 1.5, 2, 3 or 4; :func:`qu_brats_thresholds` gives the grid.
  This is the default, ``grid="numpy2"``. The 2020 challenge ran the script under numpy 1.x (numpy 2 appeared in
  2024), where the sum was float64 (``100.00000011920929``): its grid had the ``K + 1`` thresholds
  ``100, 97.5, ..., 0``, 100 included. ``grid="numpy1"`` gives that grid (``max_u + eps`` and the range in float64),
  the one to use for comparing with the published 2020 challenge scores: a perfect uncertainty map scores 1.0
  under it and 0.9917 under the default (see below);
- at threshold ``t`` the voxels with ``u > t`` are filtered out (``K_t = {u <= t}`` are kept);
- filtered Dice ``Dice(t) = 2 |P & G & K_t| / (|P & K_t| + |G & K_t|)``, 1 when both are empty (on all voxels, not
  only the brain);
- filtered true positives ``FTP(t) = (TP - TP_t) / (TP + eps)`` with ``TP = |P & G & B|``, ``TP_t = |P & G & B &
  K_t|``; filtered true negatives ``FTN(t) = (TN - TN_t) / (TN + eps)`` with ``TN = |~P & ~G & B|``;
- each AUC is the trapezoid area under the curve over the threshold axis (sklearn's ``auc``) divided by
  ``max_u``; because the largest threshold is 97.5, a curve equal to 1 everywhere has area 0.975 (1 with
  ``grid="numpy1"``, whose largest threshold is 100);
- ``score = (AUC_Dice + (1 - AUC_FTP) + (1 - AUC_FTN)) / 3`` (higher is better).

One pass for all thresholds: each voxel's index in the ascending threshold grid (the smallest threshold at which it
is kept) and its category (P, G, B bits) give one ``bincount``; cumulative sums over the grid give every count at
every threshold (int64). The script recomputes every mask for each threshold; the results are the same counts. The
ratios are evaluated in float64 (the script uses float32 sums: its values differ from these by float32 rounding,
below 1e-6).

``qu_brats_regions`` evaluates several regions (WT/TC/ET) and their mean; :class:`QUBraTSMetric` is the MONAI
metric (in :mod:`.qu_brats_metric`, apart so that this module imports no MONAI); :func:`to_qu_brats_range` maps
monai-unc maps (nats, probabilities) to the challenge's ``[0, 100]``.

A region with an empty reference and an empty prediction is scored as the challenge scores it (filtered Dice 1 at
every threshold, no true positive to filter): the case has a score and counts in the cohort's mean, never NaN. This
differs on purpose from the ambiguity metrics (:mod:`.ambiguity`), whose undefined cases (NCC of a constant map,
``D^2_IoU`` of all-empty masks) are NaN with a warning and left out of the cohort's mean. Without any case, both
aggregate to NaN with a ``UserWarning``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from .._lazy import lazy_attributes
from .._utils import (
    ArrayLike,
    check_bool,
    check_finite,
    like_input,
    said_once_per_call,
    say_warning,
    to_tensor,
    trapezoid,
    user_stacklevel,
)
from ..keys import DEPRECATED_MEASURES, UncertaintyKeys, canonical_measure
from ..regions import BRATS_REGIONS, RegionSpec, parse_regions, region_masks, unclaimed_labels_message

if TYPE_CHECKING:  # loaded on first access (module ``__getattr__`` below; it imports MONAI)
    from .qu_brats_metric import QUBraTSMetric

__all__ = [
    "QU_BRATS_EPS",
    "QU_BRATS_GRIDS",
    "QUBraTSResult",
    "QUBraTSRegionsResult",
    "QU_BRATS_COMPONENTS",
    "qu_brats",
    "qu_brats_regions",
    "qu_brats_thresholds",
    "measure_max",
    "to_qu_brats_range",
    # the MONAI metric class(es), loaded on first access (``from ... import *`` gets them as before the move)
    "QUBraTSMetric",
]

#: the float32 machine epsilon the challenge script uses (threshold grid end, FTP / FTN denominators)
QU_BRATS_EPS = float(np.finfo(np.float32).eps)
#: the threshold grids of :func:`qu_brats_thresholds`: ``"numpy2"`` (the default: the script under numpy >= 2, 40
#: thresholds ``97.5 ... 0`` for the defaults) and ``"numpy1"`` (the script under numpy 1.x, as run in the 2020
#: challenge: 41 thresholds ``100 ... 0``)
QU_BRATS_GRIDS = ("numpy2", "numpy1")
#: how the warning of :func:`qu_brats` on a map nowhere above the smallest positive threshold begins (a filter for the
#: callers that rescaled the map themselves, where a [0, 1] scale cannot be the cause)
UNGRADED_WARNING = "qu_brats: every value of uncertainty is at most"
#: relative tolerance of :func:`to_qu_brats_range` for values just outside ``[0, max_value]`` (float rounding)
RANGE_RTOL = 1e-5
#: the values of a :class:`QUBraTSResult` (and the ``component`` of :class:`~monai_unc.metrics.QUBraTSMetric`)
QU_BRATS_COMPONENTS = ("score", "dice_auc", "ftp_auc", "ftn_auc")
_CHUNK = 1 << 18  # voxels per chunk of the one-pass counting


@dataclass(frozen=True)
class QUBraTSResult:
    """QU-BraTS of one binary region (module docstring), returned by :func:`qu_brats`.

    Attributes:
        dice_auc: area under the filtered-Dice curve, divided by ``max_uncertainty`` (higher is better).
        ftp_auc: area under the filtered-true-positive curve (lower is better).
        ftn_auc: area under the filtered-true-negative curve (lower is better).
        score: ``(dice_auc + (1 - ftp_auc) + (1 - ftn_auc)) / 3`` (higher is better).
        thresholds: the thresholds, descending (``97.5 ... 0`` for the defaults; ``100 ... 0`` with ``grid="numpy1"``).
        dice: the filtered Dice at each threshold (float64).
        ftp: the fraction of filtered true positives at each threshold.
        ftn: the fraction of filtered true negatives at each threshold.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import qu_brats
        >>> target = torch.zeros(8, 8, 8, dtype=torch.bool)
        >>> target[2:6, 2:6, 2:6] = True
        >>> pred = torch.zeros_like(target)
        >>> pred[2:6, 2:6, 3:7] = True  # shifted by one voxel
        >>> uncertainty = 100.0 * (pred ^ target).float()  # uncertain exactly at the errors
        >>> res = qu_brats(uncertainty, pred, target)
        >>> res.thresholds[:3], res.dice[:3]
        (array([97.5, 95. , 92.5]), array([1., 1., 1.]))
        >>> {k: round(v, 4) for k, v in res.as_dict().items()}
        {'score': 0.9917, 'dice_auc': 0.975, 'ftp_auc': 0.0, 'ftn_auc': 0.0}
    """

    dice_auc: float
    ftp_auc: float
    ftn_auc: float
    score: float
    thresholds: np.ndarray
    dice: np.ndarray
    ftp: np.ndarray
    ftn: np.ndarray

    def as_dict(self) -> dict[str, float]:
        """The four scalars: ``score``, ``dice_auc``, ``ftp_auc``, ``ftn_auc``.

        Returns:
            ``{name: float}``.
        """
        return {"score": self.score, "dice_auc": self.dice_auc, "ftp_auc": self.ftp_auc, "ftn_auc": self.ftn_auc}


@dataclass(frozen=True)
class QUBraTSRegionsResult:
    """QU-BraTS of several regions, returned by :func:`qu_brats_regions`.

    The scalars are the unweighted means over the regions (the challenge ranks the mean over WT, TC and ET).

    Attributes:
        regions: ``{region name: QUBraTSResult}``.
        score: mean score over the regions.
        dice_auc: mean Dice AUC.
        ftp_auc: mean FTP AUC.
        ftn_auc: mean FTN AUC.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import qu_brats_regions
        >>> label = np.zeros((6, 6, 6), dtype=int)
        >>> label[1:5, 1:5, 1:5] = 2
        >>> label[2:4, 2:4, 2:4] = 4
        >>> uncertainty = np.zeros((3, 6, 6, 6))  # TC, WT, ET: certain everywhere
        >>> res = qu_brats_regions(uncertainty, label, label)
        >>> sorted(res.as_dict())[:3]
        ['ET_dice_auc', 'ET_ftn_auc', 'ET_ftp_auc']
    """

    regions: dict[str, QUBraTSResult]
    score: float
    dice_auc: float
    ftp_auc: float
    ftn_auc: float

    def as_dict(self) -> dict[str, float]:
        """Flat ``{"<region>_<component>": value, ..., "mean_<component>": value}``.

        Returns:
            ``{name: float}`` with four components per region and their means.
        """
        out: dict[str, float] = {}
        for name, r in self.regions.items():
            out.update({f"{name}_{k}": v for k, v in r.as_dict().items()})
        out.update({"mean_score": self.score, "mean_dice_auc": self.dice_auc, "mean_ftp_auc": self.ftp_auc,
                    "mean_ftn_auc": self.ftn_auc})
        return out


# ------------------------------------------------------------------------------------------------------------ core
def check_scale(value: Any, name: str) -> float:
    """``value`` as a positive finite float; ``TypeError`` for a non-number (a bool, a string), ``ValueError`` else."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return v


def check_grid_args(num_points: Any, max_uncertainty: Any) -> tuple[int, float]:
    if isinstance(num_points, bool) or not isinstance(num_points, (int, np.integer)) or num_points < 2:
        raise ValueError(f"num_points must be an integer >= 2 (an area needs two thresholds), got {num_points!r}")
    return int(num_points), check_scale(max_uncertainty, "max_uncertainty")


def check_grid(grid: Any, name: str = "grid") -> str:
    """``grid`` if it is one of :data:`QU_BRATS_GRIDS`; ``TypeError`` for a non-string, ``ValueError`` else."""
    if not isinstance(grid, str):
        raise TypeError(f"{name} must be a string, one of {QU_BRATS_GRIDS}, got {type(grid).__name__} {grid!r}")
    if grid not in QU_BRATS_GRIDS:
        raise ValueError(f"{name} must be one of {QU_BRATS_GRIDS}, got {grid!r}")
    return str(grid)


def qu_brats_thresholds(num_points: int = 40, max_uncertainty: float = 100.0, grid: str = "numpy2") -> np.ndarray:
    """The challenge's threshold grid, descending.

    ``numpy.arange(0, max_u + eps, max_u / num_points)[::-1]`` (module docstring), with ``max_u + eps`` evaluated as
    the challenge's script evaluates it under

    - ``grid="numpy2"`` (default): numpy >= 2, in float32, where ``100 + eps`` rounds to 100. For the defaults:
      ``97.5, 95, ..., 2.5, 0`` (40 values; 100 is not a threshold);
    - ``grid="numpy1"``: numpy 1.x, as in the 2020 challenge, in float64 (``100.00000011920929``), the range in
      float64 too. For the defaults: ``100, 97.5, ..., 2.5, 0`` (41 values). Use it to compare with the published
      2020 challenge scores.

    Args:
        num_points: number of thresholds ``K``.
        max_uncertainty: top of the uncertainty scale ``max_u``.
        grid: ``"numpy2"`` or ``"numpy1"`` (:data:`QU_BRATS_GRIDS`).

    Returns:
        The thresholds as float64, descending, none above ``max_u`` (``eps`` is absolute: on a scale much smaller
        than 100 the range would run on past ``max_u``).

    Raises:
        ValueError: ``num_points`` below 2, a ``max_uncertainty`` that is not positive and finite, or a ``grid``
            other than ``"numpy2"`` / ``"numpy1"``.
        TypeError: a ``grid`` that is not a string, or a ``max_uncertainty`` that is not a number.

    Example:
        >>> from monai_unc.metrics import qu_brats_thresholds
        >>> t = qu_brats_thresholds()
        >>> len(t), t[:3], float(t[-1])
        (40, array([97.5, 95. , 92.5]), 0.0)
        >>> t1 = qu_brats_thresholds(grid="numpy1")  # the 2020 challenge's grid
        >>> len(t1), t1[:3], float(t1[-1])
        (41, array([100. ,  97.5,  95. ]), 0.0)
        >>> qu_brats_thresholds(num_points=4, max_uncertainty=1.0)
        array([1.  , 0.75, 0.5 , 0.25, 0.  ])
    """
    k, max_u = check_grid_args(num_points, max_uncertainty)
    if check_grid(grid) == "numpy1":  # `100.0 + np.finfo(np.float32).eps` in numpy 1.x: float64
        stop = np.float64(max_u) + np.float64(QU_BRATS_EPS)
    else:  # float32, as `100.0 + np.finfo(np.float32).eps` in numpy 2 (inf beyond float32's largest value)
        with np.errstate(over="ignore"):
            stop = np.float32(max_u) + np.float32(QU_BRATS_EPS)
    step = max_u / k
    # the range's values are i * step whatever its end, and none beyond step k is kept below: a range past step k + 1
    # ends there (found by review 70: on a scale far below eps it ran to eps, 4.7e9 thresholds to allocate for
    # max_u = 1e-15, numpy's "Maximum allowed size exceeded" for 1e-30; beyond float32's largest value the end was
    # infinite). Other ends stay as they are: numpy counts the range in the end's dtype (float32 for numpy2)
    if math.isfinite(stop) and float(stop) <= (k + 2) * step:
        t = np.arange(0.0, stop, step, dtype=np.float64)
    else:  # numpy.arange's values, 0 + i * step (inf past float64's largest value: dropped below)
        with np.errstate(over="ignore"):
            t = np.arange(k + 2, dtype=np.float64) * step
    # eps is absolute: on a small scale (max_u = 1e-6) the range ran on past max_u (45 thresholds up to 1.1 max_u), a
    # perfect map scored 1.033; a threshold above the scale's top filters nothing (found by hostile testing)
    t = t[t <= max_u * (1.0 + 1e-12)]
    return t[::-1].copy()


def binary_mask_of(x: Any, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    t = to_tensor(x, name).detach()
    if shape is not None and tuple(t.shape) != shape:
        raise ValueError(f"{name} must have the shape of uncertainty {shape}, got {tuple(t.shape)}")
    if t.dtype == torch.bool:
        return t
    if t.is_floating_point():
        check_finite(t, name)
    if not bool(((t == 0) | (t == 1)).all()):
        raise ValueError(f"{name} must be a binary mask (values 0 and 1, or bool) of one region")
    return t != 0


def check_claimed_labels(labels: torch.Tensor, claimed: torch.Tensor, regions: RegionSpec, names: Sequence[str],
                         ignore_unclaimed_labels: bool = False) -> None:
    """Refuse label maps holding a non-zero label that no region holds (a ``ValueError`` naming them and the spec).

    Such a label would count as background in every region: BraTS 2023 labels (enhancing tumour 3) read with the
    default ``brats`` spec (enhancing tumour 4) lost the enhancing tumour from ET, TC and WT, and a missed ET-only
    tumour scored as a perfect map, without a word (found by hostile testing). ``monai-unc evaluate --regions``
    refuses them likewise (:func:`~monai_unc.regions.unclaimed_labels_message` words both).

    Args:
        labels: label maps ``(N, ...)``: ``N`` cases (one for a single map, with a leading axis of 1).
        claimed: where any region holds the voxel, the shape of ``labels`` (the union of the region masks).
        regions: the region spec (parsed: ``{name: (label, ...)}``).
        names: how the message names each of the ``N`` maps (e.g. ``["target"]`` or ``["y[0]", "y[1]"]``).
        ignore_unclaimed_labels: count such labels as background instead (no check).
    """
    if ignore_unclaimed_labels:
        return
    if all(0 not in values for values in regions.values()) and \
            int(torch.count_nonzero(labels)) == int(torch.count_nonzero(claimed)):
        return  # the claimed voxels are non-zero, so every non-zero voxel is claimed: two counts, no mask
    stray = (labels != 0) & ~claimed
    if not bool(stray.any()):  # the values are looked up only where there are some
        return
    found: dict[int, list[str]] = {}
    for i, name in enumerate(names):
        for v in torch.unique(labels[i][stray[i]]).tolist():
            found.setdefault(int(v), []).append(name)
    raise ValueError(unclaimed_labels_message(found, regions, option="ignore_unclaimed_labels=True"))


def real_brain_mask(x: Any) -> torch.Tensor:
    """``brain_mask`` as a detached tensor; ``TypeError`` naming it for complex values (torch has no ``>`` for them)."""
    bm = to_tensor(x, "brain_mask").detach()
    if bm.is_complex():  # was torch's NotImplementedError ("gt_cpu" not implemented; found by hostile review 60)
        raise TypeError(f"brain_mask must be a real-valued mask or image, got dtype {bm.dtype}")
    return bm


def checked_uncertainty(x: Any, max_u: float, name: str = "uncertainty") -> torch.Tensor:
    u = to_tensor(x, name).detach()  # a map that requires grad (a validation step without no_grad) counts as well
    if u.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(u.shape)})")
    if u.is_complex():  # the float64 cast scored the real part without a word (hostile review 60)
        raise TypeError(f"{name} must be a real-valued map, got dtype {u.dtype}")
    # the rounding of the map's own precision: a float32 binary entropy peaks at float32(log 2) = 0.69314718246, above
    # math.log(2), and was refused on its own scale (found by hostile review 60)
    tol = float(torch.finfo(u.dtype).eps) * max_u if u.is_floating_point() else 0.0
    if not u.is_floating_point():
        u = u.to(torch.float64)
    elif u.dtype == torch.bfloat16:  # no numpy counterpart for the one-pass counting; float32 is exact
        u = u.to(torch.float32)
    lo_t, hi_t = torch.aminmax(u)  # NaN propagates into both
    lo, hi = float(lo_t), float(hi_t)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        check_finite(u, name)  # raises, counting the non-finite values
    if lo < -tol or hi > max_u + tol:
        # every digit: ".6g" printed 100.00001 as 100, "got values in [0, 100]" for the range [0, 100]
        raise ValueError(
            f"{name} must lie in [0, max_uncertainty={max_u:g}], got values in [{lo!r}, {hi!r}]; rescale maps "
            "with to_qu_brats_range"
        )
    if lo < 0 or hi > max_u:  # within the rounding: clipped, as to_qu_brats_range clips (in float64, which holds max_u)
        u = u.to(torch.float64).clamp(0.0, max_u)
    return u


def _bin_index_numpy(u: np.ndarray, asc: np.ndarray) -> np.ndarray:
    """For every voxel the index of the first ascending threshold ``>= u``.

    The voxel is kept, ``u <= t``, from that threshold on; ``len(asc)``: never kept. Exact, O(1) per voxel for the
    uniform grid ``t_i = i * step``.

    The estimate ``e = ceil(u / step - 1/2)`` is off by at most one downwards (the float error of ``u / step`` is
    far below 1/2 of a grid step), so one comparison with the grid fixes it: ``e += (t_e < u)``. For float32 maps
    the comparison uses each threshold rounded down to float32, which for float32 ``u`` is the same test as
    ``u <= t`` in float64. Other grids fall back to a binary search.
    """
    k = len(asc)
    if u.dtype != np.float64:
        u = u.astype(np.float32 if u.dtype.kind == "f" and u.dtype.itemsize <= 4 else np.float64, copy=False)
    step = float(asc[1] - asc[0]) if k > 1 else 0.0
    if k < 2 or not np.array_equal(asc, np.arange(k) * step):
        return np.searchsorted(asc, u.astype(np.float64, copy=False), side="left")
    bounds = asc.astype(u.dtype)
    if u.dtype == np.float32:  # round down: largest float32 <= t
        high = bounds.astype(np.float64) > asc
        bounds[high] = np.nextafter(bounds[high], np.float32(-np.inf))
    bounds = np.append(bounds, np.array(np.inf, dtype=u.dtype))
    x = u * u.dtype.type(1.0 / step)
    x -= u.dtype.type(0.5)
    np.ceil(x, out=x)
    np.clip(x, 0, k, out=x)
    e = x.astype(np.intp)
    del x
    e += np.take(bounds, e) < u
    return e


def _curve_counts(
    u: torch.Tensor, p: torch.Tensor, g: torch.Tensor, b: torch.Tensor, asc: np.ndarray, backend: str | None = None
) -> np.ndarray:
    """Counts kept at every ascending threshold, plus the totals as a last row: ``(K + 1, 8)`` int64.

    ``(K, 8)`` by category ``P + 2 G + 4 B``, then the totals ``(8,)``. One pass: a threshold index and a category
    per voxel, one bincount. CPU tensors run through numpy (zero copy), other devices through ``torch.bucketize`` /
    ``torch.bincount`` (``backend`` forces one, for tests).
    """
    k = len(asc)
    if backend is None:
        backend = "numpy" if u.device.type == "cpu" else "torch"
    if backend == "numpy":
        un, pn, gn, bn = (t.reshape(-1).numpy() for t in (u, p, g, b))
        pn, gn, bn = (x.view(np.uint8) for x in (pn, gn, bn))
        counts = np.zeros((k + 1) * 8, dtype=np.int64)
        for lo in range(0, un.size, _CHUNK):  # chunks: the temporaries stay in cache (1.7x faster, flat memory)
            hi = lo + _CHUNK
            idx = _bin_index_numpy(un[lo:hi], asc)
            code = pn[lo:hi] | (gn[lo:hi] << 1)
            code |= bn[lo:hi] << 2
            idx *= 8
            idx += code
            counts += np.bincount(idx, minlength=(k + 1) * 8)
        counts = counts.reshape(k + 1, 8)
    else:
        grid = torch.as_tensor(asc, dtype=torch.float64, device=u.device)
        # first grid index whose threshold is >= u: the voxel is kept (u <= t) from there on; k = never kept
        tidx = torch.bucketize(u.reshape(-1).to(torch.float64), grid, right=False)  # int64
        tcode = p.reshape(-1).to(torch.uint8)
        tcode += g.reshape(-1).to(torch.uint8) * 2
        tcode += b.reshape(-1).to(torch.uint8) * 4
        tidx.mul_(8).add_(tcode)
        counts = torch.bincount(tidx, minlength=(k + 1) * 8).reshape(k + 1, 8).cpu().numpy().astype(np.int64)
    kept = np.cumsum(counts[:k], axis=0)
    return np.concatenate([kept, counts.sum(axis=0, keepdims=True)], axis=0)


def qu_brats(
    uncertainty: ArrayLike,
    pred: ArrayLike,
    target: ArrayLike,
    brain_mask: ArrayLike | None = None,
    num_points: int = 40,
    max_uncertainty: float = 100.0,
    grid: str = "numpy2",
) -> QUBraTSResult:
    """QU-BraTS score of one binary region (module docstring; Mehta et al., MELBA 2022).

    Mehta et al.: *QU-BraTS: MICCAI BraTS 2020 Challenge on Quantifying Uncertainty in Brain Tumor
    Segmentation - Analysis of Ranking Scores and Benchmarking Results*.

    The score rewards uncertainty that filters out errors (Dice of the confident voxels rises) without filtering out
    correct voxels (FTP, FTN stay low).

    Args:
        uncertainty: per-voxel uncertainty in ``[0, max_uncertainty]``, any shape (2D, 3D); larger = less certain.
            Values outside by at most the rounding of the map's dtype (``eps * max_uncertainty``: a float32 entropy
            peaks at float32(log 2), above ``math.log(2)``) are clipped to the range, as :func:`to_qu_brats_range`
            clips them. Use :func:`to_qu_brats_range` to map entropies (nats) or probabilities to the challenge's
            ``[0, 100]``.
        pred: binary prediction of the region, same shape (bool or 0/1).
        target: binary reference of the region, same shape.
        brain_mask: voxels counted for FTP / FTN (values > 0 are brain, e.g. a T1 image); ``None``: every voxel.
        num_points: number of thresholds ``K`` (40 in the challenge).
        max_uncertainty: top of the uncertainty scale (100 in the challenge).
        grid: the threshold grid (:func:`qu_brats_thresholds`): ``"numpy2"`` (default, 40 thresholds ``97.5 ... 0``
            for the defaults) or ``"numpy1"`` (the grid of the 2020 challenge, run under numpy 1.x: 41 thresholds
            ``100 ... 0``); use ``"numpy1"`` to compare with the published 2020 challenge scores.

    Returns:
        A :class:`QUBraTSResult`.

    Raises:
        ValueError: for shape mismatches, non-binary masks, uncertainty outside ``[0, max_uncertainty]`` or
            non-finite, a brain mask without any voxel, and a ``grid`` other than ``"numpy2"`` / ``"numpy1"``.
        TypeError: a ``grid`` that is not a string.

    Warns:
        UserWarning: the map is positive somewhere but nowhere above the smallest positive threshold (2.5 for the
            defaults): the score then sees only ``u > 0``, the mark of a map on a ``[0, 1]`` scale not rescaled
            with :func:`to_qu_brats_range`.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import qu_brats
        >>> target = torch.zeros(8, 8, 8, dtype=torch.bool)
        >>> target[2:6, 2:6, 2:6] = True
        >>> pred = torch.zeros_like(target)
        >>> pred[2:6, 2:6, 3:7] = True  # shifted by one voxel
        >>> uncertainty = 100.0 * (pred ^ target).float()  # uncertain exactly at the errors
        >>> res = qu_brats(uncertainty, pred, target)
        >>> round(res.score, 4), round(res.dice_auc, 4), round(res.ftp_auc, 4), round(res.ftn_auc, 4)
        (0.9917, 0.975, 0.0, 0.0)

        A perfect segmentation, certain everywhere, under the default grid and under the 2020 challenge's grid:

        >>> certain = torch.zeros(8, 8, 8)
        >>> round(qu_brats(certain, target, target).score, 4)
        0.9917
        >>> res1 = qu_brats(certain, target, target, grid="numpy1")
        >>> len(res1.thresholds), res1.score
        (41, 1.0)
    """
    return qu_brats_core(uncertainty, pred, target, brain_mask, num_points, max_uncertainty, grid)


def qu_brats_core(
    uncertainty: ArrayLike,
    pred: ArrayLike,
    target: ArrayLike,
    brain_mask: ArrayLike | None = None,
    num_points: int = 40,
    max_uncertainty: float = 100.0,
    grid: str = "numpy2",
    warn: bool = True,
) -> QUBraTSResult:
    """:func:`qu_brats`, whose warning of an ungraded map (:func:`say_ungraded`) the caller may leave out.

    For a caller that rescaled the map itself from its declared scale, where a map nowhere above the first positive
    threshold is a confident map, not a scale slip; earlier versions filtered the warning by its text, a process-wide
    filter. The warning points at the user's call (the first caller outside the package).

    Args:
        uncertainty: as :func:`qu_brats`.
        pred: as :func:`qu_brats`.
        target: as :func:`qu_brats`.
        brain_mask: as :func:`qu_brats`.
        num_points: as :func:`qu_brats`.
        max_uncertainty: as :func:`qu_brats`.
        grid: as :func:`qu_brats`.
        warn: give :func:`say_ungraded`'s warning (``True``) or not.

    Returns:
        A :class:`QUBraTSResult`.

    Example:
        >>> import torch
        >>> from monai_unc.metrics.qu_brats_score import qu_brats_core
        >>> target = torch.zeros(4, 4, dtype=torch.bool)
        >>> target[:2] = True
        >>> u = 0.5 * target.float()  # nowhere above 2.5: ungraded, said only with warn=True
        >>> round(qu_brats_core(u, target, target, warn=False).score, 4)
        0.9875
    """
    res, ungraded = score_region(uncertainty, pred, target, brain_mask, num_points, max_uncertainty, grid)
    if warn and ungraded:
        say_ungraded(res.thresholds, float(max_uncertainty))
    return res


def score_region(
    uncertainty: ArrayLike,
    pred: ArrayLike,
    target: ArrayLike,
    brain_mask: ArrayLike | None = None,
    num_points: int = 40,
    max_uncertainty: float = 100.0,
    grid: str = "numpy2",
) -> tuple[QUBraTSResult, bool]:
    """:func:`qu_brats` without a warning, and whether the map is ungraded (the warning its caller gives once).

    Ungraded: positive somewhere but nowhere above the smallest positive threshold. Then every threshold but 0 keeps
    every voxel and the score sees only ``u > 0``, whatever the map's gradation: the mark of a map on a ``[0, 1]``
    scale given for the challenge's ``[0, 100]`` (a normalised entropy scored 0.90 instead of 0.52, without a word;
    found by hostile testing). A map of zeros (certain everywhere) is not ungraded. The callers that score several
    maps in one call (:func:`qu_brats_regions`, :class:`~monai_unc.metrics.QUBraTSMetric`) say it once for the call
    with :func:`say_ungraded` (in earlier versions once per map, the same text for every region and case).

    Args:
        uncertainty: as :func:`qu_brats`.
        pred: as :func:`qu_brats`.
        target: as :func:`qu_brats`.
        brain_mask: as :func:`qu_brats`.
        num_points: as :func:`qu_brats`.
        max_uncertainty: as :func:`qu_brats`.
        grid: as :func:`qu_brats`.

    Returns:
        The :class:`QUBraTSResult` and whether the map is ungraded.

    Raises:
        ValueError: as :func:`qu_brats`.
        TypeError: as :func:`qu_brats`.

    Example:
        >>> import torch
        >>> from monai_unc.metrics.qu_brats_score import score_region
        >>> target = torch.zeros(4, 4, dtype=torch.bool)
        >>> target[:2] = True
        >>> res, ungraded = score_region(0.5 * target.float(), target, target)  # nowhere above 2.5
        >>> round(res.score, 4), ungraded
        (0.9875, True)
    """
    k, max_u = check_grid_args(num_points, max_uncertainty)
    grid = check_grid(grid)
    u = checked_uncertainty(uncertainty, max_u)
    shape = tuple(u.shape)
    p = binary_mask_of(pred, "pred", shape).to(u.device)
    g = binary_mask_of(target, "target", shape).to(u.device)
    if brain_mask is None:
        b = torch.ones(shape, dtype=torch.bool, device=u.device)
    else:
        bm = real_brain_mask(brain_mask)
        if tuple(bm.shape) != shape:
            raise ValueError(f"brain_mask must have the shape of uncertainty {shape}, got {tuple(bm.shape)}")
        if bm.is_floating_point():
            check_finite(bm, "brain_mask")
        b = (bm if bm.dtype == torch.bool else bm > 0).to(u.device)
    desc = qu_brats_thresholds(k, max_u, grid)
    asc = desc[::-1].copy()
    counts = _curve_counts(u, p, g, b, asc)
    if counts[-1, 4:].sum() == 0:  # categories with the brain bit
        raise ValueError("brain_mask has no voxel > 0: FTP and FTN are counted inside the brain mask")
    total = int(counts[-1].sum())
    # positive somewhere (not every voxel kept at 0) and every voxel kept at the first positive threshold
    ungraded = len(asc) >= 2 and int(counts[0].sum()) < total and int(counts[1].sum()) == total
    return _result_from_counts(counts, desc, max_u), ungraded


def say_ungraded(thresholds: np.ndarray, max_u: float, channel: int | None = None, name: str | None = None) -> None:
    """The ``UserWarning`` of an ungraded map (:func:`score_region`), at the first caller outside the package.

    Said at once for one map (:func:`qu_brats`). Inside :func:`~monai_unc._utils.said_once_per_call` (a call of
    :func:`qu_brats_regions` or :class:`~monai_unc.metrics.QUBraTSMetric`, which score several maps) the warnings
    of the maps of one scale are held and said as one line at the end of the call, naming the ungraded regions (or,
    without names, channels) in channel order, each once (in earlier versions once per region, and the metric once
    per case and region).

    Args:
        thresholds: the threshold grid, descending (:attr:`QUBraTSResult.thresholds`); its second smallest value is
            the smallest positive threshold.
        max_u: the top of the scale.
        channel: the map's region channel, for a call that scores several maps (None: one map).
        name: the region's name, if it has one.

    Example:
        >>> import warnings
        >>> from monai_unc._utils import said_once_per_call
        >>> from monai_unc.metrics.qu_brats_score import qu_brats_thresholds
        >>> grid = qu_brats_thresholds()
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     said_once_per_call(lambda: [say_ungraded(grid, 100.0, j, n) for j, n in ((1, "WT"), (0, "TC"))])
        [None, None]
        >>> str(caught[0].message)[:62], "(the maps of the regions ['TC', 'WT'])" in str(caught[0].message)
        ('qu_brats: every value of uncertainty is at most 2.5, the small', True)
    """
    step = float(thresholds[-2])
    item = None if channel is None else (int(channel), name)

    def text(maps: str) -> str:
        where = f" (the maps of the {maps})" if maps else ""
        return (f"{UNGRADED_WARNING} {step:g}, the smallest positive threshold of the [0, max_uncertainty={max_u:g}] "
                f"scale{where}, so only the threshold 0 filters voxels and the score ignores the map's gradation; if "
                "the map is on another scale (e.g. [0, 1], or nats), rescale it first "
                "(to_qu_brats_range(u, max_value=...))")

    def merged(message: str, items: list[Any]) -> str:
        return message if item is None else text(_ungraded_maps(items))

    say_warning(
        text("" if item is None else _ungraded_maps([item])),
        UserWarning,
        stacklevel=user_stacklevel(),  # the user's call, through qu_brats (held calls say it there themselves)
        key=(UNGRADED_WARNING, step, float(max_u), item is None),
        item=item,
        merge=merged,
    )


def _ungraded_maps(items: list[tuple[int, str | None]]) -> str:
    """``"regions ['TC', 'WT']"`` (or ``"channels [0, 2]"`` where a map has no name) of ``(channel, name)`` items."""
    first = dict(sorted(dict.fromkeys(items)))  # channel -> name, each channel once, in channel order
    names = list(first.values())
    return f"regions {names}" if all(isinstance(n, str) for n in names) else f"channels {list(first)}"


def _result_from_counts(counts: np.ndarray, desc: np.ndarray, max_u: float) -> QUBraTSResult:
    kept, total = counts[:-1], counts[-1]
    pg = kept[:, 3] + kept[:, 7]  # P & G (brain or not)
    psum = kept[:, 1] + kept[:, 3] + kept[:, 5] + kept[:, 7]
    gsum = kept[:, 2] + kept[:, 3] + kept[:, 6] + kept[:, 7]
    denom = psum + gsum
    dice = np.where(denom == 0, 1.0, 2.0 * pg / np.maximum(denom, 1))
    tp, tn = float(total[7]), float(total[4])  # P & G & B, ~P & ~G & B
    ftp = (tp - kept[:, 7]) / (tp + QU_BRATS_EPS)
    ftn = (tn - kept[:, 4]) / (tn + QU_BRATS_EPS)
    asc = desc[::-1]
    dice_auc, ftp_auc, ftn_auc = (trapezoid(c, asc) / max_u for c in (dice, ftp, ftn))
    score = (dice_auc + (1 - ftp_auc) + (1 - ftn_auc)) / 3
    return QUBraTSResult(
        dice_auc=dice_auc, ftp_auc=ftp_auc, ftn_auc=ftn_auc, score=score, thresholds=desc,
        dice=dice[::-1].astype(np.float64), ftp=ftp[::-1].astype(np.float64), ftn=ftn[::-1].astype(np.float64),
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------ regions, scale
def qu_brats_regions(
    uncertainty: Mapping[str, ArrayLike] | ArrayLike,
    pred: Mapping[str, ArrayLike] | ArrayLike,
    target: Mapping[str, ArrayLike] | ArrayLike,
    regions: RegionSpec | str = BRATS_REGIONS,
    brain_mask: ArrayLike | None = None,
    num_points: int = 40,
    max_uncertainty: float = 100.0,
    grid: str = "numpy2",
    ignore_unclaimed_labels: bool = False,
) -> QUBraTSRegionsResult:
    """QU-BraTS of every region of ``regions`` and their mean (the challenge reports WT, TC, ET and ranks the mean).

    Args:
        uncertainty: ``{region: map}`` or an array ``(R, *spatial)`` with the regions in the order of ``regions``
            (e.g. a multi-label inferer's map of one case, channels TC, WT, ET for :data:`BRATS_REGIONS`); values in
            ``[0, max_uncertainty]``.
        pred: integer label map ``(*spatial)`` (converted with :func:`~monai_unc.regions.label_to_regions`), or
            ``{region: binary mask}``.
        target: the reference, in the same form as ``pred``.
        regions: region spec, a name (``"brats"``) or JSON (see :func:`~monai_unc.regions.parse_regions`).
        brain_mask: as in :func:`qu_brats`.
        num_points: as in :func:`qu_brats`.
        max_uncertainty: as in :func:`qu_brats`.
        grid: as in :func:`qu_brats` (``"numpy1"``: the grid of the 2020 challenge, to compare with its published
            scores).
        ignore_unclaimed_labels: count non-zero labels of ``pred`` / ``target`` label maps that no region holds as
            background (by default they are refused: BraTS 2023 labels, enhancing tumour 3, with the default
            ``brats`` spec, enhancing tumour 4, would lose the enhancing tumour from every region).

    Returns:
        A :class:`QUBraTSRegionsResult`.

    Raises:
        ValueError: as :func:`qu_brats`, for a map or mask missing for a region, and for a label map holding a
            non-zero label that no region holds (unless ``ignore_unclaimed_labels``; the message names the label
            and a named spec that holds it, e.g. ``brats2023``).
        TypeError: a ``grid`` that is not a string, or an ``ignore_unclaimed_labels`` that is not a bool.

    Warns:
        UserWarning: once for the call, naming the regions whose map is positive somewhere but nowhere above the
            smallest positive threshold (:func:`qu_brats`'s warning; in earlier versions once per region).

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import qu_brats_regions
        >>> target = np.zeros((6, 6, 6), dtype=int)
        >>> target[1:5, 1:5, 1:5] = 2
        >>> target[2:4, 2:4, 2:4] = 4
        >>> pred = target.copy()
        >>> pred[1, 1:5, 1:5] = 0  # one slice of whole tumour missed
        >>> u_wt = 50.0 * (pred != target)  # half-certain at the errors
        >>> res = qu_brats_regions({"TC": np.zeros(pred.shape), "WT": u_wt, "ET": np.zeros(pred.shape)}, pred, target)
        >>> {name: round(r.score, 4) for name, r in res.regions.items()}, round(res.score, 4)
        ({'TC': 0.9917, 'WT': 0.9685, 'ET': 0.9917}, 0.9839)
        >>> res1 = qu_brats_regions({"TC": np.zeros(pred.shape), "WT": u_wt, "ET": np.zeros(pred.shape)}, pred, target,
        ...                         grid="numpy1")
        >>> {name: round(r.score, 4) for name, r in res1.regions.items()}
        {'TC': 1.0, 'WT': 0.9756, 'ET': 1.0}
    """
    return qu_brats_regions_core(uncertainty, pred, target, regions, brain_mask, num_points, max_uncertainty, grid,
                                 ignore_unclaimed_labels)


def qu_brats_regions_core(
    uncertainty: Mapping[str, ArrayLike] | ArrayLike,
    pred: Mapping[str, ArrayLike] | ArrayLike,
    target: Mapping[str, ArrayLike] | ArrayLike,
    regions: RegionSpec | str = BRATS_REGIONS,
    brain_mask: ArrayLike | None = None,
    num_points: int = 40,
    max_uncertainty: float = 100.0,
    grid: str = "numpy2",
    ignore_unclaimed_labels: bool = False,
    warn: bool = True,
) -> QUBraTSRegionsResult:
    """:func:`qu_brats_regions`, whose warning of an ungraded map (:func:`say_ungraded`) the caller may leave out.

    For a caller that rescaled the maps itself from the measure's own maximum (the evaluation's QU-BraTS columns),
    where a map nowhere above the first positive threshold is a confident map, not a scale slip; in earlier versions
    the evaluation filtered the warning by its text inside ``warnings.catch_warnings()``, a process-wide filter. With
    ``warn=True`` the warning is given once for the call, naming the ungraded regions (in earlier versions once per
    region), at the user's call.

    Args:
        uncertainty: as :func:`qu_brats_regions`.
        pred: as :func:`qu_brats_regions`.
        target: as :func:`qu_brats_regions`.
        regions: as :func:`qu_brats_regions`.
        brain_mask: as :func:`qu_brats_regions`.
        num_points: as :func:`qu_brats_regions`.
        max_uncertainty: as :func:`qu_brats_regions`.
        grid: as :func:`qu_brats_regions`.
        ignore_unclaimed_labels: as :func:`qu_brats_regions`.
        warn: give :func:`say_ungraded`'s warning (``True``), once for the call, or not.

    Returns:
        A :class:`QUBraTSRegionsResult`.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics.qu_brats_score import qu_brats_regions_core
        >>> y = np.zeros((4, 4), dtype=bool)
        >>> y[:2] = True
        >>> u = np.where(y, 0.5, 0.0)  # nowhere above 2.5: ungraded, said only with warn=True
        >>> round(qu_brats_regions_core({"r": u}, {"r": y}, {"r": y}, regions={"r": [1]}, warn=False).score, 4)
        0.9875
    """
    _, max_u = check_grid_args(num_points, max_uncertainty)
    grid = check_grid(grid)  # before any region is scored
    ignore_unclaimed_labels = check_bool(ignore_unclaimed_labels, "ignore_unclaimed_labels")
    spec = parse_regions(regions)
    names = list(spec)
    if isinstance(uncertainty, Mapping):
        missing = [n for n in names if n not in uncertainty]
        if missing:
            raise ValueError(f"uncertainty has no map for the regions {missing}")
        maps = {n: uncertainty[n] for n in names}
    else:
        arr = to_tensor(uncertainty, "uncertainty")
        if arr.ndim < 2 or arr.shape[0] != len(names):
            raise ValueError(
                f"uncertainty must be (R={len(names)}, *spatial) with the regions {names} in order, got "
                f"shape {tuple(arr.shape)}"
            )
        maps = {n: arr[i] for i, n in enumerate(names)}

    def masks(x: Any, what: str) -> dict[str, Any]:
        if isinstance(x, Mapping):
            missing = [n for n in names if n not in x]
            if missing:
                raise ValueError(f"{what} has no mask for the regions {missing}")
            return {n: x[n] for n in names}
        labels = to_tensor(x, what)
        out = region_masks(labels, spec)
        claimed = torch.zeros(labels.shape, dtype=torch.bool, device=labels.device)
        for m in out.values():
            claimed |= m
        check_claimed_labels(labels[None], claimed[None], spec, [what], ignore_unclaimed_labels)
        return out

    pm, tm = masks(pred, "pred"), masks(target, "target")

    def score_all() -> dict[str, QUBraTSResult]:
        results = {}
        for j, n in enumerate(names):
            results[n], flat = score_region(maps[n], pm[n], tm[n], brain_mask, num_points, max_uncertainty, grid)
            if warn and flat:
                say_ungraded(results[n].thresholds, max_u, j, n)
        return results

    # said once for the call, naming the ungraded regions (in earlier versions once per region), at the user's line
    results = said_once_per_call(score_all)
    mean = {c: float(np.mean([getattr(r, c) for r in results.values()])) for c in QU_BRATS_COMPONENTS}
    return QUBraTSRegionsResult(regions=results, **mean)


def measure_max(measure: str, num_classes: int = 2, multilabel: bool = False, normalize: bool = False) -> float:
    """The largest value a monai-unc map can take, to divide by in :func:`to_qu_brats_range`.

    Entropies (``predictive_entropy``, ``expected_entropy``, ``mutual_information``, ``window_disagreement``):
    ``log 2`` for multi-label (binary entropies) or ``log C`` for ``C`` classes, 1 with ``normalize``;
    ``one_minus_max_prob``: 0.5 for multi-label, ``1 - 1/C`` otherwise; ``variance``: 0.25 for multi-label,
    ``(1 - 1/C) / C`` otherwise (the mean over classes of the per-class variance).

    Args:
        measure: the map's name (see :class:`monai_unc.keys.UncertaintyKeys`).
        num_classes: ``C >= 2``.
        multilabel: per-region sigmoid maps instead of softmax maps.
        normalize: the entropies were normalised to [0, 1].

    Returns:
        The maximum as a float.

    Raises:
        ValueError: for an unknown measure or ``num_classes < 2``.

    Example:
        >>> from monai_unc.metrics import measure_max
        >>> round(measure_max("predictive_entropy", num_classes=4), 4)
        1.3863
        >>> measure_max("one_minus_max_prob", multilabel=True)
        0.5
    """
    m = canonical_measure(str(measure)) if str(measure) in DEPRECATED_MEASURES else UncertaintyKeys(measure).value
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    c = 2 if multilabel else int(num_classes)
    if m in ("predictive_entropy", "expected_entropy", "mutual_information", "window_disagreement"):
        return 1.0 if normalize else math.log(c)
    if m == UncertaintyKeys.ONE_MINUS_MAX_PROB.value:
        return 1.0 - 1.0 / c
    if m == "variance":
        return (1.0 - 1.0 / c) / c
    raise ValueError(f"measure must be an uncertainty map, got {measure!r}")


def to_qu_brats_range(uncertainty: ArrayLike, max_value: float, max_uncertainty: float = 100.0) -> ArrayLike:
    """Map an uncertainty map with values in ``[0, max_value]`` to the challenge's ``[0, max_uncertainty]``.

    ``u / max_value * max_uncertainty`` (float64). E.g. a multi-label binary entropy in nats with
    ``max_value = log 2`` (see :func:`measure_max`): ``H_b / log 2 * 100``; a softmax entropy with ``normalize=True``
    with ``max_value = 1``.

    Args:
        uncertainty: the map, any shape.
        max_value: the largest value the map can take.
        max_uncertainty: the top of the challenge's scale.

    Returns:
        The rescaled map (float64), in the library of the input.

    Raises:
        ValueError: for values outside ``[0, max_value]`` by more than ``rtol * max_value`` (closer ones, float
            rounding, are clipped; ``rtol`` is :data:`RANGE_RTOL`, or the machine epsilon of the map's dtype where that
            is larger: 9.8e-4 for float16, 7.8e-3 for bfloat16), or a ``max_value`` / ``max_uncertainty`` that is not
            positive and finite.
        TypeError: for a ``max_value`` / ``max_uncertainty`` that is not a number (a bool, a string).

    Example:
        >>> import math
        >>> import numpy as np
        >>> from monai_unc.metrics import to_qu_brats_range
        >>> to_qu_brats_range(np.array([0.0, 0.5 * math.log(2), math.log(2)]), max_value=math.log(2))
        array([  0.,  50., 100.])
    """
    max_value = check_scale(max_value, "max_value")
    _, max_u = check_grid_args(2, max_uncertainty)
    u = to_tensor(uncertainty, "uncertainty")
    if u.is_complex():  # the float64 cast rescaled the real part without a word (hostile review 60)
        raise TypeError(f"uncertainty must be a real-valued map, got dtype {u.dtype}")
    # the rounding of the map's own precision: a float16 entropy map (the measures return the input's dtype) holds
    # log 2 as 0.69336, 2.9e-4 above it (refused at RANGE_RTOL; found by hostile testing)
    rtol = max(RANGE_RTOL, float(torch.finfo(u.dtype).eps)) if u.is_floating_point() else RANGE_RTOL
    u = u.to(torch.float64)
    check_finite(u, "uncertainty")
    if u.numel():
        # on the detached values: a map still attached to the graph (a validation step without no_grad) made
        # torch warn about converting a tensor that requires grad to a scalar (found by hostile testing)
        lo, hi = (float(v) for v in torch.aminmax(u.detach()))
        tol = rtol * float(max_value)
        if lo < -tol or hi > float(max_value) + tol:
            raise ValueError(
                f"uncertainty must lie in [0, max_value={float(max_value):.6g}], got values in [{lo:.6g}, {hi:.6g}]"
            )
    out = (u / float(max_value) * max_u).clamp(0.0, max_u)
    return like_input(out, uncertainty)


#: the MONAI metric class of this module's functions lives in :mod:`.qu_brats_metric` (it imports MONAI): imported on
#: first access, so that ``monai_unc.metrics.qu_brats_score.QUBraTSMetric`` works too
__getattr__, __dir__ = lazy_attributes(__package__, {"QUBraTSMetric": "qu_brats_metric"}, (), globals(),
                                       owner=__name__)
