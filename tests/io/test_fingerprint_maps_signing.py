"""A signed rule applied to maps read from another folder (``--uncertainty``) must check that folder's run too.

Found by hostile testing: ``monai-unc triage -p NEW --uncertainty OTHER`` read its scores from the maps of ``OTHER``
(another ``infer`` run: 24 samples per case where the rule was certified on 16) while the fingerprint was read from
``NEW`` alone, so the rule was applied, "fingerprint match", to maps it was not certified for.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from monai_unc import cli
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import RULE_FILE
from monai_unc.io.provenance import compare_fingerprints, prediction_fingerprint

_SETTINGS = {"model": "network: UNet", "method": "mcdropout", "samples": 4, "roi": None, "overlap": 0.25,
             "intensity": "none", "measures": ["predictive_entropy"], "seed": 0, "activation": "softmax",
             "checkpoints": ["/models/net.pt"], "tta_noise": 0.0, "ratein_target": 0.1, "dropout": None,
             "temperature": None}


def _record(folder: Path, samples: int, cases: list[str], seed: int = 0) -> None:
    """``infer``'s records of a run with ``samples`` dropout samples in ``folder``."""
    settings = {**_SETTINGS, "samples": samples, "seed": seed}
    (folder / "infer.json").write_text(json.dumps({"settings": settings}))
    for c in cases:
        (folder / f"{c}.json").write_text(json.dumps({"case": c, "method": "mcdropout", "num_samples": samples,
                                                      "mi_meaning": "epistemic", "fingerprint": settings}))


def test_maps_of_another_run_are_fingerprinted(tmp_path):
    pred, same, other, bare = (tmp_path / n for n in ("pred", "same", "other", "bare"))
    for folder in (pred, same, other, bare):
        folder.mkdir()
    _record(pred, 4, ["a", "b"])
    _record(same, 4, ["a", "b"], seed=7)  # another seed: the same settings
    _record(other, 8, ["a", "b"])
    fp = prediction_fingerprint(pred, case_ids=["a", "b"])
    assert prediction_fingerprint(pred, case_ids=["a", "b"], uncertainty=pred) == fp
    assert prediction_fingerprint(pred, case_ids=["a", "b"], uncertainty=same) == fp
    mixed = prediction_fingerprint(pred, case_ids=["a", "b"], uncertainty=other)
    assert mixed["maps"]["num_samples"] == 8
    assert compare_fingerprints(fp, mixed) == ("mismatch", [("maps.num_samples", 4, 8)])
    unknown = prediction_fingerprint(pred, case_ids=["a", "b"], uncertainty=bare)
    status, diffs = compare_fingerprints(fp, unknown)
    assert status == "mismatch" and diffs[0] == ("maps.producer", "monai-unc infer", "unknown")
    # a rule certified on maps of another run matches new predictions made the same two ways, and only those
    assert compare_fingerprints(mixed, prediction_fingerprint(same, case_ids=["a"], uncertainty=other)) == \
        ("match", [])
    status, diffs = compare_fingerprints(mixed, prediction_fingerprint(other, case_ids=["a"]))
    assert status == "mismatch" and ("num_samples", 4, 8) in diffs
    # neither side has records: not comparable, as before
    assert compare_fingerprints({"producer": "unknown"},
                                prediction_fingerprint(bare, uncertainty=tmp_path)) == ("unverified", [])


