"""QU-BraTS: against a per-threshold loop written from the definition, a hand-worked 2x2x2 case and sklearn's auc;
edge cases; region specs; the MONAI metric and the ignite handler."""

import math
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from ignite.engine import Engine
from monai.transforms import ConvertToMultiChannelBasedOnBratsClasses
from sklearn.metrics import auc

from monai_unc.handlers import QUBraTS
from monai_unc.metrics import (
    QUBraTSMetric,
    measure_max,
    qu_brats,
    qu_brats_regions,
    qu_brats_thresholds,
    to_qu_brats_range,
)
from monai_unc.regions import BRATS_2023_REGIONS, BRATS_REGIONS, label_to_regions, parse_regions, region_masks
from tests._paths import ROOT

EPS = np.finfo(np.float32).eps


def loop_reference(u, pred, target, brain=None, num_points=40, max_u=100.0):
    """The definition, one threshold at a time (the challenge script's structure, in float64)."""
    thresholds = np.arange(0.0, max_u + EPS, max_u / num_points).tolist()
    thresholds.reverse()
    pred, target = np.asarray(pred, bool), np.asarray(target, bool)
    brain = np.ones_like(pred) if brain is None else np.asarray(brain) > 0
    tp = (pred & target & brain).sum()
    tn = (~pred & ~target & brain).sum()
    dice, ftp, ftn = [], [], []
    for t in thresholds:
        keep = ~(u > t)
        p, g = pred & keep, target & keep
        inter, union = (p & g).sum(), p.sum() + g.sum()
        dice.append(1.0 if inter == 0 and union == 0 else 2.0 * inter / union)
        ftp.append((tp - (pred & target & brain & keep).sum()) / (tp + EPS))
        ftn.append((tn - (~pred & ~target & brain & keep).sum()) / (tn + EPS))
    aucs = [auc(thresholds, c) / max_u for c in (dice, ftp, ftn)]
    return np.array(thresholds), np.array(dice), np.array(ftp), np.array(ftn), aucs


def random_case(shape, seed, grid=True):
    rng = np.random.default_rng(seed)
    u = rng.uniform(0, 100, shape)
    if grid:  # ties with the thresholds and the extremes
        u[rng.random(shape) < 0.15] = rng.choice([0.0, 2.5, 50.0, 97.5, 100.0], size=1)[0]
        u[rng.random(shape) < 0.05] = 100.0
        u[rng.random(shape) < 0.05] = 0.0
    target = rng.random(shape) < 0.3
    pred = target ^ (rng.random(shape) < 0.15)
    brain = rng.random(shape) < 0.8
    return u, pred, target, brain


def assert_matches_loop(res, u, pred, target, brain=None, num_points=40, max_u=100.0):
    th, dice, ftp, ftn, aucs = loop_reference(u, pred, target, brain, num_points, max_u)
    np.testing.assert_array_equal(res.thresholds, th)
    np.testing.assert_allclose(res.dice, dice, atol=1e-12, rtol=0)
    np.testing.assert_allclose(res.ftp, ftp, atol=1e-12, rtol=0)
    np.testing.assert_allclose(res.ftn, ftn, atol=1e-12, rtol=0)
    np.testing.assert_allclose([res.dice_auc, res.ftp_auc, res.ftn_auc], aucs, atol=1e-12, rtol=0)
    assert res.score == pytest.approx((aucs[0] + (1 - aucs[1]) + (1 - aucs[2])) / 3, abs=1e-12)


# ------------------------------------------------------------------------------------------------ definition
def test_thresholds_exclude_max_uncertainty():
    th = qu_brats_thresholds()
    assert len(th) == 40 and th[0] == 97.5 and th[-1] == 0.0 and 100.0 not in th
    np.testing.assert_array_equal(th, np.arange(0, 100, 2.5)[::-1])
    assert np.all(np.diff(th) < 0)
    # where the float32 epsilon survives the addition, max_uncertainty is a threshold (the script's formula)
    assert qu_brats_thresholds(40, 1.0)[0] == 1.0 and len(qu_brats_thresholds(40, 1.0)) == 41
    assert len(qu_brats_thresholds(10)) == 10


