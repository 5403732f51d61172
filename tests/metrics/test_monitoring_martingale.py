"""Hostile tests of the monitoring statistics (martingale side): brute force and simulation references."""

from __future__ import annotations

import math

import numpy as np

from monai_unc.metrics.monitoring import first_alarm, risk_lower_bound, risk_test


def test_the_alarm_level_holds_for_alpha_near_0_and_near_1():
    # alpha within 1e-12 of 1: 1 / alpha is just above 1, so S_0 = 1 raises no alarm and losses of 0 bound nothing;
    # the absolute 1e-12 allowance made the level negative (an alarm before any data, a risk bound of 1)
    near_one = 1 - 1e-13
    assert first_alarm([0.0, 0.0], near_one) is None
    np.testing.assert_array_equal(risk_lower_bound([0.0] * 3, 0.1, near_one), 0.0)
    assert risk_test([0.0] * 3, 0.1, near_one).alarm is None
    assert first_alarm([0.0, 2e-13], near_one) == 1  # just above log(1 / alpha) = 1.0e-13
    # alpha below 5.6e-309: 1 / alpha overflowed to inf and no martingale could ever alarm
    assert first_alarm([700.0, 800.0], 1e-310) == 1  # log(1e310) = 713.8
    # a martingale exactly at 1 / alpha alarms (the rounding allowance)
    assert first_alarm([math.log(4.0) + math.log(5.0)], 0.05) == 0
