"""The computations of the lesion-wise product (``monai-unc evaluate --lesions``, docs/lesions.md).

Per case and per task (each foreground class of the class task, or each region), the lesion-wise metrics of
:mod:`monai_unc.metrics.lesions` (BraTS 2023 lesion-wise Dice and HD95 with their counts, the Shifts lesion F1, nDSC
and, with an uncertainty map, its retention area) and one record per predicted lesion: its volume, centre, whether it
is a false positive (it matches no ground-truth lesion under the BraTS rule), the Dice of the lesion it matched and
its uncertainty scores (mean, max, boundary and core of every map) and, with per-sample masks
(:func:`read_lesion_samples`), its existence probability and volume spread. The state of a case is a
:class:`LesionState` (arrays that concatenate across cases); the cohort summary is :func:`summarize_lesions`: the
means of the case scores (the lesion F1 among them), pooled BraTS counts, lesion-level failure detection (AUROC of
each per-lesion score for "this predicted lesion is a false positive" and for "its Dice is below ``failure_dice``",
AURC of 1 - Dice), the lesion-level retention curve of the ranking score (:func:`lesion_retention`), and the most
uncertain lesions listed first.
"""

from __future__ import annotations

import itertools
import math
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._utils import affine_voxel_volume, label_map_dtype, load_nifti, share_count, to_numpy
from ..io import CaseError, check_geometry, nifti_geometry, read_volume, sheared_grid
from ..metrics.discrimination import error_auroc
from ..metrics.lesions import (
    brats_lesion_metrics,
    lesion_detection,
    lesion_uncertainty,
    ndsc_retention_area,
    normalized_dice,
)
from ..metrics.selective import aurc, referral_curve, referral_curve_core
from ..regions import unclaimed_labels
from ..state import register_state_type
from .config import region_suffix, slug

__all__ = [
    "COUNT_FIELDS",
    "LESION_FIELDS",
    "RETENTION_REFERRED",
    "SAMPLES_SUFFIX",
    "LesionState",
    "lesion_case_state",
    "lesion_columns",
    "lesion_column_names",
    "lesion_retention",
    "read_lesion_samples",
    "check_sample_grids",
    "summarize_lesions",
    "task_masks",
]

#: the per-case values of a task (``case.<task>.<field>``), in column order
CASE_FIELDS = ("lesion_dice", "lesion_hd95", "lesion_tp", "lesion_fp", "lesion_fn", "lesion_f1", "ndsc", "ndsc_raac")
#: the fields of :data:`CASE_FIELDS` that count lesions: ``metrics.csv`` writes them as integers (NaN stays NaN)
COUNT_FIELDS = ("lesion_tp", "lesion_fp", "lesion_fn")
#: the fixed per-lesion fields (``lesion.<task>.<field>``); uncertainty scores are added per map
LESION_FIELDS = ("case_index", "lesion", "volume_mm3", "center_0", "center_1", "center_2", "center_mm_0",
                 "center_mm_1", "center_mm_2", "false_positive", "dice")
#: the shares of predicted lesions referred (most uncertain first) at which the retention curve is reported
RETENTION_REFERRED = tuple(round(0.05 * k, 2) for k in range(20))
#: the name of a case's per-sample masks in the folder of ``--lesion-samples``: ``<case><SAMPLES_SUFFIX>``
SAMPLES_SUFFIX = "_samples.nii.gz"


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
        joined = LesionState.concatenate([self, other])  # the one join rule (keys, lesion case indices, n_cases)
        self.arrays.update(joined.arrays)
        return self

    @classmethod
    def concatenate(cls, states: Sequence[LesionState]) -> LesionState | None:
        """One state of many cases' states, in their order: what merging them one after another gives.

        Each array is joined once, so the work is linear in the cohort's lesions; merging in a loop copies the
        arrays gathered so far at every case, quadratic in the number of cases (earlier versions did: slow for 2000
        cases).

        Args:
            states: the per-case (or per-shard) states, all with the same keys; left unchanged.

        Returns:
            A new state (``case_index`` of the lesions offset by the cases before them, ``n_cases`` summed), or None
            when ``states`` is empty.

        Raises:
            ValueError: states of different tasks or maps (keys).

        Example:
            >>> import numpy as np
            >>> a = LesionState({"n_cases": [1], "case.WT.ndsc": [0.5], "lesion.WT.case_index": [0.0, 0.0]})
            >>> b = LesionState({"n_cases": [1], "case.WT.ndsc": [0.7], "lesion.WT.case_index": [0.0]})
            >>> LesionState.concatenate([a, b]).arrays["lesion.WT.case_index"].tolist()
            [0.0, 0.0, 1.0]
        """
        states = list(states)
        if not states:
            return None
        keys = set(states[0].arrays)
        for other in states[1:]:
            if set(other.arrays) != keys:
                diff = sorted(set(other.arrays) ^ keys)
                raise ValueError(f"lesion states of different tasks or maps cannot be merged: {diff[:4]}")
        counts = [int(s.arrays.get("n_cases", np.zeros(1))[0]) for s in states]
        offsets = list(itertools.accumulate(counts[:-1], initial=0))  # Python ints: an index keeps its dtype
        arrays: dict[str, Any] = {}
        for k in states[0].arrays:
            if k == "n_cases":
                arrays[k] = sum((s.arrays[k] for s in states[1:]), states[0].arrays[k])
            elif k.startswith("lesion.") and k.endswith(".case_index"):
                arrays[k] = np.concatenate([s.arrays[k] + off for s, off in zip(states, offsets)])
            else:
                arrays[k] = np.concatenate([s.arrays[k] for s in states])
        return cls(arrays)

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
    return list(_iter_task_masks(task, class_names))


