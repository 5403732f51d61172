"""Validation study 1: Zeevi et al. (spatially-aware evaluation of segmentation uncertainty), Table 1.

Claim checked: spatially-aware metrics (SPACE, BUC, BA-ECE) tell a high-quality ("clean") uncertainty map from a
low-quality ("noisy") one of the same case more often than voxel-wise metrics do (Zeevi et al. Sec. 4, Table 1:
accuracy SPACE 95.8 %, BUC 91.7 %, BA-ECE 89.6 %, ECE 83.3 %, ..., AUC-ROC 72.9 %).

Protocol (Zeevi et al. Sec. 4.2-4.3 on the MNI152 example instead of prostate MRI; see ``_mni152.py`` for the data):

- cases: the MNI152 template and perturbed copies (noise, bias field, contrast, blur, resolution, small affine,
  cropped field of view; 24 cases at full size), evaluated on the held-out right hemisphere;
- per case, with the shipped UNet and dropout after every encoder/decoder stage but the output: a "noisy" map from
  MC dropout at a fixed high rate (p = 0.5, 30 samples) and a "clean" map from Rate-In (30 samples, Gaussian-MI
  information loss, target 0.1); both against the same error map, that of the deterministic network;
- per metric: accuracy = share of cases where the metric prefers the Rate-In map, Cohen's d and the mean relative
  difference (``monai_unc.metrics.compare``), pairwise McNemar tests with Holm correction and Cochran's Q.
  The per-case values come from the registry of ``compare_uncertainty_maps`` (``uncertainty_map_metrics``: SPACE, BUC,
  BA-ECE, UCE, VOXEL_ACC, AUC-PR, AUC-ROC, PAvPU w = 5 / 11, AU-ARC, AvU, correct-certain and
  uncertain-incorrect ratios, threshold 0.5) plus top-label ECE and MCE of each method's mean probabilities
  (``monai_unc.metrics.calibration``, 15 bins, bins with < 50 voxels ignored as in Kock et al.), all compared with
  ``compare_metric_values`` (the statistics of ``compare_uncertainty_maps`` on precomputed values, which ECE and
  MCE need because they use class probabilities, not the uncertainty map);
- headline map: predictive entropy / log 3; the same table for mutual information / log 3 follows;
- control (not in the paper, clearly labelled): Rate-In against MC dropout at one fixed rate equal to Rate-In's
  mean rate for that case, to separate the effect of adapting the rates from that of their overall level.

Run (from the repository root)::

    OMP_NUM_THREADS=1 python docs/validation/study1_spatial_metrics.py          # full size, ~9 CPU minutes
    python docs/validation/study1_spatial_metrics.py --tiny --output /tmp/s1    # smoke test, seconds

Writes ``study1.md``, ``study1.json``, ``study1_accuracy.png`` and ``study1_maps.png`` to ``--output``.
``study1.json`` also holds per-case Dice and case scores that study 5 reuses.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _mni152 as M  # noqa: E402

from monai_unc.io import atomic_write_text  # noqa: E402
from monai_unc.metrics.calibration import ece, mce  # noqa: E402
from monai_unc.metrics.compare import UncertaintyComparison, compare_metric_values, uncertainty_map_metrics  # noqa: E402

#: Zeevi et al. Table 1: accuracy (%), Cohen's d, mean difference (%), in the paper's row order
PAPER: dict[str, tuple[float, float, float]] = {
    "SPACE": (95.83, 1.34, 49.8),
    "BUC": (91.67, 1.26, 34.1),
    "BA-ECE": (89.58, 1.83, 55.8),
    "ECE": (83.33, 1.09, 37.7),
    "VOXEL_ACC": (79.17, 0.23, 0.1),
    "AUC-PR": (75.00, 0.48, 18.1),
    "AUC-ROC": (72.92, 0.27, 1.0),
    "PAvPU(w=5)": (68.75, 0.17, 0.1),
    "AU-ARC": (66.67, 0.16, 0.0),
    "MCE": (56.25, 0.12, 1.4),
    "PAvPU(w=11)": (33.33, 0.14, 0.0),
    "Correct Certain Ratio": (31.25, -0.10, 0.0),
    "Uncertain Incorrect Ratio": (31.25, -0.32, -8.9),
}
EXTRA = ("UCE", "AvU")  # computed by the package, not in Zeevi et al.'s Table 1
SPATIAL = ("SPACE", "BUC", "BA-ECE")
MEASURES = {"pe": "predictive entropy / log 3", "mi": "mutual information / log 3"}
METHOD_NAMES = {
    "deterministic": "deterministic (no dropout)",
    "mc_fixed": "MC dropout, fixed p",
    "rate_in": "Rate-In",
    "mc_matched": "MC dropout, fixed p = Rate-In's mean rate (control)",
}
MIN_BIN_COUNT = 50


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--output", type=Path, default=M.DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the cohort and of the dropout masks (default 0)")
    p.add_argument("--tiny", action="store_true", help="3 small cases, 2 samples: smoke test in seconds")
    p.add_argument("--cases", type=int, default=None, help="number of cases (default 24; tiny 3)")
    p.add_argument("--samples", type=int, default=None, help="MC / Rate-In samples per case (default 30; tiny 2)")
    p.add_argument("--no-control", action="store_true", help="skip the rate-matched fixed-p control (saves ~1/3)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--render-only", action="store_true",
                   help="only re-write study1.md from the study1.json in --output (no computation)")
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------------------ per case
def _metric_values(res: dict[str, Any], det_seg: np.ndarray, case: dict[str, Any], registry: dict) -> dict:
    """Per-measure metric values of one method on one case (maps against the deterministic error map)."""
    label, spacing = case["label"], case["spacing"]
    calib = {
        "ECE": float(ece(res["probs"][None], label[None], min_bin_count=MIN_BIN_COUNT)),
        "MCE": float(mce(res["probs"][None], label[None], min_bin_count=MIN_BIN_COUNT)),
    }
    out = {}
    for key in MEASURES:
        vals = {name: float(spec.fn(res[key], det_seg, label, spacing=spacing)) for name, spec in registry.items()}
        vals.update(calib)
        out[key] = vals
    return out


def _summary(res: dict[str, Any], label: np.ndarray, brain: np.ndarray) -> dict[str, float]:
    return {
        "dice": M.dice_score(res["seg"], label),
        "pe_fg_mean": M.case_score(res["pe"], res["seg"]),
        "mi_fg_mean": M.case_score(res["mi"], res["seg"]) if "mi" in res else float("nan"),
        "mean_pe_brain": float(res["pe"][brain].mean()),
        "mean_mi_brain": float(res["mi"][brain].mean()) if "mi" in res else float("nan"),
    }


# ------------------------------------------------------------------------------------------------ reporting
def _fmt(v: Any, nd: int = 2) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    return f"{v:.{nd}f}"


def verdict(ours: float, paper: float | None, ties: int = 0, cases: int = 0) -> str:
    """Mechanical agreement of our accuracy with the paper's (percent): within 10 points = reproduces; otherwise
    whether both sit on the same side of 50 % (both favour the clean map, or both fail to). A metric that ties on
    every case (``ties == cases``) prefers neither map: its 0 % is no failure to favour the clean one."""
    if paper is None:
        return "not in the paper"
    if not np.isfinite(ours):
        return "undefined here"
    txt = f"(ours {ours:.1f} % vs paper {paper:.1f} %)"
    if cases and ties >= cases:
        return f"a tie in every case here: prefers neither map (paper {paper:.1f} %)"
    if abs(ours - paper) <= 10:
        return f"reproduces {txt}"
    if ours > 50 and paper > 50:
        return f"both favour the clean map, ours {'more' if ours > paper else 'less'} often {txt}"
    if ours < 50 and paper < 50:
        return f"both fail to favour the clean map {txt}"
    return f"disagrees {txt}"


def comparison_rows(comp: UncertaintyComparison, with_paper: bool) -> list[dict[str, Any]]:
    """One row per metric in the paper's order (then UCE, AvU): ours beside the paper's values."""
    table = {r["metric"]: r for r in comp.table()}
    rows = []
    for name in [*PAPER, *EXTRA]:
        if name not in table:
            continue
        r = table[name]
        paper = PAPER.get(name) if with_paper else None
        rows.append(
            {
                "metric": name,
                "spatial": name in SPATIAL,
                "accuracy_percent": r["accuracy_percent"],
                "cohens_d": r["cohens_d"],
                "mean_diff_percent": r["mean_relative_difference_percent"],
                "n_cases": r["n_cases"],
                "n_ties": r["n_ties"],
                "significantly_better_than": r["significantly_better_than"],
                "paper_accuracy_percent": paper[0] if paper else None,
                "paper_cohens_d": paper[1] if paper else None,
                "paper_mean_diff_percent": paper[2] if paper else None,
                "verdict": verdict(r["accuracy_percent"], paper[0] if paper else None, r["n_ties"],
                                   r["n_cases"]) if with_paper else "",
            }
        )
    return rows


def checks(comp: UncertaintyComparison) -> dict[str, Any]:
    """The paper's headline statements, evaluated on our numbers."""
    acc = {n: 100 * comp.metrics[n].accuracy for n in comp.names}
    trad_paper = [n for n in PAPER if n not in SPATIAL and n in acc]
    spatial_min = min(acc[n] for n in SPATIAL)
    best_trad = max(trad_paper, key=lambda n: np.nan_to_num(acc[n], nan=-1))
    beaten = [n for n in comp.significantly_better("SPACE") if n in trad_paper]
    d = {n: comp.metrics[n].cohens_d for n in comp.names}
    md = {n: comp.metrics[n].mean_relative_difference for n in comp.names}
    return {
        "spatial_min_accuracy": spatial_min,
        "best_traditional": best_trad,
        "best_traditional_accuracy": acc[best_trad],
        "spatial_rank_highest": bool(spatial_min > acc[best_trad]),
        "space_significantly_better_than": beaten,
        "space_beats_all_traditional": bool(len(beaten) == len(trad_paper)),
        "baece_minus_ece_accuracy": acc["BA-ECE"] - acc["ECE"],
        "baece_ece_d_ratio": d["BA-ECE"] / d["ECE"] if d["ECE"] else float("nan"),
        "baece_ece_meandiff_ratio": md["BA-ECE"] / md["ECE"] if md["ECE"] else float("nan"),
        "cochran_q": comp.cochran_q,
        "cochran_p": comp.cochran_p,
        "n_metrics_100_percent": int(sum(1 for n in comp.names if acc[n] >= 100.0 - 1e-9)),
        "n_metrics": len(comp.names),
    }