@pytest.mark.parametrize("shape", [(37, 41), (17, 19, 13)])
@pytest.mark.parametrize("seed", [0, 1])
def test_equals_the_per_threshold_loop_2d_3d(shape, seed):
    u, pred, target, brain = random_case(shape, seed)
    assert_matches_loop(qu_brats(u, pred, target, brain), u, pred, target, brain)
    assert_matches_loop(qu_brats(u, pred, target), u, pred, target)
    # torch inputs, float32 uncertainty, other grids
    res = qu_brats(torch.from_numpy(u).float(), torch.from_numpy(pred), torch.from_numpy(target.astype(np.uint8)),
                   torch.from_numpy(brain.astype(np.float32) * 300))
    assert_matches_loop(res, u.astype(np.float32), pred, target, brain)
    assert_matches_loop(qu_brats(u / 100, pred, target, num_points=7, max_uncertainty=1.0), u / 100, pred, target,
                        num_points=7, max_u=1.0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([(5, 6), (3, 4, 5)]), st.integers(2, 12))
def test_property_loop_equality_and_curve_shapes(seed, shape, num_points):
    u, pred, target, brain = random_case(shape, seed)
    res = qu_brats(u, pred, target, brain, num_points=num_points)
    assert_matches_loop(res, u, pred, target, brain, num_points=num_points)
    # filtering removes more voxels as the threshold falls: FTP and FTN never decrease along the descending grid
    assert np.all(np.diff(res.ftp) >= -1e-12) and np.all(np.diff(res.ftn) >= -1e-12)
    assert 0 <= res.score <= 1 and 0 <= res.dice_auc <= 1


def test_hand_worked_2x2x2():
    # voxel: u, pred, target, brain -> TP: v0 v1 v4 (brain), FP: v2, FN: v3, TN: v5 v6 (brain), v7 (outside)
    u = np.array([0, 10, 30, 60, 80, 0, 50, 90], float).reshape(2, 2, 2)
    pred = np.array([1, 1, 1, 0, 1, 0, 0, 0], bool).reshape(2, 2, 2)
    target = np.array([1, 1, 0, 1, 1, 0, 0, 0], bool).reshape(2, 2, 2)
    brain = np.array([1, 1, 1, 1, 1, 1, 1, 0]).reshape(2, 2, 2)
    res = qu_brats(u, pred, target, brain, num_points=4)  # thresholds 75, 50, 25, 0
    np.testing.assert_array_equal(res.thresholds, [75, 50, 25, 0])
    # t=75 keeps u <= 75: Dice 2*2/(3+3); t=50 keeps v6 (u == t is kept): 2*2/(3+2); t=25: 1; t=0: 1
    np.testing.assert_allclose(res.dice, [2 / 3, 4 / 5, 1, 1])
    tp, tn = 3 + float(EPS), 2 + float(EPS)  # in float64 (3 + eps == 3 in float32)
    np.testing.assert_allclose(res.ftp, [1 / tp, 1 / tp, 1 / tp, 2 / tp])
    np.testing.assert_allclose(res.ftn, [0, 0, 1 / tn, 1 / tn])
    dice_auc = 25 * ((1 + 1) / 2 + (1 + 0.8) / 2 + (0.8 + 2 / 3) / 2) / 100
    ftp_auc = 25 * ((2 / tp + 1 / tp) / 2 + 1 / tp + 1 / tp) / 100
    ftn_auc = 25 * ((1 / tn + 1 / tn) / 2 + (1 / tn + 0) / 2 + 0) / 100
    assert res.dice_auc == pytest.approx(dice_auc, abs=1e-12)
    assert res.ftp_auc == pytest.approx(ftp_auc, abs=1e-12)
    assert res.ftn_auc == pytest.approx(ftn_auc, abs=1e-12)
    assert res.score == pytest.approx((dice_auc + 1 - ftp_auc + 1 - ftn_auc) / 3, abs=1e-12)
    assert res.score == pytest.approx(0.7263889, abs=1e-6)


