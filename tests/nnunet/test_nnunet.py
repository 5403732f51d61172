"""nnU-Net v2 integration: UncertaintyPredictor overrides against a hand-rolled loop, geometry, dropout routes,
trainers, CLI, and (slow) the end-to-end CPU run of docs/nnunet.md compared with stock nnU-Net."""

from __future__ import annotations

import argparse
import copy
import importlib
import inspect
import itertools
import json
import multiprocessing
import os
import random
import re
import sys
from contextlib import contextmanager, nullcontext

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

from acvl_utils.cropping_and_padding.padding import pad_nd_image  # noqa: E402
from nnunetv2.inference.export_prediction import (  # noqa: E402
    convert_predicted_logits_to_segmentation_with_correct_shape,
)
from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor  # noqa: E402
from nnunetv2.inference.sliding_window_prediction import compute_gaussian  # noqa: E402
from nnunetv2.utilities.get_network_from_plans import get_network_from_plans  # noqa: E402
from nnunetv2.utilities.plans_handling.plans_handler import PlansManager  # noqa: E402

import monai_unc  # noqa: E402
import monai_unc.nnunet as mun  # noqa: E402
from monai_unc.inferers import enable_mc_dropout, find_dropout_layers  # noqa: E402
from monai_unc.inferers.rate_in import RateInSource, find_rate_in_layers  # noqa: E402
from monai_unc.nnunet.cli import add_parser, run  # noqa: E402
from tests._nnunet_pools import plan_in_process  # noqa: E402
from tests._paths import ROOT  # noqa: E402
from tests.nnunet._toy_training import small_progress_plots  # noqa: E402

CPU = torch.device("cpu")
DOCS = ROOT / "docs" / "nnunet.md"
DATASET_JSON = {"channel_names": {"0": "MRI"}, "labels": {"background": 0, "a": 1, "b": 2}, "numTraining": 2,
                "file_ending": ".nii.gz"}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------------ helpers
def make_plans(ndim=3, patch=(16, 16, 16), spacing=(1.0, 1.0, 1.0), transpose=(0, 1, 2), features=(4, 8)):
    conv = f"torch.nn.modules.conv.Conv{ndim}d"
    arch = {
        "network_class_name": "dynamic_network_architectures.architectures.unet.PlainConvUNet",
        "arch_kwargs": {
            "n_stages": 2, "features_per_stage": list(features), "conv_op": conv,
            "kernel_sizes": [[3] * ndim] * 2, "strides": [[1] * ndim, [2] * ndim], "n_conv_per_stage": [1, 1],
            "n_conv_per_stage_decoder": [1], "conv_bias": True,
            "norm_op": f"torch.nn.modules.instancenorm.InstanceNorm{ndim}d",
            "norm_op_kwargs": {"eps": 1e-5, "affine": True}, "dropout_op": None, "dropout_op_kwargs": None,
            "nonlin": "torch.nn.LeakyReLU", "nonlin_kwargs": {"inplace": True},
        },
        "_kw_requires_import": ["conv_op", "norm_op", "dropout_op", "nonlin"],
    }
    res = {"is_seg": False, "order": 1, "order_z": 0, "force_separate_z": None}
    conf = {
        "data_identifier": "unit", "preprocessor_name": "DefaultPreprocessor", "batch_size": 2,
        "patch_size": list(patch), "median_image_size_in_voxels": list(patch), "spacing": list(spacing),
        "normalization_schemes": ["ZScoreNormalization"], "use_mask_for_norm": [False],
        "resampling_fn_data": "resample_data_or_seg_to_shape", "resampling_fn_seg": "resample_data_or_seg_to_shape",
        "resampling_fn_data_kwargs": {**res, "order": 3}, "resampling_fn_seg_kwargs": {**res, "is_seg": True},
        "resampling_fn_probabilities": "resample_data_or_seg_to_shape", "resampling_fn_probabilities_kwargs": res,
        "architecture": arch, "batch_dice": False,
    }
    return {
        "dataset_name": "Dataset999_Unit", "plans_name": "nnUNetPlans",
        "original_median_spacing_after_transp": list(spacing), "original_median_shape_after_transp": list(patch),
        "image_reader_writer": "SimpleITKIO", "transpose_forward": list(transpose),
        "transpose_backward": [int(i) for i in np.argsort(transpose)], "configurations": {"cfg": conf},
        "experiment_planner_used": "ExperimentPlanner", "label_manager": "LabelManager",
        "foreground_intensity_properties_per_channel": {"0": {"max": 1.0, "mean": 0.0, "median": 0.0, "min": -1.0,
                                                              "percentile_00_5": -1.0, "percentile_99_5": 1.0,
                                                              "std": 1.0}},
    }


def make_predictor(cls=mun.UncertaintyPredictor, plans=None, n_folds=2, mirror_axes=(0, 1, 2), arch_kwargs=None,
                   device=CPU, **kw):
    plans = plans or make_plans()
    pm = PlansManager(plans)
    cm = pm.get_configuration("cfg")
    params = []
    for k in range(n_folds):
        torch.manual_seed(100 + k)
        net = get_network_from_plans(cm.network_arch_class_name, arch_kwargs or cm.network_arch_init_kwargs,
                                     cm.network_arch_init_kwargs_req_import, 1, 3, allow_init=True,
                                     deep_supervision=False)
        with torch.no_grad():  # sharper logits than the default initialisation: folds that disagree
            net.decoder.seg_layers[-1].weight.mul_(4.0)
        params.append(copy.deepcopy(net.state_dict()))
    pred = cls(device=device, allow_tqdm=False, **kw)
    pred.manual_initialization(net, pm, cm, params, DATASET_JSON, "nnUNetTrainer", mirror_axes)
    return pred


def combos(axes, offset=2):
    axes = [a + offset for a in axes]
    return [()] + [c for k in range(1, len(axes) + 1) for c in itertools.combinations(axes, k)]


@contextmanager
def cli_threads():
    """Within the block torch runs with the intra-op thread count ``nnunet-predict -device cpu`` predicts with
    (``multiprocessing.cpu_count()``, as stock ``nnUNetv2_predict -device cpu``); restored afterwards.

    nnU-Net's CPU logits depend on the thread count on some CPUs (an AVX512/AMX machine: the float32 convolutions
    of the decoder change in the last bits, with or without oneDNN, so about one fp16 ulp of the stitched logits
    and ~1e-4 of the probabilities), stock's own as ours. Ours equals stock bit for bit for the same thread count,
    so the comparisons with the CLI's output run stock (and ours in memory) under this count.
    """
    import multiprocessing

    n = torch.get_num_threads()
    torch.set_num_threads(multiprocessing.cpu_count())
    try:
        yield
    finally:
        torch.set_num_threads(n)


def entropy64(p):
    p = p.astype(np.float64)
    return -(p * np.log(np.where(p > 0, p, 1.0))).sum(0, keepdims=True)