def _iter_task_masks(task: Any, class_names: Sequence[str] | None) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """:func:`task_masks` one pair at a time.

    A class's two masks are made when the loop reaches it, so that a task of C classes holds one pair of boolean
    volumes, not 2 (C - 1) (a whole-body model's hundred classes).
    """
    if task.name is not None:
        yield region_suffix(task.name), np.asarray(task.pred) > 0, np.asarray(task.target) > 0
        return
    names = list(class_names or [str(c) for c in range(task.num_classes)])
    for c in range(1, task.num_classes):
        yield slug(names[c]), np.asarray(task.pred) == c, np.asarray(task.target) == c


#: the largest integer up to which float32 (the type volumes are read in) holds every integer exactly
_FLOAT32_EXACT = 2**24


def read_lesion_samples(folder: str | os.PathLike, case_id: str, shape: Sequence[int],
                        affine: np.ndarray | None = None) -> np.ndarray:
    """A case's per-sample label maps: ``<folder>/<case><SAMPLES_SUFFIX>``, one label map per stochastic pass.

    The file is a 4-D NIfTI ``(X, Y, Z, S)``: along the fourth axis the hard segmentation of each sample (the argmax
    of each MC-dropout pass, or its thresholded regions written as labels), on the grid of the case's prediction.

    Args:
        folder: the folder of ``--lesion-samples``.
        case_id: the case.
        shape: the case's spatial shape ``(X, Y, Z)``.
        affine: the ``(4, 4)`` affine of the case's label: the file's must put the grid in the label's space
            (:func:`~monai_unc.io.grid_mismatch` through :func:`~monai_unc.io.check_geometry`, the check of every
            volume of a case); None: not compared.

    Returns:
        ``(S, X, Y, Z)`` label maps in the file's integer type (uint8 / uint16 as
        :func:`~monai_unc.io.save_label_maps` writes them), read without a float or int64 copy (found by hostile
        testing: 12 bytes of memory per sample-voxel of a 1-byte file); a file of floats holding integers gives
        the smallest unsigned type that holds its labels.

    Raises:
        FileNotFoundError: the case has no file there.
        ValueError: a file of another grid (shape, or affine: a :class:`~monai_unc.io.CaseError` naming the file),
            values that are not non-negative integers (probabilities are not samples), or labels above ``2**24``
            (read as float32, neighbouring labels there are one value).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from monai_unc.io import save_region_maps
        >>> samples = np.zeros((3, 4, 4, 4), np.float32)  # (S, X, Y, Z) label maps, written (X, Y, Z, S)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = save_region_maps(samples, np.eye(4), Path(d) / "a_samples.nii.gz")
        ...     read_lesion_samples(d, "a", (4, 4, 4)).shape
        (3, 4, 4, 4)
    """
    path = Path(folder) / f"{case_id}{SAMPLES_SUFFIX}"
    if not path.is_file():
        raise FileNotFoundError(f"lesion_samples: case {case_id!r} has no per-sample masks {path}")
    data, aff = read_volume(path, dtype=None)  # the stored integers, not a float32 copy
    data = np.asarray(data)
    if tuple(data.shape[1:]) != tuple(shape):
        raise ValueError(f"lesion_samples: {path} holds (S, *spatial) {data.shape}, the case's grid is {tuple(shape)}")
    if affine is not None:
        check_geometry(case_id, (tuple(shape), affine, None), (data.shape[1:], aff, path))
    return _label_maps(data, path)


