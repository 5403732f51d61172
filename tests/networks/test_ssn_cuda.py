"""Stochastic Segmentation Networks on ``cuda_device`` (tests/networks/test_ssn.py on a GPU): the head's distribution
and its draws on the device (equal to the stock low-rank normal for the same random state, the covariance of many
draws), the loss and its gradients, both under ``torch.autocast``, and the SSN sample source alone and in products,
whole volume and with windows stitched on the CPU.

Marked ``cuda``: skipped without a GPU; ``MONAI_UNC_TEST_DEVICE=cpu`` rehearses them on the CPU.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from monai.networks.nets import UNet
from torch import nn
from torch.distributions import LowRankMultivariateNormal

from monai_unc.inferers import FlipSource, MCDropoutSource, SSNInferer, SSNSource, UncertaintyInferer
from monai_unc.keys import MIMeaning
from monai_unc.networks import SSNHead, SSNLoss, SSNNetwork, lowrank_distribution
from tests._device import no_tf32
from tests.inferers.test_inferers_cuda import ATOL, RTOL, autocast, check_maps, sw

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("one_torch_thread", "deterministic_cudnn")]


def head(dims: int = 2, num_classes: int = 3, rank: int = 2, seed: int = 0) -> SSNHead:
    """A head with PyTorch's random initialisation of all three convolutions (a non-trivial covariance)."""
    torch.manual_seed(seed)
    return SSNHead(4, num_classes, rank=rank, spatial_dims=dims, init_variance=None)


