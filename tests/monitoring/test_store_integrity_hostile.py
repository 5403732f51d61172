"""A hostile review of what the monitoring store takes in and gives back; each test failed before its fix.

- a rule edited in ``triage.json`` with its old digest kept is refused (the first body stored under a digest won,
  so a forged target risk or calibration silenced every later genuine run of the rule);
- ``verify`` covers the tables ``rules`` and ``runs``, and ``status`` refuses a rule row that does not match its
  digest (an edited target risk silenced the risk alarm while ``verify`` said "intact");
- a value of the wrong type read from the store is one error line with exit status 2, never a traceback and 1;
- ``monitor record --time`` out of range once converted to UTC is one line naming ``--time``;
- an image sidecar is read as strict, bounded JSON (a deeply nested one was a ``RecursionError``);
- a ``--sites`` table that is not UTF-8 names the file, and a scanner (table or sidecar) is checked like the other
  text fields before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.io.provenance import rule_digest
from monai_unc.monitoring import MonitorStore, read_sites, read_triage_run, sidecar_site
from monai_unc.monitoring.store import CaseRecord
from monai_unc.workflows.monitor import record_labels, record_triage

from ._stream import make_rule, raw_sql, write_triage


def _cli(argv: list[str], capsys) -> tuple[int, list[str], str]:
    capsys.readouterr()
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.err.strip().splitlines(), out.out


def _one_line(rc: int, err: list[str], *needles: str) -> None:
    assert rc == 2 and len(err) == 1, (rc, err)
    for n in needles:
        assert n in err[0], err


def _rules(url: str) -> dict:
    with MonitorStore(url, create=False) as store:
        return store.rules()


# ------------------------------------------------------------------------------ a forged rule in triage.json
def _forge(folder: Path) -> None:
    doc = json.loads((folder / "triage.json").read_text())
    doc["rule"]["target_risk"] = 0.99  # silences the risk alarm
    doc["rule"]["calibration"]["case_scores"] = [100.0] * 10  # poisons the score alarm's reference
    (folder / "triage.json").write_text(json.dumps(doc))


def test_a_rule_edited_in_triage_json_with_its_old_digest_is_refused(tmp_path, capsys):
    """The forged rule was stored under the genuine digest; the genuine run recorded next used the forged body."""
    rule = make_rule([0.1, 0.2, 0.3], target=0.1)
    cases = [{"case": f"c{i}", "score": 0.2} for i in range(5)]
    genuine = write_triage(tmp_path / "genuine", rule, cases)
    forged = write_triage(tmp_path / "forged", rule, cases)
    _forge(forged)
    db = str(tmp_path / "m.db")
    rc, err, _ = _cli(["monitor", "record", str(forged), "--db", db], capsys)
    _one_line(rc, err, "triage.json", "does not match its digest")
    assert not Path(db).exists()  # refused before the store was opened
    assert _cli(["monitor", "record", str(genuine), "--db", db], capsys)[0] == 0
    got = _rules(db)[rule["digest"]]
    assert got["target_risk"] == 0.1 and got["calibration_scores"] == [0.1, 0.2, 0.3]


def test_the_store_refuses_a_rule_that_does_not_match_its_digest(store_url, tmp_path):
    """MonitorStore.record_run (what ``triage --monitor`` and the API call) checks the rule too, before writing."""
    rule = make_rule([0.1, 0.2], target=0.1)
    run = read_triage_run(write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.1}]))
    forged = {**run.rule, "target_risk": 0.99}
    with MonitorStore(store_url) as store:
        with pytest.raises(ValueError, match="does not match its digest"):
            store.record_run(forged, run.cases, source_digest=run.source_digest, folder="f", triaged_at="t",
                             model_digest=None)
        with pytest.raises(ValueError, match="rule.risk"):
            store.record_run({**run.rule, "risk": "whatever"}, run.cases, source_digest="x", folder="f",
                             triaged_at="t", model_digest=None)
        assert store.rules() == {} and store.cases() == [] and store.runs() == []


# --------------------------------------------------------------------------- verify covers rules and runs
def _alarmed_store(url: str, tmp_path: Path) -> dict:
    """A store whose risk alarm is raised: 60 accepted cases (target 0.1), all of them audited as failures."""
    rule = make_rule([0.1, 0.2, 0.3], target=0.1)
    record_triage(url, write_triage(tmp_path / "t", rule, [{"case": f"c{i:03d}", "score": 0.2} for i in range(60)]))
    (tmp_path / "labels.csv").write_text("case,failure\n" + "".join(f"c{i:03d},1\n" for i in range(60)))
    record_labels(url, tmp_path / "labels.csv")
    return rule


@pytest.mark.parametrize("edit", [
    "UPDATE rules SET target_risk = 0.999, calibration_scores = '[]'",  # the hostile report
    "UPDATE rules SET calibration_scores = '5'",
    "UPDATE rules SET calibration_scores = '[null]'",
    "UPDATE rules SET risk = '1-dice'",
    "UPDATE rules SET body = replace(body, '\"target_risk\":0.1', '\"target_risk\":0.999')",
    "UPDATE rules SET body = '[]', calibration_scores = '[]'",
    "UPDATE rules SET body = '{\"image_reference\": 5}'",
    "UPDATE rules SET body = '" + "[" * 100000 + "'",
])
def test_an_edited_rule_row_is_refused_by_status_and_reported_by_verify(store_url, tmp_path, capsys, edit):
    _alarmed_store(store_url, tmp_path)
    assert _cli(["monitor", "status", "--db", store_url], capsys)[0] == 1  # the alarm, before the edit
    raw_sql(store_url, edit)
    rc, err, _ = _cli(["monitor", "status", "--db", store_url], capsys)
    _one_line(rc, err, "stored rule", "monitor verify")
    rc, err, out = _cli(["monitor", "verify", "--db", store_url], capsys)
    assert rc == 1 and "PROBLEM: the stored rule" in out and "intact" not in out, (rc, err, out)
    rc, err, _ = _cli(["monitor", "report", "--db", store_url, "-o", str(tmp_path / "m.html")], capsys)
    _one_line(rc, err, "stored rule")


def test_a_deleted_rule_row_is_refused_by_status_and_reported_by_verify(tmp_path, capsys):
    """SQLite enforces the rules' foreign key only on the store's own connection: deleting the rule (outside the
    store) made ``status`` skip every case of it (no stream, no alarm) while ``verify`` said intact."""
    db = str(tmp_path / "m.db")
    _alarmed_store(db, tmp_path)
    raw_sql(db, "DELETE FROM rules")
    rc, err, _ = _cli(["monitor", "status", "--db", db], capsys)
    _one_line(rc, err, "not in the table rules")
    rc, _, out = _cli(["monitor", "verify", "--db", db], capsys)
    assert rc == 1 and "is not in the table rules" in out, out


@pytest.mark.parametrize("edit, problem", [
    ("UPDATE runs SET folder = '/elsewhere'", "its folder do(es) not match"),
    ("UPDATE runs SET n_cases = 5", "its n_cases do(es) not match"),
    ("UPDATE runs SET model_digest = NULL", "its model_digest do(es) not match"),
    ("UPDATE runs SET source_digest = 'x'", "its source_digest do(es) not match"),
])
def test_verify_covers_the_runs_table(store_url, tmp_path, capsys, edit, problem):
    _alarmed_store(store_url, tmp_path)
    assert _cli(["monitor", "verify", "--db", store_url], capsys)[0] == 0
    raw_sql(store_url, edit)
    rc, _, out = _cli(["monitor", "verify", "--db", store_url], capsys)
    assert rc == 1 and problem in out, out


def test_verify_reports_case_rows_without_their_run(tmp_path, capsys):
    """A case row added outside the store under a run that does not exist joined no entry's rows: not reported."""
    db = str(tmp_path / "m.db")
    _alarmed_store(db, tmp_path)
    raw_sql(db, "INSERT INTO cases (run_id, case_id, site, triaged_at, score, decision, code, reason, rule_digest) "
                "SELECT 999, 'extra', site, triaged_at, score, decision, code, reason, rule_digest FROM cases LIMIT 1")
    rc, _, out = _cli(["monitor", "verify", "--db", db], capsys)
    assert rc == 1 and "1 cases rows without their run" in out, out


