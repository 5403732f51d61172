"""Hostile input for the SSN head and its distribution: bad arguments, degenerate covariances, modes, references."""

import numpy as np
import pytest
import torch
from torch import nn

from monai_unc.networks import SSNHead, SSNNetwork, SSNParams, lowrank_distribution, sample_logits, ssn_sampling


def _params(seed: int = 0, dtype=torch.float64) -> SSNParams:
    g = torch.Generator().manual_seed(seed)
    return SSNParams(
        torch.randn(1, 2, 3, 2, generator=g, dtype=dtype),
        torch.rand(1, 2, 3, 2, generator=g, dtype=dtype) + 0.1,
        torch.randn(1, 3, 2, 3, 2, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_sample_logits_counts_are_integers_from_one(bad):
    # 0 and -1 crashed in a reshape, True drew one sample, 2.5 drew two and "3" three
    with pytest.raises(ValueError, match="num_samples"):
        sample_logits(_params(), bad)


@pytest.mark.parametrize("name", ["epsilon", "init_variance"])
def test_head_variances_are_not_bools(name):
    # True was read as a variance of 1.0
    with pytest.raises(ValueError, match=name):
        SSNHead(4, 2, **{name: True})


@pytest.mark.parametrize("bad", [True, 2.0])
def test_head_spatial_dims_is_an_integer(bad):
    # True built 1D convolutions, 2.0 2D ones
    with pytest.raises(ValueError, match="spatial_dims"):
        SSNHead(4, 2, spatial_dims=bad)


@pytest.mark.parametrize("bad", [-0.5, float("nan")])
def test_negative_or_nan_variance_is_refused(bad):
    # every draw, log_prob and entropy came out NaN, silently
    mean, diag, factor = _params()
    diag = diag.clone()
    diag[0, 1, 2, 0] = bad
    with pytest.raises(ValueError, match="cov_diag"):
        lowrank_distribution(mean, diag, factor)
    with pytest.raises(ValueError, match="cov_diag"):
        sample_logits(SSNParams(mean, diag, factor))


def test_zero_variance_samples_but_has_no_density():
    mean, diag, factor = _params()
    d = lowrank_distribution(mean, torch.zeros_like(diag), factor)
    assert bool(torch.isfinite(d.rsample((3,))).all())
    # the covariance P P^T of rank 3 < 12 is singular: no density, NaN with a warning as documented (it raised
    # LinAlgError from the Cholesky factorisation of the capacitance; see ..._density_is_nan_for_every_rank)
    with pytest.warns(UserWarning, match="singular"):
        assert bool(torch.isnan(d.log_prob(d.rsample((1,)))).all())


def test_sample_covariance_is_the_low_rank_plus_diagonal_formula():
    # brute force: the empirical covariance of many draws against P P^T + diag(D), flattened class-major
    mean, diag, factor = _params()
    d = lowrank_distribution(mean, diag, factor)
    torch.manual_seed(0)
    s = d.rsample((40000,))[:, 0]
    p = factor.reshape(3, -1).T
    ref = p @ p.T + torch.diag(diag.reshape(-1))
    # sd of a sample covariance entry <= sqrt(2) max_i S_ii / sqrt(n): 5 sd
    top = float(ref.diagonal().max())
    assert torch.allclose(torch.cov(s.T), ref, rtol=0, atol=5 * 2**0.5 * top / 40000**0.5)
    assert torch.allclose(s.mean(0), mean.reshape(-1), rtol=0, atol=5 * (top / 40000) ** 0.5)
    assert torch.allclose(d.covariance_matrix[0], ref)
    full = torch.distributions.MultivariateNormal(mean.reshape(-1), ref)
    assert torch.allclose(d.log_prob(s[:5].unsqueeze(1))[:, 0], full.log_prob(s[:5]))
    assert torch.allclose(d.entropy(), full.entropy())


def test_near_singular_covariance_keeps_a_finite_density():
    # diagonal at the floor 1e-5 under a large factor: the capacitance I + P^T D^-1 P is ill-conditioned but SPD
    mean, _, factor = _params()
    d = lowrank_distribution(mean, torch.full_like(mean, 1e-5), 100 * factor)
    x = d.rsample((2,))
    assert bool(torch.isfinite(d.log_prob(x)).all()) and bool(torch.isfinite(d.entropy()).all())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_parameters_sample_in_float32(dtype):
    mean, diag, factor = (t.to(dtype) for t in _params())
    s = sample_logits(SSNParams(mean, diag, factor), 4)
    assert s.dtype == torch.float32 and s.shape == (4, 1, 2, 3, 2) and bool(torch.isfinite(s).all())


def test_same_seed_same_draws_and_successive_draws_differ():
    net = SSNNetwork(nn.Conv2d(1, 4, 3, padding=1), SSNHead(4, 2, rank=2, spatial_dims=2, init_variance=1.0)).eval()
    x = torch.rand(1, 1, 5, 5)
    with ssn_sampling(net):
        torch.manual_seed(3)
        a, b = net(x), net(x)
        torch.manual_seed(3)
        c = net(x)
    assert torch.equal(a, c) and not torch.equal(a, b)


def test_sampling_flags_are_restored_after_an_exception():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    net = SSNNetwork(nn.Sequential(nn.Conv2d(1, 4, 1), Boom()), SSNHead(4, 2, rank=1, spatial_dims=2)).eval()
    with pytest.raises(RuntimeError, match="boom"):
        with ssn_sampling(net, cache=True):
            net(torch.rand(1, 1, 3, 3))
    assert not net.head.sampling and not net._cache_enabled and not net._reuse and net._cache is None
    assert not net.training


def test_intensity_mask_threshold_is_not_a_bool():
    # True was read as threshold 1.0
    from monai_unc.networks import IntensityMask

    with pytest.raises(ValueError, match="threshold"):
        IntensityMask(threshold=True)


@pytest.mark.parametrize("bad", [True, False, torch.tensor(True), torch.tensor([True, True])])
def test_fold_temperature_of_a_bool_is_a_type_error(bad):
    """``fold_temperature(True)`` was t = 1: nothing folded, without a word."""
    head = SSNHead(4, 2, rank=2, spatial_dims=2)
    before = {k: v.clone() for k, v in head.state_dict().items()}
    with pytest.raises(TypeError, match="^temperature must be a positive number"):
        head.fold_temperature(bad)
    assert all(torch.equal(v, head.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize("bad", ["no", 0, None])
def test_non_bool_flags_of_the_head_and_the_sampling_are_type_errors(bad):
    head = SSNHead(2, 2, rank=2, spatial_dims=2)
    with pytest.raises(TypeError, match="^rescale_floor must be True or False"):
        head.fold_temperature(2.0, rescale_floor=bad)
    with pytest.raises(TypeError, match="^identity_mean must be True or False"):
        SSNHead(2, 2, rank=2, spatial_dims=2, identity_mean=bad)
    net = SSNNetwork(nn.Conv2d(1, 2, 1), head)
    with pytest.raises(TypeError, match="^cache must be True or False"):
        with ssn_sampling(net, cache=bad):
            pass
    assert not head.sampling
    with pytest.raises(TypeError, match="^antithetic must be True or False"):
        next(lowrank_distribution(*_params()).iter_rsample(2, antithetic=bad))


def test_ssn_loss_takes_a_label_map_of_a_one_slice_volume():
    """Regression: a ``(B, *spatial)`` label map with ``spatial = (1, H, W)`` lost its first spatial axis as if it
    were the channel axis, and ``SSNLoss`` refused it (distribution and point mass alike)."""
    import torch.nn.functional as F

    from monai_unc.networks import SSNLoss, lowrank_distribution

    torch.manual_seed(0)
    mean = torch.randn(2, 2, 1, 4, 4, dtype=torch.float64)
    dist = lowrank_distribution(mean, torch.ones_like(mean), torch.randn(2, 1, 2, 1, 4, 4, dtype=torch.float64))
    y = torch.randint(0, 2, (2, 1, 4, 4))  # (B, D=1, H, W): no channel axis
    ref = F.cross_entropy(mean, y)  # the point mass: per-voxel cross-entropy (brute force by torch)
    torch.testing.assert_close(SSNLoss(4)(mean, y), ref)
    torch.testing.assert_close(SSNLoss(4)(mean, y[:, None]), ref)  # (B, 1, *spatial) as before
    torch.manual_seed(1)
    a = SSNLoss(4)(dist, y)
    torch.manual_seed(1)
    b = SSNLoss(4)(dist, y[:, None])
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("which", ["mean", "cov_diag", "cov_factor"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_lowrank_distribution_refuses_non_finite_parameters(which, bad):
    """Regression: a NaN or infinite mean, an infinite variance or a NaN factor gave non-finite draws silently."""
    params = {"mean": torch.zeros(1, 2, 3, 3), "cov_diag": torch.ones(1, 2, 3, 3),
              "cov_factor": torch.ones(1, 1, 2, 3, 3)}
    params[which][0, 0, 0] = bad
    match = "cov_diag must hold variances >= 0" if which == "cov_diag" and bad != bad else f"{which} must be finite"
    with pytest.raises(ValueError, match=match):
        lowrank_distribution(**params)
    with pytest.raises(ValueError, match=match):
        sample_logits(SSNParams(**params))


def test_a_zero_variance_density_is_nan_with_a_warning():
    """Regression: with a zero in cov_diag (allowed for sampling) entropy and log_prob were NaN without a word."""
    torch.manual_seed(0)
    m = torch.zeros(1, 2, 3, 3)
    d = lowrank_distribution(m, torch.zeros_like(m), torch.randn(1, 1, 2, 3, 3))
    x = d.rsample((2,))
    assert torch.isfinite(x).all()
    with pytest.warns(UserWarning, match="singular"):
        assert torch.isnan(d.entropy()).all()
    assert torch.isnan(d.log_prob(x)).all()


def test_numpy_integer_settings_are_integers():
    """Found by hostile testing: ``SSNLoss(np.int64(4))`` and ``SSNHead(np.int64(4), 2)`` were refused with
    "num_mc_samples must be an integer >= 1, got np.int64(4)" (the losses of monai_unc.losses take numpy scalars)."""
    from monai_unc.networks import IntensityMask, SSNLoss

    assert SSNLoss(np.int64(4), antithetic=True).num_mc_samples == 4
    assert type(SSNLoss(np.int32(2)).num_mc_samples) is int
    head = SSNHead(np.int64(4), np.int64(2), rank=np.int16(3), spatial_dims=2)
    assert (head.in_channels, head.num_classes, head.rank) == (4, 2, 3)
    assert type(head.rank) is int
    assert head.eval()(torch.zeros(1, 4, 3, 3)).shape == (1, 2, 3, 3)
    assert sample_logits(_params(), np.int64(3)).shape[0] == 3
    mask = IntensityMask(smooth=np.int64(3), dilate=np.int64(1), channel=np.int64(0))
    assert (mask.smooth, mask.dilate, mask.channel) == (3, 1, 0)
    for bad in (np.int64(0), np.bool_(True), 2.0, "4"):  # still refused, naming the argument
        with pytest.raises(ValueError, match="num_mc_samples"):
            SSNLoss(bad)


def test_raw_training_output_carries_the_mask_of_the_network():
    """Found by hostile testing: with ``train_output="raw"`` an :class:`SSNNetwork`'s ``mask_fn`` was dropped, so
    ``distribution_from_raw`` trained the covariance everywhere (variance 1 outside the mask) while the draws at
    inference masked it (variance ``epsilon``)."""
    from monai_unc.networks import IntensityMask, SSNLoss

    torch.manual_seed(0)
    x = torch.rand(2, 1, 8, 8)
    x[..., :2, :] = 0
    mask_fn = IntensityMask(threshold=0.3, smooth=1, dilate=1)
    head = SSNHead(4, 2, rank=2, spatial_dims=2, init_variance=1.0, train_output="raw")
    net = SSNNetwork(nn.Conv2d(1, 4, 3, padding=1), head, mask_fn=mask_fn).train()
    raw = net(x)
    head.train_output = "distribution"
    ref = net(x)  # the distribution path masks
    outside = ~mask_fn(x).expand(2, 2, 8, 8).reshape(2, -1)
    assert bool(outside.any())
    torch.testing.assert_close(ref.cov_diag[outside], torch.full_like(ref.cov_diag[outside], head.epsilon))
    for mask in (None, mask_fn(x)):  # giving the mask again changes nothing
        d = head.distribution_from_raw(raw, mask)
        for a, b in ((d.loc, ref.loc), (d.cov_diag, ref.cov_diag), (d.cov_factor, ref.cov_factor)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    loss = SSNLoss(4)(head.distribution_from_raw(raw), (x[:, 0] > 0.5).long())
    loss.backward()
    assert all(bool(torch.isfinite(p.grad).all()) for p in net.parameters())
    # the head alone: raw(features, mask) is what the forward returns
    feats = torch.randn(2, 4, 8, 8)
    head.train_output = "raw"
    torch.testing.assert_close(head(feats, mask_fn(x)), head.raw(feats, mask_fn(x)))
    assert torch.equal(head.raw(feats), head(feats))


def test_numpy_float_and_integer_settings_of_the_head_and_the_mask():
    """Found by hostile testing: ``SSNHead(..., spatial_dims=np.int64(2))``, ``epsilon=np.float32(1e-5)``,
    ``init_variance=np.float32(1e-3)`` and ``IntensityMask(threshold=np.float32(0.3))`` were refused as "must be a
    positive float" (values read from a config or an array are numpy scalars)."""
    from monai_unc.networks import IntensityMask

    head = SSNHead(4, 2, rank=2, spatial_dims=np.int64(2), epsilon=np.float32(1e-4), init_variance=np.float32(0.5))
    assert (head.spatial_dims, type(head.spatial_dims)) == (2, int)
    assert type(head.epsilon) is float and head.epsilon == pytest.approx(1e-4)
    assert type(head.init_variance) is float
    torch.testing.assert_close(head.log_cov_diag_conv.bias, torch.full((2,), float(np.log(np.float32(0.5)))))
    assert head.eval()(torch.zeros(1, 4, 3, 3)).shape == (1, 2, 3, 3)
    assert IntensityMask(threshold=np.float32(0.25)).threshold == 0.25
    for name, bad in (("epsilon", np.float32("nan")), ("epsilon", np.float64(0)), ("init_variance", np.bool_(True)),
                      ("spatial_dims", np.bool_(True)), ("spatial_dims", np.float64(2.0))):
        with pytest.raises(ValueError, match=name):
            SSNHead(4, 2, **{name: bad})
    with pytest.raises(ValueError, match="threshold"):
        IntensityMask(threshold=np.float32("inf"))


@pytest.mark.parametrize("which", [0, 1, 2])
def test_parameters_must_be_real_tensors(which):
    """Found by hostile testing: a numpy parameter failed with ``AttributeError: 'numpy.ndarray' object has no
    attribute 'numel'`` and a complex mean drew complex "logits" without a word."""
    names = ("mean", "cov_diag", "cov_factor")
    params = list(_params(dtype=torch.float32))
    as_numpy = list(params)
    as_numpy[which] = params[which].numpy()
    with pytest.raises(TypeError, match=f"{names[which]} must be a torch.Tensor"):
        lowrank_distribution(*as_numpy)
    complex_ = list(params)
    complex_[which] = params[which].to(torch.complex64)
    with pytest.raises(TypeError, match=f"{names[which]} must be real"):
        sample_logits(SSNParams(*complex_))
    assert sample_logits(SSNParams(*params)).dtype == torch.float32


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "4"])
def test_iter_rsample_counts_are_integers_from_one(bad):
    """Found by hostile testing: ``iter_rsample(2.5)`` drew 2 samples, ``iter_rsample(True)`` one and
    ``iter_rsample(0)`` none (a log-mean-exp over no draw)."""
    d = lowrank_distribution(*_params())
    with pytest.raises(ValueError, match="num_samples"):
        list(d.iter_rsample(bad))
    assert len(list(d.iter_rsample(np.int64(3)))) == 3


def test_density_and_covariance_stay_in_full_precision_under_autocast():
    """Found by hostile testing: only ``rsample`` and the capacitance matrix ran outside ``torch.autocast``, so
    ``log_prob`` (its Mahalanobis term), ``covariance_matrix``, ``precision_matrix`` and ``scale_tril`` were computed
    from bfloat16 / float16 matrix products: on a 2 x 24^3 logit map of rank 10 ``log_prob`` was 86 nats off under
    CPU bfloat16 autocast (float32 outside: within 2 nats of float64), the covariance 0.06 off; and the lazily cached
    matrices kept those values after the block."""
    g = torch.Generator().manual_seed(0)
    mean, fac = torch.randn(1, 2, 6, 5, generator=g), 0.3 * torch.randn(1, 4, 2, 6, 5, generator=g)
    diag = 0.1 * torch.rand(1, 2, 6, 5, generator=g) + 1e-3
    ref = lowrank_distribution(mean, diag, fac)
    x = ref.rsample((3,))
    dist = lowrank_distribution(mean, diag, fac)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = {"log_prob": dist.log_prob(x), "covariance_matrix": dist.covariance_matrix,
               "precision_matrix": dist.precision_matrix, "scale_tril": dist.scale_tril}
    for name, value in got.items():
        want = ref.log_prob(x) if name == "log_prob" else getattr(ref, name)
        assert value.dtype == torch.float32, name
        torch.testing.assert_close(value, want, rtol=1e-5, atol=1e-4, msg=name)


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_a_zero_variance_density_is_nan_for_every_rank(rank):
    """Found by hostile testing: the documented "log_prob / entropy / precision_matrix are NaN with a UserWarning" for
    zeros in cov_diag held for rank 1 only; from rank 2 the capacitance matrix held inf - inf = NaN and its Cholesky
    factorisation raised ``LinAlgError`` (not positive-definite) after the warning. Images without zeros keep their
    density."""
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(2, 2, 3, 3, generator=g)
    diag = torch.rand(2, 2, 3, 3, generator=g) + 0.1
    diag[0, 1, 2, 0] = 0.0
    fac = torch.randn(2, rank, 2, 3, 3, generator=g)
    d = lowrank_distribution(mean, diag, fac)
    x = d.rsample((3,))
    assert torch.isfinite(x).all()
    with pytest.warns(UserWarning, match="singular"):
        entropy = d.entropy()
    lp, prec = d.log_prob(x), d.precision_matrix
    assert torch.isnan(entropy[0]) and torch.isnan(lp[:, 0]).all() and torch.isnan(prec[0]).all()
    ref = lowrank_distribution(mean[1:], diag[1:], fac[1:])
    torch.testing.assert_close(entropy[1:], ref.entropy())
    torch.testing.assert_close(lp[:, 1:], ref.log_prob(x[:, 1:]))
    torch.testing.assert_close(prec[1:], ref.precision_matrix)
