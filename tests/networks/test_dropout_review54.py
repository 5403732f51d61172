"""Review 54 of the post-hoc dropout placements: the network's output is never a site, and "last:k" takes ASCII
digits only."""

import pytest
import torch
from monai.networks.nets import SegResNet

from monai_unc.inferers import add_dropout, default_dropout_sites, enable_mc_dropout, stage_sites


def _segresnet(**kw):
    return SegResNet(2, init_filters=4, in_channels=1, out_channels=3, blocks_down=(1, 1, 1), blocks_up=(1, 1),
                     norm=("group", {"num_groups": 2}), **kw).eval()


def test_segresnet_without_conv_final_keeps_dropout_off_its_output():
    """Without ``conv_final`` the last up layer's output is the network's output: the placements put channel dropout
    there, zeroing whole output channels (every logit of a class) in a sample (found by hostile testing)."""
    net = _segresnet(use_conv_final=False)
    assert stage_sites(net) == {"encoder": ["down_layers.0", "down_layers.1"], "bottleneck": ["down_layers.2"],
                                "decoder": ["up_layers.0"]}
    assert default_dropout_sites(net, "last") == ["up_layers.0"]
    torch.manual_seed(0)
    add_dropout(net, p=0.5)
    x = torch.rand(1, 1, 16, 16)
    with torch.no_grad(), enable_mc_dropout(net):
        for _ in range(5):
            y = net(x)
            assert (y.flatten(2).abs().sum(-1) > 0).all()  # no output channel zeroed
    # with conv_final (the default) every up layer is a decoder stage, as before
    assert stage_sites(_segresnet())["decoder"] == ["up_layers.0", "up_layers.1"]


def test_segresnet_without_up_layers_or_conv_final_has_no_bottleneck_site():
    net = SegResNet(2, init_filters=4, in_channels=1, out_channels=3, blocks_down=(1, 1), blocks_up=(),
                    norm=("group", {"num_groups": 2}), use_conv_final=False)
    assert stage_sites(net) == {"encoder": ["down_layers.0"], "bottleneck": [], "decoder": []}
    with pytest.raises(ValueError, match="selected no module"):
        add_dropout(net, after="bottleneck")


@pytest.mark.parametrize("bad", ["last:\u00b2", "last:\u2460"])
def test_last_k_with_a_non_ascii_digit_is_refused_naming_the_placement(bad):
    """``"²".isdigit()`` is True but ``int("²")`` fails: it was "invalid literal for int()", naming nothing."""
    net = _segresnet()
    with pytest.raises(ValueError, match="placement must be one of"):
        default_dropout_sites(net, bad)


@pytest.mark.parametrize("p", [10**400, -(10**400)], ids=["1e400", "-1e400"])
def test_a_rate_beyond_the_floats_is_refused_naming_p(p):
    """``float(10**400)`` was Python's ``OverflowError: int too large to convert to float``, naming nothing."""
    with pytest.raises(ValueError, match="p must be in"):
        add_dropout(_segresnet(), p=p)