def _label_maps(data: np.ndarray, path: Path) -> np.ndarray:
    """``(S, *spatial)`` samples as non-negative integer labels: an integer array as it is, floats converted.

    The checks read one sample at a time (no temporary of the whole array); floats holding integers become the
    smallest unsigned type that holds them. ``ValueError`` for negative, non-finite or fractional values.
    """
    bad = ValueError(f"lesion_samples: {path} must hold integer label maps (one hard segmentation per sample), not "
                     "probabilities")
    if data.dtype.kind == "b":
        return data.view(np.uint8)
    if data.size == 0:
        return data.astype(np.uint8)
    lo, hi = data.min(), data.max()  # NaN propagates, infinities are the extremes
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo < 0:
        raise bad
    if data.dtype.kind in "iu":
        return data
    for sample in data:  # floats: whole numbers, one sample at a time
        if (sample != np.round(sample)).any():
            raise bad
    try:  # no label map holds labels beyond 2**32
        dtype = label_map_dtype(hi, "lesion_samples", widest=np.uint32)
    except ValueError:
        raise bad from None
    if data.dtype == np.float32 and hi > _FLOAT32_EXACT:  # float32 cannot tell such labels apart
        raise ValueError(f"lesion_samples: {path} holds labels above {_FLOAT32_EXACT}, which a volume read as float32 "
                         "(MONAI's LoadImage type) cannot tell apart: use region labels up to that value")
    return data.astype(dtype)


def check_sample_grids(folder: str | os.PathLike, cases: Sequence[Any]) -> None:
    """Refuse, before any work, per-sample masks that are not on the grid of their case's label (NIfTI headers only).

    The shapes and affines come from the headers (:func:`~monai_unc.io.nifti_geometry`, as the cases' reads take
    them) and are compared with :func:`~monai_unc.io.check_geometry`, the check of every volume of a case; files of
    other formats and unreadable headers are left to the case's own read.

    Args:
        folder: the folder of ``--lesion-samples``.
        cases: the matched cases (:class:`~monai_unc.io.CaseFiles`).

    Raises:
        ValueError: naming ``lesion_samples`` and the first cases whose masks are on another grid than their label.
    """
    other = []
    for c in cases:
        path = Path(folder) / f"{c.case_id}{SAMPLES_SUFFIX}"
        try:
            label, samples = nifti_geometry(c.label), nifti_geometry(path)
        except Exception:  # noqa: BLE001 - reported when the case is read
            continue
        if label is None or samples is None:
            continue
        if tuple(samples[0][:3]) != tuple(label[0][:3]):
            other.append(f"{c.case_id} {tuple(samples[0])} (label {tuple(label[0])}, (X, Y, Z[, S]) expected)")
            continue
        try:
            check_geometry(c.case_id, (label[0][:3], label[1], Path(c.label)), (samples[0][:3], samples[1], path))
        except CaseError as e:
            other.append(str(e))
    if other:
        raise ValueError(f"lesion_samples: {len(other)} case(s) have per-sample masks on another grid than their "
                         f"label: {'; '.join(other[:5])}" + (" ..." if len(other) > 5 else ""))


def _sample_masks(samples: np.ndarray, task: Any, class_index: int | None,
                  regions: Mapping[str, Sequence[int]] | None) -> np.ndarray:
    """The binary ``(S, *spatial)`` masks of one class (``samples == c``) or one region (its labels) of the samples."""
    if class_index is not None:
        return samples == class_index
    if regions is None or task.name not in regions:
        raise ValueError(f"lesion_samples: the region {task.name!r} is not in the region spec")
    return np.isin(samples, np.asarray(list(regions[task.name]), np.int64))


def _check_sample_labels(samples: np.ndarray, tasks: Sequence[Any], regions: Mapping[str, Sequence[int]] | None,
                         ignore_unclaimed_labels: bool, case_id: str) -> None:
    """Refuse per-sample label maps holding a label outside the evaluation's label space.

    A class task's samples must hold its classes ``0 .. C-1``; a region task's, labels of the region spec (a label no
    region holds is background only with ``ignore_unclaimed_labels``, as for the references). Such a label was in no
    class or region: each lesion of that class got existence 0 without a word (found by hostile review: samples
    written in a dataset's own ids, tumour 4 beside the classes 0, 1, 2).
    """
    if samples.size == 0 or not tasks:
        return
    if tasks[0].name is None:  # the class task
        n = int(tasks[0].num_classes)
        if int(samples.max()) < n:
            return
        bad = np.unique(samples[samples >= n])
        raise ValueError(f"lesion_samples: case {case_id!r}: the per-sample label maps hold label(s) "
                         f"{[int(v) for v in bad[:6]]} outside classes 0..{n - 1}: each sample must be a label map "
                         "of the evaluation's classes (the argmax of that sample's probabilities)")
    if regions is None or ignore_unclaimed_labels:
        return
    found = unclaimed_labels(samples, regions)
    if found:
        raise ValueError(f"lesion_samples: case {case_id!r}: the per-sample label maps hold label(s) {found[:6]} that "
                         f"no region of {({k: list(v) for k, v in regions.items()})} holds (they would count as "
                         "background): write each sample in the labels of the region spec "
                         "(monai_unc.regions.regions_to_labels), or --ignore-unclaimed-labels")


