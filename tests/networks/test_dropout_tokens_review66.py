"""Inserted dropout on transformer activations drops features, not tokens (review 66).

A transformer block of a MONAI ViT / UNETR outputs batch-first tokens ``(B, L, E)``: axis 1 is the token axis, not a
channel axis. Inserted dropout (``add_dropout`` for MC dropout, ``add_rate_in`` / ``RateInSource(placement="insert")``
for Rate-In) defaulted to channel-wise masks everywhere, so after a ``Linear``, an attention block or a transformer
block it erased whole tokens (a patch of the image per mask; a Swin block's channels-last ``(B, H, W, C)`` map lost
whole rows). Convolutional feature maps keep channel-wise masks.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from monai_unc.inferers import (
    RateInSource,
    add_dropout,
    add_rate_in,
    enable_mc_dropout,
    find_dropout_layers,
    find_rate_in_layers,
)


def _unetr(dropout: float = 0.0) -> nn.Module:
    from monai.networks.nets import UNETR

    torch.manual_seed(0)
    return UNETR(in_channels=1, out_channels=2, img_size=(32, 32), feature_size=4, hidden_size=16, mlp_dim=16,
                 num_heads=2, dropout_rate=dropout, spatial_dims=2).eval()


def _vit() -> nn.Module:
    from monai.networks.nets import ViT

    torch.manual_seed(0)
    return ViT(in_channels=1, img_size=(32, 32), patch_size=(8, 8), hidden_size=16, mlp_dim=16, num_layers=2,
               num_heads=2, spatial_dims=2).eval()


def _hooks(net: nn.Module) -> dict[str, object]:
    return {name: h for name, m in net.named_modules() for h in m._forward_hooks.values()}


TOKEN_SITES = ["vit.patch_embedding", "vit.blocks.0", "vit.blocks.1.attn", "vit.blocks.1.mlp.linear1",
               "vit.blocks.1.mlp.fn", "vit.blocks.2.norm2", "vit"]
CONV_SITES = ["encoder1", "encoder2", "decoder5", "vit.patch_embedding.patch_embeddings"]


def test_default_channelwise_follows_the_layout_of_each_site():
    from monai_unc.inferers import default_channelwise

    net = _unetr()
    kinds = {name: default_channelwise(net, name) for name in TOKEN_SITES + CONV_SITES}
    assert kinds == {**{n: False for n in TOKEN_SITES}, **{n: True for n in CONV_SITES}}
    with pytest.raises(ValueError, match="site"):
        default_channelwise(net, "no.such.module")
    with pytest.raises(TypeError, match="^site"):
        default_channelwise(net, 3)
    with pytest.raises(TypeError, match="^model"):
        default_channelwise("net", "vit")


def test_mc_dropout_inserted_after_a_transformer_block_keeps_every_token():
    net = _unetr()
    add_dropout(net, p=0.5, after=["vit.blocks.0", "encoder1"])
    hooks = _hooks(net)
    assert hooks["vit.blocks.0"].channelwise is False and hooks["encoder1"].channelwise is True
    seen = {}
    net.vit.blocks[1].register_forward_pre_hook(lambda m, args: seen.setdefault("tokens", args[0]))
    torch.manual_seed(1)
    with torch.no_grad(), enable_mc_dropout(net):
        net(torch.rand(1, 1, 32, 32))
    tokens = seen["tokens"]  # (1, 4, 16): the output of vit.blocks.0 after its dropout
    assert tokens.shape == (1, 4, 16)
    zero = tokens == 0
    assert zero.any()  # dropped
    assert not zero.all(-1).any()  # but no token erased whole (channel-wise: about 2 of the 4 tokens)
    # explicit channelwise still applies to every site
    other = _unetr()
    add_dropout(other, p=0.5, after=["vit.blocks.0"], channelwise=True)
    assert find_dropout_layers(other)[1][0].channelwise is True


def test_rate_in_inserted_on_tokens_searches_element_wise_masks():
    net, x = _unetr(), torch.rand(1, 1, 32, 32)
    source = RateInSource(2, loss="mse", placement="insert", after=["vit.blocks.0", "vit.blocks.1.mlp.linear2",
                                                                     "encoder1"])
    torch.manual_seed(0)
    with torch.no_grad(), source.activate(net) as layers:
        kinds = {name: layer.channelwise for name, layer in layers}
        source.prepare(x, net)
        keeps = {name: tuple(layer.last_search.keep.shape) for name, layer in layers}
    assert kinds == {"vit.blocks.0": False, "vit.blocks.1.mlp.linear2": False, "encoder1": True}
    # element-wise on the tokens (before: (1, 4, 1), a mask per token); one per channel on the convolutional map
    assert keeps == {"vit.blocks.0": (1, 4, 16), "vit.blocks.1.mlp.linear2": (1, 4, 16), "encoder1": (1, 4, 1, 1)}
    assert not find_rate_in_layers(net)  # removed again


def test_add_rate_in_on_a_vit_and_explicit_channelwise():
    net = _vit()
    add_rate_in(net, after=["blocks.0", "blocks.1.mlp"])
    assert [layer.channelwise for _, layer in find_rate_in_layers(net)] == [False, False]
    other = _vit()
    add_rate_in(other, after=["blocks.0"], channelwise=True)  # asked for: every site
    assert [layer.channelwise for _, layer in find_rate_in_layers(other)] == [True]


def test_swin_blocks_channels_last_are_element_wise_and_its_convolutions_channel_wise():
    from monai.networks.nets import SwinUNETR

    from monai_unc.inferers import default_channelwise

    net = SwinUNETR(in_channels=1, out_channels=2, feature_size=12, spatial_dims=2, depths=(1, 1, 1, 1),
                    num_heads=(1, 1, 1, 1), window_size=4).eval()
    assert not default_channelwise(net, "swinViT.layers1.0.blocks.0")  # (B, H, W, C): channels last
    assert not default_channelwise(net, "swinViT.layers1.0.downsample")
    assert default_channelwise(net, "swinViT.patch_embed")  # a convolution's (B, C, H, W)
    assert default_channelwise(net, "encoder1") and default_channelwise(net, "decoder1")


def test_convolutional_sites_are_unchanged():
    from monai_unc.inferers import default_channelwise

    net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv1d(4, 4, 1))
    assert default_channelwise(net, "0") and default_channelwise(net, "1")  # a ReLU after a convolution
    assert default_channelwise(net, "2")  # (B, C, L) of a 1D convolution: channels at axis 1
    lin = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    assert not default_channelwise(lin, "0")
    assert not default_channelwise(lin, "1")  # an activation among Linear layers


def test_modules_of_linear_layers_that_return_channel_first_maps_stay_channel_wise():
    """A Swin stage (``BasicLayer``) and MONAI's ``SpatialAttentionBlock`` hold no convolution but return
    ``(B, C, *spatial)``: read as tokens, they got element-wise dropout where it was channel-wise (review 66)."""
    from monai.networks.blocks import SpatialAttentionBlock
    from monai.networks.nets import SwinUNETR

    from monai_unc.inferers import default_channelwise

    net = SwinUNETR(in_channels=1, out_channels=2, feature_size=12, spatial_dims=2, depths=(1, 1, 1, 1),
                    num_heads=(1, 1, 1, 1), window_size=4).eval()
    x = torch.rand(1, 12, 16, 16)
    with torch.no_grad():
        assert net.swinViT.layers1[0](x).shape == (1, 24, 8, 8)  # channel-first
    for site in ("swinViT.layers1.0", "swinViT.layers4.0", "swinViT"):
        assert default_channelwise(net, site), site
    assert not default_channelwise(net, "swinViT.layers1.0.blocks.0")  # inside the stage: channels last
    hooks = _hooks(add_dropout(net, 0.5, after=["swinViT.layers2.0"]) and net)
    assert hooks["swinViT.layers2.0"].channelwise
    attn = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), SpatialAttentionBlock(2, 8, num_head_channels=4,
                                                                               norm_num_groups=4))
    with torch.no_grad():
        assert attn(torch.rand(1, 1, 6, 6)).shape == (1, 8, 6, 6)
    assert default_channelwise(attn, "1")
