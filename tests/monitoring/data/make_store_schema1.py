"""Writes ``store_schema1.sql``: the SQL dump of a monitoring store as monai-unc wrote it at schema version 1.

Run with a monai-unc whose store is at schema 1 (0.2.0.dev0 before the prediction digests, schema 2) on its path,
from this folder: ``python make_store_schema1.py``. The store holds one run of two cases at ``Centre A`` (``p001``
accepted with the score 0.0, ``p002`` referred) and one audited label of ``p001``; the actor and the host are fixed
so that the dump names no machine. ``tests/monitoring/test_reused_case_id.py`` loads it (a store written by the
release before schema 2 must still be read and upgraded).
"""

import socket
import sqlite3
import tempfile
from pathlib import Path

import monai_unc.monitoring.store as store_module
from monai_unc.monitoring import MonitorStore, read_triage_run
from tests.monitoring._stream import make_rule, write_triage

assert store_module.SCHEMA_VERSION == 1, "needs a monai-unc whose monitoring store is at schema 1"
store_module._actor = lambda: "qc"
socket.gethostname = lambda: "monitor-host"
rule = make_rule([0.0, 0.1, 0.2, 0.3], target=0.1)
with tempfile.TemporaryDirectory() as d:
    folder = write_triage(Path(d) / "t1", rule, [{"case": "p001", "score": 0.0},
                                                 {"case": "p002", "score": 0.25, "decision": "review"}])
    run = read_triage_run(folder, site="Centre A", triaged_at="2026-01-05T00:00:00+00:00")
    with MonitorStore(f"{d}/v1.db") as store:
        store.record_run(run.rule, run.cases, source_digest=run.source_digest, folder="/data/triage_2026_01",
                         triaged_at=run.triaged_at, model_digest=run.model_digest,
                         command=["monai-unc", "monitor", "record"])
        store.add_labels([{"case": "p001", "dice": 0.9, "failure": 0, "loss": 0.0}], source="/data/audit.csv",
                         command=["monai-unc", "monitor", "label"])
        assert store.verify().ok
    conn = sqlite3.connect(f"{d}/v1.db")
    Path("store_schema1.sql").write_text("\n".join(conn.iterdump()) + "\n", encoding="utf-8")
    conn.close()
