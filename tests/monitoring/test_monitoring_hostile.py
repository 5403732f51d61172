"""A hostile review of the monitoring: each test failed before its fix, or checks against an independent computation.

- the risk alarm's lower confidence bound is reported as the largest bound so far (checked against a brute-force
  product over the grid), so an alarm never comes with a bound under the target;
- a site named like the pooled stream is refused, and the dashboard counts the cases of sites whose name starts
  with "(";
- cases without a defined score are said in ``monitor status``, not skipped in silence;
- the read-only commands refuse a database that is not a monitoring store (they neither write into it nor report
  "no cases recorded" on it);
- a triage folder recorded again after it grew (triage run again on a folder of predictions that gained cases)
  records its new cases only;
- an audited label of a case id that several sites use goes to the site it names, never to another site's case;
- a damaged store is one error line with exit status 2 (never 1, which means "alarm" or "tampered");
- the risk alarm takes the labels in the order they arrived, so an alarm once raised stays raised;
- verify re-hashes a run's rows in code point order whatever the server's collation;
- an output file that is the store itself is refused.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import sqlite3
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.metrics.monitoring import risk_bets, risk_test
from monai_unc.monitoring import ALL_SITES, MonitorStore, monitor_status, read_triage_run, status_table
from monai_unc.monitoring.status import stream_seed
from monai_unc.workflows.monitor import record_labels, record_triage, store_status, write_dashboard

from ._stream import make_rule, raw_sql, write_triage
from ._writer import record_runs


def _tables(url: str) -> set[str]:
    """The tables of a database, read outside the store."""
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute("SELECT table_name FROM information_schema.tables "
                                "WHERE table_schema = current_schema()").fetchall()
        return {r[0] if isinstance(r[0], str) else bytes(r[0]).decode() for r in rows}
    conn = sqlite3.connect(url)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


# ------------------------------------------------------------------------------------------ the risk lower bound
def _brute_lower_bound(x: np.ndarray, target: float, alpha: float, resolution: int) -> np.ndarray:
    """Per n, the largest grid risk m with prod_{i <= n} (1 + lam_i (x_i - m)) >= 1 / alpha (0 when none)."""
    lam = risk_bets(x, target)
    grid = sorted(set(np.linspace(0, 1, resolution + 1).tolist()) | {target})
    out = []
    for n in range(len(x)):
        rejected = [m for m in grid if math.prod(1 + lam[i] * (x[i] - m) for i in range(n + 1))
                    >= (1 / alpha) * (1 - 1e-12)]
        out.append(max(rejected) if rejected else 0.0)
    return np.array(out)


def test_the_risk_bound_after_an_alarm_stays_at_or_above_the_target():
    """A burst of 7 failures raises the alarm; 30 successes after it pull the pointwise bound back under the target.

    Before the fix the result (and ``monitor status``: "the accepted cases' risk exceeds the target 0.1 (lower
    confidence bound 0.032)") reported the last pointwise bound, under the target although the alarm stands; the
    largest bound so far is as valid (every bound holds at once) and is the one reported.
    """
    x = np.array([1.0] * 7 + [0.0] * 30)
    r = risk_test(x, target=0.1, alpha=0.05)
    pointwise = _brute_lower_bound(x, 0.1, 0.05, 2000)
    assert r.alarm == 6 and pointwise[-1] < 0.1  # the situation: the pointwise bound fell back
    np.testing.assert_allclose(r.lower_bound, np.maximum.accumulate(pointwise), atol=1e-12)
    assert (r.lower_bound[r.alarm:] >= 0.1).all()
    rows = [{"case_id": f"c{i:02d}", "site": "A", "triaged_at": "t", "score": 0.0, "image_z_max": math.nan,
             "decision": "accept", "rule_digest": "r", "loss": float(v)} for i, v in enumerate(x)]
    groups = monitor_status(rows, {"r": {"calibration_scores": [0.0, 1.0], "target_risk": 0.1}}, 0.05)
    (alarm,) = [line for line in status_table(groups) if "harmful shift" in line]
    bound = float(alarm.split("lower confidence bound ")[1].split(")")[0])
    assert bound >= 0.1


# ------------------------------------------------------------------------------------------------ site names
def test_a_site_named_like_the_pooled_stream_is_refused(tmp_path):
    rule = make_rule([0.1, 0.2, 0.3])
    folder = write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.2}, {"case": "b", "score": 0.1}])
    db = str(tmp_path / "m.db")
    with pytest.raises(ValueError, match="reserved"):
        record_triage(db, folder, site=ALL_SITES)
    run = read_triage_run(folder, site="B")
    with MonitorStore(db) as store:  # the store refuses it too (the API, not only the command)
        cases = [run.cases[0].__class__(**{**run.cases[0].__dict__, "site": ALL_SITES})]
        with pytest.raises(ValueError, match="reserved"):
            store.record_run(run.rule, cases, source_digest="x", folder="f", triaged_at="t", model_digest=None)
        assert store.cases() == []


def test_the_dashboard_counts_sites_whose_name_starts_with_a_parenthesis(tmp_path):
    rule = make_rule([0.1, 0.2, 0.3])
    db = str(tmp_path / "m.db")
    record_triage(db, write_triage(tmp_path / "t1", rule, [{"case": f"a{i}", "score": 0.2} for i in range(30)]),
                  site="(pilot) Centre A")
    record_triage(db, write_triage(tmp_path / "t2", rule, [{"case": f"b{i}", "score": 0.2} for i in range(5)]),
                  site="Centre B")
    page = write_dashboard(db, tmp_path / "m.html").value.read_text()
    assert '<div class="v">35</div><div class="k">cases</div>' in page  # 30 + 5 (the pooled stream not again)
    groups = store_status(db).value
    assert [g.pooled for g in groups] == [False, False, True]


# ------------------------------------------------------------------------------------------ undefined scores
def test_status_says_how_many_cases_have_no_defined_score(tmp_path):
    """30 cases without a score (NaN in triage.json) and 5 with one: "no alarm" must not hide the 30."""
    rule = make_rule([0.1, 0.2, 0.3])
    db = str(tmp_path / "m.db")
    record_triage(db, write_triage(tmp_path / "t1", rule, [{"case": f"a{i}", "score": None, "decision": "review"}
                                                           for i in range(30)]), site="A")
    record_triage(db, write_triage(tmp_path / "t2", rule, [{"case": f"b{i}", "score": 0.2} for i in range(5)]),
                  site="B")
    res = store_status(db)
    notes = [line for line in res.lines if "no defined score" in line]
    assert any("[A]" in n and "30 of 30" in n for n in notes), res.lines
    assert any(f"[{ALL_SITES}]" in n and "30 of 35" in n for n in notes), res.lines
    assert not any("[B]" in n for n in notes)
    groups = res.value
    assert [g.n_undefined_scores for g in groups] == [30, 0, 30]
    page = write_dashboard(db, tmp_path / "m.html").value.read_text()
    assert "30 of 30 case(s) have no defined score" in page


# ------------------------------------------------------------------------------- a database that is no store
def test_read_only_commands_refuse_a_database_that_is_not_a_monitoring_store(store_url, tmp_path, capsys):
    """``status`` on another application's database (a wrong --db) wrote the store's tables into it and reported
    "no cases recorded" with exit status 0: a false all-clear."""
    raw_sql(store_url, "CREATE TABLE patients (id TEXT)")
    with pytest.raises(ValueError, match="not a monitoring store"):
        MonitorStore(store_url, create=False)
    assert _tables(store_url) == {"patients"}
    if not store_url.startswith("postgresql://"):
        capsys.readouterr()
        assert cli.main(["monitor", "status", "--db", store_url]) == 2
        err = capsys.readouterr().err
        assert "not a monitoring store" in err and len(err.strip().splitlines()) == 1
        assert _tables(store_url) == {"patients"}
        empty = tmp_path / "empty.db"
        empty.touch()  # an empty file is no store either
        with pytest.raises(ValueError, match="not a monitoring store"):
            MonitorStore(empty, create=False)
        assert empty.stat().st_size == 0
    with MonitorStore(store_url) as store:  # record (create=True) still makes a store of it
        assert store.schema_version() >= 1
    with MonitorStore(store_url, create=False) as store:
        assert store.cases() == []


# ----------------------------------------------------------------------------------- a folder recorded again
def test_a_triage_folder_recorded_again_after_it_grew_records_its_new_cases_only(store_url, tmp_path):
    """Triage run again on a folder of predictions that gained a case rewrites triage.json (a new digest): the ten
    decisions already recorded must not enter the stream twice (they would weigh double in every alarm)."""
    rule = make_rule([0.1, 0.2, 0.3])
    folder = tmp_path / "triage"
    ten = [{"case": f"c{i}", "score": 0.1 + i / 100, "decision": "accept"} for i in range(10)]
    write_triage(folder, rule, ten)
    first = record_triage(store_url, folder, site="A")
    write_triage(folder, rule, [*ten, {"case": "c10", "score": 0.5, "decision": "review"}])
    second = record_triage(store_url, folder, site="A")
    assert second.value != first.value
    assert "1 case(s)" in second.lines[0] and "10 already recorded" in second.lines[0], second.lines
    with MonitorStore(store_url, create=False) as store:
        ids = [c["case_id"] for c in store.cases()]
        assert sorted(ids) == sorted(f"c{i}" for i in range(11)) and len(ids) == 11
        assert store.verify().ok
        assert [r["n_cases"] for r in store.runs()] == [10, 1]
    # the same case ids with other decisions are other cases (a folder reused, ids restarting): all recorded
    other = tmp_path / "next_month"
    write_triage(other, rule, [{"case": f"c{i}", "score": 0.9 - i / 100, "decision": "review"} for i in range(10)])
    assert record_triage(store_url, other, site="A").lines[0].startswith("recorded 10 case(s)")
    write_triage(folder, rule, [{"case": "c0", "score": 0.77, "decision": "review"}])  # same folder, a new decision
    assert record_triage(store_url, folder, site="A").lines[0].startswith("recorded 1 case(s)")
    write_triage(folder, rule, [{"case": "c1", "score": 0.11, "decision": "accept"}])  # at another site: another
    assert record_triage(store_url, folder, site="B").lines[0].startswith("recorded 1 case(s)")
    with MonitorStore(store_url, create=False) as store:
        assert len(store.cases()) == 23 and store.verify().ok


def test_a_new_triage_folder_each_month_records_the_earlier_decisions_once(store_url, tmp_path):
    """Found by a review of the store under real operations: a site triaging into a new folder each month
    (``triage_2026-11``, ``triage_2026-12``) from a predictions folder that keeps growing recorded November's ten
    decisions again in December (only the same folder's were skipped): they weighed twice in every alarm."""
    rule = make_rule([0.1, 0.2, 0.3])
    ten = [{"case": f"c{i}", "score": 0.1 + i / 100, "decision": "accept"} for i in range(10)]
    first = record_triage(store_url, write_triage(tmp_path / "triage_2026-11", rule, ten), site="A")
    assert first.lines[0].startswith("recorded 10 case(s)")
    december = write_triage(tmp_path / "triage_2026-12", rule, [*ten, {"case": "c10", "score": 0.5,
                                                                        "decision": "review"}])
    second = record_triage(store_url, december, site="A")
    assert second.lines[0].startswith("recorded 1 case(s)") and "10 already recorded (skipped)" in second.lines[0]
    b = [{**c, "decision": "review"} for c in ten]  # the same ids and scores at another site: other cases
    assert record_triage(store_url, write_triage(tmp_path / "site_b", rule, b), site="B").lines[0].startswith(
        "recorded 10 case(s)")
    with MonitorStore(store_url, create=False) as store:
        assert sorted((c["site"], c["case_id"]) for c in store.cases()) == sorted(
            [("A", f"c{i}") for i in range(11)] + [("B", f"c{i}") for i in range(10)])
        assert store.verify().ok
        assert [r["n_cases"] for r in store.runs()] == [10, 1, 10]


def test_a_later_batch_reusing_a_case_id_with_an_undefined_score_is_recorded(store_url, tmp_path):
    """Found by the review of the cross-folder skip: a decision was skipped as "already recorded" from any triage
    folder when site, case id, scores, decision and code matched, so a later batch that numbers its cases alike
    ("001") lost a case whose score is undefined (None: an empty or failed prediction, "undefined_score"), another
    scan, from the store and the alarms. The prediction file is part of a decision: the monthly re-triage of one
    growing predictions folder is still skipped."""
    import json

    rule = make_rule([0.1, 0.2, 0.3])

    def batch(name: str, preds: str, more: tuple[str, ...] = ()) -> Path:
        # another scan's defined score differs (a defined score tells scans apart; the file counts for None only)
        cases = [{"case": "001", "score": None, "decision": "review"},
                 {"case": "002", "score": 0.12 if preds == "batch1" else 0.21},
                 *({"case": c, "score": 0.15} for c in more)]
        folder = write_triage(tmp_path / name, rule, cases,
                              segs={c["case"]: str(tmp_path / preds / f"{c['case']}_seg.nii.gz") for c in cases})
        doc = json.loads((folder / "triage.json").read_text())
        doc["cases"][0].update(code="undefined_score", reason="the score is undefined")
        (folder / "triage.json").write_text(json.dumps(doc))
        return folder

    assert record_triage(store_url, batch("t1", "batch1"), site="A").lines[0].startswith("recorded 2 case(s)")
    second = record_triage(store_url, batch("t2", "batch2"), site="A").lines[0]
    assert second.startswith("recorded 2 case(s)") and "skipped" not in second, second
    again = record_triage(store_url, batch("t3", "batch2", ("003",)), site="A").lines[0]  # batch2, grown, again
    assert again.startswith("recorded 1 case(s)") and "2 already recorded (skipped)" in again, again
    with MonitorStore(store_url, create=False) as store:
        assert sum(c["code"] == "undefined_score" for c in store.cases()) == 2
        assert store.verify().ok


def test_a_growing_predictions_folder_under_another_path_records_its_decisions_once(store_url, tmp_path):
    """Found by the review of the prediction key: the prediction file (the absolute path triage read) was part of
    every decision's identity, so a site re-triaging its growing predictions folder each month into a new folder
    recorded each earlier decision again as soon as the folder's path changed (the share mounted at ``/mnt/qc`` on
    one triage host and ``/data/qc`` on another, the folder moved to new storage): 5 cases in the store instead of 3,
    each earlier one weighing twice in the alarms. A defined score tells scans apart; the file counts only for a case
    whose score is undefined."""
    rule = make_rule([0.1, 0.2, 0.3])

    def month(name: str, mount: str, cases: list[dict]) -> Path:
        return write_triage(tmp_path / name, rule, cases,
                            segs={c["case"]: f"{mount}/site_a/preds/{c['case']}_seg.nii.gz" for c in cases})

    first = [{"case": "001", "score": 0.12}, {"case": "002", "score": 0.25}]
    assert record_triage(store_url, month("jan", "/mnt/qc", first), site="A").lines[0].startswith("recorded 2 case(s)")
    again = record_triage(store_url, month("feb", "/data/qc", [*first, {"case": "003", "score": 0.15}]),
                          site="A").lines[0]
    assert again.startswith("recorded 1 case(s)") and "2 already recorded (skipped)" in again, again
    with MonitorStore(store_url, create=False) as store:
        assert sorted(c["case_id"] for c in store.cases()) == ["001", "002", "003"]
        assert store.verify().ok



def test_a_case_with_an_undefined_score_from_a_moved_predictions_folder_is_recorded_once(store_url, tmp_path):
    """A case whose score is undefined was told apart by its prediction file's path alone, so the same scan (the same
    image z-score and prediction) triaged again after its predictions folder moved to new storage was recorded a
    second time and weighed twice in the image alarm and the counts. Its image z-score tells scans apart as a defined
    score does: the path counts only for a case with neither (the batch of the test above); another scan, whose image
    z-score differs, is recorded."""
    import json

    rule = make_rule([0.1, 0.2, 0.3])

    def month(name: str, mount: str, cases: list[dict]) -> Path:
        folder = write_triage(tmp_path / name, rule, cases,
                              segs={c["case"]: f"{mount}/site_b/preds/{c['case']}_seg.nii.gz" for c in cases})
        doc = json.loads((folder / "triage.json").read_text())
        for c in doc["cases"]:
            if c["score"] is None:
                c.update(code="undefined_score", reason="score undefined (e.g. empty predicted foreground)")
        (folder / "triage.json").write_text(json.dumps(doc))
        return folder

    first = [{"case": "001", "score": 0.12, "image_z_max": 1.318},
             {"case": "002", "score": None, "decision": "review", "image_z_max": 0.9054879003377757}]
    assert record_triage(store_url, month("jan", "/data", first), site="B").lines[0].startswith("recorded 2 case(s)")
    moved = record_triage(store_url, month("feb", "/newstorage", [*first, {"case": "003", "score": 0.15}]),
                          site="B").lines[0]
    assert moved.startswith("recorded 1 case(s)") and "2 already recorded (skipped)" in moved, moved
    # a later batch reusing the id with an undefined score: another image, another z-score, another scan
    other = [{"case": "002", "score": None, "decision": "review", "image_z_max": 2.25}]
    assert record_triage(store_url, month("mar", "/newstorage", other), site="B").lines[0].startswith(
        "recorded 1 case(s)")
    with MonitorStore(store_url, create=False) as store:
        assert sorted(c["case_id"] for c in store.cases()) == ["001", "002", "002", "003"]
        assert store.verify().ok


# --------------------------------------------------------------------------- labels of sites that share case ids
def test_a_label_never_goes_to_another_sites_case(store_url, tmp_path):
    """Two sites number their cases alike ("001"): before the fix site A's audited label went to site B's case
    (recorded later), so A's risk stream missed it and B's counted a loss that is not B's."""
    rule = make_rule([0.1, 0.2, 0.3])
    record_triage(store_url, write_triage(tmp_path / "a", rule, [{"case": "001", "score": 0.2},
                                                                 {"case": "002", "score": 0.2}]), site="A")
    record_triage(store_url, write_triage(tmp_path / "b", rule, [{"case": "001", "score": 0.25}]), site="B")
    table = tmp_path / "audit.csv"
    table.write_text("case,dice\n001,0.5\n")
    with pytest.raises(ValueError, match=r"more than one site .*'001' \(A, B\).*'site' column"):
        record_labels(store_url, table)
    with MonitorStore(store_url, create=False) as store:
        assert all(c["loss"] is None for c in store.cases())  # nothing written
    table.write_text("case,site,dice\n001,A,0.5\n002,,0.9\n")  # the site given (or not needed: 002 is only A's)
    assert record_labels(store_url, table).value == 2
    with MonitorStore(store_url, create=False) as store:
        got = {(c["site"], c["case_id"]): c["loss"] for c in store.cases()}
        assert store.verify().ok
    assert got == {("A", "001"): 1.0, ("A", "002"): 0.0, ("B", "001"): None}
    table.write_text("case,site,dice\n001,C,0.5\n")
    with pytest.raises(ValueError, match="not in the monitoring store"):
        record_labels(store_url, table)


# ------------------------------------------------------------------------------- guards (verified, not broken)
def test_hostile_site_and_case_names_are_stored_as_data(store_url, tmp_path):
    """Quotes and SQL in a site name or case id are values (parameters), on both backends: nothing is executed."""
    rule = make_rule([0.1, 0.2, 0.3])
    evil_site = "A'); DROP TABLE cases; --"
    evil_case = "x' OR '1'='1"
    folder = write_triage(tmp_path / "t", rule, [{"case": evil_case, "score": 0.2}, {"case": "plain", "score": 0.1}])
    record_triage(store_url, folder, site=evil_site)
    table = tmp_path / "audit.csv"
    table.write_text(f'case,failure\n"{evil_case}",1\n')
    assert record_labels(store_url, table).value == 1
    with MonitorStore(store_url, create=False) as store:
        cases = {c["case_id"]: (c["site"], c["loss"]) for c in store.cases()}
        assert store.verify().ok
    assert cases == {evil_case: (evil_site, 1.0), "plain": (evil_site, None)}
    assert {"cases", "runs", "labels", "audit", "rules"} <= _tables(store_url)


def test_the_time_of_a_run_is_stored_in_utc():
    """``--time`` with an offset is converted to UTC; a naive time is taken as UTC (datetime, independently)."""
    with tempfile.TemporaryDirectory() as d:
        folder = write_triage(Path(d) / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}])
        for given, want in [("2026-03-01T10:00:00+05:00", datetime(2026, 3, 1, 5, tzinfo=timezone.utc)),
                            ("2026-03-01T10:00:00", datetime(2026, 3, 1, 10, tzinfo=timezone.utc)),
                            ("2026-03-01T00:30:00-01:00", datetime(2026, 3, 1, 1, 30, tzinfo=timezone.utc))]:
            got = datetime.fromisoformat(read_triage_run(folder, triaged_at=given).triaged_at)
            assert got == want and got.utcoffset() == timedelta(0)