def feats(shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Counting(nn.Module):
    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module, self.calls = module, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.module(x)


def ssn_net(dims: int, dropout: float = 0.0, seed: int = 0) -> SSNNetwork:
    torch.manual_seed(seed)
    backbone = Counting(UNet(dims, 1, 6, channels=(4, 8), strides=(2,), num_res_units=0, dropout=dropout))
    return SSNNetwork(backbone, SSNHead(6, 3, 3, dims)).eval()


def image(dims: int, batch: int = 1) -> torch.Tensor:
    return feats((batch, 1, *([16] * dims)), seed=1)


# ------------------------------------------------------------------------------------------------ distribution
@pytest.mark.parametrize("dims", [2, 3])
def test_distribution_on_the_device_equals_the_cpu(cuda_device, dims):
    """Mean, diagonal and factor on the device in float32, equal to the CPU's; draws on the device."""
    h = head(dims)
    f = feats((2, 4, *([6] * dims)))
    with no_tf32():
        dist = copy.deepcopy(h).to(cuda_device).distribution(f.to(cuda_device))
    ref = h.distribution(f)
    for name in ("loc", "cov_diag", "cov_factor"):
        got = getattr(dist, name)
        assert got.device.type == cuda_device.type and got.dtype == torch.float32, name
        torch.testing.assert_close(got.cpu(), getattr(ref, name), atol=ATOL, rtol=RTOL)
    draws = dist.rsample((3,))
    assert draws.device.type == cuda_device.type and draws.shape == (3, 2, 3 * 6**dims)
    assert dist.logits((2,)).shape == (2, 2, 3, *([6] * dims))


def test_rsample_equals_the_stock_lowrank_normal_for_the_same_random_state(cuda_device):
    """The draws use the device's generator exactly as torch's LowRankMultivariateNormal does."""
    dist = copy.deepcopy(head(3, rank=4)).to(cuda_device).distribution(feats((2, 4, 3, 2, 2)).to(cuda_device))
    ref = LowRankMultivariateNormal(dist.loc, dist.cov_factor, dist.cov_diag)
    for shape in ((), (5,)):
        torch.manual_seed(7)
        a = dist.rsample(shape)
        torch.manual_seed(7)
        b = ref.rsample(shape)
        torch.testing.assert_close(a, b)
    torch.manual_seed(3)
    rows = torch.stack(list(dist.iter_rsample(4, antithetic=True)))
    torch.manual_seed(3)
    full = dist.rsample((2,))
    torch.testing.assert_close(rows, torch.cat([full, 2 * dist.loc - full]))


def test_sample_covariance_of_many_draws_on_the_device(cuda_device):
    """200 000 draws on the device: the sample covariance is D + P P^T and the mean the loc, within 5 standard
    errors."""
    h = copy.deepcopy(head(2, num_classes=2, rank=3, seed=3)).to(cuda_device)
    with torch.no_grad():
        dist = h.distribution(feats((1, 4, 2, 2)).to(cuda_device))
        torch.manual_seed(0)
        n = 200_000
        x = dist.rsample((n,))[:, 0].double().cpu()  # (n, 8)
        cov = (torch.diag_embed(dist.cov_diag[0]) + dist.cov_factor[0] @ dist.cov_factor[0].T).double().cpu().numpy()
        loc = dist.loc[0].double().cpu().numpy()
    emp = torch.cov(x.T).numpy()
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    assert np.all(np.abs(emp - cov) < 5 * se), np.abs(emp - cov).max()
    np.testing.assert_allclose(x.mean(0).numpy(), loc, atol=5 * np.sqrt(cov.diagonal().max() / n))


# ------------------------------------------------------------------------------------------------ loss
def test_loss_on_the_device_equals_cross_entropy_for_zero_covariance(cuda_device):
    """A point mass: the loss and its gradient are cross-entropy's, on the device."""
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(3, 4, 5, 6, generator=g).to(cuda_device).requires_grad_(True)
    target = torch.randint(0, 4, (3, 5, 6), generator=g).to(cuda_device)
    dist = lowrank_distribution(mean, torch.zeros(3, 4, 5, 6, device=cuda_device),
                                torch.zeros(3, 2, 4, 5, 6, device=cuda_device))
    loss = SSNLoss(num_mc_samples=3)(dist, target)
    ce = F.cross_entropy(mean, target)
    assert loss.device.type == cuda_device.type
    torch.testing.assert_close(loss, ce)
    torch.testing.assert_close(torch.autograd.grad(loss, mean)[0], torch.autograd.grad(ce, mean)[0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_loss_under_autocast_stays_float32_on_the_device(cuda_device, dtype):
    """Half-precision convolutions, float32 distribution and loss (within 5 % of the float32 loss for the same
    draws), finite gradients through all three heads."""
    h = copy.deepcopy(head(2, rank=4)).to(cuda_device)
    f = feats((2, 4, 16, 16)).to(cuda_device)
    target = torch.randint(0, 3, (2, 16, 16), generator=torch.Generator().manual_seed(1)).to(cuda_device)
    torch.manual_seed(5)
    ref = SSNLoss(6)(h.distribution(f), target)
    with autocast(cuda_device, dtype):
        dist = h.distribution(f)
        assert dist.loc.dtype == dist.cov_factor.dtype == dist.cov_diag.dtype == torch.float32
        torch.manual_seed(5)
        loss = SSNLoss(6)(dist, target)
        assert dist.rsample().dtype == torch.float32
    assert loss.dtype == torch.float32 and bool(torch.isfinite(loss)) and loss.device.type == cuda_device.type
    assert abs(loss.item() - ref.item()) < 0.05 * abs(ref.item())
    loss.backward()
    for conv in (h.mean_conv, h.log_cov_diag_conv, h.cov_factor_conv):
        assert bool(torch.isfinite(conv.weight.grad).all())


# ------------------------------------------------------------------------------------------------ sample source
@pytest.mark.parametrize("dims", [2, 3])
def test_ssn_inferer_on_the_device(cuda_device, dims):
    """Latent draws on the device: maps on the device, aleatoric MI > 0, one backbone pass for all draws, bitwise
    the same maps for the same seed."""
    net = ssn_net(dims).to(cuda_device)
    x = image(dims, batch=2).to(cuda_device)
    out = SSNInferer(4, seed=3)(x, net)
    check_maps(out, cuda_device)
    assert out.num_samples == 4 and out.mi_meaning == MIMeaning.ALEATORIC
    assert float(out["mutual_information"].max()) > 0
    net.backbone.calls = 0
    again = SSNInferer(4, seed=3)(x, net)
    assert net.backbone.calls == 1
    for k in out:
        assert torch.equal(out[k], again[k]), k


@pytest.mark.parametrize("dims", [2, 3])
def test_ssn_products_with_windows_stitched_on_the_cpu(cuda_device, dims):
    """SSN draws x MC dropout x flips, and the marginalised source, under windows on the device stitched on the CPU:
    maps on the CPU, equal to stitching on the device with the same seed."""
    net = ssn_net(dims, dropout=0.2).to(cuda_device)
    x = image(dims)
    for sources, n, meaning in ((lambda: [MCDropoutSource(2), SSNSource(2), FlipSource((0,))], 8, MIMeaning.MIXED),
                                (lambda: [MCDropoutSource(2), SSNSource(3, marginalize=True)], 2,
                                 MIMeaning.EPISTEMIC)):
        split = UncertaintyInferer(sources(), seed=0, base_inferer=sw(dims, sw_device=cuda_device,
                                                                       device=torch.device("cpu")))(x, net)
        on_dev = UncertaintyInferer(sources(), seed=0, base_inferer=sw(dims))(x.to(cuda_device), net)
        check_maps(split, torch.device("cpu"))
        assert split.num_samples == n and split.mi_meaning == meaning
        for k in split:
            torch.testing.assert_close(split[k], on_dev[k].cpu(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_ssn_inferer_under_autocast(cuda_device, dtype):
    """Half-precision backbone, float32 distribution and maps: PE = EE + MI, and the mean prediction within 0.1 of
    the float32 run for the same draws."""
    net = ssn_net(3).to(cuda_device)
    x = image(3).to(cuda_device)
    ref = SSNInferer(4, seed=0)(x, net)
    with autocast(cuda_device, dtype):
        out = SSNInferer(4, seed=0)(x, net)
    check_maps(out, cuda_device)
    torch.testing.assert_close(out["pred"], ref["pred"], atol=0.1, rtol=0)
