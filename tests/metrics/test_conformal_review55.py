"""Hostile review 55 of the conformal masks: arguments that were read as other numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from monai_unc.metrics.conformal import conformal_grid, crc_lambda, high_probability_lambda, last_index

LOSSES = np.tile([1.0, 0.5, 0.0], (10, 1))


@pytest.mark.parametrize("size", [2.5, True, np.float64(80.0), "80"])
def test_last_index_refuses_a_size_that_is_no_integer(size):
    # 2.5 gave the index 3.5, True the index 2
    with pytest.raises(ValueError, match="size"):
        last_index("margin", size)


def test_last_index_takes_a_numpy_integer():
    assert last_index("margin", np.int64(80)) == 81
    assert last_index("threshold", np.int32(4096)) == 4096


@pytest.mark.parametrize("grid", [(True, 0.5), (2.0, True), ("20", "0.25"), "20,0.25", (np.bool_(True), 0.5)])
def test_margin_grid_refuses_bools_and_text(grid):
    # (True, 0.5) was a 1 mm grid; ("20", "0.25") was parsed
    with pytest.raises(ValueError, match="grid"):
        conformal_grid("margin", grid)


def test_margin_grid_takes_numbers_and_numpy_scalars():
    assert conformal_grid("margin", (np.float32(2.0), np.int64(1))) == (1.0, 2)
    assert conformal_grid("margin", [20, 0.25]) == (0.25, 80)


@pytest.mark.parametrize("fit", [lambda lam: crc_lambda(LOSSES, 0.1, lambdas=lam),
                                 lambda lam: high_probability_lambda(LOSSES, 0.2, 0.1, lambdas=lam)])
def test_lambdas_must_be_finite_real_numbers(fit):
    assert fit([0.0, 0.5, 1.0]) == 1.0
    assert fit(torch.tensor([0.0, 0.5, 1.0])) == 1.0
    with pytest.raises(TypeError, match="lambdas"):
        fit(["0", "0.5", "1"])  # was parsed: 1.0
    with pytest.raises(TypeError, match="lambdas"):
        fit([False, True, True])
    with pytest.raises(ValueError, match="lambdas"):
        fit([0.0, 0.5, math.inf])  # lambda_hat was inf


def test_losses_refuse_complex_and_text():
    with pytest.raises(TypeError, match="losses"):
        crc_lambda(LOSSES + 0.5j, 0.1)  # the imaginary part was dropped with a ComplexWarning
    with pytest.raises(TypeError, match="losses"):
        crc_lambda(LOSSES.astype(str), 0.1)
    assert crc_lambda(LOSSES.astype(bool), 0.1) == 2.0  # 0/1 losses as booleans stay accepted
