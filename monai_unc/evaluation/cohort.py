"""Cohort state and summary: the additive state of an evaluation, the cohort metrics and the evaluation files.

The additive state is :class:`CohortState` (per-case rows and the
per-case confidence histograms side by side), the cohort metrics computed from it (:func:`summarize`: pooled
calibration, failure detection, referral, triage, OoD, risk control) and the evaluation files (``metrics.csv``,
``summary.json``, ``state/``). What each number is: :mod:`monai_unc.evaluation`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .._utils import (
    is_count,
    is_finite_real,
    is_real,
    is_text_list,
    keep_user_warnings,
    share_count,
    unique_json_keys,
    warn_nan,
    warn_once_inside,
)
from ..io import (
    LIBRARIES_KEY,
    VERSION_KEY,
    CaseFiles,
    atomic_write_text,
    cell_float,
    json_safe,
    library_versions,
    save_state,
    write_csv,
)
from ..io.files import json_default
from ..io.provenance import decode_untrusted_json
from ..metrics.calibration import ConfidenceHistogram, calibration_metrics, reliability_curve
from ..metrics.casewise import (
    IID_SHIFTS,
    FailureDetection,
    failure_detection,
    fill_undefined_scores,
    ood_auroc_by_shift,
)
from ..metrics.risk_control import accepted_by_threshold
from ..metrics.selective import area_under_referral_curve, referral_curve
from ..product import product_type
from ..scores import CASE_SCORES, resolve_score_column, upgrade_row
from ..state import StateGroup, UnknownStateTypeError, read_npz
from .case import CaseResult
from .config import (
    CALIBRATION_COLUMNS,
    SPATIAL_COLUMNS,
    STATE_DIR,
    EvaluationConfig,
    check_risk_options,
    dice_columns,
    parse_score_column,
)
from .products import cohort_products, fit_products, implicit_products, product_summaries
from .region_case import QU_BRATS_COLUMNS
from .rows import check_scored_cases, has_score_source, region_histograms_of

__all__ = [
    "CohortState",
    "summarize",
    "score_column",
    "case_risk",
    "calibration_risks",
    "column_values",
    "risk_of_dice",
    "dice_failed",
    "dice_as_recorded",
    "failure_dice_text",
    "calibration_mask",
    "RISK_CONTROL_CANDIDATES",
    "triage_order",
    "budget_split",
    "check_state_rows",
    "TEXT_COLUMNS",
    "fill_undefined_scores",
    "write_evaluation",
    "load_evaluation",
    "remove_cohort_files",
    "config_from_summary",
    "resummarize",
]


@dataclass
class CohortState:
    """Additive state of an evaluation: per-case rows, the per-case confidence histograms, warnings, file paths.

    :meth:`merge` adds the state of another (disjoint) set of cases: rows are concatenated and the histograms'
    cases joined (pooled metrics add their counts and sums). The summary of merged shards equals the summary of
    the whole cohort.

    A region evaluation (``regions``: the spec, ``num_classes`` its number of regions) keeps one per-case binary
    histogram per region in ``region_histograms`` and each case's QU-BraTS curves in ``curves`` (``{case: ...}``).

    Args:
        num_classes: the number of classes (of regions, for a region evaluation).
        n_fine_bins: fine bins of the confidence histograms (:attr:`EvaluationConfig.n_fine_bins`).
        rows: the per-case metric rows (one dict per case, with at least ``"case"``).
        histogram: the per-case confidence histogram of the class task (None until a case with probabilities).
        warnings: the warnings raised while computing the cases.
        files: ``{case id: files}`` (:meth:`monai_unc.io.CaseFiles.to_json`).
        regions: the region spec ``{region: [labels]}`` in channel order (None: classes).
        region_histograms: ``{region: per-case binary histogram}``.
        curves: ``{case id: QU-BraTS curves}`` (:class:`~monai_unc.evaluation.rows.CaseResult`).
        product_states: ``{case id: {product name: state}}``.
        derived_maps: ``{case id: {measure: path}}`` of the maps evaluate derived from the probabilities.
        derived_maps_sha256: ``{case id: {measure: sha256 hex}}`` of those files as written (the report refuses a map
            that is another file now).

    Example:
        >>> a = CohortState(num_classes=2, n_fine_bins=240, rows=[{"case": "b", "dice": 0.7}])
        >>> b = CohortState(num_classes=2, n_fine_bins=240, rows=[{"case": "a", "dice": 0.9}])
        >>> [r["case"] for r in a.merge(b).sorted_rows()]
        ['a', 'b']
    """

    num_classes: int
    n_fine_bins: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    histogram: ConfidenceHistogram | None = None
    warnings: list[str] = field(default_factory=list)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    regions: dict[str, list[int]] | None = None
    region_histograms: dict[str, ConfidenceHistogram] = field(default_factory=dict)
    curves: dict[str, Any] = field(default_factory=dict)
    #: ``{case id: {product name: state}}``: the per-case states of the evaluation's products
    product_states: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: ``{case id: {measure: path}}``: the maps evaluate derived from the probabilities of cases without map files
    derived_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    #: ``{case id: {measure: sha256 hex}}`` of the files of ``derived_maps`` as evaluate wrote them: the report draws a
    #: map only while it is that file (another run may have written its own map of the same name since)
    derived_maps_sha256: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the case ids of ``rows`` and the ``(id(rows), len(rows))`` they were read from (:meth:`_holds_case`)
    _row_ids: set[Any] = field(default_factory=set, init=False, repr=False, compare=False)
    _row_ids_of: tuple[int, int] = field(default=(0, -1), init=False, repr=False, compare=False)

    def _holds_case(self, cid: Any) -> bool:
        """Whether a row of case ``cid`` is in ``rows``.

        A set of the ids is kept beside the rows, read again whenever ``rows`` was replaced or changed in length
        outside :meth:`add` (a scan of every row per added case made an evaluation quadratic in its cases: 0.59 ms a
        case at 8 000 cases, found by the benchmark review).
        """
        if self._row_ids_of != (id(self.rows), len(self.rows)):
            self._row_ids = {r["case"] for r in self.rows}
            self._row_ids_of = (id(self.rows), len(self.rows))
        return cid in self._row_ids

    def add(self, result: CaseResult, files: CaseFiles | None = None) -> CohortState:
        """Add one case's result (in place).

        Args:
            result: the case's :class:`~monai_unc.evaluation.rows.CaseResult` (row, histograms, curves, product
                states, warnings).
            files: the case's files, recorded under its id.

        Returns:
            ``self``.

        Raises:
            ValueError: the case is already in the state.
        """
        cid = result.row["case"]
        if self._holds_case(cid):
            raise ValueError(f"case {cid!r} is already in the cohort state")
        # every check before the first change: a refused case leaves the state as it was
        layouts = [(f"case {cid!r}", result.histogram, self.num_classes)] + [
            (f"case {cid!r}, region {name!r}", h, 2) for name, h in (result.region_histograms or {}).items()]
        for what, h, n in layouts:
            if h is not None and (h.num_classes, h.n_fine_bins) != (n, self.n_fine_bins):
                raise ValueError(f"{what}: its histogram has (num_classes, n_fine_bins) "
                                 f"{(h.num_classes, h.n_fine_bins)}, the cohort state {(n, self.n_fine_bins)}")
        self.rows.append(upgrade_row(result.row))  # a row resumed from an older version's state: current names
        self._row_ids.add(cid)
        self._row_ids_of = (id(self.rows), len(self.rows))
        if result.histogram is not None:
            self._histogram().merge(result.histogram)
        self._merge_regions(result.region_histograms or {})
        if result.curves is not None:
            self.curves[str(cid)] = result.curves
        if result.states:
            self.product_states[str(cid)] = dict(result.states)
        if result.derived:
            self.derived_maps[str(cid)] = dict(result.derived)
        if result.derived_sha256:
            self.derived_maps_sha256[str(cid)] = dict(result.derived_sha256)
        self.warnings.extend(result.warnings)
        if files is not None:
            self.files[cid] = files.to_json()
        return self

    def merge(self, other: CohortState) -> CohortState:
        """Add the cases of ``other`` (in place). Case ids must not overlap.

        Rows are concatenated, histograms merged (counts and sums add), curves, product states, warnings and files
        joined: the summary of merged shards equals the summary of the whole cohort.

        Args:
            other: the state of a disjoint set of cases, with the same ``num_classes``, ``n_fine_bins`` and
                ``regions``.

        Returns:
            ``self``.

        Raises:
            ValueError: the states share a case or differ in ``num_classes``, ``n_fine_bins`` or ``regions``.

        Example:
            >>> shard_a = CohortState(2, 240, rows=[{"case": "a", "dice": 0.9}], warnings=["a: empty map"])
            >>> shard_b = CohortState(2, 240, rows=[{"case": "b", "dice": 0.6}])
            >>> merged = shard_a.merge(shard_b)
            >>> [r["case"] for r in merged.rows], merged.warnings
            (['a', 'b'], ['a: empty map'])
            >>> shard_a.merge(CohortState(2, 240, rows=[{"case": "a", "dice": 0.9}]))
            Traceback (most recent call last):
                ...
            ValueError: cohort states share case(s) ['a']: shards must be disjoint
        """
        if (other.num_classes, other.n_fine_bins) != (self.num_classes, self.n_fine_bins):
            raise ValueError(
                f"cannot merge cohort states with (num_classes, n_fine_bins) {(self.num_classes, self.n_fine_bins)} "
                f"and {(other.num_classes, other.n_fine_bins)}"
            )
        dup = {r["case"] for r in self.rows} & {r["case"] for r in other.rows}
        if dup:
            raise ValueError(f"cohort states share case(s) {sorted(dup)[:5]}: shards must be disjoint")
        if list((other.regions or {}).items()) != list((self.regions or {}).items()):  # channel order too
            raise ValueError(f"cannot merge cohort states with regions {self.regions} and {other.regions}")
        self.rows.extend(other.rows)
        if other.histogram is not None:
            self._histogram().merge(other.histogram)
        self._merge_regions(other.region_histograms)
        self.curves.update(other.curves)
        self.product_states.update(other.product_states)
        self.derived_maps.update(other.derived_maps)
        self.derived_maps_sha256.update(other.derived_maps_sha256)
        self.warnings.extend(other.warnings)
        self.files.update(other.files)
        return self

    def _merge_regions(self, hists: Mapping[str, ConfidenceHistogram]) -> None:
        for name, h in hists.items():
            if name not in self.region_histograms:
                self.region_histograms[name] = ConfidenceHistogram(2, n_fine_bins=self.n_fine_bins, per_case=True)
            self.region_histograms[name].merge(h)

    def _histogram(self) -> ConfidenceHistogram:
        if self.histogram is None:
            self.histogram = ConfidenceHistogram(self.num_classes, n_fine_bins=self.n_fine_bins, per_case=True)
        return self.histogram

    def sorted_rows(self) -> list[dict[str, Any]]:
        """The rows sorted by case id (as strings).

        Returns:
            A new list of the row dicts (not copies).
        """
        return sorted(self.rows, key=lambda r: str(r["case"]))

    # -- persistence ------------------------------------------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> None:
        """Write the state to ``folder`` atomically.

        The files are ``rows.json``, ``histogram.npz``, ``region_histograms.npz`` and ``products.npz``; every state
        goes through :func:`monai_unc.io.save_state`, and an ``.npz`` without a state is removed.

        Args:
            folder: the state folder (created if missing), usually ``<output>/state``.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        meta = {
            "num_classes": self.num_classes,
            "n_fine_bins": self.n_fine_bins,
            "rows": self.sorted_rows(),
            "warnings": self.warnings,
            "files": self.files,
            # what the rows' expected_dice estimates (rows.case_expected_dice's default), so that a state written
            # before it was the mean over the classes (regions) is never certified as such (load)
            "expected_dice_estimate": _state_estimate(self.regions),
        }
        if self.regions is not None:
            meta["regions"] = self.regions
            meta["curves"] = self.curves
        if self.derived_maps:
            meta["derived_maps"] = self.derived_maps
        if self.derived_maps_sha256:
            meta["derived_maps_sha256"] = self.derived_maps_sha256
        regions = StateGroup(self.region_histograms) if self.region_histograms else None
        products = (StateGroup({c: StateGroup(s) for c, s in sorted(self.product_states.items())})
                    if self.product_states else None)
        for name, group in (("histogram", self.histogram), ("region_histograms", regions), ("products", products)):
            if group is not None:
                save_state(folder / f"{name}.npz", group)
            else:
                (folder / f"{name}.npz").unlink(missing_ok=True)  # not an earlier run's
        atomic_write_text(folder / "rows.json", json.dumps(meta, indent=1, default=json_default) + "\n")

    @classmethod
    def load(cls, folder: str | os.PathLike) -> CohortState:
        """Read a state written by :meth:`save` (rows of older versions get the current column names).

        Args:
            folder: the state folder.

        Returns:
            The cohort state.

        Raises:
            FileNotFoundError: ``folder`` has no ``rows.json``.
            ValueError: ``rows.json`` is not UTF-8 JSON, gives a key twice in one object, or has a field of the
                wrong type (:func:`check_state_rows`; one line naming the file, the case and the column).

        Example:
            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as d:
            ...     CohortState(2, 240, rows=[{"case": "a", "dice": 0.9}]).save(d)
            ...     CohortState.load(d).rows
            [{'case': 'a', 'dice': 0.9}]
        """
        folder = Path(folder)
        path = folder / "rows.json"
        if not path.is_file():
            raise FileNotFoundError(f"no evaluation state in {folder} (rows.json missing): run monai-unc evaluate")
        try:  # UTF-8 whatever the locale; a key given twice refused (json keeps the last: not the value a reader sees)
            meta = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=lambda pairs: unique_json_keys(
                pairs, "the key {key!r} is given twice in one object"))
        except (json.JSONDecodeError, UnicodeDecodeError):  # a truncated or corrupt file: the callers say so
            raise
        except RecursionError as e:  # found by hostile testing: deep nesting was a traceback
            raise ValueError(f"{path}: not valid JSON ({type(e).__name__}: {str(e)[:200]}); run monai-unc evaluate "
                             "again") from None
        except ValueError as e:  # unique_json_keys: one line naming the file
            raise ValueError(f"{path}: {e}") from None
        check_state_rows(meta, str(path))  # a file a user may have edited: one line naming the case and the column
        rows = [upgrade_row(r) for r in meta["rows"]]  # written by an older version: current column names
        rows = _current_expected_dice(meta, rows, str(path))
        state = cls(int(meta["num_classes"]), int(meta["n_fine_bins"]), rows,
                    warnings=list(meta.get("warnings", [])), files=dict(meta.get("files", {})),
                    regions=meta.get("regions"), curves=dict(meta.get("curves") or {}),
                    derived_maps=dict(meta.get("derived_maps") or {}),
                    derived_maps_sha256=dict(meta.get("derived_maps_sha256") or {}))
        hp = folder / "histogram.npz"
        ids = {str(r["case"]) for r in rows}
        if hp.is_file():
            state.histogram = ConfidenceHistogram.load(hp)
            _check_state_histogram(state.histogram, (state.num_classes, state.n_fine_bins), ids, str(hp))
        rp = folder / "region_histograms.npz"
        if rp.is_file():
            state.region_histograms = _load_region_histograms(rp)
            for name, h in state.region_histograms.items():
                _check_state_histogram(h, (2, state.n_fine_bins), ids, f"{rp}, region {name!r}")
        pp = folder / "products.npz"
        if pp.is_file():
            with np.load(pp, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            try:
                group = StateGroup.from_state_dict(arrays)
            except UnknownStateTypeError:  # a product not imported in this process: its blocks of summary.json
                # stay readable (a damaged file of known types is refused)
                group = StateGroup()
            state.product_states = {c: dict(g) for c, g in group.items()}
        return state


def _check_state_histogram(hist: ConfidenceHistogram, layout: tuple[int, int], ids: set[str], source: str) -> None:
    """Refuse a histogram of the state folder that is not of the cases and classes of ``rows.json``.

    In earlier versions a ``histogram.npz`` of another evaluation (10 cases, 40 960 voxels) beside a
    ``rows.json`` of 5 cases was read, and ``monai-unc report`` showed its pooled calibration as this cohort's.

    Args:
        hist: the loaded histogram.
        layout: the ``(num_classes, n_fine_bins)`` it must have (``rows.json``'s; 2 classes for a region's).
        ids: the case ids of ``rows.json`` (a case without probabilities has no histogram).
        source: how the message names the file.

    Raises:
        ValueError: one line naming ``source``.
    """
    if (hist.num_classes, hist.n_fine_bins) != layout:
        raise ValueError(f"{source}: the histogram has (num_classes, n_fine_bins) "
                         f"{(hist.num_classes, hist.n_fine_bins)}, rows.json {layout}: another evaluation's state?")
    extra = sorted({str(c) for c in hist.case_ids} - ids)
    if extra:
        raise ValueError(f"{source}: holds case(s) {extra[:5]} that rows.json has no row of: another evaluation's "
                         "state?")


#: the text columns of an evaluation's rows (every other column holds numbers, or text in every row)
TEXT_COLUMNS = ("case", "measure", "shift", "spacing")


def _state_estimate(regions: Any) -> str:
    """What the ``expected_dice`` of a state's rows estimates: that of ``evaluate`` for classes or regions."""
    return "class_mean" if regions is None else "region_mean"


def _current_expected_dice(meta: Mapping[str, Any], rows: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """``rows`` without ``expected_dice`` when the state was written before it recorded what that estimates.

    Found by review: a state of an earlier version holds the expected Dice of the merged foreground (classes), or
    scores a region the segmentation does not hold 0 (regions); a rule certified from it
    (:func:`~monai_unc.evaluation.triage.certify_referral_rule`, ``certify_and_triage``) recorded those estimates as
    ``class_mean`` / ``region_mean``, and triage computed another quantity for the new cases than the interval was
    calibrated on. Such a state's estimates are dropped (with a warning): the rule has no expected-Dice interval
    until ``monai-unc evaluate`` is run again. A recorded estimate other than this version's is an edited file.
    """
    want = _state_estimate(meta.get("regions"))
    recorded = meta.get("expected_dice_estimate")
    if recorded is not None and recorded != want:
        raise ValueError(f"{source}: field 'expected_dice_estimate' must be {want!r} for an evaluation of "
                         f"{'classes' if want == 'class_mean' else 'regions'}, got {recorded!r:.60}")
    if recorded is not None or not any("expected_dice" in r for r in rows):
        return rows
    warnings.warn(f"{source} was written before the evaluation state recorded what expected_dice estimates: its "
                  "expected_dice values are dropped (no expected-Dice interval from this state); run monai-unc "
                  "evaluate again for them", UserWarning, stacklevel=3)
    return [{k: v for k, v in r.items() if k != "expected_dice"} for r in rows]


def check_state_rows(meta: Any, source: str) -> None:
    """Check the fields of a ``state/rows.json`` read back from a file that a user may have edited.

    The counts must be counts; ``rows`` a list of objects, each with a text ``case`` (each case once); ``dice`` a Dice
    in [0, 1]; the text columns (:data:`TEXT_COLUMNS`) text or null; every other column one value (no list or object)
    and, when any row holds a number in it, a number or null in every row (null, ``NaN`` and infinities are undefined
    values, as ``evaluate`` writes them).

    Args:
        meta: the parsed file.
        source: how the message names the file.

    Raises:
        ValueError: one line naming ``source``, the case and the column.

    Example:
        >>> check_state_rows({"num_classes": 2, "n_fine_bins": 240, "rows": [{"case": "a", "dice": None}]}, "rows.json")
        Traceback (most recent call last):
        ...
        ValueError: rows.json: case 'a', column 'dice' must be a Dice in [0, 1], got NoneType None
    """
    def bad(where: str, want: str, value: Any) -> ValueError:
        return ValueError(f"{source}: {where} must be {want}, got {type(value).__name__} {value!r}"[:400])

    if not isinstance(meta, dict):
        raise ValueError(f"{source}: the evaluation state must be a JSON object, got {type(meta).__name__}")
    for name in ("num_classes", "n_fine_bins"):
        if not is_count(meta.get(name)) or not meta[name]:
            raise bad(f"field {name!r}", "a positive count", meta.get(name))
    regions = meta.get("regions")  # found by hostile review 58: "brats" (text) was a TypeError traceback of report
    if regions is not None and not (isinstance(regions, dict) and regions and all(
            isinstance(v, list) and all(is_count(x) for x in v) for v in regions.values())):
        raise bad("field 'regions'", "an object {region: [labels]} (the region spec, in channel order) or null",
                  regions)
    for name in ("curves", "files", "derived_maps", "derived_maps_sha256"):
        if meta.get(name) is not None and not isinstance(meta[name], dict):
            raise bad(f"field {name!r}", "an object or null", meta[name])
    if meta.get("warnings") is not None and not is_text_list(meta["warnings"]):
        raise bad("field 'warnings'", "a list of lines", meta["warnings"])
    for cid, files in (meta.get("files") or {}).items():  # the files the report reads (hostile review 58: tracebacks)
        text = isinstance(files, dict) and isinstance(files.get("label"), str) and all(
            files.get(k) is None or isinstance(files[k], str) for k in ("seg", "probs", "image"))
        # a map's path, or its files one per region (review 61: <case>_<measure>_<region>)
        if not text or not (files.get("maps") is None or isinstance(files["maps"], dict) and all(
                isinstance(v, str) or isinstance(v, list) and v and all(isinstance(x, str) for x in v)
                for v in files["maps"].values())):
            raise bad(f"files of case {cid!r}", 'an object of paths {"label": ..., "seg", "probs", "image": path '
                      'or null, "maps": {measure: path or [path per region]}}', files)
    for cid, maps in (meta.get("derived_maps") or {}).items():
        if not isinstance(maps, dict) or not all(isinstance(v, str) for v in maps.values()):
            raise bad(f"derived_maps of case {cid!r}", "an object {measure: path}", maps)
    for cid, digests in (meta.get("derived_maps_sha256") or {}).items():
        if not isinstance(digests, dict) or not all(isinstance(v, str) for v in digests.values()):
            raise bad(f"derived_maps_sha256 of case {cid!r}", "an object {measure: sha256 hex}", digests)
    lengths: dict[str, tuple[str, int]] = {}  # grid -> (first case, its number of thresholds)
    for cid, curve in (meta.get("curves") or {}).items():  # the QU-BraTS curves the report averages
        _check_state_curve(curve, list(regions or ()), f"{source}: curves of case {cid!r}")
        first, n = lengths.setdefault(str(curve.get("grid", "numpy2")), (cid, len(curve["thresholds"])))
        if n != len(curve["thresholds"]):
            raise ValueError(f"{source}: curves of case {cid!r}, field 'thresholds' must have the {n} thresholds of "
                             f"case {first!r} (the same grid), got {len(curve['thresholds'])}")
    rows = meta.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise bad("field 'rows'", "a list of objects (one per case)", rows)
    seen: set[str] = set()
    numeric: dict[str, str] = {}  # column -> the first case that holds a number in it
    for i, row in enumerate(rows):
        cid = row.get("case")
        if not isinstance(cid, str) or not cid:
            raise bad(f"rows[{i}].case", "a case id (text)", cid)
        if cid in seen:
            raise ValueError(f"{source}: case {cid!r} appears twice in 'rows'")
        seen.add(cid)
        for key, value in row.items():
            where = f"case {cid!r}, column {key!r}"
            if key == "dice":
                if not is_finite_real(value) or not 0.0 <= value <= 1.0:
                    raise bad(where, "a Dice in [0, 1]", value)
            elif key in TEXT_COLUMNS:
                if value is not None and not isinstance(value, str):
                    raise bad(where, "text or null", value)
            elif isinstance(value, (list, dict)):
                raise bad(where, "one value (a number, a text or null)", value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                numeric.setdefault(key, cid)
    for row in rows:
        for key, first in numeric.items():
            value = row.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise bad(f"case {row['case']!r}, column {key!r}", f"a number or null (as in case {first!r})",
                          value)


def _check_state_curve(curve: Any, regions: Sequence[str], where: str) -> None:
    """Refuse a case's QU-BraTS curves in ``state/rows.json`` that are not those :func:`summarize` averages.

    In earlier versions an edited curve (no ``regions``, a curve of another length, text for numbers) made
    ``monai-unc report`` end in a ``KeyError`` or ``TypeError`` traceback, or an error naming neither file nor field.

    Raises:
        ValueError: one line naming ``where`` and the field.
    """
    def numbers(value: Any, n: int | None) -> bool:
        return (isinstance(value, list) and (n is None or len(value) == n)
                and all(v is None or is_real(v) for v in value))

    def bad(field: str, want: str, value: Any) -> ValueError:
        return ValueError(f"{where}, field {field!r} must be {want}, got {type(value).__name__} {value!r}"[:400])

    if not isinstance(curve, dict):
        raise bad("", "an object", curve)
    thresholds = curve.get("thresholds")
    if not numbers(thresholds, None):
        raise bad("thresholds", "a list of numbers", thresholds)
    for key in ("grid", "brain_mask"):
        if key in curve and not isinstance(curve[key], str):
            raise bad(key, "text", curve[key])
    per_region = curve.get("regions")
    if not isinstance(per_region, dict) or sorted(per_region) != sorted(regions):
        raise bad("regions", f"an object of the regions {list(regions)}", per_region)
    for name, c in per_region.items():
        for key in ("dice", "ftp", "ftn"):
            value = c.get(key) if isinstance(c, dict) else None
            if not numbers(value, len(thresholds)):
                raise bad(f"regions.{name}.{key}", f"a list of {len(thresholds)} numbers (one per threshold)", value)


def budget_split(ids: Sequence[str], dice: np.ndarray, scores: np.ndarray,
                 referred: Sequence[str]) -> dict[str, Any]:
    """The mean Dice of the cases a review budget keeps and of those it refers, and the cases tied at its cut.

    The budget refers the first ``len(referred)`` cases of the triage order (:func:`triage_order`), which breaks a tie
    of scores by case id; the referral curve at the budget (``triage.dice_retained``) counts the cases of a tie at the
    cut by their expected share instead. The two agree unless the tie straddles the cut: ``tied`` then lists that tie's
    cases, in the triage order.

    Args:
        ids: the case ids ``(N,)``.
        dice: their Dice ``(N,)``.
        scores: their scores with undefined ones filled (:func:`fill_undefined_scores`) ``(N,)``.
        referred: the ids the budget refers.

    Returns:
        ``{"dice_kept": mean Dice of the other cases or None, "dice_referred": mean Dice of ``referred`` or None,
        "tied": [ids]}``.

    Example:
        >>> budget_split(["a", "b", "c"], np.array([0.9, 0.5, 0.7]), np.array([0.2, 0.2, 0.1]), ["a"])
        {'dice_kept': 0.6, 'dice_referred': 0.9, 'tied': ['a', 'b']}
    """
    dice = np.asarray(dice, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    referred_set = set(referred)  # once (found by hostile testing: rebuilt per case, quadratic in the cohort)
    ref = np.array([c in referred_set for c in ids], dtype=bool)
    tied: list[str] = []
    if ref.any() and (~ref).any():
        cut = scores[ref].min()  # the score of the last referred case
        group = scores == cut
        if (group & ~ref).any():
            tied = [ids[i] for i in triage_order(ids, scores) if group[i]]
    return {"dice_kept": float(dice[~ref].mean()) if (~ref).any() else None,
            "dice_referred": float(dice[ref].mean()) if ref.any() else None, "tied": tied}


def _load_region_histograms(path: Path) -> dict[str, ConfidenceHistogram]:
    """The per-region histograms of ``state/region_histograms.npz`` (either layout of :func:`region_histograms_of`)."""
    return region_histograms_of(read_npz(path))  # a large table read a block of cases at a time


def column_values(rows: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    """One column of the rows as float64, NaN where a row has no value (missing, None or empty).

    Each cell is read by :func:`monai_unc.io.cell_float` with its defaults: text in the number syntax of CSV (``nan``
    and ``inf`` as NaN and infinity, ``1_000`` refused), a number as it is, a bool refused.

    Args:
        rows: ``metrics.csv`` rows.
        key: the column.

    Returns:
        ``(N,)`` float64.

    Example:
        >>> column_values([{"dice": 0.5}, {"dice": None}, {}], "dice")
        array([0.5, nan, nan])
    """
    return np.array([cell_float(r.get(key)) for r in rows], dtype=np.float64)


def _region_suffixes(row: Mapping[str, Any]) -> list[str] | None:
    """The region suffixes of a region evaluation's row (``dice_<R>`` with case scores ``*_<score>_<R>``), or None."""
    suffixes = [k[len("dice_"):] for k in row if k.startswith("dice_")]
    found = [s for s in suffixes if any(k.endswith(f"_{c}_{s}") for k in row for c in CASE_SCORES)]
    return found or None


def score_column(rows: Sequence[Mapping[str, Any]], wanted: str | None) -> str:
    """The triage score column of the rows: ``wanted`` (upgraded from an older name), else the primary measure's.

    Args:
        rows: the cohort's rows (their columns are read from the first).
        wanted: the ``score`` option, or None.

    Returns:
        The column name; ``ValueError`` when ``wanted`` is not a column, or is a column that is no case score computed
        without labels (:func:`~monai_unc.evaluation.config.parse_score_column`: ``<measure>_<score>``, or
        ``<measure>_<score>_<R>`` of a region), e.g. ``dice`` or ``expected_dice``.
    """
    if not rows:
        raise ValueError("no case rows")
    keys = [k for k in rows[0] if k.endswith(tuple(f"_{s}" for s in CASE_SCORES))]
    if wanted is not None:
        wanted = resolve_score_column(wanted, rows[0])  # former names: max_softmax_*, <m>_patch
        if wanted not in rows[0]:
            raise ValueError(f"score column {wanted!r} not found; available: {keys}")
        # the triage, failure detection, referral and OoD AUROC read the column as an uncertainty (larger: referred
        # first); another column of the rows is none (found by hostile testing: --score expected_dice, a quality,
        # referred the cases with the best expected Dice first and --score dice ranked by the labels, silently, while
        # the referral rule refused the same column only after every case was evaluated)
        parse_score_column(wanted, _region_suffixes(rows[0]), option="score")
        return wanted
    measure = rows[0].get("measure")
    if measure is not None and f"{measure}_fg_mean" in rows[0]:
        return f"{measure}_fg_mean"
    if not keys:
        raise ValueError("no uncertainty score in the rows: give uncertainty maps or probabilities")
    return keys[0]


def triage_order(case_ids: Sequence[str], scores: np.ndarray) -> list[int]:
    """Indices from most to least uncertain (undefined scores first; ties by case id).

    Args:
        case_ids: the case ids ``(N,)``.
        scores: their uncertainty scores ``(N,)`` (larger: less confident; NaN: undefined).

    Returns:
        The case indices in referral order.

    Example:
        >>> triage_order(["a", "b", "c", "d"], np.array([0.1, np.nan, 0.3, 0.1]))
        [1, 2, 0, 3]
    """
    filled = fill_undefined_scores(np.asarray(scores, dtype=np.float64))
    return sorted(range(len(case_ids)), key=lambda i: (-filled[i], str(case_ids[i])))


def _pooled_over(hist: ConfidenceHistogram, ids: Sequence[str], what: str) -> str:
    """What a pooled calibration block covers (its ``pooled_over``), with a warning when cases are left out.

    A case without probabilities has no histogram, so the pooled metrics and the reliability curve are of the other
    cases. In earlier versions the block said "all voxels of all cases" for a cohort of 5 cases of which 4 had
    probabilities (6 912 of the 8 640 voxels), without a word.

    Args:
        hist: the merged per-case histogram (of the class task, or of one region).
        ids: the cohort's case ids.
        what: which histograms were merged, for the text.

    Returns:
        ``"all voxels of all cases (<what>)"``, or ``"all voxels of the K of N cases with probabilities (<what>)"``.
    """
    held = {str(c) for c in hist.case_ids}
    missing = [c for c in ids if c not in held]
    if not missing:
        return f"all voxels of all cases ({what})"
    warnings.warn(f"calibration: {len(missing)} of {len(ids)} case(s) have no probabilities ({missing[:5]}"
                  f"{' ...' if len(missing) > 5 else ''}): the pooled calibration metrics and the reliability curve "
                  f"are those of the other {len(ids) - len(missing)} case(s)", UserWarning, stacklevel=3)
    return f"all voxels of the {len(ids) - len(missing)} of {len(ids)} cases with probabilities ({what})"


def _nanmean(a: np.ndarray) -> float | None:
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else None


def _case_metric_mean(a: np.ndarray, column: str, kind: str = "case metric") -> float | None:
    """The mean over the cases of a column (a user case metric, a spatial metric): the mean of its finite values.

    A ``UserWarning`` names the column and how many cases were left out (in earlier versions NaN and inf values
    were dropped silently, so ``summary.json`` gave a mean of fewer cases than ``metrics.csv`` holds, or a finite
    mean of a column holding inf; the same held for the spatial metrics, e.g. the BUC of a case whose
    predicted mask is empty, the case most in need of review, left out of ``spatial.mean_over_cases``).
    """
    left_out = int(np.count_nonzero(~np.isfinite(a)))
    if left_out:
        warnings.warn(f"{kind} {column!r}: {left_out} of {a.size} case(s) are NaN or inf, left out of its "
                      "mean_over_cases", UserWarning, stacklevel=2)
    return _nanmean(a)


#: candidate thresholds the risk-controlled threshold of an evaluation tests (``n_candidates`` of
#: :func:`~monai_unc.metrics.risk_control.risk_controlled_threshold`; recorded in a referral rule)
RISK_CONTROL_CANDIDATES = 20


def dice_failed(dice: Any, failure_dice: float) -> np.ndarray:
    """Whether each Dice is below the failure Dice, compared at the precision a case's Dice is recorded in (float32).

    A case's Dice is rounded to float32 as MONAI's is (:func:`~monai_unc.evaluation.rows.class_dice`), so a Dice of
    exactly 7/10 is recorded as 0.699999988, below the float64 0.7; compared with the threshold rounded the same way
    it is not a failure (found by hostile testing: such a case was counted and shown as failed). The one failure rule
    of the package's case Dice: the summary's failures, the 0/1 risk of risk control (:func:`risk_of_dice`), the
    report's failed rows and the monitor's audited labels. A lesion's Dice is computed and kept in float64, and
    lesion-wise low-Dice detection compares it at that precision.

    Args:
        dice: per-case Dice, any shape (NaN: not failed).
        failure_dice: the Dice below which a case failed.

    Returns:
        A boolean array of ``dice``'s shape.

    Example:
        >>> dice_failed(np.array([7 / 10, 0.69, 0.8, np.nan], dtype=np.float32), 0.7).tolist()
        [False, True, False, False]
    """
    return np.asarray(dice, dtype=np.float64).astype(np.float32) < np.float32(failure_dice)


def dice_as_recorded(dice: float) -> float:
    """A case's Dice as written for reading: the shortest decimal that rounds to the same float32 (:func:`dice_failed`).

    A Dice of exactly 7/10 is recorded as the float32 0.699999988; next to a failure Dice of 0.7 it is written 0.7
    (equal, not failed), where its float64 value would print as 0.69999999 below the threshold.

    Args:
        dice: the recorded Dice (a float32 value, possibly as a float64).

    Returns:
        The float64 of its shortest float32 decimal (NaN stays NaN).

    Example:
        >>> dice_as_recorded(float(np.float32(0.7))), dice_as_recorded(0.79988)
        (0.7, 0.79988)
    """
    return float(str(np.float32(dice)))


def failure_dice_text(failure_dice: float) -> str:
    """The failure Dice as the pages and lines write it: the digits it is compared in (:func:`dice_failed`).

    A case's Dice is compared with the failure Dice rounded to float32, so the threshold is written as that float32's
    shortest decimal (:func:`dice_as_recorded`), never rounded further: ``0.7500001`` fails a Dice of 0.75 and was
    written ``0.75`` (``:g``) above that case marked failed in earlier versions; ``0.75000001`` compares as
    0.75 and is written so.

    Args:
        failure_dice: the Dice below which a case failed.

    Returns:
        The text, without a trailing ``.0`` (``1``, ``0.8``).

    Example:
        >>> failure_dice_text(0.7500001), failure_dice_text(0.75000001), failure_dice_text(0.8), failure_dice_text(1)
        ('0.7500001', '0.75', '0.8', '1')
    """
    text = repr(dice_as_recorded(float(failure_dice)))
    return text[:-2] if text.endswith(".0") else text


def risk_of_dice(dice: np.ndarray, risk: str, failure_dice: float) -> np.ndarray:
    """Per-case risk in [0, 1] of a Dice: ``[dice < failure_dice]`` or ``1 - dice``.

    The 0/1 risk goes with ``risk="failure"``, the continuous one with ``risk="1-dice"`` (clipped to [0, 1]).

    Args:
        dice: per-case Dice (NaN: no failure, and a NaN ``1 - dice``).
        risk: ``"failure"`` or ``"1-dice"``.
        failure_dice: the Dice below which a case failed.

    Returns:
        The risks, as float64, same shape as ``dice``.

    Example:
        >>> risk_of_dice(np.array([0.9, 0.5]), "failure", 0.8)
        array([0., 1.])
        >>> risk_of_dice(np.array([0.9, 0.5]), "1-dice", 0.8)
        array([0.1, 0.5])
    """
    dice = np.asarray(dice, dtype=np.float64)
    if risk == "failure":
        return dice_failed(dice, failure_dice).astype(np.float64)
    return np.clip(1.0 - dice, 0.0, 1.0)


def calibration_risks(dice: Any, cases: Sequence[str], risk: str, failure_dice: float,
                      where: str = "the rows' field 'dice'") -> np.ndarray:
    """The risks a risk-controlled rule is certified on: :func:`risk_of_dice` of Dice that must all be known.

    :func:`risk_of_dice` reads an undefined Dice as "no failure" (risk 0) for ``risk="failure"``, which would count a
    case of unknown outcome as a certified success, and as NaN for ``"1-dice"``. ``evaluate``'s own Dice is never
    undefined (an empty label and prediction score 1), so an undefined or out-of-range Dice here comes from edited or
    hand-made rows: refused, naming the cases, for both risks. The one check of the Dice a certificate rests on:
    :class:`~monai_unc.products.RiskControl`, :func:`~monai_unc.evaluation.triage.certify.certify_rule` and a rule's
    recomputed certificate (:meth:`~monai_unc.evaluation.triage.ReferralRule.verify_certificate`).

    Args:
        dice: the cases' Dice ``(N,)`` (None, ``""`` or NaN: undefined).
        cases: their ids ``(N,)``, for the message.
        risk: ``"failure"`` or ``"1-dice"``.
        failure_dice: the Dice below which a case failed.
        where: how the message names the Dice's field (and file).

    Returns:
        The risks ``(N,)``, float64.

    Raises:
        ValueError: a Dice is undefined (None, NaN, infinite) or outside [0, 1]; the message names ``where`` and the
            cases.

    Example:
        >>> calibration_risks([0.9, 0.5], ["a", "b"], "failure", 0.8)
        array([0., 1.])
        >>> try:
        ...     calibration_risks([0.9, None], ["a", "b"], "failure", 0.8)
        ... except ValueError as e:
        ...     print(str(e).split(";")[0])
        the rows' field 'dice' is undefined (null or NaN) for 1 case(s): 'b'
    """
    d = np.array([cell_float(v) for v in np.asarray(dice, dtype=object).reshape(-1)], dtype=np.float64)
    ids = [str(c) for c in cases]
    if len(ids) != d.size:
        raise ValueError(f"dice and cases must have one entry per case, got {d.size} and {len(ids)}")

    def named(mask: np.ndarray) -> str:
        bad = [repr(c) for c, b in zip(ids, mask) if b]
        return ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")

    undefined = ~np.isfinite(d)
    if undefined.any():
        raise ValueError(f"{where} is undefined (null or NaN) for {int(undefined.sum())} case(s): {named(undefined)}; "
                         "a risk-controlled rule is certified on known outcomes only (a case without a Dice is neither "
                         "a success nor a failure): give every case's Dice or leave the case out")
    outside = (d < 0) | (d > 1)
    if outside.any():
        raise ValueError(f"{where} must be a Dice in [0, 1], got values in [{d.min():.4g}, {d.max():.4g}] for "
                         f"case(s) {named(outside)}")
    return risk_of_dice(d, risk, failure_dice)


def case_risk(dice: np.ndarray, config: EvaluationConfig) -> np.ndarray:
    """Per-case risk in [0, 1] of ``config.risk``: ``[dice < failure_dice]`` or ``1 - dice`` (:func:`risk_of_dice`).

    Args:
        dice: per-case Dice ``(N,)``.
        config: the evaluation options (``risk`` and ``failure_dice``).

    Returns:
        The risks ``(N,)``, float64.
    """
    return risk_of_dice(dice, config.risk, config.failure_dice)


def calibration_mask(ids: Sequence[str], config: EvaluationConfig) -> np.ndarray:
    """Which of ``ids`` are calibration cases of the risk-controlled threshold.

    Args:
        ids: the case ids ``(N,)``.
        config: the evaluation options; ``config.calibration_cases`` None means every case.

    Returns:
        A boolean mask ``(N,)``.

    Raises:
        ValueError: a calibration case is not among ``ids``.

    Example:
        >>> calibration_mask(["a", "b", "c"], EvaluationConfig(calibration_cases=["b"]))
        array([False,  True, False])
    """
    wanted = set(config.calibration_ids(ids))
    return np.array([c in wanted for c in ids], dtype=bool)


def _failure_detection(raw_scores: np.ndarray, dice: np.ndarray, column: str) -> FailureDetection:
    """:func:`~monai_unc.metrics.casewise.failure_detection` of the filled scores; NaN with a warning for no score.

    In earlier versions, with every case's score undefined (NaN), the filled scores were all tied and the AURC, E-AURC
    and AUGRC were those of no ranking, given as the score's without a word.
    """
    if raw_scores.size and not np.isfinite(raw_scores).any():
        nan = warn_nan(f"failure detection: every one of the {raw_scores.size} case(s) has an undefined score "
                       f"{column!r} (NaN or inf): AURC, E-AURC and AUGRC are undefined", 4)
        return FailureDetection(nan, nan, nan)
    return failure_detection(fill_undefined_scores(raw_scores), dice)


def _row_scored(row: Mapping[str, Any], files: Mapping[str, Any] | None) -> bool:
    """Whether a case of a cohort state has an uncertainty score source: its recorded files say so, else its row.

    A row without recorded files (a state built by hand) is scored when it names its measure or holds a case score.
    """
    if files is not None:
        return has_score_source(files)
    if row.get("measure") not in (None, ""):
        return True
    ends = tuple(f"_{s}" for s in CASE_SCORES)
    return any(k.endswith(ends) and v is not None and v != "" for k, v in row.items())


def summarize(state: CohortState, config: EvaluationConfig, *, fitted: Mapping[str, Any] | None = None,
              fit_warnings: Sequence[str] = ()) -> dict[str, Any]:
    """Cohort metrics of ``state`` (module docstring); NaN becomes ``null`` in the returned dict.

    Args:
        state: the cohort state.
        config: the evaluation options.
        fitted: the artifacts of the evaluation's products (:func:`~monai_unc.evaluation.products.cohort_products`)
            (:func:`~monai_unc.evaluation.products.fit_products`; fitted here when None).
        fit_warnings: the messages of the warnings raised while ``fitted`` was fitted elsewhere: listed with the
            cohort's own (``"cohort: ..."``), as when the products are fitted here.

    Returns:
        The summary: the evaluation's blocks, then one block per product under its name, then ``warnings``.

    Raises:
        ValueError: cases without an uncertainty map and probabilities beside cases with them
            (:func:`~monai_unc.evaluation.rows.check_scored_cases`, as ``monai-unc evaluate`` refuses them), or no
            score column.
    """
    config.validate()
    rows = state.sorted_rows()
    ids = [str(r["case"]) for r in rows]
    # the check of every entry point (found by review 61: evaluate_cases and summarize called from Python summarised a
    # cohort mixing segmentations alone with scored cases, the former referred first without a word)
    check_scored_cases([(c, _row_scored(r, state.files.get(c))) for c, r in zip(ids, rows)])
    n = len(rows)
    dice = column_values(rows, "dice")
    score_key = score_column(rows, config.score)
    raw_scores = column_values(rows, score_key)
    scores = fill_undefined_scores(raw_scores)
    summary: dict[str, Any] = {
        "n_cases": n,
        "num_classes": state.num_classes,
        "class_names": config.class_names,
        "measure": rows[0].get("measure"),
        "score": {"column": score_key, "undefined": [c for c, s in zip(ids, raw_scores) if not np.isfinite(s)]},
        "dice": {
            "mean": float(dice.mean()),
            "median": float(np.median(dice)),
            # the class (region) columns, not every column named dice_*: a case metric "dice_at_05" was listed as a
            # class (found by hostile testing)
            # columns=: the rows of an evaluation written by an earlier version, whose class columns kept ASCII
            # letters and digits only ("Ödem" -> dice_dem), are read as written
            "per_class": {k[5:]: _nanmean(column_values(rows, k)) for k in dice_columns(
                state.num_classes, config.class_names, None if state.regions is None else list(state.regions),
                columns=rows[0]) if k in rows[0]},
        },
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if state.histogram is not None:
            cal = calibration_metrics(state.histogram, CALIBRATION_COLUMNS, n_bins=config.n_bins,
                                      min_bin_count=config.min_bin_count)
            rc = reliability_curve(state.histogram, kind="all_label", n_bins=config.n_bins,
                                   min_bin_count=config.min_bin_count)
            summary["calibration"] = {
                **{k: float(v) for k, v in cal.items()},
                "pooled_over": _pooled_over(state.histogram, ids, "merged confidence histograms"),
                "n_bins": config.n_bins,
                "min_bin_count": config.min_bin_count,
                "voxels": int(state.histogram.scalars[:, 0].sum().item()),
            }
            summary["reliability"] = {
                "kind": "all_label",
                "edges": rc.edges,
                "confidence": rc.confidence,
                "frequency": rc.frequency,
                "counts": rc.counts,
            }
        spatial = {k: _case_metric_mean(column_values(rows, k), k, "spatial metric") for k in SPATIAL_COLUMNS
                   if k in rows[0]}
        if spatial:
            summary["spatial"] = {"measure": rows[0].get("measure"), "mean_over_cases": spatial}
        # a region evaluation has the columns <name>_<R> alone (per region, below): its column <name> would be one of
        # the evaluation's own (found by hostile review 60: a case metric "voxels" of a region evaluation was
        # summarised as the mean of the evaluation's voxels column, 1008 for a metric of mean 225)
        user = {k: _case_metric_mean(column_values(rows, k), k) for k in (config.case_metrics or {})
                if state.regions is None and k in rows[0]}
        if user:
            summary["case_metrics"] = {"functions": config.case_metric_names, "mean_over_cases": user}
        fd = _failure_detection(raw_scores, dice, score_key)
        summary["failure_detection"] = {"risk": "1 - dice", "aurc": fd.aurc, "eaurc": fd.eaurc, "augrc": fd.augrc}
        curve = referral_curve(scores, dice)
        summary["referral"] = {
            "metric": "mean dice of the retained cases",
            "tau": curve.tau,
            "dice": curve.value,
            "n_retained": curve.n_retained,
            # no score defined: no ranking to rate (the curve is the one of a random order, flat)
            "area_normalized": area_under_referral_curve(scores, dice, normalize=True)
            if n > 1 and np.isfinite(raw_scores).any() else None,
        }
        order = triage_order(ids, raw_scores)
        n_ref = int(share_count(config.budget, n))
        at_budget = referral_curve(scores, dice, taus=[config.budget])
        referred = [ids[i] for i in order[:n_ref]]
        split = budget_split(ids, dice, scores, referred)
        summary["triage"] = {
            "budget": config.budget,
            "n_referred": n_ref,
            "referred": referred,
            "order": [ids[i] for i in order],
            "dice_all": float(dice.mean()),
            "dice_retained": float(at_budget.value[0]),
            "dice_kept": split["dice_kept"],
            "dice_referred": split["dice_referred"],
            "tied": split["tied"],
        }
        failed = dice_failed(dice, config.failure_dice)
        summary["failures"] = {
            "dice_threshold": config.failure_dice,
            "n_failed": int(failed.sum()),
            "cases": [c for c, f in zip(ids, failed) if f],
            "caught_by_budget": int(sum(failed[i] for i in order[:n_ref])),
        }
        if config.shifts is not None:  # the one OoD AUROC of the package (CaseScoresHandler's too)
            # the labels as given: a falsy label such as 0 stays "0" (found by hostile testing: `or ""` made
            # severity 0 in-distribution here only)
            summary["ood"] = ood_auroc_by_shift(raw_scores, [r.get("shift") for r in rows])  # fills them itself
            if "auroc" not in summary["ood"]:
                # found by review 67: shift labels none of which (or all of which) is in-distribution (severities 0, 1,
                # 2) left the block without an AUROC and the report's "OoD AUROC –" without a word
                warnings.warn(f"OoD AUROC undefined: {summary['ood']['n_iid']} in-distribution and "
                              f"{summary['ood']['n_ood']} shifted case(s), it needs both (a case is in-distribution "
                              f"when its shift label, stripped and lower-cased, is one of {list(IID_SHIFTS)})",
                              UserWarning, stacklevel=2)
        blocks: dict[str, Any] = {}
        if cohort_products(config):
            if fitted is None:
                fitted = fit_products(state.product_states, rows, config)
            blocks = product_summaries(state.product_states, rows, config, fitted)
        implicit = {p.name for p in implicit_products(config)}
        # the blocks of the products the evaluation options turn on (the referral rule) come before the regions,
        # where the evaluation has written them since it has had them; the other products' blocks after
        summary.update({k: v for k, v in blocks.items() if k in implicit})
        if state.regions is not None:
            summary.update(_region_summary(state, rows, ids, score_key, config))
        summary.update({k: v for k, v in blocks.items() if k not in implicit})
    # listed: the UserWarnings; the others are issued again as raised (found by review 70: dropped before)
    msgs = sorted({str(w.message) for w in keep_user_warnings(caught)} | set(map(str, fit_warnings)))
    summary["warnings"] = sorted(set(state.warnings)) + [f"cohort: {m}" for m in msgs]
    return json_safe(summary)


def _region_summary(state: CohortState, rows: Sequence[Mapping[str, Any]], ids: Sequence[str], score_key: str,
                    config: EvaluationConfig) -> dict[str, Any]:
    """The ``regions`` and ``qu_brats`` blocks of a region evaluation's summary (:mod:`.region_case`).

    Per region they hold the Dice, the pooled calibration of the region's merged histograms and its reliability curve,
    the spatial metrics (mean over cases), failure detection with the region's score and Dice, and the mean QU-BraTS
    values; the QU-BraTS means over cases and regions and the mean curves over the cases.
    """
    assert state.regions is not None
    names = list(state.regions)
    # each region's failure detection ranks by the region's own score of the triage score's measure and aggregation:
    # for a triage score of one region (<measure>_<score>_<R>) that is <measure>_<score>_<S>, not <...>_<R>_<S>
    # (found by hostile testing: --score predictive_entropy_fg_mean_WT dropped the block of every region)
    try:
        measure, aggregation, _ = parse_score_column(score_key, names)
        base = f"{measure}_{aggregation}"
    except ValueError:  # not a case score of this package's measures: the column as it is named
        base = score_key
    per_region: dict[str, Any] = {}
    # the rows of an evaluation written by an earlier version, whose region columns kept ASCII letters and digits
    # only ("Ödem 2" -> dice_dem_2), are read as written
    suffixes = [c[len("dice_"):] for c in dice_columns(0, regions=names, columns=rows[0] if rows else None)]
    for name, s in zip(names, suffixes):
        d = column_values(rows, f"dice_{s}")
        block: dict[str, Any] = {"column_suffix": s, "labels": list(state.regions[name]),
                                 "dice": {"mean": _nanmean(d), "median": float(np.median(d)) if d.size else None}}
        h = state.region_histograms.get(name)
        if h is not None:
            cal = calibration_metrics(h, CALIBRATION_COLUMNS, n_bins=config.n_bins, min_bin_count=config.min_bin_count)
            rc = reliability_curve(h, kind="all_label", n_bins=config.n_bins, min_bin_count=config.min_bin_count)
            block["calibration"] = {**{k: float(v) for k, v in cal.items()},
                                    "pooled_over": _pooled_over(h, ids, "merged binary histograms of the region"),
                                    "voxels": int(h.scalars[:, 0].sum().item())}
            block["reliability"] = {"kind": "all_label", "edges": rc.edges, "confidence": rc.confidence,
                                    "frequency": rc.frequency, "counts": rc.counts}
        spatial = {k: _case_metric_mean(column_values(rows, f"{k}_{s}"), f"{k}_{s}", "spatial metric")
                   for k in SPATIAL_COLUMNS if f"{k}_{s}" in rows[0]}
        if spatial:
            block["spatial"] = {"measure": rows[0].get("measure"), "mean_over_cases": spatial}
        user = {k: _case_metric_mean(column_values(rows, f"{k}_{s}"), f"{k}_{s}") for k in (config.case_metrics or {})
                if f"{k}_{s}" in rows[0]}
        if user:
            block["case_metrics"] = {"mean_over_cases": user}
        region_score = f"{base}_{s}"
        if region_score in rows[0]:
            fd = _failure_detection(column_values(rows, region_score), d, region_score)
            block["failure_detection"] = {"score": region_score, "risk": f"1 - dice_{s}", "aurc": fd.aurc,
                                          "eaurc": fd.eaurc, "augrc": fd.augrc}
        if f"qu_brats_score_{s}" in rows[0]:
            block["qu_brats"] = {c: _nanmean(column_values(rows, f"qu_brats_{c}_{s}")) for c in QU_BRATS_COLUMNS}
        per_region[name] = block
    out: dict[str, Any] = {"regions": {
        "spec": {k: list(v) for k, v in state.regions.items()},
        "names": names,
        "dice": "dice = mean over the regions of dice_<region>",
        "combined_score": "<measure>_<score> = mean over the regions of <measure>_<score>_<region> (regions where it "
                          "is defined); used for the ranking, triage and risk control",
        "per_region": per_region,
    }}
    if "qu_brats_score" in rows[0] and state.curves:
        first = next(iter(state.curves.values()))
        # curves saved before the grid was recorded are of the default grid
        grids = sorted({str(state.curves[c].get("grid", "numpy2")) for c in ids if c in state.curves})
        if len(grids) > 1:  # curves of different lengths: no mean curve, no comparable scores
            raise ValueError(f"the cases' QU-BraTS scores were computed on different threshold grids {grids}: "
                             "evaluate them again with one qu_brats_grid")
        mean_curves = {}
        for name in names:
            mean_curves[name] = {k: np.mean([state.curves[c]["regions"][name][k] for c in ids if c in state.curves],
                                            axis=0).tolist() for k in ("dice", "ftp", "ftn")}
        measure = rows[0].get("measure")
        out["qu_brats"] = {
            **{c: _nanmean(column_values(rows, f"qu_brats_{c}")) for c in QU_BRATS_COLUMNS},
            "per_region": {n: per_region[n]["qu_brats"]["score"] for n in names},
            "mean_over": "cases (the per-case score is the mean over the regions)",
            "measure": measure,
            "scale": "u / measure_max * 100 (to_qu_brats_range)",
            "grid": grids[0] if grids else "numpy2",
            "brain_mask": sorted({str(state.curves[c]["brain_mask"]) for c in ids if c in state.curves}),
            "curves": {"thresholds": first["thresholds"], "mean_over_cases": mean_curves},
        }
    return out


def config_from_summary(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], budget: float | None = None,
                        **overrides: Any) -> EvaluationConfig:
    """The :class:`EvaluationConfig` an evaluation recorded in its ``summary.json`` (``"config"``), with overrides.

    The products' options are left out (their blocks are read as written) and the shift labels are taken from the
    rows (``summary.json`` does not keep the table).

    Args:
        summary: the evaluation's summary as written.
        rows: the cases' rows (their ``shift`` column, when there is one).
        budget: another referral fraction (None: the recorded one).
        overrides: other fields of :class:`EvaluationConfig` (``target_risk``, ``delta``, ``risk``, ``risk_method``,
            ``calibration_cases``, ...); None values keep the recorded ones.

    Returns:
        The validated configuration. ``TypeError`` for a name that is not a field; ``ValueError`` for recorded
        options that are not valid (a ``summary.json`` edited by hand).

    Example:
        >>> config = config_from_summary({"config": {"budget": 0.2, "n_bins": 10}}, [], budget=0.3)
        >>> config.budget, config.n_bins
        (0.3, 10)
    """
    return _summary_config(summary, rows, budget, overrides, say=True)


def _summary_config(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], budget: float | None,
                    overrides: Mapping[str, Any], say: bool) -> EvaluationConfig:
    """:func:`config_from_summary`, whose warning ``say=False`` leaves out.

    For a second configuration of the same summary, whose first said it (an empty recorded class name).
    """
    known = {f.name for f in dataclasses.fields(EvaluationConfig)} - {"products"}
    recorded = summary.get("config") or {}
    if not isinstance(recorded, Mapping):
        raise ValueError(f"summary.json: 'config' must be an object of evaluation options, got "
                         f"{type(recorded).__name__}")
    for k in overrides:
        if k not in known:
            raise TypeError(f"unknown evaluation option {k!r}")
    # the overrides replace the recorded options before the configuration is made: it refuses a list naming a case
    # twice at construction, which an evaluation of an earlier version may have recorded (review 67)
    options = {k: v for k, v in recorded.items() if k in known}
    options.update({k: v for k, v in overrides.items() if v is not None})
    names = options.get("class_names")
    if isinstance(names, list) and any(isinstance(n, str) and not n.strip() for n in names):
        # an evaluation written before empty names were refused (review 68) evaluated such a class into the column
        # dice_class: read it as the class named "class", of that column, so that the folder stays readable
        blank = [i for i, n in enumerate(names) if isinstance(n, str) and not n.strip()]
        if say:
            # once in a report (each_warning_once): its checks, its page and its summary each read the options
            warn_once_inside(f"summary.json records an empty class name (class_names{blank}): read as 'class', the "
                             "name of its column dice_class (new evaluations refuse empty names)", UserWarning,
                             stacklevel=3)
        options["class_names"] = ["class" if i in blank else n for i, n in enumerate(names)]
    try:
        cfg = EvaluationConfig(**options)
    except ValueError as e:
        if not str(e).startswith("class_names: the names"):
            raise
        # recorded names of one column: an evaluation written before the columns kept every script's letters
        # (NFKC, review 68) named their columns apart ("T2": dice_t2, "Ｔ２": dice_class); found by review 69: the
        # refusal said what a new evaluation is told, nothing of the folder or of what to do with it
        base = str(e).removesuffix("; give each class a name of its own")
        raise ValueError(f"{base}. An earlier version, whose columns kept ASCII letters and digits only, evaluated "
                         "these classes into columns apart, which cannot be told apart under these names: evaluate "
                         "the cases again into a new folder (monai-unc evaluate --output NEW) with --class-names "
                         "giving each class a name of its own (this folder's metrics.csv stays readable as a "
                         "table)") from None
    if budget is not None:
        cfg.budget = float(budget)
    # a risk option without a target in effect would be ignored (found by hostile testing: report --delta exited 0)
    check_risk_options(cfg.target_risk, [k for k, v in overrides.items() if v is not None])
    if any("shift" in r for r in rows):
        cfg.shifts = {str(r["case"]): str(r.get("shift", "")) for r in rows}
    try:
        cfg.validate()
    except TypeError as e:  # a summary.json edited by hand: one error naming the file, not a traceback
        raise ValueError(f"summary.json: the recorded evaluation options are invalid: {e}") from None
    except ValueError as e:
        if not str(e).startswith("regions: the region names"):
            raise
        # recorded regions of one column: as for class names above ("WT²" and "WT2" were columns WT and WT2)
        raise ValueError(f"summary.json: {e}. An earlier version, whose region columns kept ASCII letters and digits "
                         "only, evaluated these regions into columns apart, which cannot be told apart under these "
                         "names: evaluate the cases again into a new folder (monai-unc evaluate --output NEW) with "
                         "--regions giving each region a name of its own (this folder's metrics.csv stays readable as "
                         "a table)") from None
    return cfg


def resummarize(state: CohortState, saved: Mapping[str, Any], budget: float | None = None,
                **overrides: Any) -> dict[str, Any]:
    """The cohort summary of a saved evaluation again, with another budget or risk target.

    This is what ``monai-unc report --budget`` shows: :func:`summarize` on the saved state; the blocks that
    ``evaluate`` fitted (the products') are kept as written, except those of the products that the evaluation options
    turn on (the risk-controlled referral rule), which are refitted on the saved rows with the options given here.
    The warnings are those of this summary and those of ``saved`` that the state cannot give again (a summary with the
    recorded options does not give them: e.g. the classes that no case holds).

    Args:
        state: the saved cohort state (:func:`load_evaluation`).
        saved: the evaluation's ``summary.json``.
        budget: another referral fraction (None: the recorded one).
        overrides: other options (:func:`config_from_summary`).

    Returns:
        The summary.
    """
    bins: dict[str, Any] = {}
    if (saved.get("config") or {}).get("n_bins") is None and state.n_fine_bins % 16 == 0:
        # not recorded (a summary written without its options): the bins of the state's histograms, not the default
        bins = {"n_bins": state.n_fine_bins // 16}
        overrides = {**overrides, **bins}
    config = config_from_summary(saved, state.rows, budget, **overrides)
    # summarize lists its warnings in the summary and does not raise them: nothing is filtered here (a process-wide
    # filter hid every UserWarning that summarize does raise, found by review 70)
    summary = summarize(state, config)
    # evaluate's warnings that the saved state cannot give again are carried over: those a summary with the
    # recorded options does not give (found by hostile review 60: the warning that a class no case holds scores
    # Dice 1 in every case, which needs the cases' classes that the state does not keep, and those of fitting the
    # products whose blocks are kept, were missing from the page of `monai-unc report --budget`)
    changed = budget is not None or any(v is not None for k, v in overrides.items() if k not in bins)
    # the recorded options' configuration says nothing: the one above said the summary's warnings (found by review
    # 70: an empty recorded class name was said twice with a budget or an override)
    recomputed = set((summarize(state, _summary_config(saved, state.rows, None, bins, say=False)) if changed
                      else summary)["warnings"])
    shown = set(summary["warnings"])
    summary["warnings"] = list(summary["warnings"]) + [
        w for w in saved.get("warnings") or [] if w not in recomputed and w not in shown]
    recorded = (saved.get("config") or {}).get("products") or {}
    refitted = {p.name for p in implicit_products(config)}  # from the saved rows, with the options given here
    kept = [k for k in saved if (k in recorded or product_type(k) is not None) and k not in refitted]
    summary.update({k: saved[k] for k in kept})
    cal = overrides.get("calibration_cases")
    before = (saved.get("config") or {}).get("calibration_cases")
    fitted_on = sorted(map(str, before if before is not None else [r["case"] for r in state.rows]))
    if kept and cal is not None and sorted(map(str, cal)) != fitted_on:
        # the products' blocks are evaluate's, fitted on its calibration cases: say so where the summary is shown
        summary["warnings"] = list(summary.get("warnings") or []) + [
            f"cohort: the blocks {kept} are those evaluate fitted on its own calibration cases "
            f"({'all' if before is None else len(before)}), not on the {len(cal)} calibration case(s) given here: "
            "run evaluate with these calibration cases to refit them"]
    return summary


def write_evaluation(state: CohortState, summary: Mapping[str, Any], output: str | os.PathLike,
                     config: EvaluationConfig | None = None, inputs: Mapping[str, Any] | None = None
                     ) -> dict[str, Path]:
    """Write ``metrics.csv``, ``summary.json`` and the state folder (for ``monai-unc report``) atomically.

    ``metrics.csv`` cells are written as :func:`monai_unc.io.write_csv` writes them (NaN ``nan``, floats at full
    precision). ``summary.json`` records what made its numbers: the package version (``monai_unc_version``) and
    the versions of torch and MONAI (``library_versions``), as ``infer.json`` does, and the inputs when given.

    Args:
        state: the cohort state.
        summary: the cohort summary (:func:`summarize`).
        output: the evaluation folder (created if missing).
        config: the options, recorded under ``config`` in ``summary.json`` when given.
        inputs: what was evaluated, recorded under ``inputs`` when given (``monai-unc evaluate``: the folders of the
            predictions and the labels as absolute paths, and the predictions' layout).

    Returns:
        ``{"metrics": path, "summary": path, "state": folder}``.
    """
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    state.save(output / STATE_DIR)
    doc = dict(summary)
    if config is not None:
        doc["config"] = config.to_json()
    if inputs is not None:
        doc["inputs"] = dict(inputs)
    doc[VERSION_KEY] = __version__
    doc[LIBRARIES_KEY] = library_versions()
    paths = {
        "metrics": write_csv(output / "metrics.csv", state.sorted_rows()),
        "summary": atomic_write_text(output / "summary.json", json.dumps(json_safe(doc), indent=2) + "\n"),
        "state": output / STATE_DIR,
    }
    return paths


#: top-level blocks of ``summary.json`` that are objects (or null) when present
_SUMMARY_BLOCKS = ("dice", "calibration", "reliability", "spatial", "failure_detection", "referral", "triage",
                   "failures", "qu_brats", "ood", "risk_control", "regions", "config")


def _check_summary(summary: Any, rows: Sequence[Mapping[str, Any]] = (), source: str = "summary.json") -> None:
    """Check the fields of a ``summary.json`` read back from a file that a user may have edited.

    The fields that ``monai-unc report`` reads (the case count, the triage, the failures, the score column, the class
    names, the blocks it draws) must have the types :func:`summarize` writes; the recorded options (``config``) must
    be valid evaluation options (:func:`config_from_summary`). With ``rows``, the case lists and counts must be those
    of the rows (:func:`_check_summary_cases`: ``n_cases``, ``triage.order`` and ``referred``, the budget's Dice and
    tie, the risk-controlled decisions). Keys it does not know are accepted.

    Args:
        summary: the parsed file.
        rows: the cases' rows (for the shift labels of the options).
        source: how the message names the file.

    Raises:
        ValueError: one line naming ``source`` and the field.

    Example:
        >>> _check_summary({"n_cases": [1]}, source="ev/summary.json")
        Traceback (most recent call last):
        ...
        ValueError: ev/summary.json: 'n_cases' must be a count of cases, got list [1]
    """
    def bad(name: str, want: str, value: Any) -> ValueError:
        return ValueError(f"{source}: {name!r} must be {want}, got {type(value).__name__} {value!r}"[:400])

    if not isinstance(summary, dict):
        raise ValueError(f"{source}: the summary must be a JSON object, got {type(summary).__name__}")
    if "n_cases" not in summary:
        raise ValueError(f"{source}: 'n_cases' is missing")
    n = summary["n_cases"]
    if not is_count(n):
        raise bad("n_cases", "a count of cases", n)
    for name in _SUMMARY_BLOCKS:
        if summary.get(name) is not None and not isinstance(summary[name], dict):
            raise bad(name, "an object", summary[name])
    if summary.get("num_classes") is not None and not (is_count(summary["num_classes"]) and summary["num_classes"]):
        raise bad("num_classes", "a positive number of classes", summary["num_classes"])
    if summary.get("class_names") is not None and not is_text_list(summary["class_names"]):
        raise bad("class_names", "a list of names or null", summary["class_names"])
    if summary.get("measure") is not None and not isinstance(summary["measure"], str):
        raise bad("measure", "a measure name or null", summary["measure"])
    if summary.get("warnings") is not None and not is_text_list(summary["warnings"]):
        raise bad("warnings", "a list of lines", summary["warnings"])
    score = summary.get("score")
    if not isinstance(score, dict) or not isinstance(score.get("column"), str):
        raise bad("score", 'an object with a "column" name', score)
    if score.get("undefined") is not None and not is_text_list(score["undefined"]):
        raise bad("score.undefined", "a list of case ids", score["undefined"])
    triage = summary.get("triage")
    if not isinstance(triage, dict):
        raise bad("triage", "an object", triage)
    if not is_finite_real(triage.get("budget")) or not 0.0 <= triage["budget"] < 1.0:
        raise bad("triage.budget", "a referral fraction in [0, 1)", triage.get("budget"))
    if not is_count(triage.get("n_referred")) or triage["n_referred"] > n:
        raise bad("triage.n_referred", f"a count of cases at most n_cases ({n})", triage.get("n_referred"))
    for key in ("referred", "order"):
        if not is_text_list(triage.get(key)):
            raise bad(f"triage.{key}", "a list of case ids", triage.get(key))
    failures = summary.get("failures")
    if not isinstance(failures, dict):
        raise bad("failures", "an object", failures)
    if not is_finite_real(failures.get("dice_threshold")) or not 0.0 <= failures["dice_threshold"] <= 1.0:
        raise bad("failures.dice_threshold", "a Dice in [0, 1]", failures.get("dice_threshold"))
    dice = summary.get("dice")
    if not isinstance(dice, dict) or "mean" not in dice or not (dice["mean"] is None or is_finite_real(dice["mean"])):
        raise bad("dice", 'an object with a numeric "mean"', dice)
    # the numbers the report's cards and captions read (found by hostile review 59: a block edited to null or {} ended
    # `monai-unc report` in a KeyError / TypeError traceback)
    for name, keys, required in (("failure_detection", ("aurc", "eaurc"), True),
                                 ("referral", ("area_normalized",), True),
                                 ("calibration", ("ece", "all_label_ece", "nll", "brier"), False)):
        block = summary.get(name)
        if block is None and not required:
            continue
        if not isinstance(block, dict):
            raise bad(name, "an object", block)
        for key in keys:
            if key not in block or not (block[key] is None or is_finite_real(block[key])):
                raise bad(f"{name}.{key}", "a number or null", block.get(key))
    for key in ("dice_all", "dice_retained", "dice_kept", "dice_referred"):
        if triage.get(key) is not None and not is_finite_real(triage[key]):
            raise bad(f"triage.{key}", "a Dice or null", triage[key])
    if triage.get("tied") is not None and not is_text_list(triage["tied"]):
        raise bad("triage.tied", "a list of case ids", triage["tied"])
    try:
        config_from_summary(summary, rows)
    except (TypeError, ValueError) as e:
        message = str(e).removeprefix("summary.json: ")
        raise ValueError(f"{source}: 'config': {message}") from None
    if rows:
        _check_summary_cases(summary, rows, source)


def _check_summary_state(summary: Mapping[str, Any], state: CohortState, source: str) -> None:
    """Refuse a ``summary.json`` whose classes, class names, region spec or ECE bins are not those of the state.

    In earlier versions ``config.class_names`` edited to fewer names than the state's classes made
    ``monai-unc report --budget`` end in an ``IndexError`` traceback (the Dice columns are named from them), and a
    ``config.n_bins`` of 100 beside histograms of ``16 * 15`` fine bins gave a pooled ECE of 0.03177 for the exact
    0.03237 (coarse bins that are no unions of fine bins), without a word.

    Raises:
        ValueError: one line naming ``source`` and the field.
    """
    if state.histogram is not None and not isinstance(summary.get("calibration"), dict):  # the reliability caption
        raise ValueError(f"{source}: 'calibration' must be the object of the pooled calibration of the evaluation's "
                         f"histograms, got {summary.get('calibration')!r}"[:400])
    n_bins = (summary.get("config") or {}).get("n_bins")
    if n_bins is not None and 16 * n_bins != state.n_fine_bins:
        raise ValueError(f"{source}: 'config.n_bins' must be that of the evaluation's histograms "
                         f"({state.n_fine_bins // 16}), got {n_bins!r}")
    recorded = (summary.get("config") or {}).get("regions")
    spec = None if recorded is None else [[k, list(v)] for k, v in dict(recorded).items()]
    if "config" in summary and spec != (None if state.regions is None else
                                        [[k, list(v)] for k, v in state.regions.items()]):
        raise ValueError(f"{source}: 'config.regions' must be the region spec of state/rows.json "
                         f"({state.regions}), got {recorded!r}"[:400])
    if summary.get("num_classes") is not None and summary["num_classes"] != state.num_classes:
        raise ValueError(f"{source}: 'num_classes' must be the number of classes of state/rows.json "
                         f"({state.num_classes}), got {summary['num_classes']!r}")
    if state.regions is not None:
        return
    for name, names in (("class_names", summary.get("class_names")),
                        ("config.class_names", (summary.get("config") or {}).get("class_names"))):
        if names is not None and len(names) != state.num_classes:
            raise ValueError(f"{source}: {name!r} must give one name per class of state/rows.json "
                             f"({state.num_classes}), got {len(names)}")


def _id_list_problem(ids: Sequence[str], known: Sequence[str]) -> str | None:
    """What is wrong with a list of case ids that should name each of ``known`` at most once (None: nothing)."""
    known_set = set(known)  # linear in the cohort (found by hostile testing: a set and a count per id were quadratic,
    # 12 s of checks for 16 000 cases, made three times by one `monai-unc report`)
    unknown = [c for c in ids if c not in known_set]
    if unknown:
        return f"case {unknown[0]!r} is not in the evaluation's rows"
    twice = sorted(c for c, n in Counter(ids).items() if n > 1)
    if twice:
        return f"case {twice[0]!r} is listed twice"
    return None


def _check_summary_cases(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], source: str) -> None:
    """Check the case lists and counts of a ``summary.json`` against the rows of its ``state/rows.json``.

    The page ranks and marks the rows by these lists: ``n_cases`` must be the number of rows, ``triage.order`` the
    rows' ids ranked by their score as :func:`triage_order` ranks them, ``triage.referred`` the first
    ``triage.n_referred`` of that order, ``triage.dice_kept`` / ``dice_referred`` / ``tied`` those of
    :func:`budget_split`, ``score.undefined`` the rows without a defined score, ``dice.mean`` and
    ``triage.dice_all`` the rows' mean Dice, ``failures`` the rows below its Dice threshold, and
    ``risk_control.accepted`` / ``referred`` the rows split by its threshold.
    """
    def bad(name: str, want: str, value: Any) -> ValueError:
        return ValueError(f"{source}: {name!r} must be {want}, got {type(value).__name__} {value!r}"[:400])

    ids = [str(r["case"]) for r in sorted(rows, key=lambda r: str(r["case"]))]
    n = len(ids)
    if summary["n_cases"] != n:
        raise bad("n_cases", f"the number of cases in state/rows.json ({n})", summary["n_cases"])
    column = resolve_score_column(summary["score"]["column"], rows[0])
    if column not in rows[0]:
        raise bad("score.column", "a column of state/rows.json", summary["score"]["column"])
    by_id = {str(r["case"]): r for r in rows}
    for cid in ids:  # a score the page ranks and shows: a number, or null for an undefined one
        value = by_id[cid].get(column)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{source}: the score column {column!r} of case {cid!r} in state/rows.json must be a "
                             f"number or null, got {type(value).__name__} {value!r}"[:400])
    raw = column_values([by_id[c] for c in ids], column)
    scores = fill_undefined_scores(raw)
    dice = column_values([by_id[c] for c in ids], "dice")
    triage = summary["triage"]
    order = triage["order"]
    problem = _id_list_problem(order, ids) or (None if len(order) == n else
                                               f"it lists {len(order)} of the {n} cases")
    if problem:
        raise bad("triage.order", f"every case id of state/rows.json once ({problem})", order)
    expected = [ids[i] for i in triage_order(ids, raw)]
    if order != expected:
        k = next(i for i, (a, b) in enumerate(zip(order, expected)) if a != b)
        raise bad("triage.order", f"the cases from the highest {column} to the lowest (ties by case id): at rank "
                  f"{k + 1} case {expected[k]!r}, not {order[k]!r}", order)
    referred = triage["referred"]
    problem = _id_list_problem(referred, ids)
    if problem:
        raise bad("triage.referred", f"a list of the cases of state/rows.json ({problem})", referred)
    if triage["n_referred"] != len(referred):
        raise bad("triage.n_referred", f"the number of ids in triage.referred ({len(referred)})",
                  triage["n_referred"])
    if referred != order[:len(referred)]:
        raise bad("triage.referred", f"the first {len(referred)} cases of triage.order", referred)
    split = budget_split(ids, dice, scores, referred)
    for key, which in (("dice_kept", "not in"), ("dice_referred", "in")):
        if key in triage and not (triage[key] is None and split[key] is None or (
                triage[key] is not None and split[key] is not None and abs(triage[key] - split[key]) <= 1e-9)):
            raise bad(f"triage.{key}", f"the mean Dice in state/rows.json of the cases {which} triage.referred "
                      f"({split[key]!r})", triage[key])
    if "tied" in triage and triage["tied"] != split["tied"]:
        raise bad("triage.tied", f"the cases tied at the budget's cut ({split['tied']})", triage["tied"])
    undefined = [c for c, v in zip(ids, raw) if not np.isfinite(v)]
    if summary["score"].get("undefined") is not None and summary["score"]["undefined"] != undefined:
        raise bad("score.undefined", f"the cases of state/rows.json without a defined {column} ({undefined})",
                  summary["score"]["undefined"])
    mean = float(dice.mean())
    for name, value in (("dice.mean", summary["dice"].get("mean")), ("triage.dice_all", triage.get("dice_all"))):
        if value is not None and abs(value - mean) > 1e-9:
            raise bad(name, f"the mean Dice of the rows of state/rows.json ({mean!r})", value)
    failures = summary["failures"]
    failed = [c for c, f in zip(ids, dice_failed(dice, failures["dice_threshold"])) if f]
    expected_failures = {"n_failed": len(failed), "cases": failed,
                         "caught_by_budget": len(set(failed) & set(referred))}
    for key, want in expected_failures.items():
        if key in failures and failures[key] != want:
            raise bad(f"failures.{key}", f"that of the rows of state/rows.json with Dice below "
                      f"{failures['dice_threshold']:g} ({want!r})", failures[key])
    rc = summary.get("risk_control")
    if rc is None:
        return
    for key in ("accepted", "referred"):
        if key == "accepted" and key not in rc:
            continue
        problem = None if is_text_list(rc.get(key)) else "not a list of ids"
        problem = problem or _id_list_problem(rc[key], ids)
        if problem:
            raise bad(f"risk_control.{key}", f"a list of the cases of state/rows.json ({problem})", rc.get(key))
    thr = rc.get("threshold")
    if not isinstance(rc.get("feasible"), bool) or not (thr is None or is_finite_real(thr)):
        raise bad("risk_control", 'an object with a boolean "feasible" and a numeric or null "threshold"',
                  {k: rc.get(k) for k in ("feasible", "threshold")})
    accept = (accepted_by_threshold(raw, math.inf if thr is None else thr) if rc["feasible"] else
              np.zeros(n, dtype=bool))
    want = [c for c, a in zip(ids, accept) if not a]
    which = (f"the cases whose {column} is above the threshold or undefined" if rc["feasible"] else
             "every case (no threshold is certified)")
    if sorted(rc["referred"]) != want:
        if rc["feasible"] and thr is None and not rc["referred"] and undefined:
            raise ValueError(f"{source}: 'risk_control' was written by an earlier monai-unc that counted the "
                             f"{len(undefined)} case(s) without a defined {column} as accepted, while the referral "
                             "rule refers them: its coverage, observed risk and certificate are not those of the cases "
                             "the rule accepts; run monai-unc evaluate --target-risk again (undefined scores now count "
                             "as referred)")
        raise bad("risk_control.referred", f"{which} ({want})", rc["referred"])
    if "accepted" in rc and sorted(rc["accepted"]) != [c for c, a in zip(ids, accept) if a]:
        raise bad("risk_control.accepted", "the cases it does not refer", rc["accepted"])


def load_evaluation(folder: str | os.PathLike) -> tuple[CohortState, dict[str, Any]]:
    """The state and summary written by :func:`write_evaluation`.

    Args:
        folder: the evaluation folder.

    Returns:
        ``(state, summary)``: the :class:`CohortState` and the parsed ``summary.json``; a score column of an older
        version (``<m>_patch``) is named as the rows now name it (``<m>_patch_mean``, with a
        ``DeprecationWarning``), as :func:`~monai_unc.scores.upgrade_row` renames the rows; a summary written before
        ``triage.dice_kept`` and ``triage.tied`` existed gets them from the rows (:func:`budget_split`).

    Raises:
        ValueError: the last evaluation in ``folder`` has failed cases (``failures.json``), its ``state/rows.json``
            has a field of the wrong type (:func:`check_state_rows`; the line names the file, the case and the
            column), or its ``summary.json`` is not strict JSON, has a field of the wrong type or range, or case
            lists and counts that are not those of the rows (an edited file; the line names the file and the field;
            keys it does not know are accepted).
        FileNotFoundError: ``folder`` has no ``summary.json`` (or its state no ``rows.json``).
    """
    folder = Path(folder)
    if (folder / "failures.json").is_file():
        raise ValueError(f"the last evaluation in {folder} has failed cases (failures.json): fix them and run "
                         "monai-unc evaluate again")
    path = folder / "summary.json"
    if not path.is_file():
        raise FileNotFoundError(f"no summary.json in {folder}: run monai-unc evaluate --output {folder} first")
    state = CohortState.load(folder / STATE_DIR)
    summary = decode_untrusted_json(path.read_bytes(), str(path))
    _check_summary(summary, state.rows, str(path))
    _check_summary_state(summary, state, str(path))
    score = summary.get("score")
    if isinstance(score, dict) and state.rows and score.get("column") not in state.rows[0]:
        summary["score"] = {**score, "column": resolve_score_column(str(score.get("column")), state.rows[0])}
    triage = summary["triage"]
    if state.rows and not {"dice_kept", "tied"} <= triage.keys():  # written by an older version
        rows = state.sorted_rows()
        split = budget_split([str(r["case"]) for r in rows], column_values(rows, "dice"),
                             fill_undefined_scores(column_values(rows, summary["score"]["column"])),
                             triage["referred"])
        summary["triage"] = {**triage, "dice_kept": split["dice_kept"], "tied": split["tied"]}
    return state, summary


def remove_cohort_files(folder: str | os.PathLike) -> None:
    """Remove the cohort outputs of an evaluation folder, keeping the per-case resume state.

    The outputs are ``metrics.csv``, ``summary.json`` and the cohort state: after a run with failed cases no earlier
    run's numbers remain.

    Args:
        folder: the evaluation folder (missing files are skipped).
    """
    folder = Path(folder)
    for path in (folder / "metrics.csv", folder / "summary.json", folder / STATE_DIR / "rows.json",
                 folder / STATE_DIR / "histogram.npz", folder / STATE_DIR / "region_histograms.npz",
                 folder / STATE_DIR / "products.npz"):
        path.unlink(missing_ok=True)
