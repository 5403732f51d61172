"""The ignite engine and handlers after a plain install, without pytorch-ignite (found by the newcomer review).

pytorch-ignite is no default dependency; ``UncertaintyEvaluator`` and every ``monai_unc.handlers`` class failed with
MONAI's ``OptionalImportError`` ("from ignite.metrics import Metric (No module named 'ignite')"), naming no extra,
so the examples of docs/monai_integration.md did not run and said nothing of what to install. Each now refuses in
one line that names the ``ignite`` extra, which pyproject.toml declares.
"""

from __future__ import annotations

import sys

import pytest
import torch
from monai.data import DataLoader, Dataset
from monai.networks.nets import UNet

from monai_unc.engines import CaseScoresHandler, UncertaintyEvaluator
from monai_unc.handlers import (
    BoundaryAwareECE,
    BoundaryUncertaintyConcentration,
    CalibrationHandler,
    GeneralizedEnergyDistance,
    NormalizedCrossCorrelation,
    QUBraTS,
    SpatialCalibrationError,
)
from monai_unc.inferers import MCDropoutInferer
from tests._paths import ROOT

EXTRA = "pip install 'monai-unc[ignite]'"


@pytest.fixture
def no_ignite(monkeypatch):
    """``import ignite`` fails as in an environment without pytorch-ignite."""
    monkeypatch.setitem(sys.modules, "ignite", None)


def _evaluator() -> UncertaintyEvaluator:
    net = UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=(4, 8), strides=(2,), dropout=0.2)
    return UncertaintyEvaluator(device=torch.device("cpu"), val_data_loader=DataLoader(Dataset([]), batch_size=1),
                                network=net, inferer=MCDropoutInferer(num_samples=2))


BUILDERS = {
    "UncertaintyEvaluator": _evaluator,
    "CaseScoresHandler": lambda: CaseScoresHandler("mutual_information_mean"),
    "CalibrationHandler": lambda: CalibrationHandler(num_classes=2),
    "BoundaryUncertaintyConcentration": BoundaryUncertaintyConcentration,
    "BoundaryAwareECE": BoundaryAwareECE,
    "SpatialCalibrationError": SpatialCalibrationError,
    "GeneralizedEnergyDistance": GeneralizedEnergyDistance,
    "NormalizedCrossCorrelation": NormalizedCrossCorrelation,
    "QUBraTS": QUBraTS,
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_without_ignite_each_engine_and_handler_names_the_extra(name, no_ignite):
    with pytest.raises(ImportError) as caught:
        BUILDERS[name]()
    text = str(caught.value)
    assert len(text.splitlines()) == 1, text
    assert name in text and "pytorch-ignite" in text and text.endswith(EXTRA), text


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_with_ignite_each_engine_and_handler_builds(name):
    assert BUILDERS[name]() is not None


def test_the_ignite_extra_is_declared():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.replace(" ", "").startswith("pytorch-ignite>=") for d in extras["ignite"])
