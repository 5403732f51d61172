"""Overlap of segmentation masks: Dice, IoU and the pairwise Gram matrix of many masks (the package's one copy).

For two masks ``X`` and ``Y``::

    Dice(X, Y) = 2 |X & Y| / (|X| + |Y|)            IoU(X, Y) = |X & Y| / |X | Y| = |X & Y| / (|X| + |Y| - |X & Y|)

Both are ``0 / 0`` when ``X`` and ``Y`` are empty. What that case scores is the explicit argument
``empty_score`` of every function here (a number in [0, 1], or NaN):

- ``1.0`` (the default): both masks agree that the structure is absent. This is MONAI's ``compute_dice`` with
  ``ignore_empty=False`` (a class absent from both maps scores 1, absent from one of them 0), the rule of the
  per-class ``dice`` of ``monai-unc evaluate``, of the distance ``d = 1 - IoU`` of the generalized energy
  distance (``d = 0`` for two empty masks, :mod:`monai_unc.metrics.ambiguity`) and the default of the label-free
  quality estimates (:mod:`monai_unc.metrics.quality`);
- ``float("nan")``: undefined; the value is NaN and a ``UserWarning`` counts the empty pairs (use it to leave
  such pairs out of a mean, e.g. :func:`monai_unc.data.training.dice_per_class`);
- ``0.0``: an empty pair counts as a complete miss.

Only the pair of two empty masks is special: one empty and one non-empty mask give ``Dice = IoU = 0`` by the
formula. (MONAI's ``ignore_empty=True`` is a different rule, NaN whenever the *reference* is empty; compute the
counts with :func:`overlap_counts` and apply it yourself if you need it.)

Exact counts. Per-class intersections and sizes of two label maps come from their joint counts (one int64
``bincount`` of the code ``C * P + T``: the confusion matrix, whose diagonal holds the intersections and whose row
and column sums hold the sizes); with more classes than that table is worth (``C^2`` above the voxels, e.g. an
atlas's 65535 labels) from one bincount per map and one of the voxels where both agree, in memory linear in ``C``.
The Gram matrix ``G[i, j] = |A_i & A_j|`` of ``M`` masks (:func:`mask_gram`, :func:`label_gram`; its diagonal
holds the mask sizes) is a float32 matrix product of 0/1 masks in blocks of ``block`` voxels (default 2^20):
every partial sum is an integer below ``2^24``, which float32 represents exactly, and the blocks are summed in
float64 (exact to ``2^53``), so ``G`` holds exact integer counts; the product runs on BLAS / cuBLAS (TF32 keeps
0/1 inputs and float32 accumulation exact). Ratios are float64. Inputs are numpy arrays or torch tensors (CPU or
CUDA); results follow the library of the first input.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from .._utils import ArrayLike, check_bool, check_labels, like_input, no_autocast, to_tensor

__all__ = [
    "GRAM_BLOCK",
    "OverlapCounts",
    "check_empty_score",
    "overlap_ratio",
    "dice_from_counts",
    "iou_from_counts",
    "class_counts",
    "overlap_counts",
    "dice",
    "iou",
    "mask_gram",
    "label_gram",
    "dice_matrix",
    "iou_matrix",
]

#: voxels per block of the Gram-matrix products (float32 sums of 0/1 products are exact below 2^24)
GRAM_BLOCK = 1 << 20
_MAX_EXACT_BLOCK = 1 << 24
#: the most classes (columns) of a per-class output: a label map whose largest label is 2^24 or more would need one
#: int64 column per class up to it (2^33 asked for 64 GiB per row); such maps are relabelled first
_MAX_CLASSES = 1 << 24


class OverlapCounts(NamedTuple):
    """Per-class counts of two label maps: ``|P = c & T = c|``, ``|P = c|``, ``|T = c|``.

    Returned by :func:`overlap_counts`; each field is int64 ``(..., C)``.

    Attributes:
        intersection: ``|P = c & T = c|`` per class.
        pred_size: ``|P = c|`` per class.
        target_size: ``|T = c|`` per class.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import overlap_counts
        >>> counts = overlap_counts(torch.tensor([0, 1, 1, 2]), torch.tensor([0, 1, 2, 2]))
        >>> counts.intersection, counts.pred_size, counts.target_size
        (tensor([1, 1, 1]), tensor([1, 2, 1]), tensor([1, 1, 2]))
    """

    intersection: ArrayLike
    pred_size: ArrayLike
    target_size: ArrayLike


# ---------------------------------------------------------------------------------------------- the empty rule


def check_empty_score(empty_score: Any) -> float:
    """``empty_score`` as a float in [0, 1] or NaN.

    Args:
        empty_score: the score of two empty masks (see the module docstring).

    Returns:
        ``float(empty_score)``.

    Raises:
        TypeError: when it is not a real number.
        ValueError: when it is outside [0, 1] and not NaN.

    Example:
        >>> from monai_unc.metrics.overlap import check_empty_score
        >>> check_empty_score(1)
        1.0
    """
    # numpy's and torch's booleans too (found by hostile testing: np.True_ and torch.tensor(True) were read as 1.0,
    # where True raises)
    boolean = isinstance(empty_score, bool) or str(getattr(empty_score, "dtype", "")) in ("bool", "torch.bool")
    if boolean or not isinstance(empty_score, (int, float)) and not (
        hasattr(empty_score, "__float__") and getattr(empty_score, "ndim", 0) == 0
    ):
        raise TypeError(f"empty_score must be a number in [0, 1] or NaN, got {type(empty_score).__name__}")
    v = float(empty_score)
    if not (math.isnan(v) or 0.0 <= v <= 1.0):
        raise ValueError(f"empty_score must be a number in [0, 1] or NaN, got {v}")
    return v


def _real_tensor(x: Any, name: str) -> torch.Tensor:
    """``x`` as a tensor (:func:`to_tensor`) of real numbers; ``TypeError`` naming ``name`` for complex values.

    The float64 cast of complex counts dropped their imaginary part without a word in earlier versions.
    """
    t = to_tensor(x, name)
    if t.is_complex():
        raise TypeError(f"{name} must hold real counts, got dtype {t.dtype}")
    return t


def overlap_ratio(
    numerator: ArrayLike, denominator: ArrayLike, empty_score: float = 1.0, *, caller: str = "overlap_ratio"
) -> torch.Tensor:
    """``numerator / denominator`` in float64, ``empty_score`` where ``denominator == 0`` (the one empty rule).

    The numerator is 0 wherever the denominator is (an overlap of empty masks). With ``empty_score`` NaN a
    ``UserWarning`` (prefixed with ``caller``) counts the empty comparisons. The building block of the functions
    below and of the quality estimates.

    Args:
        numerator: counts, any shape broadcasting with ``denominator``.
        denominator: counts (0 for two empty masks).
        empty_score: value where ``denominator == 0``, in [0, 1] or NaN.
        caller: name prefixed to the warning.

    Returns:
        float64 torch tensor of the broadcast shape, on the numerator's device.

    Example:
        >>> from monai_unc.metrics.overlap import overlap_ratio
        >>> overlap_ratio([2, 0], [4, 0])
        tensor([0.5000, 1.0000], dtype=torch.float64)
        >>> overlap_ratio([2, 0], [4, 0], empty_score=0.0)
        tensor([0.5000, 0.0000], dtype=torch.float64)
    """
    e = check_empty_score(empty_score)
    num = _real_tensor(numerator, "numerator").to(torch.float64)
    den = _real_tensor(denominator, "denominator").to(device=num.device, dtype=torch.float64)
    empty = den == 0
    out = torch.where(empty, torch.full_like(num, e), num / torch.where(empty, torch.ones_like(den), den))
    if math.isnan(e) and bool(empty.any()):
        warnings.warn(f"{caller}: {int(empty.sum())} comparison(s) of two empty masks gave NaN (empty_score=nan)",
                      UserWarning, stacklevel=3)
    return out


def _wide_counts(x: torch.Tensor) -> torch.Tensor:
    """Counts in the widest type of their kind: float64 for soft counts, int64 for integer (and boolean) ones."""
    return x.to(torch.float64) if x.is_floating_point() else x.to(torch.int64)


def _count_tensors(intersection: ArrayLike, size_a: ArrayLike, size_b: ArrayLike
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``|A & B|``, ``|A|`` and ``|B|`` as tensors on the intersection's device, checked to be possible counts.

    Counts may be expected (soft) counts: a relative tolerance of 1e-9 covers their rounding. Integer counts come
    back as int64 and soft counts as float64, so that ``2 |A & B|``, ``|A| + |B|`` and ``|A| + |B| - |A & B|`` neither
    wrap nor round (found by hostile testing: int32 counts of a 1.6e9-voxel mask gave a Dice of 1.30, uint8 counts an
    IoU of 2.27).
    """
    inter = _wide_counts(_real_tensor(intersection, "intersection"))
    a = _wide_counts(_real_tensor(size_a, "size_a")).to(inter.device)
    b = _wide_counts(_real_tensor(size_b, "size_b")).to(inter.device)
    for name, x in (("intersection", inter), ("size_a", a), ("size_b", b)):
        x = x.detach()
        if x.is_floating_point() and not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} must be finite counts, got NaN or infinity")
        if bool((x < 0).any()):
            raise ValueError(f"{name} must be non-negative counts, got {float(x.min())}")
    try:
        smaller = torch.minimum(a.detach().to(torch.float64), b.detach().to(torch.float64))
        # relative to the smaller size, as documented: an absolute 1e-9 below a size of 1 (found by hostile testing)
        # let dice_from_counts(1e-9, 1e-12, 1e-12) give a Dice of 1000 and iou_from_counts an IoU of -1.002
        over = inter.detach().to(torch.float64) - smaller > 1e-9 * smaller
    except RuntimeError as err:
        raise ValueError(f"intersection, size_a and size_b must broadcast, got {tuple(inter.shape)}, "
                         f"{tuple(a.shape)} and {tuple(b.shape)}") from err
    if bool(over.any()):  # |A & B| <= min(|A|, |B|): anything else is not an overlap (Dice would exceed 1)
        raise ValueError(f"intersection exceeds the smaller of size_a and size_b in {int(over.sum())} place(s): "
                         "not the counts of two masks")
    return inter, a, b


