"""Cohort evaluation: per-case metric rows and cohort summaries, the engine behind ``monai-unc evaluate``.

Every number is computed by the metric functions of :mod:`monai_unc.metrics` and :mod:`monai_unc.aggregation`;
this module only loads cases, calls them and keeps the results.

Per case (one row of ``metrics.csv``, :func:`evaluate_case`):

- ``dice`` (mean over the foreground classes) and ``dice_<class>``: MONAI's ``compute_dice`` on the label maps,
  ``ignore_empty=False`` (a class absent from both maps scores 1, absent from one of them 0);
- calibration, when probabilities are given: ``ece``, ``classwise_ece``, ``all_label_ece``, ``ace``, ``mce``,
  ``uce``, ``nll``, ``brier`` (:func:`monai_unc.metrics.calibration.calibration_metrics` on the case's
  :class:`~monai_unc.metrics.calibration.ConfidenceHistogram`);
- for the primary uncertainty measure: ``buc``, ``ba_ece``, ``space`` (:mod:`monai_unc.metrics.spatial`, spacing
  from the affine, mm) and ``error_auroc``, ``error_auprc`` (:mod:`monai_unc.metrics.discrimination`). BA-ECE and
  SPACE compare uncertainty with error rates, so entropies and mutual information are divided by ``log C``
  first (:func:`unit_scale`); BUC and the AUROC/AUPRC do not depend on the scale;
- case scores for every measure ``m`` (:func:`monai_unc.aggregation.aggregate`): ``m_mean`` (whole volume),
  ``m_fg_mean`` (inside the predicted foreground, ValUES Appendix F.1) and ``m_patch`` (largest mean over
  ``patch_size``-voxel boxes, ValUES Sec. 4.3); ``score`` repeats the column chosen for triage.

Cohort (``summary.json``, :func:`summarize`), from additive state (:class:`CohortState`):

- pooled calibration: the per-case histograms are kept side by side in one per-case
  :class:`~monai_unc.metrics.calibration.ConfidenceHistogram` and every ECE-family value of the cohort is computed
  once on their sum (counts and sums add), never as an average of per-case ECEs; the all-label reliability curve
  of the pooled histogram (the report adds the per-case spread from the same histogram). The histograms use
  ``16 * n_bins`` fine bins: every coarse bin is a union of fine bins and the binned sums are exact float64, so
  the values equal those of a finer grid for this ``n_bins`` while a case costs ``384 (C + 2) n_bins`` bytes;
- failure detection with risk ``1 - Dice`` (:func:`~monai_unc.metrics.casewise.failure_detection`: AURC,
  E-AURC, AUGRC), the Dice referral curve and its normalised area (:mod:`monai_unc.metrics.selective`),
  the triage at a referral budget (expected Dice of the retained cases), and OoD AUROC
  (:func:`~monai_unc.metrics.casewise.ood_auroc`) when a shift label per case is given;
- with ``target_risk``: the referral threshold with a statistical guarantee
  (:func:`~monai_unc.metrics.selective.risk_controlled_threshold`, SGR for the failure risk ``dice <
  failure_dice``, Learn-then-Test for ``1 - dice``) fitted on the calibration cases, and which cases it accepts.

Cases whose score is undefined (e.g. ``fg_mean`` with an empty predicted foreground) are ranked as the most
uncertain: they are referred first. Sharding: :func:`evaluate_cases` takes any list of cases and returns a
:class:`CohortState`; states of disjoint shards :meth:`~CohortState.merge` into the state of the whole cohort.
:func:`run_evaluate` runs on one process or under ``torchrun`` (each rank evaluates a shard, rank 0 adds the
per-case results in case-id order, so the cohort numbers equal the single-process ones bit for bit), keeps a
per-case resume state under ``state/cases/`` and reports failing cases without stopping the others
(docs/distributed.md).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..io import MEASURES, CaseError, CaseFiles, LoadedCase, load_case, match_cases
from ..metrics.calibration import ConfidenceHistogram, calibration_metrics, reliability_curve
from .nifti import atomic_write_text, json_safe

__all__ = [
    "CALIBRATION_COLUMNS",
    "SPATIAL_COLUMNS",
    "IID_SHIFTS",
    "EvaluationConfig",
    "CaseResult",
    "CohortState",
    "unit_scale",
    "evaluate_case",
    "evaluate_cases",
    "evaluate_shard",
    "assemble_state",
    "case_fingerprint",
    "save_case_state",
    "load_case_state",
    "summarize",
    "case_risk",
    "RISKS",
    "triage_order",
    "fill_undefined_scores",
    "read_shifts",
    "write_evaluation",
    "load_evaluation",
    "remove_cohort_files",
    "run_evaluate",
]

CALIBRATION_COLUMNS = ("ece", "classwise_ece", "all_label_ece", "ace", "mce", "uce", "nll", "brier")
SPATIAL_COLUMNS = ("buc", "ba_ece", "space", "error_auroc", "error_auprc")
#: shift labels that mark in-distribution cases (case-insensitive)
IID_SHIFTS = ("", "none", "iid", "id", "clean", "in-distribution")
#: per-case risks for the risk-controlled threshold: ``[dice < failure_dice]`` or ``1 - dice``
RISKS = ("failure", "1-dice")
_ENTROPY_LIKE = ("predictive_entropy", "expected_entropy", "mutual_information")
_STATE_DIR = "state"


def _slug(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", str(name)).strip("_").lower() or "class"


@dataclass
class EvaluationConfig:
    """Options of an evaluation (see the module docstring).

    Args:
        measure: primary uncertainty measure for the spatial / discrimination metrics (default:
            ``predictive_entropy`` when present, else the first measure available).
        score: the triage score column, e.g. ``"predictive_entropy_fg_mean"`` (default ``<measure>_fg_mean``).
        n_bins, min_bin_count: binning of the ECE family (seed 001 uses ``min_bin_count=50``).
        failure_dice: a case with Dice below this counts as failed (histograms, failure list).
        budget: referral budget: fraction of the cases referred for review (most uncertain first).
        patch_size: box size (voxels per axis) of the ``_patch`` scores.
        spatial: compute BUC, BA-ECE and SPACE (distance transforms and a Gaussian filter per case).
        num_classes: number of classes (default: from the probabilities).
        class_names: names of the classes for the ``dice_<class>`` columns (default ``1``, ``2``, ...).
        shifts: ``{case: shift label}`` for OoD detection; in-distribution labels are :data:`IID_SHIFTS`.
        target_risk: when set, the referral threshold with a guarantee
            (:func:`monai_unc.metrics.selective.risk_controlled_threshold`): with probability at least
            ``1 - delta`` over the draw of the calibration cases, the mean risk of the accepted new cases is at
            most ``target_risk`` (cases exchangeable with the calibration cases; docs/referral_threshold.md).
        delta: allowed probability that the guarantee fails (default 0.1).
        risk: ``"failure"`` (0/1 risk ``dice < failure_dice``) or ``"1-dice"`` (continuous risk ``1 - dice``).
        risk_method: ``"sgr"`` (binomial bound, 0/1 risk only) or ``"ltt"`` (Hoeffding-Bentkus, any risk in
            [0, 1]); default ``"sgr"`` for ``"failure"`` and ``"ltt"`` for ``"1-dice"``.
        calibration_cases: ids of the cases the threshold is fitted on (default: every case, and the threshold is
            meant for new cases); the other cases are reported as a held-out check.
    """

    measure: str | None = None
    score: str | None = None
    n_bins: int = 15
    min_bin_count: int = 0
    failure_dice: float = 0.8
    budget: float = 0.2
    patch_size: int = 10
    spatial: bool = True
    num_classes: int | None = None
    class_names: list[str] | None = None
    shifts: dict[str, str] | None = None
    target_risk: float | None = None
    delta: float = 0.1
    risk: str = "failure"
    risk_method: str | None = None
    calibration_cases: list[str] | None = None

    @property
    def n_fine_bins(self) -> int:
        """Fine bins of the confidence histograms: ``16 * n_bins`` (coarse binning exact, see the module)."""
        return 16 * self.n_bins

    def validate(self) -> None:
        if not 0.0 <= self.budget < 1.0:
            raise ValueError(f"budget must be a referral fraction in [0, 1), got {self.budget}")
        if not 0.0 <= self.failure_dice <= 1.0:
            raise ValueError(f"failure_dice must be in [0, 1], got {self.failure_dice}")
        if self.measure is not None and self.measure not in MEASURES:
            raise ValueError(f"measure must be one of {MEASURES}, got {self.measure!r}")
        if self.patch_size < 1:
            raise ValueError(f"patch_size must be positive, got {self.patch_size}")
        if self.n_bins < 1:
            raise ValueError(f"n_bins must be positive, got {self.n_bins}")
        if self.target_risk is not None and not 0.0 < self.target_risk < 1.0:
            raise ValueError(f"target_risk must be in (0, 1), got {self.target_risk}")
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")
        if self.risk not in RISKS:
            raise ValueError(f"risk must be one of {RISKS}, got {self.risk!r}")
        if self.risk_method is not None and self.risk_method not in ("sgr", "ltt"):
            raise ValueError(f"risk_method must be 'sgr' or 'ltt', got {self.risk_method!r}")
        if self.risk == "1-dice" and self.risk_method == "sgr":
            raise ValueError("risk_method='sgr' needs the 0/1 risk (risk='failure'); use 'ltt' for risk='1-dice'")
        if self.calibration_cases is not None and not self.calibration_cases:
            raise ValueError("calibration_cases must name at least one case (or be None for every case)")

    def check_calibration_cases(self, case_ids: Iterable[str]) -> set[str]:
        """The calibration case ids as a set (empty when ``calibration_cases`` is None); ``ValueError`` if one is
        not among ``case_ids``."""
        if self.calibration_cases is None:
            return set()
        wanted = {str(c) for c in self.calibration_cases}
        unknown = sorted(wanted - set(case_ids))
        if unknown:
            raise ValueError(f"calibration_cases: {len(unknown)} case(s) not in the evaluation, e.g. {unknown[:5]}")
        return wanted

    @property
    def resolved_risk_method(self) -> str:
        """``risk_method``, or its default for ``risk`` (SGR for failures, LTT for ``1 - dice``)."""
        return self.risk_method or ("sgr" if self.risk == "failure" else "ltt")

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.pop("shifts", None)
        return d


def unit_scale(u: np.ndarray, measure: str, num_classes: int) -> np.ndarray:
    """Uncertainty on the [0, 1] scale of an error rate: entropies and mutual information (nats) divided by
    ``log C``; ``max_softmax`` and ``variance`` are already in [0, 1]."""
    if measure in _ENTROPY_LIKE:
        return u / math.log(num_classes)
    return u


@dataclass
class CaseResult:
    """What :func:`evaluate_case` returns: the metric row, the case's confidence histogram (or None without
    probabilities) and the warnings raised while computing it."""

    row: dict[str, Any]
    histogram: ConfidenceHistogram | None
    warnings: list[str] = field(default_factory=list)


def _dice(seg: np.ndarray, label: np.ndarray, num_classes: int) -> np.ndarray:
    from monai.metrics import compute_dice

    p = torch.from_numpy(seg)[None, None]
    y = torch.from_numpy(label)[None, None]
    return compute_dice(p, y, include_background=False, ignore_empty=False, num_classes=num_classes)[0].numpy()


def _derived_maps(case: LoadedCase) -> dict[str, np.ndarray]:
    """Maps to score: the given ones, or entropy and max-softmax of the probabilities when none are given."""
    if case.maps or case.probs is None:
        return case.maps
    from ..measures import entropy, max_softmax

    p = torch.from_numpy(case.probs)[None]
    return {
        "predictive_entropy": entropy(p)[0, 0].numpy().astype(np.float32),
        "max_softmax": max_softmax(p)[0, 0].numpy().astype(np.float32),
    }


def _primary(maps: Mapping[str, np.ndarray], wanted: str | None) -> str | None:
    if wanted is not None:
        if wanted not in maps:
            raise ValueError(f"measure {wanted!r} has no map (available: {sorted(maps) or 'none'})")
        return wanted
    if "predictive_entropy" in maps:
        return "predictive_entropy"
    return next(iter(maps), None)


def evaluate_case(files: CaseFiles | LoadedCase, config: EvaluationConfig) -> CaseResult:
    """Metrics of one case (module docstring). ``files`` may be already loaded."""
    from ..aggregation import aggregate
    from ..metrics.discrimination import error_auprc, error_auroc
    from ..metrics.spatial import boundary_aware_ece, boundary_uncertainty_concentration, spatial_calibration_error

    case = files if isinstance(files, LoadedCase) else load_case(files, config.num_classes)
    n_cls = case.probs.shape[0] if case.probs is not None else config.num_classes
    assert n_cls is not None
    names = config.class_names or [str(c) for c in range(n_cls)]
    if len(names) != n_cls:
        raise ValueError(f"class_names has {len(names)} names for {n_cls} classes")
    row: dict[str, Any] = {"case": case.case_id}
    if config.shifts is not None:
        row["shift"] = config.shifts.get(case.case_id, "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dice = _dice(case.seg, case.label, n_cls)
        row["dice"] = float(np.mean(dice))
        for c in range(1, n_cls):
            row[f"dice_{_slug(names[c])}"] = float(dice[c - 1])
        hist = None
        if case.probs is not None:
            hist = ConfidenceHistogram(n_cls, n_fine_bins=config.n_fine_bins, per_case=True)
            hist.update(case.probs[None], case.label[None], case_ids=[case.case_id], validate=False)
            vals = calibration_metrics(hist, CALIBRATION_COLUMNS, n_bins=config.n_bins,
                                       min_bin_count=config.min_bin_count)
            row.update({k: float(vals[k]) for k in CALIBRATION_COLUMNS})
        maps = _derived_maps(case)
        primary = _primary(maps, config.measure)
        error = (case.seg != case.label).astype(np.uint8)
        row["error_rate"] = float(error.mean())
        if primary is not None:
            row["measure"] = primary
            u = maps[primary]
            if config.spatial:
                un = unit_scale(u, primary, n_cls)
                row["buc"] = float(boundary_uncertainty_concentration(u, case.seg, case.label, case.spacing))
                row["ba_ece"] = float(boundary_aware_ece(un, case.seg, case.label, case.spacing))
                row["space"] = float(spatial_calibration_error(un, case.seg, case.label, case.spacing))
            row["error_auroc"] = float(error_auroc(u, error))
            row["error_auprc"] = float(error_auprc(u, error))
        fg = (case.seg > 0)[None, None]
        for m, u in maps.items():
            u5 = u[None, None]
            row[f"{m}_mean"] = float(aggregate(u5, "mean")[0])
            row[f"{m}_fg_mean"] = float(aggregate(u5, "mean", mask=fg)[0])
            row[f"{m}_patch"] = float(
                aggregate(u5, "patch", patch_size=config.patch_size, patch_reduction="mean")[0]
            )
        row["voxels"] = int(case.label.size)
        row["spacing"] = "x".join(f"{s:.4g}" for s in case.spacing)
    messages = sorted({f"{case.case_id}: {w.message}" for w in caught if issubclass(w.category, UserWarning)})
    return CaseResult(row, hist, messages)


@dataclass
class CohortState:
    """Additive state of an evaluation: per-case rows, the per-case confidence histograms, warnings, file paths.

    :meth:`merge` adds the state of another (disjoint) set of cases: rows are concatenated and the histograms'
    cases joined (pooled metrics add their counts and sums). The summary of merged shards equals the summary of
    the whole cohort.
    """

    num_classes: int
    n_fine_bins: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    histogram: ConfidenceHistogram | None = None
    warnings: list[str] = field(default_factory=list)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, result: CaseResult, files: CaseFiles | None = None) -> CohortState:
        cid = result.row["case"]
        if any(r["case"] == cid for r in self.rows):
            raise ValueError(f"case {cid!r} is already in the cohort state")
        self.rows.append(result.row)
        if result.histogram is not None:
            self._histogram().merge(result.histogram)
        self.warnings.extend(result.warnings)
        if files is not None:
            self.files[cid] = files.to_json()
        return self

    def merge(self, other: CohortState) -> CohortState:
        """Add the cases of ``other`` (in place; returns ``self``). Case ids must not overlap."""
        if (other.num_classes, other.n_fine_bins) != (self.num_classes, self.n_fine_bins):
            raise ValueError(
                f"cannot merge cohort states with (num_classes, n_fine_bins) {(self.num_classes, self.n_fine_bins)} "
                f"and {(other.num_classes, other.n_fine_bins)}"
            )
        dup = {r["case"] for r in self.rows} & {r["case"] for r in other.rows}
        if dup:
            raise ValueError(f"cohort states share case(s) {sorted(dup)[:5]}: shards must be disjoint")
        self.rows.extend(other.rows)
        if other.histogram is not None:
            self._histogram().merge(other.histogram)
        self.warnings.extend(other.warnings)
        self.files.update(other.files)
        return self

    def _histogram(self) -> ConfidenceHistogram:
        if self.histogram is None:
            self.histogram = ConfidenceHistogram(self.num_classes, n_fine_bins=self.n_fine_bins, per_case=True)
        return self.histogram

    def sorted_rows(self) -> list[dict[str, Any]]:
        return sorted(self.rows, key=lambda r: str(r["case"]))

    # -- persistence ------------------------------------------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> None:
        """Write the state to ``folder`` (``rows.json``, ``histogram.npz``) atomically."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "num_classes": self.num_classes,
            "n_fine_bins": self.n_fine_bins,
            "rows": self.sorted_rows(),
            "warnings": self.warnings,
            "files": self.files,
        }
        if self.histogram is not None:
            _atomic_npz(folder / "histogram.npz", self.histogram.state_dict())
        else:
            (folder / "histogram.npz").unlink(missing_ok=True)  # not an earlier run's
        atomic_write_text(folder / "rows.json", json.dumps(meta, indent=1, default=_json_default) + "\n")

    @classmethod
    def load(cls, folder: str | os.PathLike) -> CohortState:
        folder = Path(folder)
        path = folder / "rows.json"
        if not path.is_file():
            raise FileNotFoundError(f"no evaluation state in {folder} (rows.json missing): run monai-unc evaluate")
        meta = json.loads(path.read_text())
        state = cls(int(meta["num_classes"]), int(meta["n_fine_bins"]), list(meta["rows"]),
                    warnings=list(meta.get("warnings", [])), files=dict(meta.get("files", {})))
        hp = folder / "histogram.npz"
        if hp.is_file():
            state.histogram = ConfidenceHistogram.load(hp)
        return state


