"""Voxel-wise uncertainty measures from class probabilities.

Shapes (docs/design.md): probabilities ``(B, C, *spatial)`` with ``C >= 2``; samples
``(S, B, C, *spatial)``; every map is returned as ``(B, 1, *spatial)`` where larger means less confident.
Entropies use the natural log (nats); ``normalize=True`` divides by ``log(C)`` so that maps lie in [0, 1].

The decomposition (ValUES, Sec. 3 / eq. 1; RETINA, Band et al.) is

    PE(x)  = H( mean_s p_s(x) )                  predictive entropy, total uncertainty
    EE(x)  = mean_s H( p_s(x) )                  expected entropy, aleatoric part
    MI(x)  = PE(x) - EE(x) >= 0                  mutual information, epistemic part

with ``H(p) = -sum_c p_c log p_c`` and ``0 log 0 = 0``. MI is non-negative by Jensen's inequality; the
difference of two floating-point entropies can fall a few ulps below zero, so it is clamped at 0. Means over the
samples (of the probabilities for PE, of the entropies for EE) are summed in float64, so identical float32 (or
half-precision) samples give PE equal to EE bit for bit and MI = 0 exactly, as the streamed
:class:`~monai_unc.stats.SampleStats` do; the float64 mean of identical float64 samples rounds (``(x + x + x) / 3``),
so theirs may leave an MI of a few float64 roundings (below 1e-14 nats), in the stream as here.

Multi-label (region-based) models, ``multilabel=True``: each of the ``C >= 1`` channels is an independent
Bernoulli variable with foreground probability ``p_c`` (a sigmoid per channel, e.g. the BraTS regions WT/TC/ET;
the channels need not sum to 1). Every measure is then evaluated per channel and maps are ``(B, C, *spatial)``,
one per region: the binary entropy ``H_b(p) = -p log p - (1 - p) log(1 - p)`` replaces ``H`` in PE, EE and MI,
the max-probability uncertainty is ``1 - max(p_c, 1 - p_c)`` (in ``[0, 0.5]``), the variance is the per-channel
population variance, and ``normalize=True`` divides the entropies by ``log 2``. For ``C = 1`` this equals the
two-class categorical result on ``(1 - p, p)``.

Inputs may be numpy arrays or torch tensors (CPU or CUDA); outputs follow the input's library and dtype. Entropies
of float16 / bfloat16 probabilities are evaluated in float32 (:func:`entropy_dtype`, the rule of
:class:`~monai_unc.stats.SampleStats` too) and returned in the input's dtype.

``max_softmax`` is the deprecated former name of :func:`one_minus_max_prob` (the map is ``1 - max_c p_c``, not the
largest probability, and the probabilities need not come from a softmax).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch

from ._deprecation import REMOVAL
from ._utils import (
    ArrayLike,
    check_bool,
    check_finite,
    check_probabilities,
    check_unit_interval,
    like_input,
    to_tensor,
)

__all__ = [
    "binary_entropy",
    "entropy",
    "entropy_dtype",
    "predictive_entropy",
    "expected_entropy",
    "mutual_information",
    "mutual_information_from_entropies",
    "one_minus_max_prob",
    "max_softmax",
    "variance",
    "variance_from_moments",
    "square_sum",
    "variance_from_square_sums",
]


def entropy_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision entropies of probabilities of ``dtype`` are evaluated in: theirs, float32 for anything else.

    Float32 and float64 probabilities keep their dtype; float16 and bfloat16 (and any other dtype) are evaluated in
    float32: a half-precision ``p log p`` and its sum carry about 1e-3 (float16) to 1e-2 (bfloat16) relative
    rounding, which shows as mutual information of that size between identical samples. The one precision rule of
    every entropy of the package (:mod:`monai_unc.stats` evaluates each sample's entropy and the predictive entropy
    in it; the measures below evaluate theirs in it and return the input's dtype).

    Args:
        dtype: the probabilities' dtype.

    Returns:
        ``dtype`` for float32 / float64, else ``torch.float32``.

    Example:
        >>> entropy_dtype(torch.float16), entropy_dtype(torch.float64)
        (torch.float32, torch.float64)
    """
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _entropy_t(p: torch.Tensor, dim: int, normalize: bool) -> torch.Tensor:
    """H(p) = -sum_c p_c log p_c along ``dim`` (kept), 0 log 0 = 0; the single entropy formula.

    Evaluated as ``-sum_c clamp(p_c, 0, 1) log clamp(p_c, tiny, 1)``: probabilities the checks accept a little
    outside [0, 1] (their tolerance, e.g. -1e-4 from resampling or blending) contribute what 0 or 1 contributes, not
    ``-p log tiny`` (-1e-4 gave -0.07 nats in float64, -0.009 in float32). Inside [0, 1] the values are those of
    ``-sum_c p_c log max(p_c, tiny)``. Found by hostile testing.
    """
    # p * log(max(p, tiny)) is xlogy (0 log 0 = 0) at about half the cost of torch.special.xlogy on CPU
    t = p.clamp(torch.finfo(p.dtype).tiny, 1)
    if torch.is_grad_enabled() and p.requires_grad:
        h = -(p.clamp(0, 1) * torch.log(t)).sum(dim=dim, keepdim=True)
    else:  # the same values, computed in the one temporary (no autograd graph to keep it for): p log t is the term
        # clamp(p, 0, 1) log t inside [0, 1]; above 1 both are 0 (log 1); below 0, p log tiny > 0 where the term is 0,
        # and clamp_max(0) sets exactly those (every term of a p in [0, 1] is <= 0); NaN stays NaN
        h = t.log_().mul_(p).clamp_max_(0).sum(dim=dim, keepdim=True).neg_()
    # H <= log C: rounding put a uniform float32 prediction an ulp above (normalised 1.0000002, refused by the [0, 1]
    # checks of voxel_accuracy; found by invariant testing), so the result is capped at the bound
    log_c = math.log(p.shape[dim])
    return (h / log_c).clamp_max(1.0) if normalize else h.clamp_max(log_c)


