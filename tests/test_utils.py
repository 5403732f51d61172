"""The shared input checks and reductions of ``monai_unc._utils``: per-case reduction when no value is valid, the
probability tolerance of low-precision dtypes, the errors of the probability and per-axis checks, the exact
comparison of a map with a threshold (``exceeds`` / ``below``) against a brute-force reference, and the small number
checks (``is_int``, ``real_number``)."""

import math
import operator
import os
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch

from monai_unc._utils import (
    argmax,
    below,
    case_spacings,
    check_labels,
    check_probabilities,
    check_unit_interval,
    exceeds,
    is_int,
    normalize_spacing,
    per_axis_mm,
    probability_tolerance,
    real_number,
    reduce_case_values,
    to_tensor,
)
from monai_unc.measures import entropy
from monai_unc.metrics.calibration import ece
from monai_unc.metrics.spatial import spatial_calibration_error
from tests._cases import softmax_case


@pytest.mark.parametrize("reduction", ["mean", "sum", "mean_batch", "sum_batch", "mean_channel", "sum_channel"])
def test_reduce_case_values_is_nan_where_no_value_is_valid(reduction):
    data = torch.tensor([[float("nan"), 1.0], [float("nan"), 3.0]], dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f, not_nans = reduce_case_values(data, reduction, "M")
    from monai.metrics.utils import do_metric_reduction

    ref, ref_not_nans = do_metric_reduction(data.clone(), reduction)
    assert torch.equal(not_nans, ref_not_nans)
    f, ref, empty = (x.reshape(-1) for x in torch.broadcast_tensors(f, ref, ref_not_nans == 0))
    assert torch.equal(torch.isnan(f), empty)
    assert torch.equal(f[~empty], ref[~empty])
    assert bool(empty.any()) == any("no valid" in str(w.message) for w in caught)


@pytest.mark.parametrize("data", [None, torch.empty((0, 1), dtype=torch.float64), torch.empty((0, 3))])
def test_reduce_case_values_of_no_case_with_reduction_none_is_an_empty_table(data):
    """No case and reduction "none": no value at all (an empty per-case table), not one NaN that reads as a case."""
    with pytest.warns(UserWarning, match="no case was evaluated"):
        f, not_nans = reduce_case_values(data, "none", "M")
    assert f.shape == ((0, 1) if data is None else (0, *data.shape[1:])) and f.dtype == torch.float64
    assert float(not_nans) == 0
    with pytest.warns(UserWarning, match="no case was evaluated"):
        f, _ = reduce_case_values(data, "mean", "M")
    assert f.ndim == 0 and math.isnan(float(f))


def ref_top_label_ece(probs, labels, n_bins=15):
    """Top-label ECE by explicit loops over bins on the raw float64 voxels (first maximum on ties)."""
    p = np.moveaxis(np.asarray(probs, dtype=np.float64), 1, -1).reshape(-1, probs.shape[1])
    y = np.asarray(labels).reshape(-1)
    conf, pred = p.max(1), p.argmax(1)
    bins = np.minimum(np.floor(np.clip(conf, 0, 1) * n_bins).astype(int), n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        sel = bins == b
        if sel.any():
            total += sel.sum() * abs((pred[sel] == y[sel]).mean() - conf[sel].mean())
    return total / conf.size


# ---------------------------------------------------------------------------------------------------------------
# item 8: valid low-precision probabilities were rejected ("pass probabilities, not logits")
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("in_dtype", [False, True])
def test_low_precision_probabilities_are_accepted(dtype, in_dtype):
    z, p, y = softmax_case((2, 10, 16, 16), seed=3)
    q = torch.softmax(z.to(dtype), 1) if in_dtype else p.to(dtype)  # softmax in the dtype, or rounded after
    check_probabilities(q)
    value = ece(q, y)
    assert value == pytest.approx(ref_top_label_ece(q.double().numpy(), y.numpy()), abs=1e-12)
    e = entropy(q)
    assert torch.isfinite(e).all() and e.shape == (2, 1, 16, 16)
    # logits are still told apart from probabilities in the low precision
    with pytest.raises(ValueError, match="probs"):
        ece(z.to(dtype), y)


def test_probability_tolerance_scales_with_the_precision():
    assert probability_tolerance(torch.float64) == probability_tolerance(torch.float32) == 1e-3
    assert probability_tolerance(torch.float16) == pytest.approx(4 * 2**-10)
    assert probability_tolerance(torch.bfloat16) == pytest.approx(4 * 2**-7)
    p = torch.full((1, 2, 3, 3), 0.5)
    p[0, 0, 0, 0] = 0.504  # a sum off by 4e-3: too much for float32 ...
    with pytest.raises(ValueError, match="sum to 1"):
        check_probabilities(p)
    check_probabilities(p.to(torch.bfloat16))  # ... within bfloat16 rounding


def test_probability_checks_name_what_is_wrong():
    """``check_probabilities`` (classes summing to 1) and ``check_unit_interval`` (per-channel Bernoulli) share one
    check; each keeps its own errors."""
    p = torch.full((1, 2, 3), 0.5)
    check_probabilities(p)
    check_unit_interval(p)
    check_unit_interval(torch.full((1, 1, 3), 0.2))  # one channel is fine without the sum
    with pytest.raises(TypeError, match="probs must be a floating point array"):
        check_unit_interval(torch.ones((1, 2, 3), dtype=torch.int64))
    with pytest.raises(ValueError, match="at least 2 classes along dim 1"):
        check_probabilities(torch.full((1, 1, 3), 1.0))
    with pytest.raises(ValueError, match="is empty"):
        check_unit_interval(torch.zeros((1, 0, 3)))
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\], got values in \[0.5, 1.5\]$"):
        check_probabilities(torch.tensor([[[0.5], [1.5]]]))
    with pytest.raises(ValueError, match=r"got values in \[0.5, 1.5\]; pass probabilities, not logits$"):
        check_unit_interval(torch.tensor([[[0.5], [1.5]]]))
    with pytest.raises(ValueError, match="must sum to 1 .*sigmoid probabilities.*pass probabilities, not logits"):
        check_probabilities(torch.full((1, 2, 3), 0.2))
    with pytest.raises(ValueError, match="non-finite"):
        check_unit_interval(torch.tensor([[[float("nan")]]]))


def test_per_axis_lengths_of_spacing_and_sigma():
    assert normalize_spacing(2, 3) == (2.0, 2.0, 2.0) and normalize_spacing(np.array([1, 2]), 2) == (1.0, 2.0)
    assert per_axis_mm(0, 2, "sigma") == (0.0, 0.0)  # the range is the caller's
    with pytest.raises(ValueError, match=r"spacing must have 3 values \(one per spatial axis\), got 2"):
        normalize_spacing((1, 2), 3)
    u = np.zeros((1, 1, 4, 4, 4))
    with pytest.raises(ValueError, match=r"sigma must have 3 values \(one per spatial axis, mm\), got 2"):
        spatial_calibration_error(u, u[:, 0], u[:, 0], sigma=(1.0, 2.0))
    with pytest.raises(ValueError, match="sigma must be non-negative and finite"):
        spatial_calibration_error(u, u[:, 0], u[:, 0], sigma=-1.0)
    with pytest.raises(ValueError, match="spacing must be a number or one number per spatial axis"):
        normalize_spacing("a", 2)
    with pytest.raises(ValueError, match="spacing must be positive and finite"):
        normalize_spacing(0, 2)


@pytest.mark.parametrize("value", [np.array(0.7), torch.tensor(0.7, dtype=torch.float64),
                                   torch.tensor(0.7, dtype=torch.float64, requires_grad=True), np.float64(0.7)])
def test_a_0d_array_or_tensor_is_one_length_for_every_axis(value):
    """Found by hostile testing: a 0-d array or tensor was refused ("spacing must have 2 values (one per spatial
    axis), got 1") although the metric constructors accept it as the number it holds."""
    assert per_axis_mm(value, 2, "spacing") == (0.7, 0.7)
    assert normalize_spacing(value, 3) == (0.7, 0.7, 0.7)
    assert case_spacings(value, 2, 2) == [(0.7, 0.7), (0.7, 0.7)]


@pytest.mark.parametrize("value", ["2", b"2", ["0.5", "2"], ("0.5", 2.0), np.array(["1", "2"]),
                                   np.array(["1", 2.0], dtype=object), 2 + 0j, np.array([1 + 0j, 2]),
                                   torch.tensor([1 + 0j, 2])])
def test_a_text_or_complex_number_is_no_length(value):
    """Found by hostile testing: ``"2"`` and ``["0.5", "2"]`` were read as lengths (numpy converts texts), a complex
    array lost its imaginary part; refused by name as a bool is."""
    with pytest.raises(ValueError, match="spacing must be a number or one number per spatial axis"):
        per_axis_mm(value, 2, "spacing")
    with pytest.raises(ValueError, match="spacing must be a number, one number per axis or one row per case"):
        case_spacings(value, 1, 2)
    with pytest.raises(ValueError, match="spacing must be a number, one number per axis or one row per case"):
        case_spacings([value, value] if isinstance(value, (str, bytes)) else [value], 1, 2)


def test_case_spacings_takes_tensor_rows_that_require_grad():
    """Found by hostile testing: a spacing tensor that requires grad raised torch's RuntimeError from ``np.asarray``."""
    rows = torch.tensor([[1.0, 2.0], [0.5, 0.5]], dtype=torch.float64, requires_grad=True)
    assert case_spacings(rows, 2, 2) == [(1.0, 2.0), (0.5, 0.5)]


def test_to_tensor_names_the_argument_of_a_longdouble_array():
    """Found by hostile testing: a longdouble array raised torch's "can't convert np.ndarray of type
    numpy.longdouble", which names no argument."""
    if np.dtype(np.longdouble).itemsize <= 8:
        pytest.skip("longdouble is float64 on this platform")
    with pytest.raises(TypeError, match=f"pred has dtype {np.dtype(np.longdouble)}, which torch cannot hold"):
        to_tensor(np.zeros(3, dtype=np.longdouble), "pred")
    with pytest.raises(TypeError, match=f"pred has dtype {np.dtype(np.longdouble)}"):
        to_tensor(np.longdouble(1.0), "pred")


# ---------------------------------------------------------------------------------------------------------------
# exact comparison of a map with a threshold: exceeds / below against Python's exact comparisons
# ---------------------------------------------------------------------------------------------------------------
OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
F32_MAX = float(np.finfo(np.float32).max)
#: thresholds next to the values the dtypes hold, between them, at and beyond their ranges, subnormal, infinite,
#: integers float64 cannot hold and a longdouble third (exact only as a Fraction)
THRESHOLDS = [
    0.3, 0.7, 0.5, 0.1, -0.3, 0.0, -0.0, 1, 3, -2, 127.5, 255.5, -128.5, 2**24 + 1, 2**53 + 1, -(2**63) - 0.5,
    1e-45, 1.4e-45, 5e-324, 6e-8, 1e-310, 65504.0, 65504.5, 65520.0, 70000.0, F32_MAX, 3.5e38, 1e300,
    1.7976931348623157e308, -65520.0, -F32_MAX, -1e300, math.inf, -math.inf, 10**400, -(10**400),
    np.float32(0.3), np.float16(0.7), np.longdouble(1) / 3,
]


def _exact(v):
    """The exact value of one element as a Python number (None for NaN, which compares false)."""
    if isinstance(v, torch.Tensor):
        v = v.item()
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, np.floating) and np.finfo(v.dtype).nmant > 52 and np.isfinite(v):
        return Fraction(*v.as_integer_ratio())
    v = float(v)  # exact for float16 / bfloat16 / float32 / float64
    return None if math.isnan(v) else v


