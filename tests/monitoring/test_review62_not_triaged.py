"""Review 62 (end-to-end run): ``monitor record`` says which cases the triage run could not triage.

A case ``infer`` failed on has no decision; ``triage.json`` lists it under ``not_triaged`` and the record of the run
warns, so that the store's stream is not read as the whole cohort."""

from __future__ import annotations

import json
import warnings

import pytest

from monai_unc.io.provenance import rule_digest
from monai_unc.monitoring.records import read_triage_run
from monai_unc.monitoring.store import rule_body_digest


def _folder(tmp_path, **extra):
    rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
    rule["digest"] = rule_body_digest(rule)
    case = {"case": "a", "score": 0.2, "decision": "accept", "code": "accepted", "reason": "accepted"}
    doc = {"rule": rule, "cases": [case], **extra}
    doc["digest"] = rule_digest(doc)
    (tmp_path / "triage.json").write_text(json.dumps(doc))
    return tmp_path


def test_record_warns_about_cases_not_triaged(tmp_path):
    folder = _folder(tmp_path, not_triaged=["n04 nan", "n07"])
    with pytest.warns(UserWarning, match=r"2 case\(s\) were NOT triaged \(no prediction\) and are not recorded: "
                                         r"'n04 nan', 'n07'"):
        run = read_triage_run(folder, site="A", triaged_at="2026-01-31T12:00:00")
    assert [c.case_id for c in run.cases] == ["a"]


@pytest.mark.parametrize("value", [[], None, "n04", [3, None]])
def test_no_warning_without_names(tmp_path, value):
    folder = _folder(tmp_path, **({} if value is None else {"not_triaged": value}))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        read_triage_run(folder, site="A", triaged_at="2026-01-31T12:00:00")
    assert not [w for w in got if "NOT triaged" in str(w.message)]
