"""``dicom-export --triage`` states only decisions the rule of ``triage.json`` could have made (found by the triagesr
review).

The SR states each case's triage decision beside the rule's digest, as the rule's. ``triage.json`` is a file a user
may edit: a ``review`` edited to ``accept`` for a case whose score is above the rule's threshold, or a score changed,
was written into the SR as if the rule had made it. The decisions are derived again from the recorded scores (and
image z-scores) and the rule (``ReferralRule.apply`` is the reference), and ``triage.csv``, where triage writes each
score, decision and code a second time, must agree; a difference is refused in one line naming the case, before any
object is written. A review the rule did make for another reason (the image check) passes.
"""

from __future__ import annotations

import dataclasses

import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.evaluation.triage.rule import ImageReference, ReferralRule  # noqa: E402
from monai_unc.io import json_safe  # noqa: E402
from tests.workflows.test_dicom_content_sr import _export_with_triage  # noqa: E402
from tests.workflows.test_dicom_export import RULE, SCORE, _small_cases, _sr_items, write_triage  # noqa: E402

#: the rule of RULE (threshold 0.3, calibration range [0.05, 0.6]); 0.25 is accepted, 0.5 referred
APPLIED = ReferralRule.from_json(RULE)
#: as triage writes them: c0 accepted, c1 above the threshold
CASES = [{"case": "c0", "score": 0.25, "decision": "accept", "code": "accepted", "reason": "score 0.25 <= 0.3"},
         {"case": "c1", "score": 0.5, "decision": "review", "code": "above_threshold", "reason": "score 0.5 > 0.3"}]


def _refused(tmp_path, capsys, cases, **kwargs) -> str:
    rc = _export_with_triage(tmp_path, cases, **kwargs)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))
    return err[0]


def _edit(case: str, **fields) -> list[dict]:
    return [{**c, **fields} if c["case"] == case else dict(c) for c in CASES]


def test_the_cases_as_triage_writes_them_are_exported(tmp_path, capsys):
    assert [d.code for d in APPLIED.apply([0.25, 0.5])] == ["accepted", "above_threshold"]  # the premise
    assert _export_with_triage(tmp_path, CASES) == 0, capsys.readouterr().err
    for case, decision, score in (("c0", "accept", 0.25), ("c1", "review", 0.5)):
        items = _sr_items(pydicom.dcmread(tmp_path / "out" / case / "sr.dcm"))
        assert ("triage", "Triage decision", decision) in items and ("triage", SCORE, score) in items


def test_an_accept_above_the_threshold_is_refused(tmp_path, capsys):
    """c1 edited from review to accept (its code too, and triage.csv alike): the rule refers a score of 0.5."""
    edited = _edit("c1", decision="accept", code="accepted", reason="ok")
    err = _refused(tmp_path, capsys, edited)
    assert "triage.json: field 'cases[1].decision' of case 'c1' must be the rule's decision for its score 0.5 " \
           "(review: above_threshold), got 'accept' (accepted)" in err, err


def test_a_review_of_a_case_the_rule_accepts_is_refused(tmp_path, capsys):
    """c0 edited from accept to review without a reason the rule gives (no image check ran)."""
    err = _refused(tmp_path, capsys, _edit("c0", decision="review", code="above_threshold"))
    assert "case 'c0' must be the rule's decision for its score 0.25 (accept: accepted)" in err, err
    err = _refused(tmp_path / "b", capsys, _edit("c0", decision="review", code="image_statistics"))
    assert "case 'c0' is 'image_statistics' but the rule holds no image reference" in err, err


@pytest.mark.parametrize("where", ["json", "both"])
def test_a_changed_score_is_refused(tmp_path, capsys, where):
    """c0's score changed: in triage.json only (the decision still the rule's) it differs from triage.csv; in both
    files to 0.4 (above the threshold) the accept is no longer the rule's."""
    if where == "json":
        err = _refused(tmp_path, capsys, _edit("c0", score=0.2), csv_cases=CASES)
        assert "triage.csv: line 2: case 'c0' has the score 0.25 (triage.json: 0.2)" in err, err
    else:
        err = _refused(tmp_path, capsys, _edit("c0", score=0.4))
        assert "case 'c0' must be the rule's decision for its score 0.4 (review: above_threshold)" in err, err


def test_a_decision_edited_in_one_file_is_refused(tmp_path, capsys):
    csv_cases = [{**CASES[0], "decision": "review", "code": "image_statistics"}, CASES[1]]
    err = _refused(tmp_path, capsys, CASES, csv_cases=csv_cases)
    assert "triage.csv: line 2: case 'c0' has the decision 'review' (triage.json: 'accept') and the code " \
           "'image_statistics' (triage.json: 'accepted')" in err, err


