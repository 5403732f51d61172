"""The plain-traces benchmark runs at a tiny size: every contender is timed against the bare passes of the same run,
and the three inferer contenders give equal maps."""

import math

import pytest

from tests.benchmarks import load_benchmark


def test_tiny_run_times_every_contender_against_the_bare_passes(capsys):
    bench = load_benchmark("bench_plain_traces")
    (row,) = bench.main(["--sizes", "16", "--samples", "3", "--repeats", "1"])
    assert row["equal_maps"] is True
    assert set(row["overhead"]) == {"remembered", "traced", "full passes"}
    assert all(math.isfinite(v) for v in row["overhead"].values()) and row["seconds"]["bare"] > 0
    assert row["seconds"]["walks"] > 0 and math.isfinite(row["walks_over_one_pass"])
    assert "remembered" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main(["--sizes", "8"])
