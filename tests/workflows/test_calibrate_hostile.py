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


@pytest.mark.parametrize("first, second", [("cal.pt", "cal.pth"), ("cal.pth", "cal.pt")])
def test_calibrate_refuses_an_output_whose_record_is_another_checkpoints(toy, tmp_path, capsys, first, second):
    """Issue: ``-o cal.pth`` beside a ``cal.pt`` of an earlier run wrote its record to ``cal.json``, the record of
    ``cal.pt``: ``cal.pt`` was left beside the record of another temperature. Refused in one line, before any work,
    and both earlier files are left as they were."""
    (tmp_path / first).write_bytes(b"earlier checkpoint")
    (tmp_path / "cal.json").write_text('{"temperature": [1.5]}')
    rc = cli.main(_argv(toy, toy["labels"], tmp_path / second))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and "is also the record of" in err[0] and first in err[0], (rc, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first, "cal.json"])
    assert (tmp_path / "cal.json").read_text() == '{"temperature": [1.5]}'


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


def test_a_run_finishing_while_another_holds_the_output_folder_writes_nothing(toy, tmp_path, monkeypatch):
    """Two runs into the same ``--output`` that finish together left one run's checkpoint beside the other's
    ``.json`` record (another temperature): the two writes are one step under the output folder's lock. A hold that
    lasts (here another process holding the folder) is waited for, then refused in one line, and the earlier run's
    checkpoint and record are both left as they were."""
    from monai_unc.workflows import calibrate as module
    from tests.workflows.test_concurrent_runs_hostile import _Holder

    out = tmp_path / "models" / "cal.pt"
    kw = dict(network=str(toy["root"] / "net.json"), checkpoint=str(toy["root"] / "net.pt"), progress=False)
    fits = iter([1.5, 0.75])

    def fit(*args, **kwargs):  # the fit itself is tested elsewhere: here only the writes
        t = next(fits)
        return {"temperature": torch.tensor([t])}, {"temperature": [t]}

    monkeypatch.setattr(module, "calibrate_network", fit)
    module.run_calibrate(toy["images"], toy["labels"], out, **kw)
    monkeypatch.setattr(module, "_WRITE_WAIT_S", 0.3)
    with _Holder(out.parent, "monai-unc calibrate"), \
            pytest.raises(ValueError, match=r"models is being written by another run \(pid \d+, monai-unc calibrate"):
        module.run_calibrate(toy["images"], toy["labels"], out, **kw)
    assert torch.load(out)["temperature"].tolist() == [1.5]  # the earlier run's checkpoint ...
    assert json.loads(out.with_suffix(".json").read_text())["temperature"] == [1.5]  # ... and its record


def test_check_fit_is_defined_per_region_names_the_region_without_errors():
    """Issue: a per-region (``--mode vector``) sigmoid fit of cases on which one region is never (or always) predicted
    wrong was accepted: that region's temperature ran to the clamp 0.01 (or to 29 at the step limit), while the
    pooled voxels held both errors and right voxels."""
    from monai_unc.temperature import TemperatureScaler

    torch.manual_seed(0)
    masks = (torch.rand(2, 3, 8, 8) > 0.5).float()
    z = 4.0 * (2 * masks - 1) + 2.0 * torch.randn(2, 3, 8, 8)
    masks[:, 1] = (z[:, 1] > 0).float()  # region 1: never wrong
    # the demonstration: region 1's own temperature runs to the lower clamp (where it stops moving)
    scaler = TemperatureScaler(mode="vector", activation="sigmoid", max_steps=300).fit(z, masks)
    assert float(scaler.temperature[1]) == pytest.approx(scaler.min_temperature)
    assert check_fit_is_defined([z], [masks], "sigmoid") > 0  # one shared temperature is defined
    with pytest.raises(ValueError, match=r"every voxel of region 'WT' of the 1 calibration case\(s\) right.*--mode "
                                         "scalar"):
        check_fit_is_defined([z], [masks], "sigmoid", mode="vector", region_names=["TC", "WT", "ET"])
    masks[:, 1] = (z[:, 1] <= 0).float()  # region 1: always wrong
    with pytest.raises(ValueError, match=r"every voxel of region '1' of .* wrong"):
        check_fit_is_defined([z], [masks], "sigmoid", mode="vector")
    masks[0, 1, 0, 0] = 1 - masks[0, 1, 0, 0]  # one right voxel does not outweigh 127 confident errors
    with pytest.raises(ValueError, match=r"region '1' of .* no better than uniform probabilities \(127 of 128"):
        check_fit_is_defined([z], [masks], "sigmoid", mode="vector")
    masks[:, 1] = (z[:, 1] > 0).float()
    masks[:, 1, :2] = 1 - masks[:, 1, :2]  # a quarter of the voxels wrong: the right ones outweigh them
    assert check_fit_is_defined([z], [masks], "sigmoid", mode="vector") == int(((z > 0) != (masks > 0)).sum())


