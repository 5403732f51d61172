"""Hostile output paths for the checks of ``monai_unc.io.files``: the input file itself, links to it, a folder,
a path under a file, a broken link."""

from __future__ import annotations

import os

import numpy as np
import pytest


def _forked(body) -> int:
    """``body()`` in another process, a copy of this one (no interpreter start-up), with the default handlers of
    SIGTERM and SIGINT; its exit status (negative: the signal that ended it), 70 when ``body`` returns or raises."""
    import signal

    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            body()
        finally:
            os._exit(70)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


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


def test_a_gzip_writer_whose_construction_failed_writes_nothing_later():
    """Regression: a ``GzipBlockWriter`` whose header write failed (a full disk) was still finished by ``IOBase``'s
    finalizer, which wrote a deflate end and a gzip trailer to the caller's file when the object was collected; a
    bad argument left a half-built object whose finalizer raised."""
    import gc
    import io

    from monai_unc.io import GzipBlockWriter

    class Full(io.RawIOBase):
        def __init__(self) -> None:
            self.writes = 0

        def writable(self) -> bool:
            return True

        def write(self, b) -> int:
            self.writes += 1
            raise OSError(28, "No space left on device")

    raw = Full()
    unraisable = []
    hook, sys_hook = None, __import__("sys")
    hook, sys_hook.unraisablehook = sys_hook.unraisablehook, lambda u: unraisable.append(u)
    try:
        for threads in (1, 2):
            with pytest.raises(OSError, match="No space"):
                GzipBlockWriter(raw, threads=threads)
        for bad in ({"compresslevel": 10}, {"threads": 0}):
            with pytest.raises(ValueError):
                GzipBlockWriter(io.BytesIO(), **bad)
        gc.collect()  # once for the four (a collection of the suite's process takes a second or more)
    finally:
        sys_hook.unraisablehook = hook
    assert raw.writes == 2 and not unraisable  # the two headers only, nothing from the finalizers


def test_save_nifti_integers_out_of_int16_are_not_wrapped(tmp_path):
    """Regression: ``save_nifti`` chose int16 from the largest value only, so a value below -32768 wrapped
    (-40000 read back as 25536), and values beyond int32 wrapped as int32."""
    import nibabel as nib
    import numpy as np

    from monai_unc.io import save_nifti

    a = np.zeros((2, 3, 4), np.int64)
    a[0, 0, 0] = -40_000
    img = nib.load(save_nifti(a, np.eye(4), tmp_path / "neg.nii.gz"))
    assert img.get_data_dtype() == np.int32 and np.array_equal(np.asanyarray(img.dataobj), a)
    a[0, 0, 0] = -32_768
    img = nib.load(save_nifti(a, np.eye(4), tmp_path / "min16.nii.gz"))
    assert img.get_data_dtype() == np.int16 and np.array_equal(np.asanyarray(img.dataobj), a)
    for value, dtype in ((2**31, np.int64), (2**63 + 5, np.uint64), (-(2**31) - 1, np.int64)):
        b = np.zeros((2, 3, 4), dtype)
        b[1, 2, 3] = value
        with pytest.raises(ValueError, match="data holds integers .* beyond the int32 range"):
            save_nifti(b, np.eye(4), tmp_path / "big.nii.gz")
    assert not (tmp_path / "big.nii.gz").exists()
    img = nib.load(save_nifti(np.zeros((2, 3, 4), bool), np.eye(4), tmp_path / "mask.nii.gz"))
    assert img.get_data_dtype() == np.int16


