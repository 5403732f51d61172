"""A per-case metric added once works for classes and for regions (``EvaluationConfig(case_metrics=...)``).

The metric, a toy "volume error" (predicted minus reference foreground volume of one task, in mL), is defined only
here. It runs through :func:`monai_unc.evaluation.run_evaluate` for a class cohort (column ``volume_error``) and a
region cohort (columns ``volume_error_<region>``), its values are checked against a hand computation on the files,
under resume (a second run reuses every cached case and gives the same rows; another metric set recomputes them) and
on 2 gloo ranks with torchrun's variables (the same ``metrics.csv`` as one process).
"""

from __future__ import annotations

import csv
import functools
import json
import os
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, case_fingerprint, evaluate_case, run_evaluate
from monai_unc.io import match_cases
from tests._cases import write_brats_like_cohort
from tests._ranks import free_port, run_forked_ranks

BRATS = {"TC": (1, 4), "WT": (1, 2, 4), "ET": (4,)}
CALLS: list[str] = []  # one entry per evaluation of the metric (resume must not call it again)


def volume_error(task):
    """Predicted minus reference foreground volume of one task (a class set or one region), in mL."""
    CALLS.append(str(task.name))
    return (np.count_nonzero(task.pred) - np.count_nonzero(task.target)) * task.voxel_volume / 1000.0


def abs_volume_error(task):
    """The absolute value of :func:`volume_error`."""
    return abs(volume_error(task))


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def classes(tmp_path_factory) -> dict[str, Path]:
    return write_toy_cohort(tmp_path_factory.mktemp("classes"), n_cases=3, shape=(10, 10, 10))


@pytest.fixture(scope="module")
def regions(tmp_path_factory) -> dict[str, Path]:
    """Three BraTS-like cases (label maps 0/1/2/4) with 4D region masks and probabilities as predictions."""
    return write_brats_like_cohort(tmp_path_factory.mktemp("regions"))


def _evaluate(labels: Path, pred: Path, out: Path, config: EvaluationConfig):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return run_evaluate(labels, pred, out, config, progress=False)


def _hand_volume_error(pred: np.ndarray, target: np.ndarray, affine: np.ndarray) -> float:
    voxel = float(np.prod(np.linalg.norm(affine[:3, :3], axis=0)))
    return (int((pred > 0).sum()) - int((target > 0).sum())) * voxel / 1000.0


def test_class_metric_equals_hand_computation_and_leaves_the_other_columns(classes, tmp_path):
    plain = _rows(_evaluate(classes["labels"], classes["predictions"], tmp_path / "plain", EvaluationConfig())[2]
                  ["metrics"])
    config = EvaluationConfig(case_metrics={"volume_error": volume_error})
    _, summary, paths = _evaluate(classes["labels"], classes["predictions"], tmp_path / "ext", config)
    rows = _rows(paths["metrics"])
    assert [r["case"] for r in rows] == [r["case"] for r in plain]
    for r, p in zip(rows, plain):
        label = nib.load(classes["labels"] / f"{r['case']}.nii.gz")
        seg = np.asarray(nib.load(classes["predictions"] / f"{r['case']}_seg.nii.gz").dataobj)
        expected = _hand_volume_error(seg, np.asarray(label.dataobj), label.affine)
        assert float(r["volume_error"]) == pytest.approx(expected, rel=1e-12, abs=1e-12)
        assert {k: v for k, v in r.items() if k != "volume_error"} == p  # nothing else changes
    assert summary["case_metrics"]["mean_over_cases"]["volume_error"] == pytest.approx(
        np.mean([float(r["volume_error"]) for r in rows]), rel=1e-12)
    assert summary["case_metrics"]["functions"] == {"volume_error": f"{__name__}.volume_error"}


def test_region_metric_per_region_equals_hand_computation(regions, tmp_path):
    config = EvaluationConfig(regions=BRATS, case_metrics={"volume_error": volume_error})
    _, summary, paths = _evaluate(regions["labels"], regions["predictions"], tmp_path / "ext", config)
    rows = _rows(paths["metrics"])
    assert len(rows) == 3 and "volume_error" not in rows[0]
    for r in rows:
        label = nib.load(regions["labels"] / f"{r['case']}.nii.gz")
        lab = np.asarray(label.dataobj)
        pred = np.moveaxis(np.asarray(nib.load(regions["predictions"] / f"{r['case']}_seg.nii.gz").dataobj), -1, 0)
        for k, (name, labels) in enumerate(BRATS.items()):
            expected = _hand_volume_error(pred[k], np.isin(lab, labels), label.affine)
            assert float(r[f"volume_error_{name}"]) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    for name in BRATS:
        got = summary["regions"]["per_region"][name]["case_metrics"]["mean_over_cases"]["volume_error"]
        assert got == pytest.approx(np.mean([float(r[f"volume_error_{name}"]) for r in rows]), rel=1e-12)


