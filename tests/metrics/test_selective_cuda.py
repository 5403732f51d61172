"""Risk-coverage and referral curves of device tensors equal the CPU result, on the input's device.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. The curves sort one value per case (no
float reduction on the device), so they are exact.
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics import (
    area_under_referral_curve,
    augrc,
    aurc,
    eaurc,
    referral_curve,
    risk_coverage_curve,
)

pytestmark = pytest.mark.cuda


def _scores():
    g = torch.Generator().manual_seed(2)
    u = torch.rand(40, generator=g, dtype=torch.float64)
    u[:6] = 0.25  # ties
    risk = (torch.rand(40, generator=g, dtype=torch.float64) < u).to(torch.float64)
    return u, risk


def _values(x):
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def test_risk_coverage_on_the_device_equals_cpu(cuda_device):
    u, risk = _scores()
    ud, rd = u.to(cuda_device), risk.to(cuda_device)
    got, ref = risk_coverage_curve(ud, rd), risk_coverage_curve(u, risk)
    for name in got._fields:
        value = getattr(got, name)
        if isinstance(value, torch.Tensor):
            assert value.device.type == cuda_device.type, name
        np.testing.assert_array_equal(_values(value), _values(getattr(ref, name)), err_msg=name)
    for fn in (aurc, eaurc, augrc):
        assert fn(ud, rd) == fn(u, risk), fn.__name__


@pytest.mark.parametrize("ties", ["average", "order"])
def test_referral_curve_on_the_device_equals_cpu(cuda_device, ties):
    u, risk = _scores()
    ud, rd = u.to(cuda_device), risk.to(cuda_device)
    ref, got = referral_curve(u, risk, ties=ties), referral_curve(ud, rd, ties=ties)
    for name in ("tau", "value", "n_retained"):
        value = getattr(got, name)
        assert value.device.type == cuda_device.type, name
        np.testing.assert_array_equal(_values(value), _values(getattr(ref, name)), err_msg=name)
    assert area_under_referral_curve(ud, rd, ties=ties) == area_under_referral_curve(u, risk, ties=ties)
