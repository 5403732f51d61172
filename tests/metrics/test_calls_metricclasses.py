"""Hostile tests of the MONAI metric classes' calls: a refused call changes nothing, NaN cases are reported."""

import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    CalibrationMetric,
    GEDMetric,
    NCCMetric,
    QUBraTSMetric,
    SpatialCalibrationErrorMetric,
)


def _cases(n=3, n_cls=3, side=(6, 5, 4), seed=0):
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(3 * torch.randn(n, n_cls, *side, generator=g), dim=1)
    return probs, torch.randint(0, n_cls, (n, 1, *side), generator=g)


def _brute_ece_nll(probs, labels, n_bins):
    """Equal-width ECE and NLL of all voxels of ``probs`` (N, C, *spatial), computed voxel by voxel in numpy."""
    p = np.moveaxis(probs.double().numpy(), 1, -1).reshape(-1, probs.shape[1])
    y = labels.reshape(-1).numpy()
    conf, correct = p.max(1), p.argmax(1) == y
    bins = np.minimum((conf * n_bins).astype(int), n_bins - 1)
    ece = sum((bins == b).mean() * abs(conf[bins == b].mean() - correct[bins == b].mean())
              for b in range(n_bins) if (bins == b).any())
    return ece, -np.log(np.clip(p[np.arange(len(y)), y], 1e-15, 1)).mean()


def test_a_refused_decollated_call_leaves_no_case_in_the_pooled_histogram():
    probs, labels = _cases()
    bad = probs[1].clone()
    bad[0, 0, 0, 0] = float("nan")
    metric = CalibrationMetric(num_classes=3, metrics=("ece", "nll"), n_bins=5)
    with pytest.raises(ValueError, match="non-finite"):
        metric(y_pred=[probs[0], bad], y=[labels[0], labels[1]])
    assert metric.get_buffer() is None
    with pytest.warns(UserWarning, match="no case was evaluated"):
        assert all(torch.isnan(v) for v in metric.aggregate().values())
    metric(y_pred=[probs[2]], y=[labels[2]])  # case 0 of the refused call must not be pooled with case 2
    out = metric.aggregate()
    ece, nll = _brute_ece_nll(probs[2:], labels[2:], 5)
    assert float(out["ece"]) == pytest.approx(ece, abs=1e-6)
    assert float(out["nll"]) == pytest.approx(nll, rel=1e-6)
    assert metric.get_buffer().shape == (1, 2)


def test_decollated_items_of_different_class_counts_change_nothing():
    probs, labels = _cases()
    other, other_labels = _cases(n=1, n_cls=4, seed=1)
    metric = CalibrationMetric(metrics=("ece",), n_bins=5)
    metric(y_pred=probs[:1], y=labels[:1])
    before = metric.aggregate()["ece"]
    with pytest.raises(ValueError, match="different layouts"):
        metric(y_pred=[probs[1], other[0]], y=[labels[1], other_labels[0]])
    assert torch.equal(metric.aggregate()["ece"], before)
    assert metric.get_buffer().shape == (1, 1)


def test_decollated_and_batched_calls_pool_to_the_brute_force_values():
    probs, labels = _cases(n=4)
    metric = CalibrationMetric(metrics=("ece", "nll"), n_bins=8)
    metric(y_pred=list(probs[:3]), y=list(labels[:3]))
    metric(y_pred=probs[3:], y=labels[3:])
    ece, nll = _brute_ece_nll(probs, labels, 8)
    out = metric.aggregate()
    assert float(out["ece"]) == pytest.approx(ece, abs=1e-6)
    assert float(out["nll"]) == pytest.approx(nll, rel=1e-6)


def test_mean_reduction_reports_the_nan_cases_it_leaves_out():
    big, big_labels = _cases(n=1, side=(10, 10, 10))
    small, small_labels = _cases(n=1, side=(2, 2, 2), seed=1)
    metric = CalibrationMetric(num_classes=3, metrics=("ece", "nll"), n_bins=5, min_bin_count=30, reduction="mean")
    metric(y_pred=big, y=big_labels)
    metric(y_pred=small, y=small_labels)  # 8 voxels: no bin holds 30, the case's ECE is NaN
    values = metric.get_buffer()
    assert torch.isnan(values[1, 0]) and not torch.isnan(values[:, 1]).any()
    with pytest.warns(UserWarning, match=r"ece is NaN \(undefined\) for 1 of 2 cases") as record:
        out = metric.aggregate()
    assert not any("nll" in str(w.message) for w in record)
    assert float(out["ece"]) == pytest.approx(float(values[0, 0]))
    assert float(out["nll"]) == pytest.approx(float(values[:, 1].mean()))


def test_no_case_with_num_classes_given_warns_that_no_case_was_evaluated():
    metric = CalibrationMetric(num_classes=3, metrics=("ece", "nll"))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = metric.aggregate()
    assert all(torch.isnan(v) for v in out.values())
    assert [str(w.message) for w in record] == [
        "CalibrationMetric: no case was evaluated; every metric is undefined (NaN)"
    ]


@pytest.mark.parametrize("metric", [
    CalibrationMetric(), BoundaryUncertaintyConcentrationMetric(), BoundaryAwareECEMetric(),
    SpatialCalibrationErrorMetric(), NCCMetric(),
], ids=lambda m: type(m).__name__)
def test_an_empty_decollated_list_is_refused_naming_y_pred(metric):
    with pytest.raises(ValueError, match="y_pred is an empty list"):
        metric(y_pred=[], y=[])
    assert metric.get_buffer() is None


