"""The logits a temperature is fitted to are deterministic for a network with MONAI's fused attention (review 66).

MONAI's ``SABlock`` with ``use_flash_attention=True`` draws attention dropout in eval mode too (MONAI 1.6.1):
``calibrate`` collected logits of randomly dropped attention, and fitted the temperature to them.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.inferers import align_fused_attention
from monai_unc.io import list_files, list_image_cases
from monai_unc.workflows.calibrate import collect_logits
from monai_unc.workflows.infer import load_image_case
from monai_unc.workflows.models import LoadedModel


def _flash_unetr() -> torch.nn.Module:
    """A tiny 3D MONAI UNETR (one token of 16 features) whose 12 transformer blocks use the fused attention."""
    from monai.networks.blocks import TransformerBlock
    from monai.networks.nets import UNETR

    if "use_flash_attention" not in inspect.signature(TransformerBlock).parameters:
        pytest.skip("the installed MONAI has no use_flash_attention")
    torch.manual_seed(0)
    kw = dict(in_channels=1, out_channels=2, img_size=(16, 16, 16), feature_size=2, hidden_size=16, mlp_dim=16,
              num_heads=2, dropout_rate=0.3)
    if "use_flash_attention" in inspect.signature(UNETR).parameters:
        return UNETR(**kw, use_flash_attention=True).eval()
    net = UNETR(**kw)  # MONAI 1.6.1's UNETR does not pass the option on: its blocks, built with it
    net.vit.blocks = torch.nn.ModuleList(
        [TransformerBlock(16, 16, 2, 0.3, use_flash_attention=True) for _ in range(12)])
    return net.eval()


def test_collect_logits_twice_gives_the_same_logits(tmp_path):
    net = _flash_unetr()
    x = torch.rand(1, 1, 16, 16, 16)
    with torch.no_grad():
        if torch.equal(net(x), net(x)):
            pytest.skip("the installed MONAI draws no attention dropout in eval mode")
    paths = write_toy_cohort(tmp_path / "data", n_cases=1, shape=(16, 16, 16), predictions=False)
    cases = list_image_cases(paths["images"])
    labels = list_files(paths["labels"])
    model = LoadedModel(network=net, description="a UNETR with fused attention", spatial_dims=3)
    runs = [collect_logits(cases, [labels[c.case_id] for c in cases], model, "none", progress=False)[0]
            for _ in range(2)]
    assert torch.equal(runs[0][0], runs[1][0])  # before: two draws of attention dropout
    image, _ = load_image_case(cases[0])
    with torch.no_grad(), align_fused_attention(net):  # the eval-mode logits, without attention dropout
        ref = net(torch.from_numpy(image)[None].float())
    assert torch.allclose(runs[0][0], ref, atol=1e-5)
    assert all(blk.attn.dropout_rate == 0.3 for blk in net.vit.blocks)  # given back


def test_calibrate_folds_the_temperature_into_a_unetr(tmp_path, monkeypatch):
    # the fold check compares the network's output before and after the fold: with random attention dropout in both,
    # the exact fold of the UNETR was refused and the temperature stored beside the weights
    import monai_unc.workflows.calibrate as calibrate

    net = _flash_unetr()
    paths = write_toy_cohort(tmp_path / "data", n_cases=1, shape=(16, 16, 16), predictions=False)
    model = LoadedModel(network=net, description="a UNETR with fused attention", spatial_dims=3)
    monkeypatch.setattr(calibrate, "load_network", lambda **kw: model)
    out, record = calibrate.run_calibrate(paths["images"], paths["labels"], tmp_path / "cal.pt", model="unetr",
                                          intensity="none", max_steps=5, progress=False)
    assert record["folded_into_last_layer"]  # before: False
    state = torch.load(out, weights_only=True)
    t = record["temperature"][0]
    torch.testing.assert_close(state["out.conv.conv.weight"], net.out.conv.conv.weight / t)
    assert all(blk.attn.dropout_rate == 0.3 for blk in net.vit.blocks)
