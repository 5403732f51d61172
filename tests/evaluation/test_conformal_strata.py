"""Conformal masks from the command line, part 2: strata of a label-free case score (``evaluate --conformal-strata``),
the probabilities checked before any work, and the outer mask grown to contain the inner one
(monai_unc.evaluation.conformal)."""

from __future__ import annotations

import csv
import json
import shutil
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.conformal import (
    CONFORMAL_RULE_FILE,
    ConformalRuleFile,
    check_conformal_probabilities,
    nest_masks,
    run_conformal,
)
from monai_unc.io import load_case, match_cases
from monai_unc.metrics.conformal import (
    ConformalRule,
    ConformalTaskRule,
    conformal_case_state,
    fit_conformal_rule,
    quantile_edges,
    stratum_of,
)
from monai_unc.products import ConformalMasks

SCORE = "predictive_entropy_mean"  # the triage score of the fixture (--score): defined for empty predictions too


def _quiet(argv: list[str]) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the toy predictions carry no record of how they were made
        return cli.main(argv)


def _one_line_exit_2(capsys, argv: list[str], *words: str) -> str:
    capsys.readouterr()
    assert _quiet(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


def _metrics(folder: Path) -> dict[str, dict[str, str]]:
    return {r["case"]: r for r in csv.DictReader((folder / "metrics.csv").open())}


def _nothing_written(out: Path) -> None:
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()], sorted(out.rglob("*"))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """Nine labelled toy cases (stand-in predictions with probabilities and predictive-entropy maps), evaluated with
    an outer mask in three strata of the triage score (terciles; no --conformal-stratify-by), and three new cases."""
    root = tmp_path_factory.mktemp("strata")
    a = write_toy_cohort(root / "A", n_cases=9, shape=(12, 12, 12), seed=3)
    b = write_toy_cohort(root / "B", n_cases=3, shape=(12, 12, 12), seed=4)
    ev = root / "ev"
    argv = ["evaluate", "-l", str(a["labels"]), "-p", str(a["predictions"]), "-o", str(ev), "--no-spatial", "-q",
            "--conformal", "outer:fnr=0.3", "--conformal-strata", "3", "--score", SCORE]
    assert _quiet(argv) == 0
    return {"root": root, "A": a, "B": b, "eval": ev, "rule": ev / CONFORMAL_RULE_FILE}


def test_strata_are_terciles_of_the_score_and_each_is_fitted_alone(toy):
    doc = ConformalRuleFile.load(toy["rule"])
    strata = doc.strata
    assert strata is not None and strata.score == SCORE and strata.method == "quantiles"
    assert (strata.measure, strata.aggregation, strata.region, strata.map_source) == (
        "predictive_entropy", "mean", None, "file")
    rows = _metrics(toy["eval"])
    ids = sorted(rows)
    scores = np.array([float(rows[c][SCORE]) for c in ids])
    assert strata.edges == quantile_edges(scores, 3) and strata.counts == (3, 3, 3)
    of = stratum_of(scores, strata.edges)
    rule = doc.rules["outer"]
    assert rule.edges == strata.edges and rule.num_strata == 3
    states = {f.case_id: conformal_case_state(load_case(f).probs, load_case(f).label)
              for f in match_cases(toy["A"]["labels"], toy["A"]["predictions"])}
    for s in range(3):
        alone = fit_conformal_rule([states[c] for c, k in zip(ids, of) if k == s], 0.3)
        for name in rule.names:
            assert rule.lambda_hat(name, s) == alone.lambda_hat(name)
            assert rule.task_rule(name, s).n == 3
    block = json.loads((toy["eval"] / "summary.json").read_text())["conformal"]
    assert block["strata"]["edges"] == list(strata.edges)
    side = block["sides"]["outer"]
    assert f"within each stratum of {SCORE}" in side["guarantee"]
    assert [p["n"] for p in side["per_stratum"]] == [3, 3, 3]
    assert side["per_stratum"][0]["score_from"] is None and side["per_stratum"][2]["score_below"] is None
    assert side["per_stratum"][1]["per_task"]["1"]["lambda_hat"] == rule.lambda_hat("1", 1)
    pooled = np.mean([rule.task_rule("1", s).calibration_loss for s in range(3)])  # equal counts
    assert side["per_task"]["1"]["calibration_loss"] == pytest.approx(pooled)
    assert side["per_task"]["1"]["lambda_hat"] is None


