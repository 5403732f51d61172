"""The monitoring store at scale: recording 10^5 cases and ``monitor status`` for 20 sites, SQLite vs PostgreSQL.

For each backend, in the same run:

- **record**: ``--cases`` cases (20 sites, in triage runs of ``--per-run`` cases) through
  :meth:`MonitorStore.record_run` (checks, the rule, the run, the cases and the hash-chained audit entry, one
  transaction per run); its floor is a bare ``executemany`` of the same rows into a table of the same columns, one
  transaction per run, on the same database;
- **status**: :func:`monai_unc.monitoring.monitor_status` on everything recorded (20 site streams and the pooled one:
  conformal p-values, two martingales, the risk test of the audited cases); its floor is reading the rows
  (:meth:`MonitorStore.cases`), which status needs anyway;
- **verify**: the audit chain and the row digest of every entry.

Each line prints the CPU time of this process, the ratio to the floor and the process's peak resident memory so far
(``ru_maxrss``; the store's rows in memory for status are most of it).
PostgreSQL: ``--postgres URL``, else a throwaway server (initdb + pg_ctl in a temporary folder, as the tests start
one) when the server binaries and psycopg are installed; otherwise only SQLite runs.

    python benchmarks/bench_monitor.py                    # 10^5 cases, 20 sites
    python benchmarks/bench_monitor.py --cases 10000      # quicker
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monai_unc.monitoring import CaseRecord, MonitorStore, monitor_status  # noqa: E402
from monai_unc.monitoring.store import _CASE_COLUMNS, rule_body_digest  # noqa: E402


def _runs(n_cases: int, per_run: int, n_sites: int, seed: int = 0) -> tuple[dict[str, Any], list[list[CaseRecord]]]:
    rng = np.random.default_rng(seed)
    rule = {"score": {"column": "predictive_entropy_fg_mean"}, "target_risk": 0.1, "risk": "failure",
            "failure_dice": 0.8, "calibration": {"case_scores": list(rng.normal(size=200))}}
    rule["digest"] = rule_body_digest(rule)  # the store refuses a rule that does not match its digest
    runs, k = [], 0
    while k < n_cases:
        m = min(per_run, n_cases - k)
        scores = rng.normal(size=m)
        runs.append([CaseRecord(case_id=f"c{k + i:07d}", site=f"site {int(rng.integers(n_sites)):02d}", scanner=None,
                                triaged_at=f"2026-01-01T00:00:{(k + i) % 60:02d}+00:00", score=float(scores[i]),
                                image_z_max=float(abs(rng.normal())), expected_dice=0.9,
                                decision="accept" if scores[i] < 1.0 else "review",
                                code="accepted" if scores[i] < 1.0 else "above_threshold", reason="ok",
                                rule_digest=rule["digest"], model_digest=None) for i in range(m)])
        k += m
    return rule, runs


def _measure(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """``(CPU seconds of this process, its peak resident memory so far in MiB, the result)``.

    CPU time, not wall time: the figures are meant to be comparable on a machine shared with other jobs (and a
    PostgreSQL server's own CPU time is not counted: the floor of each step runs against the same server).
    """
    t0 = time.process_time()
    out = fn()
    seconds = time.process_time() - t0
    return seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, out


@contextlib.contextmanager
def _postgres(url: str | None) -> Iterator[str | None]:
    if url:
        yield url
        return
    try:
        import psycopg  # noqa: F401

        from tests.monitoring._stream import postgres_binaries, postgres_server
    except ImportError as e:
        print(f"PostgreSQL skipped: {e}")
        yield None
        return
    if postgres_binaries() is None:
        print("PostgreSQL skipped: no server binaries (initdb, pg_ctl)")
        yield None
        return
    with postgres_server() as server:
        yield server


def bench(name: str, url: str, rule: dict[str, Any], runs: list[list[CaseRecord]]) -> None:
    n = sum(len(r) for r in runs)
    with MonitorStore(url) as store:
        def record() -> None:
            for i, cases in enumerate(runs):
                store.record_run(rule, cases, source_digest=f"run{i}", folder="bench", triaged_at="t",
                                 model_digest=None, command=["bench"])

        t_rec, m_rec, _ = _measure(record)
        # audited labels of one accepted case in ten
        acc = [c.case_id for cases in runs for c in cases if c.decision == "accept"][::10]
        store.add_labels([{"case": cid, "dice": 0.9, "failure": None, "loss": 0.0} for cid in acc], source="bench")
        # the floor: a bare insert of the same rows, one transaction per run
        store._execute("CREATE TABLE bare (" + ", ".join(f"{c} TEXT" for c in _CASE_COLUMNS) + ")")
        marks = ", ".join("?" * len(_CASE_COLUMNS))

        def bare() -> None:
            for cases in runs:
                with store._transaction():
                    store._executemany(f"INSERT INTO bare VALUES ({marks})",
                                       [tuple(str(getattr(c, k)) for k in _CASE_COLUMNS) for c in cases])

        t_bare, _, _ = _measure(bare)
        t_read, m_read, rows = _measure(store.cases)
        rules = store.rules()
        t_stat, m_stat, groups = _measure(lambda: monitor_status(rows, rules, 0.05))
        t_ver, m_ver, res = _measure(store.verify)
    assert res.ok and len(rows) == n
    print(f"{name}: record {n} cases in {len(runs)} runs: {t_rec:.2f} s CPU ({n / t_rec:,.0f} cases/s), "
          f"ratio to the floor (bare insert {t_bare:.2f} s): {t_rec / t_bare:.2f}x, peak RSS {m_rec:.0f} MiB",
          flush=True)
    print(f"{name}: status, {len(groups)} streams: {t_stat:.2f} s CPU + reading the rows {t_read:.2f} s "
          f"(ratio to the floor, read: {(t_stat + t_read) / t_read:.2f}x), peak RSS {max(m_stat, m_read):.0f} MiB",
          flush=True)
    print(f"{name}: verify {res.n_entries} audit entries: {t_ver:.2f} s CPU, peak RSS {m_ver:.0f} MiB", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=100_000)
    p.add_argument("--per-run", type=int, default=1000, help="cases per triage run (default 1000)")
    p.add_argument("--sites", type=int, default=20)
    p.add_argument("--postgres", default=None, help="a PostgreSQL URL (default: a throwaway server, if possible)")
    args = p.parse_args(argv)
    rule, runs = _runs(args.cases, args.per_run, args.sites)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS before the first step (imports, the {args.cases} case records): {base:.0f} MiB", flush=True)
    with tempfile.TemporaryDirectory() as d:
        bench("sqlite", str(Path(d) / "bench.db"), rule, runs)
    with _postgres(args.postgres) as url:
        if url is not None:
            bench("postgresql", url, rule, runs)


if __name__ == "__main__":
    main()
