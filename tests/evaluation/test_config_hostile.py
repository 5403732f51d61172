"""Hostile options of an evaluation (:mod:`monai_unc.evaluation.config`): every field of ``EvaluationConfig`` is
checked when the configuration is validated (wrong types, NaN, huge numbers, names whose columns collide), so that a
bad option is one error naming it before any case is read, never a failure of every case after the work, a
traceback, or a column silently overwritten; a ``summary.json`` edited by hand is untrusted input too
(:func:`~monai_unc.evaluation.cohort.config_from_summary`, what ``monai-unc report --budget`` reads)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from monai_unc import cli
from monai_unc.activation import TaskView
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import MAX_BINS, EvaluationConfig
from monai_unc.evaluation.cohort import config_from_summary
from monai_unc.evaluation.lesions import lesion_case_state, lesion_columns


@pytest.mark.parametrize("kwargs, field", [
    ({"n_bins": 2.5}, "n_bins"),
    ({"n_bins": True}, "n_bins"),
    ({"n_bins": "10"}, "n_bins"),
    ({"n_bins": float("nan")}, "n_bins"),
    ({"n_bins": 10**12}, "n_bins"),
    ({"n_bins": MAX_BINS + 1}, "n_bins"),
    ({"min_bin_count": -1}, "min_bin_count"),
    ({"min_bin_count": float("nan")}, "min_bin_count"),
    ({"min_bin_count": "5"}, "min_bin_count"),
    ({"patch_size": 2.5}, "patch_size"),
    ({"patch_size": float("inf")}, "patch_size"),
    ({"patch_size": None}, "patch_size"),
    ({"num_classes": 0}, "num_classes"),
    ({"num_classes": 1}, "num_classes"),
    ({"num_classes": "3"}, "num_classes"),
    ({"spatial": "false"}, "spatial"),
    ({"class_names": "abc"}, "class_names"),
    ({"class_names": []}, "class_names"),
    ({"class_names": ["bg", "a"], "num_classes": 3}, "class_names"),
    ({"class_names": ["bg", "Left Atrium", "left-atrium"]}, "class_names"),
    ({"class_names": ["x", "x"]}, "class_names"),
    ({"calibration_cases": "abc"}, "calibration_cases"),
    ({"calibration_cases": 3}, "calibration_cases"),
    ({"budget": "0.2"}, "budget"),
    ({"budget": float("nan")}, "budget"),
    ({"failure_dice": None}, "failure_dice"),
    # a bool is an int to Python: failure_dice=True counted every case failed, budget=False referred none, silently
    ({"failure_dice": True}, "failure_dice must be a number"),
    ({"budget": False}, "budget must be a number"),
    ({"budget": np.bool_(False)}, "budget must be a number"),
    ({"target_risk": np.bool_(True)}, "target_risk must be a number"),
    ({"failure_dice": float("nan")}, "failure_dice"),
    ({"delta": "0.1"}, "delta"),
    ({"target_risk": "0.1"}, "target_risk"),
    ({"target_risk": float("inf")}, "target_risk"),
    ({"shifts": ["a", "b"]}, "shifts"),
    ({"score": 3}, "score"),
])
def test_validate_refuses_each_bad_field_by_name(kwargs, field):
    with pytest.raises(ValueError, match=field):
        EvaluationConfig(**kwargs).validate()


def test_valid_edge_values_are_kept():
    config = EvaluationConfig(n_bins=MAX_BINS, min_bin_count=0, patch_size=1, num_classes=2, class_names=("bg", 7),
                              calibration_cases=("a", "b"), spatial=np.bool_(False))
    config.validate()
    assert config.class_names == ["bg", "7"] and config.n_bins == MAX_BINS
    EvaluationConfig(regions={"WT": [1]}, num_classes=1).validate()  # one region: one channel


def test_class_names_that_give_one_column_are_refused_not_overwritten():
    """Issue: ``class_names=["bg", "Left Atrium", "left-atrium"]`` gave both foreground classes the columns
    ``dice_left_atrium``, ``lesion_f1_left_atrium``, ...: class 2's values overwrote class 1's, silently."""
    label = np.zeros((8, 8, 8), np.int64)
    label[1:3, 1:3, 1:3] = 1
    label[5:7, 5:7, 5:7] = 2
    pred = label.copy()
    pred[5:7, 5:7, 5:7] = 0  # class 1 found (F1 1), class 2 missed (F1 0)
    task = TaskView(None, pred, label, 3, maps={}, spacing=(1.0, 1.0, 1.0))
    case = SimpleNamespace(case_id="c", spacing=(1.0, 1.0, 1.0), affine=None)
    options = {"dilation": 0, "min_volume": 0.0, "iou": 0.25, "hd_penalty": 374.0, "r": 0.001}
    good = EvaluationConfig(class_names=["bg", "Left Atrium", "Right Atrium"])
    good.validate()
    cols = lesion_columns(lesion_case_state(case, [task], options, good.class_names, None))
    assert cols["lesion_f1_left_atrium"] == 1.0 and cols["lesion_f1_right_atrium"] == 0.0
    bad = ["bg", "Left Atrium", "left-atrium"]
    assert len(lesion_columns(lesion_case_state(case, [task], options, bad, None))) < len(cols)  # what it did
    with pytest.raises(ValueError, match="class_names.*same column names"):
        EvaluationConfig(class_names=bad).validate()


@pytest.mark.parametrize("recorded, match", [
    ({"n_bins": "15"}, "n_bins"),
    ({"patch_size": None}, "patch_size"),
    ({"spatial": "no"}, "spatial"),
    ({"class_names": "abc"}, "class_names"),
    ({"failure_dice": float("nan")}, "failure_dice"),  # Python's json reads NaN
    ({"ignore_unclaimed_labels": "yes"}, "ignore_unclaimed_labels"),
    ({"qu_brats_grid": 2}, "qu_brats_grid"),
    ({"case_metrics": {"m": "os.system"}}, "case_metrics"),  # a name is never imported or called
])
def test_an_edited_summary_config_is_one_value_error(recorded, match):
    """Issue: ``monai-unc report --budget`` on an evaluation whose ``summary.json`` had ``"n_bins": "15"`` or
    ``"patch_size": null`` ended in a TypeError traceback; now a ValueError (one line, exit 2) naming the field."""
    with pytest.raises(ValueError, match=match):
        config_from_summary({"config": {"budget": 0.2, **recorded}}, [], budget=0.3)


def test_a_summary_config_that_is_not_an_object_is_refused():
    with pytest.raises(ValueError, match="'config' must be an object"):
        config_from_summary({"config": [1, 2]}, [])


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("cfg"), n_cases=2, shape=(8, 8, 8))


@pytest.mark.parametrize("extra, message", [
    (["--min-bin-count", "-1"], "--min-bin-count must be a non-negative integer, got -1"),
    (["--num-classes", "1"], "--num-classes must be an integer >= 2, got 1"),
    (["--n-bins", "1000000000000"], f"--n-bins must be at most {MAX_BINS}"),
    (["--class-names", "bg", "Tumour A", "tumour-a"], "the same column names"),
])
def test_evaluate_refuses_bad_options_in_one_line_before_any_case(cohort, tmp_path, capsys, extra, message):
    """Issue: ``--min-bin-count -1``, ``--num-classes 1`` and ``--n-bins 10^12`` were accepted, then every case
    failed after its work (exit 1, ``failures.json``: an allocation of 512 TB for the bins)."""
    out = tmp_path / "ev"
    rc = cli.main(["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(out), "-q",
                   *extra])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("monai-unc evaluate: error: "), (rc, err)
    assert message in err[0], err
    assert not (out / "metrics.csv").exists() and not (out / "failures.json").exists()



@pytest.mark.parametrize("extra, message", [
    ([], "--num-classes: no case has probabilities"),
    (["--num-classes", "2"], "no case has an uncertainty map or probabilities"),
])
def test_segmentations_alone_are_refused_in_one_line_before_any_case(cohort, tmp_path, capsys, extra, message):
    """Issue: predictions of segmentations alone failed every case after its work ("the number of classes is unknown:
    give probabilities or num_classes", exit 1); with ``--num-classes`` every case was evaluated and the cohort then
    refused ("no uncertainty score in the rows")."""
    pred = tmp_path / "pred"
    pred.mkdir()
    for seg in sorted(Path(cohort["predictions"]).glob("*_seg.nii.gz")):
        (pred / seg.name).write_bytes(seg.read_bytes())
    out = tmp_path / "ev"
    rc = cli.main(["evaluate", "-l", str(cohort["labels"]), "-p", str(pred), "-o", str(out), "-q", *extra])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("monai-unc evaluate: error: "), (rc, err)
    assert message in err[0], err
    assert not out.exists()

def test_run_evaluate_passes_an_empty_measure_list_on_as_no_map(monkeypatch, tmp_path):
    """``measures=[]`` reads no map, as in ``match_cases`` (it was turned into None: every map found)."""
    from monai_unc.evaluation import run_evaluate, runner

    seen = {}

    def match(**kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop after matching")

    monkeypatch.setattr(runner, "match_cases", match)
    with pytest.raises(RuntimeError, match="stop after matching"):
        run_evaluate(tmp_path / "l", tmp_path / "p", tmp_path / "o", EvaluationConfig(), measures=[])
    assert seen["measures"] == []


def test_a_region_name_without_ascii_letters_names_its_columns():
    """The refusal said the name '水肿' 'has no letter or digit' (it has two letters, no ASCII one); since review 69
    region columns keep the letters of every script, as the class columns (``slug``) do."""
    from monai_unc.evaluation import region_suffix

    assert region_suffix("水肿") == "水肿"
    assert region_suffix("Ödem 2") == "Ödem_2"


def test_ignore_unclaimed_labels_needs_regions():
    """Found by hostile testing: accepted, and ignored, without regions."""
    with pytest.raises(ValueError, match="ignore_unclaimed_labels needs regions"):
        EvaluationConfig(ignore_unclaimed_labels=True).validate()
    EvaluationConfig(regions="brats", ignore_unclaimed_labels=True).validate()
