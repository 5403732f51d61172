"""The computations of the masks with a guarantee (docs/conformal.md): fitting the rules, the rule file, applying it.

The product itself (options, checks, the protocol's hooks) is :class:`monai_unc.products.ConformalMasks`; its rules
are fitted inside ``evaluate`` and applied by ``monai-unc conformal``. In expectation they are conformal risk control
(Angelopoulos, Bates, Fisch, Lei, Schuster, "Conformal Risk Control", ICLR 2024); with the product's ``delta`` the
high-probability rule of Mossina and Friedrich ("Controlling False Positives in Image Segmentation via Conformal
Prediction", 2025); the formulas are in :mod:`monai_unc.metrics.conformal`.

- :class:`ConformalState` and :func:`conformal_state`: a case's state (one
  :class:`~monai_unc.metrics.conformal.ConformalCaseState` per side, and the maps it read from files).
- :func:`fit_product` (:func:`conformal_strata`, :func:`fit_conformal_rules`): the rule of every side from the
  calibration cases' states, and the ``conformal`` block of ``summary.json`` (achieved calibration loss per class
  or region, with the target).
- :class:`ConformalRuleFile` (:func:`write_rule_file`): ``conformal_rule.json``: the rules, the predictions'
  fingerprint (:func:`~monai_unc.io.provenance.prediction_fingerprint`, as ``referral_rule.json`` has),
  ``format_version`` and a sha256 content digest, both checked when read
  (:func:`~monai_unc.io.provenance.read_checked_json`). The rules cannot be refitted without the case states, so
  reading checks the digest and the structure.
- :class:`ConformalStrata`: optional strata of a label-free case score, each with its own ``lambda_hat``; the rule
  file records the score, its edges and how a new case's score is computed.
- :func:`check_conformal_probabilities`: before any work, every case must have probabilities and the first case's
  must be probabilities of the rule's activation.
- :func:`run_conformal`: the whole of ``monai-unc conformal`` on the cohort engine: per case the masks
  ``<case>_outer.nii.gz`` / ``<case>_inner.nii.gz`` in the prediction's geometry (softmax: one channel per
  foreground class, 3D when there is one; regions: 4D, one channel per region), nested (:func:`nest_masks`), and a
  row of ``conformal.csv``.

The band width of ``conformal.csv`` (``band_p95_mm_<name>``) is the 95th percentile, over the boundary voxels of
the outer mask (mask voxels with a 6-neighbour outside it), of the distance in mm to the nearest inner-mask voxel;
the predicted mask stands in for a side the rule does not have; the volume's border is no boundary. It is NaN when
either mask is empty or the outer mask fills the volume (no boundary inside it: e.g. a margin rule's trivial mask).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import ndimage

from .. import __version__
from .._utils import check_probabilities, check_text, check_unit_interval, quantile_rank, refusing
from ..engine import CaseCache, CohortRun, get_dist_context, run_cases
from ..io import (
    LAYOUTS,
    CaseError,
    CaseFiles,
    atomic_write_json,
    case_files_digest,
    cell_float,
    check_inputs_not_written,
    check_output_folder,
    check_output_kind,
    clean_partial_files,
    file_sha256,
    json_safe,
    load_case,
    read_probabilities,
    save_nifti,
    save_region_maps,
    sheared_grid,
    write_csv,
)
from ..io.files import file_version, settled
from ..io.provenance import (
    RuleRead,
    calibration_geometry,
    case_geometry_warning,
    check_digest,
    check_document,
    check_prediction_fingerprint,
    check_signature,
    list_prediction_cases,
    load_rule,
    prediction_fingerprint,
    read_checked_json,
    read_geometry,
    rule_digest,
    rule_file_path,
    write_signed_json,
)
from ..io.signing import SIGNATURE_FIELD, Trust
from ..metrics.boundary import distance_to_mask
from ..metrics.conformal import (
    CONFORMAL_FAMILIES,
    TRIVIAL_MASKS,
    ConformalCaseState,
    ConformalRule,
    ConformalTaskRule,
    conformal_case_state,
    conformal_grid,
    crc_tolerance,
    fit_conformal_rule,
    last_index,
    min_calibration_cases,
    quantile_edges,
    stratum_of,
    task_guarantee,
)
from ..product import CohortProduct
from ..regions import check_regions
from ..scores import CASE_SCORES, case_score_columns, resolve_score_column
from ..state import StateGroup, register_state_type
from .cohort import score_column
from .config import STATE_DIR, EvaluationConfig, former_region_suffix, parse_score_column, region_suffix, slug
from .products import command_output_markers
from .region_case import predicted_regions, region_score_columns
from .resume import CASES_DIR, check_inputs_unchanged, file_signature, input_signatures, map_signature
from .rows import derived_maps

#: the loss of each side (``outer``: false-negative rate, ``inner``: false-positive share of the mask)
CONFORMAL_LOSSES = {"outer": "fnr", "inner": "fp"}

__all__ = ["CONFORMAL_RULE_FILE", "CONFORMAL_RULE_FORMAT", "CONFORMAL_WRITES", "CONFORMAL_LOSSES", "ConformalState",
           "conformal_state", "ConformalRuleFile", "ConformalStrata", "conformal_strata",
           "check_conformal_probabilities", "check_rule_fields", "calibration_geometry", "check_case_geometry",
           "fit_conformal_rules", "fit_product", "write_rule_file", "nest_masks",
           "conformal_masks", "mask_file", "save_masks", "remove_stale_masks",
           "calibration_case_masks", "conformal_case", "check_conformal_inputs", "check_margin_grid",
           "run_conformal"]

#: the rule file ``evaluate --conformal`` writes
CONFORMAL_RULE_FILE = "conformal_rule.json"
#: the ``format`` field of the rule file
CONFORMAL_RULE_FORMAT = "monai-unc conformal rule"
_FORMAT_VERSION = 1
#: what ``monai-unc conformal`` writes in its output folder (patterns of :func:`monai_unc.io.check_inputs_not_written`)
CONFORMAL_WRITES = ("conformal.csv", "conformal.json", "*_outer.nii.gz", "*_inner.nii.gz", "failures.json",
                    STATE_DIR, f"{STATE_DIR}/*", ".*.partial*")
_STATE_FORMAT = 1


# ----------------------------------------------------------------------------------------------------------------
# the per-case state
# ----------------------------------------------------------------------------------------------------------------
@register_state_type("conformal_masks")
class ConformalState:
    """One case's state of the masks product: a :class:`~monai_unc.metrics.conformal.ConformalCaseState` per side.

    It also records which uncertainty maps the case read from files (``file_maps``): a stratified rule computes a
    new case's score the same way (from the map file, or from the probabilities).

    Args:
        sides: ``{side: ConformalCaseState}`` (a :class:`~monai_unc.state.StateGroup` or a mapping).
        file_maps: the measures whose maps were read from files.

    Example:
        >>> import numpy as np
        >>> probs = np.stack([np.full((4, 4), 0.3), np.full((4, 4), 0.7)])
        >>> side = conformal_case_state(probs, np.ones((4, 4), int), side="outer")
        >>> state = ConformalState({"outer": side}, ["predictive_entropy"])
        >>> ConformalState.from_state_dict(state.state_dict()) == state
        True
    """

    def __init__(self, sides: Mapping[str, ConformalCaseState], file_maps: Sequence[str] = ()) -> None:
        self.sides = sides if isinstance(sides, StateGroup) else StateGroup(sides)
        self.file_maps = tuple(sorted(str(m) for m in file_maps))

    def merge(self, other: ConformalState) -> ConformalState:
        """Pool the voxels of ``other`` side by side (in place); a map counts as a file map if it is one in both.

        Args:
            other: another state of the same sides.

        Returns:
            ``self``.
        """
        self.sides.merge(other.sides)
        self.file_maps = tuple(sorted(set(self.file_maps) & set(other.file_maps)))
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as arrays: the sides under ``sides.<key>``, the file maps under ``file_maps``.

        Returns:
            The arrays.
        """
        out = {f"sides.{k}": v for k, v in self.sides.state_dict().items()}
        out["file_maps"] = np.array(self.file_maps, dtype=np.str_)
        return out

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> ConformalState:
        """The state of :meth:`state_dict`.

        Args:
            state: the arrays.

        Returns:
            The state.
        """
        sides = StateGroup.from_state_dict({k[len("sides."):]: v for k, v in state.items() if k.startswith("sides.")})
        return cls(sides, [str(m) for m in np.asarray(state["file_maps"]).reshape(-1).tolist()])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConformalState):
            return NotImplemented
        return self.sides == other.sides and self.file_maps == other.file_maps

    __hash__ = None  # type: ignore[assignment]


def conformal_state(case: Any, tasks: Sequence[Any], targets: Mapping[str, float], family: str,
                    class_names: Sequence[str] | None = None) -> ConformalState:
    """The case's state of every side of ``targets``.

    The states compare softmax probabilities against the label map (every class one-vs-rest, named by
    ``class_names`` or ``0 .. C-1``), or per region the sigmoid probabilities against the region's true mask. The
    margin family dilates or erodes the predicted segmentation (the ``seg`` file, or the predicted regions).

    Args:
        case: the loaded case (it must have probabilities).
        tasks: its tasks (:func:`~monai_unc.evaluation.rows.case_tasks`).
        targets: ``{side: target}`` (the sides are used).
        family: ``"threshold"`` or ``"margin"``.
        class_names: the class names of a class evaluation.

    Returns:
        The :class:`ConformalState`.

    Raises:
        ValueError: the case has no probabilities.
    """
    if case.probs is None:
        raise ValueError(f"conformal: case {case.case_id!r} has no probabilities (the conformal masks need them)")
    if case.multilabel:
        target = np.stack([t.target.astype(bool) for t in tasks])
        pred = np.stack([t.pred.astype(bool) for t in tasks])
        kw: dict[str, Any] = {"activation": "sigmoid", "names": [str(t.name) for t in tasks]}
    else:
        target, pred = case.label, case.seg
        kw = {"activation": "softmax", "names": list(class_names) if class_names else None}
    if family == "margin":
        check_margin_grid(case)
    sides = {side: conformal_case_state(case.probs, target, family=family, side=side, spacing=case.spacing,
                                        pred=pred, **kw) for side in targets}
    return ConformalState(sides, [m for m in case.maps if m not in getattr(case, "derived", ())])


