"""Hostile resume checks of ``monai-unc conformal`` (review D): a saved row is reused only with the masks it describes.

A mask deleted, truncated or replaced after the run (by hand, by a crash of a copy, by another tool) must not leave a
row in ``conformal.json`` whose mask is gone or differs: the case is processed again, and the folder equals a clean
run's.
"""

from __future__ import annotations

import warnings

import nibabel as nib
import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation.conformal import ConformalRuleFile, run_conformal
from monai_unc.io import load_case, match_cases
from monai_unc.metrics.conformal import conformal_case_state, fit_conformal_rule


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformal_resume")
    a = write_toy_cohort(root / "A", n_cases=3, shape=(8, 8, 8), seed=1)
    cases = [load_case(c) for c in match_cases(a["labels"], a["predictions"])]
    rule = fit_conformal_rule([conformal_case_state(c.probs, c.label, activation="softmax", side="outer", grid=16)
                               for c in cases], 0.3)
    doc = ConformalRuleFile({"outer": rule}, {"outer": 0.3}, None, {}, [c.case_id for c in cases])
    clean = root / "clean"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_conformal(a["predictions"], doc, clean)
    return a["predictions"], doc, clean


def _masks(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*_outer.nii.gz"))}


@pytest.mark.parametrize("damage", ["delete", "truncate", "replace"])
def test_a_damaged_mask_is_written_again_on_resume(setup, tmp_path, damage):
    predictions, doc, clean = setup
    out = tmp_path / "masks"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_conformal(predictions, doc, out)
        first = sorted(out.glob("*_outer.nii.gz"))[0]
        if damage == "delete":
            first.unlink()
        elif damage == "truncate":
            first.write_bytes(first.read_bytes()[:20])
        else:  # a valid mask file of another content
            img = nib.load(first)
            nib.save(nib.Nifti1Image((1 - np.asarray(img.dataobj)).astype(np.uint8), img.affine), first)
        got = run_conformal(predictions, doc, out)
    assert got.summary["n_cases"] == 3
    assert _masks(out) == _masks(clean)
    assert (out / "conformal.csv").read_bytes() == (clean / "conformal.csv").read_bytes()


def test_a_rerun_killed_while_writing_leaves_no_earlier_summary(setup, tmp_path, monkeypatch):
    """Stopped after ``conformal.csv`` is written: no earlier ``conformal.json`` beside it."""
    from monai_unc.evaluation import conformal

    predictions, doc, _ = setup
    out = tmp_path / "masks"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_conformal(predictions, doc, out)
        monkeypatch.setattr(conformal, "atomic_write_json", killed)
        with pytest.raises(KeyboardInterrupt):
            run_conformal(predictions, doc, out)
    assert (out / "conformal.csv").is_file() and not (out / "conformal.json").exists()


def test_a_rerun_with_another_rule_stopped_midway_leaves_no_summary_of_the_earlier_rule(setup, tmp_path,
                                                                                       monkeypatch):
    """Rule A done, then rule B stopped after its first case: no ``conformal.csv`` / ``conformal.json`` of rule A may
    describe a folder whose first mask is rule B's."""
    from monai_unc.evaluation import conformal

    predictions, doc, _ = setup
    other = ConformalRuleFile({"outer": conformal.replace(doc.rules["outer"], tasks=tuple(
        conformal.replace(t, index=j, lambda_hat=j * doc.rules["outer"].step)
        for t in doc.rules["outer"].tasks for j in [4 if t.index == 8 else 8]))}, doc.targets, None, {},
        doc.calibration_cases)
    out = tmp_path / "masks"
    real, done = conformal.conformal_case, []

    def stopped(files, rule, output):
        if done:
            raise KeyboardInterrupt
        done.append(files.case_id)
        return real(files, rule, output)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        run_conformal(predictions, doc, out)
        monkeypatch.setattr(conformal, "conformal_case", stopped)
        with pytest.raises(KeyboardInterrupt):
            run_conformal(predictions, other, out)
    assert done and not (out / "conformal.csv").exists() and not (out / "conformal.json").exists()
