"""The monitoring benchmark records its runs and reads them back at a tiny size (SQLite only).

Its made-up rule carried a digest of no rule's body; since the store checks a rule against its digest, the README's
command (``python benchmarks/bench_monitor.py``) failed before its first figure (found by the benchmark review).
"""

from tests.benchmarks import load_benchmark


def test_records_status_and_verify_run_on_sqlite(tmp_path, capsys):
    bench = load_benchmark("bench_monitor")
    rule, runs = bench._runs(300, 100, 3)
    bench.bench("sqlite", str(tmp_path / "bench.db"), rule, runs)
    out = capsys.readouterr().out
    assert "sqlite: record 300 cases in 3 runs" in out
    assert "sqlite: status, 4 streams" in out and "sqlite: verify" in out