@pytest.mark.parametrize("value", [0.5, 0.999, float("nan")])
def test_save_region_maps_uint8_refuses_values_that_are_not_0_or_1(tmp_path, value):
    """Regression: ``dtype="uint8"`` checked only the range [0, 1], so 0.5 and 0.999 were written as 0 (and NaN as 0
    with a cast warning): a fractional map silently saved as an empty mask."""
    import numpy as np

    from monai_unc.io import save_region_maps

    a = np.zeros((2, 3, 3, 3))
    a[0, 0, 0, 0] = value
    with pytest.raises(ValueError, match="0/1 region masks"):
        save_region_maps(a, np.eye(4), tmp_path / "m.nii.gz", dtype="uint8")
    assert not (tmp_path / "m.nii.gz").exists()
    a[0, 0, 0, 0] = 1
    assert save_region_maps(a.astype(bool), np.eye(4), tmp_path / "m.nii.gz", dtype="uint8").exists()


def _disk_full(*names: object) -> OSError:
    """The error of a write on a full disk: no file named (``f.write``), or the names a call gave it."""
    import errno

    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), *names)


def test_a_full_disk_error_names_the_file_being_written(tmp_path, monkeypatch):
    """Found by hostile testing: a full output disk printed ``OSError: [Errno 28] No space left on device`` without
    a folder or file, and a copy (the report's viewer scripts) named its source, a file inside the package."""
    import errno

    from monai_unc.io import atomic_copy, atomic_write, atomic_write_files, files, output_lock, partial_path
    from monai_unc.workflows.prepare import error_text

    dst = tmp_path / "out" / "case_probs.nii.gz"

    def write(tmp):
        raise _disk_full()

    with pytest.raises(OSError) as info:
        atomic_write(dst, write)
    assert info.value.errno == errno.ENOSPC and type(info.value) is OSError
    assert info.value.filename == str(dst) and error_text(info.value) == f"No space left on device: {dst}"

    def write_named(tmp):
        raise _disk_full(str(tmp))  # a writer that names its (hidden) temporary file

    with pytest.raises(OSError) as info:
        atomic_write(dst, write_named)
    assert info.value.filename == str(dst)
    with pytest.raises(OSError) as info:
        atomic_write_files(dst, write)
    assert info.value.filename == str(dst)
    assert sorted(p.name for p in dst.parent.iterdir()) == []  # nothing left behind

    src = tmp_path / "niivue.umd.js"
    src.write_text("js")
    copy = tmp_path / "rep" / "assets" / "niivue.umd.js"

    def copyfile(a, b):  # as shutil's sendfile copy reports a failed write: both paths, the source first
        raise _disk_full(str(a), None, str(b))

    monkeypatch.setattr(files.shutil, "copyfile", copyfile)
    with pytest.raises(OSError) as info:
        atomic_copy(src, copy)
    assert (info.value.filename, info.value.filename2) == (str(src), str(copy))
    assert error_text(info.value) == f"No space left on device: {copy}"
    assert not partial_path(copy).exists()

    real_write = os.write

    def os_write(fd, data):
        if bytes(data).startswith(b"pid "):  # the lock file's holder line
            raise _disk_full()
        return real_write(fd, data)

    monkeypatch.setattr(files.os, "write", os_write)
    with pytest.raises(OSError) as info, output_lock(tmp_path / "locked", "toy"):
        pass
    assert info.value.filename == str(tmp_path / "locked" / files.OUTPUT_LOCK_FILE)


def test_a_temporary_file_a_killed_run_left_does_not_block_the_next_write(tmp_path):
    """Found by hostile testing: kill -9 before the signing key's rename left ``.signing_key.pem.partial`` and every
    later ``keys --create`` failed with ``File exists`` (the key's writer refuses an existing file)."""
    from monai_unc.io import atomic_write, partial_path

    dst = tmp_path / "signing_key.pem"
    partial_path(dst).write_bytes(b"half a key")

    def exclusive(tmp):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(b"key")

    assert atomic_write(dst, exclusive).read_bytes() == b"key"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["signing_key.pem"]


