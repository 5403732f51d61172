"""The pieces of a per-case evaluation row.

They are the result of one case (:class:`CaseResult`), the Dice of label maps (:func:`class_dice`), the maps to score
(:func:`derived_maps`) and their files (:func:`write_derived_maps`, :func:`derived_map_path`), the choice of the
primary measure (:func:`primary_measure`), the split of a loaded case into its tasks (:func:`case_tasks`: one class
task, or one binary task per region, :mod:`monai_unc.activation`) and the region-only pieces
(:func:`predicted_regions`, :func:`region_score_columns`, :func:`combined_score`).
:func:`monai_unc.evaluation.case.evaluate_case` writes the row once from them, for classes and regions.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._deprecation import REMOVAL
from .._utils import check_bool, listed
from ..activation import BERNOULLI, CATEGORICAL, Activation, TaskView
from ..io import CaseError, CaseFiles, LoadedCase, owned_folder, read_probabilities, save_nifti, save_region_maps
from ..keys import MEASURES
from ..measures import binary_entropy, entropy, one_minus_max_prob
from ..metrics.calibration import ConfidenceHistogram
from ..metrics.overlap import dice
from ..metrics.quality import case_expected_dice
from ..regions import label_to_regions, parse_regions, unclaimed_labels
from ..scores import CASE_SCORES, PATCH_SIZE, case_scores, case_scores_core, region_suffixes, resolve_score_column
from ..state import StateGroup, pack_states, read_npz, unpack_states
from .config import EvaluationConfig, parse_score_column

__all__ = [
    "CaseResult",
    "DERIVED_MEASURES",
    "class_dice",
    "case_dice",
    "derived_maps",
    "derived_map_path",
    "write_derived_maps",
    "remove_stale_maps",
    "primary_measure",
    "check_class_count",
    "check_measure_options",
    "check_probability_cases",
    "check_scored_cases",
    "has_score_source",
    "first_class_count",
    "QU_BRATS_COLUMNS",
    "case_tasks",
    "unclaimed_case_labels",
    "combined_score",
    "predicted_regions",
    "region_score_columns",
    "case_expected_dice",
    "region_histograms_of",
    "region_histograms_state",
    "region_histograms_from_state",
    "load_region_histograms",
]

#: the QU-BraTS columns of a region evaluation (``qu_brats_<c>_<R>`` per region, ``qu_brats_<c>`` their mean)
QU_BRATS_COLUMNS = ("score", "dice_auc", "ftp_auc", "ftn_auc")


@dataclass
class CaseResult:
    """What :func:`~monai_unc.evaluation.evaluate_case` returns: the metric row, histograms and warnings of a case.

    The confidence histogram is None without probabilities.

    Region evaluations (``EvaluationConfig.regions``) fill ``region_histograms`` instead of ``histogram`` (one
    binary histogram per region, in the spec's order) and ``curves`` (the QU-BraTS curves of the case:
    ``{"thresholds": [...], "brain_mask": str, "regions": {region: {"dice": [...], "ftp": [...], "ftn": [...]}}}``)
    and ``unclaimed_labels``, the non-zero labels of the case's label map that no region holds
    (:func:`unclaimed_case_labels`; the cohort refuses them unless ``ignore_unclaimed_labels``). ``present_classes``
    holds the classes (region evaluations: the indices of the regions) that the case's reference or segmentation
    holds (the cohort warns about classes and regions that no case holds: each scores Dice 1 in every case).

    ``states`` holds the per-case state of each product of ``EvaluationConfig.products`` (:mod:`monai_unc.product`).
    :meth:`to_record` / :meth:`from_record` turn the whole result into JSON data and numpy arrays (every state
    through :func:`monai_unc.state.pack_states`), which the cohort engine saves for resuming and gathers from the
    ranks of a ``torchrun`` job without knowing what the states are.

    Args:
        row: the metric row (``{column: value}``, with ``"case"``).
        histogram: the case's per-case confidence histogram of the class task (None without probabilities or for
            regions).
        warnings: the warnings raised while computing the row.
        region_histograms: ``{region: binary histogram}`` of a region evaluation, in the spec's order.
        curves: the case's QU-BraTS curves (region evaluations).
        unclaimed_labels: non-zero labels of the label map that no region holds.
        present_classes: the classes that the reference or the segmentation of a class evaluation holds, the
            indices of the regions that they hold in a region evaluation (None in the records of earlier versions).
        states: ``{product name: state}`` of ``EvaluationConfig.products``.
        files: the case's files (set by the evaluation's per-case step).
        num_classes: the case's number of classes (regions), set with ``files``.
        derived: ``{measure: path}`` of the maps the evaluation derived and wrote for a case without map files.
        derived_sha256: ``{measure: sha256 hex}`` of those files as written.

    Example:
        >>> result = CaseResult({"case": "a", "dice": 0.9}, None)
        >>> doc, arrays = result.to_record()
        >>> CaseResult.from_record(doc, arrays).row
        {'case': 'a', 'dice': 0.9}
    """

    row: dict[str, Any]
    histogram: ConfidenceHistogram | None
    warnings: list[str] = field(default_factory=list)
    region_histograms: dict[str, ConfidenceHistogram] | None = None
    curves: dict[str, Any] | None = None
    unclaimed_labels: list[int] = field(default_factory=list)
    #: the classes (regions: region indices) the reference or the segmentation holds (None: not known)
    present_classes: list[int] | None = None
    #: ``{product name: state}`` of ``EvaluationConfig.products``
    states: dict[str, Any] = field(default_factory=dict)
    #: the case's files, set by the evaluation's per-case step (:func:`~monai_unc.evaluation.evaluate_files`)
    files: CaseFiles | None = None
    #: the case's number of classes (regions), set with ``files``
    num_classes: int | None = None
    #: ``{measure: path}`` of the maps the evaluation derived from the probabilities and wrote (``<output>/maps``), for
    #: a case without map files; ``files`` stays the case's own files (what a rule's score is computed from)
    derived: dict[str, str] = field(default_factory=dict)
    #: ``{measure: sha256 hex}`` of each file of ``derived`` as written (the report draws a map only while it is that
    #: file)
    derived_sha256: dict[str, str] = field(default_factory=dict)

    def all_states(self) -> dict[str, Any]:
        """Every mergeable state of the case by name.

        These are ``histogram`` and ``region_histograms`` (a :class:`~monai_unc.state.StateGroup`) where present,
        and ``product.<name>`` for each product's state.

        Returns:
            The states (for :func:`monai_unc.state.pack_states`).
        """
        out: dict[str, Any] = {}
        if self.histogram is not None:
            out["histogram"] = self.histogram
        if self.region_histograms is not None:
            out["region_histograms"] = StateGroup(self.region_histograms)
        out.update({f"{_PRODUCT_PREFIX}{name}": state for name, state in self.states.items()})
        return out

    def to_record(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The result as ``(JSON data, numpy arrays)``; :meth:`from_record` reads it back.

        The row, warnings, curves, labels, files and number of classes go into the JSON data; every state is packed
        into arrays (:meth:`all_states`, :func:`monai_unc.state.pack_states`).

        Returns:
            ``(doc, arrays)``.
        """
        doc = {"row": self.row, "warnings": list(self.warnings), "curves": self.curves,
               "unclaimed_labels": [int(v) for v in self.unclaimed_labels],
               "present_classes": None if self.present_classes is None else [int(v) for v in self.present_classes],
               "files": None if self.files is None else self.files.to_json(),
               "num_classes": None if self.num_classes is None else int(self.num_classes),
               "products": list(self.states), "derived": dict(self.derived)}
        if self.derived_sha256:  # only then: the record of a case without derived maps is as before
            doc["derived_sha256"] = dict(self.derived_sha256)
        return doc, pack_states(self.all_states())

    @classmethod
    def from_record(cls, doc: Mapping[str, Any], arrays: Mapping[str, Any]) -> CaseResult:
        """The result of :meth:`to_record`.

        Args:
            doc: the JSON data.
            arrays: the arrays (or a loaded ``.npz`` file).

        Returns:
            The :class:`CaseResult`.

        Raises:
            ValueError: a state of an unregistered type.
            KeyError: a state or field is missing (an unusable record).
        """
        states = unpack_states(arrays)
        rh = states.pop("region_histograms", None)
        products = {}
        for name in doc.get("products") or []:
            products[str(name)] = states.pop(f"{_PRODUCT_PREFIX}{name}")
        files = doc.get("files")
        n = doc.get("num_classes")
        present = doc.get("present_classes")
        return cls(dict(doc["row"]), states.pop("histogram", None), [str(w) for w in doc.get("warnings") or []],
                   region_histograms=None if rh is None else dict(rh), curves=doc.get("curves"),
                   unclaimed_labels=[int(v) for v in doc.get("unclaimed_labels") or []],
                   present_classes=None if present is None else [int(v) for v in present],
                   states=products,
                   files=None if files is None else CaseFiles.from_json(files),
                   num_classes=None if n is None else int(n),
                   derived={str(k): str(v) for k, v in (doc.get("derived") or {}).items()},
                   derived_sha256={str(k): str(v) for k, v in (doc.get("derived_sha256") or {}).items()})