def reference(pred, data, sources, passes=1, seed=None, rate_in=None):
    """float64 statistics by explicit loops: windows x folds x dropout passes x mirrors, then Gaussian blending.

    Rate-In: a separate RateInSource with the same settings, searched on each window before its passes (the same
    order of random draws as the predictor)."""
    net = pred.network
    net.eval()
    states = pred.list_of_parameters
    patch = pred.configuration_manager.patch_size
    padded, revert = pad_nd_image(data, patch, "constant", {"value": 0}, True, None)
    slicers = pred._internal_get_sliding_window_slicers(padded.shape[1:])
    mirrors = combos(pred.allowed_mirroring_axes) if pred.use_mirroring and pred.allowed_mirroring_axes else [()]
    g = compute_gaussian(tuple(patch), 1.0 / 8, 10, device=CPU).double().numpy()
    samples = {i: [] for i in range(len(slicers))}
    fold_of = {i: [] for i in range(len(slicers))}  # fold of each sample (0 when the folds are not a source)
    logit_sums = {i: 0.0 for i in range(len(slicers))}

    src = RateInSource(passes, **rate_in) if "rate_in" in sources else None

    def run_window(i, x, fold_states, fold=0):
        if src is not None:
            src.prepare(x, net)
        for _ in range(passes):
            group = []
            for axes in mirrors:
                outs = []
                for st in fold_states:
                    if st is not None:
                        net.load_state_dict(st)
                    xx = torch.flip(x, axes) if axes else x
                    o = net(xx)
                    outs.append(torch.flip(o, axes) if axes else o)
                logit = torch.stack(outs).double().mean(0)[0].numpy()
                logit_sums[i] = logit_sums[i] + logit
                group.append(logit)
            if "mirroring" in sources:
                samples[i].extend(group)
                fold_of[i].extend([fold] * len(group))
            else:
                samples[i].append(np.mean(group, axis=0))
                fold_of[i].append(fold)

    if seed is not None:
        torch.manual_seed(seed)
    ctx = enable_mc_dropout(net) if "dropout" in sources else nullcontext()
    with ctx, torch.no_grad():
        if "folds" in sources:
            for k, st in enumerate(states):
                net.load_state_dict(st)
                with src.activate(net) if src is not None else nullcontext():
                    for i, sl in enumerate(slicers):
                        run_window(i, padded[sl][None], [None], k)
        else:
            with src.activate(net) if src is not None else nullcontext():
                for i, sl in enumerate(slicers):
                    run_window(i, padded[sl][None], states if len(states) > 1 else [states[0]])
    n_classes = 3
    folds = sorted(set(fold_of[0]))
    acc = np.zeros((2 * n_classes + 1, *padded.shape[1:]))
    # per fold: pred_k, the blend of H(m_wk), the blend of the windows' own variances Var_wk
    per_fold = {k: np.zeros((2 * n_classes + 1, *padded.shape[1:])) for k in folds}
    w = np.zeros(padded.shape[1:])
    for i, sl in enumerate(slicers):
        logits = np.stack(samples[i])
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        # the second moment slot holds the window's own variance (the windows' disagreement stays out of it)
        mom = np.concatenate([p.mean(0), np.mean([entropy64(s) for s in p], axis=0), p.var(0)])
        acc[(slice(None), *sl[1:])] += mom * g
        for k in folds:  # each fold's own window means (the window disagreement is per fold, then averaged)
            pk = p[np.asarray(fold_of[i]) == k]
            m = pk.mean(0)
            per_fold[k][(slice(None), *sl[1:])] += np.concatenate([m, entropy64(m), pk.var(0)]) * g
        w[sl[1:]] += g
    acc /= w
    acc = acc[(slice(None), *revert[1:])]
    wd = 0.0
    mean_sq = 0.0
    for k in folds:
        f = (per_fold[k] / w)[(slice(None), *revert[1:])]
        wd = wd + (entropy64(f[:n_classes]) - f[n_classes:n_classes + 1]) / len(folds)
        # folds one after the other: each fold's blend of window variances plus pred_k^2, pooled over the folds
        mean_sq = mean_sq + (f[n_classes + 1:] + f[:n_classes] ** 2) / len(folds)
    if "folds" not in sources:
        mean_sq = acc[n_classes + 1:] + acc[:n_classes] ** 2
    return {"pred": acc[:n_classes], "expected_entropy": acc[n_classes:n_classes + 1],
            "mean_sq": mean_sq, "window_disagreement": wd, "num_samples": len(samples[0])}


# ------------------------------------------------------------------------------------------ overrides vs a loop
CASES = {
    "folds+mirroring": dict(sources=("folds", "mirroring")),
    "mirroring, folds in logit space": dict(sources=("mirroring",)),
    "folds, mirrors in logit space": dict(sources=("folds",)),
    "dropout+mirroring": dict(sources=("dropout", "mirroring"), n_folds=1, passes=2, dropout_p=0.3),
    "folds+dropout, no mirroring": dict(sources=("folds", "dropout"), passes=3, dropout_p=0.3, mirror=False),
    "folds+rate_in+mirroring": dict(sources=("folds", "rate_in", "mirroring"), passes=2,
                                    rate_in={"target_loss": 0.2, "loss": "mse"}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_window_and_stitching_overrides_match_a_hand_rolled_loop(name):
    case = CASES[name]
    sources, passes = case["sources"], case.get("passes", 1)
    # the loop draws the masks of full passes in their order (shared passes: tests/nnunet/test_shared_passes.py)
    kw = dict(uncertainty_sources=sources, measures=mun.MAP_MEASURES, share_passes=False)
    if "dropout" in sources:
        kw.update(num_samples=passes, dropout_p=case["dropout_p"], seed=7)
    if "rate_in" in sources:
        kw.update(num_samples=passes, rate_in=case["rate_in"], seed=7)
    if not case.get("mirror", True):
        kw["use_mirroring"] = False
    pred = make_predictor(n_folds=case.get("n_folds", 2), **kw)
    torch.manual_seed(3)
    data = torch.randn(1, 20, 24, 12)  # three windows per axis but the last one, which is padded to the patch
    res = pred.predict_uncertainty_from_preprocessed_data(data)
    stochastic = "dropout" in sources or "rate_in" in sources
    ref = reference(pred, data, sources, passes=passes, seed=7 if stochastic else None, rate_in=case.get("rate_in"))
    assert res.num_samples == ref["num_samples"]  # the reference pools the samples of every fold per window
    for key in ("pred", "expected_entropy", "mean_sq"):
        got = res.moments[key].numpy()
        assert got.shape == ref[key].shape == ((1 if key == "expected_entropy" else 3), 20, 24, 12)
        np.testing.assert_allclose(got, ref[key], atol=2e-5, err_msg=key)
    maps = res.measures(mun.MAP_MEASURES)
    pe_ref = entropy64(ref["pred"])
    np.testing.assert_allclose(maps["predictive_entropy"].numpy(), pe_ref, atol=3e-5)
    # PE = EE + MI + WD: the windows' disagreement is its own map, not part of MI
    wd_ref = ref["window_disagreement"]
    assert wd_ref.min() > -1e-12 and wd_ref.max() > 1e-4  # windows overlap and disagree
    np.testing.assert_allclose(maps["window_disagreement"].numpy(), wd_ref, atol=3e-5)
    np.testing.assert_allclose(maps["mutual_information"].numpy(),
                               np.maximum(pe_ref - ref["expected_entropy"] - wd_ref, 0), atol=3e-5)
    assert float(maps["mutual_information"].max()) > 1e-4  # the samples really differ
    if "dropout" in sources:  # dropout restored to eval mode after sampling
        _, hooks = find_dropout_layers(pred.network)
        assert hooks and not any(h.mc_enabled for h in hooks)
    if "rate_in" in sources:  # inserted for the prediction only; searched rates reported per layer
        assert not find_rate_in_layers(pred.network)
        rates = res.extras["rate_in_mean_rate"]
        assert set(rates) == {"encoder.stages.0", "encoder.stages.1", "decoder.stages.0"}
        assert all(0.0 < r < 1.0 for r in rates.values())


@pytest.mark.slow
def test_logits_equal_stock_nnunet_bit_for_bit():
    ours = make_predictor(uncertainty_sources=("folds", "mirroring"))
    stock = make_predictor(cls=nnUNetPredictor)
    torch.manual_seed(4)
    data = torch.randn(1, 20, 24, 12)
    a = ours.predict_uncertainty_from_preprocessed_data(data).logits
    b = stock.predict_logits_from_preprocessed_data(data)
    assert a.dtype == b.dtype == torch.float16
    assert torch.equal(a, b)
    assert torch.equal(ours.predict_logits_from_preprocessed_data(data), b)
    # folds not a source (they run side by side, averaged per window for the statistics): the segmentation logits
    # are still stitched per fold and combined over the folds in stock's order, so they are stock's, bit for bit
    side_by_side = make_predictor(uncertainty_sources=("mirroring",))
    res = side_by_side.predict_uncertainty_from_preprocessed_data(data)
    assert res.num_samples == 8 and res.logits.dtype == torch.float16
    assert torch.equal(res.logits, b)
    assert torch.equal(side_by_side.predict_logits_from_preprocessed_data(data), b)
    # mirrors not a source either: the same
    assert torch.equal(make_predictor(uncertainty_sources=("folds",)).predict_logits_from_preprocessed_data(data), b)


def test_2d_configuration_matches_loop():
    plans = make_plans(ndim=2, patch=(16, 16), spacing=(1.0, 1.0))
    pred = make_predictor(plans=plans, mirror_axes=(0, 1), uncertainty_sources=("folds", "mirroring"),
                          measures=mun.MAP_MEASURES)
    torch.manual_seed(5)
    data = torch.randn(1, 3, 20, 18)  # 3 slices, 2D windows
    res = pred.predict_uncertainty_from_preprocessed_data(data)
    ref = reference(pred, data, ("folds", "mirroring"))
    assert res.num_samples == 8
    for key in ("pred", "expected_entropy", "mean_sq"):
        np.testing.assert_allclose(res.moments[key].numpy(), ref[key], atol=2e-5)


def test_dropout_seed_reproducible_and_restores_modes():
    pred = make_predictor(n_folds=1, uncertainty_sources=("dropout",), num_samples=3, dropout_p=0.3, seed=1,
                          use_mirroring=False)
    data = torch.randn(1, 16, 16, 16)
    state = torch.random.get_rng_state()
    a = pred.predict_uncertainty_from_preprocessed_data(data)
    assert torch.equal(state, torch.random.get_rng_state())  # global RNG untouched
    b = pred.predict_uncertainty_from_preprocessed_data(data)
    assert torch.equal(a.moments["pred"], b.moments["pred"])
    assert float(a.measures(["mutual_information"])["mutual_information"].max()) > 1e-4
    pred.seed = 2
    c = pred.predict_uncertainty_from_preprocessed_data(data)
    assert not torch.equal(a.moments["pred"], c.moments["pred"])
    assert not pred.network.training
    # eval mode without MC sampling is deterministic again
    with torch.no_grad():
        torch.testing.assert_close(pred.network(data[None]), pred.network(data[None]))


def test_trained_dropout_is_sampled_without_dropout_p():
    arch = mun.dropout_arch_kwargs(make_plans()["configurations"]["cfg"]["architecture"]["arch_kwargs"], 0.3)
    plans = make_plans()
    pred = make_predictor(plans=plans, n_folds=1, arch_kwargs=arch, uncertainty_sources=("dropout",),
                          num_samples=2, seed=0, use_mirroring=False)
    modules, hooks = find_dropout_layers(pred.network)
    assert len(modules) == 3 and not hooks  # after each of the 3 convolutions, nothing added post hoc
    res = pred.predict_uncertainty_from_preprocessed_data(torch.randn(1, 16, 16, 16))
    assert float(res.measures(["mutual_information"])["mutual_information"].max()) > 1e-4
    assert all(not m.training for m in modules)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="uncertainty_sources"):
        mun.UncertaintyPredictor(("folds", "noise"), device=CPU)
    with pytest.raises(ValueError, match="uncertainty_sources"):
        mun.UncertaintyPredictor((), device=CPU)
    with pytest.raises(ValueError, match="not both"):
        mun.UncertaintyPredictor(("dropout", "rate_in"), device=CPU)
    with pytest.raises(ValueError, match="rate_in options"):
        mun.UncertaintyPredictor(("dropout",), rate_in={"target_loss": 0.1}, device=CPU)
    with pytest.raises(ValueError, match="needs 'folds'"):
        make_predictor(uncertainty_sources=("rate_in",))
    with pytest.raises(ValueError, match="use_mirroring"):
        mun.UncertaintyPredictor(("mirroring",), use_mirroring=False, device=CPU)
    with pytest.raises(ValueError, match="num_samples"):
        mun.UncertaintyPredictor(("dropout",), num_samples=0, device=CPU)
    with pytest.raises(ValueError, match="dropout_p"):
        mun.UncertaintyPredictor(("folds",), dropout_p=0.1, device=CPU)
    with pytest.raises(ValueError, match="dropout_p"):
        mun.UncertaintyPredictor(("dropout",), dropout_p=1.5, device=CPU)
    with pytest.raises(ValueError, match="measures"):
        mun.UncertaintyPredictor(measures=("pred",), device=CPU)
    with pytest.raises(ValueError, match="segmentation_from"):
        mun.UncertaintyPredictor(segmentation_from="argmax", device=CPU)
    with pytest.raises(ValueError, match="needs dropout"):
        make_predictor(uncertainty_sources=("dropout",))
    with pytest.raises(ValueError, match="mirroring"):
        make_predictor(uncertainty_sources=("mirroring",), mirror_axes=None)
    with pytest.warns(UserWarning, match="single fold"):
        make_predictor(n_folds=1, uncertainty_sources=("folds",))
    pred = make_predictor()
    with pytest.raises(ValueError, match="4D"):
        pred.predict_sliding_window_return_logits(torch.zeros(16, 16, 16))


def test_import_error_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "monai_unc.nnunet" or m.startswith("monai_unc.nnunet.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "nnunetv2", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'monai-unc[nnunet]'")):
        importlib.import_module("monai_unc.nnunet")


