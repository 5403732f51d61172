"""``--continue_prediction`` predicts again a case whose map was replaced or edited (review 62).

``infer``'s case records keep the size and sha256 of each file (``file_digests``) and the digest of their own text
(``record_digest``); nnU-Net's case records (``uncertainty/<case>.json``) kept neither, so a map edited or replaced
since it was written (same name, same size) was kept on resume, and its scores in ``uncertainty_scores.csv`` no
longer described it. They now keep both, written and checked by the same functions as ``infer``'s
(:func:`monai_unc.io.output_digests`, :func:`monai_unc.io.changed_outputs`, :func:`monai_unc.io.record_digest`); a
record written by an earlier version, without them, is checked as before (its maps' presence only).
"""

from __future__ import annotations

import json
import shutil
import warnings

import pytest

pytest.importorskip("nnunetv2")

from monai_unc.io import file_sha256, record_digest  # noqa: E402
from tests.nnunet.test_nnunet import _continuing_run, make_predictor, write_inputs  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]

MAP = "case0_predictive_entropy.nii.gz"


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    root = tmp_path_factory.mktemp("r62")
    inp = root / "imagesTs"
    cases = write_inputs(inp)
    out = root / "out"
    calls, run = _continuing_run(make_predictor(uncertainty_sources=("mirroring",), n_folds=1), inp, out)
    run()
    assert len(calls) == len(cases)
    return inp, out


@pytest.fixture
def folder(predicted, tmp_path):
    inp, out = predicted
    shutil.copytree(out, tmp_path / "out")
    return inp, tmp_path / "out"


def _resume(inp, out):
    """Predict ``inp`` into ``out`` with ``--continue_prediction``: (cases predicted, warnings on changed files)."""
    calls, run = _continuing_run(make_predictor(uncertainty_sources=("mirroring",), n_folds=1), inp, out)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    changed = [str(w.message) for w in caught if "differ from what was written" in str(w.message)]
    return len(calls), changed


def _flip_one_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # another content of the same size: only the sha256 tells
    path.write_bytes(bytes(data))


def _edit_record(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def test_records_keep_the_digests_of_their_maps(folder):
    _, out = folder
    rec = json.loads((out / "uncertainty" / "case0.json").read_text())
    assert rec["file_digests"][MAP] == {"size": (out / "uncertainty" / MAP).stat().st_size,
                                        "sha256": file_sha256(out / "uncertainty" / MAP)}
    assert rec["record_digest"] == record_digest(rec)


def test_an_unchanged_folder_resumes(folder):
    inp, out = folder
    assert _resume(inp, out) == (0, [])


def test_a_map_replaced_with_the_same_size_is_predicted_again(folder):
    inp, out = folder
    path = out / "uncertainty" / MAP
    written = path.read_bytes()
    _flip_one_byte(path)
    assert path.stat().st_size == len(written)
    n, changed = _resume(inp, out)
    assert n == 1, "the case with the replaced map is predicted again, the other kept"
    assert len(changed) == 1 and "case 'case0'" in changed[0] and f"{MAP} (content changed)" in changed[0], changed
    assert path.read_bytes() == written  # predicted again: the map as written
    assert _resume(inp, out) == (0, [])


def test_a_record_edited_to_match_a_replaced_map_is_predicted_again(folder):
    inp, out = folder
    path = out / "uncertainty" / MAP
    written = path.read_bytes()
    _flip_one_byte(path)

    def match(doc):  # the record made to match the replaced map, its own digest left as written
        doc["file_digests"][MAP] = {"size": path.stat().st_size, "sha256": file_sha256(path)}
    _edit_record(out / "uncertainty" / "case0.json", match)
    n, changed = _resume(inp, out)
    assert n == 1 and len(changed) == 1 and "record (its text differs" in changed[0], changed
    assert path.read_bytes() == written


def test_a_map_removed_from_the_digests_is_predicted_again(folder):
    inp, out = folder

    def drop(doc):
        del doc["file_digests"][MAP]
        doc["record_digest"] = record_digest(doc)
    _edit_record(out / "uncertainty" / "case0.json", drop)
    n, changed = _resume(inp, out)
    assert n == 1 and len(changed) == 1 and f"{MAP} (no digest recorded)" in changed[0], changed


def test_a_record_as_an_earlier_version_wrote_it_is_checked_as_before(folder):
    inp, out = folder
    for case in ("case0", "case1"):  # an earlier version wrote neither digest
        _edit_record(out / "uncertainty" / f"{case}.json", lambda doc: [doc.pop("file_digests"),
                                                                         doc.pop("record_digest")])
    assert _resume(inp, out) == (0, [])  # complete: kept
    _flip_one_byte(out / "uncertainty" / MAP)
    assert _resume(inp, out) == (0, [])  # nothing to compare a map with: kept, as before
    (out / "uncertainty" / MAP).unlink()
    assert _resume(inp, out) == (1, [])  # a missing map: predicted again, as before (no warning)
    rec = json.loads((out / "uncertainty" / "case0.json").read_text())
    assert rec["record_digest"] == record_digest(rec) and MAP in rec["file_digests"]  # written by this version
