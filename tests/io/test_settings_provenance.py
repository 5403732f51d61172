"""Recorded ``infer`` settings that differ in nothing but their spelling compare equal (io/provenance.py)."""

from __future__ import annotations

import json

import pytest

from monai_unc.io.provenance import check_finished_predictions, settings_as_compared
from monai_unc.workflows.infer import InferSettings, case_fingerprint

_BASE = dict(model="m", method="mcdropout+tta", samples=4, roi=[64], intensity="none", measures=["mutual_information"],
             seed=0, activation="softmax", checkpoints=[])


def _canonical(x):
    return json.dumps(x, sort_keys=True)


@pytest.mark.parametrize("python, cli", [
    (dict(overlap=0, tta_noise=0, dropout=0.1), dict(overlap=0.0, tta_noise=0.0, dropout=0.1)),
    (dict(overlap=0.5, tta_noise=1, dropout=0.1), dict(overlap=0.5, tta_noise=1.0, dropout=0.1)),
    (dict(overlap=0.25, ratein_target=1, method="ratein"), dict(overlap=0.25, ratein_target=1.0, method="ratein")),
])
def test_int_and_float_settings_record_one_fingerprint(tmp_path, python, cli):
    # found by hostile testing: infer_command(overlap=0) recorded 0 where `--overlap 0` records 0.0, so a resume from
    # the command line predicted every case again ("overlap 0 -> 0.0") and the finished folder was refused
    api = InferSettings(**{**_BASE, **python})
    cmd = InferSettings(**{**_BASE, **cli})
    assert _canonical(case_fingerprint(api)) == _canonical(case_fingerprint(cmd))
    (tmp_path / "infer.json").write_text(json.dumps({"settings": cmd.to_json()}))
    old = {**case_fingerprint(cmd), **python}  # the record of a case an earlier version wrote: the ints as given
    (tmp_path / "c1.json").write_text(json.dumps({"case": "c1", "method": old["method"], "num_samples": 4,
                                                  "mi_meaning": "epistemic", "fingerprint": old}))
    assert _canonical(settings_as_compared(old)) == _canonical(case_fingerprint(cmd))  # what a resume compares
    check_finished_predictions(tmp_path, "monai-unc", ["c1"])  # one run: no ValueError


def test_other_values_still_differ(tmp_path):
    cmd = InferSettings(**{**_BASE, "overlap": 0.0, "dropout": 0.1})
    (tmp_path / "infer.json").write_text(json.dumps({"settings": cmd.to_json()}))
    other = {**cmd.to_json(), "overlap": 0.5}
    (tmp_path / "c1.json").write_text(json.dumps({"case": "c1", "method": "mcdropout+tta", "num_samples": 4,
                                                  "mi_meaning": "epistemic", "fingerprint": other}))
    with pytest.raises(ValueError, match="overlap 0.5 -> 0.0"):
        check_finished_predictions(tmp_path, "monai-unc", ["c1"])
    assert settings_as_compared({"method": "tta", "overlap": True})["overlap"] is True  # no bool made a float


def test_measures_in_another_order_are_the_same_run(tmp_path):
    # found by hostile testing: --measures in another order predicted every case of a resume again and a rule
    # certified on one order refused predictions made with the other
    from monai_unc.io.provenance import compare_fingerprints

    one = InferSettings(**{**_BASE, "overlap": 0.25, "measures": ["mutual_information", "predictive_entropy"]})
    other = InferSettings(**{**_BASE, "overlap": 0.25, "measures": ["predictive_entropy", "mutual_information"]})
    assert _canonical(case_fingerprint(one)) == _canonical(case_fingerprint(other))
    old = {**case_fingerprint(one), "measures": ["mutual_information", "predictive_entropy"]}  # an earlier record
    assert _canonical(settings_as_compared(old)) == _canonical(case_fingerprint(other))
    rule = {"producer": "monai-unc infer", "method": "mcdropout+tta", "measures": one.measures}
    assert compare_fingerprints(rule, {**rule, "measures": other.measures}) == ("match", [])
    # other maps, or a deprecated name of an old record, still differ
    assert compare_fingerprints(rule, {**rule, "measures": ["predictive_entropy"]})[0] == "mismatch"
    assert settings_as_compared({"method": "tta", "measures": ["max_softmax", "variance"]})["measures"] == [
        "max_softmax", "variance"]


def test_one_window_size_spelt_per_axis_is_the_same_run(tmp_path):
    # found by hostile testing: `infer --roi 64 64 64` after `--roi 64` (the same windows) predicted every case again,
    # and a folder holding cases of both was refused as made with two settings
    one = InferSettings(**{**_BASE, "overlap": 0.25, "dropout": 0.1, "roi": [64]})
    axes = InferSettings(**{**_BASE, "overlap": 0.25, "dropout": 0.1, "roi": [64, 64, 64]})
    assert _canonical(case_fingerprint(one)) == _canonical(case_fingerprint(axes))
    (tmp_path / "infer.json").write_text(json.dumps({"settings": axes.to_json()}))
    old = {**case_fingerprint(one), "roi": [64]}  # an earlier record of --roi 64
    (tmp_path / "c1.json").write_text(json.dumps({"case": "c1", "method": "mcdropout+tta", "num_samples": 4,
                                                  "mi_meaning": "epistemic", "fingerprint": old}))
    check_finished_predictions(tmp_path, "monai-unc", ["c1"])
    other = InferSettings(**{**_BASE, "overlap": 0.25, "dropout": 0.1, "roi": [64, 64, 32]})  # other windows differ
    assert _canonical(case_fingerprint(other)) != _canonical(case_fingerprint(one))
    assert settings_as_compared({"method": "tta", "roi": [64, 64, 32]})["roi"] == [64, 64, 32]


