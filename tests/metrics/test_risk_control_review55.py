"""Hostile review 55 of risk control: a threshold that is no number, and the line of a threshold that refers nothing."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from monai_unc.metrics import accepted_by_threshold, risk_controlled_threshold
from monai_unc.products.risk_control import RiskControl, risk_control_line


@pytest.mark.parametrize("threshold", [True, np.bool_(False), "0.15", [0.1, 0.2], np.array([0.3])])
def test_accepted_by_threshold_refuses_a_threshold_that_is_no_number(threshold):
    # True accepted every score up to 1; "0.15" failed inside numpy without naming the argument
    with pytest.raises(TypeError, match="threshold"):
        accepted_by_threshold(np.array([0.1, 0.2]), threshold)
    with pytest.raises(TypeError, match="threshold"):
        accepted_by_threshold(torch.tensor([0.1, 0.2]), threshold)


def test_accepted_by_threshold_refuses_nan_and_takes_numbers():
    with pytest.raises(ValueError, match="threshold"):
        accepted_by_threshold(np.array([0.1, 0.2]), math.nan)
    assert accepted_by_threshold([0.1, 0.2], np.float32(0.15)).tolist() == [True, False]
    assert accepted_by_threshold([0.1, 0.2], np.int64(1)).tolist() == [True, True]
    assert accepted_by_threshold([0.1, 0.2], -math.inf).tolist() == [False, False]
    assert accepted_by_threshold([0.1, 0.2], torch.tensor(0.15)).tolist() == [True, False]


def test_risk_control_line_of_an_unrefused_threshold_names_no_refused_score():
    # the block as RiskControl.fit returns it holds threshold inf (summary.json: null): the line said
    # "accept score < inf (the lowest calibration score it refers)" though no calibration score was referred
    u = np.linspace(0.0, 1.0, 60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = risk_controlled_threshold(u, np.zeros(60), 0.2, 0.1)
    assert res.threshold == math.inf
    block = {"method": "sgr", "risk": "dice < 0.8", "target_risk": 0.2, "delta": 0.1, "feasible": True,
             "threshold": res.threshold, "bound": res.bound,
             "calibration": {"coverage": 1.0, "risk_accepted": 0.0, "n_undefined": 0},
             "accepted": [str(i) for i in range(60)], "referred": []}
    line = risk_control_line(block)
    assert "< inf" not in line and "accept every case;" in line
    assert RiskControl.summary_lines(block) == [line]
    assert risk_control_line({**block, "threshold": None}) == line
