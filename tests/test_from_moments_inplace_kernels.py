"""SampleStats.from_moments(inplace=True): a moment is scaled in place only where that changes it alone."""

import pytest
import torch

from monai_unc.stats import SampleStats


def _one_hot_mean() -> torch.Tensor:
    return torch.tensor([[[0.0, 1.0, 0.5], [1.0, 0.0, 0.5]]], dtype=torch.float64)


def test_same_tensor_as_mean_and_mean_sq_is_scaled_once():
    m = _one_hot_mean()
    h = torch.zeros(1, 1, 3, dtype=torch.float64)
    ref = SampleStats.from_moments(m.clone(), h.clone(), mean_sq=m.clone(), count=3.0)
    got = SampleStats.from_moments(m, h, mean_sq=m, count=3.0, inplace=True)
    torch.testing.assert_close(got.mean, _one_hot_mean(), rtol=0, atol=0)
    torch.testing.assert_close(got.sum_p, ref.sum_p, rtol=0, atol=0)
    torch.testing.assert_close(got.sum_p2, ref.sum_p2, rtol=0, atol=0)
    # the sums are separate tensors: a later update adds p to sum_p and p^2 to sum_p2 once each
    p = torch.tensor([[[0.2, 0.6, 0.9], [0.8, 0.4, 0.1]]], dtype=torch.float64)
    got.update(p)
    ref.update(p)
    torch.testing.assert_close(got.sum_p, ref.sum_p, rtol=0, atol=0)
    torch.testing.assert_close(got.sum_p2, ref.sum_p2, rtol=0, atol=0)


def test_overlapping_views_of_one_buffer_are_not_scaled_twice():
    buf = torch.rand(1, 2, 5, dtype=torch.float64)
    buf = buf / buf.sum(1, keepdim=True)
    expected = buf.clone()
    h = torch.zeros(1, 1, 5, dtype=torch.float64)
    got = SampleStats.from_moments(buf, h, mean_sq=buf[:, :, :], count=4.0, inplace=True)
    torch.testing.assert_close(got.mean, expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(got.sum_p2, 4.0 * expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_broadcast_mean_is_copied(dtype):
    m = torch.tensor([[[0.25], [0.75]]], dtype=dtype).expand(1, 2, 6)
    h = torch.full((1, 1, 6), 0.5, dtype=dtype)
    got = SampleStats.from_moments(m, h, count=2.0, inplace=True)
    torch.testing.assert_close(got.sum_p, 2.0 * m, rtol=0, atol=0)
    torch.testing.assert_close(m[0, :, 0], torch.tensor([0.25, 0.75], dtype=dtype), rtol=0, atol=0)


def test_separate_tensors_are_still_scaled_in_place():
    m = _one_hot_mean()
    h = torch.zeros(1, 1, 3, dtype=torch.float64)
    sq = m.clone()
    got = SampleStats.from_moments(m, h, mean_sq=sq, count=3.0, inplace=True)
    assert got.sum_p.data_ptr() == m.data_ptr() and got.sum_p2.data_ptr() == sq.data_ptr()
    torch.testing.assert_close(got.mean, _one_hot_mean(), rtol=0, atol=0)
