"""Review 67 follow-up: the MONAI-style metric classes' ``aggregate()`` keeps the float64 of their per-case values.

MONAI's ``do_metric_reduction`` averages in float32 (``.float()``), so ``BoundaryUncertaintyConcentrationMetric``,
``NCCMetric``, ``QUBraTSMetric`` and the other classes reducing through ``reduce_case_values`` returned a float32
mean of float64 per-case values: rounded to about 7 digits.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from monai.metrics.utils import do_metric_reduction

from monai_unc._utils import reduce_case_values
from monai_unc.metrics import BoundaryUncertaintyConcentrationMetric, NCCMetric

# values float32 cannot hold: their float32 mean differs from the float64 one in the 8th digit
_VALUES = np.array([[0.1 + 1e-9, np.nan, 0.3], [1.0 / 3.0, 0.2 + 3e-10, np.nan], [np.nan, np.nan, np.nan],
                    [0.7 + 1e-10, 0.123456789012, 0.987654321098]])


def _nanmeans(values: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN row or column
        return np.nanmean(values, axis=axis)


@pytest.mark.parametrize("reduction, expected", [
    ("mean", lambda v: np.nanmean(_nanmeans(v, 1))),  # each case's channels, then the cases that have one
    ("mean_batch", lambda v: _nanmeans(v, 0)),
    ("mean_channel", lambda v: _nanmeans(v, 1)),
    ("sum_batch", lambda v: np.nansum(v, axis=0)),
    ("sum_channel", lambda v: np.where(np.isnan(v).all(axis=1), np.nan, np.nansum(v, axis=1))),
    ("sum", lambda v: np.nansum(v)),
])
def test_reduction_of_float64_values_is_float64(reduction, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the all-NaN case row: NaN with a warning
        f, _ = reduce_case_values(torch.tensor(_VALUES), reduction, "test")
    assert f.dtype == torch.float64
    want = np.atleast_1d(expected(_VALUES))
    got = np.atleast_1d(f.numpy())
    if reduction.endswith("_channel"):  # the all-NaN case is NaN (not MONAI's 0)
        assert np.isnan(got[2]) and np.isnan(want[2])
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0, equal_nan=True)
    assert not np.allclose(np.float32(want[np.isfinite(want)]), want[np.isfinite(want)], rtol=1e-12, atol=0)


def test_float32_values_are_reduced_as_monai_reduces_them():
    values = torch.tensor(_VALUES, dtype=torch.float32)
    for reduction in ("mean", "mean_batch", "sum_batch", "sum"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            f, not_nans = reduce_case_values(values, reduction, "test")
        g, monai_not_nans = do_metric_reduction(values.clone(), reduction)
        assert f.dtype == g.dtype == torch.float32 and f.shape == g.shape
        assert torch.equal(f, g) and torch.equal(not_nans, monai_not_nans)


def test_metric_classes_aggregate_the_float64_mean():
    torch.manual_seed(0)
    target = torch.zeros(3, 1, 8, 8, dtype=torch.long)
    target[:, :, 2:6, 2:6] = 1
    pred = target.clone()
    pred[1, :, 2:6, 6] = 1
    buc = BoundaryUncertaintyConcentrationMetric(spacing=(1.0, 1.0), width=1.0)
    ncc = NCCMetric()
    buc(y_pred=pred, y=target, uncertainty=torch.rand(3, 1, 8, 8, dtype=torch.float64))
    ncc(y_pred=torch.rand(3, 1, 8, 8, dtype=torch.float64), y=torch.rand(3, 1, 8, 8, dtype=torch.float64))
    for metric in (buc, ncc):
        per_case = metric.aggregate("none")
        assert per_case.dtype == torch.float64
        mean = metric.aggregate()
        assert mean.dtype == torch.float64, type(metric).__name__
        assert float(mean) == pytest.approx(float(np.mean(per_case.numpy())), rel=1e-15, abs=0)
