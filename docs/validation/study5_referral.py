"""Validation study 5: RETINA (Band et al.) referral curves on the shifted MNI152 cohort.

Claim checked: with useful uncertainty, performance on the retained cases rises as the most uncertain cases are
referred to an expert (RETINA Sec. 3.1: "accuracy monotonically increases as tau increases" on the in-domain and
Severity Shift sets, Fig. 2c/d), and methods that capture epistemic uncertainty refer better (MC dropout reaches
100 % accuracy near 50 % referral on Severity Shift, ~20 points of referral earlier than the deterministic MAP
network; R-Accuracy AUC on the shifted set 97.5 vs 92.7, Table 7), while on Country Shift the methods differ
little (R-Accuracy AUC 94.1-95.6 for MAP, MC dropout, deep ensemble, Table 6) and AUC referral curves of most
methods even trend downwards (Sec. 3.2).

Protocol (RETINA Sec. 2.3 with Dice instead of accuracy; data as in study 1, see ``_mni152.py``): the same cases
as study 1 (the MNI152 template and perturbed copies, held-out right hemisphere). Per method: Dice (GM/WM mean) of
its own mean prediction and a case score = mean predictive entropy / log 3 inside its predicted foreground (the
CLI's default ``predictive_entropy_fg_mean``; mutual information as a second score for the sampling methods). For
referral rates tau = k / N the ceil(tau N) most uncertain cases are referred and the mean Dice of the rest is
reported (``monai_unc.metrics.selective.referral_curve``; area = ``area_under_referral_curve(normalize=True)``,
the curve's mean level, in Dice %). References: the oracle (refers the lowest Dice first) and random referral
(flat at the mean Dice in expectation; a 5-95 % band from 2000 random orders in the figure).

Methods: softmax entropy of the deterministic network (RETINA's MAP), MC dropout with the network's own trained
dropout (p = 0.1, 30 samples; RETINA's MC dropout), MC dropout p = 0.5 at the six stage sites (Zeevi et al.'s "noisy"
map), Rate-In (30 samples), TTA (in-plane flips x 2 noise copies, 8 samples; see ``_mni152.predict_tta`` for why
the left-right flip is left out). No ensemble: the shipped example is one network, and training more members
(~10 CPU minutes each) does not fit the validation budget.

Reuse: when ``--output`` already holds a ``study1.json`` made with the same configuration (seed, cases, samples,
block), the deterministic, MC p = 0.5 and Rate-In per-case Dice and scores are taken from it and only MC dropout
(own) and TTA are run; ``--recompute`` ignores it.

Run (from the repository root)::

    OMP_NUM_THREADS=1 python docs/validation/study5_referral.py          # ~4 CPU minutes after study 1, ~9 alone
    python docs/validation/study5_referral.py --tiny --output /tmp/s5    # smoke test, seconds

Writes ``study5.md``, ``study5.json`` and ``study5_referral.png`` to ``--output``.
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
from scipy import stats
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _mni152 as M  # noqa: E402

from monai_unc.io import atomic_write_text  # noqa: E402
from monai_unc.metrics.selective import area_under_referral_curve, referral_curve  # noqa: E402

#: method key -> (label, RETINA counterpart or None)
METHODS: dict[str, tuple[str, str | None]] = {
    "deterministic": ("Softmax entropy (deterministic)", "MAP (Deterministic)"),
    "mc_own": ("MC dropout, own p = 0.1", "MC DROPOUT"),
    "mc_fixed": ("MC dropout, p = 0.5 at stage sites", None),
    "rate_in": ("Rate-In", None),
    "tta": ("TTA (flips y, z x noise)", None),
}
REUSABLE = ("deterministic", "mc_fixed", "rate_in")  # computed by study 1
#: RETINA (Band et al.) numbers on the distribution-shifted evaluation sets: Table 2 (Severity Shift: accuracy % at
#: no / 50 % / 70 % referral), Table 7 (Severity Shift R-Accuracy AUC, shifted) and Table 6 (Country Shift
#: R-Accuracy AUC, shifted); all tuned on in-domain AUC, mean over six seeds
PAPER = {
    "MAP (Deterministic)": {"acc": (74.4, 93.2, 98.6), "r_acc_auc_severity": 92.7, "r_acc_auc_country": 94.1},
    "MC DROPOUT": {"acc": (86.4, 99.5, 100.0), "r_acc_auc_severity": 97.5, "r_acc_auc_country": 94.3},
    "DEEP ENSEMBLE": {"acc": (74.5, 89.8, 97.0), "r_acc_auc_severity": 92.2, "r_acc_auc_country": 95.6},
    "MC DROPOUT ENSEMBLE": {"acc": (87.4, 99.4, 100.0), "r_acc_auc_severity": 97.7, "r_acc_auc_country": 94.4},
}
N_RANDOM = 2000
TOL = 1e-12


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--output", type=Path, default=M.DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the cohort and of the sampling (default 0)")
    p.add_argument("--tiny", action="store_true", help="3 small cases, 2 samples: smoke test in seconds")
    p.add_argument("--cases", type=int, default=None, help="number of cases (default 24; tiny 3)")
    p.add_argument("--samples", type=int, default=None, help="MC / Rate-In samples per case (default 30; tiny 2)")
    p.add_argument("--recompute", action="store_true", help="do not reuse study1.json from --output")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--render-only", action="store_true",
                   help="only re-write study5.md from the study5.json in --output (no computation)")
    return p.parse_args(argv)


# ------------------------------------------------------------------------------------------------ data
def _reusable(out_dir: Path, cfg: M.StudyConfig, cases: list[dict[str, Any]]) -> dict[str, Any] | None:
    """study1.json of the same configuration and cases, or None."""
    s1 = M.read_json(out_dir / "study1.json")
    if not s1:
        return None
    mine = cfg.to_json()
    theirs = s1.get("config", {})
    if any(theirs.get(k) != v for k, v in mine.items()):
        return None
    recs = s1.get("cases", [])
    if [r.get("name") for r in recs] != [c["name"] for c in cases]:
        return None
    if any(m not in r.get("methods", {}) for r in recs for m in REUSABLE):
        return None
    return s1


def collect(cfg: M.StudyConfig, out_dir: Path, recompute: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per case and method: Dice and case scores (``pe_fg_mean``, ``mi_fg_mean``); reuses study 1 when it can."""
    cases = M.make_cases(cfg)
    s1 = None if recompute else _reusable(out_dir, cfg, cases)
    net0, net1 = M.load_networks()
    info = {"reused_from_study1": list(REUSABLE) if s1 else [], "study1_runtime": s1["runtime"] if s1 else None}
    records = []
    for i, case in enumerate(tqdm(cases, desc="study 5 cases", unit="case")):
        seed = cfg.seed * 1000 + i  # the seeds study 1 uses
        rec: dict[str, Any] = {"name": case["name"], "shift": case["shift"], "severity": case["severity"],
                               "methods": {}}
        results: dict[str, dict[str, Any]] = {}
        seconds: dict[str, float] = {}
        if s1:
            for m in REUSABLE:
                rec["methods"][m] = {k: s1["cases"][i]["methods"][m][k] for k in ("dice", "pe_fg_mean", "mi_fg_mean")}
        else:
            for m, fn, fn_args in (
                ("deterministic", M.predict_deterministic, (net0, case)),
                ("mc_fixed", M.predict_mc_posthoc, (net0, case, cfg.fixed_p, cfg.samples, seed)),
                ("rate_in", M.predict_rate_in, (net0, case, cfg.samples, cfg.target_loss, seed)),
            ):
                t = M.Timer()
                results[m] = fn(*fn_args)
                seconds[m] = t.elapsed()[1]
        t = M.Timer()
        results["mc_own"] = M.predict_mc_own(net1, case, cfg.samples, seed)
        seconds["mc_own"] = t.elapsed()[1]
        t = M.Timer()
        results["tta"] = M.predict_tta(net0, case, seed, noise_samples=1 if cfg.tiny else 2)
        seconds["tta"] = t.elapsed()[1]
        rec["inference_cpu_s"] = seconds
        for m, res in results.items():
            rec["methods"][m] = {
                "dice": M.dice_score(res["seg"], case["label"]),
                "pe_fg_mean": M.case_score(res["pe"], res["seg"]),
                "mi_fg_mean": M.case_score(res["mi"], res["seg"]) if "mi" in res else float("nan"),
            }
        records.append(rec)
    return records, info


