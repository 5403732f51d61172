"""Hostile review 60 of the sample sources (TTA transforms, ...): each test failed before its fix."""

from __future__ import annotations

import pytest
import torch
from monai.transforms import RandAffine, RandRotate90, Rotate, Zoom

from monai_unc.inferers import InvertibleTransformSource, MCDropoutSource, UncertaintyInferer
from monai_unc.inferers.tta import _apply_inverted


def _constant_logits_net(dtype: torch.dtype) -> torch.nn.Module:
    """A 1x1 convolution whose logits are the same at every voxel (its weight is 0): every inverted sample is exact."""
    net = torch.nn.Conv3d(1, 3, 1)
    with torch.no_grad():
        net.weight.zero_()
        net.bias.copy_(torch.tensor([2.0, -1.0, 0.5]))
    return net.to(dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("transform", [Zoom(1.3, keep_size=True), Rotate((0.3, 0.0, 0.0), padding_mode="zeros"),
                                       RandAffine(prob=1.0, rotate_range=(0.3, 0.3, 0.3), padding_mode="zeros")],
                         ids=["zoom", "rotate", "randaffine"])
def test_interpolating_transforms_keep_the_input_dtype(dtype, transform):
    """Found by hostile review 60: MONAI's interpolating transforms return float32 (their ``dtype`` default), so a
    float64 (or bfloat16) network got float32 windows and failed with PyTorch's ``Input type (float) and bias type
    (double) should be the same``, naming neither the transform nor the inferer; the network gets the transformed
    windows in the input's dtype, and every inverted sample is in the dtype of the network's output."""
    net = _constant_logits_net(dtype)
    x = torch.randn(2, 1, 9, 7, 6, dtype=dtype)
    out = UncertaintyInferer([InvertibleTransformSource([transform], num_samples=2)], seed=0, keep_samples=True)(x, net)
    ref = torch.softmax(net(x).float(), 1)
    assert out["samples"].dtype == dtype
    tol = 1e-12 if dtype == torch.float64 else 1e-2
    assert torch.allclose(out["pred"].float(), ref, atol=tol)
    assert float(out["mutual_information"].abs().max()) <= tol


@pytest.mark.parametrize("transform", [Zoom(0.8, keep_size=True), Zoom(1.25, keep_size=True)], ids=["out", "in"])
def test_zoom_inverted_for_every_shared_sample(transform):
    """Found by hostile review 60: with MC dropout's shared passes (``sample_batch_size >= 2``: ``k`` samples of an
    item stacked along the batch axis) every row was inverted with the item's one list of recorded operations, and
    ``Zoom(keep_size=True).inverse`` edits the recorded operation in place, so the second row failed with MONAI's
    ``KeyError: 'pad_info'``; each row is inverted with its own copy, as with ``sample_batch_size=1``."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 1), torch.nn.Dropout3d(0.3), torch.nn.Conv3d(8, 3, 1)).eval()
    x = torch.randn(2, 1, 9, 7, 6)
    outs = [UncertaintyInferer([MCDropoutSource(3), InvertibleTransformSource([transform])], seed=0,
                               sample_batch_size=k, keep_samples=True)(x, net) for k in (1, 3)]
    for out in outs:
        assert out.num_samples == 3
        assert torch.allclose(out["pred"].sum(1), torch.ones(2, 9, 7, 6), atol=1e-5)
    # row s B + b of a replay is inverted as the item's own prediction: the inverse is linear and the uncovered voxels
    # are filled from covered ones, so a prediction shifted by s comes back shifted by s
    plain = torch.nn.Sequential(net[0], net[2])
    back = _apply_inverted(transform, lambda t: torch.cat([plain(t) + s for s in range(3)]), x)
    one = _apply_inverted(transform, plain, x)
    assert back.shape == (6, 3, 9, 7, 6)
    for s in range(3):
        assert torch.allclose(back[s * 2:(s + 1) * 2], one + s, atol=1e-4)


def test_transformed_items_of_other_shapes_are_refused_naming_the_transform():
    """Found by hostile review 60: ``RandRotate90`` on a batch of two anisotropic images drew another rotation per item,
    and the items of other shapes failed in ``torch.stack`` (``stack expects each tensor to be equal size``), naming
    neither ``transforms`` nor the transform; a ``ValueError`` now names both and the shapes."""
    net = torch.nn.Conv3d(1, 3, 1).eval()
    x = torch.randn(2, 1, 5, 7, 6)
    source = InvertibleTransformSource([RandRotate90(prob=1.0, max_k=3)], num_samples=4)
    with pytest.raises(ValueError, match=r"transforms: RandRotate90 .*\(5, 7, 6\), \(7, 5, 6\)"):
        UncertaintyInferer([source], seed=0)(x, net)
    # one item, or items of equal shapes, as before
    assert UncertaintyInferer([source], seed=0)(x[:1], net).num_samples == 4


def test_a_checkpoint_member_that_does_not_fit_the_network_is_named(tmp_path):
    """Found by hostile review 60: a checkpoint of another architecture among an ensemble's members failed with
    PyTorch's ``Error(s) in loading state_dict for Conv3d``, naming neither the member nor its file (which of five
    folds?); a ``ValueError`` now names ``networks[i]`` and the file, and the network keeps its own weights."""
    from monai_unc.inferers import EnsembleInferer

    torch.manual_seed(0)
    net = torch.nn.Conv3d(1, 3, 1).eval()
    own = {k: v.clone() for k, v in net.state_dict().items()}
    torch.save(net.state_dict(), tmp_path / "fold0.pt")
    torch.save(torch.nn.Conv3d(1, 4, 1).state_dict(), tmp_path / "fold1.pt")
    with pytest.raises(ValueError, match=r"(?s)networks\[1\] \(.*fold1\.pt\).*size mismatch for weight"):
        EnsembleInferer([tmp_path / "fold0.pt", tmp_path / "fold1.pt"])(torch.randn(1, 1, 4, 4, 4), net)
    assert all(torch.equal(v, own[k]) for k, v in net.state_dict().items())


def test_an_augmentation_whose_inverse_misses_the_grid_is_named():
    """Found by hostile review 60: an ``(forward, inverse)`` pair whose inverse does not undo the forward's change of
    grid (a ``rot90`` of a non-square plane "inverted" by the identity) was blamed on the network ("the network
    (Conv3d) returns its output on the spatial grid (7, 5, 6) but its input is on (5, 7, 6) ... use a network whose
    output keeps its input's grid"); a ``ValueError`` now names ``augmentations[i]`` and the grids."""
    from monai_unc.inferers import AugmentationSource

    net = torch.nn.Conv3d(1, 3, 1).eval()
    x = torch.randn(1, 1, 5, 7, 6)
    good = (lambda t: torch.rot90(t, 1, (2, 3)), lambda t: torch.rot90(t, -1, (2, 3)))
    bad = (lambda t: torch.rot90(t, 1, (2, 3)), lambda t: t)
    with pytest.raises(ValueError, match=r"augmentations\[1\].*\(7, 5, 6\).*\(5, 7, 6\)"):
        UncertaintyInferer([AugmentationSource([good, bad])])(x, net)
    out = UncertaintyInferer([AugmentationSource([good])], keep_samples=True)(x, net)
    assert torch.allclose(out["pred"], torch.softmax(net(x), 1), atol=1e-6)
