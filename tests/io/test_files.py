"""The atomic writers of :mod:`monai_unc.io.files` that adapters use instead of writing files themselves: figures,
file copies and nibabel images."""

from __future__ import annotations

import os

import nibabel as nib
import numpy as np
import pytest
from matplotlib.figure import Figure

from monai_unc.io import (
    OUTPUT_LOCK_FILE,
    atomic_copy,
    atomic_folder,
    atomic_savefig,
    atomic_write_text,
    check_inputs_not_written,
    output_lock,
    save_nifti_image,
)


def _figure() -> Figure:
    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    return fig


@pytest.mark.parametrize("ext, magic", [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")])
def test_atomic_savefig_keeps_the_format_of_the_extension(tmp_path, ext, magic):
    path = atomic_savefig(_figure(), tmp_path / "fig" / f"reliability{ext}", dpi=50)
    assert path == tmp_path / "fig" / f"reliability{ext}" and path.read_bytes().startswith(magic)
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_atomic_savefig_leaves_nothing_on_an_error(tmp_path):
    class Broken:
        def savefig(self, fname, **kwargs):
            with open(fname, "wb") as f:
                f.write(b"\x89PNG half")
            raise RuntimeError("renderer failed")

    with pytest.raises(RuntimeError, match="renderer failed"):
        atomic_savefig(Broken(), tmp_path / "f.png")
    assert list(tmp_path.iterdir()) == []


def test_atomic_copy(tmp_path):
    src = tmp_path / "plans.json"
    src.write_bytes(b'{"a": 1}')
    os.utime(src, (1_000_000_000, 1_000_000_000))
    dst = atomic_copy(src, tmp_path / "out" / "plans.json")
    assert dst.read_bytes() == b'{"a": 1}' and dst.stat().st_mtime == 1_000_000_000  # the time too
    assert sorted(p.name for p in dst.parent.iterdir()) == ["plans.json"]
    with pytest.raises(ValueError, match="src must be a file"):
        atomic_copy(tmp_path / "missing.json", tmp_path / "x.json")
    with pytest.raises(ValueError, match="dst must be a file path"):
        atomic_copy(src, tmp_path / "out")
    with pytest.raises(ValueError, match="is the source file"):
        atomic_copy(src, src)


@pytest.mark.parametrize("source_mode", [0o644, 0o444, 0o755])
def test_atomic_copy_takes_the_umask_mode_not_the_source_mode(tmp_path, source_mode):
    # shutil.copy2 gave the copy the source's mode: world-readable report assets under umask 077, a read-only copy
    # of a read-only installation's file (found by hostile testing of real-world folders)
    src = tmp_path / "viewer.js"
    src.write_bytes(b"x")
    os.utime(src, (1_000_000_000, 1_000_000_000))
    src.chmod(source_mode)
    old = os.umask(0o077)
    try:
        dst = atomic_copy(src, tmp_path / "out" / "viewer.js")
    finally:
        os.umask(old)
    assert dst.stat().st_mode & 0o777 == 0o600
    assert dst.read_bytes() == b"x" and dst.stat().st_mtime == 1_000_000_000


def test_save_nifti_image_keeps_dtype_and_header(tmp_path):
    affine = np.diag([1.5, 1.0, 2.0, 1.0])
    img = nib.Nifti1Image(np.arange(24, dtype=np.uint8).reshape(2, 3, 4), affine)
    img.set_qform(affine, code=1)
    path = save_nifti_image(img, tmp_path / "a" / "label.nii.gz")
    back = nib.load(str(path))
    assert back.get_data_dtype() == np.uint8 and int(back.header["qform_code"]) == 1
    np.testing.assert_array_equal(np.asarray(back.dataobj), np.arange(24).reshape(2, 3, 4))
    np.testing.assert_allclose(back.affine, affine)
    assert [p.name for p in path.parent.iterdir()] == ["label.nii.gz"]
    with pytest.raises(ValueError, match=r"\.nii or \.nii\.gz"):
        save_nifti_image(img, tmp_path / "label.npz")
    with pytest.raises(TypeError, match="image must be a nibabel image"):
        save_nifti_image(np.zeros((2, 2, 2)), tmp_path / "x.nii.gz")


def test_check_inputs_not_written_refuses_what_the_command_writes(tmp_path):
    out = tmp_path / "out"
    (out / "state" / "cases").mkdir(parents=True)
    rule = out / "triage.json"
    rule.write_text("{}")
    written = ["triage.json", "state", "state/*", "case1_*"]
    with pytest.raises(ValueError, match=r"writes triage.json there, which is the input file .*never overwritten"):
        check_inputs_not_written(out, written, rule)
    with pytest.raises(ValueError, match=r"writes into state/cases/, the input folder"):
        check_inputs_not_written(out, written, out / "state" / "cases")
    with pytest.raises(ValueError, match="case1_probs.nii.gz"):
        check_inputs_not_written(out, written, out / "case1_probs.nii.gz")
    link = tmp_path / "rule_link.json"  # a link outside the folder to a file the command writes
    os.symlink(rule, link)
    with pytest.raises(ValueError, match="never overwritten"):
        check_inputs_not_written(out, written, link)
    # elsewhere, or inside the folder under a name the command does not write: fine
    (out / "rule.json").write_text("{}")
    check_inputs_not_written(out, written, tmp_path / "rule.json", out / "rule.json", None, out / "case10_seg")
    check_inputs_not_written(out, written, out / "images")  # a folder the command does not write into


def test_atomic_folder_replaces_the_folder_whole_or_not_at_all(tmp_path):
    """The staging folder of ``nnunet-calibrate``'s copy (found by hostile testing: a rerun mixed two runs' folds,
    and a failed one left them half-replaced): a clean block replaces the folder whole (nothing of the old content
    remains), a failed one leaves it as it was, a killed run's staging folder is removed by the next run, and the
    lock file does not stay behind."""
    out = tmp_path / "copy"
    with atomic_folder(out) as staging:
        assert staging.parent == tmp_path and staging.name.startswith(".copy.partial-")
        assert (out / OUTPUT_LOCK_FILE).is_file()  # held while the block runs
        atomic_write_text(staging / "old.txt", "1")
        atomic_write_text(staging / "sub" / "kept.txt", "1")
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == ["old.txt", "sub", "sub/kept.txt"]
    with pytest.raises(RuntimeError, match="half-way"), atomic_folder(out) as staging:
        atomic_write_text(staging / "new.txt", "2")
        raise RuntimeError("failed half-way")
    assert sorted(p.name for p in out.iterdir()) == ["old.txt", "sub"]
    (tmp_path / ".copy.partial-killed.dir").mkdir()  # a killed run's
    (tmp_path / ".other.partial-x.dir").mkdir()  # another folder's: kept
    with atomic_folder(out) as staging:
        atomic_write_text(staging / "new.txt", "2")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.partial-x.dir", "copy"]
    assert [p.name for p in out.iterdir()] == ["new.txt"]
    with output_lock(out):  # the folder is free again (this process would re-enter; the file is gone)
        pass
    assert not (out / OUTPUT_LOCK_FILE).exists()


def test_atomic_folder_keeps_the_mode_of_the_folder(tmp_path):
    """Found by hostile testing: the staging folder of ``tempfile.mkdtemp`` (0700) became the folder, so a calibrated
    model folder shared on a server was readable by its owner only whatever the umask (0755 under 022), and an
    existing 0775 folder lost its group's access."""
    import stat

    old = os.umask(0o022)
    try:
        out = tmp_path / "new_copy"
        with atomic_folder(out) as staging:
            atomic_write_text(staging / "plans.json", "{}")
        plain = tmp_path / "plain"
        plain.mkdir()
        assert stat.S_IMODE(out.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o755
        shared = tmp_path / "shared"
        shared.mkdir()
        os.chmod(shared, 0o775)
        with atomic_folder(shared) as staging:
            atomic_write_text(staging / "a.txt", "x")
        assert stat.S_IMODE(shared.stat().st_mode) == 0o775
        os.umask(0o077)
        private = tmp_path / "private"
        with atomic_folder(private) as staging:
            atomic_write_text(staging / "a.txt", "x")
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
    finally:
        os.umask(old)


def test_input_folder_refuses_what_is_no_folder_naming_its_parameter(tmp_path):
    from monai_unc.io import input_folder

    folder, afile, link = tmp_path / "labels", tmp_path / "a.nii.gz", tmp_path / "link"
    folder.mkdir()
    afile.write_bytes(b"")
    os.symlink(tmp_path / "gone", link)
    assert input_folder(str(folder), "labels") == folder  # a folder: its path
    cases = [  # (path, parameter, what, error type, message)
        (tmp_path / "missing", "labels", None, FileNotFoundError, f"labels folder not found: {tmp_path / 'missing'}"),
        (afile, "images", None, NotADirectoryError, f"images folder {afile} is a file, not a folder"),
        (link, "predictions", None, FileNotFoundError,
         f"predictions folder {link} is a symbolic link to {tmp_path / 'gone'}, which does not exist"),
        ("", "input", "--input folder", ValueError, "--input folder must be a path, got an empty one ('')"),
        (tmp_path / "missing", None, None, FileNotFoundError, f"folder not found: {tmp_path / 'missing'}"),
    ]
    for path, parameter, what, kind, message in cases:
        with pytest.raises(kind) as e:
            input_folder(path, parameter, what)
        assert str(e.value) == message
        assert getattr(e.value, "parameter", None) == parameter  # None: not marked, its caller marks it