# ----------------------------------------------------------------------------------------------------------------
# strata of a label-free case score
# ----------------------------------------------------------------------------------------------------------------
_STRATA_METHODS = ("quantiles", "fixed")


@dataclass(frozen=True)
class ConformalStrata:
    """How the conformal rules are stratified (Mondrian calibration).

    The strata are ranges of a case score that needs no labels: the score, the edges of its strata and how a new
    case's score is computed.

    Attributes:
        score: the column of ``metrics.csv``: ``<measure>_<aggregation>`` (for regions the mean over the regions)
            or ``<measure>_<aggregation>_<R>`` of one region (:func:`~monai_unc.evaluation.config.parse_score_column`).
        measure: the uncertainty map.
        aggregation: ``"mean"``, ``"fg_mean"`` or ``"patch_mean"`` (:mod:`monai_unc.scores`).
        region: the region of a per-region score, or None.
        edges: the inner edges (those of every rule): stratum ``s`` holds scores in ``[edges[s-1], edges[s])``,
            an undefined score (NaN) the last stratum (:func:`~monai_unc.metrics.conformal.stratum_of`).
        method: ``"quantiles"`` (:func:`~monai_unc.metrics.conformal.quantile_edges` of the calibration cases'
            scores) or ``"fixed"`` (given in advance).
        counts: the calibration cases per stratum.
        map_source: ``"file"`` (the measure's map files, ``<case>_<measure>``) or ``"probabilities"`` (the map
            derived from the probabilities, as ``evaluate`` does without map files).
        patch_size: the box size of ``patch_mean``.
    """

    score: str
    measure: str
    aggregation: str
    region: str | None
    edges: tuple[float, ...]
    method: str
    counts: tuple[int, ...]
    map_source: str
    patch_size: int

    def __post_init__(self) -> None:
        """Check the fields (``ValueError`` naming the field)."""
        if self.method not in _STRATA_METHODS:
            raise ValueError(f"method must be one of {_STRATA_METHODS}, got {self.method!r}")
        if self.map_source not in ("file", "probabilities"):
            raise ValueError(f"map_source must be 'file' or 'probabilities', got {self.map_source!r}")
        e = np.asarray(self.edges, dtype=np.float64).reshape(-1)
        if e.size < 1 or not np.isfinite(e).all() or np.any(np.diff(e) <= 0):
            raise ValueError(f"edges must be one or more finite, strictly increasing values, got {self.edges!r}")
        if len(self.counts) != len(self.edges) + 1:
            raise ValueError(f"counts must have one entry per stratum ({len(self.edges) + 1}), got {len(self.counts)}")
        if any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 0 for c in self.counts):
            raise ValueError(f"counts must be non-negative integers, got {self.counts!r}")
        if isinstance(self.patch_size, bool) or not isinstance(self.patch_size, (int, np.integer)) \
                or self.patch_size < 1:
            raise ValueError(f"patch_size must be a positive integer, got {self.patch_size!r}")

    def stratum(self, score: float) -> int:
        """The stratum of a case score (NaN: the last).

        Args:
            score: the case score.

        Returns:
            The stratum index.
        """
        return int(stratum_of([score], self.edges)[0])

    def case_score(self, case: Any, regions: Mapping[str, Sequence[int]] | None = None) -> float:
        """The score of a loaded case (:func:`~monai_unc.io.load_case`), computed from its prediction alone.

        It is computed as ``evaluate`` computed it for ``metrics.csv``.

        Args:
            case: the loaded case (with its map files when ``map_source`` is ``"file"``).
            regions: the region spec of region-based predictions.

        Returns:
            The score (NaN when undefined, e.g. ``fg_mean`` of an empty prediction); ``CaseError`` when the map is
            missing.
        """
        maps = derived_maps(case if self.map_source == "file" else replace(case, maps={}))
        if self.measure not in maps:
            source = "its <case>_<measure> map file" if self.map_source == "file" else "its probabilities"
            raise CaseError(f"case {case.case_id!r}: no {self.measure} map for the strata score {self.score} (the "
                            f"rule computes it from {source}; available: {sorted(maps) or 'none'})")
        # the scores' core: an undefined score (fg_mean of an empty prediction) is said below if it is the strata
        # score, and not at all if it is another score of the map (in earlier versions every UserWarning was ignored
        # here inside warnings.catch_warnings(), a process-wide filter)
        if regions is not None:
            cols = region_score_columns({self.measure: maps[self.measure]}, predicted_regions(case, regions),
                                        list(regions), self.patch_size, warn=False)
        else:
            cols = case_score_columns({self.measure: maps[self.measure]}, case.seg, self.patch_size, warn=False)
        key = self.score
        if key not in cols and self.region is not None:  # a rule of a version with ASCII-only region columns
            key = f"{self.measure}_{self.aggregation}_{region_suffix(self.region)}"
        value = float(cols[key])
        if not np.isfinite(value):
            warnings.warn(f"case {case.case_id!r}: the strata score {self.score} is undefined (NaN, e.g. an empty "
                          "prediction): the case goes to the last stratum", UserWarning, stacklevel=2)
        return value

    def to_dict(self) -> dict[str, Any]:
        """The strata as JSON-able values (:meth:`from_dict` reads them back).

        Returns:
            A dict of plain values.
        """
        d = dict(self.__dict__)
        d["edges"], d["counts"] = list(self.edges), list(self.counts)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConformalStrata:
        """The strata of :meth:`to_dict`.

        Every field is checked as read from an untrusted file: no coercion (``"inf"`` is no edge, ``20.9`` no count,
        ``null`` no score), edges finite and strictly increasing, counts non-negative integers, a positive patch
        size, and a score column made of the recorded measure, aggregation and region.

        Args:
            d: the dict.

        Returns:
            The strata; ``ValueError`` naming the field (``strata.<field>``) when one is missing or wrong.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"field 'strata' must be an object or null, got {_shown(d)}")
        keys = ("score", "measure", "aggregation", "region", "edges", "method", "counts", "map_source", "patch_size")
        missing = [k for k in keys if k not in d]
        if missing:
            raise ValueError(f"field 'strata' lacks {missing}")
        unknown = [str(k) for k in d if k not in keys]
        if unknown:  # found by hostile review: an added field was ignored
            raise ValueError(f"field 'strata.{unknown[0]}' is not a field of the strata")

        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"field 'strata.{name}' {why}, got {_shown(d[name])}")

        for k in ("score", "measure", "aggregation", "method", "map_source"):
            if not isinstance(d[k], str):
                raise bad(k, "must be a string")
        if d["region"] is not None and not isinstance(d["region"], str):
            raise bad("region", "must be a string or null")
        edges, counts = d["edges"], d["counts"]
        if (not isinstance(edges, (list, tuple)) or not edges or not all(_is_number(e) for e in edges)
                or any(b <= a for a, b in zip(edges, edges[1:]))):
            raise bad("edges", "must be one or more finite, strictly increasing numbers")
        if not isinstance(counts, (list, tuple)) or not all(_is_int(c) and c >= 0 for c in counts):
            raise bad("counts", "must be a list of non-negative integers")
        if len(counts) != len(edges) + 1:
            raise bad("counts", f"must have one entry per stratum ({len(edges) + 1})")
        if not _is_int(d["patch_size"]) or d["patch_size"] < 1:
            raise bad("patch_size", "must be a positive integer")
        if d["aggregation"] not in CASE_SCORES:
            raise bad("aggregation", f"must be one of {CASE_SCORES}")
        if d["method"] not in _STRATA_METHODS:
            raise bad("method", f"must be one of {_STRATA_METHODS}")
        if d["map_source"] not in ("file", "probabilities"):
            raise bad("map_source", "must be 'file' or 'probabilities'")
        region = d["region"]
        try:
            parsed = parse_score_column(d["score"], None if region is None else [region], "strata.score")
        except ValueError:
            parsed = None
        former = None if region is None else former_region_suffix(region)
        if (parsed is None and former is not None and former != region_suffix(region)
                and d["score"] == f"{d['measure']}_{d['aggregation']}_{former}"):
            # written when region columns kept ASCII letters only ("Ödem": "..._dem"): the region's column is named
            # now as region_suffix names it, found by (measure, aggregation, region) when a case is scored
            parsed = (d["measure"], d["aggregation"], region)
        if parsed != (d["measure"], d["aggregation"], region):
            raise bad("score", f"must be the column of the recorded measure {d['measure']!r}, aggregation "
                      f"{d['aggregation']!r} and region {region!r}")
        return cls(d["score"], d["measure"], d["aggregation"], region, tuple(float(e) for e in edges), d["method"],
                   tuple(int(c) for c in counts), d["map_source"], int(d["patch_size"]))


def _as_score(v: Any) -> float:
    """A row's score as a float by :func:`~monai_unc.io.cell_float` (None and empty: NaN; no number: refused)."""
    return cell_float(v)


