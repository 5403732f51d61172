"""Validation study 6: Stochastic Segmentation Networks vs MC dropout and a deep ensemble (ValUES) with monai-unc.

ValUES (Kahl et al., ICLR 2024) compares MC dropout (test-time dropout, TTD), test-time augmentation, ensembles
and Stochastic Segmentation Networks (SSN; Monteiro et al., NeurIPS 2020) and finds the SSN's aleatoric
measures the best at capturing rater ambiguity. This script trains the three models this package offers for it,
MC dropout, a deep ensemble and an SSN (``monai_unc.networks.SSNNetwork`` + ``SSNLoss``), on the same 2D toy
cases with three raters, with the same budget, and reports for each:

(a) NCC (``monai_unc.metrics.ambiguity.ncc``) of every uncertainty map with the rater variance
    (``rater_variance``) on i.i.d. cases with a blurred, ambiguous border (ValUES Table 4a). Measure types follow
    ValUES Appendix D: for dropout and ensembles the expected entropy (EE) is aleatoric (AU) and the mutual
    information (MI) epistemic (EU); for the SSN, whose latent variable models the raters' variability, MI over
    the latent draws is AU and EE is taken as EU. PE is the total (PU) for all.
(b) GED (``ged``, d = 1 - IoU) between each model's samples (argmax of every pass / member / latent draw) and the
    three raters' masks, with its terms: cross term E d(S, Y), sample diversity E d(S, S') and rater diversity
    E d(Y, Y'); GED = 2 cross - sample diversity - rater diversity.
(c) OoD detection AUROC (``ood_auroc``) of every measure aggregated by patch and threshold (ValUES Table 4b):
    3a = i.i.d. cases without blur vs shifted cases, 3b = all i.i.d. cases vs shifted cases; the shifts are the
    toy set's own (intensity, shape, position; ``monai_unc.data.make_toy_dataset``).
(d) Dice of the mean prediction against the raters' majority vote.

Budget (the same for every network): the same MONAI ``UNet`` backbone (channels, strides, residual units), the
same number of optimisation steps of the same batch size, learning-rate schedule, augmentation and data: every
training sample pairs the image with one rater's mask drawn at random at every step. MC dropout is one network
(dropout p in every block), the ensemble is ``members`` such networks with different seeds (member 0 is the
dropout network), so the ensemble costs ``members`` times the steps; the SSN is one network (the backbone without
dropout, an ``SSNHead`` of rank ``rank`` on its ``feature_channels`` features, the covariance limited by
``IntensityMask``, a cross-entropy warm-up of the mean for the first 10 % of the steps, then ``SSNLoss`` with
``num_mc_samples`` draws). Dropout networks and ensemble members are trained with cross-entropy, the SSN loss with
zero covariance and one draw, so that the head and its likelihood are the only difference. The whole set of
networks is trained ``training_seeds`` times (3, as ValUES' seeds) on the same data with different initialisations,
batches and dropout masks; tables give the mean over these runs and its range, tests one p-value per run.

Run (from the repository root)::

    OMP_NUM_THREADS=1 python docs/validation/study6_ssn.py            # full size, about 9 CPU minutes
    python docs/validation/study6_ssn.py --tiny --output /tmp/s6     # smoke test, seconds
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from monai.networks.nets import UNet
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _toy as T  # noqa: E402

from monai_unc.aggregation import aggregate, fit_threshold  # noqa: E402
from monai_unc.data import build_ssn_network, make_toy_dataset  # noqa: E402
from monai_unc.inferers import EnsembleInferer, MCDropoutInferer, SSNInferer  # noqa: E402
from monai_unc.io import atomic_torch_save  # noqa: E402
from monai_unc.metrics.ambiguity import ged, ncc, rater_variance  # noqa: E402
from monai_unc.metrics.casewise import ood_auroc  # noqa: E402
from monai_unc.networks import SSNLoss  # noqa: E402

MODELS = ("mc_dropout", "ensemble", "ssn")
NAMES = {"mc_dropout": "MC dropout", "ensemble": "Ensemble", "ssn": "SSN"}
MEASURES = ("predictive_entropy", "expected_entropy", "mutual_information")
SHORT = {"predictive_entropy": "PE", "expected_entropy": "EE", "mutual_information": "MI"}
#: uncertainty type of each measure per model (ValUES Sec. 2 and Appendix D)
TYPES = {
    "mc_dropout": {"predictive_entropy": "PU", "expected_entropy": "AU", "mutual_information": "EU"},
    "ensemble": {"predictive_entropy": "PU", "expected_entropy": "AU", "mutual_information": "EU"},
    "ssn": {"predictive_entropy": "PU", "expected_entropy": "EU", "mutual_information": "AU"},
}
AGGREGATIONS = ("patch", "threshold")
GED_TERMS = ("ged", "cross", "sample_diversity", "reference_diversity")

FULL = {
    "shape": (48, 48),
    "n_train": 80,
    "n_val": 16,
    "n_test_blur": 40,
    "n_test_clean": 20,
    "n_ood": 30,
    "members": 5,
    "iterations": 1500,
    "batch_size": 8,
    "lr": 3e-3,
    "channels": (16, 32, 64),
    "num_res_units": 1,
    "dropout": 0.5,
    "feature_channels": 16,
    "rank": 10,
    "num_mc_samples": 20,
    "noise_std": 0.1,
    "mc_samples": 10,
    "ssn_samples": 10,
    "patch_size": 8,
    "training_seeds": 3,
}
TINY = {
    **FULL,
    "shape": (16, 16),
    "n_train": 6,
    "n_val": 3,
    "n_test_blur": 3,
    "n_test_clean": 2,
    "n_ood": 3,
    "members": 2,
    "iterations": 6,
    "batch_size": 2,
    "channels": (4, 8),
    "feature_channels": 4,
    "rank": 2,
    "num_mc_samples": 4,
    "mc_samples": 3,
    "ssn_samples": 3,
    "patch_size": 4,
    "training_seeds": 2,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return T.parse_study_args(__doc__ or "", argv)


# ------------------------------------------------------------------------------------------------ training
def _build(kind: str, cfg: dict[str, Any]) -> torch.nn.Module:
    """The dropout U-Net (``kind="dropout"``) or the SSN on the same backbone without dropout (``"ssn"``)."""
    channels, strides = tuple(cfg["channels"]), (2,) * (len(cfg["channels"]) - 1)
    if kind == "dropout":
        return UNet(spatial_dims=2, in_channels=1, out_channels=2, channels=channels, strides=strides,
                    num_res_units=cfg["num_res_units"], dropout=cfg["dropout"])
    return build_ssn_network(spatial_dims=2, in_channels=1, num_classes=2, channels=channels, strides=strides,
                             num_res_units=cfg["num_res_units"], feature_channels=cfg["feature_channels"],
                             rank=cfg["rank"], dropout=0.0, mask={"threshold": 0.03, "smooth": 5, "dilate": 5})


def _cache_key(kind: str, cfg: dict[str, Any], images: np.ndarray, raters: np.ndarray, seed: int) -> str:
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(images, dtype=np.float32).tobytes())
    h.update(np.ascontiguousarray(raters, dtype=np.uint8).tobytes())
    keys = ("channels", "num_res_units", "dropout", "feature_channels", "rank", "num_mc_samples", "iterations",
            "batch_size", "lr", "noise_std")
    blob = json.dumps({"kind": kind, "cfg": {k: cfg[k] for k in keys}, "seed": seed, "torch": torch.__version__,
                       "data": h.hexdigest()}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def train(kind: str, images: np.ndarray, raters: np.ndarray, cfg: dict[str, Any], seed: int,
          cache_dir: Path | None) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Train (or load from ``cache_dir``) one network; the budget and protocol of the module docstring.

    ``images`` ``(N, 1, H, W)``, ``raters`` ``(N, R, H, W)``. Returns the network in eval mode and
    ``{"seconds", "loss_last", "cached"}``."""
    torch.manual_seed(seed)  # the initial weights too (torch's start-up seed differs between processes)
    net = _build(kind, cfg)
    key = _cache_key(kind, cfg, images, raters, seed)
    path = None if cache_dir is None else Path(cache_dir) / f"study6_{kind}_{key}.pt"
    if path is not None and path.is_file():
        net.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").is_file() else {}
        return net.eval(), {**meta, "cached": True}
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(net.parameters(), lr=cfg["lr"], weight_decay=1e-5)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["iterations"])
    ssn_loss = SSNLoss(cfg["num_mc_samples"])
    warmup = cfg["iterations"] // 10 if kind == "ssn" else cfg["iterations"]
    losses = []
    t0 = time.perf_counter()
    net.train()
    for it in range(cfg["iterations"]):
        idx = rng.integers(len(images), size=cfg["batch_size"])
        who = rng.integers(raters.shape[1], size=cfg["batch_size"])
        xs, ys = [], []
        for i, r in zip(idx, who):
            x, y = images[i], raters[i, r]
            for axis in (0, 1):
                if rng.random() < 0.5:
                    x, y = np.flip(x, axis + 1), np.flip(y, axis)
            if rng.random() < 0.5:
                x = x + rng.normal(0.0, cfg["noise_std"], x.shape)
            xs.append(np.ascontiguousarray(x, dtype=np.float32))
            ys.append(np.ascontiguousarray(y))
        x, y = torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys)).long()
        opt.zero_grad(set_to_none=True)
        if kind == "dropout":
            loss = F.cross_entropy(net(x), y)
        elif it < warmup:
            loss = F.cross_entropy(net.head.mean_logits(net.features(x)), y)
        else:
            loss = ssn_loss(net(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 12.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    meta = {"seconds": time.perf_counter() - t0, "loss_last": float(np.mean(losses[-max(1, len(losses) // 10):]))}
    net.eval()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_torch_save(path, net.state_dict())
        T.atomic_write_text(path.with_suffix(".json"), json.dumps(meta) + "\n")
    return net, {**meta, "cached": False}


# ------------------------------------------------------------------------------------------------ evaluation
def _scores(u: np.ndarray, threshold: float, patch_size: int) -> dict[str, float]:
    m = u[None]  # (1, 1, H, W)
    return {
        "patch": float(aggregate(m, "patch_sum", patch_size=patch_size)[0]),
        "threshold": float(aggregate(m, "threshold", threshold=threshold)[0]),
    }


def pack(a: np.ndarray) -> dict[str, Any]:
    """A 2D map for the figure, compactly in the JSON: 8-bit levels between its minimum and maximum, base64."""
    a = np.asarray(a, dtype=np.float64)
    lo, hi = float(a.min()), float(a.max())
    q = np.round((a - lo) / (hi - lo) * 255) if hi > lo else np.zeros(a.shape)
    return {"shape": list(a.shape), "min": lo, "max": hi,
            "data": base64.b64encode(q.astype(np.uint8).tobytes()).decode("ascii")}


def unpack(d: dict[str, Any]) -> np.ndarray:
    """The map of :func:`pack` (to 1/255 of its range)."""
    q = np.frombuffer(base64.b64decode(d["data"]), dtype=np.uint8).reshape(d["shape"]).astype(np.float64)
    return d["min"] + q / 255.0 * (d["max"] - d["min"])


def evaluate_case(c: dict[str, Any], inferers: dict[str, Any], thresholds: dict[str, dict[str, float]],
                  patch_size: int, example: dict[str, Any] | None = None) -> dict[str, float]:
    """Dice, GED terms, patch / threshold scores and NCC (cases with blur) of every model on one toy case; with
    ``example`` (a dict), its maps and samples are packed there for the figure."""
    row: dict[str, float] = {}
    ref_var = rater_variance(c["raters"]) if c["blur"] else None
    for model, (inferer, net) in inferers.items():
        o = T.predict_case(inferer, net, c["image"])
        pred_fg = o["pred"].argmax(0) > 0
        row[f"{model}/dice"] = T.binary_dice(pred_fg, c["label"] > 0)
        samples = o["samples"].argmax(1)  # (S, H, W)
        g = ged(c["raters"], samples, distance="iou", num_classes=2)
        for term in GED_TERMS:
            row[f"{model}/{term}"] = float(getattr(g, term))
        for k in MEASURES:
            for agg, v in _scores(o[k], thresholds[model][k], patch_size).items():
                row[f"{model}/{k}/{agg}"] = v
            if ref_var is not None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    row[f"{model}/{k}/ncc"] = ncc(o[k][0], ref_var)
        if example is not None:
            example[model] = {"maps": {k: pack(o[k][0]) for k in MEASURES}, "samples": [pack(m) for m in samples[:3]]}
    if example is not None:
        example["image"] = pack(c["image"][0])
        example["raters"] = [pack(r) for r in c["raters"]]
        if ref_var is not None:
            example["rater_variance"] = pack(ref_var)
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    t_start, cpu_start = time.perf_counter(), time.process_time()
    T.set_threads(args.threads)
    cfg = TINY if args.tiny else FULL
    shape, seed = cfg["shape"], args.seed
    cache = None if args.no_cache else (args.cache or T.default_cache_dir())

    def stamp(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.1f} s] {msg}", flush=True)

    stamp(f"study 6 (SSN vs MC dropout vs ensemble, 2D toy), {'tiny' if args.tiny else 'full'} size, seed {seed}")
    train_cases = T.toy_mix(cfg["n_train"], shape, 0.5, seed=seed + 61)
    val = T.toy_mix(cfg["n_val"], shape, 0.5, seed=seed + 62)
    groups = {
        "iid_blur": make_toy_dataset(cfg["n_test_blur"], shape=shape, blur=True, seed=seed + 63),
        "iid_clean": make_toy_dataset(cfg["n_test_clean"], shape=shape, blur=False, seed=seed + 64),
        "ood": make_toy_dataset(cfg["n_ood"], shape=shape, blur=False, shift=["intensity", "shape", "position"],
                                seed=seed + 65),
    }
    images = np.stack([c["image"] for c in train_cases]).astype(np.float32)
    raters = np.stack([c["raters"] for c in train_cases])
    training: dict[str, Any] = {}
    thresholds: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    example: dict[str, Any] = {}
    t_train = t_inf = 0.0
    for run_i in range(cfg["training_seeds"]):
        base = seed + 600 + 100 * run_i  # the data stay; initialisation, batches and dropout masks change
        t0 = time.perf_counter()
        nets = []
        for m in range(cfg["members"]):
            net, meta = train("dropout", images, raters, cfg, base + m, cache)
            nets.append(net)
            training[f"run{run_i}/dropout_member_{m}"] = meta
            stamp(f"run {run_i}, dropout network {m}: " + ("cached" if meta["cached"] else f"{meta['seconds']:.0f} s"))
        ssn, meta = train("ssn", images, raters, cfg, base + 50, cache)
        training[f"run{run_i}/ssn"] = meta
        stamp(f"run {run_i}, SSN: " + ("cached" if meta["cached"] else f"{meta['seconds']:.0f} s"))
        t_train += time.perf_counter() - t0
        t0 = time.perf_counter()
        inferers = {
            "mc_dropout": (MCDropoutInferer(num_samples=cfg["mc_samples"], keep_samples=True, seed=seed), nets[0]),
            "ensemble": (EnsembleInferer(list(nets), keep_samples=True, seed=seed), None),
            "ssn": (SSNInferer(num_samples=cfg["ssn_samples"], keep_samples=True, seed=seed), ssn),
        }
        thresholds[f"run{run_i}"] = th = {}
        for model, (inferer, net) in inferers.items():
            outs = [T.predict_case(inferer, net, c["image"]) for c in val]
            preds = [o["pred"].argmax(0) for o in outs]
            th[model] = {k: fit_threshold([o[k] for o in outs], preds) for k in MEASURES}
        for group, cases in groups.items():
            for i, c in enumerate(cases):
                keep = run_i == 0 and group == "iid_blur" and i == 0  # the figure's case
                row = evaluate_case(c, inferers, th, cfg["patch_size"], example if keep else None)
                rows.append({"run": run_i, "group": group, "index": i, "shift": c["shift"], "blur": c["blur"],
                             "object_volume": c["object_volume"], **row})
        t_inf += time.perf_counter() - t0
        stamp(f"run {run_i}: predicted {sum(len(g) for g in groups.values())} cases with {len(inferers)} models")

    result = {
        "study": "6: Stochastic Segmentation Networks vs MC dropout and a deep ensemble (ValUES) on the 2D toy set",
        "config": {**{k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}, "seed": seed,
                   "tiny": args.tiny},
        "environment": T.environment(),
        "runtime_s": {"total": time.perf_counter() - t_start, "training": t_train, "inference": t_inf,
                      "cpu": time.process_time() - cpu_start},
        "training": training,
        "thresholds": thresholds,
        "summaries": [summarise([r for r in rows if r["run"] == k]) for k in range(cfg["training_seeds"])],
        "example": example,
        "cases": rows,
    }
    write_outputs(result, Path(args.output))
    rt = result["runtime_s"]
    stamp(f"wrote {Path(args.output) / 'study6.md'}, study6.json, study6_maps.png; total {rt['total']:.0f} s "
          f"({rt['cpu']:.0f} s CPU)")
    return result


def _col(rows: list[dict[str, Any]], name: str) -> np.ndarray:
    return np.array([r.get(name, np.nan) for r in rows], dtype=np.float64)


def _nanmean(a: np.ndarray) -> float:
    return float(np.nanmean(a)) if np.isfinite(a).any() else float("nan")


def _nanstd(a: np.ndarray) -> float:
    return float(np.nanstd(a)) if np.isfinite(a).sum() > 1 else float("nan")


def _wilcoxon(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired per-case values (NaN when undefined)."""
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 2 or not np.any(a[ok] != b[ok]):
        return float("nan")
    return float(stats.wilcoxon(a[ok], b[ok]).pvalue)


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Means (and per-case spreads) of NCC, GED terms, Dice and OoD AUROC; paired tests of the AU measures."""
    blur = [r for r in rows if r["group"] == "iid_blur"]
    clean = [r for r in rows if r["group"] == "iid_clean"]
    iid = blur + clean
    ood = [r for r in rows if r["group"] == "ood"]
    out: dict[str, Any] = {"n": {"iid_blur": len(blur), "iid_clean": len(clean), "ood": len(ood)}}
    out["ncc"] = {f"{m}/{k}": {"mean": _nanmean(_col(blur, f"{m}/{k}/ncc")), "std": _nanstd(_col(blur, f"{m}/{k}/ncc"))}
                  for m in MODELS for k in MEASURES}
    au = {m: next(k for k in MEASURES if TYPES[m][k] == "AU") for m in MODELS}
    out["au_measure"] = au
    out["ncc_au_p_ssn_vs"] = {m: _wilcoxon(_col(blur, f"ssn/{au['ssn']}/ncc"), _col(blur, f"{m}/{au[m]}/ncc"))
                              for m in MODELS if m != "ssn"}
    out["ncc_au_diff_ssn_minus"] = {m: _nanmean(_col(blur, f"ssn/{au['ssn']}/ncc") - _col(blur, f"{m}/{au[m]}/ncc"))
                                    for m in MODELS if m != "ssn"}
    out["ged"] = {g: {f"{m}/{t}": _nanmean(_col(sel, f"{m}/{t}")) for m in MODELS for t in GED_TERMS}
                  for g, sel in (("iid_blur", blur), ("iid_clean", clean))}
    out["ged_p_ssn_vs"] = {m: _wilcoxon(_col(blur, "ssn/ged"), _col(blur, f"{m}/ged")) for m in MODELS if m != "ssn"}
    out["ged_diff_ssn_minus"] = {m: _nanmean(_col(blur, "ssn/ged") - _col(blur, f"{m}/ged"))
                                 for m in MODELS if m != "ssn"}
    out["dice"] = {m: {g: _nanmean(_col(sel, f"{m}/dice")) for g, sel in (("iid_blur", blur), ("iid_clean", clean),
                                                                         ("ood", ood))} for m in MODELS}
    auroc: dict[str, dict[str, float]] = {}
    for m in MODELS:
        for k in MEASURES:
            for agg in AGGREGATIONS:
                name = f"{m}/{k}/{agg}"
                res = {"3a": ood_auroc(_col(clean, name), _col(ood, name)),
                       "3b": ood_auroc(_col(iid, name), _col(ood, name))}
                for shift in ("intensity", "shape", "position"):
                    sel = [r for r in ood if r["shift"] == shift]
                    res[f"3b_{shift}"] = ood_auroc(_col(iid, name), _col(sel, name)) if sel else float("nan")
                auroc[name] = res
    out["ood_auroc"] = auroc
    return out


def write_outputs(result: dict[str, Any], out: Path, json_too: bool = True) -> None:
    """``study6.json`` (unless ``json_too`` is false), ``study6.md`` and ``study6_maps.png`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if json_too:
        T.atomic_write_json(out / "study6.json", result)
        result = T.load_json(out / "study6.json")  # render what --render-only renders: the rounded JSON
    T.atomic_write_text(out / "study6.md", render_markdown(result))
    _figure(result, out / "study6_maps.png")


# ------------------------------------------------------------------------------------------------ reporting
fmt = T.fmt


def _p(p: float) -> str:
    if p is None or not np.isfinite(p):
        return "n/a"
    return f"{p:.1e}" if p < 1e-3 else f"{p:.3f}"


def _mean(values: list[float]) -> float:
    a = np.array([v for v in values if v is not None and np.isfinite(v)], dtype=np.float64)
    return float(a.mean()) if a.size else float("nan")


def _over(summaries: list[dict[str, Any]], get: Any) -> list[float]:
    out = []
    for sm in summaries:
        try:
            out.append(float(get(sm)))
        except (KeyError, TypeError):
            out.append(float("nan"))
    return out


def _mr(values: list[float], digits: int = 2) -> str:
    """Mean over the training runs, with the range when there are several: ``0.89 [0.88, 0.90]``."""
    a = np.array(values, dtype=np.float64)
    if a.size == 1 or not np.isfinite(a).any():
        return fmt(a[0] if a.size == 1 else float("nan"), digits)
    ok = a[np.isfinite(a)]
    return f"{fmt(ok.mean(), digits)} [{fmt(ok.min(), digits)}, {fmt(ok.max(), digits)}]"


def _diffs(S: list[dict[str, Any]], what: str, model: str, digits: int) -> str:
    """``+0.01 (p = 0.003) / ...``: per run, the mean paired difference SSN - model and its Wilcoxon p-value."""
    d = _over(S, lambda sm: sm[f"{what}_diff_ssn_minus"][model])
    p = _over(S, lambda sm: sm[f"{what}_p_ssn_vs"][model])
    return " / ".join(f"{v:+.{digits}f} (p = {_p(q)})" if np.isfinite(v) else "n/a" for v, q in zip(d, p))


def render_markdown(res: dict[str, Any]) -> str:
    c, S = res["config"], res["summaries"]
    n, runs = S[0]["n"], len(S)
    rt, env = res["runtime_s"], res["environment"]
    tiny = ", tiny smoke-test size" if c["tiny"] else ""
    tr = res["training"]
    drop_s = [v.get("seconds", float("nan")) for k, v in tr.items() if "/dropout" in k]
    ssn_s = [v.get("seconds", float("nan")) for k, v in tr.items() if k.endswith("/ssn")]
    spread = f"means over the {runs} training runs [min, max]" if runs > 1 else "of one training run"
    L: list[str] = ["## Study 6: Stochastic Segmentation Networks vs MC dropout and a deep ensemble", ""]
    L.append(
        f"Generated by `docs/validation/study6_ssn.py` (seed {c['seed']}{tiny}; {rt['total']:.0f} s wall clock, "
        f"{rt['cpu']:.0f} s CPU, on {env['threads']} thread(s), of which training {rt['training']:.0f} s). "
        f"2D toy images {c['shape'][0]}x{c['shape'][1]} with 3 raters; training: {c['n_train']} i.i.d. cases, half "
        f"with a blurred border where the raters disagree; test: {n['iid_blur']} i.i.d. cases with blur, "
        f"{n['iid_clean']} without, {n['ood']} shifted cases without blur (intensity / shape / position); "
        f"thresholds of threshold aggregation fitted on {c['n_val']} validation cases. Every model is trained "
        f"{runs} time(s) on the same data with different initialisations, batches and dropout masks (ValUES: 3 "
        f"seeds); numbers are {spread}, p-values one per run."
    )
    L.append("")
    ch = "-".join(str(v) for v in c["channels"])
    L.append(
        f"**Budget.** Every network: MONAI `UNet` {ch} ({c['num_res_units']} residual unit per block), "
        f"{c['iterations']} Adam steps of batch {c['batch_size']} (lr {c['lr']:g}, cosine decay), flips and "
        "Gaussian noise, one random rater's mask per training sample and step. "
        f"MC dropout: 1 network with dropout {c['dropout']:g}, {c['mc_samples']} passes; ensemble: "
        f"{c['members']} such networks ({c['members']} x {c['iterations']} = {c['members'] * c['iterations']} "
        f"steps; member 1 is the MC-dropout network), one sample each; SSN: 1 network, the same backbone without "
        f"dropout and {c['feature_channels']} feature channels, a rank-{c['rank']} head, "
        f"`SSNLoss({c['num_mc_samples']})` after a cross-entropy warm-up of {c['iterations'] // 10} steps, "
        f"{c['ssn_samples']} latent draws. Training time per network: dropout {fmt(_mean(drop_s), 0)} s, SSN "
        f"{fmt(_mean(ssn_s), 0)} s."
    )
    L.append("")

    # (a) NCC --------------------------------------------------------------------------------------------
    L.append(f"### (a) NCC with the rater variance, {n['iid_blur']} i.i.d. cases with blur")
    L.append("")
    L.append(
        "Per-case NCC of each map with the raters' variance, averaged over the cases. Type: ValUES Appendix D (for "
        "the SSN, MI over its latent draws is the aleatoric measure)."
    )
    L.append("")
    rows = []
    for m in MODELS:
        for k in MEASURES:
            v = _over(S, lambda sm, m=m, k=k: sm["ncc"][f"{m}/{k}"]["mean"])
            rows.append([NAMES[m], SHORT[k], TYPES[m][k], _mr(v)])
    L.append(T.md_table(["model", "measure", "type", "NCC"], rows))
    L.append("")
    L.append(_ncc_sentence(S))
    L.append("")

    # (b) GED --------------------------------------------------------------------------------------------
    L.append("### (b) GED against the raters (d = 1 - IoU)")
    L.append("")
    L.append(
        "Means over the cases; GED = 2 x cross - sample diversity - rater diversity (lower GED is better; the "
        "rater diversity is the same for every model). Samples: argmax of each dropout pass / member / latent draw."
    )
    L.append("")
    rows = []
    for g, label in (("iid_blur", "with blur"), ("iid_clean", "without blur")):
        for m in MODELS:
            rows.append([label, NAMES[m]] + [_mr(_over(S, lambda sm, g=g, m=m, t=t: sm["ged"][g][f"{m}/{t}"]), 3)
                                             for t in GED_TERMS])
    L.append(T.md_table(["i.i.d. cases", "model", "GED", "cross E d(S, Y)", "sample diversity E d(S, S')",
                         "rater diversity E d(Y, Y')"], rows))
    L.append("")
    L.append(_ged_sentence(S))
    L.append("")

    # (c) OoD ----------------------------------------------------------------------------------------------
    L.append("### (c) OoD detection AUROC")
    L.append("")
    L.append(
        f"3a: {n['iid_clean']} i.i.d. cases without blur vs {n['ood']} shifted cases; 3b: all "
        f"{n['iid_blur'] + n['iid_clean']} i.i.d. cases vs the same shifted cases; per-shift columns: 3b against one "
        f"shift. Means over the {runs} run(s); the range is given for 3b."
    )
    L.append("")
    rows = []
    for m in MODELS:
        for k in MEASURES:
            for agg in AGGREGATIONS:
                def col(key: str, m: str = m, k: str = k, agg: str = agg) -> list[float]:
                    return _over(S, lambda sm: sm["ood_auroc"][f"{m}/{k}/{agg}"][key])

                rows.append([NAMES[m], SHORT[k], TYPES[m][k], agg, fmt(_mean(col("3a"))), _mr(col("3b")),
                             fmt(_mean(col("3b_intensity"))), fmt(_mean(col("3b_shape"))),
                             fmt(_mean(col("3b_position")))])
    L.append(T.md_table(["model", "measure", "type", "aggregation", "3a", "3b", "intensity", "shape", "position"],
                        rows))
    L.append("")
    L.append(_ood_sentence(S))
    L.append("")

    # (d) Dice ---------------------------------------------------------------------------------------------
    L.append("### (d) Dice")
    L.append("")
    L.append(
        "Dice of the mean prediction against the raters' majority vote (i.i.d. with blur / without blur / "
        "shifted): " + "; ".join(
            f"{NAMES[m]} " + " / ".join(fmt(_mean(_over(S, lambda sm, m=m, g=g: sm["dice"][m][g])), 3)
                                        for g in ("iid_blur", "iid_clean", "ood"))
            for m in MODELS) + "."
    )
    L.append("")
    return "\n".join(L)


def _ncc_sentence(S: list[dict[str, Any]]) -> str:
    au = S[0]["au_measure"]
    vals = {m: _mean(_over(S, lambda sm, m=m: sm["ncc"][f"{m}/{au[m]}"]["mean"])) for m in MODELS}
    best = max(vals, key=lambda m: vals[m] if np.isfinite(vals[m]) else -np.inf)
    wins = sum(max(MODELS, key=lambda m, sm=sm: sm["ncc"][f"{m}/{au[m]}"]["mean"]) == "ssn" for sm in S)
    return (
        "Aleatoric measures: " + ", ".join(f"{NAMES[m]} {SHORT[au[m]]} {fmt(vals[m])}" for m in MODELS)
        + f"; the highest on average is {NAMES[best]}'s, and the SSN's is the highest in {wins} of {len(S)} run(s). "
        "Mean per-case difference SSN minus the other model, with the two-sided paired Wilcoxon p-value (per "
        "run): " + "; ".join(f"vs {NAMES[m]} {_diffs(S, 'ncc_au', m, 2)}" for m in MODELS if m != "ssn") + "."
    )


def _ged_sentence(S: list[dict[str, Any]]) -> str:
    def mean(g: str, key: str) -> float:
        return _mean(_over(S, lambda sm: sm["ged"][g][key]))

    best = min(MODELS, key=lambda m: mean("iid_blur", f"{m}/ged"))
    best_clean = min(MODELS, key=lambda m: mean("iid_clean", f"{m}/ged"))
    wins = sum(min(MODELS, key=lambda m, sm=sm: sm["ged"]["iid_blur"][f"{m}/ged"]) == "ssn" for sm in S)
    return (
        f"On the ambiguous cases the lowest mean GED is {NAMES[best]}'s ({fmt(mean('iid_blur', f'{best}/ged'), 3)}; "
        f"the SSN's is the lowest in {wins} of {len(S)} run(s)); sample diversity against the raters' "
        f"{fmt(mean('iid_blur', 'ssn/reference_diversity'), 3)}: "
        + ", ".join(f"{NAMES[m]} {fmt(mean('iid_blur', f'{m}/sample_diversity'), 3)}" for m in MODELS)
        + ". Mean per-case GED difference SSN minus the other model, with the two-sided paired Wilcoxon p-value (per "
        "run): " + "; ".join(f"vs {NAMES[m]} {_diffs(S, 'ged', m, 3)}" for m in MODELS if m != "ssn")
        + f". Where the raters agree (no blur) the lowest GED is {NAMES[best_clean]}'s "
        f"({fmt(mean('iid_clean', f'{best_clean}/ged'), 3)}; SSN {fmt(mean('iid_clean', 'ssn/ged'), 3)}, its sample "
        f"diversity {fmt(mean('iid_clean', 'ssn/sample_diversity'), 3)} where the raters' is 0)."
    )


def _ood_sentence(S: list[dict[str, Any]]) -> str:
    by_type: dict[str, list[float]] = {"PU": [], "AU": [], "EU": []}
    by_model: dict[str, list[float]] = {m: [] for m in MODELS}
    means: dict[str, float] = {}
    for m in MODELS:
        for k in MEASURES:
            for agg in AGGREGATIONS:
                v = _mean(_over(S, lambda sm, key=f"{m}/{k}/{agg}": sm["ood_auroc"][key]["3b"]))
                means[f"{m}/{k}/{agg}"] = v
                by_type[TYPES[m][k]].append(v)
                by_model[m].append(v)
    best = max(means, key=lambda key: means[key] if np.isfinite(means[key]) else -np.inf)
    m, k, agg = best.split("/")
    return (
        "Mean 3b AUROC by type (over the three models and both aggregations): "
        + ", ".join(f"{t} {fmt(_mean(v))}" for t, v in by_type.items())
        + "; by model: " + ", ".join(f"{NAMES[mm]} {fmt(_mean(v))}" for mm, v in by_model.items())
        + f". Best score: {NAMES[m]} {SHORT[k]} ({TYPES[m][k]}, {agg}) {fmt(means[best])}."
    )


def _figure(res: dict[str, Any], path: Path) -> None:
    """One ambiguous test case: image, rater variance, each model's AU map and its first samples."""
    from matplotlib.figure import Figure

    from monai_unc.report.plots import save_png

    ex = res["example"]
    au = res["summaries"][0]["au_measure"]
    fig = Figure(figsize=(12, 6.2), dpi=90, layout="constrained")
    axes = fig.subplots(2, 6)
    top = [("image", unpack(ex["image"]), "gray"), ("rater variance", unpack(ex["rater_variance"]), "magma")]
    top += [(f"{NAMES[m]} {SHORT[au[m]]} (AU)", unpack(ex[m]["maps"][au[m]]), "magma") for m in MODELS]
    top += [("SSN EE (EU)", unpack(ex["ssn"]["maps"]["expected_entropy"]), "magma")]
    for ax, (title, img, cmap) in zip(axes[0], top):
        ax.imshow(img, cmap=cmap)
        ax.set_title(title, fontsize=9)
    bottom = [(f"rater {j + 1}", unpack(r)) for j, r in enumerate(ex["raters"])]
    bottom += [(f"SSN draw {j + 1}", unpack(smp)) for j, smp in enumerate(ex["ssn"]["samples"][:3])]
    for ax, (title, img) in zip(axes[1], bottom):
        ax.imshow(img, cmap="gray", vmin=0, vmax=1)
        ax.set_title(title, fontsize=9)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("An ambiguous toy case: rater disagreement and each model's aleatoric map (study 6)", fontsize=10)
    save_png(fig, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.render_only:
        return T.rerender(args.output, 6, write_outputs, "study6_maps.png")
    return run(args)


if __name__ == "__main__":
    main()
