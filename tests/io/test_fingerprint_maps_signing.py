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
