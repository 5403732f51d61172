"""Stochastic inferers on ``torch.compile`` networks (review 62): Rate-In layers kept between calls so that the network
compiles once (``keep_layers``), and compiled graphs that draw their random numbers from torch's generator, so that a
seeded compiled run gives the maps of the plain network (inductor's own generator drew other masks)."""

from __future__ import annotations

import shutil

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounter

from monai_unc.inferers import (
    EnsembleInferer,
    MCDropoutInferer,
    MCDropoutSource,
    RateInInferer,
    RateInSource,
    UncertaintyInferer,
)
from monai_unc.inferers.rate_in import find_rate_in_layers

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile not available")


def _net(dropout: type[nn.Module] = nn.Dropout3d) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), dropout(0.3), nn.Conv3d(4, 3, 1)).eval()


def _image(seed: int = 1) -> torch.Tensor:
    return torch.rand(1, 1, 8, 8, 8, generator=torch.Generator().manual_seed(seed))


def _assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.fixture
def fresh_dynamo():
    """Compiled code of other tests neither serves nor outlives this one."""
    torch.compiler.reset()
    try:
        yield
    finally:
        torch.compiler.reset()


_RATE_IN = {"num_samples": 3, "target_loss": 0.1, "loss": "mse", "seed": 0, "max_iter": 3, "draws": 1}


@pytest.mark.parametrize("share_passes", [True, False], ids=["shared", "full"])
def test_rate_in_inferer_with_keep_layers_compiles_a_compiled_network_once(fresh_dynamo, share_passes: bool) -> None:
    """The Rate-In layers were attached and removed on every call, and each change of a compiled network's hooks or
    modules drops its compiled code (dynamo does not guard on hooks): 3 calls compiled the graphs 3 times.
    ``keep_layers=True`` keeps them attached (switched off) between calls: compiled once, the same maps as the plain
    network, and ``release()`` gives the network back as it was."""
    net = _net()
    x = _image()
    kwargs = {**_RATE_IN, "share_passes": share_passes}
    ref = RateInInferer(**kwargs)(x, net)
    counter = CompileCounter()
    compiled = torch.compile(net, backend=counter)
    with torch.no_grad():
        before = compiled(x)  # a plain prediction first (eval mode: dropout off)
    inferer = RateInInferer(keep_layers=True, **kwargs)
    frames = []
    for _ in range(3):
        _assert_same(inferer(x, compiled), ref)
        frames.append(counter.frame_count)
    assert frames[0] > 0
    assert frames[2] == frames[1] == frames[0], frames  # compiled in the first call only
    assert [n for n, _ in find_rate_in_layers(compiled)] == ["1"]  # kept, switched off
    with torch.no_grad():
        assert torch.equal(compiled(x), before)  # a plain prediction meanwhile: the layers are off
    assert inferer.release() == 1
    assert not find_rate_in_layers(net) and type(net[1]) is nn.Dropout3d
    assert inferer.release() == 0


def test_rate_in_inferer_default_leaves_a_compiled_network_as_found(fresh_dynamo) -> None:
    """Without ``keep_layers`` the network is left as found after every call (and compiles again on the next)."""
    net = _net(dropout=lambda p: nn.Identity())
    x = _image(2)
    kwargs = {**_RATE_IN, "after": ["0"], "share_passes": False}
    counter = CompileCounter()
    compiled = torch.compile(net, backend=counter)
    inferer = RateInInferer(**kwargs)
    frames = []
    for _ in range(2):
        inferer(x, compiled)
        assert not find_rate_in_layers(compiled) and not any(m._forward_hooks for m in net.modules())
        frames.append(counter.frame_count)
    assert frames[1] > frames[0] > 0  # the price of leaving the network as found
    assert inferer.release() == 0
    # keep_layers on an uncompiled network changes nothing: it is restored after the call
    RateInInferer(keep_layers=True, **kwargs)(x, net)
    assert not any(m._forward_hooks for m in net.modules())


