"""Hostile review 60 (calibration and spatial metrics): checks against the papers' definitions and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from monai_unc.evaluation import unit_scale
from monai_unc.measures import variance_from_moments


@pytest.mark.parametrize(("num_classes", "split_value", "top"), [(2, 0.09, 0.25), (3, 0.06, 2 / 9), (4, 0.045, 0.1875)])
def test_variance_scale_claims_of_the_spatial_docs(num_classes, split_value, top):
    """docs/spatial_metrics.md: the variance BA-ECE / SPACE read unrescaled shrinks with C and tops at (C-1)/C**2."""
    split = torch.zeros(10, 1, num_classes, 1, dtype=torch.float64)  # samples: one-hot, 9 of label 0, 1 of label 1
    split[:9, 0, 0] = 1
    split[9, 0, 1] = 1
    v = float(variance_from_moments(split.mean(0), (split**2).mean(0)).reshape(-1)[0])
    assert v == pytest.approx(split_value, abs=1e-12)
    even = torch.zeros(num_classes, 1, num_classes, 1, dtype=torch.float64)  # one sample per label: the maximum
    even[torch.arange(num_classes), 0, torch.arange(num_classes)] = 1
    v_top = float(variance_from_moments(even.mean(0), (even**2).mean(0)).reshape(-1)[0])
    assert v_top == pytest.approx(top, abs=1e-12) == pytest.approx((num_classes - 1) / num_classes**2)
    u = np.array([v, v_top])
    assert unit_scale(u, "variance", num_classes) is u  # scored as it is, as the docs say


def _case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    target = np.zeros((12, 12), dtype=np.int64)
    target[3:9, 3:9] = 1
    return rng.random(target.shape), np.roll(target, 1, 0), target


def test_baece_normalize_is_affine_invariant_up_to_the_float64_range():
    """normalize=True min-max rescales the map: a finite map whose range overflows float64 gave NaN."""
    from monai_unc.metrics.spatial import boundary_aware_ece

    u, pred, target = _case()
    reference = boundary_aware_ece(u, pred, target, normalize=True)
    huge = (u - 0.5) * 1.7e308 + (u - 0.5) * 1.7e308  # finite, from about -1.7e308 to 1.7e308: max - min overflows
    assert np.isfinite(huge).all() and not math.isfinite(float(huge.max()) - float(huge.min()))
    np.testing.assert_allclose(boundary_aware_ece(huge, pred, target, normalize=True), reference, rtol=1e-12)
    got = boundary_aware_ece(torch.as_tensor(huge), torch.as_tensor(pred), torch.as_tensor(target), normalize=True)
    np.testing.assert_allclose(got.numpy(), reference, rtol=1e-12)  # the tensor path (CUDA tensors take it) too


def test_space_of_a_huge_map_is_finite():
    """SPACE = mean |G * (U - E)|: finite for a finite map (its mean of absolute values overflowed to inf)."""
    from monai_unc.metrics.spatial import spatial_calibration_error

    u, pred, target = _case()
    with pytest.warns(UserWarning, match="above 1"):
        got = spatial_calibration_error(u * 1e307, pred, target, sigma=1e-6)  # sigma ~ 0: mean |U - E|
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, np.mean(u) * 1e307, rtol=1e-12)  # the error map is negligible at this scale
    tensor = spatial_calibration_error(torch.as_tensor(u * 1e307), torch.as_tensor(pred), torch.as_tensor(target),
                                       sigma=1e-6)
    np.testing.assert_allclose(tensor.numpy(), got, rtol=1e-12)
    with pytest.warns(UserWarning, match="above 1"):
        smooth = spatial_calibration_error(u * 1e307, pred, target, sigma=2.0)
    with pytest.warns(UserWarning, match="above 1"):
        small = spatial_calibration_error(u * 1e300, pred, target, sigma=2.0)
    np.testing.assert_allclose(smooth / 1e307, small / 1e300, rtol=1e-9)  # linear in the scale of U (E negligible)


def test_mean_abs_of_huge_values_both_array_types():
    """The kernel of SPACE's mean: numpy (CPU) and tensors (the CUDA path) alike, finite and exact in the scale."""
    from monai_unc.metrics.spatial import _mean_abs

    x = np.random.default_rng(1).standard_normal((40, 30)) * 1e307
    expected = float(np.mean(np.abs(x / 1e307))) * 1e307
    for arr in (x.copy(), torch.as_tensor(x)):
        np.testing.assert_allclose(_mean_abs(arr), expected, rtol=1e-12)
    small = np.random.default_rng(2).random((7, 5))
    assert _mean_abs(small) == pytest.approx(float(np.mean(small)), rel=1e-15)