def dice_from_counts(
    intersection: ArrayLike, size_a: ArrayLike, size_b: ArrayLike, empty_score: float = 1.0, *,
    caller: str = "dice",
) -> torch.Tensor:
    """Dice ``2 |A & B| / (|A| + |B|)`` from counts (broadcasting), ``empty_score`` when both masks are empty.

    Args:
        intersection: ``|A & B|``, any shape.
        size_a: ``|A|``, broadcasting with ``intersection``.
        size_b: ``|B|``, broadcasting with ``intersection``.
        empty_score: value for two empty masks, in [0, 1] or NaN.
        caller: name prefixed to the warning for NaN ``empty_score``.

    Returns:
        float64 torch tensor of the broadcast shape (the counts summed in int64, or in float64 for soft counts,
        whatever their dtype).

    Raises:
        ValueError: counts that no two masks have: negative, NaN or infinite, an intersection larger than the
            smaller size (beyond a relative 1e-9 for expected counts), or shapes that do not broadcast.

    Example:
        >>> from monai_unc.metrics.overlap import dice_from_counts
        >>> dice_from_counts([3, 0], [4, 0], [4, 0])
        tensor([0.7500, 1.0000], dtype=torch.float64)
    """
    inter, a, b = _count_tensors(intersection, size_a, size_b)
    return overlap_ratio(2 * inter, a + b, empty_score, caller=caller)