def test_torch_save_on_a_full_disk_names_the_file(tmp_path):
    """Found by hostile testing: ``calibrate`` on a full disk (``atomic_torch_save``) failed with torch's
    ``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598``: no file, not a full disk
    to ``is_disk_full`` (so a run went on case after case), exit status 1 with a traceback."""
    from tests._full_disk import run_on_a_full_disk

    done = run_on_a_full_disk(tmp_path, """
import sys
import torch
from monai_unc.io import atomic_torch_save, is_disk_full
from monai_unc.workflows.prepare import error_text

dst = sys.argv[1] + "/model/calibrated.pt"
try:
    atomic_torch_save(dst, {"w": torch.ones(100_000)})  # 400 kB onto 64 KiB
except OSError as e:
    print(is_disk_full(e), error_text(e))
print(os.listdir(sys.argv[1] + "/model"))
""", size_kib=64)
    assert done.returncode == 0, done.stderr[-2000:]
    disk = tmp_path / "disk"
    assert done.stdout.splitlines() == [f"True No space left on device: {disk}/model/calibrated.pt", "[]"], done.stdout


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_torch_save_writing_onto_a_full_device_raises_the_write_error(tmp_path, monkeypatch):
    """Through a file object torch covers the write's ``OSError`` with its own ``RuntimeError`` (``unexpected
    pos``): the ``OSError`` of the kernel's full device is raised, naming the file; other errors stay torch's."""
    import builtins
    import errno

    import torch

    from monai_unc.io import atomic_torch_save, files

    dst = tmp_path / "calibrated.pt"

    def open_full(file, mode="r", *args, **kwargs):  # the temporary file's writes go to a full device
        return builtins.open("/dev/full" if ".partial" in str(file) else file, mode, *args, **kwargs)

    monkeypatch.setattr(files, "open", open_full, raising=False)  # a module global over the builtin, for io.files only
    for obj in ({"w": torch.ones(100_000)}, {"a": 1}):  # torch's writes, or only the buffer's flush at the end
        with pytest.raises(OSError) as info:
            atomic_torch_save(dst, obj)
        assert info.value.errno == errno.ENOSPC and info.value.filename == str(dst)
    monkeypatch.undo()

    class Refused:
        def __reduce__(self):
            raise RuntimeError("not saved")

    with pytest.raises(RuntimeError, match="not saved"):
        atomic_torch_save(dst, {"x": Refused()})
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert torch.load(atomic_torch_save(dst, {"w": torch.arange(3)}))["w"].tolist() == [0, 1, 2]


def test_a_link_planted_under_the_temporary_name_is_not_written_through(tmp_path):
    """Found by a review of shared output folders: the temporary name of a write (``.case1_probs.partial.nii.gz``)
    lay in the output folder itself, and a third-party writer (nibabel here) opens it by name: a co-user who can
    write into a shared output folder and links that name to another of the user's files (in a tight loop, between
    the removal of a stale file and the writer's open) made the write overwrite that file. The temporary file now
    lies in a private folder with a random name (mode 0700), which no one else can plant a link in."""
    import stat

    import nibabel as nib

    from monai_unc.io import atomic_write, clean_partial_files, partial_path

    victim = tmp_path / "home" / "rules.json"
    victim.parent.mkdir()
    victim.write_text('{"threshold": 0.3}')
    shared = tmp_path / "shared"
    shared.mkdir()
    dst = shared / "case1_probs.nii.gz"
    seen = {}

    def write(tmp):
        link = shared / partial_path(dst).name  # the co-user's loop wins the race
        link.unlink(missing_ok=True)
        link.symlink_to(victim)
        seen["mode"] = stat.S_IMODE(tmp.parent.stat().st_mode)
        seen["name"] = tmp.name
        nib.save(nib.Nifti1Image(np.ones((2, 2, 2), np.float32), np.eye(4)), tmp)

    atomic_write(dst, write)
    assert victim.read_text() == '{"threshold": 0.3}'
    assert np.asarray(nib.load(dst).dataobj).tolist() == np.ones((2, 2, 2)).tolist()
    assert seen == {"mode": 0o700, "name": ".case1_probs.partial.nii.gz"}  # the name still tells nibabel the format
    assert sorted(p.name for p in shared.iterdir()) == [".case1_probs.partial.nii.gz", "case1_probs.nii.gz"]
    assert clean_partial_files(shared) == 1 and victim.is_file()  # the planted link is removed, not its target


