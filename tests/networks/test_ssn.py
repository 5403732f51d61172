"""Stochastic Segmentation Networks: the head's distribution (covariance = D + P P^T, flattening, mask, modes), the
Monte Carlo loss against a brute-force evaluation and cross-entropy, gradients, AMP, the SSN sample source (alone,
with dropout, flips and sliding windows), training on the toy set, and the docs/ssn.md example."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from monai.inferers import SlidingWindowInferer
from monai.networks.nets import UNet
from torch import nn
from torch.distributions import LowRankMultivariateNormal

from monai_unc.data import build_ssn_network, train_ssn
from monai_unc.inferers import FlipSource, MCDropoutSource, SSNInferer, SSNSource, UncertaintyInferer
from monai_unc.keys import MIMeaning
from monai_unc.networks import (
    SSNDistribution,
    SSNHead,
    SSNLoss,
    SSNNetwork,
    lowrank_distribution,
    ssn_log_likelihood,
    ssn_sampling,
)
from tests._paths import ROOT

DOCS = ROOT / "docs" / "ssn.md"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _head(spatial_dims=2, in_channels=4, num_classes=3, rank=2, seed=0, **kw):
    """A head with PyTorch's random initialisation of all three convolutions (a non-trivial covariance)."""
    torch.manual_seed(seed)
    kw.setdefault("init_variance", None)
    return SSNHead(in_channels, num_classes, rank=rank, spatial_dims=spatial_dims, **kw)


def _explicit_covariance(params, b):
    """D + P P^T built with explicit loops over (class, voxel) pairs and the documented index e = c * N + n."""
    mean, diag, factor = (t.detach().double().numpy() for t in params)
    c_, *spatial = mean.shape[1:]
    n_vox = math.prod(spatial)
    e = c_ * n_vox
    cov = np.zeros((e, e))
    voxels = list(np.ndindex(*spatial))
    for c1 in range(c_):
        for v1 in voxels:
            i = c1 * n_vox + int(np.ravel_multi_index(v1, spatial))
            for c2 in range(c_):
                for v2 in voxels:
                    j = c2 * n_vox + int(np.ravel_multi_index(v2, spatial))
                    cov[i, j] = sum(factor[b, r, c1][v1] * factor[b, r, c2][v2] for r in range(factor.shape[1]))
            cov[i, i] += diag[b, c1][v1]
    return cov


# ------------------------------------------------------------------------------------------ distribution
@pytest.mark.parametrize("spatial_dims, spatial", [(2, (2, 3)), (3, (2, 2, 2))])
def test_covariance_matrix_equals_diag_plus_factor_product(spatial_dims, spatial):
    head = _head(spatial_dims)
    feats = torch.randn(2, 4, *spatial)
    params = head.params(feats)
    dist = head.distribution(feats)
    assert isinstance(dist, LowRankMultivariateNormal) and dist.batch_shape == (2,)
    assert dist.event_shape == (3 * math.prod(spatial),)
    for b in range(2):
        np.testing.assert_allclose(dist.covariance_matrix[b].detach().double().numpy(),
                                   _explicit_covariance(params, b), rtol=1e-5, atol=1e-6)
        # the flattening: loc[b, c * N + n] is the mean logit of class c at voxel n (C order)
        mean = params.mean[b].detach()
        for c in range(3):
            for v in np.ndindex(*spatial):
                idx = c * math.prod(spatial) + int(np.ravel_multi_index(v, spatial))
                assert dist.loc[b, idx] == mean[(c, *v)]
    # same distribution as torch's own class built from the same flat parameters
    ref = LowRankMultivariateNormal(dist.loc, dist.cov_factor, dist.cov_diag)
    x = ref.sample((3,))
    torch.testing.assert_close(dist.log_prob(x), ref.log_prob(x))
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    torch.testing.assert_close(dist.precision_matrix, ref.precision_matrix, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dist.variance, ref.variance)


def test_sample_covariance_of_many_draws_matches_the_formula():
    head = _head(2, num_classes=2, rank=3, seed=3)
    feats = torch.randn(1, 4, 2, 2)
    with torch.no_grad():
        dist = head.distribution(feats)
        torch.manual_seed(0)
        n = 200_000
        x = dist.rsample((n,))[:, 0].double()  # (n, 8)
    cov = _explicit_covariance(head.params(feats), 0)
    emp = torch.cov(x.T).numpy()
    # standard error of a sample covariance: sqrt((S_ii S_jj + S_ij^2) / n)
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    assert np.all(np.abs(emp - cov) < 5 * se), np.abs(emp - cov).max()
    tol = 5 * np.sqrt(cov.diagonal().max() / n)
    np.testing.assert_allclose(x.mean(0).numpy(), dist.loc[0].double().numpy(), atol=tol)


