"""The monitoring store on SQLite and PostgreSQL: records, labels, the audit chain, concurrency, killed writers."""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from monai_unc.monitoring import GENESIS, MonitorStore, read_triage_run
from monai_unc.monitoring.store import SCHEMA_VERSION, entry_hash, redact_url

from ._stream import make_rule, raw_sql, write_triage
from ._writer import record_runs


def _record(store, folder, **kw):
    run = read_triage_run(folder, **kw)
    return store.record_run(run.rule, run.cases, source_digest=run.source_digest, folder=str(run.folder),
                            triaged_at=run.triaged_at, model_digest=run.model_digest, command=["test"])


def test_record_label_read_and_verify(store_url, tmp_path):
    rule = make_rule([0.1, 0.2, 0.3], target=0.2)
    cases = [{"case": "a", "score": 0.15}, {"case": "b", "score": None, "decision": "review"},
             {"case": "c<x>", "score": 0.25, "image_z_max": 1.5}]
    folder = write_triage(tmp_path / "t1", rule, cases)
    with MonitorStore(store_url) as store:
        assert store.schema_version() == SCHEMA_VERSION
        run_id, new = _record(store, folder, site="S1")
        assert new and _record(store, folder, site="S1") == (run_id, False)  # recorded once
        assert store.add_labels([{"case": "a", "dice": 0.7, "failure": None, "loss": 1.0}], source="x") == 1
        rows = store.cases()
        assert [r["case_id"] for r in rows] == ["b", "a", "c<x>"]  # within a run in the order of a hash of the id
        rows.sort(key=lambda r: r["case_id"])
        assert rows[0]["loss"] == 1.0 and rows[0]["dice"] == 0.7 and rows[1]["loss"] is None
        assert math.isnan(rows[1]["score"]) and rows[2]["image_z_max"] == 1.5 and rows[2]["site"] == "S1"
        assert store.rules()[rule["digest"]]["calibration_scores"] == [0.1, 0.2, 0.3]
        res = store.verify()
        assert res.ok and res.n_entries == 3  # migrate, record, label
        log = store.audit_log()
        assert [e.action for e in log] == ["migrate", "record", "label"] and log[0].prev_hash == GENESIS
        assert all(e.hash == entry_hash(e.__dict__) for e in log)
        assert log[1].command == "test" and json.loads(log[1].details)["n_cases"] == 3
        with pytest.raises(ValueError, match="not in the monitoring store"):
            store.add_labels([{"case": "zzz", "dice": 1.0, "failure": None, "loss": 0.0}], source="x")
        assert store.verify().n_entries == 3  # the refused labels wrote nothing, not even an audit entry
    with MonitorStore(store_url) as again:  # reopening migrates nothing
        assert again.verify().n_entries == 3


@pytest.mark.parametrize("tamper, message", [
    ("UPDATE audit SET actor = 'mallory' WHERE seq = 2", "audit entry 2 was edited"),
    ("DELETE FROM audit WHERE seq = 2", "audit entry 2 is missing"),
    ("UPDATE cases SET decision = 'accept' WHERE case_id = 'b'", "rows written by audit entry 2"),
    ("DELETE FROM labels", "rows written by audit entry 3"),
])
def test_a_tampered_row_is_detected(store_url, tmp_path, tamper, message):
    rule = make_rule([0.1, 0.2])
    folder = write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.1}, {"case": "b", "decision": "review"}])
    with MonitorStore(store_url) as store:
        _record(store, folder)
        store.add_labels([{"case": "a", "dice": 0.9, "failure": None, "loss": 0.0}], source="x")
        assert store.verify().ok
    raw_sql(store_url, tamper)
    with MonitorStore(store_url, create=False) as store:
        res = store.verify()
    assert not res.ok and any(message in p for p in res.problems), res.problems


def test_removing_the_last_entry_is_caught_by_the_kept_head(store_url, tmp_path):
    folder = write_triage(tmp_path / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}])
    with MonitorStore(store_url) as store:
        _record(store, folder)
        head = store.verify().head
    raw_sql(store_url, "DELETE FROM cases")
    raw_sql(store_url, "DELETE FROM runs")
    raw_sql(store_url, "DELETE FROM audit WHERE seq = 2")
    with MonitorStore(store_url, create=False) as store:
        assert store.verify().ok  # the chain alone cannot tell the end was cut off
        res = store.verify(expect_head=head)
    assert not res.ok and "no entry of the audit chain has the expected head" in res.problems[0]


def test_a_newer_schema_is_refused(store_url):
    MonitorStore(store_url).close()
    raw_sql(store_url, "UPDATE monitor_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ValueError, match="newer than this monai-unc"):
        MonitorStore(store_url)


def test_bad_urls_are_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="unsupported URL"):
        MonitorStore("mysql://u@h/db")
    with pytest.raises(ValueError, match="does not exist"):
        MonitorStore(tmp_path / "missing.db", create=False)
    with pytest.raises(ValueError, match="is a folder"):
        MonitorStore(tmp_path)
    assert redact_url("postgresql://u:pw@h:5/d") == "postgresql://u:***@h:5/d"


def test_unreachable_postgresql_is_one_clear_error():
    pytest.importorskip("psycopg")
    with pytest.raises(ValueError, match=r"cannot connect to the database 'postgresql://u:\*\*\*@127.0.0.1:9/x'"):
        MonitorStore("postgresql://u:secret@127.0.0.1:9/x")


