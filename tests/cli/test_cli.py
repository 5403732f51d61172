"""The ``monai-unc`` command line: argument errors, infer (resume, atomic writes, safety), evaluate, demo, nnU-Net
wiring. End-to-end runs use a few 16^3 synthetic NIfTI cases and a two-level UNet with random weights."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from tests._argv import with_options
from tests._cases import TOY_NET, bias_toward_background
from tests._paths import ROOT

NET = TOY_NET


def _build_net() -> torch.nn.Module:
    from monai.networks.nets import UNet

    kw = {k: v for k, v in NET.items() if k != "_target_"}
    return UNet(**kw)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    paths = write_toy_cohort(root / "data", n_cases=3, shape=(16, 16, 16))
    torch.manual_seed(0)
    ckpt = root / "net.pt"
    torch.save(_build_net().state_dict(), ckpt)
    torch.manual_seed(1)
    ckpt2 = root / "net2.pt"
    torch.save(_build_net().state_dict(), ckpt2)
    spec = root / "net.json"
    spec.write_text(json.dumps(NET))
    return {**paths, "root": root, "ckpt": ckpt, "ckpt2": ckpt2, "spec": spec}


def _infer_args(s: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return with_options(["infer", "-i", str(s["images"]), "-o", str(out), "--network", str(s["spec"]), "--checkpoint",
                         str(s["ckpt"]), "--samples", "2", "--quiet"], *extra)  # an option of extra replaces ours


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------------ argument errors
@pytest.mark.parametrize(
    "argv, message",
    [
        (["infer", "--input", "x"], "the following arguments are required: --output"),
        (["infer", "-i", "x", "-o", "y", "--samples", "0"], "--samples: expected a positive integer, got 0"),
        (["evaluate", "-l", "a", "-p", "b", "-o", "c", "--budget", "1.5"], "--budget: expected a number in [0, 1)"),
        (["infer", "-i", "x", "-o", "y", "--model", "bert"], "--model: invalid choice: 'bert'"),
        (["report"], "the following arguments are required: --evaluation"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("monai-unc")


def test_bad_inputs_give_one_line_and_exit_2(setup, tmp_path, capsys):
    s = setup
    cases = [
        (["infer", "-i", str(tmp_path / "nope"), "-o", str(tmp_path / "o")], "--input folder not found"),
        (["infer", "-i", str(s["images"]), "-o", str(s["images"] / "out"), "--model", "example"],
         "lies inside the input folder"),
        (["infer", "-i", str(s["images"]), "-o", str(tmp_path / "o"), "--network", str(s["spec"])],
         "--network needs --checkpoint"),
        (["infer", "-i", str(s["images"]), "-o", str(tmp_path / "o")], "exactly one of --model"),
        (_infer_args(s, tmp_path / "o", "--method", "mcdropout+magic"), "--method must be '+'-joined names"),
        (_infer_args(s, tmp_path / "o", "--method", "ensemble"), "at least two --checkpoint files"),
        (_infer_args(s, tmp_path / "o", "--method", "mcdropout+ratein"), "choose one"),
        (_infer_args(s, tmp_path / "o", "--method", "softmax", "--measures", "variance"),
         "--method softmax gives only predictive_entropy and one_minus_max_prob, not variance"),
        (["evaluate", "-l", str(s["labels"]), "-p", str(s["predictions"]), "-o", str(s["labels"] / "e")],
         "lies inside the input folder"),
        (["report", "-e", str(tmp_path)], "no summary.json"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (argv, err)
    assert not (s["images"] / "out").exists() and not (s["labels"] / "e").exists()


# ------------------------------------------------------------------------------------------------ infer
def test_infer_writes_maps_on_the_input_grid(setup, tmp_path):
    s = setup
    out = tmp_path / "pred"
    assert cli.main(_infer_args(s, out, "--method", "mcdropout+tta")) == 0
    for cid in ("toy000", "toy001", "toy002"):
        src = nib.load(s["images"] / f"{cid}.nii.gz")
        rec = json.loads((out / f"{cid}.json").read_text())
        assert rec["num_samples"] == 2 * 8 and rec["mi_meaning"] == "epistemic"
        assert rec["files"] == [f"{cid}_seg.nii.gz", f"{cid}_probs.nii.gz", f"{cid}_predictive_entropy.nii.gz",
                                f"{cid}_expected_entropy.nii.gz", f"{cid}_mutual_information.nii.gz",
                                f"{cid}_one_minus_max_prob.nii.gz"]
        imgs = {f: nib.load(out / f) for f in rec["files"]}
        for name, img in imgs.items():
            np.testing.assert_allclose(img.affine, src.affine, atol=1e-6, err_msg=name)
            assert img.shape[:3] == src.shape
        p = imgs[f"{cid}_probs.nii.gz"].get_fdata()
        assert p.shape == (16, 16, 16, 2)
        np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-5)
        np.testing.assert_array_equal(imgs[f"{cid}_seg.nii.gz"].get_fdata(), p.argmax(-1))
        pe = imgs[f"{cid}_predictive_entropy.nii.gz"].get_fdata()
        ee = imgs[f"{cid}_expected_entropy.nii.gz"].get_fdata()
        mi = imgs[f"{cid}_mutual_information.nii.gz"].get_fdata()
        ref_pe = -(p * np.log(np.clip(p, 1e-30, None))).sum(-1)
        np.testing.assert_allclose(pe, ref_pe, atol=1e-4)
        np.testing.assert_allclose(mi, pe - ee, atol=1e-4)
        np.testing.assert_allclose(imgs[f"{cid}_one_minus_max_prob.nii.gz"].get_fdata(), 1 - p.max(-1), atol=1e-5)
    settings = json.loads((out / "infer.json").read_text())["settings"]
    assert settings["method"] == "mcdropout+tta" and settings["samples"] == 2


def test_softmax_matches_a_manual_forward_pass(setup, tmp_path):
    s = setup
    out = tmp_path / "pred"
    assert cli.main(_infer_args(s, out, "--method", "softmax", "--intensity", "minmax")) == 0
    net = _build_net()
    net.load_state_dict(torch.load(s["ckpt"], weights_only=True))
    net.eval()
    img = nib.load(s["images"] / "toy001.nii.gz").get_fdata().astype(np.float32)
    img = (img - img.min()) / (img.max() - img.min())
    with torch.no_grad():
        ref = torch.softmax(net(torch.from_numpy(img)[None, None]), 1)[0].numpy()
    p = np.moveaxis(nib.load(out / "toy001_probs.nii.gz").get_fdata(), -1, 0)
    np.testing.assert_allclose(p, ref, atol=1e-5)
    assert sorted(json.loads((out / "toy001.json").read_text())["files"]) == sorted(
        ["toy001_seg.nii.gz", "toy001_probs.nii.gz", "toy001_predictive_entropy.nii.gz",
         "toy001_one_minus_max_prob.nii.gz"])


def test_infer_resumes_after_an_interruption(setup, tmp_path, monkeypatch, capsys):
    import monai_unc.workflows.infer as predict

    s = setup
    out = tmp_path / "pred"
    real = predict.predict_case
    calls = []

    def interrupted(case, *a, **kw):
        calls.append(case.case_id)
        if len(calls) == 2:  # killed while writing the second case
            (out / f".{case.case_id}_seg.partial.nii.gz").write_bytes(b"half a file")
            raise KeyboardInterrupt
        return real(case, *a, **kw)

    monkeypatch.setattr(predict, "predict_case", interrupted)
    assert cli.main(_infer_args(s, out)) == 130
    assert "interrupted; run the same command again to resume" in capsys.readouterr().err
    assert (out / "toy000.json").is_file() and not (out / "toy001.json").exists()
    first = {p.name: p.stat().st_mtime_ns for p in out.glob("toy000*")}

    done = []

    def counting(case, *a, **kw):
        done.append(case.case_id)
        return real(case, *a, **kw)

    monkeypatch.setattr(predict, "predict_case", counting)
    assert cli.main(_infer_args(s, out)) == 0
    assert done == ["toy001", "toy002"]  # the finished case is skipped
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("toy000*")} == first
    assert not list(out.glob(".*partial*"))  # leftovers of the interrupted write are removed
    # a finished case whose files were deleted is redone
    (out / "toy002_probs.nii.gz").unlink()
    done.clear()
    assert cli.main(_infer_args(s, out)) == 0 and done == ["toy002"]
    # resuming with other settings is refused unless --overwrite
    assert cli.main(_infer_args(s, out, "--samples", "3")) == 2
    assert "different settings (samples)" in capsys.readouterr().err
    done.clear()
    assert cli.main(_infer_args(s, out, "--samples", "3", "--overwrite")) == 0 and len(done) == 3


def test_infer_resume_redoes_cases_made_with_other_settings(setup, tmp_path, monkeypatch, capsys):
    """A resume never mixes settings: after an interrupted ``--overwrite`` run with new settings (infer.json already
    names them), the cases still holding records of the old settings are predicted again, with a warning naming
    the difference, instead of being kept as finished."""
    import monai_unc.workflows.infer as predict

    s = setup
    out = tmp_path / "pred"
    assert cli.main(_infer_args(s, out)) == 0  # --samples 2
    real = predict.predict_case
    done = []

    def interrupted(case, *a, **kw):
        done.append(case.case_id)
        if len(done) == 2:
            raise KeyboardInterrupt
        return real(case, *a, **kw)

    monkeypatch.setattr(predict, "predict_case", interrupted)
    assert cli.main(_infer_args(s, out, "--samples", "3", "--overwrite")) == 130
    assert json.loads((out / "infer.json").read_text())["settings"]["samples"] == 3
    assert json.loads((out / "toy001.json").read_text())["fingerprint"]["samples"] == 2  # an old case remains
    capsys.readouterr()

    def counting(case, *a, **kw):
        done.append(case.case_id)
        return real(case, *a, **kw)

    done.clear()
    monkeypatch.setattr(predict, "predict_case", counting)
    assert cli.main(_infer_args(s, out, "--samples", "3")) == 0
    assert done == ["toy001", "toy002"]  # toy000 was made with --samples 3: kept
    err = capsys.readouterr().err
    assert "monai-unc infer: warning: case 'toy001' was predicted with other settings (samples 2 -> 3)" in err
    for case in ("toy000", "toy001", "toy002"):
        record = json.loads((out / f"{case}.json").read_text())
        assert record["fingerprint"] == json.loads((out / "infer.json").read_text())["settings"]
    assert predict.is_finished("toy001", out)
    # a record that names no settings (an earlier version) is not taken as finished either
    record = json.loads((out / "toy002.json").read_text())
    del record["fingerprint"]
    (out / "toy002.json").write_text(json.dumps(record))
    done.clear()
    assert cli.main(_infer_args(s, out, "--samples", "3")) == 0 and done == ["toy002"]
    assert "no settings recorded" in capsys.readouterr().err


def test_checkpoints_load_weights_only_unless_unsafe(setup, tmp_path, capsys):
    s = setup
    risky = tmp_path / "pickled.pt"
    torch.save({"state_dict": torch.load(s["ckpt"], weights_only=True), "extra": _Opaque()}, risky)
    args = ["infer", "-i", str(s["images"]), "-o", str(tmp_path / "o"), "--network", json.dumps(NET),
            "--checkpoint", str(risky), "--method", "softmax", "--quiet"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "weights_only=True" in err and "--unsafe-load" in err
    assert cli.main([*args, "--unsafe-load"]) == 0
    assert (tmp_path / "o" / "toy000_seg.nii.gz").is_file()


class _Opaque:
    """A pickled object that ``torch.load(weights_only=True)`` refuses."""


def test_ensemble_and_posthoc_dropout(setup, tmp_path):
    s = setup
    out = tmp_path / "ens"
    args = ["infer", "-i", str(s["images"]), "-o", str(out), "--network", str(s["spec"]), "--checkpoint",
            str(s["ckpt"]), str(s["ckpt2"]), "--method", "ensemble", "--quiet", "--measures", "mutual_information"]
    assert cli.main(args) == 0
    rec = json.loads((out / "toy000.json").read_text())
    assert rec["num_samples"] == 2 and rec["files"][-1] == "toy000_mutual_information.nii.gz"
    assert nib.load(out / "toy000_mutual_information.nii.gz").get_fdata().max() > 0
    no_drop = dict(NET, dropout=0.0)
    args = ["infer", "-i", str(s["images"]), "-o", str(tmp_path / "d"), "--network", json.dumps(no_drop),
            "--checkpoint", str(s["ckpt"]), "--quiet", "--samples", "2"]
    assert cli.main(args) == 2  # no dropout layer to sample from
    assert cli.main([*args, "--dropout", "0.2"]) == 0


def test_ratein_method(setup, tmp_path):
    pytest.importorskip("monai_unc.inferers.rate_in")
    s = setup
    out = tmp_path / "ri"
    assert cli.main(_infer_args(s, out, "--method", "ratein", "--measures", "mutual_information")) == 0
    rec = json.loads((out / "toy000.json").read_text())
    assert rec["num_samples"] == 2 and rec["rate_in_mean_rates"]
    assert all(0.0 <= r < 1.0 for r in rec["rate_in_mean_rates"].values())


def _write_bundle(root: Path, ckpt: Path, axcodes: str) -> Path:
    bundle = root / f"bundle_{axcodes}"
    (bundle / "configs").mkdir(parents=True)
    (bundle / "models").mkdir()
    shutil.copy(ckpt, bundle / "models" / "model.pt")
    config = {
        "network_def": NET,
        "preprocessing": {"_target_": "Compose", "transforms": [
            {"_target_": "LoadImaged", "keys": "image"},
            {"_target_": "EnsureChannelFirstd", "keys": "image"},
            {"_target_": "Orientationd", "keys": "image", "axcodes": axcodes},
            {"_target_": "ScaleIntensityd", "keys": "image"},
        ]},
    }
    (bundle / "configs" / "inference.json").write_text(json.dumps(config))
    return bundle


def test_bundle_preprocessing_is_inverted_onto_the_input_grid(setup, tmp_path):
    """Orientationd(LPS) flips the first two axes of these RAS images; the maps must come back on the input grid."""
    s = setup
    bundle = _write_bundle(tmp_path, s["ckpt"], "LPS")
    out = tmp_path / "b"
    assert cli.main(["infer", "-i", str(s["images"]), "-o", str(out), "--bundle", str(bundle), "--method", "softmax",
                     "--quiet"]) == 0
    net = _build_net()
    net.load_state_dict(torch.load(s["ckpt"], weights_only=True))
    net.eval()
    src = nib.load(s["images"] / "toy002.nii.gz")
    img = src.get_fdata().astype(np.float32)
    img = (img - img.min()) / (img.max() - img.min())
    with torch.no_grad():
        flipped = torch.from_numpy(img[::-1, ::-1].copy())[None, None]
        ref = torch.softmax(net(flipped), 1)[0].numpy()[:, ::-1, ::-1]
    p_img = nib.load(out / "toy002_probs.nii.gz")
    np.testing.assert_allclose(p_img.affine, src.affine, atol=1e-5)
    np.testing.assert_allclose(np.moveaxis(p_img.get_fdata(), -1, 0), ref, atol=1e-5)
    np.testing.assert_allclose(nib.load(out / "toy002_seg.nii.gz").affine, src.affine, atol=1e-5)


def test_inputs_are_never_modified(setup, tmp_path):
    s = setup
    before = _hashes(s["root"] / "data")
    out = tmp_path / "pred"
    assert cli.main(_infer_args(s, out, "--method", "softmax")) == 0
    ev = tmp_path / "eval"
    assert cli.main(["evaluate", "-l", str(s["labels"]), "-p", str(out), "-o", str(ev), "--images",
                     str(s["images"]), "--shifts", str(s["shifts"]), "--quiet"]) == 0
    assert cli.main(["report", "-e", str(ev), "--quiet", "--cases", "1"]) == 0
    assert _hashes(s["root"] / "data") == before
    assert (ev / "metrics.csv").is_file() and (ev / "report" / "report.html").is_file()


# ------------------------------------------------------------------------------------------------ evaluate / report
def test_evaluate_and_report_commands(setup, tmp_path, capsys):
    s = setup
    ev = tmp_path / "eval"
    argv = ["evaluate", "-l", str(s["labels"]), "-p", str(s["predictions"]), "-o", str(ev), "--shifts",
            str(s["shifts"]), "--budget", "0.34", "--class-names", "background", "sphere", "--min-bin-count", "5"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"3 case\(s\); mean Dice 0\.\d{4}; AURC", out) and "triage at 34%: review" in out
    summary = json.loads((ev / "summary.json").read_text())
    assert summary["config"]["min_bin_count"] == 5 and summary["triage"]["n_referred"] == 2
    header = (ev / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header[:4] == ["case", "shift", "dice", "dice_sphere"]
    assert cli.main(["report", "-e", str(ev), "-o", str(tmp_path / "rep"), "--budget", "0.0"]) == 0
    assert f"report: {(tmp_path / 'rep' / 'report.html').resolve()}" in capsys.readouterr().out


@pytest.mark.slow
def test_docs_example_runs(tmp_path, monkeypatch):
    """The python block of docs/cli.md runs as-is."""
    text = (ROOT / "docs" / "cli.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "docs/cli.md", "exec"), {"__name__": "__docs__"})


# ------------------------------------------------------------------------------------------------ nnU-Net wiring
def test_nnunet_commands_are_wired(capsys):
    pytest.importorskip("nnunetv2")
    with pytest.raises(SystemExit) as e:
        cli.main(["nnunet-predict", "--help"])
    assert e.value.code == 0
    assert "--sources" in capsys.readouterr().out


def test_nnunet_commands_without_nnunetv2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "monai_unc.nnunet", None)  # import of the package fails
    monkeypatch.delitem(sys.modules, "monai_unc.nnunet.cli", raising=False)
    assert cli.main(["nnunet-predict", "-i", "x", "-o", "y"]) == 2
    assert "nnunet-predict: error" in capsys.readouterr().err
    # the other commands do not need nnU-Net
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    assert "nnunet-predict" in capsys.readouterr().out


def test_console_script_entry_point():
    exe = shutil.which("monai-unc")
    if exe is None:
        pytest.skip("monai-unc console script not on PATH")
    r = subprocess.run([exe, "evaluate"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "required" in r.stderr


# ------------------------------------------------------------------------------------------------ demo
@pytest.mark.slow
def test_demo_end_to_end(quick_softmax_demo):
    """``monai-unc demo`` on four of its cases (three in distribution, one with noise), softmax only (the session
    fixture ``quick_softmax_demo`` of tests/conftest.py runs it)."""
    out, printed = quick_softmax_demo
    assert f"report: {(out / 'report' / 'report.html').resolve()}" in printed
    summary = json.loads((out / "evaluation" / "summary.json").read_text())
    assert summary["n_cases"] == 4 and summary["ood"]["n_iid"] == 3 and summary["ood"]["per_shift"]["noise"] == 1.0
    assert summary["triage"]["n_referred"] == 2 and summary["triage"]["referred"][0] == "right_noise010"
    # every case is the held-out right hemisphere: world x >= 0 for every voxel
    img = nib.load(out / "data" / "images" / "right_clean.nii.gz")
    corners = np.array([[0, 0, 0, 1], [img.shape[0] - 1, 0, 0, 1]]) @ img.affine.T
    assert corners[:, 0].min() >= 0
    assert summary["dice"]["mean"] > 0.6


# ------------------------------------------------------------------------------------------------ calibrate
@pytest.mark.parametrize("res_units, folded", [(0, True), (1, False)])
def test_calibrate_writes_a_checkpoint_that_infer_applies(setup, tmp_path, res_units, folded, capsys):
    """A temperature is fitted on validation logits; the calibrated copy gives softmax(logits / t) in infer,
    folded into the last layer when that is exact (MONAI UNet without residual units), else stored beside it."""
    s = setup
    spec = dict(NET, num_res_units=res_units)
    torch.manual_seed(3)
    net = bias_toward_background(_unet(spec))  # calibrate refuses logits that carry nothing about the labels
    ckpt = tmp_path / "net.pt"
    torch.save(net.state_dict(), ckpt)
    out = tmp_path / "cal" / "calibrated.pt"
    argv = ["calibrate", "-i", str(s["images"]), "-l", str(s["labels"]), "-o", str(out), "--network",
            json.dumps(spec), "--checkpoint", str(ckpt), "--max-steps", "60", "--intensity", "minmax"]
    assert cli.main(argv) == 0
    assert "validation NLL" in capsys.readouterr().out
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["folded_into_last_layer"] is folded and record["cases"] == 3
    assert record["after"]["nll"] <= record["before"]["nll"] + 1e-12
    t = record["temperature"][0]
    pred = tmp_path / "pred"
    assert cli.main(["infer", "-i", str(s["images"]), "-o", str(pred), "--network", json.dumps(spec),
                     "--checkpoint", str(out), "--method", "softmax", "--intensity", "minmax", "--quiet"]) == 0
    net.eval()
    img = nib.load(s["images"] / "toy000.nii.gz").get_fdata().astype(np.float32)
    img = (img - img.min()) / (img.max() - img.min())
    with torch.no_grad():
        ref = torch.softmax(net(torch.from_numpy(img)[None, None]) / t, 1)[0].numpy()
    np.testing.assert_allclose(np.moveaxis(nib.load(pred / "toy000_probs.nii.gz").get_fdata(), -1, 0), ref,
                               atol=1e-4)
    assert cli.main([*argv[:6], str(s["images"] / "cal.pt"), *argv[7:]]) == 2  # never inside the inputs


def _unet(spec: dict) -> torch.nn.Module:
    from monai.networks.nets import UNet

    return UNet(**{k: v for k, v in spec.items() if k != "_target_"})
