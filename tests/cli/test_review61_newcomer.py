"""Review 61, the newcomer's path through ``monai-unc``: what a first user mistypes or mixes up gets one line that
says what to do instead (exit status 2)."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc import cli
from tests._argv import command_parsers


def _refused(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The one stderr line of a command refused with exit status 2 (by argparse or by the command)."""
    try:
        code = cli.main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert err.count("\n") == 1 and err.startswith("monai-unc"), err
    return err


# ------------------------------------------------------------------------------- 1. "did you mean ...?" suggestions
@pytest.mark.parametrize("argv, suggestion", [
    (["infer", "-i", "x", "-o", "y", "--model", "exampl"], "did you mean 'example'?"),
    (["evaluate", "-l", "a", "-p", "b", "-o", "c", "--layout", "nnUnet"], "did you mean 'nnunet'?"),
    (["evaluate", "-l", "a", "-p", "b", "-o", "c", "--measures", "mutual_informaton"],
     "did you mean 'mutual_information'?"),
    (["evaluate", "-l", "a", "-p", "b", "-o", "c", "--risk", "1-dise"], "did you mean '1-dice'?"),
    (["evalute", "-l", "a"], "did you mean 'evaluate'?"),
    (["monitor", "stauts"], "did you mean 'status'?"),
    (["infer", "-i", "x", "-o", "y", "--activation", "sigmod"], "did you mean 'sigmoid'?"),
])
def test_a_mistyped_choice_is_answered_with_the_closest_one(argv, suggestion, capsys):
    err = _refused(argv, capsys)
    assert "invalid choice" in err and suggestion in err


def test_a_choice_far_from_every_other_gets_no_suggestion(capsys):
    err = _refused(["evaluate", "-l", "a", "-p", "b", "-o", "c", "--layout", "zzzz"], capsys)
    assert "invalid choice" in err and "did you mean" not in err


def test_a_mistyped_method_source_is_answered_with_the_closest_method(tmp_path, capsys):
    err = _refused(["demo", "--method", "mcdropot+tt", "--output", str(tmp_path / "d")], capsys)
    assert "--method must be '+'-joined names" in err and "did you mean 'mcdropout+tta'?" in err
    assert not (tmp_path / "d").exists()


def test_a_mistyped_measure_of_the_python_api_is_answered(capsys):
    from monai_unc.workflows.prepare import infer_measures

    with pytest.raises(ValueError, match=r"unknown measure\(s\) 'varaince'.*did you mean 'variance'\?"):
        infer_measures("mcdropout", ["varaince"])


def test_a_mistyped_nnunet_measure_is_answered(tmp_path, capsys):
    pytest.importorskip("nnunetv2")
    (tmp_path / "in").mkdir()
    err = _refused(["nnunet-predict", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "o"), "-m", str(tmp_path),
                    "-device", "cpu", "--measures", "one_minus_max_pro"], capsys)
    assert "did you mean 'one_minus_max_prob'?" in err


