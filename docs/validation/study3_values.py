"""Validation study 3: ValUES on the synthetic toy set with raters and shifts, reproduced with monai-unc.

Three findings of ValUES are checked beside the paper's numbers:

(a) Appendix F.1: image-level (sum) aggregation of an uncertainty map tracks the object's size; dividing by the
    predicted object size (their "mean") removes that; patch and threshold aggregation (Sec. 4.3) are the
    size-robust alternatives ValUES uses. Spearman and Pearson correlations with the object size.
(b) Table 4b (Toy 3a / 3b): OoD detection AUROC (``monai_unc.metrics.casewise.ood_auroc``) of the EU (mutual
    information), AU (expected entropy) and PU (predictive entropy; 1 - max softmax for the deterministic model)
    measures of softmax, test-time dropout, TTA and a 5-member ensemble, aggregated by patch and threshold.
(c) Table 4a (Toy 1): NCC (``monai_unc.metrics.ambiguity.ncc``) of each map with the rater variance
    (``rater_variance``): AU measures should capture the ambiguity better than EU measures.

Protocol (ValUES Appendix B.1.1, setting 3, scaled to one CPU thread): the networks are trained on in-distribution
toy cases of which half have a blurred border with three raters (aleatoric uncertainty) and half have none;
test sets: i.i.d. cases without blur, i.i.d. cases with blur, and shifted cases without blur (intensity, shape,
position in turn). 3a = i.i.d. without blur vs shifted; 3b = all i.i.d. vs shifted. The threshold of threshold
aggregation is fitted on a separate i.i.d. validation set (``fit_threshold``, Appendix F.2). See ``_toy.py`` for
the network and training.

Run (from the repository root)::

    OMP_NUM_THREADS=1 python docs/validation/study3_values.py            # full size, a few minutes
    python docs/validation/study3_values.py --tiny --output /tmp/s3     # smoke test, seconds
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

from monai_unc.aggregation import aggregate, fit_threshold  # noqa: E402
from monai_unc.data import make_toy_dataset  # noqa: E402
from monai_unc.metrics.ambiguity import ncc, rater_variance  # noqa: E402
from monai_unc.metrics.casewise import ood_auroc  # noqa: E402

# measures per prediction model (ValUES Sec. 4.3, C2): (key in the inferer output, uncertainty type)
MEASURES: dict[str, list[tuple[str, str]]] = {
    "softmax": [("one_minus_max_prob", "PU")],
    "mc_dropout": [("predictive_entropy", "PU"), ("expected_entropy", "AU"), ("mutual_information", "EU")],
    "tta": [("predictive_entropy", "PU"), ("expected_entropy", "AU"), ("mutual_information", "EU")],
    "ensemble": [("predictive_entropy", "PU"), ("expected_entropy", "AU"), ("mutual_information", "EU")],
}
SHORT = {"one_minus_max_prob": "MSR", "predictive_entropy": "PE", "expected_entropy": "EE", "mutual_information": "MI"}
NAMES = {"softmax": "Deterministic", "mc_dropout": "TTD (MC dropout)", "tta": "TTA", "ensemble": "Ensemble"}
SIZE_AGGREGATIONS = ("sum", "sum_per_pred_size", "mean_pred_fg", "patch", "threshold")
SIZE_LABELS = {
    "sum": "sum (image level)",
    "sum_per_pred_size": "sum / predicted size (F.1 'mean')",
    "mean_pred_fg": "mean over predicted foreground",
    "patch": "patch (max 10^3 box sum)",
    "threshold": "threshold (mean of u >= t)",
}

# ValUES Table 4b (AUROC, mean of 3 seeds): (model, measure, aggregation) -> {"3a": ..., "3b": ...}; Toy 2 given
# for reference only (we do not train the no-blur models of setting 2).
PAPER_AUROC: dict[tuple[str, str, str], dict[str, float]] = {
    ("softmax", "one_minus_max_prob", "patch"): {"2": 0.84, "3a": 0.78, "3b": 0.41},
    ("softmax", "one_minus_max_prob", "threshold"): {"2": 0.73, "3a": 0.45, "3b": 0.40},
    ("mc_dropout", "predictive_entropy", "patch"): {"2": 0.83, "3a": 0.68, "3b": 0.37},
    ("mc_dropout", "predictive_entropy", "threshold"): {"2": 0.48, "3a": 0.50, "3b": 0.38},
    ("mc_dropout", "expected_entropy", "patch"): {"2": 0.74, "3a": 0.69, "3b": 0.36},
    ("mc_dropout", "expected_entropy", "threshold"): {"2": 0.53, "3a": 0.53, "3b": 0.29},
    ("mc_dropout", "mutual_information", "patch"): {"2": 0.83, "3a": 0.61, "3b": 0.73},
    ("mc_dropout", "mutual_information", "threshold"): {"2": 0.54, "3a": 0.43, "3b": 0.71},
    ("ensemble", "predictive_entropy", "patch"): {"2": 0.95, "3a": 0.94, "3b": 0.50},
    ("ensemble", "predictive_entropy", "threshold"): {"2": 0.90, "3a": 0.73, "3b": 0.69},
    ("ensemble", "expected_entropy", "patch"): {"2": 0.94, "3a": 0.83, "3b": 0.44},
    ("ensemble", "expected_entropy", "threshold"): {"2": 0.78, "3a": 0.19, "3b": 0.12},
    ("ensemble", "mutual_information", "patch"): {"2": 0.95, "3a": 0.95, "3b": 0.85},
    ("ensemble", "mutual_information", "threshold"): {"2": 0.91, "3a": 0.77, "3b": 0.87},
    ("tta", "predictive_entropy", "patch"): {"2": 0.95, "3a": 0.91, "3b": 0.48},
    ("tta", "predictive_entropy", "threshold"): {"2": 0.93, "3a": 0.66, "3b": 0.55},
    ("tta", "expected_entropy", "patch"): {"2": 0.95, "3a": 0.83, "3b": 0.44},
    ("tta", "expected_entropy", "threshold"): {"2": 0.89, "3a": 0.27, "3b": 0.16},
    ("tta", "mutual_information", "patch"): {"2": 0.95, "3a": 0.94, "3b": 0.92},
    ("tta", "mutual_information", "threshold"): {"2": 0.93, "3a": 0.71, "3b": 0.84},
}
# ValUES Table 4a, column Toy 1 (NCC with the rater variance, i.i.d. test set with blur)
PAPER_NCC: dict[tuple[str, str], float] = {
    ("softmax", "one_minus_max_prob"): 0.68,
    ("mc_dropout", "predictive_entropy"): 0.80,
    ("mc_dropout", "expected_entropy"): 0.86,
    ("mc_dropout", "mutual_information"): 0.47,
    ("ensemble", "predictive_entropy"): 0.83,
    ("ensemble", "expected_entropy"): 0.84,
    ("ensemble", "mutual_information"): 0.51,
    ("tta", "predictive_entropy"): 0.82,
    ("tta", "expected_entropy"): 0.82,
    ("tta", "mutual_information"): 0.54,
}

FULL = {
    "shape": (32, 32, 32),
    "n_train": 80,
    "n_val": 20,
    "n_test_clean": 30,
    "n_test_blur": 30,
    "n_ood": 30,
    "members": 5,
    "iterations": 300,
    "mc_samples": 10,
    "patch_size": 10,
}
TINY = {
    "shape": (16, 16, 16),
    "n_train": 8,
    "n_val": 4,
    "n_test_clean": 4,
    "n_test_blur": 4,
    "n_ood": 3,
    "members": 2,
    "iterations": 6,
    "mc_samples": 3,
    "patch_size": 10,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return T.parse_study_args(__doc__ or "", argv)


def _corr(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"spearman": float("nan"), "spearman_p": float("nan"), "pearson": float("nan"), "n": int(x.size)}
    s = stats.spearmanr(x, y)
    return {
        "spearman": float(s.statistic),
        "spearman_p": float(s.pvalue),
        "pearson": float(stats.pearsonr(x, y).statistic),
        "n": int(x.size),
    }


def _case_scores(u: np.ndarray, pred_fg: np.ndarray, threshold: float, patch_size: int) -> dict[str, float]:
    """All aggregations of one map ``(1, *spatial)`` (monai_unc.aggregation)."""
    m = u[None]  # (1, 1, *spatial)
    n_pred = int(pred_fg.sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # sum's object-size warning is what (a) measures
        total = float(aggregate(m, "sum")[0])
        mean_fg = float(aggregate(m, "mean", mask=pred_fg[None])[0]) if n_pred else float("nan")
    return {
        "sum": total,
        "sum_per_pred_size": total / n_pred if n_pred else float("nan"),
        "mean_pred_fg": mean_fg,
        "patch": float(aggregate(m, "patch_sum", patch_size=patch_size)[0]),
        "threshold": float(aggregate(m, "threshold", threshold=threshold)[0]),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    t_start, cpu_start = time.perf_counter(), time.process_time()
    T.set_threads(args.threads)
    cfg = TINY if args.tiny else FULL
    shape, seed = cfg["shape"], args.seed
    cache = None if args.no_cache else (args.cache or T.default_cache_dir())
    log = print

    def stamp(msg: str) -> None:
        log(f"[{time.perf_counter() - t_start:6.1f} s] {msg}")

    stamp(f"study 3 (ValUES toy), {'tiny' if args.tiny else 'full'} size, seed {seed}")
    train = T.toy_mix(cfg["n_train"], shape, 0.5, seed=seed + 1)
    val = T.toy_mix(cfg["n_val"], shape, 0.5, seed=seed + 2)
    groups = {
        "iid_clean": make_toy_dataset(cfg["n_test_clean"], shape=shape, blur=False, seed=seed + 3),
        "iid_blur": make_toy_dataset(cfg["n_test_blur"], shape=shape, blur=True, seed=seed + 4),
        "ood": make_toy_dataset(
            cfg["n_ood"], shape=shape, blur=False, shift=["intensity", "shape", "position"], seed=seed + 5
        ),
    }
    tcfg = T.TrainConfig(iterations=cfg["iterations"])
    stamp(f"training {cfg['members']} networks on {len(train)} cases ({tcfg.iterations} iterations each)")
    t_train = time.perf_counter()
    nets = T.ensemble_for(train, tcfg, cfg["members"], seed=seed, cache_dir=cache, log=log)
    t_train = time.perf_counter() - t_train
    inferers = T.make_inferers(nets, tcfg.noise_std, mc_samples=cfg["mc_samples"], seed=seed)

    # thresholds for threshold aggregation: ValUES Appendix F.2 on the validation set, one per model x measure
    stamp(f"fitting thresholds on {len(val)} validation cases")
    thresholds: dict[str, dict[str, float]] = {}
    for method, (inferer, net) in inferers.items():
        outs = [T.predict_case(inferer, net, c["image"]) for c in val]
        preds = [o["pred"].argmax(0) for o in outs]
        thresholds[method] = {key: fit_threshold([o[key] for o in outs], preds) for key, _ in MEASURES[method]}

    stamp("predicting the test cases")
    t_inf = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for group, cases in groups.items():
        for i, c in enumerate(cases):
            row: dict[str, Any] = {
                "group": group,
                "index": i,
                "shift": c["shift"],
                "blur": c["blur"],
                "object_volume": c["object_volume"],
            }
            ref_var = rater_variance(c["raters"]) if c["blur"] else None
            for method, (inferer, net) in inferers.items():
                o = T.predict_case(inferer, net, c["image"])
                pred_fg = o["pred"].argmax(0) > 0
                row[f"{method}/dice"] = T.binary_dice(pred_fg, c["label"] > 0)
                row[f"{method}/pred_volume"] = int(pred_fg.sum())
                for key, _ in MEASURES[method]:
                    scores = _case_scores(o[key], pred_fg, thresholds[method][key], cfg["patch_size"])
                    for agg, v in scores.items():
                        row[f"{method}/{key}/{agg}"] = v
                    if ref_var is not None:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore", UserWarning)
                            row[f"{method}/{key}/ncc"] = ncc(o[key][0], ref_var)
            rows.append(row)
    t_inf = time.perf_counter() - t_inf
    stamp(f"predicted {len(rows)} cases with {len(inferers)} models in {t_inf:.0f} s")

    def col(name: str, sel: list[dict]) -> np.ndarray:
        return np.array([r.get(name, np.nan) for r in sel], dtype=np.float64)

    iid = [r for r in rows if r["group"] != "ood"]
    size = col("object_volume", iid)

    # (a) correlation with object size --------------------------------------------------------------------
    size_corr: dict[str, dict[str, dict[str, float]]] = {}
    for method, measures in MEASURES.items():
        for key, _ in measures:
            size_corr[f"{method}/{key}"] = {
                agg: _corr(col(f"{method}/{key}/{agg}", iid), size) for agg in SIZE_AGGREGATIONS
            }

    # (b) OoD AUROC --------------------------------------------------------------------------------------
    settings = {
        "3a": ([r for r in rows if r["group"] == "iid_clean"], [r for r in rows if r["group"] == "ood"]),
        "3b": (iid, [r for r in rows if r["group"] == "ood"]),
    }
    auroc: dict[str, dict[str, dict[str, float]]] = {}
    for method, measures in MEASURES.items():
        for key, _ in measures:
            for agg in ("patch", "threshold"):
                name = f"{method}/{key}/{agg}"
                res = {s: ood_auroc(col(name, a), col(name, b)) for s, (a, b) in settings.items()}
                for shift in ("intensity", "shape", "position"):
                    ood_s = [r for r in settings["3b"][1] if r["shift"] == shift]
                    if ood_s:
                        res[f"3b_{shift}"] = ood_auroc(col(name, iid), col(name, ood_s))
                auroc[name] = res

    # (c) NCC on i.i.d. cases with blur ----------------------------------------------------------------------
    blur_rows = [r for r in rows if r["group"] == "iid_blur"]
    ncc_res = {
        f"{m}/{k}": float(np.nanmean(col(f"{m}/{k}/ncc", blur_rows))) for m, ms in MEASURES.items() for k, _ in ms
    }
    dice = {
        m: {g: float(np.mean(col(f"{m}/dice", [r for r in rows if r["group"] == g]))) for g in groups} for m in MEASURES
    }
    runtime = time.perf_counter() - t_start
    result = {
        "study": "3: ValUES on the synthetic toy set",
        "config": {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
            "seed": seed,
            "tiny": args.tiny,
        },
        "train_config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(tcfg).items()},
        "environment": T.environment(),
        "runtime_s": {
            "total": runtime,
            "training": t_train,
            "inference": t_inf,
            "cpu": time.process_time() - cpu_start,
        },
        "thresholds": thresholds,
        "dice_vs_majority": dice,
        "size_correlation": size_corr,
        "ood_auroc": auroc,
        "paper_ood_auroc": {"/".join(k): v for k, v in PAPER_AUROC.items()},
        "ncc": ncc_res,
        "paper_ncc": {"/".join(k): v for k, v in PAPER_NCC.items()},
        "cases": rows,
    }
    write_outputs(result, Path(args.output))
    stamp(
        f"wrote {Path(args.output) / 'study3.md'}, study3.json, study3_size.png; total {runtime:.0f} s "
        f"({result['runtime_s']['cpu']:.0f} s CPU)"
    )
    return result


def write_outputs(result: dict[str, Any], out: Path, json_too: bool = True) -> None:
    """``study3.json`` (unless ``json_too`` is false), ``study3.md`` and ``study3_size.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if json_too:
        T.atomic_write_json(out / "study3.json", result)
    T.atomic_write_text(out / "study3.md", render_markdown(result))
    _figure(result["cases"], out / "study3_size.png")