#: the prefix of a product's state among :meth:`CaseResult.all_states`
_PRODUCT_PREFIX = "product."


def class_dice(seg: np.ndarray, label: np.ndarray, num_classes: int) -> np.ndarray:
    """Dice of the foreground classes ``1 .. C-1`` of one case, ``(C - 1,)`` float32 (numpy or torch label maps).

    :func:`monai_unc.metrics.overlap.dice` with ``empty_score=1`` (a class absent from both maps scores 1,
    absent from one of them 0), which equals MONAI's ``compute_dice(..., include_background=False,
    ignore_empty=False)``. Rounded to float32 as MONAI's value is, so that ``metrics.csv`` keeps its numbers.
    A binary region is the case ``num_classes=2`` with the region masks as label maps.

    Args:
        seg: the predicted label map ``(*spatial)``, integer.
        label: the reference label map ``(*spatial)``, integer.
        num_classes: the number of classes ``C`` (background included).

    Returns:
        The Dice of classes ``1 .. C-1``, ``(C - 1,)`` float32.

    Example:
        >>> class_dice(np.array([[0, 1], [1, 2]]), np.array([[0, 1], [2, 2]]), 3)
        array([0.6666667, 0.6666667], dtype=float32)
    """
    d = dice(seg[None], label[None], num_classes=num_classes, include_background=False, empty_score=1.0)
    # torch label maps give a tensor (hostile review 58: an AttributeError 'Tensor' object has no attribute 'astype')
    return np.asarray(d[0].detach().cpu() if isinstance(d, torch.Tensor) else d[0], dtype=np.float32)


