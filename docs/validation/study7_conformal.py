"""Validation study 7: conformal inner and outer masks on the shifted MNI152 cohort and the toy set.

Claims checked (docs/conformal.md): conformal risk control (Angelopoulos, Bates, Fisch, Lei, Schuster, "Conformal
Risk Control", ICLR 2024) gives ``E[loss of a new case] <= alpha``, and the high-probability rule (Mossina and
Friedrich, "Controlling False Positives in Image Segmentation via Conformal Prediction", 2025) gives ``P(loss of a new
case > tol) <= alpha``, for the outer masks' false-negative rate (FNR) and the inner masks' false-positive share.
Both are *marginal* guarantees (over the calibration draw and the new case, for exchangeable cases); nothing is
promised for the cases of one shift type, and stratifying the calibration by a case score (Mondrian; Luo and Zhou,
"Conditional Conformal Risk Adaptation", 2025) is the simple remedy. What it costs: the band between the outer and
inner masks against the plain ``p >= 0.5`` mask, for both families (probability threshold, distance margin in mm).

Data and predictions (produced the way studies 1, 3 and 5 produce them; those studies keep no voxel predictions):

- **MNI152**: the cases of ``_mni152.make_cases`` (the template and perturbed copies: noise, bias field, contrast,
  blur, resolution loss, small affine, crop; severity 1-5), more of them than study 1 (``--mni-cases``, default
  120), each predicted once by the shipped network without dropout (``predict_deterministic``: the softmax, ~0.3 CPU
  s a case), evaluated on the held-out right hemisphere (2 mm voxels); classes GM and WM.
- **Toy set**: the test groups of study 3 (i.i.d. without blur, i.i.d. with blur, shifted: intensity, shape,
  position), predicted by the softmax of study 3's first network (same data, seed and training, so the cached weights
  of study 3 are reused when present; ~1 CPU minute to train otherwise); the label is the raters' majority vote.

Protocol: per case and side one :func:`monai_unc.metrics.conformal.conformal_case_state` per family (one pass over the
volume; the states hold every loss on the grid), then ``--splits`` random calibration / test splits (half / half) of
each cohort. Per split, family, side and method the rule is fitted on the calibration cases with
:func:`~monai_unc.metrics.conformal.fit_conformal_rule` (the code of ``evaluate --conformal``) at ``alpha`` (CRC) or
``tol = alpha`` with ``P(loss > tol) <= alpha`` (high probability), once without and once with strata (terciles of the
calibration cases' case score, the mean predictive entropy in the predicted foreground, the triage score), and the
test cases' losses are read from their states at the fitted grid index. Reported: the test loss (CRC) or the share of
test cases above ``tol`` (high probability), mean over the splits (marginal, per class), the same restricted to the test
cases of each shift type (conditional), and the test volumes of the outer and inner masks against the ``p >= 0.5``
mask (sums over the test cases).

Run (from the repository root)::

    OMP_NUM_THREADS=1 python docs/validation/study7_conformal.py         # ~2 CPU minutes (+0.5 to train the toy net)
    python docs/validation/study7_conformal.py --tiny --output /tmp/s7   # smoke test, seconds

Writes ``study7.md``, ``study7.json`` and ``study7_conditional.png`` to ``--output``.
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
import _toy as T  # noqa: E402

from monai_unc.aggregation import aggregate  # noqa: E402
from monai_unc.data import make_toy_dataset  # noqa: E402
from monai_unc.io import atomic_write_text  # noqa: E402
from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule  # noqa: E402

FAMILIES = ("threshold", "margin")
SIDES = ("outer", "inner")
METHODS = ("crc", "high_probability")
STRATA = ("none", "terciles")
LOSS = {"outer": "FNR", "inner": "false-positive share"}
FULL = {"mni_cases": 120, "toy_clean": 40, "toy_blur": 40, "toy_ood": 60, "toy_shape": (32, 32, 32),
        "toy_train": 80, "iterations": 300, "splits": 100, "alpha": 0.1}
TINY = {"mni_cases": 24, "toy_clean": 8, "toy_blur": 8, "toy_ood": 9, "toy_shape": (16, 16, 16), "toy_train": 8,
        "iterations": 6, "splits": 5, "alpha": 0.25}
#: class names of the tasks reported (foreground only)
CLASSES = {"mni152": {"1": "GM", "2": "WM"}, "toy": {"1": "object"}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", type=Path, default=M.DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the cohorts, training and splits (default 0)")
    p.add_argument("--tiny", action="store_true", help="small cohorts, 5 splits, alpha 0.25: smoke test")
    p.add_argument("--mni-cases", type=int, default=None, help="MNI152 cases (default 120; tiny 24)")
    p.add_argument("--splits", type=int, default=None, help="random calibration / test splits (default 100)")
    p.add_argument("--cache", type=Path, default=None, help="cache of the toy network (default: study 3's)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--render-only", action="store_true", help="only re-write study7.md and the figure from the JSON")
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------------------ cohorts
def _states(probs: np.ndarray, label: np.ndarray, spacing: Any, seg: np.ndarray) -> dict[str, Any]:
    """Every family x side state of one case (one pass each) and the voxels of its ``p >= 0.5`` masks."""
    out = {f"{fam}/{side}": conformal_case_state(probs, label, family=fam, side=side, spacing=spacing, pred=seg)
           for fam in FAMILIES for side in SIDES}
    out["plain"] = [int((probs[c] >= 0.5).sum()) for c in range(probs.shape[0])]
    return out


def mni_cohort(cfg: dict[str, Any], seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The MNI152 cases (module docstring): per case its shift, severity, case score and states."""
    scfg = M.StudyConfig.create(cfg["tiny"], seed, n_cases=cfg["mni_cases"])
    cases = M.make_cases(scfg)
    net0, _ = M.load_networks()
    out = []
    for case in tqdm(cases, desc="study 7 MNI152", unit="case"):
        res = M.predict_deterministic(net0, case)
        out.append({"name": case["name"], "shift": case["shift"], "severity": case["severity"],
                    "score": M.case_score(res["pe"], res["seg"]), "dice": M.dice_score(res["seg"], case["label"]),
                    "voxel_ml": float(np.prod(case["spacing"])) / 1000.0,
                    **_states(res["probs"], case["label"], case["spacing"], res["seg"])})
        case["image"] = case["label"] = None  # keep the states, not the volumes
    return out, {"config": scfg.to_json(), "network": "shipped example UNet, no dropout (softmax)"}


