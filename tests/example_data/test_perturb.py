"""Image perturbations (noise, bias field, contrast, blur, resolution) and the shifted MNI152 cohort."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.ndimage import gaussian_filter

from monai_unc.data.perturbations import MAX_SEVERITY, PERTURBATIONS, make_mni152_cohort, perturb


def phantom(shape=(24, 28, 20), seed=0) -> np.ndarray:
    """A smooth positive image (1, *shape) with structure at several scales, float32."""
    rng = np.random.default_rng(seed)
    img = 0.2 + gaussian_filter(rng.uniform(size=shape), 1.5) + 0.5 * gaussian_filter(rng.uniform(size=shape), 4)
    return img.astype(np.float32)[None]


@pytest.mark.parametrize("kind", PERTURBATIONS)
def test_severity_zero_is_an_unchanged_copy(kind):
    x = phantom()
    y = perturb(x, kind, 0, seed=3)
    assert y is not x and y.dtype == np.float32
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("kind", PERTURBATIONS)
def test_reproducible_and_growing_with_severity(kind):
    x = phantom()
    np.testing.assert_array_equal(perturb(x, kind, 2.5, seed=4), perturb(x, kind, 2.5, seed=4))
    change = [float(np.abs(perturb(x, kind, s, seed=4) - x).mean()) for s in (1, 2, 3, 4, 5)]
    assert change[0] > 0
    assert all(b >= a - 1e-7 for a, b in zip(change, change[1:])), change


def test_noise_std_is_three_percent_of_the_range_per_severity_step():
    x = phantom(shape=(40, 40, 40))
    scale = float(x.max() - x.min())
    diff = perturb(x, "noise", 4, seed=1) - x
    n = diff.size
    # the sample std of n Gaussian values has relative sd 1/sqrt(2n): allow 5 of them
    assert diff.std() == pytest.approx(0.12 * scale, rel=5 / np.sqrt(2 * n))
    assert abs(diff.mean()) < 5 * 0.12 * scale / np.sqrt(n)
    assert not np.array_equal(perturb(x, "noise", 4, seed=2), perturb(x, "noise", 4, seed=1))


def test_bias_field_is_a_smooth_multiplicative_polynomial_linear_in_severity():
    x = phantom()
    log2 = np.log(perturb(x, "bias_field", 2, seed=7) / x)[0].astype(np.float64)
    log4 = np.log(perturb(x, "bias_field", 4, seed=7) / x)[0].astype(np.float64)
    # same draw, coefficients scaled by the severity: the log-field doubles
    np.testing.assert_allclose(log4, 2 * log2, atol=1e-5)
    # the log-field is a polynomial of total degree <= 3 in the coordinates: a least-squares fit leaves no residual
    coords = [np.linspace(-1, 1, n) for n in log2.shape]
    g = np.meshgrid(*coords, indexing="ij")
    terms = [g[0] ** i * g[1] ** j * g[2] ** k for i in range(4) for j in range(4) for k in range(4) if i + j + k <= 3]
    a = np.stack([t.ravel() for t in terms], 1)
    coef, *_ = np.linalg.lstsq(a, log2.ravel(), rcond=None)
    assert np.abs(a @ coef - log2.ravel()).max() < 1e-4
    assert np.abs(log2).max() > 0.01
    assert not np.allclose(perturb(x, "bias_field", 2, seed=8), perturb(x, "bias_field", 2, seed=7))


def test_contrast_is_a_gamma_curve_on_the_normalised_image():
    x = phantom()
    lo, rng_ = x.min(), x.max() - x.min()
    for seed in range(6):
        y = perturb(x, "contrast", 3, seed=seed)
        candidates = [((x - lo) / rng_) ** g * rng_ + lo for g in (1.45, 1 / 1.45)]
        assert min(np.abs(y - c).max() for c in candidates) < 1e-5
        # extremes stay put, order is preserved
        assert y.min() == pytest.approx(lo, abs=1e-6) and y.max() == pytest.approx(x.max(), abs=1e-5)
        order = np.argsort(x.ravel())
        assert np.all(np.diff(y.ravel()[order]) >= -1e-6)


def test_blur_matches_scipy_gaussian_in_the_interior():
    x = phantom()
    y = perturb(x, "blur", 2.5, seed=0)  # sigma 1 voxel
    ref = gaussian_filter(x[0].astype(np.float64), 1.0, truncate=4.0)
    # MONAI integrates the Gaussian over each voxel (erf kernel): a few 1e-4 apart from scipy's sampled kernel
    assert np.abs(y[0] - ref)[5:-5, 5:-5, 5:-5].max() < 2e-3
    inner = (0, slice(5, -5), slice(5, -5), slice(5, -5))  # MONAI pads with zeros: the volume border darkens
    assert y[inner].std() < x[inner].std()


def test_resolution_is_area_down_then_linear_up():
    x = phantom()
    y = perturb(x, "resolution", 2, seed=0)  # factor 1.6
    low = [max(1, round(n / 1.6)) for n in x.shape[1:]]
    t = torch.from_numpy(x)[None]
    ref = F.interpolate(F.interpolate(t, size=low, mode="area"), size=x.shape[1:], mode="trilinear")[0].numpy()
    np.testing.assert_allclose(y, ref, atol=1e-6)
    # a constant image has nothing to lose
    c = np.full((1, 16, 16, 16), 0.7, np.float32)
    np.testing.assert_allclose(perturb(c, "resolution", 5, seed=0), c, atol=1e-6)


def test_torch_2d_and_dtype():
    x = torch.from_numpy(phantom()[..., 0]).to(torch.float64)  # (1, 24, 28): 2D
    for kind in PERTURBATIONS:
        y = perturb(x, kind, 3, seed=1)
        assert type(y) is torch.Tensor and y.dtype == torch.float64 and y.shape == x.shape
    y_np = perturb(x.numpy(), "blur", 3, seed=1)
    np.testing.assert_allclose(perturb(x, "blur", 3, seed=1).numpy(), y_np, atol=1e-6)
    # integer images come back as float32
    assert perturb(np.ones((1, 8, 8), np.int64), "noise", 1, seed=0).dtype == np.float32


def test_bad_input_names_the_argument():
    x = phantom()
    with pytest.raises(ValueError, match="kind"):
        perturb(x, "motion", 1)
    with pytest.raises(ValueError, match="severity"):
        perturb(x, "noise", MAX_SEVERITY + 1)
    with pytest.raises(ValueError, match="severity"):
        perturb(x, "noise", -0.5)
    with pytest.raises(TypeError, match="severity"):
        perturb(x, "noise", "high")
    bad = x.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="image"):
        perturb(bad, "blur", 1)
    with pytest.raises(ValueError, match="image"):
        perturb(x[0, 0], "blur", 1)  # (28, 20): no channel axis
    with pytest.raises(ValueError, match="image"):
        perturb(np.zeros((1, 0, 4, 4), np.float32), "blur", 1)


def test_cohort_arguments_are_checked_before_loading():
    with pytest.raises(ValueError, match="n_cases"):
        make_mni152_cohort(0)
    with pytest.raises(ValueError, match="kinds"):
        make_mni152_cohort(3, kinds=["noise", "motion"])
    with pytest.raises(ValueError, match="severity_range"):
        make_mni152_cohort(3, severity_range=(2, 7))
    with pytest.raises(ValueError, match="roi"):
        make_mni152_cohort(3, roi=(slice(0, 4),))


@pytest.mark.slow
def test_mni152_cohort():
    pytest.importorskip("nilearn")
    roi = (slice(49, 81), slice(32, 96), slice(16, 64))
    cases = make_mni152_cohort(7, seed=0, roi=roi)
    assert [c["shift"] for c in cases] == ["none", *PERTURBATIONS, "noise"]
    from monai_unc.data import load_mni152_tissue

    data = load_mni152_tissue(2)
    np.testing.assert_array_equal(cases[0]["image"], data["image"][(slice(None), *roi)])
    for c in cases:
        assert c["image"].shape == (1, 32, 64, 48) and c["image"].dtype == np.float32
        np.testing.assert_array_equal(c["label"], data["label"][(slice(None), *roi)])
        assert c["right"].all()  # the block lies in the right hemisphere (world x >= 0)
        if c["shift"] != "none":
            assert 1.0 <= c["severity"] <= MAX_SEVERITY
            assert not np.array_equal(c["image"], cases[0]["image"])
    again = make_mni152_cohort(7, seed=0, roi=roi)
    for a, b in zip(cases, again):
        np.testing.assert_array_equal(a["image"], b["image"])
        assert a["severity"] == b["severity"]