def _binary_entropy_t(p: torch.Tensor, normalize: bool) -> torch.Tensor:
    """H_b(p) = -p log p - (1 - p) log(1 - p) elementwise (per channel), 0 log 0 = 0: the one binary-entropy formula.

    A region's Bernoulli entropy in nats; divided by log 2 with ``normalize``. ``p`` is clamped into [0, 1] first
    (both factors of both terms): a value the checks accept a little above 1 (or below 0) gives the entropy of 1
    (or 0), not ``-(1 - p) log tiny`` (1.0001 gave -0.07 nats in float64). Found by hostile testing.

    ``H_b <= log 2``: rounding put float64 probabilities next to 0.5 (0.4999999999999997) an ulp above it,
    0.6931471805599454 nats (normalised 1.0000000000000002, outside the documented [0, 1]; the streamed statistics
    cap at log 2), so the result is capped at the bound, as :func:`_entropy_t` caps at ``log C``. Found by hostile
    testing.
    """
    tiny = torch.finfo(p.dtype).tiny
    p = p.clamp(0, 1)
    q = 1 - p
    h = -(p * torch.log(p.clamp_min(tiny)) + q * torch.log(q.clamp_min(tiny)))
    log_2 = math.log(2)
    return (h / log_2).clamp_max(1.0) if normalize else h.clamp_max(log_2)


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

    The unchecked tensor kernel behind :func:`one_minus_max_prob` (also used by :mod:`monai_unc.stats`). The result
    is kept in its bounds, ``[0, 1 - 1/C]`` (``[0, 0.5]`` per channel): probabilities the checks accept a little
    outside [0, 1] or off a sum of 1 (their tolerance, e.g. 1.0004 from resampling or blending) gave a negative
    uncertainty, -0.0004, which ``evaluate`` then refused as a map with negative values. Found by hostile testing.

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
        p = mean.clamp(0, 1)  # NaN stays NaN
        return 1 - torch.maximum(p, 1 - p)
    return (1 - mean.amax(dim=1, keepdim=True)).clamp(0, 1 - 1 / mean.shape[1])