def test_rsample_equals_stock_lowrank_normal_for_the_same_random_state():
    head = _head(3, rank=4)
    dist = head.distribution(torch.randn(2, 4, 3, 2, 2))
    ref = LowRankMultivariateNormal(dist.loc, dist.cov_factor, dist.cov_diag)
    for shape in ((), (5,), (2, 3)):
        torch.manual_seed(7)
        a = dist.rsample(shape)
        torch.manual_seed(7)
        b = ref.rsample(shape)
        assert a.shape == b.shape == (*shape, 2, 3 * 12)
        torch.testing.assert_close(a, b)
    for antithetic in (False, True):
        torch.manual_seed(3)
        rows = torch.stack(list(dist.iter_rsample(6, antithetic=antithetic)))
        torch.manual_seed(3)
        full = dist.rsample((3 if antithetic else 6,))
        if antithetic:
            full = torch.cat([full, 2 * dist.loc - full])
        torch.testing.assert_close(rows, full)
    torch.manual_seed(1)
    maps = dist.logits((4,))
    assert maps.shape == (4, 2, 3, 3, 2, 2)
    torch.manual_seed(1)
    torch.testing.assert_close(maps.reshape(4, 2, -1), dist.rsample((4,)))


@pytest.mark.parametrize("batch", [1, 3])
def test_loss_gradients_equal_those_through_the_stock_distribution(batch):
    target = torch.randint(0, 3, (batch, 4, 5))
    grads = []
    for stock in (False, True):
        head = _head(2, rank=3, seed=4)
        feats = torch.randn(batch, 4, 4, 5, generator=torch.Generator().manual_seed(1))
        d = head.distribution(feats)
        if stock:
            d = LowRankMultivariateNormal(d.loc, d.cov_factor, d.cov_diag)
        torch.manual_seed(9)
        SSNLoss(6)(d, target).backward()
        grads.append([p.grad.clone() for p in head.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_modes_eval_mean_train_distribution_sampling_draws():
    head = _head(2)
    feats = torch.randn(2, 4, 5, 6)
    head.eval()
    mean = head(feats)
    torch.testing.assert_close(mean, head.mean_conv(torch.relu(feats)))
    torch.testing.assert_close(mean, head.distribution(feats).mean_logits)
    head.train()
    assert isinstance(head(feats), SSNDistribution)
    head.train_output = "raw"
    raw = head(feats)
    assert raw.shape == (2, head.raw_channels, 5, 6) == (2, 3 * (2 + 2), 5, 6)
    torch.testing.assert_close(head.distribution_from_raw(raw).loc, head.distribution(feats).loc)
    head.eval()
    with ssn_sampling(head):
        a, b = head(feats), head(feats)
    assert a.shape == mean.shape and not torch.equal(a, b)
    assert not head.sampling
    torch.testing.assert_close(head(feats), mean)


def test_default_initialisation_starts_as_cross_entropy_training():
    torch.manual_seed(0)
    head = SSNHead(4, 3, rank=2, spatial_dims=2)
    feats = torch.randn(2, 4, 5, 5)
    p = head.params(feats)
    assert torch.all(p.cov_factor == 0)
    torch.testing.assert_close(p.cov_diag, torch.full_like(p.cov_diag, 1e-3 + head.epsilon))
    target = torch.randint(0, 3, (2, 5, 5))
    ce = F.cross_entropy(head.mean_logits(feats), target)
    assert abs(SSNLoss(20)(head.distribution(feats), target).item() - ce.item()) < 0.02 * ce.item()
    with pytest.raises(ValueError, match="init_variance"):
        SSNHead(4, 3, init_variance=0.0)
    assert not torch.all(SSNHead(4, 3, init_variance=None).cov_factor_conv.weight == 0)


def test_identity_mean_keeps_the_logits_of_a_network():
    head = SSNHead(3, 3, rank=2, spatial_dims=2, input_activation=None, identity_mean=True).eval()
    logits = torch.randn(2, 3, 4, 4)
    torch.testing.assert_close(head(logits), logits)
    with pytest.raises(ValueError, match="identity_mean"):
        SSNHead(4, 3, identity_mean=True)


@pytest.mark.parametrize("mask_shape", ["b_spatial", "b_1_spatial", "float"])
def test_mask_zeroes_the_covariance_outside(mask_shape):
    head = _head(2, epsilon=1e-6)
    feats = torch.randn(2, 4, 4, 5)
    m = torch.zeros(2, 4, 5, dtype=torch.bool)
    m[:, 1:3, 1:4] = True
    mask = {"b_spatial": m, "b_1_spatial": m[:, None], "float": m.float()}[mask_shape]
    p = head.params(feats, mask)
    outside = ~m[:, None].expand_as(p.mean)
    assert torch.all(p.cov_diag[outside] == 1e-6) and torch.all(p.cov_diag[~outside] > 1e-6)
    assert torch.all(p.cov_factor.permute(1, 0, 2, 3, 4)[:, outside] == 0)
    unmasked = head.params(feats)
    torch.testing.assert_close(p.cov_factor[:, :, :, 1:3, 1:4], unmasked.cov_factor[:, :, :, 1:3, 1:4])
    draws = head.distribution(feats, mask).logits((50,)).detach()
    dev = (draws - p.mean.detach()).abs()
    assert dev[:, outside].max() < 1e-2 and dev[:, ~outside].max() > 1e-1
    with pytest.raises(ValueError, match="binary"):
        head.params(feats, m.float() * 0.5)
    with pytest.raises(ValueError, match="mask must be"):
        head.params(feats, m[:, :3])


def test_mask_is_exact_where_the_covariance_blows_up():
    """Regression: the distribution path masked ``exp(log_var) * mask + epsilon``: a log-variance above ~88.7
    outside the mask (exp infinite in float32; the mask exists for that region) gave ``inf * 0 = NaN`` in the
    diagonal, the SSN loss and the draws, while :meth:`SSNHead.raw` selected and gave ``epsilon``. An infinite
    factor outside the mask is zeroed the same way, and the gradients stay finite."""
    head = SSNHead(2, num_classes=2, rank=1, spatial_dims=2, input_activation=None)
    with torch.no_grad():
        for conv in (head.log_cov_diag_conv, head.cov_factor_conv):
            conv.weight.zero_()
            conv.bias.zero_()
            conv.weight[:, 0] = 1.0  # log-variance = feature 0
        head.cov_factor_conv.weight[:, 0] = 1e37  # factor = 1e37 * feature 0: infinite in float32 where it is 100
    feats = torch.zeros(1, 2, 4, 4)
    feats[:, 1] = 1.0
    feats[:, 0, :, 2:] = 100.0  # log-variance 100 and an infinite factor outside the mask
    feats.requires_grad_(True)
    mask = torch.zeros(1, 4, 4, dtype=torch.bool)
    mask[:, :, :2] = True
    outside = ~mask[:, None].expand(1, 2, 4, 4)
    for p in (head.params(feats, mask), head.params_from_raw(head.raw(feats, mask))):
        assert torch.all(p.cov_diag[outside] == head.epsilon), p.cov_diag
        assert torch.all(p.cov_factor[:, 0][outside] == 0)
        assert torch.isfinite(p.cov_diag).all() and torch.isfinite(p.cov_factor).all()
    loss = SSNLoss(4)(head.distribution(feats, mask), torch.zeros(1, 4, 4, dtype=torch.long))
    assert torch.isfinite(loss)
    loss.backward()
    assert all(torch.isfinite(q.grad).all() for q in head.parameters())
    net = SSNNetwork(nn.Identity(), head, mask_fn=lambda x: mask).eval()
    with ssn_sampling(net), torch.no_grad():
        assert torch.isfinite(net(feats.detach())).all()


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="num_classes"):
        SSNHead(4, 1)
    with pytest.raises(ValueError, match="rank"):
        SSNHead(4, 2, rank=0)
    with pytest.raises(ValueError, match="spatial_dims"):
        SSNHead(4, 2, spatial_dims=4)
    with pytest.raises(ValueError, match="epsilon"):
        SSNHead(4, 2, epsilon=0.0)
    with pytest.raises(ValueError, match="input_activation"):
        SSNHead(4, 2, input_activation="gelu")
    with pytest.raises(ValueError, match="train_output"):
        SSNHead(4, 2, train_output="samples")
    head = _head(2)
    with pytest.raises(ValueError, match="features must be"):
        head(torch.randn(1, 5, 4, 4))
    with pytest.raises(ValueError, match="features must be"):
        head(torch.randn(1, 4, 4, 4, 4))
    with pytest.raises(TypeError, match="features"):
        head(np.zeros((1, 4, 4, 4)))
    with pytest.raises(ValueError, match="raw must be"):
        head.params_from_raw(torch.randn(1, 5, 4, 4))
    with pytest.raises(ValueError, match="cov_factor"):
        lowrank_distribution(torch.zeros(1, 2, 3), torch.ones(1, 2, 3), torch.zeros(1, 2, 2, 4))
    with pytest.raises(TypeError, match="SSNHead"):
        SSNNetwork(nn.Identity(), nn.Conv2d(2, 2, 1))
    with pytest.raises(ValueError, match="no SSNHead"):
        with ssn_sampling(nn.Conv2d(2, 2, 1)):
            pass


# ------------------------------------------------------------------------------------------ loss
def _brute_force_loss(samples: np.ndarray, target: np.ndarray, normalize: bool = True) -> float:
    """-(1/B) sum_b [log (1/M) sum_m prod_i softmax(eta_m)_{i, y_i}] (/ N), with explicit loops in float64."""
    m_, b_, c_ = samples.shape[:3]
    spatial = samples.shape[3:]
    total = 0.0
    for b in range(b_):
        per_sample = []
        for m in range(m_):
            s = 0.0
            for v in np.ndindex(*spatial):
                logits = [float(samples[(m, b, c, *v)]) for c in range(c_)]
                top = max(logits)
                log_norm = top + math.log(sum(math.exp(z - top) for z in logits))
                s += logits[int(target[(b, *v)])] - log_norm
            per_sample.append(s)
        top = max(per_sample)
        ll = top + math.log(sum(math.exp(s - top) for s in per_sample) / m_)
        total += ll / (math.prod(spatial) if normalize else 1.0)
    return -total / b_


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("spatial_dims, spatial", [(2, (2, 3)), (3, (2, 1, 2))])
def test_loss_equals_brute_force(spatial_dims, spatial, normalize):
    head = _head(spatial_dims, num_classes=3, rank=2)
    feats = torch.randn(2, 4, *spatial) * 2
    target = torch.randint(0, 3, (2, *spatial))
    dist = head.distribution(feats)
    torch.manual_seed(11)
    loss = SSNLoss(num_mc_samples=5, normalize=normalize)(dist, target)
    torch.manual_seed(11)
    samples = dist.rsample((5,)).reshape(5, 2, 3, *spatial)
    expected = _brute_force_loss(samples.detach().double().numpy(), target.numpy(), normalize)
    assert loss.dtype == torch.float32
    assert abs(loss.item() - expected) <= 1e-5 * max(1.0, abs(expected))
    # (B, 1, *spatial) float labels give the same value
    torch.manual_seed(11)
    assert SSNLoss(5, normalize=normalize)(dist, target[:, None].float()).item() == loss.item()


def test_loss_equals_cross_entropy_for_zero_covariance_and_one_sample():
    mean = torch.randn(3, 4, 5, 6, requires_grad=True)
    target = torch.randint(0, 4, (3, 5, 6))
    dist = lowrank_distribution(mean, torch.zeros(3, 4, 5, 6), torch.zeros(3, 2, 4, 5, 6))
    loss = SSNLoss(num_mc_samples=1)(dist, target)
    ce = F.cross_entropy(mean, target)
    torch.testing.assert_close(loss, ce)
    g1 = torch.autograd.grad(loss, mean)[0]
    g2 = torch.autograd.grad(ce, mean)[0]
    torch.testing.assert_close(g1, g2)
    # with zero covariance every draw is the mean: any M gives the same value
    torch.testing.assert_close(SSNLoss(num_mc_samples=7)(dist, target), ce)
    # summed form: N times the per-voxel one
    torch.testing.assert_close(SSNLoss(1, normalize=False)(dist, target), ce * 30)
    # a plain logit tensor (what an SSN returns in eval mode) is a point mass
    torch.testing.assert_close(SSNLoss()(mean, target[:, None]), ce)


def test_antithetic_pairs_mirror_about_the_mean():
    head = _head(2)
    dist = head.distribution(torch.randn(2, 4, 3, 3))
    loss_fn = SSNLoss(6, antithetic=True)
    torch.manual_seed(2)
    s = loss_fn._samples(dist)
    assert s.shape == (6, 2, 27)
    torch.testing.assert_close(s[:3] + s[3:], 2 * dist.loc.unsqueeze(0).expand(3, -1, -1))
    target = torch.randint(0, 3, (2, 3, 3))
    torch.manual_seed(2)
    loss = loss_fn(dist, target)
    expected = _brute_force_loss(s.reshape(6, 2, 3, 3, 3).detach().double().numpy(), target.numpy())
    assert abs(loss.item() - expected) < 1e-5 * max(1, abs(expected))
    with pytest.raises(ValueError, match="even"):
        SSNLoss(5, antithetic=True)


def test_loss_is_stable_for_large_images_and_logits():
    # per-image sums of ~-1e6: exp() of them underflows; logsumexp in float64 keeps the exact value
    b, c, n, m = 1, 2, 2**20, 4
    torch.manual_seed(0)
    samples = torch.randn(m, b, c, n) * 30
    target = torch.randint(0, c, (b, n))
    got = ssn_log_likelihood(samples, target, normalize=False)
    sums = np.array([(-F.cross_entropy(samples[i].double(), target, reduction="none")).sum().item() for i in range(m)])
    top = sums.max()
    expected = top + np.log(np.exp(sums - top).mean())
    assert np.isfinite(got.item()) and abs(got.item() - expected) <= 1e-6 * abs(expected)
    assert abs(ssn_log_likelihood(samples, target).item() - expected / n) < 1e-6


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2**31 - 1), st.floats(0.1, 20.0))
def test_loss_lies_between_the_mean_and_the_best_sample(m, seed, scale):
    """log-mean-exp of the per-sample log-likelihoods lies between their mean and their maximum."""
    g = torch.Generator().manual_seed(seed)
    samples = torch.randn(m, 2, 3, 4, 4, generator=g) * scale
    target = torch.randint(0, 3, (2, 4, 4), generator=g)
    ll = ssn_log_likelihood(samples, target)
    per = torch.stack([-F.cross_entropy(samples[i].double(), target, reduction="none").flatten(1).sum(1) / 16
                       for i in range(m)])
    assert torch.all(ll.double() >= per.mean(0) - 1e-5) and torch.all(ll.double() <= per.max(0).values + 1e-5)


