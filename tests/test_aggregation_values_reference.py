"""``monai_unc.aggregation`` against the ValUES authors' code and against brute-force loops (review 67).

``data/values_aggregation_reference.json`` holds the numbers of the authors' ``patch_level_aggregation``,
``image_level_aggregation`` and ``threshold_aggregation`` (github.com/IML-DKFZ/values) on small random 2D and 3D maps,
frozen by ``data/make_values_aggregation_reference.py``. The brute-force references below visit every box with explicit
loops and share no code with the implementation. The definitional differences (docs/case_level.md, "Differences from
the authors' code") are asserted as such.
"""

from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from monai_unc.aggregation import aggregate, fit_threshold, max_patch

REFERENCE = json.loads((Path(__file__).parent / "data" / "values_aggregation_reference.json").read_text())
CASES = {c["name"]: c for c in REFERENCE["cases"]}


def _sizes(patch, ndim):
    return [patch] * ndim if isinstance(patch, int) else list(patch)


@pytest.mark.parametrize("name", sorted(CASES))
def test_equal_to_the_authors_code(name):
    case = CASES[name]
    u = np.asarray(case["uncertainty"])
    x = u[None, None]
    k = case["patch_size"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # method="sum" warns that it tracks object size
        got = {m: float(aggregate(x, m, patch_size=k)[0]) for m in ("sum", "patch_sum", "patch_mean")}
    got["mean"] = float(aggregate(x, "mean")[0])
    got["threshold_mean"] = float(aggregate(x, "threshold", threshold=case["threshold"])[0])
    for key in ("sum", "mean", "patch_sum", "threshold_mean"):
        assert got[key] == pytest.approx(case[key], rel=1e-12, abs=1e-12), key
    sizes = _sizes(k, u.ndim)
    clipped = [min(s, n) for s, n in zip(sizes, u.shape)]
    # patch_mean divides by the box that fits the image; the authors divide by the full patch volume (the two agree
    # whenever the box fits)
    assert got["patch_mean"] == pytest.approx(case["patch_mean"] * np.prod(sizes) / np.prod(clipped), rel=1e-12)
    assert (got["patch_mean"] == pytest.approx(case["patch_mean"], rel=1e-12)) == (sizes == clipped)
    # where the best box is: the authors take the first box within np.isclose of the maximum, here the first box
    # with the largest computed sum; on these maps (ties included) the two are the same box
    res = max_patch(x, patch_size=k)
    assert res.start[0].tolist() == case["patch_start"]


def test_fit_threshold_equal_to_the_authors_procedure():
    ref = REFERENCE["fit_threshold"]
    maps = [np.asarray(m) for m in ref["uncertainty"]]
    preds = [np.asarray(p) for p in ref["pred"]]
    assert fit_threshold(maps, preds) == pytest.approx(ref["threshold"], rel=1e-12)


# -------------------------------------------------------------------------------------------- brute-force references


def _brute_patch(u, sizes, mask=None, mean=False):
    """The best box score and its start, visiting every stride-1 box of ``sizes`` (clipped to the image) in C order.

    With a mask, the voxels outside count as zero, boxes without a mask voxel are skipped, and the mean divides by
    the mask voxels in the box."""
    sizes = [min(s, n) for s, n in zip(sizes, u.shape)]
    best, where = -np.inf, None
    for start in itertools.product(*[range(n - s + 1) for n, s in zip(u.shape, sizes)]):
        total, count = 0.0, 0
        for offset in itertools.product(*[range(s) for s in sizes]):
            voxel = tuple(a + b for a, b in zip(start, offset))
            if mask is None or mask[voxel]:
                total += float(u[voxel])
                count += 1
        if count == 0:
            continue
        value = total / (count if mask is not None else np.prod(sizes)) if mean else total
        if value > best:
            best, where = value, list(start)
    return (np.nan, [-1] * u.ndim) if where is None else (best, where)


PATCH_CASES = [
    ((7, 5), 1),  # patch size 1: the largest voxel
    ((6, 7), 3),  # odd sizes, boxes up to the last row and column (no padding)
    ((5, 6), 10),  # box larger than the image: the whole image
    ((9, 4), (2, 7)),  # anisotropic box, larger than the image along one axis only
    ((4, 5, 3), 2),
    ((3, 6, 5), (1, 3, 2)),
    ((4, 3, 5), 10),
]


@pytest.mark.parametrize("shape, patch", PATCH_CASES)
@pytest.mark.parametrize("masked", [False, True])
def test_patch_methods_equal_the_brute_force_loop(shape, patch, masked):
    rng = np.random.default_rng(len(shape) * 100 + sum(shape))
    u = np.round(rng.random((2, 1, *shape)), 1)  # one decimal: many equal boxes
    mask = None
    if masked:
        mask = rng.random((2, 1, *shape)) < 0.3
        mask[1] = False  # case 1: an empty mask
        mask[0, 0, (0,) * len(shape)] = True
    sizes = _sizes(patch, len(shape))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for reduction in ("sum", "mean"):
            res = max_patch(u, patch_size=patch, reduction=reduction, mask=mask)
            for b in range(2):
                want, start = _brute_patch(u[b, 0], sizes, None if mask is None else mask[b, 0], reduction == "mean")
                if np.isnan(want):
                    assert np.isnan(res.score[b]) and res.start[b].tolist() == start
                    continue
                assert res.score[b] == pytest.approx(want, rel=1e-12, abs=1e-12)
                # equal box scores may be found in another order: the box returned has the best score
                box = tuple(slice(s, s + k) for s, k in zip(res.start[b], res.size))
                vals, inside = u[b, 0][box], (np.ones_like(u[b, 0], bool) if mask is None else mask[b, 0])[box]
                own = vals[inside].sum() / (inside.sum() if mask is not None else vals.size) if reduction == "mean" \
                    else vals[inside].sum()
                assert own == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_threshold_ties_and_float16_compare_the_stored_values_exactly():
    """``u >= t`` keeps a voxel equal to ``t`` (as the authors' code), and a float16 voxel is compared as the value
    it holds: float16(0.1) = 0.0999755859375 lies below ``t = 0.1``. (The authors' ``image >= threshold`` compares
    float16 maps in float16, where both round to the same value; see docs/case_level.md.)"""
    u = np.array([[0.25, 0.5], [0.5, 0.75]])[None, None]
    assert float(aggregate(u, "threshold", threshold=0.5)[0]) == pytest.approx(0.5833333333333334)
    half = np.array([[0.1, 0.2], [0.3, 0.7]], dtype=np.float16)[None, None]
    exact = half.astype(np.float64)
    assert float(aggregate(half, "threshold", threshold=0.1)[0]) == pytest.approx(exact[exact >= 0.1].mean())
    assert float(aggregate(half, "threshold", threshold=float(half[0, 0, 0, 0]))[0]) == pytest.approx(exact.mean())


@pytest.mark.parametrize("method", ["mean", "patch_sum", "patch_mean"])
def test_float16_bfloat16_and_batches_score_as_float64_per_case(method):
    u = np.random.default_rng(5).random((3, 1, 6, 5, 4)).astype(np.float16)
    want = [float(aggregate(u[b:b + 1].astype(np.float64), method, patch_size=3)[0]) for b in range(3)]
    np.testing.assert_allclose(aggregate(u, method, patch_size=3), want, rtol=1e-15)
    t = torch.from_numpy(u.astype(np.float32)).bfloat16()
    want_bf = [float(aggregate(t[b:b + 1].double().numpy(), method, patch_size=3)[0]) for b in range(3)]
    got = aggregate(t, method, patch_size=3)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), want_bf, rtol=1e-15)


def test_constant_map_scores_and_first_box():
    c = np.full((1, 1, 7, 12), 0.3)
    res = max_patch(c, patch_size=(3, 10))
    assert float(res.score[0]) == pytest.approx(9.0) and res.start[0].tolist() == [0, 0]
    assert float(aggregate(c, "patch_mean", patch_size=20)[0]) == pytest.approx(0.3)
    assert float(aggregate(c, "threshold", threshold=0.3)[0]) == pytest.approx(0.3)
