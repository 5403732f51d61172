"""Hostile input to the measure helpers of ``monai_unc.measures``: mismatched, NaN or reversed entropies and
moments fail with one ValueError naming the argument (they were clamped before); probabilities a little outside
[0, 1], half-precision samples and half-precision entropy maps give the right numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import monai_unc._stats_kernels as kernels
from monai_unc import measures
from monai_unc.measures import (
    binary_entropy,
    entropy,
    expected_entropy,
    mutual_information,
    mutual_information_from_entropies,
    predictive_entropy,
    variance_from_moments,
)
from monai_unc.stats import SampleStats, derive_measures


def test_mutual_information_from_entropies_validates():
    pe = torch.full((1, 1, 4, 4), 0.6)
    ee = torch.full((1, 1, 4, 4), 0.4)
    torch.testing.assert_close(mutual_information_from_entropies(pe, ee), pe - ee)
    with pytest.raises(ValueError, match="pe and ee must have the same shape"):
        mutual_information_from_entropies(pe, ee[..., :3])
    with pytest.raises(ValueError, match="ee"):
        mutual_information_from_entropies(pe, torch.full_like(ee, float("nan")))
    with pytest.raises(ValueError, match="ee exceeds pe"):
        mutual_information_from_entropies(ee, pe)  # swapped: EE > PE cannot come from the same samples
    # rounding below zero is still clamped
    assert float(mutual_information_from_entropies(pe, pe + 1e-6).max()) == 0.0


def test_variance_from_moments_validates():
    mean = torch.full((1, 2, 3, 3), 0.5)
    np.testing.assert_allclose(variance_from_moments(mean, mean).numpy(), 0.25)  # E[p^2] = E[p] for 0/1 samples
    with pytest.raises(ValueError, match="mean and mean_sq must have the same shape"):
        variance_from_moments(mean, mean[:, :1])
    with pytest.raises(ValueError, match="mean_sq"):
        variance_from_moments(mean, torch.full_like(mean, float("nan")))


# ---------------------------------------------------------------------------------------------------------------
# probabilities a little outside [0, 1] (within the checks' tolerance)
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_entropy_of_probabilities_a_little_outside_the_unit_interval(dtype):
    """Found by hostile testing: probabilities the checks accept a little below 0 or above 1 (their tolerance: an
    interpolated, resampled or blended map) gave ``-p log tiny``, large negative entropies: entropy((1.0001,
    -0.0001)) = -0.071 nats in float64, -0.009 in float32, binary_entropy(1.0001) the same. The formula clamps p into
    [0, 1] in both factors: such values count as 0 or 1."""
    p = torch.tensor([1.0001, -0.0001], dtype=torch.float64).to(dtype).reshape(1, 2, 1)
    assert 0 <= float(entropy(p)) <= 1e-6
    assert 0 <= float(binary_entropy(torch.tensor([1.0001], dtype=torch.float64).to(dtype).reshape(1, 1, 1))) <= 1e-6
    assert 0 <= float(binary_entropy(torch.tensor([-0.0001], dtype=torch.float64).to(dtype).reshape(1, 1, 1))) <= 1e-6
    # bfloat16's wider tolerance (0.031) accepted -0.02, which gave -1.7 nats
    wide = torch.tensor([1.02, -0.02], dtype=dtype).reshape(1, 2, 1)
    if dtype == torch.bfloat16:
        assert 0 <= float(entropy(wide)) <= 1e-6
    samples = torch.stack([p, torch.tensor([0.7, 0.3], dtype=dtype).reshape(1, 2, 1)])  # (S=2, B=1, C=2, 1)
    for f in (predictive_entropy, expected_entropy, mutual_information):
        assert float(f(samples)) >= 0, f.__name__
    # the same clamp in the statistics (fused kernel and reference path): EE of such a sample is 0, not negative
    for fused in (True, False):
        old = kernels.FUSED_KERNELS
        kernels.FUSED_KERNELS = fused
        try:
            m = SampleStats().update(p).measures()
        finally:
            kernels.FUSED_KERNELS = old
        assert 0 <= float(m["expected_entropy"]) <= 1e-6 and 0 <= float(m["predictive_entropy"]) <= 1e-6, fused


def test_clamped_entropy_equals_the_former_formula_inside_the_unit_interval():
    """Inside [0, 1] the clamped formula gives the bits of ``-sum p log max(p, tiny)``, with and without autograd."""
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(8 * torch.randn(2, 5, 7, 9, generator=g, dtype=torch.float64), 1)
    p[0, :, 0, 0] = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    former = -(p * torch.log(p.clamp_min(torch.finfo(p.dtype).tiny))).sum(1, keepdim=True)
    assert torch.equal(entropy(p), former)
    q = p.clone().requires_grad_(True)
    h = entropy(q)
    assert torch.equal(h.detach(), former)
    h.sum().backward()
    assert bool(torch.isfinite(q.grad[:, :, 1:]).all())


# ---------------------------------------------------------------------------------------------------------------
# half-precision samples in the functional measures
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_measures_are_evaluated_in_float32(dtype):
    """Found by hostile testing: ``mutual_information`` / ``predictive_entropy`` / ``expected_entropy`` evaluated the
    entropies of half-precision samples in half precision: near-identical samples had MI 1e-3 (float16) / 8e-3
    (bfloat16) nats of rounding (the float64 value of the same samples ~1e-7), where SampleStats gives ~1e-7. They
    use the statistics' precision rule (``entropy_dtype``: float32) and return the input's dtype."""
    from monai_unc.measures import entropy_dtype

    torch.manual_seed(0)
    logits = 3 * torch.randn(1, 4, 4096)
    p1 = torch.softmax(logits, 1).to(dtype)
    p2 = torch.softmax(logits + 1e-3 * torch.randn_like(logits), 1).to(dtype)
    s = torch.stack([p1, p2, p1, p2])
    x = s.double()
    mean = x.mean(0)
    ref_pe = -(mean * torch.log(mean.clamp_min(1e-300))).sum(1, keepdim=True)
    ref_ee = -(x * torch.log(x.clamp_min(1e-300))).sum(2, keepdim=True).mean(0)
    out_eps = torch.finfo(dtype).eps  # the result's own rounding to the input's dtype
    for f, ref in ((predictive_entropy, ref_pe), (expected_entropy, ref_ee), (mutual_information, ref_pe - ref_ee)):
        got = f(s)
        assert got.dtype == dtype, f.__name__
        assert float((got.double() - ref).abs().max()) <= out_eps * float(ref.abs().max()) + 1e-5, f.__name__
    assert float(mutual_information(s).double().max()) <= 1e-5
    assert entropy(p1).dtype == dtype and binary_entropy(p1).dtype == dtype
    assert entropy_dtype(dtype) == torch.float32 and entropy_dtype(torch.float64) == torch.float64


# ---------------------------------------------------------------------------------------------------------------
# the order check of mutual_information_from_entropies in half precision
# ---------------------------------------------------------------------------------------------------------------
def test_mutual_information_from_entropies_tolerates_the_rounding_of_half_precision_maps():
    """Found by hostile testing: PE and EE maps of float16 samples (as SampleStats returns them) round to neighbouring
    float16 values, EE one ulp (9.8e-4 near 1) above PE; the fixed 1e-4 tolerance refused them. The tolerance adds a
    few roundings of the maps' dtype; a swapped pair is still refused."""
    pe = torch.tensor([0.9995, 2.5, 0.3], dtype=torch.float16).reshape(1, 1, 3)
    ee = (pe.view(torch.int16) + 1).view(torch.float16)  # the next float16 above each PE
    assert bool((ee > pe).all()) and float((ee - pe).float().max()) > 1e-3
    assert float(mutual_information_from_entropies(pe, ee).max()) == 0
    with pytest.raises(ValueError, match="ee exceeds pe"):
        mutual_information_from_entropies(pe, pe + 0.05)
    # float32 maps keep the 1e-4 nats of before
    pe32 = torch.full((1, 1, 2), 0.6)
    with pytest.raises(ValueError, match="ee exceeds pe"):
        mutual_information_from_entropies(pe32, pe32 + 2e-4)
    assert float(mutual_information_from_entropies(pe32, pe32 + 5e-5).max()) == 0


