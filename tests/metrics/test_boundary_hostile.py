"""``monai_unc.metrics.boundary`` on hostile input: unbatched input (one value per case), a bool spacing; the dense
(cuCIM) HD95 path emulated on CPU tensors (MONAI's ``distance_transform_edt`` serves CPU tensors with scipy, so the real
``_cucim_distances`` runs; only the backend choice is forced to ``"cucim"``)."""

import numpy as np
import pytest
import torch

from monai_unc.metrics import boundary
from monai_unc.metrics.boundary import hausdorff_distance, hd95
from tests._cases import blob_case as _blob_case


def test_hd95_returns_the_leading_shape_or_one_value():
    _, p, t = _blob_case()
    single = hd95(p, t)
    assert isinstance(single, np.ndarray) and single.shape == (1,)
    np.testing.assert_array_equal(single, hd95(p[None], t[None], spatial_dims=2))


@pytest.mark.parametrize("spacing", [True, np.bool_(True), (True, 1.0), np.array([True, True])])
def test_the_distance_functions_refuse_a_bool_spacing(spacing):
    """``spacing=True`` was read as 1 mm (the metric classes refuse it)."""
    from monai_unc.metrics.boundary import distance_to_boundary, distance_to_mask, hausdorff_distance

    _, p, t = _blob_case()
    for call in (lambda: hd95(p[None], t[None], spacing=spacing),
                 lambda: hausdorff_distance(p > 0, t > 0, spacing=spacing),
                 lambda: distance_to_mask(p, spacing=spacing),
                 lambda: distance_to_boundary(p, spacing=spacing)):
        with pytest.raises(ValueError, match="spacing must be a number"):
            call()


# ---------------------------------------------------------------------------------------------------------------
# hostile testing of the boundary functions (dtypes, flags, exactness, extreme spacings)
# ---------------------------------------------------------------------------------------------------------------
def _functions():
    import torch

    from monai_unc.metrics.boundary import (
        distance_to_boundary,
        distance_to_mask,
        foreground_edges,
        hausdorff_distance,
        label_boundary,
    )

    return {"distance_to_mask": distance_to_mask, "distance_to_boundary": distance_to_boundary,
            "label_boundary": label_boundary, "foreground_edges": foreground_edges,
            "hd95": lambda m: hd95(m, m.detach().flip(-1)),
            "hausdorff_distance": lambda m: torch.tensor(hausdorff_distance(m, m.detach().flip(-1), percentile=80))}


@pytest.mark.parametrize("name", ["distance_to_mask", "distance_to_boundary", "label_boundary", "foreground_edges",
                                  "hd95", "hausdorff_distance"])
def test_label_maps_that_require_grad_or_are_bfloat16(name):
    """Found by hostile testing: a tensor that requires grad raised torch's "Can't call numpy() on Tensor that
    requires grad", a bfloat16 one "Got unsupported ScalarType BFloat16" (``.numpy()``); both give the values of the
    plain float32 map (the spatial metrics already detached their inputs)."""
    import torch

    fn = _functions()[name]
    _, p, _ = _blob_case()
    plain = torch.from_numpy(p).float()
    expected = fn(plain)
    for m in (plain.clone().requires_grad_(), plain.bfloat16()):
        got = fn(m)
        assert isinstance(got, torch.Tensor) and not got.requires_grad
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_the_options_of_hd95_are_type_checked():
    """Found by hostile testing: ``percentile=True`` was the 1st percentile, ``percentile="95"`` the 95th, and
    ``hausdorff_distance(warn="no")`` warned; a text spacing was read as a number."""
    from monai_unc.metrics.boundary import distance_to_mask, hausdorff_distance

    _, p, t = _blob_case()
    for bad in (True, "95", None):
        with pytest.raises(TypeError, match="percentile must be a real number"):
            hd95(p, t, percentile=bad)
        with pytest.raises(TypeError, match="percentile must be a real number"):
            hausdorff_distance(p, t, percentile=bad)
    with pytest.raises(ValueError, match="percentile must lie in"):
        hd95(p, t, percentile=float("nan"))
    with pytest.raises(TypeError, match="warn must be True or False"):
        hausdorff_distance(p, 0 * t, warn="no")
    assert hd95(p, t, percentile=np.float32(95.0)) == hd95(p, t)
    for spacing in ("2", ["0.5", "2"], np.array(["1", "1"])):
        with pytest.raises(ValueError, match="spacing must be a number"):
            distance_to_mask(p, spacing=spacing)
        with pytest.raises(ValueError, match="spacing must be a number"):
            hd95(p, t, spacing=spacing)


