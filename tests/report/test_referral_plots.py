"""The referral curve's figure against the numbers of the tables.

Found by hostile testing (see each test).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np

from monai_unc.metrics.selective import referral_curve
from monai_unc.report.plots import plot_referral_curve


def _legend(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_a_budget_that_refers_every_case_is_said_not_written_nan():
    """Found by hostile testing: one case with a 10 % budget (ceil(0.1 * 1) = 1 referred) was labelled "Dice nan"
    next to a table that shows the missing Dice as a dash, with a warning from the drawing."""
    for scores, dice, budget in (([0.3], [0.8], 0.1), ([0.9, 0.1, 0.5, 0.2], [0.2, 0.9, 0.6, 0.8], 0.9)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fig = plot_referral_curve(np.array(scores), np.array(dice), budget=budget)
        texts = _legend(fig)
        assert not any("nan" in t for t in texts), texts
        assert any(t.endswith("every case referred") for t in texts), texts


def test_the_budget_dice_is_written_as_the_table_writes_it():
    """Found by hostile testing: a retained Dice of 0.0004 read "Dice 0.000" (the table: 0.0004)."""
    scores, dice = np.array([0.9, 0.1, 0.5]), np.array([0.9, 0.0004, 0.0004])
    fig = plot_referral_curve(scores, dice, budget=0.2)
    expected = float(referral_curve(scores, dice, taus=[0.2]).value[0])
    assert expected == 0.0004
    assert "budget 20%: Dice 0.0004" in _legend(fig)
    marks = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "D"]
    assert [float(v) for v in marks[0].get_ydata()] == [expected]


def test_the_drawn_curve_is_the_referral_curve():
    rng = np.random.default_rng(3)
    scores, dice = rng.random(11), rng.random(11)
    scores[[2, 5, 7]] = 0.5  # ties at the cut
    fig = plot_referral_curve(scores, dice)
    ref = referral_curve(scores, dice)
    line = next(ln for ln in fig.axes[0].get_lines() if ln.get_label() == "by uncertainty")
    np.testing.assert_allclose(line.get_xdata(), np.arange(11) / 11)
    np.testing.assert_allclose(line.get_ydata(), ref.value)
    # brute force: the mean over every order of the tied cases (each order equally likely)
    tied = [2, 5, 7]
    for k in range(11):
        means = []
        for perm in itertools.permutations(tied):
            rank = {c: i for i, c in enumerate(perm)}
            order = sorted(range(11), key=lambda c: (-scores[c], rank.get(c, 0)))
            means.append(dice[order[k:]].mean())
        assert np.isclose(line.get_ydata()[k], np.mean(means))
