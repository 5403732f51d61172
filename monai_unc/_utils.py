"""Shared input handling: numpy/torch conversion, validation with clear errors, NaN warnings.

Conventions (docs/design.md): probabilities are ``(B, C, *spatial)`` with ``C >= 2``; samples are
``(S, B, C, *spatial)``; label maps are ``(B, *spatial)`` or ``(B, 1, *spatial)``; outputs follow the
input's library (numpy in, numpy out; torch in, torch out on the same device).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import decimal
import functools
import json
import math
import numbers
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch

from ._frames import first_frame_outside_package as _first_frame_outside_package

if TYPE_CHECKING:  # MONAI is imported where it is used: the nnU-Net export workers never load it
    from monai.utils import MetricReduction

__all__ = [
    "listed",
    "warn_tied",
    "argmax",
    "stated_affine",
    "real_array",
    "check_case_labels",
    "check_nonnegative",
    "foreground_masks",
    "sum_f64",
    "CHANNEL_SUM_SLACK",
    "check_exclusive_channels",
    "padding_frame",
    "uncovered_padding",
    "no_autocast",
    "trapezoid",
    "ArrayLike",
    "PROB_TOL",
    "probability_tolerance",
    "to_tensor",
    "like_input",
    "to_numpy",
    "check_real_dtype",
    "case_vector",
    "case_pair",
    "check_finite",
    "load_nifti",
    "nifti_version",
    "check_probabilities",
    "check_unit_interval",
    "check_labels",
    "per_axis_mm",
    "normalize_spacing",
    "case_spacings",
    "affine_voxel_volume",
    "check_integer",
    "parameter_error",
    "refusing",
    "MAX_SEED",
    "check_seed",
    "cuda_device_indices",
    "network_devices",
    "check_sample_batch_size",
    "plain_module",
    "recompile_after_hooks",
    "is_compiled",
    "label_map_dtype",
    "is_int",
    "is_real",
    "is_finite_real",
    "is_count",
    "is_text_list",
    "label_text",
    "real_number",
    "exceeds",
    "below",
    "num_threads",
    "thread_map",
    "reduce_case_values",
    "check_case_grid",
    "check_call_keywords",
    "check_metric_reduction",
    "distributed_world",
    "sync_case_buffers",
    "main_rank_warnings",
    "buffer_device",
    "warn_nan",
    "stderr_line",
    "IGNITE_EXTRA",
    "require_ignite",
]

ArrayLike = np.ndarray | torch.Tensor

#: tolerance for probabilities outside [0, 1] and for the sum over classes differing from 1 (float32 / float64;
#: lower precisions get a wider one, see :func:`probability_tolerance`)
PROB_TOL = 1e-3
#: multiple of the dtype's machine epsilon in :func:`probability_tolerance`
_EPS_FACTOR = 4


def probability_tolerance(dtype: torch.dtype | np.dtype) -> float:
    """Tolerance of the probability checks for arrays of ``dtype``: ``max(PROB_TOL, 4 * eps(dtype))``.

    Rounding a probability ``p`` to a floating type changes it by at most ``eps / 2 * p`` (relative rounding), so
    rounding every class of a distribution moves its sum by at most ``eps / 2`` whatever the number of classes; a
    softmax computed in that type adds about as much again. ``4 * eps`` covers both with a margin: 1e-3 (the
    floor) for float32 / float64 (and numpy's longdouble), 3.9e-3 for float16 and 0.031 for bfloat16 (whose sums
    are off by up to ~4e-3). ``dtype`` is a torch or a numpy dtype.
    """
    if not isinstance(dtype, torch.dtype):
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            return PROB_TOL
        return max(PROB_TOL, _EPS_FACTOR * float(np.finfo(dtype).eps))
    if not dtype.is_floating_point:
        return PROB_TOL
    return max(PROB_TOL, _EPS_FACTOR * float(torch.finfo(dtype).eps))


def to_tensor(x: Any, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Return ``x`` as a torch tensor without copying where possible (numpy -> CPU tensor).

    MetaTensors are reduced to plain tensors so that arithmetic stays fast. A numpy array in non-native byte order
    (``'>f4'`` on a little-endian machine, e.g. read from a file written elsewhere) or a read-only one (a memmap
    opened ``'r'``, ``np.broadcast_to``), which torch cannot hold, is copied (to native order); so is a
    non-contiguous one or one with a negative stride (a flip, also along an axis of length 1).

    Args:
        x: a tensor, a numpy array, a (nested) list or tuple of numbers, or a number.
        name: the argument's name in error messages.
        dtype: convert to this dtype (None: keep ``x``'s).

    Returns:
        The tensor (sharing a writable, C-contiguous, native-order ``x``'s memory).

    Raises:
        TypeError: naming ``name`` for another type or a dtype other than bool, integer or real floating point:
            text, objects, and complex numbers (a mask ``1 + 0j`` would pass every value check and lose its imaginary
            part in the first cast; :func:`check_real_dtype`).
        ValueError: naming ``name`` for a ragged nested list.

    Example:
        >>> import numpy as np
        >>> to_tensor(np.array([1.5, 2.0], dtype=">f8"), "x")
        tensor([1.5000, 2.0000], dtype=torch.float64)
        >>> to_tensor(torch.ones(2, dtype=torch.complex64), "pred")
        Traceback (most recent call last):
            ...
        TypeError: pred must hold real numbers, got dtype torch.complex64
    """
    if isinstance(x, torch.Tensor):
        t = x.as_tensor() if hasattr(x, "as_tensor") else x
        check_real_dtype(t, name)
    elif isinstance(x, np.ndarray):
        # torch.from_numpy refuses other byte orders with an error naming no argument: native order first
        a = np.ascontiguousarray(_native(_numeric(x, name)))
        if a.ndim != x.ndim:  # ascontiguousarray gives a 0-d array one axis (found by the review of review 64)
            a = a.reshape(x.shape)
        if not a.flags.writeable or any(s < 0 for s in a.strides):
            # found by hostile testing (review 64): torch cannot hold a read-only buffer (np.broadcast_to, a memmap
            # opened 'r'); sharing it warned of undefined behaviour, and an in-place operation wrote through it. A
            # flip along an axis of length 1 keeps a negative stride that numpy calls contiguous and torch refuses
            a = a.copy()
        t = _torch_of(torch.from_numpy, a, name)
    elif isinstance(x, (list, tuple, float, int, np.generic)):
        t = _torch_of(torch.as_tensor, _native(_numeric(_asarray(x, name), name)), name)
    else:
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")
    if dtype is not None:
        t = t.to(dtype)
    return t


