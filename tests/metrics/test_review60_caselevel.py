"""Hostile review 60 of the case-level and image-level metrics.

Complex inputs: every case metric refuses complex numbers with a ``TypeError`` naming the argument (the package's
convention, :func:`monai_unc._utils.real_array`); these lost their imaginary part (and label maps their fractional
real part) without a word, or raised torch's ``NotImplementedError``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics import (
    QUBraTSMetric,
    StreamingQuality,
    area_under_referral_curve,
    compare_metric_values,
    compare_uncertainty_maps,
    conformal_interval,
    dice,
    dice_to_mean,
    ged,
    ged_detection,
    ged_nonempty_iou,
    holm_correction,
    iou,
    ncc,
    qu_brats,
    rater_variance,
    to_qu_brats_range,
)
from monai_unc.metrics.overlap import (
    class_counts,
    dice_from_counts,
    iou_from_counts,
    label_gram,
    mask_gram,
    overlap_counts,
    overlap_ratio,
)

#: a label map whose real parts are labels and whose imaginary parts say they are not (the cast dropped them)
_LABELS = np.array([[[0, 1], [1, 2]]])
_COMPLEX_LABELS = _LABELS + 0.5j


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize(
    "call, name",
    [
        (lambda x, y: dice(x, y), "pred"),
        (lambda x, y: iou(y, x), "target"),
        (lambda x, y: overlap_counts(x.reshape(1, -1), y.reshape(1, -1)), "pred"),
        (lambda x, y: class_counts(x.reshape(1, -1)), "labels"),
        (lambda x, y: label_gram(x.reshape(1, -1), 1), "labels"),
        (lambda x, y: rater_variance(x), "raters"),
        (lambda x, y: ged(x, y), "references"),
        (lambda x, y: ged(y, x, distance="dice"), "samples"),
        (lambda x, y: ged_nonempty_iou(x, y), "references"),
        (lambda x, y: ged_detection(y, x), "samples"),
    ],
)
def test_complex_label_maps_are_refused(call, name, lib):
    # the cast to int64 dropped the imaginary part and truncated the real part: a complex map with labels 0.1, 0.5,
    # 0.9 read as all background, and Dice / GED of such maps came out as a perfect match
    x, y = _COMPLEX_LABELS, _LABELS
    if lib == "torch":
        x, y = torch.as_tensor(x), torch.as_tensor(y)
    with pytest.raises(TypeError, match=name):
        call(x, y)


def test_complex_masks_and_references_are_refused():
    with pytest.raises(TypeError, match="masks"):
        mask_gram(np.array([[1, 0], [0, 1]]) + 0j)
    probs = torch.softmax(torch.randn(2, 1, 3, 2, 2), dim=2)
    with pytest.raises(TypeError, match="reference"):
        dice_to_mean(probs, reference=torch.as_tensor(_COMPLEX_LABELS))
    with pytest.raises(TypeError, match="reference"):
        StreamingQuality(reference=torch.as_tensor(_COMPLEX_LABELS)).update(probs[0])


@pytest.mark.parametrize("fn", [dice_from_counts, iou_from_counts])
def test_complex_counts_are_refused(fn):
    # 1 + 1j "voxels" in common gave a Dice of 0.5
    with pytest.raises(TypeError, match="intersection"):
        fn(np.array([1 + 1j]), np.array([2]), np.array([2]))
    with pytest.raises(TypeError, match="size_b"):
        fn(np.array([1]), np.array([2]), np.array([2 + 0j]))
    with pytest.raises(TypeError, match="numerator"):
        overlap_ratio(np.array([1 + 1j]), np.array([2]))


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_ncc_refuses_complex_maps(lib):
    # a complex torch map was correlated on its real part without any warning (numpy: torch's cast warning only)
    u = np.array([[0.1, 0.5], [0.2, 0.9]]) + 1j
    ref = np.array([[0.3, 0.1], [0.2, 0.7]])
    if lib == "torch":
        u, ref = torch.as_tensor(u), torch.as_tensor(ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cast warning either: refused before any cast
        with pytest.raises(TypeError, match="uncertainty"):
            ncc(u, ref)
        with pytest.raises(TypeError, match="target"):
            ncc(ref, u)


def test_qu_brats_refuses_complex_maps():
    masks = np.eye(2, dtype=bool)
    u = np.array([[10.0, 50.0], [20.0, 90.0]]) + 1j
    with pytest.raises(TypeError, match="uncertainty"):
        qu_brats(u, masks, masks)
    with pytest.raises(TypeError, match="uncertainty"):
        to_qu_brats_range(u / 100, max_value=1.0)
    with pytest.raises(TypeError, match="brain_mask"):  # was torch's NotImplementedError ("gt_cpu" for complex)
        qu_brats(np.zeros((2, 2)), masks, masks, brain_mask=np.ones((2, 2)) + 1j)
    metric = QUBraTSMetric()
    pred = torch.ones(1, 1, 2, 2)
    with pytest.raises(TypeError, match="uncertainty"):
        metric(y_pred=pred, y=pred, uncertainty=torch.as_tensor(u)[None, None])
    with pytest.raises(TypeError, match="brain_mask"):
        metric(y_pred=pred, y=pred, uncertainty=torch.zeros(1, 1, 2, 2), brain_mask=torch.ones(1, 1, 2, 2) + 1j)
    with pytest.raises(TypeError, match="uncertainty"):
        QUBraTSMetric(uncertainty_max=1.0)(y_pred=pred, y=pred, uncertainty=torch.as_tensor(u / 100)[None, None])


def test_comparison_statistics_refuse_complex_values():
    # numpy's ComplexWarning only: the Holm-adjusted p-value of 0.01 + 0.5j was 0.02
    with pytest.raises(TypeError, match="p_values"):
        holm_correction(np.array([0.01 + 0.5j, 0.2]))
    with pytest.raises(TypeError, match="values_a"):
        compare_metric_values({"m": np.array([1 + 1j, 2.0, 3.0])}, {"m": np.array([1.0, 2.0, 3.0])}, True)
    with pytest.raises(TypeError, match="values_b"):
        compare_metric_values({"m": np.array([1.0, 2.0, 3.0])}, {"m": np.array([1.0, 2.0, 3.0]) + 0j}, True)


def test_conformal_interval_of_an_estimate_beyond_the_bounds_is_undefined_not_a_point():
    # q = 0.05 from these pairs; an estimate given in percent (85) was clipped to the interval [1.0, 1.0]: "the real
    # Dice is certainly 1", where no truth in the bounds lies within q of it (the conformal set is empty)
    cal_e, cal_d = [0.9, 0.8, 0.7], [0.85, 0.8, 0.5]
    with pytest.warns(UserWarning, match="2 estimate"):
        iv = conformal_interval(np.array([85.0, 0.9, -0.3, 1.03]), cal_e, cal_d, alpha=0.5)
    assert iv.quantile == pytest.approx(0.05)
    assert np.isnan(iv.low[[0, 2]]).all() and np.isnan(iv.high[[0, 2]]).all()
    # in the bounds, or beyond them by at most q: clipped as before (the truths within q of it are in the interval)
    assert iv.low[1] == pytest.approx(0.85) and iv.high[1] == pytest.approx(0.95)
    assert iv.low[3] == pytest.approx(0.98) and iv.high[3] == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        edge = conformal_interval(1.05, cal_e, cal_d, alpha=0.5)  # exactly q beyond: the truth 1.0 is within q
    assert edge.low == pytest.approx(1.0) and edge.high == 1.0


def _three_cases():
    target = torch.zeros(3, 8, 8, dtype=torch.long)
    target[:, 2:6, 2:6] = 1
    pred = target.clone()
    pred[:, 2:6, 6] = 1
    error = (pred != target).double()[:, None]
    grid = torch.linspace(0, 1, 64, dtype=torch.float64).reshape(1, 1, 8, 8)
    return 0.3 * error + 0.7 * grid, 0.2 * error + 0.8 * grid.flip(-1), pred, target


@pytest.mark.parametrize(
    "spacing, error, match",
    [
        ([["1", "1"]] * 3, TypeError, "spacing"),  # text rows were parsed and scored as 1 mm
        ([[1, 1], [1, "x"], [1, 1]], TypeError, "spacing"),  # numpy's "could not convert string to float: 'x'"
        ([(1, 1), (1, 1, 1), (1, 1)], ValueError, "spacing"),  # numpy's "inhomogeneous shape", naming nothing
        ([[1 + 1j, 1]] * 3, TypeError, "spacing"),
        ([[True, 1.0]] * 3, TypeError, "spacing"),  # the float array [1.0, 1.0]
    ],
)
def test_compare_uncertainty_maps_checks_per_case_spacings(spacing, error, match):
    a, b, pred, target = _three_cases()
    with pytest.raises(error, match=match):
        compare_uncertainty_maps(["BUC"], a, b, pred=pred, target=target, spacing=spacing)
    rows = compare_uncertainty_maps(["BUC"], a, b, pred=pred, target=target, spacing=[[1.0, 1.0]] * 3)
    assert rows.metrics["BUC"].n_cases == 3


def test_area_under_referral_curve_says_when_the_metric_is_undefined_at_rates_that_keep_cases():
    # a cohort metric undefined on small retained sets (here: fewer than three cases) left those rates out of the
    # area without a word, so the area covered [0, 0.4] instead of [0, 0.8]: not comparable with a method whose
    # metric stays defined (the normalised value too is over another range)
    u = np.array([0.1, 0.4, 0.2, 0.8, 0.5])
    v = np.array([0.9, 0.6, 0.8, 0.3, 0.5])

    def metric(idx):
        return float(v[idx].mean()) if idx.size >= 3 else float("nan")

    with pytest.warns(UserWarning, match=r"2 referral rate\(s\).*\[0, 0\.4\]"):
        area = area_under_referral_curve(u, metric, ties="order")
    assert area == pytest.approx(area_under_referral_curve(u, v, taus=[0.0, 0.2, 0.4]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a metric defined at every rate: no warning
        area_under_referral_curve(u, lambda idx: float(v[idx].mean()), ties="order")


def _qu_brats_loop(u, pred, target, thresholds, max_u):
    """The paper's definition, one threshold at a time (u > t filtered; float64 ratios; trapezoids over t / max_u)."""
    u = np.asarray(u, dtype=np.float64)
    tp, tn = (pred & target).sum(), (~pred & ~target).sum()
    curves = []
    for t in thresholds:
        keep = u <= t
        den = (pred & keep).sum() + (target & keep).sum()
        dice_t = 1.0 if den == 0 else 2 * (pred & target & keep).sum() / den
        ftp = (tp - (pred & target & keep).sum()) / (tp + np.finfo(np.float32).eps)
        ftn = (tn - (~pred & ~target & keep).sum()) / (tn + np.finfo(np.float32).eps)
        curves.append((dice_t, ftp, ftn))
    d, f, n = np.array(curves).T
    asc = thresholds[::-1]
    auc = [np.trapezoid(c[::-1], asc) / max_u for c in (d, f, n)]
    return (auc[0] + (1 - auc[1]) + (1 - auc[2])) / 3


