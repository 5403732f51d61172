"""confidence_bins: bad arguments and NaN values raise instead of giving bins outside [0, n_bins)."""

import numpy as np
import pytest
import torch

from monai_unc.metrics.calibration import confidence_bins


def test_confidence_bins_match_numpy_floor_for_float32_values():
    v = torch.tensor([0.0, 0.05, np.float32(0.35), 0.5, 0.8499999642372131, 0.85, 0.9999999, 1.0], dtype=torch.float32)
    expected = np.minimum(np.floor(v.numpy().astype(np.float64) * 20), 19).astype(np.int64)
    np.testing.assert_array_equal(confidence_bins(v, 20).numpy(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_confidence_bins_refuse_nan(dtype):
    with pytest.raises(ValueError, match="values contains NaN"):
        confidence_bins(torch.tensor([0.5, float("nan")], dtype=dtype), 15)


@pytest.mark.parametrize("n_bins", [0, -3, 2.5, True, None])
def test_confidence_bins_refuse_bad_n_bins(n_bins):
    with pytest.raises(ValueError, match="n_bins"):
        confidence_bins(torch.tensor([0.2, 0.7]), n_bins)


@pytest.mark.parametrize("n_fine_bins", [0, -5, 1.5])
def test_confidence_bins_refuse_bad_n_fine_bins(n_fine_bins):
    with pytest.raises(ValueError, match="n_fine_bins"):
        confidence_bins(torch.tensor([0.2, 0.7]), 15, n_fine_bins)


def test_confidence_bins_leave_input_unchanged():
    v = torch.tensor([-0.1, 0.3, 1.2], dtype=torch.float64)
    before = v.clone()
    np.testing.assert_array_equal(confidence_bins(v, 10).numpy(), [0, 3, 9])
    assert torch.equal(v, before)
