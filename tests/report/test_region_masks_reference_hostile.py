"""The report of a region evaluation whose references are R 0/1 region masks (a 4-D label file): its case figures
must draw the case's regions (hostile review of the label spaces: the masks were read as a label map and drawn as
other regions)."""

import warnings

import nibabel as nib
import numpy as np

from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.regions import label_to_regions
from monai_unc.report import html
from monai_unc.report.html import build_report, region_display
from tests._cases import BRATS_REGIONS, write_brats_like_cohort


def test_region_display_of_region_mask_references_equals_that_of_the_label_map():
    lab = np.zeros((6, 6, 6), np.int64)
    lab[1:5, 1:5, 1:5] = 2
    lab[2:4, 2:4, 2:4] = 4
    lab[2, 2, 2] = 1
    masks = np.asarray(label_to_regions(lab, BRATS_REGIONS))
    u = np.zeros((3, 6, 6, 6))
    s_map, l_map, _, names = region_display(masks, lab, u, BRATS_REGIONS, 3)
    s_masks, l_masks, _, names2 = region_display(masks, masks.astype(np.uint8), u, BRATS_REGIONS, 3)
    assert names == names2 == ["background", "WT", "TC", "ET"]
    assert np.array_equal(l_map, l_masks) and np.array_equal(s_map, s_masks) and s_masks.shape == lab.shape
    assert np.bincount(l_masks.ravel(), minlength=4).tolist() == [152, 56, 1, 7]


def test_report_draws_the_regions_of_region_mask_references(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    dirs = write_brats_like_cohort(tmp_path / "data", n_cases=3)
    masks_dir = tmp_path / "data" / "masks"
    masks_dir.mkdir()
    expected = {}
    for path in sorted(dirs["labels"].glob("*.nii.gz")):  # the same references as 4-D region masks (TC, WT, ET)
        img = nib.load(path)
        lab = np.asarray(img.dataobj)
        masks = np.asarray(label_to_regions(lab, BRATS_REGIONS)).astype(np.uint8)
        nib.save(nib.Nifti1Image(np.moveaxis(masks, 0, -1), img.affine), masks_dir / path.name)
        expected[path.name.split(".")[0]] = region_display(masks, lab, np.zeros(masks.shape), BRATS_REGIONS)[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_evaluate(masks_dir, dirs["predictions"], tmp_path / "eval", EvaluationConfig(regions=BRATS_REGIONS,
                                                                                          spatial=False))
    drawn = {}
    real = html.plot_case_overlay

    def spy(case_id, seg, label, *args, **kwargs):
        drawn[case_id] = (np.asarray(seg), None if label is None else np.asarray(label))
        return real(case_id, seg, label, *args, **kwargs)

    monkeypatch.setattr(html, "plot_case_overlay", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_report(tmp_path / "eval", viewer=False)
    assert drawn
    for cid, (seg, label) in drawn.items():
        assert seg.shape == label.shape == expected[cid].shape
        assert np.array_equal(label, expected[cid]), cid
