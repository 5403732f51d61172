"""Shared passes whose kept calls hold little of the work replay as plain batched passes (``SharedPasses.plain``).

The choice only changes how the replays run, never what they compute: with injected masks the maps equal full
passes whichever way the replays run, and a replay equals the network on its input repeated ``k`` times with the
same seed. The work model (:attr:`SharedPasses.skipped_work`) is checked against hand-counted multiply-adds.
"""

from __future__ import annotations

import pytest
import torch
from monai.inferers import SlidingWindowInferer
from torch import nn

from monai_unc.inferers import MCDropoutInferer, enable_mc_dropout
from monai_unc.networks import shared as shared_module
from monai_unc.networks.shared import SharedPasses, sample_batch

from .test_shared import MaskBank, assert_maps_close, banked, replay_and_batched_pass, run_both


def light_then_heavy(dropout: nn.Module | None = None) -> nn.Sequential:
    """A cheap shared first convolution, then dropout and an expensive stochastic rest."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), dropout or nn.Dropout3d(0.3), nn.Conv3d(2, 16, 3, padding=1),
                         nn.ReLU(), nn.Conv3d(16, 3, 1)).eval()


def test_skipped_work_counts_multiply_adds_by_hand():
    """Conv3d(1, 2, 3) then Dropout3d, Conv3d(2, 16, 3), ReLU, Conv3d(16, 3, 1) on 6^3 (V = 216 voxels):
    the kept first convolution does V * 2 * 27 multiply-adds (a weight of 1 * 27 per output element); the rest:
    dropout 2 V elements, V * 16 * (2 * 27), ReLU 16 V, V * 3 * 16."""
    net = light_then_heavy()
    v = 6**3
    kept = v * 2 * 27
    rest = 2 * v + v * 16 * 54 + 16 * v + v * 3 * 16
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, torch.rand(1, 1, 6, 6, 6))
    assert passes.skipped_work == pytest.approx(kept / (kept + rest), rel=1e-12)
    assert passes.plain and passes.shared_calls == 0 and passes.shared_bytes == 0
    # every replayed sample computes the kept output again: one copy per sample in the memory terms
    assert passes.copied_bytes == 2 * v * 4
    assert passes.traced_bytes == passes.copied_bytes + passes.stochastic_bytes


def test_transposed_convolution_and_linear_work():
    """A transposed convolution counts input elements times its weight per input channel; a linear map output
    elements times its input features; ``min_shared_work=0`` keeps the split whatever it saves."""
    torch.manual_seed(0)
    up = nn.ConvTranspose2d(3, 4, 2, stride=2)
    net = nn.Sequential(up, nn.Dropout(0.5), nn.Flatten(), nn.Linear(4 * 8 * 8, 5)).eval()
    x = torch.rand(2, 3, 4, 4)
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net, min_shared_work=0)
        passes.trace(net, x)
    kept = x.numel() * 4 * 2 * 2  # 96 input elements x (4 output channels x 2 x 2)
    rest = 2 * 256 + 2 * 256 + 2 * 5 * 256  # dropout, flatten (a view: its elements), linear
    assert passes.skipped_work == pytest.approx(kept / (kept + rest), rel=1e-12)
    assert not passes.plain and passes.shared_calls == 1


@pytest.mark.parametrize("k", [1, 3])
def test_plain_replay_equals_a_batched_pass_and_the_split_one(k):
    net = light_then_heavy()
    x = torch.rand(1, 1, 8, 8, 8)
    with torch.no_grad(), enable_mc_dropout(net):
        passes, out, batched = replay_and_batched_pass(net, x, k, seed=3)
        assert passes.plain
        torch.testing.assert_close(out, batched, rtol=0, atol=0)
        split = SharedPasses(net, min_shared_work=0)
        split.trace(net, x)
        torch.manual_seed(3)
        assert not split.plain and split.shared_calls == 1
        torch.testing.assert_close(split.replay(net, x, k), batched, rtol=1e-6, atol=1e-6)


def test_plain_replays_of_a_window_batch_keep_the_sample_order():
    """A traced batch of two inputs: sample s of input b at row s B + b, as the split replays give it."""
    net = light_then_heavy()
    x = torch.rand(2, 1, 6, 6, 6)
    with torch.no_grad(), enable_mc_dropout(net):
        passes, out, batched = replay_and_batched_pass(net, x, 3, seed=1)
    assert passes.plain and out.shape == (6, 3, 6, 6, 6)
    torch.testing.assert_close(out, batched, rtol=0, atol=0)


class DropConnect(nn.Conv3d):
    """Dropout on the weight: one mask for the whole batch (not drawn per batch element)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = nn.functional.dropout(self.weight, 0.5, training=self.training)
        return self._conv_forward(x, w, self.bias)


