""":func:`monai_unc.io.read_prediction_regions` reads a folder's case records once, not once per case (review 62).

The products check each case's prediction folder (``check_prediction_fingerprint`` for every case of a cohort); when
``infer.json`` does not say whether the predictions are region-based (a run not finished, or one of an earlier version
whose records all lack ``multilabel``) every call listed the folder and parsed its case records: N cases, N x N
reads. What the records say is now kept per version of the folder and of each record read.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from monai_unc.io import cases, files, read_prediction_regions

N_CASES = 20
CALLS = 10


@pytest.fixture
def reads(monkeypatch):
    """The case records parsed (the reader the scan of the records uses), by file name."""
    seen: list[str] = []
    read = cases.read_json_or_none

    def counting(path):
        seen.append(Path(path).name)
        return read(path)

    monkeypatch.setattr(cases, "read_json_or_none", counting)
    return seen


def _backdate(*paths: Path) -> None:
    """Modification times a minute back: a later change in this test gives other times, however coarse the file
    system's clock."""
    past = time.time() - 60
    for p in paths:
        os.utime(p, (past, past))


def _folder(tmp_path: Path, multilabel: bool | None) -> Path:
    """An infer output folder whose infer.json does not say; its records carry ``multilabel`` when it is not None."""
    folder = tmp_path / "pred"
    folder.mkdir()
    (folder / "infer.json").write_text(json.dumps({"settings": {"samples": 4}}))
    (folder / "failures.json").write_text("[]")
    for i in range(N_CASES):
        rec = {"case": f"c{i:02d}", "files": [f"c{i:02d}_seg.nii.gz"]}
        if multilabel is not None:
            rec.update(multilabel=multilabel, regions={"WT": [1, 2, 4]} if multilabel else None)
        (folder / f"c{i:02d}.json").write_text(json.dumps(rec))
    _backdate(*folder.iterdir(), folder)
    return folder


@pytest.fixture
def settled(monkeypatch):
    """Take what changed a moment ago as settled (its times backdated by the test; ctime cannot be)."""
    monkeypatch.setattr(files, "SETTLE_S", -1)


@pytest.mark.usefixtures("settled")
def test_records_of_an_earlier_version_are_read_once_per_cohort(tmp_path, reads):
    folder = _folder(tmp_path, None)  # no record says: every record is read to find that out
    for _ in range(CALLS):  # as a product's apply does, once per case
        assert read_prediction_regions(folder) is None
    assert len(reads) == N_CASES, f"{len(reads)} reads of case records for {CALLS} calls"  # before: CALLS * N_CASES


@pytest.mark.usefixtures("settled")
def test_region_records_are_read_once_and_the_answer_is_a_copy(tmp_path, reads):
    folder = _folder(tmp_path, True)
    first = read_prediction_regions(folder)
    assert first == {"multilabel": True, "regions": {"WT": [1, 2, 4]}}
    first["regions"]["WT"].append(99)  # a caller's change does not reach the next caller
    for _ in range(CALLS):
        assert read_prediction_regions(folder) == {"multilabel": True, "regions": {"WT": [1, 2, 4]}}
    assert reads == ["c00.json"]


@pytest.mark.usefixtures("settled")
def test_a_record_edited_in_place_is_read_again(tmp_path, reads):
    folder = _folder(tmp_path, None)
    assert read_prediction_regions(folder) is None
    path = folder / "c07.json"
    with open(path, "r+") as f:  # in place: the folder's times do not change
        rec = json.load(f)
        rec.update(multilabel=True, regions=["0", "1"])
        f.seek(0)
        f.write(json.dumps(rec))
        f.truncate()
    assert read_prediction_regions(folder) == {"multilabel": True, "regions": ["0", "1"]}


@pytest.mark.usefixtures("settled")
def test_a_record_added_or_removed_is_read_again(tmp_path, reads):
    folder = _folder(tmp_path, None)
    assert read_prediction_regions(folder) is None
    (folder / "a_first.json").write_text(json.dumps({"multilabel": False}))
    assert read_prediction_regions(folder) is None and reads[-1] == "a_first.json"
    _backdate(folder / "a_first.json", folder)
    (folder / "a_first.json").unlink()
    (folder / "c00.json").write_text(json.dumps({"multilabel": True, "regions": None}))
    assert read_prediction_regions(folder) == {"multilabel": True, "regions": None}


@pytest.mark.usefixtures("settled")
def test_infer_json_that_says_decides_without_the_records(tmp_path, reads):
    folder = _folder(tmp_path, True)
    assert read_prediction_regions(folder)["multilabel"] is True
    (folder / "infer.json").write_text(json.dumps({"multilabel": False, "settings": {}}))  # the run finished
    assert read_prediction_regions(folder) is None


def test_a_folder_changed_just_now_is_read_every_time(tmp_path, reads):
    """A file system with coarse timestamps gives a record written within the same tick the same times: what was
    read of a folder or record changed in the last seconds is not kept."""
    folder = _folder(tmp_path, None)
    os.utime(folder)  # changed now
    for _ in range(3):
        assert read_prediction_regions(folder) is None
    assert len(reads) == 3 * N_CASES


def test_no_folder_and_an_empty_folder(tmp_path, reads):
    assert read_prediction_regions(tmp_path / "missing") is None
    (tmp_path / "file").write_text("{}")
    assert read_prediction_regions(tmp_path / "file") is None
    assert read_prediction_regions(tmp_path) is None
    assert reads == []
