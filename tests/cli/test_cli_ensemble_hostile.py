"""Hostile ensembles at the command line: ``monai-unc infer --method ensemble`` with a member given twice or a member
whose weights diverged."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from tests._cases import TOY_NET


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from monai.networks.nets import UNet

    root = tmp_path_factory.mktemp("ensemble_cli")
    paths = write_toy_cohort(root / "data", n_cases=1, shape=(16, 16, 16))
    kw = {k: v for k, v in TOY_NET.items() if k != "_target_"}
    for seed in (0, 1):
        torch.manual_seed(seed)
        (root / f"fold_{seed}").mkdir()
        torch.save(UNet(**kw).state_dict(), root / f"fold_{seed}" / "model.pt")
    shutil.copy(root / "fold_0" / "model.pt", root / "copy_of_fold_0.pt")
    spec = root / "net.json"
    spec.write_text(json.dumps(TOY_NET))
    return {"images": paths["images"], "root": root, "spec": spec}


def _infer(s, out, *members):
    argv = ["infer", "-i", str(s["images"]), "-o", str(out), "--network", str(s["spec"]), "--method", "ensemble",
            "--quiet", "--checkpoint", *map(str, members)]
    try:
        return cli.main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("second, message", [
    ("fold_0/model.pt", r"fold_0/model\.pt is given twice"),
    ("copy_of_fold_0.pt", r"fold_0/model\.pt and \S*copy_of_fold_0\.pt hold the same weights \(sha256"),
], ids=["same-file", "same-bytes"])
def test_a_member_given_twice_is_refused(setup, second, message, tmp_path, capsys):
    """Found by hostile testing: ``--checkpoint f0.pt f0.pt`` (a glob or copy-paste slip), or a copy of ``f0.pt``, ran
    as a two-member ensemble whose mutual information was 0 at every voxel, recorded as 2 samples: one line, exit 2."""
    root = setup["root"]
    assert _infer(setup, tmp_path / "o", root / "fold_0" / "model.pt", root / second) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err
    assert "mutual information with itself is 0" in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("*.nii.gz"))


def test_members_sharing_a_file_name_are_two_members(setup, tmp_path):
    """Folds saved under one name in their own folders are distinct members, each recorded by its path."""
    root = setup["root"]
    out = tmp_path / "o"
    assert _infer(setup, out, root / "fold_0" / "model.pt", root / "fold_1" / "model.pt") == 0
    record = json.loads((out / "toy000.json").read_text())
    assert record["num_samples"] == 2
    settings = json.loads((out / "infer.json").read_text())["settings"]
    assert [w["file"] for w in settings["weights"][:2]] == [str((root / f"fold_{i}" / "model.pt").resolve())
                                                            for i in (0, 1)]
    assert settings["weights"][0]["sha256"] != settings["weights"][1]["sha256"]


def test_a_member_with_nan_weights_is_refused_before_any_case(setup, tmp_path, capsys):
    """Found by hostile testing: one member whose training diverged (a NaN weight) failed every case (exit 1) with
    "network output contains non-finite values (NaN or inf) for this input", blaming each input and naming no member.
    ``load_network`` checks every member before any work (its docstring): one line naming the file, exit 2."""
    from monai.networks.nets import UNet

    root = setup["root"]
    state = UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict()
    key = next(k for k in state if k.endswith("weight"))
    state[key].view(-1)[0] = float("nan")
    torch.save(state, tmp_path / "diverged.pt")
    assert _infer(setup, tmp_path / "o", root / "fold_0" / "model.pt", tmp_path / "diverged.pt") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert re.search(rf"checkpoint \S*diverged\.pt holds non-finite weights \(NaN or inf\) in 1 tensor\(s\) \({key}\)",
                     err), err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").glob("*.nii.gz"))
