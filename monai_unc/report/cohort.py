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
  (:func:`~monai_unc.metrics.casewise.ood_auroc`) when a shift label per case is given.

Cases whose score is undefined (e.g. ``fg_mean`` with an empty predicted foreground) are ranked as the most
uncertain: they are referred first. Sharding: :func:`evaluate_cases` takes any list of cases and returns a
:class:`CohortState`; states of disjoint shards :meth:`~CohortState.merge` into the state of the whole cohort.
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
from .nifti import atomic_write_text

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
    "summarize",
    "triage_order",
    "fill_undefined_scores",
    "read_shifts",
    "write_evaluation",
    "load_evaluation",
    "run_evaluate",
]

CALIBRATION_COLUMNS = ("ece", "classwise_ece", "all_label_ece", "ace", "mce", "uce", "nll", "brier")
SPATIAL_COLUMNS = ("buc", "ba_ece", "space", "error_auroc", "error_auprc")
#: shift labels that mark in-distribution cases (case-insensitive)
IID_SHIFTS = ("", "none", "iid", "id", "clean", "in-distribution")
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


def evaluate_cases(
    cases: Sequence[CaseFiles], config: EvaluationConfig, progress: bool = False, desc: str = "evaluate"
) -> CohortState:
    """Evaluate ``cases`` (any subset of a cohort) into a :class:`CohortState`."""
    from tqdm.auto import tqdm

    config.validate()
    state: CohortState | None = None
    bar = tqdm(cases, desc=desc, unit="case", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    for files in bar:
        bar.set_postfix_str(files.case_id)
        loaded = load_case(files, config.num_classes if state is None else state.num_classes)
        n_cls = loaded.probs.shape[0] if loaded.probs is not None else config.num_classes
        assert n_cls is not None
        if state is None:
            state = CohortState(int(n_cls), config.n_fine_bins)
        state.add(evaluate_case(loaded, config), files)
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


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy -> Python."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return _clean(x.tolist())
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


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
    msgs = sorted({str(w.message) for w in caught if issubclass(w.category, UserWarning)})
    summary["warnings"] = sorted(set(state.warnings)) + [f"cohort: {m}" for m in msgs]
    return _clean(summary)


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
        "summary": atomic_write_text(output / "summary.json", json.dumps(_clean(doc), indent=2) + "\n"),
        "state": output / _STATE_DIR,
    }
    return paths


def load_evaluation(folder: str | os.PathLike) -> tuple[CohortState, dict[str, Any]]:
    """The state and summary written by :func:`write_evaluation`."""
    folder = Path(folder)
    path = folder / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"no summary.json in {folder}: run monai-unc evaluate --output {folder} first")
    return CohortState.load(folder / _STATE_DIR), json.loads(path.read_text())


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
) -> tuple[CohortState, dict[str, Any], dict[str, Path]]:
    """Match, evaluate, summarise and write (the whole of ``monai-unc evaluate``)."""
    config.validate()
    cases = match_cases(
        labels, predictions, layout=layout, uncertainty=uncertainty, images=images,
        measures=list(measures) if measures else None, seg_suffix=seg_suffix, probs_suffix=probs_suffix,
        allow_missing=allow_missing,
    )  # fmt: skip
    if config.shifts is not None:
        unknown = sorted(set(c.case_id for c in cases) - set(config.shifts))
        if unknown:
            raise CaseError(f"the shift table has no row for case(s) {unknown[:5]}")
    state = evaluate_cases(cases, config, progress=progress)
    summary = summarize(state, config)
    paths = write_evaluation(state, summary, output, config)
    return state, summary, paths
