"""The options of the ``monai-unc`` commands: one sub-parser each, built without torch or MONAI.

:func:`add_command_parsers` adds the sub-commands of :data:`COMMANDS` and the commands of the registered cohort
products (:attr:`monai_unc.product.CohortProduct.command`) with their options, help texts and defaults (the
``evaluate`` options of every registered product included, :mod:`monai_unc.product`) to the parser of
:mod:`monai_unc.cli`. This module
imports only the standard library, :mod:`monai_unc.keys` and :mod:`monai_unc.product`, so that ``monai-unc --help``
and an argument error answer at once; each command's workflow takes the parsed arguments
(``<command>_from_arguments``, e.g. :func:`monai_unc.workflows.evaluate.evaluate_from_arguments`).
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Callable
from typing import Any

from ..keys import (
    DEFAULT_OVERLAP,
    DEFAULT_RATEIN_TARGET,
    EXPLICIT_OPTIONS,
    LAYOUTS,
    MAX_OPTION_INT,
    MEASURES,
    canonical_measure,
    code_target_name,
    int_option,
    noise_std_limit,
    option_number,
    sample_batch_size_value,
)
from ..product import command_products, registered_products

__all__ = ["COMMANDS", "EXPLICIT_OPTIONS", "add_command_parsers"]

#: the package's own sub-commands, in the order of ``monai-unc --help`` (the products' commands come after ``triage``)
COMMANDS = ("infer", "evaluate", "report", "calibrate", "demo", "triage", "dicom-export", "monitor", "keys")


def _track_explicit(parser: argparse.ArgumentParser) -> None:
    """Record the destination of every option of ``parser`` given on the command line in :data:`EXPLICIT_OPTIONS`.

    Each action keeps its behaviour; it also adds its ``dest`` to the frozenset of the parsed namespace (defaults
    are not actions called, so an option left out is never recorded).
    """
    parser.set_defaults(**{EXPLICIT_OPTIONS: frozenset()})
    for action in parser._actions:
        base = type(action)
        if isinstance(action, argparse._HelpAction):
            continue

        def call(self: Any, parser: Any, namespace: Any, values: Any, option_string: Any = None,
                 _base: type = base) -> None:
            _base.__call__(self, parser, namespace, values, option_string)
            setattr(namespace, EXPLICIT_OPTIONS, frozenset(getattr(namespace, EXPLICIT_OPTIONS, ())) | {self.dest})

        action.__class__ = type(f"Tracked{base.__name__}", (base,), {"__call__": call})


#: ``--site`` of ``triage --monitor`` and ``monitor record``: a fallback, as docs/monitoring.md orders it (a case's
#: ``--sites`` row, then its image's JSON sidecar, then ``--site``); found by hostile review: triage's help called it
#: "the site of the cases" although a sidecar's site wins over it
_SITE_HELP = ("site of the cases not otherwise known: a case's --sites row (monitor record) or its image's JSON "
              "sidecar (InstitutionName, or site) comes first (default 'unknown'); also the site of the cases whose "
              "image is no longer there (without it such a case is refused)")
#: seeds are 64-bit (torch's generators take ``[0, 2**64)``, numpy's any non-negative integer); the same bound as
#: ``monai_unc._utils.MAX_SEED`` (not imported: this module stays free of torch)
MAX_SEED = 2**64 - 1

# the integer options, in plain decimal syntax (monai_unc.keys.option_number); every count that reaches numpy or
# torch is at most MAX_OPTION_INT, an int32 (found by a probe: --min-bin-count 99999999999999999999 failed every case
# with OverflowError)
_positive_int = int_option(1, MAX_OPTION_INT, "a positive integer")
#: ``--n-bins``: its bound (``MAX_BINS``) is the evaluation options' check, whose message names it
_any_positive_int = int_option(1, None, "a positive integer")
_count = int_option(0, MAX_OPTION_INT, "a non-negative integer")
#: ``--min-bin-count``: its lower bound (0) is the evaluation options' check, whose message names it
_bin_count = int_option(-MAX_OPTION_INT, MAX_OPTION_INT, "an integer")
_seed = int_option(0, MAX_SEED, "a non-negative integer")


def _number(text: str, expected: str) -> float:
    """``text`` as a float in plain decimal syntax, or ``argparse.ArgumentTypeError`` saying what was ``expected``."""
    try:
        return float(option_number(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text[:40]!r}") from None


def _label_values(text: str) -> list[int]:
    """A value of ``--seg-label-values``: comma-separated distinct non-negative integers."""
    try:
        values = [int(option_number(v.strip(" "), integer=True)) for v in text.split(",")]  # "1, 2" too
    except ValueError:
        values = []
    if not values or min(values) < 0 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"expected distinct non-negative integers such as 1,2,4, got {text[:80]!r}")
    if max(values) > MAX_OPTION_INT:  # a label value numpy takes on every platform (int32)
        raise argparse.ArgumentTypeError(f"expected label values of at most {MAX_OPTION_INT}, got {max(values)}")
    return values


def _measure_name(text: str) -> str:
    """A value of ``--measures`` / ``--measure``.

    A deprecated name (``max_softmax``) becomes its new one, with a warning that the console script shows as one
    line (attributed to this module, so that ``monai_unc.cli`` recognises it as the package's own).
    """
    with warnings.catch_warnings():
        if not sys.warnoptions:  # the user's -W / PYTHONWARNINGS decide otherwise
            warnings.simplefilter("always", DeprecationWarning)
        return canonical_measure(text, stacklevel=2)


def _in_unit_interval(closed_low: bool, closed_high: bool) -> Callable[[str], float]:
    """An argparse type for a number in [0, 1], (0, 1), [0, 1) ... (the message names the interval)."""
    interval = f"{'[' if closed_low else '('}0, 1{']' if closed_high else ')'}"

    def parse(text: str) -> float:
        v = _number(text, f"a number in {interval}")
        low_ok = v >= 0.0 if closed_low else v > 0.0
        high_ok = v <= 1.0 if closed_high else v < 1.0
        if not (low_ok and high_ok):
            raise argparse.ArgumentTypeError(f"expected a number in {interval}, got {v}")
        return v

    return parse


def _nonnegative_float(text: str) -> float:
    """An argparse type for a finite number >= 0 (a standard deviation): NaN, inf and negatives are refused."""
    v = _number(text, "a finite number >= 0")
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return v


def _noise_std(text: str) -> float:
    """An argparse type for ``--tta-noise``: a finite standard deviation >= 0 that keeps float32 images finite.

    Found by hostile testing: ``--tta-noise 1e308`` overflowed the float32 images and every case failed with
    ``network output contains non-finite values``, blaming the network; the bound is
    :func:`~monai_unc.keys.noise_std_limit`.
    """
    v = _nonnegative_float(text)
    if v > noise_std_limit():
        raise argparse.ArgumentTypeError(f"expected a standard deviation of at most {noise_std_limit():.3g} (larger "
                                         f"noise overflows the float32 input), got {text}")
    return v


def _code_target(text: str) -> str:
    """An argparse type for ``--allow-code-target``: ``*``, a dotted name, or a prefix ending with one ``.``."""
    try:
        return code_target_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _network_spec(text: str) -> str:
    """An argparse type for ``--network``: inline JSON or a file, never empty.

    In earlier versions ``--network ''`` (an unset ``"$SPEC"``) was read as the current folder ("network spec
    . is a folder, not a file"), where every other option's empty path is refused while parsing.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected inline JSON or a .json/.yaml file, got an empty one ({text!r})")
    return text


def _path(text: str) -> str:
    """An argparse type for a file or folder: any path but the empty one.

    Found by hostile testing: ``--output ''`` wrote ``metrics.csv`` / ``triage.csv`` / ``report.html`` into the
    current directory with exit status 0 (an unset shell variable, ``-o "$OUT"``), and ``--labels ''`` said
    ``FileNotFoundError: [Errno 2] No such file or directory: ''``.
    """
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got an empty one ('')")
    return text


#: the destinations of the options that name a file or folder (argparse type :func:`_path`), in every command; a
#: command's own further ones are added by :func:`_command_path_options`. ``--db`` is left as it is: an empty one
#: falls back to ``$MONAI_UNC_MONITOR_DB``, its default
_PATH_OPTIONS = frozenset({"input", "output", "labels", "predictions", "uncertainty", "images", "shifts",
                           "calibration_cases", "evaluation", "bundle", "checkpoint", "settings_from", "trusted_keys",
                           "rule", "series", "sites", "json", "show", "monitor"})


def _command_path_options(command: str) -> frozenset[str]:
    """The destinations of ``command``'s options that name a file or folder (:data:`_PATH_OPTIONS` and its own)."""
    if command == "triage":  # the rules of the products' commands run beside the triage (--<command>-rule)
        return _PATH_OPTIONS | {f"{cls.command}_rule".replace("-", "_") for cls in command_products()}
    if command == "dicom-export":  # the output folder of a product's command (--<command>) and --triage
        return _PATH_OPTIONS | {"triage"} | {str(cls.command).replace("-", "_") for cls in command_products()}
    if command == "record":  # monitor record TRIAGE
        return _PATH_OPTIONS | {"triage"}
    return _PATH_OPTIONS


def _type_paths(parser: argparse.ArgumentParser, command: str) -> None:
    """Give the path options of ``parser`` (and of its sub-commands) the type :func:`_path`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                _type_paths(child, name)
        elif action.dest in _command_path_options(command) and action.type is None and action.nargs != 0:
            action.type = _path


_fraction = _in_unit_interval(True, False)  # [0, 1): referral budgets, overlaps
_unit = _in_unit_interval(True, True)  # [0, 1]: Dice thresholds
_open_unit = _in_unit_interval(False, False)  # (0, 1): target risk, delta


def _add_model_options(p: argparse.ArgumentParser, *, bundle: str, checkpoint: str, several: bool,
                       unsafe_load: str) -> Any:
    """The model group of ``infer`` and ``calibrate`` (``--model``, ``--bundle`` or ``--network``), with these helps.

    ``several``: ``--checkpoint`` takes several files (ensemble members). Returns the group.
    """
    m = p.add_argument_group("model (exactly one of --model, --bundle, --network)")
    m.add_argument("--model", choices=("example",), help="the shipped MNI152 tissue UNet")
    m.add_argument("--bundle", help=bundle)
    m.add_argument("--network", type=_network_spec,
                   help="network as a MONAI config: inline JSON or a .json/.yaml file with _target_")
    if several:
        m.add_argument("--checkpoint", nargs="+", default=[], metavar="FILE", help=checkpoint)
    else:
        m.add_argument("--checkpoint", default=None, metavar="FILE", help=checkpoint)
    m.add_argument("--unsafe-load", action="store_true", help=unsafe_load)
    m.add_argument("--allow-code-target", action="append", default=[], metavar="NAME", type=_code_target,
                   help="RUNS CODE: let --network build NAME (a dotted name, or a module prefix ending with '.') "
                   "besides MONAI's and torch's networks; '*' also allows $ expressions. Only for specs you trust "
                   "(a bundle is code and is always built as MONAI builds it)")
    return m


def _add_infer(sub: Any) -> None:
    p = sub.add_parser(
        "infer", help="uncertainty maps for a folder of images",
        description="Predict every image of --input with a stochastic inferer and write <case>_seg, <case>_probs "
        "and <case>_<measure> NIfTI files plus a <case>.json record to --output. Finished cases are skipped, so "
        "an interrupted run resumes; files are written atomically; the input folder is never written to.",
    )  # fmt: skip
    p.add_argument("--input", "-i", required=True,
                   help="folder of images (<case>.nii.gz, nnU-Net CASE_0000 files, or one DICOM series folder per "
                        "case; per channel, <case>_0000/, <case>_0001/, ..., for a network of several input "
                        "channels)")
    p.add_argument("--output", "-o", required=True, help="output folder (must not lie inside --input)")
    m = _add_model_options(
        p, bundle="MONAI bundle folder (configs/inference.json with network_def, models/model.pt)",
        checkpoint="weights (state dict); several files = ensemble members for --method ensemble", several=True,
        unsafe_load="load checkpoints with torch.load(weights_only=False): only for files you trust")
    m.add_argument("--no-bundle-preprocessing", action="store_true", help="ignore the bundle's preprocessing")
    s = p.add_argument_group("uncertainty")
    s.add_argument("--method", default="mcdropout",
                   help="'+'-joined sources: mcdropout, ratein, tta, ensemble, ssn (e.g. mcdropout+tta, "
                        "ssn+mcdropout), or softmax (default: mcdropout)")
    s.add_argument("--samples", type=_positive_int, default=10,
                   help="MC dropout / Rate-In / SSN latent samples (default 10)")
    s.add_argument("--dropout", type=_open_unit, default=None, metavar="P",
                   help="insert post-hoc dropout with rate P after every encoder/decoder stage (no retraining; "
                        "needs mcdropout or ratein in --method)")
    s.add_argument("--tta-noise", type=_noise_std, default=0.0,
                   help="std of Gaussian noise added in TTA (>= 0; default 0; needs tta in --method)")
    s.add_argument("--ratein-target", type=_unit, default=DEFAULT_RATEIN_TARGET,
                   help=f"Rate-In information-loss target in [0, 1] (default {DEFAULT_RATEIN_TARGET:g}; needs ratein "
                        "in --method)")
    s.add_argument("--measures", nargs="+", default=None, choices=MEASURES, type=_measure_name,
                   help="maps to write (default: predictive_entropy expected_entropy mutual_information "
                        "one_minus_max_prob)")
    s.add_argument("--no-probs", action="store_true", help="do not write <case>_probs (evaluate then has no ECE)")
    s.add_argument("--save-samples", action="store_true",
                   help="also write <case>_samples: one label map per sample (4D), for evaluate --lesions "
                        "--lesion-samples (memory grows with the samples; docs/lesions.md)")
    r = p.add_argument_group("inference")
    r.add_argument("--roi", nargs="+", type=_positive_int, default=None, metavar="N",
                   help="sliding-window size (one value or one per axis); default: the whole image at once")
    r.add_argument("--overlap", type=_fraction, default=DEFAULT_OVERLAP,
                   help=f"sliding-window overlap (default {DEFAULT_OVERLAP:g}; needs --roi)")
    r.add_argument("--sw-batch-size", type=_positive_int, default=1, help="windows per forward pass (default 1)")
    r.add_argument("--intensity", default="auto", choices=("auto", "none", "max", "minmax", "zscore"),
                   help="intensity normalisation (auto: 'max' for --model example, else none)")
    r.add_argument("--activation", default="softmax", choices=("softmax", "sigmoid", "none"),
                   help="network output -> probabilities (default softmax); sigmoid on a network with several "
                        "output channels: region-based (multi-label), one 4D volume per region in every file")
    r.add_argument("--regions", default=None, metavar="SPEC",
                   help="names and labels of the sigmoid channels of a region-based network, recorded with the "
                        "outputs: 'brats' (TC, WT, ET of labels 1, 2, 4), 'brats2023' (labels 1, 2, 3) or JSON such "
                        "as '{\"WT\": [1, 2, 4], \"TC\": [1, 4], \"ET\": [4]}' in channel order, or a .json file "
                        "holding one (needs --activation sigmoid)")
    r.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda if available)")
    r.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads")
    r.add_argument("--seed", type=_seed, default=0, help="random seed of the sampling (default 0)")
    r.add_argument("--no-share-passes", action="store_true",
                   help="one full network pass per MC dropout / Rate-In sample, instead of computing once per "
                        "window what the samples share (shared passes give the same distribution of maps; with a "
                        "seed, other draws)")
    r.add_argument("--sample-batch-size", type=sample_batch_size_value, default="auto", metavar="K",
                   help="with shared passes, samples run at once along the batch axis: a positive integer or auto "
                        "(default: no more memory than the first sample or a tenth of the case's buffers)")
    p.add_argument("--settings-from", default=None, metavar="RULE",
                   help="predict with the settings a rule file of 'evaluate' (e.g. referral_rule.json) was "
                        "certified with (method, samples, roi, overlap, intensity, measures, activation, regions, "
                        "dropout, tta-noise, ratein-target); give the same model; an option given must agree with "
                        "the rule. Its signature is checked as triage checks it (--trusted-keys, --allow-unsigned)")
    _add_trust_options(p, "with --settings-from: ")
    p.add_argument("--overwrite", action="store_true", help="recompute finished cases (and accept new settings)")
    d = p.add_argument_group("DICOM (the dicom extra; docs/dicom.md)")
    d.add_argument("--output-format", default="nifti", choices=("nifti", "both"),
                   help="both: also write each case's DICOM SEG, FRACTIONAL SEG, Parametric Maps and SR to "
                        "<output>/dicom/<case>/ (needs --input of DICOM series folders, one per case; the NIfTI "
                        "files stay: resume, evaluate and the report read them)")
    d.add_argument("--uid-root", default=None, help="root of the new DICOM UIDs (with --output-format both)")
    d.add_argument("--segments", default=None, help="JSON segment descriptions (with --output-format both)")
    d.add_argument("--study-uid", default="source", choices=("source", "new"),
                   help="the DICOM objects' study (with --output-format both): source (default) or new")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")
    _track_explicit(p)


def _add_evaluate(sub: Any) -> None:
    p = sub.add_parser(
        "evaluate", help="per-case metrics and cohort summary",
        description="Match labels with predictions, probabilities and uncertainty maps by case id and write "
        "metrics.csv (per case: Dice, ECE family, spatial metrics, aggregated scores) and summary.json (pooled "
        "calibration, AURC/E-AURC, referral curve, triage, OoD AUROC with --shifts).",
    )  # fmt: skip
    p.add_argument("--labels", "-l", required=True,
                   help="folder of reference label maps <case>.nii.gz, or binary DICOM SEG objects <case>.dcm (with "
                        "--images of the cases' DICOM series; the segment numbers are the labels, also for --regions; "
                        "docs/dicom.md)")
    p.add_argument("--predictions", "-p", required=True, help="folder written by 'monai-unc infer' (or nnU-Net)")
    p.add_argument("--output", "-o", required=True, help="output folder (metrics.csv, summary.json, state/)")
    p.add_argument("--layout", default="monai-unc", choices=tuple(LAYOUTS),
                   help="file naming of --predictions (default monai-unc; nnunet: <case>.nii.gz, <case>.npz, "
                        "uncertainty/<case>_<measure>.nii.gz)")
    p.add_argument("--uncertainty", help="folder of <case>_<measure> maps (default: from the layout)")
    p.add_argument("--seg-suffix", default=None, help="override the segmentation suffix of the layout")
    p.add_argument("--probs-suffix", default=None, help="override the probability suffix of the layout")
    p.add_argument("--measures", nargs="+", default=None, choices=MEASURES, type=_measure_name,
                   help="maps to read (default: all found)")
    p.add_argument("--measure", default=None, choices=MEASURES, type=_measure_name,
                   help="primary measure for spatial metrics and the score (default predictive_entropy)")
    p.add_argument("--score", default=None,
                   help="triage score column: a case score <measure>_<mean|fg_mean|patch_mean>, e.g. "
                        "mutual_information_patch_mean (default <measure>_fg_mean)")
    p.add_argument("--images", default=None,
                   help="folder of the input images: the report's overlays; with --target-risk the image statistics "
                        "the rule refers new images by (docs/triage.md); with --regions the QU-BraTS brain mask; "
                        "the series of DICOM SEG labels")
    p.add_argument("--shifts", default=None, help="CSV with columns case,shift (shift 'none' = in distribution)")
    p.add_argument("--budget", type=_fraction, default=0.2,
                   help="fraction of cases referred for review: the ceil(budget x N) most uncertain of N (default 0.2)")
    p.add_argument("--failure-dice", type=_unit, default=0.8, help="Dice below this is a failed case (default 0.8)")
    p.add_argument("--n-bins", type=_any_positive_int, default=15, help="ECE bins (default 15)")
    p.add_argument("--min-bin-count", type=_bin_count, default=0,
                   help="ECE: ignore bins with fewer voxels (default 0; Kock et al. use 50)")
    p.add_argument("--patch-size", type=_positive_int, default=10,
                   help="box size of the _patch scores (default 10 voxels)")
    p.add_argument("--num-classes", type=_positive_int, default=None, help="needed when no probabilities are given")
    p.add_argument("--class-names", nargs="+", default=None,
                   help="one name per class, the background first (e.g. background liver tumour), for the "
                        "dice_<class> columns")
    p.add_argument("--no-spatial", action="store_true", help="skip BUC, BA-ECE and SPACE")
    p.add_argument("--regions", default=None, metavar="SPEC",
                   help="region-based (sigmoid) predictions: evaluate every metric per region, QU-BraTS included. "
                        "SPEC: 'brats' (TC, WT, ET of labels 1, 2, 4), 'brats2023' (labels 1, 2, 3), a JSON object "
                        "such as '{\"WT\": [1, 2, 4], \"TC\": [1, 4], \"ET\": [4]}' (key order = channel order) "
                        "or a .json file holding one (docs/regions.md)")
    p.add_argument("--ignore-unclaimed-labels", action="store_true",
                   help="with --regions: count label values that no region holds as background instead of refusing "
                        "them (e.g. label 3 under 'brats' is refused: BraTS 2023 labels need 'brats2023')")
    p.add_argument("--ignore-label", type=int, default=None, metavar="N",
                   help="nnU-Net's ignore label (above every class): reference voxels holding N are left out of every "
                        "voxel-wise metric, as nnU-Net's evaluation does; BUC / BA-ECE / SPACE are NaN for a case "
                        "holding it; products that need the whole reference (e.g. --lesions) are refused. With "
                        "--layout nnunet, taken from the 'ignore' label of the dataset.json beside the predictions")
    p.add_argument("--qu-brats-grid", default="numpy2", choices=("numpy2", "numpy1"),  # metrics.QU_BRATS_GRIDS
                   help="with --regions: the QU-BraTS threshold grid. numpy2 (default): the challenge script under "
                        "numpy >= 2, 40 thresholds 97.5 ... 0; numpy1: the script as run in the 2020 challenge "
                        "(numpy 1.x), 41 thresholds 100 ... 0, to compare with the published 2020 scores "
                        "(docs/regions.md)")
    p.add_argument("--seg-label-values", type=_label_values, default=None, metavar="V1,V2,...",
                   help="labels given as DICOM SEG: the label value of each segment in segment order (DICOM numbers "
                        "segments 1, 2, 3, ...: the BraTS labels 1, 2, 4 are 1,2,4; default: segment s is label s)")
    p.add_argument("--seg-regions", action="store_true",
                   help="with --regions, labels given as DICOM SEG hold the regions themselves, one segment per region "
                        "named as it (e.g. WT, TC, ET, nested), not the disjoint labels")
    _add_risk_control(p, defaults=True)
    for product in registered_products():  # the options of every cohort product (monai_unc.product)
        _add_product_options(p, product)
    p.add_argument("--allow-missing", action="store_true",
                   help="skip labelled cases that lack a prediction or map (listed in a warning) instead of failing")
    p.add_argument("--allow-missing-labels", action="store_true",
                   help="skip cases that have predictions but no label (listed in a warning) instead of failing")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")
    _track_explicit(p)  # --delta / --risk without --target-risk are refused, not ignored


def _add_product_options(parser: argparse.ArgumentParser, product: Any) -> None:
    """Add a product's options to ``evaluate``.

    A product whose options clash with others is left out (one stderr line naming it), so that one broken plug-in
    does not break the command line.

    Args:
        parser: the ``evaluate`` parser.
        product: a registered :class:`~monai_unc.product.CohortProduct` class.
    """
    trial = argparse.ArgumentParser(add_help=False, parents=[parser], conflict_handler="error")
    group = trial.add_argument_group(product.title)
    try:
        product.add_arguments(group)
    except argparse.ArgumentError as e:
        print(f"monai-unc: the options of product {product.name!r} are left out: {e}", file=sys.stderr)
        return
    if not group._group_actions:  # a product without options of its own (risk control: the options of
        # _add_risk_control) gets no group: found by review 61, 'evaluate --help' ended in an empty group
        return
    product.add_arguments(parser.add_argument_group(product.title, product.description or None))


#: the choices of ``--convention`` (the names of :data:`monai_unc.report.viewer.CONVENTIONS`, which this module does not
#: import: the report layer loads matplotlib and nibabel, and ``--help`` answers before any of that)
_CONVENTIONS = ("neurological", "radiological")


def _add_convention(p: argparse.ArgumentParser) -> None:
    """``--convention`` of the commands that write the report and triage pages (their case figures and 3D viewers)."""
    p.add_argument("--convention", default="neurological", choices=_CONVENTIONS,
                   help="how the page's case slices and 3D viewers draw the patient's sides: 'neurological' (default: "
                   "the patient's left on the screen's left) or 'radiological' (the patient's right on the screen's "
                   "left, as radiologists read: the axial and coronal slices mirrored, the side marks swapped)")


def _add_report(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="self-contained HTML QC report",
        description="Write report.html (figures embedded) and figures/*.png from an evaluation folder: triage "
        "table, reliability diagram, referral curve, uncertainty histograms, per-case overlays.",
    )  # fmt: skip
    p.add_argument("--evaluation", "-e", required=True, help="the --output folder of 'monai-unc evaluate'")
    p.add_argument("--output", "-o", default=None, help="report folder (default <evaluation>/report)")
    p.add_argument("--budget", type=_fraction, default=None, help="referral budget (default: the evaluation's)")
    p.add_argument("--images", default=None, help="folder of the input images for the overlays")
    p.add_argument("--cases", type=_count, default=4, help="overlays of the N most uncertain cases (default 4)")
    p.add_argument("--title", default="Uncertainty QC report", help="page title")
    _add_convention(p)
    _add_risk_control(p, defaults=False)
    p.add_argument("--quiet", "-q", action="store_true", help="print only the report path")


def _add_risk_control(p: argparse.ArgumentParser, defaults: bool) -> None:
    keep = "" if defaults else " (default: the evaluation's)"
    g = p.add_argument_group(
        "risk-controlled referral threshold (docs/referral_threshold.md)",
        "With --target-risk, fit the acceptance threshold on the case scores such that, with probability at least "
        "1 - delta over the calibration cases, the mean risk of accepted new (exchangeable) cases is at most the "
        "target; shown in the summary, the triage table and the referral curve.",
    )
    g.add_argument("--target-risk", type=_open_unit, default=None, metavar="ALPHA",
                   help="guaranteed mean risk of the accepted cases, in (0, 1)" + keep)
    g.add_argument("--delta", type=_open_unit, default=0.1 if defaults else None,
                   help="allowed probability that the guarantee fails" + (" (default 0.1)" if defaults else keep))
    g.add_argument("--risk", choices=("failure", "1-dice"), default="failure" if defaults else None,
                   help="per-case risk: 'failure' = Dice below --failure-dice (0/1), or '1-dice'"
                   + (" (default failure)" if defaults else keep))
    g.add_argument("--risk-method", choices=("sgr", "ltt"), default=None,
                   help="bound: 'sgr' (binomial, failure risk) or 'ltt' (Learn-then-Test, any risk); "
                   "default sgr for failure, ltt for 1-dice")
    g.add_argument("--risk-p-value", choices=("hoeffding_bentkus", "binomial"),
                   default="hoeffding_bentkus" if defaults else None,
                   help="p-value of ltt's tests: 'hoeffding_bentkus' (any risk) or 'binomial' (exact and more "
                   "powerful; needs --risk failure and --risk-method ltt)"
                   + (" (default hoeffding_bentkus)" if defaults else keep))
    g.add_argument("--calibration-cases", default=None, metavar="FILE",
                   help="file of case ids (one per line, or a CSV with a 'case' column) to fit the threshold on; "
                   "the other cases are reported as held out" + (" (default: every case)" if defaults else keep))


def _add_calibrate(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate", help="fit a temperature on validation cases and write a calibrated checkpoint",
        description="Temperature scaling (Kock et al.: NLL or ECE loss, RMSprop lr 0.05 from t = 2, <= 1000 steps) on "
        "the deterministic logits of validation images and labels; writes a calibrated copy of the checkpoint "
        "(t folded into the last layer when possible, else stored beside the weights and applied by 'infer') "
        "and a JSON record with NLL and ECE before and after.",
    )  # fmt: skip
    p.add_argument("--input", "-i", required=True,
                   help="folder of validation images (as infer's --input: files or DICOM series folders)")
    p.add_argument("--labels", "-l", required=True, help="folder of their label maps <case>.nii.gz")
    p.add_argument("--output", "-o", required=True, help="calibrated checkpoint to write (.pt; + .json record)")
    _add_model_options(p, bundle="MONAI bundle folder (its preprocessing is not applied)",
                       checkpoint="weights (state dict)", several=False,
                       unsafe_load="torch.load(weights_only=False): trusted files only")
    p.add_argument("--mode", default="scalar", choices=("scalar", "vector"),
                   help="one t, or one per class (per region with --activation sigmoid)")
    p.add_argument("--activation", default="softmax", choices=("softmax", "sigmoid"),
                   help="softmax (default), or sigmoid: a region-based network, calibrated per region against "
                        "region masks")
    p.add_argument("--regions", default=None, metavar="SPEC",
                   help="with --activation sigmoid: build the region masks from the label maps ('brats', "
                        "'brats2023' or JSON such as '{\"WT\": [1, 2, 4], \"TC\": [1, 4], \"ET\": [4]}' in channel "
                        "order, or a .json file holding one); without it the label files must hold one 0/1 channel "
                        "per region")
    p.add_argument("--ignore-unclaimed-labels", action="store_true",
                   help="with --regions: count label values that no region holds as background instead of refusing "
                        "them")
    p.add_argument("--loss", default="nll", choices=("nll", "ece"), help="fitting loss (default nll)")
    p.add_argument("--max-steps", type=_positive_int, default=1000, help="optimisation steps (default 1000)")
    p.add_argument("--roi", nargs="+", type=_positive_int, default=None, metavar="N", help="sliding-window size")
    p.add_argument("--overlap", type=_fraction, default=DEFAULT_OVERLAP,
                   help=f"sliding-window overlap (default {DEFAULT_OVERLAP:g}; needs --roi)")
    p.add_argument("--intensity", default="auto", choices=("auto", "none", "max", "minmax", "zscore"),
                   help="intensity normalisation (auto: 'max' for --model example, else none)")
    p.add_argument("--device", default="auto", help="cpu, cuda, ... (default: cuda if available)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")


def _add_demo(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="the whole workflow on the shipped MNI152 example",
        description="Build a cohort from the held-out right hemisphere of the MNI152 example and graded shifts "
        "(noise, bias field, contrast, blur, resolution), run infer, evaluate and report, certify a referral rule on "
        "42 calibration cases and triage 12 new cases without labels; print what was guaranteed and what happened.",
    )  # fmt: skip
    p.add_argument("-o", "--output", default="demo_output", help="output folder (created; default demo_output)")
    p.add_argument("--samples", type=_positive_int, default=None,
                   help="MC dropout samples (default 4; 8 with --quick)")
    p.add_argument("--method", default="mcdropout", help="inferer sources as for 'infer' (default mcdropout)")
    p.add_argument("--roi", nargs="+", type=_positive_int, default=[64], help="sliding-window size (default 64)")
    p.add_argument("--overlap", type=_fraction, default=0.0, help="sliding-window overlap (default 0)")
    p.add_argument("--budget", type=_fraction, default=0.3, help="referral budget of the triage (default 0.3)")
    p.add_argument("--device", default="cpu",
                   help="where the network runs: cpu (default: the documented results are the CPU's), cuda, "
                   "cuda:1, auto")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run on 11 cases (the clean right hemisphere and 10 perturbed copies): its rule, "
                   "certified on 6 of them, certifies nothing, so every new case goes to review (default: a rule "
                   "certified on 42 calibration cases, 12 new cases triaged)")
    _add_convention(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or table")


#: --layout of the commands that apply a rule of 'evaluate' (triage, the products' commands)
_APPLIED_LAYOUT_HELP = ("file naming of --predictions (default: the layout of the predictions the rule was "
                        "certified on, as its fingerprint records it: nnunet for nnunet-predict's; monai-unc when it "
                        "records none); one that contradicts the rule's is refused unless --predictions holds the "
                        "records of a run of that layout")


def _add_triage(sub: Any) -> None:
    p = sub.add_parser(
        "triage", help="apply a certified referral rule to new unlabelled cases",
        description="Read the predictions of new cases (no labels: 'monai-unc infer' or 'nnunet-predict' outputs), "
        "compute the rule's case score and the label-free quality estimate, and apply referral_rule.json (written by "
        "'evaluate --target-risk'): triage.csv (case, score, decision accept/review, reason), triage.json and "
        "triage.html. A case outside the calibration score range, or whose image statistics are far from the "
        "calibration images', goes to review. Refuses predictions made otherwise than the rule's (fingerprint, and "
        "the regions of a rule of 'evaluate --regions') unless --allow-mismatch. Region-based predictions are scored "
        "per region (triage.csv lists each region's score). Resumable; runs under torchrun. See docs/triage.md.",
    )  # fmt: skip
    p.add_argument("--predictions", "-p", required=True,
                   help="folder written by 'monai-unc infer' (or nnunet-predict with --layout nnunet)")
    p.add_argument("--rule", "-r", required=True,
                   help="referral_rule.json written by 'monai-unc evaluate --target-risk'")
    p.add_argument("--output", "-o", required=True,
                   help="output folder (triage.csv, triage.json, triage.html, state/)")
    p.add_argument("--images", default=None, help="folder of the input images (image-statistics check, overlays)")
    p.add_argument("--layout", default=None, choices=tuple(LAYOUTS), help=_APPLIED_LAYOUT_HELP)
    p.add_argument("--uncertainty", default=None, help="folder of <case>_<measure> maps (default: from the layout)")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="triage predictions whose fingerprint differs from the rule's (the page says so)")
    p.add_argument("--cases", type=_count, default=4, help="overlays of the N most uncertain cases (default 4)")
    _add_convention(p)
    for cls in command_products():  # the products' commands, run beside the triage (monai_unc.workflows.apply)
        p.add_argument(f"--{cls.command}-rule", default=None, metavar="RULE",
                       help=f"{cls.artifact_file or cls.name + '.json'} written by 'evaluate': also run 'monai-unc "
                       f"{cls.command}' on the new cases (into OUTPUT/{cls.command}/) and show its outputs on the page")
    p.add_argument("--monitor", default=None, metavar="DB",
                   help="also record the decisions into this monitoring store (a file for SQLite or "
                   "postgresql://...; as 'monai-unc monitor record'); a store that cannot be opened stops the run "
                   "before anything is written, one lost after the triage leaves its outputs written (exit status 2 "
                   "both)")
    p.add_argument("--site", default=None, help=f"with --monitor: {_SITE_HELP}")
    _add_trust_options(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")


def _add_trust_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """``--trusted-keys``, ``--allow-unsigned`` and ``--require-signature`` of the commands that apply a rule.

    ``--require-signature`` is what these commands do without ``--allow-unsigned`` (the two are refused together,
    exit status 2); it is the one option that demands a trusted signature on every command that reads a signed file
    (:func:`_add_triage_trust_option`), so that a script can give it everywhere.
    """
    p.add_argument("--trusted-keys", action="append", default=[], metavar="PATH",
                   help=prefix + "a public key file (.pub) or a folder of them whose signatures are trusted, besides "
                   "MONAI_UNC_TRUSTED_KEYS and the keys of your configuration folder (see docs/signing.md)")
    either = p.add_mutually_exclusive_group()
    either.add_argument("--allow-unsigned", action="store_true",
                        help=prefix + "use a rule that is unsigned, signed by an untrusted key or of an older format: "
                        "who certified it is then not checked (printed, recorded in the outputs and shown on the page)")
    either.add_argument("--require-signature", action="store_true",
                        help=prefix + "refuse a rule that is not signed by a trusted key (one of --trusted-keys, "
                        "MONAI_UNC_TRUSTED_KEYS or your configuration folder's): what this command does unless given "
                        "--allow-unsigned; the option that demands a signature of every command that reads a signed "
                        "file (monitor record, dicom-export --triage)")


def _add_triage_trust_option(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """``--trusted-keys`` and ``--require-signature`` of the commands that read ``triage.json``.

    Either one given, a signature by a trusted key is required: ``--require-signature`` alone trusts the keys of
    ``MONAI_UNC_TRUSTED_KEYS`` and of the configuration folder (in earlier versions a team that trusts its keys only
    there could not demand a signature).
    """
    p.add_argument("--trusted-keys", action="append", default=[], metavar="PATH",
                   help=prefix + "require triage.json to be signed by a trusted key: a public key file (.pub) or a "
                   "folder of them, trusted besides MONAI_UNC_TRUSTED_KEYS and the keys of your configuration folder; "
                   "an unsigned, untrusted-key or edited triage.json is then refused; without this option or "
                   "--require-signature it is read, with a warning when signed by a key not trusted here (see "
                   "docs/signing.md)")
    p.add_argument("--require-signature", action="store_true",
                   help=prefix + "require triage.json to be signed by a trusted key: one of MONAI_UNC_TRUSTED_KEYS, "
                   "of your configuration folder or of --trusted-keys (which implies this option); an unsigned, "
                   "untrusted-key or edited triage.json is then refused before anything is written")


def _add_product_commands(sub: Any) -> None:
    """The commands of the cohort products (:attr:`monai_unc.product.CohortProduct.command`): an artifact applied."""
    for cls in command_products():
        artifact = cls.artifact_file or f"{cls.name}.json"
        p = sub.add_parser(str(cls.command), help=cls.command_help or f"apply a {artifact} to new cases",
                           description=cls.command_description or None)
        p.add_argument("--predictions", "-p", required=True,
                       help="folder written by 'monai-unc infer' (or nnunet-predict with --layout nnunet)")
        p.add_argument("--rule", "-r", required=True, help=f"{artifact} written by 'monai-unc evaluate'")
        p.add_argument("--output", "-o", required=True, help="output folder")
        p.add_argument("--images", default=None, help="folder of the input images")
        p.add_argument("--layout", default=None, choices=tuple(LAYOUTS), help=_APPLIED_LAYOUT_HELP)
        p.add_argument("--uncertainty", default=None,
                       help="folder of the <case>_<measure> maps when not where the layout puts them")
        p.add_argument("--allow-mismatch", action="store_true",
                       help="apply the rule to predictions whose fingerprint differs (the outputs say so)")
        cls.add_command_arguments(p)
        _add_trust_options(p)
        p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")


def _add_dicom_export(sub: Any) -> None:
    p = sub.add_parser(
        "dicom-export", help="write the outputs of infer / nnunet-predict as DICOM SEG, Parametric Maps (dicom extra)",
        description="For each case of a prediction folder and its source series (<series>/<case>/: one folder of "
        "single-frame CT or MR slices, or of one enhanced multi-frame image), write <output>/<case>/seg.dcm "
        "(binary DICOM SEG, one segment per class), "
        "probabilities.dcm (FRACTIONAL SEG, 8-bit probabilities), <measure>.dcm (Parametric Map, 32-bit float; "
        "<measure>_<region>.dcm per region of a region-based model) "
        "and sr.dcm (Comprehensive 3D SR, TID 1500: volumes, case scores, triage decision), "
        "with new UIDs under --uid-root and the patient and study of the source, and dicom_export.json. Needs "
        "pip install 'monai-unc[dicom]'. See docs/dicom.md.",
    )  # fmt: skip
    p.add_argument("--predictions", "-p", required=True,
                   help="folder written by 'monai-unc infer' (or nnunet-predict with --layout nnunet)")
    p.add_argument("--series", "-s", required=True, help="folder with one source series folder per case id")
    p.add_argument("--output", "-o", required=True, help="export folder (<case>/*.dcm, dicom_export.json)")
    p.add_argument("--layout", default="monai-unc", choices=tuple(LAYOUTS), help="file naming of --predictions")
    p.add_argument("--measures", nargs="+", type=_measure_name, default=None, choices=MEASURES,
                   help="maps to export as Parametric Maps (default: those the cases' records list, the same for "
                        "every case)")
    p.add_argument("--no-probabilities", action="store_true", help="no FRACTIONAL SEG of the probabilities")
    p.add_argument("--segments", default=None,
                   help='JSON segment descriptions {"<class>": {"name": ..., "category": [scheme, code, meaning], '
                        '"type": [...]}} (default: "class <c>", SNOMED-CT codes for known names)')
    p.add_argument("--class-names", nargs="+", default=None, metavar="NAME",
                   help="one name per class, the background first (e.g. background liver tumour), for the segments "
                        "the --segments file does not name (default: the names of --evaluation's summary.json, else "
                        "of the dataset.json beside nnU-Net's predictions, else 'class <c>')")
    p.add_argument("--uid-root", default=None, help="root of the new UIDs, e.g. 1.2.826.0.1.3680043.10.543. "
                                                    "(default: pydicom's)")
    p.add_argument("--study-uid", default="source", choices=("source", "new"),
                   help="the objects' study: source (default: the source series' study, as the IHE AI Results "
                        "profile keeps derived objects) or new (a new study per case; docs/dicom.md)")
    p.add_argument("--algorithm-name", default=None, help="algorithm name (default: the recorded model)")
    p.add_argument("--series-description", default=None,
                   help="SeriesDescription of each case's segmentation (seg.dcm), as a PACS lists it: 1 to 64 bytes "
                        "of UTF-8, no backslash (default: 'segmentation by monai-unc: <segment names>')")
    p.add_argument("--evaluation", "-e", default=None,
                   help="output folder of 'monai-unc evaluate': each case's metrics.csv row goes into its SR")
    p.add_argument("--triage", default=None,
                   help="output folder of 'monai-unc triage': each case's decision, the rule's digest and guarantee "
                        "go into its SR")
    _add_triage_trust_option(p, "with --triage: ")
    for cls in command_products():  # a product command's per-case table (e.g. volumes) goes into the SR
        if cls.applied_table:
            p.add_argument(f"--{cls.command}", default=None, metavar="FOLDER",
                           help=f"output folder of 'monai-unc {cls.command}': each case's row of {cls.applied_table} "
                           "goes into its SR")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")


def _add_monitor(sub: Any) -> None:
    p = sub.add_parser(
        "monitor", help="watch a deployed model: record triage runs and audited labels, alarms per site, dashboard",
        description="A monitoring store (SQLite file or PostgreSQL URL) that every triage run is recorded into, "
        "audited labels, and anytime-valid alarms per site: a test martingale on the case score and the "
        "image statistics (label-free), a betting test of the accepted cases' risk against the certified target "
        "(audited labels). Every change is logged in a hash-chained audit log. See docs/monitoring.md.",
    )  # fmt: skip
    msub = p.add_subparsers(dest="monitor_command", required=True, metavar="SUBCOMMAND")
    db_help = ("the monitoring store: a file path (SQLite) or postgresql://user@host/db (needs the monitor extra); "
               "default $MONAI_UNC_MONITOR_DB")
    r = msub.add_parser("record", help="record a triage output folder into the store")
    r.add_argument("triage", metavar="TRIAGE", help="output folder of 'monai-unc triage'")
    r.add_argument("--db", default=None, help=db_help)
    r.add_argument("--site", default=None, help=_SITE_HELP)
    r.add_argument("--sites", default=None, metavar="CSV", help="CSV with columns case,site[,scanner]")
    r.add_argument("--time", default=None, help="when the run triaged, ISO 8601 (default: triage.json's time)")
    _add_triage_trust_option(r)
    lab = msub.add_parser("label", help="record audited labels (a CSV of case,dice[,failure] or a folder of label "
                          "maps)")
    lab.add_argument("--labels", required=True, metavar="CSV|FOLDER",
                     help="CSV with columns case and dice and/or failure (0/1), and site / run (the run id "
                     "'monitor record' printed) where a case id was recorded at several sites / in several runs; "
                     "or a folder of label maps <case>.nii.gz compared with the predictions triage read")
    lab.add_argument("--db", default=None, help=db_help)
    st = msub.add_parser("status", help="per-site statistics and alarms; exit status 1 when an alarm is raised")
    st.add_argument("--db", default=None, help=db_help)
    st.add_argument("--alpha", type=_open_unit, default=0.05,
                    help="false-alarm probability of each alarm over the whole stream (default 0.05)")
    st.add_argument("--json", default=None, metavar="FILE", help="also write the figures as JSON")
    rep = msub.add_parser("report", help="the dashboard: one static HTML page")
    rep.add_argument("--db", default=None, help=db_help)
    rep.add_argument("--output", "-o", required=True, help="the page to write (monitor.html)")
    rep.add_argument("--alpha", type=_open_unit, default=0.05, help="false-alarm probability of each alarm")
    ver = msub.add_parser("verify", help="check the audit chain; exit status 1 when an entry or row was tampered")
    ver.add_argument("--db", default=None, help=db_help)
    ver.add_argument("--expect-head", default=None, metavar="HASH",
                     help="the head hash an earlier verify printed, kept elsewhere (detects entries removed from the "
                     "end and a replaced database; entries appended since are fine)")
    ver.add_argument("--json", default=None, metavar="FILE",
                     help="also write the result as JSON (ok, n_entries, head, expected_entry, problems)")
    for q in (r, lab, st, rep, ver):
        q.add_argument("--quiet", "-q", action="store_true",
                       help="print only the warning lines, on stderr (the exit status still tells)")


def _add_keys(sub: Any) -> None:
    p = sub.add_parser(
        "keys", help="the keys that sign certified rules: create a pair, show fingerprints",
        description="Certification by 'monai-unc evaluate' signs its rule files with a private Ed25519 key; the "
        "commands that apply a rule accept it only when its signature verifies against a trusted public key. "
        "Without options: show the signing key and the trusted keys of this machine. See docs/signing.md.",
    )  # fmt: skip
    p.add_argument("--create", metavar="FOLDER", nargs="?", const="", default=None,
                   help="create a key pair (signing_key.pem, owner-only, and signing_key.pub) in FOLDER (default: "
                   "your configuration folder, if it has none)")
    p.add_argument("--overwrite", action="store_true",
                   help="with --create: replace the pair in FOLDER (rules signed with the old key are then no longer "
                   "trusted where only its public key was)")
    p.add_argument("--show", metavar="FILE", default=None, help="the fingerprint of a public or private key file")


def add_command_parsers(sub: Any) -> None:
    """Add the sub-commands of :data:`COMMANDS` and the products' commands with their options to the parser.

    Args:
        sub: the sub-parsers action of the parser (``parser.add_subparsers(...)``).

    Example:
        >>> import argparse
        >>> parser = argparse.ArgumentParser(prog="monai-unc")
        >>> add_command_parsers(parser.add_subparsers(dest="command"))
        >>> parser.parse_args(["report", "--evaluation", "ev", "--budget", "0.3"]).budget
        0.3
    """
    for add in (_add_infer, _add_evaluate, _add_report, _add_calibrate, _add_demo, _add_triage, _add_product_commands,
                _add_dicom_export, _add_monitor, _add_keys):
        add(sub)
    for command, parser in sub.choices.items():
        _type_paths(parser, command)
