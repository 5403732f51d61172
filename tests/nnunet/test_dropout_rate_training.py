"""The dropout rate of the MC-dropout trainer's architecture, the dropout plans and post-hoc dropout: numpy rates."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

from monai_unc.nnunet.dropout import add_posthoc_dropout, dropout_arch_kwargs  # noqa: E402

CONV3D = {"conv_op": "torch.nn.modules.conv.Conv3d"}


@pytest.mark.parametrize("rate", [np.float32(0.25), np.float64(0.25), np.float16(0.25)])
def test_a_numpy_rate_is_a_rate_and_becomes_a_python_float(rate):
    """Found by hostile testing: ``np.float32(0.25)`` was refused as "p must be a dropout rate in (0, 1)"."""
    out = dropout_arch_kwargs(CONV3D, p=rate)
    assert out["dropout_op_kwargs"] == {"p": 0.25, "inplace": False}
    assert type(out["dropout_op_kwargs"]["p"]) is float
    json.dumps(out)  # the plans file can hold it


@pytest.mark.parametrize("rate", [True, np.bool_(True), 0.0, 1.0, np.float32("nan"), "0.2", None])
def test_a_bool_nan_string_or_out_of_range_rate_is_refused(rate):
    with pytest.raises(ValueError, match="p must be a dropout rate in"):
        dropout_arch_kwargs(CONV3D, p=rate)


def test_posthoc_dropout_takes_a_numpy_rate():
    from dynamic_network_architectures.architectures.unet import PlainConvUNet
    from torch import nn

    net = PlainConvUNet(input_channels=1, n_stages=2, features_per_stage=(4, 8), conv_op=nn.Conv3d, kernel_sizes=3,
                        strides=(1, 2), n_conv_per_stage=1, num_classes=3, n_conv_per_stage_decoder=1)
    assert add_posthoc_dropout(net, p=np.float32(0.1)) == ["encoder.stages.0", "encoder.stages.1", "decoder.stages.0"]
