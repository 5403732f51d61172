"""A hostile review of the monitoring store over months: servers, several writers, moved files; each test failed
before its fix.

- PostgreSQL floats are read back exactly whatever the server's ``extra_float_digits`` (a legacy 0 rounded them:
  ``verify`` reported untouched rows as edited and decisions already recorded were recorded again);
- a PostgreSQL writer reads in a read-committed transaction whatever the server's default isolation (under
  ``repeatable read`` / ``serializable`` a writer that waited for another failed with a duplicate key) and waits for
  another writer ``timeout`` seconds at most (it waited forever);
- ``monitor label`` and ``monitor report`` read the store at one moment (a run recorded in between gave a
  ``KeyError`` traceback, or a page whose audit trail lists a run its statistics leave out), and a label whose case
  was recorded while the labels were read is refused (it was stored with the placeholder loss 0); ``monitor label``
  holds no connection while it reads the labels (a server's ``idle_session_timeout`` failed the batch);
- an image that is no longer there, without a sidecar, is one error line (its cases went to ``--site`` or
  ``unknown`` without a word and the decisions recorded before were recorded again under the new site);
- a run's model digest is that of its predictions, never the rule's calibration model;
- ``monitor record`` counts the sites of the cases it wrote, and the dashboard says when its audit trail is cut.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
import uuid

import pytest

from monai_unc import cli
from monai_unc.monitoring import AuditEntry, MonitorStore, VerifyResult, read_triage_run
from monai_unc.monitoring.store import CaseRecord
from monai_unc.report.monitor import build_monitor_page
from monai_unc.workflows import monitor as workflow

from ._stream import make_rule, write_triage

#: the writers' lock of a PostgreSQL store (MonitorStore._transaction)
_WRITERS_LOCK = 7263418


def _pg_url(base: str, **settings: str) -> str:
    """A fresh schema of the session's server, with settings as the server's configuration would give them."""
    import psycopg

    schema = "t" + uuid.uuid4().hex[:12]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    options = "%20".join([f"-csearch_path%3D{schema}", *(f"-c{k}%3D{v}" for k, v in settings.items())])
    return f"{base}?options={options}"


def _case(rule: dict, case_id: str, score: float, site: str = "A") -> CaseRecord:
    return CaseRecord(case_id, site, None, "2026-03-01T00:00:00+00:00", score, float("nan"), 0.8123456789012345,
                      "accept", "accepted", "accepted", rule["digest"], None)


def _record(store: MonitorStore, rule: dict, cases: list[CaseRecord], source: str) -> None:
    store.record_run(rule, cases, source_digest=source, folder=source, triaged_at="t", model_digest=None,
                     command=["test"])


# ---------------------------------------------------------------------------------------------- PostgreSQL servers
def test_floats_are_read_back_exactly_whatever_the_servers_extra_float_digits(postgres_url):
    url = _pg_url(postgres_url, extra_float_digits="0")
    rule = make_rule([0.1, 0.2, 0.3])
    scores = {"001": 0.12345678901234567, "002": 0.30000000000000004}
    with MonitorStore(url) as store:
        _record(store, rule, [_case(rule, c, s) for c, s in scores.items()], "january")
        # the growing predictions folder triaged again: the same decisions, one new case
        _record(store, rule, [_case(rule, c, s) for c, s in {**scores, "003": 0.25}.items()], "february")
        cases = store.cases()
        assert [c["case_id"] for c in cases] == ["001", "002", "003"]  # each decision once (was 5 rows)
        assert [c["score"] for c in cases] == [*scores.values(), 0.25]
        result = store.verify()
        assert result.ok, result.problems  # was: "the rows written by audit entry 2 (record) were edited"


def _wait_for_a_lock_waiter(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(600):
            if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND wait_event = 'advisory'").fetchone()[0]:
                return
            time.sleep(0.05)
    raise AssertionError("the second writer never waited for the writers' lock")


@pytest.mark.parametrize("isolation", ["serializable", "repeatable%5C%20read"])
def test_a_writer_that_waited_for_another_sees_its_commit(postgres_url, isolation):
    url = _pg_url(postgres_url, default_transaction_isolation=isolation)
    rule = make_rule([0.1, 0.2, 0.3])
    first, second = MonitorStore(url), MonitorStore(url)
    inside, release, errors = threading.Event(), threading.Event(), []
    real = first._recorded_decisions

    def held(*args):  # the first writer pauses inside its transaction, holding the writers' lock
        inside.set()
        release.wait(60)
        return real(*args)

    first._recorded_decisions = held

    def record(store: MonitorStore, source: str) -> None:
        try:
            _record(store, rule, [_case(rule, "001", 0.2)], source)
        except Exception as e:  # noqa: BLE001 (checked below)
            errors.append(e)

    try:
        t1 = threading.Thread(target=record, args=(first, "a"))
        t1.start()
        assert inside.wait(60)
        t2 = threading.Thread(target=record, args=(second, "b"))
        t2.start()
        _wait_for_a_lock_waiter(url)
        release.set()
        t1.join(60)
        t2.join(60)
    finally:
        release.set()
        first.close()
        second.close()
    assert errors == []  # was: duplicate key value violates unique constraint "audit_pkey" (or "rules_pkey")
    with MonitorStore(url, read_only=True) as store:
        assert len(store.cases()) == 1 and [r["n_cases"] for r in store.runs()] == [1, 0]  # the decision once
        assert store.verify().ok


def test_a_writer_waits_for_another_timeout_seconds_at_most(store_url):
    MonitorStore(store_url).close()
    if store_url.startswith("postgresql://"):
        import psycopg

        holder = psycopg.connect(store_url)  # a writer stuck inside its transaction (a client the network cut off)
        holder.execute(f"SELECT pg_advisory_xact_lock({_WRITERS_LOCK})")
    else:
        holder = sqlite3.connect(store_url, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
    rule = make_rule([0.1])
    result: dict = {}

    def record() -> None:
        start = time.monotonic()
        try:
            with MonitorStore(store_url, timeout=1) as store:
                _record(store, rule, [_case(rule, "001", 0.2)], "a")
            result["out"] = "recorded"
        except ValueError as e:
            result["out"] = str(e)
        result["seconds"] = time.monotonic() - start

    t = threading.Thread(target=record, daemon=True)
    t.start()
    t.join(30)
    try:
        assert "out" in result, "the writer still waits after 30 s (timeout 1 s)"
        assert "database is locked" in result["out"] and result["seconds"] < 20, result
    finally:
        holder.close()
        t.join(30)


# ---------------------------------------------------------------------------------------------- reads at one moment
def _january_then_a_recertified_february(tmp_path):
    db = str(tmp_path / "m.db")
    write_triage(tmp_path / "jan", make_rule([0.1, 0.2, 0.3]), [{"case": "001", "score": 0.2}])
    workflow.record_triage(db, tmp_path / "jan", site="A", command=["test"])
    # far higher scores than the 50 calibration cases: an alarm (in any order of the run's cases)
    write_triage(tmp_path / "feb", make_rule([i / 50 for i in range(50)], tag="recertified"),
                 [{"case": f"1{i:02d}", "score": 5.0 + i} for i in range(40)])
    return db


def test_label_and_report_read_the_store_at_one_moment(tmp_path, monkeypatch):
    """Another process records February (a recertified rule) right after this one read the rules."""
    db = _january_then_a_recertified_february(tmp_path)
    real = MonitorStore.rules
    state = {"done": False}

    def rules_then_a_record(self):
        out = real(self)
        if not state["done"]:
            state["done"] = True
            workflow.record_triage(db, tmp_path / "feb", site="A", command=["other-process"])
        return out

    monkeypatch.setattr(MonitorStore, "rules", rules_then_a_record)
    (tmp_path / "labels.csv").write_text("case,dice\n100,0.9\n")
    with pytest.raises(ValueError, match=r"recorded while the labels were read \(\['100'\]\)"):  # was a KeyError
        workflow.record_labels(db, tmp_path / "labels.csv", command=["test"])

    db = _january_then_a_recertified_february(tmp_path / "report")
    state["done"] = False
    html = workflow.write_dashboard(db, tmp_path / "d.html").value.read_text()
    # the page shows the store at one moment: not February's audit entry without February's streams and alarm
    assert "other-process" not in html and "distribution changed" not in html
    monkeypatch.setattr(MonitorStore, "rules", real)
    html = workflow.write_dashboard(db, tmp_path / "d.html").value.read_text()
    assert "other-process" in html and "distribution changed" in html


def test_a_label_of_a_case_recorded_while_the_labels_are_read_is_refused(tmp_path, monkeypatch):
    """It was stored with the placeholder loss 0 given to cases not in the store: an audited failure as a success."""
    db = str(tmp_path / "m.db")
    rule = make_rule([0.1, 0.2, 0.3])
    write_triage(tmp_path / "jan", rule, [{"case": "001", "score": 0.2}])
    workflow.record_triage(db, tmp_path / "jan", site="A", command=["test"])
    write_triage(tmp_path / "feb", rule, [{"case": "002", "score": 0.2}])
    (tmp_path / "labels.csv").write_text("case,dice\n001,0.9\n002,0.3\n")  # 002: dice 0.3 < 0.8, a failure
    real = workflow.read_label_table

    def read_while_february_is_recorded(path):
        workflow.record_triage(db, tmp_path / "feb", site="A", command=["other-process"])
        return real(path)

    monkeypatch.setattr(workflow, "read_label_table", read_while_february_is_recorded)
    with pytest.raises(ValueError, match=r"1 labelled case\(s\) were recorded while the labels were read"):
        workflow.record_labels(db, tmp_path / "labels.csv", command=["test"])
    monkeypatch.setattr(workflow, "read_label_table", real)
    assert workflow.record_labels(db, tmp_path / "labels.csv", command=["test"]).value == 2  # run again
    with MonitorStore(db, read_only=True) as store:
        assert {c["case_id"]: c["loss"] for c in store.cases()} == {"001": 0.0, "002": 1.0}


def test_labels_read_for_longer_than_the_servers_idle_session_timeout_are_recorded(postgres_url, tmp_path,
                                                                                     monkeypatch):
    """The connection stayed open, idle, while the labels were read and the label maps compared: a server's
    ``idle_session_timeout`` closed it and the batch failed after the work."""
    url = _pg_url(postgres_url, idle_session_timeout="1000")
    write_triage(tmp_path / "jan", make_rule([0.1, 0.2]), [{"case": "001", "score": 0.2}])
    workflow.record_triage(url, tmp_path / "jan", site="A", command=["test"])
    (tmp_path / "labels.csv").write_text("case,dice\n001,0.9\n")
    real = workflow.read_label_table

    def slow(path):  # label maps being compared
        time.sleep(2.5)
        return real(path)

    monkeypatch.setattr(workflow, "read_label_table", slow)
    assert workflow.record_labels(url, tmp_path / "labels.csv", command=["test"]).value == 1


# ---------------------------------------------------------------------------------------------- moved files
def test_an_archived_image_without_its_sidecar_is_one_line_not_another_site(tmp_path, capsys):
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    sites = {"001": "Centre A", "002": "Centre B", "003": "Centre A"}
    for cid, site in sites.items():
        (imgs / f"{cid}.nii.gz").write_bytes(b"")
        (imgs / f"{cid}.json").write_text(json.dumps({"InstitutionName": site}))
    rule = make_rule([0.1, 0.2, 0.3])
    images = {c: str(imgs / f"{c}.nii.gz") for c in sites}
    db = str(tmp_path / "m.db")
    write_triage(tmp_path / "jan", rule, [{"case": "001", "score": 0.2}, {"case": "002", "score": 0.25}],
                 images=images)
    assert workflow.record_triage(db, tmp_path / "jan", command=["test"]).lines[0].startswith(
        "recorded 2 case(s) from 2 site(s)")
    write_triage(tmp_path / "feb", rule, [{"case": "001", "score": 0.2}, {"case": "002", "score": 0.25},
                                          {"case": "003", "score": 0.3}], images=images)
    shutil.move(imgs, tmp_path / "archive")  # archived before February's run was recorded
    capsys.readouterr()
    assert cli.main(["monitor", "record", str(tmp_path / "feb"), "--db", db]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "001.nii.gz" in err[0] and "is not there" in err[0] and "--sites" in err[0], err
    (tmp_path / "sites.csv").write_text("case,site\n" + "".join(f"{c},{s}\n" for c, s in sites.items()))
    line = workflow.record_triage(db, tmp_path / "feb", sites=tmp_path / "sites.csv", command=["test"]).lines[0]
    assert line.startswith("recorded 1 case(s) from 1 site(s)"), line  # the sites of the case written only
    with MonitorStore(db, read_only=True) as store:
        assert [(c["case_id"], c["site"]) for c in store.cases()] == [("001", "Centre A"), ("002", "Centre B"),
                                                                      ("003", "Centre A")]


def test_an_explicit_site_covers_the_cases_whose_image_is_gone(tmp_path):
    """``--site`` is the user's word for the cases whose site is not otherwise known: an archived image takes it."""
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    rule = make_rule([0.1, 0.2, 0.3])
    write_triage(tmp_path / "run", rule, [{"case": "001", "score": 0.2}],
                 images={"001": str(imgs / "001.nii.gz")})  # never there (moved before recording)
    with pytest.raises(ValueError, match="is not there"):
        workflow.record_triage(str(tmp_path / "a.db"), tmp_path / "run", command=["test"])
    workflow.record_triage(str(tmp_path / "b.db"), tmp_path / "run", site="Centre C", command=["test"])
    with MonitorStore(str(tmp_path / "b.db"), read_only=True) as store:
        assert [(c["case_id"], c["site"]) for c in store.cases()] == [("001", "Centre C")]