def case_dice(tasks: Sequence[TaskView]) -> tuple[float, list[np.ndarray]]:
    """The Dice of a case's row: :func:`class_dice` of each task, and the mean over the tasks of their means.

    For classes (one task) the mean over the foreground classes; for regions (one binary task per region) the mean
    over the regions: what ``metrics.csv``'s ``dice`` holds and what failure detection, referral and risk control
    use.

    Args:
        tasks: the case's tasks (:func:`case_tasks`).

    Returns:
        ``(dice, per_task)``: the case's Dice and each task's :func:`class_dice`.

    Example:
        >>> from monai_unc.activation import BERNOULLI
        >>> pred = np.array([[[1, 1], [0, 0]], [[0, 0], [0, 0]]], bool)  # two regions
        >>> target = np.array([[[1, 0], [0, 0]], [[0, 0], [0, 0]]], bool)
        >>> case_dice(BERNOULLI.split(pred, target, None, {}, ["a", "b"], (1.0, 1.0)))[0]  # (2/3 + 1) / 2
        0.8333333432674408
    """
    dices = [class_dice(t.pred, t.target, t.num_classes) for t in tasks]
    return float(np.mean([float(np.mean(d)) for d in dices])), dices


def derived_maps(case: LoadedCase) -> dict[str, np.ndarray]:
    """Maps to score: the given ones, or entropy and ``one_minus_max_prob`` of the probabilities when none are given.

    For a multi-label case (``case.multilabel``) the derived maps are per region, ``(R, *spatial)``: the binary
    entropy ``H_b(p_r)`` (:func:`monai_unc.measures.binary_entropy`) and ``1 - max(p_r, 1 - p_r)``.

    Args:
        case: a loaded case; its probabilities are ``(C, *spatial)`` (``(R, *spatial)`` when multi-label).

    Returns:
        ``{measure: map}``: ``case.maps`` when it has any (or when there are no probabilities), else
        ``predictive_entropy`` (nats) and ``one_minus_max_prob``, float32, ``(*spatial)`` for classes and
        ``(R, *spatial)`` for regions.
    """
    if case.maps or case.probs is None:
        return case.maps
    p = torch.from_numpy(case.probs)[None]
    if case.multilabel:
        maps = {
            "predictive_entropy": binary_entropy(p, validate=False)[0],
            "one_minus_max_prob": one_minus_max_prob(p, validate=False, multilabel=True)[0],
        }
    else:
        maps = {"predictive_entropy": entropy(p)[0, 0], "one_minus_max_prob": one_minus_max_prob(p)[0, 0]}
    assert tuple(maps) == DERIVED_MEASURES  # check_measure_options reads the names without computing the maps
    return {k: v.numpy().astype(np.float32) for k, v in maps.items()}


#: the maps :func:`derived_maps` computes from the probabilities of a case without map files
DERIVED_MEASURES = ("predictive_entropy", "one_minus_max_prob")


def derived_map_path(folder: str | os.PathLike, case_id: str, measure: str) -> Path:
    """Where :func:`write_derived_maps` writes the map of ``measure`` of a case: ``<folder>/<case>_<measure>.nii.gz``.

    Args:
        folder: the folder of the derived maps (``<output>/maps`` of ``evaluate`` and ``triage``,
            :data:`~monai_unc.evaluation.config.DERIVED_MAPS_DIR`).
        case_id: the case id.
        measure: the measure (``predictive_entropy`` or ``one_minus_max_prob``).

    Returns:
        The path (whether or not the file exists).

    Example:
        >>> derived_map_path("out/maps", "case1", "predictive_entropy").as_posix()
        'out/maps/case1_predictive_entropy.nii.gz'
    """
    return Path(folder) / f"{case_id}_{measure}.nii.gz"


def write_derived_maps(case: LoadedCase, folder: str | os.PathLike, maps: Mapping[str, np.ndarray] | None = None,
                       like: str | os.PathLike | None = None) -> dict[str, Path]:
    """Write the maps derived from a case's probabilities as NIfTI files in the case's geometry, atomically.

    The maps are those of :func:`derived_maps` (entropy and ``one_minus_max_prob``, per region for a region case,
    as a 4D file); ``evaluate`` and ``triage`` write them to ``<output>/maps`` and the report and the triage page
    read them as they read the maps of a prediction folder.

    Args:
        case: the loaded case.
        folder: where to write ``<case>_<measure>.nii.gz`` (:func:`derived_map_path`).
        maps: the derived maps when the caller has them already (None: derived here).
        like: the case's label file, whose sform / qform codes, qform and spatial unit the maps copy
            (:func:`~monai_unc.io.save_nifti`); None: the case's ``label_file``.

    Returns:
        ``{measure: path}``; empty when the case has map files of its own or no probabilities.
    """
    if case.maps or case.probs is None:
        return {}
    like = getattr(case, "label_file", None) if like is None else like
    out = {}
    for measure, u in (derived_maps(case) if maps is None else maps).items():
        path = derived_map_path(folder, case.case_id, measure)
        out[measure] = (save_region_maps(u, case.affine, path, like=like) if case.multilabel
                        else save_nifti(u, case.affine, path, like=like))
    return out


def primary_measure(maps: Mapping[str, np.ndarray], wanted: str | None) -> str | None:
    """The measure of the spatial, discrimination and QU-BraTS metrics.

    Args:
        maps: the case's maps ``{measure: map}`` (only the keys are read).
        wanted: the measure asked for (``EvaluationConfig.measure``), or None.

    Returns:
        ``wanted``, else ``predictive_entropy`` when present, else the first map; None without maps.

    Raises:
        ValueError: ``wanted`` has no map.

    Example:
        >>> primary_measure({"one_minus_max_prob": None, "predictive_entropy": None}, None)
        'predictive_entropy'
    """
    if wanted is not None:
        if wanted not in maps:
            raise ValueError(f"measure {wanted!r} has no map (available: {sorted(maps) or 'none'})")
        return wanted
    if "predictive_entropy" in maps:
        return "predictive_entropy"
    return next(iter(maps), None)


