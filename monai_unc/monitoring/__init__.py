"""Watching a deployed model: the monitoring store, its audit log, and the statistics of every site.

:mod:`.store` (SQLite or PostgreSQL: every triage decision, audited labels, the hash-chained audit log),
:mod:`.records` (reading triage folders, sites and label tables), :mod:`.status` (per rule and site: the conformal
test martingales of the case score and the image statistics, the harmful-shift test on audited risk, acceptance
rates). The formulas are :mod:`monai_unc.metrics.monitoring`; the commands are ``monai-unc monitor`` (see
docs/monitoring.md).

The names below are imported from their submodule on first access (PEP 562): :mod:`.store` needs only the standard
library, so a process that only writes to the store (a second writer, a cron job) starts without torch.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:  # what _LAZY loads on first access, for type checkers and the API reference
    from .records import (
        TriageRun,
        loss_of,
        model_digest,
        prediction_digest,
        read_label_table,
        read_sites,
        read_triage_run,
        sidecar_site,
    )
    from .status import ALL_SITES, GroupStatus, any_alarm, monitor_status, status_table
    from .store import GENESIS, SCHEMA_VERSION, AuditEntry, CaseRecord, MonitorStore, VerifyResult

#: public name -> the submodule defining it
_LAZY: dict[str, str] = {
    **dict.fromkeys(("TriageRun", "loss_of", "model_digest", "prediction_digest", "read_label_table", "read_sites",
                     "read_triage_run", "sidecar_site"), "records"),
    **dict.fromkeys(("ALL_SITES", "GroupStatus", "any_alarm", "monitor_status", "status_table"), "status"),
    **dict.fromkeys(("GENESIS", "SCHEMA_VERSION", "AuditEntry", "CaseRecord", "MonitorStore", "VerifyResult"),
                    "store"),
}
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, ("records", "status", "store"), globals())

__all__ = [
    "ALL_SITES",
    "GENESIS",
    "SCHEMA_VERSION",
    "AuditEntry",
    "CaseRecord",
    "GroupStatus",
    "MonitorStore",
    "TriageRun",
    "VerifyResult",
    "any_alarm",
    "loss_of",
    "model_digest",
    "monitor_status",
    "prediction_digest",
    "read_label_table",
    "read_sites",
    "read_triage_run",
    "sidecar_site",
    "status_table",
]
