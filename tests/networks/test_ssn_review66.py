"""Review 66 of the SSN support: mirrored passes that are one latent draw, and the density in full precision."""

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal
from torch.distributions import LowRankMultivariateNormal

from monai_unc.networks import SSNHead, SSNNetwork, SSNParams, lowrank_distribution, mirrored_ssn_noise, ssn_sampling

MIRRORS = [c for n in range(4) for c in itertools.combinations((2, 3, 4), n)]


def _equivariant_ssn() -> SSNNetwork:
    """1x1 convolutions only: the distribution of a flipped input is the flipped distribution."""
    torch.manual_seed(0)
    return SSNNetwork(torch.nn.Conv3d(1, 4, 1), SSNHead(4, num_classes=2, rank=2, init_variance=1.0)).eval()


def _mirrored_draws(net, x, mirrored: bool, head_only: bool = False) -> list[torch.Tensor]:
    """Every mirror's pass from one random state, flipped back."""
    call = (lambda t: net.head(net.features(t))) if head_only else net
    out = []
    with ssn_sampling(net), torch.no_grad():
        state = torch.get_rng_state()
        for axes in MIRRORS:
            torch.set_rng_state(state)
            with mirrored_ssn_noise(net, axes) if mirrored else torch.no_grad():
                o = call(torch.flip(x, axes) if axes else x)
            out.append(torch.flip(o, axes) if axes else o)
    return out


@pytest.mark.parametrize("head_only", [False, True])
def test_mirrored_passes_from_one_random_state_are_one_draw(head_only):
    # found by review 66: the per-logit noise z_D was drawn in each mirror's own layout, so the flipped-back draws
    # of one sample differed and nnU-Net's mean over the 8 mirrors kept about 1/8 of the diagonal variance
    net = _equivariant_ssn()
    x = torch.rand(2, 1, 5, 4, 3)  # two images: each draw's noise mirrored image by image
    draws = _mirrored_draws(net, x, mirrored=True, head_only=head_only)
    for d in draws[1:]:
        torch.testing.assert_close(d, draws[0], atol=1e-6, rtol=0)
    assert not torch.equal(draws[0], net(x))  # a draw, not the mean
    unmirrored = _mirrored_draws(net, x, mirrored=False, head_only=head_only)
    assert all(float((d - unmirrored[0]).abs().max()) > 1e-2 for d in unmirrored[1:])  # the old behaviour
    assert all(h.noise_flip == () for h in [net.head])  # restored


def test_mean_over_mirrors_keeps_the_variance_of_one_draw():
    net = _equivariant_ssn()
    x = torch.rand(1, 1, 4, 3, 2)
    with torch.no_grad():
        var = net.distribution(x).variance.reshape(1, 2, 4, 3, 2)
    ratio = {}
    for mirrored in (True, False):
        samples = torch.stack([torch.stack(_mirrored_draws(net, x, mirrored)).mean(0) for _ in range(150)])
        ratio[mirrored] = float((samples.var(0) / var).mean())
    assert 0.75 < ratio[True] < 1.25, ratio
    assert ratio[False] < 0.5, ratio  # the old behaviour: about 1/8 of D (and the factor's part, small here)


@pytest.mark.parametrize("bad", [(1,), (0, 2), (2, 2), "23", (2.0,), 2, (-1,)])
def test_mirrored_noise_axes_are_distinct_spatial_dims(bad):
    with pytest.raises(ValueError, match="axes"):
        with mirrored_ssn_noise(_equivariant_ssn(), bad):
            pass


def test_mirrored_noise_axis_beyond_the_map_and_network_without_head():
    net = _equivariant_ssn()
    with ssn_sampling(net), mirrored_ssn_noise(net, (5,)), pytest.raises(ValueError, match="axes"):
        net(torch.rand(1, 1, 3, 3, 3))
    assert net.head.noise_flip == ()
    with pytest.raises(ValueError, match="SSNHead"):
        with mirrored_ssn_noise(torch.nn.Conv3d(1, 1, 1), (2,)):
            pass


def _dense_reference(params: SSNParams) -> multivariate_normal:
    """scipy's normal with the dense covariance ``P P^T + diag(D)`` of image 0, from float64 copies."""
    mean, diag, factor = (t.double().numpy()[0] for t in params)
    w = factor.reshape(factor.shape[0], -1).T  # (C*N, R), class-major as reshape(B, -1)
    return multivariate_normal(mean.reshape(-1), w @ w.T + np.diag(diag.reshape(-1)))