def test_the_private_folder_of_a_killed_write_is_cleaned_and_a_long_name_still_fits(tmp_path):
    """A run killed inside the write leaves its private folder, which clean_partial_files removes; a file name near
    the 255-byte limit still gets one (the folder's name is shortened, the temporary file's is not)."""
    from monai_unc.io import atomic_path, clean_partial_files

    dst = tmp_path / ("c" * 230 + ".npz")
    with pytest.raises(KeyboardInterrupt), atomic_path(dst) as tmp:
        np.savez(tmp, a=np.arange(3))
        left = tmp.parent
        raise KeyboardInterrupt
    assert not left.exists() and not dst.exists()  # an interrupt in the process removes it at once
    left.mkdir()  # as kill -9 would have left it
    (left / tmp.name).write_bytes(b"half")
    with atomic_path(dst) as tmp2:
        np.savez(tmp2, a=np.arange(3))
    assert np.load(dst)["a"].tolist() == [0, 1, 2]
    assert clean_partial_files(tmp_path) == 1
    assert [p.name for p in tmp_path.iterdir()] == [dst.name]


@pytest.mark.skipif(os.name == "nt", reason="SIGTERM ends a process at once on POSIX only")
def test_the_folder_a_killed_write_left_is_removed_by_the_next_write_of_the_file(tmp_path):
    """Found by the review of private folders: each write made a folder with a new random name, so a run killed
    mid-write (SIGTERM at a batch system's time limit, the OOM killer) left its folder and partial file for good in
    every folder that clean_partial_files does not cover (``evaluate``'s ``maps/`` and output, ``report``'s
    ``figures/``, ``nnunet-predict``'s output): three killed runs left three partial volumes after a clean rerun.
    The next write of the same file removes it again, as it removed the fixed temporary file of earlier versions;
    a link planted under the folder's name is not followed (a random folder is used instead)."""
    import signal

    from monai_unc.io import atomic_write

    dst = tmp_path / "maps" / "case1_predictive_entropy.nii.gz"

    def dying(tmp):
        tmp.write_bytes(b"x" * 100000)
        os.kill(os.getpid(), signal.SIGTERM)

    for _ in range(3):  # three runs killed mid-write, each another process
        assert _forked(lambda: atomic_write(dst, dying)) == -signal.SIGTERM
    assert any(p.name.startswith(".case1_predictive_entropy") for p in dst.parent.iterdir())  # the killed write's
    atomic_write(dst, lambda tmp: tmp.write_bytes(b"done"))
    assert sorted(p.name for p in dst.parent.iterdir()) == [dst.name]
    assert dst.read_bytes() == b"done"
    victim = tmp_path / "victim"
    victim.mkdir()
    (dst.parent / f".{dst.name}.partial.dir").symlink_to(victim)  # planted by a co-user of the shared folder
    atomic_write(dst, lambda tmp: tmp.write_bytes(b"again"))
    assert dst.read_bytes() == b"again" and list(victim.iterdir()) == []
    assert (dst.parent / f".{dst.name}.partial.dir").is_symlink()  # someone else's entry: left alone


