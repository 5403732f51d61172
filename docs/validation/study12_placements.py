"""Validation study 12 (issue #42): what cheap dropout placements lose, against what they cost.

Question: post-hoc MC dropout in every stage is the default; dropout in the decoder only or in the last stage alone
is cheaper with shared passes (study 11). What does the cheaper placement lose in the quality of the uncertainty,
next to test-time augmentation and a small deep ensemble?

Protocol (data as in studies 1 and 5, see ``_mni152.py``: the MNI152 template and perturbed copies, the held-out
right hemisphere, one block per case). Methods, all on the shipped example network without its own dropout
(``load_networks()``'s ``net0``):

- ``deterministic``: one softmax pass (the cost unit; its entropy is a score too);
- ``mc_auto`` / ``mc_decoder`` / ``mc_last``: ``add_dropout(net0, p=0.1, after=...)`` with ``"auto"`` (every
  encoder/decoder stage but the output), ``"decoder"``, ``"last"``, then ``MCDropoutInferer(num_samples=S,
  normalize=True)`` (shared passes on, the default); the dropout is removed after each method;
- ``tta``: ``_mni152.predict_tta`` (in-plane flips x 2 noise copies, 8 passes);
- ``ensemble``: ``EnsembleInferer`` over 3 members, the shipped network and two trained with
  ``train_tissue_model(seed=1, 2)`` (the shipped recipe: Dice + CE, batch 2, lr 3e-3; ``--iterations``, fewer than
  the shipped network's 1500).

Per method and case: Dice (GM/WM mean) of the method's mean prediction and the case score = mean predictive
entropy / log 3 in its predicted foreground (study 5). Over the cohort:

- failure detection: AURC of the case score with risk 1 - Dice (``monai_unc.metrics.aurc``; lower is better);
- OoD detection: AUROC of the case score separating the perturbed cases (``shift != "none"``: every case but the
  template) from the unperturbed template (``monai_unc.metrics.ood_auroc``). The cohort holds a single clean case,
  so this AUROC is the share of perturbed cases scored above the template; a second column separates the severe
  perturbations (severity >= 3) from the mild ones (< 3) among the perturbed cases;
- calibration: ECE after temperature scaling with study 2's split on the template case: a scalar temperature
  fitted (NLL) on the even 8-slice axial slabs of the held-out hemisphere, top-label ECE (20 bins, >= 50 voxels)
  on the odd slabs (study 2's ``make_splits``, ``masked``, ``fit_temperature``, ``histogram``, ``metrics``); the
  logits of a sampling method are the log of its mean probabilities;
- referral: area under the referral curve of the case score (``area_under_referral_curve(normalize=True)``: the
  mean retained Dice, study 5);
- sampling noise: the template case's score under ``NOISE_SEEDS`` more sampling seeds; its standard deviation
  next to that of the scores across cases (the OoD AUROC compares every perturbed case with one draw of it);
- cost: process CPU time of the method over the cohort divided by that of one deterministic pass over the cohort
  (training of the ensemble members not included; it is reported separately).

Run (one thread)::

    OMP_NUM_THREADS=1 python docs/validation/study12_placements.py [--iterations 400] [--members-dir DIR]
    python docs/validation/study12_placements.py --tiny --output /tmp/s12    # smoke test
    python docs/validation/study12_placements.py --render-only                # re-write study12.md from the JSON

``--members-dir`` keeps the trained members (``member_seed<k>_it<N>.pt`` + ``.json``) so that a rerun loads them.
Writes ``study12.json`` and ``study12.md`` to ``--output``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _mni152 as M  # noqa: E402

from monai_unc.data.model import build_example_network, example_weights_record  # noqa: E402
from monai_unc.data.training import train_tissue_model  # noqa: E402
from monai_unc.inferers import EnsembleInferer, MCDropoutInferer, SoftmaxInferer, add_dropout, remove_dropout  # noqa: E402
from monai_unc.io import atomic_write_text  # noqa: E402
from monai_unc.metrics import aurc, ood_auroc  # noqa: E402
from monai_unc.metrics.selective import area_under_referral_curve  # noqa: E402

#: method key -> label
METHODS: dict[str, str] = {
    "deterministic": "deterministic (softmax entropy)",
    "mc_auto": "MC dropout, every stage",
    "mc_decoder": "MC dropout, decoder only",
    "mc_last": "MC dropout, last stage",
    "tta": "TTA (flips y, z x noise)",
    "ensemble": "ensemble of 3",
}
PLACEMENTS = {"mc_auto": "auto", "mc_decoder": "decoder", "mc_last": "last"}
METRICS = ("cost", "aurc", "ood_auroc", "severe_auroc", "ece_ts", "referral_area", "dice")
#: lower is better for these metrics (the others: higher is better)
LOWER_BETTER = {"cost", "aurc", "ece_ts"}
P_DROPOUT = 0.1
MEMBER_SEEDS = (1, 2)
SLAB = 8
SEVERE = 3.0
#: extra sampling seeds of the template case: the seed-to-seed spread of its case score (tiny: 1, the fewest with
#: the template's own score for a standard deviation)
NOISE_SEEDS = 4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--output", type=Path, default=M.DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the cohort and of the sampling (default 0)")
    p.add_argument("--tiny", action="store_true", help="3 small cases, 2 samples, 1-iteration members: smoke test")
    p.add_argument("--cases", type=int, default=None, help="number of cases (default 16; tiny 3)")
    p.add_argument("--samples", type=int, default=None, help="MC dropout samples per case (default 10; tiny 2)")
    p.add_argument("--iterations", type=int, default=None, help="training iterations per member (default 400)")
    p.add_argument("--members-dir", type=Path, default=None, help="where trained members are kept and reused")
    p.add_argument("--max-steps", type=int, default=1000, help="temperature fit steps at most (default 1000)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--render-only", action="store_true", help="only re-write study12.md from study12.json")
    args = p.parse_args(argv)
    if args.cases is None:
        args.cases = 3 if args.tiny else 16
    if args.samples is None:
        args.samples = 2 if args.tiny else 10
    if args.iterations is None:
        args.iterations = 1 if args.tiny else 400  # --tiny checks the pipeline: one step of each member
    if args.iterations < 1:
        raise ValueError(f"iterations must be positive, got {args.iterations}")
    return args


def _study2():
    spec = importlib.util.spec_from_file_location("_validation_study2", HERE / "study2_temperature.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------------ networks
def ensemble_members(net0: torch.nn.Module, iterations: int, members_dir: Path | None) -> tuple[list, dict]:
    """The shipped network and the members of :data:`MEMBER_SEEDS` (loaded from ``members_dir`` when recorded
    there with the same iterations, else trained); ``(members, {seed: training record})``."""
    members, records = [net0], {}
    for seed in MEMBER_SEEDS:
        path = members_dir / f"member_seed{seed}_it{iterations}.pt" if members_dir else None
        # the record of the weights (<weights>.json, or the name of earlier versions), checked against their digest
        record = example_weights_record(path) if path is not None and path.is_file() else {}
        if record:
            net = build_example_network(dropout=0.0)
            net.load_state_dict(torch.load(path, weights_only=True))
            if record.get("iterations") != iterations or record.get("seed") != seed:
                raise ValueError(f"{path} was trained with other settings")
        else:
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            trained, record = train_tissue_model(out_path=path, iterations=iterations, seed=seed, progress=False)
            net = build_example_network(dropout=0.0)
            net.load_state_dict(trained.state_dict())
        net.eval()
        members.append(net)
        records[seed] = {
            k: record.get(k) for k in ("iterations", "seed", "loss", "train_seconds", "dice_right_heldout")
        }
    return members, records


def predict(
    method: str, net0: torch.nn.Module, members: list, case: dict[str, Any], samples: int, seed: int, tiny: bool
) -> dict[str, Any]:
    """One method's prediction of one case (``_mni152._run``'s result)."""
    if method == "deterministic":
        return M._run(SoftmaxInferer(normalize=True), net0, case)
    if method in PLACEMENTS:
        add_dropout(net0, p=P_DROPOUT, after=PLACEMENTS[method])
        try:
            return M._run(MCDropoutInferer(num_samples=samples, normalize=True, seed=seed), net0, case)
        finally:
            remove_dropout(net0)
    if method == "tta":
        return M.predict_tta(net0, case, seed, noise_samples=1 if tiny else 2)
    if method == "ensemble":
        return M._run(EnsembleInferer(members, normalize=True), None, case)
    raise ValueError(f"unknown method {method!r}")


# ------------------------------------------------------------------------------------------------ metrics
def calibration_masks(case: dict[str, Any], cfg: M.StudyConfig, subsample: int) -> dict[str, np.ndarray]:
    """Study 2's calibration / evaluation split (even / odd axial slabs of the held-out hemisphere), cut to the
    evaluation region of the template case: boolean ``(X', Y, Z)`` masks ``cal`` and ``eval``."""
    if case["shift"] != "none":
        raise ValueError(f"case must be the unperturbed template, got shift {case['shift']!r}")
    data = M._template()
    splits = _study2().make_splits(data, slab=SLAB, subsample=subsample)
    roi = M._roi(data, cfg.roi_size)
    region = (slice(roi[0].start + case["x0"], roi[0].stop), roi[1], roi[2])
    out = {k: np.ascontiguousarray(splits[k][region]) for k in ("cal", "eval")}
    if out["cal"].shape != case["label"].shape:
        raise ValueError("the split does not match the template case's evaluation region")
    return out


def ece_after_ts(probs: np.ndarray, label: np.ndarray, masks: dict[str, np.ndarray], max_steps: int) -> dict:
    """Temperature fitted on ``masks['cal']`` (logits = log of the mean probabilities), ECE before and after on
    ``masks['eval']`` (study 2's functions)."""
    s2 = _study2()
    logits = torch.log(torch.from_numpy(probs).double().clamp_min(1e-12)).float()
    y = torch.from_numpy(label)
    z_cal, y_cal = s2.masked(logits, y, masks["cal"])
    z_ev, y_ev = s2.masked(logits, y, masks["eval"])
    fit = s2.fit_temperature(z_cal, y_cal, "nll", max_steps)
    before = s2.metrics(s2.histogram(z_ev, y_ev, 1.0))
    after = s2.metrics(s2.histogram(z_ev, y_ev, fit["t"]))
    return {"t": fit["t"], "ece": before["ece"], "ece_ts": after["ece"], "nll": before["nll"], "nll_ts": after["nll"]}


def summarise(cases: list[dict[str, Any]], method: str, det_cpu: float) -> tuple[dict[str, float], dict[str, str]]:
    """The cohort metrics of one method from its per-case records, and the reason for every NaN."""
    scores = np.array([c["methods"][method]["score"] for c in cases], dtype=np.float64)
    dice = np.array([c["methods"][method]["dice"] for c in cases], dtype=np.float64)
    shifted = np.array([c["shift"] != "none" for c in cases])
    severity = np.array([c["severity"] for c in cases])
    cpu = float(sum(c["methods"][method]["cpu_s"] for c in cases))
    reasons: dict[str, str] = {}
    out = {"cost": cpu / det_cpu if det_cpu > 0 else float("nan"), "cpu_s": cpu, "dice": float(dice.mean())}
    if det_cpu <= 0:
        reasons["cost"] = "no CPU time measured for the deterministic pass"
    if np.isfinite(scores).all():
        out["aurc"] = float(aurc(scores, 1.0 - dice))
        out["referral_area"] = float(area_under_referral_curve(scores, dice, normalize=True))
    else:
        out["aurc"] = out["referral_area"] = float("nan")
        reasons["aurc"] = reasons["referral_area"] = "a case score is not finite (empty predicted foreground)"
    for key, pos, neg, why in (
        ("ood_auroc", shifted, ~shifted, "needs at least one perturbed and one unperturbed case"),
        (
            "severe_auroc",
            shifted & (severity >= SEVERE),
            shifted & (severity < SEVERE),
            f"needs perturbed cases of severity >= {SEVERE:g} and < {SEVERE:g}",
        ),
    ):
        if pos.any() and neg.any() and np.isfinite(scores).all():
            out[key] = float(ood_auroc(scores[neg], scores[pos]))
        else:
            out[key] = float("nan")
            reasons[key] = why
    return out, reasons


def losses(rows: dict[str, dict[str, float]], ref: str = "mc_auto") -> list[str]:
    """What each cheap placement loses against ``ref`` (every stage), and how the others compare, from the rows."""

    def worse(m: str, k: str) -> float:  # > 0: method m is worse than ref on metric k
        d = rows[m][k] - rows[ref][k]
        return d if k in LOWER_BETTER else -d

    out = []
    names = {
        "aurc": "AURC",
        "ood_auroc": "OoD AUROC",
        "severe_auroc": "severe-vs-mild AUROC",
        "ece_ts": "ECE after TS",
        "referral_area": "referral area",
        "dice": "Dice",
    }
    for m in ("mc_decoder", "mc_last"):
        if m not in rows or ref not in rows:
            continue
        lost = [k for k in names if np.isfinite(worse(m, k)) and worse(m, k) > 0]
        kept = [k for k in names if np.isfinite(worse(m, k)) and worse(m, k) <= 0]
        detail = "; ".join(
            f"{names[k]} {rows[m][k]:.4f} vs {rows[ref][k]:.4f}"
            for k in names
            if np.isfinite(rows[m][k]) and np.isfinite(rows[ref][k])
        )
        out.append(
            f"{METHODS[m]} costs {rows[m]['cost']:.1f}x one pass against {rows[ref]['cost']:.1f}x for every stage "
            f"({100 * (1 - rows[m]['cost'] / rows[ref]['cost']):.0f} % less); it is worse on "
            f"{', '.join(names[k] for k in lost) or 'nothing'} and as good or better on "
            f"{', '.join(names[k] for k in kept) or 'nothing'} ({detail})."
        )
    finite = {k: {m: r[k] for m, r in rows.items() if np.isfinite(r[k])} for k in names}
    best = []
    for k, vals in finite.items():
        if vals:
            b = (min if k in LOWER_BETTER else max)(vals, key=vals.get)
            best.append(f"{names[k]} {METHODS[b]} ({vals[b]:.4f})")
    out.append("Best per metric: " + "; ".join(best) + ".")
    noisy = {
        m: r["template_score_sd"] / r["case_score_sd"]
        for m, r in rows.items()
        if r.get("case_score_sd", 0) > 0 and np.isfinite(r.get("template_score_sd", np.nan))
    }
    if noisy:
        out.append(
            "Sampling noise of the case score: the template's score varies across sampling seeds by "
            + ", ".join(f"{METHODS[m]} {v:.2f}" for m, v in noisy.items())
            + " of the spread of the scores across cases (standard deviations); where this is not small, the OoD "
            "AUROC, which compares every perturbed case with the template's single draw, ranks the seed as much as "
            "the shift."
        )
    if "deterministic" in rows:
        beat = [
            m
            for m in rows
            if m != "deterministic" and np.isfinite(rows[m]["aurc"]) and rows[m]["aurc"] < rows["deterministic"]["aurc"]
        ]
        out.append(
            f"Methods with a lower (better) AURC than the deterministic network's softmax entropy "
            f"({rows['deterministic']['aurc']:.4f}): {', '.join(METHODS[m] for m in beat) or 'none'}."
        )
    return out


# ------------------------------------------------------------------------------------------------ output
def _f(v: Any, nd: int = 4) -> str:
    return f"{v:.{nd}f}" if isinstance(v, (int, float)) and np.isfinite(v) else "-"


def render_markdown(result: dict[str, Any]) -> str:
    cfg, rows = result["config"], result["rows"]
    n = result["n_cases"]
    n_shift = sum(c["shift"] != "none" for c in result["cases"])
    members = result["members"]
    its = ", ".join(
        f"seed {s}: {r['iterations']} iterations, Dice {_f(np.mean(list(r['dice_right_heldout'].values())), 3)}"
        for s, r in members.items()
    )
    lines = [
        "## Study 12: what cheap dropout placements lose, against what they cost",
        "",
        f"Cohort: {n} cases of study 1's generator ({n - n_shift} unperturbed template, {n_shift} perturbed; held-out "
        f"right hemisphere). Post-hoc dropout p = {P_DROPOUT} in the shipped network, {cfg['samples']} MC samples "
        f"(shared passes); TTA 8 passes; ensemble = shipped network + 2 members trained with the shipped recipe "
        f"but fewer iterations ({its}; the shipped network: 1500). Case score: mean predictive entropy / log 3 in "
        "the predicted foreground. Cost: process CPU time over the cohort / one deterministic pass "
        f"({result['runtime']['threads']}; training of the members not counted: "
        f"{sum(r['train_seconds'] or 0 for r in members.values()):.0f} s wall). AURC: risk 1 - Dice, lower is "
        f"better. OoD AUROC: perturbed vs the template (one clean case, so it is the share of perturbed cases scored "
        f"above it); severe AUROC: severity >= {SEVERE:g} vs < {SEVERE:g} among the perturbed. ECE after TS: study "
        "2's split on the template case (t fitted on even axial slabs, ECE on odd slabs). Referral area: mean "
        "retained Dice over referral rates (study 5).",
        "",
    ]
    if cfg["tiny"]:
        lines += ["**`--tiny` run: the numbers only check the pipeline.**", ""]
    lines += [
        "| method | cost x | AURC | OoD AUROC | severe AUROC | ECE after TS (t) | referral area | Dice "
        "| score sd: template over seeds / across cases |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m, r in rows.items():
        lines.append(
            f"| {METHODS[m]} | {_f(r['cost'], 1)} | {_f(r['aurc'])} | {_f(r['ood_auroc'], 3)} | "
            f"{_f(r['severe_auroc'], 3)} | {_f(r['ece_ts'])} ({_f(r['t'], 2)}) | {_f(r['referral_area'])} | "
            f"{_f(r['dice'])} | {_f(r.get('template_score_sd'))} / {_f(r.get('case_score_sd'))} |"
        )
    nan = {m: r for m, r in result["nan_reasons"].items() if r}
    if nan:
        lines += [
            "",
            "Not computed: "
            + "; ".join(f"{METHODS[m]}: " + ", ".join(f"{k} ({v})" for k, v in r.items()) for m, r in nan.items())
            + ".",
        ]
    lines += ["", *[f"- {s}" for s in result["statements"]]]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    timer = M.Timer()
    cfg = M.StudyConfig.create(args.tiny, args.seed, args.cases, args.samples)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(
        f"study 12 (placements): {cfg.n_cases} cases, {cfg.samples} samples, members {args.iterations} "
        f"iterations, {M.threads_note()}",
        flush=True,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cases = M.make_cases(cfg)
        net0, _ = M.load_networks()
        train = M.Timer()
        members, member_records = ensemble_members(net0, args.iterations, args.members_dir)
        train_cpu = train.elapsed()[1]
        template = next(i for i, c in enumerate(cases) if c["shift"] == "none")
        masks = calibration_masks(cases[template], cfg, subsample=16 if args.tiny else 1)
        M._run(SoftmaxInferer(normalize=True), net0, cases[0])  # warm-up: first-call set-up is not a method's cost
        records, calibration = [], {}
        for i, case in enumerate(cases):
            seed = cfg.seed * 1000 + i
            rec: dict[str, Any] = {
                "name": case["name"],
                "shift": case["shift"],
                "severity": case["severity"],
                "methods": {},
            }
            for m in METHODS:
                t = M.Timer()
                res = predict(m, net0, members, case, cfg.samples, seed, args.tiny)
                cpu = t.elapsed()[1]
                rec["methods"][m] = {
                    "dice": M.dice_score(res["seg"], case["label"]),
                    "score": M.case_score(res["pe"], res["seg"]),
                    "cpu_s": cpu,
                }
                if i == template:
                    calibration[m] = ece_after_ts(res["probs"], case["label"], masks, args.max_steps)
            records.append(rec)
            print(
                f"  case {case['name']}: " + ", ".join(f"{m} {v['cpu_s']:.1f} s" for m, v in rec["methods"].items()),
                flush=True,
            )
        n_noise = 1 if args.tiny else NOISE_SEEDS
        for m in METHODS:  # the template's case score under other sampling seeds (not timed)
            extra = [
                predict(m, net0, members, cases[template], cfg.samples, 10**6 + k, args.tiny) for k in range(n_noise)
            ]
            records[template]["methods"][m]["noise_scores"] = [M.case_score(r["pe"], r["seg"]) for r in extra]
        det_cpu = float(sum(r["methods"]["deterministic"]["cpu_s"] for r in records))
        rows, reasons = {}, {}
        for m in METHODS:
            rows[m], reasons[m] = summarise(records, m, det_cpu)
            rows[m]["ece_ts"] = calibration[m]["ece_ts"]
            rows[m]["t"] = calibration[m]["t"]
            tpl = records[template]["methods"][m]
            rows[m]["template_score_sd"] = float(np.std([tpl["score"], *tpl["noise_scores"]], ddof=1))
            rows[m]["case_score_sd"] = float(np.std([r["methods"][m]["score"] for r in records], ddof=1))
            if not np.isfinite(rows[m]["ece_ts"]):
                reasons[m]["ece_ts"] = "no ECE bin holds enough voxels on the evaluation slabs"
    wall, cpu = timer.elapsed()
    result = {
        "study": "study12_placements",
        "issue": "#42 item 3",
        "config": cfg.to_json() | {"iterations": args.iterations, "p": P_DROPOUT, "max_steps": args.max_steps},
        "runtime": {
            "wall_s": wall,
            "cpu_s": cpu,
            "threads": M.threads_note(),
            "members_cpu_s": train_cpu,
            "deterministic_cpu_s": det_cpu,
        },
        "n_cases": len(records),
        "members": member_records,
        "cases": records,
        "calibration": calibration,
        "rows": rows,
        "nan_reasons": reasons,
        "statements": losses(rows),
        "warnings": dict(Counter(str(w.message) for w in caught if issubclass(w.category, UserWarning))),
    }
    M.write_json(out_dir / "study12.json", result)
    md = render_markdown(result)
    atomic_write_text(out_dir / "study12.md", md)
    print(md)
    print(f"study 12 runtime: {wall:.1f} s wall, {cpu:.1f} s CPU ({M.threads_note()})", flush=True)
    return result


def _restore(result: dict[str, Any]) -> dict[str, Any]:
    """JSON null (NaN written by ``write_json``) back to NaN in the rows."""
    result["rows"] = {m: {k: float("nan") if v is None else v for k, v in r.items()} for m, r in result["rows"].items()}
    return result


def render_only(out_dir: Path) -> dict[str, Any]:
    """Re-write ``study12.md`` (and its statements) from ``study12.json``; the numbers are not recomputed."""
    result = M.read_json(out_dir / "study12.json")
    if result is None:
        raise FileNotFoundError(f"no study12.json in {out_dir}: run the study first")
    result = _restore(result)
    result["statements"] = losses(result["rows"])
    M.write_json(out_dir / "study12.json", result)
    md = render_markdown(result)
    atomic_write_text(out_dir / "study12.md", md)
    print(md)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    return render_only(Path(args.output)) if args.render_only else run(args)


if __name__ == "__main__":
    main()
