"""Hostile tests of remembered plain traces (``PlainTraces``): a remembered verdict must not change seeded maps."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from monai_unc.inferers import MCDropoutInferer
from monai_unc.networks import shared as shared_module


def light_then_heavy() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), nn.Dropout3d(0.3), nn.Conv3d(2, 16, 3, padding=1),
                         nn.ReLU(), nn.Conv3d(16, 3, 1)).eval()


class WritesLargeInputs(nn.Module):
    """Writes into its input only when the input holds a value above 1.5 (an input-dependent normalisation)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = light_then_heavy()

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        if float(t.max()) > 1.5:
            t.mul_(0.5)
        return self.net(t)


@pytest.fixture
def clean():
    shared_module.PLAIN_TRACES.clear()
    yield
    shared_module.PLAIN_TRACES.clear()


@pytest.mark.parametrize("batch", [1, "auto"])
def test_a_verdict_remembered_on_an_input_the_network_left_alone_keeps_the_maps_of_a_fresh_process(clean, batch):
    """Remembered on an input the network does not write into, the verdict ran every sample as a full pass on the
    caller's window, which the network halved again on every pass (the samples compounded the write); a fresh
    process traces, sees the write and replays every later sample from the input as the trace got it."""
    net = WritesLargeInputs().eval()
    small = torch.rand(1, 1, 8, 8, 8)
    large = torch.rand(1, 1, 8, 8, 8) * 4

    def run(x):
        return MCDropoutInferer(num_samples=4, seed=3, sample_batch_size=batch)(x.clone(), net)

    fresh = run(large)
    shared_module.PLAIN_TRACES.clear()
    run(small)
    assert len(shared_module.PLAIN_TRACES) == 1  # remembered: the network left that input alone
    after = run(large)
    for key in ("pred", "mutual_information", "variance"):
        torch.testing.assert_close(after[key], fresh[key], rtol=0, atol=0)


def test_a_verdict_remembered_before_a_submodule_was_swapped_keeps_the_maps_of_a_fresh_process(clean):
    """A submodule swapped for one of the same type and mode with fewer channels (a new head, a slimmer block) kept
    the key (types, modes, dropout probabilities, hooks): the verdict and memory terms of the wide network forced one
    sample per full pass where a fresh process traces the slim network and replays three samples at once, so the
    seeded maps depended on the calls made before."""
    from monai.inferers import SlidingWindowInferer

    def make(mid):
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), nn.Dropout3d(0.3), nn.Conv3d(2, mid, 3, padding=1),
                             nn.ReLU(), nn.Conv3d(mid, 3, 1)).eval()

    x = torch.rand(1, 1, 40, 40, 40)
    sw = SlidingWindowInferer((8, 8, 8), sw_batch_size=1, overlap=0)

    def run(model):
        return MCDropoutInferer(num_samples=4, seed=5, base_inferer=sw)(x, model)

    slim = make(4)
    fresh = run(slim)
    shared_module.PLAIN_TRACES.clear()
    net = make(64)  # wide enough for one sample per pass at this case size (512 took 8x the time)
    run(net)
    assert len(shared_module.PLAIN_TRACES) == 1
    net[2], net[4] = slim[2], slim[4]  # the same types, modes and hooks
    after = run(net)
    for key in ("pred", "mutual_information"):
        torch.testing.assert_close(after[key], fresh[key], rtol=0, atol=0)


def test_a_verdict_remembered_under_other_module_settings_keeps_the_maps_of_a_fresh_process(clean):
    """A module setting that is no parameter (an upsampling's scale factor, a pooling's kernel and stride) changes
    the memory terms of a trace: remembered with a large scale factor (one sample per pass), the verdict forced full
    passes after the factor was set back, where a fresh process replays two samples at once."""
    from monai.inferers import SlidingWindowInferer

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), nn.Dropout3d(0.3), nn.Upsample(scale_factor=1),
                        nn.Conv3d(2, 8, 3, padding=1), nn.ReLU(), nn.AvgPool3d(1), nn.Conv3d(8, 3, 1)).eval()
    x = torch.rand(1, 1, 40, 40, 40)
    sw = SlidingWindowInferer((8, 8, 8), sw_batch_size=1, overlap=0)

    def run():
        return MCDropoutInferer(num_samples=4, seed=5, base_inferer=sw)(x, net)

    fresh = run()
    # a factor of 2 is enough for one sample per pass at this case size (4 took 5x the time: the claim is the key)
    net[2].scale_factor, net[5].kernel_size, net[5].stride = 2.0, 2, 2
    shared_module.PLAIN_TRACES.clear()
    run()
    assert len(shared_module.PLAIN_TRACES) == 1
    net[2].scale_factor, net[5].kernel_size, net[5].stride = 1.0, 1, 1
    after = run()
    for key in ("pred", "mutual_information"):
        torch.testing.assert_close(after[key], fresh[key], rtol=0, atol=0)