@pytest.mark.parametrize("given, want", [
    ("2026-03-01T10:00:00Z", datetime(2026, 3, 1, 10, tzinfo=timezone.utc)),
    ("2026-03-01T10:00:00.5+01:00", datetime(2026, 3, 1, 9, 0, 0, 500000, tzinfo=timezone.utc)),
    ("2026-03-01T10:00:00,25Z", datetime(2026, 3, 1, 10, 0, 0, 250000, tzinfo=timezone.utc)),
    ("2026-03-01 10:00:00.1234567", datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=timezone.utc)),
])
def test_the_iso_8601_times_of_python_3_11_are_read_on_every_python(given, want):
    """``--time`` is ISO 8601: Python 3.10 (the declared minimum) refused a ``Z`` zone and fractions of other than
    3 or 6 digits, which 3.11 reads (found by running the tests on 3.10)."""
    with tempfile.TemporaryDirectory() as d:
        folder = write_triage(Path(d) / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}])
        assert datetime.fromisoformat(read_triage_run(folder, triaged_at=given).triaged_at) == want


# ----------------------------------------------------------------------------- a damaged database: exit status 2
def _status_and_verify(url: str, capsys) -> list[tuple[int, str]]:
    out = []
    for sub in ("status", "verify"):
        capsys.readouterr()
        rc = cli.main(["monitor", sub, "--db", url])
        out.append((rc, capsys.readouterr().err))
    return out


