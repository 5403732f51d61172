"""Deployment triage: certify a referral rule on labelled cases, then apply it to new unlabelled scans.

Two steps (docs/triage.md):

1. ``monai-unc evaluate ... --target-risk A --delta D`` fits the risk-controlled threshold
   (:func:`monai_unc.metrics.risk_control.risk_controlled_threshold`: SGR, Geifman & El-Yaniv, "Selective
   classification for deep neural networks"; Learn-then-Test, Angelopoulos et al., "Learn then Test: calibrating
   predictive algorithms to achieve risk control") on the calibration cases' triage score and writes it, with
   everything needed to apply it elsewhere, as ``referral_rule.json`` (:class:`ReferralRule`,
   :func:`certify_referral_rule`).
2. ``monai-unc triage`` (:func:`run_triage`) reads the predictions of new cases (``infer`` or ``nnunet-predict``
   outputs; no labels), computes the same case score as ``evaluate`` (:func:`case_score_columns`), the label-free
   quality estimate ``expected_dice`` when probabilities exist (:func:`monai_unc.metrics.quality.expected_dice`) and
   intensity statistics of the images when given (:func:`image_statistics` of every channel,
   :func:`read_image_channels`), and applies the rule (:meth:`ReferralRule.apply`): ``accept`` or ``review``, with
   the reason.

Region-based (multi-label sigmoid) models: ``evaluate --regions`` certifies a rule that records the region spec
(:attr:`ReferralRule.regions`, ``format_version`` 2); triage reads the predictions per region and scores them with
:func:`monai_unc.evaluation.region_case.region_score_columns`, the function ``evaluate --regions`` uses (the combined
case score is the mean over the regions of the per-region scores), and refuses predictions whose recorded regions
differ from the rule's (:func:`prediction_regions`, :func:`region_differences`).

The guarantee (with probability at least ``1 - delta`` over the calibration draw, the mean risk of the accepted
new cases is at most ``target_risk``) holds only for new cases exchangeable with the calibration cases: the same
model and prediction settings, the same kind of scans. Two cheap guards catch the most common ways to break it:

- **prediction fingerprint** (:func:`prediction_fingerprint`): how the predictions were made, read from the
  records ``infer`` writes (``infer.json``, ``<case>.json``) or ``nnunet-predict`` writes
  (``uncertainty_config.json``, ``uncertainty/<case>.json``): model / checkpoint / trainer identity, sampling
  method, number of samples, measures, sliding-window size and overlap, activation, temperature. Triage refuses
  predictions whose fingerprint differs from the rule's (:class:`FingerprintMismatch`) unless told otherwise;
- **out-of-range guard** in :meth:`ReferralRule.apply`: a case whose score lies outside the range of the
  calibration scores, or whose image statistics are far from the calibration images' (robust z-score
  ``|x - median| / (1.4826 MAD)`` above :data:`IMAGE_Z_MAX` for any statistic, :class:`ImageReference`), is marked
  ``review`` with the reason, never accepted.

:func:`run_triage` runs on one process or under ``torchrun`` (each rank triages a shard of the cases, rank 0 applies
the rule and writes the files), keeps a per-case state under ``<output>/state/cases/`` (an interrupted run resumes;
a rerun with another rule reuses the per-case work) and reports failing cases without stopping the others, like
:func:`monai_unc.evaluation.run_evaluate`. The HTML page is written by
:func:`monai_unc.report.triage.build_triage_page`.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from tqdm.auto import tqdm

from .. import __version__
from ..distributed import (
    CaseFailure,
    CasesFailed,
    broadcast_object,
    check_each_case_once,
    check_same_cases,
    error_line,
    failure_reporter,
    gather_objects,
    get_dist_context,
    shard,
    sync_errors,
    write_failures,
)
from ..io import (
    GEOMETRY_ATOL,
    LAYOUTS,
    CaseError,
    CaseFiles,
    atomic_write_json,
    atomic_write_text,
    check_output_folder,
    clean_partial_files,
    image_channel_files,
    json_safe,
    load_case,
    match_cases,
    read_json_or_none,
    read_prediction_regions,
    read_volume,
)
from ..keys import MEASURES, UncertaintyKeys
from ..metrics.quality import expected_dice, quality_estimates
from ..regions import check_regions, parse_regions
from ..scores import CASE_SCORES, case_score_columns
from .case import derived_maps
from .cohort import CohortState, triage_order
from .config import STATE_DIR, EvaluationConfig, region_suffix, slug
from .region_case import predicted_regions, region_score_columns
from .resume import CASES_DIR, file_signature

__all__ = [
    "RULE_FILE",
    "RULE_FORMAT",
    "RULE_VERSION",
    "SCORE_AGGREGATIONS",
    "IMAGE_FEATURES",
    "IMAGE_Z_MAX",
    "IMAGE_CHANNEL_FILES",
    "TRIAGE_FILES",
    "Decision",
    "ImageReference",
    "ReferralRule",
    "FingerprintMismatch",
    "TriageResult",
    "case_score_columns",
    "parse_score_column",
    "image_statistics",
    "read_image_channels",
    "prediction_fingerprint",
    "compare_fingerprints",
    "prediction_regions",
    "region_differences",
    "certify_referral_rule",
    "write_referral_rule",
    "find_prediction_cases",
    "triage_case",
    "run_triage",
    "remove_triage_files",
]

#: file name of the rule in an evaluation folder
RULE_FILE = "referral_rule.json"
#: ``format`` entry of a rule file, and its version (a reader refuses other formats and newer versions)
RULE_FORMAT = "monai-unc referral rule"
#: the newest ``format_version`` this version reads and writes: 2 for a rule of a region-based model (it records the
#: region spec, which a reader of version 1 would ignore), 1 for every other rule (readable by older versions)
RULE_VERSION = 2
#: case-score aggregations of a measure, as ``evaluate`` names its columns ``<measure>_<aggregation>``
SCORE_AGGREGATIONS = CASE_SCORES
#: intensity statistics per image channel, inside the non-zero region (:func:`image_statistics`)
IMAGE_FEATURES = ("mean", "std", "p01", "p50", "p99")
#: how images in nnU-Net's channel naming are read for their statistics (:func:`read_image_channels`)
IMAGE_CHANNEL_FILES = ("all", "first")
#: default robust z-score above which a case's image counts as far from the calibration images
IMAGE_Z_MAX = 5.0
#: scale of the MAD that makes it a consistent estimate of a normal standard deviation
_MAD_TO_SD = 1.4826
#: floor of an image statistic's scale, as a fraction of the median p01-p99 intensity range of its channel
_SCALE_FLOOR = 0.02
#: files :func:`run_triage` writes (besides ``state/`` and ``failures.json``), and the page of the report
TRIAGE_FILES = ("triage.csv", "triage.json", "triage.html")
_STATE_FORMAT = 1


# ----------------------------------------------------------------------------------------------------------------
# case scores, image statistics
# ----------------------------------------------------------------------------------------------------------------
def parse_score_column(column: str) -> tuple[str, str]:
    """``(measure, aggregation)`` of a score column such as ``"predictive_entropy_fg_mean"``; ``ValueError`` for a
    column that is not ``<measure>_<aggregation>`` with a measure of :data:`monai_unc.keys.MEASURES` and an
    aggregation of :data:`SCORE_AGGREGATIONS`."""
    for agg in sorted(SCORE_AGGREGATIONS, key=len, reverse=True):  # fg_mean before mean
        if column.endswith(f"_{agg}") and column[: -len(agg) - 1] in MEASURES:
            return column[: -len(agg) - 1], agg
    raise ValueError(f"score column {column!r} is not <measure>_<aggregation> with a measure in {MEASURES} and an "
                     f"aggregation in {SCORE_AGGREGATIONS}")


def image_statistics(image: np.ndarray) -> np.ndarray:
    """Intensity statistics of an image ``(C, *spatial)``: per channel the mean, standard deviation and the 1st,
    50th and 99th percentiles (:data:`IMAGE_FEATURES`) of the voxels inside the non-zero region (voxels where any
    channel is non-zero: the head of a skull-stripped MR, the field of view of a padded scan; every voxel when the
    image is zero everywhere). Returns ``(C * 5,)`` float64, channel-major. Cheap: one pass plus a partition."""
    img = np.asarray(image)
    if img.ndim < 2:
        raise ValueError(f"image must be (C, *spatial), got shape {img.shape}")
    if not np.isfinite(img).all():
        raise ValueError("image contains NaN or inf")
    region = (img != 0).any(axis=0)
    if not region.any():
        region = np.ones(img.shape[1:], dtype=bool)
    out = []
    for c in range(img.shape[0]):
        v = img[c][region].astype(np.float64)
        p01, p50, p99 = np.percentile(v, (1, 50, 99))
        out += [v.mean(), v.std(), p01, p50, p99]
    return np.asarray(out, dtype=np.float64)


def read_image_channels(
    path: str | os.PathLike,
    channel_files: str = "all",
    geometry: tuple[Sequence[int], np.ndarray] | None = None,
    case_id: str = "",
) -> np.ndarray:
    """The image ``(C, *spatial)`` of a case whose image file is ``path``, every channel stacked: with
    ``channel_files="all"`` and nnU-Net's channel naming (``path`` is ``CASE_0000.<ext>``) the channel files
    ``CASE_0000``, ``CASE_0001``, ... (:func:`monai_unc.io.image_channel_files`) read one by one and concatenated,
    otherwise the one file (a 4D NIfTI gives its channels). ``geometry`` ``(spatial shape, affine)``: every file must
    have it (affine within :data:`monai_unc.io.GEOMETRY_ATOL` mm), else ``CaseError``; by default the first file's."""
    if channel_files not in IMAGE_CHANNEL_FILES:
        raise ValueError(f"channel_files must be one of {IMAGE_CHANNEL_FILES}, got {channel_files!r}")
    paths = image_channel_files(path) if channel_files == "all" else (Path(path),)
    who = f"case {case_id!r}: " if case_id else ""
    parts = []
    for p in paths:
        data, aff = read_volume(p)
        if geometry is None:
            geometry = (data.shape[1:], aff)
        shape, ref_aff = geometry
        if tuple(data.shape[1:]) != tuple(shape):
            raise CaseError(f"{who}image {p.name} has spatial shape {tuple(data.shape[1:])}, expected {tuple(shape)}")
        if not np.allclose(aff, ref_aff, atol=GEOMETRY_ATOL, rtol=0):
            raise CaseError(f"{who}image {p.name} is not in the space of the case's other volumes (affines differ by "
                            f"{float(np.abs(aff - ref_aff).max()):.4g} mm)")
        parts.append(data.astype(np.float32, copy=False))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def image_feature_names(n_channels: int) -> tuple[str, ...]:
    """Names of :func:`image_statistics`' entries: ``mean``, ``std``, ... (``c1_mean`` ... for more channels)."""
    if n_channels == 1:
        return IMAGE_FEATURES
    return tuple(f"c{c}_{f}" for c in range(n_channels) for f in IMAGE_FEATURES)


