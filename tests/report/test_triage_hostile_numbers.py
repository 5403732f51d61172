"""The triage page (``triage.html``) reading a ``triage.json`` edited by a hostile tester.

``build_triage_page`` draws the page from ``triage.json`` alone, a file a user may edit. Found by hostile testing: the
counts and reason counts were not checked against the cases' decisions (the cards said 10 accepted beside a table
with two "rule: review"), the order not against the scores, and a case's score edited far above the threshold stayed
"rule: accept". Each edit is now refused with one line naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from monai_unc.evaluation.triage import ReferralRule
from monai_unc.report.triage import build_triage_page


def triage_json(image_reference: bool = False) -> dict[str, Any]:
    """A ``triage.json`` of three cases as :func:`~monai_unc.evaluation.triage.run_triage` writes it: threshold 0.5,
    calibration range [0.1, 0.9]; ``a`` accepted, ``b`` above the threshold, ``c`` without a defined score."""
    rule = ReferralRule(score="predictive_entropy_fg_mean", threshold=0.5, feasible=True, target_risk=0.2, delta=0.1,
                        method="sgr", risk="failure", failure_dice=0.8, calibration_scores=(0.1, 0.9),
                        calibration_cases=("k0", "k1"), bound=0.1, coverage=1.0, observed_risk=0.0, n_candidates=1,
                        num_classes=2)
    decisions = rule.apply([0.25, 0.75, float("nan")])
    cases = [{"case": cid, "score": score, "decision": d.decision, "reason": d.reason, "code": d.code, "rank": rank}
             for cid, score, d, rank in zip("abc", (0.25, 0.75, None), decisions, (3, 2, 1))]
    return {"n_cases": 3, "n_accepted": 1, "n_review": 2, "accepted": ["a"], "review": ["b", "c"],
            "reasons": {"accepted": 1, "above_threshold": 1, "undefined_score": 1}, "order": ["c", "b", "a"],
            "fingerprint": {"status": "unverified"}, "notes": [], "rule_file": None, "rule_signature": None,
            "rule": rule.to_json(), "cases": cases, "files": {}, "warnings": []}


def _write(folder: Path, doc: dict[str, Any]) -> None:
    (folder / "triage.json").write_text(json.dumps(doc))


def _case(doc: dict[str, Any], cid: str) -> dict[str, Any]:
    return next(c for c in doc["cases"] if c["case"] == cid)


def test_the_file_as_triage_writes_it_draws_a_page(tmp_path):
    """The unedited file: the page's cards are the decisions' counts."""
    _write(tmp_path, triage_json())
    text = build_triage_page(tmp_path, n_cases=0, viewer=False).read_text()
    assert "accept score ≤ 0.5" in text and ">rule: accept<" in text


def _edit_counts(d: dict[str, Any]) -> None:
    d["n_accepted"], d["n_review"] = 3, 0


def _edit_reasons(d: dict[str, Any]) -> None:
    d["reasons"] = {"accepted": 3}


def _edit_review(d: dict[str, Any]) -> None:
    d["n_review"] = 5


def _edit_lists(d: dict[str, Any]) -> None:
    d["accepted"] = ["a", "b"]


def _edit_code(d: dict[str, Any]) -> None:
    _case(d, "b")["code"] = "accepted"


def _edit_order(d: dict[str, Any]) -> None:
    d["order"] = ["c", "a", "b"]


def _edit_score(d: dict[str, Any]) -> None:  # a above the threshold, inside the range, still ranked below b
    _case(d, "a")["score"] = 0.6


def _edit_decision(d: dict[str, Any]) -> None:  # b accepted although above the threshold; counts made to agree
    b = _case(d, "b")
    b["decision"], b["code"] = "accept", "accepted"
    d.update(n_accepted=2, n_review=1, accepted=["a", "b"], review=["c"],
             reasons={"accepted": 2, "undefined_score": 1})


def _edit_undefined(d: dict[str, Any]) -> None:  # c's undefined score given a value; it stays "undefined_score"
    _case(d, "c")["score"] = 0.3
    d["order"] = ["b", "c", "a"]


@pytest.mark.parametrize("edit, field", [
    (_edit_counts, "'n_accepted'"),
    (_edit_review, "'n_review'"),
    (_edit_reasons, "'reasons'"),
    (_edit_lists, "'accepted'"),
    (_edit_code, "'cases[1].code'"),
    (_edit_order, "'order'"),
    (_edit_score, "'cases[0].decision'"),
    (_edit_decision, "'cases[1].decision'"),
    (_edit_undefined, "'cases[2].decision'"),
])
def test_an_edit_that_contradicts_the_decisions_is_refused_naming_the_field(tmp_path, edit: Callable, field: str):
    """Found by hostile testing: counts, reasons, order and decisions of an edited triage.json were drawn as they
    were (cards "10 accepted" beside two "rule: review" rows; a score edited to 0.5 above a threshold of 0.001 still
    "rule: accept"). Each is refused with one line naming triage.json and the field."""
    doc = triage_json()
    edit(doc)
    _write(tmp_path, doc)
    with pytest.raises(ValueError, match="triage.json") as e:
        build_triage_page(tmp_path, n_cases=0, viewer=False)
    assert field in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_image_z_scores_never_read_equal_to_the_limit_they_crossed(tmp_path):
    """Found by hostile testing: a case referred for ``z = 5.03 > z_max = 5`` read "mean z=5.0 > 5" in its reason and
    ``5.0`` in the page's "image z" column, the same text as an accepted case's ``4.97``."""
    from monai_unc.evaluation.triage.rule import ImageReference

    doc = triage_json()
    rule = dataclasses.replace(ReferralRule.from_json(doc["rule"]),
                               image_reference=ImageReference(("mean", "p99"), (0.0, 0.0), (1.0, 1.0), 10))
    stats = {"a": [4.97, 0.0], "b": [5.03, 0.0], "c": [0.0, 0.0]}
    decisions = rule.apply([0.25, 0.3, float("nan")], list(stats.values()))
    assert decisions[1].code == "image_statistics" and "z=5.03 > 5" in decisions[1].reason, decisions[1].reason
    assert decisions[0].code == "accepted"
    for c, d in zip(doc["cases"], decisions):
        c.update(score=0.3 if c["case"] == "b" else c["score"], decision=d.decision, reason=d.reason, code=d.code,
                 image_z_max=max(stats[c["case"]]))
    doc.update(rule=rule.to_json(), reasons={"accepted": 1, "image_statistics": 1, "undefined_score": 1})
    _write(tmp_path, doc)
    text = build_triage_page(tmp_path, n_cases=0, viewer=False).read_text()
    cells = {cid: re.search(rf'data-case="{cid}".*?</tr>', text, re.S).group(0) for cid in "abc"}
    z_cells = {cid: re.findall(r"<td[^>]*>([^<]*)</td>", row)[-2] for cid, row in cells.items()}
    assert z_cells == {"a": "4.97", "b": "5.03", "c": "0.0"}, z_cells


def test_the_guarantee_card_names_the_cases_its_bound_is_for(tmp_path):
    """Found by hostile testing: a case below the calibration range (score 0.05, threshold 0.5) was referred by the
    range check, and the card still read "guaranteed mean risk of accepted ≤ 0.2", while the paragraph under it
    bounds the mean risk of the cases accepted after the checks by 0.2 c / (c - eps) only."""
    _write(tmp_path, triage_json())
    text = build_triage_page(tmp_path, n_cases=0, viewer=False).read_text()
    assert '<div class="k">guaranteed mean risk of accepted (' in text  # no check referred a case below the threshold
    doc = triage_json()
    rule = ReferralRule.from_json(doc["rule"])
    decisions = rule.apply([0.05, 0.75, float("nan")])
    assert decisions[0].code == "outside_range"
    for c, d, score in zip(doc["cases"], decisions, (0.05, 0.75, None)):
        c.update(score=score, decision=d.decision, reason=d.reason, code=d.code)
    doc.update(n_accepted=0, n_review=3, accepted=[], review=["a", "b", "c"],
               reasons={"outside_range": 1, "above_threshold": 1, "undefined_score": 1}, order=["c", "b", "a"])
    _write(tmp_path, doc)
    text = build_triage_page(tmp_path, n_cases=0, viewer=False).read_text()
    card = re.search(r'<div class="v">([^<]*)</div><div class="k">(guaranteed mean risk[^<]*)</div>', text)
    assert card.group(1) == "≤ 0.2" and "the threshold accepts, before the range and image checks" in card.group(2)
    assert "guaranteed mean risk of accepted" not in text


def test_a_target_risk_is_never_written_below_itself(tmp_path):
    """Found by hostile testing: targets were written ``f"{target:g}"``, so a rule certified for a mean risk of at most
    0.1234564 read "target risk 0.123456" and "≤ 0.123456" (a stronger guarantee than certified; 1/3 read 0.333333).
    :func:`~monai_unc.product.format_target` writes the target exactly or rounded up, on every page and line."""
    import numpy as np

    from monai_unc.product import format_target

    for t in np.random.default_rng(0).uniform(1e-6, 1.0, 2000).tolist() + [0.1, 0.2, 0.05, 1 / 3, 0.1234564]:
        text = format_target(t)
        assert float(text) >= t and len(text.lstrip("0.").replace(".", "").split("e")[0]) <= 6, (t, text)
        assert float(text) - t <= 1e-5 * t, (t, text)
    doc = triage_json()
    doc["rule"]["target_risk"] = 0.1234564
    _write(tmp_path, doc)
    text = build_triage_page(tmp_path, n_cases=0, viewer=False).read_text()
    assert "0.123456<" not in text and "≤ 0.123457<" in text and "target risk <b>0.123457</b>" in text
    assert "0.123456 " not in text


def _with_image_check(z_a: float, code_a: str | None = None) -> dict[str, Any]:
    """``triage_json`` with an image reference (z_max 5) and each case's ``image_z_max`` as ``run_triage`` writes it;
    case ``a`` (score 0.25, below the threshold) gets ``image_z_max`` ``z_a`` and keeps the decision written for 1.0."""
    from monai_unc.evaluation.triage.rule import ImageReference

    doc = triage_json()
    rule = dataclasses.replace(ReferralRule.from_json(doc["rule"]),
                               image_reference=ImageReference(("mean", "p99"), (0.0, 0.0), (1.0, 1.0), 10))
    decisions = rule.apply([0.25, 0.75, float("nan")], [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    for c, d in zip(doc["cases"], decisions):
        c.update(decision=d.decision, reason=d.reason, code=d.code, image_z_max=1.0)
    _case(doc, "a")["image_z_max"] = z_a
    if code_a is not None:  # a referred for its image although its z-score is within z_max; counts made to agree
        _case(doc, "a").update(decision="review", code=code_a, reason="image far from the calibration images")
        doc.update(n_accepted=0, n_review=3, accepted=[], review=["a", "b", "c"],
                   reasons={"image_statistics": 1, "above_threshold": 1, "undefined_score": 1})
    doc["rule"] = rule.to_json()
    return doc


def test_an_edited_image_z_score_that_contradicts_the_decision_is_refused(tmp_path):
    """Found by hostile testing: a case accepted with ``image_z_max`` edited to 9 (above the rule's z_max 5) was drawn
    "rule: accept" beside "image z 9.0", and a case referred for its image statistics with an ``image_z_max`` of 1.0
    was drawn as such; the rule refers exactly the cases whose image z-score exceeds z_max (ReferralRule.apply)."""
    _write(tmp_path, _with_image_check(1.0))
    build_triage_page(tmp_path, n_cases=0, viewer=False)  # as run_triage writes it
    _write(tmp_path, _with_image_check(9.0))
    with pytest.raises(ValueError, match=r"'cases\[0\]\.decision' of case 'a'.*image z 9\.0 > 5") as e:
        build_triage_page(tmp_path, n_cases=0, viewer=False)
    assert "\n" not in str(e.value)
    _write(tmp_path, _with_image_check(1.0, "image_statistics"))
    with pytest.raises(ValueError, match=r"'cases\[0\]\.code' of case 'a' is 'image_statistics'.*within"):
        build_triage_page(tmp_path, n_cases=0, viewer=False)