# ------------------------------------------------------------------------------------------------ analysis
def analyse(scores: np.ndarray, dice: np.ndarray) -> dict[str, Any]:
    """Referral curve of ``scores`` on ``dice`` and its references (module docstring)."""
    curve = referral_curve(scores, dice)
    value = np.asarray(curve.value, dtype=np.float64)
    steps = np.diff(value)
    at = referral_curve(scores, dice, taus=[0.5, 0.7])
    area = area_under_referral_curve(scores, dice, normalize=True)
    oracle = area_under_referral_curve(1.0 - dice, dice, normalize=True)
    random = float(dice.mean())
    rho = stats.spearmanr(scores, dice).statistic if np.ptp(scores) > 0 and np.ptp(dice) > 0 else float("nan")
    return {
        "tau": np.asarray(curve.tau).tolist(),
        "retained_dice": value.tolist(),
        "dice_no_referral": float(value[0]),
        "dice_at_50": float(at.value[0]),
        "dice_at_70": float(at.value[1]),
        "dice_last": float(value[-1]),
        "area": float(area),
        "oracle_area": float(oracle),
        "random_area": random,
        "gain_fraction": float((area - random) / (oracle - random)) if oracle > random else float("nan"),
        "violations": int((steps < -TOL).sum()),
        "steps": int(steps.size),
        "largest_drop": float(max(0.0, -steps.min())) if steps.size else 0.0,
        "spearman_score_dice": float(rho),
    }


