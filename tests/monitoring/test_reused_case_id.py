"""A new scan that reuses a case id with the same decision values, told from the same decision recorded again.

Before: a case whose rule, site, case id, score, image z-score, expected Dice and decision matched an earlier record
was skipped as "already recorded" whatever its prediction: a follow-up scan of a patient under the same id whose
score happened to equal the first one's (a score of 0, a count; no image statistics, no expected Dice) was dropped
from the alarms, the line saying only "1 already recorded (skipped)". The store now keeps a digest of each
prediction's voxels (schema 2) and records such a scan; the same prediction triaged again (another triage folder,
the file written again in another format) is still skipped, and a skip that no digest confirms is a warning.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.io.files import save_nifti
from monai_unc.monitoring import MonitorStore, read_triage_run
from monai_unc.monitoring.records import prediction_digest
from monai_unc.monitoring.store import SCHEMA_VERSION

from ._stream import make_rule, raw_sql, write_triage

DATA = Path(__file__).parent / "data"
RULE = make_rule([0.0, 0.1, 0.2, 0.3], target=0.1)  # the rule of data/store_schema1.sql


def _seg(path, k, dtype=np.uint8):
    """A predicted label map whose voxels depend on ``k`` (another scan: another ``k``)."""
    seg = np.zeros((6, 6, 4), dtype=dtype)
    seg[1:4, 1:4, 1 + k % 2] = 1 + k // 2
    path.parent.mkdir(parents=True, exist_ok=True)
    save_nifti(seg, np.eye(4), path)
    return str(path)


def _triage(folder, segs, scores=None):
    scores = scores or {c: 0.0 for c in segs}
    return write_triage(folder, RULE, [{"case": c, "score": scores[c]} for c in segs], segs=segs)


def _record(store, folder):
    run = read_triage_run(folder, site="Centre A")
    return store.record_run(run.rule, run.cases, source_digest=run.source_digest, folder=str(run.folder),
                            triaged_at=run.triaged_at, model_digest=run.model_digest, command=["test"])


def _ids(store):
    return sorted(c["case_id"] for c in store.cases())


def test_a_new_scan_with_the_same_values_is_recorded(store_url, tmp_path):
    jan = _triage(tmp_path / "jan", {"p001": _seg(tmp_path / "preds_jan" / "p001.nii.gz", 0)})
    feb = _triage(tmp_path / "feb", {"p001": _seg(tmp_path / "preds_feb" / "p001.nii.gz", 1)})  # the follow-up
    with MonitorStore(store_url) as store:
        _record(store, jan)
        _record(store, feb)
        assert _ids(store) == ["p001", "p001"]  # both scans count in the alarms
        assert [r["n_cases"] for r in store.runs()] == [1, 1]
        assert store.verify().ok


def test_the_same_prediction_again_is_skipped(store_url, tmp_path):
    first = _seg(tmp_path / "preds" / "p001.nii.gz", 0)
    jan = _triage(tmp_path / "jan", {"p001": first})
    # the predictions folder grew, and p001's prediction was written again in another format (the same voxels), on
    # other storage
    again = _seg(tmp_path / "moved" / "p001.nii", 0, dtype=np.int16)
    feb = _triage(tmp_path / "feb", {"p001": again, "p002": _seg(tmp_path / "moved" / "p002.nii.gz", 2)},
                  {"p001": 0.0, "p002": 0.1})
    assert prediction_digest(first) == prediction_digest(again) is not None
    with MonitorStore(store_url) as store:
        _record(store, jan)
        _record(store, feb)
        assert _ids(store) == ["p001", "p002"]  # p001 once: no case weighs twice
        entry = json.loads(store.audit_log()[-1].details)
        assert (entry["n_cases"], entry["n_already_recorded"], entry["n_skipped_unconfirmed"]) == (1, 1, 0)
        assert store.verify().ok


def test_a_prediction_replaced_after_triage_is_no_evidence(tmp_path):
    pred = _seg(tmp_path / "preds" / "p001.nii.gz", 0)
    jan = _triage(tmp_path / "jan", {"p001": pred})
    written = (jan / "triage.json").stat().st_mtime
    _seg(tmp_path / "preds" / "p001.nii.gz", 1)  # the follow-up scan's prediction, in the same file
    os.utime(pred, (written + 60, written + 60))
    assert prediction_digest(pred, written) is None  # not the prediction triage read
    assert read_triage_run(jan, site="A").cases[0].prediction_sha256 is None


def _main(argv, capsys):
    capsys.readouterr()
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _old_store(tmp_path):
    db = tmp_path / "monitor.db"
    conn = sqlite3.connect(db)
    conn.executescript((DATA / "store_schema1.sql").read_text(encoding="utf-8"))
    conn.close()
    return str(db)


def test_a_store_of_schema_1_is_read_as_it_is_and_upgraded(tmp_path, capsys):
    db = _old_store(tmp_path)
    before = Path(db).read_bytes()
    rc, out, err = _main(["monitor", "status", "--db", db], capsys)
    assert rc == 0 and "Centre A" in out, err  # the readers need nothing of schema 2
    rc, out, err = _main(["monitor", "verify", "--db", db], capsys)
    assert rc == 0 and "3 entries" in out and "intact" in out, out + err
    assert Path(db).read_bytes() == before  # nothing written, nothing migrated
    # the old record has no prediction digest: a case with its values is skipped, and the line says it is unconfirmed
    feb = _triage(tmp_path / "feb", {"p001": _seg(tmp_path / "preds" / "p001.nii.gz", 1)})
    rc, out, err = _main(["monitor", "record", str(feb), "--db", db, "--site", "Centre A"], capsys)
    assert rc == 0 and "recorded 0 case(s) from 0 site(s) as run 2; 1 already recorded (skipped)" in out, out + err
    assert "warning: 1 of the case(s) skipped as already recorded" in out and "could not be confirmed" in out
    with MonitorStore(db, read_only=True) as store:
        assert store.schema_version() == SCHEMA_VERSION
        log = store.audit_log()
        assert [e.action for e in log] == ["migrate", "record", "label", "migrate", "record"]
        assert json.loads(log[3].details) == {"schema_version": SCHEMA_VERSION}
        assert store.verify().ok  # the entries of schema 1 verify as they were written
    # a later scan of p001 under a digest is told from the next one
    mar = _triage(tmp_path / "mar", {"p003": _seg(tmp_path / "preds" / "p003.nii.gz", 0)})
    apr = _triage(tmp_path / "apr", {"p003": _seg(tmp_path / "preds2" / "p003.nii.gz", 3)})
    for folder in (mar, apr):
        rc, out, err = _main(["monitor", "record", str(folder), "--db", db, "--site", "Centre A"], capsys)
        assert rc == 0 and out.startswith("recorded 1 case(s)") and "warning" not in out, out + err


@pytest.mark.parametrize("edit", [
    "UPDATE cases SET prediction_sha256 = 'sha256:' || substr(prediction_sha256, 8, 63) || '0' WHERE case_id = 'p009'",
    "UPDATE cases SET prediction_sha256 = NULL WHERE case_id = 'p009'",
    "UPDATE cases SET prediction_sha256 = 'sha256:00' WHERE case_id = 'p001'",  # a row of a schema 1 entry
])
def test_an_edited_prediction_digest_is_reported(tmp_path, capsys, edit):
    db = _old_store(tmp_path)
    folder = _triage(tmp_path / "feb", {"p009": _seg(tmp_path / "preds" / "p009.nii.gz", 1)})
    assert _main(["monitor", "record", str(folder), "--db", db, "--site", "Centre A"], capsys)[0] == 0
    raw_sql(db, edit)
    rc, out, _ = _main(["monitor", "verify", "--db", db], capsys)
    assert rc == 1 and "PROBLEM: the prediction digests of the rows written by audit entry" in out, out


def test_a_schema_version_edited_back_to_1_is_reported(tmp_path, capsys):
    db = str(tmp_path / "monitor.db")
    MonitorStore(db).close()
    raw_sql(db, "UPDATE monitor_meta SET value = '1' WHERE key = 'schema_version'")  # readers read 1 as it is
    rc, out, _ = _main(["monitor", "verify", "--db", db], capsys)
    assert rc == 1 and "schema version in the table monitor_meta ('1')" in out and f"('{SCHEMA_VERSION}')" in out, out
