"""QU-BraTS threshold grids: ``grid="numpy1"`` (the challenge script under numpy 1.x, as run in 2020) next to the
default ``grid="numpy2"``.

The numpy1 grid is checked against ``numpy.arange`` with the stop written out in float64, its scores against a
per-threshold loop written here (filtered Dice, FTP, FTN, the trapezoid written out, divided by ``max_u``); the
option is followed through ``qu_brats_regions``, ``QUBraTSMetric`` and the ignite handler, and bad values are
refused.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from ignite.engine import Engine

from monai_unc.handlers import QUBraTS
from monai_unc.metrics import (
    QU_BRATS_GRIDS,
    QUBraTSMetric,
    qu_brats,
    qu_brats_regions,
    qu_brats_thresholds,
)
from monai_unc.regions import BRATS_REGIONS, region_masks

EPS32 = np.finfo(np.float32).eps

#: (num_points, max_uncertainty): the challenge's, scales where float32 drops the epsilon and where it does not
SCALES = [(40, 100.0), (40, 1.0), (40, 1.5), (40, 2.0), (40, 3.0), (40, 3.9), (40, 4.0), (10, 100.0), (7, 0.3),
          (4, 1.0), (13, 37.7), (2, 5.0), (100, 100.0)]


def float64_grid(num_points: int, max_u: float) -> np.ndarray:
    """The script's ``np.arange(0, max_u + np.finfo(np.float32).eps, max_u / K)`` under numpy 1.x: float64."""
    return np.arange(0.0, np.float64(max_u) + np.float64(EPS32), max_u / num_points)[::-1]


def loop_reference(u, pred, target, brain, thresholds, max_u):
    """Filtered Dice, FTP and FTN one threshold at a time; AUCs with the trapezoid written out."""
    pred, target = np.asarray(pred, bool), np.asarray(target, bool)
    brain = np.ones_like(pred) if brain is None else np.asarray(brain) > 0
    tp = float((pred & target & brain).sum())
    tn = float((~pred & ~target & brain).sum())
    dice, ftp, ftn = [], [], []
    for t in thresholds:  # descending
        keep = u <= t
        p, g = pred & keep, target & keep
        denom = p.sum() + g.sum()
        dice.append(1.0 if denom == 0 else 2.0 * (p & g).sum() / denom)
        ftp.append((tp - (pred & target & brain & keep).sum()) / (tp + float(EPS32)))
        ftn.append((tn - (~pred & ~target & brain & keep).sum()) / (tn + float(EPS32)))

    def area(curve):
        x, y = list(thresholds)[::-1], list(curve)[::-1]  # ascending
        return sum((x[i + 1] - x[i]) * (y[i] + y[i + 1]) / 2.0 for i in range(len(x) - 1)) / max_u

    aucs = [area(c) for c in (dice, ftp, ftn)]
    score = (aucs[0] + (1 - aucs[1]) + (1 - aucs[2])) / 3
    return np.array(dice), np.array(ftp), np.array(ftn), aucs, score


def random_case(shape, seed, max_u=100.0):
    rng = np.random.default_rng(seed)
    u = rng.uniform(0, max_u, shape)
    u[rng.random(shape) < 0.1] = max_u  # on the top threshold of the numpy1 grid (kept there, filtered below)
    u[rng.random(shape) < 0.1] = 0.975 * max_u
    u[rng.random(shape) < 0.05] = 0.0
    target = rng.random(shape) < 0.3
    pred = target ^ (rng.random(shape) < 0.15)
    brain = rng.random(shape) < 0.8
    return u, pred, target, brain


def perfect_case():
    target = torch.zeros(8, 8, 8, dtype=torch.bool)
    target[2:6, 2:6, 2:6] = True
    return torch.zeros(8, 8, 8), target


