"""Cases with an undefined score in a risk-controlled referral rule: counted as referred when the rule is certified,
as its decision refers them (hostile Monte Carlo review, finding 1), and calibration cases without a Dice refused
(finding 3).

Before the fix an undefined score took a stand-in above every defined one, so a threshold that accepts every case
counted those cases as *accepted* in the certificate while ``ReferralRule.apply`` referred them: with 60-80 % easy
cases of that kind (an empty prediction of a case without a lesion: Dice 1) the accepted cases' risk exceeded the
target in 71-98 % of calibration draws, against the promised at most ``delta`` = 10 %.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig, calibration_risks, fill_undefined_scores
from monai_unc.evaluation.triage import ReferralRule
from monai_unc.evaluation.triage.certify import certify_rule
from monai_unc.evaluation.triage.rule import CalibrationRecord
from monai_unc.io import json_safe
from monai_unc.metrics import accepted_by_threshold, risk_controlled_threshold
from monai_unc.products import RiskControl

SCORE = "predictive_entropy_fg_mean"
TARGET, DELTA = 0.1, 0.1


def _rows(empty, s, dice):
    return [{"case": f"c{i:04d}", "measure": "predictive_entropy", SCORE: None if e else float(a), "dice": float(b)}
            for i, (e, a, b) in enumerate(zip(empty, s, dice))]


def _fit(rows, **kw):
    cfg = EvaluationConfig(target_risk=TARGET, delta=DELTA, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return RiskControl.from_config(cfg).fit({}, rows, cfg), cfg


def _violation_rate(p_empty, m, n_draws, p_fail, risk_accepted, seed):
    """Share of calibration draws whose certified threshold's accepted cases have a true mean risk above the target.

    A case is empty (undefined score, Dice 1) with probability ``p_empty``; otherwise its score is U(0, 1) and it
    fails (Dice 0.5 < 0.8) with probability ``p_fail(score)``. The accepted set is the rule's: a defined score at
    most the threshold; ``risk_accepted(t)`` is its exact mean risk.
    """
    rng = np.random.default_rng(seed)
    violations = feasible = 0
    for _ in range(n_draws):
        empty = rng.random(m) < p_empty
        s = rng.random(m)
        dice = np.where(empty, 1.0, np.where(rng.random(m) < p_fail(s), 0.5, 0.9))
        rows = _rows(empty, s, dice)
        block, _ = _fit(rows)
        assert not {r["case"] for r, e in zip(rows, empty) if e} & set(block["accepted"])  # never accepted
        if block["feasible"]:
            feasible += 1
            violations += risk_accepted(min(block["threshold"], 1.0)) > TARGET
    return violations / n_draws, feasible / n_draws


def _slack(n):
    return 3 * math.sqrt(DELTA * (1 - DELTA) / n)  # three Monte Carlo standard errors at the allowed rate


def test_guarantee_holds_with_many_undefined_easy_cases_finding_setting():
    # the review's setting: 60 % empty cases, failure 0.06 + 0.12 s among the others (0.718 of 400 draws violated)
    rate, _ = _violation_rate(0.6, 300, 100, lambda s: 0.06 + 0.12 * s, lambda t: 0.06 + 0.06 * t, seed=1)
    assert rate <= DELTA + _slack(100)  # 0.00 (0.71 before); ~120 defined cases certify nothing here


def test_guarantee_holds_and_the_rule_is_still_certified():
    # 80 % empty cases, no failure below score 0.5, half fail above: the rule is certified in most draws (on the
    # clean low scores), and a threshold accepting every defined score (risk 0.25) is never certified
    def risk(t):
        return 0.5 * max(0.0, t - 0.5) / t

    rate, feasible = _violation_rate(0.8, 600, 100, lambda s: 0.5 * (s >= 0.5), risk, seed=2)
    assert rate <= DELTA + _slack(100) and feasible >= 0.5  # measured 0.00 and 0.85 (0.98 violated before)


def test_undefined_calibration_cases_are_never_counted_as_accepted():
    u = np.array([0.1, np.nan, 0.2, np.inf, 0.3])
    risk = np.zeros(5)
    res = risk_controlled_threshold(u, risk, 0.5, 0.5, undefined="refer")
    defined = risk_controlled_threshold(u[[0, 2, 4]], risk[[0, 2, 4]], 0.5, 0.5)
    assert res.threshold == defined.threshold == math.inf and res.n_undefined == 2
    assert res.n_accepted == 3 and res.coverage == pytest.approx(3 / 5) and res.n_calibration == 5
    assert res.accept(u).tolist() == [True, False, True, False, True]  # inf accepts every *defined* score
    assert accepted_by_threshold(u, res.threshold).tolist() == res.accept(u).tolist()
    # easy undefined cases cannot lower the observed risk: the accepted calibration cases are the defined ones
    u2 = np.r_[np.linspace(0.1, 0.9, 30), np.full(30, np.nan)]
    r2 = np.r_[np.zeros(29), 1.0, np.zeros(30)]
    got = risk_controlled_threshold(u2, r2, 0.5, 0.5, undefined="refer")
    assert got.threshold == math.inf and got.risk == pytest.approx(1 / 30) and got.coverage == 0.5
    with pytest.raises(ValueError, match="uncertainty_cal contains 2 non-finite"):
        risk_controlled_threshold(u, risk, 0.5, 0.5)  # the default still refuses them
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        none = risk_controlled_threshold([np.nan, np.nan], [0.0, 0.0], 0.5, 0.5, undefined="refer")
    assert not none.feasible and none.threshold == -math.inf and none.bound == 1.0 and none.coverage == 0.0
    with pytest.raises(ValueError, match="undefined must be one of"):
        risk_controlled_threshold(u, risk, 0.5, 0.5, undefined="fill")


def test_a_finite_threshold_never_accepted_undefined_scores_before_either():
    # the stand-in was above every defined score, so a finite threshold always referred it: only "accept every case"
    # differed, which is what a rule certified before is refused for
    rng = np.random.default_rng(3)
    for _ in range(50):
        u = np.where(rng.random(40) < 0.4, np.nan, rng.random(40))
        r = (rng.random(40) < 0.2).astype(float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            old = risk_controlled_threshold(fill_undefined_scores(u), r, 0.3, 0.2)
        if math.isfinite(old.threshold):
            assert not (fill_undefined_scores(u) <= old.threshold)[np.isnan(u)].any()


# ------------------------------------------------------------------------------------------------ rule files
def _rows_with_easy_undefined():
    rng = np.random.default_rng(4)
    empty = rng.random(200) < 0.7
    s = rng.random(200)
    dice = np.where(empty, 1.0, np.where(rng.random(200) < 0.1, 0.5, 0.9))
    return _rows(empty, s, dice)


def _legacy_doc(rows, cfg):
    """The rule file an earlier monai-unc wrote: undefined scores filled above every defined one, version 3."""
    scores = np.array([math.nan if r[SCORE] is None else r[SCORE] for r in rows])
    risks = calibration_risks([r["dice"] for r in rows], [r["case"] for r in rows], "failure", 0.8)
    filled = fill_undefined_scores(scores)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = risk_controlled_threshold(filled, risks, cfg.target_risk, cfg.delta, n_candidates=20)
    rec = CalibrationRecord(tuple(None if math.isnan(v) else float(v) for v in scores),
                            tuple(r["dice"] for r in rows), tuple(float(v) for v in risks),
                            undefined_score=float(filled[np.isnan(scores)][0]))
    rule = ReferralRule(score=SCORE, threshold=res.threshold, feasible=res.feasible, target_risk=cfg.target_risk,
                        delta=cfg.delta, method="sgr", risk="failure", failure_dice=0.8,
                        calibration_scores=tuple(sorted(scores[~np.isnan(scores)])),
                        calibration_cases=tuple(r["case"] for r in rows), bound=res.bound, coverage=res.coverage,
                        observed_risk=res.risk, n_candidates=res.n_candidates,
                        n_undefined=int(np.isnan(scores).sum()), num_classes=2, record=rec)
    return json.loads(json.dumps(json_safe(rule.to_json()))), res


def test_a_rule_certified_before_that_accepted_undefined_scores_is_refused():
    rows = _rows_with_easy_undefined()
    cfg = EvaluationConfig(target_risk=0.1, delta=0.1)
    doc, res = _legacy_doc(rows, cfg)
    assert res.threshold == math.inf and doc["format_version"] == 3 and doc["accept_all"]
    with pytest.raises(ValueError, match=r"earlier monai-unc that counted its \d+ calibration case\(s\) with an "
                                         r"undefined score as accepted.*certify it again"):
        ReferralRule.from_json(doc)
    # the same cases certified now: the undefined ones are referred, and the rule reads back (format_version 4, 5 for
    # a rule of classes, whose expected Dice is the mean over the classes)
    block, _ = _fit(rows)
    rule = certify_rule(rows, {}, 2, SCORE, block, cfg)
    again = json.loads(json.dumps(json_safe(rule.to_json())))
    assert again["format_version"] == 5 and again["calibration"]["undefined_score"] is None
    assert ReferralRule.from_json(again) == rule and rule.coverage < res.coverage
    # a version-1 rule (no record) accepting every case with undefined calibration scores: refused the same way
    v1 = {k: v for k, v in doc.items() if k != "digest"}
    v1["format_version"] = 1
    v1["calibration"] = {k: v for k, v in doc["calibration"].items()
                         if k not in ("case_scores", "dice", "risks", "undefined_score", "max_candidates", "sequence")}
    with pytest.raises(ValueError, match="counted its .* as accepted"):
        ReferralRule.from_json(v1)


def test_a_rule_certified_before_with_a_finite_threshold_still_loads():
    rng = np.random.default_rng(5)  # 20 % undefined; no failure below score 0.4, half fail above
    empty, s = rng.random(200) < 0.2, rng.random(200)
    rows = _rows(empty, s, np.where(empty, 1.0, np.where((s >= 0.4) & (rng.random(200) < 0.5), 0.5, 0.9)))
    cfg = EvaluationConfig(target_risk=0.1, delta=0.2)
    doc, res = _legacy_doc(rows, cfg)
    assert res.feasible and math.isfinite(res.threshold) and doc["format_version"] == 3
    rule = ReferralRule.from_json(doc)  # its certificate was already that of the cases it accepts
    assert rule.threshold == res.threshold and rule.record.undefined_score is not None
    assert ReferralRule.from_json(json.loads(json.dumps(json_safe(rule.to_json())))) == rule  # stays version 3


def test_the_undefined_score_field_must_match_the_format_version():
    rows = _rows_with_easy_undefined()
    cfg = EvaluationConfig(target_risk=0.1, delta=0.1)
    block, _ = _fit(rows)
    doc = json.loads(json.dumps(json_safe(certify_rule(rows, {}, 2, SCORE, block, cfg).to_json())))
    doc.pop("digest")
    with pytest.raises(ValueError, match="'undefined_score' must be null in format_version 5"):
        ReferralRule.from_json({**doc, "calibration": {**doc["calibration"], "undefined_score": 2.0}})
    with pytest.raises(ValueError, match="'undefined_score' is null, but a format_version 3 rule"):
        ReferralRule.from_json({**doc, "format_version": 3})


# ------------------------------------------------------------------------------ finding 3: calibration Dice
@pytest.mark.parametrize("risk", ["failure", "1-dice"])
def test_an_undefined_calibration_dice_is_refused_naming_the_cases(risk):
    rng = np.random.default_rng(0)
    rows = [{"case": f"c{i:03d}", "measure": "predictive_entropy", SCORE: float(rng.random()),
             "dice": None if i < 5 else (float("nan") if i == 7 else 0.95)} for i in range(300)]
    with pytest.raises(ValueError, match=r"the rows' field 'dice' is undefined \(null or NaN\) for 6 case\(s\): "
                                         r"'c000', 'c001', 'c002', 'c003', 'c004' and 1 more; a risk-controlled rule"):
        _fit(rows, risk=risk)
    cfg = EvaluationConfig(target_risk=0.1, delta=0.1, risk=risk)
    block, _ = _fit([{**r, "dice": 0.95} for r in rows], risk=risk)
    with pytest.raises(ValueError, match=r"'dice' is undefined .* 'c000'"):  # certify_rule on its own, too
        certify_rule(rows, {}, 2, SCORE, block, cfg)
    with pytest.raises(ValueError, match=r"must be a Dice in \[0, 1\].*'c001'"):
        _fit([{**r, "dice": 1.5 if r["case"] == "c001" else 0.9} for r in rows], risk=risk)


def test_a_rule_file_with_a_null_calibration_dice_is_refused():
    rows = _rows_with_easy_undefined()
    cfg = EvaluationConfig(target_risk=0.1, delta=0.1)
    block, _ = _fit(rows)
    doc = json.loads(json.dumps(json_safe(certify_rule(rows, {}, 2, SCORE, block, cfg).to_json())))
    doc.pop("digest")
    doc["calibration"]["dice"][0] = None  # and its risk stays 0: "no failure" would have passed
    with pytest.raises(ValueError, match=r"field 'calibration.dice' is undefined .* 'c0000'.*edited or corrupted"):
        ReferralRule.from_json(doc)
