"""Hand-edited calibration files: the temperature a calibrated checkpoint (``monai-unc calibrate``) or a
:class:`~monai_unc.temperature.TemperatureScaler` state dict carries is untrusted input, checked before it is applied
(:func:`monai_unc.temperature.check_temperature`)."""

from __future__ import annotations

import json

import pytest
import torch
from monai.networks.nets import UNet

from monai_unc.temperature import TemperatureScaled, TemperatureScaler, check_temperature
from monai_unc.workflows.models import load_network
from tests._cases import TOY_NET, bias_toward_background


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("calfile")
    torch.manual_seed(0)
    net = UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"})
    (root / "net.json").write_text(json.dumps(TOY_NET))
    return root, net


def _load(toy, temperature):
    root, net = toy
    path = root / "cal.pt"
    torch.save({"state_dict": net.state_dict(), "temperature": temperature, "temperature_mode": "scalar"}, path)
    return load_network(network=str(root / "net.json"), checkpoints=[str(path)]), path


@pytest.mark.parametrize("bad", [torch.tensor([-2.0]), torch.tensor([0.0]), torch.tensor([float("nan")]),
                                 torch.tensor([float("inf")]), torch.tensor([]), torch.tensor([True]), "2.0", None])
def test_a_hand_edited_temperature_is_refused_naming_the_file(toy, bad):
    """Issue: a checkpoint whose temperature was edited to -2 loaded without a word and reversed every segmentation
    (the logits divided by -2: the argmax became the argmin); 0 or NaN gave non-finite logits, and a string or None
    in place of the tensor was dropped, the network run uncalibrated."""
    with pytest.raises(ValueError, match=r"checkpoint .*cal\.pt: its temperature"):
        _load(toy, bad)


@pytest.mark.parametrize("value", [2.0, [2.0], torch.tensor([2.0], dtype=torch.float64)])
def test_a_temperature_given_as_a_number_is_applied(toy, value):
    """Issue: a temperature stored as a number or list (not a tensor) was ignored: the network ran uncalibrated."""
    model, _ = _load(toy, value)
    assert isinstance(model.network, TemperatureScaled) and "temperature [2.0]" in model.description
    x = torch.randn(1, 1, 16, 16, 16)
    with torch.no_grad():
        assert torch.allclose(model.network(x), model.network.network(x) / 2.0)


def test_a_vector_temperature_of_other_classes_is_refused_by_name(toy):
    model, _ = _load(toy, torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="the temperature has 3 values .* outputs 2 channels"):
        model.network(torch.randn(1, 1, 16, 16, 16))


def test_check_temperature():
    assert check_temperature(2).dtype == torch.float64
    assert check_temperature([[1.5]]).shape == (1, 1)
    for bad in (-1.0, 0, float("nan"), [], "x", True, [1.0, -1.0], torch.tensor([1 + 1j])):
        with pytest.raises(ValueError, match="temperature"):
            check_temperature(bad)


def test_temperature_scaled_and_the_scaler_refuse_a_non_positive_temperature():
    """Issue: ``TemperatureScaled`` and a scaler whose state dict was edited (or whose ``temperature`` was assigned)
    divided by a negative temperature, reversing the segmentation."""
    with pytest.raises(ValueError, match="positive"):
        TemperatureScaled(torch.nn.Identity(), torch.tensor([-1.0]))
    scaler = TemperatureScaler()
    with pytest.raises(ValueError, match="positive"):
        scaler.temperature = torch.tensor([-1.0], dtype=torch.float64)
    assert not scaler.fitted
    fitted = TemperatureScaler()
    fitted.temperature = torch.tensor([2.0], dtype=torch.float64)
    state = fitted.state_dict()
    state["temperature"] = torch.tensor([-2.0], dtype=torch.float64)
    with pytest.raises(ValueError, match="state dict entry temperature"):
        TemperatureScaler().load_state_dict(state)
    assert TemperatureScaler().load_state_dict(fitted.state_dict()) is not None


def test_calibrating_a_calibrated_checkpoint_is_refused(tmp_path, capsys):
    """Issue: ``calibrate --checkpoint`` of a checkpoint that holds a temperature (a network whose last layer could
    not absorb it) wrote ``{"state_dict": {"temperature": ..., "network.*": ...}, "temperature": t2}``, which no
    later command could load ("does not fit the network"), and recorded t2 alone as the temperature."""
    from monai_unc import cli
    from monai_unc.data.cohorts import write_toy_cohort
    from monai_unc.temperature import calibrate_network

    paths = write_toy_cohort(tmp_path / "data", n_cases=1, shape=(16, 16, 16), predictions=False)
    spec = dict(TOY_NET, num_res_units=1)  # a residual addition follows the last convolution: t is not folded
    (tmp_path / "net.json").write_text(json.dumps(spec))
    torch.manual_seed(0)
    net = bias_toward_background(UNet(**{k: v for k, v in spec.items() if k != "_target_"}))
    torch.save(net.state_dict(), tmp_path / "net.pt")
    argv = ["calibrate", "-i", str(paths["images"]), "-l", str(paths["labels"]),
            "--network", str(tmp_path / "net.json"), "--max-steps", "5", "-q"]
    assert cli.main([*argv, "--checkpoint", str(tmp_path / "net.pt"), "-o", str(tmp_path / "a" / "cal.pt")]) == 0
    assert "temperature" in torch.load(tmp_path / "a" / "cal.pt", weights_only=True)
    capsys.readouterr()
    out = tmp_path / "b" / "cal.pt"
    assert cli.main([*argv, "--checkpoint", str(tmp_path / "a" / "cal.pt"), "-o", str(out)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "is calibrated already" in err[0], err
    assert not out.exists()
    wrapped = TemperatureScaled(torch.nn.Conv2d(1, 2, 1), torch.tensor([2.0]))
    with pytest.raises(ValueError, match="network is calibrated already"):
        calibrate_network([torch.randn(1, 2, 4, 4)], [torch.zeros(1, 4, 4, dtype=torch.long)], wrapped)