def _atomic_npz(path: Path, arrays: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.stem}.partial.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


#: fields of :class:`EvaluationConfig` that :func:`evaluate_case` reads (the per-case resume state is reused only
#: while they, the case's shift label and its input files are unchanged); keep in sync with evaluate_case
_CASE_FIELDS = ("measure", "n_bins", "min_bin_count", "patch_size", "spatial", "num_classes", "class_names")
_CASES_DIR = "cases"
_CASE_FORMAT = 1


def _file_signature(path: Path | None) -> list[Any] | None:
    if path is None:
        return None
    st = Path(path).stat()  # ctime and inode too: a copy with preserved mtime (cp -p, rsync -a) still differs
    return [str(Path(path).resolve()), int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns), int(st.st_ino)]


def case_fingerprint(files: CaseFiles, config: EvaluationConfig) -> dict[str, Any]:
    """What a case's metric row depends on: package version, the per-case options (:data:`_CASE_FIELDS`, fine
    bins), the case's shift label and (path, size, mtime, ctime, inode) of its label, segmentation, probabilities
    and maps."""
    from .. import __version__

    fp = {
        "format": _CASE_FORMAT,
        "version": __version__,
        "config": {**{k: getattr(config, k) for k in _CASE_FIELDS}, "n_fine_bins": config.n_fine_bins},
        "shift": None if config.shifts is None else config.shifts.get(files.case_id, ""),
        "inputs": {
            "label": _file_signature(files.label),
            "seg": _file_signature(files.seg),
            "probs": _file_signature(files.probs),
            "maps": {m: _file_signature(p) for m, p in sorted(files.maps.items())},
        },
    }
    return json.loads(json.dumps(fp))


