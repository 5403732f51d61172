"""A seeded call seeds the generators of every device the network's weights lie on (review 66).

The callers of ``seeded_rng`` passed the devices of the input, of the windows and of the network argument only: an
ensemble member spread over GPUs (its first weights on the windows' device, so not moved; others on ``cuda:1``) and
the nnU-Net predictor's network (only the predictor's device was passed) drew their dropout masks on a GPU that was
not seeded, so a seeded call was not reproducible there. There is no GPU here: a buffer whose ``device`` reads
``cuda:1`` stands for the weights on the second GPU, and ``seeded_rng`` is replaced by a recorder of the devices it
is given (the real one would initialise CUDA).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from monai_unc import _utils
from monai_unc.inferers import EnsembleSource, MCDropoutInferer, UncertaintyInferer, sampling

CUDA1 = torch.device("cuda", 1)


class _OnCuda1(torch.Tensor):
    """A CPU tensor whose ``device`` reads ``cuda:1`` (a weight on a second GPU of a model-parallel network)."""

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return CUDA1


def _net(spread: bool) -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Dropout2d(0.3), nn.Conv2d(4, 3, 1)).eval()
    if spread:  # the last layer's state on the second GPU
        net[2].register_buffer("stage", torch.Tensor._make_subclass(_OnCuda1, torch.zeros(1)))
    return net


@pytest.fixture
def seeded(monkeypatch):
    """The device lists the callers pass to ``seeded_rng`` (CPU seeding as the real one, nothing on a GPU)."""
    calls: list[list[torch.device | int]] = []

    @contextlib.contextmanager
    def recorder(seed, devices):
        calls.append(list(devices))
        with _utils.seeded_rng(seed, []):
            yield

    monkeypatch.setattr(sampling, "seeded_rng", recorder)
    return calls


def _cuda(devices) -> set[torch.device]:
    return {torch.device(d) if isinstance(d, torch.device) else torch.device("cuda", d) for d in devices
            if isinstance(d, int) or d.type == "cuda"}


def test_network_devices_are_those_of_every_parameter_and_buffer():
    assert _utils.network_devices(_net(spread=True)) == {torch.device("cpu"), CUDA1}
    assert _utils.network_devices(_net(spread=False), None, "a checkpoint path") == {torch.device("cpu")}
    assert _utils.network_devices() == set()
    wrapped = nn.DataParallel(_net(spread=False))
    wrapped.device_ids = [0, 2]  # its replicas run (and draw) on each listed GPU
    assert _utils.network_devices(nn.Sequential(wrapped)) >= {torch.device("cuda", 0), torch.device("cuda", 2)}


def test_an_ensemble_member_on_two_gpus_has_both_seeded(seeded):
    x = torch.rand(1, 1, 8, 8)
    member = _net(spread=True)  # first weights on the windows' device: not moved, its last stage stays on cuda:1
    UncertaintyInferer([EnsembleSource([member, _net(spread=False)])], seed=3)(x, None)
    assert len(seeded) == 1 and CUDA1 in _cuda(seeded[0]), seeded


def test_a_network_on_two_gpus_has_both_seeded(seeded):
    MCDropoutInferer(2, seed=3)(torch.rand(1, 1, 8, 8), _net(spread=True))
    assert len(seeded) == 1 and CUDA1 in _cuda(seeded[0]), seeded


def test_a_cpu_network_seeds_no_gpu_and_draws_the_same_samples(seeded):
    x, net = torch.rand(1, 1, 8, 8), _net(spread=False)
    state = torch.get_rng_state()
    first = MCDropoutInferer(3, seed=11)(x, net)
    second = MCDropoutInferer(3, seed=11)(x, net)
    assert [_cuda(d) for d in seeded] == [set(), set()]
    assert torch.equal(torch.get_rng_state(), state)
    for key in first:
        assert torch.equal(first[key], second[key]), key


def test_the_nnunet_predictor_seeds_its_network_s_gpus(monkeypatch):
    pytest.importorskip("nnunetv2")
    from monai_unc.nnunet import predictor as predictor_module

    calls: list[list] = []
    monkeypatch.setattr(predictor_module, "seeded_rng", lambda seed, devices: calls.append(list(devices)))
    pred = predictor_module.UncertaintyPredictor(("dropout",), device=torch.device("cpu"), allow_tqdm=False, seed=5)
    pred.network = _net(spread=True)
    pred._seed_context()
    pred.network = _net(spread=False)
    pred._seed_context()
    pred.seed = None
    assert isinstance(pred._seed_context(), contextlib.nullcontext)
    assert [_cuda(d) for d in calls] == [{CUDA1}, set()], calls
    assert torch.device("cpu") in calls[1]