def lesion_case_state(case: Any, tasks: Sequence[Any], options: Mapping[str, Any],
                      class_names: Sequence[str] | None, measure: str | None, samples: np.ndarray | None = None,
                      regions: Mapping[str, Sequence[int]] | None = None, *,
                      ignore_unclaimed_labels: bool = False) -> LesionState:
    """The lesion-wise state of one case.

    Args:
        case: the loaded case (its ``spacing``, and its ``affine``: the lesions' centres in world coordinates). On
            an orthogonal grid the spacing of volumes and distances is that of its ``label_file``'s NIfTI header where
            it agrees with the affine (the zooms the BraTS code reads), else ``spacing``, and the volumes are
            ``count * sx * sy * sz``; on a sheared grid (:func:`~monai_unc.io.sheared_grid`) the voxel volume is
            ``|det A|`` and ``lesion_hd95`` NaN (its distances are not the spacing's).
        tasks: its tasks.
        options: the product's options: ``dilation``, ``min_volume``, ``iou``, ``hd_penalty``, ``r``.
        class_names: the evaluation's class names.
        measure: the map for nDSC R-AAC (None: no R-AAC); every map of a task gives per-lesion scores.
        samples: optional ``(S, *spatial)`` label maps of the stochastic passes (:func:`read_lesion_samples`): each
            predicted lesion then gets its ``existence`` probability and ``volume_cv``
            (:func:`~monai_unc.metrics.lesions.lesion_uncertainty`), and the score ``existence_uncertainty``
            (1 - existence).
        regions: the region spec ``{region: [labels]}`` of region tasks (to take the regions of the samples).
        ignore_unclaimed_labels: count sample labels that no region holds as background (refused by default, as in
            the references).

    Returns:
        A :class:`LesionState` of one case.

    Raises:
        ValueError: ``samples`` holding a label outside the classes of a class task, or (without
            ``ignore_unclaimed_labels``) a non-zero label that no region of ``regions`` holds.
    """
    if samples is not None:
        _check_sample_labels(samples, tasks, regions, ignore_unclaimed_labels, str(getattr(case, "case_id", "")))
    arrays: dict[str, Any] = {"n_cases": np.array([1], np.int64),
                              "samples": np.array([0 if samples is None else samples.shape[0]], np.int64)}
    case_affine = getattr(case, "affine", None)
    sheared = case_affine is not None and sheared_grid(str(getattr(case, "case_id", "")), case_affine) is not None
    # |det A| only where the axes are not orthogonal; on an orthogonal grid the volumes are the product of the voxel
    # sizes, as the BraTS code forms them (|det A| of a rotated float32 affine is 1 +- 1e-7 of that product, enough to
    # count a lesion of exactly min_volume that the BraTS code leaves out)
    voxel_volume = affine_voxel_volume(case_affine, 3) if sheared else None
    header: dict[tuple, tuple] = {}  # the header's voxel sizes per affine spacing (one read of the label's header)
    for task in tasks:
        spacing = tuple(task.spacing) if task.spacing is not None else tuple(case.spacing)
        if len(spacing) != 3:
            raise ValueError(f"lesion-wise metrics need 3-D volumes, got {len(spacing)}-D spacing {spacing}")
        if not sheared:
            if spacing not in header:
                header[spacing] = _header_spacing(getattr(case, "label_file", None), spacing)
            spacing = header[spacing]
        # every map in float64 once per task, not once per class
        maps = {m: np.asarray(v, float) for m, v in sorted(task.maps.items())}
        for c, (name, pred, target) in enumerate(_iter_task_masks(task, class_names), 1):
            r = brats_lesion_metrics(pred, target, spacing, int(options["dilation"]), float(options["min_volume"]),
                                     float(options["hd_penalty"]), voxel_volume=voxel_volume)
            det = lesion_detection(pred, target, float(options["iou"]))
            u = task.maps.get(measure) if measure else None
            raac = float("nan") if u is None else ndsc_retention_area(pred, target, u, r=float(options["r"]))
            ndsc = normalized_dice(pred, target, float(options["r"]))
            values = {"lesion_dice": r.dice, "lesion_hd95": float("nan") if sheared else r.hd95,
                      "lesion_tp": r.n_tp, "lesion_fp": r.n_fp,
                      "lesion_fn": r.n_fn, "lesion_f1": det.f1, "ndsc": ndsc, "ndsc_raac": raac}
            for f in CASE_FIELDS:
                arrays[f"case.{name}.{f}"] = np.array([values[f]], float)
            s_masks = None if samples is None else _sample_masks(samples, task, None if task.name else c, regions)
            per = lesion_uncertainty(pred, maps, samples=s_masks, connectivity=None, spacing=spacing,
                                     voxel_volume=voxel_volume)
            if "existence" in per:
                per["existence_uncertainty"] = 1.0 - per["existence"]
            n = per["lesion"].size
            fp = np.zeros(n, bool)
            fp[np.asarray(r.fp_components, np.int64) - 1] = True
            # the Dice of a predicted component: the best Dice of a ground-truth lesion it matched (0 if none)
            dice = np.zeros(n)
            for les in r.lesions:
                for j in les.matched:
                    dice[j - 1] = max(dice[j - 1], les.dice)
            center = per["center"]
            affine = np.asarray(getattr(case, "affine", None) if getattr(case, "affine", None) is not None
                                else np.diag([*spacing, 1.0]), float)
            center_mm = center @ affine[:3, :3].T + affine[:3, 3]  # voxel -> world (mm)
            fields = {"case_index": np.zeros(n), "lesion": per["lesion"], "volume_mm3": per["volume_mm3"],
                      "center_0": center[:, 0], "center_1": center[:, 1], "center_2": center[:, 2],
                      "center_mm_0": center_mm[:, 0], "center_mm_1": center_mm[:, 1], "center_mm_2": center_mm[:, 2],
                      "false_positive": fp.astype(float), "dice": dice}
            for f in LESION_FIELDS:
                arrays[f"lesion.{name}.{f}"] = np.asarray(fields[f], float)
            for k, v in per.items():
                if k in ("existence",):  # a probability of being right, kept beside the scores
                    arrays[f"lesion.{name}.{k}"] = np.asarray(v, float)
                elif k not in ("lesion", "volume_mm3", "center"):
                    arrays[f"lesion.{name}.score.{k}"] = np.asarray(v, float)
    return LesionState(arrays)


