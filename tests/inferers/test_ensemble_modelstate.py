"""Checkpoint ensemble members and wrapped networks (found by hostile testing of model state).

Checkpoint members loaded into a ``torch.nn.DataParallel`` or ``torch.compile`` network failed with PyTorch's
missing-keys ``RuntimeError`` (the wrapper's keys carry ``module.`` / ``_orig_mod.``), and a checkpoint saved from a
compiled network did not load into the plain one.
"""

import pytest
import torch
from torch import nn

from monai_unc.inferers import EnsembleInferer, load_state_dict


def _net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.BatchNorm3d(4), nn.ReLU(), nn.Conv3d(4, 3, 1)).eval()


def _checkpoints(tmp_path, wrap=lambda n: n):
    paths, nets = [], []
    for i in range(2):
        net = _net(i + 1)
        net[1].running_mean.uniform_(-1, 1)
        paths.append(tmp_path / f"fold{i}.pt")
        torch.save(wrap(net).state_dict(), paths[-1])
        nets.append(net)
    return paths, nets


def _reference(nets, x):
    with torch.no_grad():
        return torch.stack([torch.softmax(n(x), 1) for n in nets]).mean(0)


@pytest.mark.parametrize("wrap", ["DataParallel", "compile"])
def test_checkpoint_members_load_into_a_wrapped_network_and_its_weights_come_back(tmp_path, wrap):
    paths, nets = _checkpoints(tmp_path)
    inner = _net()
    before = {k: v.clone() for k, v in inner.state_dict().items()}
    network = nn.DataParallel(inner) if wrap == "DataParallel" else torch.compile(inner)
    x = torch.randn(1, 1, 5, 5, 5)
    out = EnsembleInferer(paths, pred_dtype=torch.float32)(x, network)
    torch.testing.assert_close(out["pred"], _reference(nets, x))
    after = inner.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_checkpoint_saved_from_a_compiled_network_loads_into_the_plain_one(tmp_path):
    paths, nets = _checkpoints(tmp_path, wrap=torch.compile)
    assert sorted(load_state_dict(paths[0])) == sorted(nets[0].state_dict())
    x = torch.randn(1, 1, 5, 5, 5)
    out = EnsembleInferer(paths, pred_dtype=torch.float32)(x, _net())
    torch.testing.assert_close(out["pred"], _reference(nets, x))
