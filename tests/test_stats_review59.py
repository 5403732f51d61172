"""Hostile review 59: SampleStats refuses weights whose total its running sums cannot hold.

Each weight was checked on its own (positive and finite), never their total: two samples of weight 1e308 made
``sum_w`` infinite and every mean 0 (``pred`` 0 for every class, EE and MI 0) without a word, and one sample of weight
1e308 of 100 classes with an entropy of 3.0 nats an expected entropy of log(100) = 4.6 (``sum_h = 1e308 * 3.0`` is
infinite, read back as the cap); float32 sums overflowed at two weights of 3e38 (``pred`` NaN).
"""

from __future__ import annotations

import pytest
import torch

from monai_unc.stats import SampleStats

P = torch.tensor([[[0.2, 0.6], [0.8, 0.4]]], dtype=torch.float64)


def test_weights_whose_total_overflows_are_refused_and_nothing_is_added() -> None:
    s = SampleStats().update(P, weight=1e308)
    with pytest.raises(ValueError, match="total sample weight"):
        s.update(P, weight=1e308)
    assert s.count == 1e308 and s.num_updates == 1
    assert torch.allclose(s.mean, P, rtol=1e-15, atol=0)


def test_update_many_checks_the_total_before_adding_any_sample() -> None:
    for probs, kw in (([P, P], {}), (torch.cat([P, P]), {"num_samples": 2})):
        s = SampleStats()
        with pytest.raises(ValueError, match="total sample weight"):
            s.update_many(probs, weights=[1e308, 1e308], **kw)
        assert s.sum_p is None and s.count == 0.0


def test_entropy_sum_of_many_classes_stays_finite() -> None:
    # one sample of entropy 3.0 nats: sum_h = 1e308 * 3.0 was inf, read back as the cap log(100) = 4.6 nats
    p = torch.full((1, 100, 3), 0.5 / 99, dtype=torch.float64)
    p[:, 0] = 0.5
    h = -(p * p.log()).sum(1, keepdim=True)
    with pytest.raises(ValueError, match="total sample weight"):
        SampleStats().update(p, weight=1e308)
    ok = SampleStats().update(p, weight=1e300)  # far below the limit: the measures are those of unit weights
    ee = ok.measures(["expected_entropy"])["expected_entropy"]
    assert torch.allclose(ee, h, rtol=1e-14, atol=0)


def test_float32_sums_refuse_a_total_beyond_float32() -> None:
    s = SampleStats(accum_dtype=torch.float32).update(P.float(), weight=3e38)
    with pytest.raises(ValueError, match="total sample weight"):
        s.update(P.float(), weight=3e38)
    assert torch.isfinite(s.sum_p).all() and s.num_updates == 1


def test_merge_refuses_a_total_it_cannot_hold() -> None:
    a = SampleStats().update(P, weight=1e308)
    b = SampleStats().update(P, weight=1e308)
    with pytest.raises(ValueError, match="total sample weight"):
        a.merge(b)
    assert a.count == 1e308 and torch.allclose(a.mean, P, rtol=1e-15, atol=0)


def test_from_moments_refuses_a_count_its_sums_cannot_hold() -> None:
    p = torch.full((1, 100, 3), 0.5 / 99, dtype=torch.float64)
    p[:, 0] = 0.5
    h = -(p * p.log()).sum(1, keepdim=True)
    with pytest.raises(ValueError, match="total sample weight"):
        SampleStats.from_moments(p, h, count=1e308)  # sum_h = 3.0e308: inf
    s = SampleStats.from_moments(p, h, count=1e300)
    assert torch.allclose(s.measures(["expected_entropy"])["expected_entropy"], h, rtol=1e-14, atol=0)


@pytest.mark.parametrize(("dtype", "value"), [(torch.float64, 5e-324), (torch.float32, 1e-40), (torch.float32, 1e-46)])
def test_weights_below_the_smallest_normal_sum_are_refused(dtype: torch.dtype, value: float) -> None:
    # 5e-324 * 0.2 rounds to 0: two such samples gave pred (0, 1, 1, 0) for (0.2, 0.6, 0.8, 0.4); float32 sums rounded
    # a weight of 1e-46 to 0 (pred 0)
    s = SampleStats(accum_dtype=dtype)
    with pytest.raises(ValueError, match="subnormal"):
        s.update(P.to(dtype), weight=value)
    assert s.sum_p is None
    ok = SampleStats(accum_dtype=dtype).update(P.to(dtype), weight=torch.finfo(dtype).tiny)
    ok.update(P.to(dtype), weight=torch.finfo(dtype).tiny)
    assert torch.allclose(ok.mean, P.to(dtype), rtol=4 * torch.finfo(dtype).eps, atol=0)
