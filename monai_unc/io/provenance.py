"""Provenance of predictions and of the files fitted on them: services that every capability shares.

Triage and the cohort products use them alike:

- :func:`list_prediction_cases`: the cases of a prediction folder (no labels), with absolute paths.
- :func:`prediction_fingerprint` and its checks (:func:`check_prediction_fingerprint`, :func:`compare_fingerprints`,
  :class:`FingerprintMismatch`): how a folder of predictions was made, read from the records ``infer`` and
  ``nnunet-predict`` write, so that a rule fitted on one model's predictions is not applied to another's.
- :func:`check_finished_predictions`: an ``infer`` (or ``nnunet-predict``) output folder is finished and made with one
  setting (no run holds it, every case has its record, the records and ``infer.json`` / ``uncertainty_config.json``
  agree) before it is evaluated or a rule is fitted on it.
- :func:`prediction_regions` / :func:`region_differences`: the region spec recorded with region-based predictions.
- :func:`calibration_geometry` / :func:`read_geometry` / :func:`case_geometry_warning`: the range of a fitted rule's
  calibration cases' voxel spacing and voxel counts (its ``geometry``), and the warning naming a new case outside it.
- :func:`rule_digest`: the sha256 content digest of a fitted file (a referral rule, a product's rule file or
  artifact), which tells an edited or corrupted file from the one written.
- :func:`read_checked_json`: the one reader of such a file (untrusted strict JSON: its format, version and digest
  checked), with its parts :func:`check_document` (format and version of data already parsed) and
  :func:`check_digest`.
- :class:`RuleRead`: a rule file read and verified once for a command; :func:`rule_file_path` / :func:`load_rule`: a
  rule given as a path, a :class:`RuleRead` or the loaded rule, as the commands' steps take it.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import warnings
from collections.abc import Collection, Mapping, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any

from .._digest import content_digest
from .._utils import is_finite_real, unique_json_keys
from ..keys import (
    DEFAULT_RATEIN_TARGET,
    DEPRECATED_MEASURES,
    DROPOUT_TOKENS,
    LAYOUTS,
    MEASURES,
    SAMPLES_TOKENS,
    canonical_method,
    draws_at_random,
    method_tokens,
)
from .cases import (
    INFER_RECORD,
    CaseError,
    CaseFiles,
    changed_outputs,
    check_regions_class_order,
    match_cases,
    nnunet_dataset_regions,
    read_prediction_regions,
    settings_changes,
)
from .files import (
    atomic_write_json,
    check_entry_kind,
    check_not_being_written,
    input_folder,
    json_safe,
    read_json_cached,
    read_json_or_none,
)
from .signing import (
    SIGNATURE_FIELD,
    KeyPairMismatchError,
    Trust,
    UnprotectedKeyError,
    default_signing_key,
    sign_digest,
    verify_signature,
)


# ----------------------------------------------------------------------------------------------------------------
# fingerprint of the predictions
# ----------------------------------------------------------------------------------------------------------------
class FingerprintMismatch(ValueError):
    """The predictions were not made like the rule's calibration predictions.

    Args:
        differences: ``[(field, rule value, predictions value)]``, kept as :attr:`differences`; the message names
            the first few.

    Example:
        >>> FingerprintMismatch([("roi", 8, 16)]).differences
        [('roi', 8, 16)]
    """

    def __init__(self, differences: Sequence[tuple[str, Any, Any]]) -> None:
        self.differences = list(differences)
        what = "; ".join(f"{k}: {_short(b)} (rule: {_short(a)})" for k, a, b in self.differences[:6])
        more = f" and {len(self.differences) - 6} more" if len(self.differences) > 6 else ""
        super().__init__(f"the predictions were not made like the rule's calibration predictions ({what}{more}); "
                         "certify a rule on predictions made this way or, if the difference cannot matter, pass "
                         "--allow-mismatch (in Python: allow_mismatch=True)")


def _short(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _one_or_list(values: Sequence[Any]) -> Any:
    uniq = sorted({json.dumps(v, sort_keys=True) for v in values})
    vals = [json.loads(u) for u in uniq]
    return vals[0] if len(vals) == 1 else vals


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {tuple(LAYOUTS)}, got {layout!r}")


_TEMPERATURE = re.compile(r"\(temperature \[([^\]]*)\]\)")


def recorded_temperature(settings: Mapping[str, Any]) -> list[float] | None:
    """The temperature of an ``infer`` run from the ``settings`` of its ``infer.json``.

    It is a list of floats (one, or one per class), None when the model was not temperature-scaled.

    Args:
        settings: the ``settings`` object of ``infer.json``. Its ``temperature`` field (full precision) when
            present; in records written before that field, the ``"(temperature [..])"`` part of ``model`` (rounded
            to 4 significant digits by :func:`monai_unc.workflows.models.load_network`).

    Returns:
        The temperatures, or None.

    Example:
        >>> recorded_temperature({"model": "network: UNet", "temperature": 1.23456789})
        [1.23456789]
        >>> recorded_temperature({"model": "network: UNet (temperature [1.2346])"})
        [1.2346]
    """
    value = settings.get("temperature")
    if value is not None:
        return [float(v) for v in (value if isinstance(value, list) else [value])]
    m = _TEMPERATURE.search(str(settings.get("model", "")))
    return [float(t) for t in m.group(1).split(",") if t.strip()] if m else None


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
      ``activation``, ``temperature``, ``intensity``, ``dropout``, ``tta_noise``, ``ratein_target``,
      ``samples_per_source`` (the ``--samples`` setting, for an SSN combined only with ``tta`` / ``ensemble``: its
      latent draws are averaged into one sample, so ``num_samples`` does not show them; with ``mcdropout`` /
      ``ratein`` or alone, ``num_samples`` pins them), ``regions`` for a region-based run (``infer --regions``),
      ``dropout_masks`` where the run's inserted dropout drops elements at a site (the tokens of a transformer; absent
      where every inserted site is channel-wise, and in the records of versions before it) and
      ``weights``, the sha256 digests of the model's files
      (checkpoints, ensemble members, the bundle config or network spec), when the run recorded them.
    - ``nnunet`` layout (``monai-unc nnunet-predict``): ``uncertainty_config.json`` and ``uncertainty/<case>.json``:
      ``trainer``, ``folds``, ``method`` (the ``+``-joined sources), ``num_samples``, ``mi_meaning``, ``dropout_p``,
      ``rate_in``, ``posthoc_dropout_after``, ``measures``, ``tile_step_size`` (the overlap), ``mirror_axes``,
      ``segmentation_from``, ``activation`` (``"sigmoid"`` for a region-based model, else ``"softmax"``; a record
      written before it was recorded is compared as the one its ``regions`` imply), and ``model_folder`` /
      ``temperature`` / ``checkpoint`` / ``regions`` /
      ``window_disagreement`` / ``mirror_draws`` (``"shared"``: the mirrors of a dropout / Rate-In / SSN sample draw
      from one random state; ``"shared, ssn noise mirrored"``: an SSN's per-logit noise also mirrored with the
      input; absent where each mirror drew its own, as before 0.2.0) / ``fold_draws`` (``"shared"``: the folds
      averaged in an SSN sample share its latent draw) / ``weights`` (the sha256
      digests of the fold checkpoints, ``plans.json`` and ``dataset.json``) when the config records them.
    - without such records: ``{"producer": "unknown"}`` (a rule then cannot check the predictions; the triage page
      says so).
    - ``monai-unc`` layout with maps read from another folder (``uncertainty``): the scores come from those maps, so
      that folder's run is fingerprinted too; when it was not made like the predictions (or has no records) the
      fingerprint gets ``maps``, the fingerprint of the maps' run (:func:`compare_fingerprints` compares it).

    The seed is left out on purpose: another seed draws other samples of the same predictive distribution, which
    keeps new cases exchangeable. Values that differ between the cases (e.g. ``num_samples``) become sorted lists.

    Args:
        predictions: the prediction folder.
        layout: ``"monai-unc"`` or ``"nnunet"``.
        case_ids: the cases whose records count (default: every record found).
        uncertainty: the folder of the maps (and, for ``nnunet``, of the per-case uncertainty records) when not
            where the layout puts them.

    Returns:
        The fingerprint as JSON data (``{"producer": "unknown"}`` without records).

    Raises:
        ValueError: ``layout`` is not one of :data:`monai_unc.io.LAYOUTS`.
    """
    _check_layout(layout)
    pred = Path(predictions)
    if layout == "monai-unc" and uncertainty is not None and Path(uncertainty).resolve() != pred.resolve():
        # found by hostile testing: the maps of --uncertainty, which the scores are read from, were never
        # fingerprinted, so maps of another run (other samples, model, measures) passed as the predictions' run
        fp = prediction_fingerprint(pred, layout, case_ids)
        maps = prediction_fingerprint(uncertainty, layout, case_ids)
        return fp if compare_fingerprints(fp, maps) in (("match", []), ("unverified", [])) else {**fp, "maps": maps}
    if layout == "monai-unc":
        doc = read_json_cached(pred / "infer.json")
        settings = doc.get("settings") if isinstance(doc, dict) else None
        if not isinstance(settings, dict):
            return {"producer": "unknown"}
        rec_dir = pred
        ids = case_ids if case_ids is not None else [p.stem for p in sorted(pred.glob("*.json"))
                                                      if p.name not in ("infer.json", "failures.json")]
        records = [r for r in (read_json_or_none(rec_dir / f"{c}.json") for c in ids) if isinstance(r, dict)]
        model = str(settings.get("model", ""))
        temperature = recorded_temperature(settings)
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
        if "ssn" in method_tokens(str(fp["method"] or "")) and not _draws_pinned(fp) and settings.get("samples"):
            fp["samples_per_source"] = settings["samples"]  # the SSN's draws, which num_samples does not show
        if settings.get("weights"):  # runs recorded before the weight digests have none (compared by path)
            fp["weights"] = settings["weights"]
        if settings.get("regions") is not None:  # region-based runs only, so older rules still match
            fp["regions"] = settings["regions"]
        if settings.get("dropout_masks") is not None:  # inserted dropout drops elements on tokens (review 67); earlier
            # runs erased whole tokens there, so a rule certified on those does not fit these predictions
            fp["dropout_masks"] = settings["dropout_masks"]
        return json.loads(json.dumps(fp))
    cfg = read_json_cached(pred / "uncertainty_config.json")
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
    # found by review 64: the nnunet layout recorded no activation, so a rule certified on region (sigmoid) maps
    # recorded activation null and a product rule's activation was never checked against it; nnU-Net's
    # activation follows from its label manager: sigmoid per region for a region-based model, else softmax
    fp["activation"] = "sigmoid" if cfg.get("regions") is not None else "softmax"
    if "window_disagreement" in cfg:  # how MI was decomposed; configs without it counted window overlap as MI
        fp["window_disagreement"] = cfg["window_disagreement"]
    if "mirror_draws" in cfg:  # the mirrors of a stochastic sample share its draws; configs without it (earlier
        # versions) drew per mirror, which shrank MC dropout's MI to about half: a rule certified on those does not
        # fit these predictions (found by hostile review)
        fp["mirror_draws"] = cfg["mirror_draws"]
    if "fold_draws" in cfg:  # the averaged folds of an SSN sample share its latent draw (review 66); earlier each fold
        # drew its own, which shrank the aleatoric MI: a rule certified on those does not fit these predictions
        fp["fold_draws"] = cfg["fold_draws"]
    if cfg.get("weights"):  # configs written before the weight digests have none (compared by path)
        fp["weights"] = cfg["weights"]
    return json.loads(json.dumps(fp))


