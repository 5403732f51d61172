"""Shared passes (monai_unc.networks.shared): the shared computation equals the full N-pass computation.

Exactness is checked with injected dropout masks: a mask bank draws each mask from its own generator, seeded by the
layer, the network input row it belongs to and how many times that layer already saw that input row. A full pass per
sample and the shared computation (one traced sample, then batches of replayed samples) therefore apply the same
masks to the same samples, and every map must agree to float tolerance. With seeds only, the two paths draw
different masks; their maps must agree in distribution (a two-sample test over repeated runs).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from typing import Any

import numpy as np
import pytest
import torch
from monai.inferers import SimpleInferer, SlidingWindowInferer
from monai.networks.nets import BasicUNet, DynUNet, SegResNet, UNet
from scipy import stats as sstats
from torch import nn

from monai_unc.inferers import (
    DropoutHook,
    FlipSource,
    MCDropoutInferer,
    MCDropoutSource,
    RateInSource,
    UncertaintyInferer,
    add_dropout,
    enable_mc_dropout,
)
from monai_unc.inferers import rate_in as rate_in_module
from monai_unc.networks import shared as shared_module
from monai_unc.networks.shared import (
    SharedPasses,
    SharingUnavailable,
    auto_sample_batch,
    is_random_op,
    sample_batch,
)


class MaskBank:
    """Masks as a function of (layer, network input row, occurrence): the same for a full and a shared pass."""

    def __init__(self) -> None:
        self.rows: list[str] = []
        self.seen: dict[tuple[str, str], int] = {}

    def watch(self, network: nn.Module) -> None:
        network.register_forward_pre_hook(self._see_input)

    def _see_input(self, module: nn.Module, args: tuple) -> None:
        x = args[0]
        self.rows = [hashlib.sha1(r.detach().cpu().numpy().tobytes()).hexdigest() for r in x]

    def keep(self, layer: str, x: torch.Tensor, keep_prob: torch.Tensor | float, channelwise: bool) -> torch.Tensor:
        """A 0/1 mask of ``x``'s shape (channel-wise: ``(B, C, 1, ...)``), row ``b`` from the bank."""
        if x.shape[0] != len(self.rows):
            raise AssertionError(f"batch {x.shape[0]} does not match the network input's {len(self.rows)} rows")
        shape = (x.shape[1],) + ((1,) * (x.ndim - 2) if channelwise else tuple(x.shape[2:]))
        keep_prob = torch.as_tensor(keep_prob, dtype=torch.float32).reshape(-1).expand(x.shape[0])
        out = []
        for b, row in enumerate(self.rows):
            n = self.seen.get((layer, row), 0)
            self.seen[(layer, row)] = n + 1
            seed = int(hashlib.sha1(f"{layer}|{row}|{n}".encode()).hexdigest()[:15], 16)
            g = torch.Generator().manual_seed(seed)
            u = torch.rand(shape, generator=g)  # a random op: the shared trace must see it
            out.append((u < keep_prob[b]).to(x.dtype))
        return torch.stack(out).to(x.device)


class BankDropout(nn.Dropout):
    """Channel-wise dropout whose masks come from a :class:`MaskBank` (a ``torch.nn`` dropout: MC dropout finds it)."""

    def __init__(self, bank: MaskBank, name: str, p: float = 0.3) -> None:
        super().__init__(p)
        self.bank, self.name = bank, name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        return x * self.bank.keep(self.name, x, 1 - self.p, True) / (1 - self.p)


class BankHook(DropoutHook):
    """Post-hoc dropout (as inserted by add_dropout) with masks from a :class:`MaskBank`."""

    def __init__(self, bank: MaskBank, name: str, p: float = 0.3) -> None:
        super().__init__(p)
        self.bank, self.name = bank, name

    def _drop(self, x):
        return x * self.bank.keep(self.name, x, 1 - self.p, True) / (1 - self.p)