def test_plain_replay_draws_each_sample_its_own_weight_mask():
    """A batched plain pass would give the k samples one weight mask (identical rows); the draw count finds it and
    the replays run one sample at a time."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), DropConnect(2, 16, 3, padding=1), nn.Conv3d(16, 2, 1)).eval()
    net[1].train()
    x = torch.rand(1, 1, 6, 6, 6)
    with torch.no_grad():
        passes = SharedPasses(net)
        passes.trace(net, x)
        assert passes.plain
        out = passes.replay(net, x, 3)
    assert passes._per_sample and out.shape[0] == 3
    assert not torch.equal(out[0], out[1]) and not torch.equal(out[1], out[2])


def test_plain_replays_equal_full_passes_with_injected_masks(monkeypatch):
    """Every listed network forced into plain replays (``MIN_SHARED_WORK = 1``): the maps still equal full passes
    with the same masks, sliding windows with overlap and window batches of two."""
    monkeypatch.setattr(shared_module, "MIN_SHARED_WORK", 1.0)
    for name in ("UNet", "BasicUNet", "SegResNet", "DynUNet"):
        bank = MaskBank()
        net = banked(name, 3, bank)
        x = torch.rand(1, 1, 24, 16, 16)
        sw = SlidingWindowInferer([16] * 3, sw_batch_size=2, overlap=0.25)

        def make(share, sw=sw):
            return MCDropoutInferer(num_samples=5, base_inferer=sw, share_passes=share, sample_batch_size=3,
                                    keep_samples=True)

        full, shared = run_both(make, x, net, bank)
        assert_maps_close(full, shared)


@pytest.fixture
def calls(monkeypatch):
    """The traces ("trace") and replays (their k) of SharedPasses, with no remembered plain verdict to begin with."""
    shared_module.PLAIN_TRACES.clear()
    seen: list = []
    real_trace, real_replay = SharedPasses.trace, SharedPasses.replay

    def trace(self, predictor, xx):
        seen.append("trace")
        return real_trace(self, predictor, xx)

    def replay(self, predictor, xx, k):
        seen.append(k)
        return real_replay(self, predictor, xx, k)

    monkeypatch.setattr(SharedPasses, "trace", trace)
    monkeypatch.setattr(SharedPasses, "replay", replay)
    yield seen
    shared_module.PLAIN_TRACES.clear()


class WritesInput(nn.Module):
    """A network that writes into its input (its replays start from a copy of the input taken before the trace)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = light_then_heavy()

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.net(t.mul_(1.0))


def test_plain_replays_of_one_sample_run_as_full_passes(calls):
    """Where the automatic sample batch is one sample, a plain replay is a full pass: the inferer runs the rest of
    the samples as full passes (no replay calls), with the same maps as full passes for one seed; a later window like
    it skips the trace (PlainTraces). A network that writes into its input keeps its replays."""
    net = light_then_heavy()
    x = torch.rand(1, 1, 8, 8, 8)
    maps = {}
    for share, batch in ((True, "auto"), (True, 1), (False, "auto")):
        maps[share, batch] = MCDropoutInferer(num_samples=5, seed=4, share_passes=share, sample_batch_size=batch)(
            x, net)
    # "auto" gives one sample per batch here: traced, then full passes; the second call (another inferer, the same
    # network and window) remembered the verdict: no trace
    assert calls == ["trace"]
    for key in ("pred", "mutual_information", "variance"):
        torch.testing.assert_close(maps[True, "auto"][key], maps[False, "auto"][key], rtol=0, atol=0)
        torch.testing.assert_close(maps[True, 1][key], maps[False, "auto"][key], rtol=0, atol=0)
    calls.clear()
    MCDropoutInferer(num_samples=5, seed=4, sample_batch_size=2)(x, net)
    assert calls == ["trace", 2, 2]  # two samples per batch still replay
    calls.clear()
    MCDropoutInferer(num_samples=3, seed=4, sample_batch_size=1)(x.clone(), WritesInput().eval())
    MCDropoutInferer(num_samples=3, seed=4, sample_batch_size=1)(x.clone(), WritesInput().eval())
    assert calls == ["trace", 1, 1, "trace", 1, 1]


