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
        assert engine.state.metric_details[name].shape == (2, 2)


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
