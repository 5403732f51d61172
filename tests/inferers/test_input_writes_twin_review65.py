"""One predicate for "the call wrote into its input" (review 65): ``watch_input`` and ``InputGuard.restore`` share it.

Both kept their own copy of it (a changed storage or version counter; for an inference tensor, changed bits), so a
fix to one (review 64's NaN-safe comparison) had to be made twice. These tests pin that both ask the one helper and
that they agree on the cases the predicate tells apart.
"""

from __future__ import annotations

import pytest
import torch

from monai_unc.networks import shared
from monai_unc.networks.shared import InputGuard, watch_input


def _nan_free_write(t: torch.Tensor) -> torch.Tensor:
    return t.mul_(2)


def _same_values_write(t: torch.Tensor) -> torch.Tensor:
    return t.copy_(t.clone())  # a write (version bumped) of the same values


def _swap_storage(t: torch.Tensor) -> torch.Tensor:
    return t.set_(t.clone())  # new storage, same values


def _read_only(t: torch.Tensor) -> torch.Tensor:
    return t * 2


@pytest.mark.parametrize("inference", [False, True])
@pytest.mark.parametrize(
    "run, written",
    # a write of the same values counts where a version counter sees it; an inference tensor has none (bits compared)
    [(_nan_free_write, (True, True)), (_same_values_write, (True, False)), (_swap_storage, (True, True)),
     (_read_only, (False, False))],
)
def test_watch_input_and_guard_agree(run, written, inference):
    def make() -> torch.Tensor:
        with torch.inference_mode(inference):
            return torch.tensor([1.0, float("nan"), -0.0])

    def call(t: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(inference):
            return run(t)

    expected = written[inference]
    assert (watch_input(call, make())[1] is not None) is expected
    x = make()
    guard = InputGuard(x)
    call(x)
    copies = []
    x_copy = x.copy_
    x.copy_ = lambda src: copies.append(src) or x_copy(src)  # what restore() does when it sees a write
    with torch.inference_mode(inference):  # as the inferers restore an inference tensor
        guard.restore()
    assert bool(copies) is expected
    assert torch.equal(x.view(torch.int32), torch.tensor([1.0, float("nan"), -0.0]).view(torch.int32))


def test_both_ask_the_one_helper(monkeypatch):
    asked = []

    def spy(x, storage, version, before):
        asked.append(x)
        return True

    monkeypatch.setattr(shared, "_input_changed", spy)
    x = torch.ones(2)
    assert watch_input(lambda t: t * 3, x)[1] is not None  # the spy says "written"
    guard = InputGuard(x)
    x.fill_(0.0)  # not a write the spy needs; restore copies back because the spy says so
    guard.restore()
    assert x.tolist() == [1.0, 1.0] and len(asked) == 2 and all(a is x for a in asked)
