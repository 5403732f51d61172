"""Hostile review 54 of the referral rule (monai_unc.evaluation.triage.rule): fields a rule (or its file) holds that
were accepted although no rule ``evaluate`` certifies holds them, or that were written and then could not be read."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from monai_unc.evaluation.triage.rule import CalibrationRecord, ImageReference, ReferralRule
from monai_unc.io import json_safe
from monai_unc.metrics.risk_control import risk_controlled_threshold

STATS = np.random.default_rng(0).normal(size=(12, 5)) * [1, 1, 0.1, 1, 1] + [100, 10, 0, 100, 120]


def _rule(n: int = 12, **kw) -> ReferralRule:
    """A rule certified (as certify_rule does) on ``n`` calibration cases."""
    rng = np.random.default_rng(1)
    scores = tuple(float(v) for v in rng.random(n))
    dice = tuple(0.5 if rng.random() < 0.5 * s else 0.9 for s in scores)
    risks = tuple(float(d < 0.8) for d in dice)
    rec = CalibrationRecord(scores, dice, risks, expected_dice_estimate="class_mean")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = risk_controlled_threshold(np.array(scores), np.array(risks), 0.6, 0.3, n_candidates=rec.n_candidates)
    return ReferralRule("predictive_entropy_fg_mean", res.threshold, res.feasible, 0.6, 0.3, "sgr", "failure", 0.8,
                        tuple(sorted(scores)), tuple(f"c{i}" for i in range(n)), bound=res.bound,
                        coverage=res.coverage, observed_risk=res.risk, n_candidates=res.n_candidates, num_classes=2,
                        record=rec, **kw)


def _doc(rule: ReferralRule) -> dict:
    return json.loads(json.dumps(json_safe(rule.to_json())))


# ------------------------------------------------------------------------------------------------ image z_max
@pytest.mark.parametrize("z_max", [np.int64(4), np.float32(4.5), 4, 4.5])
def test_image_z_max_takes_numpy_scalars(z_max):
    ref = ImageReference.fit(STATS, z_max)
    assert ref.z_max == float(z_max) and type(ref.z_max) is float
    assert ImageReference.from_json(json_safe(ref.to_json())) == ref


@pytest.mark.parametrize("z_max", [math.inf, math.nan, 0, -1.0, True, "5", None])
def test_image_z_max_a_file_cannot_hold_is_refused_when_fitted(z_max):
    """``z_max=inf`` was fitted and written (as null) and the rule could then not be read back."""
    with pytest.raises(ValueError, match="z_max must be a positive finite number"):
        ImageReference.fit(STATS, z_max)


# ------------------------------------------------------------------------------------------------ apply's inputs
def test_apply_refuses_text_and_complex_scores_naming_them():
    """``apply(["0.2"])`` parsed the text and accepted the case, where ``accepted_by_threshold`` (the rule it applies)
    refuses text; a complex score failed with Python's ``float() argument must be ...``, naming nothing."""
    rule = _rule()
    inside = float(np.mean(rule.calibration_scores[:2]))
    assert rule.apply([inside])[0].code == "accepted"  # the premise: the number is accepted
    for bad in ([str(inside)], np.array([str(inside)]), [complex(inside, 1.0)], [inside, "nan"]):
        with pytest.raises(TypeError, match="scores must hold real numbers"):
            rule.apply(bad)
    ref = ImageReference.fit(STATS)
    with_images = ReferralRule(**{**{f: getattr(rule, f) for f in rule.__dataclass_fields__}, "image_reference": ref})
    with pytest.raises(TypeError, match="image_stats must hold real numbers"):
        with_images.apply([inside], [[str(v) for v in STATS[0]]])
    # None stands for an undefined score, and for a case without image statistics, as documented
    assert [d.code for d in with_images.apply([inside, None], [STATS[0], None])] == ["accepted", "undefined_score"]


# ------------------------------------------------------------------------------------------------ class names
def test_class_names_that_give_one_column_are_refused():
    """``evaluate`` refuses class names whose columns collide (``Left Atrium`` and ``left-atrium`` both give
    ``expected_dice_left_atrium``), as the rule refuses such region names; a rule (or rule file) holding them was
    taken, and ``triage`` wrote class 2's expected Dice (0.3623 on a toy case) under the column of class 1 (0.5591),
    whose value was lost."""
    rule = _rule()
    fields = {f: getattr(rule, f) for f in rule.__dataclass_fields__}
    with pytest.raises(ValueError, match="class_names: the names .* give the same column names"):
        ReferralRule(**{**fields, "num_classes": 3, "class_names": ("background", "Left Atrium", "left-atrium")})
    ok = ReferralRule(**{**fields, "num_classes": 3, "class_names": ("background", "Left Atrium", "Right Atrium")})
    doc = _doc(ok)
    assert ReferralRule.from_json(doc) == ok
    doc["class_names"][2] = "left-atrium"
    with pytest.raises(ValueError, match="class_names: the names .* give the same column names"):
        ReferralRule.from_json(doc)


