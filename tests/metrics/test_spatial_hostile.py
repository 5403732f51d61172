"""Hostile and degenerate input to BUC, BA-ECE and SPACE (``monai_unc.metrics.spatial``): the MONAI wrappers
when every case is NaN, and one value per case whatever the input shape."""

import math
import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics.spatial import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    SpatialCalibrationErrorMetric,
    _buc_case,
    _gaussian_torch,
    boundary_aware_ece,
    boundary_uncertainty_concentration,
    spatial_calibration_error,
)
from tests._cases import blob_case as _blob_case


# ---------------------------------------------------------------------------------------------------------------
# item 3: MONAI wrappers returned 0.0 ("perfect") when every case is NaN
# ---------------------------------------------------------------------------------------------------------------
def _no_boundary_batch():
    u = torch.rand(2, 1, 8, 9, generator=torch.Generator().manual_seed(0))
    empty = torch.zeros(2, 1, 8, 9)
    some = empty.clone()
    some[:, :, 2:6, 3:7] = 1
    return u, empty, some


@pytest.mark.parametrize("get_not_nans", [False, True])
def test_buc_metric_with_every_case_nan_is_nan_not_zero(get_not_nans):
    u, empty, some = _no_boundary_batch()
    metric = BoundaryUncertaintyConcentrationMetric(get_not_nans=get_not_nans)
    with pytest.warns(UserWarning, match="no boundary"):
        metric(y_pred=empty, y=some, uncertainty=u)  # an empty prediction has no boundary: BUC is NaN per case
    with pytest.warns(UserWarning, match="no valid"):
        out = metric.aggregate()
    value, not_nans = out if get_not_nans else (out, None)
    assert math.isnan(float(value))
    if get_not_nans:
        assert int(not_nans) == 0
    per_case = metric.aggregate("none")
    assert torch.isnan(per_case[0] if get_not_nans else per_case).all()  # the per-case values stay NaN


def test_baece_metric_with_every_case_nan_is_nan_not_zero():
    u, empty, some = _no_boundary_batch()
    metric = BoundaryAwareECEMetric(get_not_nans=True)
    with pytest.warns(UserWarning, match="no boundary"):
        metric(y_pred=some, y=empty, uncertainty=u)  # an empty target has no boundary: BA-ECE is NaN
    with pytest.warns(UserWarning, match="no valid"):
        value, not_nans = metric.aggregate()
    assert math.isnan(float(value)) and int(not_nans) == 0
    with pytest.warns(UserWarning, match="no valid"):
        assert torch.isnan(metric.aggregate("sum")[0]).all()  # MONAI's sum over no valid value is 0 as well


def test_baece_metric_mixed_cases_average_the_valid_ones():
    u, empty, some = _no_boundary_batch()
    target = torch.stack([some[0], empty[1]])
    metric = BoundaryAwareECEMetric(get_not_nans=True)
    with pytest.warns(UserWarning):
        metric(y_pred=some, y=target, uncertainty=u)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one valid case: no warning, its value
        value, not_nans = metric.aggregate()
    expected = boundary_aware_ece(u[:1], some[:1], some[:1])
    assert float(value) == pytest.approx(float(expected[0]), rel=1e-6) and int(not_nans) == 1


def test_space_metric_is_never_nan_for_valid_input():
    """SPACE is defined for empty masks; its wrapper shares the NaN-aware reduction (tested above)."""
    u, empty, some = _no_boundary_batch()
    metric = SpatialCalibrationErrorMetric()
    metric(y_pred=empty, y=empty, uncertainty=u)
    assert np.isfinite(float(metric.aggregate()))


# ---------------------------------------------------------------------------------------------------------------
# issue 16: per-case results are (B,) whatever the input shape
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error])
def test_spatial_metrics_return_one_value_per_case_for_an_unbatched_map(fn):
    u, p, t = _blob_case()
    single = fn(u, p, t)
    batched = fn(u[None, None], p[None], t[None])
    assert isinstance(single, np.ndarray) and single.shape == (1,) and single.dtype == np.float64
    np.testing.assert_array_equal(single, batched)
    ts = fn(torch.from_numpy(u), torch.from_numpy(p), torch.from_numpy(t))
    assert isinstance(ts, torch.Tensor) and ts.shape == (1,)


