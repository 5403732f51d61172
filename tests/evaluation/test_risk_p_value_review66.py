"""LTT's p-value through the evaluation options, the certify path, the rule file and the command line (review 66).

``risk_p_value="binomial"`` (``--risk-p-value binomial``) certifies a 0/1 risk with Learn-then-Test's exact binomial
p-value; the rule records it (``calibration.p_value``, ``format_version`` 6, under the digest and signature) and a
reader recomputes the certificate with it, so an edited p-value is refused. The default stays Hoeffding-Bentkus, and
a rule certified with it is written as before (no field, ``format_version`` 5).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig
from monai_unc.evaluation.triage import ReferralRule
from monai_unc.evaluation.triage.certify import certify_rule
from monai_unc.evaluation.triage.rule import CalibrationRecord
from monai_unc.io import json_safe
from monai_unc.io.provenance import rule_digest
from monai_unc.products.risk_control import RiskControl, risk_control_line

SCORE = "predictive_entropy_fg_mean"


def _rows():
    """60 cases whose failures grow likelier with the score: binomial certifies 46 cases, Hoeffding-Bentkus 30."""
    rng = np.random.default_rng(0)
    u = np.sort(rng.random(60))
    failed = rng.random(60) < 0.6 * u**2
    return [{"case": f"c{i:02d}", SCORE: float(v), "dice": 0.5 if f else 0.9}
            for i, (v, f) in enumerate(zip(u, failed))]


def _config(**kw):
    return EvaluationConfig(target_risk=0.2, delta=0.2, score=SCORE, risk_method="ltt", **kw)


def _rule(p_value):
    rows, config = _rows(), _config(risk_p_value=p_value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        block = RiskControl().fit({}, rows, config)
    return block, certify_rule(rows, {}, 2, SCORE, block, config)


def test_config_takes_the_binomial_pvalue_for_ltt_on_the_failure_risk_only():
    cfg = _config(risk_p_value="binomial")
    cfg.validate()
    assert cfg.to_json()["risk_p_value"] == "binomial"
    assert "risk_p_value" not in _config().to_json()  # the default: summaries are written as before
    for kw, msg in (({"risk": "1-dice"}, "exact for the 0/1 risk"), ({"risk_method": None}, "needs risk_method='ltt'"),
                    ({"risk_method": "sgr"}, "needs risk_method='ltt'")):
        args = {"target_risk": 0.2, "score": SCORE, "risk_method": "ltt", **kw, "risk_p_value": "binomial"}
        with pytest.raises(ValueError, match=msg) as e:
            EvaluationConfig(**args).validate()
        assert "risk_p_value" in str(e.value)
    with pytest.raises(ValueError, match="risk_p_value must be one of"):
        _config(risk_p_value="auto").validate()


def test_the_block_and_the_rule_record_the_pvalue_and_binomial_certifies_more():
    hb_block, hb = _rule("hoeffding_bentkus")
    ex_block, ex = _rule("binomial")
    assert "p_value" not in hb_block and ex_block["p_value"] == "binomial"
    assert ex_block["calibration"]["coverage"] == 46 / 60 and hb_block["calibration"]["coverage"] == 30 / 60
    assert "(ltt, binomial p-value, " in risk_control_line(ex_block) and "binomial" not in risk_control_line(hb_block)
    assert hb.p_value == "hoeffding_bentkus" and hb.format_version == 5
    assert ex.p_value == "binomial" and ex.format_version == 6 and "LTT, binomial p-value;" in ex.guarantee()
    d = json_safe(ex.to_json())
    assert d["format_version"] == 6 and d["calibration"]["p_value"] == "binomial"
    assert "p_value" not in json_safe(hb.to_json())["calibration"]
    back = ReferralRule.from_json(json.loads(json.dumps(d)), check_digest=True)
    assert back == ex and back.p_value == "binomial" and back.integrity == "recomputed, digest verified"


def _redigest(d):
    d = {k: v for k, v in d.items() if k != "digest"}
    d["digest"] = rule_digest(d)
    return d


def test_an_edited_pvalue_is_refused_when_the_rule_is_read():
    _, ex = _rule("binomial")
    d = json_safe(ex.to_json())
    edited = json.loads(json.dumps(d))
    edited["calibration"]["p_value"] = "hoeffding_bentkus"
    assert _redigest(edited)["digest"] != d["digest"]  # the field is under the digest (and so the signature)
    with pytest.raises(ValueError, match="field 'p_value' is 'hoeffding_bentkus' in a format_version 6"):
        ReferralRule.from_json(_redigest(edited), check_digest=True)
    # dropped, as a version-5 rule: the certificate recomputed with Hoeffding-Bentkus is another one
    old = json.loads(json.dumps(d))
    del old["calibration"]["p_value"]
    old["format_version"] = 5
    with pytest.raises(ValueError, match="recomputing the certificate .* the file was edited"):
        ReferralRule.from_json(_redigest(old), check_digest=True)
    for bad, msg in (("auto", "must be one of hoeffding_bentkus, binomial"), (1, "must be str")):
        odd = json.loads(json.dumps(d))
        odd["calibration"]["p_value"] = bad
        with pytest.raises(ValueError, match=msg):
            ReferralRule.from_json(_redigest(odd), check_digest=True)
    # a binomial p-value claimed for a continuous risk, or for SGR, is no certificate of this package
    with pytest.raises(ValueError, match="p_value 'binomial' certifies the 0/1 risk"):
        ReferralRule(SCORE, 0.2, True, 0.5, 0.1, "sgr", "failure", 0.8, (0.1, 0.2), ("a", "b"),
                     record=CalibrationRecord((0.1, 0.2), (0.9, 0.9), (0.0, 0.0), p_value="binomial"))
    with pytest.raises(ValueError, match="p_value must be one of"):
        CalibrationRecord((0.1,), (0.9,), (0.0,), p_value="auto")


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("pvalue66") / "data", n_cases=4, shape=(8, 8, 8))


def _evaluate(cohort, out, *flags):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(out), "-q",
                     "--no-spatial", *flags])


@pytest.mark.parametrize("flags, msg", [
    (["--target-risk", "0.5", "--risk", "1-dice", "--risk-method", "ltt"], "exact for the 0/1 risk"),
    (["--target-risk", "0.5"], "needs risk_method='ltt'"),
    ([], "needs --target-risk"),
])
def test_cli_refuses_the_binomial_pvalue_where_it_does_not_apply_in_one_line(cohort, tmp_path, capsys, flags, msg):
    assert _evaluate(cohort, tmp_path / "e", *flags, "--risk-p-value", "binomial") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0] and "--risk-p-value" in err[0]
    assert not (tmp_path / "e" / "summary.json").exists()


def test_cli_certifies_with_the_binomial_pvalue_and_the_rule_file_says_so(cohort, tmp_path):
    ev = tmp_path / "e"
    assert _evaluate(cohort, ev, "--target-risk", "0.9", "--delta", "0.5", "--risk-method", "ltt",
                     "--risk-p-value", "binomial") == 0
    summary = json.loads((ev / "summary.json").read_text())
    assert summary["config"]["risk_p_value"] == "binomial" and summary["risk_control"]["p_value"] == "binomial"
    rule = ReferralRule.load(ev / "referral_rule.json")
    assert rule.p_value == "binomial" and rule.format_version == 6 and rule.integrity == "recomputed, digest verified"


def test_a_binomial_rule_without_the_expected_dice_estimate_is_refused_when_built():
    """Version 6 holds version 5's estimate: such a rule would be written as a version its reader refuses."""
    with pytest.raises(ValueError, match="p_value 'binomial' needs the record's expected_dice_estimate"):
        ReferralRule(SCORE, 0.2, True, 0.5, 0.1, "ltt", "failure", 0.8, (0.1, 0.2), ("a", "b"),
                     record=CalibrationRecord((0.1, 0.2), (0.9, 0.9), (0.0, 0.0), p_value="binomial"))
    _, ex = _rule("binomial")  # evaluate's rule records it and reads back
    assert ReferralRule.from_json(json_safe(ex.to_json()), check_digest=True).p_value == "binomial"
