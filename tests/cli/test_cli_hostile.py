"""Hostile inputs at the command line: every sub-command against a catalogue of bad inputs (missing, empty, corrupt,
truncated, zero-byte, wrong-shape, wrong-affine, unwritable output, output = input file) must either exit 2 with
exactly one stderr line naming the problem, or exit 1 with one line per failed case and ``failures.json`` (the
other cases done) -- never a traceback, never a silent success, never a modified input.

Unwritable outputs: the tests run as root in CI, where ``chmod`` does not bite (root writes anywhere). They use
(a) a path whose parent is a regular file (the folder cannot be created: ``NotADirectoryError`` territory) for every
command, and (b) a real ``PermissionError``: a child process that drops to the ``nobody`` user (``os.setuid``) and
targets a root-owned 0755 folder (as a non-root user: a ``chmod 0555`` folder in this process).

Small synthetic inputs: 16^3 toy cases (:func:`monai_unc.data.cohorts.write_toy_cohort`) and a two-level UNet with
random weights; ``infer`` runs the deterministic ``softmax`` method.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from tests._argv import with_options
from tests._cases import TOY_NET
from tests._ranks import free_port

NET = TOY_NET
NET2 = dict(NET, in_channels=2)  # for the multi-channel (CASE_0000, CASE_0001) cohort
OTHER = dict(NET, channels=[8, 16])  # another architecture: same keys, other shapes


def _unet(spec: dict) -> torch.nn.Module:
    from monai.networks.nets import UNet

    return UNet(**{k: v for k, v in spec.items() if k != "_target_"})


class _Opaque:
    """A pickled object that ``torch.load(weights_only=True)`` refuses."""


def _half(src: Path, dst: Path) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])
    return dst


def _nii(path: Path, arr: np.ndarray, affine: np.ndarray) -> Path:
    nib.save(nib.Nifti1Image(arr, affine), str(path))
    return path


@pytest.fixture(scope="module")
def d(tmp_path_factory) -> dict[str, Path]:
    """Good inputs, bad inputs and an evaluation folder (for ``report``)."""
    root = tmp_path_factory.mktemp("hostile")
    paths = write_toy_cohort(root / "data", n_cases=3, shape=(16, 16, 16))
    torch.manual_seed(0)
    torch.save(_unet(NET).state_dict(), root / "net.pt")
    torch.manual_seed(1)
    torch.save(_unet(NET).state_dict(), root / "net2.pt")
    torch.save(_unet(OTHER).state_dict(), root / "other.pt")
    torch.save({"state_dict": _unet(NET).state_dict(), "extra": _Opaque()}, root / "pickled.pt")
    torch.save({"foo": torch.zeros(3)}, root / "keys.pt")
    torch.manual_seed(2)
    torch.save(_unet(NET2).state_dict(), root / "net_2ch.pt")
    _half(root / "net.pt", root / "trunc.pt")
    (root / "zero.pt").write_bytes(b"")
    (root / "text.pt").write_text("this is not a checkpoint\n")
    (root / "net.json").write_text(json.dumps(NET))
    (root / "net_2ch.json").write_text(json.dumps(NET2))
    (root / "bad.json").write_text('{"_target_": "monai.networks.nets.UNet", ')
    (root / "empty.json").write_text("")
    (root / "afile").write_text("a regular file where a folder is needed\n")
    (root / "empty").mkdir()
    img = paths["images"]
    affine = nib.load(img / "toy000.nii.gz").affine

    # infer, one bad image per case: zero-byte, truncated, corrupt (random bytes), 2D in a 3D cohort
    bad = root / "bad_images"
    bad.mkdir()
    shutil.copy(img / "toy000.nii.gz", bad / "toy000.nii.gz")
    (bad / "toy001.nii.gz").write_bytes(b"")
    _half(img / "toy001.nii.gz", bad / "toy002.nii.gz")
    (bad / "toy003.nii.gz").write_bytes(np.random.default_rng(0).bytes(4000))
    _nii(bad / "toy004.nii.gz", np.zeros((16, 16), np.float32), affine)

    # infer, multi-channel cases: a channel with another affine, a channel with another shape
    mc = root / "mc_images"
    mc.mkdir()
    vol = nib.load(img / "toy000.nii.gz").get_fdata().astype(np.float32)
    for cid in ("caseA", "caseB", "caseC"):
        _nii(mc / f"{cid}_0000.nii.gz", vol, affine)
    _nii(mc / "caseA_0001.nii.gz", vol, affine)
    shifted = affine.copy()
    shifted[0, 3] += 5.0  # 5 mm along x
    _nii(mc / "caseB_0001.nii.gz", vol, shifted)
    _nii(mc / "caseC_0001.nii.gz", vol[:12], affine)

    # evaluate: six cases, one bad file each for five of them
    six = write_toy_cohort(root / "six", n_cases=6, shape=(16, 16, 16))
    pred = root / "six_bad_pred"
    labels = root / "six_bad_labels"
    shutil.copytree(six["predictions"], pred)
    shutil.copytree(six["labels"], labels)
    (pred / "toy001_probs.nii.gz").write_bytes(b"")  # zero-byte
    _half(six["predictions"] / "toy002_seg.nii.gz", pred / "toy002_seg.nii.gz")  # truncated
    p3 = nib.load(six["predictions"] / "toy003_probs.nii.gz")
    _nii(pred / "toy003_probs.nii.gz", np.asarray(p3.dataobj)[:12], p3.affine)  # wrong shape
    m4 = nib.load(six["predictions"] / "toy004_predictive_entropy.nii.gz")
    _nii(pred / "toy004_predictive_entropy.nii.gz", np.asarray(m4.dataobj), m4.affine * 2.0 - np.diag([0, 0, 0, 1.0]))
    (labels / "toy005.nii.gz").write_bytes(np.random.default_rng(1).bytes(3000))  # corrupt label
    unlabelled = root / "unlabelled_labels"
    shutil.copytree(six["labels"], unlabelled)
    (unlabelled / "toy004.nii.gz").unlink()
    (unlabelled / "toy005.nii.gz").unlink()

    # calibrate: a corrupt image, a label on another grid
    cal_bad = root / "cal_bad_images"
    shutil.copytree(img, cal_bad)
    _half(img / "toy001.nii.gz", cal_bad / "toy001.nii.gz")
    lab_shape = root / "lab_shape"
    shutil.copytree(paths["labels"], lab_shape)
    _nii(lab_shape / "toy002.nii.gz", np.zeros((16, 16, 12), np.int16), affine)
    lab_affine = root / "lab_affine"
    shutil.copytree(paths["labels"], lab_affine)
    _nii(lab_affine / "toy002.nii.gz", np.asarray(nib.load(paths["labels"] / "toy002.nii.gz").dataobj),
         affine * 1.5 - np.diag([0, 0, 0, 0.5]))

    # report: an evaluation and damaged copies of it
    ev = root / "ev"
    assert cli.main(["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "-o", str(ev),
                     "-q"]) == 0
    damaged = {}
    for name, damage in (("summary_truncated", lambda e: _half(ev / "summary.json", e / "summary.json")),
                         ("rows_zero", lambda e: (e / "state" / "rows.json").write_bytes(b"")),
                         ("histogram_truncated", lambda e: _half(ev / "state" / "histogram.npz",
                                                                 e / "state" / "histogram.npz")),
                         ("rows_wrong", lambda e: (e / "state" / "rows.json").write_text('{"rows": []}'))):
        e = root / name
        shutil.copytree(ev, e)
        damage(e)
        damaged[name] = e
    return {**paths, "root": root, "bad_images": bad, "mc_images": mc, "six_labels": six["labels"],
            "six_pred": six["predictions"], "bad_pred": pred,
            "bad_labels": labels, "unlabelled": unlabelled, "cal_bad": cal_bad, "lab_shape": lab_shape,
            "lab_affine": lab_affine, "ev": ev, **damaged}


def _run(argv: list[str], capsys) -> tuple[int, list[str]]:
    """Exit status and the non-empty stderr lines of one CLI call (argparse's SystemExit included)."""
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = int(e.code)
    err = capsys.readouterr().err
    return rc, [ln for ln in err.splitlines() if ln.strip()]


def _hashes(*folders: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for f in folders for p in sorted(Path(f).rglob("*")) if p.is_file()}


def _assert_one_line(rc: int, lines: list[str], command: str, message: str, argv: list[str]) -> None:
    assert rc == 2, (argv, rc, lines)
    assert len(lines) == 1, (argv, lines)
    assert lines[0].startswith(f"monai-unc {command}: error: "), (argv, lines)
    assert message in lines[0], (argv, message, lines)
    assert "Traceback" not in lines[0]
    head = lines[0][len(f"monai-unc {command}: error: "):]
    assert not re.match(r"[\w.]*(Error|Exception): ", head), lines  # our message, not a bare exception


# ------------------------------------------------------------------------------------------------ infer
def _infer(d: dict, out: Path, *extra: str, images: Path | None = None, ckpt: str = "net.pt",
           spec: str = "net.json") -> list[str]:
    return with_options(["infer", "-i", str(images or d["images"]), "-o", str(out), "--network", str(d["root"] / spec),
                         "--checkpoint", str(d["root"] / ckpt), "--method", "softmax", "-q"], *extra)


def _ensemble(d: dict, out: Path, *members: str) -> list[str]:
    return ["infer", "-i", str(d["images"]), "-o", str(out), "--network", str(d["root"] / "net.json"),
            "--checkpoint", *(str(d["root"] / m) for m in members), "--method", "ensemble", "-q"]


INFER_REFUSED: list[tuple[str, Callable[[dict, Path], list[str]], str]] = [
    ("missing input folder", lambda d, t: _infer(d, t / "o", images=t / "nope"), "--input folder not found"),
    ("empty input folder", lambda d, t: _infer(d, t / "o", images=d["root"] / "empty"), "no image volume"),
    ("missing checkpoint", lambda d, t: _infer(d, t / "o", ckpt="nope.pt"), "checkpoint file not found"),
    ("zero-byte checkpoint", lambda d, t: _infer(d, t / "o", ckpt="zero.pt"), "the file is empty (0 bytes)"),
    ("truncated checkpoint", lambda d, t: _infer(d, t / "o", ckpt="trunc.pt"), "cannot read checkpoint"),
    ("text file as checkpoint", lambda d, t: _infer(d, t / "o", ckpt="text.pt"), "cannot read checkpoint"),
    ("pickled checkpoint", lambda d, t: _infer(d, t / "o", ckpt="pickled.pt"), "--unsafe-load"),
    ("checkpoint with other keys", lambda d, t: _infer(d, t / "o", ckpt="keys.pt"),
     "does not fit the network UNet: 8 missing keys"),
    ("checkpoint of another architecture", lambda d, t: _infer(d, t / "o", ckpt="other.pt"),
     "shape mismatches (checkpoint vs network)"),
    ("pickled second ensemble member", lambda d, t: _ensemble(d, t / "o", "net.pt", "pickled.pt"),
     "pickled.pt cannot be loaded with torch.load(weights_only=True) (it holds pickled Python objects)"),
    ("truncated second ensemble member", lambda d, t: _ensemble(d, t / "o", "net.pt", "trunc.pt"),
     "cannot read checkpoint " + "{root}/trunc.pt"),
    ("zero-byte second ensemble member", lambda d, t: _ensemble(d, t / "o", "net.pt", "zero.pt"),
     "zero.pt: the file is empty"),
    ("ensemble member of another architecture", lambda d, t: _ensemble(d, t / "o", "net.pt", "other.pt"),
     "other.pt does not fit the network"),
    ("missing network spec", lambda d, t: _infer(d, t / "o", spec="nope.json"), "network spec must be inline JSON"),
    ("truncated network spec", lambda d, t: _infer(d, t / "o", spec="bad.json"), "bad.json"),
    ("empty network spec", lambda d, t: _infer(d, t / "o", spec="empty.json"), "empty.json"),
    ("2 roi sizes for 3D images", lambda d, t: _infer(d, t / "o", "--roi", "8", "8"),
     "--roi gives 2 sizes (8, 8) but the network takes 3D input"),
    ("negative TTA noise", lambda d, t: _infer(d, t / "o", "--method", "tta", "--tta-noise", "-1"),
     "--tta-noise: expected a finite number >= 0, got -1"),
    ("NaN TTA noise", lambda d, t: _infer(d, t / "o", "--method", "tta", "--tta-noise", "nan"),
     "--tta-noise: expected a finite number >= 0, got nan"),
    ("TTA noise overflowing float32", lambda d, t: _infer(d, t / "o", "--method", "tta", "--tta-noise", "1e308"),
     "--tta-noise: expected a standard deviation of at most 3.78e+37 (larger noise overflows the float32 input), "
     "got 1e308"),
    ("malformed code target", lambda d, t: _infer(d, t / "o", "--allow-code-target", "mypkg.*"),
     "--allow-code-target: expected '*', a dotted Python name or a module prefix ending with '.', got 'mypkg.*'"),
    ("empty code target", lambda d, t: _infer(d, t / "o", "--allow-code-target", ""),
     "--allow-code-target: expected '*', a dotted Python name or a module prefix ending with '.', got ''"),
    ("TTA noise without tta", lambda d, t: _infer(d, t / "o", "--method", "mcdropout", "--tta-noise", "0.1"),
     "used by the tta source only"),
    ("NaN dropout", lambda d, t: _infer(d, t / "o", "--dropout", "nan"), "--dropout: expected a number in (0, 1)"),
    ("NaN Rate-In target", lambda d, t: _infer(d, t / "o", "--ratein-target", "nan"), "--ratein-target"),
    ("output under a regular file", lambda d, t: _infer(d, d["root"] / "afile" / "o"),
     "cannot be created: " + "{root}/afile is a file"),
    ("output = input checkpoint file", lambda d, t: _infer(d, d["root"] / "net.pt"), "is a file, not a folder"),
    ("output = input folder", lambda d, t: _infer(d, d["images"]), "lies inside the input folder"),
    ("output inside the input folder", lambda d, t: _infer(d, d["images"] / "out"), "lies inside the input folder"),
]


@pytest.mark.parametrize("name, argv, message", INFER_REFUSED, ids=[c[0] for c in INFER_REFUSED])
def test_infer_refuses_bad_input_in_one_line(d, tmp_path, capsys, name, argv, message):
    before = _hashes(d["root"] / "data", *(d["root"] / f for f in ("net.pt", "net.json", "afile")))
    args = argv(d, tmp_path)
    rc, lines = _run(args, capsys)
    _assert_one_line(rc, lines, "infer", message.format(root=d["root"]), args)
    assert not (tmp_path / "o").exists()  # refused before any work: nothing written
    assert _hashes(d["root"] / "data", *(d["root"] / f for f in ("net.pt", "net.json", "afile"))) == before


def _assert_case_failures(rc, lines, out: Path, command: str, expected: dict[str, str]) -> None:
    assert rc == 1, lines
    per_case = [ln for ln in lines if ln.startswith(f"monai-unc {command}: case ")]
    assert len(per_case) == len(expected) and len(lines) == len(expected) + 1, lines
    for cid, reason in expected.items():
        line = next(ln for ln in per_case if ln.startswith(f"monai-unc {command}: case {cid!r} failed: "))
        assert reason in line, (cid, reason, line)
    assert f"{len(expected)} case(s) failed" in lines[-1] and "failures.json" in lines[-1]
    doc = json.loads((out / "failures.json").read_text())
    assert [f["case"] for f in doc["failures"]] == sorted(expected)
    assert all("Traceback" not in ln for ln in lines)


def test_infer_bad_images_fail_per_case(d, tmp_path, capsys):
    out = tmp_path / "o"
    rc, lines = _run(_infer(d, out, images=d["bad_images"]), capsys)
    _assert_case_failures(rc, lines, out, "infer", {
        "toy001": "the file is empty (0 bytes)",
        "toy002": "cannot read",
        "toy003": "cannot read",
        "toy004": "has spatial shape (16, 16) (2D) but the network takes 3D images",
    })
    assert (out / "toy000.json").is_file() and not (out / "toy004.json").exists()


def test_infer_bad_channels_fail_per_case(d, tmp_path, capsys):
    """nnU-Net channel files: a second channel with another affine (wrong-affine) or shape (wrong-shape)."""
    out = tmp_path / "o"
    rc, lines = _run(_infer(d, out, images=d["mc_images"], ckpt="net_2ch.pt", spec="net_2ch.json"), capsys)
    _assert_case_failures(rc, lines, out, "infer", {
        "caseB": "channel caseB_0001.nii.gz does not share the geometry of channel 0",
        "caseC": "channel caseC_0001.nii.gz does not share the geometry of channel 0",
    })
    assert (out / "caseA.json").is_file()


def test_infer_json_files_are_strict_json(d, tmp_path, capsys):
    """infer.json and the case records parse with a strict parser (no bare NaN / Infinity)."""
    out = tmp_path / "o"
    assert cli.main(_infer(d, out, "--method", "tta", "--tta-noise", "0.05")) == 0

    def strict(text: str):
        return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))

    settings = strict((out / "infer.json").read_text())["settings"]
    assert settings["tta_noise"] == 0.05
    for f in out.glob("toy*.json"):
        strict(f.read_text())


