"""Per-case resume state of an evaluation: a case's row and histogram saved under ``<output>/state/cases/`` with a
fingerprint of everything the row depends on, reused by a rerun only while the fingerprint is unchanged."""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import __version__
from ..io import CaseFiles, atomic_save_npz, atomic_write_text
from ..io.files import json_default
from ..metrics.calibration import ConfidenceHistogram
from .case import CaseResult
from .config import EvaluationConfig
from .rows import load_region_histograms, region_histograms_state

__all__ = ["CASE_FIELDS", "CASES_DIR", "file_signature", "case_fingerprint", "save_case_state", "load_case_state"]

#: fields of :class:`EvaluationConfig` that :func:`evaluate_case` reads (the per-case resume state is reused only
#: while they, the case's shift label and its input files are unchanged); keep in sync with evaluate_case
CASE_FIELDS = ("measure", "n_bins", "min_bin_count", "patch_size", "spatial", "num_classes", "class_names",
               "regions", "case_metric_names")

CASES_DIR = "cases"

_CASE_FORMAT = 2  # 2: the 1 - max p map is named one_minus_max_prob (was max_softmax)


def file_signature(path: Path | None) -> list[Any] | None:
    """``[resolved path, size, mtime_ns, ctime_ns, inode]`` of a file (None for None): what resume checks."""
    if path is None:
        return None
    st = Path(path).stat()  # ctime and inode too: a copy with preserved mtime (cp -p, rsync -a) still differs
    return [str(Path(path).resolve()), int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns), int(st.st_ino)]


def case_fingerprint(files: CaseFiles, config: EvaluationConfig) -> dict[str, Any]:
    """What a case's metric row depends on: package version, the per-case options (:data:`CASE_FIELDS`, fine
    bins, the region spec), the case's shift label and (path, size, mtime, ctime, inode) of its label, segmentation,
    probabilities and maps, and with regions of its image too (the QU-BraTS brain mask)."""
    fp = {
        "format": _CASE_FORMAT,
        "version": __version__,
        "config": {**{k: getattr(config, k) for k in CASE_FIELDS}, "n_fine_bins": config.n_fine_bins},
        "shift": None if config.shifts is None else config.shifts.get(files.case_id, ""),
        "inputs": {
            "label": file_signature(files.label),
            "seg": file_signature(files.seg),
            "probs": file_signature(files.probs),
            "maps": {m: file_signature(p) for m, p in sorted(files.maps.items())},
        },
    }
    if config.regions is not None:  # as [name, labels] pairs: the channel order matters (dicts compare unordered)
        fp["config"]["regions"] = [[k, list(v)] for k, v in dict(config.regions).items()]
        fp["inputs"]["image"] = file_signature(files.image)
    return json.loads(json.dumps(fp))


def save_case_state(folder: str | os.PathLike, result: CaseResult, fingerprint: Mapping[str, Any],
                    num_classes: int) -> None:
    """Write a case's result for resuming: ``<case>.npz`` (its histogram) then ``<case>.json`` (row, warnings,
    fingerprint), both atomically; the JSON, written last, marks the case finished."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cid = str(result.row["case"])
    if result.histogram is not None:
        atomic_save_npz(folder / f"{cid}.npz", result.histogram.state_dict(), compressed=True)
    if result.region_histograms is not None:
        atomic_save_npz(folder / f"{cid}.regions.npz", region_histograms_state(result.region_histograms),
                        compressed=True)
    doc = {"case": cid, "fingerprint": fingerprint, "num_classes": int(num_classes), "row": result.row,
           "warnings": result.warnings, "histogram": result.histogram is not None,
           "region_histograms": result.region_histograms is not None, "curves": result.curves}
    # internal resume state, read back only by load_case_state: Python's NaN literal (json_default, not strict JSON)
    # keeps undefined metrics NaN bit for bit, so a resumed cohort equals a fresh one; files for other readers
    # (summary.json, metrics.csv, infer.json, ...) are strict JSON without NaN
    atomic_write_text(folder / f"{cid}.json", json.dumps(doc, default=json_default) + "\n")


def load_case_state(folder: str | os.PathLike, case_id: str,
                    fingerprint: Mapping[str, Any]) -> tuple[CaseResult, int] | None:
    """``(result, num_classes)`` saved by :func:`save_case_state`, or None when absent, unreadable or stale (its
    fingerprint differs from ``fingerprint``)."""
    folder = Path(folder)
    path = folder / f"{case_id}.json"
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        if doc.get("fingerprint") != fingerprint or doc.get("case") != case_id:
            return None
        hist = ConfidenceHistogram.load(folder / f"{case_id}.npz") if doc["histogram"] else None
        rh = None
        if doc.get("region_histograms"):
            rh = load_region_histograms(folder / f"{case_id}.regions.npz")
        return (CaseResult(dict(doc["row"]), hist, list(doc["warnings"]), region_histograms=rh,
                           curves=doc.get("curves")), int(doc["num_classes"]))
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile):
        return None