@pytest.mark.parametrize("multilabel", [False, True])
def test_one_minus_max_prob_stays_in_its_bounds_a_little_outside_the_unit_interval(multilabel):
    """Found by hostile testing: ``1 - max p`` of probabilities the checks accept a little above 1 (1.0004: resampled
    or blended) was -0.0004, a negative uncertainty that ``evaluate`` refused as a map with negative values; the
    documented bounds are ``[0, 1 - 1/C]`` (``[0, 0.5]`` per region), here and in the streamed statistics."""
    from monai_unc.measures import one_minus_max_prob

    if multilabel:
        p = torch.tensor([1.0004, -0.0004, 0.3, 0.9], dtype=torch.float64).reshape(1, 4, 1)
        expected, high = [0.0, 0.0, 0.3, 0.1], 0.5
    else:  # (1.0004, -0.0004); three classes summing to 0.9994 (within the tolerance), max below 1/3
        p = torch.tensor([[1.0004, -0.0004, 0.0], [0.3331, 0.3332, 0.3331]], dtype=torch.float64).T.reshape(1, 3, 2)
        expected, high = [0.0, 2 / 3], 1 - 1 / 3
    u = one_minus_max_prob(p, multilabel=multilabel)
    assert u.flatten().tolist() == pytest.approx(expected, abs=1e-12)
    assert float(u.min()) >= 0 and float(u.max()) <= high
    m = SampleStats(multilabel=multilabel).update(p).measures(["one_minus_max_prob"])["one_minus_max_prob"]
    assert m.flatten().tolist() == pytest.approx(expected, abs=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# flags: True or False, never a truthy string
# ---------------------------------------------------------------------------------------------------------------
_S = torch.tensor([[[[0.9], [0.1]]], [[[0.2], [0.8]]]], dtype=torch.float64)  # (S=2, B=1, C=2, 1 voxel)


@pytest.mark.parametrize("call, flag", [
    (lambda v: measures.entropy(_S[0], normalize=v), "normalize"),
    (lambda v: measures.entropy(_S[0], validate=v), "validate"),
    (lambda v: measures.binary_entropy(_S[0], normalize=v), "normalize"),
    (lambda v: measures.predictive_entropy(_S, multilabel=v), "multilabel"),
    (lambda v: measures.predictive_entropy(_S, normalize=v), "normalize"),
    (lambda v: measures.expected_entropy(_S, multilabel=v), "multilabel"),
    (lambda v: measures.mutual_information(_S, multilabel=v), "multilabel"),
    (lambda v: measures.mutual_information(_S, normalize=v), "normalize"),
    (lambda v: measures.variance(_S, multilabel=v), "multilabel"),
    (lambda v: measures.one_minus_max_prob(_S[0], multilabel=v), "multilabel"),
    (lambda v: measures.variance_from_moments(_S[0], _S[0] ** 2, multilabel=v), "multilabel"),
    (lambda v: measures.mutual_information_from_entropies(_S[0, :, :1], _S[0, :, :1], validate=v), "validate"),
    (lambda v: SampleStats(multilabel=v), "multilabel"),
    (lambda v: SampleStats(track_variance=v), "track_variance"),
    (lambda v: SampleStats(class_variance=v), "class_variance"),
    (lambda v: SampleStats(validate=v), "validate"),
    (lambda v: SampleStats().update(_S[0]).measures(normalize=v), "normalize"),
    (lambda v: SampleStats.from_moments(_S[0], (_S[0, :, :1] if v is False else _S[0]) / 2, multilabel=v),
     "multilabel"),
    (lambda v: derive_measures(SampleStats().update(_S[0]).moments(), ["mutual_information"], multilabel=v),
     "multilabel"),
    (lambda v: derive_measures(SampleStats().update(_S[0]).moments(), ["mutual_information"], normalize=v),
     "normalize"),
])
def test_flags_must_be_true_or_false(call, flag):
    """Found by hostile testing: ``multilabel="False"`` (a truthy string, e.g. read from a config file) gave
    per-channel binary entropies of two-class softmax samples, ``(B, C, *spatial)`` maps, and ``normalize="False"``
    entropies divided by ``log C``, without a word. Both booleans, and numpy booleans, pass."""
    with pytest.raises(TypeError, match=f"{flag} must be True or False"):
        call("False")
    call(False)
    call(np.bool_(True))


def test_measures_read_one_key_given_as_a_string():
    """``SampleStats.measures(keys="variance")`` iterated the name's characters and raised "'v' is not a valid
    UncertaintyKeys"; one name is that one measure, as the inferers take it."""
    stats = SampleStats().update(_S[0].float()).update(_S[1].float())
    assert list(stats.measures(keys="variance")) == ["variance"]
    torch.testing.assert_close(stats.measures(keys="variance")["variance"].double(), measures.variance(_S),
                               atol=1e-7, rtol=0)
    assert list(derive_measures(stats.moments(), "mutual_information")) == ["mutual_information"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("multilabel", [False, True])
@pytest.mark.parametrize("n", [3, 7, 30])
def test_identical_kept_samples_have_zero_mutual_information_exactly(dtype, multilabel, n):
    """Found by hostile testing: the kept samples of a deterministic network (identical float32 samples) gave
    ``mutual_information`` 1e-7 to 3e-7 nats (the float32 mean of identical values rounds) where the streamed
    statistics give 0 exactly; a map of rounding noise that a viewer's auto-window shows as structure. The mean over
    samples is summed in float64: PE equals EE bit for bit, as in SampleStats."""
    torch.manual_seed(0)
    p = torch.rand(1, 3, 6, 6) if multilabel else torch.softmax(3 * torch.randn(1, 3, 6, 6), 1)
    s = p.to(dtype).expand(n, -1, -1, -1, -1).clone()
    for normalize in (False, True):
        mi = mutual_information(s, normalize=normalize, multilabel=multilabel)
        assert float(mi.abs().max()) == 0.0
        pe = predictive_entropy(s, normalize=normalize, multilabel=multilabel)
        ee = expected_entropy(s, normalize=normalize, multilabel=multilabel)
        assert torch.equal(pe, ee)
        streamed = SampleStats(multilabel=multilabel).update_many(list(s)).measures(normalize=normalize)
        assert float(streamed["mutual_information"].abs().max()) == 0.0
        torch.testing.assert_close(pe, streamed["predictive_entropy"], atol=2e-7, rtol=0)


@pytest.mark.parametrize("validate", [True, False])
def test_maps_from_entropies_and_moments_follow_the_input_library(validate):
    """Found by hostile testing: numpy maps gave a torch tensor from ``mutual_information_from_entropies`` and
    ``variance_from_moments`` (the module's rule: outputs follow the input's library), and with ``validate=False`` an
    AttributeError ('numpy.ndarray' object has no attribute 'clamp_min')."""
    pe, ee = np.array([[[0.6931, 0.3]]]), np.array([[[0.3251, 0.3]]])
    mi = mutual_information_from_entropies(pe, ee, validate=validate)
    assert isinstance(mi, np.ndarray)
    np.testing.assert_allclose(mi, [[[0.368, 0.0]]], atol=1e-12)
    mi_wd = mutual_information_from_entropies(pe, ee, window_disagreement=np.array([[[0.1, 0.0]]]),
                                              validate=validate)  # EE + WD <= PE (review 56)
    np.testing.assert_allclose(mi_wd, [[[0.268, 0.0]]], atol=1e-12)
    mean, mean_sq = np.array([[[0.5], [0.5]]]), np.array([[[0.41], [0.41]]])
    var = variance_from_moments(mean, mean_sq, validate=validate)
    assert isinstance(var, np.ndarray)
    np.testing.assert_allclose(var, [[[0.16]]], atol=1e-12)
    assert isinstance(variance_from_moments(torch.from_numpy(mean), torch.from_numpy(mean_sq)), torch.Tensor)


def test_mi_refuses_ee_plus_window_disagreement_above_pe():
    # review 56: EE + WD above PE gave MI 0 without a word (PE = EE + MI + WD with MI >= 0)
    pe, ee = torch.tensor([[[0.5, 0.5]]]), torch.tensor([[[0.2, 0.2]]])
    with pytest.raises(ValueError, match="ee \\+ window_disagreement exceeds pe by up to 0.3"):
        mutual_information_from_entropies(pe, ee, torch.tensor([[[0.1, 0.6]]]))
    # within rounding (EE + WD = PE exactly in real numbers) it is MI 0, not an error
    mi = mutual_information_from_entropies(pe, ee, torch.tensor([[[0.1, 0.3]]]))
    assert torch.allclose(mi, torch.tensor([[[0.2, 0.0]]]), atol=1e-7)
    assert mutual_information_from_entropies(pe, ee, torch.tensor([[[0.1, 0.6]]]), validate=False).max() < 0.21
