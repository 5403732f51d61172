"""Conformal masks as a cohort product: ``monai-unc evaluate --conformal`` (docs/conformal.md).

Inner and outer masks with a finite-sample guarantee: in expectation, conformal risk control (Angelopoulos, Bates,
Fisch, Lei, Schuster, "Conformal Risk Control", ICLR 2024); with ``delta``, the high-probability rule of Mossina and
Friedrich ("Controlling False Positives in Image Segmentation via Conformal Prediction", 2025). The formulas are in
:mod:`monai_unc.metrics.conformal`; fitting, the rule file and applying it to new predictions are in
:mod:`monai_unc.evaluation.conformal`. This module is the product itself (:mod:`monai_unc.product`):

==========================  ==========================================================================================
per case                    a :class:`~monai_unc.evaluation.conformal.ConformalState` (one histogram state per side)
fit                         the rule of every side on the calibration cases (optionally stratified by a label-free
                            case score), written to ``conformal_rule.json`` with the predictions' fingerprint
summary                     the ``conformal`` block of ``summary.json``: per side the target, the method and per class
                            or region ``lambda_hat`` and the achieved calibration loss
apply                       the masks of a new case; the command ``monai-unc conformal`` applies the rule to a folder
                            of new predictions (masks, ``conformal.csv``, ``conformal.json``), and ``monai-unc triage
                            --conformal-rule`` runs it beside the triage (the table's volumes, the figures' contours)
command line                ``--conformal SIDE:LOSS=TARGET`` (repeatable), ``--conformal-family``,
                            ``--conformal-delta``, ``--conformal-strata``, ``--conformal-strata-edges``,
                            ``--conformal-stratify-by``
report                      the "Conformal masks" section: per side the guarantee and a table per class or region;
                            the outer (white dashed) and inner (green dotted) contours in the case figures
==========================  ==========================================================================================

The module is light (standard library and :mod:`monai_unc.product`): the command line reads its options before
torch is imported; the computations are imported when they run.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..keys import EXPLICIT_OPTIONS, MAX_OPTION_INT, float_option, int_option, option_number
from ..product import CohortProduct, Overlay, ReportSection, ReportTable, format_cell, format_target, register_product

__all__ = ["ConformalMasks", "LOSSES", "FAMILIES", "RULE_FILE", "TABLE_FILE", "RECORD_FILE", "parse_specs",
           "min_cases"]

#: the loss of each side of a spec (``outer:fnr=0.1``, ``inner:fp=0.1``), in the order outer, inner
LOSSES = {"outer": "fnr", "inner": "fp"}
#: the mask families: a threshold on the probability, or a margin (mm) around the predicted mask
FAMILIES = ("threshold", "margin")
#: the rule file that ``evaluate --conformal`` writes in its output folder
RULE_FILE = "conformal_rule.json"
#: the per-case table and the record that ``monai-unc conformal`` writes in its output folder
TABLE_FILE, RECORD_FILE = "conformal.csv", "conformal.json"
#: the contour style of each side in the case figures: (colour, line style)
STYLES = {"outer": ("#ffffff", "dashed"), "inner": ("#00ff7f", "dotted")}
#: the columns of a ``conformal.csv`` row the triage page shows: (prefix, header, decimals)
APPLIED_COLUMNS = (("inner_ml_", "inner ml", 2), ("predicted_ml_", "predicted ml", 2), ("outer_ml_", "outer ml", 2),
                   ("band_p95_mm_", "band p95 mm", 1))


def parse_specs(specs: Mapping[str, float] | Iterable[str]) -> dict[str, float]:
    """The masks asked for, as ``{side: target}``.

    Args:
        specs: ``{"outer": 0.1, "inner": 0.1}`` or specs ``"outer:fnr=0.1"`` / ``"inner:fp=0.1"`` (the command
            line's ``--conformal``); each side at most once, each target in (0, 1).

    Returns:
        ``{side: target}`` with the sides in the order outer, inner.

    Raises:
        ValueError: a malformed spec, a side given twice, a target outside (0, 1), or no side.

    Example:
        >>> parse_specs(["inner:fp=0.05", "outer:fnr=0.1"])
        {'outer': 0.1, 'inner': 0.05}
    """
    try:
        return _parse_specs(specs)
    except ValueError as e:  # the command line names --conformal (its messages begin with "conformal: ")
        from .._utils import parameter_error  # here: the command line lists the products without importing torch

        raise parameter_error(e, "conformal") from None


def _parse_specs(specs: Mapping[str, float] | Iterable[str] | str) -> dict[str, float]:
    """:func:`parse_specs` without marking its errors."""
    if isinstance(specs, str):
        specs = [specs]
    got: dict[str, float] = {}
    if isinstance(specs, Mapping):
        items = [(str(k), v) for k, v in specs.items()]
    else:
        items = []
        for spec in specs:
            m = re.fullmatch(r"\s*(outer|inner)\s*:\s*(fnr|fp)\s*=\s*(\S+)\s*", str(spec))
            if m is None or LOSSES[m.group(1)] != m.group(2):
                raise ValueError(f"conformal: {spec!r} is not a spec: use outer:fnr=TARGET or inner:fp=TARGET")
            if m.group(1) in {k for k, _ in items}:
                raise ValueError(f"conformal: the side {m.group(1)!r} is given twice")
            items.append((m.group(1), m.group(3)))
    for side, value in items:
        if side not in LOSSES:
            raise ValueError(f"conformal: the side must be 'outer' or 'inner', got {side!r}")
        try:  # a text in plain decimal syntax (found by a probe: outer:fnr=0_1 read 1.0)
            target = float(option_number(value) if isinstance(value, str) else value)
        except (TypeError, ValueError):
            raise ValueError(f"conformal: the target of {side!r} must be a number in (0, 1), got {value!r}") from None
        if not 0.0 < target < 1.0:
            raise ValueError(f"conformal: the target of {side!r} must be in (0, 1), got {target:g}")
        got[side] = target
    if not got:
        raise ValueError("conformal must name at least one mask (outer:fnr=TARGET or inner:fp=TARGET) or be None")
    return {k: got[k] for k in LOSSES if k in got}


def min_cases(targets: Mapping[str, float], delta: float | None) -> int:
    """The fewest calibration cases (of each stratum) that rules with these targets need.

    Args:
        targets: ``{side: target}``.
        delta: the high-probability level, or None (expectation control).

    Returns:
        The largest :func:`~monai_unc.metrics.conformal.min_calibration_cases` over the sides.

    Raises:
        ValueError: naming ``conformal_delta`` when it needs more than ``2**53`` calibration cases.

    Example:
        >>> min_cases({"outer": 0.1}, None)
        9
    """
    from ..metrics.conformal import min_calibration_cases

    if delta is not None:
        try:
            return min_calibration_cases(float(delta), high_probability=True)
        except ValueError:  # found by hostile review: "alpha=1e-17 needs ..." named an option never given
            raise ValueError(f"conformal_delta={delta!r} needs more than 2**53 calibration cases") from None
    return max(min_calibration_cases(t) for t in targets.values())


def _edges(text: Any) -> list[float] | None:
    """``--conformal-strata-edges`` (``E1,E2,...``) as numbers."""
    if text is None:
        return None
    try:
        return [float(option_number(v.strip(" "))) for v in str(text).split(",")]  # 1_0 is no edge (read 10.0)
    except ValueError:
        raise ValueError(f"--conformal-strata-edges must be comma-separated numbers such as 0.2,0.4, got {text!r}"
                         ) from None


#: the integer options of the product, in plain decimal syntax and at most an int32; their range is the product's
#: check, whose message names the option
_INTEGER = int_option(-MAX_OPTION_INT, MAX_OPTION_INT, "an integer")


@register_product
class ConformalMasks(CohortProduct):
    """Inner and outer masks with a finite-sample guarantee, fitted by ``evaluate`` (module docstring).

    Args:
        targets: ``{side: target}`` or specs (:func:`parse_specs`): ``outer`` bounds the missed share of the true
            voxels (false-negative rate), ``inner`` the false-positive share of the mask.
        family: ``"threshold"`` (probability threshold) or ``"margin"`` (distance margin in mm).
        delta: without it, expectation control (conformal risk control at level ``target``); with it, the
            high-probability rule ``P(loss of a new case <= target) >= 1 - delta``.
        strata: stratify the rules into this many strata (at least 2) of a label-free case score
            (``stratify_by``) at the quantiles of the calibration cases' scores (3: terciles); each stratum gets its
            own ``lambda_hat``, and a new case goes to its stratum by the same score of its prediction.
        strata_edges: instead of ``strata``, fixed inner edges of the strata (strictly increasing).
        stratify_by: the case score of the strata, a column ``<measure>_<mean|fg_mean|patch_mean>`` (regions: also
            ``_<R>``); default the evaluation's triage score.

    Example:
        >>> product = ConformalMasks(["outer:fnr=0.1"], family="margin")
        >>> product.targets, product.options()["family"]
        ({'outer': 0.1}, 'margin')
    """

    name = "conformal"
    needs_whole_reference = True  # an ignore label leaves the reference incomplete (EvaluationConfig.ignore_label)
    title = "Conformal masks"
    description = ("With --conformal, fit inner / outer masks with a finite-sample guarantee on the calibration "
                   "cases (--calibration-cases, else every case) and write conformal_rule.json for 'monai-unc "
                   "conformal' (docs/conformal.md). Needs probabilities.")
    artifact_file = RULE_FILE
    command = "conformal"
    command_help = "apply a conformal_rule.json to new unlabelled cases: inner / outer masks"
    command_description = (
        "Read the predictions of new cases (no labels; with probabilities) and write, per case, "
        "<case>_outer.nii.gz / <case>_inner.nii.gz in the prediction's geometry (one channel per foreground class "
        "or region), conformal.csv (inner / predicted / outer volumes in ml, band width in mm) and conformal.json. "
        "Refuses predictions made otherwise than the rule's (fingerprint) unless --allow-mismatch. Resumable; "
        "runs under torchrun. See docs/conformal.md.")
    applied_table = TABLE_FILE
    artifact_format = "monai-unc conformal rule"
    artifact_needs_probabilities = True
    overlay_note = ("Beside the prediction: the conformal outer (white dashed) and inner (green dotted) masks, union "
                    "over the foreground classes or regions.")

    def __init__(self, targets: Mapping[str, float] | Iterable[str], family: str = "threshold",
                 delta: float | None = None, strata: int | None = None,
                 strata_edges: Sequence[float] | None = None, stratify_by: str | None = None) -> None:
        # here: the command line lists the products without importing torch
        from .._utils import is_real, parameter_error

        self.targets = parse_specs(targets)
        if family not in FAMILIES:
            raise parameter_error(ValueError(f"conformal_family must be one of {FAMILIES}, got {family!r}"),
                                  "conformal_family")
        self.family = str(family)
        # a numpy scalar is a number (found by hostile review: np.float32(0.1) was refused as "must be in (0, 1)")
        if delta is not None and not (is_real(delta) and 0.0 < float(delta) < 1.0):
            raise parameter_error(ValueError(f"conformal_delta must be a number in (0, 1), got {delta!r}"),
                                  "conformal_delta")
        self.delta = None if delta is None else float(delta)
        if strata is None and strata_edges is None and stratify_by is not None:
            raise parameter_error(
                ValueError("conformal_stratify_by needs conformal_strata or conformal_strata_edges"),
                "conformal_stratify_by")
        if strata is not None and strata_edges is not None:
            raise ValueError("give conformal_strata (quantile strata) or conformal_strata_edges (fixed edges), "
                             "not both")
        if strata is not None and (isinstance(strata, bool) or not hasattr(strata, "__index__") or int(strata) < 2):
            raise parameter_error(
                ValueError(f"conformal_strata must be an integer >= 2 (3: terciles), got {strata!r}"),
                "conformal_strata")
        self.strata = None if strata is None else int(strata)
        edges = None
        if strata_edges is not None:
            try:
                # numbers only, as conformal_delta: [True] was the edge 1.0 and ["0.5"] was parsed (found by hostile
                # review 55); the command line's --conformal-strata-edges gives numbers (_edges)
                if isinstance(strata_edges, (str, bytes)) or not all(is_real(v) for v in strata_edges):
                    raise TypeError
                edges = [float(v) for v in strata_edges]
            except (TypeError, ValueError):
                raise parameter_error(ValueError(f"conformal_strata_edges must be numbers, got {strata_edges!r}"),
                                      "conformal_strata_edges") from None
            if not edges or not all(math.isfinite(v) for v in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
                raise parameter_error(
                    ValueError(f"conformal_strata_edges must be one or more finite, strictly increasing values, "
                               f"got {list(strata_edges)!r}"),
                    "conformal_strata_edges")
        self.strata_edges = edges
        self.stratify_by = None if stratify_by is None else str(stratify_by)

    # -- command line ------------------------------------------------------------------------------------------
    @classmethod
    def add_arguments(cls, group: Any) -> None:
        """Add ``--conformal`` and its options to ``monai-unc evaluate``.

        Args:
            group: the product's argument group.

        Returns:
            None.
        """
        group.add_argument("--conformal", action="append", default=None, metavar="SIDE:LOSS=TARGET",
                           help="outer:fnr=0.1 (outer mask missing at most that share of the true voxels) or "
                                "inner:fp=0.1 (inner mask with at most that share of false positives); repeat for "
                                "both")
        group.add_argument("--conformal-family", default="threshold", choices=FAMILIES,
                           help="threshold (default): on the probability; margin: the predicted mask dilated / eroded "
                                "by mm")
        group.add_argument("--conformal-delta", type=float_option, default=None, metavar="D",
                           help="high probability: P(loss of a new case <= TARGET) >= 1 - D (default: in "
                                "expectation)")
        group.add_argument("--conformal-strata", type=_INTEGER, default=None, metavar="K",
                           help="stratify by a label-free case score (--conformal-stratify-by) into K strata at "
                                "the quantiles of the calibration cases' scores (3: terciles), each with its own "
                                "threshold or margin; 'monai-unc conformal' puts a new case in its stratum by the "
                                "same score")
        group.add_argument("--conformal-strata-edges", default=None, metavar="E1,E2,...",
                           help="instead of --conformal-strata: fixed inner edges of the strata (e.g. terciles of "
                                "the score on other cases; exact guarantee within each stratum)")
        group.add_argument("--conformal-stratify-by", default=None, metavar="SCORE",
                           help="the strata's case score: <measure>_<mean|fg_mean|patch_mean> (regions: also _<R>), "
                                "computed from the prediction alone (default: the triage score --score)")

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> ConformalMasks | None:
        """The product asked for by ``--conformal`` (None without it).

        Args:
            args: the parsed ``monai-unc evaluate`` options.

        Returns:
            The product, or None. Options of the strata, ``--conformal-delta`` or ``--conformal-family margin``
            without ``--conformal`` are refused (``ValueError``).

        Raises:
            ValueError: naming the option.
        """
        if not getattr(args, "conformal", None):
            if args.conformal_strata is not None or args.conformal_strata_edges is not None:
                raise ValueError("--conformal-strata / --conformal-strata-edges need conformal masks (--conformal)")
            # found by hostile review: these were ignored, and the run ended with no rule at the level asked for
            # (and --conformal-family given at its default, as the lesion options: given, not ignored)
            if (args.conformal_delta is not None or args.conformal_family != "threshold"
                    or "conformal_family" in getattr(args, EXPLICIT_OPTIONS, ())):
                raise ValueError("--conformal-delta / --conformal-family need conformal masks (--conformal)")
        if args.conformal_stratify_by is not None and args.conformal_strata is None and (
                args.conformal_strata_edges is None):
            raise ValueError("--conformal-stratify-by needs --conformal-strata or --conformal-strata-edges")
        if not getattr(args, "conformal", None):
            return None
        return cls(args.conformal, family=args.conformal_family, delta=args.conformal_delta,
                   strata=args.conformal_strata, strata_edges=_edges(args.conformal_strata_edges),
                   stratify_by=args.conformal_stratify_by)

    def options(self) -> dict[str, Any]:
        """The product's options (recorded in ``summary.json``).

        Returns:
            ``targets``, ``family``, ``delta``, ``strata``, ``strata_edges`` and ``stratify_by``.
        """
        return {"targets": dict(self.targets), "family": self.family, "delta": self.delta, "strata": self.strata,
                "strata_edges": self.strata_edges, "stratify_by": self.stratify_by}

    def case_options(self) -> dict[str, Any]:
        """The options a case's state depends on: the sides and the family (targets and strata are the fit's).

        Returns:
            ``{"sides": [...], "family": ...}``.
        """
        return {"sides": list(self.targets), "family": self.family}

    @property
    def num_strata(self) -> int:
        """The number of strata of the rules (1 without stratification)."""
        if self.strata is not None:
            return self.strata
        return 1 if self.strata_edges is None else len(self.strata_edges) + 1

    def min_cases_per_stratum(self) -> int:
        """The fewest calibration cases each stratum needs (:func:`min_cases`).

        Returns:
            The number of cases.
        """
        return min_cases(self.targets, self.delta)

    # -- checks ------------------------------------------------------------------------------------------------
    def check(self, case_ids: Sequence[str], config: Any) -> None:
        """Refuse too few calibration cases and a malformed strata score, before any work.

        Args:
            case_ids: the ids of the cohort's cases.
            config: the evaluation options.

        Returns:
            None; ``ValueError`` naming the option otherwise.
        """
        from ..evaluation.config import parse_score_column

        if self.stratify_by is not None:
            parse_score_column(self.stratify_by, config.region_names if config.regions is not None else None,
                               "conformal_stratify_by")
        n_cal = len(config.calibration_ids(list(case_ids)))
        each = self.min_cases_per_stratum()
        if n_cal < each * self.num_strata:
            k = self.num_strata
            more = "" if k == 1 else f" in {k} strata: each stratum needs at least {each}, so"
            from .._utils import parameter_error  # here: the command line lists the products without torch

            # the targets as the option writes them, the delta named (found by a probe: it said "too few for
            # {'outer': 0.1} (delta None)"); the command line names --conformal and --conformal-delta
            targets = " and ".join(f"{side}:{LOSSES[side]}={t:g}" for side, t in self.targets.items())
            level = "in expectation" if self.delta is None else f"with conformal_delta {self.delta:g}"
            raise parameter_error(ValueError(f"conformal: {n_cal} calibration case(s) are too few for {targets} "
                                             f"({level}){more}: at least {each * k} are needed"),
                                  "conformal", others=("conformal_delta",))

    def check_inputs(self, cases: Sequence[Any], inputs: Mapping[str, Any], config: Any) -> None:
        """Every case needs probabilities of the evaluation's activation and a map of the strata score's measure.

        The probabilities are checked on the first case's file; the map of ``stratify_by`` on every case's files.

        Args:
            cases: the matched cases (:class:`~monai_unc.io.CaseFiles`).
            inputs: ``predictions``, ``layout``, ``uncertainty`` and ``probs_suffix`` of the evaluation.
            config: the evaluation options.

        Returns:
            None; :class:`~monai_unc.io.CaseError` naming the file and how to produce it, or ``ValueError`` naming
            ``--conformal-stratify-by`` when the cases have no map of its measure
            (:func:`~monai_unc.evaluation.check_measure_options`).
        """
        from ..evaluation.conformal import check_conformal_probabilities
        from ..evaluation.rows import check_measure_options

        check_conformal_probabilities(cases, "sigmoid" if config.regions is not None else "softmax",
                                      inputs["predictions"], inputs["layout"], probs_suffix=inputs.get("probs_suffix"))
        # the strata's score of a measure the cases have no map of: refused here, not after every case was evaluated
        # (found by hostile testing: --conformal-stratify-by mutual_information_mean failed at the fit)
        check_measure_options(cases, config, scores={"--conformal-stratify-by": self.stratify_by})

    # -- per case ----------------------------------------------------------------------------------------------
    def case_state(self, case: Any, tasks: Sequence[Any], config: Any) -> Any:
        """The case's state of every side (:func:`monai_unc.evaluation.conformal.conformal_state`).

        Args:
            case: the loaded case (it must have probabilities).
            tasks: its tasks.
            config: the evaluation options.

        Returns:
            A :class:`~monai_unc.evaluation.conformal.ConformalState`.
        """
        from ..evaluation.conformal import conformal_state

        return conformal_state(case, tasks, self.targets, self.family, config.class_names)

    # -- cohort ------------------------------------------------------------------------------------------------
    def fit(self, states: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], config: Any) -> Any:
        """The rule of every side on the calibration cases (:func:`monai_unc.evaluation.conformal.fit_product`).

        Args:
            states: ``{case id: state}`` of the calibration cases.
            rows: their ``metrics.csv`` rows.
            config: the evaluation options.

        Returns:
            ``{"rules": ..., "strata": ..., "summary": ...}`` (JSON data).
        """
        from ..evaluation.conformal import fit_product

        return fit_product(self, states, rows, config)

    def summarize(self, states: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], artifact: Any,
                  config: Any) -> Any:
        """The ``conformal`` block of ``summary.json``, made by :meth:`fit`.

        Args:
            states: unused (the block was made with the rules).
            rows: unused.
            artifact: what :meth:`fit` returned.
            config: the evaluation options (their ``class_names``, kept in the block for the report).

        Returns:
            The block (per side the target, the method and per class or region ``lambda_hat`` and the achieved
            calibration loss; with strata their edges and counts; the class names when the evaluation has them).
        """
        if artifact is None:
            return None
        block = artifact["summary"]
        names = getattr(config, "class_names", None)
        return {**block, "class_names": list(names)} if names else block  # the report names the classes

    def write_artifact(self, path: str | os.PathLike, artifact: Any, calibration_cases: Sequence[str],
                       inputs: Mapping[str, Any], config: Any) -> Path:
        """Write ``conformal_rule.json``: the rules and the fingerprint of the calibration predictions.

        Args:
            path: the file.
            artifact: what :meth:`fit` returned.
            calibration_cases: the ids the rules were fitted on.
            inputs: ``predictions``, ``layout`` and ``uncertainty`` of the evaluation (the fingerprint).
            config: the evaluation options (the region spec).

        Returns:
            The path written (:class:`~monai_unc.evaluation.conformal.ConformalRuleFile`).
        """
        from ..evaluation.conformal import write_rule_file

        return write_rule_file(path, self, artifact, calibration_cases, inputs, config)

    def write_case_files(self, case: Any, artifact_path: Path, folder: Path) -> list[Path]:
        """The masks each rule gives an evaluated case, for the report's figures (``<case>_<side>.nii.gz``).

        Args:
            case: the loaded case.
            artifact_path: ``conformal_rule.json``.
            folder: ``<output>/products/conformal/``.

        Returns:
            The paths written (:func:`~monai_unc.evaluation.conformal.calibration_case_masks`).
        """
        from ..evaluation.conformal import calibration_case_masks

        return calibration_case_masks(case, artifact_path, folder)

    def apply(self, case: Any, artifact: Any, *, predictions: str | os.PathLike | None = None,
              fingerprint: Mapping[str, Any] | None = None, layout: str = "monai-unc",
              uncertainty: str | os.PathLike | None = None, allow_mismatch: bool = False, trust: Any = None) -> Any:
        """The nested masks of a new case, as ``monai-unc conformal`` writes them.

        As ``monai-unc conformal`` does for a folder, the case's predictions are first compared with the rule's
        fingerprint and regions (:func:`~monai_unc.io.provenance.check_prediction_fingerprint`): masks of predictions
        made otherwise than the rule's calibration predictions (another model, samples, measures) are refused, since
        the rule's guarantee does not hold for them (in earlier versions this per-case path checked nothing, where
        :meth:`RiskControl.apply <monai_unc.products.RiskControl.apply>` checks the fingerprint per case). The
        predictions are those of ``predictions`` (the folder the case's files lie in; default, for a
        :class:`~monai_unc.io.CaseFiles`, the folder of its segmentation) or, for a case loaded elsewhere, those whose
        :func:`~monai_unc.io.provenance.prediction_fingerprint` is ``fingerprint``.

        Args:
            case: the case: its files (:class:`~monai_unc.io.CaseFiles` of a prediction folder, with probabilities;
                loaded here) or the loaded case (:func:`~monai_unc.io.load_case`, with probabilities).
            artifact: a :class:`~monai_unc.evaluation.conformal.ConformalRuleFile` or the path of one.
            predictions: the folder of the case's predictions, whose records are compared with the rule's.
            fingerprint: instead of ``predictions``, the predictions' fingerprint
                (:func:`~monai_unc.io.provenance.prediction_fingerprint`).
            layout: the layout of ``predictions`` (``"monai-unc"`` or ``"nnunet"``).
            uncertainty: the folder of the maps when not where the layout puts them.
            allow_mismatch: make the masks of predictions whose fingerprint differs, or of a loaded case given
                neither ``predictions`` nor ``fingerprint``, with a ``UserWarning`` naming the case and saying that
                the guarantee does not cover it (``conformal --allow-mismatch``), instead of raising.
            trust: the signature a rule file given by its path must carry
                (:meth:`~monai_unc.evaluation.conformal.ConformalRuleFile.load`), or None (not checked).

        Returns:
            ``({side: bool (T, *spatial)}, predicted, names)``
            (:func:`~monai_unc.evaluation.conformal.conformal_masks`).

        Raises:
            FingerprintMismatch: the predictions were not made like the rule's calibration predictions (without
                ``allow_mismatch``; a ``ValueError`` naming the fields).
            ValueError: naming ``predictions``: a loaded case given neither ``predictions`` nor ``fingerprint``
                (without ``allow_mismatch``), or both given.
            TypeError: ``allow_mismatch`` is not a bool, or ``fingerprint`` is not a mapping.

        Example:
            >>> import numpy as np
            >>> from monai_unc.evaluation.conformal import ConformalRuleFile
            >>> from monai_unc.io import LoadedCase
            >>> from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule
            >>> probs = np.stack([np.full((4, 4, 4), 0.3), np.full((4, 4, 4), 0.7)]).astype(np.float32)
            >>> label = np.ones((4, 4, 4), int)
            >>> state = conformal_case_state(probs, label, activation="softmax", side="outer", grid=8)
            >>> fp = {"producer": "monai-unc infer", "num_samples": 8}
            >>> doc = ConformalRuleFile({"outer": fit_conformal_rule([state] * 9, 0.1)}, {"outer": 0.1}, None, fp,
            ...                         [f"c{i}" for i in range(9)])
            >>> case = LoadedCase("a", label, label, probs, {}, np.eye(4), (1.0, 1.0, 1.0))
            >>> masks, _, names = ConformalMasks({"outer": 0.1}).apply(case, doc, fingerprint=fp)
            >>> names, masks["outer"].shape
            (['1'], (1, 4, 4, 4))
        """
        import warnings

        from ..evaluation.conformal import ConformalRuleFile, conformal_masks
        from ..evaluation.triage.rule import not_as_certified
        from ..evaluation.triage.runner import mismatch_fields
        from ..io import CaseFiles, load_case
        from ..io.provenance import FingerprintMismatch, check_prediction_fingerprint, compare_fingerprints, load_rule

        if not isinstance(allow_mismatch, bool):  # "no" allowed a mismatch in triage (hostile testing)
            raise TypeError(f"allow_mismatch must be True or False, got {allow_mismatch!r:.80}")
        if fingerprint is not None and not isinstance(fingerprint, Mapping):
            raise TypeError(f"fingerprint must be a prediction fingerprint (a mapping), got {fingerprint!r:.80}")
        if predictions is not None and fingerprint is not None:
            raise ValueError("predictions: give the case's prediction folder or its fingerprint, not both")
        doc = load_rule(artifact, ConformalRuleFile, trust)
        files = case if isinstance(case, CaseFiles) else None
        if files is not None and predictions is None and fingerprint is None:
            seg = files.seg if files.seg is not None else files.label  # a prediction case's segmentation
            predictions = Path(seg).parent
        case_id = str(getattr(case, "case_id", "?"))
        mismatch: list[str] | None
        if predictions is not None:
            check = check_prediction_fingerprint(doc.fingerprint, doc.regions, predictions, layout, [case_id],
                                                 uncertainty, allow_mismatch)
            mismatch = mismatch_fields(check)
        elif fingerprint is not None:
            status, diffs = compare_fingerprints(doc.fingerprint, fingerprint)
            if status == "mismatch" and not allow_mismatch:
                raise FingerprintMismatch(diffs)
            mismatch = [str(k) for k, _, _ in diffs] if status == "mismatch" else None
        elif not allow_mismatch:
            raise ValueError(f"predictions: case {case_id!r} is a loaded case whose predictions are not named: give "
                             "predictions= (the folder of its prediction files) or fingerprint= (their "
                             "prediction_fingerprint), so that they are compared with the rule's fingerprint, or "
                             "allow_mismatch=True to make its masks unchecked")
        else:
            mismatch = ["(not checked: neither predictions nor fingerprint given)"]
        if mismatch is not None:
            warnings.warn(f"case {case_id!r}: no guarantee for this case: {not_as_certified(mismatch)}",
                          UserWarning, stacklevel=2)
        if files is not None:
            case = load_case(files, len(doc.first.names), multilabel=doc.first.activation == "sigmoid")
        return conformal_masks(doc, case, nest=True)

    @classmethod
    def artifact_fingerprint(cls, path: Path, trust: Any = None) -> tuple[str, dict[str, Any]]:
        """The prediction fingerprint ``conformal_rule.json`` recorded, read with its checks.

        :meth:`~monai_unc.evaluation.conformal.ConformalRuleFile.load`.

        Args:
            path: the rule file.
            trust: the signature checked as ``conformal`` checks it (a :class:`~monai_unc.io.signing.Trust`), or None.

        Returns:
            ``("conformal rule <path>", fingerprint)``.
        """
        from ..evaluation.conformal import ConformalRuleFile

        return f"conformal rule {path}", dict(ConformalRuleFile.load(path, trust).fingerprint)

    # -- the command: the rule applied to new cases -----------------------------------------------------------
    @classmethod
    def read_command_artifact(cls, artifact: Any, trust: Any = None) -> Any:
        """``conformal_rule.json`` read and verified once.

        :meth:`~monai_unc.evaluation.conformal.ConformalRuleFile.load`, kept in a
        :class:`~monai_unc.io.provenance.RuleRead`.

        Args:
            artifact: the rule file's path, or the loaded rule file (or a read of it), returned unchanged.
            trust: the signatures the command accepts, or None (not checked).

        Returns:
            A :class:`~monai_unc.io.provenance.RuleRead` of a path (a refusal of the file is raised by the check that
            refuses it), else ``artifact``.

        Example:
            >>> read = ConformalMasks.read_command_artifact("no/such/conformal_rule.json")
            >>> type(read).__name__, type(read.error).__name__
            ('RuleRead', 'FileNotFoundError')
        """
        from ..evaluation.conformal import ConformalRuleFile
        from ..io.provenance import RuleRead

        if isinstance(artifact, (str, os.PathLike)):
            return RuleRead(artifact, ConformalRuleFile.load, trust)
        return artifact

    @classmethod
    def check_apply(cls, predictions: str | os.PathLike, artifact: Any, output: str | os.PathLike,
                    **options: Any) -> None:
        """The checks of ``monai-unc conformal`` before any work, writing nothing.

        :func:`~monai_unc.evaluation.conformal.check_conformal_inputs`.

        Args:
            predictions: the new cases' predictions.
            artifact: ``conformal_rule.json`` (its path, the loaded rule file or its :meth:`read_command_artifact`).
            output: the masks' folder.
            **options: ``images``, ``layout``, ``uncertainty``, ``allow_mismatch``, ``trust``.

        Returns:
            None; a ``ValueError`` naming the file otherwise.
        """
        from ..evaluation.conformal import check_conformal_inputs

        keep = ("images", "layout", "uncertainty", "allow_mismatch", "trust")
        check_conformal_inputs(predictions, artifact, output, **{k: v for k, v in options.items() if k in keep})

    @classmethod
    def apply_cases(cls, predictions: str | os.PathLike, artifact: Any, output: str | os.PathLike, *,
                    dist: Any = None, **options: Any) -> Any:
        """``monai-unc conformal``: the masks of every new case (:func:`~monai_unc.evaluation.conformal.run_conformal`).

        Args:
            predictions: the new cases' predictions (with probabilities).
            artifact: ``conformal_rule.json`` (its path, the loaded rule file or its :meth:`read_command_artifact`).
            output: the folder of the masks, ``conformal.csv`` and ``conformal.json``.
            dist: the rank context, or None.
            **options: as :func:`~monai_unc.evaluation.conformal.run_conformal`.

        Returns:
            The :class:`~monai_unc.evaluation.conformal.ConformalResult`.
        """
        from ..evaluation.conformal import run_conformal

        return run_conformal(predictions, artifact, output, dist=dist, **options)

    @classmethod
    def command_lines(cls, result: Any) -> list[str]:
        """What ``monai-unc conformal`` prints: the guarantees, the rule's signature, a mismatch, the files.

        Args:
            result: the run's :class:`~monai_unc.evaluation.conformal.ConformalResult`.

        Returns:
            The lines.

        Example:
            >>> from types import SimpleNamespace
            >>> res = SimpleNamespace(summary={"n_cases": 2, "guarantee": {"outer": "E[FNR] <= 0.1"},
            ...                                "fingerprint": {"status": "ok"}}, paths={"csv": "c", "json": "j"})
            >>> ConformalMasks.command_lines(res)
            ['2 case(s); outer: E[FNR] <= 0.1', 'wrote c and j']
        """
        s = result.summary
        lines = [f"{s['n_cases']} case(s); " + "; ".join(f"{k}: {v}" for k, v in s["guarantee"].items())]
        sig = s.get("signature")
        if sig:
            lines.append(f"WARNING: rule {sig}: who certified it, and that it is unchanged since, were not checked"
                         if sig.startswith("UNSIGNED") else f"rule {sig}")
        if s["fingerprint"]["status"] == "mismatch":
            lines.append("WARNING: fingerprint mismatch allowed (--allow-mismatch): the guarantee does not cover "
                         "these cases")
        return [*lines, f"wrote {result.paths['csv']} and {result.paths['json']}"]

    @classmethod
    def applied_lines(cls, folder: Path) -> list[str]:
        """What ``monai-unc triage --conformal-rule`` prints about the masks it made.

        Args:
            folder: ``<triage output>/conformal``.

        Returns:
            One line.
        """
        return [f"wrote the conformal masks, {TABLE_FILE} and {RECORD_FILE} to {folder}"]

    @classmethod
    def applied_rows(cls, folder: Path) -> dict[str, dict[str, Any]]:
        """Each new case's volumes and band widths, as ``conformal.json`` records them.

        Args:
            folder: the output folder of ``monai-unc conformal``.

        Returns:
            ``{case: row}``.

        Raises:
            FileNotFoundError: the folder has no ``conformal.json``.
        """
        return {str(r["case"]): r for r in _record(folder)["cases"]}

    @classmethod
    def applied_columns(cls, rows: Sequence[Mapping[str, Any]],
                        class_names: Sequence[str] | None) -> list[tuple[str, str, int]]:
        """The volumes and band width of each foreground class or region, for the triage table.

        One set per class or region of the rows of ``conformal.csv`` (the suffix of ``predicted_ml_<name>``); a
        class index is shown with its class name.

        Args:
            rows: the rows of ``conformal.csv``.
            class_names: the referral rule's class names, or None.

        Returns:
            ``(column, header, decimals)``.

        Example:
            >>> ConformalMasks.applied_columns([{"case": "a", "predicted_ml_1": 2.0, "outer_ml_1": 3.0}], None)
            [('predicted_ml_1', 'predicted ml', 2), ('outer_ml_1', 'outer ml', 2)]
        """
        names: list[str] = []
        for r in rows:
            names += [k.removeprefix("predicted_ml_") for k in r if k.startswith("predicted_ml_")
                      and k.removeprefix("predicted_ml_") not in names]
        out = []
        for name in names:
            shown = name
            if name.isdigit() and class_names and int(name) < len(class_names):
                shown = f"{name} ({class_names[int(name)]})"
            for prefix, head, digits in APPLIED_COLUMNS:
                if any(prefix + name in r for r in rows):
                    out.append((prefix + name, head if len(names) == 1 else f"{head} {shown}", digits))
        return out

    @classmethod
    def applied_section(cls, folder: Path) -> ReportSection | None:
        """The triage page's note on the masks of the new cases: each side's guarantee, a fingerprint mismatch.

        Args:
            folder: the output folder of ``monai-unc conformal`` (``conformal.json``).

        Returns:
            The section (id ``conformal``; a mismatch banner ``conformal-mismatch``).

        Raises:
            FileNotFoundError: the folder has no ``conformal.json``.
        """
        masks = _record(folder)

        def lambdas(lam: Any) -> str:  # {name: value}, or one such mapping per stratum of a stratified rule
            if isinstance(lam, Mapping):
                return ", ".join(f"{k}: {v:g}" if isinstance(v, (int, float)) else f"{k}: n/a" for k, v in lam.items())
            return "; ".join(f"stratum {s}: {lambdas(one)}" for s, one in enumerate(lam or []))

        items = [f"{side} (lambda_hat {lambdas(lam)}): {(masks.get('guarantee') or {}).get(side, '')}"
                 for side, lam in (masks.get("lambda_hat") or {}).items()]
        text = (f"The conformal rule ({masks.get('family')} family) applied to the new cases as monai-unc conformal "
                "applies it: the table gives per foreground class or region the inner, predicted and outer volumes "
                "(ml) and the band width (95th percentile of the distance in mm from the outer mask's boundary to the "
                "inner mask); the case figures draw the outer and inner contours of the mask files. "
                f"Masks and table: {Path(folder).resolve()}.")
        banners = []
        if (masks.get("fingerprint") or {}).get("status") == "mismatch":
            banners.append(("mismatch", "Conformal rule: fingerprint mismatch (--allow-mismatch):",
                            "these predictions were not made like the rule's calibration predictions, so its "
                            "guarantee does not cover them."))
        return ReportSection("Conformal masks", [text], items=items, banners=banners, anchor="conformal")

    @classmethod
    def case_overlays(cls, folder: Path, case_id: str) -> list[Overlay]:
        """The outer and inner contours of a case: its mask files, union over the foreground classes or regions.

        The files are ``<folder>/<case>_<side>.nii.gz``: in an evaluation's ``products/conformal/`` each rule's own
        masks of a calibration case, in the output of ``monai-unc conformal`` the nested masks of a new case.

        Args:
            folder: the folder of the mask files.
            case_id: the case.

        Returns:
            One :class:`~monai_unc.product.Overlay` per side with a file (outer: white dashed, inner: green dotted).

        Example:
            >>> import tempfile
            >>> import numpy as np
            >>> from monai_unc.io import save_nifti
            >>> with tempfile.TemporaryDirectory() as d:
            ...     _ = save_nifti(np.ones((2, 2, 2), np.uint8), np.eye(4), Path(d) / "a_outer.nii.gz")
            ...     [(o.label, bool(o.mask.all())) for o in ConformalMasks.case_overlays(Path(d), "a")]
            [('outer mask (conformal)', True)]
        """
        import numpy as np

        from ..evaluation.conformal import mask_file
        from ..io import read_volume

        out = []
        for side, (color, style) in STYLES.items():
            path = mask_file(folder, case_id, side)
            if path.is_file():
                data, _ = read_volume(path)
                out.append(Overlay(f"{side} mask (conformal)", np.asarray(data).astype(bool).any(axis=0), color, style))
        return out

    # -- presentation ------------------------------------------------------------------------------------------
    @classmethod
    def summary_lines(cls, block: Mapping[str, Any]) -> list[str]:
        """The strata and, per side, the achieved calibration loss per foreground class or region.

        A softmax rule's background (its first task, class 0) is left out, and a class without a name reads
        ``class <index>``. A block written before it named its ``activation`` lists every task as it is.

        Args:
            block: the ``conformal`` block of ``summary.json``.

        Returns:
            Lines of text.

        Example:
            >>> t = {"calibration_loss": 0.08}
            >>> side = {"loss": "fnr", "target": 0.1, "method": "expectation", "per_task": {"0": t, "1": t, "2": t}}
            >>> ConformalMasks.summary_lines({"activation": "softmax", "sides": {"outer": side}})
            ['conformal outer (fnr target 0.1, expectation): calibration class 1 0.0800, class 2 0.0800']
        """
        lines = []
        softmax = block.get("activation") == "softmax"
        strata = block.get("strata")
        if strata:
            lines.append(f"conformal strata of {strata['score']}: edges "
                         f"{', '.join(f'{e:.4g}' for e in strata['edges'])}; calibration cases per stratum "
                         f"{strata['counts']}")
        for side, b in (block.get("sides") or {}).items():
            tasks = list(b["per_task"].items())
            if softmax:
                tasks = [(f"class {n}" if str(n).isdigit() else n, t) for n, t in tasks[1:]]
            # each loss is judged against the target: never written equal to it (format_cell)
            achieved = ", ".join(f"{n} {_fmt(t['calibration_loss'], b['target'])}" for n, t in tasks)
            # the target of the guarantee, never written below it (found by hostile review 60: "%g" wrote 0.1234564
            # as 0.123456, a stronger guarantee than the rule's)
            lines.append(f"conformal {side} ({b['loss']} target {format_target(b['target'])}, {b['method']}): "
                         f"calibration {achieved}")
        return lines

    @classmethod
    def artifact_lines(cls, path: Path) -> list[str]:
        """What ``evaluate`` prints about the rule file it wrote.

        Args:
            path: ``conformal_rule.json``.

        Returns:
            One line, with the command that applies the rule.
        """
        return [f"wrote {path} (apply it: monai-unc conformal --rule {path} ...)"]

    @classmethod
    def report_section(cls, block: Mapping[str, Any]) -> ReportSection | None:
        """The "Conformal masks" section of ``report.html``: per side the guarantee and a table.

        Args:
            block: the ``conformal`` block of ``summary.json``: ``family``, ``n_calibration``, optionally
                ``class_names``, and per side (``sides``) the loss, target, method, ``alpha``, ``guarantee`` and per
                class or region ``lambda_hat``, ``calibration_loss``, ``calibration_above_tol`` and, for a margin
                rule past its grid, ``trivial_mask`` (``"every voxel"`` or ``"no voxel"``: shown beside ``lambda_hat``).

        Returns:
            The section (id ``conformal``, tables ``conformal-<side>``): per class or region the target, the achieved
            calibration loss, for the high-probability rule the share of calibration cases above ``tol`` against
            ``alpha``, and ``lambda_hat`` with its unit; the exact numbers are the rows' ``data-`` attributes.

        Example:
            >>> t = {"lambda_hat": 0.25, "calibration_loss": 0.08}
            >>> side = {"loss": "fnr", "target": 0.1, "method": "expectation", "guarantee": "E[FNR] <= 0.1",
            ...         "per_task": {"1": t}}
            >>> section = ConformalMasks.report_section({"family": "threshold", "n_calibration": 20,
            ...                                          "class_names": ["bg", "liver"], "sides": {"outer": side}})
            >>> section.tables[0].rows[0]
            ['1 (liver)', '0.1000', '0.0800', '0.250000']
        """
        family = str(block.get("family", "threshold"))
        unit = _UNITS.get(family, family)
        names = block.get("class_names")
        tables = []
        for side, b in (block.get("sides") or {}).items():
            loss = str(b.get("loss", ""))
            high = b.get("method") == "high_probability"
            head = ["class / region", "target", f"calibration {loss} (mean)"]
            if high:
                head.append(f"calibration cases above tol (alpha {format_cell(b.get('alpha'), 4)})")
            head.append(f"lambda_hat ({unit})")
            rows, data = [], []
            for name, t in (b.get("per_task") or {}).items():
                shown = str(name)
                if names and shown.isdigit() and int(shown) < len(names):
                    shown = f"{shown} ({names[int(shown)]})"
                cells = [shown, _target_text(b.get("target")),
                         format_cell(t.get("calibration_loss"), 4, b.get("target"))]
                if high:
                    alpha = format_cell(b.get("alpha"), 4)
                    above = format_cell(t.get("calibration_above_tol"), 4, b.get("alpha"))
                    cells.append(f"{above} vs {alpha}")
                lam = format_cell(t.get("lambda_hat"), 6)
                trivial = t.get("trivial_mask")
                # a margin rule past its grid: its mask is every voxel / none, not the prediction grown or shrunk
                cells.append(f"{lam} (trivial mask: {trivial[:20]})" if isinstance(trivial, str) and trivial else lam)
                rows.append(cells)
                data.append({"task": str(name), "lambda_hat": repr(t.get("lambda_hat")),
                             "calibration_loss": repr(t.get("calibration_loss"))})
            tables.append(ReportTable(
                head, rows, title=f"{side} mask: {_LOSS_WORDS.get(loss, loss)}", key=str(side), row_data=data,
                note=f"Guarantee ({b.get('method')}): {b.get('guarantee', '')}. Mask: "
                     f"{_MASK_WORDS.get((family, str(side)), '?')}."))
        intro = (f"Inner and outer masks with a finite-sample guarantee on the voxels they add or miss "
                 f"(docs/conformal.md), fitted on {block.get('n_calibration')} calibration case(s), family {family} "
                 f"(lambda_hat is a {unit}). The guarantees are marginal: over the calibration draw and a new case "
                 "exchangeable with them, not for one given case.")
        return ReportSection("Conformal masks", [intro], tables=tables, anchor="conformal")


#: the report's words for the losses, the units of lambda_hat and the masks of each family and side
_LOSS_WORDS = {"fnr": "FNR (missed share of the structure)", "fp": "false-positive share of the mask"}
_UNITS = {"threshold": "probability threshold", "margin": "mm margin"}
_MASK_WORDS = {("threshold", "outer"): "p >= 1 - lambda_hat", ("threshold", "inner"): "p > lambda_hat",
               ("margin", "outer"): "the predicted mask dilated by lambda_hat mm",
               ("margin", "inner"): "the predicted mask eroded by lambda_hat mm"}


def _record(folder: Path) -> dict[str, Any]:
    """``conformal.json`` of an output folder of ``monai-unc conformal``."""
    import json

    path = Path(folder) / RECORD_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {RECORD_FILE} in {folder}: run monai-unc conformal --output {folder} first")
    return json.loads(path.read_text())


def _target_text(target: Any) -> str:
    """A side's target in the report's table: 4 decimals where they write it exactly, else never below it.

    In earlier versions 4 decimals wrote a target of 0.05004 as ``0.0500``, a stronger guarantee than the
    rule's (:func:`~monai_unc.product.format_target`).
    """
    text = format_cell(target, 4)
    if isinstance(target, (int, float)) and not isinstance(target, bool) and math.isfinite(target) \
            and float(text) != float(target):
        return format_target(target)
    return text


def _fmt(v: Any, threshold: float | None = None) -> str:
    return format_cell(None if v is None else float(v), 4, threshold, missing="n/a")
