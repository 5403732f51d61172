"""Hostile input to ``monai_unc.inferers.TTAInferer``: a NaN, negative, infinite or string noise level is refused;
flip axes must be integers; the seed reaches MONAI's random transforms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monai.inferers import SlidingWindowInferer
from monai.transforms import RandAffine

from monai_unc.inferers import FlipSource, NoiseSource, TTAInferer, flip_subsets


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf"), "0.1"])
def test_tta_noise_std_is_validated(bad):
    with pytest.raises(ValueError, match="noise_std"):
        TTAInferer(noise_std=bad)


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf"), "0.1", None, True, torch.tensor(0.1)])
def test_noise_source_std_is_validated_naming_it(bad):
    """Found by hostile testing: ``NoiseSource("0.1")`` (or None) failed with Python's unnamed ``'>=' not supported``,
    and ``NoiseSource(True)`` drew noise of standard deviation 1, where ``TTAInferer(noise_std=...)`` refused them."""
    with pytest.raises(ValueError, match="std must be a finite number >= 0"):
        NoiseSource(bad)
    assert NoiseSource(np.float32(0.5)).std == 0.5 and NoiseSource(0).std == 0.0


@pytest.mark.parametrize("axes", [(0.7,), (1.9,), [True], (np.float64(1.0),), 0, np.int64(1), None, b"\x00",
                                  np.zeros((1, 1), dtype=int)])
def test_flip_axes_must_be_a_sequence_of_integers(axes):
    """Found by hostile testing: ``int()`` truncated ``(0.7,)`` to axis 0 and ``(1.9,)`` to axis 1 and took ``[True]``
    for axis 1; ``flip_axes=0`` failed with ``'int' object is not iterable``."""
    with pytest.raises(TypeError, match="flip_axes"):
        TTAInferer(flip_axes=axes)
    with pytest.raises(TypeError, match="flip_axes"):
        flip_subsets(3, axes)


def test_negative_flip_axes_count_from_the_last_spatial_axis():
    """Found by hostile testing: ``(-1,)`` was refused as "out of range for 0 spatial dimensions". Negative axes now
    count from the last spatial axis, as MONAI's ``Flip(spatial_axis=-1)`` does; out of range or naming an axis twice
    is a ValueError naming ``flip_axes`` and the input's number of spatial axes."""
    torch.manual_seed(0)
    net = torch.nn.Conv3d(1, 3, 3, padding=1)
    x = torch.randn(1, 1, 4, 5, 6)
    assert flip_subsets(3, [-1]) == [(), (2,)] and flip_subsets(3, (0, -2)) == [(), (0,), (1,), (0, 1)]
    neg = TTAInferer(flip_axes=(-1,), keep_samples=True)(x, net)
    pos = TTAInferer(flip_axes=(2,), keep_samples=True)(x, net)
    assert neg.num_samples == 2 and torch.equal(neg["samples"], pos["samples"])
    with pytest.raises(ValueError, match=r"flip_axes \[-4\] out of range for an input with 3 spatial axes"):
        TTAInferer(flip_axes=(-4,))(x, net)
    with pytest.raises(ValueError, match="flip_axes .* name an axis twice"):
        TTAInferer(flip_axes=(2, -1))(x, net)
    with pytest.raises(ValueError, match="flip_axes has repeated axes"):
        FlipSource((1, 1))


def _rand_affine() -> RandAffine:
    return RandAffine(prob=1.0, rotate_range=(0.3,) * 3, padding_mode="border")


def test_seed_reaches_monai_random_transforms():
    """Found by hostile testing: MONAI's random transforms draw from their own numpy ``RandomState``, which the
    inferer's ``seed`` did not reach: the same seeded inferer gave other maps on every call (up to 0.09 apart). With
    a seed every call now runs copies of the transforms seeded from the inferer's stream: calls repeat, draws differ
    between samples, the given transforms keep their own state."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Tanh(), torch.nn.Conv3d(4, 3, 1)).eval()
    x = torch.randn(1, 1, 9, 12, 15)
    affine = _rand_affine()
    state = affine.R.get_state()[1].copy()

    def make(seed, transform=affine):
        return TTAInferer(flip_axes=(), transforms=[transform], transform_samples=3, seed=seed, keep_samples=True)

    inferer = make(0)
    a, b = inferer(x, net), inferer(x, net)
    assert torch.equal(a["pred"], b["pred"]) and torch.equal(a["samples"], b["samples"])
    assert torch.equal(make(0, _rand_affine())(x, net)["samples"], a["samples"])  # another inferer, same seed
    assert not torch.equal(make(1)(x, net)["pred"], a["pred"])
    s = a["samples"]
    assert not torch.equal(s[0], s[1]) and not torch.equal(s[1], s[2])  # independent draws per sample
    assert np.array_equal(affine.R.get_state()[1], state)  # the given transform's state is left alone
    # sliding windows: every window draws anew, and seeded calls repeat
    windows = TTAInferer(flip_axes=(), transforms=[affine], transform_samples=2, seed=3,
                         base_inferer=SlidingWindowInferer((9, 8, 8), overlap=0.25))
    assert torch.equal(windows(x, net)["pred"], windows(x, net)["pred"])


def test_unseeded_transforms_draw_from_their_own_random_state():
    """Without a seed the transforms as given draw from their own states (as before): seeding them repeats a run."""
    torch.manual_seed(0)
    net = torch.nn.Conv3d(1, 3, 3, padding=1).eval()
    x = torch.randn(1, 1, 9, 12, 15)
    affine = _rand_affine()
    inferer = TTAInferer(flip_axes=(), transforms=[affine], transform_samples=2)
    first = inferer(x, net)["pred"]
    assert not torch.equal(inferer(x, net)["pred"], first)  # the state moved on
    affine.set_random_state(7)
    again = inferer(x, net)["pred"]
    affine.set_random_state(7)
    assert torch.equal(inferer(x, net)["pred"], again)
    # a seeded call in between does not move the given transform's state
    affine.set_random_state(7)
    TTAInferer(flip_axes=(), transforms=[affine], seed=0)(x, net)
    assert torch.equal(inferer(x, net)["pred"], again)
