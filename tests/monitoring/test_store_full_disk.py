"""The SQLite monitoring store on a full disk: a write names the database file (``ENOSPC``, one line, exit 2), and
the read-only commands (``verify``, ``status``, ``report``) still read it and make nothing beside it."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from monai_unc import cli
from monai_unc.io import is_disk_full
from monai_unc.monitoring import MonitorStore
from monai_unc.workflows.monitor import record_triage
from tests._full_disk import run_on_a_full_disk
from tests._paths import ROOT

from ._stream import make_rule, raw_sql, write_triage


def test_a_full_database_is_a_full_disk_naming_its_file(tmp_path, capsys, monkeypatch):
    """Found by hostile testing: SQLite's ``database or disk is full`` (``SQLITE_FULL``) named no file and was no
    full disk to ``is_disk_full``."""
    db = tmp_path / "monitor.db"
    rule = make_rule([0.1, 0.2])
    record_triage(str(db), write_triage(tmp_path / "a", rule, [{"case": "a", "score": 0.1}]))
    real = sqlite3.connect

    def at_its_size(*args, **kwargs):  # the file may not grow: SQLite's own SQLITE_FULL
        conn = real(*args, **kwargs)
        conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
        return conn

    monkeypatch.setattr(sqlite3, "connect", at_its_size)
    big = write_triage(tmp_path / "b", rule, [{"case": f"b{i}", "score": 0.1} for i in range(2000)], digest=True)
    with pytest.raises(OSError) as info:
        record_triage(str(db), big)
    assert is_disk_full(info.value) and info.value.errno == errno.ENOSPC and info.value.filename == str(db)
    capsys.readouterr()
    assert cli.main(["monitor", "record", str(big), "--db", str(db)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"monai-unc monitor: error: No space left on device: {db}"]
    monkeypatch.undo()
    with MonitorStore(db, read_only=True) as store:
        assert [c["case_id"] for c in store.cases()] == ["a"] and store.verify().ok


def test_a_read_only_store_writes_nothing(tmp_path):
    """``read_only`` (the read-only commands) opens the file read-only: no write, no migration of an older schema."""
    db = tmp_path / "monitor.db"
    folder = write_triage(tmp_path / "a", make_rule([0.1, 0.2]), [{"case": "a", "score": 0.1}])
    record_triage(str(db), folder)
    with MonitorStore(db, read_only=True) as store:
        with pytest.raises(ValueError, match="readonly database"):
            store.add_labels([{"case": "a", "dice": 0.9, "failure": None, "loss": 0.0}], source="x")
    raw_sql(str(db), "UPDATE monitor_meta SET value = '0' WHERE key = 'schema_version'")
    before = db.read_bytes()
    # version 0 with the tables present: edited outside monai-unc (upgrade review), refused without a write
    with pytest.raises(ValueError, match="is missing or 0: the table was edited outside monai-unc; restore"):
        MonitorStore(db, read_only=True)
    assert db.read_bytes() == before


_RECORD_THEN_FILL = """
import json
import sys
from pathlib import Path

from monai_unc import cli
from monai_unc.monitoring import MonitorStore
from tests._scratch import process_folder
from tests.monitoring._stream import make_rule, write_triage

disk = Path(sys.argv[1])
db = disk / "monitor.db"
triage = Path(process_folder("monai-unc-triage-"))  # off the full disk; removed when the script exits
rule = make_rule([0.1, 0.2])
write_triage(triage / "a", rule, [{"case": "a", "score": 0.1}])
write_triage(triage / "b", rule, [{"case": f"b{i}", "score": 0.1} for i in range(300)])
assert cli.main(["monitor", "record", str(triage / "a"), "--db", str(db), "-q"]) == 0
"""
_COMMANDS = """
runs = {}
for name, argv in [("verify", ["verify"]), ("status", ["status"]),
                   ("report", ["report", "-o", str(triage / "m.html")]), ("record", ["record", str(triage / "b")])]:
    runs[name] = [cli.main(["monitor", *argv, "--db", str(db)]), sorted(p.name for p in disk.iterdir())]
print("RESULT", json.dumps(runs))
"""


_FULL_DISK = """
fill(disk)
""" + _COMMANDS + """
(disk / "filler").unlink()
with MonitorStore(db, read_only=True) as store:
    print("AFTER", len(store.cases()), store.verify().ok)
