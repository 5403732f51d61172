"""Every NIfTI the package writes for an input carries that input's header geometry (found by hostile testing).

The writers used to write ``nib.Nifti1Image(data, affine)``: the affine as the sform under code 2, no qform, no
spatial unit. nibabel reads that where it reads the input, but ITK (hence ITK-SNAP, 3D Slicer and nnU-Net's
SimpleITKIO) did not: it prefers the qform of an SPM-coregistered image (sform code 2, the scanner qform under code 1)
and converts a file's microns to mm, so the segmentation and maps of such an input sat 5 mm (or a factor 1000) away
from it in those viewers. Reference: SimpleITK's reading of the input and of every output; nibabel's for the affine.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

sitk = pytest.importorskip("SimpleITK")

from monai_unc.evaluation.conformal import save_masks  # noqa: E402
from monai_unc.evaluation.rows import write_derived_maps  # noqa: E402
from monai_unc.io import (  # noqa: E402
    ImageCase,
    LoadedCase,
    read_volume,
    save_label_maps,
    save_nifti,
    save_probabilities,
    save_region_maps,
)
from monai_unc.workflows.factory import build_inferer  # noqa: E402
from monai_unc.workflows.infer import InferSettings, predict_case  # noqa: E402
from monai_unc.workflows.models import LoadedModel  # noqa: E402

SHAPE = (6, 5, 4)
QFORM = np.array([[0.9, 0, 0, 10.0], [0, 1.1, 0, -20.0], [0, 0, 2.5, 30.0], [0, 0, 0, 1]])
SFORM = QFORM + np.array([[0, 0, 0, 5.0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])  # coregistered: 5 mm away


def _spm_image(path: Path) -> Path:
    """An SPM-coregistered image: the new position in the sform (code 2), the scanner position in the qform (1)."""
    img = nib.Nifti1Image(np.zeros(SHAPE, np.int16), SFORM)
    img.set_sform(SFORM, code=2)
    img.set_qform(QFORM, code=1)
    nib.save(img, path)
    return path


def _micron_image(path: Path) -> Path:
    """A preclinical image whose voxel sizes are in microns (xyzt_units)."""
    affine = np.diag([20.0, 20.0, 50.0, 1.0])
    affine[:3, 3] = (100.0, 200.0, 300.0)
    img = nib.Nifti1Image(np.zeros(SHAPE, np.int16), affine)
    img.set_qform(affine, code=1)
    img.header.set_xyzt_units("micron")
    nib.save(img, path)
    return path


def _itk(path: Path) -> tuple:
    """The geometry of a file as ITK reads it: origin, spacing and direction of the spatial axes."""
    image = sitk.ReadImage(str(path))
    d = image.GetDimension()
    direction = np.asarray(image.GetDirection()).reshape(d, d)[:3, :3]
    return (np.round(image.GetOrigin()[:3], 4).tolist(), np.round(image.GetSpacing()[:3], 6).tolist(),
            np.round(direction, 6).tolist())


WRITERS = {
    "save_nifti": lambda affine, path, like: save_nifti(np.ones(SHAPE, np.float32), affine, path, like=like),
    "save_probabilities": lambda affine, path, like: save_probabilities(np.full((2, *SHAPE), 0.5), affine, path,
                                                                        like=like),
    "save_region_maps": lambda affine, path, like: save_region_maps(np.ones((3, *SHAPE)), affine, path,
                                                                    dtype="uint8", like=like),
    "save_label_maps": lambda affine, path, like: save_label_maps(np.ones((2, *SHAPE), np.int64), affine, path,
                                                                  like=like),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("make", [_spm_image, _micron_image], ids=["spm_coregistered", "microns"])
def test_a_writer_gives_the_file_the_geometry_of_its_input_for_itk_too(tmp_path, writer, make):
    ref = make(tmp_path / "in.nii.gz")
    _, affine = read_volume(ref)
    out = WRITERS[writer](affine, tmp_path / "out.nii.gz", ref)
    assert _itk(out) == _itk(ref)  # before: 5 mm away (the sform) / 1000 times larger (no unit)
    back = nib.load(out)
    src = nib.load(ref)
    for key in ("sform_code", "qform_code"):
        assert int(back.header[key]) == int(src.header[key])
    assert back.header.get_xyzt_units()[0] == src.header.get_xyzt_units()[0]
    np.testing.assert_allclose(back.header.get_qform(), src.header.get_qform(), atol=1e-5)
    np.testing.assert_allclose(read_volume(out)[1], affine, atol=1e-5)  # the package reads it as before


def test_a_reference_on_another_grid_gives_nothing(tmp_path):
    """The header is copied only for an output on the reference's grid: otherwise nibabel's defaults."""
    ref = _spm_image(tmp_path / "in.nii.gz")
    other = np.diag([1.0, 1.0, 1.0, 1.0])
    out = save_nifti(np.ones(SHAPE, np.float32), other, tmp_path / "out.nii.gz", like=ref)
    h = nib.load(out).header
    assert (int(h["sform_code"]), int(h["qform_code"]), h.get_xyzt_units()[0]) == (2, 0, "unknown")
    np.testing.assert_allclose(nib.load(out).affine, other)
    for like in (None, tmp_path / "missing.nii.gz", tmp_path):  # none, a missing file, a folder (DICOM series)
        h = nib.load(save_nifti(np.ones(SHAPE, np.float32), SFORM, tmp_path / "o2.nii.gz", like=like)).header
        assert (int(h["sform_code"]), int(h["qform_code"])) == (2, 0)


def test_a_qform_of_other_voxel_sizes_is_not_copied(tmp_path):
    """A qform whose voxel sizes differ from the sform's would make pixdim disagree with the sform, and MONAI's
    header correction would then read the output at the qform: it is left out, the output reads as ``affine``."""
    scaled = SFORM.copy()
    scaled[:3, :3] *= 2.0
    img = nib.Nifti1Image(np.zeros(SHAPE, np.int16), scaled)
    img.set_sform(scaled, code=2)
    img.set_qform(QFORM, code=1)
    ref = tmp_path / "in.nii.gz"
    nib.save(img, ref)
    out = save_nifti(np.ones(SHAPE, np.float32), scaled, tmp_path / "out.nii.gz", like=ref)
    h = nib.load(out).header
    assert (int(h["sform_code"]), int(h["qform_code"])) == (2, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no header correction
        np.testing.assert_allclose(read_volume(out)[1], scaled, atol=1e-5)


class _Net(torch.nn.Module):
    """Two-class logits from the intensity, any shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.zeros_like(x[:, :1]), x[:, :1] - 0.5], 1)