def test_nnunet_folds_detected_or_named_are_one_model():
    # found by hostile testing: folds nnU-Net detected (use_folds=None, fold_ids null) and the same folds named
    # (-f 0 1) mismatched although the digests of the same checkpoints, in the same order, agreed
    from monai_unc.io.provenance import compare_fingerprints

    w = [{"file": "plans.json", "sha256": "aa"}, {"file": "fold_0/checkpoint_final.pth", "sha256": "bb"},
         {"file": "fold_1/checkpoint_final.pth", "sha256": "cc"}]
    fp = {"producer": "nnunet-predict", "model_folder": "/m", "checkpoint": "checkpoint_final.pth", "folds": 2,
          "method": "mirroring", "weights": w}
    assert compare_fingerprints({**fp, "fold_ids": None}, {**fp, "fold_ids": ["0", "1"]}) == ("match", [])
    # the folds in another order or other checkpoints still differ (by their digests); without digests, fold_ids too
    swapped = {**fp, "fold_ids": ["1", "0"], "weights": [w[0], w[2], w[1]]}
    assert compare_fingerprints({**fp, "fold_ids": ["0", "1"]}, swapped)[0] == "mismatch"
    no_digests = {k: v for k, v in fp.items() if k != "weights"}
    assert compare_fingerprints({**no_digests, "fold_ids": None}, {**no_digests, "fold_ids": ["0", "1"]})[1] == [
        ("fold_ids", None, ["0", "1"])]


def test_a_0_1_0_measure_name_in_another_order_matches_the_current_record():
    """``max_softmax`` (0.1.0's name) listed first reads as ``one_minus_max_prob`` in the order the current version
    records (the rename and the ordering, merged from two reviews, applied in that order)."""
    from monai_unc.io.provenance import compare_fingerprints, normalize_fingerprint

    old = {"method": "mcdropout", "measures": ["max_softmax", "predictive_entropy"]}
    new = {"method": "mcdropout", "measures": ["predictive_entropy", "one_minus_max_prob"]}
    assert normalize_fingerprint(old, digests=False) == normalize_fingerprint(new, digests=False)
    assert compare_fingerprints(old, new)[0] == "match"


def test_a_numpy_integer_setting_is_the_float_the_command_line_records():
    """``overlap=np.int64(0)`` (a value read from an array) stayed ``0`` while the saved record read ``0.0``: every
    case of the resume was predicted again (found by the review of the session's change)."""
    import numpy as np

    from monai_unc.io.provenance import settings_as_compared

    got = settings_as_compared({"method": "tta", "overlap": np.int64(0), "ratein_target": np.int32(1)})
    assert got["overlap"] == 0.0 and type(got["overlap"]) is float and type(got["ratein_target"]) is float


@pytest.mark.parametrize("recorded", [dict(sample_batch_size=4), dict(share_passes=False)])
def test_a_one_sample_run_recorded_with_batching_options_resumes(tmp_path, recorded):
    # found by hostile review: infer refuses --sample-batch-size / --no-share-passes with --samples 1 now; a run an
    # earlier version left half done with them could resume neither with them (refused) nor without them
    # ("different settings"), though one draw per window has nothing to share or batch
    from monai_unc.workflows.infer import check_run_settings

    old = InferSettings(**{**_BASE, "method": "mcdropout", "samples": 1, "dropout": 0.1, "overlap": 0.25, **recorded})
    new = InferSettings(**{**_BASE, "method": "mcdropout", "samples": 1, "dropout": 0.1, "overlap": 0.25})
    (tmp_path / "infer.json").write_text(json.dumps({"settings": old.to_json()}))
    (tmp_path / "c1.json").write_text(json.dumps({"case": "c1", "method": "mcdropout", "num_samples": 1,
                                                  "mi_meaning": "epistemic", "fingerprint": case_fingerprint(old)}))
    check_run_settings(tmp_path, new)  # no ValueError
    check_finished_predictions(tmp_path, "monai-unc", ["c1"])
    assert _canonical(settings_as_compared(case_fingerprint(old))) == _canonical(case_fingerprint(new))
    # with several samples they still differ
    many = InferSettings(**{**_BASE, "method": "mcdropout", "samples": 2, "dropout": 0.1, "overlap": 0.25, **recorded})
    assert settings_as_compared(many.to_json()) != settings_as_compared(
        InferSettings(**{**_BASE, "method": "mcdropout", "samples": 2, "dropout": 0.1, "overlap": 0.25}).to_json())
