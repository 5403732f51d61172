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



@pytest.mark.parametrize("activation", ["softmax", "sigmoid"])
def test_a_vector_temperature_loads_into_a_scaler_built_without_num_classes(activation):
    """Found by hostile testing: a vector scaler saved with ``state_dict()`` (MONAI's ``CheckpointSaver``) did not
    load into ``TemperatureScaler(mode="vector")``, built as documented without ``num_classes``: torch's "size
    mismatch for temperature: copying a param with shape torch.Size([4]) ... torch.Size([1])" stopped the run.
    It loads now with its classes; a scaler told another number of classes still refuses it."""
    torch.manual_seed(0)
    if activation == "softmax":
        y = torch.randint(0, 4, (2, 6, 6, 3))
        z = 5 * torch.nn.functional.one_hot(y, 4).permute(0, 4, 1, 2, 3).float() + 3 * torch.randn(2, 4, 6, 6, 3)
    else:
        y = (torch.rand(2, 4, 6, 6, 3) > 0.5).float()
        z = 5 * (2 * y - 1) + 3 * torch.randn_like(y)
    fitted = TemperatureScaler(mode="vector", max_steps=20, activation=activation).fit(z, y)
    restored = TemperatureScaler(mode="vector", activation=activation)
    restored.load_state_dict(fitted.state_dict())
    assert restored.fitted and restored.num_classes == 4
    assert torch.equal(restored.temperature, fitted.temperature)
    assert torch.equal(restored.transform(z), fitted.transform(z))
    with pytest.raises(RuntimeError, match="size mismatch"):
        TemperatureScaler(mode="vector", num_classes=3, activation=activation).load_state_dict(fitted.state_dict())


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
