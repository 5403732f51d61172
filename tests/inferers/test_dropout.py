"""enable_mc_dropout and post-hoc add_dropout on MONAI and nnU-Net architectures."""

import pytest
import torch
from monai.networks.layers import DropPath
from monai.networks.nets import BasicUNet, DynUNet, UNet
from torch import nn

from monai_unc.inferers import (
    DropoutHook,
    MCDropoutInferer,
    add_dropout,
    default_dropout_sites,
    enable_mc_dropout,
    find_dropout_layers,
    remove_dropout,
)


def plain_conv_unet():
    from dynamic_network_architectures.architectures.unet import PlainConvUNet

    return PlainConvUNet(1, 3, (4, 8, 16), nn.Conv3d, 3, (1, 2, 2), (1, 1, 1), 3, (1, 1), False,
                         nn.InstanceNorm3d, None, None, None, nn.LeakyReLU, None, deep_supervision=False)


ARCHS = {
    "UNet": lambda: UNet(3, 1, 3, channels=(4, 8, 16, 32), strides=(2, 2, 2), num_res_units=1),
    "BasicUNet": lambda: BasicUNet(3, 1, 3, features=(4, 4, 8, 8, 16, 4)),
    "DynUNet": lambda: DynUNet(3, 1, 3, kernel_size=[3, 3, 3], strides=[1, 2, 2], upsample_kernel_size=[2, 2]),
    "PlainConvUNet": plain_conv_unet,
}
EXPECTED_SITES = {"UNet": 6, "BasicUNet": 9, "DynUNet": 5, "PlainConvUNet": 5}


@pytest.mark.parametrize("arch", list(ARCHS))
def test_add_dropout_default_placement(arch):
    torch.manual_seed(0)
    net = ARCHS[arch]().eval()
    x = torch.randn(1, 1, *([32 if arch == "BasicUNet" else 16] * 3))
    with torch.no_grad():
        ref = net(x)
    keys_before = list(net.state_dict())
    names = add_dropout(net, p=0.3)
    assert len(names) == EXPECTED_SITES[arch]
    assert list(net.state_dict()) == keys_before  # checkpoints still load
    modules = dict(net.named_modules())
    # no dropout on the output layer
    out_like = {"UNet": "model.2", "BasicUNet": "final_conv", "DynUNet": "output_block",
                "PlainConvUNet": "decoder.seg_layers"}[arch]
    assert not any(n == out_like or n.startswith(out_like + ".") for n in names)
    assert all(n in modules for n in names)
    with torch.no_grad():
        torch.testing.assert_close(net(x), ref)  # eval mode: deterministic, unchanged
        with enable_mc_dropout(net) as ctx:
            assert ctx.num_layers == len(names)
            a, b = net(x), net(x)
        assert not torch.allclose(a, b)
        torch.testing.assert_close(net(x), ref)  # restored
    out = MCDropoutInferer(3)(x, net)
    assert float(out["mutual_information"].max()) > 0
    assert remove_dropout(net) == len(names)
    with pytest.raises(ValueError, match="no dropout layer"):
        enable_mc_dropout(net)


def test_unet_sites_are_stages():
    net = ARCHS["UNet"]()
    sites = default_dropout_sites(net)
    assert sites[0] == "model.0"  # first encoder stage
    assert "model.2" not in sites  # output block
    assert "model.1.submodule.2" in sites  # first decoder stage below the output


def test_add_dropout_explicit_names_and_predicate():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 1))
    assert add_dropout(net, 0.5, after=["1"]) == ["1"]
    assert add_dropout(net, 0.5, after=lambda n, m: isinstance(m, nn.Conv2d) and n == "0") == ["0"]
    with pytest.raises(ValueError, match="does not have"):
        add_dropout(net, 0.5, after=["nope"])
    with pytest.raises(ValueError, match="does not know"):
        add_dropout(nn.Sequential(nn.Conv2d(1, 2, 1)), 0.1)
    with pytest.raises(ValueError, match="p must be"):
        add_dropout(net, 1.0, after=["1"])
    with pytest.raises(ValueError, match="selected no module"):
        add_dropout(net, 0.1, after=[])


def test_channelwise_vs_elementwise_hook():
    x = torch.ones(2, 16, 8, 8)
    torch.manual_seed(0)
    y = DropoutHook(0.5, channelwise=True)._drop(x)
    per_channel = y.flatten(2)
    assert torch.all(per_channel.amin(-1) == per_channel.amax(-1))  # whole channels kept or dropped
    y = DropoutHook(0.5, channelwise=False)._drop(x)
    assert not torch.all(y.flatten(2).amin(-1) == y.flatten(2).amax(-1))


def test_enable_mc_dropout_finds_all_kinds_and_restores():
    net = nn.Sequential(nn.Conv2d(1, 2, 1), nn.Dropout2d(0.2), nn.AlphaDropout(0.1), DropPath(0.2),
                        nn.BatchNorm2d(2))
    net.eval()
    modules, hooks = find_dropout_layers(net)
    assert len(modules) == 3 and not hooks
    assert len(find_dropout_layers(nn.Sequential(nn.Dropout(0.0)))[0]) == 0
    ctx = enable_mc_dropout(net)
    assert [m.training for m in net] == [False, True, True, True, False]  # BatchNorm stays in eval
    ctx.restore()
    assert not any(m.training for m in net)
    with pytest.raises(TypeError, match="model"):
        enable_mc_dropout("not a model")


def test_timm_droppath_is_found():
    timm_layers = pytest.importorskip("timm.layers")
    net = nn.Sequential(nn.Linear(2, 2), timm_layers.DropPath(0.1))
    assert len(find_dropout_layers(net)[0]) == 1
