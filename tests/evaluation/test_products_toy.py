"""A new capability in one file: a toy cohort product, defined only here, runs through ``monai-unc evaluate``.

The product, "volume error", keeps per case and per task (the class task, or each region) the predicted and the
reference foreground volume; its fit is the cohort's mean bias (predicted minus reference, in mL or mm^3) on the
calibration cases, its apply the bias-corrected volume of a new case. Nothing in the package names it: it is a
:class:`monai_unc.product.CohortProduct` subclass with a :func:`monai_unc.state.register_state_type` state,
registered with :func:`monai_unc.product.register_product`. The tests check that it
- is a command-line option of ``evaluate`` (``--volume-error``, ``--volume-error-unit``) and prints its line;
- gives hand-computed values for classes and for regions, in ``metrics.csv``, ``summary.json`` and its artifact file
  (digest checked), and leaves every other output unchanged;
- shows its section in ``report.html`` (every string escaped);
- resumes: an interrupted run (a kill stops the loop) computes only the remaining cases again, a rerun none, another
  unit every case;
- gives on 2 gloo ranks (torchrun's variables, forked ranks) the same files as one process;
- brings its own command (``monai-unc volume-correct``: the fitted bias applied to a folder of new predictions),
  listed by ``monai-unc --help``, whose table ``dicom-export`` and the triage page would read like any product's.
"""

from __future__ import annotations

import csv
import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.products import read_artifact
from monai_unc.io import read_csv, write_csv
from monai_unc.product import CohortProduct, ReportSection, register_product, unregister_product
from monai_unc.state import register_state_type
from tests._cases import BRATS_REGIONS, write_brats_like_cohort
from tests._paths import ROOT
from tests._ranks import run_cli_ranks

BRATS = BRATS_REGIONS
CALLS: list[str] = []  # one entry per case whose state the product computed (resume must not call it again)
STOP_AT: list[str] = []  # a case at which the product interrupts the run, as a kill would
UNITS = {"ml": 1e-3, "mm3": 1.0}


# --- the product: everything below up to the tests is the capability -------------------------------------------
@register_state_type("test.volume_error")
class VolumeState:
    """Predicted and reference foreground volumes of each task of one case (mm^3); merging adds them."""

    def __init__(self, names: Sequence[str], pred: Any, true: Any, cases: int = 1) -> None:
        self.names = [str(n) for n in names]
        self.pred = np.asarray(pred, dtype=np.float64)
        self.true = np.asarray(true, dtype=np.float64)
        self.cases = int(cases)

    def merge(self, other: VolumeState) -> VolumeState:
        if other.names != self.names:
            raise ValueError("other has other tasks")
        self.pred, self.true, self.cases = self.pred + other.pred, self.true + other.true, self.cases + other.cases
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"names": np.array(self.names, dtype=np.str_), "pred": self.pred, "true": self.true,
                "cases": np.int64(self.cases)}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> VolumeState:
        return cls(np.asarray(state["names"]).tolist(), state["pred"], state["true"], int(state["cases"]))


@dataclass
class VolumeErrorSummary:
    """The product's block of summary.json."""

    unit: str
    n_cases: int
    bias: dict[str, float]
    mean_abs_error: dict[str, float]


