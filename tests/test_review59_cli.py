"""Hostile review 59 of the command line: the monitoring store of ``triage --monitor`` stays out of the input folders,
and ``demo`` does not tell the user to pass an option it does not have."""

from __future__ import annotations

import json

import pytest

from monai_unc import cli


def _infer_toy_network(tmp_path, images, out, spatial_dims: int = 3) -> int:
    """``monai-unc infer`` of ``images`` into ``out`` with the tests' toy UNet (``--network`` spec and checkpoint in
    ``tmp_path``), 2 samples, quiet; its exit status."""
    import torch
    from monai.networks.nets import UNet

    from tests._cases import TOY_NET

    net = {**TOY_NET, "spatial_dims": spatial_dims}
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in net.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    (tmp_path / "net.json").write_text(json.dumps(net))
    return cli.main(["infer", "-i", str(images), "-o", str(out), "--network", str(tmp_path / "net.json"),
                     "--checkpoint", str(tmp_path / "net.pt"), "--samples", "2", "--quiet"])


@pytest.mark.parametrize("inside", ["predictions", "images", "uncertainty"])
def test_triage_monitor_store_inside_an_input_folder_is_refused(tmp_path, capsys, inside):
    # found by hostile review 59: `triage -p PRED --monitor PRED/monitor.db` created the SQLite store (and its journal)
    # inside the predictions folder, an input of the command; so did a store in --images or --uncertainty
    folders = {name: tmp_path / name for name in ("predictions", "images", "uncertainty")}
    for folder in folders.values():
        folder.mkdir()
    db = folders[inside] / "monitor.db"
    (tmp_path / "rule.json").write_text("{}")  # never read: the store is refused before any work
    argv = ["triage", "-p", str(folders["predictions"]), "--rule", str(tmp_path / "rule.json"), "-o",
            str(tmp_path / "out"), "--images", str(folders["images"]), "--uncertainty", str(folders["uncertainty"]),
            "--monitor", str(db), "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--monitor" in err and "lies inside the input folder" in err, err
    assert not db.exists() and not (tmp_path / "out").exists()
    assert all(not any(f.iterdir()) for f in folders.values())


def test_triage_monitor_store_that_is_the_rule_file_is_refused(tmp_path, capsys):
    (tmp_path / "predictions").mkdir()
    rule = tmp_path / "rule.json"
    rule.write_text(json.dumps({"format": "monai-unc referral rule"}))
    before = rule.read_bytes()
    argv = ["triage", "-p", str(tmp_path / "predictions"), "--rule", str(rule), "-o", str(tmp_path / "out"),
            "--monitor", str(rule), "--quiet"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--monitor" in err and "is the input file" in err, err
    assert rule.read_bytes() == before


def test_triage_monitor_store_outside_the_inputs_is_still_taken(tmp_path):
    # the check refuses inputs only: a store beside them, or in the triage's own -o, passes
    from monai_unc.workflows.monitor import check_store_outside_inputs

    pred = tmp_path / "predictions"
    pred.mkdir()
    check_store_outside_inputs(tmp_path / "monitor.db", pred, None)
    check_store_outside_inputs(tmp_path / "out" / "monitor.db", pred)
    check_store_outside_inputs("postgresql://user@host/db", pred)


def test_demo_refusal_of_other_settings_names_no_overwrite_option(tmp_path, monkeypatch, capsys):
    # found by hostile review 59: `demo --samples 2` into a demo folder predicted with 1 sample said "... or pass
    # --overwrite", an option demo does not have (`monai-unc demo --overwrite`: "unrecognized arguments")
    from monai_unc.workflows import demo

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    # no cohort and no inference: the settings check before the predictions is what is tested
    monkeypatch.setattr(demo, "make_demo_cohort", lambda folder, shifts: {"images": folder})
    monkeypatch.setattr(demo, "list_image_cases", lambda *args, **kwargs: [])
    monkeypatch.setattr(demo, "predict_cases", stop)
    out = tmp_path / "demo"
    with pytest.raises(Stop):
        demo.run_demo(out, samples=1, quiet=True, quick=True)
    pred = out / "predictions"
    settings = json.loads((pred / "infer.json").read_text())["settings"]
    (pred / "c1.json").write_text(json.dumps({"case": "c1", "fingerprint": settings}))  # a case made with 1 sample
    assert cli.main(["demo", "--quick", "--samples", "2", "--output", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different settings (samples)" in err, err
    assert "--overwrite" not in err and "choose another --output" in err, err
    with pytest.raises(SystemExit):  # the option the message must not name
        cli.main(["demo", "--overwrite"])


def _nan_sform_image(path, data):
    """A NIfTI file whose sform (code 1, no qform) holds a NaN translation, as a corrupt header does."""
    import nibabel as nib
    import numpy as np

    img = nib.Nifti1Image(data, None)  # no affine: the header's sform is saved as set
    img.header["sform_code"], img.header["qform_code"] = 1, 0
    img.header["srow_x"] = [1, 0, 0, float("nan")]
    img.header["srow_y"], img.header["srow_z"] = [0, 1, 0, 0], [0, 0, 1, 0]
    nib.save(img, path)
    assert np.isnan(nib.load(path).affine[0, 3])


def test_infer_fails_a_case_whose_affine_is_not_finite(tmp_path, capsys):
    # found by hostile review 59: an image whose sform held a NaN was predicted (exit 0) and its maps written with the
    # NaN affine; evaluate then refused them against a label of the same header as "different affines (voxel centres
    # up to nan mm apart)". Such a case now fails at reading, with the reason (exit 1, failures.json)
    import numpy as np

    images = tmp_path / "images"
    images.mkdir()
    data = np.random.default_rng(0).random((16, 16, 16)).astype(np.float32)
    _nan_sform_image(images / "bad.nii.gz", data)
    import nibabel as nib

    nib.save(nib.Nifti1Image(data, np.eye(4)), images / "good.nii.gz")
    out = tmp_path / "pred"
    rc = _infer_toy_network(tmp_path, images, out)
    err = capsys.readouterr().err
    assert rc == 1, err
    failures = json.loads((out / "failures.json").read_text())["failures"]
    assert [f["case"] for f in failures] == ["bad"] and "NaN or inf" in failures[0]["error"], failures
    assert not list(out.glob("bad_*")) and (out / "good.json").is_file()


def test_evaluate_names_a_non_finite_affine_not_a_grid_mismatch(tmp_path):
    import numpy as np

    from monai_unc.io import read_volume
    from monai_unc.io.cases import CaseError

    path = tmp_path / "label.nii.gz"
    _nan_sform_image(path, np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(CaseError, match="NaN or inf"):
        read_volume(path)


@pytest.mark.parametrize("shape", [(16, 16, 0), (0, 4, 4)])
def test_an_empty_volume_is_named_as_such(tmp_path, shape):
    # found by hostile review 59: MONAI read a (16, 16, 0) NIfTI as shape (0,): infer failed the case as an image of
    # "spatial shape () (0D)" for a 3D network, evaluate a label of "0 channels"
    import nibabel as nib
    import numpy as np

    from monai_unc.io import read_volume
    from monai_unc.io.cases import CaseError

    path = tmp_path / "empty.nii.gz"
    nib.save(nib.Nifti1Image(np.zeros(shape, np.float32), np.eye(4)), path)
    with pytest.raises(CaseError, match="the volume is empty"):
        read_volume(path)


def test_evaluate_output_inside_the_lesion_samples_folder_is_refused(tmp_path, capsys):
    # found by hostile review 59: `evaluate --lesions --lesion-samples S -o S/eval` wrote metrics.csv, summary.json and
    # state/ into the folder of the per-sample masks, an input of the command
    for name in ("labels", "pred", "samples"):
        (tmp_path / name).mkdir()
    out = tmp_path / "samples" / "eval"
    rc = cli.main(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(tmp_path / "pred"), "-o", str(out),
                   "--lesions", "--lesion-samples", str(tmp_path / "samples"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert "--output folder" in err and "lies inside the input folder" in err, err
    assert not out.exists()


def test_infer_refuses_a_2d_network_before_any_case(tmp_path, capsys):
    # found by hostile review 59: a 2D network (with 2D images) was run on every case, and every case then failed when
    # its maps were written ("only 3D volumes are written as NIfTI"): exit 1 after the whole cohort's inference
    import nibabel as nib
    import numpy as np

    images = tmp_path / "images"
    images.mkdir()
    nib.save(nib.Nifti1Image(np.random.default_rng(0).random((16, 16)).astype(np.float32), np.eye(4)),
             images / "c0.nii.gz")
    out = tmp_path / "pred"
    rc = _infer_toy_network(tmp_path, images, out, spatial_dims=2)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "takes 2D images" in err and "3D volumes only" in err, err
    assert not (out / "failures.json").exists() and not list(out.glob("c0*"))


def test_infer_fails_a_case_of_a_singular_affine_before_predicting_it(tmp_path, capsys):
    # found by hostile review 59: an image whose sform had a zero 3 x 3 part was predicted, and its case then failed
    # when its maps were written, with nibabel's "HeaderDataError: Could not decompose affine:" as the reason
    import nibabel as nib
    import numpy as np

    images = tmp_path / "images"
    images.mkdir()
    img = nib.Nifti1Image(np.random.default_rng(0).random((16, 16, 16)).astype(np.float32), None)
    img.header["sform_code"], img.header["qform_code"] = 1, 0
    img.header["srow_x"], img.header["srow_y"], img.header["srow_z"] = [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 3]
    nib.save(img, images / "flat.nii.gz")
    out = tmp_path / "pred"
    rc = _infer_toy_network(tmp_path, images, out)
    capsys.readouterr()
    assert rc == 1
    failures = json.loads((out / "failures.json").read_text())["failures"]
    assert [f["case"] for f in failures] == ["flat"] and "affine of flat.nii.gz is singular" in failures[0]["error"]


def test_infer_names_a_channel_count_the_network_does_not_take(tmp_path, capsys):
    # found by hostile review 59: a 4D image (two channels) for a one-channel network failed with torch's error and the
    # hint "a U-Net needs every size divisible by its downsampling factor: pass --roi", which is not the cause
    import nibabel as nib
    import numpy as np

    images = tmp_path / "images"
    images.mkdir()
    nib.save(nib.Nifti1Image(np.random.default_rng(0).random((16, 16, 16, 2)).astype(np.float32), np.eye(4)),
             images / "two.nii.gz")
    out = tmp_path / "pred"
    rc = _infer_toy_network(tmp_path, images, out)
    capsys.readouterr()
    assert rc == 1
    error = json.loads((out / "failures.json").read_text())["failures"][0]["error"]
    assert "has 2 channel(s)" in error and "takes 1 input channel(s)" in error and "--roi" not in error, error


@pytest.mark.parametrize("command", ["infer", "calibrate"])
@pytest.mark.parametrize("spec", ["", " "])
def test_an_empty_network_spec_is_refused_while_parsing(tmp_path, capsys, command, spec):
    # found by hostile review 59: `--network ''` was read as the current folder: "network spec . is a folder, not a
    # file", where docs/cli.md promises that an empty path is refused while parsing, never taken as the current folder
    argv = [command, "-i", str(tmp_path), "-o", str(tmp_path / ("out.pt" if command == "calibrate" else "out")),
            "--network", spec, "--checkpoint", str(tmp_path / "w.pt")]
    if command == "calibrate":
        argv += ["-l", str(tmp_path)]
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert "argument --network: expected inline JSON or a .json/.yaml file, got an empty one" in err, err


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    """A small evaluation folder (3 toy cases, their reference predictions) for `monai-unc report`."""
    from monai_unc.data.cohorts import write_toy_cohort

    root = tmp_path_factory.mktemp("review59_eval")
    paths = write_toy_cohort(root / "data", n_cases=3, shape=(12, 12, 12))
    assert cli.main(["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "-o",
                     str(root / "eval"), "--no-spatial", "--quiet"]) == 0
    return root / "eval"


@pytest.mark.parametrize("block, value", [("calibration", None), ("calibration", {}), ("failure_detection", None),
                                          ("failure_detection", {}), ("referral", None), ("referral", {}),
                                          ("dice", {})])
def test_report_refuses_an_edited_summary_block_in_one_line(evaluation, tmp_path, capsys, block, value):
    # found by hostile review 59: summary.json (a file a user may edit) with one of the blocks the report reads set to
    # null or {} ended `monai-unc report` in a TypeError / KeyError traceback
    import shutil

    folder = tmp_path / "eval"
    shutil.copytree(evaluation, folder, ignore=shutil.ignore_patterns("report"))
    summary = json.loads((folder / "summary.json").read_text())
    summary[block] = value
    (folder / "summary.json").write_text(json.dumps(summary))
    capsys.readouterr()
    assert cli.main(["report", "-e", str(folder), "-o", str(tmp_path / "report"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"'{block}" in err, err


@pytest.mark.parametrize("extra, flag", [
    (["--allow-unsigned"], "--allow-unsigned"),
    (["--trusted-keys", "k.pub"], "--trusted-keys"),
    (["--no-bundle-preprocessing"], "--no-bundle-preprocessing"),
])
def test_infer_refuses_an_option_that_acts_only_with_one_not_given(tmp_path, capsys, extra, flag):
    """``--allow-unsigned`` / ``--trusted-keys`` without ``--settings-from`` and ``--no-bundle-preprocessing`` without
    ``--bundle`` were taken without a word (a user who believed a signature was checked, or a preprocessing left
    out, was not told); refused in one line naming the option, before any work."""
    import nibabel as nib
    import numpy as np

    images = tmp_path / "in"
    images.mkdir()
    nib.save(nib.Nifti1Image(np.zeros((16, 16, 16), np.float32), np.eye(4)), images / "a.nii.gz")
    rc = cli.main(["infer", "-i", str(images), "-o", str(tmp_path / "out"), "--model", "example", "--device", "cpu",
                   "-q", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"monai-unc infer: error: {flag} is about"), err
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_that_is_a_device_is_not_called_missing(tmp_path, capsys):
    """``--checkpoint /dev/null`` said "checkpoint file not found: /dev/null"; it exists, and is no regular file."""
    import nibabel as nib
    import numpy as np

    images = tmp_path / "in"
    images.mkdir()
    nib.save(nib.Nifti1Image(np.zeros((16, 16, 16), np.float32), np.eye(4)), images / "a.nii.gz")
    spec = '{"_target_": "monai.networks.nets.BasicUNet", "spatial_dims": 3, "in_channels": 1, "out_channels": 2}'
    rc = cli.main(["infer", "-i", str(images), "-o", str(tmp_path / "out"), "--network", spec, "--checkpoint",
                   "/dev/null", "--device", "cpu", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "/dev/null is not a regular file" in err[0], err
