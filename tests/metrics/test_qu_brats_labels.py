"""QU-BraTS on label maps: labels that no region holds, the metric's brain mask, the documented agreement with the
challenge script (hostile review of the ambiguity / QU-BraTS side).

The references are written here from the challenge's evaluation script (RagMeh11/QU-BraTS,
``BraTS_Seg_Uncertainty.py``): whole tumour ``label > 0``, its per-threshold masks, float32 sums and ratios.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.integrate import trapezoid as scipy_trapezoid

from monai_unc.handlers import QUBraTS
from monai_unc.metrics import QUBraTSMetric, qu_brats, qu_brats_regions, qu_brats_thresholds
from tests._paths import ROOT

EPS = np.finfo(np.float32).eps


def _brats2023_case(seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Labels 1 (necrosis), 2 (oedema), 3 (enhancing tumour, BraTS 2023), a prediction and one map per region."""
    rng = np.random.default_rng(seed)
    gt = np.zeros((10, 10, 10), np.int64)
    gt[2:8, 2:8, 2:8] = 2
    gt[3:7, 3:7, 3:7] = 1
    gt[4:6, 4:6, 4:6] = 3
    pred = gt.copy()
    pred[2, 2:8, 2:8] = 0
    pred[4, 4:6, 4:6] = 1
    maps = {k: np.round(rng.random(gt.shape) * 40) * 2.5 for k in ("TC", "WT", "ET")}  # on the thresholds
    return gt, pred, maps


def _script_region(u: np.ndarray, p: np.ndarray, g: np.ndarray, float32: bool = False) -> tuple[float, float, float]:
    """The script's ``make`` and AUCs for one region (all voxels brain), float64 ratios unless ``float32``."""
    th = qu_brats_thresholds()
    p32, g32 = p.astype(np.float32), g.astype(np.float32)
    curves: list[list[float]] = [[], [], []]
    for t in th:
        keep = np.ones_like(u, dtype=np.float32)
        keep[u > t] = 0.0
        inter, union = np.sum(p32 * keep * g32 * keep), np.sum(p32 * keep) + np.sum(g32 * keep)
        tp, tn = p32 * g32, (1 - p32) * (1 - g32)
        tp0, tp1, tn0, tn1 = tp.sum(), (tp * keep).sum(), tn.sum(), (tn * keep).sum()
        if not float32:
            inter, union, tp0, tp1, tn0, tn1 = (float(v) for v in (inter, union, tp0, tp1, tn0, tn1))
        curves[0].append(1.0 if inter == 0 and union == 0 else 2.0 * inter / union)
        eps = EPS if float32 else float(EPS)  # a Python float plus a float32 scalar is float32 under numpy 2
        curves[1].append((tp0 - tp1) / (tp0 + eps))
        curves[2].append((tn0 - tn1) / (tn0 + eps))
    x = th[::-1]
    return tuple(float(scipy_trapezoid(np.array(c, dtype=np.float64)[::-1], x)) / 100.0 for c in curves)


def test_brats2023_labels_under_the_default_spec_are_refused_not_scored_as_background():
    gt, pred, maps = _brats2023_case()
    # the default spec ("brats", enhancing tumour 4) silently scored label 3 as background: WT 0.6438 instead of the
    # script's 0.6471, and ET / TC without the enhancing tumour
    for bad_pred, bad_target, which in ((pred, np.where(gt == 3, 4, gt), "pred"), (np.where(pred == 3, 4, pred), gt,
                                                                               "target")):
        with pytest.raises(ValueError, match=rf"label 3 in 1 case\(s\) \({which}\).*did you mean brats2023\?"):
            qu_brats_regions(maps, bad_pred, bad_target)
    # with the spec that holds the labels, every region equals the challenge script's (WT = label > 0, TC = 1 or 3,
    # ET = 3 in the 2023 numbering)
    res = qu_brats_regions(maps, pred, gt, regions="brats2023")
    for name, labels in (("WT", (1, 2, 3)), ("TC", (1, 3)), ("ET", (3,))):
        want = _script_region(maps[name], np.isin(pred, labels), np.isin(gt, labels))
        got = res.regions[name]
        np.testing.assert_allclose([got.dice_auc, got.ftp_auc, got.ftn_auc], want, rtol=0, atol=1e-12)
    d, fp, fn = _script_region(maps["WT"], pred > 0, gt > 0)  # the script's WT: every non-zero label
    assert res.regions["WT"].score == pytest.approx((d + (1 - fp) + (1 - fn)) / 3, abs=1e-12)
    # asked for: the labels count as background, region by region as the masks of the spec say
    kept = qu_brats_regions(maps, pred, gt, ignore_unclaimed_labels=True)
    for name, labels in (("WT", (1, 2, 4)), ("TC", (1, 4)), ("ET", (4,))):
        by_hand = qu_brats(maps[name], np.isin(pred, labels), np.isin(gt, labels))
        assert kept.regions[name].score == pytest.approx(by_hand.score, abs=1e-12)
    with pytest.raises(TypeError, match="ignore_unclaimed_labels"):
        qu_brats_regions(maps, pred, gt, ignore_unclaimed_labels="yes")


