"""Hostile input for the SSN sample source: bad counts, seeds, modes, and products with MC dropout."""

import pytest
import torch
from torch import nn

from monai_unc.inferers import MCDropoutSource, RateInSource, SSNInferer, SSNSource, UncertaintyInferer
from monai_unc.networks import SSNHead, SSNNetwork, ssn_sampling


def _net(variance: float = 1.0) -> SSNNetwork:
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Dropout2d(0.5), nn.Conv2d(8, 8, 3, padding=1))
    net = SSNNetwork(backbone, SSNHead(8, 3, rank=2, spatial_dims=2, init_variance=variance)).eval()
    if variance >= 1:
        with torch.no_grad():
            net.head.cov_factor_conv.weight.normal_()
    return net


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_sample_counts_are_integers_from_one(bad):
    with pytest.raises(ValueError, match="num_samples"):
        SSNInferer(num_samples=bad)
    with pytest.raises(ValueError, match="num_samples"):
        SSNSource(bad)


def test_same_seed_same_maps_other_seed_other_draws():
    net, x = _net(), torch.rand(2, 1, 6, 6)
    a = SSNInferer(num_samples=4, seed=3, keep_samples=True)(x, net)
    b = SSNInferer(num_samples=4, seed=3, keep_samples=True)(x, net)
    c = SSNInferer(num_samples=4, seed=4, keep_samples=True)(x, net)
    assert torch.equal(a["pred"], b["pred"]) and not torch.equal(a["pred"], c["pred"])
    s = a["samples"]
    assert all(not torch.allclose(s[0], s[i]) for i in range(1, 4))


def test_reusing_the_backbone_pass_gives_the_draws_of_full_passes():
    # the backbone has no randomness in eval: reusing its pass draws the same latent samples from the same RNG state
    net, x = _net(), torch.rand(2, 1, 6, 6)
    a = SSNInferer(num_samples=3, seed=1, keep_samples=True)(x, net)
    b = SSNInferer(num_samples=3, seed=1, keep_samples=True, reuse_features=False)(x, net)
    assert torch.equal(a["samples"], b["samples"])
    torch.manual_seed(1)
    with torch.no_grad(), ssn_sampling(net):
        manual = torch.stack([torch.softmax(net(x), 1) for _ in range(3)])
    assert torch.equal(a["samples"], manual)


@pytest.mark.parametrize("share_passes", [True, False])
@pytest.mark.parametrize("stochastic", ["dropout", "rate_in"])
def test_latent_draws_share_their_dropout_mask(share_passes, stochastic):
    # dropout masks x latent draws: draws (d, 0) and (d, 1) come from the backbone pass of mask d. With shared passes
    # (the default) the draws j > 0 of every mask reused the backbone pass of the last replayed mask: 3 masks in
    # the 6 samples became 1 + 1 + 4
    net, x = _net(variance=1e-12), torch.rand(2, 1, 8, 8)  # latent noise sd ~ sqrt(epsilon) = 0.003
    outer = MCDropoutSource(3) if stochastic == "dropout" else RateInSource(3, target_loss=0.3)
    out = UncertaintyInferer([outer, SSNSource(2)], seed=0, keep_samples=True, share_passes=share_passes)(x, net)
    s = out["samples"]
    for d in range(3):
        assert float((s[2 * d] - s[2 * d + 1]).abs().max()) < 0.01
    for d in (1, 2):
        assert float((s[0] - s[2 * d]).abs().max()) > 0.01
    ref = UncertaintyInferer([outer, SSNSource(2)], seed=0, share_passes=False)(x, net)
    assert torch.equal(out["mutual_information"], ref["mutual_information"])


def test_network_state_is_restored_after_an_exception():
    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls == 2:
                raise RuntimeError("boom")
            return x

    net = SSNNetwork(nn.Sequential(nn.Conv2d(1, 4, 1), Boom()), SSNHead(4, 2, rank=1, spatial_dims=2)).eval()
    with pytest.raises(RuntimeError, match="boom"):
        SSNInferer(num_samples=3, seed=0, reuse_features=False)(torch.rand(1, 1, 4, 4), net)
    assert not net.head.sampling and not net._cache_enabled and not net._reuse and net._cache is None


def test_channels_last_input_gives_the_same_maps():
    net, x = _net(), torch.rand(2, 1, 6, 6)
    a = SSNInferer(num_samples=3, seed=2)(x, net)
    b = SSNInferer(num_samples=3, seed=2)(x.to(memory_format=torch.channels_last), net)
    assert torch.allclose(a["pred"], b["pred"], atol=1e-6)


def test_empty_batch_and_missing_head_are_refused():
    with pytest.raises(ValueError, match="empty batch"):
        SSNInferer(num_samples=2)(torch.rand(0, 1, 4, 4), _net())
    with pytest.raises(ValueError, match="no SSNHead"):
        SSNInferer(num_samples=2)(torch.rand(1, 1, 4, 4), nn.Conv2d(1, 2, 1))


@pytest.mark.parametrize("how", ["no_reuse", "bare_head"])
def test_marginalizing_draws_that_each_get_a_new_dropout_mask_is_refused(how):
    # each latent draw ran the backbone again with a new dropout mask: the "per-mask" average mixed masks and the
    # MI reported as epistemic was about a third of it (0.00016 vs 0.00047 on this network)
    net = _net(variance=1e-12)
    source = SSNSource(3, marginalize=True, reuse_features=False)
    if how == "bare_head":
        net = nn.Sequential(net.backbone, net.head).eval()
        source = SSNSource(3, marginalize=True)
    with pytest.raises(ValueError, match="mix dropout masks"):
        UncertaintyInferer([MCDropoutSource(2), source], seed=0)(torch.rand(1, 1, 6, 6), net)
    assert not net[1].sampling if how == "bare_head" else not net.head.sampling


def test_marginalizing_without_dropout_or_with_reused_passes_runs():
    net, x = _net(variance=1e-12), torch.rand(1, 1, 6, 6)
    out = UncertaintyInferer([MCDropoutSource(2), SSNSource(3, marginalize=True)], seed=0)(x, net)
    assert out.num_samples == 2 and out.mi_meaning.value == "epistemic"
    bare = nn.Sequential(net.backbone, net.head).eval()
    assert UncertaintyInferer([SSNSource(3, marginalize=True)], seed=0)(x, bare).num_samples == 1


@pytest.mark.parametrize("flag", ["marginalize", "reuse_features"])
@pytest.mark.parametrize("bad", ["no", None, 1])
def test_source_flags_must_be_bools(flag, bad):
    """Regression: ``bool()`` took ``marginalize="no"`` as True (one latent-averaged sample, MI called epistemic)."""
    with pytest.raises(TypeError, match=flag):
        SSNSource(4, **{flag: bad})
    if flag == "reuse_features":
        with pytest.raises(TypeError, match=flag):
            SSNInferer(4, reuse_features=bad)
