"""What ``monai-unc monitor record`` and ``monitor label`` read: a triage folder, sites, audited labels.

Every file read here is untrusted input (a user may edit it): each field is checked, and a wrong one is a
``ValueError`` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import re
import stat
import unicodedata
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .._utils import listed
from ..evaluation.case import load_evaluation_case
from ..evaluation.cohort import dice_failed, risk_of_dice
from ..evaluation.config import STATE_DIR, EvaluationConfig
from ..evaluation.resume import CASES_DIR, file_signature
from ..evaluation.rows import case_dice, case_tasks, unclaimed_case_labels
from ..evaluation.triage.rule import (
    Decision,
    ImageReference,
    ReferralRule,
    check_recorded_decisions,
    check_triage_summary,
)
from ..io import (
    VOLUME_EXTENSIONS,
    CaseFiles,
    check_entry_kind,
    input_folder,
    parse_float,
    plain_file_name,
    read_table,
    read_volume,
    split_extension,
)
from ..io.provenance import has_weight_digests, read_untrusted_json
from ..io.signing import Trust
from .store import MAX_TEXT, UNKNOWN_SITE, CaseRecord, check_rule

__all__ = ["TriageRun", "read_triage_run", "read_sites", "sidecar_site", "read_label_table", "model_digest",
           "case_id_key", "loss_of", "LABEL_EXTENSIONS", "label_map_dice", "prediction_digest"]

#: the file endings of a folder of audited label maps (``<case><ending>``): the volumes ``evaluate`` reads as labels
#: (:data:`monai_unc.io.VOLUME_EXTENSIONS`, matched in any letter case; hidden files such as macOS' ``._a.nii.gz``
#: are no label: :func:`monai_unc.io.split_extension`)
LABEL_EXTENSIONS = VOLUME_EXTENSIONS

#: the decisions of a triage row
_DECISIONS = ("accept", "review")
#: keys of a JSON sidecar (dcm2niix / BIDS names first) that give the site and the scanner
_SITE_KEYS = ("site", "InstitutionName", "StationName")
_SCANNER_KEYS = (("scanner",), ("Manufacturer", "ManufacturerModelName"))


@dataclass(frozen=True)
class TriageRun:
    """A triage folder as the store records it.

    Attributes:
        folder: the folder.
        rule: the rule's JSON (with its ``digest``).
        cases: the decisions.
        source_digest: the SHA-256 of ``triage.json``.
        triaged_at: when it was written (ISO 8601, UTC).
        model_digest: the digest of the weight files the predictions recorded (:func:`model_digest`), or None when
            they recorded none.
        triage_check: how ``triage.json`` was checked against its digest and signature, one line
            (:func:`~monai_unc.evaluation.triage.rule.check_triage_summary`; not recorded in the store).
        not_triaged: the case ids the run could not triage (``triage.json``'s ``not_triaged``: no prediction), which
            have no decision; the store keeps them in the run's audit entry, so that ``monitor label`` skips their
            labels with a warning instead of refusing the batch.
        inputs: the files ``triage.json`` names for its cases (``files``: each case's ``seg``, ``probs``, the
            ``--uncertainty`` maps and ``image`` channels), the files whose folders triage read and reading the run
            reads (the predictions' digests, the images' sidecars): ``monitor record`` keeps the store outside them
            (:func:`~monai_unc.workflows.monitor.check_store_outside_inputs`).

    Example:
        >>> import json, tempfile
        >>> from monai_unc.io.provenance import rule_digest
        >>> from monai_unc.monitoring.store import rule_body_digest
        >>> rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
        >>> rule["digest"] = rule_body_digest(rule)
        >>> case = {"case": "a", "score": 0.2, "decision": "accept", "code": "accepted", "reason": "accepted"}
        >>> with tempfile.TemporaryDirectory() as d:
        ...     doc = {"rule": rule, "cases": [case]}
        ...     doc["digest"] = rule_digest(doc)  # as triage writes it (without: read with a warning)
        ...     _ = Path(d, "triage.json").write_text(json.dumps(doc))
        ...     run = read_triage_run(d, site="Centre A", triaged_at="2026-01-31T12:00:00")
        >>> run.rule["digest"] == rule["digest"], len(run.cases), run.triaged_at, run.model_digest, run.triage_check[:8]
        (True, 1, '2026-01-31T12:00:00+00:00', None, 'unsigned')
    """

    folder: Path
    rule: dict[str, Any]
    cases: tuple[CaseRecord, ...]
    source_digest: str
    triaged_at: str
    model_digest: str | None
    triage_check: str = ""
    not_triaged: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()


def model_digest(fingerprint: Any) -> str | None:
    """One digest of a model's weight files: ``sha256:`` of the sorted SHA-256 digests its fingerprint records.

    Args:
        fingerprint: a prediction fingerprint (``triage.json``'s ``fingerprint.predictions`` or the rule's).

    Returns:
        The digest, or None when the fingerprint records no weight digests.

    Example:
        >>> model_digest({"weights": [{"file": "a.pt", "sha256": "00"}]})[:7], model_digest({})
        ('sha256:', None)
    """
    if not isinstance(fingerprint, Mapping) or not has_weight_digests(fingerprint):
        return None
    digests = sorted(str(e["sha256"]) for e in fingerprint["weights"])
    return "sha256:" + hashlib.sha256("\n".join(digests).encode()).hexdigest()


def _number(v: Any, where: str) -> float:
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where} must be a number or null, got {v!r}")
    return float(v)


def _text(v: Any, where: str) -> str:
    if not isinstance(v, str) or not v or "\x00" in v or len(v) > MAX_TEXT:
        raise ValueError(f"{where} must be non-empty text (at most {MAX_TEXT} characters, no NUL), got "
                         f"{v!r}"[:300])
    return v


def case_id_key(case_id: str) -> str:
    """The key a case id is matched by across files: NFC, without surrounding whitespace.

    A case id comes from a file name (macOS writes names in NFD: ``u`` and a combining diaeresis), a sites table or
    a labels table from a person's typing or a spreadsheet (NFC ``ü``, perhaps a trailing space): the same case
    either way. A sites table's rows and a triage run's cases are matched by it, and so are a label and its recorded
    case when the label does not give the recorded id exactly (``monai-unc monitor label``).

    Args:
        case_id: the case id as written.

    Returns:
        Its Unicode NFC form without leading or trailing whitespace.

    Example:
        >>> case_id_key("Mu\u0308ller_01 ") == case_id_key("M\u00fcller_01")
        True
    """
    return unicodedata.normalize("NFC", case_id).strip()


def _series_header(folder: Path) -> dict[str, Any] | None:
    """The site and scanner attributes of a DICOM series folder's first slice (None: not a readable series)."""
    try:
        from ..io.dicom import read_series
    except ImportError:  # the dicom extra is not installed: no header to read
        return None
    try:
        ds = read_series(folder, pixels=False).datasets[0]
    except (ValueError, OSError):
        return None
    keys = _SITE_KEYS[1:] + _SCANNER_KEYS[1]
    return {k: str(getattr(ds, k)) for k in keys if isinstance(getattr(ds, k, None), str)}


def sidecar_site(image: Any, *, missing_ok: bool = False) -> tuple[str | None, str | None]:
    """The site and scanner an image records: its JSON sidecar (dcm2niix / BIDS), or its DICOM header.

    For an image file the sidecar is ``<image name without its extension>.json`` beside the image (``.nii.gz``,
    ``.nii``, ``.mha``, ... of :data:`monai_unc.io.VOLUME_EXTENSIONS` in any letter case: ``X.NII.GZ`` has
    ``X.json``). For an image that
    is a DICOM series folder (``monai-unc`` reads those with the ``dicom`` extra) the attributes are those of its
    slices' header. The site is ``site``, ``InstitutionName`` or ``StationName``; the scanner ``scanner``, or
    ``Manufacturer`` and ``ManufacturerModelName`` (each cut to 200 characters).

    A sidecar is untrusted input: it is read as strict JSON
    (:func:`~monai_unc.io.provenance.decode_untrusted_json`: UTF-8, at most 64 levels of nesting, no ``NaN``, ...),
    and a sidecar that is there but cannot be read, or whose site or scanner holds a NUL character, is an error
    naming it, not a case recorded without its site. So is an image that is no longer there, without a sidecar
    where it was (moved or archived since triage read it): whether it had one, and which site it named, cannot be
    told (found by hostile testing: such cases went to ``--site`` or ``unknown`` without a word, and the decisions a
    site had recorded before were recorded again under the new site, counted twice in the pooled stream), unless
    ``missing_ok``: the caller was told the site of such cases (``monitor record --site``).

    Args:
        image: the image's path (or None).
        missing_ok: an image that is not there, without a sidecar, gives ``(None, None)`` instead of the error.

    Returns:
        ``(site, scanner)``, each None when not recorded (no sidecar or readable DICOM header).

    Raises:
        ValueError: naming the sidecar: unreadable, not strict JSON, or a site or scanner with a NUL; naming the
            image: neither it nor a sidecar is there.

    Example:
        >>> import json, tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     header = {"InstitutionName": "Centre A", "Manufacturer": "GE", "ManufacturerModelName": "Signa"}
        ...     _ = Path(d, "case_01.json").write_text(json.dumps(header))  # as dcm2niix writes it
        ...     sidecar_site(str(Path(d, "case_01.nii.gz")))
        ('Centre A', 'GE Signa')
    """
    if not isinstance(image, str) or not image:
        return None, None
    p = Path(image)
    side = None
    try:
        if p.is_dir():
            doc: Any = _series_header(p)
        else:  # <name>.json beside <name>.<ext>, the extension in any letter case (X.NII.GZ: X.json)
            split = split_extension(p.name, VOLUME_EXTENSIONS)
            side = p.with_name((split[0] if split is not None else p.stem) + ".json")
            if not side.is_file():
                if not p.exists() and not missing_ok:  # neither the image nor a sidecar: moved or archived
                    raise ValueError(f"image {image[-200:]!r} is not there (moved or archived since triage read it?): "
                                     "whether a sidecar beside it named its site cannot be told; give the sites of the "
                                     "cases with --sites (case,site[,scanner]) or --site")
                return None, None
            doc = read_untrusted_json(side, f"image sidecar {side}")[1]
    except OSError as e:  # a path the file system refuses (too long)
        raise ValueError(f"image {image[:200]!r}: {e.strerror or type(e).__name__}") from None
    if not isinstance(doc, dict):
        return None, None
    where = "DICOM header of" if side is None else "image sidecar"
    for k in _SITE_KEYS + _SCANNER_KEYS[0] + _SCANNER_KEYS[1]:
        if isinstance(doc.get(k), str) and "\x00" in doc[k]:
            raise ValueError(f"{where} {side or p}: field {k!r} holds a NUL character, got {doc[k][:80]!r}")
    site = next((doc[k].strip() for k in _SITE_KEYS if isinstance(doc.get(k), str) and doc[k].strip()), None)
    scanner = None
    for keys in _SCANNER_KEYS:
        parts = [doc[k].strip() for k in keys if isinstance(doc.get(k), str) and doc[k].strip()]
        if parts:
            scanner = " ".join(parts)
            break
    return (site[:200] if site else None), (scanner[:200] if scanner else None)


def _read_named_table(path: str | os.PathLike, known: Sequence[str]) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows of a hand-made table (:func:`~monai_unc.io.read_table`), its ``known`` columns in any letter case.

    A spreadsheet's header ``Case,Failure,Dice`` names the columns ``case``, ``failure`` and ``dice``: read as other
    columns, an optional one (``failure``) was ignored without a word. A table naming one column in two letter cases
    is refused. The rows come with the line of the file each starts on (for messages).
    """
    columns, rows, lines = read_table(path, return_lines=True)
    rename: dict[str, str] = {}
    for c in columns:
        match = next((k for k in known if c.casefold() == k), None)
        if match is not None and c != match:
            if match in columns or match in rename.values():
                raise ValueError(f"{os.fspath(path)}: the column {match!r} is given twice (as {c!r}): keep one")
            rename[c] = match
    if not rename:
        return rows, lines
    return [{rename.get(k, k): v for k, v in r.items()} for r in rows], lines


def read_sites(path: str | os.PathLike) -> dict[str, tuple[str, str | None]]:
    """A table of sites: CSV with columns ``case`` and ``site`` (and optionally ``scanner``).

    The column names may be in any letter case (``Case,Site``); the table is read by
    :func:`~monai_unc.io.read_table` (a spreadsheet's byte-order mark skipped, misread rows refused).

    Args:
        path: the CSV file.

    Returns:
        ``{case: (site, scanner or None)}``, the case ids as written (:func:`read_triage_run` matches them with its
        cases in their NFC form without surrounding spaces).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a file that is not UTF-8 text, a missing column, an empty site, a case listed twice (also as
            the same id up to surrounding spaces or Unicode normalization), a case,
            site or scanner that is longer than 1000 characters or holds a NUL (each named with the file and line).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = Path(d, "sites.csv").write_text("case,site,scanner\\na,Centre A,GE Signa\\nb,Centre B,\\n")
        ...     read_sites(Path(d, "sites.csv"))
        {'a': ('Centre A', 'GE Signa'), 'b': ('Centre B', None)}
    """
    if not Path(path).is_file():  # review 63: a missing file was a bare "No such file or directory: x"
        check_entry_kind(Path(path), "sites table", folder=False)  # a folder or a link to nothing, named as such
        raise FileNotFoundError(f"sites table not found: {os.fspath(path)}")
    rows, lines = _read_named_table(path, ("case", "site", "scanner"))
    if not rows or "case" not in rows[0] or "site" not in rows[0]:
        raise ValueError(f"sites table {os.fspath(path)!r} needs the columns 'case' and 'site'")
    out: dict[str, tuple[str, str | None]] = {}
    keys: dict[str, str] = {}  # case_id_key -> the case id as written
    for i, r in zip(lines, rows):  # the file's lines (a blank line skipped by read_table counts)
        cid = _text(r.get("case"), f"{os.fspath(path)}: line {i}: 'case'")
        site = _text((r.get("site") or "").strip(), f"{os.fspath(path)}: line {i}: 'site'")
        key = case_id_key(cid)
        if key in keys:
            same = "" if keys[key] == cid else f" (as {keys[key]!r}: the same id up to spaces or Unicode normalization)"
            raise ValueError(f"{os.fspath(path)}: case {cid!r} is listed twice{same}")
        keys[key] = cid
        scanner = (r.get("scanner") or "").strip() or None
        out[cid] = (site, None if scanner is None else _text(scanner, f"{os.fspath(path)}: line {i}: 'scanner'"))
    return out


#: an ISO 8601 time's seconds with a fraction: the date and time, the fraction's digits, the zone
_FRACTION = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)[.,](\d+)(.*)")


def _iso_datetime(text: str) -> datetime:
    """``datetime.fromisoformat`` with the ISO 8601 forms it reads from Python 3.11 on, on every supported Python.

    Python 3.10 (the declared minimum) refused a ``Z`` zone and a fraction of other than 3 or 6 digits
    (``2026-03-01T10:00:00Z``, ``...:00.5+00:00``), which ``--time`` promises as ISO 8601 (found by running the
    tests on 3.10): a ``Z`` is read as ``+00:00`` and a fraction as its first 6 digits (3.11 cuts the rest too).

    Args:
        text: the time.

    Returns:
        The time, with its zone when it has one.

    Raises:
        ValueError: not an ISO 8601 time ``datetime.fromisoformat`` reads.
        TypeError: not a string.

    Example:
        >>> _iso_datetime("2026-03-01T10:00:00.5Z").isoformat()
        '2026-03-01T10:00:00.500000+00:00'
    """
    if not isinstance(text, str):
        raise TypeError(f"a time must be a string, got {type(text).__name__}")
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    m = _FRACTION.fullmatch(text)
    if m is not None:
        text = f"{m[1]}.{(m[2] + '000000')[:6]}{m[3]}"
    return datetime.fromisoformat(text)


#: voxels hashed at a time by :func:`prediction_digest` (as 8-byte values: 32 MiB)
_DIGEST_CHUNK = 1 << 22
#: the most bytes of a triage case state read for its prediction's signature (:func:`_triage_read_signature`)
_STATE_READ_LIMIT = 64 << 20


def _same_file_version(path: Path, read_as: Sequence[Any]) -> bool:
    """Whether ``path`` is still the version of the file whose signature triage recorded (``read_as``:
    :func:`~monai_unc.evaluation.resume.file_signature`, ``[path, size, mtime_ns, ctime_ns, inode, ...]``).

    The size and the modification time are compared for equality, as a cache key, never ordered against another
    clock; with them the signatures of a header's data files (a NIfTI pair's ``.img``). ctime and inode are left
    out: a predictions folder moved to new storage (``rsync -a``) keeps its files' versions.
    """
    try:
        now = file_signature(path)
    except (OSError, ValueError):
        return False
    if now is None or len(read_as) < 3 or list(now[1:3]) != list(read_as[1:3]):
        return False
    data_now, data_then = now[5:], list(read_as[5:])
    if len(data_now) != len(data_then):
        return False
    if data_now:
        inner_now, inner_then = data_now[0], data_then[0]
        if not isinstance(inner_then, list) or len(inner_now) != len(inner_then):
            return False
        return all(isinstance(b, list) and list(a[1:3]) == list(b[1:3]) for a, b in zip(inner_now, inner_then))
    return True


def _triage_read_signature(folder: str | os.PathLike, case_id: str, prediction: str) -> list[Any] | None:
    """The signature of a case's prediction file as its triage run read it, from the run's per-case state.

    ``triage`` (with its default ``resume``) keeps each case's row in ``<folder>/state/cases/<case>.json`` with the
    signature of the files it read (:func:`~monai_unc.evaluation.resume.file_signature`: path, size, modification
    time, ...). None when there is none to read (triage run without resume, its state removed, a state written for
    another path or that cannot be read).

    Args:
        folder: the triage output folder.
        case_id: the case.
        prediction: the prediction's path as ``triage.json`` records it.

    Returns:
        The signature (a list), or None.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _triage_read_signature(d, "case_01", f"{d}/case_01_seg.nii.gz")  # no state kept
    """
    # the case id comes from triage.json, untrusted: a plain file name only (io.plain_file_name), and a regular file
    # (found by the review of review 61: "../../x" read a state outside the folder, and a FIFO named <case>.json
    # blocked the read)
    if not plain_file_name(case_id):
        return None
    state = Path(folder) / STATE_DIR / CASES_DIR / f"{case_id}.json"
    try:
        st = state.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > _STATE_READ_LIMIT:
            return None
        doc = json.loads(state.read_bytes().decode("utf-8"))  # triage's own state (NaN as Python writes it)
        sig = doc["fingerprint"]["inputs"]["seg"]
        same_path = sig[0] == str(Path(prediction).resolve())
    except (OSError, ValueError, RecursionError, KeyError, TypeError, IndexError):
        return None
    return sig if doc.get("case") == case_id and isinstance(sig, list) and same_path else None


def prediction_digest(path: str | os.PathLike, written_before: float | None = None, *,
                      read_as: Sequence[Any] | None = None) -> str | None:
    """A digest of a predicted segmentation's voxels: what tells a new scan that reuses a case id from the same one.

    ``sha256:`` and the SHA-256 of the array's shape and its values, integers as 8-byte integers and other values as
    8-byte floats (a label map saved as ``uint8`` or ``int16``, or as a float file of whole numbers, gives the same
    digest), so that the same prediction written again (another compression, a new gzip time stamp, another
    folder) is the same scan, and another scan's prediction another digest. None when it cannot be known: the file
    is not there or cannot be read, or it is not the version triage read: its size or modification time is not that
    of ``read_as`` (the signature triage recorded, compared for equality, so whatever the clocks of the hosts that
    wrote the prediction and ran triage), or, without ``read_as``, it was modified after ``written_before`` (the
    time triage wrote its summary: a prediction replaced since, e.g. by a follow-up scan's of the same case id, is
    not the one triage read; that comparison orders two clocks, so a prediction written by a host whose clock is
    ahead reads as replaced).

    Args:
        path: the predicted segmentation (any volume :func:`~monai_unc.io.read_volume` reads).
        written_before: a POSIX time; a file modified after it gives None. None: not checked. Ignored with
            ``read_as``.
        read_as: the file's signature as triage read it (:func:`~monai_unc.evaluation.resume.file_signature`, kept
            in the triage folder's per-case state), or None.

    Returns:
        The digest, or None.

    Example:
        >>> import tempfile
        >>> import numpy as np
        >>> from monai_unc.io.files import save_nifti
        >>> with tempfile.TemporaryDirectory() as d:
        ...     seg = np.zeros((4, 4, 3), dtype=np.uint8)
        ...     seg[1:3, 1:3, 1] = 1
        ...     _ = save_nifti(seg, np.eye(4), f"{d}/a.nii.gz")
        ...     _ = save_nifti(seg.astype(np.int16), np.eye(4), f"{d}/b.nii")  # the same voxels, another file
        ...     seg[0, 0, 0] = 2
        ...     _ = save_nifti(seg, np.eye(4), f"{d}/c.nii.gz")  # another scan's prediction
        ...     a, b, c = (prediction_digest(f"{d}/{n}") for n in ("a.nii.gz", "b.nii", "c.nii.gz"))
        ...     a == b, a == c, a[:7], prediction_digest(f"{d}/missing.nii.gz")
        (True, False, 'sha256:', None)
    """
    p = Path(path)
    try:
        if read_as is not None:  # found by review 61: ordered against triage.json's time, a prediction written on a
            # host whose clock was ahead lost its digest, and one written over by a host whose clock was behind was
            # taken for the one triage read
            if not _same_file_version(p, read_as):
                return None
        elif written_before is not None and p.stat().st_mtime > written_before:
            return None
        data, _ = read_volume(p, dtype=None)
    except (OSError, ValueError, RuntimeError):  # not there, unreadable (CaseError is a ValueError): unknown
        return None
    values = np.asarray(data).reshape(-1)
    integral = np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.bool_)
    if not integral and np.issubdtype(values.dtype, np.floating):
        integral = bool(np.all(np.isfinite(values)) and np.all(values == np.round(values)))
    h = hashlib.sha256(repr(tuple(np.shape(data))).encode())
    for start in range(0, values.size, _DIGEST_CHUNK):
        chunk = values[start:start + _DIGEST_CHUNK]
        h.update(np.ascontiguousarray(chunk, dtype="<i8" if integral else "<f8").tobytes())
    return f"sha256:{h.hexdigest()}"


def read_triage_run(
    folder: str | os.PathLike, *, site: str | None = None, sites: Mapping[str, tuple[str, str | None]] | None = None,
    triaged_at: str | None = None, trust: Trust | None = None,
) -> TriageRun:
    """Read a triage output folder (``triage.json``) into the records of the store.

    The rule is checked (:func:`~monai_unc.monitoring.store.check_rule`: the fields the store reads, its digest); a
    rule with a ``format_version``, as ``triage`` writes every rule, is read in full
    (:meth:`~monai_unc.evaluation.triage.ReferralRule.from_json`) and each recorded decision derived again from its
    score, image z-score and the rule (:func:`~monai_unc.evaluation.triage.rule.check_recorded_decisions`), so an
    edited decision is refused rather than recorded as the rule's.

    The site of a case is, in order: its row of ``sites``, the JSON sidecar or DICOM header of its image
    (:func:`sidecar_site`),
    ``site``, :data:`~monai_unc.monitoring.store.UNKNOWN_SITE`.

    Args:
        folder: the output folder of ``monai-unc triage``.
        site: the site of every case not otherwise known.
        sites: ``{case: (site, scanner)}`` (:func:`read_sites`); a case is matched with its row in NFC without
            surrounding whitespace (a file name from macOS is NFD, a typed id NFC; a spreadsheet keeps spaces).
        triaged_at: when the run triaged (ISO 8601); default the modification time of ``triage.json``.
        trust: require ``triage.json`` to be signed by one of these trusted keys (``monitor record
            --trusted-keys``; :func:`~monai_unc.evaluation.triage.rule.check_triage_summary`), checked before
            anything it names is read; None: an unsigned file, or one signed by a key not trusted here, is read (the
            latter with the warning below).

    Returns:
        The :class:`TriageRun`.

    Raises:
        FileNotFoundError: ``folder`` does not exist.
        NotADirectoryError: ``folder`` is a file.
        ValueError: no ``triage.json``, or a field of it that is missing or wrong (named; the rule's
            ``image_reference`` with every check of :meth:`~monai_unc.evaluation.triage.ImageReference.from_json`;
            a rule with a ``format_version``, as triage writes them, with every check of
            :meth:`~monai_unc.evaluation.triage.ReferralRule.from_json`), a recorded decision the rule could not have
            made (:func:`~monai_unc.evaluation.triage.rule.check_recorded_decisions`: an edited ``triage.json``),
            a rule that does not match its digest (:func:`~monai_unc.monitoring.store.check_rule`: edited after
            triage wrote it), a ``triaged_at`` out of range, an image sidecar that cannot be read
            (:func:`sidecar_site`); with ``trust``, a ``triage.json`` that is not signed by a trusted key.

    Warns:
        UserWarning: naming ``triage.json``, when who wrote it is not checked: it has no digest, or is signed by a key
            that is not trusted here (:func:`~monai_unc.evaluation.triage.rule.check_triage_summary`; the line is
            :attr:`TriageRun.triage_check`).

    Example:
        >>> import json, tempfile
        >>> from monai_unc.io.provenance import rule_digest
        >>> from monai_unc.monitoring.store import rule_body_digest
        >>> rule = {"score": "mean_entropy", "target_risk": 0.1, "risk": "failure", "failure_dice": 0.8}
        >>> rule["digest"] = rule_body_digest(rule)
        >>> cases = [{"case": "a", "score": 0.2, "decision": "accept", "code": "accepted", "reason": "accepted"},
        ...          {"case": "b", "score": 0.7, "decision": "review", "code": "above_threshold", "reason": "high"}]
        >>> with tempfile.TemporaryDirectory() as d:
        ...     doc = {"rule": rule, "cases": cases}
        ...     doc["digest"] = rule_digest(doc)  # as triage writes it (without: read with a warning)
        ...     _ = Path(d, "triage.json").write_text(json.dumps(doc))
        ...     _ = Path(d, "sites.csv").write_text("case,site\\nb,Centre B\\n")
        ...     run = read_triage_run(d, site="Centre A", sites=read_sites(Path(d, "sites.csv")))
        >>> [(c.case_id, c.site, c.decision, c.code) for c in run.cases]
        [('a', 'Centre A', 'accept', 'accepted'), ('b', 'Centre B', 'review', 'above_threshold')]
    """
    root = input_folder(folder, "folder", "triage output folder")  # missing, a file: said as such
    site = (site.strip() or None) if isinstance(site, str) else site  # as the sites table and the sidecars
    path = root / "triage.json"
    if not path.is_file():
        raise ValueError(f"{os.fspath(folder)!r} is not a triage output folder (no triage.json)")
    # parsed and digested (the run's identity in the store); UTF-8, no NaN / Infinity / 1e400, no huge number, no key
    # twice, at most 64 levels of nesting, at most MAX_DOCUMENT_BYTES
    raw, doc = read_untrusted_json(path, f"triage summary {path}")
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a triage summary")
    # a signature required: checked before anything the file names (sidecars, predictions) is read
    checked = None if trust is None else check_triage_summary(doc, str(path), trust, warn=True)
    rule = doc.get("rule")
    if isinstance(rule, dict) and rule.get("image_reference") is not None:  # what the image alarm ranks against
        try:
            ImageReference.from_json(rule["image_reference"], "rule.image_reference")
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    check_rule(rule, str(path))  # the fields the store reads, then the rule against its digest
    cases = doc.get("cases")
    if not isinstance(cases, list):
        raise ValueError(f"{path}: field 'cases' must be a list")
    files = doc.get("files") if isinstance(doc.get("files"), dict) else {}
    written = path.stat().st_mtime  # a prediction modified since is not the one triage read (prediction_digest)
    fp = doc.get("fingerprint") if isinstance(doc.get("fingerprint"), dict) else {}
    # the model of the predictions as they recorded it; not the rule's (its calibration model): predictions without
    # weight digests (older ones, a mismatch allowed) were made by a model nobody identified (found by hostile testing)
    model = model_digest(fp.get("predictions"))
    if triaged_at is None:
        try:
            triaged_at = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")
        except (OverflowError, OSError, ValueError):  # a modification time out of datetime's range
            raise ValueError(f"{path}: its modification time is out of range: give the time with --time") from None
    else:
        try:
            t = _iso_datetime(triaged_at)
            # a time within a day of year 1 or 9999 leaves datetime's range in UTC
            triaged_at = (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).isoformat()
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"time (--time) must be ISO 8601 (2026-01-31T12:00:00+00:00) between the years 1 and "
                             f"9999 in UTC, got {triaged_at!r}"[:300]) from None
    # a sites table's rows by the key a case is matched with (case_id_key): a trailing space a spreadsheet kept,
    # or the NFD form macOS gives file names against the NFC form typed elsewhere, was silently no match (the case
    # went to the --site default or "unknown", found by hostile testing)
    site_rows: dict[str, tuple[str, str | None]] = {}
    first: dict[str, str] = {}
    for k, v in (sites or {}).items():
        key = case_id_key(str(k))
        if key in first:
            raise ValueError(f"sites: cases {first[key]!r} and {k!r} are the same case id up to spaces or Unicode "
                             "normalization: keep one")
        first[key], site_rows[key] = str(k), v
    records, seen = [], set()
    for i, c in enumerate(cases):
        where = f"{path}: cases[{i}]"
        if not isinstance(c, dict):
            raise ValueError(f"{where} must be an object")
        cid = _text(c.get("case"), f"{where}.case")
        if cid in seen:
            raise ValueError(f"{where}: case {cid!r} appears twice")
        seen.add(cid)
        decision = c.get("decision")
        if decision not in _DECISIONS:
            raise ValueError(f"{where}.decision must be one of {_DECISIONS}, got {decision!r}")
        code = _text(c.get("code"), f"{where}.code")
        if not Decision.code_agrees(decision, code):  # found by hostile review: a misspelt code, or an "accept" with
            # a reason for review (an edited triage.json), was recorded as the rule's decision
            raise ValueError(f"{where}.code must be {'accepted' if decision == 'accept' else 'a reason for review'} "
                             f"(the case's decision is {decision!r}; codes: {', '.join(Decision.CODES)}), got "
                             f"{code!r}"[:400])
        s, scanner = site_rows.get(case_id_key(cid), (None, None))
        if s is None:
            entry = files.get(cid)
            # an explicit --site is the user's word for the cases whose image (and sidecar) is gone
            s, scanner = sidecar_site(entry.get("image") if isinstance(entry, dict) else None,
                                      missing_ok=site is not None)
        entry = files.get(cid)
        seg = entry.get("seg") if isinstance(entry, dict) else None
        prediction = seg if isinstance(seg, str) and seg and len(seg) <= 1000 and "\x00" not in seg else None
        records.append(CaseRecord(
            case_id=cid, site=s or site or UNKNOWN_SITE, scanner=scanner, triaged_at=triaged_at,
            score=_number(c.get("score"), f"{where}.score"),
            image_z_max=_number(c.get("image_z_max"), f"{where}.image_z_max"),
            expected_dice=_number(c.get("expected_dice"), f"{where}.expected_dice"),
            decision=decision, code=code,
            reason=_text(c.get("reason"), f"{where}.reason"), rule_digest=rule["digest"], model_digest=model,
            prediction=prediction,
            prediction_sha256=None if prediction is None else prediction_digest(
                prediction, written, read_as=_triage_read_signature(root, cid, prediction)),
        ))
    if "format_version" in rule:
        # a rule triage wrote: read in full (its certificate recomputed) and each recorded decision derived again from
        # its score, the rule and its image z-score (found by hostile review: a decision edited in triage.json, a
        # "review" made "accept", was recorded as the rule's, and the accepted risk of its stream read it as accepted)
        check_recorded_decisions(cases, ReferralRule.from_json(rule, f"{path}: field 'rule'"), str(path))
    # its digest and signature: any other edit; warned about when who wrote it is not checked (no digest, an untrusted
    # key: review 61, the line was discarded). The store has no field for it: the run carries it
    if checked is None:
        checked = check_triage_summary(doc, str(path), warn=True)
    # cases the triage named as not triaged (no prediction: infer failed on them) are in no decision to record; said
    # here too, so that the store's stream is not read as the whole cohort (found by the end-to-end run of review 62)
    left = doc.get("not_triaged")
    left = [c for c in left if isinstance(c, str)] if isinstance(left, list) else []
    if left:
        shown = listed([c[:100] for c in left], 10)
        warnings.warn(f"{path}: {len(left)} case(s) were NOT triaged (no prediction) and are not recorded: {shown}",
                      UserWarning, stacklevel=2)
    # every file triage read for a case (seg, label, probs, the --uncertainty maps, image channels), found by review:
    # seg and image only let record write its store into the folder of the maps, which triage --monitor refuses
    named = {v for e in files.values() if isinstance(e, dict) for k, x in e.items() if k != "case"
             for v in _strings(x) if v and "\x00" not in v}
    return TriageRun(root.resolve(), rule, tuple(records), hashlib.sha256(raw).hexdigest(), triaged_at, model,
                     checked, tuple(left), tuple(sorted(named)))


def _strings(x: Any, depth: int = 0) -> list[str]:
    """The strings in ``x`` (a string, or lists and dicts of them, 3 levels deep at most): the paths of an entry."""
    if isinstance(x, str):
        return [x]
    if depth < 3 and isinstance(x, (list, tuple)):
        return [s for v in x for s in _strings(v, depth + 1)]
    if depth < 3 and isinstance(x, dict):
        return [s for v in x.values() for s in _strings(v, depth + 1)]
    return []


def loss_of(dice: float | None, failure: int | None, risk: str, failure_dice: float | None) -> float:
    """The loss of an audited case under a rule's risk: its Dice's risk as the rule was certified on
    (:func:`~monai_unc.evaluation.cohort.risk_of_dice`), or the failure given.

    Args:
        dice: its Dice, or None.
        failure: 1 when it failed, 0 when not, or None (then from ``dice < failure_dice``,
            :func:`~monai_unc.evaluation.cohort.dice_failed`).
        risk: the rule's risk: ``"failure"`` (0/1) or ``"1-dice"``.
        failure_dice: the Dice below which a case fails (a ``"failure"`` rule).

    Returns:
        The loss in ``[0, 1]``.

    Raises:
        ValueError: neither given, a Dice outside [0, 1] (NaN too) or a failure other than 0 and 1 (a bool too),
            ``"1-dice"`` without a Dice, another risk, or a ``"failure"`` rule given a Dice
            and a failure that disagree under its ``failure_dice`` (a Dice of 0.7 with ``failure`` 0 at
            ``failure_dice`` 0.8: the rule was certified on ``dice < failure_dice``, compared in float32 by
            :func:`~monai_unc.evaluation.cohort.dice_failed`, so a label must not redefine it).

    Example:
        >>> loss_of(0.7, None, "failure", 0.8), loss_of(0.7, None, "1-dice", None), loss_of(None, 1, "failure", 0.8)
        (1.0, 0.30000000000000004, 1.0)
    """
    if risk not in ("failure", "1-dice"):
        raise ValueError(f"the rule's risk must be 'failure' or '1-dice', got {risk!r}")
    # found by hostile review 59: a NaN Dice under a failure rule was the loss 0 (dice_failed reads NaN as no
    # failure: an audit of unknown outcome counted as a success, which the risk alarm then bet on), a failure of 2 the
    # loss 2.0, a Dice of -0.5 the loss 1
    if dice is not None and (not isinstance(dice, numbers.Real) or isinstance(dice, bool) or not 0 <= dice <= 1):
        raise ValueError(f"the label's Dice must be a number in [0, 1] or None, got {dice!r:.80}")
    if failure is not None and (not isinstance(failure, numbers.Integral) or isinstance(failure, bool)
                                or failure not in (0, 1)):
        raise ValueError(f"the label's failure must be 0, 1 or None, got {failure!r:.80}")
    if risk == "1-dice":
        if dice is None:
            raise ValueError("a rule with risk '1-dice' needs each label's Dice")
    elif failure is not None:
        # the package's one failure rule (dice_failed: compared in float32, as a case's Dice is recorded), not a
        # float64 comparison that called a Dice of 0.6999999999999999 at failure_dice 0.7 a failure the rule is not
        if dice is not None and failure_dice is not None and math.isfinite(failure_dice) \
                and bool(dice_failed(np.array([dice]), failure_dice)[0]) != bool(failure):
            # found by review: the failure column silently won over a Dice that said the opposite
            raise ValueError(f"the label's Dice {dice!r} and its failure {failure!r} disagree under the rule's "
                             f"failure Dice {failure_dice!r} (a failure is Dice < {failure_dice!r}, compared in "
                             "float32 as evaluate records a Dice); give one of them")
        return float(failure)
    elif dice is None or failure_dice is None:
        raise ValueError("each label needs its Dice or its failure (0/1)")
    elif not (isinstance(failure_dice, numbers.Real) and not isinstance(failure_dice, bool)
              and 0 <= failure_dice <= 1):  # a NaN failure Dice called every Dice a success
        raise ValueError(f"the rule's failure Dice must be a number in [0, 1], got {failure_dice!r:.80}")
    return float(risk_of_dice(np.array([dice]), risk, math.nan if failure_dice is None else failure_dice)[0])


def read_label_table(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Audited labels from a CSV: a ``case`` column and ``dice`` (in ``[0, 1]``) and/or ``failure`` (0 or 1).

    The column names may be in any letter case (``Case,Failure,Dice``); the table is read by
    :func:`~monai_unc.io.read_table` (a spreadsheet's byte-order mark skipped; a decimal comma in a comma-separated
    table, a column given twice refused).

    An optional ``site`` column names the site of each case, for case ids that more than one site uses (the store
    refuses a label of such a case without its site). An optional ``run`` column names the store's run (the id
    ``monai-unc monitor record`` printed) whose record of the case the label is, for case ids recorded in more than
    one run (a reused id, another scan; or the same scan triaged again with another model): the store refuses a
    label of such a case without its run rather than give it to the latest record, perhaps another scan.

    Args:
        path: the CSV file.

    Returns:
        ``{"case", "dice", "failure"}`` per row (None for an empty cell), with ``"site"`` (None when empty) when the
        table has a ``site`` column and ``"run"`` (a positive int, None when empty) when it has a ``run`` column.

    Raises:
        ValueError: a missing column, a value out of range, a case (at a site) listed twice.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = Path(d, "audit.csv").write_text("case,dice,failure\\na,0.91,\\nb,,1\\n")
        ...     read_label_table(Path(d, "audit.csv"))
        [{'case': 'a', 'dice': 0.91, 'failure': None}, {'case': 'b', 'dice': None, 'failure': 1}]
    """
    name = os.fspath(path)
    rows, lines = _read_named_table(path, ("case", "dice", "failure", "site", "run"))
    if not rows or "case" not in rows[0] or not ({"dice", "failure"} & set(rows[0])):
        raise ValueError(f"labels table {name!r} needs a 'case' column and a 'dice' or 'failure' column")
    with_site, with_run = "site" in rows[0], "run" in rows[0]
    out, seen = [], set()
    for i, r in zip(lines, rows):  # the file's lines (a blank line skipped by read_table counts)
        cid = _text(r.get("case"), f"{name}: line {i}: 'case'")
        site = ((r.get("site") or "").strip() or None) if with_site else None
        run = None
        if with_run and (r.get("run") or "").strip():
            text = r["run"].strip()
            if not (text.isascii() and text.isdigit() and int(text) > 0):
                raise ValueError(f"{name}: line {i}: 'run' must be a run id (a positive integer), got {r['run']!r}")
            run = int(text)
        if (cid, site, run) in seen:
            raise ValueError(f"{name}: case {cid!r}{'' if site is None else f' at site {site!r}'}"
                             f"{'' if run is None else f' in run {run}'} is listed twice")
        seen.add((cid, site, run))
        dice = fail = None
        if (r.get("dice") or "").strip():
            try:
                dice = parse_float(r["dice"])  # float() read "0.9_5" as 0.95
            except ValueError:
                raise ValueError(f"{name}: line {i}: 'dice' must be a number, got {r['dice']!r}") from None
            if not 0 <= dice <= 1:
                raise ValueError(f"{name}: line {i}: 'dice' must be in [0, 1], got {dice!r}")
        if (r.get("failure") or "").strip():
            if r["failure"].strip() not in ("0", "1"):
                raise ValueError(f"{name}: line {i}: 'failure' must be 0 or 1, got {r['failure']!r}")
            fail = int(r["failure"])
        if dice is None and fail is None:
            raise ValueError(f"{name}: line {i}: case {cid!r} has neither 'dice' nor 'failure'")
        out.append({"case": cid, "dice": dice, "failure": fail, **({"site": site} if with_site else {}),
                    **({"run": run} if with_run else {})})
    return out


def label_map_dice(
    label: str | os.PathLike, prediction: str | os.PathLike, num_classes: int,
    regions: Mapping[str, Sequence[int]] | None = None,
) -> float:
    """The Dice of an audited label map against the case's predicted segmentation, as ``evaluate`` computes it.

    The two files are read as ``evaluate`` reads a case (:func:`~monai_unc.evaluation.case.load_evaluation_case`:
    the same checks of values and geometry) and split into its tasks (:func:`~monai_unc.evaluation.rows.case_tasks`);
    the Dice is that of the row (:func:`~monai_unc.evaluation.rows.case_dice`). For a class-based rule: the mean over
    the foreground classes ``1 .. C-1`` of :func:`~monai_unc.evaluation.rows.class_dice` (a class absent from both
    maps scores 1). For a region-based rule (``regions``): the label map's regions are those of the spec
    (:func:`~monai_unc.regions.label_to_regions`), the prediction is ``R`` region masks or a label map converted with
    the same spec, and the Dice is the mean over the regions of each region's Dice (1 when empty in both): the
    ``dice`` of ``metrics.csv`` that the rule's risk was certified on.

    Args:
        label: the label map file (a label map ``(*spatial)``; for regions any non-negative labels, or ``R`` 0/1
            region masks as ``evaluate`` reads them).
        prediction: the predicted segmentation file that triage read.
        num_classes: the rule's number of classes ``C`` (background included), or of regions ``R``.
        regions: the rule's region spec ``{region: [labels]}``, or None for a class-based rule.

    Returns:
        The Dice in ``[0, 1]``.

    Raises:
        ValueError: unreadable files, a label map with values outside ``[0, C)`` (classes) or in no region of the
            spec (regions: ``evaluate`` refuses those too), or geometries (shape, affine) that differ.
        FileNotFoundError: a missing file.
    """
    lab, pred = Path(label), Path(prediction)
    split = split_extension(lab.name, LABEL_EXTENSIONS)
    case_id = split[0] if split is not None else lab.name
    config = (EvaluationConfig(num_classes=num_classes) if regions is None else
              EvaluationConfig(regions={k: list(v) for k, v in regions.items()}))
    case = load_evaluation_case(CaseFiles(case_id, lab, seg=pred), config)
    unclaimed = unclaimed_case_labels(case, config)
    if unclaimed:
        raise ValueError(f"label map {os.fspath(label)!r}: label value(s) {unclaimed[:6]} are in no region of the "
                         f"rule's spec {dict(config.regions or {})}; the rule's Dice would count them as background")
    return case_dice(case_tasks(case, config)[1])[0]
