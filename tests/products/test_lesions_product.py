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