def test_one_pass_binning_is_exact_at_and_next_to_every_threshold():
    """The O(1) bin index (estimate + one comparison) equals a binary search, and torch's bucketize path, for values
    on, just below and just above every threshold, in float32 and float64, on uniform and other grids."""
    q = sys.modules["monai_unc.metrics.qu_brats_score"]
    for num_points, max_u in ((40, 100.0), (30, 100.0), (7, 1.0), (13, 3.7)):
        asc = q.qu_brats_thresholds(num_points, max_u)[::-1].copy()
        for dtype in (np.float32, np.float64):
            grid = asc.astype(dtype)
            u = np.concatenate([grid, np.nextafter(grid, dtype(-np.inf)), np.nextafter(grid, dtype(np.inf)),
                                np.random.default_rng(0).uniform(0, max_u, 2000).astype(dtype)])
            u = np.clip(u, 0, max_u).astype(dtype)
            expected = np.searchsorted(asc, u.astype(np.float64), side="left")  # first t >= u, in float64
            np.testing.assert_array_equal(q._bin_index_numpy(u, asc), expected)
            flags = [torch.from_numpy(np.arange(len(u)) % m == 0) for m in (2, 3, 5)]
            counts = [q._curve_counts(torch.from_numpy(u), *flags, asc, backend=bk) for bk in ("numpy", "torch")]
            np.testing.assert_array_equal(counts[0], counts[1])
    odd = np.array([0.0, 1.0, 5.0, 5.5, 9.0])  # not uniform: binary search
    u = np.array([0.0, 0.5, 1.0, 5.2, 5.5, 9.0, 9.0], np.float32)
    np.testing.assert_array_equal(q._bin_index_numpy(u, odd), np.searchsorted(odd, u.astype(np.float64)))


# ------------------------------------------------------------------------------------------------ edge cases
def test_empty_region_in_target_and_prediction():
    u, _, _, brain = random_case((9, 8, 7), 3)
    empty = np.zeros(u.shape, bool)
    res = qu_brats(u, empty, empty, brain)
    np.testing.assert_array_equal(res.dice, 1.0)  # both empty at every threshold
    np.testing.assert_array_equal(res.ftp, 0.0)  # no true positive to filter: 0 / eps
    assert res.dice_auc == pytest.approx(0.975)  # the grid stops at 97.5
    assert_matches_loop(res, u, empty, empty, brain)


def test_all_voxels_above_every_threshold_and_constant_maps():
    u, pred, target, brain = random_case((6, 7, 5), 4)
    res = qu_brats(np.full(u.shape, 100.0), pred, target, brain)  # 100 > 97.5: filtered everywhere
    np.testing.assert_array_equal(res.dice, 1.0)
    tp, tn = (pred & target & brain).sum(), (~pred & ~target & brain).sum()
    np.testing.assert_allclose(res.ftp, tp / (tp + EPS))
    np.testing.assert_allclose(res.ftn, tn / (tn + EPS))
    assert_matches_loop(res, np.full(u.shape, 100.0), pred, target, brain)
    zero = qu_brats(np.zeros(u.shape), pred, target, brain)  # never filtered
    np.testing.assert_array_equal(zero.ftp, 0.0)
    np.testing.assert_array_equal(zero.ftn, 0.0)
    full_dice = 2 * (pred & target).sum() / (pred.sum() + target.sum())
    np.testing.assert_allclose(zero.dice, full_dice)
    const = qu_brats(np.full(u.shape, 40.0), pred, target, brain)
    assert_matches_loop(const, np.full(u.shape, 40.0), pred, target, brain)
    assert np.all(const.dice[const.thresholds >= 40] == full_dice) and np.all(const.dice[const.thresholds < 40] == 1)


def test_errors():
    u, pred, target, brain = random_case((4, 5, 6), 5)
    with pytest.raises(ValueError, match="brain_mask has no voxel"):
        qu_brats(u, pred, target, np.zeros(u.shape))
    with pytest.raises(ValueError, match=r"\[0, max_uncertainty=100\]"):
        qu_brats(u + 1, pred, target)
    with pytest.raises(ValueError, match=r"\[0, max_uncertainty"):
        qu_brats(u - 1, pred, target)
    with pytest.raises(ValueError, match=r"\[0, max_uncertainty=1\]"):
        qu_brats(u, pred, target, max_uncertainty=1.0)
    bad = u.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        qu_brats(bad, pred, target)
    with pytest.raises(ValueError, match="pred must be a binary mask"):
        qu_brats(u, pred * 2, target)
    with pytest.raises(ValueError, match="target must have the shape"):
        qu_brats(u, pred, target[:-1])
    with pytest.raises(ValueError, match="brain_mask must have the shape"):
        qu_brats(u, pred, target, brain[:-1])
    with pytest.raises(ValueError, match="num_points"):
        qu_brats(u, pred, target, num_points=1)
    with pytest.raises(ValueError, match="max_uncertainty"):
        qu_brats(u, pred, target, max_uncertainty=-1.0)
    with pytest.raises(ValueError, match="empty"):
        qu_brats(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3)))


