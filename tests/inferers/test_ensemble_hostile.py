"""Hostile input for ensembles: how members are given, members that disagree on classes, checkpoint templates."""

import os
import warnings

import pytest
import torch
from monai.inferers import SlidingWindowInferer
from torch import nn

from monai_unc.inferers import EnsembleInferer, EnsembleSource, MCDropoutSource, SoftmaxInferer


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
    with pytest.raises(ValueError, match=r"ensemble member 1 \(networks\[1\]\) returns 3 class channels .* member 0 "
                                         r"returns 2 class channels"):
        EnsembleInferer([nn.Conv2d(1, 2, 1), nn.Conv2d(1, 3, 1)])(torch.rand(1, 1, 4, 4))


def test_template_weights_are_restored_after_a_failing_member(tmp_path):
    template = nn.Conv2d(1, 2, 1)
    before = {k: v.clone() for k, v in template.state_dict().items()}
    good, bad = tmp_path / "good.pt", tmp_path / "bad.pt"
    torch.save(nn.Conv2d(1, 2, 1).state_dict(), good)
    torch.save(nn.Conv2d(1, 3, 1).state_dict(), bad)
    with pytest.raises(ValueError, match=r"(?s)networks\[1\] .*size mismatch"):  # named since hostile review 60
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


# ------------------------------------------------------------------------------------------ review of the ensembles
@pytest.mark.parametrize("window", [False, True])
@pytest.mark.parametrize("other, found", [
    (lambda: nn.Conv3d(1, 3, 3, padding=0), r"3 class channels on the spatial grid \((6|4), (6|4), (6|4)\)"),
    (lambda: nn.Conv3d(1, 4, 3, padding=1), r"4 class channels on the spatial grid \(8, 8, 8\)"),
], ids=["grid", "classes"])
def test_members_disagreeing_on_the_grid_or_the_classes_are_named(other, found, window):
    """Found by hostile testing: a member whose output has another spatial size (valid padding) failed in PyTorch's
    broadcasting (``RuntimeError: The size of tensor a (8) must match the size of tensor b (6)``) and one with
    another class count with "cannot merge statistics of shape ...": neither named the member."""
    torch.manual_seed(0)
    base = SlidingWindowInferer((4, 4, 4), overlap=0.5) if window else None
    with pytest.raises(ValueError, match=r"ensemble member 1 \(networks\[1\]\) returns " + found + r" but ensemble "
                                         r"member 0 returns 3 class channels on the spatial grid \(8, 8, 8\)"):
        EnsembleInferer([nn.Conv3d(1, 3, 3, padding=1), other()], base_inferer=base)(torch.randn(1, 1, 8, 8, 8))


def test_a_member_without_dropout_under_mc_dropout_is_named():
    members = [nn.Sequential(nn.Conv3d(1, 3, 3, padding=1), nn.Dropout3d(0.2)), nn.Conv3d(1, 3, 3, padding=1)]
    with pytest.raises(ValueError, match=r"^ensemble member 1 \(networks\[1\]\): network has no dropout layer"):
        EnsembleInferer(members, extra_sources=[MCDropoutSource(2)])(torch.randn(1, 1, 6, 6, 6))