def _native(a: np.ndarray) -> np.ndarray:
    """``a`` in the machine's byte order (a copy for a big-endian array on a little-endian machine)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _torch_of(convert: Any, a: np.ndarray, name: str) -> torch.Tensor:
    """``convert(a)`` (``torch.from_numpy`` or ``torch.as_tensor``), or ``TypeError`` naming ``name`` for a dtype torch
    has not (numpy's longdouble)."""
    try:
        return convert(a)
    except TypeError:
        raise TypeError(f"{name} has dtype {a.dtype}, which torch cannot hold; convert it to float64") from None


def _asarray(x: Any, name: str) -> np.ndarray:
    try:
        return np.asarray(x)
    except ValueError as err:  # ragged nested lists
        raise ValueError(f"{name} must be a rectangular array, got a ragged {type(x).__name__}: {err}") from None


def _numeric(a: np.ndarray, name: str) -> np.ndarray:
    """``a`` if its dtype is boolean, integer or real floating point, else ``TypeError`` naming ``name``."""
    check_real_dtype(a, name)
    return a


def check_real_dtype(x: Any, name: str, objects: bool = False) -> None:
    """Refuse an array or tensor whose dtype is not bool, integer or real floating point, naming ``name``.

    The one dtype check of the arrays that enter the package's functions (:func:`to_tensor`, :func:`to_numpy`):
    masks, label maps, probabilities, maps and scores. A complex array is a number to numpy and torch, and one whose
    imaginary part is 0 (``1 + 0j``) passes every value check (0 / 1, integral, in [0, 1]) before a cast drops its
    imaginary part; text and objects are no numbers.

    Args:
        x: a numpy array or a torch tensor (anything else is left to the caller).
        name: the argument's name in the error.
        objects: let a numpy object array through (a list holding ``None`` for an undefined value, which the caller
            reads itself: :func:`real_array`).

    Raises:
        TypeError: ``"<name> must hold real numbers, got dtype <dtype>"`` for complex, text, bytes or (without
            ``objects``) object dtypes.

    Example:
        >>> check_real_dtype(np.array([0, 1]), "pred")
        >>> check_real_dtype(np.array([0, 1 + 0j]), "pred")
        Traceback (most recent call last):
            ...
        TypeError: pred must hold real numbers, got dtype complex128
    """
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
    elif isinstance(x, np.ndarray) and x.dtype.kind not in "biuf" and not (objects and x.dtype.kind == "O"):
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")


def check_tensor(x: Any, name: str) -> torch.Tensor:
    """``x`` itself if it is a torch tensor (a MetaTensor too), else ``TypeError`` naming ``name``.

    The entry check of the functions that take tensors only (the streamed statistics' moments: they work in place
    and on the tensors' device), so that a numpy array is refused by name instead of failing on its first tensor
    method with an ``AttributeError`` (as it did in earlier versions).

    Args:
        x: the value given.
        name: the argument's name in the error.

    Returns:
        ``x``.

    Raises:
        TypeError: ``"<name> must be a torch tensor, got <type>"``.

    Example:
        >>> check_tensor(torch.zeros(2), "mean").shape
        torch.Size([2])
        >>> check_tensor(np.zeros(2), "mean")
        Traceback (most recent call last):
            ...
        TypeError: mean must be a torch tensor, got ndarray (convert it with torch.from_numpy)
    """
    if not isinstance(x, torch.Tensor):
        hint = " (convert it with torch.from_numpy)" if isinstance(x, np.ndarray) else ""
        raise TypeError(f"{name} must be a torch tensor, got {type(x).__name__}{hint}")
    return x


def like_input(result: ArrayLike, reference: Any) -> ArrayLike:
    """Return ``result`` (a tensor or a numpy array) in the library of ``reference``.

    A tensor ``reference`` gives a tensor (a numpy ``result`` is moved to the reference's device); a numpy
    ``reference`` gives a numpy array; for any other reference (lists, scalars) ``result`` is returned as is.
    """
    if isinstance(reference, torch.Tensor):
        if isinstance(result, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(result)).to(reference.device)
        return result
    if isinstance(reference, np.ndarray) and isinstance(result, torch.Tensor):
        return result.detach().cpu().numpy()
    return result


def keep_meta(result: Any, reference: Any) -> Any:
    """``result`` carrying the metadata of ``reference`` when that is a MONAI ``MetaTensor``, else ``result`` as is.

    A tensor ``result`` of a ``MetaTensor`` ``reference`` becomes a ``MetaTensor`` with a copy of its meta (affine,
    file name, ...), applied operations and batch flag; the class is recognised by those attributes (no MONAI import
    here). For results on the reference's grid (a channel axis added or removed): the affine describes the spatial
    axes.
    """
    if not (isinstance(result, torch.Tensor) and isinstance(reference, torch.Tensor)
            and hasattr(reference, "meta") and hasattr(reference, "applied_operations")):
        return result
    out = type(reference)(result, meta=copy.deepcopy(reference.meta))
    out.applied_operations = copy.deepcopy(reference.applied_operations)
    if hasattr(reference, "is_batch"):
        out.is_batch = reference.is_batch
    return out


def stated_affine(affine: Any) -> np.ndarray | None:
    """A MetaTensor's ``(4, 4)`` affine as float64, or None where it states no grid.

    None for an affine of another shape (a batch's ``(B, 4, 4)`` is split by the caller) and for MONAI's default
    identity, which a MetaTensor built without geometry carries and which says nothing about where its voxels lie.
    The one reading of the transforms' and the handlers' same-grid checks.

    Args:
        affine: a tensor or array.

    Returns:
        The ``(4, 4)`` float64 matrix, or None.

    Example:
        >>> stated_affine(torch.eye(4)) is None, float(stated_affine(np.diag([2.0, 2.0, 3.0, 1.0]))[2, 2])
        (True, 3.0)
    """
    a = np.asarray(torch.as_tensor(affine).detach().cpu(), dtype=np.float64)
    return None if a.shape != (4, 4) or np.array_equal(a, np.eye(4)) else a


def to_numpy(x: Any, name: str, objects: bool = False) -> np.ndarray:
    """Return ``x`` as a numpy array (copying from the GPU when needed).

    numpy has no bfloat16: such tensors (autocast inference) come back as float32, which holds every bfloat16 value
    exactly.

    Args:
        x: a numpy array, a torch tensor (any device), a (nested) list or tuple of numbers, or a number.
        name: the argument's name in error messages.
        objects: let an object array through (a list holding ``None`` for an undefined score), for a caller that
            reads it with :func:`real_array`.

    Returns:
        The array (``x`` itself for a numpy array).

    Raises:
        TypeError: naming ``name`` for another type, or a dtype other than bool, integer or real floating point
            (:func:`check_real_dtype`: complex, text, objects).

    Example:
        >>> to_numpy(torch.tensor([0, 1]), "pred")
        array([0, 1])
        >>> to_numpy(np.array([0, 1 + 0j]), "pred")
        Traceback (most recent call last):
            ...
        TypeError: pred must hold real numbers, got dtype complex128
    """
    if isinstance(x, torch.Tensor):
        t = x.as_tensor() if hasattr(x, "as_tensor") else x
        check_real_dtype(t, name)
        t = t.detach()
        if t.dtype == torch.bfloat16:
            t = t.to(torch.float32)
        return t.cpu().numpy()
    if isinstance(x, np.ndarray):
        a = x
    elif isinstance(x, (list, tuple, float, int, np.generic)):
        a = _asarray(x, name)
    else:
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")
    check_real_dtype(a, name, objects=objects)
    return a


def foreground_masks(p: Any) -> Any:
    """The region masks ``p > 0.5`` of sigmoid (Bernoulli) probabilities: the one foreground decision.

    Every place that turns a region's probability into a voxel's label uses this rule: the ``<case>_seg`` and the
    sample label maps that ``monai-unc infer`` writes, ``evaluate``'s segmentation of a case without one, the
    prediction of :meth:`monai_unc.activation.Bernoulli.confidence` (calibration, the masks with a coverage
    guarantee) and the top label of the two-class probabilities ``(1 - p, p)`` (the first maximum wins, as for a
    softmax). A voxel at exactly ``p = 0.5`` is
    therefore background, as in nnU-Net's region-based segmentation and a two-class argmax (MONAI's
    ``AsDiscrete(threshold=0.5)`` writes ``p >= 0.5`` and differs only there).

    Args:
        p: foreground probabilities, numpy array or torch tensor of any shape.

    Returns:
        A boolean array of ``p``'s shape and kind (numpy in, numpy out).

    Raises:
        TypeError: naming ``p`` when it is not a numpy array or torch tensor.

    Example:
        >>> import numpy as np
        >>> from monai_unc.activation import foreground_masks
        >>> foreground_masks(np.array([0.25, 0.5, 0.75])).tolist()
        [False, False, True]
    """
    if not isinstance(p, (np.ndarray, torch.Tensor)):
        raise TypeError(f"p must be a numpy array or torch tensor, got {type(p).__name__}")
    return p > 0.5


def argmax(x: torch.Tensor | np.ndarray, dim: int, keepdim: bool = False) -> torch.Tensor | np.ndarray:
    """``torch.argmax(x, dim)``: the index of the largest value along ``dim``, ties and NaN as in ``torch.argmax``.

    Computed as ``x.max(dim).indices``: the same reduction functor on CPU and CUDA (the first of equal maxima, the first
    NaN before any number), but on the CPU ``torch.argmax`` over a middle axis such as the class axis of ``(B, C,
    *spatial)`` probabilities takes several times longer (0.75 s against 0.12 s for 4 x 160 x 190 x 160 float32 on one
    thread, torch 2.14).

    A numpy array (the nnU-Net export's resampled probabilities) gets ``np.argmax`` (the same ties and NaN), as numpy.

    Args:
        x: the values, any real dtype, any device; a tensor or a numpy array.
        dim: the axis to reduce.
        keepdim: keep ``dim`` with size 1.

    Returns:
        int64 indices of ``x``'s shape without ``dim`` (or with it as 1), of ``x``'s type.

    Example:
        >>> argmax(torch.tensor([[0.2, 0.5, 0.5], [0.9, 0.1, float("nan")]]), dim=1)
        tensor([1, 2])
    """
    if isinstance(x, np.ndarray):  # (ndarray.max takes no ``dim`` and returns no indices)
        return np.argmax(x, axis=dim, keepdims=keepdim).astype(np.int64, copy=False)
    return x.max(dim=dim, keepdim=keepdim).indices


#: dtypes whose float64 sums :func:`sum_f64` takes from NumPy on the CPU
_NUMPY_SUM_DTYPES = (torch.float32, torch.float64, torch.bool, torch.uint8, torch.int16, torch.int32, torch.int64)


def sum_f64(x: torch.Tensor, dim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """``x.sum(dim, dtype=torch.float64)``: the sum over ``dim`` (all axes by default) accumulated in float64.

    On the CPU the sum is NumPy's (pairwise summation, the same float64 accuracy): torch's sum with a dtype
    conversion of a float32 or boolean map takes about ten times as long there (60 ms against 5 ms for 9 million
    float32 values, one thread). Tensors that need a gradient, other dtypes and other devices use torch.

    Args:
        x: the tensor.
        dim: the axis or axes to sum over; None: all.

    Returns:
        float64 sums on ``x``'s device, ``x``'s shape without ``dim``.

    Example:
        >>> sum_f64(torch.tensor([[0.25, 0.5], [1.0, 2.0]]), dim=1)
        tensor([0.7500, 3.0000], dtype=torch.float64)
    """
    if x.device.type == "cpu" and x.dtype in _NUMPY_SUM_DTYPES and not x.requires_grad:
        return torch.from_numpy(np.asarray(np.add.reduce(x.numpy(), axis=dim, dtype=np.float64)))
    return x.sum(dtype=torch.float64) if dim is None else x.sum(dim=dim, dtype=torch.float64)


#: how far from 1 the channel sums of class probabilities may be (:func:`check_exclusive_channels`): a bfloat16 softmax
#: is off by up to ~4e-3, and the MONAI classes pack it in float32, whose own tolerance (1e-3) no longer covers it;
#: multi-label maps are off by far more (0 outside every region, 2 or more where regions overlap)
CHANNEL_SUM_SLACK = 0.05


def check_exclusive_channels(t: torch.Tensor, name: str, ch: int) -> None:
    """Refuse ``C >= 2`` channels that argmax cannot reduce to a label map.

    Those are channels in [0, 1] that do not sum to 1, one-hot maps with voxels where every channel is 0 and integer
    channels other than a one-hot map. Class probabilities and one-hot maps sum to 1 at every voxel (within
    :data:`CHANNEL_SUM_SLACK`: half-precision probabilities, also once packed in float32 by the MONAI classes);
    logits (values outside [0, 1]) are reduced by argmax as they are. Overlapping or empty region masks and sigmoid
    probabilities (multi-label, e.g. BraTS TC / WT / ET, as MONAI's ``ConvertToMultiChannelBasedOnBratsClasses`` and a
    sigmoid network give them) lie in [0, 1] without summing to 1: their argmax merged the background with the first
    region (a voxel outside every region and one inside TC both became label 0).

    Channels that hold integers only (any dtype) outside [0, 1] are label maps stacked along the channel axis (the
    annotations of several raters), no logits: their argmax is the index of a channel, no class.

    Voxels where every channel is 0 around a box of voxels that sum to 1 are the zero padding of class probabilities
    put back on the image grid (MONAI's ``Invertd`` after ``CropForegroundd`` or ``SpatialPadd``): they are accepted,
    and argmax reads them as background. The box's outer layer, which ``Invertd(nearest_interp=False)`` blends
    linearly with those zeros (sums below 1), is accepted too and reduced by argmax (:func:`_frame_edge`) where the
    box has voxels off that layer that sum to 1 (a box at most 2 voxels thick has none: its voxels must sum to 1).
    Where the box holds one-hot voxels only (every value 0 or 1), the zeros are ambiguous: a one-hot map without its
    background channel (``y[:, 1:]``) whose foreground is a box has the same zeros, and argmax would give them the
    class of the first channel, which is no background there. Such channels are refused.

    Args:
        t: the channels, ``(C, *spatial)`` (``ch = 0``) or ``(B, C, *spatial)`` (``ch = 1``).
        name: the argument's name in the message.
        ch: the channel axis.

    Raises:
        ValueError: such channels, naming ``name``.

    Example:
        >>> check_exclusive_channels(torch.tensor([[0.2, 1.0], [0.8, 0.0]]), "probs", 0)  # class probabilities
        >>> check_exclusive_channels(torch.tensor([[0.9, 0.02], [0.03, 0.9]]), "probs", 0)
        Traceback (most recent call last):
        ...
        ValueError: probs has 2 channels in [0, 1] that do not sum to 1 at every voxel (largest deviation 0.07): ...
        >>> check_exclusive_channels(torch.tensor([[0, 1, 2], [2, 1, 0]]), "target", 0)  # two raters' label maps
        Traceback (most recent call last):
        ...
        ValueError: target has 2 channels holding integers in [0, 2]: label maps stacked along the channel axis ...
    """
    v = t.detach()
    if not v.is_floating_point():
        v = v.to(torch.float32)  # bool / integer masks (0 / 1)
    lo, hi = (float(x) for x in torch.aminmax(v))
    tol = max(CHANNEL_SUM_SLACK, probability_tolerance(t.dtype))
    if lo < -tol or hi > 1 + tol:
        if not t.is_floating_point() or _integers_only(v):
            raise ValueError(
                f"{name} has {t.shape[ch]} channels holding integers in [{lo:.6g}, {hi:.6g}]: label maps stacked "
                "along the channel axis (several raters' annotations), not logits (which are not all integers), class "
                "probabilities or a one-hot map, and their argmax is the index of a channel, no class; pass one "
                "label map (a single channel) or a one-hot map of the classes"
            )
        return  # logits (or label scores): argmax is their reduction
    sums = sum_f64(v, ch)
    padded = padding_frame(v.ne(0).any(dim=ch), batched=ch == 1)
    checked = None if padded is None else _box_voxels(padded, sums, ch == 1, tol)
    if checked is not None:  # the zero frame of an inverted crop: argmax reads it as background, as it should
        sums = sums[checked]
    s_lo, s_hi = (float(x) for x in torch.aminmax(sums))
    dev = max(s_hi - 1.0, 1.0 - s_lo)
    if dev > tol:
        raise ValueError(
            f"{name} has {t.shape[ch]} channels in [0, 1] that do not sum to 1 at every voxel (largest deviation "
            f"{dev:.4g}): multi-label masks or sigmoid probabilities (overlapping regions such as BraTS TC / WT / ET, "
            "or masks without a background channel), not class probabilities or a one-hot map, and their argmax is "
            "no label map; score each region's channel as a binary map, or pass a label map"
        )
    if checked is not None and _one_hot_in_frame(v, padded, checked, ch):
        raise ValueError(
            f"{name}: every channel is 0 at {int(padded.sum())} voxel(s) outside a box of one-hot voxels: a one-hot "
            "map without its background channel (y[:, 1:], the foreground of every case a box) and a one-hot map "
            "zero-padded by MONAI's Invertd after a crop (CropForegroundd, SpatialCropd) look alike, and argmax "
            "gives those voxels the class of the first channel, the background only in the second case; pass a label "
            "map (the argmax of a padded one-hot map whose first channel is the background, e.g. "
            "AsDiscreted(argmax=True) after Invertd), or the one-hot map with its background channel"
        )


def _integers_only(v: torch.Tensor) -> bool:
    """Whether every value of the float tensor ``v`` is an integer (a few leading values first: logits rarely are)."""
    flat = v.reshape(-1)
    head = flat[:4096]
    if not bool(torch.equal(head, head.round())):
        return False
    return bool(torch.equal(flat, flat.round()))


def _one_hot_in_frame(v: torch.Tensor, padded: torch.Tensor, checked: torch.Tensor, ch: int) -> bool:
    """Whether a zero-padded case holds only 0 and 1 in its box: a one-hot map, whose zeros may be no padding.

    ``padded`` is the zero frame, ``checked`` the box's voxels (:func:`_box_voxels`); each case is looked at on its
    own, so that a one-hot case beside a case of class probabilities in the same batch is still found.
    """
    zero_one = ((v == 0) | (v == 1)).all(dim=ch)
    if ch == 0:
        return bool(zero_one[checked].all())
    return any(bool(p.any()) and bool(z[c].all()) for p, z, c in zip(padded, zero_one, checked))


def _box_voxels(padded: torch.Tensor, sums: torch.Tensor, batched: bool, tol: float) -> torch.Tensor:
    """The voxels of a zero-padded map whose class sums must be 1.

    They are the box inside the zero frame ``padded``, less its outer layer where that layer sums to at most
    ``1 + tol`` (the blend of ``Invertd(nearest_interp=False)``, :func:`_frame_edge`) and the case's box has voxels
    off that layer; never empty (each case's box has voxels).

    Found by hostile review: a box at most 2 voxels thick lies on its outer layer entirely, no voxel was left to
    check, and the check crashed on valid class probabilities; the voxels of such a box must sum to 1 themselves.
    """
    inside = ~padded
    edge = _frame_edge(padded, batched=batched)
    if edge is None or not bool((sums[edge] <= 1.0 + tol).all()):
        return inside
    core = inside & ~edge
    cases = core if batched else core[None]
    has_core = cases.reshape(cases.shape[0], -1).any(dim=1)
    has_core = has_core.view(-1, *([1] * (cases.ndim - 1)))
    blended = edge & (has_core if batched else has_core[0])
    return inside & ~blended


def _frame_edge(padded: torch.Tensor, batched: bool) -> torch.Tensor | None:
    """The voxels next to a padding frame (one voxel, any direction) that are not in it, or None for 1D or >3D grids.

    Found by hostile testing: ``Invertd(nearest_interp=False)`` (as Model Zoo bundles invert ``pred``) interpolates
    the probabilities of a ``CropForegroundd`` box linearly with the zeros of the frame around it, so that layer sums
    to less than 1, and ``ErrorMapd`` refused the inverted prediction as "multi-label masks or sigmoid probabilities".
    """
    cases = (padded if batched else padded[None]).to(torch.float32)
    pool = {2: torch.nn.functional.max_pool2d, 3: torch.nn.functional.max_pool3d}.get(cases.ndim - 1)
    if pool is None:
        return None
    near = pool(cases[:, None], kernel_size=3, stride=1, padding=1)[:, 0] > 0
    edge = near & ~(cases > 0)
    return edge if batched else edge[0]


def uncovered_padding(p: torch.Tensor, sums: torch.Tensor, channel_dim: int, tol: float) -> int:
    """The voxels of a zero padding around class probabilities (an undone crop), or 0 when that is not what ``p`` is.

    MONAI's ``Invertd`` undoes a ``CropForegroundd`` / ``SpatialCropd`` by padding with zeros: every class is 0 outside
    the crop's box (and, with ``nearest_interp=False``, the box's outer layer is blended with those zeros: sums below
    1). Such probabilities are read as that, not as sigmoid probabilities or logits, when the zero voxels form a frame
    around a full box (:func:`padding_frame`), the box's outer layer sums to at most ``1 + tol`` and every other voxel
    of the box sums to 1 within ``tol`` (every voxel of a box at most 2 voxels thick, which has no other voxel).

    Args:
        p: the values, in [0, 1], with the classes along ``channel_dim``.
        sums: ``p`` summed over ``channel_dim`` (float64).
        channel_dim: the class axis; the axes before it are cases (``(B, C, *spatial)``: 1), the axes after it space.
        tol: the tolerance of a class sum.

    Returns:
        The number of padding voxels (0: the zero voxels, if any, are no padding of class probabilities).

    Example:
        >>> p = torch.zeros(2, 5)
        >>> p[0, 1:4] = torch.tensor([0.2, 0.7, 1.0]); p[1, 1:4] = 1 - p[0, 1:4]
        >>> uncovered_padding(p, sum_f64(p, 0), 0, 1e-3)
        2
    """
    nonzero = p.ne(0).any(dim=channel_dim)
    batched = channel_dim > 0
    if channel_dim > 1:  # several case axes (samples of cases): one
        nonzero = nonzero.reshape(-1, *nonzero.shape[channel_dim:])
        sums = sums.reshape(-1, *sums.shape[channel_dim:])
    padded = padding_frame(nonzero, batched=batched)
    if padded is None:
        return 0
    rest = sums[_box_voxels(padded, sums, batched, tol)]
    if rest.numel() and float((rest - 1.0).abs().max()) > tol:
        return 0
    return int(padded.sum())


def padding_frame(nonzero: torch.Tensor, batched: bool) -> torch.Tensor | None:
    """The voxels of a zero padding: every channel 0 outside the bounding box of each case's other voxels, or None.

    ``nonzero``: whether some channel is non-zero, ``(B, *spatial)`` when ``batched`` else ``(*spatial)``. The zero
    voxels are a padding when, in every case, they all lie outside the box of the non-zero voxels (the box is full);
    zero voxels inside it (the background of region masks without a background channel) are no padding.

    Args:
        nonzero: see above.
        batched: whether ``nonzero`` has a leading case axis.

    Returns:
        The padding voxels (``nonzero``'s shape, bool), or None when the zero voxels are no padding (or there are none).

    Example:
        >>> padding_frame(torch.tensor([False, True, True, False]), batched=False).tolist()
        [True, False, False, True]
        >>> padding_frame(torch.tensor([True, False, True]), batched=False) is None
        True
    """
    cases = nonzero if batched else nonzero[None]
    if bool(cases.all()):
        return None
    for case in cases:
        count = int(case.sum())
        if count == 0:
            return None  # a case with no non-zero voxel: nothing says it is padded probabilities
        volume = 1
        for ax in range(case.ndim):  # the box's extent along each axis, from the axis' profile (no voxel index list)
            hit = torch.nonzero(case.any(dim=tuple(a for a in range(case.ndim) if a != ax)))[:, 0]
            volume *= int(hit[-1] - hit[0]) + 1
        if volume != count:
            return None
    return ~nonzero


@contextlib.contextmanager
def no_autocast(device: torch.device) -> Iterator[None]:
    """Run a block in full precision even inside ``torch.autocast``.

    Autocast casts the float32 operands of matrix products and convolutions to float16 / bfloat16: products over
    millions of logits overflow or lose the small covariance terms, and the exact 0/1 counts of
    :func:`monai_unc.metrics.mask_gram` (float32 sums of integers below 2^24) were rounded to 8 bits (49906 voxels
    came back as 49920 under CPU autocast). Found by hostile testing.

    Args:
        device: the device of the tensors of the block (its type picks the autocast context to switch off).

    Yields:
        None; the block runs with autocast off on ``device``'s type.

    Example:
        >>> a = torch.full((1, 300), 1.0)
        >>> with torch.autocast("cpu", dtype=torch.bfloat16), no_autocast(a.device):
        ...     (a @ a.T).dtype, float(torch.full((1, 257), 1.0) @ torch.full((257, 1), 1.0))
        (torch.float32, 257.0)
    """
    if device.type in ("cuda", "cpu", "xpu", "mps"):
        with torch.autocast(device_type=device.type, enabled=False):
            yield
    else:  # pragma: no cover - other backends have no autocast
        yield


def trapezoid(y: np.ndarray, x: np.ndarray) -> float:
    """The trapezoid rule of ``numpy.trapezoid(y, x)`` for 1-D arrays, on every supported numpy.

    ``numpy.trapezoid`` is new in numpy 2.0 (``numpy.trapz`` before, removed since): the declared ``numpy>=1.24``
    had no ``trapezoid``, and the QU-BraTS score and the nDSC retention area failed there with an ``AttributeError``
    (found by testing the declared lower bounds). The same operations in the same order as numpy's, so the same
    float bits: ``sum(diff(x) * (y[1:] + y[:-1]) / 2)``, signed (a descending ``x`` gives a negative area).

    Args:
        y: the values, 1-D.
        x: their abscissae, 1-D, the length of ``y``.

    Returns:
        The area, a Python float (0.0 for fewer than two points).

    Example:
        >>> trapezoid(np.array([0.0, 1.0, 1.0]), np.array([0.0, 0.5, 1.0]))
        0.75
    """
    y, x = np.asarray(y), np.asarray(x)
    return float(np.add.reduce(np.diff(x) * (y[1:] + y[:-1]) / 2.0))


def check_finite(x: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` if ``x`` holds NaN or infinite values."""
    x = x.detach()
    if not x.is_floating_point() or x.numel() == 0:
        return
    lo, hi = torch.aminmax(x)  # NaN propagates: both finite only when every value is (one fast reduction)
    if not bool(torch.isfinite(lo) & torch.isfinite(hi)):
        n_bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} contains {n_bad} non-finite value(s) (NaN or inf)")


def _check_probability_map(p: torch.Tensor, name: str, channel_dim: int, min_ndim: int, tol: float,
                           classes: bool) -> None:
    """The checks of :func:`check_probabilities` (``classes=True``) and :func:`check_unit_interval` (``False``)."""
    if not p.is_floating_point():
        raise TypeError(f"{name} must be a floating point array of probabilities, got dtype {p.dtype}")
    if p.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions ((B, C, *spatial) probabilities), "
            f"got shape {tuple(p.shape)}"
        )
    if classes and p.shape[channel_dim] < 2:
        raise ValueError(
            f"{name} must have at least 2 classes along dim {channel_dim} (binary tasks carry both "
            f"channels), got shape {tuple(p.shape)}"
        )
    if p.shape[channel_dim] < 1 or p.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(p.shape)})")
    lo_t, hi_t = torch.aminmax(p.detach())  # NaN propagates: both finite only when every value is
    lo, hi = float(lo_t), float(hi_t)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        check_finite(p, name)  # raises, counting the non-finite values
    if lo < -tol or hi > 1 + tol:
        # the hint about logits goes with the sum check when there is one
        hint = "" if classes else "; pass probabilities, not logits"
        raise ValueError(f"{name} must lie in [0, 1], got values in [{lo:.4g}, {hi:.4g}]{hint}")
    if not classes:
        return
    sums = sum_f64(p.detach(), channel_dim)
    s_lo, s_hi = torch.aminmax(sums)
    dev = max(float(s_hi) - 1.0, 1.0 - float(s_lo))  # the largest |sum - 1|, without a map of the deviations
    if dev > tol and float(s_lo) == 0.0:
        uncovered = uncovered_padding(p.detach(), sums, channel_dim, tol)
        if uncovered:
            # found by review: such probabilities (an undone crop) were refused as sigmoid probabilities or logits
            raise ValueError(
                f"{name}: every class is 0 at {uncovered} voxel(s) around a box of class probabilities (largest "
                f"deviation of a class sum from 1: {dev:.4g}): the zero padding that MONAI's Invertd leaves where a "
                "crop (CropForegroundd, SpatialCropd, ...) removed voxels, which holds no probabilities; give those "
                "voxels to the background (class 0 with probability 1) and divide each voxel's classes by their "
                "total (monai_unc.workflows.infer.restore_uncovered does both; monai-unc infer does it for a "
                "bundle's crop), or score the probabilities before they are inverted"
            )
    if dev > tol:  # every value lies in [0, 1] here: per-channel (sigmoid) probabilities more likely than logits
        raise ValueError(
            f"{name} must sum to 1 over the class dimension {channel_dim} (tolerance {tol}), "
            f"largest deviation {dev:.4g}: its channels lie in [0, 1] but are no class probabilities; per-channel "
            "sigmoid probabilities (overlapping regions, a multi-label model) need the multi-label path "
            "(activation='sigmoid' on the logits, multilabel=True where the function takes it; a metric without "
            "that option, such as the calibration metrics, scores each region as a binary task with "
            "monai_unc.regions.per_region), and logits their activation (pass probabilities, not logits)"
        )


def check_probabilities(
    p: torch.Tensor, name: str = "probs", channel_dim: int = 1, min_ndim: int = 3, tol: float | None = None
) -> None:
    """Validate class probabilities along ``channel_dim``.

    Raises ``ValueError`` naming ``name`` when the tensor has too few dimensions, fewer than two
    classes, an empty volume, non-finite values, values outside ``[0, 1]`` (beyond ``tol``), or when
    the classes do not sum to 1 (beyond ``tol``). ``tol`` defaults to :func:`probability_tolerance` of the
    dtype (1e-3 for float32 / float64; wider for float16 and bfloat16, whose rounding moves sums by more).
    """
    p = p.detach()
    _check_probability_map(p, name, channel_dim, min_ndim, probability_tolerance(p.dtype) if tol is None else tol,
                           classes=True)


def check_unit_interval(
    p: torch.Tensor, name: str = "probs", channel_dim: int = 1, min_ndim: int = 3, tol: float = PROB_TOL
) -> None:
    """Validate multi-label (per-channel Bernoulli) probabilities: values in ``[0, 1]``, no sum constraint.

    Raises ``ValueError`` naming ``name`` when the tensor has too few dimensions, no channel, an empty volume,
    non-finite values or values outside ``[0, 1]`` (beyond ``tol``); ``TypeError`` for non-float dtypes.
    """
    _check_probability_map(p.detach(), name, channel_dim, min_ndim, tol, classes=False)


def check_labels(
    labels: torch.Tensor, name: str = "labels", num_classes: int | None = None, bounds: bool = True
) -> torch.Tensor:
    """Validate an integer label map and return it as int64.

    Float arrays are accepted when every value is integral (label maps read from NIfTI are often float). With
    ``bounds=False`` the range (non-negative, below ``num_classes``) is left to the caller, which must check it where
    it reads the labels (a fused kernel that counts the labels outside the range). A uint64 label of ``2**63`` or more
    (which int64 cannot hold) is refused with its true value, whatever ``bounds``. A complex map is a ``TypeError``
    naming ``name``: the cast to int64 dropped the imaginary part and truncated the real one (labels 0.1 + 1j, 0.5 and
    0.9 read as background in earlier versions).
    """
    if labels.is_complex():
        raise TypeError(f"{name} must be a real-valued label map, got dtype {labels.dtype}")
    if labels.is_floating_point():
        check_finite(labels, name)
        if not bool((labels == labels.round()).all()):
            raise ValueError(f"{name} must hold integer class labels, got non-integral values")
    elif labels.dtype == torch.bool:
        labels = labels.to(torch.int64)
    if labels.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(labels.shape)})")
    if labels.dtype == torch.uint64:
        # int64 would wrap labels of 2**63 and above to negative numbers (and torch has no min / max for uint64):
        # their bits read as int64 are negative, the true value is that plus 2**64
        signed = labels.view(torch.int64)
        wrapped = signed < 0
        if bool(wrapped.any()):
            top = int(signed[wrapped].max()) + 2**64
            raise ValueError(f"{name} holds label {top} (uint64), above the largest class index a label map can hold "
                             f"(2**63 - 1 = {2**63 - 1}); relabel it to consecutive labels first")
    labels = labels.to(torch.int64)
    if not bounds:
        return labels
    lo, hi = (int(v) for v in torch.aminmax(labels))  # one read of the labels for both bounds
    if lo < 0:
        raise ValueError(f"{name} must be non-negative class indices, got minimum {lo}")
    if num_classes is not None and hi >= num_classes:
        raise ValueError(f"{name} holds class {hi} but only {num_classes} classes are present")
    return labels


def equals_label(labels: torch.Tensor, value: int) -> torch.Tensor:
    """Where ``labels`` equal the integer ``value`` exactly, whatever their dtype (e.g. to find ``ignore_index``).

    ``labels == value`` casts a Python int to the labels' dtype first: with uint8 labels 256 wraps to 0 and -1 to
    255, so such a comparison matched (and left out) voxels of another label. Here a value the dtype cannot hold
    matches no voxel; floating-point labels are compared in float64 with a value that float64 holds exactly.

    Args:
        labels: a label tensor of any real dtype (integer, floating point or bool).
        value: the integer label value.

    Returns:
        A bool tensor of ``labels``' shape (on its device).

    Example:
        >>> y = torch.tensor([0, 1, 255], dtype=torch.uint8)
        >>> (y == 256).tolist(), equals_label(y, 256).tolist()  # torch wraps 256 to 0
        ([True, False, False], [False, False, False])
        >>> equals_label(y, -1).tolist(), equals_label(y, 255).tolist()
        ([False, False, False], [False, False, True])
    """
    value = int(value)
    if labels.dtype == torch.bool:
        return labels == bool(value) if value in (0, 1) else torch.zeros_like(labels, dtype=torch.bool)
    if labels.is_floating_point():
        if float(value) != value:  # float64 cannot hold it: no float equals it
            return torch.zeros_like(labels, dtype=torch.bool)
        return labels.to(torch.float64) == float(value)
    info = torch.iinfo(labels.dtype)
    if not info.min <= value <= info.max:
        return torch.zeros_like(labels, dtype=torch.bool)
    return labels == value


def holds_bool(value: Any) -> bool:
    """Whether ``value`` is a bool or holds one (a bool array or tensor, a sequence with a bool in it).

    ``True`` converts to 1.0: a spacing or a length given as ``True`` would be read as 1 mm without a word.
    """
    if isinstance(value, (bool, np.bool_)):
        return True
    if isinstance(value, torch.Tensor):
        return value.dtype == torch.bool
    if isinstance(value, np.ndarray):
        return value.dtype == np.bool_ or (value.dtype == object and any(holds_bool(v) for v in value.ravel()))
    if isinstance(value, (list, tuple)):
        return any(holds_bool(v) for v in value)
    return False


def holds_non_real(value: Any) -> bool:
    """Whether ``value`` is a text or a complex number, or holds one (a sequence, an array or a tensor).

    ``float("2")`` is 2.0 and numpy reads ``["0.5", "2"]`` as numbers: a length given as text would be taken without a
    word; a complex one would lose its imaginary part.

    Example:
        >>> holds_non_real("2"), holds_non_real([0.5, "2"]), holds_non_real(np.array([1 + 0j]))
        (True, True, True)
        >>> holds_non_real([0.5, 2]), holds_non_real(torch.tensor([0.5, 2.0]))
        (False, False)
    """
    if isinstance(value, (str, bytes, complex, np.complexfloating)):
        return True
    if isinstance(value, torch.Tensor):
        return value.is_complex()
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "USc" or (value.dtype == object and any(holds_non_real(v) for v in value.ravel()))
    if isinstance(value, (list, tuple)):
        return any(holds_non_real(v) for v in value)
    return False


def _mm_array(value: Any, message: str) -> np.ndarray:
    """``value`` (numbers: a scalar, a sequence, an array or a tensor on any device) as a float64 array;
    ``ValueError(message)`` for anything else, a bool or a text among them included (see :func:`holds_bool`,
    :func:`holds_non_real`)."""
    if holds_bool(value) or holds_non_real(value):
        raise ValueError(message)
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(message) from None


def per_axis_mm(
    value: float | Sequence[float] | np.ndarray, ndim: int, name: str, count_note: str = ""
) -> tuple[float, ...]:
    """A length in mm for every spatial axis: one number for all axes, or one number per axis.

    Args:
        value: a number (Python or numpy, or a 0-d array or tensor), or ``ndim`` numbers (a sequence, an array or a
            tensor).
        ndim: the number of spatial axes.
        name: the argument's name in the errors.
        count_note: added inside the parenthesis of the error on a wrong count (``", mm"``).

    Returns:
        ``ndim`` floats; their range is the caller's to check.

    Raises:
        ValueError: when ``value`` is neither a number nor ``ndim`` numbers (a bool or a text such as ``"2"`` is not a
            number here).
    """
    values = _mm_array(value, f"{name} must be a number or one number per spatial axis (mm), got {value!r}")
    if values.ndim == 0:  # a number, also as a 0-d array or tensor
        return (float(values),) * ndim
    if values.size != ndim:
        raise ValueError(f"{name} must have {ndim} values (one per spatial axis{count_note}), got {values.size}")
    return tuple(float(v) for v in values.ravel())


def normalize_spacing(spacing: float | Sequence[float] | np.ndarray, ndim: int, name: str = "spacing") -> tuple:
    """Return per-axis spacing in mm as a tuple of ``ndim`` positive floats."""
    sp = per_axis_mm(spacing, ndim, name)
    if not all(np.isfinite(s) and s > 0 for s in sp):
        raise ValueError(f"{name} must be positive and finite (mm per axis), got {sp}")
    return sp


def affine_voxel_volume(affine: Any, ndim: int = 3) -> float:
    """The volume (mm^3; the area of a 2-D grid) of one voxel of the grid of ``affine``: ``|det A|``.

    ``A`` is the ``(3, ndim)`` block of the voxel -> world affine that maps a voxel step to mm (its first ``ndim``
    columns); the measure of the parallelepiped it spans is ``|det A|`` for a volume and ``sqrt(det(A^T A))`` for a
    2-D grid in 3-D space. This holds for any grid, also one whose axes are not orthogonal (a sheared affine, e.g.
    gantry-tilted CT), where the product of the voxel sizes (the column norms) overstates the volume. A spacing
    ``(s_1, ..., s_d)`` is the affine ``diag(s_1, ..., s_d, 1)``, whose volume is the product of the spacing.

    Args:
        affine: the ``(d + 1, d + 1)`` voxel -> world matrix (mm), ``d >= ndim`` (a 4 x 4 NIfTI affine of a 2-D
            image included).
        ndim: the number of spatial axes of the grid.

    Returns:
        The voxel volume as a float (NaN for an affine holding NaN).

    Example:
        >>> affine_voxel_volume(np.diag([0.5, 0.5, 2.0, 1.0]))
        0.5
    """
    a = np.asarray(affine, dtype=np.float64)
    rows = min(a.shape[0] - 1, 3) if a.shape[0] > ndim else a.shape[0]
    block = a[:rows, :ndim]
    if block.shape[0] == block.shape[1] and not np.any(block - np.diag(np.diag(block))):
        return float(np.prod(np.abs(np.diag(block))))  # a diagonal matrix: the product of the voxel sizes, exactly
    if block.shape[0] == block.shape[1]:
        return float(abs(np.linalg.det(block)))
    return float(np.sqrt(abs(np.linalg.det(block.T @ block))))


def case_spacings(spacing: Any, n_cases: int, ndim: int, name: str = "spacing") -> list[tuple]:
    """Spacing (mm per axis) of each of ``n_cases`` cases: a scalar or per-axis value shared by all, or one row per
    case (``(n_cases, ndim)``); each as :func:`normalize_spacing` returns it."""
    arr = _mm_array(spacing, f"{name} must be a number, one number per axis or one row per case (mm), got {spacing!r}")
    if arr.ndim == 2:
        if arr.shape[0] != n_cases:
            raise ValueError(f"{name} has {arr.shape[0]} rows but there are {n_cases} cases")
        return [normalize_spacing(row, ndim, name) for row in arr]
    sp = normalize_spacing(arr, ndim, name)
    return [sp] * n_cases


#: the attribute of an exception that names the parameter whose value it refuses (:func:`parameter_error`)
PARAMETER_ATTRIBUTE = "parameter"
#: the attribute of an exception that lists the other parameters its message names (:func:`parameter_error`)
OTHER_PARAMETERS_ATTRIBUTE = "other_parameters"

_E = TypeVar("_E", bound=BaseException)


def parameter_error(error: _E, name: str, others: Sequence[str] = ()) -> _E:
    """``error`` marked as refusing the value of the parameter ``name`` (its message names it).

    The Python API names its parameters in messages (``n_bins must be at most 4096``); the command line names the
    option a user typed (``--n-bins must be ...``). Marking the error, rather than reading the message, lets
    :mod:`monai_unc.cli` find the option through its parser (the option whose destination is the parameter) and
    rewrite only the leading name, never a word of a path, a file's field or an explanation that happens to match.

    Args:
        error: the exception to raise.
        name: the parameter as messages name it; an index or a key after it (``class_names[1]``) is not part of the
            parameter (``class_names``).
        others: the other parameters the message names, each as a word of its own, that the refused value is
            measured against (``seg_label_values ... outside the 4 classes of num_classes``): the command line
            names their options too (``--num-classes``).

    Returns:
        ``error``, with the attribute ``parameter`` set to the parameter's name (and ``other_parameters`` to the
        tuple of ``others``).

    Example:
        >>> e = parameter_error(ValueError("n_bins must be at most 4096, got 5000"), "n_bins")
        >>> e.parameter, str(e)
        ('n_bins', 'n_bins must be at most 4096, got 5000')
        >>> parameter_error(ValueError("class_names[1] must be text"), "class_names[1]").parameter
        'class_names'
    """
    setattr(error, PARAMETER_ATTRIBUTE, name.split("[", 1)[0])
    setattr(error, OTHER_PARAMETERS_ATTRIBUTE, tuple(others))
    return error


@contextlib.contextmanager
def refusing(name: str) -> Iterator[None]:
    """Mark a ``ValueError``, ``TypeError`` or ``OSError`` raised inside as refusing the parameter ``name``.

    For a check whose message names the parameter in its own words (``predictions folder not found: x``) or is about
    the parameter's value (``output folder x lies inside the input folder y``): :func:`parameter_error` on the error
    as raised, which the command line writes with the option (``--predictions folder not found: x``). An error that
    a check inside already marked keeps its parameter: the innermost check knows best what it refuses (reading a
    ``--rule`` file also reads the ``--trusted-keys`` its signature is checked against).

    Args:
        name: the parameter whose value the checks inside refuse.

    Example:
        >>> try:
        ...     with refusing("output"):
        ...         raise ValueError("output folder o lies inside the input folder i")
        ... except ValueError as e:
        ...     print(e.parameter, "|", e)
        output | output folder o lies inside the input folder i
        >>> try:
        ...     with refusing("rule"):
        ...         raise parameter_error(ValueError("--trusted-keys k.pub: no such file or folder"), "trusted_keys")
        ... except ValueError as e:
        ...     print(e.parameter)
        trusted_keys
    """
    try:
        yield
    except (ValueError, TypeError, OSError) as e:
        if getattr(e, PARAMETER_ATTRIBUTE, None):  # marked by a check inside: kept
            raise
        raise parameter_error(e, name) from None


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a ``bool`` if it is one (Python or numpy); ``TypeError`` naming ``name`` otherwise (``"yes"``,
    1, None), so that a truthy string never switches an option on."""
    if not isinstance(value, (bool, np.bool_)):
        raise parameter_error(TypeError(f"{name} must be True or False, got {value!r}"), name)
    return bool(value)


def check_callable(value: Any, name: str, optional: bool = True) -> Any:
    """``value`` if it is callable (or None when ``optional``); ``TypeError`` naming ``name`` otherwise, so that a
    hook given as data fails once, before any work, instead of once per case."""
    if not (callable(value) or (optional and value is None)):
        raise TypeError(f"{name} must be callable{' or None' if optional else ''}, got {type(value).__name__}")
    return value


def check_integer(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` as an ``int`` if it is an integer (not a bool) of at least ``minimum``; ``ValueError`` naming
    ``name`` otherwise (a float such as 2.5, a string, ``None``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        kind = {1: "a positive integer", 0: "a non-negative integer"}.get(minimum, f"an integer >= {minimum}")
        raise parameter_error(ValueError(f"{name} must be {kind}, got {value!r}"), name)
    return int(value)


def check_sample_batch_size(value: Any, name: str = "sample_batch_size") -> int | str:
    """A sample batch size setting: ``"auto"``, or a Python or numpy integer ``>= 1`` (returned as an ``int``).

    ``ValueError`` naming ``name`` otherwise (0, 2.5, ``"4"``, True). Found by hostile testing: the inferers refused
    ``numpy.int64(4)`` with "must be 'auto' or an integer >= 1, got np.int64(4)", which the command lines' settings
    (``workflows.factory``) accept.

    Example:
        >>> import numpy as np
        >>> check_sample_batch_size("auto"), check_sample_batch_size(np.int64(4))
        ('auto', 4)
    """
    if isinstance(value, str) and value == "auto":
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 1:
        raise parameter_error(ValueError(f"{name} must be 'auto' or an integer >= 1, got {value!r}"), name)
    return int(value)


@contextlib.contextmanager
def seeded_rng(seed: int, devices: Sequence[torch.device | int]) -> Iterator[None]:
    """A private random stream: the CPU generator and those of the CUDA ``devices`` seeded, all restored afterwards.

    Draws as after ``torch.manual_seed(seed)`` on those generators, but seeds no other: ``torch.manual_seed`` reseeds
    every GPU (and, before CUDA is initialised, queues that reseeding for its initialisation), while
    ``torch.random.fork_rng`` restores only the devices it is given, so a seeded call on the CPU left the caller's GPU
    streams reseeded (in earlier versions). A call on the CPU alone (no CUDA device) holds :class:`PortableDraws`:
    its dropout masks are the same on every CPU (torch's own may draw with Intel MKL's generator on an Intel CPU).

    Args:
        seed: the seed (checked by :func:`check_seed`).
        devices: the CUDA devices the call draws on (``torch.device`` or indices; other device types are ignored):
            the input's, the windows' and those of the network's weights (:func:`network_devices`).

    Yields:
        Nothing; inside, the listed generators are seeded.

    Example:
        >>> import torch
        >>> from monai_unc._utils import seeded_rng
        >>> state = torch.get_rng_state()
        >>> with seeded_rng(3, []):
        ...     a = torch.rand(2)
        >>> with seeded_rng(3, []):
        ...     b = torch.rand(2)
        >>> bool(torch.equal(a, b)), bool(torch.equal(state, torch.get_rng_state()))
        (True, True)
    """
    cuda = cuda_device_indices(devices)
    with torch.random.fork_rng(devices=cuda), (PortableDraws() if not cuda else contextlib.nullcontext()):
        torch.default_generator.manual_seed(seed)
        for i in cuda:
            torch.cuda.default_generators[i].manual_seed(seed)
        yield


#: the masks' constant of alpha dropout (SELU's alpha times its scale; ATen's ``_dropout_impl``)
_ALPHA_DROPOUT = 1.7580993408473766


def _call_arg(args: tuple, kwargs: dict, i: int, name: str, default: Any) -> Any:
    """Argument ``i`` (``name``) of a call, or ``default``."""
    return args[i] if len(args) > i else kwargs.get(name, default)


def _base(x: torch.Tensor) -> torch.Tensor:
    """``x`` as a plain tensor (a subclass such as MONAI's ``MetaTensor`` viewed as ``torch.Tensor``)."""
    return x if type(x) is torch.Tensor else x.as_subclass(torch.Tensor)


def _plain_cpu(x: Any) -> bool:
    """``x`` is a dense, unquantized CPU tensor."""
    return (isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.layout == torch.strided
            and not x.is_quantized and not x.is_nested)


def _portable_dropout_applies(x: Any, p: Any, train: Any, feature: bool) -> bool:
    """Whether torch's dropout of ``x`` draws a mask on the CPU (else torch's own call: no draw, or its error)."""
    return (_plain_cpu(x) and x.is_floating_point() and isinstance(p, numbers.Real) and not isinstance(p, bool)
            and 0.0 < float(p) < 1.0 and isinstance(train, bool) and train and x.numel() > 0
            and (not feature or x.dim() >= 2))


def _portable_dropout(x: Any, p: Any, train: Any, *, feature: bool, alpha: bool, inplace: bool) -> Any:
    """ATen's CPU dropout (``_dropout_impl``) with its mask drawn by ``bernoulli_`` of a tensor probability;
    NotImplemented where torch draws nothing or refuses the call (torch's own call then)."""
    if not _portable_dropout_applies(x, p, train, feature):
        return NotImplemented
    p = float(p)
    if feature:  # one draw per (batch, channel): ATen's make_feature_noise
        noise = torch.empty((x.shape[0], x.shape[1]) + (1,) * (x.dim() - 2), dtype=x.dtype, device=x.device)
    else:
        noise = torch.empty_like(_base(x))
    noise.bernoulli_(torch.tensor(1.0 - p, dtype=torch.float64))
    if alpha:
        a = 1.0 / math.sqrt((_ALPHA_DROPOUT * _ALPHA_DROPOUT * p + 1) * (1 - p))
        b = noise.add(-1).mul_(_ALPHA_DROPOUT * a).add_(_ALPHA_DROPOUT * a * p)
        noise.mul_(a)
        return (x.mul_(noise) if inplace else x.mul(noise)).add_(b)
    noise.div_(1.0 - p)
    return x.mul_(noise) if inplace else x.mul(noise)


def _dropout_handler(feature: bool | tuple[int, ...], alpha: bool, inplace: bool | None,
                     names: tuple[str, str] = ("p", "training"), train_default: bool | None = True) -> Callable:
    """The handler of a dropout function ``(input, p, training[, inplace])``.

    Args:
        feature: False (element-wise), True (channel-wise, any input of 2 or more dimensions: ``torch.feature_dropout``,
            ``F.feature_alpha_dropout``) or the input dimensions of a channel-wise dropout with a batch axis, then
            without one (``F.dropout3d``: ``(5, 4)``); torch's own call for other dimensions (it warns or refuses).
        alpha: alpha dropout.
        inplace: in place (``torch.dropout_``), or None: the call's ``inplace`` argument (``torch.nn.functional``).
        names: the names of the probability and training arguments.
        train_default: the training argument's default (None: required).
    """

    def handler(*args: Any, **kwargs: Any) -> Any:
        x = _call_arg(args, kwargs, 0, "input", None)
        p = _call_arg(args, kwargs, 1, names[0], 0.5 if train_default is not None else None)
        train = _call_arg(args, kwargs, 2, names[1], train_default)
        in_place = bool(_call_arg(args, kwargs, 3, "inplace", False)) if inplace is None else inplace
        if not isinstance(feature, tuple) or not isinstance(x, torch.Tensor):
            return _portable_dropout(x, p, train, feature=bool(feature), alpha=alpha, inplace=in_place)
        if x.dim() == feature[0]:
            return _portable_dropout(x, p, train, feature=True, alpha=alpha, inplace=in_place)
        if len(feature) > 1 and x.dim() == feature[1] and _portable_dropout_applies(x, p, train, True):
            # no batch axis: torch adds one, then removes it
            one = x.unsqueeze_(0) if in_place else x.unsqueeze(0)
            out = _portable_dropout(one, p, train, feature=True, alpha=alpha, inplace=in_place)
            return out.squeeze_(0) if in_place else out.squeeze(0)
        return NotImplemented

    return handler


def _scalar_bernoulli(inplace: bool) -> Callable:
    """The handler of ``Tensor.bernoulli_(p)`` (``inplace``) or ``torch.bernoulli(input, p)`` with a number ``p`` and
    no generator of its own."""

    def handler(*args: Any, **kwargs: Any) -> Any:
        x = _call_arg(args, kwargs, 0, "input", None)
        p = _call_arg(args, kwargs, 1, "p", 0.5 if inplace else None)
        if (kwargs.get("generator") is not None or set(kwargs) - {"input", "p", "generator"}
                or not _plain_cpu(x) or isinstance(p, (torch.Tensor, bool)) or not isinstance(p, numbers.Real)
                or not 0.0 <= float(p) <= 1.0 or (x.requires_grad and torch.is_grad_enabled())):
            return NotImplemented  # torch's own call (a draw recorded by autograd: its own backward node)
        prob = torch.tensor(float(p), dtype=torch.float64)
        if inplace:
            return x.bernoulli_(prob)
        # a new contiguous tensor of the input's class, as ATen's bernoulli(input, p) makes it
        # (LEGACY_CONTIGUOUS_MEMORY_FORMAT)
        return torch.empty_like(x, memory_format=torch.contiguous_format).bernoulli_(prob)

    return handler


def _draw_handlers() -> dict[Callable, Callable]:
    """The functions :class:`PortableDraws` draws for, with their handlers."""
    functional = torch.nn.functional
    handlers: dict[Callable, Callable] = {
        functional.dropout: _dropout_handler(False, False, None),
        functional.alpha_dropout: _dropout_handler(False, True, None, train_default=False),
        functional.dropout1d: _dropout_handler((3, 2), False, None),
        functional.dropout2d: _dropout_handler((4,), False, None),
        functional.dropout3d: _dropout_handler((5, 4), False, None),
        functional.feature_alpha_dropout: _dropout_handler(True, True, None, train_default=False),
        torch.Tensor.bernoulli_: _scalar_bernoulli(True),
        torch.bernoulli: _scalar_bernoulli(False),
        torch.Tensor.bernoulli: _scalar_bernoulli(False),
    }
    for inplace in (False, True):
        for name, feature, alpha in (("dropout", False, False), ("feature_dropout", True, False),
                                     ("alpha_dropout", False, True), ("feature_alpha_dropout", True, True)):
            handlers[getattr(torch, name + ("_" if inplace else ""))] = _dropout_handler(
                feature, alpha, inplace, names=("p", "train"), train_default=None)
    return handlers


class PortableDraws(torch.overrides.TorchFunctionMode):
    """Dropout masks of CPU tensors drawn alike on every CPU: within the block, torch's dropout functions and
    ``bernoulli_(p)`` / ``torch.bernoulli(x, p)`` with a number ``p`` draw with a tensor probability.

    PyTorch's CPU kernel for a dropout mask (``bernoulli_`` with a number ``p``) has a path that draws with Intel
    MKL's generator on an Intel CPU and with its own Mersenne Twister on any other (AMD, ARM), where the same seed
    gives other masks (PyTorch issues #84030, #121595; whether it is taken depends on the build and the machine).
    ``bernoulli_`` with a tensor probability always draws from torch's own
    generator: masks, scaling and arithmetic stay those of ATen's CPU dropout (on a non-Intel CPU the results are
    bit for bit torch's own), drawn the same on every CPU. Covered: ``F.dropout``, ``F.dropout1d/2d/3d``,
    ``F.alpha_dropout``, ``F.feature_alpha_dropout``, ``torch.dropout`` and its kin (in place too), and the masks of
    DropPath-style code (``x.new_empty(shape).bernoulli_(keep)``). Not covered (torch's own draws): a draw inside a C++
    kernel or TorchScript (the attention dropout of ``F.scaled_dot_product_attention``, the dropout between the
    layers of ``nn.LSTM``/``nn.GRU``, ``torch.native_dropout``, a scripted network), a dropout inside another
    overridable torch function (``nn.MultiheadAttention`` with ``need_weights=True``: ``F.multi_head_attention_forward``
    runs its ``F.dropout`` with the mode switched off), a channel-wise dropout of an input of deprecated dimensions
    (``F.dropout2d`` of a 3D or 5D input), a draw recorded by autograd (``bernoulli`` of a tensor that requires grad),
    and GPU tensors (another generator). Every torch operation of the block costs a few microseconds more (a Python
    call): noticeable only where the operations themselves take microseconds (a tiny network on small windows).
    :func:`seeded_rng` holds it while a seeded call runs on the CPU.

    Example:
        >>> import torch
        >>> x = torch.ones(6)
        >>> with PortableDraws():
        ...     _ = torch.manual_seed(0)
        ...     y = torch.nn.functional.dropout(x, 0.5)
        >>> _ = torch.manual_seed(0)
        >>> keep = torch.rand(6, dtype=torch.float64) < 0.5  # the same generator's uniform draws
        >>> bool(torch.equal(y, keep.float() * 2))
        True
    """

    _handlers: dict[Callable, Callable] | None = None

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if PortableDraws._handlers is None:
            PortableDraws._handlers = _draw_handlers()
        handler = PortableDraws._handlers.get(func)
        if handler is not None:
            out = handler(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)


def network_devices(*networks: Any) -> set[torch.device]:
    """The devices networks may draw random numbers on: those of their parameters and buffers, and of the replicas of
    a ``DataParallel`` inside them.

    A seeded call passes them to :func:`seeded_rng` beside the input's and the windows' devices: a network spread
    over several GPUs (pipeline or model parallel, some weights on ``cuda:1``) draws its dropout masks on each of
    them, and an unseeded one made a seeded call irreproducible in earlier versions.

    Args:
        networks: modules (anything else, such as None or a checkpoint path, has no devices).

    Returns:
        The set of devices (CPU ones included; :func:`seeded_rng` seeds the CUDA ones).

    Example:
        >>> import torch
        >>> from monai_unc._utils import network_devices
        >>> network_devices(torch.nn.Linear(2, 2), None)
        {device(type='cpu')}
    """
    devices: set[torch.device] = set()
    for network in networks:
        if not isinstance(network, torch.nn.Module):
            continue
        devices.update(t.device for t in network.parameters())
        devices.update(t.device for t in network.buffers())
        for m in network.modules():  # a DataParallel runs a replica on each of its devices (and draws there)
            if isinstance(m, torch.nn.DataParallel):
                devices.update(torch.device("cuda", int(i)) for i in (m.device_ids or []) if isinstance(i, int))
    return devices


def cuda_device_indices(devices: Iterable[torch.device | int]) -> list[int]:
    """The indices of the CUDA devices among ``devices``, each once, in order (``cuda`` without an index: the current
    device; other device types are left out).

    Example:
        >>> import torch
        >>> from monai_unc._utils import cuda_device_indices
        >>> cuda_device_indices([torch.device("cuda", 1), torch.device("cpu"), 0, torch.device("cuda", 1)])
        [0, 1]
    """
    return sorted({(d if isinstance(d, int) else (d.index if d.index is not None else torch.cuda.current_device()))
                   for d in devices if isinstance(d, int) or d.type == "cuda"})


#: the largest seed: torch's generators take ``[0, 2**64)`` (a negative seed wraps around: ``-1`` is ``2**64 - 1``)
MAX_SEED = 2**64 - 1


def check_seed(value: Any, name: str = "seed", *, optional: bool = True) -> int | None:
    """``value`` as an ``int`` seed in ``[0, 2**64)``, or None; ``TypeError`` / ``ValueError`` naming ``name``.

    Found by hostile testing: ``torch.manual_seed`` takes ``int(value)``, so ``1.5`` drew seed 1's dropout masks,
    ``True`` seed 1's and ``"0"`` seed 0's while the caller recorded another seed; ``-1`` drew the masks of
    ``2**64 - 1`` (two different seeds, the same draws), and ``2**64`` failed only at the first call with torch's
    ``Overflow when unpacking long long``.

    Args:
        value: the seed: an integer (Python or numpy, not a bool) in ``[0, MAX_SEED]``, or None (not seeded).
        name: the argument's name in the messages.
        optional: None is accepted; ``False`` for a seed that makes a result reproducible (a data set, a record).

    Returns:
        The seed as an ``int``, or None.

    Raises:
        TypeError: ``value`` is not an integer (a float, a bool, a string; None when not ``optional``).
        ValueError: ``value`` lies outside ``[0, MAX_SEED]``.

    Example:
        >>> from monai_unc._utils import check_seed
        >>> check_seed(7), check_seed(None)
        (7, None)
        >>> check_seed(-1)
        Traceback (most recent call last):
        ...
        ValueError: seed must be an integer in [0, 2**64 - 1], got -1
        >>> check_seed(None, optional=False)
        Traceback (most recent call last):
        ...
        TypeError: seed must be an integer, got None
    """
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        what = "an integer or None" if optional else "an integer"
        raise parameter_error(TypeError(f"{name} must be {what}, got {value!r}"), name)
    if not 0 <= int(value) <= MAX_SEED:
        raise parameter_error(ValueError(f"{name} must be an integer in [0, 2**64 - 1], got {value!r}"), name)
    return int(value)


#: where the cgroup file systems are mounted (cgroup v2 at the root, v1 one folder per controller)
CGROUP_ROOT = "/sys/fs/cgroup"
#: a cgroup v1 limit at or above this many bytes means "no limit" (the kernel writes 2**63 rounded down to pages)
_CGROUP_UNLIMITED = 2**60


def _cgroup_bytes(path: str, key: str | None = None) -> int | None:
    """An integer of a cgroup file (``key``: the value of that line of a ``memory.stat``); None: absent, ``max``, or
    a v1 "no limit"."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    if key is not None:
        text = next((rest for name, _, rest in (line.partition(" ") for line in text.splitlines()) if name == key), "")
    text = text.strip()
    if not text.isdigit():  # "max" (v2 without a limit), a missing key, garbage
        return None
    value = int(text)
    return None if value >= _CGROUP_UNLIMITED else value


def _cgroup_folders(base: str, path: str) -> list[str]:
    """The process's cgroup folder under ``base`` and its ancestors up to ``base`` (a parent's limit applies too);
    ``base`` alone where the path does not exist there (a container's cgroup namespace mounts its own cgroup at
    ``base``)."""
    parts = [p for p in path.strip().split("/") if p and p not in (".", "..")]
    if not os.path.isdir(os.path.join(base, *parts)):
        return [base]
    return [os.path.join(base, *parts[:i]) for i in range(len(parts), -1, -1)]


def cgroup_memory_room() -> tuple[int | None, int | None]:
    """Bytes of memory and of swap that the memory cgroup of this process (a container's or a batch job's limit)
    still lets it allocate.

    Memory: ``limit - (usage - inactive file cache)`` (the page cache that the kernel reclaims before it kills a
    process does not count, as in ``docker stats``), the smallest over the process's cgroup and its ancestors;
    cgroup v2 (``memory.max``, ``memory.current``) or v1 (``memory.limit_in_bytes``, ``memory.usage_in_bytes``).
    Swap: v2 ``memory.swap.max - memory.swap.current``; v1 the room under the memory-and-swap limit
    (``memory.memsw.limit_in_bytes``) beyond the memory's.

    Returns:
        ``(memory, swap)`` in bytes (0 at or over a limit); None for either where no cgroup limits it (no memory
        cgroup, no limit set, another platform).
    """
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None, None
    memory: list[int] = []
    swaps: list[int] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        v2 = hierarchy == "0" and controllers == ""
        if v2:  # cgroup v2 (unified)
            base, names = CGROUP_ROOT, ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):  # cgroup v1
            base = os.path.join(CGROUP_ROOT, "memory")
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        for folder in _cgroup_folders(base, path):
            cache = _cgroup_bytes(os.path.join(folder, "memory.stat"), names[2]) or 0
            limit = _cgroup_bytes(os.path.join(folder, names[0]))
            room = None
            if limit is not None:
                room = max(limit - max((_cgroup_bytes(os.path.join(folder, names[1])) or 0) - cache, 0), 0)
                memory.append(room)
            if v2:
                swap_limit = _cgroup_bytes(os.path.join(folder, "memory.swap.max"))
                if swap_limit is not None:
                    swaps.append(max(swap_limit - (_cgroup_bytes(os.path.join(folder, "memory.swap.current")) or 0), 0))
            else:  # v1: one limit of memory and swap together
                both = _cgroup_bytes(os.path.join(folder, "memory.memsw.limit_in_bytes"))
                if both is not None:
                    used = _cgroup_bytes(os.path.join(folder, "memory.memsw.usage_in_bytes")) or 0
                    swaps.append(max(both - max(used - cache, 0) - (room or 0), 0))
    return (min(memory) if memory else None), (min(swaps) if swaps else None)


def host_memory_free(swap: bool = False) -> int | None:
    """Bytes of this machine's memory a new allocation can use now (``MemAvailable`` of ``/proc/meminfo``, plus
    ``SwapFree`` with ``swap``), or None where ``/proc/meminfo`` does not tell (another platform).

    A memory limit of the process's cgroup (a container's ``--memory``, a Kubernetes limit, a batch job's memory
    request) caps the figure (:func:`cgroup_memory_room`; its swap limit caps ``SwapFree``): ``MemAvailable`` is the
    whole machine's, and a process over its cgroup's limit is killed however much memory the machine has left (found
    by hostile testing: in a container limited to 8 GiB on a 64 GiB machine, ``monai-unc infer`` said nothing before
    a case that needed 20 GiB). The figure may still be larger than what the process may use, never smaller, so a
    check against it refuses only what cannot fit at all.
    """
    fields = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemAvailable", "SwapFree"):
                    fields[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if "MemAvailable" not in fields:
        return None
    memory, swap_room = cgroup_memory_room()
    free = fields["MemAvailable"] if memory is None else min(fields["MemAvailable"], memory)
    if swap:
        free += fields.get("SwapFree", 0) if swap_room is None else min(fields.get("SwapFree", 0), swap_room)
    return free


def plain_module(model: Any) -> Any:
    """The Python module under a ``torch.compile`` wrapper (its ``_orig_mod``), else ``model`` itself.

    ``torch.compile(net)`` returns an ``OptimizedModule`` whose only child is ``net`` under the name ``_orig_mod``:
    walking the wrapper finds no known architecture, and its module names carry an ``_orig_mod.`` prefix the user
    never wrote. Hooks attached to the modules of ``net`` run in the compiled calls.

    Args:
        model: a network, compiled or not (anything else is returned as given).

    Returns:
        The module to walk and attach hooks to.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2))
        >>> plain_module(net) is net
        True
    """
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(model, torch.nn.Module) and isinstance(inner, torch.nn.Module) else model


def tensors_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same values: one shape, dtype and layout, and ``torch.equal`` values.

    Compared on ``a``'s device (``b`` moved there, one tensor at a time). A tensor without values (``meta``) or not
    strided (sparse: no single storage to compare) is never equal. NaN values are equal to NaN at the same places (a
    copy of weights holding NaN is equal to them). The one comparison of weights behind the warnings about an ensemble
    member or an nnU-Net fold given twice.

    Args:
        a: a tensor.
        b: another tensor, on any device.

    Returns:
        True when they are equal in value.

    Example:
        >>> tensors_equal(torch.ones(2), torch.ones(2)), tensors_equal(torch.ones(2), torch.ones(2).double())
        (True, False)
    """
    if a.is_meta or b.is_meta or a.layout != torch.strided or b.layout != torch.strided:
        return False
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach(), b.detach().to(a.device)
    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()):
        return False
    # NaN is equal to nothing in torch.equal: two copies of a checkpoint holding a NaN weight (a diverged run, a
    # buffer never filled) were told apart (hostile review 69); NaN at the same places and the rest equal is equal
    nan = torch.isnan(a)
    if not bool(nan.any()):  # no NaN: torch.equal said it (without the masked copies below)
        return False
    return bool(torch.equal(nan, torch.isnan(b)) and torch.equal(a.masked_fill(nan, 0), b.masked_fill(nan, 0)))