def test_a_damaged_store_is_one_error_line_with_exit_status_2(store_url, tmp_path, capsys):
    """A table dropped outside the store: before the fix a traceback and exit status 1, which ``monitor status``
    uses for "alarm raised" (and ``verify`` for "tampered"): an error must read as an error (2, one line)."""
    record_triage(store_url, write_triage(tmp_path / "t", make_rule([0.1, 0.2]), [{"case": "a", "score": 0.1}]))
    raw_sql(store_url, "DROP TABLE labels")
    for rc, err in _status_and_verify(store_url, capsys):
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "labels" in err, err


def test_a_corrupt_sqlite_file_is_one_error_line_with_exit_status_2(tmp_path, capsys):
    db = tmp_path / "m.db"
    record_triage(str(db), write_triage(tmp_path / "t", make_rule([0.1, 0.2]),
                                        [{"case": f"c{i}", "score": 0.1} for i in range(300)]))
    data = bytearray(db.read_bytes())
    for page in range(4096, len(data), 4096):  # every page after the first overwritten in part (a bad disk)
        data[page + 100:page + 400] = b"\xff" * 300
    db.write_bytes(bytes(data))
    for rc, err in _status_and_verify(str(db), capsys):
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "malformed" in err, err


# ------------------------------------------------------------------------- the order of late-arriving labels
def test_a_risk_alarm_stays_raised_when_labels_of_earlier_cases_arrive_later(store_url, tmp_path):
    """Day 1: the audit of cases 50-56 finds 7 failures, the risk alarm is raised. Day 2: the audit of cases 0-49
    (triaged before them) finds none. Before the fix the losses were taken in triage order, day 2's inserted before
    day 1's: the e-process of day 2 was another sequence and the alarm vanished (status exit 0, "no alarm").
    In the order the labels arrived the sequence only grows; the reference is risk_test on that sequence."""
    rule = make_rule([0.1, 0.2, 0.3], target=0.1)
    record_triage(store_url, write_triage(tmp_path / "t", rule, [{"case": f"c{i:03d}", "score": 0.2}
                                                                 for i in range(60)]), site="A")
    day1, day2 = tmp_path / "day1.csv", tmp_path / "day2.csv"
    day1.write_text("case,failure\n" + "".join(f"c{i:03d},1\n" for i in range(50, 57)))
    day2.write_text("case,failure\n" + "".join(f"c{i:03d},0\n" for i in range(50)))
    record_labels(store_url, day1)
    assert store_status(store_url).exit_status == 1
    record_labels(store_url, day2)
    res = store_status(store_url)
    assert res.exit_status == 1, res.lines
    (g,) = res.value
    want = risk_test([1.0] * 7 + [0.0] * 50, target=0.1, alpha=0.05)
    assert g.risk.alarm == want.alarm == 6
    np.testing.assert_allclose(g.risk.log_eprocess, want.log_eprocess, atol=1e-12)
    ids = [c["case_id"] for c in g.labelled_accepted]
    assert sorted(ids[:7]) == [f"c{i:03d}" for i in range(50, 57)]  # day 1's batch first
    assert sorted(ids[7:]) == [f"c{i:03d}" for i in range(50)]


