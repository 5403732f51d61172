"""One case of a region-based (multi-label sigmoid) prediction: every metric per region, each region a binary task
(:func:`evaluate_region_case`, used when ``EvaluationConfig.regions`` is set, e.g. ``monai-unc evaluate --regions
brats``).

Inputs (:func:`monai_unc.io.load_case` with ``multilabel=True``): the reference is a label map (e.g. BraTS labels 0,
1, 2, 4) whose region masks come from the spec (:func:`monai_unc.regions.label_to_regions`); the prediction is either
``R`` region masks (``<case>_seg`` of ``monai-unc infer --activation sigmoid``, ``R`` = number of regions of the spec,
any other count is an error) or a label map (nnU-Net converts its regions back to labels with
``regions_class_order``), converted with the same spec; probabilities ``(R, *spatial)`` are per-region foreground
probabilities and every uncertainty map has one channel per region. Label values in no region count as background
(with a warning: e.g. BraTS 2023 labels read with the ``brats`` spec).

Columns of ``metrics.csv`` (``<R>`` is the region's column suffix, :func:`~monai_unc.evaluation.config.region_suffix`,
e.g. ``WT``):

- ``dice_<R>``: Dice of the region masks (:func:`~monai_unc.evaluation.rows.class_dice` with two classes: 1 when the
  region is empty in both); ``dice``: the mean over the regions (what failure detection, referral, triage and risk
  control use);
- calibration per region, from one binary :class:`~monai_unc.metrics.calibration.ConfidenceHistogram` per region
  (probabilities ``(1 - p_r, p_r)`` against the region mask): ``ece_<R>`` (top label ``max(p_r, 1 - p_r)``),
  ``classwise_ece_<R>``, ``all_label_ece_<R>``, ``ace_<R>``, ``mce_<R>``, ``uce_<R>`` (binary entropy / log 2),
  ``nll_<R>`` (binary cross-entropy), ``brier_<R>`` (summed over the two labels: twice the binary Brier score); the
  cohort values pool each region's histograms over the cases (``summary.json``, ``regions.per_region.<name>``);
- for the primary measure: ``error_rate_<R>``, ``buc_<R>``, ``ba_ece_<R>``, ``space_<R>`` (the map of region ``r``
  against the error ``pred_r != target_r``; entropies divided by ``log 2``), ``error_auroc_<R>``, ``error_auprc_<R>``;
- case scores (:func:`~monai_unc.scores.case_scores`) of every measure ``m`` per region, ``<m>_<score>_<R>``
  (``fg_mean`` inside the predicted region), and the **combined case score** ``<m>_<score>``: the mean over the
  regions of ``<m>_<score>_<R>``, over the regions where it is defined (``fg_mean`` is undefined for a region absent
  from the prediction; NaN when it is undefined for every region). The combined columns carry the names of the
  class-based evaluation, so the triage score (default ``<measure>_fg_mean``), the ranking and risk control work
  unchanged;
- QU-BraTS of the primary measure (Mehta et al., MELBA 2022; :func:`monai_unc.metrics.qu_brats_regions`): the map is
  put on the challenge's ``[0, 100]`` scale by :func:`~monai_unc.metrics.to_qu_brats_range` with its largest value
  :func:`~monai_unc.metrics.measure_max` (``log 2`` for the binary entropies, 0.5 for ``one_minus_max_prob``, 0.25
  for ``variance``); the brain mask (voxels counted by FTP and FTN) is ``image > 0`` on any channel of the case's
  image when ``--images`` is given (the ``_0000`` file for nnU-Net channel files), else every voxel.
  Columns ``qu_brats_score_<R>``, ``qu_brats_dice_auc_<R>``,
  ``qu_brats_ftp_auc_<R>``, ``qu_brats_ftn_auc_<R>`` and their means over the regions ``qu_brats_score`` (the
  challenge's ranking score), ``qu_brats_dice_auc``, ``qu_brats_ftp_auc``, ``qu_brats_ftn_auc``. The case's curves
  (filtered Dice, FTP, FTN at each threshold) are kept in the evaluation state for the report.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..io import CaseError, CaseFiles, LoadedCase, load_case
from ..metrics.calibration import ConfidenceHistogram, calibration_metrics
from ..metrics.discrimination import error_auprc, error_auroc
from ..metrics.qu_brats import measure_max, qu_brats_regions, to_qu_brats_range
from ..metrics.spatial import boundary_aware_ece, boundary_uncertainty_concentration, spatial_calibration_error
from ..regions import label_to_regions, parse_regions
from ..scores import CASE_SCORES, PATCH_SIZE, case_scores
from .config import CALIBRATION_COLUMNS, EvaluationConfig, region_suffix, unit_scale
from .rows import CaseResult, class_dice, derived_maps, primary_measure

__all__ = ["QU_BRATS_COLUMNS", "evaluate_region_case", "combined_score", "predicted_regions", "region_score_columns"]

#: the QU-BraTS columns of a region evaluation (``qu_brats_<c>_<R>`` per region, ``qu_brats_<c>`` their mean)
QU_BRATS_COLUMNS = ("score", "dice_auc", "ftp_auc", "ftn_auc")


def combined_score(values: list[float]) -> float:
    """The combined case score of a region evaluation: the mean of the per-region scores that are defined (finite);
    NaN when none is."""
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else float("nan")


def _region_stack(case: LoadedCase, arr: np.ndarray, what: str, n: int, names: list[str]) -> None:
    if arr.shape[0] != n:
        raise CaseError(f"case {case.case_id!r}: {what} has {arr.shape[0]} region channel(s) but the region spec has "
                        f"{n} ({', '.join(names)})")


def predicted_regions(case: LoadedCase, spec: Mapping[str, Sequence[int]]) -> np.ndarray:
    """The predicted region masks ``(R, *spatial)`` bool of a case read with ``load_case(..., multilabel=True)``:
    its ``R`` region masks (``<case>_seg`` of ``monai-unc infer --activation sigmoid``; another count than the spec's
    is a ``CaseError``) or, for a label-map segmentation (nnU-Net), the spec's regions of the labels
    (:func:`monai_unc.regions.label_to_regions`)."""
    return _as_regions(case, case.seg, spec, "the segmentation")


def _as_regions(case: LoadedCase, arr: np.ndarray, spec: Mapping[str, Sequence[int]], what: str) -> np.ndarray:
    """``(R, *spatial)`` bool region masks of a label map ``(*spatial)`` (the spec's regions of its labels) or of
    ``R`` region masks (checked against the spec's region count)."""
    if arr.ndim == len(case.spacing):
        return np.asarray(label_to_regions(arr, spec))
    names = list(spec)
    _region_stack(case, arr, what, len(names), names)
    return arr.astype(bool)


def region_score_columns(
    maps: Mapping[str, np.ndarray], pred: np.ndarray, names: Sequence[str], patch_size: int = PATCH_SIZE
) -> dict[str, float]:
    """The case-score columns of a region-based case, the one definition used by ``evaluate --regions`` and by
    ``monai-unc triage``: for every map ``m`` ``(R, *spatial)`` (one channel per region, in the order of ``names``)
    and every score ``k`` of :data:`~monai_unc.scores.CASE_SCORES`, the per-region score ``<m>_<k>_<R>``
    (:func:`~monai_unc.scores.case_scores` of ``m[r]`` with the predicted region ``pred[r]`` ``(R, *spatial)`` as the
    foreground; ``<R>`` is :func:`~monai_unc.evaluation.config.region_suffix` of the name) and the combined case
    score ``<m>_<k>`` = :func:`combined_score` of the per-region scores (their mean over the regions where defined).
    Column order: every combined column of a map, then its per-region columns. ``ValueError`` for a map or ``pred``
    with another number of channels than ``names``."""
    n = len(names)
    if pred.shape[0] != n:
        raise ValueError(f"pred has {pred.shape[0]} region channel(s) for {n} region name(s)")
    sfx = [region_suffix(name) for name in names]
    row: dict[str, float] = {}
    for m, u in maps.items():
        if u.shape[0] != n:
            raise ValueError(f"the {m} map has {u.shape[0]} region channel(s) for {n} region name(s)")
        scores = [case_scores(u[r], pred[r], patch_size) for r in range(n)]
        for k in CASE_SCORES:
            row[f"{m}_{k}"] = combined_score([sc[k] for sc in scores])
        for s, sc in zip(sfx, scores):
            row.update({f"{m}_{k}_{s}": sc[k] for k in CASE_SCORES})
    return row


def evaluate_region_case(files: CaseFiles | LoadedCase, config: EvaluationConfig) -> CaseResult:
    """Metrics of one case of a region-based prediction, per region (module docstring). ``files`` may be already
    loaded (with ``load_case(..., multilabel=True)``, and ``load_image=True`` for the QU-BraTS brain mask)."""
    config.validate()
    assert config.regions is not None
    spec = parse_regions(config.regions)
    names = list(spec)
    sfx = [region_suffix(n) for n in names]
    n_reg = len(names)
    case = files if isinstance(files, LoadedCase) else load_case(files, n_reg, load_image=True, multilabel=True)
    if not case.multilabel:
        raise ValueError("a region evaluation needs a case read with load_case(..., multilabel=True)")
    row: dict[str, Any] = {"case": case.case_id}
    if config.shifts is not None:
        row["shift"] = config.shifts.get(case.case_id, "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case.label.ndim == len(case.spacing):  # a label map: regions from the spec
            used = {v for labels in spec.values() for v in labels}
            stray = sorted(set(np.unique(case.label).tolist()) - used - {0})
            if stray:
                warnings.warn(f"label value(s) {stray[:6]} are in no region of {spec} and count as background "
                              "(another region spec, e.g. brats2023?)", UserWarning, stacklevel=2)
        target = _as_regions(case, case.label, spec, "the label")  # (R, *spatial) bool
        pred = predicted_regions(case, spec)
        if case.probs is not None:
            _region_stack(case, case.probs, "the probabilities", n_reg, names)
        maps = derived_maps(case)
        for m, u in maps.items():
            _region_stack(case, u, f"the {m} map", n_reg, names)

        per_region = [float(class_dice(pred[r].astype(np.uint8), target[r].astype(np.uint8), 2)[0])
                      for r in range(n_reg)]
        row["dice"] = float(np.mean(per_region))
        row.update({f"dice_{s}": d for s, d in zip(sfx, per_region)})

        hists: dict[str, ConfidenceHistogram] | None = None
        if case.probs is not None:
            hists = {}
            for r, (name, s) in enumerate(zip(names, sfx)):
                p = case.probs[r]
                h = ConfidenceHistogram(2, n_fine_bins=config.n_fine_bins, per_case=True)
                h.update(np.stack([1.0 - p, p])[None], target[r][None].astype(np.int64), case_ids=[case.case_id],
                         validate=False)
                vals = calibration_metrics(h, CALIBRATION_COLUMNS, n_bins=config.n_bins,
                                           min_bin_count=config.min_bin_count)
                row.update({f"{k}_{s}": float(vals[k]) for k in CALIBRATION_COLUMNS})
                hists[name] = h

        primary = primary_measure(maps, config.measure)
        errors = pred != target
        row.update({f"error_rate_{s}": float(errors[r].mean()) for r, s in enumerate(sfx)})
        curves = None
        if primary is not None:
            row["measure"] = primary
            u = maps[primary]
            for r, s in enumerate(sfx):
                pr, tr = pred[r].astype(np.uint8), target[r].astype(np.uint8)
                if config.spatial:
                    un = unit_scale(u[r], primary, 2)
                    row[f"buc_{s}"] = float(boundary_uncertainty_concentration(u[r], pr, tr, case.spacing)[0])
                    row[f"ba_ece_{s}"] = float(boundary_aware_ece(un, pr, tr, case.spacing)[0])
                    row[f"space_{s}"] = float(spatial_calibration_error(un, pr, tr, case.spacing)[0])
                row[f"error_auroc_{s}"] = float(error_auroc(u[r], errors[r].astype(np.uint8), per_case=False))
                row[f"error_auprc_{s}"] = float(error_auprc(u[r], errors[r].astype(np.uint8), per_case=False))
            brain = None if case.image is None else (case.image > 0).any(axis=0)
            top = measure_max(primary, multilabel=True)
            u100 = {n: to_qu_brats_range(u[r], top) for r, n in enumerate(names)}  # float64, one region at a time
            qb = qu_brats_regions(u100, {n: pred[r] for r, n in enumerate(names)},
                                  {n: target[r] for r, n in enumerate(names)}, regions=spec, brain_mask=brain)
            for c in QU_BRATS_COLUMNS:
                row.update({f"qu_brats_{c}_{s}": float(getattr(qb.regions[n], c)) for n, s in zip(names, sfx)})
                row[f"qu_brats_{c}"] = float(getattr(qb, c))
            first = qb.regions[names[0]]
            curves = {
                "thresholds": first.thresholds.tolist(),
                "brain_mask": "image > 0" if brain is not None else "all voxels",
                "regions": {n: {"dice": qb.regions[n].dice.tolist(), "ftp": qb.regions[n].ftp.tolist(),
                                "ftn": qb.regions[n].ftn.tolist()} for n in names},
            }
        row.update(region_score_columns(maps, pred, names, config.patch_size))
        row["voxels"] = int(target[0].size)  # per region (the label may hold R masks)
        row["spacing"] = "x".join(f"{s:.4g}" for s in case.spacing)
    messages = sorted({f"{case.case_id}: {w.message}" for w in caught if issubclass(w.category, UserWarning)})
    return CaseResult(row, None, messages, region_histograms=hists, curves=curves)
