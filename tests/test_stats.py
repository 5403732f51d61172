"""SampleStats for many classes: float32 sums within the stated bound of float64, the one-channel variance moment,
in-place moments and chunked final measures (docs/design.md, "Memory")."""

from __future__ import annotations

import pytest
import torch

from monai_unc.stats import (
    ALL_MEASURES,
    MEAN_SQ_SUM,
    SampleStats,
    accumulation_error_bound,
    auto_accum_dtype,
    derive_measures,
    spatial_chunks,
)

KEYS = [k.value for k in ALL_MEASURES]
U = 2.0**-24  # float32 unit roundoff


def _gamma(k: int) -> float:
    return k * U / (1 - k * U)


def _samples(n: int, c: int, shape=(2, 6, 5, 4), seed: int = 0, sharp: float = 4.0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(shape[0], c, *shape[1:], generator=g) * sharp
    return [torch.softmax(base + 0.5 * torch.randn(base.shape, generator=g), 1) for _ in range(n)]


def _stats(samples, dtype, **kw) -> SampleStats:
    st = SampleStats(accum_dtype=dtype, **kw)
    for p in samples:
        st.update(p)
    return st


@pytest.mark.parametrize("n", [1, 2, 7, 30, 100])
@pytest.mark.parametrize("c", [3, 105])
def test_float32_sums_within_the_stated_bound_of_float64(n, c):
    samples = _samples(n, c, seed=n)
    s64 = _stats(samples, torch.float64, class_variance=False)
    s32 = _stats(samples, torch.float32, class_variance=False)
    bound = accumulation_error_bound(n)
    assert bound == pytest.approx(_gamma(n + 1))
    m64, m32 = s64.moments(), s32.moments()
    # the one-channel second moment also sums C squares per sample: gamma_{N+C+1}
    for key, rel in (("pred", bound), ("expected_entropy", bound), (MEAN_SQ_SUM, _gamma(n + c + 1))):
        ref, got = m64[key], m32[key].double()
        # the float64 means carry their own rounding (gamma_{N+1} in float64): negligible, allowed for
        assert bool(((got - ref).abs() <= (rel + 1e-12) * ref.abs() + 1e-300).all()), key
    # the maps (output dtype float32: one more rounding of each value)
    d64, d32 = s64.measures(), s32.measures()
    pe, ee = d64["predictive_entropy"].double(), d64["expected_entropy"].double()
    out_round = 2 * U
    err = {k: (d32[k].double() - d64[k].double()).abs() for k in d64}
    g_n, g_c = _gamma(n + 1), _gamma(c + 2)
    d_pe = g_n * (pe + 1) + g_c * pe + out_round * (pe + 1)
    d_ee = g_n * ee + out_round * (ee + 1)
    assert bool((err["predictive_entropy"] <= d_pe).all())
    assert bool((err["expected_entropy"] <= d_ee).all())
    assert bool((err["mutual_information"] <= d_pe + d_ee).all())
    assert bool((err["one_minus_max_prob"] <= g_n + out_round).all())
    assert bool((err["variance"] <= (3 * g_n + 2 * _gamma(c + 1)) / c + out_round).all())
    assert bool((err["pred"] <= bound * d64["pred"].double() + out_round * d64["pred"].double()).all())


def test_float32_bound_is_not_vacuous():
    """The bound is tight enough to tell float32 from float16 sums (so the test above can fail)."""
    samples = _samples(100, 105, seed=1)
    ref = _stats(samples, torch.float64).moments()["pred"]
    with pytest.warns(UserWarning, match="accum_dtype=torch.float16"):
        half = _stats(samples, torch.float16).moments()["pred"].double()
    assert not bool(((half - ref).abs() <= accumulation_error_bound(100) * ref).all())


def test_auto_accum_dtype_and_bound_arguments():
    assert auto_accum_dtype(16) == torch.float64 and auto_accum_dtype(17) == torch.float32
    st = SampleStats(accum_dtype=None)
    st.update(_samples(1, 20)[0])
    assert st.sum_p.dtype == torch.float32
    st = SampleStats(accum_dtype=None)
    st.update(_samples(1, 3)[0])
    assert st.sum_p.dtype == torch.float64
    with pytest.raises(ValueError, match="num_samples"):
        accumulation_error_bound(0)
    with pytest.raises(ValueError, match="num_classes"):
        auto_accum_dtype(0)
    with pytest.raises(TypeError, match="accum_dtype"):
        SampleStats(accum_dtype=torch.int32)


@pytest.mark.parametrize("c", [2, 3, 40])
def test_one_channel_variance_moment_equals_per_class_variance(c):
    samples = _samples(9, c)
    per_class = _stats(samples, torch.float64)
    summary = _stats(samples, torch.float64, class_variance=False)
    assert summary.sum_p2.shape[1] == 1 and per_class.sum_p2.shape[1] == c
    v1, v2 = per_class.measures(["variance"])["variance"], summary.measures(["variance"])["variance"]
    torch.testing.assert_close(v2, v1, rtol=0, atol=1e-7)
    # merging statistics of both kinds keeps the one-channel moment, and the pooled variance
    a = _stats(samples[:4], torch.float64)
    b = _stats(samples[4:], torch.float64, class_variance=False)
    for merged in (a.merge(b), _stats(samples[4:], torch.float64, class_variance=False).merge(
            _stats(samples[:4], torch.float64))):
        assert MEAN_SQ_SUM in merged.moments()
        torch.testing.assert_close(merged.measures(["variance"])["variance"], v1, rtol=0, atol=1e-7)


def test_multilabel_keeps_per_channel_second_moments():
    g = torch.Generator().manual_seed(0)
    samples = [torch.rand(1, 3, 4, 4, generator=g) for _ in range(5)]
    st = SampleStats(multilabel=True, class_variance=False)
    for p in samples:
        st.update(p)
    assert st.measures(["variance"])["variance"].shape == (1, 3, 4, 4)
    torch.testing.assert_close(st.measures(["variance"])["variance"], torch.stack(samples).var(0, correction=0))


def test_take_moments_equals_moments_without_a_copy():
    samples = _samples(5, 7)
    st = _stats(samples, torch.float64, class_variance=False)
    ref = st.moments()
    sum_p = st.sum_p
    taken = st.take_moments()
    assert taken["pred"].data_ptr() == sum_p.data_ptr()
    for k in ref:
        assert torch.equal(taken[k], ref[k])
    with pytest.raises(ValueError, match="empty"):
        st.moments()


def test_from_moments_inplace_and_state_round_trip():
    samples = _samples(4, 20)
    st = _stats(samples, torch.float32, class_variance=False)
    mom = {k: v.clone() for k, v in st.moments().items()}
    copy = SampleStats.from_moments(mom["pred"].clone(), mom["expected_entropy"].clone(),
                                    mean_sq_sum=mom[MEAN_SQ_SUM].clone(), count=4.0)
    buf = mom["pred"].clone()
    inplace = SampleStats.from_moments(buf, mom["expected_entropy"].clone(), mean_sq_sum=mom[MEAN_SQ_SUM].clone(),
                                       count=4.0, inplace=True)
    assert inplace.sum_p.data_ptr() == buf.data_ptr()
    assert torch.equal(inplace.sum_p, copy.sum_p) and torch.equal(inplace.sum_p2, copy.sum_p2)
    loaded = SampleStats(accum_dtype=None).load_state_dict(inplace.state_dict())
    assert not loaded.class_variance and loaded.sum_p.dtype == torch.float32
    torch.testing.assert_close(loaded.measures()["variance"], st.measures()["variance"])
    with pytest.raises(ValueError, match="not both"):
        SampleStats.from_moments(buf, mom["expected_entropy"], mean_sq=buf, mean_sq_sum=mom[MEAN_SQ_SUM])


@pytest.mark.parametrize("c", [2, 3, 40, 105])
@pytest.mark.parametrize("class_variance", [True, False])
def test_chunked_final_measures_equal_unchunked(c, class_variance):
    """Every voxel is derived on its own: chunks give the same maps.

    Exactly for the maps without a sum over classes (pred, EE, 1 - max p) and for up to 3 classes; the class sums of
    the entropy and the variance may be reduced in another order by torch on a smaller tensor, so there the maps agree
    to the rounding of a sum of C terms (``C eps`` relative).
    """
    samples = _samples(6, c, shape=(2, 11, 7, 5), seed=c)
    mom = _stats(samples, torch.float32, class_variance=class_variance).moments()
    mom["window_disagreement"] = torch.rand(2, 1, 11, 7, 5, generator=torch.Generator().manual_seed(3)) * 1e-3
    keys = KEYS + ["window_disagreement"]
    whole = derive_measures(mom, keys, chunk_elements=None)
    assert len(spatial_chunks(tuple(mom["pred"].shape), 4 * c * 7 * 5)) == 6
    for elements in (1, 4 * c * 7 * 5, 10**9):
        parts = derive_measures(mom, keys, chunk_elements=elements)
        assert list(parts) == keys
        for k in keys:
            assert parts[k].shape == whole[k].shape and parts[k].dtype == whole[k].dtype
            if c <= 3 or k in ("pred", "expected_entropy", "one_minus_max_prob", "window_disagreement"):
                assert torch.equal(parts[k], whole[k]), k
            else:
                tol = 4 * c * torch.finfo(torch.float32).eps * (1 + whole[k].abs())
                assert bool(((parts[k] - whole[k]).abs() <= tol).all()), k


def test_chunked_measures_match_the_sample_formulas():
    """Chunked maps against the stack-then-reduce definitions of monai_unc.measures."""
    from monai_unc import measures

    samples = _samples(5, 30, shape=(1, 9, 6, 4))
    stack = torch.stack(samples).double()
    mom = _stats(samples, torch.float64, class_variance=False).moments()
    maps = derive_measures(mom, KEYS, chunk_elements=30 * 6 * 4)
    torch.testing.assert_close(maps["predictive_entropy"], measures.predictive_entropy(stack))
    torch.testing.assert_close(maps["mutual_information"], measures.mutual_information(stack))
    torch.testing.assert_close(maps["variance"], measures.variance(stack))


def test_spatial_chunks_arguments():
    assert spatial_chunks((1, 2, 5, 3), None) == [slice(0, 5)]
    assert spatial_chunks((1, 2, 5, 3), 10**9) == [slice(0, 5)]
    assert spatial_chunks((1, 2, 5, 3), 1) == [slice(i, i + 1) for i in range(5)]
    with pytest.raises(ValueError, match="chunk_elements"):
        spatial_chunks((1, 2, 5, 3), 0)
    with pytest.raises(ValueError, match="shape"):
        spatial_chunks((1, 2), 8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_identical_half_precision_samples_have_zero_mutual_information(dtype):
    """Found by hostile testing: each sample's entropy was evaluated in half precision (relative error 1e-3) while
    PE comes from the float64 mean, so 64 identical samples had MI 6e-4 (float16) and 6e-3 (bfloat16); entropies are
    evaluated in float32 at least."""
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(1, 4, 6, 7, generator=g), 1).to(dtype)
    stats = SampleStats()
    for _ in range(64):
        stats.update(p)
    mi = stats.measures(["mutual_information"])["mutual_information"].float()
    assert float(mi.abs().max()) <= 1e-6