def recompile_after_hooks(model: Any) -> None:
    """Drop the compiled code after hooks were added to or removed from the module of a ``torch.compile`` wrapper.

    Dynamo does not guard on module hooks (``torch._dynamo.config.skip_nnmodule_hook_guards``): a wrapper called
    before the hooks changed keeps running the graph it compiled then, without the new dropout (or with the removed
    one), silently. ``torch.compiler.reset()`` clears the compiled code, so the next call compiles again with the hooks
    as they are (every other compiled function of the process compiles again on its next call, too). A network that
    is not compiled is left alone.

    A compiled module anywhere inside ``model`` counts (found by hostile testing: post-hoc dropout added through a
    ``DataParallel`` around a compiled network, or into a compiled submodule, kept the graph compiled before it, and
    the MC dropout maps were 0 everywhere).

    Args:
        model: the network as the caller passed it (the wrapper, not its ``_orig_mod``).

    Example:
        >>> import torch
        >>> recompile_after_hooks(torch.nn.Linear(2, 2))  # not compiled: nothing to drop
    """
    if is_compiled(model):
        torch.compiler.reset()


def is_compiled(model: Any) -> bool:
    """Whether ``model`` is or holds a ``torch.compile`` wrapper (a module whose ``_orig_mod`` is its Python module).

    A module compiled in place (``module.compile()``, which keeps the module and compiles its calls) counts too: its
    compiled code ignores hooks added later as a wrapper's does.

    Args:
        model: the network as the caller passed it.

    Returns:
        True when ``model`` or one of its submodules is compiled.

    Example:
        >>> import torch
        >>> is_compiled(torch.nn.Linear(2, 2)), is_compiled(torch.nn.Sequential(torch.compile(torch.nn.Linear(2, 2))))
        (False, True)
    """
    modules = model.modules() if isinstance(model, torch.nn.Module) else ()
    # found by hostile review 69: a network compiled in place was taken as not compiled, and dropout added after its
    # first call never ran (MC dropout maps 0 everywhere, without a word)
    return any(plain_module(m) is not m or getattr(m, "_compiled_call_impl", None) is not None for m in modules)