def _header_spacing(path: str | os.PathLike | None, spacing: Sequence[float]) -> tuple[float, ...]:
    """The voxel sizes of a NIfTI file's header (``pixdim``) where they are the affine's ``spacing``, else ``spacing``.

    The BraTS 2023 lesion-wise code takes the spacing of its volumes and distances from the header's zooms (float32).
    The lengths of the affine's columns are those zooms up to the float32 rounding of the stored affine (on a rotated
    grid 1 +- 1e-8 of them), which is enough to count a lesion of exactly ``min_volume`` mm^3 that the BraTS code
    leaves out; the zooms themselves are used where they agree with the affine (relative 1e-5).

    Args:
        path: the case's label file (``LoadedCase.label_file``), or None.
        spacing: the voxel sizes (mm) of the case's affine, one per spatial axis.

    Returns:
        The header's voxel sizes for a ``.nii`` / ``.nii.gz`` file whose zooms agree with ``spacing``; ``spacing``
        otherwise (another format, no file, an unreadable header, zooms that disagree).
    """
    sp = tuple(float(s) for s in spacing)
    if path is None or not str(path).lower().endswith((".nii", ".nii.gz")):
        return sp
    try:
        zooms = tuple(float(z) for z in load_nifti(path).header.get_zooms()[: len(sp)])
    except Exception:  # noqa: BLE001 - the case's own read reports an unreadable file
        return sp
    if len(zooms) != len(sp) or not np.allclose(zooms, sp, rtol=1e-5, atol=0.0):
        return sp
    return zooms


