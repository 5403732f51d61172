"""Hostile review of the dropout plans variant: a plans file is edited by users, so every field ``dropout_plans`` reads
is checked and a malformed one is a ValueError naming it (not a KeyError / AttributeError / TypeError)."""

from __future__ import annotations

import pytest

pytest.importorskip("nnunetv2")

from monai_unc.nnunet.dropout import dropout_plans  # noqa: E402

ARCH = {"network_class_name": "PlainConvUNet", "arch_kwargs": {"conv_op": "torch.nn.modules.conv.Conv3d"},
        "_kw_requires_import": ["conv_op"]}


def _plans(**conf) -> dict:
    return {"plans_name": "nnUNetPlans", "configurations": {"3d_fullres": conf or {"architecture": ARCH}}}


@pytest.mark.parametrize("plans, match", [
    (["configurations"], "not an nnU-Net plans dict"),  # was "dictionary update sequence element #0 ..."
    ({"configurations": ["3d_fullres"]}, "'configurations' must map"),  # was a TypeError
    ({"configurations": {"3d_fullres": "x"}}, "'configurations' must map"),  # was an AttributeError
    (_plans(architecture="x"), r"configurations.3d_fullres.architecture must be a JSON object"),
    (_plans(architecture={"network_class_name": "X"}), "'arch_kwargs' object"),  # was KeyError 'arch_kwargs'
    (_plans(architecture={**ARCH, "_kw_requires_import": "conv_op"}), "_kw_requires_import must be a list"),
    (_plans(architecture={**ARCH, "arch_kwargs": {"conv_op": None}}), r"arch_kwargs.conv_op must name"),
    (_plans(architecture={**ARCH, "arch_kwargs": {}}), r"arch_kwargs.conv_op must name"),
])
def test_malformed_plans_fields_are_named(plans, match):
    with pytest.raises(ValueError, match=match):
        dropout_plans(plans, p=0.2)


def test_one_configuration_name_is_not_split_into_characters():
    """``configurations="3d_fullres"`` was read as the names '3', 'd', '_', ... ("configurations ['3', 'd', ...] are
    not in the plans")."""
    out = dropout_plans(_plans(), p=0.2, configurations="3d_fullres")
    assert out["configurations"]["3d_fullres"]["architecture"]["arch_kwargs"]["dropout_op"] == "torch.nn.Dropout3d"
    with pytest.raises(ValueError, match=r"configurations \['2d'\] are not in the plans"):
        dropout_plans(_plans(), p=0.2, configurations="2d")