# ------------------------------------------------------------------------------------ 2. a dataset root for a folder
def _dataset(root: Path) -> Path:
    """An nnU-Net / MSD dataset folder: imagesTr/ (channel files), labelsTr/, imagesTs/, dataset.json."""
    rng = np.random.default_rng(0)
    for sub, name in (("imagesTr", "c1_0000"), ("imagesTs", "c2_0000"), ("labelsTr", "c1")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        data = rng.random((8, 8, 8)).astype(np.float32) if "images" in sub else np.zeros((8, 8, 8), np.uint8)
        nib.save(nib.Nifti1Image(data, np.eye(4)), str(root / sub / f"{name}.nii.gz"))
    (root / "dataset.json").write_text("{}")
    return root


@pytest.mark.parametrize("command, option, wanted", [
    ("infer", "--input", "imagesTr (or {root}/imagesTs)"),
    ("evaluate", "--labels", "labelsTr"),
    ("calibrate-input", "--input", "imagesTr (or {root}/imagesTs)"),
    ("calibrate-labels", "--labels", "labelsTr"),
    ("nnunet-predict", "-i", "imagesTr (or {root}/imagesTs)"),
])
def test_a_dataset_root_is_refused_naming_the_sub_folder_to_pass(command, option, wanted, tmp_path, capsys):
    root = _dataset(tmp_path / "Dataset001_X")
    out = tmp_path / "out"
    argv = {
        "infer": ["infer", "-i", str(root), "-o", str(out), "--model", "example", "--quiet"],
        "evaluate": ["evaluate", "-l", str(root), "-p", str(root / "labelsTr"), "-o", str(out), "--quiet"],
        "calibrate-input": ["calibrate", "-i", str(root), "-l", str(root / "labelsTr"), "-o", str(out / "c.pt"),
                            "--model", "example"],
        "calibrate-labels": ["calibrate", "-i", str(root / "imagesTr"), "-l", str(root), "-o", str(out / "c.pt"),
                             "--model", "example"],
        "nnunet-predict": ["nnunet-predict", "-i", str(root), "-o", str(out), "-m", str(tmp_path), "-device", "cpu"],
    }[command]
    if command == "nnunet-predict":
        pytest.importorskip("nnunetv2")
    err = _refused(argv, capsys)
    assert f"error: {option} folder {root} looks like a dataset root" in err, err
    assert f"pass its sub-folder {root}/{wanted.format(root=root)} instead" in err, err
    assert not out.exists()  # refused before anything is written


def test_a_folder_of_image_folders_is_a_dataset_root_and_a_folder_of_dicom_series_is_not(tmp_path):
    from monai_unc.io import refuse_dataset_root

    root = tmp_path / "scans"
    for sub in ("site_a", "site_b"):
        (root / sub).mkdir(parents=True)
        (root / sub / "case1.nii.gz").write_bytes(b"")
    wanted = r"looks like a dataset root .*pass its sub-folder .*site_a \(or .*site_b\) instead"
    with pytest.raises(ValueError, match=wanted) as e:
        refuse_dataset_root(root, "input", "--input folder")
    assert e.value.parameter == "input"
    series = tmp_path / "dicom"  # one folder of slices per case: the input of infer, not a dataset root
    for case in ("case1", "case2"):
        (series / case).mkdir(parents=True)
        (series / case / "IM0001").write_bytes(b"")
        (series / case / "IM0002.dcm").write_bytes(b"")
    refuse_dataset_root(series, "input")
    flat = tmp_path / "flat"  # a volume of its own: a folder of cases even with sub-folders beside
    (flat / "extra").mkdir(parents=True)
    (flat / "extra" / "x.nii.gz").write_bytes(b"")
    (flat / "a.nii.gz").write_bytes(b"")
    refuse_dataset_root(flat, "input")


# -------------------------------------------------------------------------------- 3. --device cuda without CUDA
@pytest.fixture()
def image_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    data = np.random.default_rng(0).random((16, 16, 16)).astype(np.float32)
    nib.save(nib.Nifti1Image(data, np.eye(4)), str(folder / "a.nii.gz"))
    return folder


@pytest.mark.parametrize("cuda_version, why", [
    (None, "has no CUDA support"),
    ("12.1", "(CUDA 12.1) finds no CUDA GPU or driver"),
])
@pytest.mark.parametrize("command", ["infer", "calibrate"])
def test_cuda_without_cuda_is_one_line_that_offers_the_cpu(command, cuda_version, why, image_folder, tmp_path,
                                                           capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", cuda_version)
    out = tmp_path / "out"
    argv = (["infer", "-i", str(image_folder), "-o", str(out), "--quiet"] if command == "infer" else
            ["calibrate", "-i", str(image_folder), "-l", str(image_folder), "-o", str(out / "c.pt")])
    err = _refused([*argv, "--model", "example", "--device", "cuda"], capsys)
    assert "--device cuda asked for, but CUDA is not available: this torch build" in err and why in err
    assert "--device cpu works" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("device, meant", [("gpu", "cuda"), ("GPU:1", "cuda:1"), ("cdua", "cuda"), ("cpuu", "cpu")])
def test_gpu_is_refused_naming_cuda(device, meant, image_folder, tmp_path, capsys):
    err = _refused(["infer", "-i", str(image_folder), "-o", str(tmp_path / "out"), "--model", "example", "--quiet",
                    "--device", device], capsys)
    assert f"--device: unknown device {device!r}; did you mean {meant!r}?" in err


# ---------------------------------------------------------------------- 7. the case an unmatched file may be
def _volume(path: Path, dtype: type = np.uint8) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(np.zeros((8, 8, 8), dtype), np.eye(4)), str(path))


def test_unmatched_files_name_the_case_they_may_be(tmp_path, capsys):
    for c in ("case1", "case2"):
        _volume(tmp_path / "labels" / f"{c}_label.nii.gz")
        _volume(tmp_path / "pred" / f"{c}_seg.nii.gz")
    err = _refused(["evaluate", "-l", str(tmp_path / "labels"), "-p", str(tmp_path / "pred"), "-o",
                    str(tmp_path / "out"), "--quiet"], capsys)
    assert "case 'case1_label' has no segmentation or probabilities" in err
    assert "(the predictions have case 'case1': the same case under another name?" in err, err


def test_calibrate_names_the_label_an_image_may_have(image_folder, tmp_path, capsys):
    _volume(tmp_path / "labels" / "a_gt.nii.gz")
    _volume(tmp_path / "labels" / "b_gt.nii.gz")
    err = _refused(["calibrate", "-i", str(image_folder), "-l", str(tmp_path / "labels"), "-o",
                    str(tmp_path / "out" / "c.pt"), "--model", "example"], capsys)
    assert "no label in" in err and "(the labels have case 'a_gt': the same case under another name?" in err, err


def test_case_id_hint_proposes_renamed_ids_and_never_a_numbered_neighbour():
    from monai_unc.io import case_id_hint

    assert "'case1'" in case_id_hint("case1_0000", ["case1", "case10", "case2"], "the labels")
    assert "'brats001'" in case_id_hint("BraTS_001", ["brats001", "brats002"], "the labels")
    assert case_id_hint("case_011", ["case_010", "case_001", "case_111"], "the labels") == ""
    assert case_id_hint("liver_7", ["liver_70", "liver_17"], "the labels") == ""
    assert case_id_hint("a", ["brats", "c"], "the labels") == ""
    assert "only in letter case" in case_id_hint("Case01", ["case01"], "the labels")


# ---------------------------------------------------------------------------------------- 10. no empty option group
def test_no_help_shows_an_option_group_without_options(capsys):
    with pytest.raises(SystemExit):
        cli.main(["evaluate", "--help"])
    text = capsys.readouterr().out
    assert "\nRisk-controlled referral:" not in text
    assert "risk-controlled referral threshold (docs/referral_threshold.md):" in text  # its options' own group
    parser, _ = cli.build_parser()
    default_titles = {"positional arguments", "options", "optional arguments"}  # argparse hides them when empty
    empty = [(" ".join(("monai-unc", *words)), g.title) for words, p in command_parsers(parser)
             for g in p._action_groups if not g._group_actions and g.title not in default_titles]
    assert not empty, empty


# ------------------------------------------------------------------------------ 4. every default shown in --help
@pytest.mark.parametrize("command", [None, "nnunet-predict"])
def test_every_help_shows_every_meaningful_default_and_no_noise(command):
    import argparse

    if command is not None:
        pytest.importorskip("nnunetv2")
    parser, _ = cli.build_parser(command)
    unshown, checked = [], 0
    for words, p in command_parsers(parser):
        name = " ".join(("monai-unc", *words))
        text = p.format_help()
        assert "(default: None)" not in text and "(default: False)" not in text and "(default: [])" not in text, name
        formatter = p._get_formatter()
        for action in p._actions:
            default = action.default
            if (not action.option_strings or action.nargs == 0 or action.help in (None, argparse.SUPPRESS)
                    or default is None or default is False or default in ("", [], ())):
                continue
            checked += 1
            if "default" not in formatter._expand_help(action).lower():
                unshown.append((name, action.option_strings[0]))
    assert checked > 40 and not unshown, unshown


def test_a_default_is_shown_as_typed(capsys):
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    assert "page title (default: Uncertainty QC report)" in " ".join(capsys.readouterr().out.split())


# ----------------------------------------------------------- 5. a note under each key number of the report page
def test_each_key_number_of_the_report_says_what_it_measures_and_which_way_is_better(tmp_path):
    import re
    import warnings

    from tests.report._hostile_cohorts import evaluate, small_score_cases, write_cases

    data = write_cases(tmp_path / "data", small_score_cases())
    evaluation = evaluate(data, tmp_path / "eval")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["report", "-e", str(evaluation), "-o", str(tmp_path / "r"), "--cases", "0", "--quiet"]) == 0
    page = (tmp_path / "r" / "report.html").read_text()
    cards = dict(re.findall(r'<div class="k">([^<]*)</div><div class="n">([^<]*)</div>', page))
    expected = {"mean Dice": "higher is better", "pooled ECE (top label)": "calibration error",
                "pooled all-label ECE": "lower is better", "pooled NLL": "lower is better",
                "pooled Brier": "lower is better", "AURC (risk 1 - Dice)": "lower is better",
                "E-AURC": "lower is better"}
    for label, words in expected.items():
        assert words in cards.get(label, ""), (label, cards)
    numbers = re.findall(r'<div class="card"><div class="v">[^<]*</div><div class="k">([^<]*)</div>', page)
    assert set(numbers) - set(cards) <= {"cases"}, set(numbers) - set(cards)  # every number but the count has a note


