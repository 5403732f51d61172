"""MC dropout samples every dropout of attention networks (review 65).

``torch.nn.MultiheadAttention`` applies its ``dropout`` argument inside ``F.multi_head_attention_forward`` with
``training=self.training`` (no ``nn.Dropout`` child), and ``torch.nn.TransformerEncoderLayer`` takes a fused fast
path without any dropout when it is in eval mode under ``torch.no_grad()`` (inference), whatever its dropout children's
modes: MC dropout refused the first and, silently, drew the same prediction for every sample of the second.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from monai_unc.inferers import enable_mc_dropout, find_dropout_layers


class _AttentionNet(nn.Module):
    """A token classifier around one ``nn.MultiheadAttention`` whose only dropout is its attention dropout."""

    def __init__(self, dropout: float = 0.5) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, dropout=dropout, batch_first=True)
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.attn(x, x, x, need_weights=False)[0])


def _two_samples(net: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad(), enable_mc_dropout(net):
        return net(x), net(x)


def test_multihead_attention_dropout_is_sampled_and_restored():
    torch.manual_seed(0)
    net = _AttentionNet().eval()
    x = torch.rand(1, 6, 8)
    a, b = _two_samples(net, x)
    assert not torch.equal(a, b)  # the attention weights' dropout drew different masks
    assert not net.attn.training and not net.attn.out_proj.training  # modes back
    with torch.no_grad():
        assert torch.equal(net(x), net(x))  # eval mode: deterministic again
    assert find_dropout_layers(net)[0] == [net.attn]
    assert find_dropout_layers(_AttentionNet(dropout=0.0))[0] == []  # rate 0 draws nothing: not listed


def test_multihead_attention_dropout_one_is_refused_by_name():
    with pytest.raises(ValueError, match=r"'attn' \(MultiheadAttention\) has p=1.0"):
        enable_mc_dropout(_AttentionNet(dropout=1.0).eval())


def test_transformer_encoder_fast_path_does_not_skip_the_dropout():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.3, batch_first=True)
    net = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.rand(1, 6, 8)
    a, b = _two_samples(net, x)  # under no_grad, as at inference
    assert not torch.equal(a, b)
    assert not any(m.training for m in net.modules())  # every flag back, the layers' own included


def test_unetr_every_dropout_is_sampled():
    from monai.networks.nets import UNETR

    torch.manual_seed(0)
    net = UNETR(in_channels=1, out_channels=2, img_size=(32, 32), feature_size=4, hidden_size=16, mlp_dim=16,
                num_heads=2, dropout_rate=0.2, spatial_dims=2).eval()
    rated = [m for m in net.modules() if isinstance(m, nn.Dropout) and m.p > 0]
    assert rated and find_dropout_layers(net)[0] == rated  # SABlock's weights/output dropout, the MLP's
    x = torch.rand(1, 1, 32, 32)
    with torch.no_grad(), enable_mc_dropout(net):
        assert all(m.training for m in rated)
        assert not torch.equal(net(x), net(x))
    assert not any(m.training for m in net.modules())


def test_recurrent_between_layer_dropout_is_not_sampled_with_a_warning():
    # torch draws it inside one fused kernel (torch._VF.lstm) that the shared passes cannot see: sampled, every
    # sample shared one draw (mutual information 0), so it is left alone and said
    net = nn.Sequential(nn.LSTM(4, 4, num_layers=2, dropout=0.5), nn.Identity(), nn.Dropout(0.2)).eval()
    with pytest.warns(UserWarning, match=r"recurrent layer '0' \(LSTM, dropout=0.5\) has between-layer dropout"):
        with enable_mc_dropout(net):
            assert net[2].training and not net[0].training
