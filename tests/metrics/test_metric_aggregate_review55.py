"""``aggregate(reduction=...)`` of the ambiguity, QU-BraTS and calibration metric classes (review 55).

The constructors checked their reduction by name; ``aggregate`` did not: ``"foo"`` escaped as MONAI's error without
the argument's name and ``""`` fell back to the constructor's reduction without a word. The NaN warnings of
``aggregate`` point at its caller (``GEDMetric`` overrode ``aggregate``, one frame more).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics import CalibrationMetric, GEDMetric, NCCMetric, QUBraTSMetric

MONAI_CLASSES = [
    lambda: NCCMetric(),
    lambda: GEDMetric(),
    lambda: GEDMetric(return_terms=True),
    lambda: QUBraTSMetric(),
]


@pytest.mark.parametrize("make", MONAI_CLASSES)
@pytest.mark.parametrize("reduction", ["foo", "", 3, True])
def test_aggregate_checks_its_reduction_by_name(make, reduction):
    metric = make()
    with pytest.raises(ValueError, match="reduction must be one of"):
        metric.aggregate(reduction)


@pytest.mark.parametrize("reduction", ["", "foo", 3, ["mean"]])
def test_calibration_metric_aggregate_checks_its_reduction(reduction):
    metric = CalibrationMetric(metrics=("ece",))
    with pytest.raises(ValueError, match="reduction must be 'pooled' or 'mean'"):
        metric.aggregate(reduction)


def test_ged_with_terms_still_refuses_reductions_across_its_terms_at_aggregate():
    metric = GEDMetric(return_terms=True)
    rng = np.random.default_rng(0)
    metric(torch.from_numpy((rng.random((2, 3, 5, 5)) > 0.5).astype(np.int64)),
           torch.from_numpy((rng.random((2, 2, 5, 5)) > 0.5).astype(np.int64)))
    with pytest.raises(ValueError, match="reduction='mean' .* return_terms=True"):
        metric.aggregate("mean")
    assert metric.aggregate("none").shape == (2, 4)
    # the default and an explicit equal reduction agree (brute force: the per-term mean of the table)
    np.testing.assert_allclose(metric.aggregate().numpy(), metric.aggregate("none").numpy().mean(axis=0), atol=1e-7)
    np.testing.assert_allclose(metric.aggregate("mean_batch").numpy(), metric.aggregate().numpy(), atol=0)


@pytest.mark.parametrize("make", MONAI_CLASSES + [lambda: CalibrationMetric(metrics=("ece",))])
def test_no_case_warning_points_at_the_caller_of_aggregate(make):
    metric = make()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metric.aggregate()
    assert caught and all(w.filename == __file__ for w in caught), [w.filename for w in caught]
