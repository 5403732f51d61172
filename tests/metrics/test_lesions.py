"""Lesion-wise metrics (monai_unc.metrics.lesions) against the official codes' outputs and brute-force references."""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import ndimage
from scipy.integrate import trapezoid as scipy_trapezoid  # numpy's np.trapezoid is numpy 2 only

from monai_unc.metrics.lesions import (
    BRATS_2023_SETTINGS,
    binary_mask,
    brats_lesion_metrics,
    label_lesions,
    lesion_detection,
    lesion_uncertainty,
    ndsc_retention_area,
    ndsc_retention_curve,
    normalized_dice,
    shifts_retention_fractions,
    surface_hd95,
)

sys.path.insert(0, str(Path(__file__).parent))
from lesion_cohort import CASES, make_case, region_mask  # noqa: E402

DATA = Path(__file__).parent / "data"
REFERENCE = json.loads((DATA / "lesion_reference.json").read_text())
REGIONS = ("WT", "TC", "ET")


def _ours(case_index: int, spacing: tuple) -> dict:
    pred, truth, _, u = make_case(case_index)
    out: dict = {}
    for challenge in ("BraTS-GLI", "BraTS-MET"):
        dilation, min_volume = BRATS_2023_SETTINGS[challenge]
        out[challenge] = {}
        for region in REGIONS:
            r = brats_lesion_metrics(region_mask(pred, region), region_mask(truth, region), spacing, dilation,
                                     min_volume)
            out[challenge][region] = {"dice": r.dice, "hd95": r.hd95, "n_tp": r.n_tp, "n_fp": r.n_fp, "n_fn": r.n_fn}
    g, p = truth > 0, pred > 0
    out["shifts"] = {"ndsc": normalized_dice(p, g), "f1": lesion_detection(p, g).f1,
                     "raac": ndsc_retention_area(p, g, u)}
    return out


def _compare(ours: dict, ref: dict, case: str) -> None:
    for challenge in ("BraTS-GLI", "BraTS-MET"):
        for region in REGIONS:
            got, want = ours[challenge][region], ref[challenge][region]
            for key in ("n_tp", "n_fp", "n_fn"):
                assert got[key] == want[key], (case, challenge, region, key)
            # same formula, same order of operations; the lesions' sum may add in another order (1e-12)
            assert got["dice"] == pytest.approx(want["dice"], rel=1e-12, abs=0), (case, challenge, region)
            assert got["hd95"] == pytest.approx(want["hd95"], rel=1e-12, abs=0), (case, challenge, region)
    # the Shifts code computes nDSC in float32 (NumPy 2 keeps float32 scalars); we compute in float64
    for key in ("ndsc", "raac"):
        assert ours["shifts"][key] == pytest.approx(ref["shifts"][key], rel=1e-6, abs=2e-7), (case, key)
    assert ours["shifts"]["f1"] == ref["shifts"]["f1"], case


def test_cohort_covers_the_edge_cases():
    """The frozen cohort has what the comparison must cover: several lesions, empty truth / prediction / both,
    anisotropic spacing, lesions below the size threshold, lesions merged by the dilation."""
    kinds = {"several": 0, "empty_truth": 0, "empty_pred": 0, "both_empty": 0, "anisotropic": 0}
    for i in range(len(CASES)):
        pred, truth, spacing, _ = make_case(i)
        kinds["several"] += label_lesions(truth > 0)[1] >= 3
        kinds["empty_truth"] += (not truth.any()) and pred.any()
        kinds["empty_pred"] += truth.any() and not pred.any()
        kinds["both_empty"] += not (truth.any() or pred.any())
        kinds["anisotropic"] += len(set(spacing)) > 1
    assert all(v >= 1 for v in kinds.values()), kinds
    r = brats_lesion_metrics(region_mask(make_case(4)[0], "ET"), region_mask(make_case(4)[1], "ET"),
                             REFERENCE["case04"]["spacing"], 3, 50.0)
    assert any(not les.counted and les.matched for les in r.lesions)  # a small lesion found: neither TP nor FP
    r = brats_lesion_metrics(region_mask(make_case(1)[0], "WT"), region_mask(make_case(1)[1], "WT"),
                             REFERENCE["case01"]["spacing"], 3, 50.0)
    assert label_lesions(region_mask(make_case(1)[1], "WT"))[1] > len(r.lesions)  # dilation merged lesions


