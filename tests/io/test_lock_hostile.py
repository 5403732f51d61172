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