# ------------------------------------------------------------------------------ terminal escapes in a rule digest
def test_a_rule_digest_is_checked_and_never_reaches_the_terminalraw_sql(tmp_path):
    """triage.json is editable: a rule "digest" with terminal escapes went into the store and raw onto the terminal
    of ``monitor status`` (its column and notes were not passed through printable, unlike the site)."""
    rule = make_rule([0.1, 0.2])
    rule["digest"] = "\x1b]0;pwned\x07\x1b[2J"
    folder = write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.1}])
    with pytest.raises(ValueError, match=r"rule\.digest"):
        read_triage_run(folder)
    rows = [{"case_id": "a", "site": "A", "triaged_at": "t", "score": math.nan, "image_z_max": 1.0,
             "decision": "accept", "rule_digest": rule["digest"], "loss": None}]
    groups = monitor_status(rows, {rule["digest"]: {"calibration_scores": [0.1], "target_risk": 0.1,
                                                    "image_reference": None}})
    text = "\n".join(status_table(groups))
    assert "\x1b" not in text and "\x07" not in text


# ------------------------------------------------------------------------------------------- small input gaps
@pytest.mark.parametrize("calibration", [7, {"case_scores": 7}, {"case_scores": "0.1"}, [0.1]])
def test_calibration_scores_of_the_wrong_type_are_one_error_line(tmp_path, capsys, calibration):
    """An edited triage.json whose ``rule.calibration.case_scores`` was not a list: ``monitor record`` ended in a
    traceback (``TypeError: 'int' object is not iterable``) instead of one line naming the field."""
    rule = make_rule([0.1, 0.2])
    rule["calibration"] = calibration
    folder = write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.1}])
    assert cli.main(["monitor", "record", str(folder), "--db", str(tmp_path / "m.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rule.calibration" in err[0], err


def test_the_site_option_is_stripped_like_the_sites_table_and_the_sidecars(tmp_path):
    """``--site "Centre A "`` made a stream of its own beside "Centre A" (the table and the sidecars are stripped)."""
    rule = make_rule([0.1, 0.2])
    folder = write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.1}])
    assert read_triage_run(folder, site=" Centre A ").cases[0].site == "Centre A"
    assert read_triage_run(folder, site="   ").cases[0].site == "unknown"