def test_two_concurrent_writers_lose_nothing(store_url, tmp_path):
    """2 writers x 1000 cases (in runs of 50 cases each, recorded at the same time): every case is there once."""
    rule = make_rule([0.1, 0.2])
    n_runs, per_run = 20, 50
    work = {}
    for tag in ("p", "q"):
        work[tag] = []
        for k in range(n_runs):
            folder = write_triage(tmp_path / f"{tag}{k}", rule,
                                  [{"case": f"{tag}{k}-{i}", "score": 0.1 + i / 1000} for i in range(per_run)])
            run = read_triage_run(folder)
            work[tag].append((run.rule, run.cases, run.source_digest))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=record_runs, args=(store_url, work[tag], tag, q)) for tag in ("p", "q")]
    for p in procs:  # both start on an empty database: creating the schema is serialised too
        p.start()
    for p in procs:
        p.join(300)
    assert sorted(q.get(timeout=10) for _ in procs) == ["ok", "ok"]
    with MonitorStore(store_url) as store:
        ids = [c["case_id"] for c in store.cases()]
        res = store.verify()
    assert len(ids) == len(set(ids)) == 2 * n_runs * per_run
    assert res.ok and res.n_entries == 1 + 2 * n_runs


_KILLED_WRITER = textwrap.dedent("""
    import json, os, signal, sys
    from monai_unc.monitoring import store as store_module

    url, path = sys.argv[1], sys.argv[2]
    doc = json.load(open(path))
    original = store_module.MonitorStore._executemany

    def half_then_die(self, sql, rows):
        original(self, sql, rows[: len(rows) // 2])  # half of the cases are inserted ...
        os.kill(os.getpid(), signal.SIGKILL)  # ... and the writer is killed before the commit

    store_module.MonitorStore._executemany = half_then_die
    with store_module.MonitorStore(url) as store:
        store.record_run(doc["rule"], [store_module.CaseRecord(**c) for c in doc["cases"]],
                         source_digest=doc["digest"], folder="f", triaged_at="t", model_digest=None)
""")


def test_sigkill_mid_record_leaves_the_store_consistent(store_url, tmp_path):
    rule = make_rule([0.1])
    write_triage(tmp_path / "first", rule, [{"case": "x", "score": 0.1}])
    folder = write_triage(tmp_path / "killed", rule, [{"case": f"k{i}", "score": 0.1} for i in range(200)])
    with MonitorStore(store_url) as store:
        _record(store, tmp_path / "first")
    run = read_triage_run(folder)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"rule": run.rule, "cases": [c.__dict__ for c in run.cases],
                               "digest": run.source_digest}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, store_url, str(job)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    with MonitorStore(store_url) as store:
        assert [c["case_id"] for c in store.cases()] == ["x"]  # nothing of the killed run
        assert store.verify().ok and store.verify().n_entries == 2
        assert _record(store, folder)[1]  # and it can be recorded again
        assert len(store.cases()) == 201 and store.verify().ok


def test_recorded_decisions_are_looked_up_by_case_id_not_by_rule(tmp_path):
    """A run's already-recorded decisions are read by case id (``cases_by_case_id``), so recording costs the run's
    size: with the rule in the query SQLite took the rule's index and read every case the rule had recorded, and
    recording 10^5 cases in runs of 1 000 took 17.6 s of CPU instead of 1.4 s (``python benchmarks/bench_monitor.py``;
    found by the benchmark review). A decision under another rule is still not one of them."""
    from monai_unc.monitoring import CaseRecord

    rule, other = make_rule([0.1, 0.2, 0.3]), make_rule([0.1, 0.2, 0.3], tag="other")

    def cases(ids, r):
        return [CaseRecord(case_id=c, site="a", scanner=None, triaged_at="2026-01-01T00:00:00+00:00", score=0.5,
                           image_z_max=None, expected_dice=None, decision="accept", code="accepted", reason="ok",
                           rule_digest=r["digest"], model_digest=None) for c in ids]

    with MonitorStore(str(tmp_path / "m.db")) as store:
        for i in range(3):
            store.record_run(rule, cases([f"r{i}c{k}" for k in range(50)], rule), source_digest=f"s{i}",
                             folder="f", triaged_at="t", model_digest=None, command=["x"])
        store.record_run(other, cases(["r0c1", "r0c2"], other), source_digest="o", folder="g", triaged_at="t",
                         model_digest=None, command=["x"])
        queries = []
        all_rows = store._all

        def spy(sql, params=()):
            queries.append((sql, tuple(params)))
            return all_rows(sql, params)

        store._all = spy
        known = store._recorded_decisions(other["digest"], ["r0c1", "r0c2", "r0c3"])
        store._all = all_rows
        assert len(known) == 2  # r0c3 was recorded under the first rule only
        assert len(store._recorded_decisions(rule["digest"], ["r0c1", "r0c2", "r0c3", "new"])) == 3
        assert queries
        for sql, params in queries:
            plan = " ".join(str(row) for row in store._all("EXPLAIN QUERY PLAN " + sql, params))
            assert "cases_by_case_id" in plan and "cases_by_rule_site" not in plan, plan
