"""Hostile geometry checks of the inferers and the evaluator with MetaTensor inputs (independent references).

The network's output is a known function of the voxel position (a coordinate map), so an augmentation that is not
undone, or undone on the wrong axis, shows in every voxel.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from monai.data import MetaTensor
from monai.transforms import Flip, Orientation, Rotate90, Spacing

from monai_unc.inferers import InvertibleTransformSource, TTAInferer, UncertaintyInferer


class _CoordinateNet(torch.nn.Module):
    """Two-class logits ``(0, 0.3 (i - n/2) + 0.2 j + x)``: position along the first two spatial axes plus intensity."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, _, *sp = x.shape
        i = torch.arange(sp[0], dtype=x.dtype).view(1, 1, -1, *[1] * (len(sp) - 1))
        j = torch.arange(sp[1], dtype=x.dtype).view(1, 1, 1, -1, *[1] * (len(sp) - 2))
        z = 0.3 * (i - sp[0] / 2) + 0.2 * j + x[:, :1]
        return torch.cat([torch.zeros_like(z), z], 1)


def _softmax(net: torch.nn.Module, t: torch.Tensor) -> torch.Tensor:
    return torch.softmax(net(t), 1)


def _meta_batch(shape: tuple[int, ...]) -> MetaTensor:
    """A batch of two different cases that went through a preprocessing (applied operations recorded)."""
    torch.manual_seed(0)
    nd = len(shape)
    affine = torch.eye(4)
    affine[0, 0] = -1.0
    items = []
    for _ in range(2):
        mt = MetaTensor(torch.rand(1, *shape), affine=affine)
        mt = Spacing(pixdim=(1.0,) * nd)(mt)
        mt = Orientation(axcodes="RAS"[:nd])(mt)
        items.append(mt)
    assert items[0].applied_operations
    return torch.stack(items)


@pytest.mark.parametrize("shape", [(7, 5, 3), (9, 4)])
def test_flip_tta_undoes_every_flip_on_a_metatensor_batch(shape):
    x = _meta_batch(shape)
    net = _CoordinateNet()
    plain = x.as_tensor()
    nd = len(shape)
    subsets = [tuple(a + 2 for a in range(nd) if m >> a & 1) for m in range(2**nd)]
    ref = torch.stack([torch.flip(_softmax(net, torch.flip(plain, d)), d) if d else _softmax(net, plain)
                       for d in subsets]).mean(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = TTAInferer()(x, net)
    assert tuple(out["pred"].shape) == (2, 2, *shape)
    torch.testing.assert_close(torch.as_tensor(out["pred"]), ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("shape", [(7, 5, 3), (9, 4)])
def test_invertible_transform_tta_on_a_non_square_metatensor_batch(shape):
    """Rotate90 turns a non-square plane (its output has another shape) and a flip; both undone per case, with the
    preprocessing's applied operations on the input left alone."""
    x = _meta_batch(shape)
    net = _CoordinateNet()
    plain = x.as_tensor()
    rot = torch.rot90(_softmax(net, torch.rot90(plain, 1, (2, 3))), -1, (2, 3))
    flip = torch.flip(_softmax(net, torch.flip(plain, (2,))), (2,))
    ref = (rot + flip) / 2
    n_ops = len(x.applied_operations[0]) if isinstance(x.applied_operations[0], list) else len(x.applied_operations)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = UncertaintyInferer(InvertibleTransformSource([Rotate90(k=1, spatial_axes=(0, 1)),
                                                            Flip(spatial_axis=0)]))(x, net)
    torch.testing.assert_close(torch.as_tensor(out["pred"]), ref, rtol=0, atol=1e-6)
    after = len(x.applied_operations[0]) if isinstance(x.applied_operations[0], list) else len(x.applied_operations)
    assert after == n_ops


def test_evaluator_inverts_and_saves_each_case_of_a_batch_with_its_own_geometry(tmp_path):
    """Three cases with different (flipped, anisotropic, shifted) affines in one batch, reoriented and resized by the
    preprocessing: every map (the inferer's and one a transform derives from the samples) is inverted and saved with
    its own case's affine and shape, and equals what the same pipeline gives that case alone (batch size 1)."""
    pytest.importorskip("ignite")
    import nibabel as nib
    import numpy as np
    from monai.data import DataLoader, Dataset
    from monai.transforms import Compose, Invertd, Orientationd, Resized, SaveImaged

    from monai_unc.engines import UncertaintyEvaluator
    from monai_unc.transforms import UncertaintyMeasuresd

    g = torch.Generator().manual_seed(0)
    items, affines = [], []
    for i in range(3):
        a = torch.diag(torch.tensor([1.0 + i, -1.0, 2.0 + 0.5 * i, 1.0]))
        a[:3, 3] = torch.tensor([3.0 * i, 1.0, -2.0])
        affines.append(a.numpy().astype(np.float64))
        img = torch.rand(1, 10, 8, 6, generator=g)
        items.append({"image": MetaTensor(img, meta={"affine": a, "filename_or_obj": f"case{i}.nii.gz"}),
                      "label": MetaTensor((img > 0.5).long(), meta={"affine": a})})
    pre = Compose([Orientationd("image", axcodes="LPS"), Resized("image", spatial_size=(12, 12, 12),
                                                                  mode="trilinear")])
    keys = ["mutual_information", "mi_t", "predictive_entropy"]

    def run(batch_size: int, out: str) -> list:
        post = Compose([
            UncertaintyMeasuresd("samples", measures=["mutual_information"], output_key="mi_t"),
            Invertd(["pred", *keys], transform=pre, orig_keys="image", nearest_interp=False),
            *[SaveImaged(k, output_dir=tmp_path / out, output_postfix=k, separate_folder=False, print_log=False)
              for k in keys],
        ])
        ev = UncertaintyEvaluator(device=torch.device("cpu"),
                                  val_data_loader=DataLoader(Dataset(items, transform=pre), batch_size=batch_size),
                                  network=_ConvCoordinateNet(), postprocessing=post,
                                  inferer=TTAInferer(keep_samples=True))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ev.run()
        return ev.state.output

    run(3, "batch")
    run(1, "alone")
    for i in range(3):
        for k in keys:
            saved = nib.load(tmp_path / "batch" / f"case{i}_{k}.nii.gz")
            alone = nib.load(tmp_path / "alone" / f"case{i}_{k}.nii.gz")
            assert saved.shape == (10, 8, 6), k
            np.testing.assert_allclose(saved.affine, affines[i], atol=1e-5, err_msg=k)
            np.testing.assert_allclose(saved.get_fdata(), alone.get_fdata(), atol=1e-6, err_msg=k)
        mi = nib.load(tmp_path / "batch" / f"case{i}_mutual_information.nii.gz").get_fdata()
        mi_t = nib.load(tmp_path / "batch" / f"case{i}_mi_t.nii.gz").get_fdata()
        np.testing.assert_allclose(mi, mi_t, atol=1e-6)


class _ConvCoordinateNet(_CoordinateNet):
    """:class:`_CoordinateNet` with an intensity convolution, so that the samples of TTA disagree."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv3d(1, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(self.conv(x))
