"""Boundary, distance-to-boundary and HD95 helpers against brute force, scipy and MONAI."""

from __future__ import annotations

import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from monai.metrics import compute_hausdorff_distance
from scipy import ndimage

from monai_unc.metrics.boundary import (
    available_backends,
    distance_to_boundary,
    distance_to_mask,
    foreground_edges,
    hausdorff_distance,
    hd95,
    label_boundary,
    lattice_unit,
)

BACKENDS = [b for b in ("edt", "scipy") if b in available_backends()]


def brute_boundary(label: np.ndarray) -> np.ndarray:
    """Loop over voxels and their face neighbours, exactly as docs/design.md words it."""
    out = np.zeros(label.shape, bool)
    for idx in itertools.product(*[range(s) for s in label.shape]):
        for ax in range(label.ndim):
            for step in (-1, 1):
                nb = list(idx)
                nb[ax] += step
                if 0 <= nb[ax] < label.shape[ax] and label[tuple(nb)] != label[idx]:
                    out[idx] = True
    return out


def brute_distance(features: np.ndarray, spacing) -> np.ndarray:
    """Distance to the nearest True voxel by comparing every voxel with every feature voxel."""
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in features.shape], indexing="ij"), -1).reshape(-1, features.ndim)
    pts = np.argwhere(features)
    sp = np.asarray(spacing, float)
    diff = (grid[:, None, :] - pts[None, :, :]) * sp
    return np.sqrt((diff**2).sum(-1)).min(1).reshape(features.shape)


def blobs(shape, n_labels, seed, smooth=1.5):
    rng = np.random.default_rng(seed)
    field = ndimage.gaussian_filter(rng.standard_normal(shape), smooth)
    qs = np.quantile(field, np.linspace(0, 1, n_labels + 1)[1:-1])
    return np.digitize(field, qs).astype(np.int64)


def onehot(x):
    return np.stack([x == 0, x > 0])[None].astype(np.float32)


# ------------------------------------------------------------------------------------------------ boundary


def test_square_boundary_by_hand():
    img = np.zeros((9, 9), int)
    img[2:7, 2:7] = 1  # the 5x5 square
    b = label_boundary(img)
    inner_ring = np.zeros_like(b)
    inner_ring[2:7, 2:7] = True
    inner_ring[3:6, 3:6] = False
    outer = np.zeros_like(b)
    outer[1, 2:7] = outer[7, 2:7] = outer[2:7, 1] = outer[2:7, 7] = True  # face neighbours only, no corners
    assert b.sum() == 16 + 20
    assert np.array_equal(b, inner_ring | outer)


@pytest.mark.parametrize("shape,n_labels", [((7, 9), 2), ((6, 5, 7), 3), ((5, 6, 4), 4)])
def test_boundary_matches_brute_force(shape, n_labels):
    lab = blobs(shape, n_labels, seed=len(shape) + n_labels)
    assert np.array_equal(label_boundary(lab), brute_boundary(lab))


def test_boundary_torch_and_batch():
    lab = blobs((3, 10, 12), 3, seed=1)
    t = torch.from_numpy(lab)
    out = label_boundary(t[None], spatial_dims=3)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bool and out.shape == (1, 3, 10, 12)
    assert np.array_equal(out[0].numpy(), brute_boundary(lab))
    batch = np.stack([blobs((10, 12), 2, seed=s) for s in range(3)])
    got = label_boundary(batch, spatial_dims=2)
    assert np.array_equal(got, np.stack([brute_boundary(c) for c in batch]))


@settings(max_examples=40, deadline=None)
@given(arrays(np.int8, st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 5)), elements=st.integers(0, 3)))
def test_boundary_property_relabel_invariant(lab):
    b = label_boundary(lab)
    assert np.array_equal(b, brute_boundary(lab))
    perm = np.array([2, 0, 3, 1], dtype=np.int8)  # a bijection of the labels keeps every interface
    assert np.array_equal(label_boundary(perm[lab]), b)


def test_constant_label_has_no_boundary_and_infinite_distance():
    lab = np.ones((4, 5, 6), np.uint8)
    assert not label_boundary(lab).any()
    d = distance_to_boundary(lab, spacing=(1, 2, 3))
    assert d.dtype == np.float64 and np.isinf(d).all()