def save_case_state(folder: str | os.PathLike, result: CaseResult, fingerprint: Mapping[str, Any],
                    num_classes: int) -> None:
    """Write a case's result for resuming: ``<case>.npz`` (its histogram) then ``<case>.json`` (row, warnings,
    fingerprint), both atomically; the JSON, written last, marks the case finished."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cid = str(result.row["case"])
    if result.histogram is not None:
        _atomic_npz(folder / f"{cid}.npz", result.histogram.state_dict())
    doc = {"case": cid, "fingerprint": fingerprint, "num_classes": int(num_classes), "row": result.row,
           "warnings": result.warnings, "histogram": result.histogram is not None}
    atomic_write_text(folder / f"{cid}.json", json.dumps(doc, default=_json_default) + "\n")


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
        return CaseResult(dict(doc["row"]), hist, list(doc["warnings"])), int(doc["num_classes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def evaluate_shard(
    cases: Sequence[CaseFiles],
    config: EvaluationConfig,
    *,
    cache: str | os.PathLike | None = None,
    failures: list[tuple[str, BaseException]] | None = None,
    on_failure: Any = None,
    progress: bool = False,
    desc: str = "evaluate",
) -> list[tuple[CaseResult, CaseFiles, int]]:
    """Evaluate ``cases`` one by one: ``[(result, files, num_classes)]`` in the order given.

    With ``cache`` (a folder), a case whose saved state matches its :func:`case_fingerprint` is loaded instead of
    recomputed, and every computed case is saved there (resume after an interruption or a failure). With
    ``failures`` (a list), a case that raises is appended as ``(case_id, exception)``, ``on_failure(case_id,
    exception)`` is called, and the loop goes on; otherwise the first error propagates. Cases are loaded with
    ``config.num_classes`` only: agreement on the number of classes across cases is checked by
    :func:`assemble_state`, so that shards evaluated apart give the same verdict as one process.
    """
    from tqdm.auto import tqdm

    config.validate()
    out = []
    bar = tqdm(cases, desc=desc, unit="case", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    for files in bar:
        bar.set_postfix_str(files.case_id)
        try:
            fp = case_fingerprint(files, config) if cache is not None else None
            got = load_case_state(cache, files.case_id, fp) if cache is not None else None  # type: ignore[arg-type]
            if got is None:
                loaded = load_case(files, config.num_classes)
                n_cls = loaded.probs.shape[0] if loaded.probs is not None else config.num_classes
                assert n_cls is not None
                result = evaluate_case(loaded, config)
                if cache is not None:
                    save_case_state(cache, result, fp, int(n_cls))  # type: ignore[arg-type]
                got = (result, int(n_cls))
        except Exception as e:  # an interrupt (KeyboardInterrupt) is not an Exception and stops the run
            if failures is None:
                raise
            failures.append((files.case_id, e))
            if on_failure is not None:
                on_failure(files.case_id, e)
            continue
        out.append((got[0], files, got[1]))
    return out


def assemble_state(
    results: Iterable[tuple[CaseResult, CaseFiles, int]],
    n_fine_bins: int,
    failures: list[tuple[str, BaseException]] | None = None,
) -> CohortState | None:
    """The :class:`CohortState` of per-case results, added in case-id order whatever order (or shard) they came
    in, so the pooled float64 sums are the same bits as for one process. The number of classes is that of the
    first case; a case with another number raises a ``CaseError`` or, with ``failures``, is appended there.
    Returns None when no case is left."""
    state: CohortState | None = None
    for result, files, n_cls in sorted(results, key=lambda t: str(t[0].row["case"])):
        cid = str(result.row["case"])
        if state is None:
            state = CohortState(int(n_cls), n_fine_bins)
        elif n_cls != state.num_classes:
            err = CaseError(f"case {cid!r} has {n_cls} classes, the cohort {state.num_classes}")
            if failures is None:
                raise err
            failures.append((cid, err))
            continue
        state.add(result, files)
    return state


def evaluate_cases(
    cases: Sequence[CaseFiles],
    config: EvaluationConfig,
    progress: bool = False,
    desc: str = "evaluate",
    cache: str | os.PathLike | None = None,
) -> CohortState:
    """Evaluate ``cases`` (any subset of a cohort) into a :class:`CohortState` (cases in id order); the first
    failing case raises. ``cache``: per-case resume folder (:func:`evaluate_shard`)."""
    state = assemble_state(evaluate_shard(cases, config, cache=cache, progress=progress, desc=desc),
                           config.n_fine_bins)
    if state is None:
        raise ValueError("no case to evaluate")
    return state


# ----------------------------------------------------------------------------------------------------------------
# cohort summary
# ----------------------------------------------------------------------------------------------------------------
def _column(rows: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    return np.array([float(r.get(key, np.nan)) if r.get(key) not in (None, "") else np.nan for r in rows])


def _score_column(rows: Sequence[Mapping[str, Any]], wanted: str | None) -> str:
    if not rows:
        raise ValueError("no case rows")
    keys = [k for k in rows[0] if k.endswith(("_mean", "_fg_mean", "_patch"))]
    if wanted is not None:
        if wanted not in rows[0]:
            raise ValueError(f"score column {wanted!r} not found; available: {keys}")
        return wanted
    measure = rows[0].get("measure")
    if measure is not None and f"{measure}_fg_mean" in rows[0]:
        return f"{measure}_fg_mean"
    if not keys:
        raise ValueError("no uncertainty score in the rows: give uncertainty maps or probabilities")
    return keys[0]


def fill_undefined_scores(scores: np.ndarray) -> np.ndarray:
    """Undefined (NaN) scores become larger than every defined one: those cases are referred first."""
    out = scores.astype(np.float64, copy=True)
    bad = ~np.isfinite(out)
    if bad.any():
        top = np.nanmax(out[~bad]) if (~bad).any() else 0.0
        out[bad] = top + 1.0
    return out


def triage_order(case_ids: Sequence[str], scores: np.ndarray) -> list[int]:
    """Indices from most to least uncertain (undefined scores first; ties by case id)."""
    filled = fill_undefined_scores(np.asarray(scores, dtype=np.float64))
    return sorted(range(len(case_ids)), key=lambda i: (-filled[i], str(case_ids[i])))


def _nanmean(a: np.ndarray) -> float | None:
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else None


def case_risk(dice: np.ndarray, config: EvaluationConfig) -> np.ndarray:
    """Per-case risk in [0, 1] of ``config.risk``: ``[dice < failure_dice]`` or ``1 - dice``."""
    dice = np.asarray(dice, dtype=np.float64)
    if config.risk == "failure":
        return (dice < config.failure_dice).astype(np.float64)
    return np.clip(1.0 - dice, 0.0, 1.0)


def _risk_control(ids: Sequence[str], scores: np.ndarray, dice: np.ndarray, config: EvaluationConfig) -> dict:
    """The ``risk_control`` block of the summary: threshold fitted on the calibration cases, applied to all."""
    from ..metrics.selective import risk_controlled_threshold

    assert config.target_risk is not None
    if config.calibration_cases is None:
        is_cal = np.ones(len(ids), dtype=bool)
    else:
        wanted = config.check_calibration_cases(ids)
        is_cal = np.array([c in wanted for c in ids])
    risk = case_risk(dice, config)
    method = config.resolved_risk_method
    res = risk_controlled_threshold(scores[is_cal], risk[is_cal], config.target_risk, config.delta, method=method)
    accept = scores <= res.threshold
    held = ~is_cal
    out: dict[str, Any] = {
        "target_risk": config.target_risk,
        "delta": config.delta,
        "risk": f"dice < {config.failure_dice:g}" if config.risk == "failure" else "1 - dice",
        "method": method,
        "feasible": res.feasible,
        "threshold": res.threshold,
        "bound": res.bound,
        "n_candidates": res.n_candidates,
        "calibration": {
            "n_cases": int(is_cal.sum()),
            "cases": "all" if config.calibration_cases is None else [c for c, k in zip(ids, is_cal) if k],
            "coverage": res.coverage,
            "risk_accepted": res.risk,
        },
        "accepted": [c for c, a in zip(ids, accept) if a],
        "referred": [c for c, a in zip(ids, accept) if not a],
        "referral_fraction": float(1.0 - accept.mean()),
    }
    if held.any():
        acc = accept & held
        out["held_out"] = {
            "n_cases": int(held.sum()),
            "coverage": float(acc.sum() / held.sum()),
            "risk_accepted": float(risk[acc].mean()) if acc.any() else None,
        }
    return out


def summarize(state: CohortState, config: EvaluationConfig) -> dict[str, Any]:
    """Cohort metrics of ``state`` (module docstring); NaN becomes ``null`` in the returned dict."""
    from ..metrics.casewise import failure_detection, ood_auroc
    from ..metrics.selective import area_under_referral_curve, referral_curve

    config.validate()
    rows = state.sorted_rows()
    ids = [str(r["case"]) for r in rows]
    n = len(rows)
    dice = _column(rows, "dice")
    score_key = _score_column(rows, config.score)
    raw_scores = _column(rows, score_key)
    scores = fill_undefined_scores(raw_scores)
    summary: dict[str, Any] = {
        "n_cases": n,
        "num_classes": state.num_classes,
        "class_names": config.class_names,
        "measure": rows[0].get("measure"),
        "score": {"column": score_key, "undefined": [c for c, s in zip(ids, raw_scores) if not np.isfinite(s)]},
        "dice": {
            "mean": float(dice.mean()),
            "median": float(np.median(dice)),
            "per_class": {k[5:]: _nanmean(_column(rows, k)) for k in rows[0] if k.startswith("dice_")},
        },
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if state.histogram is not None:
            cal = calibration_metrics(state.histogram, CALIBRATION_COLUMNS, n_bins=config.n_bins,
                                      min_bin_count=config.min_bin_count)
            rc = reliability_curve(state.histogram, kind="all_label", n_bins=config.n_bins,
                                   min_bin_count=config.min_bin_count)
            summary["calibration"] = {
                **{k: float(v) for k, v in cal.items()},
                "pooled_over": "all voxels of all cases (merged confidence histograms)",
                "n_bins": config.n_bins,
                "min_bin_count": config.min_bin_count,
                "voxels": int(state.histogram.scalars[:, 0].sum().item()),
            }
            summary["reliability"] = {
                "kind": "all_label",
                "edges": rc.edges,
                "confidence": rc.confidence,
                "frequency": rc.frequency,
                "counts": rc.counts,
            }
        spatial = {k: _nanmean(_column(rows, k)) for k in SPATIAL_COLUMNS if k in rows[0]}
        if spatial:
            summary["spatial"] = {"measure": rows[0].get("measure"), "mean_over_cases": spatial}
        fd = failure_detection(scores, dice)
        summary["failure_detection"] = {"risk": "1 - dice", "aurc": fd.aurc, "eaurc": fd.eaurc, "augrc": fd.augrc}
        curve = referral_curve(scores, dice)
        summary["referral"] = {
            "metric": "mean dice of the retained cases",
            "tau": curve.tau,
            "dice": curve.value,
            "n_retained": curve.n_retained,
            "area_normalized": area_under_referral_curve(scores, dice, normalize=True) if n > 1 else None,
        }
        order = triage_order(ids, raw_scores)
        n_ref = int(math.ceil(round(config.budget * n, 9)))
        at_budget = referral_curve(scores, dice, taus=[config.budget])
        summary["triage"] = {
            "budget": config.budget,
            "n_referred": n_ref,
            "referred": [ids[i] for i in order[:n_ref]],
            "order": [ids[i] for i in order],
            "dice_all": float(dice.mean()),
            "dice_retained": float(at_budget.value[0]),
            "dice_referred": float(dice[order[:n_ref]].mean()) if n_ref else None,
        }
        failed = dice < config.failure_dice
        summary["failures"] = {
            "dice_threshold": config.failure_dice,
            "n_failed": int(failed.sum()),
            "cases": [c for c, f in zip(ids, failed) if f],
            "caught_by_budget": int(sum(failed[i] for i in order[:n_ref])),
        }
        if config.shifts is not None:
            shift = [str(r.get("shift", "")) for r in rows]
            iid = np.array([s.lower() in IID_SHIFTS for s in shift])
            ood: dict[str, Any] = {"n_iid": int(iid.sum()), "n_ood": int((~iid).sum())}
            if iid.any() and (~iid).any():
                ood["auroc"] = ood_auroc(scores[iid], scores[~iid])
                ood["per_shift"] = {
                    s: ood_auroc(scores[iid], scores[np.array(shift) == s])
                    for s in sorted(set(shift)) if s.lower() not in IID_SHIFTS
                }
            summary["ood"] = ood
        if config.target_risk is not None:
            summary["risk_control"] = _risk_control(ids, scores, dice, config)
    msgs = sorted({str(w.message) for w in caught if issubclass(w.category, UserWarning)})
    summary["warnings"] = sorted(set(state.warnings)) + [f"cohort: {m}" for m in msgs]
    return json_safe(summary)


# ----------------------------------------------------------------------------------------------------------------
# files
# ----------------------------------------------------------------------------------------------------------------
def read_shifts(path: str | os.PathLike) -> dict[str, str]:
    """``{case: shift}`` from a CSV with columns ``case`` and ``shift``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"shift table not found: {path}")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or not {"case", "shift"} <= set(reader.fieldnames):
            raise ValueError(f"{path} must be a CSV with columns 'case' and 'shift', got {reader.fieldnames}")
        return {row["case"]: row["shift"] for row in reader}


