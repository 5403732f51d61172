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


def _lines_of_another_process(body, tmp_path, failure: str) -> list[str]:
    """The lines ``body()`` returns, computed in another process, a copy of this one (no interpreter start-up);
    the test fails with ``failure`` when it has not finished within 60 s (a blocking ``open``), and it is killed."""
    import json
    import time
    import traceback

    result = tmp_path / "lines.json"
    pid = os.fork()
    if pid == 0:
        try:
            result.write_text(json.dumps(body()))
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(0)
    deadline = time.monotonic() + 60
    while os.waitpid(pid, os.WNOHANG)[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail(failure)
        time.sleep(0.01)
    assert result.exists(), "the other process failed (its traceback on stderr)"
    return json.loads(result.read_text())



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
    from monai_unc.io import part_lock

    out = tmp_path / "shared_out"
    out.mkdir()
    os.mkfifo(out / name)

    def probe():
        lines = [str(output_lock_holder(out))]
        for take in (lambda: output_lock(out, "x"), lambda: part_lock(out, "run1", 1, "x")):
            try:
                with take():
                    lines.append("held")
            except ValueError as e:
                lines.append(f"refused {len(str(e).splitlines())}")
        return lines

    lines = _lines_of_another_process(probe, tmp_path, f"a FIFO planted as {name} blocked the lock")
    assert lines[0] == "None"
    assert lines[1:] == (["refused 1", "refused 1"] if name == OUTPUT_LOCK_FILE else ["held", "held"]), lines


def test_a_held_fifo_as_a_parts_lock_file_is_named_without_blocking(tmp_path):
    """Found by hostile testing: the line of a part's lock file that another process holds was read whole, following
    a link: a FIFO held by a planted process blocked every run's probe of the folder. Its start is read without
    blocking: the folder is taken as held (refused in one line), nothing hangs."""
    import fcntl

    out = tmp_path / "shared_out"
    out.mkdir()
    fifo = out / ".monai-unc.part-3.lock"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR)  # a FIFO opened for both ends does not block
    fcntl.flock(fd, fcntl.LOCK_EX)

    def probe():  # another process: its own opens of the FIFO, this process's lock held on it
        lines = [str(output_lock_holder(out))]
        try:
            with output_lock(out, "x"):
                lines.append("held")
        except ValueError as e:
            lines.append(f"refused {len(str(e).splitlines())}")
        return lines

    try:
        lines = _lines_of_another_process(probe, tmp_path, "a held FIFO as a part's lock file blocked the probe")
    finally:
        os.close(fd)
    assert lines == ["holder unknown", "refused 1"], lines
