"""``monai-unc nnunet-predict``: contradicting flags are refused in flag terms, before any model is loaded."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("nnunetv2")

from monai_unc import cli  # noqa: E402

BASE = ["nnunet-predict", "-i", "in", "-o", "out", "-m", "no_model_needed", "-device", "cpu"]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # the default sources (folds mirroring) with --disable_tta: say which flags conflict and how to fix it
        (["--disable_tta"], ["--disable_tta", "--sources folds mirroring", "(the default sources)",
                             "drop mirroring from --sources (--sources folds)", "or drop --disable_tta"]),
        (["--disable_tta", "--sources", "mirroring"], ["--disable_tta", "choose other --sources"]),
        (["--sources", "folds", "dropout", "rate_in"],
         ["--sources folds dropout rate_in", "either dropout or rate_in"]),
        (["--sources", "ssn", "rate_in"], ["--sources ssn rate_in", "ssn cannot be combined with rate_in"]),
        (["--rate_in_target", "0.2"], ["--rate_in_target need rate_in in --sources"]),
        (["--rate_in_target", "0.2", "--rate_in_loss", "mse", "--sources", "folds"],
         ["--rate_in_target and --rate_in_loss need rate_in"]),
        (["--dropout_p", "0.2"], ["--dropout_p needs dropout in --sources"]),
        (["--sources", "rate_in", "-f", "0", "1"], ["-f 0 1", "add folds to --sources"]),
        (["--measures", "window_disagreement", "--window_disagreement", "mutual_information"],
         ["--measures window_disagreement needs --window_disagreement separate"]),
        # --num_samples 0 is refused by the parser (tests/cli/test_numbers_numwords.py)
        (["--sources", "folds", "dropout", "--dropout_p", "1.5"], ["--dropout_p must be in (0, 1)"]),
        # option sweep: the predictor refused nan as "p (the initial rate) must be > 0", naming no flag
        (["--sources", "folds", "rate_in", "--rate_in_target", "nan"], ["--rate_in_target must be in [0, 1]"]),
        (["--sources", "folds", "rate_in", "--rate_in_target", "-1"], ["--rate_in_target must be in [0, 1]"]),
        (["--no_share_passes"], ["--no_share_passes concerns the passes of dropout or rate_in",
                                 "--sources folds mirroring"]),
        (["--sources", "folds", "dropout", "--no_share_passes", "--sample_batch_size", "4"],
         ["--sample_batch_size batches the shared passes", "drop it or drop --no_share_passes"]),
        (["--sample_batch_size", "4"], ["add dropout or rate_in to --sources folds mirroring"]),
        # found by hostile testing: accepted and recorded, yet one pass per window has nothing to share or batch
        (["--sources", "folds", "dropout", "--num_samples", "1", "--sample_batch_size", "4"],
         ["--sample_batch_size 4 concerns several dropout / rate_in passes", "--num_samples 1"]),
        (["--sources", "folds", "rate_in", "--num_samples", "1", "--no_share_passes"],
         ["--no_share_passes concerns several dropout / rate_in passes", "--num_samples 1"]),
    ],
)
def test_conflicting_flags_are_named(flags, expected, capsys):
    assert cli.main([*BASE, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("monai-unc nnunet-predict: error: ")
    assert len(err.strip().splitlines()) == 1
    for text in expected:
        assert text in err, (text, err)
    # Python argument names of the predictor stay out of the command line's messages
    for name in ("uncertainty_sources", "use_mirroring", "rate_in options", "dropout_p="):
        assert name not in err


def test_unknown_rate_in_loss_is_refused_naming_the_flag(capsys):
    # found by hostile testing: refused only by the predictor, as "loss must be one of (...) or a callable", naming
    # its Python argument instead of the flag (and --help listed only mi, ssim and mse)
    with pytest.raises(SystemExit) as e:
        cli.main([*BASE, "--sources", "folds", "rate_in", "--rate_in_loss", "bogus"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "argument --rate_in_loss" in err and "invalid choice: 'bogus'" in err and "'mi_binned'" in err


def test_consistent_flags_pass_the_check():
    parser, nnunet_cli = cli.build_parser("nnunet-predict")
    for flags in ([], ["--disable_tta", "--sources", "folds"],
                  ["--sources", "folds", "rate_in", "--rate_in_target", "0.2"],
                  ["--sources", "dropout", "--dropout_p", "0.1"],
                  ["--sources", "dropout", "--sample_batch_size", "4"],
                  ["--sources", "folds", "rate_in", "--no_share_passes"]):
        nnunet_cli.check_predict_flags(parser.parse_args([*BASE, *flags]))


@pytest.mark.parametrize("results", [None, "no_such_results_folder"])
def test_dataset_id_without_nnunet_environment_is_one_line(results, monkeypatch, capsys, tmp_path):
    """Issue 40 item 8: ``-d 990 -c 3d_fullres`` without nnU-Net's variables was a RuntimeError traceback."""
    for name in ("nnUNet_raw", "nnUNet_preprocessed", "nnUNet_results"):
        monkeypatch.delenv(name, raising=False)
    if results is not None:
        monkeypatch.setenv("nnUNet_results", str(tmp_path / results))
    argv = ["nnunet-predict", "-i", str(tmp_path), "-o", str(tmp_path / "out"), "-d", "990", "-c", "3d_fullres",
            "-device", "cpu"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("monai-unc nnunet-predict: error: ")
    assert len(err.strip().splitlines()) == 1, err
    assert "nnUNet_results" in err and "-m" in err
    assert "Traceback" not in err


def test_dicom_input_is_staged_as_nifti_with_the_series_geometry(tmp_path):
    """stage_dicom_input: series folders become <case>_0000.nii.gz with the series' values and affine; image files
    are predicted as they are; models DICOM cannot feed and refused series are one-line ValueErrors."""
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    import nibabel as nib
    import numpy as np

    from monai_unc.io.dicom import read_series, write_series
    from monai_unc.nnunet.cli import stage_dicom_input

    values = np.random.default_rng(0).integers(0, 500, (5, 4, 3)).astype(float)
    affine = np.diag([0.8, 0.9, 2.5, 1.0])
    write_series(values, affine, tmp_path / "in" / "c1", modality="MR", shuffle_seed=1)
    model = {"file_ending": ".nii.gz", "channel_names": {"0": "MR"}}
    staged = tmp_path / "staged"
    staged.mkdir()
    assert stage_dicom_input(str(tmp_path / "in"), str(staged), model) == [[str(staged / "c1_0000.nii.gz")]]
    img = nib.load(staged / "c1_0000.nii.gz")
    np.testing.assert_array_equal(np.asarray(img.dataobj), values)
    np.testing.assert_allclose(img.affine, read_series(tmp_path / "in" / "c1", pixels=False).affine, atol=1e-5)
    for bad, words in (({"file_ending": ".mha", "channel_names": {"0": "MR"}}, "reads .mha files"),
                       # a model of two channels takes one series per channel, <case>_0000/ and <case>_0001/
                       ({"file_ending": ".nii.gz", "channel_names": {"0": "T1", "1": "T2"}},
                        "c1/ is not named so")):
        with pytest.raises(ValueError, match=words):
            stage_dicom_input(str(tmp_path / "in"), str(tmp_path / "staged"), bad)
    (tmp_path / "in" / "c2").mkdir()  # not one clean series: refused in one line naming it
    (tmp_path / "in" / "c2" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="notes.txt is not a readable DICOM file") as info:
        stage_dicom_input(str(tmp_path / "in"), str(tmp_path / "staged2"), model)
    assert len(str(info.value).splitlines()) == 1
    files = tmp_path / "files"
    files.mkdir()
    nib.save(nib.Nifti1Image(values.astype(np.float32), affine), files / "c1_0000.nii.gz")
    assert stage_dicom_input(str(files), str(staged), model) == str(files)  # nnU-Net's own files: as they are


def test_a_gantry_tilted_series_is_refused_in_one_line_unless_the_model_reads_with_nibabel(tmp_path):
    """A tilted series (a sheared grid) staged for nnU-Net's SimpleITKIO failed after the model was loaded with ITK's
    40-line traceback ("only supports orthonormal direction cosines"); refused before prediction now, in one line
    naming the series. NibabelIO reads a sheared affine: staged with the series' geometry (found by hostile
    testing)."""
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    import nibabel as nib
    import numpy as np

    from monai_unc.io.dicom import read_series, write_series
    from monai_unc.nnunet.cli import stage_dicom_input

    affine = np.diag([0.9, 0.9, 2.5, 1.0])
    affine[1, 2] = 0.9  # each slice 0.9 mm further along y: a gantry tilt of about 20 degrees
    write_series(np.round(np.random.default_rng(0).random((6, 5, 4)) * 400), affine, tmp_path / "in" / "ct01",
                 modality="CT")
    model = {"file_ending": ".nii.gz", "channel_names": {"0": "CT"}}
    for reader in ("SimpleITKIO", "SimpleITKIOWithReorient", None):
        staged = tmp_path / f"staged_{reader}"
        staged.mkdir()
        with pytest.raises(ValueError, match=r"series ct01: .*degrees from perpendicular.*ITK") as info:
            stage_dicom_input(str(tmp_path / "in"), str(staged), model, reader=reader)
        assert len(str(info.value).splitlines()) == 1
        assert list(staged.iterdir()) == []
    for reader in ("NibabelIO", "NibabelIOWithReorient"):
        staged = tmp_path / f"staged_{reader}"
        staged.mkdir()
        assert stage_dicom_input(str(tmp_path / "in"), str(staged), model, reader=reader) == [
            [str(staged / "ct01_0000.nii.gz")]]
        np.testing.assert_allclose(nib.load(staged / "ct01_0000.nii.gz").affine,
                                   read_series(tmp_path / "in" / "ct01", pixels=False).affine, atol=1e-4)


@pytest.mark.slow
def test_nnunet_predict_refuses_a_gantry_tilted_series_in_one_line(tmp_path, capsys):
    """End to end, with the toy model of the nnU-Net tests (SimpleITKIO): exit 2 and one line, no traceback."""
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    import numpy as np

    from monai_unc.io.dicom import write_series
    from tests.nnunet.test_nnunet_conformal import write_model_folder

    model = write_model_folder(tmp_path / "model")
    affine = np.diag([0.9, 0.9, 2.5, 1.0])
    affine[1, 2] = 0.9
    write_series(np.round(np.random.default_rng(0).random((24, 24, 12)) * 400), affine, tmp_path / "in" / "ct01",
                 modality="CT")
    argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-m", str(model), "-f", "0",
            "-device", "cpu", "-npp", "0", "-nps", "0", "--disable_progress_bar"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "series ct01" in err and "sheared grid" in err, err
def _count_series_reads(monkeypatch) -> list[str]:
    """The names of the series folders read with their pixels (``read_series``), in order."""
    import monai_unc.io.dicom as dicom

    reads: list[str] = []
    real = dicom.read_series

    def counted(path, *args, **kwargs):
        reads.append(os.path.basename(os.fspath(path)))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(dicom, "read_series", counted)
    return reads


def test_a_part_of_dicom_input_reads_and_stages_only_its_cases(tmp_path, monkeypatch):
    """Issue: with ``-num_parts N`` every part read and staged every case's series (N times the reading and the
    staging disk); a part now reads and writes the cases nnU-Net gives it (the sorted case ids,
    ``[part_id::num_parts]``) and lists every case's channel files, in the order nnU-Net lists a folder holding them
    all. The series of another part's case is not read (its broken series refuses only its own part)."""
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    import numpy as np
    from nnunetv2.utilities.utils import create_paths_fn, get_identifiers_from_splitted_dataset_folder

    from monai_unc.io.dicom import write_series
    from monai_unc.nnunet.cli import stage_dicom_input

    model = {"file_ending": ".nii.gz", "channel_names": {"0": "CT"}}
    ids = ["B2", "a", "a_0000", "c10", "c2"]  # nnU-Net's (code point) order; a_0000 is a case of its own
    for k, case in enumerate(ids):
        if case != "c2":
            write_series(np.full((5, 4, 3), 10.0 * k), np.diag([0.8, 0.9, 2.5, 1.0]), tmp_path / "in" / case,
                         modality="CT")
    (tmp_path / "in" / "c2").mkdir()  # not a readable series: refused by its own part only
    (tmp_path / "in" / "c2" / "notes.txt").write_text("x")
    reads = _count_series_reads(monkeypatch)
    staged = tmp_path / "part1"
    staged.mkdir()
    lists = stage_dicom_input(str(tmp_path / "in"), str(staged), model, num_parts=2, part_id=1)
    assert reads == ["a", "c10"]  # part 1 of B2, a, a_0000, c10, c2
    assert sorted(p.name for p in staged.iterdir()) == ["a_0000.nii.gz", "c10_0000.nii.gz"]
    assert lists == [[str(staged / f"{case}_0000.nii.gz")] for case in ids]
    reads.clear()
    with pytest.raises(ValueError, match="notes.txt is not a readable DICOM file"):
        stage_dicom_input(str(tmp_path / "in"), str(tmp_path / "part0"), model, num_parts=2, part_id=0)
    assert reads == ["B2", "a_0000", "c2"]
    # the lists are nnU-Net's own listing of a folder staged with every case (the readable ones here)
    (tmp_path / "in" / "c2" / "notes.txt").unlink()
    (tmp_path / "in" / "c2").rmdir()
    every = tmp_path / "every"
    every.mkdir()
    lists = stage_dicom_input(str(tmp_path / "in"), str(every), model)
    files = sorted(p.name for p in every.iterdir())
    assert lists == [create_paths_fn(str(every), files, ".nii.gz", case)
                     for case in get_identifiers_from_splitted_dataset_folder(str(every), ".nii.gz")]
    for num_parts, part_id, words in ((0, 0, "num_parts must be a positive integer, got 0"),
                                      (2, 2, r"part_id must be in \[0, num_parts\), got 2 with num_parts 2"),
                                      (2, -1, r"part_id must be in \[0, num_parts\), got -1")):
        with pytest.raises(ValueError, match=words):
            stage_dicom_input(str(tmp_path / "in"), str(every), model, num_parts=num_parts, part_id=part_id)


def test_the_series_folder_names_of_every_part_are_checked_before_any_series_is_read(tmp_path, monkeypatch):
    """A case of another part without every channel series is refused before anything is read, as before."""
    from monai_unc.nnunet.cli import stage_dicom_input

    for name in ("a_0000", "a_0001", "b_0000"):
        (tmp_path / "in" / name).mkdir(parents=True)
        (tmp_path / "in" / name / "IM0001").write_bytes(b"")
    reads = _count_series_reads(monkeypatch)
    model = {"file_ending": ".nii.gz", "channel_names": {"0": "T1", "1": "T2"}}
    with pytest.raises(ValueError, match="case 'b' has the series _0000; the model takes 2 input channels"):
        stage_dicom_input(str(tmp_path / "in"), str(tmp_path), model, num_parts=2, part_id=0)  # part 0: case a
    assert reads == []


@pytest.mark.slow
def test_nnunet_predict_parts_of_dicom_input_equal_one_run(tmp_path, monkeypatch):
    """End to end, with the toy model of the nnU-Net tests: ``-num_parts 2`` run part by part into one ``-o`` reads
    each series once and gives the outputs and the table of one run of every case."""
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    import nibabel as nib
    import numpy as np

    from monai_unc.io.dicom import write_series
    from tests.nnunet.test_nnunet_conformal import write_model_folder

    model = write_model_folder(tmp_path / "model")
    rng = np.random.default_rng(3)
    ids = ["ct01", "ct02", "ct03"]
    for case in ids:
        write_series(np.round(rng.uniform(-1, 1, (20, 18, 16)) * 400), np.diag([1.0, 1.0, 1.0, 1.0]),
                     tmp_path / "in" / case, modality="CT")

    def predict(out, *extra):
        argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(out), "-m", str(model), "-f", "0",
                "-device", "cpu", "--sources", "mirroring", "-npp", "0", "-nps", "0", "--disable_progress_bar",
                *extra]
        assert cli.main(argv) == 0

    reads = _count_series_reads(monkeypatch)
    predict(tmp_path / "all")
    assert sorted(reads) == ids
    reads.clear()
    predict(tmp_path / "parts", "-num_parts", "2", "-part_id", "0")
    assert reads == ["ct01", "ct03"]
    assert sorted(p.name for p in (tmp_path / "parts").glob("*.nii.gz")) == ["ct01.nii.gz", "ct03.nii.gz"]
    reads.clear()
    predict(tmp_path / "parts", "-num_parts", "2", "-part_id", "1")
    assert reads == ["ct02"]
    names = sorted(str(p.relative_to(tmp_path / "all")) for p in (tmp_path / "all").rglob("*.nii.gz"))
    assert len(names) > len(ids)  # segmentations and maps
    assert names == sorted(str(p.relative_to(tmp_path / "parts")) for p in (tmp_path / "parts").rglob("*.nii.gz"))
    for name in names:
        np.testing.assert_array_equal(np.asarray(nib.load(tmp_path / "parts" / name).dataobj),
                                      np.asarray(nib.load(tmp_path / "all" / name).dataobj), err_msg=name)
    records = [f"uncertainty/{case}.json" for case in ids]
    for name in ("uncertainty_scores.csv", "uncertainty_config.json", *records):
        assert (tmp_path / "parts" / name).read_text() == (tmp_path / "all" / name).read_text(), name
    rows = (tmp_path / "parts" / "uncertainty_scores.csv").read_text().splitlines()[1:]
    assert [row.split(",")[0] for row in rows] == ids


