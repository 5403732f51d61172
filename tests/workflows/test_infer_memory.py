"""The memory warning of ``monai-unc infer`` before a case that will not fit (#30)."""

from __future__ import annotations

import torch
from monai.networks.nets import UNet

from monai_unc.inferers import estimate_memory
from monai_unc.workflows.infer import InferSettings, memory_warning, network_out_channels


def _settings(roi=None) -> InferSettings:
    return InferSettings(model="m", method="mcdropout", samples=4, roi=roi, overlap=0.25, intensity="none",
                         measures=["predictive_entropy", "mutual_information", "variance"], seed=0,
                         activation="softmax", checkpoints=[])


def test_memory_warning_names_the_case_and_the_need():
    need = estimate_memory((128, 128, 128), 105, roi_size=(64, 64, 64), window_disagreement=False).total
    msg = memory_warning("ct_001", (128, 128, 128), 105, _settings([64]), "cpu", available=need - 1)
    assert msg is not None and "ct_001" in msg and "105 classes" in msg and f"{need / 2**30:.1f} GiB" in msg
    assert memory_warning("ct_001", (128, 128, 128), 105, _settings([64]), "cpu", available=need) is None
    assert memory_warning("ct_001", (128, 128, 128), None, _settings([64]), "cpu", available=1) is None
    # without a window the whole volume is one pass: more memory
    assert memory_warning("ct_001", (128, 128, 128), 105, _settings(None), "cpu", available=need) is not None


def test_network_out_channels():
    unet = UNet(3, 1, 7, channels=(4, 8), strides=(2,))
    assert network_out_channels(unet) == 7
    seq = torch.nn.Sequential(torch.nn.Conv3d(1, 4, 3), torch.nn.Conv3d(4, 5, 1))
    assert network_out_channels(seq) == 5
    assert network_out_channels(lambda x: x) is None