def has_score_source(files: CaseFiles | Mapping[str, Any]) -> bool:
    """Whether a case has what its uncertainty score is computed from: a map file, or probabilities to derive maps from.

    Args:
        files: the case's files, a :class:`~monai_unc.io.CaseFiles` or its JSON form (a cohort state's ``files``).

    Returns:
        True for a case with a map or probabilities; False for a segmentation alone.

    Example:
        >>> has_score_source(CaseFiles("c1", Path("l.nii.gz"), Path("c1_seg.nii.gz"), None, {}, None))
        False
        >>> has_score_source({"maps": {}, "probs": "c1_probs.nii.gz"})
        True
    """
    if isinstance(files, CaseFiles):
        return bool(files.maps) or files.probs is not None
    return bool(files.get("maps")) or files.get("probs") is not None


def check_scored_cases(cases: Sequence[tuple[str, bool]]) -> None:
    """Refuse a cohort that mixes cases without an uncertainty score source with cases that have one.

    A case with neither an uncertainty map nor probabilities (a segmentation alone) has no uncertainty score: beside
    cases that have one, it would be ranked first as an undefined score, and the cohort's means (Dice and the
    failure detection of every case, calibration of the cases with probabilities) would be over different sets of
    cases. The one check of every entry point: ``monai-unc evaluate`` (:func:`check_measure_options`),
    :func:`~monai_unc.evaluation.runner.evaluate_cases` and :func:`~monai_unc.evaluation.cohort.summarize`.
    A cohort of segmentations alone passes (refused elsewhere when a score is needed).

    Args:
        cases: ``(case id, whether the case has a map or probabilities)`` per case (:func:`has_score_source`).

    Raises:
        ValueError: some but not all cases have neither a map nor probabilities; the message names up to five.

    Example:
        >>> check_scored_cases([("a", True), ("b", True)])
        >>> check_scored_cases([("a", False), ("b", True)])
        Traceback (most recent call last):
        ...
        ValueError: 1 case(s) have neither an uncertainty map nor probabilities ('a'), while the other 1 case(s) \
have: they would have no uncertainty score for the triage and failure detection; give their probabilities or maps \
(--uncertainty, --measures), or leave them out
    """
    # found by hostile review 60: a case with a segmentation alone (no map, no probabilities) beside cases whose maps
    # are derived from their probabilities had no uncertainty score; first in case-id order it made the cohort fail
    # after every case was evaluated ("no uncertainty score in the rows: give uncertainty maps or probabilities"),
    # anywhere else it was referred first as an undefined score, without a word; review 61: the check of the command
    # line only, so evaluate_cases and summarize called from Python mixed them silently
    bare = [str(cid) for cid, scored in cases if not scored]
    if bare and len(bare) < len(cases):
        shown = listed(bare, 5)
        raise ValueError(f"{len(bare)} case(s) have neither an uncertainty map nor probabilities ({shown}), while "
                         f"the other {len(cases) - len(bare)} case(s) have: they would have no uncertainty score for "
                         "the triage and failure detection; give their probabilities or maps (--uncertainty, "
                         "--measures), or leave them out")


def check_probability_cases(cases: Sequence[CaseFiles], config: EvaluationConfig) -> None:
    """Refuse cases without probabilities beside cases with them when only the probabilities give the class count.

    In earlier versions one case of an ``nnunet-predict --save_probabilities`` folder predicted again without the flag
    had no ``<case>.npz`` while the other cases had one, and ``evaluate`` failed it with "the number of classes is
    unknown: give probabilities or num_classes", naming neither the missing file nor its likely cause. Nothing is
    refused with ``num_classes`` or ``regions`` (a segmentation then suffices), nor when every case, or none, has
    probabilities.

    Args:
        cases: the cases to evaluate.
        config: the evaluation settings (``num_classes``, ``regions``).

    Raises:
        ValueError: one line naming the first case without probabilities, the file it lacks (the other cases'
            naming), how many cases have them, the likely cause and the remedies.

    Example:
        >>> have = CaseFiles("c0", Path("l/c0.nii.gz"), Path("p/c0.nii.gz"), Path("p/c0.npz"))
        >>> lacks = CaseFiles("c1", Path("l/c1.nii.gz"), Path("p/c1.nii.gz"))
        >>> check_probability_cases([have, lacks], EvaluationConfig(num_classes=3))
        >>> check_probability_cases([have, lacks], EvaluationConfig())
        Traceback (most recent call last):
        ...
        ValueError: case 'c1': its probabilities c1.npz are absent while 1 other case has them (e.g. c0.npz): \
predicted without them (nnunet-predict without --save_probabilities, infer with --no-probs)? ...
    """
    if config.num_classes is not None or config.regions is not None:
        return
    having = [files for files in cases if files.probs is not None]
    lacking = [files for files in cases if files.probs is None]
    if not having or not lacking:
        return
    other, case = having[0], lacking[0]
    name = other.probs.name if other.probs is not None else ""
    expected = case.case_id + name[len(other.case_id):] if name.startswith(other.case_id) else "its probabilities file"
    more = f" (and {len(lacking) - 1} more case{'s' if len(lacking) > 2 else ''} without)" if len(lacking) > 1 else ""
    raise ValueError(
        f"case {case.case_id!r}: its probabilities {expected} are absent while {len(having)} other "
        f"case{'s have' if len(having) != 1 else ' has'} them (e.g. {name}){more}: predicted without them "
        "(nnunet-predict without --save_probabilities, infer with --no-probs)? predict it again with them, or give "
        "--num-classes (its segmentation is then evaluated)"
    )


