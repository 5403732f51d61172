"""Hostile review 69: the calibration metrics' warnings point at the caller's line.

``calibration_metrics`` said its rounded bin edges at a line of the library since it calls
``calibration_metrics_core``, and the public ECE family, NLL and Brier said theirs (and their NaN values) at a line of
the library or of its argument-name decorator.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from monai_unc.metrics import ConfidenceHistogram
from monai_unc.metrics.calibration.functional import (
    ace,
    all_label_ece,
    brier,
    calibration_metrics,
    calibration_metrics_core,
    classwise_ece,
    ece,
    mce,
    nll,
    reliability_curve,
    uce,
)


def _data():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(2, 3, 4, 4, generator=g), 1)
    y = torch.randint(0, 3, (2, 4, 4), generator=g)
    return p, y, ConfidenceHistogram(3, n_fine_bins=64, per_case=True).update(p, y)


def _caught(call) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return caught


def _at_this_file(caught) -> None:
    assert caught, "no warning"
    for w in caught:
        assert w.filename == __file__, (w.filename, w.lineno, str(w.message))


def test_calibration_metrics_and_its_core_warn_at_the_callers_line():
    _, _, hist = _data()
    rounding = _caught(lambda: calibration_metrics(hist, ("ece", "ace", "nll"), n_bins=7, per_case=True))
    assert len(rounding) == 1  # once per call
    _at_this_file(rounding)
    _at_this_file(_caught(lambda: calibration_metrics_core(hist, ("ece", "nll"), n_bins=7, per_case=True)))
    _at_this_file(_caught(lambda: calibration_metrics(hist, ("ece", "ace"), n_bins=8, min_bin_count=10**9)))


@pytest.mark.parametrize("fn", [ece, classwise_ece, all_label_ece, ace, mce, uce])
def test_binned_metrics_warn_at_the_callers_line(fn):
    p, y, hist = _data()
    _at_this_file(_caught(lambda: fn(p, y, n_bins=7)))  # rounded bin edges
    _at_this_file(_caught(lambda: fn(hist, n_bins=8, min_bin_count=10**9)))  # NaN: no bin kept


@pytest.mark.parametrize("fn", [nll, brier])
def test_scalar_metrics_warn_at_the_callers_line(fn):
    hist = ConfidenceHistogram(num_classes=2, per_case=True)
    hist.update(torch.tensor([[[0.9], [0.1]]]), torch.tensor([[0]]), mask=torch.tensor([[False]]))  # no voxel
    _at_this_file(_caught(lambda: fn(hist, per_case=True)))


def test_reliability_curve_warns_at_the_callers_line():
    p, y, _ = _data()
    _at_this_file(_caught(lambda: reliability_curve(p, y, n_bins=7)))
