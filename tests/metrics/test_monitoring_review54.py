"""Hostile review 54 of the monitoring statistics: what the functions take as their inputs."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.metrics.monitoring import (
    change_point,
    conformal_pvalues,
    risk_bets,
    risk_eprocess,
    risk_lower_bound,
    risk_test,
    score_martingale,
    simple_jumper,
)


@pytest.mark.parametrize("bad", [["0.5", "3.0"], np.array(["0.5", "3.0"]), np.array([1 + 2j, 3.0])])
def test_text_and_complex_values_are_refused(bad):
    """Text was parsed as numbers and a complex array lost its imaginary part with only numpy's ComplexWarning."""
    with pytest.raises(TypeError, match="scores"):
        conformal_pvalues(bad)
    with pytest.raises(TypeError, match="reference"):
        conformal_pvalues([0.5], reference=bad)
    with pytest.raises(TypeError, match="scores"):
        score_martingale(bad)
    with pytest.raises(TypeError, match="pvalues"):
        simple_jumper(np.array(["0.5", "0.2"]) if isinstance(bad, list) else bad)


@pytest.mark.parametrize("bad", [np.array(["0", "1"]), np.array([0j, 1 + 0.5j])])
def test_text_and_complex_losses_are_refused(bad):
    for f in (lambda x: risk_bets(x, 0.1), lambda x: risk_eprocess(x, 0.1), lambda x: risk_test(x, 0.1),
              lambda x: risk_lower_bound(x, 0.1, 0.05)):
        with pytest.raises(TypeError, match="losses"):
            f(bad)


def test_undefined_values_and_booleans_still_read():
    """A list holding None reads as NaN (an undefined score); booleans are 0/1 losses."""
    with pytest.warns(UserWarning, match="undefined"):
        p = conformal_pvalues([None, 1.0], reference=[0.0, 2.0])
    assert np.isnan(p[0]) and 0 < p[1] <= 1
    assert np.array_equal(risk_eprocess([False, True], 0.1), risk_eprocess([0.0, 1.0], 0.1))


@pytest.mark.parametrize("bad", [[0.5, 1.5], [-0.2, 0.5]])
def test_change_point_refuses_pvalues_outside_the_unit_interval(bad):
    """simple_jumper refused them; change_point returned an estimate from log(max(q, 1e-12)) of negative q."""
    with pytest.raises(ValueError, match=r"pvalues must lie in \[0, 1\]"):
        change_point(bad, 1)
