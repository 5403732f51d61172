"""One case's metric row, written once for classes and for regions (:func:`evaluate_case`).

The case is split into its tasks (:func:`~monai_unc.evaluation.rows.case_tasks`, :mod:`monai_unc.activation`): one
categorical task for a class prediction, one binary task per region for a region-based (sigmoid) prediction
(``EvaluationConfig.regions``). Every metric is computed per task, into the column ``<metric>`` of the class task or
``<metric>_<R>`` of region ``R`` (:func:`~monai_unc.evaluation.config.region_suffix`):

- ``dice`` (the mean over the foreground classes, or over the regions) and ``dice_<class>`` / ``dice_<R>``
  (:func:`~monai_unc.evaluation.rows.class_dice`);
- the calibration family (:data:`~monai_unc.evaluation.config.CALIBRATION_COLUMNS`) from the task's
  :class:`~monai_unc.metrics.calibration.ConfidenceHistogram` (``C`` classes, or the two-class probabilities
  ``(1 - p_r, p_r)`` of a region);
- ``error_rate`` and, for the primary measure, BUC / BA-ECE / SPACE and error AUROC / AUPRC;
- QU-BraTS of the primary measure, for regions only (module docstring of :mod:`.region_case`);
- the case scores of every measure (:mod:`monai_unc.scores`; for regions per region and combined,
  :func:`~monai_unc.evaluation.rows.region_score_columns`);
- the user metrics of ``EvaluationConfig.case_metrics``: ``fn(task)`` of every task
  (:class:`~monai_unc.activation.TaskView`), column ``<name>`` or ``<name>_<R>``;
- the per-case state of every product of ``EvaluationConfig.products`` (:mod:`monai_unc.product`) and the columns
  it adds (:func:`~monai_unc.evaluation.products.product_case_states`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._utils import keep_user_warnings
from ..activation import TaskView
from ..io import CaseError, CaseFiles, LoadedCase, is_seg_label, load_case, segment_label_values, sheared_grid
from ..metrics.calibration import ConfidenceHistogram, calibration_metrics
from ..metrics.discrimination import error_auprc, error_auroc
from ..metrics.qu_brats_score import measure_max, qu_brats_regions_core, to_qu_brats_range
from ..metrics.spatial import boundary_aware_ece, boundary_uncertainty_concentration, spatial_calibration_error
from ..regions import parse_regions
from ..scores import case_score_columns
from .config import CALIBRATION_COLUMNS, EvaluationConfig, dice_columns, region_suffix, unit_scale
from .products import product_case_states
from .rows import (
    QU_BRATS_COLUMNS,
    CaseResult,
    case_dice,
    case_expected_dice,
    case_tasks,
    class_dice,
    derived_maps,
    primary_measure,
    region_score_columns,
    unclaimed_case_labels,
)

__all__ = ["CaseResult", "class_dice", "derived_maps", "primary_measure", "load_evaluation_case", "evaluate_case",
           "kept_task"]


def _namer(task: TaskView) -> Callable[[str], str]:
    """The column of a metric for a task: ``<metric>`` for the class task, ``<metric>_<R>`` for region ``R``."""
    if task.name is None:
        return lambda metric: metric
    suffix = region_suffix(task.name)
    return lambda metric: f"{metric}_{suffix}"


def _dice_columns(task: TaskView, config: EvaluationConfig) -> list[str]:
    """The Dice columns of a task's foreground classes.

    These are ``dice_<class>`` of classes ``1 .. C-1`` (named by ``class_names``), or ``dice_<R>`` of a region.
    """
    if task.name is not None:
        return dice_columns(1, regions=[str(task.name)])
    return dice_columns(task.num_classes, config.class_names)


def _qu_brats(case: LoadedCase, tasks: list[TaskView], primary: str, config: EvaluationConfig,
              keep: np.ndarray | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """The QU-BraTS columns of a region evaluation (per region and their mean) and the case's curves.

    With ``keep`` (the voxels outside the ignore label) the tasks hold those voxels alone, and so does the brain mask.
    """
    assert config.regions is not None
    spec = parse_regions(config.regions)
    names = [str(t.name) for t in tasks]
    brain = None if case.image is None else (case.image > 0).any(axis=0)
    if brain is not None and keep is not None and tasks and tasks[0].pred.shape != brain.shape:
        brain = brain[keep]
    top = measure_max(primary, multilabel=True)
    u100 = {n: to_qu_brats_range(t.maps[primary], top) for n, t in zip(names, tasks)}  # float64, one region at a time
    # rescaled from the measure's own maximum: a confident map, not a scale slip, so no warning of an ungraded map
    # (review 68: filtered by its text inside catch_warnings, a process-wide filter, until the core could leave it out)
    qb = qu_brats_regions_core(u100, {n: t.pred.astype(bool) for n, t in zip(names, tasks)},
                               {n: t.target.astype(bool) for n, t in zip(names, tasks)}, regions=spec,
                               brain_mask=brain, grid=config.qu_brats_grid, warn=False)
    cols: dict[str, float] = {}
    for c in QU_BRATS_COLUMNS:
        cols.update({f"qu_brats_{c}_{region_suffix(n)}": float(getattr(qb.regions[n], c)) for n in names})
        cols[f"qu_brats_{c}"] = float(getattr(qb, c))
    curves = {
        "thresholds": qb.regions[names[0]].thresholds.tolist(),
        "grid": config.qu_brats_grid,
        "brain_mask": "image > 0" if brain is not None else "all voxels",
        "regions": {n: {"dice": qb.regions[n].dice.tolist(), "ftp": qb.regions[n].ftp.tolist(),
                        "ftn": qb.regions[n].ftn.tolist()} for n in names},
    }
    return cols, curves


def load_evaluation_case(files: CaseFiles, config: EvaluationConfig) -> LoadedCase:
    """Read and check one case's files as the evaluation needs them.

    Args:
        files: the case's files.
        config: the evaluation options. With ``config.regions`` the case is read as region masks (one per region of
            the spec) with its image (the QU-BraTS brain mask); otherwise as a class prediction with
            ``config.num_classes`` (None: taken from the probabilities or the label maps); labels of a DICOM SEG
            get the values of ``config.seg_label_values`` (:func:`~monai_unc.io.segment_label_values`), or with
            ``config.seg_regions`` are the regions (:func:`~monai_unc.io.read_label`); with ``config.class_names``
            a SEG whose segment names say other classes than their labels is refused
            (:func:`monai_unc.io.dicom.check_segment_classes`).

    Returns:
        The loaded case (:class:`~monai_unc.io.LoadedCase`).
    """
    seg = is_seg_label(files.label)
    if config.regions is not None:
        config.validate()  # parses the spec
        case = load_case(files, len(parse_regions(config.regions)), load_image=True, multilabel=True,
                         seg_regions=config.seg_region_spec(), ignore_label=config.ignore_label)
    else:
        case = load_case(files, config.num_classes, ignore_label=config.ignore_label)
        if config.class_names and seg:
            # the segments are read by number: refuse a SEG whose segment names say other classes (review 57)
            from ..io.dicom import check_segment_classes

            try:
                check_segment_classes(files.label, config.class_names, config.seg_label_values)
            except ValueError as e:
                raise CaseError(f"case {files.case_id!r}: {e}") from None
    if config.seg_label_values is not None and seg:
        case.label = segment_label_values(case.label, config.seg_label_values, files.case_id)
        n_cls = config.num_classes if config.num_classes is not None else (
            None if case.probs is None else int(case.probs.shape[0]))
        top = int(case.label.max()) if case.label.size else 0
        if config.regions is None and n_cls is not None and top >= n_cls:
            raise CaseError(f"case {files.case_id!r}: --seg-label-values gives a segment of {files.label.name} the "
                            f"label {top}, outside the {n_cls} classes 0 .. {n_cls - 1} of the prediction")
    return case


def kept_task(task: TaskView, keep: np.ndarray) -> TaskView:
    """The task on the voxels ``keep`` holds: every array flattened to those voxels, in C order.

    The voxel-wise metrics of a case with an ignore label (``EvaluationConfig.ignore_label``) are those of this task,
    as nnU-Net's evaluation counts TP / FP / FN on the voxels outside its ignore mask only.

    Args:
        task: the case's task (arrays ``(*spatial)``, probabilities ``(C, *spatial)``).
        keep: ``(*spatial)`` bool, True for the voxels scored.

    Returns:
        A :class:`~monai_unc.activation.TaskView` of 1-D arrays (``pred`` / ``target`` / maps ``(N,)``, probabilities
        ``(C, N)``, ``N = keep.sum()``), without spacing or affine (the kept voxels have no grid).

    Example:
        >>> t = TaskView(None, np.array([[0, 1], [1, 1]]), np.array([[0, 1], [0, 1]]), 2)
        >>> kept_task(t, np.array([[True, True], [False, True]])).target.tolist()
        [0, 1, 1]
    """
    keep = np.asarray(keep, dtype=bool)
    return TaskView(task.name, np.asarray(task.pred)[keep], np.asarray(task.target)[keep], task.num_classes,
                    probs=None if task.probs is None else np.ascontiguousarray(np.asarray(task.probs)[:, keep]),
                    maps={m: np.asarray(v)[keep] for m, v in task.maps.items()})


def _present_classes(task: TaskView) -> list[int]:
    """The classes that the reference or the segmentation of a class task holds (one ``bincount`` of each)."""
    n = int(task.num_classes)
    held = np.zeros(n, dtype=bool)
    for labels in (task.target, task.pred):
        a = np.asarray(labels).ravel()
        if a.dtype.kind not in "iu" or a.dtype == np.uint64:  # checked labels in [0, C): bincount's integer types
            a = a.astype(np.int64)
        held |= np.bincount(a, minlength=n)[:n] > 0
    return [int(c) for c in np.flatnonzero(held)]


def _refuse_clash(option: str, columns: Mapping[str, Any], row: Mapping[str, Any],
                  owner: str = "the evaluation's own") -> None:
    """Refuse the columns of ``option`` (case metrics, products) that would overwrite those of ``owner``."""
    clash = sorted(set(columns) & set(row))
    if clash:
        raise ValueError(f"{option}: the columns {clash} clash with {owner} (rename them)")


def evaluate_case(files: CaseFiles | LoadedCase, config: EvaluationConfig) -> CaseResult:
    """Metrics of one case (module docstring): the class task, or with ``config.regions`` one task per region.

    Args:
        files: the case's files, or the case already loaded (for regions with ``load_case(..., multilabel=True)``,
            and ``load_image=True`` for the QU-BraTS brain mask).
        config: the evaluation options.

    Returns:
        The row, the case's confidence histogram (classes) or one binary histogram per region
        (``region_histograms``), the QU-BraTS curves (regions) and the warnings raised while reading the files and
        computing them.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # read here: the warnings of reading the files (a unit other than mm, an sform and qform that disagree) are
        # the case's too (hostile review 60)
        case = files if isinstance(files, LoadedCase) else load_evaluation_case(files, config)
        row: dict[str, Any] = {"case": case.case_id}
        if config.shifts is not None:
            row["shift"] = config.shifts.get(case.case_id, "")
        sheared = sheared_grid(None, case.affine, len(case.spacing))  # distances NaN; the messages name the case
        if sheared is not None:
            warnings.warn(sheared, UserWarning, stacklevel=2)
        unclaimed = unclaimed_case_labels(case, config)  # refused for the cohort unless ignore_unclaimed_labels
        if unclaimed:
            warnings.warn(f"label value(s) {unclaimed[:6]} are in no region of {config.regions} and count as "
                          "background (another region spec, e.g. brats2023?)", UserWarning, stacklevel=2)
        act, tasks, maps = case_tasks(case, config)
        cols = [_namer(t) for t in tasks]
        # nnU-Net's ignore label: its voxels are left out of every voxel-wise metric (the tasks on the kept voxels)
        keep = None if case.ignore is None or not case.ignore.any() else ~case.ignore
        full_tasks, empty = tasks, keep is not None and not keep.any()
        if keep is not None:
            tasks = [kept_task(t, keep) for t in tasks]
        if empty:  # the case-level analyses (failure detection, triage, risk control) need a finite Dice
            warnings.warn(f"every voxel of the reference holds the ignore label {config.ignore_label}: its voxel-wise "
                          "metrics are NaN and its Dice is that of an empty reference and segmentation (1)",
                          UserWarning, stacklevel=2)
            dices = [np.ones(len(_dice_columns(t, config)), dtype=np.float32) for t in tasks]
            row["dice"] = 1.0
        else:
            row["dice"], dices = case_dice(tasks)
        for t, d in zip(tasks, dices):
            row.update({k: float(v) for k, v in zip(_dice_columns(t, config), d)})

        hists: list[ConfidenceHistogram] | None = None
        if case.probs is not None:
            hists = []
            for t, col in zip(full_tasks, cols):
                assert t.probs is not None
                h = ConfidenceHistogram(t.num_classes, n_fine_bins=config.n_fine_bins, per_case=True)
                h.update(t.probs[None], t.target[None], case_ids=[case.case_id], validate=False,
                         mask=None if keep is None else keep[None])
                if empty:
                    vals = dict.fromkeys(CALIBRATION_COLUMNS, float("nan"))
                else:
                    vals = calibration_metrics(h, CALIBRATION_COLUMNS, n_bins=config.n_bins,
                                               min_bin_count=config.min_bin_count)
                row.update({col(k): float(vals[k]) for k in CALIBRATION_COLUMNS})
                hists.append(h)

        primary = primary_measure(maps, config.measure)
        errors = [(t.pred != t.target).astype(np.uint8) for t in tasks]
        row.update({col("error_rate"): float("nan") if empty else float(e.mean()) for col, e in zip(cols, errors)})
        curves = None
        if primary is not None:
            row["measure"] = primary
            if config.spatial and keep is not None:  # distances need the whole reference
                warnings.warn(f"BUC, BA-ECE and SPACE are NaN: they need the whole reference, and it holds the ignore "
                              f"label {config.ignore_label}", UserWarning, stacklevel=2)
            for t, col, error in zip(tasks, cols, errors):
                u = t.maps[primary]
                if config.spatial and (sheared is not None or keep is not None):
                    # no spacing gives the distances of a sheared grid; the ignore voxels leave the reference partial
                    row.update({col(k): float("nan") for k in ("buc", "ba_ece", "space")})
                elif config.spatial:
                    un = unit_scale(u, primary, t.num_classes)
                    row[col("buc")] = float(boundary_uncertainty_concentration(u, t.pred, t.target, case.spacing)[0])
                    row[col("ba_ece")] = float(boundary_aware_ece(un, t.pred, t.target, case.spacing)[0])
                    row[col("space")] = float(spatial_calibration_error(un, t.pred, t.target, case.spacing)[0])
                row[col("error_auroc")] = float("nan") if empty else float(error_auroc(u, error, per_case=False))
                row[col("error_auprc")] = float("nan") if empty else float(error_auprc(u, error, per_case=False))
            if act.multilabel:
                qu_cols, curves = _qu_brats(case, full_tasks if empty else tasks, primary, config, keep)
                if empty:
                    qu_cols = dict.fromkeys(qu_cols, float("nan"))
                row.update(qu_cols)
        if act.multilabel:  # the case scores read the prediction and the maps alone: every voxel
            pred = np.stack([t.pred for t in full_tasks])
            row.update(region_score_columns(maps, pred, [str(t.name) for t in full_tasks], config.patch_size))
        else:
            row.update(case_score_columns(maps, case.seg, config.patch_size))
        custom = {col(name): float("nan") if empty else float(fn(t)) for name, fn in (config.case_metrics or {}).items()
                  for t, col in zip(tasks, cols)}
        # the voxels scored (without those of the ignore label), per region (the label may hold R masks)
        tail: dict[str, Any] = {"voxels": int(tasks[0].target.size),
                                "spacing": "x".join(f"{s:.4g}" for s in case.spacing)}
        if case.probs is not None:  # the label-free estimate triage shows, for the rule's expected-Dice interval
            tail["expected_dice"] = float(case_expected_dice(case.probs, act.multilabel).foreground[0])
        # found by hostile testing: a case metric named "dice" overwrote the case's Dice (failure detection, triage
        # and risk control read it), one named "voxels" was overwritten, both silently; "shift" is the shift label's
        # column without shifts too (hostile review 58: a number there made state/rows.json one that report refused)
        own = {**row, **tail, "shift": None}
        _refuse_clash("case_metrics", custom, own)
        row.update(custom)  # before the tail: the columns keep their order
        row.update(tail)
        states, product_columns = product_case_states(case, tasks, config)
        # a product's column named like a case metric: the case metric is what the user can rename (found by
        # hostile review: it was reported as the product clashing with "the evaluation's own")
        _refuse_clash("case_metrics", custom, product_columns, "the columns of the products")
        _refuse_clash("products", product_columns, {**row, "shift": None})
        row.update(product_columns)  # last: an evaluation without products keeps its columns and their order
    # the UserWarnings are the case's (listed); the others (a user's case metric's, numpy's on the case's arrays, a
    # deprecation) are issued again as raised (found by review 70: dropped before)
    messages = sorted({f"{case.case_id}: {w.message}" for w in keep_user_warnings(caught)})
    if not act.multilabel:
        return CaseResult(row, None if hists is None else hists[0], messages, states=states,
                          present_classes=_present_classes(tasks[0]))
    region_hists = None if hists is None else {str(t.name): h for t, h in zip(tasks, hists)}
    # the regions the reference or the prediction holds (a region in neither scores Dice 1: the cohort warns)
    present = [r for r, t in enumerate(tasks) if bool(np.any(t.target)) or bool(np.any(t.pred))]
    return CaseResult(row, None, messages, region_histograms=region_hists, curves=curves,
                      unclaimed_labels=unclaimed, states=states, present_classes=present)
