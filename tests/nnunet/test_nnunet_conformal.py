"""Conformal masks on nnU-Net predictions end to end: ``nnunet-predict --save_probabilities`` on a toy nnU-Net model
-> ``evaluate --layout nnunet --conformal ...`` with labels (strata of a map the predictor wrote) -> ``monai-unc
conformal`` on new predictions -> masks in the prediction's geometry; and predictions saved without probabilities
refused before any work."""

from __future__ import annotations

import csv
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("nnunetv2")

import nibabel as nib  # noqa: E402
from nnunetv2.utilities.get_network_from_plans import get_network_from_plans  # noqa: E402
from nnunetv2.utilities.plans_handling.plans_handler import PlansManager  # noqa: E402

from monai_unc import cli  # noqa: E402
from monai_unc.evaluation.conformal import CONFORMAL_RULE_FILE, ConformalRuleFile  # noqa: E402
from monai_unc.io import read_probabilities  # noqa: E402
from tests.nnunet.test_nnunet import DATASET_JSON, make_plans, write_inputs  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CALIBRATION_SHAPES = ((20, 18, 16), (17, 21, 14), (18, 18, 18), (16, 20, 15), (19, 17, 16), (21, 16, 17))
NEW_SHAPES = ((18, 19, 15), (20, 16, 18))


def write_model_folder(folder: Path) -> Path:
    """A trained-model folder as nnU-Net writes it (plans, dataset, one fold's checkpoint) for the tiny 3D network
    of ``make_plans``, with fixed random weights: no training needed."""
    plans = make_plans()
    cm = PlansManager(plans).get_configuration("cfg")
    torch.manual_seed(7)
    net = get_network_from_plans(cm.network_arch_class_name, cm.network_arch_init_kwargs,
                                 cm.network_arch_init_kwargs_req_import, 1, 3, allow_init=True,
                                 deep_supervision=False)
    with torch.no_grad():  # sharper logits than the default initialisation
        net.decoder.seg_layers[-1].weight.mul_(4.0)
    (folder / "fold_0").mkdir(parents=True)
    (folder / "plans.json").write_text(json.dumps(plans))
    (folder / "dataset.json").write_text(json.dumps(DATASET_JSON))
    torch.save({"network_weights": net.state_dict(), "trainer_name": "nnUNetTrainer",
                "init_args": {"configuration": "cfg"}, "inference_allowed_mirroring_axes": (0, 1, 2)},
               folder / "fold_0" / "checkpoint_final.pth")
    return folder


