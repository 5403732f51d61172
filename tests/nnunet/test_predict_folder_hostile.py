"""Hostile review of ``nnunet-predict``'s input and output folders: RGB natural-image models (one file holds the
three colour channels), input folders without a file of the model's ending, reruns into a folder holding another
run's cases, the default ``-device cuda`` on a machine without CUDA, and the folds the model identity names.

Model folders are written by hand with the tiny networks of :func:`tests.nnunet.test_nnunet.make_plans`
(:func:`tests.nnunet.test_predictor_hostile.write_model_folder`).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

from nnunetv2.imageio.natural_image_reader_writer import NaturalImage2DIO  # noqa: E402
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from monai_unc.io.provenance import check_finished_predictions, prediction_fingerprint  # noqa: E402
from monai_unc.nnunet.cli import add_parser, run  # noqa: E402
from monai_unc.nnunet.predictor import model_weight_digests  # noqa: E402
from tests.nnunet.test_nnunet import make_plans, write_inputs  # noqa: E402
from tests.nnunet.test_predictor_hostile import write_model_folder  # noqa: E402

CPU = torch.device("cpu")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="monai-unc")
    add_parser(parser.add_subparsers())
    return run(parser.parse_args(argv))


def _predictor(model: Path, folds=(0,), checkpoint: str = "checkpoint_final.pth", **kw) -> mun.UncertaintyPredictor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pred = mun.UncertaintyPredictor(uncertainty_sources=kw.pop("sources", ("mirroring",)), device=CPU,
                                        allow_tqdm=False, **kw)
        pred.initialize_from_trained_model_folder(str(model), folds, checkpoint)
    return pred


def _predict(pred, inp, out, **kw):
    return pred.predict_from_files(str(inp), str(out), num_processes_preprocessing=0,
                                   num_processes_segmentation_export=0, **kw)


# ------------------------------------------------------------------------------------------ RGB natural images
RGB_DATASET = {"channel_names": {"0": "R", "1": "G", "2": "B"}, "labels": {"background": 0, "road": 1},
               "numTraining": 2, "file_ending": ".png"}


def _rgb_model(root: Path) -> Path:
    """A 2D model of nnU-Net's NaturalImage2DIO, as nnU-Net's Dataset120_RoadSegmentation trains it (3 channels)."""
    plans = make_plans(ndim=2, patch=(16, 16), spacing=(1.0, 1.0))
    plans["image_reader_writer"] = "NaturalImage2DIO"
    plans["original_median_spacing_after_transp"] = [999.0, 1.0, 1.0]
    cfg = plans["configurations"]["cfg"]
    cfg["normalization_schemes"] = ["RGBTo01Normalization"] * 3
    cfg["use_mask_for_norm"] = [False] * 3
    props = plans["foreground_intensity_properties_per_channel"]["0"]
    plans["foreground_intensity_properties_per_channel"] = {str(c): props for c in range(3)}
    return write_model_folder(root, folds=(0,), plans=plans, in_channels=3, dataset_json=RGB_DATASET,
                              mirror={0: (0, 1)})


def _png(path: Path, shape) -> None:
    from skimage import io

    rng = np.random.default_rng(len(shape))
    io.imsave(str(path), rng.integers(0, 255, shape, dtype=np.uint8), check_contrast=False)


def test_rgb_natural_image_model_predicts_one_file_per_case_like_stock(tmp_path):
    """nnU-Net stores an RGB image as one file <case>_0000.png and NaturalImage2DIO returns its 3 colour channels;
    check_case_channels demanded one file per channel name ("missing img0_0001.png (the model takes 3 channels: R,
    G, B)"), so nnunet-predict refused what stock nnU-Net predicts."""
    model = _rgb_model(tmp_path / "model")
    inp = tmp_path / "in"
    inp.mkdir()
    _png(inp / "img0_0000.png", (24, 20, 3))
    stock = nnUNetPredictor(device=CPU, allow_tqdm=False)
    stock.initialize_from_trained_model_folder(str(model), (0,))
    (tmp_path / "stock").mkdir()
    stock.predict_from_files_sequential(str(inp), str(tmp_path / "stock"), save_probabilities=True)
    _predict(_predictor(model), inp, tmp_path / "ours", save_probabilities=True)
    rw = NaturalImage2DIO()
    seg_stock, _ = rw.read_seg(str(tmp_path / "stock" / "img0.png"))
    seg_ours, _ = rw.read_seg(str(tmp_path / "ours" / "img0.png"))
    np.testing.assert_array_equal(seg_ours, seg_stock)
    np.testing.assert_allclose(np.load(tmp_path / "ours" / "img0.npz")["probabilities"],
                               np.load(tmp_path / "stock" / "img0.npz")["probabilities"], atol=1e-6)
    entropy = np.load(tmp_path / "ours" / "uncertainty" / "img0_predictive_entropy.npz")["map"]
    assert entropy.shape[-2:] == (24, 20)


