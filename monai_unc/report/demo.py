"""``monai-unc demo``: the whole QC workflow on the shipped MNI152 example, in a few minutes on a laptop CPU.

Cohort (shared/DESIGN.md, "Example data protocol"): the example network was trained on the *left* hemisphere of
the MNI152 2009 template (nilearn, 2 mm); every demo case is the held-out *right* hemisphere (world x >= 0,
cropped, affine kept), so no case overlaps the training data. The cases:

- in distribution (``shift = none``): the template as is, and two copies with a contrast change (gamma 0.85,
  1.2) and a little noise inside the range of the training augmentation;
- shifted copies beyond that range, with the shift recorded as the label: Gaussian noise (std 0.10, 0.16 of
  the [0, 1] intensity range; training used <= 0.05), a multiplicative bias field (``exp`` of a smooth
  quadratic polynomial with coefficients 0.7, 1.1; training <= 0.3), contrast (gamma 0.45, 2.6; training
  0.7-1.5), blur (Gaussian, 2.5 voxels; training <= 1) and a resolution change (every third axial slice kept,
  linearly interpolated back).

The workflow then runs the same functions as the sub-commands: :func:`monai_unc.predict.predict_cases`
(``infer``: MC dropout, the network's own dropout), :func:`monai_unc.report.cohort.run_evaluate` (``evaluate``)
and :func:`monai_unc.report.html.build_report` (``report``). Every step is resumable: running the demo again
reuses finished cases.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .nifti import atomic_write_text, save_nifti

__all__ = ["DEMO_SHIFTS", "make_demo_cohort", "run_demo", "write_toy_cohort"]

#: (case id, shift label, perturbation, parameter)
DEMO_SHIFTS: tuple[tuple[str, str, str, float], ...] = (
    ("right_clean", "none", "identity", 0.0),
    ("right_gamma085", "none", "gamma_noise", 0.85),
    ("right_gamma120", "none", "gamma_noise", 1.2),
    ("right_noise010", "noise", "noise", 0.10),
    ("right_noise016", "noise", "noise", 0.16),
    ("right_bias070", "bias field", "bias", 0.7),
    ("right_bias110", "bias field", "bias", 1.1),
    ("right_gamma045", "contrast", "gamma", 0.45),
    ("right_gamma260", "contrast", "gamma", 2.6),
    ("right_blur25", "blur", "blur", 2.5),
    ("right_lowres3", "resolution", "lowres", 3.0),
)


def _perturb(image: np.ndarray, kind: str, value: float, rng: np.random.Generator) -> np.ndarray:
    """One perturbation of a ``(X, Y, Z)`` image with intensities in [0, 1] (result clipped to [0, 1])."""
    from scipy.ndimage import gaussian_filter, zoom

    x = image.astype(np.float64)
    if kind == "identity":
        out = x
    elif kind == "gamma_noise":
        out = x**value + 0.02 * rng.standard_normal(x.shape)
    elif kind == "noise":
        out = x + value * rng.standard_normal(x.shape)
    elif kind == "gamma":
        out = x**value
    elif kind == "bias":
        grid = np.meshgrid(*(np.linspace(-1, 1, s) for s in x.shape), indexing="ij")
        field = 0.6 * grid[0] - 0.8 * grid[1] + 0.5 * grid[2] + 0.7 * grid[1] * grid[2] - 0.6 * grid[2] ** 2
        out = x * np.exp(value * field / np.abs(field).max())
    elif kind == "blur":
        out = gaussian_filter(x, value)
    elif kind == "lowres":
        step = int(value)
        kept = x[:, :, ::step]
        out = zoom(kept, (1, 1, x.shape[2] / kept.shape[2]), order=1)[:, :, : x.shape[2]]
        if out.shape[2] < x.shape[2]:
            out = np.concatenate([out, out[:, :, -1:].repeat(x.shape[2] - out.shape[2], axis=2)], axis=2)
    else:
        raise ValueError(f"unknown perturbation {kind!r}")
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def make_demo_cohort(
    folder: str | os.PathLike, seed: int = 0, shifts: Sequence[tuple[str, str, str, float]] | None = None
) -> dict[str, Path]:
    """Write the demo cohort (module docstring) as NIfTI: ``images/<case>.nii.gz``, ``labels/<case>.nii.gz`` and
    ``shifts.csv``; existing files are kept. ``shifts``: the cases to make (default :data:`DEMO_SHIFTS`).
    Returns the paths."""
    shifts = DEMO_SHIFTS if shifts is None else tuple(shifts)
    from ..data import load_mni152_tissue

    folder = Path(folder)
    images, labels = folder / "images", folder / "labels"
    shifts_csv = folder / "shifts.csv"
    todo = [c for c in shifts if not all((d / f"{c[0]}.nii.gz").is_file() for d in (images, labels))]
    if todo:
        data = load_mni152_tissue(resolution=2)
        right = data["right"]
        xs = np.flatnonzero(right.any(axis=(1, 2)))
        x0, x1 = int(xs.min()), int(xs.max()) + 1
        affine = data["affine"].copy()
        affine[:3, 3] = affine[:3, :3] @ np.array([x0, 0, 0]) + affine[:3, 3]  # voxel x0 becomes voxel 0
        image = data["image"][0, x0:x1]
        label = data["label"][0, x0:x1].astype(np.int16)
        rngs = np.random.default_rng(seed).spawn(len(DEMO_SHIFTS))  # the same noise for a case in any subset
        for (cid, _, kind, value), rng in zip(DEMO_SHIFTS, rngs):
            if (cid, _, kind, value) not in shifts:
                continue
            if (cid, _, kind, value) not in todo:
                continue
            save_nifti(_perturb(image, kind, value, rng), affine, images / f"{cid}.nii.gz")
            save_nifti(label, affine, labels / f"{cid}.nii.gz")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["case", "shift", "perturbation", "parameter"])
    w.writerows(shifts)
    atomic_write_text(shifts_csv, buf.getvalue())
    return {"images": images, "labels": labels, "shifts": shifts_csv}


def write_toy_cohort(
    folder: str | os.PathLike,
    n_cases: int = 6,
    shape: tuple[int, int, int] = (24, 24, 24),
    spacing: tuple[float, float, float] = (1.5, 1.0, 2.0),
    shifts: tuple[str, ...] = ("none", "none", "intensity", "shape"),
    predictions: bool = True,
    seed: int = 0,
) -> dict[str, Path]:
    """A small synthetic cohort on disk, for trying the command line without a trained network.

    Cases come from :func:`monai_unc.data.make_toy_dataset` (one sphere, or a cube under the ``shape`` shift, with
    an ambiguous border; ``shifts`` is cycled over the cases). Writes ``images/<case>.nii.gz``,
    ``labels/<case>.nii.gz`` (majority vote of the raters) and ``shifts.csv``; with ``predictions=True`` also a
    stand-in for a model's output in the ``monai-unc`` layout, ``predictions/<case>_probs.nii.gz``, ``_seg`` and
    ``_predictive_entropy``: the raters' foreground fraction smoothed with a Gaussian of 1 voxel and scaled by 1.3
    (2 voxels and 1.6 for shifted cases, so that they are worse and more uncertain), clipped to [0, 1]. Volumes
    carry the anisotropic ``spacing`` (mm) in their affine. Returns the folders and the shift table.
    """
    import nibabel as nib
    from scipy.ndimage import gaussian_filter

    from ..data import make_toy_dataset
    from ..measures import entropy

    folder = Path(folder)
    dirs = {k: folder / k for k in ("images", "labels", "predictions")}
    for k, d in dirs.items():
        if k != "predictions" or predictions:
            d.mkdir(parents=True, exist_ok=True)
    affine = np.diag([*map(float, spacing), 1.0])
    cases = make_toy_dataset(n_cases, shape=shape, shift=list(shifts), seed=seed)
    rows = []
    for i, c in enumerate(cases):
        cid = f"toy{i:03d}"
        rows.append((cid, c["shift"]))
        nib.save(nib.Nifti1Image(c["image"][0], affine), dirs["images"] / f"{cid}.nii.gz")
        nib.save(nib.Nifti1Image(c["label"].astype(np.int16), affine), dirs["labels"] / f"{cid}.nii.gz")
        if predictions:
            shifted = c["shift"] != "none"
            fg = gaussian_filter(c["probs"][1].astype(np.float64), 2.0 if shifted else 1.0)
            fg = np.clip(fg * (1.6 if shifted else 1.3), 0.0, 1.0)
            probs = np.stack([1.0 - fg, fg]).astype(np.float32)
            out = dirs["predictions"]
            nib.save(nib.Nifti1Image(np.moveaxis(probs, 0, -1), affine), out / f"{cid}_probs.nii.gz")
            nib.save(nib.Nifti1Image(probs.argmax(0).astype(np.int16), affine), out / f"{cid}_seg.nii.gz")
            pe = entropy(probs[None])[0, 0].astype(np.float32)
            nib.save(nib.Nifti1Image(pe, affine), out / f"{cid}_predictive_entropy.nii.gz")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["case", "shift"])
    w.writerows(rows)
    atomic_write_text(folder / "shifts.csv", buf.getvalue())
    out_paths = {k: d for k, d in dirs.items() if k != "predictions" or predictions}
    out_paths["shifts"] = folder / "shifts.csv"
    return out_paths


def run_demo(
    output: str | os.PathLike = "demo_output",
    samples: int = 8,
    quiet: bool = False,
    roi: int | tuple[int, ...] | None = 64,
    method: str = "mcdropout",
    budget: float = 0.3,
    overlap: float = 0.0,
) -> dict[str, Any]:
    """Run the demo into ``output`` (module docstring); returns the cohort summary and prints the report path."""
    import torch

    from ..data import TISSUE_CLASSES
    from ..io import list_image_cases
    from ..predict import InferSettings, build_inferer, check_run_settings, load_network, predict_cases
    from .cohort import EvaluationConfig, read_shifts, run_evaluate
    from .html import build_report

    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"--samples must be a positive integer, got {samples!r}")
    output = Path(output)
    t0 = time.time()
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    say(f"[1/4] demo cohort: MNI152 right hemisphere (held out) + shifted copies -> {output / 'data'}")
    cohort = make_demo_cohort(output / "data", shifts=DEMO_SHIFTS)
    say(f"[2/4] infer: {method}, {samples} samples")
    model = load_network(model="example")
    roi_list = None if roi is None else ([roi] * 3 if isinstance(roi, int) else list(roi))
    settings = InferSettings(
        model="example", method=method, samples=samples, roi=roi_list, overlap=overlap, intensity="none",
        measures=["predictive_entropy", "expected_entropy", "mutual_information", "max_softmax"], seed=0,
        activation="softmax", checkpoints=[], write_probs=True,
    )  # fmt: skip
    pred_dir = output / "predictions"
    pred_dir.mkdir(parents=True, exist_ok=True)
    check_run_settings(pred_dir, settings)
    inferer = build_inferer(method, samples=samples, roi=roi_list, overlap=overlap, sw_batch_size=2, seed=0,
                            measures=settings.measures)
    with torch.no_grad():
        predict_cases(list_image_cases(cohort["images"]), model, inferer, settings, pred_dir, progress=not quiet)
    say("[3/4] evaluate")
    config = EvaluationConfig(
        budget=budget, failure_dice=0.8, class_names=list(TISSUE_CLASSES), shifts=read_shifts(cohort["shifts"])
    )
    _, summary, paths = run_evaluate(cohort["labels"], pred_dir, output / "evaluation", config,
                                     images=cohort["images"], progress=not quiet)
    say("[4/4] report")
    report = build_report(output / "evaluation", output / "report")
    seconds = time.time() - t0
    summary = dict(summary)
    summary["report"] = str(report.resolve())
    atomic_write_text(output / "demo_summary.json", json.dumps(summary, indent=2) + "\n")
    if not quiet:
        _print_summary(summary, paths["metrics"], seconds)
    print(f"report: {report.resolve()}")
    return summary


def _print_summary(summary: dict[str, Any], metrics_csv: Path, seconds: float) -> None:
    rows = {r["case"]: r for r in csv.DictReader(metrics_csv.open())}
    col = summary["score"]["column"]
    referred = set(summary["triage"]["referred"])
    print("MNI152 tissue example: held-out right hemisphere + shifted copies (network trained on the left only)")
    print(f"{'rank':>4}  {'case':<16} {'shift':<11} {'Dice':>6}  {col:>27}  decision")
    for i, cid in enumerate(summary["triage"]["order"], 1):
        r = rows[cid]
        print(f"{i:>4}  {cid:<16} {r.get('shift', ''):<11} {float(r['dice']):>6.3f}  {float(r[col]):>27.4f}  "
              f"{'review' if cid in referred else 'accept'}")
    t, cal = summary["triage"], summary.get("calibration", {})
    print(f"budget {t['budget']:.0%}: {t['n_referred']} case(s) to review; mean Dice of retained cases "
          f"{t['dice_retained']:.3f} (all: {t['dice_all']:.3f})")
    if cal:
        print(f"pooled calibration: ECE {cal['ece']:.4f}, all-label ECE {cal['all_label_ece']:.4f}, "
              f"NLL {cal['nll']:.4f}, Brier {cal['brier']:.4f}")
    fd, ood = summary["failure_detection"], summary.get("ood", {})
    line = f"failure detection (risk 1 - Dice): AURC {fd['aurc']:.4f}, E-AURC {fd['eaurc']:.4f}"
    if ood.get("auroc") is not None:
        line += f"; OoD AUROC {ood['auroc']:.3f}"
    print(line)
    print(f"finished in {seconds:.0f} s")
