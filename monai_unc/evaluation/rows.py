"""What the per-case evaluations share: the result of one case (:class:`CaseResult`), the Dice of label maps
(:func:`class_dice`), the maps to score (:func:`derived_maps`) and the choice of the primary measure
(:func:`primary_measure`). Used by :mod:`.case` (classes) and :mod:`.region_case` (regions)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..io import LoadedCase
from ..measures import binary_entropy, entropy, one_minus_max_prob
from ..metrics.calibration import ConfidenceHistogram
from ..metrics.overlap import dice

__all__ = [
    "CaseResult",
    "class_dice",
    "derived_maps",
    "primary_measure",
    "region_histograms_state",
    "region_histograms_from_state",
    "load_region_histograms",
]


@dataclass
class CaseResult:
    """What :func:`~monai_unc.evaluation.evaluate_case` returns: the metric row, the case's confidence histogram
    (or None without probabilities) and the warnings raised while computing it.

    Region evaluations (``EvaluationConfig.regions``) fill ``region_histograms`` instead of ``histogram`` (one
    binary histogram per region, in the spec's order) and ``curves`` (the QU-BraTS curves of the case:
    ``{"thresholds": [...], "brain_mask": str, "regions": {region: {"dice": [...], "ftp": [...], "ftn": [...]}}}``).
    """

    row: dict[str, Any]
    histogram: ConfidenceHistogram | None
    warnings: list[str] = field(default_factory=list)
    region_histograms: dict[str, ConfidenceHistogram] | None = None
    curves: dict[str, Any] | None = None


def class_dice(seg: np.ndarray, label: np.ndarray, num_classes: int) -> np.ndarray:
    """Dice of the foreground classes ``1 .. C-1`` of one case, ``(C - 1,)`` float32.

    :func:`monai_unc.metrics.overlap.dice` with ``empty_score=1`` (a class absent from both maps scores 1,
    absent from one of them 0), which equals MONAI's ``compute_dice(..., include_background=False,
    ignore_empty=False)``. Rounded to float32 as MONAI's value is, so that ``metrics.csv`` keeps its numbers.
    A binary region is the case ``num_classes=2`` with the region masks as label maps.
    """
    d = dice(seg[None], label[None], num_classes=num_classes, include_background=False, empty_score=1.0)
    return d[0].astype(np.float32)


def derived_maps(case: LoadedCase) -> dict[str, np.ndarray]:
    """Maps to score: the given ones, or entropy and ``one_minus_max_prob`` of the probabilities when none are given.

    For a multi-label case (``case.multilabel``) the derived maps are per region, ``(R, *spatial)``: the binary
    entropy ``H_b(p_r)`` (:func:`monai_unc.measures.binary_entropy`) and ``1 - max(p_r, 1 - p_r)``."""
    if case.maps or case.probs is None:
        return case.maps
    p = torch.from_numpy(case.probs)[None]
    if case.multilabel:
        return {
            "predictive_entropy": binary_entropy(p, validate=False)[0].numpy().astype(np.float32),
            "one_minus_max_prob": one_minus_max_prob(p, validate=False, multilabel=True)[0].numpy().astype(np.float32),
        }
    return {
        "predictive_entropy": entropy(p)[0, 0].numpy().astype(np.float32),
        "one_minus_max_prob": one_minus_max_prob(p)[0, 0].numpy().astype(np.float32),
    }


def primary_measure(maps: Mapping[str, np.ndarray], wanted: str | None) -> str | None:
    """The measure of the spatial, discrimination and QU-BraTS metrics: ``wanted`` (which must have a map), else
    ``predictive_entropy`` when present, else the first map (None without maps)."""
    if wanted is not None:
        if wanted not in maps:
            raise ValueError(f"measure {wanted!r} has no map (available: {sorted(maps) or 'none'})")
        return wanted
    if "predictive_entropy" in maps:
        return "predictive_entropy"
    return next(iter(maps), None)


def region_histograms_state(hists: Mapping[str, ConfidenceHistogram]) -> dict[str, Any]:
    """The per-region histograms as one flat dict of numpy arrays (for one ``.npz`` file): region ``i``'s
    :meth:`~monai_unc.metrics.calibration.ConfidenceHistogram.state_dict` under keys ``r<i>__<key>``, the region
    names under ``regions``."""
    out: dict[str, Any] = {"regions": np.array(list(hists), dtype=np.str_)}
    for i, h in enumerate(hists.values()):
        out.update({f"r{i}__{k}": v for k, v in h.state_dict().items()})
    return out


def region_histograms_from_state(state: Mapping[str, Any]) -> dict[str, ConfidenceHistogram]:
    """The inverse of :func:`region_histograms_state`."""
    names = [str(n) for n in np.asarray(state["regions"]).tolist()]
    out = {}
    for i, name in enumerate(names):
        part = {k[len(f"r{i}__"):]: v for k, v in state.items() if k.startswith(f"r{i}__")}
        out[name] = ConfidenceHistogram.from_state_dict(part)
    return out


def load_region_histograms(path: str | os.PathLike) -> dict[str, ConfidenceHistogram]:
    """The per-region histograms of an ``.npz`` file holding :func:`region_histograms_state`."""
    with np.load(path, allow_pickle=False) as f:
        return region_histograms_from_state({k: f[k] for k in f.files})
