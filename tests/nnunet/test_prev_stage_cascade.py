"""A cascade's second stage resumed or extended with another previous stage (found by hostile review).

``--continue_prediction -prev_stage_predictions prev_zero`` after a run with ``prev_good`` kept every case computed
from the old previous stage ("predicting the 0 of 3 cases"): the records identified model and options but not the
previous stage's segmentations, so the folder mixed outputs of different inputs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

from tests.nnunet.test_nnunet import write_inputs  # noqa: E402
from tests.nnunet.test_predictor_hostile import _cascade_predictor, _predict  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _previous_stage(folder: Path, cases, value: int) -> None:
    import nibabel as nib

    folder.mkdir(parents=True, exist_ok=True)
    for c in cases:
        seg = np.zeros((16, 16, 16), np.uint8)
        if value:
            seg[4:12, 4:12, 4:12] = value
        nib.save(nib.Nifti1Image(seg, np.eye(4)), str(folder / f"{c}.nii.gz"))


def _scores(out: Path, case: str) -> dict:
    return json.loads((out / "uncertainty" / f"{case}.json").read_text())


def test_resume_predicts_again_the_cases_whose_previous_stage_changed(tmp_path, capsys):
    cases = write_inputs(tmp_path / "in", shapes=((16, 16, 16), (16, 16, 16)))
    _previous_stage(tmp_path / "good", cases, 1)
    _previous_stage(tmp_path / "zero", cases, 0)
    out = tmp_path / "out"
    _predict(_cascade_predictor(), tmp_path / "in", out, prev=str(tmp_path / "good"))
    assert all("prev_stage_digests" in _scores(out, c) for c in cases)
    capsys.readouterr()
    # a copy of the same previous stage: nothing to predict again
    shutil.copytree(tmp_path / "good", tmp_path / "copy")
    pred = _cascade_predictor()
    pred.predict_from_files(str(tmp_path / "in"), str(out), overwrite=False, num_processes_preprocessing=0,
                            num_processes_segmentation_export=0,
                            folder_with_segs_from_prev_stage=str(tmp_path / "copy"))
    assert "predicting the 0 of 2 cases" in capsys.readouterr().out
    # another previous stage: every case predicted again, and said so
    before = _scores(out, cases[0])["prev_stage_digests"]
    pred.predict_from_files(str(tmp_path / "in"), str(out), overwrite=False, num_processes_preprocessing=0,
                            num_processes_segmentation_export=0,
                            folder_with_segs_from_prev_stage=str(tmp_path / "zero"))
    log = capsys.readouterr().out
    assert "predicting the 2 of 2 cases" in log
    assert "previous-stage segmentation" in log
    after = _scores(out, cases[0])["prev_stage_digests"]
    assert before[0]["sha256"] != after[0]["sha256"]
    with open(tmp_path / "zero" / f"{cases[0]}.nii.gz", "rb") as f:
        import hashlib

        assert after[0]["sha256"] == hashlib.sha256(f.read()).hexdigest()


def test_record_of_an_earlier_version_without_previous_stage_is_predicted_again(tmp_path, capsys):
    cases = write_inputs(tmp_path / "in", shapes=((16, 16, 16),))
    _previous_stage(tmp_path / "good", cases, 1)
    out = tmp_path / "out"
    _predict(_cascade_predictor(), tmp_path / "in", out, prev=str(tmp_path / "good"))
    rec_path = out / "uncertainty" / f"{cases[0]}.json"
    rec = json.loads(rec_path.read_text())
    del rec["prev_stage_digests"]
    for key in ("file_digests", "record_digest"):  # the versions before prev_stage_digests wrote no digests either
        del rec[key]
    rec_path.write_text(json.dumps(rec))
    capsys.readouterr()
    _cascade_predictor().predict_from_files(str(tmp_path / "in"), str(out), overwrite=False,
                                            num_processes_preprocessing=0, num_processes_segmentation_export=0,
                                            folder_with_segs_from_prev_stage=str(tmp_path / "good"))
    log = capsys.readouterr().out
    assert "predicting the 1 of 1 cases" in log and "previous-stage segmentation not recorded" in log, log
    assert "prev_stage_digests" in json.loads(rec_path.read_text())


def test_folder_with_cases_of_another_previous_stage_is_refused(tmp_path):
    """Predicting one case with another previous stage into a folder that keeps the other case made from the old
    one would mix two previous stages in one folder."""
    cases = write_inputs(tmp_path / "in", shapes=((16, 16, 16), (16, 16, 16)))
    _previous_stage(tmp_path / "good", cases, 1)
    _previous_stage(tmp_path / "zero", cases, 0)
    out = tmp_path / "out"
    _predict(_cascade_predictor(), tmp_path / "in", out, prev=str(tmp_path / "good"))
    (tmp_path / "one").mkdir()
    shutil.copy(tmp_path / "in" / f"{cases[0]}_0000.nii.gz", tmp_path / "one")
    with pytest.raises(ValueError, match=f"{cases[1]}.*previous-stage segmentation"):
        _predict(_cascade_predictor(), tmp_path / "one", out, prev=str(tmp_path / "zero"))
    # the same previous stage: the other case is kept
    _predict(_cascade_predictor(), tmp_path / "one", out, prev=str(tmp_path / "good"))


# ---------------------------------------------------- options without effect on deterministic sources
@pytest.mark.parametrize("kw, name", [({"seed": 3}, "seed"), ({"num_samples": 4}, "num_samples")])
def test_sampling_options_without_a_stochastic_source_warn_and_are_not_recorded(kw, name, recwarn):
    """``--seed`` (and ``--num_samples``) with only folds / mirroring were accepted silently and the seed recorded in
    the settings, so another seed made ``--continue_prediction`` predict every case again for identical maps."""
    from tests.nnunet.test_nnunet import make_predictor

    with pytest.warns(UserWarning, match=f"{name}.*no effect"):
        pred = make_predictor(uncertainty_sources=("folds", "mirroring"), **kw)
    assert pred.run_config()["seed"] is None and pred.run_config()["num_samples"] is None
    # with a source that draws, the seed is used and recorded, and nothing is said
    recwarn.clear()
    pred = make_predictor(uncertainty_sources=("mirroring", "dropout"), dropout_p=0.1, **kw)
    assert not [w for w in recwarn if "no effect" in str(w.message)]
    assert pred.run_config()["seed"] == kw.get("seed")
