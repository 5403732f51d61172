"""Hostile review of distributed runs: uneven splits, ranks without cases, failures and resume across world sizes.

The rule checked: a run on several gloo ranks gives exactly the results of the same run on one process, whatever the
number of ranks and however the cases fall on them (a rank with no case included), and never leaves a rank waiting.
Workers are forked (torch.multiprocessing) and join a gloo group on loopback with a short collective timeout; the
parent gives up after a wall-clock limit, so a hang fails the test instead of blocking the suite.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import json
import math
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.workflows import evaluate as _evaluate_workflow  # noqa: F401 - imported once, not in each forked rank
from tests._ranks import free_port, run_cli_ranks, run_forked_ranks

WAIT_S = 120  # wall-clock limit of one multi-process run (a hang fails the test)
N_FINE = 60


def _entry(rank: int, world: int, port: int, fn: Callable[[int, int, dict], Any], spec: dict) -> None:
    """One forked rank: joins a gloo group from torchrun-style variables, runs ``fn`` and writes its JSON result."""
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    out = Path(spec["out"])
    res: Any
    with open(out / f"rank{rank}.log", "w") as log, contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30))
        try:
            try:
                res = fn(rank, world, spec)
            except Exception as e:  # the test compares it with the expected result and fails with the message
                res = {"error": f"{type(e).__name__}: {e}"[:500]}
        finally:
            dist.destroy_process_group()
    (out / f"rank{rank}.json").write_text(json.dumps(res))


def run_ranks(fn: Callable[[int, int, dict], Any], world: int, spec: dict) -> tuple[list[Any], list[str]]:
    """Run ``fn(rank, world, spec)`` on ``world`` forked gloo ranks: their results and logs (rank order).

    Fails the test when the ranks do not all finish within :data:`WAIT_S` seconds (a hang).
    """
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    for p in out.glob("rank*"):
        p.unlink()
    run_forked_ranks(_entry, (world, free_port(), fn, spec), world, WAIT_S)
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
    return results, [(out / f"rank{r}.log").read_text() for r in range(world)]


# ------------------------------------------------------------------------------- MONAI metric classes, empty rank
def _cases(n: int, num_classes: int = 3, seed: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        y = torch.zeros(1, 1, 10, 10, 10, dtype=torch.long)
        y[..., 2:8, 2:8, 2:8] = 1
        y[..., 4:6, 4:7, 3:7] = num_classes - 1
        logits = torch.randn(1, num_classes, 10, 10, 10, generator=g, dtype=torch.float64)
        logits += 3 * torch.nn.functional.one_hot(y[:, 0], num_classes).permute(0, 4, 1, 2, 3)
        out.append((torch.softmax(logits, 1), y))
    return out


def _metric_values(cases: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, Any]:
    """CalibrationMetric (pooled and per-case mean, classes from the data), BUC and NCC over this rank's cases."""
    from monai_unc.measures import entropy
    from monai_unc.metrics import NCCMetric
    from monai_unc.metrics.calibration import CalibrationMetric
    from monai_unc.metrics.spatial import BoundaryUncertaintyConcentrationMetric

    calib = CalibrationMetric(metrics=("ece", "nll", "brier"), n_fine_bins=N_FINE)  # num_classes: from the data
    buc = BoundaryUncertaintyConcentrationMetric()
    ncc = NCCMetric()
    for p, y in cases:
        calib(p, y)
        buc(y_pred=p.argmax(1, keepdim=True), y=y, uncertainty=entropy(p))
        ncc(y_pred=entropy(p), y=p[:, 1:2])
    pooled = {k: float(v) for k, v in calib.aggregate().items()}
    return {
        "pooled": pooled,
        "counts": calib.histogram.counts.tolist(),
        "mean": {k: float(v) for k, v in calib.aggregate("mean").items()},
        "per_case": sorted(calib.get_buffer().tolist()),
        "buc": sorted(buc.aggregate("none").reshape(-1).tolist()),
        "ncc": float(ncc.aggregate()),
    }


def _metric_worker(rank: int, world: int, spec: dict) -> dict[str, Any]:
    cases = _cases(spec["n"])
    return _metric_values(cases[rank::world])


