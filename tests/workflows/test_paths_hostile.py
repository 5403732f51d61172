"""Paths and names of the commands' inputs (found by hostile testing).

- ``evaluate -l P -p P`` scored every prediction against itself (Dice 1, exit 0, a rule certified on it), and
  ``--images`` naming the labels used each label as its image: refused, one line, exit 2;
- an input named ``infer`` / ``failures`` replaced the run's own files: refused before any work;
- ``infer`` and ``evaluate`` left out entries they could not use (a link to an unmounted share, a folder named
  like a volume, a DICOM series folder beside volume files) without a word: each is now its case's failure;
- ``evaluate`` stored the case files as given, so ``report`` run from another directory could not find them;
- ``CASE_0000`` names beside plain names: ``evaluate --images --target-risk`` and ``triage --images`` stacked
  another case's scan as a channel (a numpy error naming no case);
- ``monitor label --labels FOLDER`` stopped at macOS' ``._a.nii.gz`` and skipped ``B.NII.GZ`` / ``.mha``;
- the sidecar of ``X.NII.GZ`` was looked up as ``X.NII.json``;
- a plain ``--calibration-cases`` list whose first id is ``case`` lost it; ``--shifts`` kept the last of two rows.
"""

from __future__ import annotations

import json
import os
import shutil
import unicodedata
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort

SHAPE = (16, 16, 16)


def _main(argv, capsys):
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return write_toy_cohort(tmp_path_factory.mktemp("toy"), n_cases=6, shape=SHAPE)


def _copy(toy, root: Path) -> dict[str, Path]:
    out = {}
    for k in ("images", "labels", "predictions"):
        out[k] = root / k
        shutil.copytree(toy[k], out[k])
    return out


def _rename_case(folders: dict[str, Path], old: str, new: str) -> None:
    for folder in folders.values():
        for p in list(folder.iterdir()):
            if p.name.startswith(old):
                p.rename(p.with_name(new + p.name[len(old):]))


def _two_channel(path: Path) -> None:
    """Make the image ``path`` a 4D NIfTI of two channels (its volume twice)."""
    img = nib.load(path)
    data = np.asarray(img.dataobj, dtype=np.float32)
    nib.save(nib.Nifti1Image(np.stack([data, data], -1), img.affine), path)


# ---------------------------------------------------------------------------------------- F01: labels = predictions
def test_evaluate_refuses_labels_that_are_the_predictions(toy, tmp_path, capsys):
    nn = tmp_path / "nn"  # nnU-Net layout: <case>.nii.gz segmentations, <case>.npz probabilities (C, z, y, x)
    shutil.copytree(toy["labels"], nn)
    for seg in nn.glob("*.nii.gz"):
        p = np.eye(2)[np.asarray(nib.load(seg).dataobj).astype(int)] * 0.8 + 0.1
        np.savez_compressed(nn / seg.name.replace(".nii.gz", ".npz"),
                            probabilities=np.transpose(p, (3, 2, 1, 0)).astype(np.float32))
    (tmp_path / "nn_link").symlink_to(nn, target_is_directory=True)
    for labels in (nn, tmp_path / "nn_link"):
        rc, _, err = _main(["evaluate", "-l", labels, "-p", nn, "--layout", "nnunet", "-o", tmp_path / "ev",
                            "--target-risk", "0.2", "-q"], capsys)
        assert rc == 2 and "--labels and --predictions are the same folder" in err, err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "ev").exists()


def test_evaluate_refuses_images_that_are_the_labels(toy, tmp_path, capsys):
    rc, _, err = _main(["evaluate", "-l", toy["labels"], "-p", toy["predictions"], "--images", toy["labels"], "-o",
                        tmp_path / "ev", "-q"], capsys)
    assert rc == 2 and "--images" in err and "--labels name the same files" in err and "toy000" in err, err
    assert not (tmp_path / "ev" / "metrics.csv").exists()


