"""Hostile calibration cohorts for ``monai-unc calibrate`` (:mod:`monai_unc.workflows.calibrate`): cases on which the
network is never wrong (the temperature runs to 0) or always wrong (it runs to infinity) are refused in one line
(exit 2) before a checkpoint is written, on the command line and in :func:`check_fit_is_defined`."""

from __future__ import annotations

import json
import shutil

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io import list_files, list_image_cases
from monai_unc.workflows.calibrate import check_fit_is_defined, collect_logits
from monai_unc.workflows.models import load_network
from tests._cases import TOY_NET


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """Two 16^3 cases, a seeded toy UNet, and label folders equal to its own prediction and to the opposite."""
    from monai.networks.nets import UNet

    root = tmp_path_factory.mktemp("calib")
    paths = write_toy_cohort(root / "data", n_cases=2, shape=(16, 16, 16), predictions=False)
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), root / "net.pt")
    (root / "net.json").write_text(json.dumps(TOY_NET))
    model = load_network(network=str(root / "net.json"), checkpoints=[str(root / "net.pt")])
    cases = list_image_cases(paths["images"])
    labels = list_files(paths["labels"])
    logits, _ = collect_logits(cases, [labels[c.case_id] for c in cases], model, model.default_intensity,
                               progress=False)
    out = {"root": root, "images": paths["images"], "labels": paths["labels"]}
    for name, flip in (("right", False), ("wrong", True)):
        folder = root / f"labels_{name}"
        folder.mkdir()
        for case, z in zip(cases, logits):
            pred = z[0].argmax(0).numpy().astype(np.int16)
            affine = nib.load(labels[case.case_id]).affine
            nib.save(nib.Nifti1Image(1 - pred if flip else pred, affine), str(folder / f"{case.case_id}.nii.gz"))
        out[name] = folder
    out["logits"] = logits
    return out


def _argv(toy, labels, out):
    return ["calibrate", "-i", str(toy["images"]), "-l", str(labels), "-o", str(out), "--network",
            str(toy["root"] / "net.json"), "--checkpoint", str(toy["root"] / "net.pt"), "--max-steps", "200", "-q"]


@pytest.mark.parametrize("labels, message", [("right", "predicts every voxel of the 2 calibration case(s) right"),
                                             ("wrong", "predicts every voxel of the 2 calibration case(s) wrong")])
def test_calibrate_refuses_cases_without_errors_or_without_a_right_voxel(toy, tmp_path, capsys, labels, message):
    """Issue: on cases the network predicts perfectly, ``calibrate`` wrote a checkpoint with the "temperature"
    0.21 "after 192 steps", where the optimiser stopped on a loss still falling toward T = 0 (a network made far
    more confident than any data supports); on cases it always gets wrong, T = 9.2 at the step limit."""
    out = tmp_path / "cal.pt"
    rc = cli.main(_argv(toy, toy[labels], out))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("monai-unc calibrate: error: --labels: "), (rc, err)
    assert message in err[0]
    assert not out.exists() and not out.with_suffix(".json").exists()


def test_one_wrong_voxel_is_enough(toy, tmp_path, capsys):
    folder = tmp_path / "labels"
    shutil.copytree(toy["right"], folder)
    first = sorted(folder.iterdir())[0]
    img = nib.load(first)
    lab = np.asarray(img.dataobj).copy()
    lab[0, 0, 0] = 1 - lab[0, 0, 0]
    nib.save(nib.Nifti1Image(lab, img.affine), str(first))
    assert check_fit_is_defined(toy["logits"], [torch.from_numpy(np.asarray(nib.load(f).dataobj).astype(np.int64))[None]
                                                for f in sorted(folder.iterdir())]) == 1


def test_check_fit_is_defined_for_regions():
    z = torch.tensor([[[[2.0, -1.0]], [[-3.0, 4.0]]]])  # (1, R=2, 1, 2)
    right = (z > 0).to(torch.uint8)
    with pytest.raises(ValueError, match="every voxel .* right"):
        check_fit_is_defined([z], [right], "sigmoid")
    with pytest.raises(ValueError, match="every voxel .* wrong"):
        check_fit_is_defined([z], [1 - right], "sigmoid")
    one_off = right.clone()
    one_off[0, 1, 0, 0] = 1
    assert check_fit_is_defined([z], [one_off], "sigmoid") == 1


def test_an_interrupted_rerun_leaves_no_record_of_another_temperature(toy, tmp_path, monkeypatch):
    """Issue: a rerun into the same ``--output`` with other settings, interrupted after the checkpoint was written,
    left the new checkpoint beside the previous run's ``.json`` record (another temperature, mode and metrics)."""
    from monai_unc.workflows import calibrate as module

    out = tmp_path / "cal.pt"
    kw = dict(network=str(toy["root"] / "net.json"), checkpoint=str(toy["root"] / "net.pt"), progress=False)
    fits = iter([1.5, 0.75])

    def fit(*args, **kwargs):  # the fit itself is tested elsewhere: here only the order of the writes
        t = next(fits)
        return {"temperature": torch.tensor([t])}, {"temperature": [t]}

    monkeypatch.setattr(module, "calibrate_network", fit)
    module.run_calibrate(toy["images"], toy["labels"], out, **kw)
    assert json.loads(out.with_suffix(".json").read_text())["temperature"] == [1.5]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "atomic_write_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        module.run_calibrate(toy["images"], toy["labels"], out, **kw)
    assert torch.load(out)["temperature"].tolist() == [0.75]  # the new checkpoint ...
    assert not out.with_suffix(".json").exists()  # ... and no record of the old temperature beside it