@pytest.mark.parametrize("rank, scale", [(1, 1.0), (10, 1.0), (10, 10.0)])
def test_float32_density_at_the_heads_floor_equals_scipy(rank, scale):
    # found by review 66: log_prob (the stock float32 Woodbury formula) subtracted two nearly equal terms of size
    # |P|^2 / D: at D = 1e-5 (SSNHead's floor) and factor entries near 10, a draw's log-density was 1538 against 435
    g = torch.Generator().manual_seed(rank)
    params = SSNParams(torch.randn(1, 2, 8, 8, generator=g), torch.full((1, 2, 8, 8), 1e-5),
                       scale * torch.randn(1, rank, 2, 8, 8, generator=g))
    dist = lowrank_distribution(*params)
    x = lowrank_distribution(*(t.double() for t in params)).rsample((3,)).float()  # (3, 1, 128) draws
    ref = _dense_reference(params)
    got = dist.log_prob(x)
    assert got.dtype == torch.float32 and got.shape == (3, 1)
    want = ref.logpdf(x[:, 0].double().numpy())
    np.testing.assert_allclose(got[:, 0].numpy(), want, rtol=1e-6, atol=5e-3)
    np.testing.assert_allclose(float(dist.entropy()[0]), ref.entropy(), rtol=1e-6, atol=5e-3)
    np.testing.assert_allclose(dist.precision_matrix[0].double().numpy(), np.linalg.inv(ref.cov), rtol=1e-4,
                               atol=1e-4 * float(np.abs(np.linalg.inv(ref.cov)).max()))


