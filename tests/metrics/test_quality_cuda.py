"""Label-free quality estimates (batch functions and ``StreamingQuality``) of device samples equal the CPU result.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. The hard estimates are ratios of exact
voxel counts, averaged over samples or pairs in float64 in another order on a GPU (``rtol=1e-12``); the soft ones
(expected Dice, soft volumes, their CV) sum float32 probabilities (``rtol=1e-6``).
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics.quality import (
    StreamingQuality,
    conformal_interval,
    conformal_quantile,
    dice_to_mean,
    expected_dice,
    pairwise_dice,
    sample_iou,
    volume_cv,
)

pytestmark = pytest.mark.cuda


def _samples():
    g = torch.Generator().manual_seed(12)
    logits = 3 * torch.randn(1, 2, 3, 8, 7, 6, generator=g)
    return torch.softmax(logits + torch.randn(4, 2, 3, 8, 7, 6, generator=g), dim=2)  # (S, B, C, *spatial)


def _same(got, ref, exact, device):
    for name in ref._fields:
        a, b = getattr(got, name), getattr(ref, name)
        assert a.device.type == device.type, name  # torch in, torch out on the input's device
        a, b = a.cpu().numpy(), b.cpu().numpy()
        tol = 1e-12 if exact else 1e-6  # exact counts, averaged in float64 in another order; or float32 sums
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol / 10, err_msg=name)


def test_quality_estimates_on_the_device_equal_cpu(cuda_device):
    s = _samples()
    sd = s.to(cuda_device)
    for fn in (sample_iou, pairwise_dice, dice_to_mean):
        got = fn(sd)
        assert got.foreground.device.type == cuda_device.type, fn.__name__
        _same(got, fn(s), exact=True, device=cuda_device)
    _same(volume_cv(sd), volume_cv(s), exact=True, device=cuda_device)
    _same(volume_cv(sd, soft=True), volume_cv(s, soft=True), exact=False, device=cuda_device)
    _same(expected_dice(sd[0]), expected_dice(s[0]), exact=False, device=cuda_device)


def test_streaming_quality_on_the_device_equals_cpu(cuda_device):
    s = _samples()
    ref_map = s.mean(0).argmax(1)
    got, want = StreamingQuality(reference=ref_map.to(cuda_device)), StreamingQuality(reference=ref_map)
    for p in s:
        got.update(p.to(cuda_device))
        want.update(p)
    _same(got.sample_iou(), want.sample_iou(), exact=True, device=cuda_device)
    _same(got.dice_to_reference(), want.dice_to_reference(), exact=True, device=cuda_device)
    _same(got.volume_cv(), want.volume_cv(), exact=True, device=cuda_device)
    vol = got.volumes()
    assert vol.device.type == cuda_device.type
    np.testing.assert_array_equal(vol.cpu().numpy(), want.volumes().numpy())


def test_conformal_intervals_of_device_estimates_equal_cpu(cuda_device):
    # found by the review of the GPU paths: the estimates are tensors on the input's device, and numpy.asarray
    # refused CUDA ones ("can't convert cuda:0 device type tensor to numpy")
    g = torch.Generator().manual_seed(3)
    cal_est = torch.rand(20, generator=g, dtype=torch.float64)
    cal_true = (cal_est + 0.05 * torch.randn(20, generator=g, dtype=torch.float64)).clamp(0, 1)
    est = expected_dice(_samples()[0]).foreground
    want = conformal_interval(est, cal_est, cal_true)
    dev = [t.to(cuda_device) for t in (est, cal_est, cal_true)]
    got = conformal_interval(*dev)
    np.testing.assert_array_equal(got.low, want.low)
    np.testing.assert_array_equal(got.high, want.high)
    assert conformal_quantile(dev[1], dev[2]) == conformal_quantile(cal_est, cal_true)
    # the same conversion serves estimates that require grad (numpy.asarray refuses those on any device)
    assert conformal_quantile(dev[1].clone().requires_grad_(), dev[2]) == conformal_quantile(cal_est, cal_true)
