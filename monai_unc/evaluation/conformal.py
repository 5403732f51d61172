"""Conformal masks on the command line (docs/conformal.md): fitting the rules inside ``evaluate`` and applying them to
new predictions (``monai-unc conformal``).

- :func:`fit_conformal_rules`: the rule of every requested side (``EvaluationConfig.conformal``) from the calibration
  cases' :class:`~monai_unc.metrics.conformal.ConformalCaseState` s, and the ``conformal`` block of ``summary.json``
  (achieved calibration loss per class or region, with the target).
- :class:`ConformalRuleFile`: ``conformal_rule.json``: the rules, the predictions' fingerprint
  (:func:`~monai_unc.evaluation.triage.prediction_fingerprint`, as ``referral_rule.json`` has), ``format_version``
  and a sha256 content digest (:func:`~monai_unc.evaluation.triage.rule_digest`), both checked when read. The rules
  cannot be refitted without the case states, so reading checks the digest and the structure.
- :func:`run_conformal`: the whole of ``monai-unc conformal`` on the cohort engine: per case the masks
  ``<case>_outer.nii.gz`` / ``<case>_inner.nii.gz`` in the prediction's geometry (softmax: one channel per
  foreground class, 3D when there is one; regions: 4D, one channel per region) and a row of ``conformal.csv``.

The band width of ``conformal.csv`` (``band_p95_mm_<name>``) is the 95th percentile, over the boundary voxels of
the outer mask (mask voxels with a 6-neighbour outside it), of the distance in mm to the nearest inner-mask voxel;
the predicted mask stands in for a side the rule does not have. It is NaN when either mask is empty.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import ndimage

from .. import __version__
from ..distributed import CaseCache, CohortRun, get_dist_context, run_cases
from ..io import (
    CaseError,
    CaseFiles,
    atomic_write_json,
    check_inputs_not_written,
    check_output_folder,
    clean_partial_files,
    json_safe,
    load_case,
    save_nifti,
    save_region_maps,
    write_csv,
)
from ..metrics.boundary import distance_to_mask
from ..metrics.conformal import ConformalCaseState, ConformalRule, fit_conformal_rule
from .config import CONFORMAL_LOSSES, STATE_DIR, EvaluationConfig, region_suffix, slug
from .region_case import predicted_regions
from .resume import CASES_DIR, file_signature
from .triage.fingerprint import check_prediction_fingerprint, prediction_fingerprint
from .triage.rule import rule_digest
from .triage.runner import list_prediction_cases

__all__ = ["CONFORMAL_RULE_FILE", "CONFORMAL_RULE_FORMAT", "CONFORMAL_WRITES", "ConformalRuleFile",
           "fit_conformal_rules", "conformal_masks", "conformal_case", "check_conformal_inputs", "run_conformal"]

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
# fitting (inside evaluate)
# ----------------------------------------------------------------------------------------------------------------
def fit_conformal_rules(
    states: Mapping[str, Mapping[str, ConformalCaseState]], config: EvaluationConfig
) -> tuple[dict[str, ConformalRule], dict[str, Any]]:
    """Fit the rule of every side of ``config.conformal`` on the calibration cases.

    Args:
        states: ``{case: {side: state}}`` of every evaluated case.
        config: the evaluation options: ``conformal`` (targets), ``conformal_delta`` (high probability when set),
            ``calibration_cases`` (default every case).

    Returns:
        ``({side: rule}, block)``: the rules and the ``conformal`` block of ``summary.json`` (per side the target,
        the method and per class or region ``lambda_hat``, the achieved mean calibration loss and, with high
        probability, the share of calibration cases above the target). ``ValueError`` saying how many cases are
        needed when there are too few.
    """
    config.validate()
    assert config.conformal is not None
    ids = sorted(states)
    cal = ids if config.calibration_cases is None else sorted(str(c) for c in config.calibration_cases)
    rules: dict[str, ConformalRule] = {}
    block: dict[str, Any] = {"family": config.conformal_family, "delta": config.conformal_delta,
                             "calibration": "all" if config.calibration_cases is None else cal,
                             "n_calibration": len(cal), "sides": {}}
    for side, target in dict(config.conformal).items():  # type: ignore[arg-type]
        alpha, tol = (target, None) if config.conformal_delta is None else (float(config.conformal_delta), target)
        try:
            rule = fit_conformal_rule([states[c][side] for c in cal], alpha, tol=tol)
        except ValueError as e:
            raise ValueError(f"conformal {side}:{CONFORMAL_LOSSES[side]}={target:g}: {e}") from None
        rules[side] = rule
        block["sides"][side] = {
            "loss": CONFORMAL_LOSSES[side], "target": target, "method": rule.method, "alpha": rule.alpha,
            "tol": rule.tol, "guarantee": rule.tasks[0].guarantee,
            "per_task": {t.name: {"lambda_hat": t.lambda_hat, "calibration_loss": t.calibration_loss,
                                  "calibration_above_tol": t.calibration_above_tol} for t in rule.tasks},
        }
    return rules, block


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
    """

    rules: dict[str, ConformalRule]
    targets: dict[str, float]
    delta: float | None
    fingerprint: dict[str, Any]
    calibration_cases: list[str]
    regions: dict[str, list[int]] | None = None
    created: str = field(default_factory=lambda: _dt.datetime.now().astimezone().isoformat(timespec="seconds"))

    def to_json(self) -> dict[str, Any]:
        """The file's JSON object, ending with its ``digest`` (:func:`~monai_unc.evaluation.triage.rule_digest`).

        Returns:
            A dict of plain values.
        """
        body = {"format": CONFORMAL_RULE_FORMAT, "format_version": _FORMAT_VERSION, "monai_unc": __version__,
                "created": self.created, "targets": dict(self.targets), "delta": self.delta,
                "calibration_cases": list(self.calibration_cases), "regions": self.regions,
                "fingerprint": dict(self.fingerprint), "rules": {k: r.to_dict() for k, r in self.rules.items()}}
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
        if not isinstance(d, dict) or d.get("format") != CONFORMAL_RULE_FORMAT:
            raise ValueError(f"{source}: not a conformal rule (field 'format' is not {CONFORMAL_RULE_FORMAT!r})")
        if d.get("format_version") != _FORMAT_VERSION:
            raise ValueError(f"{source}: format_version {d.get('format_version')!r} is not supported (this monai-unc "
                             f"reads {_FORMAT_VERSION})")
        if d.get("digest") != rule_digest(d):
            raise ValueError(f"{source}: field 'digest' does not match the content: the file was edited or corrupted "
                             "(write it again with monai-unc evaluate --conformal)")
        try:
            rules = {str(k): ConformalRule.from_dict(v) for k, v in d["rules"].items()}
            targets = {str(k): float(v) for k, v in d["targets"].items()}
            if not rules or set(rules) != set(targets) or not set(rules) <= set(CONFORMAL_LOSSES):
                raise ValueError("'rules' and 'targets' must name the same sides, outer and/or inner")
            if any(r.side != s for s, r in rules.items()):
                raise ValueError("a rule's side differs from its key")
            if len({(r.activation, r.family, r.names) for r in rules.values()}) != 1:
                raise ValueError("the rules differ in activation, family or names")
            return cls(rules, targets, None if d["delta"] is None else float(d["delta"]), dict(d["fingerprint"]),
                       [str(c) for c in d["calibration_cases"]], d.get("regions"), str(d["created"]))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise ValueError(f"{source}: {e}") from None

    def save(self, path: str | os.PathLike) -> Path:
        """Write the file as strict JSON, atomically; returns the path."""
        return atomic_write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> ConformalRuleFile:
        """Read a ``conformal_rule.json``; ``FileNotFoundError`` when absent, ``ValueError`` when it is not valid
        JSON or not a verified rule (:meth:`from_json`)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"conformal rule not found: {path} (written by monai-unc evaluate --conformal)")
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"conformal rule {path} is not valid JSON ({e})") from None
        return cls.from_json(d, f"conformal rule {path}")

    @property
    def first(self) -> ConformalRule:
        """The first rule (outer, else inner): activation, family and names are those of every rule."""
        return next(iter(self.rules.values()))


def write_conformal_rule(output: str | os.PathLike, rules: Mapping[str, ConformalRule] | None,
                         config: EvaluationConfig, calibration_cases: Sequence[str], *,
                         predictions: str | os.PathLike | None = None, layout: str = "monai-unc",
                         uncertainty: str | os.PathLike | None = None) -> Path | None:
    """Write ``<output>/conformal_rule.json`` with the rules and the fingerprint of the calibration cases'
    predictions (:func:`prediction_fingerprint`), or, without rules, remove a stale one.

    Args:
        output: the evaluation folder.
        rules: ``{side: rule}`` of :func:`fit_conformal_rules`, or None.
        config: the evaluation options.
        calibration_cases: the ids the rules were fitted on.
        predictions, layout, uncertainty: the evaluated predictions.

    Returns:
        The path, or None.
    """
    path = Path(output) / CONFORMAL_RULE_FILE
    if not rules:
        path.unlink(missing_ok=True)
        return None
    assert config.conformal is not None
    cal = [str(c) for c in calibration_cases]
    fp = prediction_fingerprint(predictions, layout, cal, uncertainty) if predictions is not None else {}
    regions = None if config.regions is None else {k: list(v) for k, v in dict(config.regions).items()}
    doc = ConformalRuleFile(dict(rules), dict(config.conformal), config.conformal_delta, fp, cal,  # type: ignore
                            regions)
    return doc.save(path)


# ----------------------------------------------------------------------------------------------------------------
# applying (monai-unc conformal)
# ----------------------------------------------------------------------------------------------------------------
def _band_p95(outer: np.ndarray, inner: np.ndarray, spacing: Sequence[float]) -> float:
    """The band width (module docstring): p95 of the outer boundary's distances (mm) to the inner mask."""
    if not outer.any() or not inner.any():
        return float("nan")
    boundary = outer & ~ndimage.binary_erosion(outer)
    d = np.asarray(distance_to_mask(inner, tuple(float(s) for s in spacing)))[boundary]
    return float(np.percentile(d, 95)) if d.size else 0.0


