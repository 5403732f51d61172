"""Distributed inference and evaluation (``monai_unc.engine``, ``monai-unc infer/evaluate`` under torchrun).

Multi-process tests run 2 gloo processes on loopback: the ``monai-unc evaluate`` command launched by ``torchrun``
(``python -m torch.distributed.run --standalone --nproc_per_node 2``), and forked workers (torch.multiprocessing)
that join one process group and run the CLI, the fault/resume scenario, the MONAI metric classes and an ignite
handler. References are single-process runs of the same code; cohort metrics must agree metric by metric
(histogram counts exactly, float sums within 1e-12 -- in practice the files are identical) and every case must
appear exactly once.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.engine import (
    CaseFailure,
    CasesFailed,
    DistContext,
    RankFailed,
    all_gather_objects,
    all_reduce_sum,
    barrier,
    broadcast_object,
    check_same,
    destroy_dist_context,
    gather_objects,
    get_dist_context,
    read_dist_env,
    reduce_histogram,
    reduce_state,
    shard,
    sync_errors,
    write_failures,
)
from monai_unc.evaluation import read_shifts
from tests._cases import TOY_NET
from tests._paths import ROOT
from tests._ranks import free_port

N_CASES = 7  # odd: the shards of 2 ranks differ in size
BAD = "toy003"  # sorted position 3: rank 1 of 2 (round-robin)
NET = TOY_NET
N_FINE = 240


@contextlib.contextmanager
def _one_thread():
    """Single-process references with one intra-op thread, like the workers (same summation order per case)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dist")
    paths = write_toy_cohort(root / "cohort", n_cases=N_CASES, shape=(16, 16, 16))
    bad = root / "bad"
    shutil.copytree(root / "cohort", bad)
    (bad / "predictions" / f"{BAD}_probs.nii.gz").write_bytes(b"not a NIfTI file")
    from monai.networks.nets import UNet

    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in NET.items() if k != "_target_"}).state_dict(), root / "net.pt")
    (root / "net.json").write_text(json.dumps(NET))
    return {**paths, "root": root, "bad": bad, "net": root / "net.json", "ckpt": root / "net.pt"}


def _eval_args(labels: Path, predictions: Path, out: Path, shifts: Path) -> list[str]:
    return ["evaluate", "-l", str(labels), "-p", str(predictions), "-o", str(out), "--shifts", str(shifts),
            "--budget", "0.3", "-q"]


def _infer_args(d: dict[str, Path], out: Path) -> list[str]:
    return ["infer", "-i", str(d["images"]), "-o", str(out), "--network", str(d["net"]), "--checkpoint",
            str(d["ckpt"]), "--samples", "2", "--device", "cpu", "-q"]


@pytest.fixture(scope="module")
def reference(data) -> dict[str, Path]:
    """Single-process evaluate and infer of the clean cohort."""
    out = data["root"] / "single"
    with _one_thread():
        assert cli.main(_eval_args(data["labels"], data["predictions"], out / "eval", data["shifts"])) == 0
        assert cli.main(_infer_args(data, out / "infer")) == 0
    return {"eval": out / "eval", "infer": out / "infer"}


def _rows(path: Path) -> list[dict[str, str]]:
    with (path / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def _assert_same_value(a, b, where: str) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), where
        for k in a:
            _assert_same_value(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_value(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool) and isinstance(b, (int, float)):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12), (where, a, b)
    else:
        assert a == b, (where, a, b)


