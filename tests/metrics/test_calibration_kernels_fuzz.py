"""Fuzzing the fused histogram kernels against the reference torch path of ConfidenceHistogram.update (hostile review).

The oracle is the reference path (``histogram.FUSED_KERNELS = False``). Counts must be equal (int64, exact), the
float sums within the bounds the kernel modules state (``_cpu_kernel``: ``n * 2^-53`` relative for the tables, the
unweighted NLL and Brier sums within ``n * 2^-52`` absolute plus ``n * 2^-52`` relative of the reference's), errors
the same messages. The inputs go where the kernels are fragile: block and chunk remainders, uneven thread splits,
packed counts unpacked many times, the non-unrolled class loop (9, 17 classes), values on bin edges and at the
tolerance, bad values and labels in the first, a middle or the last block, weights, masks, the entropy row, few fine
bins. The Triton kernel's checks under ``TRITON_INTERPRET=1`` (one fine bin included) run in one subprocess, in
``test_calibration_triton.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monai_unc.metrics.calibration import ConfidenceHistogram, _cpu_kernel
from monai_unc.metrics.calibration import histogram as hist_module
from tests.metrics.test_calibration_kernels import assert_equal_histograms

pytestmark = pytest.mark.skipif(not _cpu_kernel.available(), reason="numba is not installed (the 'fast' extra)")

EPS = 2.0**-53


@contextmanager
def fused_off() -> Iterator[None]:
    """The reference torch path inside the block."""
    old = hist_module.FUSED_KERNELS
    hist_module.FUSED_KERNELS = False
    try:
        yield
    finally:
        hist_module.FUSED_KERNELS = old


def outcome(fused: bool, num_classes: int, n_fine: int, uncertainty: bool, *args: Any, **kwargs: Any) -> Any:
    """The histogram of one update, or the ``(type, message)`` of its error.

    ``RuntimeError`` included: NaN with ``validate=False`` reaches the reference path's scatter (the fused update
    leaves such values to it), which refuses the NaN's bin index; both paths must fail alike.
    """
    try:
        if fused:
            return ConfidenceHistogram(num_classes, n_fine_bins=n_fine, uncertainty=uncertainty).update(*args, **kwargs)
        with fused_off():
            return ConfidenceHistogram(num_classes, n_fine_bins=n_fine, uncertainty=uncertainty).update(*args, **kwargs)
    except (ValueError, TypeError, RuntimeError) as err:
        return type(err), str(err)


def assert_same(fused: Any, ref: Any, n_voxels: int) -> None:
    """Equal counts and errors; float sums within the stated bounds (:func:`assert_equal_histograms`)."""
    if isinstance(ref, tuple) or isinstance(fused, tuple):
        assert fused == ref
        return
    assert_equal_histograms(fused, ref, n_voxels)


#: values on and next to fine-bin edges (for ``F = 15360``), at 0 and 1 and at the top-label row's threshold
def edge_values(n_fine: int) -> list[float]:
    """Values on and next to bin edges of ``n_fine`` bins, and 0, 1 and the largest float32 below 1."""
    below_one = float(np.nextafter(np.float32(1.0), np.float32(0.0)))
    ks = [0, 1, 2, n_fine // 2 - 1, n_fine // 2, n_fine // 2 + 1, n_fine // 2 + 2, n_fine - 2, n_fine - 1, n_fine]
    vals = [k / n_fine for k in ks if 0 <= k <= n_fine]
    return vals + [float(np.nextafter(v, 2.0)) for v in vals if v < 1] + [0.0, 1.0, below_one, 0.5]


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    """One update's inputs and the kernel's knobs."""
    num_classes = draw(st.sampled_from([2, 3, 8, 9, 17]))
    packed = draw(st.sampled_from([(1 << 31) - 1, 700, 1]))
    # a limit of one voxel unpacks the tables after every voxel (a pass over the whole tables each: about 20 s for
    # 5000 voxels of 15360 fine bins): at most 1025 voxels a case then (still two uneven thread shares, of 1-voxel
    # chunks, with 300 voxels a thread)
    n = draw(st.sampled_from([1, 2, 511, 513, 1023, 1025] + ([2049, 2500] if packed > 1 else [])))
    batch = draw(st.sampled_from([1, 2]))
    n_fine = draw(st.sampled_from([1, 2, 15, 15360]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, num_classes, n)) * draw(st.sampled_from([0.5, 4.0, 40.0]))
    p = torch.softmax(torch.from_numpy(logits), 1)
    k = rng.integers(0, n, size=min(n, 24))
    v = torch.from_numpy(rng.choice(edge_values(n_fine), size=len(k)))
    p[:, :, k] = 0.0
    p[:, 0, k] = v
    p[:, 1, k] = 1.0 - v
    y = torch.from_numpy(rng.integers(0, num_classes, size=(batch, n)))
    kwargs: dict[str, Any] = {"validate": draw(st.booleans())}
    mode = draw(st.sampled_from(["plain", "tolerance", "bad_value", "bad_label", "weights", "mask"]))
    where = draw(st.sampled_from([0, n // 2, n - 1]))  # the first, a middle or the last block
    if mode == "tolerance":  # within the tolerance: values below 0 and above 1, sums off 1 by up to 1e-3
        p[:, :, where] = 0.0
        p[:, 0, where] = draw(st.sampled_from([-1e-3, -5e-4, 0.0]))
        p[:, 1, where] = 1.0 - p[:, 0, where] + draw(st.sampled_from([0.0, 9.9e-4, -9.9e-4]))
    elif mode == "bad_value":
        p[-1, num_classes - 1, where] = draw(st.sampled_from([math.nan, math.inf, -math.inf, 1.0011, -0.0011, 0.5]))
    elif mode == "bad_label":
        y[-1, where] = draw(st.sampled_from([num_classes, -1]))
    elif mode == "weights":
        kwargs["weights"] = torch.from_numpy(rng.choice([0.0, 1.0, 3.5, 1e-300, 1e200], size=(batch, n)))
    elif mode == "mask":
        kwargs["mask"] = torch.from_numpy(rng.random((batch, n)) > 0.3)
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    return {
        "num_classes": num_classes,
        "n_fine": n_fine,
        "uncertainty": draw(st.booleans()),
        "probs": p.to(dtype),
        "target": y,
        "kwargs": kwargs,
        "threads": draw(st.sampled_from([1, 2])),
        "min_voxels": draw(st.sampled_from([1 << 18, 300])),
        "packed": packed,
    }


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_fused_update_equals_the_reference_on_fuzzed_inputs(case: dict[str, Any]) -> None:
    """Random shapes, classes, edge values, bad values and labels, weights, masks, threads and packed-count limits:
    the fused CPU update gives the reference's counts and errors, its sums within the stated bounds."""
    threads = torch.get_num_threads()
    old = _cpu_kernel.MIN_VOXELS_PER_THREAD, _cpu_kernel.PACKED_VOXELS
    try:
        torch.set_num_threads(case["threads"])
        _cpu_kernel.MIN_VOXELS_PER_THREAD, _cpu_kernel.PACKED_VOXELS = case["min_voxels"], case["packed"]
        args = (case["num_classes"], case["n_fine"], case["uncertainty"], case["probs"], case["target"])
        fused = outcome(True, *args, **case["kwargs"])
        ref = outcome(False, *args, **case["kwargs"])
    finally:
        torch.set_num_threads(threads)
        _cpu_kernel.MIN_VOXELS_PER_THREAD, _cpu_kernel.PACKED_VOXELS = old
    assert_same(fused, ref, case["target"].numel())


