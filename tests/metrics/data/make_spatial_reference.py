"""Brute-force BUC, BA-ECE and SPACE (Zeevi et al. Sec. 3) on small cases, frozen for ``test_spatial_reference.py``.

Written from the definitions (docs/spatial_metrics.md) with explicit loops, sharing no code with ``monai_unc`` nor
with scipy's morphology, distance transforms or filters:

- boundary: every voxel whose face neighbour inside the volume holds another label;
- distances: the minimum over every (voxel, boundary voxel) pair of ``||(x - b) * spacing||``;
- HD95 (BUC's default width): MONAI's convention, the foreground voxels with a face neighbour outside the foreground
  or outside the volume, the two directed 95th percentiles (linear interpolation), the larger one; checked against
  ``monai.metrics.compute_hausdorff_distance`` when MONAI is installed;
- SPACE: the Gaussian as explicit weights ``exp(-k**2 / (2 sigma**2))``, ``|k| <= int(4 sigma + 0.5)`` voxels, over a
  copy of the volume reflected at its border (scipy's ``reflect``, numpy's ``symmetric``), one axis after the other.

The authors of the paper link no reference implementation, so these are the package's documented choices, computed a
second way. Run from the repository root to rewrite the data file::

    python tests/metrics/data/make_spatial_reference.py tests/metrics/data/spatial_reference.json
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

#: distances within this relative tolerance of the BUC width or a band edge count as equal to it (TIE_RTOL)
TIE = 1e-6
#: decimals of the stored uncertainty maps (the maps are these rounded values, exactly)
DECIMALS = 4


def face_neighbours(idx: tuple, shape: tuple):
    """The in-volume face neighbours of voxel ``idx``, and how many lie outside the volume."""
    inside, outside = [], 0
    for ax in range(len(shape)):
        for step in (-1, 1):
            j = list(idx)
            j[ax] += step
            if 0 <= j[ax] < shape[ax]:
                inside.append(tuple(j))
            else:
                outside += 1
    return inside, outside


def boundary(lab: np.ndarray) -> np.ndarray:
    out = np.zeros(lab.shape, dtype=bool)
    for idx in np.ndindex(lab.shape):
        out[idx] = any(lab[j] != lab[idx] for j in face_neighbours(idx, lab.shape)[0])
    return out


def distances(mask: np.ndarray, spacing: tuple) -> np.ndarray:
    """Distance (mm) from every voxel to the nearest voxel of ``mask`` (inf where it is empty)."""
    out = np.full(mask.shape, np.inf)
    points = [np.array(b, dtype=float) * spacing for b in np.ndindex(mask.shape) if mask[b]]
    for idx in np.ndindex(mask.shape):
        x = np.array(idx, dtype=float) * spacing
        for b in points:
            out[idx] = min(out[idx], math.sqrt(float(((x - b) ** 2).sum())))
    return out


def surface(fg: np.ndarray) -> np.ndarray:
    """MONAI's edges: foreground voxels with a face neighbour outside the foreground or outside the volume."""
    out = np.zeros(fg.shape, dtype=bool)
    for idx in np.ndindex(fg.shape):
        if fg[idx]:
            inside, outside = face_neighbours(idx, fg.shape)
            out[idx] = outside > 0 or not all(fg[j] for j in inside)
    return out


def hd95(pred_fg: np.ndarray, target_fg: np.ndarray, spacing: tuple) -> float:
    sp, st = surface(pred_fg), surface(target_fg)
    if not sp.any() or not st.any():
        return math.inf
    d_pt = distances(st, spacing)[sp]
    d_tp = distances(sp, spacing)[st]
    return float(max(np.percentile(d_pt, 95), np.percentile(d_tp, 95)))


def grid_steps(spacing: tuple, shape: tuple) -> list:
    """The spacings of the axes with more than one voxel (an axis of one voxel carries no distance)."""
    return [s for s, n in zip(spacing, shape) if n > 1] or list(spacing)