def test_conformal_assigns_each_case_its_stratum_from_the_prediction_alone(toy, tmp_path):
    """Applied to the calibration predictions themselves (no labels read), each case gets the score metrics.csv has
    for it, hence its calibration stratum, and the masks of that stratum's lambda_hat."""
    out = tmp_path / "masks"
    assert _quiet(["conformal", "-p", str(toy["A"]["predictions"]), "--rule", str(toy["rule"]), "-o", str(out),
                   "-q"]) == 0
    doc = ConformalRuleFile.load(toy["rule"])
    rows = _metrics(toy["eval"])
    got = {r["case"]: r for r in csv.DictReader((out / "conformal.csv").open())}
    assert sorted(got) == sorted(rows)
    for cid, r in got.items():
        assert float(r[SCORE]) == pytest.approx(float(rows[cid][SCORE]), rel=1e-12, abs=0)
        assert int(r["stratum"]) == doc.strata.stratum(float(rows[cid][SCORE]))
        pred = toy["A"]["predictions"]
        probs_img = nib.load(pred / f"{cid}_probs.nii.gz")
        probs = np.moveaxis(np.asarray(probs_img.dataobj, dtype=np.float32), -1, 0)
        expected = doc.rules["outer"].apply(probs, score=float(rows[cid][SCORE]))[1]
        np.testing.assert_array_equal(np.asarray(nib.load(out / f"{cid}_outer.nii.gz").dataobj).astype(bool),
                                      expected)
    assert sorted({int(r["stratum"]) for r in got.values()}) == [0, 1, 2]
    summary = json.loads((out / "conformal.json").read_text())
    assert summary["strata"]["score"] == SCORE and len(summary["lambda_hat"]["outer"]) == 3
    # new cases too
    new = tmp_path / "new"
    assert _quiet(["conformal", "-p", str(toy["B"]["predictions"]), "--rule", str(toy["rule"]), "-o", str(new),
                   "-q"]) == 0
    assert all(r["stratum"] in ("0", "1", "2") for r in csv.DictReader((new / "conformal.csv").open()))


def test_strata_from_the_probabilities_when_there_are_no_map_files(toy, tmp_path):
    pred = tmp_path / "pred"
    shutil.copytree(toy["A"]["predictions"], pred)
    for p in pred.glob("*_predictive_entropy.nii.gz"):
        p.unlink()
    ev = tmp_path / "ev"
    assert _quiet(["evaluate", "-l", str(toy["A"]["labels"]), "-p", str(pred), "-o", str(ev), "--no-spatial", "-q",
                   "--conformal", "outer:fnr=0.3", "--conformal-strata", "3", "--conformal-stratify-by",
                   "one_minus_max_prob_patch_mean"]) == 0
    doc = ConformalRuleFile.load(ev / CONFORMAL_RULE_FILE)
    assert doc.strata.map_source == "probabilities" and doc.strata.score == "one_minus_max_prob_patch_mean"
    out = tmp_path / "masks"
    res = run_conformal(pred, ev / CONFORMAL_RULE_FILE, out)
    rows = _metrics(ev)
    for r in res.summary["cases"]:
        assert r["one_minus_max_prob_patch_mean"] == pytest.approx(
            float(rows[r["case"]]["one_minus_max_prob_patch_mean"]), rel=1e-12, abs=0)