def unet(dims):
    return UNet(dims, 1, 3, channels=(4, 8, 16), strides=(2, 2), num_res_units=1)


def basic_unet(dims):
    return BasicUNet(dims, 1, 3, features=(4, 4, 8, 8, 8, 4), norm="batch")  # 16-voxel windows: 1 voxel at the bottom


def segresnet(dims):
    return SegResNet(dims, init_filters=4, in_channels=1, out_channels=3, blocks_down=(1, 1, 1), blocks_up=(1, 1),
                     norm=("group", {"num_groups": 2}))


def dynunet(dims):
    # filters (4, 8, 16), not the default (32, 64, 128): the same modules and the same shared and replayed calls
    # (checked: equal module-call counts with and without sharing), at a sixth of the time
    return DynUNet(dims, 1, 3, kernel_size=[3, 3, 3], strides=[1, 2, 2], upsample_kernel_size=[2, 2],
                   filters=(4, 8, 16))


def plain_conv_unet(dims):
    pytest.importorskip("dynamic_network_architectures")
    from dynamic_network_architectures.architectures.unet import PlainConvUNet

    conv = nn.Conv3d if dims == 3 else nn.Conv2d
    norm = nn.InstanceNorm3d if dims == 3 else nn.InstanceNorm2d
    return PlainConvUNet(1, 3, (4, 8, 16), conv, 3, (1, 2, 2), (1, 1, 1), 3, (1, 1), False, norm, None, None, None,
                         nn.LeakyReLU, None, deep_supervision=False)


def residual_encoder_unet(dims):
    pytest.importorskip("dynamic_network_architectures")
    from dynamic_network_architectures.architectures.unet import ResidualEncoderUNet

    conv = nn.Conv3d if dims == 3 else nn.Conv2d
    norm = nn.InstanceNorm3d if dims == 3 else nn.InstanceNorm2d
    return ResidualEncoderUNet(1, 3, (4, 8, 16), conv, 3, (1, 2, 2), (1, 1, 1), 3, (1, 1), False, norm, None, None,
                               None, nn.LeakyReLU, None, deep_supervision=False)


#: network -> (builder, the modules after which the decoder-only placement puts dropout)
NETWORKS = {
    "UNet": (unet, ["model.1.submodule.1.submodule", "model.1.submodule.2"]),
    "BasicUNet": (basic_unet, ["upcat_4", "upcat_2", "upcat_1"]),
    "SegResNet": (segresnet, ["up_layers.0", "up_layers.1"]),
    "DynUNet": (dynunet, ["bottleneck", "upsamples.0", "upsamples.1"]),
    "PlainConvUNet": (plain_conv_unet, ["decoder.stages.0", "decoder.stages.1"]),
    "ResidualEncoderUNet": (residual_encoder_unet, ["decoder.stages.0", "decoder.stages.1"]),
}


def banked(name: str, dims: int, bank: MaskBank) -> nn.Module:
    torch.manual_seed(0)
    builder, sites = NETWORKS[name]
    net = builder(dims).eval()
    modules = dict(net.named_modules())
    for site in sites:
        modules[site].register_forward_hook(BankHook(bank, site))
    bank.watch(net)
    return net


def run_both(make_inferer, x, net, bank):
    outs = []
    for share in (False, True):
        bank.seen.clear()
        outs.append(make_inferer(share)(x, net))
    return outs


def assert_maps_close(full, shared):
    assert sorted(full) == sorted(shared)
    assert full.num_samples == shared.num_samples
    for k in full:
        torch.testing.assert_close(shared[k], full[k], rtol=1e-4, atol=2e-5, msg=f"map {k}")


def replay_and_batched_pass(net: nn.Module, x: torch.Tensor, k: int, seed: int) -> tuple[SharedPasses, Any, Any]:
    """A trace of ``x``; then ``k`` replayed samples and the network on ``x`` repeated ``k`` times, each after
    ``torch.manual_seed(seed)`` (the same draws): ``(passes, replay, batched pass)``, which must be equal."""
    passes = SharedPasses(net)
    passes.trace(net, x)
    torch.manual_seed(seed)
    out = passes.replay(net, x, k)
    torch.manual_seed(seed)
    return passes, out, net(x.repeat(k, *([1] * (x.ndim - 1))))


