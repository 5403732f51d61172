"""Hostile review 57 of ``monai_unc.temperature``: defects found against independent references."""

from __future__ import annotations

import pytest
import torch

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
