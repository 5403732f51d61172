"""Hostile networks for shared passes (monai_unc.networks.shared): random draws that are not made per batch element,
control flow on a random draw, random operations that draw inside one PyTorch function, in-place operations around
a dropout, and the grad / inference / autocast modes. Injected masks and the helpers come from ``test_shared``."""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from monai_unc.inferers import MCDropoutInferer, UncertaintyInferer, enable_mc_dropout
from monai_unc.networks.shared import SharedPasses, SharingUnavailable, is_random_op

from .test_shared import BankDropout, CallableDropout, MaskBank, assert_maps_close, replay_and_batched_pass, run_both


class _Drawing(nn.Module):
    """A convolution, a random operation written in ``forward`` (``how``), a head."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if self.how == "channel_mask":  # a hand-written (continuous) channel mask for batch-1 windows
            h = h * (torch.rand(1, h.shape[1], 1, 1) + 0.5)
        elif self.how == "noise_chw":  # noise of the shape of one input, broadcast over the batch
            h = h + torch.randn(h.shape[1:])
        elif self.how == "dropconnect":  # MC DropConnect: dropout on the weights
            h = F.conv2d(h, F.dropout(self.b.weight, 0.5, training=True), self.b.bias, padding=1)
        elif self.how == "gumbel_softmax":
            h = F.gumbel_softmax(h, tau=1.0, dim=1)
        elif self.how == "fractional_max_pool":
            h = F.interpolate(F.fractional_max_pool2d(h, 2, output_size=(4, 4)), size=h.shape[2:])
        elif self.how == "attention_dropout":
            q = h.flatten(2).transpose(1, 2)
            h = F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).transpose(1, 2).reshape(h.shape)
        return self.head(h)


@pytest.mark.parametrize("how", ["channel_mask", "noise_chw", "dropconnect", "gumbel_softmax", "fractional_max_pool",
                                 "attention_dropout"])
# (2, 2): as many samples as inputs (the first replay runs the whole batch); (4, 4): the first input as 2 + 2 samples
@pytest.mark.parametrize("batch, sample_batch", [(1, 4), (2, 4), (2, 2), (4, 4)])
def test_every_sample_gets_its_own_draw(how, batch, sample_batch):
    """Draws that a replay of k samples would share (not made per batch element: a (1, C, 1, 1) mask, (C, H, W)
    noise, dropout on a weight) or that were not seen as draws (inside gumbel_softmax, fractional max pooling,
    attention dropout): every sample used to be a copy of another (of the replay batch's first, or of the traced
    sample for the whole network); every pair of samples must differ, as with full passes."""
    torch.manual_seed(0)
    net = _Drawing(how).eval()
    x = torch.rand(batch, 1, 6, 6)
    out = UncertaintyInferer(CallableDropout(6), seed=0, sample_batch_size=sample_batch, keep_samples=True)(x, net)
    samples = out["samples"]
    assert samples.shape[0] == 6
    for i, j in itertools.combinations(range(6), 2):
        assert (samples[i] - samples[j]).abs().max() > 1e-6, (i, j)


@pytest.mark.parametrize("how", ["channel_mask", "dropconnect"])
def test_unbatched_draws_replay_one_sample_at_a_time(how):
    """The first replay finds the draws not scaling with the batch and replays one sample at a time from then on."""
    torch.manual_seed(0)
    net = _Drawing(how).eval()
    x = torch.rand(1, 1, 6, 6)
    with torch.no_grad():
        passes = SharedPasses(net)
        passes.trace(net, x)
        out = passes.replay(net, x, 3)
    assert passes._per_sample and out.shape == (3, 2, 6, 6)
    assert (out[0] - out[1]).abs().max() > 1e-6 and (out[1] - out[2]).abs().max() > 1e-6


def test_random_ops_that_draw_inside_one_function():
    q = torch.rand(1, 3, 4)
    attention = F.scaled_dot_product_attention
    assert is_random_op(attention, (q, q, q), {"dropout_p": 0.2})
    assert is_random_op(attention, (q, q, q, None, 0.2))
    assert not is_random_op(attention, (q, q, q), {"dropout_p": 0.0}) and not is_random_op(attention, (q, q, q))
    mha = F.multi_head_attention_forward
    assert is_random_op(mha, (q,) * 10 + (0.1,), {"training": True})
    assert not is_random_op(mha, (q,) * 10 + (0.1,), {"training": False})
    assert not is_random_op(mha, (q,) * 10 + (0.0,), {"training": True})
    x = torch.rand(1, 2, 6, 6)
    assert is_random_op(F.fractional_max_pool2d, (x, 2), {"output_size": 4})
    assert not is_random_op(F.fractional_max_pool2d, (x, 2), {"output_size": 4, "_random_samples": torch.rand(1, 2, 2)})
    for f in (F.gumbel_softmax, torch.binomial, torch._standard_gamma, torch._sample_dirichlet):
        assert is_random_op(f, (x,))
    # the alpha dropouts default to training=False (the other dropouts to True)
    for f in (F.alpha_dropout, F.feature_alpha_dropout):
        assert not is_random_op(f, (x, 0.5)) and is_random_op(f, (x, 0.5, True))
        assert is_random_op(f, (x,), {"training": True})
    assert is_random_op(F.dropout, (x, 0.5)) and is_random_op(F.dropout2d, (x,))


class _Branches(nn.Module):
    """Python control flow on a random draw (each sample takes its own branch in a full pass), or a draw reduced to a
    scalar (each sample's own maximum in a full pass)."""

    def __init__(self, bank: MaskBank, scalar: bool = False) -> None:
        super().__init__()
        self.scalar = scalar
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.drop = BankDropout(bank, "drop", p=0.5)
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        d = self.drop(h)
        if self.scalar:  # a batch of k samples was divided by the maximum over all of them
            return self.head(d / (d.abs().max() + 0.1))
        bonus = torch.tensor([10.0, 0.0]).view(1, 2, 1, 1)
        if d.sum() > h.sum():  # a batch of k samples took one branch for all of them
            return self.head(d) + bonus
        return self.head(d) - bonus


def test_control_flow_on_a_random_draw_equals_full_passes_injected_masks():
    bank = MaskBank()
    torch.manual_seed(0)
    net = _Branches(bank).eval()
    bank.watch(net)
    x = torch.rand(1, 1, 8, 8)
    full, shared = run_both(lambda s: MCDropoutInferer(num_samples=8, share_passes=s, sample_batch_size=4,
                                                       keep_samples=True), x, net, bank)
    assert_maps_close(full, shared)
    signs = {bool(s[:, 0].mean() > 0.5) for s in full["samples"]}
    assert len(signs) == 2  # the samples took both branches: the test can fail


class _InPlace(nn.Module):
    """In-place operations around a dropout, a convolution called three times (shared weights), a dropout twice."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, padding=1)
        self.drop = nn.Dropout2d(0.5)
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if self.how == "relu_inplace":
            return self.head(F.relu(self.drop(h), inplace=True))
        if self.how == "iadd_kept":
            d = self.drop(h)
            d += h
            return self.head(d)
        if self.how == "kept_iadd":  # a stochastic value added into a kept output: plain copies
            h += self.drop(h)
            return self.head(h)
        if self.how == "add_":
            return self.head(self.drop(h).add_(self.b(h)))
        if self.how == "weight_sharing":
            g = self.b(h)
            return self.head(self.b(self.drop(g)) + self.b(g))
        return self.head(self.drop(h) - self.drop(h))  # one dropout module, two masks


@pytest.mark.parametrize("how", ["relu_inplace", "iadd_kept", "kept_iadd", "add_", "weight_sharing", "twice"])
@pytest.mark.parametrize("mode", ["no_grad", "grad", "inference_mode"])
def test_in_place_and_reused_modules_match_a_batched_pass(how, mode):
    """A replay of k samples equals the network on the input repeated k times with the same draws, the network's
    parameters untouched, in each grad mode."""
    torch.manual_seed(0)
    net = _InPlace(how).eval()
    net.drop.train()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    x = torch.rand(1, 1, 6, 6)
    ctx = {"no_grad": torch.no_grad, "grad": contextlib.nullcontext, "inference_mode": torch.inference_mode}[mode]
    with ctx():
        passes = SharedPasses(net)
        torch.manual_seed(1)
        first = passes.trace(net, x)
        torch.manual_seed(1)
        ref1 = net(x)
        torch.manual_seed(2)
        out = passes.replay(net, x, 3)
        torch.manual_seed(2)
        ref = net(x.repeat(3, 1, 1, 1))
    torch.testing.assert_close(first, ref1)
    torch.testing.assert_close(out, ref)
    assert (out[0] - out[1]).abs().max() > 1e-6
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in state.items())


def test_batch_norm_in_eval_and_autocast():
    """BatchNorm in eval mode on both sides of the dropout under bfloat16 autocast: the replay equals a batched pass,
    the running statistics and the modes stay as they were."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Dropout2d(0.5), nn.BatchNorm2d(4),
                        nn.Conv2d(4, 2, 1)).eval()
    for bn in (net[1], net[3]):
        bn.running_mean.uniform_(-1, 1)
    net[2].train()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    x = torch.rand(1, 1, 6, 6)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        passes, out, ref = replay_and_batched_pass(net, x, 3, seed=2)
    assert out.dtype == torch.bfloat16 and passes.shared_calls == 2
    torch.testing.assert_close(out, ref)
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in state.items())
    assert [m.training for m in net] == [False, False, True, False, False]