def table_md(rows: list[dict[str, Any]], with_paper: bool) -> list[str]:
    if with_paper:
        lines = [
            "| Metric | Acc. paper (%) | Acc. ours (%) | d paper | d ours | Mean diff. paper (%) | Mean diff. ours (%) "
            "| Ties | Agreement (accuracy) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
    else:
        lines = ["| Metric | Acc. ours (%) | d ours | Mean diff. ours (%) | Ties |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        name = f"**{r['metric']}**" if r["spatial"] else r["metric"]
        if with_paper:
            lines.append(
                f"| {name} | {_fmt(r['paper_accuracy_percent'])} | {_fmt(r['accuracy_percent'])} | "
                f"{_fmt(r['paper_cohens_d'])} | {_fmt(r['cohens_d'])} | {_fmt(r['paper_mean_diff_percent'], 1)} | "
                f"{_fmt(r['mean_diff_percent'], 1)} | {r['n_ties']} | {r['verdict']} |"
            )
        else:
            lines.append(
                f"| {name} | {_fmt(r['accuracy_percent'])} | {_fmt(r['cohens_d'])} | {_fmt(r['mean_diff_percent'], 1)} "
                f"| {r['n_ties']} |"
            )
    return lines


def checks_md(c: dict[str, Any]) -> list[str]:
    out = []
    if c["spatial_rank_highest"]:
        out.append(
            f"- Spatial metrics rank highest: reproduces (every spatial metric >= {c['spatial_min_accuracy']:.1f} %, "
            f"best voxel-wise {c['best_traditional']} {c['best_traditional_accuracy']:.1f} %; paper 89.6-95.8 % vs "
            "ECE 83.3 %)."
        )
    elif c["spatial_min_accuracy"] == c["best_traditional_accuracy"]:
        out.append(
            f"- Spatial metrics rank highest: not reproduced, tie: the spatial metrics and the best voxel-wise metric "
            f"({c['best_traditional']}) all reach {c['spatial_min_accuracy']:.1f} % (paper 89.6-95.8 % vs ECE 83.3 %)."
        )
    else:
        out.append(
            f"- Spatial metrics rank highest: does not reproduce (lowest spatial {c['spatial_min_accuracy']:.1f} %, "
            f"best voxel-wise {c['best_traditional']} {c['best_traditional_accuracy']:.1f} %; paper 89.6-95.8 % vs "
            "ECE 83.3 %)."
        )
    n_beaten = len(c["space_significantly_better_than"])
    out.append(
        f"- SPACE significantly better than every voxel-wise metric (McNemar, Holm, p <= 0.05): "
        f"{'reproduces' if c['space_beats_all_traditional'] else 'does not reproduce'} "
        f"(ours: better than {n_beaten} of {len(PAPER) - len(SPATIAL)}"
        f"{': ' + ', '.join(c['space_significantly_better_than']) if n_beaten else ''}; paper: all)."
    )
    out.append(
        f"- BA-ECE improves over ECE: accuracy {c['baece_minus_ece_accuracy']:+.1f} points (paper +6.25), effect "
        f"size x{_fmt(c['baece_ece_d_ratio'])} (paper x1.68), mean difference x{_fmt(c['baece_ece_meandiff_ratio'])} "
        "(paper x1.48)."
    )
    out.append(
        f"- {c['n_metrics_100_percent']} of {c['n_metrics']} metrics prefer the clean map in every case; Cochran's Q = "
        f"{_fmt(c['cochran_q'])} (p = {_fmt(c['cochran_p'], 3)})."
    )
    return out


def _plots(out_dir: Path, rows: list[dict[str, Any]], example: dict[str, Any] | None) -> list[str]:
    from matplotlib.figure import Figure

    from monai_unc.report.plots import save_png

    written = []
    names = [r["metric"] for r in rows if r["paper_accuracy_percent"] is not None]
    ours = [r["accuracy_percent"] for r in rows if r["paper_accuracy_percent"] is not None]
    paper = [r["paper_accuracy_percent"] for r in rows if r["paper_accuracy_percent"] is not None]
    fig = Figure(figsize=(8.0, 3.6), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(names))
    ax.bar(x - 0.2, paper, 0.4, label="Zeevi et al. (prostate MRI)", color="0.6")
    ax.bar(x + 0.2, np.nan_to_num(ours), 0.4, label="ours (MNI152, Rate-In vs MC p=0.5, PE maps)", color="#1f77b4")
    ax.axhline(50, color="0.3", ls=":", lw=1)
    ax.set_xticks(x, names, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("accuracy (% of cases preferring\nthe clean map)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8, loc="lower left")
    save_png(fig, out_dir / "study1_accuracy.png")
    written.append("study1_accuracy.png")
    if example is not None:
        fig = Figure(figsize=(10.0, 2.9), dpi=110, layout="constrained")
        panels = [("image", example["image"], "gray", None), ("deterministic error", example["error"], "Reds", (0, 1)),
                  ("MC p=0.5: PE / log 3", example["mc"], "magma", (0, 1)),
                  ("Rate-In: PE / log 3", example["ri"], "magma", (0, 1))]
        for k, (title, img, cmap, lim) in enumerate(panels):
            ax = fig.add_subplot(1, 4, k + 1)
            kw = {} if lim is None else {"vmin": lim[0], "vmax": lim[1]}
            im = ax.imshow(np.rot90(img), cmap=cmap, **kw)
            ax.set_title(title, fontsize=9)
            ax.axis("off")
            if lim is not None:
                fig.colorbar(im, ax=ax, shrink=0.8)
        save_png(fig, out_dir / "study1_maps.png")
        written.append("study1_maps.png")
    return written


# ------------------------------------------------------------------------------------------------ main
def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    timer = M.Timer()
    cfg = M.StudyConfig.create(args.tiny, args.seed, args.cases, args.samples)
    control = not args.no_control
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"study 1 (Zeevi et al. Table 1): {cfg.n_cases} cases, {cfg.samples} samples, block {cfg.roi_size}, "
          f"{M.threads_note()}", flush=True)
    cases = M.make_cases(cfg)
    net0, _ = M.load_networks()
    registry = uncertainty_map_metrics()
    directions = {n: s.higher_is_better for n, s in registry.items()} | {"ECE": False, "MCE": False}
    methods = ["mc_fixed", "rate_in"] + (["mc_matched"] if control else [])
    values: dict[str, dict[str, dict[str, list[float]]]] = {
        m: {k: {n: [] for n in directions} for k in MEASURES} for m in methods
    }
    records, caught_all, example = [], Counter(), None
    bar = tqdm(cases, desc="study 1 cases", unit="case")
    for i, case in enumerate(bar):
        seed = cfg.seed * 1000 + i
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seconds: dict[str, float] = {}
            t = M.Timer()
            det = M.predict_deterministic(net0, case)
            seconds["deterministic"] = t.elapsed()[1]
            t = M.Timer()
            results = {"mc_fixed": M.predict_mc_posthoc(net0, case, cfg.fixed_p, cfg.samples, seed)}
            seconds["mc_fixed"] = t.elapsed()[1]
            t = M.Timer()
            results["rate_in"] = M.predict_rate_in(net0, case, cfg.samples, cfg.target_loss, seed)
            seconds["rate_in"] = t.elapsed()[1]
            if control:
                t = M.Timer()
                results["mc_matched"] = M.predict_mc_posthoc(net0, case, results["rate_in"]["mean_rate"], cfg.samples,
                                                             seed)
                seconds["mc_matched"] = t.elapsed()[1]
            brain = case["label"] > 0
            rec: dict[str, Any] = {
                "name": case["name"], "shift": case["shift"], "severity": case["severity"], "seed": case["seed"],
                "params": case["params"], "shape": list(case["label"].shape),
                "error_rate": float((det["seg"] != case["label"]).mean()),
                "methods": {"deterministic": _summary(det, case["label"], brain)},
                "rate_in_rates": results["rate_in"]["rates"], "rate_in_mean_rate": results["rate_in"]["mean_rate"],
                "metrics": {},
                "inference_cpu_s": seconds,
            }
            for m in methods:
                rec["methods"][m] = _summary(results[m], case["label"], brain)
                mv = _metric_values(results[m], det["seg"], case, registry)
                rec["metrics"][m] = mv
                for k in MEASURES:
                    for n in directions:
                        values[m][k][n].append(mv[k][n])
        caught_all.update(str(w.message) for w in caught if issubclass(w.category, UserWarning))
        records.append(rec)
        if i == 0:
            z = int(np.argmax(brain.sum(axis=(0, 1))))
            img = case["image"][0, case["x0"]:, :, z]
            example = {"image": img, "error": (det["seg"] != case["label"])[:, :, z].astype(float),
                       "mc": results["mc_fixed"]["pe"][:, :, z], "ri": results["rate_in"]["pe"][:, :, z]}
        bar.set_postfix(dice=f"{rec['methods']['deterministic']['dice']:.3f}",
                        rate=f"{results['rate_in']['mean_rate']:.3f}")
    bar.close()

    comps: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in MEASURES:
            comps[f"main_{k}"] = compare_metric_values(values["rate_in"][k], values["mc_fixed"][k], directions)
            if control:
                comps[f"control_{k}"] = compare_metric_values(values["rate_in"][k], values["mc_matched"][k], directions)
    caught_all.update(str(w.message) for w in caught if issubclass(w.category, UserWarning))

    wall, cpu = timer.elapsed()
    result: dict[str, Any] = {
        "study": "study1_spatial_metrics",
        "paper": "Zeevi et al., Table 1",
        "config": cfg.to_json() | {"control": control, "min_bin_count": MIN_BIN_COUNT},
        "runtime": {
            "wall_s": wall, "cpu_s": cpu, "threads": M.threads_note(),
            "inference_cpu_s": {m: float(sum(r["inference_cpu_s"][m] for r in records))
                                for m in records[0]["inference_cpu_s"]},
        },
        "cases": records,
        "comparisons": {},
        "warnings": dict(caught_all),
    }
    for key, comp in comps.items():
        with_paper = key.startswith("main")
        rows = comparison_rows(comp, with_paper)
        result["comparisons"][key] = {"rows": rows, "checks": checks(comp),
                                      "mcnemar_p_holm": comp.mcnemar_p_holm, "names": comp.names}
    means = {
        m: {k: {n: float(np.nanmean(v)) for n, v in values[m][k].items()} for k in MEASURES} for m in methods
    }
    result["mean_metric_values"] = means
    result["figures"] = _plots(out_dir, result["comparisons"]["main_pe"]["rows"], example)
    md = render_markdown(result, cfg)
    M.write_json(out_dir / "study1.json", result)
    atomic_write_text(out_dir / "study1.md", md)
    print(md)
    print(f"study 1 runtime: {wall:.1f} s wall, {cpu:.1f} s CPU ({M.threads_note()})", flush=True)
    return result


def render_markdown(result: dict[str, Any], cfg: M.StudyConfig) -> str:
    recs = result["cases"]
    rt = result["runtime"]
    kinds = Counter(r["shift"] for r in recs)
    det_dice = [r["methods"]["deterministic"]["dice"] for r in recs]
    rates = [r["rate_in_mean_rate"] for r in recs]
    lines = [
        "## Study 1: spatially-aware metrics tell clean from noisy uncertainty maps (Zeevi et al., Table 1)",
        "",
        f"Cohort: {len(recs)} MNI152 cases ({', '.join(f'{k} {v}' for k, v in kinds.items())}; severity 1-5), "
        f"held-out right hemisphere ({'x'.join(map(str, recs[0]['shape']))} voxels of 2 mm), shipped UNet, "
        f"deterministic Dice (GM/WM mean) {np.mean(det_dice):.3f} ({np.min(det_dice):.3f}-{np.max(det_dice):.3f}). "
        f"Noisy map: MC dropout p = {cfg.fixed_p} after the six encoder/decoder stages, {cfg.samples} samples; clean "
        f"map: Rate-In at the same sites ({cfg.samples} samples, Gaussian-MI loss, target {cfg.target_loss}; mean "
        f"rate {np.mean(rates):.3f}, {np.min(rates):.3f}-{np.max(rates):.3f}); both scored against the deterministic "
        "network's error map. Accuracy = % of cases where the metric prefers the Rate-In map. Paper: prostate MRI "
        "(MSD), 36 cases (its accuracies are multiples of 1/48), nnU-Net. Spatial metrics in bold. ECE and MCE are "
        "top-label calibration errors of each method's mean probabilities (15 bins, >= 50 voxels per bin).",
        "",
        f"Runtime: {rt['wall_s']:.0f} s wall, {rt['cpu_s']:.0f} s CPU ({rt['threads']}); inference CPU s per method "
        "(all cases): " + ", ".join(f"{m} {v:.0f}" for m, v in rt["inference_cpu_s"].items()) + ".",
        "",
        f"### Rate-In vs MC dropout p = {cfg.fixed_p}, {MEASURES['pe']} (headline)",
        "",
        *table_md(result["comparisons"]["main_pe"]["rows"], True),
        "",
        *checks_md(result["comparisons"]["main_pe"]["checks"]),
        "",
        f"### Rate-In vs MC dropout p = {cfg.fixed_p}, {MEASURES['mi']}",
        "",
        *table_md(result["comparisons"]["main_mi"]["rows"], True),
        "",
        *checks_md(result["comparisons"]["main_mi"]["checks"]),
    ]
    if "control_pe" in result["comparisons"]:
        for k in MEASURES:
            c = result["comparisons"][f"control_{k}"]
            lines += [
                "",
                f"### Control (not in the paper): Rate-In vs MC dropout at Rate-In's mean rate, {MEASURES[k]}",
                "",
                "Same sites, same sample count, one fixed rate per case equal to the mean of Rate-In's rates for that "
                "case. Accuracy = % of cases where the metric prefers Rate-In; there is no known better map here.",
                "",
                *table_md(c["rows"], False),
            ]
    means = result["mean_metric_values"]
    methods = list(means)
    lines += [
        "",
        "### Mean metric values over cases (PE maps)",
        "",
        "| Metric | " + " | ".join(METHOD_NAMES[m] for m in methods) + " |",
        "|---|" + "---:|" * len(methods),
    ]
    for n in [*PAPER, *EXTRA]:
        if n in means[methods[0]]["pe"]:
            lines.append(f"| {n} | " + " | ".join(f"{means[m]['pe'][n]:.4f}" for m in methods) + " |")
    dice_row = " | ".join(f"{np.mean([r['methods'][m]['dice'] for r in recs]):.4f}" for m in methods)
    lines.append(f"| Dice of the mean prediction | {dice_row} |")
    return "\n".join(lines) + "\n"


def render_only(out_dir: Path) -> dict[str, Any]:
    """Re-write ``study1.md`` from ``study1.json`` (after a change of wording; the numbers are not recomputed)."""
    result = M.read_json(out_dir / "study1.json")
    if result is None:
        raise FileNotFoundError(f"no study1.json in {out_dir}: run the study first")
    md = render_markdown(result, M.StudyConfig.from_json(result["config"]))
    atomic_write_text(out_dir / "study1.md", md)
    print(md)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    return render_only(Path(args.output)) if args.render_only else run(args)


if __name__ == "__main__":
    main()
