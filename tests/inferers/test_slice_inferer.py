"""MONAI's ``SliceInferer`` (a 2D network on the 2D slices of a 3D volume) as ``base_inferer``: the maps equal a
float64 brute force of every slice window's samples stitched by MONAI's own ``SliceInferer``.

Found by hostile testing: such a configuration was refused as a 3D input for a 2D network ("expected a 4-D tensor").
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from monai.inferers import SliceInferer
from scipy.special import xlogy

from monai_unc.inferers import MCDropoutInferer, TTAInferer


def net2d(out=3, dropout=0.0):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.Tanh(), torch.nn.Dropout2d(dropout),
                               torch.nn.Conv2d(4, out, 3, padding=1)).eval()


def entropy(p):
    return -xlogy(p, p).sum(1, keepdims=True)


def brute_force(net, x, spatial_dim, flips):
    """Per slice window: every flip's softmax in float64, the window's mean, H(mean), mean H; stitched by MONAI."""
    dnet = copy.deepcopy(net).double()

    def window(t):
        ps = []
        for dims in flips:
            z = torch.flip(dnet(torch.flip(t, dims)), dims) if dims else dnet(t)
            ps.append(torch.softmax(z, 1))
        m = torch.stack(ps).mean(0)
        h = torch.stack([torch.from_numpy(entropy(p.numpy())) for p in ps]).mean(0)
        return {"m": m, "h_m": torch.from_numpy(entropy(m.numpy())), "ee": h}

    with torch.no_grad():
        out = SliceInferer(roi_size=(4, 4), spatial_dim=spatial_dim, overlap=0.25)(x.double(), window)
    m = out["m"].numpy()
    pe = entropy(m)
    return {"pred": m, "predictive_entropy": pe, "expected_entropy": out["ee"].numpy(),
            "mutual_information": out["h_m"].numpy() - out["ee"].numpy(),
            "window_disagreement": pe - out["h_m"].numpy()}


@pytest.mark.parametrize("spatial_dim", [0, 1, 2])
def test_slice_inferer_maps_equal_a_brute_force(spatial_dim):
    net = net2d()
    x = torch.randn(2, 1, 6, 7, 5)
    base = SliceInferer(roi_size=(4, 4), spatial_dim=spatial_dim, overlap=0.25, sw_batch_size=3)
    out = TTAInferer(flip_axes="all", base_inferer=base, keep_samples=True)(x, net)
    assert out.num_samples == 4  # the 2 axes of a slice: 4 flips, not the 8 of the 3D input
    assert out["samples"].shape == (4, 2, 3, 6, 7, 5)
    ref = brute_force(net, x, spatial_dim, [(), (2,), (3,), (2, 3)])
    for key, value in ref.items():
        np.testing.assert_allclose(out[key].double().numpy(), value, atol=2e-6, rtol=0, err_msg=key)
    assert float(out["window_disagreement"].max()) > 1e-4  # the slice windows overlap: the test can fail


def test_slice_inferer_with_mc_dropout():
    net = net2d(dropout=0.3)
    x = torch.randn(1, 1, 6, 7, 5)
    out = MCDropoutInferer(num_samples=4, seed=0, base_inferer=SliceInferer(roi_size=(4, 4), spatial_dim=2))(x, net)
    assert out.num_samples == 4 and out["pred"].shape == (1, 3, 6, 7, 5)
    assert float(out["mutual_information"].max()) > 0
    torch.testing.assert_close(out["pred"].sum(1), torch.ones(1, 6, 7, 5))


def test_slice_inferer_needs_a_2d_network_and_a_3d_input():
    base = SliceInferer(roi_size=(4, 4), spatial_dim=2)
    net3d = torch.nn.Conv3d(1, 3, 3, padding=1)
    with pytest.raises(ValueError, match="SliceInferer needs a 2D network"):
        TTAInferer(flip_axes=(0,), base_inferer=base)(torch.randn(1, 1, 6, 7, 5), net3d)
    with pytest.raises(ValueError, match="5-D tensor"):
        TTAInferer(flip_axes=(0,), base_inferer=base)(torch.randn(1, 1, 6, 7), net2d())
    with pytest.raises(ValueError, match="roi_size"):
        TTAInferer(flip_axes=(0,), base_inferer=SliceInferer(roi_size=(4, 4, 4)))(torch.randn(1, 1, 6, 7, 5), net2d())