@pytest.mark.parametrize(("flags", "share", "batch"), [([], True, "auto"), (["--sample_batch_size", "3"], True, 3),
                                                       (["--no_share_passes"], False, "auto")])
def test_share_flags_reach_the_predictor(flags, share, batch, monkeypatch, tmp_path):
    """``--no_share_passes`` / ``--sample_batch_size``: the predictor's ``share_passes`` / ``sample_batch_size``."""
    import monai_unc.nnunet.predictor as predictor_module

    seen = {}

    class Stop(Exception):
        pass

    def record(**kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(predictor_module, "UncertaintyPredictor", record)
    (tmp_path / "model").mkdir()
    (tmp_path / "in").mkdir()
    argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-m", str(tmp_path / "model"),
            "-device", "cpu", "--sources", "dropout", *flags]
    with pytest.raises(Stop):
        cli.main(argv)
    assert seen["share_passes"] is share and seen["sample_batch_size"] == batch


def test_bad_sample_batch_size_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([*BASE, "--sources", "dropout", "--sample_batch_size", "0"])
    assert e.value.code == 2 and "expected 'auto' or a positive integer, got '0'" in capsys.readouterr().err


@pytest.mark.parametrize("world", ["2", "4"])
def test_nnunet_predict_under_torchrun_is_refused_pointing_to_num_parts(world, monkeypatch, tmp_path, capsys):
    """Found by the review of the session's change: launched under torchrun (WORLD_SIZE > 1), every rank predicted
    every case into the same folder at once; nnU-Net splits a cohort with -num_parts / -part_id, one call each."""
    import monai_unc.nnunet.predictor as predictor_module

    def never(**kwargs):
        raise AssertionError("the predictor was built")

    monkeypatch.setattr(predictor_module, "UncertaintyPredictor", never)
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setenv("RANK", "0")
    (tmp_path / "model").mkdir()
    (tmp_path / "in").mkdir()
    argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "-m", str(tmp_path / "model"),
            "-device", "cpu"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"WORLD_SIZE={world}" in err and "-num_parts N -part_id K" in err, err
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("WORLD_SIZE", "1")  # one process: as before (the predictor is built)
    with pytest.raises(AssertionError, match="the predictor was built"):
        cli.main(argv)


