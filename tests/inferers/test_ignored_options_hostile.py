"""Options of the inferers that would do nothing are refused, not ignored (hostile review of the API's promises).

``TTAInferer`` and ``EnsembleInferer`` dropped a ``sources=`` keyword without a word (TTA x MC dropout asked for,
flips alone computed), ``TTAInferer(noise_samples=k)`` without ``noise_std`` and ``transform_samples=k`` without
``transforms`` gave the flips alone, and their counts were not even checked.
"""

import pytest
import torch
from monai.transforms import Rotate90

from monai_unc.inferers import (
    EnsembleInferer,
    FlipSource,
    MCDropoutInferer,
    MCDropoutSource,
    RateInInferer,
    SoftmaxInferer,
    SSNInferer,
    TTAInferer,
    UncertaintyInferer,
)


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv3d(1, 4, 3, padding=1), torch.nn.Dropout3d(0.5), torch.nn.Conv3d(4, 3, 1)
    ).eval()


IMAGE = torch.rand(1, 1, 4, 4, 4, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("make", [
    lambda **kw: TTAInferer(flip_axes=(0,), **kw),
    lambda **kw: EnsembleInferer([_net(), _net()], **kw),
    lambda **kw: MCDropoutInferer(num_samples=2, **kw),
    lambda **kw: RateInInferer(num_samples=2, **kw),
    lambda **kw: SoftmaxInferer(**kw),
    lambda **kw: SSNInferer(num_samples=2, **kw),
], ids=["tta", "ensemble", "mcdropout", "rate_in", "softmax", "ssn"])
def test_sources_keyword_is_refused_not_dropped(make):
    with pytest.raises(ValueError, match="sources"):
        make(sources=[MCDropoutSource(5)])
    make(sources=())  # an empty sources asks for nothing: accepted as before


def test_tta_with_dropout_is_built_with_uncertainty_inferer():
    # the refused call's intent, done the documented way: 2 flips x 5 dropout passes
    out = UncertaintyInferer([FlipSource((0,)), MCDropoutSource(5)], seed=0)(IMAGE, _net())
    assert out.num_samples == 10


@pytest.mark.parametrize("kwargs, match", [
    ({"noise_samples": 4}, "noise_samples=4 needs noise_std > 0"),
    ({"noise_samples": 0, "noise_std": 0.1}, "noise_samples must be a positive integer"),
    ({"noise_samples": 0}, "noise_samples must be a positive integer"),
    ({"noise_samples": "3"}, "noise_samples must be a positive integer"),
    ({"noise_samples": True, "noise_std": 0.1}, "noise_samples must be a positive integer"),
    ({"transform_samples": 5}, "transform_samples=5 needs transforms"),
    ({"transform_samples": 0}, "transform_samples must be a positive integer"),
])
def test_tta_counts_that_apply_to_nothing_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TTAInferer(**kwargs)


def test_tta_counts_still_multiply_when_they_apply():
    net = _net()
    assert TTAInferer(noise_std=0.1, noise_samples=3, seed=0)(IMAGE, net).num_samples == 8 * 3
    rot = [Rotate90(k=1, spatial_axes=(0, 1))]
    assert TTAInferer(flip_axes=(), transforms=rot, transform_samples=2)(IMAGE, net).num_samples == 2
    assert TTAInferer(noise_samples=1, transform_samples=1)(IMAGE, net).num_samples == 8  # the defaults, spelled out
