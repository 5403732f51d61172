"""Per-case resume state of the cohort engine (:class:`CaseCache`).

``<case>.json`` per finished case, keyed by a fingerprint of everything the case's result depends on, written last
and atomically after any side file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._utils import check_callable
from ..io import atomic_write_text, clean_partial_files
from ..io.files import json_default

__all__ = ["CaseCache"]

#: errors that make a saved state unusable (it is recomputed): any error while reading it back (a damaged deflate
#: stream raises zlib.error, a damaged .npy header tokenize.TokenError, a product's reader whatever it raises); the
#: saved state is input the cache never trusts, and computing the case again is always correct
_UNREADABLE = (Exception,)


def _dump_result(folder: Path, case_id: str, result: Any) -> dict[str, Any]:
    return {"result": result}


def _restore_result(folder: Path, doc: dict[str, Any], item: Any) -> Any:
    return doc["result"]


def _canonical(fingerprint: Any) -> str:
    """A fingerprint as canonical JSON text, keys sorted.

    ``true``, ``1`` and ``1.0`` are told apart (``==`` takes them for one setting); a float's text is its shortest
    round-trip form, so an unchanged one still matches.
    """
    return json.dumps(fingerprint, sort_keys=True)


def _state_digest(doc: dict[str, Any]) -> str:
    """The SHA-256 of a saved state's canonical JSON text without its ``digest`` field (NaN kept as written)."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    return "sha256:" + hashlib.sha256(_canonical(body).encode("utf-8")).hexdigest()


