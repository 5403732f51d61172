"""Hostile review 54 of the MONAI metric classes of the spatial metrics (:mod:`monai_unc.metrics.spatial_metric`)."""

from __future__ import annotations

import pytest
import torch

from monai_unc.metrics import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    SpatialCalibrationErrorMetric,
)

CLASSES = [
    lambda: BoundaryUncertaintyConcentrationMetric(width=1.0),
    lambda: BoundaryAwareECEMetric(n_bands=3),
    lambda: SpatialCalibrationErrorMetric(sigma=1.0),
]


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    target = torch.zeros(2, 1, 8, 8, dtype=torch.long)
    target[:, :, 2:6, 2:6] = 1
    pred = target.clone()
    pred[1, :, 2:6, 6] = 1
    return pred, target, torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("make", CLASSES)
@pytest.mark.parametrize("evaluated", [False, True])
def test_aggregate_refuses_an_unknown_reduction_by_name(make, evaluated):
    """aggregate(reduction=...) is checked as the constructor's: MONAI's error did not name the argument."""
    metric = make()
    if evaluated:
        pred, target, u = _batch()
        metric(y_pred=pred, y=target, uncertainty=u)
    with pytest.raises(ValueError, match="reduction must be one of"):
        metric.aggregate("foo")
    with pytest.raises(ValueError, match="reduction must be one of"):
        metric.aggregate(3)


@pytest.mark.parametrize("make", CLASSES)
def test_aggregate_reduction_argument_still_overrides(make):
    metric = make()
    pred, target, u = _batch()
    values = metric(y_pred=pred, y=target, uncertainty=u).reshape(-1)
    assert torch.allclose(metric.aggregate("sum").double(), values.sum())
    assert torch.equal(metric.aggregate("none").reshape(-1), values)
