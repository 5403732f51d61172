"""``monai-unc evaluate --regions ... --qu-brats-grid numpy1``: the QU-BraTS grid of the 2020 challenge in an
evaluation.

The QU-BraTS columns equal :func:`monai_unc.metrics.qu_brats` with ``grid="numpy1"`` on the files; the grid is
recorded in ``summary.json`` (``qu_brats.grid``, and ``config.qu_brats_grid`` when not the default) and in the
per-case resume fingerprint, so that a rerun into the same folder with another grid evaluates every case again
and its outputs equal those of a fresh folder (never rows of both grids).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.cli import main
from monai_unc.evaluation import EvaluationConfig, case_fingerprint, load_evaluation, run_evaluate, summarize
from monai_unc.evaluation.cohort import resummarize
from monai_unc.io import match_cases
from monai_unc.metrics import QU_BRATS_GRIDS, qu_brats
from tests.evaluation.test_evaluate_regions import BRATS, _load, _regions, write_region_cohort


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> dict[str, Path]:
    return write_region_cohort(tmp_path_factory.mktemp("regions_grid"), n_cases=3)


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open() as f:
        return {r["case"]: r for r in csv.DictReader(f)}


def _evaluate(cohort, out, grid=None, **kw):
    config = EvaluationConfig(regions="brats", spatial=False, **({} if grid is None else {"qu_brats_grid": grid}),
                              **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return run_evaluate(cohort["labels"], cohort["pred"], out, config, images=cohort["images"])


def _qu_brats_columns(path: Path) -> dict[str, dict[str, str]]:
    return {c: {k: v for k, v in r.items() if k.startswith("qu_brats")} for c, r in _rows(path).items()}


# ------------------------------------------------------------------------------------------------ config
def test_config_checks_the_grid():
    config = EvaluationConfig(regions="brats", qu_brats_grid="numpy1")
    config.validate()
    assert config.qu_brats_grid == "numpy1" and config.to_json()["qu_brats_grid"] == "numpy1"
    plain = EvaluationConfig(regions="brats")
    plain.validate()
    assert plain.qu_brats_grid == "numpy2" and "qu_brats_grid" not in plain.to_json()  # earlier summaries unchanged
    with pytest.raises(ValueError, match=r"qu_brats_grid must be one of \('numpy2', 'numpy1'\), got 'numpy3'"):
        EvaluationConfig(regions="brats", qu_brats_grid="numpy3").validate()
    with pytest.raises(TypeError, match="qu_brats_grid must be a string"):
        EvaluationConfig(regions="brats", qu_brats_grid=1).validate()
    with pytest.raises(ValueError, match="qu_brats_grid='numpy1' applies only with regions"):
        EvaluationConfig(qu_brats_grid="numpy1").validate()
    EvaluationConfig(qu_brats_grid="numpy2").validate()  # the default needs no regions


def test_the_grid_enters_the_fingerprint_only_when_set(cohort):
    files = match_cases(cohort["labels"], cohort["pred"], images=cohort["images"])[0]
    configs = {}
    for grid in (None, *QU_BRATS_GRIDS):
        configs[grid] = EvaluationConfig(regions="brats", **({} if grid is None else {"qu_brats_grid": grid}))
        configs[grid].validate()
    default = case_fingerprint(files, configs[None])
    assert "qu_brats_grid" not in default["config"]  # the fingerprints of earlier runs stay valid
    assert case_fingerprint(files, configs["numpy2"]) == default
    numpy1 = case_fingerprint(files, configs["numpy1"])
    assert numpy1 != default and numpy1["config"]["qu_brats_grid"] == "numpy1"


# ------------------------------------------------------------------------------------------------ evaluate
def test_numpy1_columns_equal_qu_brats_on_the_files(cohort, tmp_path):
    state, summary, paths = _evaluate(cohort, tmp_path / "e1", "numpy1")
    log2 = math.log(2)
    for cid, row in _rows(paths["metrics"]).items():
        target = _regions(_load(cohort["labels"], cid, "").astype(int))
        masks = np.moveaxis(_load(cohort["pred"], cid, "_seg"), -1, 0) > 0.5
        pe = np.moveaxis(_load(cohort["pred"], cid, "_predictive_entropy"), -1, 0)
        brain = _load(cohort["images"], cid, "") > 0
        scores = []
        for r, name in enumerate(BRATS):
            res = qu_brats(np.clip(pe[r] / log2 * 100, 0, 100), masks[r], target[r], brain_mask=brain, grid="numpy1")
            scores.append(res.score)
            assert float(row[f"qu_brats_score_{name}"]) == pytest.approx(res.score, abs=1e-9)
            assert float(row[f"qu_brats_dice_auc_{name}"]) == pytest.approx(res.dice_auc, abs=1e-9)
            np.testing.assert_allclose(state.curves[cid]["regions"][name]["dice"], res.dice, atol=1e-12)
        assert float(row["qu_brats_score"]) == pytest.approx(np.mean(scores), abs=1e-9)
        assert state.curves[cid]["grid"] == "numpy1" and len(state.curves[cid]["thresholds"]) == 41
    qb = summary["qu_brats"]
    assert qb["grid"] == "numpy1" and len(qb["curves"]["thresholds"]) == 41 and qb["curves"]["thresholds"][0] == 100
    saved = json.loads(paths["summary"].read_text())
    assert saved["config"]["qu_brats_grid"] == "numpy1" and saved["qu_brats"]["grid"] == "numpy1"
    # the report's summary again (monai-unc report): the grid read back from summary.json
    state2, saved2 = load_evaluation(tmp_path / "e1")
    assert resummarize(state2, saved2)["qu_brats"] == qb


def test_default_summary_names_its_grid(cohort, tmp_path):
    _, summary, paths = _evaluate(cohort, tmp_path / "e2")
    assert summary["qu_brats"]["grid"] == "numpy2" and len(summary["qu_brats"]["curves"]["thresholds"]) == 40
    assert "qu_brats_grid" not in json.loads(paths["summary"].read_text())["config"]


def test_reruns_with_another_grid_never_mix(cohort, tmp_path):
    """One folder, grid changed between runs: every case is evaluated again; the outputs equal a fresh folder's."""
    fresh = {g: _qu_brats_columns(_evaluate(cohort, tmp_path / f"fresh_{g}", g)[2]["metrics"]) for g in QU_BRATS_GRIDS}
    assert fresh["numpy1"] != fresh["numpy2"]
    out = tmp_path / "same"
    for grid in ("numpy2", "numpy1", "numpy1", "numpy2"):
        _, summary, paths = _evaluate(cohort, out, grid)
        assert _qu_brats_columns(paths["metrics"]) == fresh[grid], grid
        assert summary["qu_brats"]["grid"] == grid
        assert len(summary["qu_brats"]["curves"]["thresholds"]) == (41 if grid == "numpy1" else 40)
        states = [json.loads(p.read_text()) for p in sorted((out / "state" / "cases").glob("*.json"))]
        assert len(states) == 3
        assert all(s["fingerprint"]["config"].get("qu_brats_grid", "numpy2") == grid for s in states), grid


