"""One case's metric row: Dice, the calibration family, spatial and discrimination metrics of the primary measure, and
the case scores of every measure (:func:`evaluate_case`; the scores are defined in :mod:`monai_unc.scores`)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..io import CaseFiles, LoadedCase, load_case
from ..metrics.calibration import ConfidenceHistogram, calibration_metrics
from ..metrics.discrimination import error_auprc, error_auroc
from ..metrics.spatial import boundary_aware_ece, boundary_uncertainty_concentration, spatial_calibration_error
from ..scores import case_score_columns
from .config import CALIBRATION_COLUMNS, EvaluationConfig, slug, unit_scale
from .region_case import evaluate_region_case
from .rows import CaseResult, class_dice, derived_maps, primary_measure

__all__ = ["CaseResult", "class_dice", "derived_maps", "primary_measure", "evaluate_case"]


def evaluate_case(files: CaseFiles | LoadedCase, config: EvaluationConfig) -> CaseResult:
    """Metrics of one case (module docstring). ``files`` may be already loaded. With ``config.regions`` the case is
    a region-based prediction, evaluated per region by :func:`~monai_unc.evaluation.region_case.evaluate_region_case`
    (a loaded case must then be read with ``load_case(..., multilabel=True)``)."""
    if config.regions is not None:
        return evaluate_region_case(files, config)
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
        per_class = class_dice(case.seg, case.label, n_cls)
        row["dice"] = float(np.mean(per_class))
        for c in range(1, n_cls):
            row[f"dice_{slug(names[c])}"] = float(per_class[c - 1])
        hist = None
        if case.probs is not None:
            hist = ConfidenceHistogram(n_cls, n_fine_bins=config.n_fine_bins, per_case=True)
            hist.update(case.probs[None], case.label[None], case_ids=[case.case_id], validate=False)
            vals = calibration_metrics(hist, CALIBRATION_COLUMNS, n_bins=config.n_bins,
                                       min_bin_count=config.min_bin_count)
            row.update({k: float(vals[k]) for k in CALIBRATION_COLUMNS})
        maps = derived_maps(case)
        primary = primary_measure(maps, config.measure)
        error = (case.seg != case.label).astype(np.uint8)
        row["error_rate"] = float(error.mean())
        if primary is not None:
            row["measure"] = primary
            u = maps[primary]
            if config.spatial:
                un = unit_scale(u, primary, n_cls)
                row["buc"] = float(boundary_uncertainty_concentration(u, case.seg, case.label, case.spacing)[0])
                row["ba_ece"] = float(boundary_aware_ece(un, case.seg, case.label, case.spacing)[0])
                row["space"] = float(spatial_calibration_error(un, case.seg, case.label, case.spacing)[0])
            row["error_auroc"] = float(error_auroc(u, error, per_case=False))
            row["error_auprc"] = float(error_auprc(u, error, per_case=False))
        row.update(case_score_columns(maps, case.seg, config.patch_size))
        row["voxels"] = int(case.label.size)
        row["spacing"] = "x".join(f"{s:.4g}" for s in case.spacing)
    messages = sorted({f"{case.case_id}: {w.message}" for w in caught if issubclass(w.category, UserWarning)})
    return CaseResult(row, hist, messages)
