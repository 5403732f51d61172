"""The referral rule's conformal interval of the expected Dice: recorded, verified, shown (issue #40 item 6)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from monai_unc.evaluation.triage import ReferralRule
from monai_unc.evaluation.triage.rule import CalibrationRecord
from monai_unc.io import json_safe
from monai_unc.metrics.risk_control import risk_controlled_threshold
from monai_unc.report.triage import _expected_dice_head, _expected_dice_text, _interval_note

DICE = (0.9, 0.7, 0.85, 0.95, 0.6, 0.88, 0.92, 0.8, 0.75, 0.93)
EST = (0.92, 0.9, 0.86, 0.97, 0.9, 0.9, 0.93, 0.85, 0.8, 0.95)


def _rule(estimates=EST, alpha=0.1):  # target risk 0.9: certified
    scores = tuple(0.1 * (i + 1) for i in range(len(DICE)))
    risks = tuple(float(d < 0.8) for d in DICE)
    rec = CalibrationRecord(scores, DICE, risks, expected_dice=estimates, interval_alpha=alpha)
    return ReferralRule("predictive_entropy_fg_mean", math.inf, True, 0.9, 0.5, "sgr", "failure", 0.8, scores,
                        tuple(f"c{i}" for i in range(len(DICE))), record=rec)


def _certified(rule):
    """The rule with its certificate filled in from its record (as certify does)."""
    rec = rule.record
    res = risk_controlled_threshold(np.array(rec.scores), np.array(rec.risks), rule.target_risk, rule.delta,
                                    method=rule.method, n_candidates=rec.n_candidates, sequence=rec.sequence)
    return dataclasses.replace(rule, threshold=res.threshold, feasible=res.feasible, bound=res.bound,
                               coverage=res.coverage, observed_risk=res.risk, n_candidates=res.n_candidates)


def test_the_interval_is_recorded_read_back_and_verified():
    rule = _certified(_rule())
    d = json_safe(rule.to_json())
    cal = d["calibration"]
    q = sorted(abs(a - b) for a, b in zip(DICE, EST))[9]  # ceil(11 * 0.9) = 10th of 10
    assert cal["expected_dice"] == list(EST) and cal["expected_dice_alpha"] == 0.1
    assert cal["expected_dice_quantile"] == q
    back = ReferralRule.from_json(d)
    assert back == rule and back.record.interval_quantile() == (q, 10)
    iv = back.expected_dice_interval([0.9, float("nan")])
    assert iv.low[0] == pytest.approx(0.9 - q) and iv.high[0] == pytest.approx(min(0.9 + q, 1))
    assert math.isnan(iv.low[1])
    # an edited quantile (or estimate) is refused
    d["calibration"]["expected_dice_quantile"] = 0.01
    with pytest.raises(ValueError, match="expected_dice_quantile.*edited or corrupted"):
        ReferralRule.from_json(d)


def test_a_rule_without_the_estimates_reads_and_says_uncalibrated():
    rule = _certified(_rule(estimates=None))
    d = json_safe(rule.to_json())
    assert "expected_dice" not in d["calibration"] and d["format_version"] == 3
    back = ReferralRule.from_json(d)
    assert back.expected_dice_interval([0.9]) is None
    assert "model's own estimate, uncalibrated" in back.interval_statement()
    assert _expected_dice_head(back) == "expected Dice (model's own estimate, uncalibrated)"
    assert _expected_dice_text({"expected_dice": 0.93}) == "0.93"  # the interval's decimals


def test_too_few_cases_and_the_page_text():
    few = _certified(_rule(alpha=0.05))  # ceil(11 * 0.95) = 11 > 10
    assert few.record.interval_quantile()[0] == math.inf
    assert json_safe(few.to_json())["calibration"]["expected_dice_quantile"] is None
    assert ReferralRule.from_json(json_safe(few.to_json())) == few
    assert "too few for a 95% interval" in few.interval_statement()
    assert few.expected_dice_interval([0.5]).high.tolist() == [1.0]
    rule = _certified(_rule())
    assert _expected_dice_head(rule) == "expected Dice [90% conformal interval]"
    assert _expected_dice_text({"expected_dice": 0.93, "expected_dice_low": 0.78, "expected_dice_high": 1.0}) == \
        "0.93 [0.78, 1.00]"
    note = _interval_note(rule)
    assert note.startswith("Expected Dice interval (90%, conformal)") and "exchangeable" in note
    assert "shifted case" in note and "not for each one" in note


def test_a_record_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="expected_dice must have one entry per calibration case"):
        _rule(estimates=EST[:3])
