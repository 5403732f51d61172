"""``monitor verify`` checks the order of the case rows: the order of the stream every alarm tests (monitorstats
review).

Before the fix, case rows whose contents were permuted over their ids (each row unchanged, only where it stands: so
every run's rows digest held) moved the score alarm of a stream from its case 138 to its case 11, and ``verify``
said the store was intact. The store writes the rows in one order (run after run, each run's rows in the order of a
hash of their case ids, or of the ids as earlier development versions wrote them); any other order is now reported.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from monai_unc.monitoring import MonitorStore, monitor_status
from monai_unc.monitoring.store import _CASE_COLUMNS, _within_run_order
from monai_unc.workflows.monitor import record_triage

from ._stream import make_rule, write_triage

_ORDER_PROBLEM = "out of the order"


def _connect(url: str):
    if url.startswith("postgresql://"):
        import psycopg

        conn = psycopg.connect(url, autocommit=True)
        conn.execute("SET client_encoding TO 'UTF8'")  # text as str (the test server's encoding is SQL_ASCII)
        return conn, "%s"
    return sqlite3.connect(url, isolation_level=None), "?"


def _place_rows(url: str, source: list[int]) -> None:
    """Move the contents of the case rows (run and every column) over their ids, outside the store: the row at the
    ``k``-th smallest id gets the contents of the row at the ``source[k]``-th (ids themselves stay: PostgreSQL's
    identity column cannot be set)."""
    conn, mark = _connect(url)
    try:
        cols = ("run_id", *_CASE_COLUMNS)
        rows = conn.execute(f"SELECT id, {', '.join(cols)} FROM cases ORDER BY id").fetchall()
        conn.execute("UPDATE cases SET case_id = 'tmp-' || CAST(id AS TEXT)")  # UNIQUE (run_id, case_id) meanwhile
        sets = ", ".join(f"{c} = {mark}" for c in cols)
        for (row_id, *_), k in zip(rows, source):
            conn.execute(f"UPDATE cases SET {sets} WHERE id = {mark}", (*rows[k][1:], row_id))
    finally:
        conn.close()


def _store(url, tmp_path, runs=6, per_run=30):
    rng = np.random.default_rng(0)
    rule = make_rule(list(rng.normal(0, 1, 200)))
    for k in range(runs):
        mu = 0.0 if k < runs - 2 else 2.0  # the last two runs' scores shifted: a score alarm in the fifth run
        cases = [{"case": f"r{k}-{i:02d}", "score": float(rng.normal(mu, 1))} for i in range(per_run)]
        record_triage(url, write_triage(tmp_path / f"t{k}", rule, cases), site="X", command=["test"])


def _status(url):
    with MonitorStore(url, read_only=True) as store:
        (group,) = monitor_status(store.cases(), store.rules())
        return group.score.alarm, store.verify()


def test_rows_moved_between_runs_are_reported(store_url, tmp_path):
    _store(store_url, tmp_path)
    alarm, res = _status(store_url)
    assert res.ok and alarm is not None and alarm >= 120  # the fifth run's cases
    n = 6 * 30
    _place_rows(store_url, list(np.random.default_rng(1).permutation(n)))
    moved, res = _status(store_url)
    assert moved != alarm  # the same rows in another order: another alarm ...
    assert not res.ok and any("out of the order of their runs" in p for p in res.problems), res.problems
    assert not any("were edited or deleted" in p for p in res.problems)  # ... which no rows digest sees


def test_rows_reordered_within_a_run_are_reported(store_url, tmp_path):
    _store(store_url, tmp_path, runs=2, per_run=10)
    source = list(range(20))
    source[12], source[15] = source[15], source[12]  # two rows of the second run swap places
    _place_rows(store_url, source)
    res = _status(store_url)[1]
    assert not res.ok and any("case rows of 1 run(s) (run id [2])" in p and _ORDER_PROBLEM in p
                              for p in res.problems), res.problems


def test_runs_whose_ids_were_swapped_are_reported(tmp_path):
    url = str(tmp_path / "m.db")
    _store(url, tmp_path, runs=3, per_run=5)
    conn = sqlite3.connect(url, isolation_level=None)  # foreign keys are off outside the store
    for old, new in ((1, -1), (2, 1), (-1, 2)):
        conn.execute("UPDATE runs SET id = ? WHERE id = ?", (new, old))
        conn.execute("UPDATE cases SET run_id = ? WHERE run_id = ?", (new, old))
    conn.close()
    res = _status(url)[1]
    assert not res.ok
    assert any("table runs are out of the order of their audit entries" in p for p in res.problems), res.problems
    assert any("out of the order of their runs" in p for p in res.problems), res.problems


def test_the_orders_the_store_writes_are_intact(store_url, tmp_path):
    """Its own order: no problem. A run's rows moved into case-id order (as earlier development versions wrote them)
    are reported since each record entry holds the order it wrote (review 61; a run of an entry without it is checked
    as before: tests/monitoring/test_review61_monitor.py)."""
    _store(store_url, tmp_path, runs=2, per_run=12)
    with MonitorStore(store_url, read_only=True) as store:
        ids = [c["case_id"] for c in store.cases()]
        assert store.verify().ok
    assert ids[:12] == sorted(ids[:12], key=_within_run_order) != sorted(ids[:12])
    _place_rows(store_url, sorted(range(12), key=lambda k: ids[k]) + list(range(12, 24)))  # run 1 in case-id order
    with MonitorStore(store_url, read_only=True) as store:
        assert [c["case_id"] for c in store.cases()][:12] == sorted(ids[:12])
        problems = store.verify().problems
    assert len(problems) == 1 and "audit entry 2 (record) are out of the order it wrote them in" in problems[0]


@pytest.mark.parametrize("edit", ["UPDATE cases SET case_id = 'zz-late' WHERE id = 3"])
def test_an_edited_case_id_is_reported_once_as_edited_rows(tmp_path, edit):
    """An edited id changes the run's rows digest (reported as such); the order check reports it too, never fails."""
    url = str(tmp_path / "m.db")
    _store(url, tmp_path, runs=1, per_run=8)
    conn = sqlite3.connect(url, isolation_level=None)
    conn.execute(edit)
    conn.close()
    res = _status(url)[1]
    assert not res.ok and any("were edited or deleted" in p for p in res.problems)


