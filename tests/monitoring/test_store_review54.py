"""Hostile review 54 of the monitoring store: what its writers take in; each test failed before its fix.

- ``add_labels`` wrote a Dice outside ``[0, 1]`` or a failure of 2 that every later read refused as "edited outside
  the store" (the append-only store unreadable for good), cut a failure of 0.5 to 0, parsed text as numbers, said
  ``KeyError`` for a label without its loss and refused a numpy integer run id;
- ``record_run`` stored a text score (``verify`` then reported the store as tampered) and a decision other than
  ``accept`` / ``review`` (counted as referred, left out of the risk test), and a ``numpy.float32`` score failed with
  JSON's ``TypeError``;
- the store module imported torch (through ``monai_unc._utils``), though its writers are to start without it.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from monai_unc.monitoring.store import CaseRecord, MonitorStore

from ._stream import make_rule

ROOT = Path(__file__).resolve().parents[2]


def _store_with_cases(url: str) -> tuple[MonitorStore, dict, CaseRecord]:
    rule = make_rule([0.1, 0.2])
    case = CaseRecord("a", "A", None, "2026-01-31T00:00:00+00:00", 0.2, float("nan"), float("nan"), "accept",
                      "accepted", "accepted", rule["digest"], None)
    store = MonitorStore(url)
    store.record_run(rule, [case, dataclasses.replace(case, case_id="b")], source_digest="x", folder="f",
                     triaged_at="t", model_digest=None, command=["x"])
    return store, rule, case


@pytest.mark.parametrize(("field", "value", "error"), [
    ("dice", 1.5, ValueError), ("dice", -0.1, ValueError), ("dice", float("inf"), ValueError),
    ("dice", float("nan"), ValueError), ("dice", "0.5", TypeError), ("dice", True, TypeError),
    ("failure", 2, ValueError), ("failure", 0.5, TypeError), ("failure", True, TypeError), ("failure", "1", TypeError),
    ("loss", "1", TypeError), ("loss", True, TypeError), ("loss", None, TypeError), ("loss", 1.5, ValueError),
    ("case_row", "1", TypeError), ("case_row", True, TypeError), ("case_row", -1, ValueError),
])
def test_add_labels_refuses_what_the_store_cannot_read_back(store_url, field, value, error):
    store, _, _ = _store_with_cases(store_url)
    with store:
        label = {"case": "a", "dice": None, "failure": 1, "loss": 1.0, field: value}
        with pytest.raises(error, match=f"the {field} of case 'a'"):
            store.add_labels([label], source="audit.csv")
        rows = store.cases()  # nothing written: the store still reads
        assert all(r["n_labels"] == 0 for r in rows)
        assert store.verify().ok


def test_add_labels_names_a_missing_loss(store_url):
    store, _, _ = _store_with_cases(store_url)
    with store, pytest.raises(TypeError, match="the loss of case 'a'"):
        store.add_labels([{"case": "a", "dice": 0.5, "failure": None}], source="audit.csv")


def test_add_labels_takes_numpy_numbers(store_url):
    """numpy integer scalars are accepted where Python ints are (the run id, the case row, the failure)."""
    store, _, _ = _store_with_cases(store_url)
    with store:
        row = next(r["row"] for r in store.cases() if r["case_id"] == "a")
        n = store.add_labels([{"case": "a", "dice": np.float32(0.5), "failure": np.int64(1), "loss": np.float64(1.0),
                               "run": np.int64(1), "case_row": np.int64(row)}], source="audit.csv")
        labelled = [(r["case_id"], r["dice"], r["failure"], r["loss"]) for r in store.cases() if r["n_labels"]]
        assert n == 1 and labelled == [("a", 0.5, 1, 1.0)] and store.verify().ok


@pytest.mark.parametrize(("field", "value", "error"), [
    ("score", "0.5", TypeError), ("score", True, TypeError), ("image_z_max", "2", TypeError),
    ("expected_dice", b"1", TypeError), ("score", 1j, TypeError),
    ("decision", "Accept", ValueError), ("decision", "maybe", ValueError),
])
def test_record_run_refuses_values_the_statistics_misread(store_url, field, value, error):
    rule = make_rule([0.1, 0.2])
    case = CaseRecord("a", "A", None, "2026-01-31T00:00:00+00:00", 0.2, float("nan"), float("nan"), "accept",
                      "accepted", "accepted", rule["digest"], None)
    with MonitorStore(store_url) as store:
        with pytest.raises(error, match=f"the {field} of case 'a'"):
            store.record_run(rule, [dataclasses.replace(case, **{field: value})], source_digest="x", folder="f",
                             triaged_at="t", model_digest=None)
        assert store.cases() == [] and store.runs() == []


def test_record_run_refuses_a_code_that_contradicts_the_decision(store_url):
    rule = make_rule([0.1, 0.2])
    case = CaseRecord("a", "A", None, "2026-01-31T00:00:00+00:00", 0.2, float("nan"), float("nan"), "accept",
                      "above_threshold", "high", rule["digest"], None)
    with MonitorStore(store_url) as store:
        with pytest.raises(ValueError, match="the code of case 'a'"):
            store.record_run(rule, [case], source_digest="x", folder="f", triaged_at="t", model_digest=None)
        with pytest.raises(ValueError, match="the code of case 'a'"):
            store.record_run(rule, [dataclasses.replace(case, decision="review", code="accepted")],
                             source_digest="x", folder="f", triaged_at="t", model_digest=None)
        assert store.cases() == []


def test_record_run_takes_numpy_scores(store_url):
    """A numpy float32 score was a JSON TypeError (the audit digest); it is stored as the float it holds."""
    rule = make_rule([0.1, 0.2])
    case = CaseRecord("a", "A", None, "2026-01-31T00:00:00+00:00", np.float32(0.25), np.float16(1.5), np.int64(1),
                      "accept", "accepted", "accepted", rule["digest"], None)
    with MonitorStore(store_url) as store:
        store.record_run(rule, [case], source_digest="x", folder="f", triaged_at="t", model_digest=None)
        (row,) = store.cases()
        assert (row["score"], row["image_z_max"], row["expected_dice"]) == (0.25, 1.5, 1.0)
        assert store.verify().ok
        # the same decision again (another triage folder) is the one recorded
        assert store.record_run(rule, [dataclasses.replace(case, score=0.25)], source_digest="y", folder="g",
                                triaged_at="t", model_digest=None)[1]
        assert [r["n_cases"] for r in store.runs()] == [1, 0]


def test_an_integer_score_verifies(store_url):
    """A Python int score (a count) was hashed as ``1`` and read back as ``1.0``: verify reported the untouched
    store's rows as edited."""
    rule = make_rule([0.1, 0.2])
    case = CaseRecord("a", "A", None, "2026-01-31T00:00:00+00:00", 1, 2, 0, "accept", "accepted", "accepted",
                      rule["digest"], None)
    with MonitorStore(store_url) as store:
        store.record_run(rule, [case], source_digest="x", folder="f", triaged_at="t", model_digest=None)
        assert store.verify().problems == ()
        assert [(r["score"], r["image_z_max"], r["expected_dice"]) for r in store.cases()] == [(1.0, 2.0, 0.0)]


