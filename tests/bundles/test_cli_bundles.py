"""Hostile tests of ``monai-unc infer / calibrate --bundle`` on small bundles written in the Model Zoo's layout
(``configs/inference.json``, ``models/model.pt``): what the bundle's config says is honoured or refused in one line."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import torch
from monai.bundle import ConfigParser

from monai_unc.workflows import load_network, prepare_infer
from monai_unc.workflows.models import check_model_activation
from tests._paths import ROOT

SPLEEN_LIKE = ROOT / "tests" / "data" / "spleen_like_bundle" / "configs" / "inference.json"


def _bundle(root: Path, edit=None) -> Path:
    """The spleen-like bundle (a small UNet with dropout) with random weights in ``models/model.pt``."""
    cfg = json.loads(SPLEEN_LIKE.read_text())
    cfg["network_def"].update(channels=[4, 8], strides=[2], dropout=0.1)
    if edit is not None:
        edit(cfg)
    (root / "configs").mkdir(parents=True)
    (root / "models").mkdir()
    (root / "configs" / "inference.json").write_text(json.dumps(cfg))
    torch.manual_seed(0)
    net = ConfigParser(copy.deepcopy(cfg)).get_parsed_content("network_def")
    torch.save(net.state_dict(), root / "models" / "model.pt")
    return root


def _images(folder: Path, shape=(20, 18, 12)) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(0)
    affine = np.diag([1.2, 1.1, 2.0, 1.0])
    nib.save(nib.Nifti1Image(rng.normal(50, 80, shape).astype(np.float32), affine), folder / "case0.nii.gz")
    return folder


def _sigmoid_postprocessing(cfg: dict) -> None:
    """Three overlapping regions under a sigmoid, thresholded: the postprocessing of a BraTS bundle."""
    cfg["network_def"]["out_channels"] = 3
    cfg["postprocessing"]["transforms"][0] = {"_target_": "Activationsd", "keys": "pred", "sigmoid": True}
    cfg["postprocessing"]["transforms"][2] = {"_target_": "AsDiscreted", "keys": "pred", "threshold": 0.5}


def test_a_sigmoid_bundle_is_not_run_with_the_default_softmax(tmp_path):
    """Found by hostile testing: the bundle's ``Activationsd(sigmoid=True)`` was ignored and the default softmax
    renormalised its three regions against each other, without a word."""
    bundle = _bundle(tmp_path / "brats_like", _sigmoid_postprocessing)
    images = _images(tmp_path / "images")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_network(bundle=bundle).bundle_activation == "sigmoid"
        with pytest.raises(ValueError, match=r"--activation softmax contradicts the bundle .*applies sigmoid to 'pred'"
                                             r".*pass --activation sigmoid"):
            prepare_infer(images, bundle=bundle, samples=2)
        with pytest.raises(ValueError, match="--activation none contradicts"):
            prepare_infer(images, bundle=bundle, samples=2, activation="none")
        plan = prepare_infer(images, bundle=bundle, samples=2, activation="sigmoid")
    assert plan.settings.activation == "sigmoid"


def test_a_softmax_bundle_refuses_sigmoid_and_a_bundle_without_activation_accepts_any(tmp_path):
    images = _images(tmp_path / "images")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        softmax = _bundle(tmp_path / "spleen_like")
        assert load_network(bundle=softmax).bundle_activation == "softmax"
        with pytest.raises(ValueError, match="--activation sigmoid contradicts .*applies softmax"):
            prepare_infer(images, bundle=softmax, samples=2, activation="sigmoid")
        assert prepare_infer(images, bundle=softmax, samples=2).settings.activation == "softmax"

        def no_activation(cfg):  # argmax of the logits straight away: says nothing about the activation
            del cfg["postprocessing"]["transforms"][0]

        plain = _bundle(tmp_path / "plain", no_activation)
        assert load_network(bundle=plain).bundle_activation is None
        check_model_activation(load_network(bundle=plain), "sigmoid")


def test_calibrate_refuses_the_activation_a_bundle_contradicts(tmp_path):
    from monai_unc.workflows.calibrate import run_calibrate

    bundle = _bundle(tmp_path / "brats_like", _sigmoid_postprocessing)
    images = _images(tmp_path / "images")
    labels = tmp_path / "labels"
    labels.mkdir()
    nib.save(nib.Nifti1Image(np.zeros((20, 18, 12), np.uint8), np.diag([1.2, 1.1, 2.0, 1.0])),
             labels / "case0.nii.gz")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="--activation softmax contradicts the bundle"):
            run_calibrate(images, labels, tmp_path / "cal.pt", bundle=bundle)
    assert not (tmp_path / "cal.pt").exists()


def test_a_bundle_whose_preprocessing_reads_another_key_gives_the_maps_of_the_same_bundle_under_image(tmp_path):
    """Found by hostile testing: the image was always given as ``{"image": path}``, so a bundle with
    ``"image_key": "img"`` failed every case with ``RuntimeError: applying transform <LoadImaged object at 0x...>``."""
    from monai_unc.workflows import run_infer

    images = _images(tmp_path / "images")
    maps = []
    for name, key in (("image", "image"), ("img", "img")):
        bundle = _bundle(tmp_path / f"bundle_{name}", lambda cfg, key=key: cfg.update(image_key=key))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plan = prepare_infer(images, bundle=bundle, samples=2, roi=16)
            assert plan.model.input_key == key
            status = run_infer(plan.cases, plan.model, plan.inferer, plan.settings, tmp_path / f"out_{name}",
                               progress=False)
        assert [s["status"] for s in status] == ["written"]
        out = tmp_path / f"out_{name}"
        maps.append({m: nib.load(out / f"case0_{m}.nii.gz") for m in ("mutual_information", "seg")})
    for m in ("mutual_information", "seg"):
        np.testing.assert_array_equal(maps[0][m].get_fdata(), maps[1][m].get_fdata())
        np.testing.assert_array_equal(maps[0][m].affine, maps[1][m].affine)
    assert maps[0]["mutual_information"].shape == (20, 18, 12)  # inverted onto the input grid


def test_a_preprocessing_that_reads_several_keys_but_no_image_is_refused_at_load(tmp_path):
    def two_keys(cfg):
        cfg["image_key"] = ["img", "seg"]

    bundle = _bundle(tmp_path / "b", two_keys)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"reads the keys \['img', 'seg'\].*--no-bundle-preprocessing"):
            load_network(bundle=bundle)
        assert load_network(bundle=bundle, bundle_preprocessing=False).preprocessing is None


def test_a_case_the_bundle_preprocessing_cannot_read_names_the_transform_file_and_reason(tmp_path):
    """Found by hostile testing: a truncated input under a bundle's preprocessing failed with ``RuntimeError: applying
    transform <monai.transforms.io.dictionary.LoadImaged object at 0x7f...>`` (no file, no reason)."""
    from monai_unc.engine import CasesFailed
    from monai_unc.workflows import run_infer

    images = _images(tmp_path / "images")
    whole = (images / "case0.nii.gz").read_bytes()
    (images / "case0.nii.gz").write_bytes(whole[: len(whole) // 2])
    bundle = _bundle(tmp_path / "bundle")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = prepare_infer(images, bundle=bundle, samples=2, roi=16)
        with pytest.raises(CasesFailed) as info:
            run_infer(plan.cases, plan.model, plan.inferer, plan.settings, tmp_path / "out", progress=False)
    text = json.loads((tmp_path / "out" / "failures.json").read_text())["failures"][0]["error"]
    assert "the bundle's preprocessing (LoadImaged) failed on " in text and "case0.nii.gz: " in text, text
    assert "EOFError" in text and "object at 0x" not in text, text
    assert "object at 0x" not in str(info.value)


def test_a_rerun_without_the_bundle_preprocessing_does_not_resume_the_cases_predicted_with_it(tmp_path):
    """Found by hostile testing: ``--no-bundle-preprocessing`` was recorded nowhere, so a rerun with it into the same
    folder skipped the cases predicted with the preprocessing (maps of another grid and intensity scaling), and a
    rule certified on preprocessed predictions matched predictions made without it."""
    from monai_unc.io.provenance import compare_fingerprints
    from monai_unc.workflows import run_infer

    images = _images(tmp_path / "images")
    bundle = _bundle(tmp_path / "bundle")
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with_pre = prepare_infer(images, bundle=bundle, samples=2, roi=16)
        run_infer(with_pre.cases, with_pre.model, with_pre.inferer, with_pre.settings, out, progress=False)
        without = prepare_infer(images, bundle=bundle, samples=2, roi=16, bundle_preprocessing=False)
        assert without.model.preprocessing is None
        assert without.settings.model != with_pre.settings.model
        with pytest.raises(ValueError, match=r"holds a run with different settings \(model\)"):
            run_infer(without.cases, without.model, without.inferer, without.settings, out, progress=False)
    fp = {"with": with_pre.settings.to_json(), "without": without.settings.to_json()}
    for f in fp.values():
        f["weights"] = with_pre.model.weights  # the same files: only the preprocessing differs
    status, diffs = compare_fingerprints(fp["with"], fp["without"])
    assert status == "mismatch" and [d[0] for d in diffs] == ["model"], (status, diffs)
    moved = dict(fp["with"], model=fp["with"]["model"].replace(str(tmp_path), "/elsewhere"))
    assert compare_fingerprints(fp["with"], moved)[0] == "match"  # a moved bundle is the same model


def test_the_checkpoint_entry_named_by_the_bundle_checkpointloader_is_loaded(tmp_path):
    """Found by hostile testing: ``{"weights": state dict, "epoch": 3}`` with the bundle's ``CheckpointLoader``
    ``load_dict: {"weights": "@network"}`` ran with ``monai.bundle run`` but ``--bundle`` refused it without naming
    the entries it holds; a TorchScript archive saved as ``model.pt`` was called "a truncated or corrupt file"."""
    def weights_key(cfg):
        cfg["checkpointloader"]["load_dict"] = {"weights": "@network"}

    bundle = _bundle(tmp_path / "keyed", weights_key)
    state = torch.load(bundle / "models" / "model.pt", weights_only=True)
    torch.save({"weights": state, "epoch": torch.tensor(3)}, bundle / "models" / "model.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = load_network(bundle=bundle).network
        for k, v in net.state_dict().items():
            torch.testing.assert_close(v, state[k], rtol=0, atol=0)
        # the same checkpoint in a bundle whose loader names another entry: the message lists what the file holds
        other = _bundle(tmp_path / "other")
        torch.save({"weights": state, "epoch": torch.tensor(3)}, other / "models" / "model.pt")
        with pytest.raises(ValueError, match=r"does not hold a state dict of tensors \(it holds the entries epoch, "
                                             r"weights\)"):
            load_network(bundle=other)
        scripted = _bundle(tmp_path / "scripted")
        torch.jit.save(torch.jit.script(load_network(bundle=scripted).network), scripted / "models" / "model.pt")
        with pytest.raises(ValueError, match="is a TorchScript archive"):
            load_network(bundle=scripted)
