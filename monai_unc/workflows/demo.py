"""``monai-unc demo``: the whole QC workflow on the shipped MNI152 example, a rule certified and new cases triaged.

Cohort (:func:`monai_unc.data.cohorts.make_demo_cohort`; the example data protocol of docs/data.md): the example
network was trained on the *left* hemisphere of the MNI152 2009 template (nilearn, 2 mm); every demo case is the
held-out *right* hemisphere (world x >= 0, cropped, affine kept), so no case overlaps the training data, with one
perturbation: contrast (gamma) with a little noise, Gaussian noise, a multiplicative bias field, contrast, blur or a
resolution change (every n-th axial slice kept, linearly interpolated back). A level inside the range of the
training augmentation (noise std <= 0.05, bias <= 0.3, gamma 0.7-1.5, blur <= 1 voxel) is labelled ``none``.

The full demo (default) has two parts:

- a calibration cohort of 42 labelled cases (:data:`~monai_unc.data.cohorts.DEMO_CALIBRATION_SHIFTS`): graded
  severities of every kind, from mild (Dice ~0.80-0.86; clean: 0.845) to severe (Dice down to ~0.65); 35 keep
  Dice >= 0.8 and 7 fail, as a clinic's stream is mostly mild;
- 12 new cases (:data:`~monai_unc.data.cohorts.DEMO_NEW_SHIFTS`): other levels of the same kinds with other noise
  draws, triaged from their predictions and images only, as ``monai-unc triage`` does.

The referral rule is certified on the calibration cases with SGR (:func:`~monai_unc.metrics.risk_controlled_threshold`)
for this guarantee: with probability at least 1 - delta = 0.9 over the draw of the calibration cases, at most a
fraction 0.2 of the new cases its threshold accepts fail, a failure being Dice < 0.8. Why these numbers:

- Dice < 0.8: the evaluation's failure Dice; the example network reaches ~0.845 on the clean held-out hemisphere, so
  a failure is a loss of about 5 Dice points, visible as wrong tissue boundaries over whole regions.
- target 0.2 and delta 0.1: SGR tests 20 candidate thresholds at delta / 20 each (Clopper-Pearson), so with no
  failure among ``k`` accepted calibration cases the bound is ``1 - (delta / 20) ** (1 / k)``, at most the target
  only for ``k >= ln(delta / 20) / ln(1 - target)``: 24 cases for 0.2 (34 with one failure among them, 43 with
  two), 51 for a target of 0.1, 104 for 0.05. A 0.2 target is what a cohort of about 40 cases, most of them
  mild, can certify while still accepting most mild cases; a stricter one needs a larger calibration cohort, not
  a different demo. (Today's 11 cases cannot certify any useful target: ``--quick``.)

The guarantee is on average over new cases exchangeable with the calibration cases, not case by case: the score
(predictive entropy over the predicted foreground) misses some failures, e.g. the resolution loss, which degrades
Dice while the network stays confident; the printed summary shows the realised failure rate of the accepted new
cases (the demo has their labels) beside the target.

Inference is MC dropout with 4 samples (``--samples``) in 64^3 windows (the network's inference window) without
overlap, about half the cost of the 8 samples of ``--quick``; the case score is a mean over about 10^5 voxels,
which 4 samples estimate well enough to rank cases (the referral threshold is certified on the same score, so the
guarantee does not depend on how well it is estimated). ``--quick``: today's 11 cases
(:data:`~monai_unc.data.cohorts.DEMO_SHIFTS`) with 8 samples, the rule certified on half of them (it certifies
nothing on 6 cases: every new case goes to review) and the other half triaged.

The workflow runs the same functions as the sub-commands: :func:`monai_unc.workflows.infer.predict_cases`
(``infer``: MC dropout, the network's own dropout), :func:`monai_unc.evaluation.run_evaluate` (``evaluate``, on
every case: the new cases' labels give only the report and the realised risk),
:func:`monai_unc.report.html.build_report` (``report``) and :func:`monai_unc.workflows.triage.certify_and_triage`
(``evaluate --target-risk`` then ``triage``). Every step is resumable: running the demo again reuses finished cases.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..data import TISSUE_CLASSES
from ..data.cohorts import DEMO_CALIBRATION_SHIFTS, DEMO_NEW_SHIFTS, DEMO_RECORD, DEMO_SHIFTS, make_demo_cohort
from ..evaluation import EvaluationConfig, read_shifts, run_evaluate
from ..evaluation.triage import RULE_FILE
from ..io import atomic_write_json, check_output_folder, list_image_cases, parse_float, read_csv, read_json_or_none
from ..product import format_cell, format_fraction, format_score
from ..report.html import build_report
from ..report.triage import link_page
from ..report.viewer import check_convention
from .factory import build_inferer, check_roi, method_tokens, normalize_roi
from .infer import InferSettings, check_run_settings, complete_settings, predict_cases
from .models import load_network
from .prepare import infer_measures, resolve_device
from .session import CommandResult
from .triage import certify_and_triage, format_outcome, format_triage, triage_outcome

__all__ = ["run_demo", "demo_from_arguments", "TARGET_RISK", "DELTA", "FAILURE_DICE"]

#: the full demo's guarantee (module docstring): at most this fraction of the new cases the threshold accepts fail ...
TARGET_RISK = 0.2
#: ... with probability at least 1 - DELTA over the draw of the calibration cases
DELTA = 0.1
#: a case fails when its Dice is below this
FAILURE_DICE = 0.8


#: windows per network call of the demo's inferer (recorded with its settings: seeded draws depend on it)
_SW_BATCH = 2


def run_demo(
    output: str | os.PathLike = "demo_output",
    samples: int | None = None,
    quiet: bool = False,
    roi: int | Sequence[int] | None = 64,
    method: str = "mcdropout",
    budget: float = 0.3,
    overlap: float = 0.0,
    quick: bool = False,
    device: str | torch.device = "cpu",
    convention: str = "neurological",
) -> dict[str, Any]:
    """Run the demo into ``output`` (module docstring); returns the cohort summary and prints the report path.

    Every option is checked before the cohort is built (minutes of work), each refusal a ``ValueError`` naming the
    option: the demo runs on one process (not under ``torchrun``), ``output`` must be a writable folder, ``roi`` one
    size (an int or a one-element sequence) or three.

    Args:
        output: the folder the demo writes (data, predictions, evaluation, report, triage).
        samples: MC dropout samples (None: 4, or 8 with ``quick``).
        quiet: no progress bars or tables (the report path is printed).
        roi: sliding-window size; None: the whole image.
        method: ``+``-joined inferer sources as for ``monai-unc infer`` (not ``ssn``).
        budget: referral budget of the triage table.
        overlap: sliding-window overlap in [0, 1).
        quick: the 11 cases of :data:`~monai_unc.data.cohorts.DEMO_SHIFTS`, the rule certified on half of them and
            the other half triaged, instead of the 42 calibration and 12 new cases.
        device: where the network runs (``--device``: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"auto"``), checked as
            ``monai-unc infer`` checks it (:func:`~monai_unc.workflows.prepare.resolve_device`): ``cuda`` where torch
            finds no CUDA GPU is refused, saying why and that ``--device cpu`` works. The documented results are
            the CPU's; a GPU's kernels may round differently.
        convention: how the pages' case figures and viewers draw the patient's sides (``--convention``):
            ``"neurological"`` (default) or ``"radiological"`` (:data:`monai_unc.report.viewer.CONVENTIONS`).

    Returns:
        The cohort summary (``summary.json`` plus the report path and ``"demo"``: the guarantee, what happened to
        the new cases (:func:`~monai_unc.workflows.triage.triage_outcome`) and the run time).
    """
    if os.environ.get("WORLD_SIZE", "1").strip() not in ("", "1"):
        # every rank would run the whole demo into the same folder
        raise ValueError("demo runs on one process; under torchrun use 'infer' and 'evaluate' (docs/distributed.md)")
    convention = check_convention(convention)
    if samples is None:
        samples = 8 if quick else 4
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"--samples must be a positive integer, got {samples!r}")
    # as infer checks it (found by review 62: demo had no --device, and `demo --device cuda` was argparse's
    # "unrecognized arguments", naming no command)
    dev = resolve_device(device)
    check_output_folder(output)  # writable: before any work
    output = Path(output)
    shifts = DEMO_SHIFTS if quick else DEMO_CALIBRATION_SHIFTS + DEMO_NEW_SHIFTS
    _check_same_cohort(output, shifts, quick)
    roi = normalize_roi(roi)
    roi_list = None if roi is None else ([roi] * 3 if isinstance(roi, int) else list(roi))
    check_roi(roi_list, 3, "the example network")
    measures = infer_measures(method)  # the maps infer --method METHOD writes by default
    inferer = build_inferer(method, samples=samples, roi=roi_list, overlap=overlap, sw_batch_size=_SW_BATCH, seed=0,
                            measures=measures)
    if "ssn" in method_tokens(method):
        raise ValueError(f"--method {method}: the demo's example network is not a Stochastic Segmentation Network; "
                         "use monai-unc infer with an SSN (docs/ssn.md)")
    config = EvaluationConfig(budget=budget, failure_dice=FAILURE_DICE, class_names=list(TISSUE_CLASSES))
    config.validate()
    t0, cpu0 = time.time(), time.process_time()
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    what = "11 cases" if quick else f"{len(DEMO_CALIBRATION_SHIFTS)} calibration + {len(DEMO_NEW_SHIFTS)} new cases"
    say(f"[1/5] demo cohort: MNI152 right hemisphere (held out) + shifted copies, {what} -> {output / 'data'}")
    cohort = make_demo_cohort(output / "data", shifts=shifts)
    say(f"[2/5] infer: {method}, {samples} samples")
    model = load_network(model="example", device=dev)
    # recorded as `monai-unc infer --model example --intensity none` records it (model, weights and their
    # digests), so that the demo's rule applies to predictions of the same model and settings made with the CLI
    settings = complete_settings(InferSettings(
        model=model.description, method=method, samples=samples, roi=roi_list, overlap=overlap, intensity="none",
        measures=measures, seed=0, activation="softmax",
        checkpoints=[str(Path(c).resolve()) for c in model.checkpoints], write_probs=True, sw_batch_size=_SW_BATCH,
    ), model)  # fmt: skip
    pred_dir = output / "predictions"
    pred_dir.mkdir(parents=True, exist_ok=True)
    check_run_settings(pred_dir, settings, overwrite_option=False)  # demo has no --overwrite
    with torch.no_grad():
        predict_cases(list_image_cases(cohort["images"]), model, inferer, settings, pred_dir, device=dev,
                      progress=not quiet)
    say("[3/5] evaluate")
    config.shifts = read_shifts(cohort["shifts"])
    state, summary, paths = run_evaluate(cohort["labels"], pred_dir, output / "evaluation", config,
                                         images=cohort["images"], progress=not quiet)
    say("[4/5] report")
    report = build_report(output / "evaluation", output / "report", convention=convention)
    ids = sorted(str(r["case"]) for r in state.rows)  # type: ignore[union-attr]
    if quick:
        cal, new = ids[0::2], ids[1::2]
        say("[5/5] triage: certify a referral rule on half of the cohort, triage the other half without labels")
        caption = ("Triage of new cases: a referral rule certified on half of the cohort, applied to the other half "
                   "without labels")
    else:
        cal, new = [c[0] for c in DEMO_CALIBRATION_SHIFTS], [c[0] for c in DEMO_NEW_SHIFTS]
        say(f"[5/5] triage: certify a referral rule on the {len(cal)} calibration cases, triage the {len(new)} new "
            "cases without labels")
        caption = (f"Triage of {len(new)} new cases: a referral rule certified on {len(cal)} calibration cases, "
                   "applied without labels")
    rule, triaged, page = certify_and_triage(state, config, pred_dir, output / "triage", cal, new,
                                             target_risk=TARGET_RISK, delta=DELTA, images=cohort["images"],
                                             n_overlays=3, convention=convention)
    link_page(report, page, caption)
    dice = {str(r["case"]): float(r["dice"]) for r in state.rows}  # type: ignore[union-attr]
    outcome = triage_outcome(rule, triaged, dice)
    seconds, cpu = time.time() - t0, time.process_time() - cpu0
    summary = dict(summary)
    summary["report"] = str(report.resolve())
    summary["demo"] = {"cohort": "quick" if quick else "full", "samples": samples, "guarantee": rule.guarantee(),
                       "new_cases": outcome, "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1)}
    atomic_write_json(output / "demo_summary.json", summary)  # strict JSON: NaN (an undefined metric) -> null
    if not quiet:
        _print_summary(summary, paths["metrics"], seconds, cpu)
        extra = {c: {"Dice": d} for c, d in dice.items()}
        print("\n".join(format_triage(rule, triaged, extra)) + f"\ntriage page: {page.resolve()}")
        print("\n".join(format_outcome(rule, outcome)))
        print(f"finished in {seconds:.0f} s wall, {cpu:.0f} s CPU (this process; inference may use several threads)")
        rule_file = (output / "triage" / RULE_FILE).resolve()
        print(f"more images, with the settings the rule was certified with: monai-unc infer -i IMAGES -o PRED --model "
              f"example --settings-from {rule_file}; then monai-unc triage -p PRED --rule {rule_file} -o TRIAGE")
    print(f"report: {report.resolve()}")
    return summary


def _check_same_cohort(output: Path, shifts: Sequence[tuple[str, str, str, float]], quick: bool) -> None:
    """Refuse an ``--output`` folder that holds a demo of the other cohort.

    ``ValueError`` naming ``--output`` when it holds a demo of the other cohort (``--quick`` or not, or a demo
    written before the full cohort existed): every step lists the whole folder, so the two would mix. The cohort is
    read from ``data/shifts.csv`` (written once the cohort is complete) and, for a run interrupted before that, from
    the cases already made (``data/images`` and the record of :func:`~monai_unc.data.cohorts.make_demo_cohort`).
    """
    expected = {str(c[0]) for c in shifts}
    other = "the full demo's" if quick else "another (e.g. --quick, or an earlier version's)"
    refusal = (f"--output {output} holds {other} cohort; the demo resumes only its own: choose another --output or "
               "remove that folder")
    found = output / "data" / "shifts.csv"
    if found.is_file():
        try:
            cases = {str(r["case"]) for r in read_csv(found)}
        except (OSError, ValueError, KeyError):
            cases = set()
        if cases and cases != expected:
            raise ValueError(refusal)
    made = read_json_or_none(output / "data" / DEMO_RECORD)
    started = set(made) if isinstance(made, dict) else set()
    images = output / "data" / "images"
    if images.is_dir():
        started |= {p.name[: -len(".nii.gz")] for p in images.iterdir() if p.name.endswith(".nii.gz")}
    if started - expected:
        raise ValueError(refusal)


def _print_summary(summary: dict[str, Any], metrics_csv: Path, seconds: float, cpu: float) -> None:
    rows = {r["case"]: r for r in read_csv(metrics_csv)}
    col = summary["score"]["column"]
    referred = set(summary["triage"]["referred"])
    print("MNI152 tissue example: held-out right hemisphere + shifted copies (network trained on the left only)")
    budget = format_fraction(summary["triage"]["budget"])
    print(f"{'rank':>4}  {'case':<16} {'shift':<11} {'Dice':>6}  {col:>27}  budget {budget}")
    for i, cid in enumerate(summary["triage"]["order"], 1):
        r = rows[cid]
        dice, score = parse_float(r["dice"]), parse_float(r[col])
        print(f"{i:>4}  {cid:<16} {r.get('shift', ''):<11} {dice:>6.3f}  {format_score(score):>27}  "
              f"{'budget: flagged' if cid in referred else 'budget: kept'}")
    t, cal = summary["triage"], summary.get("calibration", {})
    kept = t["dice_kept"] if t.get("dice_kept") is not None else t["dice_retained"]
    print(f"budget {budget}: {t['n_referred']} case(s) flagged for review; mean Dice of the kept cases "
          f"{kept:.3f} (all: {t['dice_all']:.3f}); a ranking without a guarantee: the certified rule's "
          "decisions (rule: accept / review) below carry the guarantee")
    if cal:
        print(f"pooled calibration: ECE {format_cell(cal['ece'], 4)}, all-label ECE "
              f"{format_cell(cal['all_label_ece'], 4)}, NLL {format_cell(cal['nll'], 4)}, "
              f"Brier {format_cell(cal['brier'], 4)}")
    fd, ood = summary["failure_detection"], summary.get("ood", {})
    line = (f"failure detection (risk 1 - Dice): AURC {format_cell(fd['aurc'], 4)}, "
            f"E-AURC {format_cell(fd['eaurc'], 4)}")
    if ood.get("auroc") is not None:
        line += f"; OoD AUROC {ood['auroc']:.3f}"
    print(line)


def demo_from_arguments(args: argparse.Namespace) -> CommandResult[dict[str, Any]]:
    """``monai-unc demo`` on its parsed arguments (:func:`monai_unc.workflows.arguments.add_command_parsers`).

    Args:
        args: the parsed arguments of ``monai-unc demo``.

    Returns:
        The :class:`~monai_unc.workflows.session.CommandResult` of :func:`run_demo`'s cohort summary; no lines (the
        demo prints as it goes).
    """
    summary = run_demo(args.output, samples=args.samples, quiet=args.quiet, roi=args.roi, method=args.method,
                       budget=args.budget, overlap=args.overlap, quick=args.quick, device=args.device,
                       convention=getattr(args, "convention", "neurological"))
    return CommandResult(summary, True, Path(args.output).resolve())
