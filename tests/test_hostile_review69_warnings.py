"""Hostile review 69: warnings of the non-warning cores point at their caller's line."""

from __future__ import annotations

import warnings

import numpy as np

from monai_unc.evaluation.triage.rule import CalibrationRecord, ReferralRule
from monai_unc.metrics.quality import conformal_interval, conformal_interval_core


def _lines(call) -> list[tuple[str, int]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [(w.filename, w.lineno) for w in caught]


def test_conformal_interval_core_called_directly_warns_at_the_callers_line():
    here = __file__
    # too few calibration cases and an undefined estimate: both at this line (they pointed one frame above it)
    got = _lines(lambda: conformal_interval_core([np.nan], [0.9, 0.8], [0.85, 0.8]))
    line = got[0][1]
    assert len(got) == 2 and all(g == (here, line) for g in got), got
    assert "conformal_interval_core" in open(here).read().splitlines()[line - 1]
    # an estimate beyond the bounds by more than the quantile
    got = _lines(lambda: conformal_interval_core([5.0], [0.9] * 20, [0.85] * 20))
    assert len(got) == 1 and got[0][0] == here and "conformal_interval_core" in open(here).read().splitlines()[
        got[0][1] - 1]
    # the public function as before
    got = _lines(lambda: conformal_interval([np.nan], [0.9, 0.8], [0.85, 0.8]))
    assert len(got) == 2 and all(g[0] == here for g in got)
    assert "conformal_interval(" in open(here).read().splitlines()[got[0][1] - 1]


def test_the_rules_interval_warns_at_its_callers_line():
    rec = CalibrationRecord(tuple(np.linspace(0.1, 0.3, 20)), (0.9,) * 20, (0.0,) * 20, expected_dice=(0.95,) * 20,
                            interval_alpha=0.5)
    rule = ReferralRule("predictive_entropy_fg_mean", 0.2, True, 0.5, 0.1, "sgr", "failure", 0.8,
                        tuple(np.linspace(0.1, 0.3, 20)), tuple(f"c{i}" for i in range(20)), record=rec)
    got = _lines(lambda: rule.expected_dice_interval([5.0]))  # beyond the bounds
    assert len(got) == 1 and got[0][0] == __file__, got
