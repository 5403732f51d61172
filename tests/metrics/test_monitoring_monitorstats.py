"""The risk alarm's lower confidence sequence keeps its level above the target (monitorstats review; a simulation).

``risk_test``'s lower bound says: with probability at least ``1 - alpha``, ``max_{k <= n} L_k`` never exceeds the
largest risk the cases have had so far, for every ``n`` at once. The existing simulations check the alarm at the
target and on benign shifts; this one checks the bound where the risk is *above* the target (a harmful shift, where
the bets are large and the bound is what the dashboard draws), and against an independent computation: the event
``L_n > mu`` is ``K_n(mu') >= 1 / alpha`` for a grid point ``mu' > mu``, so it implies ``K_n(mu) >= 1 / alpha``, whose
rate is counted directly from a product over the losses (no grid).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from monai_unc.metrics.monitoring import risk_bets, risk_test


def _ever_rejects(x: np.ndarray, target: float, m: float, alpha: float) -> bool:
    """Whether ``prod_i (1 + lam_i (x_i - m))`` ever reaches ``1 / alpha``: a loop over the losses (no grid)."""
    lam, k = risk_bets(x, target), 1.0
    for li, xi in zip(lam.tolist(), x.tolist()):
        k *= 1.0 + li * (xi - m)
        if k >= 1.0 / alpha:
            return True
    return False


@pytest.mark.parametrize("mu, target, seed", [(0.5, 0.2, 1), (0.3, 0.1, 2), (0.15, 0.1, 3)])
def test_the_lower_bound_covers_a_harmful_risk_at_level_alpha(mu, target, seed):
    rng = np.random.default_rng(seed)
    alpha, n_streams, n = 0.05, 300, 300
    over = exact = 0
    for _ in range(n_streams):
        x = (rng.uniform(size=n) < mu).astype(np.float64)
        above = bool((risk_test(x, target, alpha).lower_bound > mu).any())
        crossed = _ever_rejects(x, target, mu, alpha)
        assert crossed or not above  # the grid bound rounds down: above mu only where K(mu) crossed
        over += above
        exact += crossed
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / n_streams)
    assert exact / n_streams <= bound
    assert over / n_streams <= bound


def test_the_lower_bound_reaches_a_harmful_risk():
    """Not a bound stuck at 0: after 300 cases at risk 0.5 against a target of 0.2 it is well above the target."""
    rng = np.random.default_rng(4)
    r = risk_test((rng.uniform(size=300) < 0.5).astype(np.float64), 0.2, 0.05)
    assert r.alarm is not None and 0.3 < r.lower_bound[-1] <= 0.5