@pytest.mark.parametrize("index", range(len(CASES)))
def test_equal_to_frozen_official_outputs(index):
    """BraTS 2023 lesion-wise Dice / HD95 / counts and Shifts nDSC, lesion F1, nDSC R-AAC equal the official codes'
    outputs on the synthetic cohort (tests/metrics/data/lesion_reference.json, made by make_lesion_reference.py)."""
    case = CASES[index]
    ref = REFERENCE[case]
    _compare(_ours(index, tuple(ref["spacing"])), ref, case)


@pytest.mark.slow
@pytest.mark.skipif(not (os.environ.get("BRATS_2023_METRICS_DIR") and os.environ.get("SHIFTS_MSWML_DIR")),
                    reason="set BRATS_2023_METRICS_DIR and SHIFTS_MSWML_DIR to checkouts of the official codes")
def test_equal_to_official_code_live():
    """With the official codes checked out, run them now and compare (and check the frozen table is theirs)."""
    pytest.importorskip("cc3d")
    pytest.importorskip("pandas")
    pytest.importorskip("nibabel")
    sys.path.insert(0, str(DATA))
    from make_lesion_reference import official_results

    live = official_results(os.environ["BRATS_2023_METRICS_DIR"], os.environ["SHIFTS_MSWML_DIR"])
    for index, case in enumerate(CASES):
        _compare(_ours(index, tuple(live[case]["spacing"])), live[case], case)
        _compare(live[case], REFERENCE[case], case)


# -- brute-force references -----------------------------------------------------------------------------------------

