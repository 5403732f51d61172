"""Region-based (sigmoid, BraTS-style) bundles: the override block of docs/add_uncertainty_to_bundle.md on a config
written in the shape of the Model Zoo's ``brats_mri_segmentation`` inference config, and the multi-label paths of
:func:`monai_unc.engines.format_pred`, :class:`~monai_unc.engines.UncertaintyEvaluator` and
:class:`~monai_unc.transforms.UncertaintyMeasures`."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.data import MetaTensor
from monai.networks.nets import SegResNet
from monai.transforms import Activationsd, AsDiscreted, Compose

from monai_unc.engines import UncertaintyEvaluator, format_pred
from monai_unc.inferers import MCDropoutInferer
from monai_unc.transforms import UncertaintyMeasures, UncertaintyMeasuresd
from tests._paths import ROOT

BRATS_LIKE = ROOT / "tests" / "data" / "brats_like_bundle" / "configs" / "inference.json"


def _hb(p: np.ndarray) -> np.ndarray:
    """Binary entropy in nats, written out (0 log 0 = 0)."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(p > 0, -p * np.log(p), 0.0)
        b = np.where(p < 1, -(1 - p) * np.log(1 - p), 0.0)
    return a + b


def _brats_remap(masks: np.ndarray) -> np.ndarray:
    """(3, ...) TC/WT/ET masks -> BraTS labels, as the Model Zoo bundle's Lambdad: ET 4, else TC 1, else WT 2."""
    return np.where(masks[2] > 0, 4, np.where(masks[0] > 0, 1, np.where(masks[1] > 0, 2, 0)))


# ------------------------------------------------------------------------------------------ functional pieces
def test_format_pred_multilabel_logit_round_trips_through_sigmoid():
    p = torch.tensor([0.0, 1e-30, 0.2, 0.5, 0.9, 1.0 - 1e-6, 1.0]).reshape(1, 7, 1)
    z = format_pred(p, "binary_logit", multilabel=True)
    assert z.shape == p.shape and torch.isfinite(z).all()
    torch.testing.assert_close(torch.sigmoid(z), p, atol=1e-6, rtol=0)
    # one channel per region, however many (no two-class assumption)
    p3 = torch.rand(2, 3, 4, 4)
    torch.testing.assert_close(torch.sigmoid(format_pred(p3, "binary_logit", multilabel=True)), p3, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="multi-label"):
        format_pred(p3, "log_probabilities", multilabel=True)
    # two-class probabilities keep the old meaning
    two = torch.stack([1 - p3[:, 0], p3[:, 0]], 1)
    torch.testing.assert_close(torch.sigmoid(format_pred(two, "binary_logit")), p3[:, :1], atol=1e-6, rtol=0)


def test_uncertainty_measures_multilabel_equal_brute_force():
    rng = np.random.default_rng(0)
    s = rng.uniform(size=(5, 3, 4, 6)).astype(np.float64)  # 5 samples, 3 regions, 2D
    s[:, 1, 0, 0] = 1.0  # certain voxel
    out = UncertaintyMeasures(input_type="samples", multilabel=True)(s)
    mean = s.mean(0)
    pe = _hb(mean)
    ee = _hb(s).mean(0)
    np.testing.assert_allclose(out["pred"], mean, atol=1e-12)
    np.testing.assert_allclose(out["predictive_entropy"], pe, atol=1e-12)
    np.testing.assert_allclose(out["expected_entropy"], ee, atol=1e-12)
    np.testing.assert_allclose(out["mutual_information"], np.maximum(pe - ee, 0), atol=1e-12)
    np.testing.assert_allclose(out["variance"], s.var(0), atol=1e-12)
    np.testing.assert_allclose(out["one_minus_max_prob"], 1 - np.maximum(mean, 1 - mean), atol=1e-12)
    # probabilities input with the per-region expected entropy; normalize divides by log 2
    outp = UncertaintyMeasures(input_type="probs", multilabel=True, normalize=True)(mean, expected_entropy=ee)
    np.testing.assert_allclose(outp["mutual_information"], np.maximum(pe - ee, 0) / math.log(2), atol=1e-12)
    with pytest.raises(ValueError, match="one channel per region"):
        UncertaintyMeasures(input_type="probs", multilabel=True)(mean, expected_entropy=ee[:1])
    # 3D, dictionary version: (S, C, X, Y, Z)
    s3 = torch.rand(4, 2, 3, 3, 3)
    d = UncertaintyMeasuresd(keys="samples", multilabel=True, measures=["predictive_entropy"])({"samples": s3})
    torch.testing.assert_close(d["predictive_entropy"], torch.from_numpy(_hb(s3.mean(0).numpy())).float())
    # region probabilities do not sum to 1: refused without multilabel, values outside [0, 1] refused with it
    with pytest.raises(ValueError):
        UncertaintyMeasures(input_type="samples")(s)
    with pytest.raises(ValueError):
        UncertaintyMeasures(input_type="samples", multilabel=True)(s + 1.0)
    with pytest.raises(TypeError, match="multilabel"):
        UncertaintyMeasures(multilabel="yes")


