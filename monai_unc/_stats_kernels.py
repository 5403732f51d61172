"""The fused update of :class:`~monai_unc.stats.SampleStats`: every running sum of a sample in one pass over it.

The reference update (``SampleStats`` with :data:`FUSED_KERNELS` off) makes about ten torch passes over each sample,
with temporaries of its size: the copy to the accumulation dtype, the entropy map (clamp, log, product, sum), the
squares, one sum per statistic. The fused update reads each sample once and adds it to ``sum_p``, ``sum_h`` and
``sum_p2`` (per class, or ``sum_c p_c^2`` in one channel) where they lie; ``k`` samples of one batch
(:meth:`~monai_unc.stats.SampleStats.update_many`) are added voxel block by voxel block, so the sums are read and
written once per batch instead of once per sample.

- CPU (numba, the optional ``fast`` extra): the voxels are taken in cache-sized chunks along the last axis; per chunk
  the entropy of every sample is computed by the caller's torch formula (the reference's own values: a vectorised
  log is several times faster than a scalar one per class and voxel) and one compiled loop adds the chunk of every
  sample to the sums while it is in cache. Chunks are shared among ``torch.get_num_threads()`` threads (each thread
  owns its voxels: no two threads write one sum), those of a pool kept between calls
  (:func:`monai_unc._utils.thread_map`).
- CUDA (Triton): one launch per update; each program holds a block of voxels of the sums in registers, adds the
  ``k`` samples (entropy evaluated in float32, float64 for float64 samples, with the reference's formula
  ``-sum_c p_c log max(p_c, tiny)``, ``p`` clamped into [0, 1]) and writes the block back.

Per voxel the samples are added in the reference's order (sample by sample), so the float sums equal the reference's
up to the rounding of each addition: unit weights give the same ``sum_p`` bit for bit (``s + p`` is one correctly
rounded addition either way); weighted samples, float32 sums and the one-channel square sum differ by at most one
rounding per addition, well inside :func:`~monai_unc.stats.accumulation_error_bound`. The entropy equals the
reference's on the CPU (the same torch formula; float16 / bfloat16 samples included) and is within a few float32
roundings of it on CUDA (:meth:`~monai_unc.stats.SampleStats.sample_entropy` evaluates an entropy exactly as the
update does, for comparisons that must hold bit for bit).

:func:`value_flags` is the read-only pass of the checks (non-finite values, range, sums over classes): the caller
raises with the reference checks' own messages when it flags a sample.

Without numba (CPU) or Triton (CUDA), for half-precision sums or float64 samples with float32 sums, :func:`backend`
is None and ``SampleStats`` keeps the reference path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ._jit import cached_kernel, njit, run_triton, triton_failure
from ._lazy import lazy_optional
from ._utils import thread_map

__all__ = ["FUSED_KERNELS", "FUSED_OUTPUTS", "available", "backend", "value_flags", "accumulate", "accumulate_outputs",
           "takes_outputs", "OUTPUT_ACTIVATIONS", "CPU_CHUNK_ELEMENTS"]

#: switch of the fused update (False: the reference torch path everywhere; the benchmarks and tests compare both)
FUSED_KERNELS = True
#: switch of the fused update of network outputs (:func:`accumulate_outputs`; False: the inferers apply the activation
#: and check the outputs in torch, then call the fused update of probabilities; the GPU check times both)
FUSED_OUTPUTS = True
#: sample elements (samples x classes x voxels) per chunk of the CPU path: the chunk, its entropy temporaries and
#: its sums stay in the cores' caches
CPU_CHUNK_ELEMENTS = 1 << 17
#: the fewest voxels of a chunk (many samples of many classes: one chunk still amortises its calls)
CPU_MIN_CHUNK_VOXELS = 512
#: voxels per thread below which the CPU update runs on one thread
CPU_MIN_VOXELS_PER_THREAD = 1 << 16
#: voxels per program of the Triton kernels
CUDA_BLOCK = 512

_HALF = (torch.float16, torch.bfloat16)
_FUSED_SUMS = (torch.float32, torch.float64)
#: the activations :func:`accumulate_outputs` evaluates in the kernel, by the code the kernel takes: a softmax over
#: the channels, a sigmoid per channel (multi-label), one channel ``z`` as the two classes ``(sigmoid(-z), sigmoid(z))``
OUTPUT_ACTIVATIONS = {"softmax": 1, "sigmoid": 2, "binary_sigmoid": 3}


def _build_cpu() -> Any:
    # The voxel loops run over slices with ``range`` indices: a signed ``v - p_off`` index could be negative as far as
    # the compiler knows, and numba's wraparound test then keeps LLVM from vectorising the loop (2.3x slower)
    @njit(nogil=True, boundscheck=False)
    def add_chunk(p, p_off, h, w, n_batch, sp, sh, sp2, sq_mode, v0, v1, scratch):  # pragma: no cover - compiled
        # p: (N, C, *) samples (sample k, batch item b at row k * n_batch + b), voxel v at p[:, :, v - p_off];
        # h: (N, Ch, v1 - v0) their entropies; sums (B, C | Ch | C or 1, V); voxels [v0, v1). Voxel loops innermost
        # (vectorised); the samples in order, so every voxel gets them in the reference's order.
        n_rows, n_cls = p.shape[0], p.shape[1]
        n_h = h.shape[1]
        m = v1 - v0
        a = v0 - p_off
        sc = scratch[:m]
        for n in range(n_rows):
            k = n // n_batch
            b = n - k * n_batch
            wk = w[k]
            for c in range(n_cls):
                pr, sr = p[n, c, a : a + m], sp[b, c, v0:v1]
                for i in range(m):
                    sr[i] += wk * np.float64(pr[i])
            for c in range(n_h):
                hr, sr = h[n, c, :m], sh[b, c, v0:v1]
                for i in range(m):
                    sr[i] += wk * np.float64(hr[i])
            if sq_mode == 1:
                for c in range(n_cls):
                    pr, sr = p[n, c, a : a + m], sp2[b, c, v0:v1]
                    for i in range(m):
                        x = np.float64(pr[i])
                        sr[i] += wk * (x * x)
            elif sq_mode == 2:
                for i in range(m):
                    sc[i] = 0.0
                for c in range(n_cls):
                    pr = p[n, c, a : a + m]
                    for i in range(m):
                        x = np.float64(pr[i])
                        sc[i] += x * x
                sr = sp2[b, 0, v0:v1]
                for i in range(m):
                    sr[i] += wk * sc[i]

    @njit(nogil=True, boundscheck=False)
    def flags(p, p_off, v0, v1, out, scratch):  # pragma: no cover - compiled
        # p: (N, C, *), voxels [v0, v1) at p[:, :, v - p_off]; out: [non-finite values (added), min, max,
        # max |sum_c p - 1|] (min / max over finite values)
        n_rows, n_cls = p.shape[0], p.shape[1]
        m = v1 - v0
        a = v0 - p_off
        sc = scratch[:m]
        bad = 0
        lo = out[1]
        hi = out[2]
        dev = out[3]
        for n in range(n_rows):
            for i in range(m):
                sc[i] = 0.0
            for c in range(n_cls):
                pr = p[n, c, a : a + m]
                for i in range(m):
                    x = np.float64(pr[i])
                    finite = x - x == 0.0  # NaN - NaN and inf - inf are NaN
                    bad += 0 if finite else 1
                    lo = x if finite and x < lo else lo
                    hi = x if finite and x > hi else hi
                    sc[i] += x
            for i in range(m):
                d = abs(sc[i] - 1.0)
                dev = d if d > dev else dev
        out[0] += bad
        out[1] = lo
        out[2] = hi
        out[3] = dev

    # processes that compile at once never save into one cache index together (monai_unc._jit)
    return cached_kernel(add_chunk), cached_kernel(flags)


#: the compiled CPU kernels ``(add_chunk, flags)``, or None without numba (built on first use)
_cpu_kernels = lazy_optional(_build_cpu)


def _build_cuda() -> Any:
    import triton  # noqa: F401  (the ImportError of a torch without Triton means "not installed")

    from . import _stats_triton

    return _stats_triton


#: the Triton module, or None without Triton (imported on the first CUDA update)
_cuda_kernels = lazy_optional(_build_cuda)


def available(device_type: str = "cpu") -> bool:
    """Whether the fused update runs on devices of ``device_type`` (numba for ``"cpu"``, Triton for ``"cuda"``).

    Args:
        device_type: ``"cpu"`` or ``"cuda"`` (any other: False).

    Returns:
        Whether :data:`FUSED_KERNELS` is on and the kernel's optional dependency imports.

    Example:
        >>> available("mps")
        False
    """
    if not FUSED_KERNELS:
        return False
    if device_type == "cpu":
        return _cpu_kernels() is not None
    if device_type == "cuda":
        return _cuda_kernels() is not None and triton_failure() is None
    return False


def backend(p: torch.Tensor, accum_dtype: torch.dtype) -> str | None:
    """The fused kernel for samples like ``p`` summed in ``accum_dtype``, or None (the reference torch path).

    Args:
        p: a sample (its device and dtype decide).
        accum_dtype: the dtype of the running sums.

    Returns:
        ``"numba"`` on the CPU with numba installed, ``"triton"`` on CUDA with Triton installed, None otherwise
        (and for half-precision sums, float64 samples with float32 sums, integer samples, or :data:`FUSED_KERNELS`
        off).

    Example:
        >>> backend(torch.zeros(1, 2, 3), torch.float16) is None  # half-precision sums: the reference path
        True
    """
    if not FUSED_KERNELS or not p.is_floating_point() or accum_dtype not in _FUSED_SUMS:
        return None
    if p.dtype == torch.float64 and accum_dtype != torch.float64:
        return None  # the reference rounds such samples to float32 before squaring them
    if p.device.type == "cpu":
        return "numba" if _cpu_kernels() is not None else None
    if p.device.type == "cuda":
        return "triton" if _cuda_kernels() is not None and triton_failure() is None else None
    return None


def _kind(p: torch.Tensor) -> str:
    """Which kernel runs on ``p``: ``"triton"`` for CUDA tensors, ``"numba"`` otherwise (a test points the Triton
    kernel at CPU tensors under ``TRITON_INTERPRET=1`` by replacing this function)."""
    return "triton" if p.device.type == "cuda" else "numba"


def takes_outputs(z: torch.Tensor, accum_dtype: torch.dtype) -> bool:
    """Whether :func:`accumulate_outputs` adds samples given as network outputs like ``z`` (the Triton kernel).

    On the CPU the network's outputs go through the torch activation and :func:`accumulate` (numba's entropy is torch's
    formula chunk by chunk, which needs the probabilities), so this is True only where the Triton kernel runs.

    Args:
        z: network outputs ``(B, C, *spatial)`` (their device and dtype decide).
        accum_dtype: the dtype of the running sums.

    Returns:
        True on CUDA with Triton, for float32 or float64 sums (float64 sums for float64 outputs), while
        :data:`FUSED_KERNELS` and :data:`FUSED_OUTPUTS` are on.

    Example:
        >>> takes_outputs(torch.zeros(1, 2, 3), torch.float64)  # a CPU tensor: the activation runs in torch
        False
    """
    if not (FUSED_KERNELS and FUSED_OUTPUTS) or not z.is_floating_point() or z.ndim < 3 or z.numel() == 0:
        return False
    if _kind(z) != "triton":
        return False
    if accum_dtype not in _FUSED_SUMS or (z.dtype == torch.float64 and accum_dtype != torch.float64):
        return False
    return _cuda_kernels() is not None and triton_failure() is None


def _chunk_voxels(rows: int, n_cls: int) -> int:
    return max(CPU_MIN_CHUNK_VOXELS, CPU_CHUNK_ELEMENTS // max(rows * n_cls, 1))


def value_flags(p3: torch.Tensor, classes: bool) -> tuple[int, float, float, float]:
    """The quantities the probability checks test, from one read-only pass over ``p3``.

    Args:
        p3: samples ``(N, C, V)``, contiguous, on the CPU or a CUDA device (a fused :func:`backend` for its dtype).
        classes: also the largest deviation of the sums over ``C`` from 1 (softmax probabilities).

    Returns:
        ``(non-finite values, min, max, max |sum_c p - 1|)``: min and max over the finite values, clipped to
        ``min <= 0 <= max`` on CUDA (only the comparisons with the range's bounds are meant); the deviation is 0 when
        ``classes`` is False and is not meaningful where values are not finite. One device synchronisation on CUDA.

    Raises:
        KernelUnavailable: the Triton kernel cannot be built on this machine (:func:`monai_unc._jit.run_triton`).
    """
    if _kind(p3) == "triton":
        return run_triton(_cuda_kernels().value_flags, p3, classes)
    _, flags = _cpu_kernels()
    n_rows, n_cls, n_vox = p3.shape
    out = np.array([0.0, math.inf, -math.inf, 0.0])
    step = _chunk_voxels(n_rows, n_cls)
    scratch = np.empty(min(step, n_vox))  # cache-sized: the sums over classes of one chunk
    whole = None if p3.dtype in _HALF else p3.numpy()
    for v0 in range(0, n_vox, step):
        v1 = min(v0 + step, n_vox)
        if whole is None:  # converted chunk by chunk (numba reads float32 / float64)
            flags(p3[:, :, v0:v1].float().numpy(), v0, v0, v1, out, scratch)
        else:
            flags(whole, 0, v0, v1, out, scratch)
    dev = float(out[3]) if classes else 0.0
    return int(out[0]), float(out[1]), float(out[2]), dev


def _check_sums(n_rows: int, n_cls: int, n_vox: int, weights: Sequence[float], sum_p: torch.Tensor,
                sum_h: torch.Tensor, sum_p2: torch.Tensor | None, per_class_squares: bool, multilabel: bool) -> None:
    """``ValueError`` unless the sums are contiguous ``(B, C or 1, V)`` tensors (``B`` of ``sum_p``) and the rows hold
    one sample per weight: the kernels write the sums without bounds checks."""
    n_batch = sum_p.shape[0]
    if any(t is not None and t.dtype != sum_p.dtype for t in (sum_h, sum_p2)):
        raise ValueError("the sums must share one dtype")
    expected = {
        "sum_p": (sum_p, n_cls),
        "sum_h": (sum_h, n_cls if multilabel else 1),
        "sum_p2": (sum_p2, n_cls if per_class_squares else 1),
    }
    if n_batch < 1 or n_rows % n_batch or len(weights) != n_rows // n_batch:
        raise ValueError(f"{n_rows} sample rows do not hold {len(weights)} samples of {n_batch} batch items")
    for name, (t, channels) in expected.items():
        if t is not None and (tuple(t.shape) != (n_batch, channels, n_vox) or not t.is_contiguous()):
            raise ValueError(
                f"{name} must be a contiguous ({n_batch}, {channels}, {n_vox}) tensor, got {tuple(t.shape)}"
            )


def accumulate(
    p3: torch.Tensor,
    weights: Sequence[float],
    sum_p: torch.Tensor,
    sum_h: torch.Tensor,
    sum_p2: torch.Tensor | None,
    per_class_squares: bool,
    multilabel: bool,
    entropy: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    """Add ``k`` samples to the running sums in place, in one pass over the samples.

    Args:
        p3: the samples ``(k * B, C, V)`` (sample ``j`` in rows ``j * B`` to ``(j + 1) * B``), contiguous, on the
            sums' device.
        weights: the ``k`` weights.
        sum_p: ``(B, C, V)`` the running ``sum_s w_s p_s``, contiguous.
        sum_h: ``(B, 1, V)`` (``(B, C, V)`` for ``multilabel``) the running ``sum_s w_s H(p_s)``, contiguous.
        sum_p2: ``(B, C, V)`` (``per_class_squares``) or ``(B, 1, V)`` the running second moment, or None.
        per_class_squares: ``sum_p2`` holds ``p_c^2`` per class (else ``sum_c p_c^2``).
        multilabel: per-channel binary entropies.
        entropy: the entropy map of a ``(rows, C, T)`` chunk in the samples' precision (the reference's formula),
            used by the CPU path.

    Raises:
        ValueError: the samples or the sums are not contiguous tensors of the shapes above, the sums' dtypes
            differ, or the weights are not one per sample (the kernels write the sums without bounds checks).
        KernelUnavailable: the Triton kernel cannot be built on this machine (:func:`monai_unc._jit.run_triton`);
            the sums are unchanged, and the caller adds the samples with the torch path.
    """
    if p3.ndim != 3 or not p3.is_contiguous():  # the kernels index the samples as contiguous rows
        raise ValueError(f"p3 must be a contiguous (k * B, C, V) tensor, got shape {tuple(p3.shape)}, strides "
                         f"{p3.stride()}")
    n_rows, n_cls, n_vox = p3.shape
    n_batch = sum_p.shape[0]
    _check_sums(n_rows, n_cls, n_vox, weights, sum_p, sum_h, sum_p2, per_class_squares, multilabel)
    sq_mode = 0 if sum_p2 is None else (1 if per_class_squares else 2)
    if _kind(p3) == "triton":
        run_triton(_cuda_kernels().accumulate, p3, weights, sum_p, sum_h, sum_p2, sq_mode, multilabel)
        return
    add_chunk, _ = _cpu_kernels()
    w = np.asarray(weights, dtype=np.float64)
    sp, sh = sum_p.numpy(), sum_h.numpy()
    sp2 = sum_p2.numpy() if sum_p2 is not None else np.zeros((1, 1, 1), dtype=sp.dtype)
    half = p3.dtype in _HALF
    whole = None if half else p3.numpy()
    step = _chunk_voxels(n_rows, n_cls)
    starts = list(range(0, n_vox, step))

    def run(v0: int, scratch: np.ndarray) -> None:
        v1 = min(v0 + step, n_vox)
        chunk = p3[:, :, v0:v1]
        h = entropy(chunk)
        if half:  # numba reads float32: the conversion is exact, the entropy is the half-precision one
            arr, off, h = chunk.float().numpy(), v0, h.float()
        else:
            arr, off = whole, 0
        add_chunk(arr, off, h.numpy(), w, n_batch, sp, sh, sp2, sq_mode, v0, v1, scratch)

    n_threads = max(1, min(torch.get_num_threads(), n_vox // CPU_MIN_VOXELS_PER_THREAD, len(starts)))

    def block(t: int) -> None:
        scratch = np.empty(step)
        for v0 in starts[t::n_threads]:
            run(v0, scratch)

    thread_map(block, range(n_threads), n_threads)  # one thread: on the caller's; else a pool shared by the calls


def accumulate_outputs(
    z3: torch.Tensor,
    weights: Sequence[float],
    sum_p: torch.Tensor,
    sum_h: torch.Tensor,
    sum_p2: torch.Tensor | None,
    per_class_squares: bool,
    activation: str,
    nonfinite: torch.Tensor,
) -> None:
    """:func:`accumulate` of ``k`` samples given as network outputs: the kernel evaluates their probabilities.

    The per-sample activation, the check of the outputs' finiteness and the update of every sum in one launch (on a
    GPU with a small network, each launch and its Python weigh against a pass of a few milliseconds). The
    probabilities are the activation of :data:`OUTPUT_ACTIVATIONS` evaluated in float32 (float64 for float64 outputs;
    float16 and bfloat16 outputs read as float32, as torch's activation of their float32 copy), within a few
    roundings of torch's; the rest is :func:`accumulate`'s.

    Args:
        z3: the outputs ``(k * B, C_in, V)`` (sample ``j`` in rows ``j * B`` to ``(j + 1) * B``), contiguous, on the
            sums' device; ``C_in = 1`` for ``"binary_sigmoid"`` (two classes), else the classes ``C``.
        weights: the ``k`` weights.
        sum_p: ``(B, C, V)`` the running ``sum_s w_s p_s``, contiguous.
        sum_h: ``(B, 1, V)`` (``(B, C, V)`` for ``"sigmoid"``, multi-label) the running ``sum_s w_s H(p_s)``.
        sum_p2: ``(B, C, V)`` (``per_class_squares``) or ``(B, 1, V)`` the running second moment, or None.
        per_class_squares: ``sum_p2`` holds ``p_c^2`` per class (else ``sum_c p_c^2``).
        activation: a key of :data:`OUTPUT_ACTIVATIONS`.
        nonfinite: one int32 on the device, set to 1 where an output is NaN or infinite (never reset here).

    Raises:
        ValueError: the shapes, strides, dtypes or ``activation`` do not fit (the kernel reads the outputs as
            contiguous rows and writes the sums without bounds checks; float64 outputs need float64 sums), or ``z3``
            is not a tensor the Triton kernel takes (:func:`takes_outputs`).
        KernelUnavailable: the Triton kernel cannot be built on this machine; the sums are unchanged.
    """
    if activation not in OUTPUT_ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(OUTPUT_ACTIVATIONS)}, got {activation!r}")
    if _kind(z3) != "triton":
        raise ValueError("accumulate_outputs runs the Triton kernel only: evaluate the activation in torch and call "
                         "accumulate on the CPU")
    if z3.ndim != 3 or not z3.is_contiguous() or not z3.is_floating_point():
        raise ValueError(f"z3 must be a contiguous floating-point (k * B, C_in, V) tensor, got shape "
                         f"{tuple(z3.shape)}, strides {z3.stride()}, dtype {z3.dtype}")
    if sum_p.dtype not in _FUSED_SUMS or (z3.dtype == torch.float64 and sum_p.dtype != torch.float64):
        raise ValueError(f"the sums must be float32 or float64 (float64 for float64 outputs), got {sum_p.dtype} "
                         f"sums for {z3.dtype} outputs")
    n_rows, c_in, n_vox = z3.shape
    multilabel = activation == "sigmoid"
    n_cls = 2 if activation == "binary_sigmoid" else c_in
    if activation == "binary_sigmoid" and c_in != 1:
        raise ValueError(f"activation 'binary_sigmoid' reads one output channel, got {c_in}")
    if nonfinite.dtype != torch.int32 or nonfinite.numel() < 1 or nonfinite.device != z3.device:
        raise ValueError("nonfinite must be an int32 tensor on the outputs' device")
    _check_sums(n_rows, n_cls, n_vox, weights, sum_p, sum_h, sum_p2, per_class_squares, multilabel)
    sq_mode = 0 if sum_p2 is None else (1 if per_class_squares else 2)
    run_triton(_cuda_kernels().accumulate_outputs, z3, weights, sum_p, sum_h, sum_p2, sq_mode, multilabel,
               OUTPUT_ACTIVATIONS[activation], nonfinite)