@pytest.mark.parametrize("world,n", [(3, 2), (2, 1)])
def test_metric_classes_on_a_rank_without_cases_equal_one_process(tmp_path, world, n):
    """More ranks than cases: the rank without a case joins the reductions (the classes taken from the others'
    cases), so every rank gets the single-process values instead of failing alone while the others wait."""
    with torch.no_grad():
        torch.set_num_threads(1)
        single = _metric_values(_cases(n))
    results, logs = run_ranks(_metric_worker, world, {"out": str(tmp_path), "n": n})
    for rank, res in enumerate(results):
        assert "error" not in res, (rank, res, logs[rank][-2000:])
        assert res["counts"] == single["counts"]  # histogram counts: exactly
        for k, v in single["pooled"].items():
            assert math.isclose(res["pooled"][k], v, rel_tol=1e-12, abs_tol=1e-15), (rank, k)
        assert res["per_case"] == single["per_case"] and res["buc"] == single["buc"]
        assert math.isclose(res["ncc"], single["ncc"], rel_tol=1e-6)  # MONAI averages in float32
        for k, v in single["mean"].items():
            assert math.isclose(res["mean"][k], v, rel_tol=1e-12, abs_tol=1e-15), (rank, k)


def _guessing_worker(rank: int, world: int, spec: dict) -> dict[str, Any]:
    """BUC and NCC on a rank without cases whose own device guess (``buffer_device``) is not the others' device."""
    from monai_unc import _utils
    from monai_unc.measures import entropy
    from monai_unc.metrics import NCCMetric
    from monai_unc.metrics.spatial import BoundaryUncertaintyConcentrationMetric

    if world > 1:  # (a forked rank's own module) the guess of a GPU machine under cpu:gloo,cuda:nccl (the GPU) while
        # the buffers lie on the CPU; the meta device stands for the GPU here: a gather on it fails as one on the other
        # backend would
        _utils.buffer_device = lambda: torch.device("meta")
    buc, ncc = BoundaryUncertaintyConcentrationMetric(), NCCMetric()
    for p, y in _cases(spec["n"])[rank::world]:
        buc(y_pred=p.argmax(1, keepdim=True), y=y, uncertainty=entropy(p))
        ncc(y_pred=entropy(p), y=p[:, 1:2])
    return {"buc": sorted(buc.aggregate("none").reshape(-1).tolist()), "ncc": float(ncc.aggregate())}


def test_a_rank_without_cases_gathers_on_the_others_device(tmp_path):
    """Found by the review of the GPU paths: a rank without cases made its empty buffers on the device it guessed from
    the group's backend (``buffer_device``: the GPU under ``cpu:gloo,cuda:nccl``), not on the device of the others'
    buffers (the CPU for metrics of CPU tensors), so the gather was split over two backends. The ranks now exchange
    their buffers' device type with their layouts, and the empty rank gathers on that."""
    with torch.no_grad():
        torch.set_num_threads(1)
        single = _guessing_worker(0, 1, {"n": 1})
    results, logs = run_ranks(_guessing_worker, 2, {"out": str(tmp_path), "n": 1})
    for rank, res in enumerate(results):
        assert "error" not in res, (rank, res, logs[rank][-2000:])
        assert res["buc"] == single["buc"] and math.isclose(res["ncc"], single["ncc"], rel_tol=1e-6), rank


def _mismatch_worker(rank: int, world: int, spec: dict) -> dict[str, Any]:
    from monai_unc.metrics.calibration import CalibrationMetric

    metric = CalibrationMetric(metrics=("ece",), n_fine_bins=N_FINE)
    for p, y in _cases(1, num_classes=2 + rank):  # rank 0: 2 classes, rank 1: 3 classes
        metric(p, y)
    metric.aggregate()
    return {"ok": True}


def test_ranks_with_different_class_counts_fail_on_every_rank_with_one_message(tmp_path):
    results, logs = run_ranks(_mismatch_worker, 2, {"out": str(tmp_path)})
    for res in results:
        assert "different numbers of classes" in res.get("error", ""), (res, logs)


