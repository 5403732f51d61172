"""Every voxel-wise measure of device probabilities and samples equals the CPU result, on the input's device.

Marked ``cuda``: a GPU, or the CPU with ``MONAI_UNC_TEST_DEVICE=cpu``. ``log`` and the reductions over classes and
samples differ in the last bits on a GPU: ``rtol=1e-6`` in float32, ``1e-12`` in float64 (``atol`` the same, for
values near 0 such as the mutual information of agreeing samples).
"""

import numpy as np
import pytest
import torch

from monai_unc.measures import (
    binary_entropy,
    entropy,
    expected_entropy,
    mutual_information,
    mutual_information_from_entropies,
    one_minus_max_prob,
    predictive_entropy,
    variance,
    variance_from_moments,
)

pytestmark = pytest.mark.cuda

TOL = {torch.float32: 1e-6, torch.float64: 1e-12}


def _samples(dtype, multilabel=False):
    g = torch.Generator().manual_seed(6)
    z = 2 * torch.randn(4, 2, 3, 7, 6, 5, generator=g, dtype=torch.float64)  # (S, B, C, *spatial)
    p = torch.sigmoid(z) if multilabel else torch.softmax(z, 2)
    return p.to(dtype)


def _close(got, ref, dtype):
    tol = TOL[dtype]
    np.testing.assert_allclose(got.cpu().numpy(), ref.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("multilabel", [False, True], ids=["softmax", "sigmoid"])
def test_sample_measures_on_the_device_equal_cpu(cuda_device, dtype, multilabel):
    s = _samples(dtype, multilabel)
    sd = s.to(cuda_device)
    for fn in (predictive_entropy, expected_entropy, mutual_information, variance):
        kw = {"multilabel": multilabel}
        if fn is not variance:
            kw["normalize"] = True
        got = fn(sd, **kw)
        assert got.device.type == cuda_device.type, fn.__name__
        _close(got, fn(s, **kw), dtype)
    mean = s.mean(0)
    got = one_minus_max_prob(mean.to(cuda_device), multilabel=multilabel)
    assert got.device.type == cuda_device.type
    _close(got, one_minus_max_prob(mean, multilabel=multilabel), dtype)
    # the streaming forms: entropies and moments accumulated on the device
    pe, ee = predictive_entropy(s, multilabel=multilabel), expected_entropy(s, multilabel=multilabel)
    got = mutual_information_from_entropies(pe.to(cuda_device), ee.to(cuda_device))
    assert got.device.type == cuda_device.type
    _close(got, mutual_information_from_entropies(pe, ee), dtype)
    mean_sq = (s * s).mean(0)
    got = variance_from_moments(mean.to(cuda_device), mean_sq.to(cuda_device), multilabel=multilabel)
    assert got.device.type == cuda_device.type
    _close(got, variance_from_moments(mean, mean_sq, multilabel=multilabel), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_entropies_of_probabilities_on_the_device(cuda_device, dtype):
    p = _samples(dtype)[0]
    for fn, x in ((entropy, p), (binary_entropy, p[:, 1])):
        got = fn(x.to(cuda_device), normalize=True)
        assert got.device.type == cuda_device.type, fn.__name__
        _close(got, fn(x, normalize=True), dtype)
