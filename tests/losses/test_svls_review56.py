"""Hostile review 56: SVLS soft targets for a sigma small against the voxel size; non-tensor arguments."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from monai_unc.losses import SVLSLoss
from monai_unc.losses.functional import (
    binned_calibration,
    l1_average_calibration_error,
    svls_targets,
    svls_targets_separable,
)


def _brute_svls(y: np.ndarray, kernel_size: int, sigma: float) -> np.ndarray:
    """The paper's SVLS targets from its formula: Gaussian, centre raised to the neighbours' sum, edge padding."""
    dims = y.ndim - 2
    half = kernel_size // 2
    g = np.zeros((kernel_size,) * dims)
    for idx in itertools.product(range(kernel_size), repeat=dims):
        g[idx] = np.exp(-sum((i - half) ** 2 for i in idx) / (2 * sigma**2))
    g /= g.sum()
    centre = (half,) * dims
    g[centre] = 1 - g[centre]
    g /= g.sum()
    padded = np.pad(y, [(0, 0), (0, 0)] + [(half, half)] * dims, mode="edge")
    out = np.zeros_like(y)
    for idx in itertools.product(range(kernel_size), repeat=dims):
        window = tuple(slice(i, i + n) for i, n in zip(idx, y.shape[2:]))
        out += g[idx] * padded[(slice(None), slice(None), *window)]
    return out


def _onehot(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    labels = np.random.default_rng(seed).integers(0, shape[1], size=(shape[0], *shape[2:]))
    return np.moveaxis(np.eye(shape[1])[labels], -1, 1)


@pytest.mark.parametrize("shape", [(1, 2, 9, 8), (1, 2, 6, 5, 4), (1, 2, 50, 50, 30)])  # the last: the CPU kernel
@pytest.mark.parametrize("sigma", [0.15, 0.2, 0.3])
def test_small_sigma_float32_targets_match_the_formula(shape: tuple[int, ...], sigma: float) -> None:
    y = _onehot(shape)
    ref = _brute_svls(y, 3, sigma)
    got = svls_targets_separable(torch.tensor(y, dtype=torch.float32), 3, sigma).double().numpy()
    # before the fix: up to 31.5 off at sigma 0.15 (targets of 32), 3e-3 at sigma 0.2, 3e-6 at sigma 0.3
    np.testing.assert_allclose(got, ref, atol=1e-6)


def test_small_sigma_loss_float32_matches_float64() -> None:
    torch.manual_seed(0)
    z = torch.randn(1, 3, 12, 10, 8, dtype=torch.float64)
    y = torch.randint(0, 3, (1, 1, 12, 10, 8))
    loss = SVLSLoss(sigma=0.15, to_onehot_y=True)
    # before the fix: 45.26 in float32 against 1.395 in float64
    assert loss(z.float(), y).item() == pytest.approx(loss(z, y).item(), abs=1e-6)


def test_non_tensor_kernel_or_target_is_a_type_error_naming_it() -> None:
    y = torch.zeros(1, 2, 5, 5)
    y[:, 0] = 1
    with pytest.raises(TypeError, match="kernel must be a torch.Tensor"):
        svls_targets(y, [[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    with pytest.raises(TypeError, match="target must be a torch.Tensor"):
        binned_calibration(y, y.numpy())
    with pytest.raises(TypeError, match="target must be a torch.Tensor"):
        l1_average_calibration_error(y, y.numpy())
