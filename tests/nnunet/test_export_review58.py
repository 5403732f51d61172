"""Hostile review 58 of ``write_scores_table``: files in ``uncertainty/`` that are no case record are skipped."""

from __future__ import annotations

import json
import os
import threading

import pytest

pytest.importorskip("nnunetv2")

from monai_unc.nnunet.export import write_scores_table  # noqa: E402

RECORD = {"case": "case1", "num_samples": 8, "foreground_voxels": 3,
          "scores": {"predictive_entropy": {"mean": 0.25, "fg_mean": 0.5}}}


def _records(tmp_path):
    unc = tmp_path / "uncertainty"
    unc.mkdir()
    (unc / "case1.json").write_text(json.dumps(RECORD))
    return unc


def test_a_json_file_that_is_no_record_is_skipped(tmp_path):
    """An invalid JSON file (an editor's backup, a truncated copy) beside the records failed the table with a
    JSONDecodeError traceback after every case was predicted; a record whose scores are no object with an
    AttributeError."""
    unc = _records(tmp_path)
    (unc / "notes.json").write_text("{not json")
    (unc / "other.json").write_text(json.dumps({"case": "x", "scores": [1, 2]}))
    path = write_scores_table(tmp_path)
    assert path.read_text().splitlines() == [
        "case,num_samples,foreground_voxels,predictive_entropy_mean,predictive_entropy_fg_mean", "case1,8,3,0.25,0.5"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs")
def test_a_fifo_named_like_a_record_is_not_read(tmp_path):
    """A FIFO named ``*.json`` in ``uncertainty/`` was opened and read: the table's write never ended."""
    unc = _records(tmp_path)
    fifo = unc / "planted.json"
    os.mkfifo(fifo)
    done = []
    worker = threading.Thread(target=lambda: done.append(write_scores_table(tmp_path)), daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():  # unblock the read so that the thread ends, then fail
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        worker.join(timeout=20)
    assert done and done[0] is not None, "write_scores_table blocked on the FIFO"
    assert done[0].read_text().splitlines()[1] == "case1,8,3,0.25,0.5"