# ------------------------------------------------------------------------------------------------ scale, regions
def test_to_qu_brats_range_and_measure_max():
    p = np.linspace(0, 1, 11).reshape(1, 1, 11)
    h = -(p * np.log(np.clip(p, 1e-300, None)) + (1 - p) * np.log(np.clip(1 - p, 1e-300, None)))
    scaled = to_qu_brats_range(h, measure_max("predictive_entropy", multilabel=True))
    np.testing.assert_allclose(scaled, h / np.log(2) * 100)
    assert scaled.max() == pytest.approx(100.0) and isinstance(scaled, np.ndarray)
    # float rounding just above the maximum is clipped; farther out is an error
    assert float(to_qu_brats_range(torch.tensor([np.log(2) * (1 + 1e-7)]), np.log(2)).max()) == 100.0
    with pytest.raises(ValueError, match="max_value"):
        to_qu_brats_range(np.array([1.0]), np.log(2))
    with pytest.raises(ValueError, match="max_value must be positive"):
        to_qu_brats_range(np.array([1.0]), 0.0)
    assert measure_max("mutual_information", num_classes=4) == pytest.approx(math.log(4))
    assert measure_max("predictive_entropy", num_classes=4, normalize=True) == 1.0
    assert measure_max("one_minus_max_prob", multilabel=True) == 0.5
    assert measure_max("one_minus_max_prob", num_classes=4) == 0.75
    assert measure_max("variance", multilabel=True) == 0.25
    assert measure_max("variance", num_classes=3) == pytest.approx(2 / 9)
    with pytest.raises(ValueError):
        measure_max("pred")


def test_label_to_regions_equals_monai_brats_conversion():
    rng = np.random.default_rng(6)
    label = rng.choice([0, 1, 2, 4], size=(7, 6, 5))
    ours = label_to_regions(label)
    assert list(BRATS_REGIONS) == ["TC", "WT", "ET"]
    np.testing.assert_array_equal(ours, ConvertToMultiChannelBasedOnBratsClasses()(label))
    t = torch.from_numpy(label)[None, None].float()
    batch = label_to_regions(t, "brats", channel_dim=1)
    assert batch.shape == (1, 3, 7, 6, 5) and batch.dtype == torch.bool
    np.testing.assert_array_equal(batch[0].numpy(), ours)
    l23 = np.where(label == 4, 3, label)
    np.testing.assert_array_equal(label_to_regions(l23, BRATS_2023_REGIONS),
                                  ConvertToMultiChannelBasedOnBratsClasses(et_label=3)(l23))
    masks = region_masks(torch.from_numpy(label), '{"WT": [1, 2, 4], "ET": [4]}')
    assert list(masks) == ["WT", "ET"] and masks["ET"].dtype == torch.bool
    np.testing.assert_array_equal(masks["WT"].numpy(), ours[1])
    np.testing.assert_array_equal(region_masks(label.astype(np.float64), "brats")["TC"], ours[0])
    assert parse_regions('{"WT": [1, 2, 4], "ET": [4]}') == {"WT": (1, 2, 4), "ET": (4,)}
    for bad, err in (("nope", ValueError), ({}, ValueError), ({"A": []}, ValueError), ({"A": [-1]}, ValueError),
                     ({"A": [1, 1]}, ValueError), ({"A": [1.5]}, TypeError), ([1, 2], TypeError)):
        with pytest.raises(err):
            parse_regions(bad)
    with pytest.raises(ValueError, match="one channel"):
        label_to_regions(np.zeros((2, 3)), channel_dim=0)
    with pytest.raises(ValueError, match="integer"):
        label_to_regions(np.full((2, 3), 0.5))
    with pytest.raises(ValueError, match="non-negative"):
        region_masks(np.full((2, 3), -1))