def conformal_strata(rows: Mapping[str, Mapping[str, Any]], file_maps: Mapping[str, Sequence[str]],
                     product: Any, config: EvaluationConfig,
                     default_score: str | None = None) -> tuple[ConformalStrata | None, dict[str, float]]:
    """The strata of the product (``strata`` or ``strata_edges``) from the evaluated rows of the calibration cases.

    Args:
        rows: ``{case: metric row}`` of the calibration cases.
        file_maps: ``{case: measures whose maps were read from files}`` (:attr:`ConformalState.file_maps`).
        product: the :class:`~monai_unc.products.ConformalMasks` (``strata``, ``strata_edges``, ``stratify_by``,
            else ``default_score``).
        config: the evaluation options (the region spec, ``patch_size``).
        default_score: the triage score column of the evaluation.

    Returns:
        ``(strata, {case: score})`` of the calibration cases, or ``(None, {})`` without stratification.
        ``ValueError`` naming the option for a score that is not a label-free column or too few distinct scores.
    """
    if product.num_strata == 1:
        return None, {}
    cal = sorted(rows)
    wanted = product.stratify_by or default_score
    if wanted is None:
        raise ValueError("conformal_stratify_by: no score to stratify by (give one, or an evaluation with a score)")
    column = resolve_score_column(wanted, rows[cal[0]])
    measure, aggregation, region = parse_score_column(column, config.region_names if config.regions else None,
                                                      "conformal_stratify_by")
    if column not in rows[cal[0]]:
        have = [k for k in rows[cal[0]] if k.startswith(tuple(f"{m}_" for m in (measure, "predictive_entropy")))]
        raise ValueError(f"conformal_stratify_by: the evaluation has no column {column!r} (no {measure} map?); "
                         f"available e.g. {have[:6]}")
    scores = {c: _as_score(rows[c].get(column)) for c in cal}
    values = [scores[c] for c in cal]
    if product.strata_edges is not None:
        edges, method = tuple(float(e) for e in product.strata_edges), "fixed"
    else:
        try:
            edges, method = quantile_edges(values, int(product.strata)), "quantiles"
        except ValueError as e:
            raise ValueError(f"conformal_strata: {e} ({column} of the {len(cal)} calibration cases)") from None
    counts = np.bincount(stratum_of(values, edges), minlength=len(edges) + 1)
    source = "file" if all(measure in file_maps[c] for c in cal) else "probabilities"
    strata = ConformalStrata(column, measure, aggregation, region, edges, method, tuple(int(n) for n in counts),
                             source, int(config.patch_size))
    return strata, scores


def _guarantee(rule: ConformalRule, strata: ConformalStrata | None) -> str:
    """The guarantee of a rule in words (within each stratum of a stratified rule, with each stratum's count).

    The words of stratum 0's first task (:func:`~monai_unc.metrics.conformal.task_guarantee`) with its stratum and
    count made those of every stratum: the side's sentence named stratum 0's count as every stratum's ("marginal over
    the 3 calibration cases" for strata of 3, 4 and 3 cases; found by hostile review).
    """
    text = rule.tasks[0].guarantee
    if strata is None:
        return text
    counts = ", ".join(str(int(c)) for c in strata.counts)
    words = (f" within each stratum of {strata.score}; marginal over the calibration cases of the new case's stratum "
             f"({counts} in strata 0 to {len(strata.counts) - 1})")
    return re.sub(r" within stratum 0; marginal over the \d+ calibration cases", lambda _: words, text)


def _applied_guarantees(doc: ConformalRuleFile, check: Mapping[str, Any]) -> dict[str, str]:
    """Each side's guarantee for the cases of ``monai-unc conformal``: none for predictions of an allowed mismatch.

    Under ``--allow-mismatch`` with a fingerprint that differs, the sentence says that the guarantee does not cover
    these cases before the rule's own statement, as ``triage.json`` says it of the referral rule (in earlier
    versions ``conformal.json`` stated the guarantee in full for such predictions).
    """
    from .triage.rule import not_as_certified
    from .triage.runner import mismatch_fields

    out = {s: _guarantee(r, doc.strata) for s, r in doc.rules.items()}
    mismatch = mismatch_fields(check)
    if mismatch is None:
        return out
    return {s: f"no guarantee for these cases: {not_as_certified(mismatch)}: {text}" for s, text in out.items()}


# ----------------------------------------------------------------------------------------------------------------
# fitting (inside evaluate)
# ----------------------------------------------------------------------------------------------------------------
def _achieved(tasks: Sequence[Any], rule: ConformalRule) -> dict[str, Any]:
    """Per task ``lambda_hat``, the achieved calibration loss and, past a margin grid, ``trivial_mask``.

    ``trivial_mask`` (``"every voxel"`` / ``"no voxel"``) marks a margin rule past its grid
    (:func:`~monai_unc.metrics.conformal.last_index`), whose mask is not the prediction grown or shrunk by
    ``lambda_hat`` mm (found by hostile review: the report called it a dilation by 20.25 mm where the mask was the
    whole image).
    """
    past = last_index(rule.family, rule.size) if rule.family == "margin" else None
    out: dict[str, Any] = {}
    for t in tasks:
        row = {"lambda_hat": t.lambda_hat, "calibration_loss": t.calibration_loss,
               "calibration_above_tol": t.calibration_above_tol}
        if past is not None and t.index == past:
            row["trivial_mask"] = TRIVIAL_MASKS[rule.side]
        out[t.name] = row
    return out


def _pooled(rule: ConformalRule) -> dict[str, Any]:
    """Per task the calibration loss (and share above ``tol``) over every stratum.

    Each case is taken at its stratum's ``lambda_hat``; ``lambda_hat`` is None (one per stratum: ``per_stratum``).
    """
    out: dict[str, Any] = {}
    for name in rule.names:
        parts = [rule.task_rule(name, s) for s in range(rule.num_strata)]
        n = sum(t.n for t in parts)
        above = None if parts[0].calibration_above_tol is None else (
            sum(t.n * float(t.calibration_above_tol) for t in parts) / n)
        out[name] = {"lambda_hat": None, "calibration_loss": sum(t.n * t.calibration_loss for t in parts) / n,
                     "calibration_above_tol": above}
    return out


def fit_conformal_rules(
    states: Mapping[str, Mapping[str, ConformalCaseState]], product: Any,
    calibration_cases: Sequence[str] | None = None, *,
    strata: ConformalStrata | None = None, scores: Mapping[str, float] | None = None,
) -> tuple[dict[str, ConformalRule], dict[str, Any]]:
    """Fit the rule of every side of the product on the calibration cases.

    Args:
        states: ``{case: {side: state}}`` of the evaluated cases.
        product: the :class:`~monai_unc.products.ConformalMasks` (``targets``, ``family``, ``delta``: high
            probability when set).
        calibration_cases: the ids of the calibration cases as the user gave them (a case listed twice counts once;
            None: every case of ``states``).
        strata: the strata of :func:`conformal_strata` (None: one rule for every case).
        scores: ``{case: score}`` of the calibration cases, with ``strata``.

    Returns:
        ``({side: rule}, block)``: the rules and the ``conformal`` block of ``summary.json`` (the rules'
        ``activation``, ``softmax`` or ``sigmoid``; per side the target,
        the method and per class or region ``lambda_hat``, the achieved mean calibration loss and, with high
        probability, the share of calibration cases above the target; with strata, ``strata`` and per side
        ``per_stratum``, and ``per_task`` pooled over the strata with ``lambda_hat`` None).

    Raises:
        ValueError: too few calibration cases (in a stratum); the message says how many are needed.
    """
    ids = sorted(states)
    # a case listed twice is one calibration case (as EvaluationConfig.calibration_ids reads the list): counted twice
    # it made n one too large, and the rule file, which records the distinct cases, was refused (hostile review 67)
    cal = ids if calibration_cases is None else sorted({str(c) for c in calibration_cases})
    rules: dict[str, ConformalRule] = {}
    block: dict[str, Any] = {"family": product.family, "delta": product.delta,
                             "calibration": "all" if calibration_cases is None else cal,
                             "n_calibration": len(cal), "sides": {}}
    kw: dict[str, Any] = {}
    if strata is not None:
        if scores is None:
            raise ValueError("scores must be given with strata (one score per calibration case)")
        kw = {"scores": [scores[c] for c in cal], "edges": strata.edges}
        block["strata"] = strata.to_dict()
    for side, target in product.targets.items():
        alpha, tol = (target, None) if product.delta is None else (float(product.delta), target)
        try:
            rule = fit_conformal_rule([states[c][side] for c in cal], alpha, tol=tol, **kw)
        except ValueError as e:
            where = "" if strata is None else (f" (strata of {strata.score} with edges "
                                               f"{[round(v, 6) for v in strata.edges]}: {list(strata.counts)} "
                                               "calibration cases)")
            raise ValueError(f"conformal {side}:{CONFORMAL_LOSSES[side]}={target:g}: {e}{where}") from None
        rules[side] = rule
        block.setdefault("activation", rule.activation)  # softmax: the first task is the background (class 0)
        block["sides"][side] = {
            "loss": CONFORMAL_LOSSES[side], "target": target, "method": rule.method, "alpha": rule.alpha,
            "tol": rule.tol, "guarantee": _guarantee(rule, strata),
            "per_task": _achieved(rule.tasks, rule) if strata is None else _pooled(rule),
        }
        if strata is not None:
            bounds = (None, *strata.edges, None)
            block["sides"][side]["per_stratum"] = [
                {"stratum": s, "score_from": bounds[s], "score_below": bounds[s + 1], "n": strata.counts[s],
                 "per_task": _achieved([rule.task_rule(n, s) for n in rule.names], rule)}
                for s in range(rule.num_strata)]
    return rules, block