def test_a_member_that_returns_probabilities_is_not_softmaxed_again():
    """Found by hostile testing: an ensemble mixing a member that ends in logits with one that ends in ``nn.Softmax``
    ran the softmax a second time on the latter, silently (its max probability 1.0 became 0.58, the ensemble's mean
    expected entropy 0.69 instead of 0.35)."""
    torch.manual_seed(0)
    conv_a, conv_b = nn.Conv3d(1, 3, 3, padding=1), nn.Conv3d(1, 3, 3, padding=1)
    x = torch.randn(1, 1, 8, 8, 8)
    probabilities = nn.Sequential(conv_b, nn.Softmax(dim=1))
    with pytest.raises(ValueError, match=r"ensemble member 1 \(networks\[1\]\) already returns probabilities .* "
                                         r"activation='softmax' would apply a second softmax"):
        EnsembleInferer([conv_a, probabilities])(x)
    with pytest.raises(ValueError, match=r"^the network already returns probabilities"):
        SoftmaxInferer(base_inferer=SlidingWindowInferer((4, 4, 4)))(x, probabilities)
    # probabilities throughout with activation=None: the intended mean
    out = EnsembleInferer([nn.Sequential(conv_a, nn.Softmax(dim=1)), probabilities], activation=None)(x)
    with torch.no_grad():
        ref = (torch.softmax(conv_a(x), 1) + torch.softmax(conv_b(x), 1)) / 2
    torch.testing.assert_close(out["pred"], ref, atol=1e-6, rtol=0)

    class Uniform(nn.Module):  # a uniform map is left as it is by a softmax: nothing to refuse
        def forward(self, t):
            return t.new_full((t.shape[0], 2, *t.shape[2:]), 0.5)

    assert EnsembleInferer([Uniform(), nn.Conv3d(1, 2, 3, padding=1)])(x).num_samples == 2


def test_the_template_has_its_own_weights_while_a_members_error_is_alive(tmp_path):
    """Found by hostile testing: the generator that restores the template's weights was left suspended when a member
    failed, and closed only once the error was freed: while a caller held the error (a list of failed cases, Jupyter's
    ``sys.last_value``) the template predicted with checkpoint member 0's weights."""
    torch.manual_seed(0)
    template = nn.Conv3d(1, 3, 3, padding=1)
    before = {k: v.clone() for k, v in template.state_dict().items()}
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"m{i}.pt")
        torch.save(nn.Conv3d(1, 3, 3, padding=1).state_dict(), paths[-1])
    x = torch.randn(1, 1, 6, 6, 6)
    x[0, 0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite") as held:
        EnsembleInferer([str(p) for p in paths])(x, template)
    assert held.value is not None  # the error (and its traceback) is alive here
    assert all(torch.equal(before[k], v) for k, v in template.state_dict().items())


def test_a_member_given_twice_warns_naming_both(tmp_path):
    """Found by hostile testing: ``[a, a]`` or one checkpoint path given twice ran as a two-member ensemble with a
    mutual information of 0 everywhere, without a word (``monai-unc infer`` refuses it)."""
    a, b = nn.Conv2d(1, 2, 1), nn.Conv2d(1, 2, 1)
    with pytest.warns(UserWarning, match=r"networks\[2\] is networks\[0\] \(the same module\)"):
        EnsembleSource([a, b, a])
    path = tmp_path / "a.pt"
    torch.save(a.state_dict(), path)
    with pytest.warns(UserWarning, match=r"networks\[1\] is networks\[0\] \(the same checkpoint file\)"):
        EnsembleSource([str(path), tmp_path / "." / "a.pt"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EnsembleSource([a, b])  # distinct members: no warning


def test_a_member_with_nan_weights_is_named(tmp_path):
    """Found by hostile testing: one member whose training diverged (a NaN weight) failed the call with "network
    output contains non-finite values (NaN or inf) for this input", blaming the input and naming no member."""
    torch.manual_seed(0)
    good, bad = nn.Conv3d(1, 3, 3, padding=1), nn.Conv3d(1, 3, 3, padding=1)
    with torch.no_grad():
        bad.weight[0, 0, 0, 0, 0] = float("nan")
    x = torch.randn(1, 1, 6, 6, 6)
    with pytest.raises(ValueError, match=r"^ensemble member 1 \(networks\[1\]\): network output contains non-finite"):
        EnsembleInferer([good, bad])(x)
    paths = [tmp_path / "good.pt", tmp_path / "bad.pt"]
    for net, path in zip((good, bad), paths):
        torch.save(net.state_dict(), path)
    with pytest.raises(ValueError, match=r"^ensemble member 1 \(networks\[1\]: \S*bad\.pt\): network output contains"):
        EnsembleInferer([str(p) for p in paths])(x, nn.Conv3d(1, 3, 3, padding=1))