def test_spatial_extras_follow_the_case_axis():
    u, p, t = _blob_case()
    _, bands = boundary_aware_ece(u, p, t, n_bands=4, return_bands=True)
    assert bands["uncertainty"].shape == (1, 4) and bands["edges"].shape == (1, 5)
    _, smoothed = spatial_calibration_error(u, p, t, return_map=True)
    assert smoothed.shape == (1, 1, *u.shape)


@pytest.mark.parametrize("spacing", [True, np.bool_(True), (True, 1.0), [1.0, False], np.array([True, True]),
                                     torch.tensor([True, True]), [[True, 1.0]]])
@pytest.mark.parametrize("fn", [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error])
def test_the_functions_refuse_a_bool_spacing_as_the_metric_classes_do(fn, spacing):
    """``spacing=True`` was read as 1 mm by the plain functions (the metric classes refuse it)."""
    u, p, t = _blob_case()
    with pytest.raises(ValueError, match="spacing must be a number"):
        fn(u[None], p[None], t[None], spacing=spacing)


@pytest.mark.parametrize("module, names", [
    ("monai_unc.metrics.spatial", ("BoundaryUncertaintyConcentrationMetric", "BoundaryAwareECEMetric",
                                   "SpatialCalibrationErrorMetric")),
    ("monai_unc.metrics.ambiguity", ("NCCMetric", "GEDMetric")),
    ("monai_unc.metrics.qu_brats_score", ("QUBraTSMetric",)),
])
def test_the_metric_classes_keep_their_old_module_paths(module, names):
    """The MONAI classes moved to ``*_metric`` modules: ``from monai_unc.metrics.spatial import *`` (and of the other
    two) no longer gave them (NameError in code that ran before the move); the star import, an attribute access and
    an object pickled under the old path (``monai_unc.metrics.spatial.BoundaryAwareECEMetric``) still give them."""
    import importlib
    import pickle

    namespace: dict = {}
    exec(f"from {module} import *", namespace)  # noqa: S102 - the star import a user writes
    mod = importlib.import_module(module)
    for name in names:
        cls = getattr(importlib.import_module("monai_unc.metrics"), name)
        assert namespace[name] is cls and getattr(mod, name) is cls
        # a pickle of the previous release names the class by its old module
        new = pickle.dumps(cls(), protocol=2)  # protocol 2 names the class as the text "module\nname\n"
        assert f"{cls.__module__}\n{name}\n".encode() in new
        old = new.replace(f"{cls.__module__}\n{name}\n".encode(), f"{module}\n{name}\n".encode())
        assert type(pickle.loads(old)) is cls


@pytest.mark.parametrize("fn", [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error])
def test_inputs_that_require_grad_give_the_detached_values(fn):
    """Found by hostile testing: a map computed in a training step (``requires_grad``) raised "Can't call numpy()
    on Tensor that requires grad"; every other metric family takes it. A soft one-channel prediction too."""
    g = torch.Generator().manual_seed(3)
    u = torch.rand(2, 1, 10, 11, generator=g)
    pred = torch.zeros(2, 1, 10, 11)
    pred[:, :, 2:7, 3:8] = 1
    target = torch.roll(pred, 1, dims=-1)
    expected = fn(u, pred, target, spacing=(0.8, 1.5))
    got = fn(u.clone().requires_grad_(), pred.clone().requires_grad_(), target, spacing=(0.8, 1.5))
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


# ---------------------------------------------------------------------------------------------------------------
# hostile testing of the spatial metrics (dtypes, options, extreme values, decollated lists)
# ---------------------------------------------------------------------------------------------------------------
def _square_case(size=16):
    target = torch.zeros(1, 1, size, size, dtype=torch.long)
    target[..., 4:12, 4:12] = 1
    pred = target.clone()
    pred[..., 4:12, 12] = 1
    u = 0.3 * torch.rand(1, 1, size, size, generator=torch.Generator().manual_seed(0))
    return u, pred, target


_FUNCTIONS_AND_CLASSES = [
    (boundary_aware_ece, BoundaryAwareECEMetric),
    (spatial_calibration_error, SpatialCalibrationErrorMetric),
    (lambda *a, **k: boundary_uncertainty_concentration(*a, width=1.0, **k),
     lambda **k: BoundaryUncertaintyConcentrationMetric(width=1.0, **k)),
]


