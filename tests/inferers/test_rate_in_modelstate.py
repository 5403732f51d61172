"""The network's own Rate-In layers after a Rate-In call (found by hostile testing of model state).

``RateInSource.activate`` restored a layer's training flag and mode but not its searched ``rates``: the layer kept the
rates of the call's last window, so a later "fixed"-mode pass (MC dropout at the layer's rate ``p``) applied another
case's rates, or failed with "fixed mode holds rates for 2 inputs but got a batch of 1".
"""

import torch
from torch import nn

from monai_unc.inferers import MCDropoutInferer, RateInInferer, add_rate_in, find_rate_in_layers


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv3d(8, 3, 1)).eval()
    add_rate_in(net, after=["0"], p=0.2)
    return net


def test_a_rate_in_call_gives_the_layers_their_rates_back():
    net = _net()
    layer = find_rate_in_layers(net)[0][1]
    layer.mode = "fixed"  # MC dropout at the layer's initial rate p = 0.2
    training = layer.training
    x = torch.randn(1, 1, 6, 6, 6)
    before = MCDropoutInferer(8, seed=0)(x, net)
    out = RateInInferer(num_samples=2, seed=0)(torch.randn(2, 1, 6, 6, 6), net)
    assert out.extras["rate_in_rates"]["0"].shape == (2,)  # the call's own record of its search
    assert layer.rates is None and layer.last_search is None and layer.mode == "fixed"
    assert layer.training == training
    after = MCDropoutInferer(8, seed=0)(x, net)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_rates_searched_before_the_call_are_kept():
    net = _net()
    layer = find_rate_in_layers(net)[0][1]
    layer.train()
    with torch.no_grad():
        net(torch.randn(1, 1, 6, 6, 6))  # "adapt" mode: a search of the user's own
    rates, search = layer.rates, layer.last_search
    layer.eval()
    RateInInferer(num_samples=2, seed=0)(torch.randn(2, 1, 6, 6, 6), net)
    assert layer.rates is rates and layer.last_search is search and layer.mode == "adapt"
