"""The shared input checks and reductions of ``monai_unc._utils``: per-case reduction when no value is valid, the
probability tolerance of low-precision dtypes."""

import warnings

import numpy as np
import pytest
import torch

from monai_unc._utils import check_probabilities, probability_tolerance, reduce_case_values
from monai_unc.measures import entropy
from monai_unc.metrics.calibration import ece
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