#: the fields of ``infer``'s case records that :func:`prediction_fingerprint` reads: one value in a folder of one run
_RECORD_FIELDS = ("method", "num_samples", "mi_meaning")


#: the layout (``--layout``) of the predictions each producer of :func:`prediction_fingerprint` writes
PRODUCER_LAYOUTS: dict[str, str] = {"monai-unc infer": "monai-unc", "nnunet-predict": "nnunet"}


def fingerprint_layout(fingerprint: Any) -> str | None:
    """The layout of the predictions a fingerprint was taken from, known from its ``producer``.

    A rule file of ``evaluate`` (``referral_rule.json``, or the rule file of a product) records the fingerprint of its
    calibration predictions (:func:`prediction_fingerprint`): ``"nnunet-predict"`` predictions are in the ``nnunet``
    layout, ``"monai-unc infer"`` ones in the ``monai-unc`` layout.

    Args:
        fingerprint: the recorded fingerprint (untrusted JSON data: anything but an object is no record).

    Returns:
        ``"monai-unc"``, ``"nnunet"``, or None where the producer is unknown or not recorded.

    Example:
        >>> fingerprint_layout({"producer": "nnunet-predict"}), fingerprint_layout({"producer": "unknown"})
        ('nnunet', None)
    """
    producer = fingerprint.get("producer") if isinstance(fingerprint, Mapping) else None
    return PRODUCER_LAYOUTS.get(producer) if isinstance(producer, str) else None


def _some(ids: Sequence[str]) -> str:
    """Case ids for a one-line message: the first five (``repr``: no line break) and how many more."""
    return f"{list(ids[:5])}" + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def check_finished_predictions(predictions: str | os.PathLike, layout: str, case_ids: Sequence[str],
                               uncertainty: str | os.PathLike | None = None) -> None:
    """Refuse the predictions of an ``infer`` run that is still writing them, unfinished, or made with two settings.

    ``infer`` writes ``infer.json`` (the run's settings) first and each case's record ``<case>.json`` last (the case is
    finished; its ``fingerprint`` holds the settings it was made with), and holds its folder while it runs
    (:func:`~monai_unc.io.output_lock`). Files matched by name alone may therefore be another run's half, e.g. of an
    ``infer --overwrite`` with other settings that was interrupted: new files of some cases, old ones of others, and
    one case half new, half old. Such a folder is refused in one line before anything is read:

    - another run holds the folder (:func:`~monai_unc.io.output_lock_holder`: a live process; the lock file of a run
      that ended does not count);
    - a case of ``case_ids`` has no record (its files are those of an interrupted case);
    - a record's ``fingerprint`` is not the ``settings`` of ``infer.json`` (the case was made by another run: the
      message names the cases and the settings that differ, the case's value first);
    - the records disagree on ``method``, ``num_samples`` or ``mi_meaning`` (records of versions before the
      ``fingerprint``, which name no settings), which a rule's :func:`prediction_fingerprint` would record as a list;
    - a file a record lists differs from what was written (its size or sha256 is not the one of ``file_digests``: a
      map replaced or edited since, under the same name), has no digest entry, or the record's text no longer
      matches its ``record_digest`` (:func:`~monai_unc.io.changed_outputs`; the message names the case and the file).
      A missing file is left to the matching of the cases (``--allow-missing``), and a record of an earlier version,
      without ``file_digests`` and ``record_digest``, is not checked.

    The remedy is to run ``monai-unc infer`` into the folder again with the settings of ``infer.json``: it predicts the
    unfinished cases and those made with other settings, and keeps the rest. Folders that ``infer`` did not write (no
    readable ``infer.json`` with ``settings``: files of other tools) are not checked.

    The ``nnunet`` layout (``monai-unc nnunet-predict``) is checked against ``uncertainty_config.json``: the
    ``settings`` of each case's record ``uncertainty/<case>.json`` must be those of the config (each setting the
    record holds; the config also lists the measures and the model folder's path, which records do not), and records
    without ``settings`` (earlier versions) must agree on ``sources``, ``num_samples`` and ``mi_meaning``; the remedy
    is ``nnunet-predict`` into the folder again with the config's settings (``--continue_prediction`` predicts only
    those cases). The digests of a record are checked as for ``infer``: its maps and their spacing files
    (``file_digests``, in the records' folder) and, when the records are those of ``predictions``, its segmentation
    and ``.npz`` (``prediction_file_digests``). A case of ``case_ids`` without a record is an interrupted one when
    ``nnunet-predict`` wrote the config (it holds ``uncertainty_sources``; the record is removed first when a case is
    written again, and written before its segmentation is renamed into place); a config written by hand names no such
    run. Folders without ``uncertainty_config.json`` or
    ``uncertainty/`` (stock nnU-Net's, or assembled by hand) are not checked.

    Maps read from another folder (``uncertainty``, the commands' ``--uncertainty``) are checked there too: the
    ``nnunet`` records found there against the config of ``predictions``, a ``monai-unc`` folder of maps that ``infer``
    wrote as a run of its own (found by hostile testing: records of another run's settings beside the maps passed).

    Args:
        predictions: the prediction folder.
        layout: its layout (``"monai-unc"`` or ``"nnunet"``).
        case_ids: the cases that will be read (empty: only whether another run holds the folder).
        uncertainty: the folder the maps are read from when not where the layout puts them (None: the layout's).

    Raises:
        ValueError: one line naming the folder, the holder or the cases and what is wrong with them; ``layout`` is not
            one of :data:`monai_unc.io.LAYOUTS`.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:  # no infer.json: not an infer run, nothing to check
        ...     check_finished_predictions(d, "monai-unc", ["case1"])
    """
    _check_layout(layout)
    pred = Path(predictions)
    if layout == "nnunet":
        _check_finished_nnunet(pred, case_ids, None if uncertainty is None else Path(uncertainty))
        return
    if uncertainty is not None and Path(uncertainty).resolve() != pred.resolve():
        check_finished_predictions(uncertainty, layout, case_ids)  # the maps' own infer run, if any
    doc = read_json_or_none(pred / INFER_RECORD) if layout == "monai-unc" else None
    settings = doc.get("settings") if isinstance(doc, dict) else None
    if not isinstance(settings, dict):
        return
    check_not_being_written(pred, what=f"the prediction folder {pred}",
                            then=" (or stop it and run 'monai-unc infer' into the folder again to finish it)")
    unfinished: list[str] = []
    other: dict[str, list[str]] = {}  # the settings that differ -> the cases made with them
    values: dict[str, dict[str, list[str]]] = {k: {} for k in _RECORD_FIELDS}
    edited: dict[str, list[str]] = {}  # the cases whose files differ from what was written -> which
    for cid in case_ids:
        rec = read_json_or_none(pred / f"{cid}.json")
        if not isinstance(rec, dict):
            unfinished.append(str(cid))
            continue
        changed = _changed_files(pred, rec, None)
        if changed:
            edited[str(cid)] = changed
        made = rec.get("fingerprint")
        if isinstance(made, dict):
            _note_other_settings(other, str(cid), made, settings)
        for k in _RECORD_FIELDS:
            values[k].setdefault(json.dumps(rec.get(k), sort_keys=True), []).append(str(cid))
    problems = _record_problems(INFER_RECORD, "<case>.json", unfinished, other, values, edited)
    if problems:
        raise ValueError(f"the predictions in {pred} are not one finished 'monai-unc infer' run: "
                         f"{'; '.join(problems)}; run 'monai-unc infer' into the folder again with the settings of its "
                         "infer.json to finish it")


def _note_other_settings(other: dict[str, list[str]], case_id: str, made: dict, expected: dict) -> None:
    """Add ``case_id`` to ``other`` under the settings in which ``made`` (its record's) differs from ``expected``."""
    made, expected = settings_as_compared(made), settings_as_compared(expected)  # a resumed earlier run's records
    if json.dumps(made, sort_keys=True) == json.dumps(expected, sort_keys=True):
        return
    changes = settings_changes(made, expected) or ["the settings' types"]  # e.g. 1 against 1.0
    other.setdefault("; ".join(changes[:3]) + ("; ..." if len(changes) > 3 else ""), []).append(case_id)


def _changed_files(folder: Path, record: dict, files: list[Any] | None,
                   digests_key: str = "file_digests") -> list[str]:
    """The files of a finished case's record that differ from what was written, for :func:`check_finished_predictions`.

    :func:`~monai_unc.io.changed_outputs` of ``files`` in ``folder`` (None: the record's ``files``), without the
    missing ones (the matching of the cases reports those, or leaves them out with ``--allow-missing``); nothing for
    a record without digests (``digests_key`` and ``record_digest``: an earlier version).
    """
    if digests_key not in record and "record_digest" not in record:
        return []
    try:
        bad = changed_outputs(folder, record, files, digests_key=digests_key)
    except KeyError:
        return ["record (no files list)"]
    except (TypeError, ValueError) as e:  # a value that is no JSON data, NaN: not a record as written
        return [f"record ({e})"]
    return [b for b in bad if not b.endswith(" (missing)")]


def _record_problems(config: str, record: str, unfinished: list[str], other: dict[str, list[str]],
                     values: dict[str, dict[str, list[str]]], edited: dict[str, list[str]] | None = None) -> list[str]:
    """What is wrong with a prediction folder's case records, in words (:func:`check_finished_predictions`).

    Args:
        config: the run record's file name (``infer.json``, ``uncertainty_config.json``).
        record: how the message names a case record (``<case>.json``, ``uncertainty/<case>.json``).
        unfinished: the cases with files but no record.
        other: the settings that differ from the run record's -> the cases made with them.
        values: per compared record field, each value (JSON) -> the cases that hold it.
        edited: the cases whose files differ from what was written -> the files, with why.

    Returns:
        One phrase per problem: unfinished cases, cases made with other settings or, when none differ, fields the
        records disagree on, and cases whose files were replaced or edited since.
    """
    problems = []
    if unfinished:
        problems.append(f"case(s) {_some(unfinished)} have files but no record {record} (an interrupted case)")
    problems += [f"case(s) {_some(ids)} were made with other settings than {config}'s ({what}: the case's value "
                 "first)" for what, ids in other.items()]
    if not other:  # differing settings say it already
        problems += [f"the case records disagree on {k} ("
                     + "; ".join(f"{v}: {_some(ids)}" for v, ids in sorted(groups.items())) + ")"
                     for k, groups in values.items() if len(groups) > 1]
    if edited:  # review 63: a map replaced since (same name) was evaluated without a word
        problems.append(_edited_phrase(edited))
    return problems


