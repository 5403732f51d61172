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
from monai_unc.inferers import EnsembleInferer, MCDropoutInferer, MCDropoutSource, RateInInferer, enable_mc_dropout

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


def _plain_unet() -> nn.Module:
    torch.manual_seed(0)
    return UNet(spatial_dims=3, in_channels=1, out_channels=3, channels=(4, 8, 8), strides=(2, 2)).eval()


def test_add_dropout_on_a_compiled_network_goes_into_its_module() -> None:
    """``add_dropout(torch.compile(net))`` found no stages of the ``OptimizedModule`` (one-line ValueError): the hooks
    go on the modules of ``net`` under its names, the compiled calls run them (also when the wrapper was called before
    the dropout was added), and the MC dropout maps equal those of the uncompiled network."""
    from monai_unc.inferers import (
        add_dropout,
        default_dropout_sites,
        find_dropout_layers,
        remove_dropout,
        resolve_dropout_sites,
        stage_sites,
    )

    net, ref_net = _plain_unet(), _plain_unet()
    x = torch.rand(1, 1, 16, 16, 16, generator=torch.Generator().manual_seed(5))
    compiled = torch.compile(net, backend="eager")
    with torch.no_grad():
        before = compiled(x)  # compiled (and cached) before any dropout exists
    assert stage_sites(compiled) == stage_sites(net)
    assert default_dropout_sites(compiled, "decoder") == default_dropout_sites(net, "decoder")
    assert resolve_dropout_sites(compiled, ["model.0"]) == ["model.0"]
    names = add_dropout(compiled, p=0.3)
    assert names == add_dropout(ref_net, p=0.3) == default_dropout_sites(net)
    assert len(find_dropout_layers(compiled)[1]) == len(find_dropout_layers(net)[1]) == len(names)
    with torch.no_grad():
        assert torch.equal(compiled(x), before)  # eval mode: the dropout is off
    ref = MCDropoutInferer(num_samples=4, seed=0, share_passes=False)(x, ref_net)
    assert float(ref["mutual_information"].max()) > 0
    _assert_same(MCDropoutInferer(num_samples=4, seed=0, share_passes=False)(x, compiled), ref)
    _assert_same(MCDropoutInferer(num_samples=4, seed=0)(x, compiled), ref)  # shared passes
    torch.manual_seed(7)
    with enable_mc_dropout(compiled), torch.no_grad():
        direct = compiled(x)  # the compiled call itself runs the hooks
    torch.manual_seed(7)
    with enable_mc_dropout(ref_net), torch.no_grad():
        assert torch.equal(direct, ref_net(x))
    assert not torch.equal(direct, before)
    assert remove_dropout(compiled) == len(names)
    assert not any(m._forward_hooks for m in net.modules())


def test_add_rate_in_on_a_compiled_network_uses_the_names_of_its_module() -> None:
    """Rate-In inserted into a compiled network that was called before: the compiled calls run the new layers (dynamo
    does not guard on hooks; without dropping the compiled code the old graph runs), and removing them is seen too."""
    from monai_unc.inferers import add_rate_in, find_rate_in_layers, remove_rate_in

    net, ref_net = _plain_unet(), _plain_unet()
    x = torch.rand(1, 1, 16, 16, 16, generator=torch.Generator().manual_seed(8))
    compiled = torch.compile(net, backend="eager")
    with torch.no_grad():
        before = compiled(x)
    names = add_rate_in(compiled, target_loss=0.1, after="decoder")
    assert names == add_rate_in(ref_net, target_loss=0.1, after="decoder") == ["model.1.submodule.2"]
    assert [n for n, _ in find_rate_in_layers(compiled)] == names

    def sample(m: nn.Module) -> torch.Tensor:
        torch.manual_seed(9)
        with enable_mc_dropout(m), torch.no_grad():
            return m(x)

    got = sample(compiled)
    assert torch.equal(got, sample(ref_net)) and not torch.equal(got, before)
    assert remove_rate_in(compiled) == len(names)
    with torch.no_grad():
        assert torch.equal(compiled(x), before)


@pytest.mark.slow
def test_add_dropout_on_a_network_compiled_by_the_default_backend() -> None:
    """The default (inductor) backend: the compiled graph runs the post-hoc dropout; the samples match the uncompiled
    network's up to the compiled kernels' rounding."""
    from monai_unc.inferers import add_dropout

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv3d(4, 3, 1)).eval()
    ref_net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv3d(4, 3, 1)).eval()
    ref_net.load_state_dict(net.state_dict())
    x = torch.rand(1, 1, 6, 6, 6, generator=torch.Generator().manual_seed(6))
    compiled = torch.compile(net)
    with torch.no_grad():
        before = compiled(x)
    assert add_dropout(compiled, p=0.3, after=["1"]) == add_dropout(ref_net, p=0.3, after=["1"]) == ["1"]

    def samples(m: nn.Module) -> torch.Tensor:
        torch.manual_seed(3)
        with enable_mc_dropout(m), torch.no_grad():
            return torch.stack([m(x) for _ in range(3)])

    got, ref = samples(compiled), samples(ref_net)
    assert not torch.allclose(got[0], before, atol=1e-3)  # dropout ran in the compiled calls
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dropout", [0.0, 0.2], ids=["insert", "convert"])
def test_rate_in_on_a_compiled_network_called_before(dropout: float) -> None:
    """A compiled network the user called before (a plain prediction first): the Rate-In layers the inferer attaches
    run in its calls, the maps equal the plain network's, and afterwards the wrapper predicts without them again
    (found by review36: the layers were attached to its module only, the stale graph never ran them, and the search
    failed with "none of the Rate-In layer(s) ran")."""
    torch.manual_seed(0)
    layers = [nn.Conv3d(1, 8, 3, padding=1), nn.Dropout3d(dropout), nn.Conv3d(8, 3, 1)]
    net = nn.Sequential(*(m for m in layers if not (isinstance(m, nn.Dropout3d) and dropout == 0))).eval()
    x = torch.rand(1, 1, 6, 6, 6, generator=torch.Generator().manual_seed(2))
    kwargs = {"num_samples": 4, "target_loss": 0.1, "seed": 0, "share_passes": False}
    if dropout == 0:
        kwargs["after"] = ["0"]
    ref = RateInInferer(**kwargs)(x, net)
    assert float(ref["mutual_information"].max()) > 0
    compiled = torch.compile(net, backend="eager")
    with torch.no_grad():
        before = compiled(x)
    _assert_same(RateInInferer(**kwargs)(x, compiled), ref)
    with torch.no_grad():
        assert torch.equal(compiled(x), before)
