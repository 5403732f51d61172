"""The end-to-end nnU-Net benchmark runs in CI on one tiny case: stock ``nnUNetv2_predict`` and ``monai-unc
nnunet-predict`` through their own entry points, the split printed, and the script's check that both wrote the
same segmentation passes (it raises otherwise).

The script's ``main`` runs in the test process (its argument parsing, the dataset it writes, the comparison and the
table); the two commands still run in a fresh process each, as the benchmark times them. Running the script itself
in one more interpreter only added the start-up of that interpreter (torch and nnU-Net imported, ~5 s)."""

import re
import subprocess
import sys

import pytest
import torch

from tests._paths import ROOT
from tests.benchmarks import load_benchmark

pytest.importorskip("nnunetv2")


@pytest.mark.slow
def test_end_to_end_mode_runs_and_finds_the_segmentations_identical(monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # for the commands' processes, which inherit the environment
    # both commands set torch's threads to the machine's cores on the CPU (stock's -device cpu), whatever
    # OMP_NUM_THREADS says: OpenMP threads that wait by sleeping, not spinning, on a machine whose cores other jobs
    # share (2 threads spinning there took ~13 s of CPU for a prediction of ~1 s; the files and the split alike)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # the script imports its helper module _floor
    monkeypatch.setattr(sys, "argv", ["bench_nnunet.py", "--end-to-end", "--e2e-config", "tiny", "--e2e-cases", "1",
                                      "--repeats", "1", "--e2e-workers", "1"])
    bench = load_benchmark("bench_nnunet")
    # each timed command is a fresh process the script starts without a time limit: one that hangs fails the test
    # (subprocess.TimeoutExpired) instead of stalling CI, as the script's own process did under the test's limit
    run = subprocess.run
    monkeypatch.setattr(bench.subprocess, "run", lambda *args, **kwargs: run(*args, **{"timeout": 600, **kwargs}))
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng():  # the script seeds torch's generator and sets the thread count
            bench.main()  # raises if the segmentations differ
    finally:
        torch.set_num_threads(threads)
    stdout = capsys.readouterr().out
    assert "segmentations identical to stock's" in stdout
    rows = {m.group(1): [float(x) for x in m.group(2).split(" | ")[:6]]
            for m in re.finditer(r"^\| (stock|ours) \| ([^\n]*) \|", stdout, re.MULTILINE)}
    assert set(rows) == {"stock", "ours"}, stdout
    for total, _, startup, predict, _, rest in rows.values():
        assert total > 0 and startup > 0 and predict > 0
        assert abs(startup + predict + rest - total) < 1e-6 * total + 0.02  # the split adds up to the total