def _edited_phrase(edited: dict[str, list[str]]) -> str:
    """The cases whose files differ from what was written, and which files, as one phrase of a refusal."""
    shown = "; ".join(f"{cid}: {', '.join(bad[:2])}{', ...' if len(bad) > 2 else ''}"
                      for cid, bad in list(edited.items())[:3])
    return (f"case(s) {_some(list(edited))} have files that differ from what was written (replaced or edited since: "
            f"{shown}{'; ...' if len(edited) > 3 else ''})")


def _nnunet_changed_files(pred: Path, unc: Path, record: dict, own: bool) -> list[str]:
    """The files of an ``nnunet-predict`` case record that differ from what was written (:func:`_changed_files`).

    Its maps and their spacing files (``file_digests``, in ``unc``) and, when the records are those of ``pred``
    (``own``), its segmentation and ``.npz`` (``prediction_file_digests``).
    """
    changed = _changed_files(unc, record, _digested(record, "file_digests"))
    if not changed and own:
        changed = _changed_files(pred, record, _digested(record, "prediction_file_digests"), "prediction_file_digests")
    return changed


def check_prediction_digests(predictions: str | os.PathLike, layout: str, case_ids: Sequence[str]) -> None:
    """Refuse the cases of an ``infer`` or ``nnunet-predict`` folder whose files differ from what was written.

    The digest check of :func:`check_finished_predictions` alone, for a command that exports the predictions as the
    model's output (``dicom-export``): a file a case record lists whose size or sha256 is not the one it keeps (a map
    or segmentation replaced or edited since, under the same name), or a record whose text no longer matches its
    ``record_digest`` (:func:`~monai_unc.io.changed_outputs`). A missing file is left to the matching of the cases;
    a case without a record, a record of an earlier version (no digests) and a folder that ``infer`` or
    ``nnunet-predict`` did not write (no ``infer.json`` / ``uncertainty_config.json``) are not checked.

    Args:
        predictions: the prediction folder.
        layout: its file naming (``"monai-unc"``: ``infer``'s ``<case>.json``; ``"nnunet"``:
            ``uncertainty/<case>.json``).
        case_ids: the cases to check.

    Raises:
        ValueError: a layout that is not one of :data:`~monai_unc.io.LAYOUTS`, or cases whose files differ from what
            was written (one line naming the cases and the files, and the remedy).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:  # no infer.json: not an infer run, nothing to check
        ...     check_prediction_digests(d, "monai-unc", ["case1"])
    """
    _check_layout(layout)
    pred = Path(predictions)
    edited: dict[str, list[str]] = {}
    if layout == "nnunet":
        unc = pred / LAYOUTS["nnunet"]["uncertainty_subdir"]
        if not isinstance(read_json_or_none(pred / "uncertainty_config.json"), dict) or not unc.is_dir():
            return
        for cid in case_ids:
            rec = read_json_or_none(unc / f"{cid}.json")
            if isinstance(rec, dict) and (changed := _nnunet_changed_files(pred, unc, rec, True)):
                edited[str(cid)] = changed
        remedy = "'monai-unc nnunet-predict --continue_prediction' into the folder"
    else:
        doc = read_json_or_none(pred / INFER_RECORD) if layout == "monai-unc" else None
        if not isinstance(doc, dict) or not isinstance(doc.get("settings"), dict):
            return
        for cid in case_ids:
            rec = read_json_or_none(pred / f"{cid}.json")
            if isinstance(rec, dict) and (changed := _changed_files(pred, rec, None)):
                edited[str(cid)] = changed
        remedy = "'monai-unc infer' into the folder with the settings of its infer.json"
    if edited:
        raise ValueError(f"the predictions in {pred}: {_edited_phrase(edited)}; they are not what the model wrote: run "
                         f"{remedy} again to predict those cases again")


#: the fields of ``nnunet-predict``'s case records compared when a record holds no ``settings`` (earlier versions)
_NNUNET_RECORD_FIELDS = ("sources", "num_samples", "mi_meaning")


def _digested(record: dict, key: str) -> list[Any]:
    """The names of the files a record of ``nnunet-predict`` keeps digests of under ``key`` (none: not a mapping)."""
    digests = record.get(key)
    return list(digests) if isinstance(digests, Mapping) else []


def _check_finished_nnunet(pred: Path, case_ids: Sequence[str], uncertainty: Path | None = None) -> None:
    """:func:`check_finished_predictions` for the ``nnunet`` layout (``uncertainty_config.json`` and its records).

    The records are those of ``uncertainty`` when given (``--uncertainty``), else of ``<pred>/uncertainty/``.
    """
    cfg = read_json_or_none(pred / "uncertainty_config.json")
    unc = pred / LAYOUTS["nnunet"]["uncertainty_subdir"] if uncertainty is None else uncertainty
    if not isinstance(cfg, dict) or not unc.is_dir():
        return
    unfinished: list[str] = []
    other: dict[str, list[str]] = {}  # the settings that differ -> the cases made with them
    values: dict[str, dict[str, list[str]]] = {k: {} for k in _NNUNET_RECORD_FIELDS}
    edited: dict[str, list[str]] = {}  # the cases whose files differ from what was written -> which
    for cid in case_ids:
        rec = read_json_or_none(unc / f"{cid}.json")
        if not isinstance(rec, dict):
            if "uncertainty_sources" in cfg and uncertainty is None:  # written by nnunet-predict, which removes a
                # case's record first when it writes the case again, and writes it before the segmentation
                unfinished.append(str(cid))
            continue
        changed = _nnunet_changed_files(pred, unc, rec, uncertainty is None)
        if changed:
            edited[str(cid)] = changed
        made = rec.get("settings")
        if isinstance(made, dict):
            _note_other_settings(other, str(cid), made, {k: cfg.get(k) for k in made})
            continue
        for k in _NNUNET_RECORD_FIELDS:
            values[k].setdefault(json.dumps(rec.get(k), sort_keys=True), []).append(str(cid))
    records = "uncertainty/<case>.json" if uncertainty is None else f"{unc}/<case>.json"
    problems = _record_problems("uncertainty_config.json", records, unfinished, other, values, edited)
    if problems:
        raise ValueError(f"the predictions in {pred} are not one finished 'monai-unc nnunet-predict' run: "
                         f"{'; '.join(problems)}; run 'monai-unc nnunet-predict' into the folder again with the "
                         "settings of its uncertainty_config.json (with --continue_prediction it predicts only those "
                         "cases) to finish it")


def prediction_regions(
    predictions: str | os.PathLike, layout: str = "monai-unc"
) -> dict[str, list[int]] | list[str] | bool | None:
    """What the records of a prediction folder say about regions.

    ``monai-unc`` layout: :func:`monai_unc.io.read_prediction_regions` (``infer.json`` / the case records; an
    ``infer.json`` without ``multilabel``, written before region-based inference existed, is class-based).
    ``nnunet`` layout: the ``regions`` entry of ``uncertainty_config.json``; without one (stock ``nnUNetv2_predict``
    output, or an earlier record), the regions of the ``dataset.json`` nnU-Net writes beside the predictions
    (:func:`~monai_unc.io.nnunet_dataset_regions`, channel order); neither: class-based when
    ``uncertainty_config.json`` exists, else no record.

    Args:
        predictions: the prediction folder.
        layout: ``"monai-unc"`` or ``"nnunet"``.

    Returns:
        ``False`` for class-based (softmax / binary) predictions; for region-based ones the region spec
        ``{name: [label, ...]}`` (channel order) or, when ``infer`` was not given ``--regions``, the channel names
        ``["0", "1", ...]`` (``True``: region-based, regions not recorded); ``None`` when there is no record.

    Raises:
        ValueError: ``layout`` is not one of :data:`monai_unc.io.LAYOUTS`, or the ``dataset.json`` read has labels that
            are not integers or lists of integers.
    """
    _check_layout(layout)
    pred = Path(predictions)
    if layout == "monai-unc":
        found = read_prediction_regions(pred)
        if found is not None:
            return found.get("regions") or True
        doc = read_json_cached(pred / "infer.json")
        return False if isinstance(doc, dict) and isinstance(doc.get("settings"), dict) else None
    cfg = read_json_cached(pred / "uncertainty_config.json")
    if isinstance(cfg, dict) and cfg.get("regions"):
        if isinstance(cfg["regions"], dict):  # the label maps were written with its regions_class_order (review 67)
            check_regions_class_order(cfg["regions"], cfg.get("regions_class_order"),
                                      str(pred / "uncertainty_config.json"))
        return cfg["regions"]
    # stock nnU-Net (nnUNetv2_predict) and earlier records: the dataset.json nnU-Net writes beside the predictions
    # orders the sigmoid channels of a region model (found by hostile review: without it, a folder whose channels are
    # whole tumour, tumour core, enhancing tumour was scored against --regions brats (TC, WT, ET) channel by channel)
    dataset = read_json_cached(pred / "dataset.json")
    regions = nnunet_dataset_regions(dataset, str(pred / "dataset.json")) if dataset is not None else {}
    if regions:
        # review 67: an order against the nesting of the regions made nnU-Net write wrong labels, scored silently
        check_regions_class_order(regions, dataset.get("regions_class_order"), str(pred / "dataset.json"))
        return regions
    return False if isinstance(cfg, dict) else None


def region_differences(
    rule_regions: Mapping[str, Sequence[int]] | None, found: Mapping[str, Sequence[int]] | list[str] | bool | None
) -> list[tuple[str, Any, Any]]:
    """Whether the regions a rule scores can be those of the predictions.

    They cannot for a class-based rule on region predictions or the reverse, another number of regions, or another
    label set in some channel (a region spec against a recorded spec; the names may differ, they only name the
    columns). Nothing is compared without a record (``found is None``).

    Args:
        rule_regions: the rule's region spec ``{name: [labels]}``, or None for a class-based rule.
        found: what :func:`prediction_regions` found for the predictions.

    Returns:
        ``[("regions", rule's, predictions')]`` when they cannot match, else ``[]``.

    Example:
        >>> region_differences({"WT": [1, 2, 4]}, {"whole": [1, 2, 4]})
        []
        >>> region_differences({"WT": [1, 2, 4]}, False)
        [('regions', {'WT': [1, 2, 4]}, None)]
    """
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


