"""The spatial metrics (and so their ignite handlers) check their options when they are built, not at the first case
after a batch of inference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.handlers import BoundaryAwareECE, BoundaryUncertaintyConcentration, SpatialCalibrationError
from monai_unc.metrics import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    SpatialCalibrationErrorMetric,
    spatial_calibration_error,
)


@pytest.mark.parametrize("build, match", [
    (lambda: BoundaryUncertaintyConcentrationMetric(width=-1.0), "width must be a non-negative number"),
    (lambda: BoundaryUncertaintyConcentrationMetric(width="2"), "width must be a real number"),
    (lambda: BoundaryUncertaintyConcentrationMetric(backend="fast"), "backend must be one of"),
    (lambda: BoundaryAwareECEMetric(n_bands=0), "n_bands must be a positive integer"),
    (lambda: BoundaryAwareECEMetric(n_bands=2.5), "n_bands must be a positive integer"),
    (lambda: BoundaryAwareECEMetric(max_distance=float("nan")), "max_distance must be"),
    (lambda: BoundaryAwareECEMetric(backend=None), "backend must be one of"),
    (lambda: SpatialCalibrationErrorMetric(sigma=-2.0), "sigma must be non-negative"),
    (lambda: SpatialCalibrationErrorMetric(sigma=[1.0, float("inf")]), "sigma must be non-negative"),
    (lambda: SpatialCalibrationErrorMetric(sigma="2"), "sigma must be a real number"),
    (lambda: SpatialCalibrationErrorMetric(truncate=0), "truncate must be a positive number"),
    (lambda: BoundaryUncertaintyConcentration(width=-1.0), "width must be a non-negative number"),
    (lambda: BoundaryAwareECE(n_bands=0), "n_bands must be a positive integer"),
    (lambda: SpatialCalibrationError(sigma=-1.0), "sigma must be non-negative"),
])
def test_bad_options_refused_when_built(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_good_options_still_accepted_and_used():
    g = torch.Generator().manual_seed(0)
    target = torch.zeros(1, 1, 12, 12, dtype=torch.long)
    target[:, :, 3:9, 3:9] = 1
    u = torch.rand(1, 1, 12, 12, generator=g)
    for sigma in (1.5, [1.0, 2.0], np.array([1.0, 2.0]), torch.tensor([1.0, 2.0]), 0):
        metric = SpatialCalibrationErrorMetric(sigma=sigma)
        got = metric(y_pred=target, y=target, uncertainty=u)
        want = spatial_calibration_error(u, target, target, sigma=sigma)
        assert torch.allclose(got.view(-1), torch.as_tensor(want).view(-1))
    BoundaryUncertaintyConcentrationMetric(width=None, backend="scipy")
    BoundaryAwareECEMetric(n_bands=np.int64(4), max_distance=10)


@pytest.mark.parametrize("spacing, match", [
    (-1.0, "spacing must be positive and finite"),
    (0, "spacing must be positive and finite"),
    ((1.0, float("nan")), "spacing must be positive and finite"),
    ([[1.0, 1.0], [0.0, 1.0]], "spacing must be positive and finite"),
    ("1.0", "spacing must be a number, one number per spatial axis"),
    ((1.0, 2.0, 3.0, 4.0), "spacing must be a number, one number per spatial axis"),
    (True, "spacing must be a number, one number per spatial axis"),
])
@pytest.mark.parametrize("build", [
    BoundaryUncertaintyConcentration, BoundaryAwareECE, SpatialCalibrationError,
    BoundaryUncertaintyConcentrationMetric, BoundaryAwareECEMetric, SpatialCalibrationErrorMetric,
])
def test_bad_spacing_refused_when_built(build, spacing, match):
    """A bad spacing was taken and refused at the first case, after a batch of inference."""
    with pytest.raises(ValueError, match=match):
        build(spacing=spacing)


@pytest.mark.parametrize("spacing", [0.5, (1.0, 2.0), np.float32(2.0), np.array([1.0, 2.0]), torch.tensor([1.0, 2.0]),
                                     [[1.0, 2.0]]])
def test_good_spacings_still_accepted_and_used(spacing):
    g = torch.Generator().manual_seed(1)
    target = torch.zeros(1, 1, 12, 12, dtype=torch.long)
    target[:, :, 3:9, 2:7] = 1
    u = torch.rand(1, 1, 12, 12, generator=g)
    got = SpatialCalibrationErrorMetric(spacing=spacing, sigma=1.0)(y_pred=target, y=target, uncertainty=u)
    want = spatial_calibration_error(u, target, target, spacing=np.asarray(spacing, dtype=float).reshape(-1).tolist()
                                     if np.ndim(spacing) else float(spacing), sigma=1.0)
    assert torch.allclose(got.view(-1), torch.as_tensor(want).view(-1))


@pytest.mark.parametrize("metric", [BoundaryUncertaintyConcentrationMetric, BoundaryAwareECEMetric,
                                    SpatialCalibrationErrorMetric])
@pytest.mark.parametrize("decollated", [False, True])
@pytest.mark.parametrize("unc_shape", [(3, 1, 8, 8, 8), (2, 1, 8, 8, 7)])
def test_an_uncertainty_of_other_cases_or_grid_is_a_value_error(metric, decollated, unc_shape):
    # found by hostile testing: torch.cat's RuntimeError "Sizes of tensors must match except in dimension 1"
    probs = torch.softmax(torch.randn(2, 2, 8, 8, 8), 1)
    label = torch.zeros(2, 1, 8, 8, 8)
    label[:, :, 2:6, 2:6, 2:6] = 1
    uncertainty = torch.rand(unc_shape)
    if decollated:
        if unc_shape[0] != 2:
            pytest.skip("a list of another length is refused by its count")
        probs, label, uncertainty = list(probs), list(label), list(uncertainty)
    with pytest.raises(ValueError, match="must hold the same cases on the same grid"):
        metric()(probs, label, uncertainty=uncertainty)
