"""Hostile review of monai_unc.transforms: the statistics of ``input_type="probs"`` (``expected_entropy``,
``mean_sq``) must belong to the probabilities; maps are compared with brute-force numpy references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.measures import mutual_information_from_entropies, variance_from_moments
from monai_unc.transforms import UncertaintyMeasures, UncertaintyMeasuresd


def _samples(seed: int = 0, multilabel: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if multilabel:
        return rng.uniform(0.01, 0.99, size=(6, 2, 5, 4, 3))
    return rng.dirichlet([1.0, 1.0, 1.0], size=(6, 5, 4, 3)).transpose(0, 4, 1, 2, 3)  # (S, C, *spatial)


def _entropy(p: np.ndarray, axis: int) -> np.ndarray:
    return -(p * np.log(p)).sum(axis)


def test_statistics_of_the_same_samples_give_the_numpy_measures():
    s = _samples()
    mean, ee, sq = s.mean(0), _entropy(s, 1).mean(0)[None], (s**2).mean(0)
    out = UncertaintyMeasures(input_type="probs", measures=["mutual_information", "variance"])(mean, ee, sq)
    np.testing.assert_allclose(out["mutual_information"], _entropy(mean, 0)[None] - ee, atol=1e-12)
    np.testing.assert_allclose(out["variance"], s.var(0).mean(0)[None], atol=1e-12)


@pytest.mark.parametrize("multilabel", [False, True])
def test_negative_or_too_large_expected_entropy_is_refused(multilabel):
    s = _samples(1, multilabel)
    mean = s.mean(0)
    shape = mean.shape if multilabel else (1, *mean.shape[1:])
    t = UncertaintyMeasures(input_type="probs", measures="mutual_information", multilabel=multilabel)
    # a negative EE gave MI = PE + 1 (above log C); an EE above PE gave MI = 0; both silently
    with pytest.raises(ValueError, match="expected_entropy is not the expected entropy.*non-negative"):
        t(mean, expected_entropy=-np.ones(shape))
    with pytest.raises(ValueError, match="expected_entropy is not the expected entropy.*exceeds pe"):
        t(mean, expected_entropy=np.full(shape, 5.0))
    dt = UncertaintyMeasuresd("p", input_type="probs", measures="mutual_information", expected_entropy_key="ee",
                              multilabel=multilabel)
    with pytest.raises(ValueError, match="^ee is not the expected entropy of the samples whose mean is p"):
        dt({"p": mean, "ee": -np.ones(shape)})


@pytest.mark.parametrize("multilabel", [False, True])
def test_a_variance_passed_as_the_second_moment_is_refused(multilabel):
    s = _samples(2, multilabel)
    mean = s.mean(0)
    t = UncertaintyMeasures(input_type="probs", measures="variance", multilabel=multilabel)
    # the variance instead of mean(p^2): clamped to a variance of 0 at most voxels, silently
    with pytest.raises(ValueError, match="mean_sq is not the mean of p_s.2.*below mean.2"):
        t(mean, mean_sq=s.var(0))
    # a second moment above the mean: variance 3, above the largest variance 1/4 of probabilities
    with pytest.raises(ValueError, match="mean_sq is not the mean of p_s.2.*above mean"):
        t(mean, mean_sq=(s**2).mean(0) + 3)
    dt = UncertaintyMeasuresd("p", input_type="probs", measures="variance", mean_sq_key="sq", multilabel=multilabel)
    with pytest.raises(ValueError, match="^sq is not the mean of p_s.2 of the samples whose mean is p"):
        dt({"p": mean, "sq": s.var(0)})


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("multilabel", [False, True])
def test_rounded_statistics_of_identical_or_sharp_samples_are_kept(dtype, multilabel):
    """The bounds leave room for rounding: the statistics of identical samples (MI = 0, variance 0) and of sharp
    samples in float16 pass, and give the numpy values."""
    g = torch.Generator().manual_seed(3)
    z = torch.randn(1, 3, 6, 5, generator=g).repeat(8, 1, 1, 1) * 20
    p = (torch.sigmoid(z) if multilabel else torch.softmax(z, 1)).to(dtype)
    out = UncertaintyMeasures(measures=["pred", "expected_entropy"], multilabel=multilabel)(p)
    sq = (p.double() ** 2).mean(0).to(dtype)
    maps = UncertaintyMeasures(input_type="probs", measures=["mutual_information", "variance"],
                               multilabel=multilabel)(out["pred"], out["expected_entropy"], sq)
    assert float(maps["mutual_information"].abs().max()) <= 4 * torch.finfo(dtype).eps
    assert float(maps["variance"].abs().max()) <= 4 * torch.finfo(dtype).eps


def test_the_measures_functions_check_the_same_bounds():
    mean = torch.tensor([[[0.5], [0.5]]], dtype=torch.float64)
    assert float(variance_from_moments(mean, torch.tensor([[[0.41], [0.41]]], dtype=torch.float64))) == pytest.approx(
        0.16)
    with pytest.raises(ValueError, match="below mean"):
        variance_from_moments(mean, torch.full_like(mean, 0.2))
    with pytest.raises(ValueError, match="above mean"):
        variance_from_moments(mean, torch.full_like(mean, 0.6))
    variance_from_moments(mean, torch.full_like(mean, 0.6), validate=False)  # the unchecked kernel stays unchecked
    with pytest.raises(ValueError, match="ee must be non-negative"):
        mutual_information_from_entropies(torch.tensor([[[0.5]]]), torch.tensor([[[-0.1]]]))


@pytest.mark.parametrize("mean_dtype,sq_dtype", [(torch.float32, torch.float16), (torch.float16, torch.float32)])
def test_a_second_moment_rounded_in_another_dtype_than_the_mean_is_kept(mean_dtype, sq_dtype):
    """review37: float32 mean probabilities with a float16 ``mean_sq`` (maps of one run kept in two dtypes) were
    refused as "below mean^2": the check ran in the mean's dtype, not with the rounding of the coarser map."""
    p = torch.full((5, 1, 4, 4), 0.9996, dtype=torch.float64)
    s = torch.cat([p, 1 - p], 1)
    mean, sq = s.mean(0).to(mean_dtype), (s**2).mean(0).to(sq_dtype)
    out = UncertaintyMeasures(input_type="probs", measures="variance")(mean, mean_sq=sq)
    assert float(out["variance"].abs().max()) <= 4 * torch.finfo(torch.float16).eps
