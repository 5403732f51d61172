"""Review 54 of the shared passes (monai_unc.networks.shared) and their memory terms (monai_unc.inferers.memory),
by hostile testing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from monai_unc.inferers import FlipSource, MCDropoutSource, UncertaintyInferer, enable_mc_dropout, estimate_memory
from monai_unc.networks import shared as shared_module
from monai_unc.networks.shared import (
    AUTO_BATCH_FRACTION,
    SharedPasses,
    SharingUnavailable,
    auto_sample_batch,
    replay_working_bytes,
    sample_batch,
)


def _traced(batch: int) -> tuple[SharedPasses, nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 16, 3, padding=1), nn.Dropout3d(0.3), nn.Conv3d(16, 3, 1)).eval()
    x = torch.rand(batch, 1, 8, 8, 8)
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, x)
    return passes, net, x


@pytest.mark.parametrize("batch", [2, 4])
def test_one_sample_of_a_window_batch_counts_the_copies_of_the_kept_values(batch, monkeypatch):
    """A replay of one sample of B > 1 windows runs the whole batch and copies the kept values that the stochastic
    rest reads (the first convolution's output); replay_bytes(1) left them out (18.6 MiB counted where 33.6 MiB were
    measured for four windows of 40^3)."""
    passes, net, x = _traced(batch)
    assert passes.replays_rows and passes.copied_bytes == 0
    needed = batch * 16 * 8**3 * 4
    copies = []
    repeat = shared_module._repeat

    def spy(out, k):
        got = repeat(out, k)
        copies.extend(t.numel() * t.element_size() for t in shared_module._tensors(got) if t.shape[1] == 16)
        return got

    monkeypatch.setattr(shared_module, "_repeat", spy)
    with torch.no_grad(), enable_mc_dropout(net):
        passes.replay(net, x, 1)
    assert sum(copies) == needed  # the replay did copy them
    assert passes.replay_bytes(1, 100) == passes.stochastic_bytes + needed + 100


def test_estimate_memory_counts_the_copies_of_a_one_sample_replay_of_a_window_batch():
    """sample_batch=1 with sw_batch_size=4: the replay runs the whole window batch with the kept values copied, as
    many bytes as copied_bytes_per_voxel=None (all of them) counts; copied_bytes_per_voxel=0 (SharedPasses'
    copied_bytes of such a trace) counted none."""
    common = dict(shape=(64, 64, 64), num_classes=3, roi_size=(32, 32, 32), sw_batch_size=4, overlap=0.25,
                  fused_update=True, shared_bytes_per_voxel=200.0, stochastic_bytes_per_voxel=100.0, sample_batch=1)
    views = estimate_memory(**common, copied_bytes_per_voxel=0.0)
    upper = estimate_memory(**common)
    none = estimate_memory(**{**common, "shared_bytes_per_voxel": 0.0}, copied_bytes_per_voxel=0.0)
    assert views.total == upper.total
    vw = 4 * 32**3
    assert views.parts["window"] - none.parts["window"] == 2 * vw * 200  # the kept values and their copies


@pytest.mark.parametrize("device", ["cpu", "meta"])  # meta: the rule of an accelerator (only the device is read)
def test_auto_sample_batch_counts_half_precision_probabilities_in_float32(device):
    """A float16 window's samples become float32 probabilities (measures.entropy_dtype); the automatic batch counted
    them at 2 bytes and took 1.44x its budget."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.Dropout3d(0.3), nn.Conv3d(4, 64, 1)).eval().half()
    x = torch.rand(1, 1, 16, 16, 16).half()
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, x)
    passes._input = x.to(device)
    v, classes = 16**3, 64
    probabilities = v * classes * 4
    for case_voxels in (10 * v, 30 * v, 100 * v):
        k = sample_batch(passes, "auto", case_voxels, classes, 29)
        budget = max(AUTO_BATCH_FRACTION * case_voxels * 4 * (classes + 4), passes.traced_bytes)
        assert k == 1 or passes.replay_bytes(k, probabilities) <= budget, (case_voxels, k)
        assert k == 1 or k * (passes.per_sample_bytes() + probabilities) <= budget or device != "cpu"


def _small() -> tuple[SharedPasses, nn.Module, torch.Tensor]:
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Dropout2d(0.5), nn.Conv2d(4, 2, 1)).eval()
    net[1].train()
    x = torch.rand(1, 1, 8, 8)
    with torch.no_grad():
        passes = SharedPasses(net)
        passes.trace(net, x)
    return passes, net, x


def test_numpy_numbers_are_accepted_where_python_ones_are():
    passes, net, x = _small()
    with torch.no_grad():
        assert passes.replay(net, x, np.int64(3)).shape == (3, 2, 8, 8)
    assert passes.replay_bytes(np.int64(2), np.int64(10)) == passes.replay_bytes(2, 10)
    assert SharedPasses(net, min_shared_work=np.float32(0.5))._min_shared_work == 0.5
    assert SharedPasses(net, min_shared_work=np.int64(0)) is not None
    assert sample_batch(passes, np.int64(4), np.int64(64), np.int64(2), np.int64(29)) == 4
    assert auto_sample_batch(np.int64(10), np.float32(1000.0), np.int64(29)) == 10
    assert replay_working_bytes(np.int64(4), np.int64(4), 100, 10, after=10) == 130


