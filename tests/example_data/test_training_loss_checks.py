"""``make_training_loss`` checks its settings by name and every loss it makes raises on a non-finite value.

Found by hostile testing: ``"dice_nacl"`` with 2-D logits and the default ``spatial_dims=3`` failed inside torch
(``permute(sparse_coo): number of dimensions ...``), with logits of another number of channels than ``classes``
inside MONAI ("Class values must be smaller than num_classes"); ``classes=0`` or ``"3"`` was taken; the MONAI losses
(``"dice_ce"``, ``"dice"``, ``"ce"``, ``"dice_nacl"``) returned NaN for NaN logits where the calibration losses raise.
"""

from __future__ import annotations

import pytest
import torch

from monai_unc.data.training import CALIBRATION_LOSSES, TRAINING_LOSSES, make_training_loss

NAMES = TRAINING_LOSSES + tuple(CALIBRATION_LOSSES)


@pytest.mark.parametrize("name", NAMES)
def test_nan_logits_raise_naming_the_logits(name):
    z = torch.full((1, 3, 4, 4, 4), float("nan"))
    y = torch.zeros(1, 1, 4, 4, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="logits must be finite"):
        make_training_loss(name, classes=3)(z, y)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"classes": 0}, "classes must be an integer >= 2, got 0"),
        ({"classes": 1}, "classes must be an integer >= 2, got 1"),
        ({"classes": "3"}, "classes must be an integer >= 2, got '3'"),
        ({"classes": 2.5}, "classes must be an integer >= 2"),
        ({"classes": True}, "classes must be an integer >= 2"),
        ({"spatial_dims": 4}, "spatial_dims must be 2 or 3, got 4"),
        ({"spatial_dims": 1}, "spatial_dims must be 2 or 3"),
        ({"spatial_dims": True}, "spatial_dims must be 2 or 3"),
        ({"spatial_dims": 3.0}, "spatial_dims must be 2 or 3"),
    ],
)
@pytest.mark.parametrize("name", ["dice_ce", "dice_nacl"])
def test_bad_settings_are_refused_by_name(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_training_loss(name, **kwargs)


def test_an_unknown_name_is_named_before_the_other_settings():
    with pytest.raises(ValueError, match="loss must be one of"):
        make_training_loss("focal", classes=0)
    with pytest.raises(ValueError, match="loss must be one of"):
        make_training_loss(["dice"])


def test_nacl_refuses_logits_of_other_dimensions_or_classes_by_name():
    y2 = torch.zeros(1, 1, 6, 6, dtype=torch.long)
    with pytest.raises(
        ValueError, match=r"with 3 spatial dimensions \(classes=3, spatial_dims=3\), got \(1, 3, 6, 6\)"
    ):
        make_training_loss("dice_nacl", classes=3)(torch.randn(1, 3, 6, 6), y2)
    y3 = torch.zeros(1, 1, 4, 4, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"logits must be \(B, 2, \*spatial\)"):
        make_training_loss("dice_nacl", classes=2)(torch.randn(1, 3, 4, 4, 4), y3)
    value = make_training_loss("dice_nacl", classes=3, spatial_dims=2)(torch.randn(1, 3, 6, 6), y2)
    assert value.ndim == 0 and torch.isfinite(value)
