"""Descriptive texts of rule files are untrusted input (found by review).

An unsigned rule (``--allow-unsigned``) with a ``created`` of 100 000 characters holding an escape sequence, a
``monai_unc_version`` that is an object, or class names with newlines and ANSI escapes was read as written and
copied into ``triage.json`` and the page.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from monai_unc.evaluation.triage import ReferralRule
from monai_unc.evaluation.triage.rule import CalibrationRecord
from monai_unc.io.provenance import rule_digest
from monai_unc.metrics.risk_control import risk_controlled_threshold

DICE = (0.9, 0.7, 0.85, 0.95, 0.6, 0.88, 0.92, 0.8, 0.75, 0.93)


def _doc() -> dict:
    scores = tuple(0.1 * (i + 1) for i in range(len(DICE)))
    risks = tuple(float(d < 0.8) for d in DICE)
    rec = CalibrationRecord(scores, DICE, risks)
    rule = ReferralRule("predictive_entropy_fg_mean", math.inf, True, 0.9, 0.5, "sgr", "failure", 0.8, scores,
                        tuple(f"c{i}" for i in range(len(DICE))), record=rec, num_classes=2,
                        class_names=("background", "liver"))
    res = risk_controlled_threshold(np.array(scores), np.array(risks), rule.target_risk, rule.delta,
                                    method=rule.method, n_candidates=rec.n_candidates, sequence=rec.sequence)
    rule = dataclasses.replace(rule, threshold=res.threshold, feasible=res.feasible, bound=res.bound,
                               coverage=res.coverage, observed_risk=res.risk, n_candidates=res.n_candidates)
    return json.loads(json.dumps(rule.to_json()))


def _reread(doc: dict) -> ReferralRule:
    doc["digest"] = rule_digest(doc)  # the editor recomputes the unkeyed digest
    return ReferralRule.from_json(doc, "rule", check_digest=True)


def test_the_written_rule_reads_back():
    rule = _reread(_doc())
    assert rule.class_names == ("background", "liver") and rule.version


@pytest.mark.parametrize("field, value, msg", [
    ("created", "2026\x1b[31m" + "A" * 10, "field 'created'"),
    ("created", "2" * 100_000, "field 'created'"),
    ("created", {"a": 1}, "field 'created'"),
    ("monai_unc_version", {"evil": [1, 2]}, "field 'monai_unc_version'"),
    ("monai_unc_version", "0.2\n0", "field 'monai_unc_version'"),
    ("class_names", ["background", "liver\x1b[2J\n<b>x</b>"], r"class_names\[1\]"),
    ("class_names", ["background", {"name": "liver"}], r"class_names\[1\]"),
    ("class_names", ["background", "x" * 1000], r"class_names\[1\]"),
])
def test_descriptive_texts_are_checked(field, value, msg):
    doc = _doc()
    doc[field] = value
    with pytest.raises(ValueError, match=msg):
        _reread(doc)