def test_two_label_maps_of_one_case_are_refused(tmp_path):
    """``a.nii`` and ``a.nii.gz`` in the label folder: one of them was taken in silence (the CSV refuses a case
    listed twice)."""
    rule = make_rule([0.1, 0.2])
    db = str(tmp_path / "m.db")
    record_triage(db, write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.1}]))
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "a.nii").write_bytes(b"")
    (labels / "a.nii.gz").write_bytes(b"")
    with pytest.raises(ValueError, match="two label maps"):
        record_labels(db, labels)


def test_verify_prints_a_tampered_head_hash_through_printable(tmp_path, capsys):
    db = tmp_path / "m.db"
    record_triage(str(db), write_triage(tmp_path / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}]))
    raw_sql(str(db), "UPDATE audit SET hash = 'ab' || char(27) || '[2J' WHERE seq = (SELECT MAX(seq) FROM audit)")
    capsys.readouterr()
    assert cli.main(["monitor", "verify", "--db", str(db)]) == 1
    assert "\x1b" not in capsys.readouterr().out


# --------------------------------------------------------------------- a PostgreSQL server's natural collation
def test_verify_on_a_postgresql_database_whose_collation_is_not_code_point_order(postgres_url, tmp_path):
    """A department's server sorts text by its locale (en-US: case and punctuation ignored first), not by code
    point. ``verify`` re-read a run's rows ``ORDER BY case_id`` in the server's order, while their digest was
    computed in Python's order: every run whose case ids the two orders sort differently read as "edited or
    deleted" (a false tamper alarm, exit status 1). The test server runs with LC_ALL=C, which hid it."""
    import uuid

    import psycopg

    name = "icu" + uuid.uuid4().hex[:10]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu "
                     "ICU_LOCALE 'en-US' LOCALE 'C'")
    try:
        url = postgres_url.rsplit("/", 1)[0] + "/" + name
        ids = ["a_2", "A1", "b", "a-1", "B0", "z", "Zb"]
        with psycopg.connect(url, autocommit=True) as conn:  # the situation: this server sorts otherwise
            server = [r[0] for r in conn.execute("SELECT x FROM unnest(%s::text[]) x ORDER BY x", (ids,))]
        assert server != sorted(ids)
        record_triage(url, write_triage(tmp_path / "t", make_rule([0.1]), [{"case": c, "score": 0.1} for c in ids]))
        with MonitorStore(url, create=False) as store:
            res = store.verify()
        assert res.ok, res.problems
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# ------------------------------------------------------------------------------- an output onto the store itself
@pytest.mark.parametrize("argv", [["report", "-o", "{db}"], ["status", "--json", "{db}"],
                                  ["report", "-o", "{db}-wal"], ["status", "--json", "{link}"]])
