"""The example bundles take a calibration loss as a config override (docs/training.md): ``--loss#_target_`` swaps
MONAI's ``DiceCELoss`` for a loss of :mod:`monai_unc.losses` with the bundle's own arguments, and (slow) the toy
bundle trains with it."""

from __future__ import annotations

import pytest
import torch
from monai.bundle import ConfigParser

from monai_unc.losses import DiceCEL1ACELoss, DiceCEMarginLoss, DiceSVLSLoss
from tests.bundles.test_bundles import BUNDLES

OVERRIDES = {
    "monai_unc.losses.DiceSVLSLoss": DiceSVLSLoss,
    "monai_unc.losses.DiceCEMarginLoss": DiceCEMarginLoss,
    "monai_unc.losses.DiceCEL1ACELoss": DiceCEL1ACELoss,
}


@pytest.mark.parametrize("bundle", sorted(BUNDLES))
@pytest.mark.parametrize("target", sorted(OVERRIDES))
def test_loss_override_builds_the_calibration_loss_with_the_bundle_arguments(bundle, target):
    parser = ConfigParser()
    parser.read_config(str(BUNDLES[bundle] / "configs" / "train.json"))
    assert parser["loss"]["_target_"] == "DiceCELoss"
    parser["loss#_target_"] = target  # what `--loss#_target_ <target>` does on the command line
    loss = parser.get_parsed_content("loss")
    assert isinstance(loss, OVERRIDES[target]) and loss.to_onehot_y
    classes = parser.get_parsed_content("network_def").out_channels
    z = torch.randn(1, classes, 8, 8, 8, requires_grad=True)
    y = torch.randint(0, classes, (1, 1, 8, 8, 8))
    value = loss(z, y)
    value.backward()
    assert torch.isfinite(value) and z.grad.abs().sum() > 0


@pytest.mark.slow
def test_toy_bundle_trains_with_the_svls_override(toy_bundle_trainings):
    """``train.json --loss#_target_ monai_unc.losses.DiceSVLSLoss`` for 2 iterations (the session fixture of
    tests/conftest.py runs it)."""
    assert (toy_bundle_trainings["svls"] / "model.pt").is_file()
