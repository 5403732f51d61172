"""Hostile review (determinism): the inferers' ``seed`` is an integer in ``[0, 2**64)``, checked when it is given.

``torch.manual_seed`` takes ``int(seed)`` and wraps negatives, so before the check ``seed=1.5`` drew seed 1's dropout
masks, ``seed=True`` seed 1's, ``seed="0"`` seed 0's and ``seed=-1`` the masks of ``2**64 - 1`` (two different seeds,
the same draws), while ``seed=2**64`` failed only at the first call with torch's ``Overflow when unpacking long long``.
"""

import numpy as np
import pytest
import torch

from monai_unc.inferers import MCDropoutInferer, SoftmaxInferer, TTAInferer

MAX_SEED = 2**64 - 1


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(0.5),
                               torch.nn.Conv3d(4, 2, 1)).eval()


@pytest.mark.parametrize("seed", [1.5, True, np.bool_(False), "0", 2.0])
@pytest.mark.parametrize("cls", [MCDropoutInferer, TTAInferer, SoftmaxInferer])
def test_seed_that_is_no_integer_is_refused(cls, seed):
    with pytest.raises(TypeError, match="seed must be an integer"):
        cls(seed=seed)


@pytest.mark.parametrize("seed", [-1, -(2**63), 2**64, MAX_SEED + 10])
def test_seed_outside_64_bits_is_refused(seed):
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64 - 1\]"):
        MCDropoutInferer(num_samples=2, seed=seed)


def test_seed_set_after_construction_is_checked_at_the_call():
    """A bundle or a script may set ``inferer.seed`` later: checked before anything is drawn."""
    inferer = MCDropoutInferer(num_samples=2, seed=0)
    inferer.seed = 1.5
    with pytest.raises(TypeError, match="seed must be an integer"):
        inferer(torch.rand(1, 1, 6, 6, 6), _net())


def test_largest_and_numpy_seeds_draw_as_torch_does():
    """``2**64 - 1`` and numpy integers are seeds; a numpy seed draws the same masks as the Python integer."""
    net, x = _net(), torch.rand(1, 1, 6, 6, 6)
    assert MCDropoutInferer(num_samples=2, seed=np.uint64(MAX_SEED)).seed == MAX_SEED
    a = MCDropoutInferer(num_samples=3, seed=np.int64(5))(x, net)["mutual_information"]
    b = MCDropoutInferer(num_samples=3, seed=5)(x, net)["mutual_information"]
    c = MCDropoutInferer(num_samples=3, seed=6)(x, net)["mutual_information"]
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_check_seed():
    from monai_unc._utils import MAX_SEED as bound
    from monai_unc._utils import check_seed

    assert bound == MAX_SEED
    assert check_seed(None) is None
    assert check_seed(0) == 0 and type(check_seed(np.int32(3))) is int
    with pytest.raises(TypeError, match="rng_seed must be"):
        check_seed(0.0, "rng_seed")
