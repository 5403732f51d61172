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


def _round_trip(s: SampleStats) -> SampleStats:
    from monai_unc.state import pack_states, unpack_states

    back = SampleStats.from_state_dict(s.state_dict())
    again = unpack_states(pack_states({"s": s}))["s"]
    for other in (back, again):
        m1, m2 = s.measures(), other.measures()
        assert all(torch.equal(m1[k], m2[k]) for k in m1)
    return back


@pytest.mark.parametrize("class_variance", [True, False])
def test_state_of_bfloat16_samples_loads(class_variance: bool) -> None:
    # bfloat16 probabilities pass update's checks with bfloat16's tolerance (0.031; their sums are off 1 by up to
    # ~4e-3), and their means were refused when the state was loaded (tolerance 1e-3 of the float64 sums): a
    # SampleStats of bfloat16 samples could not be gathered across ranks (monai_unc.engine.reduce_state) or resumed
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(1, 3, 2000, generator=gen, dtype=torch.float64) * 3, dim=1).to(torch.bfloat16)
    assert float((p.double().sum(1) - 1).abs().max()) > 1e-3
    s = SampleStats(class_variance=class_variance).update(p).update(p, weight=2.0)
    assert _round_trip(s).out_dtype == torch.bfloat16


def test_state_of_a_sample_at_the_tolerance_loads_with_one_square_sum() -> None:
    # (1.0009, 0) passes update's checks (values and sum within 1e-3); sum_c p_c^2 = 1.0018 was refused on load as
    # above 1 (a one-channel second moment is at most (1 + tol)^2)
    p = torch.tensor([[[1.0009], [0.0]]], dtype=torch.float64)
    _round_trip(SampleStats(class_variance=False).update(p))


@pytest.mark.parametrize("values", [(1.0009, 0.0), (-0.0005, 1.0005)])
def test_state_of_a_sample_at_the_tolerance_loads_with_per_class_squares(values: tuple[float, float]) -> None:
    # p = 1.0009 gives p^2 - p = 9e-4, p = -0.0005 gives 5e-4: refused on load as "mean_sq above mean" (p^2 <= p holds
    # in [0, 1] only; the checks accept values within 1e-3 of it)
    p = torch.tensor([[[values[0]], [values[1]]]], dtype=torch.float64)
    _round_trip(SampleStats().update(p))
    _round_trip(SampleStats(multilabel=True).update(p))


def test_from_moments_of_bfloat16_samples_with_their_out_dtype() -> None:
    # float64 means of bfloat16 samples (sums off 1 by 2.7e-3) were refused with float64's tolerance, 1e-3
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(1, 3, 2000, generator=gen, dtype=torch.float64) * 3, dim=1).to(torch.bfloat16)
    s = SampleStats().update(p)
    m = s.moments()
    back = SampleStats.from_moments(m["pred"], m["expected_entropy"], m["mean_sq"], out_dtype=torch.bfloat16)
    assert torch.equal(back.measures()["pred"], s.measures()["pred"])
    with pytest.raises(ValueError, match="sum to 1"):  # without the samples' dtype: float64's tolerance
        SampleStats.from_moments(m["pred"], m["expected_entropy"], m["mean_sq"])