class VolumeError(CohortProduct):
    """Volume error: predicted minus reference foreground volume; fit = the cohort's mean bias."""

    name = "volume_error"
    title = "Volume error <predicted - reference> & bias"  # markup characters: the report must escape them
    description = "Per case and task, the predicted minus the reference foreground volume; the cohort's mean bias."
    command = "volume-correct"
    command_help = "the bias-corrected predicted volumes of new cases"
    applied_table = "volume_correct.csv"

    def __init__(self, unit: str = "ml") -> None:
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {sorted(UNITS)}, got {unit!r}")
        self.unit = unit

    @classmethod
    def add_arguments(cls, group: Any) -> None:
        group.add_argument("--volume-error", action="store_true", help="the toy volume-error product")
        group.add_argument("--volume-error-unit", default="ml", choices=sorted(UNITS), help="its unit")

    @classmethod
    def from_arguments(cls, args: Any) -> VolumeError | None:
        return cls(args.volume_error_unit) if args.volume_error else None

    def options(self) -> dict[str, Any]:
        return {"unit": self.unit}

    def case_state(self, case: Any, tasks: Sequence[Any], config: Any) -> VolumeState:
        if case.case_id in STOP_AT:
            raise KeyboardInterrupt  # the run is stopped here, as by a kill
        CALLS.append(case.case_id)
        return VolumeState([t.name or "foreground" for t in tasks],
                           [np.count_nonzero(t.pred) * t.voxel_volume for t in tasks],
                           [np.count_nonzero(t.target) * t.voxel_volume for t in tasks])

    def _column(self, name: str) -> str:
        return "volume_bias" if name == "foreground" else f"volume_bias_{name}"

    def case_columns(self, state: VolumeState, config: Any) -> dict[str, float]:
        return {self._column(n): (p - t) * UNITS[self.unit] for n, p, t in zip(state.names, state.pred, state.true)}

    def fit(self, states: Mapping[str, VolumeState], rows: Sequence[Mapping[str, Any]], config: Any) -> dict:
        bias = {n: float(np.mean([(s.pred[i] - s.true[i]) * UNITS[self.unit] for s in states.values()]))
                for i, n in enumerate(next(iter(states.values())).names)}
        return {"unit": self.unit, "bias": bias}

    def summarize(self, states: Mapping[str, VolumeState], rows: Sequence[Mapping[str, Any]], artifact: Any,
                  config: Any) -> VolumeErrorSummary:
        names = next(iter(states.values())).names
        mae = {n: float(np.mean([abs(s.pred[i] - s.true[i]) * UNITS[self.unit] for s in states.values()]))
               for i, n in enumerate(names)}
        return VolumeErrorSummary(self.unit, len(states), artifact["bias"], mae)

    def apply(self, case: Any, artifact: Mapping[str, Any]) -> dict[str, float]:
        """The bias-corrected predicted volume of each task of a new case (``case``: a :class:`VolumeState`)."""
        return {n: p * UNITS[artifact["unit"]] - artifact["bias"][n] for n, p in zip(case.names, case.pred)}

    @classmethod
    def apply_cases(cls, predictions: Any, artifact: Any, output: Any, *, dist: Any = None,
                    **options: Any) -> list[dict[str, Any]]:
        """``monai-unc volume-correct``: every new case's predicted volumes, minus the fitted bias, in a table."""
        fitted = read_artifact(artifact, cls.name)["artifact"]
        rows = []
        for seg_path in sorted(Path(predictions).glob("*_seg.nii.gz")):
            img = nib.load(seg_path)
            seg, voxel = np.asarray(img.dataobj), float(np.prod(np.linalg.norm(img.affine[:3, :3], axis=0)))
            tasks = ({"foreground": seg > 0} if seg.ndim == 3 else  # classes; regions are channels last
                     {n: np.moveaxis(seg, -1, 0)[k] > 0 for k, n in enumerate(fitted["bias"])})
            state = VolumeState(list(tasks), [np.count_nonzero(m) * voxel for m in tasks.values()], [0.0] * len(tasks))
            corrected = cls("ml").apply(state, fitted)
            rows.append({"case": seg_path.name.removesuffix("_seg.nii.gz"),
                         **{f"corrected_ml_{n}": v for n, v in corrected.items()}})
        Path(output).mkdir(parents=True, exist_ok=True)
        write_csv(Path(output) / cls.applied_table, rows)
        return rows

    @classmethod
    def command_lines(cls, result: list[dict[str, Any]]) -> list[str]:
        return [f"volume-correct: {len(result)} case(s)"]

    @classmethod
    def summary_lines(cls, block: Mapping[str, Any]) -> list[str]:
        bias = block["bias"]
        return ["volume error: mean bias " + ", ".join(f"{n} {v:+.4f} {block['unit']}" for n, v in bias.items())]

    @classmethod
    def report_section(cls, block: Mapping[str, Any]) -> ReportSection:
        return ReportSection(cls.title, [f"Mean over {block['n_cases']} case(s) <b>not bold</b>."],
                             cards=[("cases", str(block["n_cases"]))], table_head=["task", "bias", "mean |error|"],
                             table_rows=[[n, block["bias"][n], block["mean_abs_error"][n]] for n in block["bias"]])


