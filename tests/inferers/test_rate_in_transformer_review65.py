"""Rate-In samples inside a ``torch.nn.TransformerEncoderLayer`` (hostile review 65, rev2).

In eval mode without gradients (inference) the layer takes a fused fast path that skips its dropout children and the
hooks of its submodules; MC dropout switched the layer's own flag (review 65), Rate-In did not: its converted or
inserted layers were in training mode and every sample was the same prediction, silently.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from monai_unc.inferers import RateInSource


def _encoder(dropout: float) -> nn.Module:
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=dropout, batch_first=True)
    return nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()


@pytest.mark.parametrize("placement, dropout, after", [("convert", 0.3, "auto"), ("insert", 0.0, ["layers.0.linear1"])])
def test_rate_in_layers_inside_an_encoder_layer_sample(placement, dropout, after):
    torch.manual_seed(0)
    net, x = _encoder(dropout), torch.rand(1, 32, 8)  # 32 tokens: a channel-wise hook that drops none is rare
    with torch.no_grad(), RateInSource(2, loss="mse", placement=placement, after=after).activate(net) as layers:
        assert layers
        assert not torch.equal(net(x), net(x))  # the fast path skipped every Rate-In layer
    assert not any(m.training for m in net.modules())  # the encoder layer's own flag back too
    with torch.no_grad():
        assert torch.equal(net(x), net(x))
