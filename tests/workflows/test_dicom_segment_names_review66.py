"""``dicom-export`` names the segments after the class names the run already knows (review 66).

Every segment was ``class N`` unless a ``--segments`` file named it, although the names were known: given to
``evaluate --class-names`` (its ``summary.json``), in the ``dataset.json`` nnU-Net writes beside its predictions, or
given to ``dicom-export --class-names``. The precedence is the ``--segments`` file, then ``--class-names``, then
``--evaluation``'s ``summary.json``, then the ``dataset.json`` beside nnU-Net's predictions, then ``class N``; each
name is checked as a segments file's name is (1 to 64 bytes of UTF-8, no backslash or control character).
"""

from __future__ import annotations

import json
import warnings

import nibabel as nib
import numpy as np
import pytest

pydicom = pytest.importorskip("pydicom", reason="needs the dicom extra")
pytest.importorskip("highdicom", reason="needs the dicom extra")

from monai_unc.cli import main  # noqa: E402
from monai_unc.io import write_csv  # noqa: E402
from monai_unc.io.dicom import write_series  # noqa: E402
from tests.io.dicom._series import dciodvfy_errors  # noqa: E402

SHAPE = (6, 5, 4)
AFFINE = np.diag([0.8, 0.8, 2.0, 1.0])
NAMES = ["background", "Ödem", "enhancing tumour"]  # non-ASCII: the objects declare UTF-8


def _label() -> np.ndarray:
    label = np.zeros(SHAPE, np.uint8)
    label[1:4, 1:3, 1:3] = 1
    label[2:3, 2:3, 2] = 2
    return label


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """One tiny MR series ``c1`` and its predictions in both layouts: ``pred`` (monai-unc: segmentation,
    probabilities) and ``nnpred`` (nnunet: ``c1.nii.gz`` alone, whose ``dataset.json`` each test writes)."""
    root = tmp_path_factory.mktemp("segnames")
    write_series(np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE), AFFINE, root / "series" / "c1",
                 modality="MR")
    label = _label()
    probs = np.stack([label == c for c in range(3)], -1).astype(np.float32)
    (root / "pred").mkdir()
    nib.save(nib.Nifti1Image(label, AFFINE), root / "pred" / "c1_seg.nii.gz")
    nib.save(nib.Nifti1Image(probs, AFFINE), root / "pred" / "c1_probs.nii.gz")
    return root


def _argv(source, out, *extra, pred="pred"):
    return ["dicom-export", "-p", str(source / pred), "-s", str(source / "series"), "-o", str(out), "-q", *extra]


def _labels(path) -> list[str]:
    return [str(s.SegmentLabel) for s in pydicom.dcmread(path, stop_before_pixels=True).SegmentSequence]


def _nnunet_predictions(source, folder, labels, label=None):
    pred = source / folder
    pred.mkdir()
    nib.save(nib.Nifti1Image(_label() if label is None else label, AFFINE), pred / "c1.nii.gz")
    (pred / "dataset.json").write_text(json.dumps({"channel_names": {"0": "MR"}, "labels": labels,
                                                   "file_ending": ".nii.gz"}), encoding="utf-8")
    return pred


def test_class_names_name_the_segments(source):
    out = source / "out_names"
    assert main(_argv(source, out, "--class-names", *NAMES)) == 0
    assert _labels(out / "c1" / "seg.dcm") == NAMES[1:]
    assert _labels(out / "c1" / "probabilities.dcm") == NAMES[1:]  # the FRACTIONAL SEG's segments too
    assert dciodvfy_errors(out / "c1" / "seg.dcm") == []
    seg = json.loads((out / "dicom_export.json").read_text(encoding="utf-8"))["cases"]["c1"]["objects"][0]
    assert seg["kind"] == "segmentation"
    assert [(s["class"], s["name"], s["name_from"]) for s in seg["segments"]] == [
        (1, "Ödem", "class_names"), (2, "enhancing tumour", "class_names")]


def test_segments_file_comes_first_then_class_names(source):
    specs = source / "segments.json"
    specs.write_text(json.dumps({"1": {"name": "Oedema"}}))
    out = source / "out_both"
    assert main(_argv(source, out, "--segments", str(specs), "--class-names", *NAMES)) == 0
    assert _labels(out / "c1" / "seg.dcm") == ["Oedema", "enhancing tumour"]
    seg = json.loads((out / "dicom_export.json").read_text(encoding="utf-8"))["cases"]["c1"]["objects"][0]
    assert [s["name_from"] for s in seg["segments"]] == ["segments", "class_names"]


def test_evaluation_summary_names_the_segments(source):
    evaluation = source / "evaluation"
    evaluation.mkdir()
    write_csv(evaluation / "metrics.csv", [{"case": "c1", "dice": 0.9}])
    (evaluation / "summary.json").write_text(json.dumps({"n_cases": 1, "class_names": NAMES}), encoding="utf-8")
    out = source / "out_eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the folder records no inputs: not checked (said)
        assert main(_argv(source, out, "--evaluation", str(evaluation))) == 0
    assert _labels(out / "c1" / "seg.dcm") == NAMES[1:]
    # given explicitly, --class-names comes before the evaluation's names
    out = source / "out_eval_explicit"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(_argv(source, out, "--evaluation", str(evaluation), "--class-names", "bg", "a", "b")) == 0
    assert _labels(out / "c1" / "seg.dcm") == ["a", "b"]


