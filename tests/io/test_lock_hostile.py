"""The lock file of an output folder planted as a link (found by hostile testing).

``output_lock`` opened ``<folder>/.monai-unc.lock`` following a symbolic link, truncated it and wrote its line
(``pid ..., command, since ...``) into it: a link planted in a shared output folder made every run there overwrite
the file it pointed to. A link, a hard link or a file that is not a regular one is refused now in one line, and the
file it points to is left as it was.
"""

from __future__ import annotations

import os

import pytest

from monai_unc.io import OUTPUT_LOCK_FILE, output_lock, output_lock_holder
from monai_unc.io.signing import generate_key_pair

TEXT = "precious clinical notes\n" * 3


def test_a_symbolic_link_as_lock_file_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(TEXT)
    out = tmp_path / "shared_out"
    out.mkdir()
    os.symlink(victim, out / OUTPUT_LOCK_FILE)
    with pytest.raises(ValueError, match="is a symbolic link") as e:
        with output_lock(out, "monai-unc evaluate"):
            pass
    assert len(str(e.value).splitlines()) == 1
    assert victim.read_text() == TEXT
    assert output_lock_holder(out) is None  # a reader's probe does not follow it either
    keys = tmp_path / "keys"  # the key pair's folder is held the same way
    keys.mkdir()
    os.symlink(victim, keys / OUTPUT_LOCK_FILE)
    with pytest.raises(ValueError, match="is a symbolic link"):
        generate_key_pair(keys)
    assert victim.read_text() == TEXT


def test_a_hard_link_as_lock_file_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text(TEXT)
    out = tmp_path / "out"
    out.mkdir()
    os.link(victim, out / OUTPUT_LOCK_FILE)
    with pytest.raises(ValueError, match="hard link"):
        with output_lock(out, "monai-unc triage"):
            pass
    assert victim.read_text() == TEXT


def test_a_plain_lock_file_still_works(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / OUTPUT_LOCK_FILE).write_text("pid 1, killed run\n")  # a killed run's file: taken over
    with output_lock(out, "toy") as lock:
        assert "toy" in lock.read_text()
    assert not (out / OUTPUT_LOCK_FILE).exists()


def test_a_symbolic_link_as_a_parts_lock_file_is_refused(tmp_path):
    """``part_lock`` (the parts of one run holding a folder together) refuses a planted link as its lock file, as
    ``output_lock`` does, and a ``run`` or ``part`` it could not write into its line, naming the argument."""
    from monai_unc.io import part_lock

    victim = tmp_path / "victim.txt"
    victim.write_text(TEXT)
    out = tmp_path / "shared_out"
    out.mkdir()
    os.symlink(victim, out / ".monai-unc.part-0.lock")
    with pytest.raises(ValueError, match="is a symbolic link") as e:
        with part_lock(out, "run1", 0, "monai-unc nnunet-predict"):
            pass
    assert len(str(e.value).splitlines()) == 1
    assert victim.read_text() == TEXT
    with part_lock(out, "run1", 1, "monai-unc nnunet-predict"):  # another part's file: the link is not touched
        assert output_lock_holder(out) is None  # this process's own hold does not count
    assert victim.read_text() == TEXT
    for run, part, name in (("a, b", 0, "run"), ("run1", -1, "part"), ("run1", True, "part")):
        with pytest.raises(ValueError, match=f"^{name} must"):
            with part_lock(out, run, part):
                pass


@pytest.mark.parametrize("name", [OUTPUT_LOCK_FILE, ".monai-unc.part-0.lock", ".monai-unc.part-7.lock"])
def test_a_fifo_planted_as_lock_file_blocks_nothing(tmp_path, name):
    """Found by hostile testing: a FIFO planted as a lock file (the folder's or a part's, which every run now probes)
    blocked the reader's probe (``output_lock_holder``) and every run into the folder (``output_lock``) in its
    ``open`` until a writer came: forever. Probed without blocking now: no holder; a run is refused in one line
    where the FIFO is its own lock file, goes on where it is a part's."""
    import subprocess
    import sys

    out = tmp_path / "shared_out"
    out.mkdir()
    os.mkfifo(out / name)
    code = ("import sys\nfrom monai_unc.io import output_lock, output_lock_holder, part_lock\n"
            f"out = {str(out)!r}\nprint(output_lock_holder(out), flush=True)\n"
            "for take in (lambda: output_lock(out, 'x'), lambda: part_lock(out, 'run1', 1, 'x')):\n"
            "    try:\n        with take():\n            print('held', flush=True)\n"
            "    except ValueError as e:\n        print('refused', len(str(e).splitlines()), flush=True)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"a FIFO planted as {name} blocked the lock")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")[:3]
    assert lines[0] == "None"
    assert lines[1:] == (["refused 1", "refused 1"] if name == OUTPUT_LOCK_FILE else ["held", "held"]), done.stdout


def test_a_held_fifo_as_a_parts_lock_file_is_named_without_blocking(tmp_path):
    """Found by hostile testing: the line of a part's lock file that another process holds was read whole, following
    a link: a FIFO held by a planted process blocked every run's probe of the folder. Its start is read without
    blocking: the folder is taken as held (refused in one line), nothing hangs."""
    import fcntl
    import subprocess
    import sys

    out = tmp_path / "shared_out"
    out.mkdir()
    fifo = out / ".monai-unc.part-3.lock"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)  # a FIFO opened for both ends does not block
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        code = ("from monai_unc.io import output_lock, output_lock_holder\n"
                f"print(output_lock_holder({str(out)!r}), flush=True)\n"
                f"try:\n    with output_lock({str(out)!r}, 'x'):\n        print('held')\n"
                "except ValueError as e:\n    print('refused', len(str(e).splitlines()))\n")
        try:
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        except subprocess.TimeoutExpired:
            pytest.fail("a held FIFO as a part's lock file blocked the probe")
    finally:
        os.close(fd)
    assert done.stdout.split("\n")[:2] == ["holder unknown", "refused 1"], (done.stdout, done.stderr)