def test_a_draw_inside_a_kept_call_does_not_stop_batched_replays():
    """A draw whose value a shared call does not use (here a dropout of an unused tensor) is not redrawn by the
    replay: the count of the replay's draws leaves it out, and the replay stays batched."""

    class Dead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(1, 4, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            F.dropout(x, 0.5, training=True)  # drawn, never used
            return self.conv(x)

    torch.manual_seed(0)
    net = nn.Sequential(Dead(), nn.Dropout2d(0.5), nn.Conv2d(4, 2, 1)).eval()
    net[1].train()
    x = torch.rand(1, 1, 6, 6)
    with torch.no_grad():
        passes = SharedPasses(net)
        passes.trace(net, x)
        out = passes.replay(net, x, 3)
    assert passes.shared_calls == 1 and not passes._per_sample
    assert (out[0] - out[1]).abs().max() > 1e-6


def test_a_draw_reduced_to_a_scalar_equals_full_passes_injected_masks():
    bank = MaskBank()
    torch.manual_seed(0)
    net = _Branches(bank, scalar=True).eval()
    bank.watch(net)
    x = torch.rand(1, 1, 8, 8)
    full, shared = run_both(lambda s: MCDropoutInferer(num_samples=8, share_passes=s, sample_batch_size=4), x, net,
                            bank)
    assert_maps_close(full, shared)


class _LayerDrop(nn.Module):
    """Skips its block on a PyTorch draw (stochastic depth written as control flow): its output carries no stochastic
    tensor, but differs between samples."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Conv2d(4, 4, 3, padding=1)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if torch.rand(()) < 0.5:
            return x
        return self.block(x)


def test_a_call_that_branches_on_a_draw_is_not_kept():
    """A call that took a branch on a draw is never replaced by its traced output: every replayed sample runs it
    (its own draw), or the replay refuses when the sample's branch calls other modules than the trace's."""
    drop = _LayerDrop()
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), drop, nn.Dropout2d(0.5), nn.Conv2d(4, 2, 1)).eval()
    net[2].train()
    x = torch.rand(1, 1, 6, 6)
    refused = ran = 0
    with torch.no_grad():
        for seed in range(12):
            torch.manual_seed(seed)
            passes = SharedPasses(net)
            passes.trace(net, x)
            assert passes._per_sample
            before = drop.calls
            try:
                passes.replay(net, x, 4)
            except SharingUnavailable:
                refused += 1
            else:
                assert drop.calls - before == 4  # one call per sample, none skipped
                ran += 1
    assert refused and ran  # both ways were taken: the test can fail either way


def test_shared_ops_counts_the_last_replay_only():
    """``shared_ops`` is the count of the last replay: whole-batch replays run no operation once, a replay input by
    input runs the concatenation of two shared maps once per input."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(1, 4, 3, padding=1), nn.Conv2d(1, 4, 3, padding=1)
            self.drop, self.head = nn.Dropout2d(0.5), nn.Conv2d(8, 2, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.drop(torch.cat([self.a(x), self.b(x)], 1)))

    net = Net().eval()
    net.drop.train()
    x = torch.rand(2, 1, 6, 6)
    with torch.no_grad():
        passes = SharedPasses(net)
        passes.trace(net, x)
        counts = []
        for k in (2, 2, 3, 1):
            passes.replay(net, x, k)
            counts.append(passes.shared_ops)
    # k = 2 first: the whole batch (k = B: the draw count must tell); then input by input (one cat per input)
    assert counts == [0, 2, 2, 0]


class _NormalizeInPlace(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sub_(0.5)  # a network that normalises its input in place


def _light_then_heavy_in_place() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(_NormalizeInPlace(), nn.Conv3d(1, 2, 3, padding=1), nn.Dropout3d(0.3),
                         nn.Conv3d(2, 16, 3, padding=1), nn.ReLU(), nn.Conv3d(16, 3, 1)).eval()


@pytest.mark.parametrize("min_shared_work", [None, 0.0])
def test_a_network_that_writes_its_input_replays_from_the_input_the_trace_got(min_shared_work):
    """Its kept calls hold little of the work, but the trace changed its input in place: plain replays ran the network
    on the already normalised input (normalised twice, every replayed sample wrong). Plain (default) and split
    (``min_shared_work=0``) replays, of one sample and of several, again and again, equal the network on the original
    input repeated ``k`` times."""
    passes = _assert_replays_equal_the_original_input_repeated(_light_then_heavy_in_place(), min_shared_work)
    assert passes.skipped_work < 0.1 and passes.plain == (min_shared_work is None)


def _assert_replays_equal_the_original_input_repeated(net: nn.Module, min_shared_work: float | None) -> SharedPasses:
    """Trace ``net`` (which writes into its input) on a copy of a random input, then replay ``k`` = 3, 1, 3 samples:
    each replay equals the network on the original input repeated ``k`` times (the same seed). Returns the passes."""
    x0 = torch.rand(1, 1, 6, 6, 6)
    x = x0.clone()
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net, min_shared_work=min_shared_work)
        passes.trace(net, x)
        for k in (3, 1, 3):
            torch.manual_seed(3)
            out = passes.replay(net, x, k)
            torch.manual_seed(3)
            ref = net(x0.repeat(k, 1, 1, 1, 1))
            torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    return passes


def test_the_input_is_copied_only_when_the_traced_pass_writes_into_it():
    """The trace keeps the copy of its input taken before the pass when the pass wrote into its storage (a view of it
    written counts), and none for a network that leaves it alone."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 2, 3, padding=1), nn.Dropout3d(0.3), nn.Conv3d(2, 1, 1)).eval()
    x = torch.rand(1, 1, 6, 6, 6)
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, x)
        assert passes._pristine is None

        def writes_a_view(t: torch.Tensor) -> torch.Tensor:
            t[:, :, 0].mul_(2.0)  # a view of the input, written after a first read
            return net(t)

        x0 = torch.rand(1, 1, 6, 6, 6)
        x = x0.clone()
        passes = SharedPasses(net)
        passes.trace(writes_a_view, x)
        torch.testing.assert_close(passes._pristine, x0, rtol=0, atol=0)
        assert not torch.equal(x, x0)


def test_bilinear_work_counts_its_weight():
    """``F.bilinear(x1, x2, weight)`` takes its weight third: output elements times ``in1 * in2`` multiply-adds (the
    second input's features were taken for the weight, a third of the work here)."""
    from monai_unc.networks.shared import _work

    x1, x2, w = torch.rand(4, 3), torch.rand(4, 5), torch.rand(7, 3, 5)
    out = F.bilinear(x1, x2, w)
    assert _work(F.bilinear, (x1, x2, w), {}, out) == 4 * 7 * 3 * 5
    assert _work(F.bilinear, (x1, x2), {"weight": w}, out) == 4 * 7 * 3 * 5


class _ResidualOnNormalizedInput(nn.Module):
    """Normalises its input in place outside any module call, then adds it back after the stochastic rest."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.drop, self.b = nn.Conv3d(1, 8, 3, padding=1), nn.Dropout3d(0.3), nn.Conv3d(8, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.sub_(0.5)
        return self.b(self.drop(self.a(x))) + x


@pytest.mark.parametrize("k", [1, 3])
def test_replays_start_from_the_input_before_the_trace_wrote_into_it(k):
    """The traced pass changed its input in place; the replays repeated the changed input, so the forward normalised it
    a second time and every replayed sample was off by the 0.5 it subtracts: they start from the input as the trace
    got it and equal the network on the original input repeated ``k`` times."""
    torch.manual_seed(0)
    net = _ResidualOnNormalizedInput().eval()
    x0 = torch.rand(1, 1, 6, 6, 6)
    x = x0.clone()
    with torch.no_grad(), enable_mc_dropout(net):
        passes = SharedPasses(net)
        passes.trace(net, x)
        assert passes.shared_calls == 1
        for _ in range(2):  # a replay object replays any number of batches from one trace
            torch.manual_seed(3)
            out = passes.replay(net, x, k)
            torch.manual_seed(3)
            ref = net(x0.repeat(k, 1, 1, 1, 1))
            torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)


def _einsum_brute_force(eq: str, *ops: torch.Tensor) -> int:
    """Multiply-adds of an explicit ``einsum`` without ellipsis: one per combination of every index's values."""
    lhs, rhs = eq.replace(" ", "").split("->")
    sizes = {c: t.shape[k] for term, t in zip(lhs.split(","), ops) for k, c in enumerate(term)}
    n = 1
    for size in sizes.values():
        n *= size
    return n


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 5, 7), (2, 3, 6, 7)]),
    ("ii->i", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("bcxyz,oc->boxyz", [(2, 3, 4, 2, 2), (5, 3)]),
])
def test_einsum_work_counts_every_summed_index(eq, shapes):
    """``einsum``'s work was its output's elements (a matrix product counted as if it cost one multiply-add per output
    element): it is the output times the sizes of the indices summed over, as counting every combination gives."""
    from monai_unc.networks.shared import _work

    ops = [torch.rand(*s) for s in shapes]
    out = torch.einsum(eq, *ops)
    assert _work(torch.einsum, (eq, *ops), {}, out) == _einsum_brute_force(eq, *ops)
    assert _work(torch.einsum, (eq, ops), {}, out) == _einsum_brute_force(eq, *ops)  # operands as one list


