"""The referral plot's oracle curve says nothing about the user's scores (review 67)."""

from __future__ import annotations

import warnings

import numpy as np

from monai_unc.report.plots import plot_referral_curve


def test_equal_dice_does_not_warn_that_distinct_scores_are_tied():
    """Found by review 67: with every case of one Dice (all perfect, a small cohort) the oracle's ranking, which
    refers by Dice, is all ties, and the plot warned "referral_curve: all 3 scores are tied, so the scores cannot
    rank the cases" about three distinct uncertainty scores (lesions' retention curve silenced the same warning in
    review 63)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot_referral_curve(np.array([0.1, 0.2, 0.3]), np.array([1.0, 1.0, 1.0]), budget=0.3)
    assert not [str(w.message) for w in caught if "tied" in str(w.message)]


def test_tied_scores_still_warn():
    """The user's own scores all tied still warn (once per curve of those scores)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot_referral_curve(np.array([0.2, 0.2, 0.2]), np.array([0.9, 0.5, 0.7]))
    assert [w for w in caught if "all 3 scores are tied" in str(w.message)]
