"""SEG labels are read by segment number; a SEG whose segment names say other classes is refused (reviews 57, 58).

Tools number a SEG's segments in the order they were made (a 3D Slicer segmentation exported with its "tumour"
segment first), while ``evaluate`` reads segment ``s`` as label ``s``: with ``--class-names`` naming the classes, a
segment named after another class than the one its number gives swapped the classes' Dice without a word (review 57).
Review 58: a class named ``right_kidney`` (a command line's name) did not match the segment ``Right kidney`` of another
tool, so the swap of two such segments was read without a word; two segments named after one class got the hint
``--seg-label-values 2,2``, which the option refuses (its values are distinct); a named segment without a
``--seg-label-values`` value was "read as label None".
"""

from __future__ import annotations

import csv
import warnings

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.evaluation import EvaluationConfig  # noqa: E402
from monai_unc.evaluation.case import load_evaluation_case  # noqa: E402
from monai_unc.io import CaseError, CaseFiles  # noqa: E402
from monai_unc.io.dicom import (  # noqa: E402
    DicomSegError,
    check_segment_classes,
    default_segment,
    read_series,
    write_segmentation,
    write_series,
)

NAMES = ["background", "edema", "tumour"]
KIDNEYS = ["background", "left_kidney", "right_kidney"]


def _seg(tmp_path, names, numbers=(1, 2)):
    write_series(np.zeros((5, 4, 3)), np.eye(4), tmp_path / "series", modality="MR")
    series = read_series(tmp_path / "series", pixels=False)
    labels = np.zeros((5, 4, 3), np.uint8)
    labels[1:3, 1, 1], labels[3, 2, 2] = numbers[0], numbers[1]
    segments = [default_segment(n, name) for n, name in zip(numbers, names)]
    return write_segmentation(labels, series, tmp_path / "seg.dcm", segments), labels


def test_names_that_agree_pass(tmp_path):
    path, _ = _seg(tmp_path, ["Edema", "  TUMOUR "])  # case and spaces aside, as dicom-export compares names
    check_segment_classes(path, NAMES)


def test_unrelated_names_are_read_by_number(tmp_path):
    path, _ = _seg(tmp_path, ["Segment_1", "Segment_2"])
    check_segment_classes(path, NAMES)


def test_swapped_names_are_refused_with_the_mapping(tmp_path):
    path, _ = _seg(tmp_path, ["tumour", "edema"])
    with pytest.raises(DicomSegError) as e:
        check_segment_classes(path, NAMES)
    msg = str(e.value)
    assert "\n" not in msg and "seg.dcm" in msg
    assert "segment 1 is named 'tumour', the name of class 2, but it is read as label 1 ('edema')" in msg
    assert "--seg-label-values 2,1" in msg
    check_segment_classes(path, NAMES, label_values=[2, 1])  # the suggested mapping reads them right


def test_one_named_segment_in_the_wrong_place(tmp_path):
    path, _ = _seg(tmp_path, ["Segment_1", "edema"])
    with pytest.raises(DicomSegError, match="segment 2 is named 'edema', the name of class 1") as e:
        check_segment_classes(path, NAMES)
    assert "--seg-label-values" not in str(e.value)  # no mapping to suggest: segment 1 names no class


def test_background_name(tmp_path):
    path, _ = _seg(tmp_path, ["Background", "tumour"])
    with pytest.raises(DicomSegError, match="the name of class 0"):
        check_segment_classes(path, NAMES)


def test_not_a_dicom_file(tmp_path):
    (tmp_path / "x.dcm").write_text("no")
    with pytest.raises(DicomSegError, match="not a readable DICOM file"):
        check_segment_classes(tmp_path / "x.dcm", NAMES)


def _case(tmp_path, seg_names):
    path, labels = _seg(tmp_path, seg_names)
    series = read_series(tmp_path / "series", pixels=False)
    pred = tmp_path / "pred"
    pred.mkdir()
    p = np.stack([labels == c for c in range(3)]).astype(np.float32) * 0.8 + 0.2 / 3
    nib.save(nib.Nifti1Image(np.moveaxis(p, 0, -1), series.affine), pred / "seg_probs.nii.gz")
    return CaseFiles("seg", path, probs=pred / "seg_probs.nii.gz", image=tmp_path / "series")


def test_evaluation_case_refused_with_class_names_only(tmp_path):
    files = _case(tmp_path, ["tumour", "edema"])
    with pytest.raises(CaseError, match="case 'seg': DICOM SEG seg.dcm: segment 1 is named 'tumour'"):
        load_evaluation_case(files, EvaluationConfig(class_names=NAMES))
    assert load_evaluation_case(files, EvaluationConfig()).label.max() == 2  # without names: read by number
    case = load_evaluation_case(files, EvaluationConfig(class_names=NAMES, seg_label_values=[2, 1]))
    assert sorted(np.unique(case.label).tolist()) == [0, 1, 2]