def _nan_metric_warnings(cases: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, Any]:
    """NCC of constant uncertainty maps (NaN for every case): the warnings of the cases and of the reduction."""
    from monai_unc.metrics import NCCMetric

    metric = NCCMetric()
    with warnings.catch_warnings(record=True) as per_case:
        warnings.simplefilter("always")
        for p, _ in cases:
            metric(y_pred=torch.ones_like(p[:, :1]), y=p[:, 1:2])
    with warnings.catch_warnings(record=True) as reduced:
        warnings.simplefilter("always")
        value = float(metric.aggregate())
    return {"value": value, "per_case": len(per_case), "reduced": [str(w.message) for w in reduced]}


def _nan_worker(rank: int, world: int, spec: dict) -> dict[str, Any]:
    return _nan_metric_warnings(_cases(3)[rank::world])


def test_metric_reduction_warnings_are_issued_once_not_once_per_rank(tmp_path):
    """Each case's warning comes from the rank that computed it (as many in all as on one process); the warning of
    the reduction, which every rank computes from the same gathered values, comes from rank 0 only."""
    single = _nan_metric_warnings(_cases(3))
    assert math.isnan(single["value"]) and single["per_case"] == 3 and len(single["reduced"]) == 1
    results, logs = run_ranks(_nan_worker, 2, {"out": str(tmp_path)})
    assert "error" not in results[0] and "error" not in results[1], logs
    assert all(math.isnan(r["value"]) for r in results)
    assert [r["per_case"] for r in results] == [2, 1]
    assert results[0]["reduced"] == single["reduced"] and results[1]["reduced"] == []