@dataclass(frozen=True)
class ImageReference:
    """Where the calibration images lie: per statistic of :func:`image_statistics` the median over the calibration
    cases and a robust scale ``max(1.4826 MAD, 0.02 R_c, 1e-12)``, where ``R_c`` is the median over the calibration
    cases of the channel's ``p99 - p01`` intensity range (the floor keeps a statistic that happens to be (nearly)
    equal on every calibration image, such as the 1st percentile of images that all start at 0, from flagging
    every new case: a statistic must move by at least ``z_max * 2 %`` of the typical intensity range to count).
    :meth:`z_scores` gives the robust z-score ``|x - median| / scale`` of new cases; a case with any z-score above
    ``z_max`` is far from the calibration images. With fewer than about five calibration images the reference is
    crude (docs/triage.md).

    ``channel_files``: how an image in nnU-Net's channel naming (``CASE_0000``, ``CASE_0001``, ...) is read
    (:func:`read_image_channels`): ``"all"`` every channel file (what :func:`certify_referral_rule` fits), ``"first"``
    only ``CASE_0000`` (rules certified before multi-channel reading; read from a rule file without the field).
    Images holding every channel in one file read the same either way.
    """

    features: tuple[str, ...]
    median: tuple[float, ...]
    scale: tuple[float, ...]
    n_cases: int
    z_max: float = IMAGE_Z_MAX
    channel_files: str = "all"

    def __post_init__(self) -> None:
        if self.channel_files not in IMAGE_CHANNEL_FILES:
            raise ValueError(f"channel_files must be one of {IMAGE_CHANNEL_FILES}, got {self.channel_files!r}")

    @classmethod
    def fit(cls, stats: np.ndarray, z_max: float = IMAGE_Z_MAX) -> ImageReference:
        """The reference of ``stats`` ``(N, 5 C)``: one row of :func:`image_statistics` per calibration case."""
        s = np.asarray(stats, dtype=np.float64)
        n_f = len(IMAGE_FEATURES)
        if s.ndim != 2 or s.shape[0] < 1 or s.shape[1] < n_f or s.shape[1] % n_f:
            raise ValueError(f"stats must be (N, {n_f} C) rows of image_statistics with N >= 1, got shape {s.shape}")
        if not np.isfinite(s).all():
            raise ValueError("stats must be finite")
        if isinstance(z_max, bool) or not isinstance(z_max, (int, float)) or not z_max > 0:
            raise ValueError(f"z_max must be a positive number, got {z_max!r}")
        n_ch = s.shape[1] // n_f
        med = np.median(s, axis=0)
        mad = np.median(np.abs(s - med), axis=0)
        per_ch = s.reshape(s.shape[0], n_ch, n_f)
        spread = np.median(per_ch[..., IMAGE_FEATURES.index("p99")] - per_ch[..., IMAGE_FEATURES.index("p01")], 0)
        floor = np.repeat(_SCALE_FLOOR * spread, n_f)
        scale = np.maximum(np.maximum(_MAD_TO_SD * mad, floor), 1e-12)
        return cls(image_feature_names(n_ch), tuple(float(v) for v in med), tuple(float(v) for v in scale),
                   int(s.shape[0]), float(z_max))

    def z_scores(self, stats: np.ndarray) -> np.ndarray:
        """Robust z-scores ``|x - median| / scale`` of ``stats`` ``(N, F)`` (or ``(F,)``), same shape."""
        s = np.asarray(stats, dtype=np.float64)
        if s.shape[-1] != len(self.features):
            raise ValueError(f"stats have {s.shape[-1]} entries per case, the reference {len(self.features)} "
                             f"({', '.join(self.features)}): the images have another number of channels")
        return np.abs(s - np.asarray(self.median)) / np.asarray(self.scale)

    def to_json(self) -> dict[str, Any]:
        return {"features": list(self.features), "median": list(self.median), "scale": list(self.scale),
                "n_cases": self.n_cases, "z_max": self.z_max, "channel_files": self.channel_files}

    @classmethod
    def from_json(cls, d: Any, where: str = "image_reference") -> ImageReference:
        if not isinstance(d, Mapping):
            raise ValueError(f"{where} must be an object, got {type(d).__name__}")
        feats = _field(d, "features", where, list)
        med = [_number(v, f"{where}.median") for v in _field(d, "median", where, list)]
        scale = [_number(v, f"{where}.scale") for v in _field(d, "scale", where, list)]
        if not (len(feats) == len(med) == len(scale)) or not feats:
            raise ValueError(f"{where}: features, median and scale must be non-empty lists of one length")
        if any(s <= 0 for s in scale):
            raise ValueError(f"{where}.scale must be positive")
        z_max = _number(_field(d, "z_max", where), f"{where}.z_max")
        if z_max <= 0:
            raise ValueError(f"{where}.z_max must be positive, got {z_max}")
        n = _field(d, "n_cases", where, int)
        mode = d.get("channel_files", "first")  # rules written before every channel file was read
        if mode not in IMAGE_CHANNEL_FILES:
            raise ValueError(f"{where}.channel_files must be one of {IMAGE_CHANNEL_FILES}, got {mode!r}")
        return cls(tuple(str(f) for f in feats), tuple(med), tuple(scale), int(n), z_max, mode)


# ----------------------------------------------------------------------------------------------------------------
# the rule
# ----------------------------------------------------------------------------------------------------------------
class Decision(NamedTuple):
    """The rule's verdict on one case: ``decision`` ``"accept"`` or ``"review"``, a human-readable ``reason`` and
    the ``code`` of the first reason (``accepted``, ``not_certified``, ``undefined_score``, ``outside_range``,
    ``image_statistics``, ``above_threshold``)."""

    decision: str
    reason: str
    code: str

    @property
    def accepted(self) -> bool:
        return self.decision == "accept"


def _field(d: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...] | None = None) -> Any:
    if key not in d:
        raise ValueError(f"{where}: field {key!r} is missing")
    v = d[key]
    if kind is not None and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ValueError(f"{where}: field {key!r} must be {names}, got {v!r}")
    return v


def _number(v: Any, where: str, allow_null: bool = False) -> float:
    if v is None and allow_null:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise ValueError(f"field {where!r} must be a finite number{' or null' if allow_null else ''}, got {v!r}")
    return float(v)


