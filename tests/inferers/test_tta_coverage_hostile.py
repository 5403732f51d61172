"""Hostile geometry checks of ``InvertibleTransformSource``: what the inverse of a MONAI transform gives back.

A network that is certain of the background everywhere must stay certain under TTA with transforms that drop part of
the field of view; MONAI transforms that return ``(image, affine)`` must work; the replayed samples of shared passes
must each be mapped back.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from monai.networks.nets import UNet
from monai.transforms import Affine, RandSpatialCrop, Rotate90, Zoom

from monai_unc.inferers import (
    AugmentationSource,
    InvertibleTransformSource,
    MCDropoutSource,
    TTAInferer,
    UncertaintyInferer,
)


def _threshold_net() -> torch.nn.Module:
    """Voxel-wise two-class logits ``(0, 20 (x - 0.5))``: p(background) = 0.99995 where the image is 0."""
    net = torch.nn.Conv3d(1, 2, 1)
    with torch.no_grad():
        net.weight.zero_()
        net.bias.zero_()
        net.weight[1, 0] = 20.0
        net.bias[1] = -10.0
    return net.eval()


@pytest.mark.parametrize("transform", [
    Zoom(zoom=1.2, keep_size=True),
    RandSpatialCrop(roi_size=16, random_size=False),
    Affine(translate_params=(4.0, 0.0, 0.0), padding_mode="zeros", image_only=True),
], ids=["zoom-in", "crop", "translate-zeros"])
def test_voxels_a_transform_does_not_cover_do_not_come_back_maximally_uncertain(transform):
    # found by hostile testing: the inverse padded the logits with 0 (a uniform softmax): predictive entropy log 2 on
    # up to 70 % of a volume the network is certain of (0.0005 without TTA)
    net = _threshold_net()
    x = torch.zeros(1, 1, 24, 24, 24)
    x[0, 0, 10:14, 9:13, 11:15] = 1.0  # a confident object in the middle
    plain = TTAInferer(flip_axes=())(x, net)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = TTAInferer(flip_axes=(), transforms=[transform], seed=0)(x, net)
    background = x[:, :1] == 0
    far = torch.ones_like(background)
    far[0, 0, 7:17, 6:16, 8:18] = False  # away from the object's interpolated edges
    pe = out["predictive_entropy"]
    assert float(pe[background & far].max()) <= float(plain["predictive_entropy"].max()) + 1e-4
    assert torch.allclose(out["pred"].sum(1), torch.ones(1, 24, 24, 24), atol=1e-5)
    # the object stays where it is (its edges may move by the interpolation of the transform and its inverse)
    got, want = out["pred"][0, 1] > 0.5, plain["pred"][0, 1] > 0.5
    assert 2 * int((got & want).sum()) >= 0.8 * int(got.sum() + want.sum())
    assert torch.allclose(torch.nonzero(got).float().mean(0), torch.nonzero(want).float().mean(0), atol=0.5)


def test_a_transform_returning_image_and_affine_is_inverted_like_its_image_only_form():
    # found by hostile testing: MONAI's Affine returns (image, affine) by default, which failed with
    # "'tuple' object has no attribute 'as_tensor'"
    torch.manual_seed(0)
    net = torch.nn.Conv3d(1, 3, 3, padding=1).eval()
    x = torch.rand(1, 1, 8, 10, 6)
    kw = {"rotate_params": (0.2, 0.0, 0.0), "padding_mode": "border"}
    ref = TTAInferer(flip_axes=(), transforms=[Affine(image_only=True, **kw)])(x, net)
    out = TTAInferer(flip_axes=(), transforms=[Affine(**kw)])(x, net)
    assert torch.equal(out["pred"], ref["pred"])


@pytest.mark.parametrize(("batch", "k"), [(1, 3), (2, 2)])
def test_replayed_dropout_samples_are_each_inverted(batch, k):
    # found by hostile testing: shared passes replay k samples stacked on the batch axis and only the first B rows
    # were inverted ("num_samples must be a positive divisor of the batch dimension"); a MONAI Rotate90 must give what
    # the same rotation as a (forward, inverse) pair gives
    torch.manual_seed(0)
    net = UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=(4, 8), strides=(2,), dropout=0.3).eval()
    x = torch.rand(batch, 1, 8, 12, 16)
    pair = (lambda t: torch.rot90(t, 1, (2, 3)), lambda t: torch.rot90(t, -1, (2, 3)))
    outs = []
    for source in (InvertibleTransformSource([Rotate90(k=1, spatial_axes=(0, 1))]), AugmentationSource([pair])):
        inferer = UncertaintyInferer(sources=[MCDropoutSource(6), source], seed=0, share_passes=True,
                                     sample_batch_size=k, keep_samples=True)
        outs.append(inferer(x, net))
    assert outs[0].num_samples == 6
    for key in ("pred", "mutual_information", "samples"):
        assert torch.allclose(outs[0][key], outs[1][key], atol=1e-6), key
