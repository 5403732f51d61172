"""Hostile review 54 of the MONAI metric classes of the spatial metrics (monai_unc.metrics.spatial_metric)."""

from __future__ import annotations

import warnings

import pytest
import torch
from monai.utils import MetricReduction

from monai_unc.metrics import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    SpatialCalibrationErrorMetric,
)

_CLASSES = [
    lambda: BoundaryUncertaintyConcentrationMetric(width=1.0),
    lambda: BoundaryAwareECEMetric(n_bands=3),
    lambda: SpatialCalibrationErrorMetric(sigma=1.0),
]


def _filled(metric):
    target = torch.zeros(2, 1, 8, 8, dtype=torch.long)
    target[:, :, 2:6, 2:6] = 1
    uncertainty = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    metric(y_pred=target.clone(), y=target, uncertainty=uncertainty)
    return metric


@pytest.mark.parametrize("make", _CLASSES)
@pytest.mark.parametrize("reduction", ["foo", "", 3, True])
def test_aggregate_checks_its_reduction_by_name(make, reduction):
    """Found by hostile testing: ``aggregate("foo")`` escaped as MONAI's error without the argument's name (the
    constructor names it) and ``aggregate("")`` fell back to the constructor's reduction without a word."""
    metric = _filled(make())
    with pytest.raises(ValueError, match="reduction must be one of"):
        metric.aggregate(reduction)


@pytest.mark.parametrize("make", _CLASSES)
def test_aggregate_reductions_unchanged(make):
    metric = _filled(make())
    data = metric.get_buffer().clone()
    assert torch.equal(metric.aggregate("none"), data)
    assert torch.equal(metric.aggregate(MetricReduction.SUM), metric.aggregate("sum"))
    assert torch.allclose(metric.aggregate().double(), data.mean().reshape(1), atol=1e-7)
    assert torch.allclose(metric.aggregate(None).double(), data.mean().reshape(1), atol=1e-7)


def test_nan_warnings_of_aggregate_point_at_its_caller():
    """Found by hostile testing: the UserWarnings of ``aggregate`` (no case; every case NaN) pointed at the line of
    spatial_metric.py that reduces, the same for every caller."""
    metric = BoundaryUncertaintyConcentrationMetric(width=1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.isnan(metric.aggregate()).all()  # no case
    assert [w.filename for w in caught] == [__file__]
    empty = torch.zeros(1, 1, 8, 8, dtype=torch.long)  # no boundary: NaN case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metric(y_pred=empty, y=empty, uncertainty=torch.rand(1, 1, 8, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.isnan(metric.aggregate()).all()  # every case NaN
    assert caught and all(w.filename == __file__ for w in caught), [w.filename for w in caught]
