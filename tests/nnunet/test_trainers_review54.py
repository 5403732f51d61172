"""Review 54 of the calibration trainers' settings: the class attributes a subclass sets (docs/training.md) are
checked by name when the loss is built, as the losses of :mod:`monai_unc.losses` check their own arguments."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("nnunetv2")

import monai_unc.nnunet as mun  # noqa: E402
from monai_unc.nnunet.trainers import CalibrationLoss  # noqa: E402
from tests.nnunet.test_calibration_trainers import _trainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("base, attr, value, error, match", [
    # a NaN weight trained on a NaN loss; a negative weight or alpha rewarded the miscalibration the term penalises
    ("nnUNetTrainerL1ACE", "calibration_weight", float("nan"), ValueError, "calibration_weight must be a finite"),
    ("nnUNetTrainerL1ACE", "calibration_weight", -1.0, ValueError, "calibration_weight must be a finite"),
    ("nnUNetTrainerL1ACE", "calibration_weight", True, TypeError, "calibration_weight must be a finite"),
    ("nnUNetTrainerMbLS", "mbls_alpha", -0.1, ValueError, "mbls_alpha must be a finite"),
    ("nnUNetTrainerMbLS", "mbls_alpha", True, TypeError, "mbls_alpha must be a finite"),
    # hostile review 56: float() took a margin of True as 1 and "10" as 10; a negative one failed at the first step
    ("nnUNetTrainerMbLS", "mbls_margin", True, TypeError, "mbls_margin must be a finite"),
    ("nnUNetTrainerMbLS", "mbls_margin", "10", TypeError, "mbls_margin must be a finite"),
    ("nnUNetTrainerMbLS", "mbls_margin", -1.0, ValueError, "mbls_margin must be a finite"),
    ("nnUNetTrainerNACL", "nacl_alpha", -1.0, ValueError, "nacl_alpha must be a finite"),
    ("nnUNetTrainerNACL", "nacl_alpha", float("nan"), ValueError, "nacl_alpha must be a finite"),
    # an even kernel shifted MONAI's mean-filtered target by half a voxel; True failed inside torch.ones
    ("nnUNetTrainerNACL", "nacl_kernel_size", 2, ValueError, "nacl_kernel_size must be an odd integer"),
    ("nnUNetTrainerNACL", "nacl_kernel_size", True, ValueError, "nacl_kernel_size must be an odd integer"),
    # "no" is truthy: the spacing-aware kernels were built
    ("nnUNetTrainerSVLS", "svls_spacing_aware", "no", TypeError, "svls_spacing_aware must be True or False"),
])
def test_bad_trainer_settings_are_refused_by_name(base, attr, value, error, match, tmp_path, monkeypatch):
    cls = type(f"{base}Custom", (getattr(mun, base),), {attr: value})
    trainer = _trainer(cls, tmp_path, monkeypatch)
    with pytest.raises(error, match=f"{cls.__name__}.{match}"):
        trainer._build_loss()


@pytest.mark.parametrize("base, attr, value", [
    ("nnUNetTrainerL1ACE", "calibration_weight", 0),
    ("nnUNetTrainerMbLS", "mbls_alpha", 0.5),
    ("nnUNetTrainerNACL", "nacl_kernel_size", 5),
    ("nnUNetTrainerSVLS", "svls_spacing_aware", True),
])
def test_good_trainer_settings_still_build_the_loss(base, attr, value, tmp_path, monkeypatch):
    cls = type(f"{base}Custom", (getattr(mun, base),), {attr: value})
    loss = _trainer(cls, tmp_path, monkeypatch)._build_loss()
    assert isinstance(loss, torch.nn.Module)


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), -0.5])
def test_calibration_loss_refuses_a_weight_that_is_no_finite_number_at_least_zero(weight):
    with pytest.raises(ValueError, match="weight must be a finite number >= 0"):
        CalibrationLoss(torch.nn.L1Loss(), torch.nn.L1Loss(), "add", weight)


@pytest.mark.parametrize("base", ["nnUNetTrainerSVLS", "nnUNetTrainerNACL", "nnUNetTrainerMCDropoutSVLS"])
def test_calibration_weight_is_refused_where_it_does_not_apply(base, tmp_path, monkeypatch):
    """Found by review: SVLS and NACL replace nnU-Net's cross-entropy (weighted by nnU-Net's ``weight_ce``), so
    ``calibration_weight`` never entered their loss: ``calibration_weight = 5`` trained the default loss, silently
    (docs/training.md documents it for L1-ACE only). A value other than 1 is now refused by name; 1 still builds."""
    cls = type(f"{base}Weighted", (getattr(mun, base),), {"calibration_weight": 5.0})
    with pytest.raises(ValueError, match=rf"{cls.__name__}.calibration_weight = 5 does not apply"):
        _trainer(cls, tmp_path, monkeypatch)._build_loss()
    same = type(f"{base}One", (getattr(mun, base),), {"calibration_weight": 1})
    assert isinstance(_trainer(same, tmp_path, monkeypatch)._build_loss(), torch.nn.Module)


def test_calibration_loss_refuses_a_weight_that_replace_ce_ignores():
    """``CalibrationLoss(..., "replace_ce", weight)`` ignored the weight (the term replaces the cross-entropy)."""
    with pytest.raises(ValueError, match="weight does not apply to kind 'replace_ce'"):
        CalibrationLoss(torch.nn.L1Loss(), torch.nn.L1Loss(), "replace_ce", 5.0)
    assert CalibrationLoss(torch.nn.L1Loss(), torch.nn.L1Loss(), "replace_ce", 1.0).weight == 1.0


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_an_ssn_head_takes_the_dtype_of_the_layer_it_replaces(dtype):
    """The head was made in float32 whatever the network's dtype: a float64 network failed on its first call with
    "Input type (double) and bias type (float) should be the same"; and in training mode whatever the network's: a
    network in eval mode returned the head's 12 raw channels instead of its 3 mean logits."""
    from dynamic_network_architectures.architectures.unet import PlainConvUNet

    from monai_unc.nnunet.trainers import attach_ssn_head

    torch.manual_seed(0)
    net = PlainConvUNet(input_channels=1, n_stages=2, features_per_stage=(4, 8), conv_op=torch.nn.Conv3d,
                        kernel_sizes=3, strides=(1, 2), n_conv_per_stage=1, num_classes=3,
                        n_conv_per_stage_decoder=1).to(dtype).eval()
    head = attach_ssn_head(net, rank=2)
    assert all(p.dtype == dtype for p in head.parameters()) and not head.training
    with torch.no_grad():
        out = net(torch.rand(1, 1, 8, 8, 8, dtype=dtype))
    assert out.dtype == dtype and out.shape == (1, 3, 8, 8, 8)
    assert attach_ssn_head(net.train()) is head and head.training  # a head already there is returned unchanged