def test_loss_bad_input():
    head = _head(2)
    dist = head.distribution(torch.randn(2, 4, 3, 3))
    with pytest.raises(ValueError, match="only 3 classes"):
        SSNLoss()(dist, torch.full((2, 3, 3), 3))
    with pytest.raises(ValueError, match="spatial shape"):
        SSNLoss()(dist, torch.zeros(2, 3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="batch size"):
        SSNLoss()(dist, torch.zeros(3, 3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="integer class labels"):
        SSNLoss()(dist, torch.full((2, 3, 3), 0.5))
    with pytest.raises(TypeError, match="distribution"):
        SSNLoss()("not a distribution", torch.zeros(2, 3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="num_mc_samples"):
        SSNLoss(0)
    plain = LowRankMultivariateNormal(dist.loc, dist.cov_factor, dist.cov_diag)
    with pytest.raises(ValueError, match="event size"):
        SSNLoss()(plain, torch.zeros(2, 4, 4, dtype=torch.long))
    torch.manual_seed(0)
    a = SSNLoss(3)(plain, torch.zeros(2, 3, 3, dtype=torch.long))  # stock torch distribution works too
    torch.manual_seed(0)
    assert torch.allclose(a, SSNLoss(3)(dist, torch.zeros(2, 3, 3, dtype=torch.long)))


def test_gradients_reach_all_three_heads_and_the_backbone():
    torch.manual_seed(0)
    net = SSNNetwork(UNet(2, 1, 6, channels=(4, 8), strides=(2,), num_res_units=0), SSNHead(6, 3, 4, 2)).train()
    loss = SSNLoss(4)(net(torch.randn(2, 1, 8, 8)), torch.randint(0, 3, (2, 8, 8)))
    loss.backward()
    for name in ("mean_conv", "log_cov_diag_conv", "cov_factor_conv"):
        conv = getattr(net.head, name)
        assert conv.weight.grad is not None and conv.weight.grad.abs().sum() > 0, name
        assert conv.bias.grad.abs().sum() > 0, name
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.backbone.parameters())


def test_autocast_keeps_the_distribution_and_loss_in_float32():
    torch.manual_seed(0)
    head = SSNHead(8, 3, rank=4, spatial_dims=2)
    feats = torch.randn(2, 8, 16, 16)
    target = torch.randint(0, 3, (2, 16, 16))
    torch.manual_seed(5)
    ref = SSNLoss(6)(head.distribution(feats), target)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        dist = head.distribution(feats)
        assert dist.loc.dtype == dist.cov_factor.dtype == torch.float32
        torch.manual_seed(5)
        loss = SSNLoss(6)(dist, target)
        assert dist.rsample().dtype == torch.float32
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert abs(loss.item() - ref.item()) < 0.05 * abs(ref.item())  # bf16 convolutions, float32 distribution
    loss.backward()
    assert torch.isfinite(head.cov_factor_conv.weight.grad).all()


# ------------------------------------------------------------------------------------------ network + source
class _Counting(nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.module(x)


def _ssn_net(dropout=0.0, seed=0, spatial_dims=2, rank=3):
    torch.manual_seed(seed)
    backbone = _Counting(UNet(spatial_dims, 1, 6, channels=(4, 8), strides=(2,), num_res_units=0, dropout=dropout))
    return SSNNetwork(backbone, SSNHead(6, 3, rank, spatial_dims)).eval()


def test_ssn_source_matches_explicit_draws_and_reuses_the_backbone():
    net = _ssn_net()
    x = torch.randn(2, 1, 12, 10)
    out = SSNInferer(num_samples=5, seed=3, keep_samples=True)(x, net)
    assert net.backbone.calls == 1  # one backbone pass, five latent draws
    assert out.mi_meaning == MIMeaning.ALEATORIC and out.num_samples == 5
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(3)
        params = net.head.params(net.features(x))
        probs = torch.stack([torch.softmax(lowrank_distribution(*params).logits(), 1) for _ in range(5)])
    torch.testing.assert_close(out["samples"], probs)
    torch.testing.assert_close(out["pred"], probs.mean(0))
    ee = -(probs * probs.log()).sum(2, keepdim=True).mean(0)
    torch.testing.assert_close(out["expected_entropy"], ee, rtol=1e-5, atol=1e-6)
    assert out["mutual_information"].max() > 0
    # without feature reuse: one backbone pass per draw, same draws (the backbone consumes no randomness)
    net.backbone.calls = 0
    again = SSNInferer(num_samples=5, seed=3, reuse_features=False)(x, net)
    assert net.backbone.calls == 5
    for k in ("pred", "expected_entropy", "mutual_information"):
        torch.testing.assert_close(again[k], out[k])
    # the network is left as it was: eval mode, mean logits, no cache
    assert not net.head.sampling and net._cache is None
    torch.testing.assert_close(net(x), net.head.mean_logits(net.features(x)))


def test_ssn_source_with_mc_dropout_nested_and_marginalized():
    net = _ssn_net(dropout=0.3)
    x = torch.randn(1, 1, 8, 8)
    for order in ([MCDropoutSource(3), SSNSource(4)], [SSNSource(4), MCDropoutSource(3)]):
        net.backbone.calls = 0
        out = UncertaintyInferer(order, seed=0)(x, net)
        assert net.backbone.calls == 3, order  # innermost: four latent draws per dropout mask, in either order
        assert out.num_samples == 12 and out.mi_meaning == MIMeaning.MIXED
    # full passes: both draw the masks and latents in the same order (shared passes batch the samples of the two
    # modes differently, so their streams differ; that mode is checked for exactness in tests/inferers/test_shared.py)
    full = UncertaintyInferer([MCDropoutSource(3), SSNSource(4)], seed=0, share_passes=False)(x, net)
    marg = UncertaintyInferer([MCDropoutSource(3), SSNSource(4, marginalize=True)], seed=0, share_passes=False)(x, net)
    assert marg.num_samples == 3 and marg.mi_meaning == MIMeaning.EPISTEMIC
    # same random stream: the mean prediction is the same; EE of the latent-averaged predictions is larger
    torch.testing.assert_close(marg["pred"], full["pred"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(marg["predictive_entropy"], full["predictive_entropy"], rtol=1e-5, atol=1e-6)
    assert torch.all(marg["expected_entropy"] >= full["expected_entropy"] - 1e-6)
    assert torch.all(marg["mutual_information"] <= full["mutual_information"] + 1e-6)
    assert SSNInferer(4, seed=0)(x, net).mi_meaning == MIMeaning.ALEATORIC


def test_posthoc_dropout_goes_into_the_backbone_of_an_ssn_network():
    from monai_unc.inferers import add_dropout, default_dropout_sites

    net = _ssn_net()
    plain = UNet(2, 1, 6, channels=(4, 8), strides=(2,), num_res_units=0)
    sites = default_dropout_sites(net.backbone.module)
    assert sites == default_dropout_sites(plain)
    keys = list(net.state_dict())
    assert add_dropout(net, p=0.2, after=[f"backbone.module.{n}" for n in sites])
    assert list(net.state_dict()) == keys
    ssn = SSNNetwork(UNet(2, 1, 6, channels=(4, 8), strides=(2,)), SSNHead(6, 3, 2, 2)).eval()
    assert add_dropout(ssn, p=0.2) == [f"backbone.{n}" for n in default_dropout_sites(ssn.backbone)]
    out = UncertaintyInferer([MCDropoutSource(3), SSNSource(2)], seed=0)(torch.randn(1, 1, 8, 8), ssn)
    assert out.num_samples == 6 and out["mutual_information"].max() > 0


def test_ssn_source_with_flips_reuses_per_flip():
    net = _ssn_net()
    x = torch.randn(1, 1, 8, 12)
    out = UncertaintyInferer([SSNSource(3), FlipSource((0, 1))], seed=1)(x, net)
    assert net.backbone.calls == 4 and out.num_samples == 12
    net.backbone.calls = 0
    ref = UncertaintyInferer([SSNSource(3, reuse_features=False), FlipSource((0, 1))], seed=1)(x, net)
    assert net.backbone.calls == 12
    for k in ("pred", "expected_entropy", "mutual_information"):
        torch.testing.assert_close(out[k], ref[k])


def test_ssn_source_under_sliding_windows_and_with_a_bare_head():
    net = _ssn_net(spatial_dims=3)
    x = torch.randn(1, 1, 12, 12, 8)
    whole = SSNInferer(4, seed=0)(x, net)
    one_window = SSNInferer(4, seed=0, base_inferer=SlidingWindowInferer((12, 12, 8)))(x, net)
    for k in whole:
        torch.testing.assert_close(one_window[k], whole[k])
    sw = SSNInferer(4, seed=0, base_inferer=SlidingWindowInferer((8, 8, 8), overlap=0.5, mode="gaussian"))(x, net)
    assert sw["pred"].shape == (1, 3, 12, 12, 8)
    # overlapping windows: PE = EE + MI + window disagreement (the default decomposition)
    torch.testing.assert_close(
        sw["predictive_entropy"], sw["expected_entropy"] + sw["mutual_information"] + sw["window_disagreement"]
    )
    assert sw["mutual_information"].min() >= -1e-6 and sw["mutual_information"].max() > 0
    # a head that is not in an SSNNetwork: one full pass per draw, same draws
    bare = nn.Sequential(net.backbone, net.head).eval()
    net.backbone.calls = 0
    out = SSNInferer(4, seed=0)(x, bare)
    assert net.backbone.calls == 4
    torch.testing.assert_close(out["pred"], whole["pred"])
    with pytest.raises(ValueError, match="no SSNHead"):
        SSNInferer(2)(x, UNet(3, 1, 3, channels=(4, 8), strides=(2,)))


@pytest.mark.parametrize("shape", [(9, 7), (6, 7, 5)])
def test_intensity_mask_equals_a_windowed_mean_and_box_dilation(shape):
    from scipy.ndimage import binary_dilation

    from monai_unc.networks import IntensityMask

    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (2, 2, *shape)).astype(np.float32)
    fn = IntensityMask(threshold=0.2, smooth=3, dilate=3, channel=1)
    got = fn(torch.from_numpy(x)).numpy()
    assert got.shape == (2, 1, *shape) and got.dtype == bool
    for b in range(2):
        img = x[b, 1].astype(np.float64)
        mean = np.zeros(shape)
        for v in np.ndindex(*shape):  # mean over the window clipped to the image
            sl = tuple(slice(max(i - 1, 0), i + 2) for i in v)
            mean[v] = img[sl].mean()
        ref = binary_dilation(mean > 0.2, np.ones((3,) * len(shape), bool))
        np.testing.assert_array_equal(got[b, 0], ref)
    np.testing.assert_array_equal(IntensityMask(0.2, 1, 1)(torch.from_numpy(x)).numpy()[:, 0], x[:, 0] > 0.2)
    with pytest.raises(ValueError, match="odd"):
        IntensityMask(smooth=4)
    with pytest.raises(ValueError, match="channel"):
        IntensityMask(channel=3)(torch.from_numpy(x))


def test_intensity_mask_compares_the_exact_values():
    """``box_mean(x) > threshold`` on the stored values: float32(0.3) is 0.30000001, above 0.3 (torch's ``x > 0.3``
    rounds 0.3 to float32 first and left it out)."""
    from monai_unc.networks import IntensityMask

    f32 = np.float32(0.3)
    assert float(f32) > 0.3
    x = torch.tensor([np.nextafter(f32, np.float32(0)), f32, 0.9], dtype=torch.float32).reshape(1, 1, 1, 3)
    assert IntensityMask(threshold=0.3, smooth=1, dilate=1)(x).reshape(-1).tolist() == [False, True, True]
    assert IntensityMask(threshold=0.3, smooth=1, dilate=1)(x.double()).reshape(-1).tolist() == [False, True, True]


def test_network_mask_fn_and_reload():
    torch.manual_seed(0)
    net = SSNNetwork(UNet(2, 1, 4, channels=(4, 8), strides=(2,)), SSNHead(4, 2, 2, 2), mask_fn=lambda x: x[:, 0] > 0)
    x = torch.randn(1, 1, 8, 8)
    d = net.distribution(x)
    inside = (x[:, 0] > 0).reshape(1, -1).repeat(1, 2)
    assert torch.all(d.cov_diag[~inside] == net.head.epsilon) and torch.all(d.cov_factor[~inside] == 0)
    rebuilt = SSNNetwork(UNet(2, 1, 4, channels=(4, 8), strides=(2,)), SSNHead(4, 2, 2, 2))
    rebuilt.load_state_dict(net.state_dict())
    assert {k.split(".")[0] for k in net.state_dict()} == {"backbone", "head"}
    torch.testing.assert_close(rebuilt.eval()(x), net.eval()(x))


# ------------------------------------------------------------------------------------------ training
@pytest.mark.slow
def test_training_on_the_toy_set_gives_boundary_concentrated_aleatoric_maps(tmp_path):
    from monai_unc.data import make_toy_dataset

    net, record = train_ssn(
        tmp_path / "ssn.pt", n_cases=8, shape=(32, 32), iterations=200, batch_size=4, lr=3e-3, num_mc_samples=10,
        network={"channels": [8, 16, 32], "feature_channels": 8, "rank": 5},
    )
    assert record["loss_last"] < 0.7 * record["loss_first"], (record["loss_first"], record["loss_last"])
    assert all(np.isfinite(record["losses"]))
    cases = make_toy_dataset(4, shape=(32, 32), seed=123)  # held-out cases
    x = torch.from_numpy(np.stack([c["image"] for c in cases]))
    out = SSNInferer(num_samples=16, seed=0)(x, net)
    mi = out["mutual_information"][:, 0].numpy()
    ee = out["expected_entropy"][:, 0].numpy()
    fg = np.stack([c["probs"][1] for c in cases])
    disagree = (fg > 0) & (fg < 1)  # where the raters draw different borders
    from scipy.ndimage import binary_dilation

    far = ~binary_dilation(disagree, np.ones((1, 5, 5), bool))  # agreement, 2+ voxels away from the band
    assert mi.max() > 0.1 and mi[disagree].mean() > 3 * mi[far].mean(), (mi[disagree].mean(), mi[far].mean())
    assert ee[disagree].mean() > 2 * ee[far].mean()
    lab = np.stack([c["label"] for c in cases])
    seg = out["pred"].argmax(1).numpy()
    assert 2 * ((seg == 1) & (lab == 1)).sum() / ((seg == 1).sum() + (lab == 1).sum()) > 0.8
    # the saved weights and record rebuild the same network
    import json

    rec = json.loads((tmp_path / "ssn.pt.json").read_text())
    rebuilt = build_ssn_network(**rec["network"])
    rebuilt.load_state_dict(torch.load(tmp_path / "ssn.pt", weights_only=True))
    torch.testing.assert_close(rebuilt.eval()(x), net(x))
    with pytest.raises(ValueError, match="mean_only_iterations"):
        train_ssn(iterations=5, mean_only_iterations=5)


# ------------------------------------------------------------------------------------------ bundle
@pytest.mark.slow
def test_toy_bundle_train_ssn_config(toy_bundle_trainings):
    """``train_ssn.json --iterations 2 --n_train_cases 2`` (run by the session fixture of tests/conftest.py)."""
    from monai.bundle import ConfigParser

    config = ROOT / "bundles" / "toy_uncertainty" / "configs" / "train_ssn.json"
    parser = ConfigParser()
    parser.read_config(str(config))
    net = parser.get_parsed_content("network_def")
    assert isinstance(net, SSNNetwork) and net.head.rank == 5
    net.load_state_dict(torch.load(toy_bundle_trainings["ssn"] / "model.pt", weights_only=True))
    assert len(parser.get_parsed_content("train_cases")) == 24 * 3  # one (image, rater label) pair per rater
    out = SSNInferer(num_samples=3, seed=0)(torch.randn(1, 1, 32, 32, 32), net.eval())
    assert out["pred"].shape == (1, 2, 32, 32, 32) and out.mi_meaning == MIMeaning.ALEATORIC


# ------------------------------------------------------------------------------------------ docs
def test_docs_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert blocks, "docs/ssn.md has no python example"
    for code in blocks:
        exec(compile(code, str(DOCS), "exec"), {"__name__": "__docs__"})


def test_an_empty_batch_is_refused_by_name():
    """SSNInferer and SSNLoss on an empty batch failed with "cannot reshape tensor of 0 elements"."""
    head = _head(2, num_classes=2)
    with pytest.raises(ValueError, match="SSNLoss: target is empty"):
        SSNLoss(2)(torch.zeros(0, 2, 5, 5), torch.zeros(0, 5, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="mean is empty"):
        head.distribution(torch.zeros(0, 4, 5, 5))
    net = SSNNetwork(torch.nn.Conv2d(1, 4, 1), head).eval()
    with pytest.raises(ValueError, match="SSNInferer: inputs is an empty batch"):
        SSNInferer(num_samples=2)(torch.zeros(0, 1, 5, 5), net)
    assert SSNInferer(num_samples=2, seed=0)(torch.zeros(1, 1, 5, 5), net)["pred"].shape == (1, 2, 5, 5)
