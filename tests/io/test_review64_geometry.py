"""Hostile review 64 of image geometry across a case's files (found by hostile testing).

- a 5-D NIfTI ``(X, Y, Z, 1, C)`` (the NIfTI / ITK layout of a vector image: time axis 1, components on the fifth
  axis) was refused against a 3-D label as "spatial shape (X, Y, Z, 1) ... resample the prediction"; its singleton
  time axis is now dropped, so it reads as the 4-D ``(X, Y, Z, C)`` file with the same voxels does;
- a file holding the label's grid in another voxel order (an axis reversed, or axes swapped, with the affine that
  says so) was refused as "different affines" or "resample": the refusal now says which axes and that reorienting
  (no resampling) puts it on the label's grid. Metrics are never computed on such a file voxel by voxel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

nib = pytest.importorskip("nibabel")

from monai_unc.io import CaseError, CaseFiles, load_case  # noqa: E402

A = np.diag([0.8, 1.0, 2.5, 1.0])
A[:3, 3] = (-10.0, 5.0, 20.0)
SHAPE = (6, 5, 4)


def _volumes():
    rng = np.random.default_rng(0)
    gt = (rng.random(SHAPE) < 0.4).astype(np.uint8)
    p1 = rng.uniform(0.05, 0.95, SHAPE).astype(np.float32)
    return gt, np.stack([1 - p1, p1], -1)


def _flipped(a: np.ndarray, axis: int, n: int) -> np.ndarray:
    """The affine of the same grid stored with ``axis`` (of length ``n``) reversed."""
    f = a.copy()
    f[:3, axis] *= -1
    f[:3, 3] = a[:3, :3] @ np.eye(3)[axis] * (n - 1) + a[:3, 3]
    return f


def test_a_5d_probability_file_with_a_singleton_time_axis_is_read_on_the_3d_grid(tmp_path):
    gt, probs = _volumes()
    nib.save(nib.Nifti1Image(gt, A), tmp_path / "c0.nii.gz")
    nib.save(nib.Nifti1Image(probs, A), tmp_path / "c0_probs.nii.gz")
    nib.save(nib.Nifti1Image(probs[..., None, :], A), tmp_path / "c1_probs.nii.gz")  # (X, Y, Z, 1, C)
    nib.save(nib.Nifti1Image(gt[..., None, None], A), tmp_path / "c1.nii.gz")  # a 5-D label too
    four = load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz"))
    five = load_case(CaseFiles("c1", tmp_path / "c1.nii.gz", probs=tmp_path / "c1_probs.nii.gz"))
    assert five.probs.shape == (2, *SHAPE) and five.label.shape == SHAPE and five.spacing == four.spacing
    assert five.spacing == pytest.approx((0.8, 1.0, 2.5))
    np.testing.assert_array_equal(five.probs, four.probs)
    np.testing.assert_array_equal(five.label, four.label)
    mixed = load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c1_probs.nii.gz"))
    np.testing.assert_array_equal(mixed.seg, four.seg)


def test_a_5d_file_with_a_longer_time_axis_is_still_refused(tmp_path):
    gt, probs = _volumes()
    nib.save(nib.Nifti1Image(gt, A), tmp_path / "c0.nii.gz")
    nib.save(nib.Nifti1Image(np.stack([probs, probs], 3), A), tmp_path / "c0_probs.nii.gz")  # (X, Y, Z, 2, C)
    with pytest.raises(CaseError, match=r"c0_probs\.nii\.gz has spatial shape \(6, 5, 4, 2\)"):
        load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz"))


@pytest.mark.parametrize("axis", [0, 2])
def test_a_prediction_with_a_reversed_axis_is_refused_with_the_reorientation(tmp_path, axis):
    gt, probs = _volumes()
    nib.save(nib.Nifti1Image(gt, A), tmp_path / "c0.nii.gz")
    flipped = np.flip(probs, axis).copy()
    nib.save(nib.Nifti1Image(flipped, _flipped(A, axis, SHAPE[axis])), tmp_path / "c0_probs.nii.gz")
    with pytest.raises(CaseError) as e:
        load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz"))
    msg = str(e.value)
    assert "c0_probs.nii.gz" in msg and "c0.nii.gz" in msg and "\n" not in msg, msg
    assert f"the label's grid with voxel axis {axis} reversed" in msg and "reorient" in msg, msg


def test_a_prediction_with_swapped_axes_is_refused_with_the_reorientation(tmp_path):
    gt, probs = _volumes()
    nib.save(nib.Nifti1Image(gt, A), tmp_path / "c0.nii.gz")
    swapped = np.eye(4)
    swapped[:, [0, 1, 2]] = A[:, [2, 1, 0]]
    swapped[:, 3] = A[:, 3]
    nib.save(nib.Nifti1Image(np.swapaxes(probs, 0, 2).copy(), swapped), tmp_path / "c0_probs.nii.gz")
    with pytest.raises(CaseError) as e:
        load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz"))
    msg = str(e.value)
    assert "spatial shape (4, 5, 6)" in msg and "(6, 5, 4)" in msg, msg
    assert "the label's grid with its voxel axes in the order (2, 1, 0)" in msg and "reorient" in msg, msg
    assert "resample" not in msg, msg


def test_a_prediction_on_another_grid_keeps_the_plain_refusals(tmp_path):
    gt, probs = _volumes()
    nib.save(nib.Nifti1Image(gt, A), tmp_path / "c0.nii.gz")
    moved = A.copy()
    moved[0, 3] += 5.0
    nib.save(nib.Nifti1Image(probs, moved), tmp_path / "c0_probs.nii.gz")
    with pytest.raises(CaseError, match="different affines") as e:
        load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz"))
    assert "reorient" not in str(e.value)
    nib.save(nib.Nifti1Image(np.pad(probs, ((0, 1), (0, 0), (0, 0), (0, 0)), constant_values=0.5), A),
             tmp_path / "c0_probs.nii.gz")
    with pytest.raises(CaseError, match=r"spatial shape \(7, 5, 4\) but the label c0\.nii\.gz has \(6, 5, 4\); "
                                        "resample"):
        load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz"))


def test_a_2d_label_against_a_one_slice_3d_prediction_names_the_axis_of_length_1(tmp_path):
    """The same voxels, one file 2-D ``(X, Y)`` and the other ``(X, Y, 1)``: refused (the shapes differ), with the
    remedy that fits (the axis of length 1), not "resample"."""
    gt, probs = _volumes()
    nib.save(nib.Nifti1Image(gt[:, :, 0], A), tmp_path / "c0.nii.gz")
    nib.save(nib.Nifti1Image(probs[:, :, :1], A), tmp_path / "c0_probs.nii.gz")  # (X, Y, 1, C)
    with pytest.raises(CaseError) as e:
        load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz"))
    msg = str(e.value)
    assert "spatial shape (6, 5, 1) but the label c0.nii.gz has (6, 5)" in msg, msg
    assert "an axis of length 1" in msg and "resample" not in msg, msg


def test_infer_and_triage_name_a_reversed_image_channel(tmp_path):
    from monai_unc.evaluation.triage.images import read_image_channels
    from monai_unc.io import ImageCase
    from monai_unc.workflows.infer import load_image_case

    images = tmp_path / "images"
    images.mkdir()
    x = np.random.default_rng(1).random(SHAPE).astype(np.float32)
    nib.save(nib.Nifti1Image(x, A), images / "c0_0000.nii.gz")
    nib.save(nib.Nifti1Image(np.flip(x, 1).copy(), _flipped(A, 1, SHAPE[1])), images / "c0_0001.nii.gz")
    with pytest.raises(ValueError, match=r"channel c0_0001\.nii\.gz holds channel 0's grid with voxel axis 1 "
                                         r"reversed: reorient it onto the axes of channel 0"):
        load_image_case(ImageCase("c0", (images / "c0_0000.nii.gz", images / "c0_0001.nii.gz")))
    with pytest.raises(CaseError, match=r"image c0_0001\.nii\.gz holds the grid of the case's other volumes with "
                                        r"voxel axis 1 reversed: reorient"):
        read_image_channels(images / "c0_0000.nii.gz", "all", case_id="c0")


def test_calibrate_names_a_label_with_a_reversed_axis(tmp_path, capsys):
    import json

    import torch
    from monai.networks.nets import UNet

    from monai_unc.cli import main
    from tests._cases import TOY_NET

    images, labels = tmp_path / "images", tmp_path / "labels"
    images.mkdir()
    labels.mkdir()
    shape = (8, 8, 8)
    x = np.random.default_rng(2).random(shape).astype(np.float32)
    nib.save(nib.Nifti1Image(x, A), images / "c0.nii.gz")
    gt = (x > 0.5).astype(np.uint8)
    nib.save(nib.Nifti1Image(np.flip(gt, 2).copy(), _flipped(A, 2, shape[2])), labels / "c0.nii.gz")
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    (tmp_path / "net.json").write_text(json.dumps(TOY_NET))
    capsys.readouterr()
    rc = main(["calibrate", "-i", str(images), "-l", str(labels), "-o", str(tmp_path / "c.pt"), "--network",
               str(tmp_path / "net.json"), "--checkpoint", str(tmp_path / "net.pt"), "--max-steps", "1", "-q"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1, err
    assert "label c0.nii.gz holds the image's grid with voxel axis 2 reversed: reorient it" in err[0], err
    assert not (tmp_path / "c.pt").exists()


def test_a_5d_one_region_mask_stays_a_mask(tmp_path):
    """A one-region mask ``(X, Y, Z, 1, 1)`` is read as the 4-D ``(X, Y, Z, 1)`` mask is: the region's 0/1 mask, not
    a label map of label 1 (the time axis dropped must not turn it into one)."""
    gt, probs = _volumes()
    label = np.where(gt > 0, 4, 0).astype(np.uint8)  # BraTS-like: the region ET is label 4
    nib.save(nib.Nifti1Image(label, A), tmp_path / "c0.nii.gz")
    p = probs[..., 1:]
    nib.save(nib.Nifti1Image(p, A), tmp_path / "c0_probs.nii.gz")
    seg4, seg5 = gt[..., None], gt[..., None, None]
    nib.save(nib.Nifti1Image(seg4, A), tmp_path / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(seg5, A), tmp_path / "c1_seg.nii.gz")
    four = load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz",
                               seg=tmp_path / "c0_seg.nii.gz"), num_classes=1, multilabel=True)
    five = load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz",
                               seg=tmp_path / "c1_seg.nii.gz"), num_classes=1, multilabel=True)
    assert five.seg.shape == four.seg.shape and five.seg.dtype == four.seg.dtype, (five.seg.shape, four.seg.shape)
    np.testing.assert_array_equal(five.seg, four.seg)


def _unoriented(path: Path, data: np.ndarray) -> Path:
    """``data`` in a NIfTI file without orientation (sform_code and qform_code 0: NIfTI's "method 1")."""
    img = nib.Nifti1Image(data, np.diag([0.7, 0.8, 2.0, 1.0]))
    img.set_sform(None, code=0)
    img.set_qform(None, code=0)
    nib.save(img, path)
    return path


@pytest.mark.parametrize("which", ["label", "prediction"])
def test_a_file_without_orientation_is_named_when_the_grids_differ(tmp_path, which):
    """nibabel (and MONAI) give a file without sform and qform a made-up affine (origin at the volume's centre), ITK
    (nnU-Net's SimpleITK writer) another (origin 0): the refusal names the file and that reason, not only "different
    affines"."""
    gt, probs = _volumes()
    itk_guess = np.diag([-0.7, -0.8, 2.0, 1.0])  # what SimpleITK writes for such a file
    if which == "label":
        _unoriented(tmp_path / "c0.nii.gz", gt)
        nib.save(nib.Nifti1Image(probs, itk_guess), tmp_path / "c0_probs.nii.gz")
    else:
        nib.save(nib.Nifti1Image(gt, itk_guess), tmp_path / "c0.nii.gz")
        _unoriented(tmp_path / "c0_probs.nii.gz", probs)
    unset = "c0.nii.gz" if which == "label" else "c0_probs.nii.gz"
    with pytest.raises(CaseError) as e:
        load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz"))
    msg = str(e.value)
    assert f"{unset} has no orientation (sform_code and qform_code 0" in msg and "\n" not in msg, msg
    assert f"give {unset} the geometry of its image" in msg, msg
    # the same file on both sides: one grid, read as before
    _unoriented(tmp_path / "c0.nii.gz", gt)
    _unoriented(tmp_path / "c0_probs.nii.gz", probs)
    assert load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz")).spacing == \
        pytest.approx((0.7, 0.8, 2.0))


def test_a_file_without_orientation_of_another_shape_is_refused_for_its_shape(tmp_path):
    gt, probs = _volumes()
    _unoriented(tmp_path / "c0.nii.gz", gt)
    _unoriented(tmp_path / "c0_probs.nii.gz", probs[:-1])
    with pytest.raises(CaseError, match=r"spatial shape \(5, 5, 4\) but the label c0\.nii\.gz has \(6, 5, 4\); "
                                        "resample"):
        load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", probs=tmp_path / "c0_probs.nii.gz"))


def test_infer_and_triage_read_a_5d_image_on_its_3d_grid(tmp_path):
    """An image ``(X, Y, Z, 1, C)`` reads as the 4-D ``(X, Y, Z, C)`` one, as a case's other volumes do (it was a
    "4D" image that a 3-D network refused, and triage compared it with the label as (X, Y, Z, 1))."""
    from monai_unc.evaluation.triage.images import read_image_channels
    from monai_unc.io import ImageCase
    from monai_unc.workflows.infer import load_image_case

    x = np.random.default_rng(3).random((*SHAPE, 2)).astype(np.float32)
    nib.save(nib.Nifti1Image(x, A), tmp_path / "c4.nii.gz")
    nib.save(nib.Nifti1Image(x[..., None, :], A), tmp_path / "c5.nii.gz")
    four, a4 = load_image_case(ImageCase("c4", (tmp_path / "c4.nii.gz",)))
    five, a5 = load_image_case(ImageCase("c5", (tmp_path / "c5.nii.gz",)))
    assert five.shape == (2, *SHAPE)
    np.testing.assert_array_equal(five, four)
    np.testing.assert_array_equal(a5, a4)
    triaged = read_image_channels(tmp_path / "c5.nii.gz", "first", geometry=(SHAPE, a4), case_id="c5")
    np.testing.assert_array_equal(triaged, four)
