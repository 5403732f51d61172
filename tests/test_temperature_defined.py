"""``TemperatureScaler.fit`` says when no temperature minimises the NLL (``defined`` False and a warning), checked
against an independent reference: the NLL minimised over ``log t`` by scipy in float64 numpy, whose minimum is at
the search's bound exactly when no temperature fits. Found by hostile review: every voxel right gave t = 0.0116 and
anti-informative logits t = 30.5 with only ``converged=False`` to tell (``nnunet-calibrate`` then advised more
steps)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

from monai_unc.temperature import TemperatureScaler, nll_slope_terms
from tests.workflows.test_fit_defined_temperature import BOUND, _reference_t  # the scipy reference


def _fit(z, y, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler = TemperatureScaler(max_steps=30, **kwargs).fit(z, y)
    return scaler, [str(w.message) for w in caught if "no temperature minimises" in str(w.message)]


@pytest.mark.parametrize("seed", range(8))
def test_defined_exactly_when_the_reference_has_a_minimum(seed):
    g = np.random.default_rng(seed)
    c, n = (2, 3, 4, 2)[seed % 4], 400
    y = g.integers(0, c, n)
    z = g.standard_normal((c, n)) * 2
    z[y, np.arange(n)] += (-3.0, -1.5, -0.5, 0.0, 0.5, 1.5, 3.0, 50.0)[seed]  # 50: every voxel right
    t = _reference_t(z, y)
    # every voxel right: the NLL falls to 0 as t goes to 0, flat in float64 (underflow) before scipy's bound
    at_bound = t > 0.99 * BOUND or t < 1.01 / BOUND or bool((z[y, np.arange(n)] >= z.max(0)).all())
    scaler, said = _fit(torch.from_numpy(z).reshape(1, c, n, 1), torch.from_numpy(y).reshape(1, n, 1))
    assert scaler.defined is (not at_bound), (t, scaler.temperature)
    assert bool(said) is at_bound


def test_the_voxels_left_out_are_left_out_of_the_check_too():
    """Voxels of ``ignore_index`` do not count: every kept voxel right is undefined, whatever the ignored ones."""
    y = torch.tensor([[0, 1, 1, -1, -1]])
    z = torch.tensor([[[4.0, -4.0, -4.0, 9.0, 9.0], [-4.0, 4.0, 4.0, -9.0, -9.0]]])  # the ignored voxels "wrong"
    scaler, said = _fit(z, y, ignore_index=-1)
    assert scaler.defined is False and "every voxel is predicted right" in said[0]
    y2 = torch.tensor([[0, 1, 0, -1, -1]])
    assert _fit(z, y2, ignore_index=-1)[0].defined is True


def test_regions_are_checked_one_by_one_in_vector_mode():
    g = torch.Generator().manual_seed(0)
    m = (torch.rand(2, 2, 8, 8, generator=g) > 0.5).float()
    z = torch.stack([6 * (2 * m[:, 0] - 1), 2 * (2 * m[:, 1] - 1) + 3 * torch.randn(2, 8, 8, generator=g)], 1)
    scaler, said = _fit(z, m, mode="vector", activation="sigmoid")
    assert scaler.defined is False and "region 0: every voxel right" in said[0] and "region 1" not in said[0]
    scaler, said = _fit(z, m, mode="scalar", activation="sigmoid")  # one t shared: region 1's errors bound it
    assert scaler.defined is True and not said


def test_an_ece_fit_leaves_defined_unset():
    y = torch.randint(0, 2, (1, 6, 6))
    z = 4.0 * torch.nn.functional.one_hot(y, 2).permute(0, 3, 1, 2).float()
    assert _fit(z, y, loss="ece", min_bin_count=1)[0].defined is None


def test_slope_terms_against_numpy():
    g = np.random.default_rng(3)
    z, y = g.standard_normal((4, 50)), g.integers(0, 4, 50)
    wrong, slope, size = nll_slope_terms(torch.from_numpy(z), torch.from_numpy(y))
    onehot = np.eye(4)[y].T
    assert wrong == int((z[y, np.arange(50)] < z.max(0)).sum())
    np.testing.assert_allclose(slope.numpy(), (z * (1 / 4 - onehot)).sum(1), rtol=1e-12)
    np.testing.assert_allclose(size.numpy(), np.abs(z * (1 / 4 - onehot)).sum(1), rtol=1e-12)
    # the slope in b = 1/t at 0 is the derivative of the NLL: a finite difference of it
    def nll(b):
        a = z * b
        return float(np.sum(logsumexp(a, 0) - a[y, np.arange(50)]))
    assert abs((nll(1e-6) - nll(-1e-6)) / 2e-6 - float(slope.sum())) < 1e-5