def _check_flags(**flags: object) -> None:
    """``TypeError`` naming the flag unless each is ``True`` or ``False`` (:func:`~monai_unc._utils.check_bool`).

    Found by hostile testing: ``multilabel="False"`` (a truthy string, e.g. read from a config file) gave per-channel
    binary entropies of softmax probabilities, ``normalize="no"`` entropies divided by ``log C``, without a word.
    """
    for name, value in flags.items():
        check_bool(value, name)


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
    _check_flags(normalize=normalize, validate=validate)
    p = to_tensor(probs, "probs")
    if validate:
        check_unit_interval(p, "probs")
    return like_input(_in_entropy_dtype(lambda q: _binary_entropy_t(q, normalize), p), probs)


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
    _check_flags(normalize=normalize, validate=validate)
    p = to_tensor(probs, "probs")
    if validate:
        check_probabilities(p, "probs")
    return like_input(_in_entropy_dtype(lambda q: _entropy_t(q, 1, normalize), p), probs)


def _samples(samples: ArrayLike, validate: bool, multilabel: bool = False, **flags: object) -> torch.Tensor:
    """``samples`` as a checked ``(S, B, C, *spatial)`` tensor.

    ``validate``, ``multilabel`` and ``flags`` (e.g. ``normalize``) must be ``True`` or ``False``.
    """
    _check_flags(validate=validate, multilabel=multilabel, **flags)
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


def _sample_mean(q: torch.Tensor) -> torch.Tensor:
    """The mean over the samples (dim 0) of ``q``, summed in float64 sample by sample, returned in ``q``'s dtype.

    The one mean over samples of the sample measures (the mean probabilities of PE, the mean entropy of EE). Summed in
    float32, the mean of identical samples was not their value (``(x + x + x) / 3`` rounds), so PE and EE of one
    deterministic network's identical float32 samples differed by a rounding and MI was 1e-7 to 3e-7 nats of speckle
    where :class:`~monai_unc.stats.SampleStats` (float64 sums) gives 0 exactly; found by hostile testing. A float64
    sum of fewer than ``2**29`` copies of a float32 value is exact, so the mean of identical samples is their value.
    The memory is one float64 sample (no float64 copy of all samples).
    """
    acc = q[0].to(torch.promote_types(q.dtype, torch.float64), copy=True)
    for x in q[1:]:
        acc.add_(x)
    return acc.div_(q.shape[0]).to(q.dtype)


def _in_entropy_dtype(f: Callable[[torch.Tensor], torch.Tensor], p: torch.Tensor) -> torch.Tensor:
    """``f(p)`` evaluated in :func:`entropy_dtype` of ``p`` (float32 for half precision), returned in ``p``'s dtype.

    Half-precision samples evaluated in their own precision gave near-identical samples an MI of 1e-3 (float16) to
    8e-3 (bfloat16) nats of rounding, where :class:`~monai_unc.stats.SampleStats` gives ~1e-7. Found by hostile
    testing.
    """
    out = f(p.to(entropy_dtype(p.dtype)))
    return out.to(p.dtype) if p.is_floating_point() else out


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
    s = _samples(samples, validate, multilabel, normalize=normalize)
    return like_input(_in_entropy_dtype(lambda q: entropy_map_t(_sample_mean(q), 1, normalize, multilabel), s), samples)


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
    s = _samples(samples, validate, multilabel, normalize=normalize)
    # the mean of entropies at most log C can round above it (15 uniform float32 classes: +2.4e-7): capped, as H is
    bound = 1.0 if normalize else math.log(2 if multilabel else s.shape[2])
    return like_input(
        _in_entropy_dtype(lambda q: _sample_mean(entropy_map_t(q, 2, normalize, multilabel)).clamp_max(bound), s),
        samples,
    )


def _tensor(x: ArrayLike, name: str) -> torch.Tensor:
    """``x`` itself if it is a tensor (a MetaTensor keeps its metadata), else :func:`~monai_unc._utils.to_tensor`."""
    return x if isinstance(x, torch.Tensor) else to_tensor(x, name)