@pytest.mark.parametrize("fn, cls", _FUNCTIONS_AND_CLASSES)
def test_the_metric_classes_do_not_round_the_prediction_to_the_uncertainty_dtype(fn, cls):
    """Found by hostile testing: the classes packed ``cat([uncertainty, pred])`` in the uncertainty's dtype, so a
    float16 map rounded float32 probabilities 0.5001 / 0.4999 to a tie (argmax 0: BA-ECE 0.0814 against the function's
    0.0766) and merged label indices above 2048 (float16) or 2**24 (float32). The class equals its function."""
    u, _, target = _square_case()
    p_fg = torch.full((1, 1, 16, 16), 0.1)
    p_fg[..., 4:12, 4:12] = 0.9
    p_fg[..., 3:13, 3] = 0.5001
    p_fg[..., 4:12, 11] = 0.5001
    probs = torch.cat([1 - p_fg, p_fg], 1)
    assert bool((probs.half().argmax(1) != probs.argmax(1)).any())  # the case float16 rounding breaks
    for unc, pred, y in ((u.half(), probs, target), (u.bfloat16(), probs.half(), target)):
        got = cls()(y_pred=pred, y=y, uncertainty=unc)
        torch.testing.assert_close(got.view(-1), fn(unc, pred, y).view(-1), rtol=0, atol=0)
    for base, unc in ((2048, u.half()), (2**24, u)):  # two labels that float16 / float32 would merge
        labels = torch.full((1, 1, 16, 16), base, dtype=torch.long)
        labels[..., 8:] = base + 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # merged labels had no boundary: NaN with a warning
            got = cls()(y_pred=labels, y=labels, uncertainty=unc)
        torch.testing.assert_close(got.view(-1), fn(unc, labels, labels).view(-1), rtol=0, atol=0)


@pytest.mark.parametrize("fn", [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error])
def test_bfloat16_uncertainty_maps_are_read_as_float32(fn):
    """Found by hostile testing: a bfloat16 map (autocast inference) raised torch's "Got unsupported ScalarType
    BFloat16" from ``.numpy()``; it gives the values of its float32 copy (which holds each bfloat16 value)."""
    u, pred, target = _square_case()
    bf = u.bfloat16()
    torch.testing.assert_close(fn(bf, pred, target), fn(bf.float(), pred, target), rtol=0, atol=0)
    metric = SpatialCalibrationErrorMetric()
    torch.testing.assert_close(metric(y_pred=pred, y=target, uncertainty=bf).view(-1),
                               spatial_calibration_error(bf.float(), pred, target), rtol=0, atol=0)


def test_the_flags_of_the_functions_must_be_bools():
    """Found by hostile testing: ``return_bands="false"`` / ``return_map="false"`` (a bundle override) returned tuples;
    they are refused by name as ``normalize`` is."""
    u, p, t = _blob_case()
    with pytest.raises(TypeError, match="return_bands must be True or False"):
        boundary_aware_ece(u, p, t, return_bands="false")
    with pytest.raises(TypeError, match="return_map must be True or False"):
        spatial_calibration_error(u, p, t, return_map="false")
    assert isinstance(boundary_aware_ece(u, p, t, return_bands=np.bool_(False)), np.ndarray)


@pytest.mark.parametrize("call", [
    lambda u, p, t: spatial_calibration_error(u, p, t, sigma="2"),
    lambda u, p, t: spatial_calibration_error(u, p, t, sigma=["1", "2"]),
    lambda u, p, t: boundary_uncertainty_concentration(u, p, t, spacing="2"),
    lambda u, p, t: boundary_aware_ece(u, p, t, spacing=["0.5", "2"]),
    lambda u, p, t: boundary_aware_ece(u[None], p[None], t[None], spacing=[["0.5", "2"]]),
    lambda u, p, t: spatial_calibration_error(u, p, t, spacing=np.array([0.5 + 1j, 2])),
])
def test_texts_are_no_lengths(call):
    """Found by hostile testing: ``"2"`` and ``["0.5", "2"]`` were read as 2 mm / (0.5, 2) mm (numpy converts them)."""
    u, p, t = _blob_case()
    with pytest.raises(ValueError, match="(spacing|sigma) must be a number"):
        call(u, p, t)


@pytest.mark.parametrize("spacing", [["0.5", "2"], [["0.5", "2"]], np.array(["1", "2"])])
def test_the_metric_classes_refuse_a_text_spacing_when_built(spacing):
    """Found by hostile testing: ``["0.5", "2"]`` passed the constructors' check (numpy converts it)."""
    with pytest.raises(ValueError, match="spacing must be a number"):
        SpatialCalibrationErrorMetric(spacing=spacing)


