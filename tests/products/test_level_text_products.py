"""The level of a guarantee is never written above it (``monai_unc.product.format_level``).

Found by hostile testing: rounded to the nearest, a 97.5 % expected-Dice interval read "98 %" and a 99.5 % one
"100 %" (``f"{1 - alpha:.0%}"``) in the triage's column head, its statement ("inside with probability at least 100%")
and the warning of too few calibration cases; ``delta = 1e-7`` read "with probability 1" (``f"{1 - delta:g}"``).
"""

from __future__ import annotations

import warnings
from decimal import Decimal

import numpy as np
import pytest

from monai_unc.evaluation.triage.rule import CalibrationRecord, ReferralRule
from monai_unc.metrics.quality import conformal_quantile
from monai_unc.product import format_level
from monai_unc.products.risk_control import risk_control_line
from monai_unc.report.triage import _expected_dice_head


def _value(text: str) -> Decimal:
    return Decimal(text.rstrip("%")) / (100 if text.endswith("%") else 1)


@pytest.mark.parametrize("percent", [False, True])
def test_format_level_is_never_above_the_level_and_exact_when_short(percent):
    rng = np.random.default_rng(0)
    alphas = [0.1, 0.05, 0.025, 0.005, 0.2, 1e-7, 1e-12, 1 / 3, 0.123456789, 0.999, 0.5]
    alphas += [float(a) for a in rng.uniform(1e-9, 1, 300)] + [float(np.round(a, 3)) for a in rng.uniform(0, 1, 100)
                                                                 if 0 < np.round(a, 3) < 1]
    for a in alphas:
        text = format_level(a, percent=percent)
        exact = 1 - Decimal(repr(a))
        shown = _value(text)
        assert shown <= exact, (a, text)
        assert exact - shown < Decimal(10) ** (exact.adjusted() - 5), (a, text)  # 6 significant digits
        if len(exact.normalize().as_tuple().digits) <= 6:  # a short level is written exactly
            assert shown == exact, (a, text)
    assert format_level(0.1) == "0.9" and format_level(0.1, percent=True) == "90%"
    for bad in (0, 1, 1.5, float("nan"), True, "0.1", None):
        with pytest.raises(ValueError, match="alpha"):
            format_level(bad)


def _rule(interval_alpha: float) -> ReferralRule:
    rng = np.random.default_rng(0)
    n = 250  # enough for a finite 99.5 % interval (at least 199)
    e = tuple(float(x) for x in rng.uniform(0.6, 1, n))
    d = tuple(float(np.clip(x + rng.normal(0, 0.05), 0, 1)) for x in e)
    scores = tuple(sorted(float(x) for x in rng.random(n)))
    rec = CalibrationRecord(scores, d, tuple(0.0 for _ in d), expected_dice=e, interval_alpha=interval_alpha)
    return ReferralRule("predictive_entropy_fg_mean", 0.2, True, 0.5, 0.1, "sgr", "failure", 0.8, scores,
                        tuple(f"c{i}" for i in range(n)), record=rec)


@pytest.mark.parametrize(("alpha", "level", "wrong"), [(0.025, "97.5%", "98%"), (0.005, "99.5%", "100%")])
def test_expected_dice_interval_level_is_not_rounded_up(alpha, level, wrong):
    rule = _rule(alpha)
    statement = rule.interval_statement()
    assert f"({level}, conformal)" in statement and f"at least {level}" in statement
    assert wrong not in statement
    assert _expected_dice_head(rule) == f"expected Dice [{level} conformal interval]"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert conformal_quantile([0.9] * 10, [0.8] * 10, alpha)[0] == float("inf")
    assert any(f"too few for a {level} conformal interval" in str(w.message) for w in caught)


def test_risk_control_line_never_claims_probability_one():
    block = {"method": "sgr", "risk": "dice < 0.8", "target_risk": 0.2, "delta": 1e-7, "feasible": False,
             "bound": 0.31}
    line = risk_control_line(block)
    assert "w.p. 0.999999)" in line and "w.p. 1)" not in line
    assert "w.p. 0.9)" in risk_control_line({**block, "delta": 0.1})
