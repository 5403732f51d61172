"""Deterministic passes of networks with MONAI's fused attention (review 66).

MONAI's ``SABlock`` / ``CrossAttentionBlock`` with ``use_flash_attention=True`` call
``F.scaled_dot_product_attention(dropout_p=self.dropout_rate)`` without looking at their mode (MONAI 1.6.1), so a
network in eval mode drew attention dropout on every call: the softmax baseline, TTA without dropout and every other
pass meant to be deterministic were silently random. SwinUNETR's window attention, on its fused path (taken without
gradients), draws no attention dropout at all: MC dropout of its ``attn_drop`` gave a mutual information of exactly 0.
The inferers align the fused path with the unfused one for their call and give the blocks back afterwards.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from monai_unc.inferers import (
    FlipSource,
    MCDropoutInferer,
    RateInInferer,
    SoftmaxInferer,
    UncertaintyInferer,
    align_fused_attention,
)


def _flash_blocks(dropout: float, n: int) -> nn.ModuleList:
    from monai.networks.blocks import TransformerBlock

    if "use_flash_attention" not in inspect.signature(TransformerBlock).parameters:
        pytest.skip("the installed MONAI has no use_flash_attention")
    return nn.ModuleList([TransformerBlock(16, 16, 2, dropout, use_flash_attention=True) for _ in range(n)])


def _flash_unetr(dropout: float = 0.3) -> nn.Module:
    """A tiny MONAI UNETR whose 12 transformer blocks use the fused attention."""
    from monai.networks.nets import UNETR

    torch.manual_seed(0)
    net = UNETR(in_channels=1, out_channels=2, img_size=(32, 32), feature_size=4, hidden_size=16, mlp_dim=16,
                num_heads=2, dropout_rate=dropout, spatial_dims=2)
    net.vit.blocks = _flash_blocks(dropout, 12)
    return net.eval()


class _ViTSegmenter(nn.Module):
    """A tiny MONAI ViT (2 fused-attention blocks, 16 tokens) with a linear head back to a 2-class 16 x 16 map."""

    def __init__(self, dropout: float = 0.3) -> None:
        from monai.networks.nets import ViT

        super().__init__()
        torch.manual_seed(0)
        self.vit = ViT(in_channels=1, img_size=(16, 16), patch_size=(4, 4), hidden_size=16, mlp_dim=16, num_layers=2,
                       num_heads=2, dropout_rate=dropout, spatial_dims=2)
        self.vit.blocks = _flash_blocks(dropout, 2)
        self.head = nn.Linear(16, 2 * 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.head(self.vit(x)[0])  # (B, 16 tokens, 2 classes x 4 x 4 pixels)
        return tokens.reshape(-1, 4, 4, 2, 4, 4).permute(0, 3, 1, 4, 2, 5).reshape(-1, 2, 16, 16)


def _attention_only(net: nn.Module) -> nn.Module:
    """Every dropout of the network at rate 0 but the blocks' attention dropout."""
    for m in net.modules():
        if isinstance(m, nn.Dropout) and not any(getattr(b, "drop_weights", None) is m for b in net.modules()):
            m.p = 0.0
    return net


def _random_in_eval(net: nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        if torch.equal(net(x), net(x)):
            pytest.skip("the installed MONAI draws no attention dropout in eval mode")


@pytest.fixture()
def net_x():
    net, x = _ViTSegmenter().eval(), torch.rand(1, 1, 16, 16)
    _random_in_eval(net, x)
    return net, x


def test_softmax_baseline_is_deterministic_and_the_rate_is_given_back():
    net, x = _flash_unetr(), torch.rand(1, 1, 32, 32)
    _random_in_eval(net, x)
    a = SoftmaxInferer()(x, net)["pred"]
    b = SoftmaxInferer()(x, net)["pred"]
    assert torch.equal(a, b)  # before: two draws of attention dropout
    with torch.no_grad(), align_fused_attention(net) as blocks:
        assert len(blocks) == 12 and all(blk.dropout_rate == 0.0 for blk in blocks)
        ref = torch.softmax(net(x), 1)
    assert torch.allclose(a, ref, atol=1e-6)  # the eval-mode prediction, without attention dropout
    assert all(blk.attn.dropout_rate == 0.3 for blk in net.vit.blocks)  # given back


def test_tta_without_dropout_is_deterministic(net_x):
    net, x = net_x
    inferer = UncertaintyInferer([FlipSource([0])])
    a, b = inferer(x, net), inferer(x, net)
    assert torch.equal(a["pred"], b["pred"]) and torch.equal(a["mutual_information"], b["mutual_information"])


def test_mc_dropout_still_samples_the_attention_dropout(net_x):
    net, x = net_x
    _attention_only(net)
    out = MCDropoutInferer(num_samples=3, seed=0)(x, net)
    assert float(out["mutual_information"].max()) > 0  # the fused attention dropout is the only one that draws
    assert all(blk.attn.dropout_rate == 0.3 for blk in net.vit.blocks)
    assert torch.equal(SoftmaxInferer()(x, net)["pred"], SoftmaxInferer()(x, net)["pred"])


def test_rate_in_runs_a_layer_converted_from_the_attention_dropout(net_x):
    net, x = net_x
    _attention_only(net)  # the only dropout to convert: the blocks' drop_weights, which the fused path never calls
    out = RateInInferer(num_samples=2, loss="mse", seed=0)(x, net)  # before: "none of the 2 Rate-In layer(s) ran"
    assert sorted(out.extras["rate_in_rates"]) == ["vit.blocks.0.attn.drop_weights", "vit.blocks.1.attn.drop_weights"]
    assert float(out["mutual_information"].max()) > 0
    assert all(blk.attn.use_flash_attention and blk.attn.dropout_rate == 0.3 for blk in net.vit.blocks)


class _SwinSegmenter(nn.Module):
    """One MONAI Swin transformer block (fused window attention, attention dropout only) between 1x1 convolutions."""

    def __init__(self) -> None:
        from monai.networks.nets.swin_unetr import SwinTransformerBlock

        super().__init__()
        if "use_flash_attention" not in inspect.signature(SwinTransformerBlock).parameters:
            pytest.skip("the installed MONAI has no use_flash_attention")
        torch.manual_seed(0)
        self.embed, self.head = nn.Conv2d(1, 12, 1), nn.Conv2d(12, 2, 1)
        self.block = SwinTransformerBlock(12, 2, (4, 4), (0, 0), attn_drop=0.3, use_flash_attention=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.block(self.embed(x).permute(0, 2, 3, 1), None)  # channels last (B, H, W, C), as in SwinUNETR
        return self.head(tokens.permute(0, 3, 1, 2))


def test_swin_window_attention_dropout_is_sampled():
    net, x = _SwinSegmenter().eval(), torch.rand(1, 1, 8, 8)
    out = MCDropoutInferer(num_samples=3, seed=0)(x, net)
    assert float(out["mutual_information"].max()) > 0  # before: exactly 0, the fused path drew no attention dropout
    assert net.block.attn.use_flash_attention  # given back
    assert torch.equal(SoftmaxInferer()(x, net)["pred"], SoftmaxInferer()(x, net)["pred"])


def test_align_fused_attention_checks_its_argument():
    with pytest.raises(TypeError, match="model"):
        with align_fused_attention("net"):
            pass
    plain = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    with align_fused_attention(plain) as blocks:
        assert blocks == []
