"""Hostile rerun checks of ``monai-unc infer`` (review D): a resume never keeps the outputs of an input that changed.

An input image edited (re-exported, corrected) between two runs into the same folder must be predicted again: the
folder then equals a clean run's, byte for byte, and one warning line names the case. An input only copied or
touched (same content) is not predicted again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import nibabel as nib
import numpy as np
import pytest

from tests._cases import run_toy_infer, toy_infer_files

FLAGS = ("--method", "mcdropout", "--seed", "0")


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.nii.gz"))}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return toy_infer_files(tmp_path_factory.mktemp("rerun_hostile"), n_cases=2)


def _edit(path):
    img = nib.load(path)
    data = np.asarray(img.dataobj).astype(np.float32)
    nib.save(nib.Nifti1Image(data[::-1].copy() * 2.0 + 1.0, img.affine), path)


@pytest.mark.slow
def test_an_edited_input_is_predicted_again(toy, tmp_path, capsys):
    images = tmp_path / "images"
    shutil.copytree(toy["images"], images)
    mine = {**toy, "images": images}
    out, clean = tmp_path / "pred", tmp_path / "clean"
    assert run_toy_infer(mine, out, *FLAGS) == 0
    before = _digests(out)
    first = sorted(images.iterdir())[0]
    _edit(first)
    capsys.readouterr()
    assert run_toy_infer(mine, out, *FLAGS) == 0
    err = capsys.readouterr().err
    assert "input changed" in err and "toy000" in err, err
    assert run_toy_infer(mine, clean, *FLAGS) == 0
    after, fresh = _digests(out), _digests(clean)
    assert after == fresh
    assert [k for k in after if after[k] != before[k]] and all(k.startswith("toy000") for k in after
                                                                 if after[k] != before[k])
    record = json.loads((out / "toy000.json").read_text())
    assert record["input_digests"][0]["file"] == first.name


@pytest.mark.slow
def test_a_touched_or_copied_input_is_not_predicted_again(toy, tmp_path, capsys):
    images = tmp_path / "images"
    shutil.copytree(toy["images"], images)
    mine = {**toy, "images": images}
    out = tmp_path / "pred"
    assert run_toy_infer(mine, out, *FLAGS) == 0
    records = {p.name: p.read_bytes() for p in out.glob("toy*.json")}
    first = sorted(images.iterdir())[0]
    os.utime(first, ns=(0, 10**9))  # touched: another mtime, the same content
    moved = tmp_path / "moved"
    shutil.copytree(images, moved)  # copied elsewhere: other paths and times, the same content
    capsys.readouterr()
    assert run_toy_infer(mine, out, *FLAGS) == 0
    assert run_toy_infer({**toy, "images": moved}, out, *FLAGS) == 0
    assert "input changed" not in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.glob("toy*.json")} == records  # nothing predicted again


@pytest.mark.slow
def test_a_case_removed_from_the_input_is_left_alone_not_exported_or_counted(tmp_path, capsys):
    """A case removed from the input between two runs into one folder: its outputs stay (as nnU-Net's predictor leaves
    them), but the run's summary, its DICOM objects and ``dicom_export.json`` name this run's cases only (the removed
    case's earlier DICOM objects are removed). The DICOM
    step of ``--output-format both`` exported every case of the folder: it looked for the removed case's series and
    the rerun failed."""
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    import torch
    from monai.networks.nets import UNet

    from monai_unc.cli import main
    from tests._cases import TOY_NET
    from tests.io.dicom._series import make_series

    images, out = tmp_path / "images", tmp_path / "pred"
    for case in ("ct01", "ct02"):
        make_series(images / case, "anisotropic_ct")
    torch.manual_seed(0)
    torch.save(UNet(**{k: v for k, v in TOY_NET.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    (tmp_path / "net.json").write_text(json.dumps(TOY_NET))
    argv = ["infer", "-i", str(images), "-o", str(out), "--network", str(tmp_path / "net.json"), "--checkpoint",
            str(tmp_path / "net.pt"), "--samples", "2", "--device", "cpu", "--seed", "0", "--output-format", "both",
            "--uid-root", "1.2.826.0.1.3680043.10.778."]
    assert main(argv) == 0
    stale = _files_of(out, "ct02")
    assert len(stale) >= 14 and "dicom/ct02/seg.dcm" in stale  # its NIfTI outputs, its record, its DICOM objects
    shutil.rmtree(images / "ct02")
    capsys.readouterr()
    assert main(argv) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.strip()]
    assert lines[0].startswith("1 case(s): 0 written, 1 already finished"), lines
    assert lines[1].startswith("dicom: 7 DICOM object(s) for 1 case(s)"), lines
    manifest = json.loads((out / "dicom" / "dicom_export.json").read_text())
    assert sorted(manifest["cases"]) == ["ct01"]
    # its NIfTI outputs and record are left, untouched (as nnU-Net's predictor leaves them); its DICOM objects, which
    # the manifest no longer lists (a site sending every *.dcm of the folder to its PACS would send them), are removed
    # with their folder
    assert _files_of(out, "ct02") == {k: v for k, v in stale.items() if not k.startswith("dicom/")}
    assert not (out / "dicom" / "ct02").exists()


def _files_of(folder, case):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and case in str(p.relative_to(folder))}


def test_an_edited_img_of_a_nifti_pair_counts_as_a_changed_input(tmp_path):
    """Found by a review of NIfTI pairs (``<case>.hdr`` + ``<case>.img``, read as one case since this version): the
    record's input digest hashed the header alone, so a resume kept the outputs of a case whose ``.img`` (all its
    voxels) was re-exported. The digest covers both files; a touched pair (same content) is still unchanged."""
    from monai_unc.io import changed_inputs, input_digests

    hdr = tmp_path / "b.hdr"
    nib.save(nib.Nifti1Pair(np.zeros((4, 5, 6), np.int16), np.eye(4)), hdr)
    record = {"input_digests": input_digests([hdr])}
    assert changed_inputs([hdr], record) == []
    os.utime(tmp_path / "b.img", ns=(0, 10**9))  # touched only
    assert changed_inputs([hdr], record) == []
    nib.save(nib.Nifti1Pair(np.ones((4, 5, 6), np.int16), np.eye(4)), tmp_path / "c.hdr")
    os.replace(tmp_path / "c.img", tmp_path / "b.img")  # the same header, other voxels
    assert changed_inputs([hdr], record) == ["b.hdr"]


def test_a_hidden_file_in_a_series_folder_is_no_change_of_the_series(tmp_path):
    """Found by the review of dicom-export's series check: the digest of a DICOM series folder covered every file of
    the folder, hidden ones too, which no reader reads as a slice; a ``.DS_Store`` that a Mac's Finder left in the
    folder after ``infer`` made ``dicom-export`` refuse the very series the case was predicted from ("not the one the
    case was predicted from", exit status 2) and a resume predict it again. An edited slice still counts."""
    from monai_unc.io import changed_inputs, input_digests
    from monai_unc.io.dicom import write_series

    series = tmp_path / "ct01"
    files = write_series(np.arange(60.0).reshape(3, 4, 5), np.diag([0.5, 0.5, 2.0, 1]), series, modality="CT")
    record = {"input_digests": input_digests([series])}
    (series / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    assert changed_inputs([series], record) == []
    first = sorted(files)[0]
    first.write_bytes(first.read_bytes() + b"\x00\x00")  # another slice content
    assert changed_inputs([series], record) == ["ct01"]
