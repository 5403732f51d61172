"""Hostile review 57 of the calibration metrics: defects found against independent references."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics import ConfidenceHistogram, brier, calibration_metrics, nll


def _probs_case(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    probs = torch.softmax(torch.randn(1, 2, 6, 6, generator=g, dtype=torch.float64), 1)
    return probs, torch.randint(0, 2, (1, 6, 6), generator=g)


def _reference(probs: torch.Tensor, target: torch.Tensor) -> tuple[float, float]:
    """NLL and Brier of one case by brute force over its voxels (numpy)."""
    p = probs.numpy()[0].reshape(2, -1).T
    y = target.numpy().reshape(-1)
    p_true = p[np.arange(len(y)), y]
    return float(np.mean(-np.log(np.maximum(p_true, 1e-15)))), float(np.mean(((p - np.eye(2)[y]) ** 2).sum(1)))


def _uncertainty_map_case(seed: int) -> ConfidenceHistogram:
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(1, 1, 8, 8, generator=g)
    return ConfidenceHistogram.from_uncertainty(u, torch.rand(1, 8, 8, generator=g) < 0.3)


def test_nll_and_brier_of_an_uncertainty_map_histogram_are_nan_not_zero():
    # found by hostile review 57: a histogram of an uncertainty map holds no probabilities, yet nll and brier gave
    # 0.0, a perfect score, through calibration_metrics as well
    hist = _uncertainty_map_case(0)
    for fn in (nll, brier):
        with pytest.warns(UserWarning, match="NaN"):
            assert math.isnan(fn(hist))
        with pytest.warns(UserWarning, match="NaN"):
            assert np.isnan(fn(hist, per_case=True)).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        res = calibration_metrics(hist, ["nll", "brier", "uce"])
    assert math.isnan(res["nll"]) and math.isnan(res["brier"]) and not math.isnan(res["uce"])


def test_nll_and_brier_of_probabilities_merged_with_an_uncertainty_map_count_only_the_probability_voxels():
    # found by hostile review 57: the map's 64 voxels entered the denominator of the pooled NLL and Brier of the
    # 36 probability voxels (0.883 read as 0.318), and the map's case scored 0.0
    probs, target = _probs_case(1)
    ref_nll, ref_brier = _reference(probs, target)
    hist = ConfidenceHistogram(2).update(probs, target).merge(_uncertainty_map_case(2))
    assert nll(hist) == pytest.approx(ref_nll, rel=1e-12)
    assert brier(hist) == pytest.approx(ref_brier, rel=1e-12)
    with pytest.warns(UserWarning, match="NaN"):
        per_case = nll(hist, per_case=True)
    assert per_case[0] == pytest.approx(ref_nll, rel=1e-12) and np.isnan(per_case[1])


@pytest.mark.parametrize("weighted", [False, True])
def test_nll_and_brier_of_probability_histograms_unchanged(weighted):
    probs, target = _probs_case(3)
    w = torch.rand(1, 6, 6, generator=torch.Generator().manual_seed(4)) if weighted else None
    p = probs.numpy()[0].reshape(2, -1).T
    y = target.numpy().reshape(-1)
    wn = np.ones(len(y)) if w is None else w.numpy().reshape(-1).astype(np.float64)
    ref_nll = float((wn * -np.log(p[np.arange(len(y)), y])).sum() / wn.sum())
    ref_brier = float((wn * ((p - np.eye(2)[y]) ** 2).sum(1)).sum() / wn.sum())
    assert nll(probs, target, weights=w) == pytest.approx(ref_nll, rel=1e-12)
    assert brier(probs, target, weights=w) == pytest.approx(ref_brier, rel=1e-12)
    assert nll(probs, target, weights=w, per_case=True)[0].item() == pytest.approx(ref_nll, rel=1e-12)


def test_classwise_ece_per_class_without_background_holds_labels_one_to_c_minus_one():
    # the docstring said (C,) with per_class; include_background=False gives the C - 1 foreground labels
    from monai_unc.metrics import classwise_ece

    probs, target = _probs_case(5)
    probs = torch.cat([probs * 0.5, probs * 0.5], 1)  # 4 classes
    every = classwise_ece(probs, target, n_bins=5, per_class=True)
    fg = classwise_ece(probs, target, n_bins=5, per_class=True, include_background=False)
    assert every.shape == (4,) and fg.shape == (3,)
    assert torch.equal(fg, every[1:])
    per_case = classwise_ece(probs, target, n_bins=5, per_class=True, include_background=False, per_case=True)
    assert per_case.shape == (1, 3)