def _exact_threshold(t):
    if isinstance(t, np.floating) and np.finfo(t.dtype).nmant > 52:
        return Fraction(*t.as_integer_ratio())
    return int(t) if isinstance(t, (int, np.integer)) else float(t)


def _reference(values, t, op):
    """``values <op> t`` compared one by one in Python, exactly (float, int and Fraction compare exactly)."""
    te = _exact_threshold(t)
    return np.array([v is not None and OPS[op](v, te) for v in map(_exact, values)], dtype=bool)


def compare(u, t, op):
    if op in (">", ">="):
        return exceeds(u, t, inclusive=op == ">=")
    return below(u, t, inclusive=op == "<=")


def _near_thresholds_np(dtype):
    """Each threshold rounded to ``dtype`` and its two neighbours on either side (np.nextafter)."""
    out = []
    with np.errstate(over="ignore", invalid="ignore"):
        for t in THRESHOLDS:
            try:
                t64 = float(t)
            except OverflowError:
                t64 = math.inf if t > 0 else -math.inf
            r = np.array(t64).astype(dtype)
            out.append(r)
            for direction in (-np.inf, np.inf):
                x = r
                for _ in range(2):
                    x = np.nextafter(x, np.array(direction, dtype=dtype))
                    out.append(x)
    return np.array(out, dtype=dtype)


