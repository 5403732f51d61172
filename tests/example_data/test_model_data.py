"""The shipped example network's weights and their training record (data/model.py): the record's digest is the
weights' and a replaced file of weights is refused instead of being reported with the record's numbers."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch

import monai_unc.data.model as model
from monai_unc.data import build_example_network, example_weights_path, example_weights_record, load_example_model


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_shipped_record_names_the_shipped_weights():
    record = example_weights_record()
    assert record["weights_sha256"] == _sha256(example_weights_path())
    assert set(record["dice_right_heldout"]) == {"grey matter", "white matter"}


@pytest.fixture
def weights_copy(tmp_path, monkeypatch):
    shutil.copy(example_weights_path(), tmp_path / "mni152_tissue_unet.pt")
    shutil.copy(example_weights_path().with_suffix(".json"), tmp_path / "mni152_tissue_unet.json")
    monkeypatch.setattr(model, "WEIGHTS_DIR", tmp_path)
    return tmp_path / "mni152_tissue_unet.pt"


def test_replaced_weights_are_refused(weights_copy):
    """Regression: the record carried no digest of the weights, so weights replaced after training (another run,
    a copy from elsewhere) loaded silently with the record's held-out Dice of the shipped ones."""
    from monai_unc.workflows.models import load_network

    load_example_model()  # the copy itself is fine
    torch.manual_seed(1)
    torch.save(build_example_network().state_dict(), weights_copy)  # same architecture, other weights
    with pytest.raises(ValueError, match="is not the network its training record mni152_tissue_unet.json describes"):
        load_example_model()
    with pytest.raises(ValueError, match="training record"):
        load_network(model="example")


def test_a_broken_record_is_named(weights_copy):
    weights_copy.with_suffix(".json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        example_weights_record()
    weights_copy.with_suffix(".json").write_text("{broken")
    with pytest.raises(ValueError, match="not valid JSON"):
        example_weights_record()


def test_save_trained_network_records_the_digest(tmp_path):
    path = model.save_trained_network(build_example_network(), {"seed": 3}, tmp_path / "net.pt")
    record = json.loads(path.with_suffix(".json").read_text())
    assert record == {"seed": 3, "weights_sha256": _sha256(path)}
    assert example_weights_record(path) == record