def test_a_remembered_plain_verdict_is_keyed_on_the_window_and_the_network(calls):
    """Another window shape, dtype, dropout probability, module mode or hook traces again; so does another network
    object; the verdicts hold their network weakly and are bounded per network."""
    import gc

    net = light_then_heavy()
    x = torch.rand(1, 1, 8, 8, 8)

    def run(inp=x, model=net):
        MCDropoutInferer(num_samples=3, seed=1, sample_batch_size=1)(inp, model)

    run()
    run()
    assert calls == ["trace"] and len(shared_module.PLAIN_TRACES) == 1
    calls.clear()
    run(torch.rand(1, 1, 8, 8, 10))  # another shape
    run(x.double(), light_then_heavy().double())  # another network (and dtype)
    net[1].p = 0.2  # another dropout probability
    run()
    net[1].p = 0.3
    handle = net[2].register_forward_hook(lambda m, i, o: None)  # a hook
    run()
    handle.remove()
    run()  # as remembered before the hook
    assert calls == ["trace"] * 4
    net2 = light_then_heavy()
    run(model=net2)
    before = len(shared_module.PLAIN_TRACES)
    del net2
    gc.collect()
    assert len(shared_module.PLAIN_TRACES) == before - 1  # held weakly
    calls.clear()
    for size in range(6, 6 + shared_module.PlainTraces.max_keys + 2):
        run(torch.rand(1, 1, size, 8, 8))
    assert len(shared_module.PLAIN_TRACES) <= shared_module.PlainTraces.max_keys + 1  # + the double network's


def test_a_remembered_verdict_gives_the_maps_of_a_trace_under_sliding_windows(calls):
    """Sliding windows of one case: the first window traces, the others run full passes; the maps equal full
    passes' with the same seed, on the first call and on a call with the verdict remembered."""
    net = light_then_heavy()
    x = torch.rand(1, 1, 12, 12, 12)
    base = SlidingWindowInferer((8, 8, 8), sw_batch_size=1, overlap=0.25)

    def run(share):
        return MCDropoutInferer(num_samples=4, seed=7, base_inferer=base, share_passes=share,
                                sample_batch_size=1)(x, net)

    first, again, full = run(True), run(True), run(False)
    assert calls == ["trace"]
    for key in ("pred", "mutual_information"):
        torch.testing.assert_close(first[key], full[key], rtol=0, atol=0)
        torch.testing.assert_close(again[key], full[key], rtol=0, atol=0)


def test_plain_sample_batch_counts_the_recomputed_outputs():
    """The automatic batch of plain replays budgets each sample's recomputed kept outputs as well."""
    net = light_then_heavy()
    x = torch.rand(1, 1, 8, 8, 8)
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, x)
    per = passes.stochastic_bytes + passes.copied_bytes
    assert passes.per_sample_bytes() == per
    voxels = 10**6
    k = sample_batch(passes, "auto", voxels, 3, 29)
    per += 3 * 8**3 * 4  # and each sample's probabilities (3 classes over the window, float32)
    assert k == max(1, min(29, int(max(0.1 * voxels * 4 * 7, passes.traced_bytes) // per)))


def test_auto_sample_batch_budgets_the_probabilities_of_the_batch():
    """Found by hostile testing: the automatic batch budgeted each sample's stochastic tensors but not its
    probabilities, which the replay batch's outputs become for all its samples at once: with 64 classes and 16^3
    windows of a 96^3 case, 20 samples per batch measured 38.7 MiB beyond one sample against a budget of 22.9 MiB
    (a tenth of the case's buffers)."""
    torch.manual_seed(0)
    c = 64
    net = nn.Sequential(nn.Conv3d(1, 8, 3, padding=1), nn.ReLU(), nn.Dropout3d(0.1), nn.Conv3d(8, c, 1)).eval()
    x = torch.rand(1, 1, 16, 16, 16)
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, x)
    voxels = 96**3
    budget = max(0.1 * voxels * 4 * (c + 4), passes.traced_bytes)
    k = sample_batch(passes, "auto", voxels, c, 32)
    probabilities = c * x.numel() * 4
    assert 1 < k < 32
    assert k * (passes.per_sample_bytes() + probabilities) <= budget < (k + 1) * (passes.per_sample_bytes()
                                                                                  + probabilities)


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.1", True, float("nan")])
def test_min_shared_work_is_checked(bad):
    with pytest.raises(ValueError, match="min_shared_work"):
        SharedPasses(nn.Conv2d(1, 1, 1), min_shared_work=bad)
