"""Hostile input to ``monai_unc.temperature.TemperatureScaler``: probabilities for logits, NaN logits, use before
``fit``, bad options, empty or unequal inputs."""

import pytest
import torch

from monai_unc.temperature import TemperatureScaler
from tests._cases import softmax_case


# ---------------------------------------------------------------------------------------------------------------
# item 10: TemperatureScaler
# ---------------------------------------------------------------------------------------------------------------
def test_temperature_fit_refuses_probabilities():
    z, p, y = softmax_case()
    with pytest.raises(ValueError, match="logits look like probabilities"):
        TemperatureScaler(max_steps=5).fit(p, y)


def test_temperature_transform_before_fit_is_refused():
    z, _, y = softmax_case()
    scaler = TemperatureScaler()
    with pytest.raises(RuntimeError, match="before fit"):
        scaler.transform(z)
    with pytest.raises(RuntimeError, match="before fit"):
        scaler(z)
    with pytest.raises(RuntimeError, match="before fit"):
        scaler.fold_into(torch.nn.Conv2d(2, 3, 1))
    fitted = TemperatureScaler(max_steps=3).fit(z, y)
    assert fitted.fitted and fitted.transform(z).shape == z.shape
    restored = TemperatureScaler()
    restored.load_state_dict(fitted.state_dict())
    assert restored.fitted and torch.equal(restored.transform(z), fitted.transform(z))


def test_temperature_transform_refuses_nan_logits():
    z, _, y = softmax_case()
    scaler = TemperatureScaler(max_steps=3).fit(z, y)
    bad = z.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="logits"):
        scaler.transform(bad)


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan")])
def test_temperature_min_temperature_must_be_positive(value):
    with pytest.raises(ValueError, match="min_temperature"):
        TemperatureScaler(min_temperature=value)


def test_temperature_empty_batch_and_unequal_lists_name_the_argument():
    z, _, y = softmax_case()
    with pytest.raises(ValueError, match="logits"):
        TemperatureScaler(max_steps=3).fit(torch.empty(0, 3, 4, 4), torch.empty(0, 4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="logits and target"):
        TemperatureScaler(max_steps=3).fit([z, z], [y])
    with pytest.raises(ValueError, match="logits and target"):
        TemperatureScaler(max_steps=3).fit([z], [y, y])
    with pytest.raises(ValueError, match="logits and target"):  # generators: found while streaming
        TemperatureScaler(max_steps=3).fit(lambda: iter([z, z]), lambda: iter([y]))
