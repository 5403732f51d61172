"""Validation study 4: "Navigating uncertainty" (Zepf et al.) -- does detection dominate the GED? -- with monai-unc.

Zepf et al. (Sec. 3, Fig. 3) splits the generalized energy distance ``D_GED`` (d = 1 - IoU, 0 for two empty masks)
into a segmentation part ``D_IoU`` (GED over the non-empty masks only) and a detection part ``D_Det`` (GED with
d = [one mask empty, the other not]) and finds on LIDC (four raters who often disagree on whether a lesion is
there) that different models are best on the three measures and that "the detection seems to dominate the
ranking given by D_GED". This script repeats that analysis on toy data with presence disagreement, using
``monai_unc.metrics.ambiguity.ged``, ``ged_nonempty_iou`` and ``ged_detection``.

Data (``_toy.PresenceConfig``; ``make_toy_case`` has no presence option, so the cases are built from its noise-free
cases): one blurred sphere per 32^3 volume with a contrast and a size drawn per case, four raters with the
nested boundary styles of ``make_toy_case``; rater j leaves the mask empty when the object's visibility
(contrast x relative radius, with a per-rater log-normal jitter) is below its own detection threshold. About half
of the cases have at least one empty rater mask, about one in ten has only empty masks.

Models (``_toy.py``): 5 toy U-Nets with dropout trained on such cases (one random rater per case as label), and,
as the aleatoric model of Zepf et al., an "ensemble of annotators": 4 U-Nets, network j trained on rater j's masks.
Samples per case: softmax of network 1 (its argmax: one sample), softmax quantile samples (the foreground
probability thresholded at (s + 0.5) / 10, s = 0..9: ten nested masks whose frequencies follow the softmax),
MC dropout (argmax of 10 passes), TTA (argmax of the 16 flip/noise passes), ensemble (argmax of each of the 5
networks), annotator ensemble (argmax of each of the 4 rater networks).

Run (from the repository root)::

    OMP_NUM_THREADS=1 python docs/validation/study4_ged.py            # full size, a few minutes
    python docs/validation/study4_ged.py --tiny --output /tmp/s4     # smoke test, seconds
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _toy as T  # noqa: E402

from monai_unc.inferers import EnsembleInferer  # noqa: E402
from monai_unc.metrics.ambiguity import ged, ged_detection, ged_nonempty_iou  # noqa: E402

SAMPLERS = ("softmax_argmax", "softmax_quantiles", "mc_dropout", "tta", "ensemble", "annotators")
NAMES = {
    "softmax_argmax": "Softmax (argmax, 1 sample)",
    "softmax_quantiles": "Softmax (10 quantile masks)",
    "mc_dropout": "MC dropout",
    "tta": "TTA",
    "ensemble": "Ensemble",
    "annotators": "Annotator ensemble",
}
TICKS = {
    "softmax_argmax": "softmax\nargmax",
    "softmax_quantiles": "softmax\nquantiles",
    "mc_dropout": "MC\ndropout",
    "tta": "TTA",
    "ensemble": "ensemble",
    "annotators": "annotator\nensemble",
}
METRICS = ("ged", "d_iou", "d_det")
LABELS = {"ged": "D_GED", "d_iou": "D_IoU", "d_det": "D_Det"}

FULL = {
    "shape": (32, 32, 32),
    "n_train": 80,
    "n_test": 60,
    "members": 5,
    "iterations": 300,
    "mc_samples": 10,
    "quantiles": 10,
}
TINY = {
    "shape": (16, 16, 16),
    "n_train": 8,
    "n_test": 6,
    "members": 2,
    "iterations": 6,
    "mc_samples": 3,
    "quantiles": 4,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return T.parse_study_args(__doc__ or "", argv)


def sample_masks(inferers: dict, case: dict, quantiles: int) -> dict[str, np.ndarray]:
    """Label-map samples ``(S, *spatial)`` of every sampler for one case."""
    out: dict[str, np.ndarray] = {}
    soft = T.predict_case(*inferers["softmax"], case["image"])
    p_fg = soft["pred"][1]
    out["softmax_argmax"] = soft["pred"].argmax(0)[None]
    levels = (np.arange(quantiles) + 0.5) / quantiles
    out["softmax_quantiles"] = (p_fg[None] > levels.reshape(-1, *([1] * p_fg.ndim))).astype(np.int64)
    for name in ("mc_dropout", "tta", "ensemble", "annotators"):
        o = T.predict_case(*inferers[name], case["image"])
        out[name] = o["samples"].argmax(1)  # (S, C, *spatial) -> (S, *spatial)
    return out


def case_metrics(raters: np.ndarray, samples: np.ndarray) -> dict[str, float]:
    """D_GED (1 - IoU), D_IoU and D_Det of one case with their terms (monai_unc.metrics.ambiguity)."""
    res: dict[str, float] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # D_IoU is NaN (warned) when a set holds only empty masks
        for name, r in (
            ("ged", ged(raters, samples, distance="iou", num_classes=2)),
            ("d_iou", ged_nonempty_iou(raters, samples, num_classes=2)),
            ("d_det", ged_detection(raters, samples)),
        ):
            res[name] = r.ged
            res[f"{name}_cross"] = r.cross
            res[f"{name}_sample_diversity"] = r.sample_diversity
    res["samples_empty_fraction"] = float((samples.reshape(samples.shape[0], -1) == 0).all(axis=1).mean())
    return res


def _nanmean(a: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    return float(np.nanmean(a)) if np.isfinite(a).any() else float("nan")


def _wilcoxon_vs_best(values: dict[str, np.ndarray]) -> dict[str, Any]:
    """Best sampler by mean (lower is better) and one-sided Wilcoxon p-values best < other (Zepf et al. Fig. 3)."""
    means = {k: _nanmean(v) for k, v in values.items()}
    best = min(means, key=lambda k: means[k] if np.isfinite(means[k]) else np.inf)
    tied = [k for k, v in means.items() if np.isfinite(v) and v <= means[best] + 1e-9]
    pvals: dict[str, float] = {}
    for k, v in values.items():
        if k == best:
            continue
        a, b = values[best], v
        ok = np.isfinite(a) & np.isfinite(b)
        diff = a[ok] - b[ok]
        if ok.sum() < 2 or not np.any(diff != 0):
            pvals[k] = float("nan")
            continue
        pvals[k] = float(stats.wilcoxon(a[ok], b[ok], alternative="less").pvalue)
    return {"means": means, "best": best, "best_tied": tied, "p_best_less": pvals}


def _rank_corr(a: dict[str, float], b: dict[str, float]) -> float:
    keys = [k for k in a if np.isfinite(a[k]) and np.isfinite(b[k])]
    if len(keys) < 3:
        return float("nan")
    x, y = np.array([a[k] for k in keys]), np.array([b[k] for k in keys])
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(stats.spearmanr(x, y).statistic)


def analyse(rows: list[dict[str, Any]], subset: str) -> dict[str, Any]:
    """Per-sampler means, best sampler and rank agreement of D_GED with D_Det and D_IoU on a subset of cases."""
    if not rows:
        return {"n_cases": 0}
    res: dict[str, Any] = {"n_cases": len(rows), "subset": subset}
    per_metric = {}
    for m in METRICS:
        vals = {s: np.array([r[f"{s}/{m}"] for r in rows], dtype=np.float64) for s in SAMPLERS}
        per_metric[m] = _wilcoxon_vs_best(vals)
        per_metric[m]["n_defined"] = {s: int(np.isfinite(v).sum()) for s, v in vals.items()}
        finite = [v for v in per_metric[m]["means"].values() if np.isfinite(v)]
        per_metric[m]["spread"] = float(max(finite) - min(finite)) if finite else float("nan")
    res["metrics"] = per_metric
    ged_means = per_metric["ged"]["means"]
    res["spearman_ged_vs_det_means"] = _rank_corr(ged_means, per_metric["d_det"]["means"])
    res["spearman_ged_vs_iou_means"] = _rank_corr(ged_means, per_metric["d_iou"]["means"])
    # per case: is the sampler best by D_GED also (one of the) best by D_Det / D_IoU? Only cases where the part
    # separates the samplers at all (not every sampler tied) count.
    agree: dict[str, list[bool]] = {"d_det": [], "d_iou": []}
    for r in rows:
        g = {s: r[f"{s}/ged"] for s in SAMPLERS if np.isfinite(r[f"{s}/ged"])}
        if not g:
            continue
        best_g = min(g, key=g.get)
        for m in ("d_det", "d_iou"):
            v = {s: r[f"{s}/{m}"] for s in SAMPLERS if np.isfinite(r[f"{s}/{m}"])}
            if len(v) < 2 or max(v.values()) - min(v.values()) < 1e-9 or best_g not in v:
                continue
            agree[m].append(v[best_g] <= min(v.values()) + 1e-9)
    res["per_case_best_agrees_with_ged"] = {m: (float(np.mean(a)) if a else float("nan")) for m, a in agree.items()}
    res["per_case_informative"] = {m: len(a) for m, a in agree.items()}
    # across (case, sampler) pairs: rank correlation of D_GED with each part
    g = np.array([r[f"{s}/ged"] for r in rows for s in SAMPLERS], dtype=np.float64)
    for m in ("d_det", "d_iou"):
        x = np.array([r[f"{s}/{m}"] for r in rows for s in SAMPLERS], dtype=np.float64)
        ok = np.isfinite(x) & np.isfinite(g)
        res[f"spearman_ged_vs_{m}_pairs"] = (
            float(stats.spearmanr(g[ok], x[ok]).statistic) if ok.sum() > 2 and np.ptp(x[ok]) > 0 else float("nan")
        )
    return res


def run(args: argparse.Namespace) -> dict[str, Any]:
    t_start, cpu_start = time.perf_counter(), time.process_time()
    T.set_threads(args.threads)
    cfg = TINY if args.tiny else FULL
    shape, seed = cfg["shape"], args.seed
    cache = None if args.no_cache else (args.cache or T.default_cache_dir())
    pcfg = T.PresenceConfig()

    def stamp(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.1f} s] {msg}")

    stamp(f"study 4 (GED and its detection part), {'tiny' if args.tiny else 'full'} size, seed {seed}")
    train = T.make_presence_dataset(cfg["n_train"], shape, pcfg, seed=seed + 11)
    test = T.make_presence_dataset(cfg["n_test"], shape, pcfg, seed=seed + 12)
    tcfg = T.TrainConfig(iterations=cfg["iterations"])
    stamp(f"training {cfg['members']} networks on {len(train)} presence-ambiguous cases")
    t_train = time.perf_counter()
    nets = T.ensemble_for(train, tcfg, cfg["members"], seed=seed + 100, cache_dir=cache)
    stamp(f"training the annotator ensemble ({pcfg.n_raters} networks, one per rater)")
    annotator_nets = T.annotator_ensemble(train, tcfg, seed=seed + 200, cache_dir=cache)
    t_train = time.perf_counter() - t_train
    inferers = T.make_inferers(nets, tcfg.noise_std, mc_samples=cfg["mc_samples"], keep_samples=True, seed=seed)
    inferers["annotators"] = (EnsembleInferer(annotator_nets, keep_samples=True, seed=seed), None)

    stamp(f"sampling and scoring {len(test)} test cases")
    t_inf = time.perf_counter()
    rows = []
    for i, c in enumerate(test):
        row: dict[str, Any] = {
            "index": i,
            "n_empty_raters": c["n_empty"],
            "n_raters": int(c["raters"].shape[0]),
            "visibility": c["visibility"],
            "contrast": c["contrast"],
            "radius": c["radius"],
        }
        for s, masks in sample_masks(inferers, c, cfg["quantiles"]).items():
            for k, v in case_metrics(c["raters"], masks).items():
                row[f"{s}/{k}"] = v
            row[f"{s}/n_samples"] = int(masks.shape[0])
        rows.append(row)
    t_inf = time.perf_counter() - t_inf
    stamp(f"scored {len(rows)} cases in {t_inf:.0f} s")

    r_all = rows
    r_amb = [r for r in rows if 0 < r["n_empty_raters"] < r["n_raters"]]
    r_pres = [r for r in rows if r["n_empty_raters"] == 0]
    runtime = time.perf_counter() - t_start
    result = {
        "study": "4: Navigating uncertainty (Zepf et al.): GED, D_IoU and D_Det on toy data with presence disagreement",
        "config": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
            "seed": seed,
            "tiny": args.tiny,
        },
        "presence_config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(pcfg).items()},
        "train_config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(tcfg).items()},
        "environment": T.environment(),
        "runtime_s": {
            "total": runtime,
            "training": t_train,
            "inference": t_inf,
            "cpu": time.process_time() - cpu_start,
        },
        "rater_empty_counts": {str(k): sum(r["n_empty_raters"] == k for r in rows) for k in range(pcfg.n_raters + 1)},
        "analysis": {
            "all": analyse(r_all, "all test cases"),
            "presence_disagreement": analyse(r_amb, "cases where some but not all raters left the mask empty"),
            "all_raters_nonempty": analyse(r_pres, "cases where every rater drew the object"),
        },
        "cases": rows,
    }
    write_outputs(result, Path(args.output))
    stamp(
        f"wrote {Path(args.output) / 'study4.md'}, study4.json, study4_ged.png; total {runtime:.0f} s "
        f"({result['runtime_s']['cpu']:.0f} s CPU)"
    )
    return result


def write_outputs(result: dict[str, Any], out: Path, json_too: bool = True) -> None:
    """``study4.json`` (unless ``json_too`` is false), ``study4.md`` and ``study4_ged.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if json_too:
        T.atomic_write_json(out / "study4.json", result)
    T.atomic_write_text(out / "study4.md", render_markdown(result))
    _figure(result["cases"], out / "study4_ged.png")


