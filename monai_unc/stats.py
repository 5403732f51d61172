"""Streaming, mergeable sufficient statistics of N probability samples.

Memory does not grow with the number of samples: per voxel we keep the running (weighted) sums

    sum_w            total weight (a scalar)
    sum_p[c]         sum_s w_s p_s[c]            -> mean probabilities (C channels)
    sum_h            sum_s w_s H(p_s)            -> expected entropy (1 channel)
    sum_p2[c]        sum_s w_s p_s[c]^2          -> variance (C channels, only if ``track_variance``)
    sum_p2           sum_s w_s sum_c p_s[c]^2    -> variance (1 channel, ``track_variance`` and
                                                    ``class_variance=False``)

and derive every measure at the end: PE = H(mean p), EE = sum_h / sum_w, MI = PE - EE, max-softmax =
1 - max_c mean p, variance = mean_c (E[p^2] - E[p]^2). Merging two SampleStats adds the sums; the result equals
the statistics of the pooled samples.

Multi-label (region-based, sigmoid) models, ``multilabel=True``: every channel is an independent Bernoulli
variable; ``sum_h`` then has C channels (the per-channel binary entropies ``H_b(p_s[c])``) and every measure is
per channel (:mod:`monai_unc.measures`), so memory stays flat in the number of samples as for softmax models.

Precision choice: the sums are kept in float64 by default (``accum_dtype``); each sample's entropy is
evaluated in the precision of its probabilities, float32 at least (:func:`~monai_unc.measures.entropy_dtype`), before
it is added, and PE = H(mean p) is evaluated in that same precision by that same evaluation (the fused kernel's where
one applies), so identical samples give PE equal to EE bit for bit and MI = 0 exactly (float32 or half-precision
samples, float64 sums, unit weights). MI and variance are
differences of nearly equal quantities (PE - EE; E[p^2] - E[p]^2): in float32 the cancellation leaves
relative noise of ~1e-7 * S in regions where MI or the variance is tiny, which shows as speckle in maps
and breaks exact identities (MI ~ 0 for identical ensemble members). Float64 sums cost 2x the memory of
float32 sums for the statistics only (never for the samples); pass ``accum_dtype=torch.float32`` on
memory-bound GPUs; half-precision sums warn (:func:`check_accum_dtype`). Measures are returned in the dtype of the
probabilities that were fed in.

The update is fused where a kernel applies (:mod:`monai_unc._stats_kernels`: numba on the CPU, Triton on CUDA; the
torch ops are the reference path and the fallback): one pass over each sample (over ``k`` samples at once with
:meth:`SampleStats.update_many`) updates every sum. It adds the samples in the reference's order, so each sum is the
reference's within the bounds below (with unit weights the same bits on the CPU). The CPU kernel takes the entropy
from the reference's torch formula; the CUDA kernel evaluates the same formula in the same precision (float32, float64
for float64 samples) with its own logarithm, within a few float32 roundings of it. With ``validate`` the checks read
the sample once and raise the reference checks' errors.

``accum_dtype=None`` chooses per input (:func:`auto_accum_dtype`): float64 up to ``FLOAT64_MAX_CLASSES`` classes
(where the sums are a small part of the memory), float32 above (many-class models, where C float64 channels per voxel
dominate it), except for float64 samples, always summed in float64 (the sums then cost what the samples do, and
float32 sums would round each of them).
Float32 error bound (recursive summation of ``N`` non-negative terms, unit roundoff ``u = 2^-24``,
``gamma_k = k u / (1 - k u)``): every mean (``pred``, the mean entropy, the per-class second moments) is within
``gamma_{N+1}`` *relative* of the float64 mean of the same float32 samples (:func:`accumulation_error_bound`;
6.0e-6 for ``N = 100``), the one-channel second moment within ``gamma_{N+C+1}``. The maps follow:
``|dPE| <= gamma_{N+1} (PE + 1) + gamma_{C+2} PE``,
``|dEE| <= gamma_{N+1} EE``, ``|dMI| <= |dPE| + |dEE|``, ``|d(1 - max p)| <= gamma_{N+1}`` and, for the variance,
``|dVar| <= (3 gamma_{N+1} + 2 gamma_{C+1}) / C`` absolute (plus the rounding of the output dtype);
``tests/test_stats.py`` checks these for N up to 100.

The same bounds hold for float64 sums with ``u = 2^-53``, against the exact values of the samples (float32 samples
and their squares are exact in float64). The variance's error is *absolute*: ``E[p^2] - E[p]^2`` cancels, so a
variance below ``(3 gamma_{N+1} + 2 gamma_{C+1}) / C`` (1.7e-13 for N = 1000, C = 2 in float64; near-identical
samples, a near-deterministic network) can be off by 100 % or more of itself (the value stays within the bound and
never below 0). Where such variances matter, keep the samples and use the two-pass
:func:`~monai_unc.measures.variance` (relative error ~1e-7); ``tests/test_stats_hostile.py`` checks the bound on
N = 1000 near-identical samples.

``class_variance=False`` keeps one channel ``sum_c p_c^2`` instead of ``C`` channels ``p_c^2`` for the variance map
(the mean over classes of the per-class variances, :func:`~monai_unc.measures.variance_from_square_sums`); the map is
the same up to rounding. Multi-label statistics always keep one second moment per channel (their variance is per
channel).

:func:`derive_measures` evaluates the maps in chunks along the first spatial axis (``chunk_elements``), so no
temporary of the full ``C x V`` size is made; every voxel is computed independently, so the chunked maps equal the
unchunked ones.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from ._jit import KernelUnavailable
from ._stats_kernels import accumulate as fused_accumulate
from ._stats_kernels import accumulate_outputs as fused_accumulate_outputs
from ._stats_kernels import backend as fused_backend
from ._stats_kernels import takes_outputs as fused_takes_outputs
from ._stats_kernels import value_flags as fused_value_flags
from ._utils import (
    PROB_TOL,
    check_bool,
    check_finite,
    check_probabilities,
    check_tensor,
    check_unit_interval,
    is_int,
    is_real,
    probability_tolerance,
    to_tensor,
)
from .keys import UncertaintyKeys
from .measures import (
    entropy_dtype,
    entropy_map_t,
    max_prob_uncertainty_t,
    mutual_information_from_entropies,
    square_sum,
    variance_from_moments,
    variance_from_square_sums,
)
from .state import ArrayBlocks, register_state_type

__all__ = [
    "SampleStats",
    "ALL_MEASURES",
    "FLOAT64_MAX_CLASSES",
    "MEAN_SQ_SUM",
    "DEFAULT_CHUNK_ELEMENTS",
    "CUDA_CHUNK_ELEMENTS",
    "default_chunk_elements",
    "auto_accum_dtype",
    "check_accum_dtype",
    "accumulation_error_bound",
    "spatial_chunks",
    "derive_measures",
    "check_moments",
    "window_disagreement_from_stitched",
    "add_squares",
    "WD_RTOL",
    "WINDOW_DISAGREEMENT_MODES",
]

K = UncertaintyKeys

#: every measure SampleStats can derive (``variance`` needs ``track_variance=True``)
ALL_MEASURES = (
    K.PRED,
    K.PREDICTIVE_ENTROPY,
    K.EXPECTED_ENTROPY,
    K.MUTUAL_INFORMATION,
    K.ONE_MINUS_MAX_PROB,
    K.VARIANCE,
)
#: ``accum_dtype=None`` keeps float64 sums up to this many classes (channels), float32 above
FLOAT64_MAX_CLASSES = 16
#: moment key of the one-channel second moment ``mean_s sum_c p_{s,c}^2`` (``class_variance=False``)
MEAN_SQ_SUM = "mean_sq_sum"
#: elements (classes x voxels) of one chunk of :func:`derive_measures`: 8 MiB per float64 temporary
DEFAULT_CHUNK_ELEMENTS = 2**20
#: the chunks of :func:`derive_measures` on a CUDA device (``chunk_elements="auto"``): 128 MiB per float64 temporary,
#: so that a volume of a few million elements takes one chunk (each chunk costs a few kernel launches)
CUDA_CHUNK_ELEMENTS = 2**24


def default_chunk_elements(t: torch.Tensor) -> int:
    """The chunk size ``chunk_elements="auto"`` chooses for maps of ``t``'s device.

    Args:
        t: a tensor of the maps (its device decides).

    Returns:
        :data:`CUDA_CHUNK_ELEMENTS` on a CUDA device, :data:`DEFAULT_CHUNK_ELEMENTS` elsewhere.

    Example:
        >>> default_chunk_elements(torch.zeros(1)) == DEFAULT_CHUNK_ELEMENTS
        True
    """
    return CUDA_CHUNK_ELEMENTS if t.device.type == "cuda" else DEFAULT_CHUNK_ELEMENTS


def auto_accum_dtype(num_classes: int, dtype: torch.dtype | None = None) -> torch.dtype:
    """The accumulation dtype that ``accum_dtype=None`` chooses for ``num_classes`` channels of ``dtype`` samples.

    Float64 samples (a float64 network) are always summed in float64: float32 sums would round every sample, and a
    deterministic float64 network of more than :data:`FLOAT64_MAX_CLASSES` classes had MI ~2.4e-7 instead of 0 (in
    earlier versions); the sums then take as many bytes per channel as the samples themselves.

    Args:
        num_classes: channels of the probabilities (classes, or regions of a multi-label model).
        dtype: the dtype of the samples (None: float32 or narrower).

    Returns:
        ``torch.float64`` up to :data:`FLOAT64_MAX_CLASSES` channels or for float64 samples, ``torch.float32`` above.

    Raises:
        ValueError: ``num_classes`` is not an integer >= 1.
        TypeError: ``dtype`` is neither None nor a floating-point ``torch.dtype``.

    Example:
        >>> auto_accum_dtype(3), auto_accum_dtype(105), auto_accum_dtype(105, torch.float64)
        (torch.float64, torch.float32, torch.float64)
    """
    # numpy integers are integers (found by hostile testing: np.int64(3), e.g. from a shape, was refused as "not an
    # integer"; here, in accumulation_error_bound, spatial_chunks and update_many)
    if not is_int(num_classes) or num_classes < 1:
        raise ValueError(f"num_classes must be an integer >= 1, got {num_classes!r}")
    _check_dtype(dtype, "dtype")
    if dtype is not None and torch.finfo(dtype).bits >= 64:
        return torch.float64
    return torch.float64 if num_classes <= FLOAT64_MAX_CLASSES else torch.float32


def check_accum_dtype(accum_dtype: Any, warn: bool = True) -> torch.dtype | None:
    """Check an ``accum_dtype`` argument: None or a floating point ``torch.dtype``.

    Half precision (float16, bfloat16) is accepted with a warning: its sums keep about 3 significant digits, and
    errors of the order of 1e-3 nats in the entropy maps have been measured (200 classes, 32 samples); float32 or
    ``None`` (the default choice, :func:`auto_accum_dtype`) keep them at float rounding.

    Args:
        accum_dtype: the argument.
        warn: warn for half precision.

    Returns:
        ``accum_dtype``; ``TypeError`` naming ``accum_dtype`` for anything else (``torch.int8``, ``"float32"``).

    Example:
        >>> check_accum_dtype(torch.float32), check_accum_dtype(None)
        (torch.float32, None)
    """
    if accum_dtype is not None and (not isinstance(accum_dtype, torch.dtype) or not accum_dtype.is_floating_point):
        raise TypeError(f"accum_dtype must be a floating point torch.dtype or None, got {accum_dtype!r}")
    if warn and accum_dtype in (torch.float16, torch.bfloat16):
        warnings.warn(f"accum_dtype={accum_dtype} keeps the running sums with about 3 significant digits: errors of "
                      "the order of 1e-3 nats in the entropy maps were measured (200 classes, 32 samples); use "
                      "torch.float32 or None", UserWarning, stacklevel=3)
    return accum_dtype


def accumulation_error_bound(num_samples: int, dtype: torch.dtype = torch.float32) -> float:
    """Relative error bound of a streamed mean of ``num_samples`` non-negative values summed in ``dtype``.

    ``gamma_{N+1} = (N + 1) u / (1 - (N + 1) u)`` with ``u`` the unit roundoff of ``dtype`` (``eps / 2``): ``N - 1``
    additions, the multiplication by a sample's weight and the final division each round once (recursive summation,
    Higham, Accuracy and Stability of Numerical Algorithms, sec. 4.2). The inputs themselves are exact in ``dtype``
    (float32 probabilities), so this bounds ``|mean_dtype - mean_exact| / mean_exact``.

    The streamed variance ``E[p^2] - E[p]^2`` is a difference of two such means: its error is *absolute*, at most
    ``(3 gamma_{N+1} + 2 gamma_{C+1}) / C`` for the mean over ``C`` classes (``gamma_{N+1}`` this function's value,
    ``gamma_{C+1}`` this function of ``C`` in the same dtype), plus the rounding of the output dtype. A variance
    below it (near-identical samples) has no reliable digit: 1.7e-13 for ``N = 1000``, ``C = 2`` in float64, where a
    variance of 3e-15 was measured off by 61 %.

    Args:
        num_samples: number of samples ``N >= 1``.
        dtype: the accumulation dtype.

    Returns:
        The bound (6.0e-6 for ``N = 100`` in float32).

    Example:
        >>> f"{accumulation_error_bound(100):.2e}"
        '6.02e-06'
    """
    if not is_int(num_samples) or num_samples < 1:
        raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
    num_samples = int(num_samples)
    u = torch.finfo(dtype).eps / 2
    k = (num_samples + 1) * u
    if k >= 1:
        raise ValueError(f"num_samples={num_samples} is too large for a bound in {dtype}")
    return k / (1 - k)


def spatial_chunks(shape: tuple[int, ...], chunk_elements: int | None = DEFAULT_CHUNK_ELEMENTS) -> list[slice]:
    """Slices of the first spatial axis (dim 2) of a ``(B, C, *spatial)`` tensor with about ``chunk_elements`` each.

    Args:
        shape: the tensor's shape, ``(B, C, *spatial)`` with at least one spatial axis.
        chunk_elements: elements per chunk (at least one row of the first spatial axis); ``None``: one chunk.

    Returns:
        Slices covering ``range(shape[2])`` in order.

    Example:
        >>> spatial_chunks((1, 4, 8, 8), chunk_elements=64)
        [slice(0, 2, None), slice(2, 4, None), slice(4, 6, None), slice(6, 8, None)]
    """
    if len(shape) < 3:
        raise ValueError(f"shape must be (B, C, *spatial), got {tuple(shape)}")
    n = shape[2]
    if chunk_elements is None:
        return [slice(0, n)]
    if not is_int(chunk_elements) or chunk_elements < 1:
        raise ValueError(f"chunk_elements must be a positive integer or None, got {chunk_elements!r}")
    chunk_elements = int(chunk_elements)
    row = 1
    for d in (shape[0], shape[1], *shape[3:]):
        row *= d
    step = max(1, chunk_elements // max(row, 1))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def _memory_span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes ``[start, stop)`` of ``t``'s storage that its elements lie in (``(0, 0)`` when it has none)."""
    if t.numel() == 0:
        return 0, 0
    size = t.element_size()
    start = t.untyped_storage().data_ptr() + t.storage_offset() * size
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return start, start + (last + 1) * size


