"""The checks of the losses' settings and one-hot targets, and the last step of the L1-ACE.

What :mod:`.functional` and :mod:`.calibration` share (the L1-ACE's last step goes from the bins to the error).

Public names in a private module: the package imports no private name across modules.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._utils import check_nonnegative, is_int, is_real

__all__ = [
    "REAL_TYPES",
    "REDUCED_PRECISION",
    "ace_of_bins",
    "check_unit_target",
    "int_option",
    "nonnegative_option",
    "outside_unit_interval",
    "real_option",
    "spacing_dims",
    "spacing_steps",
]

#: the types of a real number option: Python or numpy (a numpy scalar as MONAI accepts it), not a bool
REAL_TYPES = (int, float, np.integer, np.floating)
#: the dtypes the losses compute and accumulate in float32 (an 8- or 11-bit mantissa stops a count at 256 or 2048,
#: and float16 overflows above 65504)
REDUCED_PRECISION = (torch.float16, torch.bfloat16)


def real_option(value: object, name: str, what: str) -> float:
    """``value`` as a float when it is a real number (Python or numpy scalar; not a bool, a string or ``None``).

    Args:
        value: the option's value.
        name: the option's name in the error.
        what: what the option must be, for the error (``"a finite number >= 0"``).

    Returns:
        ``float(value)`` (the range is the caller's to check).

    Raises:
        TypeError: ``value`` is not a real number, naming ``name`` and the type of ``value``.
    """
    if not is_real(value):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    return float(value)


def int_option(value: object, name: str, what: str) -> int:
    """``value`` as an int when it is an integer (Python or numpy scalar; not a bool, a float or ``None``).

    Args:
        value: the option's value.
        name: the option's name in the error.
        what: what the option must be, for the error (``"an integer >= 1"``).

    Returns:
        ``int(value)`` (the range is the caller's to check).

    Raises:
        TypeError: ``value`` is not an integer, naming ``name`` and the type of ``value``.
    """
    if not is_int(value):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    return int(value)


def nonnegative_option(value: object, name: str) -> float:
    """A finite number ``>= 0`` (a margin, a weight) as a float; ``TypeError`` / ``ValueError`` naming ``name``.

    The type is refused as :func:`real_option` refuses it (naming the value's type), the range by
    :func:`~monai_unc._utils.check_nonnegative`.
    """
    if not is_real(value):
        real_option(value, name, "a finite number >= 0")  # raises, naming the type
    return check_nonnegative(value, name)


def spacing_steps(spacing: object, dims: int) -> list[float]:
    """The voxel size per axis of an SVLS kernel: ``None`` (isotropic), one number, or one number per axis."""
    what = "a positive finite number, or one per spatial axis"
    spacing = _plain_spacing(spacing)
    if spacing is None:
        return [1.0] * dims
    if isinstance(spacing, (bool, np.bool_, str, bytes)):
        raise TypeError(f"spacing must be {what}, got {type(spacing).__name__} {spacing!r}")
    if isinstance(spacing, REAL_TYPES):
        steps = [float(spacing)] * dims
    else:
        try:
            steps = [real_option(v, "spacing", what) for v in spacing]  # type: ignore[union-attr]
        except TypeError as err:
            if "spacing must be" in str(err):
                raise
            raise TypeError(f"spacing must be {what}, got {type(spacing).__name__} {spacing!r}") from None
    if len(steps) != dims or not all(0 < v < math.inf for v in steps):
        raise ValueError(f"spacing must be {dims} positive finite numbers, got {spacing!r}")
    return steps


def _plain_spacing(spacing: object) -> object:
    """A real tensor's or array's numbers as Python floats (MONAI's ``MetaTensor.pixdim`` is a tensor), else as it is.

    A 0-d numpy array is one number, as a 0-d tensor is (it was refused: iterating it raises a TypeError).
    """
    if isinstance(spacing, torch.Tensor) and not spacing.dtype.is_complex and spacing.dtype != torch.bool \
            and spacing.ndim <= 1:
        return spacing.detach().cpu().double().tolist()
    if isinstance(spacing, np.ndarray) and spacing.ndim == 0 and spacing.dtype.kind in "iuf":
        return float(spacing)
    return spacing


def spacing_dims(spacing: object) -> int:
    """The number of axes a spacing gives (1 for ``None`` or one number, which fit any number of axes)."""
    spacing = _plain_spacing(spacing)
    if spacing is None or isinstance(spacing, (*REAL_TYPES, bool, np.bool_, str, bytes)):
        return 1
    try:
        return len(spacing)  # type: ignore[arg-type]
    except TypeError:
        return 1  # spacing_steps names the argument and its type


def outside_unit_interval(target: torch.Tensor) -> torch.Tensor:
    """Whether ``target`` has a value outside ``[0, 1]`` (NaN does not count), as a 0-d bool tensor on its device.

    Nothing is synchronised: the caller reads the flag (alone, or folded into a check it makes anyway).
    """
    return ((target < 0) | (target > 1)).any()


def check_unit_target(target: torch.Tensor) -> None:
    """Raise a ``ValueError`` naming ``target`` when a value lies outside ``[0, 1]`` (one device synchronisation).

    Args:
        target: a one-hot or soft target.

    Raises:
        ValueError: a value below 0 or above 1 (a label map given as a one-hot target, a -1 ignore label, ...).
    """
    if bool(outside_unit_interval(target)):
        t = target.detach().double()
        lo, hi = (float(v) for v in torch.aminmax(t[~torch.isnan(t)]))
        raise ValueError(
            f"target must be one-hot or soft with values in [0, 1], got values in [{lo:g}, {hi:g}] "
            "(a label map: one-hot it first, or pass to_onehot_y=True to a loss)"
        )


def ace_of_bins(
    sum_p: torch.Tensor,
    sum_y: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    soft: bool,
    empty_weight: float,
    ignore_empty_classes: bool,
) -> torch.Tensor:
    """The L1-ACE ``(B, C)`` of the bins of :func:`~monai_unc.losses.functional.binned_calibration`.

    The step after the binning of :func:`~monai_unc.losses.functional.l1_average_calibration_error`, without its
    range check of ``target`` (the losses fold that check into the one synchronisation of a step).

    Args:
        sum_p: ``(B, C, num_bins)`` weighted sums of probabilities.
        sum_y: ``(B, C, num_bins)`` weighted sums of targets.
        weight: ``(B, C, num_bins)`` bin weights.
        target: the ``(B, C, *spatial)`` target (for ``ignore_empty_classes``).
        soft: the bins are soft (``empty_weight`` applies).
        empty_weight: a checked finite number ``>= 0``.
        ignore_empty_classes: the error of a channel whose target is all 0 in an image is 0.

    Returns:
        ``(B, C)`` errors in the dtype of the sums.
    """
    # a bin of weight 0 is empty whatever empty_weight (0 / 0 otherwise); a NaN weight (a NaN probability) is kept,
    # so that the error is NaN, not that of the other voxels
    valid = (weight != 0) & ~(weight < float(empty_weight)) if soft else weight > 0
    safe = torch.where(valid, weight, torch.ones_like(weight))
    gaps = torch.where(valid, (sum_p / safe - sum_y / safe).abs(), torch.zeros_like(weight))
    ace = gaps.sum(-1) / valid.sum(-1).clamp(min=1).to(gaps.dtype)
    if ignore_empty_classes:
        present = target.reshape(*target.shape[:2], -1).sum(-1) > 0
        ace = ace * present.to(ace.dtype)
    return ace