# ------------------------------------------------------------------------------------------------ reporting
def _mean(values: list[float]) -> float:
    a = np.array([v for v in values if v is not None and np.isfinite(v)], dtype=np.float64)
    return float(a.mean()) if a.size else float("nan")


def render_markdown(res: dict[str, Any]) -> str:
    c = res["config"]
    n_iid = c["n_test_clean"] + c["n_test_blur"]
    tiny = ", tiny smoke-test size" if c["tiny"] else ""
    L: list[str] = []
    L.append("## Study 3: ValUES on the synthetic toy set")
    L.append("")
    rt, env = res["runtime_s"], res["environment"]
    L.append(
        f"Generated by `docs/validation/study3_values.py` (seed {c['seed']}{tiny}; "
        f"{rt['total']:.0f} s wall clock, {rt['cpu']:.0f} s CPU, on {env['threads']} thread(s), "
        f"of which training {rt['training']:.0f} s). "
        f"Toy volumes {c['shape'][0]}^3; {c['members']} U-Nets (dropout 0.5) trained for "
        f"{c['iterations']} iterations on {c['n_train']} i.i.d. cases "
        "(half with blurred borders and 3 raters, one random rater per case as label); "
        f"test: {c['n_test_clean']} i.i.d. cases without blur, {c['n_test_blur']} with blur, "
        f"{c['n_ood']} shifted cases without blur (intensity / shape / position); "
        f"thresholds fitted on {c['n_val']} validation cases. "
        f"TTD = {c['mc_samples']} MC-dropout passes, TTA = 8 flips x (with, without noise), "
        f"ensemble = {c['members']} networks. "
        "Paper: ValUES Table 4 (mean of 3 seeds, 3D toy set, 150 epochs)."
    )
    L.append("")
    dice = res["dice_vs_majority"]
    L.append(
        "Dice of the mean prediction against the raters' majority vote (i.i.d. without blur / with blur / shifted): "
        + "; ".join(
            f"{NAMES[m]} {fmt3(d['iid_clean'])} / {fmt3(d['iid_blur'])} / {fmt3(d['ood'])}" for m, d in dice.items()
        )
        + "."
    )
    L.append("")

    # (a) ----------------------------------------------------------------------------------------------
    L.append(f"### (a) Aggregation vs object size (Appendix F.1), {n_iid} i.i.d. test cases")
    L.append("")
    L.append(
        "Spearman correlation between the case score and the object size (voxels of the raters' majority vote). "
        'The paper shows this for one model (TTD on LIDC TEX, Figure 8) and gives no correlation values: "a '
        "positive correlation between the aggregation sum and the object size is given in the top row, but if the "
        'aggregation mean is taken in the bottom row, this correlation is not present" (Appendix F.1), where the '
        "mean is the sum divided by the predicted object size. Patch and threshold aggregation are the alternatives "
        "ValUES uses for single-object data (Sec. 4.3); the paper does not analyse their size dependence."
    )
    L.append("")
    sc = res["size_correlation"]
    header = ["aggregation", "paper (F.1)", "TTD PE", "TTD EE", "TTD MI", "all 10 maps: median [min, max]"]
    paper_a = {
        "sum": "positive",
        "sum_per_pred_size": "none",
        "mean_pred_fg": "not shown",
        "patch": "not shown",
        "threshold": "not shown",
    }
    rows = []
    medians, extremes = {}, {}
    for agg in SIZE_AGGREGATIONS:
        allv = np.array([sc[k][agg]["spearman"] for k in sc], dtype=np.float64)
        allv = allv[np.isfinite(allv)]
        medians[agg] = float(np.median(allv)) if allv.size else float("nan")
        extremes[agg] = float(allv[np.argmax(np.abs(allv))]) if allv.size else float("nan")
        rng = f"{fmt(medians[agg])} [{fmt(allv.min())}, {fmt(allv.max())}]" if allv.size else "n/a"
        rows.append(
            [SIZE_LABELS[agg], paper_a[agg]]
            + [
                fmt(sc[f"mc_dropout/{k}"][agg]["spearman"])
                for k in ("predictive_entropy", "expected_entropy", "mutual_information")
            ]
            + [rng]
        )
    L.append(T.md_table(header, rows))
    L.append("")
    L.append(_size_sentence(medians, extremes) + _offset_sentence(res["cases"]))
    L.append("")

    # (b) ----------------------------------------------------------------------------------------------
    L.append("### (b) OoD detection AUROC (Table 4b, Toy 3a and 3b)")
    L.append("")
    L.append(
        f"3a: {c['n_test_clean']} i.i.d. cases without blur vs {c['n_ood']} shifted cases; 3b: all {n_iid} i.i.d. "
        'cases (with and without blur) vs the same shifted cases. Paper (Sec. 4.4-4.5, Appendix G.1): "EU-measures '
        'capture EU better than AU- and PU-measures on all datasets", with a benefit that grows with the AU in the '
        'i.i.d. data (3b); on the toy set "as soon as AU is introduced into the training data in settings 3a and '
        '3b, EU-measures become a better separator"; for OoD detection "ensembles are the only model that '
        'consistently performs above average across datasets, followed by TTA", and "the comparable performance '
        'to ensembles renders TTA often a cheap alternative for estimating EU".'
    )
    L.append("")
    au = res["ood_auroc"]
    rows = []
    for method, measures in MEASURES.items():
        for key, ut in measures:
            for agg in ("patch", "threshold"):
                p = PAPER_AUROC[(method, key, agg)]
                o = au[f"{method}/{key}/{agg}"]
                rows.append(
                    [NAMES[method], SHORT[key], ut, agg, fmt(p["3a"]), fmt(o["3a"]), fmt(p["3b"]), fmt(o["3b"])]
                )
    L.append(
        T.md_table(["model", "measure", "type", "aggregation", "paper 3a", "ours 3a", "paper 3b", "ours 3b"], rows)
    )
    L.append("")
    summary = _auroc_summary(au)
    rows = []
    for kind, label in (("type", "uncertainty type"), ("model", "prediction model")):
        for name, v in summary[kind].items():
            rows.append(
                [label, name, fmt(v["paper"]["3a"]), fmt(v["ours"]["3a"]), fmt(v["paper"]["3b"]), fmt(v["ours"]["3b"])]
            )
    L.append(
        "Means over the rows above (types: over TTD, TTA, ensemble and both aggregations; models: over their "
        "measures and both aggregations):"
    )
    L.append("")
    L.append(T.md_table(["grouped by", "group", "paper 3a", "ours 3a", "paper 3b", "ours 3b"], rows))
    L.append("")
    L.append(_auroc_sentences(summary))
    L.append("")
    shifts = ("intensity", "shape", "position")
    if all(f"3b_{sh}" in au[next(iter(au))] for sh in shifts):
        L.append(
            "Per shift (ours only; the paper reports the shifts pooled): AUROC of all i.i.d. cases vs the cases of one "
            "shift."
        )
        L.append("")
        rows = []
        for method, measures in MEASURES.items():
            for key, ut in measures:
                for agg in ("patch", "threshold"):
                    o = au[f"{method}/{key}/{agg}"]
                    rows.append([NAMES[method], SHORT[key], ut, agg] + [fmt(o[f"3b_{sh}"]) for sh in shifts])
        L.append(T.md_table(["model", "measure", "type", "aggregation", *shifts], rows))
        L.append("")
        below = {sh: sum(au[k][f"3b_{sh}"] < 0.5 for k in au) for sh in shifts}
        L.append(
            "Scores ranking the shifted cases below the i.i.d. ones (AUROC < 0.5), out of "
            f"{len(au)}: " + ", ".join(f"{sh} {n}" for sh, n in below.items()) + "."
        )
        L.append("")

    # (c) ----------------------------------------------------------------------------------------------
    L.append(f"### (c) NCC with the rater variance (Table 4a, Toy 1), {c['n_test_blur']} i.i.d. cases with blur")
    L.append("")
    L.append(
        "Per-case NCC of the uncertainty map with the rater variance, averaged over the cases. Paper (Appendix G.1): "
        '"In the toy dataset analysis, AU uncertainty measures have generally higher NCC values compared to EU '
        "uncertainty measures\". The paper's Toy 1 networks were trained on blurred cases only; ours on the "
        "half-blurred set of setting 3 (one set of networks serves (a) to (c))."
    )
    L.append("")
    nc = res["ncc"]
    rows = []
    for method, measures in MEASURES.items():
        for key, ut in measures:
            rows.append([NAMES[method], SHORT[key], ut, fmt(PAPER_NCC[(method, key)]), fmt(nc[f"{method}/{key}"])])
    L.append(T.md_table(["model", "measure", "type", "paper (Toy 1)", "ours"], rows))
    L.append("")
    L.append(_ncc_sentence(nc))
    L.append("")
    return "\n".join(L)


