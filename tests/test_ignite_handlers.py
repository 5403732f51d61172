"""The metric handlers of ``monai_unc.handlers`` in ignite engines, as a MONAI user drives them (hostile testing)."""

import math
import warnings

import pytest
import torch

pytest.importorskip("ignite")
from ignite.engine import Engine  # noqa: E402

from monai_unc.handlers import (  # noqa: E402
    BoundaryAwareECE,
    BoundaryUncertaintyConcentration,
    CalibrationHandler,
    GeneralizedEnergyDistance,
    NormalizedCrossCorrelation,
    QUBraTS,
    SpatialCalibrationError,
)

HANDLERS = {
    "calibration_pooled": lambda: CalibrationHandler(metrics=("ece", "nll")),
    "calibration_mean": lambda: CalibrationHandler(metrics=("ece", "nll"), reduction="mean"),
    "calibration_key_metric": lambda: CalibrationHandler(metrics=("ece", "nll"), key_metric="ece"),
    "buc": BoundaryUncertaintyConcentration,
    "ba_ece": BoundaryAwareECE,
    "space": SpatialCalibrationError,
    "ged": GeneralizedEnergyDistance,
    "ncc": NormalizedCrossCorrelation,
    "qu_brats": QUBraTS,
}


@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_an_empty_epoch_is_nan_with_a_warning(kind):
    # an epoch without any iteration (an exhausted loader): every handler is NaN with a warning; the calibration
    # handler without num_classes and the spatial ones raised ("called before any update", "the data to aggregate
    # must be a PyTorch Tensor") where the others gave NaN (found by hostile testing)
    engine = Engine(lambda e, b: b)
    HANDLERS[kind]().attach(engine, "m")
    with pytest.warns(UserWarning, match="no case was evaluated"):
        engine.run([], max_epochs=1, epoch_length=1)
    value = engine.state.metrics["m"]
    values = list(value.values()) if isinstance(value, dict) else [value]
    assert values and all(math.isnan(float(v)) for v in values)
    if kind.startswith("calibration"):
        assert math.isnan(engine.state.metrics["m_ece"]) and math.isnan(engine.state.metrics["m_nll"])


def test_an_empty_epoch_then_a_full_one_scores_only_the_full_one():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), 1)
    labels = torch.randint(0, 3, (2, 1, 4, 4, 4))
    engine = Engine(lambda e, b: b)
    CalibrationHandler(metrics=("ece",)).attach(engine, "calib")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        engine.run([], max_epochs=1, epoch_length=1)
    engine.run([(probs, labels)], max_epochs=1)
    reference = CalibrationHandler(metrics=("ece",)).metric_fn
    reference(probs, labels)
    assert engine.state.metrics["calib_ece"] == float(reference.aggregate()["ece"])


@pytest.mark.parametrize("key_metric", [None, "ece"])
def test_a_calibration_handler_attached_under_two_names_fills_both(key_metric):
    # the keys were prefixed with the name attached last: "a_ece" never appeared, "a" held {"b_ece": ...}, and with
    # key_metric the run raised KeyError: 'a_ece' (found by hostile testing)
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), 1)
    labels = torch.randint(0, 3, (2, 1, 4, 4, 4))
    reference = CalibrationHandler(metrics=("ece", "nll")).metric_fn
    reference(probs, labels)
    expected = {k: float(v) for k, v in reference.aggregate().items()}
    engine = Engine(lambda e, b: b)
    handler = CalibrationHandler(metrics=("ece", "nll"), key_metric=key_metric)
    handler.attach(engine, "a")
    handler.attach(engine, "b")
    engine.run([(probs, labels)])
    for name in ("a", "b"):
        for k, v in expected.items():
            assert engine.state.metrics[f"{name}_{k}"] == v
        if key_metric is None:
            assert engine.state.metrics[name] == {f"{name}_{k}": v for k, v in expected.items()}
        else:
            assert engine.state.metrics[name] == expected[key_metric]
        assert engine.state.metric_details[f"{name}_ece"].shape == engine.state.metric_details[f"{name}_nll"].shape
        assert engine.state.metric_details[f"{name}_ece"].shape == (2, 1)


@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_an_empty_epoch_leaves_no_details_for_metrics_saver(kind, tmp_path):
    # MONAI stored the metric's get_buffer(), None after an epoch without a case, and MetricsSaver(metric_details="*")
    # failed: AttributeError: 'NoneType' object has no attribute 'ndim' (found by hostile testing)
    from monai.handlers import MetricsSaver

    engine = Engine(lambda e, b: b)
    HANDLERS[kind]().attach(engine, "m")
    MetricsSaver(save_dir=str(tmp_path), metrics="*", metric_details="*").attach(engine)
    engine.state.metric_details = {"m": torch.ones(3, 1)}  # a previous run's details: not this run's
    with pytest.warns(UserWarning, match="no case was evaluated"):
        engine.run([], max_epochs=1, epoch_length=1)
    assert "m" not in engine.state.metric_details
    assert (tmp_path / "metrics.csv").is_file() and not (tmp_path / "m_raw.csv").exists()


def _ged_data():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 2, (3, 4, 6, 6), generator=g), torch.randint(0, 2, (3, 3, 6, 6), generator=g)


