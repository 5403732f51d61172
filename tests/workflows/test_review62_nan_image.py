"""Review 62 (end-to-end run): an image holding NaN or infinite voxels fails as its case, naming the voxels.

It failed as ``network output contains non-finite values (NaN or inf) for this input``, blaming the network."""

from __future__ import annotations

import json

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.io import CaseError
from monai_unc.workflows.infer import check_finite_image


def _infer_toy_network(tmp_path, images, out, *extra: str) -> int:
    import torch
    from monai.networks.nets import UNet

    from tests._cases import TOY_NET

    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    (tmp_path / "net.json").write_text(json.dumps(TOY_NET))
    return cli.main(["infer", "-i", str(images), "-o", str(out), "--network", str(tmp_path / "net.json"),
                     "--checkpoint", str(tmp_path / "net.pt"), "--samples", "2", "--quiet", *extra])


@pytest.mark.parametrize("intensity", ["none", "max"])
def test_infer_names_the_nan_voxels_of_an_image(tmp_path, capsys, intensity):
    import nibabel as nib

    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for name in ("good", "holes"):
        arr = rng.random((16, 16, 16)).astype(np.float32)
        if name == "holes":
            arr[2:4, 5, 6] = np.nan
            arr[9, 9, 9] = np.inf
        nib.save(nib.Nifti1Image(arr, np.diag([0.5, 0.5, 5.0, 1.0])), images / f"{name}.nii.gz")
    out = tmp_path / "pred"
    rc = _infer_toy_network(tmp_path, images, out, "--intensity", intensity)
    err = capsys.readouterr().err
    assert rc == 1 and (out / "good.json").is_file(), err
    failures = json.loads((out / "failures.json").read_text())["failures"]
    assert [f["case"] for f in failures] == ["holes"]
    reason = failures[0]["error"]
    assert "holes.nii.gz holds 2 NaN and 1 infinite voxel(s) of 4096" in reason, reason
    assert "voxel (2, 5, 6)" in reason and "network output" not in reason, reason


def test_finite_and_integer_images_pass():
    check_finite_image("c", np.zeros((2, 3, 3, 3), np.float64), "c.nii.gz")
    check_finite_image("c", np.full((1, 3, 3, 3), -5, np.int16), "c.nii.gz")
    with pytest.raises(CaseError, match=r"case 'c': its image c.nii.gz holds 0 NaN and 1 infinite voxel\(s\) of 27 "
                                        r"\(the first at channel 1, voxel \(0, 0, 2\)\)"):
        check_finite_image("c", np.pad(np.array([[[[-np.inf]]]]), ((1, 0), (0, 2), (0, 2), (2, 0))), "c.nii.gz")


def test_a_bundles_preprocessed_image_with_nan_voxels_fails_naming_them(tmp_path):
    """The check covers a bundle's preprocessing too (left by the end-to-end run): a NaN voxel of the file (or one a
    transform made) failed as the network's non-finite output."""
    import nibabel as nib
    import torch
    from monai.transforms import Compose, EnsureChannelFirstd, LoadImaged

    from monai_unc.io import ImageCase
    from monai_unc.workflows import infer
    from monai_unc.workflows.factory import build_inferer
    from monai_unc.workflows.infer import InferSettings
    from monai_unc.workflows.models import LoadedModel

    arr = np.random.default_rng(0).random((6, 7, 8)).astype(np.float32)
    arr[1, 2, 3] = np.nan
    nib.save(nib.Nifti1Image(arr, np.eye(4)), tmp_path / "c.nii.gz")
    pre = Compose([LoadImaged("image"), EnsureChannelFirstd("image")])
    settings = InferSettings(model="conv", method="tta", samples=1, roi=None, overlap=0.25, intensity="none",
                             measures=["predictive_entropy"], seed=0, activation="softmax", checkpoints=[])
    model = LoadedModel(torch.nn.Conv3d(1, 3, 3, padding=1).eval(), "conv", preprocessing=pre, spatial_dims=3)
    (tmp_path / "out").mkdir()
    with pytest.raises(CaseError, match=r"^case 'c': its image c\.nii\.gz after the bundle's preprocessing holds 1 "
                                        r"NaN and 0 infinite voxel\(s\) of 336 \(the first at channel 0, voxel "
                                        r"\(1, 2, 3\)\)"):
        infer.predict_case(ImageCase("c", (tmp_path / "c.nii.gz",)), model, build_inferer("tta"), settings,
                           tmp_path / "out", torch.device("cpu"))
