"""Shared input handling: numpy/torch conversion, validation with clear errors, NaN warnings.

Conventions (shared/DESIGN.md): probabilities are ``(B, C, *spatial)`` with ``C >= 2``; samples are
``(S, B, C, *spatial)``; label maps are ``(B, *spatial)`` or ``(B, 1, *spatial)``; outputs follow the
input's library (numpy in, numpy out; torch in, torch out on the same device).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "ArrayLike",
    "PROB_TOL",
    "to_tensor",
    "like_input",
    "to_numpy",
    "check_finite",
    "check_probabilities",
    "check_unit_interval",
    "check_labels",
    "normalize_spacing",
    "warn_nan",
]

ArrayLike = np.ndarray | torch.Tensor

#: tolerance for probabilities outside [0, 1] and for the sum over classes differing from 1
PROB_TOL = 1e-3


def to_tensor(x: Any, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Return ``x`` as a torch tensor without copying where possible (numpy -> CPU tensor).

    MetaTensors are reduced to plain tensors so that arithmetic stays fast.
    """
    if isinstance(x, torch.Tensor):
        t = x.as_tensor() if hasattr(x, "as_tensor") else x
    elif isinstance(x, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(x))
    elif isinstance(x, (list, tuple, float, int, np.generic)):
        t = torch.as_tensor(np.asarray(x))
    else:
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")
    if dtype is not None:
        t = t.to(dtype)
    return t


def like_input(result: torch.Tensor, reference: Any) -> ArrayLike:
    """Convert ``result`` back to the library of ``reference`` (numpy in -> numpy out)."""
    if isinstance(reference, np.ndarray):
        return result.detach().cpu().numpy()
    return result


def to_numpy(x: Any, name: str) -> np.ndarray:
    """Return ``x`` as a numpy array (copying from the GPU when needed)."""
    if isinstance(x, torch.Tensor):
        t = x.as_tensor() if hasattr(x, "as_tensor") else x
        return t.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (list, tuple, float, int, np.generic)):
        return np.asarray(x)
    raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")


def check_finite(x: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` if ``x`` holds NaN or infinite values."""
    x = x.detach()
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        n_bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} contains {n_bad} non-finite value(s) (NaN or inf)")


def check_probabilities(
    p: torch.Tensor, name: str = "probs", channel_dim: int = 1, min_ndim: int = 3, tol: float = PROB_TOL
) -> None:
    """Validate class probabilities along ``channel_dim``.

    Raises ``ValueError`` naming ``name`` when the tensor has too few dimensions, fewer than two
    classes, an empty volume, non-finite values, values outside ``[0, 1]`` (beyond ``tol``), or when
    the classes do not sum to 1 (beyond ``tol``).
    """
    p = p.detach()
    if not p.is_floating_point():
        raise TypeError(f"{name} must be a floating point array of probabilities, got dtype {p.dtype}")
    if p.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions ((B, C, *spatial) probabilities), "
            f"got shape {tuple(p.shape)}"
        )
    if p.shape[channel_dim] < 2:
        raise ValueError(
            f"{name} must have at least 2 classes along dim {channel_dim} (binary tasks carry both "
            f"channels), got shape {tuple(p.shape)}"
        )
    if p.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(p.shape)})")
    check_finite(p, name)
    lo, hi = float(p.min()), float(p.max())
    if lo < -tol or hi > 1 + tol:
        raise ValueError(f"{name} must lie in [0, 1], got values in [{lo:.4g}, {hi:.4g}]")
    dev = float((p.sum(dim=channel_dim, dtype=torch.float64) - 1).abs().max())
    if dev > tol:
        raise ValueError(
            f"{name} must sum to 1 over the class dimension {channel_dim} (tolerance {tol}), "
            f"largest deviation {dev:.4g}; pass probabilities, not logits"
        )


def check_unit_interval(
    p: torch.Tensor, name: str = "probs", channel_dim: int = 1, min_ndim: int = 3, tol: float = PROB_TOL
) -> None:
    """Validate multi-label (per-channel Bernoulli) probabilities: values in ``[0, 1]``, no sum constraint.

    Raises ``ValueError`` naming ``name`` when the tensor has too few dimensions, no channel, an empty volume,
    non-finite values or values outside ``[0, 1]`` (beyond ``tol``); ``TypeError`` for non-float dtypes.
    """
    p = p.detach()
    if not p.is_floating_point():
        raise TypeError(f"{name} must be a floating point array of probabilities, got dtype {p.dtype}")
    if p.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimensions ((B, C, *spatial) probabilities), "
            f"got shape {tuple(p.shape)}"
        )
    if p.shape[channel_dim] < 1 or p.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(p.shape)})")
    check_finite(p, name)
    lo, hi = float(p.min()), float(p.max())
    if lo < -tol or hi > 1 + tol:
        raise ValueError(
            f"{name} must lie in [0, 1], got values in [{lo:.4g}, {hi:.4g}]; pass probabilities, not logits"
        )


def check_labels(labels: torch.Tensor, name: str = "labels", num_classes: int | None = None) -> torch.Tensor:
    """Validate an integer label map and return it as int64.

    Float arrays are accepted when every value is integral (label maps read from NIfTI are often float).
    """
    if labels.is_floating_point():
        check_finite(labels, name)
        if not bool((labels == labels.round()).all()):
            raise ValueError(f"{name} must hold integer class labels, got non-integral values")
    elif labels.dtype == torch.bool:
        labels = labels.to(torch.int64)
    if labels.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(labels.shape)})")
    labels = labels.to(torch.int64)
    if int(labels.min()) < 0:
        raise ValueError(f"{name} must be non-negative class indices, got minimum {int(labels.min())}")
    if num_classes is not None and int(labels.max()) >= num_classes:
        raise ValueError(
            f"{name} holds class {int(labels.max())} but only {num_classes} classes are present"
        )
    return labels


def normalize_spacing(spacing: float | Sequence[float] | np.ndarray, ndim: int, name: str = "spacing") -> tuple:
    """Return per-axis spacing in mm as a tuple of ``ndim`` positive floats."""
    if isinstance(spacing, (int, float, np.floating, np.integer)):
        sp = (float(spacing),) * ndim
    else:
        sp = tuple(float(s) for s in np.asarray(spacing, dtype=float).ravel())
        if len(sp) != ndim:
            raise ValueError(f"{name} must have {ndim} values (one per spatial axis), got {len(sp)}")
    if not all(np.isfinite(s) and s > 0 for s in sp):
        raise ValueError(f"{name} must be positive and finite (mm per axis), got {sp}")
    return sp


def warn_nan(message: str, stacklevel: int = 3) -> float:
    """Emit a ``UserWarning`` for degenerate but valid input and return NaN."""
    warnings.warn(message, UserWarning, stacklevel=stacklevel)
    return float("nan")