def test_two_writes_of_one_file_at_once_both_complete(tmp_path):
    """Found by the review of the fixed private folder: the folder of a write still running was taken for a killed
    run's and removed by a second write of the same file (two jobs refreshing one shared file, two threads), so the
    first write failed with ``FileNotFoundError`` and the two wrote one temporary file. A write holds a lock on its
    folder; the second one writes in a folder of its own, and each write puts a whole file in place."""
    import threading

    from monai_unc.io import atomic_write

    dst = tmp_path / "summary.json"
    errors, started, b_done = [], threading.Event(), threading.Event()

    def write(tag: str, until: threading.Event | None) -> None:
        def slow(tmp):
            with open(tmp, "w") as f:
                f.write(f'{{"writer": "{tag}", ')
                f.flush()
                started.set()
                if until is not None:  # A goes on once B has finished: not after a sleep B might outlast
                    assert until.wait(60), "the second write never finished"
                f.write('"done": true}')
        try:
            atomic_write(dst, slow)
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(repr(e))

    first = threading.Thread(target=write, args=("A", b_done))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=write, args=("B", None))
    second.start()
    second.join()
    try:
        assert dst.read_text() == '{"writer": "B", "done": true}'  # while A still writes
    finally:
        b_done.set()
    first.join()
    assert errors == []
    assert dst.read_text() == '{"writer": "A", "done": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


@pytest.mark.skipif(os.name == "nt", reason="flock is POSIX")
def test_a_file_system_without_locks_leaves_no_private_folder_behind(tmp_path, monkeypatch):
    """A file system that refuses ``flock`` (NFS mounted ``nolock``: ``ENOLCK``) gets a folder with a random name
    for each write, and the fixed folder made before the lock was refused is not left behind empty."""
    import errno

    from monai_unc.io import atomic_write
    from monai_unc.io import files as files_mod

    def no_lock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(files_mod.fcntl, "flock", no_lock)
    for text in ("one", "two"):
        atomic_write(tmp_path / "a.json", lambda tmp, text=text: tmp.write_text(text))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]
    assert (tmp_path / "a.json").read_text() == "two"


@pytest.mark.skipif(os.name == "nt", reason="os.replace of a folder onto an empty one is POSIX")
def test_a_run_of_atomic_folder_killed_between_its_renames_loses_no_content(tmp_path):
    """Found by hostile testing of crash consistency: ``nnunet-calibrate`` killed (SIGKILL, the OOM killer) after
    ``atomic_folder`` moved the folder aside and before it renamed the new content in left no folder, and the next
    run removed the moved-aside content with the stale staging folders: when that run then failed, the calibrated
    model was gone for good, where a failed run leaves the folder as it was. The next run puts it back first."""
    from monai_unc.io import atomic_folder, atomic_write_text

    out = tmp_path / "model"
    with atomic_folder(out) as staging:
        atomic_write_text(staging / "weights.txt", "v1")

    def killed_between_the_renames():  # another process (os.replace patched there only)
        real = os.replace

        def replace(src, dst):
            real(src, dst)
            if os.fspath(src) == str(out):
                os._exit(137)

        os.replace = replace
        with atomic_folder(out) as staging:
            atomic_write_text(staging / "weights.txt", "v2")

    assert _forked(killed_between_the_renames) == 137
    assert not out.exists()  # killed between the renames
    with pytest.raises(RuntimeError, match="half-way"), atomic_folder(out):
        assert (out / "weights.txt").read_text() == "v1"  # put back before the block
        raise RuntimeError("failed half-way")
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    assert [p.name for p in out.iterdir()] == ["weights.txt"] and (out / "weights.txt").read_text() == "v1"


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL and flock are POSIX")
def test_the_scratch_folder_of_a_killed_run_is_removed_by_the_next_run(tmp_path):
    """Found by hostile testing of crash consistency: ``monai-unc calibrate`` killed (SIGKILL) while it collected the
    validation logits left ``.cal.pt.partial-logits-*.dir`` with the logits beside the output, and every later run,
    successful or not, left it there (nothing cleaned that folder): one more folder of logits per killed run. The next
    scratch folder of the same output removes those of dead runs; a live run's (locked) is left alone."""
    import signal

    from monai_unc.io import scratch_folder

    out = tmp_path / "cal.pt"

    def killed_run():  # another process
        with scratch_folder(out, "logits") as s:
            (s / "0.npy").write_bytes(b"x" * 1000)
            os.kill(os.getpid(), signal.SIGKILL)

    for _ in range(2):
        assert _forked(killed_run) == -signal.SIGKILL
    dead = sorted(p.name for p in tmp_path.iterdir())
    assert len(dead) == 1 and dead[0].startswith(".cal.pt.partial-logits-")  # the second run removed the first's
    (tmp_path / ".other.pt.partial-logits-x.dir").mkdir()  # another output's: kept
    with scratch_folder(out, "logits") as live:
        with scratch_folder(out, "logits") as second:  # a second live run of the same output
            assert live.is_dir() and second.is_dir() and live != second  # the live one is not removed
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".other.pt.partial-logits-x.dir", live.name])
    assert [p.name for p in tmp_path.iterdir()] == [".other.pt.partial-logits-x.dir"]


