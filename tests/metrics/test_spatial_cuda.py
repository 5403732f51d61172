"""BUC, BA-ECE (with its bands), SPACE (with its map) and their MONAI metric classes on a device, against the CPU.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. The distance transforms run through the
same backend (``edt``, or scipy) whatever the device unless cuCIM is installed, and every reduction is float64:
``abs=1e-9`` (as ``test_spatial.test_cuda_inputs_match_cpu``); band counts are exact.
"""

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
from tests.metrics.test_spatial import case

pytestmark = pytest.mark.cuda

SP = (2.0, 1.0, 1.0)


def _batch(cuda_device, n=2):
    cases = [case((16, 18, 14), 2, seed=s) for s in (1, 2, 4)[:n]]
    cpu = [torch.from_numpy(np.stack([c[k] for c in cases])[:, None]) for k in range(3)]
    return cpu, [x.to(cuda_device) for x in cpu]


def test_bands_and_map_on_the_device_equal_cpu(cuda_device):
    (u, p, t), (ud, pd, td) = _batch(cuda_device)
    value, bands = boundary_aware_ece(ud, pd, td, spacing=SP, return_bands=True)
    ref_value, ref_bands = boundary_aware_ece(u, p, t, spacing=SP, return_bands=True)
    assert value.device.type == cuda_device.type
    np.testing.assert_allclose(value.cpu().numpy(), ref_value.numpy(), atol=1e-9)
    assert set(bands) == set(ref_bands)
    for k, v in bands.items():
        assert v.device.type == cuda_device.type, k
        np.testing.assert_allclose(v.cpu().numpy(), ref_bands[k].numpy(), atol=1e-9, equal_nan=True, err_msg=k)
    value, space_map = spatial_calibration_error(ud, pd, td, spacing=SP, return_map=True)
    ref_value, ref_map = spatial_calibration_error(u, p, t, spacing=SP, return_map=True)
    assert value.device.type == space_map.device.type == cuda_device.type
    np.testing.assert_allclose(value.cpu().numpy(), ref_value.numpy(), atol=1e-9)
    np.testing.assert_allclose(space_map.cpu().numpy(), ref_map.numpy(), atol=1e-9)
    # float32 maps and probabilities as the prediction (argmax over the channel) take the same path
    probs = torch.cat([1 - pd.double(), pd.double()], 1) * 0.8 + 0.1
    got = boundary_uncertainty_concentration(ud.float(), probs, td, spacing=SP)
    want = boundary_uncertainty_concentration(u.float(), p, t, spacing=SP)
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), atol=1e-9)


@pytest.mark.parametrize("cls", [BoundaryUncertaintyConcentrationMetric, BoundaryAwareECEMetric,
                                 SpatialCalibrationErrorMetric], ids=lambda c: c.__name__)
def test_monai_metric_classes_on_the_device_equal_cpu(cuda_device, cls):
    (u, p, t), (ud, pd, td) = _batch(cuda_device, n=3)
    got, ref = cls(spacing=SP), cls(spacing=SP)
    got(y_pred=pd[:2], y=td[:2], uncertainty=ud[:2])
    got(y_pred=list(pd[2:]), y=list(td[2:]), uncertainty=list(ud[2:]))  # decollated lists
    ref(y_pred=p, y=t, uncertainty=u)
    values = got.aggregate("none")
    assert values.device.type == cuda_device.type
    np.testing.assert_allclose(values.cpu().numpy(), ref.aggregate("none").numpy(), atol=1e-9)
    assert float(got.aggregate()) == pytest.approx(float(ref.aggregate()), rel=1e-6)


@pytest.fixture
def deterministic_algorithms():
    """``torch.use_deterministic_algorithms(True)`` for one test (MONAI's ``set_determinism(...,
    use_deterministic_algorithms=True)``), restored after it."""
    before, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before, warn_only=warn)


def test_ba_ece_and_buc_under_deterministic_algorithms_on_the_device(cuda_device, deterministic_algorithms):
    """BA-ECE's band sums on a GPU used ``torch.bincount`` with weights, which PyTorch refuses under deterministic
    algorithms (``RuntimeError``); they equal the CPU's, as BUC does."""
    (u, p, t), (ud, pd, td) = _batch(cuda_device)
    for fn in (boundary_aware_ece, boundary_uncertainty_concentration):
        got = fn(ud, pd, td, spacing=SP)
        assert got.device.type == cuda_device.type
        np.testing.assert_allclose(got.cpu().numpy(), fn(u, p, t, spacing=SP).numpy(), atol=1e-9)
