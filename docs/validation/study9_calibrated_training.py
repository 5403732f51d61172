"""Validation study 9 (issue #39): what calibration losses buy and cost against Dice + CE and temperature scaling.

Two tasks (``--task mni152 | toy | all``, default all), the same protocol on each: every loss of docs/training.md
as its paper trains it (``dice_svls``, ``dice_ce_mbls``, ``dice_ce_hard_l1ace``, ``dice_ce_soft_l1ace``,
``dice_nacl``) against Dice + CE (MONAI's ``DiceCELoss``, the baseline), the same network, data, augmentation,
iterations and batches for every loss, one network per loss and seed.

MNI152 tissue task (docs/data.md; the other studies' splits):

- training: :func:`monai_unc.data.training.train_tissue_model` (the example UNet with its own dropout p = 0.1,
  patches of the left hemisphere, Adam, cosine schedule; ``--iterations``, ``--batch-size``);
- segmentation: the Dice of grey and white matter on the held-out right hemisphere (deterministic);
- calibration (study 2's split): the right hemisphere cut into axial slabs of 8 slices; a scalar temperature is
  fitted (NLL, :class:`~monai_unc.temperature.TemperatureScaler`) on the even slabs, and NLL, top-label ECE (20
  bins, bins of < 50 voxels ignored) are reported on the odd slabs before and after scaling; BA-ECE (Zeevi et
  al., 10 bands) of the normalised predictive entropy of the deterministic prediction on the right hemisphere;
- failure detection: the cohort of studies 1 and 5 (``_mni152.make_cases``: the template and perturbed copies,
  ``--cases``), MC dropout with the network's own dropout (``--samples``), the case score the mean predictive
  entropy inside the predicted foreground, the risk ``1 - Dice``; AURC (:func:`monai_unc.metrics.aurc`).

Toy task (study 3's synthetic set, ValUES Appendix B: 32^3 volumes, one object, three raters who disagree on
blurred borders; the cohorts of study 3's seed 0, :func:`toy_cohorts`):

- training: study 3's toy U-Net (dropout 0.5, flips and noise, Adam, cosine schedule, batch 4;
  ``--toy-iterations``) on 80 cases, half of them blurred, one random rater per case drawn with the network's seed;
- segmentation: the foreground Dice on 60 i.i.d. test cases (30 sharp, 30 blurred; majority-vote labels);
- calibration: a scalar temperature fitted on the voxels of 20 validation cases; NLL and ECE (as above) on the
  voxels of the test cases before and after scaling; BA-ECE per test case (mean over the cases);
- failure detection: MC dropout (``--samples``) on the test cases and 30 shifted ones (intensity, shape, position),
  the case score the mean predictive entropy inside the predicted foreground (1, the largest score, when nothing is
  predicted), the risk ``1 - Dice``; AURC.

Every number is averaged over the seeds (mean and standard deviation in the tables). Outputs (atomic, in
``--output``): ``study9_runs/<task>/<loss>_seed<k>.json`` (one per network: a rerun resumes and recomputes only the
missing ones, and a file recorded with other settings is computed again; the networks run seed-major, so an
interrupted run already holds every loss of its first seeds), ``study9.json`` (MNI152), ``study9_toy.json`` and
``study9.md`` (the tables of every task with results in the folder).

Run (one thread; an MNI152 network is ~0.35-0.5 s per iteration on an idle core, a toy network ~0.2 s)::

    OMP_NUM_THREADS=1 python docs/validation/study9_calibrated_training.py [--iterations 400] [--seeds 0 1 2]
    OMP_NUM_THREADS=1 python docs/validation/study9_calibrated_training.py --task toy [--toy-iterations 300]
    python docs/validation/study9_calibrated_training.py --tiny --output /tmp/s9   # smoke test, both tasks
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
import _toy as T  # noqa: E402

from monai_unc.data import load_mni152_tissue, make_toy_dataset  # noqa: E402
from monai_unc.data.training import hemisphere_dice, train_tissue_model  # noqa: E402
from monai_unc.inferers import MCDropoutInferer  # noqa: E402
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
TASKS = ("mni152", "toy")
#: the toy task's cohorts (study 3's data, seed 0): volumes, training, temperature, test and shifted cases
TOY = {"shape": (32, 32, 32), "n_train": 80, "n_val": 20, "n_test_clean": 30, "n_test_blur": 30, "n_shift": 30}
TOY_BATCH = 4  # study 3's
TOY_TINY = {"shape": (16, 16, 16), "n_train": 8, "n_val": 4, "n_test_clean": 3, "n_test_blur": 3, "n_shift": 3}


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
    if "dice_right_heldout" not in record:  # trained with evaluate=False: the Dice from these logits (one prediction)
        record = {**record, "dice_right_heldout": hemisphere_dice(net, data, logits=logits)["right"]}
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


def toy_cohorts(tiny: bool) -> dict[str, list[dict]]:
    """The toy task's cases (study 3's generator and seeds): ``train`` and ``val`` half with blurred borders (three
    raters), ``test`` i.i.d. cases (half blurred), ``shifted`` intensity / shape / position shifts."""
    cfg = TOY_TINY if tiny else TOY
    shape = cfg["shape"]
    return {
        "train": T.toy_mix(cfg["n_train"], shape, 0.5, seed=1),
        "val": T.toy_mix(cfg["n_val"], shape, 0.5, seed=2),
        "test": make_toy_dataset(cfg["n_test_clean"], shape=shape, blur=False, seed=3)
        + make_toy_dataset(cfg["n_test_blur"], shape=shape, blur=True, seed=4),
        "shifted": make_toy_dataset(cfg["n_shift"], shape=shape, blur=False, shift=["intensity", "shape", "position"],
                                    seed=5),
    }


def _toy_logits(net: torch.nn.Module, cases: Sequence[dict]) -> torch.Tensor:
    """Deterministic logits ``(N, 2, *shape)`` of the cases (dropout off)."""
    net.eval()
    with torch.no_grad():
        return net(torch.stack([torch.from_numpy(np.asarray(c["image"], dtype=np.float32)) for c in cases])).float()


def _pooled(logits: torch.Tensor, cases: Sequence[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """All voxels of the cases as one batch: logits ``(1, C, n)``, majority-vote labels ``(1, n)``."""
    labels = torch.stack([torch.from_numpy(np.asarray(c["label"], dtype=np.int64)) for c in cases])
    return logits.movedim(1, 0).reshape(logits.shape[1], -1)[None], labels.reshape(1, -1)


def evaluate_toy_network(net: torch.nn.Module, cohorts: dict[str, list[dict]], args: argparse.Namespace,
                         seed: int) -> dict[str, Any]:
    """The study's numbers of one toy network: Dice, ECE and NLL before and after a temperature fitted on the
    validation cases, BA-ECE on the test cases, AURC of MC dropout over the test and shifted cases (module
    docstring)."""
    s2 = _study2()
    z_val, y_val = _pooled(_toy_logits(net, cohorts["val"]), cohorts["val"])
    logits = _toy_logits(net, cohorts["test"])
    z_ev, y_ev = _pooled(logits, cohorts["test"])
    fit = s2.fit_temperature(z_val, y_val, "nll", args.max_steps)
    before = s2.metrics(s2.histogram(z_ev, y_ev, 1.0))
    after = s2.metrics(s2.histogram(z_ev, y_ev, fit["t"]))
    probs = torch.softmax(logits, 1)
    entropy = -(probs * torch.log(probs.clamp_min(1e-12))).sum(1, keepdim=True) / np.log(2.0)
    pred = probs.argmax(1, keepdim=True)
    label = torch.stack([torch.from_numpy(np.asarray(c["label"], dtype=np.int64)) for c in cohorts["test"]])[:, None]
    ba = boundary_aware_ece(entropy, pred, label, spacing=(1.0, 1.0, 1.0))
    dice = [T.binary_dice(p[0].numpy() > 0, y[0].numpy() > 0) for p, y in zip(pred, label)]
    inferer = MCDropoutInferer(num_samples=args.samples, normalize=True, seed=seed)
    scores, risks = [], []
    for case in cohorts["test"] + cohorts["shifted"]:
        out = T.predict_case(inferer, net, case["image"])
        seg = out["pred"].argmax(0) > 0
        # the mean predictive entropy inside the predicted foreground; nothing predicted: the largest score, 1
        scores.append(M.case_score(out["predictive_entropy"][0], seg) if seg.any() else 1.0)
        risks.append(1.0 - T.binary_dice(seg, np.asarray(case["label"]) > 0))
    return {
        "dice": float(np.mean(dice)),
        "ece": before["ece"],
        "ece_ts": after["ece"],
        "nll": before["nll"],
        "nll_ts": after["nll"],
        "t": fit["t"],
        "ba_ece": float(np.nanmean(ba.numpy() if isinstance(ba, torch.Tensor) else np.asarray(ba))),
        "aurc": float(aurc(np.asarray(scores), np.asarray(risks))),
        "case_scores": scores,
        "case_risks": risks,
    }


def train_toy(args: argparse.Namespace, cohorts: dict[str, list[dict]], loss: str, seed: int) -> tuple[Any, float]:
    """Study 3's toy U-Net (dropout 0.5) trained with ``loss`` on one random rater per case; ``(network, seconds)``."""
    cfg = T.TrainConfig(iterations=args.toy_iterations, batch_size=TOY_BATCH,
                        extra={} if loss == "dice_ce" else {"loss": loss})
    images = [c["image"] for c in cohorts["train"]]
    start = time.perf_counter()
    net = T.train_network(images, T.random_rater_labels(cohorts["train"], seed), cfg, seed, cache_dir=None,
                          log=(lambda _m: None) if args.quiet else print)
    return net, round(time.perf_counter() - start, 1)


