"""OoD and failure detection and the histograms of cases from device tensors equal the CPU result.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. One value per case (read once to the
host), so every value is exact.
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics import al_improvement, failure_detection, ood_auroc, uncertainty_histograms

pytestmark = pytest.mark.cuda


def test_casewise_metrics_of_device_scores_equal_cpu(cuda_device):
    g = torch.Generator().manual_seed(8)
    iid, ood = torch.rand(12, generator=g), torch.rand(9, generator=g) + 0.3
    dice = torch.rand(21, generator=g, dtype=torch.float64)
    scores = torch.cat([iid, ood]).to(torch.float64)
    dev = [t.to(cuda_device) for t in (iid, ood, scores, dice)]
    assert ood_auroc(dev[0], dev[1]) == ood_auroc(iid, ood)
    assert failure_detection(dev[2], dev[3]) == failure_detection(scores, dice)
    correct = dice > 0.5
    got = uncertainty_histograms(dev[2], correct.to(cuda_device), bins=8)
    ref = uncertainty_histograms(scores, correct, bins=8)
    for name in ref._fields:
        a, b = getattr(got, name), getattr(ref, name)
        a = a.cpu().numpy() if isinstance(a, torch.Tensor) else a
        b = b.cpu().numpy() if isinstance(b, torch.Tensor) else b
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
    d = [t.to(cuda_device) for t in (dice[:5], dice[5:10], dice[10:15], dice[15:20])]
    assert al_improvement(*d) == al_improvement(dice[:5], dice[5:10], dice[10:15], dice[15:20])