# ------------------------------------------------------------------------------------------------ reporting
def _p(p: float) -> str:
    if p is None or not np.isfinite(p):
        return "n/a"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def render_markdown(res: dict[str, Any]) -> str:
    c = res["config"]
    fmt = T.fmt
    L: list[str] = ["## Study 4: Navigating uncertainty (Zepf et al.): does detection dominate the GED?", ""]
    counts = res["rater_empty_counts"]
    tiny = ", tiny smoke-test size" if c["tiny"] else ""
    rt, env = res["runtime_s"], res["environment"]
    L.append(
        f"Generated by `docs/validation/study4_ged.py` (seed {c['seed']}{tiny}; "
        f"{rt['total']:.0f} s wall clock, {rt['cpu']:.0f} s CPU, on {env['threads']} thread(s), "
        f"of which training {rt['training']:.0f} s). "
        f"{c['n_test']} toy test cases ({c['shape'][0]}^3) with 4 raters who disagree on the border "
        "(nested styles) and, for faint or small objects, on whether the object is there: "
        + ", ".join(f"{v} case(s) with {k} empty rater mask(s)" for k, v in counts.items())
        + f". {c['members']} U-Nets (dropout 0.5) trained for {c['iterations']} iterations on "
        f"{c['n_train']} such cases (one random rater per case as label) give the softmax, "
        "MC-dropout, TTA and ensemble samples; the annotator ensemble (Zepf et al.'s aleatoric "
        "baseline) is one such U-Net per rater, trained on that rater's masks. "
        "Distances: D_GED with d = 1 - IoU (0 for two empty masks), D_IoU over non-empty masks "
        "only (undefined when a set holds no non-empty mask; such cases are left out of its mean), "
        "D_Det with d = [exactly one mask empty]; lower is better."
    )
    L.append("")
    L.append(
        "Paper (Zepf et al., Sec. 3 and Fig. 3; LIDC, 4 raters, 1980 test images; three models, aleatoric methods and "
        'MC dropout, not named in the text): "When assessing detection (D_Det), segmentation (D_IoU), or detection '
        "and segmentation combined (D_GED), we see different models emerge as the best performing on average. "
        'Moreover, the detection seems to dominate the ranking given by D_GED." The paper gives its values only as '
        "violin plots (no numbers in the text), so the paper column below states the finding, not values; apart from "
        "MC dropout its models are not those compared here."
    )
    L.append("")
    for key, title in (
        ("all", "all test cases"),
        ("presence_disagreement", "cases with presence disagreement (some, not all, raters empty)"),
        ("all_raters_nonempty", "cases every rater segmented"),
    ):
        a = res["analysis"][key]
        if not a.get("n_cases"):
            continue
        L.append(f"### Mean over {title} (n = {a['n_cases']})")
        L.append("")
        rows = []
        for s in SAMPLERS:
            cells = [NAMES[s]]
            for m in METRICS:
                mm = a["metrics"][m]
                v = fmt(mm["means"][s], 3)
                if s in mm["best_tied"]:
                    v = f"**{v}** (best{', tied' if len(mm['best_tied']) > 1 else ''})"
                else:
                    v = f"{v} (p = {_p(mm['p_best_less'].get(s))})"
                if m == "d_iou" and mm["n_defined"][s] < a["n_cases"]:
                    v += f" [n = {mm['n_defined'][s]}]"
                cells.append(v)
            rows.append(cells)
        L.append(T.md_table(["samples from", "D_GED", "D_IoU", "D_Det"], rows))
        L.append("")
        L.append(
            "p: one-sided Wilcoxon signed-rank test that the best sampler's per-case values are lower (as in "
            "Zepf et al. Fig. 3). "
            "Rank correlation of the samplers' mean D_GED with their mean D_Det: "
            f"{fmt(a['spearman_ged_vs_det_means'])}, "
            f"with their mean D_IoU: {fmt(a['spearman_ged_vs_iou_means'])}. " + _per_case(a) + "; "
            f"over all (case, sampler) pairs, Spearman of D_GED with D_Det {fmt(a['spearman_ged_vs_d_det_pairs'])}, "
            f"with D_IoU {fmt(a['spearman_ged_vs_d_iou_pairs'])}. "
            "Spread of the samplers' means (max - min): "
            + ", ".join(f"{LABELS[m]} {fmt(a['metrics'][m]['spread'], 3)}" for m in METRICS)
            + "."
        )
        L.append("")
    L.append("### Agreement with the paper")
    L.append("")
    a = res["analysis"]["all"]
    amb = res["analysis"]["presence_disagreement"]
    if a.get("n_cases"):
        rows = [
            [
                "different models are best on D_GED, D_IoU, D_Det",
                "yes (Fig. 3)",
                _winners(a) + (f"; presence-disagreement cases: {_winners(amb)}" if amb.get("n_cases") else ""),
            ],
            [
                "detection dominates the D_GED ranking",
                'yes ("seems to dominate")',
                f"rank corr. of means with D_Det {fmt(a['spearman_ged_vs_det_means'])} vs with D_IoU "
                f"{fmt(a['spearman_ged_vs_iou_means'])}; presence-disagreement cases: "
                + (
                    f"{fmt(amb['spearman_ged_vs_det_means'])} vs {fmt(amb['spearman_ged_vs_iou_means'])}"
                    if amb.get("n_cases")
                    else "none"
                ),
            ],
        ]
        L.append(T.md_table(["finding", "paper", "ours"], rows))
        L.append("")
        L.append(_sentence(a, amb))
        L.append("")
    return "\n".join(L)


