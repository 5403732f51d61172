"""The rank ``ceil((n + 1)(1 - alpha))`` of the high-probability rule and the fewest cases it needs, for any alpha.

Reference: counting ``n`` up from 1 until the rank fits (the definition), and exact rationals.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

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
    rank = mc._hp_rank

    def counted(n, alpha):
        calls.append(n)
        if len(calls) > 10_000:
            raise AssertionError("min_calibration_cases evaluated the rank more than 10000 times")
        return rank(n, alpha)

    monkeypatch.setattr(mc, "_hp_rank", counted)
    for a in (1e-6, 1e-9, 1e-12):
        n = min_calibration_cases(a, high_probability=True)
        assert rank(n, a) <= n and rank(n - 1, a) > n - 1, a  # the first n that fits
        assert n > 0.9 / a
    with pytest.raises(ValueError, match="2\\*\\*53"):
        min_calibration_cases(1e-17, high_probability=True)
