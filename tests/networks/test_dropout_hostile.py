"""Hostile input for the dropout layer functions: rates, placements, modes, kinds of dropout."""

import collections

import numpy as np
import pytest
import torch
from torch import nn

from monai_unc.networks.dropout import DropoutHook, add_dropout, enable_mc_dropout, find_dropout_layers, remove_dropout


def _net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 3, 1)).eval()


@pytest.mark.parametrize("bad", [False, True, "0.1", None])
def test_rate_must_be_a_real_number(bad):
    # "0.1" was read as 0.1 and False as rate 0
    with pytest.raises(TypeError, match="p must be"):
        add_dropout(_net(), p=bad, after=["2"])
    with pytest.raises(TypeError, match="p must be"):
        DropoutHook(bad)


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan"), float("inf")])
def test_rate_outside_zero_one_is_refused(bad):
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        add_dropout(_net(), p=bad, after=["2"])


def test_numpy_rates_are_rates():
    assert DropoutHook(np.float32(0.25)).p == pytest.approx(0.25)


@pytest.mark.parametrize("bad", [5, [0], ["2", 3]])
def test_after_that_is_no_list_of_names_is_a_type_error_naming_it(bad):
    # 5 was "TypeError: 'int' object is not iterable"
    with pytest.raises(TypeError, match="after must be"):
        add_dropout(_net(), p=0.1, after=bad)


def test_mc_dropout_switches_dropout_only_and_restores_it():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Dropout2d(0.5), nn.AlphaDropout(0.2),
                        nn.Conv2d(4, 3, 1)).eval()
    running = net[1].running_mean.clone()
    x = torch.rand(2, 1, 5, 5)
    with enable_mc_dropout(net) as ctx:
        assert ctx.num_layers == 2
        assert not net[1].training and net[2].training and net[3].training
        a, b = net(x), net(x)
    assert not torch.equal(a, b)
    assert torch.equal(net[1].running_mean, running)  # BatchNorm stayed in eval: no running statistics updated
    assert not any(m.training for m in net.modules())


def test_mode_is_restored_after_an_exception():
    net = nn.Sequential(nn.Conv2d(1, 4, 1), nn.Dropout(0.2)).eval()
    with pytest.raises(RuntimeError, match="boom"):
        with enable_mc_dropout(net):
            raise RuntimeError("boom")
    assert not net[1].training
    net.train()
    with pytest.raises(RuntimeError, match="boom"):
        with enable_mc_dropout(net):
            raise RuntimeError("boom")
    assert net[1].training  # a layer that was in training mode stays so


def test_zero_rate_layers_do_not_count_as_dropout():
    net = nn.Sequential(nn.Conv2d(1, 4, 1), nn.Dropout(0.0), nn.Conv2d(4, 2, 1)).eval()
    assert find_dropout_layers(net) == ([], [])
    with pytest.raises(ValueError, match="no dropout layer"):
        enable_mc_dropout(net)
    add_dropout(net, p=0.0, after=["0"])
    assert find_dropout_layers(net) == ([], [])


def test_existing_dropout_is_kept_and_post_hoc_dropout_added_beside_it():
    net = nn.Sequential(nn.Conv2d(1, 4, 1), nn.Dropout(0.3), nn.Conv2d(4, 2, 1)).eval()
    with pytest.warns(UserWarning, match=r"already has 1 dropout layer\(s\) \(p=0.3\); post-hoc dropout p=0.2"):
        add_dropout(net, p=0.2, after=["0"])
    modules, hooks = find_dropout_layers(net)
    assert [m.p for m in modules] == [0.3] and [h.p for h in hooks] == [0.2]
    assert remove_dropout(net) == 1 and net[1].p == 0.3


@pytest.mark.parametrize("shape", [(2, 6), (2, 6, 5), (2, 6, 5, 5), (2, 6, 3, 3, 3)])
def test_channelwise_hook_drops_whole_channels_of_any_dimensionality(shape):
    torch.manual_seed(0)
    x = torch.rand(*shape) + 1.0
    y = DropoutHook(0.5, channelwise=True)._drop(x)
    if len(shape) >= 3:  # a channel is all dropped or all kept (and scaled by 2)
        flat = y.reshape(*shape[:2], -1)
        assert bool(((flat == 0).all(-1) | (flat != 0).all(-1)).all())
    assert torch.allclose(y[y != 0], 2 * x[y != 0])