"""
#: no file may grow: run last in its interpreter (no file can be written after it); ``sys.argv[1]`` is the folder
_NO_GROWTH = """
import os, resource, signal

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
os.statvfs = lambda path: os.statvfs_result((4096, 4096, 1000, 0, 0, 1000, 0, 0, 0, 255))
""" + _COMMANDS


def _results(stdout: str, stderr: str, returncode: int) -> list[dict]:
    """The ``RESULT`` line(s) of a script, in order."""
    assert returncode == 0, stderr[-3000:]
    return [json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT ")]


@pytest.fixture(scope="module")
def full_disk_runs(tmp_path_factory) -> dict:
    """Both scenarios below in one interpreter (one start instead of two): the store on a real full disk (a tiny
    tmpfs, :func:`tests._full_disk.run_on_a_full_disk`) first, then, in another folder, the store where no file may
    grow (last: no file can be written after it). Where no tmpfs can be mounted, the second runs alone and
    ``"tmpfs"`` is the reason to skip the first. ``{"tmpfs": {...} or the skip reason, "no_growth": {...}}``, each
    with the scenario's ``runs``, the interpreter's ``stdout`` / ``stderr`` and the scenario's ``db``."""
    pytest.importorskip("resource")
    root = tmp_path_factory.mktemp("full_disk")
    grow = root / "grow"
    grow.mkdir()
    # the second scenario reads its folder as sys.argv[1], as the first reads its tmpfs
    second = f"sys.argv[1] = {str(grow)!r}\n" + _RECORD_THEN_FILL + _NO_GROWTH
    try:
        done = run_on_a_full_disk(root, _RECORD_THEN_FILL + _FULL_DISK + second, size_kib=512)
    except pytest.skip.Exception as reason:
        alone = subprocess.run([sys.executable, "-c", _RECORD_THEN_FILL + _NO_GROWTH, str(grow)], capture_output=True,
                               text=True, timeout=600,
                               env={**os.environ, "PYTHONPATH": str(ROOT), "MONAI_UNC_TEST_DEVICE": "cpu"})
        [runs] = _results(alone.stdout, alone.stderr, alone.returncode)
        return {"tmpfs": str(reason), "no_growth": {"runs": runs, "stdout": alone.stdout, "stderr": alone.stderr,
                                                    "db": grow / "monitor.db"}}
    full, no_growth = _results(done.stdout, done.stderr, done.returncode)
    common = {"stdout": done.stdout, "stderr": done.stderr}
    return {"tmpfs": {"runs": full, "db": root / "disk" / "monitor.db", **common},
            "no_growth": {"runs": no_growth, "db": grow / "monitor.db", **common}}


def test_the_store_on_a_full_disk(full_disk_runs):
    """Found by hostile testing: on a full disk ``monitor verify`` (and ``status``, ``report``) failed with
    ``disk I/O error`` (a reader of a WAL database makes its ``-shm`` index) and ``monitor record`` said the same,
    naming no file."""
    if isinstance(full_disk_runs["tmpfs"], str):
        pytest.skip(full_disk_runs["tmpfs"])
    done = full_disk_runs["tmpfs"]
    runs, db = done["runs"], done["db"]
    for name in ("verify", "status", "report"):  # read, nothing made beside the store
        assert runs[name] == [0, ["filler", "monitor.db"]], (name, runs, done["stderr"][-2000:])
    assert runs["record"][0] == 2
    assert f"monai-unc monitor: error: No space left on device: {db}" in done["stderr"].splitlines(), done["stderr"]
    assert "AFTER 1 True" in done["stdout"]  # nothing of the refused record


def test_the_read_only_commands_where_no_file_can_grow(full_disk_runs):
    """The same without a tmpfs: no file may grow (``RLIMIT_FSIZE`` 0, as on a full disk every write fails) and the
    file system reports no free block."""
    done = full_disk_runs["no_growth"]
    runs, db = done["runs"], done["db"]
    for name in ("verify", "status"):
        assert runs[name] == [0, ["monitor.db"]], (name, runs, done["stderr"][-2000:])
    assert runs["record"][0] == 2 and f"No space left on device: {db}" in done["stderr"]


def test_a_full_disk_is_recognised_without_sqlite_s_error_code(tmp_path, monkeypatch):
    """Python 3.10 (the declared minimum) sets no ``sqlite_errorcode`` on sqlite3's exceptions (3.11 does): a full
    disk was ``database or disk is full`` naming no file, and no full disk to ``is_disk_full`` (found by testing the
    declared minimum). Emulated by errors made without the code, as 3.10 raises them."""
    db = tmp_path / "monitor.db"
    rule = make_rule([0.1, 0.2])
    record_triage(str(db), write_triage(tmp_path / "a", rule, [{"case": "a", "score": 0.1}]))
    real = sqlite3.connect

    class FullDisk:  # a connection whose writes of many rows find the disk full
        def __init__(self, conn):
            self._conn = conn

        def __getattr__(self, name):
            return getattr(self._conn, name)

        def executemany(self, *args, **kwargs):
            error = sqlite3.OperationalError("database or disk is full")
            assert getattr(error, "sqlite_errorcode", None) is None  # as Python 3.10 raises it
            raise error

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: FullDisk(real(*a, **k)))
    with pytest.raises(OSError) as info:
        record_triage(str(db), write_triage(tmp_path / "b", rule, [{"case": f"b{i}", "score": 0.1} for i in range(3)]))
    assert is_disk_full(info.value) and info.value.errno == errno.ENOSPC and info.value.filename == str(db)

    def cannot_open(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite3, "connect", cannot_open)
    monkeypatch.setattr(os, "statvfs", lambda path: os.statvfs_result((4096, 4096, 1000, 0, 0, 1000, 0, 0, 0, 255)))
    with pytest.raises(OSError) as info:
        MonitorStore(db)
    assert is_disk_full(info.value) and info.value.filename == str(db)
    monkeypatch.setattr(os, "statvfs", lambda path: os.statvfs_result((4096, 4096, 1000, 500, 500, 1000, 0, 0, 0,
                                                                       255)))
    with pytest.raises(ValueError, match="cannot open the database .*disk I/O error"):  # free blocks: no full disk
        MonitorStore(db)
