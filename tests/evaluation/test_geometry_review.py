"""Hostile review of the geometry of a case's volumes (found by hostile testing).

- the per-sample masks of ``evaluate --lesions --lesion-samples`` are checked against the label's affine, as every
  other volume of a case (a mirrored file gave a true lesion existence 0.0 silently);
- a NIfTI file whose sform disagrees with ``pixdim`` and that has no qform is read with its sform (MONAI's header
  correction took the unset qform: an identity affine), with one warning naming the file; a correction that moves
  the affine of a file with a qform warns too;
- a grid whose voxel axes are not orthogonal (a sheared affine, e.g. gantry-tilted CT) gets voxel volumes ``|det A|``
  and NaN distance-based metrics with one warning naming the case and the angle;
- the "same space" check compares voxel positions over the grid, not affine entries (a 0.11 degree rotation of a
  512 x 512 grid moved the far corner by 1.4 voxels and passed).
"""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

nib = pytest.importorskip("nibabel")

from monai_unc._utils import affine_voxel_volume  # noqa: E402
from monai_unc.activation import TaskView  # noqa: E402
from monai_unc.cli import main  # noqa: E402
from monai_unc.evaluation.lesions import read_lesion_samples  # noqa: E402
from monai_unc.evaluation.triage.images import read_image_channels  # noqa: E402
from monai_unc.io import (  # noqa: E402
    GEOMETRY_ATOL,
    ORTHOGONALITY_ATOL,
    CaseError,
    CaseFiles,
    ImageCase,
    axes_cosine,
    grid_displacement,
    grid_mismatch,
    load_case,
    read_volume,
    sheared_grid,
)
from monai_unc.metrics import surface_hd95  # noqa: E402


def _ball(shape, centre, radius):
    g = np.indices(shape)
    return sum((g[i] - centre[i]) ** 2 for i in range(3)) <= radius * radius


def _metrics(out: Path) -> dict:
    with open(out / "metrics.csv", newline="") as f:
        return next(csv.DictReader(f))


# ----------------------------------------------------------------------------------------------------------------
# 1. the per-sample masks of --lesion-samples: the label's affine
# ----------------------------------------------------------------------------------------------------------------
def _lesion_cohort(root: Path, mirrored: bool) -> tuple[Path, Path, Path]:
    labels, preds, samples = root / "labels", root / "pred", root / "samples"
    for d in (labels, preds, samples):
        d.mkdir(parents=True)
    shape = (32, 24, 16)
    a = np.diag([0.8, 0.8, 2.0, 1.0])
    a[:3, 3] = (-12.0, 5.0, 20.0)
    pred = _ball(shape, (6, 6, 8), 3) | _ball(shape, (8, 17, 8), 3)
    gt = _ball(shape, (6, 6, 8), 3)
    p1 = np.where(pred, 0.9, 0.1).astype(np.float32)
    nib.save(nib.Nifti1Image(gt.astype(np.uint8), a), labels / "c0.nii.gz")
    nib.save(nib.Nifti1Image(pred.astype(np.int16), a), preds / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(np.stack([1 - p1, p1], -1), a), preds / "c0_probs.nii.gz")
    s = np.stack([gt] * 4, -1).astype(np.uint8)  # (X, Y, Z, S): the true lesion in every sample
    if mirrored:  # the same world positions, stored with the first axis reversed
        f = a.copy()
        f[:3, 0] *= -1
        f[:3, 3] = a[:3, :3] @ [shape[0] - 1, 0, 0] + a[:3, 3]
        nib.save(nib.Nifti1Image(s[::-1].copy(), f), samples / "c0_samples.nii.gz")
    else:
        nib.save(nib.Nifti1Image(s, a), samples / "c0_samples.nii.gz")
    return labels, preds, samples


def test_lesion_samples_on_another_affine_are_refused_naming_the_file(tmp_path, capsys):
    labels, preds, samples = _lesion_cohort(tmp_path, mirrored=True)
    out = tmp_path / "ev"
    capsys.readouterr()
    rc = main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--lesions", "--lesion-settings",
               "met", "--lesion-samples", str(samples), "--quiet"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1, err
    # the label's grid with an axis reversed: said so, with the reorientation (review 64)
    assert "c0_samples.nii.gz" in err[0] and "voxel axis 0 reversed" in err[0] and "reorient" in err[0], err
    assert not (out / "summary.json").exists()


