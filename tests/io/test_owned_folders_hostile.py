"""Symbolic links planted in an output folder where a command removes files (found by hostile testing).

``dicom-export`` removed every ``*.dcm`` of ``<output>/<case>/`` before writing, ``triage`` every file of ``maps/``
no case of the run names and the figures of ``figures/``, ``evaluate`` the files of ``products/<name>/``: with such a
sub-folder a link to another folder (anyone who can write into a shared output folder can plant one), the files of
that folder were deleted. Each is refused now in one line (:func:`monai_unc.io.owned_folder`), the other folder
untouched; the output folder itself, which the user names, may still be a link.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from monai_unc.evaluation.products import remove_case_files
from monai_unc.evaluation.triage.runner import remove_stale_maps, remove_triage_files
from monai_unc.io import check_output_kind, save_nifti


def _victim(root: Path, names: tuple[str, ...]) -> Path:
    folder = root / "someone_elses"
    folder.mkdir()
    for n in names:
        (folder / n).write_bytes(b"precious")
    return folder


def _intact(folder: Path, names: tuple[str, ...]) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)
    assert all((folder / n).read_bytes() == b"precious" for n in names)


def test_owned_folder_refuses_a_link_below_the_output(tmp_path):
    from monai_unc.io import owned_folder

    out = tmp_path / "out"
    out.mkdir()
    victim = _victim(tmp_path, ("a.png",))
    os.symlink(victim, out / "figures")
    with pytest.raises(ValueError, match="figures is a symbolic link") as e:
        owned_folder(out, "figures")
    assert len(str(e.value).splitlines()) == 1
    (out / "products").mkdir()
    os.symlink(victim, out / "products" / "lesions")
    with pytest.raises(ValueError, match="lesions is a symbolic link"):
        owned_folder(out, "products/lesions")
    link = tmp_path / "out_link"  # the output folder itself may be a link (the user named it)
    os.symlink(out, link)
    assert owned_folder(link, "maps") == link / "maps"


def test_triage_cleanups_do_not_follow_links(tmp_path):
    names = ("case9_label.nii.gz", "notes.txt")
    victim = _victim(tmp_path, names)
    out = tmp_path / "triage"
    out.mkdir()
    os.symlink(victim, out / "maps")
    with pytest.raises(ValueError, match="symbolic link"):
        remove_stale_maps(out / "maps", [])
    (tmp_path / "f").mkdir()
    figures = _victim(tmp_path / "f", ("roc.png",))
    os.symlink(figures, out / "figures")
    with pytest.raises(ValueError, match="symbolic link"):
        remove_triage_files(out)
    _intact(victim, names)
    _intact(figures, ("roc.png",))


def test_evaluate_products_folder_links_refused(tmp_path):
    names = ("c1_outer.nii.gz",)
    victim = _victim(tmp_path, names)
    out = tmp_path / "eval"
    (out / "products").mkdir(parents=True)
    os.symlink(victim, out / "products" / "old_product")
    with pytest.raises(ValueError, match="symbolic link"):
        remove_case_files(out)
    _intact(victim, names)
    with pytest.raises(ValueError, match="old_product is a symbolic link"):  # before any work
        check_output_kind(out, "evaluate")
    (out / "products" / "old_product").unlink()
    os.symlink(victim, out / "maps")
    with pytest.raises(ValueError, match="maps is a symbolic link"):
        check_output_kind(out, "triage")
    _intact(victim, names)


def test_dicom_export_does_not_delete_through_a_case_link(tmp_path, capsys):
    pytest.importorskip("pydicom", reason="needs the dicom extra")
    pytest.importorskip("highdicom", reason="needs the dicom extra")
    from monai_unc.cli import main
    from monai_unc.io.dicom import read_series, write_series

    series = tmp_path / "series"
    write_series(np.zeros((8, 7, 4)), np.diag([1.0, 1, 2, 1]), series / "ct01", modality="CT")
    grid = read_series(series / "ct01", pixels=False)
    pred = tmp_path / "pred"
    pred.mkdir()
    seg = np.zeros(grid.shape, np.uint8)
    seg[2:5, 2:5, 1:3] = 1
    save_nifti(seg, grid.affine, pred / "ct01_seg.nii.gz")
    names = ("IM0000.dcm", "IM0001.dcm")
    victim = _victim(tmp_path, names)
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "ct01")
    assert main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ct01 is a symbolic link" in err, err
    _intact(victim, names)
    (out / "ct01").unlink()  # without the link the export runs
    assert main(["dicom-export", "-p", str(pred), "-s", str(series), "-o", str(out), "-q"]) == 0
    assert (out / "ct01" / "seg.dcm").is_file()


def test_a_product_folder_beside_triage_may_not_be_a_link(tmp_path):
    """``triage --conformal-rule`` writes the masks into ``<output>/conformal`` and removes stale ones there."""
    from monai_unc.workflows.apply import check_beside_triage

    names = ("c1_outer.nii.gz", "c1_inner.nii.gz")
    victim = _victim(tmp_path, names)
    out = tmp_path / "triage"
    out.mkdir()
    os.symlink(victim, out / "conformal")
    with pytest.raises(ValueError, match="conformal is a symbolic link"):
        check_beside_triage({"conformal": tmp_path / "no_rule.json"}, tmp_path / "pred", out)
    _intact(victim, names)
