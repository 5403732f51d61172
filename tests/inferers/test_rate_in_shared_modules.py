"""Rate-In conversion of a dropout module registered under two names (as nnU-Net's ConvDropoutNormReLU holds its
dropout as ``.dropout`` and ``.all_modules.1``): one Rate-In layer per module, reached by the forward pass."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from monai_unc.inferers.rate_in import (
    RateInDropout,
    RateInSource,
    convert_dropout_to_rate_in,
    find_rate_in_layers,
    remove_rate_in,
)


class _Block(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv3d(c_in, c_out, 3, padding=1)
        self.dropout = nn.Dropout3d(0.3)
        self.all_modules = nn.Sequential(self.conv, self.dropout, nn.LeakyReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.all_modules(x)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(_Block(1, 4), _Block(4, 4), nn.Conv3d(4, 2, 1)).eval()


def test_convert_shares_one_rate_in_layer_between_the_names():
    net = _net()
    originals = [net[i].dropout for i in range(2)]
    names = convert_dropout_to_rate_in(net, target_loss=0.2, loss="mse")
    assert names == ["0.dropout", "1.dropout"]
    for i in range(2):
        assert isinstance(net[i].dropout, RateInDropout)
        assert net[i].dropout is net[i].all_modules[1]  # the layer the forward pass calls is the one listed
    assert [layer for _, layer in find_rate_in_layers(net)] == [net[0].dropout, net[1].dropout]
    remove_rate_in(net)
    for i in range(2):
        assert net[i].dropout is originals[i] and net[i].all_modules[1] is originals[i]


def test_rate_in_source_reaches_every_layer_of_a_shared_module():
    net = _net()
    src = RateInSource(2, target_loss=0.2, loss="mse")
    x = torch.randn(1, 1, 8, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "Rate-In layers not reached" when converted twice
        with src.activate(net) as layers:
            assert len(layers) == 2
            src.prepare(x, net)
    rates = src.extra_outputs()["rate_in_rates"]
    assert set(rates) == {"0.dropout", "1.dropout"}
    assert isinstance(net[0].dropout, nn.Dropout3d) and net[0].dropout is net[0].all_modules[1]