def test_nnunet_dataset_json_names_the_segments(source):
    _nnunet_predictions(source, "nnpred", {"background": 0, "edema": 1, "enhancing": 2})
    out = source / "out_nnunet"
    assert main(_argv(source, out, "--layout", "nnunet", pred="nnpred")) == 0
    assert _labels(out / "c1" / "seg.dcm") == ["edema", "enhancing"]
    assert dciodvfy_errors(out / "c1" / "seg.dcm") == []
    seg = json.loads((out / "dicom_export.json").read_text(encoding="utf-8"))["cases"]["c1"]["objects"][0]
    assert {s["name_from"] for s in seg["segments"]} == {"dataset.json"}


def test_named_class_absent_from_the_case_keeps_its_segment(source):
    """Without probabilities a label map without the highest class still gets its (empty) named segment."""
    label = _label()
    label[label == 2] = 1
    _nnunet_predictions(source, "nnpred_low", {"background": 0, "edema": 1, "enhancing": 2, "ignore": 3}, label)
    out = source / "out_low"
    assert main(_argv(source, out, "--layout", "nnunet", pred="nnpred_low")) == 0
    assert _labels(out / "c1" / "seg.dcm") == ["edema", "enhancing"]  # nnU-Net's ignore label is no segment


@pytest.mark.parametrize("bad", [["bg", "a\\b", "c"], ["bg", "Ü" * 33, "c"], ["bg", "tab\there", "c"],
                                 ["bg", "same", "Same"], ["bg", "a"], ["bg", "a", "b", "c"]])
def test_bad_class_names_are_one_line_exit_2(source, capsys, bad):
    out = source / "out_bad"
    assert main(_argv(source, out, "--class-names", *bad)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--class-names" in err, err
    assert not (out / "c1" / "seg.dcm").exists()


@pytest.mark.parametrize("labels", [{"background": 0, "edema\nnew line": 1, "enhancing": 2},
                                    {"background": 0, "e" * 65: 1, "enhancing": 2},
                                    {"background": 0, "edema": 1, "Edema": 2}])
def test_recorded_dataset_json_names_no_segment_can_hold_are_warned_not_used(source, labels, capsys):
    """The export worked before it read nnU-Net's names: a name it cannot write does not stop it now."""
    pred = _nnunet_predictions(source, f"nnpred_bad{len(list(source.glob('nnpred_bad*')))}", labels)
    out = source / f"out_{pred.name}"
    assert main(_argv(source, out, "--layout", "nnunet", pred=pred.name)) == 0
    err = capsys.readouterr().err
    assert "warning: segment names:" in err and "dataset.json: label" in err and "'class N'" in err, err
    assert _labels(out / "c1" / "seg.dcm") == ["class 1", "class 2"]


def test_class_names_before_dataset_json_and_the_difference_is_said(source, capsys):
    _nnunet_predictions(source, "nnpred_other", {"background": 0, "edema": 1, "enhancing": 2})
    out = source / "out_other"
    assert main(_argv(source, out, "--layout", "nnunet", "--class-names", "bg", "oedema", "enhancing",
                      pred="nnpred_other")) == 0
    assert _labels(out / "c1" / "seg.dcm") == ["oedema", "enhancing"]
    err = capsys.readouterr().err
    assert "dataset.json names class 1 'edema', class_names (--class-names) 'oedema'" in err, err


def test_recorded_evaluation_names_no_segment_can_hold_are_warned_not_used(source, capsys):
    evaluation = source / "evaluation_bad"
    evaluation.mkdir()
    write_csv(evaluation / "metrics.csv", [{"case": "c1", "dice": 0.9}])
    (evaluation / "summary.json").write_text(json.dumps({"n_cases": 1, "class_names": ["b" * 80, "a\\b", "c"]}))
    out = source / "out_eval_bad"
    assert main(_argv(source, out, "--evaluation", str(evaluation))) == 0
    err = capsys.readouterr().err
    assert "warning: segment names:" in err and "summary.json: class_names[1]" in err and "'class N'" in err, err
    assert _labels(out / "c1" / "seg.dcm") == ["class 1", "class 2"]


def test_recorded_evaluation_names_of_a_bad_shape_are_one_line_exit_2(source, capsys):
    evaluation = source / "evaluation_shape"
    evaluation.mkdir()
    write_csv(evaluation / "metrics.csv", [{"case": "c1", "dice": 0.9}])
    (evaluation / "summary.json").write_text(json.dumps({"n_cases": 1, "class_names": "bg,a,b"}))
    out = source / "out_eval_shape"
    assert main(_argv(source, out, "--evaluation", str(evaluation))) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "summary.json: class_names" in err, err
    assert not (out / "c1" / "seg.dcm").exists()
