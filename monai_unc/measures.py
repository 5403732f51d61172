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

Multi-label (region-based) models, ``multilabel=True``: each of the ``C >= 1`` channels is an independent
Bernoulli variable with foreground probability ``p_c`` (a sigmoid per channel, e.g. the BraTS regions WT/TC/ET;
the channels need not sum to 1). Every measure is then evaluated per channel and maps are ``(B, C, *spatial)``,
one per region: the binary entropy ``H_b(p) = -p log p - (1 - p) log(1 - p)`` replaces ``H`` in PE, EE and MI,
the max-probability uncertainty is ``1 - max(p_c, 1 - p_c)`` (in ``[0, 0.5]``), the variance is the per-channel
population variance, and ``normalize=True`` divides the entropies by ``log 2``. For ``C = 1`` this equals the
two-class categorical result on ``(1 - p, p)``.

Inputs may be numpy arrays or torch tensors (CPU or CUDA); outputs follow the input's library and dtype.

``max_softmax`` is the deprecated former name of :func:`one_minus_max_prob` (the map is ``1 - max_c p_c``, not the
largest probability, and the probabilities need not come from a softmax).
"""

from __future__ import annotations

import math
import warnings

import torch

from ._deprecation import REMOVAL
from ._utils import ArrayLike, check_finite, check_probabilities, check_unit_interval, like_input, to_tensor

__all__ = [
    "binary_entropy",
    "entropy",
    "predictive_entropy",
    "expected_entropy",
    "mutual_information",
    "mutual_information_from_entropies",
    "one_minus_max_prob",
    "max_softmax",
    "variance",
    "variance_from_moments",
    "variance_from_square_sums",
]


def _entropy_t(p: torch.Tensor, dim: int, normalize: bool) -> torch.Tensor:
    """H(p) = -sum_c p_c log p_c along ``dim`` (kept), 0 log 0 = 0; the single entropy formula."""
    # p * log(max(p, tiny)) is xlogy (0 log 0 = 0) at about half the cost of torch.special.xlogy on CPU
    t = p.clamp_min(torch.finfo(p.dtype).tiny)
    if torch.is_grad_enabled() and p.requires_grad:
        h = -(p * torch.log(t)).sum(dim=dim, keepdim=True)
    else:  # the same values, computed in the one temporary (no autograd graph to keep it for)
        h = t.log_().mul_(p).sum(dim=dim, keepdim=True).neg_()
    if normalize:
        h = h / math.log(p.shape[dim])
    return h


def _binary_entropy_t(p: torch.Tensor, normalize: bool) -> torch.Tensor:
    """H_b(p) = -p log p - (1 - p) log(1 - p) elementwise (per channel), 0 log 0 = 0: the one binary-entropy formula.

    A region's Bernoulli entropy in nats; divided by log 2 with ``normalize``.
    """
    tiny = torch.finfo(p.dtype).tiny
    q = 1 - p
    h = -(p * torch.log(p.clamp_min(tiny)) + q * torch.log(q.clamp_min(tiny)))
    if normalize:
        h = h / math.log(2)
    return h


def entropy_map_t(p: torch.Tensor, dim: int, normalize: bool, multilabel: bool) -> torch.Tensor:
    """Categorical entropy over ``dim`` (kept, one channel) or, for ``multilabel``, the per-channel binary entropy.

    The unchecked tensor kernel behind :func:`entropy`, :func:`binary_entropy` and the sample measures (also used by
    :mod:`monai_unc.stats`): ``H(p) = -sum_c p_c log p_c`` over ``dim``, or ``H_b(p_c)`` per channel.

    Args:
        p: probabilities, a tensor; classes (or regions) along ``dim``.
        dim: the class axis (kept, size 1 in the result) of the categorical entropy; unused for ``multilabel``.
        normalize: divide by ``log C`` (``log 2`` for ``multilabel``).
        multilabel: per-channel binary entropy instead of the categorical entropy.

    Returns:
        The entropy map, ``p``'s shape with ``dim`` of size 1 (categorical) or ``p``'s shape (``multilabel``).

    Example:
        >>> import torch
        >>> p = torch.tensor([[[0.5], [0.5]]], dtype=torch.float64)
        >>> round(float(entropy_map_t(p, 1, normalize=True, multilabel=False)), 4)
        1.0
        >>> entropy_map_t(torch.tensor([0.1, 0.5]), 1, normalize=False, multilabel=True).round(decimals=4)
        tensor([0.3251, 0.6931])
    """
    return _binary_entropy_t(p, normalize) if multilabel else _entropy_t(p, dim, normalize)


def max_prob_uncertainty_t(mean: torch.Tensor, multilabel: bool) -> torch.Tensor:
    """``1 - max_c p_c`` (one channel), or per channel ``1 - max(p_c, 1 - p_c)`` for ``multilabel``.

    The unchecked tensor kernel behind :func:`one_minus_max_prob` (also used by :mod:`monai_unc.stats`).

    Args:
        mean: (mean) probabilities ``(B, C, *spatial)``, a tensor.
        multilabel: channels are independent Bernoulli variables.

    Returns:
        ``(B, 1, *spatial)``, or ``(B, C, *spatial)`` for ``multilabel``.

    Example:
        >>> import torch
        >>> max_prob_uncertainty_t(torch.tensor([[[0.7], [0.3]]]), multilabel=False)
        tensor([[[0.3000]]])
    """
    if multilabel:
        return 1 - torch.maximum(mean, 1 - mean)
    return 1 - mean.amax(dim=1, keepdim=True)


def _check(p: torch.Tensor, name: str, multilabel: bool, channel_dim: int = 1, min_ndim: int = 3) -> None:
    if multilabel:
        check_unit_interval(p, name, channel_dim=channel_dim, min_ndim=min_ndim)
    else:
        check_probabilities(p, name, channel_dim=channel_dim, min_ndim=min_ndim)


def binary_entropy(probs: ArrayLike, normalize: bool = False, validate: bool = True) -> ArrayLike:
    """Per-channel binary (Bernoulli) entropy of multi-label probabilities, ``(B, C, *spatial) -> (B, C, *spatial)``.

    ``H_b(p) = -p log p - (1 - p) log(1 - p)`` in nats, ``0 log 0 = 0``; each channel is an independent region
    (sigmoid outputs, e.g. BraTS WT/TC/ET); ``normalize=True`` divides by ``log 2`` (the maximum, at p = 0.5).
    Applied to the mean of samples this is the per-region predictive entropy.

    Args:
        probs: per-channel foreground probabilities ``(B, C, *spatial)`` in [0, 1] (no sum constraint), ``C >= 1``.
        normalize: divide by ``log 2``.
        validate: check that ``probs`` are finite and in [0, 1]; raises ``ValueError``.

    Returns:
        ``(B, C, *spatial)`` entropies in ``[0, log 2]`` nats (``[0, 1]`` with ``normalize``), in the library and
        dtype of ``probs``.

    Example:
        >>> import numpy as np
        >>> p = np.array([[[0.5, 0.9]], [[0.99, 0.2]]])  # (B=2, C=1, 2 voxels)
        >>> binary_entropy(p).round(4).tolist()
        [[[0.6931, 0.3251]], [[0.056, 0.5004]]]
        >>> binary_entropy(p, normalize=True).round(4).tolist()
        [[[1.0, 0.469]], [[0.0808, 0.7219]]]
    """
    p = to_tensor(probs, "probs")
    if validate:
        check_unit_interval(p, "probs")
    return like_input(_binary_entropy_t(p, normalize), probs)


def entropy(probs: ArrayLike, normalize: bool = False, validate: bool = True) -> ArrayLike:
    """Shannon entropy of class probabilities, ``(B, C, *spatial) -> (B, 1, *spatial)``.

    ``H(p) = -sum_c p_c log p_c`` in nats (natural log), ``0 log 0 = 0``; with ``normalize=True`` the
    result is divided by ``log C`` and lies in [0, 1]. Applied to the mean of samples this is the
    predictive entropy (ValUES eq. 1).

    Args:
        probs: probabilities ``(B, C, *spatial)``, ``C >= 2`` classes on dim 1, summing to 1.
        normalize: divide by ``log(C)``.
        validate: check that ``probs`` are finite probabilities (one extra pass); raises ``ValueError``.

    Returns:
        ``(B, 1, *spatial)`` entropies in ``[0, log C]`` nats (``[0, 1]`` with ``normalize``), in the library and
        dtype of ``probs``.

    Example:
        >>> import numpy as np
        >>> p = np.array([[[0.5, 0.9], [0.5, 0.1]]])  # (B=1, C=2, 2 voxels)
        >>> entropy(p).round(4).tolist()
        [[[0.6931, 0.3251]]]
        >>> entropy(p, normalize=True).round(4).tolist()
        [[[1.0, 0.469]]]
    """
    p = to_tensor(probs, "probs")
    if validate:
        check_probabilities(p, "probs")
    return like_input(_entropy_t(p, 1, normalize), probs)


def _samples(samples: ArrayLike, validate: bool, multilabel: bool = False) -> torch.Tensor:
    s = to_tensor(samples, "samples")
    if s.ndim < 4:
        raise ValueError(
            f"samples must have shape (S, B, C, *spatial) with at least one spatial axis, got {tuple(s.shape)}"
        )
    if s.shape[0] < 1:
        raise ValueError("samples must hold at least one sample along dim 0")
    if validate:
        _check(s, "samples", multilabel, channel_dim=2, min_ndim=4)
    return s


def predictive_entropy(
    samples: ArrayLike, normalize: bool = False, validate: bool = True, multilabel: bool = False
) -> ArrayLike:
    """Predictive entropy ``H(mean_s p_s)`` of samples ``(S, B, C, *spatial) -> (B, 1, *spatial)``.

    Total uncertainty (PU in ValUES; "predictive entropy" in RETINA, Band et al.). ``multilabel=True``:
    per-channel binary entropy ``H_b(mean_s p_s)``, ``(B, C, *spatial)`` (module docstring).

    Args:
        samples: probabilities of ``S`` samples ``(S, B, C, *spatial)`` (classes on dim 2 summing to 1, or
            per-channel probabilities in [0, 1] with ``multilabel``).
        normalize: divide by ``log C`` (``log 2`` with ``multilabel``).
        validate: check that ``samples`` are finite probabilities; raises ``ValueError``.
        multilabel: channels are independent Bernoulli variables (module docstring).

    Returns:
        ``(B, 1, *spatial)`` (``(B, C, *spatial)`` with ``multilabel``), in the library and dtype of ``samples``.

    Example:
        >>> import numpy as np
        >>> samples = np.array([[[[0.9], [0.1]]], [[[0.1], [0.9]]]])  # (S=2, B=1, C=2, 1 voxel)
        >>> predictive_entropy(samples).round(4).tolist()  # two confident samples that disagree
        [[[0.6931]]]
    """
    s = _samples(samples, validate, multilabel)
    return like_input(entropy_map_t(s.mean(0), 1, normalize, multilabel), samples)


def expected_entropy(
    samples: ArrayLike, normalize: bool = False, validate: bool = True, multilabel: bool = False
) -> ArrayLike:
    """Expected entropy ``mean_s H(p_s)`` of samples ``(S, B, C, *spatial) -> (B, 1, *spatial)``.

    The aleatoric part of the decomposition (AU in ValUES). ``multilabel=True``: ``mean_s H_b(p_s)`` per channel,
    ``(B, C, *spatial)``.

    Args:
        samples: probabilities of ``S`` samples ``(S, B, C, *spatial)`` (classes on dim 2 summing to 1, or
            per-channel probabilities in [0, 1] with ``multilabel``).
        normalize: divide by ``log C`` (``log 2`` with ``multilabel``).
        validate: check that ``samples`` are finite probabilities; raises ``ValueError``.
        multilabel: channels are independent Bernoulli variables (module docstring).

    Returns:
        ``(B, 1, *spatial)`` (``(B, C, *spatial)`` with ``multilabel``), in the library and dtype of ``samples``.

    Example:
        >>> import numpy as np
        >>> samples = np.array([[[[0.9], [0.1]]], [[[0.1], [0.9]]]])  # (S=2, B=1, C=2, 1 voxel)
        >>> expected_entropy(samples).round(4).tolist()  # each sample alone is fairly sure
        [[[0.3251]]]
    """
    s = _samples(samples, validate, multilabel)
    return like_input(entropy_map_t(s, 2, normalize, multilabel).mean(0), samples)


def _check_same_shape(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")


#: how far EE may exceed PE (nats) before the pair is refused: float32 rounding of sums over many samples
_ENTROPY_ORDER_TOL = 1e-4


def mutual_information_from_entropies(
    pe: torch.Tensor,
    ee: torch.Tensor,
    window_disagreement: torch.Tensor | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """``MI = PE - EE`` clamped at 0 (Jensen: MI >= 0; the clamp only removes rounding below zero).

    With ``window_disagreement`` (WD, stitched sliding windows, see :mod:`monai_unc.inferers.sampling`):
    ``MI = PE - EE - WD``, clamped at 0, so that ``PE = EE + MI + WD``.

    ``validate`` (default): ``pe`` and ``ee`` (and WD) must be tensors of one shape without NaN/inf, and ``ee`` may
    not exceed ``pe`` by more than rounding (1e-4 nats): entropies of the same samples satisfy EE <= PE, so a larger
    EE means the two maps do not belong together. ``ValueError`` naming the argument otherwise.

    Args:
        pe: predictive entropy map, e.g. ``(B, 1, *spatial)``, a tensor.
        ee: expected entropy map of the same samples, the shape of ``pe``.
        window_disagreement: optional WD map of the shape of ``pe``.
        validate: check shapes, finiteness and ``ee <= pe`` (see above).

    Returns:
        The MI map, the shape and dtype of ``pe``.

    Example:
        >>> import torch
        >>> pe = torch.tensor([[[0.6931, 0.3]]])
        >>> ee = torch.tensor([[[0.3251, 0.3]]])
        >>> mutual_information_from_entropies(pe, ee)
        tensor([[[0.3680, 0.0000]]])
    """
    if validate:
        pe, ee = to_tensor(pe, "pe"), to_tensor(ee, "ee")
        _check_same_shape(pe, ee, "pe", "ee")
        check_finite(pe, "pe")
        check_finite(ee, "ee")
        if window_disagreement is not None:
            window_disagreement = to_tensor(window_disagreement, "window_disagreement")
            _check_same_shape(pe, window_disagreement, "pe", "window_disagreement")
            check_finite(window_disagreement, "window_disagreement")
        if pe.numel() and float((ee - pe).max()) > _ENTROPY_ORDER_TOL:
            raise ValueError(
                f"ee exceeds pe by up to {float((ee - pe).max()):.4g} nats: the expected entropy of samples is at "
                "most the entropy of their mean, so pe and ee must come from the same samples"
            )
    if window_disagreement is None:
        return (pe - ee).clamp_min(0)
    return ((pe - ee) - window_disagreement).clamp_min(0)


def mutual_information(
    samples: ArrayLike, normalize: bool = False, validate: bool = True, multilabel: bool = False
) -> ArrayLike:
    """Mutual information ``H(mean_s p_s) - mean_s H(p_s)``, ``(S, B, C, *spatial) -> (B, 1, *spatial)``.

    Epistemic uncertainty (EU in ValUES) for dropout, ensembles and test-time augmentation (for TTA it is
    MI(Y, T), ValUES Appendix E); aleatoric for latent-variable models (ValUES Appendix D). ``multilabel=True``:
    per channel with binary entropies, ``(B, C, *spatial)``. Clamped at 0 (rounding only).

    Args:
        samples: probabilities of ``S`` samples ``(S, B, C, *spatial)`` (classes on dim 2 summing to 1, or
            per-channel probabilities in [0, 1] with ``multilabel``).
        normalize: divide the entropies by ``log C`` (``log 2`` with ``multilabel``).
        validate: check that ``samples`` are finite probabilities; raises ``ValueError``.
        multilabel: channels are independent Bernoulli variables (module docstring).

    Returns:
        ``(B, 1, *spatial)`` (``(B, C, *spatial)`` with ``multilabel``) non-negative maps, in the library and dtype
        of ``samples``.

    Example:
        >>> import numpy as np
        >>> samples = np.array([[[[0.9], [0.1]]], [[[0.1], [0.9]]]])  # (S=2, B=1, C=2, 1 voxel)
        >>> mutual_information(samples).round(4).tolist()  # PE - EE = 0.6931 - 0.3251
        [[[0.3681]]]
    """
    s = _samples(samples, validate, multilabel)
    pe = entropy_map_t(s.mean(0), 1, normalize, multilabel)
    ee = entropy_map_t(s, 2, normalize, multilabel).mean(0)
    return like_input(mutual_information_from_entropies(pe, ee, validate=False), samples)


def one_minus_max_prob(probs: ArrayLike, validate: bool = True, multilabel: bool = False) -> ArrayLike:
    """Max-probability uncertainty ``1 - max_c p_c``, ``(B, C, *spatial) -> (B, 1, *spatial)``.

    The ``one_minus_max_prob`` map of the inferers (:class:`~monai_unc.keys.UncertaintyKeys`); formerly
    ``max_softmax``. For samples, pass their mean. Lies in ``[0, 1 - 1/C]``; larger = less confident.
    ``multilabel=True``: per channel ``1 - max(p_c, 1 - p_c)`` (the max-probability uncertainty of each region's
    Bernoulli variable), in ``[0, 0.5]``, ``(B, C, *spatial)``.

    Args:
        probs: probabilities ``(B, C, *spatial)`` (classes on dim 1 summing to 1, or per-channel probabilities in
            [0, 1] with ``multilabel``).
        validate: check that ``probs`` are finite probabilities; raises ``ValueError``.
        multilabel: channels are independent Bernoulli variables (module docstring).

    Returns:
        ``(B, 1, *spatial)`` (``(B, C, *spatial)`` with ``multilabel``), in the library and dtype of ``probs``.

    Example:
        >>> import numpy as np
        >>> p = np.array([[[0.5, 0.9], [0.5, 0.1]]])  # (B=1, C=2, 2 voxels)
        >>> one_minus_max_prob(p).round(4).tolist()
        [[[0.5, 0.1]]]
        >>> one_minus_max_prob(np.array([[[0.3, 0.95]]]), multilabel=True).round(4).tolist()
        [[[0.3, 0.05]]]
    """
    p = to_tensor(probs, "probs")
    if validate:
        _check(p, "probs", multilabel)
    return like_input(max_prob_uncertainty_t(p, multilabel), probs)


def max_softmax(probs: ArrayLike, validate: bool = True, multilabel: bool = False) -> ArrayLike:
    """Deprecated alias of :func:`one_minus_max_prob` (the map's former name), removed in the next release.

    Args:
        probs: as in :func:`one_minus_max_prob`.
        validate: as in :func:`one_minus_max_prob`.
        multilabel: as in :func:`one_minus_max_prob`.

    Returns:
        ``one_minus_max_prob(probs, validate, multilabel)``, after a ``DeprecationWarning``.
    """
    warnings.warn(
        f"max_softmax is deprecated and will be removed in {REMOVAL}; use one_minus_max_prob (the same map, "
        "1 - max_c p_c)",
        DeprecationWarning,
        stacklevel=2,
    )
    return one_minus_max_prob(probs, validate, multilabel)


def variance_from_moments(
    mean: torch.Tensor, mean_sq: torch.Tensor, multilabel: bool = False, validate: bool = True
) -> torch.Tensor:
    """Mean over classes of ``E[p^2] - E[p]^2`` (population variance), clamped at 0, ``-> (B, 1, *spatial)``.

    The streamed form of :func:`variance`: ``mean`` and ``mean_sq`` are the running means of ``p_s`` and
    ``p_s^2`` over the samples. Per channel ``(B, C, *spatial)`` for ``multilabel``.

    Args:
        mean: ``mean_s p_s``, ``(B, C, *spatial)``, a tensor.
        mean_sq: ``mean_s p_s^2``, the shape of ``mean``.
        multilabel: keep one variance per channel instead of the mean over classes.
        validate: ``mean`` and ``mean_sq`` must be tensors of one shape ``(B, C, *spatial)`` without NaN/inf
            (``ValueError`` naming the argument otherwise).

    Returns:
        ``(B, 1, *spatial)`` (``(B, C, *spatial)`` with ``multilabel``), the dtype of ``mean``.

    Example:
        >>> import torch
        >>> mean = torch.tensor([[[0.5], [0.5]]])  # samples (0.9, 0.1) and (0.1, 0.9)
        >>> mean_sq = torch.tensor([[[0.41], [0.41]]])
        >>> variance_from_moments(mean, mean_sq).round(decimals=4)
        tensor([[[0.1600]]])
    """
    if validate:
        mean, mean_sq = to_tensor(mean, "mean"), to_tensor(mean_sq, "mean_sq")
        _check_same_shape(mean, mean_sq, "mean", "mean_sq")
        if mean.ndim < 2:
            raise ValueError(f"mean must be (B, C, *spatial), got shape {tuple(mean.shape)}")
        check_finite(mean, "mean")
        check_finite(mean_sq, "mean_sq")
    var = (mean_sq - mean * mean).clamp_min(0)
    return var if multilabel else var.mean(dim=1, keepdim=True)


def variance_from_square_sums(mean: torch.Tensor, mean_sq_sum: torch.Tensor) -> torch.Tensor:
    """Mean over classes of the population variance from one summed second moment, ``-> (B, 1, *spatial)``.

    ``mean_c (E[p_c^2] - E[p_c]^2) = (E[sum_c p_c^2] - sum_c E[p_c]^2) / C``: the value of
    :func:`variance_from_moments` (up to rounding) from one channel ``E[sum_c p_c^2]`` instead of ``C`` channels of
    ``E[p_c^2]``, so that the streamed variance costs one channel per voxel whatever the number of classes. Clamped
    at 0 (rounding only: the exact value is ``>= 0``). Unchecked tensor kernel.

    Args:
        mean: ``mean_s p_s``, ``(B, C, *spatial)``.
        mean_sq_sum: ``mean_s sum_c p_{s,c}^2``, ``(B, 1, *spatial)``.

    Returns:
        ``(B, 1, *spatial)``, the dtype of ``mean``.

    Example:
        >>> import torch
        >>> mean = torch.tensor([[[0.5], [0.5]]])  # samples (0.9, 0.1) and (0.1, 0.9)
        >>> variance_from_square_sums(mean, torch.tensor([[[0.82]]])).round(decimals=4)
        tensor([[[0.1600]]])
    """
    sq = (mean * mean).sum(dim=1, keepdim=True)
    return ((mean_sq_sum.to(mean.dtype) - sq) / mean.shape[1]).clamp_min(0)


def variance(samples: ArrayLike, validate: bool = True, multilabel: bool = False) -> ArrayLike:
    """Sample variance map ``mean_c Var_s(p_{s,c})``, ``(S, B, C, *spatial) -> (B, 1, *spatial)``.

    Population variance (divided by S, not S - 1), averaged over classes (``variance`` key of the inferers).
    ``multilabel=True``: per channel, ``(B, C, *spatial)`` (for ``C = 1`` equal to the two-class value, since
    ``Var(1 - p) = Var(p)``).

    Args:
        samples: probabilities of ``S`` samples ``(S, B, C, *spatial)`` (classes on dim 2 summing to 1, or
            per-channel probabilities in [0, 1] with ``multilabel``).
        validate: check that ``samples`` are finite probabilities; raises ``ValueError``.
        multilabel: one variance per channel instead of the mean over classes.

    Returns:
        ``(B, 1, *spatial)`` (``(B, C, *spatial)`` with ``multilabel``), in the library and dtype of ``samples``.

    Example:
        >>> import numpy as np
        >>> samples = np.array([[[[0.9], [0.1]]], [[[0.1], [0.9]]]])  # (S=2, B=1, C=2, 1 voxel)
        >>> variance(samples).round(4).tolist()  # Var of (0.9, 0.1) for each class
        [[[0.16]]]
    """
    s = _samples(samples, validate, multilabel)
    var = s.var(dim=0, correction=0)
    return like_input(var if multilabel else var.mean(dim=1, keepdim=True), samples)