# ----------------------------------------------------------------- values of the wrong type read from the store
@pytest.mark.parametrize("edit, column", [
    ("UPDATE cases SET score = 'abc'", "score"),
    ("UPDATE cases SET site = X'41' WHERE case_id = 'c001'", "site"),  # bytes beside text: sorted() failed
    ("UPDATE labels SET loss = 7", "loss"),
    ("UPDATE labels SET failure = 'yes'", "failure"),
])
def test_a_value_of_the_wrong_type_in_the_store_is_one_line_exit_2(tmp_path, capsys, edit, column):
    """SQLite keeps a value of any type in any column: a site of bytes beside text sites was a TypeError traceback
    (exit 1, which reads as "alarm"); ``verify`` reports the edit (exit 1, no traceback)."""
    db = str(tmp_path / "m.db")
    _alarmed_store(db, tmp_path)
    raw_sql(db, edit)
    rc, err, _ = _cli(["monitor", "status", "--db", db], capsys)
    _one_line(rc, err, f"column {column}", "m.db")
    rc, err, out = _cli(["monitor", "verify", "--db", db], capsys)
    assert rc == 1 and not err and "were edited or deleted" in out, (err, out)


# ------------------------------------------------------------------------------------------------- --time
@pytest.mark.parametrize("when", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"])
def test_a_time_out_of_range_in_utc_is_one_line_naming_the_option(tmp_path, capsys, when):
    folder = write_triage(tmp_path / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}])
    rc, err, _ = _cli(["monitor", "record", str(folder), "--db", str(tmp_path / "m.db"), "--time", when], capsys)
    _one_line(rc, err, "--time", when)