@pytest.mark.parametrize("sw_batch", [1, 2])  # 1: shared values handed on at batch 1 (operations on them run once)
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_shared_equals_full_sliding_window_injected_masks(name, dims, sw_batch):
    bank = MaskBank()
    net = banked(name, dims, bank)
    x = torch.rand(1, 1, 24, *([16] * (dims - 1)))  # two overlapping windows along the first axis
    sw = SlidingWindowInferer([16] * dims, sw_batch_size=sw_batch, overlap=0.25)

    def make(share):
        return MCDropoutInferer(num_samples=5, base_inferer=sw, share_passes=share, sample_batch_size=3,
                                keep_samples=True)

    full, shared = run_both(make, x, net, bank)
    assert_maps_close(full, shared)
    samples = full["samples"]
    assert (samples[0] - samples[1]).abs().max() > 1e-6  # the masks differ between samples: the test can fail


@pytest.mark.parametrize("sample_batch", [1, 3])  # 3: one input of a window batch at a time; 1: the whole batch
@pytest.mark.parametrize("sw_batch", [2, 3])
@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("name", ["BasicUNet", "UNet", "PlainConvUNet"])
def test_window_batches_equal_full_passes_injected_masks(name, dims, sw_batch, sample_batch, monkeypatch):
    """Batches of several overlapping windows (4 windows: batches of 2 + 2, or 3 + 1) with injected masks: the
    replay of a window batch one window at a time (its outputs interleaved) equals full passes."""
    calls = []
    interleave = shared_module._interleave

    def spy(outs, k):
        calls.append((len(outs), k))
        return interleave(outs, k)

    monkeypatch.setattr(shared_module, "_interleave", spy)
    bank = MaskBank()
    net = banked(name, dims, bank)
    x = torch.rand(1, 1, 24, 24, *([16] * (dims - 2)))  # 2 x 2 overlapping windows
    sw = SlidingWindowInferer([16] * dims, sw_batch_size=sw_batch, overlap=0.25)

    def make(share):
        return MCDropoutInferer(num_samples=7, base_inferer=sw, share_passes=share, sample_batch_size=sample_batch,
                                keep_samples=True)

    full, shared = run_both(make, x, net, bank)
    assert_maps_close(full, shared)
    samples = full["samples"]
    assert (samples[0] - samples[1]).abs().max() > 1e-6  # the masks differ between samples: the test can fail
    if sample_batch == 1:
        assert not calls  # one sample per replay: the whole window batch at once
    else:  # every window batch of several windows was replayed one window at a time (k = 3, then 3; with 3 windows
        # the first replay of a trace runs the whole batch: 3 samples of one window draw as much as the 3 traced
        # windows whether or not a draw is shared, 3 samples of the 3 windows tell)
        assert set(calls) == {(sw_batch, 3)}


def test_interleave_orders_samples_as_a_batch_replay():
    """Sample ``s`` of input ``b`` at row ``s B + b``; outputs that are not batched per input are refused."""
    outs = [torch.arange(3.0).reshape(3, 1) + 10 * b for b in range(2)]  # input b, samples 0..2
    got = shared_module._interleave([{"y": o, "n": 1} for o in outs], 3)
    torch.testing.assert_close(got["y"][:, 0], torch.tensor([0.0, 10, 1, 11, 2, 12]))
    assert got["n"] == 1
    with pytest.raises(SharingUnavailable, match="not batched"):
        shared_module._interleave([torch.zeros(3, 1), torch.zeros(2, 1)], 3)
    with pytest.raises(SharingUnavailable, match="structure"):
        shared_module._interleave([(torch.zeros(3),), [torch.zeros(3)]], 3)