# ------------------------------------------------------------------------------------------------ rule file fields
@pytest.mark.parametrize("edit", [
    lambda cal: cal["cases"].__setitem__(0, 123),  # was read as the case "123"
    lambda cal: cal["cases"].__setitem__(1, {"a": 1}),  # was read as the case "{'a': 1}"
    lambda cal: cal["cases"].__setitem__(1, None),
    lambda cal: cal["cases"].__setitem__(1, cal["cases"][0]),  # one case twice
])
def test_calibration_case_ids_must_be_distinct_strings(edit):
    doc = _doc(_rule())
    edit(doc["calibration"])
    with pytest.raises(ValueError, match="calibration_cases must be distinct case ids"):
        ReferralRule.from_json(doc)


def test_a_rule_is_not_made_with_case_ids_it_writes_otherwise():
    rule = _rule()
    fields = {f: getattr(rule, f) for f in rule.__dataclass_fields__}
    for cases in (("c0", "c0", *rule.calibration_cases[2:]), (0, *rule.calibration_cases[1:])):
        with pytest.raises(ValueError, match="calibration_cases must be distinct case ids"):
            ReferralRule(**{**fields, "calibration_cases": cases})


@pytest.mark.parametrize("edit, field", [
    (lambda ir: ir["features"].__setitem__(0, "mean\x1b[2J"), r"features\[0\]"),  # reached reasons and terminals
    (lambda ir: ir["features"].__setitem__(1, 2), r"features\[1\]"),  # was read as the statistic "2"
    (lambda ir: ir.__setitem__("n_cases", -4), "n_cases"),
    (lambda ir: ir.__setitem__("n_cases", 0), "n_cases"),
])
def test_image_reference_fields_without_recorded_statistics_are_checked(edit, field):
    """A reference without ``calibration_statistics`` (rules written before they were recorded) is not recomputed:
    its feature names and number of images were taken as written, any JSON value for a name."""
    ref = ImageReference.fit(STATS)
    d = json.loads(json.dumps(json_safe(ref.to_json())))
    del d["calibration_statistics"]
    assert ImageReference.from_json(d) == ImageReference(ref.features, ref.median, ref.scale, ref.n_cases, ref.z_max)
    edit(d)
    with pytest.raises(ValueError, match=field):
        ImageReference.from_json(d)


# ------------------------------------------------------------------------------------------------ constructor
_BASE = dict(score="predictive_entropy_fg_mean", threshold=0.3, feasible=True, target_risk=0.5, delta=0.1, method="sgr",
             risk="failure", failure_dice=0.8, calibration_scores=(0.1, 0.2, 0.3, 0.4),
             calibration_cases=("a", "b", "c", "d"))


@pytest.mark.parametrize("field, value", [
    ("threshold", True),  # was read as 1.0: every score up to 1 accepted
    ("threshold", "0.3"),  # was taken, then apply failed in numpy's comparison
    ("failure_dice", True),  # was read as 1.0: every case with a Dice below 1 counted as failed
    ("failure_dice", "0.8"),  # "'<=' not supported between instances of 'int' and 'str'"
    ("calibration_scores", (0.1, 0.2, "0.3", 0.4)),  # the text was parsed
    ("n_undefined", True),
    ("n_undefined", 0.0),
    ("bound", "x"),
    ("coverage", 7.0),
    ("observed_risk", -1.0),
])
def test_the_constructor_refuses_numbers_that_are_not_numbers(field, value):
    kw = {**_BASE, field: value}
    if field == "n_undefined":
        kw["calibration_cases"] = (*_BASE["calibration_cases"], "e")  # one case more: True + 4 scores = 5 cases
    with pytest.raises(ValueError, match=field):
        ReferralRule(**kw)


@pytest.mark.parametrize("field, value", [("num_classes", np.int64(3)), ("patch_size", np.int64(12)),
                                          ("n_candidates", np.int64(3)), ("target_risk", np.float32(0.5)),
                                          ("delta", np.float32(0.125)), ("failure_dice", np.float32(0.75)),
                                          ("threshold", np.float32(0.25)), ("n_undefined", np.int64(0))])
def test_the_constructor_takes_numpy_scalars(field, value):
    rule = ReferralRule(**{**_BASE, field: value})
    assert getattr(rule, field) == value
    back = ReferralRule.from_json(json.loads(json.dumps(json_safe(rule.to_json()))))
    assert getattr(back, field) == value
