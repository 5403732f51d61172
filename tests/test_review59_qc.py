"""Hostile review 59 of QC with guarantees: certified referral rules, their wording, conformal and monitoring inputs."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from monai_unc.evaluation.triage import ReferralRule
from monai_unc.metrics.risk_control import risk_controlled_threshold
from monai_unc.workflows.triage import format_outcome


@pytest.mark.parametrize("method", ["sgr", "ltt"])
@pytest.mark.parametrize("target", [1e-320, 5e-324])
def test_a_target_no_calibration_set_can_certify_is_the_trivial_rule_with_a_warning(method, target):
    # a subnormal target risk (in (0, 1), so accepted by EvaluationConfig) made the fewest certifiable cases
    # log(delta) / log1p(-alpha) overflow to inf, and risk_controlled_threshold (so evaluate --target-risk, after every
    # case was evaluated) failed with "OverflowError: cannot convert float infinity to integer"; no calibration set
    # can certify it: refer every case, with the warning, as for any target too small for the cases
    rng = np.random.default_rng(0)
    u, risk = rng.random(50), np.zeros(50)
    with pytest.warns(UserWarning, match="no threshold certifies"):
        res = risk_controlled_threshold(u, risk, target, 0.1, method=method)
    assert not res.feasible and res.threshold == -math.inf and res.coverage == 0.0 and res.n_candidates == 0
    assert 0.0 < res.bound <= 1.0


def _rule(risk: str) -> ReferralRule:
    method = "sgr" if risk == "failure" else "ltt"
    return ReferralRule("predictive_entropy_fg_mean", 0.3, True, 0.2, 0.1, method, risk, 0.8, (0.1, 0.2, 0.3, 0.4),
                        ("a", "b", "c", "d"), bound=0.15, coverage=0.75, observed_risk=0.1)


_OUTCOME = {"n_cases": 4, "n_accepted": 2, "n_referred": 2, "reasons": {"above_threshold": 2}, "accepted": ["x", "y"],
            "referred": ["z", "w"], "n_failed_accepted": 1, "risk_accepted": 0.15, "n_failed_referred": 2}


def test_format_outcome_states_a_mean_one_minus_dice_guarantee_as_a_mean_not_as_a_share_of_failures():
    # a "1-dice" rule guarantees the mean 1 - Dice of the accepted cases; the line said "at most 0.2 of the new
    # cases the threshold accepts fail (1 - dice)", a share of failures it does not bound (accepted cases all at
    # Dice 0.79 meet a target of 0.25 on 1 - Dice while every one fails at failure Dice 0.8), and "1 of 2 accepted
    # new case(s) failed (1 - dice)" for a failure counted as Dice < 0.8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        lines = format_outcome(_rule("1-dice"), _OUTCOME)
    assert "of the new cases the threshold accepts fail" not in lines[0]
    assert "mean risk (1 - dice) of the new cases the threshold accepts is at most 0.2" in lines[0]
    assert "failed (1 - dice)" not in lines[2]
    assert "1 of 2 accepted new case(s) failed (dice < 0.8)" in lines[2]
    assert "mean risk (1 - dice) 0.150 vs the target 0.2" in lines[2]


def test_format_outcome_of_a_failure_rule_is_unchanged():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        lines = format_outcome(_rule("failure"), _OUTCOME)
    assert lines[0].startswith("guaranteed: at most 0.2 of the new cases the threshold accepts fail (dice < 0.8) on "
                               "average, with probability >= 0.9")
    assert "1 of 2 accepted new case(s) failed (dice < 0.8): risk 0.150 vs the target 0.2" in lines[2]


@pytest.mark.parametrize("risk, said", [("1-dice", "mean risk (1 - dice) <= 0.2"),
                                        ("failure", "mean risk (dice < 0.8) <= 0.2")])
def test_format_outcome_of_a_rule_that_certifies_nothing_names_the_mean_risk(risk, said):
    # "no threshold certifies 1 - dice <= 0.2" read as a bound on each case's 1 - Dice; the rule's own guarantee
    # sentence (ReferralRule.guarantee) says "mean risk (1 - dice)"
    rule = _rule(risk)
    rule.feasible, rule.threshold, rule.bound = False, -math.inf, 0.35
    lines = format_outcome(rule, {**_OUTCOME, "n_accepted": 0, "n_referred": 4})
    assert lines[0].startswith(f"guaranteed: nothing; no threshold certifies {said} with probability 0.9")


@pytest.mark.parametrize("args", [
    (math.nan, None, "failure", 0.8),  # an audit of unknown outcome: was the loss 0, a certified success
    (-0.5, None, "failure", 0.8),  # was the loss 1
    (1.5, None, "1-dice", None),  # was the loss 0
    (-0.5, None, "1-dice", None),  # was the loss 1
    (None, 2, "failure", 0.8),  # was the loss 2.0, outside [0, 1]
    (None, 0.5, "failure", 0.8),  # was the loss 0.5 of a 0/1 risk
    (None, True, "failure", 0.8),  # a flag read as a failure
    (0.1, None, "failure", math.nan),  # a NaN failure Dice: Dice 0.1 was no failure (loss 0)
])
def test_loss_of_refuses_a_label_that_is_no_dice_or_failure(args):
    from monai_unc.monitoring import loss_of

    with pytest.raises(ValueError, match="must be"):
        loss_of(*args)


def test_loss_of_keeps_the_losses_of_valid_labels():
    from monai_unc.monitoring import loss_of

    assert loss_of(0.7, None, "failure", 0.8) == 1.0 and loss_of(0.9, None, "failure", 0.8) == 0.0
    assert loss_of(None, 1, "failure", 0.8) == 1.0 and loss_of(np.float32(0.75), np.int64(1), "failure", 0.8) == 1.0
    assert loss_of(0.75, None, "1-dice", None) == pytest.approx(0.25) and loss_of(1, None, "1-dice", None) == 0.0


@pytest.mark.parametrize("bad", [1.5, -0.25, 1e300])
def test_a_rule_whose_recorded_expected_dice_is_no_dice_is_refused(bad):
    # the calibration cases' expected Dice calibrate the interval of a new case's Dice; a recorded estimate of 1.5,
    # -0.25 or 1e300 (no Dice) was read as one, with the quantile it gives, as long as the file agreed with itself
    import json

    from monai_unc.evaluation.triage.rule import CalibrationRecord
    from monai_unc.io import json_safe
    from monai_unc.io.provenance import rule_digest

    rec = CalibrationRecord((0.1, 0.2, 0.3), (0.9, 0.7, 0.8), (0.0, 1.0, 0.0), expected_dice=(0.95, 0.9, 0.85),
                            interval_alpha=0.5, expected_dice_estimate="class_mean")
    rule = ReferralRule("predictive_entropy_fg_mean", 0.25, True, 0.5, 0.5, "sgr", "failure", 0.8, (0.1, 0.2, 0.3),
                        ("a", "b", "c"), num_classes=2, record=rec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = risk_controlled_threshold([0.1, 0.2, 0.3], [0.0, 1.0, 0.0], 0.5, 0.5, undefined="refer")
    rule.threshold, rule.feasible, rule.bound = res.threshold, res.feasible, res.bound
    rule.coverage, rule.observed_risk, rule.n_candidates = res.coverage, res.risk, res.n_candidates
    d = json.loads(json.dumps(json_safe(rule.to_json())))
    assert ReferralRule.from_json(d, check_digest=True) == rule  # the rule as written reads back
    edited = CalibrationRecord(rec.scores, rec.dice, rec.risks, expected_dice=(bad, 0.9, 0.85), interval_alpha=0.5,
                               expected_dice_estimate="class_mean")
    d["calibration"].update(expected_dice=[bad, 0.9, 0.85],
                            expected_dice_quantile=edited.to_json().get("expected_dice_quantile"))
    d["digest"] = rule_digest(d)
    with pytest.raises(ValueError, match="expected_dice"):
        ReferralRule.from_json(d, check_digest=True)


@pytest.mark.parametrize("flag", [np.True_, np.bool_(True)])
def test_conformal_risk_control_refuses_a_numpy_bool_loss_bound_as_it_refuses_true(flag):
    # B=True was refused, np.True_ (numpy's bool, no subclass of bool) read as the loss bound 1
    from monai_unc.metrics.conformal import crc_lambda, min_calibration_cases

    losses = np.tile(np.linspace(1.0, 0.0, 5), (20, 1))
    assert crc_lambda(losses, 0.1, B=1.0) == crc_lambda(losses, 0.1)
    with pytest.raises(ValueError, match="B must be a positive finite loss bound"):
        crc_lambda(losses, 0.1, B=flag)
    with pytest.raises(ValueError, match="B must be a positive finite loss bound"):
        min_calibration_cases(0.1, B=flag)


def test_a_rule_decides_on_a_bfloat16_score_tensor_as_on_its_values():
    # accepted_by_threshold took a bfloat16 tensor (autocast scores), ReferralRule.apply failed on it with "Got
    # unsupported ScalarType BFloat16", naming nothing
    import torch

    rule = _rule("failure")
    scores = torch.tensor([0.2, 0.35, float("nan")], dtype=torch.bfloat16)
    want = [d.code for d in rule.apply(scores.float().numpy())]
    assert want == ["accepted", "above_threshold", "undefined_score"]
    assert [d.code for d in rule.apply(scores)] == want


@pytest.mark.parametrize(("sql", "column"), [
    ("UPDATE cases SET decision = 'Accept' WHERE case_id = 'b'", "decision"),  # was counted as referred
    ("UPDATE cases SET decision = 'maybe' WHERE case_id = 'a'", "decision"),  # was left out of the risk test
    ("UPDATE cases SET code = 'above_threshold' WHERE case_id = 'a'", "code"),  # an accept with a reason for review
    ("UPDATE cases SET decision = 'accept' WHERE case_id = 'b'", "code"),  # a review made accept, its code kept
    ("UPDATE cases SET site = '(all sites)' WHERE case_id = 'b'", "site"),  # a second stream named as the pooled one
])
def test_the_store_refuses_to_read_a_decision_it_never_writes(tmp_path, sql, column):
    # record_run refuses such decisions; cases() read them back after an edit outside the store and status counted
    # them, where a loss of 7 in the same row is one line naming the store and the column
    import sqlite3

    from monai_unc.monitoring.store import CaseRecord, MonitorStore, rule_body_digest

    rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
    rule["digest"] = rule_body_digest(rule)
    cases = [CaseRecord(c, "A", None, "2026-01-31T00:00:00+00:00", s, math.nan, math.nan, d,
                        "accepted" if d == "accept" else "above_threshold", "r", rule["digest"], None)
             for c, s, d in (("a", 0.2, "accept"), ("b", 0.7, "review"))]
    db = tmp_path / "monitor.db"
    with MonitorStore(db) as store:
        store.record_run(rule, cases, source_digest="jan", folder="t", triaged_at="2026-01-31T00:00:00+00:00",
                         model_digest=None, command=["x"])
        assert [c["decision"] for c in sorted(store.cases(), key=lambda c: c["case_id"])] == ["accept", "review"]
    con = sqlite3.connect(db)
    con.execute(sql)
    con.commit()
    con.close()
    with MonitorStore(db, create=False) as store, pytest.raises(ValueError, match=f"column {column} must be"):
        store.cases()


@pytest.mark.parametrize("bounds", [(False, True), (np.False_, 1.0), (0.0, np.True_)])
def test_conformal_interval_refuses_flags_as_bounds(bounds):
    from monai_unc.metrics import conformal_interval

    with pytest.raises(ValueError, match="bounds must be two numbers"):
        conformal_interval([0.7], [0.5, 0.6], [0.55, 0.62], 0.1, bounds=bounds)