def test_a_handler_attached_under_two_names_fills_both_details():
    # MONAI wrote the details of every completion under the name attached last: metric_details["a"] was missing
    # (found by hostile testing; the calibration handler alone kept them apart)
    samples, raters = _ged_data()
    engine = Engine(lambda e, b: b)
    handler = GeneralizedEnergyDistance()
    handler.attach(engine, "a")
    handler.attach(engine, "b")
    engine.run([(samples, raters)])
    assert engine.state.metrics["a"] == engine.state.metrics["b"]
    for name in ("a", "b"):
        assert engine.state.metric_details[name].shape == (3, 1)


def test_one_handler_on_a_trainer_and_an_evaluator_keeps_each_engines_details():
    # one handler attached to a trainer, then to an evaluator: the trainer's completion wrote its per-case details
    # into the evaluator's metric_details (an evaluator that never ran then held the trainer's cases for
    # MetricsSaver), and the trainer had none (found by hostile testing)
    samples, raters = _ged_data()
    trainer, evaluator = Engine(lambda e, b: b), Engine(lambda e, b: b)
    handler = GeneralizedEnergyDistance()
    handler.attach(trainer, "train_ged")
    handler.attach(evaluator, "val_ged")
    trainer.run([(samples, raters)])
    assert trainer.state.metric_details["train_ged"].shape == (3, 1)
    assert "train_ged" not in evaluator.state.metric_details and "val_ged" not in evaluator.state.metric_details
    evaluator.run([(samples[:1], raters[:1])])
    assert evaluator.state.metric_details["val_ged"].shape == (1, 1)
    assert trainer.state.metric_details["train_ged"].shape == (3, 1)


@pytest.mark.parametrize("kind", ["buc", "ba_ece", "space", "ged", "ncc", "qu_brats"])
@pytest.mark.parametrize("reduction", ["foo", None, 3, "Mean"])
def test_an_unknown_reduction_is_refused_before_the_run(kind, reduction):
    # the reduction was read only at the end of the epoch, after every case was inferred, and failed there as MONAI's
    # "By 'foo', did you mean 'sum'?" without naming the argument (found by hostile testing)
    if kind == "ged" and reduction is None:
        reduction = "foo"  # None is the metric's own default (mean, or mean_batch with return_terms)
    handler = {"buc": BoundaryUncertaintyConcentration, "ba_ece": BoundaryAwareECE, "space": SpatialCalibrationError,
               "ged": GeneralizedEnergyDistance, "ncc": NormalizedCrossCorrelation, "qu_brats": QUBraTS}[kind]
    with pytest.raises(ValueError, match="reduction must be one of"):
        handler(reduction=reduction)


@pytest.mark.parametrize("reduction", ["mean", "mean_batch", "none"])
def test_a_valid_reduction_is_applied(reduction):
    samples, raters = _ged_data()
    engine = Engine(lambda e, b: b)
    GeneralizedEnergyDistance(reduction=reduction).attach(engine, "ged")
    engine.run([(samples, raters)])
    details = engine.state.metric_details["ged"]
    value = engine.state.metrics["ged"]
    if reduction == "none":
        assert torch.equal(value.reshape(-1), details.reshape(-1).to(value.dtype))
    else:
        assert value == pytest.approx(float(details.mean()))


@pytest.mark.parametrize("kwargs", [{"num_classes": 0}, {"num_classes": 1}, {"num_classes": "3"}, {"num_classes": 2.5},
                                    {"num_classes": True}, {"n_fine_bins": 0}, {"n_fine_bins": "a"},
                                    {"n_fine_bins": 2.5}])
def test_a_calibration_handler_refuses_a_bad_layout_before_the_run(kwargs):
    # num_classes=0 was read as "infer it from the data" without a word; the others failed at the first case, after
    # its inference (found by hostile testing)
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=name):
        CalibrationHandler(**kwargs)


def test_a_calibration_handler_with_num_classes_scores_as_without():
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(2, 3, 4, 4, 4), 1)
    labels = torch.randint(0, 3, (2, 1, 4, 4, 4))
    values = []
    for num_classes in (None, 3):
        engine = Engine(lambda e, b: b)
        CalibrationHandler(metrics=("ece", "nll"), num_classes=num_classes).attach(engine, "c")
        engine.run([(probs, labels)])
        values.append((engine.state.metrics["c_ece"], engine.state.metrics["c_nll"]))
    assert values[0] == values[1]


@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_save_details_must_be_a_bool(kind):
    # a truthy string (save_details="no") kept the details without a word (found by hostile testing)
    factory = HANDLERS[kind]
    kwargs = {"save_details": "no"}
    if kind.startswith("calibration"):
        factory = CalibrationHandler
    with pytest.raises(TypeError, match="save_details"):
        factory(**kwargs)


@pytest.mark.parametrize("handler", [BoundaryUncertaintyConcentration, BoundaryAwareECE, SpatialCalibrationError,
                                     QUBraTS])
@pytest.mark.parametrize("key", ["uncertainty_key", "pred_key", "label_key"])
@pytest.mark.parametrize("value", [None, 3])
def test_an_output_key_must_be_a_string(handler, key, value):
    # uncertainty_key=None read the key "None" and failed at the first iteration, after its inference (found by
    # hostile testing)
    with pytest.raises(TypeError, match=key):
        handler(**{key: value})


def test_a_brain_mask_key_must_be_a_string_or_none():
    with pytest.raises(TypeError, match="brain_mask_key"):
        QUBraTS(brain_mask_key=3)
    QUBraTS(brain_mask_key=None)