def _csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _fmt_cell(r.get(k)) for k in columns})
    return buf.getvalue()


def _fmt_cell(v: Any) -> Any:
    if isinstance(v, float):
        return "" if not math.isfinite(v) else repr(v)
    return "" if v is None else v


def write_evaluation(state: CohortState, summary: Mapping[str, Any], output: str | os.PathLike,
                     config: EvaluationConfig | None = None) -> dict[str, Path]:
    """Write ``metrics.csv``, ``summary.json`` and the state folder (for ``monai-unc report``) atomically."""
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    state.save(output / _STATE_DIR)
    doc = dict(summary)
    if config is not None:
        doc["config"] = config.to_json()
    paths = {
        "metrics": atomic_write_text(output / "metrics.csv", _csv_text(state.sorted_rows())),
        "summary": atomic_write_text(output / "summary.json", json.dumps(json_safe(doc), indent=2) + "\n"),
        "state": output / _STATE_DIR,
    }
    return paths


def load_evaluation(folder: str | os.PathLike) -> tuple[CohortState, dict[str, Any]]:
    """The state and summary written by :func:`write_evaluation`."""
    folder = Path(folder)
    if (folder / "failures.json").is_file():
        raise ValueError(f"the last evaluation in {folder} has failed cases (failures.json): fix them and run "
                         "monai-unc evaluate again")
    path = folder / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"no summary.json in {folder}: run monai-unc evaluate --output {folder} first")
    return CohortState.load(folder / _STATE_DIR), json.loads(path.read_text())


