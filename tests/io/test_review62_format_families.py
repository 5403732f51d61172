"""Hostile review of review 62: nnU-Net's other image formats must not change how NIfTI folders are read.

Review 62 made ``match_cases`` (``evaluate``, ``triage``, the products) read ``.tif`` / ``.tiff`` / ``.png`` / ``.bmp``
labels, segmentations and maps, and ``.npz`` maps, in every folder. A folder of NIfTI volumes that also holds a PNG or
TIFF (a QC snapshot ``case01.png`` beside ``case01.nii.gz``, an ``overview.png``, a rendered map
``case01_predictive_entropy.png``), which every earlier version evaluated, was then refused: "two files" for the case,
or a labelled case "overview" without a prediction. nnU-Net writes one file ending per dataset, so a folder is read in
one family of formats: its volumes where it holds any for the role, else nnU-Net's other image formats.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from PIL import Image

from monai_unc.io import match_cases, save_nifti


def _nifti_cohort(root, layout="monai-unc"):
    labels, pred = root / "labels", root / "pred"
    unc = pred if layout == "monai-unc" else pred / "uncertainty"
    for folder in (labels, pred, unc):
        folder.mkdir(parents=True, exist_ok=True)
    seg = "_seg" if layout == "monai-unc" else ""
    for cid in ("case01", "case02"):
        mask = np.zeros((6, 6, 4), np.uint8)
        mask[1:4, 1:4, 1:3] = 1
        save_nifti(mask, np.eye(4), labels / f"{cid}.nii.gz")
        save_nifti(mask, np.eye(4), pred / f"{cid}{seg}.nii.gz")
        save_nifti(np.full((6, 6, 4), 0.25, np.float32), np.eye(4), unc / f"{cid}_predictive_entropy.nii.gz")
    return labels, pred, unc, seg


def _snapshot(path):
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(path)  # an RGB screenshot: no label map


def _match(labels, pred, layout):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning either: the folder is read as before
        return match_cases(labels, pred, layout=layout, measures=["predictive_entropy"])


@pytest.mark.parametrize("layout", ["monai-unc", "nnunet"])
def test_snapshots_beside_nifti_volumes_are_not_read(tmp_path, layout):
    labels, pred, unc, seg = _nifti_cohort(tmp_path, layout)
    _snapshot(labels / "overview.png")  # was: labelled case 'overview' has no segmentation
    _snapshot(labels / "case01.png")  # was: case 'case01': two files in labels
    _snapshot(pred / f"case02{seg}.png")  # was: two files in pred
    _snapshot(unc / "case01_predictive_entropy.png")  # a rendered map: was two files
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(unc / "case02_predictive_entropy.tif")
    np.savez(unc / "case02_predictive_entropy.npz", map=np.zeros((1, 8, 8), np.float32))
    found = _match(labels, pred, layout)
    assert [c.case_id for c in found] == ["case01", "case02"]
    for case in found:
        assert case.label.name == f"{case.case_id}.nii.gz"
        assert case.seg.name == f"{case.case_id}{seg}.nii.gz"
        assert case.maps["predictive_entropy"].name == f"{case.case_id}_predictive_entropy.nii.gz"


def test_a_folder_of_nnunet_image_files_only_is_still_read(tmp_path):
    labels, pred, unc = tmp_path / "labels", tmp_path / "pred", tmp_path / "pred" / "uncertainty"
    unc.mkdir(parents=True)
    labels.mkdir()
    for cid in ("a", "b"):
        mask = np.zeros((5, 7), np.uint8)
        mask[1:3, 2:5] = 1
        Image.fromarray(mask).save(labels / f"{cid}.png")
        Image.fromarray(mask).save(pred / f"{cid}.png")
        np.savez(unc / f"{cid}_predictive_entropy.npz", map=np.zeros((1, 5, 7), np.float32))
    found = _match(labels, pred, "nnunet")
    assert [(c.label.name, c.seg.name, c.maps["predictive_entropy"].name) for c in found] == [
        ("a.png", "a.png", "a_predictive_entropy.npz"), ("b.png", "b.png", "b_predictive_entropy.npz")]
