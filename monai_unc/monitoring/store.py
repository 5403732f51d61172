"""The monitoring store: every triage decision, audited labels and a hash-chained audit log, in one database.

SQLite by default (a file: nothing to start; the standard library's ``sqlite3`` in WAL mode), PostgreSQL by URL
(``postgresql://user@host/db``, with the ``monitor`` extra: ``pip install 'monai-unc[monitor]'``, psycopg 3). Both
run the same SQL through the DB-API; the schema is versioned (:data:`MIGRATIONS`, the version in the table
``monitor_meta``) and a database written by a newer version is refused.

Every change is one transaction that also appends its audit entry, so two triage runs recording at once lose nothing
(SQLite: ``BEGIN IMMEDIATE``, a writer waits for the other; PostgreSQL: a transaction-level advisory lock in a
read-committed transaction; either waits ``timeout`` seconds at most) and a writer killed in the middle leaves no
half record (the transaction is rolled back). The audit log is append-only and hash-chained: each entry holds the
SHA-256 of the previous one and a digest of the rows it wrote, so :meth:`MonitorStore.verify` detects an entry or a row
that was edited or deleted, and a stored rule whose body no longer matches its digest (docs/monitoring.md says what it
covers and what it cannot detect). What is read back is checked too: a row edited outside the store into a value the
store never writes (text for a number, a loss outside [0, 1], a decision other than ``accept`` and ``review`` or a code
that contradicts it, the pooled stream's name as a site) is one ``ValueError`` line naming the store, never a traceback.
A row edited into another valid value (a ``review`` made ``accept`` with its code, a loss 0 made 1) reads as written,
and the statistics of ``monitor status`` follow it: :meth:`MonitorStore.verify` (``monai-unc monitor verify``) is what
finds it.
"""

from __future__ import annotations

import errno
import getpass
import hashlib
import json
import math
import numbers
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
from urllib.parse import unquote

from .. import __version__
from .._digest import content_digest
from ..keys import EXPECTED_DICE_ESTIMATES, LEGACY_REGION_ESTIMATE

__all__ = [
    "SCHEMA_VERSION",
    "OLDEST_READABLE_SCHEMA",
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
    "rule_body_digest",
    "check_rule",
    "MAX_TEXT",
    "redact_url",
    "sqlite_file",
]

GENESIS = "0" * 64
"""The hash the first audit entry chains to (its ``prev_hash``); the head of an empty chain."""
#: the site of a case whose site nobody gave
UNKNOWN_SITE = "unknown"
ALL_SITES = "(all sites)"
"""The name of the pooled stream of all sites (reserved: no case's site may have it)."""
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
    # what tells a new scan that reuses a case id from the same decision recorded again (:func:`_same_scan`)
    (2, ("ALTER TABLE cases ADD COLUMN prediction_sha256 TEXT",)),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]
"""The newest schema this version reads and writes (the table ``monitor_meta``); a newer store is refused."""
OLDEST_READABLE_SCHEMA = 1
"""The oldest schema the read-only commands read as it is (what they read has not changed since; a writer
migrates it)."""
_CASE_COLUMNS = ("case_id", "site", "scanner", "triaged_at", "score", "image_z_max", "expected_dice", "decision",
                 "code", "reason", "rule_digest", "model_digest", "prediction")
#: the columns that make a recorded case the same decision when its triage folder is recorded again; the prediction
#: file too, for a decision with neither a score nor an image z-score only (:func:`_decision_key`): a later batch that
#: reuses a case id ("001") with an undefined score (None: an empty or failed prediction) is another scan, from
#: another predictions folder (found by the review of the cross-folder skip)
_DECISION_COLUMNS = ("site", "case_id", "score", "image_z_max", "expected_dice", "decision", "code", "prediction")
_DECISION_FLOATS = frozenset({"score", "image_z_max", "expected_dice"})
#: the decisions of a case row (``CaseRecord.decision``); its code is ``accepted`` exactly for ``accept``
_DECISIONS = ("accept", "review")
#: the schema that added the column ``cases.prediction_sha256``
_PREDICTION_DIGESTS_SINCE = 2
#: what a ``record`` entry's ``predictions_digest`` covers of the case rows it wrote (the column of schema 2, which the
#: rows digest of ``_CASE_COLUMNS`` leaves out so that the entries written before it still verify)
_PREDICTION_DIGEST_COLUMNS = ("case_id", "prediction_sha256")
_LABEL_COLUMNS = ("case_row", "dice", "failure", "loss", "source")
#: the keys of the table ``monitor_meta`` (:meth:`MonitorStore.verify` reports any other)
_META_KEYS = frozenset({"schema_version"})
#: what a ``label`` entry's ``cases_digest`` covers of the case row each label names
_LABEL_CASE_COLUMNS = ("case_id", "site")
#: the most characters of a text field of the store (site, scanner, case id, reason, ...; no NUL either)
MAX_TEXT = 1000


#: the user part of a database URL with a password: ``(scheme://user)``, ``:``, ``(password)``, ``@``. libpq takes the
#: user part up to the ``@`` before the first ``/``, so the password may hold ``#``, ``?``, ``:`` (unencoded, as
#: generated passwords often do) and an ``@``; spaces too (a passphrase: libpq refuses it in a message that shows
#: it) when an ``@`` follows before the next ``/`` and no option starts after the space (a command line holding
#: ``... @db/m --site A@B`` or ``... @db --site A@B`` keeps its other arguments)
_USER_PASSWORD = re.compile(r"(://[^:/@?#\s]*):((?:[^/\s]|\s(?!-)(?=[^/]*@))*)@")
#: the same in a text that is one URL (an argument, the ``--db`` value): a space followed by ``-`` is part of the
#: password there too (in a command line it starts the next option)
_USER_PASSWORD_WHOLE = re.compile(r"(://[^:/@?#\s]*):((?:[^/\s]|\s(?=[^/]*@))*)@")
#: a ``password`` query parameter: a quoted value, or to the next ``&`` or ``#`` with its words (libpq refuses a raw
#: space in a message that shows the value: "*** horse battery" was left) up to a quote or the end of the text
_QUERY_PASSWORD = re.compile(r"([?&]password=)('[^'&#]*'|\"[^\"&#]*\"|(?:[^&#\s'\"]|\s+(?=[^&#\s'\"]))*)",
                             re.IGNORECASE)


def redact_url(url: str, whole: bool = False) -> str:
    """A database URL without its password, for messages, the audit log and the dashboard.

    The password of the user part (``user:password@``; also without a user name, and up to the last ``@`` when one
    was left unencoded in it) and a ``password`` query parameter are replaced by ``***``. The user part ends where
    libpq ends it, at the first ``/``: an unencoded ``#``, ``?``, ``:`` or space (a passphrase of several words, which
    libpq refuses in a message that shows it) in the password is part of it, as are the words of a ``password``
    query parameter (up to a quote, ``&``, ``#`` or the end of the text). Text around a URL is kept, so a
    command line or a message holding one may be given whole; there a space followed by ``-`` ends a password of the
    user part (it starts the next option), which ``whole=True`` says the text cannot hold.

    Args:
        url: a database URL, or text holding one.
        whole: ``url`` is one URL (a command-line argument, the ``--db`` value), not a text holding one.

    Returns:
        The text without the password.

    Example:
        >>> redact_url("postgresql://ann:secret@db.example/monitor")
        'postgresql://ann:***@db.example/monitor'
        >>> redact_url("--db postgresql://ann@db.example/monitor?sslmode=require&password=secret")
        '--db postgresql://ann@db.example/monitor?sslmode=require&password=***'
    """
    text = (_USER_PASSWORD_WHOLE if whole else _USER_PASSWORD).sub(lambda m: f"{m.group(1)}:***@", str(url))
    return _QUERY_PASSWORD.sub(r"\1***", text)


def _passwords(url: str) -> list[str]:
    """The password texts a database URL holds (as written, percent-decoded, and the parts around an unencoded ``@``),
    longest first: what a driver's message may echo (libpq names a password it cannot decode)."""
    found = [m.group(2) for m in _USER_PASSWORD_WHOLE.finditer(url)]
    found += [m.group(2) for m in _QUERY_PASSWORD.finditer(url)]
    pieces = {piece for p in found for text in (p, unquote(p)) for piece in (text, *text.split("@"))}
    return sorted((p for p in pieces if p), key=len, reverse=True)


def _message_without_password(message: str, url: str) -> str:
    """A driver's message about the database at ``url`` with the URL's password left out (:func:`redact_url`)."""
    for secret in _passwords(url):
        message = message.replace(secret, "***")
    return redact_url(message)


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


def _within_run_order(case_id: str) -> tuple[bytes, str]:
    """The place of a case among the cases of its run in the stream: a SHA-256 of its id, not the id itself.

    The cases of one run are triaged together, so their order carries no time; the alarms' guarantees need it to
    carry nothing about the scores either (the score alarm's p-values are uniform only while the stream is
    exchangeable). In case-id order, ids that name a subgroup (``GE_...`` before ``SIEMENS_...``, two scanners of a
    site whose scores differ) put each run's cases in blocks: without any change, the score martingale raised a false
    alarm in 52 % of simulated streams of 10 runs (alpha 0.05, scanners half a standard deviation apart), 100 % at one
    standard deviation (found by hostile testing). A hash of the id is an order that no id pattern shows through.

    Example:
        >>> sorted(["GE_1", "GE_2", "SIEMENS_1", "SIEMENS_2"], key=_within_run_order)
        ['GE_2', 'SIEMENS_2', 'SIEMENS_1', 'GE_1']
    """
    return hashlib.sha256(case_id.encode("utf-8", "surrogatepass")).digest(), case_id