def _settings(args: argparse.Namespace, task: str, loss: str, seed: int) -> dict[str, Any]:
    if task == "toy":
        return {"task": task, "loss": loss, "seed": seed, "iterations": args.toy_iterations,
                "batch_size": TOY_BATCH, "samples": args.samples, "max_steps": args.max_steps, "tiny": args.tiny}
    return {"task": task, "loss": loss, "seed": seed, "iterations": args.iterations, "batch_size": args.batch_size,
            "cases": args.cases, "samples": args.samples, "max_steps": args.max_steps, "subsample": args.subsample,
            "tiny": args.tiny}


def run_one(args: argparse.Namespace, task: str, loss: str, seed: int,
            cohorts: dict[str, list[dict]] | None = None) -> dict[str, Any]:
    """One network: trained and evaluated, or read back from its run file when recorded with the same settings."""
    path = args.output / "study9_runs" / task / f"{loss}_seed{seed}.json"
    settings = _settings(args, task, loss, seed)
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
            if saved.get("settings") == settings:
                return saved
        except (OSError, ValueError):
            pass
    torch.manual_seed(seed)
    if task == "toy":
        net, seconds = train_toy(args, cohorts if cohorts is not None else toy_cohorts(args.tiny), loss, seed)
        results = {**evaluate_toy_network(net, cohorts or toy_cohorts(args.tiny), args, seed), "train_seconds": seconds}
    else:
        net, record = train_tissue_model(iterations=args.iterations, batch_size=args.batch_size, seed=seed, loss=loss,
                                         progress=not args.quiet, evaluate=False)  # evaluate_network adds the Dice
        results = evaluate_network(net, record, args, seed)
    out = {"settings": settings, "results": results}
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


