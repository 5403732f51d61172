"""Hostile review 57 of ``monai_unc.temperature``: defects found against independent references."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from scipy.optimize import minimize_scalar
from scipy.special import logsumexp

from monai_unc.temperature import TemperatureScaled, TemperatureScaler


def test_a_scalar_scaler_refuses_one_temperature_per_class():
    # found by hostile review 57: a scalar scaler took t = [1, 4] without a word, and transform divided the logits
    # (1, 2, 3, 2) along their last spatial axis (every class's columns by 1 and 4) instead of along the classes
    scaler = TemperatureScaler()
    with pytest.raises(ValueError, match="temperature.*mode='vector'"):
        scaler.temperature = torch.tensor([1.0, 4.0], dtype=torch.float64)
    assert not scaler.fitted


def test_a_vector_scaler_still_takes_one_temperature_per_class_and_a_scalar_one_value():
    z = torch.ones(1, 2, 3, 2)
    vector = TemperatureScaler(mode="vector")
    vector.temperature = torch.tensor([1.0, 4.0], dtype=torch.float64)
    assert torch.equal(vector.transform(z)[0, :, 0, 0], torch.tensor([1.0, 0.25]))
    scalar = TemperatureScaler()
    scalar.temperature = torch.tensor(4.0, dtype=torch.float64)
    assert torch.equal(scalar.transform(z), z / 4)


@pytest.mark.parametrize("t", [1e-50, 1e50])
def test_temperature_scaled_refuses_a_temperature_that_float32_cannot_hold(t):
    # found by hostile review 57: the checked float64 value was stored as float32 0 (logits inf, softmax NaN) or inf
    # (logits 0: uniform probabilities), from a temperature read from a checkpoint
    with pytest.raises(ValueError, match="temperature must lie in float32"):
        TemperatureScaled(torch.nn.Identity(), torch.tensor(t, dtype=torch.float64))


def test_temperature_scaled_keeps_ordinary_temperatures():
    scaled = TemperatureScaled(torch.nn.Identity(), torch.tensor([1.0, 4.0], dtype=torch.float64))
    assert scaled(torch.tensor([[2.0, 2.0]])).tolist() == [[2.0, 0.5]]


def _small_scale_logits() -> tuple[np.ndarray, np.ndarray, float]:
    """Logits of scale 1e-3 and scipy's NLL-minimising temperature (about 7e-4, below the default bound 0.01)."""
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, (2, 20, 20))
    z = (3 * np.moveaxis(np.eye(3)[y], -1, 1) + 1.5 * rng.normal(size=(2, 3, 20, 20))) * 1e-3
    zf, yf = np.moveaxis(z, 1, -1).reshape(-1, 3), y.ravel()

    def nll(t: float) -> float:
        return float(np.mean(logsumexp(zf / t, 1) - zf[np.arange(len(yf)), yf] / t))

    best = minimize_scalar(nll, bounds=(1e-5, 1.0), method="bounded", options={"xatol": 1e-12}).x
    return z, y, float(best)


def test_a_fit_held_at_min_temperature_is_not_reported_converged():
    # found by hostile review 57: the fit stopped at min_temperature = 0.01 (NLL 0.909; scipy: t = 0.00068, NLL 0.295)
    # and reported converged=True, defined=True, without a word
    z, y, best = _small_scale_logits()
    assert best < 0.01
    with pytest.warns(UserWarning, match="min_temperature=0.01 while the NLL still falls below it"):
        scaler = TemperatureScaler().fit(torch.tensor(z), torch.tensor(y))
    assert not scaler.converged
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a bound below the minimum: no warning, scipy's minimum
        scaler = TemperatureScaler(min_temperature=1e-4, init_temperature=2e-3, lr=1e-4).fit(torch.tensor(z),
                                                                                              torch.tensor(y))
    assert scaler.converged
    assert float(scaler.temperature) == pytest.approx(best, rel=1e-3)
