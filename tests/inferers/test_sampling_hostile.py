"""Hostile input to the inferers (``monai_unc.inferers.sampling``): every case fails with one ValueError naming the
argument (each was silently accepted before: a missing batch axis read as a batch, stacked deep-supervision heads
softmaxed as classes). The measure helpers and TTA noise: ``tests/test_measures_hostile.py``,
``tests/inferers/test_tta_hostile.py``."""

from __future__ import annotations

import math

import pytest
import torch
from monai.inferers import SlidingWindowInferer
from monai.networks.nets import DynUNet
from torch import nn

from monai_unc.inferers import MCDropoutInferer, SoftmaxInferer, UncertaintyInferer
from monai_unc.inferers.sampling import check_inputs, network_spatial_dims


def _net3d() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv3d(1, 3, 3, padding=1), nn.Dropout(0.3)).eval()


def test_missing_batch_axis_is_refused_not_read_as_a_batch():
    """The issue's reproduction: a (C, X, Y, Z) volume used to run with the channel axis taken as the batch and
    gave a predictive entropy above log 3."""
    with pytest.raises(ValueError, match=r"inputs.*batch axis"):
        MCDropoutInferer(num_samples=2)(torch.randn(1, 16, 16, 16), _net3d())
    out = MCDropoutInferer(num_samples=2)(torch.randn(1, 1, 16, 16, 16), _net3d())  # with the batch axis: fine
    assert float(out["predictive_entropy"].max()) <= math.log(3) + 1e-6


@pytest.mark.parametrize("shape", [(1, 1, 4, 4, 4, 4), (1, 1)])
def test_wrong_number_of_axes_is_refused(shape):
    with pytest.raises(ValueError, match="inputs"):
        MCDropoutInferer(num_samples=2)(torch.randn(*shape), _net3d())


def test_integer_inputs_are_refused():
    with pytest.raises(ValueError, match="inputs must be a floating-point"):
        MCDropoutInferer(num_samples=2)(torch.ones(1, 1, 8, 8, 8, dtype=torch.int64), _net3d())


def test_roi_with_the_wrong_number_of_axes_is_refused_up_front():
    inferer = SoftmaxInferer(base_inferer=SlidingWindowInferer((8, 8)))
    with pytest.raises(ValueError, match="roi_size"):
        inferer(torch.randn(1, 1, 8, 8, 8), _net3d())


def test_network_spatial_dims():
    assert network_spatial_dims(_net3d()) == 3
    assert network_spatial_dims(nn.Conv2d(1, 2, 3)) == 2
    assert network_spatial_dims(nn.Sequential(nn.Conv2d(1, 2, 1), nn.Conv3d(2, 2, 1))) is None  # mixed: unknown
    assert network_spatial_dims(lambda x: x) is None
    check_inputs(torch.randn(2, 1, 8, 8), lambda x: x)  # plain callables are not second-guessed


def test_stacked_deep_supervision_output_is_refused():
    """DynUNet(deep_supervision=True) in train mode returns (B, heads, C, *spatial): it used to be softmaxed over
    the heads axis and a 6-D pred came back."""
    net = DynUNet(3, 1, 3, kernel_size=[3, 3, 3], strides=[1, 2, 2], upsample_kernel_size=[2, 2],
                  deep_supervision=True, deep_supr_num=1).train()
    x = torch.randn(1, 1, 16, 16, 16)
    assert net(x).ndim == 6
    with pytest.raises(ValueError, match="deep-supervision"):
        UncertaintyInferer([], no_grad=True)(x, net)
    out = UncertaintyInferer([], no_grad=True)(x, net.eval())  # eval mode: one full-resolution head
    assert out["pred"].shape == (1, 3, 16, 16, 16)


def test_a_single_source_needs_no_list_and_bad_sources_are_named():
    from monai_unc.inferers import MCDropoutSource

    x = torch.randn(1, 1, 8, 8, 8)
    one = UncertaintyInferer(MCDropoutSource(2), seed=0)(x, _net3d())
    listed = UncertaintyInferer([MCDropoutSource(2)], seed=0)(x, _net3d())
    assert one.num_samples == 2
    torch.testing.assert_close(one["mutual_information"], listed["mutual_information"])
    with pytest.raises(TypeError, match="sources must be SampleSource"):
        UncertaintyInferer([object()])


def test_unknown_keys_list_the_valid_ones():
    with pytest.raises(ValueError, match=r"keys: unknown output name\(s\) \['foo'\]; valid: \['pred'"):
        UncertaintyInferer([], keys=["foo"])