def check_measure_options(cases: Sequence[CaseFiles], config: EvaluationConfig,
                          scores: Mapping[str, str | None] | None = None) -> None:
    """Refuse, before any case is read, a ``--measure`` or ``--score`` that the cases' files cannot give.

    A case's maps are its map files, or, without any, the maps :func:`derived_maps` computes from its probabilities.
    Found by hostile testing: ``evaluate --measure variance`` on predictions without variance maps evaluated every case
    and failed each one (exit status 1), and a ``--score`` typo (``predictive_entropy_fgmean``) was refused only after
    every case was evaluated. The score must be a label-free case score
    (:func:`~monai_unc.evaluation.config.parse_score_column`; the former names ``<m>_patch`` and ``max_softmax_*`` are
    read as :func:`~monai_unc.evaluation.cohort.score_column` reads them) of a measure the cases have.

    Args:
        cases: the matched cases (:func:`~monai_unc.io.match_cases`).
        config: the validated evaluation options (``measure``, ``score``, ``regions``).
        scores: other options naming a case score column, ``{option: column}`` (None values skipped), checked as
            ``--score`` is (a product's own, e.g. the score of its strata).

    Cases without probabilities are refused here too when none has any: without ``--num-classes`` (class
    predictions) every case would fail, and without maps the cohort has no uncertainty score. So are cases with
    neither maps nor probabilities (a segmentation alone) beside cases that have either: they would have no score.

    Raises:
        ValueError: one line naming ``--measure`` or ``--score``, and for a missing map the first case without it and
            the maps it has; or, when no case has probabilities, ``--num-classes`` (class predictions without it) or
            that no case has an uncertainty map; or the cases without maps and probabilities among cases with them.

    Example:
        >>> files = CaseFiles("c1", Path("l.nii.gz"), None, Path("c1_probs.nii.gz"), {}, None)
        >>> check_measure_options([files], EvaluationConfig(measure="predictive_entropy"))
        >>> check_measure_options([files], EvaluationConfig(measure="variance"))
        Traceback (most recent call last):
        ...
        ValueError: --measure 'variance': case 'c1' has no map of it (its maps: ['one_minus_max_prob', \
'predictive_entropy']); choose one of them, or predict with that measure (monai-unc infer --measures)
    """
    if cases and not any(files.probs is not None for files in cases):
        # found by hostile testing: segmentations alone were evaluated case by case, every case failing with "the
        # number of classes is unknown: give probabilities or num_classes"; given --num-classes, every case was
        # evaluated and the cohort then refused for want of an uncertainty score
        if config.regions is None and config.num_classes is None:
            raise ValueError(f"--num-classes: no case has probabilities (e.g. case {cases[0].case_id!r}), so the "
                             "number of classes is unknown: give --num-classes")
        if config.measure is None and config.score is None and not any(files.maps for files in cases):
            raise ValueError(f"no case has an uncertainty map or probabilities (e.g. case {cases[0].case_id!r}): the "
                             "case scores, the triage and failure detection need them; give the maps (--uncertainty, "
                             "--measures) or the probabilities")
    check_scored_cases([(files.case_id, has_score_source(files)) for files in cases])
    check_probability_cases(cases, config)
    wanted = {}
    if config.measure is not None:
        wanted["--measure"] = (config.measure, config.measure)
    regions = None if config.regions is None else list(config.regions)
    for option, column in {"--score": config.score, **dict(scores or {})}.items():
        if column is not None:
            name = resolve_score_column(column, [f"{m}_{s}" for m in MEASURES for s in CASE_SCORES], warn=False)
            wanted[option] = (column, parse_score_column(name, regions, option=option)[0])
    for option, (value, measure) in wanted.items():
        for files in cases:
            # derived_maps' rule: the map files, else the two maps computed from the probabilities
            names = sorted(files.maps) or (sorted(DERIVED_MEASURES) if files.probs is not None else [])
            if measure not in names:
                what = "it" if value == measure else f"its measure {measure!r}"
                raise ValueError(f"{option} {value!r}: case {files.case_id!r} has no map of {what} (its maps: "
                                 f"{names or 'none'}); choose one of them, or predict with that measure (monai-unc "
                                 "infer --measures)")


def first_class_count(cases: Sequence[CaseFiles]) -> tuple[CaseFiles, int] | None:
    """The first case with probabilities and their number of classes (channels), read once, for checks before the loop.

    Args:
        cases: the matched cases.

    Returns:
        ``(files, C)``, or None when no case has probabilities (segmentations alone) or the first one cannot be read
        (left to the per-case loop, where that case fails alone with its own message).

    Example:
        >>> first_class_count([CaseFiles("c1", Path("l.nii.gz"), Path("c1_seg.nii.gz"), None, {}, None)]) is None
        True
    """
    first = next((files for files in cases if files.probs is not None), None)
    if first is None:
        return None
    try:
        return first, int(read_probabilities(first.probs)[0].shape[0])
    except (CaseError, OSError, ValueError):
        return None


