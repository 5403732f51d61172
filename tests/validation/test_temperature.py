"""Smoke test of validation study 2 (docs/validation/study2_temperature.py, Kock et al.): the ``--tiny`` run writes its
JSON, markdown and reliability diagrams, and every reported number is finite."""

from __future__ import annotations

import json
import math

import pytest

from tests.validation._studies import load_study

pytest.importorskip("nilearn")



def _load():
    return load_study("study2_temperature")


def _finite_metrics(block: dict) -> None:
    for name in ("t", "nll", "brier", "ece", "ece_default", "all_label_ece", "all_label_ece_default"):
        assert math.isfinite(block[name]), name
    assert block["t"] > 0
    assert 0 <= block["ece"] <= 1 and 0 <= block["all_label_ece"] <= 1 and 0 <= block["brier"] <= 2


def test_splits_are_disjoint_and_cover_the_right_hemisphere():
    import numpy as np

    study = _load()
    right = np.zeros((4, 3, 20), dtype=bool)
    right[2:] = True
    splits = study.make_splits({"left": ~right, "right": right}, slab=4)
    assert not (splits["cal"] & splits["eval"]).any()
    assert ((splits["cal"] | splits["eval"]) == right).all()
    assert not (splits["train"] & right).any()
    # slabs of 4 axial slices alternate: slices 0-3 calibration, 4-7 evaluation
    assert splits["cal"][2, 0, :4].all() and splits["eval"][2, 0, 4:8].all()
    with pytest.raises(ValueError, match="slab"):
        study.make_splits({"left": ~right, "right": right}, slab=0)
    with pytest.raises(ValueError, match="empty"):
        study.make_splits({"left": ~right, "right": right}, slab=40)


def test_paper_table_is_transcribed_in_groups_of_three():
    study = _load()
    rows = study.PAPER_TABLE2
    assert len(rows) == 27
    for i in range(0, len(rows), 3):
        assert [r[2] for r in rows[i : i + 3]] == ["none", "NLL", "ECE"]
        assert rows[i][3] is None and rows[i + 1][3] and rows[i + 2][3]
    assert study.paper_t_range("Dice") == (1.852, 5.199)
    assert study.paper_t_range("CCE") == (0.733, 1.562)


@pytest.mark.slow
def test_tiny_run_writes_outputs(tmp_path):
    study = _load()
    result = study.main(["--tiny", "--output", str(tmp_path), "--seed", "1"])
    files = {p.name for p in tmp_path.iterdir()}
    expected = {"study2.json", "study2.md"} | {f"study2_reliability_{k}.png" for k in study.LOSSES}
    assert expected <= files
    assert not any(name.endswith(".partial") or name.startswith(".") for name in files)
    for k in study.LOSSES:
        assert (tmp_path / f"study2_reliability_{k}.png").stat().st_size > 10_000
    saved = json.loads((tmp_path / "study2.json").read_text())
    assert saved["config"]["tiny"] is True and saved["config"]["seed"] == 1
    assert set(saved["models"]) == set(study.LOSSES)
    for m in saved["models"].values():
        for split in ("heldout", "train_hemisphere"):
            for loss in ("nll", "ece"):
                assert math.isfinite(m["temperatures"][split][loss]["t"])
        for block in m["clean"].values():
            _finite_metrics(block)
        assert m["clean"]["none"]["t"] == 1.0
        assert m["clean"]["nll"]["t"] == m["temperatures"]["heldout"]["nll"]["t"]
        assert m["clean"]["ece_train"]["t"] == m["temperatures"]["train_hemisphere"]["ece"]["t"]
        assert set(m["shifts"]) == {"noise"}
        # the Dice of the training record, added from the study's own logits (train_tissue_model(evaluate=False))
        for side in ("dice_right_heldout", "dice_left_train"):
            assert len(m["train_record"][side]) == 2 and all(0 <= d <= 1 for d in m["train_record"][side].values())
        for block in ("none", "nll", "oracle"):
            _finite_metrics(m["shifts"]["noise"][block])
    md = (tmp_path / "study2.md").read_text()
    assert "| Dice | none |" in md and "paper KiTS t" in md and "--tiny" in md
    assert all(s in md for s in result["agreement"].values())
    assert result["runtime_seconds"] > 0


def test_training_loss_argument_is_validated():
    from monai_unc.data.training import TRAINING_LOSSES, train_tissue_model

    assert TRAINING_LOSSES == ("dice_ce", "dice", "ce")
    with pytest.raises(ValueError, match="loss"):
        train_tissue_model(None, iterations=1, loss="focal", progress=False)


def test_hemisphere_dice_of_given_logits_is_that_of_the_network():
    """``hemisphere_dice(..., logits=)`` (what the studies pass: the logits they computed anyway) gives the Dice of
    the network's own prediction; ``train_tissue_model(evaluate=False)`` is refused with a path to save the record to
    (it would lack the Dice) and with a non-bool."""
    import numpy as np
    import torch

    from monai_unc.data.training import hemisphere_dice, train_tissue_model

    study = _load()
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    net = torch.nn.Conv3d(1, 3, 3, padding=1)
    left = np.zeros((12, 10, 8), bool)
    left[:6] = True
    data = {"image": rng.random((1, 12, 10, 8)).astype(np.float32), "label": rng.integers(0, 3, (1, 12, 10, 8)),
            "left": left, "right": ~left}
    z = study.predict_logits(net, data["image"])
    want = hemisphere_dice(net, data)
    assert hemisphere_dice(torch.nn.Identity(), data, logits=z) == want  # the network is not run
    assert want["left"] != hemisphere_dice(net, data, logits=-z)["left"]  # the logits are what is scored
    for bad in (z[0], z[:, :5], z.numpy(), z[:2], torch.cat([z, z[:1]])):  # wrong shapes, a non-tensor, 2 / 4 classes
        with pytest.raises(ValueError, match="logits"):
            hemisphere_dice(net, data, logits=bad)
    # logits that still need their gradient are scored as they are
    assert hemisphere_dice(net, data, logits=z.clone().requires_grad_()) == want
    with pytest.raises(ValueError, match="evaluate=False"):
        train_tissue_model("w.pt", iterations=1, progress=False, evaluate=False)
    with pytest.raises(TypeError, match="evaluate"):
        train_tissue_model(None, iterations=1, progress=False, evaluate="no")
