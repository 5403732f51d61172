"""review38: the lesion product's options take numpy scalars as the evaluation's own options do (an option read from
an array, ``np.float32(0.5)``, was refused as "must be a number"); bools, strings and non-integers stay refused."""

from __future__ import annotations

import numpy as np
import pytest

from monai_unc.evaluation import EvaluationConfig
from monai_unc.products.lesions import LesionMetrics


def test_numpy_scalars_are_numbers():
    p = LesionMetrics(iou=np.float32(0.25), failure_dice=np.float32(0.5), dilation=np.int64(2),
                      min_volume=np.float64(3.0))
    assert (p.iou, p.failure_dice, p.dilation, p.min_volume) == (0.25, 0.5, 2, 3.0)
    assert all(type(v) in (int, float) for v in (p.iou, p.failure_dice, p.dilation, p.min_volume))
    EvaluationConfig(failure_dice=np.float32(0.5)).validate()  # the evaluation's failure Dice takes it too


@pytest.mark.parametrize("kwargs, match", [
    ({"iou": True}, "lesion_iou must be a number"),
    ({"iou": np.bool_(True)}, "lesion_iou must be a number"),
    ({"failure_dice": "0.5"}, "lesion_failure_dice must be a number"),
    ({"dilation": np.float64(2.5)}, "lesion_dilation must be an integer"),
    ({"iou": np.float32(1.5)}, r"lesion_iou must be in \(0, 1\]"),
])
def test_other_values_stay_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LesionMetrics(**kwargs)