def test_no_grad_false_outputs_are_documented_as_not_differentiable():
    """Found by hostile testing: ``no_grad=False`` reads as if the maps could be differentiated, but every sample
    enters the statistics detached (in-place running sums), so no output requires grad. The behaviour stays; the
    option's documentation says so."""
    torch.manual_seed(0)
    net = nn.Conv3d(1, 3, 3, padding=1)
    x = torch.randn(1, 1, 6, 7, 8, requires_grad=True)
    out = UncertaintyInferer(no_grad=False)(x, net)
    assert not any(v.requires_grad for v in out.values())
    doc = " ".join(UncertaintyInferer.__doc__.split())
    assert "the outputs are never differentiable" in doc and "enter the statistics detached" in doc


@pytest.mark.parametrize("share_passes", [False, True])
@pytest.mark.parametrize("base", [None, SlidingWindowInferer((4, 4, 4), overlap=0.5)])
def test_no_grad_false_kept_samples_hold_no_autograd_graph(base, share_passes):
    """Found by hostile testing: with ``no_grad=False`` and ``keep_samples=True`` the returned ``samples`` required
    grad (against the documentation) and each sample held its pass's autograd graph, every activation of the
    network, until the output was freed."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv3d(1, 4, 3, padding=1), nn.Dropout3d(0.3), nn.Conv3d(4, 3, 1)).eval()
    x = torch.rand(1, 1, 6, 6, 6)
    out = MCDropoutInferer(3, no_grad=False, keep_samples=True, base_inferer=base, share_passes=share_passes,
                           sample_batch_size=2, seed=0)(x, net)
    assert [k for k, v in out.items() if v.requires_grad or v.grad_fn is not None] == []
    assert out["samples"].shape == (3, 1, 3, 6, 6, 6)
    ref = MCDropoutInferer(3, keep_samples=True, base_inferer=base, share_passes=share_passes, sample_batch_size=2,
                           seed=0)(x, net)
    torch.testing.assert_close(out["samples"], ref["samples"])


@pytest.mark.parametrize("activation,channels", [("sigmoid", 1), ("sigmoid", 3), ("softmax", 2)])
@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_infinite_logits_are_refused_whatever_the_activation(activation, channels, value):
    """An infinite logit (a float16 network whose logits overflowed) gives probabilities of exactly 0 / 1 under a
    sigmoid, and under a softmax for -inf: the inferers accepted such outputs and returned confident maps, where
    +inf under a softmax (NaN) was refused. Found by hostile testing (precision review)."""

    class Overflowing(nn.Module):
        def forward(self, x):
            z = torch.zeros(x.shape[0], channels, *x.shape[2:], dtype=x.dtype)
            z[0, -1, 1, 2] = value
            return z

    x = torch.randn(1, 1, 6, 6)
    with pytest.raises(ValueError, match="non-finite"):
        UncertaintyInferer(activation=activation)(x, Overflowing())
    with pytest.raises(ValueError, match="non-finite"):
        UncertaintyInferer(activation=activation, base_inferer=SlidingWindowInferer((4, 4), overlap=0.5))(
            x, Overflowing())
    assert torch.isfinite(UncertaintyInferer(activation=activation)(x, lambda t: Overflowing()(t).clamp(-1e4, 1e4))[
        "predictive_entropy"]).all()


@pytest.mark.parametrize("base", [None, SlidingWindowInferer(roi_size=(4, 8, 8), sw_batch_size=1, overlap=0.25)])
def test_keys_may_name_the_kept_samples(base):
    """``keys=[..., "samples"]`` with ``keep_samples=True`` computed every sample and then raised "unknown measure
    'samples'" from derive_measures; the samples are returned, and the maps equal the measures of those samples."""
    from monai_unc import measures

    x = torch.randn(1, 1, 8, 8, 8)
    inf = MCDropoutInferer(num_samples=3, keep_samples=True, seed=0, base_inferer=base,
                           keys=["samples", "predictive_entropy", "variance"])
    out = inf(x, _net3d().float())
    assert list(out) == ["predictive_entropy", "variance", "samples"]
    assert out["samples"].shape == (3, 1, 3, 8, 8, 8)
    if base is None:  # no stitching: the maps are those of the kept samples
        s = out["samples"].double()
        torch.testing.assert_close(out["predictive_entropy"].double(), measures.predictive_entropy(s),
                                   atol=1e-6, rtol=0)
        torch.testing.assert_close(out["variance"].double(), measures.variance(s), atol=1e-6, rtol=0)


def test_keys_naming_samples_without_keep_samples_is_refused_up_front():
    with pytest.raises(ValueError, match="keys asks for 'samples' but keep_samples=False"):
        MCDropoutInferer(num_samples=2, keys=["samples", "predictive_entropy"])