def lesion_column_names(tasks: Sequence[str]) -> list[str]:
    """The ``metrics.csv`` columns of lesion-wise evaluation, ``<field>_<task>``, refused where two are one name.

    The fields include ``ndsc`` and ``ndsc_raac``: a task whose suffix starts with ``raac_`` would write the column
    of another task's R-AAC (found by hostile testing: classes ``x`` and ``raac x`` both wrote ``ndsc_raac_x``, and
    one overwrote the other in ``metrics.csv``).

    Args:
        tasks: the tasks' column suffixes (class slugs or region suffixes).

    Returns:
        The columns, tasks in order, fields in :data:`CASE_FIELDS` order.

    Raises:
        ValueError: naming the tasks whose columns collide.

    Example:
        >>> lesion_column_names(["WT"])[:2]
        ['lesion_dice_WT', 'lesion_hd95_WT']
        >>> lesion_column_names(["x", "raac_x"])
        Traceback (most recent call last):
        ...
        ValueError: lesions: the columns of 'raac_x' and 'x' are one name (ndsc_raac_x): rename one of them
    """
    owner: dict[str, str] = {}
    for task in tasks:
        for f in CASE_FIELDS:
            column = f"{f}_{task}"
            if column in owner and owner[column] != task:
                a, b = sorted((owner[column], task))
                raise ValueError(f"lesions: the columns of {a!r} and {b!r} are one name ({column}): rename one of "
                                 "them")
            owner[column] = task
    return list(owner)


def lesion_columns(state: LesionState) -> dict[str, float | int]:
    """The ``metrics.csv`` columns of a one-case state: ``<field>_<task>``.

    The lesion counts (:data:`COUNT_FIELDS`: ``lesion_tp``, ``lesion_fp``, ``lesion_fn``) are ``int`` (written
    ``3``, not ``3.0``) where they are finite whole numbers; every other value, and a NaN count, is a ``float``.

    Args:
        state: the state of one case.

    Returns:
        ``{column: value}``.

    Raises:
        ValueError: two tasks' columns are one name (:func:`lesion_column_names`).

    Example:
        >>> arrays = {"case.1.lesion_tp": np.array([3.0]), "case.1.lesion_fp": np.array([np.nan]),
        ...           "case.1.lesion_f1": np.array([0.5])}
        >>> lesion_columns(LesionState(arrays))
        {'lesion_tp_1': 3, 'lesion_fp_1': nan, 'lesion_f1_1': 0.5}
    """
    keys = [k.split(".", 2)[1:] for k in state.arrays if k.startswith("case.")]
    lesion_column_names(list(dict.fromkeys(task for task, _ in keys)))
    columns: dict[str, float | int] = {}
    for task, f in keys:
        v = float(state.arrays[f"case.{task}.{f}"][0])
        columns[f"{f}_{task}"] = int(v) if f in COUNT_FIELDS and v.is_integer() else v
    return columns


def _auroc(score: np.ndarray, event: np.ndarray) -> float | None:
    ok = np.isfinite(score)
    s, e = score[ok], event[ok].astype(np.int64)
    if s.size == 0 or e.min() == e.max():
        return None
    return float(error_auroc(s, e, per_case=False))


