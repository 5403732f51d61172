"""Review 61 of the cohort evaluation: checks of every entry point and degenerate rankings."""

from __future__ import annotations

import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig, evaluate_cases, summarize
from monai_unc.io import match_cases

MIXED = r"1 case\(s\) have neither an uncertainty map nor probabilities \('{}'\)"


def _class_cohort(root: Path, n: int = 3, seg_only: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """``n`` tiny two-class cases ``c0 ..``; the cases of ``seg_only`` have a segmentation and nothing else."""
    labels, pred = root / "labels", root / "pred"
    labels.mkdir(parents=True)
    pred.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        cid = f"c{i}"
        lab = np.zeros((6, 5, 4), np.uint8)
        lab[1:4, 1:4, 1:3] = 1
        p1 = np.clip(0.8 * lab + 0.1 + 0.05 * rng.random(lab.shape), 0, 1).astype(np.float32)
        nib.save(nib.Nifti1Image(lab, np.eye(4)), labels / f"{cid}.nii.gz")
        if cid in seg_only:
            nib.save(nib.Nifti1Image((p1 > 0.5).astype(np.uint8), np.eye(4)), pred / f"{cid}_seg.nii.gz")
        else:
            nib.save(nib.Nifti1Image(np.stack([1 - p1, p1], -1), np.eye(4)), pred / f"{cid}_probs.nii.gz")
    return labels, pred


# ------------------------------------------------------------ segmentations alone beside scored cases, from Python
@pytest.mark.parametrize("alone", ["c0", "c2"])  # first and last in case-id order
def test_evaluate_cases_refuses_a_case_without_a_score_before_any_work(tmp_path, alone):
    """Found by review 61: the refusal was ``run_evaluate``'s only. ``evaluate_cases`` evaluated c2 (a segmentation
    alone) beside two cases with probabilities, and ``summarize`` referred it first as an undefined score (summary
    ``score.undefined == ['c2']``, AURC 0.0) without a word; with c0 alone it failed after the work with "no uncertainty
    score in the rows"."""
    labels, pred = _class_cohort(tmp_path, seg_only=(alone,))
    cases = match_cases(labels, pred)
    with pytest.raises(ValueError, match=MIXED.format(alone)):
        evaluate_cases(cases, EvaluationConfig(num_classes=2))


@pytest.mark.parametrize("alone", ["c0", "c2"])
def test_summarize_refuses_a_merged_state_mixing_cases_without_a_score(tmp_path, alone):
    """Shards evaluated apart (one of segmentations alone) and merged: ``summarize`` is the last entry point."""
    labels, pred = _class_cohort(tmp_path, seg_only=(alone,))
    cases = match_cases(labels, pred)
    config = EvaluationConfig(num_classes=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        scored = evaluate_cases([c for c in cases if c.case_id != alone], config)
        bare = evaluate_cases([c for c in cases if c.case_id == alone], config)  # all bare: no mix, allowed
        summarize(scored, config)  # every case scored: summarised
    merged = scored.merge(bare)
    with pytest.raises(ValueError, match=MIXED.format(alone)):
        summarize(merged, config)
    # a state built by hand (no files recorded): the rows decide
    merged.files.clear()
    with pytest.raises(ValueError, match=MIXED.format(alone)):
        summarize(merged, config)


# --------------------------------------------------------------------------------- every case's score undefined
def _rows(scores):
    dice = [0.9, 0.4, 0.7, 0.8]
    return [{"case": f"c{i}", "dice": d, "measure": "predictive_entropy", "predictive_entropy_fg_mean": s}
            for i, (d, s) in enumerate(zip(dice, scores))]


def test_summary_failure_detection_of_undefined_scores_is_nan_with_a_warning():
    """Found by review 61: with every case's score undefined (e.g. ``fg_mean`` of empty predictions) the filled
    stand-ins were all tied and summary.json gave AURC 0.3, E-AURC 0.1375 and AUGRC 0.15 (those of no ranking) and a
    referral area 0.70 without a word."""
    from monai_unc.evaluation import CohortState

    state = CohortState(num_classes=2, n_fine_bins=240, rows=_rows([float("nan")] * 4))
    summary = summarize(state, EvaluationConfig(num_classes=2))
    fd = summary["failure_detection"]
    assert (fd["aurc"], fd["eaurc"], fd["augrc"]) == (None, None, None)
    assert summary["referral"]["area_normalized"] is None
    assert any("failure detection: every one of the 4 case(s) has an undefined score" in w
               for w in summary["warnings"])
    # one score defined: the others rank most uncertain, as documented, and the areas are numbers
    state = CohortState(num_classes=2, n_fine_bins=240, rows=_rows([0.2, float("nan"), float("nan"), float("nan")]))
    summary = summarize(state, EvaluationConfig(num_classes=2))
    assert summary["failure_detection"]["aurc"] is not None and summary["referral"]["area_normalized"] is not None
    assert not any("tied" in w or "undefined score" in w for w in summary["warnings"])


def test_summary_of_tied_scores_says_the_scores_cannot_rank_the_cases():
    from monai_unc.evaluation import CohortState

    state = CohortState(num_classes=2, n_fine_bins=240, rows=_rows([0.5] * 4))
    summary = summarize(state, EvaluationConfig(num_classes=2))
    assert summary["failure_detection"]["aurc"] == pytest.approx(1 - np.mean([0.9, 0.4, 0.7, 0.8]))  # mean risk
    assert any(w.startswith("cohort: failure_detection: all 4 scores are tied, so the scores cannot rank the cases")
               for w in summary["warnings"])