def test_summary_refuses_curves_of_two_grids(cohort, tmp_path):
    state, _, _ = _evaluate(cohort, tmp_path / "mixed", "numpy1")
    first = sorted(state.curves)[0]
    state.curves[first] = {**state.curves[first], "grid": "numpy2"}
    config = EvaluationConfig(regions="brats", spatial=False, qu_brats_grid="numpy1")
    config.validate()
    with pytest.raises(ValueError, match="different threshold grids"):
        summarize(state, config)


# ------------------------------------------------------------------------------------------------ command line
def test_cli_option(cohort, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["pred"]), "-o", str(out), "--regions", "brats",
            "--images", str(cohort["images"]), "--no-spatial", "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main([*argv, "--qu-brats-grid", "numpy1"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["qu_brats_grid"] == "numpy1" and summary["qu_brats"]["grid"] == "numpy1"
    assert _qu_brats_columns(out / "metrics.csv") == _qu_brats_columns(
        _evaluate(cohort, tmp_path / "py", "numpy1")[2]["metrics"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:  # argparse's refusal of a value outside the choices
        main([*argv, "--qu-brats-grid", "numpy3"])
    assert exited.value.code == 2
    assert "--qu-brats-grid" in capsys.readouterr().err
    # the default, and the choices are the metric's grids
    parser, _ = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices["evaluate"]._actions if "--qu-brats-grid" in a.option_strings)
    assert tuple(action.choices) == QU_BRATS_GRIDS and action.default == "numpy2"
    # without --regions a non-default grid is one error line
    assert main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["pred"]), "-o", str(tmp_path / "nr"),
                 "--qu-brats-grid", "numpy1", "-q"]) == 2
    assert "applies only with regions" in capsys.readouterr().err
