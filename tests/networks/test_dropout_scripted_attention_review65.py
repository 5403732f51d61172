"""MC dropout samples the attention layers of a ``torch.jit.script`` ed network (hostile review 65, rev2).

A scripted ``TransformerEncoderLayer`` (a ``RecursiveScriptModule``, not an instance of the torch.nn class) still takes
its fused fast path, which skips every dropout, when its own flag is off: its dropout children were switched on and
every sample was the same prediction, silently; a scripted ``MultiheadAttention``'s attention dropout was not sampled.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from monai_unc.inferers import enable_mc_dropout, find_dropout_layers


def _script(module: nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's deprecation of torch.jit.script
        return torch.jit.script(module.eval())


def test_scripted_transformer_encoder_layer_samples_and_restores():
    torch.manual_seed(0)
    layer = _script(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.3, batch_first=True))
    x = torch.rand(1, 6, 8)
    with torch.no_grad(), enable_mc_dropout(layer):
        assert not torch.equal(layer(x), layer(x))  # the fast path took none of the dropout: every sample equal
    assert not any(m.training for m in layer.modules())
    with torch.no_grad():
        assert torch.equal(layer(x), layer(x))


def test_scripted_multihead_attention_dropout_is_sampled():
    torch.manual_seed(0)
    attn = _script(nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True))
    assert find_dropout_layers(attn)[0] == [attn]
    assert find_dropout_layers(_script(nn.MultiheadAttention(8, 2, dropout=0.0)))[0] == []
    x = torch.rand(1, 6, 8)
    with torch.no_grad(), enable_mc_dropout(attn):
        assert not torch.equal(attn(x, x, x)[0], attn(x, x, x)[0])
        assert not attn.out_proj.training  # only the layer's own flag
    assert not attn.training


def test_recurrent_dropout_warning_fires_once_per_layer():
    # every sampled call (every case, every window) opened a context and warned again: a cohort's log held the same
    # warning once per call, also under the "default" filter (some call between resets the warnings registry)
    net = nn.Sequential(nn.GRU(4, 4, num_layers=2, dropout=0.3), nn.Identity(), nn.Dropout(0.2)).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with enable_mc_dropout(net):
                pass
    assert [str(w.message).count("between-layer dropout") for w in caught] == [1]
    with pytest.warns(UserWarning, match=r"recurrent layer '0' \(GRU, dropout=0.3\)"):  # another network: its own
        enable_mc_dropout(nn.Sequential(nn.GRU(4, 4, num_layers=2, dropout=0.3), nn.Dropout(0.2)).eval()).restore()