@pytest.mark.parametrize("value", [np.array(0.7), torch.tensor(0.7, dtype=torch.float64)])
def test_a_0d_array_is_a_scalar_spacing_and_sigma(value):
    """Found by hostile testing: a 0-d array or tensor was refused at the first case ("spacing must have 2 values ...,
    got 1") although the constructors accept it; it is the number it holds."""
    u, p, t = _blob_case()
    np.testing.assert_array_equal(boundary_uncertainty_concentration(u, p, t, spacing=value),
                                  boundary_uncertainty_concentration(u, p, t, spacing=0.7))
    np.testing.assert_array_equal(spatial_calibration_error(u, p, t, sigma=value),
                                  spatial_calibration_error(u, p, t, sigma=0.7))
    tu, tp, tt = (torch.from_numpy(a)[None, None] for a in (u, p, t))
    got = SpatialCalibrationErrorMetric(spacing=value, sigma=value)(y_pred=tp, y=tt, uncertainty=tu)
    torch.testing.assert_close(got.view(-1), spatial_calibration_error(tu, tp, tt, spacing=0.7, sigma=0.7))


def test_space_with_a_kernel_far_wider_than_the_volume():
    """Found by hostile testing: sigma = 1e7 mm on an 8 x 8 image allocated scipy's kernel of 8e7 taps (1.2 GB,
    13 s; a MemoryError at 1e8). The kernel is folded onto the axis (the reflected extension is periodic): the same
    values as scipy's passes, in little memory, tending to |mean(U - E)|; radii beyond 2**26 voxels are refused."""
    import tracemalloc

    from scipy import ndimage

    u, p, t = _blob_case((8, 8))
    e = (p != t).astype(float)
    for sigma in (2000.0, (5000.0, 0.7), (1.5, 3000.0)):  # kernels longer than 4096 voxels: folded
        smoothed = ndimage.gaussian_filter(u - e, sigma, truncate=4.0, mode="reflect")
        ref = np.abs(smoothed).mean()
        assert float(spatial_calibration_error(u, p, t, sigma=sigma)[0]) == pytest.approx(ref, rel=1e-13, abs=0)
        sigmas = np.broadcast_to(sigma, (2,))
        got = _gaussian_torch(torch.from_numpy(u - e), tuple(sigmas), 4.0)  # the kernel of CUDA tensors folds too
        np.testing.assert_allclose(got.numpy(), smoothed, rtol=0, atol=1e-14)
    tracemalloc.start()
    try:
        value = float(spatial_calibration_error(u, p, t, sigma=1e6)[0])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20  # scipy's kernel of 8e6 taps alone: 64 MB
    assert value == pytest.approx(abs((u - e).mean()), rel=1e-6)
    with pytest.raises(ValueError, match="sigma is 1e\\+12 voxels along axis 0"):
        spatial_calibration_error(u, p, t, sigma=1e12)


def test_complex_and_longdouble_uncertainty_maps():
    """Found by hostile testing: a complex map was accepted (numpy dropped its imaginary part with a ComplexWarning);
    a longdouble one raised torch's TypeError naming no argument. The first is refused by name, the second read as
    float64 (the metrics' precision); longdouble labels are refused by name."""
    u, p, t = _blob_case()
    with pytest.raises(TypeError, match="uncertainty must hold real numbers"):  # the shared check (review 63)
        spatial_calibration_error(u + 5j, p, t)
    with pytest.raises(TypeError, match="uncertainty must hold real numbers"):
        SpatialCalibrationErrorMetric()(y_pred=torch.from_numpy(p)[None, None], y=torch.from_numpy(t)[None, None],
                                        uncertainty=torch.from_numpy(u + 5j)[None, None])
    long = u.astype(np.longdouble)
    for fn in (boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error):
        np.testing.assert_array_equal(fn(long, p, t), fn(u, p, t))
    if np.dtype(np.longdouble).itemsize > 8:  # (float64 on some platforms)
        with pytest.raises(TypeError, match="pred has dtype"):
            spatial_calibration_error(u, p.astype(np.longdouble), t)