def test_a_killed_run_leaves_no_staged_dicom_input_in_the_system_temporary_folder(tmp_path, monkeypatch,
                                                                                  one_torch_thread):
    """Found by review 75: a DICOM input was staged as NIfTI (the patients' scans) in
    ``/tmp/monai-unc-dicom-input-*``, which a killed run (SIGKILL, the OOM killer) left there for good. It is staged
    in a scratch folder inside ``-o`` now: a killed run leaves nothing in the system's temporary folder, and the next
    run into ``-o`` (a real prediction: nnU-Net's output checks take the hidden folder in stride) removes it."""
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    import multiprocessing
    import signal
    import tempfile
    from pathlib import Path

    import numpy as np

    from monai_unc.io.dicom import write_series
    from monai_unc.nnunet.predictor import UncertaintyPredictor
    from tests.nnunet.test_nnunet_conformal import write_model_folder

    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))  # the forked run's too
    model = write_model_folder(tmp_path / "model")
    write_series(np.round(np.random.default_rng(3).uniform(-1, 1, (20, 18, 16)) * 400), np.eye(4),
                 tmp_path / "in" / "ct01", modality="CT")
    out = tmp_path / "out"
    argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(out), "-m", str(model), "-f", "0",
            "-device", "cpu", "--sources", "mirroring", "-npp", "0", "-nps", "0", "--disable_progress_bar"]
    predict = UncertaintyPredictor.predict_from_files

    def killed(self, images, *args, **kwargs):  # the series staged, the run killed before its prediction
        assert Path(images[0][0]).is_file()
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(UncertaintyPredictor, "predict_from_files", killed)
    proc = multiprocessing.get_context("fork").Process(target=lambda: os._exit(cli.main(argv)))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    assert list(system_tmp.iterdir()) == []
    left = list(out.glob(".images.partial-dicom-input-*.dir"))
    assert len(left) == 1 and [p.name for p in left[0].iterdir()] == ["ct01_0000.nii.gz"]
    monkeypatch.setattr(UncertaintyPredictor, "predict_from_files", predict)
    assert cli.main(argv) == 0
    assert (out / "ct01.nii.gz").is_file()
    assert list(out.glob(".*.partial*")) == [] and list(system_tmp.iterdir()) == []


