"""``monai-unc evaluate`` and the spatial metric classes (what the ignite handlers wrap) give the same BUC, BA-ECE and
SPACE on one case when the classes get the map on the command's scale (entropy divided by ``log C``), and a map in
nats gives a different BA-ECE / SPACE without a warning for two classes (documented in
:mod:`monai_unc.handlers.spatial` and docs/monai_integration.md)."""

from __future__ import annotations

import math
import warnings

import nibabel as nib
import numpy as np
import pytest
import torch

from monai_unc.data import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, evaluate_case
from monai_unc.io import CaseFiles
from monai_unc.metrics import (
    BoundaryAwareECEMetric,
    BoundaryUncertaintyConcentrationMetric,
    SpatialCalibrationErrorMetric,
)


def _read(path):
    return np.asarray(nib.load(path).dataobj)


@pytest.fixture(scope="module")
def toy_case(tmp_path_factory):
    paths = write_toy_cohort(tmp_path_factory.mktemp("toy"), n_cases=1, shape=(16, 14, 12))
    pred = paths["predictions"]
    files = CaseFiles("toy000", paths["labels"] / "toy000.nii.gz", seg=pred / "toy000_seg.nii.gz",
                      probs=pred / "toy000_probs.nii.gz",
                      maps={"predictive_entropy": pred / "toy000_predictive_entropy.nii.gz"})
    spacing = tuple(float(s) for s in nib.load(files.label).header.get_zooms()[:3])
    return files, spacing


def test_metric_classes_match_evaluate_on_the_unit_scale(toy_case):
    files, spacing = toy_case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        row = evaluate_case(files, EvaluationConfig()).row
    label = torch.as_tensor(_read(files.label).astype(np.int64))[None, None]
    seg = torch.as_tensor(_read(files.seg).astype(np.int64))[None, None]
    pe = torch.as_tensor(_read(files.maps["predictive_entropy"]).astype(np.float64))[None, None]
    unit = pe / math.log(2)
    for metric, column, u in ((BoundaryUncertaintyConcentrationMetric, "buc", pe),
                              (BoundaryAwareECEMetric, "ba_ece", unit),
                              (SpatialCalibrationErrorMetric, "space", unit)):
        value = float(metric(spacing=spacing)(y_pred=seg, y=label, uncertainty=u)[0, 0])
        assert value == pytest.approx(row[column], rel=1e-6, abs=1e-9), column  # the map is float32 on disk
    # the map in nats: another BA-ECE and SPACE (BUC is scale-free), and nothing warns for two classes
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        nats = {c: float(m(spacing=spacing)(y_pred=seg, y=label, uncertainty=pe)[0, 0])
                for m, c in ((BoundaryAwareECEMetric, "ba_ece"), (SpatialCalibrationErrorMetric, "space"))}
    assert all(abs(nats[c] - row[c]) > 1e-3 for c in nats)