def buc(u, p, t, spacing, width=None):
    b = boundary(p)
    if not b.any():
        return None
    if width is None:
        hd = hd95(p > 0, t > 0, spacing)
        if not math.isfinite(hd):
            return None
        width = max(hd, max(grid_steps(spacing, p.shape)))
    inside = distances(b, spacing) <= width * (1 + TIE)
    if inside.all():
        return None
    mu_in, mu_out = u[inside].mean(), u[~inside].mean()
    return None if mu_in + mu_out == 0 else float(mu_in / (mu_in + mu_out))


def ba_ece(u, p, t, spacing, n_bands=10, max_distance=None):
    b = boundary(t)
    if not b.any():
        return None
    d = distances(b, spacing)
    e = (p != t).astype(float)
    top = d.max() if max_distance is None else max_distance
    edges = np.linspace(0.0, top, n_bands + 1)
    half_step = 0.5 * float(np.mean(grid_steps(spacing, t.shape)))
    weights, gaps = [], []
    for i in range(n_bands):
        members = []
        for idx in np.ndindex(d.shape):
            if d[idx] > top * (1 + TIE):
                continue  # beyond max_distance
            lo_ok = i == 0 or d[idx] >= edges[i] * (1 - TIE)
            hi_ok = i == n_bands - 1 or d[idx] < edges[i + 1] * (1 - TIE)
            if lo_ok and hi_ok:
                members.append(idx)
        if members:
            weights.append(1.0 / (np.mean([d[m] for m in members]) + half_step))
            gaps.append(abs(np.mean([u[m] for m in members]) - np.mean([e[m] for m in members])))
    w = np.array(weights) / np.sum(weights)
    return float(np.dot(w, gaps))


def gaussian(x: np.ndarray, sigma_vox: list) -> np.ndarray:
    out = x.astype(float)
    for ax, s in enumerate(sigma_vox):
        if s <= 1e-15:
            continue
        r = int(4.0 * s + 0.5)
        k = np.arange(-r, r + 1)
        w = np.exp(-0.5 * (k / s) ** 2)
        w /= w.sum()
        n = out.shape[ax]
        # numpy's "symmetric" (d c b a | a b c d | d c b a) is scipy's "reflect"; tiled for radii beyond the axis
        idx = np.arange(-r, n + r) % (2 * n)
        idx = np.where(idx >= n, 2 * n - 1 - idx, idx)
        padded = np.take(out, idx, axis=ax)
        res = np.zeros_like(out)
        for pos in range(n):
            sl = [slice(None)] * out.ndim
            sl[ax] = pos
            acc = 0.0
            for j, wj in enumerate(w):
                src = [slice(None)] * out.ndim
                src[ax] = pos + j
                acc = acc + wj * padded[tuple(src)]
            res[tuple(sl)] = acc
        out = res
    return out


def space(u, p, t, spacing, sigma=2.0):
    sig = sigma if isinstance(sigma, (list, tuple)) else [sigma] * u.ndim
    s = [a / b for a, b in zip(sig, spacing)]
    return float(np.abs(gaussian(u, s) - gaussian((p != t).astype(float), s)).mean())


def blobs(rng, shape, n_labels, smooth=4):
    """Smooth random label regions: a random field thresholded at quantiles (a box blur, no scipy)."""
    field = rng.standard_normal(shape)
    for _ in range(smooth):
        for ax in range(len(shape)):
            if shape[ax] > 2:
                field = (np.roll(field, 1, ax) + field + np.roll(field, -1, ax)) / 3
    qs = np.quantile(field, np.linspace(0, 1, n_labels + 1)[1:-1])
    return np.digitize(field, qs).astype(np.int64)


def perturb(rng, t: np.ndarray, n_labels: int, rate: float = 0.3) -> np.ndarray:
    """A prediction: ``t`` with a random label at a fraction ``rate`` of its boundary voxels."""
    p = t.copy()
    flip = boundary(t) & (rng.random(t.shape) < rate)
    p[flip] = rng.integers(0, n_labels, int(flip.sum()))
    return p


