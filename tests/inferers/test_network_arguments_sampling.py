"""Shared passes of a network that takes tensor arguments besides its input: full passes, the same numbers."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from monai_unc.inferers import MCDropoutInferer

from .test_shared import BankDropout, MaskBank, assert_maps_close


class Conditioned(nn.Module):
    """Dropout on the features, then a conditioning map concatenated (or a per-case scale) before the output."""

    def __init__(self, bank: MaskBank) -> None:
        super().__init__()
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.drop = BankDropout(bank, "features")
        self.b = nn.Conv2d(6, 3, 1)

    def forward(self, x: torch.Tensor, cond: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.b(torch.cat([self.drop(self.a(x)) * scale, cond], 1))


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("sample_batch", [2, 3])
def test_tensor_arguments_of_the_network_run_full_passes(batch, sample_batch, caplog):
    """Found by hostile testing: ``MCDropoutInferer(5)(x, net, cond)`` with the default shared passes replayed the
    samples on the input repeated along the batch axis but passed ``cond`` with its own batch: ``RuntimeError: Sizes
    of tensors must match`` (``torch.cat``) where full passes ran. The samples now run as full passes, said in one log
    line; a non-tensor argument keeps the shared passes."""
    bank = MaskBank()
    torch.manual_seed(0)
    net = Conditioned(bank).eval()
    bank.watch(net)
    x, cond = torch.rand(batch, 1, 8, 8), torch.rand(batch, 2, 8, 8)
    outs = []
    for share in (False, True):
        bank.seen.clear()
        with caplog.at_level(logging.WARNING, logger="monai_unc.inferers.sampling"):
            caplog.clear()
            outs.append(MCDropoutInferer(5, share_passes=share, sample_batch_size=sample_batch, keep_samples=True)(
                x, net, cond, scale=2.0))
    assert_maps_close(*outs)
    assert (outs[0]["samples"][0] - outs[0]["samples"][1]).abs().max() > 1e-6  # the masks differ: the test can fail
    assert [r.getMessage() for r in caplog.records] == [
        "shared passes off, full passes instead: the network gets tensor arguments besides its input, which a "
        "replay batch of samples cannot repeat along the batch axis"
    ]


def test_non_tensor_arguments_keep_the_shared_passes(caplog):
    bank = MaskBank()
    torch.manual_seed(0)
    net = Conditioned(bank).eval()
    bank.watch(net)

    class Constant(nn.Module):  # the conditioning map made inside: the network's only tensor argument is its input
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
            return self.net(x, torch.ones(x.shape[0], 2, *x.shape[2:]), scale=scale)

    wrapper = Constant().eval()
    x = torch.rand(1, 1, 8, 8)
    outs = []
    for share in (False, True):
        bank.seen.clear()
        with caplog.at_level(logging.WARNING, logger="monai_unc.inferers.sampling"):
            caplog.clear()
            outs.append(MCDropoutInferer(5, share_passes=share, sample_batch_size=2)(x, wrapper, scale=2.0))
    assert_maps_close(*outs)
    assert not caplog.records  # shared: no fallback
