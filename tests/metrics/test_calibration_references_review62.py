"""Hostile review 62: the calibration and selective-prediction metrics against independent brute-force references.

Every reference here is written differently from the package: explicit loops over coarse bins on the raw voxels in
numpy (no fine histogram), every permutation of tied cases for E-AURC and the referral curve, scikit-learn for the
failure-detection AUROC / AUPR, and scipy's bounded scalar minimiser for the temperature that minimises the NLL.
Inputs are hundreds of small random cases that hit the corners: confidences exactly on coarse bin edges (0, k / n,
1), ``n_bins = 1``, ties between classes (the first maximum wins), weights with zeros, ``min_bin_count``, float16 /
bfloat16 probabilities, masks with NaN and an ignore label outside them, and volumes fed in patches and chunks.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch

import monai_unc.metrics.calibration.histogram as histogram_module
from monai_unc.metrics.calibration import (
    ConfidenceHistogram,
    ace,
    all_label_ece,
    brier,
    classwise_ece,
    ece,
    mce,
    nll,
    uce,
)
from monai_unc.metrics.discrimination import error_auprc, error_auroc
from monai_unc.metrics.selective import augrc, aurc, eaurc, referral_curve

F = 15 * 2**10  # the default fine grid; every n_bins used below divides it
_EDGES = np.array([0.0, 1.0, 0.5, 0.25, 0.75, 0.2, 0.4, 0.6, 0.8, 0.1, 0.9, 0.3, 0.7, 1 / 3, 2 / 3])


# ----------------------------------------------------------------------------------------------------------------
# references
# ----------------------------------------------------------------------------------------------------------------
def _bin_of(v: np.ndarray, n_bins: int) -> np.ndarray:
    """``floor(v * n)`` in float64, the last bin closed (docs/calibration.md, "Binning conventions")."""
    assert F % n_bins == 0
    return np.minimum(np.floor(np.clip(v, 0.0, 1.0) * n_bins), n_bins - 1).astype(np.int64)


def _gaps(vals: np.ndarray, hits: np.ndarray, w: np.ndarray, n_bins: int, min_count: int) -> list[tuple]:
    """``(weight, |frequency - mean value|)`` of every kept bin, one explicit loop over the bins."""
    bins = _bin_of(vals, n_bins)
    out = []
    for b in range(n_bins):
        sel = bins == b
        count, weight = int(sel.sum()), float(w[sel].sum())
        if count >= max(1, min_count) and weight > 0:
            out.append((weight, abs(float((w[sel] * hits[sel]).sum()) - float((w[sel] * vals[sel]).sum())) / weight))
    return out


def _reduce(gaps: list[tuple], how: str) -> float:
    if not gaps:
        return math.nan
    if how == "expected":
        return sum(m * g for m, g in gaps) / sum(m for m, _ in gaps)
    if how == "average":
        return sum(g for _, g in gaps) / len(gaps)
    return max(g for _, g in gaps)


def _reference(p: np.ndarray, y: np.ndarray, w: np.ndarray, n_bins: int, min_count: int) -> dict[str, float]:
    """Every metric of the ECE family, NLL and Brier from voxels ``p`` ``(N, C)`` float64, labels, weights > 0."""
    n, c = p.shape
    p = np.clip(p, 0.0, 1.0)
    conf, correct = p.max(1), (p.argmax(1) == y).astype(np.float64)
    top = _gaps(conf, correct, w, n_bins, min_count)
    per_label = [_gaps(p[:, k], (y == k).astype(np.float64), w, n_bins, min_count) for k in range(c)]
    pooled = _gaps(p.T.reshape(-1), np.concatenate([(y == k) for k in range(c)]).astype(np.float64), np.tile(w, c),
                   n_bins, min_count)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(1) / math.log(c)
    p_y = p[np.arange(n), y]
    return {
        "ece": _reduce(top, "expected"),
        "ace": _reduce(top, "average"),
        "mce": _reduce(top, "maximum"),
        "classwise_ece": float(np.mean([_reduce(g, "expected") for g in per_label])),
        "all_label_ece": _reduce(pooled, "expected"),
        "uce": _reduce(_gaps(np.clip(ent, 0.0, 1.0), 1.0 - correct, w, n_bins, min_count), "expected"),
        "nll": float((w * -np.log(np.maximum(p_y, 1e-15))).sum() / w.sum()),
        "brier": float((w * ((p - np.eye(c)[y]) ** 2).sum(1)).sum() / w.sum()),
    }


_METRICS = {"ece": ece, "ace": ace, "mce": mce, "classwise_ece": classwise_ece, "all_label_ece": all_label_ece,
            "uce": uce}


def _random_probs(rng: np.random.Generator, batch: int, c: int, spatial: tuple[int, ...], kind: int) -> np.ndarray:
    """Softmax outputs, two-class values on coarse bin edges, ties with 1 / C, or near one-hot Dirichlet draws."""
    shape = (batch, *spatial)
    if kind == 0:
        z = rng.normal(size=(batch, c, *spatial)) * rng.uniform(0.1, 5.0)
        p = np.exp(z - z.max(1, keepdims=True))
        return p / p.sum(1, keepdims=True)
    if kind == 1:
        a = rng.choice(_EDGES, size=shape)
        p = np.zeros((batch, c, *spatial))
        p[:, 0], p[:, 1] = a, 1.0 - a
        return p[:, rng.permutation(c)]
    q = np.moveaxis(rng.dirichlet(np.full(c, 0.1 if kind == 3 else 1.0), size=shape), -1, 1)
    if kind == 2:
        return np.where((rng.random(shape) < 0.5)[:, None], np.full_like(q, 1.0 / c), q)
    return q


# ----------------------------------------------------------------------------------------------------------------
# the ECE family, NLL and Brier
# ----------------------------------------------------------------------------------------------------------------
def test_ece_family_nll_and_brier_equal_a_brute_force_reference_on_random_corner_cases() -> None:
    rng = np.random.default_rng(62)
    worst = 0.0
    for _ in range(120):
        c = int(rng.integers(2, 6))
        n_bins = int(rng.choice([1, 2, 3, 5, 10, 15, 20]))
        min_count = int(rng.choice([0, 0, 1, 3]))
        spatial = tuple(int(s) for s in rng.integers(1, 5, size=int(rng.integers(2, 4))))  # 2D and 3D
        batch = int(rng.integers(1, 3))
        p = _random_probs(rng, batch, c, spatial, int(rng.integers(0, 4))).astype(rng.choice([np.float32, np.float64]))
        y = rng.integers(0, c, size=(batch, *spatial))
        w = rng.choice([0.0, 0.5, 1.0, 2.0], size=y.shape) if rng.random() < 0.3 else None
        if w is not None and not w.any():
            w = None
        flat_p = np.moveaxis(p, 1, -1).reshape(-1, c).astype(np.float64)
        flat_y, flat_w = y.reshape(-1), np.ones(y.size) if w is None else w.reshape(-1)
        keep = flat_w > 0
        ref = _reference(flat_p[keep], flat_y[keep], flat_w[keep], n_bins, min_count)
        as_torch = bool(rng.random() < 0.5)
        probs = torch.from_numpy(p) if as_torch else p
        target = torch.from_numpy(y) if as_torch else y
        weights = None if w is None else (torch.from_numpy(w) if as_torch else w)
        hist = ConfidenceHistogram(c).update(probs, target, weights=weights)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # NaN where min_bin_count drops every bin
            ours = {k: fn(hist, n_bins=n_bins, min_bin_count=min_count) for k, fn in _METRICS.items()}
            ours["nll"], ours["brier"] = nll(hist), brier(hist)
            # the arrays path builds the same histogram: spot-check it
            ours_arrays = ece(probs, target, n_bins=n_bins, min_bin_count=min_count, weights=weights)
        assert ours_arrays == pytest.approx(ours["ece"], abs=0, nan_ok=True)
        for k, v in ours.items():
            if math.isnan(ref[k]):
                assert math.isnan(v), k
                continue
            assert v == pytest.approx(ref[k], abs=1e-12), (k, v, ref[k])
            worst = max(worst, abs(v - ref[k]))
    assert worst < 1e-12  # measured 1.2e-14 (NLL sums); the ECE family 2.2e-16


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_probabilities_are_binned_as_their_float64_values(dtype: torch.dtype) -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        c = int(rng.integers(2, 5))
        p = torch.softmax(torch.from_numpy(rng.normal(size=(1, c, 6, 5, 3)) * 3), 1).to(dtype)
        y = torch.from_numpy(rng.integers(0, c, size=(1, 6, 5, 3)))
        ref = _reference(p[0].to(torch.float64).reshape(c, -1).T.numpy(), y.reshape(-1).numpy(), np.ones(90), 15, 0)
        hist = ConfidenceHistogram(c).update(p, y)
        for k, fn in _METRICS.items():
            assert fn(hist) == pytest.approx(ref[k], abs=1e-12), k
        assert nll(hist) == pytest.approx(ref["nll"], abs=1e-12)
        assert brier(hist) == pytest.approx(ref["brier"], abs=1e-12)


def test_patches_chunks_masks_and_kernels_give_the_one_shot_histogram() -> None:
    """Counts equal exactly, sums within rounding, whichever path, chunk size or patch split adds the voxels."""
    rng = np.random.default_rng(3)
    fused = histogram_module.FUSED_KERNELS
    try:
        for _ in range(40):
            c, batch = int(rng.integers(2, 5)), int(rng.integers(1, 3))
            x, yy, zz = (int(v) for v in rng.integers(2, 8, size=3))
            p = torch.softmax(torch.from_numpy(rng.normal(size=(batch, c, x, yy, zz)) * 3), 1)
            p = p.to([torch.float32, torch.float64, torch.float16][int(rng.integers(0, 3))])
            y = torch.from_numpy(rng.integers(0, c, size=(batch, x, yy, zz)))
            mask = torch.from_numpy(rng.random((batch, x, yy, zz)) < 0.7)
            p[:, 0][~mask] = float("nan")  # never read outside the mask
            y[~mask] = 255
            histogram_module.FUSED_KERNELS = True
            one = ConfidenceHistogram(c).update(p, y, mask=mask)
            histogram_module.FUSED_KERNELS = bool(rng.random() < 0.5)
            parts = ConfidenceHistogram(c, chunk_size=int(rng.integers(1, 40)))
            cut = int(rng.integers(1, x))
            ids = [f"case{b}" for b in range(batch)]
            for sl in (slice(0, cut), slice(cut, x)):
                parts.update(p[:, :, sl], y[:, sl], mask=mask[:, sl], case_ids=ids)
            for per_case in (True, False):
                a, b = one.views(per_case), parts.views(per_case)
                assert torch.equal(a[0], b[0])
                assert torch.equal(a[1], b[1])
                torch.testing.assert_close(a[2], b[2], rtol=1e-13, atol=0)
                torch.testing.assert_close(a[3], b[3], rtol=1e-12, atol=0)
            for bi in range(batch):  # per case, against the reference on the voxels inside the mask
                keep = mask[bi].reshape(-1).numpy()
                if not keep.any():
                    continue
                flat = p[bi].to(torch.float64).reshape(c, -1).T.numpy()[keep]
                ref = _reference(flat, y[bi].reshape(-1).numpy()[keep], np.ones(int(keep.sum())), 15, 0)
                assert ece(parts, per_case=True)[bi] == pytest.approx(ref["ece"], abs=1e-12)
                assert uce(parts, per_case=True)[bi] == pytest.approx(ref["uce"], abs=1e-12)
                assert nll(parts, per_case=True)[bi] == pytest.approx(ref["nll"], abs=1e-12)
    finally:
        histogram_module.FUSED_KERNELS = fused


# ----------------------------------------------------------------------------------------------------------------
# selective prediction and failure detection
# ----------------------------------------------------------------------------------------------------------------
def _area(points: list[tuple[float, float]]) -> float:
    return sum((c0 - c1) * (r0 + r1) / 2 for (c0, r0), (c1, r1) in zip(points[:-1], points[1:]))


def _ref_aurc(u: np.ndarray, r: np.ndarray, generalized: bool) -> float:
    """A point per distinct threshold (ties enter together), then coverage 0 (ValUES A.3, fd-shifts)."""
    n, g = u.size, -u
    points = []
    for tau in sorted(set(g.tolist())):  # ascending threshold: descending coverage, from 1
        kept = g >= tau
        points.append((kept.sum() / n, r[kept].sum() / (n if generalized else kept.sum())))
    points.append((0.0, 0.0 if generalized else points[-1][1]))
    return _area(points)


def _every_point_aurc(order: np.ndarray, r: np.ndarray) -> float:
    n = r.size
    points = [(k / n, r[order[:k]].mean()) for k in range(n, 0, -1)]
    return _area([*points, (0.0, points[-1][1])])


def _tie_orders(u: np.ndarray) -> list[np.ndarray]:
    """Every order of the cases by ascending uncertainty (each order of tied cases once)."""
    return [np.array(o) for o in itertools.permutations(range(u.size)) if np.all(np.diff(u[list(o)]) >= 0)]


def test_aurc_augrc_eaurc_and_referral_equal_permutation_references() -> None:
    rng = np.random.default_rng(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # all-tied scores warn
        for _ in range(150):
            n = int(rng.integers(1, 7))
            u = rng.choice(rng.random(3), size=n) if rng.random() < 0.5 else rng.random(n)  # many ties, or none
            r = rng.integers(0, 2, n).astype(float) if rng.random() < 0.5 else rng.choice([0, 0.25, 0.3, 1.0], n)
            assert aurc(u, r) == pytest.approx(_ref_aurc(u, r, False), abs=1e-12)
            assert augrc(u, r) == pytest.approx(_ref_aurc(u, r, True), abs=1e-12)
            orders = _tie_orders(u)
            expected = np.mean([_every_point_aurc(o, r) for o in orders])
            oracle = _every_point_aurc(np.argsort(r, kind="stable"), r)
            assert eaurc(u, r) == pytest.approx(expected - oracle, abs=1e-12)
            curve = referral_curve(u, r)
            for k, v in enumerate(curve.value):
                kept = n - k  # tau = k / n refers k cases
                assert v == pytest.approx(np.mean([r[o[:kept]].mean() for o in orders]), abs=1e-12)


def test_error_auroc_and_auprc_equal_scikit_learn() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(150):
        shape = (int(rng.integers(1, 3)), 1, int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        u = rng.choice(rng.random(4), size=shape).astype(rng.choice([np.float32, np.float64]))  # ties
        e = rng.random(shape) < 0.4
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            pooled = (error_auroc(u, e, per_case=False), error_auprc(u, e, per_case=False))
            per_case = (error_auroc(u, e, per_case=True), error_auprc(u, e, per_case=True))
        groups = [(u.ravel(), e.ravel(), *pooled)]
        groups += [(u[b].ravel(), e[b].ravel(), per_case[0][b], per_case[1][b]) for b in range(shape[0])]
        for uu, ee, roc, pr in groups:
            if ee.all() or not ee.any():
                assert math.isnan(roc) and math.isnan(pr)  # undefined, not scikit-learn's 0 / 1
                continue
            assert roc == pytest.approx(metrics.roc_auc_score(ee, uu), abs=1e-12)
            assert pr == pytest.approx(metrics.average_precision_score(ee, uu), abs=1e-12)
            checked += 1
    assert checked > 200


# ----------------------------------------------------------------------------------------------------------------
# temperature scaling
# ----------------------------------------------------------------------------------------------------------------
def test_temperature_equals_the_nll_minimiser_of_scipy() -> None:
    optimize = pytest.importorskip("scipy.optimize")
    from monai_unc.temperature import TemperatureScaler

    rng = np.random.default_rng(0)
    for _ in range(12):
        c, n = int(rng.integers(2, 5)), int(rng.integers(50, 300))
        z0 = rng.normal(size=(c, n)) * rng.uniform(0.5, 3.0)
        p0 = np.exp(z0) / np.exp(z0).sum(0)
        y = (rng.random(n)[None] > np.cumsum(p0, 0)).sum(0)  # labels drawn from the calibrated probabilities
        z = (z0 * rng.uniform(0.3, 4.0)).astype(np.float32)
        zd = z.astype(np.float64)

        def mean_nll(log_b: float, zd: np.ndarray = zd, y: np.ndarray = y) -> float:
            a = zd * math.exp(log_b)
            top = a.max(0)
            return float((top + np.log(np.exp(a - top).sum(0)) - a[y, np.arange(y.size)]).mean())

        best = optimize.minimize_scalar(mean_nll, bounds=(-6, 6), method="bounded", options={"xatol": 1e-12})
        scaler = TemperatureScaler().fit(torch.from_numpy(z).reshape(1, c, n, 1), torch.from_numpy(y).reshape(1, n, 1))
        assert scaler.converged and scaler.defined
        assert float(scaler.temperature) == pytest.approx(math.exp(-best.x), rel=1e-5)