def check_class_count(cases: Sequence[CaseFiles], config: EvaluationConfig) -> None:
    """Refuse, before any case is evaluated, ``--num-classes`` / ``--class-names`` that the probabilities contradict.

    The class count of the first case with probabilities (read once) is compared with ``num_classes`` and the
    number of ``class_names``. Found by hostile testing: a wrong count failed every case, each listed in
    ``failures.json``, instead of one refusal. A first case that cannot be read is left to the per-case loop (it
    fails alone there); region evaluations name their columns after the regions and are not checked here.

    Args:
        cases: the matched cases (:func:`~monai_unc.io.match_cases`).
        config: the validated evaluation options (``num_classes``, ``class_names``, ``regions``).

    Raises:
        ValueError: one line naming the option, the case and its number of classes.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _ = np.savez(Path(d) / "c1.npz", probabilities=np.full((2, 2, 2, 2), 0.5, np.float32))
        ...     files = CaseFiles("c1", Path(d) / "c1.nii.gz", None, Path(d) / "c1.npz", {}, None)
        ...     check_class_count([files], EvaluationConfig(class_names=["background", "liver"]))
        ...     check_class_count([files], EvaluationConfig(num_classes=3))
        Traceback (most recent call last):
        ...
        ValueError: --num-classes 3: case 'c1' has 2 classes (c1.npz); give the number of classes of the \
probabilities, background included
    """
    if config.regions is not None or (config.num_classes is None and not config.class_names):
        return
    found = first_class_count(cases)
    if found is None:
        return
    first, n_cls = found
    if config.num_classes is not None and config.num_classes != n_cls:
        raise ValueError(f"--num-classes {config.num_classes}: case {first.case_id!r} has {n_cls} classes "
                         f"({first.probs.name}); give the number of classes of the probabilities, background included")
    if config.class_names and len(config.class_names) != n_cls:
        raise ValueError(f"--class-names has {len(config.class_names)} names for the {n_cls} classes of case "
                         f"{first.case_id!r} ({first.probs.name}): give one name per class, the background first "
                         "(--class-names background liver tumour)")


def combined_score(values: list[float]) -> float:
    """The combined case score of a region evaluation: the mean of the per-region scores that are defined.

    Args:
        values: the per-region scores (NaN or inf: undefined, e.g. ``fg_mean`` of a region absent from the
            prediction).

    Returns:
        The mean of the finite values; NaN when none is finite.

    Example:
        >>> round(combined_score([0.2, float("nan"), 0.4]), 6)
        0.3
    """
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else float("nan")


def _region_stack(case: LoadedCase, arr: np.ndarray, what: str, n: int, names: list[str]) -> None:
    if arr.shape[0] != n:
        raise CaseError(f"case {case.case_id!r}: {what} has {arr.shape[0]} region channel(s) but the region spec has "
                        f"{n} ({', '.join(names)})")


def _as_regions(case: LoadedCase, arr: np.ndarray, spec: Mapping[str, Sequence[int]], what: str) -> np.ndarray:
    """``(R, *spatial)`` bool region masks of a label map ``(*spatial)`` or of ``R`` region masks.

    A label map gets the spec's regions of its labels; region masks are checked against the spec's region count.
    """
    if arr.ndim == len(case.spacing):
        return np.asarray(label_to_regions(arr, spec))
    names = list(spec)
    _region_stack(case, arr, what, len(names), names)
    return arr.astype(bool)


def predicted_regions(case: LoadedCase, spec: Mapping[str, Sequence[int]]) -> np.ndarray:
    """The predicted region masks ``(R, *spatial)`` bool of a case read with ``load_case(..., multilabel=True)``.

    Args:
        case: the loaded case; its segmentation is ``R`` region masks (``<case>_seg`` of ``monai-unc infer
            --activation sigmoid``) or, for nnU-Net, a label map ``(*spatial)``.
        spec: the region spec ``{region: [labels]}`` (:func:`monai_unc.regions.parse_regions`).

    Returns:
        The region masks, ``(R, *spatial)`` bool; a label map is converted with the spec
        (:func:`monai_unc.regions.label_to_regions`).

    Raises:
        CaseError: the segmentation has another number of region channels than the spec.
    """
    return _as_regions(case, case.seg, spec, "the segmentation")