def _writable_in_place(t: torch.Tensor, others: Sequence[torch.Tensor]) -> bool:
    """Whether scaling ``t`` in place changes ``t`` alone.

    No element of it shares memory with another (a stride-0 broadcast view) and its bytes overlap none of
    ``others``' (the same tensor given twice, views of one buffer).
    """
    if any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride())):
        return False
    lo, hi = _memory_span(t)
    return not any(o_lo < hi and lo < o_hi for o_lo, o_hi in map(_memory_span, others))


def _check_finite_in_chunks(tensors: Mapping[str, torch.Tensor]) -> None:
    """:func:`~monai_unc._utils.check_finite` of ``(B, C, *spatial)`` tensors with one reduction each, one device sync.

    The sum of a tensor (in its own dtype: a sum in another dtype would convert it first) is finite exactly when
    every value is finite and the sum does not overflow (NaN and infinities propagate through a sum): one reduction
    without a temporary of the tensor's size, read once; the sums of all tensors are tested together. Only when one
    is not finite are the spatial chunks checked one by one, for the message naming the tensor's key (finite values
    whose sum overflows pass).
    """
    xs = {name: x.detach() for name, x in tensors.items() if x.is_floating_point()}
    if not xs or bool(torch.isfinite(torch.stack([x.sum().to(torch.float64) for x in xs.values()])).all()):
        return
    for name, x in xs.items():
        for sl in spatial_chunks(tuple(x.shape)) if x.ndim >= 3 else [slice(None)]:
            check_finite(x[:, :, sl] if x.ndim >= 3 else x, name)


def _check_weight(weight: Any, name: str = "weight") -> float:
    """A sample's weight as a float: ``TypeError`` for a non-number, ``ValueError`` unless positive and finite.

    Python and numpy numbers (:func:`~monai_unc._utils.is_real`; found by hostile testing: a ``numpy.float32`` weight,
    e.g. an element of a float32 array of ensemble weights, was refused as "not a positive number").
    """
    if not is_real(weight):
        raise TypeError(f"{name} must be a positive number, got {type(weight).__name__}")
    if not (weight > 0 and weight < float("inf")):
        raise ValueError(f"{name} must be positive and finite, got {weight}")
    return float(weight)


def _check_weights(weights: Sequence[float] | None, num_samples: int) -> list[float]:
    """The weights of ``num_samples`` samples (None: 1 each), each checked by :func:`_check_weight`."""
    if weights is None:
        return [1.0] * num_samples
    if getattr(weights, "ndim", None) == 1 and hasattr(weights, "tolist"):  # a numpy array or a tensor of weights
        weights = weights.tolist()
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(f"weights must be a sequence of {num_samples} positive numbers, got {type(weights).__name__}")
    if len(weights) != num_samples:
        raise ValueError(f"weights must hold one weight per sample ({num_samples}), got {len(weights)}")
    return [_check_weight(w, "weights") for w in weights]


def _as_rows(p: torch.Tensor) -> torch.Tensor:
    """``(N, C, *spatial)`` as a contiguous ``(N, C, V)`` (a view where ``p`` is contiguous, else a copy)."""
    return p.detach().contiguous().view(p.shape[0], p.shape[1], -1)


def _entropy_precision(p: torch.Tensor) -> torch.Tensor:
    """Probabilities in the precision their entropy is evaluated in (:func:`~monai_unc.measures.entropy_dtype`)."""
    return p.to(entropy_dtype(p.dtype))


def _check_dtype(dtype: Any, name: str) -> None:
    """``TypeError`` naming ``name`` unless ``dtype`` is None or a floating-point ``torch.dtype``."""
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"{name} must be a floating-point torch.dtype or None, got {dtype!r}")


