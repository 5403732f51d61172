"""The ``monai-unc`` command line.

    monai-unc infer     --input IMAGES --output PRED (--model example | --bundle DIR | --network SPEC --checkpoint F)
    monai-unc evaluate  --labels LABELS --predictions PRED --output EVAL [--shifts shifts.csv] [--budget 0.2]
                        [--target-risk 0.1 --delta 0.1 --risk failure|1-dice --calibration-cases FILE]
                        [--conformal outer:fnr=0.1 --conformal inner:fp=0.1 --conformal-family threshold|margin
                         --conformal-strata 3 --conformal-stratify-by predictive_entropy_fg_mean]
    monai-unc report    --evaluation EVAL [--output DIR] [--budget 0.2] [--images IMAGES] [--target-risk ...]
    monai-unc calibrate --input IMAGES --labels LABELS --output calibrated.pt (model options as for infer)
    monai-unc demo      [--output demo_output] [--quick]
    monai-unc triage    --predictions PRED --rule referral_rule.json --output TRIAGE [--images IMAGES]
                        [--conformal-rule conformal_rule.json]
    monai-unc conformal --predictions PRED --rule conformal_rule.json --output MASKS
    monai-unc nnunet-predict ...        (with the nnunet extra: nnU-Net v2 prediction with uncertainty)

``infer`` writes uncertainty maps, probabilities and segmentations per case (resumable, atomic, never into the
input folder); ``evaluate`` writes ``metrics.csv`` (per case) and ``summary.json`` (cohort); ``report`` writes a
self-contained ``report.html``; ``demo`` runs all three on the shipped MNI152 example. See docs/cli.md.

Exit status: 0 on success, 1 when some cases failed (one stderr line per case with its id, ``failures.json`` in the
output folder; the other cases are done), 2 for bad arguments or inputs (one line on stderr), 130 when interrupted
(run the same command again to resume). ``infer`` and ``evaluate`` also run under ``torchrun``: each rank takes a
shard of the cases and the results equal a single-process run (docs/distributed.md).
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
import warnings
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .keys import LAYOUTS, MEASURES, canonical_measure
from .product import products_from_arguments, registered_products

if TYPE_CHECKING:  # imported after parsing, by _import_commands: --help and argument errors answer at once
    from .workflows.calibrate import calibrate_summary, run_calibrate
    from .workflows.conformal import conformal_command
    from .workflows.demo import run_demo
    from .workflows.evaluate import evaluate_command
    from .workflows.prepare import error_text, infer_command, prepare_evaluate
    from .workflows.report import run_report
    from .workflows.session import CohortFailed
    from .workflows.triage import triage_command

__all__ = ["main", "build_parser", "run_demo"]

#: sub-commands provided by monai_unc.nnunet.cli (registered only when nnU-Net v2 imports)
NNUNET_COMMANDS = ("nnunet-predict", "nnunet-dropout-plans", "nnunet-calibrate")


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error message (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _measure_name(text: str) -> str:
    """A value of ``--measures`` / ``--measure``.

    A deprecated name (``max_softmax``) becomes its new one, with a warning that the console script shows too.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("always", DeprecationWarning)
        return canonical_measure(text, stacklevel=3)


def _in_unit_interval(closed_low: bool, closed_high: bool) -> Callable[[str], float]:
    """An argparse type for a number in [0, 1], (0, 1), [0, 1) ... (the message names the interval)."""
    interval = f"{'[' if closed_low else '('}0, 1{']' if closed_high else ')'}"

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number in {interval}, got {text!r}") from None
        low_ok = v >= 0.0 if closed_low else v > 0.0
        high_ok = v <= 1.0 if closed_high else v < 1.0
        if not (low_ok and high_ok):
            raise argparse.ArgumentTypeError(f"expected a number in {interval}, got {v}")
        return v

    return parse


