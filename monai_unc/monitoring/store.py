"""The monitoring store: every triage decision, audited labels and a hash-chained audit log, in one database.

SQLite by default (a file: nothing to start; the standard library's ``sqlite3`` in WAL mode), PostgreSQL by URL
(``postgresql://user@host/db``, with the ``monitor`` extra: ``pip install 'monai-unc[monitor]'``, psycopg 3). Both
run the same SQL through the DB-API; the schema is versioned (:data:`MIGRATIONS`, the version in the table
``monitor_meta``) and a database written by a newer version is refused.

Every change is one transaction that also appends its audit entry, so two triage runs recording at once lose
nothing (SQLite: ``BEGIN IMMEDIATE``, a writer waits for the other; PostgreSQL: an exclusive lock on the audit
table) and a writer killed in the middle leaves no half record (the transaction is rolled back). The audit log is
append-only and hash-chained: each entry holds the SHA-256 of the previous one and a digest of the rows it wrote,
so :meth:`MonitorStore.verify` detects an entry or a row that was edited or deleted (docs/monitoring.md says what
it cannot detect).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import math
import os
import re
import socket
import sqlite3
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .. import __version__

__all__ = [
    "SCHEMA_VERSION",
    "MIGRATIONS",
    "GENESIS",
    "UNKNOWN_SITE",
    "ALL_SITES",
    "MonitorStore",
    "CaseRecord",
    "AuditEntry",
    "VerifyResult",
    "entry_hash",
    "rows_digest",
    "redact_url",
    "sqlite_file",
]

#: the hash the first audit entry chains to
GENESIS = "0" * 64
#: the site of a case whose site nobody gave
UNKNOWN_SITE = "unknown"
#: the name of the pooled stream of all sites (reserved: no case's site may have it)
ALL_SITES = "(all sites)"
#: ``(version, statements)`` of each schema migration, in order; ``{id}`` is the dialect's auto-increment key
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, (
        "CREATE TABLE rules (digest TEXT PRIMARY KEY, score TEXT NOT NULL, target_risk DOUBLE PRECISION, "
        "risk TEXT NOT NULL, failure_dice DOUBLE PRECISION, calibration_scores TEXT NOT NULL, body TEXT NOT NULL)",
        "CREATE TABLE runs (id {id}, audit_seq BIGINT NOT NULL, source_digest TEXT NOT NULL UNIQUE, "
        "recorded_at TEXT NOT NULL, triaged_at TEXT NOT NULL, folder TEXT NOT NULL, "
        "rule_digest TEXT NOT NULL REFERENCES rules(digest), model_digest TEXT, n_cases INTEGER NOT NULL)",
        "CREATE TABLE cases (id {id}, run_id BIGINT NOT NULL REFERENCES runs(id), case_id TEXT NOT NULL, "
        "site TEXT NOT NULL, scanner TEXT, triaged_at TEXT NOT NULL, score DOUBLE PRECISION, "
        "image_z_max DOUBLE PRECISION, expected_dice DOUBLE PRECISION, decision TEXT NOT NULL, code TEXT NOT NULL, "
        "reason TEXT NOT NULL, rule_digest TEXT NOT NULL, model_digest TEXT, prediction TEXT, "
        "UNIQUE (run_id, case_id))",
        "CREATE INDEX cases_by_rule_site ON cases (rule_digest, site, id)",
        "CREATE INDEX cases_by_case_id ON cases (case_id, id)",
        "CREATE INDEX cases_by_run ON cases (run_id)",
        "CREATE INDEX runs_by_audit ON runs (audit_seq)",
        "CREATE TABLE labels (id {id}, audit_seq BIGINT NOT NULL, case_row BIGINT NOT NULL REFERENCES cases(id), "
        "recorded_at TEXT NOT NULL, dice DOUBLE PRECISION, failure INTEGER, loss DOUBLE PRECISION NOT NULL, "
        "source TEXT NOT NULL)",
        "CREATE INDEX labels_by_case ON labels (case_row, id)",
        "CREATE INDEX labels_by_audit ON labels (audit_seq, id)",
        "CREATE TABLE audit (seq BIGINT PRIMARY KEY, at TEXT NOT NULL, actor TEXT NOT NULL, host TEXT NOT NULL, "
        "version TEXT NOT NULL, command TEXT NOT NULL, action TEXT NOT NULL, details TEXT NOT NULL, "
        "prev_hash TEXT NOT NULL, hash TEXT NOT NULL)",
    )),
)
#: the newest schema this version reads and writes
SCHEMA_VERSION = MIGRATIONS[-1][0]
_CASE_COLUMNS = ("case_id", "site", "scanner", "triaged_at", "score", "image_z_max", "expected_dice", "decision",
                 "code", "reason", "rule_digest", "model_digest", "prediction")
#: the columns that make a recorded case the same decision when its triage folder is recorded again
_DECISION_COLUMNS = ("site", "case_id", "score", "image_z_max", "expected_dice", "decision", "code")
_DECISION_FLOATS = frozenset({"score", "image_z_max", "expected_dice"})
_LABEL_COLUMNS = ("case_row", "dice", "failure", "loss", "source")
_MAX_TEXT = 1000


def redact_url(url: str) -> str:
    """A database URL without its password, for messages.

    Example:
        >>> redact_url("postgresql://ann:secret@db.example/monitor")
        'postgresql://ann:***@db.example/monitor'
    """
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", str(url))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _in_order(obj: Any) -> str:
    """JSON text that keeps the order of the keys (a rule's regions are in channel order)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _clean(v: Any) -> Any:
    """A value as it is stored and hashed: floats as floats (NaN as None), others as they are."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _decision_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes a recorded case the same decision (NaN and None alike, floats as stored)."""
    return tuple(None if (v := _clean(row[c])) is None else (float(v) if c in _DECISION_FLOATS else v)
                 for c in _DECISION_COLUMNS)


def sqlite_file(url: str) -> Path | None:
    """The SQLite file a store URL names (a file path or ``sqlite:///PATH``); None for a PostgreSQL URL.

    Args:
        url: the ``--db`` value.

    Returns:
        The file's path (not checked), or None.

    Example:
        >>> str(sqlite_file("sqlite:///m.db")), sqlite_file("postgresql://host/db")
        ('m.db', None)
    """
    if re.match(r"^postgres(ql)?://", url):
        return None
    return Path(url[len("sqlite:///"):] if url.startswith("sqlite:///") else url)


def rows_digest(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """The SHA-256 of rows' canonical JSON (the given columns, in order, NaN as null).

    Example:
        >>> rows_digest([{"a": 1, "b": float("nan")}], ["a", "b"]) == rows_digest([{"a": 1, "b": None}], ["a", "b"])
        True
    """
    return hashlib.sha256(_canonical([[_clean(r[c]) for c in columns] for r in rows]).encode()).hexdigest()


def entry_hash(entry: Mapping[str, Any]) -> str:
    """The SHA-256 of an audit entry's canonical JSON (every field but ``hash``; ``prev_hash`` included).

    Example:
        >>> e = {"seq": 1, "at": "t", "actor": "a", "host": "h", "version": "v", "command": "c", "action": "x",
        ...      "details": "{}", "prev_hash": GENESIS}
        >>> len(entry_hash(e)), entry_hash(e) == entry_hash({**e, "hash": "whatever"})
        (64, True)
    """
    keys = ("seq", "at", "actor", "host", "version", "command", "action", "details", "prev_hash")
    return hashlib.sha256(_canonical({k: entry[k] for k in keys}).encode()).hexdigest()


@dataclass(frozen=True)
class CaseRecord:
    """One triage decision as the store keeps it.

    Attributes:
        case_id: the case's id.
        site: where it was scanned (a centre, a department; :data:`UNKNOWN_SITE` when not given).
        scanner: the scanner (manufacturer and model) or None.
        triaged_at: when it was triaged (ISO 8601, UTC).
        score: the rule's case score (NaN when undefined).
        image_z_max: the largest robust z-score of its image statistics (NaN without an image check).
        expected_dice: the label-free expected Dice (NaN when undefined).
        decision: ``"accept"`` or ``"review"``.
        code: the reason's code (``accepted``, ``above_threshold``, ``outside_range``, ...).
        reason: the reason in words.
        rule_digest: the digest of the referral rule that decided.
        model_digest: a digest of the model's weight digests, or None when they were not recorded.
        prediction: the path of the case's predicted segmentation (what audited label maps are compared with), or
            None.
    """

    case_id: str
    site: str
    scanner: str | None
    triaged_at: str
    score: float
    image_z_max: float
    expected_dice: float
    decision: str
    code: str
    reason: str
    rule_digest: str
    model_digest: str | None
    prediction: str | None = None


@dataclass(frozen=True)
class AuditEntry:
    """One entry of the audit log.

    Attributes:
        seq: its position, from 1.
        at: when (ISO 8601, UTC).
        actor: the user name.
        host: the machine.
        version: the monai-unc version.
        command: the command line.
        action: ``"record"``, ``"label"``, ``"migrate"``.
        details: JSON text (what was written, with the digest of its rows).
        prev_hash: the previous entry's hash (:data:`GENESIS` for the first).
        hash: this entry's hash (:func:`entry_hash`).
    """

    seq: int
    at: str
    actor: str
    host: str
    version: str
    command: str
    action: str
    details: str
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class VerifyResult:
    """What :meth:`MonitorStore.verify` found.

    Attributes:
        ok: no problem.
        n_entries: the number of audit entries.
        head: the hash of the last entry (keep a copy elsewhere: ``verify --expect-head`` compares it).
        problems: one line per problem found.
    """

    ok: bool
    n_entries: int
    head: str
    problems: tuple[str, ...] = field(default=())


def _actor() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name (a container without /etc/passwd entry)
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"


def _first_five(items: list[str], sep: str | None = None) -> str:
    """The first five of ``items`` for a message (joined with ``sep``, else as a list), `` ...`` when there are more."""
    shown = sep.join(items[:5]) if sep is not None else str(items[:5])
    return shown + (" ..." if len(items) > 5 else "")


def _check_text(value: Any, name: str, allow_none: bool = False) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be text, got {type(value).__name__}")
    if "\x00" in value or len(value) > _MAX_TEXT:
        raise ValueError(f"{name} must be at most {_MAX_TEXT} characters without NUL, got {value[:40]!r}...")
    return value


class MonitorStore:
    """A connection to the monitoring store (SQLite file or PostgreSQL database).

    Open it with :meth:`open` (creates or migrates the schema), use it as a context manager or call :meth:`close`.

    Args:
        url: a file path or ``sqlite:///PATH`` (SQLite; SQLAlchemy's convention: ``PATH`` is what follows the third
            slash, so ``sqlite:///m.db`` is relative to the working directory and ``sqlite:////var/m.db`` absolute),
            or ``postgresql://...`` (PostgreSQL, needs psycopg 3).
        create: create a missing SQLite file and the store's tables (False, for the read-only commands: a missing
            file, or a database that is not a monitoring store, is an error and nothing is written into it).
        timeout: seconds a writer waits for another writer's transaction.

    Raises:
        ValueError: an unsupported URL, a database that cannot be reached or opened (one line saying which, the
            password left out), or a schema newer than this version.
        ImportError: a PostgreSQL URL without psycopg (the message names the extra to install).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
        ...     store.schema_version(), store.verify().ok
        (1, True)
    """

    def __init__(self, url: str | os.PathLike, *, create: bool = True, timeout: float = 60.0) -> None:
        text = os.fspath(url)
        if not isinstance(text, str) or not text:
            raise ValueError(f"database must be a file path or a database URL, got {url!r}")
        self.url = text
        db_file = sqlite_file(text)
        self.dialect = "sqlite" if db_file is not None else "postgresql"
        self._name = redact_url(text)  # how errors name the store
        self._driver_errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
        if self.dialect == "sqlite":
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", text) and not text.startswith("sqlite:///"):
                raise ValueError(f"database {redact_url(text)!r}: unsupported URL (a file path, sqlite:///PATH or "
                                 "postgresql://...)")
            path = db_file
            if path.is_dir():
                raise ValueError(f"database {str(path)!r} is a folder, not a database file")
            if not create and not path.is_file():
                raise ValueError(f"database {str(path)!r} does not exist (monai-unc monitor record creates it)")
            try:
                self._conn: Any = sqlite3.connect(str(path), timeout=timeout, isolation_level=None)
                self._conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
                if not create:  # before WAL mode, which would write into a file that is no store
                    self._refuse_if_no_store(str(path))
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA foreign_keys = ON")
                self._conn.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.Error as e:
                self.close()
                raise ValueError(f"cannot open the database {str(path)!r}: {e}") from None
            except ValueError:
                self.close()
                raise
            self.path: Path | None = path
        else:
            try:
                import psycopg  # noqa: PLC0415 (optional: the monitor extra)
            except ImportError:
                raise ImportError("a PostgreSQL monitoring store needs psycopg 3: pip install 'monai-unc[monitor]'"
                                  ) from None
            try:
                self._driver_errors = (psycopg.Error,)
                self._conn = psycopg.connect(text, autocommit=True, connect_timeout=10)
                self._conn.execute("SET client_encoding TO 'UTF8'")  # text as str, whatever the server's encoding
            except psycopg.Error as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ValueError(f"cannot connect to the database {redact_url(text)!r}: {first}") from None
            self.path = None
            if not create:
                try:
                    self._refuse_if_no_store(redact_url(text))
                except BaseException:
                    self.close()
                    raise
        try:
            self._migrate()
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------------------------------------------- plumbing
    def __enter__(self) -> MonitorStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (an open transaction is rolled back)."""
        conn, self._conn = getattr(self, "_conn", None), None
        if conn is not None:
            conn.close()

    def _sql(self, sql: str) -> str:
        if self.dialect == "postgresql":
            return sql.replace("?", "%s").replace("{id}", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY")
        return sql.replace("{id}", "INTEGER PRIMARY KEY AUTOINCREMENT")

    @contextmanager
    def _db_errors(self) -> Iterator[None]:
        """The driver's errors as one ``ValueError`` naming the store.

        A damaged file, a table dropped outside the store, a lock held past the timeout or a server that went away
        is an error of the input (one line, exit status 2 on the command line), not a traceback whose exit status 1
        would read as "alarm raised" (``status``) or "tampered" (``verify``).
        """
        try:
            yield
        except self._driver_errors as e:
            text = str(e).strip()
            first = text.splitlines()[0] if text else type(e).__name__
            raise ValueError(f"the monitoring database {self._name!r}: {first}") from None

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._db_errors():
            return self._conn.execute(self._sql(sql), tuple(params))

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cursor = self._execute(sql, params)
        with self._db_errors():  # SQLite reads the rows lazily: a damaged page fails here
            return list(cursor.fetchall())

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction holding the writers' lock (the audit chain needs one writer at a time)."""
        if self.dialect == "sqlite":
            with self._db_errors():
                self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                with self._db_errors():
                    self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    with suppress(sqlite3.Error):  # the error that brought us here is the one to report
                        self._conn.execute("ROLLBACK")
                raise
        else:
            with self._db_errors(), self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(7263418)")  # the writers' lock
                yield

    def _refuse_if_no_store(self, name: str) -> None:
        """Refuse a database without the store's ``monitor_meta`` table (the read-only commands: ``create=False``).

        A wrong ``--db`` (another application's database, an empty file, a server's other database) must neither
        receive the store's tables from ``status`` nor read as a store with "no cases recorded".
        """
        if not self._table_exists("monitor_meta"):
            raise ValueError(f"database {name!r} is not a monitoring store (it has no monitor_meta table; "
                             "monai-unc monitor record creates a store)")

    def _table_exists(self, name: str) -> bool:
        if self.dialect == "sqlite":
            return bool(self._all("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))
        return bool(self._all("SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() "
                              "AND table_name = ?", (name,)))

    def schema_version(self) -> int:
        """The schema version of the database."""
        rows = self._all("SELECT value FROM monitor_meta WHERE key = 'schema_version'")
        return int(rows[0][0]) if rows else 0

    def _migrate(self) -> None:
        if self._table_exists("monitor_meta") and self.schema_version() == SCHEMA_VERSION:
            return
        with self._transaction():
            if not self._table_exists("monitor_meta"):
                self._execute("CREATE TABLE monitor_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            current = self.schema_version()
            if current > SCHEMA_VERSION:
                raise ValueError(f"the monitoring database has schema version {current}, newer than this monai-unc "
                                 f"reads ({SCHEMA_VERSION}): upgrade monai-unc")
            for version, statements in MIGRATIONS:
                if version <= current:
                    continue
                for statement in statements:
                    self._execute(statement)
                self._execute("DELETE FROM monitor_meta WHERE key = 'schema_version'")
                self._execute("INSERT INTO monitor_meta (key, value) VALUES ('schema_version', ?)", (str(version),))
                self._append_audit("migrate", {"schema_version": version}, command=None)

    # -------------------------------------------------------------------------------------------------- the audit
    def _append_audit(self, action: str, details: Mapping[str, Any], command: Sequence[str] | None) -> int:
        """Append an audit entry inside the current transaction; its ``seq``."""
        last = self._all("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
        seq, prev = (int(last[0][0]) + 1, str(last[0][1])) if last else (1, GENESIS)
        argv = list(sys.argv if command is None else command)
        entry = {"seq": seq, "at": _now(), "actor": _actor(), "host": socket.gethostname(), "version": __version__,
                 "command": " ".join(argv)[:_MAX_TEXT * 4], "action": action, "details": _canonical(details),
                 "prev_hash": prev}
        entry["hash"] = entry_hash(entry)
        self._execute("INSERT INTO audit (seq, at, actor, host, version, command, action, details, prev_hash, hash) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [entry[k] for k in AuditEntry.__dataclass_fields__])
        return seq

    def audit_log(self) -> list[AuditEntry]:
        """Every audit entry, in order."""
        cols = ", ".join(AuditEntry.__dataclass_fields__)
        return [AuditEntry(int(r[0]), *map(str, r[1:])) for r in self._all(f"SELECT {cols} FROM audit ORDER BY seq")]

    def verify(self, expect_head: str | None = None) -> VerifyResult:
        """Check the audit chain and the rows each entry wrote.

        Every entry must follow the previous one (``seq`` 1, 2, ...), hold the previous entry's hash and its own
        (recomputed); each ``record`` / ``label`` entry's digest of its rows must match the rows in the tables.

        Args:
            expect_head: the head hash kept elsewhere after an earlier check (detects entries removed from the
                end), or None.

        Returns:
            The :class:`VerifyResult`.
        """
        problems: list[str] = []
        prev, entries = GENESIS, self.audit_log()
        for i, e in enumerate(entries, start=1):
            if e.seq != i:
                problems.append(f"audit entry {i} is missing (found entry {e.seq} in its place)")
            if e.prev_hash != prev:
                problems.append(f"audit entry {e.seq} does not chain to the entry before it (an entry was edited or "
                                "deleted)")
            if entry_hash(e.__dict__) != e.hash:
                problems.append(f"audit entry {e.seq} was edited (its hash does not match its content)")
            prev = e.hash
            try:
                details = json.loads(e.details)
            except ValueError:
                problems.append(f"audit entry {e.seq}: its details are not JSON")
                continue
            expected = details.get("rows_digest") if isinstance(details, dict) else None
            if expected is not None and e.action in ("record", "label"):
                got = self._rows_digest_of(e.action, e.seq)
                if got != expected:
                    problems.append(f"the rows written by audit entry {e.seq} ({e.action}) were edited or deleted")
        for table, col in (("runs", "audit_seq"), ("labels", "audit_seq")):
            seqs = {e.seq for e in entries if e.action == ("record" if table == "runs" else "label")}
            orphans = [int(r[0]) for r in self._all(f"SELECT DISTINCT {col} FROM {table}") if int(r[0]) not in seqs]
            if orphans:
                problems.append(f"{table} rows without their audit entry (audit seq {orphans[:5]})")
        head = entries[-1].hash if entries else GENESIS
        if expect_head is not None and expect_head != head:
            problems.append(f"the head of the audit chain is {head[:16]}..., not the expected {expect_head[:16]}... "
                            "(entries were removed from the end, or the database was replaced)")
        return VerifyResult(not problems, len(entries), head, tuple(problems))

    def _rows_digest_of(self, action: str, seq: int) -> str:
        if action == "record":
            cols = ", ".join(f"c.{c}" for c in _CASE_COLUMNS)
            rows = self._all(f"SELECT {cols} FROM cases c JOIN runs r ON c.run_id = r.id WHERE r.audit_seq = ?",
                             (seq,))
            # in Python's (code point) order, as record_run hashed them: a server's collation (en-US) sorts otherwise
            found = sorted((dict(zip(_CASE_COLUMNS, r)) for r in rows), key=lambda d: d["case_id"])
            return rows_digest(found, _CASE_COLUMNS)
        rows = self._all("SELECT l.case_row, l.dice, l.failure, l.loss, l.source FROM labels l WHERE l.audit_seq = ? "
                         "ORDER BY l.id", (seq,))
        return rows_digest([dict(zip(_LABEL_COLUMNS, r)) for r in rows], _LABEL_COLUMNS)

    # ------------------------------------------------------------------------------------------------- the writes
    def record_run(
        self, rule: Mapping[str, Any], cases: Sequence[CaseRecord], *, source_digest: str, folder: str,
        triaged_at: str, model_digest: str | None, command: Sequence[str] | None = None,
    ) -> tuple[int, bool]:
        """Record one triage run (its rule and its cases) and its audit entry, in one transaction.

        A run is recorded once (its ``source_digest``), and so is a decision: a case that a run of the same
        ``folder`` already recorded with the same rule, site, case id, score, image z-score, expected Dice, decision
        and code (triage run again on a folder of predictions that gained cases rewrites ``triage.json`` with the
        earlier decisions in it) is skipped, so that it does not weigh twice in the alarms. A case id of that folder
        with another decision, or at another site, is another case and is recorded.

        Args:
            rule: the rule's JSON (``referral_rule.json`` as triage recorded it), with its ``digest``.
            cases: the run's decisions.
            source_digest: the SHA-256 of the run's ``triage.json`` (a run recorded twice is recorded once).
            folder: the triage folder (for the audit trail).
            triaged_at: when the run triaged (ISO 8601).
            model_digest: the model's digest or None.
            command: the command line of the audit entry (default ``sys.argv``).

        Returns:
            ``(run id, new)``: ``new`` False when the run was already in the store (nothing written). The run's
            ``n_cases`` (:meth:`runs`) counts the cases written, without those skipped.
        """
        digest = _check_text(rule.get("digest"), "the rule's digest")
        for c in cases:
            if _check_text(c.site, f"the site of case {c.case_id!r}") == ALL_SITES:
                raise ValueError(f"case {c.case_id!r}: the site name {ALL_SITES!r} is reserved for the pooled stream "
                                 "of all sites: give the site another name (--site, --sites)")
        with self._transaction():
            found = self._all("SELECT id FROM runs WHERE source_digest = ?", (source_digest,))
            if found:
                return int(found[0][0]), False
            if not self._all("SELECT 1 FROM rules WHERE digest = ?", (digest,)):
                score = rule.get("score")
                column = score.get("column") if isinstance(score, Mapping) else score
                cal = rule.get("calibration") if isinstance(rule.get("calibration"), Mapping) else {}
                cal_scores = [v for v in cal.get("case_scores", []) if isinstance(v, (int, float))]
                self._execute("INSERT INTO rules (digest, score, target_risk, risk, failure_dice, calibration_scores, "
                              "body) VALUES (?, ?, ?, ?, ?, ?, ?)",
                              (digest, str(column), rule.get("target_risk"), str(rule.get("risk", "failure")),
                               rule.get("failure_dice"), _canonical(cal_scores), _in_order(rule)))
            every = sorted((c.__dict__ for c in cases), key=lambda r: r["case_id"])
            known = self._decisions_of_folder(folder, digest, [r["case_id"] for r in every])
            rows = [r for r in every if _decision_key(r) not in known]
            details = {"triage": folder, "source_digest": source_digest, "rule_digest": digest,
                       "model_digest": model_digest, "n_cases": len(rows),
                       "n_already_recorded": len(every) - len(rows), "rows_digest": rows_digest(rows, _CASE_COLUMNS)}
            seq = self._append_audit("record", details, command)
            run_id = self._insert_id(
                "INSERT INTO runs (audit_seq, source_digest, recorded_at, triaged_at, folder, rule_digest, "
                "model_digest, n_cases) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (seq, source_digest, _now(), triaged_at, folder, digest, model_digest, len(rows)))
            cols = ", ".join(_CASE_COLUMNS)
            marks = ", ".join("?" * (len(_CASE_COLUMNS) + 1))
            self._executemany(f"INSERT INTO cases (run_id, {cols}) VALUES ({marks})",
                              [(run_id, *(_clean(r[c]) for c in _CASE_COLUMNS)) for r in rows])
        return run_id, True

    def _decisions_of_folder(self, folder: str, digest: str, case_ids: Sequence[str]) -> set[tuple[Any, ...]]:
        """The decisions (:func:`_decision_key`) of these case ids that the runs of a folder recorded under a rule.

        The folder's runs first (usually none: a new folder), then the cases by id (index ``cases_by_case_id``), so
        the cost follows the run's size, not the history of the folder or of the rule.
        """
        runs = {int(r[0]) for r in self._all("SELECT id FROM runs WHERE folder = ? AND rule_digest = ?",
                                             (folder, digest))}
        out: set[tuple[Any, ...]] = set()
        if not runs:
            return out
        ids = sorted(set(case_ids))
        cols = ", ".join(_DECISION_COLUMNS)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            for r in self._all(f"SELECT run_id, {cols} FROM cases WHERE case_id IN ({', '.join('?' * len(chunk))})",
                               chunk):
                if int(r[0]) in runs:
                    out.add(_decision_key(dict(zip(_DECISION_COLUMNS, r[1:]))))
        return out

    def _insert_id(self, sql: str, params: Sequence[Any]) -> int:
        if self.dialect == "sqlite":
            return int(self._execute(sql, params).lastrowid)
        return int(self._execute(sql + " RETURNING id", params).fetchone()[0])

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        with self._db_errors():
            if self.dialect == "sqlite":
                self._conn.executemany(self._sql(sql), rows)
            else:
                with self._conn.cursor() as cur:
                    cur.executemany(self._sql(sql), rows)

    def add_labels(self, labels: Sequence[Mapping[str, Any]], *, source: str,
                   command: Sequence[str] | None = None) -> int:
        """Record audited labels of recorded cases, with their audit entry, in one transaction.

        Each label goes to the latest record of its case id (at its ``site`` when the label names one). A case id
        recorded at more than one site is ambiguous without the site (sites that number their cases alike): the
        label of one site's case must not go to another site's, so such a label is refused.

        Args:
            labels: ``{"case", "dice", "failure", "loss"}`` per case, optionally ``"site"`` (``dice`` / ``failure``
                / ``site`` may be None; ``loss`` in ``[0, 1]`` is what the risk statistics use) and ``"case_row"``:
                the record (``row`` of :meth:`cases`) whose rule gave the loss. A label whose case was recorded again
                since (a newer record, perhaps under another rule) is then refused instead of going to the newer
                record with a loss of the older rule.
            source: where the labels came from (a CSV or a folder; for the audit trail).
            command: the command line of the audit entry.

        Returns:
            The number of labels recorded.

        Raises:
            ValueError: a case id that is not in the store (at the label's site), a case id of several sites without
                the site, a case recorded again after its ``case_row``, or a loss outside ``[0, 1]``.
        """
        with self._transaction():
            rows = []
            missing, ambiguous, moved = [], [], []
            for lab in labels:
                cid = _check_text(lab.get("case"), "case")
                site = _check_text(lab.get("site"), "site", allow_none=True)
                records = self._all("SELECT id, site FROM cases WHERE case_id = ? ORDER BY id DESC", (cid,))
                if site is not None:
                    records = [r for r in records if r[1] == site]
                elif len({r[1] for r in records}) > 1:
                    ambiguous.append(f"{cid!r} ({', '.join(sorted({str(r[1]) for r in records})[:5])})")
                    continue
                found = records[:1]
                if not found:
                    missing.append(cid if site is None else f"{cid} at {site}")
                    continue
                expected = lab.get("case_row")
                if expected is not None and int(found[0][0]) != int(expected):
                    moved.append(cid if site is None else f"{cid} at {site}")
                    continue
                loss = float(lab["loss"])
                if not 0 <= loss <= 1:
                    raise ValueError(f"the loss of case {cid!r} must be in [0, 1], got {loss!r}")
                dice = lab.get("dice")
                fail = lab.get("failure")
                rows.append({"case_row": int(found[0][0]), "dice": None if dice is None else float(dice),
                             "failure": None if fail is None else int(fail), "loss": loss,
                             "source": _check_text(source, "source")})
            if ambiguous:
                raise ValueError(f"{len(ambiguous)} labelled case id(s) recorded at more than one site "
                                 f"({_first_five(ambiguous, '; ')}): add a 'site' column to the labels table to say "
                                 "whose case each label is")
            if moved:
                raise ValueError(f"{len(moved)} labelled case(s) were recorded again while the labels were read "
                                 f"({_first_five(moved)}): their losses followed the earlier record's rule; run the "
                                 "command again")
            if missing:
                raise ValueError(f"{len(missing)} labelled case(s) not in the monitoring store "
                                 f"({_first_five(missing)}): record their triage run first (monai-unc monitor record)")
            details = {"source": source, "n_labels": len(rows), "rows_digest": rows_digest(rows, _LABEL_COLUMNS)}
            seq = self._append_audit("label", details, command)
            now = _now()
            self._executemany("INSERT INTO labels (audit_seq, case_row, recorded_at, dice, failure, loss, source) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?)",
                              [(seq, r["case_row"], now, r["dice"], r["failure"], r["loss"], r["source"])
                               for r in rows])
        return len(rows)

    # -------------------------------------------------------------------------------------------------- the reads
    def rules(self) -> dict[str, dict[str, Any]]:
        """The recorded rules by digest.

        Returns:
            ``{digest: {"score", "target_risk", "risk", "failure_dice", "calibration_scores", "num_classes",
            "regions", "regions_in_order", "image_reference"}}`` (``num_classes`` / ``regions`` / ``image_reference``
            None when the rule does not say; ``image_reference`` is the rule's JSON object, unchecked:
            :func:`~monai_unc.monitoring.status.image_reference_scores` reads it). ``regions_in_order`` is False
            for a rule recorded by a monai-unc that kept its JSON with sorted keys, where the order of the regions
            (the channels of region masks) is lost.
        """
        out = {}
        for d, score, target, risk, fd, cal, body in self._all(
                "SELECT digest, score, target_risk, risk, failure_dice, calibration_scores, body FROM rules "
                "ORDER BY digest"):
            doc = json.loads(body)
            nc = doc.get("num_classes") if isinstance(doc, dict) else None
            out[str(d)] = {"score": str(score), "target_risk": None if target is None else float(target),
                           "risk": str(risk), "failure_dice": None if fd is None else float(fd),
                           "calibration_scores": [float(v) for v in json.loads(cal)],
                           "num_classes": nc if isinstance(nc, int) and not isinstance(nc, bool) else None,
                           "regions": doc.get("regions") if isinstance(doc, dict) else None,
                           "regions_in_order": body != _canonical(doc),  # a rule's JSON never has sorted keys
                           "image_reference": doc.get("image_reference") if isinstance(doc, dict) else None}
        return out

    def cases(self) -> list[dict[str, Any]]:
        """Every recorded case in recording order, with its latest label's ``loss`` / ``dice`` (None when none).

        Returns:
            One dict per case row: the :class:`CaseRecord` fields, ``row`` (its id), ``run`` and ``loss``,
            ``dice``, ``failure`` of its latest label, and ``label_seq``: the audit entry of its first label (when
            its label arrived: the order of the risk test), None without a label.
        """
        cols = ", ".join(f"c.{c}" for c in _CASE_COLUMNS)
        sql = (f"SELECT c.id, c.run_id, {cols}, l.loss, l.dice, l.failure, "
               "(SELECT MIN(l3.audit_seq) FROM labels l3 WHERE l3.case_row = c.id) FROM cases c LEFT JOIN labels l "
               "ON l.id = (SELECT MAX(l2.id) FROM labels l2 WHERE l2.case_row = c.id) ORDER BY c.id")
        out = []
        for r in self._all(sql):
            d = {"row": int(r[0]), "run": int(r[1]), **dict(zip(_CASE_COLUMNS, r[2:2 + len(_CASE_COLUMNS)]))}
            for k in ("score", "image_z_max", "expected_dice"):
                d[k] = math.nan if d[k] is None else float(d[k])
            loss, dice, fail, label_seq = r[2 + len(_CASE_COLUMNS):]
            d["label_seq"] = None if label_seq is None else int(label_seq)
            d["loss"] = None if loss is None else float(loss)
            d["dice"] = None if dice is None else float(dice)
            d["failure"] = None if fail is None else int(fail)
            out.append(d)
        return out

    def runs(self) -> list[dict[str, Any]]:
        """The recorded runs in order: ``id``, ``recorded_at``, ``triaged_at``, ``folder``, digests, ``n_cases``."""
        keys = ("id", "audit_seq", "recorded_at", "triaged_at", "folder", "rule_digest", "model_digest", "n_cases")
        return [dict(zip(keys, r)) for r in self._all(f"SELECT {', '.join(keys)} FROM runs ORDER BY id")]
