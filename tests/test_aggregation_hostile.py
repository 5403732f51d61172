"""Hostile input to ``monai_unc.aggregation``: every bad argument is named in the error."""

import numpy as np
import pytest

from monai_unc.aggregation import aggregate


# ---------------------------------------------------------------------------------------------------------------
# item 11: opaque messages
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "patch_sum", "patch_size": 2.5}, "patch_size"),
        ({"method": "patch_mean", "patch_size": (2, 2.5)}, "patch_size"),
        ({"method": "patch_sum", "patch_size": "3"}, "patch_size"),
        ({"method": "threshold", "threshold": "a"}, "threshold"),
        ({"method": "threshold", "threshold": 0.5, "empty_value": "zero"}, "empty_value"),
    ],
)
def test_aggregate_names_the_bad_argument(kwargs, match):
    u = np.random.default_rng(0).random((1, 1, 6, 6))
    with pytest.raises(ValueError, match=match):
        aggregate(u, **kwargs)