# ------------------------------------------------------------------------------------------------ evaluate
def _evaluate(labels: Path, pred: Path, out: Path, *extra: str) -> list[str]:
    return ["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "-q", *extra]


EVALUATE_REFUSED: list[tuple[str, Callable[[dict, Path], list[str]], str]] = [
    ("missing labels folder", lambda d, t: _evaluate(t / "nope", d["predictions"], t / "o"), "folder not found"),
    ("missing predictions folder", lambda d, t: _evaluate(d["labels"], t / "nope", t / "o"),
     "predictions folder not found"),
    ("missing uncertainty folder", lambda d, t: _evaluate(d["labels"], d["predictions"], t / "o", "--uncertainty",
                                                          str(t / "nope")), "uncertainty folder not found"),
    ("missing images folder", lambda d, t: _evaluate(d["labels"], d["predictions"], t / "o", "--images",
                                                     str(t / "nope")), "folder not found"),
    ("empty labels folder", lambda d, t: _evaluate(d["root"] / "empty", d["predictions"], t / "o"),
     "no label volume"),
    ("empty predictions folder", lambda d, t: _evaluate(d["labels"], d["root"] / "empty", t / "o"), "lack files"),
    ("predictions without labels", lambda d, t: _evaluate(d["unlabelled"], d["six_pred"], t / "o"),
     "2 case(s) have predictions in"),
    ("missing shift table", lambda d, t: _evaluate(d["labels"], d["predictions"], t / "o", "--shifts",
                                                   str(t / "nope.csv")), "shift table not found"),
    ("binary file as shift table", lambda d, t: _evaluate(d["labels"], d["predictions"], t / "o", "--shifts",
                                                          str(d["root"] / "net.pt")), "net.pt"),
    ("shift table without the columns", lambda d, t: _evaluate(d["labels"], d["predictions"], t / "o", "--shifts",
                                                               str(d["root"] / "net.json")),
     "must be a CSV with columns 'case' and 'shift'"),
    ("missing calibration case list", lambda d, t: _evaluate(d["labels"], d["predictions"], t / "o", "--target-risk",
                                                             "0.2", "--calibration-cases", str(t / "nope.txt")),
     "--calibration-cases: file not found"),
    ("output under a regular file", lambda d, t: _evaluate(d["labels"], d["predictions"], d["root"] / "afile" / "o"),
     "is a file, not a folder"),
    ("output = an input file", lambda d, t: _evaluate(d["labels"], d["predictions"], d["root"] / "net.pt"),
     "is a file, not a folder"),
    ("output = predictions folder", lambda d, t: _evaluate(d["labels"], d["predictions"], d["predictions"]),
     "lies inside the input folder"),
    ("summary.json = the shift table", lambda d, t: _evaluate(d["labels"], d["predictions"], d["root"], "--shifts",
                                                              str(d["root"] / "metrics.csv")),
     "is the input file"),
]


@pytest.mark.parametrize("name, argv, message", EVALUATE_REFUSED, ids=[c[0] for c in EVALUATE_REFUSED])
def test_evaluate_refuses_bad_input_in_one_line(d, tmp_path, capsys, name, argv, message):
    if name == "summary.json = the shift table":
        (d["root"] / "metrics.csv").write_text("case,shift\ntoy000,none\n")  # an input named like an output
    before = _hashes(d["root"] / "data", d["root"] / "six")
    args = argv(d, tmp_path)
    rc, lines = _run(args, capsys)
    _assert_one_line(rc, lines, "evaluate", message, args)
    assert not (tmp_path / "o").exists() and not (d["root"] / "summary.json").exists()
    assert _hashes(d["root"] / "data", d["root"] / "six") == before


def test_evaluate_predictions_without_labels_need_the_flag(d, tmp_path, capsys):
    """Issue: cases with predictions but no label were dropped without a word (exit 0, "4 case(s)")."""
    out = tmp_path / "o"
    rc, lines = _run(_evaluate(d["unlabelled"], d["six_pred"], out), capsys)
    _assert_one_line(rc, lines, "evaluate", "no label in", [])
    assert "'toy004', 'toy005'" in lines[0] and "--allow-missing-labels" in lines[0]
    rc, lines = _run(_evaluate(d["unlabelled"], d["six_pred"], out, "--allow-missing-labels"), capsys)
    assert rc == 0, lines
    # said when the cases are matched, and listed in summary.json's warnings (hostile review 60), which it prints
    assert lines == ["monai-unc evaluate: warning: 2 case(s) with predictions but no label skipped "
                     "(allow_missing_labels): 'toy004', 'toy005'",
                     "warning: cohort: 2 case(s) with predictions but no label skipped "
                     "(allow_missing_labels): 'toy004', 'toy005'"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_cases"] == 4
    assert summary["warnings"] == ["cohort: 2 case(s) with predictions but no label skipped (allow_missing_labels): "
                                   "'toy004', 'toy005'"]


def test_deprecated_names_warn_in_one_line(d, tmp_path, capsys):
    """Found by testing the docs: ``--score <m>_patch`` warned nothing (Python hides a DeprecationWarning raised
    outside ``__main__``), and ``--measures max_softmax`` warned in two raw lines pointing into argparse."""
    rc, lines = _run(_evaluate(d["labels"], d["predictions"], tmp_path / "o", "--score", "predictive_entropy_patch"),
                     capsys)
    assert rc == 0, lines
    assert len(lines) == 1 and lines[0].startswith("monai-unc evaluate: warning: score column "
                                                   "'predictive_entropy_patch' is deprecated"), lines
    rc, lines = _run(_infer(d, tmp_path / "i", "--measures", "max_softmax"), capsys)
    assert rc == 0, lines
    assert len(lines) == 1 and lines[0].startswith("monai-unc infer: warning: the measure name 'max_softmax' is "
                                                   "deprecated"), lines


def test_the_users_warning_options_decide_over_the_deprecation_lines(d, tmp_path):
    """Found by hostile testing: the command's own filter overrode ``-W`` / ``PYTHONWARNINGS``, so a CI's
    ``error::DeprecationWarning`` became a warning line and exit 0."""
    for option, fails in (("error::DeprecationWarning", True), ("ignore::DeprecationWarning", False)):
        r = subprocess.run([sys.executable, "-m", "monai_unc.cli", *_evaluate(d["labels"], d["predictions"],
                            tmp_path / option.split(":")[0], "--score", "predictive_entropy_patch", "--no-spatial")],
                           env={**os.environ, "PYTHONWARNINGS": option, "OMP_NUM_THREADS": "1"}, capture_output=True,
                           text=True, timeout=600)
        assert (r.returncode != 0) == fails, (option, r.returncode, r.stderr[-2000:])
        if not fails:
            assert "deprecated" not in r.stderr, r.stderr


def test_missing_dicom_extra_stops_the_run_in_one_line(d, tmp_path, capsys, monkeypatch):
    """Found by hostile testing of a plain install: DICOM series folders without the ``dicom`` extra failed case by
    case (one line each, exit 1, "fix these cases and run again") instead of one line naming the extra, exit 2."""
    for name in [m for m in sys.modules if m == "pydicom" or m.startswith(("pydicom.", "monai_unc.io.dicom"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pydicom", None)  # import pydicom raises ImportError
    series = tmp_path / "series"
    for cid in ("case1", "case2", "case3"):
        (series / cid).mkdir(parents=True)
        (series / cid / "IM0001.dcm").write_bytes(b"x")
    rc, lines = _run(_infer(d, tmp_path / "o", images=series), capsys)
    assert rc == 2, lines
    assert len(lines) == 1 and lines[0].startswith("monai-unc infer: error: ") and "monai-unc[dicom]" in lines[0], lines
    assert not (tmp_path / "o" / "failures.json").exists()


def test_a_full_disk_stops_infer_in_one_line_naming_the_file_and_a_rerun_resumes(d, tmp_path, capsys, monkeypatch):
    """Found by hostile testing: on a full output disk every remaining case was computed and then failed with
    ``OSError: [Errno 28] No space left on device`` (no folder, no file), one line each, then once more."""
    import errno

    from monai_unc.io import GzipBlockWriter

    out = tmp_path / "o"
    tried: list[str] = []
    full = {"toy001"}
    real_write = GzipBlockWriter.write

    def write(self, data):  # the disk fills up while toy001's first file is written
        name = Path(str(getattr(self._raw, "name", ""))).name
        tried.append(name)
        if any(c in name for c in full):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(self, data)

    monkeypatch.setattr(GzipBlockWriter, "write", write)
    rc, lines = _run(_infer(d, out), capsys)
    assert rc == 2, lines
    assert len(lines) == 1 and re.fullmatch(rf"monai-unc infer: error: No space left on device: "
                                            rf"{re.escape(str(out))}/toy001_\w+\.nii\.gz", lines[0]), lines
    assert not [n for n in tried if "toy002" in n], tried  # the later case was not computed
    assert not (out / "failures.json").exists()
    full.clear()  # space freed
    tried.clear()
    rc, lines = _run(_infer(d, out), capsys)
    assert rc == 0, lines
    assert not [n for n in tried if "toy000" in n] and [n for n in tried if "toy002" in n], tried  # resumed
    assert all((out / f"toy00{i}_seg.nii.gz").is_file() for i in range(3))


def test_evaluate_bad_files_fail_per_case(d, tmp_path, capsys):
    out = tmp_path / "o"
    rc, lines = _run(_evaluate(d["bad_labels"], d["bad_pred"], out), capsys)
    _assert_case_failures(rc, lines, out, "evaluate", {
        "toy001": "the file is empty (0 bytes)",
        "toy002": "cannot read",
        "toy003": "toy003_probs.nii.gz has spatial shape (12, 16, 16) but the label",
        "toy004": "different affines",
        "toy005": "cannot read",
    })
    assert not (out / "metrics.csv").exists() and not (out / "summary.json").exists()


# ------------------------------------------------------------------------------------------------ report
REPORT_REFUSED: list[tuple[str, Callable[[dict, Path], list[str]], str]] = [
    ("missing evaluation folder", lambda d, t: ["report", "-e", str(t / "nope"), "-q"], "folder not found"),
    ("empty evaluation folder", lambda d, t: ["report", "-e", str(d["root"] / "empty"), "-o", str(t / "o"), "-q"],
     "no summary.json"),
    ("truncated summary.json", lambda d, t: ["report", "-e", str(d["summary_truncated"]), "-o", str(t / "o"), "-q"],
     "cannot read the evaluation"),
    ("zero-byte rows.json", lambda d, t: ["report", "-e", str(d["rows_zero"]), "-o", str(t / "o"), "-q"],
     "cannot read the evaluation"),
    ("truncated histogram.npz", lambda d, t: ["report", "-e", str(d["histogram_truncated"]), "-o", str(t / "o"),
                                              "-q"], "cannot read the evaluation"),
    ("rows.json of the wrong shape", lambda d, t: ["report", "-e", str(d["rows_wrong"]), "-o", str(t / "o"), "-q"],
     "state/rows.json: field 'num_classes' must be a positive count"),
    ("output under a regular file", lambda d, t: ["report", "-e", str(d["ev"]), "-o", str(d["root"] / "afile" / "r"),
                                                  "-q"], "is a file, not a folder"),
    ("output = an input file", lambda d, t: ["report", "-e", str(d["ev"]), "-o", str(d["ev"] / "summary.json"),
                                             "-q"], "is a file, not a folder"),
    ("output inside the images", lambda d, t: ["report", "-e", str(d["ev"]), "-o", str(d["images"] / "r"),
                                               "--images", str(d["images"]), "-q"], "lies inside the input folder"),
]


@pytest.mark.parametrize("name, argv, message", REPORT_REFUSED, ids=[c[0] for c in REPORT_REFUSED])
def test_report_refuses_bad_input_in_one_line(d, tmp_path, capsys, name, argv, message):
    before = _hashes(d["ev"], d["images"])
    args = argv(d, tmp_path)
    rc, lines = _run(args, capsys)
    _assert_one_line(rc, lines, "report", message, args)
    assert not (tmp_path / "o").exists()
    assert _hashes(d["ev"], d["images"]) == before


# ------------------------------------------------------------------------------------------------ calibrate
def _calibrate(d: dict, out: Path, *extra: str, images: Path | None = None, labels: Path | None = None,
               ckpt: str = "net.pt", spec: str = "net.json") -> list[str]:
    return ["calibrate", "-i", str(images or d["images"]), "-l", str(labels or d["labels"]), "-o", str(out),
            "--network", str(d["root"] / spec), "--checkpoint", str(d["root"] / ckpt), "--max-steps", "3", "-q",
            *extra]


CALIBRATE_REFUSED: list[tuple[str, Callable[[dict, Path], list[str]], str]] = [
    ("missing images", lambda d, t: _calibrate(d, t / "c.pt", images=t / "nope"), "--input folder not found"),
    ("missing labels", lambda d, t: _calibrate(d, t / "c.pt", labels=t / "nope"), "--labels folder not found"),
    ("empty images", lambda d, t: _calibrate(d, t / "c.pt", images=d["root"] / "empty"), "no image volume"),
    ("empty labels", lambda d, t: _calibrate(d, t / "c.pt", labels=d["root"] / "empty"), "no label in"),
    ("truncated image", lambda d, t: _calibrate(d, t / "c.pt", images=d["cal_bad"]), "cannot read"),
    ("label of another shape", lambda d, t: _calibrate(d, t / "c.pt", labels=d["lab_shape"]),
     "does not share the image's grid"),
    ("label with another affine", lambda d, t: _calibrate(d, t / "c.pt", labels=d["lab_affine"]),
     "does not share the image's grid"),
    ("zero-byte checkpoint", lambda d, t: _calibrate(d, t / "c.pt", ckpt="zero.pt"), "the file is empty"),
    ("truncated checkpoint", lambda d, t: _calibrate(d, t / "c.pt", ckpt="trunc.pt"), "cannot read checkpoint"),
    ("checkpoint of another architecture", lambda d, t: _calibrate(d, t / "c.pt", ckpt="other.pt"),
     "does not fit the network"),
    ("2 roi sizes for 3D images", lambda d, t: _calibrate(d, t / "c.pt", "--roi", "8", "8"), "--roi gives 2 sizes"),
    ("output not a .pt", lambda d, t: _calibrate(d, t / "c.txt"), "must be a .pt or .pth file"),
    ("output under a regular file", lambda d, t: _calibrate(d, d["root"] / "afile" / "c.pt"),
     "is a file, not a folder"),
    ("output = the checkpoint", lambda d, t: _calibrate(d, d["root"] / "net.pt"), "is the input file"),
    ("record = the network spec", lambda d, t: _calibrate(d, d["root"] / "net.pth"),
     "record of --output " + "{root}/net.json is the input file"),
    ("output inside the images", lambda d, t: _calibrate(d, d["images"] / "c.pt"), "lies inside the input folder"),
    ("output = a folder", lambda d, t: _calibrate(d, d["root"] / "empty.pt"), "is a folder"),
]


@pytest.mark.parametrize("name, argv, message", CALIBRATE_REFUSED, ids=[c[0] for c in CALIBRATE_REFUSED])
def test_calibrate_refuses_bad_input_in_one_line(d, tmp_path, capsys, name, argv, message):
    if name == "output = a folder":
        (d["root"] / "empty.pt").mkdir(exist_ok=True)
    before = _hashes(d["root"] / "data", *(d["root"] / f for f in ("net.pt", "net.json")))
    args = argv(d, tmp_path)
    rc, lines = _run(args, capsys)
    _assert_one_line(rc, lines, "calibrate", message.format(root=d["root"]), args)
    assert not (tmp_path / "c.pt").exists() and not (tmp_path / "c.json").exists()
    assert _hashes(d["root"] / "data", *(d["root"] / f for f in ("net.pt", "net.json"))) == before


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_calibrate_never_overwrites_its_checkpoint_through_a_link(d, tmp_path, capsys, link):
    """Issue: ``calibrate --checkpoint w.pt -o w.pt`` replaced the input weights with the calibrated ones."""
    ckpt = tmp_path / "w.pt"
    shutil.copy(d["root"] / "net.pt", ckpt)
    out = tmp_path / "alias.pt"
    (os.symlink if link == "symlink" else os.link)(ckpt, out)
    before = ckpt.read_bytes()
    argv = ["calibrate", "-i", str(d["images"]), "-l", str(d["labels"]), "-o", str(out), "--network",
            str(d["root"] / "net.json"), "--checkpoint", str(ckpt), "--max-steps", "3", "-q"]
    rc, lines = _run(argv, capsys)
    how = "is a link to" if link == "symlink" else "is a hard link of"
    _assert_one_line(rc, lines, "calibrate", f"{how} the input file {ckpt}", argv)
    assert ckpt.read_bytes() == before


# ------------------------------------------------------------------------------------------------ demo, nnU-Net
DEMO_REFUSED = [
    ("output under a regular file", "afile/x", [], "is a file, not a folder"),
    ("output = a file", "afile", [], "is a file, not a folder"),
    ("2 roi sizes", "demo_roi", ["--roi", "8", "8"], "--roi gives 2 sizes (8, 8) but the example network takes 3D"),
    ("unknown method", "demo_method", ["--method", "magic"], "--method must be '+'-joined names"),
]


@pytest.mark.parametrize("name, where, extra, message", DEMO_REFUSED, ids=[c[0] for c in DEMO_REFUSED])
def test_demo_refuses_bad_options_before_any_work(d, capsys, name, where, extra, message):
    """Checked before the demo cohort is built (minutes of work): nothing is written."""
    argv = ["demo", "--output", str(d["root"] / where), "--quiet", *extra]
    rc, lines = _run(argv, capsys)
    _assert_one_line(rc, lines, "demo", message, argv)
    assert not (d["root"] / "demo_roi").exists() and not (d["root"] / "demo_method").exists()


def test_nnunet_commands_hostile_inputs(tmp_path, capsys, monkeypatch):
    """The nnU-Net sub-commands (with the nnunet extra) refuse bad inputs that need no trained model with one stderr
    line and exit 2, and write nothing; their failures on a trained model are in tests/nnunet/test_nnunet.py."""
    pytest.importorskip("nnunetv2")
    images = tmp_path / "images"
    images.mkdir()
    preprocessed = tmp_path / "preprocessed"
    preprocessed.mkdir()
    out = tmp_path / "out"
    monkeypatch.delenv("nnUNet_preprocessed", raising=False)
    calls = [
        ("nnunet-predict", ["-i", str(images), "-o", str(out), "-m", str(tmp_path / "nope"), "-device", "cpu"],
         "trained model folder not found"),
        ("nnunet-predict", ["-i", str(images), "-o", str(out), "-m", str(tmp_path), "-d", "1", "-c", "3d_fullres"],
         "not both"),
        ("nnunet-predict", ["-i", str(images), "-o", str(out), "-m", str(tmp_path), "--dropout_p", "0.2"],
         "--dropout_p needs dropout in --sources"),  # in flag terms, not the predictor's argument names
        ("nnunet-calibrate", ["-m", str(tmp_path / "nope"), "-o", str(out)], "trained model folder not found"),
        ("nnunet-dropout-plans", ["-d", "999", "--rate", "0.2"], "nnUNet_preprocessed is not set"),
    ]
    for command, argv, message in calls:
        rc, lines = _run([command, *argv], capsys)
        _assert_one_line(rc, lines, command, message, argv)
    monkeypatch.setenv("nnUNet_preprocessed", str(preprocessed))
    for argv, message in ((["-d", "999", "--rate", "0.2"], "no dataset with the id 999"),
                          (["-d", "Task_999", "--rate", "0.2"], "dataset (-d) must be an id"),
                          (["-d", "Dataset999_Nope", "--rate", "0.2"], "source plans")):
        rc, lines = _run(["nnunet-dropout-plans", *argv], capsys)
        _assert_one_line(rc, lines, "nnunet-dropout-plans", message, argv)
    assert not out.exists() and not any(preprocessed.iterdir()) and not any(images.iterdir())


# ------------------------------------------------------------------------------------------------ PermissionError
def _shared_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def _run_unprivileged(argvs: list[list[str]], read_only: Path) -> list[tuple[int, list[str]]]:
    """Run CLI calls as a user who cannot write ``read_only``: as root, in a forked child that drops to ``nobody``
    (root-owned 0755 folder); otherwise here, with the folder made read-only (0555)."""

    def calls() -> list[tuple[int, list[str]]]:
        out = []
        for argv in argvs:
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    rc = cli.main(argv)
                except SystemExit as e:
                    rc = int(e.code)
                except BaseException as e:  # a traceback would be the bug under test: report it as one
                    rc, err = -1, io.StringIO(f"Traceback (escaped): {type(e).__name__}: {e}\n")
            out.append((rc, [ln for ln in err.getvalue().splitlines() if ln.strip()]))
        return out

    if os.geteuid() != 0:
        read_only.chmod(0o555)
        try:
            return calls()
        finally:
            read_only.chmod(0o755)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop root, run, report through the pipe, exit without pytest's teardown
        status = 0
        try:
            import torch  # noqa: PLC0415 - the child only: the parent's OpenMP pool does not survive fork

            torch.set_num_threads(1)
            os.close(read_fd)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            with os.fdopen(write_fd, "w") as f:
                json.dump(calls(), f)
        except BaseException:
            status = 1
        os._exit(status)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and text, "the unprivileged child failed"
    return [(rc, lines) for rc, lines in json.loads(text)]


def test_permission_denied_output_is_one_line_for_every_command(d):
    """A real PermissionError (not a file-as-folder): every writing command refuses before any work."""
    base = Path(tempfile.mkdtemp(prefix="monai_unc_perm_"))
    try:
        base.chmod(0o755)
        data = _shared_copy(d["root"] / "data", base / "data")
        ev = _shared_copy(d["ev"], base / "ev")
        for f in ("net.pt", "net.json"):
            shutil.copy(d["root"] / f, base / f)
            (base / f).chmod(0o644)
        locked = base / "locked"
        locked.mkdir()
        locked.chmod(0o755)  # owned by root: nobody may not write here
        net = ["--network", str(base / "net.json"), "--checkpoint", str(base / "net.pt")]
        argvs = [
            ["infer", "-i", str(data / "images"), "-o", str(locked / "pred"), *net, "--method", "softmax", "-q"],
            ["evaluate", "-l", str(data / "labels"), "-p", str(data / "predictions"), "-o", str(locked / "ev"), "-q"],
            ["report", "-e", str(ev), "-o", str(locked / "report"), "-q"],
            ["calibrate", "-i", str(data / "images"), "-l", str(data / "labels"), "-o", str(locked / "c.pt"), *net,
             "--max-steps", "2", "-q"],
            ["report", "-e", str(ev), "-q"],  # the default output, <evaluation>/report, in a folder not ours
        ]
        if os.geteuid() != 0:
            ev.chmod(0o555)
        results = _run_unprivileged(argvs, locked)
        commands = ["infer", "evaluate", "report", "calibrate", "report"]
        for argv, command, (rc, lines) in zip(argvs, commands, results):
            _assert_one_line(rc, lines, command, "is not writable: permission denied", argv)
        assert list(locked.iterdir()) == [] and not (ev / "report").exists()
    finally:
        for p in [base, *base.rglob("*")]:
            with contextlib.suppress(OSError):
                p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ torchrun

def _rank_worker(rank: int, world: int, port: int, calls: list[list[str]], log_dir: str) -> None:
    """One rank of a torchrun-style group running each CLI call; records exit status and stderr per call."""
    from monai_unc.engine import destroy_dist_context, get_dist_context

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), MONAI_UNC_DIST_TIMEOUT="60")
    torch.set_num_threads(1)
    ctx = get_dist_context()
    results = []
    try:
        for argv in calls:
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    rc = cli.main(argv)
                except BaseException as e:
                    rc, err = -1, io.StringIO(f"Traceback (escaped): {type(e).__name__}: {e}\n")
            results.append([rc, [ln for ln in err.getvalue().splitlines() if ln.strip()]])
    finally:
        destroy_dist_context(ctx)
    Path(log_dir, f"rank{rank}.json").write_text(json.dumps(results))


def test_two_ranks_refuse_bad_inputs_with_one_line_each_and_no_hang(d, tmp_path):
    """Under torchrun every rank exits 2 with its own single line; no rank waits in a collective for another."""
    calls = [
        _infer(d, tmp_path / "o1", ckpt="other.pt"),  # another architecture
        _ensemble(d, tmp_path / "o2", "net.pt", "pickled.pt"),  # a pickled second ensemble member
        _infer(d, d["root"] / "afile" / "o3"),  # unwritable output
        _infer(d, tmp_path / "o4", "--roi", "8", "8"),
        _evaluate(d["unlabelled"], d["six_pred"], tmp_path / "e1"),  # predictions without labels
        _evaluate(d["labels"], d["predictions"], d["root"] / "afile" / "e2"),
    ]
    ctx = multiprocessing.get_context("fork")  # the workers reuse the imported modules
    port = free_port()
    procs = [ctx.Process(target=_rank_worker, args=(r, 2, port, calls, str(tmp_path))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert not hung, f"rank(s) {hung} hung"
    assert [p.exitcode for p in procs] == [0, 0]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    expected = ["does not fit the network", "pickled Python objects", "is a file, not a folder", "--roi gives 2 sizes",
                "2 case(s) have predictions in", "is a file, not a folder"]
    for r, results in enumerate(ranks):
        for argv, message, (rc, lines) in zip(calls, expected, results):
            _assert_one_line(rc, lines, argv[0], message, argv + [f"rank {r}"])
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 5)) and not (tmp_path / "e1").exists()


# ------------------------------------------------------------------------------------------- TypeError
def test_a_type_error_of_our_checks_is_one_line_and_another_keeps_its_traceback(d, tmp_path, capsys, monkeypatch):
    """A ``TypeError`` that one of the package's checks raises (a value of the wrong type, named) is bad input: one
    line, exit 2, like a ``ValueError`` (it ended in a traceback); a ``TypeError`` that Python raises is a bug and
    keeps its traceback."""
    from monai_unc._utils import check_bool

    argv = ["report", "--evaluation", str(d["ev"]), "-o", str(tmp_path / "r")]
    monkeypatch.setattr(cli, "_run", lambda args: check_bool("yes", "--flag"))
    rc, lines = _run(argv, capsys)
    _assert_one_line(rc, lines, "report", "--flag must be True or False, got 'yes'", argv)

    def bug(args):
        return len(5)  # a TypeError of Python's, not of a check

    monkeypatch.setattr(cli, "_run", bug)
    with pytest.raises(TypeError, match="has no len"):
        cli.main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
