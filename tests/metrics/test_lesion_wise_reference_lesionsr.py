"""BraTS 2023 lesion-wise Dice, HD95 and TP / FP / FN against a brute-force reference, scenario by scenario.

The reference follows the rule of the BraTS 2023 lesion-wise metrics code (R. Saluja et al.) as its README and
source describe it, written from scratch with ``scipy.ndimage.label`` and numpy: the ground truth grown by shifting
it into its 18 neighbours ``dilation`` times, its 26-connected zones the merged lesions, each merged lesion grown on
its own, every predicted 26-component touching that growth matched, Dice and HD95 per lesion on the full volume,
lesions of at most ``min_volume`` mm^3 (``count * sx * sy * sz``) left out of the mean but their matches no false
positives. The surface HD95 is the all-pairs reference of ``test_lesions_hostile``.

Beside the reference, every scenario states the numbers by hand, so that a reference and an implementation sharing
one misreading would still fail; among them the cases where the lesion-wise Dice is not the voxel Dice (the
``lesion_dice_1 = 1.0`` beside ``dice_1 < 1`` of a toy cohort whose lesions are all below ``min_volume``).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import ndimage

from monai_unc.metrics.lesions import brats_lesion_metrics
from tests.metrics.test_lesions_hostile import _hd_reference

PENALTY = 374.0
FULL = np.ones((3, 3, 3), bool)
#: the 18 neighbours: offsets with one or two non-zero coordinates
EDGE_OFFSETS = [o for o in itertools.product((-1, 0, 1), repeat=3) if 0 < sum(x != 0 for x in o) <= 2]


def _shift(mask: np.ndarray, offset: tuple[int, ...]) -> np.ndarray:
    """``mask`` moved by ``offset`` voxels, nothing wrapped around (zeros come in)."""
    out = np.zeros_like(mask)
    src = tuple(slice(max(0, -o), mask.shape[d] - max(0, o)) for d, o in enumerate(offset))
    dst = tuple(slice(max(0, o), mask.shape[d] - max(0, -o)) for d, o in enumerate(offset))
    out[dst] = mask[src]
    return out


def _grow(mask: np.ndarray, iterations: int) -> np.ndarray:
    m = mask.copy()
    for _ in range(iterations):
        m = m | np.logical_or.reduce([_shift(m, o) for o in EDGE_OFFSETS])
    return m


def brats_reference(pred: np.ndarray, gt: np.ndarray, spacing: tuple, dilation: int, min_volume: float) -> dict:
    zone, n_zone = ndimage.label(_grow(gt, dilation), FULL)
    merged = np.where(gt, zone, 0)
    p_cc, n_pred = ndimage.label(pred, FULL)
    matched_any: set[int] = set()
    per = []
    for k in range(1, n_zone + 1):
        lesion = merged == k
        hit = sorted(set(np.unique(p_cc[_grow(lesion, dilation)]).tolist()) - {0})
        matched_any |= set(hit)
        union = np.isin(p_cc, hit)
        dice = 2.0 * np.count_nonzero(lesion & union) / (np.count_nonzero(lesion) + np.count_nonzero(union))
        hd = _hd_reference(lesion, union, spacing) if hit else PENALTY
        volume = float(np.count_nonzero(lesion)) * spacing[0] * spacing[1] * spacing[2]
        per.append({"volume": volume, "dice": dice, "hd95": hd, "matched": bool(hit)})
    counted = [p for p in per if p["volume"] > min_volume]
    n_fp = n_pred - len(matched_any)
    n = len(counted) + n_fp
    return {"dice": 1.0 if n == 0 else sum(p["dice"] for p in counted) / n,
            "hd95": 0.0 if n == 0 else (sum(p["hd95"] for p in counted) + PENALTY * n_fp) / n,
            "n_tp": sum(p["matched"] for p in counted), "n_fn": sum(not p["matched"] for p in counted),
            "n_fp": n_fp, "n_lesions": n_zone}


def _box(shape, *corners):
    m = np.zeros(shape, bool)
    for lo, hi in corners:
        m[tuple(slice(a, b) for a, b in zip(lo, hi))] = True
    return m


def _voxel_dice(pred, gt):
    return 2.0 * np.count_nonzero(pred & gt) / (np.count_nonzero(pred) + np.count_nonzero(gt))


SHAPE = (14, 12, 10)
A = ((2, 2, 2), (5, 5, 5))  # 27 voxels
B = ((7, 2, 2), (10, 5, 5))  # 27 voxels, a gap of two voxels along x from A
FAR = ((10, 8, 6), (13, 11, 9))  # 27 voxels, far from A and B


def _scenarios():
    """(name, pred, gt, spacing, dilation, min_volume, hand-computed result or None)."""
    gt_ab = _box(SHAPE, A, B)
    yield ("merged_by_dilation", _box(SHAPE, A), gt_ab, (1.0, 1.0, 1.0), 3, 10.0,
           # A and B one lesion: its Dice against A alone, one TP
           {"dice": 2 * 27 / (54 + 27), "n_tp": 1, "n_fn": 0, "n_fp": 0, "n_lesions": 1})
    yield ("not_merged_without_dilation", _box(SHAPE, A), gt_ab, (1.0, 1.0, 1.0), 0, 10.0,
           {"dice": 0.5, "hd95": PENALTY / 2, "n_tp": 1, "n_fn": 1, "n_fp": 0, "n_lesions": 2})
    split = _box(SHAPE, ((2, 2, 2), (5, 5, 3)), ((2, 2, 4), (5, 5, 5)))  # A without its middle plane: two parts
    yield ("split_prediction", split, _box(SHAPE, A), (1.0, 1.0, 1.0), 0, 10.0,
           {"dice": 2 * 18 / (27 + 18), "n_tp": 1, "n_fn": 0, "n_fp": 0, "n_lesions": 1})
    yield ("empty_truth", _box(SHAPE, A, FAR), np.zeros(SHAPE, bool), (1.0, 1.0, 1.0), 3, 10.0,
           {"dice": 0.0, "hd95": PENALTY, "n_tp": 0, "n_fn": 0, "n_fp": 2, "n_lesions": 0})
    yield ("empty_prediction", np.zeros(SHAPE, bool), gt_ab, (1.0, 1.0, 1.0), 0, 10.0,
           {"dice": 0.0, "hd95": PENALTY, "n_tp": 0, "n_fn": 2, "n_fp": 0, "n_lesions": 2})
    yield ("both_empty", np.zeros(SHAPE, bool), np.zeros(SHAPE, bool), (1.0, 1.0, 1.0), 3, 10.0,
           {"dice": 1.0, "hd95": 0.0, "n_tp": 0, "n_fn": 0, "n_fp": 0, "n_lesions": 0})
    near = _box(SHAPE, ((2, 6, 2), (5, 8, 5)))  # two voxels beside A, not touching it
    yield ("near_miss_matched_by_dilation", near, _box(SHAPE, A), (1.0, 1.0, 1.0), 3, 10.0,
           # matched (a TP) with Dice 0: the lesion-wise Dice is 0, no false positive
           {"dice": 0.0, "n_tp": 1, "n_fn": 0, "n_fp": 0, "n_lesions": 1})
    yield ("near_miss_without_dilation", near, _box(SHAPE, A), (1.0, 1.0, 1.0), 1, 10.0,
           {"dice": 0.0, "hd95": PENALTY, "n_tp": 0, "n_fn": 1, "n_fp": 1, "n_lesions": 1})
    # 27 voxels of 1 x 1 x 1.85 mm = 49.95 mm^3 <= 50: the lesion is not counted, its match no false positive; the
    # lesion-wise Dice is 1 whatever the voxel Dice (here 0.6)
    part = _box(SHAPE, ((2, 2, 2), (5, 5, 3)))
    yield ("below_min_volume", part, _box(SHAPE, A), (1.0, 1.0, 1.85), 3, 50.0,
           {"dice": 1.0, "hd95": 0.0, "n_tp": 0, "n_fn": 0, "n_fp": 0, "n_lesions": 1})
    # the same masks on 1 x 1 x 1.9 mm voxels: 51.3 mm^3, counted
    yield ("above_min_volume_anisotropic", part, _box(SHAPE, A), (1.0, 1.0, 1.9), 3, 50.0,
           {"dice": 2 * 9 / 36, "n_tp": 1, "n_fn": 0, "n_fp": 0, "n_lesions": 1})
    # a small lesion missed beside a large one found: the miss is not counted (0.5 mm voxels)
    small_missed = _box(SHAPE, ((2, 2, 2), (4, 4, 4)), FAR)  # 8 voxels (1 mm^3) and 27 (3.375 mm^3)
    yield ("small_lesion_missed_not_counted", _box(SHAPE, FAR), small_missed, (0.5, 0.5, 0.5), 0, 3.0,
           {"dice": 1.0, "hd95": 0.0, "n_tp": 1, "n_fn": 0, "n_fp": 0, "n_lesions": 2})


SCENARIOS = list(_scenarios())


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_lesion_wise_metrics_equal_the_brute_force_reference(scenario):
    name, pred, gt, spacing, dilation, min_volume, hand = scenario
    got = brats_lesion_metrics(pred, gt, spacing, dilation, min_volume)
    ref = brats_reference(pred, gt, spacing, dilation, min_volume)
    assert (got.n_tp, got.n_fn, got.n_fp, len(got.lesions)) == (ref["n_tp"], ref["n_fn"], ref["n_fp"],
                                                                ref["n_lesions"]), name
    assert got.dice == pytest.approx(ref["dice"], rel=1e-12, abs=1e-15), name
    assert got.hd95 == pytest.approx(ref["hd95"], rel=1e-12, abs=1e-12), name
    for key, value in hand.items():
        have = len(got.lesions) if key == "n_lesions" else getattr(got, key)
        assert have == pytest.approx(value, rel=1e-12, abs=1e-15), (name, key)


def test_the_lesion_wise_dice_differs_from_the_voxel_dice_where_the_rule_says():
    """One counted lesion, every predicted component matched to it: the lesion-wise Dice is the voxel Dice. It differs
    when a lesion is below ``min_volume`` (not counted: 1 with nothing else), when lesions are averaged (each weighs
    one, whatever its size) and when a false positive adds a 0."""
    gt = _box(SHAPE, A)
    pred = _box(SHAPE, ((2, 2, 2), (5, 5, 4)))
    r = brats_lesion_metrics(pred, gt, (1.0, 1.0, 1.0), 3, 10.0)
    assert r.dice == pytest.approx(_voxel_dice(pred, gt), rel=1e-12)
    assert brats_lesion_metrics(pred, gt, (1.0, 1.0, 1.0), 3, 27.0).dice == 1.0  # 27 mm^3 <= 27: not counted
    big, small = _box(SHAPE, ((1, 1, 1), (7, 7, 7))), _box(SHAPE, FAR)
    r = brats_lesion_metrics(big | _box(SHAPE, ((10, 8, 6), (13, 11, 7))), big | small, (1.0, 1.0, 1.0), 0, 5.0)
    assert r.dice == pytest.approx((1.0 + 2 * 9 / 36) / 2, rel=1e-12)  # the mean of the lesions' Dice
    assert _voxel_dice(big | _box(SHAPE, ((10, 8, 6), (13, 11, 7))), big | small) > r.dice  # the big one dominates
    r = brats_lesion_metrics(gt | _box(SHAPE, FAR), gt, (1.0, 1.0, 1.0), 1, 10.0)
    assert (r.dice, r.n_fp) == (0.5, 1)  # a perfect lesion and a false positive


@pytest.mark.parametrize("seed", range(6))
def test_random_cases_equal_the_reference(seed):
    """Random blobs (merges, splits, border contact) on anisotropic grids with dilation 0-3 and minimum volumes that
    leave some lesions out."""
    rng = np.random.default_rng(4200 + seed)
    shape = (9, 8, 7)
    gt = ndimage.binary_dilation(rng.uniform(size=shape) < 0.04, FULL if seed % 2 else None)
    pred = gt ^ (rng.uniform(size=shape) < 0.06)
    if seed % 3 == 0:
        pred = np.roll(pred, 1, axis=seed % 3)
    spacing = [(1.0, 1.0, 1.0), (0.8, 0.8, 2.5), (2.0, 0.7, 1.2)][seed % 3]
    dilation, min_volume = seed % 4, [0.0, 3.0, 8.0][seed % 3]
    got = brats_lesion_metrics(pred, gt, spacing, dilation, min_volume)
    ref = brats_reference(pred, gt, spacing, dilation, min_volume)
    assert (got.n_tp, got.n_fn, got.n_fp) == (ref["n_tp"], ref["n_fn"], ref["n_fp"])
    assert got.dice == pytest.approx(ref["dice"], rel=1e-12, abs=1e-15)
    assert got.hd95 == pytest.approx(ref["hd95"], rel=1e-12, abs=1e-12)