# ------------------------------------------------------------------------------------------ geometry and files
def test_original_geometry_matches_stock_export_and_reverts_crop_and_transpose():
    plans = make_plans(transpose=(2, 0, 1), spacing=(1.0, 1.0, 2.0))
    pred = make_predictor(plans=plans, uncertainty_sources=("folds", "mirroring"), measures=mun.MAP_MEASURES)
    torch.manual_seed(6)
    data = torch.randn(1, 18, 20, 12)  # network order
    res = pred.predict_uncertainty_from_preprocessed_data(data).to_numpy()
    # cropped shape (network order) differs from the network shape: resampling is exercised
    props = {"spacing": [1.0, 2.0, 1.6], "shape_before_cropping": (22, 26, 15),
             "bbox_used_for_cropping": [[2, 18], [3, 25], [1, 11]],
             "shape_after_cropping_and_before_resampling": (16, 22, 10)}
    lm = pred.label_manager
    out = mun.convert_uncertainty_to_original_geometry(res, pred.plans_manager, pred.configuration_manager, lm,
                                                       props, measures=mun.MAP_MEASURES)
    stock_seg = convert_predicted_logits_to_segmentation_with_correct_shape(
        res.logits, pred.plans_manager, pred.configuration_manager, lm, props)
    orig_shape = tuple(np.array(props["shape_before_cropping"])[pred.plans_manager.transpose_backward])
    assert out["segmentation"].shape == orig_shape == stock_seg.shape
    np.testing.assert_array_equal(out["segmentation"], stock_seg)
    # the probabilities written with --save_probabilities are stock's (softmax of the mean logits): their argmax is
    # the segmentation, and nnUNetv2_ensemble reads what it would read from stock
    stock_seg_p, stock_probs = convert_predicted_logits_to_segmentation_with_correct_shape(
        res.logits, pred.plans_manager, pred.configuration_manager, lm, props, return_probabilities=True)
    np.testing.assert_array_equal(out["probabilities"], stock_probs)
    np.testing.assert_array_equal(out["segmentation"], out["probabilities"].argmax(0))
    np.testing.assert_array_equal(stock_seg_p, stock_seg)
    probs = out["mean_probabilities"]
    assert not np.array_equal(probs.argmax(0), out["segmentation"])  # the mean probabilities would not match
    assert probs.shape == (3, *orig_shape) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(0), 1.0, atol=1e-5)
    inside = np.zeros(props["shape_before_cropping"], bool)
    inside[tuple(slice(a, b) for a, b in props["bbox_used_for_cropping"])] = True
    inside = inside.transpose(pred.plans_manager.transpose_backward)
    assert np.all(probs[0][~inside] == 1.0)
    for key, m in out["maps"].items():
        assert m.shape == orig_shape and m.dtype == np.float32 and np.isfinite(m).all(), key
        assert np.all(m[~inside] == 0.0), key
        assert m[inside].max() > 0, key
    assert out["maps"]["mutual_information"].min() >= 0
    # probability-mean segmentation agrees with the logit-mean one almost everywhere
    out_p = mun.convert_uncertainty_to_original_geometry(res, pred.plans_manager, pred.configuration_manager, lm,
                                                         props, segmentation_from="probabilities")
    assert (out_p["segmentation"] == stock_seg).mean() > 0.9
    np.testing.assert_array_equal(out_p["segmentation"], probs.argmax(0))
    np.testing.assert_array_equal(out_p["probabilities"], probs)
    np.testing.assert_array_equal(out_p["mean_probabilities"], probs)
    for key, m in out_p["maps"].items():  # the maps do not depend on where the segmentation comes from
        np.testing.assert_array_equal(m, out["maps"][key])
    lean = mun.convert_uncertainty_to_original_geometry(res, pred.plans_manager, pred.configuration_manager, lm,
                                                        props, return_probabilities=False)
    assert "probabilities" not in lean and "mean_probabilities" not in lean
    np.testing.assert_array_equal(lean["segmentation"], stock_seg)


