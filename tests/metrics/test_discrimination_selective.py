"""Hostile tests of the voxel-wise discrimination metrics (monai_unc.metrics.discrimination), selective review."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.metrics import pavpu


def test_pavpu_refuses_an_accuracy_threshold_outside_the_unit_interval():
    """accuracy_threshold=50 (percent) made every patch inaccurate without complaint: PAvPU became the share of
    uncertain patches (0.0 for a perfect, certain map)."""
    u = np.zeros((4, 4))
    e = np.zeros((4, 4))
    for bad in (50, 1.5, -0.1):
        with pytest.raises(ValueError, match="accuracy_threshold"):
            pavpu(u, e, window=2, accuracy_threshold=bad, per_case=False)
    assert pavpu(u, e, window=2, accuracy_threshold=1.0, per_case=False) == 1.0  # every patch accurate and certain
    assert pavpu(u, e, window=2, accuracy_threshold=0.0, per_case=False) == 1.0
