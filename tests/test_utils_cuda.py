"""The exact threshold comparisons of ``monai_unc._utils`` (``exceeds`` / ``below``) on device tensors: the same
masks as on the CPU (exact: booleans), on the input's device, without a device synchronisation.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``.
"""

import pytest
import torch

from monai_unc._utils import below, exceeds
from monai_unc.transforms import UncertaintyToDiscrete
from tests._device import count_synchronisations
from tests.test_utils import OPS, THRESHOLDS, compare, torch_values

pytestmark = pytest.mark.cuda

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8, torch.int32, torch.int64,
          torch.bool]


@pytest.mark.parametrize("dtype", DTYPES)
def test_exceeds_and_below_on_the_device_equal_cpu(cuda_device, dtype):
    u = torch_values(dtype)
    ud = u.to(cuda_device)
    for t in THRESHOLDS:
        for op in OPS:
            got = compare(ud, t, op)
            assert got.device == ud.device and got.dtype == torch.bool
            assert torch.equal(got.cpu(), compare(u, t, op)), (dtype, op, t)


def test_exceeds_does_not_synchronise(cuda_device):
    if cuda_device.type != "cuda":
        pytest.skip("counts CUDA synchronisations")
    u = torch.rand(64, 64, device=cuda_device)
    with count_synchronisations() as syncs:
        exceeds(u, 0.7, inclusive=True)
        below(u.half(), 0.3, inclusive=False)
        exceeds(u.to(torch.int32), 1e30, inclusive=False)  # beyond the range: a mask of the input's device
    assert not syncs, syncs


def test_uncertainty_to_discrete_on_the_device(cuda_device):
    f32 = torch.tensor(0.7, dtype=torch.float32)
    u = torch.stack([torch.nextafter(f32, torch.tensor(0.0)), f32, torch.nextafter(f32, torch.tensor(1.0))])
    got = UncertaintyToDiscrete(threshold=0.7)(u.reshape(1, 1, 3).to(cuda_device))
    assert got.device.type == cuda_device.type
    assert got.cpu().reshape(-1).tolist() == [0, 0, 1]
