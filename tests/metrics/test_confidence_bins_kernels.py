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


@pytest.mark.parametrize(("n_bins", "n_fine_bins", "name"), [(0, 100, "n_bins"), (-3, 100, "n_bins"),
                                                             (2.5, 100, "n_bins"), (10, 0, "n_fine_bins"),
                                                             (10, -4, "n_fine_bins")])
def test_coarse_bin_index_refuses_bad_bins(n_bins, n_fine_bins, name):
    from monai_unc.metrics.calibration import coarse_bin_index

    with pytest.raises(ValueError, match=name):
        coarse_bin_index(torch.tensor([0, 5, 99]), n_bins, n_fine_bins)


def test_coarse_bin_index_matches_floor_division():
    from monai_unc.metrics.calibration import coarse_bin_index

    fine = torch.arange(15360)
    for n_bins in (7, 15, 20, 33):
        np.testing.assert_array_equal(coarse_bin_index(fine, n_bins).numpy(), (np.arange(15360) * n_bins) // 15360)
