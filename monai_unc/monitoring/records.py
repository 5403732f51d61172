"""What ``monai-unc monitor record`` and ``monitor label`` read: a triage folder, sites, audited labels.

Every file read here is untrusted input (a user may edit it): each field is checked, and a wrong one is a
``ValueError`` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .._utils import is_finite_real
from ..evaluation.case import load_evaluation_case
from ..evaluation.cohort import risk_of_dice
from ..evaluation.config import EvaluationConfig
from ..evaluation.rows import case_dice, case_tasks, unclaimed_case_labels
from ..evaluation.triage.rule import ImageReference
from ..io import CaseFiles, read_csv
from ..io.provenance import decode_untrusted_json, has_weight_digests
from .store import UNKNOWN_SITE, CaseRecord

__all__ = ["TriageRun", "read_triage_run", "read_sites", "sidecar_site", "read_label_table", "model_digest",
           "loss_of", "LABEL_EXTENSIONS", "label_map_dice"]

#: the file endings of a folder of audited label maps (``<case><ending>``)
LABEL_EXTENSIONS = (".nii.gz", ".nii")

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
        model_digest: the model's digest (:func:`model_digest`) or None.
    """

    folder: Path
    rule: dict[str, Any]
    cases: tuple[CaseRecord, ...]
    source_digest: str
    triaged_at: str
    model_digest: str | None


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
    if not isinstance(v, str) or not v or "\x00" in v or len(v) > 1000:
        raise ValueError(f"{where} must be non-empty text (at most 1000 characters), got {v!r}")
    return v


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


def sidecar_site(image: Any) -> tuple[str | None, str | None]:
    """The site and scanner an image records: its JSON sidecar (dcm2niix / BIDS), or its DICOM header.

    For an image file the sidecar is ``<image name without .nii.gz / .nii>.json`` beside the image. For an image that
    is a DICOM series folder (``monai-unc`` reads those with the ``dicom`` extra) the attributes are those of its
    slices' header. The site is ``site``, ``InstitutionName`` or ``StationName``; the scanner ``scanner``, or
    ``Manufacturer`` and ``ManufacturerModelName``.

    Args:
        image: the image's path (or None).

    Returns:
        ``(site, scanner)``, each None when not recorded (or no readable sidecar or header).
    """
    if not isinstance(image, str) or not image:
        return None, None
    p = Path(image)
    if p.is_dir():
        doc: Any = _series_header(p)
    else:
        stem = p.name[:-7] if p.name.endswith(".nii.gz") else p.stem
        side = p.with_name(stem + ".json")
        try:
            doc = json.loads(side.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None, None
    if not isinstance(doc, dict):
        return None, None
    site = next((doc[k].strip() for k in _SITE_KEYS if isinstance(doc.get(k), str) and doc[k].strip()), None)
    scanner = None
    for keys in _SCANNER_KEYS:
        parts = [doc[k].strip() for k in keys if isinstance(doc.get(k), str) and doc[k].strip()]
        if parts:
            scanner = " ".join(parts)
            break
    return (site[:200] if site else None), (scanner[:200] if scanner else None)


def read_sites(path: str | os.PathLike) -> dict[str, tuple[str, str | None]]:
    """A table of sites: CSV with columns ``case`` and ``site`` (and optionally ``scanner``).

    Args:
        path: the CSV file.

    Returns:
        ``{case: (site, scanner or None)}``.

    Raises:
        ValueError: a missing column, an empty site, a case listed twice.
    """
    rows = read_csv(path)
    if not rows or "case" not in rows[0] or "site" not in rows[0]:
        raise ValueError(f"sites table {os.fspath(path)!r} needs the columns 'case' and 'site'")
    out: dict[str, tuple[str, str | None]] = {}
    for i, r in enumerate(rows, start=2):
        cid = _text(r.get("case"), f"{os.fspath(path)}: line {i}: 'case'")
        site = _text((r.get("site") or "").strip(), f"{os.fspath(path)}: line {i}: 'site'")
        if cid in out:
            raise ValueError(f"{os.fspath(path)}: case {cid!r} is listed twice")
        out[cid] = (site, (r.get("scanner") or "").strip() or None)
    return out


def _check_rule_fields(rule: Mapping[str, Any], path: Path) -> None:
    """The fields of a ``triage.json``'s rule that the store keeps and ``monitor label`` uses, checked (named)."""
    scores = (rule.get("calibration") or {}).get("case_scores", [])
    if any(v is not None and not is_finite_real(v) for v in scores):
        bad = next(v for v in scores if v is not None and not is_finite_real(v))
        raise ValueError(f"{path}: field 'rule.calibration.case_scores' must hold numbers (or null), got "
                         f"{bad!r}"[:300])
    risk = rule.get("risk", "failure")
    if risk not in ("failure", "1-dice"):
        raise ValueError(f"{path}: field 'rule.risk' must be 'failure' or '1-dice', got {risk!r}"[:300])
    fd = rule.get("failure_dice")
    if fd is not None and (isinstance(fd, bool) or not isinstance(fd, (int, float)) or not 0 <= fd <= 1):
        raise ValueError(f"{path}: field 'rule.failure_dice' must be a Dice in [0, 1] or null, got {fd!r}"[:300])
    n = rule.get("num_classes")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 2**16):
        raise ValueError(f"{path}: field 'rule.num_classes' must be a number of classes or null, got {n!r}"[:300])
    score = rule.get("score")
    column = score.get("column") if isinstance(score, dict) else score
    if not isinstance(column, str) or not column or len(column) > 1000:
        raise ValueError(f"{path}: field 'rule.score' must name the score column (text, or an object with "
                         f"'column'), got {score!r}"[:300])


