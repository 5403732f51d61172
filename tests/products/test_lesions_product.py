"""``monai-unc evaluate --lesions``: the lesion-wise product end to end, for regions and for classes."""

from __future__ import annotations

import csv
import json
import sys
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.evaluation.lesions import LesionState
from monai_unc.metrics.lesions import brats_lesion_metrics, lesion_detection
from monai_unc.products.lesions import LesionMetrics
from monai_unc.regions import parse_regions

sys.path.insert(0, str(Path(__file__).parents[1] / "metrics"))
from lesion_cohort import CASES, REGIONS, make_case, region_mask  # noqa: E402

REFERENCE = json.loads((Path(__file__).parents[1] / "metrics" / "data" / "lesion_reference.json").read_text())
CHANNELS = list(parse_regions("brats2023"))  # the channel order of the region masks
N = 4  # cases of the synthetic cohort used here: several lesions, merged lesions, empty truth, empty prediction


def _write(root: Path, regions: bool) -> tuple[Path, Path]:
    labels, preds = root / "labels", root / "predictions"
    labels.mkdir()
    preds.mkdir()
    for i in range(N):
        pred, truth, spacing, u = make_case(i)
        affine = np.diag([*spacing, 1.0])
        nib.save(nib.Nifti1Image(truth, affine), labels / f"{CASES[i]}.nii.gz")
        if regions:
            masks = np.stack([region_mask(pred, r) for r in CHANNELS])
            probs = np.where(masks, 0.9, 0.1) - 0.05 * np.minimum(u, 1.0)[None] + 0.05
            nib.save(nib.Nifti1Image(np.moveaxis(masks.astype(np.uint8), 0, -1), affine),
                     preds / f"{CASES[i]}_seg.nii.gz")
            nib.save(nib.Nifti1Image(np.moveaxis(probs.astype(np.float32), 0, -1), affine),
                     preds / f"{CASES[i]}_probs.nii.gz")
        else:
            nib.save(nib.Nifti1Image(pred, affine), preds / f"{CASES[i]}_seg.nii.gz")
            nib.save(nib.Nifti1Image(u.astype(np.float32), affine), preds / f"{CASES[i]}_predictive_entropy.nii.gz")
    return labels, preds


def _rows(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "metrics.csv", newline="") as f:
        return {r["case"]: r for r in csv.DictReader(f)}


@pytest.mark.slow
def test_regions_end_to_end_equal_the_official_code(tmp_path):
    """BraTS regions from files: the columns equal the official BraTS 2023 code's outputs (frozen table), the summary
    has the per-region block, lesion-level failure detection and the lesion list; the report shows the section."""
    labels, preds = _write(tmp_path, regions=True)
    out = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rc = main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--regions", "brats2023",
                   "--lesions", "--lesion-settings", "met", "--no-spatial", "--quiet"])
    assert rc == 0
    rows = _rows(out)
    for i in range(N):
        ref = REFERENCE[CASES[i]]["BraTS-MET"]
        for region in REGIONS:
            row = rows[CASES[i]]
            assert float(row[f"lesion_dice_{region}"]) == pytest.approx(ref[region]["dice"], rel=1e-9)
            assert float(row[f"lesion_hd95_{region}"]) == pytest.approx(ref[region]["hd95"], rel=1e-9)
            assert [int(float(row[f"lesion_{k}_{region}"])) for k in ("tp", "fp", "fn")] == [
                ref[region]["n_tp"], ref[region]["n_fp"], ref[region]["n_fn"]]
    summary = json.loads((out / "summary.json").read_text())
    block = summary["lesions"]
    assert block["options"]["settings"] == "met" and block["n_cases"] == N
    assert set(block["per_task"]) == set(REGIONS)
    wt = block["per_task"]["WT"]
    mean = np.mean([REFERENCE[c]["BraTS-MET"]["WT"]["dice"] for c in CASES[:N]])
    assert wt["mean"]["lesion_dice"] == pytest.approx(mean, rel=1e-9)
    assert wt["lesion_fp"] == sum(REFERENCE[c]["BraTS-MET"]["WT"]["n_fp"] for c in CASES[:N])
    assert wt["n_false_positive_lesions"] == wt["lesion_fp"]
    detection = wt["failure_detection"]
    assert any(k.endswith("_mean") for k in detection) and wt["best_fp_score"] in detection
    values = [d["value"] for d in block["lesions"]]
    assert values == sorted(values, reverse=True) and len(values) > 3
    assert main(["report", "--evaluation", str(out), "--cases", "0"]) == 0
    html = (out / "report" / "report.html").read_text()
    assert 'id="product-lesions"' in html and "most uncertain predicted lesions" in html


