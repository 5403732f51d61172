"""Hostile review 59 of the inferers core: brute-force checks of what a review found wrong."""

from __future__ import annotations

import pytest
import torch
from monai.inferers import SlidingWindowInferer

from monai_unc.inferers import EnsembleInferer, MCDropoutInferer, SoftmaxInferer, TTAInferer


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(1, 3, 1), torch.nn.Dropout(0.2)).eval()


@pytest.mark.parametrize("shape", [(0, 1, 8, 8), (1, 1, 0, 8), (1, 0, 8, 8), (2, 1, 8, 0)])
@pytest.mark.parametrize("make", [
    lambda: MCDropoutInferer(2), lambda: SoftmaxInferer(), lambda: TTAInferer(),
    lambda: MCDropoutInferer(2, base_inferer=SlidingWindowInferer((4, 4))),
])
def test_empty_input_is_refused_naming_inputs(shape, make):
    """Found by hostile review 59: an empty batch failed in torch.aminmax (RuntimeError), under a sliding window in
    MONAI (UnboundLocalError), and an empty spatial or channel axis in the network's convolution, none naming
    ``inputs`` (docs/design.md: an empty volume gets a ValueError naming the argument)."""
    with pytest.raises(ValueError, match=r"inputs is empty \(shape"):
        make()(torch.rand(shape), _net())


def test_empty_input_is_refused_by_an_ensemble():
    with pytest.raises(ValueError, match="inputs is empty"):
        EnsembleInferer([_net(), _net()])(torch.rand(0, 1, 8, 8))
