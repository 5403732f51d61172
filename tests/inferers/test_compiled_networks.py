"""Networks compiled with ``torch.compile`` (as MONAI users do, or through ``SupervisedEvaluator(compile=True)``) in the
inferers with shared passes: the same maps as the uncompiled network (the ``eager`` backend keeps the random stream),
never dynamo's internal error."""

from __future__ import annotations

import pytest
import torch
from monai.data import DataLoader, Dataset
from monai.networks.nets import UNet
from torch import nn

from monai_unc.engines import UncertaintyEvaluator
from monai_unc.inferers import EnsembleInferer, MCDropoutInferer, MCDropoutSource, RateInInferer

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile not available")


def _unet(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return UNet(spatial_dims=3, in_channels=1, out_channels=3, channels=(4, 8), strides=(2,), dropout=0.3).eval()


def _assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_mc_dropout_on_a_compiled_network_equals_the_plain_network() -> None:
    net = _unet()
    x = torch.rand(1, 1, 16, 16, 16, generator=torch.Generator().manual_seed(1))
    ref = MCDropoutInferer(num_samples=6, seed=0)(x, net)
    assert float(ref["mutual_information"].max()) > 0
    _assert_same(MCDropoutInferer(num_samples=6, seed=0)(x, torch.compile(net, backend="eager")), ref)


def test_rate_in_and_ensemble_members_compiled() -> None:
    net = nn.Sequential(nn.Conv3d(1, 8, 3, padding=1), nn.Dropout3d(0.2), nn.Conv3d(8, 3, 1)).eval()
    x = torch.rand(1, 1, 6, 6, 6, generator=torch.Generator().manual_seed(2))
    ref = RateInInferer(num_samples=5, target_loss=0.1, seed=0)(x, net)
    got = RateInInferer(num_samples=5, target_loss=0.1, seed=0)(x, torch.compile(net, backend="eager"))
    _assert_same(got, ref)
    members = [_unet(0), _unet(1)]
    ref = EnsembleInferer(members, seed=0, extra_sources=[MCDropoutSource(3)])(x, None)
    compiled = [torch.compile(m, backend="eager") for m in members]
    _assert_same(EnsembleInferer(compiled, seed=0, extra_sources=[MCDropoutSource(3)])(x, None), ref)


def test_uncertainty_evaluator_with_monai_compile_option() -> None:
    net = _unet()
    image = torch.rand(1, 16, 16, 16, generator=torch.Generator().manual_seed(3))
    ref = MCDropoutInferer(num_samples=4, seed=0)(image[None], net)
    loader = DataLoader(Dataset([{"image": image, "label": torch.zeros(1, 16, 16, 16, dtype=torch.long)}]))
    evaluator = UncertaintyEvaluator(device=torch.device("cpu"), val_data_loader=loader, network=net,
                                     inferer=MCDropoutInferer(num_samples=4, seed=0), compile=True,
                                     compile_kwargs={"backend": "eager"})
    evaluator.run()
    mi = evaluator.state.output[0]["mutual_information"]
    assert torch.equal(torch.as_tensor(mi), ref["mutual_information"][0])


def test_rate_in_layer_names_of_a_compiled_network_are_those_of_its_module() -> None:
    """``after=`` names and the keys of ``rate_in_rates`` are the user's module names, not ``_orig_mod.<name>``."""
    net = nn.Sequential(nn.Conv3d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv3d(8, 8, 3, padding=1), nn.Dropout3d(0.2),
                        nn.Conv3d(8, 3, 1)).eval()
    x = torch.rand(1, 1, 6, 6, 6, generator=torch.Generator().manual_seed(4))
    compiled = torch.compile(net, backend="eager")
    for kwargs in ({}, {"placement": "insert", "after": ["1"]}):
        ref = RateInInferer(num_samples=4, seed=0, share_passes=False, **kwargs)(x, net)
        got = RateInInferer(num_samples=4, seed=0, share_passes=False, **kwargs)(x, compiled)
        assert list(got.extras["rate_in_rates"]) == list(ref.extras["rate_in_rates"]) == [kwargs.get("after", ["3"])[0]]
        _assert_same(got, ref)
    assert not any(m._forward_hooks for m in net.modules())  # the inserted layers are removed again