def _renamed_seg(tmp_path, names, labels=None):
    """A SEG of two segments on a 6 x 5 x 4 series, then named ``names`` (any names, as another tool writes)."""
    write_series(np.zeros((6, 5, 4)), np.eye(4), tmp_path / "images" / "c1", modality="MR")
    series = read_series(tmp_path / "images" / "c1", pixels=False)
    if labels is None:
        labels = np.zeros((6, 5, 4), np.uint8)
        labels[1, 1, 1], labels[2, 2, 2] = 1, 2
    (tmp_path / "labels").mkdir(exist_ok=True)
    path = write_segmentation(labels, series, tmp_path / "labels" / "c1.dcm",
                              [default_segment(1, "x"), default_segment(2, "y")])
    ds = pydicom.dcmread(path)
    for item, name in zip(ds.SegmentSequence, names):
        item.SegmentLabel = name
    ds.save_as(path)
    return path, series


def test_underscore_is_a_space(tmp_path):
    path, _ = _renamed_seg(tmp_path, ["Right kidney", "Left kidney"])  # 3D Slicer's names, in the order drawn
    with pytest.raises(DicomSegError, match=r"segment 1 is named 'Right kidney', the name of class 2.*"
                                            r"--seg-label-values 2,1"):
        check_segment_classes(path, KIDNEYS)
    check_segment_classes(path, KIDNEYS, label_values=[2, 1])
    path, _ = _renamed_seg(tmp_path / "b", ["Left  Kidney", "right kidney"])
    check_segment_classes(path, KIDNEYS)  # agree
    path, _ = _renamed_seg(tmp_path / "c", ["Segment_1", "Segment_2"])
    check_segment_classes(path, KIDNEYS)  # named as no class: by number


def test_no_hint_of_repeated_values(tmp_path):
    path, _ = _renamed_seg(tmp_path, ["tumour", "Tumour"])
    with pytest.raises(DicomSegError, match="segment 1 is named 'tumour', the name of class 2") as e:
        check_segment_classes(path, NAMES)
    assert "--seg-label-values" not in str(e.value)
    # what the hint suggested: refused (since review 67 when the config is built, naming the repeated value)
    with pytest.raises(ValueError, match="seg_label_values lists 1 value.s. more than once: 2"):
        EvaluationConfig(class_names=NAMES, seg_label_values=[2, 2]).validate()


def test_segment_without_a_value(tmp_path):
    path, _ = _renamed_seg(tmp_path, ["edema", "tumour"])
    with pytest.raises(DicomSegError) as e:
        check_segment_classes(path, NAMES, label_values=[1])
    msg = str(e.value)
    assert "None" not in msg and "segment 2 is named 'tumour', the name of class 2, but --seg-label-values gives it " \
                                "no label (1 value(s))" in msg, msg


@pytest.mark.slow
@pytest.mark.parametrize("extra, status", [([], 1), (["--seg-label-values", "2,1"], 0)])
def test_evaluate_reads_each_kidney_as_its_class(tmp_path, capsys, extra, status):
    truth = np.zeros((6, 5, 4), np.uint8)  # left kidney (class 1) 18 voxels, right kidney (class 2) 1 voxel
    truth[0:3, 0:3, 0:2], truth[4, 4, 3] = 1, 2
    segments = np.where(truth == 2, 1, np.where(truth == 1, 2, 0)).astype(np.uint8)  # right kidney drawn first
    _, series = _renamed_seg(tmp_path, ["Right kidney", "Left kidney"], segments)
    pred = truth.copy()
    pred[0, 0, 0] = 0  # left kidney Dice 34 / 35, right kidney 1
    p = np.stack([pred == c for c in range(3)]).astype(np.float32) * 0.8 + 0.2 / 3
    (tmp_path / "pred").mkdir()
    nib.save(nib.Nifti1Image(np.moveaxis(p, 0, -1), series.affine), tmp_path / "pred" / "c1_probs.nii.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rc = main(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(tmp_path / "pred"), "--images",
                   str(tmp_path / "images"), "--class-names", *KIDNEYS, "-o", str(tmp_path / "ev"), "--no-spatial",
                   "-q", *extra])
    err = capsys.readouterr().err
    assert rc == status, err
    if status:
        assert "segment 1 is named 'Right kidney'" in err and "--seg-label-values 2,1" in err
        return
    with open(tmp_path / "ev" / "metrics.csv") as f:
        row = next(csv.DictReader(f))
    assert float(row["dice_left_kidney"]) == pytest.approx(34 / 35, abs=1e-6)
    assert float(row["dice_right_kidney"]) == pytest.approx(1.0)
