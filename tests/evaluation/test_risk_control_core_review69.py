"""Re-certifying a rule that certifies nothing touches no process-wide warning state.

``ReferralRule.verify_certificate`` (run whenever a rule is read) recomputed the certificate with the public
``risk_controlled_threshold`` and hid its "no threshold certifies" warning inside ``warnings.catch_warnings()``:
process-wide state, so another thread's warnings were hidden while a rule was read, and the once-per-location
registry was reset. It now calls the core that does not warn.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from monai_unc.evaluation import EvaluationConfig, summarize
from monai_unc.evaluation.cohort import CohortState
from monai_unc.evaluation.triage import ReferralRule
from monai_unc.evaluation.triage.certify import certify_referral_rule
from monai_unc.metrics.risk_control import risk_controlled_threshold, risk_controlled_threshold_core


def _infeasible_rule(tmp_path):
    rows = [{"case": f"c{i}", "dice": 0.5, "predictive_entropy_fg_mean": 0.1 * i} for i in range(6)]  # all fail
    state = CohortState(2, 240, rows=rows)
    config = EvaluationConfig(target_risk=0.1, delta=0.1, score="predictive_entropy_fg_mean", spatial=False)
    summary = summarize(state, config)
    rule = certify_referral_rule(state, summary, config)
    assert not rule.feasible
    rule.save(tmp_path / "rule.json")
    return tmp_path / "rule.json"


def test_reading_a_rule_that_certifies_nothing_leaves_the_warning_filters_alone(tmp_path, monkeypatch):
    path = _infeasible_rule(tmp_path)

    def no_filters(*a, **k):
        raise AssertionError("warnings.catch_warnings() entered while a rule is read")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monkeypatch.setattr(warnings, "catch_warnings", no_filters)
        rule = ReferralRule.load(path)
        monkeypatch.undo()
    assert not rule.feasible
    assert not [w for w in caught if "no threshold certifies" in str(w.message)]  # the rule says so, no warning


def test_the_core_equals_the_public_function_and_does_not_warn():
    rng = np.random.default_rng(3)
    for n, target in ((6, 0.05), (200, 0.1), (50, 0.3)):
        u, failed = rng.random(n), (rng.random(n) < 0.4).astype(float)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            core = risk_controlled_threshold_core(u, failed, target, 0.1)
        assert not caught
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            public = risk_controlled_threshold(u, failed, target, 0.1)
        assert dataclasses.replace(core, risk=0) == dataclasses.replace(public, risk=0)
        assert core.risk == public.risk or (np.isnan(core.risk) and np.isnan(public.risk))
        assert len(said) == (0 if public.feasible else 1)
        if said:
            assert said[0].filename == __file__ and "no threshold certifies" in str(said[0].message)
