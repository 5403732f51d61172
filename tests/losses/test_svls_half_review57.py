"""Half-precision SVLS targets are computed in float32 and rounded once (review 57).

Accumulated in bfloat16, the separable form's soft targets were off by up to 1.2e-2 against a float64 reference
(three of bfloat16's steps near 1), the direct convolution's by 2.6e-3; rounded once, each target is within half a
step of the float64 value, which is what the test asks.
"""

from __future__ import annotations

import pytest
import torch

from monai_unc.losses import svls_kernel, svls_targets, svls_targets_separable


def _targets(dims: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    y = (torch.rand(2, 1, *(12,) * dims, generator=g) > 0.5).double()
    return torch.cat([1 - y, y], 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("dims", [2, 3])
def test_half_targets_rounded_once(dtype: torch.dtype, sigma: float, dims: int) -> None:
    y = _targets(dims)
    spacing = (1.0,) * (dims - 1) + (2.0,)
    ref = svls_targets(y, svls_kernel(dims, 3, sigma, spacing, dtype=torch.float64))
    bound = torch.finfo(dtype).eps / 2 * ref.abs() + 1e-6  # round to nearest, plus float32's own rounding
    for got in (svls_targets_separable(y.to(dtype), 3, sigma, spacing),
                svls_targets(y.to(dtype), svls_kernel(dims, 3, sigma, spacing))):
        assert got.dtype == dtype
        err = (got.double() - ref).abs()
        assert bool((err <= bound).all()), float(err.max())


def test_half_targets_keep_gradient() -> None:
    y = _targets(2).to(torch.bfloat16).requires_grad_(True)
    svls_targets_separable(y, 3, 1.0).sum().backward()
    assert y.grad is not None and y.grad.dtype == torch.bfloat16
