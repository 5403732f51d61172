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