def _predictive_entropy(
    mean: torch.Tensor, multilabel: bool, samples_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``PE = H(mean)`` as the statistics evaluate it: in the samples' entropy precision, by the update's evaluation.

    ``mean`` (``(B, C, *spatial)``, the moments' dtype) is converted to
    :func:`~monai_unc.measures.entropy_dtype` of ``samples_dtype`` (the dtype of the samples, default ``mean``'s), the
    precision in which :meth:`SampleStats.update` evaluated each sample's entropy, and its entropy is evaluated by
    :func:`_update_entropy`: identical samples then give PE equal to EE bit for bit, so MI = 0 exactly (found by
    hostile testing: PE from the float64 mean in float64 against float32 sample entropies left MI ~1e-7). Returned in
    ``mean``'s dtype, float32 at least (as :func:`window_disagreement_from_stitched` and the statistics of
    half-precision means evaluate it).
    """
    dtype = entropy_dtype(samples_dtype if samples_dtype is not None else mean.dtype)
    out = torch.promote_types(mean.dtype, torch.float32) if mean.is_floating_point() else torch.float32
    if mean.ndim < 3 or (not multilabel and mean.shape[1] < 2):  # not a sample's layout: the formula itself
        return entropy_map_t(mean.to(dtype), 1, False, multilabel).to(out)
    return _update_entropy(mean.to(dtype).contiguous(), multilabel, out)


def _update_entropy(probs: torch.Tensor, multilabel: bool, accum_dtype: torch.dtype) -> torch.Tensor:
    """``H(probs)`` evaluated exactly as :meth:`SampleStats.update` evaluates a sample's entropy, in ``accum_dtype``.

    The one evaluation behind :meth:`SampleStats.sample_entropy`, the predictive entropy of :func:`derive_measures`
    and ``H(pred)`` of :func:`window_disagreement_from_stitched`: the fused kernel where one applies (Triton on CUDA
    takes its own logarithm), the reference formula elsewhere, in the precision of ``probs``
    (:func:`~monai_unc.measures.entropy_dtype`), so that an entropy of the mean of identical samples equals their
    summed entropies bit for bit. Half-precision sums: evaluated with float32 sums and rounded to ``accum_dtype``, the
    value the reference update adds (and no second warning: the statistics that hold such sums warned).
    """
    half = accum_dtype in (torch.float16, torch.bfloat16)
    one = SampleStats(track_variance=False, accum_dtype=torch.float32 if half else accum_dtype, validate=False,
                      multilabel=multilabel)
    h = one.update(probs).sum_h
    return h.to(accum_dtype) if half else h


@register_state_type("sample_stats")
class SampleStats:
    """Running weighted sums of probability samples ``(B, C, *spatial)``; see the module docstring.

    Args:
        track_variance: also keep the sum of squares (C more channels, one with ``class_variance=False``) to report
            ``variance``.
        accum_dtype: dtype of the running sums (float64 by default, see the module docstring); ``None`` chooses
            from the number of channels of the first sample (:func:`auto_accum_dtype`). Checked by
            :func:`check_accum_dtype`: ``TypeError`` for anything but a floating point dtype or None, a
            ``UserWarning`` for float16 / bfloat16 (such sums stop growing once a sample is below half an ulp of them).
        validate: check every update is a finite probability map summing to 1 over classes (in [0, 1] for
            ``multilabel``). Without it the samples must still be floating point (``TypeError``) and non-empty
            (``ValueError``).
        multilabel: channels are independent Bernoulli variables (sigmoid per region, ``C >= 1``); every measure
            is then per channel, ``(B, C, *spatial)``.
        class_variance: keep the second moment per class (``C`` channels, ``moments()["mean_sq"]``); ``False``
            keeps one channel ``sum_c p_c^2`` (``moments()["mean_sq_sum"]``) for the same variance map. Multi-label
            statistics keep one per channel either way.

    Typical use: ``stats.update(torch.softmax(net(x), 1))`` once per sample, then ``stats.measures()`` (a dict
    keyed by :class:`~monai_unc.keys.UncertaintyKeys`).

    Example:
        >>> stats = SampleStats(track_variance=True)
        >>> for p in (0.9, 0.7):  # two samples of one voxel, (B=1, C=2, 1)
        ...     _ = stats.update(torch.tensor([[[1 - p], [p]]]))
        >>> stats.count, [round(v, 4) for v in stats.mean[0, :, 0].tolist()]
        (2.0, [0.2, 0.8])
        >>> m = stats.measures(["predictive_entropy", "mutual_information"])
        >>> {k: round(float(v.flatten()[0]), 4) for k, v in m.items()}
        {'predictive_entropy': 0.5004, 'mutual_information': 0.0324}
    """

    def __init__(
        self,
        track_variance: bool = True,
        accum_dtype: torch.dtype | None = torch.float64,
        validate: bool = True,
        multilabel: bool = False,
        class_variance: bool = True,
    ) -> None:
        # half-precision sums warn here too (they were silent: 3000 alternating samples summed in bfloat16 gave a
        # mean of 0.085 for 0.5); found by hostile testing
        check_accum_dtype(accum_dtype)
        # True or False (found by hostile testing: multilabel="False", a truthy string, gave per-channel binary
        # entropies of softmax samples without a word)
        self.multilabel = check_bool(multilabel, "multilabel")
        self.track_variance = check_bool(track_variance, "track_variance")
        self.class_variance = check_bool(class_variance, "class_variance")
        self.accum_dtype = accum_dtype
        self.validate = check_bool(validate, "validate")
        self.sum_w: float = 0.0
        self.num_updates: int = 0
        self.sum_p: torch.Tensor | None = None
        self.sum_h: torch.Tensor | None = None
        self.sum_p2: torch.Tensor | None = None
        self.out_dtype: torch.dtype | None = None

    # ------------------------------------------------------------------ accumulation
    def update(self, probs: torch.Tensor, weight: float = 1.0) -> SampleStats:
        """Add one sample ``(B, C, *spatial)`` of probabilities with a positive scalar ``weight``.

        Where a fused kernel applies (:mod:`monai_unc._stats_kernels`: numba on the CPU, Triton on CUDA) every sum is
        updated in one pass over the sample, with the reference's values (module docstring); elsewhere the reference
        torch path runs.

        Args:
            probs: one sample of probabilities ``(B, C, *spatial)`` (numpy or torch), the same shape as earlier
                samples; softmax probabilities summing to 1 over ``C`` (per-channel values in [0, 1] for
                ``multilabel``).
            weight: the sample's weight, positive and finite (e.g. a sliding-window or ensemble weight).

        Returns:
            ``self``.

        Raises:
            TypeError: ``weight`` is not a number.
            ValueError: ``weight`` is not positive and finite, is below the smallest normal number of the
                accumulation dtype, the total weight would exceed what the sums hold
                (``max(accum_dtype) / max(1.1, log C)``), ``probs`` is not a probability map (with ``validate``) or its
                shape differs from the earlier samples'.
        """
        p = to_tensor(probs, "probs")
        w = _check_weight(weight)
        self._check_sample(p)
        self._check_total([w], int(p.shape[1]), p.dtype)
        self._add(p, [w], 1)
        return self

    def update_many(
        self, probs: torch.Tensor | Sequence[torch.Tensor], num_samples: int | None = None,
        weights: Sequence[float] | None = None,
    ) -> SampleStats:
        """Add ``k`` samples at once: the sums of ``k`` calls of :meth:`update` in order, the samples read in one pass.

        A batch ``(k * B, C, *spatial)`` (sample ``j`` in rows ``j * B`` to ``(j + 1) * B``, as a network returns
        ``k`` stacked passes) is added with the sums read and written once for the ``k`` samples where a fused
        kernel applies. Every sample is checked before any is added: one that fails raises the error :meth:`update`
        raises for it and leaves the statistics unchanged.

        Args:
            probs: a tensor ``(k * B, C, *spatial)`` with ``num_samples=k``, or a sequence of ``k`` samples
                ``(B, C, *spatial)`` (added one by one after all are checked).
            num_samples: ``k`` for a batch tensor (required then: a positive divisor of its first dimension); for a
                sequence, None or its length.
            weights: the ``k`` samples' weights (default 1 each), positive and finite numbers (a sequence, or a 1-D
                numpy array or tensor).

        Returns:
            ``self``.

        Raises:
            TypeError: ``num_samples`` or a weight is not a number.
            ValueError: ``num_samples`` does not divide the batch, the number of ``weights`` is not ``k``, or a
                sample fails the checks of :meth:`update`.

        Example:
            >>> p = torch.tensor([[[0.9], [0.1]], [[0.5], [0.5]]])  # two samples of one voxel, (2 * B, C=2, 1)
            >>> a = SampleStats().update_many(p, num_samples=2)
            >>> b = SampleStats().update(p[:1]).update(p[1:])
            >>> torch.equal(a.sum_p, b.sum_p), torch.equal(a.sum_h, b.sum_h), a.count
            (True, True, 2.0)
        """
        if isinstance(probs, (list, tuple)):
            if num_samples is not None and num_samples != len(probs):
                raise ValueError(f"num_samples={num_samples!r} differs from the {len(probs)} samples given")
            ws = _check_weights(weights, len(probs))
            samples = [to_tensor(q, "probs") for q in probs]
            for q in samples:
                self._check_sample(q, samples[0].shape)
            if samples:
                self._check_total(ws, int(samples[0].shape[1]), samples[0].dtype)
            for q, w in zip(samples, ws):
                self._add(q, [w], 1)
            return self
        p = to_tensor(probs, "probs")
        if not is_int(num_samples):
            raise TypeError(f"num_samples must be a positive integer for a batch tensor, got {num_samples!r}")
        num_samples = int(num_samples)
        if num_samples < 1 or p.ndim < 1 or p.shape[0] % num_samples:
            raise ValueError(
                f"num_samples must be a positive divisor of the batch dimension of probs {tuple(p.shape)}, "
                f"got {num_samples}"
            )
        ws = _check_weights(weights, num_samples)
        b = p.shape[0] // num_samples
        parts = [p[j * b:(j + 1) * b] for j in range(num_samples)]
        if self.validate and self._flags_apply(p) and not self._flags_fail(p):
            self._check_sample(parts[0], values=False)  # every value passes: the shape checks remain
        else:
            for q in parts:  # the first sample that fails raises the error update() raises
                self._check_sample(q)
        self._check_total(ws, int(p.shape[1]), p.dtype)
        self._add(p, ws, num_samples)
        return self

    def _check_sample(self, p: torch.Tensor, shape: torch.Size | None = None, values: bool = True) -> None:
        """The checks of :meth:`update` in its order; the values by one fused read-only pass where it applies.

        Where :meth:`_flags_apply` holds, every check of the layout passes, and the reference checks run only on a
        sample :func:`monai_unc._stats_kernels.value_flags` flags (they raise with their own message, or pass a
        borderline sum). ``shape``: the shape expected when no sample was added yet.
        """
        if self.validate:
            if values and (not self._flags_apply(p) or self._flags_fail(p)):
                (check_unit_interval if self.multilabel else check_probabilities)(p, "probs")
        else:  # the layout and dtype are checked even without the value checks (found by hostile testing: integer
            # samples gave integer maps, pred 0.5 truncated to 0; an empty volume a KeyError from derive_measures)
            if not p.is_floating_point():
                raise TypeError(f"probs must be a floating point array of probabilities, got dtype {p.dtype}")
            if p.ndim < 3 or p.shape[1] < (1 if self.multilabel else 2):
                c = "C>=1" if self.multilabel else "C>=2"
                raise ValueError(f"probs must have shape (B, {c}, *spatial), got {tuple(p.shape)}")
            if p.numel() == 0:
                raise ValueError(f"probs is empty (shape {tuple(p.shape)})")
        earlier = self.sum_p.shape if self.sum_p is not None else shape
        if earlier is not None and p.shape != earlier:
            raise ValueError(
                f"probs shape {tuple(p.shape)} does not match the shape of earlier samples {tuple(earlier)}"
            )

    def _check_total(self, weights: Sequence[float], n_channels: int, dtype: torch.dtype | None = None) -> None:
        """``ValueError`` for a subnormal weight or a total the sums cannot hold, checked before any sample is added.

        An entry of the sums grows to the total weight times at most ``max(1.1, log C)`` (``p`` and ``p^2`` up to
        ``(1 + tol)^2``, ``H <= log C``): a total beyond ``max(accum dtype) / max(1.1, log C)`` makes the sums
        infinite (in earlier versions two samples of weight 1e308 gave an infinite ``sum_w`` and every
        mean 0 without a word).
        """
        accum = self._accum_for(n_channels, dtype)
        tiny = torch.finfo(accum).tiny
        small = min(weights, default=tiny)
        if small < tiny:  # found by hostile testing, review 59: 5e-324 * 0.2 is 0, two such samples gave pred (0, 1)
            raise ValueError(f"a weight of {small:.4g} is below {tiny:.4g}, the smallest normal {accum} (subnormal: a "
                             "probability times it keeps few or no digits); scale the weights up (only their ratios "
                             "matter)")
        total = sum(weights, self.sum_w)  # inf where it overflows (refused below)
        limit = torch.finfo(accum).max / max(1.1, math.log(max(n_channels, 1)))
        if not total <= limit:
            raise ValueError(f"the total sample weight {total:.4g} exceeds {limit:.4g}, the most that {accum} sums of "
                             f"{n_channels} channels hold: scale the weights down (only their ratios matter)")

    def _accum_for(self, n_channels: int, dtype: torch.dtype | None = None) -> torch.dtype:
        """The dtype of the sums: ``accum_dtype``, or before it is set :func:`auto_accum_dtype` of the samples."""
        return self.accum_dtype if self.accum_dtype is not None else auto_accum_dtype(n_channels, dtype)

    def _fused_for(self, p: torch.Tensor) -> bool:
        """Whether the fused kernel adds samples like ``p`` (a non-empty float map ``(B, C, *spatial)``)."""
        if p.ndim < 3 or p.numel() == 0 or not p.is_floating_point():
            return False
        accum = self._accum_for(int(p.shape[1]), p.dtype)
        return fused_backend(p, accum) is not None

    def _flags_apply(self, p: torch.Tensor) -> bool:
        """Whether the fused read-only pass checks ``p``'s values: then every check of its layout passes."""
        return self._fused_for(p) and (self.multilabel or p.shape[1] >= 2)

    def _flags_fail(self, p: torch.Tensor) -> bool:
        """Whether the fused read-only pass finds a value the reference checks could reject (then they run)."""
        classes = not self.multilabel
        try:
            bad, lo, hi, dev = fused_value_flags(_as_rows(p), classes)
        except KernelUnavailable:  # no Triton kernel on this machine (warned once): the reference checks run
            return True
        tol = probability_tolerance(p.dtype) if classes else PROB_TOL
        # the deviation is summed in float64 in another order than the reference's (a few roundings): a margin
        return bool(bad) or lo < -tol or hi > 1 + tol or (classes and dev > tol - 1e-9)

    def _add(self, p: torch.Tensor, weights: list[float], num_samples: int) -> None:
        """Add ``num_samples`` checked samples ``(k * B, C, *spatial)`` with their weights."""
        if self.accum_dtype is None:
            self.accum_dtype = auto_accum_dtype(int(p.shape[1]), p.dtype)
        sums = (self.sum_p, self.sum_h, self.sum_p2)
        b = p.shape[0] // num_samples
        if self._fused_for(p) and self._fused_sums(p, b) and not any(
            t is not None and (t.device != p.device or t.dtype != self.accum_dtype) for t in sums
        ) and self._add_fused(p, weights, num_samples, b):
            return
        for j, w in enumerate(weights):
            self._add_reference(p if num_samples == 1 else p[j * b:(j + 1) * b], w)

    def _add_fused(self, p: torch.Tensor, weights: list[float], num_samples: int, b: int) -> bool:
        """:meth:`_add` with the fused kernel; False (the sums unchanged) where it cannot run on this machine."""
        self._note_samples_dtype(p.dtype)
        flat = self._fused_views(b, int(p.shape[1]), tuple(p.shape[2:]), p.device, self.accum_dtype)
        multilabel = self.multilabel

        def entropy(chunk: torch.Tensor) -> torch.Tensor:
            return entropy_map_t(_entropy_precision(chunk), 1, False, multilabel)

        try:
            fused_accumulate(_as_rows(p), weights, flat[0], flat[1], flat[2], self._per_class_squares(), multilabel,
                                entropy)
        except KernelUnavailable:  # no Triton kernel on this machine (warned once; the sums are unchanged)
            return False
        self._count(weights, num_samples)
        return True

    def _fused_views(self, b: int, n_cls: int, spatial: tuple[int, ...], device: torch.device,
                     dtype: torch.dtype) -> list[torch.Tensor | None]:
        """The sums as the ``(B, C or 1, V)`` views the fused kernels write in place.

        Zeros of ``dtype`` on ``device`` before the first sample, else the sums made contiguous (e.g. sums of
        :meth:`from_moments` over stitched buffers).
        """
        if self.sum_p is None:
            n_h = n_cls if self.multilabel else 1
            n_2 = n_cls if self._per_class_squares() else 1
            opts = {"dtype": dtype, "device": device}
            self.sum_p = torch.zeros((b, n_cls, *spatial), **opts)
            self.sum_h = torch.zeros((b, n_h, *spatial), **opts)
            self.sum_p2 = torch.zeros((b, n_2, *spatial), **opts) if self.track_variance else None
        elif not all(t is None or t.is_contiguous() for t in (self.sum_p, self.sum_h, self.sum_p2)):
            self.sum_p, self.sum_h = self.sum_p.contiguous(), self.sum_h.contiguous()
            self.sum_p2 = self.sum_p2.contiguous() if self.sum_p2 is not None else None
        return [t.view(t.shape[0], t.shape[1], -1) if t is not None else None
                for t in (self.sum_p, self.sum_h, self.sum_p2)]

    def _count(self, weights: list[float], num_samples: int) -> None:
        """Count ``num_samples`` added samples and their weights (one at a time, as the reference adds them)."""
        for w in weights:
            self.sum_w += w
        self.num_updates += num_samples

    def _takes_outputs(self, z: torch.Tensor, activation: str) -> bool:
        """Whether :meth:`_update_outputs` can add outputs like ``z`` under ``activation`` (their shape aside)."""
        if self.validate or (activation == "sigmoid") != self.multilabel or z.ndim < 3 or z.numel() == 0:
            return False
        n_cls = 2 if activation == "binary_sigmoid" else int(z.shape[1])
        if n_cls < (1 if self.multilabel else 2) or (activation == "binary_sigmoid" and z.shape[1] != 1):
            return False  # the caller's path raises the error for such outputs
        accum = self._accum_for(n_cls, z.dtype)
        return fused_takes_outputs(z, accum)

    def _update_outputs(self, z: torch.Tensor, activation: str, num_samples: int, nonfinite: torch.Tensor) -> bool:
        """Add ``num_samples`` unit-weight samples given as network outputs, their probabilities from the fused kernel.

        False, with nothing added, where that kernel does not take them.

        For the inferers (:mod:`monai_unc.inferers.sampling`), which apply ``activation`` to every output themselves
        where this returns False: one launch per call on a GPU (:func:`monai_unc._stats_kernels.accumulate_outputs`)
        in place of the activation, the outputs' range check and the update. Runs only without ``validate`` (the
        probabilities of finite outputs are valid by construction; a non-finite output sets ``nonfinite``).

        Args:
            z: ``(k * B, C_in, *spatial)`` outputs (sample ``j`` in rows ``j * B`` to ``(j + 1) * B``); ``C_in = 1``
                for ``"binary_sigmoid"`` (the two classes ``(sigmoid(-z), sigmoid(z))``).
            activation: ``"softmax"`` (``C_in >= 2``), ``"sigmoid"`` (multi-label statistics) or ``"binary_sigmoid"``.
            num_samples: ``k``, a divisor of ``z.shape[0]``.
            nonfinite: one int32 on ``z``'s device, set to 1 where an output is not finite.

        Returns:
            Whether the samples were added.
        """
        if not self._takes_outputs(z, activation) or z.shape[0] % num_samples:
            return False
        z = to_tensor(z, "z")  # a MONAI MetaTensor as a plain tensor, as update() takes its samples
        n_cls = 2 if activation == "binary_sigmoid" else int(z.shape[1])
        accum = self._accum_for(n_cls, z.dtype)
        b = z.shape[0] // num_samples
        if not self._fused_sums_for(tuple(z.shape[2:]), n_cls, b) or any(
            t is not None and (t.device != z.device or t.dtype != accum) for t in (self.sum_p, self.sum_h, self.sum_p2)
        ):
            return False
        fresh = self.sum_p is None
        flat = self._fused_views(b, n_cls, tuple(z.shape[2:]), z.device, accum)
        weights = [1.0] * num_samples
        try:
            fused_accumulate_outputs(_as_rows(z), weights, flat[0], flat[1], flat[2], self._per_class_squares(),
                                     activation, nonfinite)
        except KernelUnavailable:  # no Triton kernel on this machine (warned once): nothing was added
            if fresh:
                self.sum_p = self.sum_h = self.sum_p2 = None
            return False
        if fresh:
            self.accum_dtype = accum
        self._note_samples_dtype(entropy_dtype(z.dtype))
        self._count(weights, num_samples)
        return True

    def _fused_sums(self, p: torch.Tensor, b: int) -> bool:
        """Whether the sums (if any) have the shapes the fused kernel writes for samples ``(b, C, *spatial)``.

        Sums of :meth:`from_moments` are taken as given: a ``mean_entropy`` of ``C`` channels, or of a shape that
        broadcasts, or a second moment of the other layout are left to the reference path, which broadcasts or
        raises as it always has (the kernel would write outside them).
        """
        return self._fused_sums_for(tuple(p.shape[2:]), int(p.shape[1]), b)

    def _fused_sums_for(self, spatial: tuple[int, ...], n_cls: int, b: int) -> bool:
        """:meth:`_fused_sums` for samples of ``n_cls`` channels over ``spatial``."""
        if self.sum_p is None:
            return True
        n_h = n_cls if self.multilabel else 1
        n_2 = n_cls if self._per_class_squares() else 1
        if tuple(self.sum_p.shape) != (b, n_cls, *spatial) or tuple(self.sum_h.shape) != (b, n_h, *spatial):
            return False
        if self.track_variance:
            return self.sum_p2 is not None and tuple(self.sum_p2.shape) == (b, n_2, *spatial)
        return self.sum_p2 is None

    def _add_reference(self, p: torch.Tensor, w: float) -> None:
        """The reference torch update of one checked sample (torch ops; the fused kernels' reference)."""
        pa = p.to(self.accum_dtype)
        # the per-sample entropy is evaluated in the input's precision, at least float32 (relative error ~1e-7, the
        # precision of float32 probabilities; float16's 1e-3 left 6e-4 nats of MI between identical samples) and
        # summed in accum_dtype: the log is the costliest step
        h = entropy_map_t(_entropy_precision(p), 1, False, self.multilabel)
        self._note_samples_dtype(p.dtype)
        if self.sum_p is None:
            self.sum_p = pa * w if w != 1.0 else pa.clone()
            self.sum_h = h.to(self.accum_dtype) * w
            if self.track_variance:
                self.sum_p2 = self._square(pa) * w
        else:
            self.sum_p.add_(pa, alpha=w)
            self.sum_h.add_(h, alpha=w)
            if self.track_variance:
                if self._per_class_squares():
                    self.sum_p2.addcmul_(pa, pa, value=w)
                else:
                    self.sum_p2.add_(self._square(pa), alpha=w)
        self.sum_w += w
        self.num_updates += 1

    def _note_samples_dtype(self, dtype: torch.dtype) -> None:
        """Record the samples' dtype (``out_dtype``): the maps' dtype and the tolerance a saved state is checked with.

        A stream that mixes dtypes keeps the least precise one (the largest
        :func:`~monai_unc._utils.probability_tolerance`): its means hold that dtype's rounding. Found by hostile
        testing: float32 samples merged with (or followed by) bfloat16 ones kept float32, and
        :meth:`load_state_dict` refused the state they saved (a class sum off by 1.2e-3, above float32's 1e-3).
        """
        if self.out_dtype is None or probability_tolerance(dtype) > probability_tolerance(self.out_dtype):
            self.out_dtype = dtype

    def _per_class_squares(self) -> bool:
        """Whether ``sum_p2`` has one channel per class (else one channel ``sum_c p_c^2``)."""
        return self.class_variance or self.multilabel

    def _square(self, pa: torch.Tensor) -> torch.Tensor:
        """``p^2`` per class, or ``sum_c p_c^2`` (one channel) without ``class_variance``."""
        sq = pa * pa
        return sq if self._per_class_squares() else sq.sum(dim=1, keepdim=True)

    def _summarize_squares(self) -> None:
        """Turn per-class second moments into the one-channel sum (to merge with statistics that keep only that)."""
        if self.class_variance and not self.multilabel:
            if self.sum_p2 is not None:
                self.sum_p2 = self.sum_p2.sum(dim=1, keepdim=True)
            self.class_variance = False

    def merge(self, other: SampleStats) -> SampleStats:
        """Add the sums of ``other`` into ``self`` (pooled statistics).

        Variance is kept only when both track it; per-class second moments are summed to one channel when the other
        side keeps only ``sum_c p_c^2``.

        Args:
            other: statistics of other samples of the same volume (same shape and ``multilabel``).

        Returns:
            ``self``.

        Raises:
            TypeError: ``other`` is not a :class:`SampleStats`.
            ValueError: ``multilabel`` or the shapes differ.

        Example:
            >>> a = SampleStats().update(torch.tensor([[[0.1], [0.9]]]))
            >>> b = SampleStats().update(torch.tensor([[[0.5], [0.5]]]))
            >>> a.merge(b).count, [round(v, 4) for v in a.mean[0, :, 0].tolist()]
            (2.0, [0.3, 0.7])
        """
        if not isinstance(other, SampleStats):
            raise TypeError(f"other must be a SampleStats, got {type(other).__name__}")
        if other.multilabel != self.multilabel:
            raise ValueError(
                f"cannot merge multilabel={other.multilabel} statistics into multilabel={self.multilabel} statistics"
            )
        if other.sum_p is None:
            return self
        if self.accum_dtype is None:
            self.accum_dtype = other.accum_dtype or auto_accum_dtype(int(other.sum_p.shape[1]), other.sum_p.dtype)
        if self.sum_p is None:
            self.track_variance = self.track_variance and other.track_variance
            self.sum_w, self.num_updates, self.out_dtype = other.sum_w, other.num_updates, other.out_dtype
            self.sum_p = other.sum_p.to(self.accum_dtype).clone()
            self.sum_h = other.sum_h.to(self.accum_dtype).clone()
            self.sum_p2 = other.sum_p2.to(self.accum_dtype).clone() if self.track_variance else None
            summary_wanted = not self.class_variance
            self.class_variance = other.class_variance
            if summary_wanted:
                self._summarize_squares()
            return self
        if other.sum_p.shape != self.sum_p.shape:
            raise ValueError(
                f"cannot merge statistics of shape {tuple(other.sum_p.shape)} into {tuple(self.sum_p.shape)}"
            )
        self._check_total([other.sum_w], int(self.sum_p.shape[1]))
        if other.out_dtype is not None:
            self._note_samples_dtype(other.out_dtype)
        self.sum_p.add_(other.sum_p.to(self.sum_p))
        self.sum_h.add_(other.sum_h.to(self.sum_h))
        if self.track_variance:
            if other.sum_p2 is None:
                self.track_variance, self.sum_p2 = False, None
            else:
                other_p2 = other.sum_p2
                if self._per_class_squares() and not other._per_class_squares():
                    self._summarize_squares()
                elif other._per_class_squares() and not self._per_class_squares():
                    other_p2 = other_p2.sum(dim=1, keepdim=True)
                self.sum_p2.add_(other_p2.to(self.sum_p2))
        self.sum_w += other.sum_w
        self.num_updates += other.num_updates
        return self

    def _blend(self, other: SampleStats, fraction: float) -> SampleStats:
        """Move ``self``'s means a ``fraction`` of the way to ``other``'s: ``self + fraction (other - self)``.

        For statistics that hold means (``count`` 1: the inferers' stitched members, whose sums are their means), the
        pooled means of two groups of samples weighted ``1 - fraction`` and ``fraction``. Written as a step from
        ``self`` so that identical means stay bit for bit the same (the sums ``m + m + m`` divided by 3 rounded: an
        ensemble of identical deterministic members had MI 1.8e-7 under overlapping windows). ``other``'s buffers
        are used as the workspace (the caller hands them over). ``num_updates`` adds up; ``count`` stays.

        Args:
            other: statistics of other samples of the same volume holding means (same shape and ``multilabel``).
            fraction: the weight of ``other`` in (0, 1].

        Returns:
            ``self``.
        """
        pairs = [(self.sum_p, other.sum_p), (self.sum_h, other.sum_h)]
        if self.track_variance and other.sum_p2 is not None:
            other_p2 = other.sum_p2
            if self._per_class_squares() and not other._per_class_squares():
                self._summarize_squares()
            elif other._per_class_squares() and not self._per_class_squares():
                other_p2 = other_p2.sum(dim=1, keepdim=True)
            pairs.append((self.sum_p2, other_p2))
        else:
            self.track_variance, self.sum_p2 = False, None
        for mine, theirs in pairs:
            step = theirs.to(mine) if theirs.dtype != mine.dtype else theirs
            mine.add_(step.sub_(mine).mul_(fraction))
        self.num_updates += other.num_updates
        return self

    @classmethod
    def from_moments(
        cls,
        mean: torch.Tensor,
        mean_entropy: torch.Tensor,
        mean_sq: torch.Tensor | None = None,
        count: float = 1.0,
        num_updates: int | None = None,
        out_dtype: torch.dtype | None = None,
        multilabel: bool = False,
        mean_sq_sum: torch.Tensor | None = None,
        inplace: bool = False,
        validate: bool = True,
    ) -> SampleStats:
        """Rebuild statistics from per-voxel means (e.g. after sliding-window stitching).

        ``mean`` ``(B, C, *spatial)``, ``mean_entropy`` ``(B, 1, *spatial)`` (``(B, C, *spatial)`` for
        ``multilabel``), optional ``mean_sq`` like ``mean`` or ``mean_sq_sum`` ``(B, 1, *spatial)`` (the mean of
        ``sum_c p_c^2``, see ``class_variance``); ``count`` is the total weight the means stand for, so that merging
        stays exact. ``inplace=True`` multiplies the given tensors in place where their dtype is the accumulation
        dtype and no other moment shares their memory (the caller hands them over: no copy of ``C x V`` is made; the
        values are the same); a tensor given twice, overlapping views of one buffer or a broadcast view are copied.

        Args:
            mean: mean probabilities ``(B, C, *spatial)``.
            mean_entropy: mean per-sample entropy ``(B, 1, *spatial)`` (``(B, C, *spatial)`` for ``multilabel``),
                nats.
            mean_sq: mean of ``p_c^2`` per class, like ``mean`` (tracks variance), or None.
            count: the total weight the means stand for, positive.
            num_updates: the number of samples (default ``round(count)``).
            out_dtype: dtype of the derived maps (default ``mean.dtype``), the samples' dtype: ``validate`` takes the
                wider of its and ``mean``'s probability tolerance (float64 means of bfloat16 samples).
            multilabel: the channels are independent Bernoulli variables.
            mean_sq_sum: instead of ``mean_sq``, the mean of ``sum_c p_c^2`` ``(B, 1, *spatial)``.
            inplace: reuse the given tensors where possible (above).
            validate: check that the moments are those of probabilities (:func:`check_moments`): ``mean`` class
                probabilities (in [0, 1] for ``multilabel``), ``mean_entropy`` in ``[0, log C]`` nats (``[0, log 2]``
                per channel), ``mean^2 <= mean_sq <= mean`` (``sum_c mean_c^2 <= mean_sq_sum <= 1``), each up to
                rounding. The shapes, devices and finiteness are checked either way.

        Returns:
            The statistics; their sums are the means times ``count``.

        Raises:
            TypeError: ``count`` is not a number, ``num_updates`` not an integer, a moment not a floating point
                array.
            ValueError: ``count`` is not positive and finite or above what the sums hold (:meth:`update`),
                ``num_updates`` is negative, both ``mean_sq`` and ``mean_sq_sum`` are given (or ``mean_sq_sum``
                with ``multilabel``), a moment has another shape than
                the one above or another device than ``mean``, or holds NaN / inf, or (``validate``) values no
                probabilities give (each error names the argument).

        Example:
            >>> s = SampleStats.from_moments(torch.tensor([[[0.2], [0.8]]]), torch.tensor([[[0.5]]]), count=3.0)
            >>> s.count, s.num_updates
            (3.0, 3)
        """
        # every argument up front, named (found by hostile testing: count=inf raised OverflowError, count="2" a
        # comparison's TypeError, a NaN mean_entropy gave NaN maps silently, a moment of another shape a torch
        # RuntimeError in measures())
        if isinstance(count, bool) or not isinstance(count, numbers.Real):  # numpy scalars are numbers.Real
            raise TypeError(f"count must be a positive number, got {type(count).__name__}")
        count = _check_weight(float(count), "count")
        if num_updates is not None and (isinstance(num_updates, bool) or not isinstance(num_updates, numbers.Integral)):
            raise TypeError(f"num_updates must be an integer or None, got {type(num_updates).__name__}")
        if num_updates is not None and num_updates < 0:
            raise ValueError(f"num_updates must be >= 0, got {num_updates}")
        multilabel, inplace = check_bool(multilabel, "multilabel"), check_bool(inplace, "inplace")
        if mean_sq is not None and mean_sq_sum is not None:
            raise ValueError("give mean_sq or mean_sq_sum, not both")
        if mean_sq_sum is not None and multilabel:
            raise ValueError("mean_sq_sum is for categorical statistics; multi-label statistics keep mean_sq per "
                             "channel")
        given = {name: to_tensor(t, name) for name, t in (("mean", mean), ("mean_entropy", mean_entropy),
                                                          ("mean_sq", mean_sq), ("mean_sq_sum", mean_sq_sum))
                 if t is not None or name == "mean_entropy"}
        mean = given["mean"]
        if mean.ndim < 3 or mean.numel() == 0:
            raise ValueError(f"mean must be a non-empty (B, C, *spatial) tensor, got shape {tuple(mean.shape)}")
        b, c, spatial = mean.shape[0], mean.shape[1], tuple(mean.shape[2:])
        expected = {"mean": tuple(mean.shape), "mean_entropy": (b, c if multilabel else 1, *spatial),
                    "mean_sq": tuple(mean.shape), "mean_sq_sum": (b, 1, *spatial)}
        for name, t in given.items():
            if not t.is_floating_point():
                raise TypeError(f"{name} must be a floating point tensor, got dtype {t.dtype}")
            if tuple(t.shape) != expected[name]:
                raise ValueError(f"{name} must have shape {expected[name]} for mean of shape {tuple(mean.shape)}"
                                 f"{' (multilabel)' if multilabel and name == 'mean_entropy' else ''}, got "
                                 f"{tuple(t.shape)}")
            if t.device != mean.device:
                raise ValueError(f"{name} is on {t.device}, mean on {mean.device}")
        _check_finite_in_chunks(given)
        mean_entropy, mean_sq, mean_sq_sum = (given.get(k) for k in ("mean_entropy", "mean_sq", "mean_sq_sum"))
        if check_bool(validate, "validate"):
            # the tolerance of the samples' dtype too (``out_dtype``: float64 means of bfloat16 samples; review 59)
            tol = None if multilabel or out_dtype is None else max(probability_tolerance(mean.dtype),
                                                                   probability_tolerance(out_dtype))
            check_moments(mean, mean_entropy, mean_sq, mean_sq_sum, multilabel, tol=tol)
        stats = cls(
            track_variance=mean_sq is not None or mean_sq_sum is not None,
            accum_dtype=torch.promote_types(mean.dtype, torch.float32),
            multilabel=multilabel,
            class_variance=mean_sq_sum is None,
        )
        stats.out_dtype = out_dtype or mean.dtype
        stats._check_total([float(count)], c)  # the sums (the means times count) must stay finite
        stats.sum_w = float(count)
        stats.num_updates = int(num_updates if num_updates is not None else round(count))

        moments = [t for t in (mean, mean_entropy, mean_sq, mean_sq_sum) if t is not None]

        def scaled(i: int) -> torch.Tensor:
            t = moments[i]
            # in place only where that changes this moment alone (found by hostile testing: mean_sq given as the
            # tensor of mean, as for one-hot samples, scaled it twice, mean = 3 * 3 * mean for count 3; a broadcast
            # mean raised torch's "more than one element of the written-to tensor refers to a single memory
            # location")
            if inplace and t.dtype == stats.accum_dtype and _writable_in_place(t, moments[:i] + moments[i + 1:]):
                return t if count == 1.0 else t.mul_(count)  # a count of 1: the means are the sums, no pass over them
            return t.to(stats.accum_dtype) * count

        stats.sum_p = scaled(0)
        stats.sum_h = scaled(1)
        stats.sum_p2 = scaled(2) if len(moments) > 2 else None
        return stats

    # ------------------------------------------------------------------ results
    @property
    def count(self) -> float:
        """Total weight of the samples seen (equals the number of samples for unit weights)."""
        return self.sum_w

    def sample_entropy(self, probs: torch.Tensor) -> torch.Tensor:
        """The entropy of ``probs`` evaluated exactly as :meth:`update` evaluates each sample's entropy.

        :meth:`update` adds ``H(p_s)`` computed by the fused kernel where one applies (Triton on CUDA evaluates its
        own logarithm, within a few float32 roundings of torch's) and by the reference formula elsewhere. An inferer
        that compares the entropy of the mean of a window's samples with their expected entropy needs both evaluated
        the same way: identical samples then give ``H(m_w) == EE_w`` bit for bit, and a deterministic network MI = 0
        exactly under overlapping sliding windows (:mod:`monai_unc.inferers.sampling`). The statistics themselves
        are not changed.

        Args:
            probs: probabilities ``(B, C, *spatial)`` in the samples' dtype (the entropy is evaluated in its
                precision, float32 at least: :func:`~monai_unc.measures.entropy_dtype`), on the device of the samples.

        Returns:
            ``H(probs)`` in nats, ``(B, 1, *spatial)`` (``(B, C, *spatial)`` binary entropies for ``multilabel``), in
            the accumulation dtype.

        Example:
            >>> p = torch.tensor([[[0.5], [0.5]]])
            >>> stats = SampleStats(validate=False).update(p).update(p)
            >>> bool(torch.equal(stats.sample_entropy(stats.mean.float()), stats.moments()["expected_entropy"]))
            True
        """
        return _update_entropy(to_tensor(probs, "probs"), self.multilabel, self.accum_dtype)

    def _require(self) -> None:
        if self.sum_p is None:
            raise ValueError("SampleStats is empty: call update() with at least one sample first")

    @property
    def mean(self) -> torch.Tensor:
        """Mean probabilities ``(B, C, *spatial)`` in the accumulation dtype."""
        self._require()
        return self.sum_p / self.sum_w

    def moments(self) -> dict[str, torch.Tensor]:
        """Per-voxel means of the samples.

        These are what a sliding-window callable returns: convex combinations of them stay valid.

        Returns:
            ``pred`` ``(B, C, *spatial)``, ``expected_entropy`` ``(B, 1, *spatial)`` (``(B, C, *spatial)`` for
            ``multilabel``) and, if tracked, ``mean_sq`` ``(B, C, *spatial)`` (``mean_sq_sum`` ``(B, 1, *spatial)``
            with ``class_variance=False``), in the accumulation dtype.

        Raises:
            ValueError: no sample was added.
        """
        self._require()
        out = {K.PRED.value: self.sum_p / self.sum_w, K.EXPECTED_ENTROPY.value: self.sum_h / self.sum_w}
        if self.track_variance:
            out[self._second_key()] = self.sum_p2 / self.sum_w
        return out

    def _second_key(self) -> str:
        return "mean_sq" if self._per_class_squares() else MEAN_SQ_SUM

    def take_moments(self) -> dict[str, torch.Tensor]:
        """:meth:`moments` computed in place: the sums become the means and the statistics are emptied.

        The same values as :meth:`moments` without a second copy of the sums (for the last step of an inferer).

        Returns:
            The dict of :meth:`moments`.
        """
        self._require()
        out = {K.PRED.value: self.sum_p.div_(self.sum_w), K.EXPECTED_ENTROPY.value: self.sum_h.div_(self.sum_w)}
        if self.track_variance:
            out[self._second_key()] = self.sum_p2.div_(self.sum_w)
        self.sum_p = self.sum_h = self.sum_p2 = None
        self.sum_w, self.num_updates = 0.0, 0
        return out

    def measures(self, keys: Iterable[str] | None = None, normalize: bool = False) -> dict[str, torch.Tensor]:
        """Derive the requested measures (default: all available) as ``dict[str, Tensor]``.

        The formulas are those of :func:`derive_measures` (module docstring).

        Args:
            keys: names of :class:`~monai_unc.keys.UncertaintyKeys` (default :meth:`available_keys`); one name as a
                string is that one measure.
            normalize: divide the entropies by ``log C`` (``log 2`` for ``multilabel``) so that they lie in [0, 1].

        Returns:
            ``{key: map}``: ``pred`` is ``(B, C, *spatial)``, every other map ``(B, 1, *spatial)``
            (``(B, C, *spatial)`` for ``multilabel``), in the dtype of the first sample; entropies in nats.

        Raises:
            TypeError: ``normalize`` is not ``True`` or ``False``.
            ValueError: an unknown key, ``samples``, ``variance`` without ``track_variance``, or no sample yet.
        """
        self._require()
        check_bool(normalize, "normalize")
        if isinstance(keys, str):  # one name (as the inferers take it), not its characters
            keys = [keys]
        wanted = [K(k).value for k in (keys if keys is not None else self.available_keys())]
        if K.SAMPLES.value in wanted:
            raise ValueError("SampleStats does not keep samples; use an inferer with keep_samples=True")
        if K.VARIANCE.value in wanted and not self.track_variance:
            raise ValueError("variance was requested but these statistics were built with track_variance=False")
        return derive_measures(
            self.moments(), wanted, normalize=normalize, out_dtype=self.out_dtype, multilabel=self.multilabel
        )

    def available_keys(self) -> list[str]:
        """The measures :meth:`measures` can derive from these statistics.

        Returns:
            Every key of the inferers' measures, ``variance`` only with ``track_variance``.
        """
        return [k.value for k in ALL_MEASURES if k != K.VARIANCE or self.track_variance]

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Sums and counts: what two statistics add when they merge.

        Across ranks, :func:`monai_unc.engine.reduce_state` merges every rank's statistics: an ``all_reduce`` of the
        tensors alone leaves out the counts ``sum_w`` and ``num_updates`` (Python numbers), so that its sums divided by
        one rank's ``sum_w`` are no means.

        Returns:
            ``sum_w``, ``num_updates``, ``sum_p``, ``sum_h`` (and ``sum_p2`` with variance) plus ``out_dtype``,
            ``accum_dtype`` (the sums' dtype, which a copy through numpy may change: bfloat16 sums travel as float32,
            :func:`monai_unc.state.as_array`), ``multilabel`` and ``class_variance``; the tensors are the live sums
            (not copies).

        Raises:
            ValueError: no sample was added.
        """
        self._require()
        state = {"sum_w": self.sum_w, "num_updates": self.num_updates, "sum_p": self.sum_p, "sum_h": self.sum_h,
                 "out_dtype": str(self.out_dtype).replace("torch.", ""),
                 "accum_dtype": str(self.sum_p.dtype).replace("torch.", ""), "multilabel": self.multilabel,
                 "class_variance": self.class_variance}
        if self.track_variance:
            state["sum_p2"] = self.sum_p2
        return state

    def load_state_dict(self, state: Mapping) -> SampleStats:
        """Replace the sums and counts with those of a :meth:`state_dict`.

        Args:
            state: a :meth:`state_dict` (e.g. read back from a file); the tensors are copied in the accumulation dtype
                (when unset: the state's ``accum_dtype``, else that of ``sum_p``), except these statistics' own live
                sums (their own ``state_dict()``).

        Returns:
            ``self``.

        Raises:
            TypeError: a flag is not ``True`` / ``False``, a sum not a floating point tensor, a count not a number.
            ValueError: a missing entry, ``sum_w`` not positive and finite, ``num_updates`` negative, sums of shapes
                that do not belong together or holding NaN / inf, means no probabilities give
                (:func:`check_moments`), or ``out_dtype`` / ``accum_dtype`` not the name of a floating point dtype.
                States are read from files (:func:`monai_unc.state.unpack_states`): untrusted input (found by hostile
                testing: ``sum_w=0`` gave NaN maps, a negative one negative probabilities, a negated ``sum_h`` an MI
                above PE, ``multilabel="False"`` per-channel maps, all without a word).
        """
        state = _checked_state(state)
        if self.accum_dtype is None:  # the dtype the sums were kept in (bfloat16 sums travel as float32)
            self.accum_dtype = state["accum_dtype"] or state["sum_p"].dtype

        def own(t: torch.Tensor, current: torch.Tensor | None) -> torch.Tensor:
            # a copy: the later updates add into the sums in place, and a state's tensors are another statistics'
            # live sums or the caller's arrays (found by hostile testing: SampleStats.from_state_dict(s.state_dict())
            # then update() added into the sums of s, whose mean left [0, 1])
            return t.to(self.accum_dtype) if t is current else t.to(self.accum_dtype, copy=True)

        self.sum_w = state["sum_w"]
        self.num_updates = state["num_updates"]
        self.class_variance = state["class_variance"]
        self.sum_p = own(state["sum_p"], self.sum_p)
        self.sum_h = own(state["sum_h"], self.sum_h)
        self.track_variance = "sum_p2" in state
        self.sum_p2 = own(state["sum_p2"], self.sum_p2) if self.track_variance else None
        self.out_dtype = state["out_dtype"]
        self.multilabel = state["multilabel"]
        return self

    @classmethod
    def from_state_dict(cls, state: Mapping) -> SampleStats:
        """New statistics holding a state of :meth:`state_dict` (:class:`monai_unc.state.MergeableState`).

        Args:
            state: the dict of :meth:`state_dict`; its sums may be torch tensors (any device) or numpy arrays (as
                :func:`monai_unc.state.unpack_states` gives them back), its flags Python or numpy scalars.

        Returns:
            The new :class:`SampleStats` (its sums in the saved dtype); it checks the samples added later, as the
            constructor's default ``validate=True`` does (in earlier versions statistics rebuilt from
            a state, e.g. by :func:`monai_unc.engine.reduce_state` or a resume, took a sample (0.9, 0.9) and gave a
            mean of (0.55, 0.85) without a word).

        Example:
            >>> import torch
            >>> stats = SampleStats()
            >>> _ = stats.update(torch.tensor([[[0.2], [0.8]]]))
            >>> SampleStats.from_state_dict(stats.state_dict()).num_updates
            1
        """
        return cls(accum_dtype=None).load_state_dict(state)

    def __repr__(self) -> str:
        shape = None if self.sum_p is None else tuple(self.sum_p.shape)
        return (
            f"SampleStats(count={self.sum_w:g}, shape={shape}, track_variance={self.track_variance}, "
            f"multilabel={self.multilabel})"
        )


def sample_stats_warned_dtype(
    track_variance: bool = True,
    accum_dtype: torch.dtype | None = torch.float64,
    validate: bool = True,
    multilabel: bool = False,
    class_variance: bool = True,
) -> SampleStats:
    """A :class:`SampleStats` whose half-precision ``accum_dtype`` its caller has warned about already.

    :class:`SampleStats` warns for float16 / bfloat16 sums (:func:`check_accum_dtype`) at every construction; an
    owner that checked (and warned about) its ``accum_dtype`` once and builds one statistics object per window
    (:class:`~monai_unc.inferers.UncertaintyInferer`) builds them with this, which says nothing (in earlier versions
    the inferer filtered the warning by its text inside ``warnings.catch_warnings()``, a process-wide filter that
    every other thread ran under, and that re-showed the caller's once-per-location warnings at every window).

    Args:
        track_variance: as :class:`SampleStats`.
        accum_dtype: as :class:`SampleStats` (a ``TypeError`` naming it for anything but a floating point dtype or
            None; no warning).
        validate: as :class:`SampleStats`.
        multilabel: as :class:`SampleStats`.
        class_variance: as :class:`SampleStats`.

    Returns:
        The new, empty :class:`SampleStats`.

    Example:
        >>> stats = sample_stats_warned_dtype(accum_dtype=torch.bfloat16)  # no warning here
        >>> stats.accum_dtype
        torch.bfloat16
    """
    stats = SampleStats(track_variance, None, validate, multilabel, class_variance)
    stats.accum_dtype = check_accum_dtype(accum_dtype, warn=False)
    return stats


def check_moments(
    mean: torch.Tensor,
    mean_entropy: torch.Tensor,
    mean_sq: torch.Tensor | None = None,
    mean_sq_sum: torch.Tensor | None = None,
    multilabel: bool = False,
    tol: float | None = None,
) -> None:
    """``ValueError`` naming the moment unless the per-voxel means are those of probability samples, up to rounding.

    Found by hostile testing: :meth:`SampleStats.from_moments` took any finite moments, and a negative
    ``mean_entropy`` gave an EE of -0.5 and an MI of 1.11 nats above PE (0.61), a ``mean_entropy`` in bits or summed
    instead of averaged (2.0 for two classes) was capped at log 2 with MI = 0, a ``mean`` of (1.5, -0.5) gave PE = 0,
    and a ``mean_sq`` above ``mean`` a variance of 0.61 (at most 0.25 for probabilities), all without a word.

    Args:
        mean: ``(B, C, *spatial)`` mean probabilities: class probabilities summing to 1
            (:func:`~monai_unc._utils.check_probabilities`), or values in [0, 1] for ``multilabel``.
        mean_entropy: the mean per-sample entropy, in ``[0, log C]`` nats (``[0, log 2]`` per channel for
            ``multilabel``) up to ``1e-4 + 4 eps (1 + log C)``.
        mean_sq: the per-class second moment, ``mean^2 <= mean_sq <= mean + tol (1 + tol)`` up to rounding
            (:func:`~monai_unc.measures.variance_from_moments`' check), or None.
        mean_sq_sum: the one-channel second moment ``E[sum_c p_c^2]``, ``sum_c mean_c^2 <= mean_sq_sum <= (1 +
            tol)^2`` up to the same rounding (samples with values and sums up to ``1 + tol``), or None.
        multilabel: the channels are independent Bernoulli probabilities.
        tol: the tolerance of the samples' probability checks (default :func:`~monai_unc._utils.probability_tolerance`
            of ``mean``'s dtype; :data:`~monai_unc._utils.PROB_TOL` for ``multilabel``): the means of bfloat16 samples,
            whose sums are off 1 by up to ~4e-3, need bfloat16's.

    Raises:
        TypeError: a moment given is not a torch tensor, naming it.
        ValueError: a moment that is not that of probability samples, naming it.

    Example:
        >>> check_moments(torch.tensor([[[0.2], [0.8]]]), torch.tensor([[[0.5]]]))
        >>> check_moments(torch.tensor([[[0.2], [0.8]]]), torch.tensor([[[-0.5]]]))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: mean_entropy must lie in [0, log C] = [0, 0.6931] nats ..., got values in [-0.5, -0.5]
    """
    for value, name in ((mean, "mean"), (mean_entropy, "mean_entropy"), (mean_sq, "mean_sq"),
                        (mean_sq_sum, "mean_sq_sum")):
        if value is not None or name in ("mean", "mean_entropy"):
            check_tensor(value, name)  # found by hostile testing (review 64): numpy raised AttributeError
    if multilabel:
        check_unit_interval(mean, "mean", tol=PROB_TOL if tol is None else tol)
    else:
        check_probabilities(mean, "mean", tol=tol)
    p_tol = (PROB_TOL if multilabel else probability_tolerance(mean.dtype)) if tol is None else tol
    h = mean_entropy.detach()
    log_c = math.log(2 if multilabel else mean.shape[1])
    tol = 1e-4 + 4 * torch.finfo(h.dtype).eps * (1 + log_c)
    lo, hi = (float(v) for v in torch.aminmax(h))
    if lo < -tol or hi > log_c + tol:
        raise ValueError(f"mean_entropy must lie in [0, log C] = [0, {log_c:.4g}] nats (the mean entropy of the "
                         f"samples), got values in [{lo:.4g}, {hi:.4g}]")
    if mean_sq is not None:  # p^2 exceeds p by up to p_tol (1 + p_tol) for values the checks accept
        variance_from_moments(mean, mean_sq, multilabel, validate=True, tol=p_tol)
    if mean_sq_sum is not None:
        sq = (mean.detach().double() ** 2).sum(dim=1, keepdim=True)
        tol_sq = 1e-4 + 4 * max(torch.finfo(t.dtype).eps for t in (mean, mean_sq_sum)) * 2
        # sum_c p_c^2 <= max_c p_c * sum_c p_c <= (1 + tol)^2 for samples the checks accept (found by hostile
        # testing, review 59: a sample (1.0009, 0) gave 1.0018, refused as above 1 when its state was loaded)
        top = (1.0 + p_tol) ** 2
        dev = torch.maximum(sq - mean_sq_sum.detach().double(), mean_sq_sum.detach().double() - top)
        if bool((dev > tol_sq).any()):
            raise ValueError(f"mean_sq_sum must lie between sum_c mean_c^2 and {top:.6g} (the mean of sum_c p_c^2 of "
                             f"the samples of mean), got values up to {float(dev.max()):.4g} outside")


def _state_value(v: Any) -> Any:
    """A value of a state as its scalar where it is a 0-d array (:func:`monai_unc.state.unpack_states`) or tensor."""
    if getattr(v, "ndim", None) == 0 and hasattr(v, "item"):  # a 0-d numpy array or tensor
        return v.item()
    return v


def _checked_state(state: Mapping) -> dict[str, Any]:
    """The entries of a :meth:`SampleStats.state_dict` checked (see :meth:`SampleStats.load_state_dict`)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping (a SampleStats.state_dict()), got {type(state).__name__}")
    missing = [k for k in ("sum_w", "num_updates", "sum_p", "sum_h") if k not in state]
    if missing:
        raise ValueError(f"state lacks {missing} (a SampleStats.state_dict() holds them)")
    out: dict[str, Any] = {}
    out["sum_w"] = _check_weight(_state_value(state["sum_w"]), "sum_w")
    n = _state_value(state["num_updates"])
    if isinstance(n, float) and n.is_integer():  # a count saved as a float
        n = int(n)
    if not is_real(n) or isinstance(n, float) or n < 0:
        raise ValueError(f"num_updates must be an integer >= 0, got {n!r}")
    out["num_updates"] = int(n)
    for name, default in (("multilabel", False), ("class_variance", True)):
        out[name] = check_bool(_state_value(state.get(name, default)), name)
    for key, default in (("out_dtype", "float32"), ("accum_dtype", None)):
        name = str(_state_value(state.get(key, default)))
        if key == "accum_dtype" and state.get(key) is None:  # a state of an earlier version: the sums' dtype
            out[key] = None
            continue
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"{key} must name a floating point torch dtype (e.g. 'float32'), got {name!r}")
        out[key] = dtype
    for key in ("sum_p", "sum_h", "sum_p2"):
        if key in state:
            v = state[key]
            if isinstance(v, ArrayBlocks):  # a large array of read_npz (found by hostile testing, review 60: refused)
                v = v.__array__()
            out[key] = v if isinstance(v, torch.Tensor) else to_tensor(v, key)
    sum_p = out["sum_p"]
    multilabel, per_class = out["multilabel"], out["class_variance"] or out["multilabel"]
    sums = {k: out[k] for k in ("sum_p", "sum_h", "sum_p2") if k in out}
    for key, t in sums.items():
        if not t.is_floating_point():
            raise TypeError(f"{key} must be a floating point tensor, got dtype {t.dtype}")
    if out["accum_dtype"] is not None:  # checked in the dtype they were kept in, with its rounding (found by hostile
        # testing, review 60: bfloat16 sums, which travel as float32, failed mean^2 <= mean_sq by bfloat16's rounding)
        sums = {k: t.to(out["accum_dtype"]) for k, t in sums.items()}
        out.update(sums)
        sum_p = out["sum_p"]
    if sum_p.ndim < 3 or sum_p.numel() == 0:
        raise ValueError(f"sum_p must be a non-empty (B, C, *spatial) tensor, got shape {tuple(sum_p.shape)}")
    b, c, spatial = sum_p.shape[0], sum_p.shape[1], tuple(sum_p.shape[2:])
    expected = {"sum_p": (b, c, *spatial), "sum_h": (b, c if multilabel else 1, *spatial),
                "sum_p2": (b, c if per_class else 1, *spatial)}
    for key, t in sums.items():
        if tuple(t.shape) != expected[key]:
            raise ValueError(f"{key} must have shape {expected[key]} for sum_p of shape {tuple(sum_p.shape)} "
                             f"(multilabel={multilabel}, class_variance={out['class_variance']}), got {tuple(t.shape)}")
        if t.device != sum_p.device:
            raise ValueError(f"{key} is on {t.device}, sum_p on {sum_p.device}")
    _check_finite_in_chunks(sums)
    w = out["sum_w"]
    mean_sq = out["sum_p2"] / w if "sum_p2" in out else None
    try:
        # the tolerance of the samples' checks (found by hostile testing, review 59: the means of bfloat16 samples,
        # accepted by update with bfloat16's 0.031, were refused with float64's 1e-3: such a state was not loadable)
        # and of the sums' own dtype (found by hostile testing, review 60: bfloat16 sums, which travel as float32,
        # were refused with float32's 1e-3 after 5 samples)
        tol = max(probability_tolerance(sum_p.dtype), probability_tolerance(out["out_dtype"]),
                  probability_tolerance(out["accum_dtype"] or sum_p.dtype))
        check_moments(sum_p / w, out["sum_h"] / w, mean_sq if per_class else None,
                      None if per_class else mean_sq, multilabel, tol=None if multilabel else tol)
    except ValueError as e:
        raise ValueError(f"the state's sums divided by sum_w are no means of probability samples: {e}") from None
    return out


def derive_measures(
    moments: Mapping[str, torch.Tensor],
    keys: Iterable[str],
    normalize: bool = False,
    out_dtype: torch.dtype | None = None,
    multilabel: bool = False,
    chunk_elements: int | None | str = "auto",
    samples_dtype: torch.dtype | None = None,
) -> dict[str, torch.Tensor]:
    """Measures from per-voxel means (see :meth:`SampleStats.moments`).

    The means are ``{pred, expected_entropy[, mean_sq | mean_sq_sum][, window_disagreement]}``.

    This is where the decomposition is evaluated once for every inferer, stitched or not:
    PE = H(pred), EE = expected_entropy, MI = max(PE - EE, 0), one_minus_max_prob = 1 - max_c pred,
    variance = mean_c (mean_sq - pred^2) (or ``(mean_sq_sum - sum_c pred^2) / C`` from the one-channel moment).
    When ``moments`` holds ``window_disagreement`` (WD, the part of PE that comes from overlapping sliding windows
    disagreeing, computed by the inferer), MI = max(PE - EE - WD, 0) and WD can be asked for as a map.
    ``multilabel``: per-channel Bernoulli measures (:mod:`monai_unc.measures`), every map ``(B, C, *spatial)``;
    ``normalize`` divides by ``log 2`` instead of ``log C``.

    Args:
        moments: the per-voxel means, ``(B, *, *spatial)`` tensors of one spatial shape.
        keys: the measures to derive (``pred`` and the names of :data:`ALL_MEASURES`, ``window_disagreement``); one
            name as a string is that one measure.
        normalize: divide the entropies by ``log C`` (``log 2`` for ``multilabel``).
        out_dtype: dtype of the maps (default: that of the moments), the dtype of the samples: PE is evaluated in
            their entropy precision (:func:`~monai_unc.measures.entropy_dtype` of ``out_dtype``, float32 for float32
            or half-precision samples) by the evaluation that gave each sample's entropy (the fused kernel's where
            one applies), so identical samples give MI = 0 exactly.
        multilabel: per-channel Bernoulli measures.
        chunk_elements: evaluate the maps in chunks of about this many ``C x voxels`` elements along the first
            spatial axis (:func:`spatial_chunks`), so the temporaries of the entropy and the variance never have the
            full ``C x V`` size; ``None``: one chunk; ``"auto"``: :func:`default_chunk_elements` of the moments'
            device (larger chunks on a GPU: fewer launches). The values do not depend on it (every voxel on its
            own).
        samples_dtype: the dtype of the samples' probabilities where it differs from ``out_dtype`` (an inferer's
            maps follow its input's dtype, a float64 network's probabilities are float64): PE is then evaluated in
            its entropy precision instead (found by a review: a float64 network on a float32 input had MI ~1e-7 for
            identical samples, PE evaluated in float32 against float64 sample entropies). Default ``out_dtype``.

    Returns:
        ``{key: map}`` in the order of ``keys``; ``pred`` is ``moments["pred"]`` itself when no conversion is
        needed.

    Raises:
        TypeError: a moment is not a torch tensor (``moments['<key>'] must be a torch tensor``).
        ValueError: ``moments["pred"]`` is empty (no voxel), an unknown key, or ``variance`` without a second moment.
    """
    check_bool(normalize, "normalize")
    check_bool(multilabel, "multilabel")
    _check_dtype(samples_dtype, "samples_dtype")
    keys = [K(k).value for k in ([keys] if isinstance(keys, str) else keys)]
    for k, v in moments.items():  # found by hostile testing (review 64): numpy raised AttributeError
        check_tensor(v, f"moments[{k!r}]")
    mean = moments[K.PRED.value]
    if mean.numel() == 0:
        # found by hostile testing: no chunk was derived and the first key raised KeyError
        raise ValueError(f"moments['pred'] is empty (shape {tuple(mean.shape)}): no voxel to derive measures for")
    if isinstance(chunk_elements, str):
        if chunk_elements != "auto":
            raise ValueError(f"chunk_elements must be a positive integer, None or 'auto', got {chunk_elements!r}")
        chunk_elements = default_chunk_elements(mean)
    chunks = spatial_chunks(tuple(mean.shape), chunk_elements) if mean.ndim >= 3 else [slice(None)]
    if len(chunks) == 1:
        return _derive(moments, keys, normalize, out_dtype, multilabel, samples_dtype)
    out: dict[str, torch.Tensor] = {}
    if K.PRED.value in keys:
        out[K.PRED.value] = mean.to(out_dtype) if out_dtype is not None else mean
    rest = [k for k in keys if k != K.PRED.value]
    for sl in chunks:
        chunk = {k: v[:, :, sl].contiguous() for k, v in moments.items()}
        part = _derive(chunk, rest, normalize, out_dtype, multilabel, samples_dtype)
        for k, v in part.items():
            if k not in out:
                out[k] = v.new_empty((*v.shape[:2], *mean.shape[2:]))
            out[k][:, :, sl] = v
    return {k: out[k] for k in keys}


def _derive(
    moments: Mapping[str, torch.Tensor],
    keys: list[str],
    normalize: bool,
    out_dtype: torch.dtype | None,
    multilabel: bool,
    samples_dtype: torch.dtype | None = None,
) -> dict[str, torch.Tensor]:
    """:func:`derive_measures` on one chunk (or the whole volume)."""
    precision = samples_dtype if samples_dtype is not None else out_dtype  # the samples' entropies' dtype
    mean = moments[K.PRED.value]
    ee = moments[K.EXPECTED_ENTROPY.value]
    wd = moments.get(K.WINDOW_DISAGREEMENT.value)
    n_classes = 2 if multilabel else mean.shape[1]
    out: dict[str, torch.Tensor] = {}
    # H <= log C: rounding put the entropy of a uniform float32 prediction an ulp above (normalised 1.0000002; found
    # by invariant testing). PE and EE are capped at log C rounded to their evaluation precision, one value for both,
    # so that identical samples keep PE equal to EE bit for bit (MI = 0 exactly).
    cap = float(torch.tensor(math.log(n_classes), dtype=entropy_dtype(precision or mean.dtype)))
    ee = ee.clamp_max(cap)
    pe = None
    if K.PREDICTIVE_ENTROPY.value in keys or K.MUTUAL_INFORMATION.value in keys:
        pe = _predictive_entropy(mean, multilabel, precision).clamp_max(cap)
    for key in keys:
        if key == K.PRED.value:
            val = mean
        elif key == K.PREDICTIVE_ENTROPY.value:
            val = pe
        elif key == K.EXPECTED_ENTROPY.value:
            val = ee
        elif key == K.MUTUAL_INFORMATION.value:
            val = mutual_information_from_entropies(pe, ee, wd, validate=False)
        elif key == K.WINDOW_DISAGREEMENT.value:
            if wd is None:
                raise ValueError(
                    "window_disagreement is only available from an inferer with window_disagreement='separate'"
                )
            val = wd
        elif key == K.ONE_MINUS_MAX_PROB.value:
            val = max_prob_uncertainty_t(mean, multilabel)
        elif key == K.VARIANCE.value:
            if "mean_sq" in moments:
                val = variance_from_moments(mean, moments["mean_sq"], multilabel, validate=False)
            elif MEAN_SQ_SUM in moments and not multilabel:
                val = variance_from_square_sums(mean, moments[MEAN_SQ_SUM])
            else:
                raise ValueError("variance needs the second moment 'mean_sq' (or 'mean_sq_sum')")
        else:
            raise ValueError(f"unknown measure {key!r}")
        if normalize and key in (
            K.PREDICTIVE_ENTROPY.value,
            K.EXPECTED_ENTROPY.value,
            K.MUTUAL_INFORMATION.value,
            K.WINDOW_DISAGREEMENT.value,
        ):
            val = (val / torch.log(torch.tensor(float(n_classes), dtype=val.dtype, device=val.device))).clamp_max(1.0)
        out[key] = val.to(out_dtype) if out_dtype is not None else val
    return out


#: how the disagreement between overlapping sliding windows is reported: its own map (``"separate"``) or counted in
#: the mutual information (``"mutual_information"``; :class:`~monai_unc.inferers.UncertaintyInferer`)
WINDOW_DISAGREEMENT_MODES = ("separate", "mutual_information")
#: rounding tolerance of the window disagreement, in units of ``eps * (1 + PE)``
#: (:func:`window_disagreement_from_stitched`)
WD_RTOL = 64.0


def add_squares(moment: torch.Tensor, mean: torch.Tensor, sign: float = 1.0) -> torch.Tensor:
    """``moment += sign * mean^2`` in place: per class, or ``sum_c mean_c^2`` for a one-channel moment.

    Turns a second moment into a variance (``sign=-1``: ``E[p^2] - m^2``) and back (``sign=1``), e.g. a window's own
    variance with ``window_disagreement="separate"`` and the stitched second moment after it. Class by class, so no
    temporary of the size of ``mean`` (the stitched buffers of a volume); ``mean`` is converted to ``moment``'s dtype
    one class at a time.

    Args:
        moment: ``(B, C, *spatial)`` per-class second moment, or ``(B, 1, *spatial)`` one-channel
            ``sum_c E[p_c^2]`` (:data:`MEAN_SQ_SUM`); modified in place.
        mean: ``(B, C, *spatial)`` mean probabilities.
        sign: ``1.0`` adds the squares, ``-1.0`` subtracts them.

    Returns:
        ``moment``.

    Example:
        >>> m = torch.tensor([[[0.5], [0.5]]])
        >>> add_squares(torch.tensor([[[0.3], [0.3]]]), m, -1.0)
        tensor([[[0.0500],
                 [0.0500]]])
    """
    if moment.shape[1] == mean.shape[1]:
        for c in range(mean.shape[1]):
            mc = mean[:, c:c + 1].to(moment.dtype)
            moment[:, c:c + 1].addcmul_(mc, mc, value=sign)
    else:  # the sum of squares variance_from_square_sums subtracts, bit for bit
        moment.add_(square_sum(mean, moment.dtype), alpha=sign)
    return moment


def window_disagreement_from_stitched(
    pred: torch.Tensor, window_entropy: torch.Tensor, multilabel: bool = False,
    samples_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Window disagreement ``WD = H(pred) - blend_w H(m_w)`` from stitched sliding-window outputs.

    By concavity of the entropy WD >= 0 and WD = 0 where one window covers a voxel. Rounding below zero down to
    ``-WD_RTOL * eps * (1 + H(pred))`` is set to 0; lower values are set to 0 with a ``UserWarning`` (the blending
    was not convex).

    Args:
        pred: ``(B, C, *spatial)`` the stitched mean probabilities ``sum_w a_w m_w``.
        window_entropy: the stitched per-window predictive entropies ``sum_w a_w H(m_w)`` in nats, ``(B, 1, *spatial)``
            (``(B, C, *spatial)`` with binary entropies for ``multilabel``).
        multilabel: the channels are independent Bernoulli probabilities.
        samples_dtype: the dtype of the samples whose window entropies were stitched, where it is coarser than
            ``pred``'s (a float32 network on a float64 input): the rounding tolerated below zero is that dtype's
            (found by a review: float32 window entropies against a float64 tolerance warned of a blending that was
            convex). Default ``pred``'s dtype.

    Returns:
        WD in nats, the shape of ``window_entropy``, in the dtype of ``pred`` (float32 for a half-precision one).

    Raises:
        TypeError: ``pred`` or ``window_entropy`` is not a torch tensor.
        ValueError: ``window_entropy`` has another shape than ``(B, 1, *spatial)`` (``(B, C, *spatial)`` for
            ``multilabel``) of ``pred``'s, or a value that is negative or not finite (found by hostile testing: a
            window entropy of two channels was broadcast into a WD map of two channels, a negative one gave a WD of
            1.69 nats, above log 2, without a word).

    Example:
        >>> import math
        >>> import torch
        >>> from monai_unc.stats import window_disagreement_from_stitched
        >>> pred = torch.tensor([0.5, 0.5]).reshape(1, 2, 1)  # two windows that predict (1, 0) and (0, 1), blended
        >>> window_entropy = torch.zeros(1, 1, 1)  # each window alone is certain
        >>> round(float(window_disagreement_from_stitched(pred, window_entropy)) / math.log(2), 4)
        1.0
    """
    check_tensor(pred, "pred")  # found by hostile testing (review 64): numpy raised AttributeError
    check_tensor(window_entropy, "window_entropy")
    if pred.ndim < 3:
        raise ValueError(f"pred must be (B, C, *spatial), got shape {tuple(pred.shape)}")
    expected = (pred.shape[0], pred.shape[1] if multilabel else 1, *pred.shape[2:])
    if tuple(window_entropy.shape) != expected:
        raise ValueError(f"window_entropy must have shape {expected} for pred of shape {tuple(pred.shape)}"
                         f"{' (multilabel)' if multilabel else ''}, got {tuple(window_entropy.shape)}")
    if window_entropy.numel():
        lo, hi = torch.stack(torch.aminmax(window_entropy.detach())).tolist()  # one sync; NaN propagates
        if not (lo >= -WD_RTOL * torch.finfo(window_entropy.dtype).eps and math.isfinite(hi)):
            check_finite(window_entropy, "window_entropy")
            raise ValueError(f"window_entropy must be non-negative (stitched entropies, nats), got minimum {lo:.4g}")
    # H(pred) in spatial chunks: its temporaries have the size of a chunk, not of C x V; in float32 at least, as the
    # statistics evaluate PE = H(pred) (a half-precision H(pred) left its rounding, 1e-3 nats, in MI = PE - EE - WD)
    # evaluated by the function that evaluates PE in derive_measures: WD's H(pred) and PE are then equal bit for bit
    dtype = entropy_dtype(pred.dtype)
    pe = torch.empty(window_entropy.shape, dtype=dtype, device=pred.device)
    chunks = spatial_chunks(tuple(pred.shape), default_chunk_elements(pred)) if pred.ndim >= 3 else [slice(None)]
    for sl in chunks:
        pe[:, :, sl] = _predictive_entropy(pred[:, :, sl], multilabel)
    wd = pe - window_entropy.to(pe.dtype)
    _check_dtype(samples_dtype, "samples_dtype")
    eps = torch.finfo(pred.dtype).eps
    if samples_dtype is not None:
        eps = max(eps, torch.finfo(entropy_dtype(samples_dtype)).eps)
    tol = WD_RTOL * eps * (1 + pe)  # the stitched buffers' rounding, or the samples' entropies' where coarser
    if bool((wd < -tol).any()):
        worst = float(wd.min())
        warnings.warn(
            f"window disagreement below zero beyond rounding (minimum {worst:.3g} nats): the base inferer's blending "
            "of windows is not a convex combination; negative values are set to 0",
            UserWarning,
            stacklevel=3,
        )
    return wd.clamp_min(0)
