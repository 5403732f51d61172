"""``--continue_prediction`` resumes a folder made with equal settings and never reuses one made with other settings.

Before the fix a folder predicted with folds / mirroring and ``--seed`` by an earlier version (which recorded the
seed, although nothing is drawn) was predicted again in full, and a run with ``use_gaussian=False`` (uniform window
blending: other maps) reused the cases of a Gaussian run, whose settings did not record the blending.
"""

from __future__ import annotations

import json

import pytest

import monai_unc.nnunet as mun
from tests.nnunet.test_nnunet import _continuing_run, make_predictor, write_inputs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def folder(tmp_path):
    inp = tmp_path / "imagesTs"
    cases = write_inputs(inp)
    out = tmp_path / "out"
    pred = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    calls, run = _continuing_run(pred, inp, out)
    run()
    assert len(calls) == len(cases)
    return inp, out, cases


def _set_recorded(out, cases, **values):
    for case in cases:
        path = out / "uncertainty" / f"{case}.json"
        rec = json.loads(path.read_text())
        rec["settings"].update(values)
        for key in ("file_digests", "record_digest"):  # as the earlier versions simulated here wrote it: no digests
            rec.pop(key, None)
        path.write_text(json.dumps(rec))


def test_a_seed_recorded_for_sources_that_draw_nothing_resumes(folder):
    inp, out, cases = folder
    _set_recorded(out, cases, seed=42)  # as versions before the seed went unrecorded for such sources wrote it
    assert mun.recorded_case_settings(out / cases[0])["seed"] is None
    pred = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    assert mun.case_exported(out / cases[0], ".nii.gz", mun.DEFAULT_MEASURES, settings=pred.case_settings())
    pred.check_output_settings(str(inp), str(out))  # nothing refused
    calls, run = _continuing_run(pred, inp, out)
    run()
    assert calls == []  # equal settings: reused, not predicted again
    # a seed of a source that draws is a setting: another seed predicts again
    _set_recorded(out, cases, uncertainty_sources=["mirroring", "dropout"], seed=42)
    assert mun.recorded_case_settings(out / cases[0])["seed"] == 42


def test_other_window_blending_is_not_reused(folder, capsys):
    inp, out, cases = folder
    flat = make_predictor(uncertainty_sources=("mirroring",), n_folds=1, use_gaussian=False)
    assert flat.case_settings()["use_gaussian"] is False
    assert "use_gaussian" not in make_predictor(uncertainty_sources=("mirroring",), n_folds=1).case_settings()
    with pytest.raises(ValueError, match=r"1 case \(case1\) made with other settings.*use_gaussian"):
        flat.check_output_settings([[str(inp / "case0_0000.nii.gz")]], str(out))  # case1 would be left as it is
    calls, run = _continuing_run(flat, inp, out)
    capsys.readouterr()
    run()
    assert len(calls) == len(cases)  # the Gaussian run's cases are predicted again
    assert "use_gaussian" in capsys.readouterr().out
    run()
    assert len(calls) == len(cases)  # then resumed
    gauss = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    calls, run = _continuing_run(gauss, inp, out)
    run()
    assert len(calls) == len(cases)  # and back
