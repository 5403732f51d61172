"""Hostile testing of the losses' arguments: ``svls_kernel``'s ``spatial_dims`` and a 0-d numpy ``spacing``."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from monai_unc.losses import (
    SVLSLoss,
    check_finite_loss,
    check_target,
    prepare_target,
    svls_kernel,
    svls_targets_separable,
)


def _reference_kernel(dims: int, k: int, sigma: float, steps: list[float]) -> np.ndarray:
    """The SVLS kernel from its definition (Islam, Glocker, IPMI 2021), one offset at a time."""
    half = k // 2
    g = np.zeros((k,) * dims)
    for idx in itertools.product(range(k), repeat=dims):
        g[idx] = math.exp(-sum(((i - half) * s) ** 2 for i, s in zip(idx, steps)) / (2 * sigma**2))
    g /= g.sum()
    centre = (half,) * dims
    g[centre] = 1.0 - g[centre]  # the centre raised to the neighbours' mass, then normalised again
    return g / g.sum()


@pytest.mark.parametrize("spatial_dims", [2.0, 1.0, True, False, np.True_, "2", None])
def test_svls_kernel_refuses_a_spatial_dims_that_is_no_integer(spatial_dims):
    # 2.0 raised "can't multiply sequence by non-int of type 'float'" (no argument named), True gave a 1-D kernel
    with pytest.raises(TypeError, match="spatial_dims must be 1, 2 or 3"):
        svls_kernel(spatial_dims)


@pytest.mark.parametrize("spatial_dims", [1, 2, 3, np.int64(2)])
def test_svls_kernel_takes_an_integer_spatial_dims(spatial_dims):
    k = svls_kernel(spatial_dims, 3, 0.8, dtype=torch.float64)
    ref = _reference_kernel(int(spatial_dims), 3, 0.8, [1.0] * int(spatial_dims))
    np.testing.assert_allclose(k.numpy(), ref, rtol=0, atol=1e-15)


@pytest.mark.parametrize("spatial_dims", [0, 4, -1])
def test_svls_kernel_refuses_a_spatial_dims_out_of_range(spatial_dims):
    with pytest.raises(ValueError, match="spatial_dims must be 1, 2 or 3"):
        svls_kernel(spatial_dims)


@pytest.mark.parametrize("spacing", [np.array(2.0), np.array(2), np.array(2.0, dtype=np.float32)])
def test_a_zero_d_numpy_spacing_is_one_number_like_a_zero_d_tensor(spacing):
    # a 0-d numpy array was refused ("spacing must be a positive finite number ..., got ndarray") where a 0-d tensor
    # (MetaTensor.pixdim) and a numpy scalar were taken
    ref = _reference_kernel(2, 3, 1.5, [2.0, 2.0])
    np.testing.assert_allclose(svls_kernel(2, 3, 1.5, spacing, dtype=torch.float64).numpy(), ref, rtol=0, atol=1e-15)
    y = torch.zeros(1, 2, 4, 5, dtype=torch.float64)
    y[:, 0] = 1
    y[:, :, 1:3, 2:4] = torch.tensor([0.0, 1.0], dtype=torch.float64)[:, None, None]
    padded = np.pad(y.numpy(), ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge")
    q = np.zeros(y.shape)
    for i, j in itertools.product(range(4), range(5)):
        q[:, :, i, j] = (padded[:, :, i:i + 3, j:j + 3] * ref).sum((-2, -1))
    np.testing.assert_allclose(svls_targets_separable(y, 3, 1.5, spacing).numpy(), q, rtol=0, atol=1e-12)
    z = torch.randn(1, 2, 4, 5, dtype=torch.float64)
    expected = -(torch.from_numpy(q) * torch.log_softmax(z, 1)).sum(1).mean()
    assert torch.isclose(SVLSLoss(sigma=1.5, spacing=spacing)(z, y), expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("spacing", [np.array(True), np.array(1 + 2j), np.array("2")])
def test_a_zero_d_numpy_spacing_of_no_real_number_is_refused(spacing):
    with pytest.raises(TypeError, match="spacing must be"):
        svls_kernel(2, spacing=spacing)


@pytest.mark.parametrize("flag", ["to_onehot_y", "binary"])
@pytest.mark.parametrize("value", ["no", 1, 0, None])
def test_check_and_prepare_target_refuse_a_flag_that_is_no_bool(flag, value):
    # a truthy string ("no") or 1 was taken as True: a label map went through check_target(..., to_onehot_y="no")
    z = torch.randn(1, 2, 3)
    y = torch.tensor([[[0, 1, 1]]])
    args = {"to_onehot_y": True, "binary": False, flag: value}
    for fn in (check_target, prepare_target):
        with pytest.raises(TypeError, match=f"{flag} must be True or False"):
            fn(z, y, **args)


def test_prepare_target_one_hot_of_a_label_map():
    z = torch.randn(1, 3, 4)
    y = torch.tensor([[[0, 2, 1, 2]]])
    ref = np.zeros((1, 3, 4))
    for v, label in enumerate([0, 2, 1, 2]):
        ref[0, label, v] = 1.0
    np.testing.assert_array_equal(prepare_target(z, y, to_onehot_y=True, binary=np.False_)[1].numpy(), ref)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_check_finite_loss_refuses_a_unit_target_that_is_no_bool(value):
    with pytest.raises(TypeError, match="unit_target must be True or False"):
        check_finite_loss(torch.tensor(1.0), torch.zeros(1), torch.zeros(1), unit_target=value)