@pytest.mark.parametrize("kind", ["classes", "regions"])
def test_resume_reuses_cases_and_a_new_metric_set_recomputes(kind, classes, regions, tmp_path):
    if kind == "classes":
        labels, pred, extra = classes["labels"], classes["predictions"], {}
    else:
        labels, pred, extra = regions["labels"], regions["predictions"], {"regions": BRATS}
    out = tmp_path / "ev"
    CALLS.clear()
    first = _evaluate(labels, pred, out, EvaluationConfig(case_metrics={"volume_error": volume_error}, **extra))
    n_tasks = 1 if kind == "classes" else len(BRATS)
    assert len(CALLS) == 3 * n_tasks
    CALLS.clear()
    again = _evaluate(labels, pred, out, EvaluationConfig(case_metrics={"volume_error": volume_error}, **extra))
    assert CALLS == []  # every case came from its resume state
    assert again[2]["metrics"].read_text() == first[2]["metrics"].read_text()
    changed = EvaluationConfig(case_metrics={"volume_error": volume_error, "abs_volume_error": abs_volume_error},
                               **extra)
    third = _evaluate(labels, pred, out, changed)
    assert len(CALLS) == 2 * 3 * n_tasks  # recomputed: both metrics call volume_error
    rows = _rows(third[2]["metrics"])
    col = "abs_volume_error" if kind == "classes" else "abs_volume_error_WT"
    assert all(float(r[col]) == abs(float(r[col.replace("abs_", "")])) for r in rows)
    files = match_cases(labels, pred)[0]
    names = [case_fingerprint(files, c)["config"]["case_metric_names"]
             for c in (EvaluationConfig(case_metrics={"volume_error": volume_error}, **extra), changed)]
    assert names[0] != names[1] and names[0] == {"volume_error": f"{__name__}.volume_error"}


@pytest.mark.parametrize("kind, name, column", [
    ("classes", "dice", "dice"),  # it overwrote the Dice that failure detection, triage and risk control read
    ("classes", "voxels", "voxels"),  # it was overwritten by the voxel count
    ("classes", "predictive_entropy_fg_mean", "predictive_entropy_fg_mean"),  # the triage score
    ("classes", "expected_dice", "expected_dice"),
    ("regions", "dice", "dice_WT"),
])
def test_a_metric_named_like_an_evaluation_column_is_refused_not_overwritten(kind, name, column, classes, regions):
    """Issue: ``case_metrics={"dice": fn}`` replaced every case's Dice by ``fn``'s value (the summary's mean Dice,
    the failures and the triage then read it); ``{"voxels": fn}`` lost ``fn``'s values to the voxel count; silently."""
    cohort, extra = (classes, {}) if kind == "classes" else (regions, {"regions": BRATS})
    files = match_cases(cohort["labels"], cohort["predictions"])[0]
    message = rf"case_metrics: the columns \[.*'{column}'.*\] clash with the evaluation's own"
    with pytest.raises(ValueError, match=message):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            evaluate_case(files, EvaluationConfig(case_metrics={name: abs_volume_error}, **extra))



