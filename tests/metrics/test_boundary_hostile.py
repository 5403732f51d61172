"""``monai_unc.metrics.boundary.hd95`` on unbatched input: one value per case."""

import numpy as np

from monai_unc.metrics.boundary import hd95
from tests._cases import blob_case as _blob_case


def test_hd95_returns_the_leading_shape_or_one_value():
    _, p, t = _blob_case()
    single = hd95(p, t)
    assert isinstance(single, np.ndarray) and single.shape == (1,)
    np.testing.assert_array_equal(single, hd95(p[None], t[None], spatial_dims=2))
