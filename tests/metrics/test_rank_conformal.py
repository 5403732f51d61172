"""The rank ``ceil((n + 1)(1 - alpha))`` of the high-probability rule and the fewest cases it needs, for any alpha.

Reference: counting ``n`` up from 1 until the rank fits (the definition), and exact rationals.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

import monai_unc._utils as _utils
import monai_unc.metrics.conformal as mc
from monai_unc.metrics.conformal import min_calibration_cases


def _counted_up(alpha: float) -> int:
    n = 1
    while mc._hp_rank(n, alpha) > n:
        n += 1
    return n


def test_min_calibration_cases_high_probability_equals_counting_up():
    alphas = [0.5, 1 / 3, 0.3, 0.25, 0.2, 0.1, 0.05, 1 / 49, 0.01, 0.001, 0.999, 0.0999999999, 0.1000000001, 1e-4]
    alphas += [float(a) for a in np.random.default_rng(0).uniform(1e-3, 1.0, 300)]
    for a in alphas:
        assert min_calibration_cases(a, high_probability=True) == _counted_up(a), a
    for n, a in ((9, 0.1), (19, 0.05), (99, 0.01)):  # (n + 1)(1 - alpha) an integer in decimals: exactly n
        assert min_calibration_cases(a, high_probability=True) == n
        assert math.ceil(Fraction(n + 1) * (1 - Fraction(repr(a)))) == n


def test_min_calibration_cases_high_probability_does_not_count_up_for_a_small_alpha(monkeypatch):
    # it counted n up from 1: minutes for alpha = 1e-7, and `evaluate --conformal-delta 1e-12` hung before refusing
    calls = []
    rank = _utils.quantile_rank

    def counted(n, alpha):
        calls.append(n)
        if len(calls) > 10_000:
            raise AssertionError("min_calibration_cases evaluated the rank more than 10000 times")
        return rank(n, alpha)

    monkeypatch.setattr(_utils, "quantile_rank", counted)
    for a in (1e-6, 1e-9, 1e-12):
        n = min_calibration_cases(a, high_probability=True)
        assert rank(n, a) <= n and rank(n - 1, a) > n - 1, a  # the first n that fits
        assert n > 0.9 / a
    assert calls  # the rank was computed (through the patched function)
    with pytest.raises(ValueError, match="2\\*\\*53"):
        min_calibration_cases(1e-17, high_probability=True)


def _exact_rank(n: int, alpha: float) -> int:
    """``ceil((n + 1)(1 - alpha))`` in rationals, ``alpha`` the fraction ``k / (n + 1)`` it rounds, else its decimal."""
    a = Fraction(repr(alpha))
    near = Fraction(alpha).limit_denominator(n + 1)
    if float(near) == alpha:  # alpha is the float of a fraction with denominator <= n + 1 (e.g. 1 / 3): that fraction
        a = near
    return math.ceil((n + 1) * (1 - a))


def test_one_rank_for_the_interval_and_the_high_probability_rule_on_and_around_integers():
    # conformal_quantile allowed 1e-9 below an integer, _hp_rank rounded to 9 decimals: alpha = 0.09999999993 with
    # n = 9 ((n + 1)(1 - alpha) = 9.0000000007, rank 10 > 9) gave the largest residual (a 90 % interval) in the one
    # and a refusal in the other
    from monai_unc.metrics.conformal import high_probability_lambda
    from monai_unc.metrics.quality import conformal_quantile

    with pytest.warns(UserWarning, match="at least 10 needed"):
        assert conformal_quantile(np.zeros(9), np.arange(1.0, 10.0), alpha=0.09999999993) == (math.inf, 9)
    with pytest.raises(ValueError, match="at least 10"):
        high_probability_lambda(np.zeros((9, 2)), 0.5, 0.09999999993)
    residuals = np.arange(1.0, 51.0)
    for n in range(1, 51):
        for k in range(1, n + 2):
            on = float(1 - Fraction(k, n + 1))
            for a in (on, on + 1e-6, on - 1e-6, on + 1e-12, on - 1e-12, on + 7e-11 / (n + 1), on - 7e-11 / (n + 1)):
                if not 0 < a < 1:
                    continue
                want = _exact_rank(n, a)
                assert mc._hp_rank(n, a) == want, (n, a)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    q, _ = conformal_quantile(np.zeros(n), residuals[:n], alpha=a)
                assert q == (float(want) if want <= n else math.inf), (n, a)