def remove_cohort_files(folder: str | os.PathLike) -> None:
    """Remove the cohort outputs of an evaluation folder (``metrics.csv``, ``summary.json``, the cohort state),
    keeping the per-case resume state: after a run with failed cases no earlier run's numbers remain."""
    folder = Path(folder)
    for path in (folder / "metrics.csv", folder / "summary.json", folder / _STATE_DIR / "rows.json",
                 folder / _STATE_DIR / "histogram.npz"):
        path.unlink(missing_ok=True)


def _pack(result: CaseResult, files: CaseFiles, n_cls: int) -> dict[str, Any]:
    """A per-case result as plain picklable data (numpy histogram state) for the gather to rank 0."""
    return {"row": result.row, "warnings": result.warnings, "num_classes": n_cls, "files": files.to_json(),
            "histogram": None if result.histogram is None else result.histogram.state_dict()}


def _unpack(d: Mapping[str, Any]) -> tuple[CaseResult, CaseFiles, int]:
    hist = None
    if d["histogram"] is not None:
        st = d["histogram"]
        hist = ConfidenceHistogram(int(st["num_classes"]), int(st["n_fine_bins"]), per_case=True).load_state_dict(st)
    return CaseResult(d["row"], hist, d["warnings"]), CaseFiles.from_json(d["files"]), int(d["num_classes"])


