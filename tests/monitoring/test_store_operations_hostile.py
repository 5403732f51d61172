"""The monitoring store under a hospital's operations (a hostile review; each test failed before its fix).

- a database password given in ``--db`` never reaches the audit log, the dashboard or an error message;
- ``verify`` run while another process records reads one snapshot (it reported tampering that did not happen);
- reading every case on PostgreSQL right after a batch of labels (statistics not yet analysed) reads the labels once,
  not once per case (minutes instead of a second);
- the read-only commands read a store on a read-only file system (a snapshot, a share mounted read-only);
- ``monitor status`` groups the rows once, not once per site;
- text that is not UTF-8 (a Latin-1 terminal or share) is refused naming its field, and kept out of the way in the
  audit log's command line.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from monai_unc import cli
from monai_unc.monitoring import (
    AuditEntry,
    CaseRecord,
    GroupStatus,
    MonitorStore,
    VerifyResult,
    monitor_status,
    read_sites,
    read_triage_run,
)
from monai_unc.monitoring.store import redact_url
from monai_unc.report.monitor import build_monitor_page
from monai_unc.workflows.monitor import record_triage
from tests._paths import ROOT

from ._stream import make_rule, write_triage

SECRET = "Pa%ss@w0rd/42"


def _cases(rule: dict, tag: str, n: int, site: str = "A") -> list[CaseRecord]:
    return [CaseRecord(f"{tag}-{i}", site, None, "2026-01-01T00:00:00+00:00", 0.1 + i / (10 * n), math.nan, 0.9,
                       "accept", "accepted", "ok", rule["digest"], None) for i in range(n)]


def _record(store: MonitorStore, rule: dict, tag: str, n: int = 5, command: list[str] | None = None) -> None:
    store.record_run(rule, _cases(rule, tag, n), source_digest=tag, folder="f", triaged_at="t", model_digest=None,
                     command=command or ["test"])


# ------------------------------------------------------------------------------------------- passwords kept out
@pytest.mark.parametrize("url, secret", [
    ("postgresql://ann:TopSecret@db.example/monitor", "TopSecret"),
    ("postgresql://:TopSecret@db.example/monitor", "TopSecret"),  # no user name
    ("postgresql://ann:Top@Secret@db.example/monitor", "Secret"),  # an '@' left unencoded in the password
    ("postgresql://ann@db.example/monitor?password=TopSecret&sslmode=require", "TopSecret"),
    ("postgres://ann@db.example/monitor?sslmode=require&password=TopSecret", "TopSecret"),
])
def test_redact_url_leaves_out_every_form_of_the_password(url, secret):
    shown = redact_url(url)
    assert secret not in shown and "***" in shown and "db.example" in shown.rsplit("@", 1)[-1]


@pytest.mark.parametrize("secret", ["Xk#9q", "Xk?9q", "Xk 9q", "a:b#c?d@e"])
def test_a_password_with_a_hash_a_question_mark_or_a_space_is_redacted(tmp_path, secret):
    """Found by the review of this change: the redaction stopped the password at an unencoded ``#``, ``?`` or space,
    which libpq takes as part of it (it ends the user part at the ``@`` before the first ``/``), so a generated
    password such as ``Xk#9q`` stayed in clear in the audit log, the dashboard and connection errors (the version
    before redacted it)."""
    url = f"postgresql://ann:{secret}@db.example/monitor"
    shown = redact_url(url)
    assert shown == "postgresql://ann:***@db.example/monitor", shown
    assert redact_url(f"monai-unc monitor status --db {url} --site A@B").endswith("--site A@B")
    rule = make_rule([0.1, 0.2])
    with MonitorStore(tmp_path / "m.db") as store:
        _record(store, rule, "a", command=["monai-unc", "monitor", "record", "t", "--db", url])
        commands = [e.command for e in store.audit_log()]
    assert not any(secret in c for c in commands), commands


def test_a_passphrase_of_several_words_is_redacted(tmp_path, capsys):
    """Found by the review of the redaction: a password of several words (a passphrase, ``correct horse battery
    staple``) was redacted only from its last space on, so the command line in the audit log kept it whole, and
    libpq's refusal (``unexpected spaces found in "correct horse battery staple"``) printed it on the error line;
    given as the ``password`` query parameter, its first word only was left out ("*** horse battery staple")."""
    secret = "correct horse battery staple"
    url = f"postgresql://ann:{secret}@127.0.0.1:9/monitor"
    assert redact_url(url) == "postgresql://ann:***@127.0.0.1:9/monitor"
    assert redact_url(f"monai-unc monitor status --db {url} --site A@B").endswith("/monitor --site A@B")
    shown = redact_url(f"monai-unc monitor status --db postgresql://ann:{secret}@db --site A@B")  # no database path
    assert shown.endswith("ann:***@db --site A@B"), shown
    rule = make_rule([0.1, 0.2])
    with MonitorStore(tmp_path / "m.db") as store:
        _record(store, rule, "a", command=["monai-unc", "monitor", "record", "t", "--db", url])
        commands = [e.command for e in store.audit_log()]
    assert not any("horse" in c for c in commands), commands
    query = f"postgresql://ann@127.0.0.1:9/monitor?password={secret}"  # the query form, also quoted
    assert redact_url(query) == "postgresql://ann@127.0.0.1:9/monitor?password=***"
    assert redact_url(f"{query}&sslmode=require") == "postgresql://ann@127.0.0.1:9/monitor?password=***&sslmode=require"
    assert "horse" not in redact_url(f"postgresql:///monitor?password='{secret}'")
    pytest.importorskip("psycopg")
    for given in (url, query):
        assert cli.main(["monitor", "status", "--db", given]) == 2
        err = capsys.readouterr().err
        assert "horse" not in err and "battery" not in err and "error" in err, err


def test_the_audit_log_and_the_dashboard_never_hold_the_database_password(tmp_path):
    """Found by hostile testing: ``monitor record --db postgresql://ann:PASSWORD@...`` stored the password in the
    hash-chained audit log (the command line of its entry, which cannot be removed without breaking the chain) and the
    dashboard printed it in its audit trail."""
    url = f"postgresql://ann:{SECRET.replace('%', '%25').replace('@', '%40').replace('/', '%2F')}@db.example/m"
    rule = make_rule([0.1, 0.2])
    with MonitorStore(tmp_path / "m.db") as store:
        _record(store, rule, "a", command=["monai-unc", "monitor", "record", "t", "--db", url, "--site", "A@B"])
        _record(store, rule, "b", command=["monai-unc", "triage", f"--monitor={url}?password=Other1"])
        log = store.audit_log()
        verified = store.verify()
    assert verified.ok
    commands = [e.command for e in log]
    assert not any("Pa%25ss" in c or "Other1" in c for c in commands), commands
    assert commands[1].endswith("--site A@B")  # the rest of the command line as it was
    # a store written before: the dashboard shows its command lines without the password
    old = AuditEntry(9, "t", "ann", "h", "v", f"monai-unc monitor status --db {url}", "record", "{}", "0", "0")
    page = build_monitor_page([], [*log, old], VerifyResult(True, 3, "0"), tmp_path / "monitor.html")
    text = page.read_text()
    assert "Pa%25ss" not in text and "Other1" not in text and "ann:***@db.example" in text


def test_a_connection_error_never_echoes_the_password(capsys):
    """libpq names a password it cannot decode (``invalid percent-encoded token: "Pa%ss@w0rd"``): the error line
    printed it."""
    pytest.importorskip("psycopg")
    for url in ("postgresql://ann:Pa%ZZss@127.0.0.1:9/m", "postgresql://ann@127.0.0.1:9/m?password=Pa%ZZss"):
        assert cli.main(["monitor", "status", "--db", url]) == 2
        err = capsys.readouterr().err
        assert "Pa%ZZss" not in err and "Pa" not in err.split("***")[-1] and "error" in err, err


# -------------------------------------------------------------------------------------- verify during a record
def test_verify_while_another_process_records_reads_one_snapshot(store_url):
    """Found by hostile testing: ``verify`` read the audit log, then the tables; a run recorded in between (a nightly
    verify beside ``triage --monitor``) was reported as ``runs rows without their audit entry``: exit status 1,
    "tampered", for a store nobody touched (SQLite 21 of 2610 checks, PostgreSQL 22 of 161 during a recording)."""
    rule = make_rule([0.1, 0.2])
    with MonitorStore(store_url) as writer:
        _record(writer, rule, "before")
        with MonitorStore(store_url, read_only=True) as reader:
            original = reader.audit_log

            def then_a_record():
                entries = original()
                _record(writer, rule, f"during{len(entries)}")  # another process commits a run here
                return entries

            reader.audit_log = then_a_record
            res = reader.verify()
        assert res.ok, res.problems
        assert res.n_entries == 2  # the migration and the first record: the snapshot it started with
        assert writer.verify().ok and writer.verify().n_entries == 3


# --------------------------------------------------------------------------- PostgreSQL with stale statistics
def test_reading_the_cases_after_a_batch_of_labels_reads_the_labels_once(postgres_url):
    """Found by hostile testing: ``MonitorStore.cases`` (status, report, label) joined each case to its latest label
    through a correlated subquery; right after a batch of labels, before autovacuum analysed the table, PostgreSQL
    planned it as a nested loop over every label for each case: 50 000 cases and 5 000 labels took 33 s (0.7 s once
    analysed), 10^5 and 10^4 took 157 s. The labels are now aggregated once and joined."""
    import uuid

    import psycopg

    schema = "t" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{postgres_url}?options=-csearch_path%3D{schema}"
    rule = make_rule([0.1, 0.2])
    n_runs, per_run, n_labels = 20, 1000, 2000  # the planner's choice before the fix needs about this many
    n_cases = n_runs * per_run
    with MonitorStore(url) as store:
        for k in range(n_runs):
            _record(store, rule, f"c{k}", n=per_run)
        store._execute("ANALYZE")  # what autovacuum did before the audits came in
        store._execute("ALTER TABLE labels SET (autovacuum_enabled = false)")  # ... and not yet after
        store.add_labels([{"case": f"c{k}-{i}", "dice": 0.9, "failure": None, "loss": 0.0}
                          for k in range(n_runs) for i in range(0, per_run, per_run * n_runs // n_labels)],
                         source="audit")
        seen = []
        run_all = store._all

        def spy(sql, params=()):
            seen.append(sql)
            return run_all(sql, params)

        store._all = spy
        rows = store.cases()
        store._all = run_all
        assert len(rows) == n_cases and sum(r["loss"] is not None for r in rows) == n_labels
        query = next(s for s in seen if "FROM cases c" in s)
        plan = store._all("EXPLAIN (ANALYZE, FORMAT JSON) " + query)[0][0][0]["Plan"]

    def label_rows(node):
        read = node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)
        own = (node.get("Actual Loops", 1) * read
               if node.get("Relation Name") == "labels" and "Scan" in node["Node Type"] else 0)
        return own + sum(label_rows(child) for child in node.get("Plans", []))

    assert label_rows(plan) <= 4 * n_labels, label_rows(plan)


# --------------------------------------------------------------------------------- a read-only file system
_READ_ONLY = textwrap.dedent("""
    import sys
    from monai_unc import cli
    from monai_unc.monitoring import MonitorStore

    db = sys.argv[1]
    with MonitorStore(db, read_only=True) as store:
        assert [c["case_id"] for c in store.cases()] == ["a"], store.cases()
        assert store.verify().ok
    for argv in (["monitor", "verify", "--db", db], ["monitor", "status", "--db", db]):
        assert cli.main(argv) == 0, argv
    print("READ")