@pytest.mark.slow
def test_triage_refuses_maps_of_another_run(tmp_path, monkeypatch, capsys):
    """End to end: a signed rule, new predictions made like its calibration predictions, and ``--uncertainty`` naming
    maps made with other settings: one line naming the difference, exit 2, no outputs."""
    monkeypatch.delenv("MONAI_UNC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MONAI_UNC_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "config"))
    cal = write_toy_cohort(tmp_path / "cal", n_cases=12, shape=(12, 12, 12), seed=1)
    new = write_toy_cohort(tmp_path / "new", n_cases=2, shape=(12, 12, 12), seed=2)
    ids = sorted(p.name[: -len("_seg.nii.gz")] for p in Path(new["predictions"]).glob("*_seg.nii.gz"))
    _record(Path(cal["predictions"]), 4, sorted(p.name[: -len("_seg.nii.gz")]
                                                for p in Path(cal["predictions"]).glob("*_seg.nii.gz")))
    _record(Path(new["predictions"]), 4, ids)
    other = tmp_path / "other"
    shutil.copytree(new["predictions"], other)
    _record(other, 8, ids)
    ev = tmp_path / "eval"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(cal["labels"]), "-p", str(cal["predictions"]), "-o", str(ev),
                         "--no-spatial", "--target-risk", "0.4", "--delta", "0.2", "-q"]) == 0
        triage = ["triage", "-p", str(new["predictions"]), "--rule", str(ev / RULE_FILE), "-q"]
        assert cli.main([*triage, "-o", str(tmp_path / "ok"), "--uncertainty", str(new["predictions"])]) == 0
        capsys.readouterr()
        rc = cli.main([*triage, "-o", str(tmp_path / "t"), "--uncertainty", str(other)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "maps.num_samples: 8 (rule: 4)" in err[0], err
    assert not (tmp_path / "t" / "triage.json").exists()


def _nnunet_folder(root: Path, records: Path, dropout_p: float, record_dropout_p: float) -> None:
    """An ``nnunet-predict`` config in ``root`` and a case record with settings in ``records``."""
    import nibabel as nib
    import numpy as np

    root.mkdir(parents=True, exist_ok=True)
    records.mkdir(parents=True, exist_ok=True)
    seg = np.zeros((4, 4, 4), np.uint8)
    seg[1:3, 1:3, 1:3] = 1
    nib.save(nib.Nifti1Image(seg, np.eye(4)), root / "c1.nii.gz")
    (root / "uncertainty_config.json").write_text(json.dumps(
        {"trainer_name": "T", "folds": [0], "uncertainty_sources": ["mcdropout"], "num_samples": 8,
         "dropout_p": dropout_p, "measures": ["predictive_entropy"]}))
    (records / "c1.json").write_text(json.dumps(
        {"num_samples": 8, "mi_meaning": "epistemic",
         "settings": {"uncertainty_sources": ["mcdropout"], "num_samples": 8, "dropout_p": record_dropout_p}}))
    nib.save(nib.Nifti1Image(np.full((4, 4, 4), 0.1, np.float32), np.eye(4)),
             records / "c1_predictive_entropy.nii.gz")


def test_nnunet_records_in_the_uncertainty_folder_are_checked_against_the_config(tmp_path):
    """nnU-Net layout: the records beside maps read from ``--uncertainty`` were never compared with the
    predictions' ``uncertainty_config.json`` (only ``<predictions>/uncertainty/`` was), so maps made with another
    dropout rate (same number of samples) matched a rule certified with the config's; now one line names the
    setting. Records that agree still pass."""
    from monai_unc.io.provenance import check_finished_predictions, list_prediction_cases

    pred, other = tmp_path / "pred", tmp_path / "other_maps"
    _nnunet_folder(pred, other, dropout_p=0.1, record_dropout_p=0.3)
    with pytest.raises(ValueError, match=r"not one finished 'monai-unc nnunet-predict' run: .*dropout_p"):
        check_finished_predictions(pred, "nnunet", ["c1"], uncertainty=other)
    with pytest.raises(ValueError, match="dropout_p"):
        list_prediction_cases(pred, "nnunet", uncertainty=other)
    same = tmp_path / "same_maps"
    _nnunet_folder(tmp_path / "pred2", same, dropout_p=0.1, record_dropout_p=0.1)
    assert [f.case_id for f in list_prediction_cases(tmp_path / "pred2", "nnunet", uncertainty=same)] == ["c1"]


def test_an_unfinished_infer_run_of_the_maps_is_refused(tmp_path):
    """``monai-unc`` layout: the maps' folder is an ``infer`` run of its own; one of its cases without a record (an
    interrupted case) is refused like in the predictions' folder."""
    from monai_unc.io.provenance import check_finished_predictions

    pred, maps = tmp_path / "pred", tmp_path / "maps"
    pred.mkdir()
    maps.mkdir()
    _record(pred, 4, ["a", "b"])
    _record(maps, 4, ["a"])
    check_finished_predictions(pred, "monai-unc", ["a", "b"])
    check_finished_predictions(pred, "monai-unc", ["a", "b"], uncertainty=pred)
    with pytest.raises(ValueError, match=r"predictions in .*maps are not one finished 'monai-unc infer' run"):
        check_finished_predictions(pred, "monai-unc", ["a", "b"], uncertainty=maps)


def test_predictions_without_records_stay_unverified_with_maps_of_a_known_run(tmp_path):
    """review38: segmentations of no known producer scored with the maps of a recorded run compared "match" (the
    maps' run alone was compared), so triage showed no "cannot be checked" banner for predictions it never checked."""
    bare, maps = tmp_path / "bare", tmp_path / "maps"
    bare.mkdir()
    maps.mkdir()
    _record(maps, 4, ["a", "b"])
    fp = prediction_fingerprint(bare, case_ids=["a", "b"], uncertainty=maps)
    assert fp["producer"] == "unknown" and fp["maps"]["num_samples"] == 4
    assert compare_fingerprints(fp, fp) == ("unverified", [])
    other = tmp_path / "other"
    other.mkdir()
    _record(other, 8, ["a"])
    status, diffs = compare_fingerprints(fp, prediction_fingerprint(bare, case_ids=["a"], uncertainty=other))
    assert status == "mismatch" and ("maps.num_samples", 4, 8) in diffs  # a difference still shows
