"""A hand-damaged schema version in a monitoring store is one error line naming the store (hostile review: "invalid
literal for int() with base 10: 'abc'" and "the monitoring database has schema version 999", naming no store)."""

from __future__ import annotations

import sqlite3

import pytest

from monai_unc import cli
from monai_unc.monitoring.store import MonitorStore
from tests.monitoring._stream import make_rule, write_triage


def _edited_store_refused(tmp_path, capsys, command, edit, params=()):
    """A new store edited by ``edit``; ``monitor <command>`` on it: exit 2, one stderr line naming the store, nothing
    written. Returns the store's path and the line."""
    db = tmp_path / "monitor.db"
    with MonitorStore(db):
        pass
    with sqlite3.connect(db) as c:
        c.execute(edit, params)
    c.close()
    before = db.read_bytes()
    argv = ["monitor", command, "--db", str(db)]
    if command == "record":
        triage = write_triage(tmp_path / "t", make_rule([0.1, 0.2, 0.3]), [{"case": "c1", "score": 0.2}],
                              digest=True)
        argv = ["monitor", "record", str(triage), "--db", str(db), "--site", "A"]
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(db) in err, err
    assert db.read_bytes() == before  # nothing written
    return db, err


@pytest.mark.parametrize("value", ["abc", "", "1.0", " 1", "999"])
@pytest.mark.parametrize("command", ["status", "verify", "record"])
def test_a_damaged_schema_version_names_the_store(tmp_path, capsys, value, command):
    db, err = _edited_store_refused(tmp_path, capsys, command, "UPDATE monitor_meta SET value = ? WHERE key = "
                                    "'schema_version'", (value,))
    assert ("newer than this monai-unc" in err) if value == "999" else ("is no version number" in err), err


@pytest.mark.parametrize("edit", ["DELETE FROM monitor_meta WHERE key = 'schema_version'",
                                  "UPDATE monitor_meta SET value = '0' WHERE key = 'schema_version'"])
@pytest.mark.parametrize("command", ["status", "verify", "record"])
def test_a_store_whose_version_row_is_gone_is_refused_as_edited(tmp_path, capsys, edit, command):
    """Found by the upgrade review: a store with its tables but version 0 was called older ("monai-unc monitor record
    or label upgrades it"), and record then failed with "table rules already exists"."""
    db, err = _edited_store_refused(tmp_path, capsys, command, edit)
    assert "is missing or 0" in err and "restore the store from a backup" in err and "upgrades it" not in err, err
