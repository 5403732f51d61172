"""Conformal masks from the command line: ``evaluate --conformal`` writes ``conformal_rule.json``, ``monai-unc
conformal`` applies it to new predictions (monai_unc.evaluation.conformal)."""

from __future__ import annotations

import csv
import json
import shutil
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.conformal import CONFORMAL_RULE_FILE, ConformalRuleFile, run_conformal
from monai_unc.evaluation.triage import FingerprintMismatch
from monai_unc.io import load_case, match_cases
from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule
from monai_unc.products import ConformalMasks

SPEC = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1, "out_channels": 2,
        "channels": [4, 8], "strides": [2], "num_res_units": 0, "dropout": 0.2}


def _infer(images: Path, out: Path, net: Path, samples: int = 2) -> None:
    argv = ["infer", "-i", str(images), "-o", str(out), "--network", json.dumps(SPEC), "--checkpoint", str(net),
            "--device", "cpu", "--samples", str(samples), "-q"]
    assert cli.main(argv) == 0


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    """Calibration cohort A (labels, real ``infer`` predictions), evaluated with two conformal masks; new cohort B
    (predictions made the same way)."""
    import torch
    from monai.networks.nets import UNet

    root = tmp_path_factory.mktemp("conformal")
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in SPEC.items() if k != "_target_"}).state_dict(), root / "net.pt")
    a = write_toy_cohort(root / "A", n_cases=6, shape=(12, 12, 12), predictions=False, seed=1)
    b = write_toy_cohort(root / "B", n_cases=3, shape=(12, 12, 12), predictions=False, seed=2)
    _infer(a["images"], root / "predA", root / "net.pt")
    _infer(b["images"], root / "predB", root / "net.pt")
    ev = root / "ev"
    argv = ["evaluate", "-l", str(a["labels"]), "-p", str(root / "predA"), "-o", str(ev), "--no-spatial",
            "--conformal", "outer:fnr=0.3", "--conformal", "inner:fp=0.4", "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(argv) == 0
    return {"root": root, "A": a, "B": b, "predA": root / "predA", "predB": root / "predB", "eval": ev,
            "rule": ev / CONFORMAL_RULE_FILE}


def _states(pred: Path, labels: Path, side: str) -> list:
    out = []
    for f in match_cases(labels, pred):
        case = load_case(f)
        out.append(conformal_case_state(case.probs, case.label, side=side, spacing=case.spacing, pred=case.seg))
    return out


def test_evaluate_writes_a_verified_rule_equal_to_the_api_fit(cohort):
    doc = ConformalRuleFile.load(cohort["rule"])
    assert doc.targets == {"outer": 0.3, "inner": 0.4} and doc.delta is None
    assert doc.fingerprint["producer"] == "monai-unc infer" and doc.fingerprint["num_samples"] == 2
    assert doc.calibration_cases == sorted(f"toy{i:03d}" for i in range(6))
    for side, target in doc.targets.items():
        expected = fit_conformal_rule(_states(cohort["predA"], cohort["A"]["labels"], side), target)
        assert doc.rules[side] == expected
    summary = json.loads((cohort["eval"] / "summary.json").read_text())["conformal"]
    outer = summary["sides"]["outer"]
    assert outer["target"] == 0.3 and outer["loss"] == "fnr" and outer["method"] == "expectation"
    assert outer["per_task"]["1"]["lambda_hat"] == doc.rules["outer"].lambda_hat("1")
    assert outer["per_task"]["1"]["calibration_loss"] == doc.rules["outer"].task_rule("1").calibration_loss
    saved = sorted((cohort["eval"] / "state" / "cases").glob("*.npz"))  # each case's record holds its conformal states
    assert saved
    with np.load(saved[0]) as z:
        assert {"product.conformal/__type__", "product.conformal/sides.0.__type__",
                "product.conformal/sides.1.__type__", "product.conformal/file_maps"} <= set(z.files)


def test_rule_file_digest_and_structure_are_checked(cohort, tmp_path):
    d = json.loads(cohort["rule"].read_text())
    d["rules"]["outer"]["tasks"][1]["index"] += 1
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="digest"):
        ConformalRuleFile.load(bad)
    d = json.loads(cohort["rule"].read_text())
    d["format_version"] = 9
    bad.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="format_version 9"):
        ConformalRuleFile.load(bad)


