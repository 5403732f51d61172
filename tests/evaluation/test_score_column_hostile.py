"""The triage score column (``--score``) must be an uncertainty score computed without labels (hostile testing).

``score_column`` accepted any column of the rows: ``--score expected_dice`` (a label-free *quality*, larger = better)
was read as an uncertainty, so the triage referred the cases with the best expected Dice first and AURC, E-AURC, the
referral curve and the OoD AUROC were computed on the inverted ranking, with exit status 0; ``--score dice`` ranked by
the labels themselves. The referral rule refused the same column, but only after every case had been evaluated.
"""

from __future__ import annotations

import pytest

from monai_unc import cli
from monai_unc.evaluation.cohort import score_column

#: the first row of a class evaluation (the columns that matter here)
CLASS_ROW = {"case": "a", "dice": 0.9, "dice_1": 0.9, "error_auroc": 0.7, "measure": "predictive_entropy",
             "predictive_entropy_mean": 0.1, "predictive_entropy_fg_mean": 0.2, "predictive_entropy_patch_mean": 0.3,
             "one_minus_max_prob_mean": 0.05, "one_minus_max_prob_fg_mean": 0.1, "one_minus_max_prob_patch_mean": 0.2,
             "expected_dice": 0.95, "voxels": 1000}

#: the first row of a region evaluation (regions TC and WT)
REGION_ROW = {"case": "a", "dice": 0.8, "dice_TC": 0.7, "dice_WT": 0.9, "measure": "predictive_entropy",
              "predictive_entropy_fg_mean": 0.2, "predictive_entropy_fg_mean_TC": 0.3,
              "predictive_entropy_fg_mean_WT": 0.1, "expected_dice": 0.9}


@pytest.mark.parametrize("column", ["expected_dice", "dice", "dice_1", "error_auroc", "voxels"])
def test_a_column_that_is_no_label_free_uncertainty_score_is_refused(column):
    with pytest.raises(ValueError, match=rf"score: '{column}' is not a case score computed without labels"):
        score_column([CLASS_ROW], column)


def test_case_scores_and_region_scores_are_accepted():
    assert score_column([CLASS_ROW], "one_minus_max_prob_patch_mean") == "one_minus_max_prob_patch_mean"
    assert score_column([CLASS_ROW], None) == "predictive_entropy_fg_mean"
    assert score_column([REGION_ROW], "predictive_entropy_fg_mean_WT") == "predictive_entropy_fg_mean_WT"
    assert score_column([REGION_ROW], "predictive_entropy_fg_mean") == "predictive_entropy_fg_mean"
    with pytest.raises(ValueError, match="not a case score computed without labels"):
        score_column([REGION_ROW], "dice_TC")
    with pytest.warns(DeprecationWarning, match="patch_mean"):  # the former name still resolves
        assert score_column([CLASS_ROW], "predictive_entropy_patch") == "predictive_entropy_patch_mean"


def test_evaluate_refuses_a_quality_as_score_in_one_line(tmp_path, capsys):
    from tests.report._hostile_cohorts import ball, binary_probs, write_cases

    lab = ball(4)
    data = write_cases(tmp_path / "in", {f"c{i}": (binary_probs((lab == 1) * (1 - 2 * e) + e), lab)
                                         for i, e in enumerate([0.01, 0.2])})
    code = cli.main(["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o",
                     str(tmp_path / "out"), "--quiet", "--no-spatial", "--score", "expected_dice"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "'expected_dice' is not a case score computed without labels" in err
    assert not (tmp_path / "out" / "summary.json").exists()


def test_a_region_triage_score_keeps_every_regions_failure_detection(tmp_path):
    """Found by hostile testing: with the triage score of one region (``--score predictive_entropy_fg_mean_WT``) the
    summary looked for the region scores ``predictive_entropy_fg_mean_WT_<R>``, found none, and dropped the failure
    detection of every region (the report's region table showed no AURC). Each region ranks by its own score of the
    triage score's measure and aggregation, whichever region the triage score is of."""
    import json

    import numpy as np

    from monai_unc.evaluation import load_evaluation, resummarize
    from monai_unc.metrics import failure_detection
    from tests._cases import write_brats_like_cohort

    data = write_brats_like_cohort(tmp_path, n_cases=5, seed=1)
    out = tmp_path / "out"
    assert cli.main(["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o", str(out), "--quiet",
                     "--regions", "brats", "--no-spatial", "--score", "one_minus_max_prob_patch_mean_WT"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    state, saved = load_evaluation(out)
    assert saved == summary
    rows = state.sorted_rows()
    for name, block in summary["regions"]["per_region"].items():
        fd = block["failure_detection"]
        assert fd["score"] == f"one_minus_max_prob_patch_mean_{name}"
        u = np.array([r[fd["score"]] for r in rows])
        d = np.array([r[f"dice_{name}"] for r in rows])
        assert [fd["aurc"], fd["eaurc"], fd["augrc"]] == pytest.approx(list(failure_detection(u, d)), abs=1e-12)
    # the same blocks as a summary of the combined score of that measure and aggregation
    combined = resummarize(state, summary, score="one_minus_max_prob_patch_mean")
    assert combined["regions"]["per_region"] == summary["regions"]["per_region"]
