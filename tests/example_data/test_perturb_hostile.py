"""Hostile input for the image perturbations (data/perturb.py): inputs never modified in place, reproducibility
from the seed, severity monotone as documented, exact copies at severity 0, and bad arguments refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from monai.data import MetaTensor

from monai_unc.data.perturbations import FIXED_PERTURBATIONS, PERTURBATIONS, fixed_perturbation, perturb


def image(shape=(1, 10, 12, 9), seed=0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.1, 1.0, size=shape).astype(dtype)


@pytest.mark.parametrize("kind", PERTURBATIONS)
def test_input_is_never_modified_numpy_and_torch(kind):
    x = image()
    keep = x.copy()
    perturb(x, kind, 3.0, seed=1)
    np.testing.assert_array_equal(x, keep)
    t = torch.from_numpy(x.copy())
    perturb(t, kind, 3.0, seed=1)
    np.testing.assert_array_equal(t.numpy(), keep)


@pytest.mark.parametrize("kind", PERTURBATIONS)
def test_severity_is_monotone_for_a_fixed_seed(kind):
    x = image(shape=(1, 14, 14, 14))
    change = [float(np.abs(perturb(x, kind, s, seed=5) - x).mean()) for s in (0.0, 0.5, 1.5, 2.5, 3.5, 5.0)]
    assert change[0] == 0.0
    assert all(b >= a for a, b in zip(change, change[1:])), change


@pytest.mark.parametrize("kind", ["noise", "bias_field", "contrast"])
def test_reproducible_from_the_seed_and_different_across_seeds(kind):
    x = image()
    np.testing.assert_array_equal(perturb(x, kind, 2.0, seed=7), perturb(x, kind, 2.0, seed=np.int64(7)))
    if kind != "contrast":  # contrast draws one coin (the gamma's direction): two seeds may agree
        assert not np.array_equal(perturb(x, kind, 2.0, seed=7), perturb(x, kind, 2.0, seed=8))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("kind", PERTURBATIONS)
def test_severity_zero_is_an_exact_copy_in_the_input_precision(kind, dtype):
    """Regression: a float64 image came back from severity 0 rounded to float32 (errors ~3e-8), not unchanged."""
    x = image(dtype=dtype)
    y = perturb(x, kind, 0.0, seed=1)
    assert y.dtype == dtype and y is not x and not np.shares_memory(x, y)
    np.testing.assert_array_equal(y, x)
    t = torch.from_numpy(x)
    yt = perturb(t, kind, 0, seed=1)
    assert yt.dtype == t.dtype and yt.data_ptr() != t.data_ptr()
    assert torch.equal(yt, t)


def test_integer_image_gives_float32():
    x = (image() * 100).astype(np.int16)
    assert perturb(x, "noise", 0.0).dtype == np.float32
    assert perturb(x, "noise", 1.0).dtype == np.float32


@pytest.mark.parametrize("seed", [-1, 1.5, "1", None, True])
def test_bad_seed_is_refused_by_name(seed):
    """Regression: a negative seed raised numpy's "expected non-negative integer", 1.5 a SeedSequence TypeError."""
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        perturb(image(), "noise", 1.0, seed=seed)


def test_float64_beyond_float32_range_is_refused():
    x = image(dtype=np.float64)
    x[0, 0, 0, 0] = 1e300
    with pytest.raises(ValueError, match="image contains 1 non-finite"):
        perturb(x, "blur", 1.0)


@pytest.mark.parametrize("severity", [-0.1, 5.01, float("nan"), float("inf")])
def test_severity_out_of_range(severity):
    with pytest.raises(ValueError, match="severity must be in"):
        perturb(image(), "noise", severity)


