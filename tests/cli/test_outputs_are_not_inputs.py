"""No command writes over one of its inputs: for every command, each input file is tried as the output path and as
a file inside the output folder that the command writes; the command must exit 2 before any work, and the input's
bytes (sha256) must be unchanged. Each command's arguments are first run as they are (input files elsewhere), so
that the refusal is the output check's, not another error's.

``demo`` reads no input file (it writes its own cohort): only an existing file as its ``--output`` is tried. The
nnU-Net commands are tried with a model folder that holds no trained network: the checks run before the model is
loaded, so none needs one.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from monai.networks.nets import UNet

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from tests._cases import TOY_NET, bias_toward_background
from tests.evaluation.test_triage import _stamp_infer_records

NET = TOY_NET
#: what the refusals say (output inside an input folder, an input file replaced, a file given as the folder)
REFUSAL = re.compile(r"never (overwritten|written to)|is a file|is a folder")


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def s(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("outputs")
    paths = write_toy_cohort(root / "data", n_cases=4, shape=(16, 16, 16))
    _stamp_infer_records(paths["predictions"])
    torch.manual_seed(0)
    ckpt = root / "net.pt"
    # toward the background: calibrate refuses logits that carry nothing about the labels
    torch.save(bias_toward_background(UNet(**{k: v for k, v in NET.items() if k != "_target_"})).state_dict(), ckpt)
    spec = root / "net.json"
    spec.write_text(json.dumps(NET))
    regions = root / "regions.json"
    regions.write_text('{"A": [1], "B": [2]}')
    cases = root / "cases.txt"
    cases.write_text("toy000\ntoy001\n")
    evaluation = root / "eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli.main(["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "-o",
                         str(evaluation), "--no-spatial", "--target-risk", "0.4", "--delta", "0.2", "-q"]) == 0
    return {**paths, "root": root, "ckpt": ckpt, "spec": spec, "regions": regions, "cases": cases,
            "evaluation": evaluation, "rule": evaluation / "referral_rule.json",
            "image": paths["images"] / "toy000.nii.gz", "label": paths["labels"] / "toy000.nii.gz",
            "prediction": paths["predictions"] / "toy000_probs.nii.gz",
            "summary": evaluation / "summary.json"}


#: every command's arguments as (flag, key of ``s`` or a literal) pairs; "-o" is the output
COMMANDS: dict[str, list[tuple[str, str]]] = {
    "infer": [("-i", "images"), ("--network", "spec"), ("--checkpoint", "ckpt"), ("--samples", "=2")],
    "infer-regions": [("-i", "images"), ("--network", "spec"), ("--checkpoint", "ckpt"), ("--samples", "=2"),
                      ("--activation", "=sigmoid"), ("--regions", "regions")],
    "evaluate": [("-l", "labels"), ("-p", "predictions"), ("--shifts", "shifts"), ("--no-spatial", ""),
                 ("--target-risk", "=0.4"), ("--delta", "=0.2"), ("--calibration-cases", "cases")],
    "report": [("-e", "evaluation"), ("--calibration-cases", "cases"), ("--images", "images"), ("--cases", "=1")],
    "triage": [("-p", "predictions"), ("--rule", "rule"), ("--cases", "=1")],
    "calibrate": [("-i", "images"), ("-l", "labels"), ("--network", "spec"), ("--checkpoint", "ckpt"),
                  ("--max-steps", "=2"), ("--intensity", "=none")],
    "calibrate-regions": [("-i", "images"), ("-l", "labels"), ("--network", "spec"), ("--checkpoint", "ckpt"),
                          ("--max-steps", "=2"), ("--intensity", "=none"), ("--activation", "=sigmoid"),
                          ("--regions", "regions")],
}


def _argv(s: dict[str, Path], command: str, output: Path, **replace: Path) -> list[str]:
    argv = [command.split("-")[0], "-o", str(output), "-q"]
    for flag, key in COMMANDS[command]:
        argv.append(flag)
        if key.startswith("="):
            argv.append(key[1:])
        elif key:
            argv.append(str(replace.get(flag, s[key])))
    return argv


def _run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = cli.main(argv)
    return rc, capsys.readouterr().err


def _out(command: str, folder: Path) -> Path:
    return folder / "cal.pt" if command.startswith("calibrate") else folder


@pytest.mark.parametrize("command", list(COMMANDS))
def test_the_arguments_work_with_inputs_elsewhere(s, command, tmp_path, capsys):
    rc, err = _run(_argv(s, command, _out(command, tmp_path / "out")), capsys)
    assert rc == 0, err


#: (command, an input given as the output path)
AS_OUTPUT = [
    ("infer", "spec"), ("infer", "ckpt"), ("infer", "image"), ("infer-regions", "regions"),
    ("evaluate", "shifts"), ("evaluate", "cases"), ("evaluate", "label"), ("evaluate", "prediction"),
    ("report", "cases"), ("report", "summary"), ("report", "image"),
    ("triage", "rule"), ("triage", "prediction"),
    ("calibrate", "ckpt"), ("calibrate", "spec"), ("calibrate", "image"), ("calibrate-regions", "regions"),
]


@pytest.mark.parametrize(("command", "key"), AS_OUTPUT)
def test_an_input_file_as_the_output_is_refused(s, command, key, capsys):
    target = s[key]
    before = _sha(target)
    argv = _argv(s, command, target)
    rc, err = _run(argv, capsys)
    assert rc == 2, err
    assert REFUSAL.search(err) or "must be a .pt" in err, err
    assert _sha(target) == before


#: (command, the flag of an input file, its key in ``s``, a file the command writes in its output folder)
INSIDE = [
    ("infer", "--network", "spec", "infer.json"),
    ("infer", "--checkpoint", "ckpt", "failures.json"),
    ("infer", "--checkpoint", "ckpt", "toy000_seg.nii.gz"),
    ("infer", "--network", "spec", "toy001.json"),
    ("infer-regions", "--regions", "regions", "toy002.json"),
    ("infer-regions", "--regions", "regions", "infer.json"),
    ("evaluate", "--shifts", "shifts", "metrics.csv"),
    ("evaluate", "--shifts", "shifts", "failures.json"),
    ("evaluate", "--calibration-cases", "cases", "summary.json"),
    ("evaluate", "--calibration-cases", "cases", "referral_rule.json"),
    ("evaluate", "--shifts", "shifts", "state/cases/toy000.json"),
    ("report", "--calibration-cases", "cases", "report.html"),
    ("report", "--calibration-cases", "cases", "figures/reliability.png"),
    ("triage", "--rule", "rule", "triage.json"),
    ("triage", "--rule", "rule", "triage.csv"),
    ("triage", "--rule", "rule", "triage.html"),
    ("triage", "--rule", "rule", "failures.json"),
    ("triage", "--rule", "rule", "state/cases/toy000.json"),
    ("triage", "--rule", "rule", "figures/scores.png"),
    ("calibrate", "--network", "spec", "cal.json"),  # the record beside the calibrated checkpoint cal.pt
    ("calibrate-regions", "--regions", "regions", "cal.json"),
]


@pytest.mark.parametrize(("command", "flag", "key", "name"), INSIDE)
def test_an_input_file_the_command_would_write_is_refused(s, command, flag, key, name, tmp_path, capsys):
    folder = tmp_path / "out"
    moved = folder / name
    moved.parent.mkdir(parents=True)
    shutil.copyfile(s[key], moved)
    before = _sha(moved)
    rc, err = _run(_argv(s, command, _out(command, folder), **{flag: moved}), capsys)
    assert rc == 2, err
    assert REFUSAL.search(err), err
    assert _sha(moved) == before
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [name]


@pytest.mark.parametrize(("command", "flag", "key", "folder_name"), [
    ("evaluate", "-l", "labels", "state"),
    ("triage", "-p", "predictions", "state/cases"),
    ("report", "--images", "images", "figures"),
])
def test_an_input_folder_the_command_would_write_into_is_refused(s, command, flag, key, folder_name, tmp_path,
                                                                  capsys):
    out = tmp_path / "out"
    moved = out / folder_name
    shutil.copytree(s[key], moved)
    before = {p.name: _sha(p) for p in moved.iterdir()}
    rc, err = _run(_argv(s, command, out, **{flag: moved}), capsys)
    assert rc == 2, err
    assert REFUSAL.search(err), err
    assert {p.name: _sha(p) for p in moved.iterdir()} == before


def test_demo_refuses_an_existing_file_as_its_output(s, capsys):
    before = _sha(s["image"])
    rc, err = _run(["demo", "--output", str(s["image"]), "--quiet"], capsys)
    assert rc == 2, err
    assert REFUSAL.search(err), err
    assert _sha(s["image"]) == before


# ------------------------------------------------------------------------------------------------ nnU-Net
@pytest.fixture(scope="module")
def model(s) -> Path:
    """An nnU-Net results folder without a trained network: the output checks come before the model is loaded."""
    pytest.importorskip("nnunetv2")
    folder = s["root"] / "nnunet_model"
    (folder / "fold_0").mkdir(parents=True)
    (folder / "plans.json").write_text('{"dataset_name": "Dataset001_Toy"}')
    (folder / "dataset.json").write_text('{"labels": {"background": 0, "fg": 1}}')
    (folder / "fold_0" / "checkpoint_final.pth").write_bytes(b"not a checkpoint")
    images = s["root"] / "nnunet_images"
    if not images.is_dir():
        images.mkdir()
        shutil.copyfile(s["image"], images / "toy000_0000.nii.gz")
    return folder


NNUNET: list[tuple[str, Callable[[dict[str, Path], Path], list[str]], Callable[[dict[str, Path], Path], Path]]] = [
    ("predict: -o a file of the model", lambda s, m: ["nnunet-predict", "-i", str(m.parent / "nnunet_images"),
                                                     "-m", str(m), "-f", "0", "-device", "cpu"],
     lambda s, m: m / "plans.json"),
    ("predict: -o the checkpoint", lambda s, m: ["nnunet-predict", "-i", str(m.parent / "nnunet_images"), "-m",
                                                str(m), "-f", "0", "-device", "cpu"],
     lambda s, m: m / "fold_0" / "checkpoint_final.pth"),
    ("predict: -o inside the model", lambda s, m: ["nnunet-predict", "-i", str(m.parent / "nnunet_images"), "-m",
                                                  str(m), "-f", "0", "-device", "cpu"],
     lambda s, m: m / "fold_0"),
    ("predict: -o the images", lambda s, m: ["nnunet-predict", "-i", str(m.parent / "nnunet_images"), "-m",
                                            str(m), "-f", "0", "-device", "cpu"],
     lambda s, m: m.parent / "nnunet_images"),
    ("predict: -o an image", lambda s, m: ["nnunet-predict", "-i", str(m.parent / "nnunet_images"), "-m", str(m),
                                          "-f", "0", "-device", "cpu"],
     lambda s, m: m.parent / "nnunet_images" / "toy000_0000.nii.gz"),
    ("calibrate: -o a file of the model", lambda s, m: ["nnunet-calibrate", "-m", str(m), "-f", "0", "-device",
                                                       "cpu"],
     lambda s, m: m / "plans.json"),
    ("calibrate: -o inside the model", lambda s, m: ["nnunet-calibrate", "-m", str(m), "-f", "0", "-device", "cpu"],
     lambda s, m: m / "fold_0"),
]


@pytest.mark.parametrize(("what", "argv", "output"), NNUNET, ids=[n[0] for n in NNUNET])
def test_nnunet_commands_refuse_an_input_as_the_output(s, model, what, argv, output, capsys):
    out = output(s, model)
    files = [p for p in ([out] if out.is_file() else out.rglob("*")) if p.is_file()]
    files += [p for p in model.rglob("*") if p.is_file()]
    before = {p: _sha(p) for p in files}
    listing = sorted(p.as_posix() for p in model.parent.rglob("*"))
    rc, err = _run([*argv(s, model), "-o", str(out)], capsys)
    assert rc == 2, err
    assert REFUSAL.search(err) or "lies inside" in err, err
    assert {p: _sha(p) for p in files} == before
    assert sorted(p.as_posix() for p in model.parent.rglob("*")) == listing  # nothing created


@pytest.mark.parametrize(("what", "output", "expected"), [
    ("inside the images", lambda m: m.parent / "nnunet_images" / "p",
     "-o folder {out} lies inside the input folder {images}; choose an output outside it (inputs are never written "
     "to)"),
    ("inside the model", lambda m: m / "fold_0",
     "-o folder {out} lies inside the input folder {model}; choose an output outside it (inputs are never written "
     "to)"),
    ("a file", lambda m: m.parent / "a_file.txt", "-o folder {out} is a file, not a folder"),
])
def test_nnunet_predict_names_its_output_option(s, model, capsys, what, output, expected):
    """``nnunet-predict`` refused its output as ``output folder ... lies inside ...``, naming no option; its options
    are nnU-Net's (``-i``, ``-o``, ``-m``): the message names ``-o`` as its ``-i folder not found`` names ``-i``."""
    out, images = output(model), model.parent / "nnunet_images"
    if out.suffix == ".txt":
        out.write_text("a file, no folder")
    argv = ["nnunet-predict", "-i", str(images), "-m", str(model), "-f", "0", "-device", "cpu", "-o", str(out)]
    rc, err = _run(argv, capsys)
    want = f"monai-unc nnunet-predict: error: {expected.format(out=out, images=images, model=model)}"
    assert rc == 2 and err.strip().splitlines() == [want], err
