"""Rate-In on ``cuda_device`` (tests/inferers/test_rate_in.py on a GPU): the information losses on device tensors equal
the CPU and stay in full precision under ``torch.autocast``, the rate search runs on the device and reaches its target,
and the inferer's rates are reported on the CPU whether windows are stitched on the device or on the CPU.

Marked ``cuda``: skipped without a GPU; ``MONAI_UNC_TEST_DEVICE=cpu`` rehearses them on the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from monai_unc.inferers import (
    LOSS_NAMES,
    RateInDropout,
    RateInInferer,
    mutual_information_loss,
    relative_mse_loss,
    search_dropout_rate,
    ssim_loss,
)
from tests._device import no_tf32
from tests.inferers.test_inferers_cuda import autocast, check_maps, sw, unet

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("deterministic_cudnn")]

LOSSES = {
    "mse": relative_mse_loss,
    "ssim": lambda a, b: ssim_loss(a, b, kernel_size=5),
    "mi_gaussian": lambda a, b: mutual_information_loss(a, b, estimator="gaussian"),
    "mi_binned": lambda a, b: mutual_information_loss(a, b, estimator="binned"),
}


def features(dims: int = 3, seed: int = 0, channels: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """A CPU feature map (2 inputs, offset and scaled like activations) and a channel-dropped copy."""
    g = torch.Generator().manual_seed(seed)
    pre = torch.randn(2, channels, *([12] * dims), generator=g) * 3 + 5
    keep = (torch.rand(2, channels, *([1] * dims), generator=g) > 0.3).float()
    return pre, pre * keep


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("name", list(LOSSES))
def test_information_losses_on_device_tensors_equal_the_cpu(cuda_device, name, dims):
    """Every loss on device tensors: a float64 tensor on the device, equal to the CPU value."""
    pre, post = features(dims)
    with no_tf32():
        got = LOSSES[name](pre.to(cuda_device), post.to(cuda_device))
    assert isinstance(got, torch.Tensor) and got.device.type == cuda_device.type and got.dtype == torch.float64
    torch.testing.assert_close(got.cpu(), LOSSES[name](pre, post), atol=1e-5, rtol=1e-5)  # float32 SSIM maps


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_information_losses_stay_in_full_precision_under_autocast(cuda_device, name, dtype):
    """The search runs inside the network's forward, so inside the caller's autocast: every loss equals its value
    outside autocast (SSIM's convolutions used to run in half precision: 0.377 instead of 0.361 under bf16), also for
    half-precision feature maps (what an autocast network hands its dropout layers)."""
    pre, post = (t.to(cuda_device) for t in features())
    ref = LOSSES[name](pre, post)
    half = pre.to(dtype), post.to(dtype)
    ref_half = LOSSES[name](*half)
    with autocast(cuda_device, dtype):
        got = LOSSES[name](pre, post)
        got_half = LOSSES[name](*half)
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got_half, ref_half, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("loss", sorted(set(LOSS_NAMES) - {"mi"}) + ["mi"])
def test_rate_search_on_the_device(cuda_device, loss):
    """The controller on device tensors: every result on the device, rates in range, converged inputs within
    ``tol`` of the target, and the same seed gives the same rates inside autocast (float32 masks, full-precision
    losses)."""
    x = features(channels=32)[0].to(cuda_device)  # 32 channels: fine enough steps of the loss to reach the target

    def search():
        torch.manual_seed(0)
        if cuda_device.type == "cuda":
            torch.cuda.manual_seed_all(0)
        return search_dropout_rate(x, loss, 0.1, max_iter=20, draws=4)

    res = search()
    for t in (res.rates, res.losses, res.iterations, res.converged, res.keep):
        assert t.device.type == cuda_device.type
    assert res.rates.dtype == res.losses.dtype == torch.float64 and res.keep.dtype == x.dtype
    assert bool(((res.rates >= 0) & (res.rates <= 1)).all())
    done = res.converged
    assert bool(done.any())
    assert bool(((res.losses[done] - 0.1).abs() < 0.02).all())  # DEFAULT_TOL = 0.02
    with autocast(cuda_device, torch.bfloat16):
        again = search()
    torch.testing.assert_close(again.rates, res.rates, atol=1e-9, rtol=0)


def _probe_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(1, 16, 3, padding=1), nn.ReLU(), RateInDropout(), nn.Conv3d(16, 16, 3, padding=1),
                         RateInDropout(), nn.Conv3d(16, 2, 1)).eval()


def test_inferer_achieved_loss_near_the_target_on_the_device(cuda_device):
    """The rates found on the device: every converged layer's last measured loss is within ``tol`` of the target,
    and re-measured at each layer's input with 100 fresh channel masks the mean loss is within 0.07 of the target.
    (The dropout masks of the device differ from the CPU's; over 16 CPU seeds this re-measured error has a standard
    deviation of 0.022 and a largest value of 0.063 at ``draws=32``: the controller stops at the first noisy
    estimate within ``tol``. A search that ignored its rates, or masks that missed the features, would be off by
    about 0.1.)"""
    net = _probe_net().to(cuda_device)
    captured = {}
    for i in (2, 4):
        net[i].register_forward_pre_hook(lambda m, a, i=i: captured.setdefault(i, a[0].detach().clone()))
    x = torch.randn(1, 1, 16, 16, 16, generator=torch.Generator().manual_seed(0)).to(cuda_device)
    out = RateInInferer(num_samples=2, target_loss=0.1, draws=32, max_iter=30, seed=0)(x, net)
    check_maps(out, cuda_device)
    g = torch.Generator().manual_seed(0)
    for i in (2, 4):
        if bool(out.extras["rate_in_converged"][str(i)][0]):
            assert abs(float(out.extras["rate_in_losses"][str(i)][0]) - 0.1) < 0.02  # DEFAULT_TOL
        p = float(out.extras["rate_in_rates"][str(i)][0])
        pre = captured[i]
        masks = [(torch.rand(1, 16, 1, 1, 1, generator=g) >= p).to(cuda_device) for _ in range(100)]
        losses = [float(mutual_information_loss(pre, pre * m)[0]) for m in masks]
        assert abs(np.mean(losses) - 0.1) < 0.07, (i, p, np.mean(losses))


def test_inferer_rates_with_windows_stitched_on_the_cpu(cuda_device):
    """One search per window on the device; the per-window rates (reported on the CPU) and the maps are the same
    whether the windows are stitched on the device or on the CPU."""
    net = unet(3).to(cuda_device)
    x = torch.randn(1, 1, 16, 16, 16, generator=torch.Generator().manual_seed(1))
    split = RateInInferer(2, max_iter=5, seed=0, base_inferer=sw(3, sw_device=cuda_device,
                                                                  device=torch.device("cpu")))(x, net)
    on_dev = RateInInferer(2, max_iter=5, seed=0, base_inferer=sw(3))(x.to(cuda_device), net)
    check_maps(split, torch.device("cpu"))
    for k in split:
        torch.testing.assert_close(split[k], on_dev[k].cpu(), atol=1e-5, rtol=1e-5)
    for field in ("rate_in_rates", "rate_in_losses", "rate_in_iterations", "rate_in_converged"):
        a, b = split.extras[field], on_dev.extras[field]
        assert sorted(a) == sorted(b)
        for layer in a:
            assert a[layer].device.type == "cpu" and a[layer].shape == (8,)  # 2 x 2 x 2 windows
            torch.testing.assert_close(a[layer], b[layer])