def conformal_masks(doc: ConformalRuleFile, case: Any) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
    """The masks of every side of the rule file for a loaded case (:func:`~monai_unc.io.load_case`).

    Args:
        doc: the rule file.
        case: the loaded case (with probabilities).

    Returns:
        ``({side: bool (T, *spatial)}, predicted (T, *spatial) bool, names)`` restricted to the foreground tasks
        (softmax: classes ``1 .. C-1``; regions: every region).
    """
    rule = doc.first
    if case.probs is None:
        raise CaseError(f"case {case.case_id!r}: no probabilities (<case>_probs): the conformal masks need them")
    if rule.activation == "sigmoid":
        assert doc.regions is not None
        pred = predicted_regions(case, doc.regions)
        keep = slice(0, len(rule.names))
    else:
        pred = np.stack([case.seg == c for c in range(len(rule.names))])
        keep = slice(1, len(rule.names))
    masks = {side: r.apply(case.probs, pred=pred if rule.activation == "sigmoid" else case.seg,
                           spacing=case.spacing)[keep] for side, r in doc.rules.items()}
    return masks, pred[keep].astype(bool), list(rule.names[keep])


def conformal_case(files: CaseFiles, doc: ConformalRuleFile, output: Path) -> dict[str, Any]:
    """Apply the rule file to one case: write ``<case>_<side>.nii.gz`` in ``output`` and return its csv row.

    Args:
        files: the case's files (segmentation and probabilities).
        doc: the rule file.
        output: the output folder.

    Returns:
        The row: ``case`` and per foreground class or region ``<side>_ml_<name>``, ``predicted_ml_<name>`` and
        ``band_p95_mm_<name>`` (module docstring).
    """
    rule = doc.first
    sigmoid = rule.activation == "sigmoid"
    case = load_case(files, len(rule.names), multilabel=sigmoid)
    masks, pred, names = conformal_masks(doc, case)
    voxel_ml = float(np.prod(case.spacing)) / 1000.0
    for side, m in masks.items():
        path = output / f"{case.case_id}_{side}.nii.gz"
        if sigmoid or m.shape[0] > 1:
            save_region_maps(m.astype(np.uint8), case.affine, path, dtype="uint8")
        else:
            save_nifti(m[0].astype(np.uint8), case.affine, path)
    row: dict[str, Any] = {"case": case.case_id}
    for t, name in enumerate(names):
        col = region_suffix(name) if sigmoid else slug(name)
        outer = masks["outer"][t] if "outer" in masks else pred[t]
        inner = masks["inner"][t] if "inner" in masks else pred[t]
        if "inner" in masks:
            row[f"inner_ml_{col}"] = float(inner.sum()) * voxel_ml
        row[f"predicted_ml_{col}"] = float(pred[t].sum()) * voxel_ml
        if "outer" in masks:
            row[f"outer_ml_{col}"] = float(outer.sum()) * voxel_ml
        row[f"band_p95_mm_{col}"] = _band_p95(outer, inner, case.spacing)
    return row


