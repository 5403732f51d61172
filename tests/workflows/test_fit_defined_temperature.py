""":func:`monai_unc.workflows.calibrate.check_fit_is_defined` against an independent reference: the NLL minimised
over ``log t`` by scipy in float64 numpy, whose minimum is at the search's bound exactly when no temperature fits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

from monai_unc.workflows.calibrate import check_fit_is_defined

BOUND = 1e4


def _reference_t(z: np.ndarray, y: np.ndarray) -> float:
    """The NLL-optimal temperature of logits ``(C, n)`` and labels ``(n,)`` by scipy, within [1/BOUND, BOUND]."""
    def nll(log_t):
        a = z / np.exp(log_t)
        return float(np.mean(logsumexp(a, 0) - a[y, np.arange(y.size)]))
    return float(np.exp(minimize_scalar(nll, bounds=(-np.log(BOUND), np.log(BOUND)), method="bounded",
                                        options={"xatol": 1e-9}).x))


def _anti_informative(seed=0, n=4096):
    """Two classes: 60 % of the voxels right by a small margin, the rest wrong by a large one."""
    g = np.random.default_rng(seed)
    right = g.random(n) < 0.6
    y = g.integers(0, 2, n)
    diff = np.where(right, 0.5, -3.0) * np.where(y == 1, 1.0, -1.0)  # logit of class 1 minus class 0
    return np.stack([np.zeros(n), diff]), y


def test_a_network_worse_than_uniform_is_refused_though_many_voxels_are_right():
    """Issue: only "every voxel wrong" was refused; on cases where 60 % of the voxels were right but the confident
    errors outweighed them the NLL falls all the way to t = infinity, and ``calibrate`` wrote t = 29 "after 1000
    steps", advising to rerun with more ``--max-steps`` (which never converge)."""
    z, y = _anti_informative()
    assert _reference_t(z, y) > 0.99 * BOUND  # the reference runs to its bound: no temperature fits
    with pytest.raises(ValueError, match=r"--labels: .* no better than uniform probabilities \(1[0-9]{3} of 4096"):
        check_fit_is_defined([torch.from_numpy(z).float()[None]], [torch.from_numpy(y)[None]])


def test_every_voxel_wrong_with_three_classes_can_still_fit_a_temperature():
    """Issue: every voxel wrong was refused as "no temperature fits them", but with three classes and the reference
    the second logit the NLL has a finite minimum (t = 2.8 here)."""
    g = np.random.default_rng(1)
    n = 64
    z = np.stack([1.0 + 0.1 * g.standard_normal(n), np.full(n, 0.5), np.full(n, -6.0)])
    y = np.ones(n, dtype=np.int64)
    t = _reference_t(z, y)
    assert 1.0 < t < 10.0
    assert check_fit_is_defined([torch.from_numpy(z).float()[None]], [torch.from_numpy(y)[None]]) == n


@pytest.mark.parametrize("seed", range(6))
def test_refused_exactly_when_the_reference_has_no_minimum(seed):
    """Random cohorts between informative and anti-informative: refused iff scipy's minimum is at a bound."""
    g = np.random.default_rng(seed)
    c, n = (2, 3, 4)[seed % 3], 500
    y = g.integers(0, c, n)
    quality = (-1.5, -0.5, 0.0, 0.5, 1.5, -3.0)[seed]  # how much the reference's logit is raised
    z = g.standard_normal((c, n)) * 2
    z[y, np.arange(n)] += quality
    t = _reference_t(z, y)
    at_bound = t > 0.99 * BOUND or t < 1.01 / BOUND
    args = ([torch.from_numpy(z)[None]], [torch.from_numpy(y)[None]])
    if at_bound:
        with pytest.raises(ValueError, match="--labels"):
            check_fit_is_defined(*args)
    else:
        check_fit_is_defined(*args)


def test_regions_worse_than_chance_are_refused_by_name():
    z, y = _anti_informative()
    logit = torch.from_numpy(z[1] - z[0]).reshape(1, 1, -1, 1)
    mask = torch.from_numpy(y).reshape(1, 1, -1, 1).to(torch.uint8)
    good = torch.from_numpy(np.where(y == 1, 2.0, -2.0) + np.random.default_rng(0).standard_normal(y.size) * 2)
    logits = torch.cat([good.reshape(1, 1, -1, 1), logit], 1)
    masks = torch.cat([mask, mask], 1)
    with pytest.raises(ValueError, match="region 'B' of .* no better than uniform"):
        check_fit_is_defined([logits], [masks], "sigmoid", mode="vector", region_names=["A", "B"])


def test_ties_bound_nothing_and_a_chunked_case_counts_as_one():
    """A reference tied with another class's logit is not an error that bounds the temperature from below."""
    z = torch.tensor([[[1.0, 3.0, 0.0], [1.0, -1.0, 2.0]]])  # voxel 0 tied
    with pytest.raises(ValueError, match="every voxel .* right"):
        check_fit_is_defined([z], [torch.tensor([[1, 0, 1]])])
    from monai_unc.workflows import calibrate as module

    g = torch.Generator().manual_seed(0)
    zc = torch.randn(2, 3, 50, generator=g)
    yc = torch.randint(0, 3, (2, 50), generator=g)
    zc = zc + 1.5 * torch.nn.functional.one_hot(yc, 3).movedim(-1, 1)  # informative, with errors
    whole = check_fit_is_defined([zc], [yc])
    old = module._CHECK_CHUNK
    try:
        module._CHECK_CHUNK = 7
        assert check_fit_is_defined([zc], [yc]) == whole
    finally:
        module._CHECK_CHUNK = old