@pytest.mark.parametrize("num_classes", [3, 9])
def test_bad_values_in_the_first_middle_and_last_block(num_classes: int) -> None:
    """NaN, inf and values beyond the tolerance in the first, a middle and the last block (of 1024 / 512 voxels, and
    of the last thread's share): the reference's error with ``validate``, its clipped tables without."""
    g = torch.Generator().manual_seed(num_classes)
    n = 3000
    probs = torch.softmax(torch.randn(1, num_classes, n, generator=g), 1)
    target = torch.randint(0, num_classes, (1, n), generator=g)
    for pos in (0, 1500, n - 1):
        for bad in (math.nan, math.inf, -math.inf, 1.0011, -0.0011):
            q = probs.clone()
            q[0, num_classes - 1, pos] = bad
            for validate in (True, False):
                fused = outcome(True, num_classes, 15360, True, q, target, validate=validate)
                ref = outcome(False, num_classes, 15360, True, q, target, validate=validate)
                assert_same(fused, ref, n)


@pytest.mark.parametrize("num_classes", [3, 9])
def test_inputs_of_other_layouts_and_dtypes(num_classes: int) -> None:
    """-0.0 and subnormals, flipped (negative-stride) numpy input, channels-last tensors, float16 / bfloat16 (the
    reference path), labels of other integer and float dtypes, zero and huge weights: as the reference."""
    g = torch.Generator().manual_seed(10 + num_classes)
    n = 3000
    probs = torch.softmax(torch.randn(1, num_classes, n, generator=g), 1)
    target = torch.randint(0, num_classes, (1, n), generator=g)
    q = probs.clone()
    q[0, 0, :5] = -0.0
    q[0, 1, 5:10] = 1e-40  # float32 subnormals
    inputs: list[tuple[Any, Any, dict[str, Any]]] = [
        (q, target, {}),
        (probs.half(), target, {}),
        (probs.bfloat16(), target, {}),
        (probs.numpy()[:, :, ::-1], target.numpy()[:, ::-1], {}),
        (probs.view(1, num_classes, 50, 60).contiguous(memory_format=torch.channels_last), target.view(1, 50, 60), {}),
        (probs, target > 0, {}),
        (probs, target.to(torch.int32), {}),
        (probs, target.to(torch.uint8), {}),
        (probs, target.to(torch.float64), {}),
        (probs, torch.zeros(1, n, dtype=torch.float64).add_(0.5), {}),  # non-integral labels
        (probs, target, {"weights": torch.zeros(1, n)}),
        (probs, target, {"weights": torch.full((1, n), 1e300, dtype=torch.float64)}),
        (probs, target, {"weights": torch.tensor([[math.nan] + [1.0] * (n - 1)])}),
    ]
    for p, y, kw in inputs:
        assert_same(outcome(True, num_classes, 15360, True, p, y, **kw), outcome(False, num_classes, 15360, True, p, y,
                                                                                   **kw), n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p_true", [0.0, 0.1, 0.7])
def test_nll_and_brier_of_large_terms_within_the_stated_bound(dtype: torch.dtype, p_true: float) -> None:
    """Voxels whose reference label has probability 0 (``-log 1e-15 = 34.5`` nats each) or a middling one: the fused
    NLL and Brier sums are within ``n 2^-52`` absolute plus ``n 2^-52`` relative of the reference's, and within
    that of the exact sums. (The documented bound was ``n 2^-52`` absolute alone, which the reference's own rounding
    of large terms exceeds: 8.7e-11 off for 5000 voxels of probability 0, 79 times that bound.)"""
    import mpmath

    n = 5000
    p = torch.full((n,), p_true, dtype=torch.float64)
    probs = torch.stack([p, 1.0 - p])[None, :, :, None].to(dtype)
    target = torch.zeros(1, n, 1, dtype=torch.int64)
    fused = outcome(True, 2, 15360, False, probs, target).scalars[0].numpy()
    ref = outcome(False, 2, 15360, False, probs, target).scalars[0].numpy()
    x = mpmath.mpf(float(probs[0, 0, 0, 0]))
    q = mpmath.mpf(float(probs[0, 1, 0, 0]))
    with mpmath.workdps(40):
        nll = -n * mpmath.log(max(x, mpmath.mpf(hist_module.NLL_EPS)))
        exact = [float(nll), float(n * (x * x + q * q - 2 * x + 1))]
    for k in (1, 2):
        bound = n * 2.0**-52 * (1.0 + abs(ref[k]))
        assert abs(fused[k] - ref[k]) <= bound
        assert abs(fused[k] - exact[k - 1]) <= bound