@pytest.mark.skipif(os.name != "posix", reason="flock")
def test_a_scratch_folder_beside_an_output_of_a_long_name_is_made(tmp_path):
    """Review 75: a scratch folder ``.<name>.partial-<what>-<random>.dir`` beside an output whose name is near the
    255-byte limit (a map of a long case id, as nnU-Net's export first wrote them) had a name too long for the file
    system (``File name too long``). The name is shortened in the folder's name, as for
    :func:`~monai_unc.io.atomic_write`'s private folder, and a folder a killed run left is still found by the next
    one."""
    from monai_unc.io import scratch_folder

    out = tmp_path / ("c" * 230 + "_pe.nii.gz")
    with scratch_folder(out, "map") as first:
        assert first.is_dir() and len(first.name.encode()) <= 255
        dead = first.with_name(first.name[:-len(".dir")] + "dead.dir")
        dead.mkdir()  # a killed run's (not locked)
    with scratch_folder(out, "map") as second:
        assert second.parent == tmp_path and not dead.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.name != "posix", reason="flock")
def test_a_scratch_folder_another_runs_sweep_holds_is_not_used(tmp_path, monkeypatch):
    """review48: another run's sweep that locked a new scratch folder (to remove it) made it be used unlocked."""
    import fcntl
    import shutil
    import tempfile

    from monai_unc.io import files

    real, held = tempfile.mkdtemp, []

    def mkdtemp(*args, **kwargs):
        path = real(*args, **kwargs)
        if not held:  # the first: the sweep of another run locks it between its creation and this run's lock
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append((path, fd))
        return path

    monkeypatch.setattr(files.tempfile, "mkdtemp", mkdtemp)
    folder, fd = files._held_scratch(tmp_path, ".cal.pt.partial-logits-")
    for path, sweep_fd in held:  # the sweep goes on: it removes the folder it holds
        shutil.rmtree(path)
        os.close(sweep_fd)
    try:
        assert fd is not None and folder.is_dir()
    finally:
        if fd is not None:
            os.close(fd)


@pytest.mark.skipif(os.name != "posix" or not hasattr(os, "getuid") or os.getuid() != 0,
                    reason="making a folder of another user needs root")
def test_the_sweep_leaves_another_users_scratch_folder_and_closes_it(tmp_path):
    """The sweep of dead scratch folders left another user's folder alone, but kept the descriptor it opened on it:
    one leaked file descriptor per such folder and scratch folder made (found by a reread of the sweep)."""
    from monai_unc.io import scratch_folder

    other = tmp_path / ".cal.pt.partial-logits-other.dir"
    other.mkdir()
    os.chown(other, 65534, 65534)  # nobody's
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        with scratch_folder(tmp_path / "cal.pt", "logits"):
            pass
    assert len(os.listdir("/proc/self/fd")) == before
    assert [p.name for p in tmp_path.iterdir()] == [other.name]  # left alone