def _draws_pinned(fp: Mapping[str, Any]) -> bool:
    """Whether ``num_samples`` pins the draws per source of a fingerprint without ``samples_per_source``.

    It does when a source's draws multiply the samples per case (``mcdropout``, ``ratein``, ``ssn`` alone): the same
    method, model and ``num_samples`` then mean the same draws. An SSN combined only with ``tta`` / ``ensemble`` is
    one latent-averaged sample, so its draws are not in ``num_samples``.
    """
    tokens = method_tokens(str(fp.get("method") or ""))  # in any letter case, as infer reads --method
    return bool(DROPOUT_TOKENS.intersection(tokens)) or tokens == ["ssn"]


#: the recorded ``infer`` settings that hold a float (a fraction or a standard deviation), compared as floats
_FLOAT_SETTINGS = ("overlap", "tta_noise", "ratein_target", "dropout")


def settings_as_compared(settings: Any) -> Any:
    """Recorded ``infer`` settings as they are compared: the method's canonical spelling, unused options neutral.

    For ``infer.json``, a case record's ``fingerprint`` and a rule's prediction fingerprint (and what ``infer``
    records now: :meth:`~monai_unc.workflows.infer.InferSettings.to_json`):

    - ``method`` as :func:`~monai_unc.keys.canonical_method` spells it: ``infer`` reads ``--method MCDropout`` and
      ``" ssn+tta"`` as ``mcdropout`` and ``ssn+tta``, but recorded them as given (found by hostile review: a rule
      certified on ``MCDropout`` predictions mismatched ``mcdropout`` ones, and ``SSN+tta`` hid the SSN's draws, so a
      rule certified with 2 draws matched predictions made with 50).
    - ``dropout`` None under a method that samples no dropout (neither ``mcdropout`` nor ``ratein``): ``infer
      --dropout`` there is refused now; earlier versions accepted it, inserted the layers and never switched them
      on, so those maps are the ones without it (found by hostile review: a rule certified with it, and a run left
      half done with it, could no longer be used).
    - ``samples`` None under a method that draws no ``--samples`` (neither ``mcdropout``, ``ratein`` nor ``ssn``:
      ``tta``, ``ensemble``, ``softmax``): earlier versions recorded the unused value (10 by default), where each
      case record holds the samples really drawn (found by hostile review).
    - ``ratein_target`` :data:`~monai_unc.keys.DEFAULT_RATEIN_TARGET` under a method without ``ratein``: ``infer
      --ratein-target`` there is refused now; earlier versions recorded the unused value, which then refused the
      resume and mismatched every rule and prediction made without it (found by hostile review).
    - ``seed`` None under a method that draws nothing at random (:func:`~monai_unc.keys.draws_at_random`: ``tta``
      without ``tta_noise``, ``ensemble``, ``softmax``): their outputs are the same under every seed, yet the seed
      was recorded, so a resume with another ``--seed`` was refused and a case made with it predicted again (found by
      review).
    - ``measures`` (distinct current names) in the order of :data:`~monai_unc.keys.MEASURES`: the same maps asked
      for in another order (found by hostile testing: ``--measures predictive_entropy mutual_information`` after a
      run with the reverse predicted every case of the resume again, and a rule certified on either refused the
      other's predictions).
    - ``roi`` of one size for every axis as that one size (``[64, 64, 64]`` as ``[64]``, what ``--roi 64`` records):
      the same windows (found by hostile testing: a resume with ``--roi 64 64 64`` after ``--roi 64`` predicted every
      case again, and the folder it left was refused as made with two settings).
    - ``share_passes`` True and ``sample_batch_size`` ``"auto"`` under ``samples`` 1: ``infer`` refuses
      ``--no-share-passes`` and ``--sample-batch-size`` with ``--samples 1`` now (one draw, nothing to share or
      batch); earlier versions recorded them, so the resume of such a run was refused with them and without them
      (found by hostile review).
    - the fractions ``overlap``, ``tta_noise``, ``ratein_target`` and ``dropout`` as floats: Python's
      ``overlap=0`` is the command line's ``--overlap 0`` (found by hostile testing: the record ``0`` against
      ``infer.json``'s ``0.0`` predicted every case of a resume again and refused the finished folder).

    Args:
        settings: the recorded settings (anything else is returned as it is).

    Returns:
        A normalised copy of the settings (as above).

    Example:
        >>> settings_as_compared({"method": "tta", "dropout": 0.1})
        {'method': 'tta', 'dropout': None}
        >>> settings_as_compared({"method": "MCDropout+tta", "dropout": 0.1, "samples": 8})
        {'method': 'mcdropout+tta', 'dropout': 0.1, 'samples': 8}
        >>> settings_as_compared({"method": "tta", "samples": 10})
        {'method': 'tta', 'samples': None}
        >>> settings_as_compared({"method": "ensemble", "seed": 3}), settings_as_compared({"method": "ssn", "seed": 3})
        ({'method': 'ensemble', 'seed': None}, {'method': 'ssn', 'seed': 3})
        >>> settings_as_compared({"method": "tta", "overlap": 0, "roi": [64, 64, 64]})
        {'method': 'tta', 'overlap': 0.0, 'roi': [64]}
        >>> settings_as_compared({"method": "mcdropout", "samples": 1, "sample_batch_size": 4})
        {'method': 'mcdropout', 'samples': 1, 'sample_batch_size': 'auto'}
        >>> settings_as_compared({"method": "tta", "measures": ["mutual_information", "predictive_entropy"]})
        {'method': 'tta', 'measures': ['predictive_entropy', 'mutual_information']}
    """
    if not isinstance(settings, Mapping) or not isinstance(settings.get("method"), str):
        return settings
    tokens = set(method_tokens(settings["method"]))
    out = {**settings, "method": canonical_method(settings["method"])}
    if out.get("dropout") is not None and not DROPOUT_TOKENS & tokens:
        out["dropout"] = None
    if out.get("samples") is not None and not SAMPLES_TOKENS & tokens:
        out["samples"] = None
    if out.get("ratein_target") is not None and "ratein" not in tokens:
        out["ratein_target"] = DEFAULT_RATEIN_TARGET
    if out.get("seed") is not None and not draws_at_random(out["method"], out.get("tta_noise", 0.0)):
        out["seed"] = None  # the outputs are the same under every seed: recorded and compared as unused
    if out.get("samples") == 1 and not isinstance(out["samples"], bool):  # one draw: nothing to share or batch
        if "share_passes" in out:
            out["share_passes"] = True
        if "sample_batch_size" in out:
            out["sample_batch_size"] = "auto"
    if isinstance(out.get("roi"), list) and isinstance(_normalized_roi(out["roi"]), int):
        out["roi"] = [_normalized_roi(out["roi"])]  # the list infer records for one size
    listed = out.get("measures")
    if isinstance(listed, list) and all(isinstance(m, str) for m in listed) and len(set(listed)) == len(listed):
        ordered = [m for m in MEASURES if m in listed]
        if len(ordered) == len(listed):  # only current names: an old record's deprecated name stays as written
            out["measures"] = ordered
    for k in _FLOAT_SETTINGS:  # an int there (Python's overlap=0) is the float the command line records (0.0)
        if isinstance(out.get(k), numbers.Integral) and not isinstance(out[k], bool):
            out[k] = float(out[k])  # numpy's too (found by review: np.int64(0) stayed 0, recomputing every case)
    return out


#: fields that name where a model's files were, or which folds were asked for (display only), once both sides record
#: the files' digests: ``fold_ids`` is None where nnU-Net detected the folds, a list where they were named (found by
#: hostile testing: ``use_folds=None`` and ``-f 0 1 2 3 4`` of the same checkpoints, in the same order, mismatched)
_PATH_FIELDS = ("checkpoints", "model_folder", "fold_ids")
#: a bundle's description (``"bundle: PATH"``, then " (preprocessing not applied)" and the temperature, when any):
#: its path is dropped when digests identify the model, the rest is kept
_BUNDLE = re.compile(r"^bundle: .*?((?: \(preprocessing not applied\))?(?: \(temperature \[[^\]]*\]\))?)$")


def _normalized_roi(roi: Any) -> Any:
    """The sliding-window size as compared.

    One size for every axis (``8``, ``[8]`` and ``[8, 8, 8]`` are all "isotropic 8", the same windows on images of
    any dimension) becomes that int; another size per axis stays the list.
    """
    if isinstance(roi, bool) or roi is None:
        return roi
    if isinstance(roi, int):
        return roi
    if isinstance(roi, list) and roi and all(isinstance(v, int) and not isinstance(v, bool) for v in roi):
        return roi[0] if len(set(roi)) == 1 else list(roi)
    return roi


def has_weight_digests(fp: Mapping[str, Any]) -> bool:
    """Whether a fingerprint records the sha256 digests of its model's files (``weights``).

    Args:
        fp: a :func:`prediction_fingerprint`.

    Returns:
        True when ``weights`` is a non-empty list of entries that each have a ``sha256``.

    Example:
        >>> has_weight_digests({"weights": [{"path": "model.pt", "sha256": "ab12"}]}), has_weight_digests({})
        (True, False)
    """
    w = fp.get("weights")
    return isinstance(w, list) and bool(w) and all(isinstance(e, Mapping) and "sha256" in e for e in w)


def _weight_label(entry: Mapping[str, Any]) -> str:
    """A file of ``weights`` in a difference: its name and the start of its digest.

    Relative names are kept as recorded (e.g. nnU-Net's ``fold_0/checkpoint_final.pth``); the full paths stay in the
    fingerprints.
    """
    name = str(entry.get("file"))
    if os.path.isabs(name):
        name = Path(name).name
    return f"{name} (sha256 {str(entry.get('sha256'))[:12]})"


def weight_differences(rule_w: Sequence[Mapping[str, Any]], pred_w: Sequence[Mapping[str, Any]]
                       ) -> list[tuple[str, Any, Any]]:
    """The model files whose sha256 digests differ between a rule and a model or predictions.

    Args:
        rule_w: the ``weights`` the rule recorded (``{"file", "sha256"}`` entries, in recorded order).
        pred_w: the other side's ``weights``.

    Returns:
        ``("weights", rule's file, other file)`` per file whose digest differs, or one entry listing both sides when
        they record different numbers of files; empty when the digests agree.

    Example:
        >>> weight_differences([{"file": "a.pt", "sha256": "ab"}], [{"file": "b.pt", "sha256": "ab"}])
        []
    """
    if len(rule_w) != len(pred_w):
        return [("weights", [_weight_label(e) for e in rule_w], [_weight_label(e) for e in pred_w])]
    return [("weights", _weight_label(a), _weight_label(b)) for a, b in zip(rule_w, pred_w)
            if a.get("sha256") != b.get("sha256")]


