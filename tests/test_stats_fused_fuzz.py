"""Fuzzing the fused update of SampleStats against its reference torch path (hostile review).

The oracle is ``SampleStats`` with ``monai_unc._stats_kernels.FUSED_KERNELS`` off, one :meth:`update` per sample.
The fused ``update`` / ``update_many`` (a batch tensor or a sequence) must raise the same errors and give the sums
within twice ``accumulation_error_bound`` (the entropy within the rounding of the precision it is evaluated in),
whatever the chunking and the thread count. Sums loaded from a state dict (``from_state_dict``) are taken as given, so a
later update must treat sums of unexpected shapes as the reference does (broadcast or refuse), never write outside
them; ``from_moments`` refuses moments of other shapes up front.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import monai_unc._stats_kernels as kernels
from monai_unc.stats import SampleStats, accumulation_error_bound
from tests._paths import ROOT

pytestmark = pytest.mark.skipif(not kernels.available("cpu"), reason="numba is not installed")


def run(fused: bool, make: Any, ops: list[Any]) -> Any:
    """The statistics after ``ops``, or the ``(type, message)`` of the first error."""
    old = kernels.FUSED_KERNELS
    kernels.FUSED_KERNELS = fused
    try:
        s = make()
        for op in ops:
            op(s)
        return s
    except (ValueError, TypeError, RuntimeError) as err:
        return type(err), str(err)
    finally:
        kernels.FUSED_KERNELS = old


def assert_same(fused: Any, ref: Any, num_samples: int, weights: list[float]) -> None:
    """Equal errors, or sums within twice the accumulation bound (entropy: plus the rounding of its precision)."""
    if isinstance(fused, tuple) or isinstance(ref, tuple):
        assert fused == ref
        return
    assert (fused.count, fused.num_updates, fused.out_dtype) == (ref.count, ref.num_updates, ref.out_dtype)
    bound = 2 * accumulation_error_bound(num_samples + fused.sum_p.shape[1], fused.sum_p.dtype)
    for name in ("sum_p", "sum_h", "sum_p2"):
        a, b = getattr(fused, name), getattr(ref, name)
        assert (a is None) == (b is None), name
        if a is None:
            continue
        assert a.shape == b.shape and a.dtype == b.dtype, name
        a, b = a.double(), b.double()
        assert torch.equal(torch.isnan(a), torch.isnan(b)) and torch.equal(torch.isinf(a), torch.isinf(b)), name
        fin = torch.isfinite(b)
        atol = 1e-300 if name != "sum_h" else 1e-6 * sum(weights)
        err = (a[fin] - b[fin]).abs()
        assert bool((err <= bound * b[fin].abs() + atol).all()), (name, float(err.max()))


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    """Samples, their weights, the statistics' options and the kernel's chunk and thread knobs."""
    multilabel = draw(st.booleans())
    num_classes = draw(st.sampled_from([1, 2, 3, 9, 17] if multilabel else [2, 3, 9, 17]))
    batch = draw(st.sampled_from([1, 2]))
    k = draw(st.sampled_from([1, 2, 3]))
    spatial = tuple(draw(st.lists(st.sampled_from([1, 3, 7, 33]), min_size=1, max_size=3)))
    shape = (batch, num_classes, *spatial)
    dtype = draw(st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    samples = []
    for _ in range(k):
        if multilabel:
            q = torch.from_numpy(rng.random(shape))
        else:
            q = torch.softmax(torch.from_numpy(rng.normal(size=shape) * rng.choice([1.0, 5.0, 40.0])), 1)
        flat = q.view(-1)
        mode = draw(st.sampled_from(["plain", "non_finite", "off_range", "negative_zero", "sum_off"]))
        at = int(rng.integers(0, flat.numel()))
        if mode == "non_finite":
            flat[at] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        elif mode == "off_range":
            flat[at] += draw(st.sampled_from([1e-3, -1e-3, 1.5e-3, 0.02]))
        elif mode == "negative_zero":
            flat[at] = -0.0
        elif mode == "sum_off" and not multilabel:
            q[:, 0] += draw(st.sampled_from([9.9e-4, 1e-3, 1.01e-3]))
        q = q.to(dtype)
        layout = draw(st.sampled_from(["contiguous", "channels_last", "flipped"]))
        if layout == "channels_last" and q.ndim == 4:
            q = q.contiguous(memory_format=torch.channels_last)
        elif layout == "flipped":
            q = q.flip(-1)
        samples.append(q)
    return {
        "samples": samples,
        "weights": [float(w) for w in draw(st.lists(st.sampled_from([1.0, 0.5, 3.0, 1e-3]), min_size=k, max_size=k))],
        "options": {
            "accum_dtype": draw(st.sampled_from([torch.float32, torch.float64, None])),
            "multilabel": multilabel,
            "class_variance": draw(st.booleans()),
            "track_variance": draw(st.booleans()),
            "validate": draw(st.sampled_from([True, True, False])),
        },
        "how": draw(st.sampled_from(["update", "batch", "sequence"])),
        "threads": draw(st.sampled_from([1, 2])),
        "chunk": draw(st.sampled_from([(1 << 17, 512), (64, 5)])),
        "per_thread": draw(st.sampled_from([1 << 16, 7])),
    }


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_fused_update_equals_the_reference_on_fuzzed_inputs(case: dict[str, Any]) -> None:
    """Random shapes, dtypes, layouts, classes, bad values, weights, ``update`` / ``update_many``, chunk sizes and
    thread counts: the fused update raises the reference's errors or gives its sums within the stated bound."""
    ps, ws = case["samples"], case["weights"]
    k = len(ps)
    if case["how"] == "update":
        ops = [lambda s, q=q, w=w: s.update(q, w) for q, w in zip(ps, ws)]
    elif case["how"] == "batch":
        ops = [lambda s: s.update_many(torch.cat(ps), k, ws)]
    else:
        ops = [lambda s: s.update_many(ps, None, ws)]
    old = kernels.CPU_CHUNK_ELEMENTS, kernels.CPU_MIN_CHUNK_VOXELS, kernels.CPU_MIN_VOXELS_PER_THREAD
    threads = torch.get_num_threads()
    try:
        kernels.CPU_CHUNK_ELEMENTS, kernels.CPU_MIN_CHUNK_VOXELS = case["chunk"]
        kernels.CPU_MIN_VOXELS_PER_THREAD = case["per_thread"]
        torch.set_num_threads(case["threads"])
        fused = run(True, lambda: SampleStats(**case["options"]), ops)
        ref = run(False, lambda: SampleStats(**case["options"]), [lambda s, q=q, w=w: s.update(q, w)
                                                                  for q, w in zip(ps, ws)])
    finally:
        kernels.CPU_CHUNK_ELEMENTS, kernels.CPU_MIN_CHUNK_VOXELS, kernels.CPU_MIN_VOXELS_PER_THREAD = old
        torch.set_num_threads(threads)
    assert_same(fused, ref, k, ws)