def test_foreground_edges_match_scipy_erosion():
    for seed, shape in enumerate([(12, 13), (8, 9, 10)]):
        mask = blobs(shape, 2, seed) > 0
        mask[0] = True  # touch the border: border voxels are edges (border_value=0)
        ref = mask & ~ndimage.binary_erosion(mask)
        assert np.array_equal(foreground_edges(mask), ref)


# ------------------------------------------------------------------------------------------------ distances


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,spacing", [((9, 11), (1.0, 1.0)), ((9, 11), (2.5, 0.7)), ((6, 7, 8), (2.0, 1.0, 0.6))])
def test_distance_matches_brute_force(backend, shape, spacing):
    lab = blobs(shape, 3, seed=7)
    d = distance_to_boundary(lab, spacing=spacing, backend=backend)
    ref = brute_distance(brute_boundary(lab), spacing)
    np.testing.assert_allclose(d, ref, rtol=1e-6, atol=1e-6)
    assert (d[brute_boundary(lab)] == 0).all()


def test_anisotropic_distance_is_in_mm_by_hand():
    lab = np.zeros((7, 3), int)
    lab[3:] = 1  # boundary rows 2 and 3
    d = distance_to_boundary(lab, spacing=(2.5, 1.0))
    np.testing.assert_allclose(d[:, 0], [5.0, 2.5, 0, 0, 2.5, 5.0, 7.5])
    d_iso = distance_to_boundary(lab)
    np.testing.assert_allclose(d_iso[:, 1], [2, 1, 0, 0, 1, 2, 3])


def test_edt_backend_is_bit_identical_to_scipy_for_integer_spacing():
    if "edt" not in available_backends():
        pytest.skip("edt package not installed")
    lab = blobs((30, 40, 35), 3, seed=3)
    a = distance_to_boundary(lab, spacing=(2, 1, 3), backend="edt")
    b = distance_to_boundary(lab, spacing=(2, 1, 3), backend="scipy")
    assert np.array_equal(a, b)
    c = distance_to_boundary(lab, spacing=(0.83, 1.37, 0.61), backend="edt")
    e = distance_to_boundary(lab, spacing=(0.83, 1.37, 0.61), backend="scipy")
    np.testing.assert_allclose(c, e, rtol=1e-6, atol=1e-6)


def test_distance_torch_batch_and_per_case_spacing():
    labs = np.stack([blobs((10, 12), 2, seed=s) for s in range(3)])
    sps = np.array([[1.0, 1.0], [2.0, 0.5], [0.3, 3.0]])
    out = distance_to_boundary(torch.from_numpy(labs), spacing=sps, spatial_dims=2)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64
    for i in range(3):
        ref = brute_distance(brute_boundary(labs[i]), sps[i])
        np.testing.assert_allclose(out[i].numpy(), ref, rtol=1e-6, atol=1e-6)


def test_sphere_distance_from_centre():
    r = np.sqrt(((np.indices((21, 21, 21)) - 10) ** 2).sum(0))
    ball = (r <= 7).astype(int)
    d = distance_to_boundary(ball)
    # by hand: the closest boundary voxel to the centre is (6, 1, 0) (|x|^2 = 37 <= 49 and its neighbour
    # (7, 1, 0) has 50 > 49); (6, 0, 0) is not on the boundary since (7, 0, 0) is still inside (49 <= 49)
    assert d[10, 10, 10] == pytest.approx(np.sqrt(37.0), rel=1e-12)
    # brute force on a sample of voxels (the full comparison is covered on smaller volumes above)
    pts = np.random.default_rng(0).integers(0, 21, (300, 3))
    bnd = np.argwhere(brute_boundary(ball))
    ref = np.sqrt(((pts[:, None, :] - bnd[None]) ** 2).sum(-1)).min(1)
    np.testing.assert_allclose(d[tuple(pts.T)], ref, atol=1e-12)


def test_distance_to_mask():
    m = np.zeros((5, 5), bool)
    m[0, 0] = True
    d = distance_to_mask(m, spacing=(1.0, 2.0))
    assert d[4, 4] == pytest.approx(np.hypot(4, 8))
    assert np.isinf(distance_to_mask(np.zeros((3, 3)))).all()