# --- the tests ---------------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def product():
    register_product(VolumeError)
    CALLS.clear()
    STOP_AT.clear()
    yield VolumeError
    unregister_product(VolumeError.name)


@pytest.fixture(scope="module")
def classes(tmp_path_factory) -> dict[str, Path]:
    return write_toy_cohort(tmp_path_factory.mktemp("classes"), n_cases=4, shape=(10, 10, 10))


@pytest.fixture(scope="module")
def regions(tmp_path_factory) -> dict[str, Path]:
    return write_brats_like_cohort(tmp_path_factory.mktemp("regions"))


def _cohort(kind: str, classes: dict[str, Path], regions: dict[str, Path]) -> tuple[Path, Path, list[str]]:
    if kind == "classes":
        return classes["labels"], classes["predictions"], []
    return regions["labels"], regions["predictions"], ["--regions", json.dumps(BRATS)]


def _evaluate_cli(labels: Path, pred: Path, out: Path, *extra: str) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "--quiet", *extra])


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _hand_bias(labels: Path, pred: Path, kind: str, case: str) -> dict[str, float]:
    """Predicted minus reference volume (mL) of each task of a case, from the files."""
    label = nib.load(labels / f"{case}.nii.gz")
    voxel = float(np.prod(np.linalg.norm(label.affine[:3, :3], axis=0)))
    lab = np.asarray(label.dataobj)
    seg = np.asarray(nib.load(pred / f"{case}_seg.nii.gz").dataobj)
    if kind == "classes":
        return {"foreground": (np.count_nonzero(seg) - np.count_nonzero(lab)) * voxel / 1000}
    seg = np.moveaxis(seg, -1, 0)
    return {n: (np.count_nonzero(seg[k]) - np.count_nonzero(np.isin(lab, labels))) * voxel / 1000
            for k, (n, labels) in enumerate(BRATS.items())}


@pytest.mark.parametrize("kind", ["classes", "regions"])
def test_its_command_applies_the_fitted_bias_to_new_cases(kind, classes, regions, tmp_path, capsys):
    labels, pred, extra = _cohort(kind, classes, regions)
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "volume-correct" in capsys.readouterr().out  # a command of the command line, from the test file alone
    assert _evaluate_cli(labels, pred, tmp_path / "ev", *extra, "--volume-error") == 0
    fitted = read_artifact(tmp_path / "ev" / "volume_error.json", "volume_error")["artifact"]
    assert main(["volume-correct", "-p", str(pred), "-r", str(tmp_path / "ev" / "volume_error.json"),
                 "-o", str(tmp_path / "new")]) == 0
    assert "volume-correct: " in capsys.readouterr().out
    rows = {r["case"]: r for r in read_csv(tmp_path / "new" / "volume_correct.csv")}
    for case, bias in ((c, _hand_bias(labels, pred, kind, c)) for c in rows):
        label = nib.load(labels / f"{case}.nii.gz")
        voxel_ml = float(np.prod(np.linalg.norm(label.affine[:3, :3], axis=0))) / 1000
        seg = np.asarray(nib.load(pred / f"{case}_seg.nii.gz").dataobj)
        masks = {"foreground": seg > 0} if kind == "classes" else {
            n: np.moveaxis(seg, -1, 0)[k] > 0 for k, n in enumerate(BRATS)}
        for n in bias:
            expected = np.count_nonzero(masks[n]) * voxel_ml - fitted["bias"][n]
            assert float(rows[case][f"corrected_ml_{n}"]) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert main(["volume-correct", "-p", str(pred), "-r", str(tmp_path / "ev" / "metrics.csv"),
                 "-o", str(tmp_path / "bad")]) == 2  # not its artifact: one line, exit 2


