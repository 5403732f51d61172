"""SSN under a sliding window: what the per-window mask_fn gives, pinned against the whole volume's mask.

``IntensityMask`` runs on each window's input. Its window mask equals the crop of the whole volume's mask except at
voxels within ``smooth // 2 + dilate // 2`` of an inner window face (documented in docs/ssn.md); with
``smooth = dilate = 1`` it is the crop everywhere.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import ndimage

from monai_unc.networks import IntensityMask


def reference_mask(x: np.ndarray, threshold: float, smooth: int, dilate: int) -> np.ndarray:
    """scipy: box mean over the voxels inside the array (a normalised mean filter), threshold, box dilation."""
    inside = np.ones_like(x)
    box = ndimage.uniform_filter(x, smooth, mode="constant") / ndimage.uniform_filter(inside, smooth, mode="constant")
    m = box > threshold
    return ndimage.binary_dilation(m, np.ones((dilate,) * x.ndim, bool)) if dilate > 1 else m


def _windows(shape, size, step):
    starts = [sorted(set(list(range(0, n - size + 1, step)) + [n - size])) for n in shape]
    return list(itertools.product(*starts))


def _inner_face_distance(start, size, shape):
    grids = np.meshgrid(*[np.arange(size)] * len(shape), indexing="ij")
    dist = np.full((size,) * len(shape), np.iinfo(np.int64).max)
    for g, s0, n in zip(grids, start, shape):
        if s0 > 0:
            dist = np.minimum(dist, g)
        if s0 + size < n:
            dist = np.minimum(dist, size - 1 - g)
    return dist


@pytest.mark.parametrize("ndim", [2, 3])
@pytest.mark.parametrize("smooth, dilate", [(5, 5), (3, 1), (1, 3), (1, 1)])
def test_window_masks_agree_away_from_inner_window_faces(ndim, smooth, dilate):
    rng = np.random.default_rng(ndim * 10 + smooth + dilate)
    shape = (24,) * ndim if ndim == 3 else (40, 40)
    x = np.zeros(shape, np.float32)
    x[tuple(slice(n // 4, 3 * n // 4) for n in shape)] = 1.0
    x += rng.normal(0, 0.35, shape).astype(np.float32)
    mask = IntensityMask(threshold=0.5, smooth=smooth, dilate=dilate)
    whole = mask(torch.from_numpy(x)[None, None])[0, 0].numpy()
    np.testing.assert_array_equal(whole, reference_mask(x.astype(np.float64), 0.5, smooth, dilate))
    margin = smooth // 2 + dilate // 2
    size = 14 if ndim == 3 else 21
    differ = 0
    for start in _windows(shape, size, 5):
        crop = tuple(slice(s0, s0 + size) for s0 in start)
        window = mask(torch.from_numpy(np.ascontiguousarray(x[crop]))[None, None])[0, 0].numpy()
        np.testing.assert_array_equal(window, reference_mask(x[crop].astype(np.float64), 0.5, smooth, dilate))
        diff = window != whole[crop]
        assert not diff[_inner_face_distance(start, size, shape) >= margin].any()
        differ += int(diff.sum())
    if margin == 0:
        assert differ == 0  # a per-voxel mask: every window agrees everywhere


def test_windows_disagree_next_to_an_inner_face():
    """The documented case: a bright line just outside the window reaches the whole volume's box mean only."""
    x = torch.zeros(1, 1, 30, 30)
    x[..., 21] = 1.0  # column 21: outside the window [0, 21)
    mask = IntensityMask(threshold=0.1, smooth=5, dilate=1)
    whole = mask(x)[0, 0]
    window = mask(x[..., :21])[0, 0]
    assert bool(whole[:, 19:21].all()) and not bool(window[:, 19:21].any())  # within smooth // 2 of the face
    assert torch.equal(window[:, :19], whole[:, :19])