def _decision_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes a recorded case the same decision (NaN and None alike, floats as stored).

    The prediction file counts only for a decision whose score and image z-score are both undefined (None: any other
    such case matches, and then nothing else tells two scans apart: two empty predictions on one grid have the same
    voxels' digest). A defined score, or the robust z-score of the image's statistics, already tells one scan from
    another, and the file is the path triage read, so the same file read through another mount or after a move to
    new storage would make every earlier decision of a growing predictions folder weigh twice in the alarms (found by
    the review of the prediction key; for a case with an undefined score and an image z-score, by hostile review).

    Example:
        >>> row = {"site": "A", "case_id": "002", "score": None, "image_z_max": 0.91, "expected_dice": None,
        ...        "decision": "review", "code": "undefined_score", "prediction": "/data/B/002_seg.nii.gz"}
        >>> _decision_key(row) == _decision_key({**row, "prediction": "/newstorage/B/002_seg.nii.gz"})
        True
        >>> no_z = {**row, "image_z_max": None}
        >>> _decision_key(no_z) == _decision_key({**no_z, "prediction": "/newstorage/B/002_seg.nii.gz"})
        False
    """
    key = [None if (v := _clean(row[c])) is None else (float(v) if c in _DECISION_FLOATS else v)
           for c in _DECISION_COLUMNS]
    if key[_DECISION_COLUMNS.index("score")] is not None or key[_DECISION_COLUMNS.index("image_z_max")] is not None:
        key[_DECISION_COLUMNS.index("prediction")] = None
    return tuple(key)


def _same_scan(digest: str | None, recorded: set[str | None]) -> bool:
    """Whether a case whose decision the store already holds (:func:`_decision_key`) is one of those recorded scans.

    ``recorded`` holds the prediction digests of the records with the same decision (None: unknown). The same
    prediction (its digest among them) is the same scan triaged again; another prediction, where every record's is
    known, is a new scan that reuses the case id with the same values (a follow-up scan of a patient whose score is
    0, a count, or undefined alike). Without a digest on either side nothing tells them apart: the case counts as
    recorded (a growing predictions folder triaged again must not weigh twice), and the run says how many such
    cases it skipped.

    Example:
        >>> _same_scan("sha256:aa", {"sha256:aa"}), _same_scan("sha256:bb", {"sha256:aa"}), _same_scan(None, {"x"})
        (True, False, True)
    """
    return digest is None or None in recorded or digest in recorded


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


#: the number columns of the rows an audit entry's ``rows_digest`` covers (the case rows' and the label rows')
_ZERO_SIGN_COLUMNS = frozenset({"score", "image_z_max", "expected_dice", "dice", "loss"})
#: the most zeros of an entry's rows whose signs :func:`_digest_up_to_zero_signs` tries in every combination
#: (``2 ** 10`` digests) whatever the number of rows; beyond it, the zeros of each column together, and every
#: combination too while that is at most :data:`_ZERO_SIGN_WORK` rows serialized
_ZERO_SIGN_SUBSETS = 10
#: the most row serializations (``2 ** zeros`` digests of the entry's rows) tried beyond :data:`_ZERO_SIGN_SUBSETS`
#: zeros (a run of 30 rows with 16 zeros, of 1000 rows with 11)
_ZERO_SIGN_WORK = 2**21


def _digest_up_to_zero_signs(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], expected: Any
) -> bool | None:
    """Whether rows read back from the store match the ``rows_digest`` their audit entry recorded, a zero perhaps
    written as ``-0.0``; None when that cannot be told.

    Before monai-unc stored a negative zero as ``0.0`` (``_unsigned_zero``), a score or Dice of ``-0.0`` was hashed
    into its entry as ``-0.0``; SQLite reads it back as ``0.0``, so such an untouched store failed ``verify``. The
    signs of the zeros (never their values, nor any other value) are therefore tried: the rows as
    read, then the zeros of each set of number columns negated together (one computation gives the same sign to a
    column's zeros), then every set of them when there are at most :data:`_ZERO_SIGN_SUBSETS` zeros or the ``2 **
    zeros`` digests serialize at most :data:`_ZERO_SIGN_WORK` rows. ``-0.0 == 0.0``, so a match is the same numbers as
    written: an edited value matches no variant. Beyond that budget a mismatch is either an edit or zeros of mixed
    signs in one column (two computations, or a Dice typed ``-0`` on some rows of an audit table), which the store
    cannot tell apart (earlier versions reported such an untouched store as edited): None.

    Args:
        rows: the entry's rows as read back, each a mapping of at least ``columns``.
        columns: the columns the digest covers, in order.
        expected: the ``rows_digest`` the entry recorded.

    Returns:
        True when a variant matches, False when none does and every variant was tried, None when none of those
        tried matches and not every one was tried.

    Example:
        >>> rows = [{"case_id": "a", "score": 0.0}, {"case_id": "b", "score": 0.5}]
        >>> old = rows_digest([{"case_id": "a", "score": -0.0}, rows[1]], ["case_id", "score"])
        >>> _digest_up_to_zero_signs(rows, ["case_id", "score"], old)
        True
        >>> _digest_up_to_zero_signs([rows[0], {"case_id": "b", "score": 0.0}], ["case_id", "score"], old)
        False
    """
    def row_text(r: Mapping[str, Any], negated: set[str] | frozenset[str]) -> str:
        return _canonical([_clean(-r[c] if c in negated else r[c]) for c in columns])

    try:  # rows_digest's JSON, one row at a time: a variant serializes only the rows whose zeros it negates
        texts = [row_text(r, set()) for r in rows]
    except (TypeError, ValueError):  # a value that no row of ours holds (bytes, a NaN): edited
        return False
    zeros = [(i, c) for i, r in enumerate(rows) for c in columns
             if c in _ZERO_SIGN_COLUMNS and isinstance(r[c], float) and r[c] == 0]
    # rows_digest's JSON "[t0,t1,...]" cut at the rows holding a zero: encoded[k] is the text between zero rows k - 1
    # and k (from "[", to "]"). A variant copies the hash state of the unchanged text before its first negated zero
    # and hashes only the rest; the variants share each prefix (review 64: each one serialized and hashed the whole
    # entry). The digests are rows_digest's, byte for byte.
    own: dict[int, list[str]] = {}  # per row holding zeros: their columns, in order (the order of their bits)
    for i, c in zeros:
        own.setdefault(i, []).append(c)
    zero_rows = list(own)
    bounds = [-1, *zero_rows, len(rows)]
    encoded = [(("[" if a < 0 else "") + "".join(("," if n else "") + texts[n] for n in range(a + 1, b))
                + ("]" if b == len(rows) else "")).encode() for a, b in zip(bounds, bounds[1:])]
    variants: dict[tuple[int, int], bytes] = {}  # (k, subset of zero row k's zeros negated): its text, once

    def variant(k: int, sub: int) -> bytes:
        if (k, sub) not in variants:
            i = zero_rows[k]
            negated = {c for b, c in enumerate(own[i]) if sub >> b & 1}
            variants[k, sub] = (("," if i else "") + (row_text(rows[i], negated) if sub else texts[i])).encode()
        return variants[k, sub]

    state = hashlib.sha256(encoded[0])
    before = []  # the hash state of the text before each zero row
    for k in range(len(zero_rows)):
        before.append(state.copy())
        state.update(variant(k, 0))
        state.update(encoded[k + 1])

    def digest(subs: Mapping[int, int]) -> str:
        """The digest with zero row ``k``'s zeros negated as the bits of ``subs[k]`` say (the others as read)."""
        changed = [k for k, sub in subs.items() if sub]
        if not changed:
            return state.hexdigest()
        h = before[min(changed)].copy()
        for k in range(min(changed), len(zero_rows)):
            h.update(variant(k, subs.get(k, 0)))
            h.update(encoded[k + 1])
        return h.hexdigest()

    def every_digest(k: int, h: Any, subs: tuple[int, ...], skip: set[tuple[int, ...]]) -> Iterator[str]:
        """The digests of every variant whose zero rows before ``k`` are as ``subs`` (``h``: the text so far)."""
        if k == len(zero_rows):
            if subs not in skip:
                yield h.hexdigest()
            return
        for sub in range(1 << len(own[zero_rows[k]])):
            g = h.copy()
            g.update(variant(k, sub))
            g.update(encoded[k + 1])
            yield from every_digest(k + 1, g, (*subs, sub), skip)

    if digest({}) == expected:
        return True
    by_column = sorted({c for _, c in zeros})
    tried = []  # the zeros of each set of columns negated together: per zero row, the subset of its zeros
    for mask in range(1, 1 << len(by_column)):
        chosen = {by_column[k] for k in range(len(by_column)) if mask >> k & 1}
        tried.append(tuple(sum(1 << b for b, c in enumerate(own[i]) if c in chosen) for i in zero_rows))
    every = len(zeros) <= _ZERO_SIGN_SUBSETS or (
        len(zeros) < _ZERO_SIGN_WORK.bit_length() and (1 << len(zeros)) * len(rows) <= _ZERO_SIGN_WORK)
    if any(digest(dict(enumerate(subs))) == expected for subs in tried):
        return True
    if not every:
        return None
    skip = {(0,) * len(zero_rows), *tried}
    return any(d == expected for d in every_digest(0, hashlib.sha256(encoded[0]), (), skip))


    if digest(0) == expected:
        return True
    by_column = sorted({c for _, c in zeros})
    tried = {0}
    for mask in range(1, 1 << len(by_column)):
        chosen = {by_column[k] for k in range(len(by_column)) if mask >> k & 1}
        tried.add(sum(1 << b for b, z in enumerate(zeros) if z[1] in chosen))
    every = len(zeros) <= _ZERO_SIGN_SUBSETS or (
        len(zeros) < _ZERO_SIGN_WORK.bit_length() and (1 << len(zeros)) * len(rows) <= _ZERO_SIGN_WORK)
    if any(digest(flipped) == expected for flipped in tried if flipped):
        return True
    if not every:
        return None
    return any(d == expected for d in every_digest(0, hashlib.sha256(encoded[0]), 0, tried))


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
        prediction_sha256: a digest of that prediction's voxels as triage read them
            (:func:`~monai_unc.monitoring.records.prediction_digest`), or None when unknown: what tells a new scan that
            reuses a case id from the same decision recorded again.

    Example:
        >>> case = CaseRecord("case_01", "Centre A", "GE Signa", "2026-01-31T00:00:00+00:00", 0.21, 1.3, 0.88,
        ...                   "accept", "accepted", "score below the threshold", "sha256:" + "0" * 64, None)
        >>> case.site, case.decision, case.prediction, case.prediction_sha256
        ('Centre A', 'accept', None, None)
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
    prediction_sha256: str | None = None


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

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
        ...     first = store.audit_log()[0]  # a new store's schema migration
        >>> first.seq, first.action, first.prev_hash == GENESIS, first.hash == entry_hash(first.__dict__)
        (1, 'migrate', True, True)
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
        expected_entry: the entry whose hash is the ``expect_head`` given (0: :data:`GENESIS`, a store that was
            empty then; the entries after it were appended since), or None (none given, or no entry has it).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
        ...     res = store.verify(expect_head=GENESIS)  # a head kept while the store was empty
        >>> res.ok, res.n_entries, res.problems, res.expected_entry, len(res.head)
        (True, 1, (), 0, 64)
    """

    ok: bool
    n_entries: int
    head: str
    problems: tuple[str, ...] = field(default=())
    expected_entry: int | None = None


def _check_head(value: Any) -> str:
    """An audit chain's head as ``verify --expect-head`` takes it: 64 hex digits (surrounding spaces and upper case, as
    a copy from a ticket may have them, are let through); else a ``ValueError`` naming ``expect_head``."""
    text = value.strip().lower() if isinstance(value, str) else None
    if text is None or not re.fullmatch(r"[0-9a-f]{64}", text):
        from .._utils import parameter_error  # noqa: PLC0415 (it imports torch: the store's writers start without it)

        raise parameter_error(ValueError(f"expect_head must be the head hash that 'monai-unc monitor verify' printed "
                                         f"(64 hex digits), got {str(value)[:80]!r}"), "expect_head")
    return text


def _actor() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name (a container without /etc/passwd entry)
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"


def _first_five(items: list[str], sep: str | None = None) -> str:
    """The first five of ``items`` for a message (joined with ``sep``, else as a list), `` ...`` when there are more."""
    shown = sep.join(items[:5]) if sep is not None else str(items[:5])
    return shown + (" ..." if len(items) > 5 else "")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _not_utf8(value: str) -> bool:
    """Whether text holds a lone surrogate: bytes that were not UTF-8 (a command-line argument or a file name from a
    Latin-1 terminal or share, decoded by Python with ``surrogateescape``), which the database cannot store."""
    return _SURROGATE.search(value) is not None


def _utf8_text(value: str) -> str:
    """Text the database can store: lone surrogates (bytes that were not UTF-8) written as ``\\udcf4`` escapes."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8") if _not_utf8(value) else value


def _check_text(value: Any, name: str, allow_none: bool = False) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be text, got {type(value).__name__}")
    if "\x00" in value or len(value) > MAX_TEXT:
        raise ValueError(f"{name} must be at most {MAX_TEXT} characters without NUL, got {value[:40]!r}...")
    if _not_utf8(value):
        raise ValueError(f"{name} must be UTF-8 text, got {value[:80]!r} (bytes that are not UTF-8: a Latin-1 "
                         "terminal, file or share?)")
    return value


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: the fields of a rule's JSON that its digest leaves out (its own and the signature: io.provenance.rule_digest)
_UNDIGESTED = ("digest", "signature")
_RISKS = ("failure", "1-dice")


def _real(v: Any) -> bool:
    """A finite real number (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _real_number(v: Any) -> bool:
    """A real number, Python or numpy (not a bool, text or a complex number), perhaps NaN or infinite."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool)  # numpy.bool_ is no numbers.Real


def _unsigned_zero(v: float) -> float:
    """``v`` with a negative zero made ``0.0``: SQLite reads ``-0.0`` back as ``0.0`` (PostgreSQL keeps it).

    In earlier versions a score of ``-0.0`` or a Dice written ``-0`` was hashed into its audit entry as
    ``-0.0`` and read back from SQLite as ``0.0``, so ``verify`` reported the untouched rows as edited.

    Example:
        >>> str(_unsigned_zero(-0.0)), _unsigned_zero(-0.5)
        ('0.0', -0.5)
    """
    return v + 0.0  # IEEE 754: -0.0 + 0.0 is 0.0; every other value (NaN too) is itself


def _case_number(value: Any, name: str, case_id: str) -> float:
    """A case's score, image z-score or expected Dice as the store keeps it: a float (NaN: undefined, also None).

    Found by hostile testing: a text score ``"0.5"`` was stored (SQLite read it back as 0.5, so ``verify`` reported
    the rows as edited), ``True`` as 1, and a ``numpy.float32`` failed with JSON's ``TypeError`` in the audit digest.
    """
    if value is None:
        return math.nan
    if not _real_number(value):
        raise TypeError(f"the {name} of case {case_id!r} must be a number (NaN or None when undefined), got "
                        f"{value!r:.80}")
    return _unsigned_zero(float(value))


def _label_int(value: Any, name: str, case_id: str, allowed: str) -> int | None:
    """An integer of a label (its failure, run, case row): a Python or numpy integer, not a bool; None stays None."""
    if value is None:
        return None
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"the {name} of case {case_id!r} must be {allowed}, got {value!r:.80}")
    return int(value)