# -------------------------------------------------------------------------------------------------- sidecars
@pytest.mark.parametrize("text, why", [
    ("[" * 200000 + "]" * 200000, "nested 200000 levels"),
    ('{"InstitutionName": "A", "InstitutionName": "B"}', "given twice"),
    ("not json", "not valid JSON"),
])
def test_a_sidecar_that_is_not_strict_json_is_one_line_naming_it(tmp_path, capsys, text, why):
    img = tmp_path / "img"
    img.mkdir()
    (img / "a.json").write_text(text)
    folder = write_triage(tmp_path / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}],
                          images={"a": str(img / "a.nii.gz")})
    rc, err, _ = _cli(["monitor", "record", str(folder), "--db", str(tmp_path / "m.db")], capsys)
    _one_line(rc, err, str(img / "a.json"), why)


# ---------------------------------------------------------------------------------------- sites and scanners
def test_a_sites_table_that_is_not_utf8_names_the_file(tmp_path, capsys):
    folder = write_triage(tmp_path / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}])
    (tmp_path / "sites.csv").write_bytes(b"case,site\na,Z\xfcrich\n")
    rc, err, _ = _cli(["monitor", "record", str(folder), "--db", str(tmp_path / "m.db"), "--sites",
                       str(tmp_path / "sites.csv")], capsys)
    _one_line(rc, err, str(tmp_path / "sites.csv"), "not UTF-8")


@pytest.mark.parametrize("scanner", ["sc\x00x", "s" * 5000])
def test_a_scanner_of_the_sites_table_is_checked(tmp_path, scanner):
    (tmp_path / "sites.csv").write_text(f"case,site,scanner\na,A,{scanner}\n")
    with pytest.raises(ValueError, match=r"sites.csv: line 2: 'scanner'"):
        read_sites(tmp_path / "sites.csv")


def test_a_scanner_with_nul_from_a_sidecar_is_refused_before_any_write(store_url, tmp_path, capsys):
    """On PostgreSQL the NUL reached the INSERT and failed with a message that named only the database."""
    img = tmp_path / "img"
    img.mkdir()
    (img / "a.json").write_text(json.dumps({"InstitutionName": "A", "Manufacturer": "M\x00X"}))
    with pytest.raises(ValueError, match=r"a.json: field 'Manufacturer' holds a NUL"):
        sidecar_site(str(img / "a.nii.gz"))
    folder = write_triage(tmp_path / "t", make_rule([0.1]), [{"case": "a", "score": 0.1}],
                          images={"a": str(img / "a.nii.gz")})
    rc, err, _ = _cli(["monitor", "record", str(folder), "--db", store_url], capsys)
    _one_line(rc, err, str(img / "a.json"), "NUL")


@pytest.mark.parametrize("field, value", [("scanner", "M\x00X"), ("scanner", "s" * 1001), ("code", "a\x00"),
                                          ("prediction", "p" * 1001)])
def test_the_store_checks_every_text_field_of_a_case_before_writing(store_url, tmp_path, field, value):
    rule = make_rule([0.1])
    run = read_triage_run(write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.1}]))
    case = CaseRecord(**{**run.cases[0].__dict__, field: value})
    with MonitorStore(store_url) as store:
        with pytest.raises(ValueError, match=f"the {field} of case 'a'"):
            store.record_run(run.rule, [case], source_digest="x", folder="f", triaged_at="t", model_digest=None)
        assert store.cases() == [] and store.runs() == []


def test_the_store_digest_is_that_of_the_rule_files():
    """The store computes a rule's digest with the standard library only (its writers start without torch)."""
    from monai_unc.monitoring.store import rule_body_digest

    rule = make_rule([0.1, 0.2])
    rule.update(signature={"key": "k", "value": "v"}, other={"é": [1.5, None, "ü"]})
    assert rule_body_digest(rule) == rule_digest(rule)