def fit_product(product: CohortProduct, states: Mapping[str, ConformalState], rows: Sequence[Mapping[str, Any]],
                config: EvaluationConfig) -> dict[str, Any]:
    """The fit of :class:`~monai_unc.products.ConformalMasks`: strata, rules and the summary block.

    Args:
        product: the product.
        states: ``{case: ConformalState}`` of the calibration cases.
        rows: their rows (in case-id order).
        config: the evaluation options.

    Returns:
        ``{"rules": {side: rule dict}, "strata": strata dict or None, "summary": block}``.
    """
    by_case = {str(r["case"]): r for r in rows}
    strata, scores = conformal_strata(by_case, {c: s.file_maps for c, s in states.items()}, product, config,
                                      score_column(rows, config.score) if rows else None)
    rules, block = fit_conformal_rules({c: s.sides for c, s in states.items()}, product, config.calibration_cases,
                                       strata=strata, scores=scores)
    return {"rules": {side: rule.to_dict() for side, rule in rules.items()},
            "strata": None if strata is None else strata.to_dict(), "summary": block}


#: the fields of a rule's and of a task's JSON object (:meth:`ConformalRule.to_dict`), every one required, no other
_RULE_FIELDS = tuple(f.name for f in fields(ConformalRule))
_TASK_FIELDS = tuple(f.name for f in fields(ConformalTaskRule))
#: the top-level fields of ``conformal_rule.json`` (:meth:`ConformalRuleFile.to_json`, its signature)
_FILE_FIELDS = ("format", "format_version", "monai_unc", "created", "targets", "delta", "calibration_cases", "regions",
                "fingerprint", "rules", "strata", "geometry", "digest", SIGNATURE_FIELD)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)


def check_rule_fields(raw: Mapping[str, Any], side: str, source: str, *, target: float, delta: float | None,
                      n_calibration: int, strata: ConformalStrata | None, activation: Any = None) -> None:
    """Check every field of one side's rule of ``conformal_rule.json`` against the others and what they can certify.

    The rules cannot be refitted without the calibration cases' states, so what can be recomputed is: the method,
    level and tolerance from the targets and ``delta``; the grid (step and size) from the family; each
    ``lambda_hat`` from its grid index (which must lie on the grid); each task's ``n`` from the calibration cases
    (or the strata's counts), and that ``n`` can certify the level at all
    (:func:`~monai_unc.metrics.conformal.min_calibration_cases`); the recorded calibration loss against the
    condition that chose ``lambda_hat``; the guarantee's words
    (:func:`~monai_unc.metrics.conformal.task_guarantee`); the activation against the predictions' fingerprint.

    Args:
        raw: the side's JSON object as read (``rules.<side>``).
        side: ``"outer"`` or ``"inner"``.
        source: how the message names the file.
        target: the side's target (``targets.<side>``).
        delta: the file's ``delta`` (None: expectation control).
        n_calibration: the number of calibration cases.
        strata: the file's strata, or None.
        activation: the activation of the predictions' fingerprint (None: not recorded).

    Raises:
        ValueError: one line naming the file and the field (``rules.<side>.<field>``).
    """
    def bad(name: str, why: str) -> ValueError:
        return ValueError(f"{source}: field 'rules.{side}.{name}' {why}; the file was edited or corrupted (write it "
                          "again with monai-unc evaluate --conformal)")

    for name in [*_RULE_FIELDS, *raw]:
        if (name in _RULE_FIELDS) != (name in raw):
            raise bad(str(name), "is missing" if name in _RULE_FIELDS else "is not a field of a conformal rule")
    act = raw.get("activation")
    if act not in ("softmax", "sigmoid"):
        raise bad("activation", f"must be 'softmax' or 'sigmoid', got {_shown(act)}")
    if isinstance(activation, str) and act != activation:
        raise bad("activation", f"is {act!r} but the calibration predictions' fingerprint records {activation!r}")
    if raw.get("side") != side:
        raise bad("side", f"is {_shown(raw.get('side'))}, not {side!r}")
    family = raw.get("family")
    if family not in CONFORMAL_FAMILIES:
        raise bad("family", f"must be one of {CONFORMAL_FAMILIES}, got {_shown(family)}")
    step, size = raw.get("step"), raw.get("size")
    if not _is_int(size) or size < 1:
        raise bad("size", f"must be a positive integer, got {_shown(size)}")
    if not _is_number(step) or step <= 0:
        raise bad("step", f"must be a positive number, got {_shown(step)}")
    if family == "threshold":
        try:
            grid = conformal_grid("threshold", size)
        except ValueError:
            raise bad("size", f"must be a power of two in [2, 65536] for the threshold family, got {size}") from None
        if grid != (step, size):
            raise bad("step", f"is {step!r}, not 1/size = {grid[0]!r} (the threshold family's grid)")
    elif size > 100_000:
        raise bad("size", f"has {size} margin steps (at most 100000)")
    hp = delta is not None
    method = raw.get("method")
    if method != ("high_probability" if hp else "expectation"):
        raise bad("method", f"is {_shown(method)} but the file's delta {delta!r} makes it "
                  f"{'high_probability' if hp else 'expectation'}")
    alpha, tol = raw.get("alpha"), raw.get("tol")
    if alpha != (delta if hp else target) or not _is_number(alpha):
        raise bad("alpha", f"is {_shown(alpha)}, not the {'delta' if hp else 'target'} "
                  f"{delta if hp else target!r} the file records")
    if tol != (target if hp else None):
        raise bad("tol", f"is {_shown(tol)}, not {target if hp else None!r}")
    names = raw.get("names")
    if (not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names)
            or len(set(names)) != len(names)):
        raise bad("names", "must be a non-empty list of distinct names")
    tasks = raw.get("tasks")
    n_strata = 1 if strata is None else len(strata.edges) + 1
    if not isinstance(tasks, list) or len(tasks) != n_strata * len(names):
        got = len(tasks) if isinstance(tasks, list) else type(tasks).__name__
        raise bad("tasks", f"must hold {n_strata * len(names)} entries ({n_strata} strata x {len(names)} names), "
                  f"got {got}")
    try:
        need = min_calibration_cases(alpha, high_probability=hp)
    except ValueError:  # found by hostile review: the bare "alpha=1e-17 needs ..." named no file and no field
        raise bad("alpha", f"is {alpha!r}, which no number of calibration cases (at most 2**53) can certify") from None
    for k, t in enumerate(tasks):
        st, name = divmod(k, len(names))
        f = f"tasks[{k}]"
        if not isinstance(t, dict):
            raise bad(f, "must be an object")
        for key in [*_TASK_FIELDS, *t]:
            if (key in _TASK_FIELDS) != (key in t):
                raise bad(f"{f}.{key}", "is missing" if key in _TASK_FIELDS else "is not a field of a task rule")
        if not _is_int(t.get("stratum")):
            raise bad(f"{f}.stratum", f"must be an integer, got {_shown(t.get('stratum'))}")
        if t.get("name") != names[name] or t.get("stratum") != st:
            raise bad(f"{f}.name", f"must be {names[name]!r} in stratum {st} (the order of 'names')")
        j = t.get("index")
        top = last_index(family, size)  # the margin family's trivial set lies one past its grid
        if not _is_int(j) or not 0 <= j <= top:
            raise bad(f"{f}.index", f"is {_shown(j)}, outside the grid [0, {top}]")
        lam = t.get("lambda_hat")
        if not _is_number(lam) or lam != float(j * step):
            raise bad(f"{f}.lambda_hat", f"is {_shown(lam)}, not the grid value {float(j * step)!r} of its index "
                      f"{j}")
        n = t.get("n")
        want = n_calibration if strata is None else strata.counts[st]
        if not _is_int(n) or n != want:
            raise bad(f"{f}.n", f"is {_shown(n)}, not the {want} calibration cases the file records")
        if n < need:
            raise bad("alpha", f"{alpha!r} cannot be certified on {n} calibration cases (at least {need} needed)")
        loss, above = t.get("calibration_loss"), t.get("calibration_above_tol")
        if not _is_number(loss) or not 0 <= loss <= 1:
            raise bad(f"{f}.calibration_loss", f"must be a number in [0, 1], got {_shown(loss)}")
        # the fit's rounding allowance (crc_tolerance) twice over, as the recorded mean was summed in another order
        # and is multiplied back here; never below the 1e-9 allowed before, so that no file written earlier fails
        if not hp and n * loss + 1 > alpha * (n + 1) + max(1e-9, 2 * crc_tolerance(n, alpha)):
            raise bad(f"{f}.calibration_loss", f"{loss!r} on {n} cases does not meet the level {alpha!r} "
                      "(n * loss + 1 <= alpha * (n + 1))")
        if hp:
            rank = quantile_rank(n, alpha)
            if not _is_number(above) or not 0 <= above <= 1 or above * n > n - rank + 1e-9:
                raise bad(f"{f}.calibration_above_tol", f"{_shown(above)} exceeds the {n - rank} of {n} "
                          "calibration cases the high-probability rule allows above tol")
            # the cases above tol lose at most 1 each, the others at most tol (found by hostile review: a recorded
            # mean loss of 1.0 beside a share of 0 above tol was accepted and shown in the report)
            if loss > above + (1 - above) * target + 1e-9:
                raise bad(f"{f}.calibration_loss", f"{loss!r} exceeds {above + (1 - above) * target:.6g}, the most "
                          f"a share {above!r} of cases above tol={target!r} allows")
        elif above is not None:
            raise bad(f"{f}.calibration_above_tol", "must be null for expectation control")
        text = task_guarantee(side, alpha, tol, n, None if strata is None else st)
        # found by review38: the previous release wrote the level as f"{1 - alpha:g}" ("0.666667" for alpha = 1/3,
        # "1" for 1e-7), product.format_level writes it never above 1 - alpha; a file written then is not refused
        legacy = task_guarantee(side, alpha, tol, n, None if strata is None else st, legacy=True)
        if t.get("guarantee") not in (text, legacy):
            raise bad(f"{f}.guarantee", f"does not state the rule's guarantee ({text!r})")


