"""Hostile review 60 of ``monai-unc evaluate``: defects found by recomputing its numbers and by hostile cohorts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig, check_measure_options
from monai_unc.io import CaseFiles

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "monai_unc", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _class_cohort(root: Path, n: int = 3, seg_only: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """``n`` tiny two-class cases ``c0 ..``; the cases of ``seg_only`` have a segmentation and nothing else."""
    labels, pred = root / "labels", root / "pred"
    labels.mkdir(parents=True)
    pred.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        cid = f"c{i}"
        lab = np.zeros((6, 5, 4), np.uint8)
        lab[1:4, 1:4, 1:3] = 1
        p1 = np.clip(0.8 * lab + 0.1 + 0.05 * rng.random(lab.shape), 0, 1).astype(np.float32)
        nib.save(nib.Nifti1Image(lab, np.eye(4)), labels / f"{cid}.nii.gz")
        if cid in seg_only:
            nib.save(nib.Nifti1Image((p1 > 0.5).astype(np.uint8), np.eye(4)), pred / f"{cid}_seg.nii.gz")
        else:
            nib.save(nib.Nifti1Image(np.stack([1 - p1, p1], -1), np.eye(4)), pred / f"{cid}_probs.nii.gz")
    return labels, pred


# ---------------------------------------------------------------------------------------- a case without any score
def test_a_segmentation_alone_beside_cases_with_probabilities_is_refused_before_any_work():
    """Found by hostile review 60: such a case has no uncertainty score. First in case-id order, the cohort failed
    after every case was evaluated ("no uncertainty score in the rows: give uncertainty maps or probabilities", although
    the other cases had them); anywhere else it was referred first as an undefined score, without a word."""
    probs = CaseFiles("b", Path("b.nii.gz"), None, Path("b_probs.nii.gz"), {}, None)
    alone = CaseFiles("a", Path("a.nii.gz"), Path("a_seg.nii.gz"), None, {}, None)
    with pytest.raises(ValueError, match=r"1 case\(s\) have neither an uncertainty map nor probabilities \('a'\)"):
        check_measure_options([alone, probs], EvaluationConfig(num_classes=2))
    check_measure_options([probs], EvaluationConfig())  # every case with probabilities: no refusal
    mapped = CaseFiles("a", Path("a.nii.gz"), Path("a_seg.nii.gz"), None, {"variance": Path("a_variance.nii.gz")},
                       None)
    check_measure_options([mapped, CaseFiles("b", Path("b.nii.gz"), Path("b_seg.nii.gz"), None,
                                             {"variance": Path("b_variance.nii.gz")}, None)],
                          EvaluationConfig(num_classes=2))  # segmentations with maps: a score each


@pytest.mark.parametrize("alone", ["c0", "c2"])  # first and last in case-id order: the same refusal
def test_evaluate_refuses_a_case_without_a_score_in_one_line(tmp_path, alone):
    labels, pred = _class_cohort(tmp_path, seg_only=(alone,))
    out = tmp_path / "ev"
    res = _cli("evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "-q", "--num-classes", "2")
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"({alone!r})" in lines[0] and "neither an uncertainty map nor probabilities" in lines[0]
    assert not (out / "state" / "cases").exists()  # before any work


# ---------------------------------------------------------------------------- case metrics of a region evaluation
def _region_cohort(root: Path, n: int = 2) -> tuple[Path, Path]:
    """``n`` tiny BraTS-like cases (labels 0, 1, 2, 4) with per-region probabilities in the ``brats`` order."""
    labels, pred = root / "labels", root / "pred"
    labels.mkdir(parents=True)
    pred.mkdir()
    spec = {"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]}
    rng = np.random.default_rng(1)
    for i in range(n):
        lab = np.zeros((8, 7, 5), np.int16)
        lab[1:7, 1:6, 1:4] = 2
        lab[3:5, 2:4, 2:3] = 1
        lab[4, 3, 2] = 4
        regions = np.stack([np.isin(lab, v) for v in spec.values()]).astype(float)
        p = np.clip(0.7 * regions + 0.15 + 0.1 * rng.random(regions.shape), 0, 1).astype(np.float32)
        nib.save(nib.Nifti1Image(lab, np.diag([1.0, 1.5, 2.0, 1.0])), labels / f"r{i}.nii.gz")
        nib.save(nib.Nifti1Image(np.moveaxis(p, 0, -1), np.diag([1.0, 1.5, 2.0, 1.0])), pred / f"r{i}_probs.nii.gz")
    return labels, pred


def _predicted_volume(task) -> float:
    return float(np.count_nonzero(task.pred))


@pytest.mark.parametrize("name", ["voxels", "expected_dice"])
def test_a_region_case_metric_named_like_an_own_column_is_summarised_per_region_only(tmp_path, name):
    """Found by hostile review 60: a region evaluation's case metric has the columns ``<name>_<R>`` only, but the
    summary's top-level ``case_metrics`` block read the column ``<name>``: for ``voxels`` (or ``expected_dice``) that
    is the evaluation's own, and summary.json gave its mean (280 voxels) as the metric's cohort mean."""
    import warnings

    from monai_unc.evaluation import run_evaluate

    labels, pred = _region_cohort(tmp_path)
    config = EvaluationConfig(regions="brats", spatial=False, case_metrics={name: _predicted_volume})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state, summary, _ = run_evaluate(labels, pred, tmp_path / "ev", config)
    rows = state.sorted_rows()
    assert "case_metrics" not in summary  # as for any other name: the means are per region
    for region in ("TC", "WT", "ET"):
        want = np.mean([r[f"{name}_{region}"] for r in rows])  # the predicted volumes, by hand below
        assert summary["regions"]["per_region"][region]["case_metrics"]["mean_over_cases"][name] == pytest.approx(want)
    lab = np.asarray(nib.load(labels / "r0.nii.gz").dataobj)
    assert rows[0][f"{name}_WT"] > 0 and rows[0]["voxels"] == lab.size


def test_a_class_case_metric_keeps_its_top_level_mean(tmp_path):
    import warnings

    from monai_unc.evaluation import run_evaluate

    labels, pred = _class_cohort(tmp_path)
    config = EvaluationConfig(spatial=False, case_metrics={"volume": _predicted_volume})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        state, summary, _ = run_evaluate(labels, pred, tmp_path / "ev", config)
    want = np.mean([r["volume"] for r in state.sorted_rows()])
    assert summary["case_metrics"]["mean_over_cases"] == {"volume": pytest.approx(want)}


# ---------------------------------------------------------------------------- resume from another working directory
def test_a_resume_from_another_working_directory_reuses_every_case(tmp_path, monkeypatch):
    """Found by hostile review 60: the maps evaluate derives from the probabilities were recorded relative to the
    working directory of the run (``ev/maps/c0_predictive_entropy.nii.gz``) while the case files are absolute, so the
    same evaluation resumed from another directory (``-o /abs/ev``) found them "gone" and computed every case again."""
    import json
    import warnings

    import monai_unc.evaluation.runner as runner
    from monai_unc.evaluation import run_evaluate

    labels, pred = _class_cohort(tmp_path / "data")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(labels, pred, "ev", EvaluationConfig(spatial=False))
        derived = json.loads((work / "ev" / "state" / "rows.json").read_text())["derived_maps"]
        assert all(Path(p).is_absolute() and Path(p).is_file() for maps in derived.values() for p in maps.values())
        done = []
        real = runner.evaluate_case

        def counting(case, config):
            done.append(case.case_id)
            return real(case, config)

        monkeypatch.setattr(runner, "evaluate_case", counting)
        monkeypatch.chdir(tmp_path)
        _, summary, _ = run_evaluate(labels, pred, work / "ev", EvaluationConfig(spatial=False))
    assert done == [] and summary["n_cases"] == 3


# ------------------------------------------------------------------------------------- report --budget's warnings
def test_resummarize_keeps_the_warnings_the_state_cannot_give_again(tmp_path):
    """Found by hostile review 60: ``monai-unc report --budget`` summarises the saved state again, and the warning
    that a class no case holds scores Dice 1 in every case (and counts in ``dice``) was lost: it needs the cases'
    classes, which the state does not keep. The warnings of the new budget are the new ones."""
    import warnings

    from monai_unc.evaluation import load_evaluation, resummarize, run_evaluate

    labels, pred = tmp_path / "labels", tmp_path / "pred"
    labels.mkdir()
    pred.mkdir()
    for i in range(3):
        lab = np.zeros((6, 5, 4), np.uint8)
        lab[1:4, 1:4, 1:3] = 1
        p = np.full((3,) + lab.shape, 0.05, np.float32)  # class 2: in no reference, no segmentation
        p[1] = np.where(lab == 1, 0.85, 0.05)
        p[0] = 1 - p[1] - p[2]
        nib.save(nib.Nifti1Image(lab, np.eye(4)), labels / f"c{i}.nii.gz")
        nib.save(nib.Nifti1Image(np.moveaxis(p, 0, -1), np.eye(4)), pred / f"c{i}_probs.nii.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(labels, pred, tmp_path / "ev", EvaluationConfig(spatial=False, budget=0.2))
        state, saved = load_evaluation(tmp_path / "ev")
        absent = [w for w in saved["warnings"] if "class(es) 2 of 2 foreground classes are in no reference" in w]
        assert len(absent) == 1
        for budget in (None, 0.2, 0.5, 0.9):
            again = resummarize(state, saved, budget)
            assert absent[0] in again["warnings"], budget
            assert len(again["warnings"]) == len(set(again["warnings"]))
        # a budget that refers every case warns of it; the recorded budget's summary does not
        assert any("refer all 3 cases" in w for w in resummarize(state, saved, 0.9)["warnings"])
        assert not any("refer all" in w for w in resummarize(state, saved)["warnings"])


# ------------------------------------------------------------------------------------- calibration cases as a set
def test_calibration_cases_given_as_a_set_are_recorded_as_a_list(tmp_path):
    """Found by hostile review 60: ``validate`` accepts a set of calibration cases, and ``run_evaluate`` evaluated
    every case, then failed writing summary.json ("Object of type set is not JSON serializable", a traceback)."""
    import json
    import warnings

    from monai_unc.evaluation import load_evaluation, run_evaluate

    config = EvaluationConfig(calibration_cases={"c2", "c0"})
    config.validate()
    assert config.calibration_cases == ["c0", "c2"]
    tupled = EvaluationConfig(calibration_cases=("c2", "c0"))
    tupled.validate()
    assert tupled.calibration_cases == ["c2", "c0"]  # the order given
    labels, pred = _class_cohort(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, summary, paths = run_evaluate(labels, pred, tmp_path / "ev", EvaluationConfig(
            spatial=False, calibration_cases={"c1", "c0"}, target_risk=0.5))
        load_evaluation(tmp_path / "ev")
    assert json.loads(paths["summary"].read_text())["config"]["calibration_cases"] == ["c0", "c1"]
    assert summary["risk_control"]["calibration"]["cases"] == ["c0", "c1"]


# ---------------------------------------------------------------------------------- cases left out of the cohort
@pytest.mark.parametrize("flag", ["allow_missing", "allow_missing_labels"])
def test_the_cases_left_out_are_listed_in_summary_json(tmp_path, flag):
    """Found by hostile review 60: the labelled cases ``--allow-missing`` leaves out (and the predicted cases
    ``--allow-missing-labels`` leaves out) were said on stderr alone; summary.json, and so the report, gave the numbers
    of the smaller cohort without a word."""
    import warnings

    from monai_unc.evaluation import run_evaluate

    labels, pred = _class_cohort(tmp_path)
    gone = pred / "c1_probs.nii.gz" if flag == "allow_missing" else labels / "c1.nii.gz"
    gone.unlink()
    with pytest.warns(UserWarning, match="'c1'"):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="(?!.*'c1')", category=UserWarning)
            _, summary, _ = run_evaluate(labels, pred, tmp_path / "ev", EvaluationConfig(spatial=False),
                                         **{flag: True})
    assert summary["n_cases"] == 2
    listed = [w for w in summary["warnings"] if w.startswith("cohort: ") and "'c1'" in w]
    assert len(listed) == 1 and "skipped" in listed[0], summary["warnings"]


def test_a_complete_cohort_lists_no_case_left_out(tmp_path):
    import warnings

    from monai_unc.evaluation import run_evaluate

    labels, pred = _class_cohort(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, summary, _ = run_evaluate(labels, pred, tmp_path / "ev", EvaluationConfig(spatial=False),
                                     allow_missing=True, allow_missing_labels=True)
    assert not any("skipped" in w for w in summary["warnings"])


# ------------------------------------------------------------------------------ warnings raised reading a case's files
def test_a_file_in_microns_is_said_in_summary_json(tmp_path):
    """Found by hostile review 60: a NIfTI file whose spatial unit is microns (every distance computed in microns,
    labelled mm) was said on stderr alone: the warnings raised while a case's files are read were not the case's, so
    summary.json (and the report) gave its spatial metrics without a word. They are the case's warnings, resumed
    with it."""
    import warnings

    from monai_unc.evaluation import evaluate_files, run_evaluate
    from monai_unc.io import match_cases

    labels, pred = _class_cohort(tmp_path)
    img = nib.load(labels / "c1.nii.gz")
    img.header.set_xyzt_units(xyz="micron")
    nib.save(nib.Nifti1Image(np.asarray(img.dataobj), img.affine, img.header), labels / "c1.nii.gz")
    for _ in range(2):  # computed, then resumed
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            _, summary, _ = run_evaluate(labels, pred, tmp_path / "ev", EvaluationConfig(spatial=False))
        said = [w for w in summary["warnings"] if "spatial unit is micron" in w]
        assert len(said) == 1 and said[0].startswith("c1: "), summary["warnings"]
    files = next(c for c in match_cases(labels, pred) if c.case_id == "c1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = evaluate_files(files, EvaluationConfig(spatial=False))[0]
    assert any(w.startswith("c1: a NIfTI file's spatial unit is micron") for w in result.warnings)


def test_evaluate_case_of_files_lists_the_warnings_of_reading_them(tmp_path):
    import warnings

    from monai_unc.evaluation import evaluate_case
    from monai_unc.io import match_cases

    labels, pred = _class_cohort(tmp_path)
    img = nib.load(labels / "c0.nii.gz")
    img.header.set_xyzt_units(xyz="meter")
    nib.save(nib.Nifti1Image(np.asarray(img.dataobj), img.affine, img.header), labels / "c0.nii.gz")
    files = next(c for c in match_cases(labels, pred) if c.case_id == "c0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = evaluate_case(files, EvaluationConfig(spatial=False))
    assert any(w.startswith("c0: a NIfTI file's spatial unit is meter") for w in result.warnings), result.warnings