def assert_same_evaluation(dist_dir: Path, single_dir: Path) -> None:
    """Metric by metric: per-case rows (each case once), every summary entry, the pooled histogram counts."""
    rows_d, rows_s = _rows(dist_dir), _rows(single_dir)
    ids = [r["case"] for r in rows_d]
    assert ids == sorted(set(ids)) == [f"toy{i:03d}" for i in range(N_CASES)]  # every case exactly once
    assert [r["case"] for r in rows_s] == ids
    for rd, rs in zip(rows_d, rows_s):
        assert rd.keys() == rs.keys()
        for k in rd:
            try:
                a, b = float(rd[k]), float(rs[k])
            except ValueError:
                assert rd[k] == rs[k], (rd["case"], k)
                continue
            assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12), (
                rd["case"], k, a, b)
    sd = json.loads((dist_dir / "summary.json").read_text())
    ss = json.loads((single_dir / "summary.json").read_text())
    # the folders evaluated (some runs read a copy of the predictions), with the same layout
    assert sd.pop("inputs")["layout"] == ss.pop("inputs")["layout"]
    _assert_same_value(sd, ss, "summary")
    assert sd["reliability"]["counts"] == ss["reliability"]["counts"]  # histogram-based: exactly
    with np.load(dist_dir / "state" / "histogram.npz") as hd, np.load(single_dir / "state" / "histogram.npz") as hs:
        assert list(hd["case_ids"]) == list(hs["case_ids"])
        np.testing.assert_array_equal(hd["counts"], hs["counts"])
        np.testing.assert_allclose(hd["sums"], hs["sums"], rtol=1e-12, atol=0)
    # stronger than required: the same additions in the same order give the same bytes
    assert (dist_dir / "metrics.csv").read_bytes() == (single_dir / "metrics.csv").read_bytes()
    assert json.dumps(sd) == json.dumps(ss)  # every float to the last bit (the inputs' paths aside)


# ------------------------------------------------------------------------------------------------ unit: helpers
def test_shard_is_a_deterministic_round_robin_partition():
    rng = np.random.default_rng(0)
    ids = [f"case{i:04d}" for i in rng.permutation(23)]
    for world in range(1, 6):
        parts = [shard(ids, r, world) for r in range(world)]
        assert sorted(x for p in parts for x in p) == sorted(ids)  # a partition: each id exactly once
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        assert parts == [shard(list(reversed(ids)), r, world) for r in range(world)]  # order of the input ignored
        assert parts[0] == sorted(ids)[0::world]
    items = [{"id": "b"}, {"id": "a"}, {"id": "c"}]
    assert shard(items, 1, 2, key=lambda d: d["id"]) == [{"id": "b"}]
    assert shard([], 0, 3) == []
    for kwargs, msg in [(dict(rank=2, world_size=2), "rank must be in"), (dict(rank=0, world_size=0), "world_size"),
                        (dict(rank=True, world_size=2), "rank must be an integer")]:
        with pytest.raises(ValueError, match=msg):
            shard(ids, **kwargs)
    with pytest.raises(ValueError, match=r"unique ids.*'a'"):
        shard(["a", "b", "a"], 0, 2)


def test_env_and_single_process_collectives(monkeypatch):
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(v, raising=False)
    assert read_dist_env() == (0, 1, 0)
    assert read_dist_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == (3, 4, 1)
    for env, msg in [({"WORLD_SIZE": "0"}, "WORLD_SIZE must be >= 1"), ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK"),
                     ({"WORLD_SIZE": "two"}, "WORLD_SIZE must be an integer"), ({"LOCAL_RANK": "-1"}, "LOCAL_RANK")]:
        with pytest.raises(ValueError, match=msg):
            read_dist_env(env)
    ctx = get_dist_context()
    assert (ctx.rank, ctx.world_size, ctx.distributed, ctx.is_main, ctx.owns_group) == (0, 1, False, True, False)
    assert all_gather_objects({"a": 1}, ctx) == [{"a": 1}] and gather_objects(5, ctx) == [5]
    assert broadcast_object("x", ctx) == "x"
    barrier(ctx)
    out = all_reduce_sum({"n": np.array([1, 2], np.int32), "f": np.array([0.5]), "b": np.array([True])}, ctx)
    assert out["n"].dtype == np.int64 and out["f"].dtype == np.float64 and out["b"].tolist() == [1]
    zero_d = all_reduce_sum({"n": np.int64(3), "f": np.float64(0.5)}, ctx)  # a 0-d array keeps its shape
    assert zero_d["n"].shape == () and zero_d["f"].shape == () and (int(zero_d["n"]), float(zero_d["f"])) == (3, 0.5)
    with pytest.raises(ValueError, match="x must be an integer, boolean or floating array"):
        all_reduce_sum(np.array(["a"]), ctx)
    sync_errors(None, ctx)
    check_same([1, 2], ctx, "anything")
    with pytest.raises(KeyError):
        sync_errors(KeyError("mine"), ctx)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR.*torchrun"):
        get_dist_context()