def test_keep_layers_is_checked() -> None:
    with pytest.raises(TypeError, match="keep_layers"):
        RateInInferer(keep_layers=1)
    with pytest.raises(TypeError, match="keep_layers"):
        RateInSource(num_samples=2, keep_layers="yes")


def test_rate_in_source_keep_layers_in_a_product_of_sources(fresh_dynamo) -> None:
    """``RateInSource(keep_layers=True)`` inside ``UncertaintyInferer``: compiled once, and another Rate-In source
    activated on the network removes the kept layers first (its own settings apply)."""
    from monai_unc.inferers import FlipSource

    net = _net()
    x = _image(3)
    ref = UncertaintyInferer([RateInSource(2, target_loss=0.1, loss="mse"), FlipSource([0])], seed=0)(x, net)
    counter = CompileCounter()
    compiled = torch.compile(net, backend=counter)
    source = RateInSource(2, target_loss=0.1, loss="mse", keep_layers=True)
    inferer = UncertaintyInferer([source, FlipSource([0])], seed=0)
    _assert_same(inferer(x, compiled), ref)
    first = counter.frame_count
    _assert_same(inferer(x, compiled), ref)
    assert counter.frame_count == first  # not again (shared passes, and since review 68 an uncompiled search pass)
    other = RateInInferer(num_samples=2, target_loss=0.3, loss="mse", seed=0)
    want = other(x, net)
    _assert_same(other(x, compiled), want)
    assert source.release() == 0  # removed for the other source
    assert not find_rate_in_layers(net) and type(net[1]) is nn.Dropout3d


def test_fallback_random_is_set_only_while_a_compiled_network_samples(fresh_dynamo) -> None:
    """The inferers compile a network's graphs under ``torch._inductor.config.fallback_random`` (graphs that draw
    from torch's generator) and restore the setting afterwards; an uncompiled network runs without it."""
    import torch._inductor.config as inductor_config

    seen: list[bool] = []

    class Probe(nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            seen.append(bool(inductor_config.fallback_random))
            return t

    def recording_backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        seen.append(bool(inductor_config.fallback_random))  # what a backend compiling the graph reads
        return gm.forward

    x = _image(4)
    assert not inductor_config.fallback_random
    MCDropoutInferer(num_samples=2, seed=0, share_passes=False)(x, nn.Sequential(_net(), Probe()))
    assert seen and not any(seen)
    seen.clear()
    holder = nn.Sequential(torch.compile(_net(), backend=recording_backend))  # a compiled submodule counts too
    MCDropoutInferer(num_samples=2, seed=0, share_passes=False)(x, holder)
    assert seen and all(seen)
    assert not inductor_config.fallback_random
    seen.clear()
    torch.compiler.reset()  # the module class's compiled code would serve the new member without compiling
    members = [torch.compile(_net(), backend=recording_backend), nn.Sequential(_net(), Probe())]
    EnsembleInferer(members, seed=0, extra_sources=[MCDropoutSource(2)], share_passes=False)(x, None)
    assert seen[0] and not seen[-1], seen  # set for the compiled member only
    assert not inductor_config.fallback_random


def _has_cxx() -> bool:
    return shutil.which("c++") is not None or shutil.which("g++") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _has_cxx(), reason="inductor needs a C++ compiler on the CPU")
@pytest.mark.parametrize("which", ["mc_dropout", "rate_in"])
def test_seeded_inductor_runs_give_the_maps_of_the_plain_network(fresh_dynamo, which: str) -> None:
    """Inductor (torch.compile's default backend) drew the dropout masks of a compiled graph with its own generator:
    with the same seed the compiled network's maps were not those of the plain network (``pred`` off by up to 0.095
    on this toy network, Rate-In's searched rate by 0.0096). The inferers now compile under ``fallback_random``: the
    same maps, up to the compiled kernels' rounding. Element-wise dropout (inductor lowers its draw itself)."""
    import torch._inductor.config as inductor_config

    net = _net(nn.Dropout)
    x = _image(5)

    def inferer() -> UncertaintyInferer:
        if which == "mc_dropout":
            return MCDropoutInferer(num_samples=3, seed=0, share_passes=False)
        return RateInInferer(**{**_RATE_IN, "share_passes": False})

    ref = inferer()(x, net)
    assert float(ref["mutual_information"].max()) > 0
    got = inferer()(x, torch.compile(net))
    assert sorted(got) == sorted(ref)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], rtol=0, atol=1e-5, msg=key)
    if which == "rate_in":
        for name, rates in ref.extras["rate_in_rates"].items():
            torch.testing.assert_close(got.extras["rate_in_rates"][name], rates, rtol=0, atol=1e-6)
    assert not inductor_config.fallback_random


