"""Review 64: ``triage`` and ``conformal`` read new predictions in the layout the rule records.

A rule certified with ``evaluate --layout nnunet`` records the fingerprint of ``nnunet-predict`` predictions; applied
without ``--layout`` to new nnU-Net predictions, ``triage`` and ``conformal`` read them as ``monai-unc infer``
outputs and stopped on "no segmentation (<case>_seg.nii.gz) found". They now take the layout from the rule (one info
line), and refuse an explicit ``--layout`` that contradicts it in one line when the folder is not of that layout.
"""

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
from monai_unc.workflows.apply import layout_from_rule

#: what ``nnunet-predict`` records in uncertainty_config.json (the fields the fingerprint reads)
_CONFIG = {"uncertainty_sources": ["mirroring"], "num_samples": 8, "dropout_p": None, "rate_in": {},
           "posthoc_dropout_after": [], "measures": ["predictive_entropy"], "segmentation_from": "logits",
           "folds": [0], "mirror_axes": [0, 1, 2], "trainer_name": "nnUNetTrainer", "tile_step_size": 0.5}


def _as_nnunet(src: Path, dst: Path) -> Path:
    """The toy cohort's stand-in predictions as nnunet-predict writes them: <case>.nii.gz, <case>.npz (axes reversed),
    uncertainty/<case>_<measure>.nii.gz and uncertainty/<case>.json, uncertainty_config.json."""
    (dst / "uncertainty").mkdir(parents=True)
    (dst / "uncertainty_config.json").write_text(json.dumps(_CONFIG))
    for p in sorted(src.glob("*_seg.nii.gz")):
        cid = p.name[: -len("_seg.nii.gz")]
        shutil.copy(p, dst / f"{cid}.nii.gz")
        probs = np.asarray(nib.load(src / f"{cid}_probs.nii.gz").dataobj)  # (X, Y, Z, C)
        np.savez(dst / f"{cid}.npz", probabilities=np.moveaxis(probs, -1, 0).transpose(0, 3, 2, 1))
        shutil.copy(src / f"{cid}_predictive_entropy.nii.gz", dst / "uncertainty")
        (dst / "uncertainty" / f"{cid}.json").write_text(json.dumps({"case": cid, "num_samples": 8,
                                                                     "mi_meaning": "epistemic"}))
    return dst


@pytest.fixture(scope="module")
def certified(tmp_path_factory) -> dict[str, Path]:
    """A referral rule and a conformal rule certified with ``evaluate --layout nnunet``, and new nnU-Net cases."""
    root = tmp_path_factory.mktemp("layout")
    a = write_toy_cohort(root / "A", n_cases=8, shape=(12, 12, 12), seed=1)
    b = write_toy_cohort(root / "B", n_cases=3, shape=(12, 12, 12), seed=2)
    cal, new = _as_nnunet(a["predictions"], root / "nn_cal"), _as_nnunet(b["predictions"], root / "nn_new")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(a["labels"]), "-p", str(cal), "--layout", "nnunet", "-o",
                         str(root / "ev"), "--no-spatial", "--target-risk", "0.5", "--delta", "0.3", "-q",
                         "--conformal", "outer:fnr=0.3"]) == 0
    rule = json.loads((root / "ev" / "referral_rule.json").read_text())
    assert rule["fingerprint"]["producer"] == "nnunet-predict"
    return {"root": root, "new": new, "monai_new": b["predictions"], "rule": root / "ev" / "referral_rule.json",
            "conformal": root / "ev" / "conformal_rule.json"}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("command, rule, table", [("triage", "rule", "triage.csv"),
                                                   ("conformal", "conformal", "conformal.csv")])
def test_the_rule_layout_is_used_without_the_option(certified, tmp_path, capsys, command, rule, table):
    base = [command, "-p", str(certified["new"]), "--rule", str(certified[rule]), "-q"]
    if command == "triage":  # no case figure on the page (~0.5 s each): the layout read and the tables are checked
        base += ["--cases", "0"]
    capsys.readouterr()
    assert cli.main([*base, "-o", str(tmp_path / "derived")]) == 0  # before review 64: exit 2, no segmentation
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [f"monai-unc {command}: --layout nnunet: the layout of the nnunet-predict predictions the rule was "
                   "certified on (give --layout to choose another)"], err
    assert cli.main([*base, "-o", str(tmp_path / "explicit"), "--layout", "nnunet"]) == 0
    assert not capsys.readouterr().err.strip()  # the option given: nothing to say
    derived, explicit = _rows(tmp_path / "derived" / table), _rows(tmp_path / "explicit" / table)
    assert len(derived) == 3 and derived == explicit


