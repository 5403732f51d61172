"""A deterministic synthetic multi-lesion cohort (BraTS labels 1/2/3) for the lesion-wise metrics' tests.

Each case is a label map of tumours (an edema shell, label 2, around enhancing tumour 3 around necrosis 1)
and its "prediction" (the tumours shifted, shrunk or grown, some missed, some false positives), with anisotropic
spacing and a voxel uncertainty map without ties. The cases cover: several lesions per case, touching lesions,
lesions merged by the BraTS dilation, lesions below the BraTS size threshold, empty truth, empty prediction, both
empty, and anisotropic spacing. `docs/lesions.md` and `tests/metrics/data/make_lesion_reference.py` build the same
cohort.
"""

from __future__ import annotations

import numpy as np

SHAPE = (40, 36, 30)
SPACINGS = [(1.0, 1.0, 1.0), (0.8, 1.0, 2.5), (1.2, 0.9, 1.5), (1.0, 1.0, 1.0), (0.5, 0.5, 3.0), (1.0, 1.0, 1.0),
            (1.0, 1.0, 1.0), (1.5, 1.5, 1.5)]
CASES = [f"case{i:02d}" for i in range(len(SPACINGS))]


def _ball(shape: tuple, center: tuple, radius: float) -> np.ndarray:
    grid = np.ogrid[tuple(slice(0, s) for s in shape)]
    return sum((g - c) ** 2 for g, c in zip(grid, center)) <= radius**2


def _tumour(labels: np.ndarray, center: tuple, radius: float) -> None:
    """Edema (2) within ``radius``, enhancing tumour (3) within 0.6 r, necrosis (1) within 0.3 r."""
    outer = _ball(labels.shape, center, radius)
    core = _ball(labels.shape, center, 0.6 * radius)
    inner = _ball(labels.shape, center, 0.3 * radius)
    labels[outer & (labels == 0)] = 2
    labels[core] = 3
    labels[inner] = 1


def make_case(index: int) -> tuple[np.ndarray, np.ndarray, tuple, np.ndarray]:
    """``(pred, truth, spacing, uncertainty)`` of case ``index`` (uint8 label maps of ``SHAPE``)."""
    rng = np.random.default_rng(1000 + index)
    truth = np.zeros(SHAPE, np.uint8)
    pred = np.zeros(SHAPE, np.uint8)
    kind = index % 8
    n = 0 if kind in (2, 6) else int(rng.integers(3, 7))
    for _ in range(n):
        c = tuple(int(rng.integers(5, s - 5)) for s in SHAPE)
        r = float(rng.uniform(1.0, 4.5))
        _tumour(truth, c, r)
        fate = rng.uniform()
        if fate < 0.15 or kind == 3:  # missed (case 3 predicts nothing)
            continue
        shift = tuple(int(v) for v in rng.integers(-1, 2, size=3))
        r_pred = r * float(rng.uniform(0.7, 1.3))
        _tumour(pred, tuple(a + b for a, b in zip(c, shift)), r_pred)
    if kind == 1:  # two touching lesions, and two lesions merged by the dilation (3 voxels apart)
        _tumour(truth, (10, 10, 10), 3.0)
        _tumour(truth, (10, 16, 10), 3.0)
        _tumour(truth, (28, 10, 20), 2.5)
        _tumour(truth, (28, 17, 20), 2.5)
        _tumour(pred, (10, 11, 10), 3.2)
        _tumour(pred, (28, 11, 20), 2.5)
    if kind == 4:  # tiny lesions, below 50 mm^3, one found and one missed; a one-voxel false positive
        truth[5, 5, 5] = 3
        truth[34, 30, 24:26] = 1
        pred[5, 5, 5] = 3
        pred[20, 3, 3] = 2
    if kind in (2, 5):  # false positives only (2: empty truth); 5 adds them to its lesions
        for _ in range(3):
            c = tuple(int(rng.integers(4, s - 4)) for s in SHAPE)
            _tumour(pred, c, float(rng.uniform(1.0, 3.0)))
    # kind 6: truth and prediction both empty; kind 3: empty prediction
    u = rng.uniform(0.0, 0.2, size=SHAPE)
    u += 0.6 * (pred != truth) * rng.uniform(0.5, 1.0, size=SHAPE)
    return pred, truth, SPACINGS[index], u


#: the regions of BraTS 2023 labels (1 necrosis, 2 edema, 3 enhancing tumour)
REGIONS = {"WT": (1, 2, 3), "TC": (1, 3), "ET": (3,)}


def region_mask(labels: np.ndarray, region: str) -> np.ndarray:
    """The binary mask of a BraTS region of a label map."""
    return np.isin(labels, REGIONS[region])
