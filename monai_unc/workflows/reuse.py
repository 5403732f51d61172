"""Predict new cases with the settings a rule was certified with (``monai-unc infer --settings-from RULE``).

The rule files that ``monai-unc evaluate`` certifies (the referral rule ``referral_rule.json`` of ``--target-risk``
and the artifact of every cohort product with an :attr:`~monai_unc.product.CohortProduct.artifact_format`) record how
their calibration predictions were made: the prediction fingerprint
(:func:`~monai_unc.io.provenance.prediction_fingerprint`), which the commands that apply them compare with that of the
new predictions. :func:`read_rule_settings` reads the ``infer``
options of that fingerprint (``--method``, the number of samples, ``--roi``, ``--overlap``, ``--intensity``,
``--measures``, ``--activation``, ``--regions``, ``--dropout``, ``--tta-noise``, ``--ratein-target``) and the sha256
digests of the model's files; :func:`merge_rule_settings` puts them in place of the options not given, refusing one
given that contradicts the rule. The model itself (``--model``, ``--bundle``, ``--network``, ``--checkpoint``) is
still given by the user; :func:`check_rule_model` refuses one whose files differ from those the rule recorded, and
:func:`rule_samples` turns the rule's samples per case into ``--samples`` for the loaded model.

The rule file is untrusted input: it is read with the package's checked readers (format, version, digest, structure:
each product's :meth:`~monai_unc.product.CohortProduct.artifact_fingerprint`), each field taken is validated here,
and nothing it names is imported or run. The seed is not part of the fingerprint (another seed keeps new cases
exchangeable): ``--seed`` stays the user's.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._utils import is_finite_real, is_int
from ..io import check_entry_kind
from ..io.provenance import has_weight_digests, normalize_fingerprint, read_untrusted_json, weight_differences
from ..io.signing import Trust
from ..keys import DEFAULT_RATEIN_TARGET, DEPRECATED_MEASURES, DROPOUT_TOKENS, MEASURES
from ..product import registered_products
from .options import METHOD_TOKENS, known_method_tokens, method_tokens
from .prepare import read_region_spec

__all__ = ["RULE_OPTIONS", "RuleSettings", "check_rule_model", "merge_rule_settings", "read_rule_settings",
           "rule_samples"]

#: the ``infer`` options (argparse destinations) a rule's fingerprint sets, with their command-line names
RULE_OPTIONS = {"method": "--method", "roi": "--roi", "overlap": "--overlap", "intensity": "--intensity",
                "measures": "--measures", "activation": "--activation", "regions": "--regions",
                "dropout": "--dropout", "tta_noise": "--tta-noise", "ratein_target": "--ratein-target"}
#: the fields of an ``infer`` run's prediction fingerprint (:func:`~monai_unc.io.provenance.prediction_fingerprint`):
#: another one with a value was recorded by a newer version, and no run of this one reproduces it
_FINGERPRINT_FIELDS = frozenset({
    "producer", "model", "checkpoints", "method", "num_samples", "mi_meaning", "measures", "roi", "overlap",
    "activation", "temperature", "intensity", "dropout", "tta_noise", "ratein_target", "samples_per_source",
    "weights", "regions", "maps", "dropout_masks"})
_INTENSITIES = ("none", "max", "minmax", "zscore")
_ACTIVATIONS = ("softmax", "sigmoid")


@dataclass
class RuleSettings:
    """The ``infer`` settings a rule was certified with.

    Attributes:
        source: how messages name the rule (``"referral rule <path>"``).
        options: the ``infer`` options by argparse destination (:data:`RULE_OPTIONS`), as ``infer`` takes them
            (``activation`` ``"none"`` for a network that outputs probabilities; ``roi`` None or a list of sizes).
        num_samples: the samples per case of the calibration predictions (the product over the method's sources).
        weights: the sha256 digests of the model's files ``[{"file", "sha256"}]``, or None (a rule written before
            they were recorded).
        samples_per_source: the SSN's ``--samples`` latent draws per sample of ``ssn+tta`` / ``ssn+ensemble``
            (which ``num_samples`` does not show), or None (another method, or a rule written before they were
            recorded).
        needs_probabilities: the rule is applied to the new cases' probabilities
            (:attr:`~monai_unc.product.CohortProduct.artifact_needs_probabilities`): ``--no-probs`` is refused.
        model: the description of the rule's model (``"bundle: PATH (preprocessing not applied)"``, ``"network:
            UNet"``, ...; :attr:`~monai_unc.workflows.models.LoadedModel.description`), or None (not recorded).
    """

    source: str
    options: dict[str, Any]
    num_samples: int
    weights: list[dict[str, str]] | None = field(default=None)
    samples_per_source: int | None = None
    model: str | None = None
    needs_probabilities: bool = False


def _bad(source: str, name: str, value: Any, expected: str) -> ValueError:
    text = json.dumps(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return ValueError(f"{source}: fingerprint field '{name}' must be {expected}, got {text}")


def _takes_trust(reader: Any) -> bool:
    """Whether a product's ``artifact_fingerprint`` takes the ``trust`` argument: a parameter of that name, or ``**``.

    In earlier versions any second parameter counted, and a reader ``(path, strict=False)`` was given the
    trusted keys for ``strict`` (no signature checked, nothing said); ``trust`` is now passed by name.
    """
    try:
        params = list(inspect.signature(reader).parameters.values())
    except (TypeError, ValueError):
        return True  # no signature to read (a builtin): called as documented
    return any(p.kind == p.VAR_KEYWORD or (p.name == "trust" and p.kind != p.POSITIONAL_ONLY) for p in params)


def _load_fingerprint(path: Path, trust: Trust | None) -> tuple[str, dict[str, Any], bool]:
    """The source name, the prediction fingerprint and the probabilities flag of a product's rule file.

    The fingerprint is read by the product's checked reader; the flag says whether the rule is applied to
    probabilities (:attr:`~monai_unc.product.CohortProduct.artifact_needs_probabilities`).
    """
    if not path.is_file():
        check_entry_kind(path, "--settings-from rule", folder=False)
        raise FileNotFoundError(f"--settings-from: no rule file at {path}")
    # which reader: the format field (each reader then checks the whole file); its size checked before it is read
    # (found by hostile review 60: a multi-gigabyte file was read whole, as text, before any check)
    head = read_untrusted_json(path, f"--settings-from {path}")[1]
    fmt = head.get("format") if isinstance(head, dict) else None
    readers = {cls.artifact_format: cls for cls in registered_products() if cls.artifact_format}
    if isinstance(fmt, str) and fmt in readers:
        # found by review: read without the signature check, an edited signed rule (its unkeyed digest recomputed)
        # gave infer its settings while triage refused the file; checked with the trust triage would use
        reader = readers[fmt]
        if trust is not None and not _takes_trust(reader.artifact_fingerprint):
            # a product written for the release before ``trust`` (found by review: infer --settings-from ended in a
            # TypeError): read as it was then, and said so
            warnings.warn(f"--settings-from {path}: product {reader.__name__}'s artifact_fingerprint takes no "
                          "'trust': the rule's signature is not checked (add trust=None to it)", UserWarning,
                          stacklevel=3)
            trust = None
        fingerprint = (reader.artifact_fingerprint(path) if trust is None
                       else reader.artifact_fingerprint(path, trust=trust))
        return (*fingerprint, bool(reader.artifact_needs_probabilities))
    kinds = ", ".join(f"{cls.artifact_file or cls.name + '.json'} ({f!r})" for f, cls in readers.items())
    raise ValueError(f"--settings-from {path}: not a rule file that monai-unc evaluate certifies: {kinds}")


def _method(source: str, fp: Mapping[str, Any]) -> str:
    v = fp.get("method")
    if not isinstance(v, str) or len(v) > 100:
        raise _bad(source, "method", v, "a '+'-joined method such as 'mcdropout+tta'")
    tokens = known_method_tokens(v)
    if tokens is None or len(set(tokens)) != len(tokens):
        raise _bad(source, "method", v, f"'+'-joined names from {METHOD_TOKENS}")
    return "+".join(tokens)


def _roi(source: str, v: Any) -> list[int] | None:
    if v is None:
        return None
    if is_int(v):
        v = [v]
    if not isinstance(v, list) or not 1 <= len(v) <= 3 or not all(is_int(r) and 1 <= r <= 100_000 for r in v):
        raise _bad(source, "roi", v, "null or one to three positive window sizes")
    return list(v)


def _measures(source: str, v: Any) -> list[str]:
    # a measure's former name (max_softmax, recorded by 0.1.0) is its current one: found by hostile testing, a rule
    # certified on 0.1.0's default maps was refused as naming an unknown measure (the maps are the same)
    names = [DEPRECATED_MEASURES.get(m, m) for m in v] if isinstance(v, list) and all(isinstance(m, str) for m in v) \
        else None
    if (names is None or not names or len(names) > len(MEASURES) or not all(m in MEASURES for m in names)
            or len(set(names)) != len(names)):
        raise _bad(source, "measures", v, f"a list of distinct names from {MEASURES}")
    return names


def _regions(source: str, v: Any) -> dict[str, list[int]] | None:
    if v is None:
        return None
    if (not isinstance(v, dict) or not v or len(v) > 64
            or not all(isinstance(k, str) and 0 < len(k) <= 64 and isinstance(labels, list) and labels
                       and all(is_int(x) and 0 < x < 2**16 for x in labels) for k, labels in v.items())):
        raise _bad(source, "regions", v, "an object {name: [label, ...]}")
    return {k: list(labels) for k, labels in v.items()}


def _model(source: str, v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or len(v) > 4096:
        raise _bad(source, "model", v, "null or the description of the model")
    return v


def _weights(source: str, v: Any) -> list[dict[str, str]] | None:
    if v is None:
        return None
    ok = isinstance(v, list) and bool(v) and all(
        isinstance(e, dict) and isinstance(e.get("file"), str) and isinstance(e.get("sha256"), str)
        and len(e["sha256"]) == 64 and all(c in "0123456789abcdef" for c in e["sha256"]) for e in v)
    if not ok:
        raise _bad(source, "weights", v, "a list of {file, sha256} entries")
    return [{"file": e["file"], "sha256": e["sha256"]} for e in v]


def settings_of_fingerprint(fp: Mapping[str, Any], source: str) -> RuleSettings:
    """The ``infer`` settings of a rule's prediction fingerprint, every field validated.

    Args:
        fp: the rule's recorded :func:`~monai_unc.io.provenance.prediction_fingerprint` (untrusted JSON).
        source: how messages name the rule.

    Returns:
        The :class:`RuleSettings`.

    Raises:
        ValueError: starting with ``source``: the rule was not certified on ``monai-unc infer`` predictions (or on
            maps of another run than its predictions: field ``maps``), it records a setting this version does not
            know (a newer version's), or a field is missing or not a valid value of its option.

    Example:
        >>> fp = {"producer": "monai-unc infer", "method": "mcdropout", "num_samples": 4, "roi": [8, 8, 8],
        ...       "overlap": 0.25, "intensity": "none", "measures": ["predictive_entropy"], "activation": "softmax",
        ...       "dropout": None, "tta_noise": 0.0, "ratein_target": 0.1}
        >>> s = settings_of_fingerprint(fp, "rule")
        >>> s.options["intensity"], s.options["roi"], s.num_samples
        ('none', [8, 8, 8], 4)
    """
    producer = fp.get("producer")
    if producer == "nnunet-predict":
        raise ValueError(f"{source} was certified on predictions of monai-unc nnunet-predict; --settings-from reads "
                         "the settings of monai-unc infer runs (predict with nnunet-predict and the settings of the "
                         "rule's 'fingerprint' instead)")
    if producer != "monai-unc infer":
        raise ValueError(f"{source} records no settings of monai-unc infer (its predictions had no infer.json, "
                         f"producer {json.dumps(producer)[:40]}): there are no settings to take")
    if "maps" in fp:  # found by hostile testing: the settings of the segmentations were taken, and every new
        # prediction (its maps made with them) then mismatched the rule's maps ("maps.<field>" in triage)
        raise ValueError(f"{source} was certified on uncertainty maps of another run than its predictions (evaluate "
                         "--uncertainty, made with other or unrecorded settings: field 'maps' of its fingerprint): no "
                         "single infer run reproduces both; certify the rule on predictions and maps of one run")
    unknown = sorted(str(k) for k, v in fp.items() if k not in _FINGERPRINT_FIELDS and v is not None)
    if unknown:  # found by hostile testing: left out, the run did not reproduce them and triage refused every case
        shown = ", ".join(json.dumps(k)[:40] for k in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise ValueError(f"{source} records settings this version of monai-unc does not know ({shown}; written by a "
                         "newer version?): its predictions cannot reproduce them; upgrade monai-unc or re-certify the "
                         "rule on predictions of this version")
    n = fp.get("num_samples")
    if not is_int(n) or not 1 <= n <= 1_000_000:
        raise _bad(source, "num_samples", n, "one positive number of samples per case (the calibration cases "
                   "must agree)")
    per_source = fp.get("samples_per_source")
    if per_source is not None and (not is_int(per_source) or not 1 <= per_source <= 1_000_000):
        raise _bad(source, "samples_per_source", per_source, "null or a positive number of draws per source")
    overlap, noise, target, dropout = (fp.get(k) for k in ("overlap", "tta_noise", "ratein_target", "dropout"))
    if not is_finite_real(overlap) or not 0 <= overlap < 1:
        raise _bad(source, "overlap", overlap, "a number in [0, 1)")
    if not is_finite_real(noise) or noise < 0:
        raise _bad(source, "tta_noise", noise, "a number >= 0")
    if not is_finite_real(target) or not 0 <= target <= 1:
        raise _bad(source, "ratein_target", target, "a number in [0, 1]")
    if dropout is not None and (not is_finite_real(dropout) or not 0 < dropout < 1):
        raise _bad(source, "dropout", dropout, "null or a rate in (0, 1)")
    intensity, activation = fp.get("intensity"), fp.get("activation")
    if intensity not in _INTENSITIES:
        raise _bad(source, "intensity", intensity, f"one of {_INTENSITIES}")
    if activation is not None and activation not in _ACTIVATIONS:
        raise _bad(source, "activation", activation, f"null or one of {_ACTIVATIONS}")
    options = {"method": _method(source, fp), "roi": _roi(source, fp.get("roi")), "overlap": float(overlap),
               "intensity": intensity, "measures": _measures(source, fp.get("measures")),
               "activation": "none" if activation is None else activation,
               "regions": _regions(source, fp.get("regions")), "dropout": None if dropout is None else float(dropout),
               "tta_noise": float(noise), "ratein_target": float(target)}
    if "ratein" not in method_tokens(options["method"]):  # recorded unused by earlier versions: the maps are the same
        options["ratein_target"] = DEFAULT_RATEIN_TARGET
    return RuleSettings(source, options, int(n), _weights(source, fp.get("weights")), per_source,
                        _model(source, fp.get("model")))


def read_rule_settings(path: str | os.PathLike, trust: Trust | None = None) -> RuleSettings:
    """The ``infer`` settings a rule file of evaluate was certified with.

    Args:
        path: a rule file that ``monai-unc evaluate`` certified (``referral_rule.json``, a product's rule file).
        trust: the signatures accepted (``infer``'s ``--trusted-keys`` / ``--allow-unsigned``, checked as the
            command that applies the rule checks them, e.g. ``triage``), or None (the signature is not
            checked: the Python API on a file the caller trusts).

    Returns:
        The :class:`RuleSettings` (:func:`settings_of_fingerprint`).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file is not a verified rule (its reader's message; with ``trust`` also a signature that
            does not verify, a missing one or an untrusted key without ``allow_unsigned``), or its fingerprint has no
            valid ``infer`` settings.
    """
    source, fp, probabilities = _load_fingerprint(Path(path), trust)
    return dataclasses.replace(settings_of_fingerprint(fp, source), needs_probabilities=probabilities)


def _same(name: str, given: Any, recorded: Any) -> bool:
    """Whether an option given on the command line says what the rule recorded."""
    if name == "roi":
        a, b = (None if v is None else [int(r) for r in ([v] if isinstance(v, int) else v)] for v in (given, recorded))
        return a == b or (a is not None and b is not None and len(set(a)) == len(set(b)) == 1 and a[0] == b[0])
    if name == "method":
        return isinstance(given, str) and method_tokens(given) == method_tokens(recorded)
    if name == "measures":
        return given is not None and set(given) == set(recorded) and len(given) == len(recorded)
    if name == "regions":  # found by hostile testing: a spec given as on the command line ("brats", JSON, a file)
        # was refused as contradicting the same regions, and another channel order was taken for the rule's (dicts
        # compare equal in any key order, but the key order is the channel order)
        a, b = ([(k, list(v)) for k, v in spec.items()] if spec else None for spec in (read_region_spec(given),
                                                                                         recorded))
        return a == b
    if isinstance(recorded, float) and is_finite_real(given):
        return float(given) == recorded
    return given == recorded


def merge_rule_settings(rule: RuleSettings, given: Mapping[str, Any], explicit: Collection[str]) -> dict[str, Any]:
    """The ``infer`` options with the rule's settings in place of those not given.

    Args:
        rule: the rule's settings (:func:`read_rule_settings`).
        given: the options by argparse destination (at least those of :data:`RULE_OPTIONS`).
        explicit: the destinations given on the command line.

    Returns:
        A copy of ``given`` with every option of :data:`RULE_OPTIONS` taken from the rule.

    Raises:
        ValueError: an option given on the command line contradicts the rule (naming the option, its value and the
            rule's).

    Example:
        >>> rule = RuleSettings("rule r.json", {"intensity": "none", "roi": [8, 8, 8]}, 4)
        >>> merge_rule_settings(rule, {"intensity": "auto", "roi": [8], "seed": 3}, {"roi", "seed"})
        {'intensity': 'none', 'roi': [8, 8, 8], 'seed': 3}
        >>> merge_rule_settings(rule, {"intensity": "max", "roi": None}, {"intensity"})
        Traceback (most recent call last):
        ...
        ValueError: --intensity max contradicts the settings of rule r.json (intensity 'none'); leave the option out
    """
    out = dict(given)
    for name, value in rule.options.items():
        if name in explicit and not _same(name, given.get(name), value):
            shown = given.get(name)
            shown = " ".join(map(str, shown)) if isinstance(shown, list) else shown
            raise ValueError(f"{RULE_OPTIONS[name]} {shown} contradicts the settings of {rule.source} "
                             f"({name} {value!r}); leave the option out")
        out[name] = value
    return out


def rule_samples(rule: RuleSettings, method: str, spatial_dims: int, members: int,
                 given: int | None = None) -> int:
    """``--samples`` for the loaded model, from the samples per case the rule recorded.

    The samples per case are the product over the method's sources: ``--samples`` for each of ``mcdropout`` /
    ``ratein`` (and ``ssn`` alone), ``2 ** spatial_dims`` flips for ``tta`` and one per member for ``ensemble``.
    An ``ssn`` combined with other sources is one latent-averaged sample of ``--samples`` draws, which only the
    rule's ``samples_per_source`` records: with ``ssn+tta`` / ``ssn+ensemble`` a rule without it (written before it
    was recorded) is refused, since its draws are unknown.

    Args:
        rule: the rule's settings.
        method: the method (the rule's).
        spatial_dims: the network's spatial dimensions.
        members: the number of checkpoints given (ensemble members).
        given: ``--samples`` when given on the command line (must agree), else None.

    Returns:
        The number of samples per source; ``given`` (or 10, ``infer``'s default) for a method without a source that
        draws them.

    Raises:
        ValueError: the model and method cannot draw the rule's samples per case, or ``given`` disagrees.

    Example:
        >>> rule = RuleSettings("rule r.json", {}, 24)
        >>> rule_samples(rule, "mcdropout+tta", 3, 1)
        3
    """
    tokens = method_tokens(method)
    k = sum(t in DROPOUT_TOKENS for t in tokens) + (tokens == ["ssn"])
    other = (2 ** spatial_dims if "tta" in tokens else 1) * (members if "ensemble" in tokens else 1)
    n, recorded = rule.num_samples, rule.samples_per_source
    cannot = ValueError(f"--settings-from: {rule.source} records {n} samples per case"
                        f"{'' if recorded is None else f' and {recorded} draws per source'}, which --method {method} "
                        f"cannot draw with this model ({members} checkpoint(s), {spatial_dims}D)")
    samples: int | None = None
    if k == 0:  # no source multiplies the samples per case by --samples
        if n != other:
            raise cannot
        samples = recorded  # an SSN's latent draws (averaged into one sample), else None: --samples changes nothing
        if "ssn" in tokens and recorded is None:
            raise ValueError(f"--settings-from: {rule.source} records no SSN latent draws per sample (a rule certified "
                             f"before they were recorded), which --method {method} needs; re-certify the rule on "
                             "predictions of this version")
    else:
        if n % other == 0:
            root = round((n // other) ** (1 / k))
            samples = next((s for s in (root - 1, root, root + 1) if s >= 1 and s**k * other == n), None)
        if samples is None or (recorded is not None and recorded != samples):
            raise cannot
    if given is not None and samples is not None and given != samples:
        raise ValueError(f"--samples {given} contradicts the settings of {rule.source} ({n} samples per case: "
                         f"--samples {samples}); leave the option out")
    if samples is None:  # the method draws no --samples: any value makes the same maps
        return 10 if given is None else given
    return samples


def check_rule_model(rule: RuleSettings, weights: Sequence[Mapping[str, Any]] | None,
                     description: str | None = None) -> None:
    """Refuse a model whose files differ from those the rule was certified with, or that is loaded otherwise.

    The files are compared by their sha256 digests; nothing is compared when either side lacks them
    (``monai-unc triage`` then compares the model by its paths). The description is compared as triage compares
    it, without the paths (:func:`~monai_unc.io.provenance.normalize_fingerprint`): the kind of model (example,
    bundle, network class), a bundle's preprocessing left out (``--no-bundle-preprocessing``) and a calibrated
    checkpoint's temperature. Found by hostile testing: a rule certified on a bundle's predictions with its
    preprocessing was taken by ``infer --settings-from RULE --no-bundle-preprocessing`` (the same files), and every
    new prediction was then refused by triage.

    Args:
        rule: the rule's settings.
        weights: the loaded model's digests (:attr:`~monai_unc.workflows.models.LoadedModel.weights`).
        description: the loaded model's :attr:`~monai_unc.workflows.models.LoadedModel.description`, or None
            (not compared).

    Raises:
        ValueError: naming the first file whose content differs, or the rule's model and the one loaded.

    Example:
        >>> rule = RuleSettings("rule r.json", {}, 4, model="bundle: /models/b")
        >>> check_rule_model(rule, None, "bundle: /elsewhere/b")  # the same bundle, moved
        >>> check_rule_model(rule, None, "bundle: /models/b (preprocessing not applied)")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: --settings-from: rule r.json was certified on predictions of the model 'bundle' ...; leave out \
--no-bundle-preprocessing
    """
    if rule.model is not None and description is not None:
        a, b = (normalize_fingerprint({"model": m}, digests=True)["model"] for m in (rule.model, description))
        if a != b:
            marker = "(preprocessing not applied)"
            hint = ("add --no-bundle-preprocessing" if marker in a and marker not in b else
                    "leave out --no-bundle-preprocessing" if marker in b and marker not in a else
                    "give the same --model / --bundle / --network / --checkpoint")
            applied = " (its preprocessing applied)" if a.startswith("bundle") and marker not in a else ""
            raise ValueError(f"--settings-from: {rule.source} was certified on predictions of the model {a[:200]!r}"
                             f"{applied}, not {b[:200]!r}; {hint}")
    if not rule.weights or not has_weight_digests({"weights": list(weights or [])}):
        return
    if weight_differences(rule.weights, list(weights or [])):
        names = ", ".join(Path(str(w.get("file"))).name for w in rule.weights)[:200]
        raise ValueError(f"--settings-from: the model's files differ from those {rule.source} was certified with "
                         f"({names}, compared by sha256); give the same --model / --bundle / --network / "
                         "--checkpoint")
