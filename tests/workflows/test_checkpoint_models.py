"""Hostile model inputs for ``monai_unc.workflows.models``: network specs MONAI cannot build, checkpoints in unusual
but common formats, weights of the wrong kind."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from monai_unc.workflows.models import check_weights_fit, load_checkpoint, load_network

SPEC = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 2, "in_channels": 1, "out_channels": 2,
        "channels": [4, 8], "strides": [2], "num_res_units": 0}


def _net() -> nn.Module:
    from monai.networks.nets import UNet

    torch.manual_seed(0)
    return UNet(2, 1, 2, (4, 8), (2,), num_res_units=0).eval()


@pytest.mark.parametrize("spec, why", [
    ({"_target_": "monai.networks.nets.UNet", "spatial_dims": 2},
     r"missing 4 required positional arguments: 'in_channels'"),
    (dict(SPEC, spatial_dims="two"), r"TypeError: unsupported operand type"),
    (dict(SPEC, bogus=1), r"unexpected keyword argument 'bogus'"),
])
def test_spec_that_cannot_be_built_names_the_reason(tmp_path, spec, why):
    # MONAI's "Failed to instantiate component ... with keywords" named neither the missing nor the wrong argument,
    # and advised '_mode_=debug', a mode a spec may not use
    torch.save(_net().state_dict(), tmp_path / "w.pt")
    with pytest.raises(ValueError, match=r"cannot build the network from --network: .*" + why) as err:
        load_network(network=spec, checkpoints=[tmp_path / "w.pt"])
    assert "\n" not in str(err.value) and "_mode_" not in str(err.value)


def test_whole_module_under_a_wrapper_key_loads_with_unsafe_load(tmp_path):
    # torch.save({"model": net, "epoch": 3}) was refused as "does not hold a state dict of tensors" even with
    # --unsafe-load, while a bare torch.save(net) loaded
    net = _net()
    torch.save({"model": net, "epoch": 3}, tmp_path / "w.pt")
    with pytest.raises(ValueError, match=r"--unsafe-load"):  # pickled objects: refused without the opt-in
        load_checkpoint(tmp_path / "w.pt")
    state = load_checkpoint(tmp_path / "w.pt", unsafe_load=True)
    assert state.keys() == net.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in net.state_dict().items())
    loaded = load_network(network=SPEC, checkpoints=[tmp_path / "w.pt"], unsafe_load=True)
    x = torch.rand(1, 1, 16, 16)
    assert torch.equal(loaded.network(x), net(x))


def test_weights_whose_values_would_change_are_refused(tmp_path):
    # integer (quantized without scales) weights were cast into the float parameters without a word (every
    # prediction that of other weights); a sparse tensor crashed with NotImplementedError instead of one line
    net = _net()
    state = net.state_dict()
    bad = {
        "int8": {k: (v * 100).to(torch.int8) if v.is_floating_point() else v for k, v in state.items()},
        "complex": {k: v.to(torch.complex64) if v.is_floating_point() else v for k, v in state.items()},
        "sparse": {k: v.to_sparse() if k == "model.0.conv.weight" else v for k, v in state.items()},
        "meta": {k: torch.empty_like(v, device="meta") for k, v in state.items()},  # crashed in the finiteness check
    }
    for name, weights in bad.items():
        with pytest.raises(ValueError, match=rf"{name}.pt does not fit the network UNet: \d+ dtype or layout "
                                             r"mismatches \(checkpoint vs network\) \(model.0.conv.weight torch\."):
            check_weights_fit(net, weights, f"{name}.pt")
    # floating point in another precision loads: float16 weights (a count converted with them too) into float32
    half = {k: v.half() for k, v in state.items()}
    check_weights_fit(net, half, "half.pt")
    torch.save(half, tmp_path / "half.pt")
    loaded = load_network(network=SPEC, checkpoints=[tmp_path / "half.pt"])
    reference = _net()
    reference.load_state_dict({k: v.to(state[k].dtype) for k, v in half.items()})
    x = torch.rand(1, 1, 16, 16)
    assert torch.equal(loaded.network(x), reference.eval()(x))


def test_post_hoc_dropout_on_a_network_with_dropout_warns():
    # monai-unc infer --dropout 0.2 on a UNet(dropout=0.1) stacked both dropouts without a word (the docs say the
    # option inserts dropout into a network without any)
    from monai.networks.nets import UNet

    from monai_unc.inferers import add_dropout, find_dropout_layers

    with pytest.warns(UserWarning, match=r"already has \d+ dropout layer\(s\) \(p=0.1\); post-hoc dropout p=0.2 is "
                                         r"added on top of them"):
        add_dropout(UNet(2, 1, 2, (4, 8, 16), (2, 2), num_res_units=0, dropout=0.1), p=0.2)
    plain = UNet(2, 1, 2, (4, 8, 16), (2, 2), num_res_units=0, dropout=0.0)  # Dropout(p=0) layers: none to sample
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        names = add_dropout(plain, p=0.2)
    modules, hooks = find_dropout_layers(plain)
    assert not modules and len(hooks) == len(names) >= 2 and {h.p for h in hooks} == {0.2}


def test_network_specs_that_are_no_spec_are_one_line(tmp_path):
    # a deeply nested inline spec crashed with RecursionError (a traceback), an inline JSON list and a folder were
    # "file not found"
    from monai_unc import cli

    torch.save(_net().state_dict(), tmp_path / "w.pt")
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    for spec, error, message in [
        (deep, ValueError, r"network spec is not valid JSON: nested too deeply"),
        ('[{"_target_": "torch.nn.Identity"}]', ValueError, r"inline network spec must be a MONAI config dict .*list"),
        (str(tmp_path), IsADirectoryError, r"network spec .* is a folder, not a file"),
    ]:
        with pytest.raises(error, match=message):
            load_network(network=spec, checkpoints=[tmp_path / "w.pt"])
    (tmp_path / "images").mkdir()
    assert cli.main(["infer", "-i", str(tmp_path / "images"), "-o", str(tmp_path / "out"), "--network", deep,
                     "--checkpoint", str(tmp_path / "w.pt")]) == 2
    assert not (tmp_path / "out").exists()


def test_weights_without_num_batches_tracked_load_as_in_torch(tmp_path):
    # a state dict without batch norm's num_batches_tracked (torch < 0.4.1, or converted from another framework),
    # which torch's strict load_state_dict takes, was refused as "2 missing keys"
    from monai.networks.nets import UNet

    torch.manual_seed(0)
    net = UNet(2, 1, 2, (4, 8), (2,), num_res_units=0, norm="batch").eval()
    for m in net.modules():  # running statistics that are not the initial ones
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    state = {k: v for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    UNet(2, 1, 2, (4, 8), (2,), num_res_units=0, norm="batch").load_state_dict(state)  # torch: strict and fine
    torch.save(state, tmp_path / "w.pt")
    loaded = load_network(network=dict(SPEC, norm="batch"), checkpoints=[tmp_path / "w.pt"])
    x = torch.rand(1, 1, 16, 16)
    assert torch.equal(loaded.network(x), net(x))
    with pytest.raises(ValueError, match=r"1 missing keys \(model.0.adn.N.running_mean\)"):  # other keys: refused
        check_weights_fit(net, {k: v for k, v in state.items() if k != "model.0.adn.N.running_mean"}, "w.pt")


class LearnedTemperatureNet(nn.Module):
    """A network that divides its logits by a learned parameter named ``temperature`` (a top-level state dict key)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 1)
        self.temperature = nn.Parameter(torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) / self.temperature