def test_bad_images():
    with pytest.raises(ValueError, match="image contains 1 non-finite"):
        x = image()
        x[0, 1, 1, 1] = np.nan
        perturb(x, "noise", 1.0)
    with pytest.raises(ValueError, match="channel-first"):
        perturb(image()[0, 0], "noise", 1.0)
    with pytest.raises(ValueError, match="image is empty"):
        perturb(np.zeros((1, 0, 3, 3), np.float32), "noise", 1.0)
    with pytest.raises(TypeError, match="real-valued"):
        perturb(np.zeros((1, 3, 3, 3), bool), "noise", 1.0)


# ------------------------------------------------------------------------------------------- fixed perturbations


@pytest.mark.parametrize("kind", FIXED_PERTURBATIONS)
def test_fixed_perturbation_keeps_the_input_and_is_reproducible(kind):
    x = image()[0].astype(np.float64)
    keep = x.copy()
    value = {"identity": 0.0, "gamma_noise": 0.9, "noise": 0.05, "gamma": 1.3, "bias": 0.5, "blur": 1.0,
             "lowres": 2}[kind]
    a = fixed_perturbation(x, kind, value, np.random.default_rng(3))
    b = fixed_perturbation(x, kind, value, np.random.default_rng(3))
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and a.shape == x.shape and 0.0 <= a.min() and a.max() <= 1.0


@pytest.mark.parametrize("kind, value", [
    ("lowres", -2), ("lowres", 0), ("lowres", 2.7), ("lowres", 0.5),
    ("blur", -1.0), ("noise", -0.1), ("gamma", 0.0), ("gamma", -1.0), ("gamma_noise", -0.5),
    ("noise", float("nan")), ("bias", float("inf")), ("gamma", True),
])
def test_fixed_perturbation_refuses_a_value_out_of_range(kind, value):
    """Regression: ``lowres`` with -2 reversed the slices (a mirrored image, silently), 2.7 was truncated to 2,
    0 raised a bare "slice step cannot be zero"; negative noise / blur and non-positive gamma were accepted."""
    with pytest.raises(ValueError, match="value"):
        fixed_perturbation(image()[0], kind, value, np.random.default_rng(0))


def test_fixed_perturbation_refuses_bad_image_kind_and_rng():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"image must be a finite, non-empty \(X, Y, Z\)"):
        fixed_perturbation(image()[0, 0], "bias", 0.5, rng)
    with pytest.raises(ValueError, match="image must be"):
        fixed_perturbation(torch.zeros(3, 3, 3), "gamma", 2.0, rng)
    bad = image()[0]
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="image must be"):
        fixed_perturbation(bad, "noise", 0.1, rng)
    with pytest.raises(ValueError, match="kind must be one of"):
        fixed_perturbation(image()[0], "warp", 1.0, rng)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        fixed_perturbation(image()[0], "noise", 0.1, 0)


@pytest.mark.parametrize("n, step", [(91, 4), (20, 2), (20, 3), (21, 3), (91, 3)])
def test_lowres_keeps_every_kept_slice_in_place(n, step):
    """Regression: ``lowres`` stretched the kept slices over the whole z range (``zoom``), so unless ``step``
    divided ``n - 1`` the image moved against its label (the full demo's ``cal_lowres400``, 91 slices: the top slab
    shifted by 2 voxels). Kept slices must stay unchanged and a linear z ramp be reproduced up to the last kept one."""
    z = np.linspace(0.0, 1.0, n)
    x = np.broadcast_to(z, (3, 2, n)).copy()
    x[1] = np.random.default_rng(0).uniform(size=(2, n))  # arbitrary slices too
    y = fixed_perturbation(x, "lowres", step, np.random.default_rng(0))
    kept = np.arange(0, n, step)
    np.testing.assert_allclose(y[:, :, kept], x[:, :, kept], atol=1e-6)
    np.testing.assert_allclose(y[0, :, : kept[-1] + 1], x[0, :, : kept[-1] + 1], atol=1e-6)
    np.testing.assert_allclose(y[:, :, kept[-1]:], np.repeat(x[:, :, kept[-1:]], n - kept[-1], axis=2), atol=1e-6)


# ------------------------------------------------------------------------- geometry and documented input range


