"""Hostile tests of selective prediction (monai_unc.metrics.selective) from the statistician's review."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.metrics import augrc, aurc, eaurc, risk_coverage_curve


def test_negative_risk_is_refused():
    """aurc([0.1, 0.2], [-1, 2]) gave -0.625: a risk is a loss; a quality passed as -Dice ranked without complaint."""
    for fn in (aurc, augrc, eaurc, risk_coverage_curve):
        with pytest.raises(ValueError, match="risk must be a loss >= 0"):
            fn([0.1, 0.2], [-1.0, 2.0])
        with pytest.raises(ValueError, match="risk must be a loss >= 0"):
            fn([0.1, 0.2, 0.3], -np.array([0.9, 0.8, 0.7]))
    assert aurc([0.1, 0.2], [0.0, 2.0]) == pytest.approx(0.25)  # a loss above 1 is fine: (1 + 0) / 2 over 0.5
    assert aurc([0.1, 0.2], [0.0, 0.0]) == 0.0
