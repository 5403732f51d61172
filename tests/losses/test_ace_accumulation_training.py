"""The bin sums of the L1-ACE over large images: the error of a 128^3 patch equals a float64 numpy reference.

Found by hostile testing: ``binned_calibration`` added every voxel of an image and channel into one float32
accumulator per bin. From 2**20 voxels in a bin on, float32 adds 0.97 as 1.0 (its spacing there is 0.125), so the
mean probability of a bin drifted towards the next representable step, and at 2**24 a bin's count stopped growing:
the L1-ACE of 2**21 voxels of p = 0.97 against an accuracy of 0.9 came out 0.092 (hard bins) and 0.0755 (soft bins)
instead of 0.070, and 0.0 instead of 0.07 above 2**24 voxels.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from monai_unc.losses import L1ACELoss, binned_calibration, l1_average_calibration_error

N = 2**21  # the voxels of a 128^3 patch


def _numpy_hard_ace(p: np.ndarray, y: np.ndarray, num_bins: int = 20) -> float:
    """Brute force in float64: bin ``floor(p * num_bins)``, mean over the non-empty bins of |mean p - mean y|."""
    p, y = p.astype(np.float64).ravel(), y.astype(np.float64).ravel()
    k = np.clip(np.floor(p * num_bins), 0, num_bins - 1).astype(int)
    gaps = [abs(p[k == b].mean() - y[k == b].mean()) for b in range(num_bins) if (k == b).any()]
    return float(np.mean(gaps))


def _case(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    p = torch.full((1, 1, N), 0.97, dtype=dtype)
    y = torch.ones(1, 1, N, dtype=dtype)
    y[..., ::10] = 0  # accuracy 0.9: the error is |0.97 - 0.9| in every bin the voxels fall in
    return p, y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("soft", [False, True])
def test_l1_ace_of_a_large_image_equals_float64(dtype, soft):
    p, y = _case(dtype)
    got = float(l1_average_calibration_error(p, y, soft=soft))
    # constant p: the hard bin, or the two soft bins it is shared between, each hold mean p = p and accuracy 0.9
    expected = abs(float(p[0, 0, 0].double()) - float(y.double().mean()))
    tol = 2e-6 if dtype == torch.float32 else 6.2e-5  # the float16 result is rounded to float16 (spacing 6.1e-5)
    assert got == pytest.approx(expected, abs=tol)
    if not soft:
        assert got == pytest.approx(_numpy_hard_ace(p.float().numpy(), y.float().numpy()), abs=tol)


@pytest.mark.parametrize("soft", [False, True])
def test_bin_sums_of_a_large_image_are_exact_counts_and_accurate_means(soft):
    p, y = _case(torch.float32)
    sum_p, sum_y, weight = binned_calibration(p, y, num_bins=20, soft=soft)
    assert float(weight.sum()) == pytest.approx(N, rel=1e-5)  # soft: float32 memberships (1 - f) + f
    full = weight > 0
    np.testing.assert_allclose((sum_p[full] / weight[full]).numpy(), float(p[0, 0, 0]), rtol=5e-6)
    np.testing.assert_allclose((sum_y[full] / weight[full]).numpy(), 0.9, rtol=5e-6, atol=0)
    if not soft:
        assert float(weight[0, 0, 19]) == N  # one bin holds every voxel, counted exactly


def test_l1_ace_loss_of_a_large_image_equals_float64_and_keeps_its_gradient():
    """The loss of 2-channel logits whose softmax is (0.03, 0.97) everywhere: both channels' error is 0.07."""
    z = torch.zeros(1, 2, N)
    z[:, 1] = math.log(0.97 / 0.03)
    z.requires_grad_(True)
    labels = torch.ones(1, 1, N, dtype=torch.long)
    labels[..., ::10] = 0
    loss = L1ACELoss("hard", to_onehot_y=True)(z, labels)
    pr = torch.softmax(z.detach().double(), 1).numpy()
    onehot = np.stack([labels[0, 0].numpy() == 0, labels[0, 0].numpy() == 1]).astype(np.float64)
    expected = np.mean([_numpy_hard_ace(pr[0, k], onehot[k]) for k in range(2)])
    assert float(loss) == pytest.approx(expected, abs=2e-6)
    loss.backward()
    assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0


@pytest.mark.parametrize("num_bins", [1, 7, 64, 65, 300])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 1300])
def test_bin_sums_over_runs_equal_a_numpy_histogram_at_every_run_boundary(num_bins, n):
    """Runs of ``max(256, 4 * num_bins)`` voxels, a last partial run, several images and channels: the sums are
    numpy's weighted histograms (float64)."""
    rng = np.random.default_rng(n + num_bins)
    p = torch.from_numpy(rng.uniform(size=(2, 3, n))).float()
    y = torch.from_numpy(rng.uniform(size=(2, 3, n)) < 0.5).float()
    sum_p, sum_y, weight = binned_calibration(p, y, num_bins=num_bins)
    pk, yk = p.double().numpy(), y.double().numpy()
    k = np.clip(np.floor(pk * num_bins), 0, num_bins - 1)
    for i in range(2):
        for j in range(3):
            bins = k[i, j].astype(int)
            np.testing.assert_array_equal(weight[i, j].numpy(), np.bincount(bins, minlength=num_bins))
            for got, values in ((sum_p, pk), (sum_y, yk)):
                ref = np.bincount(bins, weights=values[i, j], minlength=num_bins)
                np.testing.assert_allclose(got[i, j].numpy(), ref, rtol=1e-6, atol=1e-6)