def read_triage_run(
    folder: str | os.PathLike, *, site: str | None = None, sites: Mapping[str, tuple[str, str | None]] | None = None,
    triaged_at: str | None = None,
) -> TriageRun:
    """Read a triage output folder (``triage.json``) into the records of the store.

    The site of a case is, in order: its row of ``sites``, the JSON sidecar or DICOM header of its image
    (:func:`sidecar_site`),
    ``site``, :data:`~monai_unc.monitoring.store.UNKNOWN_SITE`.

    Args:
        folder: the output folder of ``monai-unc triage``.
        site: the site of every case not otherwise known.
        sites: ``{case: (site, scanner)}`` (:func:`read_sites`).
        triaged_at: when the run triaged (ISO 8601); default the modification time of ``triage.json``.

    Returns:
        The :class:`TriageRun`.

    Raises:
        ValueError: no ``triage.json``, or a field of it that is missing or wrong (named; the rule's
            ``image_reference`` with every check of :meth:`~monai_unc.evaluation.triage.ImageReference.from_json`).
    """
    root = Path(folder)
    site = (site.strip() or None) if isinstance(site, str) else site  # as the sites table and the sidecars
    path = root / "triage.json"
    if not path.is_file():
        raise ValueError(f"{os.fspath(folder)!r} is not a triage output folder (no triage.json)")
    raw = path.read_bytes()  # parsed and digested (the run's identity in the store)
    doc = decode_untrusted_json(raw, str(path))  # UTF-8; no NaN / Infinity / 1e400, no huge number, no key twice
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a triage summary")
    rule = doc.get("rule")
    if not isinstance(rule, dict) or not isinstance(rule.get("digest"), str):
        raise ValueError(f"{path}: field 'rule' must hold the referral rule with its digest")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", rule["digest"]):
        raise ValueError(f"{path}: field 'rule.digest' must be 'sha256:' and 64 hex digits, got "
                         f"{rule['digest'][:80]!r}")
    target = rule.get("target_risk")
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target < 1:
        raise ValueError(f"{path}: field 'rule.target_risk' must be a number in (0, 1), got {target!r}")
    cal = rule.get("calibration")
    if cal is not None and (not isinstance(cal, dict) or not isinstance(cal.get("case_scores", []), list)):
        raise ValueError(f"{path}: field 'rule.calibration' must be an object whose 'case_scores' is a list")
    _check_rule_fields(rule, path)
    if rule.get("image_reference") is not None:  # what the image alarm ranks new cases against: checked here
        try:
            ImageReference.from_json(rule["image_reference"], "rule.image_reference")
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    cases = doc.get("cases")
    if not isinstance(cases, list):
        raise ValueError(f"{path}: field 'cases' must be a list")
    files = doc.get("files") if isinstance(doc.get("files"), dict) else {}
    fp = doc.get("fingerprint") if isinstance(doc.get("fingerprint"), dict) else {}
    model = model_digest(fp.get("predictions")) or model_digest(rule.get("fingerprint"))
    if triaged_at is None:
        triaged_at = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")
    else:
        try:
            t = datetime.fromisoformat(triaged_at)
        except (TypeError, ValueError):
            raise ValueError(f"time must be ISO 8601 (2026-01-31T12:00:00+00:00), got {triaged_at!r}") from None
        triaged_at = (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).isoformat()
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
        s, scanner = (sites or {}).get(cid, (None, None))
        if s is None:
            entry = files.get(cid)
            s, scanner = sidecar_site(entry.get("image") if isinstance(entry, dict) else None)
        entry = files.get(cid)
        seg = entry.get("seg") if isinstance(entry, dict) else None
        records.append(CaseRecord(
            case_id=cid, site=s or site or UNKNOWN_SITE, scanner=scanner, triaged_at=triaged_at,
            score=_number(c.get("score"), f"{where}.score"),
            image_z_max=_number(c.get("image_z_max"), f"{where}.image_z_max"),
            expected_dice=_number(c.get("expected_dice"), f"{where}.expected_dice"),
            decision=decision, code=_text(c.get("code"), f"{where}.code"),
            reason=_text(c.get("reason"), f"{where}.reason"), rule_digest=rule["digest"], model_digest=model,
            prediction=seg if isinstance(seg, str) and seg and len(seg) <= 1000 and "\x00" not in seg else None,
        ))
    return TriageRun(root.resolve(), rule, tuple(records), hashlib.sha256(raw).hexdigest(), triaged_at, model)


