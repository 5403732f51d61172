"""The numbers ``dicom-export`` writes into the SR are the ones of its inputs, never a guess (found by the sr review).

A ``triage.json`` is untrusted input (a file a user can edit): a case listed twice, or a score that is no number,
is refused in one line before any object rather than reported with a decision or a number it does not hold; so is
a referral rule that does not match its digest (edited after triage) or is missing: the SR states the digest as the
rule the decisions were made with.
"""

from __future__ import annotations

import json

import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io.dicom import report_numbers  # noqa: E402
from tests.io.dicom._series import dciodvfy_errors  # noqa: E402
from tests.workflows.test_dicom_export import RULE, SCORE, _small_cases, _sr_items, write_triage  # noqa: E402


def _export_with_triage(tmp_path, cases, rule=RULE, score=SCORE, csv_cases=None):
    pred, series = _small_cases(tmp_path)
    triage = write_triage(tmp_path / "triage", cases, rule, score, csv_cases)
    return main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "out"), "--triage",
                 str(triage), "-q"])


def test_a_case_listed_twice_in_triage_json_is_refused(tmp_path, capsys):
    # the last entry ("accept") was written into c0's SR without a word, hiding the first one's "review"
    rc = _export_with_triage(tmp_path, [{"case": "c0", "score": 0.9, "decision": "review"},
                                        {"case": "c0", "score": 0.1, "decision": "accept"},
                                        {"case": "c1", "score": 0.1, "decision": "accept"}])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "case 'c0' is listed twice" in err[0] and "triage.json" in err[0]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))


@pytest.mark.parametrize("score", [True, "0.25", [0.5], {"v": 1}])
def test_a_triage_score_that_is_no_number_is_refused(tmp_path, capsys, score):
    # true was written as the score 1.0: a made-up number
    rc = _export_with_triage(tmp_path, [{"case": "c0", "score": score, "decision": "accept"},
                                        {"case": "c1", "score": None, "decision": "review"}])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "case 'c0' has the score" in err[0] and "not a number or null" in err[0]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))


def test_a_bool_is_no_number_of_the_report():
    assert report_numbers({"case": "a", "flag": True, "dice": 0.5, "n": 3}) == {"dice": 0.5, "n": 3.0}


@pytest.mark.parametrize("rule, message", [
    ({**RULE, "target_risk": 0.5}, "field 'rule' does not match its digest"),  # edited, the old digest kept
    (None, "field 'rule' must hold the referral rule with its digest"),
    ({**RULE, "digest": "sha256:" + "cd" * 32}, "field 'rule' does not match its digest"),
])
def test_a_rule_that_is_not_its_digest_is_refused(tmp_path, capsys, rule, message):
    # the edited rule's old digest was written into the SR as the digest of the rule the decisions were made with
    rc = _export_with_triage(tmp_path, [{"case": "c0", "score": 0.5, "decision": "accept"}], rule=rule)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert message in err[0] and "triage.json" in err[0]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))


@pytest.mark.parametrize("score", ["variance_fg_mean", 0.5, None], ids=["other_column", "number", "absent"])
def test_the_sr_names_the_triage_score_after_the_rule(tmp_path, capsys, score):
    """The SR took the name of the triage score from the top-level ``score`` of triage.json without comparing it with
    the rule's ``rule.score``: edited to another column (the rule and its digest kept) the SR named one rule's score
    after another column, beside the rule's digest; a non-text value was named "triage score". A top-level score
    that is not the rule's column is refused in one line before any object; without one the rule's column names it."""
    rc = _export_with_triage(tmp_path, [{"case": "c0", "score": 0.25, "decision": "accept"},
                                        {"case": "c1", "score": 0.5, "decision": "review"}], score=score)
    err = capsys.readouterr().err.strip().splitlines()
    if score is not None:
        assert rc == 2 and len(err) == 1, err
        assert "triage.json: field 'score' is" in err[0] and repr(SCORE) in err[0] and "rule.score" in err[0]
        assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))
        return
    assert rc == 0, err
    ds = pydicom.dcmread(tmp_path / "out" / "c0" / "sr.dcm")
    assert ("triage", SCORE, 0.25) in _sr_items(ds)
    assert dciodvfy_errors(tmp_path / "out" / "c0" / "sr.dcm") == []


