"""Hostile tests of the case-wise tasks (monai_unc.metrics.casewise) from the selective-prediction review."""

from __future__ import annotations

import numpy as np

from monai_unc.evaluation import triage_order
from monai_unc.metrics import fill_undefined_scores


def test_undefined_score_ranks_above_a_huge_defined_score():
    """max + 1 == max from 2**53 on: an undefined score tied with the most uncertain case and the triage order, which
    breaks ties by case id, referred the defined case "a" before the undefined "b"."""
    for top in (1e17, 2.0**53, -1e17, 1e300):
        filled = fill_undefined_scores(np.array([top, np.nan, -np.inf, 0.0]))
        assert filled[1] > top and filled[2] > top and filled[1] == filled[2]
        assert np.isfinite(filled).all()
    assert triage_order(["a", "b"], np.array([1e17, np.nan])) == [1, 0]
    np.testing.assert_array_equal(fill_undefined_scores(np.array([0.2, np.nan, 0.5])), [0.2, 1.5, 0.5])