def state(mean_entropy: torch.Tensor, mean_sq: torch.Tensor | None = None, mean_sq_sum: torch.Tensor | None = None,
          multilabel: bool = False) -> dict[str, Any]:
    """The state of two samples with uniform means over ``(1, 3, 8, 8)`` voxels (float64) and the given moments, taken
    as given by ``from_state_dict`` (``from_moments`` refuses moments of other shapes)."""
    mean = torch.full((1, 3, 8, 8), 1.0 / 3.0, dtype=torch.float64)
    out = {"sum_w": 2.0, "num_updates": 2, "sum_p": mean * 2, "sum_h": mean_entropy * 2, "out_dtype": "float64",
           "multilabel": multilabel, "class_variance": mean_sq_sum is None}
    second = mean_sq if mean_sq is not None else mean_sq_sum
    if second is not None:
        out["sum_p2"] = second * 2
    return out


def loaded(st: dict[str, Any]) -> SampleStats:
    """Statistics holding the sums of ``st`` as given: set directly, past the checks of ``from_state_dict`` (which
    refuses sums of shapes that do not belong together), as a caller assigning the attributes would."""
    s = SampleStats(track_variance="sum_p2" in st, accum_dtype=torch.float64, validate=False,
                    multilabel=st["multilabel"], class_variance=st["class_variance"])
    s.sum_w, s.num_updates, s.out_dtype = st["sum_w"], st["num_updates"], torch.float64
    s.sum_p, s.sum_h = st["sum_p"].clone(), st["sum_h"].clone()
    s.sum_p2 = st["sum_p2"].clone() if "sum_p2" in st else None
    return s


def moments(**kwargs: Any) -> Any:
    """Statistics of two samples holding the sums of :func:`state`."""
    return lambda: loaded(state(**kwargs))


def sample() -> torch.Tensor:
    return torch.softmax(torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0)), 1).double()


def test_from_moments_entropy_of_c_channels_broadcasts_like_the_reference() -> None:
    """A ``mean_entropy`` of ``C`` channels (a shape the reference's in-place adds broadcast into; loaded from a state,
    ``from_moments`` refuses it): a later update adds each sample's entropy to every channel, as the reference does.
    The fused kernel added it to channel 0 only (the sum was a third of the reference's). From a hostile review."""
    make = moments(mean_entropy=torch.zeros(1, 3, 8, 8, dtype=torch.float64))
    p = sample()
    fused = run(True, make, [lambda s: s.update(p), lambda s: s.update_many(torch.cat([p, p]), 2)])
    ref = run(False, make, [lambda s: s.update(p), lambda s: s.update(p), lambda s: s.update(p)])
    assert_same(fused, ref, 3, [1.0, 1.0, 1.0])


