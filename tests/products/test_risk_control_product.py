"""The risk-controlled referral rule as a cohort product (monai_unc.products.risk_control.RiskControl)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, resummarize, run_evaluate, run_triage
from monai_unc.evaluation.products import cohort_products
from monai_unc.evaluation.triage import RULE_FILE, ReferralRule, find_prediction_cases
from monai_unc.io import json_safe
from monai_unc.product import product_type
from monai_unc.products import ConformalMasks, RiskControl
from monai_unc.products.risk_control import RULE_FILE as PRODUCT_RULE_FILE


def _evaluate(data, out, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return run_evaluate(data["labels"], data["predictions"], out, EvaluationConfig(spatial=False, **kw))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("rc_product")
    data = write_toy_cohort(root / "data", n_cases=12, shape=(12, 12, 12))
    cal = [f"toy{i:03d}" for i in range(8)]
    state, summary, paths = _evaluate(data, root / "eval", target_risk=0.9, delta=0.5, calibration_cases=cal,
                                      products=[ConformalMasks({"outer": 0.3})])
    return {"root": root, "data": data, "state": state, "summary": summary, "paths": paths, "cal": cal}


def test_registered_under_its_summary_key_and_rule_file():
    assert product_type("risk_control") is RiskControl
    assert RiskControl.artifact_file == RULE_FILE == PRODUCT_RULE_FILE == "referral_rule.json"


def test_turned_on_by_the_target_risk_not_by_the_product_list():
    assert [p.name for p in cohort_products(EvaluationConfig())] == []
    got = cohort_products(EvaluationConfig(target_risk=0.2, products=[ConformalMasks({"outer": 0.1})]))
    assert [p.name for p in got] == ["risk_control", "conformal"]  # the summary order: the rule, then the masks
    with pytest.raises(ValueError, match="turned on by the evaluation options"):
        cohort_products(EvaluationConfig(target_risk=0.2, products=[RiskControl()]))


def test_the_block_is_the_fit_on_every_row_and_the_rule_file_is_its_certificate(runs):
    state, summary, paths = runs["state"], runs["summary"], runs["paths"]
    config = EvaluationConfig(spatial=False, target_risk=0.9, delta=0.5, calibration_cases=runs["cal"])
    assert summary["risk_control"] == json_safe(RiskControl().fit({}, state.sorted_rows(), config))
    rc = summary["risk_control"]
    assert rc["calibration"]["n_cases"] == 8 and rc["held_out"]["n_cases"] == 4
    assert paths["rule"] == paths["product:risk_control"] == runs["root"] / "eval" / "referral_rule.json"
    rule = ReferralRule.load(paths["rule"])  # checked: digest and certificate recomputed from the record
    assert list(rule.calibration_cases) == runs["cal"] and rule.target_risk == 0.9 and rule.delta == 0.5
    assert rule.feasible == rc["feasible"] is True
    if rc["threshold"] is not None:
        assert rule.threshold == rc["threshold"]


def test_fit_never_counts_an_undefined_score_as_accepted(monkeypatch):
    # b's score is undefined: the certification counts it as referred, as the rule's decision refers it (a threshold
    # of inf accepts every *defined* score); the coverage is over every calibration case
    import monai_unc.metrics.risk_control as risk_control

    rows = [{"case": "a", "predictive_entropy_fg_mean": 0.1, "dice": 0.9},
            {"case": "b", "predictive_entropy_fg_mean": None, "dice": 0.9},
            {"case": "c", "predictive_entropy_fg_mean": 0.2, "dice": 0.9},
            {"case": "d", "predictive_entropy_fg_mean": 0.9, "dice": 0.1}]
    config = EvaluationConfig(target_risk=0.5, delta=0.5, calibration_cases=["a", "b", "c"],
                              score="predictive_entropy_fg_mean")
    seen = []
    real = risk_control.risk_controlled_threshold_core
    monkeypatch.setattr(risk_control, "risk_controlled_threshold_core",
                        lambda scores, *a, **k: seen.append((np.array(scores), k)) or real(scores, *a, **k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        block = RiskControl().fit({}, rows, config)
    assert block["calibration"]["n_cases"] == 3 and len(seen) == 1
    cal_scores, kw = seen[0]  # a, b, c in case-id order: b is NaN (undefined), not a stand-in above the others
    assert cal_scores[0] == 0.1 and np.isnan(cal_scores[1]) and cal_scores[2] == 0.2 and kw["undefined"] == "refer"
    assert block["feasible"] and block["threshold"] == float("inf")  # every defined calibration score accepted
    assert sorted(block["accepted"]) == ["a", "c", "d"] and block["referred"] == ["b"]
    assert block["calibration"]["coverage"] == pytest.approx(2 / 3) and block["calibration"]["n_undefined"] == 1
    assert block["calibration"]["risk_accepted"] == 0.0 and block["referral_fraction"] == 0.25
    # the rule certified from the block decides b as the block does, and reads back with the same certificate
    from monai_unc.evaluation.triage.certify import certify_rule

    rule = certify_rule(rows, {}, 2, "predictive_entropy_fg_mean", block, config)
    # format_version 5: undefined scores referred (4) and the expected Dice of classes the mean over the classes
    assert rule.coverage == pytest.approx(2 / 3) and rule.n_undefined == 1 and rule.format_version == 5
    decisions = rule.apply([0.1, float("nan"), 0.2])
    assert [d.accepted for d in decisions] == [True, False, True] and decisions[1].code == "undefined_score"
    again = ReferralRule.from_json(json.loads(json.dumps(json_safe(rule.to_json()))))
    assert again == rule and again.record.undefined_score is None


def test_report_refits_the_rule_on_the_saved_rows_and_keeps_the_masks_block(runs):
    saved = json.loads(runs["paths"]["summary"].read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        again = resummarize(runs["state"], saved, target_risk=0.3)
    assert again["risk_control"]["target_risk"] == 0.3 and saved["risk_control"]["target_risk"] == 0.9
    config = EvaluationConfig(spatial=False, target_risk=0.3, delta=0.5, calibration_cases=runs["cal"])
    want = json_safe(RiskControl().fit({}, runs["state"].sorted_rows(), config))
    assert again["risk_control"] == want
    assert again["conformal"] == saved["conformal"]  # a product with per-case states: as evaluate wrote it


def test_apply_is_the_decision_of_monai_unc_triage(runs, tmp_path):
    rule = runs["paths"]["rule"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = run_triage(runs["data"]["predictions"], rule, tmp_path / "triage")
        files = {f.case_id: f for f in find_prediction_cases(runs["data"]["predictions"], ReferralRule.load(rule))}
        got = {cid: RiskControl().apply(files[cid], rule) for cid in sorted(files)[:4]}
    decided = result.decisions
    for cid, d in got.items():
        assert d.decision == decided[cid]


def test_without_a_target_no_rule_and_an_earlier_one_is_removed(runs, tmp_path):
    out = tmp_path / "eval"
    _evaluate(runs["data"], out, target_risk=0.9)
    assert (out / RULE_FILE).is_file()
    _, summary, paths = _evaluate(runs["data"], out)
    assert "risk_control" not in summary and "rule" not in paths and not (out / RULE_FILE).exists()
    assert np.isfinite(summary["dice"]["mean"])
