"""A recorded triage decision is checked against the rule it names (``check_recorded_decisions``).

``triage.json`` is a file a user may edit; the triage page and ``dicom-export --triage`` (the SR states each decision
beside the rule's digest) read its decisions as the rule's. The reference here is ``ReferralRule.apply`` itself, run
on image statistics that give the recorded ``image_z_max``: for every score and z-score, exactly the decision and code
``apply`` gives pass, every other pair is refused with one line naming the case.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from monai_unc.evaluation.triage.rule import Decision, ImageReference, ReferralRule, check_recorded_decisions

RULE = ReferralRule("predictive_entropy_fg_mean", 0.3, True, 0.1, 0.1, "sgr", "failure", 0.8,
                    (0.05, 0.1, 0.2, 0.3, 0.45, 0.6), tuple(f"k{i}" for i in range(6)))
#: image statistics (mean, p99) whose robust z-scores are the statistics themselves (median 0, scale 1; z_max 5)
IMAGE = ImageReference(("mean", "p99"), (0.0, 0.0), (1.0, 1.0), 10)
SCORES = [0.05, 0.2, 0.3, 0.30000000000000004, 0.45, 0.6, 0.7, 0.01, math.nan]
Z = [None, 0.0, 4.9, 5.0, 5.000001, 9.0]
PAIRS = [("accept", "accepted")] + [("review", c) for c in Decision.CODES if c != "accepted"]


def _case(score: float, decision: str, code: str | None, z: float | None = None) -> dict:
    c = {"case": "a", "score": None if math.isnan(score) else score, "decision": decision, "code": code}
    return c if z is None else {**c, "image_z_max": z}


def _passes(cases, rule) -> bool:
    try:
        check_recorded_decisions(cases, rule, "t/triage.json")
    except ValueError as e:
        assert str(e).startswith("t/triage.json: field 'cases[0].") and "'a'" in str(e) and "\n" not in str(e)
        return False
    return True


@pytest.mark.parametrize("feasible", [True, False])
@pytest.mark.parametrize("with_image", [True, False])
def test_exactly_the_decision_apply_gives_passes(feasible, with_image):
    rule = dataclasses.replace(RULE, feasible=feasible, threshold=0.3 if feasible else -math.inf,
                               image_reference=IMAGE if with_image else None)
    for score, z in itertools.product(SCORES, Z):
        stats = None if z is None or not with_image else [[z, z / 2]]  # the largest z-score is z
        truth = rule.apply([score], stats)[0]
        recorded_z = z if with_image else None  # triage records image_z_max only when the image check ran
        for decision, code in PAIRS:
            got = _passes([_case(score, decision, code, recorded_z)], rule)
            assert got == ((decision, code) == (truth.decision, truth.code)), (score, z, decision, code, truth)
        # a file without codes: the decision alone is compared
        for decision in ("accept", "review"):
            assert _passes([_case(score, decision, None, recorded_z)], rule) == (decision == truth.decision)


def test_a_review_referred_for_its_image_needs_the_image_check_recorded():
    rule = dataclasses.replace(RULE, image_reference=IMAGE)
    assert _passes([_case(0.1, "review", "image_statistics", 7.0)], rule)  # legitimate: z 7 > 5
    with pytest.raises(ValueError, match=r"is 'image_statistics' but its field 'image_z_max' 2\.0 is within"):
        check_recorded_decisions([_case(0.1, "review", "image_statistics", 2.0)], rule, "t")
    with pytest.raises(ValueError, match="is 'image_statistics' but its field 'image_z_max' is not recorded"):
        check_recorded_decisions([_case(0.1, "review", "image_statistics")], rule, "t")
    with pytest.raises(ValueError, match="is 'image_statistics' but the rule holds no image reference"):
        check_recorded_decisions([_case(0.1, "review", "image_statistics", 7.0)], RULE, "t")


@pytest.mark.parametrize("field, value", [("score", "0.2"), ("score", True), ("image_z_max", "7"),
                                          ("image_z_max", float("inf")), ("score", float("nan"))])
def test_a_recorded_number_that_is_no_finite_number_is_refused(field, value):
    case = {**_case(0.2, "accept", "accepted", 1.0), field: value}
    with pytest.raises(ValueError, match=rf"field 'cases\[0\]\.{field}' of case 'a' must be a finite number or null"):
        check_recorded_decisions([case], dataclasses.replace(RULE, image_reference=IMAGE), "t")


def test_a_code_that_contradicts_its_decision_is_refused():
    with pytest.raises(ValueError, match="'cases\\[0\\].code' of case 'a' is 'above_threshold', which does not agree"):
        check_recorded_decisions([_case(0.2, "accept", "above_threshold")], RULE, "t")


def test_the_message_names_what_differs():
    with pytest.raises(ValueError) as e:
        check_recorded_decisions([_case(0.2, "accept", "accepted"), {**_case(0.5, "accept", "accepted"), "case": "b"}],
                                 RULE, "t/triage.json")
    assert str(e.value) == ("t/triage.json: field 'cases[1].decision' of case 'b' must be the rule's decision for its "
                            "score 0.5 (review: above_threshold), got 'accept' (accepted)")
