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


def test_error_auprc_of_a_case_without_a_correct_voxel_is_undefined():
    """Every voxel wrong: the precision is 1 at every threshold, so a constant map (and any other) scored AUPRC 1.0, a
    perfect error detector, while the AUROC of the same case is NaN and the module notes promise NaN."""
    import math

    import torch

    from monai_unc.metrics import error_auprc, error_auroc

    for u in (np.full(16, 0.3), np.linspace(0, 1, 16)):
        with pytest.warns(UserWarning, match="no correct voxel"):
            assert math.isnan(error_auprc(u, np.ones(16), per_case=False))
        with pytest.warns(UserWarning, match="no correct voxel"):
            assert math.isnan(error_auroc(u, np.ones(16), per_case=False))
    # per case: only the all-error case is NaN
    u = torch.rand(2, 1, 4, 4)
    e = torch.ones(2, 1, 4, 4)
    e[1, 0, 0, :2] = 0
    with pytest.warns(UserWarning, match="no correct voxel"):
        out = error_auprc(u, e, per_case=True)
    assert math.isnan(float(out[0])) and 0.0 < float(out[1]) <= 1.0