def _label_values(lab: Mapping[str, Any], cid: str) -> tuple[float | None, int | None, float]:
    """A label's ``(dice, failure, loss)``, checked: what :meth:`MonitorStore.cases` reads back.

    Found by hostile testing: a Dice of 1.5 (or infinite) and a failure of 2 were written, and every later read of
    the append-only store refused them as "edited outside the store"; a failure of 0.5 was stored as 0; text
    (``"0.5"``) was parsed as a number; a label without its loss was a ``KeyError``.
    """
    dice, failure, loss = lab.get("dice"), lab.get("failure"), lab.get("loss")
    if dice is not None:
        if not _real_number(dice):
            raise TypeError(f"the dice of case {cid!r} must be a number in [0, 1] or None, got {dice!r:.80}")
        if not 0 <= dice <= 1:  # NaN too
            raise ValueError(f"the dice of case {cid!r} must be a number in [0, 1] or None, got {dice!r:.80}")
    fail = _label_int(failure, "failure", cid, "0, 1 or None")
    if fail not in (None, 0, 1):
        raise ValueError(f"the failure of case {cid!r} must be 0, 1 or None, got {failure!r:.80}")
    if not _real_number(loss):
        raise TypeError(f"the loss of case {cid!r} must be a number in [0, 1], got {loss!r:.80}")
    if not 0 <= loss <= 1:
        raise ValueError(f"the loss of case {cid!r} must be in [0, 1], got {loss!r}")
    return None if dice is None else _unsigned_zero(float(dice)), fail, _unsigned_zero(float(loss))


def rule_body_digest(rule: Mapping[str, Any]) -> str:
    """The content digest of a referral rule's JSON, as :func:`monai_unc.io.provenance.rule_digest` computes it.

    ``"sha256:"`` and the SHA-256 of its canonical JSON (sorted keys, no spaces) without ``digest`` and
    ``signature``: the same formula (``monai_unc._digest.content_digest``), reached without importing torch (a
    process that only writes to the store starts without it).

    Args:
        rule: the rule's JSON object.

    Returns:
        ``"sha256:"`` and 64 hex digits.

    Raises:
        ValueError: the rule holds a value that is not JSON text (NaN, a lone surrogate).
        TypeError: the rule holds a value that is not JSON data.

    Example:
        >>> rule_body_digest({"a": 1, "digest": "x"}) == rule_body_digest({"a": 1})
        True
    """
    return content_digest(rule, _UNDIGESTED)


def _check_rule_fields(rule: Any, source: str) -> None:
    """The fields of a rule's JSON that the store keeps and ``monitor status`` / ``monitor label`` use, checked."""
    if isinstance(rule, Mapping) and "digest" not in rule and "format_version" in rule:
        # a rule of an earlier version (0.1.0 recorded no digest; found by the upgrade review: the message named the
        # missing field, not what to do)
        made_by = rule.get("monai_unc_version")
        who = f"monai-unc {made_by}"[:60] if isinstance(made_by, str) and made_by else "an earlier monai-unc"
        raise ValueError(f"{source}: its referral rule records no digest (written by {who}): triage the cases again "
                         "with this version to record them (certify the rule again with monai-unc evaluate "
                         "--target-risk if triage refuses its format)")
    if not isinstance(rule, Mapping) or not isinstance(rule.get("digest"), str):
        raise ValueError(f"{source}: field 'rule' must hold the referral rule with its digest")
    if not _DIGEST.fullmatch(rule["digest"]):
        raise ValueError(f"{source}: field 'rule.digest' must be 'sha256:' and 64 hex digits, got "
                         f"{rule['digest'][:80]!r}")
    target = rule.get("target_risk")
    if not _real(target) or not 0 < target < 1:
        raise ValueError(f"{source}: field 'rule.target_risk' must be a number in (0, 1), got {target!r}"[:300])
    cal = rule.get("calibration")
    if cal is not None and (not isinstance(cal, Mapping) or not isinstance(cal.get("case_scores", []), list)):
        raise ValueError(f"{source}: field 'rule.calibration' must be an object whose 'case_scores' is a list")
    bad = [v for v in (cal or {}).get("case_scores", []) if v is not None and not _real(v)]
    if bad:
        raise ValueError(f"{source}: field 'rule.calibration.case_scores' must hold numbers (or null), got "
                         f"{bad[0]!r}"[:300])
    if isinstance(cal, Mapping) and "expected_dice_estimate" in cal and (
            cal["expected_dice_estimate"] not in EXPECTED_DICE_ESTIMATES):
        raise ValueError(f"{source}: field 'rule.calibration.expected_dice_estimate' must be one of "
                         f"{', '.join(EXPECTED_DICE_ESTIMATES)}, got {cal['expected_dice_estimate']!r}"[:300])
    risk = rule.get("risk", "failure")
    if risk not in _RISKS:
        raise ValueError(f"{source}: field 'rule.risk' must be 'failure' or '1-dice', got {risk!r}"[:300])
    fd = rule.get("failure_dice")
    if fd is not None and (not _real(fd) or not 0 <= fd <= 1):
        raise ValueError(f"{source}: field 'rule.failure_dice' must be a Dice in [0, 1] or null, got {fd!r}"[:300])
    n = rule.get("num_classes")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 2**16):
        raise ValueError(f"{source}: field 'rule.num_classes' must be a number of classes or null, got {n!r}"[:300])
    score = rule.get("score")
    column = score.get("column") if isinstance(score, Mapping) else score
    if not isinstance(column, str) or not column or "\x00" in column or len(column) > MAX_TEXT:
        raise ValueError(f"{source}: field 'rule.score' must name the score column (text, or an object with "
                         f"'column'), got {score!r}"[:300])


def check_rule(rule: Any, source: str) -> str:
    """Check a referral rule's JSON before the store keeps it: the fields it reads, then its content digest.

    The store keeps a rule under its digest and reads its target risk, risk, Dice threshold and calibration scores
    from it: a rule edited in ``triage.json`` with its old digest kept would silence the alarms of every stream of
    the genuine rule. The digest is recomputed (:func:`rule_body_digest`) and must match. A digest is no signature:
    whoever edits a rule can recompute it, and the edited rule is then another rule (another digest, streams of its
    own), which the audit log records.

    Args:
        rule: the rule's JSON (untrusted: ``triage.json``'s ``rule``).
        source: how the messages name where it came from (e.g. the ``triage.json`` path).

    Returns:
        The rule's digest.

    Raises:
        ValueError: starting with ``source``: a missing or wrong field (named), or a rule that does not match its
            digest.

    Example:
        >>> rule = {"score": "s", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
        >>> rule["digest"] = rule_body_digest(rule)
        >>> check_rule(rule, "t.json") == rule["digest"]
        True
        >>> try:
        ...     check_rule({**rule, "target_risk": 0.9}, "t.json")  # edited, the digest kept
        ... except ValueError as e:
        ...     print(str(e)[:56])
        t.json: field 'rule' does not match its digest (field 'r
    """
    _check_rule_fields(rule, source)
    try:
        digest = rule_body_digest(rule)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source}: field 'rule' is not JSON data ({type(e).__name__}: {e})"[:300]) from None
    if digest != rule["digest"]:
        raise ValueError(f"{source}: field 'rule' does not match its digest (field 'rule.digest'): the rule was "
                         "edited after triage wrote it; triage the cases again with the rule file")
    return digest


def _rule_columns(rule: Mapping[str, Any]) -> dict[str, Any]:
    """The columns of the table ``rules`` that a (checked) rule's JSON gives, but its digest and body."""
    score = rule.get("score")
    cal = rule.get("calibration") if isinstance(rule.get("calibration"), Mapping) else {}
    return {"score": str(score.get("column") if isinstance(score, Mapping) else score),
            "target_risk": rule.get("target_risk"), "risk": str(rule.get("risk", "failure")),
            "failure_dice": rule.get("failure_dice"),
            "calibration_scores": [v for v in cal.get("case_scores", []) if _real(v)]}


def _expected_dice_estimate(rule: Mapping[str, Any]) -> str:
    """What the ``expected_dice`` of the cases a (checked) rule decided estimates (``ReferralRule.
    expected_dice_estimate``, read without torch): the rule's ``calibration.expected_dice_estimate``, else that of a
    rule certified before it was recorded (the merged foreground for classes, :data:`~monai_unc.keys.
    LEGACY_REGION_ESTIMATE` for regions: a region rule of ``format_version`` 4 or less, whatever it says)."""
    cal = rule.get("calibration")
    ver = rule.get("format_version")
    if rule.get("regions") and not (isinstance(ver, int) and not isinstance(ver, bool) and ver >= 5):
        return LEGACY_REGION_ESTIMATE  # its region_mean scored a region the segmentation does not hold 0
    if isinstance(cal, Mapping) and "expected_dice_estimate" in cal:
        return str(cal["expected_dice_estimate"])
    return LEGACY_REGION_ESTIMATE if rule.get("regions") else "merged_foreground"


def _same_value(stored: Any, expected: Any) -> bool:
    """Whether a value read from the store is the one expected (numbers as floats, text as text)."""
    if stored is None or expected is None:
        return stored is None and expected is None
    if isinstance(expected, str):
        return isinstance(stored, str) and stored == expected
    if isinstance(expected, list):
        return (isinstance(stored, list) and len(stored) == len(expected)
                and all(_same_value(a, b) for a, b in zip(stored, expected)))
    return _real(stored) and float(stored) == float(expected)


def _as_int(v: Any) -> int | None:
    """An integer read from the store, or None when it is not one (a row edited outside the store)."""
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _no_free_block(path: Path) -> bool:
    """Whether the file system of ``path``'s folder has no block left for a new write (False where unknown)."""
    if not hasattr(os, "statvfs"):  # Windows
        return False
    try:
        return os.statvfs(path.absolute().parent).f_bavail == 0
    except OSError:
        return False


def _read_only_file_system(path: Path) -> bool:
    """Whether the file system of ``path``'s folder is mounted read-only (False where unknown)."""
    flag = getattr(os, "ST_RDONLY", None)
    if flag is None or not hasattr(os, "statvfs"):  # Windows
        return False
    try:
        return bool(os.statvfs(path.absolute().parent).f_flag & flag)
    except OSError:
        return False


def _full_disk(error: sqlite3.Error, path: Path) -> OSError | None:
    """A full disk behind an SQLite error, as the ``OSError`` (``ENOSPC``) naming the database file; else None.

    SQLite says ``database or disk is full`` (``SQLITE_FULL``) without the file, and a write-ahead log's index
    (``<db>-shm``) that cannot grow is a ``disk I/O error`` (``SQLITE_IOERR_SHMSIZE``): an I/O error or a file that
    cannot be opened counts as a full disk only when the file system has no free block left (found by hostile
    testing: ``monitor record`` on a full disk said ``disk I/O error``).
    """
    code = _sqlite_code(error)
    if code is None:
        return None
    full = code == _SQLITE_FULL or (code & 0xFF in (_SQLITE_IOERR, _SQLITE_CANTOPEN) and _no_free_block(path))
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path)) if full else None


#: SQLite's primary result codes of the errors a full disk gives (the constants sqlite3 has from Python 3.11)
_SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 10, 13, 14
#: SQLite's extended code of a log index (``<db>-shm``) that cannot be made in the database's folder (no write
#: permission there: a store another user records into, read by a QC team)
_SQLITE_READONLY_DIRECTORY = 1544
#: its primary code (``SQLITE_READONLY``), all that the text of the error tells (Python 3.10)
_SQLITE_READONLY = 8
#: those codes by the text SQLite gives each error (``sqlite3_errstr``), for the exceptions that carry no code
_SQLITE_CODE_OF_TEXT = {"disk I/O error": _SQLITE_IOERR, "database or disk is full": _SQLITE_FULL,
                        "unable to open database file": _SQLITE_CANTOPEN,
                        "attempt to write a readonly database": _SQLITE_READONLY}


def _sqlite_code(error: sqlite3.Error) -> int | None:
    """SQLite's (extended) result code of ``error``: its ``sqlite_errorcode``, which Python 3.10 does not set (found by
    testing the declared minimum: a full disk there was ``database or disk is full`` naming no file, and the
    read-only commands failed), else the primary code of its text; None for another error."""
    code = getattr(error, "sqlite_errorcode", None)
    return code if code is not None else _SQLITE_CODE_OF_TEXT.get(str(error).strip())


