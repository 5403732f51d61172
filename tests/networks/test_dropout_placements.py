"""Named dropout placements (add_dropout(after="decoder" | "last" | "last:k" | "bottleneck" | "encoder"))."""

import pytest
import torch
from monai.networks.nets import BasicUNet, DynUNet, SegResNet, UNet

from monai_unc.inferers import PLACEMENTS, add_dropout, default_dropout_sites, find_dropout_layers, stage_sites


def plain_conv_unet():
    pytest.importorskip("dynamic_network_architectures")
    from dynamic_network_architectures.architectures.unet import PlainConvUNet

    return PlainConvUNet(1, 3, (4, 8, 16), torch.nn.Conv3d, 3, (1, 2, 2), (1, 1, 1), 3, (1, 1), False,
                         torch.nn.InstanceNorm3d, None, None, None, torch.nn.LeakyReLU, None, deep_supervision=False)


ARCHS = {
    "UNet": (lambda: UNet(3, 1, 3, channels=(4, 8, 16, 32), strides=(2, 2, 2), num_res_units=1),
             ["model.0", "model.1.submodule.0", "model.1.submodule.1.submodule.0"],
             ["model.1.submodule.1.submodule.1.submodule"],
             ["model.1.submodule.1.submodule.2", "model.1.submodule.2"]),
    "BasicUNet": (lambda: BasicUNet(3, 1, 3, features=(4, 4, 8, 8, 16, 4)),
                  ["conv_0", "down_1", "down_2", "down_3"], ["down_4"], ["upcat_4", "upcat_3", "upcat_2", "upcat_1"]),
    "DynUNet": (lambda: DynUNet(3, 1, 3, kernel_size=[3, 3, 3], strides=[1, 2, 2], upsample_kernel_size=[2, 2]),
                ["input_block", "downsamples.0"], ["bottleneck"], ["upsamples.0", "upsamples.1"]),
    "SegResNet": (lambda: SegResNet(3, init_filters=4, in_channels=1, out_channels=3, blocks_down=(1, 1, 1),
                                    blocks_up=(1, 1), norm=("group", {"num_groups": 2})),
                  ["down_layers.0", "down_layers.1"], ["down_layers.2"], ["up_layers.0", "up_layers.1"]),
    "PlainConvUNet": (plain_conv_unet, ["encoder.stages.0", "encoder.stages.1"], ["encoder.stages.2"],
                      ["decoder.stages.0", "decoder.stages.1"]),
}


@pytest.mark.parametrize("arch", list(ARCHS))
def test_stages_and_placements(arch):
    build, enc, bottom, dec = ARCHS[arch]
    net = build()
    assert stage_sites(net) == {"encoder": enc, "bottleneck": bottom, "decoder": dec}
    assert default_dropout_sites(net) == default_dropout_sites(net, "all") == enc + bottom + dec
    assert default_dropout_sites(net, "encoder") == enc + bottom
    assert default_dropout_sites(net, "bottleneck") == bottom
    assert default_dropout_sites(net, "decoder") == dec
    assert default_dropout_sites(net, "last") == default_dropout_sites(net, "last:1") == dec[-1:]
    assert default_dropout_sites(net, "last:2") == dec[-2:]
    names = dict(net.named_modules())
    assert all(n in names for n in enc + bottom + dec)


def test_add_dropout_with_a_placement_hooks_those_stages_only():
    net = BasicUNet(3, 1, 3, features=(4, 4, 8, 8, 16, 4)).eval()
    assert add_dropout(net, p=0.2, after="last:2") == ["upcat_2", "upcat_1"]
    assert len(find_dropout_layers(net)[1]) == 2


def test_unknown_placements_are_refused():
    net = BasicUNet(3, 1, 3, features=(4, 4, 8, 8, 16, 4))
    assert "decoder" in PLACEMENTS
    for bad in ("middle", "last:0", "last:x", "last:"):
        with pytest.raises(ValueError, match="placement|after"):
            add_dropout(net, after=bad)
    with pytest.raises(ValueError, match="decoder stages"):
        default_dropout_sites(net, "last:5")
    with pytest.raises(ValueError, match="does not know"):
        default_dropout_sites(torch.nn.Sequential(torch.nn.Conv3d(1, 2, 3)), "decoder")
