"""Hostile tests of the dense (cuCIM) HD95 path, emulated on CPU tensors: MONAI's ``distance_transform_edt`` serves
CPU tensors with scipy, so the real ``_cucim_distances`` runs; only the backend choice is forced to ``"cucim"``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.metrics import boundary
from monai_unc.metrics.boundary import hausdorff_distance


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8])
def test_dense_hd95_of_integer_masks_equals_the_kd_tree(monkeypatch, dtype):
    """``_hd_case`` takes 0/1 masks of any dtype on its KD-tree path; on the dense path an integer edge mask was
    used as an index (``dense[src]`` gathers rows) and inverted bitwise (``~1 = -2``, every voxel a feature), so
    the distances were wrong without an error (3.61 / 4.24 mm against 1.41 mm on a 3 x 1 x 4 case)."""
    monkeypatch.setattr(boundary, "_resolve_backend", lambda backend, on_cuda, ndim: "cucim")
    rng = np.random.default_rng(0)
    p, t = rng.random((3, 1, 4)) > 0.6, rng.random((3, 1, 4)) > 0.6
    for q in (0.0, 50.0, 95.0, 100.0):
        want = hausdorff_distance(p.astype(np.int64), t.astype(np.int64), percentile=q)
        got = boundary._hd_case(torch.from_numpy(p).to(dtype), torch.from_numpy(t).to(dtype), (1.0, 1.0, 1.0), q)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