def fmt3(x: float) -> str:
    return fmt(x, 3)


fmt = T.fmt


def _size_sentence(medians: dict[str, float], extremes: dict[str, float]) -> str:
    s, m = medians["sum"], medians["sum_per_pred_size"]
    parts = []
    if np.isfinite(s) and s >= 0.5:
        parts.append(f"Sum aggregation tracks object size (median Spearman {fmt(s)}), as the paper found: reproduced.")
    else:
        parts.append(
            f"Sum aggregation does not clearly track object size here (median Spearman {fmt(s)}): not reproduced."
        )
    if np.isfinite(m) and abs(m) < 0.3:
        parts.append(f"Dividing by the predicted size removes the correlation (median {fmt(m)}), as in the paper.")
    else:
        direction = "negative" if m < 0 else "positive"
        parts.append(
            f"Dividing by the predicted size does not give a size-free score here: the correlation turns {direction} "
            f"(median {fmt(m)}), which differs from the paper's Figure 8."
        )
    for agg in ("patch", "threshold", "mean_pred_fg"):
        v = medians[agg]
        e = extremes[agg]
        verdict = "is nearly size-free" if np.isfinite(v) and abs(v) < 0.3 else "still depends on size"
        caveat = f", but {fmt(e)} for one of the maps" if np.isfinite(e) and abs(e) >= 0.5 else ""
        parts.append(f"{SIZE_LABELS[agg].capitalize()} {verdict} (median {fmt(v)}{caveat}).")
    return " ".join(parts)