def _nonnegative_float(text: str) -> float:
    """An argparse type for a finite number >= 0 (a standard deviation): NaN, inf and negatives are refused."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return v


_fraction = _in_unit_interval(True, False)  # [0, 1): referral budgets, overlaps
_unit = _in_unit_interval(True, True)  # [0, 1]: Dice thresholds
_open_unit = _in_unit_interval(False, False)  # (0, 1): target risk, delta


# ----------------------------------------------------------------------------------------------------------------
# parsers
# ----------------------------------------------------------------------------------------------------------------
def _add_infer(sub: Any) -> None:
    p = sub.add_parser(
        "infer", help="uncertainty maps for a folder of images",
        description="Predict every image of --input with a stochastic inferer and write <case>_seg, <case>_probs "
        "and <case>_<measure> NIfTI files plus a <case>.json record to --output. Finished cases are skipped, so "
        "an interrupted run resumes; files are written atomically; the input folder is never written to.",
    )  # fmt: skip
    p.add_argument("--input", "-i", required=True, help="folder of images (<case>.nii.gz, or nnU-Net CASE_0000 files)")
    p.add_argument("--output", "-o", required=True, help="output folder (must not lie inside --input)")
    m = p.add_argument_group("model (exactly one of --model, --bundle, --network)")
    m.add_argument("--model", choices=("example",), help="the shipped MNI152 tissue UNet")
    m.add_argument("--bundle", help="MONAI bundle folder (configs/inference.json with network_def, models/model.pt)")
    m.add_argument("--network", help="network as a MONAI config: inline JSON or a .json/.yaml file with _target_")
    m.add_argument("--checkpoint", nargs="+", default=[], metavar="FILE",
                   help="weights (state dict); several files = ensemble members for --method ensemble")
    m.add_argument("--unsafe-load", action="store_true",
                   help="load checkpoints with torch.load(weights_only=False): only for files you trust")
    m.add_argument("--no-bundle-preprocessing", action="store_true", help="ignore the bundle's preprocessing")
    s = p.add_argument_group("uncertainty")
    s.add_argument("--method", default="mcdropout",
                   help="'+'-joined sources: mcdropout, ratein, tta, ensemble, ssn (e.g. mcdropout+tta, "
                        "ssn+mcdropout), or softmax (default: mcdropout)")
    s.add_argument("--samples", type=_positive_int, default=10,
                   help="MC dropout / Rate-In / SSN latent samples (default 10)")
    s.add_argument("--dropout", type=_open_unit, default=None, metavar="P",
                   help="insert post-hoc dropout with rate P after every encoder/decoder stage (no retraining)")
    s.add_argument("--tta-noise", type=_nonnegative_float, default=0.0,
                   help="std of Gaussian noise added in TTA (>= 0; default 0; needs tta in --method)")
    s.add_argument("--ratein-target", type=_unit, default=0.1,
                   help="Rate-In information-loss target in [0, 1] (default 0.1)")
    s.add_argument("--measures", nargs="+", default=None, choices=MEASURES, type=_measure_name,
                   help="maps to write (default: predictive_entropy expected_entropy mutual_information "
                        "one_minus_max_prob)")
    s.add_argument("--no-probs", action="store_true", help="do not write <case>_probs (evaluate then has no ECE)")
    r = p.add_argument_group("inference")
    r.add_argument("--roi", nargs="+", type=_positive_int, default=None, metavar="N",
                   help="sliding-window size (one value or one per axis); default: the whole image at once")
    r.add_argument("--overlap", type=_fraction, default=0.25, help="sliding-window overlap (default 0.25)")
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
    r.add_argument("--seed", type=int, default=0, help="random seed of the sampling (default 0)")
    p.add_argument("--overwrite", action="store_true", help="recompute finished cases (and accept new settings)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")


def _add_evaluate(sub: Any) -> None:
    p = sub.add_parser(
        "evaluate", help="per-case metrics and cohort summary",
        description="Match labels with predictions, probabilities and uncertainty maps by case id and write "
        "metrics.csv (per case: Dice, ECE family, spatial metrics, aggregated scores) and summary.json (pooled "
        "calibration, AURC/E-AURC, referral curve, triage, OoD AUROC with --shifts).",
    )  # fmt: skip
    p.add_argument("--labels", "-l", required=True, help="folder of reference label maps <case>.nii.gz")
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
                   help="triage score column, e.g. mutual_information_patch (default <measure>_fg_mean)")
    p.add_argument("--images", default=None, help="folder of the input images (for the report's overlays)")
    p.add_argument("--shifts", default=None, help="CSV with columns case,shift (shift 'none' = in distribution)")
    p.add_argument("--budget", type=_fraction, default=0.2, help="fraction of cases referred for review (0.2)")
    p.add_argument("--failure-dice", type=_unit, default=0.8, help="Dice below this is a failed case (0.8)")
    p.add_argument("--n-bins", type=_positive_int, default=15, help="ECE bins (default 15)")
    p.add_argument("--min-bin-count", type=int, default=0,
                   help="ECE: ignore bins with fewer voxels (0; Kock et al. use 50)")
    p.add_argument("--patch-size", type=_positive_int, default=10, help="box size of the _patch scores (10 voxels)")
    p.add_argument("--num-classes", type=_positive_int, default=None, help="needed when no probabilities are given")
    p.add_argument("--class-names", nargs="+", default=None, help="class names for the dice_<class> columns")
    p.add_argument("--no-spatial", action="store_true", help="skip BUC, BA-ECE and SPACE")
    p.add_argument("--regions", default=None, metavar="SPEC",
                   help="region-based (sigmoid) predictions: evaluate every metric per region, QU-BraTS included. "
                        "SPEC: 'brats' (TC, WT, ET of labels 1, 2, 4), 'brats2023' (labels 1, 2, 3), a JSON object "
                        "such as '{\"WT\": [1, 2, 4], \"TC\": [1, 4], \"ET\": [4]}' (key order = channel order) "
                        "or a .json file holding one (docs/regions.md)")
    p.add_argument("--ignore-unclaimed-labels", action="store_true",
                   help="with --regions: count label values that no region holds as background instead of refusing "
                        "them (e.g. label 3 under 'brats' is refused: BraTS 2023 labels need 'brats2023')")
    _add_risk_control(p, defaults=True)
    for product in registered_products():  # the options of every cohort product (monai_unc.product)
        _add_product_options(p, product)
    p.add_argument("--allow-missing", action="store_true",
                   help="skip labelled cases that lack a prediction or map (listed in a warning) instead of failing")
    p.add_argument("--allow-missing-labels", action="store_true",
                   help="skip cases that have predictions but no label (listed in a warning) instead of failing")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")


def _add_product_options(parser: argparse.ArgumentParser, product: Any) -> None:
    """Add a product's options to ``evaluate``.

    A product whose options clash with others is left out (one stderr line naming it), so that one broken plug-in
    does not break the command line.

    Args:
        parser: the ``evaluate`` parser.
        product: a registered :class:`~monai_unc.product.CohortProduct` class.
    """
    trial = argparse.ArgumentParser(add_help=False, parents=[parser], conflict_handler="error")
    try:
        product.add_arguments(trial.add_argument_group(product.title))
    except argparse.ArgumentError as e:
        print(f"monai-unc: the options of product {product.name!r} are left out: {e}", file=sys.stderr)
        return
    product.add_arguments(parser.add_argument_group(product.title, product.description or None))


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
    p.add_argument("--cases", type=int, default=4, help="overlays of the N most uncertain cases (default 4)")
    p.add_argument("--title", default="Uncertainty QC report", help="page title")
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
    g.add_argument("--calibration-cases", default=None, metavar="FILE",
                   help="file of case ids (one per line, or a CSV with a 'case' column) to fit the threshold on; "
                   "the other cases are reported as held out" + (" (default: every case)" if defaults else keep))


def _risk_line(summary: dict) -> str | None:
    rc = summary.get("risk_control")
    if not rc:
        return None
    head = f"risk control ({rc['method']}, {rc['risk']} <= {rc['target_risk']:g} w.p. {1 - rc['delta']:g}): "
    if not rc["feasible"]:
        return head + f"no threshold satisfies the target (best bound {rc['bound']:.4g}); refer every case"
    cal = rc["calibration"]
    thr = rc["threshold"]
    return head + (f"accept score <= {thr:.6g}; " if thr is not None else "accept every case; ") + (
        f"calibration coverage {cal['coverage']:.3f}, observed risk {cal['risk_accepted']:.4f}, "
        f"bound {rc['bound']:.4f}; review {len(rc['referred'])} of {summary['n_cases']}"
    )


def _add_calibrate(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate", help="fit a temperature on validation cases and write a calibrated checkpoint",
        description="Temperature scaling (Kock et al.: NLL or ECE loss, RMSprop lr 0.05 from t = 2, <= 1000 steps) on "
        "the deterministic logits of validation images and labels; writes a calibrated copy of the checkpoint "
        "(t folded into the last layer when possible, else stored beside the weights and applied by 'infer') "
        "and a JSON record with NLL and ECE before and after.",
    )  # fmt: skip
    p.add_argument("--input", "-i", required=True, help="folder of validation images")
    p.add_argument("--labels", "-l", required=True, help="folder of their label maps <case>.nii.gz")
    p.add_argument("--output", "-o", required=True, help="calibrated checkpoint to write (.pt; + .json record)")
    m = p.add_argument_group("model (exactly one of --model, --bundle, --network)")
    m.add_argument("--model", choices=("example",), help="the shipped MNI152 tissue UNet")
    m.add_argument("--bundle", help="MONAI bundle folder (its preprocessing is not applied)")
    m.add_argument("--network", help="network as a MONAI config: inline JSON or a .json/.yaml file with _target_")
    m.add_argument("--checkpoint", default=None, metavar="FILE", help="weights (state dict)")
    m.add_argument("--unsafe-load", action="store_true", help="torch.load(weights_only=False): trusted files only")
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
    p.add_argument("--overlap", type=_fraction, default=0.25, help="sliding-window overlap (default 0.25)")
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
    p.add_argument("--output", default="demo_output", help="output folder (created; default demo_output)")
    p.add_argument("--samples", type=_positive_int, default=None,
                   help="MC dropout samples (default 4; 8 with --quick)")
    p.add_argument("--method", default="mcdropout", help="inferer sources as for 'infer' (default mcdropout)")
    p.add_argument("--roi", nargs="+", type=_positive_int, default=[64], help="sliding-window size (default 64)")
    p.add_argument("--overlap", type=_fraction, default=0.0, help="sliding-window overlap (default 0)")
    p.add_argument("--budget", type=_fraction, default=0.3, help="referral budget of the triage (default 0.3)")
    p.add_argument("--quick", action="store_true",
                   help="the 11-case cohort: certifies nothing, every new case goes to review (default: a rule "
                   "certified on 42 calibration cases, 12 new cases triaged)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")


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
    p.add_argument("--layout", default="monai-unc", choices=tuple(LAYOUTS), help="file naming of --predictions")
    p.add_argument("--uncertainty", default=None, help="folder of <case>_<measure> maps (default: from the layout)")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="triage predictions whose fingerprint differs from the rule's (the page says so)")
    p.add_argument("--cases", type=int, default=4, help="overlays of the N most uncertain cases (default 4)")
    p.add_argument("--conformal-rule", default=None, metavar="RULE",
                   help="conformal_rule.json written by 'evaluate --conformal': also make the conformal masks of the "
                   "new cases (as 'monai-unc conformal', into OUTPUT/conformal/) and show their volumes, band width "
                   "and contours on the page")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")


def _add_conformal(sub: Any) -> None:
    p = sub.add_parser(
        "conformal", help="apply a conformal_rule.json to new unlabelled cases: inner / outer masks",
        description="Read the predictions of new cases (no labels; with probabilities) and write, per case, "
        "<case>_outer.nii.gz / <case>_inner.nii.gz in the prediction's geometry (one channel per foreground class "
        "or region), conformal.csv (inner / predicted / outer volumes in ml, band width in mm) and conformal.json. "
        "Refuses predictions made otherwise than the rule's (fingerprint) unless --allow-mismatch. Resumable; "
        "runs under torchrun. See docs/conformal.md.",
    )  # fmt: skip
    p.add_argument("--predictions", "-p", required=True,
                   help="folder written by 'monai-unc infer' (or nnunet-predict with --layout nnunet)")
    p.add_argument("--rule", "-r", required=True, help="conformal_rule.json written by 'evaluate --conformal'")
    p.add_argument("--output", "-o", required=True, help="output folder (masks, conformal.csv, conformal.json)")
    p.add_argument("--images", default=None, help="folder of the input images")
    p.add_argument("--layout", default="monai-unc", choices=tuple(LAYOUTS), help="file naming of --predictions")
    p.add_argument("--uncertainty", default=None,
                   help="folder of the <case>_<measure> maps when not where the layout puts them (a stratified rule "
                        "whose score comes from map files)")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="apply the rule to predictions whose fingerprint differs (conformal.json says so)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or summary")


def _add_nnunet(sub: Any, wanted: str | None) -> Any:
    """Register the nnU-Net sub-commands; the real parser (which imports nnU-Net v2) only when one is run."""
    if wanted in NNUNET_COMMANDS:
        from .nnunet import cli as nnunet_cli  # ImportError without nnunetv2: reported by main()

        nnunet_cli.add_parser(sub)
        return nnunet_cli
    sub.add_parser("nnunet-predict", help="nnU-Net v2 prediction with uncertainty maps (needs the nnunet extra)",
                   add_help=False)
    sub.add_parser("nnunet-dropout-plans", help="nnU-Net plans with dropout for training (needs the nnunet extra)",
                   add_help=False)
    sub.add_parser("nnunet-calibrate", help="fit temperatures on nnU-Net validation outputs (needs the nnunet extra)",
                   add_help=False)
    return None


def build_parser(command: str | None = None) -> tuple[argparse.ArgumentParser, Any]:
    """The argument parser of ``monai-unc``, and the nnU-Net CLI module when ``command`` is one of its sub-commands.

    Building it imports neither torch nor MONAI, so ``--help`` and argument errors answer at once.

    Args:
        command: the sub-command about to be parsed (the first argument that is not an option), or None. An
            nnU-Net sub-command (``nnunet-predict``) imports its module, which needs the ``nnunet`` extra.

    Returns:
        ``(parser, nnunet_cli)``: the :class:`argparse.ArgumentParser` (one sub-parser per command) and the nnU-Net
        CLI module, or None when ``command`` is not an nnU-Net sub-command.

    Raises:
        ImportError: an nnU-Net sub-command without the ``nnunet`` extra.

    Example:
        >>> parser, nnunet_cli = build_parser()
        >>> args = parser.parse_args(["infer", "--input", "imgs", "--output", "pred", "--model", "example",
        ...                           "--method", "mcdropout+tta", "--roi", "64"])
        >>> args.command, args.method, args.samples, args.roi, nnunet_cli
        ('infer', 'mcdropout+tta', 10, [64], None)
    """
    parser = _Parser(prog="monai-unc", description="Uncertainty for MONAI and nnU-Net segmentation")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _add_infer(sub)
    _add_evaluate(sub)
    _add_report(sub)
    _add_calibrate(sub)
    _add_demo(sub)
    _add_triage(sub)
    _add_conformal(sub)
    nnunet_cli = _add_nnunet(sub, command)
    return parser, nnunet_cli


# ----------------------------------------------------------------------------------------------------------------
# commands
# ----------------------------------------------------------------------------------------------------------------
def _import_commands() -> None:
    """Import what the commands run on (torch, MONAI and the package's workflows) into this module, once.

    :func:`main` calls it once the arguments are parsed, so that ``monai-unc --help``, ``monai-unc COMMAND --help``
    and an argument error answer at once (importing MONAI and torch takes seconds); the first access to one of these
    names as an attribute of this module (``monai_unc.cli.run_demo``) calls it too.
    """
    global _commands_imported, _read_case_list, run_calibrate, calibrate_summary, conformal_command, run_demo
    global evaluate_command, error_text, infer_command, prepare_evaluate, read_case_list, run_report, CohortFailed
    global triage_command
    if _commands_imported:  # names set since (a test's monkeypatch) are kept
        return
    from .workflows.calibrate import calibrate_summary, run_calibrate
    from .workflows.conformal import conformal_command
    from .workflows.demo import run_demo
    from .workflows.evaluate import evaluate_command
    from .workflows.prepare import error_text, infer_command, prepare_evaluate, read_case_list
    from .workflows.report import run_report
    from .workflows.session import CohortFailed
    from .workflows.triage import triage_command

    #: kept for callers of the former private helper; :func:`monai_unc.workflows.prepare.read_case_list`
    _read_case_list = read_case_list
    _commands_imported = True


_commands_imported = False
#: the names :func:`_import_commands` sets (module attributes imported on first access)
_COMMAND_NAMES = frozenset({
    "run_calibrate", "calibrate_summary", "conformal_command", "run_demo", "evaluate_command", "error_text",
    "infer_command", "prepare_evaluate", "read_case_list", "run_report", "CohortFailed", "triage_command",
    "_read_case_list",
})


def __getattr__(name: str) -> Any:
    """``monai_unc.cli.run_demo`` and the other names of :func:`_import_commands`, imported on first access."""
    if name in _COMMAND_NAMES:
        _import_commands()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cmd_infer(args: argparse.Namespace) -> int:
    """``monai-unc infer``: predict every case with uncertainty maps (:func:`~monai_unc.workflows.infer_command`).

    Args:
        args: the parsed arguments of the sub-command (:func:`build_parser`).

    Returns:
        The exit status, 0; the summary lines are printed on rank 0 unless ``--quiet``.

    Raises:
        CohortFailed: some cases failed (:func:`main` returns its exit status, 1).
        ValueError: bad arguments or inputs (:func:`main` prints one line and returns 2; also ``OSError``).
    """
    res = infer_command(
        args.input, args.output, device=args.device, threads=args.threads, overwrite=args.overwrite,
        progress=not args.quiet, model=args.model, bundle=args.bundle, network=args.network,
        checkpoint=args.checkpoint, unsafe_load=args.unsafe_load, bundle_preprocessing=not args.no_bundle_preprocessing,
        method=args.method, samples=args.samples, dropout=args.dropout, tta_noise=args.tta_noise,
        ratein_target=args.ratein_target, measures=args.measures, write_probs=not args.no_probs, roi=args.roi,
        overlap=args.overlap, sw_batch_size=args.sw_batch_size, intensity=args.intensity, activation=args.activation,
        regions=args.regions, seed=args.seed,
    )  # fmt: skip
    return _print_run(res, args.quiet)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """``monai-unc evaluate``: score the predictions against the labels and print the cohort summary.

    Args:
        args: the parsed arguments of the sub-command (:func:`build_parser`).

    Returns:
        The exit status, 0; the summary lines are printed on rank 0 unless ``--quiet``.

    Raises:
        CohortFailed: some cases failed (:func:`main` returns its exit status, 1).
        ValueError: bad arguments or inputs (:func:`main` prints one line and returns 2; also ``OSError``).
    """
    config = prepare_evaluate(
        args.labels, args.predictions, args.output, uncertainty=args.uncertainty, images=args.images,
        shifts=args.shifts, calibration_cases=args.calibration_cases, regions=args.regions, measure=args.measure,
        score=args.score, n_bins=args.n_bins, min_bin_count=args.min_bin_count, failure_dice=args.failure_dice,
        budget=args.budget, patch_size=args.patch_size, spatial=not args.no_spatial, num_classes=args.num_classes,
        class_names=args.class_names, target_risk=args.target_risk, delta=args.delta, risk=args.risk,
        risk_method=args.risk_method, ignore_unclaimed_labels=args.ignore_unclaimed_labels,
        products=products_from_arguments(args),
    )  # fmt: skip
    res = evaluate_command(
        args.labels, args.predictions, args.output, config, layout=args.layout, uncertainty=args.uncertainty,
        images=args.images, measures=args.measures, seg_suffix=args.seg_suffix, probs_suffix=args.probs_suffix,
        allow_missing=args.allow_missing, allow_missing_labels=args.allow_missing_labels, progress=not args.quiet,
    )  # fmt: skip
    _, summary, paths = res.value
    if not args.quiet and res.is_main:
        t, fd = summary["triage"], summary["failure_detection"]
        line = (f"{summary['n_cases']} case(s); mean Dice {summary['dice']['mean']:.4f}; "
                f"AURC {fd['aurc']:.4f}, E-AURC {fd['eaurc']:.4f}")
        cal = summary.get("calibration")
        if cal:
            line += f"; pooled ECE {cal['ece']:.4f}, all-label ECE {cal['all_label_ece']:.4f}"
        print(line)
        if summary.get("regions"):
            per = summary["regions"]["per_region"]
            print("regions: " + "; ".join(
                f"{n} Dice {_fmt(b['dice']['mean'])}" + (f", ECE {_fmt(b['calibration']['ece'])}" if "calibration" in b
                                                          else "")
                + (f", QU-BraTS {_fmt(b['qu_brats']['score'])}" if "qu_brats" in b else "") for n, b in per.items()))
        if summary.get("qu_brats"):
            print(f"QU-BraTS score (mean over regions and cases) {_fmt(summary['qu_brats']['score'])}")
        print(f"triage at {t['budget']:.0%}: review {', '.join(t['referred']) or 'none'}; "
              f"mean Dice of the retained cases {t['dice_retained']:.4f}")
        rc_line = _risk_line(summary)
        if rc_line:
            print(rc_line)
        if summary.get("warnings"):
            print(f"{len(summary['warnings'])} warning(s), see summary.json")
        print(f"wrote {paths['metrics']} and {paths['summary']}")
        if "rule" in paths:
            print(f"wrote {paths['rule']} (apply it to new cases: monai-unc triage --rule {paths['rule']} ...)")
        for product in config.products:  # each product prints its own lines
            if product.name in summary:
                _print(product.summary_lines(summary[product.name]))
            if f"product:{product.name}" in paths:
                _print(product.artifact_lines(paths[f"product:{product.name}"]))
    return 0


def _fmt(v: Any) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def cmd_report(args: argparse.Namespace) -> int:
    """``monai-unc report``: write ``report.html`` from an evaluation and print its path.

    Args:
        args: the parsed arguments of the sub-command (:func:`build_parser`).

    Returns:
        The exit status, 0; the summary lines are printed on rank 0 unless ``--quiet``.

    Raises:
        ValueError: bad arguments or inputs (:func:`main` prints one line and returns 2; also ``OSError``).
    """
    path = run_report(args.evaluation, args.output, budget=args.budget, images=args.images, cases=args.cases,
                      title=args.title, target_risk=args.target_risk, delta=args.delta, risk=args.risk,
                      risk_method=args.risk_method, calibration_cases=args.calibration_cases)
    print(f"report: {path.resolve()}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``monai-unc calibrate``: fit a temperature and write the calibrated checkpoint.

    Args:
        args: the parsed arguments of the sub-command (:func:`build_parser`).

    Returns:
        The exit status, 0; the summary lines are printed on rank 0 unless ``--quiet``.

    Raises:
        ValueError: bad arguments or inputs (:func:`main` prints one line and returns 2; also ``OSError``).
    """
    out, record = run_calibrate(
        args.input, args.labels, args.output, model=args.model, bundle=args.bundle, network=args.network,
        checkpoint=args.checkpoint, unsafe_load=args.unsafe_load, device=args.device, intensity=args.intensity,
        roi=args.roi, overlap=args.overlap, mode=args.mode, loss=args.loss, max_steps=args.max_steps,
        progress=not args.quiet, activation=args.activation, regions=args.regions,
        ignore_unclaimed_labels=args.ignore_unclaimed_labels,
    )  # fmt: skip
    if not args.quiet:
        _print(calibrate_summary(out, record))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``monai-unc demo``: the whole pipeline on the shipped MNI152 example.

    Args:
        args: the parsed arguments of the sub-command (:func:`build_parser`).

    Returns:
        The exit status, 0; the summary lines are printed on rank 0 unless ``--quiet``.

    Raises:
        ValueError: bad arguments or inputs (:func:`main` prints one line and returns 2; also ``OSError``).
    """
    run_demo(args.output, samples=args.samples, quiet=args.quiet, roi=args.roi, method=args.method,
             budget=args.budget, overlap=args.overlap, quick=args.quick)
    return 0


def cmd_triage(args: argparse.Namespace) -> int:
    """``monai-unc triage``: apply a certified referral rule to new cases.

    Args:
        args: the parsed arguments of the sub-command (:func:`build_parser`).

    Returns:
        The exit status, 0; the summary lines are printed on rank 0 unless ``--quiet``.

    Raises:
        CohortFailed: some cases failed (:func:`main` returns its exit status, 1).
        ValueError: bad arguments or inputs (:func:`main` prints one line and returns 2; also ``OSError``).
    """
    run = triage_command(
        args.predictions, args.rule, args.output, images=args.images, allow_mismatch=args.allow_mismatch,
        layout=args.layout, uncertainty=args.uncertainty, cases=args.cases, progress=not args.quiet,
        conformal_rule=args.conformal_rule,
    )  # fmt: skip
    return _print_run(run, args.quiet)


def cmd_conformal(args: argparse.Namespace) -> int:
    """``monai-unc conformal``: apply a conformal rule to new cases (per-case masks).

    Args:
        args: the parsed arguments of the sub-command (:func:`build_parser`).

    Returns:
        The exit status, 0; the summary lines are printed on rank 0 unless ``--quiet``.

    Raises:
        CohortFailed: some cases failed (:func:`main` returns its exit status, 1).
        ValueError: bad arguments or inputs (:func:`main` prints one line and returns 2; also ``OSError``).
    """
    run = conformal_command(args.predictions, args.rule, args.output, images=args.images, layout=args.layout,
                            uncertainty=args.uncertainty, allow_mismatch=args.allow_mismatch,
                            progress=not args.quiet)
    return _print_run(run, args.quiet)


def _print(lines: Sequence[str]) -> None:
    for line in lines:
        print(line)


def _print_run(run: Any, quiet: bool) -> int:
    """Print the summary lines of a cohort command on rank 0 (unless ``--quiet``); exit status 0."""
    if not quiet and run.is_main:
        _print(run.lines)
    return 0


_COMMANDS = {
    "infer": cmd_infer,
    "evaluate": cmd_evaluate,
    "report": cmd_report,
    "calibrate": cmd_calibrate,
    "demo": cmd_demo,
    "triage": cmd_triage,
    "conformal": cmd_conformal,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``monai-unc`` console script.

    Torch, MONAI and the workflows are imported only after the arguments are parsed. Errors of bad arguments or
    inputs are one stderr line (module docstring), not a traceback.

    Args:
        argv: the arguments without the program name (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 when some cases failed, 2 for bad arguments or inputs, 130 when
        interrupted.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        parser, nnunet_cli = build_parser(command)
    except ImportError as e:
        print(f"monai-unc {command}: error: {e}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if nnunet_cli is not None:
        return int(nnunet_cli.run(args))
    _import_commands()  # after parsing: --help and argument errors need neither torch nor MONAI
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning(args.command)
            return _COMMANDS[args.command](args)
    except CohortFailed as e:  # some cases failed: rank 0 said which, the other cases are done
        return e.exit_status
    except KeyboardInterrupt:
        resumable = ("infer", "demo", "evaluate", "triage", "conformal")
        hint = "run the same command again to resume" if args.command in resumable else "nothing was written"
        print(f"monai-unc {args.command}: interrupted; {hint}", file=sys.stderr)
        return 130
    except _INPUT_ERRORS as e:
        print(f"monai-unc {args.command}: error: {error_text(e)}", file=sys.stderr, flush=True)
        return 2


#: errors that bad arguments, inputs or outputs raise (exit status 2, one stderr line): our own ValueErrors (which
#: name the argument), file-system errors (missing, unwritable, a file where a folder is needed) and readers' errors
#: on truncated or corrupt files that no layer below turned into a ValueError
_INPUT_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError)


def _one_line_warning(command: str) -> Callable[..., None]:
    """``warnings.showwarning`` for a command.

    The package's own ``UserWarning`` s as one stderr line each (``monai-unc <command>: warning: ...``); other warnings
    as Python shows them.
    """
    package = str(Path(__file__).resolve().parent)
    original = warnings.showwarning

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        if issubclass(category, UserWarning) and str(Path(filename).resolve()).startswith(package):
            text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
            print(f"monai-unc {command}: warning: {text}", file=sys.stderr, flush=True)
        else:
            original(message, category, filename, lineno, file, line)

    return show


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