def _connect_read_only(path: Path, timeout: float) -> sqlite3.Connection:
    """A connection that reads an SQLite store and never writes into it (``mode=ro``).

    A reader of a WAL database needs the log's index (``<db>-shm``), which SQLite makes when it is missing (a store
    its last writer closed), and cannot on a full disk (found by hostile testing: ``monitor verify`` failed with
    ``disk I/O error``), nor on a read-only file system (a snapshot, a share mounted read-only: ``unable to open
    database file``, found by hostile testing), nor in a folder the reader may not write (a store another user
    records into, root-owned ``0555``: ``attempt to write a readonly database``, seen running the
    commands as a non-root user; ``SQLITE_READONLY_DIRECTORY``, or on Python 3.10, whose errors carry no extended
    code, ``SQLITE_READONLY`` in a folder this user may not write). There, when no connection has the store open
    (no ``<db>-shm``) and the log holds nothing (``<db>-wal`` missing or empty: every commit is in the database
    file), the database file is read alone (``immutable``), nothing made beside it.
    """
    uri = path.absolute().as_uri()
    wal, shm = (path.with_name(path.name + end) for end in ("-wal", "-shm"))

    def empty_log() -> bool:
        try:
            return wal.stat().st_size == 0
        except FileNotFoundError:
            return True

    def connect(query: str) -> sqlite3.Connection:
        return sqlite3.connect(f"{uri}?{query}", uri=True, timeout=timeout, isolation_level=None)

    read_only_fs = _read_only_file_system(path)
    if (read_only_fs or _no_free_block(path)) and not shm.exists() and empty_log():
        return connect("mode=ro&immutable=1")
    conn = connect("mode=ro")
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchall()  # the first read opens the log's index
        return conn
    except sqlite3.Error as e:
        conn.close()
        code = _sqlite_code(e)
        # found by the hostile review of review 63: Python 3.10 sets no extended code, only the text of the primary
        # one (SQLITE_READONLY), so the folder's permission tells it there
        unwritable_folder = not shm.exists() and (code == _SQLITE_READONLY_DIRECTORY or (
            code == _SQLITE_READONLY and getattr(e, "sqlite_errorcode", None) is None
            and not os.access(path.parent, os.W_OK | os.X_OK)))
        if (_full_disk(e, path) is None and not read_only_fs and not unwritable_folder) or not empty_log():
            raise
    return connect("mode=ro&immutable=1")


#: PostgreSQL's largest ``lock_timeout`` (ms): ``2^31 - 1``, 24.8 days; SQLite's largest busy timeout too (a C int)
_PG_MAX_MS = 2**31 - 1


