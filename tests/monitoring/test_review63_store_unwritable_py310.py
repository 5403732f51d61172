"""A store in a folder the reader may not write, read on Python 3.10 (the declared minimum; review 63).

Review 63 let ``monitor status`` / ``verify`` / ``report`` read a store in a folder the reader may not write (SQLite
cannot make the log's index ``<db>-shm`` there) by SQLite's extended result code ``SQLITE_READONLY_DIRECTORY``, which
Python gives as ``sqlite_errorcode`` from 3.11 on. Python 3.10, which ``requires-python`` admits, sets no code on the
exception: the fallback was never taken there, and the readers failed with ``attempt to write a readonly database``
(found by the hostile review of the combined change). The test runs the readers with the exceptions as Python 3.10
raises them (the same text, no ``sqlite_errorcode``).
"""

from __future__ import annotations

import os
import sqlite3
import sys

import pytest

from monai_unc.monitoring import MonitorStore
from monai_unc.monitoring import store as store_module
from monai_unc.workflows.monitor import record_triage
from tests._users import run_unprivileged
from tests._users import shared_folder as _shared_folder

from ._stream import make_rule, write_triage


class _Python310Connection(sqlite3.Connection):
    """A connection whose errors carry no ``sqlite_errorcode``, as Python 3.10's do."""

    def execute(self, *args, **kwargs):  # noqa: D102
        try:
            return super().execute(*args, **kwargs)
        except sqlite3.Error as e:
            raise type(e)(str(e)) from None


@pytest.fixture
def shared(tmp_path):
    yield from _shared_folder(tmp_path)


@pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"), reason="POSIX permissions and fork")
def test_a_store_in_a_folder_the_reader_cannot_write_is_read_with_python_310s_errors(shared, monkeypatch):
    rule = make_rule([0.1, 0.2])
    store_dir = shared / "store"
    store_dir.mkdir()
    db = store_dir / "m.db"
    record_triage(str(db), write_triage(shared / "t", rule, [{"case": "a", "score": 0.1}], digest=True))
    assert sorted(os.listdir(store_dir)) == ["m.db"]  # the last writer closed it: no log, no index
    connect = sqlite3.connect
    monkeypatch.setattr(store_module.sqlite3, "connect",
                        lambda *a, **k: connect(*a, **{**k, "factory": _Python310Connection}))
    os.chmod(db, 0o444)
    os.chmod(store_dir, 0o555)

    def check() -> None:
        with MonitorStore(str(db), read_only=True) as store:
            assert [c["case_id"] for c in store.cases()] == ["a"]
            assert store.verify().ok

    try:
        run_unprivileged(check)
    finally:
        os.chmod(store_dir, 0o755)
    assert sorted(os.listdir(store_dir)) == ["m.db"]  # nothing made beside it
