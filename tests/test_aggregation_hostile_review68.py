"""Hostile review 68 of the aggregation checks of review 67 (``check_threshold``)."""

from __future__ import annotations

import pytest

from monai_unc.aggregation import check_threshold
from monai_unc.transforms import AggregateUncertainty, UncertaintyToDiscrete


def test_an_integer_beyond_float_is_refused_as_not_finite_naming_the_argument():
    # found by hostile review 68: 10**400 (a Python int, a real number) failed with Python's "OverflowError: int too
    # large to convert to float", naming no argument, where 1e400 (inf) is refused as not finite
    with pytest.raises(ValueError, match="threshold must be finite, got inf"):
        check_threshold(10**400)
    with pytest.raises(ValueError, match="threshold must be finite"):
        AggregateUncertainty(method="threshold", threshold=-(10**400))
    with pytest.raises(ValueError, match="threshold must be finite"):
        UncertaintyToDiscrete(threshold=10**400)
    assert check_threshold(10**300) == 1e300
