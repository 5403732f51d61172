"""``--continue_prediction`` predicts again a case whose segmentation, ``.npz`` or spacing sidecar changed (review 63).

Review 62 gave nnU-Net's case records the digests of their maps; the segmentation ``<case><ending>``, the
probabilities ``<case>.npz`` (and ``<case>.pkl``) and the spacing files ``Tiff3DIO`` writes beside a ``.tif``
(``<name>.json``) were still checked for presence only, so one of them replaced or truncated (same name) was kept by
a resume. The record now keeps their size and sha256 too: the segmentation's and the probabilities' under
``prediction_file_digests`` (names in the output folder), the maps' sidecars with the maps under ``file_digests``.
A record of the previous version, without ``prediction_file_digests``, is checked as before.
"""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest

pytest.importorskip("nnunetv2")

from nnunetv2.imageio.tif_reader_writer import Tiff3DIO  # noqa: E402

from monai_unc.io import file_sha256, record_digest  # noqa: E402
from tests.nnunet.test_nnunet import DATASET_JSON, make_plans, make_predictor, write_inputs  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]

SEG, NPZ, PKL = "case0.nii.gz", "case0.npz", "case0.pkl"


def _run(inp, out, save_probabilities=True, **kw):
    """Predict ``inp`` into ``out`` with ``--continue_prediction``: (cases predicted, warnings on changed files)."""
    dataset_json = kw.pop("dataset_json", None)
    predictor = make_predictor(uncertainty_sources=("mirroring",), n_folds=1, **kw)
    if dataset_json is not None:
        predictor.dataset_json = dataset_json
    calls = []
    predict = predictor.predict_uncertainty_from_preprocessed_data

    def counting(data):
        calls.append(tuple(data.shape))
        return predict(data)

    predictor.predict_uncertainty_from_preprocessed_data = counting
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        predictor.predict_from_files(str(inp), str(out), save_probabilities=save_probabilities, overwrite=False,
                                     num_processes_preprocessing=0, num_processes_segmentation_export=0)
    changed = [str(w.message) for w in caught if "differ from what was written" in str(w.message)]
    return len(calls), changed


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    root = tmp_path_factory.mktemp("r63")
    inp = root / "imagesTs"
    cases = write_inputs(inp)
    out = root / "out"
    assert _run(inp, out) == (len(cases), [])
    return inp, out


@pytest.fixture
def folder(predicted, tmp_path):
    inp, out = predicted
    shutil.copytree(out, tmp_path / "out")
    return inp, tmp_path / "out"


def _flip_one_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # another content of the same size: only the sha256 tells
    path.write_bytes(bytes(data))


