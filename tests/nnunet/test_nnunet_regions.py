"""nnU-Net region-based (sigmoid per region) models and the window disagreement in UncertaintyPredictor: window
statistics against a hand-rolled loop, stock nnU-Net's segmentation and probabilities, 4D region maps, per-region
case scores, MI = 0 for a deterministic model with overlapping windows, and (slow) a tiny region-based dataset
trained and predicted end to end on CPU."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
import multiprocessing
import random

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

from acvl_utils.cropping_and_padding.padding import pad_nd_image  # noqa: E402
from nnunetv2.inference.export_prediction import (  # noqa: E402
    convert_predicted_logits_to_segmentation_with_correct_shape,
)
from nnunetv2.inference.sliding_window_prediction import compute_gaussian  # noqa: E402
from nnunetv2.utilities.get_network_from_plans import get_network_from_plans  # noqa: E402
from nnunetv2.utilities.plans_handling.plans_handler import PlansManager  # noqa: E402

import monai_unc.nnunet as mun  # noqa: E402
from monai_unc.scores import case_scores  # noqa: E402
from tests._nnunet_pools import plan_in_process  # noqa: E402
from tests.nnunet._toy_training import small_progress_plots  # noqa: E402
from tests.nnunet.test_nnunet import cli_threads, combos, make_plans, make_predictor  # noqa: E402

CPU = torch.device("cpu")
REGIONS_JSON = {"channel_names": {"0": "MRI"}, "labels": {"background": 0, "whole": [1, 2], "core": 2},
                "regions_class_order": [1, 2], "numTraining": 2, "file_ending": ".nii.gz"}
LOG2 = math.log(2.0)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def region_predictor(n_folds=2, mirror_axes=(0, 1, 2), plans=None, dataset_json=None, **kw):
    plans = plans or make_plans()
    pm = PlansManager(plans)
    cm = pm.get_configuration("cfg")
    params = []
    for k in range(n_folds):
        torch.manual_seed(200 + k)
        net = get_network_from_plans(cm.network_arch_class_name, cm.network_arch_init_kwargs,
                                     cm.network_arch_init_kwargs_req_import, 1, 2, allow_init=True,
                                     deep_supervision=False)
        with torch.no_grad():  # sharper logits than the default initialisation: folds that disagree
            net.decoder.seg_layers[-1].weight.mul_(4.0)
        params.append(copy.deepcopy(net.state_dict()))
    pred = mun.UncertaintyPredictor(device=CPU, allow_tqdm=False, **kw)
    pred.manual_initialization(net, pm, cm, params, copy.deepcopy(dataset_json or REGIONS_JSON), "nnUNetTrainer",
                               mirror_axes)
    return pred


def hb(p):
    """Binary entropy in float64, 0 log 0 = 0."""
    p = p.astype(np.float64)
    q = 1 - p
    return -(p * np.log(np.where(p > 0, p, 1.0)) + q * np.log(np.where(q > 0, q, 1.0)))


def region_reference(pred, data):
    """float64 per-region statistics of folds x mirrors samples by explicit loops (every sample a sigmoid per
    region), Gaussian-blended; the window disagreement per fold, averaged over the folds."""
    net = pred.network.eval()
    patch = pred.configuration_manager.patch_size
    padded, revert = pad_nd_image(data, patch, "constant", {"value": 0}, True, None)
    slicers = pred._internal_get_sliding_window_slicers(padded.shape[1:])
    mirrors = combos(pred.allowed_mirroring_axes)
    g = compute_gaussian(tuple(patch), 1.0 / 8, 10, device=CPU).double().numpy()
    r = 2
    acc = np.zeros((2 * r, *padded.shape[1:]))
    # per fold: pred_k, the blend of H(m_wk), the blend of the windows' own variances (the folds run one after the
    # other: each fold's second moment is its blend of window variances plus pred_k^2, pooled over the folds)
    per_fold = [np.zeros((3 * r, *padded.shape[1:])) for _ in pred.list_of_parameters]
    w = np.zeros(padded.shape[1:])
    with torch.no_grad():
        for sl in slicers:
            x = padded[sl][None]
            probs = []
            for k, st in enumerate(pred.list_of_parameters):
                net.load_state_dict(st)
                fold = []
                for axes in mirrors:
                    o = net(torch.flip(x, axes) if axes else x)
                    o = torch.flip(o, axes) if axes else o
                    fold.append(torch.sigmoid(o.double())[0].numpy())
                m = np.mean(fold, axis=0)
                per_fold[k][(slice(None), *sl[1:])] += np.concatenate([m, hb(m), np.var(fold, axis=0)]) * g
                probs += fold
            p = np.stack(probs)
            acc[(slice(None), *sl[1:])] += np.concatenate([p.mean(0), hb(p).mean(0)]) * g
            w[sl[1:]] += g
    cut = (slice(None), *revert[1:])
    acc = (acc / w)[cut]
    folds = [(f / w)[cut] for f in per_fold]
    wd = np.mean([hb(f[:r]) - f[r:2 * r] for f in folds], axis=0)
    mean_sq = np.mean([f[2 * r:] + f[:r] ** 2 for f in folds], axis=0)
    return {"pred": acc[:r], "expected_entropy": acc[r:2 * r], "mean_sq": mean_sq, "window_disagreement": wd}


def test_region_windows_match_a_hand_rolled_loop():
    pred = region_predictor(uncertainty_sources=("folds", "mirroring"), measures=mun.MAP_MEASURES)
    torch.manual_seed(3)
    data = torch.randn(1, 20, 24, 12)
    res = pred.predict_uncertainty_from_preprocessed_data(data)
    assert res.multilabel and res.num_samples == 16
    ref = region_reference(pred, data)
    for key in ("pred", "expected_entropy", "mean_sq"):
        got = res.moments[key].numpy()
        assert got.shape == ref[key].shape == (2, 20, 24, 12), key
        np.testing.assert_allclose(got, ref[key], atol=2e-5, err_msg=key)
    maps = res.measures(mun.MAP_MEASURES)
    pe = hb(ref["pred"])
    expected = {
        "predictive_entropy": pe,
        "expected_entropy": ref["expected_entropy"],
        "window_disagreement": ref["window_disagreement"],
        "mutual_information": np.maximum(pe - ref["expected_entropy"] - ref["window_disagreement"], 0),
        "one_minus_max_prob": 1 - np.maximum(ref["pred"], 1 - ref["pred"]),
        "variance": ref["mean_sq"] - ref["pred"] ** 2,  # per region: the Bernoulli mean's variance over samples
    }
    for key, val in expected.items():
        assert maps[key].shape == (2, 20, 24, 12), key
        np.testing.assert_allclose(maps[key].numpy(), val, atol=3e-5, err_msg=key)
    for key in ("predictive_entropy", "expected_entropy", "mutual_information", "window_disagreement"):
        assert float(maps[key].min()) >= 0 and float(maps[key].max()) <= LOG2 + 1e-6, key
    assert float(maps["mutual_information"].max()) > 1e-3 and float(maps["window_disagreement"].max()) > 1e-4


def region_props():
    return {"spacing": [1.0, 2.0, 1.6], "shape_before_cropping": (22, 26, 15),
            "bbox_used_for_cropping": [[2, 18], [3, 25], [1, 11]],
            "shape_after_cropping_and_before_resampling": (16, 22, 10)}


def test_region_geometry_segmentation_and_probabilities_are_stock():
    pred = region_predictor(plans=make_plans(transpose=(1, 2, 0)), uncertainty_sources=("folds", "mirroring"),
                            measures=mun.MAP_MEASURES)
    torch.manual_seed(6)
    res = pred.predict_uncertainty_from_preprocessed_data(torch.randn(1, 18, 20, 12)).to_numpy()
    props, lm = region_props(), pred.label_manager
    out = mun.convert_uncertainty_to_original_geometry(res, pred.plans_manager, pred.configuration_manager, lm,
                                                       props, measures=mun.MAP_MEASURES)
    stock_seg, stock_probs = convert_predicted_logits_to_segmentation_with_correct_shape(
        res.logits, pred.plans_manager, pred.configuration_manager, lm, props, return_probabilities=True)
    shape = tuple(np.array(props["shape_before_cropping"])[pred.plans_manager.transpose_backward])
    np.testing.assert_array_equal(out["segmentation"], stock_seg)
    np.testing.assert_array_equal(out["probabilities"], stock_probs)  # per-region sigmoid probabilities
    assert out["probabilities"].shape == (2, *shape)
    # stock's conversion (regions_class_order, > 0.5) instead of an argmax, done here by hand
    by_hand = np.zeros(shape, np.uint8)
    for i, c in enumerate(REGIONS_JSON["regions_class_order"]):
        by_hand[out["probabilities"][i] > 0.5] = c
    np.testing.assert_array_equal(out["segmentation"], by_hand)
    assert set(np.unique(by_hand)) == {0, 1, 2}
    inside = np.zeros(props["shape_before_cropping"], bool)
    inside[tuple(slice(a, b) for a, b in props["bbox_used_for_cropping"])] = True
    inside = inside.transpose(pred.plans_manager.transpose_backward)
    assert np.all(out["mean_probabilities"][:, ~inside] == 0)  # regions: no background channel
    for key, m in out["maps"].items():
        assert m.shape == (2, *shape) and m.dtype == np.float32 and np.isfinite(m).all(), key
        assert np.all(m[:, ~inside] == 0), key
    assert out["maps"]["predictive_entropy"].max() <= LOG2 + 1e-6
    out_p = mun.convert_uncertainty_to_original_geometry(res, pred.plans_manager, pred.configuration_manager, lm,
                                                         props, segmentation_from="probabilities")
    by_hand = np.zeros(shape, np.uint8)
    for i, c in enumerate(REGIONS_JSON["regions_class_order"]):
        by_hand[out_p["mean_probabilities"][i] > 0.5] = c
    np.testing.assert_array_equal(out_p["segmentation"], by_hand)
    assert (out_p["segmentation"] == stock_seg).mean() > 0.9


def test_region_labels_above_255_keep_their_values_in_the_probability_segmentation():
    """The segmentation from the mean probabilities took uint8 from the number of labels (2 < 255): label 300 of
    ``regions_class_order`` was stored as 44. Its dtype now comes from its largest label (uint16, what nnU-Net's
    writers store)."""
    dataset = {**REGIONS_JSON, "labels": {"background": 0, "whole": [1, 300], "core": 300},
               "regions_class_order": [1, 300]}
    pred = region_predictor(uncertainty_sources=("folds",), dataset_json=dataset)
    torch.manual_seed(6)
    res = pred.predict_uncertainty_from_preprocessed_data(torch.randn(1, 18, 20, 12)).to_numpy()
    out = mun.convert_uncertainty_to_original_geometry(res, pred.plans_manager, pred.configuration_manager,
                                                       pred.label_manager, region_props(),
                                                       segmentation_from="probabilities")
    by_hand = np.zeros(out["segmentation"].shape, np.int64)
    for i, c in enumerate(dataset["regions_class_order"]):
        by_hand[out["mean_probabilities"][i] > 0.5] = c
    assert set(np.unique(by_hand)) == {0, 1, 300}
    assert out["segmentation"].dtype == np.uint16
    np.testing.assert_array_equal(out["segmentation"], by_hand)


@pytest.mark.parametrize("io_name", ["SimpleITKIO", "NibabelIOWithReorient"])
def test_region_maps_are_one_4d_nifti_with_the_3d_geometry(io_name, tmp_path):
    import nibabel as nib
    from nnunetv2.imageio.reader_writer_registry import recursive_find_reader_writer_by_name

    rw = recursive_find_reader_writer_by_name(io_name)()
    affine = np.array([[0.0, -1.2, 0.0, 10.0], [0.0, 0.0, 2.0, -4.0], [-0.9, 0.0, 0.0, 3.5], [0, 0, 0, 1]])
    vol = np.random.default_rng(0).random((6, 7, 5)).astype(np.float32)
    nib.save(nib.Nifti1Image(vol, affine), str(tmp_path / "img.nii.gz"))
    data, props = rw.read_images([str(tmp_path / "img.nii.gz")])
    maps = np.stack([data[0], 2 * data[0] + 1]).astype(np.float32)
    paths = mun.write_region_maps(rw, maps, tmp_path / "out" / "c_mi.nii.gz", props, ["whole", "core"])
    assert [p.name for p in paths] == ["c_mi.nii.gz"]
    back = nib.load(str(paths[0]))
    assert back.shape == (6, 7, 5, 2) and back.get_data_dtype() == np.float32
    np.testing.assert_allclose(back.affine, affine, atol=1e-5)
    # spacing 1 along the region axis (pixdim[4]; SimpleITK wrote 0 into the 3D header), the 3D spacing kept
    assert back.header["pixdim"][4] == 1.0
    np.testing.assert_allclose(back.header.get_zooms(), (0.9, 1.2, 2.0, 1.0), atol=1e-5)
    import SimpleITK as sitk

    assert sitk.ReadImage(str(paths[0])).GetSpacing()[3] == 1.0
    got = np.asarray(back.dataobj)
    np.testing.assert_array_equal(got[..., 0], vol)  # float values and axis order of the input image
    np.testing.assert_array_equal(got[..., 1], 2 * vol + 1)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["c_mi.nii.gz"]  # no temporary left
    with pytest.raises(ValueError, match="R = 3 regions"):
        mun.write_region_maps(rw, maps, tmp_path / "x.nii.gz", props, ["a", "b", "c"])


def test_region_case_files_record_scores_and_config(tmp_path):
    import nibabel as nib

    pred = region_predictor(uncertainty_sources=("folds",), n_folds=2)
    rng = np.random.default_rng(0)
    vol = rng.normal(size=(17, 18, 22)).astype(np.float32)  # (x, y, z); SimpleITK reads it as (z, y, x)
    vol[:2] = 0
    nib.save(nib.Nifti1Image(vol, np.diag([1.0, 1.0, 1.0, 1.0])), str(tmp_path / "img.nii.gz"))
    image, props = pred.plans_manager.image_reader_writer_class().read_images([str(tmp_path / "img.nii.gz")])
    arrays = pred.predict_uncertainty_npy(image, copy.deepcopy(props))
    rec = pred.predict_uncertainty_npy(image, copy.deepcopy(props), output_file_truncated=str(tmp_path / "c0"))
    cfg = json.loads((tmp_path / "uncertainty_config.json").read_text())
    assert cfg["regions"] == {"whole": [1, 2], "core": [2]} and cfg["regions_class_order"] == [1, 2]
    assert cfg["window_disagreement"] == "separate" and cfg["mi_meaning"] == "epistemic"
    assert rec["regions"] == {"whole": [1, 2], "core": [2]}
    seg = arrays["segmentation"]
    # nibabel reads (x, y, z), SimpleITK's arrays are (z, y, x)
    np.testing.assert_array_equal(np.asarray(nib.load(str(tmp_path / "c0.nii.gz")).dataobj).transpose(2, 1, 0), seg)
    for key in mun.DEFAULT_MEASURES:
        m = arrays["maps"][key]
        assert m.shape == (2, 22, 18, 17)
        img = nib.load(str(tmp_path / "uncertainty" / rec["maps"][key]))
        assert img.shape == (17, 18, 22, 2)
        np.testing.assert_allclose(np.asarray(img.dataobj), m.transpose(3, 2, 1, 0), atol=1e-7)
        for r, (name, labels) in enumerate(rec["regions"].items()):
            expected = case_scores(m[r], np.isin(seg, labels))
            for s, v in expected.items():
                got = rec["scores"][key][f"{s}_{name}"]
                assert (got is None and np.isnan(v)) or got == pytest.approx(v, rel=1e-6), (key, name, s)
    header = (tmp_path / "uncertainty_scores.csv").read_text().splitlines()[0].split(",")
    assert "mutual_information_fg_mean_whole" in header and "predictive_entropy_patch_mean_core" in header
    assert mun.case_exported(tmp_path / "c0", ".nii.gz", mun.DEFAULT_MEASURES)


@pytest.mark.parametrize("regions", [False, True])
def test_deterministic_model_has_zero_mi_with_overlapping_windows(regions):
    """One fold, no mirroring, no dropout: every window holds one sample, so MI = 0 exactly although the windows
    overlap (tile step 0.5) and disagree; that disagreement is the window_disagreement map (>= 0). The former
    behaviour (window_disagreement='mutual_information') counts it as MI."""
    make = region_predictor if regions else make_predictor
    kw = dict(uncertainty_sources=("folds",), n_folds=1, use_mirroring=False, measures=mun.MAP_MEASURES)
    with pytest.warns(UserWarning, match="single fold"):
        pred = make(**kw)
    torch.manual_seed(4)
    data = torch.randn(1, 20, 24, 12)
    maps = pred.predict_uncertainty_from_preprocessed_data(data).measures(mun.MAP_MEASURES)
    mi, wd = maps["mutual_information"], maps["window_disagreement"]
    assert torch.equal(mi, torch.zeros_like(mi))
    assert float(wd.min()) >= 0 and float(wd.max()) > 1e-4
    torch.testing.assert_close(maps["predictive_entropy"], maps["expected_entropy"] + wd, atol=5e-6, rtol=0)
    # without overlap (one window covers the image) the window disagreement is 0 as well
    small = pred.predict_uncertainty_from_preprocessed_data(torch.randn(1, 16, 16, 16)).measures(mun.MAP_MEASURES)
    assert float(small["window_disagreement"].abs().max()) < 1e-6 and float(small["mutual_information"].max()) == 0
    kw["measures"] = mun.DEFAULT_MEASURES
    with pytest.warns(UserWarning, match="single fold"):
        old = make(window_disagreement="mutual_information", **kw)
    res = old.predict_uncertainty_from_preprocessed_data(data)
    assert "window_entropy" not in res.moments
    old_maps = res.measures(mun.DEFAULT_MEASURES)
    torch.testing.assert_close(old_maps["mutual_information"], maps["mutual_information"] + wd, atol=2e-6, rtol=0)
    assert float(old_maps["mutual_information"].max()) > 1e-4
    with pytest.raises(ValueError, match="window_disagreement"):
        res.measures(["window_disagreement"])
    with pytest.raises(ValueError, match="window_disagreement"):
        make(window_disagreement="mutual_information", **{**kw, "measures": mun.MAP_MEASURES})
    with pytest.raises(ValueError, match="window_disagreement must be one of"):
        make(window_disagreement="blend", **kw)


# ------------------------------------------------------------------------------------------ end to end (slow)
def train_tiny_region_model(tmp_path, monkeypatch, dataset_id=992):
    """A tiny region-based toy task (regions whole = {1, 2}, core = {2}) planned, preprocessed and trained for 10
    iterations on CPU (one fold); returns (model folder, raw dataset folder)."""
    from nnunetv2.experiment_planning.plan_and_preprocess_api import (
        extract_fingerprints,
        plan_experiments,
        preprocess,
    )
    from nnunetv2.run.run_training import get_trainer_from_args

    for name in ("raw", "preprocessed", "results"):
        monkeypatch.setenv(f"nnUNet_{name}", str(tmp_path / name))
    monkeypatch.setenv("nnUNet_compile", "false")
    monkeypatch.setenv("nnUNet_extTrainer", mun.trainer_dir())
    monkeypatch.setenv("nnUNet_n_proc_DA", "1")  # planning sets torch's thread count from it (0 is refused)
    monkeypatch.chdir(tmp_path)
    plan_in_process(monkeypatch)  # no worker process per planning step (tests/_nnunet_pools.py)
    raw = mun.write_toy_dataset(tmp_path / "raw", dataset_id=dataset_id, name="UncRegions", num_training=4,
                                num_test=1, shape=(24, 24, 24))
    meta = json.loads((raw / "dataset.json").read_text())
    # nnU-Net's region-based format: a region is a list of labels; regions_class_order paints the label map
    meta["labels"] = {"background": 0, "whole": [1, 2], "core": 2}
    meta["regions_class_order"] = [1, 2]
    (raw / "dataset.json").write_text(json.dumps(meta))
    extract_fingerprints([dataset_id], num_processes=1)
    plan_experiments([dataset_id])
    preprocess([dataset_id], configurations=("3d_fullres",), num_processes=(1,))
    pre = tmp_path / "preprocessed" / raw.name
    plans = json.loads((pre / "nnUNetPlans.json").read_text())
    arch = plans["configurations"]["3d_fullres"]["architecture"]["arch_kwargs"]
    arch["features_per_stage"] = [min(f, 16) for f in arch["features_per_stage"]]
    (pre / "nnUNetPlans.json").write_text(json.dumps(plans))
    cases = sorted(p.name[: -len("_0000.nii.gz")] for p in (raw / "imagesTr").iterdir())
    (pre / "splits_final.json").write_text(json.dumps([{"train": cases[1:], "val": cases[:1]}]))
    monkeypatch.setenv("nnUNet_n_proc_DA", "0")  # augmentation in this process (after planning, which needs > 0)
    # initialisation (torch) and nnU-Net's sampling and augmentation in this process (numpy, random): 10 iterations
    # from an unseeded start may segment nothing
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    trainer = get_trainer_from_args(str(dataset_id), "3d_fullres", 0, "nnUNetTrainer_10iters", device=CPU)
    trainer.initialize()
    assert trainer.label_manager.has_regions
    small_progress_plots(monkeypatch.setitem)  # tests/nnunet/_toy_training.py: the epoch's plot at a tenth of its dpi
    trainer.run_training()
    return tmp_path / "results" / raw.name / "nnUNetTrainer_10iters__nnUNetPlans__3d_fullres", raw


@pytest.mark.slow
def test_region_model_end_to_end_on_cpu_equals_stock(tmp_path, monkeypatch):
    import nibabel as nib
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    from monai_unc.nnunet.cli import add_parser, run

    model, raw = train_tiny_region_model(tmp_path, monkeypatch)
    inp = raw / "imagesTs"
    # stock and nnunet-predict predict with multiprocessing.cpu_count() threads; one CPU from here on: the comparison
    # is the same at any count both share, and two threads per test worker oversubscribed the CI's two cores
    monkeypatch.setattr(multiprocessing, "cpu_count", lambda: 1)
    stock = nnUNetPredictor(device=CPU, allow_tqdm=False)
    stock.initialize_from_trained_model_folder(str(model), (0,))
    (tmp_path / "stock").mkdir()
    with cli_threads():  # nnunet-predict's thread count: the CPU logits depend on it
        stock.predict_from_files_sequential(str(inp), str(tmp_path / "stock"), save_probabilities=True)

    parser = __import__("argparse").ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["nnunet-predict", "-i", str(inp), "-o", str(tmp_path / "ours"), "-m", str(model),
                              "-f", "0", "-device", "cpu", "--sources", "mirroring", "-npp", "0", "-nps", "0",
                              "--disable_progress_bar", "--save_probabilities", "--measures",
                              *mun.DEFAULT_MEASURES, "window_disagreement"])
    assert run(args) == 0
    cfg = json.loads((tmp_path / "ours" / "uncertainty_config.json").read_text())
    assert cfg["regions"] == {"whole": [1, 2], "core": [2]} and cfg["regions_class_order"] == [1, 2]
    (img_file,) = sorted(inp.glob("*_0000.nii.gz"))
    case = img_file.name[: -len("_0000.nii.gz")]
    img = nib.load(str(img_file))
    ref = np.asarray(nib.load(str(tmp_path / "stock" / f"{case}.nii.gz")).dataobj)
    assert set(np.unique(ref)) <= {0, 1, 2} and (ref > 0).any()
    np.testing.assert_array_equal(np.asarray(nib.load(str(tmp_path / "ours" / f"{case}.nii.gz")).dataobj), ref)
    stock_probs = np.load(tmp_path / "stock" / f"{case}.npz")["probabilities"]
    ours_probs = np.load(tmp_path / "ours" / f"{case}.npz")["probabilities"]
    assert ours_probs.shape == stock_probs.shape and ours_probs.shape[0] == 2  # per-region sigmoid probabilities
    np.testing.assert_array_equal(ours_probs, stock_probs)
    rec = json.loads((tmp_path / "ours" / "uncertainty" / f"{case}.json").read_text())
    assert rec["num_samples"] == 8 and rec["regions"] == cfg["regions"]
    for key in (*mun.DEFAULT_MEASURES, "window_disagreement"):
        m = nib.load(str(tmp_path / "ours" / "uncertainty" / f"{case}_{key}.nii.gz"))
        assert m.shape == (*img.shape, 2) and np.allclose(m.affine, img.affine, atol=1e-5), key
        v = np.asarray(m.dataobj)
        assert v.dtype == np.float32 and np.isfinite(v).all() and v.min() >= 0, key
        if key != "one_minus_max_prob":
            assert v.max() <= math.log(2) + 1e-6, key  # binary entropies
        else:
            assert v.max() <= 0.5
    mi = np.asarray(nib.load(str(tmp_path / "ours" / "uncertainty" / f"{case}_mutual_information.nii.gz")).dataobj)
    assert mi.max() > 0  # mirrors disagree
    header = (tmp_path / "ours" / "uncertainty_scores.csv").read_text().splitlines()[0].split(",")
    assert "mutual_information_fg_mean_whole" in header and "mutual_information_fg_mean_core" in header

    # DICOM: the regions of the label map (from uncertainty_config.json) as overlapping segments, each region's
    # probability in the FRACTIONAL SEG, one Parametric Map per region (the image written as the case's series)
    if importlib.util.find_spec("highdicom") is not None:
        from monai_unc.cli import main
        from monai_unc.io.dicom import read_segmentation_regions, read_series, write_series
        from monai_unc.regions import label_to_regions

        write_series(np.asarray(img.dataobj, dtype=np.float32), img.affine, tmp_path / "series" / case, modality="MR")
        assert main(["dicom-export", "-p", str(tmp_path / "ours"), "-s", str(tmp_path / "series"), "-o",
                     str(tmp_path / "dicom"), "--layout", "nnunet", "-q"]) == 0
        series = read_series(tmp_path / "series" / case, pixels=False)
        assert np.abs(series.affine - img.affine).max() < 1e-4
        masks = read_segmentation_regions(tmp_path / "dicom" / case / "seg.dcm", series, ["whole", "core"])
        np.testing.assert_array_equal(masks, label_to_regions(ref, cfg["regions"]).astype(np.uint8))
        written = sorted(f.name for f in (tmp_path / "dicom" / case).iterdir())
        assert "probabilities.dcm" in written and "mutual_information_whole.dcm" in written, written
        assert "mutual_information_core.dcm" in written, written

    # per-region temperatures (nnunet-calibrate, mode vector) folded into the segmentation layer's channels
    cal = tmp_path / "calibrated"
    args = parser.parse_args(["nnunet-calibrate", "-m", str(model), "-o", str(cal), "-f", "0", "--mode", "vector",
                              "--disable_tta", "-device", "cpu"])
    assert run(args) == 0
    doc = json.loads((cal / "temperature.json").read_text())
    assert doc["activation"] == "sigmoid" and doc["regions"] == {"whole": [1, 2], "core": [2]}
    fold = doc["folds"]["0"]
    assert len(fold["temperature"]) == 2 and fold["nll_fitted"] <= fold["nll_t1"] and fold["num_cases"] == 1
    t = torch.tensor(fold["temperature"], dtype=torch.float32)
    old_w = torch.load(model / "fold_0" / "checkpoint_final.pth", weights_only=False)["network_weights"]
    new_w = torch.load(cal / "fold_0" / "checkpoint_final.pth", weights_only=False)["network_weights"]
    last = max(int(k.split(".")[2]) for k in old_w if k.startswith("decoder.seg_layers."))
    for k in old_w:  # region r's output channel of the full-resolution segmentation layer divided by t_r
        if k.startswith(f"decoder.seg_layers.{last}."):
            expected = old_w[k] / t.view(-1, *([1] * (old_w[k].ndim - 1)))
        else:
            expected = old_w[k]
        torch.testing.assert_close(new_w[k], expected, rtol=1e-6, atol=1e-7, msg=k)


def test_region_targets_hand_worked():
    from monai_unc.nnunet.calibrate import region_targets

    y = torch.tensor([[0, 1, 2], [-1, 2, 1]])
    got = region_targets(y, [(1, 2), (2,)])
    expected = torch.tensor([[[0, 1, 1], [-1, 1, 1]], [[0, 0, 1], [-1, 1, 0]]])
    assert torch.equal(got, expected) and got.dtype == torch.int64
    assert mun.region_definitions(REGIONS_JSON) == {"whole": [1, 2], "core": [2]}
    assert mun.region_definitions({"labels": {"background": 0, "a": 1, "b": 2}}) == {}