class MonitorStore:
    """A connection to the monitoring store (SQLite file or PostgreSQL database).

    Open it with :meth:`open` (creates or migrates the schema), use it as a context manager or call :meth:`close`.

    Args:
        url: a file path or ``sqlite:///PATH`` (SQLite; SQLAlchemy's convention: ``PATH`` is what follows the third
            slash, so ``sqlite:///m.db`` is relative to the working directory and ``sqlite:////var/m.db`` absolute),
            or ``postgresql://...`` (PostgreSQL, needs psycopg 3).
        create: create a missing SQLite file and the store's tables (False, for ``label`` and the read-only
            commands: a missing file, or a database that is not a monitoring store, is an error and nothing is
            written into it).
        timeout: seconds a writer waits for another writer's transaction (SQLite and PostgreSQL; a finite number
            ``>= 0``, at most 24.8 days: the limit of PostgreSQL's ``lock_timeout`` and SQLite's busy timeout, where a
            longer one waits that long), then one ``ValueError`` line.
        read_only: only read (``status``, ``verify``, ``report``; implies ``create=False``): an SQLite file is
            opened read-only (``mode=ro``; on a full disk or a read-only file system, where no connection has it
            open and its write-ahead log is empty, the file alone) and a store of an older schema is not migrated:
            read as it is from :data:`OLDEST_READABLE_SCHEMA` on (what the readers read has not changed since),
            refused below it.

    Raises:
        ValueError: an unsupported URL, a database that cannot be reached or opened (one line saying which, the
            password left out), or a schema newer than this version (older than :data:`OLDEST_READABLE_SCHEMA`,
            when ``read_only``).
        OSError: ``ENOSPC`` naming the SQLite file: the disk is full (:func:`~monai_unc.io.is_disk_full`), here
            or in any later call.
        ImportError: a PostgreSQL URL without psycopg (the message names the extra to install).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
        ...     store.schema_version() == SCHEMA_VERSION, store.verify().ok
        (True, True)
    """

    def __init__(self, url: str | os.PathLike, *, create: bool = True, timeout: float = 60.0,
                 read_only: bool = False) -> None:
        # found by hostile review: inf / NaN were an OverflowError
        if not _real_number(timeout) or not math.isfinite(timeout) or timeout < 0:
            raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
        create = create and not read_only
        self._read_only = read_only
        self._timeout = float(timeout)
        text = os.fspath(url)
        if not isinstance(text, str) or not text:
            raise ValueError(f"database must be a file path or a database URL, got {url!r}")
        self.url = text
        db_file = sqlite_file(text)
        self.dialect = "sqlite" if db_file is not None else "postgresql"
        self._name = redact_url(text, whole=True)  # how errors name the store
        self._driver_errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
        self._lock_timeout_errors: tuple[type[BaseException], ...] = ()
        if self.dialect == "sqlite":
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", text) and not text.startswith("sqlite:///"):
                raise ValueError(f"database {redact_url(text, whole=True)!r}: unsupported URL (a file path, "
                                 "sqlite:///PATH or postgresql://...)")
            path = db_file
            # SQLite's busy timeout is a C int of ms: a longer one was read as 0, no wait at all (found by hostile
            # testing: timeout=1e7 failed at once with "database is locked" behind another writer)
            wait = min(float(timeout), _PG_MAX_MS / 1000)
            if path.is_dir():
                raise ValueError(f"database {str(path)!r} is a folder, not a database file")
            if not create and not path.is_file():
                raise ValueError(f"database {str(path)!r} does not exist (monai-unc monitor record creates it)")
            self.path: Path | None = path
            try:
                if read_only:
                    self._conn: Any = _connect_read_only(path, wait)
                else:
                    self._conn = sqlite3.connect(str(path), timeout=wait, isolation_level=None)
                self._conn.execute(f"PRAGMA busy_timeout = {min(int(wait * 1000), _PG_MAX_MS)}")
                if not create:  # before WAL mode, which would write into a file that is no store
                    self._refuse_if_no_store(str(path))
                if not read_only:  # a reader follows the file's journal mode
                    self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA foreign_keys = ON")
                self._conn.execute("PRAGMA synchronous = NORMAL")
            except sqlite3.Error as e:
                self.close()
                full = _full_disk(e, path)
                if full is not None:
                    raise full from None
                raise ValueError(f"cannot open the database {str(path)!r}: {e}") from None
            except (ValueError, OSError):
                self.close()
                raise
        else:
            try:
                import psycopg  # noqa: PLC0415 (optional: the monitor extra)
            except ImportError:
                raise ImportError("a PostgreSQL monitoring store needs psycopg 3: pip install 'monai-unc[monitor]'"
                                  ) from None
            try:
                self._driver_errors = (psycopg.Error,)
                self._lock_timeout_errors = (psycopg.errors.LockNotAvailable,)
                self._conn = psycopg.connect(text, autocommit=True, connect_timeout=10)
                self._conn.execute("SET client_encoding TO 'UTF8'")  # text as str, whatever the server's encoding
                # every float read back as stored, whatever the server's extra_float_digits (a legacy 0 rounds them to
                # 15 digits: found by hostile testing, verify reported every record as edited and decisions already
                # recorded were recorded again)
                self._conn.execute("SET extra_float_digits = 3")
            except psycopg.Error as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ValueError(f"cannot connect to the database {redact_url(text, whole=True)!r}: "
                                 f"{_message_without_password(first, text)}") from None
            self.path = None
            if not create:
                try:
                    self._refuse_if_no_store(redact_url(text, whole=True))
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
        """Close the connection (an open transaction is rolled back); closing twice is harmless.

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as d:
            ...     store = MonitorStore(f"{d}/monitor.db")
            ...     store.close()
            ...     store.close()
        """
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
            full = _full_disk(e, self.path) if isinstance(e, sqlite3.Error) and self.path is not None else None
            if full is not None:  # one line naming the file; is_disk_full
                raise full from None
            text = str(e).strip()
            first = text.splitlines()[0] if text else type(e).__name__
            raise ValueError(f"the monitoring database {self._name!r}: "
                             f"{_message_without_password(first, self.url)}") from None

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
                # read committed whatever the server's default_transaction_isolation: under repeatable read the lock's
                # statement fixed the snapshot before the wait, and a writer that waited for another read the store
                # without the other's commit (a duplicate audit entry: found by hostile testing); and the writers'
                # lock waits ``timeout`` seconds at most, as SQLite's (it waited forever behind a stuck writer)
                self._conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                # in ms, at most the server's limit 2^31 - 1 (24.8 days: found by hostile review, a longer timeout
                # failed every write with "invalid value for parameter lock_timeout")
                ms = min(max(1, round(self._timeout * 1000)), _PG_MAX_MS)
                self._conn.execute(f"SET LOCAL lock_timeout = {ms}")
                try:
                    self._conn.execute("SELECT pg_advisory_xact_lock(7263418)")  # the writers' lock
                except self._lock_timeout_errors:
                    raise ValueError(f"the monitoring database {self._name!r}: another writer held it for more than "
                                     f"{self._timeout:g} s (database is locked); run the command again") from None
                yield

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside sees the store at one moment: one read transaction (a reader beside a writer).

        Statements outside a transaction each see the store as it is when they run: a reader reading the audit log,
        then the tables, saw the rows of a run another process committed in between without its entry, and one
        reading the rules, then the cases, saw cases of a rule it had not read (found by hostile testing: ``monitor
        label`` failed with a ``KeyError`` traceback and the dashboard left out the new rule's streams). Inside a
        transaction (a write, or another snapshot: it already sees one state) nothing is started.

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     with store.snapshot():
            ...         rules, cases = store.rules(), store.cases()
            ...     rules, cases
            ({}, [])
        """
        if self.dialect == "sqlite":
            if self._conn.in_transaction:
                yield
                return
            with self._db_errors():
                self._conn.execute("BEGIN")  # deferred: the first read takes the snapshot, no lock on writers
            try:
                yield
            finally:
                if self._conn.in_transaction:
                    with suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
        elif self._conn.info.transaction_status.name != "IDLE":  # psycopg.pq.TransactionStatus
            yield
        else:
            with self._db_errors(), self._conn.transaction():
                self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
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
        """The schema version of the database (0 when none is recorded).

        Returns:
            The version in the table ``monitor_meta`` (:data:`SCHEMA_VERSION` once a writer opened it).

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     store.schema_version() == SCHEMA_VERSION
            True

        Raises:
            ValueError: naming the store, when the recorded version is no whole number (``monitor_meta`` edited
                outside monai-unc; found by hostile review: ``invalid literal for int() with base 10: 'abc'``, naming
                no store).
        """
        rows = self._all("SELECT value FROM monitor_meta WHERE key = 'schema_version'")
        if not rows:
            return 0
        text = str(rows[0][0])
        if not re.fullmatch(r"[0-9]{1,9}", text):
            raise ValueError(f"the monitoring database {self._name!r}: its schema version {text[:40]!r} (table "
                             "monitor_meta) is no version number: the table was edited outside monai-unc; restore the "
                             "store from a backup")
        return int(text)

    def _migrate(self) -> None:
        if self._table_exists("monitor_meta") and self.schema_version() == SCHEMA_VERSION:
            return
        if self._read_only:  # a reader writes nothing (the read-only commands refused a database without the table)
            current = self.schema_version()
            self._check_schema_version(current)
            if current >= OLDEST_READABLE_SCHEMA:  # read as it is: what the readers read has not changed since
                return
            raise ValueError(f"the monitoring database {self._name!r} has schema version {current}, "
                             f"older than this monai-unc reads ({SCHEMA_VERSION}): monai-unc monitor record or label "
                             "upgrades it")
        with self._transaction():
            if not self._table_exists("monitor_meta"):
                self._execute("CREATE TABLE monitor_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            current = self.schema_version()
            self._check_schema_version(current)
            if current == SCHEMA_VERSION:  # another writer migrated it meanwhile
                return
            for version, statements in MIGRATIONS:
                if version <= current:
                    continue
                for statement in statements:
                    self._execute(statement)
            # one entry for the migrations of one upgrade (a new store: one, whatever the number of versions)
            self._execute("DELETE FROM monitor_meta WHERE key = 'schema_version'")
            self._execute("INSERT INTO monitor_meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self._append_audit("migrate", {"schema_version": SCHEMA_VERSION}, command=None)

    def _check_schema_version(self, current: int) -> None:
        """Refuse a schema newer than this version reads (naming the store: found by hostile review), and a store
        whose tables exist while ``monitor_meta`` records no version (0: its row deleted or set to 0 outside
        monai-unc; found by the upgrade review: the readers said "monai-unc monitor record or label upgrades it", and
        record then failed with "table rules already exists")."""
        if current > SCHEMA_VERSION:
            raise ValueError(f"the monitoring database {self._name!r} has schema version {current}, newer than this "
                             f"monai-unc reads ({SCHEMA_VERSION}): upgrade monai-unc")
        if current == 0 and self._table_exists("audit"):  # the first migration creates it
            raise ValueError(f"the monitoring database {self._name!r} holds the store's tables but its schema version "
                             "(table monitor_meta) is missing or 0: the table was edited outside monai-unc; restore "
                             "the store from a backup")

    # -------------------------------------------------------------------------------------------------- the audit
    def _append_audit(self, action: str, details: Mapping[str, Any], command: Sequence[str] | None) -> int:
        """Append an audit entry inside the current transaction; its ``seq``."""
        last = self._all("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1")
        seq, prev = (int(last[0][0]) + 1, str(last[0][1])) if last else (1, GENESIS)
        argv = list(sys.argv if command is None else command)
        entry = {"seq": seq, "at": _now(), "actor": _actor(), "host": socket.gethostname(), "version": __version__,
                 "command": " ".join(_utf8_text(redact_url(str(a), whole=True)) for a in argv)[:MAX_TEXT * 4],
                 "action": action,
                 "details": _canonical(details),
                 "prev_hash": prev}
        entry["hash"] = entry_hash(entry)
        self._execute("INSERT INTO audit (seq, at, actor, host, version, command, action, details, prev_hash, hash) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [entry[k] for k in AuditEntry.__dataclass_fields__])
        return seq

    def audit_log(self) -> list[AuditEntry]:
        """Every audit entry, in order.

        Returns:
            The :class:`AuditEntry` of every change (``migrate``, ``record``, ``label``), by ``seq``.

        Raises:
            ValueError: one line naming the store: an entry whose ``seq`` is not an integer (edited outside the store).

        Example:
            >>> import tempfile
            >>> rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
            >>> rule["digest"] = rule_body_digest(rule)
            >>> cases = [CaseRecord(c, "Centre A", None, "2026-01-31T00:00:00+00:00", s, float("nan"), float("nan"),
            ...                     d, "accepted" if d == "accept" else "above_threshold", "the rule's reason",
            ...                     rule["digest"], None)
            ...          for c, s, d in (("a", 0.2, "accept"), ("b", 0.7, "review"))]
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     _ = store.record_run(rule, cases, source_digest="jan", folder="triage_01",
            ...                          triaged_at="2026-01-31T00:00:00+00:00", model_digest=None, command=["x"])
            ...     log = store.audit_log()
            >>> [(e.seq, e.action, e.command) for e in log][1:], json.loads(log[1].details)["n_cases"]
            ([(2, 'record', 'x')], 2)
        """
        cols = ", ".join(AuditEntry.__dataclass_fields__)
        out = []
        for r in self._all(f"SELECT {cols} FROM audit ORDER BY seq"):
            if _as_int(r[0]) is None:
                raise ValueError(f"the monitoring database {self._name!r}: an audit entry's seq is {r[0]!r:.40}, not "
                                 "an integer: the table audit was edited")
            out.append(AuditEntry(int(r[0]), *map(str, r[1:])))
        return out

    def verify(self, expect_head: str | None = None) -> VerifyResult:
        """Check the audit chain, the rows each entry wrote and the rules they name.

        Every entry must follow the previous one (``seq`` 1, 2, ...), hold the previous entry's hash and its own
        (recomputed); each ``record`` / ``label`` entry's digest of its rows must match the rows in the tables
        (``cases``: every column, the prediction digests through the entry's ``predictions_digest``, none for an
        entry written at schema 1; ``labels``: all but ``recorded_at``). Each ``record`` entry's run (the table
        ``runs``) must hold the entry's triage folder, ``triage.json`` digest, rule digest, model digest and number
        of cases, and every case row must have a run. Every row of ``rules`` must match its digest (its body
        recomputed) and its columns its body, and the rule each ``record`` entry names must be in ``rules``. Each
        ``label`` entry's labels must still name the cases they were given to (their case ids and sites: entries of
        a monai-unc that did not record them are not checked so). The case rows (their order is that of every
        alarm's stream) must be in the order the store writes them: run after run, each run's rows in the order its
        ``record`` entry recorded (``order_digest``; an entry written before it holds one: the order of a hash of the
        case ids, or of the ids, as monai-unc wrote them before it hashed them); the label rows in the order of their
        audit entries (a case's latest label is the one of the largest id). A zero that an entry written before
        monai-unc stored negative zeros as ``0.0`` hashed as ``-0.0`` matches its digest as either sign. The table
        ``monitor_meta`` must hold the schema version that the audit log's last ``migrate`` entry recorded, and no
        other key. Not covered: a run's ``recorded_at`` and ``triaged_at`` (each case row's ``triaged_at`` is), a
        label's ``recorded_at`` (its entry's ``at`` is), entries cut off at the end unless ``expect_head`` is given,
        and a consistent forgery of the whole database.

        ``expect_head`` is a head that an earlier check printed and that was kept elsewhere (a ticket, a signed
        e-mail): some entry of the chain must still have that hash. Entries appended since (later runs and labels)
        are fine; entries cut off at the end, an entry before it edited (the hashes after it recomputed) or a
        database replaced by another leave no entry with it.

        Everything is read in one snapshot of the store: a run another process records meanwhile is neither half seen
        nor reported as rows without their entry.

        Args:
            expect_head: the head hash kept elsewhere after an earlier check (64 hex digits), or None.

        Returns:
            The :class:`VerifyResult`; its ``expected_entry`` is the entry that has ``expect_head``.

        Raises:
            ValueError: ``expect_head`` is not 64 hex digits (a typo or a cut copy is not a tampered store).

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     kept = store.verify().head  # kept elsewhere
            ...     later = store.verify(expect_head=kept)
            ...     later.ok, later.expected_entry, later.n_entries
            (True, 1, 1)
        """
        if expect_head is not None:
            expect_head = _check_head(expect_head)
        with self.snapshot():
            return self._verify(expect_head)

    def _verify(self, expect_head: str | None) -> VerifyResult:
        """:meth:`verify` on the store as the current transaction sees it."""
        problems: list[str] = []
        prev, entries = GENESIS, self.audit_log()
        records: dict[int, dict[str, Any]] = {}
        migrated: list[Any] = []  # the schema version each migrate entry recorded, in order
        # the column prediction_sha256 (a reader reads a store of an earlier schema as it is)
        digests = self.schema_version() >= _PREDICTION_DIGESTS_SINCE
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
            except (ValueError, RecursionError):
                problems.append(f"audit entry {e.seq}: its details are not JSON")
                continue
            if not isinstance(details, dict):
                problems.append(f"audit entry {e.seq}: its details are not a JSON object")
                continue
            if e.action == "record":
                records[e.seq] = details
            elif e.action == "migrate":
                migrated.append(details.get("schema_version"))
            expected = details.get("rows_digest")
            if expected is not None and e.action in ("record", "label"):
                match = _digest_up_to_zero_signs(*self._rows_of(e.action, e.seq), expected)
                if match is None:
                    problems.append(f"the rows written by audit entry {e.seq} ({e.action}) do not match its digest: "
                                    "a value was edited, or the entry was written before monai-unc stored negative "
                                    "zeros as 0.0 and its zeros had mixed signs in too many combinations to try")
                elif not match:
                    problems.append(f"the rows written by audit entry {e.seq} ({e.action}) were edited or deleted")
                elif e.action == "record" and "order_digest" in details \
                        and self._order_digest_of(e.seq) != details["order_digest"]:
                    problems.append(f"the case rows written by audit entry {e.seq} (record) are out of the order it "
                                    "wrote them in (their ids were changed: the stream the alarms test was reordered)")
                elif e.action == "record" and digests and not self._prediction_digests_hold(e.seq, details):
                    problems.append(f"the prediction digests of the rows written by audit entry {e.seq} (record) were "
                                    "edited (what tells a new scan that reuses a case id from a decision recorded "
                                    "again)")
                elif e.action == "label" and "cases_digest" in details \
                        and self._label_cases_digest(e.seq) != details["cases_digest"]:
                    problems.append(f"the labels written by audit entry {e.seq} (label) now belong to other cases: "
                                    "the case rows they name were moved or edited")
        problems += self._check_runs(records)
        problems += self._check_stream_order()
        rules: set[str] = set()
        for row in self._rule_rows():
            try:
                rules.add(self._read_rule_row(row)[0])
            except ValueError as err:
                problems.append(str(err))
                if isinstance(row[0], str):
                    rules.add(row[0])  # reported once, as edited
        for seq, details in records.items():
            digest = details.get("rule_digest")
            if digest is not None and digest not in rules:
                problems.append(f"the rule {str(digest)[:80]!r} of audit entry {seq} (record) is not in the table "
                                "rules (its row was deleted)")
        for table, col in (("runs", "audit_seq"), ("labels", "audit_seq")):
            seqs = {e.seq for e in entries if e.action == ("record" if table == "runs" else "label")}
            orphans = [r[0] for r in self._all(f"SELECT DISTINCT {col} FROM {table}") if r[0] not in seqs]
            if orphans:
                problems.append(f"{table} rows without their audit entry (audit seq {orphans[:5]!r:.120})")
        strays = self._all("SELECT COUNT(*) FROM cases WHERE run_id NOT IN (SELECT id FROM runs)")[0][0]
        if strays:
            problems.append(f"{strays} cases rows without their run (added, or their run deleted)")
        problems += self._check_meta(migrated)
        head = entries[-1].hash if entries else GENESIS
        expected_entry = None
        if expect_head is not None:
            expected_entry = {GENESIS: 0, **{e.hash: e.seq for e in entries}}.get(expect_head)
            if expected_entry is None:
                problems.append(f"no entry of the audit chain has the expected head {expect_head[:16]}... (the head is "
                                f"{head[:16]}...): entries were removed from the end, an entry was edited and the "
                                "hashes after it recomputed, or the database was replaced")
        return VerifyResult(not problems, len(entries), head, tuple(problems), expected_entry)

    def _check_meta(self, migrated: Sequence[Any]) -> list[str]:
        """The problems of the table ``monitor_meta``: its keys, and its schema version against the audit log.

        The store writes one key, ``schema_version``, with the ``migrate`` entry of each migration. The version
        decides what a writer migrates and what a reader refuses, so an edit of it (a version the last migration did
        not record, ``01`` for ``1``) is reported; so is a key that no monai-unc writes (added outside the store).
        """
        problems = []
        rows = self._all("SELECT key, value FROM monitor_meta ORDER BY key")
        extra = [repr(str(k))[:40] for k, _ in rows if k not in _META_KEYS]
        if extra:
            problems.append("the table monitor_meta holds key(s) that monai-unc never writes "
                            f"({_first_five(extra, ', ')}): rows were added outside monai-unc")
        stored = next((v for k, v in rows if k == "schema_version"), None)
        recorded = migrated[-1] if migrated else None
        if recorded is None or str(stored) != str(recorded):
            problems.append(f"the schema version in the table monitor_meta ({str(stored)[:40]!r}) is not the one the "
                            f"audit log's last migration recorded ({str(recorded)[:40]!r}): the table was edited "
                            "outside monai-unc")
        return problems

    def _check_runs(self, records: Mapping[int, Mapping[str, Any]]) -> list[str]:
        """The problems of the table ``runs``: each ``record`` entry's run must hold what the entry says it wrote."""
        problems = []
        runs: dict[Any, list[tuple[Any, ...]]] = {}
        for r in self._all("SELECT audit_seq, folder, source_digest, rule_digest, model_digest, n_cases FROM runs "
                           "ORDER BY id"):
            runs.setdefault(r[0], []).append(r[1:])
        keys = ("triage", "source_digest", "rule_digest", "model_digest", "n_cases")
        for seq, details in records.items():
            found = runs.get(seq, [])
            if len(found) != 1:
                problems.append(f"audit entry {seq} (record) has {len(found)} runs in the table runs, not 1 (a run "
                                "was deleted or added)")
                continue
            changed = [("folder" if k == "triage" else k) for k, v in zip(keys, found[0])
                       if k in details and not _same_value(v, details[k])]
            if changed:
                problems.append(f"the run of audit entry {seq} (record) was edited: its {', '.join(changed)} "
                                "do(es) not match the entry")
        return problems

    def _check_stream_order(self) -> list[str]:
        """The problems of the order of the case rows (their ``id``: the order every alarm's stream is in).

        The runs are recorded one at a time (the writers' lock), each run's rows in one insert: the ``runs`` rows
        follow their audit entries, a run's case rows come after those of every earlier run, and within a run they
        follow :func:`_within_run_order` (or their case ids, as monai-unc stored them before it hashed them). So do
        the ``labels`` rows: a case's latest label is the one of the largest id. Found by hostile review: case rows
        whose ids were permuted across runs (each row unchanged, so every digest held) moved the score alarm from
        the stream's case 138 to its case 11, and ``verify`` reported nothing.
        """
        problems = []
        runs = self._all("SELECT id, audit_seq FROM runs ORDER BY id")
        seqs = [r[1] for r in runs]
        if any(not isinstance(a, int) or not isinstance(b, int) or a >= b for a, b in zip(seqs, seqs[1:])):
            problems.append("the rows of the table runs are out of the order of their audit entries (their ids were "
                            "changed)")
        by_run: dict[Any, list[Any]] = {}
        behind: list[Any] = []
        last = None
        for run, cid in self._all("SELECT run_id, case_id FROM cases ORDER BY id"):
            if last is not None and run != last and run in by_run:
                behind.append(run)  # a row of a run whose rows had ended: rows moved between runs' places
            by_run.setdefault(run, []).append(cid)
            last = run
        order = {r[0]: i for i, r in enumerate(runs)}
        places = [order[r] for r in by_run if r in order]
        if behind or places != sorted(places):
            problems.append("the case rows are out of the order of their runs (their ids were changed: rows moved "
                            "between runs, which reorders the stream the alarms test)")
        shuffled = []
        for run, ids in by_run.items():
            if not all(isinstance(c, str) for c in ids):
                continue  # a case id that is no text: the run's rows digest reports it
            if ids != sorted(ids, key=_within_run_order) and ids != sorted(ids):
                shuffled.append(run)
        if shuffled:
            problems.append(f"the case rows of {len(shuffled)} run(s) (run id {_first_five(shuffled)}) are out of the "
                            "order the store writes them in (their ids were changed: the stream the alarms test was "
                            "reordered)")
        # a case's latest label is its label of the largest id: label rows permuted over their ids (found by hostile
        # review: a failure and its later correction, each the one row of its batch, swapped) undid the correction
        label_seqs = [r[0] for r in self._all("SELECT audit_seq FROM labels ORDER BY id")]
        if any(not isinstance(a, int) or not isinstance(b, int) or a > b for a, b in zip(label_seqs, label_seqs[1:])):
            problems.append("the rows of the table labels are out of the order of their audit entries (their ids were "
                            "changed: which label of a case is its latest, and when it arrived, changed)")
        return problems

    def _prediction_digests_hold(self, seq: int, details: Mapping[str, Any]) -> bool:
        """Whether the ``prediction_sha256`` of the case rows of a ``record`` entry are those it wrote: its
        ``predictions_digest``, or none at all for an entry written before the store kept them (schema 1)."""
        rows = self._all("SELECT c.case_id, c.prediction_sha256 FROM cases c JOIN runs r ON c.run_id = r.id "
                         "WHERE r.audit_seq = ?", (seq,))
        found = sorted((dict(zip(_PREDICTION_DIGEST_COLUMNS, r)) for r in rows), key=lambda d: str(d["case_id"]))
        if "predictions_digest" not in details:
            return all(d["prediction_sha256"] is None for d in found)
        try:
            return rows_digest(found, _PREDICTION_DIGEST_COLUMNS) == details["predictions_digest"]
        except (TypeError, ValueError):  # a value that no row of ours holds: edited
            return False

    def _label_cases_digest(self, seq: int) -> str:
        """The digest of the case id and site of the case row each label of a ``label`` entry names (in label order).

        A label names its case by its row's id; the rows digest of its entry covers that id, not the case the row
        holds: case rows whose contents were moved over their ids gave a label to another case (found by hostile
        review: a failure moved onto a referred case left the risk test with every digest intact).
        """
        rows = self._all("SELECT c.case_id, c.site FROM labels l LEFT JOIN cases c ON c.id = l.case_row "
                         "WHERE l.audit_seq = ? ORDER BY l.id", (seq,))
        try:
            return rows_digest([dict(zip(_LABEL_CASE_COLUMNS, r)) for r in rows], _LABEL_CASE_COLUMNS)
        except (TypeError, ValueError):  # a value that no row of ours holds: edited
            return "(rows that are not JSON data)"

    def _order_digest_of(self, seq: int) -> str:
        """The digest of the case ids of a ``record`` entry's run in the order of their rows (their ``id``: the order
        of the stream every alarm tests), as :meth:`record_run` records it in the entry (``order_digest``)."""
        rows = self._all("SELECT c.case_id FROM cases c JOIN runs r ON c.run_id = r.id WHERE r.audit_seq = ? "
                         "ORDER BY c.id", (seq,))
        try:
            return rows_digest([{"case_id": r[0]} for r in rows], ("case_id",))
        except (TypeError, ValueError):  # a value that no row of ours holds: edited
            return "(rows that are not JSON data)"

    def _rows_of(self, action: str, seq: int) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
        """The rows a ``record`` or ``label`` entry wrote, as its ``rows_digest`` covers them, and the columns."""
        if action == "record":
            cols = ", ".join(f"c.{c}" for c in _CASE_COLUMNS)
            rows = self._all(f"SELECT {cols} FROM cases c JOIN runs r ON c.run_id = r.id WHERE r.audit_seq = ?",
                             (seq,))
            # in Python's (code point) order, as record_run hashed them: a server's collation (en-US) sorts otherwise
            found = sorted((dict(zip(_CASE_COLUMNS, r)) for r in rows), key=lambda d: str(d["case_id"]))
            columns = _CASE_COLUMNS
        else:
            rows = self._all("SELECT l.case_row, l.dice, l.failure, l.loss, l.source FROM labels l "
                             "WHERE l.audit_seq = ? ORDER BY l.id", (seq,))
            found, columns = [dict(zip(_LABEL_COLUMNS, r)) for r in rows], _LABEL_COLUMNS
        return found, columns

    # ------------------------------------------------------------------------------------------------- the writes
    def record_run(
        self, rule: Mapping[str, Any], cases: Sequence[CaseRecord], *, source_digest: str, folder: str,
        triaged_at: str, model_digest: str | None, command: Sequence[str] | None = None,
        not_triaged: Sequence[str] = (),
    ) -> tuple[int, bool]:
        """Record one triage run (its rule and its cases) and its audit entry, in one transaction.

        A run is recorded once (its ``source_digest``), and so is a decision: a case that a run already recorded
        with the same rule, site, case id, score, image z-score, expected Dice, decision and code (and prediction
        file, for a case whose score is undefined) is skipped, so that it does not weigh twice in the alarms,
        whichever triage folder recorded it (triage run again on a folder of predictions that gained cases rewrites
        ``triage.json`` with the earlier decisions in it; a site that triages into a new folder each month from a
        predictions folder that keeps growing repeats every earlier decision, also when its path changed (another
        mount, new storage): found by a review of the store under real operations, where only the same folder's
        were skipped). A case id with another decision (another score: another scan), an undefined score and another
        prediction file (a later batch reusing the id, whose undefined score, None, matches any other), or at
        another site, is another case and is recorded. So is a case with the same decision whose prediction
        differs (:attr:`CaseRecord.prediction_sha256`, the digest of its voxels, known on both sides): a new scan
        that reuses the case id (a follow-up of the same patient) and happens to score alike (a score of 0, a
        count). Without a digest on either side (a record of an earlier monai-unc, a prediction gone or changed
        since triage) the case counts as recorded; the entry's ``n_skipped_unconfirmed`` says how many.

        Args:
            rule: the rule's JSON (``referral_rule.json`` as triage recorded it), with its ``digest``.
            cases: the run's decisions.
            source_digest: the SHA-256 of the run's ``triage.json`` (a run recorded twice is recorded once).
            folder: the triage folder (for the audit trail).
            triaged_at: when the run triaged (ISO 8601).
            model_digest: the model's digest or None.
            command: the command line of the audit entry (default ``sys.argv``).
            not_triaged: the case ids the run could not triage (``triage.json``'s ``not_triaged``: no prediction),
                kept in the run's audit entry (:meth:`not_triaged`), so that a label of one of them is told from a
                label of a case the store never heard of.

        Returns:
            ``(run id, new)``: ``new`` False when the run was already in the store (nothing written). The run's
            ``n_cases`` (:meth:`runs`) counts the cases written, without those skipped.

        Raises:
            ValueError: before anything is written: a rule with a missing or wrong field, or that does not match its
                digest (:func:`check_rule`); a text field of the run or of a case (its id, site, scanner, ...) that is
                not text of at most 1000 characters without NUL; the reserved site name; a case of another rule; a
                decision other than ``accept`` / ``review``, or a code that contradicts it (``accepted`` exactly for
                ``accept``).
            TypeError: a case's score, image z-score or expected Dice that is no number (text, a bool; numpy numbers
                are taken; NaN, infinite or None: undefined).

        Example:
            >>> import tempfile
            >>> rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
            >>> rule["digest"] = rule_body_digest(rule)
            >>> cases = [CaseRecord(c, "Centre A", None, "2026-01-31T00:00:00+00:00", s, float("nan"), float("nan"),
            ...                     d, "accepted" if d == "accept" else "above_threshold", "the rule's reason",
            ...                     rule["digest"], None)
            ...          for c, s, d in (("a", 0.2, "accept"), ("b", 0.7, "review"))]
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     first = store.record_run(rule, cases, source_digest="jan", folder="triage_01",
            ...                              triaged_at="2026-01-31T00:00:00+00:00", model_digest=None, command=["x"])
            ...     again = store.record_run(rule, cases, source_digest="jan", folder="triage_01",
            ...                              triaged_at="2026-01-31T00:00:00+00:00", model_digest=None)
            ...     # February's triage of the grown predictions folder repeats a and b: only c is new
            ...     c = CaseRecord("c", "Centre A", None, "2026-02-28T00:00:00+00:00", 0.3, float("nan"),
            ...                    float("nan"), "accept", "accepted", "the rule's reason", rule["digest"], None)
            ...     feb = store.record_run(rule, [*cases, c], source_digest="feb", folder="triage_02",
            ...                            triaged_at="2026-02-28T00:00:00+00:00", model_digest=None)
            ...     written = [r["n_cases"] for r in store.runs()]
            >>> first, again, feb, written
            ((1, True), (1, False), (2, True), [2, 1])
        """
        digest = check_rule(rule, "the rule to record")  # its fields, and its body against its digest
        for name, value in (("source_digest", source_digest), ("triaged_at", triaged_at),
                            ("model_digest", model_digest)):
            _check_text(value, f"the run's {name}", allow_none=name == "model_digest")
        if not isinstance(folder, str) or "\x00" in folder:  # a path: any length
            raise ValueError(f"the run's folder must be text without NUL, got {folder!r:.80}")
        if _not_utf8(folder):
            raise ValueError(f"the run's folder {folder[-200:]!r} is not UTF-8 text (a name from a Latin-1 share?): "
                             "rename it, or copy the triage folder to a UTF-8 name")
        if isinstance(not_triaged, (str, bytes)) or not isinstance(not_triaged, Sequence):
            raise TypeError(f"not_triaged must be a list of case ids, got {not_triaged!r:.80}")
        untriaged = sorted({_check_text(c, "a case id of not_triaged") for c in not_triaged})
        for c in cases:
            _check_text(c.case_id, "a case's id")
            for name in ("site", "scanner", "triaged_at", "decision", "code", "reason", "rule_digest", "model_digest",
                         "prediction", "prediction_sha256"):
                _check_text(getattr(c, name), f"the {name} of case {c.case_id!r}",
                            allow_none=name in ("scanner", "model_digest", "prediction", "prediction_sha256"))
            if c.site == ALL_SITES:
                raise ValueError(f"case {c.case_id!r}: the site name {ALL_SITES!r} is reserved for the pooled stream "
                                 "of all sites: give the site another name (--site, --sites)")
            if c.rule_digest != digest:
                raise ValueError(f"case {c.case_id!r}: its rule digest {c.rule_digest[:80]!r} is not that of the run's "
                                 f"rule ({digest})")
            # found by hostile testing: another decision ("Accept") was counted as referred and left out of the risk
            # test, and a code that contradicts the decision recorded a decision the rule did not make
            if c.decision not in _DECISIONS:
                raise ValueError(f"the decision of case {c.case_id!r} must be one of {_DECISIONS}, got "
                                 f"{c.decision[:80]!r}")
            if (c.code == "accepted") != (c.decision == "accept"):
                wanted = "accepted" if c.decision == "accept" else "a reason for review"
                raise ValueError(f"the code of case {c.case_id!r} must be {wanted} (its decision is "
                                 f"{c.decision!r}), got {c.code[:80]!r}")
        # the numbers as the store keeps and hashes them (a numpy float32 is a float, text no number)
        every = sorted(({**c.__dict__, **{k: _case_number(getattr(c, k), k, c.case_id) for k in _DECISION_FLOATS}}
                        for c in cases), key=lambda r: r["case_id"])
        with self._transaction():
            found = self._all("SELECT id FROM runs WHERE source_digest = ?", (source_digest,))
            if found:
                return int(found[0][0]), False
            if not self._all("SELECT 1 FROM rules WHERE digest = ?", (digest,)):
                col = _rule_columns(rule)
                self._execute("INSERT INTO rules (digest, score, target_risk, risk, failure_dice, calibration_scores, "
                              "body) VALUES (?, ?, ?, ?, ?, ?, ?)",
                              (digest, col["score"], col["target_risk"], col["risk"], col["failure_dice"],
                               _canonical(col["calibration_scores"]), _in_order(rule)))
            known = self._recorded_decisions(digest, [r["case_id"] for r in every])
            rows, unverified = [], 0
            for r in every:
                found = known.get(_decision_key(r))
                if found is None or not _same_scan(r["prediction_sha256"], found):
                    rows.append(r)  # a new decision, or the same values from another scan (its prediction differs)
                elif r["prediction_sha256"] is None or None in found:
                    unverified += 1  # skipped as recorded, though no prediction digest could confirm the same scan
            ordered = sorted(rows, key=lambda r: _within_run_order(r["case_id"]))
            details = {"triage": folder, "source_digest": source_digest, "rule_digest": digest,
                       "model_digest": model_digest, "n_cases": len(rows),
                       "n_already_recorded": len(every) - len(rows), "n_skipped_unconfirmed": unverified,
                       "rows_digest": rows_digest(rows, _CASE_COLUMNS),
                       "predictions_digest": rows_digest(rows, _PREDICTION_DIGEST_COLUMNS),
                       # the order of the stream within the run (the rows digest above keeps case-id order): found by
                       # review 61, a run's rows re-sorted by case id (their ids permuted) verified
                       "order_digest": rows_digest(ordered, ("case_id",))}
            if untriaged:  # only where there are some: the entry of a run without them is as before
                details["not_triaged"] = untriaged
            seq = self._append_audit("record", details, command)
            run_id = self._insert_id(
                "INSERT INTO runs (audit_seq, source_digest, recorded_at, triaged_at, folder, rule_digest, "
                "model_digest, n_cases) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (seq, source_digest, _now(), triaged_at, folder, digest, model_digest, len(rows)))
            cols = ", ".join(_CASE_COLUMNS)
            marks = ", ".join("?" * (len(_CASE_COLUMNS) + 2))
            # the stream's order within the run (the entry's order_digest)
            self._executemany(f"INSERT INTO cases (run_id, {cols}, prediction_sha256) VALUES ({marks})",
                              [(run_id, *(_clean(r[c]) for c in _CASE_COLUMNS), r["prediction_sha256"])
                               for r in ordered])
        return run_id, True

    def _recorded_decisions(self, digest: str, case_ids: Sequence[str]) -> dict[tuple[Any, ...], set[str | None]]:
        """The decisions (:func:`_decision_key`) of these case ids that the store holds under a rule, from any run,
        each with the prediction digests of its records (None: unknown, a record made before monai-unc kept them).

        The cases by id (index ``cases_by_case_id``), so the cost follows the run's size, not the store's history;
        the rule is compared here, not in the query: with ``rule_digest = ?`` in it SQLite took the rule's index
        (``cases_by_rule_site``) and read every case the rule ever recorded, so recording 10^5 cases in runs of 1 000
        took 17.6 s of CPU instead of 1.4 s, growing with every run (found by the benchmark review).
        """
        out: dict[tuple[Any, ...], set[str | None]] = {}
        ids = sorted(set(case_ids))
        cols = ", ".join(_DECISION_COLUMNS)
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            for r in self._all(f"SELECT rule_digest, prediction_sha256, {cols} FROM cases WHERE case_id IN "
                               f"({', '.join('?' * len(chunk))})", chunk):
                if r[0] == digest:
                    out.setdefault(_decision_key(dict(zip(_DECISION_COLUMNS, r[2:]))), set()).add(r[1])
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

        Each label goes to the record of its case id (at its ``site`` and in its ``run`` when the label names them).
        A case id recorded at more than one site is ambiguous without the site (sites that number their cases
        alike): the label of one site's case must not go to another site's, so such a label is refused. Likewise a
        case id recorded in more than one run (at the label's site) is ambiguous without the run or the record
        (``case_row``): a reused id is another scan, and a label given to the latest record could be the earlier
        scan's, so such a label is refused.

        Args:
            labels: ``{"case", "dice", "failure", "loss"}`` per case, optionally ``"site"``, ``"run"`` (the run id
                of the record; ``dice`` / ``failure`` / ``site`` / ``run`` may be None; ``loss`` in ``[0, 1]`` is
                what the risk statistics use) and ``"case_row"``:
                the record (``row`` of :meth:`cases`) whose rule gave the loss. A label whose case was recorded again
                since (a newer record, perhaps under another rule) is then refused instead of going to the newer
                record with a loss of the older rule; ``case_row`` 0 says that the case was not in the store when the
                loss was given (a placeholder), so a case recorded since is refused too.
            source: where the labels came from (a CSV or a folder; for the audit trail).
            command: the command line of the audit entry.

        Returns:
            The number of labels recorded.

        Raises:
            ValueError: a case id that is not in the store (at the label's site, in its run), a case id of several
                sites without the site, of several runs without the run or ``case_row``, a case recorded (again)
                after its ``case_row``, two labels of one case record (its id with and without its site, or given
                twice), a loss or a Dice outside ``[0, 1]`` (NaN too), a failure other than 0 and 1, or a run id or
                case row out of range.
            TypeError: a loss, Dice, failure, run or case row that is no number of its kind (text, a bool; numpy
                numbers are taken), or a label without its loss.

        Example:
            >>> import tempfile
            >>> rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
            >>> rule["digest"] = rule_body_digest(rule)
            >>> cases = [CaseRecord(c, "Centre A", None, "2026-01-31T00:00:00+00:00", s, float("nan"), float("nan"),
            ...                     d, "accepted" if d == "accept" else "above_threshold", "the rule's reason",
            ...                     rule["digest"], None)
            ...          for c, s, d in (("a", 0.2, "accept"), ("b", 0.7, "review"))]
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     first = store.record_run(rule, cases, source_digest="jan", folder="triage_01",
            ...                              triaged_at="2026-01-31T00:00:00+00:00", model_digest=None, command=["x"])
            ...     audited = [{"case": "a", "dice": 0.62, "failure": None, "loss": 1.0}]  # a failure: Dice < 0.8
            ...     n = store.add_labels(audited, source="audit.csv")
            ...     labelled = [(r["case_id"], r["dice"], r["loss"]) for r in store.cases() if r["n_labels"]]
            >>> n, labelled
            (1, [('a', 0.62, 1.0)])
        """
        # checked whatever the batch holds: an empty batch wrote a source of any type and length into the audit log,
        # and a source that is not UTF-8 failed with the codec's UnicodeEncodeError (found by hostile testing)
        source = _check_text(source, "source")
        with self._transaction():
            rows = []
            missing, ambiguous, several_runs, moved, appeared, twice = [], [], [], [], [], []
            given: dict[int, str] = {}  # case row -> how the batch named it (its first label)
            for lab in labels:
                cid = _check_text(lab.get("case"), "case")
                site = _check_text(lab.get("site"), "site", allow_none=True)
                run = _label_int(lab.get("run"), "run", cid, "a run id (a positive int) or None")
                if run is not None and run < 1:
                    raise ValueError(f"the run of case {cid!r} must be a run id (a positive int) or None, got {run!r}")
                expected = _label_int(lab.get("case_row"), "case_row", cid, "a case row (an int >= 0) or None")
                if expected is not None and expected < 0:
                    raise ValueError(f"the case_row of case {cid!r} must be a case row (an int >= 0) or None, got "
                                     f"{expected!r}")
                dice, fail, loss = _label_values(lab, cid)
                records = self._all("SELECT id, site, run_id FROM cases WHERE case_id = ? ORDER BY id DESC", (cid,))
                if run is not None:  # one record at most: a run records a case id once
                    records = [r for r in records if int(r[2]) == run]
                if site is not None:
                    records = [r for r in records if r[1] == site]
                elif len({r[1] for r in records}) > 1:
                    ambiguous.append(f"{cid!r} ({', '.join(sorted({str(r[1]) for r in records})[:5])})")
                    continue
                named = cid if site is None else f"{cid} at {site}"
                if run is None and expected is None and len(records) > 1:  # a reused id: which scan, nothing says
                    runs = sorted(int(r[2]) for r in records)
                    several_runs.append(f"{cid!r}{'' if site is None else f' at {site}'} (runs "
                                        f"{', '.join(map(str, runs[:5]))}{', ...' if len(runs) > 5 else ''})")
                    continue
                found = records[:1]
                if not found:
                    missing.append(named + ("" if run is None else f" in run {run}"))
                    continue
                if expected is not None and int(found[0][0]) != expected:
                    (appeared if expected == 0 else moved).append(named)
                    continue
                if int(found[0][0]) in given:  # found by hostile review: 'a,,1' and 'a,X,0' of a labels table with a
                    # site column are both case a at X; the later row silently replaced the earlier one
                    twice.append(f"{named!r} (also as {given[int(found[0][0])]!r})")
                    continue
                given[int(found[0][0])] = named
                rows.append({"case_row": int(found[0][0]), "dice": dice, "failure": fail, "loss": loss,
                             "source": source, "case_id": cid, "site": found[0][1]})
            if twice:
                raise ValueError(f"{len(twice)} case(s) labelled twice in one batch ({_first_five(twice, '; ')}): "
                                 "which label holds cannot be told; keep one label per case")
            if ambiguous:
                raise ValueError(f"{len(ambiguous)} labelled case id(s) recorded at more than one site "
                                 f"({_first_five(ambiguous, '; ')}): add a 'site' column to the labels table to say "
                                 "whose case each label is")
            if several_runs:
                raise ValueError(f"{len(several_runs)} labelled case id(s) recorded in more than one run "
                                 f"({_first_five(several_runs, '; ')}): a reused case id may be another scan; add a "
                                 "'run' column to the labels table (the run id 'monai-unc monitor record' printed) to "
                                 "say whose record each label is")
            if moved:
                raise ValueError(f"{len(moved)} labelled case(s) were recorded again while the labels were read "
                                 f"({_first_five(moved)}): their losses followed the earlier record's rule; run the "
                                 "command again")
            if appeared:
                raise ValueError(f"{len(appeared)} labelled case(s) were recorded while the labels were read "
                                 f"({_first_five(appeared)}): their losses were not given under their rules; run the "
                                 "command again")
            if missing:
                raise ValueError(f"{len(missing)} labelled case(s) not in the monitoring store "
                                 f"({_first_five(missing)}): record their triage run first (monai-unc monitor record)")
            details = {"source": source, "n_labels": len(rows), "rows_digest": rows_digest(rows, _LABEL_COLUMNS),
                       "cases_digest": rows_digest(rows, _LABEL_CASE_COLUMNS)}
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
            "regions", "regions_in_order", "image_reference", "expected_dice_estimate"}}`` (``num_classes`` /
            ``regions`` / ``image_reference`` None when the rule does not say; ``image_reference`` is the rule's JSON
            object, unchecked: :func:`~monai_unc.monitoring.status.image_reference_scores` reads it).
            ``regions_in_order`` is False for a rule recorded by a monai-unc that kept its JSON with sorted keys, where
            the order of the regions (the channels of region masks) is lost. ``expected_dice_estimate`` says what the
            ``expected_dice`` of the cases the rule decided estimates (:data:`~monai_unc.keys.
            EXPECTED_DICE_ESTIMATES`: ``"class_mean"``, ``"region_mean"``, or ``"merged_foreground"`` for a rule of
            classes certified before it was recorded, :data:`~monai_unc.keys.LEGACY_REGION_ESTIMATE` for a rule of
            regions certified before ``format_version`` 5): triage computes a case's estimate as the rule's
            calibration cases' were, so the cases of one rule hold one quantity, and those of two rules are not to be
            compared.

        Raises:
            ValueError: one line naming the store: a row whose body does not match its digest, whose columns do not
                match its body, or that is not a rule (a row edited outside the store: :meth:`verify` reports it).

        Example:
            >>> import tempfile
            >>> rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
            >>> rule["digest"] = rule_body_digest(rule)
            >>> cases = [CaseRecord(c, "Centre A", None, "2026-01-31T00:00:00+00:00", s, float("nan"), float("nan"),
            ...                     d, "accepted" if d == "accept" else "above_threshold", "the rule's reason",
            ...                     rule["digest"], None)
            ...          for c, s, d in (("a", 0.2, "accept"), ("b", 0.7, "review"))]
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     first = store.record_run(rule, cases, source_digest="jan", folder="triage_01",
            ...                              triaged_at="2026-01-31T00:00:00+00:00", model_digest=None, command=["x"])
            ...     stored = store.rules()[rule["digest"]]
            >>> stored["score"], stored["target_risk"], stored["failure_dice"], stored["calibration_scores"]
            ('mean_entropy', 0.1, 0.8, [])
        """
        out = {}
        for row in self._rule_rows():
            try:
                d, rule = self._read_rule_row(row)
            except ValueError as e:
                raise ValueError(f"the monitoring database {self._name!r}: {e}; monai-unc monitor verify lists what "
                                 "was changed") from None
            out[d] = rule
        return out

    def _rule_rows(self) -> list[tuple[Any, ...]]:
        return self._all("SELECT digest, score, target_risk, risk, failure_dice, calibration_scores, body FROM rules "
                         "ORDER BY digest")

    @staticmethod
    def _read_rule_row(row: Sequence[Any]) -> tuple[str, dict[str, Any]]:
        """One row of the table ``rules``, checked: its body matches its digest, its columns match its body.

        Raises:
            ValueError: what does not match (the row was edited outside the store).
        """
        d, score, target, risk, fd, cal, body = row
        if not isinstance(d, str):
            raise ValueError(f"a row of the table rules has the digest {d!r:.80} (not text): the row was edited")
        name = f"the stored rule {d[:80]!r}"
        if not isinstance(body, str) or not isinstance(cal, str):
            raise ValueError(f"{name}: its body or its calibration scores are not text: the row was edited")
        try:
            doc = json.loads(body)
            scores = json.loads(cal)
        except (ValueError, RecursionError):
            raise ValueError(f"{name}: its body or its calibration scores are not JSON: the row was edited") from None
        try:
            _check_rule_fields(doc, name)
            same = doc["digest"] == d and rule_body_digest(doc) == d
        except (TypeError, ValueError) as e:
            raise ValueError(f"{str(e)[:300]} (its body in the table rules was edited)") from None
        if not same:
            raise ValueError(f"{name}: its body in the table rules does not match its digest: the row was edited")
        expected = _rule_columns(doc)
        stored = {"score": score, "target_risk": target, "risk": risk, "failure_dice": fd, "calibration_scores": scores}
        changed = [k for k, v in expected.items() if not _same_value(stored[k], v)]
        if changed:
            raise ValueError(f"{name}: its column(s) {', '.join(changed)} in the table rules do not match its body: "
                             "the row was edited")
        nc = doc.get("num_classes")
        return d, {"score": expected["score"], "target_risk": float(expected["target_risk"]),
                   "risk": expected["risk"],
                   "failure_dice": None if expected["failure_dice"] is None else float(expected["failure_dice"]),
                   "calibration_scores": [float(v) for v in expected["calibration_scores"]],
                   "num_classes": nc if isinstance(nc, int) and not isinstance(nc, bool) else None,
                   "regions": doc.get("regions"),
                   "regions_in_order": body != _canonical(doc),  # a rule's JSON never has sorted keys
                   "image_reference": doc.get("image_reference"),
                   "expected_dice_estimate": _expected_dice_estimate(doc)}

    def cases(self) -> list[dict[str, Any]]:
        """Every recorded case in recording order, with its latest label's ``loss`` / ``dice`` (None when none).

        Returns:
            One dict per case row: the :class:`CaseRecord` fields, ``row`` (its id), ``run`` and ``loss``,
            ``dice``, ``failure`` of its latest label, ``label_seq``: the audit entry of its first label (when
            its label arrived: the order of the risk test), None without a label, ``n_labels``: how many labels
            it has (0 without; more than 1: labelled again), ``loss_changed``: whether its labels gave it more
            than one loss (a correction, not a confirmation), and ``prediction_sha256``: the digest of the
            prediction's voxels as triage read them (:attr:`CaseRecord.prediction_sha256`; None when unknown, and in
            a store of schema 1).

        Raises:
            ValueError: one line naming the store: a value of the wrong type or out of range, or a case whose rule
                is not in the table ``rules`` (rows edited or deleted outside the store: :meth:`verify` reports them).

        Example:
            >>> import tempfile
            >>> rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
            >>> rule["digest"] = rule_body_digest(rule)
            >>> cases = [CaseRecord(c, "Centre A", None, "2026-01-31T00:00:00+00:00", s, float("nan"), float("nan"),
            ...                     d, "accepted" if d == "accept" else "above_threshold", "the rule's reason",
            ...                     rule["digest"], None)
            ...          for c, s, d in (("a", 0.2, "accept"), ("b", 0.7, "review"))]
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     first = store.record_run(rule, cases, source_digest="jan", folder="triage_01",
            ...                              triaged_at="2026-01-31T00:00:00+00:00", model_digest=None, command=["x"])
            ...     rows = store.cases()
            >>> [(r["case_id"], r["run"], r["decision"], r["loss"]) for r in sorted(rows, key=lambda r: r["case_id"])]
            [('a', 1, 'accept', None), ('b', 1, 'review', None)]
        """
        cols = ", ".join(f"c.{c}" for c in _CASE_COLUMNS)
        # the labels aggregated once per case row, then joined: a subquery per case (its latest label, its first
        # label's entry) was planned by PostgreSQL, on statistics older than a batch of labels, as a scan of every
        # label for each case (found by hostile testing: 50 000 cases and 5 000 labels took 33 s, not 0.7 s)
        # the column of schema 2 (a reader reads a store of schema 1 as it is)
        digest = "c.prediction_sha256" if self.schema_version() >= _PREDICTION_DIGESTS_SINCE else "NULL"
        sql = (f"SELECT c.id, c.run_id, {cols}, l.loss, l.dice, l.failure, agg.first_seq, agg.n_labels, "
               f"agg.loss_changed, {digest} FROM cases c "
               "LEFT JOIN (SELECT case_row, MAX(id) AS last_id, MIN(audit_seq) AS first_seq, COUNT(*) AS n_labels, "
               "MIN(loss) < MAX(loss) AS loss_changed FROM labels GROUP BY case_row) agg ON agg.case_row = c.id "
               "LEFT JOIN labels l ON l.id = agg.last_id ORDER BY c.id")
        out = []
        for r in self._all(sql):
            d = {"row": r[0], "run": r[1], **dict(zip(_CASE_COLUMNS, r[2:2 + len(_CASE_COLUMNS)]))}
            d["loss"], d["dice"], d["failure"], d["label_seq"], n_labels, changed, d["prediction_sha256"] = \
                r[2 + len(_CASE_COLUMNS):]
            d["n_labels"], d["loss_changed"] = (0 if n_labels is None else int(n_labels)), bool(changed)
            out.append(self._checked_case(d))
        known = {r[0] for r in self._all("SELECT digest FROM rules")}
        orphans = sorted({c["rule_digest"] for c in out} - known)
        if orphans:
            raise ValueError(f"the monitoring database {self._name!r}: recorded cases name rule(s) that are not in "
                             f"the table rules ({_first_five(orphans)}): rows were deleted; monai-unc monitor verify "
                             "lists what was changed")
        return out

    def _checked_case(self, d: dict[str, Any]) -> dict[str, Any]:
        """A row of :meth:`cases`, each value of the type its column holds (a row edited outside the store: one line
        naming the store, the row and the column, not a ``TypeError`` deep in the statistics)."""
        def bad(column: str, what: str) -> ValueError:
            return ValueError(f"the monitoring database {self._name!r}: case row {d['row']!r:.20}: column {column} "
                              f"must be {what}, got {d[column]!r:.60}; monai-unc monitor verify lists what was changed")

        for k in ("row", "run"):
            if _as_int(d[k]) is None:
                raise bad(k, "an integer")
        for k in _CASE_COLUMNS:
            optional = k in ("scanner", "model_digest", "prediction")
            if k in ("score", "image_z_max", "expected_dice"):
                if d[k] is not None and (isinstance(d[k], bool) or not isinstance(d[k], (int, float))):
                    raise bad(k, "a number or null")
                d[k] = math.nan if d[k] is None else float(d[k])
            elif not (isinstance(d[k], str) or (optional and d[k] is None)):
                raise bad(k, "text" + (" or null" if optional else ""))
        for k in ("loss", "dice"):
            if d[k] is not None and (not _real(d[k]) or not 0 <= d[k] <= 1):
                raise bad(k, "a number in [0, 1] or null")
            d[k] = None if d[k] is None else float(d[k])
        if d["failure"] not in (None, 0, 1) or isinstance(d["failure"], bool):
            raise bad("failure", "0, 1 or null")
        # as record_run writes them (found by hostile review 59: a decision edited into "Accept" or "maybe" was read,
        # counted as referred and left out of the risk test, a code contradicting its decision passed, and a site
        # edited into the reserved name of the pooled stream gave status two streams of that name)
        if d["decision"] not in _DECISIONS:
            raise bad("decision", f"one of {_DECISIONS}")
        if d["site"] == ALL_SITES:  # a site of that name was one more stream named as the pooled one
            raise bad("site", f"a site's name, not the name {ALL_SITES!r} of the pooled stream")
        if (d["code"] == "accepted") != (d["decision"] == "accept"):
            raise bad("code", "'accepted' for an accepted case and a reason for review for another")
        if d["label_seq"] is not None and _as_int(d["label_seq"]) is None:
            raise bad("label_seq", "an audit entry's number or null")
        if d["prediction_sha256"] is not None and not isinstance(d["prediction_sha256"], str):
            raise bad("prediction_sha256", "text or null")
        d["failure"] = None if d["failure"] is None else int(d["failure"])
        return d

    def runs(self) -> list[dict[str, Any]]:
        """The recorded runs in order.

        Returns:
            One dict per run: ``id``, ``audit_seq`` (its ``record`` entry), ``recorded_at``, ``triaged_at``,
            ``folder``, ``rule_digest``, ``model_digest`` and ``n_cases`` (the cases written, without those skipped
            as already recorded).

        Example:
            >>> import tempfile
            >>> rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
            >>> rule["digest"] = rule_body_digest(rule)
            >>> cases = [CaseRecord(c, "Centre A", None, "2026-01-31T00:00:00+00:00", s, float("nan"), float("nan"),
            ...                     d, "accepted" if d == "accept" else "above_threshold", "the rule's reason",
            ...                     rule["digest"], None)
            ...          for c, s, d in (("a", 0.2, "accept"), ("b", 0.7, "review"))]
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     first = store.record_run(rule, cases, source_digest="jan", folder="triage_01",
            ...                              triaged_at="2026-01-31T00:00:00+00:00", model_digest=None, command=["x"])
            ...     run = store.runs()[0]
            >>> run["id"], run["audit_seq"], run["folder"], run["n_cases"]
            (1, 2, 'triage_01', 2)
        """
        keys = ("id", "audit_seq", "recorded_at", "triaged_at", "folder", "rule_digest", "model_digest", "n_cases")
        return [dict(zip(keys, r)) for r in self._all(f"SELECT {', '.join(keys)} FROM runs ORDER BY id")]

    def not_triaged(self) -> dict[str, list[int]]:
        """The case ids that recorded runs could not triage (no prediction), with those runs.

        Read from the runs' ``record`` entries of the audit log (:meth:`record_run`'s ``not_triaged``; a run recorded
        before monai-unc kept them names none). A case id may also have a record, from a later run that triaged it.

        Returns:
            ``{case id: [run id, ...]}``.

        Example:
            >>> import tempfile
            >>> rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
            >>> rule["digest"] = rule_body_digest(rule)
            >>> case = CaseRecord("a", "Centre A", None, "2026-01-31T00:00:00+00:00", 0.2, float("nan"), float("nan"),
            ...                   "accept", "accepted", "the rule's reason", rule["digest"], None)
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     _ = store.record_run(rule, [case], source_digest="jan", folder="triage_01", not_triaged=["b"],
            ...                          triaged_at="2026-01-31T00:00:00+00:00", model_digest=None, command=["x"])
            ...     store.not_triaged()
            {'b': [1]}
        """
        runs = {int(r[1]): int(r[0]) for r in self._all("SELECT id, audit_seq FROM runs")}
        out: dict[str, list[int]] = {}
        for e in self.audit_log():
            if e.action != "record" or e.seq not in runs:
                continue
            try:
                details = json.loads(e.details)
            except ValueError:  # an edited entry: monitor verify says so
                continue
            names = details.get("not_triaged") if isinstance(details, dict) else None
            for c in names if isinstance(names, list) else ():
                if isinstance(c, str):
                    out.setdefault(c, []).append(runs[e.seq])
        return out

    def run_sites(self, run_id: int) -> list[str]:
        """The sites of the cases a run wrote (sorted; those it skipped as already recorded are not among them).

        Args:
            run_id: the run (:meth:`record_run`'s id).

        Returns:
            The sites, each once.

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as d, MonitorStore(f"{d}/monitor.db") as store:
            ...     store.run_sites(1)
            []
        """
        return sorted(str(r[0]) for r in self._all("SELECT DISTINCT site FROM cases WHERE run_id = ?", (int(run_id),)))
