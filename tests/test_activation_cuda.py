"""``monai_unc.activation`` on ``cuda_device``: probabilities of logits with a temperature stay on the device and equal
the CPU's, for half-precision logits and for temperatures whose division overflows (tests/test_activation_hostile.py).

Marked ``cuda``: skipped without a GPU; ``MONAI_UNC_TEST_DEVICE=cpu`` rehearses them on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from monai_unc.activation import BERNOULLI, CATEGORICAL

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("act", [CATEGORICAL, BERNOULLI], ids=["softmax", "sigmoid"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("temperature", [1e-39, 1e-3, 1.7, [1e-3, 2.0, 0.5]], ids=["tiny", "small", "scalar", "vector"])
def test_probabilities_on_the_device_equal_the_cpu(cuda_device, act, dtype, temperature):
    gen = torch.Generator().manual_seed(0)
    z = (torch.randn(2, 3, 5, 4, generator=gen) * 50).to(dtype)
    t = torch.tensor(temperature) if isinstance(temperature, list) else temperature
    got = act.probabilities(z.to(cuda_device), temperature=t.to(cuda_device) if isinstance(t, torch.Tensor) else t)
    want = act.probabilities(z, temperature=t)
    assert got.device.type == cuda_device.type and got.dtype == dtype
    assert bool(torch.isfinite(got).all())
    torch.testing.assert_close(got.cpu().float(), want.float(), atol=2e-3, rtol=0)  # float32 kernels differ in ulps
