"""Hungarian-matched IoU against brute force over every matching of the repeated sets."""

import itertools
import math

import numpy as np
import pytest

from monai_unc.metrics import hungarian_iou
from monai_unc.metrics.ambiguity import _best_matching_cost


def _iou_by_hand(x: np.ndarray, y: np.ndarray) -> float:
    """Per-class IoU averaged over the foreground classes present in either mask; 1 for two empty masks."""
    scores = []
    for c in sorted(set(np.unique(x)) | set(np.unique(y))):
        if c == 0:
            continue
        xc, yc = x == c, y == c
        scores.append((xc & yc).sum() / (xc | yc).sum())
    return float(np.mean(scores)) if scores else 1.0


def _brute_force(refs: np.ndarray, samples: np.ndarray) -> float:
    n = math.lcm(len(refs), len(samples))
    a = [refs[i // (n // len(refs))] for i in range(n)]
    b = [samples[j // (n // len(samples))] for j in range(n)]
    iou = np.array([[_iou_by_hand(x, y) for y in b] for x in a])
    return max(iou[np.arange(n), list(p)].mean() for p in itertools.permutations(range(n)))


@pytest.mark.parametrize("r,s", [(1, 1), (2, 3), (3, 2), (2, 4), (4, 2), (1, 5), (3, 3), (4, 8)])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_matches_brute_force(r, s, n_classes):
    assert math.lcm(r, s) <= 8  # 8! matchings at most
    rng = np.random.default_rng(10 * r + s + 100 * n_classes)
    shape = (5, 6) if (r + s) % 2 else (3, 4, 4)  # 2D and 3D
    refs = rng.integers(0, n_classes, size=(r, *shape)) * (rng.random((r, *shape)) < 0.5)
    samples = rng.integers(0, n_classes, size=(s, *shape)) * (rng.random((s, *shape)) < 0.5)
    refs[0] = 0  # an empty rater
    assert hungarian_iou(refs, samples) == pytest.approx(_brute_force(refs, samples), abs=1e-12)


def test_transport_programme_equals_the_assignment():
    # the path of large lcm(R, S) (a linear programme) gives the Hungarian algorithm's optimum
    rng = np.random.default_rng(0)
    for r, s in [(2, 3), (4, 6), (5, 7), (3, 8)]:
        cost = rng.random((r, s))
        cost[:, 0] = cost[0, 0]  # ties
        assert _best_matching_cost(cost, max_assignment=0) == pytest.approx(_best_matching_cost(cost), abs=1e-9)


def test_properties():
    rng = np.random.default_rng(1)
    refs = (rng.random((4, 8, 8)) < 0.3).astype(np.int64)
    assert hungarian_iou(refs, refs) == 1.0
    assert hungarian_iou(refs, np.concatenate([refs, refs])[::-1]) == pytest.approx(1.0)  # same proportions
    samples = (rng.random((6, 8, 8)) < 0.3).astype(np.int64)
    assert hungarian_iou(refs, samples) == pytest.approx(hungarian_iou(samples, refs), abs=1e-12)
    assert hungarian_iou(refs, samples[rng.permutation(6)]) == pytest.approx(hungarian_iou(refs, samples), abs=1e-12)
    # disjoint non-empty masks: 0; empty against empty: 1
    a, b = np.zeros((1, 4, 4), np.int64), np.zeros((1, 4, 4), np.int64)
    a[0, 0], b[0, 1] = 1, 1
    assert hungarian_iou(a, b) == 0.0
    assert hungarian_iou(np.zeros((2, 3, 3), np.int64), np.zeros((3, 3, 3), np.int64)) == 1.0
    # lcm 2062 (the transport programme): a rater's mask and an empty rater, 1031 copies each, against 500 samples
    # with the mask and 531 empty ones, twice each: 1000 masks matched to the mask, 1031 empties to the empty rater
    big = np.zeros((1031, 2, 2), np.int64)
    big[:500, 0, 0] = 1
    two = np.zeros((2, 2, 2), np.int64)
    two[0, 0, 0] = 1
    assert hungarian_iou(two, big) == pytest.approx(2031 / 2062, abs=1e-9)


def test_bad_input_named():
    with pytest.raises(ValueError, match="share the spatial shape"):
        hungarian_iou(np.zeros((2, 3, 3), np.int64), np.zeros((2, 3, 4), np.int64))
    with pytest.raises(ValueError, match="references"):
        hungarian_iou(np.zeros((0, 3, 3), np.int64), np.zeros((2, 3, 3), np.int64))
