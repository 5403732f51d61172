"""Hostile resume checks of ``monai-unc evaluate`` (review D): what a rerun into the same folder must not reuse.

A per-case state is reused only while everything its row depends on is unchanged (:func:`case_fingerprint`); the
label values given to the segments of a DICOM SEG label (``--seg-label-values``) are read into the label map, so
another value list must evaluate the case again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig
from monai_unc.evaluation.resume import case_fingerprint
from monai_unc.io import match_cases


@pytest.fixture
def files(tmp_path) -> list:
    paths = write_toy_cohort(tmp_path / "cohort", n_cases=1, shape=(8, 8, 8))
    return match_cases(paths["labels"], paths["predictions"])


def _config(**kw) -> EvaluationConfig:
    c = EvaluationConfig(spatial=False, **kw)
    c.validate()
    return c


def test_seg_label_values_enter_the_fingerprint(files):
    f = files[0]
    plain = case_fingerprint(f, _config())
    a = case_fingerprint(f, _config(seg_label_values=[1, 2, 4]))
    b = case_fingerprint(f, _config(seg_label_values=[1, 2, 3]))
    assert a != plain and a != b and b != plain
    assert a == case_fingerprint(f, _config(seg_label_values=[1, 2, 4]))
    assert "seg_label_values" not in plain["config"]  # an evaluation without them keeps its fingerprint


def test_seg_label_values_change_is_not_resumed(files, tmp_path, monkeypatch):
    """A SEG label evaluated with ``1,2,4`` and then ``1,2,3`` into the same state folder is evaluated again."""
    from monai_unc.evaluation import case as case_mod
    from monai_unc.evaluation.runner import evaluate_shard

    calls: list[str] = []
    real = case_mod.evaluate_case

    def counting(loaded, config):
        calls.append(str(loaded.case_id))
        return real(loaded, config)

    monkeypatch.setattr("monai_unc.evaluation.runner.evaluate_case", counting)
    cache = tmp_path / "state"
    evaluate_shard(files, _config(seg_label_values=[1, 2, 4]), cache=cache)
    evaluate_shard(files, _config(seg_label_values=[1, 2, 4]), cache=cache)
    assert len(calls) == 1  # resumed
    evaluate_shard(files, _config(seg_label_values=[1, 2, 3]), cache=cache)
    assert len(calls) == 2  # evaluated again with the other values
    shutil.rmtree(Path(cache))



@pytest.mark.slow
def test_a_rerun_killed_while_writing_leaves_no_earlier_cohort_file(tmp_path, monkeypatch):
    """A rerun with another option killed while it writes its cohort files (after ``state/``, before ``metrics.csv``)
    must not leave the earlier run's ``metrics.csv`` / ``summary.json`` / ``referral_rule.json`` beside its state:
    ``report`` and ``triage`` would read two runs as one. What is left is either this run's or nothing."""
    import warnings

    from monai_unc.cli import main
    from monai_unc.evaluation import cohort as cohort_mod

    paths = write_toy_cohort(tmp_path / "cohort", n_cases=3, shape=(8, 8, 8))
    out = tmp_path / "out"
    argv = ["evaluate", "-l", str(paths["labels"]), "-p", str(paths["predictions"]), "--no-spatial", "-q",
            "--target-risk", "0.5", "-o", str(out)]
    real = cohort_mod.write_csv

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main(argv) == 0
        earlier = {n: (out / n).read_bytes() for n in ("metrics.csv", "summary.json", "referral_rule.json")}
        monkeypatch.setattr(cohort_mod, "write_csv", killed)
        assert main([*argv, "--n-bins", "7"]) == 130  # interrupted while writing
        monkeypatch.setattr(cohort_mod, "write_csv", real)
    left = {n: (out / n).read_bytes() for n in earlier if (out / n).is_file()}
    assert not [n for n in left if left[n] == earlier[n]], sorted(left)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main([*argv, "--n-bins", "7"]) == 0  # the same command again: complete
    assert json.loads((out / "summary.json").read_text())["config"]["n_bins"] == 7
