"""Hostile input to ``monai_unc.stats``: half-precision sums warn, non-float or empty samples and bad moments are
refused naming the argument, identical samples give MI = 0 exactly, and the streamed variance stays within its
stated absolute error bound (found by hostile testing)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import monai_unc._stats_kernels as kernels
from monai_unc.stats import SampleStats, accumulation_error_bound, derive_measures


@pytest.fixture(params=[True, False], ids=["fused", "reference"])
def fused(request, monkeypatch):
    """Both update paths: the fused kernel (numba, where installed) and the reference torch path."""
    monkeypatch.setattr(kernels, "FUSED_KERNELS", request.param)
    return request.param


# ------------------------------------------------------------------------------------------------ half-precision sums
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_sums_warn_in_the_constructor(dtype):
    """Found by hostile testing: ``SampleStats(accum_dtype=float16 / bfloat16)`` stalled its running sums silently
    (3000 alternating samples: a bfloat16 mean of 0.085 for 0.5); only the inferers warned. The constructor warns
    with the inferers' message (one check, ``check_accum_dtype``)."""
    with pytest.warns(UserWarning, match=f"accum_dtype={dtype}.*1e-3 nats"):
        SampleStats(accum_dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SampleStats(accum_dtype=torch.float32)
        SampleStats(accum_dtype=None)


def test_an_inferer_with_half_precision_sums_warns_once():
    """The inferer warns at construction; its windows' statistics (one per window) add no further warning."""
    from monai.inferers import SlidingWindowInferer

    from monai_unc.inferers import MCDropoutInferer

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 3, 3, padding=1), torch.nn.Dropout(0.5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inferer = MCDropoutInferer(2, accum_dtype=torch.float16, base_inferer=SlidingWindowInferer((8, 8, 8),
                                                                                                   overlap=0.5))
        inferer(torch.randn(1, 1, 12, 12, 12), net)
    assert len([w for w in caught if "accum_dtype=" in str(w.message)]) == 1


# ---------------------------------------------------------------------------------------- non-float and empty samples
@pytest.mark.parametrize("validate", [True, False])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.bool])
def test_non_float_samples_are_refused_naming_probs(validate, dtype, fused):
    """Found by hostile testing: with ``validate=False`` integer (one-hot) samples gave every map in the integer
    dtype (pred 0.5 truncated to 0, MI log 2 to 0), silently."""
    one_hot = torch.tensor([1, 0], dtype=dtype).reshape(1, 2, 1)
    with pytest.raises(TypeError, match="probs must be a floating point"):
        SampleStats(validate=validate).update(one_hot)
    with pytest.raises(TypeError, match="probs must be a floating point"):
        SampleStats(validate=validate).update_many(torch.cat([one_hot, one_hot]), num_samples=2)
    with pytest.raises(TypeError, match="probs must be a floating point"):
        SampleStats(validate=validate, multilabel=True).update(one_hot[:, :1])


@pytest.mark.parametrize("validate", [True, False])
@pytest.mark.parametrize("shape", [(1, 2, 0), (1, 2, 4, 0), (0, 2, 3)])
def test_empty_samples_are_refused(validate, shape, fused):
    """Found by hostile testing: with ``validate=False`` an empty volume was accepted and ``measures()`` raised a
    ``KeyError``."""
    with pytest.raises(ValueError, match="probs is empty"):
        SampleStats(validate=validate).update(torch.full(shape, 0.5))
    with pytest.raises(ValueError, match="probs is empty"):
        SampleStats(validate=validate).update_many([torch.full(shape, 0.5)])


def test_derive_measures_refuses_empty_moments():
    """Found by hostile testing: moments with an empty spatial axis gave a ``KeyError`` (no chunk was derived)."""
    with pytest.raises(ValueError, match=r"moments\['pred'\] is empty"):
        derive_measures({"pred": torch.ones(1, 2, 0), "expected_entropy": torch.ones(1, 1, 0)}, ["mutual_information"])


