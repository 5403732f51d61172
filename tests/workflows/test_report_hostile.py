"""Hostile outputs of ``monai-unc report`` (:mod:`monai_unc.workflows.report`): the report's overlays read the case
files the evaluation recorded (labels, predictions, maps), so its output may not lie inside their folders; an edited
``summary.json`` is one line naming the field."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    paths = write_toy_cohort(root / "data", n_cases=2, shape=(8, 8, 8))
    assert cli.main(["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "-o",
                     str(root / "ev"), "--no-spatial", "-q"]) == 0
    return {"root": root, "ev": root / "ev", **paths}


def _run(argv, capsys):
    rc = cli.main(argv)
    return rc, [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


@pytest.mark.parametrize("folder, sub", [("labels", ""), ("predictions", ""), ("labels", "qc/report")])
def test_report_refuses_an_output_inside_the_folders_of_the_evaluated_cases(ev, capsys, folder, sub):
    """Issue: ``monai-unc report -o <the evaluation's labels folder>`` wrote report.html, figures/ and assets/ among
    the label files that its own overlays read (only ``--images`` was checked)."""
    out = ev[folder] / sub if sub else ev[folder]
    before = _hashes(ev["root"] / "data")
    rc, err = _run(["report", "-e", str(ev["ev"]), "-o", str(out), "-q"], capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith("monai-unc report: error: "), (rc, err)
    assert "lies inside the input folder" in err[0] and str(ev[folder]) in err[0]
    assert _hashes(ev["root"] / "data") == before
    assert not (ev[folder] / "report.html").exists() and not (ev[folder] / "figures").exists()


@pytest.mark.parametrize("sub", ["state", "state/qc"])
def test_report_refuses_an_output_inside_the_evaluations_state_folder(ev, capsys, sub):
    """Found by review: ``report -o EVAL/state`` wrote report.html and figures/ among the records a resumed evaluate
    reads and replaces."""
    before = _hashes(ev["ev"] / "state")
    rc, err = _run(["report", "-e", str(ev["ev"]), "-o", str(ev["ev"] / sub), "--cases", "0", "-q"], capsys)
    assert rc == 2 and len(err) == 1 and "inside the evaluation's state folder" in err[0], (rc, err)
    assert _hashes(ev["ev"] / "state") == before and not (ev["ev"] / sub / "report.html").exists()


def test_report_beside_the_case_folders_still_works(ev, capsys):
    assert _run(["report", "-e", str(ev["ev"]), "-o", str(ev["root"] / "data"), "--cases", "0", "-q"],
                capsys)[0] == 0
    assert (ev["root"] / "data" / "report.html").is_file()


@pytest.mark.parametrize("field, value", [("n_bins", "15"), ("patch_size", None), ("min_bin_count", float("nan"))])
def test_report_with_an_edited_summary_is_one_line(ev, tmp_path, capsys, field, value):
    """Issue: ``"n_bins": "15"`` or ``"patch_size": null`` in ``summary.json`` made ``report --budget`` a traceback."""
    copy = tmp_path / "ev"
    shutil.copytree(ev["ev"], copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["config"][field] = value
    (copy / "summary.json").write_text(json.dumps(summary))
    rc, err = _run(["report", "-e", str(copy), "-o", str(tmp_path / "r"), "--budget", "0.3", "-q"], capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith("monai-unc report: error: "), (rc, err)
    assert field in err[0] or (value != value and "NaN" in err[0])  # NaN: refused as not strict JSON


def _edit(doc: dict, field: str, value) -> None:
    *parents, key = field.split(".")
    for p in parents:
        doc = doc[p]
    doc[key] = value


@pytest.mark.parametrize("field, value", [
    ("n_cases", [1]), ("n_cases", -1), ("n_cases", True), ("class_names", 7), ("class_names", [1, 2]),
    ("config.budget", "0.2"), ("triage", "x"), ("triage.budget", "0.2"), ("triage.n_referred", 99),
    ("triage.order", "toy000"), ("score", None), ("score.column", 3), ("failures.dice_threshold", "0.8"),
    ("dice", [0.5]), ("measure", 5), ("warnings", "one"), ("referral.area_normalized", "x"),
])
def test_report_with_an_edited_top_level_field_is_one_line(ev, tmp_path, capsys, field, value):
    """Issue: ``summary.json`` was read with plain ``json.loads`` and its fields not checked: ``"n_cases": [1]`` was a
    traceback in the page, ``"class_names": 7`` one in the overlays, ``"config": {"budget": "0.2"}`` was accepted."""
    copy = tmp_path / "ev"
    shutil.copytree(ev["ev"], copy)
    summary = json.loads((copy / "summary.json").read_text())
    _edit(summary, field, value)
    (copy / "summary.json").write_text(json.dumps(summary))
    rc, err = _run(["report", "-e", str(copy), "-o", str(tmp_path / "r"), "--cases", "1", "-q"], capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith("monai-unc report: error: "), (rc, err)
    assert str(copy / "summary.json") in err[0] and all(part in err[0] for part in field.split(".")), err[0]
    assert not (tmp_path / "r" / "report.html").exists()


@pytest.mark.parametrize("text", ['{"n_cases": NaN}', '{"n_cases": 1e400}', '[1, 2]'])
def test_report_with_a_summary_that_is_not_strict_json_is_one_line(ev, tmp_path, capsys, text):
    copy = tmp_path / "ev"
    shutil.copytree(ev["ev"], copy)
    (copy / "summary.json").write_text(text)
    rc, err = _run(["report", "-e", str(copy), "-o", str(tmp_path / "r"), "-q"], capsys)
    assert rc == 2 and len(err) == 1 and "summary.json" in err[0], (rc, err)


def test_report_with_an_extra_key_in_the_summary_still_works(ev, tmp_path, capsys):
    copy = tmp_path / "ev"
    shutil.copytree(ev["ev"], copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["written_by_a_newer_version"] = {"anything": [1, "x"]}
    (copy / "summary.json").write_text(json.dumps(summary))
    assert _run(["report", "-e", str(copy), "-o", str(tmp_path / "r"), "--cases", "1", "-q"], capsys)[0] == 0
    assert (tmp_path / "r" / "report.html").is_file()


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_report_refuses_images_that_are_no_folder_before_writing(ev, tmp_path, capsys, kind):
    """Issue (option sweep): ``report --images /missing`` failed with "folder not found: /missing", naming no option,
    after the report folder and its ``figures/`` were made."""
    images = tmp_path / "images"
    if kind == "file":
        images.write_text("")
    out = tmp_path / "rep"
    rc, err = _run(["report", "-e", str(ev["ev"]), "-o", str(out), "--images", str(images), "-q"], capsys)
    assert rc == 2 and len(err) == 1 and "--images folder" in err[0], (rc, err)
    assert not out.exists()