@pytest.mark.parametrize("name, plain", [("BasicUNet", False), ("DynUNet", False), ("BasicUNet", True)])
def test_shared_equals_full_regions_and_flips(name, plain, monkeypatch):
    """Sigmoid regions, dropout x flip products: sharing within each flip, never across; ``plain``: every replay a
    plain batched pass (``MIN_SHARED_WORK = 1``)."""
    if plain:
        monkeypatch.setattr(shared_module, "MIN_SHARED_WORK", 1.0)
    bank = MaskBank()
    net = banked(name, 3, bank)
    x = torch.rand(2, 1, 16, 16, 16) if name == "BasicUNet" else torch.rand(2, 1, 16, 8, 8)

    def make(share):
        return UncertaintyInferer([MCDropoutSource(4), FlipSource([0, 2])], activation="sigmoid",
                                  share_passes=share, sample_batch_size=2, keep_samples=True)

    full, shared = run_both(make, x, net, bank)
    assert full.multilabel and full.num_samples == 16
    assert_maps_close(full, shared)


def test_shared_equals_full_torch_dropout_modules():
    """Dropout as torch.nn modules inside the network (here replacing MONAI UNet's Dropout(p=0) layers)."""
    bank = MaskBank()
    torch.manual_seed(0)
    net = UNet(3, 1, 3, channels=(4, 8, 16), strides=(2, 2), num_res_units=1, dropout=0.0).eval()
    names = [n for n, m in net.named_modules() if isinstance(m, nn.Dropout)]
    names = names[len(names) // 2:]  # the decoder half
    for n in names:
        parent, _, leaf = n.rpartition(".")
        setattr(net.get_submodule(parent), leaf, BankDropout(bank, n))
    bank.watch(net)
    x = torch.rand(1, 1, 16, 16, 16)
    full, shared = run_both(lambda s: MCDropoutInferer(num_samples=6, share_passes=s, sample_batch_size=4), x, net,
                            bank)
    assert_maps_close(full, shared)


@pytest.mark.parametrize(
    "shape, sw_batch, samples, sample_batch",
    [((24, 24, 24), 1, 4, 3), ((24, 24, 16), 2, 5, 2)],  # one window at a time; window batches window by window
)
def test_shared_equals_full_rate_in(monkeypatch, shape, sw_batch, samples, sample_batch):
    """Rate-In (searched per window, then fixed rates repeated over a replay batch) with injected masks; with window
    batches, the fixed rates (one per window) follow each window of a batch replayed on its own."""
    bank = MaskBank()
    torch.manual_seed(0)
    net = basic_unet(3).eval()
    bank.watch(net)
    original = rate_in_module._draw_keep

    def draw_keep(x, rates, channelwise):
        if x.shape[0] != len(bank.rows):  # the rate search draws on subsets of rows: ordinary draws
            return original(x, rates, channelwise)
        return bank.keep(f"rate_in{tuple(x.shape[1:])}", x, 1 - rates.float(), channelwise)

    monkeypatch.setattr(rate_in_module, "_draw_keep", draw_keep)
    x = torch.rand(1, 1, *shape)
    sw = SlidingWindowInferer([16] * 3, sw_batch_size=sw_batch, overlap=0.25)

    def make(share):
        source = RateInSource(num_samples=samples, placement="insert", after=["upcat_2", "upcat_1"], target_loss=0.1,
                              loss="mse", max_iter=5)
        return UncertaintyInferer(source, base_inferer=sw, seed=0, share_passes=share, sample_batch_size=sample_batch)

    full, shared = run_both(make, x, net, bank)
    assert_maps_close(full, shared)
    assert full["mutual_information"].max() > 1e-5


def test_post_hoc_add_dropout_shares_the_encoder():
    torch.manual_seed(0)
    net = basic_unet(3).eval()
    add_dropout(net, p=0.3, after=["upcat_1"])
    x = torch.rand(1, 1, 16, 16, 16)
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        first = passes.trace(net, x)
        more = passes.replay(net, x, 3)
    # conv_0, down_1..4, upcat_4..2 and upcat_1's own forward (its dropout is a hook after it)
    assert passes.shared_calls == 9
    assert first.shape == (1, 3, 16, 16, 16) and more.shape == (3, 3, 16, 16, 16)
    assert not torch.allclose(more[0], more[1])  # independent masks per sample of a batch
    # a batch of one input: kept outputs are handed to the samples as expanded views, none is copied per sample
    assert passes.copied_bytes == 0 < passes.shared_bytes
    assert passes.per_sample_bytes() == passes.stochastic_bytes
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, x.repeat(2, 1, 1, 1, 1))
    # a batch of two inputs is replayed one input at a time, each with the batch-1 replay: nothing copied per sample
    assert passes.copied_bytes == 0 < passes.shared_bytes
    assert passes.per_sample_bytes() == passes.stochastic_bytes


