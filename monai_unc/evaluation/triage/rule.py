"""The referral rule, its verdict on a case and the reference of the calibration images.

These are :class:`ReferralRule`, :class:`Decision` and :class:`ImageReference`.
"""

from __future__ import annotations

import math
import os
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from ... import __version__
from ..._utils import check_text, is_finite_real, is_int, is_real, real_array, to_numpy
from ...io import atomic_write_json, cell_float, json_safe, provenance
from ...io.provenance import check_digest, check_document, read_checked_json, rule_digest
from ...io.signing import (
    SIGNATURE_FIELD,
    Trust,
    default_signing_key,
    sign_digest,
    trusted_public_keys,
    verify_signature,
)
from ...keys import EXPECTED_DICE_ESTIMATES, LEGACY_REGION_ESTIMATE
from ...metrics.quality import CONFORMAL_ALPHA, ConformalInterval, conformal_interval_core, conformal_quantile_core
from ...metrics.risk_control import P_VALUES, accepted_by_threshold, risk_controlled_threshold_core
from ...product import ThresholdText, format_cell, format_level, format_score, format_target, separating_digits
from ...regions import check_regions
from ..cohort import RISK_CONTROL_CANDIDATES, calibration_risks, failure_dice_text
from ..config import region_suffix, slug
from .images import IMAGE_CHANNEL_FILES, IMAGE_FEATURES, image_feature_names, parse_score_column

#: file name of the rule in an evaluation folder
RULE_FILE = "referral_rule.json"
#: ``format`` entry of a rule file, and its version (a reader refuses other formats and newer versions)
RULE_FORMAT = "monai-unc referral rule"
#: the newest ``format_version`` this version reads and writes: 6 for a rule certified with LTT's exact binomial p-value
#: (``calibration.p_value`` ``"binomial"``: a reader of version 5 would recompute its certificate with the
#: Hoeffding-Bentkus p-value, another certificate), else 5 for a rule of classes whose expected Dice is the mean
#: over the classes (``calibration.expected_dice_estimate`` ``"class_mean"``, every rule of classes ``evaluate``
#: certifies: a reader of version 4 would compute new cases' estimates of the merged foreground, another quantity than
#: the calibration cases', and the interval would lose its guarantee) or of regions whose expected Dice scores a region
#: the segmentation does not hold ``prod (1 - p)`` (``"region_mean"``, every region-based rule ``evaluate`` certifies; a
#: reader of version 4 would score such a region 0), else 4 for a rule whose calibration cases
#: include undefined scores, certified with those cases counted as referred (``calibration.undefined_score`` null; a
#: reader of version 3 would recompute its certificate with them ranked above every defined score, i.e. as another
#: certificate), 3 for every other rule that records its calibration cases' scores, Dice and risks
#: (:class:`CalibrationRecord`, what :meth:`ReferralRule.from_json` re-certifies; every rule ``evaluate`` wrote
#: before), 2 for a rule of a region-based model
#: without that record (it records the region spec, which a reader of version 1 would ignore), 1 for every other rule
#: (readable by older versions)
#: A version-3 rule may also record its calibration cases' label-free expected Dice (``calibration.expected_dice``,
#: for the conformal interval of :meth:`ReferralRule.expected_dice_interval`); a reader that ignores it loses only
#: the interval, so the version stays 3. Likewise its image reference may record the statistics of each calibration
#: image (``image_reference.calibration_statistics``, versioned on its own: :data:`IMAGE_STATISTICS_VERSION`), the
#: reference against which ``monai-unc monitor`` ranks new cases' images; a reader that ignores it loses only that.
RULE_VERSION = 6
#: the version of a rule's ``image_reference.calibration_statistics`` object (a reader refuses newer ones)
IMAGE_STATISTICS_VERSION = 1
#: what writes a rule file
_WRITTEN_BY = "monai-unc evaluate --target-risk"
#: what a rule file says when its content does not agree with itself
_EDITED = f"the file was edited or corrupted; certify the rule again with {_WRITTEN_BY}"
#: the longest refusal of a rule file's content (:meth:`ReferralRule.from_json`), in characters
_MAX_MESSAGE = 1000
#: the top-level fields of a rule file (:meth:`ReferralRule.to_json`, every ``format_version``, its digest and
#: signature): another one is refused, as every fitted file of evaluate refuses one
_RULE_FIELDS = frozenset({
    "format", "format_version", "created", "monai_unc_version", "score", "decision", "feasible", "threshold",
    "accept_all", "target_risk", "delta", "method", "risk", "risk_definition", "failure_dice", "guarantee",
    "calibration", "num_classes", "class_names", "regions", "image_reference", "fingerprint", "geometry", "digest",
    SIGNATURE_FIELD})
#: default robust z-score above which a case's image counts as far from the calibration images
IMAGE_Z_MAX = 5.0
#: scale of the MAD that makes it a consistent estimate of a normal standard deviation
_MAD_TO_SD = 1.4826
#: floor of an image statistic's scale, as a fraction of the median p01-p99 intensity range of its channel
_SCALE_FLOOR = 0.02
#: the most far image statistics a decision's reason names (the farthest; the others are counted: "and 55 more")
REASON_STATISTICS = 5
#: the most characters of those statistics' text in a reason, beyond the first statistic (a name of a rule file is
#: at most 256 characters, a z-score's text at most 311: the first is always named)
_REASON_STATISTICS_CHARS = 400
#: the most characters of a decision's reason. Every part is bounded (a number at most 24 characters, the image part
#: by the two bounds above): at most about 830 in all, so that the monitoring store, which keeps at most
#: ``monai_unc.monitoring.store.MAX_TEXT`` characters of a text, records any reason triage writes (found by hostile
#: review: every statistic of a 12-channel image far from the calibration images gave 1024 characters, and ``monitor
#: record`` refused the run)
MAX_REASON = 1000