def compiled_draws_context(*networks: Any) -> contextlib.AbstractContextManager:
    """Graphs compiled meanwhile draw their random numbers from torch's generator when a network is compiled.

    Inductor (``torch.compile``'s default backend) lowers the random operations of a graph (dropout masks, ``rand``)
    to its own generator unless ``torch._inductor.config.fallback_random`` is set when the graph is compiled: the same
    seed then draws other masks than the uncompiled network (in earlier versions ``pred`` of a seeded MC dropout run
    was off by up to 0.095 on a toy network). The setting is read at compile time only, so graphs compiled before the
    context keep their generator. Nothing is changed for networks that are not compiled.

    Args:
        networks: the networks (or callables) a stochastic call runs; a module holding a compiled submodule and a
            function compiled with ``torch.compile`` count as compiled.

    Returns:
        A context manager that sets ``fallback_random`` for its duration, or a no-op one.

    Example:
        >>> import torch
        >>> with compiled_draws_context(torch.nn.Linear(2, 2)):  # not compiled: nothing to set
        ...     pass
    """
    if not any(is_compiled(n) or callable(getattr(n, "_torchdynamo_orig_callable", None)) for n in networks):
        return contextlib.nullcontext()
    import torch._inductor.config as inductor_config  # heavy, and only needed with a compiled network

    return inductor_config.patch(fallback_random=True)