def run_evaluate(
    labels: str | os.PathLike,
    predictions: str | os.PathLike,
    output: str | os.PathLike,
    config: EvaluationConfig,
    *,
    layout: str = "monai-unc",
    uncertainty: str | os.PathLike | None = None,
    images: str | os.PathLike | None = None,
    measures: Iterable[str] | None = None,
    seg_suffix: str | None = None,
    probs_suffix: str | None = None,
    allow_missing: bool = False,
    progress: bool = False,
    resume: bool = True,
    dist: Any = None,
    on_failure: Any = None,
) -> tuple[CohortState | None, dict[str, Any], dict[str, Path]]:
    """Match, evaluate, summarise and write (the whole of ``monai-unc evaluate``), on one process or on every rank
    of a process group (``torchrun``; see docs/distributed.md).

    Every rank matches the cases (they must agree), evaluates its shard (:func:`monai_unc.distributed.shard`:
    sorted case ids, round-robin) and, with ``resume``, saves each case's row and histogram under
    ``<output>/state/cases/`` (a rerun reuses cases whose inputs and per-case options are unchanged, see
    :func:`case_fingerprint`). The per-case results are gathered to rank 0, which adds them in case-id order
    (:func:`assemble_state`, so every cohort number equals the single-process one bit for bit), summarises and writes
    ``metrics.csv`` / ``summary.json`` / ``state/``; the summary and paths are broadcast. Returns ``(state, summary,
    paths)``; ``state`` is None on ranks other than 0.

    A case that raises does not stop the others: ``on_failure(CaseFailure)`` is called on its rank (default: one
    stderr line with the case id), rank 0 writes ``failures.json`` instead of the cohort files, and every rank raises
    :class:`~monai_unc.distributed.CasesFailed` (a ``CaseError``) at the end; the finished cases stay saved, so the
    same call resumes after the bad cases are fixed. Errors before the per-case loop (bad folders, options) raise
    on every rank.

    Args:
        resume: keep and reuse per-case states (``False``: evaluate every case, save nothing per case).
        dist: a :class:`~monai_unc.distributed.DistContext` (default :func:`~monai_unc.distributed.get_dist_context`,
            which joins the initialised process group or creates one from torchrun's environment; it stays up).
    """
    from ..distributed import get_dist_context

    ctx = dist if dist is not None else get_dist_context()
    return _run_evaluate(ctx, Path(output), config, resume, progress, on_failure, dict(
        labels=labels, predictions=predictions, layout=layout, uncertainty=uncertainty, images=images,
        measures=list(measures) if measures else None, seg_suffix=seg_suffix, probs_suffix=probs_suffix,
        allow_missing=allow_missing,
    ))  # fmt: skip