def region_score_columns(
    maps: Mapping[str, np.ndarray], pred: np.ndarray, names: Sequence[str], patch_size: int = PATCH_SIZE,
    warn: bool = True,
) -> dict[str, float]:
    """The case-score columns of a region-based case.

    This is the one definition used by ``evaluate --regions`` and by ``monai-unc triage``: for every map ``m``
    ``(R, *spatial)`` (one channel per region, in the order of ``names``) and every score ``k`` of
    :data:`~monai_unc.scores.CASE_SCORES`, the per-region score ``<m>_<k>_<R>`` (:func:`~monai_unc.scores.case_scores`
    of ``m[r]`` with the predicted region ``pred[r]`` ``(R, *spatial)`` as the foreground; ``<R>`` is
    :func:`~monai_unc.scores.region_suffix` of the name) and the combined case score ``<m>_<k>`` =
    :func:`combined_score` of the per-region scores (their mean over the regions where defined). Column order: every
    combined column of a map, then its per-region columns.

    Args:
        maps: ``{measure: map}``, each map ``(R, *spatial)``.
        pred: the predicted region masks ``(R, *spatial)`` bool.
        names: the ``R`` region names, in channel order.
        patch_size: box size (voxels per axis) of the ``patch_mean`` score.
        warn: whether ``fg_mean`` of an empty predicted region warns (:func:`~monai_unc.scores.case_scores`) or is
            NaN without a word (:func:`~monai_unc.scores.case_scores_core`, for a caller that says it in its own
            words).

    Returns:
        ``{column: score}`` (floats; NaN where a score is undefined).

    Raises:
        ValueError: a map or ``pred`` has another number of channels than ``names``.
        TypeError: ``warn`` is not a bool.

    Example:
        >>> u = np.array([[[0.2, 0.4], [0.0, 0.0]]])
        >>> pred = np.array([[[True, True], [False, False]]])
        >>> cols = region_score_columns({"predictive_entropy": u}, pred, ["WT"], patch_size=1)
        >>> {k: round(v, 3) for k, v in cols.items() if "fg_mean" in k}
        {'predictive_entropy_fg_mean': 0.3, 'predictive_entropy_fg_mean_WT': 0.3}
    """
    score = case_scores if check_bool(warn, "warn") else case_scores_core
    n = len(names)
    if pred.shape[0] != n:
        raise ValueError(f"pred has {pred.shape[0]} region channel(s) for {n} region name(s)")
    sfx = region_suffixes(names)
    row: dict[str, float] = {}
    for m, u in maps.items():
        if u.shape[0] != n:
            raise ValueError(f"the {m} map has {u.shape[0]} region channel(s) for {n} region name(s)")
        scores = [score(u[r], pred[r], patch_size) for r in range(n)]
        for k in CASE_SCORES:
            row[f"{m}_{k}"] = combined_score([sc[k] for sc in scores])
        for s, sc in zip(sfx, scores):
            row.update({f"{m}_{k}_{s}": sc[k] for k in CASE_SCORES})
    return row


def unclaimed_case_labels(case: LoadedCase, config: EvaluationConfig) -> list[int]:
    """The non-zero labels of a case's label map or predicted label map that no region of ``config.regions`` holds.

    One ``np.unique`` of each (:func:`monai_unc.regions.unclaimed_labels`). A predicted label map (an nnU-Net region
    model's ``<case>.nii.gz``, a label map as ``<case>_seg``) is converted to regions with the spec as the label is,
    so a label no region holds would silently count as background there too (found by hostile review: a prediction
    in the BraTS 2018-2022 labels, enhancing tumour 4, under ``brats2023`` had every ET lesion missed, exit 0).

    Args:
        case: a loaded case.
        config: the evaluation options.

    Returns:
        The labels, sorted; empty without regions. Region masks (of the label or of the prediction) hold no labels.
    """
    if config.regions is None:
        return []
    found: set[int] = set()
    for arr in (case.label, case.seg):
        if arr is not None and arr.ndim == len(case.spacing):
            found.update(unclaimed_labels(arr, config.regions))
    return sorted(found)


def case_tasks(case: LoadedCase, config: EvaluationConfig) -> tuple[Activation, list[TaskView], dict[str, np.ndarray]]:
    """A loaded case split into the tasks its row is computed on, with the maps to score.

    Args:
        case: a case of :func:`monai_unc.io.load_case` (with ``multilabel=True`` for a region evaluation).
        config: the evaluation options; ``config.regions`` set means one binary task per region.

    Returns:
        ``(activation, tasks, maps)``: :data:`~monai_unc.activation.CATEGORICAL` and the one class task (the
        segmentation and label maps as they are), or :data:`~monai_unc.activation.BERNOULLI` and one task per region
        of the spec (region masks of the label and of the prediction, :func:`predicted_regions`); ``maps`` are
        :func:`derived_maps` (``(R, *spatial)`` for regions, each task holding its own channel). Label values in no
        region count as background here; :func:`unclaimed_case_labels` finds them.

    Raises:
        CaseError: channel counts that do not fit the spec.
        ValueError: ``class_names`` of the wrong length, or a region evaluation of a case not read as multi-label.
    """
    if config.regions is None:
        n_cls = case.probs.shape[0] if case.probs is not None else config.num_classes
        assert n_cls is not None
        names = config.class_names or [str(c) for c in range(n_cls)]
        if len(names) != n_cls:
            raise ValueError(f"class_names has {len(names)} names for {n_cls} classes: give one name per class, the "
                             "background first (--class-names background liver tumour)")
        maps = derived_maps(case)
        tasks = CATEGORICAL.split(case.seg, case.label, case.probs, maps, spacing=case.spacing, num_classes=n_cls)
        return CATEGORICAL, _with_affine(tasks, case), maps
    if not case.multilabel:
        raise ValueError("a region evaluation needs a case read with load_case(..., multilabel=True)")
    spec = parse_regions(config.regions)
    names = list(spec)
    target = _as_regions(case, case.label, spec, "the label")  # (R, *spatial) bool
    pred = predicted_regions(case, spec)
    if case.probs is not None:
        _region_stack(case, case.probs, "the probabilities", len(names), names)
    maps = derived_maps(case)
    for m, u in maps.items():
        _region_stack(case, u, f"the {m} map", len(names), names)
    return BERNOULLI, _with_affine(BERNOULLI.split(pred, target, case.probs, maps, names, case.spacing), case), maps


def _with_affine(tasks: list[TaskView], case: LoadedCase) -> list[TaskView]:
    """The tasks with the case's affine (their voxel volume ``|det A|``, right on a sheared grid too)."""
    for t in tasks:
        t.affine = np.asarray(case.affine, dtype=np.float64)
    return tasks


