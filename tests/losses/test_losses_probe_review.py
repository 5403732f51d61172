"""Hostile probe of the calibration losses (the ``train`` review): what a non-finite loss of finite inputs and a
reduction MONAI's ``DiceCELoss`` does not have now say.

Checked and found correct in the same probe (against loop-per-voxel float64 references, 1-D to 3-D, batch of one,
every reduction, ``include_background``, ``to_onehot_y``, softmax and sigmoid, 1 to 20 bins, anisotropic SVLS kernels,
300 classes): the values of every loss; the composites against MONAI's ``DiceLoss`` / ``DiceCELoss`` plus the term.
"""

from __future__ import annotations

import pytest
import torch

from monai_unc.losses import (
    DiceCEL1ACELoss,
    DiceCEMarginLoss,
    DiceSVLSLoss,
    L1ACELoss,
    MarginLoss,
    SVLSLoss,
)

MAKERS = [
    lambda: SVLSLoss(to_onehot_y=True),
    lambda: SVLSLoss(to_onehot_y=True, sigmoid=True, softmax=False),
    lambda: MarginLoss(to_onehot_y=True),
    lambda: MarginLoss(to_onehot_y=True, reduction="none"),
    lambda: DiceSVLSLoss(to_onehot_y=True),
    lambda: DiceCEMarginLoss(to_onehot_y=True),
    lambda: DiceCEL1ACELoss("soft", to_onehot_y=True),
]


@pytest.mark.parametrize("make", MAKERS)
def test_finite_logits_whose_loss_overflows_raise_instead_of_a_silent_nan(make):
    """Found by hostile testing: float32 logits of +-2e38 are finite, their differences are not: the loss came back
    NaN or inf without a word (it would reach the optimiser)."""
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(2, 3, 6, 6, generator=gen).sign() * 2e38
    labels = torch.randint(0, 3, (2, 1, 6, 6), generator=gen)
    with pytest.raises(ValueError, match=r"not finite although the logits and the target are: logits up to 2e\+38"):
        make()(z, labels)
    assert torch.isfinite(make()(z / 1e8, labels)).all()  # 2e30: large, finite, no error


def test_the_l1_ace_of_overflowing_logits_stays_finite():
    """The ACE sees probabilities only: a softmax of +-2e38 is still 0 and 1."""
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(2, 3, 6, 6, generator=gen).sign() * 2e38
    labels = torch.randint(0, 3, (2, 1, 6, 6), generator=gen)
    assert 0 <= float(L1ACELoss(to_onehot_y=True)(z, labels)) <= 1


def test_a_dice_without_smoothing_of_an_absent_class_of_probability_0_raises():
    z = torch.zeros(1, 2, 4, 4)
    z[:, 1] = -200.0  # sigmoid(-200) is exactly 0 in float32; the class is absent from the target
    y = torch.zeros(1, 2, 4, 4)
    y[:, 0] = 1
    loss = DiceSVLSLoss(sigmoid=True, softmax=False, smooth_nr=0.0, smooth_dr=0.0)
    with pytest.raises(ValueError, match="without smoothing .* divides 0 by 0"):
        loss(z, y)
    assert torch.isfinite(DiceSVLSLoss(sigmoid=True, softmax=False)(z, y))  # MONAI's default smoothing


@pytest.mark.parametrize("reduction", ["none", "avg", None])
def test_dice_ce_margin_refuses_a_reduction_naming_it(reduction):
    """MONAI's DiceCELoss said "Unsupported option 'none', Available options are {'mean', 'sum'}"."""
    with pytest.raises(ValueError, match="reduction must be 'mean' or 'sum'"):
        DiceCEMarginLoss(to_onehot_y=True, reduction=reduction)