def test_regions_wrapper_equals_each_region_by_hand():
    rng = np.random.default_rng(7)
    shape = (11, 9, 8)
    target = rng.choice([0, 1, 2, 4], size=shape, p=[0.5, 0.15, 0.2, 0.15])
    pred = np.where(rng.random(shape) < 0.2, rng.choice([0, 1, 2, 4], size=shape), target)
    u = rng.uniform(0, 100, (3, *shape))
    brain = rng.random(shape) < 0.9
    spec = {"WT": [1, 2, 4], "TC": [1, 4], "ET": [4]}
    res = qu_brats_regions({"WT": u[0], "TC": u[1], "ET": u[2]}, pred, target, spec, brain_mask=brain)
    assert list(res.regions) == ["WT", "TC", "ET"]
    for i, (name, labels) in enumerate(spec.items()):
        by_hand = qu_brats(u[i], np.isin(pred, labels), np.isin(target, labels), brain)
        assert res.regions[name].score == by_hand.score
        assert_matches_loop(res.regions[name], u[i], np.isin(pred, labels), np.isin(target, labels), brain)
    assert res.score == pytest.approx(np.mean([r.score for r in res.regions.values()]))
    flat = res.as_dict()
    assert flat["ET_ftn_auc"] == res.regions["ET"].ftn_auc and flat["mean_score"] == res.score
    # an array of maps in the spec's order and masks per region give the same result
    masks = {n: np.isin(pred, v) for n, v in spec.items()}
    again = qu_brats_regions(u, masks, target, spec, brain_mask=brain)
    assert again.score == res.score
    with pytest.raises(ValueError, match="R=3"):
        qu_brats_regions(u[:2], pred, target, spec)
    with pytest.raises(ValueError, match="no map"):
        qu_brats_regions({"WT": u[0]}, pred, target, spec)


# ------------------------------------------------------------------------------------------------ MONAI classes
def _batch(b=3, shape=(6, 7, 5), seed=8):
    rng = np.random.default_rng(seed)
    label = rng.choice([0, 1, 2, 4], size=(b, 1, *shape))
    pred_label = np.where(rng.random(label.shape) < 0.2, rng.choice([0, 1, 2, 4], size=label.shape), label)
    y = torch.from_numpy(label_to_regions(label, channel_dim=1))
    y_pred = torch.from_numpy(label_to_regions(pred_label, channel_dim=1))
    probs = torch.where(y_pred, 0.8, 0.2).double()
    u = torch.from_numpy(rng.uniform(0, np.log(2), (b, 3, *shape)))
    brain = torch.from_numpy(rng.uniform(-1, 1, (b, 1, *shape)))
    return label, pred_label, y, y_pred, probs, u, brain


def test_metric_equals_functional_batch_and_lists():
    label, pred_label, y, y_pred, probs, u, brain = _batch()
    per_case = np.array([[qu_brats(u[i, r] / np.log(2) * 100, y_pred[i, r], y[i, r], brain[i, 0]).score
                          for r in range(3)] for i in range(3)])
    m = QUBraTSMetric(uncertainty_max=math.log(2), reduction="none")
    m(probs[:2], y[:2], uncertainty=u[:2], brain_mask=brain[:2])  # probabilities, thresholded at 0.5
    m(list(y_pred[2:]), list(y[2:]), uncertainty=list(u[2:]), brain_mask=list(brain[2:]))  # decollated masks
    np.testing.assert_allclose(m.aggregate().numpy(), per_case, atol=1e-12)
    m.reduction = "mean"
    assert float(m.aggregate()) == pytest.approx(per_case.mean(), abs=1e-6)
    assert m.aggregate("mean_batch").numpy() == pytest.approx(per_case.mean(0), abs=1e-6)
    # label maps with a region spec; no brain mask; another component
    lm = QUBraTSMetric(uncertainty_max=math.log(2), regions="brats", component="ftn_auc", reduction="none")
    lm(torch.from_numpy(pred_label), torch.from_numpy(label), uncertainty=u)
    ref = [[qu_brats(u[i, r] / np.log(2) * 100, y_pred[i, r], y[i, r]).ftn_auc for r in range(3)] for i in range(3)]
    np.testing.assert_allclose(lm.aggregate().numpy(), ref, atol=1e-12)


def test_metric_binarises_probabilities_on_the_exact_values():
    """``y_pred > threshold`` on the stored values: at ``threshold=0.3`` a float32 probability float32(0.3) =
    0.30000001 is foreground (rounding 0.3 to float32 first made it background); until review 67 the rule was
    ``>=`` (a float32(0.7) = 0.69999999 at ``threshold=0.7``), now ``>`` as every region foreground decision."""
    y = np.zeros((1, 1, 4, 4), dtype=bool)
    y[..., :2, :] = True
    probs = np.where(y, np.float32(0.9), np.float32(0.1)).astype(np.float32)
    probs[0, 0, 3, 3] = np.float32(0.3)
    assert float(probs[0, 0, 3, 3]) > 0.3
    u = np.zeros((1, 1, 4, 4))
    m = QUBraTSMetric(threshold=0.3, component="dice_auc", reduction="none")
    m(torch.from_numpy(probs), torch.from_numpy(y), uncertainty=torch.from_numpy(u))
    exact = qu_brats(u[0, 0], probs[0, 0].astype(np.float64) > 0.3, y[0, 0]).dice_auc
    rounded = qu_brats(u[0, 0], probs[0, 0] > np.float32(0.3), y[0, 0]).dice_auc
    assert exact != rounded
    assert float(m.aggregate()) == exact


