"""Every aggregation of device maps (with and without a mask, with patch locations), ``max_patch`` and
``fit_threshold`` equal the CPU result, with tensor outputs on the input's device.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. Sums are float64 in another order on a GPU
(``rtol=1e-12``); patch locations and threshold counts are exact.
"""

import numpy as np
import pytest
import torch

from monai_unc.aggregation import METHODS, aggregate, fit_threshold, max_patch

pytestmark = pytest.mark.cuda


def _maps():
    g = torch.Generator().manual_seed(3)
    u = torch.rand(2, 1, 11, 9, 7, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 1, 11, 9, 7, generator=g) < 0.6
    return u, mask


@pytest.mark.filterwarnings("ignore:aggregate\\(method='sum'\\) grows")
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("masked", [False, True])
def test_aggregate_on_the_device_equals_cpu(cuda_device, method, masked):
    u, mask = _maps()
    m = mask if masked else None
    kw = {"threshold": 0.4} if method == "threshold" else {"patch_size": (4, 3, 3)}  # each method's own option
    got = aggregate(u.to(cuda_device), method, mask=None if m is None else m.to(cuda_device), **kw)
    ref = aggregate(u, method, mask=m, **kw)
    assert got.device.type == cuda_device.type
    np.testing.assert_allclose(got.cpu().numpy(), ref.numpy(), rtol=1e-12)


def test_patch_locations_and_threshold_on_the_device(cuda_device):
    u, mask = _maps()
    ud, md = u.to(cuda_device), mask.to(cuda_device)
    score, where = aggregate(ud, "patch_mean", patch_size=3, return_location=True, mask=md)
    ref_score, ref_where = aggregate(u, "patch_mean", patch_size=3, return_location=True, mask=mask)
    assert score.device.type == where.device.type == cuda_device.type
    np.testing.assert_allclose(score.cpu().numpy(), ref_score.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(where.cpu().numpy(), ref_where.numpy())
    for reduction in ("sum", "mean"):
        got, ref = max_patch(ud, 3, reduction=reduction, mask=md), max_patch(u, 3, reduction=reduction, mask=mask)
        assert got.score.device.type == got.start.device.type == cuda_device.type
        np.testing.assert_allclose(got.score.cpu().numpy(), ref.score.numpy(), rtol=1e-12)
        np.testing.assert_array_equal(got.start.cpu().numpy(), ref.start.numpy())
        assert got.size == ref.size
    assert fit_threshold(ud, md) == pytest.approx(fit_threshold(u, mask), rel=1e-12)
