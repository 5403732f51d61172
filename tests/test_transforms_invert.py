"""Hostile review of monai_unc.transforms inside MONAI pipelines (maps brought back with ``Invertd``): each test
compares with a reference computed independently here."""

from __future__ import annotations

import pytest
import torch

from monai_unc.transforms import AggregateUncertainty, AggregateUncertaintyd


@pytest.mark.parametrize("method", ["mean", "patch_sum"])
def test_aggregate_nan_map_names_the_key(method):
    """A NaN map was refused as "uncertainty contains ...", a name the user never passed."""
    u = torch.rand(1, 4, 4, 4)
    u[0, 1, 2, 3] = float("nan")
    kw = {"patch_size": 2} if method == "patch_sum" else {}
    with pytest.raises(ValueError, match=r"^mutual_information contains 1 non-finite"):
        AggregateUncertaintyd("mutual_information", method=method, **kw)({"mutual_information": u})
    with pytest.raises(ValueError, match=r"^img contains 1 non-finite"):
        AggregateUncertainty(method, **kw)(u)


def test_aggregate_four_spatial_axes_reports_the_users_shape():
    """A map with 4 spatial axes was refused with the shape (1, 1, 3, 3, 3, 3), a batch axis the user never passed."""
    with pytest.raises(ValueError, match=r"^mi must be a one-channel map .* got \(1, 3, 3, 3, 3\)$"):
        AggregateUncertaintyd("mi")({"mi": torch.rand(1, 3, 3, 3, 3)})