def _fmt(v: float) -> str:
    return f"{v:.6g}"


@dataclass
class ReferralRule:
    """A risk-controlled referral rule, certified on labelled calibration cases, to apply to new cases.

    Accept a new case when its triage score is at most ``threshold`` *and* lies inside the calibration score range
    *and* (with an image reference and images) its image statistics are within ``z_max`` robust standard deviations
    of the calibration images'; refer it for review otherwise (:meth:`apply`). With probability at least
    ``1 - delta`` over the draw of the calibration cases, the mean ``risk`` of the accepted new cases is at most
    ``target_risk``, for new cases exchangeable with the calibration cases (docs/triage.md, docs/referral_threshold.md).

    Attributes:
        score: the triage score column, ``<measure>_<aggregation>`` (e.g. ``predictive_entropy_fg_mean``).
        measure, aggregation: its parts (:func:`parse_score_column`); ``region``: the class / region the score is
            restricted to (``None``: the whole volume, the only kind ``evaluate`` writes today).
        patch_size: box size of the ``patch`` aggregation (voxels).
        map_source: ``"file"`` (the measure's map files) or ``"probabilities"`` (derived from the probabilities, as
            ``evaluate`` does when no map is given).
        threshold: accept ``score <= threshold``; ``inf``: every calibration case was accepted; ``-inf``: the target
            could not be certified (``feasible=False``) and every case is referred.
        target_risk, delta, method (``sgr`` / ``ltt``), risk (``failure`` / ``1-dice``), failure_dice: the
            certification (:func:`monai_unc.metrics.risk_control.risk_controlled_threshold`).
        bound, coverage, observed_risk, n_candidates: its outcome on the calibration cases (bound on the selective
            risk; fraction accepted; mean risk of the accepted calibration cases).
        calibration_cases: ids; calibration_scores: their defined scores, sorted; n_undefined: how many calibration
            cases had an undefined score (e.g. an empty predicted foreground for ``fg_mean``).
        num_classes, class_names: of the segmentation (for a region-based model ``num_classes`` is the number of
            regions and ``class_names`` is None).
        regions: the region spec ``{name: [label, ...]}`` (channel order) of a region-based (multi-label sigmoid)
            model, certified by ``evaluate --regions``; None for a class-based model. With regions the score is the
            combined case score of :func:`~monai_unc.evaluation.region_case.region_score_columns` (the mean over the
            regions of the per-region scores), the predictions are read with ``load_case(..., multilabel=True)``
            and their recorded regions must agree with these (:func:`region_differences`).
        image_reference: statistics of the calibration images (:class:`ImageReference`), or None.
        fingerprint: how the calibration predictions were made (:func:`prediction_fingerprint`).
        created, version: when and by which monai-unc version.
    """

    score: str
    threshold: float
    feasible: bool
    target_risk: float
    delta: float
    method: str
    risk: str
    failure_dice: float
    calibration_scores: tuple[float, ...]
    calibration_cases: tuple[str, ...]
    bound: float = math.nan
    coverage: float = math.nan
    observed_risk: float = math.nan
    n_candidates: int = 0
    n_undefined: int = 0
    patch_size: int = 10
    map_source: str = "file"
    region: str | None = None
    num_classes: int | None = None
    class_names: tuple[str, ...] | None = None
    image_reference: ImageReference | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    version: str = __version__
    regions: dict[str, list[int]] | None = None

    def __post_init__(self) -> None:
        if self.regions is not None:
            try:
                self.regions = {k: list(v) for k, v in check_regions(self.regions, "regions").items()}
            except TypeError as e:
                raise ValueError(str(e)) from None
        self.validate()

    # -- properties --------------------------------------------------------------------------------------------
    @property
    def measure(self) -> str:
        return parse_score_column(self.score)[0]

    @property
    def aggregation(self) -> str:
        return parse_score_column(self.score)[1]

    @property
    def n_calibration(self) -> int:
        return len(self.calibration_cases)

    @property
    def score_range(self) -> tuple[float, float] | None:
        """``(min, max)`` of the defined calibration scores (None when no calibration score is defined)."""
        if not self.calibration_scores:
            return None
        return float(self.calibration_scores[0]), float(self.calibration_scores[-1])

    @property
    def region_names(self) -> list[str]:
        """The region names in channel order (empty for a class-based rule)."""
        return [] if self.regions is None else list(self.regions)

    @property
    def risk_definition(self) -> str:
        """The per-case risk in words: ``"dice < 0.8"`` or ``"1 - dice"`` (for a region-based rule the Dice is the
        mean over the regions, ``"mean region dice < 0.8"``)."""
        dice = "dice" if self.regions is None else "mean region dice"
        return f"{dice} < {self.failure_dice:g}" if self.risk == "failure" else f"1 - {dice}"

    def guarantee(self) -> str:
        """One sentence: what the rule promises, and under which assumption."""
        if not self.feasible:
            return (f"no threshold certifies mean risk ({self.risk_definition}) <= {self.target_risk:g} with "
                    f"probability {1 - self.delta:g} on these {self.n_calibration} calibration cases (best bound "
                    f"{_fmt(self.bound)}): every case is referred")
        return (f"with probability at least {1 - self.delta:g} over the draw of the {self.n_calibration} "
                f"calibration cases, the mean risk ({self.risk_definition}) of the accepted new cases is at most "
                f"{self.target_risk:g}, provided the new cases are exchangeable with the calibration cases "
                f"({self.method.upper()}; calibration: coverage {self.coverage:.3f}, observed risk "
                f"{_fmt(self.observed_risk)}, bound {_fmt(self.bound)})")

    # -- checks ------------------------------------------------------------------------------------------------
    def validate(self) -> None:
        """``ValueError`` naming the field that is wrong."""
        parse_score_column(self.score)
        if not isinstance(self.feasible, bool):
            raise ValueError(f"feasible must be a bool, got {self.feasible!r}")
        thr = float(self.threshold)
        if math.isnan(thr):
            raise ValueError("threshold must be a number, got NaN")
        if self.feasible == (thr == -math.inf):
            raise ValueError(f"threshold {thr} and feasible={self.feasible} disagree: -inf means 'not certified'")
        for name in ("target_risk", "delta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
                raise ValueError(f"{name} must be a number in (0, 1), got {v!r}")
        if self.method not in ("sgr", "ltt"):
            raise ValueError(f"method must be 'sgr' or 'ltt', got {self.method!r}")
        if self.risk not in ("failure", "1-dice"):
            raise ValueError(f"risk must be 'failure' or '1-dice', got {self.risk!r}")
        if not 0 <= self.failure_dice <= 1:
            raise ValueError(f"failure_dice must be in [0, 1], got {self.failure_dice!r}")
        scores = np.asarray(self.calibration_scores, dtype=np.float64)
        if not np.isfinite(scores).all() or (np.diff(scores) < 0).any():
            raise ValueError("calibration_scores must be finite and sorted ascending")
        if len(self.calibration_cases) != len(scores) + self.n_undefined or not self.calibration_cases:
            raise ValueError(f"calibration_cases lists {len(self.calibration_cases)} case(s), but there are "
                             f"{len(scores)} calibration score(s) and {self.n_undefined} undefined one(s)")
        if isinstance(self.patch_size, bool) or not isinstance(self.patch_size, int) or self.patch_size < 1:
            raise ValueError(f"patch_size must be a positive integer, got {self.patch_size!r}")
        if self.map_source not in ("file", "probabilities"):
            raise ValueError(f"map_source must be 'file' or 'probabilities', got {self.map_source!r}")
        if self.region is not None:
            raise ValueError(f"region {self.region!r}: scores restricted to one region are not supported yet "
                             "(null = the whole volume)")
        least = 2 if self.regions is None else 1  # a region-based model may have one region
        if self.num_classes is not None and (not isinstance(self.num_classes, int) or self.num_classes < least):
            raise ValueError(f"num_classes must be an integer >= {least}, got {self.num_classes!r}")
        if self.class_names is not None and self.num_classes is not None and len(self.class_names) != self.num_classes:
            raise ValueError(f"class_names has {len(self.class_names)} names for {self.num_classes} classes")
        if self.regions is not None:
            if self.class_names is not None:
                raise ValueError("class_names does not apply with regions: the regions name the channels")
            if self.num_classes is not None and self.num_classes != len(self.regions):
                raise ValueError(f"num_classes ({self.num_classes}) must be the number of regions "
                                 f"({len(self.regions)}) with regions")
            sfx = [region_suffix(n) for n in self.regions]
            if len(set(sfx)) != len(sfx):
                raise ValueError(f"regions: the region names {list(self.regions)} give the same column names {sfx}")
        if not isinstance(self.fingerprint, dict):
            raise ValueError(f"fingerprint must be a dict, got {type(self.fingerprint).__name__}")

    # -- applying ----------------------------------------------------------------------------------------------
    def apply(self, scores: Any, image_stats: Any = None) -> list[Decision]:
        """The decision on each new case (in the order given).

        Args:
            scores: ``(N,)`` triage scores of the new cases (NaN = undefined).
            image_stats: ``(N, F)`` rows of :func:`image_statistics` (a row of NaN, or a None row in a list, skips
                the check for that case), or None (no image check). Ignored when the rule has no image reference.

        A case is accepted only when the rule is certified, its score is defined, inside the calibration score range
        (inclusive) and at most the threshold, and its image statistics are within ``z_max``; every reason that
        applies is listed (``"; "``-joined), the first one gives the ``code``.
        """
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        ref = self.image_reference
        z = None
        if image_stats is not None and ref is not None:
            rows = [np.full(len(ref.features), np.nan) if r is None else r for r in image_stats]
            stats = np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
            if stats.shape[0] != s.size:
                raise ValueError(f"image_stats has {stats.shape[0]} rows for {s.size} scores")
            z = ref.z_scores(stats)
        rng = self.score_range
        out = []
        for i, v in enumerate(s):
            reasons: list[tuple[str, str]] = []
            if not self.feasible:
                reasons.append(("not_certified", "rule not certified: every case is referred"))
            if not math.isfinite(v):
                reasons.append(("undefined_score", "score undefined (e.g. empty predicted foreground)"))
            else:
                if rng is None:
                    reasons.append(("outside_range", "no calibration case had a defined score"))
                elif v < rng[0] or v > rng[1]:
                    side = "below" if v < rng[0] else "above"
                    reasons.append(("outside_range", f"score {_fmt(v)} {side} the calibration range "
                                    f"[{_fmt(rng[0])}, {_fmt(rng[1])}]"))
            if z is not None and ref is not None and np.isfinite(z[i]).all() and z[i].max() > ref.z_max:
                far = [f"{n} z={zz:.1f}" for n, zz in zip(ref.features, z[i]) if zz > ref.z_max]
                reasons.append(("image_statistics", f"image far from the calibration images ({', '.join(far)} > "
                                f"{ref.z_max:g})"))
            if self.feasible and math.isfinite(v) and v > self.threshold:
                reasons.append(("above_threshold", f"score {_fmt(v)} > threshold {_fmt(self.threshold)}"))
            if reasons:
                out.append(Decision("review", "; ".join(r for _, r in reasons), reasons[0][0]))
            else:
                thr = "" if self.threshold == math.inf else f" <= threshold {_fmt(self.threshold)}"
                out.append(Decision("accept", f"score {_fmt(v)}{thr}, in the calibration range", "accepted"))
        return out

    # -- files ---------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The rule as strict-JSON data (``threshold``: a number, or null with ``accept_all`` telling ``inf`` (true)
        from ``-inf``, i.e. not certified (false))."""
        rng = self.score_range
        measure, agg = parse_score_column(self.score)
        return {
            "format": RULE_FORMAT,
            "format_version": 1 if self.regions is None else 2,
            "created": self.created,
            "monai_unc_version": self.version,
            "score": {"column": self.score, "measure": measure, "aggregation": agg, "region": self.region,
                      "patch_size": self.patch_size, "map_source": self.map_source},
            "decision": "accept when score <= threshold, inside the calibration score range and (with an image "
                        "reference) image statistics within z_max; review otherwise",
            "feasible": self.feasible,
            "threshold": self.threshold if math.isfinite(self.threshold) else None,
            "accept_all": self.threshold == math.inf,
            "target_risk": self.target_risk,
            "delta": self.delta,
            "method": self.method,
            "risk": self.risk,
            "risk_definition": self.risk_definition,
            "failure_dice": self.failure_dice,
            "guarantee": self.guarantee(),
            "calibration": {
                "n_cases": self.n_calibration,
                "cases": list(self.calibration_cases),
                "score_range": None if rng is None else list(rng),
                "scores": list(self.calibration_scores),
                "n_undefined": self.n_undefined,
                "coverage": self.coverage,
                "observed_risk": self.observed_risk,
                "bound": self.bound,
                "n_candidates": self.n_candidates,
            },
            "num_classes": self.num_classes,
            "class_names": None if self.class_names is None else list(self.class_names),
            "regions": None if self.regions is None else {k: list(v) for k, v in self.regions.items()},
            "image_reference": None if self.image_reference is None else self.image_reference.to_json(),
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_json(cls, d: Any, source: str = "rule") -> ReferralRule:
        """Read :meth:`to_json` data; ``ValueError`` naming the bad field (``source`` prefixes the message)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"{source}: expected a JSON object, got {type(d).__name__}")
        fmt = d.get("format")
        if fmt != RULE_FORMAT:
            raise ValueError(f"{source}: not a referral rule (field 'format' is {fmt!r}, expected {RULE_FORMAT!r})")
        ver = _field(d, "format_version", source, int)
        if ver > RULE_VERSION or ver < 1:
            raise ValueError(f"{source}: format_version {ver} is not supported (this monai-unc reads up to "
                             f"{RULE_VERSION}); upgrade monai-unc")
        try:
            sc = _field(d, "score", source, dict)
            cal = _field(d, "calibration", source, dict)
            feasible = _field(d, "feasible", source, bool)
            thr_raw = _field(d, "threshold", source)
            accept_all = _field(d, "accept_all", source, bool)
            if thr_raw is None:
                threshold = math.inf if accept_all else -math.inf
            else:
                threshold = _number(thr_raw, "threshold")
                if accept_all:
                    raise ValueError(f"{source}: field 'accept_all' is true but 'threshold' is {thr_raw!r}")
            names = d.get("class_names")
            ref = d.get("image_reference")
            fp = _field(d, "fingerprint", source, dict)
            n_cls = d.get("num_classes")
            regions = d.get("regions")
            if regions is not None:
                regions = _field(d, "regions", source, dict)
                if ver < 2:
                    raise ValueError(f"{source}: a rule with regions must have format_version 2, got {ver}")
            return cls(
                score=_field(sc, "column", f"{source}: score", str),
                threshold=threshold,
                feasible=feasible,
                target_risk=_number(_field(d, "target_risk", source), "target_risk"),
                delta=_number(_field(d, "delta", source), "delta"),
                method=_field(d, "method", source, str),
                risk=_field(d, "risk", source, str),
                failure_dice=_number(_field(d, "failure_dice", source), "failure_dice"),
                calibration_scores=tuple(_number(v, "calibration.scores")
                                         for v in _field(cal, "scores", f"{source}: calibration", list)),
                calibration_cases=tuple(str(c) for c in _field(cal, "cases", f"{source}: calibration", list)),
                bound=_number(cal.get("bound"), "calibration.bound", allow_null=True),
                coverage=_number(cal.get("coverage"), "calibration.coverage", allow_null=True),
                observed_risk=_number(cal.get("observed_risk"), "calibration.observed_risk", allow_null=True),
                n_candidates=int(cal.get("n_candidates") or 0),
                n_undefined=_field(cal, "n_undefined", f"{source}: calibration", int),
                patch_size=_field(sc, "patch_size", f"{source}: score", int),
                map_source=_field(sc, "map_source", f"{source}: score", str),
                region=sc.get("region"),
                num_classes=None if n_cls is None else _field(d, "num_classes", source, int),
                class_names=None if names is None else tuple(str(n) for n in _field(d, "class_names", source, list)),
                image_reference=None if ref is None else ImageReference.from_json(ref, "image_reference"),
                fingerprint=dict(fp),
                created=str(d.get("created", "")),
                version=str(d.get("monai_unc_version", "")),
                regions=regions,
            )
        except ValueError as e:
            msg = str(e)
            raise ValueError(msg if msg.startswith(source) else f"{source}: {msg}") from None

    def save(self, path: str | os.PathLike) -> Path:
        """Write the rule as strict JSON, atomically (temporary name, then rename); returns the path."""
        return atomic_write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> ReferralRule:
        """Read a rule file; ``FileNotFoundError`` when absent, ``ValueError`` naming the problem when the file is
        not valid JSON or a field is missing or wrong."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"referral rule not found: {path} (written by monai-unc evaluate --target-risk)")
        try:
            text = path.read_text(encoding="utf-8")
            d = json.loads(text, parse_constant=_no_constant)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"referral rule {path} is not valid JSON ({e})") from None
        return cls.from_json(d, f"referral rule {path}")


def _no_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"non-standard constant {name}", name, 0)


# ----------------------------------------------------------------------------------------------------------------
# fingerprint of the predictions
# ----------------------------------------------------------------------------------------------------------------
class FingerprintMismatch(ValueError):
    """The predictions were not made like the rule's calibration predictions; ``differences`` lists
    ``(field, rule value, predictions value)``."""

    def __init__(self, differences: Sequence[tuple[str, Any, Any]]) -> None:
        self.differences = list(differences)
        what = "; ".join(f"{k}: {_short(b)} (rule: {_short(a)})" for k, a, b in self.differences[:6])
        more = f" and {len(self.differences) - 6} more" if len(self.differences) > 6 else ""
        super().__init__(f"the predictions were not made like the rule's calibration predictions ({what}{more}); "
                         "certify a rule on predictions made this way, or pass --allow-mismatch (allow_mismatch=True) "
                         "if the difference cannot matter")


def _short(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _one_or_list(values: Sequence[Any]) -> Any:
    uniq = sorted({json.dumps(v, sort_keys=True) for v in values})
    vals = [json.loads(u) for u in uniq]
    return vals[0] if len(vals) == 1 else vals


_TEMPERATURE = re.compile(r"\(temperature \[([^\]]*)\]\)")


def prediction_fingerprint(
    predictions: str | os.PathLike,
    layout: str = "monai-unc",
    case_ids: Sequence[str] | None = None,
    uncertainty: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """How the predictions in ``predictions`` were made, from the records their producer wrote.

    - ``monai-unc`` layout (``monai-unc infer``): ``infer.json`` (the run's settings) and the per-case records
      ``<case>.json``: ``model`` (the model's description: example / bundle path / network class, and the temperature
      of a calibrated checkpoint), ``checkpoints``, ``method``, ``num_samples`` (from the case records; the
      ``--samples`` setting when no record is found), ``mi_meaning``, ``measures``, ``roi``, ``overlap``,
      ``activation``, ``temperature``, ``intensity``, ``dropout``, ``tta_noise``, ``ratein_target``, and ``regions``
      for a region-based run (``infer --regions``).
    - ``nnunet`` layout (``monai-unc nnunet-predict``): ``uncertainty_config.json`` and ``uncertainty/<case>.json``:
      ``trainer``, ``folds``, ``method`` (the ``+``-joined sources), ``num_samples``, ``mi_meaning``, ``dropout_p``,
      ``rate_in``, ``posthoc_dropout_after``, ``measures``, ``tile_step_size`` (the overlap), ``mirror_axes``,
      ``segmentation_from``, and ``model_folder`` / ``temperature`` / ``checkpoint`` / ``regions`` /
      ``window_disagreement`` when the config records them.
    - without such records: ``{"producer": "unknown"}`` (a rule then cannot check the predictions; the triage page
      says so).

    The seed is left out on purpose: another seed draws other samples of the same predictive distribution, which
    keeps new cases exchangeable. Values that differ between the cases (e.g. ``num_samples``) become sorted lists.
    Args: ``case_ids``: the cases whose records count (default: every record found).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {layout!r}")
    pred = Path(predictions)
    if layout == "monai-unc":
        doc = read_json_or_none(pred / "infer.json")
        settings = doc.get("settings") if isinstance(doc, dict) else None
        if not isinstance(settings, dict):
            return {"producer": "unknown"}
        rec_dir = pred
        ids = case_ids if case_ids is not None else [p.stem for p in sorted(pred.glob("*.json"))
                                                      if p.name not in ("infer.json", "failures.json")]
        records = [r for r in (read_json_or_none(rec_dir / f"{c}.json") for c in ids) if isinstance(r, dict)]
        model = str(settings.get("model", ""))
        m = _TEMPERATURE.search(model)
        temperature = [float(t) for t in m.group(1).split(",") if t.strip()] if m else None
        fp: dict[str, Any] = {"producer": "monai-unc infer", "model": model,
                              "checkpoints": settings.get("checkpoints"), "method": settings.get("method")}
        fp["num_samples"] = (_one_or_list([r.get("num_samples") for r in records]) if records
                             else settings.get("samples"))
        if records:
            fp["mi_meaning"] = _one_or_list([r.get("mi_meaning") for r in records])
        for k in ("measures", "roi", "overlap", "activation"):
            fp[k] = settings.get(k)
        fp["temperature"] = temperature
        for k in ("intensity", "dropout", "tta_noise", "ratein_target"):
            fp[k] = settings.get(k)
        if settings.get("regions") is not None:  # region-based runs only, so older rules still match
            fp["regions"] = settings["regions"]
        return json.loads(json.dumps(fp))
    cfg = read_json_or_none(pred / "uncertainty_config.json")
    if not isinstance(cfg, dict):
        return {"producer": "unknown"}
    unc = Path(uncertainty) if uncertainty is not None else pred / LAYOUTS["nnunet"]["uncertainty_subdir"]
    ids = case_ids if case_ids is not None else [p.stem for p in sorted(unc.glob("*.json"))]
    records = [r for r in (read_json_or_none(unc / f"{c}.json") for c in ids) if isinstance(r, dict)]
    fp = {"producer": "nnunet-predict"}
    for k in ("model_folder", "checkpoint", "fold_ids", "plans", "configuration"):
        if k in cfg:
            fp[k] = cfg[k]
    fp["trainer"] = cfg.get("trainer_name")
    fp["folds"] = cfg.get("folds")
    fp["method"] = "+".join(cfg.get("uncertainty_sources") or [])
    fp["num_samples"] = (_one_or_list([r.get("num_samples") for r in records]) if records
                         else cfg.get("num_samples"))
    if records:
        fp["mi_meaning"] = _one_or_list([r.get("mi_meaning") for r in records])
    for k in ("dropout_p", "rate_in", "posthoc_dropout_after", "measures", "tile_step_size", "mirror_axes",
              "segmentation_from"):
        fp[k] = cfg.get(k)
    fp["temperature"] = cfg.get("temperature")
    if cfg.get("regions") is not None:  # region-based models only, so older rules still match
        fp["regions"] = cfg["regions"]
    if "window_disagreement" in cfg:  # how MI was decomposed; configs without it counted window overlap as MI
        fp["window_disagreement"] = cfg["window_disagreement"]
    return json.loads(json.dumps(fp))


def prediction_regions(
    predictions: str | os.PathLike, layout: str = "monai-unc"
) -> dict[str, list[int]] | list[str] | bool | None:
    """What the records of a prediction folder say about regions: ``False`` for class-based (softmax / binary)
    predictions; for region-based ones the region spec ``{name: [label, ...]}`` (channel order) or, when ``infer``
    was not given ``--regions``, the channel names ``["0", "1", ...]`` (``True``: region-based, regions not
    recorded); ``None`` when there is no record.

    ``monai-unc`` layout: :func:`monai_unc.io.read_prediction_regions` (``infer.json`` / the case records; an
    ``infer.json`` without ``multilabel``, written before region-based inference existed, is class-based).
    ``nnunet`` layout: the ``regions`` entry of ``uncertainty_config.json`` (absent or empty: class-based)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {layout!r}")
    pred = Path(predictions)
    if layout == "monai-unc":
        found = read_prediction_regions(pred)
        if found is not None:
            return found.get("regions") or True
        doc = read_json_or_none(pred / "infer.json")
        return False if isinstance(doc, dict) and isinstance(doc.get("settings"), dict) else None
    cfg = read_json_or_none(pred / "uncertainty_config.json")
    if not isinstance(cfg, dict):
        return None
    return cfg.get("regions") or False


def region_differences(
    rule_regions: Mapping[str, Sequence[int]] | None, found: Mapping[str, Sequence[int]] | list[str] | bool | None
) -> list[tuple[str, Any, Any]]:
    """``[("regions", rule's, predictions')]`` when the regions a rule scores cannot be those of the predictions
    (``found``: :func:`prediction_regions`), else ``[]``: a class-based rule on region predictions or the reverse;
    another number of regions; another label set in some channel (a region spec against a recorded spec; the names
    may differ, they only name the columns). Nothing to compare without a record (``found is None``)."""
    if found is None:
        return []
    rule_side: Any = None if rule_regions is None else {k: list(v) for k, v in rule_regions.items()}
    pred_side: Any = None if found is False else found
    if rule_side is None and pred_side is None:
        return []
    if rule_side is None or pred_side is None:
        return [("regions", rule_side, "region-based" if pred_side is True else pred_side)]
    if pred_side is True:
        return []
    if len(pred_side) != len(rule_side):
        return [("regions", rule_side, pred_side)]
    if isinstance(pred_side, Mapping):
        ours = [sorted(int(v) for v in labels) for labels in rule_side.values()]
        theirs = [sorted(int(v) for v in labels) for labels in pred_side.values()]
        if ours != theirs:
            return [("regions", rule_side, pred_side)]
    return []


def compare_fingerprints(rule_fp: Mapping[str, Any], pred_fp: Mapping[str, Any]) -> tuple[str, list]:
    """``(status, differences)``: ``"match"``; ``"mismatch"`` with ``[(field, rule value, predictions value)]``;
    or ``"unverified"`` when neither side has a record of how its predictions were made (nothing to compare: the
    caller must say so). One side unknown and the other known is a mismatch (field ``producer``)."""
    unknown = {"producer": "unknown"}
    if dict(rule_fp) in ({}, unknown) and dict(pred_fp) in ({}, unknown):
        return "unverified", []
    diffs = [(k, rule_fp.get(k), pred_fp.get(k)) for k in sorted(set(rule_fp) | set(pred_fp))
             if rule_fp.get(k) != pred_fp.get(k)]
    if diffs:
        # the producer first: the rest follows from it
        diffs.sort(key=lambda t: t[0] != "producer")
        return "mismatch", diffs
    return "match", []


# ----------------------------------------------------------------------------------------------------------------
# certifying (step 1, inside evaluate)
# ----------------------------------------------------------------------------------------------------------------
def certify_referral_rule(
    state: CohortState,
    summary: Mapping[str, Any],
    config: EvaluationConfig,
    *,
    predictions: str | os.PathLike | None = None,
    layout: str = "monai-unc",
    uncertainty: str | os.PathLike | None = None,
    image_z_max: float = IMAGE_Z_MAX,
) -> ReferralRule:
    """The :class:`ReferralRule` of an evaluation with ``config.target_risk``: the threshold and its certificate from
    ``summary["risk_control"]`` (fitted by :func:`monai_unc.evaluation.summarize` on the calibration cases), the
    calibration cases' scores from ``state``, the statistics of their images when the evaluation had images
    (``state.files``), and the fingerprint of ``predictions`` (:func:`prediction_fingerprint`, the calibration
    cases' records). A region evaluation (``config.regions``) gives a rule with the region spec, whose score is the
    combined case score of the regions (``format_version`` 2). ``ValueError`` when the summary has no
    ``risk_control`` block."""
    rc = summary.get("risk_control")
    if not rc:
        raise ValueError("the summary has no risk_control block: evaluate with a target_risk (--target-risk)")
    column = summary["score"]["column"]
    rows = state.sorted_rows()
    ids = [str(r["case"]) for r in rows]
    cal_ids = ids if rc["calibration"]["cases"] == "all" else [str(c) for c in rc["calibration"]["cases"]]
    by_id = {str(r["case"]): r for r in rows}
    raw = np.array([_as_float(by_id[c].get(column)) for c in cal_ids])
    defined = np.sort(raw[np.isfinite(raw)])
    thr = rc["threshold"]
    threshold = (math.inf if rc["feasible"] else -math.inf) if thr is None else float(thr)
    files = [state.files.get(c) for c in cal_ids]
    map_source = "file" if files and all(f and f.get("maps") for f in files) else "probabilities"
    reference = None
    if files and all(f and f.get("image") for f in files):
        stats = np.stack([image_statistics(read_image_channels(f["image"], "all", case_id=c))  # type: ignore[index]
                          for f, c in zip(files, cal_ids)])
        reference = ImageReference.fit(stats, image_z_max)
    fp = prediction_fingerprint(predictions, layout, cal_ids, uncertainty) if predictions is not None else {}
    names = tuple(config.class_names) if config.class_names else None
    regions = None if config.regions is None else {k: list(v) for k, v in parse_regions(config.regions).items()}
    if predictions is not None:
        diffs = region_differences(regions, prediction_regions(predictions, layout))
        if diffs:
            warnings.warn(f"the evaluation's regions {diffs[0][1]} are not the regions recorded with the predictions "
                          f"{diffs[0][2]}: monai-unc triage will refuse predictions made like these with this rule",
                          UserWarning, stacklevel=2)
    return ReferralRule(
        score=column, threshold=threshold, feasible=bool(rc["feasible"]), target_risk=float(rc["target_risk"]),
        delta=float(rc["delta"]), method=str(rc["method"]), risk=config.risk, failure_dice=config.failure_dice,
        calibration_scores=tuple(float(v) for v in defined), calibration_cases=tuple(cal_ids),
        bound=_as_float(rc.get("bound")), coverage=_as_float(rc["calibration"].get("coverage")),
        observed_risk=_as_float(rc["calibration"].get("risk_accepted")), n_candidates=int(rc.get("n_candidates", 0)),
        n_undefined=int((~np.isfinite(raw)).sum()), patch_size=config.patch_size, map_source=map_source,
        num_classes=state.num_classes, class_names=names, image_reference=reference, fingerprint=fp,
        created=_dt.datetime.now().astimezone().isoformat(timespec="seconds"), regions=regions,
    )


def write_referral_rule(
    output: str | os.PathLike,
    state: CohortState,
    summary: Mapping[str, Any],
    config: EvaluationConfig,
    *,
    predictions: str | os.PathLike | None = None,
    layout: str = "monai-unc",
    uncertainty: str | os.PathLike | None = None,
) -> Path | None:
    """Write ``<output>/referral_rule.json`` (:func:`certify_referral_rule`, atomic, strict JSON) when
    ``config.target_risk`` is set and return its path; otherwise remove a stale one (an earlier evaluation's rule
    must not pass for this one's) and return None. Called by :func:`monai_unc.evaluation.run_evaluate` on rank 0."""
    path = Path(output) / RULE_FILE
    if config.target_risk is None:
        path.unlink(missing_ok=True)
        return None
    rule = certify_referral_rule(state, summary, config, predictions=predictions, layout=layout,
                                 uncertainty=uncertainty)
    return rule.save(path)


def _as_float(v: Any) -> float:
    if v is None or v == "":
        return math.nan
    return float(v)


# ----------------------------------------------------------------------------------------------------------------
# triage of new cases (step 2)
# ----------------------------------------------------------------------------------------------------------------
def find_prediction_cases(
    predictions: str | os.PathLike,
    rule: ReferralRule,
    layout: str = "monai-unc",
    *,
    uncertainty: str | os.PathLike | None = None,
    images: str | os.PathLike | None = None,
    cases: Sequence[str] | None = None,
) -> list[CaseFiles]:
    """The cases of a prediction folder (no labels): every case with a segmentation (``<case>_seg`` for the
    ``monai-unc`` layout, ``<case>.<ext>`` for ``nnunet``), its probabilities when present, the map of the rule's
    measure (or none when the rule's scores were derived from the probabilities) and its image (``images``).
    Found with :func:`monai_unc.io.match_cases`, with the segmentations in the role of the reference, so the files
    of a case are checked against the segmentation's geometry when loaded. ``cases`` keeps only these ids."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {layout!r}")
    pred = Path(predictions)
    if not pred.is_dir():
        raise FileNotFoundError(f"predictions folder not found: {pred}")
    seg_suffix = LAYOUTS[layout]["seg_suffix"]
    measures = [rule.measure] if rule.map_source == "file" else None
    try:
        found = match_cases(pred, pred, layout=layout, label_suffix=seg_suffix, uncertainty=uncertainty,
                            measures=measures, images=images)
    except CaseError as e:
        if "no label volume" in str(e):
            what = f"<case>{seg_suffix}.nii.gz" if seg_suffix else "<case>.nii.gz"
            raise CaseError(f"no segmentation ({what}) found in {pred}: is it the output folder of 'monai-unc infer' "
                            f"(--layout monai-unc) or 'monai-unc nnunet-predict' (--layout nnunet)?") from None
        raise CaseError(str(e).replace(" (use --allow-missing to skip them)", "")) from None
    for f in found:  # absolute paths: triage.json lists them for the page, which may be built from elsewhere
        f.maps = {m: p.resolve() for m, p in f.maps.items() if m == rule.measure} if rule.map_source == "file" else {}
        f.label, f.seg = f.label.resolve(), None if f.seg is None else f.seg.resolve()
        f.probs = None if f.probs is None else f.probs.resolve()
        f.image = None if f.image is None else f.image.resolve()
    if cases is not None:
        wanted = [str(c) for c in cases]
        have = {f.case_id for f in found}
        missing = sorted(set(wanted) - have)
        if missing:
            raise CaseError(f"cases: {len(missing)} case(s) have no prediction in {pred}, e.g. {missing[:5]}")
        found = [f for f in found if f.case_id in set(wanted)]
    if not found:
        raise CaseError(f"no case to triage in {pred}")
    return found


def _triage_fingerprint(files: CaseFiles, rule: ReferralRule) -> dict[str, Any]:
    """What a case's triage row depends on (reused by a rerun only while unchanged): format, version, the rule's
    measure, aggregation inputs (patch size, map source, classes) and the case's files (path, size, times, inode)."""
    fp = {
        "format": _STATE_FORMAT,
        "version": __version__,
        "options": {"measure": rule.measure, "patch_size": rule.patch_size, "map_source": rule.map_source,
                    "num_classes": rule.num_classes, "class_names": rule.class_names, "regions": rule.regions,
                    "channel_files": _channel_files(rule)},
        "inputs": {"seg": file_signature(files.seg), "probs": file_signature(files.probs),
                   "maps": {m: file_signature(p) for m, p in sorted(files.maps.items())},
                   "image": None if files.image is None else [file_signature(p) for p in (
                       image_channel_files(files.image) if _channel_files(rule) == "all" else (files.image,))]},
    }
    return json.loads(json.dumps(fp))


def triage_case(files: CaseFiles, rule: ReferralRule) -> dict[str, Any]:
    """The label-free row of one case: the rule measure's three case scores, ``expected_dice`` of the foreground and
    of each class when probabilities exist (:func:`monai_unc.metrics.quality.expected_dice`), the image statistics
    when the case has an image (``image_stats``), the warnings raised and the case's files. Does not apply the rule.

    Class-based rule: the scores of :func:`case_score_columns`. Region-based rule (``rule.regions``): the case is
    read with ``load_case(..., multilabel=True)`` (region masks or a label map converted with the spec, one map
    channel per region) and scored by :func:`~monai_unc.evaluation.region_case.region_score_columns`, the function
    ``evaluate --regions`` uses: the combined ``<measure>_<score>`` (mean over the regions) and the per-region
    ``<measure>_<score>_<R>``; ``expected_dice`` is the mean over the regions of each region's binary expected Dice
    (:func:`monai_unc.metrics.quality.quality_estimates` with ``multilabel=True``), ``expected_dice_<R>`` per region.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        regions = rule.regions
        case = load_case(files, len(regions) if regions is not None else rule.num_classes, load_image=False,
                         multilabel=regions is not None)
        maps = derived_maps(case)
        if rule.measure not in maps:
            raise CaseError(f"case {case.case_id!r}: no {rule.measure} map to score (the rule scores "
                            f"{rule.score}; available: {sorted(maps) or 'none'})")
        row: dict[str, Any] = {"case": case.case_id}
        if regions is not None:
            names = list(regions)
            u = maps[rule.measure]
            if u.shape[0] != len(names):
                raise CaseError(f"case {case.case_id!r}: the {rule.measure} map has {u.shape[0]} region channel(s) "
                                f"but the rule's regions are {len(names)} ({', '.join(names)})")
            pred = predicted_regions(case, regions)
            row.update(region_score_columns({rule.measure: u}, pred, names, rule.patch_size))
            if case.probs is not None:
                q = quality_estimates({UncertaintyKeys.PRED.value: case.probs[None]}, multilabel=True)["expected_dice"]
                row["expected_dice"] = float(q.foreground[0])
                row.update({f"expected_dice_{region_suffix(n)}": float(q.per_class[0, r]) for r, n in enumerate(names)})
            fg_voxels, voxels = int(pred.any(axis=0).sum()), int(np.prod(pred.shape[1:]))
        else:
            row.update(case_score_columns({rule.measure: maps[rule.measure]}, case.seg, rule.patch_size))
            if case.probs is not None:
                q = expected_dice(case.probs[None], validate=False)
                row["expected_dice"] = float(q.foreground[0])
                n_cls = case.probs.shape[0]
                cls_names = rule.class_names or tuple(str(c) for c in range(n_cls))
                for c in range(1, n_cls):
                    key = slug(cls_names[c]) if c < len(cls_names) else c
                    row[f"expected_dice_{key}"] = float(q.per_class[0, c - 1])
            fg_voxels, voxels = int((case.seg > 0).sum()), int(case.seg.size)
        image = None
        if files.image is not None:  # every channel (file), in the space of the prediction
            image = read_image_channels(files.image, _channel_files(rule), (case.seg.shape[-len(case.spacing):],
                                                                              case.affine), case.case_id)
        row["image_stats"] = None if image is None else image_statistics(image).tolist()
        row["foreground_voxels"] = fg_voxels
        row["voxels"] = voxels
        row["spacing"] = "x".join(f"{s:.4g}" for s in case.spacing)
    row["warnings"] = sorted({f"{case.case_id}: {w.message}" for w in caught if issubclass(w.category, UserWarning)})
    row["files"] = files.to_json()
    return row


def _channel_files(rule: ReferralRule) -> str:
    """How :func:`triage_case` reads channel files: like the rule's calibration images (every file without them)."""
    return rule.image_reference.channel_files if rule.image_reference is not None else "all"


def _load_row(folder: Path, case_id: str, fp: Mapping[str, Any]) -> dict[str, Any] | None:
    doc = read_json_or_none(folder / f"{case_id}.json")
    if not isinstance(doc, dict) or doc.get("fingerprint") != fp or doc.get("case") != case_id:
        return None
    row = doc.get("row")
    return row if isinstance(row, dict) else None


def _triage_shard(
    cases: Sequence[CaseFiles], rule: ReferralRule, cache: Path | None, failures: list[tuple[str, BaseException]],
    on_failure: Any, progress: bool, desc: str,
) -> list[dict[str, Any]]:
    out = []
    bar = tqdm(cases, desc=desc, unit="case", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    for files in bar:
        bar.set_postfix_str(files.case_id)
        try:
            fp = _triage_fingerprint(files, rule)
            row = _load_row(cache, files.case_id, fp) if cache is not None else None
            if row is None:
                row = triage_case(files, rule)
                if cache is not None:
                    text = json.dumps({"case": files.case_id, "fingerprint": fp, "row": row}, allow_nan=True)
                    atomic_write_text(cache / f"{files.case_id}.json", text + "\n")
        except Exception as e:  # an interrupt (KeyboardInterrupt) is not an Exception and stops the run
            failures.append((files.case_id, e))
            on_failure(files.case_id, e)
            continue
        out.append(row)
    return out


@dataclass
class TriageResult:
    """What :func:`run_triage` returns (on every rank): the summary written to ``triage.json`` and the paths."""

    summary: dict[str, Any]
    paths: dict[str, Path]

    @property
    def decisions(self) -> dict[str, str]:
        """``{case: "accept" | "review"}``."""
        return {c["case"]: c["decision"] for c in self.summary["cases"]}


def remove_triage_files(folder: str | os.PathLike) -> None:
    """Remove the outputs of an earlier triage in ``folder`` (``triage.csv``, ``triage.json``, ``triage.html``,
    figures), keeping the per-case state: after a run with failed cases no earlier decisions remain."""
    folder = Path(folder)
    for name in TRIAGE_FILES:
        (folder / name).unlink(missing_ok=True)
    fig = folder / "figures"
    if fig.is_dir():
        for p in fig.glob("*.png"):
            p.unlink()


def _csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    columns: list[str] = []
    for r in rows:
        columns += [k for k in r if k not in columns]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else (repr(v) if isinstance(v, float) and math.isfinite(v)
                                              else ("" if isinstance(v, float) else v))) for k, v in r.items()})
    return buf.getvalue()


def _assemble(
    rows: Sequence[Mapping[str, Any]], rule: ReferralRule, check: Mapping[str, Any], images_given: bool,
    rule_path: str | None,
) -> tuple[dict[str, Any], str]:
    """Apply the rule to the rows (in case-id order): the summary (``triage.json``) and the ``triage.csv`` text."""
    rows = sorted(rows, key=lambda r: str(r["case"]))
    ids = [str(r["case"]) for r in rows]
    scores = np.array([_as_float(r.get(rule.score)) for r in rows])
    notes = []
    stats = None
    if rule.image_reference is not None and images_given:
        stats = [r.get("image_stats") for r in rows]
        image_check = "applied"
    elif rule.image_reference is not None:
        image_check = "skipped: the rule holds statistics of its calibration images, but no images were given"
    elif images_given:
        image_check = "skipped: the rule holds no image statistics (its evaluation had no --images)"
    else:
        image_check = "skipped: neither the rule nor this triage has images"
    if image_check != "applied":
        notes.append(f"image check {image_check}")
    decisions = rule.apply(scores, stats)
    z = None
    if stats is not None and rule.image_reference is not None:
        n_feat = len(rule.image_reference.features)
        z = rule.image_reference.z_scores(np.array([s if s is not None else [np.nan] * n_feat for s in stats]))
    order = triage_order(ids, scores)
    rank = {ids[i]: k + 1 for k, i in enumerate(order)}
    cases, csv_rows = [], []
    for i, (r, d) in enumerate(zip(rows, decisions)):
        zmax = float(np.nanmax(z[i])) if z is not None and np.isfinite(z[i]).any() else None
        entry = {"case": ids[i], "score": _as_float(r.get(rule.score)), "decision": d.decision, "reason": d.reason,
                 "code": d.code, "rank": rank[ids[i]]}
        if "expected_dice" in r:
            entry["expected_dice"] = r["expected_dice"]
        if rule.regions is not None:  # the rule's score per region (its mean over the regions is "score")
            entry["region_scores"] = {n: _as_float(r.get(f"{rule.score}_{region_suffix(n)}")) for n in rule.regions}
        if zmax is not None:
            entry["image_z_max"] = zmax
        cases.append(entry)
        extra = {k: v for k, v in r.items() if k not in ("case", "image_stats", "warnings", "files")}
        csv_rows.append({**{k: entry[k] for k in ("case", "score", "decision", "reason")}, "rank": entry["rank"],
                         "code": d.code, **({"image_z_max": zmax} if zmax is not None else {}), **extra})
    accepted = [c["case"] for c in cases if c["decision"] == "accept"]
    review = [c["case"] for c in cases if c["decision"] == "review"]
    reasons: dict[str, int] = {}
    for c in cases:
        reasons[c["code"]] = reasons.get(c["code"], 0) + 1
    warns = sorted({w for r in rows for w in r.get("warnings", [])})
    summary = {
        "n_cases": len(cases),
        "n_accepted": len(accepted),
        "n_review": len(review),
        "accepted": accepted,
        "review": review,
        "reasons": reasons,
        "order": [ids[i] for i in order],
        "score": rule.score,
        "accepted_risk": {
            "definition": rule.risk_definition,
            "target": rule.target_risk,
            "delta": rule.delta,
            "certified": rule.feasible,
            "calibration_bound": rule.bound,
            "calibration_observed": rule.observed_risk,
            "statement": rule.guarantee(),
        },
        "fingerprint": dict(check),
        "image_check": image_check,
        "notes": notes,
        "rule_file": rule_path,
        "rule": rule.to_json(),
        "cases": cases,
        "files": {str(r["case"]): r.get("files") for r in rows},
        "warnings": warns,
    }
    return summary, _csv_text(csv_rows)


def run_triage(
    predictions: str | os.PathLike,
    rule: ReferralRule | str | os.PathLike,
    output: str | os.PathLike,
    images: str | os.PathLike | None = None,
    allow_mismatch: bool = False,
    layout: str = "monai-unc",
    *,
    uncertainty: str | os.PathLike | None = None,
    cases: Sequence[str] | None = None,
    resume: bool = True,
    progress: bool = False,
    dist: Any = None,
    on_failure: Any = None,
) -> TriageResult:
    """Triage the new (unlabelled) cases of ``predictions`` with ``rule``: the whole of ``monai-unc triage`` except
    the HTML page (:func:`monai_unc.report.triage.build_triage_page`), on one process or on every rank of a process
    group (``torchrun``).

    Every rank lists the cases (:func:`find_prediction_cases`; they must agree), reads the predictions' fingerprint
    and compares it with the rule's, and the rule's regions with the regions recorded with the predictions
    (:func:`region_differences`): a difference raises :class:`FingerprintMismatch` (a ``ValueError``) before any
    work unless ``allow_mismatch`` (then ``triage.json`` and the page record it). Each rank triages its shard
    (:func:`monai_unc.distributed.shard`) with :func:`triage_case`, saving each case's row under
    ``<output>/state/cases/`` with ``resume`` (a rerun, or an interrupted run run again, reuses rows whose files and
    options are unchanged, whatever the rule's threshold). Rank 0 gathers the rows, applies the rule in case-id order
    and writes, atomically, ``triage.csv`` (one row per case: ``case, score, decision, reason`` then ``rank``,
    ``code``, the robust image z-score, the scores and quality estimates) and ``triage.json`` (decisions, reasons,
    the guarantee for the accepted cases, fingerprint check, the rule). A case that raises is reported (one stderr
    line, ``on_failure(CaseFailure)``), the others go on, rank 0 writes ``failures.json`` instead of the triage files,
    and :class:`~monai_unc.distributed.CasesFailed` is raised on every rank at the end.

    Args:
        predictions: output folder of ``monai-unc infer`` (``layout="monai-unc"``) or ``nnunet-predict``
            (``layout="nnunet"``).
        rule: a :class:`ReferralRule` or the path of a ``referral_rule.json``.
        output: output folder (must not lie inside an input folder).
        images: folder of the input images (image-statistics check and overlays).
        uncertainty: folder of the maps when not where the layout puts them.
        cases: triage only these case ids (default: every case in ``predictions``).
    """
    ctx = dist if dist is not None else get_dist_context()
    output = Path(output)
    rule_path = None if isinstance(rule, ReferralRule) else str(Path(rule).resolve())
    cache = output / STATE_DIR / CASES_DIR if resume else None
    found: list[CaseFiles] = []
    check: dict[str, Any] = {}
    err: BaseException | None = None
    try:
        the_rule = rule if isinstance(rule, ReferralRule) else ReferralRule.load(rule)
        check_output_folder(output, predictions, images, uncertainty)
        found = find_prediction_cases(predictions, the_rule, layout, uncertainty=uncertainty, images=images,
                                      cases=cases)
        pred_fp = prediction_fingerprint(predictions, layout, [f.case_id for f in found], uncertainty)
        status, diffs = compare_fingerprints(the_rule.fingerprint, pred_fp)
        if not any(k == "regions" for k, _, _ in diffs):  # the regions the rule scores against the recorded ones
            extra = region_differences(the_rule.regions, prediction_regions(predictions, layout))
            if extra:
                status, diffs = "mismatch", [*diffs, *extra]
        if status == "mismatch" and not allow_mismatch:
            raise FingerprintMismatch(diffs)
        check = {"status": status, "allowed_mismatch": status == "mismatch", "predictions": pred_fp,
                 "differences": [{"field": k, "rule": a, "predictions": b} for k, a, b in diffs]}
        if ctx.is_main:
            output.mkdir(parents=True, exist_ok=True)
            clean_partial_files(output)
            if cache is not None:
                cache.mkdir(parents=True, exist_ok=True)
                clean_partial_files(cache)
    except Exception as e:
        err = e
    sync_errors(err, ctx)
    ids = [f.case_id for f in found]
    check_same_cases(ids, ctx)
    failed = failure_reporter(ctx, "monai-unc triage", on_failure)
    mine = shard(found, ctx.rank, ctx.world_size, key=lambda c: c.case_id)
    local_failures: list[tuple[str, BaseException]] = []
    rows: list[dict[str, Any]] = []
    err = None
    try:
        desc = f"triage ({ctx.describe()})" if ctx.distributed else "triage"
        rows = _triage_shard(mine, the_rule, cache, local_failures, failed, progress and ctx.is_main, desc)
    except Exception as e:  # not a per-case error (those are collected)
        err = e
    sync_errors(err, ctx)
    mine_failed = [CaseFailure(c, ctx.rank, error_line(e)) for c, e in local_failures]
    gathered = gather_objects((rows, mine_failed), ctx)
    outcome: Any = None
    err = None
    if ctx.is_main:
        try:
            assert gathered is not None
            every = [r for part, _ in gathered for r in part]
            failures = [f for _, fs in gathered for f in fs]
            check_each_case_once([str(r["case"]) for r in every] + [f.case for f in failures], ids)
            write_failures(output / "failures.json", failures, "monai-unc triage")
            if failures:
                remove_triage_files(output)  # earlier decisions must not pass for this run's
                outcome = ("failed", failures)
            else:
                summary, csv_text = _assemble(every, the_rule, check, images is not None, rule_path)
                paths = {"csv": atomic_write_text(output / "triage.csv", csv_text),
                         "json": atomic_write_json(output / "triage.json", summary)}
                (output / "triage.html").unlink(missing_ok=True)  # the page of an earlier run is stale now
                outcome = ("ok", json_safe(summary), paths)
        except Exception as e:
            err = e
    sync_errors(err, ctx)
    outcome = broadcast_object(outcome, ctx)
    if outcome[0] == "failed":
        raise CasesFailed(outcome[1])
    return TriageResult(outcome[1], outcome[2])
