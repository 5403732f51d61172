"""The computations of the lesion-wise product (``monai-unc evaluate --lesions``, docs/lesions.md).

Per case and per task (each foreground class of the class task, or each region), the lesion-wise metrics of
:mod:`monai_unc.metrics.lesions` (BraTS 2023 lesion-wise Dice and HD95 with their counts, the Shifts lesion F1, nDSC
and, with an uncertainty map, its retention area) and one record per predicted lesion: its volume, centre, whether it
is a false positive (it matches no ground-truth lesion under the BraTS rule), the Dice of the lesion it matched and
its uncertainty scores (mean, max, boundary and core of every map). The state of a case is a
:class:`LesionState` (arrays that concatenate across cases); the cohort summary is :func:`summarize_lesions`: the
means of the case scores, pooled counts and F1, and lesion-level failure detection (AUROC of each per-lesion score
for "this predicted lesion is a false positive" and for "its Dice is below ``failure_dice``", AURC of 1 - Dice), with
the most uncertain lesions listed first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..metrics.discrimination import error_auroc
from ..metrics.lesions import (
    brats_lesion_metrics,
    lesion_detection,
    lesion_uncertainty,
    ndsc_retention_area,
    normalized_dice,
)
from ..metrics.selective import aurc
from ..state import register_state_type
from .config import region_suffix, slug

__all__ = ["LESION_FIELDS", "LesionState", "lesion_case_state", "lesion_columns", "summarize_lesions",
           "task_masks"]

#: the per-case values of a task (``case.<task>.<field>``), in column order
CASE_FIELDS = ("lesion_dice", "lesion_hd95", "lesion_tp", "lesion_fp", "lesion_fn", "lesion_f1", "ndsc", "ndsc_raac")
#: the fixed per-lesion fields (``lesion.<task>.<field>``); uncertainty scores are added per map
LESION_FIELDS = ("case_index", "lesion", "volume_mm3", "center_0", "center_1", "center_2", "false_positive", "dice")


@register_state_type("lesions")
class LesionState:
    """The lesion-wise state of one or more cases: named 1-D arrays that concatenate when states merge.

    ``case.<task>.<field>`` holds one value per case, ``lesion.<task>.<field>`` one value per predicted lesion,
    ``cases`` the case ids (as code points, ``case_ids`` decodes them).

    Args:
        arrays: ``{key: 1-D array}``.

    Example:
        >>> import numpy as np
        >>> a = LesionState({"case.WT.ndsc": np.array([0.5])})
        >>> a.merge(LesionState({"case.WT.ndsc": np.array([0.7])})).arrays["case.WT.ndsc"].tolist()
        [0.5, 0.7]
    """

    def __init__(self, arrays: Mapping[str, Any]) -> None:
        self.arrays = {str(k): np.asarray(v).ravel() for k, v in arrays.items()}

    def merge(self, other: LesionState) -> LesionState:
        """Append ``other``'s cases and lesions (in place); both must hold the same keys.

        Args:
            other: another state of the same tasks and maps.

        Returns:
            ``self``.
        """
        if set(other.arrays) != set(self.arrays):
            diff = sorted(set(other.arrays) ^ set(self.arrays))
            raise ValueError(f"lesion states of different tasks or maps cannot be merged: {diff[:4]}")
        n = int(self.arrays.get("n_cases", np.zeros(1))[0])
        for k, v in other.arrays.items():
            if k == "n_cases":
                continue
            if k.startswith("lesion.") and k.endswith(".case_index"):
                v = v + n
            self.arrays[k] = np.concatenate([self.arrays[k], v])
        if "n_cases" in self.arrays:
            self.arrays["n_cases"] = self.arrays["n_cases"] + other.arrays["n_cases"]
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        """The arrays.

        Returns:
            ``{key: array}``.
        """
        return dict(self.arrays)

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> LesionState:
        """A state from :meth:`state_dict`'s arrays.

        Args:
            state: the arrays.

        Returns:
            The state.
        """
        return cls(state)

    def tasks(self) -> list[str]:
        """The tasks of the state, in the order their first key was stored.

        Returns:
            Task names.
        """
        seen: dict[str, None] = {}
        for k in self.arrays:
            if k.startswith("case."):
                seen.setdefault(k.split(".")[1], None)
        return list(seen)


def task_masks(task: Any, class_names: Sequence[str] | None) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """The binary (name, pred, target) pairs of a task: its foreground classes, or the region itself.

    Args:
        task: a :class:`~monai_unc.activation.TaskView`.
        class_names: the evaluation's class names (default ``0, 1, ...``).

    Returns:
        ``[(name, pred mask, target mask), ...]``; names are column suffixes (``WT``, ``1``, ``tumour``).
    """
    if task.name is not None:
        return [(region_suffix(task.name), np.asarray(task.pred) > 0, np.asarray(task.target) > 0)]
    names = list(class_names or [str(c) for c in range(task.num_classes)])
    return [(slug(names[c]), np.asarray(task.pred) == c, np.asarray(task.target) == c)
            for c in range(1, task.num_classes)]


def lesion_case_state(case: Any, tasks: Sequence[Any], options: Mapping[str, Any],
                      class_names: Sequence[str] | None, measure: str | None) -> LesionState:
    """The lesion-wise state of one case.

    Args:
        case: the loaded case (its ``spacing``).
        tasks: its tasks.
        options: the product's options: ``dilation``, ``min_volume``, ``iou``, ``hd_penalty``, ``r``.
        class_names: the evaluation's class names.
        measure: the map for nDSC R-AAC (None: no R-AAC); every map of a task gives per-lesion scores.

    Returns:
        A :class:`LesionState` of one case.
    """
    arrays: dict[str, Any] = {"n_cases": np.array([1], np.int64)}
    for task in tasks:
        spacing = tuple(task.spacing) if task.spacing is not None else tuple(case.spacing)
        if len(spacing) != 3:
            raise ValueError(f"lesion-wise metrics need 3-D volumes, got {len(spacing)}-D spacing {spacing}")
        for name, pred, target in task_masks(task, class_names):
            r = brats_lesion_metrics(pred, target, spacing, int(options["dilation"]), float(options["min_volume"]),
                                     float(options["hd_penalty"]))
            det = lesion_detection(pred, target, float(options["iou"]))
            u = task.maps.get(measure) if measure else None
            raac = float("nan") if u is None else ndsc_retention_area(pred, target, u, r=float(options["r"]))
            ndsc = normalized_dice(pred, target, float(options["r"]))
            values = {"lesion_dice": r.dice, "lesion_hd95": r.hd95, "lesion_tp": r.n_tp, "lesion_fp": r.n_fp,
                      "lesion_fn": r.n_fn, "lesion_f1": det.f1, "ndsc": ndsc, "ndsc_raac": raac}
            for f in CASE_FIELDS:
                arrays[f"case.{name}.{f}"] = np.array([values[f]], float)
            maps = {m: np.asarray(v, float) for m, v in sorted(task.maps.items())}
            per = lesion_uncertainty(pred, maps, connectivity=None, spacing=spacing)
            n = per["lesion"].size
            fp = np.zeros(n, bool)
            fp[np.asarray(r.fp_components, np.int64) - 1] = True
            # the Dice of a predicted component: the best Dice of a ground-truth lesion it matched (0 if none)
            dice = np.zeros(n)
            for les in r.lesions:
                for j in les.matched:
                    dice[j - 1] = max(dice[j - 1], les.dice)
            center = per["center"]
            fields = {"case_index": np.zeros(n), "lesion": per["lesion"], "volume_mm3": per["volume_mm3"],
                      "center_0": center[:, 0], "center_1": center[:, 1], "center_2": center[:, 2],
                      "false_positive": fp.astype(float), "dice": dice}
            for f in LESION_FIELDS:
                arrays[f"lesion.{name}.{f}"] = np.asarray(fields[f], float)
            for k, v in per.items():
                if k not in ("lesion", "volume_mm3", "center"):
                    arrays[f"lesion.{name}.score.{k}"] = np.asarray(v, float)
    return LesionState(arrays)


def lesion_columns(state: LesionState) -> dict[str, float]:
    """The ``metrics.csv`` columns of a one-case state: ``<field>_<task>``.

    Args:
        state: the state of one case.

    Returns:
        ``{column: value}``.
    """
    out = {}
    for k, v in state.arrays.items():
        if k.startswith("case."):
            _, task, f = k.split(".", 2)
            out[f"{f}_{task}"] = float(v[0])
    return out


def _auroc(score: np.ndarray, event: np.ndarray) -> float | None:
    ok = np.isfinite(score)
    s, e = score[ok], event[ok].astype(np.int64)
    if s.size == 0 or e.min() == e.max():
        return None
    return float(error_auroc(s, e, per_case=False))


def summarize_lesions(state: LesionState | None, case_ids: Sequence[str], options: Mapping[str, Any],
                      top: int = 20) -> dict[str, Any]:
    """The ``lesions`` block of ``summary.json``.

    Per task: the mean over cases of each case value (NaN-aware), the pooled TP / FP / FN of the BraTS matching and
    the pooled lesion F1 (Shifts counts summed over cases), the number of predicted lesions, and lesion-level failure
    detection: per per-lesion score the AUROC for "false positive" and for "Dice below ``failure_dice``" and the AURC
    of 1 - Dice (lower is better); ``best_fp_score`` names the score that finds false positives best. ``lesions``
    lists the ``top`` most uncertain predicted lesions (by the first ``<measure>_mean`` score) with their case,
    centre (voxels), volume, score and whether they are false positives.

    Args:
        state: the merged state of the cases (in case-id order), or None without cases.
        case_ids: the ids of those cases, in the same order.
        options: the product's options (``failure_dice``, ``rank_by``).
        top: how many lesions to list.

    Returns:
        JSON data (NaN stays NaN; the summary writer turns it into ``null``).
    """
    block: dict[str, Any] = {"options": dict(options), "n_cases": len(case_ids), "per_task": {}}
    if state is None:
        return block
    failure_dice = float(options["failure_dice"])
    listed: list[dict[str, Any]] = []
    for task in state.tasks():
        a = state.arrays
        means = {}
        for f in CASE_FIELDS:
            v = a[f"case.{task}.{f}"]
            means[f] = float(np.nanmean(v)) if np.isfinite(v).any() else None
        tp, fp, fn = (int(a[f"case.{task}.lesion_{k}"].sum()) for k in ("tp", "fp", "fn"))
        fp_mask = a[f"lesion.{task}.false_positive"] > 0.5
        dice = a[f"lesion.{task}.dice"]
        scores = sorted(k.split(".score.", 1)[1] for k in a if k.startswith(f"lesion.{task}.score."))
        detection = {}
        for s in scores:
            u = a[f"lesion.{task}.score.{s}"]
            ok = np.isfinite(u)
            detection[s] = {
                "auroc_false_positive": _auroc(u, fp_mask),
                "auroc_low_dice": _auroc(u, dice < failure_dice),
                "aurc_1_minus_dice": float(aurc(u[ok], 1.0 - dice[ok])) if ok.sum() > 1 else None,
            }
        fp_ranked = [(v["auroc_false_positive"], s) for s, v in detection.items()
                     if v["auroc_false_positive"] is not None]
        block["per_task"][task] = {
            "mean": means,
            "lesion_tp": tp, "lesion_fp": fp, "lesion_fn": fn,
            "n_predicted_lesions": int(fp_mask.size),
            "n_false_positive_lesions": int(fp_mask.sum()),
            "failure_detection": detection,
            "best_fp_score": max(fp_ranked)[1] if fp_ranked else None,
        }
        rank_by = options.get("rank_by")
        key = f"lesion.{task}.score.{rank_by}" if rank_by else None
        if key is None or key not in a:
            key = next((f"lesion.{task}.score.{s}" for s in scores if s.endswith("_mean")), None)
        if key is not None:
            u = a[key]
            case_index = a[f"lesion.{task}.case_index"].astype(np.int64)
            for i in np.argsort(-np.nan_to_num(u, nan=-np.inf), kind="stable")[:top]:
                listed.append({"case": str(case_ids[case_index[i]]), "task": task,
                               "lesion": int(a[f"lesion.{task}.lesion"][i]),
                               "center": [round(float(a[f"lesion.{task}.center_{d}"][i]), 1) for d in range(3)],
                               "volume_mm3": float(a[f"lesion.{task}.volume_mm3"][i]),
                               "score": key.split(".score.", 1)[1], "value": float(u[i]),
                               "false_positive": bool(fp_mask[i]), "dice": float(dice[i])})
    listed.sort(key=lambda d: -d["value"] if math.isfinite(d["value"]) else math.inf)
    block["lesions"] = listed[:top]
    return block
