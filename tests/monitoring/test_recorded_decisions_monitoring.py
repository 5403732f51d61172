"""``monitor record`` / ``read_triage_run`` derive each recorded decision again from a full referral rule.

Found by hostile review: a decision edited in ``triage.json`` (a ``review`` made ``accept``, with the code
``accepted``) was recorded as the rule's decision, and the stream's accepted risk counted the case as accepted. A rule
with a ``format_version`` (every rule ``triage`` writes) is now read in full (its certificate recomputed) and each
decision checked against its score, as the triage page and ``dicom-export --triage`` check them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.evaluation.triage.rule import ReferralRule
from monai_unc.io import json_safe
from monai_unc.monitoring import MonitorStore, read_triage_run
from monai_unc.monitoring.store import rule_body_digest

#: a certified rule (threshold 0.3, calibration scores 0.05 .. 0.6) as triage records it, with its content digest
RULE = json_safe(ReferralRule("predictive_entropy_fg_mean", 0.3, True, 0.1, 0.1, "sgr", "failure", 0.8,
                              (0.05, 0.1, 0.2, 0.3, 0.45, 0.6), tuple(f"k{i}" for i in range(6))).to_json())


def _triage(folder: Path, cases: list[dict], rule: dict = RULE) -> Path:
    folder.mkdir(parents=True)
    (folder / "triage.json").write_text(json.dumps({"rule": rule, "cases": cases}))
    return folder


GENUINE = [{"case": "a", "score": 0.2, "decision": "accept", "code": "accepted", "reason": "accepted"},
           {"case": "b", "score": 0.45, "decision": "review", "code": "above_threshold", "reason": "above"},
           {"case": "c", "score": 0.9, "decision": "review", "code": "outside_range", "reason": "out of range"}]


def test_the_rule_is_a_full_one_with_its_digest():
    assert "format_version" in RULE and RULE["digest"] == rule_body_digest(RULE)


def test_genuine_decisions_are_recorded(tmp_path):
    run = read_triage_run(_triage(tmp_path / "t", GENUINE), site="A", triaged_at="2026-01-31T12:00:00")
    assert [(c.case_id, c.decision, c.code) for c in run.cases] == [
        ("a", "accept", "accepted"), ("b", "review", "above_threshold"), ("c", "review", "outside_range")]


EDITS = [
    ("review made accept", 1, {"decision": "accept", "code": "accepted"},
     "field 'cases[1].decision' of case 'b' must be the rule's decision for its score 0.45 (review: above_threshold)"),
    ("accept made review", 0, {"decision": "review", "code": "above_threshold"},
     "field 'cases[0].decision' of case 'a' must be the rule's decision for its score 0.2 (accept: accepted)"),
    ("score lowered under the threshold", 1, {"score": 0.1},
     "field 'cases[1].decision' of case 'b' must be the rule's decision for its score 0.1 (accept: accepted)"),
    ("code changed", 2, {"code": "above_threshold"},
     "field 'cases[2].decision' of case 'c' must be the rule's decision for its score 0.9 (review: outside_range)"),
]


@pytest.mark.parametrize("name, i, edit, message", EDITS, ids=[e[0] for e in EDITS])
def test_an_edited_decision_is_refused_and_nothing_is_recorded(tmp_path, capsys, name, i, edit, message):
    cases = [dict(c) for c in GENUINE]
    cases[i].update(edit)
    folder = _triage(tmp_path / "t", cases)
    with pytest.raises(ValueError, match="must be the rule's decision") as e:
        read_triage_run(folder, site="A")
    assert message in str(e.value), str(e.value)
    db = tmp_path / "m.db"
    assert cli.main(["monitor", "record", str(folder), "--db", str(db), "--site", "A"]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], lines
    if db.exists():  # the store may have been created; it holds no case
        with MonitorStore(str(db)) as store:
            assert store.cases() == []


def test_a_rule_edited_with_its_digest_recomputed_is_another_rule(tmp_path):
    """A digest is no signature: decisions that agree with an edited rule are that rule's, under its own digest."""
    rule = {**RULE, "threshold": 0.5}
    rule["digest"] = rule_body_digest(rule)
    cases = [dict(c) for c in GENUINE]
    cases[1].update(decision="accept", code="accepted")
    run = read_triage_run(_triage(tmp_path / "t", cases, rule), site="A")
    assert {c.rule_digest for c in run.cases} == {rule["digest"]} != {RULE["digest"]}
    with pytest.raises(ValueError, match="must be the rule's decision"):  # the same decisions under the genuine rule
        read_triage_run(_triage(tmp_path / "u", cases), site="A")
