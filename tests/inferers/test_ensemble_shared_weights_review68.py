"""Ensemble members that are one network in two modules (review 68): shared parameters, copies, copied files."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch
from torch import nn

from monai_unc.inferers import EnsembleInferer, EnsembleSource


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 3, 1), nn.BatchNorm2d(3), nn.Conv2d(3, 2, 1)).eval()


def _quiet(networks) -> EnsembleSource:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return EnsembleSource(networks)


def test_a_wrapper_of_a_member_warns_as_a_member_given_twice():
    """Found by review 68: ``[net, nn.Sequential(net)]`` (the same tensors in another module) passed without a word,
    an ensemble of one network whose mutual information is 0 everywhere."""
    net, other = _net(0), _net(1)
    with pytest.warns(UserWarning, match=r"networks\[2\] shares every parameter with networks\[0\]: unless the modules "
                                         r"compute differently .*a member given twice adds no disagreement"):
        EnsembleSource([net, other, nn.Sequential(net)])
    # two modules built on the same layers, in another order of registration
    a = nn.Module()
    a.first, a.second = net[0], net[2]
    b = nn.Module()
    b.second, b.first = net[2], net[0]
    with pytest.warns(UserWarning, match=r"networks\[1\] shares every parameter with networks\[0\]"):
        EnsembleSource([a, b])
    # the MI of such a pair is 0 by construction: what the warning is about
    with pytest.warns(UserWarning, match="shares every parameter"):
        out = EnsembleInferer([net, nn.Sequential(net)])(torch.rand(1, 1, 4, 4))
    assert float(out["mutual_information"].abs().max()) == 0.0


def test_copies_of_one_state_dict_warn_and_distinct_weights_do_not():
    """Found by review 68: one state dict loaded into two modules passed (only the same module or path was caught)."""
    net, copy = _net(0), _net(1)
    copy.load_state_dict(net.state_dict())
    with pytest.warns(UserWarning, match=r"networks\[1\] holds the same weights as networks\[0\]"):
        EnsembleSource([net, copy])
    # one weight apart: distinct members
    with torch.no_grad():
        copy[2].bias[0] += 1e-6
    _quiet([net, copy])
    # equal parameters with other BatchNorm running statistics are another network
    copy.load_state_dict(net.state_dict())
    copy[1].running_mean.fill_(0.5)
    _quiet([net, copy])


def test_members_sharing_some_parameters_run_without_a_warning():
    """A shared (frozen) encoder with one head per member, a multi-head ensemble: distinct members, no warning."""
    torch.manual_seed(0)
    encoder = nn.Conv2d(1, 4, 1)
    members = [nn.Sequential(encoder, nn.ReLU(), nn.Conv2d(4, 2, 1)).eval() for _ in range(3)]
    _quiet(members)
    # a member and the same network with a head on top: not one network either
    _quiet([members[0], nn.Sequential(members[0], nn.Conv2d(2, 2, 1))])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = EnsembleInferer(members)(10 * torch.randn(1, 1, 4, 4))
    assert float(out["mutual_information"].max()) > 0


def test_members_without_comparable_weights_are_left_to_the_identity_check():
    """Lazy modules before their first call, meta modules and parameter-free modules have no values (all their data
    pointers are 0): never taken for one network; empty parameters are left out of the comparison."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's warning that lazy modules are experimental
        lazy = [nn.LazyConv2d(2, 1), nn.LazyConv2d(2, 1)]
    _quiet(lazy)
    with torch.device("meta"):
        meta = [nn.Conv2d(1, 2, 1), nn.Conv2d(1, 2, 1)]
    _quiet(meta)
    _quiet([nn.Identity(), nn.Softmax(1)])
    a, b = _net(0), _net(1)
    a.register_parameter("empty", nn.Parameter(torch.empty(0)))
    b.register_parameter("empty", nn.Parameter(torch.empty(0)))
    _quiet([a, b])
    with pytest.warns(UserWarning, match=r"networks\[1\] is networks\[0\] \(the same module\)"):
        EnsembleSource([lazy[0], lazy[0]])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: members on two devices")
def test_copies_on_different_devices_warn():
    net = _net(0)
    copy = _net(1)
    copy.load_state_dict(net.state_dict())
    with pytest.warns(UserWarning, match=r"networks\[1\] holds the same weights as networks\[0\]"):
        EnsembleSource([net, copy.cuda()])


def test_copied_checkpoint_files_warn(tmp_path):
    """Found by review 68: two paths of one file's bytes (``cp fold0.pt copy.pt``) passed; ``monai-unc infer`` refuses
    them by their sha256."""
    first, second = tmp_path / "fold0.pt", tmp_path / "fold1.pt"
    torch.save(_net(0).state_dict(), first)
    torch.save(_net(1).state_dict(), second)
    shutil.copy(first, tmp_path / "copy.pt")
    with pytest.warns(UserWarning, match=r"networks\[2\] holds the same bytes as networks\[0\]"):
        EnsembleSource([first, second, tmp_path / "copy.pt"])
    _quiet([first, second])


class _Temp(nn.Module):
    """A temperature wrapper: every parameter its network's, its output its own."""

    def __init__(self, net: nn.Module, t: float) -> None:
        super().__init__()
        self.net, self.t = net, t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) / self.t


def test_wrappers_that_compute_differently_are_not_told_they_add_no_disagreement():
    """Review 68: ``[Temp(net, 1.0), Temp(net, 2.0)]`` share every parameter and disagree; the warning said flatly
    that the pair "adds no disagreement". The same module or checkpoint given twice is still told so flatly."""
    net = _net(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = EnsembleInferer([_Temp(net, 1.0), _Temp(net, 2.0)])(torch.rand(1, 1, 4, 4))
    assert float(out["mutual_information"].max()) > 0  # they do disagree
    msgs = [str(w.message) for w in caught if "given twice" in str(w.message)]
    assert len(msgs) == 1
    assert "shares every parameter with networks[0]: unless the modules compute differently" in msgs[0]
    with pytest.warns(UserWarning) as same:
        EnsembleSource([net, net])
    said = [str(w.message) for w in same if "given twice" in str(w.message)]
    assert said == ["networks: networks[1] is networks[0] (the same module): a member given twice adds no disagreement "
                    "(its mutual information with itself is 0) and counts twice in the mean; give each member once"]
