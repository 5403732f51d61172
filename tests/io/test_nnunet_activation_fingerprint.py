"""Review 64: the fingerprint of ``nnunet-predict`` records the model's activation (sigmoid per region for a
region-based model, else softmax), so a rule certified on region maps says ``sigmoid`` and is refused on softmax
maps (and the reverse); records written before the field still match as the activation their regions imply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monai_unc.io.provenance import FingerprintMismatch, check_prediction_fingerprint, prediction_fingerprint

BRATS = {"TC": [1, 4], "WT": [1, 2, 4], "ET": [4]}


def _nnunet_folder(folder: Path, regions: dict | None) -> Path:
    folder.mkdir(parents=True)
    cfg = {"trainer_name": "nnUNetTrainer", "folds": [0], "measures": ["predictive_entropy"]}
    if regions is not None:
        cfg["regions"] = regions
    (folder / "uncertainty_config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize("regions, activation", [(BRATS, "sigmoid"), (None, "softmax")])
def test_nnunet_fingerprint_records_the_activation(regions, activation, tmp_path):
    """It recorded none: a region rule's fingerprint said ``activation: null``."""
    fp = prediction_fingerprint(_nnunet_folder(tmp_path / "p", regions), "nnunet")
    assert fp["activation"] == activation


def test_a_rule_of_region_maps_is_refused_on_softmax_maps_by_its_activation(tmp_path):
    region_fp = prediction_fingerprint(_nnunet_folder(tmp_path / "regions", BRATS), "nnunet")
    softmax = _nnunet_folder(tmp_path / "softmax", None)
    with pytest.raises(FingerprintMismatch) as err:
        check_prediction_fingerprint(region_fp, BRATS, softmax, "nnunet", [])
    assert "activation" in {k for k, _, _ in err.value.differences}
    # and the reverse: a softmax rule on region maps
    softmax_fp = prediction_fingerprint(softmax, "nnunet")
    check = check_prediction_fingerprint(softmax_fp, None, tmp_path / "regions", "nnunet", [], allow_mismatch=True)
    assert {"field": "activation", "rule": "softmax", "predictions": "sigmoid"} in check["differences"]


@pytest.mark.parametrize("regions", [BRATS, None])
def test_a_rule_recorded_before_the_activation_still_matches(regions, tmp_path):
    folder = _nnunet_folder(tmp_path / "p", regions)
    old = {k: v for k, v in prediction_fingerprint(folder, "nnunet").items() if k != "activation"}
    assert check_prediction_fingerprint(old, regions, folder, "nnunet", [])["status"] == "match"