@pytest.mark.parametrize("command, rule", [("triage", "rule"), ("conformal", "conformal")])
def test_a_contradicting_layout_is_refused_in_one_line(certified, tmp_path, capsys, command, rule):
    capsys.readouterr()
    code = cli.main([command, "-p", str(certified["new"]), "--rule", str(certified[rule]), "-o", str(tmp_path / "o"),
                     "--layout", "monai-unc", "-q"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--layout monai-unc contradicts the rule, certified on nnunet-predict predictions (--layout nnunet)" in err
    assert "leave --layout out" in err and not (tmp_path / "o").exists()


def test_a_folder_of_the_other_layout_needs_the_option(certified, tmp_path, capsys):
    """Without --layout, a folder holding an infer run's record (and none of nnunet-predict) is not read as nnU-Net's
    (its <case>_seg files would be misread): one line that names the option to give."""
    pred = tmp_path / "pred"
    shutil.copytree(certified["monai_new"], pred)
    (pred / "infer.json").write_text(json.dumps({"settings": {"model": "network: UNet", "method": "mcdropout"}}))
    capsys.readouterr()
    code = cli.main(["triage", "-p", str(pred), "--rule", str(certified["rule"]), "-o", str(tmp_path / "o"), "-q"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "holds the records of a monai-unc infer run (infer.json): give --layout monai-unc" in err, err
    # given, the option is taken: the folder is read as an infer run's (its checks then refuse this unfinished one)
    code = cli.main(["triage", "-p", str(pred), "--rule", str(certified["rule"]), "-o", str(tmp_path / "o"), "-q",
                     "--layout", "monai-unc"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "not one finished 'monai-unc infer' run" in err and "--layout" not in err, err


def test_layout_from_rule_without_a_recorded_producer(tmp_path):
    (tmp_path / "rule.json").write_text(json.dumps({"fingerprint": {"producer": "unknown"}}))
    assert layout_from_rule(None, tmp_path / "rule.json", tmp_path) == ("monai-unc", None)
    assert layout_from_rule("nnunet", tmp_path / "rule.json", tmp_path) == ("nnunet", None)
    assert layout_from_rule(None, tmp_path / "missing.json", tmp_path) == ("monai-unc", None)
    (tmp_path / "rule.json").write_text(json.dumps({"fingerprint": {"producer": "monai-unc infer"}}))
    assert layout_from_rule(None, tmp_path / "rule.json", tmp_path) == ("monai-unc", None)  # the default: no line
    with pytest.raises(ValueError, match="--layout"):
        layout_from_rule("other", tmp_path / "rule.json", tmp_path)


def test_a_folder_without_run_records_named_as_the_other_layout_is_read_so(certified, tmp_path, capsys):
    """Found by the review of review 64: without --layout, a folder of ``<case>_seg`` files holding no run record
    (predictions of another tool named as ``infer`` names them, copied without infer.json) was read in the rule's
    nnunet layout and refused as "no uncertainty map ... in <folder>/uncertainty", naming no option, where before
    review 64 it was read as the default monai-unc layout (``--allow-mismatch`` then applied the rule). The file names
    decide when no run record does, as with an explicit --layout."""
    pred = certified["monai_new"]
    assert not (pred / "infer.json").exists() and not (pred / "uncertainty_config.json").exists()
    assert layout_from_rule(None, certified["rule"], pred) == ("monai-unc", None)
    base = ["triage", "-p", str(pred), "--rule", str(certified["rule"]), "-q", "--allow-mismatch"]
    capsys.readouterr()
    assert cli.main([*base, "-o", str(tmp_path / "derived")]) == 0, capsys.readouterr().err
    assert not capsys.readouterr().err.strip()  # the default layout: nothing to say
    rows = _rows(tmp_path / "derived" / "triage.csv")
    assert sorted(next(iter(r.values())) for r in rows) == ["toy000", "toy001", "toy002"], rows[:1]


@pytest.mark.parametrize("conformal", [False, True])
def test_an_edited_rule_is_refused_as_the_rule_beside_a_conformal_rule(certified, tmp_path, capsys, conformal):
    """A referral rule edited after it was signed, on nnU-Net predictions: ``triage`` refuses it naming ``--rule``,
    also with ``--conformal-rule`` (whose check runs first in the layout taken from the refused file's text; taken
    from no file, the layout fell back to monai-unc's and the conformal check refused the predictions instead)."""
    doc = json.loads(certified["rule"].read_text())
    doc["created"] = "2000-01-01T00:00:00+00:00"
    edited = tmp_path / "edited_rule.json"
    edited.write_text(json.dumps(doc))
    argv = ["triage", "-p", str(certified["new"]), "--rule", str(edited), "-o", str(tmp_path / "o"), "--cases", "0",
            "-q"] + (["--conformal-rule", str(certified["conformal"])] if conformal else [])
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "error: --rule: referral rule" in err and "does not match its digest" in err, err
    assert not (tmp_path / "o").exists()