def numpy_values(dtype, rng):
    if np.dtype(dtype).kind == "f":
        info = np.finfo(dtype)
        special = np.array([0.0, -0.0, info.tiny, info.smallest_subnormal, -info.smallest_subnormal, info.max,
                            -info.max, np.inf, -np.inf, np.nan, 1.0], dtype=dtype)
        with np.errstate(over="ignore"):
            noise = np.concatenate([rng.standard_normal(64), rng.standard_normal(32) * 1e4]).astype(dtype)
        return np.concatenate([special, noise, _near_thresholds_np(dtype)])
    if np.dtype(dtype).kind == "b":
        return np.array([False, True, True, False])
    info = np.iinfo(dtype)
    near = [v + d for t in map(_exact_threshold, THRESHOLDS) if -(2**70) < t < 2**70
            for v in (math.floor(t), math.ceil(t)) for d in (-1, 0, 1)]
    near = [v for v in near if info.min <= v <= info.max]
    return np.concatenate([np.array([info.min, info.max, 0], dtype=dtype), np.array(near, dtype=dtype),
                           rng.integers(info.min, info.max, 64, dtype=dtype, endpoint=True)])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.longdouble, np.int8, np.uint8, np.int32,
                                   np.int64, np.uint64, np.bool_])
def test_exceeds_and_below_equal_the_exact_comparison_numpy(dtype):
    u = numpy_values(dtype, np.random.default_rng(0))
    for t in THRESHOLDS:
        for op in OPS:
            got = compare(u, t, op)
            assert isinstance(got, np.ndarray) and got.dtype == bool and got.shape == u.shape
            np.testing.assert_array_equal(got, _reference(u, t, op), err_msg=f"{np.dtype(dtype)} {op} {t!r}")
    grid = u.reshape(-1, 1) if u.size % 2 else u.reshape(-1, 2)  # any shape
    assert exceeds(grid, 0.3, inclusive=False).shape == grid.shape