@pytest.mark.parametrize("parts", [("out",), ("a", "b", "out")])
def test_a_run_refused_at_the_staging_leaves_no_output_folder(parts, tmp_path, capsys, one_torch_thread):
    """The scratch folder of the staging is made inside ``-o``, which is made for it: a run refused at the staging
    (an unreadable series) leaves no ``-o`` it made, as before (nnU-Net made it only when it predicted), nor the
    parents made with it (found by the review of the scratch folders: ``-o a/b/out``, none of it there, left
    ``a/b``); the folder that was there is kept."""
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    from tests.nnunet.test_nnunet_conformal import write_model_folder

    model = write_model_folder(tmp_path / "model")
    (tmp_path / "in" / "ct01").mkdir(parents=True)
    (tmp_path / "in" / "ct01" / "notes.txt").write_text("x")
    (tmp_path / "kept").mkdir()
    argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path.joinpath("kept", *parts)), "-m",
            str(model), "-f", "0", "-device", "cpu", "--sources", "mirroring", "--disable_progress_bar"]
    assert cli.main(argv) == 2
    assert "notes.txt is not a readable DICOM file" in capsys.readouterr().err
    assert list((tmp_path / "kept").iterdir()) == []


def test_any_run_into_o_removes_what_a_killed_run_of_another_output_format_left(tmp_path, one_torch_thread):
    """Found by the review of the scratch folders: each kind of run swept only its own kind of scratch folder, so a
    killed ``--output-format dicom`` run's predictions stayed through a later NIfTI run into the same ``-o``, and a
    killed NIfTI run's staged DICOM series through a later ``--output-format dicom`` run. Any run removes both kinds
    that no live run holds."""
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    import numpy as np

    from monai_unc.io.dicom import write_series
    from tests.nnunet.test_nnunet_conformal import write_model_folder

    model = write_model_folder(tmp_path / "model")
    write_series(np.round(np.random.default_rng(3).uniform(-1, 1, (20, 18, 16)) * 400), np.eye(4),
                 tmp_path / "in" / "ct01", modality="CT")
    out = tmp_path / "out"
    for fmt in ("nifti", "dicom"):
        left = [out / ".predictions.partial-nnunet-dead0001.dir" / "predictions",
                out / ".images.partial-dicom-input-dead0002.dir"]
        for folder in left:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "ct01_0000.nii.gz").write_bytes(b"a killed run's")
        argv = ["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(out), "-m", str(model), "-f", "0",
                "-device", "cpu", "--sources", "mirroring", "-npp", "0", "-nps", "0", "--disable_progress_bar",
                "--output-format", fmt]
        assert cli.main(argv) == 0, fmt
        assert list(out.glob(".*.partial*")) == [], fmt