@pytest.mark.slow
def test_classes_end_to_end(tmp_path):
    """A label map per case (classes 1, 2, 3): one set of columns per foreground class, as the functions give."""
    labels, preds = _write(tmp_path, regions=False)
    out = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rc = main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--lesions", "--no-spatial",
                   "--num-classes", "4", "--quiet"])
    assert rc == 0
    rows = _rows(out)
    for i in (0, 1):
        pred, truth, _, _ = make_case(i)
        spacing = tuple(REFERENCE[CASES[i]]["spacing"])
        for c in (1, 2, 3):
            r = brats_lesion_metrics(pred == c, truth == c, spacing, 3, 50.0)
            assert float(rows[CASES[i]][f"lesion_dice_{c}"]) == pytest.approx(r.dice, rel=1e-9)
            assert float(rows[CASES[i]][f"lesion_f1_{c}"]) == pytest.approx(lesion_detection(pred == c, truth == c).f1)
        assert np.isfinite(float(rows[CASES[i]]["ndsc_raac_1"]))


def test_options_and_refusals(tmp_path):
    p = LesionMetrics("BraTS-MET", dilation=2)
    assert p.options()["dilation"] == 2 and p.options()["min_volume"] == 2.0
    for kwargs, name in (({"settings": "xyz"}, "lesion_settings"), ({"dilation": -1}, "lesion_dilation"),
                         ({"iou": 0.0}, "lesion_iou"), ({"min_volume": float("inf")}, "lesion_min_volume"),
                         ({"failure_dice": 2.0}, "lesion_failure_dice")):
        with pytest.raises(ValueError, match=name):
            LesionMetrics(**kwargs)
    labels, preds = _write(tmp_path, regions=False)
    assert main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(tmp_path / "x"), "--lesion-dilation",
                 "2"]) == 2
    assert not (tmp_path / "x").exists()


def test_state_merges_case_by_case():
    a = LesionState({"n_cases": [1], "case.WT.ndsc": [0.5], "lesion.WT.case_index": [0.0, 0.0]})
    b = LesionState({"n_cases": [1], "case.WT.ndsc": [0.7], "lesion.WT.case_index": [0.0]})
    m = LesionState.from_state_dict(a.state_dict()).merge(b)
    assert m.arrays["lesion.WT.case_index"].tolist() == [0, 0, 1] and m.arrays["n_cases"].tolist() == [2]
    with pytest.raises(ValueError, match="different tasks"):
        m.merge(LesionState({"n_cases": [1], "case.TC.ndsc": [0.1]}))


def test_many_classes_print_two_lines_not_one_per_class():
    """A whole-body model's 104 classes printed 104 lines; beyond CONSOLE_TASKS the command prints how many, the range
    and the lowest lesion-wise Dice, the pooled counts and where each class's scores are (found by hostile testing)."""
    from monai_unc.products.lesions import CONSOLE_LOWEST, CONSOLE_TASKS

    def task(dice, tp):
        return {"mean": {"lesion_dice": dice, "lesion_hd95": 3.0, "lesion_f1": 0.5, "ndsc": 0.5},
                "lesion_tp": tp, "lesion_fp": 1, "lesion_fn": 2, "best_fp_score": "pe_max"}

    per_task = {f"organ_{c}": task(0.5 + c / 1000, c) for c in range(1, 105)}
    per_task["organ_50"]["mean"]["lesion_dice"] = 0.125
    per_task["organ_7"]["mean"]["lesion_dice"] = None  # no lesion anywhere: no Dice
    lines = LesionMetrics.summary_lines({"per_task": per_task, "notes": ["no samples"]})
    assert lines == [
        "lesions: 104 classes or regions; lesion-wise Dice from 0.1250 (organ_50) to 0.6040 (organ_104), lowest "
        "organ_50 0.1250, organ_1 0.5010, organ_2 0.5020, organ_3 0.5030, organ_4 0.5040; 1 without a lesion-wise "
        f"Dice; TP {sum(range(1, 105))} FP 104 FN 208 in all",
        "lesions: the scores of each class or region are in summary.json (the lesions block) and metrics.csv (the "
        "lesion_*_<class> columns)",
        "lesions: no samples"]
    assert CONSOLE_LOWEST == 5
    # up to CONSOLE_TASKS tasks: one line each, as before
    few = {k: per_task[k] for k in list(per_task)[:CONSOLE_TASKS]}
    lines = LesionMetrics.summary_lines({"per_task": few})
    assert len(lines) == CONSOLE_TASKS and lines[0].startswith("lesions organ_1: lesion-wise Dice 0.5010")
