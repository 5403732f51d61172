"""Options that named nothing, or more than a command uses, at the command line (hostile review of the CLI side).

Each was a silent wrong output or a late failure before: an explicit ``--seg-suffix`` that matched no file scored
the argmax of the probabilities instead of the user's segmentations (exit 0); an ``--uncertainty`` folder without
maps was evaluated without them (exit 0); ``--measure`` without maps failed every case after evaluating it (exit 1)
and a ``--score`` typo was refused only after every case;
``infer --checkpoint A B`` without ``ensemble`` dropped ``B`` without a word; a ``--regions`` file that is not
UTF-8 was the codec's words alone; ``python -m monai_unc`` did not run. Small synthetic inputs: 16^3 toy cases
(:func:`monai_unc.data.cohorts.write_toy_cohort`) with their predictions (probabilities and predictive entropy).
"""

from __future__ import annotations

import csv
import json
import os
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
from tests._cases import TOY_NET


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    """Two toy cases: ``toy/labels``, ``toy/predictions`` (``_seg``, ``_probs``, ``_predictive_entropy``)."""
    root = tmp_path_factory.mktemp("options")
    write_toy_cohort(root / "toy", n_cases=2, shape=(16, 16, 16))
    return root / "toy"


def _run(argv: list[str], capsys) -> tuple[int, list[str]]:
    status = cli.main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return status, err


def test_a_seg_suffix_that_names_no_file_is_refused(toy, tmp_path, capsys):
    pred = tmp_path / "pred"
    pred.mkdir()
    for f in sorted((toy / "predictions").glob("*_probs.nii.gz")):
        shutil.copy(f, pred / f.name)
        cid = f.name[: -len("_probs.nii.gz")]
        label = nib.load(toy / "labels" / f"{cid}.nii.gz")  # the user's post-processed segmentation: the label
        nib.save(nib.Nifti1Image(np.asarray(label.dataobj).astype(np.int16), label.affine), pred / f"{cid}_post.nii.gz")
    base = ["evaluate", "-l", str(toy / "labels"), "-p", str(pred), "--quiet"]
    assert _run([*base, "-o", str(tmp_path / "e1"), "--seg-suffix", "_post"], capsys)[0] == 0
    with open(tmp_path / "e1" / "metrics.csv", newline="") as f:
        assert [float(r["dice"]) for r in csv.DictReader(f)] == [1.0, 1.0]
    # a typo: scored the argmax of the probabilities (Dice 0.998, 0.978) with exit status 0
    status, err = _run([*base, "-o", str(tmp_path / "e2"), "--seg-suffix", "_postt"], capsys)
    assert status == 2 and len(err) == 1 and "--seg-suffix '_postt'" in err[0], err
    assert not (tmp_path / "e2" / "metrics.csv").exists()
    status, err = _run([*base, "-o", str(tmp_path / "e3"), "--probs-suffix", "_prob"], capsys)
    assert status == 2 and len(err) == 1 and "--probs-suffix '_prob'" in err[0], err


def test_an_uncertainty_folder_without_maps_is_refused(toy, tmp_path, capsys):
    empty = tmp_path / "maps"
    empty.mkdir()
    status, err = _run(["evaluate", "-l", str(toy / "labels"), "-p", str(toy / "predictions"), "-o",
                        str(tmp_path / "e"), "--uncertainty", str(empty), "--quiet"], capsys)
    assert status == 2 and len(err) == 1 and err[0].startswith("monai-unc evaluate: error: --uncertainty"), err
    assert not (tmp_path / "e" / "metrics.csv").exists()
    # the folder of the maps is read as before
    assert _run(["evaluate", "-l", str(toy / "labels"), "-p", str(toy / "predictions"), "-o", str(tmp_path / "e2"),
                 "--uncertainty", str(toy / "predictions"), "--quiet"], capsys)[0] == 0


@pytest.mark.parametrize("flags", [["--measure", "mutual_information"],
                                   ["--measures", "predictive_entropy", "--measure", "variance"]])