@pytest.mark.parametrize("shape, match", [
    ((24, 20), r"^case img0: missing img0_0001.png \(the model takes 3 channels: R, G, B\)$"),  # greyscale
    ((24, 20, 4), r"^case img0: its 1 file \(img0_0000.png\) holds 4 channels \(the model takes 3 channels"),
])
def test_rgb_model_refuses_files_holding_other_channel_counts(shape, match, tmp_path):
    """A case with fewer files than channels is read with the model's reader: a greyscale image lacks two channels
    (three greyscale files would do, as for nnU-Net), an RGBA image has one too many."""
    _png(tmp_path / "img0_0000.png", shape)
    with pytest.raises(ValueError, match=match):
        mun.check_case_channels(str(tmp_path), RGB_DATASET, NaturalImage2DIO)
    held = r"holding 4 channels \(" if len(shape) == 3 else r"\("
    with pytest.raises(ValueError, match=f"img0_0000.png: the case has 1 channel file {held}the model takes 3"):
        mun.check_case_channels([[str(tmp_path / "img0_0000.png")]], RGB_DATASET, NaturalImage2DIO)
    _png(tmp_path / "img1_0000.png", (24, 20, 3))
    (tmp_path / "img0_0000.png").unlink()
    mun.check_case_channels(str(tmp_path), RGB_DATASET, NaturalImage2DIO)  # one RGB file: the 3 channels
    mun.check_case_channels(str(tmp_path), RGB_DATASET)  # the reader nnU-Net picks for .png


# ------------------------------------------------------------------------------------------ input file ending
@pytest.mark.parametrize("content", ["nii", "empty"])
def test_input_folder_without_the_models_ending_is_refused(content, tmp_path, capsys):
    """.nii inputs for a .nii.gz model (or an empty folder): nnU-Net said "There are 0 cases" and exited 0 with
    nothing predicted."""
    model = write_model_folder(tmp_path / "model", folds=(0,))
    inp = tmp_path / "in"
    inp.mkdir()
    if content == "nii":
        write_inputs(tmp_path / "gz", shapes=((16, 16, 16),))
        (inp / "case0_0000.nii").write_bytes(gzip.decompress((tmp_path / "gz" / "case0_0000.nii.gz").read_bytes()))
    argv = ["nnunet-predict", "-i", str(inp), "-o", str(tmp_path / "out"), "-m", str(model), "-f", "0",
            "-device", "cpu", "-npp", "0", "-nps", "0", "--disable_progress_bar"]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"input folder {inp} holds no file ending in .nii.gz" in err
    assert ("it holds files ending in .nii: convert them to .nii.gz" if content == "nii" else "it holds no file") in err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------ -device
