"""Results as records: the one serialisation of a per-case result for the resume cache and the ``torchrun`` gather.

A result that implements :class:`CaseRecord` (``to_record() -> (JSON data, numpy arrays)`` and the classmethod
``from_record(doc, arrays)``) needs no serialisation code of its own: :func:`record_cache_hooks` gives the
``dump`` / ``restore`` hooks of a :class:`~monai_unc.engine.CaseCache` (the JSON inside ``<case>.json``, the
arrays in ``<case>.npz`` written first), and :func:`record_gather_hooks` the ``pack`` / ``unpack`` of
:func:`~monai_unc.engine.run_cases` (plain data for the gather to rank 0). The arrays are those of
:func:`monai_unc.state.pack_states`, so any mergeable state travels this way.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..io import atomic_save_npz, file_sha256

__all__ = ["CaseRecord", "record_cache_hooks", "record_gather_hooks"]


@runtime_checkable
class CaseRecord(Protocol):
    """A per-case result that turns into ``(JSON data, numpy arrays)`` and back."""

    def to_record(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The result as a record.

        Returns:
            ``(doc, arrays)``: JSON-ready data and a dict of numpy arrays (may be empty).
        """
        ...

    @classmethod
    def from_record(cls, doc: Any, arrays: Any) -> Any:
        """The result back from a record.

        Args:
            doc: the JSON data of :meth:`to_record`.
            arrays: its arrays (a mapping name -> numpy array).

        Returns:
            The result (an instance of the class).
        """
        ...


Dump = Callable[[Path, str, Any], dict[str, Any]]
Restore = Callable[[Path, dict[str, Any], Any], Any]


def _check_record(record: type) -> None:
    """``TypeError`` unless ``record`` has ``to_record`` and ``from_record``."""
    if not (callable(getattr(record, "from_record", None)) and callable(getattr(record, "to_record", None))):
        raise TypeError(f"record must be a class with to_record and from_record, got {record!r}")


def record_cache_hooks(record: type, on_restore: Callable[[Any, Any], Any] | None = None) -> tuple[Dump, Restore]:
    """The ``dump`` and ``restore`` hooks of a :class:`~monai_unc.engine.CaseCache` for results of ``record``.

    ``dump`` writes the arrays to ``<case>.npz`` (compressed, atomically; an earlier one is removed when there are
    none) and returns the JSON fields ``{"record": doc, "arrays": bool, "arrays_sha256": hex}`` (the digest of the
    ``.npz`` written, only with arrays); ``restore`` reads them back, and raises ``ValueError`` (so that the cache
    computes the case again) when the ``.npz`` is not the file written with the JSON: the cache's digest covers the
    JSON text, and this one, inside it, the ``.npz`` (found by review: an edited or swapped ``<case>.npz``, e.g.
    another case's, was reused silently). A state saved without that digest (by an earlier version) is computed
    again too (``KeyError``).

    Args:
        record: the result class (a :class:`CaseRecord`).
        on_restore: ``on_restore(result, item)`` after a result is read back (e.g. to attach the case's current
            files); its return value is the result.

    Returns:
        ``(dump, restore)``.

    Raises:
        TypeError: ``record`` has no ``to_record`` / ``from_record``.
    """
    _check_record(record)

    def dump(folder: Path, case_id: str, result: Any) -> dict[str, Any]:
        doc, arrays = result.to_record()
        side = folder / f"{case_id}.npz"
        if not arrays:
            side.unlink(missing_ok=True)
            return {"record": doc, "arrays": False}
        atomic_save_npz(side, arrays, compressed=True)
        return {"record": doc, "arrays": True, "arrays_sha256": file_sha256(side)}

    def restore(folder: Path, doc: dict[str, Any], item: Any) -> Any:
        arrays: dict[str, Any] = {}
        if doc["arrays"]:
            expected = doc["arrays_sha256"]  # KeyError for a state saved without it: computed again
            data = (folder / f"{doc['case']}.npz").read_bytes()  # read once: hashed, then loaded
            if hashlib.sha256(data).hexdigest() != expected:
                raise ValueError(f"{doc['case']}.npz is not the file saved with {doc['case']}.json (its sha256 "
                                 "differs): edited or replaced")
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        result = record.from_record(doc["record"], arrays)
        return result if on_restore is None else on_restore(result, item)

    return dump, restore


def record_gather_hooks(record: type) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """The ``pack`` and ``unpack`` hooks of :func:`~monai_unc.engine.run_cases` for results of ``record``.

    ``pack`` turns a result into ``(doc, arrays)``, plain data for the gather to rank 0; ``unpack`` turns it back.

    Args:
        record: the result class (a :class:`CaseRecord`).

    Returns:
        ``(pack, unpack)``.

    Raises:
        TypeError: ``record`` has no ``to_record`` / ``from_record``.
    """
    _check_record(record)
    return (lambda result: result.to_record()), (lambda packed: record.from_record(*packed))