def test_evaluator_with_brats_postprocessing_thresholds_the_mean_probabilities():
    """BraTS-style postprocessing (sigmoid, then threshold 0.5) on the evaluator's pred gives the thresholded
    mean probabilities the inferer computes, channel by channel."""
    torch.manual_seed(0)
    net = SegResNet(spatial_dims=3, in_channels=4, out_channels=3, init_filters=8, blocks_down=(1, 1), blocks_up=(1,),
                    dropout_prob=0.2)
    image = MetaTensor(torch.randn(1, 4, 16, 16, 16), meta={"filename_or_obj": "case.nii.gz"})
    inferer = MCDropoutInferer(num_samples=3, activation="sigmoid")
    post = Compose([Activationsd(keys="pred", sigmoid=True), AsDiscreted(keys="pred", threshold=0.5)])
    ev = UncertaintyEvaluator(device=torch.device("cpu"), val_data_loader=[{"image": image, "label": image[:, :1]}],
                              network=net, inferer=inferer, postprocessing=post, decollate=False)
    assert ev.pred_format == "binary_logit"
    torch.manual_seed(1)
    ev.run()
    out = ev.state.output
    net.eval()
    torch.manual_seed(1)
    with torch.no_grad():
        ref = inferer(image.as_tensor(), net)
    assert ref.multilabel
    np.testing.assert_array_equal(np.asarray(out["pred"]), (ref["pred"] > 0.5).float().numpy())
    assert out["predictive_entropy"].shape == (1, 3, 16, 16, 16)


def test_evaluator_refuses_softmax_postprocessing_of_region_outputs():
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 3, 1), torch.nn.Dropout(0.2))
    image = torch.randn(1, 1, 4, 4, 4)
    ev = UncertaintyEvaluator(device=torch.device("cpu"), val_data_loader=[{"image": image, "label": image}],
                              network=net, inferer=MCDropoutInferer(num_samples=2, activation="sigmoid"),
                              postprocessing=Activationsd(keys="pred", softmax=True), decollate=False)
    with pytest.raises(ValueError, match="multi-label"):
        ev.run()


# ------------------------------------------------------------------------------------------ the bundle override
def _doc_brats_block() -> dict:
    text = (ROOT / "docs" / "add_uncertainty_to_bundle.md").read_text()
    section = text.split("## Region-based (sigmoid) bundles: BraTS", 1)[1]
    return json.loads(re.findall(r"```json\n(.*?)```", section, re.S)[0])


def _write_cases(folder: Path, n: int = 2, shape: tuple[int, int, int] = (36, 32, 24)) -> list[dict]:
    rng = np.random.default_rng(0)
    affine = np.diag([1.0, 1.0, 1.2, 1.0])
    ii = np.indices(shape).astype(float)
    entries = []
    for c in range(n):
        brain = ((ii[0] - 18) ** 2 / 15**2 + (ii[1] - 16) ** 2 / 13**2 + (ii[2] - 12) ** 2 / 10**2) < 1
        tumour = ((ii[0] - 14 - 3 * c) ** 2 + (ii[1] - 18) ** 2 + (ii[2] - 12) ** 2) < 25
        files = []
        for seq in range(4):
            vol = brain * (100 + 30 * seq + 60 * tumour) + rng.normal(0, 5, shape) * brain
            path = folder / f"BraTS_{c:03d}_{seq:04d}.nii.gz"
            nib.save(nib.Nifti1Image(vol.astype(np.float32), affine), path)
            files.append(path.name)
        entries.append({"image": files})
    return entries