def _intro(task: str, cfg: dict[str, Any]) -> list[str]:
    if task == "toy":
        size = TOY_TINY if cfg.get("tiny") else TOY
        return [
            "## Calibrated training: toy task",
            "",
            f"Study 3's synthetic toy set ({size['shape'][0]}^3 volumes, three raters, half of the cases with "
            f"blurred borders), study 3's toy U-Net (dropout 0.5), {cfg['toy_iterations']} iterations of batch "
            f"{TOY_BATCH} per network on {size['n_train']} cases (one random rater per case), seeds {cfg['seeds']}; a "
            f"temperature fitted on {size['n_val']} validation cases; Dice (foreground), ECE, NLL and BA-ECE on "
            f"{size['n_test_clean'] + size['n_test_blur']} i.i.d. test cases (half blurred, majority-vote labels); "
            f"AURC of MC dropout ({cfg['samples']} samples) over those and {size['n_shift']} shifted cases "
            "(intensity / shape / position). Mean ± standard deviation over the seeds when there are several.",
        ]
    return [
        "## Calibrated training",
        "",
        f"MNI152 tissue task, the example UNet, {cfg['iterations']} iterations of batch {cfg['batch_size']} per "
        f"network, seeds {cfg['seeds']}; MC dropout with {cfg['samples']} samples on {cfg['cases']} cases "
        "(mean ± standard deviation over the seeds when there are several; ECE and NLL on the odd slabs of the "
        "held-out hemisphere, "
        "before and after a temperature fitted on the even slabs).",
    ]


