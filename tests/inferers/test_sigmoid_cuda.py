"""Region-based (multi-label sigmoid) inferers on ``cuda_device`` (tests/inferers/test_sigmoid.py on a GPU): a
BraTS-like network (4 input channels, 3 overlapping regions), per-channel Bernoulli maps against the brute force over
the kept device samples, deterministic inferers equal to the CPU, sliding windows stitched on the CPU, and autocast.

Marked ``cuda``: skipped without a GPU; ``MONAI_UNC_TEST_DEVICE=cpu`` rehearses them on the CPU.
"""

from __future__ import annotations

import copy

import pytest
import torch
from monai.networks.nets import UNet
from monai.transforms import Rotate90
from torch import nn

from monai_unc.inferers import (
    EnsembleInferer,
    FlipSource,
    InvertibleTransformSource,
    MCDropoutInferer,
    MCDropoutSource,
    RateInInferer,
    TTAInferer,
    UncertaintyInferer,
)
from tests._device import no_tf32
from tests.inferers.test_inferers_cuda import ATOL, AUTOCAST_ATOL, RTOL, SPATIAL, autocast, check_maps, sw
from tests.inferers.test_sigmoid import check

pytestmark = [pytest.mark.cuda, pytest.mark.usefixtures("deterministic_cudnn")]

REGIONS = 3  # whole tumour, tumour core, enhancing tumour
MODALITIES = 4  # T1, T1ce, T2, FLAIR


def brats_like(dims: int, dropout: float = 0.2, seed: int = 0) -> nn.Module:
    """A tiny region UNet: 4 modalities in, one logit per region out (eval mode, CPU)."""
    torch.manual_seed(seed)
    return UNet(dims, MODALITIES, REGIONS, channels=(4, 8), strides=(2,), num_res_units=1, dropout=dropout).eval()


def brats_image(dims: int, batch: int = 1) -> torch.Tensor:
    return torch.randn(batch, MODALITIES, *SPATIAL[dims], generator=torch.Generator().manual_seed(3))


#: name -> (factory (members, **options), deterministic)
SIGMOID = {
    "mcdropout": (lambda nets, **kw: MCDropoutInferer(4, **kw), False),
    "tta_inverted": (lambda nets, **kw: TTAInferer(flip_axes=(0,), transforms=[Rotate90(1, spatial_axes=(0, 1))],
                                                   **kw), True),
    "ensemble": (lambda nets, **kw: EnsembleInferer(nets, **kw), True),
    "rate_in": (lambda nets, **kw: RateInInferer(2, max_iter=3, draws=2, **kw), False),
    "product": (lambda nets, **kw: EnsembleInferer(nets, extra_sources=[MCDropoutSource(2), FlipSource((1,)),
                InvertibleTransformSource([Rotate90(1, spatial_axes=(0, 1))])], **kw), False),
}


def build(name: str, dims: int, **kw):
    factory, _ = SIGMOID[name]
    nets = [brats_like(dims, seed=s) for s in (1, 2)]
    network = None if name in ("ensemble", "product") else brats_like(dims)
    return factory(nets, activation="sigmoid", **kw), network


def on(net, device):
    return None if net is None else copy.deepcopy(net).to(device)


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("name", list(SIGMOID))
def test_region_maps_on_the_device(cuda_device, name, dims):
    """One map per region on the device, PE = EE + MI per region, the kept device samples give the maps by brute
    force, and deterministic inferers equal the CPU run."""
    x = brats_image(dims, batch=2)
    inferer, network = build(name, dims, seed=0, keep_samples=True)
    with no_tf32():
        out = inferer(x.to(cuda_device), on(network, cuda_device))
    samples = out.pop("samples")
    assert out.multilabel and samples.device.type == cuda_device.type
    check_maps(out, cuda_device)
    assert all(out[k].shape == (2, REGIONS, *SPATIAL[dims]) for k in out)
    check(out, samples.double().cpu().numpy(), atol=1e-5)
    if SIGMOID[name][1]:
        ref = build(name, dims, seed=0)[0](x, network)
        for k in ref:
            torch.testing.assert_close(out[k].cpu(), ref[k], atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("name", [n for n in SIGMOID if n != "product"])  # products under windows: test_inferers_cuda
def test_region_windows_on_the_device_stitched_on_the_cpu(cuda_device, name, dims):
    """Region maps and the per-region window disagreement come back on the CPU, equal to stitching on the device."""
    x = brats_image(dims)
    cpu = torch.device("cpu")
    with no_tf32():
        split = build(name, dims, seed=0, base_inferer=sw(dims, sw_device=cuda_device, device=cpu))[0](
            x, on(build(name, dims)[1], cuda_device))
        on_dev = build(name, dims, seed=0, base_inferer=sw(dims))[0](x.to(cuda_device),
                                                                    on(build(name, dims)[1], cuda_device))
    check_maps(split, cpu)
    check_maps(on_dev, cuda_device)
    assert split["window_disagreement"].shape == (1, REGIONS, *SPATIAL[dims])
    assert float(split["window_disagreement"].max()) > 0
    for k in split:
        torch.testing.assert_close(split[k], on_dev[k].cpu(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_region_maps_under_autocast(cuda_device, dtype):
    """Half-precision logits, float32 region maps: TTA within ``AUTOCAST_ATOL`` of the float32 run, MC dropout with
    the usual identities, and a network whose dropout has no effect gives MI = 0."""
    x = brats_image(3).to(cuda_device)
    net = brats_like(3).to(cuda_device)
    tta = TTAInferer(activation="sigmoid")
    ref = tta(x, net)
    with autocast(cuda_device, dtype):
        out = tta(x, net)
        mc = MCDropoutInferer(3, activation="sigmoid", seed=0)(x, net)
        inert = UncertaintyInferer([MCDropoutSource(3)], activation="sigmoid", seed=0)(x, _Inert(net))
    for res in (out, mc, inert):
        check_maps(res, cuda_device)
        assert res.multilabel
    for k in ref:
        torch.testing.assert_close(out[k], ref[k], atol=AUTOCAST_ATOL[dtype], rtol=0)
    assert float(inert["mutual_information"].abs().max()) <= 1e-6


class _Inert(nn.Module):
    """A dropout layer that does not change the output: MC dropout samples are all the stock prediction."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net, self.drop = net, nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.net.eval()
        y = self.net(x)
        return y + 0.0 * self.drop(y)