def normalize_fingerprint(fp: Mapping[str, Any], digests: bool) -> dict[str, Any]:
    """A fingerprint as :func:`compare_fingerprints` compares it.

    An nnU-Net record without ``activation`` (written before it was recorded) gets the one its ``regions`` imply;
    ``roi`` becomes one int for an isotropic window; ``dropout`` becomes None under a method that samples no dropout
    (neither ``mcdropout`` nor ``ratein``: the layers were inserted but never switched on, the maps are those without
    them); ``measures`` in their current names (:data:`~monai_unc.keys.DEPRECATED_MEASURES`: ``max_softmax``, which
    0.1.0 recorded, is ``one_minus_max_prob``; found by hostile testing: a rule certified on 0.1.0's default maps
    mismatched every prediction of this version); with ``digests`` (both sides record the model files' digests)
    the paths (``checkpoints``, ``model_folder``, a bundle's folder in ``model``) and nnU-Net's ``fold_ids`` are
    dropped, since the digests (one per fold's checkpoint, in fold order) identify the model, and ``weights`` is
    left to the digest comparison; without, ``weights`` is dropped (the model is compared by its paths, as before
    the digests were recorded).

    Args:
        fp: a :func:`prediction_fingerprint`.
        digests: whether both sides record weight digests (:func:`has_weight_digests`).

    Returns:
        A normalised copy.

    Example:
        >>> normalize_fingerprint({"roi": [8, 8, 8], "checkpoints": ["a.pt"]}, digests=True)
        {'roi': 8}
        >>> normalize_fingerprint({"method": "tta", "dropout": 0.1}, digests=False)
        {'method': 'tta', 'dropout': None}
        >>> normalize_fingerprint({"measures": ["predictive_entropy", "max_softmax"]}, digests=False)
        {'measures': ['predictive_entropy', 'one_minus_max_prob']}
    """
    fp = dict(fp)
    if fp.get("producer") == "nnunet-predict" and "activation" not in fp:
        # an nnU-Net record written before the activation was recorded: the one its regions imply
        fp["activation"] = "sigmoid" if fp.get("regions") is not None else "softmax"
    if isinstance(fp.get("measures"), list):  # current names first, then settings_as_compared's order of them
        fp["measures"] = [DEPRECATED_MEASURES.get(m, m) if isinstance(m, str) else m for m in fp["measures"]]
    out = dict(settings_as_compared(fp))  # a rule certified with an unused --dropout matches predictions without it
    if "roi" in out:
        out["roi"] = _normalized_roi(out["roi"])
    out.pop("weights", None)
    if digests:
        for k in _PATH_FIELDS:
            out.pop(k, None)
        m = _BUNDLE.match(str(out.get("model", "")))
        if m:
            out["model"] = "bundle" + m.group(1)
    return out