def render_markdown(results: dict[str, dict[str, Any]]) -> str:
    """The results fragment of docs/validation.md: one section per task in ``results`` (task -> its JSON)."""
    lines: list[str] = []
    for task in TASKS:
        if task not in results:
            continue
        res = results[task]
        table = res["table"]
        if lines:
            lines.append("")
        lines += _intro(task, res["config"])
        lines += [
            "",
            "| loss | Dice ↑ | ECE ↓ | ECE after TS ↓ | NLL ↓ | NLL after TS ↓ | t | BA-ECE ↓ | AURC ↓ |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        spread = len(res["config"]["seeds"]) > 1  # one seed: the means alone, no spread to show
        for loss, row in table.items():
            cells = " | ".join(f"{row[m][0]:.2f}" if m == "t" else f"{row[m][0]:.4f} ± {row[m][1]:.4f}" if spread
                               else f"{row[m][0]:.4f}" for m in METRICS)
            lines.append(f"| {LOSSES[loss]} | {cells} |")
        base = table.get("dice_ce")
        if base is None:
            continue
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
    p.add_argument("--task", choices=(*TASKS, "all"), default="all", help="training task(s) (default: %(default)s)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="training seeds (default 0 1 2)")
    p.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)  # run_all passes one seed
    p.add_argument("--losses", nargs="+", choices=tuple(LOSSES), default=list(LOSSES))
    p.add_argument("--iterations", type=int, default=None, help="MNI152 iterations per network (default 400)")
    p.add_argument("--toy-iterations", type=int, default=None, help="toy iterations per network (default 300)")
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--cases", type=int, default=None, help="failure-detection cases (default 16)")
    p.add_argument("--samples", type=int, default=None, help="MC-dropout samples per case (default 10)")
    p.add_argument("--max-steps", type=int, default=None, help="temperature fit steps at most (default 1000)")
    p.add_argument("--subsample", type=int, default=None, help="every N-th voxel of the calibration splits")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--tiny", action="store_true", help="smoke test: 1 (toy 2) iterations, 3 cases, 2 samples, 1 seed")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--render-only", action="store_true", help="rewrite study9.md from study9.json / study9_toy.json")
    args = p.parse_args(argv)
    if args.seeds is None:
        args.seeds = [args.seed] if args.seed is not None else ([0] if args.tiny else [0, 1, 2])
    # --tiny checks the pipeline: one step of each MNI152 network (~0.7 s of CPU each)
    defaults = {"iterations": (1, 400), "toy_iterations": (2, 300), "cases": (3, 16), "samples": (2, 10),
                "max_steps": (10, 1000), "subsample": (16, 1)}
    for name, (tiny, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else full)
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.cases < 2 or args.samples < 2:
        p.error("--cases and --samples must be >= 2")
    return args


def _json_name(task: str) -> str:
    return "study9.json" if task == "mni152" else f"study9_{task}.json"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    if not args.render_only:
        torch.set_num_threads(args.threads)
        for task in TASKS if args.task == "all" else (args.task,):
            start = time.perf_counter()
            cohorts = toy_cohorts(args.tiny) if task == "toy" else None
            runs: dict[str, list[dict[str, Any]]] = {loss: [] for loss in args.losses}
            for seed in args.seeds:  # seed-major: an interrupted run already holds every loss of its first seeds
                for loss in args.losses:
                    runs[loss].append(run_one(args, task, loss, seed, cohorts))
            other = ("iterations", "batch_size", "cases", "subsample") if task == "toy" else ("toy_iterations",)
            results[task] = {
                "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                           if k not in ("output", "render_only", "quiet", "seed", *other)} | {"task": task},
                "table": summarize(runs),
                "seconds": round(time.perf_counter() - start, 1),
            }
            atomic_write_text(args.output / _json_name(task), json.dumps(results[task], indent=1) + "\n")
    for task in TASKS:  # the fragment shows every task with results in the folder
        path = args.output / _json_name(task)
        if task not in results and path.is_file():
            results[task] = json.loads(path.read_text())
    if not results:
        raise SystemExit(f"no study 9 results in {args.output}: run the study first")
    atomic_write_text(args.output / "study9.md", render_markdown(results))
    return results


if __name__ == "__main__":
    main()