def test_density_of_a_tiny_diagonal_equals_the_exact_value():
    """Orthogonal factor columns (disjoint supports) give the eigenvalues exactly: ``D + s_r^2 |S_r|`` on column r,
    ``D`` elsewhere. With ``D = 1e-20`` the stock float64 formula was 3.3e7 nats off (review 66)."""
    g = torch.Generator().manual_seed(0)
    c, n, rank, delta = 2, 12, 3, 1e-20
    e = c * n
    factor = torch.zeros(1, rank, c, n, dtype=torch.float64)
    support = [slice(0, 5), slice(5, 12), slice(12, 20)]  # of the class-major event (c * n)
    scales = [1.0, 0.5, 2.0]
    for r, (sl, s) in enumerate(zip(support, scales)):
        factor[0, r].view(-1)[sl] = s
    params = SSNParams(torch.randn(1, c, n, dtype=torch.float64, generator=g), torch.full((1, c, n), delta,
                       dtype=torch.float64), factor)
    dist = lowrank_distribution(*params)
    x = dist.rsample((2,))
    diff = (x - params.mean.reshape(1, -1)).numpy()[:, 0]  # (2, e)
    logdet, m = (e - rank) * math.log(delta), np.zeros(2)
    rest = diff.copy()
    for sl, s in zip(support, scales):
        k = sl.stop - sl.start
        lam = delta + s * s * k
        proj = diff[:, sl].mean(1)  # component along the unit vector 1_S / sqrt(k), over sqrt(k)
        m += proj * proj * k / lam
        rest[:, sl] -= proj[:, None]
        logdet += math.log(lam)
    m += (rest * rest).sum(1) / delta
    want = -0.5 * (e * math.log(2 * math.pi) + logdet + m)
    np.testing.assert_allclose(dist.log_prob(x)[:, 0].numpy(), want, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(float(dist.entropy()[0]), 0.5 * e * (1 + math.log(2 * math.pi)) + 0.5 * logdet,
                               rtol=1e-12)
    stock = LowRankMultivariateNormal(dist.loc, dist.cov_factor, dist.cov_diag)
    assert float((stock.log_prob(x)[:, 0] - torch.from_numpy(want)).abs().max()) > 1e3  # what it was


def test_a_positive_subnormal_variance_keeps_a_finite_entropy():
    # found by review 66: cov_diag = 1e-40 (> 0, accepted) gave an entropy of inf and a log_prob of NaN, silently
    g = torch.Generator().manual_seed(0)
    params = SSNParams(torch.zeros(1, 2, 4, 4), torch.full((1, 2, 4, 4), 1e-40), torch.randn(1, 2, 2, 4, 4,
                                                                                             generator=g))
    dist = lowrank_distribution(*params)
    w = params.cov_factor.double().reshape(2, -1).T
    want = 0.5 * 32 * (1 + math.log(2 * math.pi)) + 0.5 * (32 * math.log(float(params.cov_diag[0, 0, 0, 0])) + float(
        np.linalg.slogdet(np.eye(2) + w.numpy().T @ w.numpy() / float(params.cov_diag[0, 0, 0, 0]))[1]))
    np.testing.assert_allclose(float(dist.entropy()[0]), want, rtol=1e-6)
    assert torch.isfinite(dist.log_prob(dist.mean)).all()


def test_a_covariance_float64_cannot_factorise_is_nan_with_a_warning():
    e = 128
    factor = torch.full((1, 2, 2, 8, 8), 1e9, dtype=torch.float64)  # two equal columns: K = I + a 1 1^T, 1 + a == a
    dist = lowrank_distribution(torch.zeros(1, 2, 8, 8, dtype=torch.float64), torch.ones(1, 2, 8, 8,
                                dtype=torch.float64), factor)
    with pytest.warns(UserWarning, match="numerically singular"):
        ent = dist.entropy()
    assert torch.isnan(ent).all() and torch.isnan(dist.log_prob(torch.zeros(e, dtype=torch.float64))).all()


@pytest.mark.parametrize("scale", [1e3, 1e6])
def test_a_large_but_factorisable_covariance_keeps_its_density(scale, recwarn):
    """The rounding floor that flags a singular capacitance (the test above, whose verdict depended on the BLAS
    before) leaves a covariance with large factor entries (the capacitance's largest entry near 1e14 at scale 1e6,
    its floor 0.03 against pivots of at least 1) its density: log_prob of a draw equals the stock float64
    ``LowRankMultivariateNormal``'s (the densest matrix scipy refuses as singular here), no warning."""
    g = torch.Generator().manual_seed(3)
    factor = torch.randn(1, 2, 2, 3, 3, generator=g, dtype=torch.float64) * scale  # rank 2, 2 classes, 3 x 3
    diag = torch.rand(1, 2, 3, 3, generator=g, dtype=torch.float64) + 0.5
    mean = torch.zeros(1, 2, 3, 3, dtype=torch.float64)
    dist = lowrank_distribution(mean, diag, factor)
    w, d = dist.cov_factor[0], dist.cov_diag[0]  # (18, 2), (18,)
    x = w @ torch.randn(2, generator=g, dtype=torch.float64) + d.sqrt() * torch.randn(18, generator=g,
                                                                                        dtype=torch.float64)
    want = LowRankMultivariateNormal(torch.zeros(18, dtype=torch.float64), w, d).log_prob(x)
    assert float(dist.log_prob(x)[0]) == pytest.approx(float(want), rel=1e-9, abs=1e-3)
    assert math.isfinite(float(dist.entropy()[0]))
    assert not [w for w in recwarn if "singular" in str(w.message)]


def test_a_capacitance_with_one_huge_entry_is_not_singular():
    """Found by review: a rounding floor of ``R eps max K_jj`` for every pivot called ``K = diag(6.4e16, 1)`` (one
    rank column of huge factor entries against the head's floor ``D = 1e-5``, the other unused) numerically singular,
    though its factorisation is exact: log_prob and entropy NaN. Each pivot is held against its own ``K_jj``."""
    factor = torch.zeros(1, 2, 2, 2, 2, dtype=torch.float64)  # (B, R, C, 2, 2)
    factor[0, 0, 0] = 4e5  # rank 0 moves class 0 (K_00 = 4 x 1.6e16); rank 1 is unused
    diag = torch.full((1, 2, 2, 2), 1e-5, dtype=torch.float64)
    dist = lowrank_distribution(torch.zeros(1, 2, 2, 2, dtype=torch.float64), diag, factor)
    w, d = dist.cov_factor[0], dist.cov_diag[0]
    x = torch.linspace(-0.01, 0.01, 8, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "numerically singular"
        got = float(dist.log_prob(x)[0])
        ent = float(dist.entropy()[0])
    stock = LowRankMultivariateNormal(torch.zeros(8, dtype=torch.float64), w, d)
    assert got == pytest.approx(float(stock.log_prob(x)), rel=1e-6)
    assert ent == pytest.approx(float(stock.entropy()), rel=1e-9)


def test_log_prob_keeps_its_gradient_and_broadcasts_the_value():
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(2, 2, 3, 3, generator=g, requires_grad=True)
    factor = torch.zeros(2, 2, 2, 3, 3, requires_grad=True)  # SSNHead starts with a zero factor
    diag = torch.full((2, 2, 3, 3), 0.5)
    dist = lowrank_distribution(mean, diag, factor)
    x = torch.randn(4, 2, 18, generator=g)
    lp = dist.log_prob(x)
    stock = LowRankMultivariateNormal(dist.loc, dist.cov_factor, dist.cov_diag).log_prob(x)
    torch.testing.assert_close(lp, stock, rtol=1e-5, atol=1e-4)
    lp.sum().backward()
    assert torch.isfinite(mean.grad).all() and torch.isfinite(factor.grad).all()
    assert dist.log_prob(x[0, 0]).shape == (2,)  # one value for every image