def torch_values(dtype):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.tensor([False, True, True, False])
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        near = [v + d for t in map(_exact_threshold, THRESHOLDS) if -(2**70) < t < 2**70
                for v in (math.floor(t), math.ceil(t)) for d in (-1, 0, 1)]
        near = [v for v in near if info.min <= v <= info.max]
        rand = torch.randint(info.min, info.max, (64,), generator=g, dtype=dtype)
        return torch.cat([torch.tensor([info.min, info.max, 0] + near, dtype=dtype), rand])
    info = torch.finfo(dtype)
    inf = torch.tensor(math.inf, dtype=dtype)
    special = torch.tensor([0.0, -0.0, info.tiny, info.max, -info.max, math.inf, -math.inf, math.nan, 1.0],
                           dtype=dtype)
    subnormal = torch.nextafter(torch.zeros((), dtype=dtype), inf).reshape(1)  # the smallest positive value
    noise = torch.cat([torch.randn(64, generator=g, dtype=torch.float64),
                       torch.randn(32, generator=g, dtype=torch.float64) * 1e4]).to(dtype)
    near = []
    for t in THRESHOLDS:
        try:
            t64 = float(t)
        except OverflowError:
            t64 = math.inf if t > 0 else -math.inf
        r = torch.tensor(t64, dtype=torch.float64).to(dtype)
        near.append(r)
        for direction in (-inf, inf):
            x = r
            for _ in range(2):
                x = torch.nextafter(x, direction)
                near.append(x)
    return torch.cat([special, subnormal, -subnormal, noise, torch.stack(near)])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                                   torch.uint8, torch.int32, torch.int64, torch.bool])