def test_write_failures_and_cases_failed(tmp_path):
    f = [CaseFailure("b", 1, "ValueError: x"), CaseFailure("a", 0, "OSError: y")]
    path = write_failures(tmp_path / "failures.json", f, "monai-unc evaluate")
    doc = json.loads(path.read_text())
    assert doc["n_failed"] == 2 and [d["case"] for d in doc["failures"]] == ["a", "b"]
    assert doc["failures"][1] == {"case": "b", "rank": 1, "error": "ValueError: x"}
    write_failures(path, [])  # a run without failures removes a stale file
    assert not path.exists()
    e = CasesFailed(f)
    assert isinstance(e, ValueError) and [x.case for x in e.failures] == ["a", "b"]
    assert "2 case(s) failed: 'a', 'b'; first error: OSError: y" in str(e)


# ------------------------------------------------------------------------------------------------ unit: resume
def test_evaluate_resumes_from_per_case_state(data, tmp_path, monkeypatch):
    import monai_unc.evaluation.runner as cohort

    calls: list[str] = []
    real = cohort.evaluate_case

    def counting(files, config):
        calls.append(files.case_id)
        return real(files, config)

    monkeypatch.setattr(cohort, "evaluate_case", counting)
    pred = tmp_path / "pred"
    shutil.copytree(data["predictions"], pred)
    out = tmp_path / "e"
    cfg = cohort.EvaluationConfig(shifts=read_shifts(data["shifts"]), spatial=False)
    _, first, _ = cohort.run_evaluate(data["labels"], pred, out, cfg)
    assert sorted(calls) == [f"toy{i:03d}" for i in range(N_CASES)]
    assert len(list((out / "state" / "cases").glob("*.json"))) == N_CASES
    calls.clear()
    _, again, _ = cohort.run_evaluate(data["labels"], pred, out, cfg)
    assert calls == [] and again == first  # every case resumed, the same numbers
    # a changed input file, a changed per-case option, or resume=False recompute
    os.utime(pred / "toy002_probs.nii.gz", ns=(1, 1))
    cohort.run_evaluate(data["labels"], pred, out, cfg)
    assert calls == ["toy002"]
    calls.clear()
    cohort.run_evaluate(data["labels"], pred, out, cohort.EvaluationConfig(spatial=False, budget=0.5))
    assert len(calls) == N_CASES  # no shift table: the shift column of every row changes
    calls.clear()
    cohort.run_evaluate(data["labels"], pred, out, cohort.EvaluationConfig(spatial=False, budget=0.4))
    assert calls == []  # the budget only changes the summary
    cohort.run_evaluate(data["labels"], pred, tmp_path / "e2", cfg, resume=False)
    assert len(calls) == N_CASES and not (tmp_path / "e2" / "state" / "cases").exists()


def test_cli_bad_case_is_reported_and_a_rerun_resumes(data, tmp_path, capsys, monkeypatch):
    import monai_unc.evaluation.runner as cohort

    pred = tmp_path / "pred"
    shutil.copytree(data["bad"] / "predictions", pred)
    out = tmp_path / "e"
    argv = _eval_args(data["labels"], pred, out, data["shifts"])
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"monai-unc evaluate: case '{BAD}' failed: ")
    assert "1 case(s) failed ('toy003')" in err[1] and "run the same command again to resume" in err[1]
    assert not (out / "metrics.csv").exists()  # no cohort numbers from a partial cohort
    doc = json.loads((out / "failures.json").read_text())
    assert [f["case"] for f in doc["failures"]] == [BAD] and doc["failures"][0]["rank"] == 0
    shutil.copy(data["predictions"] / f"{BAD}_probs.nii.gz", pred / f"{BAD}_probs.nii.gz")
    calls: list[str] = []
    real = cohort.evaluate_case
    monkeypatch.setattr(cohort, "evaluate_case", lambda f, c: calls.append(f.case_id) or real(f, c))
    assert cli.main(argv) == 0
    assert calls == [BAD] and not (out / "failures.json").exists()
    assert [r["case"] for r in _rows(out)] == [f"toy{i:03d}" for i in range(N_CASES)]