""")


def test_the_read_only_commands_read_a_store_on_a_read_only_file_system(tmp_path):
    """Found by hostile testing: on a snapshot or a share mounted read-only (a QC team's copy), ``status`` and
    ``verify`` said ``unable to open database file``: SQLite could not make the log's index (``<db>-shm``) beside
    the store, although its write-ahead log is empty (every commit is in the file). They read the file alone now, as
    on a full disk."""
    unshare = shutil.which("unshare")
    if sys.platform != "linux" or unshare is None:
        pytest.skip("a read-only mount needs Linux's unshare")
    store_dir, mount = tmp_path / "store", tmp_path / "ro"
    store_dir.mkdir()
    mount.mkdir()
    record_triage(str(store_dir / "m.db"), write_triage(tmp_path / "t", make_rule([0.1, 0.2]),
                                                        [{"case": "a", "score": 0.1}]))
    assert sorted(os.listdir(store_dir)) == ["m.db"]  # the last writer closed it: no log, no index
    ns = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c"]
    mount_ro = 'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2"'
    probe = subprocess.run([*ns, mount_ro, "sh", str(store_dir), str(mount)], capture_output=True, text=True,
                           timeout=60)
    if probe.returncode:
        pytest.skip(f"cannot mount read-only in a user namespace here: {probe.stderr.strip()[:200]}")
    code = tmp_path / "read.py"
    code.write_text(_READ_ONLY)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MONAI_UNC_TEST_DEVICE": "cpu"}
    res = subprocess.run([*ns, f'{mount_ro} && exec "$3" "$4" "$2/m.db"', "sh", str(store_dir), str(mount),
                          sys.executable, str(code)], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0 and "READ" in res.stdout, res.stdout + res.stderr
    assert sorted(os.listdir(store_dir)) == ["m.db"]


# ------------------------------------------------------------------------------------------- many sites
class _Counted(dict):
    """A case row that counts how often its site is read."""

    reads = 0

    def __getitem__(self, key):
        if key == "site":
            type(self).reads += 1
        return super().__getitem__(key)


def test_status_reads_each_row_a_bounded_number_of_times_whatever_the_number_of_sites():
    """Found by hostile testing: ``monitor_status`` filtered every row once per site (and per rule): 10^5 cases took
    0.8 s at 20 sites and 11 s at 2000 sites (a teleradiology service's referring hospitals)."""
    rule = {"calibration_scores": [0.1, 0.2, 0.3], "target_risk": 0.1, "image_reference": None}
    n, sites = 2000, 200
    cases = [_Counted(row=i, case_id=f"c{i}", site=f"site {i % sites}", score=0.1, image_z_max=math.nan,
                      decision="accept", loss=None, label_seq=None, rule_digest="sha256:x", triaged_at="t")
             for i in range(n)]
    _Counted.reads = 0
    groups = monitor_status(cases, {"sha256:x": rule, "sha256:y": rule})
    assert len(groups) == sites + 1 and all(isinstance(g, GroupStatus) for g in groups)
    assert [g.n_cases for g in groups[:-1]] == [n // sites] * sites and groups[-1].n_cases == n
    assert [c["case_id"] for c in groups[0].cases] == [f"c{i}" for i in range(0, n, sites)]  # in recording order
    assert _Counted.reads <= 3 * n, _Counted.reads


# --------------------------------------------------------------------------------------- text that is not UTF-8
def test_text_that_is_not_utf8_is_refused_naming_its_field_and_a_command_line_is_recorded(tmp_path, capsys):
    """Found by hostile testing: ``--site`` typed on a Latin-1 terminal (``H\\xf4pital``, which Python reads as
    ``'H\\udcf4pital'``) failed with ``'utf-8' codec can't encode character '\\udcf4' in position 220``, naming
    nothing; so did any argument that was not UTF-8 (a sites table on a Latin-1 share), which only the audit log's
    command line holds, and a triage folder of such a name."""
    db = tmp_path / "m.db"
    folder = write_triage(tmp_path / "t", make_rule([0.1, 0.2]), [{"case": "a", "score": 0.1}], digest=True)
    assert cli.main(["monitor", "record", str(folder), "--db", str(db), "--site", "H\udcf4pital"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the site of case 'a' must be UTF-8 text" in err[0], err
    sites = tmp_path / "sites H\udcf4pital.csv"  # b"sites H\xf4pital.csv" on disk
    sites.write_text("case,site\na,Centre A\n")
    run = read_triage_run(folder, sites=read_sites(sites))
    with MonitorStore(db) as store:
        with pytest.raises(ValueError, match="is not UTF-8 text"):
            store.record_run(run.rule, run.cases, source_digest=run.source_digest, folder=str(tmp_path / "H\udcf4"),
                             triaged_at=run.triaged_at, model_digest=None)
        store.record_run(run.rule, run.cases, source_digest=run.source_digest, folder=str(run.folder),
                         triaged_at=run.triaged_at, model_digest=None,
                         command=["monai-unc", "monitor", "record", str(folder), "--sites", str(sites)])
        assert [c["site"] for c in store.cases()] == ["Centre A"] and store.verify().ok
        assert store.audit_log()[-1].command.endswith("sites H\\udcf4pital.csv")


def test_a_password_holding_a_space_and_a_dash_is_redacted_from_the_audit_log(tmp_path, capsys):
    """Left by the review of the redaction: a password with a space before a ``-`` (``correct -horse``) ended, for
    the redaction, where a command line's next option would start, so the ``--db`` argument went into the
    hash-chained audit log (unremovable) and connection errors in clear. An argument or the ``--db`` value is one URL:
    the whole password goes."""
    secret = "correct -horse"
    url = f"postgresql://ann:{secret}@127.0.0.1:9/monitor"
    assert redact_url(url, whole=True) == "postgresql://ann:***@127.0.0.1:9/monitor"
    assert redact_url(f"--db={url}", whole=True) == "--db=postgresql://ann:***@127.0.0.1:9/monitor"
    rule = make_rule([0.1, 0.2])
    with MonitorStore(tmp_path / "m.db") as store:
        _record(store, rule, "a", command=["monai-unc", "monitor", "record", "t", "--db", url, f"--db={url}"])
        commands = [e.command for e in store.audit_log()]
    assert not any("horse" in c for c in commands), commands
    pytest.importorskip("psycopg")
    assert cli.main(["monitor", "status", "--db", url]) == 2
    err = capsys.readouterr().err
    assert "horse" not in err and "error" in err, err
