"""The histogram launch benchmark (a CUDA script) runs its sweep and its atomics floor under Triton's interpreter on
the CPU at a tiny size, and refuses to run without CUDA."""

import importlib.util
import json

import pytest

from tests._interpreter import run_interpreted
from tests.benchmarks import load_benchmark

#: run under TRITON_INTERPRET=1 (set before Triton is imported): the histogram's dispatch forced to the kernel
INTERPRETED = r"""
import json, sys
import torch
sys.path.insert(0, "benchmarks")
import bench_histogram_launch as B
from monai_unc.metrics.calibration import histogram as H
H._fused_backend = lambda p: "triton"
dev = torch.device("cpu")
print(json.dumps({"sweep": B.sweep(5, 1, dev, blocks=(256,), replicas=(1, 4)), "floor": B.atomics_floor(5, 1, dev)}))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
@pytest.mark.slow
def test_sweep_and_floor_under_the_interpreter():
    res = json.loads(run_interpreted(INTERPRETED).strip().splitlines()[-1])
    rows = res["sweep"]["settings"]
    assert [(row["block"], row["replicas"], row["warps"]) for row in rows] == [(256, 1, 4), (256, 4, 4)]
    assert all(row["spread_counts_equal"] and row["confident_counts_equal"] and row["kernel_ran"] for row in rows)
    assert all(row["spread_s"] > 0 and row["confident_gb_s"] > 0 for row in rows)
    assert res["sweep"]["default"]["l2_bytes"] == 0  # a CPU tensor: no L2 bound
    floor = res["floor"]
    assert floor["voxels"] == 125
    assert set(floor) == {"voxels"} | {f"replicas{r}_rows{k}" for r in (1, 8, 32) for k in (1, 5)}
    assert all(v["atomics_per_s"] > 0 for k, v in floor.items() if k != "voxels")


def test_refuses_without_cuda(monkeypatch, capsys):
    bench = load_benchmark("bench_histogram_launch")
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: False)
    assert bench.main([]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err
