"""Hostile output paths for the checks of ``monai_unc.io.files``: the input file itself, links to it, a folder,
a path under a file, a broken link."""

from __future__ import annotations

import os

import pytest


def test_check_output_file_refuses_inputs_links_and_unwritable_folders(tmp_path):
    from monai_unc.io import check_output_file, check_writable_folder

    src = tmp_path / "w.pt"
    src.write_bytes(b"weights")
    (tmp_path / "in").mkdir()
    os.symlink(src, tmp_path / "sym.pt")
    os.link(src, tmp_path / "hard.pt")
    with pytest.raises(ValueError, match="--output .*w.pt is the input file"):
        check_output_file(src, None, src, what="--output")
    with pytest.raises(ValueError, match="is a link to the input file"):
        check_output_file(tmp_path / "sym.pt", src)
    with pytest.raises(ValueError, match="is a link to the input file"):
        check_output_file(src, tmp_path / "sym.pt")  # the input is the link
    with pytest.raises(ValueError, match="is a hard link of the input file"):
        check_output_file(tmp_path / "hard.pt", src)
    with pytest.raises(ValueError, match="lies inside the input folder"):
        check_output_file(tmp_path / "in" / "x.pt", tmp_path / "in")
    with pytest.raises(ValueError, match="is a folder"):
        check_output_file(tmp_path / "in", src)
    with pytest.raises(ValueError, match=r"cannot be written: its folder .* is a file, not a folder"):
        check_output_file(src / "x.pt")
    assert check_output_file(tmp_path / "new" / "deeper" / "x.pt", src, tmp_path / "in") == tmp_path / "new" / \
        "deeper" / "x.pt"
    assert not (tmp_path / "new").exists()  # checks create nothing
    assert check_writable_folder(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    with pytest.raises(ValueError, match="is a file, not a folder"):
        check_writable_folder(src)
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    with pytest.raises(ValueError, match="broken symbolic link"):
        check_writable_folder(tmp_path / "dangling" / "x")


@pytest.mark.parametrize("sub, refused", [("products/conformal", True), ("products", True), ("state/cases/x", True),
                                          ("maps", True), ("conformal", False), ("products_copy", False)])
def test_an_output_inside_a_folder_a_command_owns_is_refused(tmp_path, sub, refused):
    from monai_unc.evaluation.products import command_output_markers
    from monai_unc.io.files import check_output_kind

    evaluation = tmp_path / "evaluation"
    (evaluation / "products" / "conformal").mkdir(parents=True)  # evaluate's per-rule masks
    (evaluation / "summary.json").write_text("{}")
    if refused:
        with pytest.raises(ValueError, match=r"^--output: .* lies in .*monai-unc evaluate"):
            check_output_kind(evaluation / sub, "conformal", command_output_markers())
    else:
        check_output_kind(evaluation / sub, "conformal", command_output_markers())