def test_inplace_dropout_in_mc_mode_does_not_touch_the_eval_output():
    net = nn.Sequential(nn.Conv2d(1, 4, 1), nn.ReLU(), nn.Dropout(0.5, inplace=True), nn.Conv2d(4, 2, 1)).eval()
    x = torch.rand(1, 1, 4, 4)
    ref = net(x)
    with enable_mc_dropout(net):
        net(x)
    assert torch.equal(net(x), ref)


@pytest.mark.parametrize("bad", ["no", "false", 0, None])
def test_non_bool_flags_are_a_type_error_naming_them(bad):
    """``channelwise="no"`` (and the other flags) were taken as True without a word."""
    net = nn.Sequential(nn.Conv3d(1, 2, 1), nn.ReLU())
    with pytest.raises(TypeError, match=r"^channelwise must be True or False"):
        DropoutHook(0.2, channelwise=bad)
    if bad is not None:  # None is add_dropout's default: the kind of each site (default_channelwise, review 66)
        with pytest.raises(TypeError, match=r"^channelwise must be True or False"):
            add_dropout(net, p=0.2, after=["0"], channelwise=bad)
        assert find_dropout_layers(net) == ([], [])  # refused before any hook was added
    with pytest.raises(TypeError, match=r"^include_zero must be True or False"):
        find_dropout_layers(net, include_zero=bad)
    with pytest.raises(TypeError, match=r"^strict must be True or False"):
        enable_mc_dropout(net, strict=bad)
    assert DropoutHook(0.2, channelwise=np.bool_(False)).channelwise is False


@pytest.mark.parametrize("where", ["module", "hook"])
def test_mc_dropout_refuses_a_rate_of_one_naming_the_layer(where):
    # Dropout(p=1.0) zeroed that activation in every sample: constant predictions and zero uncertainty, silently
    net = nn.Sequential(nn.Conv2d(1, 4, 1), nn.Sequential(nn.Conv2d(4, 4, 1)), nn.Conv2d(4, 3, 1)).eval()
    if where == "module":
        net[1].append(nn.Dropout(p=1.0).eval())
        match = r"'1\.1' \(Dropout\) has p=1\.0"
    else:
        add_dropout(net, p=0.1, after=["1.0"])
        find_dropout_layers(net)[1][0].p = 1.0  # a rate changed after construction
        match = r"after module '1\.0' has p=1\.0"
    with pytest.raises(ValueError, match=match):
        enable_mc_dropout(net)
    assert not any(m.training for m in net.modules())  # refused before any mode changed


def test_dropout_after_the_root_module_is_refused_naming_after():
    # after=[""] named the root module: a hook there dropped the network's output
    net = _net()
    with pytest.raises(ValueError, match="after names the root module"):
        add_dropout(net, p=0.1, after=["", "2"])
    assert find_dropout_layers(net) == ([], [])


_Out = collections.namedtuple("_Out", "a b")


class _Pair(nn.Module):
    """A stage whose output is a container: a named tuple or a dict of feature maps (and a non-tensor entry)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x):
        if self.kind == "namedtuple":
            return _Out(x, 2 * x)
        if self.kind == "dict":
            return {"a": x, "b": [2 * x], "n": 3}
        return collections.OrderedDict(a=x, b=(2 * x,))


@pytest.mark.parametrize("kind", ["namedtuple", "dict", "ordereddict"])
def test_post_hoc_dropout_samples_every_tensor_of_a_container_output(kind):
    """Found by hostile testing: after a stage returning a named tuple the hook raised ``TypeError`` (``NT.__new__()
    missing 1 required positional argument``), and after a dict it returned the output without dropout, so every
    Monte-Carlo sample was the same prediction (uncertainty 0) without a word."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 1), _Pair(kind)).eval()
    add_dropout(net, p=0.5, after=["1"])
    x = torch.ones(1, 1, 8, 8)
    plain = net(x)
    with enable_mc_dropout(net):
        first, second = net(x), net(x)
    assert type(first) is type(plain)
    tensors = [(first[0], second[0], first[1])] if kind == "namedtuple" else [(first["a"], second["a"], first["b"][0])]
    for a1, a2, b1 in tensors:
        assert bool((a1 != a2).any())  # the samples differ
        zeroed = (a1 == 0).flatten(2).all(-1)  # channelwise: whole channels of 8 x 8 dropped
        assert bool(zeroed.any()) and not bool(zeroed.all())
        assert b1.shape == a1.shape
    if kind == "dict":
        assert first["n"] == 3
    assert torch.equal(net(x)[0] if kind == "namedtuple" else net(x)["a"],
                       plain[0] if kind == "namedtuple" else plain["a"])  # eval mode again: deterministic
