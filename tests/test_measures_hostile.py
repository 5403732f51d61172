"""Hostile input to the measure helpers of ``monai_unc.measures``: mismatched, NaN or reversed entropies and
moments fail with one ValueError naming the argument (they were clamped before)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.measures import mutual_information_from_entropies, variance_from_moments


def test_mutual_information_from_entropies_validates():
    pe = torch.full((1, 1, 4, 4), 0.6)
    ee = torch.full((1, 1, 4, 4), 0.4)
    torch.testing.assert_close(mutual_information_from_entropies(pe, ee), pe - ee)
    with pytest.raises(ValueError, match="pe and ee must have the same shape"):
        mutual_information_from_entropies(pe, ee[..., :3])
    with pytest.raises(ValueError, match="ee"):
        mutual_information_from_entropies(pe, torch.full_like(ee, float("nan")))
    with pytest.raises(ValueError, match="ee exceeds pe"):
        mutual_information_from_entropies(ee, pe)  # swapped: EE > PE cannot come from the same samples
    # rounding below zero is still clamped
    assert float(mutual_information_from_entropies(pe, pe + 1e-6).max()) == 0.0


def test_variance_from_moments_validates():
    mean = torch.full((1, 2, 3, 3), 0.5)
    np.testing.assert_allclose(variance_from_moments(mean, mean).numpy(), 0.25)  # E[p^2] = E[p] for 0/1 samples
    with pytest.raises(ValueError, match="mean and mean_sq must have the same shape"):
        variance_from_moments(mean, mean[:, :1])
    with pytest.raises(ValueError, match="mean_sq"):
        variance_from_moments(mean, torch.full_like(mean, float("nan")))
