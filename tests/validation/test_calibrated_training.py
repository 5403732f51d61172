"""Validation study 9 (docs/validation/study9_calibrated_training.py, calibration losses): the ``--tiny`` run writes
its JSON and table, resumes from its run files, and the committed table is rendered from the committed JSON."""

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
    _check(res, study)
    md = (tmp_path / "study9.md").read_text()
    assert md.startswith("## Calibrated training") and "Dice + CE + MbLS" in md
    runs = sorted((tmp_path / "study9_runs").glob("*.json"))
    assert [p.name for p in runs] == ["dice_ce_mbls_seed0.json", "dice_ce_seed0.json"]
    stamps = [p.stat().st_mtime_ns for p in runs]
    table = json.loads(json.dumps(res["table"]))
    assert json.loads(json.dumps(study.main(argv)["table"])) == table  # resumed: nothing recomputed
    assert [p.stat().st_mtime_ns for p in runs] == stamps
    assert study.main(["--render-only", "--output", str(tmp_path)])["table"] == table
    assert (tmp_path / "study9.md").read_text() == md


def test_bad_arguments_are_refused():
    study = _load()
    for argv in (["--iterations", "0"], ["--cases", "1"], ["--losses", "focal"]):
        with pytest.raises(SystemExit):
            study.parse_args(argv)


def test_committed_results_match_the_page():
    study = _load()
    res = json.loads((RESULTS / "study9.json").read_text())
    assert set(res["table"]) == set(study.LOSSES) and len(res["config"]["seeds"]) == 3
    _check(res, study)
    assert (RESULTS / "study9.md").read_text() == study.render_markdown(res)
