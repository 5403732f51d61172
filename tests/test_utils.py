"""The shared input checks and reductions of ``monai_unc._utils``: per-case reduction when no value is valid, the
probability tolerance of low-precision dtypes, the errors of the probability and per-axis checks."""

import warnings

import numpy as np
import pytest
import torch

from monai_unc._utils import (
    check_probabilities,
    check_unit_interval,
    normalize_spacing,
    per_axis_mm,
    probability_tolerance,
    reduce_case_values,
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
    with pytest.raises(ValueError, match="must sum to 1 .* pass probabilities, not logits"):
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