def test_read_lesion_samples_checks_the_affine(tmp_path):
    _, _, samples = _lesion_cohort(tmp_path, mirrored=True)
    a = np.diag([0.8, 0.8, 2.0, 1.0])
    a[:3, 3] = (-12.0, 5.0, 20.0)
    with pytest.raises(CaseError, match=r"c0_samples\.nii\.gz .*holds the label's grid with voxel axis 0 reversed"):
        read_lesion_samples(samples, "c0", (32, 24, 16), a)
    assert read_lesion_samples(samples, "c0", (32, 24, 16)).shape == (4, 32, 24, 16)  # without an affine: shape only


def test_lesion_samples_on_the_label_affine_give_existence_one(tmp_path):
    labels, preds, samples = _lesion_cohort(tmp_path, mirrored=False)
    out = tmp_path / "ev"
    assert main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--lesions", "--lesion-settings",
                 "met", "--lesion-samples", str(samples), "--quiet"]) == 0
    lesions = json.loads((out / "summary.json").read_text())["lesions"]["lesions"]
    assert sorted((d["false_positive"], d["existence"]) for d in lesions) == [(0.0, 1.0), (1.0, 0.0)]


# ----------------------------------------------------------------------------------------------------------------
# 2. a sform that disagrees with pixdim, without a qform: the sform
# ----------------------------------------------------------------------------------------------------------------
_C, _S = np.cos(np.radians(20)), np.sin(np.radians(20))
SFORM = np.array([[-0.5 * _C, -0.7 * _S, 0, 30.0], [-0.5 * _S, 0.7 * _C, 0, -20.0], [0, 0, 5.0, 40.0], [0, 0, 0, 1]])


def _sform_only(path: Path, data: np.ndarray) -> Path:
    img = nib.Nifti1Image(data, None)  # pixdim stays 1 1 1
    img.set_sform(SFORM, code=2)  # qform_code stays 0
    nib.save(img, path)
    return path


def test_a_sform_without_qform_is_read_as_nibabel_reads_it(tmp_path):
    path = _sform_only(tmp_path / "s.nii.gz", np.zeros((6, 5, 4), np.float32))
    assert int(nib.load(path).header["qform_code"]) == 0
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        _, affine = read_volume(path)
    np.testing.assert_allclose(affine, SFORM, atol=1e-5)
    mine = [str(x.message) for x in w if issubclass(x.category, UserWarning)]
    assert len(mine) == 1 and str(path) in mine[0] and "sform is used" in mine[0] and "\n" not in mine[0], mine


@pytest.mark.filterwarnings("ignore:.*sform is used:UserWarning")  # said once per file (the test above)
def test_a_sform_without_qform_gives_the_affine_spacing_in_evaluate(tmp_path):
    labels, preds = tmp_path / "labels", tmp_path / "pred"
    labels.mkdir()
    preds.mkdir()
    shape = (24, 24, 16)
    g = np.indices(shape)
    gt = ((g[0] - 12) * 0.5) ** 2 + ((g[1] - 12) * 0.7) ** 2 + ((g[2] - 8) * 5.0) ** 2 <= 16.0
    pred = np.zeros_like(gt)
    pred[2:] = gt[:-2]
    p1 = np.where(pred, 0.8, 0.2).astype(np.float32)
    _sform_only(labels / "c0.nii.gz", gt.astype(np.uint8))
    _sform_only(preds / "c0_seg.nii.gz", pred.astype(np.int16))
    _sform_only(preds / "c0_probs.nii.gz", np.stack([1 - p1, p1], -1))
    out = tmp_path / "ev"
    assert main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--lesions", "--lesion-settings",
                 "met", "--quiet"]) == 0
    row = _metrics(out)
    assert row["spacing"] == "0.5x0.7x5"
    assert float(row["lesion_hd95_1"]) == pytest.approx(surface_hd95(gt, pred, spacing=(0.5, 0.7, 5.0)), rel=1e-6)


def test_a_qform_put_in_place_of_the_sform_warns(tmp_path):
    """With a qform (code > 0) MONAI's correction stays, but the affine it moves is said, naming the file."""
    qform = np.diag([-0.9, 1.1, 2.5, 1.0])
    img = nib.Nifti1Image(np.zeros((5, 6, 7), np.float32), None)
    img.set_qform(qform, code=1)
    img.set_sform(qform @ np.diag([2.0, 2.0, 2.0, 1.0]), code=2)  # the sform's voxel sizes disagree with pixdim
    path = tmp_path / "q.nii.gz"
    nib.save(img, path)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        _, affine = read_volume(path)
    np.testing.assert_allclose(affine, qform, atol=1e-6)
    mine = [str(x.message) for x in w if issubclass(x.category, UserWarning)]
    assert len(mine) == 1 and str(path) in mine[0] and "qform, which agrees" in mine[0], mine