def test_the_store_module_starts_without_torch(tmp_path):
    """The writers (a cron job, a second triage host) import the store only: no torch (1.5 s, GBs on disk)."""
    code = ("import sys\n"
            "from monai_unc.monitoring.store import MonitorStore\n"
            f"with MonitorStore({str(tmp_path / 'm.db')!r}) as s:\n"
            "    assert s.verify().ok and s.verify(expect_head=s.verify().head).ok\n"
            "    assert 'torch' not in sys.modules, 'torch imported'\n"
            "    try:\n"  # a wrong head is still marked as the parameter's error (the command line names the option)
            "        s.verify(expect_head='nope')\n"
            "    except ValueError as e:\n"
            "        assert getattr(e, 'parameter', None) == 'expect_head', e\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.parametrize("timeout", [3e6, 1e9])
def test_a_long_sqlite_timeout_still_waits(tmp_path, timeout):
    """A timeout above SQLite's largest busy timeout (2^31 - 1 ms, 24.8 days) set none at all (0): a writer failed
    at once with "database is locked" instead of waiting for the other writer."""
    import sqlite3
    import threading

    url = str(tmp_path / "m.db")
    MonitorStore(url).close()
    with MonitorStore(url, timeout=timeout) as store:
        assert store._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 2**31 - 1
        other = sqlite3.connect(url, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock for a moment
        threading.Timer(0.5, lambda: other.execute("ROLLBACK")).start()
        rule = make_rule([0.1])
        case = CaseRecord("a", "A", None, "t", 0.2, float("nan"), float("nan"), "accept", "accepted", "accepted",
                          rule["digest"], None)
        assert store.record_run(rule, [case], source_digest="x", folder="f", triaged_at="t", model_digest=None)[1]
        other.close()
    with MonitorStore(url, timeout=timeout, read_only=True) as reader:
        assert reader._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 2**31 - 1


@pytest.mark.parametrize("source", ["a\x00b", "x" * 1001, "\udcf4.csv", 5])
def test_add_labels_checks_its_source_even_without_labels(tmp_path, source):
    """An empty batch wrote any source into the audit log; a source that is not UTF-8 was a UnicodeEncodeError."""
    with MonitorStore(str(tmp_path / "m.db")) as store:
        with pytest.raises(ValueError, match="source must be"):
            store.add_labels([], source=source)
        assert [e.action for e in store.audit_log()] == ["migrate"]