def test_an_output_onto_the_store_is_refused(tmp_path, capsys, argv):
    """``monitor report -o monitor.db`` (a slip of the keyboard) replaced the whole store, every record and the audit
    chain, by the HTML page, with exit status 0."""
    db = tmp_path / "monitor.db"
    record_triage(str(db), write_triage(tmp_path / "t", make_rule([0.1, 0.2]), [{"case": "a", "score": 0.1}]))
    (tmp_path / "link.db").symlink_to(db)
    before = db.read_bytes()
    capsys.readouterr()
    rc = cli.main(["monitor", *[a.format(db=db, link=tmp_path / "link.db") for a in argv], "--db", str(db)])
    err = capsys.readouterr().err
    assert rc == 2 and "the monitoring store itself" in err and len(err.strip().splitlines()) == 1, err
    assert db.read_bytes() == before
    with MonitorStore(db, create=False) as store:
        assert [c["case_id"] for c in store.cases()] == ["a"] and store.verify().ok



# --------------------------------------------------------------------------- a store inside the command's inputs
@pytest.mark.parametrize("where", ["predictions", "predictions/sub", "images", "sites.csv", "uncertainty"])
def test_monitor_record_never_writes_the_store_into_its_inputs(tmp_path, capsys, where):
    """``monitor record TRI --db PRED/monitor.db`` created the store (and its journal) in the predictions folder the
    run read, which ``triage --monitor PRED/monitor.db`` refuses (inputs are never written to): the same check, one
    line, exit status 2, nothing written (a folder inside the predictions folder too). The folders of the images
    (their sidecars) and the sites table too; the triage folder is the store's place that ``triage -o OUT --monitor
    OUT/monitor.db`` allows. The folder of the ``--uncertainty`` maps too (found by review: only seg and image
    were checked)."""
    from monai_unc.io.files import save_nifti

    preds, images, unc = tmp_path / "predictions", tmp_path / "images", tmp_path / "uncertainty"
    preds.mkdir()
    images.mkdir()
    unc.mkdir()
    seg = np.zeros((4, 4, 3), np.uint8)
    seg[1:3, 1:3, 1] = 1
    save_nifti(seg, np.eye(4), str(preds / "c0.nii.gz"))
    save_nifti(seg, np.eye(4), str(images / "c0_0000.nii.gz"))
    (tmp_path / "sites.csv").write_text("case,site\nc0,A\n")
    tri = write_triage(tmp_path / "triage_out", make_rule([0.1, 0.2]), [{"case": "c0", "score": 0.1}],
                       images={"c0": str(images / "c0_0000.nii.gz")}, segs={"c0": str(preds / "c0.nii.gz")},
                       digest=True, maps={"c0": {"predictive_entropy": str(unc / "c0_predictive_entropy.nii.gz")}})
    save_nifti(seg.astype(np.float32), np.eye(4), str(unc / "c0_predictive_entropy.nii.gz"))
    (preds / "sub").mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    db = tmp_path / where if where.endswith(".csv") else tmp_path / where / "monitor.db"
    capsys.readouterr()
    rc = cli.main(["monitor", "record", str(tri), "--db", str(db), "--sites", str(tmp_path / "sites.csv")])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and "inputs are never written to" in err[0], err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
    assert cli.main(["monitor", "record", str(tri), "--db", str(tri / "monitor.db")]) == 0  # the triage folder