# --------------------------------------------------------------------------------------- CaseScoresHandler
def _handler_rows(items: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """Run a CaseScoresHandler over ``items`` (one per iteration) without a network: metrics, warnings, CSV rows."""
    from monai.data import MetaTensor

    from monai_unc.engines import CaseScoresHandler

    handler = CaseScoresHandler("mutual_information_mean", output_dir=out)
    engine = SimpleNamespace(state=SimpleNamespace(metrics={}, output=None, batch=None))
    handler._reset(engine)
    for it in items:
        image = MetaTensor(torch.zeros(1, 2, 2), meta={"filename_or_obj": it["case"]})
        engine.state.output = [{"mutual_information_mean": torch.tensor(it["score"])}]
        engine.state.batch = [{"image": image, "shift": it["shift"]}]
        handler._collect(engine)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handler._complete(engine)
    rows = []
    if (out / "case_scores.csv").exists():
        with open(out / "case_scores.csv") as f:
            rows = [r["case"] for r in csv.DictReader(f)]
    return {"auroc": engine.state.metrics["ood_auroc_mutual_information_mean"], "rows": rows,
            "warnings": [str(w.message) for w in caught]}


def _score_items() -> list[dict[str, Any]]:
    scores = [0.1, 0.7, float("nan"), 0.4, 0.9]
    return [{"case": f"case{i}.nii.gz", "score": s, "shift": "none" if i % 2 else "blur"}
            for i, s in enumerate(scores)]


def _handler_worker(rank: int, world: int, spec: dict) -> dict[str, Any]:
    out = Path(spec["out"]) / f"csv{rank}"
    out.mkdir(exist_ok=True)
    return _handler_rows(_score_items()[rank::world], out)  # as a DistributedSampler deals them


def test_case_scores_handler_table_and_warnings_equal_one_process(tmp_path):
    """The CSV lists the cases in the single-process (case-id) order, not rank by rank, and the warning about a
    non-finite score is issued once (by rank 0), not once per rank."""
    (tmp_path / "single").mkdir()
    single = _handler_rows(_score_items(), tmp_path / "single")
    assert single["rows"] == [it["case"] for it in _score_items()] and len(single["warnings"]) == 1
    results, logs = run_ranks(_handler_worker, 2, {"out": str(tmp_path / "dist")})
    assert "error" not in results[0] and "error" not in results[1], logs
    assert results[0]["rows"] == single["rows"]  # rank 0 writes the table
    assert results[1]["rows"] == []
    assert results[0]["auroc"] == results[1]["auroc"] == single["auroc"]
    assert results[0]["warnings"] == single["warnings"] and results[1]["warnings"] == []


# ---------------------------------------------------------------------------- evaluate: failure, resume, NaN case
def _cli_worker(rank: int, world: int, spec: dict) -> dict[str, Any]:
    """``cli.main`` on one rank: its exit status (its warnings are lines of the rank's log: the command shows them
    itself, so ``catch_warnings(record=True)`` around it records none)."""
    return {"rc": cli.main(spec["argv"])}


@pytest.fixture(scope="module")
def cohort(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile_dist")
    paths = write_toy_cohort(root / "cohort", n_cases=4, shape=(10, 10, 10))
    label = paths["labels"] / "toy002.nii.gz"  # an empty label: NaN metrics for that case
    img = nib.load(label)
    nib.save(nib.Nifti1Image(np.zeros(img.shape, np.uint8), img.affine), label)
    return {**paths, "root": root}


def _evaluate_argv(cohort: dict[str, Path], out: Path) -> list[str]:
    return ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", str(out), "--shifts",
            str(cohort["shifts"]), "--n-bins", "5", "--lesions", "-q"]


def test_failed_rank_then_resume_on_another_world_size_equals_one_process(cohort, tmp_path):
    """3 ranks with a case failing on rank 1: every rank exits 1, one line names the case, no cohort file is
    written; the rerun on 2 ranks (other shards) reuses the saved cases and writes the single-process files."""
    single = tmp_path / "single"
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(_evaluate_argv(cohort, single)) == 0
    assert "nan" in (single / "metrics.csv").read_text()  # the empty-label case has NaN metrics
    out = tmp_path / "dist"
    probs = cohort["predictions"] / "toy001_probs.nii.gz"  # sorted position 1: rank 1 of 3
    good = probs.read_bytes()
    probs.write_bytes(b"not a NIfTI file")
    try:
        results, logs = run_ranks(_cli_worker, 3, {"out": str(tmp_path / "w3"),
                                                   "argv": _evaluate_argv(cohort, out)})
    finally:
        probs.write_bytes(good)
    assert [r["rc"] for r in results] == [1, 1, 1], logs
    assert [log.count("case 'toy001' failed") for log in logs] == [0, 1, 0]
    assert "1 case(s) failed ('toy001')" in logs[0]
    assert not (out / "metrics.csv").exists() and not (out / "summary.json").exists()
    assert json.loads((out / "failures.json").read_text())["failures"][0]["case"] == "toy001"
    saved = sorted(p.name for p in (out / "state" / "cases").glob("*.json"))
    assert saved == ["toy000.json", "toy002.json", "toy003.json"]

    results, logs = run_ranks(_cli_worker, 2, {"out": str(tmp_path / "w2"), "argv": _evaluate_argv(cohort, out)})
    assert [r["rc"] for r in results] == [0, 0], logs
    assert not (out / "failures.json").exists()
    for name in ("metrics.csv", "summary.json", "state/rows.json"):
        assert (out / name).read_bytes() == (single / name).read_bytes(), name
    with np.load(out / "state" / "histogram.npz") as a, np.load(single / "state" / "histogram.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # rank 1 warns about nothing rank 0 reports (review 66: this compared warnings recorded around cli.main, which
    # shows them itself, so it compared two empty lists whatever the ranks said)
    said = [[ln for ln in log.splitlines() if ": warning: " in ln or ln.startswith("warning: ")] for log in logs]
    assert said[0] and not set(said[0]) & set(said[1]), said
    shutil.rmtree(out)


def test_region_evaluation_with_more_ranks_than_cases_equals_one_process(tmp_path):
    """3 ranks, 2 BraTS-like cases (one rank without a case): region histograms, QU-BraTS curves and lesions
    gathered to rank 0 give the single-process files byte for byte."""
    from tests._cases import write_brats_like_cohort

    (tmp_path / "cohort").mkdir()
    paths = write_brats_like_cohort(tmp_path / "cohort", n_cases=2)

    def argv(out: Path) -> list[str]:
        return ["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "-o", str(out),
                "--regions", "brats", "--lesions", "-q"]

    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(argv(tmp_path / "single")) == 0
    results, logs = run_ranks(_cli_worker, 3, {"out": str(tmp_path / "w"), "argv": argv(tmp_path / "dist")})
    assert [r["rc"] for r in results] == [0, 0, 0], logs
    for name in ("metrics.csv", "summary.json"):
        assert (tmp_path / "dist" / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name
    for name in ("histogram.npz", "region_histograms.npz", "products.npz"):
        a, b = tmp_path / "dist" / "state" / name, tmp_path / "single" / "state" / name
        assert a.exists() == b.exists(), name
        if a.exists():
            with np.load(a) as za, np.load(b) as zb:
                assert sorted(za.files) == sorted(zb.files), name
                for k in za.files:
                    np.testing.assert_array_equal(za[k], zb[k], err_msg=f"{name}:{k}")


def test_case_scores_handler_refuses_a_case_repeated_by_a_padding_sampler(tmp_path):
    """Regression: torch's DistributedSampler pads 5 cases on 2 ranks to 6 by repeating case0, and the gathered rows
    counted it twice in the OoD AUROC (0.333 instead of 0.5); the rows are those of the gather, in one process."""
    items = _score_items()
    with pytest.raises(ValueError, match=r"'case0.nii.gz'.*even_divisible=False"):
        _handler_rows(items + items[:1], tmp_path)
    assert not (tmp_path / "case_scores.csv").exists()
    assert _handler_rows(items, tmp_path)["rows"] == [it["case"] for it in items]


@pytest.mark.parametrize("command", ["evaluate", "infer"])
def test_a_refusal_on_one_rank_only_stops_every_rank(tmp_path, command):
    """Found by hostile testing: the options and folders are checked on every rank before the ranks join the group;
    a check that failed on rank 1 only (its output folder, on a disk the other rank does not see, is a file) left
    rank 0 waiting in its first collective for the whole collective timeout (6 hours by default). Now every rank
    exits 2 with one line, rank 0 naming rank 1's error; launched as torchrun would (two processes, env variables:
    forked ranks running ``cli.main``, :func:`tests._ranks.run_cli_ranks`)."""
    cohort = write_toy_cohort(tmp_path / "c", n_cases=2, shape=(12, 12, 12))
    here, there = tmp_path / "rank0", tmp_path / "rank1"
    here.mkdir()
    there.mkdir()
    (there / "out").write_text("a file where the output folder should be")
    if command == "evaluate":
        argv = ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "-o", "out", "-q"]
    else:
        argv = ["infer", "-i", str(cohort["images"]), "-o", "out", "--model", "example", "--method", "softmax",
                "--device", "cpu", "-q"]
    results = run_cli_ranks([(argv, here), (argv, there)], {"MONAI_UNC_DIST_TIMEOUT": "60"}, WAIT_S)
    (rc0, err0), (rc1, err1) = results
    # the output check names its option (--output) on the rank that refused
    assert rc1 == 2 and err1[-1] == f"monai-unc {command}: error: --output folder out is a file, not a folder", err1
    assert rc0 == 2 and err0[-1] == (f"monai-unc {command}: error: rank 1 failed: ValueError: output folder out is a "
                                     "file, not a folder"), err0
    assert not (here / "out").exists(), sorted(str(p.relative_to(here)) for p in here.rglob("*"))


def test_a_case_refused_when_the_cohort_is_put_together_is_reported_with_the_rank_that_ran_it(tmp_path):
    """Found by review 66: a case found bad only once rank 0 puts the cohort together (probabilities of another number
    of classes) was recorded in ``failures.json`` as rank 0's and its line said ``rank 0 of 2``, although rank 1
    evaluated it; ``failures.json`` names the rank that processed each case (docs/distributed.md)."""
    paths = write_toy_cohort(tmp_path / "c", n_cases=2, shape=(8, 8, 8))
    probs = paths["predictions"] / "toy001_probs.nii.gz"  # sorted position 1: rank 1 of 2
    img = nib.load(probs)
    two = np.asarray(img.dataobj, dtype=np.float32)
    nib.save(nib.Nifti1Image(np.concatenate([two[..., :1] / 2, two[..., :1] / 2, two[..., 1:]], -1), img.affine), probs)
    out = tmp_path / "out"
    argv = ["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "-o", str(out), "-q"]
    torch.set_num_threads(1)
    results, logs = run_ranks(_cli_worker, 2, {"out": str(tmp_path / "w"), "argv": argv})
    assert [r["rc"] for r in results] == [1, 1], logs
    assert json.loads((out / "failures.json").read_text())["failures"] == [
        {"case": "toy001", "rank": 1, "error": "CaseError: case 'toy001' has 3 classes, the cohort 2"}]
    assert "monai-unc evaluate: rank 1 of 2: case 'toy001' failed: CaseError" in logs[0], logs[0]