def test_a_metric_named_like_a_products_column_names_the_case_metric(classes):
    """review38: a case metric and a product's column of the same name were refused as "products: ... clash with the
    evaluation's own", naming the product (whose columns the user cannot rename) and a clash that was not there."""
    from monai_unc.product import CohortProduct

    class Volume(CohortProduct):
        name, title = "volume_product", "Volume"

        def case_state(self, case, tasks, config):
            return {"n": 1}

        def case_columns(self, state, config):
            return {"pred_volume": 1.0}

        def summarize(self, states, rows, artifact, config):
            return {}

    files = match_cases(classes["labels"], classes["predictions"])[0]
    config = EvaluationConfig(case_metrics={"pred_volume": abs_volume_error}, products=[Volume()])
    with pytest.raises(ValueError, match=r"^case_metrics: the columns \['pred_volume'\] clash with the columns of "
                                         r"the products \(rename them\)$"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            evaluate_case(files, config)


def undefined_when_odd(task):
    """The reference's foreground voxels, NaN when that count is odd, inf when it is over 50 (one toy case each)."""
    n = int(np.count_nonzero(task.target))
    return float("nan") if n % 2 else float("inf") if n > 50 else float(n)


def test_cases_a_metric_leaves_undefined_are_counted_in_a_warning(classes, tmp_path):
    """Issue: the mean over the cases in ``summary.json`` dropped NaN and inf values silently: a mean of fewer cases
    than ``metrics.csv`` holds (a finite mean of a column holding inf), and no word of it."""
    config = EvaluationConfig(case_metrics={"odd": undefined_when_odd})
    _, summary, paths = _evaluate(classes["labels"], classes["predictions"], tmp_path / "ev", config)
    values = np.array([float(r["odd"]) for r in _rows(paths["metrics"])])
    finite = values[np.isfinite(values)]
    assert 0 < finite.size < values.size  # the toy cohort has both kinds of cases
    assert summary["case_metrics"]["mean_over_cases"]["odd"] == pytest.approx(finite.mean(), rel=1e-12)
    expected = (f"cohort: case metric 'odd': {values.size - finite.size} of {values.size} case(s) are NaN or inf, "
                "left out of its mean_over_cases")
    assert expected in summary["warnings"]


@pytest.mark.parametrize("kind", ["classes", "regions"])
def test_a_metric_named_dice_something_is_no_class_of_the_summary(kind, classes, regions, tmp_path):
    """Issue: ``case_metrics={"dice_at_05": fn}`` was listed in ``summary.json`` as a class ``at_05`` of
    ``dice.per_class`` (every column named ``dice_*`` was taken for a class)."""
    cohort, extra = (classes, {}) if kind == "classes" else (regions, {"regions": BRATS})
    config = EvaluationConfig(case_metrics={"dice_at_05": abs_volume_error}, **extra)
    _, summary, paths = _evaluate(cohort["labels"], cohort["predictions"], tmp_path / "ev", config)
    rows = _rows(paths["metrics"])
    expected = ["1"] if kind == "classes" else list(BRATS)
    assert list(summary["dice"]["per_class"]) == expected
    for name in expected:
        assert summary["dice"]["per_class"][name] == pytest.approx(np.mean([float(r[f"dice_{name}"]) for r in rows]))

def _evaluate_rank(rank: int, port: int, cohorts: list[tuple[Path, Path, Path, dict]]) -> None:
    """One forked rank of a 2-rank job with torchrun's variables: :func:`run_evaluate` of each cohort with the metric
    (the evaluation joins the gloo group from the variables, as under ``torchrun``)."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    for labels, pred, out, extra in cohorts:
        config = EvaluationConfig(case_metrics={"volume_error": volume_error}, **extra)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            run_evaluate(labels, pred, out, config, progress=False)


def test_torchrun_two_ranks_equal_one_process(classes, regions, tmp_path):
    """One 2-rank job (torchrun's variables; ranks forked from the test process, :func:`tests._ranks.run_forked_ranks`:
    no interpreter start-up per rank) evaluates both cohorts with the metric; each equals the single-process run."""
    cohorts = (("classes", classes["labels"], classes["predictions"], {}),
               ("regions", regions["labels"], regions["predictions"], {"regions": BRATS}))
    jobs = [(labels, pred, tmp_path / f"torchrun_{kind}", extra) for kind, labels, pred, extra in cohorts]
    run_forked_ranks(_evaluate_rank, (free_port(), jobs), 2, wait_s=180)
    for kind, labels, pred, extra in cohorts:
        single = _evaluate(labels, pred, tmp_path / f"single_{kind}",
                           EvaluationConfig(case_metrics={"volume_error": volume_error}, **extra))
        out = tmp_path / f"torchrun_{kind}"
        text = (out / "metrics.csv").read_text()
        assert "volume_error" in text.splitlines()[0]
        assert text == single[2]["metrics"].read_text()
        a = json.loads((out / "summary.json").read_text())
        b = json.loads(single[2]["summary"].read_text())
        a.pop("config"), b.pop("config")
        a.get("case_metrics", {}).pop("functions", None), b.get("case_metrics", {}).pop("functions", None)
        assert a == b


def threshold_value(task, threshold):
    """A metric parametrised by a threshold whose value is the threshold: which one a row was computed with shows."""
    CALLS.append(str(task.name))
    return float(threshold)


def test_resume_under_another_partial_argument_computes_the_cases_again(classes, tmp_path, monkeypatch):
    """Issue: every ``functools.partial`` was fingerprinted as ``functools.partial``, so an evaluation interrupted
    under ``threshold=0.3`` and resumed under ``threshold=0.7`` wrote a column of both values, exit 0."""
    import monai_unc.evaluation.runner as runner

    out = tmp_path / "ev"
    config = lambda t: EvaluationConfig(case_metrics={"m": functools.partial(threshold_value, threshold=t)})  # noqa
    real, n = runner.evaluate_case, [0]

    def interrupted_after_two(*args, **kwargs):
        if n[0] == 2:
            raise KeyboardInterrupt
        n[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "evaluate_case", interrupted_after_two)
    with pytest.raises(KeyboardInterrupt):
        _evaluate(classes["labels"], classes["predictions"], out, config(0.3))
    monkeypatch.setattr(runner, "evaluate_case", real)
    CALLS.clear()
    _, summary, paths = _evaluate(classes["labels"], classes["predictions"], out, config(0.7))
    assert [r["m"] for r in _rows(paths["metrics"])] == ["0.7"] * 3
    assert len(CALLS) == 3  # every case computed again
    assert summary["case_metrics"]["functions"] == {"m": f"functools.partial({__name__}.threshold_value, "
                                                         "threshold=0.7)"}
    CALLS.clear()
    _evaluate(classes["labels"], classes["predictions"], out, config(0.7))
    assert CALLS == []  # the same partial resumes


def test_a_partial_of_an_argument_without_repeatable_text_is_never_resumed(classes, tmp_path):
    """A bound argument whose repr holds a memory address cannot be told from another one by a later run: its saved
    rows are never reused (every case is computed again), not reused on the function's name alone."""
    out = tmp_path / "ev"
    for _ in range(2):
        CALLS.clear()
        config = EvaluationConfig(case_metrics={"m": functools.partial(threshold_value, threshold=_Opaque())})
        _evaluate(classes["labels"], classes["predictions"], out, config)
        assert len(CALLS) == 3
    CALLS.clear()
    _evaluate(classes["labels"], classes["predictions"], out, config)  # not even the same object in one process
    assert len(CALLS) == 3


class _ThresholdObject:
    """A metric object with the default repr (``<... object at 0x...>``): nothing names its state."""

    def __call__(self, task):
        return threshold_value(task, 0.5)

    def method(self, task):
        return threshold_value(task, 0.5)


def test_a_metric_never_resumed_says_so_once_per_run(classes, tmp_path):
    """Found by hostile review: a callable object (or a bound method of one) with the default repr is named with
    its address, so its cases were computed again on every run without a word: one warning per run names it."""
    out = tmp_path / "ev"
    for metric in (_ThresholdObject(), _ThresholdObject().method):
        for _ in range(2):
            CALLS.clear()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run_evaluate(classes["labels"], classes["predictions"], out,
                             EvaluationConfig(case_metrics={"obj": metric, "plain": volume_error}), progress=False)
            said = [str(w.message) for w in caught if "not resumable" in str(w.message)]
            assert len(said) == 1 and "'obj'" in said[0] and "'plain'" not in said[0], said
            assert "computed again on every run" in said[0] and "functools.partial" in said[0]
            assert len(CALLS) >= 3  # every case computed again
    with warnings.catch_warnings(record=True) as caught:  # a resumable metric: no such warning
        warnings.simplefilter("always")
        run_evaluate(classes["labels"], classes["predictions"], out,
                     EvaluationConfig(case_metrics={"plain": volume_error}), progress=False)
    assert not [w for w in caught if "not resumable" in str(w.message)]


def _partial_rank(rank: int, port: int, labels: Path, pred: Path, out: Path, logs: Path) -> None:
    """One forked rank of a 2-rank job whose ranks bind another threshold: what it raised, in ``logs/rank<r>``."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), OMP_NUM_THREADS="1", MONAI_UNC_DIST_TIMEOUT="60")
    torch.set_num_threads(1)
    config = EvaluationConfig(case_metrics={"m": functools.partial(threshold_value, threshold=(0.3, 0.7)[rank])})
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            run_evaluate(labels, pred, out, config, progress=False)
        text = "ok"
    except Exception as e:  # noqa: BLE001 - the test reads what each rank raised
        text = f"{type(e).__name__}: {e}"
    (logs / f"rank{rank}").write_text(text)


def test_ranks_given_other_partial_arguments_are_refused(classes, tmp_path):
    """Issue: ranks of one job given ``partial(metric, threshold=0.3)`` and ``threshold=0.7`` passed the rank
    agreement (both named ``functools.partial``) and mixed rows of both into one ``metrics.csv``."""
    out, logs = tmp_path / "ev", tmp_path / "logs"
    logs.mkdir()
    run_forked_ranks(_partial_rank, (free_port(), classes["labels"], classes["predictions"], out, logs), 2,
                     wait_s=180)
    for rank in range(2):
        text = (logs / f"rank{rank}").read_text()
        assert "other options or inputs than rank 0" in text and "case_metric_names changed" in text, text
    assert not (out / "metrics.csv").exists()


class _Opaque:
    """An argument with the default repr (``<... object at 0x...>``)."""

    def __float__(self):
        return 0.5


def test_bad_case_metrics_are_refused():
    with pytest.raises(ValueError, match="case_metrics"):
        EvaluationConfig(case_metrics={"volume error": volume_error}).validate()
    with pytest.raises(TypeError, match="case_metrics"):
        EvaluationConfig(case_metrics={"volume_error": 1.0}).validate()  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="case_metrics"):
        EvaluationConfig(case_metrics=[volume_error]).validate()  # type: ignore[arg-type]
