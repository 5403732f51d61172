"""The nnU-Net predictor replays a sample's random state on every GPU its networks draw on (review 66).

The mirrored passes (and averaged SSN folds) of one stochastic sample restore the state the first one started with.
The state was kept for the CPU and the input's GPU only: a network spread over two GPUs drew other dropout masks on
the second in every mirror, so a sample was no longer one network seen through its mirrors. There is no GPU here:
``torch.cuda.get_rng_state`` / ``set_rng_state`` are replaced by recorders.
"""

from __future__ import annotations

import torch

from monai_unc.nnunet import predictor


def test_random_state_keeps_and_restores_every_cuda_device(monkeypatch):
    got, put = [], []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda d: got.append(d) or torch.tensor([d.index]))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, d: put.append((int(state[0]), d)))
    state = predictor._RandomState(torch.device("cuda", 0), torch.device("cpu"), torch.device("cuda", 1),
                                   torch.device("cuda", 0))
    assert got == [torch.device("cuda", 0), torch.device("cuda", 1)]
    cpu = torch.random.get_rng_state()
    torch.rand(3)
    state.restore()
    assert put == [(0, torch.device("cuda", 0)), (1, torch.device("cuda", 1))]
    assert torch.equal(torch.random.get_rng_state(), cpu)


def test_random_state_on_the_cpu_keeps_the_cpu_stream_only(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda d: (_ for _ in ()).throw(AssertionError(d)))
    state = predictor._RandomState(torch.device("cpu"))
    a = torch.rand(4)
    state.restore()
    assert torch.equal(torch.rand(4), a)
