"""Hostile review 66 of the MONAI integration: the handlers in MONAI workflows as a MONAI user drives them."""

import csv

import pytest
import torch

pytest.importorskip("ignite")
from ignite.engine import Engine  # noqa: E402
from monai.data import DataLoader, Dataset, MetaTensor  # noqa: E402
from monai.engines import SupervisedEvaluator  # noqa: E402
from monai.handlers import MetricsSaver, from_engine  # noqa: E402
from monai.transforms import Activationsd  # noqa: E402

from monai_unc.handlers import CalibrationHandler, SpatialCalibrationError  # noqa: E402
from monai_unc.metrics import spatial_calibration_error  # noqa: E402


class _Identity(torch.nn.Module):
    """The image is the network's output (the logits of the case)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def _evaluator(items, save_dir, **handler_args):
    handler = CalibrationHandler(num_classes=3, metrics=("ece", "nll"), output_transform=from_engine(["pred", "label"]),
                                 **handler_args)
    return SupervisedEvaluator(
        device=torch.device("cpu"), val_data_loader=DataLoader(Dataset(items), batch_size=2), network=_Identity(),
        postprocessing=Activationsd("pred", softmax=True), key_val_metric={"calib": handler},
        val_handlers=[MetricsSaver(save_dir=str(save_dir))],  # MONAI's default: metrics="*"
    )


def test_metrics_saver_default_writes_a_two_column_metrics_csv(tmp_path):
    # found by hostile review 66: the dict of all metrics under the handler's name (ignite's convention for a metric
    # returning a mapping) was written by MetricsSaver's default metrics="*" as the row
    # "calib,{'calib_ece': 0.24, 'calib_nll': 1.28}", three fields where every other row has two: pandas' read_csv
    # stopped with "Expected 2 fields in line 3, saw 3"
    torch.manual_seed(0)
    items = [{"image": torch.randn(3, 5, 5), "label": torch.randint(0, 3, (1, 5, 5))} for _ in range(3)]
    evaluator = _evaluator(items, tmp_path)
    evaluator.run()
    with open(tmp_path / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert [len(row) for row in rows] == [2, 2, 2], rows
    values = dict(rows)
    metrics = evaluator.state.metrics
    assert float(values["calib_ece"]) == metrics["calib_ece"] and float(values["calib_nll"]) == metrics["calib_nll"]
    # the contract stays: the dict of the metrics under the name, equal to a plain dict
    assert isinstance(metrics["calib"], dict)
    assert metrics["calib"] == {"calib_ece": metrics["calib_ece"], "calib_nll": metrics["calib_nll"]}
    # the row names each metric with its value at full precision
    assert values["calib"] == f"calib_ece={metrics['calib_ece']!r} calib_nll={metrics['calib_nll']!r}"


def test_spatial_handler_spacing_from_the_maps_when_the_label_states_no_grid():
    # found by hostile review 66: labels loaded without geometry (a .npy label map through LoadImaged, or EnsureTyped
    # of an array) are MetaTensors with MONAI's default identity affine, which the same-grid check reads as "no grid";
    # the spacing was still read from it, 1 mm, while the uncertainty map and the prediction state 2 x 1 x 3 mm:
    # SPACE 0.408 (1 mm) instead of 0.428
    g = torch.Generator().manual_seed(0)
    affine = torch.diag(torch.tensor([2.0, 1.0, 3.0, 1.0]))
    label = torch.zeros(1, 12, 10, 8)
    label[0, 3:8, 2:7, 2:6] = 1
    pred = label.clone()
    pred[0, 6:8, 2:7, 2:6] = 0  # errors where the map is low: U - E changes sign, so the smoothing width matters
    u = torch.rand(1, 12, 10, 8, generator=g) * 0.2
    u[0, :6] += 0.7
    expected = float(spatial_calibration_error(u[0], pred[0], label[0], spacing=(2.0, 1.0, 3.0)))
    assert abs(expected - float(spatial_calibration_error(u[0], pred[0], label[0]))) > 0.01  # the spacing matters
    for y in (label, MetaTensor(label), MetaTensor(label, affine=affine)):  # plain, no grid, the maps' grid
        engine = Engine(lambda e, b: b)
        SpatialCalibrationError().attach(engine, "space")
        case = {"predictive_entropy": MetaTensor(u, affine=affine), "pred": MetaTensor(pred, affine=affine), "label": y}
        engine.run([[case]], max_epochs=1)  # one decollated case, as MONAI's evaluators give them
        assert engine.state.metrics["space"] == pytest.approx(expected, rel=1e-6), type(y).__name__
