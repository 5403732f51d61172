"""The triage page's score distribution against the rule's numbers.

Found by hostile testing: the legend read "calibration cases (n=40)" under a header of 45 calibration cases, 5 of them
without a defined score (not on the score axis, but counted by the rule as referred).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from monai_unc.report import triage as triage_page
from monai_unc.report.triage import plot_score_distribution


def _legend(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_the_legend_counts_the_calibration_cases_without_a_score():
    cal = np.linspace(0.1, 0.5, 40)
    fig = plot_score_distribution(cal, [0.2, 0.6], [True, False], 0.45, n_undefined=5)
    texts = _legend(fig)
    assert "calibration cases (n=40 of 45; 5 without a defined score not drawn)" in texts, texts
    # the grey bars are numpy's histogram of the defined scores on the drawn edges
    (bars,) = fig.axes[0].containers  # the histogram's bars
    edges = np.array([p.get_x() for p in bars] + [bars[-1].get_x() + bars[-1].get_width()])
    heights = np.array([p.get_height() for p in bars])
    np.testing.assert_array_equal(heights, np.histogram(cal, edges)[0])
    assert heights.sum() == 40


def test_every_calibration_score_defined_keeps_the_short_legend():
    fig = plot_score_distribution([0.1, 0.2, 0.3], [0.2], [True], 0.25)
    assert "calibration cases (n=3)" in _legend(fig)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_a_bad_count_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="n_undefined"):
        plot_score_distribution([0.1, 0.2], [0.2], [True], 0.25, n_undefined=bad)


def test_the_page_draws_the_rules_undefined_calibration_cases(tmp_path, monkeypatch):
    from monai_unc.evaluation.triage import ReferralRule

    rule = ReferralRule(score="predictive_entropy_fg_mean", threshold=0.5, feasible=True, target_risk=0.2, delta=0.1,
                        method="sgr", risk="failure", failure_dice=0.8, calibration_scores=(0.1, 0.9),
                        calibration_cases=("k0", "k1", "k2"), n_undefined=1, bound=0.1, coverage=1.0,
                        observed_risk=0.0, n_candidates=1, num_classes=2)
    (d,) = rule.apply([0.25])
    doc = {"n_cases": 1, "n_accepted": 1, "n_review": 0, "accepted": ["a"], "review": [],
           "reasons": {"accepted": 1}, "order": ["a"], "fingerprint": {"status": "unverified"}, "notes": [],
           "rule_file": None, "rule_signature": None, "rule": rule.to_json(),
           "cases": [{"case": "a", "score": 0.25, "decision": d.decision, "reason": d.reason, "code": d.code,
                      "rank": 1}], "files": {}, "warnings": []}
    (tmp_path / "triage.json").write_text(json.dumps(doc))
    drawn = []

    def spy(*args, **kwargs):
        fig = plot_score_distribution(*args, **kwargs)
        drawn.append(_legend(fig))
        return fig

    monkeypatch.setattr(triage_page, "plot_score_distribution", spy)
    page = triage_page.build_triage_page(tmp_path, n_cases=0, viewer=False).read_text()
    assert "3 calibration case(s)" in page
    assert "calibration cases (n=2 of 3; 1 without a defined score not drawn)" in drawn[0], drawn


def test_decisions_not_one_per_new_score_are_refused():
    """Found by hostile testing: one decision for two new cases was broadcast, the legend read "new: accept (n=2)"."""
    with pytest.raises(ValueError, match="accepted"):
        plot_score_distribution([0.1, 0.2, 0.3], [0.2, 0.5], [True], 0.25)
    with pytest.raises(ValueError, match="accepted"):
        plot_score_distribution([0.1, 0.2, 0.3], [0.2], [True, False], 0.25)


def test_an_undefined_calibration_score_is_refused():
    """Found by hostile testing: a NaN calibration score set the axis to the new cases alone, the calibration case at
    0.1 outside it, while the legend counted it."""
    with pytest.raises(ValueError, match="calibration_scores"):
        plot_score_distribution([0.1, float("nan")], [0.2], [True], 0.25)