def _in_dtype_of(x: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``x`` in the dtype of ``ref`` where that is a floating-point dtype (the documented dtype of the result).

    In earlier versions a float32 ``pe`` with a float64 ``ee`` gave a float64 MI (and float16 moments with
    float64 ``mean_sq`` a float64 variance), where the docstrings promise the dtype of ``pe`` (of ``mean``).
    """
    return x.to(ref.dtype) if ref.is_floating_point() and x.dtype != ref.dtype else x


def _check_same_shape(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")


#: how far EE may exceed PE (nats) before the pair is refused: float32 rounding of sums over many samples; maps in a
#: coarser dtype add ``_ENTROPY_ORDER_ULPS`` of their rounding (:func:`_entropy_order_tolerance`)
_ENTROPY_ORDER_TOL = 1e-4
#: roundings (units of the maps' ``eps`` times ``1 + PE``) by which EE may exceed PE in :func:`_entropy_order_tolerance`
_ENTROPY_ORDER_ULPS = 4.0


def _entropy_order_tolerance(pe: torch.Tensor, ee: torch.Tensor) -> torch.Tensor:
    """How far ``EE`` may exceed ``PE`` per voxel before :func:`mutual_information_from_entropies` refuses the pair.

    ``1e-4`` nats (float32 rounding of sums over many samples) plus ``_ENTROPY_ORDER_ULPS`` roundings of the maps'
    dtype, ``4 eps (1 + |PE|)``: PE and EE of the same samples rounded to float16 (``eps`` 9.8e-4; maps that
    :class:`~monai_unc.stats.SampleStats` returns for float16 samples) can land on neighbouring values with EE above
    PE, which a fixed 1e-4 refused. Negligible for float32 / float64 maps. Found by hostile testing.

    Args:
        pe: the predictive entropy map.
        ee: the expected entropy map; ``eps`` is that of the coarser of the two dtypes (float32 for a non-float map).

    Returns:
        The tolerance per voxel, ``pe``'s shape, in float64.
    """
    eps = max(torch.finfo(t.dtype if t.is_floating_point() else torch.float32).eps for t in (pe, ee))
    return _ENTROPY_ORDER_TOL + _ENTROPY_ORDER_ULPS * eps * (1 + pe.detach().double().abs())


def mutual_information_from_entropies(
    pe: torch.Tensor,
    ee: torch.Tensor,
    window_disagreement: torch.Tensor | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """``MI = PE - EE`` clamped at 0 (Jensen: MI >= 0; the clamp only removes rounding below zero).

    With ``window_disagreement`` (WD, stitched sliding windows, see :mod:`monai_unc.inferers.sampling`):
    ``MI = PE - EE - WD``, clamped at 0, so that ``PE = EE + MI + WD``.

    ``validate`` (default): ``pe`` and ``ee`` (and WD) must be tensors of one shape without NaN/inf, ``ee`` may not
    be negative (an entropy; found by hostile testing: a negative EE gave an MI above PE) and may not exceed ``pe``
    by more than rounding (1e-4 nats plus ``4 eps (1 + |pe|)``, a few roundings of the maps' dtype): entropies of
    the same samples satisfy EE <= PE, so a larger EE means the two maps do not belong together. WD may not be
    negative (it would raise MI above ``PE - EE``), and ``EE + WD`` may not exceed ``PE`` by more than that rounding
    (MI would be clamped from a negative value). ``ValueError`` naming the argument otherwise.

    Args:
        pe: predictive entropy map, e.g. ``(B, 1, *spatial)``, a tensor or a numpy array.
        ee: expected entropy map of the same samples, the shape of ``pe``.
        window_disagreement: optional WD map of the shape of ``pe``, non-negative.
        validate: check shapes, finiteness, signs and ``ee <= pe`` (see above).

    Returns:
        The MI map, the shape, dtype and library (numpy or torch) of ``pe``.

    Example:
        >>> import torch
        >>> pe = torch.tensor([[[0.6931, 0.3]]])
        >>> ee = torch.tensor([[[0.3251, 0.3]]])
        >>> mutual_information_from_entropies(pe, ee)
        tensor([[[0.3680, 0.0000]]])
    """
    _check_flags(validate=validate)
    ref = pe  # the result follows its library (found by hostile testing: numpy maps gave a torch tensor, or with
    # validate=False an AttributeError)
    if not validate:
        pe, ee = _tensor(pe, "pe"), _tensor(ee, "ee")
        if window_disagreement is not None:
            window_disagreement = _tensor(window_disagreement, "window_disagreement")
    if validate:
        pe, ee = to_tensor(pe, "pe"), to_tensor(ee, "ee")
        _check_same_shape(pe, ee, "pe", "ee")
        check_finite(pe, "pe")
        check_finite(ee, "ee")
        if window_disagreement is not None:
            window_disagreement = to_tensor(window_disagreement, "window_disagreement")
            _check_same_shape(pe, window_disagreement, "pe", "window_disagreement")
            check_finite(window_disagreement, "window_disagreement")
            # found by hostile testing: a negative WD gave an MI above PE - EE (pe 0.5, ee 0.2, WD -1: MI 1.3 nats)
            if window_disagreement.numel() and bool((window_disagreement < 0).any()):
                raise ValueError(
                    "window_disagreement must be non-negative (an entropy difference, nats), got minimum "
                    f"{float(window_disagreement.min()):.4g}"
                )
        if ee.numel() and bool((ee < 0).any()):
            raise ValueError(f"ee must be non-negative (an entropy), got minimum {float(ee.min()):.4g}")
        if pe.numel() and bool(((ee.double() - pe.double()) > _entropy_order_tolerance(pe, ee)).any()):
            raise ValueError(
                f"ee exceeds pe by up to {float((ee - pe).max()):.4g} nats: the expected entropy of samples is at "
                "most the entropy of their mean, so pe and ee must come from the same samples"
            )
        if window_disagreement is not None and pe.numel():
            # found in review 56: EE + WD above PE (pe 0.5, ee 0.2, WD 0.6) gave MI 0 without a word, while the
            # decomposition PE = EE + MI + WD with MI >= 0 bounds EE + WD by PE
            excess = (ee.double() + window_disagreement.double()) - pe.double()
            if bool((excess > _entropy_order_tolerance(pe, ee)).any()):
                raise ValueError(
                    f"ee + window_disagreement exceeds pe by up to {float(excess.max()):.4g} nats: PE = EE + MI + WD "
                    "with MI >= 0, so the three maps must come from the same samples and windows"
                )
    mi = (pe - ee) if window_disagreement is None else (pe - ee) - window_disagreement
    return like_input(_in_dtype_of(mi.clamp_min(0), pe), ref)


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
    s = _samples(samples, validate, multilabel, normalize=normalize)

    def mi(q: torch.Tensor) -> torch.Tensor:
        pe = entropy_map_t(_sample_mean(q), 1, normalize, multilabel)
        ee = _sample_mean(entropy_map_t(q, 2, normalize, multilabel))
        return mutual_information_from_entropies(pe, ee, validate=False)

    return like_input(_in_entropy_dtype(mi, s), samples)


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
    _check_flags(validate=validate, multilabel=multilabel)
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
    mean: torch.Tensor, mean_sq: torch.Tensor, multilabel: bool = False, validate: bool = True, tol: float = 0.0
) -> torch.Tensor:
    """Mean over classes of ``E[p^2] - E[p]^2`` (population variance), clamped at 0, ``-> (B, 1, *spatial)``.

    The streamed form of :func:`variance`: ``mean`` and ``mean_sq`` are the running means of ``p_s`` and
    ``p_s^2`` over the samples. Per channel ``(B, C, *spatial)`` for ``multilabel``.

    Args:
        mean: ``mean_s p_s``, ``(B, C, *spatial)``, a tensor or a numpy array.
        mean_sq: ``mean_s p_s^2``, the shape of ``mean``.
        multilabel: keep one variance per channel instead of the mean over classes.
        validate: ``mean`` and ``mean_sq`` must be tensors of one shape ``(B, C, *spatial)`` without NaN/inf, and
            ``mean^2 <= mean_sq <= mean`` up to rounding (1e-4 plus ``4 eps (1 + mean)``): Jensen's inequality and
            ``p^2 <= p`` for probabilities, so a variance or a second moment of other samples passed as ``mean_sq``
            is refused instead of clamped to a zero or impossible variance (found by hostile testing).
            ``ValueError`` naming the argument otherwise.
        tol: the tolerance of the samples' probability checks: values up to ``1 + tol`` (or down to ``-tol``) put
            ``p^2`` up to ``tol (1 + tol)`` above ``p``, which the upper bound then allows.

    Returns:
        ``(B, 1, *spatial)`` (``(B, C, *spatial)`` with ``multilabel``), the dtype and library (numpy or torch) of
        ``mean``.

    Example:
        >>> import torch
        >>> mean = torch.tensor([[[0.5], [0.5]]])  # samples (0.9, 0.1) and (0.1, 0.9)
        >>> mean_sq = torch.tensor([[[0.41], [0.41]]])
        >>> variance_from_moments(mean, mean_sq).round(decimals=4)
        tensor([[[0.1600]]])
    """
    _check_flags(multilabel=multilabel, validate=validate)
    ref = mean  # the result follows its library (numpy moments gave a torch tensor)
    if not validate:
        mean, mean_sq = _tensor(mean, "mean"), _tensor(mean_sq, "mean_sq")
    if validate:
        mean, mean_sq = to_tensor(mean, "mean"), to_tensor(mean_sq, "mean_sq")
        _check_same_shape(mean, mean_sq, "mean", "mean_sq")
        if mean.ndim < 2:
            raise ValueError(f"mean must be (B, C, *spatial), got shape {tuple(mean.shape)}")
        check_finite(mean, "mean")
        check_finite(mean_sq, "mean_sq")
        _check_second_moment(mean, mean_sq, tol)
    var = (mean_sq - mean * mean).clamp_min(0)
    return like_input(_in_dtype_of(var if multilabel else var.mean(dim=1, keepdim=True), mean), ref)


def _check_second_moment(mean: torch.Tensor, mean_sq: torch.Tensor, p_tol: float = 0.0) -> None:
    """``ValueError`` unless ``mean^2 <= mean_sq <= mean + p_tol (1 + p_tol)`` per element, up to rounding.

    The moments of probabilities ``p_s`` in ``[-p_tol, 1 + p_tol]`` (the checks' tolerance); the rounding is that of
    :func:`_entropy_order_tolerance`.
    """
    if not mean.numel():
        return
    m, sq = mean.detach().double(), mean_sq.detach().double()
    tol = _entropy_order_tolerance(mean, mean_sq)
    for dev, where in ((m * m - sq, "below mean^2"), (sq - m - p_tol * (1.0 + p_tol), "above mean")):
        if bool((dev > tol).any()):
            raise ValueError(
                "mean_sq must lie between mean^2 and mean (the second moment of probabilities: E[p^2] >= E[p]^2 and "
                f"p^2 <= p), got values up to {float(dev.max()):.4g} {where}: pass the mean of p_s^2 of the same "
                "samples as mean, not a variance"
            )


def square_sum(mean: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``sum_c mean_c^2`` over the class dimension, ``(B, C, *spatial) -> (B, 1, *spatial)``.

    Summed class after class (``((m_0^2 + m_1^2) + m_2^2) + ...``, each square rounded to ``dtype``), with one class
    of temporaries instead of ``C``. Every place that adds or removes ``sum_c pred_c^2`` from a one-channel second
    moment calls this one function, so the same means give the same bits there and in
    :func:`variance_from_square_sums`: a deterministic network's variance stays 0 under overlapping windows, where
    the stitched second moment is rebuilt from the stitched means. Unchecked tensor kernel.

    Args:
        mean: mean probabilities ``(B, C, *spatial)``, ``C >= 1``.
        dtype: the precision of the squares and their sum (default ``mean.dtype``).

    Returns:
        ``(B, 1, *spatial)`` in ``dtype``.

    Example:
        >>> import torch
        >>> square_sum(torch.tensor([[[0.5], [0.25], [0.25]]]))
        tensor([[[0.3750]]])
    """
    dtype = dtype or mean.dtype
    first = mean[:, :1].to(dtype)
    acc = first * first
    for c in range(1, int(mean.shape[1])):
        mc = mean[:, c:c + 1].to(dtype)
        acc.add_(mc * mc)
    return acc


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
    return ((mean_sq_sum.to(mean.dtype) - square_sum(mean)) / mean.shape[1]).clamp_min(0)


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
