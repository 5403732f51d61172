"""The risk-controlled referral threshold of device case scores equals the CPU result.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. One value per case, read once to the host:
exact.
"""

import pytest
import torch

from monai_unc.metrics.risk_control import risk_controlled_threshold

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("method", ["sgr", "ltt"])
def test_threshold_of_device_scores_equals_cpu(cuda_device, method):
    g = torch.Generator().manual_seed(13)
    u = torch.rand(200, generator=g, dtype=torch.float64)
    risk = (torch.rand(200, generator=g, dtype=torch.float64) < 0.5 * u).to(torch.float64)
    ref = risk_controlled_threshold(u, risk, 0.3, method=method)
    assert ref.feasible
    assert risk_controlled_threshold(u.to(cuda_device), risk.to(cuda_device), 0.3, method=method) == ref