def iou_from_counts(
    intersection: ArrayLike, size_a: ArrayLike, size_b: ArrayLike, empty_score: float = 1.0, *,
    caller: str = "iou",
) -> torch.Tensor:
    """IoU ``|A & B| / (|A| + |B| - |A & B|)`` from counts (broadcasting), ``empty_score`` when both are empty.

    Args:
        intersection: ``|A & B|``, any shape.
        size_a: ``|A|``, broadcasting with ``intersection``.
        size_b: ``|B|``, broadcasting with ``intersection``.
        empty_score: value for two empty masks, in [0, 1] or NaN.
        caller: name prefixed to the warning for NaN ``empty_score``.

    Returns:
        float64 torch tensor of the broadcast shape (the counts summed in int64, or in float64 for soft counts,
        whatever their dtype).

    Raises:
        ValueError: counts that no two masks have: negative, NaN or infinite, an intersection larger than the
            smaller size (beyond a relative 1e-9 for expected counts), or shapes that do not broadcast.

    Example:
        >>> from monai_unc.metrics.overlap import iou_from_counts
        >>> iou_from_counts([3, 0], [4, 0], [4, 0])
        tensor([0.6000, 1.0000], dtype=torch.float64)
    """
    inter, a, b = _count_tensors(intersection, size_a, size_b)
    return overlap_ratio(inter, a + b - inter, empty_score, caller=caller)


# ---------------------------------------------------------------------------------------------- label maps


