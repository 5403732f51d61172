"""Audited labels of one batch: each case record gets at most one (monitorstats review).

Before the fix a labels table with a ``site`` column could name one case twice, once without its site and once
with it (``a,,1`` and ``a,X,0``): ``read_label_table`` saw two keys, the store gave both labels to the same case
record, counted 2 audited labels, and the later row silently replaced the earlier one (a failure recorded as a
success, or the reverse, depending on the order of the rows). Also: a labeller killed in the middle of a batch
leaves neither a label nor an audit entry (a guard, as the killed recorder of test_store.py); a label matches its
case up to Unicode normalization and surrounding spaces, as a sites table's rows do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import unicodedata

import pytest

from monai_unc import cli
from monai_unc.monitoring import MonitorStore
from monai_unc.workflows.monitor import record_labels, record_triage

from ._stream import make_rule, write_triage


def _store(url, tmp_path):
    rule = make_rule([0.1, 0.2, 0.3])
    record_triage(url, write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.1}, {"case": "b", "score": 0.2}]),
                  site="X", command=["test"])


def _labels(url):
    with MonitorStore(url, create=False) as store:
        return {c["case_id"]: c["loss"] for c in store.cases()}, store.verify().n_entries


def test_one_case_labelled_with_and_without_its_site_is_refused(store_url, tmp_path):
    _store(store_url, tmp_path)
    before = _labels(store_url)
    table = tmp_path / "audit.csv"
    for text in ("case,site,failure\na,,1\na,X,0\n", "case,site,failure\na,X,0\na,,1\nb,X,0\n"):
        table.write_text(text)
        with pytest.raises(ValueError, match=r"1 case\(s\) labelled twice in one batch \('a.*'a.*one label per case"):
            record_labels(store_url, table, command=["test"])
        assert _labels(store_url) == before  # nothing written, not even an audit entry
    table.write_text("case,site,failure\na,,1\nb,X,0\n")  # each case once: recorded
    assert record_labels(store_url, table, command=["test"]).value == 2
    assert _labels(store_url)[0] == {"a": 1.0, "b": 0.0}


def test_the_store_refuses_two_labels_of_one_case_in_one_call(tmp_path):
    url = str(tmp_path / "m.db")
    _store(url, tmp_path)
    with MonitorStore(url, create=False) as store:
        with pytest.raises(ValueError, match="labelled twice in one batch"):
            store.add_labels([{"case": "a", "dice": None, "failure": 1, "loss": 1.0},
                              {"case": "a", "dice": None, "failure": 0, "loss": 0.0}], source="x", command=["t"])
        assert all(c["loss"] is None for c in store.cases()) and store.verify().ok
        # a case labelled again in a later batch keeps its latest label (documented), as before
        assert store.add_labels([{"case": "a", "dice": None, "failure": 1, "loss": 1.0}], source="x") == 1
        assert store.add_labels([{"case": "a", "dice": None, "failure": 0, "loss": 0.0}], source="y") == 1
        assert {c["case_id"]: c["loss"] for c in store.cases()}["a"] == 0.0


def test_monitor_label_says_it_in_one_line_with_exit_status_2(tmp_path, capsys):
    url = str(tmp_path / "m.db")
    _store(url, tmp_path)
    table = tmp_path / "audit.csv"
    table.write_text("case,site,dice\na,,0.5\na,X,0.9\n")
    assert cli.main(["monitor", "label", "--db", url, "--labels", str(table)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "labelled twice in one batch" in err[0]


_KILLED_LABELLER = textwrap.dedent("""
    import os, signal, sys
    from monai_unc.monitoring import store as store_module

    original = store_module.MonitorStore._executemany

    def half_then_die(self, sql, rows):
        original(self, sql, rows[: len(rows) // 2])  # half of the labels are inserted ...
        os.kill(os.getpid(), signal.SIGKILL)  # ... and the writer is killed before the commit

    store_module.MonitorStore._executemany = half_then_die
    with store_module.MonitorStore(sys.argv[1], create=False) as store:
        store.add_labels([{"case": c, "dice": None, "failure": 1, "loss": 1.0} for c in ("a", "b")], source="killed")
""")


def test_a_labeller_killed_mid_batch_leaves_no_label_and_no_entry(store_url, tmp_path):
    _store(store_url, tmp_path)
    with MonitorStore(store_url, create=False) as store:
        entries = store.verify().n_entries
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", _KILLED_LABELLER, store_url], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    with MonitorStore(store_url, create=False) as store:
        assert all(c["loss"] is None and c["n_labels"] == 0 for c in store.cases())  # nothing of the killed batch
        res = store.verify()
        assert res.ok and res.n_entries == entries
        assert store.add_labels([{"case": "a", "dice": None, "failure": 1, "loss": 1.0}], source="again") == 1
        assert store.verify().ok and store.verify().n_entries == entries + 1


NFD = unicodedata.normalize("NFD", "Müller_01")  # a macOS file name: "u" and a combining diaeresis
NFC = unicodedata.normalize("NFC", "Müller_01")  # typed in a spreadsheet


def test_a_label_matches_its_case_up_to_unicode_normalization_and_spaces(store_url, tmp_path):
    """Before the fix the label was refused as "not in the monitoring store ('Müller_01')", an id that reads like the
    recorded one; the sites table already matched its rows so."""
    assert NFD != NFC
    rule = make_rule([0.1, 0.2, 0.3])
    record_triage(store_url, write_triage(tmp_path / "t", rule, [{"case": NFD, "score": 0.1},
                                                                 {"case": "b", "score": 0.2}]), site="X",
                  command=["test"])
    table = tmp_path / "audit.csv"
    table.write_text(f"case,failure\n{NFC} ,1\n", encoding="utf-8")
    assert record_labels(store_url, table, command=["test"]).value == 1
    assert _labels(store_url)[0] == {NFD: 1.0, "b": None}
    table.write_text(f"case,failure\n{NFC},0\n{NFD},1\n", encoding="utf-8")  # one case, named in both forms
    with pytest.raises(ValueError, match="labelled twice in one batch"):
        record_labels(store_url, table, command=["test"])
    with MonitorStore(store_url, create=False) as store:
        assert store.verify().ok


def test_two_recorded_ids_of_one_key_need_the_exact_id(tmp_path):
    url = str(tmp_path / "m.db")
    rule = make_rule([0.1, 0.2, 0.3])
    record_triage(url, write_triage(tmp_path / "t", rule, [{"case": NFD, "score": 0.1}, {"case": NFC, "score": 0.2}]),
                  site="X", command=["test"])
    table = tmp_path / "audit.csv"
    table.write_text(f"case,failure\n{NFC},1\n", encoding="utf-8")  # exact: that case, not the other
    assert record_labels(url, table, command=["test"]).value == 1
    assert _labels(url)[0] == {NFD: None, NFC: 1.0}
    table.write_text(f"case,failure\n{NFC} ,1\n", encoding="utf-8")  # which of the two cannot be told: refused
    with pytest.raises(ValueError, match="not in the monitoring store"):
        record_labels(url, table, command=["test"])
