"""A case whose Dice is exactly the failure Dice (found by hostile testing): its float32 Dice of 7/10 (0.699999988)
was counted as failed against the float64 0.7 and shown as 0.69999999 in a red row."""

from __future__ import annotations

import json
import re

import nibabel as nib
import numpy as np

from monai_unc.cli import main
from monai_unc.evaluation import dice_as_recorded, dice_failed
from monai_unc.evaluation.cohort import risk_of_dice


def test_dice_failed_compares_at_the_recorded_precision():
    d = np.array([7 / 10, 8 / 10, 0.69, 0.79988, np.nan], dtype=np.float32)
    assert dice_failed(d, 0.7).tolist() == [False, False, True, False, False]
    assert dice_failed(d, 0.8).tolist() == [True, False, True, True, False]
    assert risk_of_dice(d.astype(np.float64), "failure", 0.7).tolist() == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert dice_as_recorded(float(np.float32(0.7))) == 0.7 and np.isnan(dice_as_recorded(float("nan")))


def test_a_dice_exactly_at_the_failure_dice_is_not_a_failure(tmp_path, capsys):
    (tmp_path / "labels").mkdir()
    (tmp_path / "preds").mkdir()
    rng = np.random.default_rng(0)
    # (tp, fp, fn): Dice exactly 0.7 and 0.8, then 0.9, 0.5, 0.8 (12/15) and 0.947
    for i, (tp, fp, fn) in enumerate([(7, 3, 3), (8, 2, 2), (9, 1, 1), (5, 5, 5), (6, 1, 2), (9, 0, 1)]):
        lab = np.zeros((6, 6, 4), np.uint8)
        seg = np.zeros_like(lab)
        fl, fs = lab.reshape(-1), seg.reshape(-1)
        fl[:tp + fn] = 1
        fs[:tp] = 1
        fs[tp + fn: tp + fn + fp] = 1
        p1 = np.where(seg == 1, rng.uniform(0.55, 0.95, seg.shape), rng.uniform(0.05, 0.45, seg.shape))
        nib.save(nib.Nifti1Image(lab, np.eye(4)), tmp_path / "labels" / f"c{i}.nii.gz")
        nib.save(nib.Nifti1Image(np.stack([1 - p1, p1], -1).astype(np.float32), np.eye(4)),
                 tmp_path / "preds" / f"c{i}_probs.nii.gz")
    ev, rep = tmp_path / "ev", tmp_path / "rep"
    assert main(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(tmp_path / "preds"), "-o", str(ev),
                 "--failure-dice", "0.7", "--no-spatial", "--quiet"]) == 0
    summary = json.loads((ev / "summary.json").read_text())
    assert summary["failures"]["cases"] == ["c3"], summary["failures"]  # 0.5 only; c0 is exactly 0.7
    assert main(["report", "-e", str(ev), "-o", str(rep), "--quiet"]) == 0
    html = next(rep.rglob("*.html")).read_text()
    rows = dict((case, (cls, dice)) for cls, case, dice in re.findall(
        r'<tr class="([^"]*)" data-case="(c[0-9])">.*?<td class="dice">([^<]*)</td>', html, flags=re.S))
    assert rows["c0"][1] == "0.700" and "failed" not in rows["c0"][0], rows["c0"]
    assert rows["c1"][1] == "0.800" and "failed" in rows["c3"][0], rows


def test_a_falsy_shift_label_is_not_in_distribution(tmp_path):
    """Found by hostile testing: ``summarize`` read a shift label as ``str(label or "")``, so a severity 0 was
    in-distribution there and out of distribution in ``ood_auroc_by_shift``, the report's plot and the handler."""
    import warnings

    from monai_unc.evaluation import EvaluationConfig, run_evaluate
    from monai_unc.metrics import ood_auroc_by_shift

    (tmp_path / "labels").mkdir()
    (tmp_path / "preds").mkdir()
    rng = np.random.default_rng(0)
    sev = {}
    for i in range(8):
        lab = np.zeros((10, 9, 8), np.uint8)
        lab[2:7, 2:7, 2:6] = 1
        p1 = np.clip(lab * 0.8 + rng.normal(0, 0.15 + 0.05 * i, lab.shape), 0.01, 0.99).astype(np.float32)
        nib.save(nib.Nifti1Image(lab, np.eye(4)), tmp_path / "labels" / f"c{i}.nii.gz")
        nib.save(nib.Nifti1Image(np.stack([1 - p1, p1], -1), np.eye(4)), tmp_path / "preds" / f"c{i}_probs.nii.gz")
        sev[f"c{i}"] = i % 4  # integer severities
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state, summary, _ = run_evaluate(tmp_path / "labels", tmp_path / "preds", tmp_path / "ev",
                                         EvaluationConfig(shifts=sev, spatial=False))
    direct = ood_auroc_by_shift(np.zeros(len(state.rows)), [str(r["shift"]) for r in state.rows])
    assert summary["ood"]["n_iid"] == direct["n_iid"] == 0, summary["ood"]
