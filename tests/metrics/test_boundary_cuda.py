"""Boundaries, edges, distance maps and HD95 of device tensors equal the CPU result, on the input's device.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. Boundaries and edges are exact; distances
agree to float32 precision of the ``edt`` backend (``rtol=1e-6``, as ``test_boundary``'s CUDA test); HD95 is a
percentile of the same distances.
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics.boundary import distance_to_mask, foreground_edges, hd95, label_boundary
from tests.metrics.test_spatial import blobs

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("shape,spacing", [((20, 22), (1.0, 0.7)), ((12, 14, 10), (2.0, 1.0, 1.0))])
def test_geometry_on_the_device_equals_cpu(cuda_device, shape, spacing):
    lab = np.stack([blobs(shape, 3, seed=s) for s in (3, 4)])  # (B, *spatial)
    other = np.stack([blobs(shape, 3, seed=s) for s in (5, 6)])
    dev, dev_other = torch.from_numpy(lab).to(cuda_device), torch.from_numpy(other).to(cuda_device)
    for fn in (label_boundary, foreground_edges):
        got = fn(dev, spatial_dims=len(shape))
        assert got.device.type == cuda_device.type, fn.__name__
        np.testing.assert_array_equal(got.cpu().numpy(), fn(lab, spatial_dims=len(shape)), err_msg=fn.__name__)
    mask = lab[0] == 1
    got = distance_to_mask(torch.from_numpy(mask).to(cuda_device), spacing=spacing)
    assert got.device.type == cuda_device.type
    np.testing.assert_allclose(got.cpu().numpy(), distance_to_mask(mask, spacing=spacing), rtol=1e-6, atol=1e-5)
    got = hd95(dev, dev_other, spacing=spacing, spatial_dims=len(shape))
    assert got.device.type == cuda_device.type
    np.testing.assert_allclose(got.cpu().numpy(), hd95(lab, other, spacing=spacing, spatial_dims=len(shape)),
                               rtol=1e-6)