def test_record_counts_the_sites_of_the_cases_it_wrote(tmp_path):
    """The skipped (already recorded) cases' sites were counted: 'recorded 1 case(s) from 2 site(s)'."""
    db = str(tmp_path / "m.db")
    rule = make_rule([0.1, 0.2, 0.3])
    (tmp_path / "sites.csv").write_text("case,site\n001,Centre A\n002,Centre B\n003,Centre A\n")
    write_triage(tmp_path / "jan", rule, [{"case": "001", "score": 0.2}, {"case": "002", "score": 0.25}])
    lines = workflow.record_triage(db, tmp_path / "jan", sites=tmp_path / "sites.csv", command=["test"]).lines
    assert lines == ("recorded 2 case(s) from 2 site(s) as run 1",)
    write_triage(tmp_path / "feb", rule, [{"case": "001", "score": 0.2}, {"case": "002", "score": 0.25},
                                          {"case": "003", "score": 0.3}])
    lines = workflow.record_triage(db, tmp_path / "feb", sites=tmp_path / "sites.csv", command=["test"]).lines
    assert lines[0] == "recorded 1 case(s) from 1 site(s) as run 2; 2 already recorded (skipped)"
    # no prediction file to tell a new scan with the same values from the same one (test_reused_case_id.py)
    assert lines[1:] and lines[1].startswith("warning: 2 of the case(s) skipped as already recorded"), lines
    assert workflow.record_triage(db, tmp_path / "feb", command=["test"]).lines[0].endswith("nothing written")


