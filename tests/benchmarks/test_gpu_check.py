"""The GPU check's quick CPU mode runs in CI, so the command prepared for the moment a GPU is lent cannot rot.

Its ``cuda_tests`` part runs one small device-test file (``--tests``): ``make test`` already runs every device test
on the CPU (``MONAI_UNC_TEST_DEVICE=cpu``), so this test checks the part's mechanics (the pytest run, the counts read
from the JUnit XML, the table row), not the device tests a second time.
"""

import json
import sys
import xml.etree.ElementTree as ET

import pytest
import torch

import monai_unc._stats_kernels as stats_kernels
from tests._paths import ROOT
from tests.benchmarks import load_benchmark

#: the device tests the rehearsal's ``cuda_tests`` part runs: one small file (its 4 tests take well under a second)
CUDA_TESTS = "tests/metrics/test_overlap_cuda.py"


@pytest.mark.slow
def test_quick_cpu_mode_runs_every_part(tmp_path, monkeypatch, capsys):
    """The script's ``main`` runs in the test process (the script exits with its value: ``sys.exit(main())``); its
    ``cuda_tests`` part still runs pytest in a fresh process. Running the script itself in one more interpreter only
    added that interpreter's start-up (torch and MONAI imported, ~5 s of CPU)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # for the cuda_tests part's pytest process, which inherits it
    monkeypatch.delenv("MONAI_UNC_TEST_DEVICE", raising=False)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the parts put benchmarks/ on the path
    for switch in ("FUSED_KERNELS", "FUSED_OUTPUTS"):  # mc_unet turns them off and on again: restored as found
        monkeypatch.setattr(stats_kernels, switch, getattr(stats_kernels, switch))
    gpu_check = load_benchmark("gpu_check")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # as OMP_NUM_THREADS=1 gave the script's own process
        with torch.random.fork_rng():  # the parts seed torch's generator
            code = gpu_check.main(["--out", str(tmp_path), "--device", "cpu", "--quick", "--tests", CUDA_TESTS])
    finally:
        torch.set_num_threads(threads)
    captured = capsys.readouterr()
    assert code == 0, captured.out[-3000:] + captured.err[-3000:]
    res = json.loads((tmp_path / "gpu_check.json").read_text())
    parts = {"cuda_tests", "device", "mc_brats", "mc_unet", "sw_stitch", "calibration", "spatial", "nnunet", "cost",
             "writes", "profile"}
    assert parts <= set(res), sorted(res)
    assert all(res[p]["ok"] for p in parts), {p: res[p] for p in parts if not res[p]["ok"]}
    # the device tests were rehearsed on the CPU, not skipped
    assert res["cuda_tests"]["passed"] > 0 and res["cuda_tests"]["failures"] == 0
    assert res["cuda_tests"]["errors"] == 0 and res["cuda_tests"]["paths"] == [CUDA_TESTS]
    # only the given file ran
    cases = ET.parse(tmp_path / "cuda_tests.xml").getroot().iter("testcase")
    assert {c.get("classname") for c in cases} == {CUDA_TESTS.removesuffix(".py").replace("/", ".")}
    table = (tmp_path / "gpu_check.md").read_text()
    assert "CPU" in table and "| cuda_tests | ok |" in table and f"(only {CUDA_TESTS})" in table
    # same seed, same windows: stitching on the CPU gives the device's result
    assert res["sw_stitch"]["max_abs_pred_diff"] < 1e-5
    # shared passes: every placement of both networks, the limit beside it, full passes for every stage
    cost = res["cost"]
    for net in ("monai", "nnunet"):
        for placement in ("auto", "decoder", "last"):
            r = cost[net][placement]
            assert r["stock_s"] > 0 and r["shared_over_stock"] > 0 and r["limit_over_stock"] > 0, (net, placement)
        assert cost[net]["auto"]["full_over_stock"] > 0 and "full_over_stock" not in cost[net]["last"]
    assert cost["nnunet"]["auto"]["stock_n_over_stock"] > 0
    # MONAI's case also with a fixed batch of 2 samples a replay, beside the automatic batch
    assert all(cost["monai"][p]["shared_k2_over_stock"] > 0 for p in ("auto", "decoder", "last"))
    assert "BasicUNet: auto" in table and "2 samples a replay" in table
    # the profiles: both calls of both cases counted, the reports written
    for key, unit in (("mc_unet", "bare"), ("cost_last", "stock")):
        for mode in ("ours", unit):
            r = res["profile"][key][mode]
            assert r["wall_s"] > 0 and r["process_cpu_s"] > 0 and r["ops"] > 0 and r["device_busy_s"] is None
        assert "aten::" in (tmp_path / f"profile_{key}.txt").read_text()
    assert "UNet MC dropout:" in table and "BasicUNet last stage:" in table
    # the writers against nib.save on the host's cores
    assert res["writes"]["nib_save_s"] > 0 and res["writes"]["ours_all_over_nib"] > 0 and "| writes | ok |" in table


def test_refuses_cuda_without_a_gpu(tmp_path, monkeypatch, capsys):
    """The refusal is ``main``'s return value (the script exits with it: ``sys.exit(main())``), so it is checked in
    this process: a fresh interpreter (importing torch and the script) added ~3 s and checked nothing more."""
    gpu_check = load_benchmark("gpu_check")
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: False)
    assert gpu_check.main(["--out", str(tmp_path), "--device", "cuda"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert not (tmp_path / "gpu_check.json").exists()
