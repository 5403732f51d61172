"""Hostile review 59 of the DICOM objects: defects found and their regressions."""

from __future__ import annotations

import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from tests.workflows.test_dicom_content_sr import _export_with_triage  # noqa: E402

#: c0 as triage writes it; c1, also exported, is not in triage.json
ONLY_C0 = [{"case": "c0", "score": 0.25, "decision": "accept", "code": "accepted", "reason": "score 0.25 <= 0.3"}]


def test_a_case_that_triage_json_lacks_is_refused(tmp_path, capsys):
    """``--triage`` of a triage run without case c1 (predicted after the triage): c1's SR was written without any
    triage decision, exit 0 and no word, so that a reader of the SRs could not tell a case never triaged from one
    whose decision was left out; now refused in one line naming the case, before any object."""
    rc = _export_with_triage(tmp_path, ONLY_C0)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert len(err) == 1 and "triage.json has no decision for 1 case(s) exported (c1)" in err[0], err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))


@pytest.mark.parametrize("field, settings", [
    ("settings.weights[1].sha256", {"weights": [{"sha256": "ab" * 32}, {"sha256": "ab\tcd" + "0" * 60}]}),
    ("settings.weights[0].sha256", {"weights": [{"sha256": "ab\\cd" + "0" * 60}]}),
    ("settings.method", {"method": "mcdropout\ttta"}),
    ("settings.model", {"model": "net\x01"}),
])
def test_a_recorded_text_a_dicom_text_cannot_hold_is_refused(tmp_path, capsys, field, settings):
    """``infer.json`` is untrusted: a weight digest or method with a tab (a control character) was written into the
    SEG's DeviceSerialNumber and AlgorithmParameters, the Parametric Map's DeviceSerialNumber and the SR's TEXT items,
    exit 0, objects that ``dciodvfy`` reports invalid; a backslash (the value separator) failed with highdicom's
    line naming no file. Now refused in one line naming the record and the field, before any object."""
    import json

    from monai_unc.cli import main
    from tests.workflows.test_dicom_export import _small_cases

    pred, series = _small_cases(tmp_path)
    (pred / "infer.json").write_text(json.dumps({"settings": {"model": "net", **settings}}))
    rc = main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert f"infer.json: field '{field}'" in err[0] and "control character" in err[0], err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.dcm"))


def test_a_case_the_evaluation_lacks_is_said(tmp_path, capsys):
    """``--evaluation`` without a row for c1 (no label): c1's SR held none of its numbers without a word; a warning
    names the case (not refused: a case without a label is a reason to have no row)."""
    from monai_unc.cli import main
    from monai_unc.io import write_csv
    from tests.workflows.test_dicom_export import _small_cases

    pred, series = _small_cases(tmp_path)
    evaluation = tmp_path / "evaluation"
    evaluation.mkdir()
    write_csv(evaluation / "metrics.csv", [{"case": "c0", "dice": 0.75}])
    rc = main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(tmp_path / "out"), "--evaluation",
               str(evaluation), "-q"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "--evaluation" in err and "no row for 1 case(s) exported (c1)" in err, err
    assert len(list((tmp_path / "out").rglob("*.dcm"))) > 0


def test_the_report_follows_the_last_map_in_series_numbers(tmp_path, monkeypatch):
    """The maps are numbered from 903 and the SR was always 999: with 97 or more maps (a region model with every
    measure) a map had the report's SeriesNumber. Imitated with the maps numbered from 999."""
    from monai_unc.workflows import dicom

    monkeypatch.setattr(dicom, "_MAP_NUMBER", 999)
    from tests.workflows.test_dicom_export import _small_cases

    pred, series = _small_cases(tmp_path, ("c0",))
    dicom.dicom_export(pred, series, tmp_path / "out", progress=False)
    numbers = {p.name: int(pydicom.dcmread(p, stop_before_pixels=True).SeriesNumber)
               for p in (tmp_path / "out" / "c0").glob("*.dcm")}
    assert numbers["variance.dcm"] == 999 and numbers["sr.dcm"] == 1000, numbers
    assert len(set(numbers.values())) == len(numbers)
