"""Review 61 of monitoring: each test failed before its fix, or pins behaviour against an independent computation.

- a store written before monai-unc stored a negative zero as ``0.0`` holds audit digests computed over ``-0.0``;
  SQLite reads the value back as ``0.0``, so ``monitor verify`` reported such an untouched store as tampered;
- ``verify`` accepted a run's case rows re-sorted by case id, and two cases of a run whose row ids were swapped (the
  stream every alarm tests reordered): the within-run order was checked against two orders, either accepted;
"""

from __future__ import annotations

import json
import sqlite3
from unittest import mock

import pytest

import monai_unc.monitoring.store as store_module
from monai_unc.monitoring import MonitorStore
from monai_unc.monitoring.store import CaseRecord, entry_hash, rule_body_digest

from ._stream import raw_sql

RULE = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
RULE["digest"] = rule_body_digest(RULE)


def _cases(ids, scores):
    return [CaseRecord(c, "A", None, "2026-01-31T00:00:00+00:00", s, float("nan"), float("nan"),
                       "accept" if s < 0.5 else "review", "accepted" if s < 0.5 else "above_threshold", "r",
                       RULE["digest"], None) for c, s in zip(ids, scores)]


def _record(url, ids, scores, source="jan"):
    with MonitorStore(url) as store:
        store.record_run(RULE, _cases(ids, scores), source_digest=source, folder=f"t_{source}",
                         triaged_at="2026-01-31T00:00:00+00:00", model_digest=None, command=["test"])


def _problems(url):
    with MonitorStore(url, read_only=True) as store:
        return list(store.verify().problems)


def _old_writer():
    """The writes of monai-unc before review 60's fix: a negative zero stored, and hashed, as it came."""
    return mock.patch.object(store_module, "_unsigned_zero", lambda v: v)


# ------------------------------------------------------------------------------------------ 1. an old -0.0 store
def test_a_store_written_with_negative_zeros_before_the_fix_verifies(store_url):
    with _old_writer():
        _record(store_url, ["a", "b", "c", "d"], [-0.0, 0.2, 0.0, -0.0])
        with MonitorStore(store_url) as store:
            store.add_labels([{"case": "a", "dice": -0.0, "failure": None, "loss": 1.0},
                              {"case": "b", "dice": 0.9, "failure": None, "loss": -0.0}], source="audit.csv")
    assert _problems(store_url) == []  # SQLite: the rows of both entries were reported edited


def test_a_column_of_many_negative_zeros_verifies(store_url):
    """More zeros than are tried one by one: those of one column share the sign one computation gave them."""
    with _old_writer():
        _record(store_url, [f"c{i:02d}" for i in range(40)], [-0.0] * 30 + [0.1 * k for k in range(1, 11)])
    assert _problems(store_url) == []


@pytest.mark.parametrize("edit", ["UPDATE cases SET score = 0.0 WHERE case_id = 'b'",
                                  "UPDATE cases SET score = 1e-300 WHERE case_id = 'a'",
                                  "UPDATE cases SET score = 0.6 WHERE case_id = 'c'",
                                  "UPDATE labels SET dice = 0.5 WHERE dice = 0",
                                  "UPDATE labels SET loss = 0.0 WHERE loss = 1"])
def test_an_old_store_with_negative_zeros_still_reports_an_edited_value(store_url, edit):
    with _old_writer():
        _record(store_url, ["a", "b", "c", "d"], [-0.0, 0.2, 0.0, -0.0])
        with MonitorStore(store_url) as store:
            store.add_labels([{"case": "a", "dice": -0.0, "failure": None, "loss": 1.0}], source="audit.csv")
    raw_sql(store_url, edit)
    assert any("were edited or deleted" in p for p in _problems(store_url)), edit


# -------------------------------------------------------------------------------------- 2. the order of a run
def _case_rows(url):
    with MonitorStore(url, read_only=True) as store:
        return [(r["row"], r["case_id"]) for r in store.cases()]


def _permute(url, new_ids):
    """Give the case rows new ids (``{old: new}``), each row otherwise unchanged: every digest of its rows holds."""
    if url.startswith("postgresql://"):  # an identity column: its values are set by hand once it is dropped
        raw_sql(url, "ALTER TABLE cases ALTER COLUMN id DROP IDENTITY IF EXISTS")
    for old in new_ids:
        raw_sql(url, f"UPDATE cases SET id = {-old} WHERE id = {old}")
    for old, new in new_ids.items():
        raw_sql(url, f"UPDATE cases SET id = {new} WHERE id = {-old}")


def test_a_run_re_sorted_by_case_id_is_reported(store_url):
    ids = [f"case_{i:02d}" for i in range(8)]
    _record(store_url, ids, [0.05 * i for i in range(8)])
    rows = _case_rows(store_url)
    assert [c for _, c in rows] != sorted(ids)  # written in the order of a hash of the ids
    slots = sorted(r for r, _ in rows)
    _permute(store_url, {r: slots[sorted(ids).index(c)] for r, c in rows})
    assert [c for _, c in _case_rows(store_url)] == sorted(ids)
    assert any("out of the order it wrote them in" in p for p in _problems(store_url))  # it verified


def test_two_cases_of_a_run_whose_row_ids_were_swapped_are_reported(store_url):
    _record(store_url, ["a", "b", "c"], [0.1, 0.2, 0.3])
    _record(store_url, ["x", "y"], [0.4, 0.6], source="feb")
    assert _problems(store_url) == []
    rows = _case_rows(store_url)
    (r1, _), (r2, _) = rows[3:]  # February's two cases: either order is that of their ids or of their hashes
    _permute(store_url, {r1: r2, r2: r1})
    assert [c for _, c in _case_rows(store_url)][3:] == [c for _, c in rows][3:][::-1]
    assert any("out of the order it wrote them in" in p for p in _problems(store_url))  # it verified


def _drop_order_digests(path):
    """The store as monai-unc wrote it before ``record`` entries held ``order_digest``: the chain recomputed."""
    conn = sqlite3.connect(path)
    prev = store_module.GENESIS
    for row in conn.execute("SELECT seq, at, actor, host, version, command, action, details, prev_hash FROM audit "
                            "ORDER BY seq").fetchall():
        entry = dict(zip(("seq", "at", "actor", "host", "version", "command", "action", "details", "prev_hash"), row))
        details = json.loads(entry["details"])
        details.pop("order_digest", None)
        entry["details"], entry["prev_hash"] = store_module._canonical(details), prev
        prev = entry_hash(entry)
        conn.execute("UPDATE audit SET details = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                     (entry["details"], entry["prev_hash"], prev, entry["seq"]))
    conn.commit()
    conn.close()


def test_a_store_written_before_the_order_digest_verifies_and_keeps_the_earlier_check(tmp_path):
    url = str(tmp_path / "monitor.db")
    ids = [f"case_{i:02d}" for i in range(8)]
    _record(url, ids, [0.05 * i for i in range(8)])
    _drop_order_digests(url)
    assert _problems(url) == []
    rows = _case_rows(url)
    slots = sorted(r for r, _ in rows)
    _permute(url, {r: slots[sorted(ids).index(c)] for r, c in rows})  # case-id order, as earlier versions wrote it
    assert _problems(url) == []
    rows = _case_rows(url)
    _permute(url, {rows[0][0]: rows[1][0], rows[1][0]: rows[0][0]})  # neither hash nor case-id order
    assert any("out of the order the store writes them in" in p for p in _problems(url))
