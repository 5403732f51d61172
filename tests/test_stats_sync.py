"""SampleStats.from_moments checks finiteness in chunks with one device synchronisation (issue: small-volume overhead
of MC dropout on a GPU)."""

from __future__ import annotations

import pytest
import torch

from monai_unc.stats import DEFAULT_CHUNK_ELEMENTS, SampleStats, spatial_chunks
from tests._device import count_synchronisations


def moments(device: torch.device | str = "cpu", depth: int = 80):
    g = torch.Generator().manual_seed(0)
    mean = torch.softmax(torch.randn(1, 3, depth, 96, 96, generator=g, dtype=torch.float64), 1).to(device)
    ee = torch.rand(1, 1, depth, 96, 96, generator=g, dtype=torch.float64).to(device)
    return mean, ee


@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_mean_in_any_chunk_raises(where, bad):
    mean, ee = moments()
    assert len(spatial_chunks(tuple(mean.shape), DEFAULT_CHUNK_ELEMENTS)) > 2
    mean[0, 1, 0 if where == "first" else -1, 5, 5] = bad
    mean[0, 2, 0 if where == "first" else -1, 7, 7] = bad
    with pytest.raises(ValueError, match=r"mean contains 2 non-finite value\(s\)"):
        SampleStats.from_moments(mean, ee, count=2.0)


def test_finite_means_give_the_sums():
    mean, ee = moments()
    s = SampleStats.from_moments(mean.clone(), ee.clone(), mean_sq=mean * mean, count=4.0)
    assert torch.equal(s.sum_p, mean * 4.0) and torch.equal(s.sum_h, ee * 4.0)
    assert s.count == 4.0 and s.num_updates == 4


@pytest.mark.cuda
def test_from_moments_synchronises_once(cuda_device):
    if cuda_device.type != "cuda":
        pytest.skip("counts CUDA synchronisations")
    mean, ee = moments(cuda_device)
    assert len(spatial_chunks(tuple(mean.shape), DEFAULT_CHUNK_ELEMENTS)) > 2
    with count_synchronisations() as syncs:  # as the inferers call it: their own moments, the finiteness check only
        SampleStats.from_moments(mean, ee, count=2.0, validate=False)
    assert len(syncs) == 1, syncs