def _per_case(a: dict[str, Any]) -> str:
    parts = []
    for m in ("d_det", "d_iou"):
        n = a["per_case_informative"][m]
        if n:
            share = fmt_pct(a["per_case_best_agrees_with_ged"][m])
            parts.append(
                f"the sampler best by D_GED is also best by {LABELS[m]} in {share} of the {n} cases where "
                f"{LABELS[m]} separates the samplers"
            )
        else:
            parts.append(f"{LABELS[m]} separates the samplers in no case")
    return "Per case: " + "; ".join(parts)


def fmt_pct(x: Any) -> str:
    return "n/a" if not _ok(x) else f"{100 * float(x):.0f} %"


def _ok(x: Any) -> bool:
    return x is not None and bool(np.isfinite(x))


def _winners(a: dict[str, Any]) -> str:
    return "; ".join(f"{LABELS[m]}: " + " = ".join(NAMES[b] for b in a["metrics"][m]["best_tied"]) for m in METRICS)


def _sentence(a: dict[str, Any], amb: dict[str, Any]) -> str:
    """The agreement verdict, generated from the numbers (all cases first, then the presence-disagreement subset)."""
    out = []
    bests = {m: set(a["metrics"][m]["best_tied"]) for m in METRICS}
    common = bests["ged"] & bests["d_det"] & bests["d_iou"]
    g = a["metrics"]["ged"]["best"]
    if not common:
        out.append(
            f"Over all cases no sampler is best on all three measures, as in the paper; the D_GED winner ({NAMES[g]}) "
            f"is {'also' if g in bests['d_det'] else 'not'} best on D_Det and "
            f"{'also' if g in bests['d_iou'] else 'not'} best on D_IoU."
        )
    else:
        out.append(
            f"Over all cases {' and '.join(NAMES[b] for b in sorted(common))} is best on all three measures, unlike "
            "the paper's different winners."
        )
    if amb.get("n_cases"):
        sub = {m: set(amb["metrics"][m]["best_tied"]) for m in METRICS}
        if not sub["ged"] & sub["d_det"] & sub["d_iou"]:
            out.append(
                f"On the {amb['n_cases']} cases where raters disagree on presence the winners differ ({_winners(amb)})."
            )
    r_det, r_iou = a["spearman_ged_vs_det_means"], a["spearman_ged_vs_iou_means"]
    if _ok(r_det) and _ok(r_iou):
        if r_det > r_iou:
            out.append(
                f"The samplers' ranking by mean D_GED follows the detection part (rank correlation {T.fmt(r_det)}) "
                f"more closely than the segmentation part ({T.fmt(r_iou)}): the paper's finding that detection "
                "dominates the GED ranking is reproduced."
            )
        else:
            out.append(
                f"The samplers' ranking by mean D_GED follows the segmentation part (rank correlation "
                f"{T.fmt(r_iou)}) at least as closely as the detection part ({T.fmt(r_det)}): the paper's finding "
                "that detection dominates the ranking is not reproduced at the level of the test-set means."
            )
    if amb.get("n_cases"):
        rd, ri = amb["spearman_ged_vs_det_means"], amb["spearman_ged_vs_iou_means"]
        if _ok(rd) and _ok(ri):
            closer = "D_Det" if rd > ri else "D_IoU"
            out.append(
                f"On the presence-disagreement cases alone it follows {closer} more closely "
                f"({T.fmt(rd)} with D_Det, {T.fmt(ri)} with D_IoU)."
            )
    n_sep = a["per_case_informative"]["d_det"]
    agree = a["per_case_best_agrees_with_ged"]["d_det"]
    if n_sep and _ok(agree):
        out.append(
            f"Case by case, wherever D_Det separates the samplers at all ({n_sep} cases), the sampler with the lowest "
            f"D_GED also has the lowest D_Det in {T.fmt(100 * agree, 0)} % of them."
        )
    sp = a["metrics"]
    out.append(
        f"Across samplers the mean D_Det varies by {T.fmt(sp['d_det']['spread'], 3)} and the mean D_IoU by "
        f"{T.fmt(sp['d_iou']['spread'], 3)} (all cases)."
    )
    return " ".join(out)


def _figure(rows: list[dict[str, Any]], path: Path) -> None:
    """Violin plots of the per-case D_GED, D_IoU and D_Det per sampler (cf. Zepf et al. Fig. 3)."""
    from matplotlib.figure import Figure

    from monai_unc.report.plots import save_png

    fig = Figure(figsize=(13, 4), dpi=100, layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, m in zip(axes, METRICS):
        data, labels = [], []
        for s in SAMPLERS:
            v = np.array([r[f"{s}/{m}"] for r in rows], dtype=np.float64)
            v = v[np.isfinite(v)]
            if v.size:
                data.append(v)
                labels.append(TICKS[s])
        if data:
            ax.violinplot(data, showmeans=True)
            ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
        ax.set_title(LABELS[m], fontsize=10)
    n_dis = sum(0 < r["n_empty_raters"] < r["n_raters"] for r in rows)
    what = f"All {len(rows)} toy test cases ({n_dis} with presence disagreement)"
    fig.suptitle(f"{what}: GED and its parts per sampler (cf. Zepf et al. Fig. 3)", fontsize=10)
    save_png(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.render_only:
        return T.rerender(args.output, 4, write_outputs, "study4_ged.png")
    return run(args)


if __name__ == "__main__":
    main()
