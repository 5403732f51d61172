"""The memory model of the uncertainty inferers: bytes of one case's inference, and whether it fits.

Peak working memory of :class:`~monai_unc.inferers.UncertaintyInferer` (and its subclasses) on one case of ``V``
voxels with ``C`` classes, under a sliding window of ``V_w`` voxels run ``k`` windows at a time (``sw_batch_size``:
MONAI stacks ``k`` windows into one network call, so every term of a window below counts ``k V_w`` voxels), with the
input dtype's ``b`` bytes (4 for float32) and the accumulation dtype's ``a`` bytes (8 up to ``FLOAT64_MAX_CLASSES``
classes and for float64 samples, 4 above). The window's logits, probabilities and running sums are of the network's
output dtype (``network_dtype``: a float64 network that casts a float32 input returns float64 logits, and its sums
are float64 whatever ``C``; float32 probabilities for half-precision logits); in the terms below ``b`` then stands
for their bytes there, while MONAI's buffers and the maps keep the input's. The larger of two phases:

- **stitching**: MONAI's output buffers, ``b V (C + 1 + q + w)`` (``b`` is 4 for a float16 / bfloat16 input, which
  the inferer stitches in float32; mean probabilities, mean entropy, second moment:
  ``q = 1`` by default, ``C`` with ``class_variance``, 0 without ``track_variance``; window entropy ``w = 1`` with
  ``window_disagreement="separate"``), one ``b V`` count map per buffer, and one window's work
  ``V_w (a (C + 1 + q) + C b + max(n, C (b + t)))``: the running sums, the network's output (logits), and the larger
  of what is alive while the network runs (its own working memory besides its output, ``n`` bytes per window voxel)
  and what is alive once it has returned (the probabilities, a flipped copy of the logits, the temporaries of the
  update: ``t = 0`` for the fused update of :mod:`monai_unc.stats`, ``t = 3 b + [a != b] a`` for the reference torch
  update: entropy and squares, the copy in the accumulation dtype); the network's activations are freed before the
  probabilities are made. MONAI also holds the previous window's means, ``V_w a (C + 1 + q + w)``, while the next
  window runs. MONAI allocates its buffers at the first window's output: with one window (it covers the case) the
  phase is the larger of the window's work and the buffers and count maps beside the window's means, not their sum;
- **shared passes** (``share_passes=True`` with a replay batch of ``k_s`` samples) add to the window's work the kept
  shared activations ``V_w s`` and ``V_w (k_s r - C b) + k_s V_w s_c + (k_s - 1) V_w C b``: each sample's stochastic
  tensors ``r`` (its logits among them; one sample's logits are in the window's work already), its copy of the kept
  activations that the stochastic rest reads ``s_c`` (``SharedPasses.copied_bytes``; at most ``s``), its
  probabilities (bytes per window voxel, measured on one window with :class:`~monai_unc.inferers.SharedPasses`).
  With ``k > 1`` windows per call and ``s_c = 0 < s`` (the replays hand the kept values on as views) a replay of
  ``k_s >= 2`` samples runs one window at a time (one sample runs the whole window batch with ``s_c = s``):
  ``k_s V_w max(r / k + C b (k - 1) / k, 2 C b)`` beside the kept activations instead (one window's stochastic
  tensors beside the earlier windows' outputs, or the outputs and their interleaved copy;
  :func:`~monai_unc.networks.shared.replay_working_bytes`, the formula the automatic sample batch uses on a GPU);
- **invertible transforms** (:class:`~monai_unc.inferers.InvertibleTransformSource`, ``TTAInferer(transforms=...)``,
  ``inverse_dtype``): once the network has returned, each of the ``k`` output rows (one window of one sample) is
  inverted in turn beside the logits: the row with a channel of ones for the covered fraction (``(C + 1) b``), its
  inverse (``(C + 1) i``, ``i`` the bytes of the dtype the inverse returns), the filled-in row (``C i``, and its copy
  ``C b`` when ``i != b``) beside the rows done so far, and at the end the rows and their stack (``2 C b`` per window
  voxel): ``V_w ((C + 1)(b + i) / k + max(C i / k + [i != b] C b / k + C b (k - 1) / k, 2 C b))``, counted instead of
  the probabilities when larger (the activations are freed and the probabilities made from the stack afterwards).
  Under shared passes a replay of ``k_s`` samples returns ``k_s k`` rows, inverted once the replay's stochastic tensors
  are freed: the kept shared activations ``V_w s``, the samples' logits ``k_s V_w C b`` and the inversion above with
  ``k_s k`` rows; the larger of that and the replay counts (not their sum). One sample (or replay batch) at a time:
  the number of transforms does not enter. The transforms' own temporaries (a resampling grid, a cast of the row to
  the grid's dtype: ``RandAffine``'s inverse resamples in float64) are not counted beyond the
  filled-in row, which outlives them: an upper bound when a window's first sample is inverted before its running
  sums exist (one transform: up to 18 % above the peak in one pass), measured 5 % below to 8 % above for 2-4 transforms;
- **ensembles** (``M`` members, looped outside the sliding window): while a later member's windows are stitched into
  fresh buffers, the merged statistics of the earlier members are kept, as many bytes as the buffers (``b V (C + 1 +
  q + w)``; in one pass, their means in the accumulation dtype; MONAI allocates its own output buffers, so a member
  cannot be stitched into the earlier sums), and the final phase makes the members' mean window disagreement;
- **final**: the buffers again (they become the means in place), the new scalar maps (``b V`` each: PE, MI,
  ``1 - max p``, variance, and EE and WD copied out when the maps are derived in chunks), ``pred`` converted to
  ``pred_dtype`` (nothing for ``"input"``) or the ``argmax`` label map, and the temporaries of one chunk of the final
  measures (:data:`~monai_unc.stats.DEFAULT_CHUNK_ELEMENTS`; on a GPU :data:`~monai_unc.stats.CUDA_CHUNK_ELEMENTS`).

Without a sliding window (``roi_size=None``, ``SimpleInferer``) the window is the volume: the stitching phase is the
window's work over ``V`` voxels (no buffers, nothing held), and the final phase starts from the window's means in the
accumulation dtype, ``a V (C + 1 + q)``, the zero window-disagreement map ``a V`` (``window_disagreement``), the maps
(EE among them when it is converted or chunked) and ``pred`` converted to the input's dtype where ``a != b``.

With ``keep_samples=True`` (``kept_samples=S``) the samples' probabilities add ``S C b`` bytes per voxel: a
stitching buffer ``b V S C`` (and its count map) while windows are stitched, and in the final phase that buffer and the
returned concatenation ``samples`` ``(S, B, C, *spatial)``, ``2 b V S C`` (the temporaries of the maps are freed
before the concatenation); a window holds its samples twice at its end, ``2 b V_w S C`` (their list and their
concatenation), and MONAI holds the previous window's. This is the only term that grows with ``S``; ``monai-unc infer
--save-samples`` turns each sample into a label map once the inferer returns (``S`` bytes per voxel on disk before
compression).

Stock MONAI (``softmax(SlidingWindowInferer(x, net))``) needs ``b V (C + 1)`` for its buffer and count map, the
window's network and logits, and ``b V C`` for the softmax: about ``8 C`` bytes per voxel for float32 against about
``4 C + 28`` for the defaults here. Multi-label outputs have ``C`` channels in every map. Left out: the copies of a
window's input (the inferer keeps one as given, put back after a network that writes into its input;
``sw_batch_size > 1`` concatenates the windows; flips, noise and invertible transforms copy them: ``b`` bytes per
window voxel and input channel each) and the network's weights.

The model is checked against measured peak RSS in ``tests/inferers/test_memory.py`` (within 15 %) and
``benchmarks/bench_memory.py``, both with glibc's ``MALLOC_MMAP_THRESHOLD_=131072``: every tensor above 128 KiB is
then mapped and unmapped, so RSS follows the live tensors. With glibc's default (dynamic) threshold, freed blocks of
up to 32 MiB stay in the heap and the peak RSS is higher than the model by that slack, which depends on the order of
the allocations (TTA with 8 flips on 64^3 voxels, 32^3 windows and 32 classes: 57 MiB with the fixed threshold,
estimate 56 MiB, but 82-88 MiB with the default one; a hostile test measured 87 MiB); a GPU's caching allocator holds
such blocks too (``torch.cuda.max_memory_allocated`` follows the live tensors, ``max_memory_reserved`` adds the
cache).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .._stats_kernels import available as fused_kernels_available
from .._utils import check_bool, check_integer, check_nonnegative, host_memory_free
from ..measures import entropy_dtype
from ..networks.shared import replay_working_bytes
from ..stats import CUDA_CHUNK_ELEMENTS, DEFAULT_CHUNK_ELEMENTS, auto_accum_dtype, check_accum_dtype

__all__ = ["MemoryEstimate", "estimate_memory", "available_memory"]


@dataclass(frozen=True)
class MemoryEstimate:
    """The result of :func:`estimate_memory`.

    Attributes:
        total: peak working memory in bytes (the larger phase).
        parts: bytes of each part of the peak phase (they add up to ``total``).
        phase: ``"stitching"`` or ``"final"`` (or ``"stock"`` parts for ``stock=True``), the phase of the peak.
    """

    total: int
    parts: dict[str, int] = field(default_factory=dict)
    phase: str = "final"

    def bytes_per_voxel(self, shape: Sequence[int]) -> float:
        """``total`` divided by the number of voxels of ``shape``."""
        return self.total / math.prod(int(s) for s in shape)


def _nbytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _check_shape(shape: Sequence[int], name: str) -> tuple[int, ...]:
    # integers only (found by hostile testing: a size of 64.7 was truncated to 64, True counted as 1, and the
    # string "64" was read as the shape (6, 4))
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeError(f"{name} must be a sequence of positive integers, got {shape!r}")
    items = list(shape)
    if any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in items):
        raise TypeError(f"{name} must be a sequence of positive integers, got {shape!r}")
    out = tuple(int(s) for s in items)
    if not out or any(s < 1 for s in out) or len(out) > 3:
        raise ValueError(f"{name} must hold 1 to 3 positive spatial sizes, got {shape!r}")
    return out


def _check_bytes(value: float, name: str) -> float:
    """A bytes-per-voxel argument as a finite float ``>= 0``; ``TypeError`` / ``ValueError`` naming it.

    :func:`~monai_unc._utils.check_nonnegative`, with the messages of this function's earlier versions.

    Found by hostile testing: ``shared_bytes_per_voxel="1"`` failed with Python's unnamed ``'>=' not supported``,
    ``math.inf`` (of any of them) with ``OverflowError: cannot convert float infinity to integer``, and ``True`` was
    counted as one byte.
    """
    return check_nonnegative(value, name, type_text="a number >= 0")


def _check_overlap(overlap: float | Sequence[float] | None, axes: int) -> tuple[float, ...] | None:
    """``overlap`` as one number per axis in [0, 1) (None stays None); ``TypeError`` / ``ValueError`` naming it."""
    if overlap is None:
        return None
    iterable = hasattr(overlap, "__iter__") and not isinstance(overlap, (str, bytes))
    values = list(overlap) if iterable else [overlap] * axes
    if any(isinstance(o, bool) or not isinstance(o, numbers.Real) for o in values):
        raise TypeError(f"overlap must be a number in [0, 1) or a sequence of one per axis, got {overlap!r}")
    out = tuple(float(o) for o in values)
    if len(out) != axes or not all(0 <= o < 1 for o in out):
        raise ValueError(f"overlap must be in [0, 1), one number or one per axis ({axes}), got {overlap!r}")
    return out


def _num_windows(spatial: tuple[int, ...], roi: tuple[int, ...], overlap: tuple[float, ...] | None) -> int | None:
    """The windows of MONAI's ``sliding_window_inference`` on ``spatial``; None: unknown (no ``overlap``).

    One where the window covers the case; otherwise, per axis with ``r < s``, ``ceil((s - r) / i) + 1`` windows at
    MONAI's scan interval ``i = max(int(r (1 - overlap)), 1)`` (``monai.data.utils.dense_patch_slices``).
    """
    if all(r >= s for r, s in zip(roi, spatial)):
        return 1
    if overlap is None:
        return None
    n = 1
    for s, r, o in zip(spatial, roi, overlap):
        if r < s:
            n *= math.ceil((s - r) / max(int(r * (1 - o)), 1)) + 1
    return n


def estimate_memory(
    shape: Sequence[int],
    num_classes: int,
    roi_size: Sequence[int] | None = None,
    input_dtype: torch.dtype = torch.float32,
    accum_dtype: torch.dtype | None = None,
    track_variance: bool = True,
    class_variance: bool = False,
    pred_dtype: torch.dtype | str | None = "input",
    window_disagreement: bool = True,
    multilabel: bool = False,
    network_bytes_per_voxel: float = 0.0,
    stock: bool = False,
    sample_batch: int = 1,
    shared_bytes_per_voxel: float = 0.0,
    stochastic_bytes_per_voxel: float = 0.0,
    kept_samples: int = 0,
    copied_bytes_per_voxel: float | None = None,
    fused_update: bool | None = None,
    sw_batch_size: int = 1,
    overlap: float | Sequence[float] | None = None,
    ensemble_members: int = 1,
    device: torch.device | str = "cpu",
    network_dtype: torch.dtype | None = None,
    inverse_dtype: torch.dtype | None = None,
) -> MemoryEstimate:
    """Peak working memory of one case's inference (the model of the module docstring).

    Working memory: what the call allocates beyond the input and the network's weights; the same on the CPU (RSS)
    and on a GPU (when ``sw_device`` and ``device`` are both the GPU; with ``device="cpu"`` the buffers and the final
    phase are on the CPU and only the window's work on the GPU). The number of samples enters only through
    ``kept_samples``. Checked against the measured peak RSS (within 15 %) with glibc's
    ``MALLOC_MMAP_THRESHOLD_=131072``; glibc's default allocator keeps freed blocks of up to 32 MiB in the heap, which
    the process's RSS then counts on top of the model (module docstring).

    Args:
        shape: spatial shape of the case, e.g. ``(128, 128, 128)``.
        num_classes: output channels ``C`` of the network.
        roi_size: the sliding window's ``roi_size`` (``None``: one pass over the whole volume, ``SimpleInferer``).
        input_dtype: dtype of the input (MONAI stitches in it, in float32 for float16 / bfloat16).
        accum_dtype: the inferer's ``accum_dtype`` (``None``: float64 up to 16 classes and for float64 outputs,
            ``network_dtype`` or else ``input_dtype``; float32 above: :func:`~monai_unc.stats.auto_accum_dtype`).
        track_variance: the inferer keeps a second moment for ``variance``.
        class_variance: the second moment per class (``C`` channels) instead of one channel.
        pred_dtype: the inferer's ``pred_dtype`` (``"input"``, a float dtype, or ``None`` for ``argmax`` only).
        window_disagreement: the window disagreement is its own map (``window_disagreement="separate"``).
        multilabel: sigmoid outputs with ``C >= 2`` regions (every map has ``C`` channels).
        network_bytes_per_voxel: the network's own working memory per window voxel besides its output: its peak
            while it runs (activations, workspaces) minus the output's bytes (0 for a network too small to matter).
            Measure it once with stock inference on one window (peak memory of the call minus the bytes of its
            output, over the window's voxels). It counts instead of the probabilities when it is larger: the
            network's activations are freed before the probabilities are made.
        stock: the estimate of stock MONAI inference, ``softmax(SlidingWindowInferer(x, net))``, instead.
        sample_batch: with shared passes (``share_passes=True``), the samples of one replay batch (the inferer's
            ``sample_batch_size``; 1 for full passes).
        shared_bytes_per_voxel: with shared passes, the kept shared activations per window voxel
            (``SharedPasses.shared_bytes`` over the window's voxels, measured on one window); 0 for full passes.
        stochastic_bytes_per_voxel: with shared passes, the tensors of one sample's stochastic part per window voxel
            (``SharedPasses.stochastic_bytes`` over the window's voxels); 0 for full passes.
        kept_samples: the samples ``S`` kept with ``keep_samples=True`` (0: none kept). They are kept as
            probabilities in the input's dtype, ``S C`` channels per voxel (module docstring): the one term that grows
            with the number of samples.
        copied_bytes_per_voxel: with shared passes, the kept activations that the stochastic rest reads, copied
            once per replayed sample (``SharedPasses.copied_bytes`` over the window's voxels); None: all of
            ``shared_bytes_per_voxel`` (an upper bound). 0 with ``sw_batch_size > 1``: the replays run one window
            at a time (module docstring); a replay of one sample (``sample_batch=1``) runs the whole window batch
            with all of ``shared_bytes_per_voxel`` counted as copied, and so does a plain replay of a window batch
            that keeps nothing (``shared_bytes_per_voxel`` 0 too).
        fused_update: the statistics are updated by the fused kernel (:mod:`monai_unc.stats`: no temporaries of a
            sample's size); False: the reference torch update (three temporaries of the probabilities and a copy in
            the accumulation dtype); None: whether the fused kernel of the CPU is installed (numba).
        sw_batch_size: the sliding window's ``sw_batch_size``: MONAI runs that many windows in one call of the
            network, so every term of a window (the network's activations and output, the probabilities, the running
            sums, the shared passes, the kept samples, the previous window's means) counts that many windows. At
            most the case's number of windows count: one where the window covers the case, else the number that
            ``overlap`` gives. No effect without ``roi_size`` (one pass).
        overlap: the sliding window's ``overlap`` (one number or one per axis, in [0, 1)), used only to count the
            case's windows for ``sw_batch_size``; None: ``sw_batch_size`` windows per call (an upper bound).
        ensemble_members: the members ``M`` of an ensemble (:class:`~monai_unc.inferers.EnsembleInferer`, or
            ``monai-unc infer --method ensemble``): from the second member on, the merged statistics of the earlier
            members are kept while the member's windows are stitched (as many bytes as the stitching buffers; in one
            pass, the means in the accumulation dtype). ``kept_samples`` counts the samples of all members.
        device: where the stitched outputs and the final maps live (the inferer's ``device``): on a GPU the maps are
            derived in chunks of :data:`~monai_unc.stats.CUDA_CHUNK_ELEMENTS` (one chunk up to 16 M class-voxels,
            with temporaries of that size), on the CPU of :data:`~monai_unc.stats.DEFAULT_CHUNK_ELEMENTS`; with
            ``fused_update=None`` it also says whose fused kernel counts (Triton on a GPU, numba on the CPU).
        network_dtype: the dtype of the network's outputs: its parameters' dtype for a network that computes in it
            (one that casts its input to its own dtype, e.g. a float64 network given a float32 input); None: the
            input's dtype. The logits are of this dtype, the probabilities too (float32 for float16 / bfloat16
            logits), and so are the running sums with ``accum_dtype=None`` (:func:`~monai_unc.stats.auto_accum_dtype`
            of this dtype: float64 sums for a float64 network whatever ``num_classes``); MONAI's stitching buffers,
            the maps and ``pred`` stay in the input's dtype. ``monai-unc infer`` reads it from the network's
            parameters.
        inverse_dtype: with MONAI invertible transforms (:class:`~monai_unc.inferers.InvertibleTransformSource`,
            ``TTAInferer(transforms=...)``), the dtype of what their inverses return, the largest of them: the
            network's output dtype for transforms that move voxels (``Flip``, ``Rotate90``, ``RandFlip``,
            ``RandRotate90``), float32 for MONAI's interpolating ones (``Zoom``, ``Rotate``, ``Affine``, ``Spacing``),
            float64 for ``RandAffine`` (its inverse resamples on a float64 grid, MONAI 1.6); None: no such
            transforms. Each sample's output is inverted one window at a time, beside the logits: a copy with a
            channel of ones, the inverse, the filled-in and the stacked outputs (module docstring); it counts instead
            of the probabilities when it is larger, and with shared passes (``sample_batch``) instead of the replay
            when it is larger, the ``sample_batch`` samples' outputs inverted after their replay. The number of
            transforms does not enter (one sample, or replay batch, at a time).

    Returns:
        A :class:`MemoryEstimate` (bytes).

    Raises:
        TypeError: a flag that is not a bool, ``accum_dtype`` / ``input_dtype`` / ``network_dtype`` /
            ``inverse_dtype`` / ``pred_dtype`` that is not a floating point dtype (``pred_dtype`` may also be
            ``"input"`` or None), a ``shape`` / ``roi_size`` that is not a sequence of integers, an ``overlap`` or a
            ``*_bytes_per_voxel`` argument that is not a number.
        ValueError: an argument out of its range (the message names it); ``inverse_dtype`` with ``stock=True``.

    Example:
        >>> from monai_unc.inferers import estimate_memory
        >>> est = estimate_memory((128, 128, 128), 105, roi_size=(64, 64, 64), fused_update=True)
        >>> round(est.bytes_per_voxel((128, 128, 128)))
        660
        >>> ref = estimate_memory((128, 128, 128), 105, roi_size=(64, 64, 64), fused_update=False)
        >>> round(ref.bytes_per_voxel((128, 128, 128)))  # the reference torch update's temporaries
        818
        >>> round(estimate_memory((128, 128, 128), 105, roi_size=(64, 64, 64), stock=True).bytes_per_voxel((128,) * 3))
        840
        >>> four = estimate_memory((128, 128, 128), 105, roi_size=(64, 64, 64), fused_update=True, sw_batch_size=4)
        >>> round(four.bytes_per_voxel((128, 128, 128)))  # four windows per network call
        1298
        >>> three = estimate_memory((128, 128, 128), 105, roi_size=(64, 64, 64), fused_update=True, ensemble_members=3)
        >>> round(three.bytes_per_voxel((128, 128, 128)))  # the earlier members' statistics
        1092
        >>> tta = estimate_memory((128, 128, 128), 105, roi_size=(64, 64, 64), fused_update=True,
        ...                       inverse_dtype=torch.float32)  # e.g. TTAInferer(transforms=[Zoom(1.2), Rotate(0.1)])
        >>> round(tta.bytes_per_voxel((128, 128, 128)))  # each window's output inverted beside its logits
        819
    """
    spatial = _check_shape(shape, "shape")
    check_accum_dtype(accum_dtype, warn=False)
    for flag, value in (("track_variance", track_variance), ("class_variance", class_variance),
                        ("window_disagreement", window_disagreement), ("multilabel", multilabel), ("stock", stock)):
        check_bool(value, flag)
    # numpy integers too (found by hostile testing: numpy.int64(3), a label count read from an array, was refused)
    num_classes = check_integer(num_classes, "num_classes")
    network_bytes_per_voxel = _check_bytes(network_bytes_per_voxel, "network_bytes_per_voxel")
    if not isinstance(input_dtype, torch.dtype) or not input_dtype.is_floating_point:
        raise TypeError(f"input_dtype must be a floating point torch.dtype, got {input_dtype!r}")
    if network_dtype is not None and not (isinstance(network_dtype, torch.dtype) and network_dtype.is_floating_point):
        raise TypeError(f"network_dtype must be None or a floating point torch.dtype, got {network_dtype!r}")
    if inverse_dtype is not None and not (isinstance(inverse_dtype, torch.dtype) and inverse_dtype.is_floating_point):
        raise TypeError(f"inverse_dtype must be None or a floating point torch.dtype, got {inverse_dtype!r}")
    if inverse_dtype is not None and stock:
        raise ValueError("inverse_dtype is the invertible transforms of test-time augmentation, which stock=True "
                         "(stock MONAI inference) does not run")
    if not (pred_dtype is None or (isinstance(pred_dtype, str) and pred_dtype == "input")
            or (isinstance(pred_dtype, torch.dtype) and pred_dtype.is_floating_point)):
        raise TypeError(f"pred_dtype must be 'input', None or a floating point torch.dtype, got {pred_dtype!r}")
    for name, value, minimum in (("sample_batch", sample_batch, 1), ("kept_samples", kept_samples, 0),
                                 ("sw_batch_size", sw_batch_size, 1), ("ensemble_members", ensemble_members, 1)):
        check_integer(value, name, minimum)
    shared_bytes_per_voxel = _check_bytes(shared_bytes_per_voxel, "shared_bytes_per_voxel")
    stochastic_bytes_per_voxel = _check_bytes(stochastic_bytes_per_voxel, "stochastic_bytes_per_voxel")
    copied = (shared_bytes_per_voxel if copied_bytes_per_voxel is None
              else _check_bytes(copied_bytes_per_voxel, "copied_bytes_per_voxel"))
    c = num_classes
    v = math.prod(spatial)
    overlaps = _check_overlap(overlap, len(spatial))
    if roi_size is not None:
        roi = _check_shape(roi_size, "roi_size")
        if len(roi) != len(spatial):
            raise ValueError(f"roi_size {roi} and shape {spatial} differ in their number of axes")
        windows = _num_windows(spatial, roi, overlaps)
        batch = int(sw_batch_size) if windows is None else min(int(sw_batch_size), windows)
        # the voxels of one network call: sw_batch_size windows stacked on the batch axis
        vw = batch * math.prod(min(r, s) for r, s in zip(roi, spatial))
    else:
        vw = v
        batch = 1
    b = _nbytes(input_dtype)
    # MONAI's stitching buffers: in the input's dtype, float32 for a half-precision input (the inferer stitches a
    # float32 copy of it, sampling._stitching_input)
    sb = max(b, 4)
    # the network's outputs in its own dtype (found by review 62: a float64 network on a float32 input was counted
    # with 4-byte logits, probabilities and sums, 41 % below the measured peak of one pass); the probabilities in
    # float32 for half-precision logits (the inferer's activation, _to_probs)
    out_dtype = network_dtype if network_dtype is not None else input_dtype
    ob, pb = _nbytes(out_dtype), _nbytes(entropy_dtype(out_dtype))
    logits = vw * c * ob
    if stock:
        window_net = int(vw * network_bytes_per_voxel) + logits  # the network's activations and its logits
        buffers = b * v * (c + 1) if roi_size is not None else 0
        parts = {"stitching buffers": buffers, "window": window_net}
        final = {"stitching buffers": b * v * c, "softmax": b * v * c}
        return _larger(parts, "stitching", final, "final")
    a = _nbytes(accum_dtype if accum_dtype is not None else auto_accum_dtype(c, out_dtype))
    e = c if multilabel else 1  # channels of a scalar map
    q = (c if (class_variance or multilabel) else 1) if track_variance else 0
    w = e if (window_disagreement and roi_size is not None) else 0
    channels = c + e + q + w
    members = int(ensemble_members)
    # one window: the running sums, the logits, and the larger of the network's activations (alive while it runs)
    # and the probabilities with, for the reference update, three temporaries (entropy, squares) and the
    # accumulation copy (the fused update's temporaries are cache-sized chunks; a flipped copy of the logits, made
    # before the probabilities, is no larger than they are)
    if fused_update is not None:
        check_bool(fused_update, "fused_update")
    dev = torch.device(device)
    fused = fused_kernels_available(dev.type) if fused_update is None else fused_update
    # derive_measures(chunk_elements="auto"): larger chunks on a GPU (found by the review of the GPU paths: the model
    # counted the CPU's 1 M-element chunks, and a CUDA case of up to 16 M class-voxels makes its temporaries whole)
    chunk_elements = CUDA_CHUNK_ELEMENTS if dev.type == "cuda" else DEFAULT_CHUNK_ELEMENTS
    temporaries = 0 if fused else 3 * pb + (a if a != pb else 0)
    sums = vw * a * (c + e + q)
    work = logits + max(vw * network_bytes_per_voxel, vw * c * (pb + temporaries))
    k = sample_batch
    inverting = 0.0
    if inverse_dtype is not None:
        # invertible transforms (tta._apply_inverted): once the network has returned, each of its k * batch output rows
        # (one window of one sample) is inverted in turn beside the k samples' logits: the row with a channel of ones
        # (C + 1 channels, output dtype), its inverse (C + 1, inverse dtype), the filled-in row (C, inverse dtype) and
        # its copy in the output dtype; the rows done so far, and their stack (the samples' output) at the end.
        # The network's activations (and a replay's stochastic tensors) are freed by then, and the probabilities are
        # made from the stack afterwards
        ib = _nbytes(inverse_dtype)
        row = vw / batch
        restore = row * c * ib + (row * c * ob if ib != ob else 0) + (k * vw - row) * c * ob
        inverting = k * logits + row * (c + 1) * (ob + ib) + max(restore, 2 * k * vw * c * ob)
    # shared passes: the kept shared activations, and a replay batch of k samples: each sample's stochastic tensors
    # (its logits among them: one sample's logits are counted above), its copy of the kept activations that the
    # stochastic rest reads, its probabilities (k - 1 beyond the one above)
    # (shared.replay_working_bytes: a window batch of several windows whose kept values the replays hand on as
    # views, copied = 0, is replayed one window at a time, its k samples holding one window's stochastic tensors)
    if shared_bytes_per_voxel or stochastic_bytes_per_voxel:
        # nothing kept (shared_bytes_per_voxel = 0: a dropout on the input) is a plain replay of the whole window
        # batch (found by hostile testing: counted one window at a time, 2.6 MB of a replay of 9.8 MB)
        rows = batch if copied == 0 and shared_bytes_per_voxel else 1
        if rows > 1 and k == 1:
            # one sample replays the whole window batch, the kept values that the stochastic rest reads copied (at
            # most all of them; found by hostile testing: they were left out, as for a replay window by window)
            rows, copied = 1, shared_bytes_per_voxel
        replay = replay_working_bytes(k, rows, vw * stochastic_bytes_per_voxel, logits, vw * c * pb,
                                      copied=vw * copied, first_copies=vw * shared_bytes_per_voxel)
        work += vw * shared_bytes_per_voxel + max(replay - logits - vw * c * pb, 0)
    if inverse_dtype is not None:
        # the inversion follows the replay, beside the kept shared activations: the larger of the two counts, not
        # their sum (found by review 69: under shared passes the estimate added them, 13 % above the measured peak
        # with 9 samples replayed 4 at a time and two transforms, 72^3 voxels, 36^3 windows, 32 classes)
        work = max(work, vw * shared_bytes_per_voxel + inverting)
    # the kept samples' probabilities (per voxel; an ensemble member's windows keep their share of them): during the
    # last sample, the earlier ones (the last one's probabilities are counted above); at the window's end, their list
    # and their concatenation
    kept = kept_samples * c * b
    kept_window = kept / members
    if kept:
        work = max(work + vw * (kept_window - c * b), 2 * vw * kept_window)
    window = int(sums + work)
    n_maps = 3 + (1 if track_variance else 0)  # PE, MI, 1 - max p, variance: new maps
    chunked = c * v > chunk_elements  # the maps are derived in chunks: EE and WD are copied out too
    if pred_dtype is None:
        pred_out = 0 if multilabel else v * (1 if c <= 256 else 2)
    elif pred_dtype == "input" or pred_dtype == input_dtype:
        pred_out = v * c * b if (roi_size is not None and sb != b) else 0  # the float32 buffer rounded to the input's
    else:
        pred_out = v * c * _nbytes(pred_dtype)
    chunk = 3 * min(c * v, chunk_elements) * (sb if roi_size is not None else a)
    # several members: the mean of their window disagreements is a new map
    wd_mean = v * e * (sb if roi_size is not None else a) if (members > 1 and window_disagreement) else 0
    if roi_size is not None:
        held = int(vw * (a * channels + kept_window))  # the previous windows' outputs, held by MONAI meanwhile
        n_buffers = 2 + (1 if q else 0) + (1 if w else 0)  # MONAI keeps one count map per stitched output
        n_buffers += 1 if kept_samples else 0
        stitch = {"stitching buffers": sb * v * channels, "count maps": sb * v * n_buffers, "window": window + held}
        if members > 1:  # the merged statistics of the earlier members (sums and window disagreement)
            stitch["earlier members"] = sb * v * channels
        n_maps += (1 + (1 if w else 0)) if chunked else 0
        final = {"stitching buffers": sb * v * channels, "maps": b * v * e * n_maps + wd_mean, "pred": pred_out,
                 "chunk temporaries": chunk}
        if kept_samples:
            kept_buffer = int(v * kept * sb / b)
            stitch["kept samples"] = kept_buffer  # their stitching buffers (this member's and the earlier ones')
            # the buffer, and the returned concatenation: made once the chunks' temporaries are freed
            final["kept samples"] = kept_buffer + max(int(v * kept) - chunk, 0)
        if windows == 1:
            # one window (it covers the case): MONAI allocates its buffers and count maps at the first window's
            # output, once the window's work is freed, and no next window runs beside its outputs; the larger of the
            # window's work and the buffers beside the window's outputs (found by review 69: they were added, 33 %
            # above the measured peak of shared passes, 72^3 voxels in one 72^3 window, 32 classes)
            during = {"window": window}
            after = {key: value for key, value in stitch.items() if key != "window"}
            after["window outputs"] = held
            if members > 1:
                during["earlier members"] = stitch["earlier members"]
            stitch = during if sum(during.values()) >= sum(after.values()) else after
        return _larger(stitch, "stitching", final, "final")
    # one pass: the window is the volume; its means (accumulation dtype) and, with window_disagreement, a zero
    # window-disagreement map are the final phase's input; EE is a new map when converted or chunked
    zero_wd = v * e * a if window_disagreement else 0
    n_maps += 1 if (chunked or a != b) else 0
    final = {"means": v * a * (c + e + q) + zero_wd, "maps": b * v * e * n_maps + wd_mean,
             "pred": pred_out if pred_out or a == b else v * c * b, "chunk temporaries": chunk}
    if kept_samples:  # the window's concatenation, and the returned one (made once the chunks' temporaries are freed)
        final["kept samples"] = int(v * kept) + max(int(v * kept) - chunk, 0)
    stitch = {"window": window}
    if members > 1:  # the merged statistics of the earlier members, in the accumulation dtype
        stitch["earlier members"] = v * a * (c + e + q) + zero_wd
        if kept_samples:
            stitch["kept samples"] = int(v * kept * (members - 1) / members)
    return _larger(stitch, "stitching", final, "final")


def _larger(first: dict[str, int], first_name: str, second: dict[str, int], second_name: str) -> MemoryEstimate:
    t1, t2 = sum(first.values()), sum(second.values())
    if t1 >= t2:
        return MemoryEstimate(int(t1), {k: int(x) for k, x in first.items()}, first_name)
    return MemoryEstimate(int(t2), {k: int(x) for k, x in second.items()}, second_name)


def available_memory(device: torch.device | str = "cpu") -> int | None:
    """Bytes that a new allocation can use now on ``device``, or None when unknown.

    CUDA: the free memory of the device (``torch.cuda.mem_get_info``) plus what PyTorch's caching allocator holds
    reserved but unused (``memory_reserved - memory_allocated``: the freed blocks of earlier work); CPU:
    ``MemAvailable`` of ``/proc/meminfo``, at most what the memory limit of the process's cgroup (a container's or a
    batch job's) still allows: beyond that limit the kernel kills the process however much memory the machine has
    left.

    Args:
        device: the device of the inference (``device`` of a sliding window: where the stitched outputs live).

    Returns:
        Bytes, or None (another platform, no CUDA).
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return None
        free, _ = torch.cuda.mem_get_info(dev)
        # PyTorch's caching allocator keeps the freed blocks of earlier work (the previous case's peak) reserved:
        # free for this process's next tensors, though not for the driver (found by hostile testing: after a 20 GiB
        # case on a 24 GiB card, the next case of the same size was told 4 GiB were available)
        cached = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
        return int(free) + max(int(cached), 0)
    if dev.type != "cpu":
        return None
    return host_memory_free()