def test_deterministic_network_is_shared_whole():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 1)).eval()
    x = torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        passes = SharedPasses(net)
        ref = passes.trace(net, x)
        out = passes.replay(net, x, 3)
    assert passes.shared_calls == 1  # the network call itself
    torch.testing.assert_close(out, ref.repeat(3, 1, 1, 1))


def test_inplace_change_of_a_kept_output_is_not_reused():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.drop = nn.Dropout2d(0.5)
            self.head = nn.Conv2d(4, 2, 1)

        def forward(self, x):
            h = self.conv(x)
            y = self.head(self.drop(h))
            h.mul_(0.0)  # corrupts the conv output after it was kept
            return y + h.sum()

    net = Block().eval()
    net.drop.train()
    x = torch.rand(1, 1, 6, 6)
    with torch.no_grad():
        passes = SharedPasses(net)
        passes.trace(net, x)
        assert passes.shared_calls == 0
        out = passes.replay(net, x, 2)
    assert out.shape == (2, 2, 6, 6)


def test_replay_refuses_another_input():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Dropout2d(0.5), nn.Conv2d(4, 2, 1)).eval()
    net[1].train()
    with torch.no_grad():
        passes = SharedPasses(net)
        passes.trace(net, torch.rand(1, 1, 6, 6))
        with pytest.raises(SharingUnavailable, match="input differs"):
            passes.replay(net, torch.rand(1, 1, 6, 6), 2)
    with pytest.raises(RuntimeError, match="before trace"):
        SharedPasses(net).replay(net, torch.rand(1, 1, 6, 6), 2)
    with pytest.raises(TypeError, match="network"):
        SharedPasses(lambda t: t)
    with pytest.raises(ValueError, match="k must be"):
        passes.replay(net, passes._input, 0)


def test_random_tta_falls_back_with_one_log_line(caplog):
    """Noise drawn on every call: the samples' inputs differ, so full passes (same maps' keys, one log line)."""
    from monai_unc.inferers import NoiseSource

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Dropout2d(0.5), nn.Conv2d(4, 2, 1)).eval()
    x = torch.rand(1, 1, 8, 8)
    inferer = UncertaintyInferer([MCDropoutSource(4), NoiseSource(0.1, 2)], seed=0)
    with caplog.at_level(logging.WARNING, logger="monai_unc.inferers.sampling"):
        out = inferer(x, net)
    assert out.num_samples == 8
    lines = [r for r in caplog.records if "shared passes off" in r.getMessage()]
    assert len(lines) == 1 and "input differs" in lines[0].getMessage()
    with caplog.at_level(logging.WARNING, logger="monai_unc.inferers.sampling"):
        inferer(x, net)  # the next case of a cohort: said once per inferer, not once per call (review 66)
    assert len([r for r in caplog.records if "shared passes off" in r.getMessage()]) == 1


class CallableDropout(MCDropoutSource):
    """MC dropout whose switch is left to the caller, so that the network may be a plain function."""

    def activate(self, network):
        return contextlib.nullcontext()


