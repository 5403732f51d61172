"""Hostile tests of the monitoring status against the raw records (martingale side)."""

from __future__ import annotations

import html
import json

import numpy as np
import pytest

from monai_unc.io.provenance import rule_digest
from monai_unc.metrics.monitoring import score_martingale
from monai_unc.monitoring import monitor_status
from monai_unc.workflows.monitor import record_triage, store_status, write_dashboard

from ._stream import make_rule, write_triage


def test_status_json_alarm_is_the_position_of_the_case_in_the_stream(tmp_path):
    # a run of 40 cases without a defined score, one of 50 like the calibration cases, one of 30 whose scores moved
    # up: the martingale's alarm index counts the defined scores only, the JSON must name the stream's case (as the
    # alarm line does)
    rng = np.random.default_rng(0)
    rule = make_rule(list(rng.normal(size=200)))
    db = str(tmp_path / "m.db")
    for k, (n, shift) in enumerate([(40, None), (50, 0.0), (30, 3.0)]):
        cases = [{"case": f"r{k}c{i:02d}", "score": None if shift is None else float(rng.normal() + shift)}
                 for i in range(n)]
        write_triage(tmp_path / f"run{k}", rule, cases)
        record_triage(db, tmp_path / f"run{k}", site="A", time=f"2026-01-0{k + 1}T00:00:00")
    res = store_status(db, output=tmp_path / "s.json")
    g = res.value[0]
    s = json.loads((tmp_path / "s.json").read_text())["streams"][0]
    positions = [i for i, c in enumerate(g.cases) if not np.isnan(c["score"])]
    assert positions == list(range(40, 120))
    assert g.score.alarm is not None and s["score_alarm"] == g.score.alarm + 40
    assert s["score_change"] == g.score.change_point + 40
    assert s["score_alarm_case"] == g.cases[s["score_alarm"]]["case_id"]
    assert s["score_alarm_case"].startswith("r2c") and s["score_alarm"] >= 90  # a case of the shifted run
    assert f"at case {s['score_alarm_case']!r}" in s["alarms"][0]
    assert f"from case {s['score_change_case']!r}" in s["alarms"][0]
    assert (s["image_alarm"], s["image_alarm_case"], s["risk_alarm"], s["risk_alarm_case"]) == (None,) * 4


def _two_scanner_runs(rng, runs=10, per=100, gap=1.0):
    """Runs whose case ids name the scanner (GE_... sort before SIEMENS_...), GE's scores ``gap`` higher; the same
    mixture in every run and in the calibration cohort: no change."""
    out = []
    for k in range(runs):
        ge = rng.uniform(size=per) < 0.5
        scores = rng.normal(size=per) + np.where(ge, gap / 2, -gap / 2)
        out.append([{"case": f"{'GE' if g else 'SIEMENS'}_{k:02d}_{i:03d}", "score": float(s)}
                    for i, (g, s) in enumerate(zip(ge, scores))])
    return out


def test_case_ids_that_name_a_subgroup_raise_no_false_score_alarm(tmp_path):
    # in case-id order each run's GE cases came before its SIEMENS cases: blocks of high and low scores that the
    # martingale bet on (without any change it alarmed in 52 % of simulated streams at half a standard deviation
    # between the scanners, in 100 % at one)
    rng = np.random.default_rng(3)
    mix = rng.uniform(size=300) < 0.5
    rule = make_rule(list(rng.normal(size=300) + np.where(mix, 0.5, -0.5)))
    db = str(tmp_path / "m.db")
    runs = _two_scanner_runs(rng)
    for k, cases in enumerate(runs):
        write_triage(tmp_path / f"run{k}", rule, cases)
        record_triage(db, tmp_path / f"run{k}", site="A", time=f"2026-01-{k + 1:02d}T00:00:00")
    (g,) = store_status(db).value
    assert g.score.alarm is None, g.alarms()
    ids = [c["case_id"] for c in g.cases]
    assert sorted(ids) == sorted(c["case"] for r in runs for c in r) and ids[:100] != sorted(ids[:100])
    # the guarantee, by simulation: the store's order within a run (read back from it) on 400 streams
    order = [[int(c["case_id"].rsplit("_", 1)[1]) for c in g.cases[k * 100:(k + 1) * 100]] for k in range(10)]
    assert all(sorted(o) == list(range(100)) for o in order)
    alarms = 0
    for t in range(400):
        cal = rng.normal(size=300) + np.where(rng.uniform(size=300) < 0.5, 0.5, -0.5)
        stream = [np.array([c["score"] for c in r])[o] for r, o in zip(_two_scanner_runs(rng), order)]
        alarms += score_martingale(np.concatenate(stream), cal, seed=t).alarm is not None
    assert alarms / 400 <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 400)


def test_a_rule_without_calibration_scores_says_its_score_alarm_ranks_the_stream_alone(tmp_path):
    # a rule of an earlier monai-unc records no calibration record: the score martingale can only rank each case
    # against the stream's earlier cases, so a stream 5 standard deviations off from its first case was "no alarm"
    # without a word (the image alarm had a note for the same situation)
    rng = np.random.default_rng(0)
    rule = make_rule([])
    del rule["calibration"]
    rule["digest"] = rule_digest({k: v for k, v in rule.items() if k != "digest"})
    write_triage(tmp_path / "run", rule, [{"case": f"c{i:03d}", "score": float(rng.normal() + 5)} for i in range(300)])
    db = str(tmp_path / "m.db")
    record_triage(db, tmp_path / "run", site="A", time="2026-01-01T00:00:00")
    res = store_status(db, output=tmp_path / "s.json")
    (g,) = res.value
    assert g.score.alarm is None and g.score_reference_size == 0
    assert g.score_reference_note is not None and "earlier cases only" in g.score_reference_note
    assert any(line.startswith("note: rule") and "score martingale ranks each case" in line for line in res.lines)
    assert json.loads((tmp_path / "s.json").read_text())["streams"][0]["score_against_calibration"] is False
    page = html.unescape(write_dashboard(db, tmp_path / "d.html").value.read_text())
    assert "Note: the score martingale ranks each case against the stream's earlier cases only" in page
    # with calibration scores: no note
    rule2 = make_rule(list(rng.normal(size=50)), tag="calibrated")
    write_triage(tmp_path / "run2", rule2, [{"case": "x", "score": 0.1}])
    record_triage(db, tmp_path / "run2", site="A", time="2026-01-02T00:00:00")
    (g2,) = [g for g in store_status(db).value if g.rule_digest == rule2["digest"]]
    assert g2.score_reference_size == 50 and g2.score_reference_note is None


def test_monitor_status_takes_alpha_as_any_real_number():
    # a numpy float32 alpha (0.05 read from an array) was refused as "must be a number in (0, 1), got 0.05"
    assert monitor_status([], {}, np.float32(0.05)) == []
    for bad in (True, np.bool_(True), float("nan"), 0, 1.0, "0.05"):
        with pytest.raises(ValueError, match="alpha must be a number in"):
            monitor_status([], {}, bad)