def test_einsum_work_with_ellipsis_and_implicit_output():
    from monai_unc.networks.shared import _work

    a, b = torch.rand(2, 3, 4, 5), torch.rand(2, 3, 5, 6)
    out = torch.einsum("...ij,...jk->...ik", a, b)
    assert _work(torch.einsum, ("...ij,...jk->...ik", a, b), {}, out) == 2 * 3 * 4 * 5 * 6
    a, b = torch.rand(3, 4), torch.rand(4, 5)
    out = torch.einsum("ij,jk", a, b)  # implicit output "ik"
    assert _work(torch.einsum, ("ij,jk", a, b), {}, out) == 3 * 4 * 5


def test_attention_rmatmul_and_addbmm_work():
    """``scaled_dot_product_attention``: ``Q K^T`` and ``softmax(.) V``, ``L S (E + Ev)`` multiply-adds per batch entry
    (was its output's elements); ``addbmm`` sums ``b`` products (its batch was left out); ``a @ b`` reached as
    ``b.__rmatmul__(a)`` takes its inner size from ``b``'s rows (was ``b``'s columns)."""
    from monai_unc.networks.shared import _work

    q, k, v = torch.rand(2, 3, 5, 8), torch.rand(2, 3, 7, 8), torch.rand(2, 3, 7, 4)
    out = F.scaled_dot_product_attention(q, k, v)
    assert _work(F.scaled_dot_product_attention, (q, k, v), {}, out) == 2 * 3 * 5 * 7 * (8 + 4)
    assert _work(F.scaled_dot_product_attention, (), {"query": q, "key": k, "value": v}, out) == 2 * 3 * 5 * 7 * 12
    m, b1, b2 = torch.rand(3, 6), torch.rand(4, 3, 5), torch.rand(4, 5, 6)
    out = torch.addbmm(m, b1, b2)
    assert _work(torch.addbmm, (m, b1, b2), {}, out) == 4 * 3 * 5 * 6
    a, b = torch.rand(3, 5), torch.rand(5, 2)
    assert _work(torch.Tensor.__rmatmul__, (b, a), {}, a @ b) == 3 * 5 * 2


