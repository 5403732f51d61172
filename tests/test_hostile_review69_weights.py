"""Hostile review 69: copies of weights holding NaN are the same weights (NaN != NaN in torch.equal)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from monai_unc._utils import tensors_equal
from monai_unc.inferers import EnsembleSource


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 3, 1), nn.BatchNorm2d(3), nn.Conv2d(3, 2, 1)).eval()


def test_tensors_equal_reads_nan_at_the_same_places_as_equal():
    a = torch.tensor([1.0, float("nan"), float("inf"), -0.0])
    assert tensors_equal(a, a.clone())
    assert not tensors_equal(a, torch.tensor([1.0, 2.0, float("inf"), 0.0]))  # NaN against a number
    assert not tensors_equal(a, torch.tensor([float("nan"), 1.0, float("inf"), 0.0]))  # NaN elsewhere
    assert not tensors_equal(a, torch.tensor([1.0, float("nan"), 3.0, 0.0]))  # the rest differs
    assert not tensors_equal(a, a.double())
    c = torch.tensor([complex(1, float("nan")), 2j])
    assert tensors_equal(c, c.clone())
    assert tensors_equal(torch.tensor([1, 2]), torch.tensor([1, 2])) and not tensors_equal(
        torch.tensor([1, 2]), torch.tensor([1, 3]))


def test_copies_of_a_state_dict_holding_nan_warn_as_copies():
    # a diverged checkpoint (a NaN weight, a running variance never filled) loaded into two members: the same network
    # twice, its mutual information 0, was told apart from itself
    net, copy = _net(0), _net(1)
    with torch.no_grad():
        net[1].running_var[1] = float("nan")
        net[2].weight[0, 1] = float("nan")
    copy.load_state_dict(net.state_dict())
    with pytest.warns(UserWarning, match=r"networks\[1\] holds the same weights as networks\[0\]"):
        EnsembleSource([net, copy])
    with torch.no_grad():
        copy[2].bias[0] += 1e-6  # one weight apart: distinct members
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EnsembleSource([net, copy])