def _offset_sentence(rows: list[dict[str, Any]]) -> str:
    """Why sum / size falls with size here: a least-squares line of the TTD PE sum against object size."""
    iid = [r for r in rows if r["group"] != "ood"]
    x = np.array([r["object_volume"] for r in iid], dtype=np.float64)
    y = np.array([r["mc_dropout/predictive_entropy/sum"] for r in iid], dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0:
        return ""
    slope, intercept = np.polyfit(x[ok], y[ok], 1)
    return (
        f" A least-squares line through the TTD PE sums is {intercept:.0f} + {slope:.3f} x size (nats, voxels), "
        f"against {np.median(y[ok]):.0f} nats for the median case: much of the sum does not grow in proportion to "
        "the object (uncertainty in the noisy background, and a border whose area grows like volume^(2/3)), so "
        "dividing by the object size leaves a term that falls like 1 / size, and the F.1 'mean' decreases with "
        "size instead of becoming size-free."
    )


def _auroc_summary(au: dict[str, dict[str, float]]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    types: dict[str, list[tuple[str, str, str]]] = {"EU": [], "AU": [], "PU": []}
    models: dict[str, list[tuple[str, str, str]]] = {m: [] for m in MEASURES}
    for method, measures in MEASURES.items():
        for key, ut in measures:
            for agg in ("patch", "threshold"):
                models[method].append((method, key, agg))
                if method != "softmax":
                    types[ut].append((method, key, agg))

    def both(keys: list[tuple[str, str, str]]) -> dict[str, dict[str, float]]:
        return {
            "paper": {s: _mean([PAPER_AUROC[k][s] for k in keys]) for s in ("3a", "3b")},
            "ours": {s: _mean([au["/".join(k)][s] for k in keys]) for s in ("3a", "3b")},
        }

    return {
        "type": {t: both(k) for t, k in types.items()},
        "model": {NAMES[m]: both(k) for m, k in models.items()},
    }


def _auroc_sentences(summary: dict) -> str:
    out = []
    for s in ("3a", "3b"):
        t = summary["type"]
        best_p = max(t, key=lambda k: t[k]["paper"][s])
        best_o = max(t, key=lambda k: t[k]["ours"][s])
        agree = "agrees" if best_p == best_o else "disagrees"
        out.append(
            f"Toy {s}: the best uncertainty type is {best_o} for us (EU {fmt(t['EU']['ours'][s])}, AU "
            f"{fmt(t['AU']['ours'][s])}, PU {fmt(t['PU']['ours'][s])}) and {best_p} in the paper (EU "
            f"{fmt(t['EU']['paper'][s])}, AU {fmt(t['AU']['paper'][s])}, PU {fmt(t['PU']['paper'][s])}): {agree}."
        )
    m = summary["model"]
    rank_o = sorted(m, key=lambda k: -_mean([m[k]["ours"]["3a"], m[k]["ours"]["3b"]]))
    rank_p = sorted(m, key=lambda k: -_mean([m[k]["paper"]["3a"], m[k]["paper"]["3b"]]))
    out.append(
        f"Models ranked by mean AUROC over 3a and 3b: ours {' > '.join(rank_o)}; paper {' > '.join(rank_p)}"
        + (
            " (same order)."
            if rank_o == rank_p
            else f" (best model {'the same' if rank_o[0] == rank_p[0] else 'differs'})."
        )
    )
    return " ".join(out)


def _ncc_sentence(nc: dict[str, float]) -> str:
    wins_o = [
        m for m in ("mc_dropout", "tta", "ensemble") if nc[f"{m}/expected_entropy"] > nc[f"{m}/mutual_information"]
    ]
    wins_p = [
        m
        for m in ("mc_dropout", "tta", "ensemble")
        if PAPER_NCC[(m, "expected_entropy")] > PAPER_NCC[(m, "mutual_information")]
    ]
    au = _mean([nc[f"{m}/expected_entropy"] for m in ("mc_dropout", "tta", "ensemble")])
    eu = _mean([nc[f"{m}/mutual_information"] for m in ("mc_dropout", "tta", "ensemble")])
    verdict = "reproduced" if len(wins_o) == 3 else ("partly reproduced" if wins_o else "not reproduced")
    sampling = ("mc_dropout", "tta", "ensemble")
    p_au = _mean([PAPER_NCC[(m, "expected_entropy")] for m in sampling])
    p_eu = _mean([PAPER_NCC[(m, "mutual_information")] for m in sampling])
    return (
        f"The AU measure (expected entropy) has a higher NCC with the rater variance than the EU measure (mutual "
        f"information) for {len(wins_o)} of 3 sampling models here (mean {fmt(au)} vs {fmt(eu)}) and for "
        f"{len(wins_p)} of 3 in the paper (mean {fmt(p_au)} vs {fmt(p_eu)}): {verdict}."
    )


def _figure(rows: list[dict[str, Any]], path: Path) -> None:
    """ValUES Figure 8 analogue: TTD sum and sum / predicted size vs object size, per measure."""
    from matplotlib.figure import Figure

    from monai_unc.report.plots import save_png

    iid = [r for r in rows if r["group"] != "ood"]
    size = np.array([r["object_volume"] for r in iid], dtype=np.float64)
    blur = np.array([r["blur"] for r in iid], dtype=bool)
    fig = Figure(figsize=(10, 6), dpi=100, layout="constrained")
    axes = fig.subplots(2, 3)
    for j, (key, ut) in enumerate(MEASURES["mc_dropout"]):
        for i, agg in enumerate(("sum", "sum_per_pred_size")):
            ax = axes[i, j]
            y = np.array([r[f"mc_dropout/{key}/{agg}"] for r in iid], dtype=np.float64)
            ax.scatter(size[blur], y[blur], s=12, label="blur (3 raters)")
            ax.scatter(size[~blur], y[~blur], s=12, marker="x", label="no blur")
            ax.set_xlabel("object size (voxels, majority vote)")
            ax.set_ylabel(f"{SHORT[key]} ({ut}): {SIZE_LABELS[agg]}", fontsize=8)
            ok = np.isfinite(y)
            if ok.sum() > 2:
                ax.set_title(f"Spearman {stats.spearmanr(size[ok], y[ok]).statistic:.2f}", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("TTD on the toy set: summed uncertainty vs object size (cf. ValUES Figure 8)", fontsize=10)
    save_png(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.render_only:
        return T.rerender(args.output, 3, write_outputs, "study3_size.png")
    return run(args)


if __name__ == "__main__":
    main()