# ------------------------------------------------------------------------------------------------------ from_moments
P = torch.full((1, 2, 4, 4), 0.5)
H = torch.zeros(1, 1, 4, 4)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"count": float("inf")}, ValueError, "count must be positive and finite"),
        ({"count": float("nan")}, ValueError, "count must be positive and finite"),
        ({"count": 0}, ValueError, "count must be positive"),
        ({"count": "2"}, TypeError, "count must be a positive number"),
        ({"count": True}, TypeError, "count must be a positive number"),
        ({"num_updates": 2.5}, TypeError, "num_updates"),
        ({"num_updates": -1}, ValueError, "num_updates"),
        ({"mean_entropy": torch.full_like(H, float("nan"))}, ValueError, "mean_entropy contains 16 non-finite"),
        ({"mean_sq": torch.full_like(P, float("inf"))}, ValueError, "mean_sq contains 32 non-finite"),
        ({"mean_sq_sum": torch.full_like(H, float("nan"))}, ValueError, "mean_sq_sum contains 16 non-finite"),
        ({"mean_entropy": H[:, :, :2]}, ValueError, r"mean_entropy must have shape \(1, 1, 4, 4\)"),
        ({"mean_entropy": torch.zeros(1, 2, 4, 4)}, ValueError, "mean_entropy must have shape"),
        ({"mean_entropy": torch.zeros(1, 1, 4, 4), "multilabel": True}, ValueError, "mean_entropy must have shape"),
        ({"mean_sq": P[..., :3]}, ValueError, r"mean_sq must have shape \(1, 2, 4, 4\)"),
        ({"mean_sq": H}, ValueError, "mean_sq must have shape"),
        ({"mean_sq_sum": P}, ValueError, r"mean_sq_sum must have shape \(1, 1, 4, 4\)"),
        ({"mean_sq_sum": H, "mean_entropy": P, "multilabel": True}, ValueError, "mean_sq_sum is for categorical"),
        ({"mean_entropy": torch.zeros(1, 1, 4, 4, dtype=torch.int64)}, TypeError, "mean_entropy must be a floating"),
        ({"mean_entropy": None}, TypeError, "mean_entropy"),
        ({"mean": torch.ones(2, 3)}, ValueError, r"mean must be a non-empty \(B, C, \*spatial\)"),
        ({"mean": torch.ones(1, 2, 0)}, ValueError, "mean must be a non-empty"),
    ],
)
def test_from_moments_checks_every_argument_up_front(kwargs, error, match):
    """Found by hostile testing: ``count=inf`` raised ``OverflowError``, ``count="2"`` a comparison's ``TypeError``
    (the docstring promised ``ValueError``), a NaN ``mean_entropy`` gave NaN maps silently, and moments of the wrong
    shape failed late, in ``measures()``, with a torch ``RuntimeError``. Each is refused when the statistics are
    built, naming the argument."""
    args = {"mean": P, "mean_entropy": H, **kwargs}
    with pytest.raises(error, match=match):
        SampleStats.from_moments(**args)


def test_from_moments_accepts_what_it_documents():
    for kw in ({}, {"mean_sq": P * P}, {"mean_sq_sum": (P * P).sum(1, keepdim=True)}, {"count": np.float32(3.0)},
               {"count": 2, "num_updates": 0}, {"count": np.int64(2), "num_updates": np.int64(2)}):
        s = SampleStats.from_moments(P.clone(), H.clone(), **kw)
        assert set(s.measures()) >= {"pred", "mutual_information"}
    s = SampleStats.from_moments(P.clone(), torch.zeros(1, 2, 4, 4), mean_sq=P * P, multilabel=True)
    assert s.measures()["mutual_information"].shape == (1, 2, 4, 4)


# --------------------------------------------------------------------------------------------- MI of identical samples
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("multilabel", [False, True])
@pytest.mark.parametrize("n", [1, 3, 4, 7])
def test_identical_samples_have_zero_mutual_information_exactly(dtype, multilabel, n, fused):
    """Found by hostile testing: PE was evaluated from the float64 mean in float64 while each sample's entropy was
    evaluated in float32, so identical float32 samples had MI ~1e-7 (also one sample). PE is now evaluated in the
    samples' entropy precision by the update's own evaluation: MI = 0 exactly with float64 sums and unit weights
    (float64 samples: where their float64 mean is exact, one sample or a power of two)."""
    if dtype == torch.float64 and n not in (1, 4):
        pytest.skip("the float64 mean of 3 or 7 float64 samples rounds")
    g = torch.Generator().manual_seed(n)
    shape = (2, 4, 9, 11)
    p = torch.rand(shape, generator=g) if multilabel else torch.softmax(3 * torch.randn(shape, generator=g), 1)
    p = p.to(dtype)
    s = SampleStats(multilabel=multilabel)
    for _ in range(n):
        s.update(p)
    m = s.measures()
    assert float(m["mutual_information"].abs().max()) == 0
    assert float(m["predictive_entropy"].min()) >= 0 and float(m["predictive_entropy"].max()) > 0.1
    assert torch.equal(m["predictive_entropy"], m["expected_entropy"])
    batch = SampleStats(multilabel=multilabel).update_many(torch.cat([p] * n), num_samples=n)
    assert float(batch.measures(["mutual_information"])["mutual_information"].abs().max()) == 0