@pytest.mark.parametrize("make", [_spm_image, _micron_image], ids=["spm_coregistered", "microns"])
def test_every_infer_output_has_the_input_geometry_for_itk_too(tmp_path, make):
    ref = make(tmp_path / "c.nii.gz")
    out = tmp_path / "out"
    out.mkdir()
    measures = ["predictive_entropy", "mutual_information"]
    settings = InferSettings(model="net", method="tta", samples=2, roi=None, overlap=0.25, intensity="none",
                             measures=measures, seed=0, activation="softmax", checkpoints=[], save_samples=True)
    model = LoadedModel(_Net(), "net", spatial_dims=3)
    inferer = build_inferer("tta", samples=2, measures=measures, keep_samples=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predict_case(ImageCase("c", (ref,)), model, inferer, settings, out, torch.device("cpu"))
    files = sorted(out.glob("c_*.nii.gz"))
    assert len(files) == 5  # seg, probs, two maps, samples
    for path in files:
        assert _itk(path) == _itk(ref), path.name


def test_evaluate_maps_and_conformal_masks_have_the_label_geometry_for_itk_too(tmp_path):
    label = _spm_image(tmp_path / "c.nii.gz")
    _, affine = read_volume(label)
    probs = np.stack([np.full(SHAPE, 0.3, np.float32), np.full(SHAPE, 0.7, np.float32)])
    case = LoadedCase("c", np.zeros(SHAPE, np.int64), np.ones(SHAPE, np.int64), probs, {}, affine, (0.9, 1.1, 2.5))
    maps = write_derived_maps(case, tmp_path / "maps", like=label)
    masks = save_masks({"outer": np.ones((1, *SHAPE), bool)}, case, tmp_path, sigmoid=False, like=label)
    assert maps and masks
    for path in (*maps.values(), *masks):
        assert _itk(path) == _itk(label), path.name


def test_an_output_of_a_file_read_at_its_qform_is_read_there_by_every_reader(tmp_path):
    """A sform whose voxel sizes disagree with pixdim is replaced by the qform that agrees (MONAI's correction, the
    affine the package reads): the output holds that affine as sform and qform, under the file's codes."""
    bad = QFORM.copy()
    bad[:3, :3] *= 1.5
    img = nib.Nifti1Image(np.zeros(SHAPE, np.int16), QFORM)
    img.set_qform(QFORM, code=1)
    img.set_sform(bad, code=1)  # pixdim stays the qform's
    ref = tmp_path / "in.nii.gz"
    nib.save(img, ref)
    with pytest.warns(UserWarning, match="the qform, which agrees, is used"):
        _, affine = read_volume(ref)
    np.testing.assert_allclose(affine, QFORM, atol=1e-5)
    out = save_nifti(np.ones(SHAPE, np.float32), affine, tmp_path / "out.nii.gz", like=ref)
    back = nib.load(out)
    assert (int(back.header["sform_code"]), int(back.header["qform_code"])) == (1, 1)
    np.testing.assert_allclose(back.affine, QFORM, atol=1e-5)
    np.testing.assert_allclose(back.header.get_qform(), QFORM, atol=1e-5)
    assert _itk(out)[:2] == _itk(ref)[:2]  # ITK reads the input's qform too


@pytest.mark.parametrize("unit", ["micron", "meter"])
def test_a_file_in_microns_or_metres_warns_that_distances_are_in_its_unit(tmp_path, unit):
    """Found by hostile testing of NIfTI files: the affine of a file in microns is read in microns (as nibabel and
    MONAI read it; ITK converts to mm), so an HD95 of 40 mm on 20-micron voxels was reported as 40000 "mm" without a
    word. The reader now warns (the numbers stay nibabel's and MONAI's, and the outputs keep the file's unit)."""
    import warnings

    from monai_unc.io import read_volume

    img = nib.Nifti1Image(np.zeros((4, 4, 4), np.float32), np.diag([20.0, 20.0, 20.0, 1.0]))
    img.header.set_xyzt_units(unit)
    nib.save(img, tmp_path / "pre.nii.gz")
    with pytest.warns(UserWarning, match=f"spatial unit is {unit} .*computed in that unit although labelled mm"):
        _, affine = read_volume(tmp_path / "pre.nii.gz")
    assert affine[0, 0] == 20.0  # read as nibabel reads it
    img.header.set_xyzt_units("mm")
    nib.save(img, tmp_path / "mm.nii.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_volume(tmp_path / "mm.nii.gz")


def test_the_report_masks_of_evaluate_conformal_have_the_label_geometry_for_itk_too(tmp_path):
    """Found by the review of like=: ``evaluate --conformal`` writes each case's masks for the report
    (``products/conformal/<case>_outer.nii.gz``, :func:`calibration_case_masks`) without the label's header, so for
    an SPM-coregistered label ITK-SNAP and Slicer put them 5 mm (the sform) away from the label and the derived maps
    of the same run. A loaded case knows its label file (``LoadedCase.label_file``), which the masks and maps copy."""
    from monai_unc import cli
    from monai_unc.io import CaseFiles, load_case

    rng = np.random.default_rng(0)
    for i in range(20):
        lab = np.zeros(SHAPE, np.int16)
        lab[1:5, 1:4, 1:3] = 1
        p1 = np.clip(lab * 0.8 + rng.normal(0, 0.15, SHAPE), 0.01, 0.99).astype(np.float32)
        for arr, path in ((lab, tmp_path / "labels" / f"c{i:02d}.nii.gz"),
                          (np.stack([1 - p1, p1], -1), tmp_path / "pred" / f"c{i:02d}_probs.nii.gz")):
            path.parent.mkdir(exist_ok=True)
            img = nib.Nifti1Image(arr, SFORM)
            img.set_sform(SFORM, code=2)
            img.set_qform(QFORM, code=1)
            nib.save(img, path)
    label = tmp_path / "labels" / "c00.nii.gz"
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(["evaluate", "--labels", str(tmp_path / "labels"), "--predictions", str(tmp_path / "pred"),
                         "--output", str(out), "--conformal", "outer:fnr=0.2", "--quiet"]) == 0
    masks = sorted((out / "products" / "conformal").glob("c00_*.nii.gz"))
    maps = sorted((out / "maps").glob("c00_*.nii.gz"))
    assert masks and maps
    for path in (*masks, *maps):
        assert _itk(path) == _itk(label), path.name
    files = CaseFiles("c00", label, None, tmp_path / "pred" / "c00_probs.nii.gz", {})
    assert load_case(files, 2).label_file == label