def write_labels(images: Path, labels: Path) -> None:
    """Labels 0 / 1 / 2 in the geometry of each image: two nested boxes."""
    labels.mkdir()
    for img_file in sorted(images.glob("*_0000.nii.gz")):
        img = nib.load(img_file)
        lab = np.zeros(img.shape, dtype=np.int16)
        s = [slice(n // 4, n - n // 4) for n in img.shape]
        lab[tuple(s)] = 1
        lab[tuple(slice(n // 3, n - n // 3) for n in img.shape)] = 2
        nib.save(nib.Nifti1Image(lab, img.affine), labels / img_file.name.replace("_0000", ""))


def predict(images: Path, out: Path, model: Path, *extra: str) -> None:
    argv = ["nnunet-predict", "-i", str(images), "-o", str(out), "-m", str(model), "-f", "0", "-device", "cpu",
            "--sources", "mirroring", "-npp", "0", "-nps", "0", "--disable_progress_bar", *extra]
    assert cli.main(argv) == 0


def _one_line_exit_2(capsys, argv: list[str], *words: str) -> None:
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err


@pytest.mark.slow
def test_nnunet_predictions_end_to_end(tmp_path, capsys):
    model = write_model_folder(tmp_path / "model")
    cal_in, new_in = tmp_path / "cal_images", tmp_path / "new_images"
    write_inputs(cal_in, CALIBRATION_SHAPES)
    write_inputs(new_in, NEW_SHAPES)
    for p in new_in.glob("case*_0000.nii.gz"):  # other ids than the calibration cases
        p.rename(new_in / p.name.replace("case", "new"))
    write_labels(cal_in, tmp_path / "labels")
    predict(cal_in, tmp_path / "pred_cal", model, "--save_probabilities")
    predict(new_in, tmp_path / "pred_new", model, "--save_probabilities")

    ev = tmp_path / "ev"
    argv = ["evaluate", "-l", str(tmp_path / "labels"), "-p", str(tmp_path / "pred_cal"), "--layout", "nnunet",
            "-o", str(ev), "--no-spatial", "-q", "--conformal", "outer:fnr=0.3", "--conformal", "inner:fp=0.3",
            "--conformal-strata", "2", "--conformal-stratify-by", "mutual_information_mean"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(argv) == 0
    doc = ConformalRuleFile.load(ev / CONFORMAL_RULE_FILE)
    assert doc.fingerprint["producer"] == "nnunet-predict", doc.fingerprint
    assert doc.strata.map_source == "file" and doc.strata.counts == (3, 3)  # uncertainty/<case>_<measure> maps
    assert doc.first.names == ("0", "1", "2")

    out = tmp_path / "masks"
    assert cli.main(["conformal", "-p", str(tmp_path / "pred_new"), "--rule", str(ev / CONFORMAL_RULE_FILE), "-o",
                     str(out), "--layout", "nnunet", "-q"]) == 0
    summary = json.loads((out / "conformal.json").read_text())
    assert summary["fingerprint"]["status"] == "match" and summary["n_cases"] == 2
    rows = {r["case"]: r for r in csv.DictReader((out / "conformal.csv").open())}
    for cid in ("new0", "new1"):
        seg_img = nib.load(tmp_path / "pred_new" / f"{cid}.nii.gz")
        seg = np.asarray(seg_img.dataobj)
        probs, _ = read_probabilities(tmp_path / "pred_new" / f"{cid}.npz")  # the .npz axes reversed to the NIfTI's
        spacing = np.sqrt((seg_img.affine[:3, :3] ** 2).sum(axis=0))
        mi = nib.load(tmp_path / "pred_new" / "uncertainty" / f"{cid}_mutual_information.nii.gz")
        score = float(np.asarray(mi.dataobj, dtype=np.float64).mean())
        assert float(rows[cid]["mutual_information_mean"]) == pytest.approx(score, rel=1e-6)
        stratum = doc.strata.stratum(float(rows[cid]["mutual_information_mean"]))
        assert int(rows[cid]["stratum"]) == stratum
        raw = {s: r.apply(probs, pred=seg, spacing=spacing, score=float(rows[cid]["mutual_information_mean"]))[1:]
               for s, r in doc.rules.items()}
        for side in ("outer", "inner"):
            img = nib.load(out / f"{cid}_{side}.nii.gz")
            assert img.shape == (*seg.shape, 2)  # one channel per foreground class, the prediction's grid
            np.testing.assert_allclose(img.affine, seg_img.affine, atol=1e-6)
            got = np.moveaxis(np.asarray(img.dataobj), -1, 0).astype(bool)
            expected = raw["outer"] | raw["inner"] if side == "outer" else raw["inner"]
            np.testing.assert_array_equal(got, expected)
        assert float(rows[cid]["predicted_ml_1"]) == pytest.approx((seg == 1).sum() * np.prod(spacing) / 1000)

    # predictions saved without --save_probabilities: refused before any work, naming the file and the flag
    predict(new_in, tmp_path / "pred_noprobs", model)
    assert not list((tmp_path / "pred_noprobs").glob("*.npz"))
    _one_line_exit_2(capsys, ["conformal", "-p", str(tmp_path / "pred_noprobs"), "--rule",
                              str(ev / CONFORMAL_RULE_FILE), "-o", str(tmp_path / "m2"), "--layout", "nnunet", "-q"],
                     "new0.npz is missing", "--save_probabilities")
    assert not (tmp_path / "m2").exists()
    cal_noprobs = tmp_path / "cal_noprobs"
    shutil.copytree(tmp_path / "pred_cal", cal_noprobs, ignore=shutil.ignore_patterns("*.npz"))
    _one_line_exit_2(capsys, ["evaluate", "-l", str(tmp_path / "labels"), "-p", str(cal_noprobs), "--layout",
                              "nnunet", "-o", str(tmp_path / "ev2"), "--no-spatial", "-q", "--conformal",
                              "outer:fnr=0.3"], "6 of 6 case(s) have no probabilities", "case0.npz is missing",
                     "--save_probabilities")
    assert not (tmp_path / "ev2").exists() or not list((tmp_path / "ev2").rglob("*.*"))
