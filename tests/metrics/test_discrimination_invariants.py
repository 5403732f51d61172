"""Invariants of the voxel-wise error-detection metrics: a map in [0, 1] up to its dtype's rounding is accepted
(found by invariant testing: ``voxel_accuracy`` refused a normalised entropy of 1.0000002, the float32 rounding of a
uniform prediction, with "got values in [1, 1]", while UCE's histogram clips the same map)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.metrics import voxel_accuracy


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_voxel_accuracy_clips_rounding_above_one(lib):
    above = np.nextafter(np.float32(1.0), np.float32(2.0))  # 1.0000001, one float32 ulp above 1
    u = np.full((1, 1, 4, 4), above, dtype=np.float32)
    u[0, 0, 0, :2] = 0.25
    err = np.zeros((1, 1, 4, 4), dtype=np.float32)
    err[0, 0, 1, :] = 1
    if lib == "torch":
        u, err = torch.from_numpy(u), torch.from_numpy(err)
    clipped = np.clip(np.asarray(u, dtype=np.float64), 0, 1)
    expected = 1 - np.abs(clipped - np.asarray(err, dtype=np.float64)).mean()
    assert float(voxel_accuracy(u, err, per_case=False)) == pytest.approx(expected, abs=1e-12)


def test_voxel_accuracy_still_refuses_a_map_beyond_the_tolerance():
    u = np.full((1, 1, 4, 4), 1.01)
    with pytest.raises(ValueError, match="uncertainty must lie in"):
        voxel_accuracy(u, np.zeros((1, 1, 4, 4)), per_case=False)
