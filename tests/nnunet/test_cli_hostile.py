"""Hostile review of ``monai-unc nnunet-predict`` / ``nnunet-calibrate`` arguments: folds and the sliding-window step
are refused in one line naming the flag, before a model is loaded."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("nnunetv2")

from monai_unc.nnunet.cli import add_parser, run  # noqa: E402


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="monai-unc")
    add_parser(parser.add_subparsers())
    return run(parser.parse_args(argv))


@pytest.fixture
def folders(tmp_path):
    """An (empty) model folder and input folder: the flags below are refused before either is read."""
    (tmp_path / "model").mkdir()
    (tmp_path / "in").mkdir()
    return tmp_path


@pytest.mark.parametrize("folds, match", [
    (["x"], "-f takes fold numbers"),
    (["0", "one"], "-f takes fold numbers"),
    (["-1"], "-f takes fold numbers"),
    (["0", "0"], "-f names a fold more than once"),
    (["1", "all", "1"], "-f names a fold more than once"),
])
@pytest.mark.parametrize("command", ["nnunet-predict", "nnunet-calibrate"])
def test_bad_folds_are_one_line_naming_f(command, folds, match, folders, capsys):
    """``-f x`` printed ``invalid literal for int() with base 10: 'x'`` (no flag named); ``-f 0 0`` loaded fold 0
    twice and counted it as two ensemble members."""
    argv = [command, "-o", str(folders / "out"), "-m", str(folders / "model"), "-device", "cpu", "-f", *folds]
    if command == "nnunet-predict":
        argv += ["-i", str(folders / "in")]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "invalid literal" not in err and "\n" not in err


@pytest.mark.parametrize("step", ["0", "-0.5", "1.5", "nan"])
def test_step_size_outside_0_1_is_refused_before_the_model_loads(step, folders, capsys):
    """Stock asserts ``0 < step <= 1`` when the first case reaches the sliding window: an AssertionError traceback
    after loading the model and preprocessing."""
    argv = ["nnunet-predict", "-i", str(folders / "in"), "-o", str(folders / "out"), "-m", str(folders / "model"),
            "-device", "cpu", "-f", "0", "-step_size", step]
    assert _run(argv) == 2
    assert "-step_size must be in (0, 1]" in capsys.readouterr().err
    assert not (folders / "out").exists()


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_seed_outside_64_bits_is_one_line_before_the_model_loads(seed, folders, capsys):
    """Hostile review (determinism): ``--seed -1`` drew the masks of seed ``2**64 - 1`` while the records said -1;
    ``--seed 18446744073709551616`` failed at every case with torch's ``Overflow when unpacking long long``."""
    argv = ["nnunet-predict", "-i", str(folders / "in"), "-o", str(folders / "out"), "-m", str(folders / "model"),
            "-device", "cpu", "-f", "0", "--sources", "dropout", "--dropout_p", "0.1", "--seed", seed]
    with pytest.raises(SystemExit) as e:  # refused by the parser, naming the flag (the predictor's check said "seed")
        _run(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "argument --seed: expected a non-negative integer" in err
    assert not (folders / "out").exists()


def test_a_case_missing_a_channel_is_one_line_and_nothing_is_written(tmp_path, capsys):
    """nnunet-predict predicted the cases before it, then printed a 124-line traceback ending in the first
    convolution's channel error (exit 1), naming neither the case nor the file."""
    from tests.nnunet.test_nnunet import write_inputs
    from tests.nnunet.test_predictor_hostile import TWO_CHANNELS, write_model_folder

    model = write_model_folder(tmp_path / "model", folds=(0,), in_channels=2, dataset_json=TWO_CHANNELS)
    inp = tmp_path / "in"
    write_inputs(inp, shapes=((16, 16, 16), (16, 16, 16)))
    (inp / "case0_0000.nii.gz").rename(inp / "x.y_0000.nii.gz")
    (inp / "case1_0000.nii.gz").rename(inp / "x.y_0001.nii.gz")
    write_inputs(inp, shapes=((16, 16, 16),))  # case0 with its _0000 file only
    argv = ["nnunet-predict", "-i", str(inp), "-o", str(tmp_path / "out"), "-m", str(model), "-f", "0",
            "-device", "cpu", "-npp", "0", "-nps", "0", "--disable_progress_bar"]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("monai-unc nnunet-predict: error: case case0: missing case0_0001.nii.gz (the model takes 2 "
                   "channels: T1, T2)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("shape, zoom, named", [
    ((17, 16, 16), 1.0, "has size (17, 16, 16) but b_0000.nii.gz has (16, 16, 16)"),
    ((16, 16, 16), 1.5, "has spacing (1.5, 1.5, 1.5) but b_0000.nii.gz has (1.0, 1.0, 1.0)"),
])
def test_channels_of_other_grids_are_one_line_before_any_case(shape, zoom, named, tmp_path, capsys):
    """Found by hostile testing: a case whose channel files differ in size or spacing failed in nnU-Net's SimpleITKIO
    with a bare ``RuntimeError()`` traceback (the shapes on stdout), after the cases before it were written."""
    import nibabel as nib
    import numpy as np

    from tests.nnunet.test_predictor_hostile import TWO_CHANNELS, write_model_folder

    model = write_model_folder(tmp_path / "model", folds=(0,), in_channels=2, dataset_json=TWO_CHANNELS)
    inp = tmp_path / "in"
    inp.mkdir()
    image = np.random.default_rng(0).normal(size=(16, 16, 16)).astype(np.float32)
    for name in ("a_0000", "a_0001", "b_0000"):
        nib.save(nib.Nifti1Image(image, np.eye(4)), str(inp / f"{name}.nii.gz"))
    other = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    nib.save(nib.Nifti1Image(other, np.diag([zoom, zoom, zoom, 1.0])), str(inp / "b_0001.nii.gz"))
    argv = ["nnunet-predict", "-i", str(inp), "-o", str(tmp_path / "out"), "-m", str(model), "-f", "0",
            "-device", "cpu", "-npp", "0", "-nps", "0", "--disable_progress_bar"]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("monai-unc nnunet-predict: error: case b: b_0001.nii.gz ") and named in err, err
    assert "\n" not in err
    assert not (tmp_path / "out").exists()


