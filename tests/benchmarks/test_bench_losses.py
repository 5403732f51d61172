"""The loss benchmark runs in one process at a tiny size: every contender computes a finite loss and gradient, and
each time is printed as a ratio to ``DiceCELoss`` measured in the same run."""

import math

import pytest

from tests.benchmarks import load_benchmark


def test_inline_run_times_every_contender_against_dice_ce(capsys):
    bench = load_benchmark("bench_losses")
    rows = bench.main(["--size", "8", "--repeats", "1", "--inline"])
    assert [r["name"] for r in rows] == list(bench.CONTENDERS)
    assert rows[0]["name"] == "DiceCELoss" and rows[0]["cpu_ratio"] == 1.0
    assert all(math.isfinite(r["cpu_ratio"]) and r["cpu_s"] > 0 for r in rows)
    out = capsys.readouterr().out
    assert "DiceSVLSLoss" in out and "ratio" in out
    with pytest.raises(ValueError, match="unknown contender"):
        bench.build("Focal", 4, 3)
    with pytest.raises(SystemExit):
        bench.main(["--size", "2"])