def test_predict_uncertainty_npy_returns_maps_in_the_image_geometry():
    pred = make_predictor(uncertainty_sources=("folds", "mirroring"), segmentation_from="probabilities")
    rng = np.random.default_rng(0)
    image = rng.normal(size=(1, 22, 18, 17)).astype(np.float32)
    image[:, :, :, :2] = 0  # nnU-Net crops the empty border away and puts it back
    out = pred.predict_uncertainty_npy(image, {"spacing": [1.0, 1.0, 1.0]})
    assert out["segmentation"].shape == (22, 18, 17) and out["num_samples"] == 16
    assert out["probabilities"].shape == (3, 22, 18, 17)
    np.testing.assert_array_equal(out["segmentation"], out["probabilities"].argmax(0))
    np.testing.assert_array_equal(out["mean_probabilities"], out["probabilities"])
    for key in mun.DEFAULT_MEASURES:
        m = out["maps"][key]
        assert m.shape == (22, 18, 17) and np.isfinite(m).all() and m.min() >= 0
        assert np.all(m[:, :, :2] == 0) and m[:, :, 2:].max() > 0  # outside the crop: background, no uncertainty
    assert np.all(out["probabilities"][0, :, :, :2] == 1)


def test_maps_without_resampling_equal_network_resolution_measures():
    plans = make_plans(transpose=(1, 2, 0))
    pred = make_predictor(plans=plans, uncertainty_sources=("folds",))
    data = torch.randn(1, 16, 18, 20)
    res = pred.predict_uncertainty_from_preprocessed_data(data).to_numpy()
    props = {"spacing": [1.0, 1.0, 1.0], "shape_before_cropping": (16, 18, 20),
             "bbox_used_for_cropping": [[0, 16], [0, 18], [0, 20]],
             "shape_after_cropping_and_before_resampling": (16, 18, 20)}
    out = mun.convert_uncertainty_to_original_geometry(res, pred.plans_manager, pred.configuration_manager,
                                                       pred.label_manager, props)
    direct = res.measures(mun.DEFAULT_MEASURES)
    back = pred.plans_manager.transpose_backward
    for key in mun.DEFAULT_MEASURES:
        np.testing.assert_allclose(out["maps"][key], direct[key][0].numpy().transpose(back), atol=1e-6)