def test_conformal_masks_equal_the_rule_applied_and_resume(cohort, tmp_path, capsys):
    out = tmp_path / "masks"
    assert cli.main(["conformal", "-p", str(cohort["predB"]), "--rule", str(cohort["rule"]), "-o", str(out),
                     "-q"]) == 0
    doc = ConformalRuleFile.load(cohort["rule"])
    rows = {r["case"]: r for r in csv.DictReader((out / "conformal.csv").open())}
    assert sorted(rows) == ["toy000", "toy001", "toy002"]
    for cid, row in rows.items():
        probs_img = nib.load(cohort["predB"] / f"{cid}_probs.nii.gz")
        probs = np.moveaxis(np.asarray(probs_img.dataobj, dtype=np.float32), -1, 0)
        seg = np.asarray(nib.load(cohort["predB"] / f"{cid}_seg.nii.gz").dataobj)
        spacing = np.sqrt((probs_img.affine[:3, :3] ** 2).sum(axis=0))
        for side, rule in doc.rules.items():
            img = nib.load(out / f"{cid}_{side}.nii.gz")
            # uint8 as documented (found by hostile testing: the 3D masks of one foreground class were int16)
            assert img.shape == seg.shape and img.get_data_dtype() == np.uint8
            expected = rule.apply(probs, pred=seg, spacing=spacing)[1]
            np.testing.assert_array_equal(np.asarray(img.dataobj).astype(bool), expected)
            np.testing.assert_allclose(img.affine, probs_img.affine)
            assert float(row[f"{side}_ml_1"]) == pytest.approx(expected.sum() * np.prod(spacing) / 1000)
        assert float(row["predicted_ml_1"]) == pytest.approx((seg == 1).sum() * np.prod(spacing) / 1000)
    summary = json.loads((out / "conformal.json").read_text())
    assert summary["fingerprint"]["status"] == "match" and summary["n_cases"] == 3
    # resume: a rerun reuses every case (the masks are not written again)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.glob("*.nii.gz")}
    assert cli.main(["conformal", "-p", str(cohort["predB"]), "--rule", str(cohort["rule"]), "-o", str(out),
                     "-q"]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.nii.gz")} == stamps


def test_a_failed_case_exits_1_and_a_rerun_resumes(cohort, tmp_path, capsys):
    """``monai-unc conformal`` through its workflow: a bad case is reported, the others are done, exit status 1
    after one summary line naming failures.json; once fixed, a rerun does only that case."""
    pred = tmp_path / "pred"
    shutil.copytree(cohort["predB"], pred)
    good = (pred / "toy002_seg.nii.gz").read_bytes()
    (pred / "toy002_seg.nii.gz").write_bytes(b"broken")
    out = tmp_path / "masks"
    argv = ["conformal", "-p", str(pred), "--rule", str(cohort["rule"]), "-o", str(out), "-q"]
    capsys.readouterr()
    # review 63: infer's record keeps the segmentation's digest, so the broken file is refused before any work ...
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "toy002: toy002_seg.nii.gz (size 6 bytes" in err[0], err
    assert not out.exists() or not any(out.glob("*.nii.gz"))
    # ... and read (and failed alone) when the record is one of an earlier version, without digests
    record = json.loads((pred / "toy002.json").read_text())
    del record["file_digests"], record["record_digest"]
    (pred / "toy002.json").write_text(json.dumps(record))
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("monai-unc conformal: case 'toy002' failed: ") and len(err) == 2, err
    assert err[1] == (f"monai-unc conformal: 1 case(s) failed ('toy002'), listed in {out.resolve() / 'failures.json'}; "
                      "the other cases are done: fix these and run the same command again to resume")
    assert json.loads((out / "failures.json").read_text())["failures"][0]["case"] == "toy002"
    assert not (out / "conformal.csv").exists() and (out / "toy000_outer.nii.gz").is_file()
    (pred / "toy002_seg.nii.gz").write_bytes(good)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.glob("*.nii.gz")}
    assert cli.main(argv[:-1]) == 0
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("toy00[01]_*.nii.gz")} == {
        k: v for k, v in stamps.items() if not k.startswith("toy002")}
    assert not (out / "failures.json").exists() and "3 case(s)" in capsys.readouterr().out


def test_evaluate_resumes_with_the_conformal_states(cohort, tmp_path):
    ev = tmp_path / "ev"
    shutil.copytree(cohort["eval"], ev)
    config = EvaluationConfig(spatial=False, products=[ConformalMasks({"outer": 0.3, "inner": 0.4})])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(cohort["A"]["labels"], cohort["predA"], ev, config)
    assert ConformalRuleFile.load(ev / CONFORMAL_RULE_FILE).rules == ConformalRuleFile.load(cohort["rule"]).rules
    # without --conformal the stale rule goes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_evaluate(cohort["A"]["labels"], cohort["predA"], ev, EvaluationConfig(spatial=False))
    assert not (ev / CONFORMAL_RULE_FILE).exists()