def toy_cohort(cfg: dict[str, Any], seed: int, cache: Path | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The toy test cases (module docstring), predicted by study 3's first network."""
    shape = tuple(cfg["toy_shape"])
    train = T.toy_mix(cfg["toy_train"], shape, 0.5, seed=seed + 1)
    tcfg = T.TrainConfig(iterations=cfg["iterations"])
    net = T.ensemble_for(train, tcfg, 1, seed=seed, cache_dir=cache, log=print)[0]
    inferer, _ = T.make_inferers([net], tcfg.noise_std, seed=seed)["softmax"]
    groups = {
        "none": make_toy_dataset(cfg["toy_clean"], shape=shape, blur=False, seed=seed + 3),
        "blur": make_toy_dataset(cfg["toy_blur"], shape=shape, blur=True, seed=seed + 4),
        "ood": make_toy_dataset(cfg["toy_ood"], shape=shape, blur=False, shift=["intensity", "shape", "position"],
                                seed=seed + 5),
    }
    out = []
    for group, cases in groups.items():
        for i, c in enumerate(tqdm(cases, desc=f"study 7 toy {group}", unit="case")):
            o = T.predict_case(inferer, net, c["image"])
            probs = o["pred"].astype(np.float64)
            probs /= probs.sum(axis=0, keepdims=True)
            seg = probs.argmax(0)
            pe = o["predictive_entropy"] / np.log(2.0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # an empty predicted foreground: undefined score
                score = float(aggregate(pe[None], "mean", mask=(seg > 0)[None, None])[0]) if (seg > 0).any() \
                    else float("nan")
            label = c["label"]
            inter = float(np.logical_and(seg > 0, label > 0).sum())
            total = float((seg > 0).sum() + (label > 0).sum())
            out.append({"name": f"{group}{i:03d}", "shift": c["shift"] if group == "ood" else group,
                        "severity": None, "score": score, "dice": 2 * inter / total if total else 1.0,
                        "voxel_ml": 0.001, **_states(probs, label, 1.0, seg)})
    return out, {"train_config": {"n_train": cfg["toy_train"], "iterations": cfg["iterations"], "seed": seed,
                                  "shape": list(shape)},
                 "network": "study 3's first toy U-Net (softmax)", "label": "raters' majority vote"}


# ------------------------------------------------------------------------------------------------ analysis
def _fit(states: list[Any], alpha: float, method: str, scores: np.ndarray | None) -> Any:
    tol = None if method == "crc" else alpha
    if scores is None:
        return fit_conformal_rule(states, alpha, tol=tol)
    edges = np.quantile(scores, [1 / 3, 2 / 3])
    return fit_conformal_rule(states, alpha, tol=tol, scores=scores, edges=edges)


def analyse(cases: list[dict[str, Any]], names: dict[str, str], alpha: float, splits: int, seed: int
            ) -> dict[str, Any]:
    """Every family x side x method x strata over ``splits`` random half / half splits (module docstring)."""
    n = len(cases)
    scores = np.array([c["score"] for c in cases], dtype=np.float64)
    finite = np.isfinite(scores)
    scores = np.where(finite, scores, scores[finite].max() if finite.any() else 0.0)  # undefined: most uncertain
    shifts = [c["shift"] for c in cases]
    kinds = sorted(set(shifts), key=lambda k: (k != "none", k))
    tasks = list(names)
    rng = np.random.default_rng(seed)
    perms = [rng.permutation(n) for _ in range(splits)]
    plain = np.array([[c["plain"][int(t)] for t in tasks] for c in cases], dtype=np.float64)  # (n, T)
    voxel_ml = np.array([c["voxel_ml"] for c in cases])
    rows = []
    for fam in FAMILIES:
        for side in SIDES:
            key = f"{fam}/{side}"
            states = [c[key] for c in cases]
            idx = [states[0].names.index(t) for t in tasks]
            losses = np.stack([s.losses()[idx] for s in states])  # (n, T, G + 1)
            sizes = np.stack([s.mask_sizes()[idx] for s in states]).astype(np.float64)
            for method in METHODS:
                for strata in STRATA:
                    test_loss = np.full((splits, n, len(tasks)), np.nan)
                    test_size = np.full((splits, n, len(tasks)), np.nan)
                    lam = np.full((splits, len(tasks), 3), np.nan)
                    refused: list[str] = []
                    for k, perm in enumerate(perms):
                        cal, test = np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
                        try:
                            rule = _fit([states[i] for i in cal], alpha, method,
                                        None if strata == "none" else scores[cal])
                        except ValueError as err:
                            refused.append(str(err))
                            continue
                        for i in test:
                            s = rule.stratum(scores[i]) if rule.edges is not None else 0
                            for ti, t in enumerate(tasks):
                                j = rule.task_rule(t, s).index
                                test_loss[k, i, ti] = losses[i, ti, j]
                                test_size[k, i, ti] = sizes[i, ti, j]
                        for ti, t in enumerate(tasks):
                            for s in range(rule.num_strata):
                                lam[k, ti, s] = rule.lambda_hat(t, s)
                    ok = ~np.isnan(test_loss).all(axis=(1, 2))  # the splits whose rule was fitted
                    # what is controlled: the loss (CRC) or whether it exceeds tol (high probability)
                    bad = np.where(np.isnan(test_loss), np.nan,
                                   (test_loss > alpha).astype(np.float64) if method == "high_probability"
                                   else test_loss)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)  # the splits without a rule: all NaN
                        per_split = np.nanmean(bad, axis=1)
                    row: dict[str, Any] = {
                        "family": fam, "side": side, "method": method, "strata": strata, "alpha": alpha,
                        "tol": alpha if method == "high_probability" else None,
                        "splits": int(ok.sum()), "refused": len(refused),
                        "refusal": refused[0] if refused else None,
                    }
                    if not ok.any():
                        rows.append(row)
                        continue
                    ps = per_split[ok]  # (splits, T): the controlled quantity on each split's test cases
                    row["achieved"] = {names[t]: float(ps[:, ti].mean()) for ti, t in enumerate(tasks)}
                    row["achieved_sd"] = {names[t]: float(ps[:, ti].std(ddof=1)) if ps.shape[0] > 1 else 0.0
                                          for ti, t in enumerate(tasks)}
                    row["mean_loss"] = {names[t]: float(np.nanmean(test_loss[ok][:, :, ti]))
                                        for ti, t in enumerate(tasks)}
                    row["lambda_hat"] = {names[t]: [float(np.nanmean(lam[ok][:, ti, s])) for s in range(3)
                                                    if np.isfinite(lam[ok][:, ti, s]).any()]
                                         for ti, t in enumerate(tasks)}
                    cond = {}
                    for kind in kinds:
                        m = np.array([sh == kind for sh in shifts])
                        vals = bad[ok][:, m]
                        cond[kind] = {"achieved": float(np.nanmean(vals)), "n_test": int(np.isfinite(vals[..., 0])
                                                                                            .sum())}
                    row["conditional"] = cond  # mean over the fg classes and the test cases of that kind
                    sz = test_size[ok]
                    used = ~np.isnan(sz)
                    row["volume_ratio"] = {names[t]: float(np.nansum(sz[..., ti]) / np.sum(
                        np.where(used[..., ti], plain[None, :, ti], 0.0))) for ti, t in enumerate(tasks)}
                    row["volume_ml"] = {names[t]: float(np.nanmean(sz[..., ti] * voxel_ml[None, :]))
                                        for ti, t in enumerate(tasks)}
                    rows.append(row)
    plain_ml = {names[t]: float(np.mean(plain[:, ti] * voxel_ml)) for ti, t in enumerate(tasks)}
    return {"n_cases": n, "shift_counts": dict(Counter(shifts)), "kinds": kinds, "plain_ml": plain_ml,
            "rows": rows}


def _find(res: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return next(r for r in res["rows"] if all(r[k] == v for k, v in kw.items()))


def bands(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Outer and inner volumes of each family and method (no strata) as shares of the ``p >= 0.5`` mask."""
    out = []
    for fam in FAMILIES:
        for method in METHODS:
            o = _find(res, family=fam, side="outer", method=method, strata="none")
            i = _find(res, family=fam, side="inner", method=method, strata="none")
            if "volume_ratio" not in o or "volume_ratio" not in i:
                continue
            for name in o["volume_ratio"]:
                out.append({"family": fam, "method": method, "class": name,
                            "outer": o["volume_ratio"][name], "inner": i["volume_ratio"][name],
                            "band": o["volume_ratio"][name] - i["volume_ratio"][name],
                            "outer_lambda": o["lambda_hat"][name][0], "inner_lambda": i["lambda_hat"][name][0]})
    return out


# ------------------------------------------------------------------------------------------------ report
def _p(v: Any, nd: int = 3) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:.{nd}f}"


def _what(method: str) -> str:
    return "E[loss]" if method == "crc" else "P(loss > tol)"


def statements(result: dict[str, Any]) -> list[str]:
    """The claims, evaluated mechanically on the results."""
    out = []
    for ds, res in result["datasets"].items():
        alpha = result["config"]["alpha"]
        rows = [r for r in res["rows"] if r["strata"] == "none" and "achieved" in r]
        mc = {id(r): max(r["achieved_sd"].values()) / np.sqrt(r["splits"]) for r in rows}
        held = [r for r in rows if all(v <= alpha + 2 * mc[id(r)] for v in r["achieved"].values())]
        worst = max(rows, key=lambda r: max(r["achieved"].values()))
        out.append(f"{ds}: the marginal guarantee holds (achieved <= target + 2 Monte Carlo SE) for {len(held)} of "
                   f"{len(rows)} family x side x method rules without strata; the largest achieved value is "
                   f"{max(worst['achieved'].values()):.3f} ({worst['family']} {worst['side']} {worst['method']}, "
                   f"target {alpha:g}).")
        for strata in STRATA:
            crc = [r for r in res["rows"] if r["strata"] == strata and "conditional" in r]
            fails = [(r, k, v["achieved"]) for r in crc for k, v in r["conditional"].items()
                     if np.isfinite(v["achieved"]) and v["achieved"] > alpha]
            kinds = Counter(k for _, k, _ in fails)
            worst_c = max(fails, key=lambda f: f[2]) if fails else None
            out.append(
                f"{ds}, {'with' if strata == 'terciles' else 'without'} strata: {len(fails)} of "
                f"{sum(len(r['conditional']) for r in crc)} (rule, shift type) pairs exceed the target on the test "
                "cases of that shift type" + (
                    f" (most often {', '.join(f'{k} {v}' for k, v in kinds.most_common(3))}; worst "
                    f"{worst_c[2]:.3f}: {worst_c[0]['family']} {worst_c[0]['side']} {worst_c[0]['method']} on "
                    f"{worst_c[1]})" if worst_c else "") + ".")
    return out


def render_markdown(result: dict[str, Any]) -> str:
    c = result["config"]
    alpha = c["alpha"]
    rt = result["runtime"]
    lines = [
        "## Study 7: conformal inner and outer masks (CRC; Mossina and Friedrich)",
        "",
        f"Targets: outer masks FNR, inner masks false-positive share; CRC: E[loss] <= {alpha:g}; high probability: "
        f"P(loss > {alpha:g}) <= {alpha:g}. {c['splits']} random calibration / test splits (half / half) per cohort; "
        "values are means over the splits of the test cases' loss (CRC) or share of test cases above tol (high "
        "probability), with the standard deviation over splits. Strata: terciles of the calibration cases' mean "
        "predictive entropy in the predicted foreground.",
        "",
        f"Runtime: {rt['wall_s']:.0f} s wall, {rt['cpu_s']:.0f} s CPU ({rt['threads']}).",
        "",
    ]
    for ds, res in result["datasets"].items():
        info = result["cohorts"][ds]
        lines += [f"### {ds}: {res['n_cases']} cases ("
                  + ", ".join(f"{k} {v}" for k, v in res["shift_counts"].items()) + f"), {info['network']}", ""]
        names = list(CLASSES[ds].values())
        lines += ["Marginal (all test cases), without strata:", "",
                  "| family | side | method | controlled | " + " | ".join(names) + " | splits |",
                  "|---|---|---|---|" + "---:|" * len(names) + "---:|"]
        for r in res["rows"]:
            if r["strata"] != "none":
                continue
            if "achieved" not in r:
                lines.append(f"| {r['family']} | {r['side']} | {r['method']} | refused | "
                             + " | ".join("-" for _ in names) + f" | 0 ({r['refusal']}) |")
                continue
            cells = [f"{_p(r['achieved'][nm])} ± {_p(r['achieved_sd'][nm])}" for nm in names]
            lines.append(f"| {r['family']} | {r['side']} | {r['method']} | {_what(r['method'])} of "
                         f"{LOSS[r['side']]} <= {alpha:g} | " + " | ".join(cells) + f" | {r['splits']} |")
        lines += ["", "Volumes on the test cases against the p >= 0.5 mask (mean plain volume: "
                  + ", ".join(f"{k} {v:.1f} ml" for k, v in res["plain_ml"].items()) + "), without strata:", "",
                  "| family | method | class | outer / plain | inner / plain | band (outer - inner) / plain | "
                  "lambda_hat outer | lambda_hat inner |", "|---|---|---|---:|---:|---:|---:|---:|"]
        for b in result["bands"][ds]:
            unit = " mm" if b["family"] == "margin" else ""
            lines.append(f"| {b['family']} | {b['method']} | {b['class']} | {_p(b['outer'], 2)} | "
                         f"{_p(b['inner'], 2)} | {_p(b['band'], 2)} | {_p(b['outer_lambda'], 3)}{unit} | "
                         f"{_p(b['inner_lambda'], 3)}{unit} |")
        kinds = res["kinds"]
        lines += ["", "Conditional: the controlled quantity on the test cases of one shift type (mean over the "
                  f"foreground classes; target {alpha:g}; **bold** above it), without / with strata:", "",
                  "| family | side | method | strata | " + " | ".join(kinds) + " |",
                  "|---|---|---|---|" + "---:|" * len(kinds)]
        for r in res["rows"]:
            if "conditional" not in r:
                continue
            cells = []
            for k in kinds:
                v = r["conditional"][k]["achieved"]
                cells.append(f"**{_p(v)}**" if np.isfinite(v) and v > alpha else _p(v))
            lines.append(f"| {r['family']} | {r['side']} | {r['method']} | {r['strata']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [*[f"- {s}" for s in result["statements"]]]
    return "\n".join(lines) + "\n"


def plot(out_dir: Path, result: dict[str, Any]) -> str:
    from matplotlib.figure import Figure

    from monai_unc.report.plots import save_png

    alpha = result["config"]["alpha"]
    datasets = list(result["datasets"])
    fig = Figure(figsize=(11.0, 3.6 * len(datasets)), dpi=110, layout="constrained")
    axes = fig.subplots(len(datasets), 2, squeeze=False)
    for row, ds in enumerate(datasets):
        res = result["datasets"][ds]
        kinds = res["kinds"]
        x = np.arange(len(kinds))
        for col, side in enumerate(SIDES):
            ax = axes[row, col]
            for k, (method, strata, color, marker) in enumerate((
                    ("crc", "none", "#1f77b4", "o"), ("crc", "terciles", "#1f77b4", "s"),
                    ("high_probability", "none", "#d62728", "o"), ("high_probability", "terciles", "#d62728", "s"))):
                r = _find(res, family="threshold", side=side, method=method, strata=strata)
                if "conditional" not in r:
                    continue
                v = [r["conditional"][kd]["achieved"] for kd in kinds]
                ax.plot(x + (k - 1.5) * 0.09, v, ls="none", marker=marker, color=color,
                        mfc=color if strata == "none" else "white",
                        label=f"{_what(method)}, {'no strata' if strata == 'none' else 'terciles'}")
            ax.axhline(alpha, color="0.2", ls="--", lw=1.2, label=f"target {alpha:g}")
            ax.set_xticks(x, kinds, rotation=25, ha="right", fontsize=8)
            ax.set_ylabel(f"test {LOSS[side]} / share above tol")
            ax.set_title(f"{ds}: {side} mask, threshold family, by shift type", fontsize=9)
            ax.grid(alpha=0.3, axis="y")
            if row == 0 and col == 0:
                ax.legend(fontsize=7)
    save_png(fig, out_dir / "study7_conditional.png")
    return "study7_conditional.png"


# ------------------------------------------------------------------------------------------------ main
def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    timer = M.Timer()
    cfg = {**(TINY if args.tiny else FULL), "tiny": bool(args.tiny)}
    if args.mni_cases is not None:
        cfg["mni_cases"] = int(args.mni_cases)
    if args.splits is not None:
        cfg["splits"] = int(args.splits)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = args.cache or T.default_cache_dir()
    print(f"study 7 (conformal masks): {cfg}, {M.threads_note()}", flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cohorts = {}
        mni, mni_info = mni_cohort(cfg, args.seed)
        t_mni = timer.elapsed()
        toy, toy_info = toy_cohort(cfg, args.seed, cache)
        t_toy = timer.elapsed()
        cohorts = {"mni152": mni_info, "toy": toy_info}
        datasets = {}
        for ds, cases in (("mni152", mni), ("toy", toy)):
            datasets[ds] = analyse(cases, CLASSES[ds], cfg["alpha"], cfg["splits"], args.seed)
            datasets[ds]["cases"] = [{k: c[k] for k in ("name", "shift", "severity", "score", "dice")}
                                     for c in cases]
    wall, cpu = timer.elapsed()
    result = {
        "study": "study7_conformal",
        "papers": ["Angelopoulos et al., Conformal Risk Control (ICLR 2024)",
                   "Mossina and Friedrich, Controlling False Positives in Image Segmentation via Conformal Prediction "
                   "(2025)", "Luo and Zhou, Conditional Conformal Risk Adaptation (2025)"],
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()} | {"seed": args.seed},
        "runtime": {"wall_s": wall, "cpu_s": cpu, "threads": M.threads_note(),
                    "cohort_cpu_s": {"mni152": t_mni[1], "toy": t_toy[1] - t_mni[1]}},
        "cohorts": cohorts,
        "datasets": datasets,
        "warnings": dict(Counter(str(w.message) for w in caught if issubclass(w.category, UserWarning))),
    }
    result["bands"] = {ds: bands(res) for ds, res in datasets.items()}
    result["statements"] = statements(result)
    result["figures"] = [plot(out_dir, result)]
    M.write_json(out_dir / "study7.json", result)
    md = render_markdown(result)
    atomic_write_text(out_dir / "study7.md", md)
    print(md)
    print(f"study 7 runtime: {wall:.1f} s wall, {cpu:.1f} s CPU ({M.threads_note()})", flush=True)
    return result


def render_only(out_dir: Path) -> dict[str, Any]:
    """Re-write ``study7.md`` (statements) and the figure from ``study7.json``; the numbers are not recomputed."""
    result = M.read_json(out_dir / "study7.json")
    if result is None:
        raise FileNotFoundError(f"no study7.json in {out_dir}: run the study first")
    result = _nan(result)
    result["statements"] = statements(result)
    plot(out_dir, result)
    M.write_json(out_dir / "study7.json", result)
    md = render_markdown(result)
    atomic_write_text(out_dir / "study7.md", md)
    print(md)
    return result


def _nan(o: Any) -> Any:
    """The JSON's nulls back to NaN where a number was written (``conditional`` values, ``achieved``)."""
    if o is None:
        return float("nan")
    if isinstance(o, dict):
        return {k: (v if k in ("refusal", "tol", "severity") else _nan(v)) for k, v in o.items()}
    if isinstance(o, list):
        return [_nan(v) for v in o]
    return o


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    return render_only(Path(args.output)) if args.render_only else run(args)


if __name__ == "__main__":
    main()
