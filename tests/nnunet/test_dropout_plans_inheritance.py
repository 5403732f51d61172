"""A dropout change restricted to some configurations reaches no other one through nnU-Net's ``inherits_from``.

nnU-Net resolves a configuration without its own ``architecture`` from its parent's (``PlansManager``), so the plans are
checked as nnU-Net itself reads them."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("nnunetv2")

from nnunetv2.utilities.plans_handling.plans_handler import PlansManager  # noqa: E402

from monai_unc.nnunet.dropout import dropout_plans  # noqa: E402

ARCH = {"network_class_name": "dynamic_network_architectures.architectures.unet.PlainConvUNet",
        "arch_kwargs": {"conv_op": "torch.nn.modules.conv.Conv3d", "n_stages": 2},
        "_kw_requires_import": ["conv_op"]}


def _plans():
    return {"plans_name": "nnUNetPlans", "configurations": {
        "3d_fullres": {"architecture": copy.deepcopy(ARCH), "patch_size": [8, 8, 8]},
        "3d_lowres": {"architecture": copy.deepcopy(ARCH), "patch_size": [4, 4, 4]},
        "3d_cascade_fullres": {"inherits_from": "3d_fullres", "previous_stage": "3d_lowres"},
        # two levels down, and a cycle that nnU-Net itself refuses (left as it is)
        "3d_deeper": {"inherits_from": "3d_cascade_fullres"},
        "loop_a": {"inherits_from": "loop_b"}, "loop_b": {"inherits_from": "loop_a"},
    }}


def _has_dropout(plans, name):
    arch = PlansManager(plans)._internal_resolve_configuration_inheritance(name)["architecture"]
    return arch["arch_kwargs"].get("dropout_op") is not None


def test_restricted_change_keeps_inheriting_configurations_without_dropout():
    plans = _plans()
    out = dropout_plans(plans, p=0.2, configurations=["3d_fullres"])
    assert _has_dropout(out, "3d_fullres")
    # both inherited dropout from 3d_fullres before
    assert not _has_dropout(out, "3d_cascade_fullres") and not _has_dropout(out, "3d_deeper")
    assert not _has_dropout(out, "3d_lowres")
    resolved = PlansManager(out)._internal_resolve_configuration_inheritance("3d_cascade_fullres")
    assert resolved["architecture"] == ARCH and resolved["previous_stage"] == "3d_lowres"
    assert "architecture" not in out["configurations"]["loop_a"] and plans == _plans()  # the input unchanged


def test_unrestricted_change_reaches_the_inheriting_configurations():
    out = dropout_plans(_plans(), p=0.2)
    assert all(_has_dropout(out, n) for n in ("3d_fullres", "3d_lowres", "3d_cascade_fullres", "3d_deeper"))
    assert "architecture" not in out["configurations"]["3d_cascade_fullres"]


def test_change_of_another_configuration_leaves_the_child_alone():
    out = dropout_plans(_plans(), p=0.2, configurations=["3d_lowres"])
    assert _has_dropout(out, "3d_lowres") and not _has_dropout(out, "3d_cascade_fullres")
    assert "architecture" not in out["configurations"]["3d_cascade_fullres"]  # its parent is unchanged: left alone
