"""Leftover defects of the quality estimates (found by hostile testing)."""

import numpy as np
import pytest
import torch

from monai_unc.metrics import expected_dice


def _over_one(dtype: torch.dtype, grad: bool = False) -> torch.Tensor:
    # background 1.0005 (within the probability checks' tolerance of 1e-3) on half of the volume, class 1 elsewhere
    p = torch.zeros(1, 2, 4, 4, 4, dtype=dtype)
    p[:, 0, :2] = 1.0005
    p[:, 1, 2:] = 1.0
    return p.requires_grad_(grad)


@pytest.mark.parametrize("dtype, grad", [(torch.float32, False), (torch.float64, False), (torch.float64, True)])
def test_expected_dice_never_above_one(dtype, grad):
    p = _over_one(dtype, grad)
    # unclamped the ratio reads 2 * 1.0005 * 32 / (1.0005 * 32 + 32) = 1.00025 (class 0) and 1.00025 (foreground)
    a = p.detach().double().numpy()[0]
    seg = a.argmax(0)
    raw = 2 * a[0][seg == 0].sum() / (a[0].sum() + (seg == 0).sum())
    assert raw > 1.0  # the input really drives the plain formula above 1
    q = expected_dice(p, include_background=True)
    values = np.concatenate([q.foreground.detach().numpy(), q.per_class.detach().numpy().ravel()])
    assert np.all((values >= 0) & (values <= 1)), values
    np.testing.assert_allclose(values, 1.0)


def test_expected_dice_clamp_keeps_nan():
    p = torch.zeros(1, 2, 2, 2)
    p[:, 0] = 1.0
    with pytest.warns(UserWarning, match="expected_dice"):
        q = expected_dice(p, empty_score=float("nan"))
    assert torch.isnan(q.foreground).all()
