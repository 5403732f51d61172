"""Voxel-wise uncertainty measures from class probabilities.

Shapes (docs/design.md): probabilities ``(B, C, *spatial)`` with ``C >= 2``; samples
``(S, B, C, *spatial)``; every map is returned as ``(B, 1, *spatial)`` where larger means less confident.
Entropies use the natural log (nats); ``normalize=True`` divides by ``log(C)`` so that maps lie in [0, 1].

The decomposition (ValUES, Sec. 3 / eq. 1; RETINA, Band et al.) is

    PE(x)  = H( mean_s p_s(x) )                  predictive entropy, total uncertainty
    EE(x)  = mean_s H( p_s(x) )                  expected entropy, aleatoric part
    MI(x)  = PE(x) - EE(x) >= 0                  mutual information, epistemic part

with ``H(p) = -sum_c p_c log p_c`` and ``0 log 0 = 0``. MI is non-negative by Jensen's inequality; the
difference of two floating-point entropies can fall a few ulps below zero, so it is clamped at 0.

Inputs may be numpy arrays or torch tensors (CPU or CUDA); outputs follow the input's library and dtype.
"""

from __future__ import annotations

import math

import torch

from ._utils import ArrayLike, check_probabilities, like_input, to_tensor

__all__ = [
    "entropy",
    "predictive_entropy",
    "expected_entropy",
    "mutual_information",
    "mutual_information_from_entropies",
    "max_softmax",
    "variance",
    "variance_from_moments",
]


def _entropy_t(p: torch.Tensor, dim: int, normalize: bool) -> torch.Tensor:
    """H(p) = -sum_c p_c log p_c along ``dim`` (kept), 0 log 0 = 0; the single entropy formula."""
    # p * log(max(p, tiny)) is xlogy (0 log 0 = 0) at about half the cost of torch.special.xlogy on CPU
    h = -(p * torch.log(p.clamp_min(torch.finfo(p.dtype).tiny))).sum(dim=dim, keepdim=True)
    if normalize:
        h = h / math.log(p.shape[dim])
    return h


def entropy(probs: ArrayLike, normalize: bool = False, validate: bool = True) -> ArrayLike:
    """Shannon entropy of class probabilities, ``(B, C, *spatial) -> (B, 1, *spatial)``.

    ``H(p) = -sum_c p_c log p_c`` in nats (natural log), ``0 log 0 = 0``; with ``normalize=True`` the
    result is divided by ``log C`` and lies in [0, 1]. Applied to the mean of samples this is the
    predictive entropy (ValUES eq. 1).

    Args:
        probs: probabilities, classes on dim 1, summing to 1.
        normalize: divide by ``log(C)``.
        validate: check that ``probs`` are finite probabilities (one extra pass); raises ``ValueError``.
    """
    p = to_tensor(probs, "probs")
    if validate:
        check_probabilities(p, "probs")
    return like_input(_entropy_t(p, 1, normalize), probs)


def _samples(samples: ArrayLike, validate: bool) -> torch.Tensor:
    s = to_tensor(samples, "samples")
    if s.ndim < 4:
        raise ValueError(
            f"samples must have shape (S, B, C, *spatial) with at least one spatial axis, got {tuple(s.shape)}"
        )
    if s.shape[0] < 1:
        raise ValueError("samples must hold at least one sample along dim 0")
    if validate:
        check_probabilities(s, "samples", channel_dim=2, min_ndim=4)
    return s


def predictive_entropy(samples: ArrayLike, normalize: bool = False, validate: bool = True) -> ArrayLike:
    """Predictive entropy ``H(mean_s p_s)`` of samples ``(S, B, C, *spatial) -> (B, 1, *spatial)``.

    Total uncertainty (PU in ValUES; "predictive entropy" in RETINA, Band et al.).
    """
    s = _samples(samples, validate)
    return like_input(_entropy_t(s.mean(0), 1, normalize), samples)


def expected_entropy(samples: ArrayLike, normalize: bool = False, validate: bool = True) -> ArrayLike:
    """Expected entropy ``mean_s H(p_s)`` of samples ``(S, B, C, *spatial) -> (B, 1, *spatial)``.

    The aleatoric part of the decomposition (AU in ValUES).
    """
    s = _samples(samples, validate)
    return like_input(_entropy_t(s, 2, normalize).mean(0), samples)


def mutual_information_from_entropies(pe: torch.Tensor, ee: torch.Tensor) -> torch.Tensor:
    """``MI = PE - EE`` clamped at 0 (Jensen: MI >= 0; the clamp only removes rounding below zero)."""
    return (pe - ee).clamp_min(0)


def mutual_information(samples: ArrayLike, normalize: bool = False, validate: bool = True) -> ArrayLike:
    """Mutual information ``H(mean_s p_s) - mean_s H(p_s)``, ``(S, B, C, *spatial) -> (B, 1, *spatial)``.

    Epistemic uncertainty (EU in ValUES) for dropout, ensembles and test-time augmentation (for TTA it is
    MI(Y, T), ValUES Appendix E); aleatoric for latent-variable models (ValUES Appendix D).
    """
    s = _samples(samples, validate)
    pe = _entropy_t(s.mean(0), 1, normalize)
    ee = _entropy_t(s, 2, normalize).mean(0)
    return like_input(mutual_information_from_entropies(pe, ee), samples)


def max_softmax(probs: ArrayLike, validate: bool = True) -> ArrayLike:
    """Maximum-softmax uncertainty ``1 - max_c p_c``, ``(B, C, *spatial) -> (B, 1, *spatial)``.

    For samples, pass their mean. Lies in ``[0, 1 - 1/C]``; larger = less confident.
    """
    p = to_tensor(probs, "probs")
    if validate:
        check_probabilities(p, "probs")
    return like_input(1 - p.amax(dim=1, keepdim=True), probs)


def variance_from_moments(mean: torch.Tensor, mean_sq: torch.Tensor) -> torch.Tensor:
    """Mean over classes of ``E[p^2] - E[p]^2`` (population variance), clamped at 0, ``-> (B, 1, ...)``."""
    return (mean_sq - mean * mean).clamp_min(0).mean(dim=1, keepdim=True)


def variance(samples: ArrayLike, validate: bool = True) -> ArrayLike:
    """Sample variance map ``mean_c Var_s(p_{s,c})``, ``(S, B, C, *spatial) -> (B, 1, *spatial)``.

    Population variance (divided by S, not S - 1), averaged over classes (docs/design.md, ``variance`` key).
    """
    s = _samples(samples, validate)
    return like_input(s.var(dim=0, correction=0).mean(dim=1, keepdim=True), samples)
