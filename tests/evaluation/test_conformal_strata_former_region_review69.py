"""A conformal rule stratified by a non-ASCII region's score, written when region columns kept ASCII letters only.

Region columns now keep every script's letters (``Ödem`` -> ``..._Ödem``); a rule written before recorded
``predictive_entropy_fg_mean_dem`` and was refused as edited ("strata.score must be the column of ..."), and its
column was not among a new case's columns. It is read, and a case is scored by the region's column as named now.
"""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.evaluation import conformal
from monai_unc.evaluation.conformal import ConformalStrata


def _strata(score: str, region: str = "Ödem") -> dict:
    return {"score": score, "measure": "predictive_entropy", "aggregation": "fg_mean", "region": region,
            "edges": [0.5], "method": "fixed", "counts": [10, 10], "map_source": "file", "patch_size": 8}


def test_a_former_ascii_region_column_is_read_and_scores_the_region(monkeypatch):
    strata = ConformalStrata.from_dict(_strata("predictive_entropy_fg_mean_dem"))
    assert strata.region == "Ödem" and strata.score == "predictive_entropy_fg_mean_dem"
    cols = {"predictive_entropy_fg_mean": 0.1, "predictive_entropy_fg_mean_Ödem": 0.7,
            "predictive_entropy_fg_mean_WT": 0.2}
    monkeypatch.setattr(conformal, "derived_maps", lambda case: {"predictive_entropy": np.zeros((2, 2, 2, 2))})
    monkeypatch.setattr(conformal, "predicted_regions", lambda case, regions: None)
    monkeypatch.setattr(conformal, "region_score_columns", lambda *a, **k: cols)
    assert strata.case_score(object(), {"Ödem": [1], "WT": [1, 2]}) == 0.7
    assert ConformalStrata.from_dict(_strata("predictive_entropy_fg_mean_Ödem")).case_score(
        object(), {"Ödem": [1], "WT": [1, 2]}) == 0.7


@pytest.mark.parametrize("score, region", [
    ("predictive_entropy_fg_mean_xyz", "Ödem"),  # neither the region's column now nor its former one
    ("predictive_entropy_fg_mean_wt", "WT"),  # an ASCII region: its column never changed (case kept)
    ("predictive_entropy_mean_dem", "Ödem"),  # the former column of another aggregation
])
def test_other_columns_are_still_refused(score, region):
    with pytest.raises(ValueError, match="strata.score|score"):
        ConformalStrata.from_dict(_strata(score, region))
