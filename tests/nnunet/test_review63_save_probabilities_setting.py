"""``--save_probabilities`` is one of the settings an output folder never mixes (review 63).

Rerunning one case of a ``--save_probabilities`` folder without the flag left 7 cases with ``<case>.npz`` and one
without, which ``evaluate`` then failed as "the number of classes is unknown". The flag is now recorded in every case
record and ``uncertainty_config.json``: the settings check refuses a run that would leave such a mix, and
``--continue_prediction`` predicts again the cases made otherwise. Records of earlier versions, without it, read as
whether their ``<case>.npz`` exists.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("nnunetv2")

from monai_unc.nnunet.export import recorded_case_settings  # noqa: E402
from tests.nnunet.test_nnunet import make_predictor, write_inputs  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]


def _predict(inp, out, save_probabilities, overwrite=True):
    predictor = make_predictor(uncertainty_sources=("mirroring",), n_folds=1)
    calls = []
    predict = predictor.predict_uncertainty_from_preprocessed_data
    predictor.predict_uncertainty_from_preprocessed_data = lambda data: calls.append(1) or predict(data)
    predictor.predict_from_files(inp, out, save_probabilities=save_probabilities, overwrite=overwrite,
                                 num_processes_preprocessing=0, num_processes_segmentation_export=0)
    return len(calls)


@pytest.fixture
def folder(tmp_path):
    inp = tmp_path / "imagesTs"
    write_inputs(inp)
    out = tmp_path / "out"
    assert _predict(str(inp), str(out), True) == 2
    return inp, out


def test_one_case_predicted_again_without_the_flag_is_refused(folder):
    inp, out = folder
    record = json.loads((out / "uncertainty" / "case0.json").read_text())
    assert record["settings"]["save_probabilities"] is True
    assert json.loads((out / "uncertainty_config.json").read_text())["save_probabilities"] is True
    with pytest.raises(ValueError, match=r"holds 1 case \(case1\) made with other settings .*save_probabilities"):
        _predict([[str(inp / "case0_0000.nii.gz")]], [str(out / "case0")], False)
    assert (out / "case0.npz").is_file() and (out / "case1.npz").is_file()  # nothing replaced


def test_continue_prediction_without_the_flag_predicts_the_cases_again(folder):
    inp, out = folder
    assert _predict(str(inp), str(out), False, overwrite=False) == 2  # made with probabilities: predicted again
    assert not list(out.glob("*.npz"))  # no case keeps the probabilities of the other settings
    assert _predict(str(inp), str(out), False, overwrite=False) == 0  # now done


def test_an_earlier_record_reads_as_whether_its_npz_exists(tmp_path):
    (tmp_path / "uncertainty").mkdir()
    for case in ("a", "b"):
        (tmp_path / "uncertainty" / f"{case}.json").write_text(json.dumps({"settings": {"num_samples": None}}))
    (tmp_path / "a.npz").write_bytes(b"")
    assert recorded_case_settings(Path(tmp_path, "a"))["save_probabilities"] is True
    assert recorded_case_settings(Path(tmp_path, "b"))["save_probabilities"] is False