def check_same_cases(y_pred: Any, y: Any) -> None:
    """``ValueError`` when ``y_pred`` and ``y`` of a MONAI metric hold different numbers of cases, or none.

    Decollated lists (MONAI's ``IterationMetric._compute_list`` zips them, dropping the extra items of the longer one
    without a word) or batch tensors (their first axes): a metric computed on part of the cohort would read as the
    cohort's. ``y=None`` passes. A ``y_pred`` without any case (an empty list, a ``(0, ...)`` batch or a 0-dim
    tensor) is refused: an empty list escaped from MONAI's list evaluation as an ``IndexError`` or ``torch.cat``'s
    error (found by hostile testing).

    Args:
        y_pred: a list of cases or a batch-first tensor.
        y: the same for the references, or None.

    Raises:
        ValueError: ``y_pred`` holds no case, or the numbers of cases differ.

    Example:
        >>> import torch
        >>> check_same_cases([torch.zeros(1, 2)] * 3, torch.zeros(3, 1, 2))
        >>> check_same_cases([torch.zeros(1, 2)] * 3, [torch.zeros(1, 2)] * 2)
        Traceback (most recent call last):
        ...
        ValueError: y_pred has 3 items but y has 2
    """
    if isinstance(y_pred, (list, tuple)) and len(y_pred) == 0:
        raise ValueError("y_pred is an empty list: give at least one case")
    if isinstance(y_pred, torch.Tensor) and (y_pred.ndim == 0 or y_pred.shape[0] == 0):
        raise ValueError(f"y_pred holds no case (shape {tuple(y_pred.shape)}): give at least one case")
    if y is not None and len(y_pred) != len(y):
        raise ValueError(f"y_pred has {len(y_pred)} items but y has {len(y)}")


def check_case_grid(y_pred: torch.Tensor, y: torch.Tensor) -> None:
    """``ValueError`` naming ``y`` and ``y_pred`` when the batches of a MONAI metric hold other cases or grids.

    ``y_pred`` is ``(B, C, *spatial)``; ``y`` must be ``(B, *spatial)`` or ``(B, K, *spatial)`` with any number of
    channels ``K`` (a label map, a one-hot map, raters). The metric classes checked this only in their functional
    core, whose error named its own arguments (``target``, ``probs``, ``references``), not the ``y`` and ``y_pred``
    the caller passed (found by hostile testing).

    Args:
        y_pred: the batch of predictions ``(B, C, *spatial)``.
        y: the batch of references.

    Raises:
        ValueError: another batch size or spatial shape.

    Example:
        >>> import torch
        >>> check_case_grid(torch.zeros(2, 3, 4, 4), torch.zeros(2, 1, 4, 4))
        >>> check_case_grid(torch.zeros(2, 3, 4, 4), torch.zeros(2, 4, 5))
        Traceback (most recent call last):
        ...
        ValueError: y (2, 4, 5) and y_pred (2, 3, 4, 4) must hold the same cases on the same grid: ...
    """
    spatial = tuple(y_pred.shape[2:])
    if y.ndim >= 1 and y.shape[0] == y_pred.shape[0] and spatial in (tuple(y.shape[1:]), tuple(y.shape[2:])):
        return
    raise ValueError(f"y {tuple(y.shape)} and y_pred {tuple(y_pred.shape)} must hold the same cases on the same grid: "
                     f"y (B, *spatial) or (B, K, *spatial) with y_pred's batch size {y_pred.shape[0]} and spatial "
                     f"shape {spatial}")


def check_call_keywords(metric: Any, kwargs: dict[str, Any], allowed: tuple[str, ...] = ()) -> None:
    """``TypeError`` naming the keyword arguments of a MONAI metric call that the metric does not read.

    MONAI's ``IterationMetric.__call__`` hands every keyword to ``_compute_tensor``; the metric classes took them as
    ``**kwargs`` and read none (or only ``spacing``), so that ``CalibrationMetric(...)(y_pred=p, y=y, mask=brain)``
    scored every voxel and ``QUBraTSMetric(...)(..., brainmask=m)`` the whole volume without a word (found by hostile
    testing; MONAI's ``DiceMetric`` raises ``TypeError`` on an unknown keyword).

    Args:
        metric: the metric called (for its name).
        kwargs: the keywords of the call beyond its named arguments.
        allowed: the keywords the metric reads.

    Raises:
        TypeError: a keyword outside ``allowed``.

    Example:
        >>> check_call_keywords(object(), {"spacing": 1.0}, allowed=("spacing",))
        >>> check_call_keywords(object(), {"mask": None})
        Traceback (most recent call last):
        ...
        TypeError: object() got an unexpected keyword argument: mask (it reads none beyond its named arguments)
    """
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        reads = ", ".join(allowed) if allowed else "none beyond its named arguments"
        raise TypeError(f"{type(metric).__name__}() got an unexpected keyword argument: {', '.join(unknown)} (it reads "
                        f"{reads})")


def label_map_dtype(top: int, name: str, widest: type = np.int32) -> type:
    """The smallest dtype of a label map whose largest label is ``top``: uint8 up to 255, uint16 up to 65535, else
    ``widest`` (int32: what a NIfTI file holds and every reader reads); ``ValueError`` naming ``name`` when ``top``
    does not fit ``widest``, so that no label is ever wrapped by numpy's cast (70000 stored as uint16 is 4464).
    Label maps written to files and lesion samples (``widest=np.uint32``) take their type from here; arrays handed
    to torch use :func:`monai_unc.io.smallest_int_dtype` instead (signed types only beyond uint8: torch barely
    supports uint16 / uint32).

    Example:
        >>> [label_map_dtype(t, "labels").__name__ for t in (1, 300, 70000)]
        ['uint8', 'uint16', 'int32']
    """
    top = int(top)
    for dtype in (np.uint8, np.uint16, widest):
        if top <= np.iinfo(dtype).max:
            return dtype
    raise ValueError(f"{name}: label {top} does not fit {np.dtype(widest).name} (at most {np.iinfo(widest).max})")


def is_int(value: Any) -> bool:
    """Whether ``value`` is an integer, Python or numpy, and not a bool (``True`` is an ``int`` to Python).

    Example:
        >>> is_int(3), is_int(np.int64(3)), is_int(True), is_int(3.0)
        (True, True, False, False)
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> bool:
    """Whether ``value`` is a real number, Python or numpy, and not a bool (nor a string, ``None``, an array).

    Example:
        >>> is_real(0.5), is_real(np.float32(0.5)), is_real(2), is_real(True), is_real("0.5")
        (True, True, True, False, False)
    """
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def real_array(a: np.ndarray, name: str, note: str = "") -> np.ndarray:
    """``a`` as a float64 copy when it holds real numbers (or booleans); a ``None`` of an object array is NaN.

    The one check before a cast of scores or estimates to float64: the cast would parse text (``"0.9"``) and drop
    the imaginary part of a complex value with only numpy's ``ComplexWarning`` (found by hostile testing). A list
    holding ``None`` for an undefined value is an object array: its ``None`` reads as NaN, any other object refuses.

    Args:
        a: the values as a numpy array (any shape).
        name: the argument's name, for the error.
        note: text after "real numbers" in the error, e.g. what stands for an undefined value.

    Returns:
        A float64 array of ``a``'s shape.

    Raises:
        TypeError: text, complex numbers or other objects, naming ``name``.

    Example:
        >>> real_array(np.array([0.5, None], dtype=object), "scores")
        array([0.5, nan])
    """
    if a.dtype == object:
        ok = all(v is None or is_real(v) or isinstance(v, (bool, np.bool_)) for v in a.ravel().tolist())
    else:
        ok = a.dtype.kind in "biuf"
    if not ok:
        raise TypeError(f"{name} must hold real numbers{note}, got dtype {a.dtype}")
    return np.array(a, dtype=np.float64)


def _head_labels(labels: list[Any], n: int = 5) -> str:
    return repr(labels) if len(labels) <= n else f"{repr(labels[:n])[:-1]}, ... ({len(labels)} cases)]"


def _same_index(a: Any, b: Any) -> bool:
    """Whether two indexes list the same labels in the same order; a missing label (NaN, None) matches a missing one
    (pandas' ``Index.equals``; a list comparison never found NaN equal to NaN and refused two equal indexes)."""
    if callable(getattr(a, "equals", None)):
        try:
            return bool(a.equals(b))
        except TypeError:  # not an index of pandas' kind
            pass
    return list(a) == list(b)


def check_case_labels(values: Iterable[tuple[str, Any]]) -> None:
    """ValueError when labelled per-case values (a pandas ``Series``' index) name different cases, or in another order.

    Values of the same cases are paired by position; a ``Series`` indexed by case id read from another table (sorted
    otherwise, or with other cases left out) would pair case ``c1`` of one with ``c3`` of the other without a word.
    Values without an index (arrays, lists, tensors) are not checked; labelled ones must all carry one index.

    Args:
        values: ``(name, values)`` pairs, each name as the error should call the argument (``values_a['dice']``).

    Raises:
        ValueError: two labelled values carry different indexes, naming both.
    """
    first: tuple[str, list[Any]] | None = None
    first_index: Any = None
    for where, v in values:
        index = getattr(v, "index", None)
        if index is None or callable(index):  # a list's or a tensor's .index is a method, not case labels
            continue
        labels = list(index)
        if first is None:
            first, first_index = (where, labels), index
        elif not _same_index(index, first_index):
            # found by review: rows of one long table (df[df.method == "b"]["dice"]) carry row numbers, not case ids;
            # reindexing one by the other's row numbers, as advised, gave every case NaN
            rows = all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in labels + first[1])
            advice = (
                "row numbers, not case ids: index both by case id (e.g. df.set_index('case_id')['dice']) and align "
                "them with series.reindex(other.index), or pass series.to_numpy() when the rows are already in the "
                "same case order"
                if rows
                else "align them first, e.g. series.reindex(other.index)"
            )
            raise ValueError(
                f"{where} and {first[0]} label different cases or list them in another order (index "
                f"{_head_labels(labels)} against {_head_labels(first[1])}); the values are paired by position: {advice}"
            )