@pytest.mark.parametrize("cell", ["1_000", "0.9_5", "\u0661\u0662"])
def test_a_metrics_cell_that_only_python_reads_as_a_number_is_refused(tmp_path, capsys, cell):
    """A metrics.csv cell ``1_000`` (a number edited by hand) went into the SR as 1000, ``0.9_5`` as 0.95 and
    Arabic-Indic digits as 12: Python's float reads them, CSV and JSON do not write them. Refused in one line naming
    the file, the line, the case and the column, before any object; text cells stay out of the SR as before."""
    from monai_unc.io import write_csv

    with pytest.raises(ValueError, match="column 'volume_ml'"):
        report_numbers({"case": "a", "volume_ml": cell})
    assert report_numbers({"case": "a", "note": "1.5x1x2", "dice": "0.5", "n": " 7 "}) == {"dice": 0.5, "n": 7.0}
    pred, series = _small_cases(tmp_path, ("c0",))
    evaluation = tmp_path / "evaluation"
    evaluation.mkdir()
    write_csv(evaluation / "metrics.csv", [{"case": "c0", "dice": 0.75, "volume_ml": cell}])
    rc = main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "out"), "--evaluation",
               str(evaluation), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "metrics.csv: line 2: case 'c0': column 'volume_ml'" in err[0] and repr(cell) in err[0], err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))
    write_csv(evaluation / "metrics.csv", [{"case": "c0", "dice": 0.75, "volume_ml": "1000"}])
    assert main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "out"), "--evaluation",
                 str(evaluation), "-q"]) == 0
    items = _sr_items(pydicom.dcmread(tmp_path / "out" / "c0" / "sr.dcm"))
    assert ("case scores", "volume_ml", 1000.0) in items and ("case scores", "dice", 0.75) in items
    assert dciodvfy_errors(tmp_path / "out" / "c0" / "sr.dcm") == []


@pytest.mark.parametrize("reason", ["score\t0.5", "a\x00b", "a\x7fb", "a\x01b"], ids=["tab", "nul", "del", "soh"])
def test_a_triage_reason_a_dicom_text_cannot_hold_is_refused(tmp_path, capsys, reason):
    """A reason of triage.json with a tab (or another control character but CR, LF, FF and ESC) went into the SR's
    TEXT item and made an SR that dciodvfy reports invalid (a character invalid for UT). Refused in one line naming
    the file, the case and the field, before any object; line ends stay (a valid UT)."""
    from monai_unc.io.dicom import check_report_text

    with pytest.raises(ValueError, match="reason holds the control character"):
        check_report_text(reason, "reason")
    rc = _export_with_triage(tmp_path, [{"case": "c0", "score": 0.25, "decision": "accept", "reason": reason},
                                        {"case": "c1", "score": 0.5, "decision": "review"}])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "triage.json: case 'c0': field 'reason' holds the control character" in err[0], err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))


def test_a_triage_reason_with_line_ends_makes_a_valid_sr(tmp_path, capsys):
    rc = _export_with_triage(tmp_path, [{"case": "c0", "score": 0.25, "decision": "accept",
                                         "reason": "score 0.25\r\nbelow the threshold\x0c\x1b"},
                                        {"case": "c1", "score": 0.5, "decision": "review"}])
    assert rc == 0, capsys.readouterr().err
    assert dciodvfy_errors(tmp_path / "out" / "c0" / "sr.dcm") == []


@pytest.mark.parametrize("text, message", [
    ('"score": NaN', "NaN"), ('"score": Infinity', "Infinity"), ('"score": 1e400', "out of range"),
    ('"decision": "review", "decision": "accept"', "'decision' is given twice"),
], ids=["nan", "infinity", "overflow", "key_twice"])
def test_triage_json_is_read_as_strict_json(tmp_path, capsys, text, message):
    """triage.json was read by Python's json: ``NaN``, ``Infinity`` and ``1e400`` (no JSON numbers) were taken as
    scores, and the SR of such a case held no score without a word; a key given twice ("review", then "accept") gave
    its last value to the SR. It is read as strict JSON as the monitoring store reads it: refused in one line."""
    pred, series = _small_cases(tmp_path)
    triage = tmp_path / "triage"
    triage.mkdir()
    entry = '{"case": "c0", ' + text + (', "decision": "review"' if "decision" not in text else ', "score": 0.5') + "}"
    doc = json.dumps({"score": SCORE, "rule": RULE, "cases": []}).replace('"cases": []', f'"cases": [{entry}]')
    (triage / "triage.json").write_text(doc)
    rc = main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "out"), "--triage",
               str(triage), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "triage.json" in err[0] and message in err[0], err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))


def test_an_accept_without_a_score_is_refused(tmp_path, capsys):
    """A referral rule refers every case whose score is undefined (``ReferralRule.apply``); a triage.json entry
    accepted with the score null (edited from "review") went into the SR as the rule's decision beside its digest."""
    from monai_unc.evaluation.triage.rule import ReferralRule

    rule = ReferralRule("predictive_entropy_fg_mean", 0.3, True, 0.1, 0.1, "sgr", "failure", 0.8, (0.1, 0.2, 0.3, 0.4),
                        ("a", "b", "c", "d"))
    assert rule.apply([float("nan")])[0].decision == "review"  # the premise
    rc = _export_with_triage(tmp_path, [{"case": "c0", "score": None, "decision": "accept"},
                                        {"case": "c1", "score": None, "decision": "review"}])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "case 'c0' is accepted without a score" in err[0] and "triage.json" in err[0], err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))
