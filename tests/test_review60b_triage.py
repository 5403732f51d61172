"""Hostile review 60 (triage): defects found in the certified referral rule, its wording and its application."""

from __future__ import annotations

import math

from monai_unc.evaluation.triage import ReferralRule
from monai_unc.evaluation.triage.runner import TriageResult
from monai_unc.workflows.triage import format_triage


def test_calibration_coverage_never_reads_full_while_a_calibration_case_is_referred():
    # found by hostile review 60: 1999 of 2000 calibration cases accepted (coverage 0.9995) read "coverage 1.000" in
    # the guarantee (triage.json, the command's line, the page) and "calibration coverage 1.00" in triage's head line,
    # as if the threshold accepted every calibration case; risk_control_line already kept it below 1
    rule = ReferralRule("predictive_entropy_fg_mean", 0.5, True, 0.1, 0.1, "sgr", "failure", 0.8,
                        (0.1, 0.2, 0.3), ("a", "b", "c"), bound=0.09, coverage=1999 / 2000, observed_risk=0.01)
    text = rule.guarantee()
    assert "coverage 1.000" not in text and "coverage 0.9995" in text
    result = TriageResult({"cases": [], "order": [], "n_cases": 0, "n_accepted": 0, "n_review": 0,
                           "image_check": "skipped", "fingerprint": {"status": "match"}}, {})
    head = format_triage(rule, result)[0]
    assert "calibration coverage 1.00," not in head and "calibration coverage 0.9995" in head, head
    # a full coverage still reads 1.000 / 1.00
    full = ReferralRule("predictive_entropy_fg_mean", math.inf, True, 0.1, 0.1, "sgr", "failure", 0.8,
                        (0.1, 0.2, 0.3), ("a", "b", "c"), bound=0.09, coverage=1.0, observed_risk=0.01)
    assert "coverage 1.000" in full.guarantee() and "calibration coverage 1.00" in format_triage(full, result)[0]
