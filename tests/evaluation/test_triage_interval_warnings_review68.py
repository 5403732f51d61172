"""Review 68: the referral rule's expected-Dice interval left its warnings out through a flag, not a process-wide
``catch_warnings`` filter on every ``UserWarning``; a new case's undefined estimate is named once per triage run."""

from __future__ import annotations

import warnings

from monai_unc.evaluation.triage.rule import CalibrationRecord, ReferralRule
from monai_unc.evaluation.triage.runner import _assemble


def _rule(alpha: float = 0.5) -> ReferralRule:
    rec = CalibrationRecord((0.1, 0.2, 0.3), (0.9, 0.7, 0.8), (0.0, 1.0, 0.0), expected_dice=(0.95, 0.9, 0.85),
                            interval_alpha=alpha)
    return ReferralRule("predictive_entropy_fg_mean", 0.2, True, 0.5, 0.1, "sgr", "failure", 0.8, (0.1, 0.2, 0.3),
                        ("a", "b", "c"), record=rec)


def _said(fn) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught]


def _probe() -> None:
    warnings.warn("review 68 probe (triage interval)", UserWarning, stacklevel=1)


def test_the_once_per_location_registry_is_left_alone():
    rule, few = _rule(), _rule(alpha=0.1)  # 3 cases: too few for a 90 % interval
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(2):
            _probe()
            rule.expected_dice_interval([0.9, float("nan")])
            few.expected_dice_interval([0.9])
            few.record.interval_quantile()
    assert sum(str(w.message) == "review 68 probe (triage interval)" for w in caught) == 1


def test_only_the_warnings_said_elsewhere_are_left_out():
    """Too few cases (the statement says it) and an undefined estimate (the run names it) are left out; an estimate
    beyond [0, 1] by more than the quantile (an expected Dice in percent) was hidden too and is said now."""
    few = _rule(alpha=0.1)
    assert _said(lambda: few.expected_dice_interval([0.9, float("nan")])) == []
    assert _said(lambda: few.record.interval_quantile()) == []
    assert "too few" in few.interval_statement()
    said = _said(lambda: _rule().expected_dice_interval([85.0, 0.9]))
    assert len(said) == 1 and said[0].startswith("1 estimate(s) lie outside bounds (0, 1)")


def test_a_new_case_without_an_expected_dice_is_named_once_per_run():
    rule = _rule()
    rows = [{"case": c, "predictive_entropy_fg_mean": 0.1, "expected_dice": v}
            for c, v in (("x", 0.9), ("y", float("nan")), ("z", None))]
    summary, csv_rows = None, None

    def run():
        nonlocal summary, csv_rows
        summary, csv_rows = _assemble(rows, rule, {}, False, None)

    said = _said(run)
    line = "2 case(s) have an undefined (NaN or missing) expected Dice and so no expected-Dice interval: 'y', 'z'"
    assert said == [line] and line in summary["warnings"]
    assert [c.get("expected_dice_low") is None for c in summary["cases"]] == [False, True, True]
