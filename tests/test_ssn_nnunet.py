"""nnUNetTrainerSSN: the SSN head replaces nnU-Net's full-resolution segmentation layer, the loss is the SSN loss
there and nnU-Net's own on the deep-supervision outputs, and (slow) a tiny toy task trains on CPU."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

from nnunetv2.training.loss.compound_losses import DC_and_CE_loss  # noqa: E402
from nnunetv2.training.loss.deep_supervision import DeepSupervisionWrapper  # noqa: E402
from nnunetv2.training.loss.dice import MemoryEfficientSoftDiceLoss  # noqa: E402
from nnunetv2.utilities.plans_handling.plans_handler import PlansManager  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from monai_unc.networks import SSNHead, SSNLoss, find_ssn_heads, ssn_sampling  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _plans(ndim=3):
    conv = f"torch.nn.modules.conv.Conv{ndim}d"
    arch = {
        "network_class_name": "dynamic_network_architectures.architectures.unet.PlainConvUNet",
        "arch_kwargs": {
            "n_stages": 3, "features_per_stage": [4, 8, 16], "conv_op": conv,
            "kernel_sizes": [[3] * ndim] * 3, "strides": [[1] * ndim, [2] * ndim, [2] * ndim],
            "n_conv_per_stage": [1, 1, 1], "n_conv_per_stage_decoder": [1, 1], "conv_bias": True,
            "norm_op": f"torch.nn.modules.instancenorm.InstanceNorm{ndim}d",
            "norm_op_kwargs": {"eps": 1e-5, "affine": True}, "dropout_op": None, "dropout_op_kwargs": None,
            "nonlin": "torch.nn.LeakyReLU", "nonlin_kwargs": {"inplace": True},
        },
        "_kw_requires_import": ["conv_op", "norm_op", "dropout_op", "nonlin"],
    }
    conf = {"data_identifier": "unit", "preprocessor_name": "DefaultPreprocessor", "batch_size": 2,
            "patch_size": [16] * ndim, "median_image_size_in_voxels": [16] * ndim, "spacing": [1.0] * ndim,
            "normalization_schemes": ["ZScoreNormalization"], "use_mask_for_norm": [False], "architecture": arch,
            "batch_dice": False}
    return {"dataset_name": "Dataset999_Unit", "plans_name": "nnUNetPlans", "configurations": {"cfg": conf},
            "original_median_spacing_after_transp": [1.0] * ndim, "image_reader_writer": "SimpleITKIO",
            "transpose_forward": list(range(ndim)), "transpose_backward": list(range(ndim)),
            "experiment_planner_used": "ExperimentPlanner", "label_manager": "LabelManager",
            "foreground_intensity_properties_per_channel": {}}


@pytest.mark.parametrize("ndim", [2, 3])
def test_network_has_an_ssn_head_on_the_full_resolution_output(ndim, monkeypatch):
    from nnunetv2.utilities.find_objects import recursive_find_trainer_class_by_name

    monkeypatch.setenv("nnUNet_extTrainer", mun.trainer_dir())
    for name in ("nnUNetTrainerSSN", "nnUNetTrainerSSN_10iters"):  # found by name, as nnUNetv2_train -tr does
        assert recursive_find_trainer_class_by_name(name).__name__ == name
    pm = PlansManager(_plans(ndim))
    torch.manual_seed(0)
    net = mun.nnUNetTrainerSSN.build_network_architecture(pm, pm.get_configuration("cfg"), 1, 3, True)
    head = net.decoder.seg_layers[-1]
    assert isinstance(head, SSNHead) and find_ssn_heads(net) == [head]
    assert (head.in_channels, head.num_classes, head.rank, head.spatial_dims) == (4, 3, 10, ndim)
    assert head.input_activation is None and head.train_output == "raw"
    keys = [k for k in net.state_dict() if k.startswith("decoder.seg_layers.1.")]
    assert sorted({k.split(".")[3] for k in keys}) == ["cov_factor_conv", "log_cov_diag_conv", "mean_conv"]
    x = torch.randn(2, 1, *([16] * ndim))
    out = net.train()(x)
    assert [o.shape[1] for o in out] == [3 * 12, 3]  # raw SSN outputs at full resolution, logits below
    net.eval()
    with torch.no_grad():
        mean = net(x)[0]
        assert mean.shape == (2, 3, *([16] * ndim))
        with ssn_sampling(net):
            a, b = net(x)[0], net(x)[0]
    assert not torch.equal(a, b) and a.shape == mean.shape
    assert mun.attach_ssn_head(net) is head  # idempotent


def test_loss_is_ssn_on_full_resolution_and_stock_on_deep_supervision():
    pm = PlansManager(_plans(3))
    torch.manual_seed(0)
    net = mun.nnUNetTrainerSSN.build_network_architecture(pm, pm.get_configuration("cfg"), 1, 3, True)
    head = net.decoder.seg_layers[-1]
    base = DC_and_CE_loss({"batch_dice": False, "smooth": 1e-5, "do_bg": False, "ddp": False}, {}, weight_ce=1,
                          weight_dice=1, ignore_label=None, dice_class=MemoryEfficientSoftDiceLoss)
    weights = np.array([1.0, 0.5])
    weights = weights / weights.sum()
    loss = mun.SSNDeepSupervisionLoss(DeepSupervisionWrapper(base, weights), head, SSNLoss(4))
    x = torch.randn(2, 1, 16, 16, 16)
    y = torch.randint(0, 3, (2, 1, 16, 16, 16)).float()
    targets = [y, y[:, :, ::2, ::2, ::2]]
    out = net.train()(x)
    torch.manual_seed(3)
    got = loss(out, targets)
    torch.manual_seed(3)
    expected = weights[0] * SSNLoss(4)(head.distribution_from_raw(out[0]), y) + weights[1] * base(out[1], targets[1])
    torch.testing.assert_close(got, expected)
    got.backward()
    for conv in (head.mean_conv, head.log_cov_diag_conv, head.cov_factor_conv, net.decoder.seg_layers[0]):
        assert conv.weight.grad.abs().sum() > 0
    with torch.no_grad():  # eval mode (nnU-Net's validation): mean logits, stock loss
        out = net.eval()(x)
        torch.testing.assert_close(loss(out, targets), DeepSupervisionWrapper(base, weights)(out, targets))
        single = mun.SSNDeepSupervisionLoss(base, head, SSNLoss(4))  # deep supervision off
        net.decoder.deep_supervision = False
        torch.testing.assert_close(single(net(x), y), base(net(x), y))
        net.train()
        torch.manual_seed(1)
        raw = net(x)
        torch.manual_seed(2)
        v = single(raw, y)
        torch.manual_seed(2)
        torch.testing.assert_close(v, SSNLoss(4)(head.distribution_from_raw(raw), y))


@pytest.mark.slow
def test_trainer_trains_a_tiny_toy_task_on_cpu(tmp_path, monkeypatch):
    for name in ("raw", "preprocessed", "results"):
        monkeypatch.setenv(f"nnUNet_{name}", str(tmp_path / name))
    monkeypatch.setenv("nnUNet_compile", "false")
    monkeypatch.setenv("nnUNet_extTrainer", mun.trainer_dir())
    monkeypatch.setenv("nnUNet_n_proc_DA", "1")  # planning sets torch's thread count from it (0 is refused)
    monkeypatch.chdir(tmp_path)
    from nnunetv2.experiment_planning.plan_and_preprocess_api import (
        extract_fingerprints,
        plan_experiments,
        preprocess,
    )
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor
    from nnunetv2.run.run_training import get_trainer_from_args

    mun.write_toy_dataset(tmp_path / "raw", dataset_id=991, num_training=4, num_test=1, shape=(24, 24, 24))
    extract_fingerprints([991], num_processes=1)
    plan_experiments([991])
    preprocess([991], configurations=("3d_fullres",), num_processes=(1,))
    plans_file = tmp_path / "preprocessed" / "Dataset991_UncToy" / "nnUNetPlans.json"
    plans = json.loads(plans_file.read_text())
    plans["configurations"]["3d_fullres"]["architecture"]["arch_kwargs"]["features_per_stage"] = [
        min(f, 16) for f in plans["configurations"]["3d_fullres"]["architecture"]["arch_kwargs"]["features_per_stage"]
    ]
    plans_file.write_text(json.dumps(plans))
    cases = sorted(p.name[: -len("_0000.nii.gz")] for p in (tmp_path / "raw/Dataset991_UncToy/imagesTr").iterdir())
    (plans_file.parent / "splits_final.json").write_text(json.dumps([{"train": cases[1:], "val": cases[:1]}]))

    monkeypatch.setenv("nnUNet_n_proc_DA", "0")  # augmentation in this process (after planning, which needs > 0)
    trainer = get_trainer_from_args("991", "3d_fullres", 0, "nnUNetTrainerSSN_10iters", device=CPU)
    trainer.initialize()
    head = trainer.network.decoder.seg_layers[-1]
    # nnU-Net imports the trainer module as a top-level module, so its classes are compared by name
    assert isinstance(head, SSNHead) and type(trainer.loss).__name__ == "SSNDeepSupervisionLoss"
    before = {n: p.detach().clone() for n, p in head.named_parameters()}
    trainer.run_training()
    losses = trainer.logger.local_logger.my_fantastic_logging["train_losses"]
    assert len(losses) == 1 and np.isfinite(losses[0])
    for n, p in head.named_parameters():  # all three convolutions were trained
        assert not torch.equal(p.detach(), before[n]), n
    model = tmp_path / "results" / "Dataset991_UncToy" / "nnUNetTrainerSSN_10iters__nnUNetPlans__3d_fullres"
    ckpt = torch.load(model / "fold_0" / "checkpoint_final.pth", map_location="cpu", weights_only=False)
    assert ckpt["trainer_name"] == "nnUNetTrainerSSN_10iters"
    assert any(k.endswith("cov_factor_conv.weight") for k in ckpt["network_weights"])

    # stock nnU-Net prediction rebuilds the network through the trainer class and uses the mean logits
    pred = nnUNetPredictor(device=CPU, allow_tqdm=False)
    pred.initialize_from_trained_model_folder(str(model), (0,), "checkpoint_final.pth")
    assert isinstance(pred.network.decoder.seg_layers[-1], SSNHead)
    out_dir = tmp_path / "pred"
    out_dir.mkdir()
    pred.predict_from_files_sequential(str(tmp_path / "raw/Dataset991_UncToy/imagesTs"), str(out_dir))
    assert len(list(out_dir.glob("*.nii.gz"))) == 1
    assert os.path.isfile(out_dir / "plans.json")