class CaseCache:
    """Per-case resume state in a folder: ``<case>.json`` marks a case finished.

    A saved state is reused while the case's fingerprint (everything its result depends on: input files, options,
    package version) is unchanged; a stale fingerprint, a missing side file, an unreadable file or one whose text
    no longer matches the digest saved in it (``digest``: an edited, truncated or copied-over state, e.g. a case's
    score changed by hand) means the case is computed again. ``<case>.json`` is written last and atomically, after
    any side file (``dump`` writes those, e.g. histograms as ``.npz``), and an earlier ``<case>.json`` is removed
    before them, so an interrupted case is never taken for a finished one (nor its new side files for those of the
    earlier state); partial files of an interrupted write are removed by :meth:`prepare`.

    Args:
        folder: the folder of the states.
        fingerprint: ``fingerprint(item)``: JSON data describing what a case's result depends on, compared after a
            JSON round trip as canonical JSON text (so ``true``, ``1`` and ``1.0`` are different settings). None:
            no fingerprint (the JSON is reused whenever ``restore`` accepts it).
        dump: ``dump(folder, case_id, result) -> dict``: the JSON fields of a result (written with ``case`` and
            ``fingerprint``); it may first write side files, atomically. Default ``{"result": result}``.
        restore: ``restore(folder, doc, item) -> result``: the result from the JSON document (and side files); it
            raises ``OSError``, ``ValueError``, ``KeyError``, ``TypeError`` or ``EOFError`` when they are unusable.
            Default ``doc["result"]``. A result is never None.
        store: False when the per-case function writes ``<case>.json`` itself (``infer``'s case record): then
            :meth:`save` writes nothing.
        reuse: False to recompute every case (``--overwrite``, no resume): :meth:`load` finds nothing.
        on_stale: ``on_stale(case_id, saved, current)`` when a saved state is found whose fingerprint differs from
            the current one (the case is computed again), e.g. to say so in a log line; ``saved`` is None for a
            state that records none.
        saved_as: ``saved_as(saved) -> fingerprint``: a saved fingerprint as it compares with the current one (a
            setting an earlier version recorded that had no effect); default: as it was saved.

    Raises:
        TypeError: ``fingerprint``, ``dump``, ``restore``, ``on_stale`` or ``saved_as`` is neither callable nor None.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     cache = CaseCache(folder, fingerprint=lambda item: {"size": len(item)})
        ...     _ = cache.save("a", {"n": 3}, {"size": 3})
        ...     cache.load("a", {"size": 3}), cache.load("a", {"size": 4})
        ({'n': 3}, None)
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        fingerprint: Callable[[Any], Any] | None = None,
        *,
        dump: Callable[[Path, str, Any], dict[str, Any]] | None = None,
        restore: Callable[[Path, dict[str, Any], Any], Any] | None = None,
        store: bool = True,
        reuse: bool = True,
        on_stale: Callable[[str, Any, Any], None] | None = None,
        saved_as: Callable[[Any], Any] | None = None,
    ) -> None:
        # found by hostile testing: a hook given as data (dump=5) was accepted, and every case then failed after its
        # work with "'int' object is not callable"
        for name, hook in (("fingerprint", fingerprint), ("dump", dump), ("restore", restore), ("on_stale", on_stale),
                           ("saved_as", saved_as)):
            check_callable(hook, name)
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        self.dump = dump or _dump_result
        self.restore = restore or _restore_result
        self.store = bool(store)
        self.reuse = bool(reuse)
        self.on_stale = on_stale
        self.saved_as = saved_as

    def path(self, case_id: str) -> Path:
        """The JSON file of a case.

        Args:
            case_id: the case id.

        Returns:
            ``<folder>/<case_id>.json``.

        Raises:
            TypeError: ``case_id`` is not a string.
            ValueError: ``case_id`` is empty, ``.`` or ``..``, or holds a path separator of the platform (``/``, also
                the backslash on Windows) or a NUL character (its file would lie outside the folder, or nowhere).
        """
        if not isinstance(case_id, str):
            raise TypeError(f"case_id must be a string, got {type(case_id).__name__}")
        # the platform's separators only: a case id comes from a file name, and a backslash is a plain character of
        # a POSIX file name (a case named so must keep working)
        if case_id in ("", ".", "..") or any(c and c in case_id for c in (os.sep, os.altsep, "\0")):
            raise ValueError(f"case_id must be a file name without folders, got {case_id!r}")
        return self.folder / f"{case_id}.json"

    def prepare(self) -> None:
        """Create the folder and remove the partial files of an interrupted write (rank 0, before the loop).

        Raises:
            PermissionError: the folder exists and this user may not write into it (with ``store``: the states of
                an earlier run by another user, e.g. in a shared output folder), naming the folder.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        # found by review 63 (the commands run as a non-root user): another user's state folder made every case
        # compute, then "fail" at saving its state (failures.json listing the whole cohort, "fix these cases")
        if self.store and not os.access(self.folder, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "Permission denied: this user may not write the resume state "
                                  "(an earlier run's, another user's?); give this user write access or choose "
                                  "another output folder", str(self.folder))
        clean_partial_files(self.folder)

    def fingerprint_of(self, item: Any) -> Any:
        """The item's fingerprint as it reads back from the JSON file.

        Args:
            item: the case (passed to the ``fingerprint`` function).

        Returns:
            The fingerprint after a JSON round trip (tuples become lists), or None without a fingerprint function.
        """
        return None if self.fingerprint is None else json.loads(json.dumps(self.fingerprint(item)))

    def load(self, case_id: str, fingerprint: Any = None, item: Any = None) -> Any:
        """The saved result of a case, if it can be reused.

        Args:
            case_id: the case id.
            fingerprint: the case's current fingerprint (:meth:`fingerprint_of`).
            item: the case, passed to ``restore``.

        Returns:
            The saved result, or None when absent, unreadable, stale (its fingerprint differs) or ``reuse`` is False.
        """
        path = self.path(case_id)
        if not self.reuse or not path.is_file():
            return None
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict):
                return None
            saved = doc.get("fingerprint")
            saved = saved if self.saved_as is None else self.saved_as(saved)
            if self.fingerprint is not None and (_canonical(saved) != _canonical(fingerprint)
                                                 or doc.get("case") != case_id):
                if self.on_stale is not None and doc.get("case") == case_id:
                    self.on_stale(case_id, doc.get("fingerprint"), fingerprint)
                return None
            # found by hostile testing: a saved row edited by hand (a case's score lowered) was reused as computed,
            # and ``triage`` accepted the case on it; a state this cache wrote carries the digest of its text
            if self.store and (doc.get("case") != case_id or doc.get("digest") != _state_digest(doc)):
                return None
            return self.restore(self.folder, {k: v for k, v in doc.items() if k != "digest"}, item)
        except _UNREADABLE:
            return None

    def save(self, case_id: str, result: Any, fingerprint: Any = None) -> Path | None:
        """Write a case's result: the old ``<case>.json`` removed, side files, then the new one, atomically.

        Args:
            case_id: the case id.
            result: the result (passed to ``dump``).
            fingerprint: the case's fingerprint (:meth:`fingerprint_of`), stored with it.

        Returns:
            The JSON path, or None when ``store`` is False (nothing written).

        Raises:
            TypeError: ``result`` is None (with ``store``).
        """
        if not self.store:
            return None
        if result is None:  # found by hostile testing: saved, it read back as "no saved state", so the case was
            # computed again on every rerun without a word
            raise TypeError(f"case {case_id!r}: the result to save is None (a saved None reads back as no saved "
                            "state: the case would be computed again on every run)")
        self.folder.mkdir(parents=True, exist_ok=True)
        # the saved state goes first: ``dump`` may replace its side files, and an interruption before the new
        # ``<case>.json`` is written must not leave the old one (and its fingerprint) beside the new side files
        self.path(case_id).unlink(missing_ok=True)
        doc = {"case": case_id, "fingerprint": fingerprint, **self.dump(self.folder, case_id, result)}
        # internal resume state, read back only by load: Python's NaN literal (json_default, not strict JSON) keeps
        # undefined metrics NaN bit for bit, so a resumed cohort equals a fresh one; the digest is that of the text
        # as it reads back (a JSON round trip), so load recomputes it from the file alone
        doc = json.loads(json.dumps(doc, default=json_default))
        doc["digest"] = _state_digest(doc)
        return atomic_write_text(self.path(case_id), json.dumps(doc) + "\n")
