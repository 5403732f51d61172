"""Stock nnU-Net region predictions: the channel order of the ``dataset.json`` beside them is the record.

``nnUNetv2_predict --save_probabilities`` of a region-based model writes ``<case>.npz`` with one sigmoid channel per
region in the order of the ``labels`` of its ``dataset.json`` (nnU-Net's BraTS datasets: whole tumour, tumour core,
enhancing tumour) and copies that ``dataset.json`` into the output folder, but no ``uncertainty_config.json``.
``evaluate --layout nnunet --regions brats`` (TC, WT, ET) read such a folder without any check: the Dice (from the
label map) was right while every probability column of TC was computed from the WT channel (found by hostile review:
``nll_TC`` 0.708 instead of 0.108 on the case below). The folder's ``dataset.json`` is now read as its record.
"""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.cli import main
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.io import nnunet_dataset_regions
from monai_unc.io.provenance import prediction_regions

SHAPE = (14, 13, 12)
#: nnU-Net's order (whole tumour, tumour core, enhancing tumour) in the BraTS 2018-2022 labels
NNUNET_REGIONS = {"whole tumor": [1, 2, 4], "tumor core": [1, 4], "enhancing tumor": [4]}


def _write(root: Path, dataset_json: dict | None) -> tuple[Path, Path, dict[str, tuple[np.ndarray, np.ndarray]]]:
    labels, pred = root / "labels", root / "pred"
    labels.mkdir(parents=True)
    pred.mkdir()
    if dataset_json is not None:
        (pred / "dataset.json").write_text(json.dumps(dataset_json))
    rng = np.random.default_rng(0)
    zz, yy, xx = np.indices(SHAPE)
    d = np.sqrt((zz - 7) ** 2 + (yy - 6) ** 2 + (xx - 6) ** 2)
    data = {}
    for i in range(3):
        lab = np.select([d < 2, d < 3.5, d < 5.5], [1, 4, 2], 0).astype(np.uint8)
        masks = np.stack([np.isin(lab, v) for v in NNUNET_REGIONS.values()])  # (R, X, Y, Z), nnU-Net's order
        # well separated regions: each region's own probabilities are sharp (0.85 .. 0.95 inside, 0.05 .. 0.15 out)
        p = np.where(masks, rng.uniform(0.85, 0.95, masks.shape), rng.uniform(0.05, 0.15, masks.shape))
        p = p.astype(np.float32)
        seg = np.zeros(SHAPE, np.uint8)  # nnU-Net's conversion: regions_class_order (2, 1, 4) over the regions
        for r, value in enumerate((2, 1, 4)):
            seg[p[r] > 0.5] = value
        nib.save(nib.Nifti1Image(lab, np.eye(4)), str(labels / f"c{i}.nii.gz"))
        nib.save(nib.Nifti1Image(seg, np.eye(4)), str(pred / f"c{i}.nii.gz"))
        np.savez_compressed(pred / f"c{i}.npz", probabilities=p.transpose(0, 3, 2, 1))  # (R, z, y, x)
        data[f"c{i}"] = (lab, p)
    return labels, pred, data


DATASET = {"labels": {"background": 0, **NNUNET_REGIONS}, "regions_class_order": [2, 1, 4], "file_ending": ".nii.gz",
           "channel_names": {"0": "T1"}, "numTraining": 3}


def test_stock_nnunet_region_order_other_than_the_spec_is_refused(tmp_path, capsys):
    labels, pred, _ = _write(tmp_path, DATASET)
    out = tmp_path / "eval"
    assert main(["evaluate", "-l", str(labels), "-p", str(pred), "-o", str(out), "--layout", "nnunet",
                 "--regions", "brats", "-q"]) == 2
    err = capsys.readouterr().err
    assert "were made with the regions" in err and "whole tumor" in err
    assert len(err.strip().splitlines()) == 1
    assert not (out / "metrics.csv").exists()


def test_stock_nnunet_regions_in_their_order_are_scored_per_channel(tmp_path):
    labels, pred, data = _write(tmp_path, DATASET)
    spec = {"WT": [1, 2, 4], "TC": [1, 4], "ET": [4]}  # the dataset's channel order, other names
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, _, paths = run_evaluate(labels, pred, tmp_path / "eval", EvaluationConfig(regions=spec, spatial=False),
                                   layout="nnunet")
    with open(tmp_path / "eval" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    for row in rows:
        lab, p = data[row["case"]]
        for r, (name, values) in enumerate(spec.items()):
            g = np.isin(lab, values)
            q = p[r].astype(np.float64)
            nll = -np.mean(np.where(g, np.log(q), np.log1p(-q)))
            assert float(row[f"nll_{name}"]) == pytest.approx(nll, rel=1e-6)


def test_without_dataset_json_nothing_is_recorded(tmp_path):
    _, pred, _ = _write(tmp_path, None)
    assert prediction_regions(pred, "nnunet") is None
    (pred / "dataset.json").write_text(json.dumps({"labels": {"background": 0, "tumour": 1}}))
    assert prediction_regions(pred, "nnunet") is None  # a label-based dataset without a monai-unc record
    (pred / "uncertainty_config.json").write_text(json.dumps({"measures": ["predictive_entropy"]}))
    assert prediction_regions(pred, "nnunet") is False
    (pred / "dataset.json").write_text(json.dumps(DATASET))  # an earlier record without regions
    assert prediction_regions(pred, "nnunet") == NNUNET_REGIONS


@pytest.mark.parametrize("labels", [["a"], {"a": "1"}, {"a": [1, "x"]}, {"a": []}, {"a": True}, {"a": 1.5}])
def test_dataset_regions_refuse_malformed_labels(labels):
    with pytest.raises(ValueError, match=r"dataset\.json"):
        nnunet_dataset_regions({"labels": labels})
    with pytest.raises(ValueError, match="JSON object"):
        nnunet_dataset_regions([1, 2])


def test_dataset_regions_as_nnunet_orders_its_channels():
    doc = {"labels": {"background": 0, "whole": [1, 2, 3], "ignore": 4, "core": (2, 3), "enh": 3}}
    assert nnunet_dataset_regions(doc) == {"whole": [1, 2, 3], "core": [2, 3], "enh": [3]}
    assert nnunet_dataset_regions({"labels": {"background": 0, "a": 1, "b": 2}}) == {}
    assert nnunet_dataset_regions({}) == {}


def test_dataset_regions_read_whole_floats_as_nnunet_does():
    """Found by hostile review: ``"whole tumor": [1.0, 2.0, 3.0]`` (JSON numbers written as floats), which nnU-Net's
    ``LabelManager`` reads with ``int()`` and ``region_definitions`` read before it delegated here, was refused."""
    doc = {"labels": {"background": 0.0, "whole tumor": [1.0, 2.0, 3.0], "tumor core": [2, 3.0],
                      "enhancing tumor": 3.0}}
    expected = {"whole tumor": [1, 2, 3], "tumor core": [2, 3], "enhancing tumor": [3]}
    assert nnunet_dataset_regions(doc) == expected
    assert all(type(v) is int for vals in nnunet_dataset_regions(doc).values() for v in vals)
    for bad in (2.5, float("nan"), float("inf"), "3", True):
        with pytest.raises(ValueError, match="must be an integer"):
            nnunet_dataset_regions({"labels": {"background": 0, "a": [1, 2], "b": bad}})
    pytest.importorskip("nnunetv2")  # the nnunet extra: region_definitions (nnunet-predict, nnunet-calibrate)
    from monai_unc.nnunet.export import region_definitions

    assert region_definitions(doc) == expected
