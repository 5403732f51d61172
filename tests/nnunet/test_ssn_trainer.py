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
from tests._nnunet_pools import plan_in_process  # noqa: E402
from tests.nnunet._toy_training import small_progress_plots  # noqa: E402

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


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

    plan_in_process(monkeypatch)  # no worker process per planning step (tests/_nnunet_pools.py)
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
    small_progress_plots(monkeypatch.setitem)  # tests/nnunet/_toy_training.py: the epoch's plot at a tenth of its dpi
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

    # nnunet-predict samples the SSN head: latent draws per window, MI aleatoric
    import argparse

    import nibabel as nib

    from monai_unc.nnunet.cli import add_parser, run

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    ours = tmp_path / "ours"
    args = parser.parse_args(["nnunet-predict", "-i", str(tmp_path / "raw/Dataset991_UncToy/imagesTs"), "-o",
                              str(ours), "-m", str(model), "-f", "0", "-device", "cpu", "--sources", "ssn",
                              "--num_samples", "4", "--disable_tta", "--seed", "0", "-npp", "0", "-nps", "0",
                              "--disable_progress_bar"])
    assert run(args) == 0
    cfg = json.loads((ours / "uncertainty_config.json").read_text())
    assert cfg["uncertainty_sources"] == ["ssn"] and cfg["mi_meaning"] == "aleatoric" and cfg["num_samples"] == 4
    (rec_file,) = (ours / "uncertainty").glob("*.json")
    rec = json.loads(rec_file.read_text())
    assert rec["num_samples"] == 4 and rec["mi_meaning"] == "aleatoric"
    mi = np.asarray(nib.load(str(ours / "uncertainty" / rec["maps"]["mutual_information"])).dataobj)
    assert np.isfinite(mi).all() and mi.min() >= 0 and mi.max() > 0  # the latent draws disagree

    # temperature scaling cannot divide the SSN distribution by t exactly (the variance floor): refused
    with pytest.raises(ValueError, match="Stochastic Segmentation Network"):
        mun.calibrate_model_folder(model, tmp_path / "calibrated", use_folds=(0,), use_mirroring=False)


# ------------------------------------------------------------------------------------------ nnunet-predict source
def ssn_predictor(sources=("ssn",), num_samples=3, **kw):
    import copy

    from tests.nnunet.test_nnunet import DATASET_JSON, make_plans

    pm = PlansManager(make_plans())
    cm = pm.get_configuration("cfg")
    torch.manual_seed(0)
    net = mun.nnUNetTrainerSSN.build_network_architecture(pm, cm, 1, 3, False)
    head = net.decoder.seg_layers[-1]
    with torch.no_grad():  # a covariance large enough for draws that disagree (training starts it near zero)
        head.log_cov_diag_conv.bias.fill_(0.0)
        head.cov_factor_conv.weight.normal_(0.0, 0.5)
        head.mean_conv.weight.mul_(4.0)
    pred = mun.UncertaintyPredictor(uncertainty_sources=sources, num_samples=num_samples, device=CPU,
                                    allow_tqdm=False, **kw)
    pred.manual_initialization(net, pm, cm, [copy.deepcopy(net.state_dict())], DATASET_JSON, "nnUNetTrainerSSN",
                               (0, 1, 2))
    return pred