def test_metric_without_cases_is_nan_and_errors():
    m = QUBraTSMetric()
    with pytest.warns(UserWarning, match="no case"):
        assert math.isnan(float(m.aggregate()))
    _, _, y, y_pred, _, u, _ = _batch(b=1)
    with pytest.raises(ValueError, match="uncertainty"):
        m(y_pred, y)
    with pytest.raises(ValueError, match=r"\[0, max_uncertainty"):
        m(y_pred, y, uncertainty=u * 1000)
    with pytest.raises(ValueError, match="same shape"):
        m(y_pred[:, :2], y, uncertainty=u)
    with pytest.raises(ValueError, match="component"):
        QUBraTSMetric(component="auc")


def test_ignite_handler_matches_functional():
    label, _, y, y_pred, probs, u, brain = _batch(b=4, seed=9)
    image = brain.repeat(1, 4, 1, 1, 1)  # four sequences; any channel > 0 is brain
    data = [{"predictive_entropy": u[i:i + 2], "pred": probs[i:i + 2], "label": y[i:i + 2], "image": image[i:i + 2]}
            for i in (0, 2)]
    engine = Engine(lambda e, batch: batch)
    QUBraTS(uncertainty_max=math.log(2), brain_mask_key="image").attach(engine, "qu_brats")
    engine.run(data, max_epochs=1)
    per_case = np.array([[qu_brats(u[i, r] / np.log(2) * 100, y_pred[i, r], y[i, r], (image[i] > 0).any(0)).score
                          for r in range(3)] for i in range(4)])
    assert engine.state.metrics["qu_brats"] == pytest.approx(per_case.mean(), abs=1e-6)
    np.testing.assert_allclose(np.asarray(engine.state.metric_details["qu_brats"]), per_case, atol=1e-12)


def test_docs_regions_example_runs(tmp_path, monkeypatch):
    import re

    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "regions.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 3, "docs/regions.md lost a python example"
    for code in blocks:
        exec(compile(code, "docs/regions.md", "exec"), {"__name__": "__docs__"})


def test_metric_checks_its_inputs_as_the_function_does():
    """threshold NaN or 2.0 gave a perfect prediction 0.0125 instead of 0.975; a soft y was binarised silently
    while qu_brats refuses a soft target; an empty batch failed inside MONAI ("index 0 is out of bounds")."""
    for bad in (float("nan"), 2.0, 0.0, 1.0, -0.5, True, "0.5", None):
        with pytest.raises(ValueError, match="threshold"):
            QUBraTSMetric(threshold=bad)
    mask = torch.zeros(1, 1, 6, 6, 6)
    mask[..., 1:5, 1:5, 1:5] = 1.0
    u = torch.zeros_like(mask)
    metric = QUBraTSMetric(component="dice_auc")
    assert metric(y_pred=mask, y=mask, uncertainty=u).item() == pytest.approx(0.975)
    assert QUBraTSMetric(component="dice_auc", threshold=0.9)(y_pred=0.95 * mask, y=mask, uncertainty=u).item() \
        == pytest.approx(0.975)  # probabilities in y_pred: binarised at the threshold
    with pytest.raises(ValueError, match="target must be a binary mask|y must be a binary mask"):
        metric(y_pred=mask, y=0.3 * mask, uncertainty=u)
    with pytest.raises(ValueError, match="target must be a binary mask"):
        qu_brats(u[0, 0], mask[0, 0] > 0, 0.3 * mask[0, 0])
    with pytest.raises(ValueError, match="probabilities in \\[0, 1\\]"):
        metric(y_pred=1.5 * mask, y=mask, uncertainty=u)
    with pytest.raises(ValueError, match="y_pred is empty"):
        metric(y_pred=mask[:0], y=mask[:0], uncertainty=u[:0])
    with pytest.raises(ValueError, match="empty list"):
        metric(y_pred=[], y=[], uncertainty=[])
    with pytest.raises(ValueError, match="uncertainty must lie in"):
        metric(y_pred=mask, y=mask, uncertainty=u + 101)