def _class_counts(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``(..., V)`` labels in ``[0, C)`` -> ``(..., C)`` int64 counts: one bincount over offset rows."""
    lead = labels.shape[:-1]
    n = math.prod(lead)
    flat = labels.reshape(n, -1).to(torch.int64)
    flat = flat + num_classes * torch.arange(n, device=labels.device).unsqueeze(1)
    return torch.bincount(flat.reshape(-1), minlength=n * num_classes).reshape(*lead, num_classes)


def _confusion(p: torch.Tensor, t: torch.Tensor, c: int, lead: torch.Size) -> torch.Tensor:
    """Joint counts ``[..., i, j] = #{P = i, T = j}`` of label maps ``(..., V)`` in ``[0, C)``.

    The leading axes broadcast to ``lead``; one int64 code ``C P + T`` per voxel and one bincount over offset rows.
    """
    code = p.to(torch.int64) * c
    code = code.add_(t) if tuple(code.shape[:-1]) == tuple(lead) else code + t
    n = math.prod(lead)
    code = code.reshape(n, -1).add_((c * c) * torch.arange(n, device=code.device).unsqueeze(1))
    return torch.bincount(code.reshape(-1), minlength=n * c * c).reshape(*lead, c, c)


def _separate_counts(
    p: torch.Tensor, t: torch.Tensor, c: int, lead: torch.Size, foreground: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The intersections and sizes of :func:`_confusion`'s diagonal and sums, without the ``C x C`` table.

    Per class the voxels of each map and the voxels where both maps hold it (``P == T``; the others are counted
    under an extra label ``C`` and dropped), and with ``foreground`` the voxels where both are above 0: exact
    counts in memory linear in ``C``.
    """
    pb, tb = (x.expand(*lead, x.shape[-1]) for x in (p, t))
    size_p, size_t = _class_counts(pb, c), _class_counts(tb, c)
    inter = _class_counts(torch.where(pb == tb, pb.to(torch.int64), c), c + 1)[..., :c]
    fg = ((pb > 0) & (tb > 0)).sum(dim=-1, keepdim=True) if foreground else None
    return inter, size_p, size_t, fg


def _voxel_labels(x: Any, name: str, num_classes: int | None, validate: bool) -> torch.Tensor:
    validate = check_bool(validate, "validate")  # a string "no" is truthy
    num_classes = _check_num_classes(num_classes)
    t = to_tensor(x, name)
    if t.is_complex():  # also with validate=False, whose cast would drop the imaginary part (hostile review 60)
        raise TypeError(f"{name} must be a real-valued label map, got dtype {t.dtype}")
    if t.ndim < 1 or t.shape[-1] == 0:
        raise ValueError(f"{name} must be label maps (..., V) with V > 0 voxels on the last axis, got {tuple(t.shape)}")
    if validate:
        t = check_labels(t, name, num_classes=num_classes)
    elif t.is_floating_point() or (not t.dtype.is_signed and t.dtype != torch.uint8):
        # bool, and uint16 / uint32 / uint64, for which torch has neither max nor > (found by hostile testing:
        # NotImplementedError for uint16 maps with validate=False)
        t = t.to(torch.int64)
    return t


def _check_num_classes(num_classes: Any) -> int | None:
    """``num_classes`` as an int >= 2, or None; checked before the labels are compared with it."""
    if num_classes is None:
        return None
    if not isinstance(num_classes, (int, float)) and not (
        hasattr(num_classes, "__index__") or getattr(num_classes, "ndim", None) == 0
    ):
        raise TypeError(f"num_classes must be an integer >= 2 (background and a class), got {num_classes!r}")
    try:
        ok = not isinstance(num_classes, bool) and int(num_classes) == num_classes and num_classes >= 2
    except (TypeError, ValueError, OverflowError):  # NaN, infinity
        ok = False
    if not ok:
        raise ValueError(f"num_classes must be an integer >= 2 (background and a class), got {num_classes!r}")
    return int(num_classes)


def _num_classes(num_classes: int | None, *maps: tuple[str, torch.Tensor]) -> int:
    """The number of output columns: ``num_classes`` or ``max label + 1``, at most ``2**24``.

    ``ValueError`` naming the map whose largest label would need more columns than that (or ``num_classes``), before
    the counts are allocated: torch's allocation error otherwise.
    """
    if num_classes is not None:
        c = int(_check_num_classes(num_classes))  # type: ignore[arg-type]
        if c > _MAX_CLASSES:
            raise ValueError(f"num_classes is {c}: the per-class output would have more than 2**24 = {_MAX_CLASSES} "
                             "columns; relabel the maps to consecutive labels first")
        return c
    c = 2
    for name, m in maps:
        top = int(m.max())
        if top >= _MAX_CLASSES:
            raise ValueError(
                f"{name} holds label {top}: with num_classes=None the output has one column per class up to the "
                f"largest label ({top + 1} columns), more than 2**24 = {_MAX_CLASSES}; relabel both maps to "
                "consecutive labels first (e.g. numpy.unique of both, return_inverse=True), as num_classes "
                "cannot be below the largest label + 1"
            )
        c = max(c, top + 1)
    return c


def class_counts(labels: ArrayLike, num_classes: int | None = None, validate: bool = True) -> ArrayLike:
    """Voxels of each class along the last axis: label maps ``(..., V)`` -> ``(..., C)`` int64 (one bincount).

    Flatten the spatial axes first (``x.reshape(B, -1)``).

    Args:
        labels: integer label maps ``(..., V)``.
        num_classes: ``C``; default ``max label + 1``. At most ``2**24`` (``ValueError`` naming ``labels`` for a
            larger label: relabel to consecutive labels first).
        validate: check that the labels are integers in ``[0, C)``; ``False`` skips it (for maps made by an argmax;
            a label outside that range would be counted in the wrong row).

    Returns:
        ``(..., C)`` int64 counts, in the library of ``labels``.

    Example:
        >>> import numpy as np
        >>> from monai_unc.metrics.overlap import class_counts
        >>> class_counts(np.array([[0, 1, 1, 2], [2, 2, 2, 0]]), num_classes=3)
        array([[1, 2, 1],
               [1, 0, 3]])
    """
    t = _voxel_labels(labels, "labels", num_classes, validate)
    return like_input(_class_counts(t, _num_classes(num_classes, ("labels", t))), labels)


def overlap_counts(
    pred: ArrayLike, target: ArrayLike, num_classes: int | None = None, foreground: bool = False,
    validate: bool = True,
) -> OverlapCounts:
    """Per-class intersections and sizes of label maps along the last axis (voxels), exact int64.

    Args:
        pred: label maps ``(..., V)`` (0 = background) whose leading axes broadcast with ``target``'s, e.g. samples
            ``(S, B, V)`` against one reference per case ``(B, V)`` (each map's sizes are counted once).
        target: reference label maps ``(..., V)``.
        num_classes: classes including background; default ``max label + 1``. At most ``2**24`` (``ValueError``
            naming the map with a larger label: relabel both maps to consecutive labels first).
        foreground: append a column for the foreground (``label > 0``, the union of the classes ``>= 1``);
            ``True`` or ``False``, as ``validate`` (``TypeError`` otherwise).
        validate: check that both hold integer labels in ``[0, C)`` (skip for argmax maps).

    Returns:
        :class:`OverlapCounts` ``(|P = c & T = c|, |P = c|, |T = c|)``, each ``(..., C)`` (``(..., C + 1)`` with
        ``foreground``) over the broadcast leading axes, in the library of ``pred``.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import overlap_counts
        >>> pred = torch.tensor([[0, 1, 1, 2]])
        >>> target = torch.tensor([[0, 1, 2, 2]])
        >>> overlap_counts(pred, target, num_classes=3, foreground=True)
        OverlapCounts(intersection=tensor([[1, 1, 1, 3]]), pred_size=tensor([[1, 2, 1, 3]]),
                      target_size=tensor([[1, 1, 2, 3]]))
    """
    # found by hostile testing: foreground="no" appended the foreground column (a string is truthy)
    foreground = check_bool(foreground, "foreground")
    p = _voxel_labels(pred, "pred", num_classes, validate)
    t = _voxel_labels(target, "target", num_classes, validate).to(p.device)
    if p.shape[-1] != t.shape[-1]:
        raise ValueError(f"pred and target must have the same number of voxels, got {p.shape[-1]} and {t.shape[-1]}")
    try:
        lead = torch.broadcast_shapes(p.shape[:-1], t.shape[:-1])
    except RuntimeError as err:
        raise ValueError(f"the leading axes of pred {tuple(p.shape)} and target {tuple(t.shape)} do not broadcast") \
            from err
    c = _num_classes(num_classes, ("pred", p), ("target", t))
    if c * c <= p.shape[-1]:  # the joint counts in one pass: a table no larger than the voxels
        conf = _confusion(p, t, c, lead)  # (*lead, C, C): [i, j] = #{P = i, T = j}
        inter = torch.diagonal(conf, dim1=-2, dim2=-1)
        size_p, size_t = conf.sum(dim=-1), conf.sum(dim=-2)
        fg = conf[..., 1:, 1:].sum(dim=(-2, -1), keepdim=True)[..., 0] if foreground else None
    else:  # many classes: no C x C table (65535 atlas labels asked for 34 GB; found by hostile testing)
        inter, size_p, size_t, fg = _separate_counts(p, t, c, lead, foreground)
    if foreground:
        inter = torch.cat([inter, fg], dim=-1)
        size_p = torch.cat([size_p, size_p[..., 1:].sum(dim=-1, keepdim=True)], dim=-1)
        size_t = torch.cat([size_t, size_t[..., 1:].sum(dim=-1, keepdim=True)], dim=-1)
    return OverlapCounts(*(like_input(x.contiguous(), pred) for x in (inter, size_p, size_t)))


def _refuse_one_hot(x: torch.Tensor, name: str) -> None:
    """Refuse a 3D one-hot map ``(B, C, H, W, D)`` given for label maps (what MONAI's ``compute_dice`` takes).

    Read as labels, such a map gave one column, the overlap of the union of every channel (background included). A
    5D map of 0 and 1 with ``C >= 2`` is such a map, or binary label maps of 4 spatial axes, which are then given
    as ``(B, 1, *spatial)``; 5D label maps of more labels are read as before. A 2D one-hot map ``(B, C, H, W)`` has
    the shape and values of binary 3D label maps (a one-pixel boundary crossing every column too, which a test of one
    1 along axis 1 took for one-hot in an earlier version) and is read as label maps.
    """
    if x.ndim != 5 or x.shape[1] < 2 or x.numel() == 0 or x.is_complex():
        return
    if x.dtype != torch.bool:
        lo, hi = (float(v) for v in torch.aminmax(x if x.is_floating_point() else x.to(torch.int64)))
        if lo < 0 or hi > 1 or not bool(((x == 0) | (x == 1)).all()):
            return  # labels other than 0 / 1: label maps of 4 spatial axes
    raise ValueError(
        f"{name} of shape {tuple(x.shape)} holds 0 and 1 only on {x.shape[1]} channels: a one-hot map (B, C, H, W, D) "
        "as MONAI's compute_dice takes it, which dice and iou would read as one label map of the union of its "
        "channels; pass the argmax over the channel axis (y.argmax(1)) and num_classes=C, after checking that "
        "channel 0 is the background (a one-hot map without it, as include_background=False leaves it, needs it put "
        "back first); binary label maps of 4 spatial axes are given as (B, 1, *spatial)"
    )


def _label_pair(pred: Any, target: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Label maps ``(B, *spatial)`` / ``(B, 1, *spatial)`` of one shape, flattened to ``(B, V)``.

    One-hot maps are refused (:func:`_refuse_one_hot`).
    """
    p = to_tensor(pred, "pred")
    t = to_tensor(target, "target")
    _refuse_one_hot(p, "pred")
    _refuse_one_hot(t, "target")
    if p.ndim < 2:
        raise ValueError(f"pred must be label maps of shape (B, *spatial) or (B, 1, *spatial), got {tuple(p.shape)}")
    if tuple(p.shape) != tuple(t.shape):
        raise ValueError(f"pred and target must have the same shape, got {tuple(p.shape)} and {tuple(t.shape)}")
    # the voxel count spelled out: reshape(B, -1) fails on an empty batch (B = 0) with a torch error instead of
    # reaching the check that names the empty argument
    n_vox = math.prod(p.shape[1:])
    return p.reshape(p.shape[0], n_vox), t.reshape(t.shape[0], n_vox)


def _per_class(
    kind: str, pred: Any, target: Any, num_classes: int | None, include_background: bool, empty_score: float
) -> ArrayLike:
    check_empty_score(empty_score)
    # found by hostile testing: include_background="False" added the background column, so that every class was read
    # one column off
    include_background = check_bool(include_background, "include_background")
    p, t = _label_pair(pred, target)
    inter, sp, st = overlap_counts(p, t, num_classes)
    first = 0 if include_background else 1
    inter, sp, st = inter[:, first:], sp[:, first:], st[:, first:]
    fn = dice_from_counts if kind == "dice" else iou_from_counts
    return like_input(fn(inter, sp, st, empty_score, caller=kind).contiguous(), pred)


def dice(
    pred: ArrayLike,
    target: ArrayLike,
    num_classes: int | None = None,
    include_background: bool = False,
    empty_score: float = 1.0,
) -> ArrayLike:
    """Dice per case and class of two label maps: ``2 |P = c & T = c| / (|P = c| + |T = c|)``.

    Args:
        pred: predicted label maps ``(B, *spatial)`` or ``(B, 1, *spatial)``
            (0 = background). A 3D one-hot map ``(B, C, H, W, D)``, as MONAI's ``compute_dice`` takes it, is
            refused (``ValueError``: a 5D map of 0 and 1 with ``C >= 2``; binary label maps of 4 spatial axes are
            given as ``(B, 1, *spatial)``): pass its argmax over the channels with ``num_classes=C``. A 2D one-hot
            map ``(B, C, H, W)`` has the shape and values of binary 3D label maps and is read as those: pass label
            maps.
        target: reference label maps of the same shape, refused in the same way.
        num_classes: classes including background; default ``max label + 1``. At most ``2**24`` (``ValueError``
            naming the map with a larger label: relabel both maps to consecutive labels first).
        include_background: also report class 0 (first column); ``True`` or ``False`` (``TypeError`` otherwise).
        empty_score: value of a class absent from both maps (module docstring). The default 1.0 equals MONAI's
            ``compute_dice(..., include_background=False, ignore_empty=False, num_classes=C)``.

    Returns:
        ``(B, C - 1)`` float64 (``(B, C)`` with ``include_background``), in the library of ``pred``.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import dice
        >>> pred = torch.zeros(1, 4, 4, 4, dtype=torch.long)
        >>> target = torch.zeros_like(pred)
        >>> pred[0, :2], target[0, 1:3] = 1, 1
        >>> dice(pred, target, num_classes=3)  # class 2 is absent from both maps
        tensor([[0.5000, 1.0000]], dtype=torch.float64)
    """
    return _per_class("dice", pred, target, num_classes, include_background, empty_score)


def iou(
    pred: ArrayLike,
    target: ArrayLike,
    num_classes: int | None = None,
    include_background: bool = False,
    empty_score: float = 1.0,
) -> ArrayLike:
    """IoU (Jaccard index) per case and class: ``|P = c & T = c| / |P = c or T = c|``.

    Arguments and result as in :func:`dice` (MONAI's ``compute_iou`` with ``ignore_empty=False`` for the default
    ``empty_score``).

    Args:
        pred: predicted label maps ``(B, *spatial)`` or ``(B, 1, *spatial)`` (0 = background); a 3D one-hot
            map is refused as in :func:`dice`.
        target: reference label maps of the same shape.
        num_classes: classes including background; default ``max label + 1``. At most ``2**24`` (``ValueError``
            naming the map with a larger label: relabel both maps to consecutive labels first).
        include_background: also report class 0 (first column); ``True`` or ``False`` (``TypeError`` otherwise).
        empty_score: value of a class absent from both maps.

    Returns:
        ``(B, C - 1)`` float64 (``(B, C)`` with ``include_background``), in the library of ``pred``.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import iou
        >>> pred = torch.zeros(1, 4, 4, 4, dtype=torch.long)
        >>> target = torch.zeros_like(pred)
        >>> pred[0, :2], target[0, 1:3] = 1, 1
        >>> iou(pred, target, include_background=True)
        tensor([[0.3333, 0.3333]], dtype=torch.float64)
    """
    return _per_class("iou", pred, target, num_classes, include_background, empty_score)


# ---------------------------------------------------------------------------------------------- Gram matrices


def _check_block(block: int | None) -> int:
    if block is None:
        return GRAM_BLOCK
    if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= _MAX_EXACT_BLOCK:
        raise ValueError(f"block must be an integer in [1, 2^24] (exact float32 sums), got {block!r}")
    return block


def _gram(
    parts: Sequence[torch.Tensor], select: Callable[[torch.Tensor], torch.Tensor], block: int
) -> torch.Tensor:
    """``(..., M, M)`` float64 ``|A_i & A_j|`` for the masks ``select(x)`` of ``parts`` ``(..., M_k, V)``.

    The parts are concatenated along ``M`` one block of voxels at a time, so no part is copied whole.
    """
    lead = parts[0].shape[:-2]
    n_vox = parts[0].shape[-1]
    m = sum(p.shape[-2] for p in parts)
    out = torch.zeros(*lead, m, m, dtype=torch.float64, device=parts[0].device)
    for s in range(0, n_vox, block):
        chunks = [select(p[..., s:s + block]) for p in parts]
        x = (chunks[0] if len(chunks) == 1 else torch.cat(chunks, dim=-2)).to(torch.float32)
        # float32 whatever the caller's autocast: a bfloat16 / float16 product rounds the counts (found by hostile
        # testing: 49906 came back as 49920 under CPU autocast)
        with no_autocast(x.device):
            out += torch.matmul(x, x.transpose(-1, -2)).to(torch.float64)
    return out


def _parts(x: Any, name: str) -> list[torch.Tensor]:
    parts = [to_tensor(x, name)] if not isinstance(x, (list, tuple)) else [to_tensor(p, name) for p in x]
    if not parts:
        raise ValueError(f"{name} holds no masks")
    first = parts[0]
    for p in parts:
        if p.is_complex():  # a complex map's masks compared its real part only (hostile review 60)
            raise TypeError(f"{name} must hold real-valued masks or label maps, got dtype {p.dtype}")
        if p.ndim < 2:
            raise ValueError(f"{name} must have shape (..., M, V): M masks of V voxels, got {tuple(p.shape)}")
        if p.shape[:-2] != first.shape[:-2] or p.shape[-1] != first.shape[-1]:
            raise ValueError(
                f"{name}: every part must share the leading axes and the voxel axis, got {tuple(first.shape)} and "
                f"{tuple(p.shape)}"
            )
    device = first.device
    return [p.to(device) for p in parts]


def mask_gram(masks: ArrayLike | Sequence[ArrayLike], block: int | None = None) -> torch.Tensor:
    """Gram matrix of binary masks: ``G[..., i, j] = |A_i & A_j|`` (the diagonal holds ``|A_i|``), exact.

    Args:
        masks: ``(..., M, V)`` boolean (or 0/1) masks, ``M`` masks of ``V`` voxels (flatten the spatial axes
            first), with any leading batch axes; or a list of such arrays concatenated along ``M``.
        block: voxels per float32 product (module docstring), at most 2^24; default :data:`GRAM_BLOCK`.

    Returns:
        ``(..., M, M)`` float64 torch tensor of integer counts on the masks' device.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import mask_gram
        >>> masks = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
        >>> mask_gram(masks)
        tensor([[2., 1., 0.],
                [1., 2., 0.],
                [0., 0., 0.]], dtype=torch.float64)
    """
    b = _check_block(block)
    parts = _parts(masks, "masks")
    for p in parts:
        if p.dtype != torch.bool and not bool(((p == 0) | (p == 1)).all()):
            raise ValueError("masks must hold only 0 and 1 (or booleans)")
    return _gram(parts, lambda x: x != 0, b)


def label_gram(
    labels: ArrayLike | Sequence[ArrayLike], label: int | str, block: int | None = None
) -> torch.Tensor:
    """Gram matrix of the masks ``labels == label`` of ``M`` label maps, without a one-hot copy.

    The masks are ``labels == label`` (or ``labels > 0`` for ``label="foreground"``), built one block of voxels at a
    time so that no one-hot copy of the maps is held. A class that the maps' dtype cannot hold (256 for uint8 maps,
    2049 for float16 ones) is in no voxel: its masks are empty.

    Args:
        labels: ``M`` label maps ``(..., M, V)``, or a list of such stacks, concatenated along ``M``.
        label: the class whose masks are compared, or ``"foreground"``.
        block: voxels per block, as in :func:`mask_gram`.

    Returns:
        ``(..., M, M)`` float64 torch tensor of integer counts, as in :func:`mask_gram`.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import label_gram
        >>> labels = torch.tensor([[0, 1, 2, 2], [1, 1, 2, 0]])
        >>> label_gram(labels, 2)
        tensor([[2., 1.],
                [1., 1.]], dtype=torch.float64)
        >>> label_gram(labels, "foreground")
        tensor([[3., 2.],
                [2., 3.]], dtype=torch.float64)
    """
    b = _check_block(block)
    parts = _parts(labels, "labels")
    if isinstance(label, str):
        if label != "foreground":
            raise ValueError(f"label must be a class index or 'foreground', got {label!r}")
        # an unsigned map's foreground as ``x != 0``: torch has no ``>`` for uint16 / uint32 / uint64 (found by hostile
        # testing: NotImplementedError for uint16 NIfTI label maps)
        return _gram(parts, lambda x: x > 0 if x.dtype.is_signed else x != 0, b)
    try:
        ok = not isinstance(label, bool) and int(label) == label and label >= 0
    except (TypeError, ValueError, OverflowError):  # NaN, infinity, another type
        ok = False
    if not ok:  # a negative or fractional class would give an all-zero Gram matrix, as if every mask were empty
        raise ValueError(f"label must be a class index (an integer >= 0) or 'foreground', got {label!r}")
    c = int(label)

    def select(x: torch.Tensor) -> torch.Tensor:
        if not _holds(x.dtype, c):
            return torch.zeros_like(x, dtype=torch.bool)
        return x == (c if c <= torch.iinfo(torch.int64).max else float(c))  # a float map holds c exactly

    return _gram(parts, select, b)


def _holds(dtype: torch.dtype, c: int) -> bool:
    """Whether label maps of ``dtype`` can hold the class ``c >= 0``; where they cannot, it is in no voxel.

    Compared as it is, such a class would be cast to the maps' dtype (found by hostile testing: 256 against uint8
    maps is 0, which counted the background as class 256; 2049 against float16 maps is 2048).
    """
    if dtype == torch.bool:
        return c <= 1
    if not (dtype.is_floating_point or dtype.is_complex):
        return c <= torch.iinfo(dtype).max
    try:
        return torch.tensor(float(c), dtype=dtype).item() == c
    except OverflowError:  # beyond float64
        return False


def _sizes(gram: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if gram.ndim < 2 or gram.shape[-1] != gram.shape[-2]:
        raise ValueError(f"gram must be a square matrix (..., M, M), got {tuple(gram.shape)}")
    size = torch.diagonal(gram, dim1=-2, dim2=-1)
    return size.unsqueeze(-1), size.unsqueeze(-2)


def dice_matrix(gram: ArrayLike, empty_score: float = 1.0) -> torch.Tensor:
    """Pairwise Dice ``(..., M, M)`` of the masks of a Gram matrix (:func:`mask_gram`): ``2 G_ij / (G_ii + G_jj)``.

    Args:
        gram: ``(..., M, M)`` Gram matrix of ``M`` masks.
        empty_score: value for two empty masks (including the diagonal entry of an empty mask).

    Returns:
        ``(..., M, M)`` float64 torch tensor.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import dice_matrix, mask_gram
        >>> masks = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
        >>> dice_matrix(mask_gram(masks))
        tensor([[1.0000, 0.5000, 0.0000],
                [0.5000, 1.0000, 0.0000],
                [0.0000, 0.0000, 1.0000]], dtype=torch.float64)
    """
    g = to_tensor(gram, "gram").to(torch.float64)
    si, sj = _sizes(g)
    return dice_from_counts(g, si, sj, empty_score, caller="dice_matrix")


def iou_matrix(gram: ArrayLike, empty_score: float = 1.0) -> torch.Tensor:
    """Pairwise IoU ``(..., M, M)`` of the masks of a Gram matrix: ``G_ij / (G_ii + G_jj - G_ij)``.

    Args:
        gram: ``(..., M, M)`` Gram matrix of ``M`` masks (:func:`mask_gram`).
        empty_score: value for two empty masks.

    Returns:
        ``(..., M, M)`` float64 torch tensor.

    Example:
        >>> import torch
        >>> from monai_unc.metrics import iou_matrix, mask_gram
        >>> masks = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0]], dtype=torch.bool)
        >>> iou_matrix(mask_gram(masks))
        tensor([[1.0000, 0.3333],
                [0.3333, 1.0000]], dtype=torch.float64)
    """
    g = to_tensor(gram, "gram").to(torch.float64)
    si, sj = _sizes(g)
    return iou_from_counts(g, si, sj, empty_score, caller="iou_matrix")