def test_ssn_source_draws_latent_samples_per_window_like_a_hand_rolled_loop():
    from acvl_utils.cropping_and_padding.padding import pad_nd_image
    from nnunetv2.inference.sliding_window_prediction import compute_gaussian

    pred = ssn_predictor(seed=7, use_mirroring=False, measures=mun.MAP_MEASURES)
    assert pred.mi_meaning == "aleatoric" and pred.samples_per_voxel() == 3
    torch.manual_seed(5)
    data = torch.randn(1, 20, 16, 16)
    res = pred.predict_uncertainty_from_preprocessed_data(data)
    assert res.num_samples == 3
    # reference: the same draws (seed 7, windows in order, 3 draws each), float64 statistics, Gaussian blend
    net = pred.network.eval()
    padded, revert = pad_nd_image(data, pred.configuration_manager.patch_size, "constant", {"value": 0}, True, None)
    slicers = pred._internal_get_sliding_window_slicers(padded.shape[1:])
    assert len(slicers) > 1  # overlapping windows
    g = compute_gaussian((16, 16, 16), 1.0 / 8, 10, device=CPU).double().numpy()
    acc = np.zeros((5, *padded.shape[1:]))
    w = np.zeros(padded.shape[1:])
    torch.manual_seed(7)
    with torch.no_grad(), ssn_sampling(net):
        for sl in slicers:
            x = padded[sl][None]
            p = np.stack([torch.softmax(net(x).double(), 1)[0].numpy() for _ in range(3)])
            h = -(p * np.log(p)).sum(1, keepdims=True)
            m = p.mean(0)
            acc[(slice(None), *sl[1:])] += np.concatenate([m, h.mean(0), -(m * np.log(m)).sum(0, keepdims=True)]) * g
            w[sl[1:]] += g
    acc = (acc / w)[(slice(None), *revert[1:])]
    np.testing.assert_allclose(res.moments["pred"].numpy(), acc[:3], atol=2e-5)
    np.testing.assert_allclose(res.moments["expected_entropy"].numpy(), acc[3:4], atol=2e-5)
    maps = res.measures(mun.MAP_MEASURES)
    pe = -(acc[:3] * np.log(acc[:3])).sum(0, keepdims=True)
    np.testing.assert_allclose(maps["mutual_information"].numpy(), np.maximum(acc[4:5] - acc[3:4], 0), atol=3e-5)
    np.testing.assert_allclose(maps["window_disagreement"].numpy(), pe - acc[4:5], atol=3e-5)
    assert float(maps["mutual_information"].max()) > 1e-3  # the latent draws disagree: aleatoric MI
    assert not any(h.sampling for h in find_ssn_heads(pred.network))  # sampling switched off afterwards
    again = ssn_predictor(seed=7, use_mirroring=False).predict_uncertainty_from_preprocessed_data(data)
    torch.testing.assert_close(again.moments["pred"], res.moments["pred"], rtol=0, atol=0)  # seeded draws


def test_ssn_segmentation_logits_are_stock_mean_logits():
    """With 'ssn' the only stochastic source, the segmentation logits are those stock nnU-Net computes (the SSN
    head's mean logits, mirrors averaged), bit for bit, while the statistics come from latent draws."""
    import copy

    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    ours = ssn_predictor(sources=("ssn", "mirroring"), num_samples=2, seed=0)
    stock = nnUNetPredictor(device=CPU, allow_tqdm=False)
    stock.manual_initialization(copy.deepcopy(ours.network), ours.plans_manager, ours.configuration_manager,
                                ours.list_of_parameters, ours.dataset_json, "nnUNetTrainerSSN", (0, 1, 2))
    torch.manual_seed(4)
    data = torch.randn(1, 20, 16, 16)
    res = ours.predict_uncertainty_from_preprocessed_data(data)
    expected = stock.predict_logits_from_preprocessed_data(data)
    assert res.num_samples == 16 and torch.equal(res.logits, expected)
    assert float(res.measures()["mutual_information"].max()) > 1e-3
    # with dropout as well the logits are the mean over the stochastic passes (as for dropout alone)
    mixed = ssn_predictor(sources=("ssn", "dropout"), num_samples=2, dropout_p=0.2, seed=0)
    assert not torch.equal(mixed.predict_uncertainty_from_preprocessed_data(data).logits, expected)


def test_ssn_source_composes_with_dropout_and_is_refused_without_an_ssn_head():
    from tests.nnunet.test_nnunet import make_predictor

    pred = ssn_predictor(sources=("ssn", "dropout", "mirroring"), num_samples=2, dropout_p=0.2, seed=1)
    assert pred.mi_meaning == "mixed" and pred.samples_per_voxel() == 2 * 8  # passes x mirrors
    res = pred.predict_uncertainty_from_preprocessed_data(torch.randn(1, 16, 16, 16))
    assert res.num_samples == 16 and float(res.measures()["mutual_information"].max()) > 1e-3
    with pytest.raises(ValueError, match="needs a Stochastic Segmentation Network"):
        make_predictor(uncertainty_sources=("ssn",))
    with pytest.raises(ValueError, match="'ssn' with 'rate_in'"):
        mun.UncertaintyPredictor(uncertainty_sources=("ssn", "rate_in"), device=CPU)
