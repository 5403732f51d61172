"""Hostile checks of the risk-controlled referral threshold: what the returned rule does on the calibration cases
themselves, against an independent float64 computation.

:func:`~monai_unc.metrics.risk_control.risk_controlled_threshold` certifies the set of calibration cases it accepts;
:meth:`~monai_unc.metrics.risk_control.RiskControlledThreshold.accept` must accept exactly that set again, whatever
the dtype and library of the scores it is given.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.metrics.risk_control import risk_controlled_threshold


def _discrete_cohort(seed: int = 0, m: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """float32 scores on 20 levels (many ties, as a voxel count or a rounded score has) and 0/1 failures."""
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 20, m).astype(np.float32) / np.float32(7)
    failed = (rng.random(m) < 0.02 + 0.5 * (u / 3) ** 3).astype(np.float64)
    return u, failed


@pytest.mark.parametrize("method", ["sgr", "ltt"])
@pytest.mark.parametrize("library", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_accept_on_low_precision_scores_is_the_certified_set(method, library, dtype):
    u32, failed = _discrete_cohort()
    u = u32.astype(dtype)
    res = risk_controlled_threshold(u, failed, target_risk=0.1, delta=0.1, method=method)
    assert res.feasible and 0 < res.n_accepted < u.size  # a finite threshold between two tie groups
    reference = u.astype(np.float64) <= res.threshold  # the set that was certified (independent, float64)
    assert int(reference.sum()) == res.n_accepted
    first_refused = float(np.min(u.astype(np.float64)[~reference]))
    x = torch.from_numpy(u) if library == "torch" else u
    got = res.accept(x)
    got = got.numpy() if library == "torch" else got
    # before the fix the threshold was rounded to the input's dtype, i.e. up to the first refused value, and the
    # whole tie group at that value (cases the certificate never covered) was accepted
    np.testing.assert_array_equal(got, reference)
    assert not bool(res.accept(np.array([first_refused], dtype=dtype))[0])
    assert isinstance(res.accept(torch.tensor([first_refused])), torch.Tensor)


def test_accept_integer_scores_and_nan():
    rng = np.random.default_rng(1)
    u = rng.integers(0, 30, 300)
    failed = (rng.random(300) < 0.01 + 0.4 * (u / 29) ** 4).astype(np.float64)
    res = risk_controlled_threshold(u, failed, target_risk=0.1, delta=0.1)
    assert res.feasible and 0 < res.n_accepted < u.size
    np.testing.assert_array_equal(res.accept(u), u.astype(np.float64) <= res.threshold)
    np.testing.assert_array_equal(res.accept(torch.from_numpy(u)).numpy(), u <= res.threshold)
    assert int(res.accept(u).sum()) == res.n_accepted
    assert not res.accept(np.array([np.nan]))[0] and not bool(res.accept(torch.tensor([float("nan")]))[0])