#: in a subprocess (the fused kernel wrote outside the sums: heap corruption aborted the interpreter): sums loaded from
#: a state whose shapes the kernel does not write refuse a later update with the reference's error (from_moments
#: refuses such moments up front, naming the argument)
OUT_OF_BOUNDS_CHECK = r"""
import torch
import monai_unc._stats_kernels as K
from monai_unc.stats import SampleStats
from tests.test_stats_fused_fuzz import loaded, state

p = torch.softmax(torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0)), 1).double()
mean = torch.full((1, 3, 8, 8), 1.0 / 3.0, dtype=torch.float64)
h = torch.zeros(1, 1, 8, 8, dtype=torch.float64)
CASES = {
    "entropy of one voxel": dict(mean_entropy=torch.zeros(1, 1, 1, 1, dtype=torch.float64)),
    "second moment sum of one row": dict(mean_entropy=h, mean_sq_sum=torch.zeros(1, 1, 1, 8, dtype=torch.float64)),
    "per-class second moment of one channel": dict(mean_entropy=h, mean_sq=torch.zeros_like(h)),
    "multi-label entropy of one channel": dict(mean_entropy=h, multilabel=True),
    "entropy of another spatial shape": dict(mean_entropy=torch.zeros(1, 1, 4, 16, dtype=torch.float64)),
}
for name, kw in CASES.items():
    try:
        SampleStats.from_moments(mean, count=2.0, **kw)
    except ValueError as err:
        assert ("mean_entropy" if "entropy" in name else "mean_sq") in str(err), (name, str(err))
    else:
        raise AssertionError(f"from_moments accepted {name}")
    try:  # a state read back is checked too
        SampleStats.from_state_dict(state(**kw))
    except ValueError as err:
        assert "sum_h" in str(err) or "sum_p2" in str(err), (name, str(err))
    else:
        raise AssertionError(f"from_state_dict accepted {name}")
    errors = []
    for fused in (True, False):
        K.FUSED_KERNELS = fused
        s = loaded(state(**kw))
        for op in (lambda: s.update(p), lambda: s.update_many(torch.cat([p, p]), 2)):
            try:
                op()
            except RuntimeError as err:
                errors.append(str(err))
            else:
                errors.append(None)
    assert errors[0] is not None and errors[:2] == errors[2:], (name, errors)
print("out-of-bounds check passed")
"""


def test_from_moments_sums_of_other_shapes_are_never_written_out_of_bounds() -> None:
    """Sums of shapes the fused kernel does not write (entropy or second moment of fewer voxels or channels, a
    multi-label entropy of one channel, another spatial shape of as many voxels), set directly: a later update
    raises the reference's error. The fused kernel wrote outside them (``free(): invalid next size``, an abort) or
    accepted them. From a hostile review. ``from_moments`` refuses each of them up front, naming the argument (found
    by hostile testing: they failed late, in ``measures()``, with a torch RuntimeError), and so does
    ``from_state_dict``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-c", OUT_OF_BOUNDS_CHECK], env=env, capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "out-of-bounds check passed" in r.stdout


@pytest.mark.parametrize(
    "name, shape, message",
    [
        ("sum_p", (1, 3, 32), "sum_p"),
        ("sum_h", (1, 3, 64), "sum_h"),
        ("sum_h", (1, 1, 63), "sum_h"),
        ("sum_p2", (1, 1, 64), "sum_p2"),
        ("sum_p", (2, 3, 64), "sample rows"),  # two batch items of one row of samples
    ],
)
def test_accumulate_refuses_sums_it_would_write_outside(name: str, shape: tuple[int, ...], message: str) -> None:
    """The kernels write without bounds checks: :func:`accumulate` refuses sums of other shapes before any write."""
    p3 = sample().view(1, 3, 64)
    sums = {
        "sum_p": torch.zeros(1, 3, 64, dtype=torch.float64),
        "sum_h": torch.zeros(1, 1, 64, dtype=torch.float64),
        "sum_p2": torch.zeros(1, 3, 64, dtype=torch.float64),
    }
    sums[name] = torch.zeros(shape, dtype=torch.float64)
    before = {k: v.clone() for k, v in sums.items()}
    with pytest.raises(ValueError, match=message):
        kernels.accumulate(p3, [1.0], sums["sum_p"], sums["sum_h"], sums["sum_p2"], True, False, lambda c: c[:, :1])
    assert all(torch.equal(sums[k], before[k]) for k in sums)