def random_band(dice: np.ndarray, seed: int, n: int = N_RANDOM) -> dict[str, list[float]]:
    """5th / 50th / 95th percentiles of the referral curve over ``n`` uniformly random referral orders."""
    rng = np.random.default_rng(seed)
    curves = np.stack([np.asarray(referral_curve(rng.random(dice.size), dice).value) for _ in range(n)])
    q = np.percentile(curves, [5, 50, 95], axis=0)
    return {"p5": q[0].tolist(), "p50": q[1].tolist(), "p95": q[2].tolist()}


def _fmt(v: Any, nd: int = 1, scale: float = 100.0) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    return f"{scale * v:.{nd}f}"


def render_markdown(result: dict[str, Any]) -> str:
    rows = result["rows"]
    rt = result["runtime"]
    n = result["n_cases"]
    main = [r for r in rows if r["score"] == "pe_fg_mean"]
    lines = [
        "## Study 5: referral curves on the shifted MNI152 cohort (RETINA)",
        "",
        f"Cohort: the {n} cases of study 1 (MNI152 template and perturbed copies, held-out right hemisphere). Per "
        "method: Dice (GM/WM mean, %) of its own prediction; case score = mean uncertainty in its predicted "
        "foreground (predictive entropy / log 3 unless marked MI). Referral rates tau = k/N; area = mean retained "
        "Dice over the curve (`area_under_referral_curve(normalize=True)`); oracle refers the lowest Dice first; "
        "random referral is flat at the mean Dice. Gain = (area - random) / (oracle - random). Violations = steps "
        f"where the retained Dice falls as tau grows (of {n - 1}). Paper numbers are accuracy (%) of binary "
        "diabetic-retinopathy diagnosis on real shifted data (RETINA Tables 2, 6, 7), not Dice.",
        "",
        f"Runtime: {rt['wall_s']:.0f} s wall, {rt['cpu_s']:.0f} s CPU ({rt['threads']}); inference CPU s per method "
        "(all cases): " + ", ".join(f"{m} {v:.0f}" for m, v in rt["inference_cpu_s"].items())
        + (f"; reused from study1.json: {', '.join(result['reused_from_study1'])} (study 1 spent "
           + ", ".join(f"{m} {result['study1_runtime']['inference_cpu_s'].get(m, float('nan')):.0f}"
                       for m in result["reused_from_study1"])
           + " CPU s on them, which a run without study1.json adds)" if result["reused_from_study1"] else "") + ".",
        "",
        "### Beside the paper",
        "",
        "| Method | RETINA counterpart | paper: acc. 0 / 50 / 70 % referred (Severity Shift) | paper: R-Acc. AUC "
        "Severity / Country Shift | ours: Dice 0 / 50 / 70 % referred | ours: R-Dice AUC | violations |",
        "|---|---|---|---|---|---:|---:|",
    ]
    for r in main:
        p = PAPER.get(r["paper_method"]) if r["paper_method"] else None
        pa = " / ".join(f"{v:.1f}" for v in p["acc"]) if p else "-"
        pr = f"{p['r_acc_auc_severity']:.1f} / {p['r_acc_auc_country']:.1f}" if p else "-"
        lines.append(
            f"| {r['label']} | {r['paper_method'] or '-'} | {pa} | {pr} | {_fmt(r['dice_no_referral'])} / "
            f"{_fmt(r['dice_at_50'])} / {_fmt(r['dice_at_70'])} | {_fmt(r['area'])} | {r['violations']}/{r['steps']} |"
        )
    for name in ("DEEP ENSEMBLE", "MC DROPOUT ENSEMBLE"):
        p = PAPER[name]
        lines.append(
            f"| (not run: one network) | {name} | {' / '.join(f'{v:.1f}' for v in p['acc'])} | "
            f"{p['r_acc_auc_severity']:.1f} / {p['r_acc_auc_country']:.1f} | - | - | - |"
        )
    lines += [
        "",
        "### All methods and scores",
        "",
        "| Method | score | Dice, no referral | R-Dice AUC | oracle | random | gain | Spearman(score, Dice) "
        "| violations | largest drop |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        score = "PE" if r["score"] == "pe_fg_mean" else "MI"
        lines.append(
            f"| {r['label']} | {score} | {_fmt(r['dice_no_referral'])} | {_fmt(r['area'])} | {_fmt(r['oracle_area'])} "
            f"| {_fmt(r['random_area'])} | {_fmt(r['gain_fraction'], 2, 1.0)} | "
            f"{_fmt(r['spearman_score_dice'], 2, 1.0)} | {r['violations']}/{r['steps']} | "
            f"{_fmt(r['largest_drop'], 2)} |"
        )
    lines += ["", *[f"- {s}" for s in result["statements"]]]
    return "\n".join(lines) + "\n"


def _g(v: Any) -> str:
    return f"{v:.2f}" if isinstance(v, (int, float)) and np.isfinite(v) else "-"


def statements(rows: list[dict[str, Any]]) -> list[str]:
    """The paper's statements, evaluated mechanically on the PE-score rows (MI rows in the last line)."""
    main = [r for r in rows if r["score"] == "pe_fg_mean"]
    mi_rows = [r for r in rows if r["score"] == "mi_fg_mean"]
    rises = [r for r in main if r["dice_last"] > r["dice_no_referral"]]
    mono = [r for r in main if r["violations"] == 0]
    out = [
        f"Retained Dice rises from no referral to the last referral rate for {len(rises)} of {len(main)} methods "
        f"(paper: rises for all methods on Severity Shift, Fig. 2c/d); it rises monotonically (no violation) for "
        f"{len(mono)} of {len(main)} (paper: 'accuracy monotonically increases as tau increases'); violations per "
        "method: " + ", ".join(f"{r['label']} {r['violations']}/{r['steps']}" for r in main) + ".",
    ]
    above = [r for r in main if r["area"] > r["random_area"]]
    out.append(
        f"{len(above)} of {len(main)} methods refer better than random (area above the mean Dice); gain over random "
        "as a share of the oracle's: " + ", ".join(f"{r['label']} {_g(r['gain_fraction'])}" for r in main) + "."
    )
    best = max(main, key=lambda r: r["gain_fraction"] if _g(r["gain_fraction"]) != "-" else -np.inf)
    by_key = {r["method"]: r for r in main}
    if "mc_own" in by_key and "deterministic" in by_key:
        mc, det = by_key["mc_own"], by_key["deterministic"]
        out.append(
            f"MC dropout vs the deterministic network: R-Dice AUC {100 * mc['area']:.1f} vs {100 * det['area']:.1f} "
            f"(difference {100 * (mc['area'] - det['area']):+.2f} points; gain {_g(mc['gain_fraction'])} vs "
            f"{_g(det['gain_fraction'])}); paper: MC dropout 97.5 vs MAP 92.7 on Severity Shift (+4.8), 94.3 vs 94.1 "
            "on Country Shift (+0.2)."
        )
    areas = [100 * r["area"] for r in main]
    out.append(
        f"Spread of R-Dice AUC across methods: {min(areas):.1f}-{max(areas):.1f} (range {max(areas) - min(areas):.1f} "
        f"points); best ranking relative to its oracle: {best['label']} (gain {_g(best['gain_fraction'])})."
    )
    if mi_rows:
        out.append(
            "With mutual information (epistemic) as the case score instead: gain "
            + ", ".join(f"{r['label'].removesuffix(' (MI)')} {_g(r['gain_fraction'])} ({r['violations']}/{r['steps']} "
                        f"violations, Spearman {_g(r['spearman_score_dice'])})" for r in mi_rows)
            + " (RETINA Sec. 3.1: taking epistemic uncertainty into account can improve reliability)."
        )
    return out


def plot(out_dir: Path, rows: list[dict[str, Any]], band: dict[str, list[float]], det_oracle: dict[str, Any]) -> str:
    from matplotlib.figure import Figure

    from monai_unc.report.plots import save_png

    main = [r for r in rows if r["score"] == "pe_fg_mean"]
    colors = dict(zip([r["method"] for r in main], ["#000000", "#1f77b4", "#d62728", "#2ca02c", "#9467bd"]))
    fig = Figure(figsize=(10.5, 4.0), dpi=110, layout="constrained")
    ax1, ax2 = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    tau = np.asarray(main[0]["tau"])
    ax1.fill_between(tau, band["p5"], band["p95"], step="pre", color="0.85",
                     label="random referral, 5-95 % (deterministic Dice)")
    ax1.plot(tau, det_oracle["retained_dice"], color="0.45", ls="--", drawstyle="steps-pre",
             label="oracle (deterministic Dice)")
    for r in main:
        c = colors[r["method"]]
        ax1.plot(tau, r["retained_dice"], color=c, drawstyle="steps-pre", lw=1.8, label=r["label"])
        gain = np.asarray(r["retained_dice"]) - r["random_area"]
        ax2.plot(tau, gain, color=c, drawstyle="steps-pre", lw=1.8, label=r["label"])
        ax2.plot(tau, np.asarray(r["oracle_curve"]) - r["random_area"], color=c, ls=":", lw=1.0, drawstyle="steps-pre")
    ax1.set_xlabel("referral rate tau (most uncertain first)")
    ax1.set_ylabel("mean Dice of retained cases")
    ax1.set_title("referral curves (score: PE in predicted foreground)", fontsize=9)
    ax1.legend(fontsize=7, loc="lower left")
    ax2.axhline(0, color="0.3", lw=0.8)
    ax2.set_xlabel("referral rate tau")
    ax2.set_ylabel("retained Dice - mean Dice")
    ax2.set_title("gain over random referral (dotted: each method's oracle)", fontsize=9)
    save_png(fig, out_dir / "study5_referral.png")
    return "study5_referral.png"


# ------------------------------------------------------------------------------------------------ main
def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    timer = M.Timer()
    cfg = M.StudyConfig.create(args.tiny, args.seed, args.cases, args.samples)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"study 5 (RETINA referral): {cfg.n_cases} cases, {cfg.samples} samples, block {cfg.roi_size}, "
          f"{M.threads_note()}", flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records, info = collect(cfg, out_dir, args.recompute)
        rows = []
        for m, (label, paper_method) in METHODS.items():
            dice = np.array([r["methods"][m]["dice"] for r in records])
            for score in ("pe_fg_mean", "mi_fg_mean"):
                s = np.array([r["methods"][m][score] for r in records], dtype=np.float64)
                if not np.isfinite(s).all():
                    continue  # no MI for the deterministic network
                a = analyse(s, dice)
                a["oracle_curve"] = np.asarray(referral_curve(1.0 - dice, dice).value).tolist()
                rows.append({"method": m, "label": label if score == "pe_fg_mean" else f"{label} (MI)",
                             "paper_method": paper_method, "score": score} | a)
        det_dice = np.array([r["methods"]["deterministic"]["dice"] for r in records])
        band = random_band(det_dice, cfg.seed)
        det_oracle = {"retained_dice": np.asarray(referral_curve(1.0 - det_dice, det_dice).value).tolist()}
        figure = plot(out_dir, rows, band, det_oracle)
    wall, cpu = timer.elapsed()
    result = {
        "study": "study5_referral",
        "paper": "RETINA (Band et al.), Sec. 2.3 / 3, Tables 2, 6, 7",
        "config": cfg.to_json(),
        "runtime": {
            "wall_s": wall, "cpu_s": cpu, "threads": M.threads_note(),
            "inference_cpu_s": {m: float(sum(r["inference_cpu_s"][m] for r in records))
                                for m in records[0]["inference_cpu_s"]},
        },
        "n_cases": len(records),
        **info,
        "cases": records,
        "rows": rows,
        "random_band_deterministic": band,
        "statements": statements(rows),
        "paper_values": PAPER,
        "figures": [figure],
        "warnings": dict(Counter(str(w.message) for w in caught if issubclass(w.category, UserWarning))),
    }
    md = render_markdown(result)
    M.write_json(out_dir / "study5.json", result)
    atomic_write_text(out_dir / "study5.md", md)
    print(md)
    print(f"study 5 runtime: {wall:.1f} s wall, {cpu:.1f} s CPU ({M.threads_note()})", flush=True)
    return result


def render_only(out_dir: Path) -> dict[str, Any]:
    """Re-write ``study5.md`` (and its statements) from ``study5.json``; the numbers are not recomputed."""
    result = M.read_json(out_dir / "study5.json")
    if result is None:
        raise FileNotFoundError(f"no study5.json in {out_dir}: run the study first")
    result["statements"] = statements(result["rows"])
    M.write_json(out_dir / "study5.json", result)
    md = render_markdown(result)
    atomic_write_text(out_dir / "study5.md", md)
    print(md)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    return render_only(Path(args.output)) if args.render_only else run(args)


if __name__ == "__main__":
    main()
