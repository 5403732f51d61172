"""Review 61: uncertainty maps of a region-based model written one file per region (``<case>_<measure>_<region>``:
nnU-Net's export of a 2D NIfTI image, or of a format without 4D images) are not read by :func:`match_cases`, which
reads one ``<case>_<measure>`` file per measure. They were left out without a word (the cases evaluated without their
maps) or, with ``measures``, refused as "no uncertainty map" without saying why: now a warning (and the refusal) names
such a file and why it is not read."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

import nibabel as nib  # noqa: E402
from nnunetv2.imageio.simpleitk_reader_writer import SimpleITKIO  # noqa: E402

from monai_unc.io import CaseError, match_cases  # noqa: E402
from monai_unc.nnunet.export import write_region_maps  # noqa: E402

AFFINE = np.array([[0.7, 0.0, 0.0, 3.0], [0.0, 0.8, 0.0, -2.0], [0.0, 0.0, 2.5, 5.0], [0.0, 0.0, 0.0, 1.0]])
SHAPE = (17, 19)


def _nnunet_folders(tmp_path):
    """labels/, pred/ (nnU-Net layout) with case c1 of a 2D NIfTI image, its maps written by the real writer."""
    (tmp_path / "labels").mkdir()
    (tmp_path / "pred" / "uncertainty").mkdir(parents=True)
    image_file = tmp_path / "c1_0000.nii.gz"
    nib.save(nib.Nifti1Image(np.zeros(SHAPE, np.float32), AFFINE), str(image_file))
    _, props = SimpleITKIO().read_images([str(image_file)])
    maps = np.random.default_rng(0).uniform(0, 0.7, size=(2, 1, *SHAPE[::-1])).astype(np.float32)
    written = write_region_maps(SimpleITKIO(), maps, tmp_path / "pred" / "uncertainty" / "c1_mutual_information.nii.gz",
                                props, ["WT", "TC"])
    assert [p.name for p in written] == ["c1_mutual_information_WT.nii.gz", "c1_mutual_information_TC.nii.gz"]
    seg = np.zeros(SHAPE, np.uint8)
    seg[4:9, 5:11] = 1
    nib.save(nib.Nifti1Image(seg, AFFINE), str(tmp_path / "labels" / "c1.nii.gz"))
    nib.save(nib.Nifti1Image(seg, AFFINE), str(tmp_path / "pred" / "c1.nii.gz"))
    return tmp_path / "labels", tmp_path / "pred"


def test_per_region_map_files_are_not_left_out_without_a_word(tmp_path):
    labels, pred = _nnunet_folders(tmp_path)
    with pytest.warns(UserWarning, match=r"c1_mutual_information_TC\.nii\.gz .* is not read: .* one file per region"):
        cases = match_cases(labels, pred, layout="nnunet")
    assert [c.case_id for c in cases] == ["c1"] and cases[0].maps == {}


def test_the_measure_asked_for_names_the_per_region_file(tmp_path):
    labels, pred = _nnunet_folders(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(CaseError, match=r"no uncertainty map .*mutual_information.*c1_mutual_information_TC\.nii"
                                            r"\.gz there is one region's map"):
            match_cases(labels, pred, layout="nnunet", measures=["mutual_information"])


def test_no_warning_for_files_that_are_read_or_belong_to_another_case(tmp_path):
    """A case 'c1_variance' beside 'c1' (monai-unc layout, maps beside the segmentations): its segmentation
    c1_variance_seg and its map c1_variance_variance are read, no region map of c1; nor is a map measured with
    no measure read (measures=[])."""
    for folder in ("labels", "pred"):
        (tmp_path / folder).mkdir()
    for cid in ("c1", "c1_variance"):
        nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.uint8), np.eye(4)), str(tmp_path / "labels" / f"{cid}.nii.gz"))
        nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.uint8), np.eye(4)), str(tmp_path / "pred" / f"{cid}_seg.nii.gz"))
        nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.float32), np.eye(4)),
                 str(tmp_path / "pred" / f"{cid}_variance.nii.gz"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        cases = match_cases(tmp_path / "labels", tmp_path / "pred")
    assert [sorted(c.maps) for c in cases] == [["variance"], ["variance"]]
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.float32), np.eye(4)),
             str(tmp_path / "pred" / "c1_variance_WT.nii.gz"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        match_cases(tmp_path / "labels", tmp_path / "pred", measures=[])
    with pytest.warns(UserWarning, match=r"c1_variance_WT\.nii\.gz"):
        match_cases(tmp_path / "labels", tmp_path / "pred")