@pytest.mark.parametrize("io_name", ["SimpleITKIO", "NibabelIOWithReorient"])
def test_float_maps_keep_the_input_geometry(io_name, tmp_path):
    import nibabel as nib
    from nnunetv2.imageio.reader_writer_registry import recursive_find_reader_writer_by_name

    rw = recursive_find_reader_writer_by_name(io_name)()
    affine = np.array([[0.0, -1.2, 0.0, 10.0], [0.0, 0.0, 2.0, -4.0], [-0.9, 0.0, 0.0, 3.5], [0, 0, 0, 1]])
    vol = np.random.default_rng(0).random((6, 7, 5)).astype(np.float32) * 3.0
    nib.save(nib.Nifti1Image(vol, affine), str(tmp_path / "img.nii.gz"))
    data, props = rw.read_images([str(tmp_path / "img.nii.gz")])
    path = mun.write_float_map(rw, data[0], tmp_path / "out" / "map.nii.gz", props)
    back = nib.load(str(path))
    assert back.get_data_dtype() == np.float32
    np.testing.assert_allclose(back.affine, affine, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(back.dataobj), vol)  # float values and axis order preserved
    assert not list((tmp_path / "out").glob(".*partial*"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["map.nii.gz"]  # no temporary left
    # the same file as the reader/writer's own .nii.gz once decompressed (header and voxels), gzipped at level 1
    import gzip

    from monai_unc.nnunet.export import MAP_COMPRESSLEVEL, _FloatMap

    direct = tmp_path / "direct.nii.gz"
    rw.write_seg(np.ascontiguousarray(data[0], dtype=np.float32).view(_FloatMap), str(direct), props)
    assert gzip.decompress(path.read_bytes()) == gzip.decompress(direct.read_bytes())
    assert MAP_COMPRESSLEVEL == 1 and path.read_bytes()[8] == 4  # gzip XFL byte: 4 = fastest compression
    again = mun.write_float_map(rw, data[0], tmp_path / "again" / "map.nii.gz", props)
    assert again.read_bytes() == path.read_bytes()  # no name or time in the gzip header: reproducible bytes


def brute_force_patch_mean(u, k):
    """Largest mean over all stride-1 k^D boxes (clipped to the image), by explicit loops."""
    k = [min(k, n) for n in u.shape]
    best = -np.inf
    for start in itertools.product(*[range(n - kk + 1) for n, kk in zip(u.shape, k)]):
        box = u[tuple(slice(s0, s0 + kk) for s0, kk in zip(start, k))]
        best = max(best, float(np.mean(box, dtype=np.float64)))
    return best


def test_case_scores_and_table(tmp_path):
    seg = np.zeros((12, 12, 12), np.uint8)
    seg[2:6, 2:6, 2:6] = 1
    u = np.zeros((12, 12, 12), np.float32)
    u[2:4, 2:4, 2:4] = 1.0
    scores = mun.record_case_scores({"predictive_entropy": u}, seg, patch_size=4)["predictive_entropy"]
    with pytest.warns(DeprecationWarning, match="record_case_scores"):
        assert mun.case_scores({"predictive_entropy": u}, seg, patch_size=4)["predictive_entropy"] == scores
    two = np.stack([u, 2 * u])  # a region-based map: one channel per region, each scored inside its own mask
    by_region = mun.record_case_scores({"pe": two}, seg, 4, regions={"a": [1], "b": [1, 2]})["pe"]
    assert by_region == {**{f"{k}_a": v for k, v in scores.items()}, **{f"{k}_b": 2 * v for k, v in scores.items()}}
    with pytest.warns(DeprecationWarning, match="record_case_scores"):
        assert mun.region_case_scores({"pe": two}, seg, {"a": [1], "b": [1, 2]}, 4)["pe"] == by_region
    assert list(scores) == ["mean", "fg_mean", "patch_mean"]
    assert scores["mean"] == pytest.approx(8 / 12**3)
    assert scores["fg_mean"] == pytest.approx(8 / 64)
    assert scores["patch_mean"] == pytest.approx(8 / 64)  # the box MEAN (8 ones in a 4^3 box), not the sum 8
    empty = mun.record_case_scores({"predictive_entropy": u}, np.zeros_like(seg))["predictive_entropy"]
    assert np.isnan(empty["fg_mean"])
    # against explicit loops, 3D and 2D, the default box (10) clipped on a short axis
    rng = np.random.default_rng(1)
    for shape, k in (((13, 11, 6), 10), ((9, 12, 7), 3), ((15, 14), 10)):
        m = rng.random(shape).astype(np.float32)
        fg = rng.random(shape) > 0.6
        got = mun.record_case_scores({"mutual_information": m}, fg.astype(np.uint8), patch_size=k)["mutual_information"]
        assert got["patch_mean"] == pytest.approx(brute_force_patch_mean(m, k), rel=1e-12)
        assert got["mean"] == pytest.approx(float(m.astype(np.float64).mean()), rel=1e-12)
        assert got["fg_mean"] == pytest.approx(float(m[fg].astype(np.float64).mean()), rel=1e-12)
    unc = tmp_path / "uncertainty"
    unc.mkdir()
    for case, s in (("b", scores), ("a", empty)):
        rec = {"case": case, "num_samples": 3, "foreground_voxels": 1,
               "scores": {"predictive_entropy": {k: (None if np.isnan(v) else v) for k, v in s.items()}}}
        (unc / f"{case}.json").write_text(json.dumps(rec))
    table = mun.write_scores_table(tmp_path).read_text().splitlines()
    # the column names of `monai-unc evaluate`'s case table
    assert table[0] == ("case,num_samples,foreground_voxels,predictive_entropy_mean,"
                        "predictive_entropy_fg_mean,predictive_entropy_patch_mean")
    assert table[1].startswith("a,3,1,") and table[1].split(",")[4] == "nan"
    assert table[2].split(",")[5] == "0.125"


def test_patch_size_default_is_evaluates():
    from monai_unc.evaluation import EvaluationConfig

    assert mun.PATCH_SIZE == EvaluationConfig().patch_size == 10


# ------------------------------------------------------------------------------------------ prediction from files
def write_inputs(folder, shapes=((20, 18, 16), (17, 21, 14))):
    """nnU-Net-style input folder (``<case>_0000.nii.gz``) of small images with empty slices (cropped away)."""
    import nibabel as nib

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i, shape in enumerate(shapes):
        img = rng.normal(size=shape).astype(np.float32) + 2.0
        img[..., :2] = 0.0
        affine = np.diag([1.0, 1.0, 1.0, 1.0])
        affine[:3, 3] = (3.0, -2.0, 1.5)
        nib.save(nib.Nifti1Image(img, affine), str(folder / f"case{i}_0000.nii.gz"))
    return [f"case{i}" for i in range(len(shapes))]


def read(path):
    import nibabel as nib

    return np.asarray(nib.load(str(path)).dataobj)


@pytest.fixture(scope="module")
def predicted_folders(tmp_path_factory):
    """Two small cases predicted from files by stock nnU-Net and by UncertaintyPredictor (2 folds side by side,
    mirroring the source), both with --save_probabilities, preprocessing and export in this process."""
    root = tmp_path_factory.mktemp("files")
    inp = root / "imagesTs"
    cases = write_inputs(inp)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        stock = make_predictor(cls=nnUNetPredictor)
        (root / "stock").mkdir()
        stock.predict_from_files_sequential(str(inp), str(root / "stock"), save_probabilities=True)
        ours = make_predictor(uncertainty_sources=("mirroring",))
        ours.predict_from_files(str(inp), str(root / "ours"), save_probabilities=True,
                                num_processes_preprocessing=0, num_processes_segmentation_export=0)
    finally:
        torch.set_num_threads(n)
    return {"root": root, "input": inp, "cases": cases, "stock": root / "stock", "ours": root / "ours"}


@pytest.mark.slow
def test_files_equal_stock_and_saved_probabilities_match_the_segmentation(predicted_folders):
    """From files: the segmentation and the --save_probabilities .npz equal stock's (folds not a source, averaged
    as stock averages them), so argmax(npz) == seg and nnUNetv2_ensemble reads what it reads from stock."""
    out, stock = predicted_folders["ours"], predicted_folders["stock"]
    for case in predicted_folders["cases"]:
        seg = read(out / f"{case}.nii.gz")
        assert (seg > 0).any()
        np.testing.assert_array_equal(seg, read(stock / f"{case}.nii.gz"))
        probs = np.load(out / f"{case}.npz")["probabilities"]
        np.testing.assert_array_equal(probs.argmax(0).T, seg)  # .npz in SimpleITK's axis order (z, y, x)
        np.testing.assert_array_equal(probs, np.load(stock / f"{case}.npz")["probabilities"])
        assert (out / f"{case}.pkl").is_file()
    cfg = json.loads((out / "uncertainty_config.json").read_text())
    assert cfg["num_samples"] is None and cfg["samples_per_voxel"] == 8 and cfg["folds"] == 2
    assert not list(out.rglob(".*partial*"))


@pytest.mark.slow
def test_written_case_scores_equal_evaluate(predicted_folders):
    """The case scores nnunet-predict writes (record and table) are those `monai-unc evaluate` computes from the
    written maps: one definition (mean, foreground mean, max box mean over 10^3 boxes)."""
    from monai_unc.evaluation import EvaluationConfig, evaluate_case
    from monai_unc.io import CaseFiles

    out = predicted_folders["ours"]
    config = EvaluationConfig(num_classes=3, spatial=False)
    table = (out / "uncertainty_scores.csv").read_text().splitlines()
    header = table[0].split(",")
    for case in predicted_folders["cases"]:
        rec = json.loads((out / "uncertainty" / f"{case}.json").read_text())
        files = CaseFiles(case, label=out / f"{case}.nii.gz", seg=out / f"{case}.nii.gz",
                          maps={m: out / "uncertainty" / f"{case}_{m}.nii.gz" for m in mun.DEFAULT_MEASURES})
        row = evaluate_case(files, config).row
        csv_row = dict(zip(header, next(r for r in table[1:] if r.startswith(f"{case},")).split(",")))
        for m in mun.DEFAULT_MEASURES:
            patch = row.get(f"{m}_patch_mean", row.get(f"{m}_patch"))  # evaluate's column (renamed to _patch_mean)
            for ours, theirs in ((rec["scores"][m]["patch_mean"], patch), (rec["scores"][m]["mean"], row[f"{m}_mean"]),
                                 (rec["scores"][m]["fg_mean"], row[f"{m}_fg_mean"])):
                assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12), m
            assert float(csv_row[f"{m}_patch_mean"]) == rec["scores"][m]["patch_mean"]
        assert rec["scores"]["predictive_entropy"]["patch_mean"] > 0
        assert rec["num_samples"] == 8 and rec["patch_size"] == mun.PATCH_SIZE


def _continuing_run(predictor, inp, out):
    """``(calls, run)``: ``run()`` predicts ``inp`` into ``out`` with ``--continue_prediction`` (in this process);
    ``calls`` grows by one entry per case the predictor actually predicts."""
    calls = []
    predict = predictor.predict_uncertainty_from_preprocessed_data

    def counting(data):
        calls.append(tuple(data.shape))
        return predict(data)

    predictor.predict_uncertainty_from_preprocessed_data = counting

    def run():
        predictor.predict_from_files(str(inp), str(out), overwrite=False, num_processes_preprocessing=0,
                                     num_processes_segmentation_export=0)

    return calls, run


@pytest.mark.slow
def test_continue_prediction_redoes_cases_without_uncertainty_outputs(predicted_folders, tmp_path):
    """--continue_prediction into a folder of stock segmentations predicts every case; a case counts as done only
    when its segmentation, record and maps exist."""
    cases, inp = predicted_folders["cases"], predicted_folders["input"]
    cont = tmp_path / "continue"
    cont.mkdir()
    for case in cases:
        (cont / f"{case}.nii.gz").write_bytes((predicted_folders["stock"] / f"{case}.nii.gz").read_bytes())
    ours = make_predictor(uncertainty_sources=("folds",), use_mirroring=False)
    calls, run = _continuing_run(ours, inp, cont)

    run()
    assert len(calls) == len(cases)
    for case in cases:
        assert all((cont / "uncertainty" / f"{case}_{m}.nii.gz").is_file() for m in mun.DEFAULT_MEASURES)
        assert (cont / "uncertainty" / f"{case}.json").is_file()
    # everything done: nothing to predict; a case with a missing map is predicted again, and only that one
    run()
    assert len(calls) == len(cases)
    (cont / "uncertainty" / f"{cases[1]}_mutual_information.nii.gz").unlink()
    run()
    assert len(calls) == len(cases) + 1
    assert mun.case_exported(cont / cases[1], ".nii.gz", mun.DEFAULT_MEASURES)
    # another map, probabilities, or an unreadable record make a case incomplete again
    assert mun.case_exported(cont / cases[0], ".nii.gz", mun.DEFAULT_MEASURES)
    assert not mun.case_exported(cont / cases[0], ".nii.gz", ["variance"])
    assert not mun.case_exported(cont / cases[0], ".nii.gz", mun.DEFAULT_MEASURES, save_probabilities=True)
    (cont / "uncertainty" / f"{cases[0]}.json").write_text("{not json")
    assert not mun.case_exported(cont / cases[0], ".nii.gz", mun.DEFAULT_MEASURES)


@pytest.mark.slow
def test_continue_prediction_redoes_cases_made_with_other_settings(predicted_folders, tmp_path, capsys):
    """--continue_prediction never mixes settings: cases predicted with mirroring only (8 samples) are predicted
    again when the run asks for folds and mirroring (16 samples), and the log line names the difference; then the
    folder's config and every case record describe the same settings."""
    import shutil

    cases, inp = predicted_folders["cases"], predicted_folders["input"]
    cont = tmp_path / "continue"
    shutil.copytree(predicted_folders["ours"], cont)  # made with uncertainty_sources=("mirroring",)
    old = json.loads((cont / "uncertainty" / f"{cases[0]}.json").read_text())
    assert old["settings"]["uncertainty_sources"] == ["mirroring"] and old["settings"]["samples_per_voxel"] == 8
    ours = make_predictor(uncertainty_sources=("folds", "mirroring"))
    calls, run = _continuing_run(ours, inp, cont)

    capsys.readouterr()
    run()
    assert len(calls) == len(cases)  # every case again: none was made with these settings
    out = capsys.readouterr().out
    assert f"{len(cases)} of them" in out and "were predicted with other settings" in out
    assert 'uncertainty_sources ["mirroring"] -> ["folds", "mirroring"]' in out and "samples_per_voxel 8 -> 16" in out
    cfg = json.loads((cont / "uncertainty_config.json").read_text())
    assert cfg["uncertainty_sources"] == ["folds", "mirroring"] and cfg["samples_per_voxel"] == 16
    for case in cases:
        rec = json.loads((cont / "uncertainty" / f"{case}.json").read_text())
        assert rec["settings"] == ours.case_settings() and rec["num_samples"] == 16
        assert rec["monai_unc_version"] == monai_unc.__version__  # provenance, not a setting
        assert rec["library_versions"] == monai_unc.io.library_versions()  # torch draws the seeded masks
        assert {k: v for k, v in cfg.items() if k not in ("measures", "model_folder")} == rec["settings"]
        assert mun.case_exported(cont / case, ".nii.gz", mun.DEFAULT_MEASURES, settings=ours.case_settings())
        assert not mun.case_exported(cont / case, ".nii.gz", mun.DEFAULT_MEASURES, settings=old["settings"])
    run()
    assert len(calls) == len(cases)  # the same settings: nothing to redo
    # a record without settings (an earlier version) is not taken as made with the current ones
    rec = json.loads((cont / "uncertainty" / f"{cases[1]}.json").read_text())
    del rec["settings"]
    for key in ("file_digests", "record_digest"):  # the versions that wrote no settings wrote no digests either
        del rec[key]
    (cont / "uncertainty" / f"{cases[1]}.json").write_text(json.dumps(rec))
    assert mun.recorded_case_settings(cont / cases[1]) is None
    capsys.readouterr()
    run()
    assert len(calls) == len(cases) + 1 and "no settings recorded" in capsys.readouterr().out


def test_config_records_dropout_passes_only_with_dropout(tmp_path):
    pred = make_predictor(uncertainty_sources=("folds", "mirroring"))
    pred._write_config(str(tmp_path))
    cfg = json.loads((tmp_path / "uncertainty_config.json").read_text())
    assert cfg["num_samples"] is None and cfg["samples_per_voxel"] == 16
    drop = make_predictor(n_folds=1, uncertainty_sources=("dropout",), num_samples=3, dropout_p=0.2,
                          use_mirroring=False)
    drop._write_config(str(tmp_path))
    cfg = json.loads((tmp_path / "uncertainty_config.json").read_text())
    assert cfg["num_samples"] == 3 and cfg["samples_per_voxel"] == 3 and cfg["dropout_p"] == 0.2
    assert cfg["rate_in"] == {}  # no Rate-In


def test_config_records_every_rate_in_value_applied(tmp_path):
    """With the default Rate-In settings the config records the target, the loss and every value applied (it used to
    record ``{}``); given options replace the defaults."""
    from monai_unc.inferers.rate_in import DEFAULT_DRAWS, DEFAULT_MAX_ITER, DEFAULT_TARGET, DEFAULT_TOL

    arch = mun.dropout_arch_kwargs(make_plans()["configurations"]["cfg"]["architecture"]["arch_kwargs"], 0.3)
    pred = make_predictor(arch_kwargs=arch, n_folds=1, uncertainty_sources=("rate_in",), num_samples=2,
                          use_mirroring=False)
    pred._write_config(str(tmp_path))
    rate_in = json.loads((tmp_path / "uncertainty_config.json").read_text())["rate_in"]
    assert rate_in["target_loss"] == DEFAULT_TARGET and rate_in["loss"] == "mi"
    assert (rate_in["tol"], rate_in["max_iter"], rate_in["draws"]) == (DEFAULT_TOL, DEFAULT_MAX_ITER, DEFAULT_DRAWS)
    assert rate_in["num_samples"] == 2 and rate_in["placement"] == "convert"  # the network's dropout converted
    assert rate_in["p"] == pytest.approx(0.3) and rate_in["channelwise"] is True  # from the Dropout3d layers
    assert len(rate_in["layers"]) == 3 and "per_layer" not in rate_in
    assert {"lr", "lr_decay", "p_min", "p_max"} <= set(rate_in)
    assert not find_rate_in_layers(pred.network)  # recording attaches nothing for good
    given = make_predictor(arch_kwargs=arch, n_folds=1, uncertainty_sources=("rate_in",), num_samples=2,
                           use_mirroring=False, rate_in={"target_loss": 0.2, "loss": "mse"})
    assert given.run_config()["rate_in"]["target_loss"] == 0.2 and given.run_config()["rate_in"]["loss"] == "mse"
    assert given.case_settings()["rate_in"] == given.run_config()["rate_in"]


def test_rate_in_converts_each_nnunet_dropout_once():
    """nnU-Net registers every dropout twice (`.dropout` and `.all_modules.1`): one Rate-In layer each, all reached."""
    import warnings

    arch = mun.dropout_arch_kwargs(make_plans()["configurations"]["cfg"]["architecture"]["arch_kwargs"], 0.3)
    pred = make_predictor(arch_kwargs=arch, uncertainty_sources=("folds", "rate_in"), num_samples=2, seed=0,
                          use_mirroring=False, rate_in={"target_loss": 0.2, "loss": "mse"})
    drops_before = [(n, m) for n, m in pred.network.named_modules(remove_duplicate=False)
                    if isinstance(m, torch.nn.Dropout3d)]
    assert len({id(m) for _, m in drops_before}) == 3 < len(drops_before)  # each under several names
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "Rate-In layers not reached" before the fix
        res = pred.predict_uncertainty_from_preprocessed_data(torch.randn(1, 16, 16, 16))
    rates = res.extras["rate_in_mean_rate"]
    assert len(rates) == 3 and all(name.endswith(".dropout") for name in rates)
    assert all(0.0 < r < 1.0 for r in rates.values())
    assert float(res.measures(["mutual_information"])["mutual_information"].max()) > 1e-4
    # the network is as before: the same dropout module under both names, no Rate-In left
    drops_after = [(n, m) for n, m in pred.network.named_modules(remove_duplicate=False)
                   if isinstance(m, torch.nn.Dropout3d)]
    assert [(n, id(m)) for n, m in drops_after] == [(n, id(m)) for n, m in drops_before]
    assert not find_rate_in_layers(pred.network)


def test_version_outside_the_supported_range_fails_at_import(monkeypatch):
    import importlib.metadata

    from monai_unc.nnunet import environment

    assert environment.check_nnunet_version("2.8.1") == "2.8.1"
    assert environment.check_nnunet_version("2.8.3rc1") == "2.8.3rc1"
    for bad in ("2.7.0", "2.9.0", "2.9.0.dev0", "3.0", "garbage"):
        with pytest.raises(ImportError, match=re.escape("nnunetv2>=2.8,<2.9")):
            environment.check_nnunet_version(bad)
    with pytest.warns(UserWarning, match="cannot determine"):
        monkeypatch.setattr(importlib.metadata, "version", lambda name: (_ for _ in ()).throw(
            importlib.metadata.PackageNotFoundError(name)))
        assert environment.check_nnunet_version() is None
    # at import of monai_unc.nnunet: the installed version as nnU-Net's package metadata reports it
    import monai_unc

    monkeypatch.setattr(monai_unc, "nnunet", mun)  # restored afterwards, like the modules below
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.9.1" if name == "nnunetv2" else "0")
    for name in [m for m in sys.modules if m == "monai_unc.nnunet" or m.startswith("monai_unc.nnunet.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError, match=r"supports nnunetv2>=2\.8,<2\.9, but nnunetv2 2\.9\.1 is installed"):
        importlib.import_module("monai_unc.nnunet")
    monkeypatch.setenv(environment.ANY_VERSION_ENV, "1")
    for name in [m for m in sys.modules if m == "monai_unc.nnunet" or m.startswith("monai_unc.nnunet.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.warns(UserWarning, match="2.9.1"):
        importlib.import_module("monai_unc.nnunet")


# ------------------------------------------------------------------------------------------ dropout routes
def test_dropout_plans_variant(tmp_path):
    plans = make_plans()
    plans["configurations"]["cfg_child"] = {"inherits_from": "cfg", "batch_size": 1}
    out = mun.dropout_plans(plans, p=0.25, plans_name="nnUNetPlansDropout")
    kw = out["configurations"]["cfg"]["architecture"]["arch_kwargs"]
    assert kw["dropout_op"] == "torch.nn.Dropout3d" and kw["dropout_op_kwargs"]["p"] == 0.25
    assert out["plans_name"] == "nnUNetPlansDropout"
    assert out["configurations"]["cfg"]["data_identifier"] == "unit"  # preprocessed data reused
    assert plans["configurations"]["cfg"]["architecture"]["arch_kwargs"]["dropout_op"] is None  # copy
    cm = PlansManager(out).get_configuration("cfg_child")  # inherited architecture has dropout too
    net = get_network_from_plans(cm.network_arch_class_name, cm.network_arch_init_kwargs,
                                 cm.network_arch_init_kwargs_req_import, 1, 3, deep_supervision=False)
    drops = [m for m in net.modules() if isinstance(m, torch.nn.Dropout3d)]
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv3d)]
    assert len(drops) == len(convs) - 1 and all(d.p == 0.25 for d in drops)  # every conv but the output
    # written next to the source plans, in nnU-Net's folder layout
    folder = tmp_path / "Dataset999_Unit"
    folder.mkdir()
    (folder / "nnUNetPlans.json").write_text(json.dumps(plans))
    path = mun.write_dropout_plans(999, p=0.1, preprocessed_dir=tmp_path)
    assert path == folder / "nnUNetPlansDropout.json"
    assert json.loads(path.read_text())["configurations"]["cfg"]["architecture"]["arch_kwargs"][
        "dropout_op_kwargs"]["p"] == 0.1
    with pytest.raises(FileExistsError):
        mun.write_dropout_plans(999, preprocessed_dir=tmp_path)
    with pytest.raises(ValueError, match="p must be"):
        mun.dropout_plans(plans, p=0.0)
    with pytest.raises(ValueError, match="not in the plans"):
        mun.dropout_plans(plans, configurations=["3d_lowres"])
    with pytest.raises(ValueError, match="inherits"):
        mun.dropout_plans(plans, configurations=["cfg_child"])
    assert mun.dropout_arch_kwargs({"conv_op": torch.nn.Conv2d}, 0.2)["dropout_op"] is torch.nn.Dropout2d


def test_posthoc_dropout_on_predictor_keeps_weights():
    pred = make_predictor(n_folds=1)
    keys = list(pred.network.state_dict())
    names = mun.add_posthoc_dropout(pred, p=0.2)
    assert names == ["encoder.stages.0", "encoder.stages.1", "decoder.stages.0"]
    assert list(pred.network.state_dict()) == keys
    with pytest.raises(ValueError, match="p must be"):
        mun.add_posthoc_dropout(pred, p=1.0)


def test_trainers_found_by_nnunet_through_ext_trainer(monkeypatch):
    from nnunetv2.utilities.find_objects import recursive_find_trainer_class_by_name

    monkeypatch.setenv("nnUNet_extTrainer", mun.trainer_dir())
    # nnU-Net imports every module of the folder as a top-level module: this fails on any relative import
    for name in ("nnUNetTrainerMCDropout", "nnUNetTrainer_10iters", "nnUNetTrainerMCDropout_10iters"):
        cls = recursive_find_trainer_class_by_name(name)
        assert cls.__name__ == name
    # the short trainers keep nnU-Net's constructor signature (nnU-Net records its arguments by name)
    from nnunetv2.training.nnUNetTrainer.nnUNetTrainer import nnUNetTrainer

    def params(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    for cls in (mun.nnUNetTrainer_10iters, mun.nnUNetTrainerMCDropout_10iters, mun.nnUNetTrainerSSN_10iters):
        assert params(cls.__init__) == params(nnUNetTrainer.__init__), cls.__name__
    assert issubclass(mun.nnUNetTrainerSSN_10iters, mun.nnUNetTrainerSSN)
    cls = recursive_find_trainer_class_by_name("nnUNetTrainerMCDropout_10iters")
    pm = PlansManager(make_plans())
    net = cls.build_network_architecture(pm, pm.get_configuration("cfg"), 1, 3, False)
    drops = [m for m in net.modules() if isinstance(m, torch.nn.Dropout3d)]
    assert len(drops) == 3 and all(d.p == mun.DEFAULT_TRAINING_DROPOUT for d in drops)


def test_write_toy_dataset(tmp_path):
    import nibabel as nib

    folder = mun.write_toy_dataset(tmp_path, dataset_id=5, num_training=2, num_test=1, shape=(16, 16, 16))
    assert folder.name == "Dataset005_UncToy"
    meta = json.loads((folder / "dataset.json").read_text())
    assert meta["numTraining"] == 2 and meta["labels"] == {"background": 0, "outer": 1, "core": 2}
    lab = nib.load(str(folder / "labelsTr" / "toy_000.nii.gz"))
    img = nib.load(str(folder / "imagesTr" / "toy_000_0000.nii.gz"))
    assert set(np.unique(np.asarray(lab.dataobj))) == {0, 1, 2}
    np.testing.assert_allclose(img.affine[:3, :3], np.diag([1.0, 1.0, 1.5]))
    assert np.all(np.asarray(img.dataobj)[..., :3] == 0)
    assert len(list((folder / "imagesTs").glob("*_0000.nii.gz"))) == 1


# ------------------------------------------------------------------------------------------ CLI
def _parse(argv):
    parser = argparse.ArgumentParser(prog="monai-unc")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cli_parses_nnunet_flags_and_reports_errors(tmp_path, capsys, monkeypatch):
    args = _parse(["nnunet-predict", "-i", "in", "-o", "out", "-d", "990", "-c", "3d_fullres", "-f", "0", "1",
                   "-tr", "nnUNetTrainer_10iters", "-p", "nnUNetPlans", "-chk", "checkpoint_best.pth",
                   "--save_probabilities", "-device", "cpu", "--sources", "folds", "dropout", "--dropout_p", "0.1",
                   "--num_samples", "4", "--segmentation_from", "probabilities"])
    assert (args.f, args.sources, args.dropout_p, args.num_samples) == (["0", "1"], ["folds", "dropout"], 0.1, 4)
    assert args.save_probabilities and args.chk == "checkpoint_best.pth"
    missing = _parse(["nnunet-predict", "-i", str(tmp_path), "-o", str(tmp_path / "o"), "-m",
                      str(tmp_path / "nope"), "-device", "cpu"])
    assert run(missing) == 2
    assert "trained model folder not found" in capsys.readouterr().err
    both = _parse(["nnunet-predict", "-i", "x", "-o", "y", "-m", "z", "-d", "1", "-c", "3d_fullres"])
    assert run(both) == 2 and "not both" in capsys.readouterr().err
    folder = tmp_path / "Dataset999_Unit"
    folder.mkdir()
    (folder / "nnUNetPlans.json").write_text(json.dumps(make_plans()))
    plans_args = _parse(["nnunet-dropout-plans", "-d", str(folder.name), "--rate", "0.3"])
    monkeypatch.setenv("nnUNet_preprocessed", str(tmp_path))  # undone after the test (it left "" set before)
    assert run(plans_args) == 0
    assert run(plans_args) == 2  # exists
    written = json.loads((folder / "nnUNetPlansDropout.json").read_text())
    assert written["configurations"]["cfg"]["architecture"]["arch_kwargs"]["dropout_op_kwargs"]["p"] == 0.3


def test_cli_help_lists_every_source(capsys):
    parser = argparse.ArgumentParser(prog="monai-unc")
    predict = add_parser(parser.add_subparsers(dest="command", required=True))
    action = next(a for a in predict._actions if "--sources" in a.option_strings)
    for source in mun.SOURCES:
        assert source in action.help, source
    assert set(action.choices) == set(mun.SOURCES)
    assert _parse(["nnunet-predict", "-i", "x", "-o", "y", "-m", "z", "--sources", "folds", "rate_in"]).sources == [
        "folds", "rate_in"]
    with pytest.raises(SystemExit):
        _parse(["nnunet-predict", "-i", "x", "-o", "y", "-m", "z", "--sources", "noise"])
    assert "invalid choice" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ end to end (slow)
def python_blocks():
    return re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)


@pytest.mark.slow
def test_end_to_end_cpu_docs_example_and_stock_agreement(tmp_path, monkeypatch):
    """docs/nnunet.md end to end on CPU (toy raw data, plan, preprocess, 2 folds x 10 iterations, prediction with
    folds x mirroring x dropout), then stock nnU-Net vs ours on the same folds and mirrors."""
    import nibabel as nib

    from monai_unc.evaluation import EvaluationConfig, evaluate_case
    from monai_unc.io import CaseFiles

    monkeypatch.chdir(tmp_path)
    for var in ("nnUNet_raw", "nnUNet_preprocessed", "nnUNet_results", "nnUNet_extTrainer", "nnUNet_n_proc_DA",
                "nnUNet_compile"):
        # the docs example sets them: setenv first so that monkeypatch records the original (also "unset") and
        # restores it afterwards (delenv of an unset variable records nothing, and the value would leak)
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    blocks = python_blocks()
    assert len(blocks) == 1, "docs/nnunet.md must hold one runnable python example"
    # the example runs as written; only nnU-Net's planning steps analyse and preprocess the cases in this process
    # instead of a spawned worker each (tests/_nnunet_pools.py: the same functions, one start-up less per step)
    plan_in_process(monkeypatch)
    # and each fold's progress plot is saved at a tenth of its resolution (tests/nnunet/_toy_training.py: the same
    # drawing; nothing reads the picture)
    small_progress_plots(monkeypatch.setitem)
    # the example trains without seeds (as nnU-Net does); 10 iterations from an unseeded start segmented nothing in
    # about 1 of 5 runs, so the test seeds the generators nnU-Net's initialisation and augmentation draw from
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    exec(compile(blocks[0], str(DOCS), "exec"), {"__name__": "__main__"})
    root = tmp_path / "nnunet_demo"
    assert os.environ["nnUNet_results"] == str(root / "results")  # everything stayed inside tmp_path
    images = sorted((root / "raw" / "Dataset990_UncToy" / "imagesTs").glob("*_0000.nii.gz"))
    assert len(images) == 2
    pred_dir = root / "pred"
    cfg = json.loads((pred_dir / "uncertainty_config.json").read_text())
    assert cfg["uncertainty_sources"] == ["folds", "mirroring", "dropout"]
    for img_file in images:
        case = img_file.name[: -len("_0000.nii.gz")]
        img = nib.load(str(img_file))
        seg = nib.load(str(pred_dir / f"{case}.nii.gz"))
        assert seg.shape == img.shape and np.allclose(seg.affine, img.affine, atol=1e-5)
        for key in mun.DEFAULT_MEASURES:
            m = nib.load(str(pred_dir / "uncertainty" / f"{case}_{key}.nii.gz"))
            assert m.shape == img.shape and np.allclose(m.affine, img.affine, atol=1e-5), key
            v = np.asarray(m.dataobj)
            assert v.dtype == np.float32 and np.isfinite(v).all(), key
            assert v.min() >= 0, key
        mi = np.asarray(nib.load(str(pred_dir / "uncertainty" / f"{case}_mutual_information.nii.gz")).dataobj)
        assert mi.max() > 0
        rec = json.loads((pred_dir / "uncertainty" / f"{case}.json").read_text())
        assert rec["num_samples"] == 2 * 2 * 8  # folds x dropout passes x mirrors
    rows = (pred_dir / "uncertainty_scores.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("case,num_samples,foreground_voxels,predictive_entropy_mean")
    assert rows[0].split(",")[3:6] == [f"predictive_entropy_{s}" for s in ("mean", "fg_mean", "patch_mean")]

    # the patch score (and the other case scores) written by nnunet-predict are those `monai-unc evaluate` computes
    for img_file in images:
        case = img_file.name[: -len("_0000.nii.gz")]
        rec = json.loads((pred_dir / "uncertainty" / f"{case}.json").read_text())
        files = CaseFiles(case, label=pred_dir / f"{case}.nii.gz", seg=pred_dir / f"{case}.nii.gz",
                          maps={m: pred_dir / "uncertainty" / f"{case}_{m}.nii.gz" for m in mun.DEFAULT_MEASURES})
        row = evaluate_case(files, EvaluationConfig(num_classes=3, spatial=False)).row
        for m in mun.DEFAULT_MEASURES:
            patch = row.get(f"{m}_patch_mean", row.get(f"{m}_patch"))  # evaluate's column (renamed to _patch_mean)
            assert rec["scores"][m]["patch_mean"] == pytest.approx(patch, rel=1e-9, abs=1e-12), (case, m)
            assert rec["scores"][m]["fg_mean"] == pytest.approx(row[f"{m}_fg_mean"], rel=1e-9, abs=1e-12), (case, m)

    # stock nnU-Net with the same folds and mirrors, and the CLI's thread count (cli_threads: the logits depend on it).
    # Both take it from multiprocessing.cpu_count(), which reads one CPU from here on: the comparisons are the same at
    # any count shared by both sides, and on the CI's two cores, which two test workers share, two intra-op threads
    # per worker oversubscribed them (stock, the CLI and ours in memory: 3 x 32 forward passes, most of this test;
    # 32 passes of this network on a loaded 2-core machine: 19.0 s of CPU with two threads, 4.6 s with one)
    monkeypatch.setattr(multiprocessing, "cpu_count", lambda: 1)
    model = root / "results" / "Dataset990_UncToy" / "nnUNetTrainer_10iters__nnUNetPlans__3d_fullres"
    inp = str(images[0].parent)
    (tmp_path / "stock").mkdir()
    stock = nnUNetPredictor(device=CPU, allow_tqdm=False)
    stock.initialize_from_trained_model_folder(str(model), (0, 1))
    with cli_threads():
        stock.predict_from_files_sequential(inp, str(tmp_path / "stock"), save_probabilities=True)
    # the CLI with -f 0 1 and mirroring the only source: the folds are not a source (they run side by side and are
    # averaged per window for the statistics); segmentation and probabilities are still stock's
    args = _parse(["nnunet-predict", "-i", inp, "-o", str(tmp_path / "cli"), "-m", str(model), "-f", "0", "1",
                   "-device", "cpu", "--sources", "mirroring", "-npp", "0", "-nps", "0", "--disable_progress_bar",
                   "--save_probabilities"])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # not the CLI's count (1, above), so that a count left behind would show
    try:
        assert run(args) == 0
        assert torch.get_num_threads() == 2  # the CLI's thread count is not left behind in this process
    finally:
        torch.set_num_threads(threads)
    cli_cfg = json.loads((tmp_path / "cli" / "uncertainty_config.json").read_text())
    assert cli_cfg["num_samples"] is None and cli_cfg["samples_per_voxel"] == 8  # no dropout: no dropout passes
    # ours with folds and mirroring as sources, in memory (the image read with the dataset's reader)
    ours = mun.UncertaintyPredictor(("folds", "mirroring"), device=CPU, allow_tqdm=False)
    ours.initialize_from_trained_model_folder(str(model), (0, 1))
    reader = ours.plans_manager.image_reader_writer_class()
    agreement = []
    for img_file in images:
        name = img_file.name.replace("_0000.nii.gz", ".nii.gz")
        case = name[: -len(".nii.gz")]
        ref = np.asarray(nib.load(str(tmp_path / "stock" / name)).dataobj)
        assert (ref > 0).sum() > 0  # the toy model segments something
        stock_probs = np.load(tmp_path / "stock" / f"{case}.npz")["probabilities"]
        np.testing.assert_array_equal(np.asarray(nib.load(str(tmp_path / "cli" / name)).dataobj), ref)
        cli_probs = np.load(tmp_path / "cli" / f"{case}.npz")["probabilities"]
        np.testing.assert_array_equal(cli_probs, stock_probs)  # what nnUNetv2_ensemble reads: stock's numbers
        np.testing.assert_array_equal(cli_probs.argmax(0).T, ref)  # .npz in SimpleITK's axis order (z, y, x)
        assert json.loads((tmp_path / "cli" / "uncertainty" / f"{case}.json").read_text())["num_samples"] == 8
        data, props = reader.read_images([str(img_file)])
        with cli_threads():  # stock's thread count
            out = ours.predict_uncertainty_npy(data, props)
        np.testing.assert_array_equal(out["segmentation"].T, ref)
        np.testing.assert_array_equal(out["probabilities"], stock_probs)
        assert out["num_samples"] == 16
        # segmentation_from="probabilities" is the argmax of the mean probabilities (unit-tested above)
        agreement.append((out["mean_probabilities"].argmax(0).T == ref).mean())
    assert min(agreement) > 0.98, agreement  # probability vs logit averaging: labels differ only where folds disagree

    # temperature per fold on its validation cases, folded into a copy of the checkpoints (CLI)
    cal = tmp_path / "calibrated"
    args = _parse(["nnunet-calibrate", "-m", str(model), "-o", str(cal), "-f", "0", "1", "--disable_tta",
                   "-device", "cpu"])
    assert run(args) == 0
    report = json.loads((cal / "temperature.json").read_text())["folds"]
    assert set(report) == {"0", "1"}
    for fold, rec in report.items():
        assert rec["num_cases"] == 3 and rec["nll_fitted"] <= rec["nll_t1"]
        t = rec["temperature"][0]
        old_w = torch.load(model / f"fold_{fold}" / "checkpoint_final.pth", weights_only=False)["network_weights"]
        new_w = torch.load(cal / f"fold_{fold}" / "checkpoint_final.pth", weights_only=False)["network_weights"]
        assert list(old_w) == list(new_w)
        last = max(int(k.split(".")[2]) for k in old_w if k.startswith("decoder.seg_layers."))
        for k in old_w:  # only the full-resolution segmentation layer is divided by t
            expected = old_w[k] / t if k.startswith(f"decoder.seg_layers.{last}.") else old_w[k]
            torch.testing.assert_close(new_w[k], expected, rtol=1e-6, atol=1e-7, msg=k)
    assert (cal / "plans.json").is_file() and (cal / "dataset.json").is_file()