# ------------------------------------------------------------------------------------------------------ the grid
@pytest.mark.parametrize(("num_points", "max_u"), SCALES)
def test_numpy1_grid_equals_the_float64_arange(num_points, max_u):
    got = qu_brats_thresholds(num_points, max_u, grid="numpy1")
    np.testing.assert_array_equal(got, float64_grid(num_points, max_u))
    assert got.dtype == np.float64 and np.all(np.diff(got) < 0)
    # float64 keeps the epsilon: K + 1 thresholds from max_u (up to the float error of arange's last step) to 0
    assert len(got) == num_points + 1 and got[-1] == 0.0
    assert got[0] == pytest.approx(max_u, rel=1e-12)


@pytest.mark.parametrize(("num_points", "max_u"), SCALES)
def test_numpy2_grid_is_unchanged(num_points, max_u):
    float32_stop = np.float32(max_u) + np.float32(EPS32)
    ref = np.arange(0.0, float32_stop, max_u / num_points, dtype=np.float64)[::-1]
    np.testing.assert_array_equal(qu_brats_thresholds(num_points, max_u), ref)
    np.testing.assert_array_equal(qu_brats_thresholds(num_points, max_u, grid="numpy2"), ref)


def test_the_challenge_grid_has_41_thresholds_with_100():
    t1 = qu_brats_thresholds(grid="numpy1")
    assert len(t1) == 41 and t1[0] == 100.0 and t1[1] == 97.5 and t1[-1] == 0.0
    np.testing.assert_array_equal(t1, np.arange(41)[::-1] * 2.5)
    t2 = qu_brats_thresholds()
    assert len(t2) == 40 and t2[0] == 97.5 and 100.0 not in t2
    np.testing.assert_array_equal(t1[1:], t2)  # the grids differ by the threshold 100 alone
    assert QU_BRATS_GRIDS == ("numpy2", "numpy1")


# ------------------------------------------------------------------------------------------------------ scores
def test_a_perfect_map_scores_one_under_numpy1():
    u, target = perfect_case()
    res1 = qu_brats(u, target, target, grid="numpy1")
    assert res1.score == 1.0 and res1.dice_auc == 1.0 and res1.ftp_auc == 0.0 and res1.ftn_auc == 0.0
    assert len(res1.thresholds) == 41 and len(res1.dice) == len(res1.ftp) == len(res1.ftn) == 41
    res2 = qu_brats(u, target, target)
    assert res2.score == pytest.approx(2.975 / 3, abs=1e-15) and round(res2.score, 4) == 0.9917
    assert res2.dice_auc == pytest.approx(0.975, abs=1e-15)
    assert qu_brats(u, target, target, grid="numpy2").as_dict() == res2.as_dict()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("num_points", "max_u"), [(40, 100.0), (7, 1.0), (40, 1.5), (13, 37.7)])
def test_numpy1_scores_equal_the_per_threshold_loop(seed, num_points, max_u):
    u, pred, target, brain = random_case((19, 17, 11), seed, max_u)
    thresholds = float64_grid(num_points, max_u)
    for b in (brain, None):
        res = qu_brats(u, pred, target, b, num_points=num_points, max_uncertainty=max_u, grid="numpy1")
        dice, ftp, ftn, aucs, score = loop_reference(u, pred, target, b, thresholds, max_u)
        np.testing.assert_array_equal(res.thresholds, thresholds)
        np.testing.assert_allclose(res.dice, dice, atol=1e-12, rtol=0)
        np.testing.assert_allclose(res.ftp, ftp, atol=1e-12, rtol=0)
        np.testing.assert_allclose(res.ftn, ftn, atol=1e-12, rtol=0)
        np.testing.assert_allclose([res.dice_auc, res.ftp_auc, res.ftn_auc], aucs, atol=1e-12, rtol=0)
        assert res.score == pytest.approx(score, abs=1e-12)
    # a float32 map (its values compared with the float64 thresholds, as the script compares them)
    u32 = u.astype(np.float32)
    u32[u32.astype(np.float64) > max_u] = np.nextafter(np.float32(max_u), np.float32(0))  # 37.7 rounds up in float32
    res = qu_brats(torch.from_numpy(u32), pred, target, brain, num_points=num_points, max_uncertainty=max_u,
                   grid="numpy1")
    assert res.score == pytest.approx(loop_reference(u32, pred, target, brain, thresholds, max_u)[4], abs=1e-12)