def test_a_network_parameter_named_temperature_is_not_a_calibrated_temperature(tmp_path):
    # the flat state dict's "temperature" (the network's own parameter) was taken for the temperature of a
    # calibrated checkpoint: the network was wrapped in TemperatureScaled and its logits divided by it twice
    from monai_unc.workflows.models import checkpoint_temperature

    torch.manual_seed(0)
    net = LearnedTemperatureNet().eval()
    torch.save(net.state_dict(), tmp_path / "w.pt")
    name = f"{__name__}.LearnedTemperatureNet"
    loaded = load_network(network={"_target_": name}, checkpoints=[tmp_path / "w.pt"], allow_code=[name])
    x = torch.rand(1, 1, 4, 4)
    assert loaded.temperature is None and "temperature" not in loaded.description
    assert torch.equal(loaded.network(x), net(x))
    # calibrate's format, the temperature beside the state dict, is still applied (on top of the network's own)
    torch.save({"state_dict": net.state_dict(), "temperature": torch.tensor(4.0)}, tmp_path / "calibrated.pt")
    assert float(checkpoint_temperature(str(tmp_path / "calibrated.pt"), False)) == 4.0
    loaded = load_network(network={"_target_": name}, checkpoints=[tmp_path / "calibrated.pt"], allow_code=[name])
    assert torch.allclose(loaded.network(x), net(x) / 4.0)


def test_bundle_ensemble_members_are_read_with_the_bundle_checkpoint_key(tmp_path):
    # a bundle whose CheckpointLoader reads {"weights": state dict}: its first checkpoint loaded, every other ensemble
    # member was refused ("does not hold a state dict of tensors (it holds the entries epoch, weights)")
    import warnings

    from monai_unc.workflows.factory import build_inferer
    from tests.bundles.test_cli_bundles import _bundle

    def weights_key(cfg):
        cfg["checkpointloader"]["load_dict"] = {"weights": "@network"}

    bundle = _bundle(tmp_path / "keyed", weights_key)
    state = torch.load(bundle / "models" / "model.pt", weights_only=True)
    members = []
    for i in range(2):
        members.append(tmp_path / f"m{i}.pt")
        torch.save({"weights": {k: v * (1 + i) if v.is_floating_point() else v for k, v in state.items()},
                    "epoch": torch.tensor(3)}, members[-1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = load_network(bundle=bundle, checkpoints=members, bundle_preprocessing=False)
        assert loaded.checkpoint_key == "weights"
        inferer = build_inferer("ensemble", checkpoints=[str(m) for m in members],
                                checkpoint_key=loaded.checkpoint_key)
        source = inferer.sources[0]
        seen = []
        for member in source.members(loaded.network, torch.device("cpu")):
            with member as net:
                seen.append({k: v.clone() for k, v in net.state_dict().items()})
    for i, got in enumerate(seen):  # each member's own weights, read under the key
        for k, v in state.items():
            torch.testing.assert_close(got[k], v * (1 + i) if v.is_floating_point() else v, rtol=0, atol=0)
