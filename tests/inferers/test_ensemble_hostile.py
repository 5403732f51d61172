"""Hostile input for ensembles: how members are given, members that disagree on classes, checkpoint templates."""

import os

import pytest
import torch
from torch import nn

from monai_unc.inferers import EnsembleInferer, EnsembleSource


def test_one_path_is_not_a_list_of_its_characters(tmp_path):
    # was "networks[0]: checkpoint file not found: f"
    path = tmp_path / "fold0.pt"
    torch.save(nn.Conv2d(1, 2, 1).state_dict(), path)
    for one in (str(path), path, os.fsencode(path)):
        with pytest.raises(TypeError, match="sequence of ensemble members"):
            EnsembleInferer(one)


def test_one_sequential_is_not_a_list_of_its_layers():
    # nn.Sequential is iterable: its layers became the members, each run on the input
    net = nn.Sequential(nn.Conv2d(1, 2, 1), nn.Conv2d(2, 2, 1))
    with pytest.raises(TypeError, match="got one Sequential"):
        EnsembleSource(net)


def test_module_list_tuple_and_generator_are_lists_of_members():
    torch.manual_seed(0)
    a, b = nn.Conv2d(1, 2, 1), nn.Conv2d(1, 2, 1)
    x = torch.rand(1, 1, 4, 4)
    ref = EnsembleInferer([a, b])(x)["pred"]
    for members in (nn.ModuleList([a, b]), (a, b), iter([a, b])):
        assert torch.equal(EnsembleInferer(members)(x)["pred"], ref)


def test_mutual_information_of_two_members_matches_direct_evaluation():
    torch.manual_seed(0)
    a, b = nn.Conv2d(1, 3, 1), nn.Conv2d(1, 3, 1)
    x = torch.rand(1, 1, 5, 5)
    out = EnsembleInferer([a, b])(x)
    pa, pb = torch.softmax(a(x), 1), torch.softmax(b(x), 1)

    def h(p):
        return -(p * p.log()).sum(1, keepdim=True)

    assert torch.allclose(out["mutual_information"], h((pa + pb) / 2) - (h(pa) + h(pb)) / 2, atol=1e-6)


def test_members_with_different_class_counts_are_refused():
    with pytest.raises(ValueError, match="cannot merge"):
        EnsembleInferer([nn.Conv2d(1, 2, 1), nn.Conv2d(1, 3, 1)])(torch.rand(1, 1, 4, 4))


def test_template_weights_are_restored_after_a_failing_member(tmp_path):
    template = nn.Conv2d(1, 2, 1)
    before = {k: v.clone() for k, v in template.state_dict().items()}
    good, bad = tmp_path / "good.pt", tmp_path / "bad.pt"
    torch.save(nn.Conv2d(1, 2, 1).state_dict(), good)
    torch.save(nn.Conv2d(1, 3, 1).state_dict(), bad)
    with pytest.raises(RuntimeError, match="size mismatch"):
        EnsembleInferer([good, bad])(torch.rand(1, 1, 4, 4), template)
    assert all(torch.equal(before[k], v) for k, v in template.state_dict().items())


@pytest.mark.parametrize("path", ["ensemble", "softmax"])
def test_members_left_in_training_mode_warn_once_and_keep_their_modes(path):
    # a member in train mode normalised with batch statistics (updating its running ones) and sampled dropout,
    # silently; the inferer leaves modes as they are, so it warns, naming the member and the kind of layer
    import warnings

    from monai_unc.inferers import SoftmaxInferer

    def net():
        return nn.Sequential(nn.Conv2d(1, 3, 1), nn.BatchNorm2d(3), nn.Dropout(0.5), nn.Conv2d(3, 2, 1)).eval()

    members = [net(), net().train(), net()]
    members[2][2].train()  # dropout only
    inferer = EnsembleInferer(members) if path == "ensemble" else SoftmaxInferer()
    call = (lambda: inferer(torch.rand(1, 1, 4, 4))) if path == "ensemble" else (
        lambda: inferer(torch.rand(1, 1, 4, 4), members[1]))
    match = (r"ensemble member 1 is in training mode, with BatchNorm2d, Dropout; ensemble member 2 .* with Dropout\."
             if path == "ensemble" else r"SoftmaxInferer: the network is in training mode, with BatchNorm2d, Dropout")
    with pytest.warns(UserWarning, match=match):
        call()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call()  # once per inferer
        EnsembleInferer([net(), net()])(torch.rand(1, 1, 4, 4))  # members in eval mode: no warning
    assert [m.training for m in members[1].modules()] == [True] * 5 and members[2][2].training


def test_a_member_of_another_dtype_is_named_before_any_member_runs():
    """Found by hostile testing: a float64 member among float32 ones failed inside its first convolution with
    PyTorch's ``Input type (float) and bias type (double) should be the same``, naming neither the ensemble nor the
    member. Members are not converted (a float64 member cast to float32 and back would lose precision): the member
    is named before any runs."""
    torch.manual_seed(0)
    calls = []

    def make():
        net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.Conv3d(4, 3, 1)).eval()
        net.register_forward_hook(lambda *_: calls.append(1))
        return net

    x = torch.randn(1, 1, 6, 7, 8)
    with pytest.raises(ValueError, match=r"networks\[2\] \(ensemble member 2\) has torch.float64 parameters but the "
                                         r"input is torch.float32"):
        EnsembleInferer([make(), make(), make().double()])(x)
    assert not calls
    with pytest.raises(ValueError, match=r"networks\[0\].*torch.float32 parameters but the input is torch.float64"):
        EnsembleInferer([make(), make().double()])(x.double())
    out = EnsembleInferer([make().double(), make().double()])(x.double())  # one dtype throughout: fine
    assert out["pred"].dtype == torch.float64
