"""Review 61 (QC with guarantees): per-case conformal masks, the fingerprint cache, triage.json's digest and
signature, ACLs of key files, and the guarantees under repeated calibration / test splits."""

from __future__ import annotations

import builtins
import dataclasses
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.triage import FingerprintMismatch, ReferralRule, find_prediction_cases
from monai_unc.products.risk_control import RiskControl

INFER = {"settings": {"model": "toy", "checkpoints": None, "method": "mcdropout", "samples": 8,
                      "measures": ["predictive_entropy"], "roi": None, "overlap": 0.25, "activation": "softmax"},
         "multilabel": False}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    data = write_toy_cohort(tmp_path_factory.mktemp("toy61") / "A", n_cases=4, shape=(8, 8, 8), seed=1)
    (data["predictions"] / "infer.json").write_text(json.dumps(INFER))
    for i in range(4):  # the case records of a finished run
        record = {"method": "mcdropout", "num_samples": 8, "mi_meaning": "epistemic", "multilabel": False,
                  "fingerprint": INFER["settings"]}
        (data["predictions"] / f"toy{i:03d}.json").write_text(json.dumps(record))
    return data


def _rule(**kw) -> ReferralRule:
    scores = tuple(float(v) for v in np.linspace(0.0, 0.9, 12))
    return ReferralRule("predictive_entropy_fg_mean", float("inf"), True, 0.5, 0.2, "sgr", "failure", 0.8, scores,
                        tuple(f"c{i}" for i in range(12)), num_classes=2, map_source="probabilities", **kw)


def _reads_of(name: str, monkeypatch) -> list[str]:
    """Every open of a file called ``name`` (any mode), recorded."""
    seen: list[str] = []
    real_open = builtins.open

    def counting(file, *a, **k):
        if isinstance(file, (str, os.PathLike)) and Path(file).name == name:
            seen.append(str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", counting)
    monkeypatch.setattr("io.open", counting)
    return seen


# -- 2. RiskControl.apply reads the folder's fingerprint file once per version of it ------------------------------
def test_per_case_apply_reads_the_folders_infer_json_once_per_version(toy, tmp_path, monkeypatch):
    pred = tmp_path / "pred"
    shutil.copytree(toy["predictions"], pred)
    from monai_unc.io.provenance import prediction_fingerprint

    ids = [f"toy{i:03d}" for i in range(4)]
    rule = dataclasses.replace(_rule(), fingerprint=prediction_fingerprint(pred, "monai-unc", ids))
    files = find_prediction_cases(pred, rule)
    assert len(files) == 4
    seen = _reads_of("infer.json", monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(3):
            for f in files:
                RiskControl().apply(f, rule)
    # before the fix: 3 reads per call (fingerprint, regions twice), 36 in all
    assert len(seen) <= 1, len(seen)
    # the file changes (same size, the modification time set back): the change is seen, never the stale value
    st = (pred / "infer.json").stat()
    other = json.dumps({**INFER, "settings": {**INFER["settings"], "model": "tox"}})
    assert len(other) == len(json.dumps(INFER))
    (pred / "infer.json").write_text(other)
    os.utime(pred / "infer.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(FingerprintMismatch, match="model"):
            RiskControl().apply(files[0], rule)