def test_a_missed_enhancing_only_tumour_is_not_a_perfect_score():
    lab = np.zeros((8, 8, 8), np.int64)
    lab[2:5, 2:5, 2:5] = 3
    missed = np.zeros_like(lab)
    zero = np.zeros((3, 8, 8, 8))
    with pytest.raises(ValueError, match="label 3"):
        qu_brats_regions(zero, missed, lab)  # was 0.9917, the score of a perfect map, for a tumour not found
    res = qu_brats_regions(zero, missed, lab, regions="brats2023")
    assert res.regions["ET"].dice_auc == 0.0 and res.score < 0.7


def test_metric_and_handler_refuse_label_maps_with_labels_of_no_region():
    gt, pred, maps = _brats2023_case()
    u = torch.as_tensor(np.stack([maps[k] for k in ("TC", "WT", "ET")]))[None].repeat(2, 1, 1, 1, 1)
    y_pred = torch.as_tensor(np.stack([pred, pred]))[:, None]
    y = torch.as_tensor(np.stack([np.where(gt == 3, 4, gt), gt]))[:, None]  # case 1 holds label 3
    metric = QUBraTSMetric(regions="brats", reduction="none")
    with pytest.raises(ValueError, match=r"label 3 in 2 case\(s\) \(y_pred\[0\], y_pred\[1\]\).*brats2023"):
        metric(y_pred=y_pred, y=y, uncertainty=u)
    with pytest.raises(ValueError, match=r"label 3 in 1 case\(s\) \(y\[1\]\)"):
        metric(y_pred=torch.where(y_pred == 3, 4, y_pred), y=y, uncertainty=u)
    with pytest.raises(ValueError, match=r"label 3 in 1 case\(s\) \(y\[1\]\)"):  # decollated: the case's index
        metric(y_pred=list(torch.where(y_pred == 3, 4, y_pred)), y=list(y), uncertainty=list(u))
    ok = QUBraTSMetric(regions="brats2023", reduction="none")(y_pred=y_pred, y=torch.where(y == 4, 3, y), uncertainty=u)
    want = qu_brats_regions({k: maps[k] for k in ("TC", "WT", "ET")}, pred, gt, regions="brats2023")
    np.testing.assert_allclose(ok[1].numpy(), [want.regions[k].score for k in ("TC", "WT", "ET")], atol=1e-12)
    ignored = QUBraTSMetric(regions="brats", reduction="none", ignore_unclaimed_labels=True)(
        y_pred=y_pred, y=y, uncertainty=u)
    kept = qu_brats_regions({k: maps[k] for k in ("TC", "WT", "ET")}, pred, gt, ignore_unclaimed_labels=True)
    np.testing.assert_allclose(ignored[1].numpy(), [kept.regions[k].score for k in ("TC", "WT", "ET")], atol=1e-12)
    with pytest.raises(TypeError, match="ignore_unclaimed_labels"):
        QUBraTSMetric(regions="brats", ignore_unclaimed_labels=1)
    assert QUBraTS(regions="brats", ignore_unclaimed_labels=True).metric_fn.ignore_unclaimed_labels is True
    assert QUBraTS(regions="brats").metric_fn.ignore_unclaimed_labels is False


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_metric_refuses_a_non_finite_brain_mask_as_the_function_does(bad):
    g = np.zeros((6, 6, 6), bool)
    g[1:4, 1:4, 1:4] = True
    p = np.roll(g, 1, 0)
    u = np.where(p ^ g, 80.0, 10.0)
    bm = np.where(g, bad, 1.0)  # a T1 image with non-finite voxels
    with pytest.raises(ValueError, match="brain_mask contains 27 non-finite"):
        qu_brats(u, p, g, brain_mask=bm)
    with pytest.raises(ValueError, match="brain_mask contains 27 non-finite"):  # NaN voxels silently left the brain
        QUBraTSMetric()(y_pred=torch.as_tensor(p)[None, None], y=torch.as_tensor(g)[None, None],
                        uncertainty=torch.as_tensor(u)[None, None], brain_mask=torch.as_tensor(bm)[None, None])


def test_the_docs_state_how_the_values_agree_with_the_challenge_script():
    gt, pred, maps = _brats2023_case(seed=3)
    g, p = gt > 0, pred > 0
    script = _script_region(maps["WT"], p, g, float32=True)
    ours = qu_brats(maps["WT"], p, g)
    diff = np.abs(np.array([ours.dice_auc, ours.ftp_auc, ours.ftn_auc]) - script)
    assert diff.max() < 1e-6  # float32 rounding of the script's sums and ratios; the counts are the same
    text = " ".join((ROOT / "docs" / "regions.md").read_text().split())
    assert "with identical values" not in text  # they are not identical: ~1e-8 apart on BraTS-like cases
    assert "the values agree to float32 rounding (below 1e-6)" in text


def test_a_spec_with_a_background_region_still_finds_unclaimed_labels():
    """The check counts non-zero and claimed voxels; a region holding label 0 takes the voxel-wise path."""
    gt, pred, maps = _brats2023_case()
    spec = {"BG": [0], "WT": [1, 2, 4]}
    two = {"BG": maps["TC"], "WT": maps["WT"]}
    with pytest.raises(ValueError, match=r"label 3 in 1 case\(s\) \(pred\)"):
        qu_brats_regions(two, pred, np.where(gt == 3, 4, gt), regions=spec)
    res = qu_brats_regions(two, np.where(pred == 3, 4, pred), np.where(gt == 3, 4, gt), regions=spec)
    assert res.regions["BG"].score == pytest.approx(qu_brats(maps["TC"], pred == 0, gt == 0).score, abs=1e-12)
