"""Review 62 (end-to-end run): BUC of a case whose reference is empty.

``monai-unc evaluate`` printed ``warning: c04: BUC: the default width HD95(pred, target) is not finite (an empty
foreground); pass width=``: an instruction the command line has no option for; the warning now says that BUC is
undefined and that only the Python API takes a width."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monai_unc.metrics import boundary_uncertainty_concentration


def test_empty_reference_warns_undefined_without_a_cli_instruction():
    pred = np.zeros((1, 8, 8, 8), np.int64)
    pred[0, 2:6, 2:6, 2:6] = 1
    u = np.random.default_rng(0).random((1, 1, 8, 8, 8))
    with pytest.warns(UserWarning, match=r"an empty foreground in the prediction or the reference\); BUC is undefined "
                                         r"\(in Python an explicit width= defines it\)"):
        value = boundary_uncertainty_concentration(u, pred, np.zeros_like(pred))
    assert math.isnan(float(np.asarray(value).ravel()[0]))
    assert np.isfinite(boundary_uncertainty_concentration(u, pred, np.zeros_like(pred), width=2.0)).all()
