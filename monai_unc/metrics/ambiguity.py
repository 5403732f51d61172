"""Ambiguity modelling: NCC against rater variance, and the generalized energy distance (GED) with its parts.

Functional core (one case per call; numpy or torch, CPU or CUDA, in; floats out). Its two MONAI
``CumulativeIterationMetric`` wrappers, :class:`~monai_unc.metrics.NCCMetric` and
:class:`~monai_unc.metrics.GEDMetric`, live in :mod:`.ambiguity_metric` (this module imports no MONAI).

NCC (ValUES, eqs. 12-13; Hu et al. 2019)
    ``NCC(a, b) = 1 / n sum_i (a_i - mu_a)(b_i - mu_b) / (sigma_a sigma_b)`` with population standard
    deviations, i.e. Pearson's correlation of the two maps' voxels. The reference map ``a`` is the per-voxel
    variance of the rater labels, ``V[y_i] = 1/N sum_j (y_i^j - mean_j y_i^j)^2`` (eq. 13).

GED (Zepf et al., eq. 3; ValUES eq. 14; Kohl et al. 2018)
    ``D^2_GED = 2 E[d(A, Y)] - E[d(A, A')] - E[d(Y, Y')]`` over references ``A`` and model samples ``Y``;
    every expectation is the mean over all ordered pairs including ``i = j`` (where ``d = 0``).
    ``d = 1 - IoU`` (or ``1 - Dice``), and ``d = 0`` when both masks are empty. For more than one foreground
    class, ``d`` is the mean of the per-class distances over the foreground classes present in either
    mask (``classes="present"``, the default; the Probabilistic U-Net's Cityscapes evaluation, Kohl et al., averages
    so), or over all ``num_classes - 1`` foreground classes with distance 0 for a class absent from both masks
    (``classes="all"``; PHiSeg's evaluation code, Baumgartner et al.). The two agree for one foreground class.
    ``D^2_IoU``: the same with IoU over non-empty masks only; ``D^2_Det``: the same with
    ``d = k(x, y) = [empty(x) xor empty(y)]`` (Zepf et al. eq. 4), which equals ``2 (p_A - p_Y)^2`` for the
    fractions ``p`` of empty masks. The three terms are returned alongside the value.

Hungarian-matched IoU (Kohl, Romera-Paredes, Maier-Hein, Rezende, Eslami, Kohli, Zisserman, Ronneberger 2019)
    The mean IoU of the best one-to-one matching between the references and the samples, each set repeated to
    ``lcm(R, S)`` members (the HPU-Net protocol repeats 4 raters 4 times against 16 samples); with the GED's ``d``
    (``IoU = 1`` for two empty masks, the mean over the foreground classes present in either mask).

Cases without data, and the cohort
    A case whose value is undefined is NaN with a ``UserWarning``: NCC of a constant map (e.g. an empty
    annotation's zero rater variance), ``D^2_IoU`` of a set whose masks are all empty. ``D^2_GED`` and ``D^2_Det``
    of empty masks are defined (two empty masks are at distance 0: empty references and empty samples give 0).
    :class:`NCCMetric` and :class:`GEDMetric` reduce over the defined cases only (MONAI's NaN-skipping mean;
    ``get_not_nans=True`` gives their number), and a reduced value without any defined case, or a cohort without
    any case, is NaN with a ``UserWarning`` (never MONAI's 0). QU-BraTS (:mod:`.qu_brats`) differs on purpose, as
    the BraTS challenge scores it: an empty reference with an empty prediction has Dice 1 at every threshold, so
    the case has a score (that of a perfect map) and counts in the cohort's mean; its cohort without any case is NaN
    with a ``UserWarning`` too.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from .._deprecation import deprecated_arg_names
from .._lazy import lazy_attributes
from .._utils import (
    ArrayLike,
    check_bool,
    check_finite,
    check_integer,
    check_labels,
    like_input,
    once_per_call,
    to_tensor,
    warn_nan,
)
from .overlap import dice_matrix, iou_matrix, label_gram

if TYPE_CHECKING:  # loaded on first access (module ``__getattr__`` below; it imports MONAI)
    from .ambiguity_metric import GEDMetric, NCCMetric

__all__ = [
    "GEDResult",
    "ncc",
    "rater_variance",
    "ged",
    "ged_nonempty_iou",
    "ged_detection",
    "hungarian_iou",
    "GED_VARIANTS",
    "GED_DISTANCES",
    "GED_CLASSES",
    # the MONAI metric class(es), loaded on first access (``from ... import *`` gets them as before the move)
    "NCCMetric",
    "GEDMetric",
]

#: the distances of :func:`ged` (``d = 1 - IoU`` or ``1 - Dice``)
GED_DISTANCES = ("iou", "dice")
#: how :func:`ged` averages the per-class distances of a pair of masks: over the foreground classes present in either
#: mask, or over all ``num_classes - 1`` foreground classes (a class absent from both at distance 0)
GED_CLASSES = ("present", "all")
#: the variants of :class:`~monai_unc.metrics.GEDMetric`: :func:`ged`, :func:`ged_nonempty_iou`, :func:`ged_detection`
GED_VARIANTS = ("ged", "nonempty_iou", "detection")


class GEDResult(NamedTuple):
    """The generalized energy distance and its terms: ``ged = 2 * cross - reference_diversity - sample_diversity``.

    Zepf, Frellsen, Feragen: *Navigating Uncertainty in Medical Image Segmentation*, eq. 3; returned by
    :func:`ged`, :func:`ged_nonempty_iou` and :func:`ged_detection`.

    Attributes:
        ged: ``D^2_GED``.
        cross: ``E[d(A, Y)]`` over references ``A`` and samples ``Y``.
        reference_diversity: ``E[d(A, A')]``.
        sample_diversity: ``E[d(Y, Y')]``.

    Example:
        >>> from monai_unc.metrics import ged
        >>> import torch
        >>> raters = torch.zeros(3, 4, 4, dtype=torch.long)  # 3 raters, one 4x4 case
        >>> raters[:, 1:3, 1:3] = 1
        >>> raters[0, 0, 1] = 1  # rater 0 adds a voxel
        >>> samples = torch.zeros(2, 4, 4, dtype=torch.long)
        >>> samples[:, 1:3, 1:3] = 1
        >>> samples[1, 1:3, 0] = 1  # sample 1 adds two voxels
        >>> r = ged(raters, samples)
        >>> round(float(r.ged), 4), round(float(2 * r.cross - r.reference_diversity - r.sample_diversity), 4)
        (0.1762, 0.1762)
    """

    ged: float
    cross: float
    reference_diversity: float
    sample_diversity: float


def _nan_result() -> GEDResult:
    nan = float("nan")
    return GEDResult(nan, nan, nan, nan)


@deprecated_arg_names({"pred_uncertainty": "uncertainty", "reference": "target"})
@once_per_call
def ncc(uncertainty: ArrayLike, target: ArrayLike) -> float:
    """Normalized cross-correlation of two maps of one case (ValUES eq. 12, Hu et al. 2019).

    ``NCC(a, b) = 1 / n sum_i (a_i - mu_a)(b_i - mu_b) / (sigma_a sigma_b)`` (Kahl et al.: *ValUES: A Framework for
    Systematic Validation of Uncertainty Estimation in Semantic Segmentation*; Hu, Worrall, Knegt, Veeling, Huisman,
    Welling: *Supervised Uncertainty Quantification for Segmentation with Multiple Annotations*).

    Args:
        uncertainty: predicted uncertainty map, any shape (e.g. ``(1, *spatial)``; formerly ``pred_uncertainty``).
        target: reference map of the same shape, e.g. :func:`rater_variance` of the rater labels (formerly
            ``reference``).

    Returns:
        Pearson's correlation over voxels in [-1, 1], with population standard deviations. NaN with a
        ``UserWarning`` when either map is constant.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import ncc, rater_variance
        >>> _ = torch.manual_seed(0)
        >>> raters = (torch.rand(3, 4, 4, 4) > 0.5).long()
        >>> reference = rater_variance(raters)
        >>> round(ncc(reference + 0.1 * torch.rand(4, 4, 4), reference), 4)
        0.9601
    """
    a = to_tensor(uncertainty, "uncertainty")
    b = to_tensor(target, "target")
    for name, x in (("uncertainty", a), ("target", b)):
        if x.is_complex():  # the float64 cast correlated the real parts without a word (hostile review 60)
            raise TypeError(f"{name} must be a real-valued map, got dtype {x.dtype}")
    if a.shape != b.shape:
        raise ValueError(f"uncertainty and target must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.numel() == 0:
        raise ValueError("uncertainty is empty")
    a = a.to(torch.float64).reshape(-1)
    b = b.to(device=a.device, dtype=torch.float64).reshape(-1)
    check_finite(a, "uncertainty")
    check_finite(b, "target")
    # constant maps by an exact test on the values: the mean of a million copies of 0.1 is not exactly 0.1, so
    # the standard deviation of a constant map can come out as 1e-17 (and the NCC as a silent ~0, not NaN)
    const_a, const_b = bool(a.max() == a.min()), bool(b.max() == b.min())
    if const_a or const_b:
        which = "uncertainty" if const_a else "target"
        # said at the caller's line (once_per_call), past the deprecated-argument wrapper
        return warn_nan(f"ncc: {which} is constant, the correlation is undefined")
    # Pearson's r does not change with the scale of either map: each divided by its largest magnitude (not 0: neither
    # map is constant) before centring keeps the mean from overflow (finite maps near 1.8e308: the mean was inf and r
    # NaN, found by hostile testing) and the products from underflow (maps of 1e-170: r was inf) and overflow (1e170:
    # r was 0); a non-constant map holding +-1 has a largest deviation of at least half an ulp of 1: no sum underflows
    a = a / a.abs().max()
    b = b / b.abs().max()
    da = a - a.mean()
    db = b - b.mean()
    r = (da * db).sum() / torch.sqrt((da * da).sum() * (db * db).sum())
    return float(r.clamp(-1.0, 1.0))  # rounding put r = 1.0000000000000004 outside [-1, 1] for a linear map


def rater_variance(raters: ArrayLike, rater_dim: int = 0, keepdim: bool = False) -> ArrayLike:
    """Per-voxel variance of rater label maps, the NCC reference of ValUES eq. 13.

    For binary labels this is ``V = 1/N sum_j (y^j - ybar)^2 = p (1 - p)`` with ``p`` the fraction of raters
    marking the voxel. For more classes it is the sum over foreground classes ``c >= 1`` of the one-vs-rest
    variances ``p_c (1 - p_c)`` (equal to eq. 13 in the binary case).

    Args:
        raters: integer label maps with the raters along ``rater_dim``, e.g. ``(R, *spatial)``.
        rater_dim: the raters' axis.
        keepdim: keep the raters' axis with size 1 (e.g. ``(B, R, *spatial) -> (B, 1, *spatial)``).

    Returns:
        float64 map without (or with a size-1) ``rater_dim``, in the library of ``raters``.

    Raises:
        ValueError: ``raters`` without a spatial axis or not integer labels, or a ``rater_dim`` that is not an axis
            of ``raters``.
        TypeError: a ``keepdim`` that is not a bool.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics import rater_variance
        >>> raters = np.array([[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 0, 1]])  # 4 raters, 4 voxels
        >>> rater_variance(raters)
        array([0.    , 0.1875, 0.25  , 0.    ])
    """
    y = check_labels(to_tensor(raters, "raters"), "raters")
    if y.ndim < 2:
        raise ValueError(f"raters must have a rater axis and at least one spatial axis, got shape {tuple(y.shape)}")
    # torch's IndexError ("Dimension out of range") or its TypeError about select()'s "dim" escaped, and a truthy
    # string switched keepdim on (found by hostile testing)
    if isinstance(rater_dim, bool) or not isinstance(rater_dim, (int, np.integer)) or not -y.ndim <= rater_dim < y.ndim:
        raise ValueError(f"rater_dim must be an axis of raters (an integer in [{-y.ndim}, {y.ndim - 1}] for shape "
                         f"{tuple(y.shape)}), got {rater_dim!r}")
    rater_dim = int(rater_dim)
    keepdim = check_bool(keepdim, "keepdim")
    out = torch.zeros_like(y.select(rater_dim, 0), dtype=torch.float64)
    for c in _foreground_labels(y):  # a class no rater marks adds p (1 - p) = 0
        p = (y == c).to(torch.float64).mean(dim=rater_dim)
        out += p * (1.0 - p)
    if keepdim:
        out = out.unsqueeze(rater_dim)
    return like_input(out, raters)


#: label dtypes whose values :func:`_foreground_labels` finds by range and counts (the others are sorted)
_COUNTED_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _foreground_labels(*labels: torch.Tensor) -> list[int]:
    """The labels above 0 present in any of ``labels``, ascending.

    The per-class loops of :func:`rater_variance` and the GED run over these, not over every integer up to the largest
    label: a class that no map holds adds nothing, and an atlas's sparse ids (FreeSurfer's up to 12175, the Allen
    CCF's up to about 6e8) made them run for minutes to forever (found by hostile testing).

    A map's smallest and largest labels are found first (one pass): a binary map holds just these two; one whose
    labels lie in ``[0, max(voxels, 2**16))`` is counted by value (``bincount``: one more pass, a table no larger
    than the map); only other maps (sparse large ids, negative values) are sorted (``torch.unique``), which
    on the CPU took ten times the GED itself for the usual few-class maps (found by the benchmark review: GED of 4
    raters x 16 samples of 48^3, 7.7 -> 80 ms). Both give the same labels.

    Args:
        labels: integer (or bool) label tensors (any shapes, one device).

    Returns:
        The distinct labels ``> 0`` as Python ints.

    Example:
        >>> import torch
        >>> _foreground_labels(torch.tensor([0, 5, 5]), torch.tensor([[1000, 0]]))
        [5, 1000]
    """
    found: set[int] = set()
    for t in labels:
        flat = t.reshape(-1)
        if flat.numel() == 0:
            continue
        if flat.dtype == torch.bool:
            flat = flat.to(torch.uint8)
        if flat.dtype not in _COUNTED_DTYPES:  # torch's uint16 / 32 / 64 have no aminmax or bincount
            found.update(int(c) for c in torch.unique(flat).tolist())
            continue
        lo, hi = (int(v) for v in torch.aminmax(flat))
        if hi - lo <= 1:  # a binary map (or a constant one): its two extremes are all its values
            found.update((lo, hi))
            continue
        if lo >= 0 and hi < max(flat.numel(), 1 << 16):  # a table of counts no larger than the map
            values = torch.nonzero(torch.bincount(flat, minlength=hi + 1)).reshape(-1)
        else:
            values = torch.unique(flat)
        found.update(int(c) for c in values.tolist())
    return sorted(c for c in found if c > 0)


def _label_stack(x: Any, name: str) -> torch.Tensor:
    t = check_labels(to_tensor(x, name), name)
    if t.ndim < 2:
        raise ValueError(f"{name} must have shape (M, *spatial): M label maps, got shape {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"{name} holds no label maps")
    return t


def _pair_sets(references: Any, samples: Any) -> tuple[torch.Tensor, torch.Tensor]:
    a = _label_stack(references, "references")
    b = _label_stack(samples, "samples")
    if a.shape[1:] != b.shape[1:]:
        raise ValueError(
            f"references and samples must share the spatial shape, got {tuple(a.shape[1:])} and {tuple(b.shape[1:])}"
        )
    return a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1).to(a.device)


def _pairwise_distance(a: torch.Tensor, b: torch.Tensor, n_classes: int, distance: str,
                       classes: str = "present") -> torch.Tensor:
    """(M, M) distances ``1 - IoU`` or ``1 - Dice`` between all masks of both sets (references first).

    Per pair, the per-class distances are averaged over the foreground classes present in either mask
    (``classes="present"``; ``d = 0`` when no foreground class is present, both masks empty) or over all
    ``n_classes - 1`` foreground classes (``classes="all"``). The intersections come from one Gram matrix per class
    (:func:`~monai_unc.metrics.overlap.label_gram`, exact counts); a class absent from both masks has similarity
    ``empty_score = 1`` (distance 0) and is counted only with ``classes="all"``.
    """
    m = a.shape[0] + b.shape[0]
    total = torch.zeros(m, m, dtype=torch.float64, device=a.device)
    present = torch.zeros_like(total)
    for c in _foreground_labels(a, b):  # a class of neither set is not counted (``here`` is false everywhere)
        if c >= n_classes:
            break
        inter = label_gram([a, b], c)
        size = torch.diagonal(inter)
        here = (size.unsqueeze(1) + size.unsqueeze(0)) > 0
        sim = iou_matrix(inter, empty_score=1.0) if distance == "iou" else dice_matrix(inter, empty_score=1.0)
        total += torch.where(here, 1.0 - sim, torch.zeros_like(sim))
        present += here.to(torch.float64)
    if classes == "all":  # review 61: PHiSeg's convention, every foreground class counted (absent from both: 0)
        return total / float(n_classes - 1)
    return torch.where(present > 0, total / present.clamp_min(1.0), torch.zeros_like(total))


def _check_classes(classes: Any, num_classes: int | None) -> str:
    """``classes`` checked against :data:`GED_CLASSES`; ``"all"`` needs ``num_classes`` (its divisor)."""
    if not isinstance(classes, str) or classes not in GED_CLASSES:
        raise ValueError(f"classes must be one of {GED_CLASSES}, got {classes!r}")
    if classes == "all" and num_classes is None:
        raise ValueError("num_classes is required with classes='all' (the per-pair distance is averaged over its "
                         "num_classes - 1 foreground classes; read from the data it would differ between cases)")
    return classes


def _n_classes(a: torch.Tensor, b: torch.Tensor, num_classes: int | None) -> int:
    found = max(int(a.max()), int(b.max())) + 1
    if num_classes is None:
        return max(found, 2)
    num_classes = check_integer(num_classes, "num_classes (background plus at least one class)", minimum=2)
    if found > num_classes:
        raise ValueError(f"the label maps hold class {found - 1} but num_classes is {num_classes}")
    return num_classes


def _energy(d_ab: torch.Tensor, d_aa: torch.Tensor, d_bb: torch.Tensor) -> GEDResult:
    cross, ref, smp = float(d_ab.mean()), float(d_aa.mean()), float(d_bb.mean())
    return GEDResult(2.0 * cross - ref - smp, cross, ref, smp)


def _ged_sets(a: torch.Tensor, b: torch.Tensor, n_classes: int, distance: str, classes: str = "present") -> GEDResult:
    d = _pairwise_distance(a, b, n_classes, distance, classes)
    r = a.shape[0]
    return _energy(d[:r, r:], d[:r, :r], d[r:, r:])


def ged(
    references: ArrayLike, samples: ArrayLike, distance: str = "iou", num_classes: int | None = None,
    classes: str = "present",
) -> GEDResult:
    """Generalized energy distance ``D^2_GED`` between rater labels and model samples of one case (Zepf et al. eq. 3).

    ``D^2_GED = 2 E[d(A, Y)] - E[d(A, A')] - E[d(Y, Y')]`` over references ``A`` and samples ``Y`` (Kohl et al.
    2018: *A Probabilistic U-Net for Segmentation of Ambiguous Images*; Zepf, Frellsen, Feragen: *Navigating
    Uncertainty in Medical Image Segmentation*; ValUES eq. 14).

    Args:
        references: ``(R, *spatial)`` integer label maps of the raters (0 = background).
        samples: ``(S, *spatial)`` integer label maps sampled from the model (e.g. argmax of each MC sample).
        distance: ``"iou"`` (``d = 1 - IoU``, Zepf et al.) or ``"dice"`` (``d = 1 - Dice``, ValUES A.6).
        num_classes: number of classes including background; default ``max label + 1`` (required with
            ``classes="all"``).
        classes: how a pair's per-class distances are averaged with several foreground classes: ``"present"``
            (default) over the classes present in either mask (Kohl et al.'s Cityscapes evaluation), ``"all"`` over
            all ``num_classes - 1`` foreground classes, a class absent from both masks at distance 0 (Baumgartner et
            al., *PHiSeg: Capturing Uncertainty in Medical Image Segmentation*, as their evaluation code computes it).

    Returns:
        :class:`GEDResult` ``(ged, cross, reference_diversity, sample_diversity)`` with the expectations over
        all ordered pairs including ``i = j``; ``d = 0`` for two empty masks. ``ged`` is 0 when the two sets
        hold the same masks in the same proportions.

    Example:
        >>> from monai_unc.metrics import ged
        >>> import torch
        >>> raters = torch.zeros(3, 4, 4, dtype=torch.long)  # 3 raters, one 4x4 case
        >>> raters[:, 1:3, 1:3] = 1
        >>> raters[0, 0, 1] = 1  # rater 0 adds a voxel
        >>> samples = torch.zeros(2, 4, 4, dtype=torch.long)
        >>> samples[:, 1:3, 1:3] = 1
        >>> samples[1, 1:3, 0] = 1  # sample 1 adds two voxels
        >>> [round(float(v), 4) for v in ged(raters, samples)]
        [0.1762, 0.2159, 0.0889, 0.1667]
        >>> round(float(ged(raters, samples, num_classes=3, classes="all").ged), 4)  # class 2 absent: halved
        0.0881
    """
    if distance not in GED_DISTANCES:
        raise ValueError(f"distance must be one of {GED_DISTANCES}, got {distance!r}")
    classes = _check_classes(classes, num_classes)
    a, b = _pair_sets(references, samples)
    k = _n_classes(a, b, num_classes)
    return _ged_sets(a, b, k, distance, classes)


def ged_nonempty_iou(references: ArrayLike, samples: ArrayLike, num_classes: int | None = None,
                     classes: str = "present") -> GEDResult:
    """``D^2_IoU`` (Zepf et al.): the GED with ``d = 1 - IoU`` over the non-empty masks of both sets only.

    A mask is empty when it holds no foreground voxel. If either set has no non-empty mask the value is
    undefined: all four fields NaN with a ``UserWarning``.

    Args:
        references: ``(R, *spatial)`` integer label maps of the raters (0 = background).
        samples: ``(S, *spatial)`` integer label maps sampled from the model.
        num_classes: number of classes including background; default ``max label + 1`` (required with
            ``classes="all"``).
        classes: ``"present"`` or ``"all"``, as for :func:`ged`.

    Returns:
        :class:`GEDResult` over the non-empty masks.

    Example:
        >>> from monai_unc.metrics import ged_nonempty_iou
        >>> import torch
        >>> raters = torch.zeros(3, 4, 4, dtype=torch.long)  # 3 raters, one 4x4 case
        >>> raters[:, 1:3, 1:3] = 1
        >>> raters[0, 0, 1] = 1  # rater 0 adds a voxel
        >>> samples = torch.zeros(2, 4, 4, dtype=torch.long)
        >>> samples[:, 1:3, 1:3] = 1
        >>> samples[1, 1:3, 0] = 1  # sample 1 adds two voxels
        >>> samples[0] = 0  # an empty sample is left out
        >>> round(float(ged_nonempty_iou(raters, samples).ged), 4)
        0.6413
    """
    classes = _check_classes(classes, num_classes)
    a, b = _pair_sets(references, samples)
    k = _n_classes(a, b, num_classes)
    a, b = a[(a > 0).any(dim=1)], b[(b > 0).any(dim=1)]
    if a.shape[0] == 0 or b.shape[0] == 0:
        which = "references" if a.shape[0] == 0 else "samples"
        warn_nan(f"ged_nonempty_iou: every mask in {which} is empty, D_IoU is undefined")
        return _nan_result()
    return _ged_sets(a, b, k, "iou", classes)


def ged_detection(references: ArrayLike, samples: ArrayLike) -> GEDResult:
    """``D^2_Det`` (Zepf et al. eq. 4): the GED with ``d = k(x, y) = [empty(x) xor empty(y)]``.

    Only whether each mask holds any foreground matters; the value equals ``2 (p_A - p_Y)^2`` with ``p`` the
    fraction of empty masks in each set.

    Args:
        references: ``(R, *spatial)`` label maps of the raters (0 = background).
        samples: ``(S, *spatial)`` label maps sampled from the model.

    Returns:
        :class:`GEDResult` with the detection distance.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import ged_detection
        >>> raters = torch.zeros(2, 4, 4, dtype=torch.long)
        >>> raters[0, 1, 1] = 1  # one of two raters sees a lesion
        >>> samples = torch.zeros(4, 4, 4, dtype=torch.long)
        >>> samples[:, 2, 2] = 1  # every sample holds one
        >>> ged_detection(raters, samples).ged  # 2 * (0.5 - 0) ** 2
        0.5
    """
    a, b = _pair_sets(references, samples)
    ea = (a > 0).any(dim=1).logical_not().to(torch.float64)
    eb = (b > 0).any(dim=1).logical_not().to(torch.float64)

    def xor(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (u.unsqueeze(1) - v.unsqueeze(0)).abs()

    return _energy(xor(ea, eb), xor(ea, ea), xor(eb, eb))


#: the largest ``lcm(R, S)`` matched by :func:`hungarian_iou` with the Hungarian algorithm (``O(L^3)``: 0.1 s on one
#: core at 1024); larger sets are matched by the equivalent transport linear programme (``R S`` variables)
_HUNGARIAN_MAX = 1024


def _best_matching_cost(cost: np.ndarray, max_assignment: int = _HUNGARIAN_MAX) -> float:
    """Mean cost of the best matching of ``(R, S)`` ``cost``, each row repeated ``L / R`` times, each column ``L / S``.

    ``L = lcm(R, S)``. Up to ``max_assignment`` the repeated ``(L, L)`` matrix is solved by the Hungarian algorithm
    (``scipy.optimize.linear_sum_assignment``); beyond it by the transport problem between the uniform distributions
    over rows and columns (``scipy.optimize.linprog``, HiGHS), whose optimum is the same: its vertices are the
    repeated matchings (Birkhoff-von Neumann).
    """
    from scipy import optimize

    r, s = cost.shape
    n = math.lcm(r, s)
    if n <= max_assignment:
        full = np.repeat(np.repeat(cost, n // r, axis=0), n // s, axis=1)
        rows, cols = optimize.linear_sum_assignment(full)
        return float(full[rows, cols].mean())
    # mass 1 / R out of each row, 1 / S into each column
    a_rows = np.kron(np.eye(r), np.ones((1, s)))
    a_cols = np.kron(np.ones((1, r)), np.eye(s))
    res = optimize.linprog(cost.reshape(-1), A_eq=np.vstack([a_rows, a_cols]),
                           b_eq=np.concatenate([np.full(r, 1.0 / r), np.full(s, 1.0 / s)]), bounds=(0, None),
                           method="highs")
    if res.status != 0:  # pragma: no cover - a feasible bounded problem (uniform masses) always solves
        raise RuntimeError(f"hungarian_iou: the transport problem did not solve ({res.message})")
    return float(res.fun)


def hungarian_iou(references: ArrayLike, samples: ArrayLike, num_classes: int | None = None,
                  classes: str = "present") -> float:
    """Hungarian-matched IoU between rater labels and model samples of one case.

    The references and the samples are each repeated to ``L = lcm(R, S)`` members (every reference ``L / R`` times,
    every sample ``L / S`` times), matched one to one so that the summed IoU is largest (the Hungarian algorithm), and
    the matched pairs' IoUs averaged (Kohl et al. 2019: *A Hierarchical Probabilistic U-Net for Modeling Multi-Scale
    Ambiguities*, who repeat LIDC's 4 raters 4 times against 16 samples; Baumgartner et al. 2019: *PHiSeg Code:
    Capturing Uncertainty in Medical Image Segmentation*). It is 1 only when the samples reproduce the raters'
    masks in the raters' proportions; unlike the GED it does not reward diversity by itself. A pair's IoU is that of
    :func:`ged` (``1 - d``): 1 for two empty masks, and for several foreground classes the mean over the classes
    present in either mask (``classes="present"``) or over all foreground classes (``classes="all"``).

    Args:
        references: ``(R, *spatial)`` integer label maps of the raters (0 = background).
        samples: ``(S, *spatial)`` integer label maps sampled from the model.
        num_classes: number of classes including background; default ``max label + 1`` (required with
            ``classes="all"``).
        classes: ``"present"`` or ``"all"``, as for :func:`ged`.

    Returns:
        The matched mean IoU in [0, 1] (a float).

    Example:
        >>> import torch
        >>> from monai_unc.metrics import hungarian_iou
        >>> raters = torch.zeros(2, 4, 4, dtype=torch.long)
        >>> raters[0, 1:3, 1:3] = 1  # rater 0: a 2x2 square; rater 1: nothing
        >>> samples = torch.zeros(4, 4, 4, dtype=torch.long)
        >>> samples[:2, 1:3, 1:3] = 1  # two samples the square, two a 2x3 box
        >>> samples[2:, 1:3, 1:4] = 1
        >>> round(hungarian_iou(raters, samples), 4)  # (1 + 1 + 0 + 0) / 4: an empty rater matches no box
        0.5
    """
    classes = _check_classes(classes, num_classes)
    a, b = _pair_sets(references, samples)
    k = _n_classes(a, b, num_classes)
    d = _pairwise_distance(a, b, k, "iou", classes)[: a.shape[0], a.shape[0]:]
    return 1.0 - _best_matching_cost(d.cpu().numpy())


#: the MONAI metric classes of this module's functions live in :mod:`.ambiguity_metric` (it imports MONAI): imported
#: on first access, so that ``monai_unc.metrics.ambiguity.NCCMetric`` still works
__getattr__, __dir__ = lazy_attributes(__package__, dict.fromkeys(("NCCMetric", "GEDMetric"), "ambiguity_metric"), (),
                                       globals(), owner=__name__)
