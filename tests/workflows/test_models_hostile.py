"""Hostile networks and weights for ``monai_unc.workflows.models``: spatial dimensions that cannot be told,
weights of another architecture."""

from __future__ import annotations

import pytest
import torch

from tests.cli.test_cli_hostile import NET, OTHER, _unet


def test_network_spatial_dims_and_weight_checks():
    from monai_unc.workflows.models import check_weights_fit, network_spatial_dims

    assert network_spatial_dims(_unet(NET)) == 3
    assert network_spatial_dims(_unet(dict(NET, spatial_dims=2))) == 2
    assert network_spatial_dims(torch.nn.Linear(2, 2)) is None
    assert network_spatial_dims(torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1), torch.nn.Conv3d(1, 1, 1))) is None
    net = _unet(NET)
    check_weights_fit(net, net.state_dict(), "ok.pt")
    with pytest.raises(ValueError, match=r"x.pt does not fit the network UNet: .*shape mismatches"):
        check_weights_fit(net, _unet(OTHER).state_dict(), "x.pt")
