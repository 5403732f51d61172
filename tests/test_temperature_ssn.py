"""Temperature folded into an SSN head: N(mu, D + P P^T) / t = N(mu / t, (D + P P^T) / t^2)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from monai_unc.networks import SSNHead, SSNNetwork, ssn_sampling
from monai_unc.temperature import TemperatureScaled, TemperatureScaler


def _scaler(t, mode="scalar"):
    s = TemperatureScaler(mode=mode)
    s.temperature = torch.tensor(t, dtype=torch.float64).reshape(-1)
    return s


def _net(seed=0, mask=False):
    torch.manual_seed(seed)
    head = SSNHead(3, 3, rank=2, spatial_dims=2, init_variance=None, epsilon=1e-2)
    backbone = nn.Conv2d(1, 3, 3, padding=1)
    mask_fn = (lambda x: x[:, :1] > 0) if mask else None
    return SSNNetwork(backbone, head, mask_fn=mask_fn).double().eval()


def _mean_cov(net, x):
    d = net.distribution(x)
    return d.loc.detach().clone(), d.covariance_matrix.detach().clone()  # torch's own D + P P^T


@pytest.mark.parametrize("mask", [False, True])
def test_folded_distribution_is_the_original_divided_by_t(mask):
    net = _net(mask=mask)
    x = torch.randn(2, 1, 3, 2, dtype=torch.float64)  # event size 3 classes x 6 voxels = 18
    mu, cov = _mean_cov(net, x)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    t = 1.7
    target = _scaler(t).fold_into(net, example_input=x, rescale_floor=True)
    assert target is net.head and net.head.epsilon == pytest.approx(1e-2 / t**2)
    mu2, cov2 = _mean_cov(net, x)
    torch.testing.assert_close(mu2, mu / t)
    torch.testing.assert_close(cov2, cov / t**2)
    # brute force on one image: D and P from the three convolutions by hand
    f = torch.relu(net.backbone(x[:1]))
    m = net.mask_fn(x[:1]).double() if mask else torch.ones(1, 1, 3, 2, dtype=torch.float64)
    var = torch.exp(net.head.log_cov_diag_conv(f)) * m + net.head.epsilon
    fac = (net.head.cov_factor_conv(f).reshape(1, 2, 3, 3, 2) * m[:, None]).reshape(2, -1).T
    torch.testing.assert_close(cov2[0], torch.diag(var.reshape(-1)) + fac @ fac.T)
    # folding 1 / t restores weights and floor
    _scaler(1 / t).fold_into(net, rescale_floor=True)
    for k, v in net.state_dict().items():
        torch.testing.assert_close(v, state[k])
    assert net.head.epsilon == pytest.approx(1e-2)


def test_folded_samples_equal_temperature_scaled_samples():
    net = _net(1)
    x = torch.randn(1, 1, 4, 4, dtype=torch.float64)
    wrapped = TemperatureScaled(net, torch.tensor([2.5]))
    with ssn_sampling(net):
        torch.manual_seed(5)
        expected = wrapped(x).detach()
    _scaler(2.5).fold_into(net, rescale_floor=True)
    with ssn_sampling(net):
        torch.manual_seed(5)
        got = net(x).detach()
    torch.testing.assert_close(got, expected)  # same draws z: mu/t + (P/t) z_R + sqrt(D/t^2) z_D


def test_vector_temperature():
    net = _net(2)
    x = torch.randn(1, 1, 2, 2, dtype=torch.float64)
    mu, cov = _mean_cov(net, x)
    _scaler([1.0, 1.0, 1.0], "vector").fold_into(net)  # t = 1 is exact without touching the floor
    torch.testing.assert_close(_mean_cov(net, x)[1], cov)
    with pytest.raises(ValueError, match="scalar temperature"):  # one floor cannot become epsilon / t_c^2
        _scaler([1.5, 0.7, 2.0], "vector").fold_into(net, rescale_floor=True)
    torch.testing.assert_close(_mean_cov(net, x)[1], cov)
    _scaler([2.0, 2.0, 2.0], "vector").fold_into(net, rescale_floor=True)  # equal t_c: as a scalar
    torch.testing.assert_close(_mean_cov(net, x)[0], mu / 2)
    torch.testing.assert_close(_mean_cov(net, x)[1], cov / 4)


def test_fold_is_refused_without_rescale_floor_and_nothing_changes():
    net = _net(3)
    x = torch.randn(1, 1, 3, 3, dtype=torch.float64)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(ValueError, match="TemperatureScaled"):
        _scaler(2.0).fold_into(net, example_input=x)
    for k, v in net.state_dict().items():
        torch.testing.assert_close(v, state[k])
    assert net.head.epsilon == 1e-2
    with pytest.raises(ValueError, match="convolution of an SSN head"):
        _scaler(2.0).fold_into(net, layer="head.cov_factor_conv")
    with pytest.raises(ValueError, match="positive"):
        net.head.fold_temperature(-1.0)
    with pytest.raises(ValueError, match="num_classes"):
        net.head.fold_temperature(torch.ones(2))


def test_calibrate_network_keeps_the_temperature_beside_an_ssn():
    from monai_unc.temperature import calibrate_network

    net = _net(4).float()
    x = torch.randn(1, 1, 6, 6)
    with torch.no_grad():
        logits = [net(x) * 3.0]  # overconfident: t > 1
    target = [torch.randint(0, 3, (1, 6, 6))]
    state, record = calibrate_network(logits, target, net, max_steps=50, example_input=x)
    assert not record["folded_into_last_layer"] and "temperature" in state  # exact: TemperatureScaled at load
