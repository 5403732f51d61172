"""Validation study 2 (issue #12): Kock et al.'s temperature-calibration findings, reproduced with monai-unc.

Kock et al. (Kock, Thielke et al., "Confidence histograms for model reliability analysis and temperature
calibration", MIDL) trains segmentation networks with soft Dice, categorical cross-entropy (CCE) and Dice + CCE,
fits a scalar softmax temperature ``t`` by minimising the NLL or a differentiable ECE, and reports ``t`` and the
test-set NLL, ECE and Brier score before and after (Table 2). Its headline findings: Dice-trained models are
overconfident and need ``t`` well above 1 (1.7 to 5.2), CCE models need ``t`` near 1 (0.73 to 1.56), Dice + CCE
lies in between (2.3 on KiTS), and calibration lowers NLL and ECE, most for Dice models.

Protocol here (docs/data.md):

- task: the MNI152 2009 template (nilearn, 2 mm, 99 x 117 x 95), 3 classes (background + CSF, grey matter,
  white matter); one brain, so "cases" are regions and perturbed copies of it;
- training: :func:`monai_unc.data.training.train_tissue_model` (the example UNet of
  :func:`monai_unc.data.model.build_example_network`, patches of the left hemisphere with affine, bias field,
  contrast, blur and noise augmentation, Adam, cosine schedule) three times, with ``loss="dice"`` (MONAI soft
  Dice over all three classes), ``"ce"`` and ``"dice_ce"``, the same seed, iterations and batches for each;
- prediction: logits of the whole volume with the 64^3 sliding window of ``hemisphere_dice``;
- calibration split: the held-out right hemisphere (world x >= 0) is cut into axial slabs of ``--slab`` slices
  (default 8 = 16 mm); even slabs are the calibration voxels on which ``t`` is fitted, odd slabs the evaluation
  voxels on which every number is reported. Neither was seen in training. For comparison, ``t`` is also fitted
  on the training (left) hemisphere and evaluated on the same odd slabs;
- temperature: :class:`monai_unc.temperature.TemperatureScaler` with Kock et al.'s settings (RMSprop, lr 0.05,
  start at t = 2, <= 1000 steps, tol 1e-7; ECE loss with 20 bins and bins of < 50 voxels ignored);
- metrics (:mod:`monai_unc.metrics.calibration`, one pooled :class:`ConfidenceHistogram` per condition): NLL
  (nats), Brier (sum over labels, range [0, 2]), top-label ECE and all-label ECE with Kock et al.'s setting (20 bins,
  bins of < 50 voxels ignored) and with the package default (15 bins, no minimum);
- shift: the network is also run on perturbed copies (``monai_unc.data.perturb``: noise, bias field, contrast,
  blur, resolution loss at ``--severity``); the clean-fitted ``t`` is applied to them and compared with the ``t``
  fitted (NLL) on the even slabs of the shifted copy itself ("oracle").

Outputs (written atomically to ``--output``): ``study2.json`` (all numbers and the configuration), ``study2.md``
(tables, the paper's numbers beside ours, agreement sentences generated from the numbers) and the all-label
reliability diagrams ``study2_reliability_<loss>.png`` (before and after calibration).

Run (one thread: training is ~0.35 s per iteration, ~140 s per network, ~8.5 minutes in all on an idle core; 818 s
measured with the 2 cores shared by other jobs. ``--tiny``: ~25 s)::

    OMP_NUM_THREADS=1 python docs/validation/study2_temperature.py [--iterations 400] [--seed 0] [--tiny]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from monai.inferers import SlidingWindowInferer

from monai_unc.data import PERTURBATIONS, TISSUE_CLASSES, load_mni152_tissue, perturb
from monai_unc.data.training import ROI, dice_per_class, hemisphere_dice, train_tissue_model
from monai_unc.io import atomic_savefig, atomic_write_text
from monai_unc.metrics.calibration import ConfidenceHistogram, all_label_ece, brier, ece, nll
from monai_unc.report.reliability import plot_reliability_diagram
from monai_unc.temperature import TemperatureScaler

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results"

#: our training losses -> the paper's names
LOSSES = {"dice": "Dice", "ce": "CCE", "dice_ce": "Dice+CCE"}

#: Kock et al., Table 2 (test set, after calibration): (task, training, TS loss, t, NLL, ECE, Brier)
PAPER_TABLE2: tuple[tuple[str, str, str, float | None, float, float, float], ...] = (
    ("Liver (5 case baseline)", "Dice", "none", None, 0.052, 0.006, 0.013),
    ("Liver (5 case baseline)", "Dice", "NLL", 1.852, 0.030, 0.003, 0.009),
    ("Liver (5 case baseline)", "Dice", "ECE", 1.736, 0.030, 0.001, 0.009),
    ("Liver (5 case baseline)", "CCE", "none", None, 0.023, 0.004, 0.010),
    ("Liver (5 case baseline)", "CCE", "NLL", 0.907, 0.028, 0.005, 0.011),
    ("Liver (5 case baseline)", "CCE", "ECE", 0.922, 0.023, 0.004, 0.010),
    ("Liver (fully trained)", "Dice", "none", None, 0.040, 0.004, 0.009),
    ("Liver (fully trained)", "Dice", "NLL", 4.008, 0.012, 0.002, 0.004),
    ("Liver (fully trained)", "Dice", "ECE", 3.865, 0.114, 0.102, 0.027),
    ("HA (weighted)", "Dice", "none", None, 0.207, 0.022, 0.044),
    ("HA (weighted)", "Dice", "NLL", 3.441, 0.127, 0.006, 0.042),
    ("HA (weighted)", "Dice", "ECE", 3.270, 0.144, 0.017, 0.043),
    ("HA (weighted)", "CCE", "none", None, 0.028, 0.002, 0.016),
    ("HA (weighted)", "CCE", "NLL", 0.733, 0.029, 0.004, 0.017),
    ("HA (weighted)", "CCE", "ECE", 0.734, 0.055, 0.007, 0.031),
    ("KiTS", "Dice", "none", None, 0.021, 0.002, 0.004),
    ("KiTS", "Dice", "NLL", 5.199, 0.012, 0.001, 0.003),
    ("KiTS", "Dice", "ECE", 5.034, 0.012, 0.001, 0.003),
    ("KiTS", "Dice w/ bg", "none", None, 0.025, 0.002, 0.005),
    ("KiTS", "Dice w/ bg", "NLL", 3.888, 0.016, 0.002, 0.004),
    ("KiTS", "Dice w/ bg", "ECE", 3.821, 0.016, 0.002, 0.004),
    ("KiTS", "Dice+CCE", "none", None, 0.018, 0.002, 0.004),
    ("KiTS", "Dice+CCE", "NLL", 2.326, 0.011, 0.000, 0.003),
    ("KiTS", "Dice+CCE", "ECE", 2.293, 0.011, 0.000, 0.003),
    ("KiTS", "CCE", "none", None, 0.015, 0.002, 0.004),
    ("KiTS", "CCE", "NLL", 1.562, 0.011, 0.001, 0.004),
    ("KiTS", "CCE", "ECE", 1.475, 0.012, 0.001, 0.004),
)

#: ECE settings: Kock et al. (20 bins as its ECE loss, bins with < 50 voxels ignored) and the package default
PAPER_BINS, PAPER_MIN_COUNT = 20, 50
DEFAULT_BINS, DEFAULT_MIN_COUNT = 15, 0


def paper_rows(training: str, task: str | None = None) -> list[dict[str, Any]]:
    """Rows of :data:`PAPER_TABLE2` for one training loss (the paper's name), optionally one task."""
    keys = ("task", "training", "ts_loss", "t", "nll", "ece", "brier")
    return [dict(zip(keys, r)) for r in PAPER_TABLE2 if r[1] == training and (task is None or r[0] == task)]


def paper_t_range(training: str, ts_loss: str = "NLL") -> tuple[float, float]:
    """Smallest and largest fitted temperature in the paper's Table 2 for a training loss (``Dice`` includes
    ``Dice w/ bg``)."""
    names = ("Dice", "Dice w/ bg") if training == "Dice" else (training,)
    ts = [r[3] for r in PAPER_TABLE2 if r[1] in names and r[2] == ts_loss and r[3] is not None]
    return float(min(ts)), float(max(ts))


# ------------------------------------------------------------------------------------------------------------------
# data, splits, inference
# ------------------------------------------------------------------------------------------------------------------
def make_splits(data: dict[str, Any], slab: int, subsample: int = 1) -> dict[str, np.ndarray]:
    """Boolean voxel masks ``(X, Y, Z)``: ``train`` (left hemisphere), ``cal`` / ``eval`` (even / odd axial slabs of
    ``slab`` slices of the right hemisphere); ``subsample > 1`` keeps every ``subsample``-th voxel (``--tiny``)."""
    if slab < 1:
        raise ValueError(f"slab must be a positive number of slices, got {slab}")
    if subsample < 1:
        raise ValueError(f"subsample must be a positive integer, got {subsample}")
    right = np.asarray(data["right"], dtype=bool)
    even = ((np.arange(right.shape[2]) // slab) % 2 == 0)[None, None, :]
    keep = (np.arange(right.size) % subsample == 0).reshape(right.shape)
    splits = {
        "train": np.asarray(data["left"], dtype=bool) & keep,
        "cal": right & even & keep,
        "eval": right & ~even & keep,
    }
    for name, m in splits.items():
        if not m.any():
            raise ValueError(f"slab={slab} leaves the {name!r} split empty")
    return splits


def predict_logits(net: torch.nn.Module, image: np.ndarray) -> torch.Tensor:
    """Logits ``(C, X, Y, Z)`` float32 of a ``(1, X, Y, Z)`` image, with the example's 64^3 sliding window."""
    net.eval()
    with torch.no_grad():
        z = SlidingWindowInferer(ROI, sw_batch_size=2, overlap=0.25)(torch.from_numpy(np.asarray(image)[None]), net)
    return z[0].float()


def masked(logits: torch.Tensor, label: torch.Tensor, mask: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Voxels of ``mask`` as a one-case batch: logits ``(1, C, n)``, labels ``(1, n)``."""
    m = torch.from_numpy(mask)
    return logits[:, m][None], label[m][None]


def fit_temperature(z: torch.Tensor, y: torch.Tensor, loss: str, max_steps: int) -> dict[str, Any]:
    """Kock et al.'s scalar temperature fit (TemperatureScaler defaults) on ``(1, C, n)`` logits; ``t`` and its
    trace."""
    start = time.perf_counter()
    ts = TemperatureScaler(mode="scalar", loss=loss, max_steps=max_steps).fit(z, y)
    return {
        "t": float(ts.temperature.item()),
        "loss": float(min(h["loss"] for h in ts.history)),
        "steps": len(ts.history),
        "converged": bool(ts.converged),
        "seconds": round(time.perf_counter() - start, 2),
    }


def histogram(z: torch.Tensor, y: torch.Tensor, t: float) -> ConfidenceHistogram:
    """Pooled confidence histogram of ``softmax(z / t)`` for ``(1, C, n)`` logits and ``(1, n)`` labels."""
    return ConfidenceHistogram(z.shape[1], per_case=False, uncertainty=False).update(torch.softmax(z / t, dim=1), y)


def metrics(hist: ConfidenceHistogram) -> dict[str, float]:
    """NLL, Brier, top-label and all-label ECE (Kock et al.'s 20 bins / >= 50 voxels, and the package default)."""
    return {
        "nll": float(nll(hist)),
        "brier": float(brier(hist)),
        "ece": float(ece(hist, n_bins=PAPER_BINS, min_bin_count=PAPER_MIN_COUNT)),
        "ece_default": float(ece(hist, n_bins=DEFAULT_BINS, min_bin_count=DEFAULT_MIN_COUNT)),
        "all_label_ece": float(all_label_ece(hist, n_bins=PAPER_BINS, min_bin_count=PAPER_MIN_COUNT)),
        "all_label_ece_default": float(all_label_ece(hist, n_bins=DEFAULT_BINS, min_bin_count=DEFAULT_MIN_COUNT)),
    }


# ------------------------------------------------------------------------------------------------------------------
# output helpers
# ------------------------------------------------------------------------------------------------------------------
def _save_figure(fig: Figure, path: Path) -> Path:
    return atomic_savefig(fig, path, dpi=110, bbox_inches="tight", format="png")


def plot_reliability(hists: dict[str, ConfidenceHistogram], temps: dict[str, float], title: str, path: Path) -> Path:
    """All-label reliability diagrams (Kock et al.'s 20 bins, >= 50 voxels per bin) side by side, one per condition."""
    fig = Figure(figsize=(4.2 * len(hists), 4.4))
    FigureCanvasAgg(fig)
    for i, (name, hist) in enumerate(hists.items()):
        ax = fig.add_subplot(1, len(hists), i + 1)
        value = all_label_ece(hist, n_bins=PAPER_BINS, min_bin_count=PAPER_MIN_COUNT)
        plot_reliability_diagram(
            hist,
            kind="all_label",
            n_bins=PAPER_BINS,
            min_bin_count=PAPER_MIN_COUNT,
            ax=ax,
            title=f"{name}, t = {temps[name]:.3f}\nall-label ECE {value:.4f}",
        )
    fig.suptitle(title, fontsize=10, y=1.04)
    return _save_figure(fig, path)


def _f(v: float | None, nd: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan"
    return f"{v:.{nd}f}"


def _pct(new: float, old: float) -> float:
    return 100.0 * (new - old) / old if old else float("nan")


# ------------------------------------------------------------------------------------------------------------------
# agreement sentences (generated from the numbers)
# ------------------------------------------------------------------------------------------------------------------
def agreement(models: dict[str, dict[str, Any]]) -> dict[str, str]:
    """One sentence per finding of Kock et al., comparing our fitted temperatures and metrics with Table 2."""
    out: dict[str, str] = {}
    t = {k: m["temperatures"]["heldout"]["nll"]["t"] for k, m in models.items()}
    if "dice" in t:
        lo, hi = paper_t_range("Dice")
        v = t["dice"]
        if v >= lo:
            verdict = f"agrees: t = {v:.3f} lies {'within' if v <= hi else 'above'} the paper's Dice range"
        elif v > 1.1:
            verdict = (
                f"agrees only in direction: t = {v:.3f} > 1 (the Dice model is overconfident) but below the paper's "
                f"smallest Dice temperature"
            )
        else:
            verdict = f"disagrees: t = {v:.3f} is not above 1"
        out["dice_t"] = f"Dice-trained model needs t well above 1 (paper, NLL fits: {lo:.3f} to {hi:.3f}) — {verdict}."
    if "ce" in t:
        lo, hi = paper_t_range("CCE")
        v = t["ce"]
        inside = lo <= v <= hi
        out["ce_t"] = f"CE-trained model needs t near 1 (paper, NLL fits: {lo:.3f} to {hi:.3f}) — " + (
            f"agrees: t = {v:.3f} lies within the paper's CCE range."
            if inside
            else f"disagrees: t = {v:.3f} lies outside the paper's CCE range."
        )
    if {"dice", "ce", "dice_ce"} <= set(t):
        kd, kc, kdc = (paper_rows(n, "KiTS")[1]["t"] for n in ("Dice", "CCE", "Dice+CCE"))
        ordered = t["dice"] > t["dice_ce"] > t["ce"]
        top = t["dice"] > max(t["dice_ce"], t["ce"])
        verdict = (
            "agrees: Dice > Dice+CE > CE"
            if ordered
            else ("agrees in part: Dice needs the largest t, but Dice+CE does not lie between" if top else "disagrees")
        )
        out["ordering"] = (
            f"Ordering of temperatures (paper, KiTS NLL fits: Dice {kd:.3f} > Dice+CCE {kdc:.3f} > CCE {kc:.3f}; "
            f"ours: Dice {t['dice']:.3f}, Dice+CE {t['dice_ce']:.3f}, CE {t['ce']:.3f}) — {verdict}."
        )
    for key, m in models.items():
        name = LOSSES[key]
        before, after_nll, after_ece = (m["clean"][c] for c in ("none", "nll", "ece"))
        kits = {r["ts_loss"]: r for r in paper_rows(name, "KiTS")}
        d_nll, d_ece = _pct(after_nll["nll"], before["nll"]), _pct(after_ece["ece"], before["ece"])
        lowered = after_nll["nll"] < before["nll"] and after_ece["ece"] < before["ece"]
        if lowered:
            verdict = "agrees: both are lower after calibration"
        else:
            worse = [
                n
                for n, ok in (("NLL", after_nll["nll"] < before["nll"]), ("ECE", after_ece["ece"] < before["ece"]))
                if not ok
            ]
            verdict = f"disagrees: calibration did not lower {' and '.join(worse)} on the evaluation slabs"
            t_nll = m["temperatures"]["heldout"]["nll"]["t"]
            if abs(t_nll - 1.0) < 0.1:
                verdict += (
                    f" (t = {t_nll:.3f} is within 0.1 of 1: the model was already close to calibrated, so the "
                    "calibration slabs' t had little to correct and its small mismatch with the evaluation slabs shows)"
                )
        out[f"calibration_{key}"] = (
            f"{name}: temperature scaling lowers NLL and ECE (paper, KiTS {name}: NLL {kits['none']['nll']:.3f} -> "
            f"{kits['NLL']['nll']:.3f} with the NLL fit, ECE {kits['none']['ece']:.3f} -> {kits['ECE']['ece']:.3f} "
            f"with the ECE fit; ours on the evaluation slabs: NLL {before['nll']:.4f} -> {after_nll['nll']:.4f} "
            f"({d_nll:+.0f} %), ECE {before['ece']:.4f} -> {after_ece['ece']:.4f} ({d_ece:+.0f} %)) — {verdict}."
        )
    ratios = {
        k: m["temperatures"]["heldout"]["ece"]["t"] / m["temperatures"]["heldout"]["nll"]["t"]
        for k, m in models.items()
    }
    paper_ratios = []
    for i in range(0, len(PAPER_TABLE2), 3):
        nll_row, ece_row = PAPER_TABLE2[i + 1], PAPER_TABLE2[i + 2]
        if nll_row[3] and ece_row[3]:
            paper_ratios.append(ece_row[3] / nll_row[3])
    lo, hi = min(paper_ratios), max(paper_ratios)
    ours = ", ".join(f"{LOSSES[k]} {r:.3f}" for k, r in ratios.items())
    outside = [LOSSES[k] for k, r in ratios.items() if not lo - 0.02 <= r <= hi + 0.02]
    out["t_ece_vs_nll"] = (
        f"ECE- and NLL-fitted temperatures are close (paper: t_ECE / t_NLL from {lo:.3f} to {hi:.3f}; ours: {ours}) — "
        + (
            "agrees."
            if not outside
            else f"disagrees for {', '.join(outside)} (outside the paper's ratio range widened by 0.02 on each side)."
        )
    )
    return out


def shift_sentences(models: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Does the clean-fitted temperature transfer to shifted copies? One sentence per model."""
    out = {}
    for key, m in models.items():
        shifts = m.get("shifts", {})
        if not shifts:
            continue
        t_clean = m["temperatures"]["heldout"]["nll"]["t"]
        better = sum(s["nll"]["nll"] < s["none"]["nll"] for s in shifts.values())
        t_or = [s["t_oracle_nll"] for s in shifts.values()]
        # excess NLL over the per-shift optimum (t fitted on the shifted copy's calibration slabs)
        excess_one = float(np.mean([s["none"]["nll"] - s["oracle"]["nll"] for s in shifts.values()]))
        excess_clean = float(np.mean([s["nll"]["nll"] - s["oracle"]["nll"] for s in shifts.values()]))
        ece_better = sum(s["nll"]["ece"] < s["none"]["ece"] for s in shifts.values())
        direction = (
            "above"
            if all(s["t_oracle_nll"] > t_clean for s in shifts.values())
            else ("below" if all(s["t_oracle_nll"] < t_clean for s in shifts.values()) else "on both sides of")
        )
        out[key] = (
            f"{LOSSES[key]}: the clean-fitted t = {t_clean:.3f} lowered NLL on {better} and ECE on {ece_better} of "
            f"{len(shifts)} shifted copies; the t fitted on each shifted copy ranged from {min(t_or):.3f} to "
            f"{max(t_or):.3f} ({direction} the clean t); mean excess NLL over that per-shift optimum: "
            f"{excess_one:.4f} nats at t = 1, {excess_clean:.4f} at the clean t."
        )
    return out


# ------------------------------------------------------------------------------------------------------------------
# markdown
# ------------------------------------------------------------------------------------------------------------------
def render_markdown(res: dict[str, Any]) -> str:
    cfg, models = res["config"], res["models"]
    lines = [
        "## Study 2 — temperature calibration by training loss (Kock et al.)",
        "",
        f"Protocol: MNI152 2009 tissue task (2 mm, 3 classes). Each network ({', '.join(LOSSES[k] for k in models)}) "
        f"is the example UNet trained with `train_tissue_model` on the left hemisphere for {cfg['iterations']} "
        f"iterations (batch 2, same seed {cfg['seed']} for all). The held-out right hemisphere is cut into "
        f"{cfg['slab']}-slice axial slabs: t is fitted on the even slabs ({res['voxels']['cal']} voxels) and every "
        f'metric is reported on the odd slabs ({res["voxels"]["eval"]} voxels); the rows marked "train hemi." fit t '
        f"on the training (left) hemisphere instead ({res['voxels']['train']} voxels). TemperatureScaler with "
        "Kock et al.'s settings (RMSprop, lr 0.05, t0 = 2, <= "
        f"{cfg['max_steps']} steps). ECE and all-label ECE: 20 bins, bins with < 50 voxels ignored (Kock et al.); "
        '"(def.)": the package default, 15 bins, no minimum. NLL in nats; Brier summed over labels. '
        "Paper: Kock et al. Table 2, KiTS (the one task with 3 labels and all three losses); its Brier may be "
        "normalised differently, and its absolute values (CT volumes, mostly easy background) are not comparable "
        "with ours — compare directions and the size of t.",
        "",
    ]
    if cfg["tiny"]:
        lines += ["**`--tiny` run: networks barely trained; the numbers only check the pipeline.**", ""]
    lines += [
        "### Fitted temperatures",
        "",
        "| training | ours t (NLL) | ours t (ECE) | ours t (NLL, train hemi.) | ours t (ECE, train hemi.) "
        "| paper KiTS t (NLL / ECE) | paper, all tasks, t (NLL) | Dice GM / WM (eval slabs) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, m in models.items():
        name = LOSSES[key]
        th, tt = m["temperatures"]["heldout"], m["temperatures"]["train_hemisphere"]
        kits = {r["ts_loss"]: r for r in paper_rows(name, "KiTS")}
        lo, hi = paper_t_range(name)
        rng = f"{lo:.3f}" if lo == hi else f"{lo:.3f} – {hi:.3f}"
        dice = m["dice_eval"]
        lines.append(
            f"| {name} | {th['nll']['t']:.3f} | {th['ece']['t']:.3f} | {tt['nll']['t']:.3f} | {tt['ece']['t']:.3f} "
            f"| {kits['NLL']['t']:.3f} / {kits['ECE']['t']:.3f} | {rng} "
            f"| {dice[TISSUE_CLASSES[1]]:.3f} / {dice[TISSUE_CLASSES[2]]:.3f} |"
        )
    lines += [
        "",
        *[f"- {s}" for k, s in res["agreement"].items() if k in ("dice_t", "ce_t", "ordering", "t_ece_vs_nll")],
    ]
    lines += [
        "",
        "### Before and after calibration (evaluation slabs)",
        "",
        "| training | TS loss | ours t | NLL | ECE | ECE (def.) | all-label ECE | all-label ECE (def.) | Brier "
        "| paper t | paper NLL | paper ECE | paper Brier |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, m in models.items():
        name = LOSSES[key]
        kits = {r["ts_loss"]: r for r in paper_rows(name, "KiTS")}
        for cond, label, paper_key in (
            ("none", "none", "none"),
            ("nll", "NLL", "NLL"),
            ("ece", "ECE", "ECE"),
            ("nll_train", "NLL (train hemi.)", None),
            ("ece_train", "ECE (train hemi.)", None),
        ):
            r = m["clean"][cond]
            p = kits.get(paper_key) if paper_key else None
            paper_cells = (
                f"{_f(p['t'], 3)} | {p['nll']:.3f} | {p['ece']:.3f} | {p['brier']:.3f}" if p else "— | — | — | —"
            )
            lines.append(
                f"| {name} | {label} | {r['t']:.3f} | {_f(r['nll'])} | {_f(r['ece'])} | {_f(r['ece_default'])} "
                f"| {_f(r['all_label_ece'])} | {_f(r['all_label_ece_default'])} | {_f(r['brier'])} | {paper_cells} |"
            )
    lines += ["", *[f"- {s}" for k, s in res["agreement"].items() if k.startswith("calibration_")]]
    if any(m.get("shifts") for m in models.values()):
        lines += [
            "",
            f"### Transfer to shifted copies (severity {cfg['severity']:g}, evaluation slabs)",
            "",
            "Paper: no numbers — Kock et al. reports that the optimal temperature varies between cases and between "
            "models of the same loss (Sec. 3, Appendix B) and that typical temperatures cannot be suggested per "
            "loss or task (Sec. 4). Columns: t = 1; the t fitted on the clean calibration slabs (NLL); the t fitted "
            '(NLL) on the even slabs of the shifted copy itself ("oracle").',
            "",
            "| training | shift | NLL t=1 | NLL clean t | NLL oracle t | oracle t | ECE t=1 | ECE clean t "
            "| all-label ECE t=1 | all-label ECE clean t |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for key, m in models.items():
            for kind, s in m.get("shifts", {}).items():
                lines.append(
                    f"| {LOSSES[key]} | {kind} | {_f(s['none']['nll'])} | {_f(s['nll']['nll'])} "
                    f"| {_f(s['oracle']['nll'])} | {s['t_oracle_nll']:.3f} | {_f(s['none']['ece'])} "
                    f"| {_f(s['nll']['ece'])} | {_f(s['none']['all_label_ece'])} | {_f(s['nll']['all_label_ece'])} |"
                )
        lines += ["", *[f"- {s}" for s in res["shift_agreement"].values()]]
    lines += [
        "",
        "All-label reliability diagrams (evaluation slabs, 20 bins, >= 50 voxels per bin) before and after: "
        + ", ".join(f"`{Path(p).name}`" for p in res["figures"]),
        "",
        f"Run: `{res['command']}` — {res['runtime_seconds']:.0f} s with {cfg['threads']} torch thread(s).",
        "",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="results folder (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of training and perturbations (default 0)")
    p.add_argument(
        "--tiny", action="store_true", help="smoke test: 1 iteration, 1 shift, 10 fit steps, 1/16 of the voxels"
    )
    p.add_argument("--iterations", type=int, default=None, help="training iterations per network (default 400)")
    p.add_argument("--losses", nargs="+", choices=tuple(LOSSES), default=list(LOSSES), help="training losses")
    p.add_argument(
        "--shifts", nargs="*", choices=PERTURBATIONS, default=None, help="perturbations (default all 5; tiny: noise)"
    )
    p.add_argument("--severity", type=float, default=3.0, help="severity of the perturbed copies, 0-5 (default 3)")
    p.add_argument("--max-steps", type=int, default=None, help="temperature fit steps at most (default 1000)")
    p.add_argument("--slab", type=int, default=8, help="axial slab thickness (slices) of the cal/eval split")
    p.add_argument(
        "--subsample", type=int, default=None, help="keep every N-th voxel of each split (default 1; tiny 16)"
    )
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite study2.md (and the agreement sentences in study2.json) from the study2.json in --output",
    )
    args = p.parse_args(argv)
    if args.iterations is None:
        args.iterations = 1 if args.tiny else 400  # --tiny checks the pipeline: one step of each network
    if args.shifts is None:
        args.shifts = ["noise"] if args.tiny else list(PERTURBATIONS)
    if args.max_steps is None:
        args.max_steps = 10 if args.tiny else 1000
    if args.subsample is None:
        args.subsample = 16 if args.tiny else 1
    if args.subsample < 1:
        p.error("--subsample must be >= 1")
    if args.iterations < 1:
        p.error("--iterations must be >= 1")
    if args.max_steps < 1:
        p.error("--max-steps must be >= 1")
    if not 0.0 <= args.severity <= 5.0:
        p.error("--severity must be in [0, 5]")
    if args.threads < 1:
        p.error("--threads must be >= 1")
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[study2 {time.perf_counter() - start:6.1f} s] {msg}", flush=True)

    torch.set_num_threads(args.threads)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = load_mni152_tissue(resolution=2)
    splits = make_splits(data, args.slab, args.subsample)
    label = torch.from_numpy(data["label"][0])
    shifted_images = {
        kind: perturb(data["image"], kind, args.severity, seed=args.seed + 1 + i) for i, kind in enumerate(args.shifts)
    }
    models: dict[str, dict[str, Any]] = {}
    figures = []
    for key in args.losses:
        log(f"training {LOSSES[key]} ({args.iterations} iterations)")
        net, record = train_tissue_model(
            None, iterations=args.iterations, seed=args.seed, progress=False, loss=key, evaluate=False
        )
        z = predict_logits(net, data["image"])
        dice = hemisphere_dice(net, data, logits=z)  # the record's Dice from these logits: one prediction, not two
        record.update(dice_right_heldout=dice["right"], dice_left_train=dice["left"])
        log(f"  trained in {record['train_seconds']} s; right-hemisphere Dice {record['dice_right_heldout']}")
        pred = z.argmax(0).numpy()
        dice_eval = dict(zip(TISSUE_CLASSES[1:], dice_per_class(pred, data["label"][0], 3, splits["eval"])))
        z_cal, y_cal = masked(z, label, splits["cal"])
        z_tr, y_tr = masked(z, label, splits["train"])
        z_ev, y_ev = masked(z, label, splits["eval"])
        temps: dict[str, dict[str, Any]] = {"heldout": {}, "train_hemisphere": {}}
        for ts_loss in ("nll", "ece"):
            temps["heldout"][ts_loss] = fit_temperature(z_cal, y_cal, ts_loss, args.max_steps)
            temps["train_hemisphere"][ts_loss] = fit_temperature(z_tr, y_tr, ts_loss, args.max_steps)
        log(
            "  t (held-out slabs) NLL {:.3f} ECE {:.3f}; t (train hemisphere) NLL {:.3f} ECE {:.3f}".format(
                temps["heldout"]["nll"]["t"],
                temps["heldout"]["ece"]["t"],
                temps["train_hemisphere"]["nll"]["t"],
                temps["train_hemisphere"]["ece"]["t"],
            )
        )
        conds = {
            "none": 1.0,
            "nll": temps["heldout"]["nll"]["t"],
            "ece": temps["heldout"]["ece"]["t"],
            "nll_train": temps["train_hemisphere"]["nll"]["t"],
            "ece_train": temps["train_hemisphere"]["ece"]["t"],
        }
        hists = {c: histogram(z_ev, y_ev, t) for c, t in conds.items()}
        clean = {c: {"t": conds[c], **metrics(h)} for c, h in hists.items()}
        log(
            f"  eval NLL {clean['none']['nll']:.4f} -> {clean['nll']['nll']:.4f}; "
            f"ECE {clean['none']['ece']:.4f} -> {clean['ece']['ece']:.4f}"
        )
        fig_path = out_dir / f"study2_reliability_{key}.png"
        plot_reliability(
            {"before": hists["none"], "after (NLL fit)": hists["nll"], "after (ECE fit)": hists["ece"]},
            {"before": 1.0, "after (NLL fit)": conds["nll"], "after (ECE fit)": conds["ece"]},
            f"{LOSSES[key]}-trained UNet, MNI152 right-hemisphere evaluation slabs",
            fig_path,
        )
        figures.append(str(fig_path))
        shifts: dict[str, dict[str, Any]] = {}
        for kind, image in shifted_images.items():
            zs = predict_logits(net, image)
            zs_cal, ys_cal = masked(zs, label, splits["cal"])
            zs_ev, ys_ev = masked(zs, label, splits["eval"])
            oracle = fit_temperature(zs_cal, ys_cal, "nll", args.max_steps)
            shifts[kind] = {
                "severity": args.severity,
                "t_oracle_nll": oracle["t"],
                "none": {"t": 1.0, **metrics(histogram(zs_ev, ys_ev, 1.0))},
                "nll": {"t": conds["nll"], **metrics(histogram(zs_ev, ys_ev, conds["nll"]))},
                "oracle": {"t": oracle["t"], **metrics(histogram(zs_ev, ys_ev, oracle["t"]))},
            }
            log(
                f"  shift {kind}: NLL t=1 {shifts[kind]['none']['nll']:.4f}, clean t {shifts[kind]['nll']['nll']:.4f}, "
                f"oracle t {oracle['t']:.3f} {shifts[kind]['oracle']['nll']:.4f}"
            )
        models[key] = {
            "paper_training": LOSSES[key],
            "train_record": {k: v for k, v in record.items() if k != "network"},
            "dice_eval": dice_eval,
            "temperatures": temps,
            "clean": clean,
            "shifts": shifts,
        }
    result: dict[str, Any] = {
        "study": "2: Kock et al., confidence histograms and temperature calibration",
        "config": {
            "seed": args.seed,
            "tiny": bool(args.tiny),
            "iterations": args.iterations,
            "losses": list(args.losses),
            "shifts": list(args.shifts),
            "severity": args.severity,
            "max_steps": args.max_steps,
            "slab": args.slab,
            "subsample": args.subsample,
            "threads": args.threads,
            "ece_paper": {"n_bins": PAPER_BINS, "min_bin_count": PAPER_MIN_COUNT},
            "ece_default": {"n_bins": DEFAULT_BINS, "min_bin_count": DEFAULT_MIN_COUNT},
            "calibration_split": f"even {args.slab}-slice axial slabs of the right hemisphere (world x >= 0)",
            "evaluation_split": f"odd {args.slab}-slice axial slabs of the right hemisphere",
        },
        "voxels": {k: int(v.sum()) for k, v in splits.items()},
        "paper_table2": [
            dict(zip(("task", "training", "ts_loss", "t", "nll", "ece", "brier"), r)) for r in PAPER_TABLE2
        ],
        "models": models,
        "figures": [Path(f).name for f in figures],
        "command": " ".join(
            [
                "python docs/validation/study2_temperature.py",
                *(sys.argv[1:] if getattr(args, "argv", None) is None else args.argv),
            ]
        ),
    }
    result["agreement"] = agreement(models) if models else {}
    result["shift_agreement"] = shift_sentences(models)
    result["runtime_seconds"] = round(time.perf_counter() - start, 1)
    atomic_write_text(out_dir / "study2.json", json.dumps(result, indent=2) + "\n")
    atomic_write_text(out_dir / "study2.md", render_markdown(result))
    log(f"wrote {out_dir / 'study2.md'}, study2.json, {len(figures)} figure(s); {result['runtime_seconds']} s")
    return result


def render_only(out_dir: Path) -> dict[str, Any]:
    """Regenerate the agreement sentences and ``study2.md`` from a saved ``study2.json`` (no training)."""
    path = Path(out_dir) / "study2.json"
    if not path.is_file():
        raise FileNotFoundError(f"--render-only needs {path}; run the study first")
    result = json.loads(path.read_text())
    result["agreement"] = agreement(result["models"]) if result["models"] else {}
    result["shift_agreement"] = shift_sentences(result["models"])
    atomic_write_text(path, json.dumps(result, indent=2) + "\n")
    atomic_write_text(Path(out_dir) / "study2.md", render_markdown(result))
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the study; ``argv`` as on the command line (``None``: ``sys.argv[1:]``). Returns the result dict."""
    args = parse_args(argv)
    if args.render_only:
        return render_only(args.output)
    args.argv = None if argv is None else list(argv)
    return run(args)


if __name__ == "__main__":
    main()