def test_plain_callable_falls_back_with_one_log_line(caplog):
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Dropout2d(0.5), nn.Conv2d(4, 2, 1)).eval()
    x = torch.rand(1, 1, 8, 8)
    with caplog.at_level(logging.WARNING, logger="monai_unc.inferers.sampling"), enable_mc_dropout(net):
        out = UncertaintyInferer(CallableDropout(3), seed=0)(x, lambda t: net(t))
    assert out.num_samples == 3
    assert sum("not a torch.nn.Module" in r.getMessage() for r in caplog.records) == 1


def test_seeded_runs_agree_in_distribution():
    """No injected masks: shared and full draw different masks; per-run MI and one voxel's probability agree in
    distribution (two-sample Kolmogorov-Smirnov over 60 seeded runs each)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                        nn.Dropout2d(0.4), nn.Conv2d(8, 3, 1)).eval()
    x = torch.rand(1, 1, 6, 6)
    values = {False: ([], []), True: ([], [])}
    for share in (False, True):
        for seed in range(60):
            out = MCDropoutInferer(num_samples=6, seed=seed, share_passes=share, sample_batch_size=5,
                                   keep_samples=True)(x, net)
            values[share][0].append(float(out["mutual_information"].mean()))
            values[share][1].append(float(out["samples"][3, 0, 1, 2, 2]))
    for i in range(2):
        assert sstats.ks_2samp(values[False][i], values[True][i]).pvalue > 1e-3
    # and the shared path is not a degenerate copy: its MI varies between seeds like the full path's
    assert np.std(values[True][0]) > 0.3 * np.std(values[False][0])


def test_options_are_checked():
    with pytest.raises(ValueError, match="sample_batch_size"):
        MCDropoutInferer(num_samples=3, sample_batch_size=0)
    with pytest.raises(TypeError, match="share_passes"):
        MCDropoutInferer(num_samples=3, share_passes="yes")


def test_simple_inferer_and_off_switch_give_the_same_keys():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Dropout2d(0.5), nn.Conv2d(4, 2, 1)).eval()
    x = torch.rand(1, 1, 8, 8)
    a = MCDropoutInferer(num_samples=4, seed=0, base_inferer=SimpleInferer())(x, net)
    b = MCDropoutInferer(num_samples=4, seed=0, share_passes=False)(x, net)
    assert sorted(a) == sorted(b)


def test_is_random_op_and_auto_batch():
    x = torch.ones(3)
    f = torch.nn.functional
    assert is_random_op(f.dropout3d, (x,), {"p": 0.2, "training": True})
    assert not is_random_op(f.dropout3d, (x,), {"p": 0.0, "training": True})
    assert is_random_op(torch.Tensor.bernoulli_, (x,))
    assert not is_random_op(torch.Tensor.add_, (x, x))
    assert auto_sample_batch(100, 10**6, 3) == 3
    assert auto_sample_batch(10**9, 10, 29) == 1
    assert auto_sample_batch(1, 10**12, 100) == 32



def test_sample_batch_applies_the_setting():
    """One rule for both inferers: a fixed setting capped by the samples left; "auto" from the trace's bytes, each
    sample's probabilities and the case's stitched buffers (voxels x 4 bytes x (classes + 4)), by hand here."""
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.Dropout2d(0.5), nn.Conv2d(8, 2, 1)).eval()
    net[1].train()
    with torch.no_grad():
        passes = SharedPasses(net)
        passes.trace(net, torch.rand(1, 1, 16, 16))
    per = passes.stochastic_bytes + passes.copied_bytes  # dropout output and head output: (8 + 2) x 256 x 4 bytes
    assert per == (8 + 2) * 256 * 4 and passes.shared_bytes == 8 * 256 * 4
    assert sample_batch(passes, 5, 10**6, 2, 29) == 5 and sample_batch(passes, 5, 10**6, 2, 3) == 3
    per += 2 * 256 * 4  # and each sample's probabilities: 2 classes x 256 window voxels x 4 bytes
    for voxels, remaining in ((256, 29), (10**5, 29), (10**5, 4), (10**8, 100)):
        budget = max(0.1 * voxels * 4 * (2 + 4), passes.shared_bytes + passes.stochastic_bytes)
        want = max(1, min(int(budget // per), 32, remaining))
        assert sample_batch(passes, "auto", voxels, 2, remaining) == want
    for bad in (0, -1, True, 2.0, "4"):
        with pytest.raises(ValueError, match="sample_batch_size"):
            sample_batch(passes, bad, 256, 2, 29)

def test_kept_outputs_are_freed_with_the_passes_without_garbage_collection():
    """Dropping a window's :class:`SharedPasses` frees its kept activations at once (no reference cycles between the
    traced calls); they used to linger until a garbage collection, into the next window, more often the more
    samples (the peak memory of 30 samples grew 14 % over that of 2)."""
    import gc
    import weakref

    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU()),
                        nn.Dropout2d(0.5), nn.Conv2d(4, 2, 1)).eval()
    kept = []
    net[1].register_forward_hook(lambda m, a, out: kept.append(weakref.ref(out)))
    x = torch.rand(1, 1, 8, 8)
    enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.no_grad(), enable_mc_dropout(net):
            passes = SharedPasses(net)
            passes.trace(net, x)
            passes.replay(net, x, 3)
        assert passes.shared_calls == 2 and kept[0]() is not None  # the two first blocks are kept
        del passes
        assert kept[0]() is None
    finally:
        if enabled:
            gc.enable()


class _SharedOps(nn.Module):
    """Operations outside module calls on shared values: concatenation, arithmetic, in place, views built from the
    (expanded) shape, reductions and slices along the batch axis, then dropout and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.b = nn.Conv2d(1, 4, 1)
        self.drop = nn.Dropout2d(0.5)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.cat([self.a(x), self.b(x)], 1) * 2.0 + 1.0
        s.relu_()
        flat = s.view(s.shape[0], -1)  # the batch size of the replay, not of the batch-1 value
        batch_mean = s.mean(0, keepdim=True) + s[:1] + s.sum(0, keepdim=True) / s.shape[0]
        y = self.head(self.drop(flat.view_as(s)) + batch_mean)
        return y + s.sum() / s.numel()


