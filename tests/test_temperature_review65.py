"""Review 65: per-class (vector) NLL fits end at the minimum (a float64 scipy reference); the ECE fit's guarantee."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from scipy.special import logsumexp

from monai_unc.metrics.calibration import ece
from monai_unc.temperature import NLL_RTOL, TemperatureScaler


def _vector_reference(z: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """The per-class NLL minimiser by scipy's BFGS on ``log(1 / t_c)`` in float64, from ``1 / t_c = 1 / std(z_c)``."""
    zf = z.double().numpy()[0].reshape(z.shape[1], -1)  # (C, n)
    yf = y.numpy().ravel()
    i = np.arange(len(yf))

    def nll(u: np.ndarray) -> tuple[float, np.ndarray]:
        b = np.exp(u)
        a = zf * b[:, None]
        lse = logsumexp(a, 0)
        p = np.exp(a - lse)
        grad = (zf * p).sum(1) - np.bincount(yf, weights=zf[yf, i], minlength=len(b))
        return float(np.mean(lse - a[yf, i])), grad / len(yf) * b

    r = minimize(nll, -np.log(zf.std(1)), jac=True, method="BFGS", options={"gtol": 1e-13, "maxiter": 10_000})
    return np.exp(-r.x)


def _case(scales: list[float], seed: int, n: int = 600) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels drawn from softmax(base logits); the logits of class c multiplied by scales[c] (its best t_c ~ scale)."""
    g = torch.Generator().manual_seed(seed)
    base = 2.0 * torch.randn(1, len(scales), n, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(base[0], 0).T, 1, generator=g).T
    return (base * torch.tensor(scales, dtype=torch.float64).view(1, -1, 1)).float(), y


def _fit(z: torch.Tensor, y: torch.Tensor, **kwargs: object) -> tuple[TemperatureScaler, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler = TemperatureScaler(**kwargs).fit(z, y)
    return scaler, [str(w.message) for w in caught]


@pytest.mark.parametrize(("scales", "seed"), [([1.0, 2.0, 0.5], 0), ([300.0, 1000.0, 50.0], 1),
                                              ([1e-3, 3e-3, 1e-2], 2), ([1e-3, 1.0, 1e3], 3),
                                              ([1.0, 1.0, 1.0, 1e3], 4)])
def test_per_class_nll_fit_ends_at_the_float64_minimum(scales: list[float], seed: int) -> None:
    # before review 65: RMSprop alone; 30 steps from t = 2 stop at t ~ 3.5 or 0.5, far from minima at 1e-3 or 1e3
    z, y = _case(scales, seed)
    reference = _vector_reference(z, y)
    scaler, caught = _fit(z, y, mode="vector", max_steps=30, min_temperature=1e-4)
    np.testing.assert_allclose(scaler.temperature.numpy(), reference, rtol=NLL_RTOL)
    assert scaler.converged and not caught


def test_per_class_minimum_below_min_temperature_is_held_there_with_the_warning() -> None:
    z, y = _case([1e-3, 1.0, 1.0], 5)
    reference = _vector_reference(z, y)
    assert reference[0] < 0.01 and reference[1:].min() > 0.01
    scaler, caught = _fit(z, y, mode="vector", max_steps=30)  # min_temperature 0.01
    t = scaler.temperature.numpy()
    assert t[0] == 0.01 and not scaler.converged
    assert any("min_temperature" in m for m in caught)
    # the other classes are the minimum of the NLL with t_0 held at 0.01 (not their unconstrained minimum)
    assert np.all(np.isfinite(t)) and t[1:].min() > 0.01


#: the stated tolerance of an ECE fit (docs/calibration.md, "What an ECE fit guarantees"): on these calibration sets
#: the returned temperature's ECE is within this (absolute) of the least ECE over a grid of [t / 4, 4 t]
ECE_GRID_ATOL = 0.005


@pytest.mark.parametrize(("seed", "scale"), [
    (5, 2.0),
    # ~10 s: the fit takes 333 RMSprop steps; it has the widest gap of 8 seeded cases (0.0025)
    pytest.param(3, 10.0, marks=pytest.mark.slow),
])  # the two widest gaps of 8 seeded cases
def test_ece_fit_is_the_least_ece_it_saw_and_near_a_brute_force_grid_minimum(seed: int, scale: float) -> None:
    g = torch.Generator().manual_seed(seed)
    base = 2.0 * torch.randn(1, 3, 2000, generator=g, dtype=torch.float64)
    y = torch.multinomial(torch.softmax(base[0], 0).T, 1, generator=g).T
    z = base * scale
    scaler, caught = _fit(z, y, loss="ece", min_bin_count=20)
    t = scaler.temperature.item()

    def ece_at(tt: float) -> float:
        return float(ece(torch.softmax(z / tt, 1), y, n_bins=20, min_bin_count=20))

    fitted = ece_at(t)
    # guaranteed: the least loss among the temperatures its steps evaluated (the loss is metrics.ece, same binning)
    assert fitted == pytest.approx(min(h["loss"] for h in scaler.history), abs=1e-12)
    grid = t * np.exp(np.linspace(-np.log(4), np.log(4), 41))
    assert fitted <= min(ece_at(float(v)) for v in grid) + ECE_GRID_ATOL


def test_per_class_fit_of_a_class_the_reference_lacks_says_no_temperature_minimises_it() -> None:
    """Hostile review of review 65: a class no voxel of the reference shows, with logits of both signs, has no finite
    minimiser (the NLL falls as ``t_c`` grows without end: ``1 / t_c -> 0``). Newton's method ran off and the fit
    kept where RMSprop stopped (``t_3 = 11.4``, another run 13.0) with the advice to pass a larger max_steps, which
    never converges; it now names the class and says no temperature minimises its NLL."""
    z, y = _case([1.0, 1.0, 1.0, 1.0], seed=3, n=400)
    y[y == 3] = 0
    assert float(z[0, 3].min()) < 0 < float(z[0, 3].max())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = TemperatureScaler(mode="vector", max_steps=100).fit(z, y)
    messages = [str(w.message) for w in caught]
    assert not s.converged
    assert any("class 3" in m and "no finite temperature" in m for m in messages), messages
    assert not any("max_steps" in m for m in messages), messages
    with warnings.catch_warnings(record=True) as caught:  # a reference of class 0 only: every other class named
        warnings.simplefilter("always")
        TemperatureScaler(mode="vector", max_steps=100).fit(z + torch.tensor([2.0, 0, 0, 0]).view(1, 4, 1),
                                                            torch.zeros_like(y))  # better than uniform
    messages = [str(w.message) for w in caught]
    assert any("of class 1, class 2, class 3:" in m for m in messages), messages


def test_per_class_fit_of_a_class_its_logits_sign_separates_says_no_temperature_minimises_it() -> None:
    """Hostile review of review 65: a class whose logits are negative on every voxel and which the reference never
    shows (more generally: positive only on its own voxels, never negative on them) has no finite minimiser below
    either: the NLL falls as ``t_c`` goes to 0 without end. The fit was held at ``min_temperature`` advising a smaller
    one, which never helps; it now names the class and says no temperature minimises its NLL."""
    z, y = _case([1.0, 1.0, 1.0, 1.0], seed=3, n=400)
    y[y == 3] = 0
    z[0, 3] = -z[0, 3].abs() - 1.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = TemperatureScaler(mode="vector", max_steps=100).fit(z, y)
    messages = [str(w.message) for w in caught]
    assert not s.converged and float(s.temperature[3]) == pytest.approx(s.min_temperature)
    assert any("class 3" in m and "no finite temperature" in m for m in messages), messages
    assert not any("smaller min_temperature" in m for m in messages), messages
    with warnings.catch_warnings(record=True) as caught:  # a minimum below the bound still advises a smaller one
        warnings.simplefilter("always")
        TemperatureScaler(mode="vector", max_steps=200, min_temperature=1.5).fit(z, _case([1.0] * 4, seed=3, n=400)[1])
    assert any("smaller min_temperature" in str(w.message) for w in caught), [str(w.message) for w in caught]