def _rule_regions(value: Any, rule: ConformalRule) -> dict[str, list[int]] | None:
    """The ``regions`` field of ``conformal_rule.json``, checked against its rules (``ValueError`` naming it).

    A class rule (softmax) has none; a region rule (sigmoid) has the region spec it was fitted with, whose names are
    the rule's ``names`` in the same order (the predicted regions are computed from the labels with it).
    """
    if value is None:
        if rule.activation == "sigmoid":
            raise ValueError("field 'regions' is null but the rules are region rules (sigmoid): the region spec "
                             "they were fitted with is missing")
        return None
    if rule.activation != "sigmoid":
        raise ValueError(f"field 'regions' must be null for class rules (softmax), got {_shown(value)}")
    if not isinstance(value, dict):
        raise ValueError(f"field 'regions' must be an object {{region: [labels]}}, got {_shown(value)}")
    try:
        spec = check_regions(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"field 'regions' is not a region spec ({e})") from None
    if list(spec) != list(rule.names):
        raise ValueError(f"field 'regions' names {_shown(list(spec))}, not the rules' regions "
                         f"{_shown(list(rule.names))} in their order")
    return {k: [int(v) for v in labels] for k, labels in spec.items()}


@dataclass
class ConformalRuleFile:
    """The content of ``conformal_rule.json``.

    Attributes:
        rules: ``{side: ConformalRule}`` (outer, inner).
        targets: ``{side: target}`` as asked (``--conformal``).
        delta: ``conformal_delta`` (None: expectation control).
        fingerprint: how the calibration predictions were made (:func:`prediction_fingerprint`).
        calibration_cases: the ids of the calibration cases.
        regions: the region spec of a region evaluation, or None.
        created: when the file was written (ISO 8601).
        strata: the strata of a stratified rule (:class:`ConformalStrata`), or None.
        geometry: the range of the calibration cases' voxel spacing and voxel counts (:func:`calibration_geometry`),
            or None (not recorded: a file written by an earlier version, or rows without them); a new case outside it
            is applied with a warning (:func:`check_case_geometry`).
    """

    rules: dict[str, ConformalRule]
    targets: dict[str, float]
    delta: float | None
    fingerprint: dict[str, Any]
    calibration_cases: list[str]
    regions: dict[str, list[int]] | None = None
    created: str = field(default_factory=lambda: _dt.datetime.now().astimezone().isoformat(timespec="seconds"))
    strata: ConformalStrata | None = None
    geometry: dict[str, Any] | None = None
    #: how :meth:`load` checked the signature (``"signed by ..."``, ``"UNSIGNED: ..."``; empty: not checked)
    signature: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        """The file's JSON object, ending with its ``digest`` (:func:`~monai_unc.io.provenance.rule_digest`).

        Returns:
            A dict of plain values.
        """
        body = {"format": CONFORMAL_RULE_FORMAT, "format_version": _FORMAT_VERSION, "monai_unc": __version__,
                "created": self.created, "targets": dict(self.targets), "delta": self.delta,
                "calibration_cases": list(self.calibration_cases), "regions": self.regions,
                "fingerprint": dict(self.fingerprint), "rules": {k: r.to_dict() for k, r in self.rules.items()},
                "strata": None if self.strata is None else self.strata.to_dict()}
        if self.geometry is not None:  # absent otherwise: a file without it reads (and digests) as before
            body["geometry"] = dict(self.geometry)
        body = json_safe(body)
        body["digest"] = rule_digest(body)
        return body

    @classmethod
    def from_json(cls, d: Any, source: str = "conformal rule") -> ConformalRuleFile:
        """Read :meth:`to_json`'s object, checking format, version, digest and structure.

        Args:
            d: the parsed JSON.
            source: how errors name the file.

        Returns:
            The rule file; ``ValueError`` naming the problem.
        """
        check_document(d, fmt=CONFORMAL_RULE_FORMAT, versions=(_FORMAT_VERSION,), what="conformal rule",
                       source=source)
        check_digest(d, source=source, written_by="monai-unc evaluate --conformal")
        try:
            unknown = [str(k) for k in d if k not in _FILE_FIELDS]
            if unknown:  # found by hostile review: an added field was read as if the file had been written so
                raise ValueError(f"field {unknown[0]!r} is not a field of a conformal rule file; the file was edited "
                                 "(write it again with monai-unc evaluate --conformal)")
            if not isinstance(d.get("monai_unc"), str):
                raise ValueError(f"field 'monai_unc' must be the version string that wrote the file, got "
                                 f"{_shown(d.get('monai_unc'))}")
            if not isinstance(d["targets"], dict) or not all(_is_number(v) and 0 < v < 1
                                                             for v in d["targets"].values()):
                raise ValueError(f"field 'targets' must be an object of levels in (0, 1), got {_shown(d['targets'])}")
            targets = {str(k): float(v) for k, v in d["targets"].items()}
            delta = d["delta"]
            if delta is not None and (not _is_number(delta) or not 0 < delta < 1):
                raise ValueError(f"field 'delta' must be null or a number in (0, 1), got {_shown(delta)}")
            cal = d["calibration_cases"]
            if (not isinstance(cal, list) or not all(isinstance(c, str) for c in cal)
                    or len(set(cal)) != len(cal)):
                raise ValueError("field 'calibration_cases' must be a list of distinct case ids")
            strata = None if d.get("strata") is None else ConformalStrata.from_dict(d["strata"])
            if strata is not None and sum(strata.counts) != len(cal):
                raise ValueError(f"field 'strata.counts' sums to {sum(strata.counts)}, not the {len(cal)} "
                                 "calibration cases")
            fp = d["fingerprint"]
            if not isinstance(d["rules"], dict) or not isinstance(fp, dict):
                raise ValueError("fields 'rules' and 'fingerprint' must be objects")
            for k, v in d["rules"].items():
                if k in targets and isinstance(v, dict):
                    check_rule_fields(v, k, source, target=targets[k], delta=delta, n_calibration=len(cal),
                                      strata=strata, activation=fp.get("activation"))
            rules = {str(k): ConformalRule.from_dict(v) for k, v in d["rules"].items()}
            if not rules or set(rules) != set(targets) or not set(rules) <= set(CONFORMAL_LOSSES):
                raise ValueError("'rules' and 'targets' must name the same sides, outer and/or inner")
            if any(r.side != s for s, r in rules.items()):
                raise ValueError("a rule's side differs from its key")
            if len({(r.activation, r.family, r.names) for r in rules.values()}) != 1:
                raise ValueError("the rules differ in activation, family or names")
            if any(r.edges != (None if strata is None else strata.edges) for r in rules.values()):
                raise ValueError("the rules' strata edges differ from the 'strata' block")
            regions = _rule_regions(d.get("regions"), next(iter(rules.values())))
            if strata is not None and strata.region is not None and strata.region not in (regions or {}):
                raise ValueError(f"field 'strata.region' is {_shown(strata.region)}, not one of the rules' regions "
                                 f"{_shown(list(regions or {}))}")
            check_text(d["created"], "field 'created'")  # a date: it reaches the outputs and the page
            geometry = read_geometry(d.get("geometry"))
            return cls(rules, targets, None if d["delta"] is None else float(d["delta"]), dict(d["fingerprint"]),
                       [str(c) for c in d["calibration_cases"]], regions, d["created"], strata, geometry)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            msg = str(e)
            raise ValueError(msg if msg.startswith(source) else f"{source}: {msg}") from None

    def save(self, path: str | os.PathLike) -> Path:
        """Write the file as strict JSON, atomically.

        Args:
            path: the file (usually ``<output>/conformal_rule.json``).

        Returns:
            The path written.
        """
        return write_signed_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike, trust: Trust | None = None) -> ConformalRuleFile:
        """Read and verify a ``conformal_rule.json`` (:meth:`from_json`).

        Args:
            path: the file.
            trust: check the signature against these trusted keys (:mod:`monai_unc.io.signing`; the result is
                :attr:`signature`), or None (not checked: the Python API on a file the caller trusts).

        Returns:
            The rule file.

        Raises:
            FileNotFoundError: no file at ``path``.
            ValueError: the file is not valid JSON or not a verified rule (format, version, digest, structure), or
                (with ``trust``) unsigned, signed by an untrusted key or edited after it was signed.
        """
        d = read_checked_json(path, fmt=CONFORMAL_RULE_FORMAT, versions=(_FORMAT_VERSION,), what="conformal rule",
                              written_by="monai-unc evaluate --conformal", digest=False)
        doc = cls.from_json(d, f"conformal rule {path}")
        if trust is not None:
            doc.signature = check_signature(d, trust, f"conformal rule {path}")
        return doc

    @property
    def first(self) -> ConformalRule:
        """The first rule (outer, else inner): activation, family and names are those of every rule."""
        return next(iter(self.rules.values()))


def check_case_geometry(doc: ConformalRuleFile, case: Any) -> str | None:
    """Warn when a new case's voxel spacing or voxel count lies outside the range of the rule's calibration cases.

    The rule's guarantee holds for new cases exchangeable with its calibration cases; a case resampled otherwise
    (another spacing, a cropped or padded field of view) is not one, and the threshold family's losses are shares of
    voxels that change with the resampling. The check is :func:`~monai_unc.io.provenance.case_geometry_warning`,
    the one of every fitted rule (a referral rule's too): the recorded spacing has 4 significant digits, so a
    relative allowance of 1e-3 is given; nothing is checked for a rule that recorded no geometry.

    Args:
        doc: the rule file.
        case: the loaded case (its ``spacing`` and probabilities' spatial shape).

    Returns:
        The warning's text (also issued as a ``UserWarning`` naming the case), or None.

    Example:
        >>> from types import SimpleNamespace
        >>> doc = SimpleNamespace(geometry={"spacing_min": [1.0, 1.0], "spacing_max": [1.0, 1.0], "voxels_min": 16,
        ...                                 "voxels_max": 16})
        >>> case = SimpleNamespace(case_id="a", spacing=(1.0, 1.0), probs=np.zeros((2, 4, 4)))
        >>> check_case_geometry(doc, case) is None
        True
    """
    voxels = int(np.prod(np.asarray(case.probs).shape[1:])) if case.probs is not None else None
    return case_geometry_warning(getattr(doc, "geometry", None), case.case_id, [float(v) for v in case.spacing],
                                 voxels, rule="conformal rule", stacklevel=2)


