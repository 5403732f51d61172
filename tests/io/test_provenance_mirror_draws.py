"""A rule's prediction fingerprint of ``nnunet-predict`` folders records how the mirrors of a stochastic sample drew.

Since the mirrors of an MC dropout / Rate-In / SSN sample share its random draws (``uncertainty_config.json``:
``"mirror_draws": "shared"``), such predictions are not made like those of earlier versions, whose mirrors drew one
mask each (MC dropout's MI about half as large, docs/nnunet.md). The fingerprint left the field out, so a triage or
conformal rule certified on the earlier predictions matched the new ones and applied its MI threshold to MI about
twice as large, without a word (found by hostile review)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monai_unc.io.provenance import (
    FingerprintMismatch,
    check_prediction_fingerprint,
    compare_fingerprints,
    prediction_fingerprint,
)

_CONFIG = {"uncertainty_sources": ["dropout"], "num_samples": 8, "samples_per_voxel": 8, "dropout_p": 0.1,
           "rate_in": {}, "posthoc_dropout_after": None, "measures": ["mutual_information"],
           "segmentation_from": "logits", "window_disagreement": "separate", "seed": 0, "folds": 1,
           "mirror_axes": [0, 1, 2], "trainer_name": "nnUNetTrainer", "tile_step_size": 0.5,
           "mi_meaning": "epistemic"}


def _folder(root: Path, **extra: str) -> Path:
    """An ``nnunet-predict`` folder's records (one case), with ``extra`` in its config and case record."""
    cfg = {**_CONFIG, **extra}
    (root / "uncertainty").mkdir(parents=True)
    (root / "uncertainty_config.json").write_text(json.dumps(cfg))
    (root / "uncertainty" / "c1.json").write_text(json.dumps({"num_samples": 8, "mi_meaning": "epistemic",
                                                              "settings": cfg}))
    return root


def test_a_rule_of_per_mirror_draws_does_not_match_predictions_with_shared_draws(tmp_path):
    before = prediction_fingerprint(_folder(tmp_path / "before"), "nnunet")
    now_folder = _folder(tmp_path / "now", mirror_draws="shared")
    now = prediction_fingerprint(now_folder, "nnunet")
    assert now["mirror_draws"] == "shared" and "mirror_draws" not in before
    assert compare_fingerprints(before, now) == ("mismatch", [("mirror_draws", None, "shared")])
    with pytest.raises(FingerprintMismatch, match="mirror_draws"):
        check_prediction_fingerprint(before, None, now_folder, "nnunet", ["c1"])
    # the same draws on both sides still match: rules of either kind keep working on predictions of their kind
    assert compare_fingerprints(now, prediction_fingerprint(_folder(tmp_path / "now2", mirror_draws="shared"),
                                                            "nnunet")) == ("match", [])
    assert compare_fingerprints(before, prediction_fingerprint(_folder(tmp_path / "before2"), "nnunet")) == (
        "match", [])


def test_a_rule_of_per_fold_ssn_draws_does_not_match_predictions_with_shared_fold_draws(tmp_path):
    """The averaged folds of an SSN sample share its latent draw since review 66 (``"fold_draws": "shared"``);
    earlier each fold drew its own and the aleatoric MI shrank with the number of folds."""
    ssn = {"uncertainty_sources": ["ssn"], "folds": 5, "mi_meaning": "aleatoric"}
    before = prediction_fingerprint(_folder(tmp_path / "before", **ssn), "nnunet")
    now = prediction_fingerprint(_folder(tmp_path / "now", fold_draws="shared", **ssn), "nnunet")
    assert compare_fingerprints(before, now) == ("mismatch", [("fold_draws", None, "shared")])
