"""Hostile review 54 of the voxel-wise discrimination metrics (:mod:`monai_unc.metrics.discrimination`)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from monai_unc.metrics.discrimination import auroc, avu, error_auprc, error_auroc


@pytest.mark.parametrize("fn", [error_auroc, error_auprc, avu])
def test_huge_finite_uncertainties_give_no_overflow_warning(fn):
    """Finite values whose float64 sum overflows are valid: the finiteness check warned "overflow encountered"."""
    u = np.array([1e308, 1e308, -1e308, 0.1, 1e308])
    e = np.array([1, 0, 0, 0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = fn(u, e, per_case=False)
    if fn is error_auroc:
        assert value == roc_auc_score(e, u)


def test_auroc_of_huge_scores_gives_no_overflow_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert auroc([1e308, 1e308], [1e308, 0.0]) == 0.75


def test_huge_values_with_a_nan_are_still_refused():
    with pytest.raises(ValueError, match="uncertainty contains 1 non-finite"):
        error_auroc(np.array([1e308, 1e308, np.nan]), np.array([1, 0, 0]), per_case=False)
