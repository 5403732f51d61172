"""``RiskControl.fit``'s "no threshold certifies" warning points at the caller's line (review 66).

It pointed at ``monai_unc/products/risk_control.py`` (the line that calls ``risk_controlled_threshold``), so a user
filtering or locating warnings by module saw the package's file instead of their own.
"""

from __future__ import annotations

import warnings

import pytest

from monai_unc.evaluation import EvaluationConfig
from monai_unc.products import RiskControl


def test_no_threshold_certifies_warning_points_at_the_caller():
    rows = [{"case": f"c{i}", "predictive_entropy_fg_mean": 0.1 * i, "dice": 0.5} for i in range(4)]  # all fail
    config = EvaluationConfig(target_risk=0.1, delta=0.1, score="predictive_entropy_fg_mean")
    with pytest.warns(UserWarning, match="no threshold certifies") as record:
        block = RiskControl().fit({}, rows, config)
    assert not block["feasible"] and block["referred"] == [r["case"] for r in rows]
    [w] = [w for w in record if "no threshold certifies" in str(w.message)]
    assert w.filename == __file__  # before: .../monai_unc/products/risk_control.py


def test_the_warning_still_obeys_the_callers_filters():
    rows = [{"case": f"c{i}", "predictive_entropy_fg_mean": 0.1 * i, "dice": 0.5} for i in range(4)]
    config = EvaluationConfig(target_risk=0.1, delta=0.1, score="predictive_entropy_fg_mean")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(UserWarning, match="no threshold certifies"):
            RiskControl().fit({}, rows, config)
