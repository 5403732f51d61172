"""Review 67 follow-up: ``area_under_referral_curve`` says which range of rates its area covers.

Rates above ``(N-1)/N`` refer every case: the curve is NaN there and the area leaves them out, so with
``normalize=False`` it is the area over a shorter range than asked for (``taus=[0, 0.5, 1]``: over ``[0, 0.5]``).
Only ``referral_curve``'s warning said that the rates refer all cases, naming neither the area nor its range.
"""

from __future__ import annotations

import warnings

import pytest

from monai_unc.metrics.selective import area_under_referral_curve

_U, _DICE = [0.1, 0.4, 0.2, 0.8], [0.9, 0.6, 0.8, 0.3]


def _warnings(**kwargs) -> tuple[float, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        area = area_under_referral_curve(_U, _DICE, **kwargs)
    return area, [str(w.message) for w in caught]


def test_rates_referring_every_case_are_named_with_the_range_the_area_covers():
    area, said = _warnings(taus=[0.0, 0.5, 1.0])
    assert area == pytest.approx((0.65 + 0.85) / 2 * 0.5, rel=1e-12)  # the trapezoid over [0, 0.5] only
    assert said == ["area_under_referral_curve: 1 referral rate(s) above (N-1)/N = 0.75 refer all 4 cases, leaving "
                    "no case to measure; they are left out, and the area covers the rates [0, 0.5] only, not [0, 1]"]
    mean, said = _warnings(taus=[0.0, 0.5, 0.8, 1.0], normalize=True)
    assert mean == pytest.approx(0.75, rel=1e-12) and len(said) == 1 and "2 referral rate(s)" in said[0]


def test_no_warning_when_every_rate_keeps_a_case():
    area, said = _warnings()  # the default rates k / N, k = 0 .. N-1
    assert said == [] and area == pytest.approx(0.5979166666666667, rel=1e-12)
    assert _warnings(taus=[0.0, 0.75])[1] == []
