"""Lesion-wise metrics: ours against the official scripts and against the limit, in one run.

    python benchmarks/bench_lesions.py --brats /path/to/BraTS-2023-Metrics --shifts /path/to/shifts/mswml
    python benchmarks/bench_lesions.py --small            # 120 x 120 x 78, 20 lesions; ours and the limit only
    python benchmarks/bench_lesions.py --samples 10 --samples-only   # existence probability from 10 samples

Workload: one BraTS-sized case (240 x 240 x 155, 1 mm, label map 1/2/3) with ``--lesions`` (default 50) tumours, each
a nested edema / enhancing / necrosis ball (so about that many lesions in each of WT, TC and ET), and a prediction
with the tumours moved, grown or shrunk, some missed, and false positives; a voxel uncertainty map. Both volumes are
written as NIfTI once (not timed); every timing below reads them.

- **ours**: read both files, then per region :func:`monai_unc.metrics.lesions.brats_lesion_metrics` (GLI rule:
  dilation 3, 50 mm^3), and on the whole tumour the Shifts lesion F1, nDSC and nDSC R-AAC
  (:func:`~monai_unc.metrics.lesions.lesion_detection`, :func:`~monai_unc.metrics.lesions.normalized_dice`,
  :func:`~monai_unc.metrics.lesions.ndsc_retention_area`).
- **official** (with ``--brats`` / ``--shifts``, checkouts of the BraTS 2023 metrics repository of R. Saluja et al. and
  of the Shifts repository's ``mswml`` folder): ``get_LesionWiseResults(pred, gt, "BraTS-GLI")`` (it also computes
  the legacy full-volume Dice, HD95, sensitivity and specificity, which we do not) and ``lesion_f1_score``,
  ``dice_norm_metric``, ``ndsc_aac_metric`` on the same arrays. Their results are checked equal to ours.
- **limit**: what any exact implementation must do: read the files, one labelling pass of each region's prediction
  and of its dilated reference, and one Euclidean distance transform per lesion bounding box (the box of the
  lesion and its matched components, the transform of each surface).

With ``--samples S``: the per-lesion existence probability and volume spread of the whole tumour from ``S`` sample
masks (each the prediction moved by up to a voxel along each axis),
:func:`~monai_unc.metrics.lesions.lesion_uncertainty` with ``samples``, against its limit: one labelling pass of the
prediction and of each sample (any count of the samples' components that overlap a lesion needs them).

Printed: seconds of each (best of ``--repeat``), the ratios, and the peak traced memory (``tracemalloc``) of ours.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
import tempfile
import time
import tracemalloc
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
from scipy import ndimage

from monai_unc.metrics.lesions import (
    brats_lesion_metrics,
    lesion_detection,
    lesion_uncertainty,
    ndsc_retention_area,
    normalized_dice,
)

REGIONS = {"WT": (1, 2, 3), "TC": (1, 3), "ET": (3,)}


def _tumour(labels: np.ndarray, center: tuple, radius: float) -> None:
    lo = [max(0, int(c - radius - 1)) for c in center]
    hi = [min(s, int(c + radius + 2)) for c, s in zip(center, labels.shape)]
    box = tuple(slice(a, b) for a, b in zip(lo, hi))
    grid = np.ogrid[box]
    d2 = sum((g - c) ** 2 for g, c in zip(grid, center))
    sub = labels[box]
    sub[(d2 <= radius**2) & (sub == 0)] = 2
    sub[d2 <= (0.6 * radius) ** 2] = 3
    sub[d2 <= (0.3 * radius) ** 2] = 1


def make_case(shape: tuple, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pred, truth, uncertainty)`` of the workload."""
    rng = np.random.default_rng(seed)
    truth = np.zeros(shape, np.uint8)
    pred = np.zeros(shape, np.uint8)
    for _ in range(n):
        c = tuple(float(rng.uniform(12, s - 12)) for s in shape)
        r = float(rng.uniform(3.0, 9.0))
        _tumour(truth, c, r)
        if rng.uniform() < 0.15:
            continue
        shift = rng.integers(-2, 3, size=3)
        _tumour(pred, tuple(a + b for a, b in zip(c, shift)), r * float(rng.uniform(0.7, 1.3)))
    for _ in range(max(1, n // 10)):
        _tumour(pred, tuple(float(rng.uniform(12, s - 12)) for s in shape), float(rng.uniform(2.0, 5.0)))
    u = rng.uniform(0, 0.2, size=shape).astype(np.float32)
    u += 0.6 * (pred != truth)
    return pred, truth, u


def _read(pred_file: Path, gt_file: Path) -> tuple[np.ndarray, np.ndarray, tuple]:
    p = nib.load(pred_file)
    g = nib.load(gt_file)
    return np.asarray(p.dataobj), np.asarray(g.dataobj), tuple(float(z) for z in g.header.get_zooms())


def ours(pred_file: Path, gt_file: Path, u: np.ndarray) -> dict:
    pred, truth, spacing = _read(pred_file, gt_file)
    out = {}
    for name, labels in REGIONS.items():
        r = brats_lesion_metrics(np.isin(pred, labels), np.isin(truth, labels), spacing, 3, 50.0)
        out[name] = (r.dice, r.hd95, r.n_tp, r.n_fp, r.n_fn)
    p, t = pred > 0, truth > 0
    out["shifts"] = (lesion_detection(p, t).f1, normalized_dice(p, t), ndsc_retention_area(p, t, u))
    return out


def limit(pred_file: Path, gt_file: Path, u: np.ndarray) -> None:
    pred, truth, spacing = _read(pred_file, gt_file)
    full = ndimage.generate_binary_structure(3, 3)
    for labels in REGIONS.values():
        p, t = np.isin(pred, labels), np.isin(truth, labels)
        pl, _ = ndimage.label(p, structure=full)
        grown = ndimage.binary_dilation(t, structure=ndimage.generate_binary_structure(3, 2), iterations=3)
        zl, _ = ndimage.label(grown, structure=full)
        for box in ndimage.find_objects(zl):
            sub = zl[box] > 0
            ndimage.distance_transform_edt(~sub, sampling=spacing)  # one transform per lesion box
    ndimage.label(pred > 0)
    ndimage.label(truth > 0)
    np.sort(u.ravel())  # the R-AAC needs the order statistics of the uncertainty (one value sort)


def make_samples(pred: np.ndarray, n: int, seed: int = 1) -> np.ndarray:
    """``n`` binary sample masks of the whole tumour: the prediction moved by -1, 0 or 1 voxel along each axis."""
    rng = np.random.default_rng(seed)
    fg = pred > 0
    return np.stack([np.roll(fg, tuple(int(v) for v in rng.integers(-1, 2, 3)), axis=(0, 1, 2)) for _ in range(n)])


def samples_limit(pred: np.ndarray, samples: np.ndarray) -> None:
    full = ndimage.generate_binary_structure(3, 3)
    ndimage.label(pred > 0, structure=full)
    for s in samples:
        ndimage.label(s, structure=full)


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def official(brats, shifts, pred_file: Path, gt_file: Path, u: np.ndarray) -> dict:
    df = brats.get_LesionWiseResults(str(pred_file), str(gt_file), "BraTS-GLI")
    out = {r["Labels"]: (float(r["LesionWise_Score_Dice"]), float(r["LesionWise_Score_HD95"]), int(r["Num_TP"]),
                         int(r["Num_FP"]), int(r["Num_FN"])) for _, r in df.iterrows()}
    pred, truth, _ = _read(pred_file, gt_file)
    p, t = (pred > 0).astype(np.uint8), (truth > 0).astype(np.uint8)
    out["shifts"] = (float(shifts.lesion_f1_score(t, p)), float(shifts.dice_norm_metric(t, p)),
                     float(shifts.ndsc_aac_metric(t.flatten(), p.flatten(), u.flatten())))
    return out


def _best(fn, repeat: int) -> tuple[float, object]:
    best, result = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> None:
    """Run the three and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="120 x 120 x 78 with 20 lesions")
    ap.add_argument("--lesions", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--brats", type=Path, default=None, help="checkout of the BraTS 2023 metrics repository")
    ap.add_argument("--shifts", type=Path, default=None, help="the mswml folder of the Shifts repository")
    ap.add_argument("--samples", type=int, default=0, help="also time the existence probability from S samples")
    ap.add_argument("--samples-only", action="store_true", help="only the existence probability (with --samples)")
    args = ap.parse_args()
    shape = (120, 120, 78) if args.small else (240, 240, 155)
    n = args.lesions or (20 if args.small else 50)
    pred, truth, u = make_case(shape, n)
    print(f"{platform.machine()} {platform.python_version()}; case {shape}, {n} tumours; lesions per region "
          + ", ".join(f"{k} {ndimage.label(np.isin(truth, v), structure=np.ones((3, 3, 3)))[1]}"
                      for k, v in REGIONS.items()))
    if args.samples > 0:
        samples = make_samples(pred, args.samples)
        t_lim, _ = _best(lambda: samples_limit(pred, samples), args.repeat)
        t_ours, per = _best(lambda: lesion_uncertainty(pred > 0, samples=samples), args.repeat)
        tracemalloc.start()
        lesion_uncertainty(pred > 0, samples=samples)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"existence from {args.samples} samples, {per['lesion'].size} lesions: limit {t_lim:.2f} s, ours "
              f"{t_ours:.2f} s ({t_ours / t_lim:.2f}x the limit); peak traced memory {peak / 2**20:.0f} MiB "
              f"(the samples themselves {samples.nbytes / 2**20:.0f} MiB)")
        if args.samples_only:
            return
    with tempfile.TemporaryDirectory() as tmp:
        pf, gf = Path(tmp) / "pred.nii.gz", Path(tmp) / "gt.nii.gz"
        nib.save(nib.Nifti1Image(pred, np.eye(4)), pf)
        nib.save(nib.Nifti1Image(truth, np.eye(4)), gf)
        t_lim, _ = _best(lambda: limit(pf, gf, u), args.repeat)
        t_ours, res = _best(lambda: ours(pf, gf, u), args.repeat)
        tracemalloc.start()
        ours(pf, gf, u)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"limit    {t_lim:8.2f} s")
        print(f"ours     {t_ours:8.2f} s   {t_ours / t_lim:.2f}x the limit; peak traced memory {peak / 2**20:.0f} MiB "
              f"({peak / pred.size:.1f} bytes per voxel)")
        if args.brats and args.shifts:
            sys.path.insert(0, str(args.brats))
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "metrics" / "data"))
            from make_lesion_reference import compat

            compat()
            brats = _load("brats_2023_metrics", args.brats / "metrics.py")
            shifts = _load("shifts_mswml_metrics", args.shifts / "metrics.py")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t_off, ref = _best(lambda: official(brats, shifts, pf, gf, u), 1)
            print(f"official {t_off:8.2f} s   ours faster by {t_off / t_ours:.1f}x")
            for k in res:
                same = np.allclose(res[k], ref[k], rtol=1e-6, atol=1e-7)
                print(f"  {k}: ours {np.round(res[k], 6).tolist()} official {np.round(ref[k], 6).tolist()} "
                      f"{'equal' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