def cases() -> list[dict]:
    rng = np.random.default_rng(67)

    def unc(shape):
        return np.round(rng.random(shape), DECIMALS)

    out = []

    def add(name, u, p, t, spacing, **options):
        out.append({"name": name, "spacing": list(spacing), "uncertainty": np.asarray(u).tolist(),
                    "pred": np.asarray(p).tolist(), "target": np.asarray(t).tolist(), "options": options})

    t = blobs(rng, (14, 16), 2)
    add("2d binary", unc(t.shape), perturb(rng, t, 2), t, (1.0, 1.0))
    t = blobs(rng, (20, 18), 3)
    add("2d three labels, 0.8 x 1.6 mm", unc(t.shape), perturb(rng, t, 3), t, (0.8, 1.6))
    t = blobs(rng, (7, 8, 9), 2)
    p = perturb(rng, t, 2)
    add("3d binary, 0.5 x 1 x 3 mm", unc(t.shape), p, t, (0.5, 1.0, 3.0))
    t3 = blobs(rng, (7, 8, 9), 3)
    add("3d three labels, options", unc(t.shape), perturb(rng, t3, 3), t3, (0.5, 1.0, 3.0),
        width=1.0, n_bands=4, max_distance=3.0, sigma=[1.0, 2.0, 3.0])
    add("3d same shape, other spacing", unc(t.shape), p, t, (1.3, 0.7, 1.1))
    square = np.zeros((7, 8), dtype=np.int64)
    square[2:5, 2:6] = 1
    add("empty prediction", unc(square.shape), np.zeros_like(square), square, (1.0, 2.0))
    add("empty reference", unc(square.shape), square, np.zeros_like(square), (1.0, 2.0))
    add("all foreground", unc(square.shape), np.ones_like(square), np.ones_like(square), (1.0, 2.0))
    add("constant map", np.full(square.shape, 0.3), np.roll(square, 1, 1), square, (1.0, 2.0))
    add("single voxel", [[0.25]], [[1]], [[0]], (1.0, 1.0))
    checker = np.indices((6, 6)).sum(0) % 2
    add("checkerboard (every voxel on the boundary)", unc(checker.shape), 1 - checker, checker, (1.0, 1.0),
        n_bands=3)
    thin = np.zeros((8, 9), dtype=np.int64)
    thin[4, 1:8] = 2
    thin[1:7, 4] = 1
    add("one-voxel-wide structures, a large sigma", unc(thin.shape), np.roll(thin, 1, 0), thin, (0.5, 0.5), sigma=6.0)
    add("one slice of a thick-slice volume", unc((1, 7, 8)), np.roll(square, 1, 1)[None], square[None],
        (5.0, 0.5, 0.8))
    return out


def expected(case: dict) -> dict:
    u = np.asarray(case["uncertainty"], dtype=float)
    p = np.asarray(case["pred"], dtype=np.int64)
    t = np.asarray(case["target"], dtype=np.int64)
    sp = tuple(case["spacing"])
    o = case["options"]
    return {
        "buc": buc(u, p, t, sp, o.get("width")),
        "ba_ece": ba_ece(u, p, t, sp, o.get("n_bands", 10), o.get("max_distance")),
        "space": space(u, p, t, sp, o.get("sigma", 2.0)),
    }


def check_hd95_against_monai(all_cases: list[dict]) -> None:
    """The brute-force HD95 equals MONAI's (float32 there) wherever both foregrounds are present."""
    try:
        import torch
        from monai.metrics import compute_hausdorff_distance
    except ImportError:
        return
    for case in all_cases:
        p = np.asarray(case["pred"]) > 0
        t = np.asarray(case["target"]) > 0
        if not (p.any() and t.any()):
            continue
        ours = hd95(p, t, tuple(case["spacing"]))
        theirs = float(compute_hausdorff_distance(torch.as_tensor(p[None, None]).float(),
                                                  torch.as_tensor(t[None, None]).float(),
                                                  percentile=95, spacing=list(case["spacing"])))
        assert abs(ours - theirs) <= 1e-6 * max(1.0, ours), (case["name"], ours, theirs)


def main(path: str) -> None:
    all_cases = cases()
    check_hd95_against_monai(all_cases)
    for case in all_cases:
        case["expected"] = expected(case)
    Path(path).write_text(json.dumps({"tie_rtol": TIE, "cases": all_cases}, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:2] or [str(Path(__file__).with_name("spatial_reference.json"))])
