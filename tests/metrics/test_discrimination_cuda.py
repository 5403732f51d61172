"""Voxel-wise error detection (AUROC, AUPRC, AvU, PAvPU, AU-ARC, ...) on a device equals the CPU result.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. Ratios of integer counts (AvU, PAvPU,
accuracy ratios) are exact; the rank statistics (AUROC, AUPRC, AU-ARC) sum in another order on a GPU:
``rel=1e-9``.
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics import (
    au_arc,
    auroc,
    avu,
    correct_certain_ratio,
    error_auprc,
    error_auroc,
    pavpu,
    uncertain_incorrect_ratio,
    voxel_accuracy,
)

pytestmark = pytest.mark.cuda

EXACT = (avu, pavpu, voxel_accuracy, correct_certain_ratio, uncertain_incorrect_ratio)
RANKED = (error_auroc, error_auprc, au_arc)


def _case():
    g = torch.Generator().manual_seed(5)
    u = torch.rand(3, 1, 9, 8, 8, generator=g)
    u[0, 0, :3] = 0.5  # ties
    err = torch.rand(3, 1, 9, 8, 8, generator=g) < 0.7 * u
    return u, err


@pytest.mark.parametrize("fn", EXACT + RANKED, ids=lambda f: f.__name__)
def test_error_detection_on_the_device_equals_cpu(cuda_device, fn):
    u, err = _case()
    ud, errd = u.to(cuda_device), err.to(cuda_device)
    per_case, ref = fn(ud, errd, per_case=True), fn(u, err, per_case=True)
    assert isinstance(per_case, torch.Tensor) and per_case.device.type == cuda_device.type
    pooled, ref_pooled = fn(ud, errd, per_case=False), fn(u, err, per_case=False)
    assert isinstance(pooled, float)
    if fn in EXACT:
        np.testing.assert_array_equal(per_case.cpu().numpy(), ref.numpy())
        assert pooled == ref_pooled
    else:
        np.testing.assert_allclose(per_case.cpu().numpy(), ref.numpy(), rtol=1e-9)
        assert pooled == pytest.approx(ref_pooled, rel=1e-9)


def test_auroc_of_device_scores(cuda_device):
    u, err = _case()
    pos, neg = u[err], u[~err]
    assert auroc(pos.to(cuda_device), neg.to(cuda_device)) == pytest.approx(auroc(pos, neg), rel=1e-12)
