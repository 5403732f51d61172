"""Hostile and degenerate input to BUC, BA-ECE and SPACE (``monai_unc.metrics.spatial``): the MONAI wrappers
when every case is NaN, and one value per case whatever the input shape."""

import math
import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics.spatial import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    SpatialCalibrationErrorMetric,
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    spatial_calibration_error,
)
from tests._cases import blob_case as _blob_case


# ---------------------------------------------------------------------------------------------------------------
# item 3: MONAI wrappers returned 0.0 ("perfect") when every case is NaN
# ---------------------------------------------------------------------------------------------------------------
def _no_boundary_batch():
    u = torch.rand(2, 1, 8, 9, generator=torch.Generator().manual_seed(0))
    empty = torch.zeros(2, 1, 8, 9)
    some = empty.clone()
    some[:, :, 2:6, 3:7] = 1
    return u, empty, some


@pytest.mark.parametrize("get_not_nans", [False, True])
def test_buc_metric_with_every_case_nan_is_nan_not_zero(get_not_nans):
    u, empty, some = _no_boundary_batch()
    metric = BoundaryUncertaintyConcentrationMetric(get_not_nans=get_not_nans)
    with pytest.warns(UserWarning, match="no boundary"):
        metric(y_pred=empty, y=some, uncertainty=u)  # an empty prediction has no boundary: BUC is NaN per case
    with pytest.warns(UserWarning, match="no valid"):
        out = metric.aggregate()
    value, not_nans = out if get_not_nans else (out, None)
    assert math.isnan(float(value))
    if get_not_nans:
        assert int(not_nans) == 0
    per_case = metric.aggregate("none")
    assert torch.isnan(per_case[0] if get_not_nans else per_case).all()  # the per-case values stay NaN


def test_baece_metric_with_every_case_nan_is_nan_not_zero():
    u, empty, some = _no_boundary_batch()
    metric = BoundaryAwareECEMetric(get_not_nans=True)
    with pytest.warns(UserWarning, match="no boundary"):
        metric(y_pred=some, y=empty, uncertainty=u)  # an empty target has no boundary: BA-ECE is NaN
    with pytest.warns(UserWarning, match="no valid"):
        value, not_nans = metric.aggregate()
    assert math.isnan(float(value)) and int(not_nans) == 0
    with pytest.warns(UserWarning, match="no valid"):
        assert torch.isnan(metric.aggregate("sum")[0]).all()  # MONAI's sum over no valid value is 0 as well


def test_baece_metric_mixed_cases_average_the_valid_ones():
    u, empty, some = _no_boundary_batch()
    target = torch.stack([some[0], empty[1]])
    metric = BoundaryAwareECEMetric(get_not_nans=True)
    with pytest.warns(UserWarning):
        metric(y_pred=some, y=target, uncertainty=u)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one valid case: no warning, its value
        value, not_nans = metric.aggregate()
    expected = boundary_aware_ece(u[:1], some[:1], some[:1])
    assert float(value) == pytest.approx(float(expected[0]), rel=1e-6) and int(not_nans) == 1


def test_space_metric_is_never_nan_for_valid_input():
    """SPACE is defined for empty masks; its wrapper shares the NaN-aware reduction (tested above)."""
    u, empty, some = _no_boundary_batch()
    metric = SpatialCalibrationErrorMetric()
    metric(y_pred=empty, y=empty, uncertainty=u)
    assert np.isfinite(float(metric.aggregate()))


# ---------------------------------------------------------------------------------------------------------------
# issue 16: per-case results are (B,) whatever the input shape
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error])
def test_spatial_metrics_return_one_value_per_case_for_an_unbatched_map(fn):
    u, p, t = _blob_case()
    single = fn(u, p, t)
    batched = fn(u[None, None], p[None], t[None])
    assert isinstance(single, np.ndarray) and single.shape == (1,) and single.dtype == np.float64
    np.testing.assert_array_equal(single, batched)
    ts = fn(torch.from_numpy(u), torch.from_numpy(p), torch.from_numpy(t))
    assert isinstance(ts, torch.Tensor) and ts.shape == (1,)


def test_spatial_extras_follow_the_case_axis():
    u, p, t = _blob_case()
    _, bands = boundary_aware_ece(u, p, t, n_bands=4, return_bands=True)
    assert bands["uncertainty"].shape == (1, 4) and bands["edges"].shape == (1, 5)
    _, smoothed = spatial_calibration_error(u, p, t, return_map=True)
    assert smoothed.shape == (1, 1, *u.shape)


@pytest.mark.parametrize("spacing", [True, np.bool_(True), (True, 1.0), [1.0, False], np.array([True, True]),
                                     torch.tensor([True, True]), [[True, 1.0]]])
@pytest.mark.parametrize("fn", [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error])
def test_the_functions_refuse_a_bool_spacing_as_the_metric_classes_do(fn, spacing):
    """``spacing=True`` was read as 1 mm by the plain functions (the metric classes refuse it)."""
    u, p, t = _blob_case()
    with pytest.raises(ValueError, match="spacing must be a number"):
        fn(u[None], p[None], t[None], spacing=spacing)


@pytest.mark.parametrize("module, names", [
    ("monai_unc.metrics.spatial", ("BoundaryUncertaintyConcentrationMetric", "BoundaryAwareECEMetric",
                                   "SpatialCalibrationErrorMetric")),
    ("monai_unc.metrics.ambiguity", ("NCCMetric", "GEDMetric")),
    ("monai_unc.metrics.qu_brats_score", ("QUBraTSMetric",)),
])
def test_the_metric_classes_keep_their_old_module_paths(module, names):
    """The MONAI classes moved to ``*_metric`` modules: ``from monai_unc.metrics.spatial import *`` (and of the other
    two) no longer gave them (NameError in code that ran before the move); the star import, an attribute access and
    an object pickled under the old path (``monai_unc.metrics.spatial.BoundaryAwareECEMetric``) still give them."""
    import importlib
    import pickle

    namespace: dict = {}
    exec(f"from {module} import *", namespace)  # noqa: S102 - the star import a user writes
    mod = importlib.import_module(module)
    for name in names:
        cls = getattr(importlib.import_module("monai_unc.metrics"), name)
        assert namespace[name] is cls and getattr(mod, name) is cls
        # a pickle of the previous release names the class by its old module
        new = pickle.dumps(cls(), protocol=2)  # protocol 2 names the class as the text "module\nname\n"
        assert f"{cls.__module__}\n{name}\n".encode() in new
        old = new.replace(f"{cls.__module__}\n{name}\n".encode(), f"{module}\n{name}\n".encode())
        assert type(pickle.loads(old)) is cls


@pytest.mark.parametrize("fn", [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error])
def test_inputs_that_require_grad_give_the_detached_values(fn):
    """Found by hostile testing: a map computed in a training step (``requires_grad``) raised "Can't call numpy()
    on Tensor that requires grad"; every other metric family takes it. A soft one-channel prediction too."""
    g = torch.Generator().manual_seed(3)
    u = torch.rand(2, 1, 10, 11, generator=g)
    pred = torch.zeros(2, 1, 10, 11)
    pred[:, :, 2:7, 3:8] = 1
    target = torch.roll(pred, 1, dims=-1)
    expected = fn(u, pred, target, spacing=(0.8, 1.5))
    got = fn(u.clone().requires_grad_(), pred.clone().requires_grad_(), target, spacing=(0.8, 1.5))
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