def test_exceeds_and_below_equal_the_exact_comparison_torch(dtype):
    u = torch_values(dtype)
    for t in THRESHOLDS:
        for op in OPS:
            got = compare(u, t, op)
            assert isinstance(got, torch.Tensor) and got.dtype == torch.bool and got.shape == u.shape
            np.testing.assert_array_equal(got.numpy(), _reference(u, t, op), err_msg=f"{dtype} {op} {t!r}")


def test_exceeds_is_what_naive_comparisons_get_wrong():
    """NumPy and torch round the threshold to the map's dtype first: float32(0.3) = 0.30000001 is not ``> 0.3``
    to them, float32(0.7) = 0.69999999 is ``>= 0.7``; the exact comparison says the opposite, as in float64."""
    u = np.array([0.3, 0.7], dtype=np.float32)
    assert (u > 0.3).tolist() == [False, True] and exceeds(u, 0.3, inclusive=False).tolist() == [True, True]
    assert (u >= 0.7).tolist() == [False, True] and exceeds(u, 0.7, inclusive=True).tolist() == [False, False]
    assert (u <= 0.3).tolist() == [True, False] and below(u, 0.3, inclusive=True).tolist() == [False, False]
    assert (u < 0.7).tolist() == [True, False] and below(u, 0.7, inclusive=False).tolist() == [True, True]
    ut = torch.from_numpy(u)
    assert exceeds(ut, 0.3, inclusive=False).tolist() == [True, True]
    assert exceeds(ut, 0.7, inclusive=True).tolist() == [False, False]
    # beyond the range: a float16 inf exceeds 1e6, nothing of an int8 map reaches 1000, everything exceeds -1000
    assert exceeds(np.array([np.inf, 65504], np.float16), 1e6, inclusive=False).tolist() == [True, False]
    assert not exceeds(np.array([127], np.int8), 1000, inclusive=True).any()
    assert exceeds(torch.tensor([-128], dtype=torch.int8), -1000, inclusive=False).all()


def test_exceeds_and_below_complement_each_other_but_for_nan():
    u = numpy_values(np.float32, np.random.default_rng(1))
    nan = np.isnan(u)
    for t in (0.3, 0.7, -1e300, math.inf):
        for inclusive in (False, True):
            above = exceeds(u, t, inclusive=inclusive)
            np.testing.assert_array_equal(below(u, t, inclusive=not inclusive)[~nan], ~above[~nan])
            assert not above[nan].any() and not below(u, t, inclusive=not inclusive)[nan].any()


