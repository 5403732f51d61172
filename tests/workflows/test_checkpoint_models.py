"""Hostile model inputs for ``monai_unc.workflows.models``: network specs MONAI cannot build, checkpoints in unusual
but common formats, weights of the wrong kind."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from monai_unc.workflows.models import check_weights_fit, load_checkpoint, load_network

SPEC = {"_target_": "monai.networks.nets.UNet", "spatial_dims": 2, "in_channels": 1, "out_channels": 2,
        "channels": [4, 8], "strides": [2], "num_res_units": 0}


def _net() -> nn.Module:
    from monai.networks.nets import UNet

    torch.manual_seed(0)
    return UNet(2, 1, 2, (4, 8), (2,), num_res_units=0).eval()


@pytest.mark.parametrize("spec, why", [
    ({"_target_": "monai.networks.nets.UNet", "spatial_dims": 2},
     r"missing 4 required positional arguments: 'in_channels'"),
    (dict(SPEC, spatial_dims="two"), r"TypeError: unsupported operand type"),
    (dict(SPEC, bogus=1), r"unexpected keyword argument 'bogus'"),
])
def test_spec_that_cannot_be_built_names_the_reason(tmp_path, spec, why):
    # MONAI's "Failed to instantiate component ... with keywords" named neither the missing nor the wrong argument,
    # and advised '_mode_=debug', a mode a spec may not use
    torch.save(_net().state_dict(), tmp_path / "w.pt")
    with pytest.raises(ValueError, match=r"cannot build the network from --network: .*" + why) as err:
        load_network(network=spec, checkpoints=[tmp_path / "w.pt"])
    assert "\n" not in str(err.value) and "_mode_" not in str(err.value)