@pytest.mark.parametrize("scale", [3e-310, 1e-308, 1e-200, 1e-160, 1e160, 1e300, 1e306])
def test_spatial_metrics_scale_with_extreme_spacings(scale):
    """Distances scale with the spacing: spacings whose float64 squares underflow or overflow gave 0 / inf distances.

    BA-ECE and BUC do not depend on the unit of the spacing; HD95 and the distances scale with it. A spacing of 1e-200
    mm gave BA-ECE 0.4597 instead of 0.4214 (every distance 0, one band) and BUC NaN; 1e160 mm gave BA-ECE 0.2719;
    1e-308 mm gave BA-ECE 0 (overflowing weights).
    """
    from monai_unc.metrics.boundary import distance_to_mask, hd95
    from monai_unc.metrics.spatial import boundary_aware_ece, boundary_uncertainty_concentration

    u, pred, target = _case()
    unit, tiny = (1.0, 2.0), (scale, 2.0 * scale)
    kw = {"backend": "scipy"}  # float64 distances on both sides (the edt package's float32 differ by 2e-7 relative)
    np.testing.assert_allclose(boundary_aware_ece(u, pred, target, spacing=tiny, **kw),
                               boundary_aware_ece(u, pred, target, spacing=unit, **kw), rtol=1e-12)
    np.testing.assert_allclose(boundary_uncertainty_concentration(u, pred, target, spacing=tiny, **kw),
                               boundary_uncertainty_concentration(u, pred, target, spacing=unit, **kw), rtol=1e-12)
    np.testing.assert_allclose(
        boundary_uncertainty_concentration(u, pred, target, spacing=tiny, width=3.0 * scale, **kw),
        boundary_uncertainty_concentration(u, pred, target, spacing=unit, width=3.0, **kw), rtol=1e-12)
    np.testing.assert_allclose(hd95(pred > 0, target > 0, spacing=tiny),
                               hd95(pred > 0, target > 0, spacing=unit) * scale, rtol=1e-12)
    for backend in ("scipy", "auto"):  # "auto": the edt package where installed, float32 distances
        np.testing.assert_allclose(distance_to_mask(target, spacing=tiny, backend=backend),
                                   distance_to_mask(target, spacing=unit, backend=backend) * scale, rtol=1e-6)


@pytest.mark.parametrize("scale", [1e-308, 1e-200, 1e200])
def test_baece_bands_and_max_distance_in_mm_at_extreme_spacings(scale):
    """The bands of BA-ECE come back in mm and max_distance is read in mm, whatever the unit the kernel works in."""
    from monai_unc.metrics.spatial import boundary_aware_ece

    u, pred, target = _case()
    kw = {"backend": "scipy", "return_bands": True, "n_bands": 4}
    v1, b1 = boundary_aware_ece(u, pred, target, spacing=(1.0, 2.0), max_distance=5.0, **kw)
    vs, bs = boundary_aware_ece(u, pred, target, spacing=(scale, 2.0 * scale), max_distance=5.0 * scale, **kw)
    np.testing.assert_allclose(vs, v1, rtol=1e-12)
    np.testing.assert_allclose(bs["edges"], b1["edges"] * scale, rtol=1e-12)
    np.testing.assert_allclose(bs["distance"], b1["distance"] * scale, rtol=1e-12)
    np.testing.assert_array_equal(bs["count"], b1["count"])
