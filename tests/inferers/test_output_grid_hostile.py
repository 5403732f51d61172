"""A network whose output is not on its input's spatial grid (it downsamples or crops) is refused by every inferer,
naming the network and both grids (hostile review: the maps came out on the network's smaller grid, and
``monai-unc infer`` wrote them with the image's affine)."""

from __future__ import annotations

import json

import pytest
import torch
from monai.inferers import SlidingWindowInferer

from monai_unc.inferers import EnsembleInferer, MCDropoutInferer, SoftmaxInferer, TTAInferer


class Downsampling(torch.nn.Module):
    """Two class logits on a grid half the input's (a strided convolution, no upsampling)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv3d(1, 2, 3, stride=2, padding=1)
        self.drop = torch.nn.Dropout(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.conv(x))


class Cropping(torch.nn.Module):
    """Two class logits without the outer voxel of each side (a valid convolution)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv3d(1, 2, 3, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


@pytest.mark.parametrize("make", [
    lambda: SoftmaxInferer(),
    lambda: MCDropoutInferer(num_samples=2),
    lambda: TTAInferer(),
    lambda: MCDropoutInferer(num_samples=2, base_inferer=SlidingWindowInferer(roi_size=8)),
], ids=["softmax", "mcdropout", "tta", "mcdropout-sliding-window"])
def test_a_single_network_off_the_input_grid_is_refused(make):
    torch.manual_seed(0)
    x = torch.rand(1, 1, 16, 16, 16)
    with pytest.raises(ValueError, match=r"the network \(Downsampling\) returns its output on the spatial grid "
                                         r"\(8, 8, 8\) but its input is on \(16, 16, 16\)"):
        make()(x, Downsampling().eval())


def test_a_cropping_network_is_refused():
    x = torch.rand(1, 1, 10, 10, 10)
    with pytest.raises(ValueError, match=r"the network \(Cropping\) .* grid \(8, 8, 8\) .* \(10, 10, 10\)"):
        SoftmaxInferer()(x, Cropping().eval())


def test_an_ensemble_of_members_that_all_downsample_is_refused_naming_the_member():
    torch.manual_seed(0)
    members = [Downsampling().eval(), Downsampling().eval()]  # they agree with each other: not caught before
    with pytest.raises(ValueError, match=r"^ensemble member 0 \(networks\[0\]\) returns its output on the spatial "
                                         r"grid \(8, 8, 8\) but its input is on \(16, 16, 16\)"):
        EnsembleInferer(members)(torch.rand(1, 1, 16, 16, 16))


def test_a_network_on_the_input_grid_still_runs():
    conv = torch.nn.Conv3d(1, 2, 3, padding=1).eval()
    out = TTAInferer()(torch.rand(1, 1, 6, 6, 6), conv)
    assert out["pred"].shape == (1, 2, 6, 6, 6)


@pytest.mark.slow
def test_infer_writes_no_maps_of_a_downsampling_network(tmp_path, capsys):
    from monai.networks.blocks import Convolution

    from monai_unc import cli
    from monai_unc.data.cohorts import write_toy_cohort

    paths = write_toy_cohort(tmp_path / "d", n_cases=1, shape=(16, 16, 16), predictions=False)
    spec = {"_target_": "monai.networks.blocks.Convolution", "spatial_dims": 3, "in_channels": 1, "out_channels": 2,
            "strides": 2, "dropout": 0.2}
    torch.manual_seed(0)
    torch.save(Convolution(**{k: v for k, v in spec.items() if k != "_target_"}).state_dict(), tmp_path / "net.pt")
    out = tmp_path / "pred"
    rc = cli.main(["infer", "-i", str(paths["images"]), "-o", str(out), "--network", json.dumps(spec),
                   "--checkpoint", str(tmp_path / "net.pt"), "--device", "cpu", "--samples", "2", "-q"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "the network (Convolution) returns its output on the spatial grid (8, 8, 8) but its input is on " \
           "(16, 16, 16)" in err, err
    assert "divisible by its downsampling factor" not in err  # not the hint of a U-Net's skip connections
    assert not list(out.glob("*.nii.gz"))  # no map on the wrong grid
