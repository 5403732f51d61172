"""Hostile input for the MC dropout inferer: sample counts, modes, networks without dropout, references."""

import pytest
import torch
from torch import nn

from monai_unc.inferers import MCDropoutInferer, MCDropoutSource, enable_mc_dropout


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout2d(0.5),
                         nn.Conv2d(4, 3, 1)).eval()


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3", None])
def test_sample_counts_are_integers_from_one(bad):
    with pytest.raises(ValueError, match="num_samples"):
        MCDropoutInferer(num_samples=bad)
    with pytest.raises(ValueError, match="num_samples"):
        MCDropoutSource(bad)


@pytest.mark.parametrize("share_passes", [True, False])
def test_maps_equal_the_direct_evaluation_of_the_kept_samples(share_passes):
    net, x = _net(), torch.rand(2, 1, 6, 6)
    out = MCDropoutInferer(4, seed=0, keep_samples=True, share_passes=share_passes)(x, net)
    s = out["samples"].double()
    mean = s.mean(0)

    def h(p):
        return -(p * p.clamp_min(1e-30).log()).sum(1, keepdim=True)

    assert torch.allclose(out["pred"].double(), mean, atol=1e-6)
    assert torch.allclose(out["predictive_entropy"].double(), h(mean), atol=1e-5)
    assert torch.allclose(out["mutual_information"].double(), h(mean) - h(s.flatten(0, 1)).view(4, 2, 1, 6, 6).mean(0),
                          atol=1e-5)
    assert len({tuple(t.flatten().tolist()) for t in s}) == 4  # four different masks


def test_seeds_reproduce_and_differ():
    net, x = _net(), torch.rand(1, 1, 6, 6)
    a, b, c = (MCDropoutInferer(3, seed=s)(x, net)["pred"] for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_batch_norm_stays_in_eval_and_modes_are_restored_after_an_exception():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    net = _net()
    running = net[1].running_mean.clone()
    MCDropoutInferer(3, seed=0)(torch.rand(2, 1, 6, 6), net)
    assert torch.equal(net[1].running_mean, running) and not any(m.training for m in net.modules())
    net.append(Boom().eval())
    with pytest.raises(RuntimeError, match="boom"):
        MCDropoutInferer(3, seed=0)(torch.rand(1, 1, 6, 6), net)
    assert not any(m.training for m in net.modules())


def test_network_without_dropout_is_refused():
    net = nn.Sequential(nn.Conv2d(1, 2, 1), nn.Dropout(0.0)).eval()
    with pytest.raises(ValueError, match="no dropout layer"):
        MCDropoutInferer(2)(torch.rand(1, 1, 4, 4), net)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_network(dtype):
    net, x = _net().to(dtype), torch.rand(1, 1, 6, 6, dtype=dtype)
    out = MCDropoutInferer(3, seed=0)(x, net)
    assert out["pred"].dtype == dtype and bool(torch.isfinite(out["mutual_information"]).all())
    with enable_mc_dropout(net):
        pass
    assert not net[3].training