def test_a_module_setting_that_is_no_plain_value_stays_out_of_the_key(clean):
    """A tuple attribute holding a list or a tensor is left out of the key (a key keeps no tensor alive): no error,
    the verdict kept, the same maps as full passes."""
    net = light_then_heavy()
    net[3].settings = ([1, 2],)
    net[3].buffers_seen = (torch.zeros(1000),)
    x = torch.rand(1, 1, 8, 8, 8)
    a = MCDropoutInferer(num_samples=3, seed=1, sample_batch_size=1)(x, net)
    b = MCDropoutInferer(num_samples=3, seed=1, share_passes=False)(x, net)
    assert len(shared_module.PLAIN_TRACES) == 1
    torch.testing.assert_close(a["pred"], b["pred"], rtol=0, atol=0)


class WithOption(nn.Module):
    """``light_then_heavy`` with an option argument: a number, or a list holding one."""

    def __init__(self) -> None:
        super().__init__()
        self.net = light_then_heavy()

    def forward(self, t: torch.Tensor, option: int | list = 1) -> torch.Tensor:
        return self.net(t) * (option[0] if isinstance(option, list) else option)


def test_an_unhashable_network_argument_keeps_no_verdict(clean):
    """A network argument that cannot be hashed (a list) makes the key unhashable: no verdict, no error."""
    net = WithOption().eval()
    x = torch.rand(1, 1, 8, 8, 8)
    a = MCDropoutInferer(num_samples=3, seed=1, sample_batch_size=1)(x, net, option=1)
    assert len(shared_module.PLAIN_TRACES) == 1  # a number: kept
    shared_module.PLAIN_TRACES.clear()
    b = MCDropoutInferer(num_samples=3, seed=1, sample_batch_size=1)(x, net, option=[1])
    assert len(shared_module.PLAIN_TRACES) == 0
    torch.testing.assert_close(a["pred"], b["pred"], rtol=0, atol=0)


class ScaledByArgument(nn.Module):
    """Upsamples its stochastic features by a factor given as a keyword argument (not a module setting)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.d = nn.Conv3d(1, 2, 3, padding=1), nn.Dropout3d(0.3)
        self.b, self.c = nn.Conv3d(2, 8, 3, padding=1), nn.Conv3d(8, 3, 1)

    def forward(self, t: torch.Tensor, up: int = 1) -> torch.Tensor:
        h = self.d(self.a(t))
        if up != 1:
            h = nn.functional.interpolate(h, scale_factor=up)
        h = torch.relu(self.b(h))
        return self.c(nn.functional.avg_pool3d(h, up) if up != 1 else h)


def test_a_verdict_remembered_under_other_network_arguments_keeps_the_maps_of_a_fresh_process(clean):
    """The network's other arguments decide its calls as its modules do: remembered with ``up=2`` (one sample per
    pass), the verdict forced full passes with ``up=1``, where a fresh process replays three samples at once."""
    from monai.inferers import SlidingWindowInferer

    net = ScaledByArgument().eval()
    x = torch.rand(1, 1, 40, 40, 40)
    sw = SlidingWindowInferer((8, 8, 8), sw_batch_size=1, overlap=0)

    def run(up):
        return MCDropoutInferer(num_samples=4, seed=5, base_inferer=sw)(x, net, up=up)

    fresh = run(1)
    shared_module.PLAIN_TRACES.clear()
    run(2)  # 2 is enough for one sample per pass at this case size (4 took 5x the time: the claim is the key)
    assert len(shared_module.PLAIN_TRACES) == 1
    after = run(1)
    for key in ("pred", "mutual_information"):
        torch.testing.assert_close(after[key], fresh[key], rtol=0, atol=0)
