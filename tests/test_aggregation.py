"""Aggregation of voxel maps to case scores: brute-force box sums, threshold fit, ValUES Appendix F.1."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import convolve
from scipy.stats import pearsonr

from monai_unc.aggregation import aggregate, fit_threshold, max_patch

# ---------------------------------------------------------------- patch aggregation


def brute_force_patch(u, size, mask=None, reduction="sum"):
    """Loop over every stride-1 box position of one (*spatial) map; first maximum in C order."""
    size = tuple(min(s, n) for s, n in zip(size, u.shape))
    best, where = -np.inf, None
    for start in np.ndindex(*[n - s + 1 for n, s in zip(u.shape, size)]):
        box = tuple(slice(a, a + s) for a, s in zip(start, size))
        vals = u[box] if mask is None else u[box][mask[box] > 0]
        if vals.size == 0:
            continue
        score = vals.sum() if reduction == "sum" else (vals.mean() if mask is not None else vals.sum() / np.prod(size))
        if score > best:
            best, where = score, start
    return best, where


@pytest.mark.parametrize(
    "shape, size",
    [
        ((12, 9), 3),
        ((12, 9), (4, 2)),
        ((7, 8, 6), 3),
        ((7, 8, 6), (2, 5, 1)),
        ((5, 6), 10),
        ((4, 5, 3), (1, 1, 1)),
        # window sizes whose last-axis sums take the cumulative-sum branch (11 = 8 + 2 + 1, 15 = 8 + 4 + 2 + 1)
        ((16, 14), (11, 13)),
        ((6, 5, 17), (2, 3, 15)),
    ],
)
def test_patch_equals_brute_force(shape, size):
    rng = np.random.default_rng(0)
    u = rng.uniform(size=(2, 1, *shape))
    res = max_patch(u, patch_size=size)
    for b in range(2):
        best, where = brute_force_patch(u[b, 0], size if isinstance(size, tuple) else (size,) * len(shape))
        assert res.score[b] == pytest.approx(best, rel=1e-12)
        assert tuple(res.start[b]) == where
    mean = max_patch(u, patch_size=size, reduction="mean")
    np.testing.assert_allclose(mean.score, res.score / np.prod(res.size), rtol=1e-12)


@pytest.mark.parametrize("shape, size", [((64, 64), 11), ((16, 24, 20), (3, 13, 11)), ((20, 18), (15, 10))])
def test_patch_of_a_case_does_not_depend_on_its_batch(shape, size):
    # a small-valued case after a huge one: sums restart per row / case, no cancellation against the big case
    rng = np.random.default_rng(3)
    small = rng.uniform(size=(1, 1, *shape)) * 1e-3
    big = rng.uniform(size=(1, 1, *shape)) * 1e6
    alone = max_patch(small, patch_size=size)
    batched = max_patch(np.concatenate([big, small]), patch_size=size)
    assert batched.score[1] == pytest.approx(alone.score[0], rel=1e-13)
    assert tuple(batched.start[1]) == tuple(alone.start[0])
    best, where = brute_force_patch(small[0, 0], size if isinstance(size, tuple) else (size,) * len(shape))
    assert alone.score[0] == pytest.approx(best, rel=1e-12) and tuple(alone.start[0]) == where


def test_patch_matches_scipy_convolve_valid():
    rng = np.random.default_rng(1)
    u = rng.uniform(size=(1, 1, 20, 18, 16))
    conv = convolve(u[0, 0], np.ones((10, 10, 10)), mode="valid")  # ValUES' implementation
    res = max_patch(u, patch_size=10)
    assert res.score[0] == pytest.approx(conv.max(), rel=1e-12)
    assert conv[tuple(res.start[0])] == pytest.approx(conv.max(), rel=1e-12)
    # the box size is clipped to the image: a box larger than the volume is the whole-volume sum
    assert max_patch(u, patch_size=50).score[0] == pytest.approx(u.sum(), rel=1e-12)
    assert max_patch(u, patch_size=50).size == (20, 18, 16)


@pytest.mark.parametrize("shape, size", [((9, 10, 6), (3, 4, 2)), ((13, 15), (2, 11))])
def test_patch_with_mask_equals_brute_force(shape, size):
    rng = np.random.default_rng(2)
    u = rng.uniform(size=(2, 1, *shape))
    mask = (rng.uniform(size=(2, *shape)) < 0.3).astype(np.int64)
    for reduction in ("sum", "mean"):
        res = max_patch(u, patch_size=size, mask=mask, reduction=reduction)
        for b in range(2):
            best, where = brute_force_patch(u[b, 0], size, mask[b], reduction)
            assert res.score[b] == pytest.approx(best, rel=1e-12)
            assert tuple(res.start[b]) == where


def test_patch_empty_mask_warns():
    rng = np.random.default_rng(2)
    u = rng.uniform(size=(1, 1, 9, 10, 6))
    # an empty mask: NaN with a warning, start -1
    with pytest.warns(UserWarning, match="empty mask"):
        res = max_patch(u, patch_size=3, mask=np.zeros((1, 1, 9, 10, 6)))
    assert np.isnan(res.score[0]) and (res.start[0] == -1).all()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 7), min_size=2, max_size=3),
    st.lists(st.integers(1, 9), min_size=3, max_size=3),
    st.integers(0, 2**31 - 1),
)
def test_property_patch_brute_force(shape, size, seed):
    size = tuple(size[: len(shape)])
    u = np.random.default_rng(seed).integers(0, 4, size=(1, 1, *shape)).astype(float)  # ties between boxes
    res = max_patch(u, patch_size=size)
    best, where = brute_force_patch(u[0, 0], size)
    assert res.score[0] == pytest.approx(best, abs=1e-9)
    assert tuple(res.start[0]) == where


def test_patch_torch_and_location_api():
    u = torch.zeros(1, 1, 16, 16)
    u[0, 0, 5:8, 9:12] = 1.0
    scores, start = aggregate(u, "patch_sum", patch_size=3, return_location=True)
    assert isinstance(scores, torch.Tensor) and scores.dtype == torch.float64
    assert float(scores[0]) == 9.0 and start[0].tolist() == [5, 9]
    with pytest.raises(ValueError, match="only available"):
        aggregate(u, "mean", return_location=True)


# ---------------------------------------------------------------- mean / sum / threshold


def test_mean_sum_threshold_definitions():
    rng = np.random.default_rng(3)
    u = rng.uniform(size=(3, 1, 6, 7, 5)).astype(np.float32)
    mask = rng.uniform(size=(3, 1, 6, 7, 5)) < 0.4
    np.testing.assert_allclose(aggregate(u, "mean"), [u[b].mean(dtype=np.float64) for b in range(3)], rtol=1e-12)
    expected = [u[b][mask[b]].mean(dtype=np.float64) for b in range(3)]
    np.testing.assert_allclose(aggregate(u, "mean", mask=mask), expected, rtol=1e-12)
    with pytest.warns(UserWarning, match="tracks object size"):
        s = aggregate(u, "sum")
    np.testing.assert_allclose(s, [u[b].sum(dtype=np.float64) for b in range(3)], rtol=1e-12)
    with pytest.warns(UserWarning, match="tracks object size"):
        s = aggregate(u, "sum", mask=mask[:, 0])
    np.testing.assert_allclose(s, [u[b][mask[b]].sum(dtype=np.float64) for b in range(3)], rtol=1e-12)
    # threshold: mean of the voxels >= t (ValUES' code), restricted to the mask when given
    t = 0.7
    expected = [u[b][u[b] >= t].mean(dtype=np.float64) for b in range(3)]
    np.testing.assert_allclose(aggregate(u, "threshold", threshold=t), expected, rtol=1e-6)
    sel = [u[b][(u[b] >= t) & mask[b]] for b in range(3)]
    np.testing.assert_allclose(aggregate(u, "threshold", threshold=t, mask=mask), [v.mean() for v in sel], rtol=1e-6)
    # no voxel reaches t: 0 as in ValUES, or NaN on request
    assert aggregate(u, "threshold", threshold=2.0).tolist() == [0.0, 0.0, 0.0]
    assert np.isnan(aggregate(u, "threshold", threshold=2.0, empty_value=float("nan"))).all()
    # 2D, torch in -> torch out
    out = aggregate(torch.from_numpy(u[:, :, 0]), "mean")
    assert isinstance(out, torch.Tensor) and out.shape == (3,)


def test_mean_over_empty_mask_is_nan():
    u = np.ones((2, 1, 4, 4))
    mask = np.zeros((2, 4, 4))
    mask[0, 1, 1] = 1
    with pytest.warns(UserWarning, match="empty mask"):
        out = aggregate(u, "mean", mask=mask)
    assert out[0] == 1.0 and np.isnan(out[1])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"uncertainty": np.ones((4, 4))}, "shape"),
        ({"uncertainty": np.ones((2, 3, 4, 4))}, "shape"),
        ({"uncertainty": np.full((1, 1, 4, 4), np.nan)}, "non-finite"),
        ({"uncertainty": np.ones((1, 1, 0, 4))}, "empty"),
        ({"method": "max"}, "method"),
        ({"method": "threshold"}, "threshold"),
        ({"method": "threshold", "threshold": np.inf}, "finite"),
        ({"mask": np.ones((1, 4, 5))}, "mask"),
        ({"method": "patch_sum", "patch_size": 0}, "positive"),
        ({"method": "patch_mean", "patch_size": (2, 2, 2)}, "one per spatial axis"),
        ({"method": "patch", "patch_reduction": "max"}, "reduction"),
        ({"method": "patch_sum", "patch_reduction": "mean"}, "patch_reduction='mean' contradicts"),
    ],
)
def test_bad_inputs(kwargs, match):
    args = {"uncertainty": np.ones((1, 1, 4, 4)), "method": "mean"} | kwargs
    with pytest.raises(ValueError, match=match):
        aggregate(**args)


# ---------------------------------------------------------------- threshold fit (ValUES Appendix F.2)


def test_fit_threshold_matches_definition():
    rng = np.random.default_rng(4)
    maps = [rng.uniform(size=(1, 8, 8, 4)), rng.uniform(size=(1, 6, 5, 4)), rng.uniform(size=(1, 7, 7, 3))]
    preds = [(rng.uniform(size=m.shape[1:]) < f).astype(np.int64) for m, f in zip(maps, (0.1, 0.3, 0.2))]
    alpha = np.mean([np.count_nonzero(p) / p.size for p in preds])
    q = 1 - alpha
    pooled = np.sort(np.concatenate([m.ravel() for m in maps]))
    # linear interpolation between order statistics, written out
    pos = q * (pooled.size - 1)
    lo = int(np.floor(pos))
    expected = pooled[lo] + (pos - lo) * (pooled[min(lo + 1, pooled.size - 1)] - pooled[lo])
    t = fit_threshold(maps, preds)
    assert t == pytest.approx(expected, rel=1e-12)
    # about a fraction alpha of the validation voxels lies at or above t
    assert np.mean(pooled >= t) == pytest.approx(alpha, abs=2 / pooled.size)
    # batched arrays and torch tensors give the same threshold
    m = rng.uniform(size=(4, 1, 6, 6))
    p = (rng.uniform(size=(4, 6, 6)) < 0.25).astype(np.int64)
    assert fit_threshold(torch.from_numpy(m), torch.from_numpy(p)) == pytest.approx(fit_threshold(m, p))
    with pytest.raises(ValueError, match="same number of cases"):
        fit_threshold(maps, preds[:2])
    with pytest.raises(ValueError, match="voxels"):
        fit_threshold(maps, preds[::-1])
    with pytest.raises(ValueError, match="label map"):
        fit_threshold(maps[:1], [np.full(maps[0].shape[1:], 0.3)])
    with pytest.raises(ValueError, match="empty"):
        fit_threshold([], [])


# ---------------------------------------------------------------- ValUES Appendix F.1 on the synthetic toy set


def _size_study(n_cases=32, seed=0):
    from monai_unc.data.synthetic import make_toy_dataset
    from monai_unc.measures import entropy

    cases = make_toy_dataset(n_cases, seed=seed)
    u = entropy(np.stack([c["probs"] for c in cases]))  # aleatoric map from the raters' soft labels
    label = np.stack([c["label"] for c in cases])
    volume = np.array([c["object_volume"] for c in cases], dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        scores = {
            "sum": aggregate(u, "sum"),
            "mean": aggregate(u, "mean", mask=label),  # size-normalised: mean over the predicted object
            "patch": aggregate(u, "patch_sum", patch_size=10),
        }
    return volume, scores


def test_values_f1_sum_tracks_object_size_mean_and_patch_do_not():
    volume, scores = _size_study()
    assert volume.max() / volume.min() > 5  # objects of clearly different size
    stats = {}
    for name, s in scores.items():
        r = pearsonr(s, volume)[0]
        slope = np.polyfit(np.log(volume), np.log(s), 1)[0]  # elasticity: % score change per % size change
        stats[name] = (r, slope)
    print({k: (round(r, 3), round(sl, 3)) for k, (r, sl) in stats.items()})
    # sum aggregation: proportional to object size
    assert stats["sum"][0] > 0.95 and 0.8 < stats["sum"][1] < 1.2
    # mean over the predicted object: no correlation, flat in size
    assert abs(stats["mean"][0]) < 0.5 and abs(stats["mean"][1]) < 0.05
    # patch: nearly flat (the box saturates inside the uncertain shell); the weak correlation left comes
    # from small objects whose shell does not fill the box
    assert abs(stats["patch"][1]) < 0.1 and stats["patch"][0] < stats["sum"][0] - 0.2


@pytest.mark.cuda
def test_cuda_inputs_stay_on_device(cuda_device):
    u = torch.rand(2, 1, 12, 10, 8, generator=torch.Generator().manual_seed(0)).to(cuda_device)
    mask = u > 0.5
    for method in ("mean", "patch_sum", "patch_mean", "threshold"):
        t = 0.3 if method == "threshold" else None  # another method refuses a threshold it would ignore
        out = aggregate(u, method, mask=mask, threshold=t, patch_size=4)
        assert out.device.type == cuda_device.type
        ref = aggregate(u.cpu(), method, mask=mask.cpu(), threshold=t, patch_size=4)
        np.testing.assert_allclose(out.cpu().numpy(), ref.numpy(), rtol=1e-6)


class _StaleNumpy:
    """``numpy`` whose ``empty`` hands out buffers full of stale values (1e300, 1e-300, ... in turn), as reused
    memory can be: the box sums past the last row or column are never written, and scoring them overflowed."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        return getattr(np, name)

    def empty(self, shape, *args, **kwargs):
        out = np.empty(shape, *args, **kwargs)
        self.calls += 1
        out[...] = 1e300 if self.calls % 2 else 1e-300
        return out


@pytest.mark.parametrize("size", [3, (2, 5, 3), 7])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_masked_patch_with_stale_buffers_has_no_overflow(monkeypatch, size, reduction):
    """Issue 40 item 8: ``RuntimeWarning: overflow encountered in divide`` from the masked patch mean."""
    import monai_unc.aggregation as aggregation

    rng = np.random.default_rng(3)
    u = rng.random((2, 1, 9, 10, 8))
    mask = rng.random((2, 1, 9, 10, 8)) > 0.4
    expected = max_patch(u, patch_size=size, mask=mask, reduction=reduction)
    monkeypatch.setattr(aggregation, "np", _StaleNumpy())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = max_patch(u, patch_size=size, mask=mask, reduction=reduction)
    np.testing.assert_array_equal(res.score, expected.score)
    np.testing.assert_array_equal(res.start, expected.start)
    for b in range(2):
        want, _ = brute_force_patch(u[b, 0], res.size, mask[b, 0], reduction)
        np.testing.assert_allclose(res.score[b], want, rtol=1e-9)
