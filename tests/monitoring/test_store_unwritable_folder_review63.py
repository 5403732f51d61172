"""A monitoring store in a folder the reader cannot write (review 63: read-only inputs and a non-root user).

Found by running every command as an unprivileged user on root-owned, read-only inputs: ``monitor status``,
``verify`` and ``report`` on the store the service account records into (a root-owned ``0555`` folder, the file
``0444``) said ``cannot open the database ...: attempt to write a readonly database`` (exit status 2): SQLite
could not make the write-ahead log's index (``<db>-shm``) beside the store, although the log is empty. Only a
read-only mount was read; a folder without write permission is the same case.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.monitoring import MonitorStore
from monai_unc.workflows.monitor import record_triage
from tests._users import run_unprivileged
from tests._users import shared_folder as _shared_folder

from ._stream import make_rule, write_triage


@pytest.fixture
def shared(tmp_path):
    yield from _shared_folder(tmp_path)

def _checks(db: Path, dash: Path, capsys) -> None:
    """What a reader of the store does: the store read-only, then ``verify``, ``status`` and ``report``."""
    with MonitorStore(str(db), read_only=True) as store:
        assert [c["case_id"] for c in store.cases()] == ["a"]
        assert store.verify().ok
    for argv in (["monitor", "verify", "--db", str(db)], ["monitor", "status", "--db", str(db)],
                 ["monitor", "report", "--db", str(db), "-o", str(dash / "monitor.html")]):
        assert cli.main(argv) == 0, (argv, capsys.readouterr().err)


@pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"), reason="POSIX permissions and fork")
@pytest.mark.parametrize("read_before", [False, True], ids=["closed-by-its-writer", "read-by-its-owner"])
def test_the_read_only_commands_read_a_store_in_a_folder_the_reader_cannot_write(shared, capsys, read_before):
    """``read-by-its-owner``: the owner ran ``monitor status`` last, which leaves an empty ``<db>-wal`` and its
    ``<db>-shm`` (a read-only connection does not remove them), neither writable by the reader."""
    rule = make_rule([0.1, 0.2])
    warm = shared / "warm"
    warm.mkdir()
    record_triage(str(warm / "m.db"), write_triage(shared / "t0", rule, [{"case": "a", "score": 0.1}], digest=True))
    _checks(warm / "m.db", shared, capsys)  # everything they import is loaded before the reader runs them
    store_dir = shared / "store"
    store_dir.mkdir()
    db = store_dir / "m.db"
    record_triage(str(db), write_triage(shared / "t", rule, [{"case": "a", "score": 0.1}], digest=True))
    assert sorted(os.listdir(store_dir)) == ["m.db"]  # the last writer closed it: no log, no index
    if read_before:
        assert cli.main(["monitor", "status", "--db", str(db)]) == 0
    before = sorted(os.listdir(store_dir))
    dash = shared / "dash"
    dash.mkdir()
    os.chmod(dash, 0o777)
    for name in before:
        os.chmod(store_dir / name, 0o444)
    os.chmod(store_dir, 0o555)
    capsys.readouterr()
    try:
        run_unprivileged(lambda: _checks(db, dash, capsys))
    finally:
        os.chmod(store_dir, 0o755)
    assert sorted(os.listdir(store_dir)) == before  # nothing made beside it
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o444


@pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"), reason="POSIX permissions and fork")
def test_recording_into_a_store_the_user_cannot_write_is_one_line(shared, capsys):
    """The writers (``record``) still refuse such a store in one line (exit status 2), naming it."""
    tmp_path = shared
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    db = store_dir / "m.db"
    rule = make_rule([0.1, 0.2])
    record_triage(str(db), write_triage(tmp_path / "t", rule, [{"case": "a", "score": 0.1}], digest=True))
    later = write_triage(tmp_path / "t2", rule, [{"case": "b", "score": 0.1}], digest=True)
    argv = ["monitor", "record", str(later), "--db", str(db)]
    os.chmod(tmp_path / "t2", 0o755)
    os.chmod(db, 0o444)
    os.chmod(store_dir, 0o555)
    capsys.readouterr()

    def check() -> None:
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(db) in err[0] and "Traceback" not in err[0], err

    try:
        run_unprivileged(check)
    finally:
        os.chmod(store_dir, 0o755)
    with MonitorStore(str(db), read_only=True) as store:
        assert [c["case_id"] for c in store.cases()] == ["a"]