def _edit_record(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_records_keep_the_digests_of_the_segmentation_and_probabilities(folder):
    _, out = folder
    rec = json.loads((out / "uncertainty" / "case0.json").read_text())
    assert sorted(rec["prediction_file_digests"]) == [SEG, NPZ, PKL]
    for name in (SEG, NPZ, PKL):
        assert rec["prediction_file_digests"][name] == {"size": (out / name).stat().st_size,
                                                        "sha256": file_sha256(out / name)}
    assert rec["record_digest"] == record_digest(rec)
    assert not list(out.rglob(".*")), "temporary files left behind"


def test_an_unchanged_folder_resumes(folder):
    inp, out = folder
    assert _run(inp, out) == (0, [])


@pytest.mark.parametrize("name", [SEG, NPZ, PKL])
def test_a_file_replaced_with_the_same_size_is_predicted_again(folder, name):
    inp, out = folder
    written = (out / name).read_bytes()
    _flip_one_byte(out / name)
    n, changed = _run(inp, out)
    assert n == 1, "the case with the replaced file is predicted again, the other kept"
    assert len(changed) == 1 and "case 'case0'" in changed[0] and f"{name} (content changed)" in changed[0], changed
    if name != PKL:  # (a pickle of the same properties may differ in its bytes)
        assert (out / name).read_bytes() == written  # predicted again: the file as written
    assert _run(inp, out) == (0, [])


def test_a_truncated_segmentation_and_another_cases_npz_are_predicted_again(folder):
    inp, out = folder
    seg = out / SEG
    seg.write_bytes(seg.read_bytes()[:-10])
    shutil.copyfile(out / "case1.npz", out / "case1_copy.npz")
    shutil.copyfile(out / "case1.npz", out / NPZ)  # case1's probabilities under case0's name
    n, changed = _run(inp, out)
    assert n == 1 and len(changed) == 1 and f"{SEG} (size" in changed[0], changed
    rec = json.loads((out / "uncertainty" / "case0.json").read_text())
    assert file_sha256(out / NPZ) == rec["prediction_file_digests"][NPZ]["sha256"] != file_sha256(
        out / "case1_copy.npz")


def test_probabilities_are_not_checked_without_save_probabilities(folder):
    inp, out = folder
    _flip_one_byte(out / NPZ)  # not read by a run without --save_probabilities: no warning of a changed file
    # but the cases were made with --save_probabilities, a setting since review 63: predicted again without it
    assert _run(inp, out, save_probabilities=False) == (2, [])


def test_a_record_of_the_previous_version_is_checked_as_before(folder):
    inp, out = folder
    for case in ("case0", "case1"):  # review 62's records: map digests and record digest, no prediction digests

        def old(doc):
            doc.pop("prediction_file_digests")
            doc["record_digest"] = record_digest(doc)
        _edit_record(out / "uncertainty" / f"{case}.json", old)
    assert _run(inp, out) == (0, [])  # complete: kept
    _flip_one_byte(out / SEG)
    assert _run(inp, out) == (0, [])  # nothing to compare the segmentation with: kept, as before
    (out / NPZ).unlink()
    assert _run(inp, out) == (1, [])  # a missing .npz: predicted again, as before (no warning)
    rec = json.loads((out / "uncertainty" / "case0.json").read_text())
    assert rec["record_digest"] == record_digest(rec) and SEG in rec["prediction_file_digests"]  # this version's


def test_prediction_digests_removed_from_a_record_with_its_digest_kept_are_an_edit(folder):
    inp, out = folder
    _flip_one_byte(out / SEG)
    _edit_record(out / "uncertainty" / "case0.json", lambda doc: doc.pop("prediction_file_digests"))
    n, changed = _run(inp, out)
    assert n == 1 and len(changed) == 1 and "record (its text differs" in changed[0], changed


def test_a_null_record_digest_is_an_edited_record(folder):
    inp, out = folder
    _flip_one_byte(out / SEG)

    def null(doc):
        doc["prediction_file_digests"][SEG]["sha256"] = file_sha256(out / SEG)
        doc["record_digest"] = None
    _edit_record(out / "uncertainty" / "case0.json", null)
    n, changed = _run(inp, out)
    assert n == 1 and len(changed) == 1 and "record_digest is null, not a digest: edited" in changed[0], changed


# ---------------------------------------------------------------------------------------- Tiff3DIO's spacing files
@pytest.fixture(scope="module")
def tiff_predicted(tmp_path_factory):
    import tifffile

    root = tmp_path_factory.mktemp("r63tif")
    inp = root / "in"
    inp.mkdir()
    img = np.random.default_rng(0).normal(size=(12, 14, 16)).astype(np.float32) + 2.0
    tifffile.imwrite(str(inp / "case0_0000.tif"), img)
    (inp / "case0.json").write_text(json.dumps({"spacing": [2.0, 1.0, 1.0]}))
    plans = make_plans(spacing=(2.0, 1.0, 1.0))
    plans["image_reader_writer"] = "Tiff3DIO"
    kw = {"plans": plans, "dataset_json": dict(DATASET_JSON, file_ending=".tif")}
    out = root / "out"
    assert _run(inp, out, **kw) == (1, [])
    return inp, out, kw


@pytest.fixture
def tiff_folder(tiff_predicted, tmp_path):
    inp, out, kw = tiff_predicted
    shutil.copytree(out, tmp_path / "out")
    return inp, tmp_path / "out", kw


def test_tiff_spacing_files_are_digested(tiff_folder):
    _, out, _ = tiff_folder
    rec = json.loads((out / "uncertainty" / "case0.json").read_text())
    assert sorted(rec["prediction_file_digests"]) == ["case0.json", NPZ, PKL, "case0.tif"]
    sidecars = sorted(n for n in rec["file_digests"] if n.endswith(".json"))
    assert sidecars == sorted(f"{m[:-len('.tif')]}.json" for m in rec["maps"].values()), rec["file_digests"]
    for name in sidecars:
        assert json.loads((out / "uncertainty" / name).read_text()) == {"spacing": [2.0, 1.0, 1.0]}
    assert Tiff3DIO().read_seg(str(out / "case0.tif"))[1]["spacing"] == [2.0, 1.0, 1.0]


@pytest.mark.parametrize("where", ["segmentation", "map"])
def test_an_edited_tiff_spacing_file_is_predicted_again(tiff_folder, where):
    inp, out, kw = tiff_folder
    rec = json.loads((out / "uncertainty" / "case0.json").read_text())
    name = "case0.json" if where == "segmentation" else sorted(
        n for n in rec["file_digests"] if n.endswith(".json"))[0]
    path = out / name if where == "segmentation" else out / "uncertainty" / name
    written = path.read_text()
    path.write_text(json.dumps({"spacing": [1.0, 1.0, 1.0]}))  # the map read back on another grid
    n, changed = _run(inp, out, **kw)
    assert n == 1 and len(changed) == 1 and f"{name} (" in changed[0], changed
    assert path.read_text() == written
    path.unlink()
    n, changed = _run(inp, out, **kw)
    assert n == 1 and len(changed) == 1 and f"{name} (missing)" in changed[0], changed


# ------------------------------------------------------------------ evaluate / triage reading an nnU-Net folder
@pytest.mark.parametrize("name", ["uncertainty/case0_predictive_entropy.nii.gz", SEG, NPZ])
def test_evaluate_and_triage_refuse_a_file_changed_since_naming_it(folder, name):
    from monai_unc.io.provenance import check_finished_predictions

    _, out = folder
    check_finished_predictions(out, "nnunet", ["case0", "case1"])
    _flip_one_byte(out / name)
    with pytest.raises(ValueError) as e:
        check_finished_predictions(out, "nnunet", ["case0", "case1"])
    msg = str(e.value)
    assert "\n" not in msg and "case(s) ['case0'] have files that differ from what was written" in msg, msg
    assert f"case0: {name.split('/')[-1]} (content changed)" in msg and "--continue_prediction" in msg, msg
    check_finished_predictions(out, "nnunet", ["case1"])


def test_maps_read_from_another_folder_are_checked_there_alone(folder, tmp_path):
    from monai_unc.io.provenance import check_finished_predictions

    _, out = folder
    maps = tmp_path / "maps"
    shutil.copytree(out / "uncertainty", maps)
    _flip_one_byte(out / SEG)  # the segmentation of predictions: not the run the records in maps/ describe
    check_finished_predictions(out, "nnunet", ["case0", "case1"], uncertainty=maps)
    _flip_one_byte(maps / "case0_predictive_entropy.nii.gz")
    with pytest.raises(ValueError, match=r"case0: case0_predictive_entropy.nii.gz \(content changed\)"):
        check_finished_predictions(out, "nnunet", ["case0", "case1"], uncertainty=maps)