def test_label_rows_permuted_over_their_ids_are_reported(store_url, tmp_path):
    """A failure and its later correction (each the one label of its batch) swapped places: the correction was undone,
    and each batch's rows digest held."""
    _store(store_url, tmp_path, runs=1, per_run=3)
    with MonitorStore(store_url) as store:
        store.add_labels([{"case": "r0-01", "dice": None, "failure": 1, "loss": 1.0}], source="audit")
        store.add_labels([{"case": "r0-01", "dice": None, "failure": 0, "loss": 0.0}], source="correction")
        assert store.verify().ok
    conn, mark = _connect(store_url)
    try:
        cols = ("audit_seq", "case_row", "recorded_at", "dice", "failure", "loss", "source")
        rows = conn.execute(f"SELECT id, {', '.join(cols)} FROM labels ORDER BY id").fetchall()
        sets = ", ".join(f"{c} = {mark}" for c in cols)
        for (row_id, *_), other in zip(rows, rows[::-1]):
            conn.execute(f"UPDATE labels SET {sets} WHERE id = {mark}", (*other[1:], row_id))
    finally:
        conn.close()
    with MonitorStore(store_url, read_only=True) as store:
        assert {c["case_id"]: c["loss"] for c in store.cases()}["r0-01"] == 1.0  # the correction undone ...
        res = store.verify()
    assert not res.ok and not any("were edited or deleted" in p for p in res.problems)  # ... unseen by the digests
    assert any("table labels are out of the order of their audit entries" in p for p in res.problems), res.problems


def test_a_label_moved_onto_another_case_is_reported(store_url, tmp_path):
    """A run's rows rearranged from the store's order into case-id order (an order verify accepts: earlier
    development versions wrote it) keep their ids, so the label of row k now names another case: a failure moved
    onto a referred case left the risk test, with every rows digest intact."""
    rule = make_rule([0.1, 0.2, 0.3])
    cases = [{"case": f"c{i}", "score": 0.2 if i % 2 else 0.9, "decision": "accept" if i % 2 else "review"}
             for i in range(8)]
    record_triage(store_url, write_triage(tmp_path / "t", rule, cases), site="X", command=["test"])
    with MonitorStore(store_url) as store:
        ids = [c["case_id"] for c in store.cases()]
        accepted = [c for c in ids if int(c[1:]) % 2]
        store.add_labels([{"case": c, "dice": None, "failure": 1, "loss": 1.0} for c in accepted], source="audit",
                         command=["test"])
        assert store.verify().ok
    source = sorted(range(8), key=lambda k: ids[k])  # the run's rows in case-id order, over the same ids
    assert source != list(range(8))
    _place_rows(store_url, source)
    with MonitorStore(store_url, read_only=True) as store:
        labelled = {c["case_id"] for c in store.cases() if c["loss"] is not None}
        res = store.verify()
    assert labelled != set(accepted)  # the failures now sit on other cases ...
    assert not any("were edited or deleted" in p for p in res.problems)  # ... with every rows digest intact
    assert any("out of the order it wrote them in" in p for p in res.problems)  # the order (review 61) ...
    assert not res.ok and any("(label) now belong to other cases" in p for p in res.problems), res.problems