def _run_evaluate(
    ctx: Any, output: Path, config: EvaluationConfig, resume: bool, progress: bool, on_failure: Any,
    match_kwargs: dict[str, Any],
) -> tuple[CohortState | None, dict[str, Any], dict[str, Path]]:
    from ..distributed import (
        CaseFailure,
        CasesFailed,
        broadcast_object,
        check_each_case_once,
        check_same_cases,
        error_line,
        failure_reporter,
        gather_objects,
        shard,
        sync_errors,
        write_failures,
    )
    from ..io import clean_partial_files

    cache = output / _STATE_DIR / _CASES_DIR if resume else None
    cases: list[CaseFiles] = []
    err: BaseException | None = None
    try:
        config.validate()
        cases = match_cases(**match_kwargs)
        if config.shifts is not None:
            unknown = sorted(set(c.case_id for c in cases) - set(config.shifts))
            if unknown:
                raise CaseError(f"the shift table has no row for case(s) {unknown[:5]}")
        config.check_calibration_cases([c.case_id for c in cases])  # before any work, not after the evaluation
        if ctx.is_main and cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
            clean_partial_files(cache)
    except Exception as e:
        err = e
    sync_errors(err, ctx)
    ids = [c.case_id for c in cases]
    check_same_cases(ids, ctx)
    failed = failure_reporter(ctx, "monai-unc evaluate", on_failure)

    mine = shard(cases, ctx.rank, ctx.world_size, key=lambda c: c.case_id)
    local_failures: list[tuple[str, BaseException]] = []
    payload: list[dict[str, Any]] = []
    err = None
    try:
        desc = f"evaluate ({ctx.describe()})" if ctx.distributed else "evaluate"
        results = evaluate_shard(mine, config, cache=cache, failures=local_failures, on_failure=failed,
                                 progress=progress and ctx.is_main, desc=desc)
        payload = [_pack(*r) for r in results] if ctx.distributed else []
    except Exception as e:  # not a per-case error (those are collected)
        err = e
    sync_errors(err, ctx)
    mine_failed = [CaseFailure(c, ctx.rank, error_line(e)) for c, e in local_failures]
    gathered = gather_objects((payload, mine_failed), ctx)
    outcome: Any = None
    state: CohortState | None = None
    err = None
    if ctx.is_main:
        try:
            assert gathered is not None
            every = results if not ctx.distributed else [_unpack(d) for part, _ in gathered for d in part]
            failures = [f for _, fs in gathered for f in fs]
            check_each_case_once([str(r[0].row["case"]) for r in every] + [f.case for f in failures], ids)
            late: list[tuple[str, BaseException]] = []  # a number of classes other than the cohort's
            state = assemble_state(every, config.n_fine_bins, late)
            for c, e in late:
                failed(c, e)
                failures.append(CaseFailure(c, 0, error_line(e)))
            write_failures(output / "failures.json", failures, "monai-unc evaluate")
            if failures:
                remove_cohort_files(output)  # an earlier run's numbers must not pass for this cohort's
                outcome = ("failed", failures)
            else:
                assert state is not None
                summary = summarize(state, config)
                paths = write_evaluation(state, summary, output, config)
                outcome = ("ok", summary, paths)
        except Exception as e:
            err = e
    sync_errors(err, ctx)
    outcome = broadcast_object(outcome, ctx)
    if outcome[0] == "failed":
        raise CasesFailed(outcome[1])
    return state, outcome[1], outcome[2]