def test_deterministic_network_has_zero_mutual_information_without_windows():
    """Found by hostile testing: a deterministic network (dropout without effect, identical ensemble members) under a
    ``SimpleInferer`` had MI ~1e-7 where the docs promise 0."""
    from monai.inferers import SimpleInferer

    from monai_unc.inferers import EnsembleInferer, MCDropoutInferer

    class Inert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.drop = torch.nn.Conv3d(1, 3, 3, padding=1), torch.nn.Dropout(0.5)

        def forward(self, x):
            return 4 * self.conv(x) + 0.0 * self.drop(torch.ones(1)).sum()

    torch.manual_seed(0)
    net, x = Inert().eval(), torch.randn(1, 1, 12, 10, 14)
    keys = ["mutual_information", "variance", "predictive_entropy"]
    for inferer in (MCDropoutInferer(3, base_inferer=SimpleInferer(), keys=keys),
                    EnsembleInferer([net, net], base_inferer=SimpleInferer(), keys=keys)):
        out = inferer(x, net)
        assert float(out["mutual_information"].abs().max()) == 0
        assert float(out["variance"].abs().max()) <= 1e-15  # float64 rounding of the one-channel second moment
        assert float(out["predictive_entropy"].max()) > 0.1


# ------------------------------------------------------------------------------------------------ variance error bound
def _variance_bound(n: int, c: int, dtype: torch.dtype) -> float:
    """The documented absolute error bound of the streamed variance (stats module docstring, docs/inferers.md)."""
    g = accumulation_error_bound
    return (3 * g(n, dtype) + 2 * g(c, dtype)) / c


@pytest.mark.parametrize("class_variance", [True, False])
def test_streamed_variance_is_within_its_stated_absolute_bound(class_variance):
    """Found by hostile testing: ``E[p^2] - E[p]^2`` from float64 sums cancels for near-identical samples (relative
    error 61% at a variance of 3e-15, N = 1000). Not a defect of the sums: the documented bound is absolute,
    ``(3 gamma_{N+1} + 2 gamma_{C+1}) / C`` in the accumulation dtype's unit roundoff (1.7e-13 here), and the
    measured error of the hostile input stays within it; the two-pass ``measures.variance`` of kept samples is the
    accurate one for such variances."""
    rng = np.random.default_rng(4)
    n, v = 1000, 2000
    for fg in (0.5 * (1 + 1e-7 * rng.standard_normal((n, 1, 1, v))), 1 - 1e-6 * rng.uniform(0.5, 1.5, (n, 1, 1, v))):
        s = torch.from_numpy(np.concatenate([1 - fg, fg], 2)).float()
        x = s.double().numpy()
        ref = ((x - x.mean(0)) ** 2).mean(0).mean(1, keepdims=True)  # two-pass, float64
        stats = SampleStats(class_variance=class_variance).update_many(s.reshape(n, 2, v), num_samples=n)
        got = stats.measures(["variance"])["variance"].double().numpy()
        err = np.abs(got - ref)
        bound = _variance_bound(n, 2, torch.float64) + torch.finfo(torch.float32).eps * ref  # + the output's rounding
        assert (err <= bound).all(), float((err / bound).max())
        assert err.max() > 1e-17  # the bound is not vacuous here: the cancellation is real, and within it