def write_rule_file(path: str | os.PathLike, product: Any, artifact: Mapping[str, Any],
                    calibration_cases: Sequence[str], inputs: Mapping[str, Any], config: EvaluationConfig) -> Path:
    """Write ``conformal_rule.json``: the fitted rules and the fingerprint of the calibration cases' predictions.

    Args:
        path: the file.
        product: the :class:`~monai_unc.products.ConformalMasks`.
        artifact: what :func:`fit_product` returned.
        calibration_cases: the ids the rules were fitted on.
        inputs: ``predictions`` (None: no fingerprint is recorded), ``layout`` and ``uncertainty`` of the
            evaluation (:func:`~monai_unc.io.provenance.prediction_fingerprint`).
        config: the evaluation options (the region spec).

    Returns:
        The path.
    """
    cal = [str(c) for c in calibration_cases]
    predictions = inputs.get("predictions")
    fp = (prediction_fingerprint(predictions, inputs.get("layout", "monai-unc"), cal, inputs.get("uncertainty"))
          if predictions is not None else {})
    regions = None if config.regions is None else {k: list(v) for k, v in dict(config.regions).items()}
    rules = {str(side): ConformalRule.from_dict(d) for side, d in artifact["rules"].items()}
    strata = None if artifact.get("strata") is None else ConformalStrata.from_dict(artifact["strata"])
    chosen = set(cal)
    geometry = calibration_geometry([r for r in inputs.get("rows") or () if str(r.get("case")) in chosen])
    return ConformalRuleFile(rules, dict(product.targets), product.delta, fp, cal, regions, strata=strata,
                             geometry=geometry).save(path)


# ----------------------------------------------------------------------------------------------------------------
# applying (monai-unc conformal)
# ----------------------------------------------------------------------------------------------------------------
def check_margin_grid(case: Any) -> None:
    """Refuse the margin family on a case whose voxel axes are not orthogonal (:func:`~monai_unc.io.sheared_grid`).

    The margin family's masks and scores are distances in mm from the spacing, which a sheared grid does not give;
    its masks cannot be NaN, so the case fails (per case) instead.

    Args:
        case: the loaded case.

    Raises:
        CaseError: naming the case, its two axes and their angle from perpendicular.
    """
    message = sheared_grid(case.case_id, case.affine, len(case.spacing),
                           "the margin family's masks are distances in mm, which its spacing does not give")
    if message is not None:
        raise CaseError(message)


def _band_p95(outer: np.ndarray, inner: np.ndarray, spacing: Sequence[float]) -> float:
    """The band width (module docstring): p95 of the outer boundary's distances (mm) to the inner mask.

    The volume's border is no boundary (``border_value=1``, as the margin family does not count it as background): an
    outer mask touching it has its contour inside the volume only, and one filling the volume has none (NaN: the band
    reaches past the field of view; it read as the distance from the volume's faces, e.g. 10 mm for a trivial mask).
    """
    if not outer.any() or not inner.any():
        return float("nan")
    boundary = outer & ~ndimage.binary_erosion(outer, border_value=1)
    d = np.asarray(distance_to_mask(inner, tuple(float(s) for s in spacing)))[boundary]
    return float(np.percentile(d, 95)) if d.size else float("nan")