# ------------------------------------------------------------------------------------------- F02: reserved case ids
@pytest.mark.parametrize("cid", ["infer", "failures"])
def test_infer_refuses_a_case_whose_record_is_the_runs_own_file(toy, tmp_path, capsys, cid):
    img = tmp_path / "img"
    img.mkdir()
    shutil.copy(toy["images"] / "toy000.nii.gz", img / "c.nii.gz")
    shutil.copy(toy["images"] / "toy001.nii.gz", img / f"{cid}.nii.gz")
    rc, _, err = _main(["infer", "-i", img, "-o", tmp_path / "pred", "--model", "example", "--method", "softmax",
                        "--device", "cpu", "-q"], capsys)
    assert rc == 2 and f"case '{cid}' ({cid}.nii.gz) cannot be predicted" in err and f"{cid}.json" in err, err
    assert not (tmp_path / "pred" / "infer.json").exists() and not (tmp_path / "pred" / "c.json").exists()


def test_run_infer_refuses_a_reserved_case_id_before_any_work(tmp_path):
    from monai_unc.io import CaseError, ImageCase
    from monai_unc.workflows.infer import run_infer

    with pytest.raises(CaseError, match="case 'Infer'.*infer.json"):
        run_infer([ImageCase("Infer", (tmp_path / "Infer.nii.gz",))], None, None, None, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------- F03: entries that are no file
def test_infer_reports_entries_it_cannot_read_as_failed_cases(toy, tmp_path, capsys):
    img = tmp_path / "img"
    img.mkdir()
    shutil.copy(toy["images"] / "toy000.nii.gz", img / "a.nii.gz")
    (img / "c.nii.gz").symlink_to("/nonexistent_share_not_mounted/c.nii.gz")
    (img / "d.nii.gz").mkdir()
    shutil.copy(toy["images"] / "toy001.nii.gz", img / "d.nii.gz" / "d.nii.gz")
    (img / "e").mkdir()
    shutil.copy(toy["images"] / "toy002.nii.gz", img / "e" / "IM0001")  # a "series" folder that is none
    rc, _, err = _main(["infer", "-i", img, "-o", tmp_path / "pred", "--model", "example", "--method", "softmax",
                        "--device", "cpu", "-q"], capsys)
    assert rc == 1, err
    failed = {f["case"]: f["error"] for f in json.loads((tmp_path / "pred" / "failures.json").read_text())["failures"]}
    assert sorted(failed) == ["c", "d", "e"]
    assert "a symbolic link to /nonexistent_share_not_mounted/c.nii.gz, which does not exist" in failed["c"]
    assert "a folder, not a volume file" in failed["d"] and "img/e" in failed["e"]
    assert (tmp_path / "pred" / "a.json").is_file()


def test_evaluate_reports_a_prediction_that_is_a_link_to_nothing(toy, tmp_path, capsys):
    d = _copy(toy, tmp_path)
    seg = d["predictions"] / "toy005_seg.nii.gz"
    seg.unlink()
    seg.symlink_to(tmp_path / "gone" / "toy005_seg.nii.gz")
    rc, _, err = _main(["evaluate", "-l", d["labels"], "-p", d["predictions"], "-o", tmp_path / "ev", "-q"], capsys)
    assert rc == 1, err
    failed = json.loads((tmp_path / "ev" / "failures.json").read_text())["failures"]
    assert [f["case"] for f in failed] == ["toy005"] and "symbolic link" in failed[0]["error"]


# ------------------------------------------------------------------------------ F04: absolute paths in the state
def test_evaluate_records_absolute_paths_and_report_runs_from_anywhere(toy, tmp_path, capsys, monkeypatch):
    d = _copy(toy, tmp_path / "w")
    monkeypatch.chdir(tmp_path / "w")
    rc, _, err = _main(["evaluate", "-l", "labels", "-p", "predictions", "-o", "ev", "-q"], capsys)
    assert rc == 0, err
    files = json.loads((tmp_path / "w" / "ev" / "state" / "rows.json").read_text())["files"]
    paths = [v for f in files.values() for v in (f["label"], f["seg"], f["probs"], *f["maps"].values())]
    assert paths and all(Path(p).is_absolute() and Path(p).is_file() for p in paths), paths[:3]
    assert files["toy000"]["label"] == str(d["labels"] / "toy000.nii.gz")
    monkeypatch.chdir(tmp_path)
    rc, _, err = _main(["report", "-e", tmp_path / "w" / "ev", "-o", tmp_path / "rep", "--cases", "1"], capsys)
    assert rc == 0 and (tmp_path / "rep" / "report.html").is_file(), err
    # an evaluation of an earlier version (relative paths), read from elsewhere: the error says where to run
    rows = tmp_path / "w" / "ev" / "state" / "rows.json"
    doc = json.loads(rows.read_text())
    for f in doc["files"].values():
        f["label"] = os.path.relpath(f["label"], tmp_path / "w")
    rows.write_text(json.dumps(doc))
    rc, _, err = _main(["report", "-e", tmp_path / "w" / "ev", "-o", tmp_path / "rep2", "--cases", "1"], capsys)
    assert rc == 2 and "relative to the folder evaluate ran in" in err, err


# ------------------------------------------------------------------------ F05: one grouping rule of channel files
def test_channel_like_names_beside_plain_names_are_separate_cases_everywhere(toy, tmp_path, capsys):
    d = _copy(toy, tmp_path)
    _rename_case(d, "toy000", "p_0000")
    _rename_case(d, "toy001", "p_0001")
    rc, _, err = _main(["evaluate", "-l", d["labels"], "-p", d["predictions"], "--images", d["images"], "-o",
                        tmp_path / "ev", "--target-risk", "0.3", "-q"], capsys)
    assert rc == 0, err
    rule = tmp_path / "ev" / "referral_rule.json"
    assert len(json.loads(rule.read_text())["image_reference"]["features"]) == 5  # one channel per case
    rc, _, err = _main(["triage", "-p", d["predictions"], "--rule", rule, "--images", d["images"], "-o",
                        tmp_path / "tri", "-q"], capsys)
    assert rc == 0, err
    # a case whose image has two channels: named, with its file, in evaluate (exit 2) and in triage (its failure)
    _two_channel(d["images"] / "toy003.nii.gz")
    rc, _, err = _main(["evaluate", "-l", d["labels"], "-p", d["predictions"], "--images", d["images"], "-o",
                        tmp_path / "ev2", "--target-risk", "0.3", "-q"], capsys)
    assert rc == 2 and "different numbers of channels" in err and "'toy003' 2 (toy003.nii.gz)" in err, err
    rc, _, err = _main(["triage", "-p", d["predictions"], "--rule", rule, "--images", d["images"], "-o",
                        tmp_path / "tri2", "-q"], capsys)
    assert rc == 1, err
    failed = json.loads((tmp_path / "tri2" / "failures.json").read_text())["failures"]
    assert [f["case"] for f in failed] == ["toy003"]
    assert "(toy003.nii.gz) has 2 channel(s), the calibration images of the rule 1" in failed[0]["error"]


# ------------------------------------------------------------------------------- F06 / F07: monitoring file names
def test_monitor_label_folder_is_listed_as_evaluate_lists_labels(tmp_path, capsys):
    from monai_unc.io import save_nifti
    from monai_unc.monitoring import MonitorStore

    from ..monitoring._stream import make_rule, write_triage

    rng = np.random.default_rng(0)
    labels, preds = tmp_path / "labels", tmp_path / "preds"
    labels.mkdir()
    preds.mkdir()
    for cid in ("a", "B", "c"):
        seg = rng.integers(0, 3, (6, 7, 5)).astype(np.uint8)
        save_nifti(seg, np.eye(4), preds / f"{cid}_seg.nii.gz")
        save_nifti(seg, np.eye(4), labels / f"{cid}.nii.gz")
    (labels / "B.nii.gz").rename(labels / "B.NII.GZ")
    import SimpleITK as sitk

    sitk.WriteImage(sitk.ReadImage(str(labels / "c.nii.gz")), str(labels / "c.mha"))
    (labels / "c.nii.gz").unlink()
    shutil.copy(labels / "a.nii.gz", labels / "._a.nii.gz")  # the AppleDouble file a Mac copy leaves
    folder = write_triage(tmp_path / "t", make_rule([0.1, 0.2]), [{"case": c, "score": 0.1} for c in ("a", "B", "c")],
                          segs={c: str(preds / f"{c}_seg.nii.gz") for c in ("a", "B", "c")})
    db = str(tmp_path / "m.db")
    assert _main(["monitor", "record", folder, "--db", db, "-q"], capsys)[0] == 0
    rc, out, err = _main(["monitor", "label", "--labels", labels, "--db", db], capsys)
    assert rc == 0 and "recorded 3 audited label(s)" in out, err
    with MonitorStore(db) as store:
        assert {c["case_id"]: c["dice"] for c in store.cases()} == {"a": 1.0, "B": 1.0, "c": 1.0}
    bad = tmp_path / "bad"
    bad.mkdir()
    shutil.copy(labels / "a.nii.gz", os.fsencode(bad) + b"/h\xf4pital.nii.gz")  # a Latin-1 name
    rc, _, err = _main(["monitor", "label", "--labels", bad, "--db", db], capsys)
    assert rc == 2 and "is not valid UTF-8" in err and "h\\xf4pital" in err, err


def test_the_sidecar_of_an_image_with_a_capitalised_extension(tmp_path):
    from monai_unc.monitoring import sidecar_site

    (tmp_path / "a.json").write_text(json.dumps({"InstitutionName": "Hospital A", "Manufacturer": "X"}))
    for name in ("a.NII.GZ", "a.Nii", "a.MHA", "a.nii.gz"):
        assert sidecar_site(str(tmp_path / name)) == ("Hospital A", "X"), name


# ------------------------------------------------------------------------ F08 / F09: case lists and shift tables
def test_calibration_case_list_header_rule(tmp_path):
    from monai_unc.workflows.prepare import read_case_list

    (tmp_path / "plain.txt").write_text("case\na\nb\n")
    assert read_case_list(tmp_path / "plain.txt") == ["case", "a", "b"]  # a plain list: 'case' is a case
    (tmp_path / "one.csv").write_text("case\na\nb\n")
    assert read_case_list(tmp_path / "one.csv") == ["a", "b"]  # a one-column CSV under a .csv name
    (tmp_path / "table.txt").write_text("# cases\ncase,site\na,x\nb,y\n")
    assert read_case_list(tmp_path / "table.txt") == ["a", "b"]  # a comma: a CSV whatever its name
    (tmp_path / "list.CSV").write_text("a\nb\n")
    with pytest.raises(ValueError, match="without a 'case' column"):
        read_case_list(tmp_path / "list.CSV")


def test_evaluate_keeps_a_calibration_case_named_case(toy, tmp_path, capsys):
    d = _copy(toy, tmp_path)
    _rename_case(d, "toy000", "case")
    (tmp_path / "cal.txt").write_text("case\ntoy001\ntoy002\ntoy003\n")
    rc, _, err = _main(["evaluate", "-l", d["labels"], "-p", d["predictions"], "-o", tmp_path / "ev",
                        "--target-risk", "0.3", "--calibration-cases", tmp_path / "cal.txt", "-q"], capsys)
    assert rc == 0, err
    rule = json.loads((tmp_path / "ev" / "referral_rule.json").read_text())
    assert rule["calibration"]["cases"] == ["case", "toy001", "toy002", "toy003"]


def test_a_shift_table_listing_a_case_twice_is_refused(toy, tmp_path, capsys):
    from monai_unc.evaluation import read_shifts

    table = tmp_path / "shifts.csv"
    table.write_text("case,shift\ntoy000,noise\ntoy001,none\ntoy000,none\n")
    with pytest.raises(ValueError, match=r"case 'toy000' is listed twice \(line 4\)"):
        read_shifts(table)
    rc, _, err = _main(["evaluate", "-l", toy["labels"], "-p", toy["predictions"], "-o", tmp_path / "ev",
                        "--shifts", table, "-q"], capsys)
    assert rc == 2 and "listed twice" in err and not (tmp_path / "ev" / "metrics.csv").exists(), err


def test_dicom_export_refuses_a_case_named_like_its_record(tmp_path):
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    from monai_unc.io import CaseError, save_nifti
    from monai_unc.workflows.dicom import EXPORT_RECORD, dicom_export

    pred, src = tmp_path / "pred", tmp_path / "series"
    pred.mkdir()
    (src / EXPORT_RECORD).mkdir(parents=True)  # the case's series folder: <output>/<case>/ is the record
    (src / EXPORT_RECORD / "IM0001").write_bytes(b"")
    save_nifti(np.zeros((4, 5, 6), np.uint8), np.eye(4), pred / f"{EXPORT_RECORD}_seg.nii.gz")
    with pytest.raises(CaseError, match=rf"case '{EXPORT_RECORD}': its folder of objects would be the export's own"):
        dicom_export(pred, src, tmp_path / "out", uid_root="1.2.826.0.1.3680043.10.779.", progress=False)
    assert not (tmp_path / "out" / EXPORT_RECORD).exists()


def test_whole_image_inference_of_a_size_the_unet_cannot_take_says_to_pass_roi(tmp_path, capsys):
    """Found by a review of the newcomer's path: ``infer --model example`` on the demo's own images without ``--roi``
    failed every case with torch's "Sizes of tensors must match except in dimension 1" (the whole 50 x 117 x 95 image
    at once: a U-Net needs sizes divisible by its downsampling factor). The line now says to pass ``--roi`` and the
    window the example was trained on; with it the case is predicted."""
    img = tmp_path / "img"
    img.mkdir()
    rng = np.random.default_rng(0)
    nib.save(nib.Nifti1Image(rng.random((18, 29, 23), dtype=np.float32), np.eye(4)), img / "c.nii.gz")
    rc, _, err = _main(["infer", "-i", img, "-o", tmp_path / "pred", "--model", "example", "--method", "softmax",
                        "--device", "cpu", "-q"], capsys)
    assert rc == 1 and "inference failed on the input of shape (1, 1, 18, 29, 23)" in err, err
    assert "pass --roi with the window it was trained on (64)" in err, err
    rc, _, err = _main(["infer", "-i", img, "-o", tmp_path / "pred2", "--model", "example", "--method", "softmax",
                        "--device", "cpu", "-q", "--roi", "64"], capsys)
    assert rc == 0 and (tmp_path / "pred2" / "c.json").is_file(), err


def _apfs_fold(name: str) -> str:
    """How APFS (and an SMB share served from macOS) compares names: letter case and Unicode form folded."""
    return unicodedata.normalize("NFC", name).casefold()


def _folding_lookup(folder: Path, fold):
    """``os.path.lexists`` as a file system that compares names by ``fold`` answers it for files in ``folder``.

    No such file system can be mounted here: the probe of the case-folding check is answered as it would be there.
    """
    real = os.path.lexists

    def lexists(path):
        p = Path(path)
        if p.parent != folder:
            return real(path)
        return any(fold(n) == fold(p.name) for n in os.listdir(folder))

    return lexists


def test_case_ids_that_one_file_system_takes_as_one_name(tmp_path, capsys, monkeypatch):
    """Found by a review of hospital shares: ``Case01`` and ``case01`` (or ``Müller`` in NFC and NFD) are two files on
    Linux but one on macOS, Windows and SMB shares: writing both cases there, the second overwrote the first's maps
    and record and both counted as done. Where the output folder's file system folds names, the run is refused in
    one line before anything is written; elsewhere both cases are predicted."""
    from monai_unc.io import colliding_case_ids, folded_case_id, folds_file_names

    assert colliding_case_ids(["Case01", "x", "case01", "M\u00fcller", "Mu\u0308ller", "y"]) == [
        ["Case01", "case01"], ["M\u00fcller", "Mu\u0308ller"]]
    assert colliding_case_ids(["a", "b"]) == [] and folded_case_id("\u00c9") == folded_case_id("e\u0301")
    probe = tmp_path / "probe"
    probe.mkdir()
    assert folds_file_names(probe) is False and not list(probe.iterdir())  # tmpfs / ext4 tell them apart
    img = tmp_path / "img"
    img.mkdir()
    rng = np.random.default_rng(0)
    for cid in ("Case01", "case01"):
        nib.save(nib.Nifti1Image(rng.random((16, 16, 16), dtype=np.float32), np.eye(4)), img / f"{cid}.nii.gz")
    argv = ["infer", "-i", img, "--model", "example", "--method", "softmax", "--roi", "16", "--device", "cpu", "-q"]
    share = tmp_path / "share"
    # the share's name lookup (as APFS, or an SMB share served from macOS): case and form folded
    monkeypatch.setattr(os.path, "lexists", _folding_lookup(share, _apfs_fold))
    rc, _, err = _main([*argv, "-o", share], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert "cases 'Case01' and 'case01' differ only in letter case or Unicode form" in lines[0], err
    assert not list((tmp_path / "share").glob("*.json")) and not list((tmp_path / "share").glob("*.nii.gz"))
    monkeypatch.undo()
    rc, _, err = _main([*argv, "-o", tmp_path / "local"], capsys)
    assert rc == 0 and {p.name for p in (tmp_path / "local").glob("?ase01.json")} == {"Case01.json", "case01.json"}


def test_a_file_system_that_folds_letter_case_only_is_found(tmp_path, monkeypatch):
    """Found by a review of the case-folding check: the probe looked its name up by the lower-case NFD spelling in one
    lookup, found only where both letter case and Unicode form are folded (APFS). NTFS, FAT / exFAT and SMB shares
    fold letter case but keep NFC and NFD names apart: the probe was not found there and ``Case01`` / ``case01``
    passed, the second case's files overwriting the first's. Each file system's name lookup is given to
    ``os.path.lexists`` for the probed folder (none of them can be mounted here)."""
    from monai_unc.io import check_case_ids_fit_folder, folds_file_names

    folder = tmp_path / "out"
    folder.mkdir()
    real = os.path.lexists
    ntfs = _folding_lookup(folder, str.casefold)  # NTFS, FAT, exFAT, SMB: letter case only
    apfs = _folding_lookup(folder, _apfs_fold)
    zfs_form_d = _folding_lookup(folder, lambda n: unicodedata.normalize("NFC", n))  # formD, case-sensitive
    nfc, nfd = "M\u00fcller", "Mu\u0308ller"
    for fs, folded, refused, passed in ((ntfs, True, [["Case01", "case01"], [nfc, "M\u00dcLLER"]], [[nfc, nfd]]),
                                        (apfs, True, [["Case01", "case01"], [nfc, nfd]], []),
                                        (zfs_form_d, True, [[nfc, nfd]], [["Case01", "case01"]]),
                                        (real, False, [], [["Case01", "case01"], [nfc, nfd]])):
        monkeypatch.setattr(os.path, "lexists", fs)
        assert folds_file_names(folder) is folded and not list(folder.iterdir())
        for ids in refused:
            with pytest.raises(ValueError, match="differ only in letter case or Unicode form"):
                check_case_ids_fit_folder([*ids, "other"], folder)
        for ids in passed:
            check_case_ids_fit_folder([*ids, "other"], folder)
        monkeypatch.undo()


def test_dicom_export_refuses_case_ids_its_output_file_system_takes_as_one(tmp_path, capsys, monkeypatch):
    """Found by a review of the case-folding check: ``infer``, ``evaluate``, ``triage`` and ``conformal`` refused
    ``Case01`` / ``case01`` on a share that folds letter case, but ``dicom-export`` wrote both into one
    ``<output>/<case>/`` there: the second case's export removed the first one's SEG and SR (its ``*.dcm``) and
    ``dicom_export.json`` listed both, exit 0. Refused now in one line before any object; on this file system
    both cases are exported."""
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    from tests.io.dicom._series import GEOMETRIES, make_series, mni_small

    pred, series = tmp_path / "pred", tmp_path / "series"
    pred.mkdir()
    _, label, _ = mni_small()
    for cid in ("Case01", "case01"):
        make_series(series / cid, "oblique_mr")
        nib.save(nib.Nifti1Image(label.astype(np.uint8), GEOMETRIES["oblique_mr"][1]), pred / f"{cid}_seg.nii.gz")
    (pred / "infer.json").write_text(json.dumps({"settings": {"model": "example", "method": "mcdropout"}}))
    argv = ["dicom-export", "-p", pred, "-s", series, "--uid-root", "1.2.826.0.1.3680043.10.779.", "--quiet"]
    share = tmp_path / "share"
    # the share's name lookup (as APFS, or an SMB share served from macOS): case and form folded
    monkeypatch.setattr(os.path, "lexists", _folding_lookup(share, _apfs_fold))
    rc, _, err = _main([*argv, "-o", share], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, err
    assert "cases 'Case01' and 'case01' differ only in letter case or Unicode form" in lines[0], err
    assert not list((tmp_path / "share").rglob("*.dcm")) and not (tmp_path / "share" / "dicom_export.json").exists()
    monkeypatch.undo()
    rc, _, err = _main([*argv, "-o", tmp_path / "local"], capsys)
    assert rc == 0, err
    assert {p.parent.name for p in (tmp_path / "local").rglob("seg.dcm")} == {"Case01", "case01"}