@pytest.mark.parametrize("severity", [0.0, 2.0])
@pytest.mark.parametrize("kind", PERTURBATIONS)
def test_a_metatensor_keeps_its_affine_and_meta(kind, severity):
    """Regression: a MONAI MetaTensor (what ``LoadImage`` returns) came back as a plain tensor, its affine dropped,
    so an image saved from it (``SaveImage``) had the identity geometry instead of the input's oblique one."""
    affine = torch.tensor([[0.0, 1.2, 0.0, 10.0], [0.76, 0.0, -0.89, -20.0], [0.24, 0.0, 2.87, 30.0],
                           [0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    x = MetaTensor(torch.from_numpy(image()), affine=affine, meta={"filename_or_obj": "case.nii.gz"})
    y = perturb(x, kind, severity, seed=1)
    assert isinstance(y, MetaTensor) and y.shape == x.shape and y.dtype == x.dtype
    torch.testing.assert_close(y.affine, affine, rtol=0.0, atol=0.0)
    assert y.meta["filename_or_obj"] == "case.nii.gz"
    np.testing.assert_array_equal(y.as_tensor().numpy(), perturb(image(), kind, severity, seed=1))
    y.affine[0, 3] = 99.0  # the output's meta is its own
    assert float(x.affine[0, 3]) == 10.0


@pytest.mark.parametrize("kind", FIXED_PERTURBATIONS)
def test_fixed_perturbation_refuses_intensities_outside_0_1(kind):
    """Regression: a negative intensity (an image not normalized to [0, 1] as documented) gave NaN voxels under
    ``gamma`` / ``gamma_noise`` (``x ** 0.5``) with only numpy's RuntimeWarning, and values above 1 were silently
    clipped by every kind; the image is now refused by name."""
    value = {"identity": 0.0, "gamma_noise": 0.5, "noise": 0.05, "gamma": 0.7, "bias": 0.5, "blur": 1.0,
             "lowres": 2}[kind]
    for bad in (image()[0] - 0.5, image()[0] * 2.0):
        with pytest.raises(ValueError, match=r"image must hold intensities in \[0, 1\]"):
            fixed_perturbation(bad, kind, value, np.random.default_rng(0))
    edge = image()[0]
    edge[0, 0, 0], edge[0, 0, 1] = 0.0, 1.0  # the ends of the range are accepted
    assert np.isfinite(fixed_perturbation(edge, kind, value, np.random.default_rng(0))).all()



@pytest.mark.parametrize("shape", [(1, 12, 12, 1), (1, 1, 12, 12), (2, 12, 1, 10), (1, 12, 1), (2, 1, 1, 9),
                                   (1, 1, 1, 1)])
def test_blur_of_a_volume_with_single_voxel_axes_keeps_its_intensity(shape):
    """Regression: ``blur`` smoothed along an axis of length 1 too (a single slice stored as ``(X, Y, 1)``, as
    NIfTI holds 2D images), where MONAI's zero padding leaves only the kernel's centre weight: a constant image of
    0.8 came back at about 0.16 everywhere (sigma 2), an intensity drop rather than a blur. Such axes are now left
    alone: the volume is blurred as the image without them is."""
    x = np.full(shape, 0.8, np.float32)
    middle = tuple(n // 2 for n in shape[1:])
    x[(slice(None), *middle)] = 1.0  # one bright voxel
    y = perturb(x, "blur", 5.0, seed=0)  # sigma 2 voxels
    assert y.shape == x.shape and y.dtype == x.dtype
    flat = [n for n in shape[1:] if n > 1]
    if not flat:  # nothing to blur along
        np.testing.assert_array_equal(y, x)
        return
    assert 0.7 < float(y[(0, *middle)]) < 1.0  # blurred, not darkened (zero padding on the other axes: < 0.8)
    if len(flat) == 2:  # the same as the 2D image without the axis of length 1
        np.testing.assert_allclose(y, perturb(x.reshape(shape[0], *flat), "blur", 5.0, seed=0).reshape(shape),
                                   atol=1e-6)
