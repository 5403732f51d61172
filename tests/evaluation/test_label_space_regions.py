"""Region specs whose labels the label maps do not use (hostile testing of regions): a region that no reference and
no prediction of the cohort holds scores Dice 1 in every case, as a class that no map holds does."""

import csv
import json
import warnings

import nibabel as nib
import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.regions import label_to_regions


def _save(arr, path):
    nib.save(nib.Nifti1Image(np.asarray(arr), np.eye(4)), str(path))


def _cohort(root, spec):
    """BraTS labels 0, 1, 2, 4 (enhancing tumour 4), nnU-Net layout: label-map predictions missing one slice of the
    whole tumour, ``.npz`` per-region probabilities of ``spec``."""
    (root / "labels").mkdir()
    (root / "pred").mkdir()
    for i in range(2):
        lab = np.zeros((12, 12, 8), np.uint8)
        lab[3:9, 3:9, 2:6] = 2
        lab[4:8, 4:8, 3:5] = 1
        lab[5:7, 5:7, 3:5] = 4
        pred = lab.copy()
        pred[3, 3:9, 2:6] = 0
        _save(lab, root / "labels" / f"c{i}.nii.gz")
        _save(pred, root / "pred" / f"c{i}.nii.gz")
        p = np.clip(label_to_regions(pred, spec).astype(np.float32) * 0.8 + 0.1 + 0.05 * i, 0, 1)
        np.savez_compressed(root / "pred" / f"c{i}.npz", probabilities=p.transpose(0, 3, 2, 1))


def test_a_region_in_no_case_is_said_not_silently_scored_one(tmp_path):
    """ET given the label 5 (a typo for 4, which TC and WT claim, so no label is unclaimed): ET was empty in every
    reference and prediction and scored dice_ET = 1 in every case, counted in 'dice', without a word."""
    spec = {"TC": [1, 4], "WT": [1, 2, 4], "ET": [5]}
    _cohort(tmp_path, spec)
    with pytest.warns(UserWarning, match=r"region\(s\) ET of the 3 regions .* in no reference and no segmentation "
                                         r"of the 2 case\(s\)"):
        _, summary, _ = run_evaluate(tmp_path / "labels", tmp_path / "pred", tmp_path / "eval",
                                     EvaluationConfig(regions=spec, spatial=False), layout="nnunet")
    with open(tmp_path / "eval" / "metrics.csv", newline="") as f:
        assert [float(r["dice_ET"]) for r in csv.DictReader(f)] == [1.0, 1.0]
    saved = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert any("region(s) ET of the 3 regions" in w for w in saved["warnings"])


def test_no_absent_region_warning_when_every_region_is_held(tmp_path):
    spec = {"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]}
    _cohort(tmp_path, spec)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, summary, _ = run_evaluate(tmp_path / "labels", tmp_path / "pred", tmp_path / "eval",
                                     EvaluationConfig(regions=spec, spatial=False), layout="nnunet")
    assert not [w for w in caught if "in no reference" in str(w.message)]
    assert not [w for w in summary["warnings"] if "in no reference" in w]