def test_exceeds_refuses_what_it_cannot_compare():
    u = np.zeros(3, dtype=np.float32)
    for nan in (math.nan, np.float32("nan"), np.longdouble("nan")):
        with pytest.raises(ValueError, match="threshold must not be NaN"):
            exceeds(u, nan, inclusive=False)
    for bad in ("0.5", None, True, np.bool_(False), 0.5j):
        with pytest.raises(TypeError, match="threshold must be a real number"):
            exceeds(u, bad, inclusive=False)
    with pytest.raises(TypeError, match="u must be a numpy array or a torch tensor"):
        exceeds([0.1, 0.2], 0.5, inclusive=False)
    with pytest.raises(TypeError, match="u must be a real"):
        exceeds(np.zeros(2, dtype=complex), 0.5, inclusive=False)
    with pytest.raises(TypeError, match="u must be a real"):
        below(torch.zeros(2, dtype=torch.complex64), 0.5, inclusive=False)


def test_is_int_and_real_number():
    assert is_int(3) and is_int(np.int64(3)) and is_int(np.uint8(0))
    assert not any(is_int(v) for v in (True, np.bool_(True), 3.0, np.float32(3), "3", None))
    assert real_number(np.float32(0.5), "x") == 0.5 and real_number(2, "x") == 2.0
    for bad in (True, np.bool_(True), "0.5", None, [1.0]):
        with pytest.raises(TypeError, match=r"x must be a real number, got"):
            real_number(bad, "x")
        with pytest.raises(ValueError, match=r"y must be a real number, got"):
            real_number(bad, "y", ValueError)