def test_numpy1_adds_the_last_trapezoid_to_the_default():
    """On the challenge's scale the numpy1 areas are the default's plus the segment from 97.5 to 100."""
    u, pred, target, brain = random_case((23, 21), 5)
    a = qu_brats(u, pred, target, brain)
    b = qu_brats(u, pred, target, brain, grid="numpy1")
    np.testing.assert_array_equal(b.dice[1:], a.dice)
    for name, curve in (("dice_auc", b.dice), ("ftp_auc", b.ftp), ("ftn_auc", b.ftn)):
        assert getattr(b, name) == pytest.approx(getattr(a, name) + 2.5 * (curve[0] + curve[1]) / 2 / 100, abs=1e-12)
    # at 100 every voxel is kept: nothing is filtered, the Dice is that of the whole masks
    assert b.ftp[0] == 0.0 and b.ftn[0] == 0.0
    assert b.dice[0] == pytest.approx(2 * (pred & target).sum() / (pred.sum() + target.sum()))


def test_both_counting_backends_agree_on_the_numpy1_grid():
    u, pred, target, brain = random_case((15, 13, 9), 7)
    asc = qu_brats_thresholds(grid="numpy1")[::-1].copy()
    flags = [torch.from_numpy(x) for x in (pred, target, brain)]
    module = sys.modules["monai_unc.metrics.qu_brats_score"]  # the module (the package's name is the function)
    counts = [module._curve_counts(torch.from_numpy(u), *flags, asc, backend=bk) for bk in ("numpy", "torch")]
    np.testing.assert_array_equal(counts[0], counts[1])


# --------------------------------------------------------------------------------------- regions, metric, handler
def _brats_case(seed=3):
    rng = np.random.default_rng(seed)
    label = np.zeros((10, 9, 8), dtype=int)
    label[2:8, 2:7, 2:6] = 2
    label[3:6, 3:6, 3:5] = 1
    label[4:5, 4:5, 3:5] = 4
    pred = label.copy()
    flip = rng.random(label.shape) < 0.1
    pred[flip] = rng.choice([0, 1, 2, 4], size=int(flip.sum()))
    u = rng.uniform(0, 100, (3, *label.shape))
    u[:, rng.random(label.shape) < 0.1] = 100.0
    return u, pred, label


def test_qu_brats_regions_passes_the_grid():
    u, pred, label = _brats_case()
    pm, tm = region_masks(torch.from_numpy(pred), BRATS_REGIONS), region_masks(torch.from_numpy(label), BRATS_REGIONS)
    for grid in QU_BRATS_GRIDS:
        res = qu_brats_regions(u, pred, label, grid=grid)
        for i, name in enumerate(BRATS_REGIONS):
            one = qu_brats(u[i], pm[name], tm[name], grid=grid)
            assert res.regions[name].as_dict() == one.as_dict()
            assert len(res.regions[name].thresholds) == (41 if grid == "numpy1" else 40)
        assert res.score == pytest.approx(np.mean([r.score for r in res.regions.values()]), abs=1e-15)
    assert qu_brats_regions(u, pred, label, grid="numpy1").score > qu_brats_regions(u, pred, label).score


