"""Hostile review 69: a network compiled in place (``module.compile()``) is a compiled network."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from monai_unc._utils import is_compiled
from monai_unc.networks.dropout import add_dropout, enable_mc_dropout, remove_dropout


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 1), nn.ReLU(), nn.Conv2d(8, 2, 1)).eval()


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def test_is_compiled_sees_a_module_compiled_in_place():
    net = _net()
    assert not is_compiled(net)
    net.compile(backend="eager")
    assert is_compiled(net) and is_compiled(nn.Sequential(net))


def test_dropout_added_after_a_call_of_a_module_compiled_in_place_runs():
    # the eager backend: dynamo's graph (which does not guard on hooks) without inductor's compile time
    net = _net()
    net.compile(backend="eager")
    x = torch.rand(1, 1, 8, 8)
    with torch.no_grad():
        y0 = net(x)  # compiled without the dropout
    add_dropout(net, p=0.5, after=["1"])
    with torch.no_grad(), enable_mc_dropout(net):
        ys = [net(x) for _ in range(4)]
    # the former graph ran without the hooks: every MC sample was the deterministic output
    assert any(not torch.equal(y, y0) for y in ys)
    remove_dropout(net)
    with torch.no_grad(), enable_mc_dropout(net, strict=False):
        assert torch.equal(net(x), y0)  # the dropout removed: the graph with it is dropped too
