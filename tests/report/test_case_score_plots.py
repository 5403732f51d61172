"""The case-score figures of the report refuse inputs that do not pair one value per case.

Found by hostile testing: ``plot_uncertainty_histograms`` failed with numpy's ``IndexError`` on scores and Dice of
different lengths, ``plot_scores_by_shift`` with an ``IndexError`` on fewer labels than scores and silently drew only
the first labels of more, and ``plot_referral_curve`` named its ``scores`` "uncertainty" in its errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.report.plots import plot_referral_curve, plot_scores_by_shift, plot_uncertainty_histograms


def test_histograms_refuse_scores_and_dice_of_other_lengths():
    with pytest.raises(ValueError, match="scores and dice"):
        plot_uncertainty_histograms(np.array([0.1, 0.2]), np.array([0.5, 0.9, 0.1]), 0.7)
    with pytest.raises(ValueError, match="scores and dice"):
        plot_uncertainty_histograms(np.ones((2, 2)), np.ones((2, 2)), 0.7)


@pytest.mark.parametrize("shifts", [["a"], ["a", "b", "c"]])
def test_scores_by_shift_refuses_labels_not_one_per_score(shifts):
    with pytest.raises(ValueError, match="shifts"):
        plot_scores_by_shift(np.array([0.1, 0.2]), shifts, ["none"], "u")


def test_referral_curve_names_its_own_arguments():
    with pytest.raises(ValueError, match="^scores contains 1 non-finite"):
        plot_referral_curve(np.array([0.9, np.nan]), np.array([0.2, 0.9]))
    with pytest.raises(ValueError, match="^scores and dice must have the same length"):
        plot_referral_curve(np.array([0.9, 0.1]), np.array([0.2, 0.9, 0.5]))


def test_matching_inputs_still_draw():
    s, d = np.array([0.9, np.nan, 0.5]), np.array([0.2, 0.9, 0.6])
    fig = plot_uncertainty_histograms(s, d, 0.5)
    assert "good: Dice >= 0.5 (n=1)" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    fig = plot_scores_by_shift(s, ["noise", "none", "noise"], ["none"], "u")  # the NaN score: its group left out
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["noise"]
