"""Validation study 9 (issue #39): what calibration losses buy and cost against Dice + CE and temperature scaling.

Protocol (MNI152 tissue task, docs/data.md; the other studies' splits):

- training: :func:`monai_unc.data.training.train_tissue_model` (the example UNet with its own dropout p = 0.1,
  patches of the left hemisphere, the same augmentation, Adam, cosine schedule, the same iterations and batches)
  once per loss and seed: Dice + CE (MONAI's ``DiceCELoss``, the baseline) and each loss of docs/training.md as its
  paper trains it (``dice_svls``, ``dice_ce_mbls``, ``dice_ce_hard_l1ace``, ``dice_ce_soft_l1ace``, ``dice_nacl``);
- segmentation: the Dice of grey and white matter on the held-out right hemisphere (deterministic);
- calibration (study 2's split): the right hemisphere cut into axial slabs of 8 slices; a scalar temperature is
  fitted (NLL, :class:`~monai_unc.temperature.TemperatureScaler`) on the even slabs, and NLL, top-label ECE (20
  bins, bins of < 50 voxels ignored) are reported on the odd slabs before and after scaling; BA-ECE (Zeevi et
  al., 10 bands) of the normalised predictive entropy of the deterministic prediction on the right hemisphere;
- failure detection: the cohort of studies 1 and 5 (``_mni152.make_cases``: the template and perturbed copies,
  ``--cases``), MC dropout with the network's own dropout (``--samples``), the case score the mean predictive
  entropy inside the predicted foreground, the risk ``1 - Dice``; AURC (:func:`monai_unc.metrics.aurc`).

Every number is averaged over the seeds (mean and standard deviation in the table). Outputs (atomic, in
``--output``): ``study9_runs/<loss>_seed<k>.json`` (one per network: a rerun resumes and recomputes only the
missing ones, and a file recorded with other settings is computed again), ``study9.json`` and ``study9.md``.

Run (one thread; a network is ~0.35 s per iteration on an idle core)::

    OMP_NUM_THREADS=1 python docs/validation/study9_calibrated_training.py [--iterations 400] [--seeds 0 1 2]
    python docs/validation/study9_calibrated_training.py --tiny --output /tmp/s9   # smoke test
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _mni152 as M  # noqa: E402

from monai_unc.data import load_mni152_tissue  # noqa: E402
from monai_unc.data.training import train_tissue_model  # noqa: E402
from monai_unc.io import atomic_write_text  # noqa: E402
from monai_unc.metrics import aurc, boundary_aware_ece  # noqa: E402

DEFAULT_OUTPUT = HERE / "results"
LOSSES = {
    "dice_ce": "Dice + CE (baseline)",
    "dice_svls": "Dice + SVLS",
    "dice_ce_mbls": "Dice + CE + MbLS",
    "dice_ce_hard_l1ace": "Dice + CE + hard L1-ACE",
    "dice_ce_soft_l1ace": "Dice + CE + soft L1-ACE",
    "dice_nacl": "Dice + NACL",
}
METRICS = ("dice", "ece", "ece_ts", "nll", "nll_ts", "t", "ba_ece", "aurc")


def _study2():
    spec = importlib.util.spec_from_file_location("_validation_study2", HERE / "study2_temperature.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate_network(net: torch.nn.Module, record: dict, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The study's numbers of one trained network (module docstring)."""
    s2 = _study2()
    data = load_mni152_tissue(resolution=2)
    splits = s2.make_splits(data, slab=8, subsample=args.subsample)
    logits = s2.predict_logits(net, data["image"])
    label = torch.from_numpy(np.asarray(data["label"][0], dtype=np.int64))
    z_cal, y_cal = s2.masked(logits, label, splits["cal"])
    z_ev, y_ev = s2.masked(logits, label, splits["eval"])
    fit = s2.fit_temperature(z_cal, y_cal, "nll", args.max_steps)
    before = s2.metrics(s2.histogram(z_ev, y_ev, 1.0))
    after = s2.metrics(s2.histogram(z_ev, y_ev, fit["t"]))
    right = torch.from_numpy(np.asarray(data["right"], dtype=bool))
    probs = torch.softmax(logits, 0)
    entropy = -(probs * torch.log(probs.clamp_min(1e-12))).sum(0) / np.log(3.0)
    pred = probs.argmax(0)
    xs = torch.nonzero(right.any(dim=(1, 2)))[:, 0]
    box = slice(int(xs.min()), int(xs.max()) + 1)
    ba = boundary_aware_ece(entropy[box][None, None], pred[box][None, None], label[box][None, None],
                            spacing=tuple(float(s) for s in data["spacing"]))
    cfg = M.StudyConfig.create(tiny=args.tiny, seed=seed, n_cases=args.cases, samples=args.samples)
    scores, risks = [], []
    for case in M.make_cases(cfg):
        res = M.predict_mc_own(net, case, cfg.samples, seed)
        scores.append(M.case_score(res["pe"], res["seg"]))
        risks.append(1.0 - M.dice_score(res["seg"], case["label"]))
    dice = record["dice_right_heldout"]
    return {
        "dice": float(np.mean(list(dice.values()))),
        "ece": before["ece"],
        "ece_ts": after["ece"],
        "nll": before["nll"],
        "nll_ts": after["nll"],
        "t": fit["t"],
        "ba_ece": float(ba[0]),
        "aurc": float(aurc(np.asarray(scores), np.asarray(risks))),
        "train_seconds": record["train_seconds"],
        "case_scores": scores,
        "case_risks": risks,
    }


