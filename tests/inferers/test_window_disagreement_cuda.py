"""Window disagreement on ``cuda_device`` (tests/inferers/test_window_disagreement.py on a GPU): a deterministic network
under overlapping windows gives MI = 0 exactly and all of PE - EE as window disagreement, softmax and sigmoid, with
the windows stitched on the device or on the CPU; the stitched decomposition equals the CPU's.

Marked ``cuda``: skipped without a GPU; ``MONAI_UNC_TEST_DEVICE=cpu`` rehearses them on the CPU.
"""

from __future__ import annotations

import copy

import pytest
import torch
from monai.inferers import SlidingWindowInferer
from torch import nn

from monai_unc.inferers import MCDropoutInferer, SoftmaxInferer, window_disagreement_from_stitched
from monai_unc.measures import entropy_map_t
from monai_unc.stats import SampleStats
from tests._device import no_tf32
from tests.inferers.test_inferers_cuda import ATOL, RTOL, check_maps, unet

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("deterministic_cudnn")]

DECOMP = ("predictive_entropy", "expected_entropy", "mutual_information", "window_disagreement")


class InertDropout(nn.Module):
    """A deterministic network with a dropout layer that changes nothing (MC dropout accepts it)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net, self.drop = net, nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) + 0.0 * self.drop(torch.ones(1, device=x.device)).sum()


@pytest.mark.parametrize("activation,out", [("softmax", 3), ("sigmoid", 3), ("sigmoid", 1)])
@pytest.mark.parametrize("stitch", ["device", "cpu"])
def test_deterministic_network_has_zero_mi_under_overlap_on_the_device(cuda_device, activation, out, stitch):
    """MI = 0 exactly, WD > 0, PE = EE + WD, for MC dropout and the one-pass baseline, equal to the CPU run."""
    net = unet(3, dropout=0.0, out=out)
    net_cpu = copy.deepcopy(net)  # the reference runs on the CPU (Module.to moves a network in place)
    x = torch.randn(1, 1, 12, 10, 14, generator=torch.Generator().manual_seed(0))
    place = {"sw_device": cuda_device, "device": cuda_device if stitch == "device" else torch.device("cpu")}
    home = place["device"]

    def window(**kw):
        return SlidingWindowInferer((8, 8, 8), sw_batch_size=4, overlap=0.5, mode="gaussian", **kw)

    for make in (lambda **kw: MCDropoutInferer(4, activation=activation, **kw),
                 lambda **kw: SoftmaxInferer(activation=activation, keys=["pred", *DECOMP], **kw)):
        with no_tf32():
            res = make(base_inferer=window(**place))(x, InertDropout(net).to(cuda_device))
        check_maps(res, home)
        assert float(res["mutual_information"].abs().max()) == 0  # exactly
        assert float(res["window_disagreement"].max()) > 1e-3
        ref = make(base_inferer=window())(x, InertDropout(net_cpu))
        for k in res:
            torch.testing.assert_close(res[k].cpu(), ref[k], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("activation", ["softmax", "sigmoid"])
def test_stochastic_decomposition_stitched_on_the_cpu_equals_the_device(cuda_device, activation):
    """PE = EE + MI + WD with dropout, MI and WD >= 0; the same seed stitched on the CPU gives the same maps."""
    net = unet(3, dropout=0.3).to(cuda_device)
    x = torch.randn(1, 1, 12, 10, 14, generator=torch.Generator().manual_seed(1))
    window = dict(roi_size=(8, 8, 8), sw_batch_size=4, overlap=0.5, mode="gaussian")
    split = MCDropoutInferer(4, activation=activation, seed=0, base_inferer=SlidingWindowInferer(
        **window, sw_device=cuda_device, device=torch.device("cpu")))(x, net)
    on_dev = MCDropoutInferer(4, activation=activation, seed=0, base_inferer=SlidingWindowInferer(**window))(
        x.to(cuda_device), net)
    check_maps(split, torch.device("cpu"))
    check_maps(on_dev, cuda_device)
    assert float(split["window_disagreement"].min()) >= 0 and float(split["mutual_information"].max()) > 0
    for k in split:
        torch.testing.assert_close(split[k], on_dev[k].cpu(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("multilabel", [False, True])
def test_window_disagreement_from_stitched_on_device_tensors(cuda_device, multilabel):
    """The formula on device tensors: result on the device, equal to the CPU (float64), zero for one window."""
    g = torch.Generator().manual_seed(2)
    p = torch.rand(2, 3, 6, 5, generator=g, dtype=torch.float64)
    pred = p if multilabel else p / p.sum(1, keepdim=True)
    own = entropy_map_t(pred, 1, False, multilabel)
    went = own * torch.rand(own.shape, generator=g, dtype=torch.float64)  # a blend of windows' lower entropies
    got = window_disagreement_from_stitched(pred.to(cuda_device), went.to(cuda_device), multilabel)
    assert got.device.type == cuda_device.type and got.dtype == torch.float64
    torch.testing.assert_close(got.cpu(), window_disagreement_from_stitched(pred, went, multilabel), atol=1e-12,
                               rtol=1e-12)
    # one window: the blended entropy is the entropy of the mean, evaluated as the inferers evaluate a window's
    # entropy (SampleStats.sample_entropy: the fused update's evaluation, Triton's own logarithm on CUDA, which
    # differs from torch's by a rounding: entropy_map_t here gave WD = 2e-16 on an H200)
    pred_d = pred.to(cuda_device)
    own_d = SampleStats(accum_dtype=torch.float64, validate=False, multilabel=multilabel).sample_entropy(pred_d)
    one_window = window_disagreement_from_stitched(pred_d, own_d, multilabel)
    assert float(one_window.abs().max()) == 0
