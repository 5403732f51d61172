"""Review 63: integer label volumes stored with NIfTI scaling (``scl_slope`` / ``scl_inter``) are read as the integers
they encode.

nibabel applies the scaling with the header's float32 slope, so a label 1 stored as 10 with slope 0.1 reads as
``1.0000000149``; every label reader (``evaluate``, ``triage``'s certification, ``conformal``, ``monitor label``: all
through ``io.read_label`` / ``io.load_case``) refused such a file as "must hold integer classes". Values within the
float rounding of the scaling of an integer are that integer now; a truly fractional label (0.5) is still refused.
"""
from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io import CaseError, CaseFiles, load_case, read_csv, read_label


def _labels() -> np.ndarray:
    lab = np.zeros((6, 5, 4), np.int64)
    lab[1:4, 1:4, 1:3] = 1
    lab[0, 0, :] = 2
    lab[5, 4, 3] = 2
    return lab


def _write_scaled(path: Path, labels: np.ndarray, slope: float, inter: float, dtype=np.int16, nifti2=False) -> Path:
    """``labels`` stored as ``round((labels - inter) / slope)`` of ``dtype`` with that scaling in the header."""
    raw = np.round((labels.astype(np.float64) - inter) / slope).astype(dtype)
    cls = nib.Nifti2Image if nifti2 else nib.Nifti1Image
    img = cls(raw, np.diag([1.5, 1.0, 2.0, 1.0]))
    img.header.set_slope_inter(slope, inter)
    nib.save(img, path)
    return path


def _seg(path: Path, labels: np.ndarray) -> Path:
    nib.save(nib.Nifti1Image(labels.astype(np.uint8), np.diag([1.5, 1.0, 2.0, 1.0])), path)
    return path


@pytest.mark.parametrize("slope, inter", [(0.1, 0.0), (0.1, 3.0), (0.5, 0.0), (0.5, 3.0), (1 / 3, 0.0),
                                          (0.01, -100.0)])
def test_scaled_label_reads_as_its_integers(tmp_path, slope, inter):
    lab = _labels()
    path = _write_scaled(tmp_path / "a.nii.gz", lab, slope, inter)
    scaled = np.asanyarray(nib.load(path).dataobj)
    assert scaled.dtype.kind == "f"  # nibabel scales the stored integers
    case = load_case(CaseFiles("a", path, seg=_seg(tmp_path / "a_seg.nii.gz", lab)), num_classes=3)
    np.testing.assert_array_equal(case.label, lab)
    assert case.label.dtype == np.int64


def test_slope_point_one_is_not_exact_in_nibabel(tmp_path):
    """The premise: nibabel's read of slope 0.1 is off an integer, so the old exact check refused it."""
    path = _write_scaled(tmp_path / "a.nii.gz", _labels(), 0.1, 0.0)
    scaled = np.asanyarray(nib.load(path).dataobj)
    assert (scaled != np.round(scaled)).any()
    data, _ = read_label(CaseFiles("a", path))
    np.testing.assert_array_equal(data[0], _labels())


def test_scaled_nifti2_label(tmp_path):
    lab = _labels()
    path = _write_scaled(tmp_path / "a.nii", lab, 0.1, 3.0, nifti2=True)
    case = load_case(CaseFiles("a", path, seg=_seg(tmp_path / "a_seg.nii.gz", lab)), num_classes=3)
    np.testing.assert_array_equal(case.label, lab)


def test_scaled_segmentation_reads_as_its_integers(tmp_path):
    """The predicted segmentation is a label map too, read by the same rule."""
    lab = _labels()
    seg = _write_scaled(tmp_path / "a_seg.nii.gz", lab, 0.1, 0.0)
    case = load_case(CaseFiles("a", _seg(tmp_path / "a.nii.gz", lab), seg=seg), num_classes=3)
    np.testing.assert_array_equal(case.seg, lab)


