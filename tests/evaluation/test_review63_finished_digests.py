"""``evaluate``, ``triage`` and ``conformal`` verify the digests of the predictions they read (review 63).

``check_finished_predictions`` compared the settings of an ``infer`` (or ``nnunet-predict``) run's case records, not
the files: a map replaced after infer under the same name (another case's, one edited by hand) was evaluated, and a
rule certified on it, with the run's fingerprint and without a word. Where a record keeps digests, the files it
lists are now checked as a resume checks them (:func:`monai_unc.io.changed_outputs`), and a case whose file differs
is refused in one line naming the case and the file (exit 2), as the folder's other inconsistencies are; a missing
file is left to the matching of the cases, and a record of an earlier version, without digests, is not checked.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from monai_unc.cli import main
from monai_unc.io import file_sha256, record_digest
from monai_unc.io.provenance import check_finished_predictions, list_prediction_cases
from tests._cases import run_toy_infer, toy_infer_files

MAP = "toy000_predictive_entropy.nii.gz"
CASES = ["toy000", "toy001"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("r63finished")
    toy = toy_infer_files(root, n_cases=2)
    pred = root / "pred"
    assert run_toy_infer(toy, pred, "--method", "mcdropout", "--seed", "0") == 0
    return {"pred": pred, "labels": root / "data" / "labels"}


@pytest.fixture
def pred(run, tmp_path) -> Path:
    shutil.copytree(run["pred"], tmp_path / "pred")
    return tmp_path / "pred"


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # another content of the same size: only the sha256 tells
    path.write_bytes(bytes(data))


def test_an_unchanged_run_passes(pred):
    check_finished_predictions(pred, "monai-unc", CASES)


def test_a_replaced_map_is_refused_naming_the_case_and_the_file(pred):
    shutil.copyfile(pred / "toy001_predictive_entropy.nii.gz", pred / MAP)  # another case's map in its place
    with pytest.raises(ValueError) as e:
        check_finished_predictions(pred, "monai-unc", CASES)
    msg = str(e.value)
    assert "\n" not in msg and "case(s) ['toy000'] have files that differ from what was written" in msg, msg
    assert f"toy000: {MAP} (" in msg and "toy001" not in msg.split("differ from what was written")[1], msg
    assert "run 'monai-unc infer' into the folder again" in msg
    check_finished_predictions(pred, "monai-unc", ["toy001"])  # the cases read decide


def test_an_edited_map_of_the_same_size_is_refused(pred):
    _flip_one_byte(pred / MAP)
    with pytest.raises(ValueError, match=rf"toy000: {MAP} \(content changed\)"):
        check_finished_predictions(pred, "monai-unc", CASES)


def test_the_listing_of_triage_and_conformal_refuses_it_too(pred):
    _flip_one_byte(pred / "toy000_seg.nii.gz")
    with pytest.raises(ValueError, match=r"toy000: toy000_seg.nii.gz \(content changed\)"):
        list_prediction_cases(pred, "monai-unc")


def test_a_record_edited_to_match_is_refused(pred):
    _flip_one_byte(pred / MAP)
    doc = json.loads((pred / "toy000.json").read_text())
    doc["file_digests"][MAP]["sha256"] = file_sha256(pred / MAP)
    (pred / "toy000.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"toy000: record \(its text differs from the digest saved in it: edited\)"):
        check_finished_predictions(pred, "monai-unc", CASES)
    doc["record_digest"] = None  # review 63: a null digest is no record of an earlier version
    (pred / "toy000.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"toy000: record \(its record_digest is null, not a digest: edited\)"):
        check_finished_predictions(pred, "monai-unc", CASES)


def test_a_missing_file_is_left_to_the_matching(pred):
    (pred / MAP).unlink()
    check_finished_predictions(pred, "monai-unc", CASES)


def test_a_record_of_an_earlier_version_is_not_checked(pred):
    _flip_one_byte(pred / MAP)
    doc = json.loads((pred / "toy000.json").read_text())
    del doc["file_digests"], doc["record_digest"]
    (pred / "toy000.json").write_text(json.dumps(doc))
    check_finished_predictions(pred, "monai-unc", CASES)
    doc["file_digests"] = {}  # digests there, the map's entry not: a record as written has it
    doc["record_digest"] = record_digest(doc)
    (pred / "toy000.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"toy000: toy000_seg.nii.gz \(no digest recorded\)"):
        check_finished_predictions(pred, "monai-unc", CASES)


def test_maps_of_another_folder_are_checked_there(pred, tmp_path):
    maps = tmp_path / "maps"
    shutil.copytree(pred, maps)
    _flip_one_byte(maps / MAP)
    with pytest.raises(ValueError, match=rf"the predictions in {maps} .*toy000: {MAP} \(content changed\)"):
        check_finished_predictions(pred, "monai-unc", CASES, uncertainty=maps)


@pytest.mark.slow
def test_evaluate_refuses_a_replaced_map_in_one_line(run, pred, tmp_path, capsys):
    shutil.copyfile(pred / "toy001_predictive_entropy.nii.gz", pred / MAP)
    out = tmp_path / "eval"
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rc = main(["evaluate", "-l", str(run["labels"]), "-p", str(pred), "-o", str(out), "--no-spatial", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"monai-unc evaluate: error: the predictions in {pred} are not one finished "), err
    assert f"toy000: {MAP} (size" in err[0] or f"toy000: {MAP} (content changed)" in err[0], err
    assert not (out / "metrics.csv").exists()