@pytest.mark.parametrize("k", [1, 3])
def test_operations_on_shared_values_run_once_and_match_a_batched_pass(k):
    """A replay of ``k`` samples equals the network on the input repeated ``k`` times with the same random draws
    (the semantics of a batched pass), also where operations reduce or slice along the batch axis; operations whose
    arguments are all shared run once, on batch 1."""
    torch.manual_seed(0)
    net = _SharedOps().eval()
    net.drop.train()
    x = torch.rand(1, 1, 6, 6)
    with torch.no_grad():
        passes, out, ref = replay_and_batched_pass(net, x, k, seed=1)
    torch.testing.assert_close(out, ref)
    assert passes.shared_calls == 2 and passes.shared_ops >= 4  # cat, *, +, relu_ (at least) on batch 1
    if k > 1:
        assert not torch.allclose(out[0], out[1])  # per-sample masks


def test_stochastic_write_into_a_shared_value_replays_plain_copies():
    """A traced pass that writes a stochastic value into a non-stochastic tensor: the replay hands out plain copies
    (no operation runs on batch-1 values), and still equals a batched pass with the same draws."""

    class Writes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.drop = nn.Dropout2d(0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.conv(x) + 1.0
            h[:, :2] = self.drop(h)[:, :2]
            return h * 2.0

    torch.manual_seed(0)
    net = Writes().eval()
    net.drop.train()
    x = torch.rand(1, 1, 5, 5)
    with torch.no_grad():
        passes, out, ref = replay_and_batched_pass(net, x, 3, seed=3)
    torch.testing.assert_close(out, ref)
    assert passes.shared_ops == 0 and passes.copied_bytes > 0