def test_metric_passes_the_grid():
    cases = [_brats_case(s) for s in (3, 4)]
    label = torch.stack([torch.from_numpy(c[2])[None] for c in cases])
    pred = torch.stack([torch.from_numpy(c[1])[None] for c in cases])
    u = torch.stack([torch.from_numpy(c[0]) for c in cases])
    for grid in QU_BRATS_GRIDS:
        metric = QUBraTSMetric(regions="brats", reduction="none", grid=grid)
        assert metric.grid == grid
        metric(y_pred=pred, y=label, uncertainty=u)
        got = metric.aggregate().numpy()
        ref = [[r.score for r in qu_brats_regions(c[0], c[1], c[2], grid=grid).regions.values()] for c in cases]
        np.testing.assert_allclose(got, ref, atol=1e-12, rtol=0)
    assert QUBraTSMetric().grid == "numpy2"
    # a perfect case: 1.0 under numpy1, 0.9917 by default
    perfect = QUBraTSMetric(regions="brats", grid="numpy1")
    perfect(y_pred=label, y=label, uncertainty=torch.zeros_like(u))
    assert float(perfect.aggregate()) == 1.0
    default = QUBraTSMetric(regions="brats")
    default(y_pred=label, y=label, uncertainty=torch.zeros_like(u))
    assert round(float(default.aggregate()), 4) == 0.9917


def test_handler_passes_the_grid():
    u, pred, label = _brats_case()
    batch = {"predictive_entropy": torch.from_numpy(u)[None], "pred": torch.from_numpy(pred)[None, None],
             "label": torch.from_numpy(label)[None, None]}
    scores = {}
    for grid in QU_BRATS_GRIDS:
        handler = QUBraTS(regions="brats", grid=grid)
        assert handler.metric_fn.grid == grid
        engine = Engine(lambda e, b: b)
        handler.attach(engine, "qu_brats")
        engine.run([batch], max_epochs=1)
        scores[grid] = engine.state.metrics["qu_brats"]
        # ignite keeps the mean in float32
        assert scores[grid] == pytest.approx(qu_brats_regions(u, pred, label, grid=grid).score, abs=1e-6)
    assert scores["numpy1"] != scores["numpy2"]
    assert QUBraTS().metric_fn.grid == "numpy2"


# -------------------------------------------------------------------------------------------------- refusals
BAD_VALUES = ["numpy3", "NUMPY1", "numpy 1", "", "float64"]
BAD_TYPES = [None, 1, 2.0, b"numpy1", ("numpy1",), True]


@pytest.mark.parametrize("bad", BAD_VALUES)
def test_bad_grid_values_are_refused(bad):
    u, target = perfect_case()
    message = r"grid must be one of \('numpy2', 'numpy1'\), got "
    with pytest.raises(ValueError, match=message):
        qu_brats_thresholds(grid=bad)
    with pytest.raises(ValueError, match=message):
        qu_brats(u, target, target, grid=bad)
    with pytest.raises(ValueError, match=message):
        qu_brats_regions(np.zeros((3, 4, 4, 4)), np.zeros((4, 4, 4), int), np.zeros((4, 4, 4), int), grid=bad)
    with pytest.raises(ValueError, match=message):
        QUBraTSMetric(grid=bad)
    with pytest.raises(ValueError, match=message):
        QUBraTS(grid=bad)


@pytest.mark.parametrize("bad", BAD_TYPES)
def test_bad_grid_types_are_refused(bad):
    u, target = perfect_case()
    message = r"grid must be a string, one of \('numpy2', 'numpy1'\), got "
    with pytest.raises(TypeError, match=message):
        qu_brats_thresholds(grid=bad)
    with pytest.raises(TypeError, match=message):
        qu_brats(u, target, target, grid=bad)
    with pytest.raises(TypeError, match=message):
        qu_brats_regions(np.zeros((3, 4, 4, 4)), np.zeros((4, 4, 4), int), np.zeros((4, 4, 4), int), grid=bad)
    with pytest.raises(TypeError, match=message):
        QUBraTSMetric(grid=bad)


def test_the_grid_is_checked_before_the_data():
    """A bad grid is named even when the maps are bad too (no scoring work first)."""
    with pytest.raises(ValueError, match="grid must be one of"):
        qu_brats(np.full((3, 3), 500.0), np.zeros((3, 3)), np.zeros((3, 3)), grid="numpy3")
    with pytest.raises(ValueError, match="grid must be one of"):
        qu_brats_regions(np.zeros((2, 3, 3)), np.zeros((3, 3), int), np.zeros((3, 3), int), grid="numpy3")