@pytest.mark.parametrize("command", ["nnunet-predict", "nnunet-calibrate"])
def test_default_cuda_device_without_cuda_is_one_line_before_anything_is_written(command, tmp_path, capsys,
                                                                                   monkeypatch):
    """The default -device cuda on a machine without CUDA ended in a 58-line torch traceback (exit 1), after -o had
    been created and uncertainty_config.json, plans.json and dataset.json written."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model = write_model_folder(tmp_path / "model", folds=(0,))
    write_inputs(tmp_path / "in", shapes=((16, 16, 16),))
    argv = [command, "-o", str(tmp_path / "out"), "-m", str(model), "-f", "0"]
    if command == "nnunet-predict":
        argv += ["-i", str(tmp_path / "in"), "-npp", "0", "-nps", "0"]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "-device cuda (the default): no CUDA device" in err and "pass -device cpu" in err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------ folds of the identity
def test_auto_detected_folds_leave_fold_all_out_of_the_model_identity(tmp_path):
    """With use_folds=None nnU-Net loads every fold_<k> but fold_all; the recorded weights named
    fold_all/checkpoint_final.pth too, so retraining the unused fold_all changed the fingerprint."""
    model = write_model_folder(tmp_path / "model", folds=(0, 1, "all"))
    pred = _predictor(model, folds=None, sources=("folds",))
    assert len(pred.list_of_parameters) == 2
    files = [w["file"] for w in pred.run_config()["weights"]]
    assert files == ["plans.json", "dataset.json", "fold_0/checkpoint_final.pth", "fold_1/checkpoint_final.pth"]
    assert [w["file"] for w in model_weight_digests(model, None, "checkpoint_final.pth")] == files
    assert "fold_all/checkpoint_final.pth" in [w["file"] for w in model_weight_digests(model, ("all",),
                                                                                       "checkpoint_final.pth")]


# ------------------------------------------------------------------------------------------ reruns into a folder
@pytest.fixture
def two_checkpoints(tmp_path):
    """A one-fold model with checkpoint_final and a different checkpoint_best, and the inputs case0, case1."""
    model = write_model_folder(tmp_path / "model", folds=(0,))
    ckpt = torch.load(model / "fold_0" / "checkpoint_final.pth", weights_only=False)
    for v in ckpt["network_weights"].values():
        v.mul_(1.5)
    torch.save(ckpt, model / "fold_0" / "checkpoint_best.pth")
    inp = tmp_path / "in_all"
    write_inputs(inp, shapes=((16, 16, 16), (16, 16, 16)))
    one = tmp_path / "in_one"
    one.mkdir()
    shutil.copy(inp / "case0_0000.nii.gz", one)
    return model, inp, one


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_rerun_with_other_settings_on_a_subset_is_refused(two_checkpoints, tmp_path, capsys):
    """case0 + case1 with checkpoint_final, then case0 alone with checkpoint_best into the same folder: the config said
    best, case1's record final, the table held both, and the fingerprint said best for every case."""
    model, inp, one = two_checkpoints
    out = tmp_path / "pred"
    argv = ["nnunet-predict", "-i", str(inp), "-o", str(out), "-m", str(model), "-f", "0", "-device", "cpu",
            "-npp", "0", "-nps", "0", "--sources", "mirroring", "--disable_progress_bar"]
    assert _run(argv) == 0
    capsys.readouterr()
    before = _snapshot(out)
    argv[2] = str(one)
    assert _run([*argv, "-chk", "checkpoint_best.pth"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert (f"{out} holds 1 case (case1) made with other settings that this run does not predict again (e.g. case1: "
            'checkpoint "checkpoint_final.pth" -> "checkpoint_best.pth"') in err
    assert "choose another output folder (-o)" in err
    assert _snapshot(out) == before  # nothing written
    assert _run([*argv, "--measures", "predictive_entropy"]) == 2  # other maps: the folder would mix them too
    assert "measures" in capsys.readouterr().err
    assert _snapshot(out) == before
    # every case of the folder predicted again: nothing is left of the other run
    argv[2] = str(inp)
    assert _run([*argv, "-chk", "checkpoint_best.pth"]) == 0
    records = [json.loads((out / "uncertainty" / f"case{i}.json").read_text()) for i in range(2)]
    assert [r["settings"]["checkpoint"] for r in records] == ["checkpoint_best.pth"] * 2
    check_finished_predictions(out, "nnunet", ["case0", "case1"])


def test_rerun_with_the_same_settings_on_a_subset_keeps_the_folder_consistent(two_checkpoints, tmp_path):
    """A subset predicted again with the same settings keeps the other cases; the table lists all of them, and the
    folder passes check_finished_predictions, which refuses a case made with other settings (it did not check the
    nnU-Net layout)."""
    model, inp, one = two_checkpoints
    out = tmp_path / "pred"
    _predict(_predictor(model), inp, out)
    table = (out / "uncertainty_scores.csv").read_text()
    case1 = (out / "uncertainty" / "case1.json").read_bytes()
    _predict(_predictor(model), one, out)
    assert (out / "uncertainty" / "case1.json").read_bytes() == case1
    rows = (out / "uncertainty_scores.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["case0", "case1"]
    assert rows == table.splitlines()  # the same settings and inputs: the same scores
    check_finished_predictions(out, "nnunet", ["case0", "case1"])
    assert prediction_fingerprint(out, "nnunet")["checkpoint"] == "checkpoint_final.pth"

    # a folder mixed by hand (or by a run interrupted half-way) is refused by evaluate / triage
    mixed = tmp_path / "mixed"
    shutil.copytree(out, mixed)
    rec = json.loads((mixed / "uncertainty" / "case1.json").read_text())
    rec["settings"]["checkpoint"] = "checkpoint_best.pth"
    (mixed / "uncertainty" / "case1.json").write_text(json.dumps(rec))
    with pytest.raises(ValueError, match=r"not one finished 'monai-unc nnunet-predict' run: case\(s\) \['case1'\] "
                                         r'were made with other settings .*checkpoint "checkpoint_best.pth" -> '
                                         r'"checkpoint_final.pth"'):
        check_finished_predictions(mixed, "nnunet", ["case0", "case1"])
    check_finished_predictions(mixed, "nnunet", ["case0"])
    rec.pop("settings")  # a record of an earlier version: compared on what the fingerprint reads
    rec["num_samples"] = 4
    (mixed / "uncertainty" / "case1.json").write_text(json.dumps(rec))
    rec0 = json.loads((mixed / "uncertainty" / "case0.json").read_text())
    rec0.pop("settings")
    (mixed / "uncertainty" / "case0.json").write_text(json.dumps(rec0))
    with pytest.raises(ValueError, match=r"the case records disagree on num_samples \(4: \['case1'\]; 8: "):
        check_finished_predictions(mixed, "nnunet", ["case0", "case1"])


def test_a_case_without_its_record_is_an_interrupted_one(two_checkpoints, tmp_path):
    """nnunet-predict removes a case's record first when it writes the case again and writes the record before the
    segmentation: a case with files but no record is half old, half new (or half written). It passed the check
    ("nothing recorded to compare") and was scored; now it is refused like the monai-unc layout's. A config written
    by hand (no ``uncertainty_sources``) names no such run and is not checked."""
    model, inp, _ = two_checkpoints
    out = tmp_path / "pred"
    _predict(_predictor(model), inp, out)
    (out / "uncertainty" / "case1.json").unlink()
    with pytest.raises(ValueError, match=r"case\(s\) \['case1'\] have files but no record uncertainty/<case>.json "
                                         r"\(an interrupted case\)"):
        check_finished_predictions(out, "nnunet", ["case0", "case1"])
    check_finished_predictions(out, "nnunet", ["case0"])
    cfg = json.loads((out / "uncertainty_config.json").read_text())
    cfg.pop("uncertainty_sources")
    (out / "uncertainty_config.json").write_text(json.dumps(cfg))
    check_finished_predictions(out, "nnunet", ["case1"])


def test_scores_table_lists_the_records_of_the_given_settings(tmp_path):
    """With the settings given (as a run writes it), the table leaves out records of other settings, e.g. of cases
    another -part_id is still predicting again."""
    (tmp_path / "uncertainty").mkdir()
    base = {"num_samples": 8, "foreground_voxels": 0, "scores": {"predictive_entropy": {"mean": 0.25}}}
    for case, chk in (("a", "final"), ("b", "best"), ("c", "final")):
        rec = {**copy.deepcopy(base), "case": case, "settings": {"checkpoint": chk}}
        (tmp_path / "uncertainty" / f"{case}.json").write_text(json.dumps(rec))
    rows = mun.write_scores_table(tmp_path, {"checkpoint": "final"}).read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["a", "c"]
    rows = mun.write_scores_table(tmp_path).read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["a", "b", "c"]


def test_the_parts_of_one_run_share_a_folder(two_checkpoints, tmp_path):
    """-num_parts: the cases of every part count as predicted again, so the parts of a rerun with other settings may
    run one after the other (or side by side) into the folder of an earlier run."""
    model, inp, _ = two_checkpoints
    out = tmp_path / "pred"
    _predict(_predictor(model), inp, out)
    best = _predictor(model, checkpoint="checkpoint_best.pth")
    _predict(best, inp, out, num_parts=2, part_id=0)
    rows = (out / "uncertainty_scores.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["case0"]  # case1 is still the other run's
    _predict(best, inp, out, num_parts=2, part_id=1)
    rows = (out / "uncertainty_scores.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["case0", "case1"]
    check_finished_predictions(out, "nnunet", ["case0", "case1"])


def test_case_ids_one_file_name_on_a_case_folding_share_are_refused(two_checkpoints, tmp_path, capsys, monkeypatch):
    """Found by a review of the case-folding check: ``nnunet-predict`` writes each case's files through nnU-Net's own
    export loop, which the cohort commands' check never saw: ``Case01`` and ``case01`` into a folder on a macOS or
    SMB share made one segmentation, one record and one set of maps, the second case's, for both."""
    import os
    import unicodedata

    model, inp, _ = two_checkpoints
    both = tmp_path / "in_both"
    both.mkdir()
    shutil.copy(inp / "case0_0000.nii.gz", both / "Case01_0000.nii.gz")
    shutil.copy(inp / "case1_0000.nii.gz", both / "case01_0000.nii.gz")
    share, real = tmp_path / "share", os.path.lexists

    def lexists(path):  # the share's name lookup (APFS, or SMB served from macOS): case and form folded
        p = Path(path)
        if p.parent != share:
            return real(path)
        fold = lambda n: unicodedata.normalize("NFC", n).casefold()  # noqa: E731
        return any(fold(n) == fold(p.name) for n in os.listdir(share))

    monkeypatch.setattr(os.path, "lexists", lexists)
    argv = ["nnunet-predict", "-i", str(both), "-o", str(share), "-m", str(model), "-f", "0", "-device", "cpu",
            "-npp", "0", "-nps", "0", "--sources", "mirroring", "--disable_progress_bar"]
    assert _run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'Case01' and 'case01' differ only in letter case" in err, err
    assert f"-o {share}" in err
    assert not share.exists()  # nothing written: the folder the refused run made is removed again (and its probe)
    # a folder that tells the names apart (Linux) takes both cases
    monkeypatch.setattr(os.path, "lexists", real)
    assert _run([*argv[:4], str(tmp_path / "ext4"), *argv[5:]]) == 0
    assert {p.name for p in (tmp_path / "ext4").glob("*.nii.gz")} == {"Case01.nii.gz", "case01.nii.gz"}