def compare_fingerprints(rule_fp: Mapping[str, Any], pred_fp: Mapping[str, Any]) -> tuple[str, list]:
    """Compare a rule's prediction fingerprint with that of new predictions.

    Neither side having a record of how its predictions were made is ``"unverified"`` (nothing to compare: the
    caller must say so). One side unknown and the other known is a mismatch (field ``producer``).

    Both sides are normalised first (:func:`normalize_fingerprint`): the same windows spelt ``--roi 8`` or
    ``--roi 8 8 8`` match. When both record the sha256 digests of the model's files (``weights``), the model is
    identified by them, not by its paths: a file whose content differs (a model retrained and saved at the same
    path) is a difference ``("weights", "<rule's file> (sha256 ...)", "<predictions' file> (sha256 ...)")``, and a
    model moved elsewhere still matches. Otherwise (a record written before the digests) the paths are compared as
    they were (:func:`has_weight_digests` tells the caller to say so).

    ``samples_per_source`` (recorded since 0.2.0: the SSN's draws of ``ssn+tta`` / ``ssn+ensemble``) is compared
    when both sides record it. One side without it is compared without it when ``num_samples`` pins the draws (a
    method with ``mcdropout``, ``ratein`` or ``ssn`` alone); for an SSN combined only with ``tta`` / ``ensemble``
    nothing else records the draws, so a rule written before the field is a difference (re-certify, or
    ``--allow-mismatch`` when the draws are known to be the same).

    A side whose maps were read from another run's folder (field ``maps``: :func:`prediction_fingerprint`) is
    compared twice: without ``maps``, and its maps' run against the other side's (its ``maps``, else itself); a
    difference of the maps is named ``maps.<field>``, e.g. ``("maps.num_samples", 16, 24)``.

    Args:
        rule_fp: the rule's recorded fingerprint.
        pred_fp: the predictions' :func:`prediction_fingerprint`.

    Returns:
        ``(status, differences)``: ``("match", [])``, ``("mismatch", [(field, rule value, predictions value)])``
        (``producer`` first) or ``("unverified", [])``.

    Example:
        >>> rule = {"producer": "monai-unc infer", "roi": 8}
        >>> compare_fingerprints(rule, {"producer": "monai-unc infer", "roi": [8, 8, 8]})
        ('match', [])
        >>> compare_fingerprints(rule, {"producer": "monai-unc infer", "roi": [16, 16]})
        ('mismatch', [('roi', 8, [16, 16])])
    """
    unknown = {"producer": "unknown"}
    if "maps" in rule_fp or "maps" in pred_fp:  # maps of another run: each side's maps compared as well
        top_status, top = compare_fingerprints(_without_maps(rule_fp), _without_maps(pred_fp))
        maps_status, maps = compare_fingerprints(_maps_fingerprint(rule_fp), _maps_fingerprint(pred_fp))
        diffs = [*top, *((f"maps.{k}", a, b) for k, a, b in maps)]
        if diffs:
            return "mismatch", diffs
        # predictions or maps of no known producer on both sides: not comparable (found by hostile review:
        # segmentations without records scored with a recorded run's maps read "match")
        return ("unverified", []) if "unverified" in (top_status, maps_status) else ("match", [])
    if dict(rule_fp) in ({}, unknown) and dict(pred_fp) in ({}, unknown):
        return "unverified", []
    digests = has_weight_digests(rule_fp) and has_weight_digests(pred_fp)
    a, b = normalize_fingerprint(rule_fp, digests), normalize_fingerprint(pred_fp, digests)
    key = "samples_per_source"
    if (key in a) != (key in b) and _draws_pinned(a if key not in a else b):  # an older record: num_samples pins it
        a.pop(key, None)
        b.pop(key, None)
    # compared normalised, reported as recorded
    diffs = [(k, rule_fp.get(k), pred_fp.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    if digests:
        diffs += weight_differences(rule_fp["weights"], pred_fp["weights"])
    if diffs:
        # the producer first: the rest follows from it
        diffs.sort(key=lambda t: t[0] != "producer")
        return "mismatch", diffs
    return "match", []


def _without_maps(fp: Mapping[str, Any]) -> dict[str, Any]:
    """A fingerprint without its ``maps`` field (the fingerprint of the run of maps read from another folder)."""
    return {k: v for k, v in fp.items() if k != "maps"}


def _maps_fingerprint(fp: Mapping[str, Any]) -> Mapping[str, Any]:
    """The fingerprint of the run whose maps a fingerprint's scores were read from: ``maps``, else its own."""
    maps = fp.get("maps")
    return maps if isinstance(maps, Mapping) else _without_maps(fp)


def check_prediction_fingerprint(
    rule_fingerprint: Mapping[str, Any],
    rule_regions: Mapping[str, Sequence[int]] | None,
    predictions: str | os.PathLike,
    layout: str,
    case_ids: Sequence[str],
    uncertainty: str | os.PathLike | None = None,
    allow_mismatch: bool = False,
) -> dict[str, Any]:
    """Compare the predictions with the fingerprint and regions a rule recorded (any rule file of ``evaluate``).

    Args:
        rule_fingerprint: the rule's recorded :func:`prediction_fingerprint`.
        rule_regions: the rule's region spec (None for a class rule).
        predictions: the prediction folder to apply the rule to.
        layout: its layout (``"monai-unc"`` or ``"nnunet"``).
        case_ids: the cases the rule will be applied to.
        uncertainty: folder of the maps when not where the layout puts them.
        allow_mismatch: record a mismatch instead of raising.

    Returns:
        The check recorded with the outputs: ``status`` (``"match"`` / ``"mismatch"`` / ...), ``allowed_mismatch``,
        the predictions' fingerprint, the ``differences`` and whether weight digests were ``compared``.

    Raises:
        FingerprintMismatch: the fingerprints or regions differ and ``allow_mismatch`` is False.
    """
    pred_fp = prediction_fingerprint(predictions, layout, list(case_ids), uncertainty)
    status, diffs = compare_fingerprints(rule_fingerprint, pred_fp)
    if not any(k == "regions" for k, _, _ in diffs):  # the regions the rule scores against the recorded ones
        extra = region_differences(rule_regions, prediction_regions(predictions, layout))
        if extra:
            status, diffs = "mismatch", [*diffs, *extra]
    if status == "mismatch" and not allow_mismatch:
        raise FingerprintMismatch(diffs)
    digests = has_weight_digests(rule_fingerprint) and has_weight_digests(pred_fp)
    return {"status": status, "allowed_mismatch": status == "mismatch", "predictions": pred_fp,
            "differences": [{"field": k, "rule": a, "predictions": b} for k, a, b in diffs],
            "weight_digests": "compared" if digests else "unavailable"}


def list_prediction_cases(
    predictions: str | os.PathLike,
    layout: str = "monai-unc",
    *,
    measure: str | None = None,
    uncertainty: str | os.PathLike | None = None,
    images: str | os.PathLike | None = None,
    cases: Sequence[str] | None = None,
    empty: str = "no case to triage",
    regions: Sequence[str] | None = None,
) -> list[CaseFiles]:
    """The cases of a prediction folder (no labels).

    These are every case with a segmentation (``<case>_seg`` for the ``monai-unc`` layout, ``<case>.<ext>`` for
    ``nnunet``), its probabilities when present, the map of ``measure``
    (none without it) and its image (``images``), with absolute paths. Found with :func:`monai_unc.io.match_cases`,
    with the segmentations in the role of the reference, so the files of a case are checked against the
    segmentation's geometry when loaded. Used by triage (:func:`find_prediction_cases`) and by the
    products' commands.

    Args:
        predictions: the prediction folder.
        layout: ``"monai-unc"`` or ``"nnunet"``.
        measure: the measure whose map is listed (None: no map).
        uncertainty: the folder of the maps when not where the layout puts them.
        images: the folder of the input images, or None.
        cases: keep only these case ids (None: every case).
        empty: the start of the error message of a folder without cases.
        regions: the region names of a region-based rule, in its order: maps written one file per region
            (``<case>_<measure>_<region>``) are read too (:func:`monai_unc.io.match_cases`).

    Returns:
        The cases' files, with absolute paths (the segmentation also as ``label``).

    Raises:
        ValueError: ``layout`` is not one of :data:`monai_unc.io.LAYOUTS`.
        FileNotFoundError: ``predictions`` is not a folder.
        CaseError: no segmentation found, a case of ``cases`` has no prediction, or files of a case are missing.
        ValueError: the folder is an ``infer`` run that is still written, unfinished or made with two settings
            (:func:`check_finished_predictions`, on the cases listed).
    """
    _check_layout(layout)
    pred = input_folder(predictions, "predictions")
    seg_suffix = LAYOUTS[layout]["seg_suffix"]
    try:
        found = match_cases(pred, pred, layout=layout, label_suffix=seg_suffix, uncertainty=uncertainty,
                            measures=None if measure is None else [measure], images=images, missing_hint=None,
                            regions=regions)
    except CaseError as e:
        if "no label volume" in str(e):
            what = f"<case>{seg_suffix}.nii.gz" if seg_suffix else "<case>.nii.gz"
            raise CaseError(f"no segmentation ({what}) found in {pred}: is it the output folder of 'monai-unc infer' "
                            f"(--layout monai-unc) or 'monai-unc nnunet-predict' (--layout nnunet)?") from None
        raise
    for f in found:  # absolute paths: the outputs list them for the pages, which may be built from elsewhere
        f.maps = {m: tuple(x.resolve() for x in p) if isinstance(p, tuple) else p.resolve()
                  for m, p in f.maps.items() if m == measure} if measure is not None else {}
        f.label, f.seg = f.label.resolve(), None if f.seg is None else f.seg.resolve()
        f.probs = None if f.probs is None else f.probs.resolve()
        f.image = None if f.image is None else f.image.resolve()
    if cases is not None:
        wanted = [str(c) for c in cases]
        have = {f.case_id for f in found}
        missing = sorted(set(wanted) - have)
        if missing:
            raise CaseError(f"cases: {len(missing)} case(s) have no prediction in {pred}, e.g. {missing[:5]}")
        wanted_set = set(wanted)  # once, not per case
        found = [f for f in found if f.case_id in wanted_set]
    if not found:
        raise CaseError(f"{empty} in {pred}")
    # the cases of one finished infer run, as evaluate reads them (found by hostile testing: triage and the products'
    # commands read a folder a live infer was writing, or one left mixed by an interrupted `infer --overwrite`)
    check_finished_predictions(pred, layout, [f.case_id for f in found], uncertainty)
    return found


# ----------------------------------------------------------------------------------------------------------------
# the calibration cases' geometry (every fitted rule: the referral rule, a product's rule file)
# ----------------------------------------------------------------------------------------------------------------
#: the fields of a rule file's ``geometry``: the calibration cases' voxel spacing (mm, per axis) and voxel counts,
#: low and high (:func:`calibration_geometry`)
GEOMETRY_FIELDS = ("spacing_min", "spacing_max", "voxels_min", "voxels_max")
#: the relative allowance of :func:`case_geometry_warning` on a spacing: recorded with 4 significant digits
GEOMETRY_RTOL = 1e-3


def _geometry_shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _spacing_of(value: Any) -> list[float] | None:
    """A spacing as a list of floats: ``"1.5x1x2"`` (a ``metrics.csv`` / triage row's text) or numbers; else None."""
    try:
        parts = str(value).split("x") if isinstance(value, str) else list(value)
        out = [float(x) for x in parts]
    except (TypeError, ValueError):
        return None
    return out if out and all(math.isfinite(s) and s > 0 for s in out) else None


def calibration_geometry(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The range of the calibration cases' voxel spacing and voxel counts, from their ``metrics.csv`` rows.

    What a fitted rule records as ``geometry`` (``referral_rule.json``, a product's rule file), so that a new case
    resampled otherwise than its calibration cases is named when the rule is applied (:func:`case_geometry_warning`).

    Args:
        rows: the rows of the calibration cases (``spacing``: ``"1.5x1x2"`` in mm, ``voxels``: the spatial voxel
            count).

    Returns:
        ``{"spacing_min", "spacing_max"}`` (per axis, mm) and ``{"voxels_min", "voxels_max"}``, or None when there is
        no row, a row lacks them or their axes differ.

    Example:
        >>> calibration_geometry([{"spacing": "1x1x2", "voxels": 8}, {"spacing": "1.5x1x2", "voxels": 27}])
        {'spacing_min': [1.0, 1.0, 2.0], 'spacing_max': [1.5, 1.0, 2.0], 'voxels_min': 8, 'voxels_max': 27}
    """
    try:
        spacing = [_spacing_of(r["spacing"]) for r in rows]
        voxels = [int(r["voxels"]) for r in rows]
    except (KeyError, TypeError, ValueError):  # a row without them
        return None
    if not rows or any(s is None or len(s) != len(spacing[0]) for s in spacing) or min(voxels) < 1:  # type: ignore
        return None
    axes = list(zip(*spacing))  # type: ignore[misc]
    return {"spacing_min": [min(a) for a in axes], "spacing_max": [max(a) for a in axes],
            "voxels_min": min(voxels), "voxels_max": max(voxels)}


def read_geometry(value: Any, name: str = "geometry") -> dict[str, Any] | None:
    """A rule file's ``geometry`` field (untrusted input), checked: the value :func:`calibration_geometry` gives.

    Args:
        value: the field as read (None: the rule recorded no geometry, as files written before it was recorded).
        name: how errors name the field.

    Returns:
        The geometry with plain floats and ints, or None.

    Raises:
        ValueError: naming the field (``geometry.<field>``): not an object of exactly :data:`GEOMETRY_FIELDS`, a
            spacing that is not a list of 1 to 4 finite positive numbers (mm), a voxel count that is not a positive
            integer, spacings of different numbers of axes, or minima above maxima.

    Example:
        >>> read_geometry({"spacing_min": [1, 1], "spacing_max": [1, 2], "voxels_min": 4, "voxels_max": 9})
        {'spacing_min': [1.0, 1.0], 'spacing_max': [1.0, 2.0], 'voxels_min': 4, 'voxels_max': 9}
    """
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != set(GEOMETRY_FIELDS):
        raise ValueError(f"field {name!r} must be an object of {list(GEOMETRY_FIELDS)}, got {_geometry_shown(value)}")
    lo, hi = value["spacing_min"], value["spacing_max"]
    for key, v in (("spacing_min", lo), ("spacing_max", hi)):
        if not isinstance(v, (list, tuple)) or not 1 <= len(v) <= 4 or not all(is_finite_real(x) and x > 0
                                                                                 for x in v):
            raise ValueError(f"field '{name}.{key}' must be a list of positive spacings (mm), got {_geometry_shown(v)}")
    if len(lo) != len(hi):
        raise ValueError(f"field '{name}.spacing_min' must have as many axes as '{name}.spacing_max', got "
                         f"{_geometry_shown(lo)} and {_geometry_shown(hi)}")
    if any(a > b for a, b in zip(lo, hi)):
        raise ValueError(f"field '{name}.spacing_min' must be at most '{name}.spacing_max' on each axis, got "
                         f"{_geometry_shown(lo)} and {_geometry_shown(hi)}")
    for key in ("voxels_min", "voxels_max"):
        v = value[key]
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
            raise ValueError(f"field '{name}.{key}' must be a positive count of voxels, got {_geometry_shown(v)}")
    if value["voxels_min"] > value["voxels_max"]:
        raise ValueError(f"field '{name}.voxels_min' must be at most '{name}.voxels_max', got {value['voxels_min']} "
                         f"and {value['voxels_max']}")
    return {"spacing_min": [float(x) for x in lo], "spacing_max": [float(x) for x in hi],
            "voxels_min": int(value["voxels_min"]), "voxels_max": int(value["voxels_max"])}


def case_geometry_warning(geometry: Mapping[str, Any] | None, case_id: str, spacing: Any, voxels: Any, *,
                          rule: str, stacklevel: int = 2) -> str | None:
    """Warn when a new case's voxel spacing or voxel count lies outside the range of a rule's calibration cases.

    The one check of every fitted rule applied to a new case (the referral rule in ``triage``, a product's rule in
    its command). A rule's guarantee holds for new cases exchangeable with its calibration cases; a case resampled
    otherwise (another spacing, a cropped or padded field of view) is not one. The recorded spacing has 4
    significant digits, so a relative allowance of :data:`GEOMETRY_RTOL` is given. Nothing is checked for a rule
    that recorded no geometry (``geometry`` None: written before it was recorded), and a spacing or voxel count the
    case does not have (None) is not checked.

    Args:
        geometry: the rule's ``geometry`` (:func:`read_geometry`), or None.
        case_id: the case, named by the warning.
        spacing: its voxel spacing in mm per axis (numbers, or the ``"1.5x1x2"`` text of a row), or None.
        voxels: its spatial voxel count, or None (not a finite number: not checked).
        rule: how the warning names the rule (``"referral rule"``, a product's rule).
        stacklevel: of the ``UserWarning`` (2: the caller).

    Returns:
        The warning's text (also issued as a ``UserWarning``), or None when the case lies inside the range.

    Example:
        >>> geo = {"spacing_min": [1.0, 1.0], "spacing_max": [1.0, 1.0], "voxels_min": 16, "voxels_max": 16}
        >>> case_geometry_warning(geo, "a", "1x1", 16, rule="referral rule") is None
        True
    """
    if geometry is None:
        return None
    lo, hi = geometry["spacing_min"], geometry["spacing_max"]
    problems = []
    if spacing is not None:
        got = _spacing_of(spacing)
        if got is None or len(got) != len(lo) or any(s < a * (1 - GEOMETRY_RTOL) or s > b * (1 + GEOMETRY_RTOL)
                                                     for s, a, b in zip(got, lo, hi)):
            shown = " to ".join("x".join(f"{v:.4g}" for v in x) for x in ((lo,) if lo == hi else (lo, hi)))
            mine = str(spacing) if got is None else "x".join(f"{v:.4g}" for v in got)
            problems.append(f"voxel spacing {mine} mm (calibration cases: {shown})")
    if is_finite_real(voxels) and not geometry["voxels_min"] <= int(voxels) <= geometry["voxels_max"]:
        rng = (f"{geometry['voxels_min']}" if geometry["voxels_min"] == geometry["voxels_max"]
               else f"{geometry['voxels_min']} to {geometry['voxels_max']}")
        problems.append(f"{int(voxels)} voxels (calibration cases: {rng})")
    if not problems:
        return None
    text = (f"case {case_id!r}: {' and '.join(problems)}: resampled or cropped otherwise than the {rule}'s "
            "calibration cases, so its guarantee (for new cases like them) may not hold")
    warnings.warn(text, UserWarning, stacklevel=stacklevel + 1)
    return text


def rule_digest(body: Mapping[str, Any]) -> str:
    """The content digest of a rule file's JSON object.

    It is ``"sha256:<hex>"`` of its canonical JSON (sorted keys, no spaces) without the ``digest`` field itself and
    without the ``signature`` (:mod:`monai_unc.io.signing`, which signs this digest). It tells an edited or corrupted
    file from the one written; it is no signature (whoever edits the file can recompute it), which is why the
    certificate is also recomputed (:meth:`ReferralRule.verify_certificate`) and the file is signed
    (:func:`write_signed_json`, :func:`check_signature`).

    Args:
        body: the rule's JSON object (:meth:`ReferralRule.to_json`, or a file's parsed content).

    Returns:
        ``"sha256:"`` and 64 hex digits.

    Example:
        >>> rule_digest({"a": 1, "digest": "x"}) == rule_digest({"a": 1})
        True
        >>> rule_digest({"a": 1})[:7]
        'sha256:'
    """
    return content_digest(body, ("digest", SIGNATURE_FIELD))


def check_document(doc: Any, *, fmt: str, versions: Collection[int], what: str, source: str) -> None:
    """Check that parsed JSON is a document of format ``fmt`` in a version this package reads.

    Args:
        doc: the parsed JSON (untrusted).
        fmt: the expected ``format`` field (e.g. ``"monai-unc referral rule"``).
        versions: the ``format_version`` values this version reads.
        what: what such a document is, in words (e.g. ``"referral rule"``).
        source: how the messages name the document (e.g. ``"referral rule <path>"``).

    Raises:
        ValueError: ``doc`` is not a JSON object, its ``format`` is not ``fmt`` or its ``format_version`` is not one
            of ``versions``; the message starts with ``source``.

    Example:
        >>> check_document({"format": "f", "format_version": 1}, fmt="f", versions=(1,), what="f file", source="x")
        >>> check_document({"format": "f", "format_version": 2}, fmt="f", versions=(1,), what="f file", source="x")
        Traceback (most recent call last):
        ...
        ValueError: x: format_version 2 is not supported (this monai-unc reads 1); upgrade monai-unc
    """
    if not isinstance(doc, Mapping):
        raise ValueError(f"{source} is not a {fmt} file: expected a JSON object, got {type(doc).__name__}")
    got = doc.get("format")
    if got != fmt:
        article = "an" if what[:1].lower() in "aeiou" else "a"
        raise ValueError(f"{source} is not a {fmt} file: field 'format' is {got!r:.80}, so it is not {article} {what}")
    ver = doc.get("format_version")
    if isinstance(ver, bool) or not isinstance(ver, int) or ver not in versions:
        low, high = min(versions), max(versions)
        reads = str(low) if low == high else f"{low} to {high}"
        newer = "; upgrade monai-unc" if isinstance(ver, int) and not isinstance(ver, bool) and ver > high else ""
        raise ValueError(f"{source}: format_version {ver!r:.80} is not supported (this monai-unc reads {reads}){newer}")


def check_digest(doc: Mapping[str, Any], *, source: str, written_by: str, required: bool = True) -> bool:
    """Check a document's ``digest`` field against its content (:func:`rule_digest`).

    Args:
        doc: the parsed JSON object.
        source: how the message names the document.
        written_by: what writes such a file (the message says to write it again with it).
        required: whether a document without a digest (written before digests were recorded) is refused.

    Returns:
        Whether a digest was compared (False: none recorded and ``required`` is False).

    Raises:
        ValueError: the digest does not match the content (or is missing and ``required``).

    Example:
        >>> doc = {"a": 1}
        >>> check_digest({**doc, "digest": rule_digest(doc)}, source="x", written_by="w")
        True
        >>> check_digest(doc, source="x", written_by="w", required=False)
        False
    """
    digest = doc.get("digest")
    if digest is None and not required:
        return False
    if digest != rule_digest(doc):
        raise ValueError(f"{source} does not match its digest (field 'digest'): the file was edited or corrupted; "
                         f"write it again with {written_by}")
    return True


def _no_constant(name: str) -> Any:
    raise ValueError(f"the constant {name} is not JSON")


#: the limits of an untrusted JSON file (:func:`read_checked_json`, :func:`decode_untrusted_json`,
#: :func:`parse_untrusted_json`): bytes, nesting depth, digits of one number
MAX_DOCUMENT_BYTES = 256 * 2**20
MAX_DOCUMENT_DEPTH = 64
MAX_NUMBER_DIGITS = 100
#: a string, or an unclosed one to the end of the text: one pass that never rescans (an attempt that fails at each of
#: many unclosed quotes, each scanning to the end, made the depth check quadratic on ``\"\"\"...``)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _parse_int(text: str) -> int:
    if len(text) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number has {len(text)} digits (at most {MAX_NUMBER_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > MAX_NUMBER_DIGITS:
        raise ValueError(f"a number has {len(text)} characters (at most {MAX_NUMBER_DIGITS})")
    value = float(text)
    if not math.isfinite(value):  # 1e400 reads as inf: the constant Infinity by another name
        raise ValueError(f"the number {text} is out of range (it reads as {value})")
    return value


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text, counted without parsing (strings skipped).

    Args:
        text: JSON text (untrusted).

    Returns:
        The nesting depth (0 for a scalar).

    Example:
        >>> json_depth('{"a": [1, {"b": "]]]"}]}')
        3
    """
    # linear: each character is read once by the string pass and once by the bracket pass (an unclosed string runs
    # to the end of the text: such text is not JSON, and json.loads says so)
    brackets = _NOT_BRACKETS.sub("", _STRING.sub("", text))
    return max(0, max(accumulate(map(_STEP.__getitem__, brackets)), default=0))


def parse_untrusted_json(text: str, source: str) -> Any:
    r"""Strict JSON of an untrusted file, with limits.

    No ``NaN`` / ``Infinity`` (nor a number beyond a float's range such as ``1e400``, which would read as
    infinity), no key given twice in one object, no lone surrogate escape (``"\ud800"``: no UTF-8 text, so no
    digest, holds it), at most :data:`MAX_DOCUMENT_BYTES` characters, :data:`MAX_DOCUMENT_DEPTH` levels of nesting
    and :data:`MAX_NUMBER_DIGITS` characters per number, so that a hostile file is one error line, never a
    ``RecursionError`` or Python's integer-limit message. The checks take time linear in the text's length (the depth
    is counted in one pass, before parsing). The first two keep a signature honest: the signed digest is
    that of the parsed content, and an infinity (written as ``null``) or a key given twice (Python keeps the last one,
    a reader may show the first) would let a file be edited without changing it.

    Args:
        text: the file's text.
        source: how the message names the file.

    Returns:
        The parsed value.

    Raises:
        ValueError: one line starting with ``source``.

    Example:
        >>> parse_untrusted_json('{"a": [1, 2.5]}', "x")
        {'a': [1, 2.5]}
        >>> parse_untrusted_json("[" * 100 + "]" * 100, "x")
        Traceback (most recent call last):
        ...
        ValueError: x is not readable JSON: it is nested 100 levels deep (at most 64)
    """
    if len(text) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"{source} is not readable JSON: it has {len(text)} characters (at most "
                         f"{MAX_DOCUMENT_BYTES})")
    depth = json_depth(text)
    if depth > MAX_DOCUMENT_DEPTH:
        raise ValueError(f"{source} is not readable JSON: it is nested {depth} levels deep (at most "
                         f"{MAX_DOCUMENT_DEPTH})")
    try:
        doc = json.loads(text, parse_constant=_no_constant, parse_int=_parse_int, parse_float=_parse_float,
                         object_pairs_hook=lambda pairs: unique_json_keys(
                             pairs, "the key {key!r:.80} is given twice in one object"))
        if _SURROGATE_ESCAPE.search(text):  # "\ud800" alone parses to a string that no UTF-8 text (the digest) holds
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{source} is not readable JSON: it holds a lone surrogate escape (\\ud800-\\udfff), "
                         "which is not Unicode text") from None
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{source} is not readable JSON: it is not valid JSON ({type(e).__name__}: {e})") from None
    return doc


def decode_untrusted_json(raw: bytes, source: str) -> Any:
    """The strict JSON (:func:`parse_untrusted_json`) of an untrusted file's bytes, which must be UTF-8 text.

    Args:
        raw: the file's bytes (a caller that also digests them reads them once).
        source: how the message names the file.

    Returns:
        The parsed value.

    Raises:
        ValueError: one line starting with ``source``: more than :data:`MAX_DOCUMENT_BYTES` bytes, not UTF-8 text,
            or not strict JSON within the limits.

    Example:
        >>> decode_untrusted_json(b'{"a": 1}', "x")
        {'a': 1}
        >>> decode_untrusted_json(bytes([123, 255, 125]), "x")
        Traceback (most recent call last):
        ...
        ValueError: x is not readable JSON: it is not UTF-8 text (invalid start byte at byte 1)
    """
    if len(raw) > MAX_DOCUMENT_BYTES:  # before decoding: a huge file is refused, not copied into a string first
        raise ValueError(f"{source} is not readable JSON: it has {len(raw)} bytes (at most {MAX_DOCUMENT_BYTES})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{source} is not readable JSON: it is not UTF-8 text ({e.reason} at byte {e.start})"
                         ) from None
    return parse_untrusted_json(text, source)


def read_untrusted_json(path: str | os.PathLike, source: str) -> tuple[bytes, Any]:
    """An untrusted JSON file's bytes and its strict JSON (:func:`decode_untrusted_json`): the one reader of such files.

    The size is checked before the file is read, so a huge file is refused without being loaded.

    Args:
        path: the file.
        source: how the messages name the file.

    Returns:
        ``(raw, value)``: the bytes read (a caller that digests them reads them once) and the parsed value.

    Raises:
        ValueError: one line starting with ``source``: the file is not readable (a missing file included), has more
            than :data:`MAX_DOCUMENT_BYTES` bytes, is not UTF-8 text or not strict JSON within the limits.

    Example:
        >>> import pathlib, tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = pathlib.Path(folder) / "doc.json"
        ...     _ = path.write_text('{"a": [1, 2.5]}')
        ...     read_untrusted_json(path, "doc")
        (b'{"a": [1, 2.5]}', {'a': [1, 2.5]})
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise ValueError(f"{source} is not readable JSON: it has {size} bytes (at most {MAX_DOCUMENT_BYTES})")
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"{source} is not readable: {type(e).__name__}: {e.strerror or e}") from None
    return raw, decode_untrusted_json(raw, source)


def read_checked_json(
    path: str | os.PathLike,
    *,
    fmt: str,
    versions: Collection[int],
    what: str,
    written_by: str,
    source: str | None = None,
    digest: bool = True,
) -> dict[str, Any]:
    """Read a fitted file (a referral rule, a product's rule file or artifact) as untrusted strict JSON.

    The file must be UTF-8 JSON without the constants ``NaN`` / ``Infinity``, an object of format ``fmt`` in one of
    ``versions`` (:func:`check_document`) and, with ``digest``, match its content digest (:func:`check_digest`).
    Nothing in it is imported or run.

    Args:
        path: the file.
        fmt: the expected ``format`` field.
        versions: the ``format_version`` values this version reads.
        what: what the file is, in words (e.g. ``"referral rule"``).
        written_by: what writes such a file (e.g. ``"monai-unc evaluate --target-risk"``), named by the messages.
        source: how the messages name the file (default ``"<what> <path>"``).
        digest: compare the digest (False: the caller does, with :func:`check_digest`, e.g. after checks that name
            the field an edit changed).

    Returns:
        The parsed JSON object.

    Raises:
        FileNotFoundError: no file at ``path``; ``IsADirectoryError``: a folder at ``path``.
        ValueError: starting with ``source``: the file is not readable, not strict JSON, not an object of the format
            and a supported version, or does not match its digest.
    """
    path = Path(path)
    if not path.is_file():
        # a folder (e.g. the evaluation folder given for its rule) is no "not found" (found by a probe of every command)
        check_entry_kind(path, f"{what} file", folder=False)
        raise FileNotFoundError(f"{what} not found: no {what} file at {path} (written by {written_by})")
    source = f"{what} {path}" if source is None else source
    doc = read_untrusted_json(path, source)[1]
    check_document(doc, fmt=fmt, versions=versions, what=what, source=source)
    if digest:
        check_digest(doc, source=source, written_by=written_by)
    return doc


class RuleRead:
    """A rule file read, parsed and verified once for a command: the rule it holds, or why it was refused.

    A command that needs a rule file at several of its steps (the layout of the predictions, the checks before any
    work, the run) reads it once here and passes this object on, so that every step acts on the one version read:
    in earlier versions a file rewritten between two reads (by another process, or a user editing it) gave a layout
    taken from one file, unverified, and a verified rule of another. A refusal of the file (missing, malformed, not
    signed as trusted) is kept and raised by :meth:`get`, where the command refuses the file, so that the order of
    the command's checks is unchanged.

    Args:
        path: the rule file.
        load: its checked reader, ``load(path, trust)`` (e.g. :meth:`~monai_unc.evaluation.triage.ReferralRule.load`).
        trust: the signatures the reader accepts (:class:`~monai_unc.io.signing.Trust`), or None (not checked); a
            ``trust`` the reader refuses is a refusal like the file's.

    Attributes:
        path: the rule file.
        trust: the ``trust`` it was verified with.
        rule: what ``load`` returned, or None when it refused the file.
        error: the refusal (``ValueError``, ``TypeError`` or ``OSError``), or None.

    Example:
        >>> read = RuleRead("no/such/rule.json", lambda path, trust: json.loads(path.read_text()))
        >>> read.rule is None, read.fingerprint is None, type(read.error).__name__
        (True, True, 'FileNotFoundError')
    """

    def __init__(self, path: str | os.PathLike, load: Any, trust: Trust | None = None) -> None:
        if isinstance(path, RuleRead) or not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be the path of a rule file, got {type(path).__name__}")
        if not callable(load):
            raise TypeError(f"load must be the rule file's reader, load(path, trust), got {load!r:.80}")
        self.path = Path(path)
        self.trust = trust
        self.rule: Any = None
        self.error: BaseException | None = None
        self._traceback = None
        try:
            self.rule = load(self.path, trust)
        except (ValueError, TypeError, OSError) as e:  # a refusal of the file: raised where the command refuses it
            self.error = e
            self._traceback = e.__traceback__  # each raise starts from the reader's frames again (get)

    def __repr__(self) -> str:
        state = "refused" if self.error is not None else type(self.rule).__name__
        return f"RuleRead({str(self.path)!r}: {state})"

    @property
    def fingerprint(self) -> Mapping[str, Any] | None:
        """The verified rule's ``fingerprint``, or None when the file was refused.

        What :func:`~monai_unc.workflows.apply.layout_from_rule` reads (of a refused file, the layout its text
        names: the command refuses the file, and acts on none of it).
        """
        return None if self.error is not None else getattr(self.rule, "fingerprint", None)

    def get(self, trust: Trust | None = None, kind: type | None = None) -> Any:
        """The verified rule, or the refusal of the file raised (the same exception each time).

        Args:
            trust: the signatures the caller requires, or None (none): a ``trust`` must be the one the file was
                verified with (``TypeError`` otherwise: a file read without checking its signature, or checked against
                other keys, is never passed off as checked).
            kind: the class the rule must be (None: any).

        Returns:
            The rule ``load`` returned.

        Raises:
            TypeError: naming ``rule``, when ``trust`` is not the one the file was read with or the rule is not a
                ``kind``; the file's refusal otherwise.
        """
        if trust is not None and trust != self.trust:
            raise TypeError(f"rule: {self!r} was verified with trust={self.trust!r}, not with the trust={trust!r} "
                            "given here: read it again with that trust")
        if self.error is not None:
            raise self.error.with_traceback(self._traceback)
        if kind is not None and not isinstance(self.rule, kind):
            raise TypeError(f"rule: {self!r} holds a {type(self.rule).__name__}, not a {kind.__name__}")
        return self.rule


def rule_file_path(rule: Any, kind: type) -> str | None:
    """The resolved path of a rule file given as its path or as a :class:`RuleRead` of it; None for a loaded rule.

    Args:
        rule: a loaded ``kind``, a :class:`RuleRead` or the file's path.
        kind: the rule's class (e.g. :class:`~monai_unc.evaluation.triage.ReferralRule`).

    Returns:
        The path (what a command checks its outputs against and records), or None when ``rule`` is a ``kind``.

    Example:
        >>> rule_file_path("rules/../rule.json", dict) == str(Path("rule.json").resolve())
        True
    """
    if isinstance(rule, kind):
        return None
    return str((rule.path if isinstance(rule, RuleRead) else Path(rule)).resolve())


def load_rule(rule: Any, kind: Any, trust: Trust | None = None) -> Any:
    """The rule a command's step acts on, however the rule was given.

    A loaded ``kind`` as given, a :class:`RuleRead`'s verified rule, or the file read by ``kind.load(path, trust)``.

    Args:
        rule: a loaded ``kind``, a :class:`RuleRead` (read with ``trust``) or the file's path.
        kind: the rule's class, whose ``load(path, trust)`` reads and verifies its file.
        trust: the signatures the command accepts, or None (not checked).

    Returns:
        The rule.

    Raises:
        The file's refusal (that of ``kind.load``, or the one a :class:`RuleRead` kept); ``TypeError`` as
        :meth:`RuleRead.get`.

    Example:
        >>> load_rule({"a": 1}, dict)
        {'a': 1}
    """
    if isinstance(rule, kind):
        return rule
    if isinstance(rule, RuleRead):
        return rule.get(trust, kind)
    return kind.load(rule, trust)


def write_signed_json(path: str | os.PathLike, body: Mapping[str, Any], key: str | os.PathLike | None = None
                      ) -> Path:
    """Write a fitted file (a rule, a product's artifact) signed, atomically: the one writer of certified files.

    The ``signature`` field (:func:`monai_unc.io.signing.sign_digest`) signs :func:`rule_digest` of the content with
    ``key``, by default :func:`monai_unc.io.signing.default_signing_key` (``$MONAI_UNC_SIGNING_KEY``, else the user's
    key, created on first use). When no key can be made (e.g. a read-only configuration folder) the file is written
    unsigned with a warning: readers then refuse it unless told to accept unsigned files. A key that is named
    (``key``, ``$MONAI_UNC_SIGNING_KEY``) but missing or no Ed25519 private key is refused (nothing is written), and so
    is a key pair whose public key file is not the private key's: what it signed would be refused where that public
    key is trusted, this machine first.

    Args:
        path: the file.
        body: the JSON object (with or without its ``digest``; a ``signature`` it holds is replaced).
        key: the private key file, or None (the default key).

    Returns:
        The path written.

    Raises:
        KeyPairMismatchError: the default key's public key file is another key's (naming both files and the remedy).
        UnprotectedKeyError: other users can read or write the private key (naming it and the ``chmod``).
        ValueError: ``key`` or ``$MONAI_UNC_SIGNING_KEY`` names no readable Ed25519 private key (naming it).
    """
    doc = {k: v for k, v in body.items() if k != SIGNATURE_FIELD}
    try:
        key_file = default_signing_key() if key is None else key
        doc[SIGNATURE_FIELD] = sign_digest(rule_digest(json_safe(doc)), key_file)  # type: ignore[arg-type]
    except (KeyPairMismatchError, UnprotectedKeyError):
        raise  # a key that exists but would sign what this machine refuses, or that others could have copied: mended
        # by the user, not skipped
    except (OSError, ValueError) as e:
        if key is not None or os.environ.get("MONAI_UNC_SIGNING_KEY"):  # found by hostile testing: a key named
            # (a typo, another key type) fell back to an unsigned file with a warning, and the command exited 0
            raise ValueError(f"{path} is not written: no usable signing key ({e})") from None
        warnings.warn(f"{path} is written unsigned: no signing key ({e}); the commands that apply it refuse it "
                      "unless given --allow-unsigned", UserWarning, stacklevel=2)
    return atomic_write_json(path, doc)


def check_signature(doc: Mapping[str, Any], trust: Trust, source: str) -> str:
    """Verify a fitted file's signature against the trusted keys (:func:`monai_unc.io.signing.verify_signature`).

    Args:
        doc: the parsed file.
        trust: the trusted keys and whether unsigned files are accepted.
        source: how messages name the file.

    Returns:
        How it was checked, one line (``"signed by ..."`` or ``"UNSIGNED: ..."``).

    Raises:
        TypeError: ``trust`` is no :class:`~monai_unc.io.signing.Trust`.
        ValueError: unsigned (not allowed), a signature that does not match, or an untrusted key.
    """
    return verify_signature(doc, rule_digest(json_safe(doc)), trust, source)