def test_a_card_note_is_escaped():
    from monai_unc.report.html import cards

    assert '<div class="n">a &lt;b&gt; &amp; c</div>' in str(cards([("k", "1", "a <b> & c")]))


# ---------------------------------------------------------------------- 6. --labels and --predictions swapped
@pytest.fixture()
def toy(tmp_path: Path) -> dict[str, Path]:
    from monai_unc.data.cohorts import write_toy_cohort

    return write_toy_cohort(tmp_path / "data", n_cases=2, shape=(16, 16, 16))


def _nnunet_folders(toy: dict[str, Path], root: Path) -> dict[str, Path]:
    """The toy cohort as nnU-Net names it: <case>.nii.gz segmentations, uncertainty/<case>_<measure> maps; and a
    folder of the probability volumes under the labels' names."""
    import shutil

    pred, probs = root / "nnpred", root / "probs"
    (pred / "uncertainty").mkdir(parents=True)
    probs.mkdir()
    for label in sorted(toy["labels"].glob("*.nii.gz")):
        c = label.name[: -len(".nii.gz")]
        shutil.copy(toy["predictions"] / f"{c}_seg.nii.gz", pred / f"{c}.nii.gz")
        shutil.copy(toy["predictions"] / f"{c}_predictive_entropy.nii.gz", pred / "uncertainty")
        shutil.copy(toy["predictions"] / f"{c}_probs.nii.gz", probs / f"{c}.nii.gz")
    return {"nnpred": pred, "probs": probs}