@dataclass(frozen=True)
class ImageReference:
    """Where the calibration images lie: per statistic a median and a robust scale over the calibration cases.

    Per statistic of :func:`image_statistics` the reference holds the median over the calibration cases and a robust
    scale ``max(1.4826 MAD, 0.02 R_c, 1e-12)``, where ``R_c`` is the median over the calibration
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

    ``statistics``: the rows the reference was fitted on (what :meth:`fit` keeps, in the order of the rule's
    calibration cases), from which the median and scale are recomputed when a rule is read and
    :meth:`leave_one_out_z_max` gives each calibration image's ``image_z_max``: the reference of ``monai-unc
    monitor``'s image alarm. None in rules written before they were recorded.

    Args:
        features: the statistic names (:func:`image_feature_names`), ``F = 5 C`` for ``C`` channels.
        median: the median of each statistic over the calibration cases ``(F,)``.
        scale: the robust scale of each statistic ``(F,)``, positive.
        n_cases: the number of calibration images.
        z_max: the largest robust z-score of an accepted case.
        channel_files: ``"all"`` or ``"first"`` (above).
        statistics: ``(N, F)`` the calibration images' statistics, or None (above).

    Raises:
        ValueError: ``channel_files`` is not one of :data:`IMAGE_CHANNEL_FILES`.

    Example:
        >>> stats = np.array([[10., 2., 0., 10., 20.], [12., 2., 0., 12., 22.], [11., 3., 0., 11., 21.]])
        >>> ref = ImageReference.fit(stats)
        >>> ref.median
        (11.0, 2.0, 0.0, 11.0, 21.0)
        >>> ref.z_scores(np.array([11., 2., 0., 11., 60.])).round(2)
        array([ 0.  ,  0.  ,  0.  ,  0.  , 26.31])
        >>> ImageReference.from_json(ref.to_json()) == ref
        True
    """

    features: tuple[str, ...]
    median: tuple[float, ...]
    scale: tuple[float, ...]
    n_cases: int
    z_max: float = IMAGE_Z_MAX
    channel_files: str = "all"
    statistics: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self) -> None:
        if self.channel_files not in IMAGE_CHANNEL_FILES:
            raise ValueError(f"channel_files must be one of {IMAGE_CHANNEL_FILES}, got {self.channel_files!r}")

    @classmethod
    def fit(cls, stats: np.ndarray, z_max: float = IMAGE_Z_MAX) -> ImageReference:
        """The reference of ``stats`` ``(N, 5 C)``: one row of :func:`image_statistics` per calibration case.

        Args:
            stats: ``(N, 5 C)`` statistics of ``N >= 1`` calibration images with ``C`` channels, finite.
            z_max: the largest robust z-score of an accepted case (a positive finite number; numpy scalars too).

        Returns:
            The reference: per statistic the median and ``max(1.4826 MAD, 0.02 R_c, 1e-12)`` (class docstring), with
            ``stats`` as its :attr:`statistics`.

        Raises:
            ValueError: ``stats`` has the wrong shape or non-finite values, or ``z_max`` is not a positive finite
                number.
        """
        s = np.asarray(stats, dtype=np.float64)
        n_f = len(IMAGE_FEATURES)
        if s.ndim != 2 or s.shape[0] < 1 or s.shape[1] < n_f or s.shape[1] % n_f:
            raise ValueError(f"stats must be (N, {n_f} C) rows of image_statistics with N >= 1, got shape {s.shape}")
        if not np.isfinite(s).all():
            raise ValueError("stats must be finite")
        # finite: a rule file writes an infinite z_max as null, which no reader takes (found by hostile testing)
        if not is_finite_real(z_max) or not z_max > 0:
            raise ValueError(f"z_max must be a positive finite number, got {z_max!r}")
        med, scale = _location_scale(s)
        return cls(image_feature_names(s.shape[1] // n_f), tuple(float(v) for v in med),
                   tuple(float(v) for v in scale), int(s.shape[0]), float(z_max),
                   statistics=tuple(tuple(float(v) for v in row) for row in s))

    def leave_one_out_z_max(self) -> np.ndarray | None:
        """Each calibration image's largest robust z-score against the reference of the *other* calibration images.

        This is the statistic ``monai-unc triage`` records for a new case (``image_z_max``: the largest of its
        :meth:`z_scores`), computed for calibration image ``i`` with the median and scale fitted on the ``N - 1``
        others, so that, like a new case's, it comes from a reference that did not see the image. ``monai-unc
        monitor`` ranks new cases' ``image_z_max`` among these (a new case's reference has ``N`` images, a
        calibration image's ``N - 1``: exchangeable up to that difference).

        Returns:
            ``(N,)`` float64, in the order of :attr:`statistics`; None without recorded statistics or with fewer
            than two calibration images.

        Example:
            >>> ref = ImageReference.fit(np.array([[10., 2, 0, 10, 20], [12, 2, 0, 12, 22], [11, 3, 0, 11, 21],
            ...                                     [11, 2, 0, 11, 21]]))
            >>> ref.leave_one_out_z_max().round(2)
            array([2.38, 2.38, 2.38, 0.  ])
        """
        if self.statistics is None or len(self.statistics) < 2:
            return None
        s = np.asarray(self.statistics, dtype=np.float64)
        out = np.empty(len(s))
        for i in range(len(s)):
            med, scale = _location_scale(np.delete(s, i, axis=0))
            out[i] = float(np.max(np.abs(s[i] - med) / scale))
        return out

    def z_text(self, z: Any) -> str:
        """A robust z-score as the pages and the reasons write it: one decimal, never read across :attr:`z_max`.

        Found by hostile testing: ``z=5.03`` was written ``5.0`` in the reason "image far from the calibration images
        (mean z=5.0 > 5)" and in the triage page's column, beside an accepted case's ``4.97`` (also ``5.0``); the digits
        that keep it on its own side of ``z_max`` are added (:func:`~monai_unc.product.format_cell`).

        Args:
            z: the z-score (None or non-finite: an en dash).

        Returns:
            The text.

        Example:
            >>> ref = ImageReference(("mean",), (0.0,), (1.0,), 10)
            >>> ref.z_text(5.03), ref.z_text(4.97), ref.z_text(7.25), ref.z_text(None)
            ('5.03', '4.97', '7.2', '–')
        """
        return format_cell(z, 1, self.z_max)

    def z_scores(self, stats: np.ndarray) -> np.ndarray:
        """Robust z-scores ``|x - median| / scale`` of ``stats``.

        Args:
            stats: ``(N, F)`` (or ``(F,)``) rows of :func:`image_statistics` of new cases.

        Returns:
            The z-scores, float64, same shape as ``stats``.

        Raises:
            ValueError: ``stats`` has another number of statistics than the reference (another channel count).
        """
        s = np.asarray(stats, dtype=np.float64)
        if s.shape[-1] != len(self.features):
            raise ValueError(f"stats have {s.shape[-1]} entries per case, the reference {len(self.features)} "
                             f"({', '.join(self.features)}): the images have another number of channels")
        return np.abs(s - np.asarray(self.median)) / np.asarray(self.scale)

    def to_json(self) -> dict[str, Any]:
        """The reference as JSON data (the ``image_reference`` object of a rule file).

        Returns:
            ``{"features", "median", "scale", "n_cases", "z_max", "channel_files"}``, and with recorded statistics
            ``"calibration_statistics": {"version", "rows"}``.
        """
        out: dict[str, Any] = {"features": list(self.features), "median": list(self.median),
                               "scale": list(self.scale), "n_cases": self.n_cases, "z_max": self.z_max,
                               "channel_files": self.channel_files}
        if self.statistics is not None:
            out["calibration_statistics"] = {"version": IMAGE_STATISTICS_VERSION,
                                             "rows": [list(r) for r in self.statistics]}
        return out

    @classmethod
    def from_json(cls, d: Any, where: str = "image_reference") -> ImageReference:
        """Read :meth:`to_json` data, checked.

        Args:
            d: the parsed JSON object; without ``channel_files`` (older rules) it reads as ``"first"``; without
                ``calibration_statistics`` (older rules) the reference has no :attr:`statistics`.
            where: how error messages name the object.

        Returns:
            The reference.

        Raises:
            ValueError: a field is missing or wrong (the message names it), or recorded calibration statistics that do
                not give the recorded median and scale (the file was edited).
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"{where} must be an object, got {type(d).__name__}")
        # untrusted text: a name reaches the reasons, tables and terminals (found by hostile testing)
        feats = [check_text(f, f"{where}.features[{i}]") for i, f in enumerate(_field(d, "features", where, list))]
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
        if n < 1:
            raise ValueError(f"{where}.n_cases must be a positive number of calibration images, got {n}")
        mode = d.get("channel_files", "first")  # rules written before every channel file was read
        if mode not in IMAGE_CHANNEL_FILES:
            raise ValueError(f"{where}.channel_files must be one of {IMAGE_CHANNEL_FILES}, got {mode!r}")
        rows = None
        if "calibration_statistics" in d:  # recorded since monitoring ranks new images against them
            rows = _statistics_rows(d["calibration_statistics"], f"{where}.calibration_statistics", len(feats), n)
            try:
                again = cls.fit(np.asarray(rows), z_max)
            except ValueError as e:
                raise ValueError(f"{where}.calibration_statistics: {e}") from None
            names = tuple(str(f) for f in feats)
            for name, got, want in (("features", names, again.features), ("median", tuple(med), again.median),
                                    ("scale", tuple(scale), again.scale)):
                if len(got) != len(want) or not all(a == b or (not isinstance(a, str) and _same(a, b))
                                                    for a, b in zip(got, want)):
                    raise ValueError(f"field '{where}.{name}' is {list(got)!r} but the recorded calibration statistics "
                                     f"give {list(want)!r}: {_EDITED}")
        return cls(tuple(str(f) for f in feats), tuple(med), tuple(scale), int(n), z_max, mode, rows)


def _location_scale(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column of ``s`` ``(N, 5 C)``: the median and ``max(1.4826 MAD, 0.02 R_c, 1e-12)`` (ImageReference)."""
    n_f = len(IMAGE_FEATURES)
    med = np.median(s, axis=0)
    mad = np.median(np.abs(s - med), axis=0)
    per_ch = s.reshape(s.shape[0], s.shape[1] // n_f, n_f)
    spread = np.median(per_ch[..., IMAGE_FEATURES.index("p99")] - per_ch[..., IMAGE_FEATURES.index("p01")], 0)
    floor = np.repeat(_SCALE_FLOOR * spread, n_f)
    return med, np.maximum(np.maximum(_MAD_TO_SD * mad, floor), 1e-12)


def _statistics_rows(d: Any, where: str, n_features: int, n_cases: int) -> tuple[tuple[float, ...], ...]:
    """The checked rows of an ``image_reference.calibration_statistics`` object (:meth:`ImageReference.to_json`)."""
    if not isinstance(d, Mapping):
        raise ValueError(f"{where} must be an object, got {type(d).__name__}")
    version = _field(d, "version", where, int)
    if not 1 <= version <= IMAGE_STATISTICS_VERSION:
        raise ValueError(f"{where}.version is {version!r}: this monai-unc reads versions 1 to "
                         f"{IMAGE_STATISTICS_VERSION} (a newer monai-unc wrote it; upgrade to read it)")
    rows = _field(d, "rows", where, list)
    if len(rows) != n_cases:
        raise ValueError(f"{where}.rows must hold one row per calibration image ({n_cases}), got {len(rows)}")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, list) or len(r) != n_features:
            raise ValueError(f"{where}.rows[{i}] must be a list of {n_features} numbers (one per feature)")
        out.append(tuple(_number(v, f"{where}.rows[{i}]") for v in r))
    return tuple(out)


@dataclass(frozen=True)
class CalibrationRecord:
    """What a rule's certificate was computed from, one entry per calibration case.

    The entries are in the order of ``ReferralRule.calibration_cases``, so that the certificate can be recomputed when
    the rule is read (:meth:`ReferralRule.verify_certificate`).

    Attributes:
        scores: the case's triage score, None when undefined (e.g. an empty predicted foreground).
        dice: the case's Dice (the mean over the regions for a region-based rule), None when undefined.
        risks: the case's risk (:func:`~monai_unc.evaluation.cohort.risk_of_dice` of the Dice with the rule's
            ``risk`` and ``failure_dice``), what the threshold was certified on.
        undefined_score: None: a case with an undefined score counted as referred in the certification, as the rule
            refers it (:func:`~monai_unc.metrics.risk_control.accepted_by_threshold`; every rule certified since
            ``format_version`` 4). A number: the score an undefined score took in the certification of a rule
            certified before (larger than every defined score of the evaluation, so that a threshold of ``inf``
            counted those cases as accepted while the rule refers them: :meth:`ReferralRule.from_json` refuses such
            a rule); None too in those rules when every calibration score is defined.
        n_candidates: the ``n_candidates`` argument of
            :func:`~monai_unc.metrics.risk_control.risk_controlled_threshold` (None: every rank).
        sequence: its ``sequence`` argument (LTT's multiple-testing procedure).
        expected_dice: the case's label-free expected Dice (``metrics.csv``'s ``expected_dice``, None when
            undefined, e.g. without probabilities), from which, with ``dice``, the split-conformal interval of a new
            case's expected Dice is calibrated (:meth:`interval_quantile`); None (the whole tuple) in rules written
            before it was recorded.
        interval_alpha: the miscoverage of that interval (default 0.1: 90 %).
        expected_dice_estimate: what ``expected_dice`` estimates (:data:`~monai_unc.keys.EXPECTED_DICE_ESTIMATES`,
            :func:`~monai_unc.evaluation.rows.case_expected_dice`): ``"class_mean"`` or ``"region_mean"`` in the
            rules ``evaluate`` certifies (``format_version`` 5); None in rules certified before it was recorded, whose
            estimates are of the merged foreground for classes and ``"region_mean_soft"`` for regions
            (:attr:`ReferralRule.expected_dice_estimate`). A new case's estimate must be computed the same way, or the
            interval loses its guarantee.
        p_value: the ``p_value`` argument of :func:`~monai_unc.metrics.risk_control.risk_controlled_threshold`, the
            p-value of LTT's tests that certified the rule: ``"hoeffding_bentkus"`` (the default, and what every rule
            certified by earlier versions used; not written to the file) or ``"binomial"`` (the exact binomial p-value
            of a 0/1 risk, written as ``calibration.p_value``, ``format_version`` 6).

    Example:
        >>> rec = CalibrationRecord((0.1, 0.2, 0.3), (0.9, 0.7, 0.8), (0.0, 1.0, 0.0),
        ...                         expected_dice=(0.95, 0.9, 0.85), interval_alpha=0.5)
        >>> rec.interval_quantile()
        (0.05, 3)
        >>> CalibrationRecord.from_json(rec.to_json()) == rec
        True
    """

    scores: tuple[float | None, ...]
    dice: tuple[float | None, ...]
    risks: tuple[float, ...]
    undefined_score: float | None = None
    n_candidates: int | None = RISK_CONTROL_CANDIDATES
    sequence: str = "fallback"
    expected_dice: tuple[float | None, ...] | None = None
    interval_alpha: float = CONFORMAL_ALPHA
    expected_dice_estimate: str | None = None
    p_value: str = P_VALUES[0]

    def __post_init__(self) -> None:
        if not isinstance(self.p_value, str) or self.p_value not in P_VALUES:
            raise ValueError(f"p_value must be one of {P_VALUES}, got {self.p_value!r}"[:300])
        est = self.expected_dice_estimate
        if est is not None and est not in EXPECTED_DICE_ESTIMATES:
            raise ValueError(f"expected_dice_estimate must be one of {EXPECTED_DICE_ESTIMATES} or None, got "
                             f"{est!r}"[:300])

    def interval_quantile(self) -> tuple[float, int] | None:
        """The conformal quantile of ``|dice - expected_dice|`` over the calibration cases with both defined.

        Returns:
            ``(q, n)`` of :func:`~monai_unc.metrics.quality.conformal_quantile` (``q = inf`` with too few cases, no
            warning), or None without recorded estimates.
        """
        if self.expected_dice is None:
            return None
        e = [math.nan if v is None else v for v in self.expected_dice]
        d = [math.nan if v is None else v for v in self.dice]
        # too few cases: q = inf, said where it is shown (review 68: not silenced inside catch_warnings, a
        # process-wide filter)
        return conformal_quantile_core(e, d, self.interval_alpha, few_warning=False)

    def to_json(self) -> dict[str, Any]:
        """The record's entries of the rule's ``calibration`` object (strict JSON).

        Returns:
            ``{"case_scores", "dice", "risks", "undefined_score", "max_candidates", "sequence"}``, and with
            recorded estimates ``"expected_dice"``, ``"expected_dice_alpha"`` and ``"expected_dice_quantile"``
            (null for ``inf``; recomputed and compared when read), ``"expected_dice_estimate"`` when known, and
            ``"p_value"`` when it is not the default (``"binomial"``).
        """
        out = {"case_scores": list(self.scores), "dice": list(self.dice), "risks": list(self.risks),
               "undefined_score": self.undefined_score, "max_candidates": self.n_candidates,
               "sequence": self.sequence}
        qn = self.interval_quantile()
        if self.expected_dice is not None and qn is not None:
            out.update({"expected_dice": list(self.expected_dice), "expected_dice_alpha": self.interval_alpha,
                        "expected_dice_quantile": qn[0] if math.isfinite(qn[0]) else None})
        if self.expected_dice_estimate is not None:  # also without estimates: what triage computes for new cases
            out["expected_dice_estimate"] = self.expected_dice_estimate
        if self.p_value != P_VALUES[0]:  # absent: Hoeffding-Bentkus, so rules certified with it are written as before
            out["p_value"] = self.p_value
        return out

    @classmethod
    def from_json(cls, cal: Mapping[str, Any], where: str = "calibration") -> CalibrationRecord:
        """Read :meth:`to_json` entries from a rule's ``calibration`` object.

        Args:
            cal: the rule's parsed ``calibration`` object.
            where: how error messages name the object.

        Returns:
            The record.

        Raises:
            ValueError: naming a field that is missing or wrong, or an ``expected_dice_quantile`` that is not the
                one the recorded cases give (the file was edited).
        """
        scores = [None if v is None else _number(v, f"{where}.case_scores")
                  for v in _field(cal, "case_scores", where, list)]
        dice = [None if v is None else _number(v, f"{where}.dice") for v in _field(cal, "dice", where, list)]
        risks = [_number(v, f"{where}.risks") for v in _field(cal, "risks", where, list)]
        und = _field(cal, "undefined_score", where)
        n_cand = _field(cal, "max_candidates", where)
        if n_cand is not None and (isinstance(n_cand, bool) or not isinstance(n_cand, int) or n_cand < 1):
            raise ValueError(f"field '{where}.max_candidates' must be a positive integer or null, got {n_cand!r}")
        seq = _field(cal, "sequence", where, str)
        est, alpha, kind = None, CONFORMAL_ALPHA, None
        if "expected_dice" in cal:  # recorded since the conformal interval of the expected Dice
            est = tuple(None if v is None else _number(v, f"{where}.expected_dice")
                        for v in _field(cal, "expected_dice", where, list))
            # an estimate of a Dice lies in [0, 1]: 1.5 or 1e300 was read as one, with the interval it gives (found by
            # hostile review 59)
            if any(v is not None and not 0.0 <= v <= 1.0 for v in est):
                raise ValueError(f"field '{where}.expected_dice' must hold expected Dice in [0, 1] or null, got "
                                 f"{next(v for v in est if v is not None and not 0.0 <= v <= 1.0)!r}")
            alpha = _number(_field(cal, "expected_dice_alpha", where), f"{where}.expected_dice_alpha")
            if not 0 < alpha < 1:
                raise ValueError(f"field '{where}.expected_dice_alpha' must be in (0, 1), got {alpha!r}")
        if "expected_dice_estimate" in cal:  # recorded since the estimate of classes is their mean
            kind = _field(cal, "expected_dice_estimate", where, str)
            if kind not in EXPECTED_DICE_ESTIMATES:
                raise ValueError(f"field '{where}.expected_dice_estimate' must be one of "
                                 f"{', '.join(EXPECTED_DICE_ESTIMATES)}, got {kind!r}"[:300])
        p_value = P_VALUES[0]  # absent in every rule certified before review 66: Hoeffding-Bentkus
        if "p_value" in cal:
            p_value = _field(cal, "p_value", where, str)
            if p_value not in P_VALUES:
                raise ValueError(f"field '{where}.p_value' must be one of {', '.join(P_VALUES)}, got {p_value!r}"[:300])
        rec = cls(tuple(scores), tuple(dice), tuple(risks),
                  None if und is None else _number(und, f"{where}.undefined_score"), n_cand, seq, est, alpha, kind,
                  p_value)
        qn = rec.interval_quantile()
        if qn is not None:
            raw = _field(cal, "expected_dice_quantile", where)
            got = math.inf if raw is None else _number(raw, f"{where}.expected_dice_quantile")
            if not _same(got, qn[0]):
                raise ValueError(f"field '{where}.expected_dice_quantile' is {raw!r} but the recorded calibration "
                                 f"cases give {qn[0]!r}: {_EDITED}")
        return rec


def _same(a: float, b: float) -> bool:
    """Equal floats (inf and NaN included), up to rounding of the bound's root-finding."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# ----------------------------------------------------------------------------------------------------------------
# the rule
# ----------------------------------------------------------------------------------------------------------------
class Decision(NamedTuple):
    """The rule's verdict on one case (:meth:`ReferralRule.apply`).

    Args:
        decision: ``"accept"`` or ``"review"``.
        reason: a human-readable reason (every reason that applies, ``"; "``-joined; at most :data:`MAX_REASON`
            characters from :meth:`ReferralRule.apply`).
        code: the code of the first reason (``accepted``, ``not_certified``, ``undefined_score``,
            ``outside_range``, ``image_statistics``, ``above_threshold``).

    Example:
        >>> Decision("review", "score 0.4 > threshold 0.3", "above_threshold").accepted
        False
    """

    decision: str
    reason: str
    code: str

    #: every code a decision can have: ``accepted``, or the first reason for review (in the order :meth:`ReferralRule.
    #: apply` checks them)
    CODES = ("accepted", "not_certified", "undefined_score", "outside_range", "image_statistics", "above_threshold")

    @property
    def accepted(self) -> bool:
        """Whether the case is accepted (``decision == "accept"``)."""
        return self.decision == "accept"

    @staticmethod
    def code_agrees(decision: Any, code: Any) -> bool:
        """Whether ``code`` is one of :attr:`CODES` and agrees with ``decision``: ``accepted`` exactly for ``accept``.

        A recorded decision (``triage.json``, a file a user may edit) is checked with it before it is drawn or
        recorded: a misspelt code, or an ``accept`` with a reason for review, would pass for a decision of the rule.

        Args:
            decision: ``"accept"`` or ``"review"`` (anything else never agrees).
            code: the recorded code.

        Returns:
            Whether they agree.

        Example:
            >>> Decision.code_agrees("review", "above_threshold"), Decision.code_agrees("accept", "above_threshold")
            (True, False)
            >>> Decision.code_agrees("review", "above_treshold")
            False
        """
        return (decision in ("accept", "review") and isinstance(code, str) and code in Decision.CODES
                and (code == "accepted") == (decision == "accept"))


def _field(d: Mapping[str, Any], key: str, where: str, kind: type | tuple[type, ...] | None = None) -> Any:
    if key not in d:
        raise ValueError(f"{where}: field {key!r} is missing")
    v = d[key]
    if kind is not None and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ValueError(f"{where}: field {key!r} must be {names}, got {v!r:.80}")
    return v


def _number(v: Any, where: str, allow_null: bool = False) -> float:
    if v is None and allow_null:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise ValueError(f"field {where!r} must be a finite number{' or null' if allow_null else ''}, got {v!r:.80}")
    return float(v)


def not_as_certified(mismatch: Sequence[str]) -> str:
    """Why a rule's guarantees do not cover predictions whose fingerprint differs in the fields ``mismatch``.

    The words of every rule file's statement under ``--allow-mismatch``: the referral rule's guarantee and interval
    (:meth:`ReferralRule.guarantee`) and the statements of ``conformal.json``.

    Args:
        mismatch: the fingerprint fields that differ (:func:`~monai_unc.evaluation.triage.runner.mismatch_fields`).

    Returns:
        The clause.

    Example:
        >>> not_as_certified(["num_samples"])[:60]
        'their predictions were not made as those the rule was certif'
    """
    fields = f" in {', '.join(map(str, mismatch))}" if mismatch else ""
    return ("their predictions were not made as those the rule was certified on (fingerprint mismatch"
            f"{fields}, allowed with --allow-mismatch); the rule's statement, for predictions made as its calibration "
            "cases'")


def _threshold_text(score: float, threshold: float) -> str:
    """``<score> <= threshold <t>`` or ``<score> > threshold <t>``, in digits that never print the two equal.

    The comparison is written as :class:`~monai_unc.product.ThresholdText` chooses for this score: a score just above
    the threshold (a risk-controlled threshold is the float just below the lowest calibration score it refuses) is
    written ``score >= threshold`` against the cut, the first score the rule refuses.
    """
    t = ThresholdText.choose(threshold, [score])
    return f"{t.score(score)} {t.relation(t.accepts(score))} threshold {t.bound_text()}"


def _far_statistics_text(ref: ImageReference, z: np.ndarray) -> str:
    """The far statistics a reason names: the farthest, in the reference's order, and how many more are far.

    At most :data:`REASON_STATISTICS` statistics, the farthest first chosen, and beyond the first only while their
    text stays within ``_REASON_STATISTICS_CHARS`` characters, so that a reason stays within :data:`MAX_REASON`.

    Args:
        ref: the image reference.
        z: ``(F,)`` the case's robust z-scores, finite, at least one above ``ref.z_max``.

    Returns:
        ``"c0_mean z=9.1, c1_std z=12.0"``, with ``", and K more"`` when ``K`` far statistics are not named.
    """
    far = [int(j) for j in np.argsort(-z, kind="stable") if z[j] > ref.z_max]
    shown: list[tuple[int, str]] = []
    used = 0
    for j in far[:REASON_STATISTICS]:
        text = f"{ref.features[j]} z={ref.z_text(z[j])}"
        if shown and used + 2 + len(text) > _REASON_STATISTICS_CHARS:
            break
        shown.append((j, text))
        used += 2 + len(text)
    more = len(far) - len(shown)
    return ", ".join(t for _, t in sorted(shown)) + (f", and {more} more" if more else "")


def _range_text(score: float, bounds: tuple[float, float]) -> str:
    """``<score> below|above the calibration range [lo, hi]``, the score and the end it passes never printed equal."""
    lo, hi = bounds
    side, end = ("below", lo) if score < lo else ("above", hi)
    d = separating_digits(score, end)
    lo_text, hi_text = (format_score(b, d) if b == end else format_score(b) for b in (lo, hi))
    return f"{format_score(score, d)} {side} the calibration range [{lo_text}, {hi_text}]"


@dataclass
class ReferralRule:
    """A risk-controlled referral rule, certified on labelled calibration cases, to apply to new cases.

    Accept a new case when its triage score is at most ``threshold`` *and* lies inside the calibration score range
    *and* (with an image reference and images) its image statistics are within ``z_max`` robust standard deviations
    of the calibration images'; refer it for review otherwise (:meth:`apply`). With probability at least
    ``1 - delta`` over the draw of the calibration cases, the mean ``risk`` of the new cases the threshold accepts is
    at most ``target_risk``, for new cases exchangeable with the calibration cases (docs/triage.md,
    docs/referral_threshold.md); the range and image checks refer some of those too, which can raise the mean risk of
    the rest to at most ``target_risk * c / (c - eps)`` (``c``: the share the threshold accepts, ``eps``: the share
    of all cases the checks refer among them).
    The bound is that of :func:`~monai_unc.metrics.risk_control.risk_controlled_threshold` (SGR: Geifman and El-Yaniv,
    "Selective Classification for Deep Neural Networks"; LTT: Angelopoulos, Bates, Candes, Jordan, Lei, "Learn then
    Test: Calibrating Predictive Algorithms to Achieve Risk Control").

    Attributes:
        score: the triage score column, ``<measure>_<aggregation>`` (e.g. ``predictive_entropy_fg_mean``).
        measure, aggregation: its parts (:func:`parse_score_column`); ``region``: the class / region the score is
            restricted to (``None``: the whole volume, the only kind ``evaluate`` writes today).
        patch_size: box size of the ``patch`` aggregation (voxels).
        map_source: ``"file"`` (the measure's map files) or ``"probabilities"`` (derived from the probabilities, as
            ``evaluate`` does when no map is given).
        threshold: accept a defined ``score <= threshold``; ``inf``: every calibration case with a defined score was
            accepted; ``-inf``: the target could not be certified (``feasible=False``) and every case is referred. An
            undefined score is always referred, and was counted as referred in the certification.
        target_risk, delta, method (``sgr`` / ``ltt``), risk (``failure`` / ``1-dice``), failure_dice: the
            certification (:func:`monai_unc.metrics.risk_control.risk_controlled_threshold`); the p-value of LTT's
            tests is the record's (:attr:`p_value`).
        bound, coverage, observed_risk, n_candidates: its outcome on the calibration cases (bound on the selective
            risk; fraction of all calibration cases accepted; mean risk of the accepted calibration cases).
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
        record: the calibration cases' scores, Dice and risks (:class:`CalibrationRecord`) from which the threshold,
            bound and coverage are recomputed when the rule is read (:meth:`verify_certificate`); None in rules
            written before it was recorded (``format_version`` 1 and 2), which are read without that check.
        geometry: the range of the calibration cases' voxel spacing (mm, per axis) and voxel counts
            (:func:`~monai_unc.io.provenance.calibration_geometry`: ``spacing_min``, ``spacing_max``, ``voxels_min``,
            ``voxels_max``), covered by the digest; a new case outside it is triaged with a warning naming it
            (:func:`~monai_unc.io.provenance.case_geometry_warning`). None: not recorded (a rule written by an earlier
            version, whose file and digest are unchanged, or calibration rows without them); nothing is checked then.
        integrity: how :meth:`from_json` checked the rule (not compared): ``"recomputed, digest verified"``,
            ``"recomputed, no digest"`` (a file written before digests), ``"recomputed"`` (data, digest not
            checked) or ``"not recomputed: ..."`` for a rule without a record; empty for a rule built in memory.
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
    record: CalibrationRecord | None = None
    geometry: dict[str, Any] | None = None
    integrity: str = field(default="", compare=False)
    #: how :meth:`load` checked the signature (``"signed by ..."``, ``"UNSIGNED: ..."``; empty: not checked)
    signature: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.regions is not None:
            try:
                self.regions = {k: list(v) for k, v in check_regions(self.regions, "regions").items()}
            except TypeError as e:
                raise ValueError(str(e)) from None
        self.geometry = provenance.read_geometry(self.geometry)  # untrusted from a file: ValueError naming the field
        self.validate()

    # -- properties --------------------------------------------------------------------------------------------
    @property
    def measure(self) -> str:
        """The uncertainty measure of :attr:`score` (e.g. ``predictive_entropy``)."""
        return parse_score_column(self.score)[0]

    @property
    def aggregation(self) -> str:
        """The aggregation of :attr:`score` (``mean``, ``fg_mean`` or ``patch_mean``)."""
        return parse_score_column(self.score)[1]

    @property
    def n_calibration(self) -> int:
        """The number of calibration cases."""
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
    def expected_dice_estimate(self) -> str:
        """What the ``expected_dice`` of a case triaged with this rule estimates, as its calibration cases' did.

        One of :data:`~monai_unc.keys.EXPECTED_DICE_ESTIMATES`: the record's
        :attr:`CalibrationRecord.expected_dice_estimate`. A rule that does not record it was certified before the
        ``expected_dice`` of classes became their mean and that of regions scored a region the segmentation does not
        hold as ``dice`` does: ``"merged_foreground"`` for classes, :data:`~monai_unc.keys.LEGACY_REGION_ESTIMATE`
        (``"region_mean_soft"``, never recorded) for regions; triage computes that for its new cases, so that they
        stay comparable with its calibration cases, whose residuals calibrate the interval, and with the cases the
        monitoring store recorded under the rule.
        """
        rec = self.record
        if rec is not None and rec.expected_dice_estimate is not None:
            return rec.expected_dice_estimate
        return "merged_foreground" if self.regions is None else LEGACY_REGION_ESTIMATE

    @property
    def format_version(self) -> int:
        """The ``format_version`` :meth:`to_json` writes (:data:`RULE_VERSION`).

        6 with a record certified with LTT's exact binomial p-value (:attr:`CalibrationRecord.p_value`), else
        5 with a record whose expected Dice is the quantity of ``dice`` (:attr:`expected_dice_estimate`
        ``"class_mean"`` or ``"region_mean"``, what triage computes for new cases, and the calibration cases'
        estimates when recorded), else 4 with a calibration record whose undefined scores were counted as referred,
        3 with any other record, 2 for a region-based rule without one, 1 otherwise.
        """
        rec = self.record
        if rec is None:
            return 1 if self.regions is None else 2
        if rec.p_value == "binomial":  # a reader of version 5 would recompute it with Hoeffding-Bentkus
            return 6
        if rec.expected_dice_estimate in ("class_mean", "region_mean"):
            return 5
        return 4 if rec.undefined_score is None and any(v is None for v in rec.scores) else 3

    @property
    def p_value(self) -> str:
        """The p-value of LTT's tests that certified the rule: :attr:`CalibrationRecord.p_value`.

        ``"hoeffding_bentkus"`` for a rule without a record (certified before the binomial p-value existed) and for
        every SGR rule; ``"binomial"`` for an LTT rule of the 0/1 risk certified with the exact binomial p-value.
        """
        return P_VALUES[0] if self.record is None else self.record.p_value

    @property
    def risk_definition(self) -> str:
        """The per-case risk in words: ``"dice < 0.8"`` or ``"1 - dice"``.

        For a region-based rule the Dice is the mean over the regions (``"mean region dice < 0.8"``).
        """
        dice = "dice" if self.regions is None else "mean region dice"
        return f"{dice} < {failure_dice_text(self.failure_dice)}" if self.risk == "failure" else f"1 - {dice}"

    @property
    def judged_dice(self) -> float | None:
        """The Dice a case's (expected) Dice is judged against where the rule is shown, or None.

        The failure Dice of a rule whose risk is ``"dice < failure_dice"``; a rule of risk ``1 - dice`` names none.
        Printed estimates never read equal to it or on its other side (:func:`~monai_unc.product.format_estimate`).
        """
        return float(self.failure_dice) if self.risk == "failure" else None

    def guarantee(self, mismatch: Sequence[str] | None = None) -> str:
        """One sentence: what the rule promises, and under which assumption.

        The bound and the observed risk are written against the target (:func:`~monai_unc.product.format_cell`):
        never equal to it, or on its other side, when they are not.

        Args:
            mismatch: None for predictions the rule's fingerprint matches; else the fingerprint fields in which the
                predictions differ (``triage --allow-mismatch``): the sentence then says the guarantee does not
                cover them (in earlier versions ``triage.json``, the command's line and the DICOM SR of
                ``dicom-export --triage`` stated it in full while the page said it did not cover them).

        Returns:
            The guarantee (or, for a rule that is not certified, why every case is referred).

        Example:
            >>> rule = ReferralRule("predictive_entropy_fg_mean", 0.2, True, 0.5, 0.1, "sgr", "failure", 0.8,
            ...                     (0.1, 0.2, 0.3), ("a", "b", "c"))
            >>> rule.guarantee(mismatch=["num_samples"])[:73]
            'no guarantee for these cases: their predictions were not made as those th'
        """
        target = self.target_risk
        if mismatch is not None and self.feasible:
            return f"no guarantee for these cases: {not_as_certified(mismatch)}: {self.guarantee()}"
        if not self.feasible:
            return (f"no threshold certifies mean risk ({self.risk_definition}) <= {target:g} with "
                    f"probability {format_level(self.delta)} on these {self.n_calibration} calibration cases "
                    "(best bound "
                    f"{format_cell(self.bound, 4, target, 'n/a')}): every case is referred")
        return (f"with probability at least {format_level(self.delta)} over the draw of the {self.n_calibration} "
                f"calibration cases, the mean risk ({self.risk_definition}) of the new cases its threshold accepts "
                "(a defined score at most the threshold; a case with an undefined score is referred, as it was "
                f"counted in the certification) is at most {format_target(self.target_risk)} (at most "
                f"{format_target(self.target_risk)} c / "
                "(c - eps) for those the range and image checks accept as well, when they refer a share eps of the "
                "share c the threshold accepts), "
                "provided the new cases are exchangeable with the calibration cases "
                f"({self.method.upper()}{', binomial p-value' if self.p_value == 'binomial' else ''}; calibration: "
                f"coverage {format_cell(self.coverage, 3, 1.0)}, observed risk "
                f"{format_cell(self.observed_risk, 4, target, 'n/a')}, bound "
                f"{format_cell(self.bound, 4, target, 'n/a')})")

    def expected_dice_interval(self, estimates: Any) -> ConformalInterval | None:
        """Split-conformal intervals of new cases' expected Dice, calibrated on the rule's calibration cases.

        ``[e - q, e + q]`` clipped to [0, 1], ``q`` the ``ceil((n + 1)(1 - alpha))``-th smallest
        ``|dice - expected_dice|`` of the ``n`` calibration cases with both defined
        (:func:`~monai_unc.metrics.quality.conformal_interval`). For a new case exchangeable with the calibration
        cases its real Dice (the rule's Dice) is inside with probability at least ``1 - alpha`` (marginally); a case
        from a shifted distribution may fall outside (docs/triage.md).

        Args:
            estimates: the new cases' expected Dice (NaN: undefined, NaN interval).

        Returns:
            The intervals, or None when the rule records no calibration estimates (older rules): the estimate is then
            the model's own, uncalibrated.

        Example:
            >>> rec = CalibrationRecord((0.1, 0.2, 0.3), (0.9, 0.7, 0.8), (0.0, 1.0, 0.0),
            ...                         expected_dice=(0.95, 0.9, 0.85), interval_alpha=0.5)
            >>> rule = ReferralRule("predictive_entropy_fg_mean", 0.2, True, 0.5, 0.1, "sgr", "failure", 0.8,
            ...                     (0.1, 0.2, 0.3), ("a", "b", "c"), record=rec)
            >>> iv = rule.expected_dice_interval([0.9, 0.98])
            >>> iv.low.round(2).tolist(), iv.high.round(2).tolist(), iv.alpha
            ([0.85, 0.93], [0.95, 1.0], 0.5)
        """
        rec = self.record
        if rec is None or rec.expected_dice is None:
            return None
        e = [math.nan if v is None else v for v in rec.expected_dice]
        d = [math.nan if v is None else v for v in rec.dice]
        # too few calibration cases: said by interval_statement; undefined estimates: named once by the triage run
        # (review 68: every UserWarning was silenced inside catch_warnings, a process-wide filter, and the new cases'
        # undefined estimates were said nowhere)
        return conformal_interval_core(np.asarray(estimates, dtype=np.float64), e, d, rec.interval_alpha,
                                       few_warning=False, nan_warning=False)

    def interval_statement(self, mismatch: Sequence[str] | None = None) -> str:
        """One sentence on the expected-Dice interval: its guarantee and caveat, or that the estimate is uncalibrated.

        Args:
            mismatch: as in :meth:`guarantee`: the fingerprint fields in which the predictions differ from the rule's
                (the interval's coverage then does not hold for them), or None.

        Returns:
            The sentence; for a rule of more than two classes certified before its estimates were the mean over the
            classes (:attr:`expected_dice_estimate` ``"merged_foreground"``) it says that the estimate is of the
            merged foreground; for a region-based rule certified before ``format_version`` 5 (``"region_mean_soft"``)
            that a region the segmentation does not hold scores 0.
        """
        rec = self.record
        qn = None if rec is None else rec.interval_quantile()
        if mismatch is not None and qn is not None and math.isfinite(qn[0]):
            return f"no coverage guarantee for these cases: {not_as_certified(mismatch)}: {self.interval_statement()}"
        return self._interval_sentence(rec, qn) + self._merged_note()

    def _merged_note(self) -> str:
        """The clause of :meth:`interval_statement` for a rule whose estimate is not the quantity of dice, or ``""``."""
        if self.expected_dice_estimate == LEGACY_REGION_ESTIMATE:
            return ("; this rule was certified before a region the segmentation does not hold scored prod(1 - p) (the "
                    "chance that the reference holds none of it) in the expected Dice, so the estimate (and its "
                    "interval) scores such a region 0, as its calibration cases' did, while dice scores a region "
                    "absent from both maps 1: certify the rule again with monai-unc evaluate for that")
        if self.expected_dice_estimate != "merged_foreground" or self.num_classes is None or self.num_classes < 3:
            return ""  # with two classes the merged foreground is the one class
        return ("; this rule was certified before the expected Dice of classes was their mean, so the estimate (and "
                "its interval) is that of the merged foreground (every class > 0 as one mask), as its calibration "
                "cases' were, not of the mean over the classes that dice holds: certify the rule again with "
                "monai-unc evaluate for that")

    def _interval_sentence(self, rec: CalibrationRecord | None, qn: tuple[float, int] | None) -> str:
        """:meth:`interval_statement` without the mismatch and the merged-foreground clause."""
        dice = "Dice" if self.regions is None else "mean region Dice"
        if rec is None or qn is None:
            return ("expected Dice: the model's own estimate, uncalibrated (the rule records no calibration cases' "
                    "estimates; certify it again with monai-unc evaluate for a conformal interval): under a shift it "
                    "can stay high while the real Dice drops")
        q, n = qn
        level = format_level(rec.interval_alpha, percent=True)
        if not math.isfinite(q):
            return (f"expected Dice interval ({level}, conformal): {n} calibration case(s) with an expected Dice are "
                    f"too few for a {level} interval, so it is the whole range [0, 1]")
        # the half-width rounded up, never narrower than the one the intervals use (0.0844 read +/- 0.084)
        half = math.ceil(round(q * 1000.0, 6)) / 1000.0
        return (f"expected Dice interval ({level}, conformal): estimate +/- {half:.3f}, the calibrated quantile of "
                f"|{dice} - expected Dice| over {n} calibration cases; a new case exchangeable with them has its real "
                f"{dice} inside with probability at least {level} (on average over cases, not for each one); a "
                "shifted case (e.g. one referred as far from the calibration images) may fall outside")

    # -- checks ------------------------------------------------------------------------------------------------
    def validate(self) -> None:
        """Check every field.

        Raises:
            ValueError: naming the field that is wrong.
        """
        parse_score_column(self.score)
        if not isinstance(self.feasible, bool):
            raise ValueError(f"feasible must be a bool, got {self.feasible!r}")
        # numbers are numbers (found by hostile testing: threshold True read as 1.0 and "0.3" taken, failure_dice
        # True read as 1.0, text calibration scores parsed); numpy scalars are numbers too
        if not is_real(self.threshold) or math.isnan(self.threshold):
            raise ValueError(f"threshold must be a number (inf or -inf included), got {self.threshold!r:.80}")
        thr = float(self.threshold)
        if self.feasible == (thr == -math.inf):
            raise ValueError(f"threshold {thr} and feasible={self.feasible} disagree: -inf means 'not certified'")
        for name in ("target_risk", "delta"):
            v = getattr(self, name)
            if not is_real(v) or not 0 < v < 1:
                raise ValueError(f"{name} must be a number in (0, 1), got {v!r:.80}")
        if self.method not in ("sgr", "ltt"):
            raise ValueError(f"method must be 'sgr' or 'ltt', got {self.method!r}")
        if self.risk not in ("failure", "1-dice"):
            raise ValueError(f"risk must be 'failure' or '1-dice', got {self.risk!r}")
        if self.method == "sgr" and self.risk != "failure":  # the binomial bound holds for a 0/1 risk only
            raise ValueError(f"method 'sgr' certifies the 0/1 risk ('failure') only, got risk {self.risk!r}")
        if self.p_value == "binomial" and (self.method != "ltt" or self.risk != "failure"):
            # the exact binomial p-value holds for a 0/1 risk only, and is a p-value of LTT's tests (review 66)
            raise ValueError(f"p_value 'binomial' certifies the 0/1 risk ('failure') with method 'ltt' only, got "
                             f"method {self.method!r} and risk {self.risk!r}")
        if self.p_value == "binomial" and self.record.expected_dice_estimate not in ("class_mean", "region_mean"):
            # format_version 6 holds version 5's expected-Dice estimate: a rule without it would be written as a
            # version the reader then refuses
            raise ValueError("p_value 'binomial' needs the record's expected_dice_estimate ('class_mean' or "
                             f"'region_mean', as evaluate records it), got {self.record.expected_dice_estimate!r}")
        n_cand = self.n_candidates
        if not is_int(n_cand) or n_cand < 0:
            raise ValueError(f"n_candidates must be a non-negative integer, got {n_cand!r}")
        if not is_real(self.failure_dice) or not 0 <= self.failure_dice <= 1:
            raise ValueError(f"failure_dice must be a number in [0, 1], got {self.failure_dice!r:.80}")
        for name in ("bound", "coverage", "observed_risk"):  # NaN: not known (rules without a record)
            v = getattr(self, name)
            if not is_real(v) or not (math.isnan(v) or 0 <= v <= 1):
                raise ValueError(f"{name} must be a number in [0, 1] or NaN, got {v!r:.80}")
        try:
            scores = real_array(np.asarray(self.calibration_scores), "calibration_scores")
        except TypeError as e:
            raise ValueError(str(e)) from None
        if not np.isfinite(scores).all() or (np.diff(scores) < 0).any():
            raise ValueError("calibration_scores must be finite and sorted ascending")
        cases = self.calibration_cases
        # a file's number or object was read as a case id (its text), and one case could be listed twice (found by
        # hostile testing)
        odd = [c for c in cases if not isinstance(c, str)] or [c for c, k in Counter(cases).items() if k > 1]
        if odd:
            raise ValueError(f"calibration_cases must be distinct case ids (strings), got {odd[0]!r:.80}")
        if not is_int(self.n_undefined) or self.n_undefined < 0:
            raise ValueError(f"n_undefined must be a non-negative integer, got {self.n_undefined!r:.80}")
        if len(self.calibration_cases) != len(scores) + self.n_undefined or not self.calibration_cases:
            raise ValueError(f"calibration_cases lists {len(self.calibration_cases)} case(s), but there are "
                             f"{len(scores)} calibration score(s) and {self.n_undefined} undefined one(s)")
        if not is_int(self.patch_size) or self.patch_size < 1:
            raise ValueError(f"patch_size must be a positive integer, got {self.patch_size!r}")
        if self.map_source not in ("file", "probabilities"):
            raise ValueError(f"map_source must be 'file' or 'probabilities', got {self.map_source!r}")
        if self.region is not None:
            raise ValueError(f"region {self.region!r}: scores restricted to one region are not supported yet "
                             "(null = the whole volume)")
        least = 2 if self.regions is None else 1  # a region-based model may have one region
        if self.num_classes is not None and (not is_int(self.num_classes) or self.num_classes < least):
            raise ValueError(f"num_classes must be an integer >= {least}, got {self.num_classes!r}")
        if self.class_names is not None and self.num_classes is not None and len(self.class_names) != self.num_classes:
            raise ValueError(f"class_names has {len(self.class_names)} names for {self.num_classes} classes")
        # checked here, not only when read: a rule certified with a name that from_json refuses (a tab, 300
        # characters) was written and then refused by triage (found by review)
        for i, n in enumerate(self.class_names or ()):
            check_text(n, f"class_names[{i}]")
        # as EvaluationConfig refuses them: triage wrote one class's expected Dice over another's (found by hostile
        # testing)
        slugs = [slug(n) for n in self.class_names or ()]
        if len(set(slugs)) != len(slugs):
            raise ValueError(f"class_names: the names {list(self.class_names or ())} give the same column names "
                             f"{slugs}")
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
        rec = self.record
        if rec is not None and not (len(rec.scores) == len(rec.dice) == len(rec.risks) == self.n_calibration):
            raise ValueError(f"record: case_scores, dice and risks must have one entry per calibration case "
                             f"({self.n_calibration}), got {len(rec.scores)}, {len(rec.dice)} and {len(rec.risks)}")
        if rec is not None and rec.expected_dice is not None and len(rec.expected_dice) != self.n_calibration:
            raise ValueError(f"record: expected_dice must have one entry per calibration case ({self.n_calibration}), "
                             f"got {len(rec.expected_dice)}")
        est = None if rec is None else rec.expected_dice_estimate
        fits = ("region_mean",) if self.regions is not None else ("class_mean", "merged_foreground")
        if est is not None and est not in fits:
            raise ValueError(f"record: expected_dice_estimate {est!r} is not an estimate of a "
                             f"{'region' if self.regions is not None else 'class'}-based rule (one of {fits})")

    def _refuse_accepted_undefined(self) -> None:
        """Refuse a rule certified before undefined scores were counted as referred whose threshold accepted them.

        Before ``format_version`` 4 an undefined calibration score took a stand-in above every defined score. A finite
        threshold lies below it (the threshold is the float below the first refused score), so those cases were
        counted as referred, as the rule refers them, and the certificate holds. A threshold of ``inf`` (every
        calibration case accepted) counted them as *accepted* while :meth:`apply` refers every such case: the
        certificate's coverage and observed risk are not those of the cases the rule accepts, and when the
        undefined cases are easy ones (e.g. an empty prediction of a case without a lesion, Dice 1) the accepted
        cases' risk exceeds the target far more often than ``delta`` (in a Monte Carlo study: 72 % of
        calibration draws). Such a rule is refused, not loaded with a warning: the guarantee it prints does not
        hold, and its calibration record certifies again in one run of ``evaluate``.

        Raises:
            ValueError: the rule is such a rule.
        """
        legacy = self.record is None or self.record.undefined_score is not None
        if legacy and self.n_undefined and self.feasible and self.threshold == math.inf:
            raise ValueError(
                f"this rule was certified by an earlier monai-unc that counted its {self.n_undefined} calibration "
                "case(s) with an undefined score as accepted (threshold: accept every case), while the rule refers "
                "every such case: its coverage and observed risk are not those of the cases it accepts and its "
                "guarantee does not hold for them; certify it again with monai-unc evaluate --target-risk (undefined "
                "scores now count as referred)")

    def verify_certificate(self) -> None:
        """Recompute the certificate from :attr:`record` and refuse a rule that disagrees.

        The certificate is recomputed with the function that certified it
        (:func:`~monai_unc.metrics.risk_control.risk_controlled_threshold`, the risks from the recorded Dice with
        :func:`~monai_unc.evaluation.cohort.calibration_risks`): a case with an undefined score counted as referred
        (``undefined="refer"``), or, in a rule certified before that (:attr:`CalibrationRecord.undefined_score` a
        number), with its recorded stand-in score. A rule without a record (written before it existed) is not
        checked.

        Raises:
            ValueError: naming the field that disagrees (``calibration.scores``, ``calibration.n_undefined``,
                ``calibration.risks``, ``threshold``, ``feasible``, ``bound``, ``coverage``, ``observed_risk``,
                ``n_candidates``) and saying the file was edited or corrupted.
        """
        rec = self.record
        if rec is None:
            return

        def bad(name: str, recorded: Any, recomputed: Any) -> ValueError:
            return ValueError(f"field {name!r} is {recorded!r} but recomputing the certificate from the recorded "
                              f"calibration cases gives {recomputed!r}: {_EDITED}")

        defined = sorted(float(v) for v in rec.scores if v is not None)
        if tuple(defined) != tuple(self.calibration_scores):
            raise bad("calibration.scores", list(self.calibration_scores), defined)
        n_und = sum(v is None for v in rec.scores)
        if n_und != self.n_undefined:
            raise bad("calibration.n_undefined", self.n_undefined, n_und)
        dice = np.array([math.nan if v is None else v for v in rec.dice], dtype=np.float64)
        try:
            risks = calibration_risks(rec.dice, self.calibration_cases, self.risk, self.failure_dice,
                                      "field 'calibration.dice'")
        except ValueError as e:
            raise ValueError(f"{str(e).split('; ')[0]}: {_EDITED}") from None
        got = np.asarray(rec.risks, dtype=np.float64)
        if not np.array_equal(risks, got, equal_nan=True):
            i = int(np.flatnonzero(~((risks == got) | (np.isnan(risks) & np.isnan(got))))[0])
            raise bad("calibration.risks", f"{got[i]:g} for case {self.calibration_cases[i]!r}",
                      f"{risks[i]:g} ({self.risk_definition}, dice {dice[i]:g})")
        legacy = rec.undefined_score is not None  # certified with a stand-in score for the undefined ones
        if n_und and legacy and defined and rec.undefined_score <= defined[-1]:
            raise bad("calibration.undefined_score", rec.undefined_score, "null or a number above every defined score")
        u = np.array([(rec.undefined_score if legacy else math.nan) if v is None else v for v in rec.scores],
                     dtype=np.float64)
        try:
            # the core: an infeasible rule says so itself (no "no threshold certifies" warning on every read)
            res = risk_controlled_threshold_core(u, got, self.target_risk, self.delta, method=self.method,
                                                 n_candidates=rec.n_candidates, sequence=rec.sequence,
                                                 undefined="error" if legacy else "refer", p_value=rec.p_value)
        except ValueError as e:
            raise ValueError(f"the recorded calibration cases cannot be certified again ({e}): {_EDITED}") from None
        for name, recorded, again in (("threshold", self.threshold, res.threshold),
                                      ("feasible", self.feasible, res.feasible),
                                      ("bound", self.bound, res.bound),
                                      ("coverage", self.coverage, res.coverage),
                                      ("observed_risk", self.observed_risk, res.risk),
                                      ("n_candidates", self.n_candidates, res.n_candidates)):
            same = recorded == again if name == "threshold" or isinstance(again, (bool, int)) else _same(
                float(recorded), float(again))
            if not same:
                raise bad(name, recorded, again)

    # -- applying ----------------------------------------------------------------------------------------------
    def apply(self, scores: Any, image_stats: Any = None) -> list[Decision]:
        """The decision on each new case (in the order given).

        A case is accepted only when the rule is certified, its score is defined, inside the calibration score range
        (inclusive) and at most the threshold (:func:`~monai_unc.metrics.risk_control.accepted_by_threshold`, the
        rule the certification counted the calibration cases by: an undefined score referred), and its image
        statistics are within ``z_max``; every reason that applies is listed (``"; "``-joined), the first one gives
        the ``code``. An image far from the calibration images names its farthest statistics (at most
        :data:`REASON_STATISTICS`) and counts the others, so that a reason has at most :data:`MAX_REASON` characters.

        Args:
            scores: ``(N,)`` triage scores of the new cases (NaN = undefined).
            image_stats: ``(N, F)`` rows of :func:`image_statistics` (a row of NaN, or a None row in a list, skips
                the check for that case), or None (no image check). Ignored when the rule has no image reference.

        Returns:
            One :class:`Decision` per case.

        Raises:
            ValueError: ``image_stats`` has another number of rows than ``scores``, or of statistics than the
                image reference.
            TypeError: ``scores`` or ``image_stats`` hold text, complex numbers or other objects (naming them).

        Example:
            >>> rule = ReferralRule("predictive_entropy_fg_mean", 0.3, True, 0.1, 0.1, "sgr", "failure", 0.8,
            ...                     (0.1, 0.2, 0.3, 0.4), ("a", "b", "c", "d"))
            >>> [d.code for d in rule.apply([0.2, 0.35, float("nan"), 0.5])]
            ['accepted', 'above_threshold', 'undefined_score', 'outside_range']
        """
        # checked before the cast: text was parsed and accepted, which accepted_by_threshold refuses (found by
        # hostile testing)
        # a tensor through to_numpy: numpy has no bfloat16 (autocast scores failed with "Got unsupported ScalarType
        # BFloat16", naming nothing) and reads no CUDA tensor (found by hostile review 59)
        raw = to_numpy(scores, "scores") if isinstance(scores, torch.Tensor) else np.asarray(scores)
        s = real_array(raw, "scores").reshape(-1)
        ref = self.image_reference
        z = None
        if image_stats is not None and ref is not None:
            rows = [np.full(len(ref.features), np.nan) if r is None else r for r in image_stats]
            stats = real_array(np.asarray(rows), "image_stats").reshape(len(rows), -1)
            if stats.shape[0] != s.size:
                raise ValueError(f"image_stats has {stats.shape[0]} rows for {s.size} scores")
            z = ref.z_scores(stats)
        rng = self.score_range
        by_score = accepted_by_threshold(s, self.threshold)  # what the certificate counted as accepted
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
                    reasons.append(("outside_range", f"score {_range_text(v, rng)}"))
            if z is not None and ref is not None and np.isfinite(z[i]).all() and z[i].max() > ref.z_max:
                reasons.append(("image_statistics", f"image far from the calibration images "
                                f"({_far_statistics_text(ref, z[i])} > {ref.z_max:g})"))
            if self.feasible and math.isfinite(v) and not by_score[i]:
                reasons.append(("above_threshold", f"score {_threshold_text(v, self.threshold)}"))
            if reasons:
                out.append(Decision("review", "; ".join(r for _, r in reasons), reasons[0][0]))
            else:
                text = format_score(v) if self.threshold == math.inf else _threshold_text(v, self.threshold)
                out.append(Decision("accept", f"score {text}, in the calibration range", "accepted"))
        return out

    def check_case_geometry(self, case_id: str, spacing: Any, voxels: Any) -> str | None:
        """Warn when a new case was resampled or cropped otherwise than the rule's calibration cases (:attr:`geometry`).

        The rule's guarantee holds for new cases exchangeable with its calibration cases; the check is that of every
        fitted rule (:func:`~monai_unc.io.provenance.case_geometry_warning`, a product rule's too). It warns; it
        does not change the decision. Nothing is checked when the rule recorded no geometry.

        Args:
            case_id: the case, named by the warning.
            spacing: its voxel spacing in mm per axis (numbers, or the ``"1.5x1x2"`` text of a triage row), or None.
            voxels: its spatial voxel count, or None.

        Returns:
            The warning's text (also issued as a ``UserWarning``), or None.

        Example:
            >>> rule = ReferralRule("predictive_entropy_fg_mean", 0.3, True, 0.1, 0.1, "sgr", "failure", 0.8,
            ...                     (0.1, 0.2), ("a", "b"), geometry={"spacing_min": [1.0, 1.0, 1.0],
            ...                     "spacing_max": [1.0, 1.0, 1.0], "voxels_min": 4096, "voxels_max": 4096})
            >>> rule.check_case_geometry("c", "1x1x1", 4096) is None
            True
        """
        return provenance.case_geometry_warning(self.geometry, case_id, spacing, voxels, rule="referral rule",
                                                stacklevel=2)

    # -- files ---------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The rule as strict-JSON data, ending with its ``digest`` (:func:`rule_digest`).

        ``threshold`` is a number, or null with ``accept_all`` telling ``inf`` (true) from ``-inf``, i.e. not
        certified (false).

        Returns:
            The JSON object of a rule file (what :meth:`save` writes).
        """
        rng = self.score_range
        measure, agg = parse_score_column(self.score)
        body = {
            "format": RULE_FORMAT,
            "format_version": self.format_version,
            "created": self.created,
            "monai_unc_version": self.version,
            "score": {"column": self.score, "measure": measure, "aggregation": agg, "region": self.region,
                      "patch_size": self.patch_size, "map_source": self.map_source},
            "decision": "accept when the score is defined, <= threshold and inside the calibration score range and "
                        "(with an image reference) image statistics are within z_max; review otherwise",
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
                **({} if self.record is None else self.record.to_json()),
            },
            "num_classes": self.num_classes,
            "class_names": None if self.class_names is None else list(self.class_names),
            "regions": None if self.regions is None else {k: list(v) for k, v in self.regions.items()},
            "image_reference": None if self.image_reference is None else self.image_reference.to_json(),
            "fingerprint": self.fingerprint,
        }
        if self.geometry is not None:  # absent otherwise: a rule without it is written (and digested) as before
            body["geometry"] = dict(self.geometry)
        body["digest"] = rule_digest(json_safe(body))  # of the content as written (NaN -> null)
        return body

    @classmethod
    def from_json(cls, d: Any, source: str = "rule", check_digest: bool = False) -> ReferralRule:
        """Read :meth:`to_json` data, checked (``source`` prefixes the error messages).

        A certificate is checked, not trusted: the threshold, bound, coverage and observed risk are recomputed from
        the recorded calibration cases (:meth:`verify_certificate`; ``format_version`` 3 and 4) and, with
        ``check_digest`` (:meth:`load` reading a file), the content digest (:func:`rule_digest`); a disagreement is a
        ``ValueError`` naming the field and saying the file was edited or corrupted. A rule without a digest (written
        before digests were recorded) still loads once the recomputation agrees; a rule without the calibration
        record (``format_version`` 1 or 2, written before it was recorded) cannot be recomputed and loads as before,
        with :attr:`integrity` saying so. A rule certified before ``format_version`` 4 whose threshold accepted every
        calibration case while some had an undefined score is refused: it counted them as accepted, while
        :meth:`apply` refers them. Without ``check_digest`` the data may be a rule's :meth:`to_json` changed in
        memory (the digest is not compared).

        Args:
            d: the parsed JSON object.
            source: how error messages name the rule (e.g. ``"referral rule <path>"``).
            check_digest: compare the content digest too.

        Returns:
            The rule, with :attr:`integrity` saying how it was checked.

        Raises:
            ValueError: naming the bad field (one that no rule file holds included), saying the file was edited or
                corrupted, or that the rule counted undefined-score calibration cases as accepted (certify it again).
        """
        check_document(d, fmt=RULE_FORMAT, versions=range(1, RULE_VERSION + 1), what="referral rule", source=source)
        ver = d["format_version"]
        try:
            unknown = sorted(str(k) for k in d if k not in _RULE_FIELDS)
            if unknown:  # found by hostile review 60: ignored, as if the rule had been certified with it
                raise ValueError(f"{source}: field {unknown[0][:80]!r} is not a field of a referral rule file; the "
                                 f"file was edited (certify the rule again with {_WRITTEN_BY})")
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
            n_cand = cal.get("n_candidates")  # absent or null in older rules: 0 (one threshold tested)
            if n_cand is not None and (isinstance(n_cand, bool) or not isinstance(n_cand, int) or n_cand < 0):
                shown = repr(n_cand)[:40]
                raise ValueError(f"{source}: calibration: field 'n_candidates' must be a non-negative int, got {shown}")
            record = None
            if ver >= 3:
                record = CalibrationRecord.from_json(cal, "calibration")
                if ver >= 4 and record.undefined_score is not None:
                    raise ValueError(f"{source}: calibration: field 'undefined_score' must be null in format_version "
                                     f"{ver} (an undefined score counts as referred), got {record.undefined_score!r}")
                if ver == 3 and record.undefined_score is None and any(v is None for v in record.scores):
                    raise ValueError(f"{source}: calibration: field 'undefined_score' is null, but a format_version 3 "
                                     f"rule with undefined calibration scores records the score they took: {_EDITED}")
                # the estimate of classes as their mean, and of regions with prod(1 - p) for one not segmented, need
                # format_version 5, which a reader that would compute the former estimate for new cases refuses;
                # either without the other is an edited file
                kind, want = ("classes", "class_mean") if regions is None else ("regions", "region_mean")
                if (ver >= 5) != (record.expected_dice_estimate == want):
                    raise ValueError(f"{source}: calibration: field 'expected_dice_estimate' is "
                                     f"{record.expected_dice_estimate!r} in a format_version {ver} rule of {kind} "
                                     f"(format_version 5 records {want!r}, earlier ones nothing): {_EDITED}")
                # the binomial p-value needs format_version 6, which a reader that would recompute the certificate with
                # Hoeffding-Bentkus refuses; either without the other is an edited file (review 66)
                if (ver >= 6) != (record.p_value == "binomial"):
                    raise ValueError(f"{source}: calibration: field 'p_value' is {record.p_value!r} in a "
                                     f"format_version {ver} rule (format_version 6 records 'binomial', earlier ones "
                                     f"nothing): {_EDITED}")
            rule = cls(
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
                calibration_cases=tuple(_field(cal, "cases", f"{source}: calibration", list)),
                bound=_number(cal.get("bound"), "calibration.bound", allow_null=True),
                coverage=_number(cal.get("coverage"), "calibration.coverage", allow_null=True),
                observed_risk=_number(cal.get("observed_risk"), "calibration.observed_risk", allow_null=True),
                n_candidates=n_cand or 0,
                n_undefined=_field(cal, "n_undefined", f"{source}: calibration", int),
                patch_size=_field(sc, "patch_size", f"{source}: score", int),
                map_source=_field(sc, "map_source", f"{source}: score", str),
                region=sc.get("region"),
                num_classes=None if n_cls is None else _field(d, "num_classes", source, int),
                class_names=None if names is None else tuple(
                    check_text(n, f"{source}: class_names[{i}]")
                    for i, n in enumerate(_field(d, "class_names", source, list))),
                image_reference=None if ref is None else ImageReference.from_json(ref, "image_reference"),
                fingerprint=dict(fp),
                # descriptive texts are untrusted too: they reach triage.json, the page and the monitoring store
                created=check_text(d.get("created", ""), f"{source}: field 'created'"),
                version=check_text(d.get("monai_unc_version", ""), f"{source}: field 'monai_unc_version'"),
                regions=regions,
                record=record,
                geometry=d.get("geometry"),  # checked by the constructor (read_geometry)
            )
            rule.verify_certificate()
            rule._refuse_accepted_undefined()
            digested = check_digest and provenance.check_digest(d, source=source, written_by=_WRITTEN_BY,
                                                                required=False)
            if record is None:
                held = ("holds a calibration record, which this format version does not check" if any(
                    k in cal for k in ("dice", "risks", "case_scores")) else
                    "records no calibration cases' scores and risks (a rule written before monai-unc recorded them)")
                rule.integrity = (f"not recomputed: the file has format_version {ver}, which {held}; its threshold "
                                  "is trusted as written")
            else:
                rule.integrity = ("recomputed, digest verified" if digested else
                                  "recomputed, no digest" if check_digest else "recomputed")
            return rule
        except ValueError as e:
            msg = str(e)
            msg = msg if msg.startswith(source) else f"{source}: {msg}"
            # a value of the file echoed whole (a 100 000-character text) made a one-line error of that size (found by
            # hostile review 60): the line is cut, as no refusal of a field needs more
            raise ValueError(msg if len(msg) <= _MAX_MESSAGE else msg[:_MAX_MESSAGE - 4] + " ...") from None

    def save(self, path: str | os.PathLike) -> Path:
        """Write the rule as strict JSON, signed (:func:`~monai_unc.io.provenance.write_signed_json`), atomically.

        Args:
            path: the file (usually ``<output>/referral_rule.json``).

        Returns:
            The path written.
        """
        return provenance.write_signed_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike, trust: Trust | None = None) -> ReferralRule:
        """Read and verify a rule file (:meth:`from_json` with the digest checked).

        With ``trust`` the signature must verify against a trusted key (:mod:`monai_unc.io.signing`), and a rule of
        an older format (its certificate cannot be recomputed) is refused unless ``trust.allow_unsigned``;
        :attr:`signature` says how it was checked.

        Args:
            path: the rule file.
            trust: the trusted keys, or None (the signature is not checked: the Python API on a file the caller
                trusts).

        Returns:
            The rule.

        Raises:
            FileNotFoundError: no file at ``path``.
            TypeError: ``trust`` is neither a :class:`~monai_unc.io.signing.Trust` nor None.
            ValueError: naming the problem when the file is not valid JSON, a field is missing or wrong, or the file
                was edited or corrupted (its certificate recomputed from its calibration record disagrees, or its
                content digest does not match).
        """
        if trust is not None and not isinstance(trust, Trust):  # found by hostile review 60: an AttributeError
            raise TypeError(f"trust must be a Trust (monai_unc.io.signing.Trust) or None, got {trust!r:.80}")
        path = Path(path)
        d = read_checked_json(path, fmt=RULE_FORMAT, versions=range(1, RULE_VERSION + 1), what="referral rule",
                              written_by=_WRITTEN_BY, digest=False)  # compared by from_json, after the fields
        rule = cls.from_json(d, f"referral rule {path}", check_digest=True)
        if trust is not None:
            if rule.record is None and not trust.allow_unsigned:
                raise ValueError(f"referral rule {path} has format_version {d['format_version']}: its certificate "
                                 "cannot be recomputed, so its threshold would be trusted as written; certify it "
                                 f"again with monai-unc evaluate --target-risk, or {trust.hint('allow')}")
            rule.signature = provenance.check_signature(d, trust, f"referral rule {path}")
        return rule


def as_float(v: Any) -> float:
    """A score cell as a float: None and ``""`` (an undefined score) are NaN.

    The cell is read by :func:`~monai_unc.io.cell_float` with its defaults (the one reader of numbers in tables).

    Args:
        v: a cell of ``metrics.csv`` / ``triage.csv`` (a number, a numeric string, ``""`` or None).

    Returns:
        The value as a float (``nan`` / ``inf`` cells as NaN and infinity).

    Raises:
        ValueError: a string that is not a number in the syntax of CSV (:func:`~monai_unc.io.parse_float`: ``1_000``
            is refused, which ``float`` read as 1000).
        TypeError: a bool (``True`` is no score of 1.0) or another value that is no number, text or None.

    Example:
        >>> as_float(""), as_float("0.25"), as_float(None)
        (nan, 0.25, nan)
    """
    return cell_float(v)


def check_recorded_decisions(cases: Sequence[Mapping[str, Any]], rule: ReferralRule, source: str) -> None:
    """Refuse a recorded decision (``triage.json``'s ``cases``, a file a user may edit) the rule could not have made.

    Each case's decision is derived again from its recorded score and the rule (:meth:`ReferralRule.apply`: certified,
    score defined, inside the calibration range, at most the threshold), and from its recorded ``image_z_max`` when
    the image check applied: that check refers a case whose largest robust z-score exceeds the rule's ``z_max`` before
    the threshold does (``image_statistics``), and only such a case (``triage`` records ``image_z_max`` whenever the
    check ran; the image statistics are finite, so their largest z-score decides). A ``review`` of a case whose score
    the rule accepts is therefore legitimate only with the code ``image_statistics`` (or no code) and an
    ``image_z_max`` above ``z_max``; an ``accept`` only where every check passes. The recorded ``code`` (absent in a
    hand-written file: the decision alone is compared) must be the first reason :meth:`ReferralRule.apply` gives.
    The report of a triage folder (``triage.html``) and ``dicom-export --triage`` (the SR states the decisions beside
    the rule's digest) read decisions through this check.

    Args:
        cases: the recorded cases: objects with ``case``, ``decision`` (``accept`` / ``review``), ``score`` (a finite
            number or None: undefined), optional ``code`` and ``image_z_max`` (a finite number or None).
        rule: the rule of the triage (``triage.json``'s ``rule``, checked: :meth:`ReferralRule.from_json`).
        source: how the message names the file.

    Raises:
        ValueError: one line naming ``source``, the case and what differs: the decision (and code) recorded and the
            one the rule gives for the recorded score (and image z-score), or a field that is no number.

    Example:
        >>> rule = ReferralRule("predictive_entropy_fg_mean", 0.3, True, 0.1, 0.1, "sgr", "failure", 0.8,
        ...                     (0.1, 0.2, 0.3, 0.4), ("a", "b", "c", "d"))
        >>> check_recorded_decisions([{"case": "a", "score": 0.2, "decision": "accept", "code": "accepted"}], rule,
        ...                          "triage.json")
        >>> try:
        ...     check_recorded_decisions([{"case": "b", "score": 0.35, "decision": "accept"}], rule, "triage.json")
        ... except ValueError as e:
        ...     print(str(e).split(" must be ")[1])
        the rule's decision for its score 0.35 (review: above_threshold), got 'accept'
    """
    ref = rule.image_reference
    for i, c in enumerate(cases):
        cid, decision, code = c.get("case"), c.get("decision"), c.get("code")
        for name in ("score", "image_z_max"):
            value = c.get(name)
            if value is not None and not is_finite_real(value):
                raise ValueError(f"{source}: field 'cases[{i}].{name}' of case {cid!r} must be a finite number or "
                                 f"null, got {value!r:.80}"[:400])
        if code is not None and not Decision.code_agrees(decision, code):
            raise ValueError(f"{source}: field 'cases[{i}].code' of case {cid!r} is {code!r:.40}, which does not agree "
                             f"with its decision {decision!r:.40} (codes: {', '.join(Decision.CODES)})"[:400])
        v = math.nan if c.get("score") is None else float(c["score"])
        want = rule.apply([v])[0].code  # the checks on the score, in apply's order
        z = c.get("image_z_max")
        if want in ("accepted", "above_threshold") and ref is not None and z is not None:
            # the image check applied (its largest z-score recorded) decides before the threshold (apply)
            if z > ref.z_max:
                want = "image_statistics"
            elif code == "image_statistics":
                raise ValueError(f"{source}: field 'cases[{i}].code' of case {cid!r} is 'image_statistics' but its "
                                 f"field 'image_z_max' {ref.z_text(z)} is within the rule's z_max {ref.z_max:g}"[:400])
        if code == "image_statistics" and want != "image_statistics" and want in ("accepted", "above_threshold"):
            why = "the rule holds no image reference" if ref is None else "its field 'image_z_max' is not recorded"
            raise ValueError(f"{source}: field 'cases[{i}].code' of case {cid!r} is 'image_statistics' but {why}: the "
                             f"rule's decision for its score {format_score(v)} is "
                             f"{'accept' if want == 'accepted' else 'review'} ({want})"[:400])
        ok = (decision == "accept") == (want == "accepted") if code is None else code == want
        if not ok:
            wanted = "accept" if want == "accepted" else "review"
            got = f"{decision!r}" + (f" ({code})" if code else "")
            image = f" and image z {ref.z_text(z)} > {ref.z_max:g}" if want == "image_statistics" and ref else ""
            raise ValueError(f"{source}: field 'cases[{i}].decision' of case {cid!r} must be the rule's decision "
                             f"for its score {format_score(v)}{image} ({wanted}: {want}), got {got}"[:400])


#: what writes ``triage.json`` (named by the messages of :func:`check_triage_summary`)
TRIAGE_WRITER = "monai-unc triage"


def triage_signing_key() -> Path | None:
    """The key ``triage.json`` is signed with: a configured signing key, never one created for it.

    ``$MONAI_UNC_SIGNING_KEY`` when set (it must exist), else the configuration folder's ``signing_key.pem`` when it
    exists (:func:`~monai_unc.io.signing.default_signing_key` with ``create=False``), else None: the triage output is
    then written with its digest only.

    Returns:
        The private key file, or None.

    Raises:
        ValueError: ``$MONAI_UNC_SIGNING_KEY`` names no file; ``KeyPairMismatchError`` for a pair whose public key
            is another key's.

    Example:
        >>> key = triage_signing_key()
        >>> key is None or key.is_file()
        True
    """
    return default_signing_key(create=False)


def write_triage_summary(path: str | os.PathLike, summary: Mapping[str, Any],
                         key: str | os.PathLike | None = None) -> tuple[Path, dict[str, Any]]:
    """Write ``triage.json`` atomically with its content ``digest`` and, with ``key``, its ``signature``.

    The digest is :func:`~monai_unc.io.provenance.rule_digest` of the whole document (as a rule file's), the
    signature that of :func:`~monai_unc.io.signing.sign_digest` over it. An edited ``triage.json`` (a case's
    decision flipped, its score changed with it, a case removed) then no longer matches its digest, and a digest
    recomputed by whoever edited it no longer matches the signature (:func:`check_triage_summary`).

    Args:
        path: the file (``<output>/triage.json``).
        summary: the triage summary (a ``digest`` and ``signature`` it holds are replaced).
        key: the private key to sign with (:func:`triage_signing_key`), or None (digest only).

    Returns:
        ``(path, document written)``.

    Raises:
        ValueError: ``key`` is no readable Ed25519 private key; ``UnprotectedKeyError`` where other users can read
            or write it (naming it).

    Example:
        >>> import json
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     _, doc = write_triage_summary(Path(d) / "triage.json", {"cases": [{"case": "a", "decision": "accept"}]})
        ...     check_triage_summary(json.loads((Path(d) / "triage.json").read_text()), "triage.json")[:8]
        'unsigned'
    """
    body = json_safe({k: v for k, v in summary.items() if k not in ("digest", SIGNATURE_FIELD)})
    body["digest"] = rule_digest(body)
    if key is not None:
        body[SIGNATURE_FIELD] = sign_digest(body["digest"], key)
    return atomic_write_json(path, body), body


def check_triage_summary(doc: Mapping[str, Any], source: str, trust: Trust | None = None, *,
                         warn: bool = False) -> str:
    """Check ``triage.json`` (parsed, untrusted) against its digest and signature; say how it was checked.

    A file with a ``digest`` must match it (an edit the writer did not make), and a file with a ``signature`` must
    be signed over that digest (:func:`~monai_unc.io.signing.verify_signature`): a digest recomputed after an edit no
    longer matches it. A file without a digest (written before monai-unc recorded one, or by hand) is read as
    unverified. The limits (docs/triage.md): a digest is no signature, so without ``trust`` an edited file whose
    signature was removed and whose digest was recomputed reads as unsigned, and one re-signed with an untrusted key
    as signed by that key; with ``trust`` (not ``allow_unsigned``) only a signature by a trusted key is accepted
    (the readers' ``--trusted-keys``: ``monitor record``, ``dicom-export --triage``).

    Args:
        doc: the parsed ``triage.json``.
        source: how the messages name it.
        trust: the trusted keys a signature must verify against, requiring one unless ``allow_unsigned``: the
            files or folders of :attr:`~monai_unc.io.signing.Trust.keys` besides the defaults
            (:func:`~monai_unc.io.signing.trusted_public_keys`: ``MONAI_UNC_TRUSTED_KEYS``, the configuration
            folder's keys), read first (a missing one is refused, naming ``trusted_keys``); None: a signature is
            verified against the trusted keys where present, its absence accepted.
        warn: say a file read without a check of who wrote it in one ``UserWarning`` (naming ``source`` and the
            line returned; attributed to the caller): one without a digest (``"unverified: ..."``) and one signed
            by a key that is not trusted here. A file whose digest matches without a signature (``"unsigned: ..."``,
            triage without a signing key configured) is not warned about; its reader records the line (earlier
            versions' readers discarded it, so a file whose digest and signature were deleted read without a word).

    Returns:
        One line: ``"signed by ... (trusted key ...)"``, ``"signed by <key>, a key that is not trusted here"``,
        ``"unsigned: ..."`` or ``"unverified: ..."``.

    Raises:
        ValueError: starting with ``source``: the content does not match its digest, the signature does not match
            (or, with ``trust`` not ``allow_unsigned``, the digest or signature is missing or the key is not
            trusted), or a signature without a digest; a key file or folder of ``trust`` that cannot be read.

    Example:
        >>> doc = {"cases": [{"case": "a", "decision": "review"}]}
        >>> doc["digest"] = rule_digest(doc)
        >>> check_triage_summary(doc, "triage.json")[:8]
        'unsigned'
        >>> doc["cases"][0]["decision"] = "accept"
        >>> try:
        ...     check_triage_summary(doc, "triage.json")
        ... except ValueError as e:
        ...     print(str(e)[:44])
        triage.json does not match its digest (field
    """
    if trust is not None and not isinstance(trust, Trust):
        raise TypeError(f"trust must be a Trust (monai_unc.io.signing.Trust) or None, got {trust!r:.80}")
    required = trust is not None and not trust.allow_unsigned
    if required:  # the keys first: a mistyped --trusted-keys is said as such, whatever the file holds
        trusted_public_keys(trust.keys, named=trust.hint("keys"))
    sig = doc.get(SIGNATURE_FIELD)
    if doc.get("digest") is None:
        if sig is not None:
            raise ValueError(f"{source}: field 'signature' without its field 'digest': the file was edited; triage "
                             "the cases again")
        if required:
            raise ValueError(f"{source} carries no digest or signature, so that it is the triage's output cannot be "
                             "checked: triage the cases again with a signing key configured")
        return _said("unverified: no digest (written before monai-unc recorded one, or by hand)", source, warn,
                     "triage the cases again to record one")
    check_digest(doc, source=source, written_by=TRIAGE_WRITER)
    if sig is None:
        if required:
            raise ValueError(f"{source} is not signed (field 'signature'), so who wrote it cannot be checked: triage "
                             "the cases again with a signing key configured (MONAI_UNC_SIGNING_KEY or monai-unc keys "
                             "--create)")
        return "unsigned: its digest matches (no signing key was configured when it was written)"
    # required: a signature by a key not trusted here is verified against its own key first (an edit is said as
    # such), then refused in the readers' words (verify_signature's names --allow-unsigned, which they do not have)
    line = verify_signature(doc, str(doc["digest"]), replace(trust, allow_unsigned=True) if required else
                            trust if trust is not None else Trust(allow_unsigned=True), source)
    if required and line.startswith("UNSIGNED"):
        # the caller's words (review 63): the command line's option, or the Python caller's Trust
        named = "--trusted-keys" if trust.command_line else "trust=Trust(keys=[FILE_OR_FOLDER])"
        raise ValueError(f"{source} is signed by key {sig['key']}, which is not a trusted key here, so who wrote it "
                         f"cannot be checked: trust its public key ({named}, MONAI_UNC_TRUSTED_KEYS or the "
                         "configuration folder's trusted_keys/), or triage the cases again with a trusted key")
    if line.startswith("UNSIGNED") and trust is None:
        return _said(f"signed by {sig['key']}, a key that is not trusted here: who wrote it is not checked", source,
                     warn, "trust its public key (MONAI_UNC_TRUSTED_KEYS, or the configuration "
                     "folder's trusted_keys/) to check it")
    return line


def _said(line: str, source: str, warn: bool, hint: str) -> str:
    """``line``, warned about first when ``warn``.

    The warning names ``source`` and is attributed to the caller of :func:`check_triage_summary` (a command's module:
    the command line shows it as one ``warning:`` line).
    """
    if warn:
        warnings.warn(f"{source} is read without a check of who wrote it: {line}; {hint}", UserWarning, stacklevel=3)
    return line