def test_fixed_edges_and_the_api(toy, tmp_path):
    rows = _metrics(toy["eval"])
    scores = sorted(float(r[SCORE]) for r in rows.values())
    edge = (scores[3] + scores[4]) / 2  # 4 and 5 cases
    config = EvaluationConfig(spatial=False, products=[ConformalMasks({"outer": 0.3}, strata_edges=[edge],
                                                                       stratify_by=SCORE)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, summary, paths = run_evaluate(toy["A"]["labels"], toy["A"]["predictions"], tmp_path / "ev", config)
    doc = ConformalRuleFile.load(paths["product:conformal"])
    assert doc.strata.method == "fixed" and doc.strata.edges == (edge,) and doc.strata.counts == (4, 5)
    assert summary["conformal"]["strata"]["counts"] == [4, 5]


@pytest.mark.parametrize("extra, words", [
    # up front: 9 cases in 4 strata of >= 3
    (["--conformal-strata", "4"], ["too few", "4 strata", "at least 3", "at least 12"]),
    (["--conformal-strata", "1"], ["--conformal-strata", ">= 2"]),
    (["--conformal-strata", "3", "--conformal-strata-edges", "0.1"], ["not both"]),
    (["--conformal-strata-edges", "0.3,0.1"], ["strictly increasing"]),
    (["--conformal-strata-edges", "a,b"], ["--conformal-strata-edges", "numbers"]),
    (["--conformal-strata", "3", "--conformal-stratify-by", "dice"], ["'dice'", "without labels"]),
    # after the cases: an edge below every score but one leaves one case in the first stratum
    (["--conformal-strata-edges", "EDGE"], ["stratum [0] has [1] case", "at least 3", SCORE]),
])
def test_strata_refusals_one_line_exit_2_nothing_written(toy, tmp_path, capsys, extra, words):
    rows = _metrics(toy["eval"])
    low = sorted(float(r[SCORE]) for r in rows.values())
    extra = [str((low[0] + low[1]) / 2) if e == "EDGE" else e for e in extra]
    out = tmp_path / "ev"
    argv = ["evaluate", "-l", str(toy["A"]["labels"]), "-p", str(toy["A"]["predictions"]), "-o", str(out),
            "--no-spatial", "-q", "--score", SCORE, "--conformal", "outer:fnr=0.3", *extra]
    _one_line_exit_2(capsys, argv, *words)
    assert not (out / "summary.json").exists() and not (out / CONFORMAL_RULE_FILE).exists()
    assert not (out / "metrics.csv").exists()
    if "stratum [0] has [1] case" not in words:  # refused before any work (the other: once the scores are known)
        _nothing_written(out)


def test_a_refused_stratification_removes_an_earlier_runs_outputs(toy, tmp_path, capsys):
    out = tmp_path / "ev"
    shutil.copytree(toy["eval"], out)
    low = sorted(float(r[SCORE]) for r in _metrics(toy["eval"]).values())
    argv = ["evaluate", "-l", str(toy["A"]["labels"]), "-p", str(toy["A"]["predictions"]), "-o", str(out),
            "--no-spatial", "-q", "--score", SCORE, "--conformal", "outer:fnr=0.3", "--conformal-strata-edges",
            str((low[0] + low[1]) / 2)]
    _one_line_exit_2(capsys, argv, "stratum [0] has [1] case")
    assert not (out / CONFORMAL_RULE_FILE).exists() and not (out / "summary.json").exists()


# --------------------------------------------------------------------------------------------------------------
# probabilities checked before any work
# --------------------------------------------------------------------------------------------------------------
def _copy_predictions(toy, tmp_path: Path, edit=None) -> Path:
    pred = tmp_path / "pred"
    shutil.copytree(toy["A"]["predictions"], pred)
    if edit is not None:
        path = pred / "toy000_probs.nii.gz"
        img = nib.load(path)
        nib.save(nib.Nifti1Image(edit(np.asarray(img.dataobj, dtype=np.float32)), img.affine), path)
    return pred


@pytest.mark.parametrize("edit, words", [
    ("remove", ["9 of 9 case(s) have no probabilities", "toy000_probs.nii.gz is missing", "without --no-probs"]),
    (lambda p: p * 4 - 2, ["toy000_probs.nii.gz does not hold softmax probabilities", "[0, 1]", "logits"]),
    (lambda p: p * 0.5, ["toy000_probs.nii.gz does not hold softmax probabilities", "sum to 1"]),
])
def test_missing_or_bad_probabilities_are_refused_before_any_work(toy, tmp_path, capsys, edit, words):
    pred = _copy_predictions(toy, tmp_path, None if edit == "remove" else edit)
    if edit == "remove":
        for p in pred.glob("*_probs.nii.gz"):
            p.unlink()
    out = tmp_path / "ev"
    _one_line_exit_2(capsys, ["evaluate", "-l", str(toy["A"]["labels"]), "-p", str(pred), "-o", str(out),
                              "--no-spatial", "-q", "--conformal", "outer:fnr=0.3"], *words)
    _nothing_written(out)
    masks = tmp_path / "masks"
    _one_line_exit_2(capsys, ["conformal", "-p", str(pred), "--rule", str(toy["rule"]), "-o", str(masks), "-q"],
                     *words)
    _nothing_written(masks)


def test_probability_check_nnunet_wording_and_channels(toy, tmp_path):
    files = match_cases(toy["A"]["labels"], toy["A"]["predictions"])
    with pytest.raises(ValueError, match=r"toy000\.npz is missing.*--save_probabilities"):
        check_conformal_probabilities([type(f)(f.case_id, f.label, f.seg, None) for f in files], "softmax",
                                      tmp_path, "nnunet")
    with pytest.raises(ValueError, match="2 channel.*the conformal rule 3"):
        check_conformal_probabilities(files, "softmax", tmp_path, channels=3)
    check_conformal_probabilities(files, "sigmoid", tmp_path)  # two channels in [0, 1]: fine as regions too


# --------------------------------------------------------------------------------------------------------------
# nested masks
# --------------------------------------------------------------------------------------------------------------
def _threshold_rule(side: str, index: int, bins: int = 64) -> ConformalRule:
    tasks = tuple(ConformalTaskRule(str(k), 0, index / bins, index, 10, 0.0, None, "hand-made") for k in range(2))
    return ConformalRule("softmax", "threshold", side, 1.0 / bins, bins, "expectation", 0.1, None, ("0", "1"), None,
                         tasks)


def test_crossing_rules_grow_the_outer_mask_only_which_keeps_both_guarantees(toy, tmp_path):
    """A loose outer rule (p >= 0.75) and a loose inner rule (p > 0.25) cross: voxels with p in (0.25, 0.75) are
    inner but not outer. The written outer mask is the union (its missed share of the truth can only fall, case by
    case), the inner mask is the rule's, and conformal.csv reports the crossing volume."""
    outer, inner = _threshold_rule("outer", 16), _threshold_rule("inner", 16)
    doc = ConformalRuleFile({"outer": outer, "inner": inner}, {"outer": 0.5, "inner": 0.5}, None, {}, ["x"])
    out = tmp_path / "masks"
    res = run_conformal(toy["A"]["predictions"], doc, out)
    rows = {r["case"]: r for r in res.summary["cases"]}
    crossed = 0
    for f in match_cases(toy["A"]["labels"], toy["A"]["predictions"]):
        case = load_case(f)
        raw_outer, raw_inner = outer.apply(case.probs)[1], inner.apply(case.probs)[1]
        got_outer = np.asarray(nib.load(out / f"{f.case_id}_outer.nii.gz").dataobj).astype(bool)
        got_inner = np.asarray(nib.load(out / f"{f.case_id}_inner.nii.gz").dataobj).astype(bool)
        np.testing.assert_array_equal(got_inner, raw_inner)
        np.testing.assert_array_equal(got_outer, raw_outer | raw_inner)
        assert (got_inner <= got_outer).all()
        truth = case.label == 1
        assert (truth & ~got_outer).sum() <= (truth & ~raw_outer).sum()  # the missed share can only fall
        added = (raw_inner & ~raw_outer).sum() * np.prod(case.spacing) / 1000
        assert rows[f.case_id]["crossing_ml_1"] == pytest.approx(added)
        crossed += added > 0
    assert crossed > 0  # the test exercises a real crossing
    assert "outer | inner" in res.summary["nesting"]


def test_nest_masks_and_margin_rules_nest_by_construction():
    rng = np.random.default_rng(0)
    a, b = rng.random((2, 5, 5)) < 0.5, rng.random((2, 5, 5)) < 0.5
    nested, added = nest_masks({"outer": a, "inner": b})
    np.testing.assert_array_equal(nested["outer"], a | b)
    np.testing.assert_array_equal(nested["inner"], b)
    np.testing.assert_array_equal(added, b & ~a)
    same, none = nest_masks({"outer": a})
    assert none is None and same["outer"] is a
    # margin family: the eroded mask lies in the prediction, the dilated one holds it, whatever the two margins
    p1 = np.clip(rng.random((12, 12)) * 0.4 + np.pad(np.ones((6, 6)), 3) * 0.5, 0, 1)
    probs = np.stack([1 - p1, p1])
    for ro, ri in ((0, 0), (1, 3), (4, 0.5)):
        o = ConformalRule("softmax", "margin", "outer", 0.5, 40, "expectation", 0.1, None, ("0", "1"), None,
                          tuple(ConformalTaskRule(str(k), 0, ro, int(ro / 0.5), 10, 0, None, "") for k in range(2)))
        i = ConformalRule("softmax", "margin", "inner", 0.5, 40, "expectation", 0.1, None, ("0", "1"), None,
                          tuple(ConformalTaskRule(str(k), 0, ri, int(ri / 0.5), 10, 0, None, "") for k in range(2)))
        assert (i.apply(probs)[1] <= o.apply(probs)[1]).all()
