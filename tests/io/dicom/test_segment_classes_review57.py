"""SEG labels are read by segment number; a SEG whose segment names say other classes is refused (review 57).

Tools number a SEG's segments in the order they were made (a 3D Slicer segmentation exported with its "tumour"
segment first), while ``evaluate`` reads segment ``s`` as label ``s``: with ``--class-names`` naming the classes, a
segment named after another class than the one its number gives swapped the classes' Dice without a word.
"""

from __future__ import annotations

import warnings

import nibabel as nib
import numpy as np
import pytest

pytest.importorskip("pydicom", reason="needs the dicom extra")
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


@pytest.mark.slow
def test_evaluate_command_fails_the_case_in_one_line(tmp_path, capsys):
    files = _case(tmp_path, ["tumour", "edema"])
    labels = tmp_path / "labels"
    labels.mkdir()
    files.label.rename(labels / "seg.dcm")
    images = tmp_path / "images"
    images.mkdir()
    (tmp_path / "series").rename(images / "seg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        status = main(["evaluate", "-l", str(labels), "-p", str(tmp_path / "pred"), "--images", str(images),
                       "--class-names", *NAMES, "-o", str(tmp_path / "ev"), "--no-spatial", "-q"])
    err = capsys.readouterr().err
    assert status != 0 and "segment 1 is named 'tumour'" in err and "--seg-label-values 2,1" in err, err
