"""A label's loss follows the rule of the case record it was computed for: when the case is recorded again (a rerun,
perhaps under another rule) between the read and the write of ``monitor label``, the label is refused instead of
going to the newer record with the older rule's loss."""

from __future__ import annotations

import pytest

from monai_unc.monitoring import MonitorStore, read_triage_run
from monai_unc.monitoring.store import MonitorStore as StoreClass

from ._stream import make_rule, write_triage


def _record(store, folder):
    run = read_triage_run(folder, site="S1")
    return store.record_run(run.rule, run.cases, source_digest=run.source_digest, folder=str(run.folder),
                            triaged_at=run.triaged_at, model_digest=run.model_digest, command=["test"])


def test_stale_case_row_refused(store_url, tmp_path):
    failure_rule = make_rule([0.1, 0.2, 0.3], target=0.2, risk="failure")
    dice_rule = make_rule([0.1, 0.2, 0.3], target=0.2, risk="1-dice", tag="second")
    with MonitorStore(store_url) as store:
        _record(store, write_triage(tmp_path / "t1", failure_rule, [{"case": "a", "score": 0.1}]))
        old_row = store.cases()[0]["row"]
        _record(store, write_triage(tmp_path / "t2", dice_rule, [{"case": "a", "score": 0.2}]))
        new_row = store.cases()[-1]["row"]
        assert new_row != old_row
        n_entries = store.verify().n_entries
        with pytest.raises(ValueError, match=r"recorded again while the labels were read \(\['a'\]\)"):
            store.add_labels([{"case": "a", "dice": 0.75, "failure": None, "loss": 1.0, "case_row": old_row}],
                             source="x")
        assert store.verify().n_entries == n_entries  # nothing written
        assert store.add_labels([{"case": "a", "dice": 0.75, "failure": None, "loss": 0.25, "case_row": new_row}],
                                source="x") == 1
        assert store.cases()[-1]["loss"] == 0.25
        # without case_row or run (other callers): refused, the id is recorded in two runs (perhaps two scans)
        with pytest.raises(ValueError, match=r"recorded in more than one run \('a' \(runs 1, 2\)\).*'run' column"):
            store.add_labels([{"case": "a", "dice": 0.9, "failure": None, "loss": 0.1}], source="y")
        assert store.add_labels([{"case": "a", "dice": 0.9, "failure": None, "loss": 0.1, "run": 2}], source="y") == 1


def test_monitor_label_rerun_between_read_and_write(tmp_path, monkeypatch):
    from monai_unc.workflows.monitor import record_labels

    db = tmp_path / "m.db"
    failure_rule = make_rule([0.1, 0.2, 0.3], target=0.2, risk="failure")
    dice_rule = make_rule([0.1, 0.2, 0.3], target=0.2, risk="1-dice", tag="second")
    with MonitorStore(str(db)) as store:
        _record(store, write_triage(tmp_path / "t1", failure_rule, [{"case": "a", "score": 0.1}]))
    labels = tmp_path / "labels.csv"
    labels.write_text("case,dice\na,0.75\n")
    original = StoreClass.add_labels

    def rerun_first(self, rows, **kw):  # another process records a rerun of case a under the 1-dice rule
        _record(self, write_triage(tmp_path / "t2", dice_rule, [{"case": "a", "score": 0.2}]))
        return original(self, rows, **kw)

    monkeypatch.setattr(StoreClass, "add_labels", rerun_first)
    with pytest.raises(ValueError, match="recorded again"):
        record_labels(str(db), labels)
    monkeypatch.setattr(StoreClass, "add_labels", original)
    with pytest.raises(ValueError, match="more than one run"):  # read again: case a is now in two runs
        record_labels(str(db), labels)
    labels.write_text("case,run,dice\na,2,0.75\n")
    assert record_labels(str(db), labels).value == 1  # the second run's record: the 1-dice rule's loss
    with MonitorStore(str(db)) as store:
        assert store.cases()[-1]["loss"] == pytest.approx(0.25)