def _settings(args: argparse.Namespace, loss: str, seed: int) -> dict[str, Any]:
    return {"loss": loss, "seed": seed, "iterations": args.iterations, "batch_size": args.batch_size,
            "cases": args.cases, "samples": args.samples, "max_steps": args.max_steps, "subsample": args.subsample,
            "tiny": args.tiny}


def run_one(args: argparse.Namespace, loss: str, seed: int) -> dict[str, Any]:
    """One network: trained and evaluated, or read back from its run file when recorded with the same settings."""
    path = args.output / "study9_runs" / f"{loss}_seed{seed}.json"
    settings = _settings(args, loss, seed)
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
            if saved.get("settings") == settings:
                return saved
        except (OSError, ValueError):
            pass
    torch.manual_seed(seed)
    net, record = train_tissue_model(iterations=args.iterations, batch_size=args.batch_size, seed=seed, loss=loss,
                                     progress=not args.quiet)
    out = {"settings": settings, "results": evaluate_network(net, record, args, seed)}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(out, indent=1) + "\n")
    return out


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, tuple[float, float]]]:
    """Mean and standard deviation over the seeds of every metric, per loss."""
    table = {}
    for loss, items in runs.items():
        table[loss] = {}
        for m in METRICS:
            v = np.array([r["results"][m] for r in items], dtype=float)
            table[loss][m] = (float(np.nanmean(v)), float(np.nanstd(v)) if len(v) > 1 else 0.0)
    return table


def render_markdown(res: dict[str, Any]) -> str:
    """The results fragment of docs/validation.md."""
    cfg, table = res["config"], res["table"]
    lines = [
        "## Calibrated training",
        "",
        f"MNI152 tissue task, the example UNet, {cfg['iterations']} iterations of batch {cfg['batch_size']} per "
        f"network, seeds {cfg['seeds']}; MC dropout with {cfg['samples']} samples on {cfg['cases']} cases "
        "(mean ± standard deviation over the seeds; ECE and NLL on the odd slabs of the held-out hemisphere, "
        "before and after a temperature fitted on the even slabs).",
        "",
        "| loss | Dice ↑ | ECE ↓ | ECE after TS ↓ | NLL ↓ | NLL after TS ↓ | t | BA-ECE ↓ | AURC ↓ |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for loss, row in table.items():
        cells = " | ".join(f"{row[m][0]:.4f} ± {row[m][1]:.4f}" if m != "t" else f"{row[m][0]:.2f}"
                           for m in METRICS)
        lines.append(f"| {LOSSES[loss]} | {cells} |")
    base = table.get("dice_ce")
    if base is not None:
        lines += ["", "Against the baseline (differences of the means; negative is better except for Dice):", ""]
        for loss, row in table.items():
            if loss == "dice_ce":
                continue
            d = {m: row[m][0] - base[m][0] for m in ("dice", "ece", "ece_ts", "nll", "ba_ece", "aurc")}
            beats_ts = row["ece"][0] <= base["ece_ts"][0]
            lines.append(
                f"- {LOSSES[loss]}: Dice {d['dice']:+.4f}, ECE {d['ece']:+.4f} (after TS {d['ece_ts']:+.4f}), "
                f"NLL {d['nll']:+.4f}, BA-ECE {d['ba_ece']:+.4f}, AURC {d['aurc']:+.4f}; its ECE without scaling "
                + ("matches or beats" if beats_ts else "does not reach")
                + " the temperature-scaled baseline."
            )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="training seeds (default 0 1 2)")
    p.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)  # run_all passes one seed
    p.add_argument("--losses", nargs="+", choices=tuple(LOSSES), default=list(LOSSES))
    p.add_argument("--iterations", type=int, default=None, help="training iterations per network (default 400)")
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--cases", type=int, default=None, help="failure-detection cases (default 16)")
    p.add_argument("--samples", type=int, default=None, help="MC-dropout samples per case (default 10)")
    p.add_argument("--max-steps", type=int, default=None, help="temperature fit steps at most (default 1000)")
    p.add_argument("--subsample", type=int, default=None, help="every N-th voxel of the calibration splits")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tiny", action="store_true", help="smoke test: 2 iterations, 3 cases, 2 samples, 1 seed")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--render-only", action="store_true", help="rewrite study9.md from study9.json")
    args = p.parse_args(argv)
    if args.seeds is None:
        args.seeds = [args.seed] if args.seed is not None else ([0] if args.tiny else [0, 1, 2])
    defaults = {"iterations": (2, 400), "cases": (3, 16), "samples": (2, 10), "max_steps": (10, 1000),
                "subsample": (16, 1)}
    for name, (tiny, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else full)
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.cases < 2 or args.samples < 2:
        p.error("--cases and --samples must be >= 2")
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    if args.render_only:
        res = json.loads((args.output / "study9.json").read_text())
    else:
        torch.set_num_threads(args.threads)
        start = time.perf_counter()
        runs = {loss: [run_one(args, loss, seed) for seed in args.seeds] for loss in args.losses}
        res = {
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                       if k not in ("output", "render_only", "quiet", "seed")},
            "table": summarize(runs),
            "seconds": round(time.perf_counter() - start, 1),
        }
        atomic_write_text(args.output / "study9.json", json.dumps(res, indent=1) + "\n")
    atomic_write_text(args.output / "study9.md", render_markdown(res))
    return res


if __name__ == "__main__":
    main()