def test_triage_csv_must_hold_the_cases_of_triage_json(tmp_path, capsys):
    err = _refused(tmp_path, capsys, CASES, csv_cases=CASES[:1])
    assert "triage.csv: case(s) ['c1'] of triage.json are not in triage.csv" in err, err
    err = _refused(tmp_path / "b", capsys, CASES, csv_cases=[*CASES, {**CASES[0], "case": "c9"}])
    assert "triage.csv: line 4: case 'c9' is not in triage.json" in err, err
    pred, series = _small_cases(tmp_path / "c")
    triage = write_triage(tmp_path / "c" / "triage", CASES)
    (triage / "triage.csv").unlink()
    rc = main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "c" / "out"), "--triage",
               str(triage), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "triage.csv: no such file" in err[0], err


def test_a_review_for_the_image_check_passes_and_its_z_score_must_exceed_z_max(tmp_path, capsys):
    """A score the threshold accepts, referred because the image is far from the calibration images: legitimate
    when its recorded z-score exceeds the rule's z_max (5), refused when it does not."""
    rule = dataclasses.replace(APPLIED, image_reference=ImageReference(("mean", "p99"), (0.0, 0.0), (1.0, 1.0), 10))
    truth = rule.apply([0.25], [[7.0, 1.0]])[0]
    assert truth.code == "image_statistics"  # the premise: the rule refers it for its image
    cases = [{"case": "c0", "score": 0.25, "decision": "review", "code": truth.code, "reason": truth.reason,
              "image_z_max": 7.0},
             {**CASES[1], "image_z_max": 1.0}]
    rule_json = json_safe(rule.to_json())
    rc, err = _export_with_triage(tmp_path, cases, rule=rule_json), capsys.readouterr().err
    assert rc == 0, err  # (a warning that this hand-made folder records no inputs)
    items = _sr_items(pydicom.dcmread(tmp_path / "out" / "c0" / "sr.dcm"))
    assert ("triage", "Triage decision", "review") in items
    err = _refused(tmp_path / "b", capsys, [{**cases[0], "image_z_max": 2.0}, cases[1]], rule=rule_json)
    assert "case 'c0' is 'image_statistics' but its field 'image_z_max' 2.0 is within the rule's z_max 5" in err, err


def test_a_triage_folder_as_triage_writes_it_is_exported_and_an_edit_of_it_refused(tmp_path, capsys):
    """End to end: ``triage`` of new cases (with the image check) and ``dicom-export --triage`` of its folder: every
    decision passes and reaches the SR; the same folder with one decision edited in both files is refused."""
    import json
    import shutil
    import warnings

    import nibabel as nib
    import numpy as np

    from monai_unc.data.cohorts import write_toy_cohort
    from monai_unc.io import read_csv, write_csv
    from monai_unc.io.dicom import write_series
    from tests.evaluation.test_triage import _stamp_infer_records

    a = write_toy_cohort(tmp_path / "A", n_cases=8, shape=(16, 16, 16), seed=1)
    b = write_toy_cohort(tmp_path / "B", n_cases=3, shape=(16, 16, 16), seed=2)
    for d in (a, b):
        _stamp_infer_records(d["predictions"])
    series = tmp_path / "series"
    for path in sorted(b["images"].glob("*.nii.gz")):  # the images as CT series on the predictions' grid
        img = nib.load(path)
        write_series(np.round(np.asarray(img.dataobj, dtype=np.float64) * 100), img.affine,
                     series / path.name[: -len(".nii.gz")], modality="CT")
    triage = tmp_path / "triage"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(tmp_path / "ev"),
                     "--images", str(a["images"]), "--no-spatial", "--target-risk", "0.4", "--delta", "0.2",
                     "-q"]) == 0
        assert main(["triage", "-p", str(b["predictions"]), "--rule", str(tmp_path / "ev" / "referral_rule.json"),
                     "--images", str(series), "-o", str(triage), "-q"]) == 0
    doc = json.loads((triage / "triage.json").read_text())
    export = ["dicom-export", "-p", str(b["predictions"]), "-s", str(series), "--triage", str(triage), "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rc = main([*export, "-o", str(tmp_path / "out")])
    assert rc == 0, capsys.readouterr().err
    for c in doc["cases"]:
        items = _sr_items(pydicom.dcmread(tmp_path / "out" / c["case"] / "sr.dcm"))
        assert ("triage", "Triage decision", c["decision"]) in items
    # one decision flipped in both files (its code and the counts too): not a decision of the rule
    edited = tmp_path / "edited"
    shutil.copytree(triage, edited)
    c = doc["cases"][0]
    flip = {"decision": "review", "code": "above_threshold"} if c["decision"] == "accept" else \
        {"decision": "accept", "code": "accepted"}
    c.update(flip)
    (edited / "triage.json").write_text(json.dumps(doc))
    rows = read_csv(edited / "triage.csv")
    for r in rows:
        if r["case"] == c["case"]:
            r.update(flip)
    write_csv(edited / "triage.csv", rows)
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rc = main(["dicom-export", "-p", str(b["predictions"]), "-s", str(series), "--triage", str(edited), "-q",
                   "-o", str(tmp_path / "out2")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert f"field 'cases[0].decision' of case {c['case']!r} must be the rule's decision" in err[0], err
