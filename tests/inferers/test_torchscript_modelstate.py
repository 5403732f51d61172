"""TorchScript networks under MC dropout and post-hoc dropout (found by hostile testing of model state).

- ``add_dropout`` / ``add_rate_in`` on a ``torch.jit.trace`` d network registered hooks on its submodules that its
  compiled graph never calls: MC dropout then ran without any draw and returned mutual information 0 everywhere.
- a ``torch.jit.script`` ed network with ``nn.Dropout`` layers was refused as having no dropout, although its scripted
  dropout samples in training mode; a traced network's dropout (recorded in eval mode) got the same misleading message.
"""

import logging
import warnings

import pytest
import torch
from torch import nn

from monai_unc.inferers import (
    MCDropoutInferer,
    TTAInferer,
    add_dropout,
    add_rate_in,
    enable_mc_dropout,
    find_dropout_layers,
)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.ReLU(), nn.Dropout3d(0.3), nn.Conv3d(4, 3, 1)).eval()


def _compiled(how: str, net: nn.Module, x: torch.Tensor) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script / trace are deprecated in recent PyTorch
        return torch.jit.script(net) if how == "script" else torch.jit.trace(net, x)


@pytest.mark.parametrize("how", ["script", "trace"])
@pytest.mark.parametrize("add", [add_dropout, add_rate_in])
def test_post_hoc_dropout_inside_torchscript_is_refused_before_any_hook(how, add):
    x = torch.rand(1, 1, 4, 4, 4)
    net = _compiled(how, _net(), x)
    with pytest.raises(ValueError, match="'0'.*TorchScript|'0'.*script"):
        add(net, after=["0"])
    assert not any(m._forward_hooks for m in net.modules())


def test_post_hoc_dropout_inside_a_traced_submodule_is_refused_and_leaves_no_hook():
    x = torch.rand(1, 1, 4, 4, 4)
    traced = _compiled("trace", nn.Sequential(nn.Conv3d(4, 4, 1), nn.ReLU()), x[:, [0] * 4])
    net = nn.Sequential(nn.Conv3d(1, 4, 1), traced, nn.Conv3d(4, 3, 1)).eval()
    with pytest.raises(ValueError, match="'1.0'.*inside the TorchScript module '1'"):
        add_dropout(net, after=["0", "1.0"])  # the valid first site gets no hook either
    assert not any(m._forward_hooks for m in net.modules())
    # the traced submodule itself is called from Python: its hook runs
    assert add_dropout(net, p=0.5, after=["1"]) == ["1"]
    out = MCDropoutInferer(4, seed=0)(torch.randn(1, 1, 4, 4, 4) * 10, net)
    assert float(out["mutual_information"].max()) > 0


def test_scripted_dropout_samples_like_a_plain_loop_and_is_restored(caplog):
    x = torch.rand(2, 1, 4, 4, 4)
    net = _compiled("script", _net(), x)
    modules, _ = find_dropout_layers(net)
    assert len(modules) == 1 and modules[0].p == pytest.approx(0.3)
    with caplog.at_level(logging.WARNING, logger="monai_unc.inferers.sampling"):
        out = MCDropoutInferer(5, seed=0, pred_dtype=torch.float32)(x, net)
    assert "full passes instead: the network is a TorchScript module" in caplog.text
    assert all(not m.training for m in net.modules())
    # independent reference: the scripted dropout switched on by hand, five passes from the same seed
    dropout = dict(net.named_modules())["2"]
    dropout.train()
    torch.manual_seed(0)
    with torch.no_grad():
        ref = torch.stack([torch.softmax(net(x), 1) for _ in range(5)]).mean(0)
    dropout.eval()
    assert float(out["mutual_information"].max()) > 0
    torch.testing.assert_close(out["pred"], ref)


def test_traced_dropout_is_refused_by_name():
    x = torch.rand(1, 1, 4, 4, 4)
    net = _compiled("trace", _net(), x)
    with pytest.raises(ValueError, match="'2' is inside a torch.jit.trace'd module"):
        enable_mc_dropout(net)
    with pytest.raises(ValueError, match="torch.jit.trace"):
        MCDropoutInferer(3, seed=0)(x, net)
    assert all(not m.training for m in net.modules())


def test_a_scripted_network_in_training_mode_is_reported_by_its_layers_names():
    """Found by hostile testing: its ``BatchNorm`` (updating its running statistics) went unreported, and its dropout
    was reported as ``RecursiveScriptModule``."""
    x = torch.randn(1, 1, 4, 4, 4)
    net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.BatchNorm3d(4), nn.InstanceNorm3d(4), nn.Dropout3d(0.3),
                        nn.Conv3d(4, 3, 1))
    scripted = _compiled("script", net, x).train()
    with pytest.warns(UserWarning, match=r"training mode, with BatchNorm3d, Dropout3d\."):
        TTAInferer(flip_axes=[0])(x, scripted)


def test_a_traced_submodule_without_dropout_rate_does_not_block_the_python_dropout():
    """MONAI networks build ``Dropout(p=0)`` when no dropout is asked for: traced, it draws nothing in either mode."""
    x = torch.rand(1, 1, 4, 4, 4)
    torch.manual_seed(0)
    traced = _compiled("trace", nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.Dropout3d(0.0)).eval(), x)
    net = nn.Sequential(traced, nn.ReLU(), nn.Dropout3d(0.3), nn.Conv3d(4, 3, 1)).eval()
    out = MCDropoutInferer(4, seed=0)(x, net)
    assert float(out["mutual_information"].max()) > 0
    with pytest.raises(ValueError, match="'0.1' is inside a torch.jit.trace'd module"):
        enable_mc_dropout(nn.Sequential(
            _compiled("trace", nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.Dropout3d(0.2)).eval(), x),
            nn.Dropout3d(0.3), nn.Conv3d(4, 3, 1)))


@pytest.mark.parametrize("how", ["script", "trace"])
@pytest.mark.parametrize("add", [add_dropout, add_rate_in])
@pytest.mark.parametrize("wrap", [False, True], ids=["network", "dataparallel"])
def test_a_default_placement_on_a_torchscript_network_names_torchscript(how, add, wrap):
    """The default placement (``after="auto"``, Rate-In's insertion) on a scripted or traced MONAI UNet: refused as
    TorchScript, not as an unknown architecture with the advice to pass ``after=[names]``, which is then refused too
    (found by review36)."""
    from monai.networks.nets import UNet

    torch.manual_seed(0)
    x = torch.rand(1, 1, 8, 8, 8)
    net = _compiled(how, UNet(3, 1, 2, (4, 8), (2,), num_res_units=0).eval(), x)
    net = nn.DataParallel(net) if wrap else net
    with pytest.raises(ValueError, match="the network is a TorchScript module") as err:
        add(net)
    assert "pass after=" not in str(err.value)
    assert not any(m._forward_hooks for m in net.modules())
