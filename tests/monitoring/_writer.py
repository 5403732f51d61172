"""A writer process of the concurrency test: it imports the store only (no torch), so it starts at once."""

from __future__ import annotations


def record_runs(url, runs, tag, q):
    """Record ``runs`` (``(rule, cases, source_digest)``) into the store at ``url``; put "ok" or the error on ``q``."""
    try:
        from monai_unc.monitoring.store import MonitorStore

        with MonitorStore(url) as store:
            for rule, cases, digest in runs:
                store.record_run(rule, cases, source_digest=digest, folder="f", triaged_at="t", model_digest=None,
                                 command=[tag])
        q.put("ok")
    except BaseException as e:  # noqa: BLE001 (reported to the parent)
        q.put(repr(e))