def test_numpy_weights_are_numbers():
    """Found by hostile testing: ``update(p, weight=np.float32(2))`` raised "weight must be a positive number, got
    float32" (a float64 passed, being a Python float), and the weights of ``update_many`` could not be a numpy array
    (e.g. ensemble weights read as float32). They give the weighted mean of a brute-force float64 reference."""
    p = torch.tensor([[[0.9], [0.1]], [[0.2], [0.8]]], dtype=torch.float64)  # two samples (2 * B, C=2, 1 voxel)
    w = np.array([3.0, 1.0], dtype=np.float32)
    expected = (3.0 * p[0] + 1.0 * p[1]) / 4.0
    one = SampleStats().update(p[:1], weight=w[0]).update(p[1:], weight=w[1])
    many = SampleStats().update_many(p, num_samples=2, weights=w)
    seq = SampleStats().update_many([p[:1], p[1:]], weights=torch.from_numpy(w))
    for stats in (one, many, seq):
        assert stats.count == 4.0
        torch.testing.assert_close(stats.mean[0], expected, rtol=0, atol=1e-15)
    for bad, error in ((np.float32("nan"), ValueError), (np.float64(-1.0), ValueError), (np.bool_(True), TypeError),
                       ("2", TypeError)):
        with pytest.raises(error, match="weight"):
            SampleStats().update(p[:1], weight=bad)


_M = torch.tensor([[[0.7], [0.3]]])  # (B=1, C=2, 1 voxel)


@pytest.mark.parametrize("kwargs, match", [
    ({"mean_entropy": torch.tensor([[[-0.5]]])}, "mean_entropy must lie in"),  # MI was 1.11 above PE 0.61
    ({"mean_entropy": torch.tensor([[[2.0]]])}, "mean_entropy must lie in"),  # bits or a sum: capped, MI 0
    ({"mean": torch.tensor([[[1.5], [-0.5]]])}, "mean must lie in"),  # PE was 0
    ({"mean": torch.tensor([[[0.5], [0.2]]])}, "mean must sum to 1"),
    ({"mean_sq": torch.tensor([[[0.9], [0.9]]])}, "mean_sq must lie between"),  # variance was 0.61
    ({"mean_sq": torch.tensor([[[0.1], [0.01]]])}, "mean_sq must lie between"),  # below mean^2
    ({"mean_sq_sum": torch.tensor([[[0.2]]])}, "mean_sq_sum must lie between"),  # below sum_c mean_c^2 = 0.58
    ({"mean_sq_sum": torch.tensor([[[1.2]]])}, "mean_sq_sum must lie between"),
])
def test_from_moments_refuses_moments_no_probabilities_give(kwargs, match):
    """Found by hostile testing: from_moments took any finite moments and derived impossible maps without a word (a
    negative mean entropy gave an MI above the PE, a second moment above the mean a variance above 0.25)."""
    args = {"mean": _M, "mean_entropy": torch.tensor([[[0.1]]]), **kwargs}
    with pytest.raises(ValueError, match=match):
        SampleStats.from_moments(**args, count=2.0)
    SampleStats.from_moments(**args, count=2.0, validate=False)  # the caller's own moments: unchecked


def test_from_moments_accepts_the_moments_of_samples():
    """The moments of real samples pass, also at their bounds (one-hot samples: mean_sq = mean, EE = 0; identical
    samples: mean_sq = mean^2; uniform samples: EE = log C) and in float16."""
    torch.manual_seed(0)
    for multilabel in (False, True):
        p = torch.rand(5, 1, 3, 4, 4) if multilabel else torch.softmax(4 * torch.randn(5, 1, 3, 4, 4), 2)
        onehot = (p > 0.5).float() if multilabel else torch.nn.functional.one_hot(p.argmax(2), 3).movedim(-1, 2).float()
        uniform = torch.full_like(p, 0.5 if multilabel else 1 / 3)
        for s in (p, onehot, p[:1].expand(5, -1, -1, -1, -1), uniform, p.half()):
            stats = SampleStats(multilabel=multilabel, class_variance=True).update_many(list(s))
            mom = stats.moments()
            rebuilt = SampleStats.from_moments(mom["pred"], mom["expected_entropy"], mom["mean_sq"], count=5.0,
                                               multilabel=multilabel, out_dtype=stats.out_dtype)
            torch.testing.assert_close(rebuilt.measures(), stats.measures())
            if not multilabel:
                sq_sum = mom["mean_sq"].sum(1, keepdim=True)
                SampleStats.from_moments(mom["pred"], mom["expected_entropy"], mean_sq_sum=sq_sum, count=5.0)


def _state() -> dict:
    return SampleStats().update(torch.tensor([[[0.9], [0.1]]])).update(torch.tensor([[[0.3], [0.7]]])).state_dict()