def test_the_product_is_an_option_of_evaluate(capsys):
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--volume-error" in out and "--volume-error-unit" in out and "Volume error" in out


@pytest.mark.parametrize("kind", ["classes", "regions"])
def test_values_summary_artifact_and_report(kind, classes, regions, tmp_path, capsys):
    labels, pred, extra = _cohort(kind, classes, regions)
    assert _evaluate_cli(labels, pred, tmp_path / "plain", *extra) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(tmp_path / "ev"), *extra,
                     "--volume-error"]) == 0
    printed = capsys.readouterr().out
    assert "volume error: mean bias" in printed and "volume_error.json" in printed
    rows, plain = _rows(tmp_path / "ev" / "metrics.csv"), _rows(tmp_path / "plain" / "metrics.csv")
    hand = {r["case"]: _hand_bias(labels, pred, kind, r["case"]) for r in rows}
    for r, p in zip(rows, plain):
        for n, v in hand[r["case"]].items():
            col = "volume_bias" if n == "foreground" else f"volume_bias_{n}"
            assert float(r[col]) == pytest.approx(v, rel=1e-12, abs=1e-12)
        assert {k: v for k, v in r.items() if not k.startswith("volume_bias")} == p  # nothing else changes
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    plain_summary = json.loads((tmp_path / "plain" / "summary.json").read_text())
    block = summary.pop("volume_error")
    tasks = list(next(iter(hand.values())))
    expected = {n: float(np.mean([h[n] for h in hand.values()])) for n in tasks}
    assert block["unit"] == "ml" and block["n_cases"] == len(rows)
    assert block["bias"] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert block["mean_abs_error"] == pytest.approx({n: float(np.mean([abs(h[n]) for h in hand.values()]))
                                                     for n in tasks}, rel=1e-12, abs=1e-12)
    assert summary.pop("config").pop("products") == {"volume_error": {"unit": "ml"}}
    plain_summary.pop("config")
    assert summary == plain_summary  # the evaluation's own blocks are unchanged
    doc = read_artifact(tmp_path / "ev" / "volume_error.json", "volume_error")
    assert doc["artifact"]["bias"] == pytest.approx(expected) and doc["calibration_cases"] == [r["case"] for r in rows]
    new_case = VolumeState(tasks, [2000.0] * len(tasks), [0.0] * len(tasks))
    corrected = VolumeError().apply(new_case, doc["artifact"])
    assert corrected == pytest.approx({n: 2.0 - expected[n] for n in tasks})
    # the report reads the block from summary.json and escapes every string of the section
    assert main(["report", "--evaluation", str(tmp_path / "ev"), "--cases", "0"]) == 0
    html = (tmp_path / "ev" / "report" / "report.html").read_text()
    assert 'id="product-volume_error"' in html
    assert "Volume error &lt;predicted - reference&gt; &amp; bias" in html and "<predicted" not in html
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html


def test_an_edited_artifact_is_refused(classes, tmp_path):
    assert _evaluate_cli(classes["labels"], classes["predictions"], tmp_path / "ev", "--volume-error") == 0
    path = tmp_path / "ev" / "volume_error.json"
    doc = json.loads(path.read_text())
    doc["artifact"]["bias"]["foreground"] = 0.0
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="digest"):
        read_artifact(path, "volume_error")
    with pytest.raises(ValueError, match="not 'other'"):
        read_artifact(_rewrite_digest(path), "other")


