"""A machine where Triton cannot build its kernels (no C compiler, no Python headers: a slim container with torch's
CUDA wheels) computes with the torch path instead of failing: one warning, the same numbers.

Found by a review of the GPU paths: the fused statistics update and the calibration histogram launched their Triton
kernels unguarded, so a build failure (``RuntimeError: Failed to find C compiler``) stopped the inferer or the metric.
Without a GPU the Triton dispatch is forced onto CPU tensors (as the interpreter tests do) with a kernel module whose
launches fail as such a machine's do.
"""

from __future__ import annotations

import types
import warnings

import pytest
import torch

import monai_unc._jit as jit
import monai_unc._stats_kernels as K
from monai_unc.metrics.calibration import ConfidenceHistogram
from monai_unc.metrics.calibration import histogram as H
from monai_unc.stats import SampleStats

BUILD_ERROR = "Failed to find C compiler. Please specify via CC environment variable."


def _fail(*args, **kwargs):
    raise RuntimeError(BUILD_ERROR)


@pytest.fixture
def no_failure_yet(monkeypatch):
    """A process in which no Triton kernel failed yet (the failure is remembered per process)."""
    monkeypatch.setattr(jit, "_TRITON_FAILURE", [])


def _samples(g: torch.Generator) -> torch.Tensor:
    return torch.softmax(3 * torch.randn(4 * 2, 3, 5, 6, 7, generator=g), 1)


def test_the_statistics_fall_back_to_the_torch_path(monkeypatch, no_failure_yet):
    ps = _samples(torch.Generator().manual_seed(0))
    monkeypatch.setattr(K, "FUSED_KERNELS", False)
    ref = SampleStats(class_variance=True).update_many(ps, 4, [1.0, 0.5, 2.0, 1.0])
    monkeypatch.setattr(K, "FUSED_KERNELS", True)
    monkeypatch.setattr(K, "_kind", lambda p: "triton")
    monkeypatch.setattr(K, "_cuda_kernels", lambda: types.SimpleNamespace(accumulate=_fail, value_flags=_fail))
    with pytest.warns(RuntimeWarning, match="Triton.*Failed to find C compiler.*torch path") as record:
        got = SampleStats(class_variance=True).update_many(ps, 4, [1.0, 0.5, 2.0, 1.0])
        again = SampleStats(class_variance=True)
        for j in range(4):
            again.update(ps[2 * j:2 * j + 2], [1.0, 0.5, 2.0, 1.0][j])
    assert len([w for w in record if issubclass(w.category, RuntimeWarning)]) == 1  # once per process
    for name in ("sum_p", "sum_h", "sum_p2"):
        assert torch.equal(getattr(got, name), getattr(ref, name)), name
        assert torch.equal(getattr(again, name), getattr(ref, name)), name
    assert got.sum_w == ref.sum_w and got.num_updates == ref.num_updates == again.num_updates
    assert jit.triton_failure() == f"RuntimeError: {BUILD_ERROR}"
    assert not K.available("cuda")  # reported as off (the GPU check's "fused_update")


def test_the_histogram_falls_back_to_the_torch_path(monkeypatch, no_failure_yet):
    g = torch.Generator().manual_seed(1)
    probs = torch.softmax(3 * torch.randn(2, 3, 6, 7, 8, generator=g), 1)
    labels = torch.randint(0, 3, (2, 6, 7, 8), generator=g)
    monkeypatch.setattr(H, "FUSED_KERNELS", False)
    ref = ConfidenceHistogram(3, uncertainty=True).update(probs, labels, case_ids=["a", "b"])
    monkeypatch.setattr(H, "FUSED_KERNELS", True)
    monkeypatch.setattr(H, "_fused_backend", lambda p: "triton")
    monkeypatch.setattr(H, "cuda_histogram_tables", _fail)
    with pytest.warns(RuntimeWarning, match="Triton"):
        got = ConfidenceHistogram(3, uncertainty=True).update(probs, labels, case_ids=["a", "b"])
    assert torch.equal(got.counts, ref.counts)
    assert torch.equal(got.sums, ref.sums) and torch.equal(got.scalars, ref.scalars)


@pytest.mark.parametrize("error", [torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                                   RuntimeError("CUDA error: an illegal memory access was encountered")])
def test_device_errors_are_not_taken_for_a_missing_compiler(monkeypatch, no_failure_yet, error):
    """The device's own errors propagate (the torch path would meet them too), and the kernels stay on."""
    def launch(*args, **kwargs):
        raise error

    monkeypatch.setattr(K, "_kind", lambda p: "triton")
    monkeypatch.setattr(K, "_cuda_kernels", lambda: types.SimpleNamespace(accumulate=launch, value_flags=launch))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(type(error)):
            SampleStats().update_many(_samples(torch.Generator().manual_seed(2)), 4)
    assert jit.triton_failure() is None


def test_run_triton_passes_results_and_remembers_a_failure(no_failure_yet):
    assert jit.run_triton(lambda a, b=0: a + b, 1, b=2) == 3
    with pytest.warns(RuntimeWarning, match="ValueError: Pointer argument"):
        with pytest.raises(jit.KernelUnavailable):
            jit.run_triton(lambda: (_ for _ in ()).throw(ValueError("Pointer argument cannot be accessed\nmore")))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no second warning
        with pytest.raises(jit.KernelUnavailable, match="Pointer argument"):
            jit.run_triton(lambda: 1)  # off for the process: not even tried