def _find_cases(predictions: Path, layout: str, images: str | os.PathLike | None) -> list[CaseFiles]:
    found = list_prediction_cases(predictions, layout, images=images, empty="no case")
    for f in found:
        if f.probs is None:
            raise CaseError(f"case {f.case_id!r}: no probabilities in {predictions}: the conformal masks need them "
                            "(infer writes <case>_probs; nnunet-predict needs --save_probabilities)")
    return found


def check_conformal_inputs(
    predictions: str | os.PathLike,
    rule: ConformalRuleFile | str | os.PathLike,
    output: str | os.PathLike,
    *,
    images: str | os.PathLike | None = None,
    layout: str = "monai-unc",
    allow_mismatch: bool = False,
) -> tuple[ConformalRuleFile, list[CaseFiles], dict[str, Any]]:
    """The checks of :func:`run_conformal` before any work, writing nothing (also run by ``monai-unc triage
    --conformal-rule`` before its triage, so that a refused rule leaves nothing behind).

    The output folder must not be or lie in an input folder nor replace an input
    (:func:`monai_unc.io.check_inputs_not_written`), the rule file is verified (:meth:`ConformalRuleFile.load`),
    every case needs probabilities, and the predictions' fingerprint is compared with the rule's
    (:func:`~monai_unc.evaluation.triage.check_prediction_fingerprint`).

    Args:
        predictions: output folder of ``monai-unc infer`` or ``nnunet-predict`` (``layout``), with probabilities.
        rule: a :class:`ConformalRuleFile` or the path of a ``conformal_rule.json``.
        output: the folder the masks would be written to.
        images: folder of the input images (listed with the cases only).
        layout: ``"monai-unc"`` or ``"nnunet"``.
        allow_mismatch: accept predictions made otherwise (the check records the differences).

    Returns:
        ``(rule file, cases, fingerprint check)``; :class:`~monai_unc.evaluation.triage.FingerprintMismatch` (a
        ``ValueError``) when the fingerprints differ and ``allow_mismatch`` is False, ``ValueError`` /
        ``FileNotFoundError`` / :class:`~monai_unc.io.CaseError` for the other refusals.
    """
    rule_path = None if isinstance(rule, ConformalRuleFile) else str(Path(rule).resolve())
    check_output_folder(output, predictions, images)
    check_inputs_not_written(output, CONFORMAL_WRITES, rule_path, predictions, images, what="--output")
    doc = rule if isinstance(rule, ConformalRuleFile) else ConformalRuleFile.load(rule)
    found = _find_cases(Path(predictions), layout, images)
    check = check_prediction_fingerprint(doc.fingerprint, doc.regions, predictions, layout,
                                         [f.case_id for f in found], allow_mismatch=allow_mismatch)
    return doc, found, check


