"""Validation study 9 (docs/validation/study9_calibrated_training.py, calibration losses): the ``--tiny`` run of both
tasks (MNI152 and toy) writes its JSON and table, resumes from its run files, and the committed tables are rendered
from the committed JSON."""

from __future__ import annotations

import json
import math

import pytest

from tests._paths import ROOT
from tests.validation._studies import load_study

RESULTS = ROOT / "docs" / "validation" / "results"


def _load():
    return load_study("study9_calibrated_training")


def _check(res, study):
    for loss, row in res["table"].items():
        assert loss in study.LOSSES
        for m in study.METRICS:
            assert math.isfinite(row[m][0]) and row[m][1] >= 0, (loss, m)
        assert 0 <= row["dice"][0] <= 1 and 0 <= row["ece"][0] <= 1 and row["t"][0] > 0


@pytest.mark.slow
def test_study9_tiny_runs_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    study = _load()
    argv = ["--tiny", "--quiet", "--output", str(tmp_path), "--losses", "dice_ce", "dice_ce_mbls"]
    res = study.main(argv)
    assert set(res) == {"mni152", "toy"}
    for task in res.values():
        _check(task, study)
    md = (tmp_path / "study9.md").read_text()
    assert md.startswith("## Calibrated training\n") and "## Calibrated training: toy task" in md
    assert md.count("Dice + CE + MbLS |") == 2
    assert json.loads((tmp_path / "study9_toy.json").read_text())["config"]["task"] == "toy"
    runs = sorted((tmp_path / "study9_runs").glob("*/*.json"))
    assert [p.relative_to(tmp_path / "study9_runs").as_posix() for p in runs] == [
        "mni152/dice_ce_mbls_seed0.json", "mni152/dice_ce_seed0.json", "toy/dice_ce_mbls_seed0.json",
        "toy/dice_ce_seed0.json"]
    stamps = [p.stat().st_mtime_ns for p in runs]
    tables = {k: json.loads(json.dumps(v["table"])) for k, v in res.items()}
    again = study.main(argv)  # resumed: nothing recomputed
    assert {k: json.loads(json.dumps(v["table"])) for k, v in again.items()} == tables
    assert [p.stat().st_mtime_ns for p in runs] == stamps
    rendered = study.main(["--render-only", "--output", str(tmp_path)])
    assert {k: v["table"] for k, v in rendered.items()} == tables
    assert (tmp_path / "study9.md").read_text() == md
    # other settings: the toy networks are computed again, the MNI152 ones are kept
    study.main([*argv, "--task", "toy", "--toy-iterations", "3"])
    assert [p.stat().st_mtime_ns for p in runs][:2] == stamps[:2]
    assert all(a != b for a, b in zip([p.stat().st_mtime_ns for p in runs][2:], stamps[2:]))
    assert json.loads(runs[2].read_text())["settings"]["iterations"] == 3


def test_render_only_without_results_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="no study 9 results"):
        _load().main(["--render-only", "--output", str(tmp_path)])


def test_bad_arguments_are_refused():
    study = _load()
    for argv in (["--iterations", "0"], ["--toy-iterations", "0"], ["--cases", "1"], ["--losses", "focal"],
                 ["--task", "brats"]):
        with pytest.raises(SystemExit):
            study.parse_args(argv)


def test_committed_results_match_the_page():
    study = _load()
    results = {"mni152": json.loads((RESULTS / "study9.json").read_text())}
    if (RESULTS / "study9_toy.json").is_file():
        results["toy"] = json.loads((RESULTS / "study9_toy.json").read_text())
    for res in results.values():
        assert set(res["table"]) == set(study.LOSSES) and len(res["config"]["seeds"]) >= 1
        _check(res, study)
    assert (RESULTS / "study9.md").read_text() == study.render_markdown(results)