def test_swapped_labels_and_predictions_are_said_to_be_swapped(toy, tmp_path, capsys):
    err = _refused(["evaluate", "-l", str(toy["predictions"]), "-p", str(toy["labels"]), "-o", str(tmp_path / "e"),
                    "--quiet"], capsys)
    assert "lack files" in err and "--labels and --predictions look swapped" in err, err
    assert "files named as infer writes them" in err and "--allow-missing" not in err


@pytest.mark.parametrize("folder, held", [("nnpred", "an uncertainty/ folder of maps"),
                                          ("probs", "floating-point volumes (e.g. ")])
def test_swapped_nnunet_folders_are_said_to_be_swapped(folder, held, toy, tmp_path, capsys):
    folders = _nnunet_folders(toy, tmp_path)
    code = cli.main(["evaluate", "-l", str(folders[folder]), "-p", str(toy["labels"]), "-o", str(tmp_path / "e"),
                     "--layout", "nnunet", "--num-classes", "3", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    warning = [line for line in err.splitlines() if line.startswith("monai-unc evaluate: warning:")]
    assert len(warning) == 1 and "--labels and --predictions look swapped" in warning[0] and held in warning[0], err


def test_matched_folders_in_the_right_order_get_no_swap_warning(toy, tmp_path, capsys):
    import warnings

    from monai_unc.io import match_cases

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(match_cases(toy["labels"], toy["predictions"])) == 2
        folders = _nnunet_folders(toy, tmp_path)
        assert len(match_cases(toy["labels"], folders["nnpred"], layout="nnunet")) == 2


def test_a_probability_map_read_as_labels_suggests_a_swap():
    from monai_unc.io import CaseError, check_label_map

    with pytest.raises(CaseError, match=r"label map must hold integer classes.*the labels and the predictions may be "
                                        r"swapped"):
        check_label_map(np.full((4, 4, 4), 0.25, np.float32), what="case a")


# ------------------------------------------------------------------ 8. --activation none on a network of logits
def test_activation_none_on_logits_names_the_activation_meant(image_folder, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["infer", "-i", str(image_folder), "-o", str(out), "--model", "example", "--activation", "none",
                     "--roi", "16", "--samples", "2", "--quiet"])
    err = capsys.readouterr().err
    assert code == 1, err
    line = next(line for line in err.splitlines() if "case 'a' failed" in line)
    assert "network output must lie in [0, 1]" in line and "needs activation 'softmax' (--activation softmax)" in line


def test_activation_none_on_per_channel_probabilities_names_sigmoid():
    import torch

    from monai_unc.inferers.sampling import apply_activation

    with pytest.raises(ValueError, match=r"must sum to 1.*reads the output as class probabilities.*'sigmoid' for one "
                                         r"binary task per channel"):
        apply_activation(torch.full((1, 3, 4, 4, 4), 0.6), None)
    probs = torch.softmax(torch.randn(1, 3, 4, 4, 4), dim=1)
    assert torch.equal(apply_activation(probs, None), probs)  # probabilities pass as before


def test_float_labels_beside_integer_masks_are_not_said_to_be_swapped(tmp_path):
    """Labels stored as float (nibabel's default float64) with ``<case>_seg`` masks and nothing else: a valid
    segmentation-only cohort, not a swap (found by the review of review 61: the float header alone drew the hint)."""
    import warnings

    import nibabel as nib
    import numpy as np

    from monai_unc.io import match_cases

    lab, pred = tmp_path / "lab", tmp_path / "pred"
    lab.mkdir()
    pred.mkdir()
    mask = np.zeros((6, 6, 6), np.uint8)
    mask[2:4, 2:4, 2:4] = 1
    for c in ("a", "b"):
        nib.save(nib.Nifti1Image(mask.astype(np.float64), np.eye(4)), lab / f"{c}.nii.gz")
        nib.save(nib.Nifti1Image(mask, np.eye(4)), pred / f"{c}_seg.nii.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(match_cases(lab, pred)) == 2