@dataclass
class ConformalResult:
    """What :func:`run_conformal` returns: the summary written to ``conformal.json`` and the paths."""

    summary: dict[str, Any]
    paths: dict[str, Path]


def run_conformal(
    predictions: str | os.PathLike,
    rule: ConformalRuleFile | str | os.PathLike,
    output: str | os.PathLike,
    *,
    images: str | os.PathLike | None = None,
    layout: str = "monai-unc",
    allow_mismatch: bool = False,
    resume: bool = True,
    progress: bool = False,
    dist: Any = None,
    on_failure: Any = None,
) -> ConformalResult:
    """Apply a ``conformal_rule.json`` to new predictions (no labels): the whole of ``monai-unc conformal``.

    Before any work: the output folder must not be or lie in an input folder nor replace an input
    (:func:`monai_unc.io.check_inputs_not_written`), the rule file is verified (:meth:`ConformalRuleFile.load`) and
    the predictions' fingerprint is compared with the rule's (:class:`FingerprintMismatch` unless
    ``allow_mismatch``). Each case (:func:`monai_unc.distributed.run_cases`, resumable through ``state/cases/``)
    gets :func:`conformal_case`; rank 0 writes ``conformal.csv`` and ``conformal.json``.

    Args:
        predictions: output folder of ``monai-unc infer`` or ``nnunet-predict`` (``layout``), with probabilities.
        rule: a :class:`ConformalRuleFile` or the path of a ``conformal_rule.json``.
        output: output folder.
        images: folder of the input images (listed with the cases only).
        layout: ``"monai-unc"`` or ``"nnunet"``.
        allow_mismatch: apply the rule to predictions made otherwise (``conformal.json`` records it).
        resume: keep and reuse per-case rows.
        progress: show a progress bar.
        dist: a :class:`~monai_unc.distributed.DistContext`.
        on_failure: called with each failed case.

    Returns:
        The :class:`ConformalResult`.
    """
    ctx = dist if dist is not None else get_dist_context()
    output = Path(output)
    rule_path = None if isinstance(rule, ConformalRuleFile) else str(Path(rule).resolve())
    got: dict[str, Any] = {}

    def listing() -> list[CaseFiles]:
        got["doc"], found, got["check"] = check_conformal_inputs(predictions, rule, output, images=images,
                                                                 layout=layout, allow_mismatch=allow_mismatch)
        return found

    def setup() -> None:
        output.mkdir(parents=True, exist_ok=True)
        clean_partial_files(output)

    def finish(run: CohortRun) -> tuple[dict[str, Any], dict[str, Path]]:
        rows = sorted(run.results, key=lambda r: str(r["case"]))
        doc: ConformalRuleFile = got["doc"]
        summary = {
            "n_cases": len(rows), "rule": rule_path, "targets": doc.targets, "delta": doc.delta,
            "family": doc.first.family, "fingerprint": got["check"],
            "lambda_hat": {s: {t.name: t.lambda_hat for t in r.tasks} for s, r in doc.rules.items()},
            "guarantee": {s: r.tasks[0].guarantee for s, r in doc.rules.items()},
            "band_width": "band_p95_mm: the 95th percentile, over the outer mask's boundary voxels, of the distance "
                          "(mm) to the nearest inner-mask voxel (the predicted mask for a side the rule lacks)",
            "cases": rows,
        }
        paths = {"csv": write_csv(output / "conformal.csv", rows),
                 "json": atomic_write_json(output / "conformal.json", summary)}
        return json_safe(summary), paths

    def stale(run: CohortRun) -> None:
        for name in ("conformal.csv", "conformal.json"):
            (output / name).unlink(missing_ok=True)

    def fingerprint(files: CaseFiles) -> dict[str, Any]:
        inputs = {"seg": file_signature(files.seg), "probs": file_signature(files.probs)}
        return json.loads(json.dumps({"format": _STATE_FORMAT, "version": __version__,
                                      "rule": got["doc"].to_json()["digest"], "inputs": inputs}))

    cache = None
    if resume:
        cache = CaseCache(output / STATE_DIR / CASES_DIR, fingerprint, dump=lambda folder, cid, row: {"row": row},
                          restore=lambda folder, doc, files: dict(doc["row"]))
    run = run_cases(listing, lambda f: conformal_case(f, got["doc"], output), command="monai-unc conformal",
                    ctx=ctx, cache=cache, setup=setup, summarize=finish, on_failed=stale,
                    failures_file=output / "failures.json", progress=progress, desc="conformal",
                    on_failure=on_failure)
    return ConformalResult(*run.summary)