def _one_line_exit_2(capsys, argv: list[str], *words: str) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize("extra, words", [
    (["--conformal", "outer:fnr=1.5"], ["(0, 1)", "outer"]),
    (["--conformal", "outer:fnr=0"], ["(0, 1)"]),
    (["--conformal", "outer:fp=0.1"], ["outer:fnr=TARGET"]),
    (["--conformal", "outer:fnr=0.1", "--conformal-delta", "1"], ["--conformal-delta must", "(0, 1)"]),
    (["--conformal", "outer:fnr=0.1"], ["too few", "at least 9"]),
    (["--conformal", "outer:fnr=0.3", "--conformal-delta", "0.05"], ["too few", "at least 19"]),
])
def test_evaluate_bad_conformal_options(cohort, tmp_path, capsys, extra, words):
    out = tmp_path / "ev"
    argv = ["evaluate", "-l", str(cohort["A"]["labels"]), "-p", str(cohort["predA"]), "-o", str(out),
            "--no-spatial", "-q", *extra]
    _one_line_exit_2(capsys, argv, *words)
    assert not (out / "summary.json").exists() and not (out / CONFORMAL_RULE_FILE).exists()
    assert not list(out.rglob("*.json"))


def test_conformal_refuses_another_fingerprint_and_an_input_output(cohort, tmp_path, capsys):
    pred = tmp_path / "predC"
    _infer(cohort["B"]["images"], pred, cohort["root"] / "net.pt", samples=3)
    out = tmp_path / "masks"
    _one_line_exit_2(capsys, ["conformal", "-p", str(pred), "--rule", str(cohort["rule"]), "-o", str(out), "-q"],
                     "num_samples: 3 (rule: 2)", "--allow-mismatch")
    assert not out.exists() or not any(out.iterdir())
    with pytest.raises(FingerprintMismatch):
        run_conformal(pred, cohort["rule"], out)
    assert cli.main(["conformal", "-p", str(pred), "--rule", str(cohort["rule"]), "-o", str(out), "-q",
                     "--allow-mismatch"]) == 0
    assert json.loads((out / "conformal.json").read_text())["fingerprint"]["status"] == "mismatch"
    before = sorted(p.name for p in pred.iterdir())
    _one_line_exit_2(capsys, ["conformal", "-p", str(pred), "--rule", str(cohort["rule"]), "-o", str(pred), "-q"],
                     "output folder", "inside the input folder")
    assert sorted(p.name for p in pred.iterdir()) == before


def test_region_model_margin_family(tmp_path):
    """Region (sigmoid) predictions with the margin family: the rule is fitted per region on the predicted region
    masks and the written 4D masks equal ``ConformalRule.apply``."""
    from tests.evaluation.test_evaluate_regions import write_region_cohort

    dirs = write_region_cohort(tmp_path / "c", n_cases=5)
    config = EvaluationConfig(regions="brats", spatial=False,
                              products=[ConformalMasks({"outer": 0.3}, family="margin")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, summary, paths = run_evaluate(dirs["labels"], dirs["pred"], tmp_path / "ev", config)
    doc = ConformalRuleFile.load(paths["product:conformal"])
    rule = doc.rules["outer"]
    assert rule.activation == "sigmoid" and rule.family == "margin" and rule.names == ("TC", "WT", "ET")
    assert set(summary["conformal"]["sides"]["outer"]["per_task"]) == {"TC", "WT", "ET"}
    res = run_conformal(dirs["pred"], paths["product:conformal"], tmp_path / "masks")
    assert res.summary["fingerprint"]["status"] == "unverified"  # the toy predictions carry no records
    for cid in ("case0", "case4"):
        probs_img = nib.load(dirs["pred"] / f"{cid}_probs.nii.gz")
        probs = np.moveaxis(np.asarray(probs_img.dataobj, dtype=np.float32), -1, 0)
        seg = np.moveaxis(np.asarray(nib.load(dirs["pred"] / f"{cid}_seg.nii.gz").dataobj), -1, 0).astype(bool)
        spacing = np.sqrt((probs_img.affine[:3, :3] ** 2).sum(axis=0))
        got = np.moveaxis(np.asarray(nib.load(tmp_path / "masks" / f"{cid}_outer.nii.gz").dataobj), -1, 0)
        np.testing.assert_array_equal(got.astype(bool), rule.apply(probs, pred=seg, spacing=spacing))
        assert (got.astype(bool) >= seg).all()  # a dilation holds the predicted masks


def test_torchrun_pack_round_trips_the_conformal_states(cohort):
    """What a rank sends to rank 0 (the result's record, :meth:`CaseResult.to_record`) keeps its conformal states."""
    import pickle

    from monai_unc.engine.records import record_gather_hooks
    from monai_unc.evaluation import CaseResult, evaluate_files

    config = EvaluationConfig(spatial=False, products=[ConformalMasks({"outer": 0.3, "inner": 0.4}, family="margin")])
    files = match_cases(cohort["A"]["labels"], cohort["predA"])[0]
    got = evaluate_files(files, config)
    pack, unpack = record_gather_hooks(CaseResult)
    back = unpack(pickle.loads(pickle.dumps(pack(got[0]))))
    assert list(back.states["conformal"].sides) == ["outer", "inner"]
    for side, st in got[0].states["conformal"].sides.items():
        assert back.states["conformal"].sides[side] == st and st.family == "margin"