def _plans_with_dropout(kwargs):
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

    from tests.nnunet.test_ssn_trainer import _plans as unet_plans

    plans = unet_plans(3)
    arch = plans["configurations"]["cfg"]["architecture"]["arch_kwargs"]
    arch["dropout_op"], arch["dropout_op_kwargs"] = "torch.nn.Dropout3d", kwargs
    pm = PlansManager(plans)
    return pm, pm.get_configuration("cfg")


def test_mc_dropout_trainer_names_the_implicit_planned_rate():
    """Plans with ``dropout_op`` and no rate (``dropout_op_kwargs={}``) drop at torch's default p = 0.5 in nnU-Net;
    the trainer built them at 0.2 without the warning it gives for ``{"p": 0.5}`` (found by hostile testing)."""
    pm, cfg = _plans_with_dropout({})
    with pytest.warns(UserWarning, match=r"already has dropout \(p = 0.5\).*dropout_p = 0.2"):
        net = mun.nnUNetTrainerMCDropout.build_network_architecture(pm, cfg, 1, 3, False)
    assert {m.p for m in net.modules() if isinstance(m, torch.nn.Dropout3d)} == {0.2}


@pytest.mark.parametrize("kwargs", [[0.5], "0.5"])
def test_mc_dropout_trainer_refuses_dropout_kwargs_that_are_no_object_naming_them(kwargs):
    """A plans file's ``dropout_op_kwargs`` of ``[0.5]`` or ``"0.5"`` was "'list' object has no attribute 'get'"."""
    pm, cfg = _plans_with_dropout(kwargs)
    with pytest.raises(ValueError, match="dropout_op_kwargs must be"):
        mun.nnUNetTrainerMCDropout.build_network_architecture(pm, cfg, 1, 3, False)


@pytest.mark.parametrize("rate", [1.5, 0.0, True, "0.2", float("nan")])
def test_a_bad_trainer_dropout_rate_is_named_as_the_attribute(rate):
    """A subclass's ``dropout_p = 1.5`` was "p must be a dropout rate", naming no ``p`` the user set."""
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

    from tests.nnunet.test_ssn_trainer import _plans as unet_plans

    pm = PlansManager(unet_plans(3))
    trainer = type("nnUNetTrainerMCDropoutBad", (mun.nnUNetTrainerMCDropout,), {"dropout_p": rate})
    with pytest.raises(ValueError, match=r"nnUNetTrainerMCDropoutBad\.dropout_p must be a dropout rate"):
        trainer.build_network_architecture(pm, pm.get_configuration("cfg"), 1, 3, False)