def test_hd95_percentile_0_is_documented_against_monai():
    """Found by hostile testing: the docs said hd95 follows MONAI for any percentile in [0, 100], but MONAI reads
    ``percentile=0`` as unset (the maximum) where hd95 takes the 0th percentile; the docstring says so."""
    from monai_unc.metrics.boundary import hausdorff_distance

    p = np.zeros((8, 8), int)
    t = np.zeros((8, 8), int)
    p[2:5, 2:5] = 1
    t[2:7, 2:7] = 1
    assert float(hd95(p, t, percentile=0)[0]) == 0.0 < float(hd95(p, t, percentile=100)[0])
    for fn in (hd95, hausdorff_distance):
        assert "percentile=0" in " ".join(fn.__doc__.split()), fn.__name__


@pytest.mark.parametrize("spacing, exact", [
    ((3.0, 0.7, 0.7), ("3", "7/10", "7/10")),  # the fractions the spacings name (lattice unit 1/10)
    ((0.7, 0.7, 3.0), ("7/10", "7/10", "3")),
    ((1.2, 0.6, 2.5), ("6/5", "3/5", "5/2")),
    ((0.8, 0.8, 0.8), (0.8, 0.8, 0.8)),  # isotropic: the float itself is the unit
    ((0.5, 0.25, 1.5), ("1/2", "1/4", "3/2")),
])
def test_exact_within_rounds_distances_that_are_floats_correctly(spacing, exact):
    """Found by hostile testing: on the edt package's integer lattice a voxel exactly 0.7 mm away came out as
    0.7000000000000001 (``sqrt(D) * float(1/10)`` rounds twice), beyond a ``d <= 0.7`` decision; ``sqrt(D) * p / q``
    gives every distance whose exact value is rational (a perfect square ``D``) correctly rounded."""
    import math
    from fractions import Fraction

    from monai_unc.metrics.boundary import available_backends, distance_to_mask

    if "edt" not in available_backends():
        pytest.skip("the edt package is not installed")
    m = np.zeros((13, 13, 13), bool)
    m[0, 0, 0] = True
    d = distance_to_mask(m, spacing=spacing, backend="edt", exact_within=12.0)
    fr = [Fraction(s) for s in exact]
    checked = 0
    for idx in np.ndindex(m.shape):
        sq = sum((k * f) ** 2 for k, f in zip(idx, fr))
        root_n, root_d = math.isqrt(sq.numerator), math.isqrt(sq.denominator)
        if root_n**2 == sq.numerator and root_d**2 == sq.denominator and sq <= 144:
            assert d[idx] == float(Fraction(root_n, root_d)), (idx, d[idx])
            checked += 1
    assert checked > 30


def test_exact_within_with_the_cucim_backend_runs_on_the_cpu(monkeypatch):
    """Found by hostile testing (read in the code): ``distance_to_mask(cuda_tensor, backend="cucim", exact_within=r)``
    raised "needs a CUDA tensor" (the exact path checked the backend as if the input were on the CPU); with a CUDA
    input and cuCIM it is computed as ``"auto"`` computes it (cuCIM's float32 is not exact)."""
    from monai_unc.metrics import boundary

    _, p, _ = _blob_case()
    mask = p > 0
    monkeypatch.setattr(boundary, "_has_cucim", lambda: True)
    expected = boundary.distance_to_mask(mask, spacing=(0.7, 3.0), exact_within=10.0)
    got = boundary._exact_distance_to_features(mask, (0.7, 3.0), "cucim", 10.0, on_cuda=True)
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="backend='cucim' needs a CUDA tensor"):  # a CPU input: as without it
        boundary.distance_to_mask(mask, spacing=(0.7, 3.0), backend="cucim", exact_within=10.0)


@pytest.mark.parametrize("spacing", [(1e20, 1.0), (1e19, 1e19), (1e-25, 1e-25), (1e-20, 3e-20), (2.0**41, 1.0)])
def test_extreme_spacings_give_scipys_distances(spacing):
    """Found by hostile testing: the edt package squares the spacings in float32, so spacings from about 1e19 mm gave
    inf / NaN distances and below about 1e-23 mm zeros; such spacings go to scipy's float64 transform."""
    from scipy import ndimage

    from monai_unc.metrics.boundary import BACKENDS, available_backends, distance_to_boundary, distance_to_mask

    m = np.zeros((4, 5), bool)
    m[1, 2] = True
    ref = ndimage.distance_transform_edt(~m, sampling=spacing)
    for backend in [b for b in BACKENDS if b in ("auto", *available_backends()) and b != "cucim"]:
        np.testing.assert_allclose(distance_to_mask(m, spacing, backend=backend), ref, rtol=1e-7)
        np.testing.assert_allclose(distance_to_mask(m, spacing, backend=backend, exact_within=1e-30), ref, rtol=1e-7)
        np.testing.assert_allclose(distance_to_boundary(m, spacing, backend=backend),
                                   ndimage.distance_transform_edt(~_boundary_of(m), sampling=spacing), rtol=1e-7)