def loss_of(dice: float | None, failure: int | None, risk: str, failure_dice: float | None) -> float:
    """The loss of an audited case under a rule's risk: its Dice's risk as the rule was certified on
    (:func:`~monai_unc.evaluation.cohort.risk_of_dice`), or the failure given.

    Args:
        dice: its Dice, or None.
        failure: 1 when it failed, 0 when not, or None (then from ``dice < failure_dice``).
        risk: the rule's risk: ``"failure"`` (0/1) or ``"1-dice"``.
        failure_dice: the Dice below which a case fails (a ``"failure"`` rule).

    Returns:
        The loss in ``[0, 1]``.

    Raises:
        ValueError: neither given, ``"1-dice"`` without a Dice, or another risk.

    Example:
        >>> loss_of(0.7, None, "failure", 0.8), loss_of(0.7, None, "1-dice", None), loss_of(None, 1, "failure", 0.8)
        (1.0, 0.30000000000000004, 1.0)
    """
    if risk not in ("failure", "1-dice"):
        raise ValueError(f"the rule's risk must be 'failure' or '1-dice', got {risk!r}")
    if risk == "1-dice":
        if dice is None:
            raise ValueError("a rule with risk '1-dice' needs each label's Dice")
    elif failure is not None:
        return float(failure)
    elif dice is None or failure_dice is None:
        raise ValueError("each label needs its Dice or its failure (0/1)")
    return float(risk_of_dice(np.array([dice]), risk, math.nan if failure_dice is None else failure_dice)[0])


def read_label_table(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Audited labels from a CSV: a ``case`` column and ``dice`` (in ``[0, 1]``) and/or ``failure`` (0 or 1).

    An optional ``site`` column names the site of each case, for case ids that more than one site uses (the store
    refuses a label of such a case without its site).

    Args:
        path: the CSV file.

    Returns:
        ``{"case", "dice", "failure"}`` per row (None for an empty cell), with ``"site"`` (None when empty) when the
        table has a ``site`` column.

    Raises:
        ValueError: a missing column, a value out of range, a case (at a site) listed twice.
    """
    name = os.fspath(path)
    rows = read_csv(path)
    if not rows or "case" not in rows[0] or not ({"dice", "failure"} & set(rows[0])):
        raise ValueError(f"labels table {name!r} needs a 'case' column and a 'dice' or 'failure' column")
    with_site = "site" in rows[0]
    out, seen = [], set()
    for i, r in enumerate(rows, start=2):
        cid = _text(r.get("case"), f"{name}: line {i}: 'case'")
        site = ((r.get("site") or "").strip() or None) if with_site else None
        if (cid, site) in seen:
            raise ValueError(f"{name}: case {cid!r}{'' if site is None else f' at site {site!r}'} is listed twice")
        seen.add((cid, site))
        dice = fail = None
        if (r.get("dice") or "").strip():
            try:
                dice = float(r["dice"])
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
        out.append({"case": cid, "dice": dice, "failure": fail, **({"site": site} if with_site else {})})
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
    case_id = next((lab.name[: -len(e)] for e in LABEL_EXTENSIONS if lab.name.endswith(e)), lab.name)
    config = (EvaluationConfig(num_classes=num_classes) if regions is None else
              EvaluationConfig(regions={k: list(v) for k, v in regions.items()}))
    case = load_evaluation_case(CaseFiles(case_id, lab, seg=pred), config)
    unclaimed = unclaimed_case_labels(case, config)
    if unclaimed:
        raise ValueError(f"label map {os.fspath(label)!r}: label value(s) {unclaimed[:6]} are in no region of the "
                         f"rule's spec {dict(config.regions or {})}; the rule's Dice would count them as background")
    return case_dice(case_tasks(case, config)[1])[0]