def test_monitor_label_never_writes_the_store_into_its_label_folder(tmp_path, capsys):
    """``monitor label LABELS --db LABELS/monitor.db`` wrote the labels into a store inside the folder of label maps it
    read; the store is refused there as ``record`` refuses one in its inputs, before anything is written."""
    labels = tmp_path / "labels"
    labels.mkdir()
    db = labels / "monitor.db"
    record_triage(str(db), write_triage(tmp_path / "t", make_rule([0.1, 0.2]), [{"case": "a", "score": 0.1}]))
    (labels / "a.csv").write_text("case,dice\na,0.9\n")
    from monai_unc.io.files import save_nifti

    save_nifti(np.ones((4, 4, 3), np.uint8), np.eye(4), str(labels / "a.nii.gz"))
    before = db.read_bytes()
    capsys.readouterr()
    for source in (labels, labels / "a.csv"):
        rc = cli.main(["monitor", "label", "--labels", str(source), "--db", str(db)])
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        if source == labels:
            assert rc == 2 and len(err) == 1 and "inside the input folder" in err[0], err
            assert db.read_bytes() == before
            assert sorted(p.name for p in labels.iterdir()) == ["a.csv", "a.nii.gz", "monitor.db"]
        else:  # a table beside the store: its file is the input, not its folder
            assert rc == 0, err


# ----------------------------------------------------------------- the same decisions from two writers at once
def test_two_writers_recording_the_same_decisions_at_once_record_each_once(store_url, tmp_path):
    """Two processes record the same folder's decisions (20 runs of 50 cases, each under two digests: triage.json
    rewritten) at the same time: the check for decisions already recorded runs under the writers' lock, so every
    decision is there exactly once."""
    rule = make_rule([0.1, 0.2])
    runs = []
    for k in range(20):
        run = read_triage_run(write_triage(tmp_path / f"r{k}", rule, [{"case": f"k{k}-{i}", "score": 0.1 + i / 1000}
                                                                      for i in range(50)]))
        runs.append((run.rule, run.cases, run.source_digest))
    work = {"p": runs, "q": [(r, c, d + "-rewritten") for r, c, d in runs]}  # folder "f" for both (_writer)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=record_runs, args=(store_url, work[tag], tag, q)) for tag in ("p", "q")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert sorted(q.get(timeout=10) for _ in procs) == ["ok", "ok"]
    with MonitorStore(store_url, create=False) as store:
        ids = [c["case_id"] for c in store.cases()]
        assert store.verify().ok and len(store.runs()) == 40
    assert len(ids) == len(set(ids)) == 1000


# ---------------------------------------------------- the status of interleaved sites against a hand-rolled reference
def _jumper_by_hand(p: list[float], jump: float = 0.01) -> list[float]:
    """Simple Jumper with unnormalised capitals per bet e in {-1, 0, 1} (Vovk et al. 2021, Algorithm 1), log S_n."""
    capital = {-1: 1 / 3, 0: 1 / 3, 1: 1 / 3}
    out = []
    for pn in p:
        if not math.isnan(pn):
            total = sum(capital.values())
            capital = {e: ((1 - jump) * k + jump * total / 3) * (1 + e * (pn - 0.5)) for e, k in capital.items()}
        out.append(math.log(sum(capital.values())))
    return out


def test_each_site_stream_matches_counting_and_a_hand_rolled_jumper():
    """Three sites interleaved, with ties, undefined scores and a shift at one site only: each stream's p-values by
    direct counting over the calibration scores and that site's earlier defined scores (never another site's), its
    martingale by the unnormalised recursion, its alarm as the first crossing of 1 / alpha."""
    rng = np.random.default_rng(3)
    cal = [float(v) for v in np.round(rng.normal(size=60), 1)]  # rounded: ties with the stream
    rows = []
    for i in range(240):
        site = ("A", "B", "C")[i % 3]
        s = float(np.round(rng.normal() + (1.5 if site == "B" and i >= 120 else 0.0), 1))
        rows.append({"case_id": f"{site}{i}", "site": site, "triaged_at": "t", "score": math.nan if i % 17 == 0
                     else s, "image_z_max": math.nan, "decision": "accept", "rule_digest": "r", "loss": None})
    groups = {g.site: g for g in monitor_status(rows, {"r": {"calibration_scores": cal, "target_risk": 0.1,
                                                               "image_reference": None}}, 0.05)}
    for site in ("A", "B", "C"):
        scores = [r["score"] for r in rows if r["site"] == site and not math.isnan(r["score"])]
        tau = np.random.default_rng(stream_seed("r", site, "score")).uniform(size=len(scores))
        p = []
        for n, s in enumerate(scores):
            bag = cal + scores[:n]
            p.append((sum(b > s for b in bag) + tau[n] * (sum(b == s for b in bag) + 1)) / (len(bag) + 1))
        g = groups[site]
        np.testing.assert_allclose(g.score.pvalues, p, rtol=0, atol=1e-12)
        log_s = _jumper_by_hand(p)
        np.testing.assert_allclose(g.score.log_martingale, log_s, rtol=1e-9, atol=1e-9)
        crossing = next((n for n, v in enumerate(log_s) if v >= math.log(20) - 1e-12), None)
        assert g.score.alarm == crossing
        assert g.n_undefined_scores == sum(1 for r in rows if r["site"] == site and math.isnan(r["score"]))
    assert groups["B"].score.alarm is not None and groups["B"].score.alarm >= 40 - 3  # after the shift at B only