def test_cli_infer_bad_image_is_reported_and_a_rerun_resumes(data, tmp_path, capsys, monkeypatch):
    import monai_unc.workflows.infer as predict

    images = tmp_path / "images"
    shutil.copytree(data["images"], images)
    good = (images / "toy001.nii.gz").read_bytes()
    (images / "toy001.nii.gz").write_bytes(b"broken")
    out = tmp_path / "o"
    argv = _infer_args({**data, "images": images}, out)
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "monai-unc infer: case 'toy001' failed: " in err and "1 case(s) failed ('toy001')" in err
    assert json.loads((out / "failures.json").read_text())["failures"][0]["case"] == "toy001"
    assert predict.is_finished("toy000", out) and predict.is_finished("toy002", out)
    assert not predict.is_finished("toy001", out)
    (images / "toy001.nii.gz").write_bytes(good)
    done: list[str] = []
    real = predict.predict_case
    monkeypatch.setattr(predict, "predict_case", lambda case, *a, **k: done.append(case.case_id) or real(case, *a, **k))
    assert cli.main(argv) == 0
    assert done == ["toy001"] and not (out / "failures.json").exists()


def test_setup_error_is_one_line_not_one_per_case(data, tmp_path, capsys):
    argv = ["infer", "-i", str(data["images"]), "-o", str(tmp_path / "o"), "--network",
            json.dumps({**NET, "dropout": 0.0}), "--checkpoint", str(data["ckpt"]), "-q"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no dropout layer" in err


def test_assemble_rejects_a_case_with_another_class_count(data):
    from monai_unc.evaluation import EvaluationConfig, assemble_state, evaluate_shard
    from monai_unc.io import CaseError, match_cases

    cfg = EvaluationConfig(spatial=False)
    results = evaluate_shard(match_cases(data["labels"], data["predictions"])[:3], cfg)
    res, files, _ = results[1]
    shuffled = [results[2], (res, files, 3), results[0]]
    failures: list = []
    state = assemble_state(shuffled, cfg.n_fine_bins, failures)
    assert [r["case"] for r in state.rows] == ["toy000", "toy002"]  # added in case-id order
    assert failures[0][0] == "toy001" and "has 3 classes, the cohort 2" in str(failures[0][1])
    with pytest.raises(CaseError, match="has 3 classes"):
        assemble_state(shuffled, cfg.n_fine_bins)


# ------------------------------------------------------------------------------------------------ 2 processes
def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(v, None)
    return env


@pytest.mark.slow
def test_torchrun_evaluate_equals_single_process(data, reference, tmp_path):
    """``torchrun --standalone --nproc_per_node 2 -m monai_unc.cli evaluate`` (the command initialises gloo from
    torchrun's environment) writes the same metrics.csv / summary.json as one process."""
    out = tmp_path / "eval"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
           "monai_unc.cli", *_eval_args(data["labels"], data["predictions"], out, data["shifts"])]
    # torchrun's agent makes a torchelastic_* folder of log folders in the temporary folder and leaves it there: the
    # test's own, not the system's (found by review 75: one more folder in /tmp at every make test)
    (tmp_path / "tmp").mkdir()
    proc = subprocess.run(cmd, cwd=ROOT, env={**_env(), "TMPDIR": str(tmp_path / "tmp")}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert_same_evaluation(out, reference["eval"])
    assert len(list((out / "state" / "cases").glob("*.json"))) == N_CASES


def _metric_data(n: int = 5, seed: int = 3) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        y = torch.zeros(1, 1, 14, 14, 14, dtype=torch.long)
        y[..., 2:11, 3:11, 2:12] = 1
        y[..., 5:8, 5:9, 4:9] = 2
        logits = torch.randn(1, 3, 14, 14, 14, generator=g, dtype=torch.float64) * 1.2
        logits += 4 * torch.nn.functional.one_hot(y[:, 0], 3).permute(0, 4, 1, 2, 3)  # ~2% of voxels wrong
        out.append((torch.softmax(logits, 1), y))
    return out


def _metric_run(cases: list[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """CalibrationMetric, CalibrationHandler (ignite) and the BUC metric over ``cases`` (this process's share)."""
    from ignite.engine import Engine

    from monai_unc.handlers.calibration import CalibrationHandler
    from monai_unc.measures import entropy
    from monai_unc.metrics.calibration import CalibrationMetric
    from monai_unc.metrics.spatial import BoundaryUncertaintyConcentrationMetric

    metric = CalibrationMetric(num_classes=3, n_fine_bins=N_FINE)
    buc = BoundaryUncertaintyConcentrationMetric()
    for p, y in cases:
        metric(p, y)
        buc(y_pred=p.argmax(1, keepdim=True), y=y, uncertainty=entropy(p))
    pooled = {k: float(v) for k, v in metric.aggregate().items()}
    engine = Engine(lambda e, b: b)
    CalibrationHandler(num_classes=3, metrics=("ece", "all_label_ece", "nll"), n_fine_bins=N_FINE).attach(
        engine, "calib")
    engine.run(cases)
    return {
        "pooled": pooled,
        "counts": metric.histogram.counts.tolist(),
        "sums": metric.histogram.sums.tolist(),
        "per_case": metric.get_buffer().tolist(),
        "handler": {k: v for k, v in engine.state.metrics.items() if k.startswith("calib_")},
        "handler_details": torch.cat([engine.state.metric_details[f"calib_{m}"] for m in
                                      ("ece", "all_label_ece", "nll")], 1).tolist(),
        "buc": buc.get_buffer().reshape(-1).tolist(),
        "buc_mean": float(buc.aggregate()),
    }


def _worker(rank: int, world: int, port: int, spec: dict) -> None:
    """One rank: joins the group from torchrun-style env vars, then runs the CLI and the metric classes."""
    import monai_unc.evaluation.runner as cohort
    import monai_unc.workflows.infer as predict
    from monai_unc.metrics.calibration import ConfidenceHistogram

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    out = Path(spec["out"])
    res: dict = {}
    calls: list[str] = []
    real_eval, real_pred = cohort.evaluate_case, predict.predict_case
    cohort.evaluate_case = lambda f, c: calls.append(f.case_id) or real_eval(f, c)
    predict.predict_case = lambda case, *a, **k: calls.append(case.case_id) or real_pred(case, *a, **k)
    with open(out / f"rank{rank}.log", "w") as log, contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
        ctx = get_dist_context()  # the group outlives the CLI calls below (as under ignite's idist.Parallel)
        try:
            res["ctx"] = [ctx.rank, ctx.world_size, ctx.owns_group, ctx.backend]
            res["infer_rc"] = cli.main(spec["infer"])
            res["infer_cases"], calls[:] = list(calls), []
            res["fail_rc"] = cli.main(spec["eval_bad"])
            res["fail_cases"], calls[:] = list(calls), []
            if rank == 0:
                states = Path(spec["eval_bad_out"]) / "state" / "cases"
                res["mtimes"] = {p.name: p.stat().st_mtime_ns for p in states.glob("*.json")}
                shutil.copy(spec["good_probs"], spec["bad_probs"])  # the bad case is fixed
            barrier(ctx)
            res["resume_rc"] = cli.main(spec["eval_bad"])
            res["resume_cases"], calls[:] = list(calls), []
            # MONAI metric classes and an ignite handler on this rank's share of the cases
            cases = _metric_data()
            res["metrics"] = _metric_run([cases[i] for i in shard(list(range(len(cases))), rank, world)])
            # exact reductions
            arrays = {"n": np.arange(4) * (rank + 1), "f": np.array([0.1, 1e-17, 1.0 / 3.0]) * (rank + 1.5)}
            res["reduced"] = {k: v.tolist() for k, v in all_reduce_sum(arrays, ctx).items()}
            scalar = all_reduce_sum(np.float64(rank + 0.25), ctx)  # 0-d: the sum keeps the shape
            res["scalar"] = [list(scalar.shape), float(scalar)]
            try:
                all_reduce_sum(np.zeros(rank + 1), ctx)
            except ValueError as e:
                res["shape_error"] = str(e)
            hist = ConfidenceHistogram(3, N_FINE)
            for i in shard(list(range(len(cases))), rank, world):
                hist.update(cases[i][0], cases[i][1], case_ids=[f"c{i}"])
            pooled = reduce_histogram(hist, ctx)
            # any mergeable state: the conformal states of this rank's cases, merged in rank order on every rank
            from monai_unc.metrics.conformal import conformal_case_state

            mine = [conformal_case_state(cases[i][0][0].numpy(), cases[i][1][0, 0].numpy(), grid=32)
                    for i in shard(list(range(len(cases))), rank, world)]
            local = mine[0]
            for st in mine[1:]:
                local.merge(st)
            merged = reduce_state(local, ctx)
            res["conformal"] = {"true_counts": merged.true_counts.tolist(),
                                "false_counts": merged.false_counts.tolist()}
            res["hist"] = {"counts": pooled.counts.tolist(), "sums": pooled.sums.tolist(),
                           "scalars": pooled.scalars.tolist()}
            try:
                sync_errors(ValueError("boom") if rank == 1 else None, ctx)
            except ValueError as e:
                res["sync_error"] = [type(e).__name__, str(e)]
            res["gathered"] = gather_objects(rank * 10, ctx)
            res["broadcast"] = broadcast_object(f"from {rank}", ctx, src=1)
        finally:
            destroy_dist_context(ctx)  # created by get_dist_context above; the CLI calls left it alone
    (out / f"rank{rank}.json").write_text(json.dumps(res))


def test_two_gloo_ranks_cli_faults_resume_and_metric_classes(data, reference, tmp_path):
    out = tmp_path / "w"
    out.mkdir()
    bad_pred = tmp_path / "bad_pred"
    shutil.copytree(data["bad"] / "predictions", bad_pred)
    spec = {
        "out": str(out),
        "infer": _infer_args(data, out / "infer"),
        "eval_bad": _eval_args(data["labels"], bad_pred, out / "evalf", data["shifts"]),
        "eval_bad_out": str(out / "evalf"),
        "good_probs": str(data["predictions"] / f"{BAD}_probs.nii.gz"),
        "bad_probs": str(bad_pred / f"{BAD}_probs.nii.gz"),
    }
    # fork: the workers reuse the imported modules (spawn would import torch and MONAI again in each)
    torch.multiprocessing.start_processes(_worker, args=(2, free_port(), spec), nprocs=2, join=True,
                                          start_method="fork")
    r0, r1 = (json.loads((out / f"rank{r}.json").read_text()) for r in range(2))
    logs = [(out / f"rank{r}.log").read_text() for r in range(2)]
    assert r0["ctx"][:3] == [0, 2, True] and r1["ctx"][:3] == [1, 2, True] and r0["ctx"][3] == "gloo"
    ids = [f"toy{i:03d}" for i in range(N_CASES)]

    # infer: each case predicted exactly once, on its round-robin rank; outputs equal the single-process ones
    assert r0["infer_rc"] == r1["infer_rc"] == 0
    assert r0["infer_cases"] == ids[0::2] and r1["infer_cases"] == ids[1::2]
    import nibabel as nib

    names = sorted(p.name for p in reference["infer"].glob("*.nii.gz"))
    assert names == sorted(p.name for p in (out / "infer").glob("*.nii.gz")) and len(names) == 6 * N_CASES
    for n in names:
        np.testing.assert_array_equal(nib.load(out / "infer" / n).get_fdata(),
                                      nib.load(reference["infer"] / n).get_fdata(), err_msg=n)

    # fault: rank 1 reports the bad case, rank 0 finishes its shard; every rank exits 1; failures.json by rank 0
    assert r0["fail_rc"] == r1["fail_rc"] == 1
    assert r0["fail_cases"] == ids[0::2] and r1["fail_cases"] == [c for c in ids[1::2] if c != BAD]
    assert f"monai-unc evaluate: rank 1 of 2: case '{BAD}' failed: " in logs[1]
    assert f"1 case(s) failed ('{BAD}')" in logs[0] and f"case '{BAD}' failed" not in logs[0]
    assert sorted(r0["mtimes"]) == [f"{c}.json" for c in ids if c != BAD]
    # rerun: only the fixed case is evaluated, the others are resumed; the result equals one process
    assert r0["resume_rc"] == r1["resume_rc"] == 0
    assert r0["resume_cases"] == [] and r1["resume_cases"] == [BAD]
    states = out / "evalf" / "state" / "cases"
    assert {k: (states / k).stat().st_mtime_ns for k in r0["mtimes"]} == r0["mtimes"]
    assert not (out / "evalf" / "failures.json").exists()
    assert_same_evaluation(out / "evalf", reference["eval"])

    # MONAI metric classes and the ignite handler reduce to the single-process values
    with _one_thread():
        single = _metric_run(_metric_data())
    order = shard(list(range(5)), 0, 2) + shard(list(range(5)), 1, 2)  # MONAI gathers rank 0's cases first
    for r in (r0, r1):
        m = r["metrics"]
        assert m["counts"] == single["counts"]  # histogram counts: exactly
        np.testing.assert_allclose(m["sums"], single["sums"], rtol=1e-12, atol=0)
        for k, v in single["pooled"].items():
            assert math.isclose(m["pooled"][k], v, rel_tol=1e-12, abs_tol=1e-12), k
        for k, v in single["handler"].items():
            assert math.isclose(m["handler"][k], v, rel_tol=1e-12, abs_tol=1e-12), k
        assert m["per_case"] == [single["per_case"][i] for i in order]  # per-case values: identical
        assert m["handler_details"] == [single["handler_details"][i] for i in order]
        assert m["buc"] == [single["buc"][i] for i in order] and all(0 < v < 1 for v in m["buc"])
        assert m["buc_mean"] == pytest.approx(single["buc_mean"], rel=1e-6)  # MONAI averages in float32

    # all_reduce_sum: rank-order sums, identical on both ranks; mismatched shapes fail on every rank
    n = [np.arange(4) * (r + 1) for r in range(2)]
    f = [np.array([0.1, 1e-17, 1.0 / 3.0]) * (r + 1.5) for r in range(2)]
    assert r0["reduced"] == r1["reduced"] == {"n": (n[0] + n[1]).tolist(), "f": (f[0] + f[1]).tolist()}
    assert "rank 1 has keys/shapes" in r0["shape_error"] and "rank 1 has keys/shapes" in r1["shape_error"]
    assert r0["scalar"] == r1["scalar"] == [[], 1.5]
    # reduce_histogram equals the histogram of all cases pooled in one process
    from monai_unc.metrics.calibration import ConfidenceHistogram

    cases = _metric_data()
    ref = ConfidenceHistogram(3, N_FINE)
    for i, (p, y) in enumerate(cases):
        ref.update(p, y, case_ids=[f"c{i}"])
    ref = ref.pooled()
    for r in (r0, r1):
        assert r["hist"]["counts"] == ref.counts.tolist()
        np.testing.assert_allclose(r["hist"]["sums"], ref.sums.numpy(), rtol=1e-12, atol=0)
        np.testing.assert_allclose(r["hist"]["scalars"], ref.scalars.numpy(), rtol=1e-12, atol=0)
    # reduce_state: the conformal state of all cases, on every rank, as merging them in one process
    from monai_unc.metrics.conformal import conformal_case_state

    states = [conformal_case_state(p[0].numpy(), y[0, 0].numpy(), grid=32) for p, y in cases]
    one = states[0]
    for st in states[1:]:
        one.merge(st)
    for r in (r0, r1):
        assert r["conformal"] == {"true_counts": one.true_counts.tolist(), "false_counts": one.false_counts.tolist()}
    # a failure in a step every rank runs raises on every rank, naming the failing rank
    assert r0["sync_error"] == [RankFailed.__name__, "rank 1 failed: ValueError: boom"]
    assert r1["sync_error"] == ["ValueError", "boom"]
    assert r0["gathered"] == [0, 10] and r1["gathered"] is None
    assert r0["broadcast"] == r1["broadcast"] == "from 1"


def test_dist_context_describe():
    ctx = DistContext(rank=1, world_size=4)
    assert ctx.distributed and not ctx.is_main and ctx.describe() == "rank 1 of 4"
    assert DistContext().describe() == ""


def test_demo_refuses_to_run_on_several_ranks(monkeypatch, tmp_path, capsys):
    from monai_unc import cli

    monkeypatch.setenv("WORLD_SIZE", "2")
    assert cli.main(["demo", "--output", str(tmp_path / "d"), "--quiet"]) == 2
    assert "demo runs on one process" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(("device", "local", "want"), [("cuda", 3, 1), (torch.device("cuda"), 0, 0), ("cuda:1", 0, 1)])
def test_a_cuda_device_without_index_is_the_local_ranks_gpu(monkeypatch, device, local, want):
    """Found by the review of the GPU paths: ``get_dist_context("cuda")`` (``share_refusal`` under torchrun with
    ``--device cuda``, ``cohort_session(device="cuda")``) passed the index-less device to ``torch.cuda.set_device``,
    which refuses it ("Expected a torch.device with a specified index"): the refusal to share became that error.
    The real ``set_device`` runs here, down to its CUDA call."""
    from monai_unc.engine import collectives

    current: list[int] = []
    monkeypatch.setattr(torch._C, "_cuda_setDevice", current.append, raising=False)  # absent from CPU-only builds
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)

    class Joined(Exception):
        pass

    def join(backend, rank, world, timeout):
        raise Joined(backend)

    monkeypatch.setattr(collectives, "_join_group", join)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", str(local))
    monkeypatch.setenv("LOCAL_RANK", str(local))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(Joined, match="cpu:gloo,cuda:nccl"):
        get_dist_context(device)
    assert current == [want]