def test_per_case_spacing_rows_with_decollated_lists():
    """Found by hostile testing: a spacing of one row per case failed with decollated lists ("spacing has 2 rows but
    there are 1 cases": MONAI evaluates the items one by one with the same arguments); item ``i`` gets row ``i``."""
    g = torch.Generator().manual_seed(2)
    t = torch.zeros(2, 1, 8, 8, dtype=torch.long)
    t[:, :, 2:6, 2:6] = 1
    p = t.clone()
    p[:, :, 2:6, 6] = 1
    u = torch.rand(2, 1, 8, 8, generator=g)
    rows = [[1.0, 2.0], [0.5, 0.5]]
    for fn, cls in _FUNCTIONS_AND_CLASSES:
        batch = cls(spacing=rows)(y_pred=p, y=t, uncertainty=u)
        torch.testing.assert_close(batch.view(-1), fn(u, p, t, spacing=rows), rtol=0, atol=0)
        for metric, kwargs in ((cls(spacing=rows), {}), (cls(), {"spacing": torch.tensor(rows)})):
            listed = metric(y_pred=list(p), y=list(t), uncertainty=list(u), **kwargs)
            torch.testing.assert_close(listed, batch, rtol=0, atol=0)
    with pytest.raises(ValueError, match="spacing has 2 rows but the decollated list has 1 items"):
        SpatialCalibrationErrorMetric(spacing=rows)(y_pred=list(p[:1]), y=list(t[:1]), uncertainty=list(u[:1]))
    with pytest.raises(ValueError, match="y_pred has 2 items but y has 1"):
        SpatialCalibrationErrorMetric()(y_pred=list(p), y=list(t[:1]), uncertainty=list(u))


@pytest.mark.parametrize("scale", [1e307, 1.7e308, 1e-310, 2.0**-1000])
def test_buc_is_scale_invariant_at_extreme_magnitudes(scale):
    """Found by hostile testing: BUC of a map of values about 1e307 was NaN (its float64 sums overflowed, with numpy
    RuntimeWarnings only), although BUC does not depend on the map's scale. A power of two brings such maps to [0.5, 1)
    first; other maps are computed as before."""
    u, p, t = _blob_case()
    u = u / u.max()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = boundary_uncertainty_concentration(u * scale, p, t)
        got_torch = boundary_uncertainty_concentration(torch.from_numpy(u * scale), p, t)
    expected = boundary_uncertainty_concentration(u, p, t)
    np.testing.assert_allclose(got, expected, rtol=1e-12 if scale > 1e-300 else 1e-9)
    np.testing.assert_allclose(got_torch.numpy(), got, rtol=0, atol=0)
    # the kernel's tensor branch (CUDA input), on CPU tensors
    case = _buc_case(torch.from_numpy(u * scale), torch.from_numpy(p), torch.from_numpy(t), (1.0, 1.0), None, "auto")
    assert case == pytest.approx(float(got[0]), rel=1e-14)  # torch and numpy add up their sums in different orders


# ---------------------------------------------------------------------------------------------------------------
# review s32: a constant map gave BUC 0.49999999999999967, not the documented 0.5 exactly
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0.1, 0.3, 1 / 3, 0.7, 1e-3, 5.0, 1e-310])
@pytest.mark.parametrize("shape", [(8, 8), (7, 9, 5), (13, 17)])
def test_buc_of_a_constant_map_is_exactly_one_half(value, shape):
    t = np.zeros(shape, int)
    t[tuple(slice(1, s - 2) for s in shape)] = 1
    u = np.full(shape, value)
    assert float(boundary_uncertainty_concentration(u, t, t)[0]) == 0.5
    assert float(boundary_uncertainty_concentration(torch.from_numpy(u), t, t, width=1.0)[0]) == 0.5
    # the CUDA kernel (torch tensors) computes the same
    assert _buc_case(torch.from_numpy(u), torch.from_numpy(t), torch.from_numpy(t), (1.0,) * len(shape), None,
                     "auto") == 0.5
    assert np.array_equal(u, np.full(shape, value))  # the caller's map is not touched


# ---------------------------------------------------------------------------------------------------------------
# review s32: BraTS-style region channels (overlapping TC / WT / ET) were argmaxed into a label map that merged the
# background with TC and ET (all label 0), and the metrics were computed on it without a word
# ---------------------------------------------------------------------------------------------------------------
def _brats_regions(label):
    return np.stack([np.isin(label, [1, 4]), np.isin(label, [1, 2, 4]), label == 4]).astype(np.float32)


