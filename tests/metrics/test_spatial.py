"""BUC, BA-ECE and SPACE (Zeevi et al. Sec. 3) against straightforward scipy implementations and hand-worked cases."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import ndimage

from monai_unc.metrics.discrimination import (
    au_arc,
    avu,
    correct_certain_ratio,
    error_auprc,
    error_auroc,
    uncertain_incorrect_ratio,
    voxel_accuracy,
)
from monai_unc.metrics.spatial import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    SpatialCalibrationErrorMetric,
    _baece_case,
    _buc_case,
    _gaussian_scipy,
    _gaussian_torch,
    _space_case,
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    spatial_calibration_error,
)
from tests._paths import ROOT

DOCS = ROOT / "docs" / "spatial_metrics.md"

# ------------------------------------------------------------------------------------------------ references
# written from the definitions with scipy only (morphology, EDT, gaussian_filter), sharing no code with the
# implementation


def ref_boundary(lab):
    fp = ndimage.generate_binary_structure(lab.ndim, 1)
    return ndimage.grey_dilation(lab, footprint=fp, mode="nearest") != ndimage.grey_erosion(
        lab, footprint=fp, mode="nearest"
    )


def ref_distance(lab, sp):
    return ndimage.distance_transform_edt(~ref_boundary(lab), sampling=sp)


def ref_hd95(p, t, sp):
    ep = p & ~ndimage.binary_erosion(p)
    et = t & ~ndimage.binary_erosion(t)
    d1 = ndimage.distance_transform_edt(~et, sampling=sp)[ep]
    d2 = ndimage.distance_transform_edt(~ep, sampling=sp)[et]
    return max(np.percentile(d1, 95), np.percentile(d2, 95))


TOL = 1e-6  # the documented tie tolerance (TIE_RTOL), part of the definition


def ref_buc(u, p, t, sp, width=None):
    w = width if width is not None else max(ref_hd95(p > 0, t > 0, sp), max(sp))
    inside = ref_distance(p, sp) <= w * (1 + TOL)
    return u[inside].mean() / (u[inside].mean() + u[~inside].mean())


def ref_baece(u, p, t, sp, k=10, max_distance=None):
    d = ref_distance(t, sp)
    e = (p != t).astype(float)
    top = d.max() if max_distance is None else max_distance
    edges = np.linspace(0, top, k + 1)
    weights, gaps = [], []
    for i in range(k):
        lo, hi = edges[i], edges[i + 1]
        m = (d >= lo * (1 - TOL)) & ((d < hi * (1 - TOL)) if i < k - 1 else (d <= hi * (1 + TOL)))
        if m.any():
            weights.append(1.0 / (d[m].mean() + 0.5 * np.mean(sp)))
            gaps.append(abs(u[m].mean() - e[m].mean()))
    w = np.array(weights) / np.sum(weights)
    return float(np.sum(w * np.array(gaps)))


def ref_space(u, p, t, sp, sigma=2.0):
    s = [sigma / v for v in sp]
    e = (p != t).astype(float)
    gu = ndimage.gaussian_filter(u.astype(float), s, truncate=4.0, mode="reflect")
    ge = ndimage.gaussian_filter(e, s, truncate=4.0, mode="reflect")
    return float(np.abs(gu - ge).mean())


def blobs(shape, n_labels, seed, smooth=2.0):
    rng = np.random.default_rng(seed)
    field = ndimage.gaussian_filter(rng.standard_normal(shape), smooth)
    qs = np.quantile(field, np.linspace(0, 1, n_labels + 1)[1:-1])
    return np.digitize(field, qs).astype(np.int64)


def case(shape, n_labels=2, seed=0):
    """A target, a perturbed prediction and an uncertainty map in [0, 1] higher near the target boundary."""
    rng = np.random.default_rng(seed)
    t = blobs(shape, n_labels, seed)
    p = t.copy()
    flip = ndimage.binary_dilation(ref_boundary(t)) & (rng.random(shape) < 0.4)
    p[flip] = rng.integers(0, n_labels, int(flip.sum()))
    u = np.clip(np.exp(-ref_distance(t, (1,) * len(shape)) / 3) * 0.8 + 0.2 * rng.random(shape), 0, 1)
    return u, p, t


SETTINGS = [
    ((40, 44), 2, (1.0, 1.0)),
    ((40, 44), 3, (0.8, 1.6)),
    ((16, 20, 18), 2, (2.0, 1.0, 1.0)),
    ((16, 20, 18), 3, (1.3, 0.7, 1.1)),
]


# ------------------------------------------------------------------------------------------------ vs references


@pytest.mark.parametrize("backend", ["scipy", "auto"])
@pytest.mark.parametrize("shape,n_labels,sp", SETTINGS)
def test_all_three_match_scipy_references(shape, n_labels, sp, backend):
    u, p, t = case(shape, n_labels, seed=len(shape) * 10 + n_labels)
    # float64 scipy EDT: equal to rounding; the float32 edt backend is bit-identical only for integer spacings
    # and otherwise moves the band-mean distances (hence the BA-ECE weights) by ~1e-7 relative
    exact = backend == "scipy" or all(float(v).is_integer() for v in sp)
    tol = 1e-12 if exact else 1e-7
    kw = {"spacing": sp, "backend": backend}
    assert boundary_uncertainty_concentration(u, p, t, **kw) == pytest.approx(ref_buc(u, p, t, sp), abs=1e-12)
    assert boundary_uncertainty_concentration(u, p, t, width=2.5, **kw) == pytest.approx(
        ref_buc(u, p, t, sp, 2.5), abs=1e-12
    )
    assert boundary_aware_ece(u, p, t, **kw) == pytest.approx(ref_baece(u, p, t, sp), abs=tol)
    assert boundary_aware_ece(u, p, t, n_bands=4, max_distance=3.0, **kw) == pytest.approx(
        ref_baece(u, p, t, sp, 4, 3.0), abs=tol
    )
    for sigma in (0.7, 2.0, 5.0):
        assert spatial_calibration_error(u, p, t, spacing=sp, sigma=sigma) == pytest.approx(
            ref_space(u, p, t, sp, sigma), abs=1e-12
        )


def test_sphere_3d_and_scipy_backend():
    zz, yy, xx = np.indices((20, 24, 24))
    r = np.sqrt(((zz - 10) * 2.0) ** 2 + (yy - 12) ** 2 + (xx - 12) ** 2)  # mm, spacing (2, 1, 1)
    t = (r <= 9).astype(int)
    p = (r <= 10).astype(int)
    u = np.exp(-np.abs(r - 9.5))
    sp = (2.0, 1.0, 1.0)
    for backend in ("scipy", "auto"):
        assert boundary_uncertainty_concentration(u, p, t, sp, backend=backend) == pytest.approx(
            ref_buc(u, p, t, sp), abs=1e-12
        )
        assert boundary_aware_ece(u, p, t, sp, backend=backend) == pytest.approx(ref_baece(u, p, t, sp), abs=1e-12)


# ------------------------------------------------------------------------------------------------ by hand


def test_buc_by_hand_on_5x5_square():
    t = np.zeros((11, 11), int)
    t[3:8, 3:8] = 1
    boundary = ref_boundary(t)  # 16 inner + 20 outer voxels (checked in test_boundary)
    # uncertainty only on the boundary: everything is inside R -> BUC = 1
    assert boundary_uncertainty_concentration(boundary.astype(float), t, t) == 1.0
    # width 0 -> R is the boundary: u = 2 there and 1 elsewhere -> 2 / (2 + 1)
    u = np.where(boundary, 2.0, 1.0)
    assert boundary_uncertainty_concentration(u, t, t, width=0.0) == pytest.approx(2 / 3, abs=1e-15)
    # only the centre voxel uncertain: far from the boundary -> 0
    u = np.zeros((11, 11))
    u[5, 5] = 1.0
    assert boundary_uncertainty_concentration(u, t, t, width=0.0) == 0.0
    # constant positive uncertainty: no concentration
    assert boundary_uncertainty_concentration(np.full((11, 11), 0.3), t, t) == pytest.approx(0.5, abs=1e-15)


def test_buc_width_is_in_mm_not_voxels():
    t = np.array([[0, 0, 0, 0, 1, 1, 1, 1, 1]])  # boundary at columns 3 and 4
    u = np.arange(9, dtype=float)[None]
    # spacing 2 mm along the row: width 2 mm reaches one voxel beyond the boundary -> R = {2, 3, 4, 5}
    mu_r, mu_o = (2 + 3 + 4 + 5) / 4, (0 + 1 + 6 + 7 + 8) / 5
    got = boundary_uncertainty_concentration(u, t, t, spacing=(1.0, 2.0), width=2.0)
    assert got == pytest.approx(mu_r / (mu_r + mu_o), abs=1e-15)
    # 1 mm voxels: width 2 mm reaches two voxels -> R = {1, ..., 6}
    mu_r, mu_o = (1 + 2 + 3 + 4 + 5 + 6) / 6, (0 + 7 + 8) / 3
    got = boundary_uncertainty_concentration(u, t, t, spacing=1.0, width=2.0)
    assert got == pytest.approx(mu_r / (mu_r + mu_o), abs=1e-15)
    # the default width is max(HD95 = 0, largest spacing) = 2 mm
    assert boundary_uncertainty_concentration(u, t, t, spacing=(1.0, 2.0)) == pytest.approx(3.5 / (3.5 + 4.4))


def test_baece_by_hand():
    t = np.array([[0, 0, 0, 1, 1, 1]])  # d = [2, 1, 0, 0, 1, 2]
    p = np.array([[1, 0, 0, 1, 1, 1]])  # one error, at column 0
    u = np.array([[0.5, 0.5, 0.2, 0.2, 0.0, 0.0]])
    # K = 2, edges [0, 1, 2]: band 0 = {2, 3} (mean d 0, mean u 0.2, error 0), raw weight 1 / (0 + 0.5) = 2;
    # band 1 = {0, 1, 4, 5} (mean d 1.5, mean u 0.25, error 0.25), raw weight 1 / (1.5 + 0.5) = 0.5
    value, bands = boundary_aware_ece(u, p, t, n_bands=2, return_bands=True)
    assert value == pytest.approx(0.8 * 0.2 + 0.2 * 0.0, abs=1e-15)
    np.testing.assert_allclose(bands["edges"], [[0, 1, 2]])  # (B = 1, K + 1) for one unbatched map
    np.testing.assert_allclose(bands["distance"], [[0, 1.5]])
    np.testing.assert_allclose(bands["uncertainty"], [[0.2, 0.25]])
    np.testing.assert_allclose(bands["error"], [[0, 0.25]])
    np.testing.assert_allclose(bands["weight"], [[0.8, 0.2]])
    np.testing.assert_array_equal(bands["count"], [[2, 4]])
    # spacing (1, 2) mm on two such rows: d = [4, 2, 0, 0, 2, 4], edges [0, 2, 4], same bands; mean d 0 and 3, half
    # the mean spacing is 0.75 -> raw weights 1 / 0.75 and 1 / 3.75 (of one row, the 1 mm of its axis of one voxel
    # would not count: half a step is then 1 mm)
    two = [np.repeat(a, 2, axis=0) for a in (u, p, t)]
    value = boundary_aware_ece(*two, spacing=(1.0, 2.0), n_bands=2)
    assert value == pytest.approx((0.2 / 0.75) / (1 / 0.75 + 1 / 3.75), abs=1e-15)


def test_baece_empty_bands_and_normalize():
    u, p, t = case((30, 32), 2, seed=4)
    value, bands = boundary_aware_ece(u, p, t, n_bands=50, return_bands=True)
    empty = bands["count"] == 0
    assert empty.any() and np.isnan(bands["uncertainty"][empty]).all() and (bands["weight"][empty] == 0).all()
    assert bands["weight"].sum() == pytest.approx(1.0)
    assert value == pytest.approx(ref_baece(u, p, t, (1, 1), 50), abs=1e-12)
    scaled = 3.0 * u + 2.0
    assert boundary_aware_ece(scaled, p, t, normalize=True) == pytest.approx(
        ref_baece((u - u.min()) / (u.max() - u.min()), p, t, (1, 1)), abs=1e-12
    )


def test_space_by_hand():
    u, p, t = case((20, 22), 3, seed=2)
    e = (p != t).astype(float)
    # sigma 0: no smoothing
    assert spatial_calibration_error(u, p, t, sigma=0.0) == pytest.approx(np.abs(u - e).mean(), abs=1e-15)
    # a constant difference survives the reflect-mode filter unchanged
    assert spatial_calibration_error(np.full((9, 9), 0.25), t[:9, :9], t[:9, :9], sigma=3.0) == pytest.approx(0.25)
    # sigma per axis in mm: (4 mm, 0) on spacing (2, 1) is sigma (2, 0) voxels
    value, smoothed = spatial_calibration_error(u, p, t, spacing=(2.0, 1.0), sigma=(4.0, 0.0), return_map=True)
    ref = ndimage.gaussian_filter1d(u - e, 2.0, axis=0, truncate=4.0, mode="reflect")
    np.testing.assert_allclose(smoothed, ref[None, None], atol=1e-14)  # (B = 1, 1, *spatial)
    assert value == pytest.approx(np.abs(ref).mean(), abs=1e-15)


def test_space_upper_bound_property():
    @settings(max_examples=30, deadline=None)
    @given(st.integers(0, 10_000), st.floats(0.1, 6.0), st.sampled_from([(1.0, 1.0), (2.5, 0.5)]))
    def check(seed, sigma, sp):
        rng = np.random.default_rng(seed)
        u = rng.random((12, 9))
        p = rng.integers(0, 2, (12, 9))
        t = rng.integers(0, 2, (12, 9))
        value = spatial_calibration_error(u, p, t, spacing=sp, sigma=sigma)
        assert 0.0 <= value <= np.abs(u - (p != t)).mean() + 1e-12  # |G*D| <= G*|D|, G preserves the mean

    check()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.1, 10.0))
def test_buc_in_unit_interval_and_scale_invariant(seed, scale):
    rng = np.random.default_rng(seed)
    t = blobs((14, 15), 2, seed % 50)
    p = blobs((14, 15), 2, (seed + 1) % 50)
    u = rng.random((14, 15))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (a,) = boundary_uncertainty_concentration(u, p, t)
        (b,) = boundary_uncertainty_concentration(scale * u, p, t)
    if not math.isnan(a):
        assert 0.0 <= a <= 1.0
        assert a == pytest.approx(b, abs=1e-12)


# ------------------------------------------------------------------------------------------------ Gaussian kernels


@pytest.mark.parametrize(
    "shape,sigmas",
    [((3,), (4.0,)), ((5, 2), (3.0, 7.0)), ((4, 6, 5), (0.5, 2.0, 9.0)), ((70, 80, 30), (1.0, 2.0, 0.0))],
)
def test_gaussian_kernels_equal_scipy(shape, sigmas):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    ref = ndimage.gaussian_filter(x, sigmas, truncate=4.0, mode="reflect")
    threaded = _gaussian_scipy(x.copy(), sigmas, 4.0, threads=2)
    assert np.array_equal(threaded, ref)  # the same passes in the same order: bit-identical
    np.testing.assert_allclose(_gaussian_torch(torch.from_numpy(x), sigmas, 4.0).numpy(), ref, atol=1e-13)


# ------------------------------------------------------------------------------------------------ Zeevi et al. Fig. 1


def test_fig1_scattered_vs_boundary_maps_told_apart():
    """Two maps with identical voxel-wise scores; BUC and SPACE prefer the boundary-aligned one."""
    yy, xx = np.indices((64, 64))
    r = np.hypot(yy - 32, xx - 32)
    t = (r < 18).astype(int)
    p = (r < 19.5).astype(int)  # over-segmentation: the errors form a ring at the boundary
    e = p != t
    rng = np.random.default_rng(0)
    u_b = rng.random((64, 64)) * 0.1  # clean map: low everywhere ...
    u_b[e] = rng.uniform(0.5, 1.0, int(e.sum()))  # ... high on the errors
    near = (~e) & (np.abs(r - 18.5) < 2.5)  # correct voxels hugging the boundary
    far = (~e) & (r < 8)  # correct voxels far from it
    idx_near = np.flatnonzero(near)[: min(near.sum(), far.sum())]
    idx_far = rng.permutation(np.flatnonzero(far))[: idx_near.size]
    u_b.flat[idx_near] = rng.uniform(0.5, 1.0, idx_near.size)
    u_a = u_b.copy()  # noisy map: swap the near-boundary values with far-away ones
    u_a.flat[idx_near], u_a.flat[idx_far] = u_b.flat[idx_far], u_b.flat[idx_near]
    # the multiset of (u, e) pairs is unchanged, so every voxel-wise metric is identical
    for fn in (error_auroc, error_auprc, avu, correct_certain_ratio, uncertain_incorrect_ratio, voxel_accuracy, au_arc):
        assert fn(u_a, e) == fn(u_b, e), fn.__name__
    try:
        from monai_unc.metrics.calibration import uce
    except ImportError:
        uce = None
    if uce is not None:
        try:
            assert float(uce(u_a, e)) == pytest.approx(float(uce(u_b, e)), abs=1e-12)
        except TypeError:  # a different signature than (uncertainty, error): not this test's business
            pass
    # the spatial metrics tell them apart
    assert boundary_uncertainty_concentration(u_b, p, t) > boundary_uncertainty_concentration(u_a, p, t) + 0.05
    assert spatial_calibration_error(u_b, p, t) < spatial_calibration_error(u_a, p, t) - 0.005


# ------------------------------------------------------------------------------------------------ shapes, libraries


def test_batch_torch_multiclass_and_probabilities():
    cases = [case((18, 20, 16), 3, seed=s) for s in range(3)]
    u = np.stack([c[0] for c in cases])[:, None]
    p = np.stack([c[1] for c in cases])
    t = np.stack([c[2] for c in cases])[:, None]
    sp = (2.0, 1.0, 1.5)
    for fn in (boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error):
        batch = fn(u, p, t, spacing=sp)
        assert isinstance(batch, np.ndarray) and batch.shape == (3,) and batch.dtype == np.float64
        single = [fn(u[i, 0], p[i], t[i, 0], spacing=sp)[0] for i in range(3)]
        np.testing.assert_allclose(batch, single, rtol=0, atol=0)
        tb = fn(torch.from_numpy(u).float(), torch.from_numpy(p), torch.from_numpy(t), spacing=sp)
        assert isinstance(tb, torch.Tensor) and tb.dtype == torch.float64
        np.testing.assert_allclose(tb.numpy(), batch, atol=1e-6)  # float32 uncertainty
        # probabilities for pred: argmax over the channel axis gives the same labels
        probs = np.eye(3)[p].transpose(0, 4, 1, 2, 3) * 0.7 + 0.1
        np.testing.assert_allclose(fn(u, probs, t, spacing=sp), batch, atol=0)
    per_case = np.array([[2.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.5, 2.0, 1.0]])
    got = spatial_calibration_error(u, p, t, spacing=per_case)
    np.testing.assert_allclose(got, [ref_space(u[i, 0], p[i], t[i, 0], per_case[i]) for i in range(3)], atol=1e-12)
    value, bands = boundary_aware_ece(u, p, t, spacing=sp, return_bands=True)
    assert bands["uncertainty"].shape == (3, 10) and bands["edges"].shape == (3, 11)
    value, smoothed = spatial_calibration_error(torch.from_numpy(u), p, t, return_map=True)
    assert isinstance(smoothed, torch.Tensor) and smoothed.shape == u.shape


def test_tensor_kernels_match_numpy_kernels():
    """The code path CUDA inputs take (torch kernels), run here on CPU tensors, equals the numpy path."""
    u, p, t = case((14, 16, 12), 3, seed=8)
    sp = (2.0, 1.0, 1.5)
    tu, tp, tt = torch.from_numpy(u.copy()), torch.from_numpy(p), torch.from_numpy(t)
    for width in (None, 3.0):
        assert _buc_case(tu, tp, tt, sp, width, "auto") == pytest.approx(
            _buc_case(u.copy(), p, t, sp, width, "auto"), abs=1e-12
        )
    for max_distance, normalize in [(None, False), (4.0, True)]:
        v_t, b_t = _baece_case(tu, tp, tt, sp, 7, max_distance, normalize, "auto")
        v_n, b_n = _baece_case(u.copy(), p, t, sp, 7, max_distance, normalize, "auto")
        assert v_t == pytest.approx(v_n, abs=1e-12)
        for key in b_n:
            np.testing.assert_allclose(np.asarray(b_t[key]), b_n[key], atol=1e-12)
    s_t, m_t = _space_case(tu.clone(), tp, tt, sp, (2.0, 2.0, 2.0), 4.0)
    s_n, m_n = _space_case(u.copy(), p, t, sp, (2.0, 2.0, 2.0), 4.0)
    assert s_t == pytest.approx(s_n, abs=1e-12)
    np.testing.assert_allclose(m_t.numpy(), m_n, atol=1e-12)
    assert np.array_equal(tu.numpy(), u)  # the tensor path does not write into its input


def test_baece_all_voxels_on_the_boundary():
    t = np.indices((6, 6)).sum(0) % 2  # a checkerboard: every voxel is a boundary voxel, d = 0 everywhere
    p = t.copy()
    p[0, :3] = 1 - p[0, :3]
    u = np.random.default_rng(0).random((6, 6))
    value, bands = boundary_aware_ece(u, p, t, return_bands=True)
    assert bands["count"][0, 0] == 36 and bands["count"][0, 1:].sum() == 0
    assert value == pytest.approx(abs(u.mean() - (p != t).mean()), abs=1e-15)


@pytest.mark.cuda
def test_cuda_inputs_match_cpu(cuda_device):
    u, p, t = case((16, 18, 14), 3, seed=1)  # a boundary band narrower than the volume: every value defined
    args = [torch.from_numpy(x)[None, None].to(cuda_device) for x in (u, p, t)]
    for fn in (boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error):
        g = fn(*args, spacing=(2, 1, 1))
        assert g.device.type == cuda_device.type
        ref = float(fn(u, p, t, spacing=(2, 1, 1))[0])
        assert not math.isnan(ref)
        assert float(g[0]) == pytest.approx(ref, abs=1e-9)


# ------------------------------------------------------------------------------------------------ degenerate input


def test_degenerate_cases_give_nan_with_warning():
    u = np.random.default_rng(0).random((10, 12))
    empty = np.zeros((10, 12), int)
    full = np.ones((10, 12), int)
    some = empty.copy()
    some[3:7, 4:9] = 1
    with pytest.warns(UserWarning, match="no boundary"):
        assert np.isnan(boundary_uncertainty_concentration(u, empty, some))
    with pytest.warns(UserWarning, match="no boundary"):
        assert np.isnan(boundary_uncertainty_concentration(u, full, full))
    with pytest.warns(UserWarning, match="not finite"):  # empty target: HD95 is infinite
        assert np.isnan(boundary_uncertainty_concentration(u, some, empty))
    with pytest.warns(UserWarning, match="zero everywhere"):
        assert np.isnan(boundary_uncertainty_concentration(np.zeros((10, 12)), some, some))
    with pytest.warns(UserWarning, match="whole volume"):
        assert np.isnan(boundary_uncertainty_concentration(u, some, some, width=100.0))
    with pytest.warns(UserWarning, match="no boundary"):
        assert np.isnan(boundary_aware_ece(u, some, empty))
    with pytest.warns(UserWarning, match="no boundary"):
        value, bands = boundary_aware_ece(u, some, full, return_bands=True)
    assert np.isnan(value).all() and np.isnan(bands["uncertainty"]).all()
    with pytest.warns(UserWarning, match="constant"):
        assert np.isnan(boundary_aware_ece(np.full((10, 12), 0.4), some, some, normalize=True))
    # batch: one degenerate case does not spoil the others
    with pytest.warns(UserWarning):
        vals = boundary_aware_ece(np.stack([u, u])[:, None], np.stack([some, some]), np.stack([some, empty]))
    assert np.isfinite(vals[0]) and np.isnan(vals[1])
    # SPACE is defined for empty masks and for pred == target
    assert spatial_calibration_error(u, empty, empty) == pytest.approx(ref_space(u, empty, empty, (1, 1)))


def test_pred_equals_target():
    u, _, t = case((24, 26), 3, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        buc = boundary_uncertainty_concentration(u, t, t)
        baece = boundary_aware_ece(u, t, t)
        space = spatial_calibration_error(u, t, t)
    assert buc == pytest.approx(ref_buc(u, t, t, (1, 1)), abs=1e-12)  # width = max spacing (HD95 = 0)
    assert baece == pytest.approx(ref_baece(u, t, t, (1, 1)), abs=1e-12)
    assert space == pytest.approx(np.abs(ndimage.gaussian_filter(u, 2.0, truncate=4.0)).mean(), abs=1e-12)


def test_bad_inputs_raise():
    u, p, t = case((10, 12), 2, seed=1)
    with pytest.raises(ValueError, match="non-negative"):
        boundary_uncertainty_concentration(u - 1, p, t)
    with pytest.raises(ValueError, match="uncertainty"):
        boundary_uncertainty_concentration(np.where(u > 0.5, np.nan, u), p, t)
    with pytest.raises(ValueError, match="uncertainty must have shape"):
        spatial_calibration_error(u.reshape(-1), p, t)
    with pytest.raises(ValueError, match="pred"):
        boundary_aware_ece(u, p[:5], t)
    with pytest.raises(ValueError, match="target"):
        boundary_aware_ece(u, p, t + 0.5)
    with pytest.raises(ValueError, match="pred must be non-negative"):
        boundary_aware_ece(u, p - 1, t)
    with pytest.raises(ValueError, match="target must be non-negative"):
        spatial_calibration_error(torch.from_numpy(u), p, torch.from_numpy(t).float() - 1)
    with pytest.raises(ValueError, match="n_bands"):
        boundary_aware_ece(u, p, t, n_bands=0)
    with pytest.raises(ValueError, match="max_distance"):
        boundary_aware_ece(u, p, t, max_distance=-1)
    with pytest.raises(ValueError, match="width"):
        boundary_uncertainty_concentration(u, p, t, width=-2)
    with pytest.raises(ValueError, match="sigma"):
        spatial_calibration_error(u, p, t, sigma=-1.0)
    with pytest.raises(ValueError, match="sigma"):
        spatial_calibration_error(u, p, t, sigma=(1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="truncate"):
        spatial_calibration_error(u, p, t, truncate=0)
    with pytest.raises(ValueError, match="spacing"):
        spatial_calibration_error(u, p, t, spacing=(1.0, 0.0))
    with pytest.raises(TypeError, match="uncertainty"):
        spatial_calibration_error("u", p, t)


# ------------------------------------------------------------------------------------------------ MONAI adapters


def test_monai_metric_classes_accumulate_and_reduce():
    cases = [case((14, 16, 12), 2, seed=s) for s in range(4)]
    u = torch.from_numpy(np.stack([c[0] for c in cases])[:, None]).float()
    p = torch.from_numpy(np.stack([c[1] for c in cases])[:, None])
    t = torch.from_numpy(np.stack([c[2] for c in cases])[:, None])
    sp = (2.0, 1.0, 1.0)
    pairs = [
        (BoundaryUncertaintyConcentrationMetric, boundary_uncertainty_concentration),
        (BoundaryAwareECEMetric, boundary_aware_ece),
        (SpatialCalibrationErrorMetric, spatial_calibration_error),
    ]
    for cls, fn in pairs:
        expected = fn(u, p, t, spacing=sp)
        metric = cls(spacing=sp)
        metric(y_pred=p[:2], y=t[:2], uncertainty=u[:2])  # batch tensors
        metric(y_pred=list(p[2:]), y=list(t[2:]), uncertainty=list(u[2:]))  # decollated lists
        np.testing.assert_allclose(metric.aggregate("none").reshape(-1).numpy(), expected.numpy(), atol=1e-12)
        # MONAI's do_metric_reduction averages in float32
        assert float(metric.aggregate()) == pytest.approx(float(expected.mean()), rel=1e-6)
        # already packed y_pred (uncertainty in channel 0) gives the same
        packed = cls(spacing=sp)
        packed(torch.cat([u, p.float()], dim=1), t)
        np.testing.assert_allclose(packed.aggregate("none").reshape(-1).numpy(), expected.numpy(), atol=1e-12)


def test_monai_metric_spacing_from_metatensor_and_nan_reduction():
    from monai.data import MetaTensor

    u, p, t = case((12, 14, 10), 2, seed=3)
    affine = torch.diag(torch.tensor([2.0, 1.0, 0.5, 1.0], dtype=torch.float64))
    y = MetaTensor(torch.from_numpy(t)[None, None], affine=affine)
    metric = SpatialCalibrationErrorMetric()
    metric(y_pred=torch.from_numpy(p)[None, None], y=y, uncertainty=torch.from_numpy(u)[None, None])
    assert float(metric.aggregate("none")[0, 0]) == pytest.approx(ref_space(u, p, t, (2.0, 1.0, 0.5)), abs=1e-12)
    # a degenerate case (empty target) is NaN and left out of the mean
    metric = BoundaryAwareECEMetric(get_not_nans=True)
    empty = np.zeros_like(t)
    with pytest.warns(UserWarning):
        metric(
            y_pred=torch.from_numpy(np.stack([p, p]))[:, None],
            y=torch.from_numpy(np.stack([t, empty]))[:, None],
            uncertainty=torch.from_numpy(np.stack([u, u]))[:, None],
        )
    value, not_nans = metric.aggregate()
    assert float(value) == pytest.approx(ref_baece(u, p, t, (1, 1, 1)), rel=1e-6) and int(not_nans) == 1
    with pytest.raises(ValueError, match="y_pred"):
        SpatialCalibrationErrorMetric()(torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 4, 4))


def test_ignite_handlers():
    from ignite.engine import Engine

    from monai_unc.handlers.spatial import BoundaryAwareECE, BoundaryUncertaintyConcentration, SpatialCalibrationError

    cases = [case((12, 14, 10), 2, seed=s) for s in range(4)]
    batches = []
    for i in (0, 2):  # two iterations of two decollated cases each
        batches.append(
            [
                {
                    "predictive_entropy": torch.from_numpy(cases[j][0])[None],
                    "pred": torch.from_numpy(cases[j][1])[None],
                    "label": torch.from_numpy(cases[j][2])[None],
                }
                for j in (i, i + 1)
            ]
        )
    engine = Engine(lambda eng, batch: batch)
    handlers = {
        "buc": (BoundaryUncertaintyConcentration(spacing=(2, 1, 1)), boundary_uncertainty_concentration),
        "baece": (BoundaryAwareECE(spacing=(2, 1, 1)), boundary_aware_ece),
        "space": (SpatialCalibrationError(spacing=(2, 1, 1)), spatial_calibration_error),
    }
    for name, (h, _) in handlers.items():
        h.attach(engine, name)
    custom = SpatialCalibrationError(
        spacing=(2, 1, 1),
        output_transform=lambda out: (
            [d["predictive_entropy"] for d in out],
            [d["pred"] for d in out],
            [d["label"] for d in out],
        ),
    )
    custom.attach(engine, "space_custom")
    engine.run(batches, max_epochs=1)
    for name, (_, fn) in handlers.items():
        per_case = [fn(c[0], c[1], c[2], spacing=(2, 1, 1))[0] for c in cases]
        assert engine.state.metrics[name] == pytest.approx(float(np.mean(per_case)), rel=1e-6)
        np.testing.assert_allclose(engine.state.metric_details[name].reshape(-1).numpy(), per_case, atol=1e-12)
    assert engine.state.metrics["space_custom"] == pytest.approx(engine.state.metrics["space"], abs=1e-12)


# ------------------------------------------------------------------------------------------------ docs


def test_docs_example_runs():
    text = DOCS.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "docs/spatial_metrics.md must contain a python example"
    namespace: dict = {}
    with warnings.catch_warnings():  # found by hostile testing: the comparison warned (a metric tied on every case)
        warnings.simplefilter("error")
        exec(compile(blocks[0], str(DOCS), "exec"), namespace)  # noqa: S102 - our own documentation
    result = namespace["result"]
    assert all(m.n_ties < len(namespace["maps_a"]) for m in result.metrics.values())


def test_band_sums_of_tensors_equal_numpy_bincount():
    """The tensor path of BA-ECE's band sums (``index_add_``, deterministic on CUDA) equals ``numpy.bincount``, empty
    bands included, in float64 whatever the weights' dtype."""
    from monai_unc.metrics.spatial import _band_sums

    rng = np.random.default_rng(0)
    idx = rng.integers(0, 7, 500)
    idx[idx == 3] = 4  # band 3 empty
    w = rng.random(500)
    want = np.bincount(idx, weights=w, minlength=9)
    got = _band_sums(torch.from_numpy(idx), torch.from_numpy(w).float(), 9)
    assert got.dtype == torch.float64 and got.shape == (9,)
    np.testing.assert_allclose(got.numpy(), np.bincount(idx, weights=w.astype(np.float32), minlength=9), rtol=1e-12)
    np.testing.assert_allclose(_band_sums(torch.from_numpy(idx), torch.from_numpy(w), 9).numpy(), want, rtol=1e-12)
    np.testing.assert_array_equal(_band_sums(idx, w, 9), want)