# ----------------------------------------------------------------------------------------------------------------
# 3. a sheared grid: |det A| volumes, NaN distances
# ----------------------------------------------------------------------------------------------------------------
TILT = np.radians(25.0)
SHEARED = np.eye(4)
SHEARED[:3, 0] = (0.7, 0, 0)
SHEARED[:3, 1] = (0, 0.7, 0)
SHEARED[:3, 2] = 2.5 * np.array([0, np.sin(TILT), np.cos(TILT)])
SHEARED[:3, 3] = (-20, -30, 10)


def test_voxel_volume_is_the_determinant():
    det = abs(np.linalg.det(SHEARED[:3, :3]))
    assert affine_voxel_volume(SHEARED) == pytest.approx(det) and det < 0.7 * 0.7 * 2.5 * 0.95
    assert affine_voxel_volume(np.diag([0.5, 0.7, 5.0, 1.0])) == np.prod((0.5, 0.7, 5.0))
    view = TaskView(None, np.zeros((3, 3, 3), np.int64), np.zeros((3, 3, 3), np.int64), 2, spacing=(0.7, 0.7, 2.5),
                    affine=SHEARED)
    assert view.voxel_volume == pytest.approx(det)
    z = np.zeros((3, 3, 3), np.int64)
    from monai_unc.io import LoadedCase

    assert LoadedCase("a", z, z, None, {}, SHEARED, (0.7, 0.7, 2.5)).voxel_volume == pytest.approx(det)


def test_float32_rounded_orthogonal_affines_are_not_sheared():
    rng = np.random.default_rng(0)
    for _ in range(20):
        q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
        a = np.eye(4)
        a[:3, :3] = q * rng.uniform(0.3, 5.0, 3)
        a[:3, 3] = rng.uniform(-300, 300, 3)
        rounded = a.astype(np.float32).astype(np.float64)
        assert axes_cosine(rounded)[0] < ORTHOGONALITY_ATOL / 100
        assert sheared_grid("a", rounded) is None
    message = sheared_grid("a", SHEARED)
    assert message is not None and "case 'a'" in message and "25 degrees" in message and "resample" in message


def test_a_sheared_grid_gives_nan_distances_and_determinant_volumes(tmp_path, capsys):
    labels, preds = tmp_path / "labels", tmp_path / "pred"
    labels.mkdir()
    preds.mkdir()
    shape = (40, 40, 16)
    idx = np.indices(shape).reshape(3, -1).T
    world = idx @ SHEARED[:3, :3].T + SHEARED[:3, 3]
    centre = SHEARED[:3, :3] @ (20, 20, 8) + SHEARED[:3, 3]
    gt = (np.linalg.norm(world - centre, axis=1) <= 6.0).reshape(shape)
    pred = np.zeros_like(gt)
    pred[:, 4:, :-2] = gt[:, :-4, 2:]
    p1 = np.where(pred, 0.9, 0.1).astype(np.float32)
    nib.save(nib.Nifti1Image(gt.astype(np.uint8), SHEARED), labels / "c0.nii.gz")
    nib.save(nib.Nifti1Image(pred.astype(np.int16), SHEARED), preds / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(np.stack([1 - p1, p1], -1), SHEARED), preds / "c0_probs.nii.gz")
    out = tmp_path / "ev"
    capsys.readouterr()
    assert main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--lesions", "--lesion-settings",
                 "met"]) == 0
    captured = capsys.readouterr()
    err = [ln for ln in (captured.out + captured.err).splitlines() if "perpendicular" in ln]
    assert len(err) == 1 and "c0" in err[0] and "25 degrees" in err[0] and "resample" in err[0], err
    row = _metrics(out)
    for col in ("buc", "ba_ece", "space", "lesion_hd95_1"):
        assert np.isnan(float(row[col])), (col, row[col])
    assert float(row["lesion_dice_1"]) > 0  # not a distance: computed
    summary = json.loads((out / "summary.json").read_text())
    det = abs(np.linalg.det(nib.load(labels / "c0.nii.gz").affine[:3, :3]))
    volume = summary["lesions"]["lesions"][0]["volume_mm3"]
    assert volume == pytest.approx(int(pred.sum()) * det, rel=1e-6)
    assert sum("perpendicular" in w for w in summary["warnings"]) == 1
    # the mean HD95 leaves the case out, and says so (found by hostile testing: it was silent)
    task = summary["lesions"]["per_task"]["1"]
    assert task["n_cases_without_hd95"] == 1 and task["mean"]["lesion_hd95"] is None
    line = next(ln for ln in captured.out.splitlines() if ln.startswith("lesions 1:"))
    assert "mm (1 case(s) on a sheared grid, without HD95, left out), F1" in line, line