@pytest.mark.parametrize("change, error, match", [
    ({"sum_w": 0.0}, ValueError, "sum_w must be positive and finite"),  # NaN maps
    ({"sum_w": -2.0}, ValueError, "sum_w must be positive and finite"),  # pred (-0.6, -0.4)
    ({"sum_w": float("nan")}, ValueError, "sum_w must be positive and finite"),
    ({"num_updates": -1}, ValueError, "num_updates must be an integer >= 0"),
    ({"multilabel": "False"}, TypeError, "multilabel must be True or False"),  # per-channel maps
    ({"class_variance": np.array("no")}, TypeError, "class_variance must be True or False"),
    ({"out_dtype": "int64"}, ValueError, "out_dtype must name a floating point"),  # maps of zeros
    ({"sum_h": torch.zeros(1, 2, 1, dtype=torch.float64)}, ValueError, "sum_h must have shape"),  # broadcast
    ({"sum_p2": torch.zeros(1, 3, 1, dtype=torch.float64)}, ValueError, "sum_p2 must have shape"),
    ({"sum_p": torch.tensor([[[float("nan")], [1.0]]], dtype=torch.float64)}, ValueError, "sum_p contains 1 non"),
    ({"sum_p": torch.tensor([[[1], [1]]])}, TypeError, "sum_p must be a floating point"),
    ({"sum_h": -torch.ones(1, 1, 1, dtype=torch.float64)}, ValueError, "mean_entropy must lie in"),  # MI above PE
    ({"sum_p": torch.tensor([[[3.0], [-1.0]]], dtype=torch.float64)}, ValueError, "mean must lie in"),
])
def test_a_state_read_back_is_checked(change, error, match):
    """Found by hostile testing: states are read back from files (``unpack_states`` of an ``.npz``), untrusted input,
    and ``from_state_dict`` took any entries: ``sum_w=0`` gave NaN maps, a negative one negative probabilities, a
    negated ``sum_h`` an MI of 1.14 above the PE of 0.67, ``multilabel="False"`` per-channel maps, an ``sum_h`` of two
    channels was broadcast, all without a word."""
    with pytest.raises(error, match=match):
        SampleStats.from_state_dict({**_state(), **change})
    with pytest.raises(error, match=match):
        SampleStats().load_state_dict({**_state(), **change})


def test_a_state_saved_and_read_back_through_npz_gives_the_same_maps(tmp_path):
    from monai_unc.state import pack_states, unpack_states

    for multilabel, class_variance in ((False, True), (False, False), (True, True)):
        stats = SampleStats(multilabel=multilabel, class_variance=class_variance)
        for q in (0.9, 0.2, 0.6):
            stats.update(torch.tensor([[[q], [1 - q if not multilabel else q / 2]]], dtype=torch.float32))
        np.savez(tmp_path / "s.npz", **pack_states({"s": stats}))
        with np.load(tmp_path / "s.npz") as f:
            back = unpack_states(dict(f))["s"]
        assert back.multilabel is multilabel and back.num_updates == 3 and back.out_dtype == torch.float32
        for k, v in stats.measures().items():
            assert torch.equal(back.measures()[k], v), k


def test_numpy_integers_are_integers():
    """Found by hostile testing: ``np.int64`` arguments (e.g. from a shape or ``np.prod``) were refused with "must be
    an integer"; they give what the Python integer gives, and booleans stay refused."""
    from monai_unc.stats import auto_accum_dtype, spatial_chunks

    assert accumulation_error_bound(np.int64(100)) == accumulation_error_bound(100)
    assert auto_accum_dtype(np.int64(3)) == torch.float64
    assert spatial_chunks((1, 2, 8, 8), np.int64(64)) == spatial_chunks((1, 2, 8, 8), 64)
    p = torch.tensor([[[0.9], [0.1]], [[0.3], [0.7]]])
    stats = SampleStats().update_many(p, num_samples=np.int64(2))
    assert stats.count == 2.0 and stats.num_updates == 2
    moments = stats.moments()
    assert derive_measures(moments, ["variance"], chunk_elements=np.int64(64))["variance"].shape == (1, 1, 1)
    for bad in (np.bool_(True), True):
        with pytest.raises(ValueError, match="num_samples"):
            accumulation_error_bound(bad)
        with pytest.raises(TypeError, match="num_samples"):
            SampleStats().update_many(p, num_samples=bad)