# hand-worked distances from the voxel(s) of a mask, anisotropic spacing, one case per dimension
HAND_CASES = [
    # 1D: features at both ends, 0.5 mm voxels
    (np.array([1, 0, 0, 0, 1]), 0.5, np.array([0.0, 0.5, 1.0, 0.5, 0.0])),
    (np.array([1, 0, 0, 0, 1]), (0.5,), np.array([0.0, 0.5, 1.0, 0.5, 0.0])),
    (np.array([0, 0, 1, 0, 0, 0]), 3.0, np.array([6.0, 3.0, 0.0, 3.0, 6.0, 9.0])),
    # 2D: one feature voxel at the corner, 2 mm x 0.5 mm voxels
    (np.array([[1, 0, 0], [0, 0, 0]]), (2.0, 0.5),
     np.array([[0.0, 0.5, 1.0], [2.0, np.sqrt(4.25), np.sqrt(5.0)]])),
    # 3D: one feature voxel at the corner, 3 x 0.5 x 2 mm voxels
    (np.array([[[1, 0], [0, 0]], [[0, 0], [0, 0]]]), (3.0, 0.5, 2.0),
     np.array([[[0.0, 2.0], [0.5, np.sqrt(4.25)]], [[3.0, np.sqrt(13.0)], [np.sqrt(9.25), np.sqrt(13.25)]]])),
]