@pytest.mark.slow
def test_brats_like_bundle_with_the_documented_region_override(tmp_path):
    override = _doc_brats_block()
    assert override["inferer"]["activation"] == "sigmoid"
    assert override["evaluator#_target_"] == "monai_unc.engines.UncertaintyEvaluator"
    root, data = tmp_path / "bundle", tmp_path / "data"
    (root / "configs").mkdir(parents=True)
    (root / "models").mkdir()
    data.mkdir()
    (root / "configs" / "datalist.json").write_text(json.dumps({"testing": _write_cases(data)}))
    config = json.loads(BRATS_LIKE.read_text())
    torch.manual_seed(0)
    net = SegResNet(**{k: v for k, v in config["network_def"].items() if k != "_target_"})
    torch.save(net.state_dict(), root / "models" / "model.pt")  # "trained" weights: random, loaded as a user's
    test_only = {
        "inferer#num_samples": 2,
        "inferer#base_inferer#roi_size": [32, 32, 32],  # the documented 240x240x160 window is too large for CI
        # keep the mean probabilities next to the thresholded label map, to check what the bundle thresholded
        "postprocessing#transforms#2": {"_target_": "Compose", "transforms": [
            {"_target_": "CopyItemsd", "keys": "pred", "names": "mean_probs"},
            {"_target_": "AsDiscreted", "keys": "pred", "threshold": 0.5}]},
        "+postprocessing#transforms": [{"_target_": "SaveImaged", "keys": "mean_probs", "output_dir": "@output_dir",
                                        "output_postfix": "mean_probs", "resample": False}],
    }
    files = []
    for i, content in enumerate((override, test_only)):
        path = tmp_path / f"override_{i}.json"
        path.write_text(json.dumps(content))
        files.append(str(path))
    cmd = [sys.executable, "-m", "monai.bundle", "run", "--config_file",
           "[" + ",".join(f"'{f}'" for f in [str(BRATS_LIKE), *files]) + "]",
           "--bundle_root", str(root), "--dataset_dir", str(data)]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, f"bundle run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    for c in range(2):
        case = f"BraTS_{c:03d}_0000"
        out = root / "eval" / case
        seg = np.asarray(nib.load(out / f"{case}_seg.nii.gz").dataobj)
        probs = np.moveaxis(np.asarray(nib.load(out / f"{case}_mean_probs.nii.gz").dataobj, dtype=np.float64), -1, 0)
        pe = np.moveaxis(np.asarray(nib.load(out / f"{case}_predictive_entropy.nii.gz").dataobj, dtype=np.float64),
                         -1, 0)
        mi = np.moveaxis(np.asarray(nib.load(out / f"{case}_mutual_information.nii.gz").dataobj, dtype=np.float64),
                         -1, 0)
        assert seg.shape == (36, 32, 24) and set(np.unique(seg)) <= {0, 1, 2, 4}
        assert probs.shape == pe.shape == mi.shape == (3, 36, 32, 24)
        # the bundle's own sigmoid turned the stored logits back into the mean probabilities: their binary entropy
        # is the inferer's predictive entropy (sigmoid of probabilities would squeeze them into [0.5, 0.73])
        np.testing.assert_allclose(_hb(probs), pe, atol=2e-5)
        # and the label map written is the thresholded mean, remapped to the BraTS labels
        np.testing.assert_array_equal(seg, _brats_remap(probs > 0.5))
        assert (pe >= -1e-6).all() and (pe <= math.log(2) + 1e-5).all()
        assert (mi >= -1e-6).all() and (mi <= pe + 1e-5).all() and mi.max() > 0