def _boundary_of(m):
    from monai_unc.metrics.boundary import label_boundary

    return label_boundary(m)


@pytest.mark.parametrize("which", ["hausdorff_distance", "distance_to_mask"])
def test_one_case_functions_do_not_ask_for_spatial_dims_they_do_not_take(which):
    """Regression: a (1, X, Y, Z) MONAI image given to ``hausdorff_distance`` or ``distance_to_mask`` (one case, no
    ``spatial_dims`` argument) was told to "pass spatial_dims=2 or 3", which then raised a TypeError. The message now
    says to drop the channel axis, and doing so works; the batched functions keep pointing to ``spatial_dims``."""
    from monai_unc.metrics.boundary import distance_to_mask, hausdorff_distance

    m = np.zeros((1, 4, 4, 4), np.uint8)
    m[0, 1:3, 1:3, 1:3] = 1
    fn = {"hausdorff_distance": lambda x: hausdorff_distance(x, x), "distance_to_mask": distance_to_mask}[which]
    with pytest.raises(ValueError, match=rf"{which} takes one case of 1-3 spatial axes: drop the channel") as err:
        fn(m)
    assert "spatial_dims" not in str(err.value)
    fn(m[0])  # what the message says works
    with pytest.raises(ValueError, match="pass spatial_dims=2 or 3"):
        hd95(m, m)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8])
def test_dense_hd95_of_integer_masks_equals_the_kd_tree(monkeypatch, dtype):
    """``_hd_case`` takes 0/1 masks of any dtype on its KD-tree path; on the dense path an integer edge mask was
    used as an index (``dense[src]`` gathers rows) and inverted bitwise (``~1 = -2``, every voxel a feature), so
    the distances were wrong without an error (3.61 / 4.24 mm against 1.41 mm on a 3 x 1 x 4 case)."""
    monkeypatch.setattr(boundary, "_resolve_backend", lambda backend, on_cuda, ndim: "cucim")
    rng = np.random.default_rng(0)
    p, t = rng.random((3, 1, 4)) > 0.6, rng.random((3, 1, 4)) > 0.6
    for q in (0.0, 50.0, 95.0, 100.0):
        want = hausdorff_distance(p.astype(np.int64), t.astype(np.int64), percentile=q)
        got = boundary._hd_case(torch.from_numpy(p).to(dtype), torch.from_numpy(t).to(dtype), (1.0, 1.0, 1.0), q)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_dense_hd95_of_a_device_mask_and_a_host_mask_runs_the_kd_tree(monkeypatch):
    """A CUDA ``pred`` with a CPU ``target`` (which ``hd95`` takes: the KD-tree copies both to the host) reached the
    dense path with a numpy target: ``AttributeError: 'numpy.ndarray' object has no attribute 'to'``. Emulated here
    with a CPU tensor and a numpy array; so is an explicit ``backend`` other than cuCIM (BUC's ``backend="edt"``)."""
    monkeypatch.setattr(boundary, "_resolve_backend",
                        lambda backend, on_cuda, ndim: "cucim" if backend in ("auto", "cucim") else backend)
    rng = np.random.default_rng(1)
    p, t = rng.random((6, 7, 5)) > 0.6, rng.random((6, 7, 5)) > 0.6
    want = hausdorff_distance(p, t)
    assert boundary._hd_case(torch.from_numpy(p), t, (1.0, 1.0, 1.0), 95.0) == pytest.approx(want, rel=1e-12)
    assert boundary._hd_case(torch.from_numpy(p), torch.from_numpy(t), (1.0, 1.0, 1.0), 95.0,
                             backend="edt") == want


@pytest.mark.parametrize("bad", ["nope", None, 1, "CUCIM"])
def test_hausdorff_distance_refuses_an_unknown_backend(bad):
    """``hausdorff_distance(backend=)`` (BUC's default width follows BUC's ``backend``) names the argument."""
    a = np.zeros((6, 6), dtype=np.int64)
    a[1:4, 1:4] = 1
    with pytest.raises(ValueError, match="backend"):
        hausdorff_distance(a, a, backend=bad)
    assert hausdorff_distance(a, a, backend="scipy") == 0.0


@pytest.mark.parametrize("bad", [True, np.True_, np.False_])
def test_lattice_unit_refuses_a_boolean_reach(bad):
    """Regression: ``lattice_unit(spacing, True)`` raised, but numpy's ``np.True_`` was read as a reach of 1 mm (and
    ``np.False_`` as 0), where ``distance_to_mask(..., exact_within=np.True_)`` raises."""
    with pytest.raises(ValueError, match="exact_within"):
        boundary.lattice_unit((0.8, 0.8, 3.0), bad)
    assert boundary.lattice_unit((0.8, 0.8, 3.0), np.float64(1.0)) == boundary.lattice_unit((0.8, 0.8, 3.0), 1.0)