def _rewrite_digest(path: Path) -> Path:
    from monai_unc.evaluation.products import artifact_digest

    doc = json.loads(path.read_text())
    doc["digest"] = artifact_digest(doc)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("kind", ["classes", "regions"])
def test_an_interrupted_run_resumes_and_another_unit_recomputes(kind, classes, regions, tmp_path):
    labels, pred, extra = _cohort(kind, classes, regions)
    ids = sorted(p.name.split(".")[0] for p in labels.iterdir())
    out = tmp_path / "ev"
    STOP_AT.append(ids[2])  # killed while the third case is evaluated
    assert _evaluate_cli(labels, pred, out, *extra, "--volume-error") == 130  # "interrupted; run ... to resume"
    assert CALLS == ids[:2] and not (out / "summary.json").exists()
    STOP_AT.clear()
    CALLS.clear()
    assert _evaluate_cli(labels, pred, out, *extra, "--volume-error") == 0
    assert CALLS == ids[2:]  # only the cases the interrupted run did not finish
    CALLS.clear()
    assert _evaluate_cli(labels, pred, tmp_path / "fresh", *extra, "--volume-error") == 0
    for name in ("metrics.csv", "volume_error.json"):
        assert (out / name).read_text() == (tmp_path / "fresh" / name).read_text()
    a, b = (json.loads((d / "summary.json").read_text()) for d in (out, tmp_path / "fresh"))
    assert a == b
    CALLS.clear()
    assert _evaluate_cli(labels, pred, out, *extra, "--volume-error") == 0
    assert CALLS == []  # every case from its resume state
    assert _evaluate_cli(labels, pred, out, *extra, "--volume-error", "--volume-error-unit", "mm3") == 0
    assert CALLS == ids  # another option of the product: every case again
    bias = json.loads((out / "summary.json").read_text())["volume_error"]["bias"]
    assert bias == pytest.approx({k: v * 1000 for k, v in a["volume_error"]["bias"].items()})


def test_without_the_option_outputs_match_an_evaluation_without_products(classes, tmp_path):
    """Registered but not asked for: the evaluation is that of a package without the product."""
    assert _evaluate_cli(classes["labels"], classes["predictions"], tmp_path / "off") == 0
    unregister_product(VolumeError.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(classes["labels"], classes["predictions"], tmp_path / "api", EvaluationConfig(), progress=False)
    for name in ("metrics.csv", "summary.json"):
        assert (tmp_path / "off" / name).read_text() == (tmp_path / "api" / name).read_text()
    assert CALLS == [] and not (tmp_path / "off" / "volume_error.json").exists()


@pytest.mark.slow
def test_torchrun_two_ranks_equal_one_process(classes, regions, tmp_path):
    """``evaluate --volume-error`` on two gloo ranks, as under ``torchrun``, writes the single process's files.

    The ranks are forked from the test process with torchrun's variables (:func:`tests._ranks.run_cli_ranks`: no
    interpreter start-up per rank), the product registered there as the fixture registered it; the command under
    ``torchrun`` itself is tests/engine/test_collectives.py's."""
    for kind in ("classes", "regions"):
        labels, pred, extra = _cohort(kind, classes, regions)
        argv = ["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(tmp_path / f"torchrun_{kind}"), "--quiet",
                "--volume-error", *extra]
        results = run_cli_ranks([(argv, ROOT), (argv, ROOT)])
        assert [rc for rc, _ in results] == [0, 0], (kind, results)
    for kind in ("classes", "regions"):
        labels, pred, extra = _cohort(kind, classes, regions)
        assert _evaluate_cli(labels, pred, tmp_path / f"single_{kind}", *extra, "--volume-error") == 0
        for name in ("metrics.csv", "summary.json", "volume_error.json"):
            got = (tmp_path / f"torchrun_{kind}" / name).read_text()
            assert got == (tmp_path / f"single_{kind}" / name).read_text(), name
        assert "volume_bias" in (tmp_path / f"torchrun_{kind}" / "metrics.csv").read_text().splitlines()[0]