def lesion_retention(score: Any, dice: Any, false_positive: Any,
                     referred: Sequence[float] = RETENTION_REFERRED) -> dict[str, Any] | None:
    """The lesion-level retention curve: the predicted lesions kept after referring the most uncertain for review.

    At each referred share ``tau`` the ``ceil(tau * n)`` lesions with the largest ``score`` are referred; the curve
    gives the mean Dice and the share of false positives of the lesions kept (ties at the cut averaged over a random
    order: :func:`~monai_unc.metrics.selective.referral_curve`), beside the oracle that refers the lowest Dice first.
    Lesions with a non-finite score are left out, and so are the shares that would refer every lesion.

    Args:
        score: ``(n,)`` per-lesion uncertainty (larger: referred first).
        dice: ``(n,)`` per-lesion Dice (0 for a false positive).
        false_positive: ``(n,)`` 1 for a false-positive lesion.
        referred: the referred shares in [0, 1).

    Returns:
        ``{"referred", "kept", "dice", "false_positive_share", "oracle_dice"}`` (lists; empty, with a ``UserWarning``,
        when every share refers all lesions), or None without a finite score.

    Raises:
        TypeError: naming the argument, when one is not numbers (text such as ``"0.5"``, ``None`` in a list, complex
            numbers; a numpy array, a torch tensor, a list or a number is expected).
        ValueError: the three have different lengths, or a share of ``referred`` is outside [0, 1).

    Example:
        >>> curve = lesion_retention([0.9, 0.1, 0.5, 0.2], [0.0, 0.9, 0.4, 0.8], [1, 0, 0, 0], referred=(0.0, 0.25))
        >>> curve["dice"], curve["false_positive_share"], curve["kept"]
        ([0.525, 0.7], [0.25, 0.0], [4, 3])
    """
    # numbers only, as the metric entry points take them (found by review 67: np.asarray(x, float) read the text
    # "0.5" as the number); to_numpy refuses text, objects and complex with a TypeError naming the argument
    u, d, fp = (to_numpy(x, name).astype(np.float64).ravel()
                for x, name in ((score, "score"), (dice, "dice"), (false_positive, "false_positive")))
    if not (u.shape == d.shape == fp.shape):
        raise ValueError(f"score, dice and false_positive must have one length, got {u.size}, {d.size}, {fp.size}")
    ok = np.isfinite(u)
    if not ok.any():
        return None
    u, d, fp = u[ok], d[ok], fp[ok]
    taus = to_numpy(referred, "referred")
    if taus.dtype.kind not in "iuf":  # flags are no shares (as referral_curve's taus)
        raise TypeError(f"referred must hold referred shares (real numbers), got dtype {taus.dtype}")
    taus = taus.astype(np.float64).ravel()
    if taus.size == 0 or not np.isfinite(taus).all() or (taus < 0).any() or (taus >= 1).any():
        raise ValueError(f"referred must be shares in [0, 1), got {referred!r}")
    taus = taus[share_count(taus, u.size) < u.size]  # shares that keep at least one lesion
    if taus.size == 0:
        # found by review 67: with every share referring all lesions (one lesion, referred=(0.5,)) the empty grid
        # failed in referral_curve with "taus is empty", naming no argument of this function
        warnings.warn(f"lesion_retention: every share of {referred!r} refers all {u.size} lesion(s) with a finite "
                      "score; the curve has no point", UserWarning, stacklevel=2)
        return {"referred": [], "kept": [], "dice": [], "false_positive_share": [], "oracle_dice": []}
    curve = referral_curve(u, d, taus)  # warns once if the scores are tied
    # the same scores again, and the oracle ranks by the Dice: lesions of one Dice (all false positives, all perfect)
    # are no tie of the uncertainty scores, yet said "all n scores are tied" (found in review 63); the curve's core
    # says neither (review 68: a text filter inside catch_warnings, process-wide, hid the tie warning meanwhile from
    # every thread and re-showed the caller's once-per-location warnings). Every rate keeps a lesion (above)
    false_positive_share = referral_curve_core(u, fp, taus).value
    oracle = referral_curve_core(-d, d, taus).value
    return {"referred": [float(t) for t in taus], "kept": [int(k) for k in curve.n_retained],
            "dice": [float(v) for v in curve.value],
            "false_positive_share": [float(v) for v in false_positive_share],
            "oracle_dice": [float(v) for v in oracle]}