def test_mc_dropout_after_rate_in_kept_layers_samples_the_networks_own_dropout(fresh_dynamo) -> None:
    """Rate-In layers kept on a compiled network (``keep_layers=True``, converted from its ``Dropout3d``) were switched
    on by a later MC dropout call, which then sampled Rate-In in place of the network's dropout (MI max 0.0018 instead
    of 0.0093 on this toy network). MC dropout now removes kept layers first: the maps of the plain network."""
    net, twin = _net(), _net()
    x = _image(6)
    compiled = torch.compile(net, backend="eager")
    rate_in = RateInInferer(**_RATE_IN, keep_layers=True)
    rate_in(x, compiled)
    assert type(net[1]).__name__ == "RateInDropout"  # kept
    for share_passes in (False, True):
        want = MCDropoutInferer(num_samples=3, seed=0, share_passes=share_passes)(x, twin)
        assert float(want["mutual_information"].max()) > 0
        _assert_same(MCDropoutInferer(num_samples=3, seed=0, share_passes=share_passes)(x, compiled), want)
    assert type(net[1]) is nn.Dropout3d and rate_in.release() == 0


@pytest.mark.parametrize("rate_in_first", [True, False], ids=["rate_in_first", "mc_dropout_first"])
def test_kept_layers_in_a_product_with_mc_dropout(fresh_dynamo, rate_in_first: bool) -> None:
    """MC dropout x Rate-In in one inferer: the layers the Rate-In source keeps stay for its own call (removed by the
    MC dropout source, the search found "none of the Rate-In layers ran"); the maps of the plain network."""
    def sources(keep: bool) -> list:
        rate_in = RateInSource(2, target_loss=0.1, loss="mse", max_iter=3, keep_layers=keep)
        return [rate_in, MCDropoutSource(2)] if rate_in_first else [MCDropoutSource(2), rate_in]

    net, twin = _net(), _net()
    x = _image(7)
    want = UncertaintyInferer(sources(False), seed=0)(x, twin)
    got_sources = sources(True)
    inferer = UncertaintyInferer(got_sources, seed=0)
    compiled = torch.compile(net, backend="eager")
    for _ in range(2):
        _assert_same(inferer(x, compiled), want)
    rate_in = next(s for s in got_sources if isinstance(s, RateInSource))
    assert rate_in.release() == 1 and type(net[1]) is nn.Dropout3d


@pytest.mark.parametrize("post_hoc", [False, True], ids=["dropout_module", "add_dropout"])
def test_mc_dropout_on_a_compiled_network_compiles_once_per_mode(fresh_dynamo, post_hoc: bool) -> None:
    """MC dropout adds nothing to the network (it switches modes, which dynamo guards on): the sampling mode compiles
    once for every call, and the plain prediction once."""
    from monai_unc.inferers import add_dropout

    net = _net(dropout=(lambda p: nn.Identity()) if post_hoc else nn.Dropout3d)
    if post_hoc:
        add_dropout(net, p=0.3, after=["0"])
    x = _image(8)
    counter = CompileCounter()
    compiled = torch.compile(net, backend=counter)
    frames = []
    for _ in range(3):
        MCDropoutInferer(num_samples=2, seed=0, share_passes=False)(x, compiled)
        frames.append(counter.frame_count)
    with torch.no_grad():
        compiled(x)
    frames.append(counter.frame_count)
    MCDropoutInferer(num_samples=2, seed=0, share_passes=False)(x, compiled)
    frames.append(counter.frame_count)
    assert frames == [1, 1, 1, 2, 2], frames