def test_the_margin_family_refuses_a_sheared_case():
    """The margin family's masks are distances in mm (no NaN mask): a sheared case fails, naming the angle."""
    from monai_unc.evaluation.conformal import check_margin_grid
    from monai_unc.io import LoadedCase

    z = np.zeros((3, 3, 3), np.int64)
    with pytest.raises(CaseError, match="25 degrees from perpendicular.*margin family"):
        check_margin_grid(LoadedCase("a", z, z, None, {}, SHEARED, (0.7, 0.7, 2.5)))
    check_margin_grid(LoadedCase("a", z, z, None, {}, np.diag([0.7, 0.7, 2.5, 1.0]), (0.7, 0.7, 2.5)))


def test_an_orthogonal_oblique_grid_keeps_its_distances(tmp_path):
    """A rotated but orthogonal affine (float32 in the file) is no sheared grid: BUC and lesion HD95 computed."""
    labels, preds = tmp_path / "labels", tmp_path / "pred"
    labels.mkdir()
    preds.mkdir()
    th = np.radians(17.0)
    a = np.eye(4)
    a[:3, :3] = np.array([[np.cos(th), -np.sin(th), 0], [np.sin(th), np.cos(th), 0], [0, 0, 1]]) @ np.diag(
        [0.7, 0.9, 2.0])
    a[:3, 3] = (101.3, -87.1, 40.2)
    shape = (24, 24, 12)
    gt = _ball(shape, (12, 12, 6), 4)
    pred = np.roll(gt, 1, 0)
    p1 = np.where(pred, 0.8, 0.2).astype(np.float32)
    nib.save(nib.Nifti1Image(gt.astype(np.uint8), a), labels / "c0.nii.gz")
    nib.save(nib.Nifti1Image(pred.astype(np.int16), a), preds / "c0_seg.nii.gz")
    nib.save(nib.Nifti1Image(np.stack([1 - p1, p1], -1), a), preds / "c0_probs.nii.gz")
    out = tmp_path / "ev"
    assert main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--lesions", "--lesion-settings",
                 "met", "--quiet"]) == 0
    row = _metrics(out)
    assert np.isfinite(float(row["buc"])) and np.isfinite(float(row["lesion_hd95_1"]))
    assert not any("perpendicular" in w for w in json.loads((out / "summary.json").read_text())["warnings"])


# ----------------------------------------------------------------------------------------------------------------
# 4. the same space: voxel positions, not affine entries
# ----------------------------------------------------------------------------------------------------------------
def _rotated(a: np.ndarray, degrees: float) -> np.ndarray:
    th = np.radians(degrees)
    r = np.array([[np.cos(th), -np.sin(th), 0], [np.sin(th), np.cos(th), 0], [0, 0, 1]])
    b = a.copy()
    b[:3, :3] = r @ a[:3, :3]
    return b


def test_grid_displacement_is_the_largest_voxel_centre_distance():
    a = np.diag([0.5, 0.5, 3.0, 1.0])
    b = _rotated(a, 0.11)
    assert np.abs(b - a).max() < GEOMETRY_ATOL  # the entries pass the old check
    corners = np.array([[i, j, k, 1] for i in (0, 511) for j in (0, 511) for k in (0, 1)], float)
    ref = np.linalg.norm(corners @ (b - a)[:3].T, axis=1).max()
    assert grid_displacement(a, b, (512, 512, 2)) == pytest.approx(ref) and ref > 0.6
    # the float32 rounding of a real file's affine stays far below the tolerance
    c = np.diag([0.4883, 0.4883, 0.625, 1.0])
    c[:3, 3] = (-124.7561, -260.1219, 1537.3)
    assert grid_displacement(c, c.astype(np.float32).astype(np.float64), (512, 512, 400)) < GEOMETRY_ATOL / 10