def region_histograms_of(arrays: Mapping[str, Any]) -> dict[str, ConfidenceHistogram]:
    """The per-region confidence histograms of the arrays of ``state/region_histograms.npz``.

    The file holds a :class:`~monai_unc.state.StateGroup` (its :meth:`~monai_unc.state.StateGroup.state_dict`), or
    the layout of versions before it: the region names under ``regions`` and region ``i``'s
    :meth:`~monai_unc.metrics.calibration.ConfidenceHistogram.state_dict` under ``r<i>__<key>``.

    Args:
        arrays: the file's arrays (``numpy.load`` of it, or :func:`monai_unc.state.read_npz`).

    Returns:
        ``{region: ConfidenceHistogram}`` in the file's order.

    Example:
        >>> import numpy as np
        >>> h = ConfidenceHistogram(num_classes=2).update(np.array([[[0.1, 0.8], [0.9, 0.2]]]), np.array([[0, 1]]))
        >>> group = region_histograms_of(StateGroup({"WT": h}).state_dict())
        >>> list(group), len(group["WT"])
        (['WT'], 1)
    """
    if "__names__" in arrays:
        return dict(StateGroup.from_state_dict(arrays))
    names = [str(n) for n in np.asarray(arrays["regions"]).tolist()]
    return {name: ConfidenceHistogram.from_state_dict({k[len(f"r{i}__"):]: v for k, v in arrays.items()
                                                        if k.startswith(f"r{i}__")}) for i, name in enumerate(names)}


def _deprecated(name: str, instead: str) -> None:
    warnings.warn(f"monai_unc.evaluation.rows.{name} is deprecated and will be removed in {REMOVAL}; {instead}",
                  DeprecationWarning, stacklevel=3)


def region_histograms_state(hists: Mapping[str, ConfidenceHistogram]) -> dict[str, Any]:
    """Deprecated: the per-region histograms as one flat dict of numpy arrays, in the layout of versions before 0.2.0.

    Use ``monai_unc.state.StateGroup(hists).state_dict()``. The layout: the region names under ``regions``, region
    ``i``'s :meth:`~monai_unc.metrics.calibration.ConfidenceHistogram.state_dict` under ``r<i>__<key>``;
    :func:`region_histograms_of` reads it back.

    Args:
        hists: ``{region: ConfidenceHistogram}``.

    Returns:
        The arrays, after a ``DeprecationWarning``.
    """
    _deprecated("region_histograms_state", "use monai_unc.state.StateGroup(hists).state_dict()")
    out: dict[str, Any] = {"regions": np.array(list(hists), dtype=np.str_)}
    for i, h in enumerate(hists.values()):
        out.update({f"r{i}__{k}": v for k, v in h.state_dict().items()})
    return out


def region_histograms_from_state(state: Mapping[str, Any]) -> dict[str, ConfidenceHistogram]:
    """Deprecated alias of :func:`region_histograms_of` (the inverse of :func:`region_histograms_state`).

    Args:
        state: the arrays.

    Returns:
        ``region_histograms_of(state)``, after a ``DeprecationWarning``.
    """
    _deprecated("region_histograms_from_state", "use region_histograms_of (or monai_unc.state.StateGroup)")
    return region_histograms_of(state)


def load_region_histograms(path: str | os.PathLike) -> dict[str, ConfidenceHistogram]:
    """Deprecated: the per-region histograms of an ``.npz`` file (either layout of :func:`region_histograms_of`).

    Args:
        path: the ``.npz`` file.

    Returns:
        ``region_histograms_of(read_npz(path))``, after a ``DeprecationWarning``.
    """
    _deprecated("load_region_histograms", "use region_histograms_of(monai_unc.state.read_npz(path))")
    return region_histograms_of(read_npz(path))


def remove_stale_maps(folder: str | os.PathLike, rows: Sequence[Mapping[str, Any]]) -> list[Path]:
    """Remove the files of ``<folder>`` that no row's ``derived`` names: the maps of an earlier run's cases.

    After a rerun with other cases, or with map files where there were none, ``maps/`` holds only the maps of the
    cases of this run (those of ``triage.json``, or of ``metrics.csv`` for ``evaluate``), so no earlier map passes for
    one of them (found by hostile testing: ``evaluate`` kept an earlier run's derived maps beside this run's).

    Args:
        folder: the folder of the derived maps (``<output>/maps``; a missing folder holds nothing).
        rows: the rows of this run, each with its ``derived`` ``{measure: file}`` (triage's rows, ``evaluate``'s
            :attr:`CaseResult.derived`).

    Returns:
        The paths removed.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     maps = Path(d) / "maps"
        ...     maps.mkdir()
        ...     for name in ("a_predictive_entropy.nii.gz", "old_predictive_entropy.nii.gz"):
        ...         _ = (maps / name).write_bytes(b"")
        ...     rows = [{"case": "a", "derived": {"predictive_entropy": str(maps / "a_predictive_entropy.nii.gz")}}]
        ...     [p.name for p in remove_stale_maps(maps, rows)], [p.name for p in maps.iterdir()]
        (['old_predictive_entropy.nii.gz'], ['a_predictive_entropy.nii.gz'])
    """
    folder = owned_folder(Path(folder).parent, Path(folder).name)  # not a link: its files are removed
    if not folder.is_dir():
        return []
    keep = {Path(str(name)).name for r in rows for name in (r.get("derived") or {}).values()}  # a name or a path
    gone = [p for p in sorted(folder.iterdir()) if p.is_file() and p.name not in keep]
    for p in gone:
        p.unlink()
    return gone