def listed(items: Sequence[Any], limit: int) -> str:
    """The reprs of the first ``limit`` of ``items``, and how many more there are, for a message.

    Args:
        items: what to name (case ids, file names).
        limit: how many are shown.

    Returns:
        ``"'a', 'b' and 3 more"``; all of them when there are at most ``limit``.

    Example:
        >>> listed(["c1", "c2", "c3"], 2), listed(["c1"], 2)
        ("'c1', 'c2' and 1 more", "'c1'")
    """
    return ", ".join(repr(i) for i in items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def is_finite_real(value: Any) -> bool:
    """Whether ``value`` is a finite real number (:func:`is_real`, not NaN or infinite).

    Example:
        >>> is_finite_real(0.5), is_finite_real(float("nan")), is_finite_real(True), is_finite_real(None)
        (True, False, False, False)
    """
    return is_real(value) and math.isfinite(value)


def check_nonnegative(value: Any, name: str, *, wrong_type: type[Exception] = TypeError,
                      type_text: str = "a finite number >= 0", note: str = "") -> float:
    """``value`` as a float when it is a finite real number ``>= 0``; else an error naming ``name``.

    The one check of a non-negative amount (bytes per voxel, a noise standard deviation, a margin). A value that is
    not a real number (a bool, a string such as ``"0.1"``, None) raises ``wrong_type`` with ``"{name} must be
    {type_text}{note}, got {value!r}"``; NaN, infinities, negatives and integers too large for a float (found by
    review: ``10**400`` escaped as Python's unnamed ``OverflowError: int too large to convert to float``) raise
    ``ValueError`` with ``"{name} must be a finite number >= 0{note}, got {value!r}"``.

    Args:
        value: the value.
        name: its name in the message.
        wrong_type: the exception for a value that is not a real number (``TypeError``; ``ValueError`` where a
            module raises that for every bad option).
        type_text: what the value must be, in the message of ``wrong_type``.
        note: a remark appended to what the value must be (e.g. ``" (0 disables noise)"``).

    Returns:
        ``float(value)``.

    Example:
        >>> check_nonnegative(2, "bytes"), check_nonnegative(np.float32(0.5), "std")
        (2.0, 0.5)
        >>> check_nonnegative(10**400, "bytes")
        Traceback (most recent call last):
        ...
        ValueError: bytes must be a finite number >= 0, got 1000...
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise wrong_type(f"{name} must be {type_text}{note}, got {value!r}")
    try:
        v = float(value)
    except OverflowError:  # an int beyond the floats: not finite as a float
        v = math.inf
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{name} must be a finite number >= 0{note}, got {value!r}")
    return v


def is_count(value: Any) -> bool:
    """Whether ``value`` is a count read from an untrusted file: an integer (:func:`is_int`) in ``[0, 2**53]``.

    Example:
        >>> is_count(3), is_count(-1), is_count(3.0), is_count(True), is_count(2**60)
        (True, False, False, False, False)
    """
    return is_int(value) and 0 <= value <= 2**53


def is_text_list(value: Any) -> bool:
    """Whether ``value`` is a list of strings (case ids, names, lines read from an untrusted file).

    Example:
        >>> is_text_list(["a", "b"]), is_text_list([]), is_text_list(["a", 1]), is_text_list("ab")
        (True, True, False, False)
    """
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def label_text(value: Any) -> str:
    """The text of a label (e.g. a case's shift label): ``""`` for a missing one, otherwise ``str(value)``.

    Missing is None, a float NaN or pandas' ``NA``: what pandas makes of an empty cell of a table (an empty cell read
    by :func:`monai_unc.io.read_table` is ``""`` already), so a label table gives the same labels however it is read.

    Example:
        >>> [label_text(v) for v in (None, float("nan"), np.float32("nan"), "noise", 0, "")]
        ['', '', '', 'noise', '0', '']
    """
    if value is None or type(value).__name__ == "NAType":
        return ""
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        return ""
    return str(value)


def check_text(value: Any, name: str, limit: int = 256) -> str:
    r"""A descriptive text field of an untrusted file (a name, a date, a version): a string of printable characters.

    Such fields reach pages, tables and terminal lines; a control character (a newline, an ANSI escape) or a very
    long text there misleads or floods the reader. Found by hostile testing: an unsigned rule's ``created`` of 100 000
    characters with an escape sequence, and class names with newlines, were copied into ``triage.json`` and the page.

    Args:
        value: the field's value.
        name: how messages name the field.
        limit: the largest number of characters.

    Returns:
        ``value``.

    Raises:
        ValueError: not a string, longer than ``limit`` or holding a character that is not printable.

    Example:
        >>> check_text("2026-01-02T03:04:05+00:00", "created")
        '2026-01-02T03:04:05+00:00'
        >>> check_text("liver\x1b[2J", "class_names[1]")
        Traceback (most recent call last):
        ...
        ValueError: class_names[1] must be text of at most 256 printable characters, got 'liver\x1b[2J'
    """
    if not isinstance(value, str) or len(value) > limit or not value.isprintable():
        shown = repr(value)
        raise parameter_error(ValueError(f"{name} must be text of at most {limit} printable characters, got "
                                         f"{shown if len(shown) <= 60 else shown[:57] + '...'}"), name)
    return value


def positive_finite(value: Any) -> float:
    """``float(value)`` when it is a positive finite number (anything ``float`` converts, but not a bool or a text),
    else NaN (the caller raises, naming its argument).

    Example:
        >>> positive_finite(0.8), positive_finite(np.float32(2)), positive_finite("1"), positive_finite(-1.0)
        (0.8, 2.0, nan, nan)
    """
    try:
        # numpy's bool too (no subclass of bool): np.True_ was the loss bound B = 1 of crc_lambda, where True was
        # refused (found by hostile review 59)
        v = math.nan if isinstance(value, (bool, np.bool_, str, bytes)) else float(value)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) and v > 0 else math.nan


def quantile_rank(n: int, alpha: float) -> int:
    """``ceil((n + 1)(1 - alpha))``: the rank of the split-sample quantile of ``n`` scores (the one formula).

    :func:`share_count` of the share ``1 - alpha`` of ``n + 1``: a product within ``4 eps (n + 1)`` of an integer is
    that integer, which absorbs the rounding of ``1 - alpha``, of the product and of ``alpha`` itself from the decimal
    it names (``(9 + 1)(1 - 0.1)`` is ``9.000000000000002``: rank 9), and nothing more: ``alpha = 0.09999999993`` with
    ``n = 9`` gives ``9.0000000007``, rank 10, as in exact arithmetic (a fixed allowance of ``1e-9`` made it 9, below
    the level).

    Example:
        >>> quantile_rank(9, 0.1), quantile_rank(19, 0.1), quantile_rank(9, 0.09999999993), quantile_rank(2, 1 / 3)
        (9, 18, 10, 2)
    """
    return int(share_count(1.0 - alpha, n + 1))  # the share 1 - alpha of n + 1 scores


def quantile_min_cases(alpha: float) -> int:
    """The smallest ``n`` with :func:`quantile_rank` ``(n, alpha) <= n``: the fewest scores with a finite quantile.

    Found by bisection on the rank itself (the condition holds from the answer on), so it agrees with the rank for
    every ``alpha`` in (0, 1); ``ValueError`` naming ``alpha`` when it needs more than ``2**53`` scores. (Counting
    ``n`` up from 1 took minutes for ``alpha = 1e-7`` and never ended for ``1e-12``.)

    Example:
        >>> quantile_min_cases(0.1), quantile_min_cases(0.05), quantile_min_cases(1 / 3)
        (9, 19, 2)
    """
    estimate = 1.0 / alpha - 1.0
    if not estimate < 2.0**53:
        raise ValueError(f"alpha={alpha} needs more than 2**53 calibration cases")
    lo, hi = 0, math.ceil(estimate) + 2  # the condition fails at lo and holds at hi
    while quantile_rank(hi, alpha) > hi:
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if quantile_rank(mid, alpha) <= mid else (mid, hi)
    return hi


def share_count(shares: Any, n: Any) -> np.ndarray:
    """``ceil(share * n)`` for each share: how many of ``n`` cases (or lesions) a share of them takes (the one formula).

    ``n`` may be an array broadcast with ``shares`` (the Hoeffding-Bentkus p-value counts ``ceil(n r)`` for the mean
    loss ``r`` of each of several acceptance sets).

    Like :func:`quantile_rank`, a product within ``4 eps n`` of an integer is that integer (``0.3 * 10`` is
    ``3.0000000000000004``: 3 cases), and nothing more (``0.30000000001 * 10``: 4, as in exact arithmetic; rounding
    to 9 decimals gave 3).

    Example:
        >>> share_count([0.3, 0.30000000001, 0.0, 0.25], 10).tolist()
        [3, 4, 0, 3]
    """
    x = np.asarray(shares, dtype=np.float64) * n
    r = np.round(x)
    tol = 4.0 * float(np.finfo(np.float64).eps) * np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    return np.where(np.abs(x - r) <= tol, r, np.ceil(x)).astype(np.int64)


def real_number(value: Any, name: str, error: type[Exception] = TypeError) -> float:
    """``float(value)`` when ``value`` is a real number (Python or numpy; not a bool, a string or ``None``).

    Args:
        value: the option's value.
        name: the option's name in the error message.
        error: the exception raised for anything else (``TypeError``, or ``ValueError`` where a module's checks
            raise that for every bad option).

    Returns:
        ``float(value)`` (range checks are the caller's).

    Raises:
        TypeError: (or ``error``) anything else; a string such as ``"0.5"`` is not converted.
    """
    if not is_real(value):
        raise parameter_error(error(f"{name} must be a real number, got {value!r}"), name)
    return float(value)


# --------------------------------------------------------------------------------------------------------------
# exact comparison of a map with a threshold
# --------------------------------------------------------------------------------------------------------------
def _exact_threshold(threshold: Any) -> int | float | Fraction:
    """``threshold`` as a Python number holding its exact value (a ``Fraction`` for a numpy ``longdouble``)."""
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, (int, float, np.integer, np.floating)):
        raise TypeError(f"threshold must be a real number, got {threshold!r}")
    if isinstance(threshold, (int, np.integer)):
        return int(threshold)
    if isinstance(threshold, np.floating) and np.finfo(threshold.dtype).nmant > np.finfo(np.float64).nmant \
            and np.isfinite(threshold):
        return Fraction(*threshold.as_integer_ratio())  # a longdouble: float() would round it
    t = float(threshold)
    if math.isnan(t):
        raise ValueError("threshold must not be NaN (no value compares with it)")
    return t


def _exact(r: Any) -> float | Fraction:
    """The exact value of a floating-point scalar (numpy or torch) as a Python number."""
    if isinstance(r, np.floating) and np.finfo(r.dtype).nmant > np.finfo(np.float64).nmant and np.isfinite(r):
        return Fraction(*r.as_integer_ratio())
    return float(r)


def _decimal_text(t: int | Fraction) -> str:
    """``t`` in decimal to 40 digits: once parsed, within a unit in the last place of a longdouble of it whatever
    its exponent, where ``float(t)`` overflows or rounds to float64 (``str`` refuses ints of over 4300 digits)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        if isinstance(t, int):
            return str(+decimal.Decimal(t))
        return str(decimal.Decimal(t.numerator) / decimal.Decimal(t.denominator))


def _bound_in(dtype: Any, t: int | float | Fraction, up: bool) -> Any:
    """The value of the float ``dtype`` (numpy dtype or torch dtype) next to ``t``: the largest ``<= t``
    (``up=False``) or the smallest ``>= t`` (``up=True``); ``-inf`` / ``+inf`` where no finite one is.

    For any ``u`` of that dtype, ``u > t`` iff ``u > floor(t)``, ``u <= t`` iff ``u <= floor(t)``, ``u >= t`` iff
    ``u >= ceil(t)`` and ``u < t`` iff ``u < ceil(t)``: one comparison in the map's own dtype, no float64 copy.
    """
    try:
        t64 = float(t)
    except OverflowError:  # an integer beyond float64
        t64 = math.inf if t > 0 else -math.inf
    if isinstance(dtype, torch.dtype):
        inf = torch.tensor(math.inf, dtype=dtype)
        r = torch.tensor(t64, dtype=torch.float64).to(dtype)  # rounds to a neighbour of t (or overflows to inf)
        down, upward = (lambda x: torch.nextafter(x, -inf)), (lambda x: torch.nextafter(x, inf))
        value = float  # every float16 / bfloat16 / float32 / float64 value is a Python float
    else:
        inf = np.array(np.inf, dtype=dtype)
        with np.errstate(over="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # overflow to inf: the loops below handle it
            if np.finfo(dtype).nmant > np.finfo(np.float64).nmant and not isinstance(t, float):
                r = np.array(_decimal_text(t)).astype(dtype)[()]  # a longdouble holds more than float64's range
            else:
                r = np.array(t64).astype(dtype)[()]
        down, upward = (lambda x: np.nextafter(x, -inf)[()]), (lambda x: np.nextafter(x, inf)[()])
        value = _exact
    # each loop runs at most once, except for a longdouble next to a threshold that float64 rounds; stepping past
    # the largest finite value gives inf, which is the bound wanted there
    with np.errstate(over="ignore"):
        if up:
            while value(r) < t:
                r = upward(r)
            while value(r) > -math.inf and value(down(r)) >= t:
                r = down(r)
        else:
            while value(r) > t:
                r = down(r)
            while value(r) < math.inf and value(upward(r)) <= t:
                r = upward(r)
    return value(r) if isinstance(dtype, torch.dtype) else r


def _compare(u: Any, threshold: Any, op: str) -> ArrayLike:
    """``u <op> threshold`` (``op`` one of ``">" ">=" "<" "<="``) on the exact values; see :func:`exceeds`."""
    t = _exact_threshold(threshold)
    if isinstance(u, torch.Tensor):
        dtype, is_float = u.dtype, u.dtype.is_floating_point
        if u.is_complex():
            raise TypeError(f"u must be a real array, got dtype {u.dtype}")
        int_range = None if is_float else (
            (0, 1) if u.dtype == torch.bool else (int(torch.iinfo(u.dtype).min), int(torch.iinfo(u.dtype).max))
        )
    elif isinstance(u, (np.ndarray, np.generic)):
        u = np.asarray(u)
        if u.dtype.kind not in "biuf":
            raise TypeError(f"u must be a real numeric array, got dtype {u.dtype}")
        dtype, is_float = u.dtype, u.dtype.kind == "f"
        int_range = None if is_float else (
            (0, 1) if u.dtype.kind == "b" else (int(np.iinfo(u.dtype).min), int(np.iinfo(u.dtype).max))
        )
    else:
        raise TypeError(f"u must be a numpy array or a torch tensor, got {type(u).__name__}")
    up = op in (">=", "<")  # ceil(t) for >= and <, floor(t) for > and <=
    if is_float:
        bound: Any = _bound_in(dtype, t, up)
    else:  # the integer next to t, then whole-array answers beyond the dtype's range
        if isinstance(t, float) and math.isinf(t):
            bound = t
        else:
            bound = math.ceil(t) if up else math.floor(t)
        lo, hi = int_range  # type: ignore[misc]
        if bound > hi or bound < lo:
            answer = (bound < lo) == (op in (">", ">="))
            if isinstance(u, torch.Tensor):
                return torch.full_like(u, answer, dtype=torch.bool)
            return np.full(u.shape, answer, dtype=bool)
        bound = int(bound)
        if isinstance(u, np.ndarray) and u.dtype.kind != "b":
            bound = u.dtype.type(bound)
    if op == ">":
        return u > bound
    if op == ">=":
        return u >= bound
    if op == "<":
        return u < bound
    return u <= bound


def exceeds(u: ArrayLike, threshold: float, *, inclusive: bool) -> ArrayLike:
    """``u >= threshold`` (``inclusive=True``) or ``u > threshold``, on the exact values of both.

    NumPy and torch round a Python float threshold to the array's dtype before comparing, so a float32 map's
    ``0.30000001`` (``float32(0.3)``) is not ``> 0.3`` and its ``0.69999999`` (``float32(0.7)``) is ``>= 0.7``.
    Here the threshold is replaced by its neighbour in the map's dtype on the right side (the largest value
    ``<= threshold`` for ``>``, the smallest ``>= threshold`` for ``>=``), so the comparison, made in the map's own
    dtype without a float64 copy and on the map's device, gives what comparing the real numbers gives.

    Args:
        u: a numpy array or a torch tensor of any real dtype: float16, bfloat16, float32, float64 (numpy's
            longdouble too), an integer type or bool (0 / 1).
        threshold: a real number (Python, numpy, any size; ``+-inf`` allowed: ``u > inf`` is never true, ``u >
            -inf`` is true for every value but ``-inf`` and NaN). Thresholds beyond the dtype's range compare as
            the real numbers do (nothing of an int8 map exceeds 1000; a float16 ``inf`` exceeds 1e6).
        inclusive: ``True`` for ``>=``, ``False`` for ``>``.

    Returns:
        A boolean array or tensor of ``u``'s shape, in ``u``'s library and on its device. NaN never compares true
        (a NaN voxel neither exceeds nor is :func:`below` any threshold).

    Raises:
        TypeError: ``u`` is not a real numpy array or torch tensor, or ``threshold`` is not a real number.
        ValueError: ``threshold`` is NaN.

    Example:
        >>> u = np.array([0.3, 0.7], dtype=np.float32)
        >>> (u > 0.3).tolist(), exceeds(u, 0.3, inclusive=False).tolist()  # float32(0.3) = 0.30000001 > 0.3
        ([False, True], [True, True])
        >>> (u >= 0.7).tolist(), exceeds(u, 0.7, inclusive=True).tolist()  # float32(0.7) = 0.69999999 < 0.7
        ([False, True], [False, False])
    """
    return _compare(u, threshold, ">=" if inclusive else ">")


def below(u: ArrayLike, threshold: float, *, inclusive: bool) -> ArrayLike:
    """``u <= threshold`` (``inclusive=True``) or ``u < threshold``, on the exact values of both (see :func:`exceeds`).

    Apart from NaN (never true) it is the complement of :func:`exceeds` with the other ``inclusive``:
    ``below(u, t, inclusive=True) == ~exceeds(u, t, inclusive=False)`` for every non-NaN ``u``.

    Example:
        >>> u = np.array([0.3, 0.7], dtype=np.float32)
        >>> (u <= 0.3).tolist(), below(u, 0.3, inclusive=True).tolist()  # 0.30000001 is not <= 0.3
        ([True, False], [False, False])
    """
    return _compare(u, threshold, "<=" if inclusive else "<")


def load_nifti(path: str | os.PathLike, **kwargs: Any) -> Any:
    """``nibabel.load(path)``, also for a NIfTI file whose extension mixes letter cases (``a.Nii.gz``, ``a.nIi``).

    nibabel rebuilds the file name from its parts and writes an extension that is neither all upper nor all lower
    case in lower case, so ``a.Nii.Gz`` was opened as ``a.nii.Gz`` ("No such file or directory" for a file that is
    there: such a case failed as a truncated or corrupt file; found by hostile testing of real-world folders). Such a
    name is read by the NIfTI class its header's ``sizeof_hdr`` names (348: NIfTI-1, 540: NIfTI-2), from the very
    file; every other name goes to ``nibabel.load`` unchanged.

    Args:
        path: the file.
        **kwargs: passed to the loader (``mmap``, ...).

    Returns:
        The nibabel image.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> import nibabel as nib
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = nib.save(nib.Nifti1Image(np.zeros((2, 3, 4), np.float32), np.eye(4)), Path(d) / "a.nii.gz")
        ...     _ = (Path(d) / "a.nii.gz").rename(Path(d) / "a.Nii.Gz")
        ...     load_nifti(Path(d) / "a.Nii.Gz").shape
        (2, 3, 4)
    """
    import nibabel as nib
    from nibabel.openers import Opener

    name = os.fspath(path)
    base = name[:-3] if name.lower().endswith(".gz") else name
    ext = os.path.splitext(base)[1]
    if ext.lower() != ".nii" or ext in (ext.lower(), ext.upper()):
        return nib.load(name, **kwargs)
    with Opener(name, "rb") as f:  # gzip by the name's ending in any letter case
        head = f.read(4)
    klass = nib.Nifti2Image if nifti_version(head) == 2 else nib.Nifti1Image  # anything else: NIfTI-1's error
    return klass.from_file_map(klass.make_file_map({"image": name}), **kwargs)


def nifti_version(head: bytes) -> int | None:
    """The NIfTI version a file's first 4 bytes name: its ``sizeof_hdr``, 348 (1) or 540 (2), in either byte order.

    Args:
        head: the first bytes of the (uncompressed) file.

    Returns:
        1, 2, or None (not a NIfTI header, e.g. gzip's magic).

    Example:
        >>> nifti_version((348).to_bytes(4, "little")), nifti_version((540).to_bytes(4, "big"))
        (1, 2)
        >>> nifti_version(bytes([0x1F, 0x8B, 0x08, 0x00])) is None  # gzip's magic
        True
    """
    if len(head) < 4:
        return None
    sizes = {int.from_bytes(head[:4], "little"), int.from_bytes(head[:4], "big")}
    return 1 if 348 in sizes else 2 if 540 in sizes else None


def num_threads() -> int:
    """Threads for the multi-threaded kernels: torch's setting (the number of cores by default)."""
    return max(1, int(torch.get_num_threads()))


_T = TypeVar("_T")
_R = TypeVar("_R")
#: the shared pools of :func:`thread_map`, one per thread count, made on first use
_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _forget_pools() -> None:
    """In a forked child: the parent's pool threads do not exist there (a pool kept from the parent would queue its
    tasks for ever); the child makes its own pools on first use. The lock is new too (another thread of the parent
    may have held it at the fork)."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):  # not on Windows (no fork there)
    os.register_at_fork(after_in_child=_forget_pools)


def thread_map(fn: Callable[[_T], _R], items: Iterable[_T], n_threads: int) -> list[_R]:
    """``[fn(item) for item in items]`` on ``n_threads`` threads of a pool shared by every call with that count.

    The multi-threaded CPU kernels (kernels that release the GIL: numba, scipy) ran each call on a new
    ``ThreadPoolExecutor``, whose threads were started and joined every time (a few hundred microseconds a call, and
    the fused statistics update is called hundreds of times per cohort). One pool per thread count is made on the
    first call that needs it and kept for the process (its idle threads end at exit); a forked child makes its own.
    Concurrent calls from several threads share the pool's threads (their tasks queue). A task must not call
    :func:`thread_map` with the same count and wait for it (the pool's threads could all be waiting).

    Args:
        fn: the task, called once per item (on a pool thread; on the calling thread when ``n_threads`` is 1 or there
            is at most one item).
        items: the tasks' arguments.
        n_threads: the pool's threads (an integer >= 1).

    Returns:
        The results in the order of ``items``, once every task has finished (also when one raised: its exception,
        the first in the order of ``items``, is raised after all tasks have ended, so none still writes into the
        caller's arrays).

    Raises:
        ValueError: ``n_threads`` is not an integer >= 1.

    Example:
        >>> from monai_unc._utils import thread_map
        >>> thread_map(lambda i: i * i, range(5), 2)
        [0, 1, 4, 9, 16]
    """
    n = check_integer(n_threads, "n_threads")
    items = list(items)
    if n == 1 or len(items) <= 1:
        return [fn(item) for item in items]
    pool = _POOLS.get(n)
    if pool is None:
        with _POOLS_LOCK:
            pool = _POOLS.get(n)
            if pool is None:
                pool = _POOLS[n] = ThreadPoolExecutor(n, thread_name_prefix=f"monai_unc-{n}")
    futures = [pool.submit(fn, item) for item in items]
    wait(futures)
    return [f.result() for f in futures]


def check_metric_reduction(value: Any, name: str = "reduction") -> Any:
    """``value`` as a MONAI ``MetricReduction``; ``ValueError`` naming ``name`` and the choices otherwise.

    MONAI reads a metric's reduction only in ``aggregate``: an unknown one (``"foo"``, ``None``, ``3``) passed the
    constructor and failed at the end of the epoch, after every case was inferred, as ``By 'foo', did you mean
    'sum'?`` without the argument's name (found by hostile testing).

    Example:
        >>> check_metric_reduction("mean_batch").value
        'mean_batch'
    """
    from monai.utils import MetricReduction

    choices = [r.value for r in MetricReduction]
    if isinstance(value, str) and value in choices:
        return MetricReduction(value)
    raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _metric_reduction(data: torch.Tensor, reduction: MetricReduction) -> tuple[torch.Tensor, torch.Tensor]:
    """MONAI's ``do_metric_reduction`` (NaN values left out, 0 where none is left) in float64 for float64 ``data``.

    The same steps as ``monai.metrics.utils.do_metric_reduction`` (MONAI 1.6): ``"mean"`` averages each case's
    valid channels, then the cases that have one; the ``_batch`` / ``_channel`` reductions reduce one dimension. MONAI
    computes them in float32 (``.float()``); here they are computed in ``data``'s floating dtype when it is float64,
    else in float32 as MONAI does. ``not_nans`` is float32, as MONAI's.
    """
    from monai.utils import MetricReduction

    dtype = torch.float64 if data.dtype == torch.float64 else torch.float32
    nans = torch.isnan(data)
    valid = (~nans).to(torch.float32)
    if reduction == MetricReduction.NONE:
        return data.clone(), valid
    f = torch.where(nans, torch.zeros((), dtype=data.dtype, device=data.device), data).to(dtype)
    zero = torch.zeros(1, dtype=dtype, device=data.device)  # MONAI's shape: "mean" gives (1,), not a scalar

    def mean(dim: int, values: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return torch.where(counts > 0, values.sum(dim=dim) / counts.to(dtype), zero)

    if reduction == MetricReduction.MEAN:  # the mean of each case's valid channels, then of the cases with one
        counts = valid.sum(dim=1)
        f = mean(1, f, counts)
        cases = (counts > 0).sum(dim=0).to(torch.float32)
        return torch.where(cases > 0, f.sum(dim=0) / cases.to(dtype), zero), cases
    if reduction == MetricReduction.SUM:
        return f.sum(dim=[0, 1]), valid.sum(dim=[0, 1])
    dim = 0 if reduction in (MetricReduction.MEAN_BATCH, MetricReduction.SUM_BATCH) else 1
    counts = valid.sum(dim=dim)
    if reduction in (MetricReduction.MEAN_BATCH, MetricReduction.MEAN_CHANNEL):
        return mean(dim, f, counts), counts
    return f.sum(dim=dim), counts


def reduce_case_values(
    data: torch.Tensor | None, reduction: MetricReduction | str, metric: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """MONAI's ``do_metric_reduction`` of buffered per-case values ``(N, K)``, NaN where no case is valid.

    MONAI reduces NaN values away and returns 0 where every value was NaN, which reads as a perfect (or the
    worst) score; here every reduced entry without a single valid value is NaN, with a ``UserWarning`` naming
    ``metric``. Returns ``(values, not_nans)`` as MONAI does (``not_nans`` counts the valid values). No case at all
    (``data`` None, a metric's ``get_buffer()`` before any update, e.g. after an empty epoch, or empty) gives a NaN
    float64 scalar and 0, with a ``UserWarning``; with ``reduction="none"`` it is the empty table (no case, no value:
    ``(0, *data.shape[1:])``, ``(0, 1)`` for None) and ``not_nans`` 0, with the same warning.

    Called by a metric's ``aggregate``: the warnings point at the caller of ``aggregate`` (they pointed at the metric
    module's line, the same for every caller; found by hostile testing).

    The reduced values keep float64 per-case values in float64 (other values are reduced in float32, as MONAI
    reduces them): MONAI's ``do_metric_reduction`` casts every mean and batch / channel sum to float32, so a cohort's
    mean BA-ECE or SPACE was rounded to about 7 digits although the cases' values were float64 (in earlier versions).
    """
    from monai.utils import MetricReduction

    if data is None or data.numel() == 0:
        nan = warn_nan(f"{metric}: no case was evaluated; the value is undefined (NaN)", stacklevel=4)
        if MetricReduction(reduction) == MetricReduction.NONE:
            shape = (0, 1) if data is None or data.ndim < 2 else (0, *data.shape[1:])
            return torch.empty(shape, dtype=torch.float64), torch.tensor(0.0)
        return torch.tensor(nan, dtype=torch.float64), torch.tensor(0.0)
    f, not_nans = _metric_reduction(data, MetricReduction(reduction))
    if reduction == MetricReduction.NONE or not isinstance(f, torch.Tensor):
        return f, not_nans
    empty = not_nans == 0
    if bool(empty.any()):
        where = "the" if f.ndim == 0 else f"{int(empty.sum())} of {f.numel()}"
        warn_nan(f"{metric}: every case is NaN (undefined) for {where} reduced value(s), no valid (non-NaN) case: "
                 "returning NaN instead of MONAI's 0", stacklevel=4)
        f = torch.where(empty.to(f.device), torch.full_like(f, math.nan), f)
    return f, not_nans


def distributed_world() -> int:
    """The number of ranks of torch's default process group (1 without one).

    Returns:
        The world size.

    Example:
        >>> distributed_world()
        1
    """
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def buffer_device() -> torch.device:
    """The device of a rank's empty tables in a reduction: the current CUDA device under NCCL, else the CPU."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and "nccl" in str(dist.get_backend()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


@contextlib.contextmanager
def main_rank_warnings() -> Iterator[None]:
    """A block every rank runs on the same gathered data: its ``UserWarning`` s are issued by rank 0 only.

    Without a process group (or with one rank) nothing changes. Use it where each rank reduces the values of all
    ranks (a metric's ``aggregate`` after the gather), not where a rank computes its own cases.

    Yields:
        None.
    """
    import torch.distributed as dist

    with warnings.catch_warnings():
        if distributed_world() > 1 and dist.get_rank() != 0:
            warnings.simplefilter("ignore", UserWarning)
        yield


def reemit_warning(caught: warnings.WarningMessage) -> None:
    """Issue a warning recorded by ``warnings.catch_warnings(record=True)`` again, as where it was raised.

    The same message, category, file and line, and the module of that file, so that a filter naming the module
    applies as it did to the original: ``warnings.filterwarnings("ignore", category=FutureWarning, module="monai")``
    (a regular expression matched at the start of the module's name: ``monai``'s submodules too), or
    ``-W "ignore::FutureWarning:monai.utils.deprecate_utils"`` (the command line's filter names one module exactly).

    Shown as the filters say, across calls: under the ``"default"`` action once per location (file, line, category
    and text), under ``"module"`` once per file, under ``"once"`` once, as Python shows the original; ``"always"``,
    ``"error"`` and ``"ignore"`` as Python does. Python's own record of the locations said cannot serve: the
    ``catch_warnings`` block that recorded the warning clears every module's record when it is entered and left, so
    a warning recorded in every case of a cohort was shown once per case (in earlier versions). The record is kept
    while the filters stay the same (a change of the filters shows it again, as Python shows its own), for the
    last 4096 locations.

    Args:
        caught: one recorded warning.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as got:
        ...     warnings.simplefilter("always")
        ...     warnings.warn("degenerate", RuntimeWarning)
        >>> with warnings.catch_warnings(record=True) as again:
        ...     warnings.simplefilter("always")
        ...     reemit_warning(got[0])
        >>> (str(again[0].message), again[0].category.__name__, again[0].lineno == got[0].lineno)
        ('degenerate', 'RuntimeWarning', True)
    """
    module = _MODULE_OF_FILE.get(caught.filename)
    if module is None:
        module = next((name for name, m in list(sys.modules.items())
                       if getattr(m, "__file__", None) == caught.filename), None)
        if module is not None:
            _MODULE_OF_FILE[caught.filename] = module
    message = caught.message
    category = type(message) if isinstance(message, Warning) else caught.category
    text = str(message)
    # the module a filter is matched against: as Python derives it when none is given (the file's name without .py)
    matched = module if module is not None else caught.filename or "<unknown>"
    if module is None and matched[-3:].lower() == ".py":
        matched = matched[:-3]
    filters = tuple(_active_filters())
    action = _filter_action(filters, text, category, matched, caught.lineno)
    if action in ("default", "module", "once"):
        # Python's keys: (text, category, line) in the module's registry, (text, category, 0) there for "module",
        # (text, category) in one registry for "once", whose record is cleared too
        key = (None if action == "once" else caught.filename, caught.lineno if action == "default" else 0, category,
               text)
        with _SAID_LOCK:
            if _SAID_UNDER[0] != filters:  # the filters changed: every location is said again, as Python's
                _SAID.clear()
                _SAID_UNDER[0] = filters
            if key in _SAID:
                return
            _SAID[key] = None
            if len(_SAID) > _SAID_LIMIT:
                del _SAID[next(iter(_SAID))]
    # module=None is not the default: no filter would match it (the default derives the name from the file's); no
    # registry: the record above is this function's
    where = {} if module is None else {"module": module}
    warnings.warn_explicit(message, category, caught.filename, caught.lineno, registry=None, **where)


#: the warnings said so far inside :func:`each_warning_once` (``(category, text)``), per thread and task; None outside
_SAID_ONCE: contextvars.ContextVar[set[tuple[type, str]] | None] = contextvars.ContextVar("monai_unc_said_once",
                                                                                         default=None)


@contextlib.contextmanager
def each_warning_once() -> Iterator[None]:
    """Inside, a warning of :func:`warn_once_inside` is said the first time only.

    Enter it as a block inside the function (``with each_warning_once():``), not as a decorator: the decorator's
    frame would sit between the function and its caller, where a warning with a fixed ``stacklevel`` (a
    deprecation naming the caller) would then point.

    For a command whose steps read the same input several times (a report reads an evaluation's ``summary.json`` in
    its checks, its page and the summary it computes again): a warning about that input is said when first found, at
    once (an error under ``-W error`` stops the command there), and not again. Unlike :func:`said_once_per_call`,
    nothing is held: what a step records with ``warnings.catch_warnings(record=True)`` (a summary's list of warnings)
    is recorded as before. Nested blocks share the outermost block's record.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     with each_warning_once():
        ...         for _ in range(3):
        ...             warn_once_inside("summary.json: an empty class name")
        >>> [str(w.message) for w in caught]
        ['summary.json: an empty class name']
    """
    if _SAID_ONCE.get() is not None:
        yield
        return
    token = _SAID_ONCE.set(set())
    try:
        yield
    finally:
        _SAID_ONCE.reset(token)


def warn_once_inside(message: str, category: type[Warning] = UserWarning, stacklevel: int = 1) -> None:
    """:func:`warnings.warn`, but inside :func:`each_warning_once` only the first time for its category and text.

    Args:
        message: the warning's text.
        category: its class.
        stacklevel: as :func:`warnings.warn`'s, counted from the caller of this function.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_once_inside("said")  # outside a block: every time, as warnings.warn
        ...     warn_once_inside("said")
        >>> len(caught)
        2
    """
    said = _SAID_ONCE.get()
    if said is not None:
        if (category, message) in said:
            return
        said.add((category, message))
    warnings.warn(message, category, stacklevel=stacklevel + 1)


def keep_user_warnings(caught: Sequence[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    """The ``UserWarning`` s among recorded warnings, every other one issued again as raised (:func:`reemit_warning`).

    For a step whose ``UserWarning`` s are its own, listed (a case's, the cohort summary's), whose other warnings (a
    user's metric's ``RuntimeWarning``, numpy's, a ``DeprecationWarning``) are not: those are said as Python would
    have said them (earlier versions dropped them).

    Args:
        caught: the warnings recorded by ``warnings.catch_warnings(record=True)``.

    Returns:
        The recorded ``UserWarning`` s (subclasses included), in order.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as got:
        ...     warnings.simplefilter("always")
        ...     warnings.warn("empty mask", UserWarning)
        ...     warnings.warn("divide by zero", RuntimeWarning)
        >>> with warnings.catch_warnings(record=True) as again:
        ...     warnings.simplefilter("always")
        ...     kept = keep_user_warnings(got)
        >>> [str(w.message) for w in kept], [str(w.message) for w in again]
        (['empty mask'], ['divide by zero'])
    """
    kept = []
    for w in caught:
        if issubclass(w.category, UserWarning):
            kept.append(w)
        else:
            reemit_warning(w)
    return kept


def _active_filters() -> list[Any]:
    """The warning filters in effect (``warnings.filters``; those of the context where Python keeps them there)."""
    get = getattr(warnings, "_get_filters", None)  # Python 3.14's context-aware warnings
    return list(get() if callable(get) else warnings.filters)


def _filter_action(filters: Sequence[Any], text: str, category: type[Warning], module: str, lineno: int) -> str:
    """The action of the first of ``filters`` that matches a warning, else the default action.

    Matched as Python matches them: the message's and the module's regular expressions from the start, the category
    a subclass, the line 0 or equal.
    """
    for action, msg, cat, mod, ln in filters:
        if ((msg is None or msg.match(text)) and issubclass(category, cat) and (mod is None or mod.match(module))
                and (ln == 0 or ln == lineno)):
            return str(action)
    return str(warnings.defaultaction)


#: file -> module name, for :func:`reemit_warning`
_MODULE_OF_FILE: dict[str, str] = {}
#: the warnings :func:`reemit_warning` has said under the ``"default"`` action (file, line, category, text), under
#: ``"module"`` (line 0) or ``"once"`` (no file, line 0), in order, under the filters of ``_SAID_UNDER[0]``; at most
#: ``_SAID_LIMIT`` (the oldest dropped first)
_SAID: dict[tuple[str | None, int, type[Warning], str], None] = {}
_SAID_UNDER: list[Any] = [None]
_SAID_LIMIT = 4096
_SAID_LOCK = threading.Lock()


def _device_of_type(kind: str) -> torch.device:
    """This rank's device of a type another rank named: its current CUDA device for ``"cuda"``."""
    return torch.device("cuda", torch.cuda.current_device()) if kind == "cuda" else torch.device(kind)


def sync_case_buffers(metric: Any) -> None:
    """Gather the per-case buffers of a MONAI ``Cumulative`` metric across ranks, also where a rank has none.

    MONAI's ``Cumulative._sync`` skips the all-gather on a rank whose buffers are empty (no case: more ranks than
    cases, or an uneven split), so that rank's ``aggregate`` fails and the other ranks wait for it in the gather. Here
    every rank first learns each rank's buffer layout (trailing shape, dtype and device type); a rank without cases then
    joins the gather with empty buffers of that layout, on that type of device (the collective's backend follows it),
    so every rank gets the buffers of all cases, in rank order, as MONAI
    gathers them. Without any case on any rank nothing is gathered (``get_buffer`` is None on every rank, as for one
    process); layouts that differ across ranks raise the same ``ValueError`` on every rank. One process: MONAI's own
    ``_sync``.

    Args:
        metric: a ``monai.metrics.Cumulative`` (e.g. a ``CumulativeIterationMetric``); its ``_synced_tensors`` and
            ``_synced`` are set as MONAI's ``_sync`` sets them.

    Raises:
        ValueError: the ranks' buffers have different layouts.
    """
    import torch.distributed as dist
    from monai.metrics.metric import Cumulative
    from monai.utils import evenly_divisible_all_gather

    if metric._synced:
        return
    world = distributed_world()
    if world < 2:
        Cumulative._sync(metric)
        return
    local = None if metric._buffers is None else [torch.stack(b, dim=0) for b in metric._buffers]
    # the device's type too: a rank without cases gathers on the others' device, whatever the group's backends (its
    # own guess, buffer_device, took the GPU under cpu:gloo,cuda:nccl where the others' buffers lay on the CPU: one
    # gather split over gloo and NCCL; found by the review of the GPU paths)
    layout = None if local is None else [(tuple(t.shape[1:]), str(t.dtype).replace("torch.", ""), t.device.type)
                                         for t in local]
    layouts: list[Any] = [None] * world
    dist.all_gather_object(layouts, layout)
    known = [(r, lay) for r, lay in enumerate(layouts) if lay is not None]
    if not known:
        return  # no case on any rank: nothing to gather, as for one process
    bad = [r for r, lay in known if lay != known[0][1]]
    if bad:
        raise ValueError(f"{type(metric).__name__}: the ranks' per-case buffers differ: rank {bad[0]} has "
                         f"{layouts[bad[0]]}, rank {known[0][0]} {known[0][1]}")
    if local is None:  # this rank has no case: empty buffers of the others' layout, on their device
        local = [torch.empty((0, *shape), dtype=getattr(torch, dtype), device=_device_of_type(kind))
                 for shape, dtype, kind in known[0][1]]
    metric._synced_tensors = [evenly_divisible_all_gather(t.contiguous(), concat=True) for t in local]
    metric._synced = True


def stderr_line(text: str) -> None:
    """Print one line on stderr above any progress bar drawn there.

    tqdm clears its bars on stderr, the line is printed and the bars are drawn again below it (found by hostile
    testing: a case's failure line, printed while ``infer``'s bar was drawn, began after the bar's text on the same
    terminal line, ``infer:  0%|  | 0/4 [..., bad]monai-unc infer: case 'bad' failed: ...``). Without a bar it is a
    plain ``print``.

    Args:
        text: the line (without its newline).

    Example:
        >>> stderr_line("monai-unc infer: warning: example")  # doctest: +SKIP
    """
    from tqdm import tqdm  # the command line's warnings use this too: no tqdm import before the first one

    tqdm.write(text, file=sys.stderr)
    sys.stderr.flush()


def user_stacklevel() -> int:
    """The ``stacklevel`` of :func:`warnings.warn` that names the first caller outside this package.

    Counted from the function that calls this one (``1``) outward, skipping every frame of a file of this package (a
    decorator's wrapper, a shared implementation, another public function): a warning of degenerate input then
    points at the user's call whatever path led to it (in earlier versions fixed ``stacklevel`` values counted one
    path, and ``calibration_metrics`` or ``quality_estimates`` warned from inside the package). Python 3.12's
    ``skip_file_prefixes`` does this too; the package supports 3.10.

    Returns:
        The level (at least 1).

    Example:
        >>> import warnings
        >>> def check():  # in a user's module: the warning names its caller
        ...     warnings.warn("example", UserWarning, stacklevel=user_stacklevel() + 1)
    """
    # the frames of this package's files, as the package was imported or with symbolic links followed (_frames)
    return _first_frame_outside_package(sys._getframe(1))[1]


class _Held:
    """The warnings of one category and key held in a :func:`said_once_per_call` call, said as one at its end."""

    __slots__ = ("category", "message", "key", "rank", "items", "merge")

    def __init__(self, category: type[Warning], message: str, key: Any, rank: float, items: list[Any],
                 merge: Callable[[str, list[Any]], str] | None) -> None:
        self.category, self.message, self.key, self.rank = category, message, key, rank
        self.items, self.merge = items, merge

    def join(self, held: dict[Any, _Held]) -> None:
        """Add this warning to ``held``: a new key, or the items of one held already (its message of the larger
        rank)."""
        k = (self.category, self.message if self.key is None else self.key)
        cur = held.get(k)
        if cur is None:
            held[k] = self
            return
        if self.rank > cur.rank:
            cur.message, cur.rank = self.message, self.rank
        cur.items.extend(self.items)
        if cur.merge is None:
            cur.merge = self.merge

    def text(self) -> str:
        """The text said: ``merge(message, items)``, or the message."""
        return self.message if self.merge is None else self.merge(self.message, self.items)


#: the warnings :func:`said_once_per_call` holds while a call runs in this thread (or asyncio task):
#: ``{(category, key): _Held}``; None outside such a call (a context variable: one thread's call holds none of
#: another's warnings, and no warning filter changes)
_HELD_WARNINGS: contextvars.ContextVar[dict[Any, _Held] | None] = \
    contextvars.ContextVar("monai_unc_held_warnings", default=None)


def say_warning(
    message: str,
    category: type[Warning] = UserWarning,
    stacklevel: int = 1,
    key: Any = None,
    rank: float = 0.0,
    item: Any = None,
    merge: Callable[[str, list[Any]], str] | None = None,
) -> None:
    """:func:`warnings.warn`, or, inside :func:`said_once_per_call`, hold the warning for the end of that call.

    Args:
        message: the warning's text (said as is outside a held call).
        category: its class.
        stacklevel: as :func:`warnings.warn`'s, counted from the caller of this function (outside a held call).
        key: warnings of the same category and key are said once in a held call (default: the message itself).
        rank: of several held warnings of one key, the message of the largest rank is said (e.g. the most extreme
            value of the call's cases), else the first.
        item: what this warning is about (a region, a case), collected with the items of the other warnings of its
            key in a held call, in order (duplicates kept: their number is the number of times it was said).
        merge: ``merge(message, items) -> text``: the text said for the held warnings of one key, from the message
            (of the largest rank) and their items (:func:`count_cases` appends their number); default the message.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     said_once_per_call(lambda: [say_warning("degenerate case") for _ in range(2)])
        ...     said_once_per_call(lambda: [say_warning("empty case", merge=count_cases) for _ in range(3)])
        [None, None]
        [None, None, None]
        >>> [str(w.message) for w in caught]
        ['degenerate case', 'empty case (in 3 cases)']
    """
    held = _HELD_WARNINGS.get()
    if held is None:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
        return
    _Held(category, message, key, rank, [item], merge).join(held)


def count_cases(message: str, items: list[Any]) -> str:
    """A ``merge`` of :func:`say_warning`: the message, with ``" (in N cases)"`` appended when said ``N >= 2`` times.

    The message's words stay first, so a filter matching its beginning still matches.

    Args:
        message: the held message.
        items: one item per time it was said.

    Returns:
        The text.

    Example:
        >>> count_cases("BUC: undefined", [None] * 8)
        'BUC: undefined (in 8 cases)'
    """
    return message if len(items) < 2 else f"{message} (in {len(items)} cases)"


def said_once_per_call(call: Callable[..., _R], *args: Any, **kwargs: Any) -> _R:
    """``call(*args, **kwargs)``, each distinct warning of :func:`say_warning` inside said once, at the user's line.

    For a MONAI metric adapter's ``__call__``: MONAI's ``CumulativeIterationMetric.__call__`` evaluates every case
    (and every item of a decollated list) in turn, so a warning of degenerate input said inside came once per case, at
    a line of MONAI's ``metric.py`` (or of this package), which a filter on the user's module does not match; and for
    a function that loops over the cases of a batch (:func:`once_per_call`). The
    warnings are held (:func:`say_warning`) and said when the call returns, with :func:`user_stacklevel`; a call that
    raises drops its held warnings (the error is what it says), and leaves none for the next call. Inside another
    held call they join that call's (their items too).

    Args:
        call: the function to run.
        *args: its positional arguments.
        **kwargs: its keyword arguments.

    Returns:
        What ``call`` returns.

    Example:
        >>> said_once_per_call(max, 1, 2)
        2
    """
    held: dict[Any, _Held] = {}
    token = _HELD_WARNINGS.set(held)
    try:
        out = call(*args, **kwargs)
    finally:
        _HELD_WARNINGS.reset(token)
    outer = _HELD_WARNINGS.get()
    for entry in held.values():
        if outer is not None:
            entry.join(outer)
        else:
            warnings.warn(entry.text(), entry.category, stacklevel=user_stacklevel())
    return out


def once_per_call(fn: Callable[..., _R]) -> Callable[..., _R]:
    """Decorate a function so that it runs inside :func:`said_once_per_call`: a function of a batch says each
    distinct warning of its cases once for the call, at the user's line.

    Args:
        fn: the function.

    Returns:
        The wrapped function (its name, docstring and signature kept).

    Example:
        >>> @once_per_call
        ... def double(x):
        ...     return 2 * x
        >>> double(2)
        4
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> _R:
        return said_once_per_call(fn, *args, **kwargs)

    return wrapper


def warn_nan(message: str, stacklevel: int = 3) -> float:
    """Emit a ``UserWarning`` for degenerate but valid input and return NaN.

    Inside :func:`said_once_per_call` (a metric class's call, a function of a batch: :func:`once_per_call`) the
    warning is held and said once for the call, naming how many times (cases) it was said (:func:`count_cases`).
    """
    say_warning(message, UserWarning, stacklevel=stacklevel, merge=count_cases)
    return float("nan")


def warn_tied(scores: np.ndarray, caller: str, value: str, stacklevel: int = 3, count: int | None = None) -> bool:
    """Warn that ``scores`` (two or more, finite) are all tied, so they cannot rank the cases; True when they are.

    The one warning of every ranking metric given a constant score (AURC, E-AURC, AUGRC, AUROC, average precision,
    the referral curve): valid input whose value is the chance value of no ranking, not a merit of the score. Inside
    :func:`said_once_per_call` (a function of a batch) it is said once for the call, with the number of its cases
    (:func:`count_cases`).

    Args:
        scores: the scores (any shape; checked finite by the caller).
        caller: the metric's name, first in the message.
        value: what the metric is then, e.g. ``"AUROC is the chance value 0.5"``.
        stacklevel: as :func:`warnings.warn`'s.
        count: the number of scores the message states (default ``scores.size``; a caller may pass the extremes
            of sorted groups with their total count).

    Returns:
        Whether the scores are all tied (and the warning was given).
    """
    a = np.asarray(scores)
    n = a.size if count is None else count
    if n < 2 or a.min() != a.max():
        return False
    # a function of a batch says it once for the call, naming how many cases (its first case's count of scores)
    say_warning(f"{caller}: all {n} scores are tied, so the scores cannot rank the cases; {value}", UserWarning,
                stacklevel=stacklevel, key=(caller, "tied", value), merge=count_cases)
    return True


def case_vector(x: Any, name: str) -> np.ndarray:
    """``x`` as a finite, non-empty, 1-D float64 numpy array (ValueError naming ``name`` otherwise)."""
    a = to_numpy(x, name)
    if a.dtype == bool:
        a = a.astype(np.float64)
    # complex is a number too, but casting it to float64 drops the imaginary part (found by hostile testing: an AURC
    # of complex scores came back with only numpy's ComplexWarning)
    if not (np.issubdtype(a.dtype, np.number)) or np.issubdtype(a.dtype, np.complexfloating):
        raise TypeError(f"{name} must hold real numbers, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per case), got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty: at least one case is needed")
    a = a.astype(np.float64, copy=False)
    if not np.isfinite(a).all():
        n_bad = int((~np.isfinite(a)).sum())
        raise ValueError(f"{name} contains {n_bad} non-finite value(s) (NaN or inf)")
    return a


def case_pair(scores: Any, other: Any, other_name: str, scores_name: str = "scores") -> tuple[np.ndarray, np.ndarray]:
    """``scores`` and ``other`` as :func:`case_vector` arrays of the same length (one value per case).

    ``scores_name`` and ``other_name`` are the caller's argument names (the errors name them).
    """
    s = case_vector(scores, scores_name)
    o = case_vector(other, other_name)
    if s.shape != o.shape:
        raise ValueError(f"{scores_name} and {other_name} must have the same length, got {s.size} and {o.size}")
    return s, o


def unique_json_keys(pairs: list[tuple[str, Any]], message: str) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key given twice (an ``object_pairs_hook`` of :func:`json.loads`).

    Plain ``json.loads`` keeps the last of two equal keys: a reader (or a person) that keeps the first sees other
    content, and a signed file could be edited without changing its parsed, signed content.

    Args:
        pairs: the object's ``(key, value)`` pairs in file order.
        message: the error, formatted with ``key`` (e.g. ``"the key {key!r} is given twice"``).

    Returns:
        The object.

    Raises:
        ValueError: a key given twice.

    Example:
        >>> import json
        >>> json.loads('{"a": 1}', object_pairs_hook=lambda p: unique_json_keys(p, "{key!r} twice"))
        {'a': 1}
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(message.format(key=key))
        out[key] = value
    return out


def check_class_space(channels: tuple[int | None, int | None], labels: tuple[Any, Any],
                      names: tuple[str, str] = ("pred", "target"), hint: str = "") -> None:
    """Refuse labels outside the classes ``0 .. C-1`` that ``C`` class channels of either input declare.

    A reference label outside them (the ignore label 255 of a partly annotated scan, a dataset id such as BraTS 4
    beside a 4-class network) was counted as an error voxel without a word by the error maps and the spatial metrics,
    where the calibration metrics refuse it (found by hostile review).

    Args:
        channels: the class channels of the two inputs, None for an input given as a label map.
        labels: their label maps (numpy or torch, any shape; the argmax of class channels).
        names: the two inputs' names in the messages.
        hint: the end of the message (what to do with an ignore label).

    Raises:
        ValueError: two channel counts that differ, or a label map holding a label ``>= C``.

    Example:
        >>> check_class_space((3, None), (np.array([0, 2]), np.array([0, 1, 2])))
        >>> check_class_space((3, None), (np.array([0, 2]), np.array([0, 255])))
        Traceback (most recent call last):
        ...
        ValueError: target holds label 255 outside the classes 0..2 of the 3 channels of pred
    """
    cp, ct = channels
    if cp is not None and ct is not None and cp != ct:
        raise ValueError(f"{names[0]} has {cp} class channels but {names[1]} {ct}: they must be of the same classes")
    c = cp if cp is not None else ct
    if c is None:
        return
    for name, other, values, given in ((names[1], names[0], labels[1], ct), (names[0], names[1], labels[0], cp)):
        if given is None and int(values.max()) >= c:
            raise ValueError(f"{name} holds label {int(values.max())} outside the classes 0..{c - 1} of the {c} "
                             f"channels of {other}{f' ({hint})' if hint else ''}")


#: what to install for the ignite engine and handlers (:func:`require_ignite`)
IGNITE_EXTRA = "pip install 'monai-unc[ignite]'"


def require_ignite(owner: str) -> None:
    """Refuse, in one line naming the extra, to build an ignite engine or handler where pytorch-ignite is missing.

    pytorch-ignite is no dependency of the package (the command line does not use it); MONAI builds its engines and
    metric handlers on it, and without it they fail with MONAI's ``OptionalImportError`` naming
    ``ignite.metrics.Metric``, not what to install.

    Args:
        owner: the class being built, named in the message (``"monai_unc.handlers.CalibrationHandler"``).

    Raises:
        ImportError: pytorch-ignite does not import; the message names the ``ignite`` extra.

    Example:
        >>> require_ignite("monai_unc.engines.UncertaintyEvaluator")  # pytorch-ignite is installed here
    """
    try:
        import ignite  # noqa: F401
    except ImportError as error:
        raise ImportError(f"{owner} needs pytorch-ignite, which is not installed: {IGNITE_EXTRA}") from error


def link_target(path: str | os.PathLike) -> str:
    """Where the symbolic link ``path`` points, for a message ("?" when it cannot be read, e.g. removed meanwhile)."""
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _json_default(obj: Any) -> Any:
    """What :func:`canonical_text` writes for a value JSON has no text for: exact and the same on every process."""
    if isinstance(obj, (set, frozenset)):  # a set's order follows the process's string hashing: sorted here
        return {"__set__": sorted(canonical_text(x) for x in obj)}
    if isinstance(obj, np.generic):
        return {"__numpy__": obj.dtype.str, "value": obj.item()}
    if isinstance(obj, np.ndarray) or (hasattr(obj, "tolist") and hasattr(obj, "shape") and hasattr(obj, "dtype")):
        # every element (an array's repr elides the middle of a large one) with its dtype and shape
        return {"__array__": str(obj.dtype), "shape": list(obj.shape), "data": obj.tolist()}
    return repr(obj)


def canonical_text(value: Any) -> str:
    """A value as canonical JSON text, for comparing the values of ranks (picklable data of any kind).

    Keys sorted; a NaN equals itself (``NaN``); ``True``, ``1`` and ``1.0`` differ; an array (numpy, torch) gives
    its dtype, shape and every element; a set its elements sorted by their text; anything else its ``repr``.

    Args:
        value: the value.

    Returns:
        The text.

    Example:
        >>> canonical_text({"b": float("nan"), "a": {2, 1}})
        '{"a": {"__set__": ["1", "2"]}, "b": NaN}'
    """
    try:
        return json.dumps(value, sort_keys=True, default=_json_default)
    except (TypeError, ValueError):  # keys that do not sort (or are no strings), a circular value
        return repr(value)
