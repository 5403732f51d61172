"""Validation study 10: lesion-level failure detection with MC dropout on a synthetic multi-lesion cohort.

Claims checked (docs/lesions.md; issue: per-lesion uncertainty for review): a per-lesion score computed from the voxel
maps of an MC-dropout model (mean / max / boundary / core of predictive entropy, mutual information and expected
entropy; Molchanova et al., "Structural-based uncertainty in deep learning across anatomical scales", 2023) or from
its samples (the lesion's existence probability, the spread of its volume) ranks the predicted lesions that are false
positives, or poorly segmented, above the good ones (AUROC > 0.5); which score finds false positives best; and
referring the most uncertain *lesions* raises the quality of the lesions kept, beside the case-level referral of
the same model (RETINA-style referral curves; Band et al.).

Data (MS-like, made here, deterministic from ``--seed``): volumes of 32^3 voxels, 1 mm, a smooth noisy background;
per case 3 to 7 lesions (solid bright blobs of radius 1.2 to 3.5 voxels and contrast 0.35 to 1.0, the label) and 1 to
3 mimics (bright shells of the same size and contrast with a dark centre, not labelled), so that a network trained
briefly confuses some mimics with lesions and misses some faint small lesions. Lesions are the 26-connected
components; a predicted lesion is a false positive when it matches no reference lesion under the BraTS 2023
metastasis rule (dilation 1, minimum volume 2 mm^3), and its Dice is that of the reference lesion it matched
(:mod:`monai_unc.evaluation.lesions`, the functions ``monai-unc evaluate --lesions`` runs).

Model: the toy 3D U-Net of studies 3 and 4 (MONAI ``UNet`` 8-16-32-64 with dropout 0.5 in every block, DiceCE,
``--iterations`` steps on ``--train`` cases), MC dropout with ``--samples`` passes (``MCDropoutInferer``, samples kept
for the existence probability). Scores and curves on ``--test`` held-out cases; AUROC 95 % intervals from a
bootstrap over test cases (lesions of one case are not independent).

Run (from the repository root)::

    python docs/validation/study10_lesions.py                          # ~3 CPU minutes on one thread
    python docs/validation/study10_lesions.py --tiny --output /tmp/s10   # smoke test, seconds

Writes ``study10.md`` and ``study10.json`` to ``--output``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from scipy import ndimage

from monai_unc.activation import TaskView
from monai_unc.evaluation.lesions import LesionState, lesion_case_state, summarize_lesions
from monai_unc.inferers import MCDropoutInferer
from monai_unc.io import atomic_write_json, atomic_write_text, json_safe
from monai_unc.metrics.discrimination import error_auroc
from monai_unc.metrics.selective import referral_curve

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results"
SHAPE = (32, 32, 32)
OPTIONS = {"settings": "met", "dilation": 1, "min_volume": 2.0, "iou": 0.25, "failure_dice": 0.5,
           "hd_penalty": 374.0, "r": 0.001, "samples": "kept by the inferer"}
REFERRED = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
MAPS = ("predictive_entropy", "mutual_information", "expected_entropy")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, the network and the samples (default 0)")
    p.add_argument("--train", type=int, default=24, help="training cases (default 24; tiny 4)")
    p.add_argument("--test", type=int, default=30, help="test cases (default 30; tiny 4)")
    p.add_argument("--iterations", type=int, default=150, help="training steps (default 150; tiny 3)")
    p.add_argument("--samples", type=int, default=8, help="MC dropout passes (default 8; tiny 3)")
    p.add_argument("--bootstrap", type=int, default=500, help="bootstrap resamples of the test cases (default 500)")
    p.add_argument("--tiny", action="store_true", help="a few cases, a few steps: smoke test")
    p.add_argument("--render-only", action="store_true", help="only re-write study10.md from study10.json")
    args = p.parse_args(argv)
    if args.tiny:
        args.train, args.test, args.iterations, args.samples, args.bootstrap = 4, 4, 3, 3, 20
    return args


# ------------------------------------------------------------------------------------------------ data
def _ball(centre: np.ndarray, radius: float) -> np.ndarray:
    g = np.ogrid[tuple(slice(0, s) for s in SHAPE)]
    return np.sqrt(sum((x - c) ** 2 for x, c in zip(g, centre)))


def make_case(rng: np.random.Generator) -> dict[str, Any]:
    """One case: ``image`` ``(1, *SHAPE)`` float32, ``label`` ``(*SHAPE)`` int64 (module docstring)."""
    image = ndimage.gaussian_filter(rng.standard_normal(SHAPE), 1.5) * 0.6 + 0.1 * rng.standard_normal(SHAPE)
    label = np.zeros(SHAPE, np.int64)
    n_lesions, n_mimics = int(rng.integers(3, 8)), int(rng.integers(1, 4))
    for k in range(n_lesions + n_mimics):
        centre = rng.uniform(4, np.array(SHAPE) - 4)
        radius = float(rng.uniform(1.2, 3.5))
        contrast = float(rng.uniform(0.35, 1.0))
        d = _ball(centre, radius)
        if k < n_lesions:  # a solid blob with a soft edge: the label is its inside
            image += contrast * np.clip(radius + 0.5 - d, 0.0, 1.0)
            label[d <= radius] = 1
        else:  # a mimic: a bright shell around a dark centre, not labelled
            image += contrast * np.clip(1.0 - np.abs(d - radius) / 1.0, 0.0, 1.0)
    return {"image": image[None].astype(np.float32), "label": label}


# ------------------------------------------------------------------------------------------------ study
def _network(args: argparse.Namespace, cases: list[dict]) -> Any:
    import torch
    from _toy import TrainConfig, train_network  # the toy U-Net of studies 3 and 4 (docs/validation/_toy.py)

    torch.manual_seed(args.seed)  # the initial weights (train_network seeds the training itself)
    cfg = TrainConfig(iterations=args.iterations, batch_size=4, extra={"study": 10})
    return train_network([c["image"] for c in cases], [c["label"] for c in cases], cfg, args.seed, None,
                         log=lambda s: None)


def _predict(net: Any, image: np.ndarray, samples: int, seed: int) -> dict[str, np.ndarray]:
    import torch

    inferer = MCDropoutInferer(num_samples=samples, keep_samples=True, seed=seed,
                               keys=("pred", *MAPS))
    with torch.no_grad():
        out = inferer(torch.from_numpy(image[None]), net)
    return {k: v.detach().cpu().numpy()[:, 0] if k == "samples" else v.detach().cpu().numpy()[0]
            for k, v in out.items()}


def _auroc_ci(scores: np.ndarray, event: np.ndarray, case: np.ndarray, n_boot: int, rng: np.random.Generator
              ) -> tuple[float | None, float | None, float | None]:
    ok = np.isfinite(scores)
    s, e, c = scores[ok], event[ok].astype(np.int64), case[ok]
    if s.size == 0 or e.min() == e.max():
        return None, None, None
    point = float(error_auroc(s, e, per_case=False))
    ids = np.unique(c)
    boot = []
    for _ in range(n_boot):
        pick = rng.choice(ids, ids.size, replace=True)
        idx = np.concatenate([np.flatnonzero(c == i) for i in pick])
        if e[idx].min() != e[idx].max():
            boot.append(float(error_auroc(s[idx], e[idx], per_case=False)))
    if len(boot) < 10:
        return point, None, None
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return point, float(lo), float(hi)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    rng = np.random.default_rng(args.seed)
    train = [make_case(r) for r in rng.spawn(args.train)]
    test = [make_case(r) for r in rng.spawn(args.test)]
    net = _network(args, train)
    merged, case_dice, case_score = None, [], []
    for i, case in enumerate(test):
        out = _predict(net, case["image"], args.samples, args.seed + i)
        seg = out["pred"].argmax(0).astype(np.int64)
        samples = out["samples"].argmax(1).astype(np.int64)  # (S, *spatial) label maps of the passes
        maps = {m: out[m][0].astype(np.float64) for m in MAPS}
        task = TaskView(None, seg, case["label"], 2, maps=maps, spacing=(1.0, 1.0, 1.0))
        view = SimpleNamespace(case_id=f"t{i:03d}", spacing=(1.0, 1.0, 1.0), affine=np.eye(4))
        state = lesion_case_state(view, [task], OPTIONS, None, "predictive_entropy", samples=samples)
        merged = state if merged is None else merged.merge(state)
        inter, total = np.count_nonzero((seg == 1) & (case["label"] == 1)), int((seg == 1).sum() + case["label"].sum())
        case_dice.append(1.0 if total == 0 else 2.0 * inter / total)
        fg = seg == 1
        case_score.append(float(maps["predictive_entropy"][fg].mean()) if fg.any() else 0.0)
    ids = [f"t{i:03d}" for i in range(args.test)]
    assert isinstance(merged, LesionState)
    block = summarize_lesions(merged, ids, {**OPTIONS, "rank_by": "predictive_entropy_mean"}, top=0)
    task = block["per_task"]["1"]
    a = merged.arrays
    fp = a["lesion.1.false_positive"] > 0.5
    dice = a["lesion.1.dice"]
    case_index = a["lesion.1.case_index"].astype(np.int64)
    boot_rng = np.random.default_rng(args.seed + 1)
    scores = {}
    for name in sorted(task["failure_detection"]):
        u = a[f"lesion.1.score.{name}"]
        fp_auc = _auroc_ci(u, fp, case_index, args.bootstrap, boot_rng)
        low_auc = _auroc_ci(u, dice < OPTIONS["failure_dice"], case_index, args.bootstrap, boot_rng)
        scores[name] = {"n": int(np.isfinite(u).sum()),
                        "auroc_false_positive": fp_auc[0], "fp_ci": [fp_auc[1], fp_auc[2]],
                        "auroc_low_dice": low_auc[0], "low_dice_ci": [low_auc[1], low_auc[2]],
                        "aurc_1_minus_dice": task["failure_detection"][name]["aurc_1_minus_dice"]}
    lesion_curve = {}
    for name in ("predictive_entropy_mean", "mutual_information_max", "existence_uncertainty"):
        u = a[f"lesion.1.score.{name}"]
        lesion_curve[name] = [float(v) for v in referral_curve(u, dice, REFERRED).value]
    lesion_curve["oracle"] = [float(v) for v in referral_curve(-dice, dice, REFERRED).value]
    cd, cs = np.asarray(case_dice), np.asarray(case_score)
    case_curve = {"predictive_entropy_mean": [float(v) for v in referral_curve(cs, cd, REFERRED).value],
                  "oracle": [float(v) for v in referral_curve(-cd, cd, REFERRED).value]}
    return {
        "study": 10, "seed": args.seed, "tiny": bool(args.tiny),
        "settings": {"train": args.train, "test": args.test, "iterations": args.iterations,
                     "samples": args.samples, "bootstrap": args.bootstrap, "shape": list(SHAPE),
                     "rule": "BraTS 2023 metastasis (dilation 1, 2 mm^3)"},
        "n_predicted_lesions": int(fp.size), "n_false_positive": int(fp.sum()),
        "n_low_dice": int((dice < OPTIONS["failure_dice"]).sum()),
        "lesion_tp": task["lesion_tp"], "lesion_fn": task["lesion_fn"],
        "mean_case_dice": float(cd.mean()), "mean_lesion_dice": task["mean"]["lesion_dice"],
        "best_fp_score": task["best_fp_score"], "scores": scores,
        "retention": {"referred": list(REFERRED), "lesion": lesion_curve, "case": case_curve},
        "seconds_wall": round(time.perf_counter() - t0, 1), "seconds_cpu": round(time.process_time() - c0, 1),
    }


# ------------------------------------------------------------------------------------------------ page
def _f(x: Any, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{digits}f}"


def _ci(point: Any, ci: list) -> str:
    return _f(point) + ("" if not ci or ci[0] is None else f" [{_f(ci[0], 2)}, {_f(ci[1], 2)}]")


def render_markdown(r: dict[str, Any]) -> str:
    s = r["settings"]
    lines = [
        "## Study 10: lesion-level failure detection with MC dropout (synthetic MS-like cohort)",
        "",
        f"{s['test']} test cases of {'x'.join(map(str, s['shape']))} voxels (lesions and unlabelled mimics), the toy "
        f"U-Net with dropout 0.5 trained {s['iterations']} steps on {s['train']} cases, MC dropout with "
        f"{s['samples']} samples; lesion matching: {s['rule']}. {r['n_predicted_lesions']} predicted lesions, "
        f"{r['n_false_positive']} false positives, {r['n_low_dice']} with Dice below 0.5; reference lesions found "
        f"{r['lesion_tp']}, missed {r['lesion_fn']}. Mean case Dice {_f(r['mean_case_dice'])}, mean lesion-wise "
        f"Dice {_f(r['mean_lesion_dice'])}. AUROC with a 95 % bootstrap interval over test cases "
        f"({s['bootstrap']} resamples).",
        "",
        f"Runtime: {r['seconds_wall']:.0f} s wall, {r['seconds_cpu']:.0f} s CPU.",
        "",
        "### Per-lesion scores (sorted by the AUROC of false positives)",
        "",
        "A core score exists only for lesions with inner voxels (a voxel whose face neighbours are all in the "
        "lesion): its AUROC is over those lesions only, a subset without the smallest lesions.",
        "",
        "| score | lesions scored | AUROC false positive | AUROC Dice < 0.5 | AURC 1 - Dice |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    order = sorted(r["scores"], key=lambda k: -(r["scores"][k]["auroc_false_positive"] or -1))
    for k in order:
        v = r["scores"][k]
        lines.append(f"| {k} | {v['n']} | {_ci(v['auroc_false_positive'], v['fp_ci'])} | "
                     f"{_ci(v['auroc_low_dice'], v['low_dice_ci'])} | {_f(v['aurc_1_minus_dice'])} |")
    ret = r["retention"]
    lines += ["", "### Retention: mean Dice of what is kept after referring the most uncertain", "",
              "| referred | " + " | ".join(f"{100 * t:.0f}%" for t in ret["referred"]) + " |",
              "| --- | " + " | ".join("---:" for _ in ret["referred"]) + " |"]
    for level in ("lesion", "case"):
        for name, vals in ret[level].items():
            lines.append(f"| {level}s by {name} | " + " | ".join(_f(v) for v in vals) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / "study10.json"
    if args.render_only:
        import json

        result = json.loads(path.read_text())
    else:
        result = run(args)
        atomic_write_json(path, json_safe(result))
    atomic_write_text(args.output / "study10.md", render_markdown(result))
    return result


if __name__ == "__main__":
    main()