def test_evaluate_refuses_a_rotation_that_moves_far_voxels(tmp_path, capsys):
    labels, preds = tmp_path / "labels", tmp_path / "pred"
    labels.mkdir()
    preds.mkdir()
    shape = (512, 512, 2)
    a = np.diag([0.5, 0.5, 3.0, 1.0])
    b = _rotated(a, 0.11)
    gt = np.zeros(shape, np.uint8)
    gt[400:480, 400:480, :] = 1
    nib.save(nib.Nifti1Image(gt, a), labels / "c0.nii.gz")
    nib.save(nib.Nifti1Image(gt.astype(np.int16), b), preds / "c0_seg.nii.gz")
    # an uncertainty map: segmentations alone are refused before any case (no case score)
    nib.save(nib.Nifti1Image(np.zeros(shape, np.float32), b), preds / "c0_predictive_entropy.nii.gz")
    out = tmp_path / "ev"
    capsys.readouterr()
    assert main(["evaluate", "-l", str(labels), "-p", str(preds), "-o", str(out), "--quiet", "--no-spatial",
                 "--num-classes", "2"]) == 1
    failures = json.loads((out / "failures.json").read_text())["failures"]
    assert [f["case"] for f in failures] == ["c0"] and "0.69" in failures[0]["error"], failures


def test_every_same_space_check_compares_positions(tmp_path):
    shape = (256, 256, 2)
    a = np.diag([0.5, 0.5, 3.0, 1.0])
    b = _rotated(a, 0.1)  # entries differ by < 1e-3 mm, the far corner by ~0.3 mm
    assert np.abs(b - a).max() < GEOMETRY_ATOL
    data = np.zeros(shape, np.float32)
    images = tmp_path / "images"  # channel files in a folder of their own (every name with the channel suffix)
    images.mkdir()
    nib.save(nib.Nifti1Image(data, a), images / "c0_0000.nii.gz")
    nib.save(nib.Nifti1Image(data, b), images / "c0_0001.nii.gz")
    nib.save(nib.Nifti1Image(data.astype(np.uint8), a), tmp_path / "c0.nii.gz")
    nib.save(nib.Nifti1Image(data.astype(np.int16), b), tmp_path / "c0_seg.nii.gz")
    with pytest.raises(CaseError, match="mm apart"):  # the case's volumes (evaluate, report, triage)
        load_case(CaseFiles("c0", tmp_path / "c0.nii.gz", seg=tmp_path / "c0_seg.nii.gz"), num_classes=2)
    with pytest.raises(CaseError, match="mm apart"):  # triage's image channels
        read_image_channels(images / "c0_0000.nii.gz", "all", case_id="c0")
    from monai_unc.workflows.infer import load_image_case

    with pytest.raises(ValueError, match="mm apart"):  # infer's image channels
        load_image_case(ImageCase("c0", (images / "c0_0000.nii.gz", images / "c0_0001.nii.gz")))


def test_a_tenth_of_a_voxel_of_writer_rounding_is_the_same_space(tmp_path):
    """Found by hostile testing of the position check: a qform-only label (the float32 quaternion of a slightly
    oblique near-LAS grid moves its far corner by 0.09 mm of a 1 mm voxel) and the same affine written as an sform
    were refused as "not in the same space"; a tenth of the smallest voxel is tolerated (GEOMETRY_VOXEL_FRACTION)."""
    shape = (256, 256, 176)
    t1, t2 = np.radians(2.0), np.radians(1.0)
    rx = np.array([[1, 0, 0], [0, np.cos(t1), -np.sin(t1)], [0, np.sin(t1), np.cos(t1)]])
    rz = np.array([[np.cos(t2), -np.sin(t2), 0], [np.sin(t2), np.cos(t2), 0], [0, 0, 1]])
    a = np.eye(4)
    a[:3, :3] = np.diag([-1.0, 1, 1]) @ rx @ rz
    a[:3, 3] = [128.3, -110.7, -80.1]
    lab = np.zeros(shape, np.uint8)
    lab[100:150, 100:150, 60:110] = 1
    q = nib.Nifti1Image(lab, None)
    q.set_qform(a, code=1)
    q.set_sform(None, code=0)
    nib.save(q, tmp_path / "a.nii")
    nib.save(nib.Nifti1Image(lab, a), tmp_path / "a_seg.nii")
    moved = grid_displacement(nib.load(tmp_path / "a.nii").affine, nib.load(tmp_path / "a_seg.nii").affine, shape)
    assert GEOMETRY_ATOL < moved < 0.1  # beyond the absolute tolerance, within a tenth of the 1 mm voxel
    load_case(CaseFiles("a", tmp_path / "a.nii", seg=tmp_path / "a_seg.nii"), num_classes=2)
    assert grid_mismatch(a, a, shape) is None
    assert "tolerance 0.1 mm" in grid_mismatch(_rotated(a, 0.1), a, shape)  # 0.4 mm at the far corner: refused
