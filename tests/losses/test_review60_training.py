"""Hostile review 60 of the training side: calibration losses, temperature scaling and their references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from monai_unc.temperature import TemperatureScaler


def _over_confident(seed: int = 0, classes: int = 3, n: int = 400) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (1, n), generator=g)
    z = 3.0 * torch.nn.functional.one_hot(y, classes).movedim(-1, 1).float() + 3.0 * torch.randn(
        1, classes, n, generator=g)
    return z, y


@pytest.mark.parametrize("bad", [True, np.bool_(True), 255.5, float("nan"), "255", 2**70, [255]])
def test_ignore_index_that_is_no_integer_label_is_refused_naming_it(bad):
    # True == 1 left out every voxel of class 1 silently; 255.5 / NaN left out nothing; "255" raised an
    # AttributeError inside the fit and 2**70 an OverflowError
    with pytest.raises(ValueError, match="ignore_index"):
        TemperatureScaler(ignore_index=bad)


def test_integer_ignore_index_of_any_integer_type_leaves_out_the_same_voxels():
    z, y = _over_confident()
    y = y.clone()
    y[0, :50] = 255
    fits = [TemperatureScaler(ignore_index=i).fit(z, y).temperature.item() for i in (255, np.int64(255), np.uint8(255))]
    keep = y[0] != 255
    reference = TemperatureScaler().fit(z[:, :, keep], y[:, keep]).temperature.item()
    assert fits == pytest.approx([reference] * 3, rel=1e-12)


def test_calibrate_network_counts_a_region_models_voxels_once_not_once_per_region():
    # the record's "voxels" was the size of the region masks: 3 x 72 = 216 for 72 voxels of a 3-region model
    from monai_unc.temperature import calibrate_network

    g = torch.Generator().manual_seed(0)
    masks = (torch.rand(2, 3, 6, 6, generator=g) > 0.5).float()
    z = 4 * (2 * masks - 1) + 3 * torch.randn(2, 3, 6, 6, generator=g)
    _, record = calibrate_network([z, z[:1]], [masks, masks[:1]], torch.nn.Conv2d(1, 3, 1), mode="vector",
                                  activation="sigmoid", max_steps=5)
    assert record["voxels"] == 3 * 36
    labels = torch.randint(0, 3, (2, 1, 6, 6), generator=g)
    _, record = calibrate_network([z], [labels], torch.nn.Conv2d(1, 3, 1), max_steps=5)
    assert record["voxels"] == 72
