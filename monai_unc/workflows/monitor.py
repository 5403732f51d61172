"""``monai-unc monitor``: record triage runs and audited labels, the status of every site, the dashboard, the audit.

Each sub-command is one function on a store URL (a file path or ``postgresql://...``) returning the lines it prints
and its exit status: :func:`record_triage`, :func:`record_labels`, :func:`store_status`, :func:`write_dashboard`,
:func:`verify_store`; :func:`monitor_from_arguments` runs the parsed command line. See docs/monitoring.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._utils import refusing
from ..io import (
    atomic_write_json,
    check_not_being_written,
    check_utf8_name,
    check_writable_folder,
    input_folder,
    json_safe,
    split_extension,
)
from ..io.signing import Trust
from ..monitoring import (
    GroupStatus,
    MonitorStore,
    any_alarm,
    loss_of,
    monitor_status,
    read_label_table,
    read_sites,
    read_triage_run,
    status_table,
)
from ..monitoring.records import LABEL_EXTENSIONS, case_id_key, label_map_dice, prediction_digest
from ..monitoring.status import printable
from ..monitoring.store import sqlite_file
from ..regions import check_regions
from ..report.monitor import build_monitor_page
from .apply import triage_trust_from_arguments
from .session import WARNING_PREFIX, CommandResult, quiet_lines

__all__ = ["MONITOR_DB_ENV", "check_store", "check_store_outside_inputs", "record_triage", "record_labels",
           "store_status", "verify_store", "write_dashboard", "monitor_from_arguments"]

#: the environment variable that names the store when ``--db`` is not given
MONITOR_DB_ENV = "MONAI_UNC_MONITOR_DB"


def _db(db: str | os.PathLike | None) -> str:
    url = db if db is not None else os.environ.get(MONITOR_DB_ENV)
    if not url:
        raise ValueError(f"--db is required (or set {MONITOR_DB_ENV}): a file path for SQLite or postgresql://...")
    return os.fspath(url)


def check_store(db: str | os.PathLike | None, output: str | os.PathLike | None = None) -> None:
    """Check, before any work, that :func:`record_triage` will be able to open the store.

    ``monai-unc triage --monitor DB`` records its run once the triage is written; a store that cannot be opened (a
    folder, a file that is no monitoring store, a schema newer than this version reads, a server that refuses the
    connection) was found only then, after the whole cohort. An existing store (or a PostgreSQL server) is opened as
    the recording will open it; a SQLite file that does not exist yet is not created here, its folder must be
    writable, or be ``output``, the folder the command creates before it records (found by hostile review:
    ``triage -o run --monitor run/monitor.db`` was refused before any work, its folder not created yet).

    Args:
        db: the store (file path or ``postgresql://`` URL; None: ``$MONAI_UNC_MONITOR_DB``).
        output: the command's output folder, created before the recording (None: none).

    Raises:
        ValueError: the store cannot be opened (the reason named), or no store is given.
        ImportError: a PostgreSQL store without psycopg.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as d:
        ...     check_store(Path(d) / "monitor.db")  # a new store in a writable folder
        ...     check_store(d)
        Traceback (most recent call last):
            ...
        ValueError: database ... is a folder, not a database file
    """
    url = _db(db)
    path = sqlite_file(url)
    if path is not None and not path.exists() and not path.is_symlink():
        folder = path.parent if str(path.parent) else Path(".")
        if output is not None and not folder.exists() and folder.resolve() == Path(output).resolve():
            return  # the command's output folder, which it creates (and checks) before the store is opened
        if not folder.is_dir():  # sqlite creates the file, not its folder
            raise ValueError(f"database {str(path)!r}: its folder {str(folder)!r} does not exist")
        check_writable_folder(folder)
        return
    with MonitorStore(url):
        pass


def check_store_outside_inputs(db: str | os.PathLike | None, *inputs: str | os.PathLike | None) -> None:
    """Refuse a SQLite store that is one of a command's input files or lies inside one of its input folders.

    Inputs are never written to: in earlier versions ``triage -p PRED --monitor PRED/monitor.db`` created the
    store (and its journal) in the predictions folder, as a store in ``--images`` or ``--uncertainty`` did. A
    PostgreSQL store is not a path: nothing to check.

    Args:
        db: the store (file path or ``postgresql://`` URL; None: ``$MONAI_UNC_MONITOR_DB``).
        *inputs: the command's input files and folders (None is skipped).

    Raises:
        ValueError: naming the store and the input.

    Example:
        >>> check_store_outside_inputs("runs/monitor.db", "predictions")
        >>> check_store_outside_inputs("predictions/monitor.db", "predictions")
        Traceback (most recent call last):
            ...
        ValueError: database 'predictions/monitor.db' lies inside the input folder predictions; keep the store \
outside the command's inputs (inputs are never written to)
    """
    path = sqlite_file(_db(db))
    if path is None:
        return
    store = Path(os.path.abspath(path)).resolve()
    for inp in inputs:
        if inp is None:
            continue
        src = Path(os.path.abspath(os.fspath(inp))).resolve()
        if store == src and not src.is_dir():  # (an input folder itself: check_store refuses a folder)
            raise ValueError(f"database {str(path)!r} is the input file {os.fspath(inp)}; keep the store outside the "
                             "command's inputs (inputs are never written to)")
        if src in store.parents:
            raise ValueError(f"database {str(path)!r} lies inside the input folder {os.fspath(inp)}; keep the store "
                             "outside the command's inputs (inputs are never written to)")


def _refuse_output_onto_store(url: str, output: str | os.PathLike, option: str) -> None:
    """Refuse an output file that is the SQLite store itself (or its WAL, shared-memory or journal file).

    ``monitor report -o monitor.db`` would replace every record and the audit chain by the page.
    """
    db = sqlite_file(url)
    if db is None:
        return
    out = Path(output)
    for suffix in ("", "-wal", "-shm", "-journal"):
        store_file = db.with_name(db.name + suffix)
        same = out.resolve() == store_file.resolve()
        if not same and out.exists() and store_file.exists():
            same = os.path.samefile(out, store_file)
        if same:
            raise ValueError(f"{option} {os.fspath(output)!r} is the monitoring store itself ({store_file}): writing "
                             "there would replace every record and the audit log; choose another file")


#: the keys of ``monitor status --json``'s and ``monitor verify --json``'s documents (what tells an earlier output)
_JSON_OUTPUT_KEYS = {"status": frozenset({"alpha", "streams"}),
                     "verify": frozenset({"ok", "n_entries", "head", "expected_entry", "problems"})}
#: the title of the dashboard (``report.monitor.build_monitor_page``), within the first bytes of its page
_PAGE_TITLE = "<title>monai-unc monitoring</title>"
#: the most bytes of an existing ``--json`` file read to tell whether it is an earlier output
_OUTPUT_READ_LIMIT = 64 << 20


def _earlier_output(path: Path, command: str) -> bool:
    """Whether the existing file ``path`` is an earlier output of ``monai-unc monitor <command>`` (or empty).

    That is the only file the command replaces: the dashboard by its doctype and title, a ``--json`` document by its
    keys.
    """
    try:
        size = path.stat().st_size
        if size == 0:
            return True
        if command == "report":
            with path.open("rb") as f:
                head = f.read(4096).decode("utf-8", "replace")
            return head.startswith("<!doctype html>") and _PAGE_TITLE in head
        if size > _OUTPUT_READ_LIMIT:
            return False
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, not UTF-8, not JSON: not ours
        return False
    return isinstance(doc, dict) and set(doc) == _JSON_OUTPUT_KEYS[command]


def _check_monitor_output(url: str, output: str | os.PathLike, option: str, command: str) -> None:
    """Refuse, before the store is read, an output file of ``monitor report`` / ``status`` / ``verify``.

    Refused: the SQLite store itself, a folder, or an existing file that is not an earlier output of the same command.

    In earlier versions ``monitor report -o referral_rule.json`` or ``monitor status --json audit.csv`` replaced the
    rule or the audit table with the page or the figures and exited 0. As a cohort command refuses an output folder
    holding another command's outputs (:func:`~monai_unc.io.check_output_kind`), each of these replaces only its own
    earlier output (or an empty file).
    """
    _refuse_output_onto_store(url, output, option)
    out = Path(output)
    if out.is_dir():
        raise ValueError(f"{option} {os.fspath(output)!r} is a folder; give a file name")
    if out.exists() and not _earlier_output(out, command):
        what = "page" if command == "report" else "--json document"
        raise ValueError(f"{option} {os.fspath(output)!r} exists and is not an earlier {what} of monai-unc monitor "
                         f"{command}: it is not replaced (another command's output, an input?); choose another file "
                         "or remove it")


def record_triage(
    db: str | os.PathLike | None, triage: str | os.PathLike, *, site: str | None = None,
    sites: str | os.PathLike | None = None, time: str | None = None, command: Sequence[str] | None = None,
    trust: Trust | None = None,
) -> CommandResult[int]:
    """``monai-unc monitor record``: one triage output folder into the store (once: a second time is a no-op).

    Args:
        db: the store (file path or ``postgresql://`` URL; None: ``$MONAI_UNC_MONITOR_DB``).
        triage: the output folder of ``monai-unc triage``.
        site: the site of every case whose site is not otherwise known.
        sites: a CSV of ``case,site[,scanner]``.
        time: when the run triaged (ISO 8601; default ``triage.json``'s modification time).
        command: the command line for the audit log (default ``sys.argv``).
        trust: require ``triage.json`` to be signed by one of these trusted keys (``--trusted-keys``;
            :func:`~monai_unc.monitoring.records.read_triage_run`): a file that is not is refused before the store
            is opened; None: accepted unsigned, or signed by a key not trusted here with a warning.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of the run's id; its lines: what was recorded and
        skipped, and a ``warning:`` line when some cases were skipped as already recorded without a prediction
        digest to confirm that they are the same scan (:meth:`~monai_unc.monitoring.MonitorStore.record_run`).

    Raises:
        ValueError: the folder is still being written by another run (a ``triage`` of another process holds it:
            :func:`monai_unc.io.check_not_being_written`), or a SQLite store that is ``sites`` or lies in a folder of
            the predictions, uncertainty maps or images ``triage.json`` names (:func:`check_store_outside_inputs`:
            inputs are never written to, as ``triage --monitor`` refuses), before the store is opened; or what
            :func:`~monai_unc.monitoring.records.read_triage_run` and the store refuse.
    """
    url = _db(db)
    input_folder(triage, "triage")  # a missing folder or a file named as such (the command line: TRIAGE)
    check_store_outside_inputs(url, Path(triage) / "triage.json", sites)
    # a triage of another process still writing it (found by the hostile review of two runs at once, review 64: a
    # cron triage rewriting the folder while it was recorded by hand), as report and dicom-export refuse theirs
    check_not_being_written(triage, what=f"the triage folder {triage}", then=", then record it")
    with refusing("sites"):  # the command line names --sites (review 63)
        table = None if sites is None else read_sites(sites)
    run = read_triage_run(triage, site=site, sites=table, triaged_at=time, trust=trust)
    # the folders of the predictions, maps and images triage read, as triage --monitor refuses a store in its -p and
    # --images (found by hostile review: record created the store in the predictions folder); not the triage
    # folder, where triage -o OUT --monitor OUT/monitor.db keeps it
    check_store_outside_inputs(url, *sorted({os.path.dirname(os.path.abspath(f)) for f in run.inputs}))
    with MonitorStore(url) as store:
        run_id, new = store.record_run(run.rule, run.cases, source_digest=run.source_digest, folder=str(run.folder),
                                       triaged_at=run.triaged_at, model_digest=run.model_digest, command=command,
                                       not_triaged=run.not_triaged)
        this = next(r for r in store.runs() if r["id"] == run_id)
        written = int(this["n_cases"])
        # the sites of the cases written: those skipped as already recorded do not count (found by hostile testing)
        n_sites = len(store.run_sites(run_id)) if new else 0
        unconfirmed = _skipped_unconfirmed(store, this["audit_seq"]) if new else 0
    skipped = len(run.cases) - written
    lines = [f"recorded {written} case(s) from {n_sites} site(s) as run {run_id}"
             + (f"; {skipped} already recorded (skipped)" if skipped else "")
             if new else f"{run.folder} is already recorded (run {run_id}): nothing written"]
    if unconfirmed:
        lines.append(f"{WARNING_PREFIX}{unconfirmed} of the case(s) skipped as already recorded (the same rule, site, "
                     "case id and values) could not be confirmed as the same scan: no digest of their prediction (a "
                     "record of an earlier monai-unc, or a prediction moved or changed since triage); a new scan "
                     "that reuses one of their case ids with the same values is not recorded")
    return CommandResult(run_id, True, run.folder, tuple(lines))


def _skipped_unconfirmed(store: MonitorStore, audit_seq: int) -> int:
    """How many cases a run's ``record`` entry skipped unconfirmed (``n_skipped_unconfirmed``; 0 when it does not say).

    Those skipped as already recorded without a prediction digest to confirm that they are the same scan.
    """
    entry = next((e for e in store.audit_log() if e.seq == audit_seq), None)
    details = json.loads(entry.details) if entry is not None else {}
    n = details.get("n_skipped_unconfirmed", 0) if isinstance(details, dict) else 0
    return n if isinstance(n, int) and not isinstance(n, bool) else 0


def _stored_ids(cases: Sequence[dict[str, Any]]) -> Callable[[str], str]:
    """The store's spelling of a labelled case id, as a function of the id a label gives.

    The id itself when recorded, else the one recorded id that is the same up to Unicode normalization and
    surrounding spaces (as a sites table's rows are matched: :func:`~monai_unc.monitoring.records.read_triage_run`).
    Found by the monitorstats review: a case recorded from a macOS file name (NFD ``u`` and a combining diaeresis)
    and labelled from a spreadsheet (NFC ``ü``, or a trailing space) was refused as "not in the monitoring store",
    the message showing an id that looked like the recorded one. Two recorded ids of the same key are left as given
    (the label must name one exactly).
    """
    exact = {c["case_id"] for c in cases}
    by_key: dict[str, set[str]] = {}
    for cid in exact:
        by_key.setdefault(case_id_key(cid), set()).add(cid)

    def stored(cid: str) -> str:
        if cid in exact:
            return cid
        found = by_key.get(case_id_key(cid), set())
        return next(iter(found)) if len(found) == 1 else cid

    return stored


def _label_folder(folder: Path, cases: list[dict[str, Any]], rules: dict[str, Any],
                  stored: Callable[[str], str] = str) -> list[dict[str, Any]]:
    """Audited labels from a folder of label maps ``<case>.nii.gz``: each one's Dice against the case's prediction.

    The folder is listed as ``evaluate`` lists its labels (:func:`monai_unc.io.split_extension`): every volume
    extension in any letter case, hidden files (macOS' ``._a.nii.gz``) skipped, a name that is not UTF-8 refused
    naming it; an entry that is no file (a link to nothing) fails when read, naming it. A prediction whose voxels are
    no longer those triage read (the digest the store keeps: written over since, by a follow-up scan's) is refused.
    """
    out = []
    files, ids = [], []
    for p in sorted(folder.iterdir()):
        split = split_extension(p.name, LABEL_EXTENSIONS)
        if split is None:
            continue
        check_utf8_name(p)  # the case id goes into the store and the audit log
        files.append(p)
        ids.append(stored(split[0]))
    if not files:
        raise ValueError(f"no label maps (<case>.nii.gz, .nii, .mha, ...) in {str(folder)!r}")
    twice = sorted(c for c, n in Counter(ids).items() if n > 1)
    if twice:
        shown = ", ".join(p.name for p, c in zip(files, ids) if c == twice[0])
        raise ValueError(f"{str(folder)!r} holds two label maps of case(s) {twice[:5]} (e.g. {shown}): keep one")
    records: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        records.setdefault(c["case_id"], []).append(c)
    for p, cid in zip(files, ids):
        found = records.get(cid, [])
        if len(found) > 1:  # a reused id: the map may be the earlier scan's, and its Dice is against one prediction
            where = "; ".join(f"run {c['run']} at {c['site']}" for c in found[:5]) + (" ..." if len(found) > 5 else "")
            raise ValueError(f"case {cid!r} is recorded more than once ({where}): a label map does not say whose "
                             "record it is; give the audited Dice in a CSV with 'run' (and 'site') columns "
                             "(case,run,dice)")
        case = found[0] if found else None
        if case is None:
            out.append({"case": cid, "dice": None, "failure": None})  # add_labels names the cases not in the store
            continue
        rule = rules[case["rule_digest"]]
        regions = _rule_regions(rule, cid)
        if rule["num_classes"] is None and regions is None:
            raise ValueError(f"case {cid!r}: its rule does not record its classes: give the audited Dice in a CSV "
                             "(case,dice) instead of label maps")
        if not case.get("prediction"):
            raise ValueError(f"case {cid!r}: its triage run recorded no prediction file to compare the label map "
                             "with: give the audited Dice in a CSV (case,dice)")
        # found by hostile review 60: a prediction written over since triage (a follow-up scan's, same case id and
        # grid, not recorded yet) gave the Dice against the follow-up's prediction without a word
        recorded = case.get("prediction_sha256")
        if recorded is not None and prediction_digest(case["prediction"]) != recorded:
            raise ValueError(f"case {cid!r}: its prediction {case['prediction'][-200:]!r} is not the one its triage "
                             "run read (written over, changed or gone since): the label map cannot be compared with "
                             "it; put that prediction back, or give the audited Dice in a CSV (case,dice)")
        n = len(regions) if regions is not None else rule["num_classes"]
        out.append({"case": cid, "dice": label_map_dice(p, case["prediction"], n, regions), "failure": None})
    return out


def _rule_regions(rule: dict[str, Any], cid: str) -> dict[str, tuple[int, ...]] | None:
    """The region spec of a case's rule (checked: the store's copy of a rule came from an editable file), or None."""
    if rule["regions"] is None:
        return None
    if not rule.get("regions_in_order", True):
        raise ValueError(f"case {cid!r}: the store recorded its region-based rule before monai-unc kept the order "
                         "of a rule's regions (the channels of region masks): give the audited Dice in a CSV "
                         "(case,dice), or record the triage runs into a new store")
    try:
        return check_regions(rule["regions"], "the rule's regions")
    except (TypeError, ValueError) as e:
        raise ValueError(f"case {cid!r}: {e}") from None


def record_labels(
    db: str | os.PathLike | None, labels: str | os.PathLike, *, command: Sequence[str] | None = None,
) -> CommandResult[int]:
    """``monai-unc monitor label``: audited labels, from a CSV or a folder of label maps.

    The CSV has a ``case`` column and ``dice`` and/or ``failure`` (and a ``site`` column for case ids that more
    than one site uses: such a label without its site is refused); a label map ``<case>.nii.gz`` is compared with the
    prediction triage read, as ``evaluate`` computes the Dice (for a region-based rule the mean over the rule's
    regions: :func:`~monai_unc.monitoring.records.label_map_dice`).

    Each label's loss follows its case's rule: the failure (``dice < failure_dice``, or the ``failure`` column)
    for a ``failure`` rule, ``1 - dice`` for a ``1-dice`` rule.

    A label of a case that is not in the store because its triage run could not triage it (``triage.json``'s
    ``not_triaged``: no prediction, kept by ``monitor record``: :meth:`~monai_unc.monitoring.MonitorStore.not_triaged`)
    is skipped with a ``warning:`` line naming the case; the other labels are recorded. A label of any other case that
    is not in the store is refused with the batch, as before.

    Args:
        db: the store (None: ``$MONAI_UNC_MONITOR_DB``).
        labels: the CSV file or the folder of label maps.
        command: the command line for the audit log.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of the number of labels recorded; its lines say how
        many, and a ``warning:`` line names the labels skipped (cases not triaged).

    Raises:
        ValueError: a SQLite store that is the CSV or lies in the folder of label maps (inputs are never written to:
            :func:`check_store_outside_inputs`), before the store is opened; a label the store refuses (named).
    """
    url = _db(db)
    path = Path(labels)
    check_store_outside_inputs(url, path)  # a store in the folder of label maps is written to: refused, as record's
    # the store read at one moment (a run recorded in between would have cases of a rule not read), then closed while
    # the labels are read and the label maps compared (minutes: a server's idle_session_timeout closed the connection
    # and the batch failed after the work, found by hostile testing); add_labels refuses a label whose case was
    # recorded (again) since this read
    with MonitorStore(url, create=False) as store, store.snapshot():
        rules = store.rules()
        cases = store.cases()
        untriaged = store.not_triaged()
    stored = _stored_ids(cases)  # a label's case id as recorded (NFC / NFD, surrounding spaces)
    table = _label_folder(path, cases, rules, stored) if path.is_dir() else read_label_table(path)
    by_id: dict[str, list[dict[str, Any]]] = {}
    for c in cases:  # in recording order
        by_id.setdefault(c["case_id"], []).append(c)
    not_triaged: dict[str, list[int]] = {}
    for cid, runs in untriaged.items():  # by the key a label's id is matched with (NFC, no surrounding spaces)
        not_triaged.setdefault(case_id_key(cid), []).extend(runs)
    rows, skipped = [], []
    for lab in table:
        lab = {**lab, "case": stored(lab["case"])}
        runs = not_triaged.get(case_id_key(lab["case"]))
        if runs and lab["case"] not in by_id:  # no decision to label (found by review 63: the batch was refused)
            skipped.append(f"{lab['case'][:100]!r} (run {', '.join(map(str, sorted(set(runs))[:5]))})")
            continue
        # the case whose rule gives the loss; add_labels refuses a case id of several sites without its site, and
        # one of several runs (a reused id: perhaps another scan) without its run
        found = [c for c in by_id.get(lab["case"], []) if (lab.get("site") is None or c["site"] == lab["site"])
                 and (lab.get("run") is None or c["run"] == lab["run"])]
        if len({c["site"] for c in found}) > 1 or (lab.get("run") is None and len(found) > 1):
            rows.append({**lab, "loss": 0.0, "case_row": None})  # refused by add_labels, which names the cases
            continue
        case = found[-1] if found else None
        if case is None:  # add_labels names every case that is not in the store; case_row 0 (no row): a case
            # recorded since this read is refused there, not given this loss, which no rule computed (found by
            # hostile testing: an audited failure recorded meanwhile was stored as a success, loss 0)
            rows.append({**lab, "loss": 0.0, "case_row": 0})
            continue
        rule = rules[case["rule_digest"]]
        # case_row: add_labels refuses the label if the case was recorded again (another rule) since this read
        try:
            loss = loss_of(lab["dice"], lab["failure"], rule["risk"], rule["failure_dice"])
        except ValueError as e:
            raise ValueError(f"{path.name}: case {lab['case']!r}: {e}") from None
        rows.append({**lab, "case_row": case["row"], "loss": loss})
    n = 0
    if rows or not skipped:  # labels to record (an empty batch with nothing skipped: as before)
        with MonitorStore(url, create=False) as store:
            n = store.add_labels(rows, source=str(path.resolve()), command=command)
    lines = [f"recorded {n} audited label(s)"]
    if skipped:
        more = f" and {len(skipped) - 10} more" if len(skipped) > 10 else ""
        lines.append(f"{WARNING_PREFIX}{len(skipped)} label(s) skipped: their case(s) were not triaged (no "
                     f"prediction; triage.json's not_triaged), so they have no decision to label: "
                     f"{', '.join(skipped[:10])}{more}; predict and triage them, record that run, then label them "
                     "again")
    return CommandResult(n, True, path.resolve().parent, tuple(lines))


def store_status(
    db: str | os.PathLike | None, *, alpha: float = 0.05, output: str | os.PathLike | None = None,
) -> CommandResult[list[Any]]:
    """``monai-unc monitor status``: the table of every site's statistics; exit status 1 when an alarm is raised.

    Args:
        db: the store (None: ``$MONAI_UNC_MONITOR_DB``).
        alpha: the false-alarm probability of each alarm.
        output: also write the figures as JSON to this file.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of the streams
        (:class:`~monai_unc.monitoring.GroupStatus`), ``exit_status`` 1 when some alarm is raised.
    """
    url = _db(db)
    if output is not None:
        _check_monitor_output(url, output, "--json", "status")
    with MonitorStore(url, read_only=True) as store, store.snapshot():
        groups = monitor_status(store.cases(), store.rules(), alpha)
    lines = status_table(groups)
    if output is not None:
        doc = [{"rule": g.rule_digest, "site": g.site, "n_cases": g.n_cases, "acceptance_rate": g.acceptance_rate,
                **_alarm_fields(g), "score_against_calibration": g.score_reference_size != 0,
                "image_against_calibration": g.image_against_calibration,
                "n_retriaged": g.n_retriaged, "n_relabelled": g.n_relabelled, "alarms": g.alarms()} for g in groups]
        atomic_write_json(output, json_safe({"alpha": alpha, "streams": doc}))
    return CommandResult(groups, True, Path.cwd(), tuple(lines), exit_status=int(any_alarm(groups)))


def _alarm_fields(g: GroupStatus) -> dict[str, Any]:
    """The alarms of one stream for ``status --json``: where each was raised, as positions and case ids.

    ``score_alarm`` / ``image_alarm`` (and ``*_change``, the estimated change point) are 0-based positions in the
    stream's cases (those ``n_cases`` counts), not in the martingale's values, which skip the cases without a
    defined value (found by hostile testing: with 40 undefined scores the alarm at the stream's case 106 read 66);
    ``risk_alarm`` is the position among the audited accepted cases, in the order their labels arrived.
    """
    out: dict[str, Any] = {}
    for kind in ("score", "image"):
        found = g.alarm_positions(kind)
        at, change = (None, None) if found is None else found
        out[f"{kind}_alarm"], out[f"{kind}_change"] = at, change
        out[f"{kind}_alarm_case"] = None if at is None else g.cases[at]["case_id"]
        out[f"{kind}_change_case"] = None if change is None else g.cases[change]["case_id"]
    risk = None if g.risk is None else g.risk.alarm
    out["risk_alarm"] = risk
    out["risk_alarm_case"] = None if risk is None else g.labelled_accepted[risk]["case_id"]
    return out


def verify_store(
    db: str | os.PathLike | None, *, expect_head: str | None = None, output: str | os.PathLike | None = None,
) -> CommandResult[Any]:
    """``monai-unc monitor verify``: check the audit chain; exit status 1 when something was edited or deleted.

    The first line gives the head (the hash of the last entry): keep it elsewhere (a ticket, a signed e-mail) and
    pass it back with ``expect_head`` at a later check, which then also detects entries cut off at the end or a
    database replaced by another; entries appended since are fine (the line says how many).

    Args:
        db: the store (None: ``$MONAI_UNC_MONITOR_DB``).
        expect_head: the head hash printed by an earlier check (kept elsewhere).
        output: also write the result as JSON to this file (``ok``, ``n_entries``, ``head``, ``expected_entry``,
            ``problems``).

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of the
        :class:`~monai_unc.monitoring.VerifyResult`.

    Raises:
        ValueError: ``expect_head`` is not a head hash (64 hex digits), or the store cannot be read.

    Example:
        >>> import tempfile
        >>> from monai_unc.monitoring import MonitorStore
        >>> with tempfile.TemporaryDirectory() as d:
        ...     MonitorStore(f"{d}/monitor.db").close()
        ...     kept = verify_store(f"{d}/monitor.db").value.head  # kept elsewhere
        ...     print(verify_store(f"{d}/monitor.db", expect_head=kept).lines[1])
        the expected head is entry 1 of 1 (0 entries appended since)
    """
    url = _db(db)
    if output is not None:
        _check_monitor_output(url, output, "--json", "verify")
    with MonitorStore(url, read_only=True) as store:
        res = store.verify(expect_head)
    lines = [f"audit log: {res.n_entries} entries, head {printable(res.head)}"]
    if res.expected_entry is not None:
        lines.append(f"the expected head is entry {res.expected_entry} of {res.n_entries} "
                     f"({res.n_entries - res.expected_entry} entries appended since)")
    lines += [f"PROBLEM: {printable(p)}" for p in res.problems] or ["the chain and the rows it covers are intact"]
    if output is not None:
        atomic_write_json(output, {"ok": res.ok, "n_entries": res.n_entries, "head": res.head,
                                   "expected_entry": res.expected_entry, "problems": list(res.problems)})
    return CommandResult(res, True, Path.cwd(), tuple(lines), exit_status=0 if res.ok else 1)


def write_dashboard(
    db: str | os.PathLike | None, output: str | os.PathLike, *, alpha: float = 0.05,
) -> CommandResult[Path]:
    """``monai-unc monitor report``: the dashboard, one static HTML page (works offline, from disk).

    Args:
        db: the store (None: ``$MONAI_UNC_MONITOR_DB``).
        output: the page to write (``.html``).
        alpha: the false-alarm probability of each alarm.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of the page's path.
    """
    url = _db(db)
    _check_monitor_output(url, output, "--output", "report")
    with MonitorStore(url, read_only=True) as store, store.snapshot():  # every read at one moment
        rules = store.rules()
        groups = monitor_status(store.cases(), rules, alpha)
        audit = store.audit_log()
        verified = store.verify()
    page = build_monitor_page(groups, audit, verified, output,
                              calibration={d: r["calibration_scores"] for d, r in rules.items()})
    return CommandResult(page, True, page.parent, (f"wrote {page}",), exit_status=0)


def monitor_from_arguments(args: argparse.Namespace) -> CommandResult[Any]:
    """``monai-unc monitor <sub-command>`` on its parsed arguments.

    Args:
        args: the parsed arguments (:func:`monai_unc.workflows.arguments.add_command_parsers`).

    Returns:
        The sub-command's :class:`~monai_unc.workflows.session.CommandResult` (with ``--quiet`` its warning lines
        alone, :func:`~monai_unc.workflows.session.quiet_lines`).
    """
    command = ["monai-unc", *sys.argv[1:]]
    sub = args.monitor_command
    if sub == "record":
        res: CommandResult[Any] = record_triage(args.db, args.triage, site=args.site, sites=args.sites,
                                                time=args.time, command=command,
                                                trust=triage_trust_from_arguments(args))
    elif sub == "label":
        res = record_labels(args.db, args.labels, command=command)
    elif sub == "status":
        res = store_status(args.db, alpha=args.alpha, output=args.json)
    elif sub == "verify":
        res = verify_store(args.db, expect_head=args.expect_head, output=args.json)
    else:
        res = write_dashboard(args.db, args.output, alpha=args.alpha)
    return dataclasses.replace(res, lines=quiet_lines(res.lines)) if getattr(args, "quiet", False) else res
