"""The host-time benchmark of the GPU path's per-sample statistics runs on the CPU at a tiny size and leaves the
fused update as it found it."""

import importlib.util
import math

import pytest
import torch

import monai_unc._stats_kernels as kernels
from tests.benchmarks import load_benchmark


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_tiny_run_times_both_paths_and_restores_the_kernels(capsys):
    before = (kernels._kind, kernels._cuda_kernels, kernels.FUSED_OUTPUTS)
    bench = load_benchmark("bench_update_host")
    res = bench.main(["--calls", "20", "--repeats", "1"])
    t = res["us_per_sample"]
    assert set(t) == {"separate steps", "fused outputs"} and all(v > 0 and math.isfinite(v) for v in t.values())
    assert res["fused_over_separate"] == t["fused outputs"] / t["separate steps"]
    assert "fused outputs" in capsys.readouterr().out
    assert (kernels._kind, kernels._cuda_kernels, kernels.FUSED_OUTPUTS) == before
    assert kernels._kind(torch.zeros(1)) == "numba"  # CPU tensors take the CPU kernel again
    with pytest.raises(SystemExit):
        bench.main(["--classes", "1"])
