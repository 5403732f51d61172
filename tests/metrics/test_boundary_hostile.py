"""``monai_unc.metrics.boundary`` on hostile input: unbatched input (one value per case), a bool spacing."""

import numpy as np
import pytest

from monai_unc.metrics.boundary import hd95
from tests._cases import blob_case as _blob_case


def test_hd95_returns_the_leading_shape_or_one_value():
    _, p, t = _blob_case()
    single = hd95(p, t)
    assert isinstance(single, np.ndarray) and single.shape == (1,)
    np.testing.assert_array_equal(single, hd95(p[None], t[None], spatial_dims=2))


@pytest.mark.parametrize("spacing", [True, np.bool_(True), (True, 1.0), np.array([True, True])])
def test_the_distance_functions_refuse_a_bool_spacing(spacing):
    """``spacing=True`` was read as 1 mm (the metric classes refuse it)."""
    from monai_unc.metrics.boundary import distance_to_boundary, distance_to_mask, hausdorff_distance

    _, p, t = _blob_case()
    for call in (lambda: hd95(p[None], t[None], spacing=spacing),
                 lambda: hausdorff_distance(p > 0, t > 0, spacing=spacing),
                 lambda: distance_to_mask(p, spacing=spacing),
                 lambda: distance_to_boundary(p, spacing=spacing)):
        with pytest.raises(ValueError, match="spacing must be a number"):
            call()