def test_the_model_of_a_run_is_that_of_its_predictions_never_the_rules(tmp_path):
    rule = make_rule([0.1, 0.2, 0.3])  # its calibration model: net.pt, with its weight digest
    folder = write_triage(tmp_path / "t", rule, [{"case": "001", "score": 0.2}])
    doc = json.loads((folder / "triage.json").read_text())
    doc["fingerprint"] = {"status": "mismatch", "allowed_mismatch": True,
                          "predictions": {"producer": "monai-unc infer", "checkpoints": ["other.pt"]}}
    (folder / "triage.json").write_text(json.dumps(doc))
    run = read_triage_run(folder)
    assert run.model_digest is None and run.cases[0].model_digest is None  # not the rule's: unknown


def test_the_dashboard_says_when_its_audit_trail_is_cut(tmp_path):
    entries = [AuditEntry(i, "2026-03-01T00:00:00+00:00", "qc", "host", "0.2", "monai-unc monitor record",
                          "record", "{}", "0" * 64, f"{i:064x}") for i in range(1, 1201)]
    page = build_monitor_page([], entries, VerifyResult(True, 1200, entries[-1].hash), tmp_path / "d.html")
    html = page.read_text()
    assert "the last 500 of 1200 entries (from entry 701)" in html
    page = build_monitor_page([], entries[:500], VerifyResult(True, 500, entries[499].hash), tmp_path / "d.html")
    assert "entries (from entry" not in page.read_text()


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), -1.0, True, "60"])
def test_a_timeout_that_is_no_finite_number_of_seconds_is_refused(tmp_path, timeout):
    """Found by hostile review: inf / NaN failed with an OverflowError / int-conversion traceback, -1 was taken."""
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds"):
        MonitorStore(str(tmp_path / "m.db"), timeout=timeout)
    assert not (tmp_path / "m.db").exists()


def test_a_timeout_of_weeks_still_writes(store_url):
    """PostgreSQL's lock_timeout takes at most 2^31 - 1 ms: a timeout of 35 days failed every write (found by
    hostile review; before the lock timeout the writer waited as long as it had to)."""
    rule = make_rule([0.1, 0.2, 0.3])
    with MonitorStore(store_url, timeout=3e6) as store:
        _record(store, rule, [_case(rule, "001", 0.2)], "a" * 64)
        assert len(store.cases()) == 1