def _argmax_reference(x: np.ndarray, axis: int) -> np.ndarray:
    """The first index of the largest value along ``axis``, a NaN counting as larger than any number (the first NaN
    wins): a plain loop over the other axes."""
    moved = np.moveaxis(x, axis, -1)
    out = np.empty(moved.shape[:-1], dtype=np.int64)
    for idx in np.ndindex(*moved.shape[:-1]):
        row = moved[idx]
        nan = np.flatnonzero(np.isnan(row))
        out[idx] = nan[0] if nan.size else int(np.flatnonzero(row == row.max())[0])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_argmax_is_torch_argmax_with_ties_and_nan(dtype, dim):
    """The class-axis argmax (``x.max(dim).indices``, faster than ``torch.argmax`` on the CPU) equals a brute-force
    reference and ``torch.argmax``: ties go to the first index, a NaN beats every number and the first NaN wins."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 3, (4, 5, 6), generator=g).to(dtype)  # many ties
    if dtype.is_floating_point:
        x[1, 2, :] = float("nan")
        x[2, :, 4] = float("nan")
        x[0, 0, 0] = float("nan")
    ref = torch.from_numpy(_argmax_reference(x.double().numpy(), dim))
    assert torch.equal(argmax(x, dim), ref)
    assert torch.equal(argmax(x, dim), torch.argmax(x, dim))
    kept = argmax(x, dim, keepdim=True)
    assert kept.shape == torch.argmax(x, dim, keepdim=True).shape and torch.equal(kept.squeeze(dim), ref)


@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_of_a_numpy_array_is_np_argmax(keepdim):
    """The nnU-Net export takes the argmax of its resampled mean probabilities, a numpy array: ``ndarray.max`` has no
    ``dim`` (TypeError, every ``segmentation_from="probabilities"`` export failed); numpy gets ``np.argmax``."""
    x = np.array([[[0.2, 0.5], [0.5, np.nan]], [[0.9, 0.5], [0.1, 1.0]]], dtype=np.float32)
    out = argmax(x, 0, keepdim=keepdim)
    assert isinstance(out, np.ndarray) and out.dtype == np.int64
    np.testing.assert_array_equal(out, np.argmax(x, axis=0, keepdims=keepdim))
    np.testing.assert_array_equal(out, argmax(torch.from_numpy(x), 0, keepdim=keepdim).numpy())


@pytest.mark.cuda
def test_argmax_on_the_device_equals_the_cpu(cuda_device):
    g = torch.Generator().manual_seed(4)
    x = (torch.randint(0, 4, (2, 5, 33, 17, 9), generator=g) / 3.0).to(torch.float32)
    x[0, 3, ::5] = float("nan")
    assert torch.equal(argmax(x.to(cuda_device), 1).cpu(), argmax(x, 1))
    assert torch.equal(argmax(x.to(cuda_device), 1).cpu(), torch.argmax(x, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool, torch.int16, torch.int64,
                                   torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim", [None, 0, 2, -1, (0, 2)])
def test_sum_f64_is_torch_float64_sum(dtype, dim):
    """NumPy's float64 reduction on the CPU (and torch's elsewhere) against ``x.sum(dim, dtype=torch.float64)``:
    the same shape, dtype and values, on a permuted (non-contiguous) input."""
    from monai_unc._utils import sum_f64

    g = torch.Generator().manual_seed(1)
    x = (torch.rand(5, 6, 7, generator=g, dtype=torch.float64) * 10).to(dtype).permute(2, 0, 1)
    ref = x.sum(dtype=torch.float64) if dim is None else x.sum(dim=dim, dtype=torch.float64)
    out = sum_f64(x, dim)
    assert out.dtype == torch.float64 and out.shape == ref.shape and out.device == x.device
    torch.testing.assert_close(out, ref, rtol=1e-14, atol=0)
    w = torch.ones(3, requires_grad=True)  # a gradient is kept (torch's sum)
    sum_f64(w).backward()
    assert torch.equal(w.grad, torch.ones(3))


def test_check_labels_reports_the_true_value_of_a_uint64_label_beyond_int64():
    """A uint64 label 2**63 + 1 was cast to int64 and reported as "got minimum -9223372036854775807" (a wrapped value
    the map does not hold); now its true value, also as the largest of several, from numpy or torch, strided too."""
    from monai_unc.metrics import dice

    labels = np.array([[0, 2**63 + 1, 7, 2**64 - 2]], dtype=np.uint64)
    for given in (labels, torch.from_numpy(labels), torch.from_numpy(labels)[:, :2]):
        top = 2**64 - 2 if given.shape[-1] == 4 else 2**63 + 1
        for bounds in (True, False):
            with pytest.raises(ValueError, match=rf"^labels holds label {top} \(uint64\), above .*2\*\*63 - 1"):
                check_labels(to_tensor(given, "labels"), bounds=bounds)
    with pytest.raises(ValueError, match=r"^pred holds label 18446744073709551614 \(uint64\)"):
        dice(labels, np.zeros_like(labels))
    fits = np.array([0, 2**63 - 1, 3], dtype=np.uint64)  # the largest int64: held exactly
    assert check_labels(to_tensor(fits, "labels")).tolist() == [0, 2**63 - 1, 3]
    with pytest.raises(ValueError, match=r"holds class 9223372036854775807 but only 4 classes"):
        check_labels(to_tensor(fits, "labels"), num_classes=4)


def test_link_target_names_the_target_or_a_question_mark(tmp_path):
    from monai_unc._utils import link_target

    link = tmp_path / "scan.nii.gz"
    os.symlink(tmp_path / "gone.nii.gz", link)
    assert link_target(link) == str(tmp_path / "gone.nii.gz")
    assert link_target(tmp_path / "not_a_link") == "?"
    assert link_target(tmp_path / "missing" / "x") == "?"


def test_refusing_keeps_the_parameter_a_check_inside_named():
    """Reading a --rule file checks its signature against --trusted-keys: a refused key file names --trusted-keys,
    not the rule (found by a probe of every command: ``triage --trusted-keys missing`` said ``--rule: ...``)."""
    from monai_unc._utils import parameter_error, refusing

    with pytest.raises(ValueError) as e, refusing("rule"):
        raise parameter_error(ValueError("--trusted-keys k.pub: no such file or folder"), "trusted_keys")
    assert e.value.parameter == "trusted_keys"
    with pytest.raises(FileNotFoundError) as e, refusing("rule"):
        raise FileNotFoundError("referral rule not found: r.json")
    assert e.value.parameter == "rule"
