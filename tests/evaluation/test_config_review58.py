"""Hostile review 58 of the evaluation options, the resume state and the tables."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.resume import case_config_fingerprint


@pytest.mark.parametrize("field, value", [("n_bins", np.int64(10)), ("min_bin_count", np.int32(3)),
                                          ("patch_size", np.int64(5)), ("num_classes", np.int64(2)),
                                          ("spatial", np.bool_(False))])
def test_numpy_scalar_options_reach_the_fingerprint_as_python_values(field, value):
    # found by hostile review 58: validate() accepted a numpy integer (or numpy bool for spatial), and every
    # evaluation then failed with "Object of type int64 is not JSON serializable" from the resume fingerprint
    config = EvaluationConfig(**{field: value})
    config.validate()
    got = getattr(config, field)
    assert type(got) is (bool if field == "spatial" else int) and got == value
    assert json.loads(json.dumps(case_config_fingerprint(config)))[field] == got


def test_numpy_integer_seg_label_values_accepted():
    config = EvaluationConfig(seg_label_values=[np.int64(1), np.int64(2), np.int64(4)])
    config.validate()
    assert config.seg_label_values == [1, 2, 4] and all(type(v) is int for v in config.seg_label_values)


def test_evaluation_with_numpy_integer_options_runs(tmp_path):
    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, summary, _ = run_evaluate(data["labels"], data["predictions"], tmp_path / "eval",
                                     EvaluationConfig(n_bins=np.int64(10), spatial=np.bool_(False)))
    assert summary["calibration"]["n_bins"] == 10


def _quiet_evaluate(*args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = run_evaluate(*args, **kwargs)
    return out, [str(w.message) for w in caught]


def test_pooled_calibration_says_which_cases_it_covers(tmp_path):
    # found by hostile review 58: with one case of five without probabilities, summary.json's calibration block said
    # "all voxels of all cases" while it pooled 4 cases (6 912 of 8 640 voxels), without a warning
    data = write_toy_cohort(tmp_path / "data", n_cases=5, shape=(12, 12, 12))
    (data["predictions"] / "toy001_probs.nii.gz").unlink()
    (_, summary, _), _ = _quiet_evaluate(data["labels"], data["predictions"], tmp_path / "eval",
                                         EvaluationConfig(num_classes=2, spatial=False))
    cal = summary["calibration"]
    assert cal["voxels"] == 4 * 12 ** 3
    assert cal["pooled_over"] == "all voxels of the 4 of 5 cases with probabilities (merged confidence histograms)"
    assert any("1 of 5 case(s) have no probabilities (['toy001'])" in w for w in summary["warnings"])


def test_pooled_calibration_of_every_case_unchanged(tmp_path):
    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    (_, summary, _), _ = _quiet_evaluate(data["labels"], data["predictions"], tmp_path / "eval",
                                         EvaluationConfig(spatial=False))
    assert summary["calibration"]["pooled_over"] == "all voxels of all cases (merged confidence histograms)"
    assert not any("have no probabilities" in w for w in summary["warnings"])


def test_pooled_region_calibration_says_which_cases_it_covers(tmp_path):
    from tests.evaluation.test_evaluate_regions import write_region_cohort

    dirs = write_region_cohort(tmp_path / "data", n_cases=3)
    (dirs["pred"] / "case1_probs.nii.gz").unlink()
    (_, summary, _), _ = _quiet_evaluate(dirs["labels"], dirs["pred"], tmp_path / "eval",
                                         EvaluationConfig(regions="brats", spatial=False), images=dirs["images"])
    for block in summary["regions"]["per_region"].values():
        assert block["calibration"]["pooled_over"] == ("all voxels of the 2 of 3 cases with probabilities (merged "
                                                       "binary histograms of the region)")
    assert any("1 of 3 case(s) have no probabilities (['case1'])" in w for w in summary["warnings"])


def test_shift_labels_kept_as_text(tmp_path):
    # found by hostile review 58: shifts={case: severity} with numbers (or pandas' NaN) was evaluated, and its
    # state/rows.json (shift 0, NaN) was then refused by load_evaluation / monai-unc report
    from monai_unc.evaluation import load_evaluation

    config = EvaluationConfig(shifts={"a": 0, "b": np.int64(2), "c": float("nan"), "d": None, "e": "noise"})
    config.validate()
    assert config.shifts == {"a": "0", "b": "2", "c": "", "d": "", "e": "noise"}
    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    shifts = {"toy000": 0, "toy001": 3, "toy002": float("nan")}
    (_, summary, _), _ = _quiet_evaluate(data["labels"], data["predictions"], tmp_path / "eval",
                                         EvaluationConfig(shifts=shifts, spatial=False))
    assert (summary["ood"]["n_iid"], summary["ood"]["n_ood"]) == (1, 2)
    state, _ = load_evaluation(tmp_path / "eval")
    assert [r["shift"] for r in state.sorted_rows()] == ["0", "3", ""]


def test_spatial_mean_over_cases_says_which_cases_it_leaves_out(tmp_path):
    # found by hostile review 58: the BUC of a case with an empty predicted mask (NaN, the case most in need of
    # review) was left out of summary.json's spatial.mean_over_cases without a word (a mean of 4 of 5 cases), while a
    # user case metric's mean warned
    data = write_toy_cohort(tmp_path / "data", n_cases=5, shape=(12, 12, 12))
    (state, summary, _), _ = _quiet_evaluate(data["labels"], data["predictions"], tmp_path / "eval",
                                             EvaluationConfig())
    buc = np.array([r["buc"] for r in state.sorted_rows()], dtype=float)
    assert np.isnan(buc).sum() == 1
    assert summary["spatial"]["mean_over_cases"]["buc"] == pytest.approx(np.nanmean(buc), rel=1e-12)
    assert "cohort: spatial metric 'buc': 1 of 5 case(s) are NaN or inf, left out of its mean_over_cases" in (
        summary["warnings"])
    assert not any("spatial metric 'space'" in w for w in summary["warnings"])


def test_state_histogram_of_other_cases_refused(tmp_path):
    # found by hostile review 58: a state/histogram.npz of another evaluation (10 cases) beside a rows.json of 5 was
    # read, and monai-unc report showed its pooled calibration (40 960 voxels) as this cohort's
    import shutil

    from monai_unc.evaluation import CohortState, load_evaluation

    small = write_toy_cohort(tmp_path / "small", n_cases=3, shape=(8, 8, 8))
    big = write_toy_cohort(tmp_path / "big", n_cases=5, shape=(8, 8, 8))
    for data, out in ((small, "eval_small"), (big, "eval_big")):
        _quiet_evaluate(data["labels"], data["predictions"], tmp_path / out, EvaluationConfig(spatial=False))
    load_evaluation(tmp_path / "eval_small")  # its own histogram: read
    shutil.copy(tmp_path / "eval_big" / "state" / "histogram.npz", tmp_path / "eval_small" / "state" / "histogram.npz")
    with pytest.raises(ValueError, match=r"histogram.npz: holds case\(s\) \['toy003', 'toy004'\] that rows.json"):
        CohortState.load(tmp_path / "eval_small" / "state")


def test_state_histogram_of_other_classes_refused(tmp_path):
    from monai_unc.evaluation import CohortState
    from monai_unc.io import save_state
    from monai_unc.metrics.calibration import ConfidenceHistogram

    CohortState(2, 240, rows=[{"case": "a", "dice": 0.9}]).save(tmp_path)
    p = np.full((1, 3, 2, 2), 1 / 3)
    hist = ConfidenceHistogram(3, n_fine_bins=240, per_case=True).update(p, np.zeros((1, 2, 2), int), case_ids=["a"])
    save_state(tmp_path / "histogram.npz", hist)
    with pytest.raises(ValueError, match=r"\(num_classes, n_fine_bins\) \(3, 240\), rows.json \(2, 240\)"):
        CohortState.load(tmp_path)


def test_cases_without_shift_label_refused_by_the_api_too(tmp_path):
    # found by hostile review 58: evaluate_cases / evaluate_shard counted the cases the shift table does not name as
    # in-distribution ("" labels, 3 of 5 here), where run_evaluate refuses them
    from monai_unc.evaluation import evaluate_cases, evaluate_shard
    from monai_unc.io import CaseError, match_cases

    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    cases = match_cases(data["labels"], data["predictions"])
    config = EvaluationConfig(spatial=False, shifts={"toy000": "noise"})
    for run in (evaluate_cases, evaluate_shard):
        with pytest.raises(CaseError, match=r"no row for case\(s\) \['toy001', 'toy002'\]"):
            run(cases, config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state = evaluate_cases(cases[:1], config)  # the cases it names: evaluated
    assert [r["shift"] for r in state.rows] == ["noise"]


def test_the_series_of_a_seg_label_enters_the_fingerprint(tmp_path):
    # found by hostile review 58: a DICOM SEG label is read on the grid of its series folder (--images), which the
    # per-case fingerprint of a class evaluation left out: a resume with --images of another series kept the rows read
    # on the first (a fresh run would have refused the SEG or read it on the other grid)
    import os

    from monai_unc.evaluation import case_fingerprint
    from monai_unc.io import CaseFiles

    (tmp_path / "labels").mkdir()
    seg = tmp_path / "labels" / "c0.dcm"
    seg.write_bytes(b"seg")
    probs = tmp_path / "c0_probs.nii.gz"
    probs.write_bytes(b"p")
    series = []
    for name in ("a", "b"):
        folder = tmp_path / "images" / name / "c0"
        folder.mkdir(parents=True)
        (folder / "1.dcm").write_bytes(name.encode())
        series.append(folder)
    config = EvaluationConfig(spatial=False)
    config.validate()
    fp = [case_fingerprint(CaseFiles("c0", seg, None, probs, {}, s), config) for s in series]
    assert fp[0] != fp[1]
    assert fp[0] == case_fingerprint(CaseFiles("c0", seg, None, probs, {}, series[0]), config)
    (series[0] / "1.dcm").write_bytes(b"another slice")  # a slice of the series written again
    os.utime(series[0] / "1.dcm", ns=(1, 1))
    assert case_fingerprint(CaseFiles("c0", seg, None, probs, {}, series[0]), config) != fp[0]
    nifti = tmp_path / "labels" / "c0.nii.gz"  # a volume label: the image is no input of a class row
    nifti.write_bytes(b"label")
    assert (case_fingerprint(CaseFiles("c0", nifti, None, probs, {}, series[0]), config)
            == case_fingerprint(CaseFiles("c0", nifti, None, probs, {}, series[1]), config))


@pytest.mark.parametrize("edit, field", [
    (lambda s: s["config"].__setitem__("class_names", ["bg"]), "'config.class_names'"),
    (lambda s: s.__setitem__("class_names", ["bg", "a", "b"]), "'class_names'"),
    (lambda s: s.__setitem__("num_classes", 3), "'num_classes'"),
])
def test_summary_classes_not_those_of_the_state_refused(tmp_path, capsys, edit, field):
    # found by hostile review 58: summary.json's config.class_names edited to fewer names than the state's classes made
    # monai-unc report --budget end in an IndexError traceback
    from monai_unc import cli
    from monai_unc.evaluation import load_evaluation

    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    _quiet_evaluate(data["labels"], data["predictions"], tmp_path / "eval", EvaluationConfig(spatial=False))
    path = tmp_path / "eval" / "summary.json"
    summary = json.loads(path.read_text())
    edit(summary)
    path.write_text(json.dumps(summary))
    with pytest.raises(ValueError, match=field):
        load_evaluation(tmp_path / "eval")
    assert cli.main(["report", "--evaluation", str(tmp_path / "eval"), "--output", str(tmp_path / "r"),
                     "--cases", "0", "--budget", "0.4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err


def test_summary_n_bins_other_than_the_state_refused(tmp_path):
    # found by hostile review 58: config.n_bins edited to 100 beside histograms of 16 * 15 fine bins: report showed a
    # pooled ECE of 0.03177 for the exact 0.03237, without a word
    from monai_unc.evaluation import load_evaluation, resummarize

    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    _quiet_evaluate(data["labels"], data["predictions"], tmp_path / "eval", EvaluationConfig(spatial=False, n_bins=10))
    path = tmp_path / "eval" / "summary.json"
    summary = json.loads(path.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state, saved = load_evaluation(tmp_path / "eval")
        # a summary without its options (write_evaluation without a config): the state's bins, not the default 15
        config = {k: v for k, v in saved["config"].items() if k != "n_bins"}
        unrecorded = resummarize(state, {**saved, "config": config})
    assert unrecorded["calibration"]["n_bins"] == 10 and unrecorded["calibration"]["ece"] == saved["calibration"]["ece"]
    summary["config"]["n_bins"] = 100
    path.write_text(json.dumps(summary))
    with pytest.raises(ValueError, match=r"'config.n_bins' must be that of the evaluation's histograms \(10\), got"):
        load_evaluation(tmp_path / "eval")


def _mean_prediction(task):
    return float(np.mean(task.pred))


def test_a_case_metric_named_shift_is_refused():
    # found by hostile review 58: without shifts, a case metric named "shift" was written into the shift label's column
    # as a number: state/rows.json was then refused by load_evaluation / monai-unc report
    from monai_unc.evaluation import evaluate_case
    from monai_unc.io import LoadedCase

    lab = np.zeros((4, 4, 4), np.int64)
    lab[1:3, 1:3, 1:3] = 1
    p = np.stack([1.0 - 0.8 * lab, 0.8 * lab]).astype(np.float32)
    case = LoadedCase("c", lab, lab.copy(), p, {}, np.eye(4), (1.0, 1.0, 1.0), None)
    with pytest.raises(ValueError, match=r"case_metrics: the columns \['shift'\] clash"):
        evaluate_case(case, EvaluationConfig(spatial=False, case_metrics={"shift": _mean_prediction}))
    row = evaluate_case(case, EvaluationConfig(spatial=False, case_metrics={"shift_2": _mean_prediction})).row
    assert row["shift_2"] == pytest.approx(lab.mean())


def test_class_dice_of_torch_label_maps():
    # found by hostile review 58: torch label maps ended in AttributeError: 'Tensor' object has no attribute 'astype'
    import torch

    from monai_unc.evaluation import class_dice

    a, b = np.array([[0, 1], [1, 2]]), np.array([[0, 1], [2, 2]])
    got = class_dice(torch.from_numpy(a), torch.from_numpy(b), 3)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_array_equal(got, class_dice(a, b, 3))


@pytest.mark.parametrize("regions, field", [("brats", "field 'regions'"), ({"WT": [1]}, "'config.regions'")])
def test_state_regions_edited_refused(tmp_path, regions, field):
    # found by hostile review 58: rows.json's regions edited to "brats" made monai-unc report end in a TypeError
    # traceback, and to {"WT": [1]} beside a class evaluation's summary gave a report of a region block of nothing
    from monai_unc.evaluation import load_evaluation

    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(8, 8, 8))
    _quiet_evaluate(data["labels"], data["predictions"], tmp_path / "eval", EvaluationConfig(spatial=False))
    load_evaluation(tmp_path / "eval")
    path = tmp_path / "eval" / "state" / "rows.json"
    meta = json.loads(path.read_text())
    meta.update(regions=regions, expected_dice_estimate="region_mean")
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=field):
        load_evaluation(tmp_path / "eval")


def _short_curve(meta):
    c = meta["curves"]["case1"]
    c["thresholds"] = c["thresholds"][:10]
    for r in c["regions"].values():
        for k in ("dice", "ftp", "ftn"):
            r[k] = r[k][:10]


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["curves"].__setitem__("case0", {}), "curves of case 'case0', field 'thresholds'"),
    (lambda m: m["curves"]["case0"]["regions"]["WT"].__setitem__("dice", [0.5]), "'regions.WT.dice' must be a list"),
    (lambda m: m["curves"]["case0"]["regions"]["WT"].__setitem__("ftp", ["x"] * 40), "'regions.WT.ftp' must be"),
    (lambda m: m["curves"]["case0"]["regions"].pop("ET"), "field 'regions' must be an object of the regions"),
    (_short_curve, "curves of case 'case1', field 'thresholds' must have the 40 thresholds of case 'case0'"),
])
def test_state_curves_edited_refused(tmp_path, edit, message):
    # found by hostile review 58: an edited QU-BraTS curve in state/rows.json made monai-unc report end in a KeyError
    # or TypeError traceback, or in an error naming neither file nor field
    from monai_unc.evaluation import load_evaluation, resummarize
    from tests.evaluation.test_evaluate_regions import write_region_cohort

    dirs = write_region_cohort(tmp_path / "data", n_cases=2)
    _quiet_evaluate(dirs["labels"], dirs["pred"], tmp_path / "eval", EvaluationConfig(regions="brats", spatial=False),
                    images=dirs["images"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        resummarize(*load_evaluation(tmp_path / "eval"), budget=0.5)  # as written: read
    _edited_rows_refused(tmp_path / "eval", edit, message)


@pytest.mark.parametrize("edit, message", [
    (lambda m: m["files"].__setitem__("toy000", "x"), "files of case 'toy000' must be an object of paths"),
    (lambda m: m["files"]["toy000"].pop("label"), "files of case 'toy000' must be an object of paths"),
    (lambda m: m["files"]["toy000"].__setitem__("seg", 5), "files of case 'toy000' must be an object of paths"),
    (lambda m: m.__setitem__("warnings", "abc"), "field 'warnings' must be a list of lines"),
    (lambda m: m.__setitem__("derived_maps", {"toy000": "x"}), "derived_maps of case 'toy000' must be an object"),
])
def test_state_files_edited_refused(tmp_path, edit, message):
    # found by hostile review 58: state/rows.json's files edited (a text, no label, a number for a path) made monai-unc
    # report end in a TypeError / KeyError traceback; warnings given as text were read as one line per character

    data = write_toy_cohort(tmp_path / "data", n_cases=2, shape=(8, 8, 8))
    _quiet_evaluate(data["labels"], data["predictions"], tmp_path / "eval", EvaluationConfig(spatial=False))
    _edited_rows_refused(tmp_path / "eval", edit, message)


def _edited_rows_refused(folder, edit, message):
    """``edit`` applied to ``folder``'s state/rows.json; loading the evaluation is then refused with ``message``."""
    from monai_unc.evaluation import load_evaluation

    path = folder / "state" / "rows.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=re.escape(message)):
        load_evaluation(folder)
