"""A product's artifact reads back with every value and its meaning (``monai_unc.evaluation.products``).

Found by hostile testing: ``write_artifact`` wrote an infinite number as ``null`` (``json_safe``), so a fitted
``{"threshold": inf}`` ("accept every case") read back as ``{"threshold": None}``, the undefined value; such an
artifact is refused, naming the product and where the number is, and finite values read back equal.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from monai_unc.evaluation.products import read_artifact, write_artifact
from monai_unc.product import CohortProduct


class Cut(CohortProduct):
    name, title = "cut", "Cut"


@pytest.mark.parametrize(("artifact", "where"), [
    ({"threshold": math.inf}, "artifact['threshold']"),
    ({"rules": [{"low": 0.1}, {"low": -math.inf}]}, "artifact['rules'][1]['low']"),
    ({"per_class": np.array([[0.5, 1.0], [np.inf, 0.2]])}, "artifact['per_class'][1][0]"),
    ({"t": np.float32("-inf")}, "artifact['t']"),
    ({"t": torch.tensor([0.0, float("inf")])}, "artifact['t'][1]"),
])
def test_an_infinite_number_is_refused_not_written_as_null(tmp_path, artifact, where):
    path = tmp_path / "cut.json"
    with pytest.raises(ValueError, match=r"product 'cut'.*infinite number at " + re.escape(where)):
        write_artifact(path, Cut(), artifact, ["a"])
    assert not path.exists()


def test_finite_values_and_undefined_ones_read_back(tmp_path):
    artifact = {"threshold": 0.1 + 0.2, "n": np.int64(7), "per_class": np.array([0.25, 1e-300]),
                "undefined": math.nan, "flag": True, "name": "inf"}
    doc = read_artifact(write_artifact(tmp_path / "cut.json", Cut(), artifact, ["a", "b"]), "cut")
    assert doc["artifact"] == {"threshold": 0.1 + 0.2, "n": 7, "per_class": [0.25, 1e-300], "undefined": None,
                               "flag": True, "name": "inf"}
    assert doc["calibration_cases"] == ["a", "b"]