@pytest.mark.parametrize("call, name", [
    (lambda p: p.replay_bytes(True), "k"), (lambda p: p.replay_bytes(2.7), "k"), (lambda p: p.replay_bytes(-3), "k"),
    (lambda p: p.replay_bytes(2, -5), "after_bytes"), (lambda p: p.replay_bytes(2, float("nan")), "after_bytes"),
    (lambda p: auto_sample_batch(float("nan"), 1000, 5), "per_sample_bytes"),
    (lambda p: auto_sample_batch(10, math.inf, 5), "case_bytes"),
    (lambda p: auto_sample_batch(10, 1000, 5, traced_bytes=-1), "traced_bytes"),
    (lambda p: auto_sample_batch(10, 1000, 2.9), "remaining"),
    (lambda p: auto_sample_batch(10, 1000, True), "remaining"),
    (lambda p: sample_batch(p, 4, 64, 2, 0), "remaining"), (lambda p: sample_batch(p, "auto", 64, True, 29), "classes"),
    (lambda p: sample_batch(p, "auto", -1, 2, 29), "case_voxels"),
    (lambda p: replay_working_bytes(0, 1, 100, 10), "k"), (lambda p: replay_working_bytes(2, 0, 100, 10), "rows"),
    (lambda p: replay_working_bytes(2, 1, float("nan"), 10), "stochastic"),
    (lambda p: replay_working_bytes(2, 1, 100, math.inf), "output"),
    (lambda p: replay_working_bytes(2, 2, 100, 10, first_copies=-1), "first_copies"),
])
def test_bad_numbers_are_refused_by_name(call, name):
    """Silently truncated (k = 2.7 counted 2 samples, True one, remaining = 0 allowed one) or refused by int()'s
    unnamed errors (NaN, infinity)."""
    passes, _, _ = _small()
    with pytest.raises((TypeError, ValueError), match=name):
        call(passes)


def test_trace_refuses_what_is_no_batched_tensor():
    passes, net, _ = _small()
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        SharedPasses(net).trace(net, np.zeros((1, 1, 8, 8), np.float32))
    with pytest.raises(ValueError, match="x must have a batch axis"):
        SharedPasses(net).trace(net, torch.tensor(1.0))
    with pytest.raises(TypeError, match="passes must be a SharedPasses"):
        sample_batch(None, 4, 64, 2, 29)


class _WritesItsInput(nn.Module):
    """Normalises its input in place, then a convolution, a dropout and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.drop, self.head = nn.Dropout2d(0.5), nn.Conv2d(8, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.sub_(0.5)
        return self.head(self.drop(self.b(self.a(x))))


@pytest.mark.parametrize("min_shared_work", [None, 1.0])  # 1.0: plain replays
def test_a_copy_of_the_input_as_the_trace_got_it_is_the_traced_input(min_shared_work):
    """A network that writes into its input: a replay given a new tensor equal to the input as the trace got it (a
    flipped window is flipped anew for every call) was compared with the written input and refused, so a
    FlipSource fell back to full passes ("the input differs ... a test-time augmentation that draws"); a tensor
    equal to the written input is refused."""
    torch.manual_seed(0)
    net = _WritesItsInput().eval()
    x = torch.rand(1, 1, 8, 8)
    original = x.clone()
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net, min_shared_work=min_shared_work)
        passes.trace(net, x)
        assert passes.wrote_input
        torch.manual_seed(1)
        out = passes.replay(net, original.clone(), 3)
        torch.manual_seed(1)
        want = net(original.repeat(3, 1, 1, 1))
        torch.testing.assert_close(out, want)
        with pytest.raises(SharingUnavailable, match="input differs"):
            passes.replay(net, x.clone(), 2)


def test_flipped_windows_of_a_network_that_writes_its_input_share_their_passes(caplog):
    torch.manual_seed(0)
    net = _WritesItsInput().eval()
    with caplog.at_level("WARNING"):
        UncertaintyInferer([MCDropoutSource(4), FlipSource([0])], seed=0, sample_batch_size=3)(torch.rand(1, 1, 8, 8),
                                                                                               net)
    assert "full passes instead" not in caplog.text


@pytest.mark.parametrize("batch", [2, 3])
def test_the_cpu_sample_batch_fits_a_first_whole_batch_replay(batch):
    """On the CPU the automatic batch follows the whole-batch rule (k times per_sample_bytes), which leaves out the
    kept values that the first replay of k = B <= 3 samples copies: that replay took 1.67x (B = 2) and 1.71x (B = 3)
    the budget."""
    passes, _, x = _traced(batch)
    probabilities = x.numel() * 3 * 4
    for case_voxels in range(512 * 5, 512 * 400, 512 * 5):
        k = sample_batch(passes, "auto", case_voxels, 3, 29)
        budget = max(AUTO_BATCH_FRACTION * case_voxels * 4 * (3 + 4), passes.traced_bytes)
        assert k == 1 or passes.replay_bytes(k, probabilities) <= budget, (case_voxels, k)
        assert k == 1 or k * (passes.per_sample_bytes() + probabilities) <= budget  # the CPU rule still holds


def test_estimate_memory_takes_a_numpy_class_count():
    assert estimate_memory((8, 8, 8), np.int64(3)) == estimate_memory((8, 8, 8), 3)
    for bad in (True, 0, 2.0, np.bool_(True)):
        with pytest.raises(ValueError, match="num_classes"):
            estimate_memory((8, 8, 8), bad)
