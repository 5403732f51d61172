"""``monai-unc evaluate`` on the smallest valid cohorts: one case, and 2-D volumes.

Found by hostile testing: a one-case cohort finished its work, wrote ``metrics.csv`` and ``summary.json``, then crashed
printing its summary (the triage at the default 20 % budget refers the only case, so the mean Dice of the retained
cases is undefined, stored as null, and was formatted as a number); a 2-D NIfTI cohort failed every case with
"spacing must have 2 values (one per spatial axis), got 3" (the spacing was always read as three values).
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort


def test_one_case_cohort_prints_undefined_values_as_n_a(tmp_path, capsys):
    cohort = write_toy_cohort(tmp_path / "c", n_cases=1, shape=(10, 10, 10))
    out = tmp_path / "ev"
    rc = cli.main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(out),
                   "--no-spatial"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_cases"] == 1 and summary["triage"]["dice_retained"] is None
    assert "mean Dice of the retained cases n/a" in printed


@pytest.mark.parametrize("spacing", [(1.0, 1.0), (0.5, 2.0)])
def test_two_d_cohort_is_evaluated_with_its_two_spacings(tmp_path, capsys, spacing):
    labels, preds = tmp_path / "labels", tmp_path / "pred"
    labels.mkdir()
    preds.mkdir()
    rng = np.random.default_rng(0)
    affine = np.diag([*spacing, 1.0, 1.0])
    for cid in ("a", "b", "c"):
        lab = np.zeros((20, 18), np.uint8)
        lab[5:12, 4:11] = 1
        seg = np.roll(lab, 1, axis=0)
        nib.save(nib.Nifti1Image(lab, affine), labels / f"{cid}.nii.gz")
        nib.save(nib.Nifti1Image(seg, affine), preds / f"{cid}_seg.nii.gz")
        nib.save(nib.Nifti1Image(rng.random(lab.shape).astype(np.float32), affine),
                 preds / f"{cid}_predictive_entropy.nii.gz")
    out = tmp_path / "ev"
    rc = cli.main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--num-classes", "2", "-q"])
    assert rc == 0, capsys.readouterr()
    assert not (out / "failures.json").exists()
    rows = (out / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    first = dict(zip(header, rows[1].split(",")))
    assert first["spacing"] == "x".join(f"{s:.4g}" for s in spacing)
    # the boundary-aware metrics ran on the 2-D grid
    assert first["buc"] not in ("", "nan")
