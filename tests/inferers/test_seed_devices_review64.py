"""A seeded call seeds only the generators it draws on: the caller's GPU random streams are left alone.

Found by review 64: the inferers (and the nnU-Net predictor) seeded with ``torch.manual_seed``, which reseeds every
GPU (and queues that reseeding for later when CUDA is not initialised yet), but restored only the GPUs the call drew
on: a seeded call on a CPU input left the caller's CUDA generators reseeded to the inferer's seed.
"""

import pytest
import torch
from torch import nn

from monai_unc.inferers import MCDropoutInferer


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Dropout2d(0.3), nn.Conv2d(4, 3, 1)).eval()


def test_a_seeded_cpu_call_reseeds_no_gpu(monkeypatch):
    net, x = _net(), torch.rand(1, 1, 8, 8)
    calls = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: calls.append(("all", seed)))
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: calls.append(("one", seed)))
    state = torch.get_rng_state()
    first = MCDropoutInferer(3, seed=11)(x, net)
    second = MCDropoutInferer(3, seed=11)(x, net)
    assert calls == [], "a call on the CPU reseeded the GPUs"
    assert torch.equal(torch.get_rng_state(), state)
    for key in first:
        assert torch.equal(first[key], second[key]), key


def test_seeded_rng_draws_as_manual_seed_and_restores_the_cpu_stream():
    from monai_unc._utils import seeded_rng

    torch.manual_seed(5)
    expected = torch.rand(4)
    torch.manual_seed(1)
    state = torch.get_rng_state()
    with seeded_rng(5, []):
        drawn = torch.rand(4)
    assert torch.equal(drawn, expected)
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_seeded_cpu_call_leaves_the_gpu_stream_as_it_was():
    net, x = _net(), torch.rand(1, 1, 8, 8)
    torch.cuda.init()
    state = torch.cuda.get_rng_state()
    MCDropoutInferer(3, seed=11)(x, net)
    assert torch.equal(torch.cuda.get_rng_state(), state)


def test_the_devices_seeded_include_every_dataparallel_replica():
    """A DataParallel network draws its dropout masks on each of its devices: every one is seeded and restored."""
    from monai_unc._utils import network_devices  # the devices the inferers seed (moved there by review 66)

    wrapped = nn.DataParallel(_net())
    wrapped.device_ids = [0, 1]  # as on a machine with two GPUs (the replicas are made only when it runs)
    devices = network_devices(nn.Sequential(wrapped))
    assert {torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cpu")} <= devices
    assert network_devices(lambda t: t) == set()