# ------------------------------------------------------------------------------- SQLite and PostgreSQL alike
def test_sqlite_and_postgresql_give_the_same_rows_and_the_same_status(postgres_url, tmp_path):
    """The same runs and labels into both backends: the same case rows (floats bit for bit, NaN as NaN, the order),
    the same label order and the same ``monitor status`` lines (guard)."""
    import uuid

    import psycopg

    schema = "t" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    urls = [str(tmp_path / "m.db"), f"{postgres_url}?options=-csearch_path%3D{schema}"]
    rng = np.random.default_rng(11)
    rule = make_rule([float(v) for v in rng.normal(size=50)], target=0.1)
    folders = []
    for k in range(3):
        cases = [{"case": f"{c}{k}", "score": None if c == "n" else float(rng.normal() + k),
                  "decision": "accept" if c != "Z" else "review", "image_z_max": float(abs(rng.normal()))}
                 for c in ("a-1", "A1", "a_2", "B0", "n", "Z", "é")]
        folders.append(write_triage(tmp_path / f"run{k}", rule, cases))
    (tmp_path / "l1.csv").write_text("case,failure\na-12,1\nA12,1\n")
    (tmp_path / "l2.csv").write_text("case,dice\na-10,0.5\né0,0.95\n")
    got = []
    for url in urls:
        for k, folder in enumerate(folders):
            record_triage(url, folder, site="A" if k < 2 else "B", time=f"2026-01-0{k + 1}T00:00:00+02:00")
        record_labels(url, tmp_path / "l1.csv")
        record_labels(url, tmp_path / "l2.csv")
        with MonitorStore(url, create=False) as store:
            rows = [{k: v for k, v in c.items() if k not in ("row", "run")} for c in store.cases()]
            assert store.verify().ok
        got.append((rows, store_status(url).lines))
    (rows_s, lines_s), (rows_p, lines_p) = got
    assert len(rows_s) == 21 and lines_s == lines_p
    for a, b in zip(rows_s, rows_p):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], float) and math.isnan(a[key]):
                assert math.isnan(b[key]), key
            else:
                assert a[key] == b[key], (key, a[key], b[key])


# ----------------------------------------------------------------------------- triage.json read as untrusted JSON
def _edited_triage(folder: Path, field: str, value) -> Path:
    """A triage folder whose ``triage.json`` has ``field`` (dotted: ``rule.risk``, ``cases.0.score``) set to
    ``value``, written as JSON text as it stands (a ``str`` value that starts with ``RAW:`` goes in unquoted)."""
    import json

    rule = make_rule([0.1, 0.2])
    folder = write_triage(folder, rule, [{"case": "a", "score": 0.1}, {"case": "b", "score": 0.3}])
    doc = json.loads((folder / "triage.json").read_text())
    *parents, key = field.split(".")
    node = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    node[int(key) if isinstance(node, list) else key] = "@@RAW@@" if isinstance(value, str) and value.startswith(
        "RAW:") else value
    text = json.dumps(doc)
    if isinstance(value, str) and value.startswith("RAW:"):
        text = text.replace('"@@RAW@@"', value[4:])
    (folder / "triage.json").write_text(text)
    return folder


@pytest.mark.parametrize("field, value, named", [
    ("cases.0.score", "RAW:NaN", "NaN"),
    ("cases.0.score", "RAW:Infinity", "Infinity"),
    ("cases.0.score", "RAW:1e400", "1e400"),
    ("cases.0.image_z_max", "RAW:-Infinity", "Infinity"),
    ("cases.0.score", "RAW:" + "9" * 400, "digits"),
    ("rule.calibration.case_scores", [0.1, "0.2"], "rule.calibration.case_scores"),
    ("rule.calibration.case_scores", [0.1, True], "rule.calibration.case_scores"),
    ("rule.calibration.case_scores", "RAW:[0.1, NaN]", "NaN"),
    ("rule.failure_dice", "0.8", "rule.failure_dice"),
    ("rule.failure_dice", 5, "rule.failure_dice"),
    ("rule.risk", 7, "rule.risk"),
    ("rule.risk", "accuracy", "rule.risk"),
    ("rule.num_classes", "3", "rule.num_classes"),
    ("rule.score", [1], "rule.score"),
])
def test_an_edited_triage_json_is_one_error_line(tmp_path, capsys, field, value, named):
    """``triage.json`` was read with plain ``json.loads`` and the rule fields the store keeps were not checked: a
    ``NaN`` / ``Infinity`` / ``1e400`` score was stored as "no score", a NaN calibration score was a line without the
    file or field (``Out of range float values are not JSON compliant``), 400 digits a traceback
    (``OverflowError``), a string or ``true`` calibration score was dropped or counted in silence, and
    ``"failure_dice": "0.8"``, ``"risk": 7`` or ``"num_classes": "3"`` were stored for ``monitor label`` to use."""
    folder = _edited_triage(tmp_path / "t", field, value)
    db = tmp_path / "m.db"
    assert cli.main(["monitor", "record", str(folder), "--db", str(db)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "triage.json" in err[0] and named in err[0], err


def test_an_unedited_triage_json_with_every_checked_field_is_still_recorded(tmp_path, capsys):
    folder = _edited_triage(tmp_path / "t", "cases.1.score", None)  # an undefined score: null, as triage writes it
    assert cli.main(["monitor", "record", str(folder), "--db", str(tmp_path / "m.db")]) == 0
    run = read_triage_run(folder)
    assert [c.case_id for c in run.cases] == ["a", "b"] and math.isnan(run.cases[1].score)