def test_scaled_label_of_a_region_evaluation(tmp_path):
    """BraTS-style labels (0, 1, 2, 4) with scaling, read with ``multilabel=True`` (evaluate --regions)."""
    lab = _labels()
    lab[lab == 2] = 4
    path = _write_scaled(tmp_path / "a.nii.gz", lab, 0.1, 0.0)
    masks = np.stack([lab > 0, lab == 4]).astype(np.uint8)
    seg = tmp_path / "a_seg.nii.gz"
    nib.save(nib.Nifti1Image(np.moveaxis(masks, 0, -1), np.diag([1.5, 1.0, 2.0, 1.0])), seg)
    case = load_case(CaseFiles("a", path, seg=seg), 2, multilabel=True)
    np.testing.assert_array_equal(case.label, lab)


def test_fractional_float_label_still_refused(tmp_path):
    lab = _labels().astype(np.float32)
    lab[2, 2, 1] = 0.5
    path = tmp_path / "a.nii.gz"
    nib.save(nib.Nifti1Image(lab, np.diag([1.5, 1.0, 2.0, 1.0])), path)
    with pytest.raises(CaseError, match=r"label map must hold integer classes, found values such as \[0\.5\]"):
        load_case(CaseFiles("a", path, seg=_seg(tmp_path / "a_seg.nii.gz", _labels())), num_classes=3)


@pytest.mark.parametrize("slope, inter", [(0.5, 0.0), (0.5, 3.0), (0.1, 0.0)])
def test_fractional_scaled_label_still_refused(tmp_path, slope, inter):
    """A scaled file whose value is truly fractional (stored 5 with slope 0.5: 2.5) is no label map."""
    lab = _labels().astype(np.float64)
    lab[2, 2, 1] = 1.5
    path = _write_scaled(tmp_path / "a.nii.gz", lab, slope, inter)
    assert np.isclose(np.asanyarray(nib.load(path).dataobj)[2, 2, 1], 1.5)
    with pytest.raises(CaseError, match=r"label map must hold integer classes, found values such as \[1\.5"):
        load_case(CaseFiles("a", path, seg=_seg(tmp_path / "a_seg.nii.gz", _labels())), num_classes=3)


def test_scaled_label_off_by_more_than_rounding_refused(tmp_path):
    """1 + 1e-4 is no rounding of slope 1e-4 (its bound is about 1e-7 for labels below 10): refused."""
    lab = _labels()
    raw = np.round(lab / 1e-4).astype(np.int32)
    raw[2, 2, 1] = 10001  # 1.0001 with slope 1e-4
    img = nib.Nifti1Image(raw, np.diag([1.5, 1.0, 2.0, 1.0]))
    img.header.set_slope_inter(1e-4, 0.0)
    nib.save(img, tmp_path / "a.nii.gz")
    with pytest.raises(CaseError, match="label map must hold integer classes"):
        load_case(CaseFiles("a", tmp_path / "a.nii.gz", seg=_seg(tmp_path / "a_seg.nii.gz", lab)), num_classes=3)


def test_evaluate_of_scaled_labels_gives_the_metrics_of_the_integers(tmp_path):
    """``monai-unc evaluate`` (with lesion metrics) on the toy cohort, its labels rewritten with slope 0.1 and
    intercept 3: the same ``metrics.csv`` as the original labels (it exited 1, every case failed, before)."""
    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(10, 10, 10))
    scaled = tmp_path / "scaled_labels"
    scaled.mkdir()
    for f in sorted(data["labels"].glob("*.nii.gz")):
        img = nib.load(f)
        lab = np.asarray(img.dataobj).astype(np.int64)
        out = nib.Nifti1Image(np.round((lab - 3.0) / 0.1).astype(np.int16), img.affine, img.header)
        out.header.set_data_dtype(np.int16)
        out.header.set_slope_inter(0.1, 3.0)
        nib.save(out, scaled / f.name)
        assert (np.asarray(nib.load(scaled / f.name).dataobj) != lab).any()  # nibabel's floats are off the integers
    rows = {}
    for name, labels in (("plain", data["labels"]), ("scaled", scaled)):
        assert main(["evaluate", "-l", str(labels), "-p", str(data["predictions"]), "-o", str(tmp_path / f"ev_{name}"),
                     "--lesions", "-q"]) == 0
        rows[name] = read_csv(tmp_path / f"ev_{name}" / "metrics.csv")
    assert rows["scaled"] == rows["plain"]
