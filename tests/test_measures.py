"""Measures and streaming statistics against brute-force numpy references."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from monai_unc import UncertaintyKeys as K
from monai_unc import measures as M
from monai_unc.stats import SampleStats


def dirichlet_samples(s=5, b=2, c=3, spatial=(4, 5), alpha=0.5, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet([alpha] * c, size=(s, b, *spatial))  # (S, B, *spatial, C)
    return np.moveaxis(p, -1, 2).astype(dtype)


def np_entropy(p, axis):
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(p > 0, p * np.log(p), 0.0)
    return -t.sum(axis=axis)


def brute_force(samples):
    """Loop-free but formula-by-formula numpy reference, computed per voxel from the definitions."""
    s = samples.astype(np.float64)
    mean = s.mean(0)
    pe = np_entropy(mean, 1)[:, None]
    ee = np.mean([np_entropy(x, 1) for x in s], axis=0)[:, None]
    var = np.var(s, axis=0).mean(1, keepdims=True)
    msp = 1 - mean.max(1, keepdims=True)
    return {"pred": mean, "predictive_entropy": pe, "expected_entropy": ee, "mutual_information": pe - ee,
            "variance": var, "one_minus_max_prob": msp}


@pytest.mark.parametrize("spatial", [(6,), (4, 5), (3, 4, 5)])
def test_measures_match_numpy(spatial):
    s = dirichlet_samples(spatial=spatial)
    ref = brute_force(s)
    np.testing.assert_allclose(M.predictive_entropy(s), ref["predictive_entropy"], atol=1e-12)
    np.testing.assert_allclose(M.expected_entropy(s), ref["expected_entropy"], atol=1e-12)
    np.testing.assert_allclose(M.mutual_information(s), ref["mutual_information"], atol=1e-12)
    np.testing.assert_allclose(M.variance(s), ref["variance"], atol=1e-12)
    np.testing.assert_allclose(M.one_minus_max_prob(s.mean(0)), ref["one_minus_max_prob"], atol=1e-12)
    np.testing.assert_allclose(M.entropy(s[0]), np_entropy(s[0], 1)[:, None], atol=1e-12)


def test_hand_worked_entropy():
    p = np.array([[[0.5], [0.5]], [[1.0], [0.0]]])  # (B=2, C=2, 1)
    h = M.entropy(p)
    assert h.shape == (2, 1, 1)
    assert h[0, 0, 0] == pytest.approx(math.log(2))
    assert h[1, 0, 0] == 0.0  # 0 log 0 = 0, no NaN
    np.testing.assert_allclose(M.entropy(p, normalize=True)[0], 1.0)
    assert M.one_minus_max_prob(p)[0, 0, 0] == pytest.approx(0.5)


def test_library_and_dtype_follow_input():
    s = dirichlet_samples(dtype=np.float32)
    out = M.mutual_information(s)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    t = torch.from_numpy(s)
    out_t = M.mutual_information(t)
    assert isinstance(out_t, torch.Tensor) and out_t.dtype == torch.float32
    np.testing.assert_allclose(out, out_t.numpy())


def test_decomposition_and_normalize():
    s = dirichlet_samples(c=4, seed=3)
    pe, ee, mi = M.predictive_entropy(s), M.expected_entropy(s), M.mutual_information(s)
    assert (mi >= 0).all()
    np.testing.assert_allclose(pe, ee + mi, atol=1e-12)
    np.testing.assert_allclose(M.predictive_entropy(s, normalize=True), pe / math.log(4), atol=1e-12)
    assert M.predictive_entropy(s, normalize=True).max() <= 1 + 1e-12


@pytest.mark.parametrize(
    "bad, msg",
    [
        (np.full((1, 2, 3), 0.7), "sum to 1"),
        (np.full((1, 1, 3), 1.0), "at least 2 classes"),
        (np.array([[[1.5], [-0.5]]]), r"\[0, 1\]"),
        (np.array([[[np.nan], [1.0]]]), "non-finite"),
        (np.ones((2,)), "at least 3 dimensions"),
        (np.zeros((1, 2, 0)), "empty"),
    ],
)
def test_bad_probabilities_raise(bad, msg):
    with pytest.raises(ValueError, match=msg):
        M.entropy(bad)


def test_integer_input_raises_type_error():
    with pytest.raises(TypeError, match="probs"):
        M.entropy(np.ones((1, 2, 3), dtype=np.int64))


# ------------------------------------------------------------------------------------- SampleStats
def test_stats_equal_measures_of_stack():
    s = dirichlet_samples(s=7, spatial=(3, 4, 5), seed=1)
    stats = SampleStats()
    for x in s:
        stats.update(torch.from_numpy(x))
    got = stats.measures()
    ref = brute_force(s)
    assert set(got) == {k.value for k in (K.PRED, K.PREDICTIVE_ENTROPY, K.EXPECTED_ENTROPY, K.MUTUAL_INFORMATION,
                                           K.ONE_MINUS_MAX_PROB, K.VARIANCE)}
    for k, v in ref.items():
        np.testing.assert_allclose(got[k].numpy(), v, atol=1e-12, err_msg=k)
    assert stats.count == 7 and stats.num_updates == 7


def test_weighted_update_equals_repeated_samples():
    s = dirichlet_samples(s=3, seed=4)
    a = SampleStats().update(torch.from_numpy(s[0]), weight=2.0).update(torch.from_numpy(s[1]))
    b = SampleStats()
    for x in (s[0], s[0], s[1]):
        b.update(torch.from_numpy(x))
    for k in a.measures():
        torch.testing.assert_close(a.measures()[k], b.measures()[k], atol=1e-12, rtol=0)


@settings(max_examples=25, deadline=None)
@given(split=st.integers(1, 8), seed=st.integers(0, 1000), c=st.integers(2, 4))
def test_merge_equals_pooled(split, seed, c):
    s = dirichlet_samples(s=9, b=1, c=c, spatial=(3, 3), seed=seed)
    pooled, a, b = SampleStats(), SampleStats(), SampleStats()
    for i, x in enumerate(s):
        t = torch.from_numpy(x)
        pooled.update(t)
        (a if i < split else b).update(t)
    merged = a.merge(b)
    for k, v in pooled.measures().items():
        torch.testing.assert_close(merged.measures()[k], v, atol=1e-12, rtol=0)
        if k != "pred":
            assert float(v.min()) >= 0.0


def test_from_moments_round_trip_and_state_dict():
    s = dirichlet_samples(s=4, seed=5)
    stats = SampleStats()
    for x in s:
        stats.update(torch.from_numpy(x))
    mom = stats.moments()
    rebuilt = SampleStats.from_moments(mom["pred"], mom["expected_entropy"], mom["mean_sq"], count=4)
    for k, v in stats.measures().items():
        torch.testing.assert_close(rebuilt.measures()[k], v, atol=1e-12, rtol=0)
    other = SampleStats().load_state_dict(stats.state_dict())
    torch.testing.assert_close(other.measures()["mutual_information"], stats.measures()["mutual_information"])


def test_stats_errors():
    st_ = SampleStats()
    with pytest.raises(ValueError, match="empty"):
        st_.measures()
    x = torch.from_numpy(dirichlet_samples(s=1)[0])
    st_.update(x)
    with pytest.raises(ValueError, match="does not match"):
        st_.update(x[:, :, :2])
    with pytest.raises(ValueError, match="weight"):
        st_.update(x, weight=0.0)
    with pytest.raises(ValueError, match="sum to 1"):
        st_.update(x * 0.5)
    with pytest.raises(ValueError, match="track_variance"):
        SampleStats(track_variance=False).update(x).measures(["variance"])
    with pytest.raises(ValueError):
        st_.measures(["not_a_measure"])


def test_float32_accumulation_option():
    s = dirichlet_samples(s=5, dtype=np.float32)
    a = SampleStats(accum_dtype=torch.float32)
    b = SampleStats()
    for x in s:
        a.update(torch.from_numpy(x))
        b.update(torch.from_numpy(x))
    assert a.sum_p.dtype == torch.float32 and b.sum_p.dtype == torch.float64
    assert a.measures()["pred"].dtype == torch.float32 == b.measures()["pred"].dtype
    torch.testing.assert_close(a.measures()["mutual_information"], b.measures()["mutual_information"],
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_entropy_map_in_place_path_equals_the_differentiable_one(dtype):
    # without a graph the entropy is computed in one temporary; with one, out of place: the same values bit for
    # bit, the input untouched, and the gradient that of -sum p log p
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(4 * torch.randn(2, 3, 5, 6, generator=g, dtype=torch.float64), 1).to(dtype)
    p[0, :, 0, 0] = torch.tensor([1.0, 0.0, 0.0], dtype=dtype)  # 0 log 0 = 0
    before = p.clone()
    with torch.no_grad():
        fast = M.entropy_map_t(p, 1, False, False)
    q = p.clone().requires_grad_(True)
    slow = M.entropy_map_t(q, 1, False, False)
    assert torch.equal(p, before)
    assert torch.equal(fast, slow.detach())
    slow.sum().backward()
    inner = (slice(None), slice(None), slice(1, None))  # voxels without a p = 0 class
    expected = -(torch.log(q.detach()) + 1)
    assert torch.allclose(q.grad[inner], expected[inner])