def test_a_measure_without_maps_is_refused_before_any_case(toy, tmp_path, capsys, flags):
    out = tmp_path / "e"
    status, err = _run(["evaluate", "-l", str(toy / "labels"), "-p", str(toy / "predictions"), "-o", str(out),
                        "--quiet", *flags], capsys)
    assert status == 2 and len(err) == 1 and f"--measure {flags[-1]!r}" in err[0], err  # was: exit 1, every case
    assert not (out / "failures.json").exists() and not (out / "state").exists()


@pytest.mark.parametrize("score, said", [("predictive_entropy_fgmean", "is not a case score"),
                                         ("mutual_information_fg_mean", "its measure 'mutual_information'")])
def test_a_score_typo_or_without_maps_is_refused_before_any_case(toy, tmp_path, capsys, score, said):
    out = tmp_path / "e"
    status, err = _run(["evaluate", "-l", str(toy / "labels"), "-p", str(toy / "predictions"), "-o", str(out),
                        "--quiet", "--score", score], capsys)
    assert status == 2 and len(err) == 1 and "--score" in err[0] and said in err[0], err
    assert not (out / "state").exists()  # was: refused after every case was evaluated


def test_the_former_score_names_are_still_accepted(toy, tmp_path, capsys):
    probs_only = tmp_path / "pred"  # its maps derived from the probabilities: predictive entropy, 1 - max p
    probs_only.mkdir()
    for f in (toy / "predictions").glob("*_probs.nii.gz"):
        shutil.copy(f, probs_only / f.name)
    for i, (pred, score) in enumerate(((toy / "predictions", "predictive_entropy_patch"),
                                       (probs_only, "max_softmax_fg_mean"))):
        status, err = _run(["evaluate", "-l", str(toy / "labels"), "-p", str(pred), "-o", str(tmp_path / f"e{i}"),
                            "--quiet", "--score", score, "--no-spatial"], capsys)
        assert status == 0 and any("deprecated" in line for line in err), err


def test_a_measure_derived_from_the_probabilities_is_kept(toy, tmp_path, capsys):
    pred = tmp_path / "pred"
    pred.mkdir()
    for f in (toy / "predictions").glob("*_probs.nii.gz"):
        shutil.copy(f, pred / f.name)
    assert _run(["evaluate", "-l", str(toy / "labels"), "-p", str(pred), "-o", str(tmp_path / "e"), "--quiet",
                 "--measure", "one_minus_max_prob", "--no-spatial"], capsys)[0] == 0


def test_several_checkpoints_without_ensemble_are_refused(toy, tmp_path, capsys):
    from monai.networks.nets import UNet

    spec = tmp_path / "net.json"
    spec.write_text(json.dumps(TOY_NET))
    files = []
    for i in (0, 1):
        torch.manual_seed(i)
        files.append(str(tmp_path / f"f{i}.pt"))
        torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), files[-1])
    out = tmp_path / "pred"
    status, err = _run(["infer", "-i", str(toy / "images"), "-o", str(out), "--network", str(spec), "--checkpoint",
                        *files, "--method", "softmax", "--quiet", "--device", "cpu"], capsys)
    assert status == 2 and len(err) == 1 and "--checkpoint: 2 files" in err[0] and "ensemble" in err[0], err
    assert not out.exists() or not any(out.iterdir())


def test_a_regions_file_that_is_not_utf8_names_the_option(tmp_path):
    from monai_unc.workflows.prepare import read_region_spec

    path = tmp_path / "regions.json"
    path.write_bytes('{"WT": [1, 2, 4], "région": [1, 4]}'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"^--regions: .*regions\.json is not UTF-8 text"):
        read_region_spec(str(path))
    path.write_text('{"WT": [1, 2, 4], "région": [1, 4]}', encoding="utf-8")
    assert read_region_spec(str(path)) == {"WT": (1, 2, 4), "région": (1, 4)}


def test_python_dash_m_runs_the_command_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(cli.__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    ok = subprocess.run([sys.executable, "-m", "monai_unc", "--help"], capture_output=True, text=True, env=env,
                        cwd=tmp_path)
    assert ok.returncode == 0 and ok.stdout.startswith("usage: monai-unc"), ok.stderr
    bad = subprocess.run([sys.executable, "-m", "monai_unc", "evaluate"], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 1 and lines[0].startswith("monai-unc evaluate: error:"), lines
