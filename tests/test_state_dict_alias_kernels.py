"""SampleStats.load_state_dict / from_state_dict: the new statistics own their sums (updates add in place)."""

import numpy as np
import pytest
import torch

import monai_unc._stats_kernels as stats_kernels
from monai_unc.stats import SampleStats


@pytest.fixture(params=[True, False], ids=["fused", "reference"])
def fused(request, monkeypatch):
    monkeypatch.setattr(stats_kernels, "FUSED_KERNELS", request.param)
    return request.param


def _p() -> torch.Tensor:
    return torch.tensor([[[0.2, 0.5], [0.8, 0.5]]], dtype=torch.float64)


def test_from_state_dict_does_not_write_into_the_source_statistics(fused):
    src = SampleStats().update(_p())
    copy = SampleStats.from_state_dict(src.state_dict())
    copy.update(_p())
    torch.testing.assert_close(src.mean, _p(), rtol=0, atol=0)
    torch.testing.assert_close(src.sum_p2, _p() ** 2, rtol=0, atol=0)
    assert copy.count == 2.0
    torch.testing.assert_close(copy.sum_p, 2 * _p(), rtol=0, atol=0)


def test_load_state_dict_does_not_write_into_another_statistics_or_numpy_state(fused):
    src = SampleStats().update(_p())
    dst = SampleStats().load_state_dict(src.state_dict())
    dst.update(_p())
    torch.testing.assert_close(src.sum_p, _p(), rtol=0, atol=0)
    arrays = {k: (v.numpy().copy() if isinstance(v, torch.Tensor) else v) for k, v in src.state_dict().items()}
    before = {k: v.copy() for k, v in arrays.items() if isinstance(v, np.ndarray)}
    SampleStats.from_state_dict(arrays).update(_p())
    for k, v in before.items():
        np.testing.assert_array_equal(arrays[k], v)


def test_own_state_round_trip_keeps_the_sums(fused):
    s = SampleStats().update(_p())
    state = s.state_dict()
    state["sum_p"].mul_(2.0)  # e.g. an all_reduce of two equal ranks
    state["sum_h"].mul_(2.0)
    state["sum_p2"].mul_(2.0)
    state["sum_w"] = 2.0
    s.load_state_dict(state).update(_p())
    assert s.count == 3.0
    torch.testing.assert_close(s.mean, _p(), rtol=0, atol=1e-15)
