"""The workflow checks behind the command line, called from Python (``monai_unc.workflows.prepare``): a Python caller
of :func:`prepare_infer` gets the inferer and settings that ``monai-unc infer`` builds for the same options, and the
same refusals (a ``ValueError`` naming the option) before any case is predicted; likewise for ``evaluate``
(:func:`prepare_evaluate`), ``calibrate`` and ``demo``. Everything runs on three 16^3 synthetic cases with a
two-level UNet with random weights; the CLI's own inference loop is replaced by a recorder, so nothing is predicted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.inferers import find_dropout_layers
from monai_unc.io import json_safe
from monai_unc.workflows import (
    InferPlan,
    infer_measures,
    normalize_roi,
    prepare_evaluate,
    prepare_infer,
    read_region_spec,
    resolve_device,
)
from monai_unc.workflows import evaluate as evaluate_workflow
from monai_unc.workflows import infer_plan as infer_plan_workflow
from monai_unc.workflows.calibrate import run_calibrate
from monai_unc.workflows.demo import run_demo
from tests._cases import TOY_NET
from tests._paths import ROOT

NET = TOY_NET
NO_DROPOUT = dict(NET, dropout=0.0)


def _net(spec: dict) -> torch.nn.Module:
    from monai.networks.nets import UNet

    return UNet(**{k: v for k, v in spec.items() if k != "_target_"})


@pytest.fixture(scope="module")
def s(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prepare")
    paths = write_toy_cohort(root / "data", n_cases=3, shape=(16, 16, 16))
    for i, name in enumerate(("ckpt", "ckpt2")):
        torch.manual_seed(i)
        torch.save(_net(NET).state_dict(), root / f"{name}.pt")
    (root / "net.json").write_text(json.dumps(NET))
    return {**paths, "root": root, "ckpt": root / "ckpt.pt", "ckpt2": root / "ckpt2.pt", "spec": root / "net.json"}


def _cli_plan(monkeypatch, argv: list[str]) -> InferPlan:
    """The plan ``monai-unc infer argv`` builds (its inference loop replaced by a recorder)."""
    seen: list[InferPlan] = []

    def record(cases, model, inferer, settings, output, **kwargs: Any) -> list:
        seen.append(InferPlan(list(cases), model, inferer, settings))
        return []

    monkeypatch.setattr(infer_plan_workflow, "run_infer", record)
    assert cli.main(argv) == 0
    assert len(seen) == 1
    return seen[0]


def _describe(inferer: Any) -> dict[str, Any]:
    base = inferer.base_inferer
    return {
        "type": type(inferer).__name__,
        "sources": [(type(src).__name__, getattr(src, "num_samples", None)) for src in inferer.sources],
        "keys": inferer.keys,
        "activation": inferer.activation,
        "seed": inferer.seed,
        "base": type(base).__name__,
        "roi": getattr(base, "roi_size", None),
        "overlap": getattr(base, "overlap", None),
        "sw_batch_size": getattr(base, "sw_batch_size", None),
        "share_passes": getattr(inferer, "share_passes", None),
        "sample_batch_size": getattr(inferer, "sample_batch_size", None),
    }


CASES = [
    ("mcdropout+tta, one window size", ["--method", "mcdropout+tta", "--roi", "8", "--overlap", "0.5"],
     {"method": "mcdropout+tta", "roi": 8, "overlap": 0.5}),
    ("per-axis windows, a list", ["--roi", "8", "8", "16", "--sw-batch-size", "2", "--seed", "3"],
     {"roi": [8, 8, 16], "sw_batch_size": 2, "seed": 3}),
    ("softmax keeps its two maps", ["--method", "softmax", "--no-probs"], {"method": "softmax", "write_probs": False}),
    ("ensemble of both checkpoints", ["--method", "ensemble", "--measures", "mutual_information", "variance"],
     {"method": "ensemble", "measures": ["mutual_information", "variance"]}),
    ("regions of a sigmoid network", ["--activation", "sigmoid", "--regions", '{"A": [1], "B": [1, 2]}'],
     {"activation": "sigmoid", "regions": '{"A": [1], "B": [1, 2]}'}),
    ("tta noise, intensity, no activation", ["--method", "tta", "--tta-noise", "0.1", "--intensity", "zscore",
                                             "--activation", "none"],
     {"method": "tta", "tta_noise": 0.1, "intensity": "zscore", "activation": "none"}),
    ("full passes", ["--no-share-passes"], {"share_passes": False}),
    ("samples batched by 4", ["--method", "ratein+tta", "--sample-batch-size", "4"],
     {"method": "ratein+tta", "sample_batch_size": 4}),
]


@pytest.mark.parametrize("name, flags, kwargs", CASES, ids=[c[0] for c in CASES])
def test_python_caller_gets_the_plan_of_the_cli(s, tmp_path, monkeypatch, name, flags, kwargs):
    checkpoints = [str(s["ckpt"]), str(s["ckpt2"])] if "ensemble" in flags else [str(s["ckpt"])]
    argv = ["infer", "-i", str(s["images"]), "-o", str(tmp_path / "out"), "--network", str(s["spec"]),
            "--checkpoint", *checkpoints, "--samples", "3", "--device", "cpu", "--quiet", *flags]
    from_cli = _cli_plan(monkeypatch, argv)
    plan = prepare_infer(s["images"], network=s["spec"], checkpoint=checkpoints, samples=3, **kwargs)
    assert json_safe(plan.settings.to_json()) == json_safe(from_cli.settings.to_json())
    assert _describe(plan.inferer) == _describe(from_cli.inferer)
    assert [c.case_id for c in plan.cases] == [c.case_id for c in from_cli.cases] == ["toy000", "toy001", "toy002"]
    assert plan.model.description == from_cli.model.description
    if "softmax" in flags:
        assert plan.settings.measures == ["predictive_entropy", "one_minus_max_prob"]
    if "--regions" in flags:
        assert plan.settings.regions == {"A": [1], "B": [1, 2]}


def test_python_caller_gets_the_posthoc_dropout_of_the_cli(s, tmp_path, monkeypatch):
    argv = ["infer", "-i", str(s["images"]), "-o", str(tmp_path / "out"), "--network", json.dumps(NO_DROPOUT),
            "--checkpoint", str(s["ckpt"]), "--dropout", "0.3", "--quiet", "--device", "cpu"]
    from_cli = _cli_plan(monkeypatch, argv)
    plan = prepare_infer(s["images"], network=NO_DROPOUT, checkpoint=s["ckpt"], dropout=0.3)
    assert plan.settings == from_cli.settings and plan.settings.dropout == 0.3
    for p in (plan, from_cli):
        modules, hooks = find_dropout_layers(p.model.network)
        assert not modules and len(hooks) > 0 and all(h.p == 0.3 for h in hooks)


def _refusals(s: dict[str, Path]) -> list[tuple[str, list[str], dict[str, Any], str]]:
    """(name, CLI flags, prepare_infer keyword arguments, message): the network is ``s["spec"]`` with one checkpoint
    unless the keywords name another (given to the command line as inline JSON)."""
    return [
        ("softmax gives two maps", ["--method", "softmax", "--measures", "variance"],
         {"method": "softmax", "measures": ["variance"]},
         "--method softmax gives only predictive_entropy and one_minus_max_prob, not variance"),
        ("regions need sigmoid", ["--regions", "brats"], {"regions": "brats"},
         "--regions describes the sigmoid channels of a region-based network"),
        ("unknown regions", ["--activation", "sigmoid", "--regions", "bratz"],
         {"activation": "sigmoid", "regions": "bratz"}, "--regions: regions must be one of"),
        ("mc dropout without dropout", [], {"network": NO_DROPOUT}, "network has no dropout layer to sample from"),
        ("ssn without an SSN head", ["--method", "ssn"], {"method": "ssn"},
         "--method ssn: the network (UNet) is not a Stochastic Segmentation Network"),
        ("2 window sizes for a 3D network", ["--roi", "8", "8"], {"roi": [8, 8]},
         r"--roi gives 2 sizes (8, 8) but the network takes 3D input"),
        ("ensemble of one", ["--method", "ensemble"], {"method": "ensemble"},
         "--method ensemble needs at least two --checkpoint files"),
        ("unknown source", ["--method", "mcdropout+magic"], {"method": "mcdropout+magic"},
         "--method must be '+'-joined names"),
        ("noise without tta", ["--tta-noise", "0.1"], {"tta_noise": 0.1}, "is used by the tta source only"),
        ("two models", ["--model", "example"], {"model": "example"}, "exactly one of --model example"),
        ("batches without shared passes", ["--no-share-passes", "--sample-batch-size", "3"],
         {"share_passes": False, "sample_batch_size": 3}, "drop it or drop --no-share-passes"),
        ("batches without samples to share", ["--method", "tta", "--sample-batch-size", "3"],
         {"method": "tta", "sample_batch_size": 3}, "add mcdropout or ratein to --method 'tta'"),
        ("full passes without samples to share", ["--method", "tta", "--no-share-passes"],
         {"method": "tta", "share_passes": False}, "--no-share-passes concerns MC dropout / Rate-In samples"),
    ]


def test_python_caller_gets_the_refusals_of_the_cli(s, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(infer_plan_workflow, "run_infer",
                        lambda *a, **k: pytest.fail("a refused run reached the inference loop"))
    for name, flags, kwargs, message in _refusals(s):
        network = json.dumps(kwargs["network"]) if "network" in kwargs else str(s["spec"])
        argv = ["infer", "-i", str(s["images"]), "-o", str(tmp_path / "out"), "--network", network,
                "--checkpoint", str(s["ckpt"]), "--quiet", "--device", "cpu", *flags]
        assert cli.main(argv) == 2, name
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (name, err)
        call = {"network": s["spec"], "checkpoint": [s["ckpt"]], **kwargs}
        with pytest.raises(ValueError) as e:
            prepare_infer(s["images"], **call)
        assert message in str(e.value), (name, str(e.value))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("kwargs, message", [
    ({"activation": "softmx"}, "--activation must be one of"),
    ({"intensity": "unit"}, "--intensity must be 'auto' or one of"),
    ({"dropout": 1.5}, "--dropout must be a rate in (0, 1)"),
    ({"dropout": float("nan")}, "--dropout must be a rate in (0, 1)"),
    ({"sw_batch_size": 0}, "--sw-batch-size must be a positive integer"),
    ({"measures": ["entropy"]}, "--measures: unknown measure(s) 'entropy'"),
    ({"samples": 0}, "--samples must be a positive integer"),
    ({"sample_batch_size": 0}, "--sample-batch-size must be 'auto' or a positive integer"),
    ({"sample_batch_size": "4"}, "--sample-batch-size must be 'auto' or a positive integer"),
    ({"share_passes": "no"}, "--no-share-passes: share_passes must be True or False"),
    ({"device": "gpu7"}, "--device: unknown device 'gpu7'"),
])
def test_python_caller_gets_the_argparse_checks_too(s, kwargs, message):
    """What argparse refuses on the command line (choices, types) is a ValueError naming the flag in Python."""
    with pytest.raises(ValueError) as e:
        prepare_infer(s["images"], network=s["spec"], checkpoint=s["ckpt"], **kwargs)
    assert message in str(e.value)


def test_missing_input_and_regions_file(s, tmp_path):
    with pytest.raises(FileNotFoundError, match="--input folder not found"):
        prepare_infer(tmp_path / "nope", model="example")
    with pytest.raises(FileNotFoundError, match="--regions: file not found"):
        prepare_infer(s["images"], network=s["spec"], checkpoint=s["ckpt"], activation="sigmoid",
                      regions=str(tmp_path / "regions.json"))
    spec_file = tmp_path / "regions.json"
    spec_file.write_text('{"WT": [1, 2, 4], "TC": [1, 4]}')
    for given in (str(spec_file), spec_file, {"WT": [1, 2, 4], "TC": [1, 4]}):
        assert read_region_spec(given) == {"WT": (1, 2, 4), "TC": (1, 4)}


def test_helpers():
    assert normalize_roi([64]) == 64 and normalize_roi((8, 8, 16)) == [8, 8, 16] and normalize_roi(None) is None
    with pytest.warns(DeprecationWarning, match="max_softmax"):
        assert infer_measures("mcdropout", ["max_softmax"]) == ["one_minus_max_prob"]
    assert infer_measures("softmax") == ["predictive_entropy", "one_minus_max_prob"]
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(ValueError, match="--device cuda asked for, but CUDA is not available"):
            resolve_device("cuda")
    assert resolve_device(torch.device("cpu"), world_size=2, local_rank=1) == torch.device("cpu")


def test_prepare_evaluate_matches_the_cli(s, tmp_path, monkeypatch):
    seen = []

    def record(labels, predictions, output, config, **kwargs: Any):
        seen.append(config)
        return None, {}, {}

    monkeypatch.setattr(evaluate_workflow, "run_evaluate", record)
    cases = tmp_path / "cal.txt"
    cases.write_text("# calibration\ntoy000\ntoy002\n")
    shifts = tmp_path / "shifts.csv"
    shifts.write_text("case,shift\ntoy000,none\ntoy001,noise\ntoy002,none\n")
    argv = ["evaluate", "-l", str(s["labels"]), "-p", str(s["predictions"]), "-o", str(tmp_path / "ev"), "-q",
            "--calibration-cases", str(cases), "--shifts", str(shifts), "--target-risk", "0.2", "--budget", "0.3",
            "--regions", "brats", "--no-spatial"]
    assert cli.main(argv) == 0
    config = prepare_evaluate(s["labels"], s["predictions"], tmp_path / "ev", calibration_cases=cases, shifts=shifts,
                              regions="brats", target_risk=0.2, budget=0.3, spatial=False)
    assert config == seen[0]
    assert config.calibration_cases == ["toy000", "toy002"] and config.shifts["toy001"] == "noise"
    with pytest.raises(ValueError, match="lies inside the input folder"):
        prepare_evaluate(s["labels"], s["predictions"], s["labels"] / "ev")
    with pytest.raises(ValueError, match="--regions: regions must be one of"):
        prepare_evaluate(s["labels"], s["predictions"], tmp_path / "ev2", regions="bratz")
    with pytest.raises(FileNotFoundError, match="--calibration-cases: file not found"):
        prepare_evaluate(s["labels"], s["predictions"], tmp_path / "ev2", calibration_cases=tmp_path / "none.txt")
    assert not (s["labels"] / "ev").exists()


def test_calibrate_and_demo_check_their_options_in_the_workflow(s, tmp_path, monkeypatch):
    """``run_calibrate`` reads a ``--regions`` file and resolves ``device="auto"`` as the command does;
    ``run_demo`` refuses torchrun and a bad window before any work, from Python as from the command line."""
    with pytest.raises(FileNotFoundError, match="--regions: file not found"):
        run_calibrate(s["images"], s["labels"], tmp_path / "c.pt", network=s["spec"], checkpoint=s["ckpt"],
                      activation="sigmoid", regions=str(tmp_path / "regions.json"), device="auto")
    with pytest.raises(ValueError, match="--device: unknown device"):
        run_calibrate(s["images"], s["labels"], tmp_path / "c.pt", network=s["spec"], checkpoint=s["ckpt"],
                      device="gpu7")
    with pytest.raises(ValueError, match=r"--roi gives 2 sizes \(8, 8\) but the example network takes 3D"):
        run_demo(tmp_path / "demo", roi=[8, 8], quiet=True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="demo runs on one process"):
        run_demo(tmp_path / "demo", quiet=True)
    assert not (tmp_path / "demo").exists() and not (tmp_path / "c.pt").exists()


def test_docs_python_example_predicts_what_the_cli_predicts(tmp_path, monkeypatch):
    """The "From Python" block of docs/cli.md runs as-is and writes the same maps as ``monai-unc infer``."""
    text = (ROOT / "docs" / "cli.md").read_text()
    block = text[text.index("## From Python"):]
    code = re.findall(r"```python\n(.*?)```", block, flags=re.S)[0]
    monkeypatch.chdir(tmp_path)
    write_toy_cohort("toy", n_cases=2, shape=(16, 16, 16))
    torch.manual_seed(0)
    torch.save(_net(NET).state_dict(), "net.pt")
    Path("net.json").write_text(json.dumps(NET))
    exec(compile(code, "docs/cli.md", "exec"), {"__name__": "__docs__"})
    assert cli.main(["infer", "-i", "toy/images", "-o", "pred_cli", "--network", "net.json", "--checkpoint", "net.pt",
                     "--method", "mcdropout+tta", "--samples", "2", "--quiet", "--device", "cpu"]) == 0
    assert json.loads(Path("pred_cli/infer.json").read_text()) == json.loads(Path("pred_python/infer.json").read_text())
    files = sorted(p.name for p in Path("pred_cli").glob("*.nii.gz"))
    assert files == sorted(p.name for p in Path("pred_python").glob("*.nii.gz")) and len(files) == 2 * 6
    for name in files:
        np.testing.assert_array_equal(np.asarray(nib.load(f"pred_cli/{name}").dataobj),
                                      np.asarray(nib.load(f"pred_python/{name}").dataobj), err_msg=name)


def test_report_and_triage_check_their_options_in_the_workflow(s, tmp_path):
    """``run_report`` and ``triage_with_page`` refuse what ``monai-unc report`` / ``triage`` refuse, before any work."""
    from monai_unc.workflows import run_report, triage_with_page

    with pytest.raises(ValueError, match="--cases must be >= 0, got -1"):
        run_report(tmp_path, cases=-1)
    with pytest.raises(FileNotFoundError, match="--evaluation folder not found"):
        run_report(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no summary.json"):
        run_report(tmp_path)
    broken = tmp_path / "broken"
    (broken / "state").mkdir(parents=True)
    (broken / "summary.json").write_text("{trunc")
    (broken / "state" / "rows.json").write_text("[")
    with pytest.raises(ValueError, match="cannot read the evaluation in"):
        run_report(broken)
    with pytest.raises(ValueError, match="lies inside the input folder"):
        run_report(broken, broken / "images" / "report", images=broken / "images")
    with pytest.raises(ValueError, match="--cases must be >= 0"):
        triage_with_page(s["predictions"], tmp_path / "rule.json", tmp_path / "t", cases=-2)
    with pytest.raises(ValueError, match="lies inside the input folder"):
        triage_with_page(s["predictions"], tmp_path / "rule.json", s["predictions"] / "t")
    assert not (tmp_path / "t").exists() and not (broken / "report").exists()


def test_names_keep_their_old_paths():
    """The plan of ``infer`` moved to ``workflows.infer_plan`` and the option values to ``workflows.options`` (so that
    ``workflows.prepare`` imports no MONAI): every name is still reachable, as the same object, where it was."""
    import importlib

    from monai_unc import workflows
    from monai_unc.workflows import factory, infer, infer_plan, options, prepare

    moved = ("InferPlan", "check_region_channels", "prepare_infer", "infer_command", "infer_from_arguments")
    for name in moved:
        assert getattr(prepare, name) is getattr(infer_plan, name), name
        assert name in dir(prepare)
    assert importlib.import_module("monai_unc.workflows.prepare").prepare_infer is workflows.prepare_infer
    for name in ("METHOD_TOKENS", "SHARED_PASS_TOKENS", "method_tokens", "check_roi", "normalize_roi"):
        assert getattr(factory, name) is getattr(options, name), name
    for name in ("FAILURES_FILE", "INTENSITY_MODES"):
        assert getattr(infer, name) is getattr(options, name) is getattr(workflows, name), name
    assert workflows.METHOD_TOKENS is options.METHOD_TOKENS and workflows.normalize_roi is options.normalize_roi
    assert prepare.FAILURES_FILE in prepare.EVALUATE_WRITES
    with pytest.raises(AttributeError, match="monai_unc.workflows.prepare"):
        prepare.no_such_name  # noqa: B018


@pytest.mark.parametrize("method", ["tta", "ensemble", "softmax"])
def test_dropout_without_a_source_that_samples_it_is_refused(s, tmp_path, capsys, method):
    """Found by hostile review (docs): ``infer --method tta --dropout 0.1`` inserted the dropout and recorded
    ``dropout: 0.1`` in infer.json, but no source switched it on: the maps were plain TTA's, bit for bit."""
    argv = ["infer", "-i", str(s["images"]), "-o", str(tmp_path / "out"), "--network", str(s["spec"]),
            "--checkpoint", str(s["ckpt"]), "--method", method, "--dropout", "0.1", "--quiet", "--device", "cpu"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dropout 0.1 inserts dropout layers that only the mcdropout and ratein" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    with pytest.raises(ValueError, match="only the mcdropout and ratein sources sample"):
        prepare_infer(s["images"], network=s["spec"], checkpoint=s["ckpt"], method=method, dropout=0.1)
    # with a source that samples it, --dropout is what it was
    plan = prepare_infer(s["images"], network=NO_DROPOUT, checkpoint=s["ckpt"], method=f"mcdropout+{method}"
                         if method == "tta" else "mcdropout", dropout=0.1)
    assert plan.settings.dropout == 0.1


def test_a_rule_certified_with_an_unused_dropout_stays_usable(s):
    """A rule certified by an earlier version with ``--method tta --dropout 0.1`` (accepted then, never sampled: the
    maps were plain TTA's, bit for bit). Found by hostile review: ``infer --settings-from`` refused it ("certify the
    rule again", which needs labelled cases) and predictions made without --dropout mismatched its fingerprint, so
    triage refused them: the rule was dead. Now infer predicts without the dropout (a warning) and the fingerprints
    match; under a method that samples dropout, the rate is still compared."""
    from monai_unc.io.provenance import compare_fingerprints
    from monai_unc.workflows.reuse import RuleSettings

    rule = RuleSettings(source="referral rule r.json", options={"method": "tta", "dropout": 0.1}, num_samples=8)
    with pytest.warns(UserWarning, match=r"referral rule r.json was certified with --dropout 0.1 under --method "
                      r"'tta'.*predicting without it"):
        plan = prepare_infer(s["images"], network=s["spec"], checkpoint=s["ckpt"], method="tta", dropout=0.1,
                             rule=rule)
    assert plan.settings.dropout is None
    base = {"producer": "monai-unc infer", "model": "network: UNet", "method": "tta", "num_samples": 8, "roi": 8}
    assert compare_fingerprints({**base, "dropout": 0.1}, {**base, "dropout": None}) == ("match", [])
    for method in ("mcdropout+tta", "ratein"):
        sampled = {**base, "method": method}
        assert compare_fingerprints({**sampled, "dropout": 0.1}, {**sampled, "dropout": None}) == (
            "mismatch", [("dropout", 0.1, None)])


def test_a_run_left_half_done_with_an_unused_dropout_resumes(s, tmp_path, capsys):
    """An earlier version ran ``infer --method tta --dropout 0.1`` (never sampled: plain TTA's maps) into a folder and
    stopped half way. Found by hostile review: the same command is refused now, and without --dropout the resume
    refused "a run with different settings (dropout)" and predicted every finished case again. The unused dropout now
    compares as absent: the finished cases are kept."""
    out = tmp_path / "out"
    argv = ["infer", "-i", str(s["images"]), "-o", str(out), "--network", str(s["spec"]), "--checkpoint",
            str(s["ckpt"]), "--method", "tta", "--quiet", "--device", "cpu"]
    assert cli.main(argv) == 0
    records = sorted(p for p in out.glob("*.json") if p.name not in ("infer.json", "failures.json"))
    assert records
    for path in [out / "infer.json", *records]:  # as the earlier version recorded them
        doc = json.loads(path.read_text())
        key = "settings" if path.name == "infer.json" else "fingerprint"
        doc[key]["dropout"] = 0.1
        doc.pop("record_digest", None)  # the earlier version wrote no digest of a record itself
        path.write_text(json.dumps(doc))
    records[-1].unlink()  # stopped before the last case
    before = {p.name: p.stat().st_mtime_ns for p in records[:-1]}
    capsys.readouterr()
    assert cli.main(argv) == 0
    err = capsys.readouterr().err  # the command prints its warnings itself (none reach a catch_warnings here)
    assert "other settings" not in err, err
    assert {p.name: p.stat().st_mtime_ns for p in records[:-1]} == before  # kept, not predicted again
    assert records[-1].is_file()
    assert json.loads((out / "infer.json").read_text())["settings"]["dropout"] is None
    # evaluate / triage read the folder as one run: the kept records (dropout 0.1) and the new one agree
    from monai_unc.io.provenance import check_finished_predictions

    check_finished_predictions(out, "monai-unc", [p.stem for p in records])
