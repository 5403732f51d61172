"""The comparison statistics take per-case values as the package's metrics return them: tensors on a device.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``.
"""

import numpy as np
import pytest
import torch

from monai_unc.metrics import cohens_d, compare_metric_values, error_auroc, holm_correction

pytestmark = pytest.mark.cuda


def test_compare_metric_values_of_device_metrics_equals_cpu(cuda_device):
    # found by hostile testing: error_auroc(..., per_case=True) of CUDA maps returns a CUDA tensor, which
    # compare_metric_values refused (numpy.asarray cannot read device memory)
    g = torch.Generator().manual_seed(2)
    err = torch.rand(6, 1, 8, 8, generator=g) < 0.3
    u_a = 0.4 * err + 0.6 * torch.rand(6, 1, 8, 8, generator=g)
    u_b = 0.2 * err + 0.8 * torch.rand(6, 1, 8, 8, generator=g)
    on_device = {
        name: error_auroc(u.to(cuda_device), err.to(cuda_device), per_case=True) for name, u in (("a", u_a), ("b", u_b))
    }
    assert on_device["a"].device.type == cuda_device.type
    res = compare_metric_values({"AUC-ROC": on_device["a"]}, {"AUC-ROC": on_device["b"]}, True)
    on_cpu = {name: error_auroc(u, err, per_case=True).numpy() for name, u in (("a", u_a), ("b", u_b))}
    ref = compare_metric_values({"AUC-ROC": on_cpu["a"]}, {"AUC-ROC": on_cpu["b"]}, True)
    np.testing.assert_allclose(res.metrics["AUC-ROC"].values_a, ref.metrics["AUC-ROC"].values_a, rtol=1e-9)
    assert res.metrics["AUC-ROC"].accuracy == ref.metrics["AUC-ROC"].accuracy
    assert cohens_d(on_device["a"], on_device["b"]) == pytest.approx(ref.metrics["AUC-ROC"].cohens_d, rel=1e-9)
    p = torch.tensor([0.01, 0.2], device=cuda_device)
    np.testing.assert_allclose(holm_correction(p), holm_correction([0.01, 0.2]), rtol=1e-6)
