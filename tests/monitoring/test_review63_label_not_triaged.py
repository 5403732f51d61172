"""Review 63: ``monitor label`` skips, with a warning naming it, the label of a case its triage run did not triage.

A case ``infer`` failed on has no decision: ``triage.json`` lists it under ``not_triaged`` and ``monitor record``
records the others. The auditors label the whole batch, that case too; before review 63 ``monitor label`` refused the
whole folder ("1 labelled case(s) not in the monitoring store"), so no label of the batch was recorded. The record of
the run now keeps the cases it could not triage (in its audit entry), and a label of one of them is skipped with a
warning naming it; a label of a case the store never heard of is still refused.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.io.files import save_nifti
from monai_unc.io.provenance import rule_digest
from monai_unc.monitoring import MonitorStore

from ._stream import make_rule, write_triage


def _seg(path):
    seg = np.zeros((6, 6, 4), dtype=np.uint8)
    seg[1:4, 1:4, 1] = 1
    path.parent.mkdir(parents=True, exist_ok=True)
    save_nifti(seg, np.eye(4), path)
    return path


def _recorded(tmp_path, capsys, not_triaged=("b",)):
    """A store holding one run: case ``a`` triaged, the cases of ``not_triaged`` not (``triage.json``'s list)."""
    pred = _seg(tmp_path / "preds" / "a.nii.gz")
    folder = write_triage(tmp_path / "triage", make_rule([0.1, 0.2, 0.3]), [{"case": "a", "score": 0.1}],
                          segs={"a": str(pred)})
    doc = json.loads((folder / "triage.json").read_text())
    doc["not_triaged"] = list(not_triaged)
    doc["digest"] = rule_digest(doc)  # as triage writes it
    (folder / "triage.json").write_text(json.dumps(doc))
    db = str(tmp_path / "m.db")
    assert cli.main(["monitor", "record", str(folder), "--db", db, "--site", "A", "-q"]) == 0
    capsys.readouterr()
    return db, pred


def _labels(db):
    with MonitorStore(db, read_only=True) as store:
        assert store.verify().ok
        return {c["case_id"]: c["dice"] for c in store.cases() if c["n_labels"]}


def test_a_label_map_of_a_case_not_triaged_is_skipped_with_a_warning(tmp_path, capsys):
    db, pred = _recorded(tmp_path, capsys)
    maps = tmp_path / "maps"
    maps.mkdir()
    shutil.copy(pred, maps / "a.nii.gz")
    shutil.copy(pred, maps / "b.nii.gz")  # the auditors labelled the case infer failed on too
    assert cli.main(["monitor", "label", "--db", db, "--labels", str(maps)]) == 0  # it was 2: nothing recorded
    out = capsys.readouterr()
    assert "recorded 1 audited label(s)" in out.out
    warned = [line for line in (out.out + out.err).splitlines() if "'b'" in line]
    assert len(warned) == 1 and "not triaged" in warned[0] and "skipped" in warned[0], out
    assert _labels(db) == {"a": 1.0}


def test_a_label_table_row_of_a_case_not_triaged_is_skipped_too(tmp_path, capsys):
    db, _ = _recorded(tmp_path, capsys, not_triaged=("b", "c"))
    table = tmp_path / "audit.csv"
    table.write_text("case,dice\na,0.9\nb,0.2\n")
    assert cli.main(["monitor", "label", "--db", db, "--labels", str(table), "-q"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'b'" in err[0] and "'c'" not in err[0], err  # names the skipped label only
    assert _labels(db) == {"a": 0.9}


def test_a_label_of_a_case_the_store_never_heard_of_is_still_refused(tmp_path, capsys):
    db, pred = _recorded(tmp_path, capsys)
    maps = tmp_path / "maps"
    maps.mkdir()
    for case in ("a", "b", "z"):
        shutil.copy(pred, maps / f"{case}.nii.gz")
    assert cli.main(["monitor", "label", "--db", db, "--labels", str(maps)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not in the monitoring store" in err[0] and "'z'" in err[0], err
    assert _labels(db) == {}  # nothing recorded


def test_only_labels_of_cases_not_triaged_record_nothing_and_say_so(tmp_path, capsys):
    db, pred = _recorded(tmp_path, capsys)
    maps = tmp_path / "maps"
    maps.mkdir()
    shutil.copy(pred, maps / "b.nii.gz")
    assert cli.main(["monitor", "label", "--db", db, "--labels", str(maps)]) == 0
    out = capsys.readouterr()
    assert "recorded 0 audited label(s)" in out.out and "'b'" in out.out + out.err
    with MonitorStore(db, read_only=True) as store:
        assert [e.action for e in store.audit_log()].count("label") == 0  # no empty entry in the audit log


def test_record_run_checks_not_triaged(tmp_path):
    from monai_unc.monitoring.store import CaseRecord, rule_body_digest

    rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
    rule["digest"] = rule_body_digest(rule)
    case = CaseRecord("a", "A", None, "2026-01-31T00:00:00+00:00", 0.2, float("nan"), float("nan"), "accept",
                      "accepted", "the rule's reason", rule["digest"], None)
    with MonitorStore(str(tmp_path / "m.db")) as store:
        for bad, error in (("b", TypeError), ([3], ValueError), (["x\x00"], ValueError)):
            with pytest.raises(error, match="not_triaged"):
                store.record_run(rule, [case], source_digest="s", folder="t", triaged_at="2026-01-31T00:00:00+00:00",
                                 model_digest=None, not_triaged=bad)
        assert store.runs() == []  # nothing written
        store.record_run(rule, [case], source_digest="s", folder="t", triaged_at="2026-01-31T00:00:00+00:00",
                         model_digest=None, not_triaged=["b", "b", "c"])
        assert store.not_triaged() == {"b": [1], "c": [1]} and store.verify().ok
