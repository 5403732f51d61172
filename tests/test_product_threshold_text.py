"""The printed referral rule (``product.ThresholdText``) is the rule: rounded toward referral, every shown score
reads on its side of the printed bound."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monai_unc.product import ThresholdText


def _check(threshold: float, scores: list[float]) -> None:
    t = ThresholdText.choose(threshold, scores)
    printed = float(t.bound_text())
    assert printed <= t.bound  # read as a rule on any score, the printed bound never accepts a referred score
    for s in scores:
        accepted = s <= threshold
        assert t.accepts(s) == accepted
        assert (s < printed if t.strict else s <= printed) == accepted, (threshold, s, t)
        # the texts as printed read on the right side of each other
        shown = float(t.score(s))
        if t.strict:
            assert (shown < printed) if accepted else (shown >= printed), (threshold, s, t, t.score(s))
        else:
            assert (shown <= printed) if accepted else (shown > printed), (threshold, s, t, t.score(s))


def test_a_threshold_printed_to_nearest_would_accept_a_referred_score() -> None:
    # a risk-controlled threshold just below the lowest refused calibration score 0.21696 (honesty review): the
    # nearest 4-digit text "0.217" read as a rule accepts that score and anything up to 0.217
    threshold = math.nextafter(0.21696, -math.inf)
    t = ThresholdText.choose(threshold, [0.1, 0.5])
    assert float(t.bound_text()) <= threshold
    assert not (0.21696 < float(t.bound_text()) if t.strict else 0.21696 <= float(t.bound_text()))
    assert t.bound_text() == "0.2169"
    # the double nearest 1e-7 lies below 1e-7 but reads back as itself: no needless rounding down
    assert ThresholdText.choose(1e-7).bound_text() == "1e-07"


@settings(max_examples=300, deadline=None)
@given(
    threshold=st.floats(-10, 10, allow_nan=False, allow_infinity=False),
    offsets=st.lists(st.floats(-1e-3, 1e-3, allow_nan=False), max_size=6),
    ulps=st.lists(st.integers(-3, 3), max_size=4),
)
def test_printed_rule_decides_every_shown_score_as_the_rule(threshold, offsets, ulps) -> None:
    scores = [threshold + o for o in offsets]
    for k in ulps:
        s = threshold
        for _ in range(abs(k)):
            s = math.nextafter(s, math.inf if k > 0 else -math.inf)
        scores.append(s)
    _check(threshold, scores)


def test_random_cohorts_of_scores() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        scores = list(rng.random(20) * 10.0 ** rng.integers(-8, 3))
        threshold = math.nextafter(float(rng.choice(scores)), -math.inf)
        _check(threshold, scores)


def test_the_score_plot_legend_states_the_rule_rounded_toward_referral() -> None:
    from monai_unc.report.triage import plot_score_distribution

    threshold = math.nextafter(0.21696, -math.inf)
    fig = plot_score_distribution([0.1, 0.21696, 0.3], [0.1, 0.5], [True, False], threshold)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "threshold: accept ≤ 0.2169" in labels, labels  # was "threshold 0.217"
