"""Hostile review of QU-BraTS: a per-threshold loop as the challenge script computes it, dtypes, grads, the metric.

The reference re-evaluates every mask at every threshold (``u > t`` filtered, float64 comparisons as the script's
``get_fdata`` maps) with the threshold grid of the pinned definition (DESIGN.md).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.integrate import trapezoid as scipy_trapezoid  # numpy's np.trapezoid is numpy 2 only

from monai_unc.metrics import QUBraTSMetric, qu_brats, qu_brats_regions, qu_brats_thresholds

EPS = float(np.finfo(np.float32).eps)


def qu_brats_loop(u, p, g, b, k=40, max_u=100.0):
    thresholds = qu_brats_thresholds(k, max_u)
    u = np.asarray(u).astype(np.float64)
    tp, tn = (p & g & b).sum(), (~p & ~g & b).sum()
    dice, ftp, ftn = [], [], []
    for t in thresholds:
        keep = u <= t
        pk, gk = p & keep, g & keep
        den = pk.sum() + gk.sum()
        dice.append(1.0 if den == 0 else 2.0 * (pk & gk).sum() / den)
        ftp.append((tp - (p & g & b & keep).sum()) / (tp + EPS))
        ftn.append((tn - (~p & ~g & b & keep).sum()) / (tn + EPS))
    x = thresholds[::-1]
    aucs = [float(scipy_trapezoid(np.array(c)[::-1], x)) / max_u for c in (dice, ftp, ftn)]
    return (aucs[0] + (1 - aucs[1]) + (1 - aucs[2])) / 3, aucs


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_matches_loop_on_grid_values_and_neighbours(dtype):
    """Values on the grid, one ulp either side of it, 0 and max_u, in every float dtype."""
    rng = np.random.default_rng(0)
    for k, max_u in [(40, 100.0), (7, 1.0), (3, 100.0), (10, 255.0)]:
        grid = qu_brats_thresholds(k, max_u)
        for _ in range(10):
            shape = tuple(int(v) for v in rng.integers(2, 7, 3))
            base = rng.choice(np.r_[grid, max_u], size=shape).astype(dtype)
            step = rng.choice([-1, 0, 1], size=shape)
            up, down = np.nextafter(base, dtype(np.inf)), np.nextafter(base, dtype(0))
            u = np.where(step > 0, up, np.where(step < 0, down, base))
            u = np.clip(u, 0, dtype(max_u)).astype(dtype)
            u[u.astype(np.float64) > max_u] = 0  # float16 rounding of max_u
            p, g, b = (rng.random(shape) < q for q in (0.5, 0.5, 0.8))
            b.flat[0] = True
            score, aucs = qu_brats_loop(u, p, g, b, k, max_u)
            for inp in (u, torch.from_numpy(u)):
                res = qu_brats(inp, p, g, brain_mask=b, num_points=k, max_uncertainty=max_u)
                assert res.score == pytest.approx(score, abs=1e-12)
                assert [res.dice_auc, res.ftp_auc, res.ftn_auc] == pytest.approx(aucs, abs=1e-12)


def test_uncertainty_that_requires_grad():
    """A map still attached to the graph (a validation step without ``no_grad``) is scored, not a RuntimeError."""
    torch.manual_seed(0)
    u = (torch.rand(6, 6, 6) * 100).requires_grad_()
    p, g = torch.rand(6, 6, 6) > 0.5, torch.rand(6, 6, 6) > 0.5
    b = torch.ones(6, 6, 6).requires_grad_()
    expected = qu_brats(u.detach(), p, g)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert qu_brats(u, p, g).as_dict() == expected.as_dict()
        assert qu_brats(u, p.float().requires_grad_(), g, brain_mask=b).as_dict() == expected.as_dict()


def test_bfloat16_and_integer_maps():
    rng = np.random.default_rng(1)
    u = rng.integers(0, 101, (5, 5, 5))
    p, g = rng.random((5, 5, 5)) < 0.5, rng.random((5, 5, 5)) < 0.5
    score, _ = qu_brats_loop(u, p, g, np.ones_like(p))
    assert qu_brats(u.astype(np.uint8), p, g).score == pytest.approx(score, abs=1e-12)
    assert qu_brats(torch.from_numpy(u).to(torch.bfloat16), p, g).score == pytest.approx(score, abs=1e-12)


def test_degenerate_regions():
    z, o = np.zeros((4, 4), bool), np.ones((4, 4), bool)
    perfect = qu_brats(np.zeros((4, 4)), o, o)
    assert perfect.dice_auc == pytest.approx(0.975) and perfect.ftp_auc == 0.0 and perfect.ftn_auc == 0.0
    empty = qu_brats(np.zeros((4, 4)), z, z)  # no tumour, none predicted: Dice 1 everywhere, no TP
    assert empty.score == pytest.approx((0.975 + 2) / 3)
    everything_filtered = qu_brats(np.full((4, 4), 100.0), o, o)  # 100 is above every threshold
    assert everything_filtered.ftp_auc == pytest.approx(0.975 * 16 / (16 + EPS))
    for res in (perfect, empty, everything_filtered):
        assert all(math.isfinite(v) for v in res.as_dict().values())


def test_metric_matches_function_and_accumulates():
    torch.manual_seed(2)
    p = torch.rand(3, 2, 5, 5, 5) > 0.5
    g = torch.rand(3, 2, 5, 5, 5) > 0.5
    u = torch.rand(3, 2, 5, 5, 5) * 100
    ref = torch.tensor([[qu_brats(u[i, j], p[i, j], g[i, j]).score for j in range(2)] for i in range(3)])
    metric = QUBraTSMetric(reduction="mean_batch")
    metric(y_pred=p[:2], y=g[:2], uncertainty=u[:2])
    metric(y_pred=list(p[2:]), y=list(g[2:]), uncertainty=list(u[2:]))
    # MONAI's do_metric_reduction returns float32 means of the float64 per-case values
    close = {"atol": 1e-6, "rtol": 0.0, "check_dtype": False}
    torch.testing.assert_close(metric.aggregate(), ref.mean(0), **close)
    torch.testing.assert_close(metric.aggregate(), ref.mean(0), **close)  # aggregate twice
    torch.testing.assert_close(metric.aggregate("none"), ref, **close)
    metric.reset()
    with pytest.warns(UserWarning, match="no case"):
        assert math.isnan(float(metric.aggregate()))
    metric(y_pred=p[:1], y=g[:1], uncertainty=u[:1].requires_grad_())
    torch.testing.assert_close(metric.aggregate(), ref[0], **close)


@pytest.mark.parametrize("value", [True, "1", None])
def test_scale_arguments_must_be_numbers(value):
    """``uncertainty_max=True`` was read as 1 and ``"1"`` raised a TypeError that named nothing."""
    from monai_unc.metrics import to_qu_brats_range

    with pytest.raises(TypeError, match="max_value"):
        to_qu_brats_range(np.array([0.0, 0.5]), max_value=value)
    if value is not None:  # None is the default: no rescaling
        with pytest.raises(TypeError, match="uncertainty_max"):
            QUBraTSMetric(uncertainty_max=value)
    with pytest.raises(TypeError, match="max_uncertainty"):
        qu_brats(np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 2)), max_uncertainty=value)
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="uncertainty_max"):
            QUBraTSMetric(uncertainty_max=bad)


def test_map_on_a_unit_scale_warns():
    """A map on [0, 1] given for the [0, 100] scale: only the threshold 0 filters voxels, so the score ignores the
    map's gradation (0.90 instead of 0.52 for the rescaled map) -- warned about, not silent."""
    rng = np.random.default_rng(0)
    u01 = rng.random((6, 6, 6))
    p, g = rng.random((6, 6, 6)) < 0.5, rng.random((6, 6, 6)) < 0.5
    with pytest.warns(UserWarning, match=r"at most 2\.5, the smallest positive threshold.*to_qu_brats_range"):
        res = qu_brats(u01, p, g)
    score, _ = qu_brats_loop(u01, p, g, np.ones_like(p))
    assert res.score == pytest.approx(score, abs=1e-12)  # the number is the challenge's all the same
    with pytest.warns(UserWarning, match="smallest positive threshold"):  # the region and metric paths too
        qu_brats_regions({"WT": u01}, {"WT": p}, {"WT": g}, regions={"WT": (1,)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        qu_brats(u01 * 100, p, g)  # rescaled
        qu_brats(np.zeros((6, 6, 6)), p, g)  # certain everywhere
        qu_brats(100.0 * (p ^ g), p, g)  # uncertain exactly at the errors
        qu_brats(2.5000001 * (p ^ g), p, g)  # above the first positive threshold: filtered there too
    with pytest.warns(UserWarning, match="smallest positive threshold"):
        qu_brats(2.5 * (p ^ g), p, g)  # at it: kept there, filtered only at 0
    batch = {"y_pred": torch.from_numpy(p)[None, None], "y": torch.from_numpy(g)[None, None],
             "uncertainty": torch.from_numpy(u01)[None, None]}
    with pytest.warns(UserWarning, match="smallest positive threshold"):
        QUBraTSMetric()(**batch)
    with warnings.catch_warnings():  # the scale declared and rescaled by the metric: a confident map, no warning
        warnings.simplefilter("error")
        QUBraTSMetric(uncertainty_max=100.0)(**{**batch, "uncertainty": batch["uncertainty"] * 2})


def test_rescaled_map_that_requires_grad_scores_without_a_warning():
    """A map still attached to the graph, rescaled from its declared scale (``to_qu_brats_range``,
    ``QUBraTSMetric(uncertainty_max=...)``), is scored as the detached map is, without torch's "Converting a tensor
    with requires_grad=True to a scalar" warning (raised by the range check; found by hostile testing)."""
    from monai_unc.metrics import to_qu_brats_range

    torch.manual_seed(3)
    u = (torch.rand(1, 2, 5, 5, 5) * math.log(2)).requires_grad_()
    p, g = torch.rand(1, 2, 5, 5, 5) > 0.5, torch.rand(1, 2, 5, 5, 5) > 0.5
    expected = QUBraTSMetric(uncertainty_max=math.log(2))(y_pred=p, y=g, uncertainty=u.detach())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = to_qu_brats_range(u, max_value=math.log(2))
        torch.testing.assert_close(scaled, to_qu_brats_range(u.detach(), max_value=math.log(2)))
        got = QUBraTSMetric(uncertainty_max=math.log(2))(y_pred=p, y=g, uncertainty=u)
        got_list = QUBraTSMetric(uncertainty_max=math.log(2))(y_pred=list(p), y=list(g), uncertainty=list(u))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_list, expected)


@pytest.mark.parametrize("grid", ["numpy2", "numpy1"])
def test_no_threshold_above_the_top_of_a_small_scale(grid):
    """Found by hostile testing: the script's ``eps`` is absolute, so with ``max_uncertainty=1e-6`` the range ran on
    to 1.1 ``max_u`` (45 thresholds) and a perfect map scored 1.0333. No grid has a threshold above ``max_u``; at
    100 the grids are unchanged (40 and 41 thresholds)."""
    from monai_unc.metrics import qu_brats, qu_brats_thresholds

    for max_u in (1e-9, 1e-6, 1e-3, 0.1, math.log(2), 1.0, 3.0, 100.0, 1e4, 1e10):
        t = qu_brats_thresholds(40, max_u, grid)
        assert t.max() <= max_u * (1 + 1e-12) and t.min() == 0.0 and len(t) in (40, 41), (max_u, len(t))
    assert len(qu_brats_thresholds(grid=grid)) == (41 if grid == "numpy1" else 40)
    target = torch.zeros(8, 8, 8, dtype=torch.bool)
    target[2:6, 2:6, 2:6] = True
    score = qu_brats(torch.zeros(8, 8, 8), target, target, max_uncertainty=1e-6, grid=grid).score
    assert score == pytest.approx(1.0, abs=1e-12)  # 41 thresholds from 1e-6 to 0 with either grid here
