"""``evaluate --lesions`` on the toy cohort: the ``lesion_*`` columns of ``metrics.csv`` against a brute-force
reference of the BraTS 2023 rule computed from the files, and the cases where ``lesion_dice`` is not ``dice``.

A report had ``lesion_dice_1 = 1.0`` beside ``dice_1 < 1`` on the toy cohort. By the rule (docs/lesions.md) that is
the score of a case whose ground-truth lesions are all at most ``min_volume`` mm^3 (50 for the glioma setting) and
whose predicted components all touch one of them: nothing is counted, the score is 1 (the BraTS code's 0 / 0), with
``lesion_tp = lesion_fn = lesion_fp = 0``. The test checks each case against the reference, that such cases are
exactly the ones where the two differ with one counted lesion or none, and that with ``--lesion-min-volume 0`` the
toy's one-lesion cases score their voxel Dice.
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io import parse_float, read_csv
from monai_unc.products.lesions import LesionMetrics
from tests.metrics.test_lesion_wise_reference_lesionsr import brats_reference


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    # 10^3 voxels of 1.5 x 1 x 2 mm: some spheres are below 50 mm^3, one prediction misses its lesion entirely
    return root, write_toy_cohort(root / "data", n_cases=6, shape=(10, 10, 10))


def _run(root, data, name, *extra):
    out = root / name
    assert main(["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o", str(out), "--lesions",
                 "-q", *extra]) == 0
    return {r["case"]: r for r in read_csv(out / "metrics.csv")}


@pytest.mark.parametrize("min_volume", [None, 0.0])
def test_lesion_columns_equal_the_reference(toy, min_volume):
    root, data = toy
    extra = () if min_volume is None else ("--lesion-min-volume", str(min_volume))
    rows = _run(root, data, f"ev_{min_volume}", *extra)
    mv = 50.0 if min_volume is None else min_volume
    differs, nothing = [], 0
    for case, row in sorted(rows.items()):
        img = nib.load(data["labels"] / f"{case}.nii.gz")
        gt = np.asarray(img.dataobj) > 0
        pred = np.asarray(nib.load(data["predictions"] / f"{case}_seg.nii.gz").dataobj) > 0
        spacing = tuple(float(z) for z in img.header.get_zooms()[:3])
        ref = brats_reference(pred, gt, spacing, 3, mv)
        got = {k: parse_float(row[f"lesion_{k}_1"]) for k in ("dice", "hd95", "tp", "fn", "fp")}
        assert got["dice"] == pytest.approx(ref["dice"], rel=1e-9, abs=1e-12), case
        assert got["hd95"] == pytest.approx(ref["hd95"], rel=1e-9, abs=1e-9), case
        assert (got["tp"], got["fn"], got["fp"]) == (ref["n_tp"], ref["n_fn"], ref["n_fp"]), case
        dice = parse_float(row["dice_1"])
        counted = ref["n_tp"] + ref["n_fn"]
        nothing += counted == 0 and ref["n_fp"] == 0
        if counted == 1 and ref["n_fp"] == 0:  # one counted lesion, every component matched: the voxel Dice
            assert got["dice"] == pytest.approx(dice, rel=1e-6), case
        if counted == 0 and ref["n_fp"] == 0 and gt.any():  # nothing counted: 1, whatever the voxel Dice
            assert got["dice"] == 1.0 and got["hd95"] == 0.0
            differs.append((case, dice))
    # the summary counts the cases that score 1 because nothing was counted, and the printed line says so
    block = json.loads((root / f"ev_{min_volume}" / "summary.json").read_text())["lesions"]
    assert block["per_task"]["1"]["n_cases_nothing_counted"] == nothing
    line = LesionMetrics.summary_lines(block)[0]
    if min_volume is None:
        # the toy cohort has such cases, one of them a prediction that misses its (small) lesion: Dice 0
        assert differs and min(d for _, d in differs) < 0.5, differs
        assert f"({nothing} case(s) without a lesion above 50 mm^3 or a false positive count as Dice 1)" in line
        assert ("1 cases with nothing counted (Dice 1)", str(nothing)) in LesionMetrics.report_section(block).cards
    else:
        assert not differs and nothing == 0 and "count as Dice 1" not in line
        assert not any("nothing counted" in c[0] for c in LesionMetrics.report_section(block).cards)