class _WritesInputUnseenFirst(nn.Module):
    """Writes into its input first in a way no traced operation shows, then (for some) with an operation it sees."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.a, self.drop, self.b = nn.Conv3d(1, 2, 3, padding=1), nn.Dropout3d(0.3), nn.Conv3d(2, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "numpy_then_sub":  # a write through numpy, then one the trace sees
            x.numpy()[...] *= 2.0
            x.sub_(0.5)
        elif self.how == "data_then_sub":  # the input's storage replaced, then written
            x.data = x.data * 2.0
            x.sub_(0.5)
        elif self.how == "aten_overload":  # an ATen overload: its name (``sub_.Tensor``) does not end in "_"
            torch.ops.aten.sub_.Tensor(x, torch.tensor(0.5))
        return self.b(self.drop(self.a(x))) + x.mean()


@pytest.mark.parametrize("how", ["numpy_then_sub", "data_then_sub", "aten_overload"])
@pytest.mark.parametrize("min_shared_work", [None, 0.0])
def test_replays_start_from_the_input_before_a_write_the_trace_did_not_see(how, min_shared_work):
    """The input was copied just before the first write the trace saw; a write it did not see (through ``x.numpy()``,
    ``x.data = ...``) came first, so the copy was already changed and every replayed sample ran on an input doubled
    twice; a write it never saw (``torch.ops.aten.sub_.Tensor``) left the replays on the normalised input. Plain and
    split replays equal the network on the original input repeated ``k`` times."""
    torch.manual_seed(0)
    _assert_replays_equal_the_original_input_repeated(_WritesInputUnseenFirst(how).eval(), min_shared_work)


@pytest.mark.parametrize("sw_batch_size", [1, 2])
def test_a_replay_batchs_outputs_are_freed_before_the_next_replay(monkeypatch, sw_batch_size):
    """Found by hostile testing (of the memory model with ``sw_batch_size``): the inferer kept the previous replay
    batch's outputs while the next replay ran; with two windows per call the rows' outputs and their interleaved copy
    were alive beside them (157 MiB measured where 125 MiB suffice). Each replay's output must be gone when the next
    replay starts (nothing but the inferer held it)."""
    import weakref

    from monai.inferers import SlidingWindowInferer

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 8, 3, padding=1), nn.ReLU(), nn.Dropout3d(0.1), nn.Conv3d(8, 3, 1)).eval()
    alive: list[weakref.ref] = []
    real = SharedPasses.replay

    def replay(self, predictor, x, k):
        assert all(r() is None for r in alive), "the previous replay batch's output is still held"
        out = real(self, predictor, x, k)
        alive.append(weakref.ref(out))
        return out

    monkeypatch.setattr(SharedPasses, "replay", replay)
    base = SlidingWindowInferer((8, 8, 8), overlap=0.25, sw_batch_size=sw_batch_size)
    out = MCDropoutInferer(num_samples=7, base_inferer=base, seed=0, sample_batch_size=2)(torch.randn(1, 1, 12, 12, 12),
                                                                                          net)
    assert out.num_samples == 7 and len(alive) >= 6