@pytest.mark.parametrize("backend", ["auto", *BACKENDS])
@pytest.mark.parametrize("mask,spacing,expected", HAND_CASES)
def test_distance_to_mask_1d_2d_3d_every_backend_by_hand(backend, mask, spacing, expected):
    # regression: the edt package takes a 1D spacing as a number, not a tuple (TypeError before the fix)
    d = distance_to_mask(mask, spacing=spacing, backend=backend)
    assert isinstance(d, np.ndarray) and d.dtype == np.float64 and d.shape == mask.shape
    np.testing.assert_allclose(d, expected, rtol=1e-6, atol=1e-12)
    ref = ndimage.distance_transform_edt(mask == 0, sampling=np.broadcast_to(spacing, (mask.ndim,)))
    np.testing.assert_allclose(d, ref, rtol=1e-6, atol=1e-12)
    t = distance_to_mask(torch.from_numpy(mask), spacing=spacing, backend=backend)
    assert isinstance(t, torch.Tensor)
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("backend", ["auto", *BACKENDS])
@pytest.mark.parametrize(
    "shape,spacing", [((17,), (0.7,)), ((17,), 2.5), ((9, 11), (2.5, 0.7)), ((6, 7, 8), (2.0, 1.0, 0.6))]
)
def test_distance_to_mask_matches_scipy_and_brute_force(backend, shape, spacing):
    mask = np.random.default_rng(len(shape)).random(shape) < 0.15
    mask.flat[0] = True  # never empty
    sp = np.broadcast_to(np.asarray(spacing, float), (len(shape),))
    d = distance_to_mask(mask, spacing=spacing, backend=backend)
    np.testing.assert_allclose(d, ndimage.distance_transform_edt(~mask, sampling=sp), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(d, brute_distance(mask, sp), rtol=1e-6, atol=1e-9)


F32_08 = float(np.float32(0.8))  # a float32 header value: 0.800000011920929


def exact_distance(features, spacing):
    """Distance to the nearest feature voxel from the exact squared distances of the decimal spacings (big ints)."""
    fs = [Fraction(repr(float(v))) for v in np.broadcast_to(np.asarray(spacing, float), (features.ndim,))]
    scale = math.lcm(*(f.denominator for f in fs))
    steps = [int(f * scale) for f in fs]
    pts = np.argwhere(features)
    out = np.empty(features.shape)
    for x in np.ndindex(features.shape):
        sq = min(sum((int(a - b) * m) ** 2 for a, b, m in zip(x, q, steps)) for q in pts)
        out[x] = math.sqrt(Fraction(sq, scale * scale))  # sqrt of the exact rational: rounded twice at most
    return out


@pytest.mark.parametrize("backend", ["auto", *BACKENDS])
@pytest.mark.parametrize("shape,spacing", [((40,), 0.8), ((23, 19), (0.6, 2.5)), ((9, 31, 7), (0.8, 0.8, 0.8)),
                                           ((9, 31, 7), (1.2, 0.6, 2.5)), ((9, 31, 7), (0.7, 0.7, 3.0)),
                                           ((9, 31, 7), (F32_08, F32_08, 3.0))])
def test_distance_to_mask_exact_within_is_exact_for_every_backend(backend, shape, spacing):
    # the edt package's float32 put 25 voxels of 0.8 mm at 20.00000076 mm; with exact_within, every distance up to
    # it is exact to float64 rounding (the integer lattice of lattice_unit, or scipy where the spacings have none)
    rng = np.random.default_rng(len(shape))
    mask = rng.random(shape) < 0.01
    mask.flat[0] = True
    ref = exact_distance(mask, spacing)
    d = distance_to_mask(mask, spacing=spacing, backend=backend, exact_within=15.0)
    assert isinstance(d, np.ndarray) and d.dtype == np.float64
    near = ref <= 15.0
    np.testing.assert_allclose(d[near], ref[near], rtol=1e-15, atol=0)
    assert (d[~near] > 15.0).all()
    np.testing.assert_allclose(d, ref, rtol=1e-6)
    t = distance_to_mask(torch.from_numpy(mask), spacing=spacing, backend=backend, exact_within=15.0)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float64 and torch.equal(t, torch.from_numpy(d))


def test_lattice_unit():
    assert lattice_unit(0.8, 20.0) == (0.8, (1,))
    assert lattice_unit((0.7, 0.7, 3.0), 20.0) == (0.1, (7, 7, 30))
    assert lattice_unit((0.48828125, 0.48828125, 2.5), 20.0) == (5 / 256, (25, 25, 128))
    assert lattice_unit((2, 1, 3), 100.0) == (1.0, (2, 1, 3))
    assert lattice_unit((F32_08, F32_08, 3.0), 20.0) is None  # no common unit: scipy
    assert lattice_unit((F32_08, F32_08), 20.0) == (F32_08, (1, 1))  # isotropic: always
    assert lattice_unit(0.001, 20.0) is None  # 20000 voxels: beyond float32's exact integers
    assert lattice_unit(0.001, 4.0) == (0.001, (1,))
    for bad in (-1.0, float("nan"), "x", True):
        with pytest.raises(ValueError, match="spacing"):
            lattice_unit((1.0, bad), 20.0)
        with pytest.raises(ValueError, match="exact_within"):
            lattice_unit(1.0, bad)
    with pytest.raises(ValueError, match="exact_within"):
        distance_to_mask(np.eye(3), exact_within=-1.0)


@pytest.mark.parametrize("backend", ["auto", *BACKENDS])
def test_distance_to_boundary_1d_every_backend(backend):
    # boundary voxels of [0 1 1 1 0 0]: every voxel where the label changes to a face neighbour
    d = distance_to_boundary(np.array([0, 1, 1, 1, 0, 0, 0]), spacing=2.0, backend=backend)
    np.testing.assert_allclose(d, [0.0, 0.0, 2.0, 0.0, 0.0, 2.0, 4.0])


def test_bad_inputs():
    with pytest.raises(ValueError, match="spatial_dims"):
        label_boundary(np.zeros((2, 1, 4, 4, 4)))
    with pytest.raises(ValueError, match="label"):
        label_boundary(np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match="empty"):
        distance_to_boundary(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="spacing"):
        distance_to_boundary(np.zeros((3, 3)), spacing=(1.0, -1.0))
    with pytest.raises(ValueError, match="spacing"):
        distance_to_boundary(np.zeros((3, 3)), spacing=(1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="backend"):
        distance_to_boundary(np.eye(3), backend="nope")
    with pytest.raises(ValueError, match="cucim"):
        distance_to_boundary(np.eye(3), backend="cucim")
    with pytest.raises(ValueError, match="same shape"):
        hd95(np.zeros((3, 3)), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="percentile"):
        hd95(np.eye(3), np.eye(3), percentile=101)


@pytest.mark.cuda
def test_distance_on_cuda_matches_cpu(cuda_device):
    lab = blobs((12, 14, 10), 3, seed=5)
    gpu = distance_to_boundary(torch.from_numpy(lab).to(cuda_device), spacing=(2, 1, 1))
    assert gpu.device.type == cuda_device.type
    np.testing.assert_allclose(gpu.cpu().numpy(), distance_to_boundary(lab, spacing=(2, 1, 1)), rtol=1e-6, atol=1e-5)


# ------------------------------------------------------------------------------------------------ HD95


@pytest.mark.parametrize(
    "shape,spacing", [((24, 30), (1.0, 1.0)), ((24, 30), (0.7, 2.0)), ((14, 16, 18), (2.0, 1.0, 1.0))]
)
def test_hd95_matches_monai_and_brute_force(shape, spacing):
    for seed in range(3):
        p = blobs(shape, 2, seed=seed, smooth=2.0)
        t = blobs(shape, 2, seed=seed + 10, smooth=2.0)
        ours = hd95(p, t, spacing=spacing)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = float(compute_hausdorff_distance(onehot(p), onehot(t), percentile=95, spacing=spacing)[0, 0])
        assert ours == pytest.approx(ref, rel=1e-5)
        cp = np.argwhere(foreground_edges(p)) * np.asarray(spacing)
        ct = np.argwhere(foreground_edges(t)) * np.asarray(spacing)
        pair = np.sqrt(((cp[:, None, :] - ct[None, :, :]) ** 2).sum(-1))  # every edge pair
        d_pt, d_tp = pair.min(1), pair.min(0)
        assert ours == pytest.approx(max(np.percentile(d_pt, 95), np.percentile(d_tp, 95)), rel=1e-12)


@pytest.mark.parametrize(
    "shape,spacing", [((24, 30), (0.7, 2.0)), ((14, 16, 18), (2.0, 1.0, 1.0)), ((9, 11, 13), (0.8, 0.8, 3.0))]
)
def test_hd95_from_dense_transforms_equals_the_kd_tree(monkeypatch, shape, spacing):
    """The device path of HD95 (CUDA tensors with cuCIM: two dense transforms read at the edge voxels), run on CPU
    tensors with scipy's float64 transform in cuCIM's place, equals the KD-tree path and the brute force: every
    percentile, 2D and 3D, anisotropic spacing, touching and nested edges."""
    from monai_unc.metrics import boundary

    calls = []

    def scipy_transform(features, sp):
        calls.append(tuple(features.shape))
        assert isinstance(features, torch.Tensor) and features.dtype == torch.bool
        return torch.from_numpy(ndimage.distance_transform_edt(~features.numpy(), sampling=sp))

    monkeypatch.setattr(boundary, "_cucim_distances", scipy_transform)
    monkeypatch.setattr(boundary, "_resolve_backend", lambda backend, on_cuda, ndim: "cucim")
    for seed in range(3):
        p = blobs(shape, 2, seed=seed, smooth=2.0) > 0
        t = blobs(shape, 2, seed=seed + 10, smooth=2.0) > 0
        if seed == 2:
            t = p.copy()  # equal masks: every directed distance 0
        cp = np.argwhere(foreground_edges(p)) * np.asarray(spacing)
        ct = np.argwhere(foreground_edges(t)) * np.asarray(spacing)
        pair = np.sqrt(((cp[:, None, :] - ct[None, :, :]) ** 2).sum(-1))
        for q in (0.0, 50.0, 95.0, 100.0):
            calls.clear()
            got = boundary._hd_case(torch.from_numpy(p), torch.from_numpy(t), spacing, q)
            assert len(calls) == 2  # the dense path ran
            brute = max(np.percentile(pair.min(1), q), np.percentile(pair.min(0), q))
            kd = hausdorff_distance(p.astype(np.int64), t.astype(np.int64), spacing=spacing, percentile=q)
            assert got == pytest.approx(brute, rel=1e-12, abs=1e-12)
            assert got == pytest.approx(kd, rel=1e-12, abs=1e-12)


def test_cucim_distances_call_monai_as_its_cucim_path_accepts(monkeypatch):
    """``_cucim_distances`` calls MONAI's ``distance_transform_edt`` with float32 input and without
    ``float64_distances`` (``float64_distances=True`` failed on an H200 with cuCIM 26.10: cuCIM does not pass it on to
    its PBA kernels, which expect a float32 output: ``distances array must have dtype float32``), and returns the
    float32 distances on the input's device (float64 at the edge voxels only, in ``_directed_distances``)."""
    import monai.transforms.utils as mtu

    from monai_unc.metrics import boundary

    seen = []

    def fake(img, sampling=None, **kwargs):
        seen.append((img.dtype, tuple(img.shape), kwargs))
        d = ndimage.distance_transform_edt(img[0].numpy() != 0, sampling=sampling)
        return torch.from_numpy(d.astype(np.float32))[None]

    monkeypatch.setattr(mtu, "distance_transform_edt", fake)
    feats = torch.from_numpy(blobs((9, 10, 11), 2, seed=1) > 0)
    got = boundary._cucim_distances(feats, (2.0, 1.0, 0.5))
    assert seen == [(torch.float32, (1, 9, 10, 11), {})]
    assert got.dtype == torch.float32 and got.device == feats.device
    ref = ndimage.distance_transform_edt(~feats.numpy(), sampling=(2.0, 1.0, 0.5))
    np.testing.assert_allclose(got.numpy(), ref, rtol=2e-7)


def test_hd95_multiclass_uses_foreground_and_batches():
    p = blobs((20, 22), 3, seed=1)
    t = blobs((20, 22), 3, seed=2)
    assert hd95(p, t) == pytest.approx(hd95(p > 0, t > 0))
    batch = hd95(np.stack([p, t]), np.stack([t, t]), spatial_dims=2)
    assert batch.shape == (2,) and batch[1] == 0.0 and batch[0] == pytest.approx(hd95(p, t))
    tb = hd95(torch.from_numpy(np.stack([p, t])), torch.from_numpy(np.stack([t, t])), spatial_dims=2)
    assert isinstance(tb, torch.Tensor) and torch.allclose(tb, torch.from_numpy(batch))


def test_hd95_degenerate():
    z = np.zeros((6, 6), int)
    m = z.copy()
    m[2:4, 2:4] = 1
    assert hd95(m, m) == 0.0
    with pytest.warns(UserWarning, match="both empty"):
        assert np.isnan(hd95(z, z))
    with pytest.warns(UserWarning, match="infinite"):
        assert np.isinf(hd95(m, z))


@pytest.mark.parametrize("empty", ["pred", "target"])
def test_hd95_one_empty_foreground_is_inf_where_monai_interpolates_nan(empty):
    """The documented difference from MONAI (found by hostile testing: the docstring said MONAI returned the same
    values): ``inf`` at every percentile here; MONAI ``inf`` at the maximum, NaN below it (``inf - inf``)."""
    a = np.zeros((10, 10, 10), np.int64)
    a[3:7, 3:7, 3:7] = 1
    p, t = (np.zeros_like(a), a) if empty == "pred" else (a, np.zeros_like(a))
    for q in (0.0, 50.0, 95.0, 100.0):
        with pytest.warns(UserWarning):
            assert math.isinf(float(hd95(p, t, percentile=q)[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pt, tt = (torch.from_numpy(x)[None, None].float() for x in (p, t))
        assert math.isinf(float(compute_hausdorff_distance(pt, tt, include_background=True, percentile=None)))
        assert math.isnan(float(compute_hausdorff_distance(pt, tt, include_background=True, percentile=95)))


def test_cucim_serves_2d_and_3d_cases_only(monkeypatch):
    """Found by the review of the GPU paths: with cuCIM installed, ``backend="auto"`` sent a 1D CUDA case to MONAI's
    ``distance_transform_edt``, which takes 2D and 3D images only ("Distance transform is only supported for 2D and
    3D images"); such cases take the CPU backends, and ``backend="cucim"`` refuses them in one line."""
    from monai_unc.metrics import boundary

    monkeypatch.setattr(boundary, "_has_cucim", lambda: True)
    assert [boundary._resolve_backend("auto", True, n) for n in (2, 3)] == ["cucim", "cucim"]
    assert boundary._resolve_backend("auto", True, 1) in ("edt", "scipy")
    assert boundary._resolve_backend("auto", False, 3) in ("edt", "scipy")
    features = torch.tensor([False, True, False])  # a CPU tensor stands in for a CUDA one: refused before any use
    monkeypatch.setattr(boundary, "_resolve_backend", lambda backend, on_cuda, ndim: "cucim")
    with pytest.raises(ValueError, match="backend='cucim' takes 2 or 3 spatial dimensions, got 1"):
        boundary._distance_to_features(features, (1.0,), "cucim")
