"""``calibrate_network`` on numpy cases as the fit reads them (hostile review of the ``arrays`` side)."""

import numpy as np
import pytest
import torch

from monai_unc.temperature import calibrate_network


@pytest.mark.parametrize("layout", ["numpy", "flipped", "big-endian"])
def test_calibrate_network_takes_the_numpy_cases_its_fit_takes(layout):
    """The fit ran on numpy logits, then the record's metrics raised: AttributeError 'numel' for a plain array,
    torch's negative-stride / byte-order ValueError for a flipped or big-endian one."""
    torch.manual_seed(0)
    net = torch.nn.Conv2d(1, 2, 1)
    with torch.no_grad():
        z = (5 * net(torch.randn(2, 1, 8, 8))).numpy()
    y = (np.random.default_rng(0).random((2, 8, 8)) < 0.3).astype(np.int64)
    zz, yy = {"numpy": (z, y), "flipped": (np.flip(z, -1), np.flip(y, -1)),
              "big-endian": (z.astype(">f4"), y.astype(">i8"))}[layout]
    _, record = calibrate_network([zz], [yy], torch.nn.Conv2d(1, 2, 1), max_steps=50)
    zt = torch.from_numpy(np.ascontiguousarray(zz, np.float32))
    yt = torch.from_numpy(np.ascontiguousarray(yy, np.int64))
    _, reference = calibrate_network([zt], [yt], torch.nn.Conv2d(1, 2, 1), max_steps=50)
    assert record["voxels"] == reference["voxels"] == 128
    assert record["temperature"] == reference["temperature"]
    assert record["before"] == reference["before"] and record["after"] == reference["after"]
