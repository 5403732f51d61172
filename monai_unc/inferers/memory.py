"""The memory model of the uncertainty inferers: bytes of one case's inference, and whether it fits.

Peak working memory of :class:`~monai_unc.inferers.UncertaintyInferer` (and its subclasses) on one case of ``V``
voxels with ``C`` classes, under a sliding window of ``V_w`` voxels, with the input dtype's ``b`` bytes (4 for
float32) and the accumulation dtype's ``a`` bytes (8 up to ``FLOAT64_MAX_CLASSES`` classes, 4 above). The larger
of two phases:

- **stitching**: MONAI's output buffers, ``b V (C + 1 + q + w)`` (mean probabilities, mean entropy, second moment:
  ``q = 1`` by default, ``C`` with ``class_variance``, 0 without ``track_variance``; window entropy ``w = 1`` with
  ``window_disagreement="separate"``), one ``b V`` count map per buffer, and one window's work
  ``V_w (n + C (b + a + t) + 2 a (C + 3))``: the network (``n`` bytes per window voxel besides its
  output), logits, probabilities, the running sums and the temporaries of the update (``t = 0`` for the fused update
  of :mod:`monai_unc.stats`, ``t = 3 b + [a != b] a`` for the reference torch update: entropy and squares, the copy
  in the accumulation dtype), and the previous window's means that MONAI still holds;
- **shared passes** (``share_passes=True`` with a replay batch of ``k`` samples) add to the window's work the kept
  shared activations ``V_w s`` and ``V_w (k r - C b) + k V_w s_c + (k - 1) V_w C b``: each sample's stochastic
  tensors ``r`` (its logits among them; one sample's logits are in the window's work already), its copy of the kept
  activations that the stochastic rest reads ``s_c`` (``SharedPasses.copied_bytes``; at most ``s``), its
  probabilities (bytes per window voxel, measured on one window with :class:`~monai_unc.inferers.SharedPasses`);
- **final**: the buffers again (they become the means in place), the new scalar maps (``b V`` each), ``pred``
  converted to ``pred_dtype`` (nothing for ``"input"``) or the ``argmax`` label map, and the temporaries of one
  chunk of the final measures (:data:`~monai_unc.stats.DEFAULT_CHUNK_ELEMENTS`).

With ``keep_samples=True`` (``kept_samples=S``) the samples' probabilities add ``S C b`` bytes per voxel: a
stitching buffer ``b V S C`` (and its count map) while windows are stitched, and in the final phase that buffer and the
returned concatenation ``samples`` ``(S, B, C, *spatial)``, ``2 b V S C``; one window holds ``2 b V_w S C``. This is
the only term that grows with ``S``; ``monai-unc infer --save-samples`` turns each sample into a label map once the
inferer returns (``S`` bytes per voxel on disk before compression).

Stock MONAI (``softmax(SlidingWindowInferer(x, net))``) needs ``b V (C + 1)`` for its buffer and count map, the
window's network and logits, and ``b V C`` for the softmax: about ``8 C`` bytes per voxel for float32 against about
``4 C + 28`` for the defaults here. Multi-label outputs have ``C`` channels in every map. The model is checked
against measured peak RSS in ``tests/inferers/test_memory.py`` (within 15 %) and ``benchmarks/bench_memory.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .._stats_kernels import available as fused_kernels_available
from .._utils import check_bool
from ..stats import DEFAULT_CHUNK_ELEMENTS, auto_accum_dtype, check_accum_dtype

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
    try:
        out = tuple(int(s) for s in shape)
    except TypeError as err:
        raise TypeError(f"{name} must be a sequence of positive integers, got {shape!r}") from err
    if not out or any(s < 1 for s in out) or len(out) > 3:
        raise ValueError(f"{name} must hold 1 to 3 positive spatial sizes, got {shape!r}")
    return out


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
) -> MemoryEstimate:
    """Peak working memory of one case's inference (the model of the module docstring).

    Working memory: what the call allocates beyond the input and the network's weights; the same on the CPU (RSS)
    and on a GPU (when ``sw_device`` and ``device`` are both the GPU; with ``device="cpu"`` the buffers and the final
    phase are on the CPU and only the window's work on the GPU). The number of samples enters only through
    ``kept_samples``.

    Args:
        shape: spatial shape of the case, e.g. ``(128, 128, 128)``.
        num_classes: output channels ``C`` of the network.
        roi_size: the sliding window's ``roi_size`` (``None``: one pass over the whole volume, ``SimpleInferer``).
        input_dtype: dtype of the input (MONAI stitches in it).
        accum_dtype: the inferer's ``accum_dtype`` (``None``: float64 up to 16 classes, float32 above).
        track_variance: the inferer keeps a second moment for ``variance``.
        class_variance: the second moment per class (``C`` channels) instead of one channel.
        pred_dtype: the inferer's ``pred_dtype`` (``"input"``, a float dtype, or ``None`` for ``argmax`` only).
        window_disagreement: the window disagreement is its own map (``window_disagreement="separate"``).
        multilabel: sigmoid outputs with ``C >= 2`` regions (every map has ``C`` channels).
        network_bytes_per_voxel: the network's own working memory per window voxel besides its output (its
            activations; 0 for a network too small to matter). Measure it once with stock inference on one window.
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
            ``shared_bytes_per_voxel`` (an upper bound).
        fused_update: the statistics are updated by the fused kernel (:mod:`monai_unc.stats`: no temporaries of a
            sample's size); False: the reference torch update (three temporaries of the probabilities and a copy in
            the accumulation dtype); None: whether the fused kernel of the CPU is installed (numba).

    Returns:
        A :class:`MemoryEstimate` (bytes).

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
    """
    spatial = _check_shape(shape, "shape")
    check_accum_dtype(accum_dtype, warn=False)
    for flag, value in (("track_variance", track_variance), ("class_variance", class_variance),
                        ("window_disagreement", window_disagreement), ("multilabel", multilabel), ("stock", stock)):
        check_bool(value, flag)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be an integer >= 1, got {num_classes!r}")
    if not network_bytes_per_voxel >= 0:
        raise ValueError(f"network_bytes_per_voxel must be >= 0, got {network_bytes_per_voxel!r}")
    if isinstance(sample_batch, bool) or not isinstance(sample_batch, int) or sample_batch < 1:
        raise ValueError(f"sample_batch must be an integer >= 1, got {sample_batch!r}")
    if isinstance(kept_samples, bool) or not isinstance(kept_samples, int) or kept_samples < 0:
        raise ValueError(f"kept_samples must be an integer >= 0, got {kept_samples!r}")
    copied = shared_bytes_per_voxel if copied_bytes_per_voxel is None else copied_bytes_per_voxel
    if not shared_bytes_per_voxel >= 0 or not stochastic_bytes_per_voxel >= 0 or not copied >= 0:
        raise ValueError(
            "shared_bytes_per_voxel, stochastic_bytes_per_voxel and copied_bytes_per_voxel must be >= 0, got "
            f"{shared_bytes_per_voxel!r}, {stochastic_bytes_per_voxel!r}, {copied_bytes_per_voxel!r}"
        )
    c = num_classes
    v = math.prod(spatial)
    if roi_size is not None:
        roi = _check_shape(roi_size, "roi_size")
        if len(roi) != len(spatial):
            raise ValueError(f"roi_size {roi} and shape {spatial} differ in their number of axes")
        vw = math.prod(min(r, s) for r, s in zip(roi, spatial))
    else:
        vw = v
    b = _nbytes(input_dtype)
    window_net = int(vw * network_bytes_per_voxel) + vw * c * b  # the network's activations and its logits
    if stock:
        buffers = b * v * (c + 1) if roi_size is not None else 0
        parts = {"stitching buffers": buffers, "window": window_net}
        final = {"stitching buffers": b * v * c if roi_size is not None else b * v * c, "softmax": b * v * c}
        return _larger(parts, "stitching", final, "final")
    a = _nbytes(accum_dtype if accum_dtype is not None else auto_accum_dtype(c))
    e = c if multilabel else 1  # channels of a scalar map
    q = (c if (class_variance or multilabel) else 1) if track_variance else 0
    w = e if (window_disagreement and roi_size is not None) else 0
    channels = c + e + q + w
    # one window: probabilities, the running sums and, with the reference update, three temporaries (entropy,
    # squares) and the accumulation copy (the fused update's temporaries are cache-sized chunks)
    if fused_update is not None:
        check_bool(fused_update, "fused_update")
    fused = fused_kernels_available("cpu") if fused_update is None else fused_update
    temporaries = 0 if fused else 3 * b + (a if a != b else 0)
    window = window_net + vw * c * (b + a + temporaries) + vw * a * (e + q)
    # shared passes: the kept shared activations, and a replay batch of k samples: each sample's stochastic tensors
    # (its logits among them: one sample's logits are counted above), its copy of the kept activations that the
    # stochastic rest reads, its probabilities (k - 1 beyond the one above)
    k = sample_batch
    shared = 0
    if shared_bytes_per_voxel or stochastic_bytes_per_voxel:
        shared = int(vw * shared_bytes_per_voxel + k * vw * copied
                     + max(k * vw * stochastic_bytes_per_voxel - vw * c * b, 0)) + (k - 1) * vw * c * b
    window += shared
    kept = kept_samples * c * b  # bytes per voxel of the kept samples' probabilities
    window += 2 * vw * kept  # one window's kept probabilities and their concatenation
    n_maps = 3 + (1 if track_variance else 0) + (1 if w else 0)  # PE, MI, 1 - max p, variance, WD (EE is a buffer)
    if pred_dtype is None:
        pred_out = 0 if multilabel else v * (1 if c <= 256 else 2)
    elif pred_dtype == "input" or pred_dtype == input_dtype:
        pred_out = 0
    else:
        pred_out = v * c * _nbytes(pred_dtype)
    chunk = 3 * min(c * v, DEFAULT_CHUNK_ELEMENTS) * (b if roi_size is not None else a)
    if roi_size is not None:
        held = vw * a * channels  # the previous window's means, held by MONAI while the next one runs
        n_buffers = 2 + (1 if q else 0) + (1 if w else 0)  # MONAI keeps one count map per stitched output
        n_buffers += 1 if kept_samples else 0
        stitch = {"stitching buffers": b * v * channels, "count maps": b * v * n_buffers, "window": window + held}
        final = {"stitching buffers": b * v * channels, "maps": b * v * e * n_maps, "pred": pred_out,
                 "chunk temporaries": chunk}
        if kept_samples:
            stitch["kept samples"] = v * kept  # their stitching buffer
            final["kept samples"] = 2 * v * kept  # the buffer and the returned concatenation
        return _larger(stitch, "stitching", final, "final")
    # one pass: the window is the volume; its means (accumulation dtype) are the final phase's input
    final = {"window": window_net + v * a * channels, "maps": b * v * e * n_maps,
             "pred": pred_out if pred_out or a == b else v * c * b, "chunk temporaries": chunk}
    if kept_samples:
        final["kept samples"] = 2 * v * kept  # the window's concatenation and the returned one
    stitch = {"window": window}
    return _larger(stitch, "stitching", final, "final")


def _larger(first: dict[str, int], first_name: str, second: dict[str, int], second_name: str) -> MemoryEstimate:
    t1, t2 = sum(first.values()), sum(second.values())
    if t1 >= t2:
        return MemoryEstimate(int(t1), {k: int(x) for k, x in first.items()}, first_name)
    return MemoryEstimate(int(t2), {k: int(x) for k, x in second.items()}, second_name)


def available_memory(device: torch.device | str = "cpu") -> int | None:
    """Bytes that a new allocation can use now on ``device``, or None when unknown.

    CUDA: the free memory of the device (``torch.cuda.mem_get_info``); CPU: ``MemAvailable`` of ``/proc/meminfo``.

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
        return int(free)
    if dev.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
