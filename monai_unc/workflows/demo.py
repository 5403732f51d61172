"""``monai-unc demo``: the whole QC workflow on the shipped MNI152 example, in a few minutes on a laptop CPU.

Cohort (:func:`monai_unc.data.cohorts.make_demo_cohort`; the example data protocol of docs/data.md): the example
network was trained on the *left* hemisphere of the MNI152 2009 template (nilearn, 2 mm); every demo case is the
held-out *right* hemisphere (world x >= 0, cropped, affine kept), so no case overlaps the training data. The cases:

- in distribution (``shift = none``): the template as is, and two copies with a contrast change (gamma 0.85,
  1.2) and a little noise inside the range of the training augmentation;
- shifted copies beyond that range, with the shift recorded as the label: Gaussian noise (std 0.10, 0.16 of
  the [0, 1] intensity range; training used <= 0.05), a multiplicative bias field (``exp`` of a smooth
  quadratic polynomial with coefficients 0.7, 1.1; training <= 0.3), contrast (gamma 0.45, 2.6; training
  0.7-1.5), blur (Gaussian, 2.5 voxels; training <= 1) and a resolution change (every third axial slice kept,
  linearly interpolated back).

The workflow then runs the same functions as the sub-commands: :func:`monai_unc.workflows.infer.predict_cases`
(``infer``: MC dropout, the network's own dropout), :func:`monai_unc.evaluation.run_evaluate` (``evaluate``)
and :func:`monai_unc.report.html.build_report` (``report``). Every step is resumable: running the demo again
reuses finished cases.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..data import TISSUE_CLASSES
from ..data.cohorts import DEMO_SHIFTS, make_demo_cohort
from ..evaluation import EvaluationConfig, read_shifts, run_evaluate
from ..io import atomic_write_json, check_output_folder, list_image_cases, parse_float, read_csv
from ..report.html import build_report
from ..report.triage import link_page
from .factory import build_inferer, check_roi, method_tokens, normalize_roi
from .infer import InferSettings, check_run_settings, complete_settings, predict_cases
from .models import load_network
from .prepare import infer_measures
from .triage import certify_and_triage, format_triage

__all__ = ["run_demo"]

def run_demo(
    output: str | os.PathLike = "demo_output",
    samples: int = 8,
    quiet: bool = False,
    roi: int | Sequence[int] | None = 64,
    method: str = "mcdropout",
    budget: float = 0.3,
    overlap: float = 0.0,
) -> dict[str, Any]:
    """Run the demo into ``output`` (module docstring); returns the cohort summary and prints the report path.

    Every option is checked before the cohort is built (minutes of work), each refusal a ``ValueError`` naming the
    option: the demo runs on one process (not under ``torchrun``), ``output`` must be a writable folder, ``roi`` one
    size (an int or a one-element sequence) or three.

    Args:
        output: the folder the demo writes (data, predictions, evaluation, report, triage).
        samples: MC dropout samples.
        quiet: no progress bars or tables (the report path is printed).
        roi: sliding-window size; None: the whole image.
        method: ``+``-joined inferer sources as for ``monai-unc infer`` (not ``ssn``).
        budget: referral budget of the triage table.
        overlap: sliding-window overlap in [0, 1).

    Returns:
        The cohort summary (``summary.json`` plus the report path).
    """
    if os.environ.get("WORLD_SIZE", "1").strip() not in ("", "1"):
        # every rank would run the whole demo into the same folder
        raise ValueError("demo runs on one process; under torchrun use 'infer' and 'evaluate' (docs/distributed.md)")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"--samples must be a positive integer, got {samples!r}")
    check_output_folder(output)  # writable: before any work
    output = Path(output)
    roi = normalize_roi(roi)
    roi_list = None if roi is None else ([roi] * 3 if isinstance(roi, int) else list(roi))
    check_roi(roi_list, 3, "the example network")
    measures = infer_measures(method)  # the maps infer --method METHOD writes by default
    inferer = build_inferer(method, samples=samples, roi=roi_list, overlap=overlap, sw_batch_size=2, seed=0,
                            measures=measures)
    if "ssn" in method_tokens(method):
        raise ValueError(f"--method {method}: the demo's example network is not a Stochastic Segmentation Network; "
                         "use monai-unc infer with an SSN (docs/ssn.md)")
    config = EvaluationConfig(budget=budget, failure_dice=0.8, class_names=list(TISSUE_CLASSES))
    config.validate()
    t0 = time.time()
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    say(f"[1/4] demo cohort: MNI152 right hemisphere (held out) + shifted copies -> {output / 'data'}")
    cohort = make_demo_cohort(output / "data", shifts=DEMO_SHIFTS)
    say(f"[2/4] infer: {method}, {samples} samples")
    model = load_network(model="example")
    # recorded as `monai-unc infer --model example --intensity none` records it (model, weights and their
    # digests), so that the demo's rule applies to predictions of the same model and settings made with the CLI
    settings = complete_settings(InferSettings(
        model=model.description, method=method, samples=samples, roi=roi_list, overlap=overlap, intensity="none",
        measures=measures, seed=0, activation="softmax",
        checkpoints=[str(Path(c).resolve()) for c in model.checkpoints], write_probs=True,
    ), model)  # fmt: skip
    pred_dir = output / "predictions"
    pred_dir.mkdir(parents=True, exist_ok=True)
    check_run_settings(pred_dir, settings)
    with torch.no_grad():
        predict_cases(list_image_cases(cohort["images"]), model, inferer, settings, pred_dir, progress=not quiet)
    say("[3/4] evaluate")
    config.shifts = read_shifts(cohort["shifts"])
    state, summary, paths = run_evaluate(cohort["labels"], pred_dir, output / "evaluation", config,
                                         images=cohort["images"], progress=not quiet)
    say("[4/4] report")
    report = build_report(output / "evaluation", output / "report")
    say("triage: certify a referral rule on half of the cohort, triage the other half without labels")
    ids = sorted(str(r["case"]) for r in state.rows)  # type: ignore[union-attr]
    rule, triaged, page = certify_and_triage(state, config, pred_dir, output / "triage", ids[0::2], ids[1::2],
                                             target_risk=0.2, delta=0.1, images=cohort["images"], n_overlays=3)
    link_page(report, page, "Triage of new cases: a referral rule certified on half of the cohort, applied to the "
              "other half without labels")
    seconds = time.time() - t0
    summary = dict(summary)
    summary["report"] = str(report.resolve())
    atomic_write_json(output / "demo_summary.json", summary)  # strict JSON: NaN (an undefined metric) -> null
    if not quiet:
        _print_summary(summary, paths["metrics"], seconds)
        dice = {str(r["case"]): {"Dice": float(r["dice"])} for r in state.rows}  # type: ignore[union-attr]
        print("\n".join(format_triage(rule, triaged, dice)) + f"\ntriage page: {page.resolve()}")
    print(f"report: {report.resolve()}")
    return summary


def _print_summary(summary: dict[str, Any], metrics_csv: Path, seconds: float) -> None:
    rows = {r["case"]: r for r in read_csv(metrics_csv)}
    col = summary["score"]["column"]
    referred = set(summary["triage"]["referred"])
    print("MNI152 tissue example: held-out right hemisphere + shifted copies (network trained on the left only)")
    print(f"{'rank':>4}  {'case':<16} {'shift':<11} {'Dice':>6}  {col:>27}  decision")
    for i, cid in enumerate(summary["triage"]["order"], 1):
        r = rows[cid]
        dice, score = parse_float(r["dice"]), parse_float(r[col])
        print(f"{i:>4}  {cid:<16} {r.get('shift', ''):<11} {dice:>6.3f}  {score:>27.4f}  "
              f"{'review' if cid in referred else 'accept'}")
    t, cal = summary["triage"], summary.get("calibration", {})
    print(f"budget {t['budget']:.0%}: {t['n_referred']} case(s) to review; mean Dice of retained cases "
          f"{t['dice_retained']:.3f} (all: {t['dice_all']:.3f})")
    if cal:
        print(f"pooled calibration: ECE {cal['ece']:.4f}, all-label ECE {cal['all_label_ece']:.4f}, "
              f"NLL {cal['nll']:.4f}, Brier {cal['brier']:.4f}")
    fd, ood = summary["failure_detection"], summary.get("ood", {})
    line = f"failure detection (risk 1 - Dice): AURC {fd['aurc']:.4f}, E-AURC {fd['eaurc']:.4f}"
    if ood.get("auroc") is not None:
        line += f"; OoD AUROC {ood['auroc']:.3f}"
    print(line)
    print(f"finished in {seconds:.0f} s")