def _random_masks(seed: int, shape=(16, 14, 12)):
    """Blobs (thresholded smooth noise) and a perturbed copy: several lesions that overlap partly."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=shape)
    truth = ndimage.gaussian_filter(noise, 1.2) > 0.12
    pred = ndimage.gaussian_filter(noise + 0.8 * rng.normal(size=shape), 1.2) > 0.15
    return pred | (rng.uniform(size=shape) < 0.003), truth


@pytest.mark.parametrize("seed", range(4))
def test_lesion_detection_brute_force(seed):
    """Counts and F1 against a loop over every pair of lesions with full masks."""
    pred, truth = _random_masks(seed)
    r = lesion_detection(pred, truth, iou_threshold=0.25)
    pl, n_p = ndimage.label(pred)
    tl, n_t = ndimage.label(truth)

    def iou(a, b):
        return np.logical_and(a, b).sum() / np.logical_or(a, b).sum()

    tp = sum(max([iou(pl == i, tl == j) for j in range(1, n_t + 1)] + [0.0]) >= 0.25 for i in range(1, n_p + 1))
    fn = sum(max([iou(pl == i, tl == j) for i in range(1, n_p + 1)] + [0.0]) < 0.25 for j in range(1, n_t + 1))
    fp = n_p - tp
    assert (r.tp, r.fp, r.fn, r.n_pred, r.n_true) == (tp, fp, fn, n_p, n_t)
    denom = tp + 0.5 * (fp + fn)
    assert r.f1 == pytest.approx(1.0 if denom == 0 else tp / denom)
    assert r.n_pred > 1 and r.n_true > 1


def test_lesion_uncertainty_without_lesions():
    z = np.zeros((4, 5, 6), bool)
    out = lesion_uncertainty(z, {"pe": np.ones(z.shape)}, samples=z[None], threshold=0.5)
    assert out["center"].shape == (0, 3) and all(v.shape[0] == 0 for v in out.values())


def test_lesion_detection_no_lesions_is_one():
    z = np.zeros((5, 5, 5), bool)
    assert lesion_detection(z, z).f1 == 1.0
    one = z.copy()
    one[2, 2, 2] = True
    assert lesion_detection(one, z).f1 == 0.0 and lesion_detection(z, one).fn == 1


def test_ndsc_brute_force_and_retention_curve():
    """nDSC from its definition, and every point of the retention curve by building the retained prediction."""
    rng = np.random.default_rng(3)
    truth = rng.uniform(size=(12, 11, 9)) < 0.05
    pred = truth ^ (rng.uniform(size=truth.shape) < 0.03)
    u = rng.uniform(size=truth.shape)
    n, nt = truth.size, truth.sum()
    k = (1 - 0.001) * nt / (0.001 * (n - nt))
    tp, fp, fn = (pred & truth).sum(), (pred & ~truth).sum(), (~pred & truth).sum()
    assert normalized_dice(pred, truth) == pytest.approx(2 * tp / (k * fp + 2 * tp + fn), rel=1e-12)
    fr, vals = ndsc_retention_curve(pred, truth, u)
    order = np.argsort(u.ravel(), kind="stable")
    ps, ts = pred.ravel()[order], truth.ravel()[order]
    for f, v in zip(fr[::17], vals[::17]):
        pos = int(n * f)
        cur = np.concatenate([ps[:pos], ts[pos:]])
        assert v == pytest.approx(normalized_dice(cur, ts), rel=1e-12)
    assert vals[-1] == pytest.approx(normalized_dice(pred, truth), rel=1e-12)
    area = ndsc_retention_area(pred, truth, u)
    assert area == pytest.approx(1 - scipy_trapezoid(vals, fr), rel=1e-12)
    # an oracle ranking (errors most uncertain) has a smaller area than a random one
    assert ndsc_retention_area(pred, truth, (pred != truth) + 0.01 * u) < area
    # a mask restricts the voxels (and N)
    m = np.zeros_like(truth)
    m[2:10] = True
    assert normalized_dice(pred, truth, mask=m) == pytest.approx(normalized_dice(pred[2:10], truth[2:10]))


@pytest.mark.parametrize("levels", [3, 50])
def test_retention_curve_with_ties_keeps_raster_order(levels):
    """Uncertainty with many ties (a few levels): the retained voxels are the first in a stable sort."""
    rng = np.random.default_rng(levels)
    truth = rng.uniform(size=(9, 8, 7)) < 0.1
    pred = truth ^ (rng.uniform(size=truth.shape) < 0.05)
    u = np.floor(rng.uniform(size=truth.shape) * levels) / levels
    fr, vals = ndsc_retention_curve(pred, truth, u)
    order = np.argsort(u.ravel(), kind="stable")
    ps, ts = pred.ravel()[order], truth.ravel()[order]
    for f, v in zip(fr, vals):
        pos = int(truth.size * f)
        assert v == pytest.approx(normalized_dice(np.concatenate([ps[:pos], ts[pos:]]), ts), rel=1e-12)


def test_ndsc_empty_cases():
    z = np.zeros((4, 4), bool)
    assert normalized_dice(z, z) == 1.0
    one = z.copy()
    one[0, 0] = True
    assert normalized_dice(one, z) == 0.0  # k = 1 with an empty truth
    assert ndsc_retention_area(z, z, np.zeros((4, 4))) == pytest.approx(0.0)
    assert shifts_retention_fractions()[-1] == 1.0 and len(shifts_retention_fractions()) == 200


@pytest.mark.parametrize("spacing", [(1.0, 1.0, 1.0), (0.7, 1.3, 2.5)])
def test_surface_hd95_translation_and_symmetry(spacing):
    a = np.zeros((12, 12, 12), bool)
    a[3:8, 2:9, 4:7] = True
    for axis, shift in ((0, 2), (1, 1), (2, 3)):
        b = np.roll(a, shift, axis=axis)
        assert surface_hd95(a, b, spacing) == pytest.approx(shift * spacing[axis], rel=1e-12)
    b = np.roll(np.roll(a, 1, 0), 2, 2)
    assert surface_hd95(a, b, spacing) == surface_hd95(b, a, spacing)
    assert surface_hd95(a, a, spacing) == 0.0
    assert surface_hd95(a, b, spacing, percentile=100) >= surface_hd95(a, b, spacing)


def test_surface_hd95_empty():
    a = np.zeros((5, 5, 5), bool)
    b = a.copy()
    b[2, 2, 2] = True
    # regression: a missed structure gave inf without a word, where hd95 warns
    with pytest.warns(UserWarning, match="the target mask is empty; the distance is infinite"):
        assert math.isinf(surface_hd95(a, b))
    with pytest.warns(UserWarning, match="the pred mask is empty; the distance is infinite"):
        assert math.isinf(surface_hd95(b, a))
    with pytest.warns(UserWarning, match="both masks are empty"):
        assert math.isnan(surface_hd95(a, a))


def test_brats_rules_by_hand():
    """Both empty; empty truth; empty prediction; a small lesion found (not counted, its component no FP); the
    penalty of a false positive; volume error; torch input."""
    z = np.zeros((20, 20, 20), bool)
    r = brats_lesion_metrics(z, z)
    assert (r.dice, r.hd95, r.n_tp, r.n_fp, r.n_fn) == (1.0, 0.0, 0, 0, 0)
    big = z.copy()
    big[2:8, 2:8, 2:8] = True  # 216 mm^3
    r = brats_lesion_metrics(big, z)
    assert (r.dice, r.hd95, r.n_fp) == (0.0, 374.0, 1)
    r = brats_lesion_metrics(z, big, spacing=(1.0, 1.0, 2.0))
    assert (r.dice, r.hd95, r.n_fn, r.lesions[0].volume_mm3) == (0.0, 374.0, 1, 432.0)
    small = big.copy()
    small[15, 15, 15] = True  # 1 mm^3 lesion
    pred = big.copy()
    pred[15, 16, 15] = True  # touches the small lesion's dilation
    pred[15, 2, 15] = True  # a false positive
    r = brats_lesion_metrics(pred, small, hd_penalty=100.0)
    assert (r.n_tp, r.n_fn, r.n_fp) == (1, 0, 1)
    assert r.dice == pytest.approx(1.0 / 2) and r.hd95 == pytest.approx(100.0 / 2)
    grown = z.copy()
    grown[2:9, 2:8, 2:8] = True
    r = brats_lesion_metrics(torch.from_numpy(grown), torch.from_numpy(big), spacing=0.5, min_volume=20.0)
    assert r.volume_error_mm3 == (pytest.approx(36 * 0.125),)
    assert r.dice == pytest.approx(2 * 216 / (216 + 252))


def test_brats_matching_is_one_to_many():
    """A predicted component that bridges two ground-truth lesions matches both (BraTS counts it for each)."""
    t = np.zeros((30, 12, 12), bool)
    t[2:6, 4:8, 4:8] = True
    t[20:24, 4:8, 4:8] = True
    p = np.zeros_like(t)
    p[3:23, 5:7, 5:7] = True
    r = brats_lesion_metrics(p, t, dilation=1, min_volume=0)
    assert [les.matched for les in r.lesions] == [(1,), (1,)] and r.n_fp == 0 and r.n_tp == 2
    assert r.lesions[0].dice == pytest.approx(2 * 12 / (80 + 64))


def test_lesion_uncertainty_brute_force():
    rng = np.random.default_rng(5)
    pred, _ = _random_masks(7)
    u = rng.uniform(size=pred.shape)
    samples = np.stack([pred, pred & (rng.uniform(size=pred.shape) < 0.5), np.zeros_like(pred)])
    out = lesion_uncertainty(pred, {"pe": u}, samples=samples, threshold=0.5, spacing=(1.0, 2.0, 1.0))
    lab, n = label_lesions(pred)
    assert n > 2 and out["lesion"].tolist() == list(range(1, n + 1))
    inner = ndimage.binary_erosion(pred, border_value=1)
    for k in range(1, n + 1):
        m = lab == k
        assert out["pe_mean"][k - 1] == pytest.approx(u[m].mean())
        assert out["pe_max"][k - 1] == pytest.approx(u[m].max())
        assert out["pe_share"][k - 1] == pytest.approx((u[m] > 0.5).mean())
        assert out["pe_boundary"][k - 1] == pytest.approx(u[m & ~inner].mean())
        core = m & inner
        assert (math.isnan(out["pe_core"][k - 1]) if not core.any() else
                out["pe_core"][k - 1] == pytest.approx(u[core].mean()))
        assert out["volume_mm3"][k - 1] == 2.0 * m.sum()
        present = [bool((s & m).any()) for s in samples]
        assert out["existence"][k - 1] == pytest.approx(np.mean(present))


# -- hostile input --------------------------------------------------------------------------------------------------

def test_refuses_soft_predictions_and_mismatched_grids():
    soft = np.full((6, 6, 6), 0.4)
    hard = np.zeros((6, 6, 6), bool)
    with pytest.raises(ValueError, match="pred must be a binary mask"):
        brats_lesion_metrics(soft, hard)
    with pytest.raises(ValueError, match="same grid"):
        lesion_detection(hard, np.zeros((6, 6, 5), bool))
    with pytest.raises(ValueError, match="3-D"):
        brats_lesion_metrics(hard[0], hard[0])
    with pytest.raises(ValueError, match="connectivity"):
        label_lesions(hard, connectivity=8)
    with pytest.raises(ValueError, match="dilation"):
        brats_lesion_metrics(hard, hard, dilation=-1)
    with pytest.raises(ValueError, match="min_volume"):
        brats_lesion_metrics(hard, hard, min_volume=float("nan"))
    with pytest.raises(ValueError, match="spacing"):
        brats_lesion_metrics(hard, hard, spacing=(1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="uncertainty must be finite"):
        ndsc_retention_curve(hard, hard, np.full((6, 6, 6), np.nan))
    with pytest.raises(ValueError, match="binary"):
        binary_mask(np.array([0, 2]), "pred")  # a label map, not a mask
    with pytest.raises(ValueError, match="r "):
        normalized_dice(hard, hard, r=0.0)


@pytest.mark.slow
def test_hundred_thousand_one_voxel_lesions():
    """10^5 one-voxel lesions: every metric answers (one labelling pass, no per-lesion full-volume work)."""
    t = np.zeros((100, 100, 80), bool)
    t[::2, ::2, ::2] = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = brats_lesion_metrics(t, t, dilation=0, min_volume=0)
    assert (r.n_tp, r.n_fn, r.n_fp, r.dice, r.hd95) == (100_000, 0, 0, 1.0, 0.0)
    r = brats_lesion_metrics(np.zeros_like(t), t, dilation=0, min_volume=0)
    assert (r.n_fn, r.dice, r.hd95) == (100_000, 0.0, 374.0)
    d = lesion_detection(t, t)
    assert (d.tp, d.n_true, d.f1) == (100_000, 100_000, 1.0)
    out = lesion_uncertainty(t, {"pe": t.astype(float)}, samples=t[None])
    assert out["pe_mean"].shape == (100_000,) and out["existence"].min() == 1.0


def test_lesions_of_one_merged_prediction_share_its_distance_transform(monkeypatch):
    """One predicted component across L separate lesions: each lesion's box is the component's, and the prediction's
    surface and distance transform are computed once, not once per lesion (L + 1 transforms, not 2 L: a whole-body
    case of 256^3 voxels took 25-40 s per such lesion; found by the scale review). Each lesion's HD95 is still that
    of :func:`surface_hd95` on the lesion and the component."""
    pred = np.zeros((56, 40, 40), bool)
    pred[3:-3, 3:-3, 3:-3] = True
    target = np.zeros_like(pred)
    for i in range(4):  # 5^3 lesions 7 voxels apart: separate after the dilation of 3 (18-connected)
        target[6 + 12 * i:11 + 12 * i, 12:17, 12 + 3 * i:17 + 3 * i] = True
    calls = []
    edt = ndimage.distance_transform_edt

    def counting(x, *args, **kwargs):
        calls.append(x.shape)
        return edt(x, *args, **kwargs)

    monkeypatch.setattr(ndimage, "distance_transform_edt", counting)
    r = brats_lesion_metrics(pred, target, (1.0, 1.2, 2.0), dilation=3, min_volume=0.0)
    monkeypatch.undo()
    assert len(r.lesions) == 4 and all(les.matched == (1,) for les in r.lesions)
    assert len(calls) == 5  # was 8: the same predicted surface transformed for every lesion
    zone, _ = ndimage.label(ndimage.binary_dilation(target, ndimage.generate_binary_structure(3, 2), iterations=3),
                            ndimage.generate_binary_structure(3, 3))
    for les in r.lesions:
        assert les.hd95 == pytest.approx(surface_hd95(target & (zone == les.lesion), pred, (1.0, 1.2, 2.0)), rel=1e-12)


def test_lesion_hd95_keeps_the_areas_of_the_border_cells_only():
    """The surface areas of a lesion's box are kept for its border cells, not as a float64 volume of the box per mask
    (a whole-body component's box is the volume): 76 -> 64 bytes per voxel at the peak, most of it the distance
    transform's own (found by the scale review)."""
    import tracemalloc

    pred = np.zeros((64, 64, 64), bool)
    pred[3:-3, 3:-3, 3:-3] = True
    target = np.zeros_like(pred)
    target[10:20, 10:20, 10:20] = True
    expected = brats_lesion_metrics(pred, target, (1.0, 1.0, 1.0), dilation=3, min_volume=0.0)
    tracemalloc.start()
    try:
        got = brats_lesion_metrics(pred, target, (1.0, 1.0, 1.0), dilation=3, min_volume=0.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == expected and got.hd95 == surface_hd95(target, pred)
    assert peak < 70 * pred.size, peak / pred.size
