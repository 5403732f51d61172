"""Hostile tests of the monitoring status against the raw records (martingale side)."""

from __future__ import annotations

import json

import numpy as np

from monai_unc.workflows.monitor import record_triage, store_status

from ._stream import make_rule, write_triage


def test_status_json_alarm_is_the_position_of_the_case_in_the_stream(tmp_path):
    # 40 cases without a defined score, then a stream whose scores move up from case 90: the martingale's alarm index
    # counts the defined scores only, the JSON must name the stream's case (as the alarm line does)
    rng = np.random.default_rng(0)
    rule = make_rule(list(rng.normal(size=200)))
    cases = [{"case": f"c{i:03d}", "score": None if i < 40 else float(rng.normal() + (3 if i >= 90 else 0))}
             for i in range(120)]
    write_triage(tmp_path / "run", rule, cases)
    db = str(tmp_path / "m.db")
    record_triage(db, tmp_path / "run", site="A", time="2026-01-01T00:00:00")
    res = store_status(db, output=tmp_path / "s.json")
    g = res.value[0]
    s = json.loads((tmp_path / "s.json").read_text())["streams"][0]
    positions = [i for i, c in enumerate(g.cases) if not np.isnan(c["score"])]
    assert g.score.alarm is not None and s["score_alarm"] == positions[g.score.alarm] != g.score.alarm
    assert s["score_change"] == positions[g.score.change_point]
    assert s["score_alarm_case"] == g.cases[s["score_alarm"]]["case_id"] == f"c{s['score_alarm']:03d}"
    assert f"at case {s['score_alarm_case']!r}" in s["alarms"][0]
    assert f"from case {s['score_change_case']!r}" in s["alarms"][0]
    assert s["score_change"] >= 90 and s["score_alarm"] > s["score_change"]
    assert (s["image_alarm"], s["image_alarm_case"], s["risk_alarm"], s["risk_alarm_case"]) == (None,) * 4
