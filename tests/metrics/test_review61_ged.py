"""The GED's per-class averaging: ``classes="present"`` (default) and ``classes="all"`` (review 61).

``"present"`` averages a pair's per-class distances over the foreground classes present in either mask (the
Probabilistic U-Net's Cityscapes evaluation, Kohl et al.); ``"all"`` over every foreground class with distance 0 for a
class absent from both masks, as PHiSeg's evaluation code does (Baumgartner et al.: ``1 - sum_l IoU_l / nlabels`` over
``label_range = 1 .. nlabels``, IoU 1 when both masks lack the label, 0 when one does). Both are checked against a
brute-force numpy loop over pairs and labels, empty masks included.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.metrics import GED_CLASSES, GEDMetric, ged, ged_nonempty_iou, hungarian_iou


def _pair_distance(m1: np.ndarray, m2: np.ndarray, num_classes: int, classes: str, distance: str) -> float:
    per_label, counted = [], 0
    for lbl in range(1, num_classes):
        x, y = m1 == lbl, m2 == lbl
        inter, sx, sy = np.sum(x & y), np.sum(x), np.sum(y)
        if sx == 0 and sy == 0:
            per_label.append(1.0)  # PHiSeg: IoU 1 for a label absent from both
            continue
        counted += 1
        per_label.append(inter / (sx + sy - inter) if distance == "iou" else 2 * inter / (sx + sy))
    if classes == "all":
        return 1.0 - sum(per_label) / (num_classes - 1)
    if counted == 0:
        return 0.0  # two empty masks
    return sum(1.0 - s for s, lbl in zip(per_label, range(1, num_classes))
               if np.any(m1 == lbl) or np.any(m2 == lbl)) / counted


def _brute_ged(refs, smps, num_classes, classes, distance="iou"):
    def mean(xs, ys):
        return float(np.mean([_pair_distance(x, y, num_classes, classes, distance) for x in xs for y in ys]))
    cross, ref, smp = mean(refs, smps), mean(refs, refs), mean(smps, smps)
    return 2 * cross - ref - smp, cross, ref, smp


def _sets(seed: int, num_classes: int):
    rng = np.random.default_rng(seed)
    refs = rng.integers(0, num_classes, size=(3, 6, 7))
    smps = rng.integers(0, num_classes, size=(4, 6, 7))
    refs[0] = 0  # an empty reference
    smps[1] = 0  # an empty sample
    refs[1][refs[1] == num_classes - 1] = 1  # a reference without the last class
    smps[2][smps[2] >= 2] = 0  # a sample of class 1 only
    return refs, smps


@pytest.mark.parametrize("classes", GED_CLASSES)
@pytest.mark.parametrize("distance", ["iou", "dice"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ged_matches_a_brute_force_loop(classes, distance, seed):
    num_classes = 4
    refs, smps = _sets(seed, num_classes)
    got = ged(refs, smps, distance=distance, num_classes=num_classes, classes=classes)
    want = _brute_ged(list(refs), list(smps), num_classes, classes, distance)
    np.testing.assert_allclose(tuple(got), want, rtol=0, atol=1e-12)


def test_the_conventions_differ_by_a_class_absent_from_a_pair():
    refs, smps = _sets(0, 4)
    present = ged(refs, smps, num_classes=4)
    assert tuple(present) == tuple(ged(refs, smps, num_classes=4, classes="present"))  # the default
    assert tuple(present) == tuple(ged(refs, smps))
    every = ged(refs, smps, num_classes=4, classes="all")
    assert abs(present.cross - every.cross) > 1e-3
    # one foreground class: the same number either way; a declared class no mask holds scales "all" only
    binary = (refs > 0).astype(np.int64), (smps > 0).astype(np.int64)
    assert tuple(ged(*binary, num_classes=2, classes="all")) == pytest.approx(tuple(ged(*binary)), abs=1e-15)
    np.testing.assert_allclose(tuple(ged(*binary, num_classes=5, classes="all")), [v / 4 for v in ged(*binary)],
                               atol=1e-15)


@pytest.mark.parametrize("classes", GED_CLASSES)
def test_empty_masks(classes):
    empty = np.zeros((2, 5, 5), dtype=np.int64)
    assert tuple(ged(empty, empty, num_classes=3, classes=classes)) == (0.0, 0.0, 0.0, 0.0)
    full = empty.copy()
    full[:, 1:3, 1:3] = 2
    got = ged(empty, full, num_classes=3, classes=classes)
    want = _brute_ged(list(empty), list(full), 3, classes)
    np.testing.assert_allclose(tuple(got), want, atol=1e-15)
    assert got.cross == (1.0 if classes == "present" else 0.5)  # one of two foreground classes missed


@pytest.mark.parametrize("classes", GED_CLASSES)
def test_nonempty_iou_and_the_metric_class_follow_the_option(classes):
    refs, smps = _sets(3, 4)
    keep_r, keep_s = refs[(refs > 0).any(axis=(1, 2))], smps[(smps > 0).any(axis=(1, 2))]
    got = ged_nonempty_iou(refs, smps, num_classes=4, classes=classes)
    np.testing.assert_allclose(tuple(got), _brute_ged(list(keep_r), list(keep_s), 4, classes), atol=1e-12)
    metric = GEDMetric(num_classes=4, classes=classes, return_terms=True, reduction="none")
    values = metric(y_pred=torch.as_tensor(smps)[None], y=torch.as_tensor(refs)[None])
    np.testing.assert_allclose(values[0].numpy(), _brute_ged(list(refs), list(smps), 4, classes), atol=1e-12)


def test_bad_options_are_refused_naming_the_argument():
    refs, smps = _sets(0, 3)
    with pytest.raises(ValueError, match="classes must be one of"):
        ged(refs, smps, classes="every")
    with pytest.raises(ValueError, match="num_classes is required with classes='all'"):
        ged(refs, smps, classes="all")
    with pytest.raises(ValueError, match="num_classes is required"):
        ged_nonempty_iou(refs, smps, classes="all")
    with pytest.raises(ValueError, match="classes must be one of"):
        GEDMetric(classes=None)
    with pytest.raises(ValueError, match="num_classes is required"):
        GEDMetric(classes="all")
    with pytest.raises(ValueError, match="does not apply to variant='detection'"):
        GEDMetric(variant="detection", classes="all")


@pytest.mark.parametrize("classes", GED_CLASSES)
def test_hungarian_iou_follows_the_option(classes):
    from scipy.optimize import linear_sum_assignment

    refs, smps = _sets(4, 4)
    reps_r, reps_s = np.repeat(refs, 4, axis=0), np.repeat(smps, 3, axis=0)  # lcm(3, 4) = 12 members each
    iou = np.array([[1.0 - _pair_distance(x, y, 4, classes, "iou") for y in reps_s] for x in reps_r])
    rows, cols = linear_sum_assignment(-iou)
    got = hungarian_iou(refs, smps, num_classes=4, classes=classes)
    assert got == pytest.approx(float(iou[rows, cols].mean()), abs=1e-12)
    with pytest.raises(ValueError, match="num_classes is required"):
        hungarian_iou(refs, smps, classes="all")
