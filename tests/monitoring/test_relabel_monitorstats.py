"""A case labelled again changes the risk test's past losses: ``monitor status`` says so (monitorstats review).

The risk alarm takes the audited losses in the order their labels arrived, so that every check continues one
e-process and an alarm once raised stays raised; a case labelled again keeps its place and takes its latest label.
Before the fix one failure of eight corrected to a success silenced a raised alarm, and neither ``status``, its
``--json`` nor the dashboard said anything: the all-clear read as the e-process's.
"""

from __future__ import annotations

import json

from monai_unc.metrics.monitoring import risk_test
from monai_unc.monitoring import MonitorStore
from monai_unc.workflows.monitor import record_labels, record_triage, store_status, write_dashboard

from ._stream import make_rule, write_triage


def _label(url, tmp_path, name, rows):
    table = tmp_path / f"{name}.csv"
    table.write_text("case,failure\n" + "".join(f"{c},{f}\n" for c, f in rows))
    record_labels(url, table, command=["test"])


def test_a_corrected_label_that_silences_an_alarm_is_warned_about(store_url, tmp_path):
    rule = make_rule([0.1, 0.2, 0.3], target=0.1)
    ids = [f"c{i:02d}" for i in range(33)]
    record_triage(store_url, write_triage(tmp_path / "t", rule, [{"case": c, "score": 0.2} for c in ids]), site="A",
                  command=["test"])
    # the labels arrive in three batches: 20 successes, 8 failures, 5 successes
    _label(store_url, tmp_path, "b1", [(c, 0) for c in ids[:20]])
    _label(store_url, tmp_path, "b2", [(c, 1) for c in ids[20:28]])
    _label(store_url, tmp_path, "b3", [(c, 0) for c in ids[28:]])
    losses = [0.0] * 20 + [1.0] * 8 + [0.0] * 5
    assert risk_test(losses, 0.1).alarm == 27  # the reference: the e-process of the losses in arrival order
    res = store_status(store_url)
    assert res.exit_status == 1 and any("harmful shift" in line for line in res.lines)
    assert not any("labelled again with another loss" in line for line in res.lines)

    _label(store_url, tmp_path, "correction", [(ids[22], 0)])  # one failure corrected to a success
    corrected = losses[:22] + [0.0] + losses[23:]
    assert risk_test(corrected, 0.1).alarm is None  # the alarm is gone ...
    out = tmp_path / "status.json"
    res = store_status(store_url, output=out)
    assert res.exit_status == 0 and not any("harmful shift" in line for line in res.lines)
    warned = [line for line in res.lines if "labelled again with another loss" in line]  # ... and status says why
    assert len(warned) == 1 and warned[0].startswith("warning: ")
    assert "1 of the 33 audited accepted case(s)" in warned[0]
    (stream,) = json.loads(out.read_text())["streams"]
    assert stream["n_relabelled"] == 1 and stream["risk_alarm"] is None
    page = write_dashboard(store_url, tmp_path / "monitor.html").value
    assert "labelled again with another loss" in page.read_text()
    with MonitorStore(store_url, read_only=True) as store:
        counts = {c["case_id"]: (c["n_labels"], c["loss_changed"]) for c in store.cases()}
    assert counts[ids[22]] == (2, True) and all(counts[c] == (1, False) for c in ids if c != ids[22])


def test_unlabelled_and_referred_cases_count_no_relabel(tmp_path):
    url = str(tmp_path / "m.db")
    rule = make_rule([0.1, 0.2, 0.3], target=0.1)
    record_triage(url, write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.2},
                                                           {"case": "r", "score": 0.9, "decision": "review"},
                                                           {"case": "u", "score": 0.2}]), site="A", command=["test"])
    for name in ("b1", "b2"):  # the referred case labelled twice: not in the risk test; "a" confirmed: no change
        _label(url, tmp_path, name, [("r", 1), ("a", 0)] if name == "b1" else [("r", 0), ("a", 0)])
    with MonitorStore(url, read_only=True) as store:
        assert {c["case_id"]: (c["n_labels"], c["loss_changed"]) for c in store.cases()} == {
            "a": (2, False), "r": (2, True), "u": (0, False)}
    assert not any("labelled again" in line for line in store_status(url).lines)
