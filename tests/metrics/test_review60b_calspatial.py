"""Hostile review 60 (calibration and spatial metrics): checks against the papers' definitions and brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.evaluation import unit_scale
from monai_unc.measures import variance_from_moments


@pytest.mark.parametrize(("num_classes", "split_value", "top"), [(2, 0.09, 0.25), (3, 0.06, 2 / 9), (4, 0.045, 0.1875)])
def test_variance_scale_claims_of_the_spatial_docs(num_classes, split_value, top):
    """docs/spatial_metrics.md: the variance BA-ECE / SPACE read unrescaled shrinks with C and tops at (C-1)/C**2."""
    split = torch.zeros(10, 1, num_classes, 1, dtype=torch.float64)  # samples: one-hot, 9 of label 0, 1 of label 1
    split[:9, 0, 0] = 1
    split[9, 0, 1] = 1
    v = float(variance_from_moments(split.mean(0), (split**2).mean(0)).reshape(-1)[0])
    assert v == pytest.approx(split_value, abs=1e-12)
    even = torch.zeros(num_classes, 1, num_classes, 1, dtype=torch.float64)  # one sample per label: the maximum
    even[torch.arange(num_classes), 0, torch.arange(num_classes)] = 1
    v_top = float(variance_from_moments(even.mean(0), (even**2).mean(0)).reshape(-1)[0])
    assert v_top == pytest.approx(top, abs=1e-12) == pytest.approx((num_classes - 1) / num_classes**2)
    u = np.array([v, v_top])
    assert unit_scale(u, "variance", num_classes) is u  # scored as it is, as the docs say
