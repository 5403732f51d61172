"""Label spaces as datasets define them (hostile review of the label spaces): gaps in the ids, sample label maps in
another encoding than the evaluation's classes."""

import json
import warnings

import nibabel as nib
import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.io.files import save_label_maps
from monai_unc.products.lesions import LesionMetrics


def _save(arr, path):
    nib.save(nib.Nifti1Image(np.asarray(arr), np.eye(4)), str(path))


def _gap_cohort(root, ids=(5, 17, 52)):
    """Segmentations and references keeping the ids of a larger dataset (a TotalSegmentator subset): each case's
    prediction narrower than its reference, so that its true mean Dice over the organs is below 1."""
    (root / "labels").mkdir()
    (root / "pred").mkdir()
    rng = np.random.default_rng(0)
    shape = (12, 12, 10)
    for i in range(2):
        lab = np.zeros(shape, np.uint8)
        pred = np.zeros(shape, np.uint8)
        for k, v in enumerate(ids):
            lab[1 + 3 * k: 3 + 3 * k, 2:10, 2:8] = v
            pred[1 + 3 * k: 3 + 3 * k, 2:10, 2 + 2 * i: 8 - 2 * i] = v
        _save(lab, root / "labels" / f"c{i}.nii.gz")
        _save(pred, root / "pred" / f"c{i}_seg.nii.gz")
        _save(rng.random(shape).astype(np.float32), root / "pred" / f"c{i}_predictive_entropy.nii.gz")


def test_classes_in_no_case_are_said_not_silently_scored_one(tmp_path):
    """--num-classes 53 over the ids 5, 17, 52: 49 classes that no map holds scored Dice 1 in every case and lifted
    the per-case 'dice' (0.6 -> 0.98) that failure detection reads, without a word."""
    _gap_cohort(tmp_path)
    with pytest.warns(UserWarning, match=r"in no reference and no segmentation of the 2 case\(s\)") as caught:
        _, summary, _ = run_evaluate(tmp_path / "labels", tmp_path / "pred", tmp_path / "eval",
                                     EvaluationConfig(num_classes=53, spatial=False))
    message = next(str(w.message) for w in caught if "in no reference" in str(w.message))
    assert message.startswith("class(es) 1, 2, 3, 4, 6, 7, 8, 9 and 41 more of 52 foreground classes")
    assert any("in no reference and no segmentation" in w for w in summary["warnings"])
    saved = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert any("in no reference and no segmentation" in w for w in saved["warnings"])


def test_no_absent_class_warning_when_every_class_is_held(tmp_path):
    _gap_cohort(tmp_path, ids=(1, 2, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, summary, _ = run_evaluate(tmp_path / "labels", tmp_path / "pred", tmp_path / "eval",
                                     EvaluationConfig(num_classes=4, spatial=False))
    assert not [w for w in caught if "in no reference" in str(w.message)]
    assert not [w for w in summary["warnings"] if "in no reference" in w]


def _lesion_cohort(root, sample_label):
    """Three classes (0, 1 liver, 2 tumour); per-sample label maps that write the tumour as ``sample_label``."""
    for sub in ("labels", "pred", "samples"):
        (root / sub).mkdir()
    shape = (16, 16, 16)
    for i in range(2):
        lab = np.zeros(shape, np.uint8)
        lab[2:12, 2:12, 2:12] = 1
        lab[4:8, 4:8, 4:8] = 2
        p = np.full((3, *shape), 0.05, np.float32)
        for c in range(3):
            p[c][lab == c] = 0.9
        _save(lab, root / "labels" / f"c{i}.nii.gz")
        nib.save(nib.Nifti1Image(np.moveaxis(p, 0, -1), np.eye(4)), str(root / "pred" / f"c{i}_probs.nii.gz"))
        samples = np.stack([lab.copy() for _ in range(3)])
        samples[samples == 2] = sample_label
        save_label_maps(samples, np.eye(4), root / "samples" / f"c{i}_samples.nii.gz")


def test_lesion_samples_with_a_label_outside_the_classes_are_refused(tmp_path):
    """Samples written in the dataset's own ids (tumour 4 beside classes 0..2) gave every tumour lesion existence 0
    (in no sample), silently; such a file now fails its case naming the label."""
    from monai_unc.engine import CasesFailed

    _lesion_cohort(tmp_path, sample_label=4)
    cfg = EvaluationConfig(products=[LesionMetrics("met", samples=str(tmp_path / "samples"))], spatial=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CasesFailed):
            run_evaluate(tmp_path / "labels", tmp_path / "pred", tmp_path / "eval", cfg,
                         on_failure=lambda f: None)
    failures = json.loads((tmp_path / "eval" / "failures.json").read_text())
    text = json.dumps(failures)
    assert "lesion_samples" in text and "label(s) [4]" in text and "classes 0..2" in text


def test_lesion_samples_in_the_classes_give_existence_one(tmp_path):
    _lesion_cohort(tmp_path, sample_label=2)
    cfg = EvaluationConfig(products=[LesionMetrics("met", samples=str(tmp_path / "samples"))], spatial=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, summary, _ = run_evaluate(tmp_path / "labels", tmp_path / "pred", tmp_path / "eval", cfg)
    tumour = [x for x in summary["lesions"]["lesions"] if x["task"] == "2"]
    assert tumour and all(x["existence"] == 1.0 for x in tumour)


def test_class_names_say_the_background_comes_first():
    """`--class-names liver tumour` (foreground names only, a common habit) failed every case with "class_names has
    2 names for 3 classes", and the help did not say that the background is named too."""
    from monai_unc.cli import build_parser
    from monai_unc.evaluation.rows import case_tasks
    from monai_unc.io import LoadedCase

    parser, _ = build_parser("evaluate")
    sub = next(a for a in parser._actions if a.dest == "command").choices["evaluate"]
    helps = {a.dest: a.help for a in sub._actions}
    assert "background first" in helps["class_names"]
    probs = np.full((3, 4, 4, 4), 1 / 3, np.float32)
    labels = np.zeros((4, 4, 4), np.int64)
    case = LoadedCase("a", labels, labels, probs, {}, np.eye(4), (1.0, 1.0, 1.0), None)
    with pytest.raises(ValueError, match="2 names for 3 classes: give one name per class, the background first"):
        case_tasks(case, EvaluationConfig(class_names=["liver", "tumour"]))


def test_evaluate_cases_names_the_classes_in_no_case_too(tmp_path):
    """evaluate_cases (the API and sharded path, docs/report.md) scored the 49 classes that no map holds as Dice 1
    in every case without the warning run_evaluate gives (hostile review 33)."""
    from monai_unc.evaluation import evaluate_cases
    from monai_unc.io import match_cases

    _gap_cohort(tmp_path)
    cases = match_cases(tmp_path / "labels", tmp_path / "pred")
    with pytest.warns(UserWarning, match=r"in no reference and no segmentation of the 2 case\(s\)"):
        evaluate_cases(cases, EvaluationConfig(num_classes=53, spatial=False))


def test_evaluate_cases_is_silent_when_every_class_is_held(tmp_path):
    from monai_unc.evaluation import evaluate_cases
    from monai_unc.io import match_cases

    _gap_cohort(tmp_path, ids=(1, 2, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        evaluate_cases(match_cases(tmp_path / "labels", tmp_path / "pred"), EvaluationConfig(num_classes=4,
                                                                                                spatial=False))
    assert not [w for w in caught if "in no reference" in str(w.message)]
