"""Benchmark: BUC, BA-ECE and SPACE (Zeevi et al.) on a 128x256x256 volume, spacing (2, 1, 1) mm.

Contenders, each in its own subprocess (so that peak memory is its own):

- ``monai_unc``: :mod:`monai_unc.metrics.spatial` with its default backends (the ``edt`` package for the two
  distance maps, a KD-tree for HD95, one threaded Gaussian pass for SPACE).
- ``monai_unc[scipy]``: the same code forced onto scipy's float64 distance transform (shows what ``edt`` buys).
- ``naive``: the straightforward scipy implementation of the definitions: boundaries by grey dilation /
  erosion, ``scipy.ndimage.distance_transform_edt`` for d_pred and d_target, HD95 from two more scipy EDTs on
  the erosion edges with ``numpy.percentile``, boolean masks per band for BA-ECE, and two
  ``scipy.ndimage.gaussian_filter`` passes (on U and on E) for SPACE.
- ``monai_hd95``: MONAI's ``compute_hausdorff_distance(percentile=95)`` alone, the peer for the default BUC width.

- ``floor`` (timed only): the distance transforms and the Gaussian pass the three metrics need, called alone on
  the same masks (``floor_fns``); the script prints each metric's time as a ratio to its floor.

Times are the best of ``--repeats`` runs after one warm-up call, all contenders interleaved in one process so
that they see the same load (other processes share the cores). Peak memory
is the extra resident memory a metric needs: the kernel's peak RSS (``VmHWM``, reset through
``/proc/self/clear_refs`` just before the metric runs) minus the RSS at that moment, with the case already
loaded and the libraries imported; the largest of the three metrics is reported. (Where ``clear_refs`` cannot
be written, ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` is used instead, an upper bound.)

Run: ``python benchmarks/bench_spatial.py`` (``--repeats N``, ``--shape Z Y X``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from _floor import floor_line, ratio

SPACING = (2.0, 1.0, 1.0)
SIGMA = 2.0
N_BANDS = 10
TIE_RTOL = 1e-6  # monai_unc.metrics.spatial.TIE_RTOL: part of the definition, used by the naive code too


def make_case(shape: tuple[int, int, int], path: Path) -> None:
    """A 3-class target (two nested ellipsoids, like prostate zones), a perturbed prediction, an uncertainty."""
    from scipy import ndimage

    rng = np.random.default_rng(0)
    zz, yy, xx = np.meshgrid(*[np.arange(s, dtype=np.float32) for s in shape], indexing="ij")
    c = [s / 2 for s in shape]
    # physical distance from the centre, in mm, with the anisotropic spacing
    r = np.sqrt(((zz - c[0]) * SPACING[0]) ** 2 + ((yy - c[1]) * 0.8) ** 2 + (xx - c[2]) ** 2)
    del zz, yy, xx
    outer, inner = 0.35 * shape[2], 0.18 * shape[2]
    target = (r < outer).astype(np.uint8) + (r < inner).astype(np.uint8)
    noise = ndimage.gaussian_filter(rng.standard_normal(shape).astype(np.float32), 4) * 60
    rp = r + noise
    pred = (rp < outer).astype(np.uint8) + (rp < inner).astype(np.uint8)
    near = np.minimum(np.abs(r - outer), np.abs(r - inner))
    unc = (0.8 * np.exp(-near / 4) + 0.15 * rng.random(shape, dtype=np.float32)).astype(np.float32)
    np.clip(unc, 0, 1, out=unc)
    np.savez(path, uncertainty=unc, pred=pred, target=target)


# ------------------------------------------------------------------------------------------------ contenders


def run_monai_unc(u, p, t, backend):
    from monai_unc.metrics.spatial import (
        boundary_aware_ece,
        boundary_uncertainty_concentration,
        spatial_calibration_error,
    )

    return {
        "BUC": lambda: boundary_uncertainty_concentration(u, p, t, spacing=SPACING, backend=backend),
        "BA-ECE": lambda: boundary_aware_ece(u, p, t, spacing=SPACING, n_bands=N_BANDS, backend=backend),
        "SPACE": lambda: spatial_calibration_error(u, p, t, spacing=SPACING, sigma=SIGMA),
    }


def naive_fns(u, p, t):
    from scipy import ndimage

    cross = ndimage.generate_binary_structure(3, 1)

    def boundary(lab):
        return ndimage.grey_dilation(lab, footprint=cross, mode="nearest") != ndimage.grey_erosion(
            lab, footprint=cross, mode="nearest"
        )

    def hd95(a, b):
        ea = a & ~ndimage.binary_erosion(a)
        eb = b & ~ndimage.binary_erosion(b)
        d_ab = ndimage.distance_transform_edt(~eb, sampling=SPACING)[ea]
        d_ba = ndimage.distance_transform_edt(~ea, sampling=SPACING)[eb]
        return max(np.percentile(d_ab, 95), np.percentile(d_ba, 95))

    def buc():
        w = max(hd95(p > 0, t > 0), max(SPACING))
        d = ndimage.distance_transform_edt(~boundary(p), sampling=SPACING)
        inside = d <= w * (1 + TIE_RTOL)
        mu_in, mu_out = u[inside].mean(dtype=np.float64), u[~inside].mean(dtype=np.float64)
        return float(mu_in / (mu_in + mu_out))

    def baece():
        d = ndimage.distance_transform_edt(~boundary(t), sampling=SPACING)
        e = p != t
        edges = np.linspace(0, d.max(), N_BANDS + 1)
        weights, gaps = [], []
        for i in range(N_BANDS):
            lo, hi = edges[i] * (1 - TIE_RTOL), edges[i + 1] * (1 - TIE_RTOL)
            m = (d >= lo) & ((d < hi) if i < N_BANDS - 1 else (d <= edges[-1] * (1 + TIE_RTOL)))
            if m.any():
                weights.append(1.0 / (d[m].mean() + 0.5 * np.mean(SPACING)))
                gaps.append(abs(u[m].mean(dtype=np.float64) - e[m].mean()))
        w = np.asarray(weights) / np.sum(weights)
        return float(np.sum(w * np.asarray(gaps)))

    def space():
        s = [SIGMA / v for v in SPACING]
        gu = ndimage.gaussian_filter(u.astype(np.float64), s, truncate=4.0, mode="reflect")
        ge = ndimage.gaussian_filter((p != t).astype(np.float64), s, truncate=4.0, mode="reflect")
        return float(np.abs(gu - ge).mean())

    return {"BUC": buc, "BA-ECE": baece, "SPACE": space}


def monai_hd95_fns(u, p, t):
    import torch
    from monai.metrics import compute_hausdorff_distance

    def hd():
        pp = torch.from_numpy(np.stack([p == 0, p > 0])[None])
        tt = torch.from_numpy(np.stack([t == 0, t > 0])[None])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(compute_hausdorff_distance(pp, tt, percentile=95, spacing=SPACING)[0, 0])

    return {"HD95": hd}


def our_hd95_fns(u, p, t):
    from monai_unc.metrics.boundary import hd95

    return {"HD95": lambda: hd95(p, t, spacing=SPACING)}


def floor_fns(u, p, t):
    """The floor: the distance transforms and the Gaussian the three metrics need, each call timed alone.

    BUC needs the distance of every voxel to the predicted boundary, BA-ECE to the target boundary, SPACE one
    Gaussian pass over the float64 difference map (here plus the copy of its input that the call consumes). No
    implementation of the definitions can skip them; the boundaries (cheap) and HD95 (BUC's default width) are
    left out of the floor. Same backends as the ``monai_unc`` contender.
    """
    from monai_unc.metrics import spatial
    from monai_unc.metrics.boundary import distance_to_mask, label_boundary

    bp, bt = label_boundary(p), label_boundary(t)
    diff = u.astype(np.float64) - (p != t)
    sig = tuple(SIGMA / v for v in SPACING)
    return {
        "BUC": lambda: distance_to_mask(bp, SPACING),
        "BA-ECE": lambda: distance_to_mask(bt, SPACING),
        "SPACE": lambda: spatial._gaussian(diff.copy(), sig, 4.0),
    }


CONTENDERS = {
    "monai_unc": lambda u, p, t: run_monai_unc(u, p, t, "auto"),
    "monai_unc[scipy]": lambda u, p, t: run_monai_unc(u, p, t, "scipy"),
    "naive": naive_fns,
    "monai_hd95": monai_hd95_fns,
    "monai_unc_hd95": our_hd95_fns,
}


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) to the current RSS; False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def worker(name: str, path: str) -> None:
    """Values and peak memory of one contender (one run per metric after a warm-up call)."""
    data = np.load(path)
    u, p, t = data["uncertainty"], data["pred"], data["target"]
    fns = CONTENDERS[name](u, p, t)  # imports happen here, before the baseline
    fns[next(iter(fns))]()  # warm-up: first-call costs (thread pools, lazy imports) are not the metric's
    values, peak = {}, 0.0
    for metric, fn in fns.items():
        base = _status_kib("VmRSS")
        resettable = reset_peak()
        values[metric] = float(np.ravel(fn())[0])  # monai_unc returns (1,) per case, the naive contenders a float
        if resettable:
            high = _status_kib("VmHWM")
        else:  # ru_maxrss is a lifetime high-water mark: an upper bound here
            high = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = max(peak, (high - base) / 1024.0)
    print(json.dumps({"values": values, "peak_mib": peak}))


def timer(path: str, repeats: int) -> None:
    """Best-of-``repeats`` wall times of every contender, interleaved so that all see the same load."""
    data = np.load(path)
    u, p, t = data["uncertainty"], data["pred"], data["target"]
    fns = {name: make(u, p, t) for name, make in {**CONTENDERS, "floor": floor_fns}.items()}
    for per_metric in fns.values():  # warm-up
        for fn in per_metric.values():
            fn()
    best = {name: dict.fromkeys(per_metric, float("inf")) for name, per_metric in fns.items()}
    for _ in range(repeats):
        for name, per_metric in fns.items():
            for metric, fn in per_metric.items():
                t0 = time.perf_counter()
                fn()
                best[name][metric] = min(best[name][metric], time.perf_counter() - t0)
    print(json.dumps(best))


def run_worker(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker")
    ap.add_argument("--timer", action="store_true")
    ap.add_argument("--case")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--shape", type=int, nargs=3, default=(128, 256, 256))
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.case)
        return
    if args.timer:
        timer(args.case, args.repeats)
        return

    import torch

    shape = tuple(args.shape)
    print(f"# bench_spatial: volume {shape}, spacing {SPACING} mm, sigma {SIGMA} mm, {N_BANDS} bands")
    print(f"# {os.cpu_count()} CPU cores, torch threads {torch.get_num_threads()}, best of {args.repeats} runs")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "case.npz"
        make_case(shape, path)
        res = {name: run_worker(["--worker", name, "--case", str(path)]) for name in CONTENDERS}
        times = run_worker(["--timer", "--case", str(path), "--repeats", str(args.repeats)])
        for name in CONTENDERS:
            res[name]["times"] = times[name]
    floor = times["floor"]

    ours, naive = res["monai_unc"], res["naive"]
    print()
    print("| Metric | monai_unc | naive scipy | abs diff | monai_unc[scipy] | t monai_unc (s) | t naive (s) "
          "| speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for m in ("BUC", "BA-ECE", "SPACE"):
        a, b = ours["values"][m], naive["values"][m]
        print(
            f"| {m} | {a:.10f} | {b:.10f} | {abs(a - b):.1e} | {res['monai_unc[scipy]']['values'][m]:.10f} | "
            f"{ours['times'][m]:.3f} | {naive['times'][m]:.3f} | {naive['times'][m] / ours['times'][m]:.1f}x |"
        )
    t_ours, t_naive = sum(ours["times"].values()), sum(naive["times"].values())
    t_sc = sum(res["monai_unc[scipy]"]["times"].values())
    print(f"| all three | | | | | {t_ours:.3f} | {t_naive:.3f} | {t_naive / t_ours:.1f}x |")
    print()
    print("| Contender | total time (s) | peak extra RSS (MiB) |")
    print("|---|---:|---:|")
    print(f"| monai_unc (edt + KD-tree + threaded Gaussian) | {t_ours:.3f} | {ours['peak_mib']:.0f} |")
    print(f"| monai_unc, backend='scipy' | {t_sc:.3f} | {res['monai_unc[scipy]']['peak_mib']:.0f} |")
    print(f"| naive scipy (4 EDTs, 2 Gaussian filters) | {t_naive:.3f} | {naive['peak_mib']:.0f} |")
    h_ours, h_monai = res["monai_unc_hd95"], res["monai_hd95"]
    print()
    print(
        f"HD95 (default BUC width): monai_unc {h_ours['values']['HD95']:.6f} mm in {h_ours['times']['HD95']:.3f} s "
        f"({h_ours['peak_mib']:.0f} MiB); MONAI compute_hausdorff_distance {h_monai['values']['HD95']:.6f} mm in "
        f"{h_monai['times']['HD95']:.3f} s ({h_monai['peak_mib']:.0f} MiB); abs diff "
        f"{abs(h_ours['values']['HD95'] - h_monai['values']['HD95']):.1e} (MONAI returns float32)"
    )
    print()
    print("| Metric | t monai_unc (s) | floor: its transforms alone (s) | ratio to the floor |")
    print("|---|---:|---:|---:|")
    for m, what in (("BUC", "EDT to the predicted boundary"), ("BA-ECE", "EDT to the target boundary"),
                    ("SPACE", "one Gaussian pass")):
        print(f"| {m} | {ours['times'][m]:.3f} | {floor[m]:.3f} ({what}) | {ratio(ours['times'][m], floor[m])} |")
    t_floor = sum(floor.values())
    print(f"| all three | {t_ours:.3f} | {t_floor:.3f} | **{ratio(t_ours, t_floor)}** |")
    print(floor_line("BUC + BA-ECE + SPACE", t_ours, t_floor, "their distance transforms and Gaussian"))
    worst = max(abs(ours["values"][m] - naive["values"][m]) for m in ("BUC", "BA-ECE", "SPACE"))
    print(f"max abs difference to naive: {worst:.1e} (target <= 1e-6); speed-up {t_naive / t_ours:.1f}x (target >= 3x)")


if __name__ == "__main__":
    main()
