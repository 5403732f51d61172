"""review38: a high-probability level no number of calibration cases can certify is refused naming what the user
gave (``--conformal-delta``, a rule file's field), not ``alpha``, an option of neither."""

from __future__ import annotations

import pytest

from monai_unc.evaluation.conformal import check_rule_fields
from monai_unc.metrics.conformal import conformal_grid
from monai_unc.products.conformal import ConformalMasks


def test_a_conformal_delta_beyond_2_53_cases_names_the_option():
    product = ConformalMasks({"outer": 0.1}, delta=1e-17)
    with pytest.raises(ValueError, match=r"^conformal_delta=1e-17 needs more than 2\*\*53 calibration cases$"):
        product.min_cases_per_stratum()
    assert ConformalMasks({"outer": 0.1}, delta=0.1).min_cases_per_stratum() == 9  # a usable delta still counts


def test_a_rule_file_level_beyond_2_53_cases_names_the_file_and_field():
    step, size = conformal_grid("threshold", 256)
    raw = {"activation": "softmax", "side": "outer", "family": "threshold", "size": size, "step": step,
           "method": "high_probability", "alpha": 1e-17, "tol": 0.1, "names": ["1"], "edges": None, "tasks": [{}]}
    with pytest.raises(ValueError, match=r"^rule\.json: field 'rules\.outer\.alpha' is 1e-17, which no number of "):
        check_rule_fields(raw, "outer", "rule.json", target=0.1, delta=1e-17, n_calibration=20, strata=None)


def test_a_numpy_delta_is_a_number():
    """np.float32(0.1) was refused as "conformal_delta must be in (0, 1), got 0.10000000149011612"."""
    import numpy as np

    assert ConformalMasks({"outer": 0.1}, delta=np.float32(0.25)).delta == 0.25
    for bad in (True, "0.1", 1.0, np.float64(0.0)):
        with pytest.raises(ValueError, match=r"conformal_delta must be a number in \(0, 1\)"):
            ConformalMasks({"outer": 0.1}, delta=bad)