def _truncate(path):
    path.write_bytes(path.read_bytes()[:2000])


@pytest.mark.parametrize("name, damage, match", [
    ("plans.json", lambda p: p.write_text("{not json"), "plans.json: not valid JSON"),
    ("plans.json", lambda p: p.write_text('{"configurations": {}}'), "plans.json: no configuration 'cfg'"),
    ("dataset.json", lambda p: p.write_text("[1,2"), "dataset.json: not valid JSON"),
    ("dataset.json", lambda p: p.write_text('{"channel_names": {"0": "MRI"}, "file_ending": ".nii.gz"}'),
     "dataset.json: no 'labels'"),
    ("fold_0/checkpoint_final.pth", _truncate, "checkpoint_final.pth: not a readable checkpoint"),
    ("fold_0/checkpoint_final.pth", lambda p: p.write_bytes(b"garbage"),
     "checkpoint_final.pth: not a readable checkpoint"),
])
def test_damaged_model_files_are_one_line_naming_the_file(name, damage, match, tmp_path, capsys):
    """plans.json without the checkpoint's configuration, dataset.json without labels and a truncated checkpoint
    printed nnU-Net's traceback (exit 1); invalid JSON printed the decoder's message without the file's name."""
    from tests.nnunet.test_nnunet import write_inputs
    from tests.nnunet.test_predictor_hostile import write_model_folder

    model = write_model_folder(tmp_path / "model", folds=(0,))
    damage(model / name)
    write_inputs(tmp_path / "in", shapes=((16, 16, 16),))
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-m", str(model), "-f", "0",
            "-device", "cpu", "-npp", "0", "-nps", "0", "--disable_progress_bar"]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"monai-unc nnunet-predict: error: {model / name.split('/')[0]}")
    assert match in err and "\n" not in err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written, -o not created


def test_dropout_without_dropout_layers_names_the_cli_flag(tmp_path, capsys):
    """The refusal of ``--sources dropout`` on a network without dropout advised ``dropout_p=...`` (the Python
    argument), an option nnunet-predict does not have: it names ``--dropout_p`` too."""
    from tests.nnunet.test_nnunet import write_inputs
    from tests.nnunet.test_predictor_hostile import write_model_folder

    model = write_model_folder(tmp_path / "model", folds=(0,))
    write_inputs(tmp_path / "in", shapes=((16, 16, 16),))
    argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-m", str(model), "-f", "0",
            "-device", "cpu", "-npp", "0", "-nps", "0", "--disable_progress_bar", "--sources", "dropout"]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs dropout in the network" in err[0] and "--dropout_p" in err[0], err


@pytest.mark.parametrize("flags, named", [
    (["-f", "0", "2"], "fold_2/checkpoint_final.pth not found: fold 2 (-f, use_folds) has no checkpoint "
                       "checkpoint_final.pth (-chk, checkpoint_name)"),
    (["-f", "all"], "fold_all/checkpoint_final.pth not found: fold all (-f"),
    (["-f", "0", "-chk", "checkpoint_best.pth"], "fold_0/checkpoint_best.pth not found: fold 0 (-f, use_folds) has "
                                                 "no checkpoint checkpoint_best.pth (-chk"),
])
def test_a_missing_fold_or_checkpoint_names_the_flags_and_what_the_folder_holds(flags, named, tmp_path, capsys):
    """Found by hostile testing: ``-f 2`` of a two-fold model or ``-chk checkpoint_best.pth`` of a model without it
    printed torch's ``[Errno 2] No such file or directory: '.../fold_2/checkpoint_final.pth'``, naming neither flag
    nor the folds and checkpoints there are."""
    from tests.nnunet.test_nnunet import write_inputs
    from tests.nnunet.test_predictor_hostile import write_model_folder

    model = write_model_folder(tmp_path / "model", folds=(0, 1))
    write_inputs(tmp_path / "in", shapes=((16, 16, 16),))
    argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-m", str(model), "-device",
            "cpu", "--sources", "mirroring", *flags]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and named in err and "Errno" not in err, err
    assert err.endswith("holds fold_0 (checkpoint_final.pth); fold_1 (checkpoint_final.pth)"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("chk", ["../fold_1/checkpoint_final.pth", "fold_1/checkpoint_final.pth", ".."])
def test_a_checkpoint_name_with_a_folder_is_refused(chk, tmp_path, capsys):
    """Found by hostile testing: ``-f 0 1 -chk ../fold_1/checkpoint_final.pth`` loaded fold 1's checkpoint for both
    folds, two identical ensemble members (mutual information 0), as ``-f 1 1`` would (which is refused);
    nnunet-calibrate refused such a name already."""
    from tests.nnunet.test_nnunet import write_inputs
    from tests.nnunet.test_predictor_hostile import write_model_folder

    model = write_model_folder(tmp_path / "model", folds=(0, 1))
    write_inputs(tmp_path / "in", shapes=((16, 16, 16),))
    argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-m", str(model), "-device",
            "cpu", "--sources", "folds", "-f", "0", "1", "-chk", chk]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "checkpoint_name (-chk) must be a file name without folders" in err, err
    assert not (tmp_path / "out").exists()