def nest_masks(masks: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Make the outer mask contain the inner one: ``outer := outer | inner`` (docs/conformal.md, "Nested masks").

    Growing the outer mask can only lower its missed share of the truth, case by case, so both guarantees hold
    unchanged (the inner mask is untouched). Shrinking the inner mask instead (``inner & outer``) could raise its
    false-positive share, so it is not done.

    Args:
        masks: ``{side: bool (T, *spatial)}``.

    Returns:
        ``(masks, added)``: the nested masks and the voxels added to the outer mask (bool ``(T, *spatial)``), or
        the masks unchanged and None without both sides.
    """
    if "outer" not in masks or "inner" not in masks:
        return dict(masks), None
    added = masks["inner"] & ~masks["outer"]
    return {**masks, "outer": masks["outer"] | masks["inner"]}, added


def conformal_masks(doc: ConformalRuleFile, case: Any, *, score: float | None = None,
                    nest: bool = False) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
    """The masks of every side of the rule file for a loaded case (:func:`~monai_unc.io.load_case`).

    Args:
        doc: the rule file.
        case: the loaded case (with probabilities; with the map of the strata score when the rule's strata read it
            from files).
        score: the case's strata score (stratified rules; default :meth:`ConformalStrata.case_score` of ``case``).
        nest: make the outer mask contain the inner one (:func:`nest_masks`), as the masks ``monai-unc conformal``
            writes; default False: each rule's own mask (``ConformalRule.apply``).

    Returns:
        ``({side: bool (T, *spatial)}, predicted (T, *spatial) bool, names)`` restricted to the foreground tasks
        (softmax: classes ``1 .. C-1``; regions: every region).
    """
    rule = doc.first
    if case.probs is None:
        raise CaseError(f"case {case.case_id!r}: no probabilities (<case>_probs): the conformal masks need them")
    if doc.strata is not None and score is None:
        score = doc.strata.case_score(case, doc.regions)
    if rule.activation == "sigmoid":
        assert doc.regions is not None
        pred = predicted_regions(case, doc.regions)
        keep = slice(0, len(rule.names))
    else:
        pred = np.stack([case.seg == c for c in range(len(rule.names))])
        keep = slice(1, len(rule.names))
    if rule.family == "margin":
        check_margin_grid(case)
    check_case_geometry(doc, case)  # a case resampled otherwise than the calibration cases: warned (review 61)
    masks = {side: r.apply(case.probs, pred=pred if rule.activation == "sigmoid" else case.seg,
                           spacing=case.spacing, score=score)[keep] for side, r in doc.rules.items()}
    if nest:
        masks = nest_masks(masks)[0]
    return masks, pred[keep].astype(bool), list(rule.names[keep])


def mask_file(folder: str | os.PathLike, case_id: str, side: str) -> Path:
    """The file of a case's mask of one side: ``<folder>/<case>_<side>.nii.gz`` (written by :func:`save_masks`).

    Args:
        folder: the folder of the masks.
        case_id: the case.
        side: ``"outer"`` or ``"inner"``.

    Returns:
        The path.

    Example:
        >>> mask_file("masks", "a", "outer").as_posix()
        'masks/a_outer.nii.gz'
    """
    return Path(folder) / f"{case_id}_{side}.nii.gz"


def save_masks(masks: Mapping[str, np.ndarray], case: Any, folder: Path, sigmoid: bool,
               like: str | os.PathLike | None = None) -> list[Path]:
    """Write a case's masks as ``<folder>/<case>_<side>.nii.gz`` (uint8, the case's geometry).

    Softmax rules with one foreground class give a 3D mask, otherwise a 4D one (one channel per foreground class or
    region), as ``monai-unc conformal`` writes them.

    Args:
        masks: ``{side: bool (T, *spatial)}``.
        case: the loaded case (its id and affine).
        folder: the folder.
        sigmoid: a region rule (always 4D).
        like: the file whose affine the case has (its label or segmentation), whose sform / qform codes, qform and
            spatial unit the masks copy (:func:`~monai_unc.io.save_nifti`); None: the case's ``label_file``
            (:class:`~monai_unc.io.LoadedCase`), so that the report's masks of an evaluation
            (:func:`calibration_case_masks`) carry it too.

    Returns:
        The paths written.
    """
    out = []
    if like is None:  # the label the case was read from (found by the review of like=: the report's masks had none)
        like = getattr(case, "label_file", None)
    for side, m in masks.items():
        path = mask_file(folder, case.case_id, side)
        if sigmoid or m.shape[0] > 1:
            save_region_maps(m.astype(np.uint8), case.affine, path, dtype="uint8", like=like)
        else:
            # uint8, as documented (found by hostile testing: save_nifti's default stored the 3D mask as int16)
            save_nifti(m[0].astype(np.uint8), case.affine, path, like=like, dtype="uint8")
        out.append(path)
    return out


def calibration_case_masks(case: Any, rule_path: Path, folder: Path) -> list[Path]:
    """The masks each rule of ``conformal_rule.json`` gives an evaluated case, written for the report's figures.

    They are each rule's own masks (not nested: :func:`conformal_masks` with ``nest=False``), in the files of
    :func:`save_masks`.

    Args:
        case: the loaded case (with probabilities).
        rule_path: the evaluation's ``conformal_rule.json``.
        folder: where to write them (``<output>/products/conformal/``).

    Returns:
        The paths written (none for a case without probabilities).
    """
    if case.probs is None:
        return []
    doc = _read_rule_once(rule_path)
    masks, _, _ = conformal_masks(doc, case)
    return save_masks(masks, case, folder, doc.first.activation == "sigmoid")


_RULES: dict[tuple[Any, ...], ConformalRuleFile] = {}


def _read_rule_once(path: Path) -> ConformalRuleFile:
    """The rule file at ``path``, read once per version (inode, size, modification and change times) for a run.

    A file changed in the last :data:`~monai_unc.io.files.SETTLE_S` seconds (:func:`~monai_unc.io.files.settled`) is
    read every time and not kept: with coarse timestamps a rule written again within the same tick has the same times
    (in earlier versions the version was its modification time alone, and a rule rewritten within one tick gave the
    masks of the rule before it).
    """
    where = str(Path(path).resolve())
    st = os.stat(path)
    key = file_version(where, st)
    if key in _RULES:
        return _RULES[key]
    doc = ConformalRuleFile.load(path)
    if settled(st) and file_version(where, os.stat(path)) == key:  # not changed while it was read
        _RULES.clear()
        _RULES[key] = doc
    return doc


def conformal_case(files: CaseFiles, doc: ConformalRuleFile, output: Path) -> dict[str, Any]:
    """Apply the rule file to one case: write ``<case>_<side>.nii.gz`` in ``output`` and return its csv row.

    Args:
        files: the case's files (segmentation and probabilities; the strata score's map when read from files).
        doc: the rule file.
        output: the output folder.

    Returns:
        The row: ``case``; with strata ``stratum`` and the strata score (its column name); per foreground class or
        region ``<side>_ml_<name>``, ``predicted_ml_<name>``, ``band_p95_mm_<name>`` (module docstring) and, with
        both sides, ``crossing_ml_<name>``: the volume of the inner mask outside the rule's outer mask, added to the
        outer mask to nest them (:func:`nest_masks`; 0 when the rules nest).
    """
    rule = doc.first
    sigmoid = rule.activation == "sigmoid"
    case = load_case(files, len(rule.names), multilabel=sigmoid)
    row: dict[str, Any] = {"case": case.case_id}
    score = None
    if doc.strata is not None:
        score = doc.strata.case_score(case, doc.regions)
        row["stratum"] = doc.strata.stratum(score)
        row[doc.strata.score] = score
    masks, pred, names = conformal_masks(doc, case, score=score)
    masks, added = nest_masks(masks)
    voxel_ml = case.voxel_volume / 1000.0
    sheared = sheared_grid(case.case_id, case.affine, len(case.spacing))  # the band widths NaN
    if sheared is not None:
        warnings.warn(sheared, UserWarning, stacklevel=2)
    save_masks(masks, case, output, sigmoid)
    for t, name in enumerate(names):
        col = region_suffix(name) if sigmoid else slug(name)
        outer = masks["outer"][t] if "outer" in masks else pred[t]
        inner = masks["inner"][t] if "inner" in masks else pred[t]
        if "inner" in masks:
            row[f"inner_ml_{col}"] = float(inner.sum()) * voxel_ml
        row[f"predicted_ml_{col}"] = float(pred[t].sum()) * voxel_ml
        if "outer" in masks:
            row[f"outer_ml_{col}"] = float(outer.sum()) * voxel_ml
        row[f"band_p95_mm_{col}"] = float("nan") if sheared is not None else _band_p95(outer, inner, case.spacing)
        if added is not None:
            row[f"crossing_ml_{col}"] = float(added[t].sum()) * voxel_ml
    return row


_KINDS = {"softmax": "softmax probabilities (in [0, 1], summing to 1 over the classes)",
          "sigmoid": "per-region sigmoid probabilities (in [0, 1])"}


def check_conformal_probabilities(
    cases: Sequence[CaseFiles], activation: str, predictions: str | os.PathLike, layout: str = "monai-unc", *,
    probs_suffix: str | None = None, channels: int | None = None,
) -> None:
    """The checks of the probabilities before any conformal work (``evaluate --conformal``, ``monai-unc conformal``).

    Every case must have a probability file, and the first case's file (in case-id order) must hold probabilities
    of the activation: a folder saved without probabilities (``infer --no-probs``, ``nnunet-predict`` without
    ``--save_probabilities``) or holding logits is refused in one line before any case is processed. Another case
    with bad values fails on its own when it is loaded (a case failure).

    Args:
        cases: the listed cases.
        activation: ``"softmax"`` or ``"sigmoid"``.
        predictions: the predictions folder (named in the message).
        layout: ``"monai-unc"`` or ``"nnunet"``: the probability file's name and how to write it.
        probs_suffix: the probability suffix when not the layout's.
        channels: the number of channels the rule expects, or None.

    Returns:
        None; :class:`~monai_unc.io.CaseError` (a ``ValueError``) naming the file and how to produce it.
    """
    if not cases:
        return
    missing = sorted(f.case_id for f in cases if f.probs is None)
    if missing:
        if layout == "nnunet":
            expected = f"{missing[0]}.npz"
            how = ("predict with --save_probabilities (monai-unc nnunet-predict and nnUNetv2_predict then write "
                   "<case>.npz)")
        else:
            suffix = LAYOUTS.get(layout, LAYOUTS["monai-unc"])["probs_suffix"] if probs_suffix is None else probs_suffix
            expected = f"{missing[0]}{suffix}.nii.gz"
            how = f"run monai-unc infer without --no-probs (it writes <case>{suffix}.nii.gz)"
        raise CaseError(f"{len(missing)} of {len(cases)} case(s) have no probabilities: {expected} is missing in "
                        f"{predictions}; the conformal masks need them: {how}")
    first = min(cases, key=lambda f: f.case_id)
    assert first.probs is not None
    p, _ = read_probabilities(first.probs)
    kind = _KINDS.get(activation, activation)
    if channels is not None and p.shape[0] != channels:
        raise CaseError(f"case {first.case_id!r}: {first.probs.name} has {p.shape[0]} channel(s), the conformal rule "
                        f"{channels}: predictions of another model or label set?")
    try:
        t = torch.from_numpy(np.ascontiguousarray(p, dtype=np.float32))[None]
        (check_unit_interval if activation == "sigmoid" else check_probabilities)(t, "probabilities")
    except (ValueError, TypeError) as e:
        raise CaseError(f"case {first.case_id!r}: {first.probs.name} does not hold {kind}: {e} (logits or scores "
                        "saved instead of probabilities?)") from None


def _find_cases(predictions: Path, layout: str, images: str | os.PathLike | None, doc: ConformalRuleFile,
                uncertainty: str | os.PathLike | None) -> list[CaseFiles]:
    strata = doc.strata
    measure = strata.measure if strata is not None and strata.map_source == "file" else None
    found = list_prediction_cases(predictions, layout, measure=measure, uncertainty=uncertainty, images=images,
                                  empty="no case", regions=None if doc.regions is None else list(map(str, doc.regions)))
    check_conformal_probabilities(found, doc.first.activation, predictions, layout, channels=len(doc.first.names))
    return found


def check_conformal_inputs(
    predictions: str | os.PathLike,
    rule: ConformalRuleFile | RuleRead | str | os.PathLike,
    output: str | os.PathLike,
    *,
    images: str | os.PathLike | None = None,
    layout: str = "monai-unc",
    uncertainty: str | os.PathLike | None = None,
    allow_mismatch: bool = False,
    trust: Trust | None = None,
) -> tuple[ConformalRuleFile, list[CaseFiles], dict[str, Any]]:
    """The checks of :func:`run_conformal` before any work, writing nothing.

    They are also run by ``monai-unc triage --conformal-rule`` before its triage, so that a refused rule leaves
    nothing behind.

    The output folder must not be or lie in an input folder nor replace an input
    (:func:`monai_unc.io.check_inputs_not_written`), the rule file is verified (:meth:`ConformalRuleFile.load`),
    every case needs probabilities, and the predictions' fingerprint is compared with the rule's
    (:func:`~monai_unc.evaluation.triage.check_prediction_fingerprint`).

    Args:
        predictions: output folder of ``monai-unc infer`` or ``nnunet-predict`` (``layout``), with probabilities.
        rule: a :class:`ConformalRuleFile`, the path of a ``conformal_rule.json``, or that file read and verified
            once by the caller (a :class:`~monai_unc.io.provenance.RuleRead` of :meth:`ConformalRuleFile.load` with
            ``trust``: the command acts on the version read, and raises its refusal where it would refuse the file).
        output: the folder the masks would be written to.
        images: folder of the input images (listed with the cases only).
        layout: ``"monai-unc"`` or ``"nnunet"``.
        uncertainty: folder of the ``<case>_<measure>`` maps when not where the layout puts them (a stratified rule
            whose score is read from map files).
        allow_mismatch: accept predictions made otherwise (the check records the differences).

        trust: the trusted keys the rule file's signature must verify against (None: not checked).

    Returns:
        ``(rule file, cases, fingerprint check)``; :class:`~monai_unc.evaluation.triage.FingerprintMismatch` (a
        ``ValueError``) when the fingerprints differ and ``allow_mismatch`` is False, ``ValueError`` /
        ``FileNotFoundError`` / :class:`~monai_unc.io.CaseError` for the other refusals.
    """
    rule_path = rule_file_path(rule, ConformalRuleFile)
    # each refusal names its parameter, which the command line writes as its option (found by a probe of every
    # command: "output folder ... is a file" and "conformal rule not found" named no option)
    with refusing("output"):
        check_output_folder(output, predictions, images, uncertainty)
        check_output_kind(output, "conformal", command_output_markers())  # not another command's folder (state/)
        check_inputs_not_written(output, CONFORMAL_WRITES, rule_path, predictions, images, uncertainty,
                                 what="--output")
    with refusing("rule"):  # every refusal of the file: missing, a folder, malformed, not signed as trusted
        doc = load_rule(rule, ConformalRuleFile, trust)
    found = _find_cases(Path(predictions), layout, images, doc, uncertainty)
    check = check_prediction_fingerprint(doc.fingerprint, doc.regions, predictions, layout,
                                         [f.case_id for f in found], uncertainty, allow_mismatch=allow_mismatch)
    return doc, found, check


@dataclass
class ConformalResult:
    """What :func:`run_conformal` returns: the summary written to ``conformal.json`` and the paths.

    Args:
        summary: the content of ``conformal.json``.
        paths: ``{name: path}`` of the files written.
    """

    summary: dict[str, Any]
    paths: dict[str, Path]


def remove_stale_masks(output: str | os.PathLike, cases: Sequence[str], sides: Sequence[str]) -> list[Path]:
    """Remove the ``<case>_outer`` / ``<case>_inner`` mask files of an earlier run that this run does not write.

    A rerun into the same folder with another rule (e.g. outer only after outer and inner) or other cases must not
    leave the masks of the earlier rule beside the new ones.

    Args:
        output: the output folder of ``monai-unc conformal``.
        cases: the case ids of this run.
        sides: the sides of this run's rule.

    Returns:
        The files removed.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     d = Path(folder)
        ...     for name in ("a_outer.nii.gz", "a_inner.nii.gz", "b_outer.nii.gz"):
        ...         _ = (d / name).write_bytes(b"")
        ...     sorted(p.name for p in remove_stale_masks(d, ["a"], ["outer"]))
        ['a_inner.nii.gz', 'b_outer.nii.gz']
    """
    keep = {mask_file(output, c, s).name for c in cases for s in sides}
    removed = []
    for side in CONFORMAL_LOSSES:
        for p in sorted(Path(output).glob(f"*_{side}.nii.gz")):
            if p.name not in keep and p.is_file():
                p.unlink()
                removed.append(p)
    return removed


def _dump_conformal_row(output: str | os.PathLike, case_id: str, row: Mapping[str, Any],
                       sides: Sequence[str]) -> dict[str, Any]:
    """The resume state of a case of ``monai-unc conformal``: its row and the digests of the masks written with it.

    Args:
        output: the output folder (holding the masks, :func:`mask_file`).
        case_id: the case.
        row: the case's row (:func:`conformal_case`).
        sides: the sides of the rule (one mask file each).

    Returns:
        ``{"row": row, "masks": {file name: {"size", "sha256"}}}``, the JSON fields of ``<case>.json``.

    Raises:
        FileNotFoundError: a mask of the case is missing.
    """
    paths = [mask_file(output, case_id, side) for side in sides]
    return {"row": dict(row), "masks": {p.name: {"size": p.stat().st_size, "sha256": file_sha256(p)} for p in paths}}


def _restore_conformal_row(output: str | os.PathLike, doc: Mapping[str, Any]) -> dict[str, Any]:
    """A saved row of ``monai-unc conformal``, if the masks it describes are still the files written with it.

    Args:
        output: the output folder.
        doc: the case's saved state (:func:`_dump_conformal_row`, with ``case`` and ``fingerprint``).

    Returns:
        The row.

    Raises:
        KeyError: the state records no masks (written by an earlier version): the case is processed again.
        FileNotFoundError: a mask is missing or differs (size, sha256) from the one written: processed again.
    """
    masks = doc["masks"]
    if not isinstance(masks, Mapping) or not masks:
        raise KeyError(f"the saved state of case {doc.get('case')!r} records no masks")
    for name, want in masks.items():
        p = Path(output) / str(name)
        if not p.is_file() or p.stat().st_size != want.get("size") or file_sha256(p) != want.get("sha256"):
            raise FileNotFoundError(f"{p} is missing or changed since it was written")
    return dict(doc["row"])


def run_conformal(
    predictions: str | os.PathLike,
    rule: ConformalRuleFile | RuleRead | str | os.PathLike,
    output: str | os.PathLike,
    *,
    images: str | os.PathLike | None = None,
    layout: str = "monai-unc",
    uncertainty: str | os.PathLike | None = None,
    allow_mismatch: bool = False,
    resume: bool = True,
    progress: bool = False,
    dist: Any = None,
    on_failure: Any = None,
    trust: Trust | None = None,
) -> ConformalResult:
    """Apply a ``conformal_rule.json`` to new predictions (no labels): the whole of ``monai-unc conformal``.

    Before any work: the output folder must not be or lie in an input folder nor replace an input
    (:func:`monai_unc.io.check_inputs_not_written`), the rule file is verified (:meth:`ConformalRuleFile.load`) and
    the predictions' fingerprint is compared with the rule's (:class:`FingerprintMismatch` unless
    ``allow_mismatch``). Each case (:func:`monai_unc.engine.run_cases`, resumable through ``state/cases/``)
    gets :func:`conformal_case`; rank 0 writes ``conformal.csv`` and ``conformal.json``.

    Args:
        predictions: output folder of ``monai-unc infer`` or ``nnunet-predict`` (``layout``), with probabilities.
        rule: a :class:`ConformalRuleFile`, the path of a ``conformal_rule.json``, or that file read and verified
            once by the caller (a :class:`~monai_unc.io.provenance.RuleRead` of :meth:`ConformalRuleFile.load` with
            ``trust``: the command acts on the version read, and raises its refusal where it would refuse the file).
        output: output folder.
        images: folder of the input images (listed with the cases only).
        layout: ``"monai-unc"`` or ``"nnunet"``.
        uncertainty: folder of the ``<case>_<measure>`` maps when not where the layout puts them (a stratified rule
            whose score is read from map files).
        allow_mismatch: apply the rule to predictions made otherwise (``conformal.json`` records it).
        resume: keep and reuse per-case rows.
        progress: show a progress bar.
        dist: a :class:`~monai_unc.engine.DistContext`.
        on_failure: called with each failed case.
        trust: the trusted keys the rule file's signature must verify against (:mod:`monai_unc.io.signing`;
            ``conformal.json`` records how it was checked), or None (not checked).

    Returns:
        The :class:`ConformalResult`. Mask files of an earlier run in ``output`` that this run does not write (a side
        the rule does not have, a case not in this run) are removed, so that the folder holds this rule's masks only;
        the earlier run's ``conformal.csv`` and ``conformal.json`` are removed before the first case, so that a run
        stopped midway leaves no summary of another rule beside its masks.
    """
    ctx = dist if dist is not None else get_dist_context()
    output = Path(output)
    rule_path = rule_file_path(rule, ConformalRuleFile)
    got: dict[str, Any] = {}

    def listing() -> list[CaseFiles]:
        got["doc"], found, got["check"] = check_conformal_inputs(predictions, rule, output, images=images,
                                                                 layout=layout, uncertainty=uncertainty,
                                                                 allow_mismatch=allow_mismatch, trust=trust)
        # compared at the end: another run that writes the predictions after these checks (found by hostile testing)
        got["cases"], got["inputs"] = found, input_signatures(found, predictions)
        return found

    def setup() -> None:
        output.mkdir(parents=True, exist_ok=True)
        clean_partial_files(output)
        # the cases' masks are written as they are done: a run stopped midway must not leave an earlier run's
        # summary (another rule, other predictions) describing the folder's masks
        stale(None)

    def finish(run: CohortRun) -> tuple[dict[str, Any], dict[str, Path]]:
        stale(run)  # first: a run stopped while writing leaves none of an earlier run's files
        # the cases read are those listed: no other run wrote the predictions meanwhile (one version of each)
        check_inputs_unchanged(got["inputs"], got["cases"], predictions, "monai-unc conformal")
        rows = sorted(run.results, key=lambda r: str(r["case"]))
        doc: ConformalRuleFile = got["doc"]
        remove_stale_masks(output, [str(r["case"]) for r in rows], list(doc.rules))
        summary = {
            "n_cases": len(rows), "rule": rule_path, "signature": doc.signature or None,
            "targets": doc.targets, "delta": doc.delta,
            "family": doc.first.family, "fingerprint": got["check"],
            "lambda_hat": {s: {t.name: t.lambda_hat for t in r.tasks} if doc.strata is None else
                           [{n: r.lambda_hat(n, k) for n in r.names} for k in range(r.num_strata)]
                           for s, r in doc.rules.items()},
            "guarantee": _applied_guarantees(doc, got["check"]),
            "strata": None if doc.strata is None else doc.strata.to_dict(),
            "nesting": "the outer mask is grown to contain the inner one (outer | inner); crossing_ml: the volume "
                       "added" if len(doc.rules) == 2 else None,
            "band_width": "band_p95_mm: the 95th percentile, over the outer mask's boundary voxels, of the distance "
                          "(mm) to the nearest inner-mask voxel (the predicted mask for a side the rule lacks)",
            "cases": rows,
        }
        paths = {"csv": write_csv(output / "conformal.csv", rows),
                 "json": atomic_write_json(output / "conformal.json", summary)}
        return json_safe(summary), paths

    def stale(run: CohortRun | None) -> None:
        for name in ("conformal.csv", "conformal.json"):
            (output / name).unlink(missing_ok=True)

    def fingerprint(files: CaseFiles) -> dict[str, Any]:
        inputs = {"seg": file_signature(files.seg), "probs": file_signature(files.probs),
                  "maps": {m: map_signature(p) for m, p in sorted(files.maps.items())}}
        return json.loads(json.dumps({"format": _STATE_FORMAT, "version": __version__,
                                      "rule": got["doc"].to_json()["digest"], "inputs": inputs}))

    def sides() -> list[str]:
        return list(got["doc"].rules)

    cache = None
    if resume:  # a saved row is reused only while the masks it describes are the files written with it
        cache = CaseCache(output / STATE_DIR / CASES_DIR, fingerprint,
                          dump=lambda folder, cid, row: _dump_conformal_row(output, cid, row, sides()),
                          restore=lambda folder, doc, files: _restore_conformal_row(output, doc))
    run = run_cases(listing, lambda f: conformal_case(f, got["doc"], output), command="monai-unc conformal",
                    ctx=ctx, cache=cache, setup=setup, summarize=finish, on_failed=stale,
                    failures_file=output / "failures.json", progress=progress, desc="conformal",
                    on_failure=on_failure, lock=output, agree=lambda found: {
                        "rule": got["doc"].to_json()["digest"], "input files": case_files_digest(found)})
    return ConformalResult(*run.summary)
