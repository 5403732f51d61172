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


def _record(path):
    """The record's name: the weights' name with ``.json`` appended."""
    return path.with_name(path.name + ".json")


def test_the_shipped_record_names_the_shipped_weights():
    record = example_weights_record()
    assert record["weights_sha256"] == _sha256(example_weights_path())
    assert set(record["dice_right_heldout"]) == {"grey matter", "white matter"}


@pytest.fixture
def weights_copy(tmp_path, monkeypatch):
    shutil.copy(example_weights_path(), tmp_path / "mni152_tissue_unet.pt")
    shutil.copy(_record(example_weights_path()), tmp_path / "mni152_tissue_unet.pt.json")
    monkeypatch.setattr(model, "WEIGHTS_DIR", tmp_path)
    return tmp_path / "mni152_tissue_unet.pt"


def test_replaced_weights_are_refused(weights_copy):
    """Regression: the record carried no digest of the weights, so weights replaced after training (another run,
    a copy from elsewhere) loaded silently with the record's held-out Dice of the shipped ones."""
    from monai_unc.workflows.models import load_network

    load_example_model()  # the copy itself is fine
    torch.manual_seed(1)
    torch.save(build_example_network().state_dict(), weights_copy)  # same architecture, other weights
    with pytest.raises(ValueError, match="is not the network its training record mni152_tissue_unet.pt.json describes"):
        load_example_model()
    with pytest.raises(ValueError, match="training record"):
        load_network(model="example")


def test_a_broken_record_is_named(weights_copy):
    _record(weights_copy).write_text("[1, 2]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        example_weights_record()
    _record(weights_copy).write_text("{broken")
    with pytest.raises(ValueError, match="not valid JSON"):
        example_weights_record()


def test_save_trained_network_records_the_digest(tmp_path):
    path = model.save_trained_network(build_example_network(), {"seed": 3}, tmp_path / "net.pt")
    record = json.loads(_record(path).read_text())
    assert record == {"seed": 3, "weights_sha256": _sha256(path)}
    assert example_weights_record(path) == record
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.pt", "net.pt.json"]


@pytest.mark.parametrize("names", [("ssn_lr0.001", "ssn_lr0.01"), ("model.pt", "model.pth"), ("m", "m.pt")])
def test_every_file_of_weights_has_a_record_of_its_own(tmp_path, names):
    """Found by review: the record was ``path.with_suffix(".json")``, so ``ssn_lr0.001`` and ``ssn_lr0.01`` (or
    ``model.pt`` and ``model.pth``) shared one record: the second save overwrote the first's, and the first weights
    were refused (another digest) or lost their settings. The record is now ``<weights>.json``."""
    paths = [tmp_path / n for n in names]
    for seed, path in enumerate(paths):
        torch.manual_seed(seed)
        model.save_trained_network(torch.nn.Linear(2, 2), {"seed": seed}, path)
    for seed, path in enumerate(paths):
        assert json.loads(_record(path).read_text())["seed"] == seed
        assert example_weights_record(path)["seed"] == seed
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, *(n + ".json" for n in names)])


def test_a_record_of_earlier_versions_is_read_when_it_is_the_weights(tmp_path):
    """A record written by earlier versions (``model.json`` beside ``model.pt``) is still read when the weights have
    no ``model.pt.json``, but only when it records their digest: the old name was shared, so a record there of
    other weights is refused (as before) and one that records no digest is not taken for theirs."""
    path = tmp_path / "model.pt"
    model.save_trained_network(torch.nn.Linear(2, 2), {"seed": 7}, path)
    legacy = tmp_path / "model.json"
    _record(path).rename(legacy)
    assert example_weights_record(path)["seed"] == 7
    # the record of the weights' own name wins over the old name
    _record(path).write_text(json.dumps({"seed": 8, "weights_sha256": _sha256(path)}))
    assert example_weights_record(path)["seed"] == 8
    _record(path).unlink()
    # the old name holds the record of other weights (model.pth saved by an earlier version after model.pt)
    legacy.write_text(json.dumps({"seed": 9, "weights_sha256": "0" * 64}))
    with pytest.raises(ValueError, match=r"training record model.json \(a record of earlier versions"):
        example_weights_record(path)
    legacy.write_text(json.dumps({"seed": 9}))  # no digest: whose record it is cannot be told
    assert example_weights_record(path) == {}
    legacy.unlink()
    assert example_weights_record(path) == {}