def test_calibrate_vector_refuses_a_region_the_network_never_gets_wrong(tmp_path, capsys):
    """``monai-unc calibrate --activation sigmoid --mode vector`` on masks whose region 2 is the network's own
    prediction: exit 2 naming the region, no checkpoint; ``--mode scalar`` (one shared temperature) still fits."""
    from monai.networks.nets import UNet

    spec = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1, "out_channels": 3,
            "channels": [4, 8], "strides": [2], "num_res_units": 0}
    images, masks = tmp_path / "images", tmp_path / "masks"
    images.mkdir()
    masks.mkdir()
    torch.manual_seed(0)
    net = UNet(**{k: v for k, v in spec.items() if k != "_target_"}).eval()
    torch.save(net.state_dict(), tmp_path / "net.pt")
    (tmp_path / "net.json").write_text(json.dumps(spec))
    rng = np.random.default_rng(0)
    for i in range(2):
        img = rng.standard_normal((8, 8, 8)).astype(np.float32)
        nib.save(nib.Nifti1Image(img, np.eye(4)), str(images / f"case{i}.nii.gz"))
        with torch.no_grad():
            z = net(torch.from_numpy(img)[None, None])[0].numpy()
        reg = (rng.random(z.shape) > 0.5).astype(np.uint8)
        reg[2] = z[2] > 0
        nib.save(nib.Nifti1Image(np.moveaxis(reg, 0, -1), np.eye(4)), str(masks / f"case{i}.nii.gz"))
    out = tmp_path / "cal.pt"
    argv = ["calibrate", "-i", str(images), "-l", str(masks), "-o", str(out), "--network", str(tmp_path / "net.json"),
            "--checkpoint", str(tmp_path / "net.pt"), "--activation", "sigmoid", "--intensity", "none",
            "--max-steps", "50", "-q"]
    assert cli.main([*argv, "--mode", "vector"]) == 2
    err = capsys.readouterr().err
    assert "region '2' of the 2 calibration case(s) right" in err and not out.exists()
    assert cli.main([*argv, "--mode", "scalar"]) == 0 and out.exists()


@pytest.mark.parametrize("quiet", [False, True])
def test_calibrate_warns_when_the_fit_did_not_converge(toy, tmp_path, capsys, quiet):
    """Issue: ``--max-steps 3`` stopped the fit while the temperature was still moving (``"converged": false`` in
    the record), and the summary printed "temperature [...] after 3 steps" like any fitted one."""
    out = tmp_path / "cal.pt"
    argv = [a for a in _argv(toy, toy["labels"], out) if a != "-q"]
    argv[argv.index("--max-steps") + 1] = "3"
    # the ECE loss: RMSprop alone (NLL fits, scalar and, since review 65, per class, end at their minimum)
    argv += ["--mode", "vector", "--loss", "ece"]
    assert cli.main(argv + (["-q"] if quiet else [])) == 0
    assert json.loads(out.with_suffix(".json").read_text())["converged"] is False
    printed = capsys.readouterr()
    # the command's one line, not also the fit's own UserWarning (review 62), which the CLI prints on stderr
    assert "not the ECE minimum" not in printed.err + printed.out
    lines = (printed.err if quiet else printed.out).splitlines()
    warned = [ln for ln in lines if ln.startswith("warning: the temperature fit did not converge in 3 steps")]
    assert len(warned) == 1 and "--max-steps" in warned[0], lines
    # --quiet: nothing on stdout, the warning on stderr (it was printed on stdout)
    assert quiet == (printed.out == "" and len(lines) == 1)


def test_calibrate_summary_is_silent_about_a_converged_fit():
    from monai_unc.workflows.calibrate import calibrate_summary

    m = {"nll": 0.5, "ece": 0.1, "all_label_ece": 0.1}
    record = {"before": m, "after": m, "temperature": [1.2], "steps": 40, "folded_into_last_layer": True,
              "converged": True}
    from pathlib import Path

    assert not any("warning" in ln for ln in calibrate_summary(Path("c.pt"), record))
    assert calibrate_summary(Path("c.pt"), {**record, "converged": False})[0].startswith("warning: ")


def test_an_image_with_a_nan_is_refused_naming_the_case_and_file(toy, tmp_path, capsys):
    """Found by hostile testing: one NaN voxel spread through the network and the run stopped with "logits contains
    12288 non-finite value(s)", naming no case or file."""
    images = tmp_path / "images"
    shutil.copytree(toy["images"], images)
    second = sorted(images.iterdir())[1]
    img = nib.load(second)
    data = np.asarray(img.dataobj, dtype=np.float32).copy()
    data[3, 4, 5] = np.nan
    nib.save(nib.Nifti1Image(data, img.affine), str(second))
    out = tmp_path / "cal.pt"
    argv = _argv(toy, toy["labels"], out)
    argv[argv.index("-i") + 1] = str(images)
    rc = cli.main(argv)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    case = second.name.split(".")[0]
    assert rc == 2 and len(err) == 1, (rc, err)
    assert f"case {case!r}: image {second.name} holds 1 NaN or infinite value(s)" in err[0], err
    assert not out.exists()


def test_ignore_unclaimed_labels_without_regions_is_refused(toy, tmp_path, capsys):
    """Found by hostile testing: ``--ignore-unclaimed-labels`` without ``--regions`` was ignored without a word."""
    rc = cli.main([*_argv(toy, toy["labels"], tmp_path / "t.pt"), "--ignore-unclaimed-labels"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--ignore-unclaimed-labels needs --regions" in err[0], err
    assert not (tmp_path / "t.pt").exists()
