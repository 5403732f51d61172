"""Named dropout placements on a ``torch.nn.DataParallel`` network (found by hostile testing of model state).

``add_dropout(DataParallel(UNet(...)))`` and the Rate-In inferer (which inserts Rate-In at the same placement) refused
the known architecture: "add_dropout does not know where the stages of a DataParallel are".
"""

import torch
from monai.networks.nets import UNet
from torch import nn

from monai_unc.inferers import (
    MCDropoutInferer,
    RateInInferer,
    add_dropout,
    default_dropout_sites,
    remove_dropout,
    stage_sites,
)


def _unet() -> nn.Module:
    torch.manual_seed(0)
    return UNet(3, 1, 2, (4, 8, 16), (2, 2)).eval()


def test_stages_of_a_dataparallel_network_are_those_of_its_module_under_the_wrapper_names():
    net = _unet()
    wrapped = nn.DataParallel(net)
    plain = stage_sites(net)
    assert stage_sites(wrapped) == {k: [f"module.{n}" for n in v] for k, v in plain.items()}
    assert default_dropout_sites(wrapped, "decoder") == [f"module.{n}" for n in default_dropout_sites(net, "decoder")]
    names = add_dropout(wrapped, p=0.2)
    assert names == [f"module.{n}" for n in default_dropout_sites(net)]
    modules = dict(net.named_modules())
    assert all(modules[n[len("module."):]]._forward_hooks for n in names)  # on the module's own stages
    assert remove_dropout(wrapped) == len(names)


def test_rate_in_on_a_dataparallel_network_equals_rate_in_on_its_module():
    x = torch.rand(1, 1, 16, 16, 16)
    net = _unet()
    out = RateInInferer(num_samples=3, seed=0, pred_dtype=torch.float32)(x, nn.DataParallel(net))
    ref = RateInInferer(num_samples=3, seed=0, pred_dtype=torch.float32)(x, net)
    assert sorted(out.extras["rate_in_rates"]) == sorted(f"module.{n}" for n in ref.extras["rate_in_rates"])
    torch.testing.assert_close(out["pred"], ref["pred"])
    assert not any(m._forward_hooks for m in net.modules())


def test_stages_of_a_dataparallel_of_a_compiled_network_carry_both_prefixes():
    net = _unet()
    wrapped = nn.DataParallel(torch.compile(net))
    names = add_dropout(wrapped, p=0.2, after="decoder")
    assert names == [f"module._orig_mod.{n}" for n in default_dropout_sites(net, "decoder")]
    assert remove_dropout(net) == len(names)


def test_dropout_added_through_a_dataparallel_around_a_network_compiled_before_is_drawn():
    """Found by hostile testing: the compiled graph of the earlier call ran without the hooks: MI 0 everywhere."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv3d(4, 3, 1)).eval()
    compiled = torch.compile(net)
    x = torch.randn(1, 1, 6, 6, 6)
    with torch.no_grad():
        compiled(x)  # compiled without dropout
    wrapped = nn.DataParallel(compiled)
    add_dropout(wrapped, p=0.3, after=["module._orig_mod.0"])
    out = MCDropoutInferer(4, seed=0)(x, wrapped)
    assert float(out["mutual_information"].max()) > 0
