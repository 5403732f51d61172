"""Products of sample sources under shared passes and sample batches: the same numbers as full passes.

Dropout masks are injected (:class:`tests.inferers.test_shared.MaskBank`), so full passes and shared passes apply the
same mask to the same sample whatever the batching, and every map must agree to float tolerance.
"""

from __future__ import annotations

import torch
from torch import nn

from monai_unc.inferers import MCDropoutSource, SSNSource, UncertaintyInferer
from monai_unc.networks import SSNHead, SSNNetwork

from .test_shared import BankDropout, MaskBank, assert_maps_close


def _ssn_with_banked_dropout(bank: MaskBank) -> nn.Module:
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                             BankDropout(bank, "backbone"), nn.Conv2d(8, 8, 1))
    # a negligible latent variance: every draw is the mean logits of its dropout mask, so the maps depend on the
    # masks alone (the latent draws of full and shared passes come from torch's stream in another order)
    head = SSNHead(8, num_classes=3, rank=2, spatial_dims=2, init_variance=1e-12, epsilon=1e-14)
    net = SSNNetwork(backbone, head).eval()
    bank.watch(net)
    return net


def test_marginalised_ssn_draws_average_one_dropout_mask_whatever_the_sample_batch():
    """Found by hostile testing: ``[MCDropoutSource(4), SSNSource(3, marginalize=True)]`` shared passes with
    ``sample_batch_size=2`` replayed the dropout samples of a batch one at a time inside each latent draw, and the
    draws after the first reused the last sample's backbone pass: a sample averaged several dropout masks (pred off by
    5e-3 against full passes)."""
    bank = MaskBank()
    net = _ssn_with_banked_dropout(bank)
    x = torch.rand(1, 1, 8, 8)
    outs = {}
    for share, batch in [(False, "auto"), (True, 1), (True, 2), (True, 3), (True, "auto")]:
        bank.seen.clear()
        inferer = UncertaintyInferer([MCDropoutSource(4), SSNSource(3, marginalize=True)], share_passes=share,
                                     sample_batch_size=batch, keep_samples=True, seed=0)
        outs[(share, batch)] = inferer(x, net)
    full = outs.pop((False, "auto"))
    samples = full["samples"]
    assert (samples[0] - samples[1]).abs().max() > 1e-3  # the masks differ between samples: the test can fail
    for out in outs.values():
        assert_maps_close(full, out)