@pytest.mark.parametrize("fn", [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error])
def test_overlapping_region_channels_are_refused_not_argmaxed(fn):
    lab = np.zeros((16, 16, 8), int)
    lab[3:13, 3:13, 1:7] = 2
    lab[5:11, 5:11, 2:6] = 1
    lab[7:9, 7:9, 3:5] = 4
    pl = lab.copy()
    pl[12, 3:13, 1:7] = 0
    y, yp = _brats_regions(lab)[None], _brats_regions(pl)[None]
    u = np.random.default_rng(0).random((1, 1, 16, 16, 8))
    label_map = lab[None, None]
    for pred, target, name in [(yp, label_map, "pred"), (label_map, y, "target"), (yp > 0.5, label_map, "pred")]:
        with pytest.raises(ValueError, match=f"{name} has 3 channels in \\[0, 1\\] that do not sum to 1"):
            fn(u, pred, target)
    sigmoid = np.clip(yp * 0.9 + 0.05, 0, 1)  # sigmoid probabilities of the regions
    with pytest.raises(ValueError, match="multi-label"):
        fn(torch.from_numpy(u), torch.from_numpy(sigmoid), torch.from_numpy(label_map))
    cls = {boundary_uncertainty_concentration: BoundaryUncertaintyConcentrationMetric,
           boundary_aware_ece: BoundaryAwareECEMetric, spatial_calibration_error: SpatialCalibrationErrorMetric}[fn]
    with pytest.raises(ValueError, match="channels in \\[0, 1\\] that do not sum to 1"):
        cls()(y_pred=torch.from_numpy(yp), y=torch.from_numpy(y), uncertainty=torch.from_numpy(u))
    # class probabilities, one-hot maps (float16 too) and logits are reduced by argmax as before
    one_hot = np.eye(5)[lab].transpose(3, 0, 1, 2)[None]
    logits = np.log(np.clip(one_hot * 0.8 + 0.05, 1e-6, None)) * 3.0
    probs = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float16)
    expected = fn(u, label_map, label_map)
    for x in (one_hot, one_hot.astype(bool), logits, probs):
        np.testing.assert_allclose(fn(u, x, label_map), expected)
        np.testing.assert_allclose(fn(u, label_map, x), expected)
    # a softmax computed in bfloat16 (autocast) is off by ~3e-3, also once the MONAI class packs it in float32
    z = torch.randn(1, 4, 16, 16, 8, generator=torch.Generator().manual_seed(0)) * 2
    bf16 = torch.softmax(z.to(torch.bfloat16), 1)
    assert float((bf16.double().sum(1) - 1).abs().max()) > 1e-3
    in_classes = torch.from_numpy(np.minimum(label_map, 3))  # the 4 classes of the probabilities (label 4 refused)
    ref = fn(torch.from_numpy(u).float(), bf16.argmax(1), in_classes)
    got = cls()(y_pred=bf16, y=in_classes, uncertainty=torch.from_numpy(u).float())
    np.testing.assert_allclose(got[:, 0].numpy(), ref.numpy())