def summarize_lesions(state: LesionState | None, case_ids: Sequence[str], options: Mapping[str, Any],
                      top: int = 20) -> dict[str, Any]:
    """The ``lesions`` block of ``summary.json``.

    Per task: the mean over cases of each case value (NaN-aware; the lesion F1 is a mean of the cases' F1, not a
    pooled F1), the pooled TP / FP / FN of the BraTS matching, ``n_cases_nothing_counted`` (the cases without a
    counted lesion or a false positive, which score lesion-wise Dice 1 and HD95 0 by the rule, a missed lesion of at
    most ``min_volume`` included), the number of predicted lesions, lesion-level failure
    detection: per per-lesion score the AUROC for "false positive" and for "Dice below ``failure_dice``" and the AURC
    of 1 - Dice (lower is better), over the ``n_lesions`` lesions the score is defined for; ``best_fp_score`` names
    the score that finds false positives best among those defined for every lesion; ``retention``
    the lesion-level retention curve of the ranking score (:func:`lesion_retention`). ``lesions`` lists the ``top``
    most uncertain predicted lesions (by ``rank_by``, else the first ``<measure>_mean`` score) with their case,
    centre (voxels, and world coordinates in mm), volume, score, whether they are false positives and, with
    samples, their existence probability.
    ``samples`` says how many per-sample masks the cases had (``null``: none given, so no existence probability or
    volume spread) and ``notes`` says what could not be computed.

    Args:
        state: the merged state of the cases (in case-id order), or None without cases.
        case_ids: the ids of those cases, in the same order.
        options: the product's options (``failure_dice``, ``rank_by``).
        top: how many lesions to list.

    Returns:
        JSON data (NaN stays NaN; the summary writer turns it into ``null``).
    """
    block: dict[str, Any] = {"options": dict(options), "n_cases": len(case_ids), "per_task": {}, "samples": None,
                             "notes": []}
    if state is None:
        return block
    n_samples = state.arrays.get("samples")
    if n_samples is not None and n_samples.size and int(n_samples.min()) > 0:
        block["samples"] = {"min": int(n_samples.min()), "max": int(n_samples.max())}
    else:
        block["notes"].append("no per-sample masks (--lesion-samples): the lesions' existence probability and volume "
                              "spread are not computed")
    failure_dice = float(options["failure_dice"])
    listed: list[dict[str, Any]] = []
    for task in state.tasks():
        a = state.arrays
        means = {}
        for f in CASE_FIELDS:
            v = a[f"case.{task}.{f}"]
            means[f] = float(np.nanmean(v)) if np.isfinite(v).any() else None
        tp, fp, fn = (int(a[f"case.{task}.lesion_{k}"].sum()) for k in ("tp", "fp", "fn"))
        # cases with no counted lesion and no false positive: Dice 1 and HD95 0 by the rule (nothing to score, also
        # where a lesion of at most min_volume was missed), in the means beside the cases that were scored
        nothing = (a[f"case.{task}.lesion_tp"] + a[f"case.{task}.lesion_fn"] + a[f"case.{task}.lesion_fp"]) == 0
        fp_mask = a[f"lesion.{task}.false_positive"] > 0.5
        dice = a[f"lesion.{task}.dice"]
        # a lesion's Dice is computed and kept in float64 (a case's Dice is recorded in float32, which dice_failed
        # compares at): "a Dice below failure_dice" at the precision of the value itself (NaN: not failed)
        low_dice = np.asarray(dice, dtype=np.float64) < failure_dice
        scores = sorted(k.split(".score.", 1)[1] for k in a if k.startswith(f"lesion.{task}.score."))
        detection = {}
        for s in scores:
            u = a[f"lesion.{task}.score.{s}"]
            ok = np.isfinite(u)
            detection[s] = {
                "auroc_false_positive": _auroc(u, fp_mask),
                "auroc_low_dice": _auroc(u, low_dice),
                "aurc_1_minus_dice": float(aurc(u[ok], 1.0 - dice[ok])) if ok.sum() > 1 else None,
                "n_lesions": int(ok.sum()),  # the lesions the score is defined for (a core mean needs a core)
            }
        # the best false-positive detector among the scores defined for every lesion: an AUROC over the lesions with
        # a core (say) leaves out the small lesions, the false positives most of all, and is not comparable
        fp_ranked = [(v["auroc_false_positive"], s) for s, v in detection.items()
                     if v["auroc_false_positive"] is not None and v["n_lesions"] == fp_mask.size]
        rank_by = options.get("rank_by")
        key = f"lesion.{task}.score.{rank_by}" if rank_by else None
        if key is None or key not in a:
            key = next((f"lesion.{task}.score.{s}" for s in scores if s.endswith("_mean")), None)
        retention = None if key is None else lesion_retention(a[key], dice, fp_mask)
        if retention is not None:
            retention = {"score": key.split(".score.", 1)[1], **retention}
        block["per_task"][task] = {
            "mean": means,
            "lesion_tp": tp, "lesion_fp": fp, "lesion_fn": fn,
            "n_cases_nothing_counted": int(np.count_nonzero(nothing)),
            # cases on a sheared grid have no HD95 (NaN, warned per case): the mean is over the others
            "n_cases_without_hd95": int(np.count_nonzero(~np.isfinite(a[f"case.{task}.lesion_hd95"]))),
            "n_predicted_lesions": int(fp_mask.size),
            "n_false_positive_lesions": int(fp_mask.sum()),
            "failure_detection": detection,
            "best_fp_score": max(fp_ranked)[1] if fp_ranked else None,
            "retention": retention,
        }
        if key is not None:
            u = a[key]
            case_index = a[f"lesion.{task}.case_index"].astype(np.int64)
            exist = a.get(f"lesion.{task}.existence")
            for i in np.argsort(-np.nan_to_num(u, nan=-np.inf), kind="stable")[:top]:
                listed.append({"case": str(case_ids[case_index[i]]), "task": task,
                               "lesion": int(a[f"lesion.{task}.lesion"][i]),
                               "center": [round(float(a[f"lesion.{task}.center_{d}"][i]), 1) for d in range(3)],
                               "center_mm": [round(float(a[f"lesion.{task}.center_mm_{d}"][i]), 2)
                                             for d in range(3)],
                               "volume_mm3": float(a[f"lesion.{task}.volume_mm3"][i]),
                               "score": key.split(".score.", 1)[1], "value": float(u[i]),
                               "false_positive": bool(fp_mask[i]), "dice": float(dice[i]),
                               "existence": None if exist is None else float(exist[i])})
    listed.sort(key=lambda d: -d["value"] if math.isfinite(d["value"]) else math.inf)
    block["lesions"] = listed[:top]
    return block
