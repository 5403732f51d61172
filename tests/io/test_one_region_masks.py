"""A one-region sigmoid prediction (``infer --activation sigmoid --regions '{"ET": [4]}'``) writes its mask as a 4D
NIfTI ``(X, Y, Z, 1)`` (docs/regions.md: ``<case>_seg`` region masks ``(X, Y, Z, R)``). Read with one channel like a
label map, it was converted with the spec as one: the mask's value 1 is in no region, so a perfect prediction had
Dice 0, exit 0 (and once predicted label maps were checked for unclaimed labels, it was refused, the remedy offered,
``--ignore-unclaimed-labels``, giving Dice 0 again). Found by hostile review."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np

from monai_unc.cli import main
from monai_unc.io import CaseFiles, load_case, save_region_maps


def _case(root: Path) -> tuple[Path, Path, np.ndarray]:
    labels, pred = root / "labels", root / "pred"
    labels.mkdir()
    pred.mkdir()
    lab = np.zeros((16, 16, 8), np.uint8)
    lab[4:10, 4:10, 2:6] = 4
    lab[6:8, 6:8, 3:5] = 1  # a label of another region, outside the spec's
    nib.save(nib.Nifti1Image(lab, np.eye(4)), labels / "c.nii.gz")
    mask = (lab == 4)[None].astype(np.uint8)
    save_region_maps(mask, np.eye(4), pred / "c_seg.nii.gz", dtype="uint8")
    save_region_maps(np.where(mask, 0.9, 0.1).astype(np.float32), np.eye(4), pred / "c_probs.nii.gz")
    save_region_maps(np.full(mask.shape, 0.1, np.float32), np.eye(4), pred / "c_predictive_entropy.nii.gz")
    return labels, pred, lab


def test_a_one_region_mask_is_evaluated_as_that_region(tmp_path):
    labels, pred, lab = _case(tmp_path)
    assert nib.load(pred / "c_seg.nii.gz").shape == (16, 16, 8, 1)
    out = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "--regions", '{"ET": [4]}',
                     "--no-spatial", "--ignore-unclaimed-labels", "-q"]) == 0
    row = next(csv.DictReader(open(out / "metrics.csv", newline="")))
    assert float(row["dice_ET"]) == 1.0  # was 0.0: the mask read as label 1
    case = load_case(CaseFiles("c", labels / "c.nii.gz", seg=pred / "c_seg.nii.gz"), 1, multilabel=True)
    assert case.seg.shape == (1, *lab.shape) and np.array_equal(case.seg[0], lab == 4)


def test_label_maps_with_one_channel_stay_label_maps(tmp_path):
    """nnU-Net's 3D label map, a 4D one-channel label map with other labels and any spec of several regions: as
    before, converted with the spec."""
    labels, pred, lab = _case(tmp_path)
    files = CaseFiles("c", labels / "c.nii.gz", seg=tmp_path / "seg3d.nii.gz")
    nib.save(nib.Nifti1Image((lab == 4).astype(np.uint8), np.eye(4)), files.seg)  # 3D 0/1: a label map
    assert load_case(files, 1, multilabel=True).seg.shape == lab.shape
    nib.save(nib.Nifti1Image(lab[..., None], np.eye(4)), tmp_path / "seg4d.nii.gz")  # 4D with labels 1 and 4
    files = CaseFiles("c", labels / "c.nii.gz", seg=tmp_path / "seg4d.nii.gz")
    assert np.array_equal(load_case(files, 1, multilabel=True).seg, lab)
    files = CaseFiles("c", labels / "c.nii.gz", seg=pred / "c_seg.nii.gz")  # 0/1, but a spec of two regions
    assert load_case(files, 2, multilabel=True).seg.shape == lab.shape


def test_a_one_region_reference_mask_is_that_region(tmp_path):
    """The reference of one region written as its 4D ``(X, Y, Z, 1)`` 0/1 mask (as the prediction is) is that region's
    mask, by the segmentation's rule: it was read as the label map of label 1, which no region holds (refused, or
    with --ignore-unclaimed-labels an empty reference: Dice 0)."""
    labels, pred, lab = _case(tmp_path)
    mask = (lab == 4)[None].astype(np.uint8)
    (labels / "c.nii.gz").unlink()
    save_region_maps(mask, np.eye(4), labels / "c.nii.gz", dtype="uint8")
    case = load_case(CaseFiles("c", labels / "c.nii.gz", seg=pred / "c_seg.nii.gz"), 1, multilabel=True)
    assert case.label.shape == (1, *lab.shape) and np.array_equal(case.label[0], lab == 4)
    out = tmp_path / "ev"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "--regions", '{"ET": [4]}',
                     "--no-spatial", "-q"]) == 0
    assert float(next(csv.DictReader(open(out / "metrics.csv", newline="")))["dice_ET"]) == 1.0
    # a 3D 0/1 reference stays a label map (label 1, which this spec's region does not hold: refused as before)
    nib.save(nib.Nifti1Image(mask[0], np.eye(4)), labels / "c.nii.gz")
    assert load_case(CaseFiles("c", labels / "c.nii.gz", seg=pred / "c_seg.nii.gz"), 1, multilabel=True).label.ndim == 3