# ---------------------------------------------------------------------------------------------------------------
# review s32: an entropy in nats (the handlers' default key of an inferer built without normalize=True) gave BA-ECE
# 1.198, above any calibration error on [0, 1], without a word
# ---------------------------------------------------------------------------------------------------------------
def test_baece_and_space_warn_for_a_map_above_one():
    from monai_unc.measures import entropy

    t = np.zeros((24, 24, 12), int)
    t[4:20, 4:20, 2:10] = 1
    t[8:16, 8:16, 4:8] = 2
    t[10:14, 10:14, 5:7] = 3
    logits = np.random.default_rng(0).normal(0, 0.05, (4,) + t.shape) + 0.1 * np.eye(4)[t].transpose(3, 0, 1, 2)
    probs = torch.softmax(torch.from_numpy(logits), 0)[None]
    pred, target = probs.argmax(1), torch.from_numpy(t)[None]
    nats = entropy(probs)
    assert float(nats.max()) > 1.3
    for fn, metric in ((boundary_aware_ece, "BA-ECE"), (spatial_calibration_error, "SPACE")):
        with pytest.warns(UserWarning, match=f"{metric}: the uncertainty reaches 1.386, above 1"):
            value = float(fn(nats, pred, target)[0])
        assert value > 1  # still scored as given
    with pytest.warns(UserWarning, match="BA-ECE: the uncertainty reaches"):
        BoundaryAwareECEMetric()(y_pred=pred[:, None], y=target[:, None], uncertainty=nats)
    # on [0, 1] (rounded to bfloat16 too), and with normalize=True, nothing to say
    unit = entropy(probs, normalize=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for u in (unit, unit.to(torch.bfloat16), torch.ones_like(unit)):
            boundary_aware_ece(u, pred, target)
            spatial_calibration_error(u, pred, target)
        boundary_aware_ece(nats, pred, target, normalize=True)


def test_class_probabilities_zero_padded_by_an_inverted_crop_are_accepted():
    """Found by hostile review: class probabilities put back on the image grid by MONAI's inverse of a crop
    (``Invertd`` after ``CropForegroundd``: every channel 0 outside the crop) were refused as multi-label channels;
    argmax reads the padding as background, as before. Region masks without a background channel stay refused."""
    from monai.data import MetaTensor
    from monai.transforms import CropForeground

    from monai_unc.metrics.spatial import boundary_uncertainty_concentration

    g = torch.Generator().manual_seed(0)
    img = torch.zeros(1, 24, 24, 24)
    img[:, 5:19, 4:20, 6:18] = 1.0
    crop = CropForeground(select_fn=lambda x: x > 0, margin=0)
    cropped = crop(img)
    probs_c = torch.softmax(torch.randn(3, *cropped.shape[1:], generator=g) * 3, 0)
    probs = crop.inverse(MetaTensor(probs_c, applied_operations=list(cropped.applied_operations))).as_tensor()
    assert float(probs.sum(0).min()) == 0.0  # the zero padding
    label = probs.argmax(0)
    target = label.clone()
    target[8:12, 8:12, 8:12] = 0
    unc = 1 - probs.max(0).values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        got = boundary_uncertainty_concentration(unc[None, None], probs[None], target[None, None])
        want = boundary_uncertainty_concentration(unc[None, None], label[None, None], target[None, None])
    torch.testing.assert_close(got, want)
    regions = torch.zeros(2, 24, 24, 24)  # two disjoint region masks, no background channel: zeros inside their box
    regions[0, 4:8, 4:8, 4:8] = 1
    regions[1, 14:18, 14:18, 14:18] = 1
    with pytest.raises(ValueError, match="multi-label"):
        boundary_uncertainty_concentration(unc[None, None], regions[None], target[None, None])


_SPATIAL = [boundary_uncertainty_concentration, boundary_aware_ece, spatial_calibration_error]


def _quiet(fn, *args):
    """``fn(*args)`` with the metrics' warnings (no boundary, ...) silenced: these tests are about the input."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return fn(*args)


@pytest.mark.parametrize("fn", _SPATIAL)
@pytest.mark.parametrize("thick", [1, 2, 3])
def test_class_probabilities_zero_padded_around_a_thin_box_are_scored(fn, thick):
    """Class probabilities zero outside a crop box at most 2 voxels thick (``Invertd`` after ``CropForegroundd``):
    every voxel of the box lies on its outer layer, and the check crashed with torch's ``RuntimeError`` (the minimum
    of no voxel). Scored as their argmax, as a thicker box; 2D and 3D."""
    g = torch.Generator().manual_seed(thick)
    for spatial, box in (((12, 12), (slice(2, 2 + thick), slice(2, 8))),
                         ((10, 10, 8), (slice(2, 8), slice(3, 3 + thick), slice(1, 7)))):
        probs = torch.zeros(1, 3, *spatial)
        inside = torch.softmax(3 * torch.randn(3, *probs[0, 0][box].shape, generator=g), 0)
        probs[(0, slice(None), *box)] = inside
        target = torch.zeros(1, 1, *spatial, dtype=torch.long)
        target[(0, 0, *box)] = 1
        u = torch.rand(1, 1, *spatial, generator=g)
        got = _quiet(fn, u, probs, target)
        want = _quiet(fn, u, probs.argmax(1, keepdim=True), target)
        torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("fn", _SPATIAL)
def test_sigmoid_regions_in_a_thin_zero_frame_are_refused(fn):
    """A box too thin for an inside that sums to 1 is no way around the refusal of sigmoid probabilities: its voxels
    must sum to 1 themselves."""
    sigmoid = torch.zeros(1, 3, 12, 12)
    sigmoid[0, :, 2:4, 2:8] = 0.2
    with pytest.raises(ValueError, match="pred has 3 channels in \\[0, 1\\] that do not sum to 1"):
        fn(torch.rand(1, 1, 12, 12), sigmoid, torch.zeros(1, 1, 12, 12, dtype=torch.long))


def _one_hot(lab: np.ndarray, c: int = 3) -> np.ndarray:
    return np.moveaxis(np.eye(c, dtype=np.float32)[lab], -1, 0)[None]  # (1, C, *spatial)


@pytest.mark.parametrize("fn", _SPATIAL)
def test_one_hot_without_background_whose_foreground_is_a_box_is_refused(fn):
    """A one-hot map without its background channel (``y[:, 1:]``) whose foreground is an axis-aligned box: its zero
    background looked like the zero padding of an inverted crop, and argmax merged the background with class 1
    (SPACE 0.0186 instead of 0.0042, no warning); a thin box crashed. A one-hot map (0 / 1 values) with voxels where
    every channel is 0 cannot be told from one zero-padded by ``Invertd``: both are refused, naming the argument."""
    t = np.zeros((12, 12), int)
    t[2:6, 2:5], t[2:6, 5:8] = 1, 2
    thin = np.zeros((12, 12), int)
    thin[2:4, 2:5], thin[2:4, 5:8] = 1, 2
    u = np.zeros((1, 1, 12, 12))
    u[0, 0, 1, 2:8] = 0.9
    for lab in (t, thin):
        no_bg = _one_hot(lab)[:, 1:]
        for x in (no_bg, no_bg.astype(bool), no_bg.astype(np.int64), torch.from_numpy(no_bg)):
            with pytest.raises(ValueError, match="target: every channel is 0 at .* one-hot .* background"):
                fn(u, t[None, None], x)
            with pytest.raises(ValueError, match="pred: every channel is 0 at .* one-hot"):
                fn(u, x, t[None, None])
    padded = _one_hot(t)  # a one-hot map with its background, zero-padded: the same zeros, refused the same way
    padded[..., :1, :] = 0
    with pytest.raises(ValueError, match="target: every channel is 0 .* one-hot"):
        fn(u, t[None, None], padded)
    with pytest.raises(ValueError, match="every channel is 0 .* one-hot"):  # the MONAI class reads it the same way
        cls = {boundary_uncertainty_concentration: BoundaryUncertaintyConcentrationMetric,
               boundary_aware_ece: BoundaryAwareECEMetric, spatial_calibration_error: SpatialCalibrationErrorMetric}
        cls[fn]()(y_pred=torch.from_numpy(t)[None, None], y=torch.from_numpy(_one_hot(t)[:, 1:]),
                  uncertainty=torch.from_numpy(u))
    # case by case: beside a case of class probabilities without zeros, the one-hot case is still refused
    soft = np.random.default_rng(0).dirichlet([1.0, 1.0], (12, 12)).transpose(2, 0, 1)[None].astype(np.float32)
    batch = np.concatenate([soft, _one_hot(t)[:, 1:]])
    with pytest.raises(ValueError, match="target: every channel is 0 .* one-hot"):
        fn(np.concatenate([u, u]), np.minimum(np.stack([t, t]), 1)[:, None], batch)
    # the full one-hot map and its argmax give the label map's value
    want = _quiet(fn, u, t[None, None], t[None, None])
    np.testing.assert_array_equal(_quiet(fn, u, t[None, None], _one_hot(t)), want)


@pytest.mark.parametrize("fn", _SPATIAL)
def test_integer_label_maps_stacked_on_the_channel_axis_are_refused(fn):
    """Label maps stacked along the channel axis (``(B, K, *spatial)``: K raters' annotations with labels 0 .. 2)
    were read as logits: argmax made the reference the index of a rater (SPACE 0.25 for a perfect prediction, no
    warning). Integer channels other than a 0 / 1 one-hot map are refused, in any dtype, naming the argument."""
    lab = np.zeros((16, 16), int)
    lab[4:12, 4:12] = 1
    lab[6:10, 6:10] = 2
    raters = np.stack([lab, lab, lab])[None]  # (1, 3, 16, 16)
    u = np.zeros((1, 1, 16, 16))
    for x in (raters, raters.astype(np.uint8), raters.astype(np.float32), torch.from_numpy(raters),
              raters - 1):  # integers below 0 are no logits either
        with pytest.raises(ValueError, match="target has 3 channels holding integers"):
            fn(u, lab[None, None], x)
        with pytest.raises(ValueError, match="pred has 3 channels holding integers"):
            fn(u, x, lab[None, None])
    # logits (fractional values) are still reduced by argmax
    logits = 4.0 * _one_hot(lab) - 2.0 + 0.1 * np.random.default_rng(0).standard_normal((1, 3, 16, 16))
    np.testing.assert_array_equal(_quiet(fn, u, logits, lab[None, None]), _quiet(fn, u, lab[None, None],
                                                                               lab[None, None]))