@pytest.mark.parametrize("grid", ["numpy2", "numpy1"])
def test_qu_brats_takes_a_float32_map_at_the_top_of_a_scale_float32_rounds_up(grid):
    # a binary entropy in nats computed in float32 (its maximum, at p = 0.5, is float32(log 2) = 0.69314718246,
    # above math.log(2) = 0.69314718056) was refused on its own scale, with the message "got values in [0, 0.693147]"
    # for the range [0, max_uncertainty=0.693147]; values above the scale by the map's own rounding are clipped to it,
    # as to_qu_brats_range clips them (the entropy there is log 2: every threshold at the top of the scale keeps it)
    from monai_unc.metrics import qu_brats_thresholds

    rng = np.random.default_rng(60)
    p = torch.from_numpy(rng.uniform(0.0, 1.0, (9, 8, 7)).astype(np.float32))
    p[::2, ::3] = 0.5
    u = -(p * torch.log(p) + (1 - p) * torch.log1p(-p))  # float32 binary entropy
    assert float(u.max()) > math.log(2)
    pred, target = (p > 0.5).numpy(), torch.from_numpy(rng.uniform(0, 1, (9, 8, 7)) > 0.4).numpy()
    res = qu_brats(u, pred, target, max_uncertainty=math.log(2), grid=grid)
    clipped = np.minimum(u.numpy().astype(np.float64), math.log(2))
    expected = _qu_brats_loop(clipped, pred, target, qu_brats_thresholds(40, math.log(2), grid), math.log(2))
    assert res.score == pytest.approx(expected, abs=1e-12)
    metric = QUBraTSMetric(max_uncertainty=math.log(2), grid=grid)
    metric(y_pred=torch.from_numpy(pred)[None, None], y=torch.from_numpy(target)[None, None], uncertainty=u[None, None])
    assert float(metric.aggregate()) == pytest.approx(expected, abs=1e-6)  # MONAI's float32 mean


def test_qu_brats_range_error_shows_the_digits_that_are_out_of_range():
    masks = np.eye(4, dtype=bool)
    with pytest.raises(ValueError, match=r"got values in \[0\.0, 100\.0001\]"):
        qu_brats(np.where(masks, 100.0001, 0.0), masks, masks)  # printed "[0, 100]" before
    with pytest.raises(ValueError, match=r"\[-0\.5, "):
        qu_brats(np.full((4, 4), -0.5), masks, masks)