@pytest.mark.parametrize("metric", [
    NCCMetric(get_not_nans=True), GEDMetric(get_not_nans=True), QUBraTSMetric(get_not_nans=True),
    BoundaryAwareECEMetric(get_not_nans=True),
], ids=lambda m: type(m).__name__)
def test_reduction_none_without_any_case_is_the_empty_table_of_every_metric_class(metric):
    with pytest.warns(UserWarning, match="no case was evaluated"):
        values, not_nans = metric.aggregate("none")
    assert values.shape == (0, 1) and float(not_nans) == 0
    with pytest.warns(UserWarning, match="no case was evaluated"):
        value, not_nans = metric.aggregate("mean")
    assert value.ndim == 0 and torch.isnan(value) and float(not_nans) == 0


def _grid_inputs(name):
    """``(metric, kwargs of a call whose y is on another grid than y_pred)``."""
    probs, labels = _cases(n=2)
    short = labels[..., :3]
    if name == "calibration":
        return CalibrationMetric(), {"y_pred": probs, "y": short}
    if name == "ncc":
        return NCCMetric(), {"y_pred": probs[:, :1], "y": probs[:, :1, ..., :3]}
    if name == "ged":
        return GEDMetric(), {"y_pred": labels.expand(2, 3, 6, 5, 4), "y": short.expand(2, 2, 6, 5, 3)}
    metric = {"buc": BoundaryUncertaintyConcentrationMetric, "ba_ece": BoundaryAwareECEMetric,
              "space": SpatialCalibrationErrorMetric}[name]()
    return metric, {"y_pred": labels, "y": short, "uncertainty": probs[:, :1]}


@pytest.mark.parametrize("name", ["calibration", "ncc", "ged", "buc", "ba_ece", "space"])
def test_a_y_on_another_grid_is_refused_naming_y_and_y_pred(name):
    metric, call = _grid_inputs(name)
    with pytest.raises(ValueError, match=r"^y \(2, .*\) and y_pred \(2, .*\) must hold the same cases on the same"):
        metric(**call)
    assert metric.get_buffer() is None


@pytest.mark.parametrize("name", ["calibration", "ncc", "ged", "buc", "ba_ece", "space", "qu_brats"])
def test_a_keyword_the_metric_does_not_read_is_refused(name):
    """``mask=`` / ``weights=`` to CalibrationMetric, a mistyped ``brainmask=`` or ``spacings=`` were ignored."""
    if name == "qu_brats":
        t = torch.zeros(1, 1, 6, 6, 4, dtype=torch.bool)
        t[..., 1:4, 1:4, 1:3] = True
        metric, call = QUBraTSMetric(), {"y_pred": t, "y": t, "uncertainty": torch.zeros(1, 1, 6, 6, 4)}
        bad = "brainmask"
    else:
        metric, call = _grid_inputs(name)
        call["y"] = call["y"][..., :1].expand(call["y"].shape[:-1] + (call["y_pred"].shape[-1],))
        bad = "spacings" if "uncertainty" in call else "mask"
    with pytest.raises(TypeError, match=f"{type(metric).__name__}\\(\\) got an unexpected keyword argument: {bad}"):
        metric(**call, **{bad: torch.ones(1)})
    assert metric.get_buffer() is None


@pytest.mark.parametrize("metric_class", [
    BoundaryUncertaintyConcentrationMetric, BoundaryAwareECEMetric, SpatialCalibrationErrorMetric,
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_a_two_class_one_hot_y_pred_without_uncertainty_is_refused(metric_class, dtype):
    """``AsDiscrete(argmax=True, to_onehot=2)`` output without ``uncertainty=`` was scored with its background channel
    as the uncertainty map (the handlers refused it, the classes did not)."""
    label = torch.zeros(2, 1, 10, 10, dtype=torch.long)
    label[:, :, 3:7, 3:7] = 1
    one_hot = torch.cat([1 - label, label], dim=1).to(dtype)
    metric = metric_class()
    with pytest.raises(ValueError, match="holds class probabilities or a one-hot map"):
        metric(y_pred=one_hot, y=label)
    with pytest.raises(ValueError, match="holds class probabilities or a one-hot map"):
        metric(y_pred=list(one_hot), y=list(label))
    assert metric.get_buffer() is None
    # a genuinely packed cat([uncertainty, one-hot]) and a zero-uncertainty packing are scored
    u = torch.rand(2, 1, 10, 10, generator=torch.Generator().manual_seed(0))
    packed = metric_class()(y_pred=torch.cat([u, one_hot.float()], dim=1), y=label)
    np.testing.assert_allclose(packed.numpy(), metric_class()(y_pred=label, y=label, uncertainty=u).numpy())
    metric_class()(y_pred=torch.cat([torch.zeros_like(u), one_hot.float()], dim=1), y=label)


@pytest.mark.parametrize("metric_class", [
    NCCMetric, GEDMetric, QUBraTSMetric, BoundaryUncertaintyConcentrationMetric, BoundaryAwareECEMetric,
    SpatialCalibrationErrorMetric,
])
def test_an_unknown_reduction_is_refused_when_the_metric_is_built(metric_class):
    """It was kept and refused by MONAI at the first aggregate(), after an epoch of inference."""
    with pytest.raises(ValueError, match="reduction must be one of .*got 'average'"):
        metric_class(reduction="average")
    with pytest.raises(TypeError, match="get_not_nans"):
        metric_class(get_not_nans="yes")
    assert metric_class(reduction="sum_batch").reduction == "sum_batch"
