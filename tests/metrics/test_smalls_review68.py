"""Review 68 small items: each test failed before its fix."""

import warnings

import torch

from monai_unc.metrics import CalibrationMetric


def _rounded(caught: list) -> list[str]:
    return [str(w.message) for w in caught if "does not divide" in str(w.message)]


def test_calibration_metric_says_rounded_bin_edges_once_per_object():
    """``reduction="pooled"`` with ``n_bins=7`` said the rounded-edges warning at the first update, again for each
    binned metric and again at aggregation: now once per metric object."""
    probs = torch.tensor([[[[0.9, 0.2]], [[0.1, 0.8]]]])
    y = torch.tensor([[[[0, 1]]]])
    for reduction in ("pooled", "mean"):
        metric = CalibrationMetric(num_classes=2, metrics=("ece", "ace", "nll"), n_bins=7, reduction=reduction)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            metric(probs, y)
            metric(probs, y)
            metric.aggregate()
            metric.reset()
            metric(probs, y)
            metric.aggregate()
        assert len(_rounded(caught)) == 1, (reduction, _rounded(caught))
    divisor = CalibrationMetric(num_classes=2, metrics=("ece",), n_bins=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        divisor(probs, y)
        divisor.aggregate()
    assert _rounded(caught) == []
