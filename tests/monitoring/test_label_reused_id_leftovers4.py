"""A case id reused across runs (another scan, same site): a label must name its run, never go to the latest record.

Before the fix ``monitor label`` gave the label of the January scan "001" to the February scan "001" (the latest
record of the id), so January's risk stream missed its audited failure and February's counted one that is not its.
"""

from __future__ import annotations

import pytest

from monai_unc.monitoring import MonitorStore
from monai_unc.monitoring.records import read_label_table
from monai_unc.workflows.monitor import record_labels, record_triage

from ._stream import make_rule, write_triage


def _two_runs(store_url, tmp_path):
    rule = make_rule([0.1, 0.2, 0.3])
    assert record_triage(store_url, write_triage(tmp_path / "jan", rule, [{"case": "001", "score": 0.1},
                                                                          {"case": "002", "score": 0.2}]),
                         site="A").value == 1
    assert record_triage(store_url, write_triage(tmp_path / "feb", rule, [{"case": "001", "score": 0.3}]),
                         site="A").value == 2


def _losses(store_url):
    with MonitorStore(store_url, create=False) as store:
        assert store.verify().ok
        return {(c["run"], c["case_id"]): c["loss"] for c in store.cases()}


def test_a_reused_case_id_needs_its_run(store_url, tmp_path):
    _two_runs(store_url, tmp_path)
    table = tmp_path / "audit.csv"
    table.write_text("case,failure\n001,1\n002,0\n")
    with pytest.raises(ValueError, match=r"more than one run \('001' \(runs 1, 2\)\).*'run' column"):
        record_labels(store_url, table)
    assert set(_losses(store_url).values()) == {None}  # nothing written, not even 002's label
    table.write_text("case,run,failure\n001,1,1\n002,,0\n")  # the run given (or not needed: 002 is only in run 1)
    assert record_labels(store_url, table).value == 2
    assert _losses(store_url) == {(1, "001"): 1.0, (1, "002"): 0.0, (2, "001"): None}
    table.write_text("case,run,failure\n002,2,1\n")
    with pytest.raises(ValueError, match=r"not in the monitoring store \(\['002 in run 2'\]\)"):
        record_labels(store_url, table)


def test_the_store_refuses_without_run_or_record(store_url, tmp_path):
    _two_runs(store_url, tmp_path)
    with MonitorStore(store_url, create=False) as store:
        with pytest.raises(ValueError, match="more than one run"):
            store.add_labels([{"case": "001", "dice": None, "failure": 1, "loss": 1.0}], source="x")
        with pytest.raises(TypeError, match="the run of case '001'"):
            store.add_labels([{"case": "001", "dice": None, "failure": 1, "loss": 1.0, "run": "2"}], source="x")
        assert store.add_labels([{"case": "001", "dice": None, "failure": 0, "loss": 0.0, "run": 2}],
                                source="x") == 1
    assert _losses(store_url)[(2, "001")] == 0.0


def test_a_label_map_of_a_reused_case_id_is_refused(tmp_path):
    db = str(tmp_path / "m.db")
    _two_runs(db, tmp_path)
    folder = tmp_path / "maps"
    folder.mkdir()
    (folder / "001.nii.gz").write_bytes(b"not read: refused before")
    with pytest.raises(ValueError, match=r"case '001' is recorded more than once \(run 1 at A; run 2 at A\).*'run'"):
        record_labels(db, folder)


def test_the_run_column_is_checked(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("case,Run,dice\na,2,0.5\nb,,0.7\n")
    assert read_label_table(path) == [{"case": "a", "dice": 0.5, "failure": None, "run": 2},
                                      {"case": "b", "dice": 0.7, "failure": None, "run": None}]
    for bad in ("0", "-1", "1.5", "x"):
        path.write_text(f"case,run,dice\na,{bad},0.5\n")
        with pytest.raises(ValueError, match=r"line 2: 'run' must be a run id"):
            read_label_table(path)
    path.write_text("case,run,dice\na,1,0.5\na,1,0.6\n")
    with pytest.raises(ValueError, match="case 'a' in run 1 is listed twice"):
        read_label_table(path)
